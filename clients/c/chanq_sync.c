/* chanq_sync.c - blocking adapter: POSIX sockets + poll() around the sans-I/O core. */
#include "chanq_sync.h"

#include "chanq_move.h"
#include "cq_alloc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct qnode {
    struct qnode *next;
    chanq_owned_msg_t m;
} qnode_t;

struct chanq_sync {
    int fd;
    chanq_client_t *core;
    qnode_t *head, **tail; /* received messages, oldest first */
    size_t nq;
    int rerr; /* sticky receive-side end: EOF, socket error or decode error; 0 while open */
    int qerr; /* -ENOMEM while copying a message into the queue */
    int send_timeout;
    chanq_move_t *mv; /* chanq_sync_connect_list: the move engine; NULL otherwise */
    bool moving;      /* a loss was seen and the connection is not up again yet */
    uint32_t gen;     /* connections made after a loss: the core was reset each time */
    int last_try_err; /* why the latest connection try failed */
    uint8_t rbuf[65536];
};

/* ---- helpers ----------------------------------------------------------------------------- */

void chanq_owned_msg_done(chanq_owned_msg_t *m)
{
    cq_free(m->body);
    memset(m, 0, sizeof(*m));
}

bool chanq_sync_err_is_closed(int err)
{
    return err == CHANQ_SYNC_EOF || err == -ECONNRESET || err == -EPIPE;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline of -1 means "never". */
static int64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

static int remaining(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - now_ms();
    return left <= 0 ? 0 : (int)(left > 0x7fffffff ? 0x7fffffff : left);
}

int chanq_owned_msg_copy(const chanq_msg_t *m, chanq_owned_msg_t *out)
{
    chanq_owned_msg_t o = {m->channel_id, m->broadcast, m->stub_id, m->msg_type, NULL, m->body_len};
    if (m->body_len) {
        o.body = cq_malloc(m->body_len);
        if (!o.body)
            return -ENOMEM;
        memcpy(o.body, m->body, m->body_len);
    }
    *out = o;
    return 0;
}

static void on_msg(void *ud, const chanq_msg_t *m)
{
    chanq_sync_t *c = ud;
    qnode_t *n = cq_malloc(sizeof(*n));
    if (!n || chanq_owned_msg_copy(m, &n->m) < 0) {
        cq_free(n);
        c->qerr = -ENOMEM;
        return;
    }
    n->next = NULL;
    *c->tail = n;
    c->tail = &n->next;
    c->nq++;
}

static void queue_pop(chanq_sync_t *c, chanq_owned_msg_t *out)
{
    qnode_t *n = c->head;
    c->head = n->next;
    if (!c->head)
        c->tail = &c->head;
    c->nq--;
    *out = n->m;
    cq_free(n);
}

/* ---- socket I/O -------------------------------------------------------------------------- */

/* Reads once (non-blocking) and feeds the core. Returns 0 (possibly nothing read) or the
 * receive-side error, which is also made sticky in c->rerr. */
static int read_some(chanq_sync_t *c)
{
    if (c->rerr)
        return c->rerr;
    ssize_t n = recv(c->fd, c->rbuf, sizeof(c->rbuf), MSG_DONTWAIT);
    if (n > 0) {
        int r = chanq_client_feed(c->core, c->rbuf, (size_t)n);
        if (r < 0)
            c->rerr = r;
    } else if (n == 0) {
        c->rerr = CHANQ_SYNC_EOF;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c->rerr = -errno;
    }
    return c->rerr;
}

/* Polls for events (POLLIN is added while the receive side is open). Returns the revents,
 * 0 on timeout, or -errno. */
static int wait_fd(chanq_sync_t *c, short events, int64_t deadline)
{
    struct pollfd p = {c->fd, events, 0};
    if (!c->rerr)
        p.events |= POLLIN;
    for (;;) {
        int r = poll(&p, 1, remaining(deadline));
        if (r > 0)
            return p.revents;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

/* Writes p[0..n) before the deadline, reading (and queueing) input while the socket is full. */
static int write_bytes(chanq_sync_t *c, const uint8_t *p, size_t n, int64_t deadline)
{
    while (n) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        int ev = wait_fd(c, POLLOUT, deadline);
        if (ev < 0)
            return ev;
        if (ev == 0)
            return CQ_ETIMEOUT;
        if (ev & (POLLIN | POLLHUP | POLLERR))
            read_some(c); /* a receive-side error surfaces at the next send or recv */
    }
    return 0;
}

/* Writes everything the core has pending before the deadline. */
static int write_pending(chanq_sync_t *c, int64_t deadline)
{
    for (;;) {
        const uint8_t *p;
        size_t n;
        int r = chanq_client_out(c->core, &p, &n);
        if (r < 0 || n == 0)
            return r;
        /* Write at most one chunk from the core's buffer: reading meanwhile never appends to
         * it, but re-fetching keeps the pointer trivially valid. */
        size_t chunk = n > 65536 ? 65536 : n;
        r = write_bytes(c, p, chunk, deadline);
        if (r < 0)
            return r;
        chanq_client_out_consume(c->core, chunk);
    }
}

/* ---- moving (chanq_sync_connect_list) ------------------------------------------------------ */

/* What counts as the connection lost: a close, or a socket error that a keepalive or the
 * network gives. A server that sent bytes the core cannot parse is not a loss: the client dies
 * as without an engine. */
static bool is_loss(int err)
{
    return chanq_sync_err_is_closed(err) || err == -ETIMEDOUT || err == -EHOSTUNREACH ||
           err == -ENETUNREACH || err == -ENETDOWN || err == -EHOSTDOWN || err == -ECONNABORTED;
}

static void drop_fd(chanq_sync_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->rerr = 0;
}

static void sleep_until(int64_t t)
{
    int ms;
    while ((ms = remaining(t)) > 0)
        poll(NULL, 0, ms);
}

/* Probes an idle connection so that a peer gone without a close is noticed (ETIMEDOUT). */
static void set_keepalive(int fd, uint32_t idle_s)
{
    if (!idle_s)
        return;
    int one = 1, idle = (int)idle_s, intvl = 1, cnt = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static int resolve_connect(const char *host, uint16_t port, int timeout_ms, int *ret_fd);

/* WAIT: sleeps until the try is due (or the deadline: CQ_ETIMEOUT), then makes it. A try in
 * progress is not cut by the deadline (the engine's connect timeout bounds it), so that the
 * try counts for what it is. */
static int move_try(chanq_sync_t *c, int64_t deadline)
{
    int64_t due = chanq_move_due(c->mv);
    if (deadline >= 0 && due > deadline) {
        sleep_until(deadline);
        return CQ_ETIMEOUT;
    }
    sleep_until(due);
    size_t i = chanq_move_target(c->mv);
    const chanq_move_opts_t *o = chanq_move_opts(c->mv);
    chanq_move_connecting(c->mv, now_ms());
    int fd = -1;
    int r = resolve_connect(chanq_move_host(c->mv, i), chanq_move_port(c->mv, i),
                            (int)o->connect_timeout_ms, &fd);
    if (r < 0) {
        c->last_try_err = r;
        chanq_move_failed(c->mv, r, now_ms());
        return 0;
    }
    c->fd = fd;
    c->rerr = 0;
    set_keepalive(fd, o->keepalive_s);
    if (c->moving)
        c->gen++; /* chanq_move_connected resets the core */
    chanq_move_connected(c->mv, c->core, now_ms());
    chanq_move_state_t st = chanq_move_state(c->mv);
    if (st == CHANQ_MOVE_WAIT || st == CHANQ_MOVE_FAILED)
        drop_fd(c); /* the AUTH could not even be queued */
    return 0;
}

/* AUTH: sends the AUTH, then reads until the AuthResult moved the engine on, the try timed out,
 * or the deadline passed (CQ_ETIMEOUT: the wait goes on in the next operation). */
static int move_auth(chanq_sync_t *c, int64_t deadline)
{
    int64_t until = chanq_move_deadline(c->mv);
    if (deadline >= 0 && deadline < until)
        until = deadline;
    int r = write_pending(c, until);
    if (r == 0) {
        int ev = wait_fd(c, 0, until);
        r = ev < 0 ? ev : ev == 0 ? CQ_ETIMEOUT : read_some(c);
    }
    if (r == CQ_ETIMEOUT) {
        if (!chanq_move_tick(c->mv, now_ms()))
            return CQ_ETIMEOUT;
    } else if (r < 0 && chanq_move_state(c->mv) == CHANQ_MOVE_AUTH) {
        chanq_move_failed(c->mv, r, now_ms());
    }
    chanq_move_state_t st = chanq_move_state(c->mv);
    if (st != CHANQ_MOVE_AUTH && st != CHANQ_MOVE_UP)
        drop_fd(c); /* this try failed, or the AUTH was refused */
    return 0;
}

/* UP again: the SUBs the AuthResult queued go out; a loss meanwhile starts the next move. */
static int move_up(chanq_sync_t *c, int64_t deadline)
{
    c->moving = false;
    int r = write_pending(c, deadline);
    if (r < 0 && is_loss(r)) {
        drop_fd(c);
        c->moving = true;
        chanq_move_lost(c->mv, c->core, r, now_ms());
        return 1;
    }
    return r;
}

/* Drives the engine until the connection is up, the engine gave up (its error) or the
 * deadline passed (CQ_ETIMEOUT). */
static int move_run(chanq_sync_t *c, int64_t deadline)
{
    for (;;) {
        int r;
        switch (chanq_move_state(c->mv)) {
        case CHANQ_MOVE_UP:
            if (!c->moving)
                return 0;
            r = move_up(c, deadline);
            if (r <= 0)
                return r;
            break;
        case CHANQ_MOVE_WAIT:
            r = move_try(c, deadline);
            break;
        case CHANQ_MOVE_AUTH:
            r = move_auth(c, deadline);
            break;
        case CHANQ_MOVE_FAILED:
            return chanq_move_error(c->mv);
        default:
            return -EINVAL;
        }
        if (r < 0)
            return r;
    }
}

/* Before an operation: a move left unfinished by an earlier one goes on. */
static int ensure_up(chanq_sync_t *c, int64_t deadline)
{
    if (!c->mv || (!c->moving && chanq_move_state(c->mv) == CHANQ_MOVE_UP))
        return 0;
    return move_run(c, deadline);
}

/* An operation saw err: a loss starts a move (run until the deadline) when the client has an
 * engine; anything else is returned as it is. Returns 0 once the connection is up again. */
static int on_loss(chanq_sync_t *c, int err, int64_t deadline)
{
    if (!c->mv || !is_loss(err))
        return err;
    drop_fd(c);
    c->moving = true;
    chanq_move_lost(c->mv, c->core, err, now_ms());
    return move_run(c, deadline);
}

int chanq_sync_flush(chanq_sync_t *c, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);
    uint32_t gen = c->gen;
    int r = ensure_up(c, deadline);
    while (r == 0 && c->gen == gen) {
        r = write_pending(c, deadline);
        if (r == 0)
            break;
        r = on_loss(c, r, deadline);
    }
    return r == 0 && c->gen != gen ? CHANQ_SYNC_MOVED : r;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static int connect_one(const struct addrinfo *ai, int64_t deadline, int *ret_fd)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    int r = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            r = -errno;
            goto fail;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int k;
        while ((k = poll(&p, 1, remaining(deadline))) < 0 && errno == EINTR)
            ;
        if (k <= 0) {
            r = k == 0 ? CQ_ETIMEOUT : -errno;
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
            r = soerr ? -soerr : -errno;
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *ret_fd = fd;
    return 0;
fail:
    close(fd);
    return r;
}

static int resolve_connect(const char *host, uint16_t port, int timeout_ms, int *ret_fd)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return g == EAI_MEMORY ? -ENOMEM : g == EAI_SYSTEM ? -errno : -EINVAL;
    int64_t deadline = deadline_of(timeout_ms);
    int r = -EINVAL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        r = connect_one(ai, deadline, ret_fd);
        if (r == 0 || r == CQ_ETIMEOUT)
            break;
    }
    freeaddrinfo(res);
    return r;
}

/* The adapter and its core, not connected. */
static int sync_new(const chanq_opts_t *opts, chanq_sync_t **ret_c)
{
    chanq_sync_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = -1;
    c->tail = &c->head;
    c->send_timeout = CHANQ_SYNC_DEFAULT_SEND_TIMEOUT_MS;
    chanq_opts_t o;
    if (opts)
        o = *opts;
    else
        chanq_opts_init(&o);
    o.on_message = on_msg;
    o.ud = c;
    *ret_c = c; /* freed by the caller on failure */
    return chanq_client_new(&o, &c->core);
}

int chanq_sync_connect(const char *host, uint16_t port, const chanq_opts_t *opts, int timeout_ms,
                       chanq_sync_t **ret_c)
{
    if (!host || !ret_c)
        return -EINVAL;
    chanq_sync_t *c = NULL;
    int r = sync_new(opts, &c);
    if (r < 0)
        goto fail;
    r = resolve_connect(host, port, timeout_ms, &c->fd);
    if (r < 0)
        goto fail;
    *ret_c = c;
    return 0;
fail:
    chanq_sync_free(c);
    return r;
}

int chanq_sync_connect_list(const char *addrs, const chanq_opts_t *opts,
                            const chanq_move_opts_t *mopts, int timeout_ms, chanq_sync_t **ret_c)
{
    if (!addrs || !ret_c)
        return -EINVAL;
    chanq_sync_t *c = NULL;
    int r = sync_new(opts, &c);
    if (r == 0)
        r = chanq_move_new(addrs, mopts, &c->mv);
    if (r < 0)
        goto fail;
    chanq_move_start(c->mv, now_ms());
    r = move_run(c, deadline_of(timeout_ms));
    if (r == CQ_ETIMEOUT && c->last_try_err)
        r = c->last_try_err; /* more useful than the timeout: why the addresses did not answer */
    if (r < 0)
        goto fail;
    *ret_c = c;
    return 0;
fail:
    chanq_sync_free(c);
    return r;
}

const chanq_move_t *chanq_sync_move(const chanq_sync_t *c)
{
    return c->mv;
}

chanq_sync_t *chanq_sync_free(chanq_sync_t *c)
{
    if (!c)
        return NULL;
    chanq_move_free(c->mv); /* before the core: it may hold a stub there */
    if (c->fd >= 0)
        close(c->fd);
    while (c->head) {
        chanq_owned_msg_t m;
        queue_pop(c, &m);
        chanq_owned_msg_done(&m);
    }
    chanq_client_free(c->core);
    cq_free(c);
    return NULL;
}

chanq_client_t *chanq_sync_client(chanq_sync_t *c)
{
    return c->core;
}

int chanq_sync_fd(const chanq_sync_t *c)
{
    return c->fd;
}

void chanq_sync_set_send_timeout(chanq_sync_t *c, int timeout_ms)
{
    c->send_timeout = timeout_ms;
}

/* ---- sending ----------------------------------------------------------------------------- */

/* Flushes after a queueing call r; returns the first error. */
static int then_flush(chanq_sync_t *c, int r)
{
    return r < 0 ? r : chanq_sync_flush(c, c->send_timeout);
}

int chanq_sync_send(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                    uint32_t msg_type, const ProtobufCMessage *msg)
{
    return then_flush(c, chanq_client_send(c->core, channel_id, broadcast, stub_id, msg_type, msg));
}

int chanq_sync_send_raw(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                        uint32_t msg_type, const void *body, size_t len)
{
    return then_flush(
        c, chanq_client_send_raw(c->core, channel_id, broadcast, stub_id, msg_type, body, len));
}

int chanq_sync_create_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_type,
                              const char *metadata,
                              const Channeldpb__ChannelSubscriptionOptions *sub_opts)
{
    return then_flush(
        c, chanq_client_create_channel(c->core, stub_id, channel_type, metadata, sub_opts));
}

