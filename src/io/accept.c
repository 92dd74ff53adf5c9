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

static void hand_over(io_worker_t *w0, int fd, int type, int kind, cq_framing_mode_t mode)
{
    cq_shared_t *sh = w0->io->sh;
    uint32_t id = cq_shared_conn_id_alloc(sh, type);
    if (!id) {
        CQ_WARN("accept", "refusing a connection: max-connections reached");
        close(fd);
        return;
    }
    int target = cq_shared_conn_worker(sh, id);
    if (target == w0->index) {
        cq__io_adopt(w0, fd, id, type, kind, mode);
        return;
    }
    io_accept_msg_t *m = cq_malloc(sizeof(*m));
    if (!m) {
        close(fd);
        return;
    }
    *m = (io_accept_msg_t){.fd = fd, .id = id, .type = type, .kind = kind, .mode = mode};
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

static void on_acceptable(uv_poll_t *p, int status, int events)
{
    io_acceptor_t *a = p->data;
    io_worker_t *w = a->poll.loop->data;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(a->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                CQ_WARN("accept", "accept failed: %s", strerror(errno));
            return;
        }
        hand_over(w, fd, a->type, a->kind, a->mode);
    }
}

static const char *const kind_names[] = {"tcp", "ws", "wss", "kcp"};

static int acceptor_start(io_worker_t *w, io_acceptor_t *a, const char *addr, int type, int kind,
                          bool legacy, char *bound, char *err, size_t errlen)
{
    int r = cq__io_listen(addr, &a->fd, bound, 80, err, errlen);
    if (r < 0)
        return r;
    a->type = type;
    a->kind = kind;
    a->mode = legacy ? CQ_FRAMING_LEGACY : CQ_FRAMING_FIXED;
    uv_poll_init(&w->loop, &a->poll, a->fd);
    a->poll.data = a;
    a->active = 1;
    uv_poll_start(&a->poll, UV_READABLE, on_acceptable);
    CQ_INFO("io", "listening for %s connections over %s on %s%s",
            type == CQ_CONN_CLIENT ? "CLIENT" : "SERVER", kind_names[kind], bound,
            legacy ? " (legacy tag)" : "");
    return 0;
}

typedef struct acceptor_spec {
    const char *addr;
    int type, kind, slot;
    bool legacy;
} acceptor_spec_t;

/* The stream listeners the options ask for; KCP ones are started by kcp.c. */
static int acceptor_specs(const cq_io_opts_t *o, acceptor_spec_t *sp)
{
    int n = 0;
    if (strcmp(o->client_network, "kcp") != 0)
        sp[n++] = (acceptor_spec_t){o->client_addr, CQ_CONN_CLIENT,
                                    strcmp(o->client_network, "ws") == 0 ? IO_WS : IO_TCP,
                                    IO_B_CLIENT, o->client_legacy_tag};
    if (strcmp(o->server_network, "kcp") != 0)
        sp[n++] = (acceptor_spec_t){o->server_addr, CQ_CONN_SERVER,
                                    strcmp(o->server_network, "ws") == 0 ? IO_WS : IO_TCP,
                                    IO_B_SERVER, o->server_legacy_tag};
    if (o->ws_addr && *o->ws_addr)
        sp[n++] = (acceptor_spec_t){o->ws_addr, CQ_CONN_CLIENT, IO_WS, IO_B_WS, false};
    if (o->wss_addr && *o->wss_addr)
        sp[n++] = (acceptor_spec_t){o->wss_addr, CQ_CONN_CLIENT, IO_WSS, IO_B_WSS, false};
    if (o->server_ws_addr && *o->server_ws_addr)
        sp[n++] =
            (acceptor_spec_t){o->server_ws_addr, CQ_CONN_SERVER, IO_WS, IO_B_SERVER_WS, false};
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
        int r = acceptor_start(w, &w->acceptors[i], sp[i].addr, sp[i].type, sp[i].kind,
                               sp[i].legacy, io->bound[sp[i].slot], err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

static void on_poll_closed(uv_handle_t *h)
{
    io_acceptor_t *a = h->data;
    close(a->fd);
}

void cq__io_acceptors_close(io_worker_t *w)
{
    for (int i = 0; i < IO_MAX_ACCEPTORS; i++) {
        io_acceptor_t *a = &w->acceptors[i];
        if (a->active) {
            a->active = 0;
            uv_close((uv_handle_t *)&a->poll, on_poll_closed);
        }
    }
}
