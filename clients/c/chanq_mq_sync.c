/* chanq_mq_sync.c - blocking durable-topic client over POSIX sockets (see chanq_mq_sync.h). */
#include "chanq_mq_sync.h"

#include "cq_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The answer slot of the call in progress. */
typedef struct call {
    bool done;
    int err;
    cq_mq_msg_t *resp;
} call_t;

typedef struct pushq {
    cq_mq_msg_t **v;
    size_t head, len, cap; /* ring */
} pushq_t;

struct chanq_mq_sync {
    int fd;
    int timeout_ms;
    int dead; /* sticky stream / socket error, 0 while usable */
    chanq_mq_t *core;
    pushq_t pushes;
    bool pushed; /* a push was queued since chanq_mq_sync_wait_push() last looked */
    uint32_t errcode;
    char errmsg[CQ_MQ_ERR_MSG_MAX + 64];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ms left until deadline (-1: none) for poll(). */
static int left_ms(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t l = deadline - now_ms();
    return l < 0 ? 0 : (int)(l > 1000000 ? 1000000 : l);
}

/* ---- push queue ---------------------------------------------------------------------------- */

static int pushq_put(pushq_t *q, cq_mq_msg_t *m)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 16;
        cq_mq_msg_t **v = cq_malloc(ncap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < q->len; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        cq_free(q->v);
        q->v = v;
        q->cap = ncap;
        q->head = 0;
    }
    q->v[(q->head + q->len++) % q->cap] = m;
    return 0;
}

static cq_mq_msg_t *pushq_get(pushq_t *q)
{
    if (q->len == 0)
        return NULL;
    cq_mq_msg_t *m = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return m;
}

/* Pushes of watched topics, and anything unsolicited with a topic, go to the queue. */
static void on_push(chanq_mq_t *core, cq_mq_msg_t *m, void *ud)
{
    chanq_mq_sync_t *s = ud;
    (void)core;
    if (m->type != CQ_MQ_PUSH || pushq_put(&s->pushes, m) < 0)
        cq_mq_msg_free(m);
    else
        s->pushed = true;
}

static void on_done(chanq_mq_t *core, int err, cq_mq_msg_t *resp, void *ud)
{
    call_t *c = ud;
    (void)core;
    c->done = true;
    c->err = err;
    c->resp = resp;
}

/* ---- I/O ----------------------------------------------------------------------------------- */

static int set_dead(chanq_mq_sync_t *s, int err)
{
    if (!s->dead)
        s->dead = err;
    chanq_mq_fail_all(s->core, err);
    return err;
}

static int do_write(chanq_mq_sync_t *s)
{
    size_t n;
    const uint8_t *p = chanq_mq_out(s->core, &n);
    while (n > 0) {
        ssize_t k = send(s->fd, p, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return set_dead(s, -errno);
        }
        chanq_mq_out_consume(s->core, (size_t)k);
        p = chanq_mq_out(s->core, &n);
    }
    return 0;
}

static int do_read(chanq_mq_sync_t *s)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t k = recv(s->fd, buf, sizeof(buf), 0);
        if (k == 0)
            return set_dead(s, CQ_ECLOSED);
        if (k < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return set_dead(s, -errno);
        }
        int r = chanq_mq_feed(s->core, buf, (size_t)k);
        if (r < 0)
            return set_dead(s, r);
    }
}

/* Runs I/O until *done is true or the deadline (-1: none) passes. */
static int pump(chanq_mq_sync_t *s, const bool *done, int64_t deadline)
{
    for (;;) {
        if (*done)
            return 0;
        if (s->dead)
            return s->dead;
        int r = do_write(s);
        if (r < 0)
            return r;
        size_t n;
        chanq_mq_out(s->core, &n);
        struct pollfd p = {s->fd, (short)(POLLIN | (n ? POLLOUT : 0)), 0};
        int tmo = left_ms(deadline);
        int k = poll(&p, 1, tmo);
        if (k < 0 && errno != EINTR)
            return set_dead(s, -errno);
        if (k > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
            r = do_read(s);
            if (r < 0 && !*done)
                return r;
        }
        if (k == 0 && !*done)
            return CQ_ETIMEOUT;
    }
}

/* ---- calls --------------------------------------------------------------------------------- */

static void set_errmsg(chanq_mq_sync_t *s, int err, const cq_mq_msg_t *resp)
{
    s->errcode = resp ? resp->err_code : 0;
    if (resp && resp->err_msg)
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", resp->err_msg);
    else if (resp)
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", cq_mq_errcode_name((int)resp->err_code));
    else
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", cq_strerror(err));
}

