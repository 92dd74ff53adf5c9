/* resume.c - the core's half of a bridge resume (cq_core.h "bridge resume"; doc/bridge.md
 * "Resume"; doc/threads.md "Bridge resume").
 *
 * The client's TopicResumeMessage (type 90) goes to the bridge's thread through the hook; the
 * bridge answers with chunks (cq_shared_resume_chunk), each posted to GLOBAL's worker, which
 * is where the live bridge events of GLOBAL's broadcast bindings are fanned out: a chunk is
 * there behind every live event the bridge posted before it, and GLOBAL's worker forwards it
 * to the connection's worker on the same FIFO as its fan-outs. The connection's worker queues
 * the BEGIN chunk (the result, then the first events) and from then on holds back the live
 * bridge events for that connection (BC_BRIDGE, forward.c skip): the chunks carry them, up to
 * the FINAL chunk, made at the live offset of that moment, after which the live ones flow
 * again. So after the result the client gets every event once, in order.
 *
 * Pacing, twice. The bridge hands the workers at most a few chunks at a time (every chunk's last
 * message reports back, CQ_RESUME_ASK_APPLIED), so a mass reconnect does not fill GLOBAL's
 * worker with thousands of chunks to drain before its other work. And after a chunk that is
 * not FINAL the connection asks for the next one only when its send queue is under CATCHUP_LOW
 * (now, or at a later flush): a client far behind catches up at the pace it reads, under the
 * same soft and hard limits as everything else. */
#include "core.h"
#include "msgtab.h"

#include "bridge.pb-c.h"
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_sendq.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

/* The next chunk is asked for under this many queued bytes (or half the soft limit). */
#define CATCHUP_LOW (512u << 10)

/* On a chunk's last message (u2): its worker tells the bridge the chunk was applied. */
#define CHUNK_LAST 4u
/* A route binding's catch-up (u2): posted straight to the connection's worker, and its hold is
 * route_hold, set at AUTH. */
#define CHUNK_ROUTE 8u

#define MT_TOPIC_RESUME        90
#define MT_TOPIC_RESUME_RESULT 91

void cq_shared_set_resume(cq_shared_t *sh, cq_core_resume_fn fn, void *ud)
{
    sh->resume_ud = ud;
    atomic_store_explicit(&sh->resume_fn, fn, memory_order_release);
}

static int ask(cq_shared_t *sh, int what, uint32_t conn_id, const void *body, size_t len)
{
    cq_core_resume_fn fn = atomic_load_explicit(&sh->resume_fn, memory_order_acquire);
    return fn ? fn(sh->resume_ud, what, conn_id, body, len) : -ENOTSUP;
}

/* ---- the request (the sender's worker) -------------------------------------------------- */

static void refuse(cq_core_t *c, const cq_req_t *r, const char *why)
{
    Chanqpb__TopicResumeResultMessage m = CHANQPB__TOPIC_RESUME_RESULT_MESSAGE__INIT;
    m.error = (char *)why;
    cq__reply(c, r, r->mp.channel_id, MT_TOPIC_RESUME_RESULT, &m.base);
}

void cq__handle_topic_resume(cq_core_t *c, cq_req_t *r)
{
    cq_shared_t *sh = c->sh;
    cq_conn_t *conn = r->conn;
    if (!conn || conn->state == CONN_CLOSING)
        return;
    if (!atomic_load_explicit(&sh->resume_fn, memory_order_acquire)) {
        refuse(c, r, "no durable topic is bound to a channel on this server");
        return;
    }
    if (conn->resume_asked) {
        refuse(c, r, "a resume is already in progress on this connection");
        return;
    }
    /* the channel (4 bytes, little-endian) before the body: the bridge knows which topics are
     * bound to which channel, and refuses a channel with none */
    uint8_t small[512], *b = small;
    size_t len = 4 + r->mp.body_len;
    if (len > sizeof(small) && !(b = cq_malloc(len))) {
        refuse(c, r, "the bridge is busy: try again later");
        return;
    }
    uint32_t ch = r->mp.channel_id;
    b[0] = (uint8_t)ch, b[1] = (uint8_t)(ch >> 8), b[2] = (uint8_t)(ch >> 16),
    b[3] = (uint8_t)(ch >> 24);
    if (r->mp.body_len)
        memcpy(b + 4, r->mp.body, r->mp.body_len);
    int rc = ask(sh, CQ_RESUME_ASK_REQUEST, conn->id, b, len);
    if (b != small)
        cq_free(b);
    if (rc < 0) {
        refuse(c, r, "the bridge is busy: try again later");
        return;
    }
    conn->resume_asked = 1;
}

