/* core.c - per-worker core: creation, cross-worker messages, flush and housekeeping.
 *
 * The io layer calls in on the worker's own thread only: cq_core_drain from the wake
 * (uv_async), cq_core_flush once per loop iteration before the loop blocks (uv_prepare),
 * cq_core_tick from a 100 ms timer. The entry points that take the time cache it in now_ms,
 * which the handlers below them use instead of reading a clock.
 *
 * One cq_core_t per worker thread owns that worker's connections, channels and fan-out lists,
 * so the core's handlers never lock. Other workers reach it only through its inbox, drained
 * here through a table of message kinds (one row per kind). Periodic work (auth and idle
 * timeouts, soft send limits, recovery timers) runs from one tick that the io layer calls
 * about every 100 ms with the time: the core owns no timer, so it stays an engine with no
 * I/O that the tests drive with a manual clock. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <string.h>

/* The worker's decode arena holds one inbound message's body unpacked by protobuf-c, and is
 * reset after each message. The cap bounds what a crafted body can make protobuf-c allocate (a
 * 64 KiB body of small repeated sub-messages unpacks into several times that); a body that
 * needs more does not decode and is dropped like any other undecodable body. */
#define ARENA_CAP (256u * 1024u)

cq_core_t *cq_core_new(cq_shared_t *sh, int index)
{
    cq_core_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->sh = sh;
    c->index = index;
    c->nworkers = sh->o.workers;
    cq_mpsc_init(&c->inbox);
    cq_map_init(&c->conns);
    cq_map_init(&c->chans);
    cq_map_init(&c->connrefs);
    cq_map_init(&c->lsubs);
    cq_list_init(&c->fb_open);
    cq_map_init(&c->chaninfo);
    cq_map_init(&c->routes);
    cq_map_init(&c->holds);
    cq_smap_init(&c->pits, false); /* PITs are compared as they are (auth.c) */
    cq_map_init(&c->aoi);
    cq_list_init(&c->recsubs);
    cq_list_init(&c->pending);
    cq_list_init(&c->lazy);
    c->lazy_due = UINT64_MAX;
    cq_list_init(&c->unauth);
    cq_list_init(&c->announcing);
    cq_list_init(&c->auth_held);
    cq_list_init(&c->soft);
    cq_wire_arena_init(&c->arena, ARENA_CAP);
    /* Snappy bodies inflate into scratch: one body at a time per worker (the handlers finish
     * with it before the next packet), never more than the largest packet, so no buffer per
     * connection. sm is one SENDMANY batch per target worker (sendmany.c). Non-spatial channel
     * ids start at 1 (0 is GLOBAL); schemas published later arrive as XM_SCHEMA. */
    c->scratch = cq_malloc(CQ_FRAME_MAX_BODY);
    c->nplaces = cq__nplaces(sh);
    c->sm = cq_calloc((size_t)c->nplaces, sizeof(cq_sendmany_t));
    c->id_cursor = 1;
    c->schema = sh->o.schema;
    cq_coarsen_init(&c->co, NULL);
    /* Registered before anything can fail: cq_core_free unregisters it, and posting needs every
     * worker's core in place before any worker runs (cq_core.h). */
    sh->cores[index] = c;
    if (!c->scratch || !c->sm || cq__node_init(c) < 0)
        return cq_core_free(c);
    /* GLOBAL exists from the start, ownerless until a CREATE_CHANNEL{GLOBAL} possesses it (§2.1).
     * Its worker keeps the channel directory, because CREATE_CHANNEL and LIST_CHANNEL are
     * channel-0 messages and arrive there anyway. */
    if (index == cq__place_dir_worker(c) &&
        (!cq__chan_create(c, 0, CHANNELDPB__CHANNEL_TYPE__GLOBAL, "", 0, 0) ||
         cq__dir_add(c, 0, CHANNELDPB__CHANNEL_TYPE__GLOBAL, "") < 0))
        return cq_core_free(c);
    return c;
}

/* Called after every worker's loop has ended, when nothing posts to this inbox any more. The
 * messages left in it are freed unhandled: the workers have stopped, and a handler could post
 * to a core already freed. Connections still here are released without a close: their transports
 * are gone, and no worker is left to hear a CONN_GONE. */
