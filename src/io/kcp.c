/* kcp.c - KCP over UDP: one SO_REUSEPORT socket per worker and listener.
 *
 * The kernel hashes a peer's 4-tuple to one of the workers' sockets, so every datagram of a
 * peer reaches the same worker, which owns its connection (ids come from
 * cq_shared_conn_id_alloc_on). Which session a datagram opens or reaches is the listener
 * policy's decision (src/transport/kcp/cq_kcp_listener.h: conv replacement, tombstones, idle
 * expiry, --kcp-max-per-addr through a per-IP count all workers share); this file keeps the
 * socket, the engines and connections, and the glue:
 *  - a session is created for the policy's CREATE, fed its DELIVERs, and closed when a new
 *    conversation displaces it or the policy reports it idle;
 *  - a connection chanqd closed is released at the next tick and its address left to the
 *    policy as a tombstone;
 *  - connections whose peer stopped acknowledging (dead link) are closed;
 *  - a malformed KCP datagram (unknown command, truncated segment) closes that connection.
 *
 * Backpressure: bytes leave the connection's send queue only while the engine has send space,
 * so the send queue's limits still close a slow reader; a paused connection (inbound flow
 * control) stops draining the engine's receive queue, whose window then stops the peer.
 */
#include "cq_admin.h"
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_kcp.h"
#include "cq_kcp_listener.h"
#include "cq_list.h"
#include "cq_log.h"
#include "cq_sendq.h"
#include "cq_util.h"
#include "io_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define KCP_DGRAM (64u * 1024u)
#define KCP_MMSG  16u /* datagrams per recvmmsg */
#define KCP_RBUF  (KCP_DGRAM * KCP_MMSG)
#define GSO_SEGS  64u    /* datagrams per UDP_SEGMENT send (the kernel's limit) */
#define GSO_BYTES 65000u /* bytes per UDP_SEGMENT send */
/* Anti-amplification: until a peer echoes one of our segments' ts, it gets at most this many
 * times the bytes it sent (QUIC's factor): a spoofed source cannot turn chanqd into a
 * reflector. See cq_kcp_opts_t.amp_factor. */
#define KCP_AMP_FACTOR 3u

typedef struct io_kcp io_kcp_t;

typedef struct kcp_sess {
    io_kcp_t *sock;
    cq_kcp_peer_t *peer; /* the policy's peer; NULL once a new conversation displaced it */
    cq_kcp_t *k;
    cq_conn_t *conn;
    struct sockaddr_storage addr;
    socklen_t alen;
    uint64_t next_check;
    uint8_t closed;  /* the core closed it: released at the next tick */
    uint8_t dirty;   /* in sock->dirty: flush after this loop iteration's reads */
    cq_list_t node;  /* sock->sessions */
    cq_list_t rnode; /* sock->reap once closed */
    cq_list_t dnode; /* sock->dirty */
} kcp_sess_t;

struct io_kcp {
    io_worker_t *w;
    uv_udp_t udp;
    uv_timer_t timer; /* one-shot, at the earliest session deadline (at most an interval) */
    uint64_t timer_due;
    uv_check_t check; /* after the reads of a loop iteration: flush dirty sessions */
    int type;         /* CQ_CONN_CLIENT or CQ_CONN_SERVER */
    int handles;      /* open uv handles */
    cq_kcp_opts_t kopts;
    cq_kcp_listener_t *lis; /* the policy: which session a datagram is for */
    cq_list_t sessions, reap, dirty;
    /* Output batch: consecutive datagrams to one peer, sent with one sendmsg (UDP GSO). Empty
     * at the end of every callback of this socket (out_flush). */
    kcp_sess_t *gso_sess;
    size_t gso_seg, gso_len;
    unsigned gso_n;
    uint8_t gso_short; /* the last datagram is shorter than gso_seg: it must stay last */
    uint8_t gso_off;   /* the kernel refused UDP_SEGMENT: one send per datagram */
    int fd;
    uint8_t gso_buf[GSO_BYTES];
    uint8_t rbuf[KCP_RBUF];
};

static const cq_transport_ops_t kcp_ops;
static void on_timer(uv_timer_t *t);

/* Makes the timer fire by loop time `when` (or earlier if it is already due earlier). kcp-go
 * schedules each session at its next deadline (a retransmission can be due before the next
 * interval tick); a fixed tick delayed every retransmission by up to an interval. */