int chanq_sync_remove_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id)
{
    return then_flush(c, chanq_client_remove_channel(c->core, stub_id, channel_id));
}

int chanq_sync_list_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t type_filter,
                            const char *const *filters, size_t n_filters)
{
    return then_flush(c,
                      chanq_client_list_channel(c->core, stub_id, type_filter, filters, n_filters));
}

int chanq_sync_sub_to_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id,
                              uint32_t conn_id,
                              const Channeldpb__ChannelSubscriptionOptions *sub_opts)
{
    return then_flush(c,
                      chanq_client_sub_to_channel(c->core, stub_id, channel_id, conn_id, sub_opts));
}

int chanq_sync_unsub_from_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id,
                                  uint32_t conn_id)
{
    return then_flush(c, chanq_client_unsub_from_channel(c->core, stub_id, channel_id, conn_id));
}

int chanq_sync_data_update(chanq_sync_t *c, uint32_t channel_id, const char *type_url,
                           const void *value, size_t len)
{
    return then_flush(c, chanq_client_data_update(c->core, channel_id, type_url, value, len));
}

int chanq_sync_disconnect(chanq_sync_t *c, uint32_t conn_id)
{
    return then_flush(c, chanq_client_disconnect(c->core, conn_id));
}

int chanq_sync_user_msg(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                        const void *payload, size_t len)
{
    return then_flush(
        c, chanq_client_user_msg(c->core, channel_id, broadcast, msg_type, payload, len));
}