cq_core_t *cq_core_free(cq_core_t *c)
{
    if (!c)
        return NULL;
    cq_xmsg_t *m;
    while ((m = cq__xmsg_pop(c)))
        cq__xmsg_free(m);
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->conns, &it, NULL, &v)) {
        cq_core_conn_release(c, v);
        it = 0; /* release changed the map */
    }
    cq__recover_free_all(c);
    cq__chan_free_all(c);
    cq__sendmany_free(c);
    cq__node_free(c);
    cq_buf_unref(c->emit_rec);
    cq_buf_unref(c->emit_src);
    cq_free(c->due);
    cq__chaninfo_free_all(c);
    cq__spatial_free(c);
    it = 0;
    while (cq_map_next(&c->connrefs, &it, NULL, &v))
        cq_free(v);
    c->seg.l = NULL; /* an open segment is dropped with its queues */
    it = 0;
    while (cq_map_next(&c->lsubs, &it, NULL, &v)) {
        cq__fanbuf_release(v);
        cq_free(((cq_lsubs_t *)v)->conns);
        cq_free(v);
    }
    it = 0;
    while (cq_map_next(&c->aoi, &it, NULL, &v))
        cq_free(v);
    cq__auth_free_all(c);
    cq__inject_free_all(c);
    cq_free(c->catchup);
    cq_map_done(&c->aoi);
    cq_map_done(&c->conns);
    cq_map_done(&c->chans);
    cq_map_done(&c->connrefs);
    cq_map_done(&c->lsubs);
    cq_map_done(&c->chaninfo);
    cq_map_done(&c->routes);
    cq_map_done(&c->holds);
    cq_wire_arena_done(&c->arena);
    cq_free(c->scratch);
    if (c->sh->cores[c->index] == c)
        c->sh->cores[c->index] = NULL;
    cq_free(c);
    return NULL;
}

/* The per-message log budget behind CQ_MSG_LOG: CQ_LOG_BURST lines a second per worker, so a
 * peer that streams bad messages can flood neither the log nor the worker's time spent
 * formatting lines. The lines refused are counted and reported with the first line of a later
 * window. Per worker, so the budget needs no shared state, and timed by the worker's cached
 * now_ms, not by a clock read per line. */
bool cq__log_allow(cq_core_t *c)
{
    if (!cq_log_enabled(CQ_LOG_INFO))
        return false;
    if (c->now_ms - c->log_window_ms >= 1000) {
        if (c->log_suppressed)
            CQ_INFO("core", "worker %d: %u more dropped-message log lines suppressed", c->index,
                    c->log_suppressed);
        c->log_window_ms = c->now_ms;
        c->log_lines = c->log_suppressed = 0;
    }
    if (c->log_lines < CQ_LOG_BURST) {
        c->log_lines++;
        return true;
    }
    c->log_suppressed++;
    return false;
}

/* ---- cross-worker messages: one row per kind ---------------------------------------------- */

/* The request a DISPATCH, CREATE or REMOVE message carries; its sender if it lives here.
 * m->mp.body still points where the body was on the posting worker (a read buffer reused
 * since): the body that counts is the copy that travelled in m->body. r.conn is set when the
 * sender lives here, so that replies go straight to its queue (cq__reply). */
static cq_req_t xm_req(cq_core_t *c, const cq_xmsg_t *m)
{
    cq_req_t r = {m->conn_id, m->conn_type, m->mp, NULL, 0};
    r.mp.body = m->body_len ? m->body : NULL;
    r.conn = cq_map_get(&c->conns, m->conn_id);
    return r;
}

/* The handlers of a carried request decode its body into the worker's arena; each row that runs
 * one resets the arena after it, as dispatch.c does per inbound message, so the arena's cap is
 * per message and nothing decoded outlives the message it came from. */
static void xm_dispatch(cq_core_t *c, cq_xmsg_t *m)
{
    cq_req_t r = xm_req(c, m);
    r.bounced = m->u3 == 1; /* node.c: XM_BOUNCE sends it back so */
    cq__handle_req(c, &r);
    cq_wire_arena_reset(&c->arena);
}

static void xm_create(cq_core_t *c, cq_xmsg_t *m)
{
    cq_req_t r = xm_req(c, m);
    cq__handle_create_here(c, &r, m->u1);
    cq_wire_arena_reset(&c->arena);
}

