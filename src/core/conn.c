/* conn.c - connection lifecycle, inbound framing, outbound queueing.
 *
 * Everything here runs on the connection's worker: cq_core_conn_* for the io layer (reads,
 * closes, the release), cq__* for the handlers, which reach a connection of another worker
 * only through a message (cq__send_to, cq__close_conn).
 *
 * A connection belongs to one worker for its whole life, so nothing here locks. Closing is
 * deferred (redis's freeClientAsync): cq_core_conn_close marks the connection CLOSING, drops
 * it from every list and tells every worker (XM_CONN_GONE), but its memory is freed only when
 * the transport's close completes (cq_core_conn_release), because the close may start inside
 * a callback chain that still holds the connection. Output is only queued here, by
 * reference to shared records; the transport writes once per loop iteration (cq_core_flush).
 * The hard limit is checked, and the soft limit's clock started, as output is queued. */
#include "core.h"
#include "msgtab.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_snappy.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

cq_conn_t *cq_core_conn_new(cq_core_t *c, uint32_t id, int type, cq_framing_mode_t mode,
                            const cq_transport_ops_t *tops, void *tctx, uint64_t now_ms)
{
    cq_conn_t *conn = cq_calloc(1, sizeof(*conn));
    if (!conn)
        return NULL;
    conn->id = id;
    conn->type = (uint8_t)type;
    conn->framing = (uint8_t)mode;
    /* channeld copies the FSM per connection; the loaded FSMs are immutable after start, so a
     * connection keeps a pointer to its type's and only its own state index. */
    conn->fsm = type == CQ_CONN_SERVER ? c->sh->o.server_fsm : c->sh->o.client_fsm;
    conn->fsm_state = (uint8_t)cq_fsm_init_state(conn->fsm);
    conn->tops = tops;
    conn->tctx = tctx;
    cq_sendq_init(&conn->sendq, mode);
    cq_sbuf_init(&conn->rbuf);
    cq_list_init(&conn->pending_node);
    cq_list_init(&conn->soft_node);
    cq_list_init(&conn->unauth_node);
    conn->accepted_ms = conn->last_rx_ms = now_ms;
    if (cq_map_put(&c->conns, id, conn) < 0) {
        cq_free(conn);
        return NULL;
    }
    /* At the tail: the list stays in accept order, which tick_auth's early stop relies on. */
    cq_list_insert_tail(&c->unauth, &conn->unauth_node);
    atomic_fetch_add(&c->sh->metrics.connections[type], 1);
    return conn;
}

/* Once per connection: a second call would count it twice in chanq_connections{transport}.
 * Stored + 1 so that 0 means "not told", which the release must not uncount. */
void cq_core_conn_set_transport(cq_core_t *c, cq_conn_t *conn, int transport)
{
    if (conn->transport || transport < 0 || transport >= CQ_CONN_TRANSPORTS)
        return;
    conn->transport = (uint8_t)(transport + 1);
    atomic_fetch_add(&c->sh->metrics.by_transport[transport][conn->type], 1);
}

void cq_core_note_tick(cq_core_t *c, uint64_t ns)
{
    atomic_store_explicit(&c->counters.tick_ns, ns, memory_order_relaxed);
}

cq_sendq_t *cq_conn_sendq(cq_conn_t *conn)
{
    return &conn->sendq;
}

uint32_t cq_conn_id(const cq_conn_t *conn)
{
    return conn->id;
}

bool cq_conn_closing(const cq_conn_t *conn)
{
    return conn->state == CONN_CLOSING;
}

int cq_conn_close_reason(const cq_conn_t *conn)
{
    return conn->close_reason;
}

/* At the close, not the release: from here a SUB that names this connection fails (sub.c), a
 * successor may claim its id (recover.c), and max-connections no longer counts it. */