static void timer_arm(io_kcp_t *ks, uint64_t when)
{
    uint64_t now = uv_now(&ks->w->loop);
    if (when < now)
        when = now;
    if (uv_is_active((uv_handle_t *)&ks->timer) && ks->timer_due <= when)
        return;
    ks->timer_due = when;
    uv_timer_start(&ks->timer, on_timer, when - now, 0);
}

/* ---- addresses -------------------------------------------------------------------------- */

/* The policy's form of a source address. */
static void addr_of(const struct sockaddr *sa, cq_kcp_addr_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        ret->ip_len = 4;
        memcpy(ret->ip, &in->sin_addr, 4);
        memcpy(ret->port, &in->sin_port, 2);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        ret->ip_len = 16;
        memcpy(ret->ip, &in6->sin6_addr, 16);
        memcpy(ret->port, &in6->sin6_port, 2);
    }
}

static bool live(const kcp_sess_t *s)
{
    return !s->closed;
}

/* ---- output ----------------------------------------------------------------------------- */

static void send_one(io_kcp_t *ks, const kcp_sess_t *s, const uint8_t *p, size_t n)
{
    /* best effort: a datagram the kernel cannot take now is resent by the ARQ */
    (void)!sendto(ks->fd, p, n, MSG_DONTWAIT, (const struct sockaddr *)&s->addr, s->alen);
}

/* Sends the batch: one sendmsg whose UDP_SEGMENT cmsg lets the kernel cut it into datagrams of
 * gso_seg bytes (the last may be shorter). */