/* Waits for the answer of the request just queued (askid); *ret_resp gets it on success (NULL:
 * freed here). */
static int finish(chanq_mq_sync_t *s, call_t *c, uint32_t askid, cq_mq_msg_t **ret_resp)
{
    int r = pump(s, &c->done, s->timeout_ms < 0 ? -1 : now_ms() + s->timeout_ms);
    if (!c->done) {
        chanq_mq_cancel(s->core, askid);
        set_errmsg(s, r, NULL);
        return r;
    }
    r = c->err;
    if (r < 0)
        set_errmsg(s, r, c->resp);
    if (r == 0) {
        s->errcode = 0;
        s->errmsg[0] = '\0';
    }
    if (r == 0 && ret_resp)
        *ret_resp = c->resp;
    else
        cq_mq_msg_free(c->resp);
    return r;
}

/* Checks the result of queueing a request. */
static int queued(chanq_mq_sync_t *s, int r)
{
    if (r < 0)
        set_errmsg(s, r, NULL);
    else if (s->dead)
        r = s->dead;
    return r;
}

int chanq_mq_sync_keepalive_resp(chanq_mq_sync_t *s, cq_mq_msg_t **ret_resp)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_keepalive(s->core, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, ret_resp);
}

int chanq_mq_sync_keepalive(chanq_mq_sync_t *s, uint32_t *ret_weight)
{
    cq_mq_msg_t *resp = NULL;
    int r = chanq_mq_sync_keepalive_resp(s, &resp);
    if (r == 0 && ret_weight)
        *ret_weight = resp->weight;
    cq_mq_msg_free(resp);
    return r;
}

int chanq_mq_sync_add_topic(chanq_mq_sync_t *s, const char *topic)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_add_topic(s->core, topic, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, NULL);
}

int chanq_mq_sync_produce(chanq_mq_sync_t *s, const chanq_mq_produce_t *req, int64_t *ret_offsets)
{
    call_t c = {0};
    uint32_t id = 0;
    cq_mq_msg_t *resp = NULL;
    int r = queued(s, chanq_mq_produce(s->core, req, on_done, &c, &id));
    if (r == 0)
        r = finish(s, &c, id, &resp);
    if (r == 0 && resp->noffsets != req->n) {
        snprintf(s->errmsg, sizeof(s->errmsg), "produce_resp: %zu offsets for %zu messages",
                 resp->noffsets, req->n);
        r = -EPROTO;
    }
    if (r == 0 && ret_offsets)
        memcpy(ret_offsets, resp->offsets, req->n * sizeof(*ret_offsets));
    cq_mq_msg_free(resp);
    return r;
}

int chanq_mq_sync_produce1(chanq_mq_sync_t *s, const char *topic, const char *content,
                           int64_t *ret_offset)
{
    chanq_mq_content_t m = {content, strlen(content), false, -1};
    chanq_mq_produce_t req = {topic, &m, 1, 0, -1, -1};
    return chanq_mq_sync_produce(s, &req, ret_offset);
}

int chanq_mq_sync_consume(chanq_mq_sync_t *s, const char *topic, int64_t offset, uint32_t max_count,
                          cq_mq_msg_t **ret_resp)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_consume(s->core, topic, offset, max_count, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, ret_resp);
}

int chanq_mq_sync_commit(chanq_mq_sync_t *s, const char *topic, int64_t offset)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_commit(s->core, topic, offset, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, NULL);
}

int chanq_mq_sync_set_instance(chanq_mq_sync_t *s, const char *instance)
{
    return s ? chanq_mq_set_instance(s->core, instance) : -EINVAL;
}

int chanq_mq_sync_offset(chanq_mq_sync_t *s, const char *topic, int64_t *ret_offset,
                         bool *ret_committed, int64_t *ret_last_offset)
{
    call_t c = {0};
    uint32_t id = 0;
    cq_mq_msg_t *resp = NULL;
    int r = queued(s, chanq_mq_offset(s->core, topic, on_done, &c, &id));
    if (r == 0)
        r = finish(s, &c, id, &resp);
    if (r < 0)
        return r;
    if (ret_offset)
        *ret_offset = resp->has & CQ_MQ_F_OFFSET ? resp->offset : 0;
    if (ret_committed)
        *ret_committed = (resp->has & CQ_MQ_F_COMMITTED) && resp->committed;
    if (ret_last_offset)
        *ret_last_offset = resp->has & CQ_MQ_F_LAST_OFFSET ? resp->last_offset : 0;
    cq_mq_msg_free(resp);
    return 0;
}

