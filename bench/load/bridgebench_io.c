/* bridgebench_io.c - bridgebench's sockets, chanq connections, /metrics, TopicEvent parsing and
 * samples (bridgebench.h). */
#include "bridgebench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- errors, clocks, addresses -------------------------------------------------------------- */

void bb_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bridgebench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

uint64_t bb_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bb_parse_addr(const char *s, struct sockaddr_in *out)
{
    const char *colon = strrchr(s, ':');
    char host[64];
    size_t hl = colon ? (size_t)(colon - s) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host))
        bb_die("bad address %s (want HOST:PORT)", s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (uv_ip4_addr(host, atoi(colon + 1), out) != 0)
        bb_die("bad address %s", s);
}

void bb_ready_field(const char *path, const char *name, char *out, size_t cap)
{
    char line[1024], key[32];
    FILE *f = fopen(path, "r");
    if (!f)
        bb_die("cannot read the ready file %s: %s", path, strerror(errno));
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    snprintf(key, sizeof(key), "%s=", name);
    for (char *p = strstr(line, key); p; p = strstr(p + 1, key)) {
        if (p != line && p[-1] != ' ')
            continue; /* "mqhttp=" is not "http=" */
        p += strlen(key);
        size_t len = strcspn(p, " \n");
        if (len == 0 || len >= cap || (len == 1 && *p == '-'))
            break;
        memcpy(out, p, len);
        out[len] = '\0';
        return;
    }
    bb_die("the ready file %s has no %s address", path, name);
}

double bb_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- sockets -------------------------------------------------------------------------------- */

/* One read buffer for every socket: the loop reads one socket at a time. Large enough for a
 * catch-up chunk (256 KiB) in a few reads. */
static uint8_t g_rbuf[256 * 1024];

static void sock_on_poll(uv_poll_t *h, int status, int events);

static void sock_freed(uv_handle_t *h)
{
    bb_sock_t *s = h->data;
    close(s->fd);
    free(s);
}

void bb_sock_close(bb_sock_t *s)
{
    if (!s || s->closed)
        return;
    s->closed = true;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sock_freed);
}

static void sock_lose(bb_sock_t *s, int err)
{
    if (s->closed)
        return;
    s->ops->lost(s, err);
    bb_sock_close(s);
}

static void sock_want_out(bb_sock_t *s, bool out)
{
    if (s->polling_out == out)
        return;
    s->polling_out = out;
    uv_poll_start(&s->poll, UV_READABLE | (out ? UV_WRITABLE : 0), sock_on_poll);
}

void bb_sock_flush(bb_sock_t *s)
{
    size_t len;
    const uint8_t *p;
    if (s->closed || !s->connected)
        return;
    while ((p = s->ops->out(s, &len)) != NULL && len > 0) {
        ssize_t k = send(s->fd, p, len, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            sock_lose(s, -errno);
            return;
        }
        s->ops->consume(s, (size_t)k);
        if ((size_t)k < len)
            break; /* the kernel's buffer is full: wait for POLLOUT */
    }
    p = s->ops->out(s, &len);
    sock_want_out(s, p && len > 0);
}

/* One recvmsg() into g_rbuf, the kernel receive time in s->rx_real. Returns the byte count, 0
 * when nothing is ready, -1 after a loss. */
static ssize_t sock_recv(bb_sock_t *s)
{
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {g_rbuf, sizeof(g_rbuf)};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(s->fd, &mh, 0);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        sock_lose(s, n == 0 ? UV_EOF : -errno);
        return -1;
    }
    s->rx_real = bb_real_ns();
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            s->rx_real = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    }
    return n;
}

static void sock_connected(bb_sock_t *s)
{
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        sock_lose(s, -err);
        return;
    }
    s->connected = true;
    s->polling_out = true; /* so that the next line changes it */
    sock_want_out(s, false);
    s->ops->connected(s);
    bb_sock_flush(s);
}