static void xm_remove(cq_core_t *c, cq_xmsg_t *m)
{
    cq_req_t r = xm_req(c, m);
    cq__handle_remove_here(c, &r, m->u1);
    cq_wire_arena_reset(&c->arena);
}

/* A record for one connection of this worker. It may have closed since the SEND was posted:
 * the record is then dropped with the message, which holds its reference. */
static void xm_send(cq_core_t *c, cq_xmsg_t *m)
{
    if (m->u2 == CQ_XSEND_GOWNER) { /* on GLOBAL's home, for its owner (cq__notify_gowner) */
        uint32_t g = atomic_load(&c->sh->global_owner);
        if (g && g != m->u3)
            cq__send_to(c, g, m->buf);
        return;
    }
    cq_conn_t *conn = cq_map_get(&c->conns, m->conn_id);
    if (conn && m->u1)
        cq__conn_push_lazy(c, conn, m->buf);
    else if (conn)
        cq__conn_push(c, conn, m->buf);
    if (conn && m->u2 == CQ_XSEND_GLOBAL_RECOVERY)
        cq__recover_global_sent(c, conn);
}

/* u1 the sender, u2 the channel's owner when the broadcast left, u3 the flags: the filters
 * travel with the record because this worker does not have the channel. */
static void xm_fanout(cq_core_t *c, cq_xmsg_t *m)
{
    cq__local_fanout(c, m->chan_id, m->buf, m->u1, m->u2, m->u3);
}

/* The channel's worker changes this worker's local lists only through these two, on the same
 * FIFO as its FANOUTs: LSUB_ADD before the first fan-out meant for the new subscriber, LSUB_DEL
 * after the last (doc/threads.md, "Ordering argument"). */
static void xm_lsub_add(cq_core_t *c, cq_xmsg_t *m)
{
    cq__lsub_add(c, m->chan_id, m->conn_id);
}

static void xm_lsub_del(cq_core_t *c, cq_xmsg_t *m)
{
    cq__lsub_del(c, m->chan_id, m->conn_id);
}

/* body: the PIT of a lost recoverable server, whose state is kept for a successor; empty
 * otherwise, and then the connection's subscriptions and ownerships here are dropped. */
static void xm_conn_gone(cq_core_t *c, cq_xmsg_t *m)
{
    cq__conn_gone(c, m->conn_id, m->conn_type, m->body_len ? (const char *)m->body : NULL,
                  m->u1 == 1);
}

/* cq__close_conn carries its reason in u1 (negated) and body. */
static void xm_close(cq_core_t *c, cq_xmsg_t *m)
{
    cq__close_local(c, m->conn_id, -(int)m->u1,
                    m->body_len ? (const char *)m->body : "DISCONNECT requested");
}

/* Directory worker: a channel's own worker reports its removal (FREE_ID) and metadata changes
 * (META), so that LIST and the id cursor follow channels that live elsewhere. */
static void xm_free_id(cq_core_t *c, cq_xmsg_t *m)
{
    cq__dir_free_id(c, m->chan_id);
}

static void xm_meta(cq_core_t *c, cq_xmsg_t *m)
{
    cq__dir_set_meta(c, m->chan_id, m->u1, m->body_len ? (const char *)m->body : "");
}

/* A recovered connection id now lives on worker u1, not on id % workers (place.c). */
static void xm_route(cq_core_t *c, cq_xmsg_t *m)
{
    cq__place_route(c, m->conn_id, (int)m->u1);
}

static void xm_sendmany(cq_core_t *c, cq_xmsg_t *m)
{
    cq__sendmany_deliver(c, m);
}

static void xm_resync(cq_core_t *c, cq_xmsg_t *m)
{
    cq__sendmany_resync(c, m);
}

/* ptr: the schema the main thread published on SIGHUP. A pointer is enough: every schema
 * outlives the shared state (channels keep pointing into the ones they resolved against). */
static void xm_schema(cq_core_t *c, cq_xmsg_t *m)
{
    cq__data_schema(c, m->ptr);
}

/* body: the PIT, NUL-terminated (cq__xmsg_post_others copies it with its NUL); u1: the lost
 * connection's id (conn_id's own, unless the successor is on another node). */
static void xm_recover(cq_core_t *c, cq_xmsg_t *m)
{
    cq__recover_apply(c, m->conn_id, m->u1, (const char *)m->body);
}

