/* accept.c - listening sockets on worker 0; accepted sockets go to their connection's worker. */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"
#include "io_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct io_accept_msg {
    cq_mpsc_node_t node;
    int fd;
    uint32_t id;
    int type;
    int kind;
    cq_framing_mode_t mode;
} io_accept_msg_t;

int cq__io_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, len, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        return -EAFNOSUPPORT;
    }
    return 0;
}

/* Splits "HOST:PORT", "[V6]:PORT" or ":PORT" (every address). */
static int split_addr(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1])
        return -EINVAL;
    size_t n = (size_t)(colon - addr);
    const char *h = addr;
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hlen || strlen(colon + 1) >= plen)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

int cq__io_resolve(const char *addr, int socktype, struct sockaddr_storage *ss, socklen_t *sl,
                   char *err, size_t errlen)
{
    char host[256], port[16];
    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0) {
        snprintf(err, errlen, "bad address \"%s\" (want HOST:PORT)", addr);
        return CQ_ECONFIG;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = socktype, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "cannot resolve \"%s\": %s", addr, gai_strerror(g));
        return CQ_ECONFIG;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *sl = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int cq__io_listen(const char *addr, int *ret_fd, char *bound, size_t blen, char *err, size_t errlen)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    int r = cq__io_resolve(addr, SOCK_STREAM, &sa, &salen, err, errlen);
    if (r < 0)
        return r;
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, salen) < 0 || listen(fd, 1024) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        return r;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    cq__io_addr_str((struct sockaddr *)&ss, bound, blen);
    *ret_fd = fd;
    return 0;
}

/* ---- listeners that cannot be wedged -------------------------------------------------- */

static int reserve_fd(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* One line per IO_LSN_LOG_MS per listener: a peer that keeps the process out of fds, or over a
 * cap, must not be able to flood the log. */
static void lsn_log(io_lsn_t *l, const char *what, const char *then)
{
    uint64_t now = uv_now(l->poll.loop);
    if (l->log_ms && now - l->log_ms < IO_LSN_LOG_MS) {
        l->suppressed++;
        return;
    }
    CQ_WARN("accept", "%s listener: %s; %s (%llu more since the last line)", l->name, what, then,
            (unsigned long long)l->suppressed);
    l->log_ms = now ? now : 1;
    l->suppressed = 0;
}

static void lsn_log_err(io_lsn_t *l, int err)
{
    char what[96], then[48];
    snprintf(what, sizeof(what), "accept failed: %s", strerror(err));
    snprintf(then, sizeof(then), "pausing accepts for %d ms", IO_LSN_PAUSE_MS);
    lsn_log(l, what, then);
}

void cq__io_lsn_refused(io_lsn_t *l, int fd, const char *cap)
{
    close(fd);
    cq__io_lsn_count(l, IO_CLOSE_CAP);
    lsn_log(l, cap, "closing new connections at once");
}

static void on_lsn_readable(uv_poll_t *p, int status, int events);

static void on_lsn_resume(uv_timer_t *t)
{
    io_lsn_t *l = t->data;
    l->paused = 0;
    if (l->active)
        uv_poll_start(&l->poll, UV_READABLE, on_lsn_readable);
}

/* Out of fds: gives the reserve up to accept and close what waits in the backlog, then stops
 * polling for a moment. The loop returns to its connections in between. */
static void lsn_starved(io_lsn_t *l, int err)
{
    lsn_log_err(l, err);
    if (l->reserve >= 0) {
        close(l->reserve);
        l->reserve = -1;
        for (int i = 0; i < 1024; i++) {
            int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            close(fd);
            atomic_fetch_add_explicit(&l->shed, 1, memory_order_relaxed);
        }
        l->reserve = reserve_fd(); /* may fail while starved: retried on the next event */
    }
    l->paused = 1;
    uv_poll_stop(&l->poll);
    uv_timer_start(&l->pause, on_lsn_resume, IO_LSN_PAUSE_MS, 0);
}

static void on_lsn_readable(uv_poll_t *p, int status, int events)
{
    io_lsn_t *l = p->data;
    (void)status;
    (void)events;
    if (l->reserve < 0)
        l->reserve = reserve_fd();
    for (int i = 0; i < 64 && l->active && !l->paused; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            l->cb(l, fd);
            continue;
        }
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return;
        if (e == EINTR || e == ECONNABORTED)
            continue;
        if (e == EMFILE || e == ENFILE) {
            lsn_starved(l, e);
            return;
        }
        /* ENOBUFS, ENOMEM and the like: the same pause, nothing to shed. */
        lsn_log_err(l, e);
        l->paused = 1;
        uv_poll_stop(&l->poll);
        uv_timer_start(&l->pause, on_lsn_resume, IO_LSN_PAUSE_MS, 0);
        return;
    }
}