static void sock_on_poll(uv_poll_t *h, int status, int events)
{
    bb_sock_t *s = h->data;
    if (status < 0) {
        sock_lose(s, status);
        return;
    }
    if (!s->connected) {
        if (events & UV_WRITABLE)
            sock_connected(s);
        return;
    }
    if (events & UV_WRITABLE)
        bb_sock_flush(s);
    /* a few reads per wake-up: a catch-up comes in 256 KiB chunks, and one socket must not
     * starve the others */
    for (int i = 0; i < 4 && !s->closed && (events & UV_READABLE); i++) {
        ssize_t n = sock_recv(s);
        if (n <= 0)
            break;
        s->ops->input(s, g_rbuf, (size_t)n);
        if ((size_t)n < sizeof(g_rbuf))
            break;
    }
}

bb_sock_t *bb_sock_open(uv_loop_t *loop, const struct sockaddr_in *a, const bb_sock_ops_t *ops,
                        void *ud)
{
    bb_sock_t *s = calloc(1, sizeof(*s));
    if (!s)
        bb_die("out of memory");
    s->ops = ops;
    s->ud = ud;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0)
        bb_die("socket: %s (raise ulimit -n)", strerror(errno));
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(s->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    if (connect(s->fd, (const struct sockaddr *)a, sizeof(*a)) < 0 && errno != EINPROGRESS)
        bb_die("connect: %s", strerror(errno));
    int r = uv_poll_init(loop, &s->poll, s->fd);
    if (r < 0)
        bb_die("uv_poll_init: %s", uv_strerror(r));
    s->poll.data = s;
    uv_poll_start(&s->poll, UV_WRITABLE, sock_on_poll);
    return s;
}

/* ---- a chanq connection --------------------------------------------------------------------- */

static void conn_on_auth(void *ud, const chanq_msg_t *m)
{
    bb_conn_t *c = ud;
    (void)m;
    c->id = chanq_client_conn_id(c->core);
    if (!c->id)
        bb_die("AUTH of %s failed", c->pit);
    c->on_authed(c);
}

static void conn_connected(bb_sock_t *s)
{
    bb_conn_t *c = s->ud;
    uint32_t stub;
    chanq_client_reset(c->core); /* a new connection: nothing of the old one is kept */
    int r = chanq_client_stub_alloc(c->core, conn_on_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(c->core, stub, c->pit, "bridgebench");
    if (r < 0)
        bb_die("auth: %s", cq_strerror(r));
}

static void conn_input(bb_sock_t *s, const uint8_t *p, size_t n)
{
    bb_conn_t *c = s->ud;
    int r = chanq_client_feed(c->core, p, n);
    if (r < 0) {
        fprintf(stderr, "bridgebench: %s: %s\n", c->pit, cq_strerror(r));
        sock_lose(s, r);
        return;
    }
    bb_sock_flush(s);
}

static void conn_lost(bb_sock_t *s, int err)
{
    bb_conn_t *c = s->ud;
    c->sock = NULL;
    if (c->on_lost)
        c->on_lost(c, err);
}

static const uint8_t *conn_out(bb_sock_t *s, size_t *ret_len)
{
    bb_conn_t *c = s->ud;
    const uint8_t *p = NULL;
    if (chanq_client_out(c->core, &p, ret_len) < 0)
        *ret_len = 0;
    return p;
}

static void conn_consume(bb_sock_t *s, size_t n)
{
    bb_conn_t *c = s->ud;
    chanq_client_out_consume(c->core, n);
}

static const bb_sock_ops_t conn_ops = {conn_connected, conn_input, conn_lost, conn_out,
                                       conn_consume};

static void conn_on_message(void *ud, const chanq_msg_t *m)
{
    bb_conn_t *c = ud;
    if (c->on_msg)
        c->on_msg(c, m);
}

void bb_conn_open(bb_conn_t *c, uv_loop_t *loop, const struct sockaddr_in *a)
{
    if (!c->core) {
        chanq_opts_t o;
        chanq_opts_init(&o);
        o.on_message = conn_on_message;
        o.ud = c;
        int r = chanq_client_new(&o, &c->core);
        if (r < 0)
            bb_die("chanq_client_new: %s", cq_strerror(r));
    }
    c->id = 0;
    c->sock = bb_sock_open(loop, a, &conn_ops, c);
}

void bb_conn_flush(bb_conn_t *c)
{
    if (c->sock)
        bb_sock_flush(c->sock);
}

void bb_conn_close(bb_conn_t *c)
{
    bb_sock_close(c->sock);
    c->sock = NULL;
}

void bb_conn_sub(bb_conn_t *c, uint32_t channel, uint32_t conn_id, chanq_msg_fn cb, void *ud)
{
    uint32_t stub = 0;
    int r = cb ? chanq_client_stub_alloc(c->core, cb, ud, &stub) : 0;
    if (r == 0)
        r = chanq_client_sub_to_channel(c->core, stub, channel, conn_id, NULL);
    if (r < 0)
        bb_die("sub: %s", cq_strerror(r));
}

/* ---- /metrics ------------------------------------------------------------------------------- */

static int tcp_connect_blocking(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads the whole answer (the admin listener closes after it: "Connection: close"). */
static char *read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    while (b) {
        if (len + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 5000) <= 0)
            break;
        ssize_t k = recv(fd, b + len, cap - len - 1, 0);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    if (b)
        b[len] = '\0';
    return b;
}

char *bb_metrics_fetch(const struct sockaddr_in *admin)
{
    static const char req[] =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    int fd = tcp_connect_blocking(admin);
    if (fd < 0)
        return NULL;
    char *resp = NULL;
    if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1))
        resp = read_all(fd);
    close(fd);
    if (resp && (strncmp(resp, "HTTP/1.1 200", 12) != 0 || !strstr(resp, "\r\n\r\n"))) {
        free(resp);
        resp = NULL;
    }
    return resp;
}