static void out_flush(io_kcp_t *ks)
{
    if (!ks->gso_n)
        return;
    kcp_sess_t *s = ks->gso_sess;
    if (ks->gso_n == 1) {
        send_one(ks, s, ks->gso_buf, ks->gso_len);
        goto done;
    }
    struct iovec iov = {ks->gso_buf, ks->gso_len};
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr mh = {.msg_name = &s->addr,
                        .msg_namelen = s->alen,
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t seg = (uint16_t)ks->gso_seg;
    memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    if (sendmsg(ks->fd, &mh, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
        errno != ENOBUFS) {
        ks->gso_off = 1; /* no GSO here (old kernel, device): send them one by one from now on */
        CQ_INFO("kcp", "UDP GSO unavailable (%s): one send per datagram", strerror(errno));
        for (size_t off = 0; off < ks->gso_len; off += ks->gso_seg) {
            size_t n = ks->gso_len - off < ks->gso_seg ? ks->gso_len - off : ks->gso_seg;
            send_one(ks, s, ks->gso_buf + off, n);
        }
    }
done:
    ks->gso_n = 0;
    ks->gso_len = 0;
    ks->gso_sess = NULL;
}

/* The engine's output: datagrams to one peer in a row are batched for out_flush. */
static void kcp_out(void *ud, const uint8_t *dgram, size_t len)
{
    kcp_sess_t *s = ud;
    io_kcp_t *ks = s->sock;
    if (ks->gso_off) {
        send_one(ks, s, dgram, len);
        return;
    }
    if (ks->gso_n && (ks->gso_sess != s || ks->gso_short || len > ks->gso_seg ||
                      ks->gso_len + len > GSO_BYTES || ks->gso_n == GSO_SEGS))
        out_flush(ks);
    if (!ks->gso_n) {
        ks->gso_sess = s;
        ks->gso_seg = len;
        ks->gso_short = 0;
    } else if (len < ks->gso_seg) {
        ks->gso_short = 1;
    }
    memcpy(ks->gso_buf + ks->gso_len, dgram, len);
    ks->gso_len += len;
    ks->gso_n++;
}

/* Moves send-queue bytes into the engine while it has room; returns 0 or a negative error. */
static int move_sendq(kcp_sess_t *s)
{
    cq_sendq_t *q = cq_conn_sendq(s->conn);
    while (cq_kcp_send_space(s->k) > 0) {
        const struct iovec *iov;
        int n;
        if (cq_sendq_prepare(q, &iov, &n) < 0)
            return -ENOMEM;
        if (n == 0)
            return 0;
        ssize_t took = cq_kcp_sendv(s->k, iov, n);
        if (took < 0)
            return (int)took;
        if (took == 0)
            return 0;
        cq_sendq_written(q, (size_t)took);
    }
    return 0;
}

static void kcp_flush(void *tctx)
{
    kcp_sess_t *s = tctx;
    if (!live(s))
        return;
    int r = move_sendq(s);
    uint64_t now = uv_now(&s->sock->w->loop);
    cq_kcp_flush(s->k, now);
    s->next_check = cq_kcp_check(s->k, now);
    timer_arm(s->sock, s->next_check);
    out_flush(s->sock);
    if (r < 0)
        cq_core_conn_lost(s->sock->w->core, s->conn, r, "KCP send failed");
}

/* Closing sends what is queued, then the next tick releases the connection and frees the
 * engine; the policy keeps the address and conv as a tombstone. */
static void kcp_close(void *tctx)
{
    kcp_sess_t *s = tctx;
    if (!live(s))
        return;
    move_sendq(s); /* best effort: the last replies */
    cq_kcp_flush(s->k, uv_now(&s->sock->w->loop));
    out_flush(s->sock);
    s->closed = 1;
    if (s->peer)
        cq_kcp_listener_closing(s->sock->lis, s->peer);
    cq_list_insert_tail(&s->sock->reap, &s->rnode);
}

static int kcp_peer(void *tctx, char *buf, size_t len)
{
    kcp_sess_t *s = tctx;
    return cq__io_addr_str((const struct sockaddr *)&s->addr, buf, len);
}

static const cq_transport_ops_t kcp_ops = {"kcp", kcp_flush, kcp_close, kcp_peer};

/* ---- input ------------------------------------------------------------------------------ */

/* Hands in-order bytes to the core, unless the connection is paused. */
static void deliver(kcp_sess_t *s, uint64_t now)
{
    io_worker_t *w = s->sock->w;
    while (live(s) && !cq_conn_paused(s->conn)) {
        size_t len;
        const uint8_t *p = cq_kcp_peek(s->k, &len);
        if (!p || !len)
            return;
        cq_core_conn_input(w->core, s->conn, p, len, now);
        cq_kcp_consume(s->k, len); /* the engine lives until the next tick even if closed */
    }
}

/* A per-session ts offset nobody else can guess (cq_kcp_opts_t.ts_offset). */
static uint32_t ts_offset(const kcp_sess_t *s)
{
    uint32_t v;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    /* No entropy yet (early boot): still unknown to a remote sender. */
    uint64_t x = uv_hrtime() ^ (uint64_t)(uintptr_t)s;
    x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(x >> 32);
}

/* A session for the policy's new peer. Returns it, or NULL when none could be set up (the
 * peer is then a tombstone, or forgotten if even the session could not be allocated). */
static kcp_sess_t *sess_new(io_kcp_t *ks, cq_kcp_peer_t *peer, uint32_t conv,
                            const struct sockaddr *sa, uint64_t now)
{
    io_worker_t *w = ks->w;
    kcp_sess_t *s = cq_calloc(1, sizeof(*s));
    if (!s) {
        cq_kcp_listener_forget(ks->lis, peer);
        return NULL;
    }
    s->sock = ks;
    s->peer = peer;
    s->alen = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&s->addr, sa, s->alen);
    cq_list_init(&s->node);
    cq_list_init(&s->rnode);
    cq_list_init(&s->dnode);
    uint32_t id = cq_shared_conn_id_alloc_on(w->io->sh, ks->type, w->index);
    if (!id)
        CQ_WARN("kcp", "refusing a KCP connection: max-connections reached");
    cq_kcp_opts_t ko = ks->kopts;
    ko.ts_offset = ts_offset(s);
    s->k = id ? cq_kcp_new(conv, &ko, kcp_out, s) : NULL;
    if (s->k)
        cq_kcp_set_pool(s->k, w->pool);
    if (s->k)
        s->conn = cq_core_conn_new(w->core, id, ks->type, CQ_FRAMING_FIXED, &kcp_ops, s, now);
    if (!s->conn) {
        /* a tombstone: the peer is ignored until it goes quiet */
        cq_kcp_listener_bury(ks->lis, peer);
        cq_kcp_free(s->k);
        cq_free(s);
        return NULL;
    }
    cq_sendq_set_pool(cq_conn_sendq(s->conn), w->pool);
    cq_core_conn_set_transport(w->core, s->conn, CQ_CONN_KCP);
    cq_kcp_listener_attach(ks->lis, peer, s);
    cq_list_insert_tail(&ks->sessions, &s->node);
    return s;
}

/* The peer started over from the same port: the old connection is gone. */
static void displaced(io_kcp_t *ks, kcp_sess_t *old)
{
    old->peer = NULL; /* the policy forgot it: released without a tombstone */
    if (live(old))
        cq_core_conn_lost(ks->w->core, old->conn, 0, "KCP peer started a new conversation");
}

static void on_datagram(io_kcp_t *ks, const uint8_t *p, size_t n, const struct sockaddr *sa)
{
    io_worker_t *w = ks->w;
    uint64_t now = uv_now(&w->loop);
    cq_kcp_addr_t a;
    cq_kcp_action_t act;
    addr_of(sa, &a);
    cq_kcp_listener_input(ks->lis, &a, p, n, now, &act);
    if (act.replaced)
        displaced(ks, act.replaced);
    kcp_sess_t *s = NULL;
    if (act.verdict == CQ_KCP_CREATE)
        s = sess_new(ks, act.peer, act.conv, sa, now);
    else if (act.verdict == CQ_KCP_DELIVER)
        s = act.ud;
    else if (act.why == CQ_KCP_DROP_LIMIT)
        CQ_DEBUG("kcp", "refusing a KCP connection: --kcp-max-per-addr reached");
    if (!s)
        return; /* dropped, a tombstone, or closing */
    int r = cq_kcp_input(s->k, p, n, now);
    if (r < 0 && r != CQ_EKCPCONV) {
        cq_core_conn_lost(w->core, s->conn, r, cq_strerror(r));
        return;
    }
    /* The input may have sent segments (an ACK opened the window) with their own RTO. */
    s->next_check = cq_kcp_check(s->k, now);
    timer_arm(ks, s->next_check);
    deliver(s, now);
    if (live(s) && !s->dirty && cq_sendq_writable(cq_conn_sendq(s->conn))) {
        s->dirty = 1; /* ACKs may have made room: move more once this iteration's reads are in */
        cq_list_insert_tail(&ks->dirty, &s->dnode);
    }
}

static void on_check(uv_check_t *h)
{
    io_kcp_t *ks = h->data;
    while (!cq_list_empty(&ks->dirty)) {
        kcp_sess_t *s = cq_container_of(ks->dirty.next, kcp_sess_t, dnode);
        cq_list_remove(&s->dnode);
        s->dirty = 0;
        kcp_flush(s);
    }
    out_flush(ks);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    io_kcp_t *ks = cq_container_of((uv_udp_t *)h, io_kcp_t, udp);
    *buf = uv_buf_init((char *)ks->rbuf, KCP_RBUF);
}

static void on_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *sa,
                    unsigned flags)
{
    io_kcp_t *ks = cq_container_of(u, io_kcp_t, udp);
    if (nread <= 0 || !sa || (flags & (UV_UDP_PARTIAL | UV_UDP_MMSG_FREE)))
        return;
    uv_update_time(&ks->w->loop);
    on_datagram(ks, (const uint8_t *)buf->base, (size_t)nread, sa);
    out_flush(ks);
}