static void dir_remove(cq_shared_t *sh, uint32_t id)
{
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_del(&sh->dir, id);
    if (e) /* its subscriptions go with it (their records are dropped without dir_sub_dec) */
        atomic_fetch_sub(&sh->metrics.subscriptions, e->subs);
    cq_free(e);
    pthread_mutex_unlock(&sh->dir_lock);
}

/* Tells every worker (this one directly) that the connection is gone; a lost recoverable
 * server connection passes its PIT so its channels wait for a successor. */
static void broadcast_gone(cq_core_t *c, cq_conn_t *conn)
{
    const char *pit = conn->lost && conn->type == CQ_CONN_SERVER && c->sh->o.server_recoverable &&
                              conn->pit && *conn->pit
                          ? conn->pit
                          : NULL;
    cq__xmsg_post_others(c, XM_CONN_GONE, conn->id, conn->type, 0, pit);
    cq__conn_gone(c, conn->id, conn->type, pit, false);
    cq__node_conn_gone(c, conn, pit);
}

/* Only an authenticated connection can be recovered: its successor is found by the PIT its AUTH
 * gave. A connection already closing keeps what its own close decided. */
void cq_core_conn_lost(cq_core_t *c, cq_conn_t *conn, int reason, const char *why)
{
    if (conn->state != CONN_CLOSING)
        conn->lost = conn->state == CONN_AUTHED;
    cq_core_conn_close(c, conn, reason, why);
}

/* Idempotent, and safe inside the connection's own callback chain (a handler closing its
 * sender, a push over the hard limit in the middle of a fan-out): it only marks the connection
 * CLOSING and unlinks it, and every walk and push after it skips a CLOSING connection. The
 * memory is freed by cq_core_conn_release once the transport's close completes. */
void cq_core_conn_close(cq_core_t *c, cq_conn_t *conn, int reason, const char *why)
{
    if (conn->state == CONN_CLOSING)
        return;
    char peer[64] = "?";
    conn->tops->peer(conn->tctx, peer, sizeof(peer));
    /* A reset is how many clients leave: not worth an INFO line each. */
    if (reason < 0 && reason != -ECONNRESET)
        CQ_INFO("conn", "closing conn %u (%s, %s): %s%s%s", conn->id,
                conn->type == CQ_CONN_SERVER ? "SERVER" : "CLIENT", peer, why ? why : "",
                why ? ": " : "", cq_strerror(reason));
    else
        CQ_DEBUG("conn", "closing conn %u (%s): %s", conn->id, peer, why ? why : "closed");
    cq__seg_close(c); /* what was fanned out before the close is queued first */
    conn->state = CONN_CLOSING;
    conn->close_reason = reason;
    cq__inject_unindex(c, conn); /* no routed event reaches it from now on */
    cq__resume_conn_closed(c, conn);
    cq_list_remove(&conn->unauth_node);
    cq_list_remove(&conn->soft_node);
    cq_list_remove(&conn->pending_node);
    conn->pending = 0;
    if (conn->auth_held)
        cq__auth_unhold(c, conn);
    cq_sendq_hold(cq_conn_sendq(conn), false); /* its last replies leave with the close */
    dir_remove(c->sh, conn->id);
    /* Cleared now rather than when worker 0 hears CONN_GONE, so that no worker sends the
     * GLOBAL owner's copies to a closed connection in between. */
    uint32_t g = conn->id;
    atomic_compare_exchange_strong(&c->sh->global_owner, &g, 0);
    /* This worker's local lists drop it now; the channels, wherever they live, drop its
     * subscriptions and ownerships when their worker handles the CONN_GONE. */
    cq__lsub_conn_drop(c, conn);
    broadcast_gone(c, conn); /* and to the other nodes */
    conn->tops->close(conn->tctx);
}

/* From the transport's close callback (libuv's close_cb), so never inside the connection's own
 * callback chain: after this nothing may hold conn. */