void cq_shared_set_route(cq_shared_t *sh, bool on)
{
    atomic_store_explicit(&sh->route_on, on, memory_order_release);
}

/* Only a client that names a player: its PIT is the key route bindings match. */
void cq__route_login(cq_core_t *c, cq_conn_t *conn)
{
    if (!atomic_load_explicit(&c->sh->route_on, memory_order_acquire) ||
        conn->type != CQ_CONN_CLIENT || !conn->pit || !*conn->pit)
        return;
    conn->route_hold = 1;
    if (ask(c->sh, CQ_RESUME_ASK_LOGIN, conn->id, conn->pit, strlen(conn->pit) + 1) < 0)
        conn->route_hold = 0; /* no catch-up this time: the events stay unacknowledged */
}

/* The body was decoded by the table (a TopicAckMessage); the bridge gets the player's key and
 * the body. Nothing is answered: an acknowledgement of positions that mean nothing is
 * ignored there. */
void cq__handle_topic_ack(cq_core_t *c, cq_req_t *r)
{
    cq_conn_t *conn = r->conn;
    if (!conn || conn->state == CONN_CLOSING || !conn->pit || !*conn->pit ||
        !atomic_load_explicit(&c->sh->route_on, memory_order_acquire))
        return;
    size_t klen = strlen(conn->pit) + 1;
    uint8_t small[512], *b = small;
    if (klen + r->mp.body_len > sizeof(small) && !(b = cq_malloc(klen + r->mp.body_len)))
        return;
    memcpy(b, conn->pit, klen);
    if (r->mp.body_len)
        memcpy(b + klen, r->mp.body, r->mp.body_len);
    ask(c->sh, CQ_RESUME_ASK_ACK, conn->id, b, klen + r->mp.body_len);
    if (b != small)
        cq_free(b);
}

/* ---- the chunks (the bridge's thread) ---------------------------------------------------- */

/* A chunk cut into runs of whole records, each at most a slice (one packet), one message each. */
typedef struct runs {
    uint32_t chan_id, conn_id;
    cq_xmsg_t *ms[64]; /* the chunk's messages: BEGIN goes on the first, FINAL on the last */
    size_t nm;
    cq_sbuf_t run;
    uint32_t nrec;
    bool failed;
} runs_t;

static void runs_cut(runs_t *w)
{
    if (w->failed || (!w->run.len && w->nm))
        return;
    cq_xmsg_t *m = w->nm < 64 ? cq__xmsg_new(XM_RESUME, 0) : NULL;
    cq_buf_t *b = w->run.len ? cq_buf_from(w->run.data, w->run.len) : NULL;
    if (!m || (w->run.len && !b)) {
        cq__xmsg_free(m);
        cq_buf_unref(b);
        w->failed = true;
        return;
    }
    m->conn_id = w->conn_id;
    m->chan_id = w->chan_id;
    m->buf = b;
    m->u1 = w->nrec;
    w->ms[w->nm++] = m;
    w->run.len = 0;
    w->nrec = 0;
}

/* Appends rec's bytes (taken), cutting the run first when rec would overflow it. */
static void runs_add(runs_t *w, cq_buf_t *rec)
{
    if (!rec) {
        w->failed = true;
        return;
    }
    if (w->run.len && w->run.len + rec->len > CQ_SENDQ_SLICE_MAX)
        runs_cut(w);
    if (!w->failed && cq_sbuf_append(&w->run, rec->data, rec->len) < 0)
        w->failed = true;
    w->nrec++;
    cq_buf_unref(rec);
}

/* A bridge event's record, as cq_shared_inject_broadcast makes it (inject.c). */
static cq_buf_t *event_record(uint32_t chan_id, uint32_t msg_type, const cq_buf_t *ev)
{
    cq_mp_t mp = {
        .channel_id = chan_id, .msg_type = msg_type, .body = ev->data, .body_len = ev->len};
    if (cq_wire_record_size(&mp) + 8 > CQ_WIRE_MAX_RECORD)
        return NULL;
    return cq_wire_sfm_record(&mp, 0);
}