int cq__io_lsn_start(io_lsn_t *l, uv_loop_t *loop, const char *addr, const char *name, io_lsn_cb cb,
                     void *data, char *bound, size_t blen, char *err, size_t errlen)
{
    int r = cq__io_listen(addr, &l->fd, bound, blen, err, errlen);
    if (r < 0)
        return r;
    l->name = name;
    l->cb = cb;
    l->data = data;
    l->reserve = reserve_fd();
    uv_poll_init(loop, &l->poll, l->fd);
    uv_timer_init(loop, &l->pause);
    l->poll.data = l->pause.data = l;
    l->active = 1;
    uv_poll_start(&l->poll, UV_READABLE, on_lsn_readable);
    return 0;
}

static void on_lsn_closed(uv_handle_t *h)
{
    io_lsn_t *l = h->data;
    close(l->fd);
    l->fd = -1;
    if (l->reserve >= 0)
        close(l->reserve);
    l->reserve = -1;
}

void cq__io_lsn_close(io_lsn_t *l)
{
    if (!l->active)
        return;
    l->active = 0;
    uv_close((uv_handle_t *)&l->pause, NULL);
    uv_close((uv_handle_t *)&l->poll, on_lsn_closed);
}

bool cq__io_lsn_owns(const io_lsn_t *l, const uv_handle_t *h)
{
    return h == (const uv_handle_t *)&l->poll || h == (const uv_handle_t *)&l->pause;
}

void cq__io_lsn_count(io_lsn_t *l, int reason)
{
    atomic_fetch_add_explicit(&l->closes[reason], 1, memory_order_relaxed);
}

static const char *const close_names[IO_CLOSE__COUNT] = {"cap", "timeout", "preauth_timeout",
                                                         "idle"};

/* Appends l's samples of family fam: accept errors (closes false) or closes per reason. */
static int lsn_metrics(const io_lsn_t *l, const char *fam, bool closes, cq_sbuf_t *out)
{
    char line[192];
    int r = 0;
    if (!closes) {
        int n = snprintf(line, sizeof(line), "%s{port=\"%s\",reason=\"emfile\"} %llu\n", fam,
                         l->name, (unsigned long long)atomic_load(&l->shed));
        return cq_sbuf_append(out, line, (size_t)n);
    }
    for (int i = 0; i < IO_CLOSE__COUNT && r == 0; i++) {
        if (!(l->reasons & (1u << i)))
            continue;
        int n = snprintf(line, sizeof(line), "%s{port=\"%s\",reason=\"%s\"} %llu\n", fam, l->name,
                         close_names[i], (unsigned long long)atomic_load(&l->closes[i]));
        r = cq_sbuf_append(out, line, (size_t)n);
    }
    return r;
}

/* One family: its TYPE line, then the samples of every started listener in v. */
static int lsn_family(io_lsn_t *const *v, size_t n, const char *fam, bool closes, cq_sbuf_t *out)
{
    char t[384];
    int k = snprintf(t, sizeof(t), "# HELP %s %s\n# TYPE %s counter\n", fam,
                     closes ? "Connections closed by a listener limit, by port and reason (cap, "
                              "timeout, preauth_timeout, idle...)."
                            : "Connections accepted and closed at once for lack of file "
                              "descriptors, by port and reason.",
                     fam);
    int r = cq_sbuf_append(out, t, (size_t)k);
    for (size_t i = 0; i < n && r == 0; i++)
        if (v[i]->name)
            r = lsn_metrics(v[i], fam, closes, out);
    return r;
}

int cq__io_lsn_metrics_all(io_lsn_t *const *v, size_t n, const char *errors_family,
                           const char *closes_family, cq_sbuf_t *out)
{
    int r = lsn_family(v, n, errors_family, false, out);
    return r < 0 ? r : lsn_family(v, n, closes_family, true, out);
}

/* ---- the channel listeners -------------------------------------------------------------- */

static void hand_over(io_lsn_t *l, int fd)
{
    io_acceptor_t *a = cq_container_of(l, io_acceptor_t, lsn);
    io_worker_t *w0 = l->data;
    cq_shared_t *sh = w0->io->sh;
    uint32_t id = cq_shared_conn_id_alloc(sh, a->type);
    if (!id) {
        cq__io_lsn_refused(l, fd, "max-connections reached");
        return;
    }
    int target = cq_shared_conn_worker(sh, id);
    if (target == w0->index) {
        cq__io_adopt(w0, fd, id, a->type, a->kind, a->mode);
        return;
    }
    io_accept_msg_t *m = cq_malloc(sizeof(*m));
    if (!m) {
        close(fd);
        return;
    }
    *m = (io_accept_msg_t){.fd = fd, .id = id, .type = a->type, .kind = a->kind, .mode = a->mode};
    io_worker_t *tw = &w0->io->workers[target];
    cq_mpsc_push(&tw->accepts, &m->node);
    uv_async_send(&tw->wake);
}