void cq_core_conn_release(cq_core_t *c, cq_conn_t *conn)
{
    if (!conn)
        return;
    if (conn->state != CONN_CLOSING) {
        /* Released without a close (shutdown): still clean up the shared state. No CONN_GONE:
         * every worker is stopping. */
        conn->state = CONN_CLOSING;
        cq__inject_unindex(c, conn);
        cq__resume_conn_closed(c, conn);
        cq_list_remove(&conn->unauth_node);
        cq_list_remove(&conn->soft_node);
        cq_list_remove(&conn->pending_node);
        dir_remove(c->sh, conn->id);
        cq__lsub_conn_drop(c, conn);
    }
    cq_map_del(&c->conns, conn->id);
    atomic_fetch_sub(&c->sh->metrics.connections[conn->type], 1);
    if (conn->transport)
        atomic_fetch_sub(&c->sh->metrics.by_transport[conn->transport - 1][conn->type], 1);
    cq_sendq_done(&conn->sendq);
    cq_sbuf_done(&conn->rbuf);
    cq_free(conn->chans);
    cq_free(cq_map_del(&c->aoi, conn->id)); /* its interest (interest.c) */
    cq_free(conn->pit);
    cq_free(conn);
}

/* Counted here, on the connection's worker, because chanq_limit_closed is labelled by the
 * connection's type, which only this worker has at hand. An id that is gone or closing is
 * left alone: two requests may race to close the same connection. */
void cq__close_local(cq_core_t *c, uint32_t conn_id, int reason, const char *why)
{
    cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
    if (!conn || conn->state == CONN_CLOSING)
        return;
    if (reason == CQ_ELIMIT)
        CQ_METRIC_ADD(c, M_LIMIT_CLOSED, conn->type, 1);
    cq_core_conn_close(c, conn, reason, why);
}

void cq__close_conn(cq_core_t *c, uint32_t conn_id, int reason, const char *why)
{
    int w = cq__conn_worker(c, conn_id);
    if (w == c->index) {
        cq__close_local(c, conn_id, reason, why);
        return;
    }
    /* why is copied into the message (the caller's buffer is gone by the time it is handled);
     * the reason travels negated in the unsigned u1. */
    size_t n = strlen(why) + 1;
    cq_xmsg_t *x = cq__xmsg_new(XM_CLOSE, n);
    if (!x)
        return;
    x->conn_id = conn_id;
    x->u1 = (uint32_t)-reason;
    memcpy(x->body, why, n);
    cq__xmsg_post(c, w, x);
}

/* ---- DISCONNECT (9) --------------------------------------------------------------------- */

/* A connection, normally the GLOBAL owner, asks the server to close another one (reference
 * §1.7): no ACL, only the FSM, and no reply. It runs on GLOBAL's worker (its row) and is a
 * close of another worker's connection like any other, so it is answered here, with the
 * closes. */
void cq__handle_disconnect(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__DisconnectMessage *m = cq__req_body(c, r);
    if (!m || !m->connid)
        return;
    CQ_INFO("core", "conn %u asks to disconnect conn %u", r->conn_id, m->connid);
    cq__close_conn(c, m->connid, 0, "DISCONNECT requested");
}

/* ---- inbound ---------------------------------------------------------------------------- */

static int handle_frame(cq_core_t *c, cq_conn_t *conn, const cq_frame_t *f)
{
    const uint8_t *body = f->body;
    size_t len = f->len;
    CQ_METRIC_ADD(c, M_PACKETS_IN, conn->type, 1);
    CQ_METRIC_ADD(c, M_BYTES_IN, conn->type, CQ_FRAME_HDR_LEN + len);
    /* An inflated body is bounded by max-packet-size like a plain one, so a small compressed
     * packet cannot make the worker inflate more: a block that would exceed it is refused
     * (CQ_ETOOBIG) before it is inflated, and the connection closed. */
    if (f->ct == CQ_CT_SNAPPY) {
        int r = cq_snappy_uncompress(body, len, c->scratch, c->sh->o.max_packet_size, &len);
        if (r < 0)
            return r;
        body = c->scratch;
        conn->out_ct = CQ_CT_SNAPPY; /* channeld: never reset */
    }
    return cq__dispatch_packet(c, conn, body, len);
}