/* A chunk's messages, posted to worker; flags on its first (BEGIN) and last (the rest). */
static int chunk_post(cq_shared_t *sh, int worker, uint32_t chan_id, uint32_t conn_id,
                      unsigned flags, const cq_buf_t *result, cq_buf_t *const *events,
                      const uint32_t *msg_types, size_t n)
{
    runs_t w = {.chan_id = chan_id, .conn_id = conn_id};
    if (result) {
        cq_mp_t mp = {.channel_id = chan_id,
                      .msg_type = MT_TOPIC_RESUME_RESULT,
                      .body = result->data,
                      .body_len = result->len};
        runs_add(&w, cq_wire_record_raw(&mp));
    }
    for (size_t i = 0; i < n && !w.failed; i++) {
        cq_buf_t *rec = event_record(chan_id, msg_types[i], events[i]);
        if (rec) /* else too large: it was not deliverable live either (inject.c) */
            runs_add(&w, rec);
    }
    if (w.run.len || w.nm == 0)
        runs_cut(&w);
    cq_sbuf_done(&w.run);
    if (w.failed) {
        for (size_t i = 0; i < w.nm; i++)
            cq__xmsg_free(w.ms[i]);
        return -ENOMEM;
    }
    w.ms[0]->u2 |= flags & CQ_RESUME_CHUNK_BEGIN;
    w.ms[w.nm - 1]->u2 |= (flags & CQ_RESUME_CHUNK_FINAL) | CHUNK_LAST;
    for (size_t i = 0; i < w.nm; i++) {
        w.ms[i]->u2 |= flags & CHUNK_ROUTE;
        cq__xmsg_post_outside(sh, worker, w.ms[i]);
    }
    return 0;
}

int cq_shared_resume_chunk(cq_shared_t *sh, uint32_t chan_id, uint32_t conn_id, unsigned flags,
                           const cq_buf_t *result, cq_buf_t *const *events,
                           const uint32_t *msg_types, size_t n)
{
    flags &= CQ_RESUME_CHUNK_BEGIN | CQ_RESUME_CHUNK_FINAL;
    /* On a relay node the live events go from this thread to every worker of the node
     * (inject.c), so the connection's worker is where a chunk meets them on one FIFO. */
    int w = sh->node ? cq_shared_conn_worker(sh, conn_id) : cq_shared_chan_worker(sh, chan_id);
    return chunk_post(sh, w, chan_id, conn_id, flags, result, events, msg_types, n);
}

/* Why straight to the connection's worker: the routed live events go there from the same
 * thread (cq_shared_inject_route posts to every worker), so a chunk is behind every routed
 * event posted before it on one FIFO. */
int cq_shared_route_chunk(cq_shared_t *sh, uint32_t conn_id, bool final, cq_buf_t *const *events,
                          const uint32_t *msg_types, size_t n)
{
    unsigned flags = CHUNK_ROUTE | (final ? CQ_RESUME_CHUNK_FINAL : 0);
    int w = cq_shared_conn_worker(sh, conn_id);
    return chunk_post(sh, w, 0, conn_id, flags, NULL, events, msg_types, n);
}

/* ---- the chunks (GLOBAL's worker, then the connection's) ---------------------------------- */

static void ask_more(cq_core_t *c, cq_conn_t *conn, bool route)
{
    if (route)
        conn->route_wait = 0;
    else
        conn->catchup_wait = 0;
    ask(c->sh, route ? CQ_RESUME_ASK_LOGIN_MORE : CQ_RESUME_ASK_MORE, conn->id, NULL, 0);
}

/* Out of memory, it asks now rather than never: the hard limit still bounds its queue. A
 * connection waiting for both kinds is listed once. */
static void wait_room(cq_core_t *c, cq_conn_t *conn, bool route)
{
    if (!conn->catchup_wait && !conn->route_wait) {
        if (c->n_catchup == c->cap_catchup) {
            uint32_t cap = c->cap_catchup ? c->cap_catchup * 2 : 64;
            uint32_t *v = cq_realloc(c->catchup, cap * sizeof(*v));
            if (!v) {
                ask_more(c, conn, route);
                return;
            }
            c->catchup = v;
            c->cap_catchup = cap;
        }
        c->catchup[c->n_catchup++] = conn->id;
    }
    if (route)
        conn->route_wait = 1;
    else
        conn->catchup_wait = 1;
}

static size_t catchup_low(const cq_core_t *c)
{
    size_t soft = c->sh->o.sendq_soft_limit / 2;
    return soft && soft < CATCHUP_LOW ? soft : CATCHUP_LOW;
}