void cq__io_drain_accepts(io_worker_t *w)
{
    cq_mpsc_node_t *n;
    bool live = w->started && !atomic_load(&w->io->stopping);
    while ((n = cq_mpsc_pop(&w->accepts))) {
        io_accept_msg_t *m = cq_container_of(n, io_accept_msg_t, node);
        if (live)
            cq__io_adopt(w, m->fd, m->id, m->type, m->kind, m->mode);
        else
            close(m->fd);
        cq_free(m);
    }
}

static const char *const kind_names[] = {"tcp", "ws", "wss", "kcp"};

static int acceptor_start(io_worker_t *w, io_acceptor_t *a, const char *addr, const char *name,
                          int type, int kind, bool legacy, char *bound, char *err, size_t errlen)
{
    a->type = type;
    a->kind = kind;
    a->mode = legacy ? CQ_FRAMING_LEGACY : CQ_FRAMING_FIXED;
    a->lsn.reasons = 1u << IO_CLOSE_CAP;
    int r = cq__io_lsn_start(&a->lsn, &w->loop, addr, name, hand_over, w, bound, 80, err, errlen);
    if (r < 0)
        return r;
    CQ_INFO("io", "listening for %s connections over %s on %s%s",
            type == CQ_CONN_CLIENT ? "CLIENT" : "SERVER", kind_names[kind], bound,
            legacy ? " (legacy tag)" : "");
    return 0;
}

typedef struct acceptor_spec {
    const char *addr;
    int type, kind, slot;
    bool legacy;
    const char *name; /* metrics label */
} acceptor_spec_t;

/* The stream listeners the options ask for; KCP ones are started by kcp.c. */
static int acceptor_specs(const cq_io_opts_t *o, acceptor_spec_t *sp)
{
    int n = 0;
    if (strcmp(o->client_network, "kcp") != 0)
        sp[n++] = (acceptor_spec_t){o->client_addr,
                                    CQ_CONN_CLIENT,
                                    strcmp(o->client_network, "ws") == 0 ? IO_WS : IO_TCP,
                                    IO_B_CLIENT,
                                    o->client_legacy_tag,
                                    "client"};
    if (strcmp(o->server_network, "kcp") != 0)
        sp[n++] = (acceptor_spec_t){o->server_addr,
                                    CQ_CONN_SERVER,
                                    strcmp(o->server_network, "ws") == 0 ? IO_WS : IO_TCP,
                                    IO_B_SERVER,
                                    o->server_legacy_tag,
                                    "server"};
    if (o->ws_addr && *o->ws_addr)
        sp[n++] = (acceptor_spec_t){o->ws_addr, CQ_CONN_CLIENT, IO_WS, IO_B_WS, false, "ws"};
    if (o->wss_addr && *o->wss_addr)
        sp[n++] = (acceptor_spec_t){o->wss_addr, CQ_CONN_CLIENT, IO_WSS, IO_B_WSS, false, "wss"};
    if (o->server_ws_addr && *o->server_ws_addr)
        sp[n++] = (acceptor_spec_t){o->server_ws_addr, CQ_CONN_SERVER, IO_WS,
                                    IO_B_SERVER_WS,    false,          "server_ws"};
    return n;
}

int cq__io_acceptors_start(io_worker_t *w, char *err, size_t errlen)
{
    cq_io_t *io = w->io;
    w->loop.data = w;
    acceptor_spec_t sp[IO_MAX_ACCEPTORS];
    int n = acceptor_specs(&io->opts, sp);
    for (int i = 0; i < n; i++) {
        if (sp[i].kind != IO_TCP && sp[i].legacy) {
            snprintf(err, errlen, "the legacy tag is only available over tcp");
            return CQ_ECONFIG;
        }
        int r = acceptor_start(w, &w->acceptors[i], sp[i].addr, sp[i].name, sp[i].type, sp[i].kind,
                               sp[i].legacy, io->bound[sp[i].slot], err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

void cq__io_acceptors_close(io_worker_t *w)
{
    for (int i = 0; i < IO_MAX_ACCEPTORS; i++)
        cq__io_lsn_close(&w->acceptors[i].lsn);
}