/* Spatial interest, ADJACENT broadcasts and handover stages (interest.c, forward.c, handover.c):
 * each runs on the worker that owns what it touches, and only its message crosses. */
static void xm_interest(cq_core_t *c, cq_xmsg_t *m)
{
    cq__interest_apply(c, m);
}

static void xm_adjacent(cq_core_t *c, cq_xmsg_t *m)
{
    cq__adjacent_deliver(c, m);
}

static void xm_handover(cq_core_t *c, cq_xmsg_t *m)
{
    cq__handover_stage(c, m);
}

/* Spatial creation steps and entity channels (spatial.c, entity.c). An SP_CELL message carries
 * the CREATE request's body and, from offset u1, the rest of the reply chain; the bound check
 * guards against reading past the body. */
static void xm_sp_cell(cq_core_t *c, cq_xmsg_t *m)
{
    cq_req_t r = xm_req(c, m);
    if (m->u1 <= m->body_len)
        cq__spatial_chain(c, &r, m->body + m->u1, m->body_len - m->u1);
    cq_wire_arena_reset(&c->arena);
}

/* An entity channel, created on its own worker, joins the directory so that LIST shows it. */
static void xm_dir_add(cq_core_t *c, cq_xmsg_t *m)
{
    const char *md = m->body_len ? (const char *)m->body : "";
    if (cq_map_get(&c->chaninfo, m->chan_id)) /* a channel announced again to a new home */
        cq__dir_set_meta(c, m->chan_id, m->u1, md);
    else
        cq__dir_add(c, m->chan_id, m->u1, md);
}

static void xm_node_rehome(cq_core_t *c, cq_xmsg_t *m)
{
    cq__node_rehome_local(c, m);
}

static void xm_entity(cq_core_t *c, cq_xmsg_t *m)
{
    cq_req_t r = xm_req(c, m);
    cq__entity_create_here(c, &r, m->u1);
    cq_wire_arena_reset(&c->arena);
}

static void xm_wk_sub(cq_core_t *c, cq_xmsg_t *m)
{
    if (m->chan_id == CQ_CHAN_ID_GLOBAL) { /* from another node: every well-known entity */
        cq__entity_wk_all(c, m->conn_id);
        return;
    }
    cq__entity_wk_sub(c, m->chan_id, m->conn_id);
}

/* NODE_CONN, GLOBAL_OWNER and BOUNCE are taken by the relay thread itself (node.c): a worker never
 * gets one. */
static void xm_node_conn(cq_core_t *c, cq_xmsg_t *m)
{
    (void)c, (void)m;
}

static void xm_node_conn_ack(cq_core_t *c, cq_xmsg_t *m)
{
    cq__node_conn_ack(c, m->conn_id);
}

static void xm_node_reset(cq_core_t *c, cq_xmsg_t *m)
{
    cq__node_reset_local(c, m);
}

/* Bridge events from an outside thread (inject.c). */
static void xm_inject_bc(cq_core_t *c, cq_xmsg_t *m)
{
    cq__inject_bc(c, m);
}

static void xm_inject_route(cq_core_t *c, cq_xmsg_t *m)
{
    cq__inject_route(c, m);
}

typedef struct xm_def {
    uint8_t kind; /* also the row's index */
    const char *name;
    void (*handle)(cq_core_t *c, cq_xmsg_t *m);
    /* Its handler only delivers to this worker's connections or changes its local lists:
     * nothing it causes leaves for another node in an order that matters, so posting it needs
     * no causal flush (cq__xmsg_post). A close it causes is no such order (doc/relay-cluster.md).
     */
    bool delivers;
} xm_def_t;

/* A new kind is an XM_ value in place.h, a row here and its handler above. Indexed by kind, so
 * the drain costs one load per message; a kind without a row is freed unhandled. */