static void applied(cq_core_t *c, const cq_xmsg_t *m)
{
    if (m->u2 & CHUNK_LAST)
        ask(c->sh, m->u2 & CHUNK_ROUTE ? CQ_RESUME_ASK_LOGIN_APPLIED : CQ_RESUME_ASK_APPLIED,
            m->conn_id, NULL, 0);
}

static void apply(cq_core_t *c, const cq_xmsg_t *m)
{
    applied(c, m);
    bool route = m->u2 & CHUNK_ROUTE;
    cq_conn_t *conn = cq_map_get(&c->conns, m->conn_id);
    if (!conn || conn->state == CONN_CLOSING)
        return; /* closed: the bridge heard (CQ_RESUME_ASK_GONE) or hears it */
    if (route && !conn->route_hold)
        return; /* not this connection's login (its id was reused) */
    if (!route && (m->u2 & CQ_RESUME_CHUNK_BEGIN)) {
        cq__seg_close(c); /* an open segment of live events must not grow past BEGIN */
        if (cq_map_put(&c->holds, conn->id, (void *)((uintptr_t)m->chan_id + 1)) == 0)
            conn->bridge_hold = 1; /* out of memory: not held, and the client sees repeats */
    }
    if (m->buf)
        cq__conn_push_run(c, conn, m->buf, m->u1);
    if (conn->state == CONN_CLOSING)
        return; /* over the hard limit */
    if ((m->u2 & CQ_RESUME_CHUNK_FINAL) && route) {
        conn->route_hold = 0;
        conn->route_wait = 0;
        return;
    }
    if (m->u2 & CQ_RESUME_CHUNK_FINAL) {
        cq_map_del(&c->holds, conn->id);
        conn->bridge_hold = 0;
        conn->resume_asked = 0;
        conn->catchup_wait = 0;
        return;
    }
    if (cq_sendq_bytes(cq_conn_sendq(conn)) < catchup_low(c))
        ask_more(c, conn, route);
    else if (!(route ? conn->route_wait : conn->catchup_wait))
        wait_room(c, conn, route);
}

/* XM_RESUME: on GLOBAL's worker it goes on to the connection's worker (the same FIFO as the
 * fan-outs that went before it), unless the connection is here. */
void cq__resume_chunk(cq_core_t *c, cq_xmsg_t *m)
{
    int w = cq__conn_worker(c, m->conn_id);
    if (w == c->index || w < 0 || w >= c->nworkers) {
        apply(c, m);
        return;
    }
    cq_xmsg_t *f = cq__xmsg_new(XM_RESUME, 0);
    if (!f) {
        CQ_WARN("resume", "conn %u: a resume chunk was dropped: out of memory", m->conn_id);
        applied(c, m);
        return;
    }
    f->conn_id = m->conn_id;
    f->chan_id = m->chan_id;
    f->u1 = m->u1;
    f->u2 = m->u2;
    f->buf = m->buf;
    m->buf = NULL; /* the forwarded message's reference now */
    cq__xmsg_post(c, w, f);
}

/* The flush: connections whose queue drained under the threshold ask for their next chunk. */
void cq__resume_flush(cq_core_t *c)
{
    size_t low = catchup_low(c);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < c->n_catchup; i++) {
        cq_conn_t *conn = cq_map_get(&c->conns, c->catchup[i]);
        if (!conn || conn->state == CONN_CLOSING || !(conn->catchup_wait || conn->route_wait))
            continue;
        if (cq_sendq_bytes(cq_conn_sendq(conn)) >= low) {
            c->catchup[kept++] = c->catchup[i];
            continue;
        }
        if (conn->catchup_wait)
            ask_more(c, conn, false);
        if (conn->route_wait)
            ask_more(c, conn, true);
    }
    c->n_catchup = kept;
}

/* The connection closes: the bridge ends its session. */
void cq__resume_conn_closed(cq_core_t *c, cq_conn_t *conn)
{
    conn->catchup_wait = 0; /* its id drops out at the next flush */
    conn->route_wait = 0;
    if (conn->resume_asked)
        ask(c->sh, CQ_RESUME_ASK_GONE, conn->id, NULL, 0);
    if (conn->route_hold)
        ask(c->sh, CQ_RESUME_ASK_LOGIN_GONE, conn->id, NULL, 0);
    if (conn->bridge_hold)
        cq_map_del(&c->holds, conn->id);
    conn->resume_asked = 0;
    conn->bridge_hold = 0;
    conn->route_hold = 0;
}