double bb_metric(const char *body, const char *name)
{
    size_t nl = strlen(name);
    bool labels = strchr(name, '{') != NULL, found = false;
    double sum = 0;
    const char *b = body ? strstr(body, "\r\n\r\n") : NULL;
    for (const char *line = b ? b + 4 : NULL; line && *line;) {
        const char *next = strchr(line, '\n');
        if (line[0] != '#' && strncmp(line, name, nl) == 0 &&
            (line[nl] == ' ' || (!labels && line[nl] == '{'))) {
            const char *sp = memchr(line + nl, ' ', (size_t)(next ? next - line : 256) - nl);
            if (sp) {
                sum += strtod(sp + 1, NULL);
                found = true;
            }
        }
        line = next ? next + 1 : NULL;
    }
    return found ? sum : -1;
}

double bb_metric_now(const struct sockaddr_in *admin, const char *name)
{
    char *body = bb_metrics_fetch(admin);
    double v = body ? bb_metric(body, name) : -1;
    free(body);
    return v;
}

/* ---- TopicEvents ---------------------------------------------------------------------------- */

static bool pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* The next field of a protobuf message: its number, and its value (varint) or bytes (LEN).
 * Fixed-width fields are skipped over. Returns false at the end or on bad bytes. */
static bool pb_field(const uint8_t **p, const uint8_t *end, uint32_t *num, uint64_t *v,
                     const uint8_t **bytes)
{
    uint64_t key;
    if (*p >= end || !pb_varint(p, end, &key))
        return false;
    *num = (uint32_t)(key >> 3);
    *bytes = NULL;
    switch (key & 7) {
    case 0:
        return pb_varint(p, end, v);
    case 1:
    case 5: {
        size_t w = (key & 7) == 1 ? 8 : 4;
        if ((size_t)(end - *p) < w)
            return false;
        *p += w;
        *v = 0;
        return true;
    }
    case 2:
        if (!pb_varint(p, end, v) || *v > (uint64_t)(end - *p))
            return false;
        *bytes = *p;
        *p += *v;
        return true;
    default:
        return false;
    }
}

static bool event_fields(const uint8_t *p, const uint8_t *end, bb_event_t *ev)
{
    uint32_t num;
    uint64_t v;
    const uint8_t *bytes;
    memset(ev, 0, sizeof(*ev));
    while (p < end) {
        if (!pb_field(&p, end, &num, &v, &bytes))
            return false;
        if (num == 3)
            ev->epoch = v;
        else if (num == 4)
            ev->offset = v;
        else if (num == 5)
            ev->prev_offset = v;
        else if (num == 9 && bytes) {
            ev->content = bytes;
            ev->content_len = (size_t)v;
        }
    }
    return ev->offset != 0;
}