/* Parses and handles every complete packet in p[0..n); returns bytes consumed or an error.
 * Stops at a close: a handler may close its own sender (too many failed AUTHs, a limit), and
 * the bytes after that packet must not be handled. */
static ssize_t parse_all(cq_core_t *c, cq_conn_t *conn, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n && conn->state != CONN_CLOSING) {
        cq_frame_t f;
        ssize_t k = cq_framing_parse(p + off, n - off, (cq_framing_mode_t)conn->framing,
                                     c->sh->o.max_packet_size, &f);
        if (k <= 0)
            return k < 0 ? k : (ssize_t)off;
        CQ_METRIC_ADD(c, M_PACKETS_COMB, conn->type, 1);
        int r = handle_frame(c, conn, &f);
        if (r < 0)
            return r;
        off += (size_t)k;
    }
    return (ssize_t)off;
}

static const char *input_why(int r)
{
    switch (r) {
    case CQ_EMAGIC:
    case CQ_EZEROLEN:
    case CQ_ETOOBIG:
        return "bad packet header";
    case CQ_ESNAPPY:
        return "bad snappy body";
    case CQ_EDECODE:
        return "body is not a channeldpb.Packet";
    case CQ_EBADTARGET:
        return "AUTH must be sent on channel 0";
    default:
        return "protocol error";
    }
}

/* Zero-copy in the common case: the packets a read holds whole are parsed straight from the
 * transport's buffer, and only an incomplete tail is copied into rbuf. Once rbuf holds part of
 * a packet, the new bytes are appended and everything is parsed from there. Between reads rbuf
 * holds at most one partial packet, which the framing bounds by max-packet-size. A bad packet
 * closes this one connection with a logged reason (channeld wedges it instead, §8.2). */
int cq_core_conn_input(cq_core_t *c, cq_conn_t *conn, const uint8_t *data, size_t n,
                       uint64_t now_ms)
{
    if (conn->state == CONN_CLOSING)
        return CQ_ECLOSED;
    c->now_ms = now_ms;
    conn->last_rx_ms = now_ms;
    ssize_t k;
    if (conn->rbuf.len) {
        if (cq_sbuf_append(&conn->rbuf, data, n) < 0) {
            k = -ENOMEM;
        } else {
            k = parse_all(c, conn, conn->rbuf.data, conn->rbuf.len);
            if (k >= 0)
                cq_sbuf_consume(&conn->rbuf, (size_t)k);
        }
    } else {
        k = parse_all(c, conn, data, n);
        if (k >= 0 && (size_t)k < n && conn->state != CONN_CLOSING &&
            cq_sbuf_append(&conn->rbuf, data + k, n - (size_t)k) < 0)
            k = -ENOMEM;
    }
    cq_wire_arena_reset(&c->arena);
    /* connection_closed counts the closes for bad input, as channeld's counter does (§5.2), not
     * every close. */
    if (k < 0) {
        if (k != CQ_ECLOSED)
            CQ_METRIC_ADD(c, M_CONNECTION_CLOSED, conn->type, 1);
        cq_core_conn_close(c, conn, (int)k, input_why((int)k));
        return (int)k;
    }
    if (conn->rbuf.len) /* this read ended mid-header or mid-packet */
        CQ_METRIC_ADD(c, M_PACKETS_FRAG, conn->type, 1);
    /* A buffer grown for a large packet is given back once it is empty, so idle connections
     * hold no read memory; a small one stays for the next split packet. */
    if (conn->rbuf.len == 0 && conn->rbuf.cap > 4096)
        cq_sbuf_done(&conn->rbuf);
    return 0;
}

/* ---- outbound --------------------------------------------------------------------------- */