/* ---- timers ----------------------------------------------------------------------------- */

static void reap(io_kcp_t *ks)
{
    out_flush(ks); /* nothing may point at a session that is freed */
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &ks->reap)
    {
        kcp_sess_t *s = cq_container_of(n, kcp_sess_t, rnode);
        cq_list_remove(&s->rnode);
        cq_list_remove(&s->dnode);
        cq_list_remove(&s->node);
        if (s->peer)
            cq_kcp_listener_bury(ks->lis, s->peer); /* a tombstone from now on */
        cq_kcp_stats_t st;
        cq_kcp_stats(s->k, &st);
        cq_kcp_ipcount_add_amp(ks->w->io->kcp_ips, st.amp_blocked);
        cq_kcp_free(s->k);
        cq_core_conn_release(ks->w->core, s->conn);
        cq_free(s);
    }
}

/* The policy found the session silent for --kcp-idle-timeout-ms. */
static void on_idle(void *ctx, void *ud)
{
    io_kcp_t *ks = ctx;
    kcp_sess_t *s = ud;
    cq_core_conn_lost(ks->w->core, s->conn, CQ_ETIMEOUT, "KCP idle timeout");
}

static void tick_one(io_kcp_t *ks, kcp_sess_t *s, uint64_t now)
{
    io_worker_t *w = ks->w;
    if (!live(s))
        return;
    if (cq_kcp_dead(s->k)) {
        cq_core_conn_lost(w->core, s->conn, CQ_ETIMEOUT, "KCP peer stopped acknowledging");
        return;
    }
    deliver(s, now); /* resumes a paused connection */
    if (live(s) && cq_sendq_writable(cq_conn_sendq(s->conn)) && cq_kcp_send_space(s->k) > 0) {
        kcp_flush(s);
        return;
    }
    if (live(s) && now >= s->next_check) {
        cq_kcp_update(s->k, now);
        s->next_check = cq_kcp_check(s->k, now);
    }
}