int chanq_sync_server_forward(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast,
                              uint32_t msg_type, uint32_t client_conn_id, const void *payload,
                              size_t len)
{
    return then_flush(c, chanq_client_server_forward(c->core, channel_id, broadcast, msg_type,
                                                     client_conn_id, payload, len));
}

int chanq_sync_write_raw(chanq_sync_t *c, const void *bytes, size_t n)
{
    int r = chanq_sync_flush(c, c->send_timeout);
    if (r != 0)
        return r;
    int64_t deadline = deadline_of(c->send_timeout);
    r = write_bytes(c, bytes, n, deadline);
    if (r < 0 && (r = on_loss(c, r, deadline)) == 0)
        return CHANQ_SYNC_MOVED;
    return r;
}

/* ---- receiving --------------------------------------------------------------------------- */

/* Waits for input before the deadline and reads it. Returns 0, CQ_ETIMEOUT or an error. A
 * moving client moves on a loss and returns 0 once the new connection is up (c->gen tells). */
static int pump(chanq_sync_t *c, int64_t deadline)
{
    int r = ensure_up(c, deadline);
    if (r < 0)
        return r;
    if (c->rerr)
        return on_loss(c, c->rerr, deadline);
    int ev = wait_fd(c, 0, deadline);
    if (ev < 0)
        return on_loss(c, ev, deadline);
    if (ev == 0)
        return CQ_ETIMEOUT;
    r = read_some(c);
    return r < 0 ? on_loss(c, r, deadline) : 0;
}