/* Puts conn on the flush list once per iteration, so cq_core_flush writes each connection's
 * output in one transport flush however many records were queued for it. A connection waiting
 * on the lazy list moves over: what it holds leaves with this. */
/* Output held while the other relay nodes learn of the connection (node.c): on no list. */
static bool held(cq_conn_t *conn)
{
    if (!conn->announce_wait)
        return false;
    cq_list_remove(&conn->pending_node);
    conn->pending = PENDING_HELD;
    return true;
}

static void mark_pending(cq_core_t *c, cq_conn_t *conn)
{
    if (conn->pending == PENDING_NOW || held(conn))
        return;
    cq_list_remove(&conn->pending_node);
    conn->pending = PENDING_NOW;
    cq_list_insert_tail(&c->pending, &conn->pending_node);
}

/* A client's lazy output (cq__send_lazy) waits for the next fan-out grid point, where its cells'
 * fan-outs leave: one write then instead of one more now. A server's never waits. */
static void mark_lazy(cq_core_t *c, cq_conn_t *conn)
{
    if (conn->type != CQ_CONN_CLIENT) {
        mark_pending(c, conn);
        return;
    }
    if (conn->pending || held(conn))
        return;
    if (cq_list_empty(&c->lazy)) {
        uint64_t q = CQ_FANOUT_GRID_MS;
        c->lazy_due = (c->now_ms / q + 1) * q;
    }
    conn->pending = PENDING_LAZY;
    cq_list_insert_tail(&c->lazy, &conn->pending_node);
}

void cq__conn_release_held(cq_core_t *c, cq_conn_t *conn)
{
    conn->announce_wait = 0;
    cq_sendq_hold(cq_conn_sendq(conn), false);
    cq_list_remove(&conn->unauth_node); /* off the announcing list */
    if (conn->pending == PENDING_HELD) {
        conn->pending = PENDING_NO;
        mark_pending(c, conn);
    }
}

void cq__lazy_release(cq_core_t *c)
{
    while (!cq_list_empty(&c->lazy))
        mark_pending(c, cq_container_of(c->lazy.next, cq_conn_t, pending_node));
    c->lazy_due = UINT64_MAX;
}

/* Accounts n messages of len bytes queued (r: the queue's result); closes the connection over
 * the limits. The queue refuses bytes over the hard limit (CQ_ESLOW): a subscriber that does
 * not read is closed at once, and the channel and other subscribers never wait for it. Over the
 * soft limit, the clock starts here and tick_soft closes the connection if it stays over. */
static void pushed(cq_core_t *c, cq_conn_t *conn, int r, uint32_t n, uint32_t len, bool lazy)
{
    if (r == CQ_ESLOW) {
        CQ_METRIC_ADD(c, M_SLOW_CONSUMER, conn->type, 1);
        cq_core_conn_close(c, conn, r, "slow consumer: over sendq-hard-limit");
        return;
    }
    if (r < 0) {
        cq_core_conn_close(c, conn, r, "cannot queue output");
        return;
    }
    CQ_METRIC_ADD(c, M_MESSAGES_OUT, conn->type, n);
    CQ_METRIC_ADD(c, M_BYTES_OUT, conn->type, len);
    if (c->sh->o.sendq_soft_limit && cq_sendq_bytes(&conn->sendq) > c->sh->o.sendq_soft_limit &&
        !conn->sendq.soft_since_ms) {
        conn->sendq.soft_since_ms = c->now_ms ? c->now_ms : 1; /* 0 means "under the limit" */
        cq_list_insert_tail(&c->soft, &conn->soft_node);
    }
    if (lazy)
        mark_lazy(c, conn);
    else
        mark_pending(c, conn);
}

/* Or'ed into a CQ_SENDQ_* kind by the lazy path (cq__send_lazy). */
#define PUSH_LAZY 0x10000u