static const xm_def_t xm_table[XM__COUNT] = {
    [XM_DISPATCH] = {XM_DISPATCH, "DISPATCH", xm_dispatch},
    [XM_SEND] = {XM_SEND, "SEND", xm_send, true},
    [XM_FANOUT] = {XM_FANOUT, "FANOUT", xm_fanout, true},
    [XM_LSUB_ADD] = {XM_LSUB_ADD, "LSUB_ADD", xm_lsub_add, true},
    [XM_LSUB_DEL] = {XM_LSUB_DEL, "LSUB_DEL", xm_lsub_del, true},
    [XM_CONN_GONE] = {XM_CONN_GONE, "CONN_GONE", xm_conn_gone},
    [XM_CLOSE] = {XM_CLOSE, "CLOSE", xm_close},
    [XM_CREATE] = {XM_CREATE, "CREATE", xm_create},
    [XM_FREE_ID] = {XM_FREE_ID, "FREE_ID", xm_free_id},
    [XM_META] = {XM_META, "META", xm_meta},
    [XM_REMOVE] = {XM_REMOVE, "REMOVE", xm_remove},
    [XM_ROUTE] = {XM_ROUTE, "ROUTE", xm_route},
    [XM_SENDMANY] = {XM_SENDMANY, "SENDMANY", xm_sendmany, true},
    [XM_SCHEMA] = {XM_SCHEMA, "SCHEMA", xm_schema},
    [XM_RECOVER] = {XM_RECOVER, "RECOVER", xm_recover},
    [XM_RESYNC] = {XM_RESYNC, "RESYNC", xm_resync},
    /* spatial interest, ADJACENT, handover */
    [XM_INTEREST] = {XM_INTEREST, "INTEREST", xm_interest},
    [XM_ADJACENT] = {XM_ADJACENT, "ADJACENT", xm_adjacent, true},
    [XM_HANDOVER] = {XM_HANDOVER, "HANDOVER", xm_handover},
    /* spatial cells, entity channels */
    [XM_SP_CELL] = {XM_SP_CELL, "SP_CELL", xm_sp_cell},
    [XM_DIR_ADD] = {XM_DIR_ADD, "DIR_ADD", xm_dir_add},
    [XM_ENTITY] = {XM_ENTITY, "ENTITY", xm_entity},
    [XM_WK_SUB] = {XM_WK_SUB, "WK_SUB", xm_wk_sub},
    /* relay nodes */
    [XM_NODE_CONN] = {XM_NODE_CONN, "NODE_CONN", xm_node_conn},
    [XM_GLOBAL_OWNER] = {XM_GLOBAL_OWNER, "GLOBAL_OWNER", xm_node_conn},
    [XM_NODE_RESET] = {XM_NODE_RESET, "NODE_RESET", xm_node_reset},
    [XM_NODE_CONN_ACK] = {XM_NODE_CONN_ACK, "NODE_CONN_ACK", xm_node_conn_ack},
    [XM_NODE_REHOME] = {XM_NODE_REHOME, "NODE_REHOME", xm_node_rehome},
    [XM_BOUNCE] = {XM_BOUNCE, "BOUNCE", xm_node_conn},
    /* bridge events */
    [XM_INJECT_BC] = {XM_INJECT_BC, "INJECT_BC", xm_inject_bc},
    [XM_INJECT_ROUTE] = {XM_INJECT_ROUTE, "INJECT_ROUTE", xm_inject_route},
    [XM_RESUME] = {XM_RESUME, "RESUME", cq__resume_chunk},
    [XM_TOPIC_CHAN] = {XM_TOPIC_CHAN, "TOPIC_CHAN", cq__topic_chan},
};

bool cq__xm_delivers(int kind)
{
    return kind >= 0 && kind < XM__COUNT && xm_table[kind].delivers;
}

const char *cq__xm_name(int kind)
{
    return kind >= 0 && kind < XM__COUNT && xm_table[kind].handle ? xm_table[kind].name : NULL;
}

/* Drains until the inbox is empty, including what arrives while it runs: wakes coalesce
 * (uv_async_send), so one wake must cover every message posted before it. Each message's cost
 * leaves inbox_bytes only once it was handled (cq__xmsg_done), so paced senders resume only after
 * the work is done, not just dequeued. */
void cq_core_drain(cq_core_t *c, uint64_t now_ms)
{
    c->now_ms = now_ms;
    cq_xmsg_t *m;
    while ((m = cq__xmsg_pop(c))) {
        if (m->kind < XM__COUNT && xm_table[m->kind].handle)
            xm_table[m->kind].handle(c, m);
        cq__xmsg_done(c, m);
    }
}

/* ---- flush and housekeeping ------------------------------------------------------------- */