int chanq_sync_recv(chanq_sync_t *c, chanq_owned_msg_t *out, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        if (c->head) {
            queue_pop(c, out);
            return 0;
        }
        if (c->qerr) {
            int e = c->qerr;
            c->qerr = 0;
            return e;
        }
        int r = pump(c, deadline);
        if (r < 0 && !c->head)
            return r;
    }
}

int chanq_sync_recv_type(chanq_sync_t *c, uint32_t msg_type, chanq_owned_msg_t *out, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        chanq_owned_msg_t m;
        int r = chanq_sync_recv(c, &m, remaining(deadline));
        if (r < 0)
            return r;
        if (m.msg_type == msg_type) {
            *out = m;
            return 0;
        }
        chanq_owned_msg_done(&m);
    }
}

size_t chanq_sync_queued(const chanq_sync_t *c)
{
    return c->nq;
}

/* Reads and discards once after a decode error (the core is dead but the socket lives). */
static int drain_some(chanq_sync_t *c)
{
    ssize_t n = recv(c->fd, c->rbuf, sizeof(c->rbuf), MSG_DONTWAIT);
    if (n == 0)
        return CHANQ_SYNC_EOF;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return -errno;
    return 0;
}

int chanq_sync_is_closed(chanq_sync_t *c, int timeout_ms)
{
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        if (chanq_sync_err_is_closed(c->rerr))
            return 1;
        struct pollfd p = {c->fd, POLLIN, 0};
        int k = poll(&p, 1, remaining(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return 0;
        int r = c->rerr ? drain_some(c) : read_some(c);
        if (chanq_sync_err_is_closed(r))
            return 1;
        if (r < 0 && !c->rerr)
            return r;
    }
}

/* ---- RPC helpers ------------------------------------------------------------------------- */

typedef struct call_ctx {
    bool done;
    int err;
    chanq_owned_msg_t reply;
} call_ctx_t;

static void on_reply(void *ud, const chanq_msg_t *m)
{
    call_ctx_t *x = ud;
    x->done = true;
    x->err = chanq_owned_msg_copy(m, &x->reply);
}

/* The request with stub (registered with on_reply and x) is queued: flushes it and waits for
 * the reply. A move meanwhile took the request and the stub with the old connection. */
static int call_wait(chanq_sync_t *c, call_ctx_t *x, uint32_t stub, int64_t deadline)
{
    uint32_t gen = c->gen;
    int r = chanq_sync_flush(c, remaining(deadline));
    while (r == 0 && !x->done && c->gen == gen)
        r = pump(c, deadline);
    if (!x->done) {
        if (c->gen != gen)
            return r < 0 ? r : CHANQ_SYNC_MOVED; /* the reset cancelled the stub */
        chanq_client_stub_cancel(c->core, stub); /* x lives on the caller's stack frame */
        return r;
    }
    return x->err;
}

int chanq_sync_call(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                    const ProtobufCMessage *msg, chanq_owned_msg_t *out, int timeout_ms)
{
    call_ctx_t x = {false, 0, {0}};
    uint32_t stub;
    int64_t deadline = deadline_of(timeout_ms);
    int r = chanq_client_call(c->core, channel_id, broadcast, msg_type, msg, on_reply, &x, &stub);
    if (r < 0)
        return r;
    r = call_wait(c, &x, stub, deadline);
    if (r != 0)
        return r;
    *out = x.reply;
    return 0;
}

int chanq_sync_auth(chanq_sync_t *c, const char *pit, const char *lt, int timeout_ms,
                    int *ret_result, uint32_t *ret_conn_id)
{
    call_ctx_t x = {false, 0, {0}};
    uint32_t stub;
    int r = chanq_client_stub_alloc(c->core, on_reply, &x, &stub);
    if (r < 0)
        return r;
    /* through the core's encoder, which keeps the credentials for a move */
    r = chanq_client_auth(c->core, stub, pit, lt);
    if (r < 0) {
        chanq_client_stub_cancel(c->core, stub);
        return r;
    }
    r = call_wait(c, &x, stub, deadline_of(timeout_ms));
    if (r != 0)
        return r;
    chanq_owned_msg_t m = x.reply;
    Channeldpb__AuthResultMessage *ar =
        chanq_sync_decode(&m, &channeldpb__auth_result_message__descriptor);
    r = m.msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH && ar ? 0 : CQ_EDECODE;
    if (r == 0) {
        if (ret_result)
            *ret_result = (int)ar->result;
        if (ret_conn_id)
            *ret_conn_id = ar->result == 0 ? ar->connid : 0;
    }
    chanq_unpack_free(ar);
    chanq_owned_msg_done(&m);
    return r;
}

void *chanq_sync_decode(const chanq_owned_msg_t *m, const ProtobufCMessageDescriptor *d)
{
    return chanq_unpack(d, m->body, m->body_len);
}