/* Queues b (n messages) taking one reference the caller holds (dropped here on failure). Every
 * queueing on this worker comes here or to cq__conn_push_slice: the open fan-out segment goes
 * first, so it keeps its place in every queue. */
static void push_ref(cq_core_t *c, cq_conn_t *conn, cq_buf_t *b, uint32_t kind, uint32_t n)
{
    cq__seg_close(c);
    uint32_t len = b->len;
    int r = cq_sendq_push_ref(&conn->sendq, b, kind & ~PUSH_LAZY, c->sh->o.sendq_hard_limit);
    if (r < 0)
        cq_buf_unref(b);
    pushed(c, conn, r, n, len, kind & PUSH_LAZY);
}

static void push_kind(cq_core_t *c, cq_conn_t *conn, cq_buf_t *b, uint32_t kind, uint32_t n)
{
    push_ref(c, conn, cq_buf_ref(b), kind, n);
}

/* packet is already framed (and compressed) for this connection: the Snappy copy of a
 * broadcast, built once per worker and shared by the Snappy peers there (forward.c). */
void cq__conn_push_packet(cq_core_t *c, cq_conn_t *conn, cq_buf_t *packet)
{
    if (conn->state != CONN_CLOSING)
        push_kind(c, conn, packet, CQ_SENDQ_PACKET, 1);
}

void cq__conn_push_record_ref(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec)
{
    if (conn->state == CONN_CLOSING)
        cq_buf_unref(rec);
    else
        push_ref(c, conn, rec, CQ_SENDQ_RECORD, 1);
}

int cq__conn_push_slice(cq_core_t *c, cq_conn_t *conn, cq_buf_t *fb, uint32_t off, uint32_t len,
                        uint32_t n, const cq_buf_t *prev)
{
    if (conn->state == CONN_CLOSING)
        return CQ_SENDQ_EXTENDED; /* no reference used: the segment gives it back */
    cq__seg_close(c);
    int r = cq_sendq_push_slice(&conn->sendq, fb, off, len, prev, c->sh->o.sendq_hard_limit);
    if (r == CQ_SENDQ_APART)
        return r;
    pushed(c, conn, r < 0 ? r : 0, n, len, false);
    return r == CQ_SENDQ_ADDED ? r : CQ_SENDQ_EXTENDED;
}

/* A Snappy peer gets every record compressed (channeld never switches a connection back once
 * its peer sent Snappy). Compressed here per connection, for replies and other single records;
 * a broadcast's Snappy copy is made once per worker instead (forward.c). */
static void push_records(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec, uint32_t n, uint32_t lazy)
{
    if (conn->state == CONN_CLOSING)
        return;
    if (conn->out_ct != CQ_CT_SNAPPY) {
        push_kind(c, conn, rec, CQ_SENDQ_RECORD | lazy, n);
        return;
    }
    cq_buf_t *p = cq_sendq_compress_record(rec, (cq_framing_mode_t)conn->framing);
    if (!p) {
        cq_core_conn_close(c, conn, -ENOMEM, "cannot compress output");
        return;
    }
    push_kind(c, conn, p, CQ_SENDQ_PACKET | lazy, n);
    cq_buf_unref(p);
}

void cq__conn_push(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec)
{
    push_records(c, conn, rec, 1, 0);
}

void cq__conn_push_lazy(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec)
{
    push_records(c, conn, rec, 1, PUSH_LAZY);
}

void cq__conn_push_run(cq_core_t *c, cq_conn_t *conn, cq_buf_t *run, uint32_t n)
{
    push_records(c, conn, run, n, 0);
}

/* A connection of another worker gets the record by reference in an XM_SEND: nothing is copied,
 * and the record stays alive until its last queue has written it. A connection that is gone
 * drops the record silently: whoever sent it learns of the loss by CONN_GONE. */
enum { SEND_NOW, SEND_LAZY, SEND_GLOBAL_RECOVERY };

