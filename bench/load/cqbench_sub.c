/* cqbench_sub.c - the subscribers' sockets: each has its own non-blocking socket watched by a
 * uv_poll_t and read with recvmsg() and SO_TIMESTAMPNS, so every read carries the kernel receive
 * time. chanq subscribers may use WebSocket (an upgrade, then masked binary frames) or KCP (a
 * connected UDP socket and a cq_kcp engine each, one shared timer) instead of TCP.
 */
#include "cqbench_int.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

static void sub_lost(bconn_t *c, int err);
static void kcp_readable(bconn_t *c);
static void kcp_connect(bconn_t *c);

/* ---- subscriber sockets ------------------------------------------------------------------ */

/* Subscriber writes are a few small handshake lines or packets: they always fit the socket
 * buffer, so a short write is treated as an error. */
void cqb_sub_write(bconn_t *c, const void *p, size_t n)
{
    ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
    if (k != (ssize_t)n)
        cqb_die("subscriber %d: short write (%zd of %zu): %s", c->idx, k, n, strerror(errno));
}

/* -- chanq subscribers over WebSocket: the frame payloads are the CH byte stream -- */

static void ws_on_data(void *ud, const uint8_t *p, size_t n)
{
    bconn_t *c = ud;
    if (chanq_client_error(c->core))
        return; /* already reported */
    int r = chanq_client_feed(c->core, p, n);
    if (r < 0)
        cqb_conn_lost(c, r);
}

static void ws_on_send(void *ud, const uint8_t *p, size_t n)
{
    cqb_sub_write(ud, p, n);
}

static const bench_ws_cbs_t ws_cbs = {ws_on_data, ws_on_send};

void cqb_ws_input(bconn_t *c, const uint8_t *p, size_t n)
{
    int r = bench_ws_feed(c->ws, p, n, &ws_cbs, c);
    if (r < 0) {
        if (r == CQ_EWSPROTO && G.phase != PH_DONE)
            fprintf(stderr, "cqbench: subscriber %d: websocket: %s\n", c->idx, bench_ws_why(c->ws));
        sub_lost(c, r);
        return;
    }
    cqb_sub_chanq_flush(c); /* the AUTH queued before the 101, then any reply */
}

/* Writes the upgrade request; the AUTH already queued in the core waits for the 101. */
void cqb_ws_start(bconn_t *c)
{
    char req[512];
    c->ws = calloc(1, sizeof(*c->ws));
    if (!c->ws)
        cqb_die("out of memory");
    int n = bench_ws_request(c->ws, O.ws_host, WS_PATH, req, sizeof(req));
    if (n < 0)
        cqb_die("websocket request: %s", strerror(-n));
    cqb_sub_write(c, req, (size_t)n);
}

/* -- subscribers: non-blocking socket + uv_poll_t + recvmsg(SO_TIMESTAMPNS) -- */

static void sub_lost(bconn_t *c, int err)
{
    uv_poll_stop(&c->poll);
    c->connected = false;
    cqb_conn_lost(c, err);
}

/* One recvmsg() into G.rbuf, with the kernel receive timestamp in c->rx_real. Returns the byte
 * count, 0 when nothing is ready, or -1 after the connection was lost (EOF or an error). */
static ssize_t sub_recv(bconn_t *c)
{
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {G.rbuf, sizeof(G.rbuf)};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(c->fd, &mh, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        sub_lost(c, -errno);
        return -1;
    }
    if (n == 0) {
        if (!c->kcp)
            sub_lost(c, UV_EOF);
        return c->kcp ? 0 : -1;
    }
    c->rx_real = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            c->rx_real = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    }
    G.rx_reads++;
    G.rx_bytes += (uint64_t)n;
    return n;
}

static void sub_on_poll(uv_poll_t *h, int status, int events)
{
    bconn_t *c = h->data;
    if (status < 0) {
        sub_lost(c, status);
        return;
    }
    if (!c->connected) {
        if (!(events & UV_WRITABLE))
            return;
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            sub_lost(c, -err);
            return;
        }
        c->connected = true;
        uv_poll_start(&c->poll, UV_READABLE, sub_on_poll);
        if (O.target == TGT_CHANQ)
            cqb_chanq_sub_start(c);
        else if (O.target == TGT_FLOOR)
            cqb_sub_ready(c); /* the floor writer needs no handshake */
        else
            cqb_send_hello(c);
        return;
    }
    if (!(events & UV_READABLE))
        return;
    if (c->kcp) {
        kcp_readable(c);
        return;
    }
    ssize_t n = sub_recv(c);
    if (n > 0)
        cqb_consume_input(c, G.rbuf, (size_t)n);
}