/* The earliest deadline of the live sessions, at most an interval away (idle expiry and the
 * reaping of closed sessions run on this timer too). */
static uint64_t next_due(io_kcp_t *ks, uint64_t now)
{
    uint64_t due = now + ks->kopts.interval;
    cq_list_t *n;
    cq_list_foreach(n, &ks->sessions)
    {
        const kcp_sess_t *s = cq_container_of(n, kcp_sess_t, node);
        if (live(s) && s->next_check < due)
            due = s->next_check;
    }
    return due;
}

static void on_timer(uv_timer_t *t)
{
    io_kcp_t *ks = t->data;
    uint64_t now = uv_now(&ks->w->loop);
    reap(ks);
    cq_kcp_listener_expire(ks->lis, now, on_idle, ks);
    cq_list_t *n, *tmp;
    cq_list_foreach_safe(n, tmp, &ks->sessions)
    {
        tick_one(ks, cq_container_of(n, kcp_sess_t, node), now);
    }
    reap(ks);
    timer_arm(ks, next_due(ks, now));
}

/* ---- start / stop ----------------------------------------------------------------------- */

typedef struct udp_spec {
    const char *addr;
    int type, slot;
} udp_spec_t;

static int udp_specs(const cq_io_opts_t *o, udp_spec_t *sp)
{
    int n = 0;
    bool ckcp = strcmp(o->client_network, "kcp") == 0;
    bool skcp = strcmp(o->server_network, "kcp") == 0;
    if (ckcp)
        sp[n++] = (udp_spec_t){o->client_addr, CQ_CONN_CLIENT, IO_B_CLIENT};
    if (o->kcp_addr && *o->kcp_addr && !(ckcp && strcmp(o->kcp_addr, o->client_addr) == 0))
        sp[n++] = (udp_spec_t){o->kcp_addr, CQ_CONN_CLIENT, IO_B_KCP};
    if (skcp)
        sp[n++] = (udp_spec_t){o->server_addr, CQ_CONN_SERVER, IO_B_SERVER};
    if (o->server_kcp_addr && *o->server_kcp_addr &&
        !(skcp && strcmp(o->server_kcp_addr, o->server_addr) == 0))
        sp[n++] = (udp_spec_t){o->server_kcp_addr, CQ_CONN_SERVER, IO_B_SERVER_KCP};
    return n;
}

/* Binds a plain socket first: it fails if any other socket (another chanqd with SO_REUSEPORT
 * included) has the address, and picks the port for port 0. Returns 0 or -errno. */
static int udp_probe(struct sockaddr_storage *ss, socklen_t sl)
{
    int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int r = bind(fd, (struct sockaddr *)ss, sl) < 0 ? -errno : 0;
    socklen_t l = sl;
    if (r == 0)
        getsockname(fd, (struct sockaddr *)ss, &l);
    close(fd);
    return r;
}

/* Worker 0 binds first (port 0 picks the port); the others join with SO_REUSEPORT. */
static int udp_socket(cq_io_t *io, const udp_spec_t *sp, int index, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    const char *addr = index == 0 ? sp->addr : io->bound[sp->slot];
    int r = cq__io_resolve(addr, SOCK_DGRAM, &ss, &sl, err, errlen);
    if (r < 0)
        return r;
    if (index == 0 && (r = udp_probe(&ss, sl)) < 0) {
        snprintf(err, errlen, "cannot bind UDP %s: %s", sp->addr, strerror(-r));
        return r;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, size = 4 << 20;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot bind UDP %s: %s", sp->addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        return r;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    if (index == 0) {
        struct sockaddr_storage b;
        socklen_t bl = sizeof(b);
        getsockname(fd, (struct sockaddr *)&b, &bl);
        cq__io_addr_str((struct sockaddr *)&b, io->bound[sp->slot], sizeof(io->bound[0]));
    }
    return fd;
}