/* For work done after the flush in the same iteration (write completions that closed
 * connections post CONN_GONE): those messages must not wait for the next iteration's flush. */
void cq_core_wake(cq_core_t *c)
{
    cq__xmsg_wake_posted(c);
}

/* The end of the worker's iteration, before its loop may block. The open fan-out segment goes
 * into its recipients' queues first, or its bytes would miss this write. A connection leaves
 * the pending list before its flush, so output queued from then on marks it for the next
 * iteration. */
void cq_core_flush(cq_core_t *c)
{
    c->iter++;
    cq__seg_close(c);
    if (c->n_rdirty)
        cq__node_flush(c);
    if (c->n_catchup)
        cq__resume_flush(c);
    cq__xmsg_wake_posted(c); /* first: the other workers run while this one writes */
    while (!cq_list_empty(&c->pending)) {
        cq_list_t *n = c->pending.next;
        cq_list_remove(n);
        cq_conn_t *conn = cq_container_of(n, cq_conn_t, pending_node);
        conn->pending = 0;
        if (conn->state != CONN_CLOSING)
            conn->tops->flush(conn->tctx);
    }
    cq__fanbuf_release_all(c); /* the queues that took slices hold their own references */
}

/* --auth-timeout-ms bounds what a connection that never authenticates can hold. The list is in
 * accept order and the timeout the same for all, so the walk stops at the first connection
 * still within it: a tick costs the expired connections, not every unauthenticated one. */
static void tick_auth(cq_core_t *c, uint64_t now)
{
    uint32_t to = c->sh->o.auth_timeout_ms;
    while (to && !cq_list_empty(&c->unauth)) {
        cq_conn_t *conn = cq_container_of(c->unauth.next, cq_conn_t, unauth_node);
        if (now - conn->accepted_ms < to)
            break;
        CQ_METRIC_ADD(c, M_AUTH_TIMEOUT, conn->type, 1);
        cq_core_conn_close(c, conn, CQ_ETIMEOUT, "not authenticated within auth-timeout-ms");
    }
}

/* Only connections over the soft limit are on this list (pushed() in conn.c adds one when its
 * queue crosses it), so the tick walks the slow consumers, not every connection. A queue found
 * under the limit again restarts its clock (cq_sendq_check_soft) and leaves the list; one over
 * it for sendq-soft-seconds is closed, so a slow subscriber never holds a channel back. */
static void tick_soft(cq_core_t *c, uint64_t now)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->soft)
    {
        cq_conn_t *conn = cq_container_of(n, cq_conn_t, soft_node);
        int r = cq_sendq_check_soft(&conn->sendq, c->sh->o.sendq_soft_limit,
                                    (uint64_t)c->sh->o.sendq_soft_seconds * 1000, now);
        if (r == CQ_ESLOW) {
            CQ_METRIC_ADD(c, M_SLOW_CONSUMER, conn->type, 1);
            cq_core_conn_close(c, conn, r, "slow consumer: over sendq-soft-limit too long");
        } else if (!conn->sendq.soft_since_ms) {
            cq_list_remove(&conn->soft_node);
        }
    }
}

/* Off by default: channeld's protocol has no heartbeat, and a client that only listens sends
 * nothing for minutes (TCP keepalive finds dead peers instead). When set, the tick walks every
 * connection of the worker, as last_rx_ms changes on every read and keeps no order. */
static void tick_idle(cq_core_t *c, uint64_t now)
{
    uint32_t to = c->sh->o.idle_timeout_ms;
    if (!to)
        return;
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->conns, &it, NULL, &v)) {
        cq_conn_t *conn = v;
        if (conn->state != CONN_CLOSING && now - conn->last_rx_ms >= to) {
            CQ_METRIC_ADD(c, M_IDLE_TIMEOUT, conn->type, 1);
            cq_core_conn_close(c, conn, CQ_ETIMEOUT, "idle: nothing received for idle-timeout-ms");
        }
    }
}

void cq_core_tick(cq_core_t *c, uint64_t now_ms)
{
    c->now_ms = now_ms;
    tick_auth(c, now_ms);
    tick_soft(c, now_ms);
    tick_idle(c, now_ms);
    cq__recover_tick(c, now_ms);
    cq__node_tick(c, now_ms);
    cq__auth_tick(c, now_ms);
}