void cqb_sub_connect(bconn_t *c)
{
    if (O.target == TGT_CHANQ && O.transport == TR_KCP) {
        kcp_connect(c);
        return;
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        cqb_die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    const struct sockaddr_in *a = O.transport == TR_WS ? &O.ws_addr
                                  : O.nsub_addrs       ? &O.sub_addrs[c->idx % O.nsub_addrs]
                                                       : &O.addr;
    if (connect(c->fd, (const struct sockaddr *)a, sizeof(*a)) < 0 && errno != EINPROGRESS)
        cqb_die("connect: %s", strerror(errno));
    int r = uv_poll_init(G.loop, &c->poll, c->fd);
    if (r < 0)
        cqb_die("uv_poll_init: %s", uv_strerror(r));
    c->poll.data = c;
    uv_poll_start(&c->poll, UV_WRITABLE, sub_on_poll);
}

/* -- chanq subscribers over KCP: a connected UDP socket and a cq_kcp engine each -- */

/* The engine's output: one datagram. One that cannot be sent is lost; the ARQ resends it. */
static void kcp_out(void *ud, const uint8_t *dgram, size_t len)
{
    bconn_t *c = ud;
    if (send(c->fd, dgram, len, MSG_NOSIGNAL) == (ssize_t)len)
        G.tx_dgrams++;
}

static void kcp_write(bconn_t *c, const uint8_t *p, size_t n)
{
    ssize_t k = cq_kcp_send(c->kcp, p, n);
    if (k != (ssize_t)n)
        cqb_die("subscriber %d: KCP send queue full", c->idx);
    cq_kcp_flush(c->kcp, uv_now(G.loop));
}

/* Feeds the in-order KCP payload to the chanq core. */
static void kcp_deliver(bconn_t *c)
{
    size_t len;
    const uint8_t *p;
    while ((p = cq_kcp_peek(c->kcp, &len)) != NULL && len) {
        int r = chanq_client_feed(c->core, p, len);
        cq_kcp_consume(c->kcp, len);
        if (r < 0) {
            sub_lost(c, r);
            return;
        }
    }
    cqb_sub_chanq_flush(c);
}

static void kcp_readable(bconn_t *c)
{
    uint64_t now = uv_now(G.loop);
    for (int i = 0; i < KCP_READ_BATCH && c->connected; i++) {
        ssize_t n = sub_recv(c);
        if (n <= 0)
            return;
        int r = cq_kcp_input(c->kcp, G.rbuf, (size_t)n, now);
        if (r < 0) {
            sub_lost(c, r);
            return;
        }
        kcp_deliver(c);
    }
}

/* Every KCP_TICK_MS: retransmissions, window updates and data not sent at once. */
static void on_kcp_tick(uv_timer_t *t)
{
    (void)t;
    uint64_t now = uv_now(G.loop);
    for (int i = 0; i < G.started; i++)
        if (G.subs[i].kcp && G.subs[i].connected)
            cq_kcp_update(G.subs[i].kcp, now);
}

static void kcp_connect(bconn_t *c)
{
    c->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        cqb_die("socket: %s", strerror(errno));
    int one = 1, size = KCP_SOCKBUF;
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    if (connect(c->fd, (const struct sockaddr *)&O.kcp_addr, sizeof(O.kcp_addr)) < 0)
        cqb_die("connect (udp): %s", strerror(errno));
    uint32_t conv = 0;
    while (conv == 0)
        if (getrandom(&conv, sizeof(conv), 0) != (ssize_t)sizeof(conv))
            cqb_die("getrandom failed");
    cq_kcp_opts_t ko = cq_kcp_opts_fast();
    c->kcp = cq_kcp_new(conv, &ko, kcp_out, c);
    if (!c->kcp)
        cqb_die("cq_kcp_new failed");
    int r = uv_poll_init(G.loop, &c->poll, c->fd);
    if (r < 0)
        cqb_die("uv_poll_init: %s", uv_strerror(r));
    c->poll.data = c;
    uv_poll_start(&c->poll, UV_READABLE, sub_on_poll);
    c->connected = true;
    if (!uv_is_active((uv_handle_t *)&G.kcp_timer))
        uv_timer_start(&G.kcp_timer, on_kcp_tick, KCP_TICK_MS, KCP_TICK_MS);
    cqb_chanq_sub_start(c);
}

uint64_t cqb_kcp_dup_total(void)
{
    uint64_t n = 0;
    cq_kcp_stats_t st;
    for (int i = 0; i < G.started; i++) {
        if (G.subs[i].kcp) {
            cq_kcp_stats(G.subs[i].kcp, &st);
            n += st.in_dup;
        }
    }
    return n;
}

/* ---- the transport of the outbound CH bytes ---------------------------------------------- */

/* Puts a subscriber's outbound CH bytes on its transport: the socket (tcp), one masked binary
 * message (ws), or the KCP engine, flushed at once (kcp). */
void cqb_sub_send(bconn_t *c, const uint8_t *p, size_t n)
{
    if (c->kcp) {
        kcp_write(c, p, n);
        return;
    }
    if (!c->ws) {
        cqb_sub_write(c, p, n);
        return;
    }
    uint8_t *f = malloc(n + BENCH_WS_FRAME_HDR);
    if (!f)
        cqb_die("out of memory");
    int k = bench_ws_frame(BENCH_WS_BINARY, p, n, f);
    if (k < 0)
        cqb_die("websocket: no random masking key");
    cqb_sub_write(c, f, (size_t)k);
    free(f);
}