static int kcp_sock_start(io_worker_t *w, int i, const udp_spec_t *sp, char *err, size_t errlen)
{
    int fd = udp_socket(w->io, sp, w->index, err, errlen);
    if (fd < 0)
        return fd;
    io_kcp_t *ks = cq_calloc(1, sizeof(*ks));
    if (!ks) {
        close(fd);
        return -ENOMEM;
    }
    cq_kcp_listener_opts_t lo = {(uint64_t)w->io->opts.kcp_idle_timeout_ms, w->io->kcp_ips};
    ks->lis = cq_kcp_listener_new(&lo);
    if (!ks->lis) {
        cq_free(ks);
        close(fd);
        return -ENOMEM;
    }
    ks->w = w;
    ks->type = sp->type;
    ks->kopts = w->io->opts.kcp_fast ? cq_kcp_opts_fast() : cq_kcp_opts_default();
    ks->kopts.amp_factor = KCP_AMP_FACTOR;
    cq_list_init(&ks->sessions);
    cq_list_init(&ks->reap);
    cq_list_init(&ks->dirty);
    uv_udp_init_ex(&w->loop, &ks->udp, AF_UNSPEC | UV_UDP_RECVMMSG);
    uv_timer_init(&w->loop, &ks->timer);
    uv_check_init(&w->loop, &ks->check);
    ks->handles = 3;
    ks->timer.data = ks->check.data = ks;
    w->kcp[i] = ks;
    if (uv_udp_open(&ks->udp, fd) < 0) {
        close(fd);
        snprintf(err, errlen, "cannot use the UDP socket of %s", sp->addr);
        return CQ_ECONFIG;
    }
    uv_udp_recv_start(&ks->udp, on_alloc, on_recv);
    uv_check_start(&ks->check, on_check);
    uv_fileno((uv_handle_t *)&ks->udp, &ks->fd);
    timer_arm(ks, uv_now(&w->loop) + ks->kopts.interval);
    if (w->index == 0)
        CQ_INFO("io", "listening for %s connections over kcp on udp %s (%s profile)",
                sp->type == CQ_CONN_CLIENT ? "CLIENT" : "SERVER", w->io->bound[sp->slot],
                w->io->opts.kcp_fast ? "fast" : "kcp-go");
    return 0;
}

/* The admin registry's source for the counters all workers share (admin thread). */
static int kcp_metrics_append(void *ud, cq_sbuf_t *out)
{
    char buf[1024];
    size_t n = cq_kcp_ipcount_metrics(ud, buf, sizeof(buf));
    return cq_sbuf_append(out, buf, CQ_MIN(n, sizeof(buf) - 1));
}

int cq__io_kcp_start(io_worker_t *w, char *err, size_t errlen)
{
    udp_spec_t sp[IO_MAX_UDP];
    int n = udp_specs(&w->io->opts, sp);
    for (int i = 0; i < n; i++) {
        int r = kcp_sock_start(w, i, &sp[i], err, errlen);
        if (r < 0)
            return r;
    }
    cq_admin_t *admin = w->io->opts.admin;
    if (n && w->index == 0 && admin) {
        int r = cq_admin_add_source(admin, "kcp", kcp_metrics_append, w->io->kcp_ips);
        if (r < 0) {
            snprintf(err, errlen, "cannot register the KCP metrics: %s", cq_strerror(r));
            return r;
        }
    }
    return 0;
}

static void on_handle_closed(uv_handle_t *h)
{
    io_kcp_t *ks = h->data;
    if (--ks->handles == 0) {
        cq_kcp_listener_free(ks->lis);
        cq_free(ks);
    }
}

void cq__io_kcp_close(io_worker_t *w)
{
    if (w->index == 0 && w->io->opts.admin)
        cq_admin_remove_source(w->io->opts.admin, kcp_metrics_append, w->io->kcp_ips);
    for (int i = 0; i < IO_MAX_UDP; i++) {
        io_kcp_t *ks = w->kcp[i];
        if (!ks)
            continue;
        w->kcp[i] = NULL;
        cq_list_t *n, *t;
        cq_list_foreach_safe(n, t, &ks->sessions)
        {
            kcp_sess_t *s = cq_container_of(n, kcp_sess_t, node);
            if (live(s))
                cq_core_conn_close(w->core, s->conn, 0, "shutting down");
        }
        reap(ks);
        ks->lis = cq_kcp_listener_free(ks->lis); /* the tombstones, and their per-IP counts */
        ks->udp.data = ks;
        uv_close((uv_handle_t *)&ks->udp, on_handle_closed);
        uv_close((uv_handle_t *)&ks->timer, on_handle_closed);
        uv_close((uv_handle_t *)&ks->check, on_handle_closed);
    }
}