bool bb_event_parse(const uint8_t *body, size_t len, bb_event_t *ev)
{
    const uint8_t *p = body, *end = body + len, *bytes;
    uint32_t num;
    uint64_t v;
    while (p < end) {
        if (!pb_field(&p, end, &num, &v, &bytes))
            return false;
        if (num == 2 && bytes) /* ServerForwardMessage.payload */
            return event_fields(bytes, bytes + v, ev);
    }
    return false;
}

void bb_content_make(char *buf, size_t size, uint64_t seq, uint64_t real_ns)
{
    char head[64];
    int n = snprintf(head, sizeof(head), "%llu %llu ", (unsigned long long)seq,
                     (unsigned long long)real_ns);
    memset(buf, 'x', size);
    memcpy(buf, head, (size_t)n < size ? (size_t)n : size);
}

bool bb_content_read(const uint8_t *p, size_t n, uint64_t *seq, uint64_t *real_ns)
{
    char head[48];
    size_t k = n < sizeof(head) - 1 ? n : sizeof(head) - 1;
    memcpy(head, p, k);
    head[k] = '\0';
    unsigned long long a, b;
    if (sscanf(head, "%llu %llu ", &a, &b) != 2)
        return false;
    *seq = a;
    *real_ns = b;
    return true;
}

int bb_track_accept(bb_track_t *t, const bb_event_t *ev)
{
    if (t->has && ev->epoch == t->epoch) {
        if (ev->offset <= t->offset) {
            t->dup++; /* rule 4 */
            return 0;
        }
        if (ev->prev_offset != t->offset && t->pending) {
            t->skipped++; /* rule 6 while a resume is pending: the catch-up brings it */
            return 0;
        }
        if (ev->prev_offset != t->offset)
            t->holes++; /* rule 6: nothing better is possible */
    }
    t->has = true; /* rules 2, 3, 5 */
    t->epoch = ev->epoch;
    t->offset = ev->offset;
    t->accepted++;
    return 1;
}

/* TopicPosition {topic 1, shard 2, epoch 3, offset 4}: epoch and offset. */
static bool position_read(const uint8_t *p, const uint8_t *end, uint64_t *epoch, uint64_t *off)
{
    uint32_t num;
    uint64_t v;
    const uint8_t *bytes;
    *epoch = *off = 0;
    while (p < end) {
        if (!pb_field(&p, end, &num, &v, &bytes))
            return false;
        if (num == 3)
            *epoch = v;
        else if (num == 4)
            *off = v;
    }
    return true;
}

bool bb_track_result(bb_track_t *t, const uint8_t *body, size_t len, bool *recovered, char *err,
                     size_t cap)
{
    const uint8_t *p = body, *end = body + len, *bytes;
    uint32_t num;
    uint64_t v, epoch = 0, off = 0;
    bool rec = false, pos = false;
    err[0] = '\0';
    while (p < end) {
        if (!pb_field(&p, end, &num, &v, &bytes))
            return false;
        if (num == 1)
            rec = v != 0;
        else if (num == 2 && bytes) {
            if (!position_read(bytes, bytes + v, &epoch, &off))
                return false;
            pos = true;
        } else if (num == 3 && bytes)
            snprintf(err, cap, "%.*s", (int)v, (const char *)bytes);
    }
    t->pending = false;
    *recovered = rec;
    if (pos && (!rec || !t->has || epoch != t->epoch || off > t->offset)) {
        t->has = true;
        t->epoch = epoch;
        t->offset = off;
    }
    return true;
}

/* ---- latency samples ------------------------------------------------------------------------ */

void bb_samples_add(bb_samples_t *s, int64_t ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        int64_t *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            bb_die("out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

double bb_pct_us(bb_samples_t *s, double q)
{
    if (!s->n)
        return -1;
    qsort(s->v, s->n, sizeof(s->v[0]), cmp_i64);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return (double)s->v[i < s->n ? i : s->n - 1] / 1e3;
}