int chanq_mq_sync_topics(chanq_mq_sync_t *s, cq_mq_msg_t **ret_resp)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_topics(s->core, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, ret_resp);
}

int chanq_mq_sync_watch(chanq_mq_sync_t *s, const char *topic)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_watch(s->core, topic, on_push, s, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, NULL);
}

int chanq_mq_sync_unwatch(chanq_mq_sync_t *s, const char *topic)
{
    call_t c = {0};
    uint32_t id = 0;
    int r = queued(s, chanq_mq_unwatch(s->core, topic, on_done, &c, &id));
    return r < 0 ? r : finish(s, &c, id, NULL);
}

int chanq_mq_sync_wait_push(chanq_mq_sync_t *s, int timeout_ms, cq_mq_msg_t **ret_push)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        cq_mq_msg_t *m = pushq_get(&s->pushes);
        if (m) {
            *ret_push = m;
            return 0;
        }
        s->pushed = false;
        int r = pump(s, &s->pushed, deadline);
        if (r < 0 && s->pushes.len == 0)
            return r;
    }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int chanq_mq_sync_parse_addr(const char *addr, char *host, size_t cap, uint16_t *ret_port)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hlen = colon ? (size_t)(colon - addr) : 0;
    if (!colon || hlen == 0)
        return -EINVAL;
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno || !*(colon + 1) || *end || p == 0 || p > 65535 || hlen == 0 || hlen >= cap)
        return -EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *ret_port = (uint16_t)p;
    return 0;
}

/* Non-blocking connect of one address within the deadline. Returns the fd or an error. */
static int try_connect(const struct addrinfo *ai, int64_t deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    int r = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            r = -errno;
            goto fail;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int k = poll(&p, 1, left_ms(deadline));
        if (k <= 0) {
            r = k == 0 ? CQ_ETIMEOUT : -errno;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            r = -soerr;
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
fail:
    close(fd);
    return r;
}

static int tcp_connect(const char *host, uint16_t port, int64_t deadline)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, ps, &hints, &res) != 0 || !res)
        return -EINVAL;
    int fd = -EINVAL;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = try_connect(ai, deadline);
        if (fd >= 0 || fd == CQ_ETIMEOUT)
            break;
    }
    freeaddrinfo(res);
    return fd;
}

int chanq__mq_tcp_connect(const char *host, uint16_t port, int timeout_ms)
{
    return tcp_connect(host, port, timeout_ms < 0 ? -1 : now_ms() + timeout_ms);
}

int chanq_mq_sync_connect(const char *host, uint16_t port, uint32_t module_id, const char *token,
                          uint32_t client_type, int timeout_ms, char *err, size_t errlen,
                          chanq_mq_sync_t **ret_s)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    chanq_mq_sync_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->fd = -1;
    s->timeout_ms = timeout_ms;
    chanq_mq_opts_t o = {.on_push = on_push, .ud = s};
    s->core = chanq_mq_new(&o);
    int r = s->core ? tcp_connect(host, port, deadline) : -ENOMEM;
    if (r < 0)
        goto fail;
    s->fd = r;
    call_t c = {0};
    uint32_t id = 0;
    r = queued(s, chanq_mq_connect(s->core, module_id, token, client_type, on_done, &c, &id));
    if (r == 0)
        r = finish(s, &c, id, NULL);
    if (r < 0)
        goto fail;
    s->timeout_ms = CHANQ_MQ_SYNC_DEFAULT_TIMEOUT_MS;
    *ret_s = s;
    return 0;
fail:
    if (err && errlen)
        snprintf(err, errlen, "%s", s->errmsg[0] ? s->errmsg : cq_strerror(r));
    chanq_mq_sync_close(s);
    return r;
}

chanq_mq_sync_t *chanq_mq_sync_close(chanq_mq_sync_t *s)
{
    if (!s)
        return NULL;
    if (s->fd >= 0)
        close(s->fd);
    chanq_mq_free(s->core);
    cq_mq_msg_t *m;
    while ((m = pushq_get(&s->pushes)))
        cq_mq_msg_free(m);
    cq_free(s->pushes.v);
    cq_free(s);
    return NULL;
}

void chanq_mq_sync_set_timeout(chanq_mq_sync_t *s, int timeout_ms)
{
    s->timeout_ms = timeout_ms;
}

chanq_mq_t *chanq_mq_sync_core(chanq_mq_sync_t *s)
{
    return s->core;
}

uint32_t chanq_mq_sync_errcode(const chanq_mq_sync_t *s)
{
    return s->errcode;
}

const char *chanq_mq_sync_errmsg(const chanq_mq_sync_t *s)
{
    return s->errmsg;
}