static void send_to(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec, int how)
{
    int w = cq__conn_worker(c, conn_id);
    if (w == c->index) {
        cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
        if (conn)
            push_records(c, conn, rec, 1, how == SEND_LAZY ? PUSH_LAZY : 0);
        if (conn && how == SEND_GLOBAL_RECOVERY)
            cq__recover_global_sent(c, conn);
        return;
    }
    cq_xmsg_t *m = cq__xmsg_new(XM_SEND, 0);
    if (!m)
        return;
    m->conn_id = conn_id;
    m->u1 = how == SEND_LAZY;
    m->u2 = how == SEND_GLOBAL_RECOVERY ? CQ_XSEND_GLOBAL_RECOVERY : 0;
    m->buf = cq_buf_ref(rec);
    cq__xmsg_post(c, w, m);
}

void cq__send_to(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec)
{
    send_to(c, conn_id, rec, SEND_NOW);
}

void cq__send_global_recovery(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec)
{
    send_to(c, conn_id, rec, SEND_GLOBAL_RECOVERY);
}

void cq__send_lazy(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec)
{
    send_to(c, conn_id, rec, SEND_LAZY);
}

/* The direct reply to a requester echoes its stubId and broadcast (channeld §1.9), so a client
 * can match it to its request. A reply over 64 KiB encoded is dropped with a warning: channeld
 * has no fragmentation either. */
void cq__reply(cq_core_t *c, const cq_req_t *r, uint32_t chan_id, uint32_t msg_type,
               const ProtobufCMessage *msg)
{
    cq_buf_t *b = cq_wire_record_msg(chan_id, r->mp.broadcast, r->mp.stub_id, msg_type, msg);
    if (!b) {
        CQ_WARN("core", "reply type %u to conn %u too large or OOM; dropped", msg_type, r->conn_id);
        return;
    }
    if (r->conn)
        cq__conn_push(c, r->conn, b);
    else
        cq__send_to(c, r->conn_id, b);
    cq_buf_unref(b);
}

/* A copy for a third party (the GLOBAL owner, the channel owner, the subscribed connection)
 * carries stub 0 and broadcast 0 (§1.9). conn_id 0 means "none" in channeld's messages (no
 * owner, no GLOBAL owner), so it is skipped here rather than at every caller. */
/* The GLOBAL owner's copies. In a relay, a node that is not GLOBAL's home sends them to the
 * home, which knows the owner for sure: its replicated view here may lag a possession that the
 * copy's cause already followed (node.c, XM_SEND to the owner). */
void cq__notify_gowner(cq_core_t *c, uint32_t except, uint32_t chan_id, uint32_t msg_type,
                       const ProtobufCMessage *msg)
{
    uint32_t home = atomic_load_explicit(&c->sh->global_home, memory_order_relaxed);
    if (!c->sh->node || !home || home == c->sh->node) {
        uint32_t g = atomic_load(&c->sh->global_owner);
        if (g && g != except)
            cq__notify(c, g, chan_id, msg_type, msg);
        return;
    }
    cq_buf_t *b = cq_wire_record_msg(chan_id, 0, 0, msg_type, msg);
    cq_xmsg_t *m = b ? cq__xmsg_new(XM_SEND, 0) : NULL;
    if (m) {
        m->u2 = CQ_XSEND_GOWNER; /* to GLOBAL's owner, */
        m->u3 = except;          /* unless it is this one */
        m->buf = cq_buf_ref(b);
        cq__xmsg_post(c, cq__place_node(c, home), m);
    }
    cq_buf_unref(b);
}

void cq__notify(cq_core_t *c, uint32_t conn_id, uint32_t chan_id, uint32_t msg_type,
                const ProtobufCMessage *msg)
{
    if (!conn_id)
        return;
    cq_buf_t *b = cq_wire_record_msg(chan_id, 0, 0, msg_type, msg);
    if (!b)
        return;
    cq__send_to(c, conn_id, b);
    cq_buf_unref(b);
}
