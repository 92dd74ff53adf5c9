/* place.c - the placement seam (place.h): where connections and channels live, the id layout
 * that leaves room for a node id, and the only ways work crosses to another worker.
 *
 * Everything a handler sends elsewhere goes through the cq__xmsg_* functions here: the message
 * is pushed onto the target's lock-free inbox and the target is woken once, at the end of the
 * poster's iteration. Each post counts the message's bytes against the target's inbox, and a
 * connection whose messages land in an inbox that is too full stops being read.
 *
 * Placement is a pure function of the id (id % workers) so that any worker, and the io layer
 * before a connection exists, can compute it without asking anyone. The one exception is a
 * recovered server connection, which keeps its old id but stays on the worker that accepted
 * the successor: the worker that adopts it tells every other one, and each keeps a route map
 * that is consulted only while it is not empty, so the common path stays one division. */
#include "core.h"
#include "msgtab.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <string.h>

/* ---- ids -------------------------------------------------------------------------------- */

#define CHAN_ID_BITS 16u /* non-spatial channel ids: 1 .. 0xffff */
#define LOCAL_MIN    8u  /* local connection id bits a node keeps at least (place.h) */

/* The node bits come out of conn-id-bits, not above it: connection ids must stay within the
 * width the game was told (-mcb; UE keeps them to 13 bits so that the NetGUIDs it makes from
 * them land in the entity range). */
int cq__idl_init(uint32_t conn_bits, uint32_t node_bits, cq_idl_t *ret)
{
    if (!conn_bits)
        conn_bits = 31;
    if (conn_bits > 32)
        conn_bits = 32; /* every uint32 */
    if (node_bits > CQ_NODE_BITS_MAX || (node_bits && conn_bits < node_bits + LOCAL_MIN))
        return CQ_ECONFIG;
    *ret = (cq_idl_t){(uint8_t)conn_bits, (uint8_t)node_bits};
    return 0;
}

cq_chan_kind_t cq__id_chan_kind(uint32_t chan_id)
{
    if (chan_id == CQ_CHAN_ID_GLOBAL)
        return CQ_CHAN_KIND_GLOBAL;
    if (chan_id < CQ_CHAN_ID_SPATIAL_START)
        return CQ_CHAN_KIND_NONSPATIAL;
    return chan_id < CQ_CHAN_ID_ENTITY_START ? CQ_CHAN_KIND_SPATIAL : CQ_CHAN_KIND_ENTITY;
}

uint32_t cq__id_conn_limit(const cq_idl_t *l)
{
    uint32_t bits = l->conn_bits - l->node_bits;
    return bits >= 32 ? UINT32_MAX : (1u << bits) - 1;
}

uint32_t cq__id_chan_max(const cq_idl_t *l)
{
    return (1u << (CHAN_ID_BITS - l->node_bits)) - 1;
}

uint32_t cq__id_conn(const cq_idl_t *l, uint32_t node, uint32_t local)
{
    return l->node_bits ? node << (l->conn_bits - l->node_bits) | local : local;
}

uint32_t cq__id_chan(const cq_idl_t *l, uint32_t node, uint32_t local)
{
    return l->node_bits ? node << (CHAN_ID_BITS - l->node_bits) | local : local;
}

/* Splits id, of `width` bits, into node and local id. */
static uint32_t split(const cq_idl_t *l, uint32_t width, uint32_t id, uint32_t *ret_local)
{
    uint32_t shift = width - l->node_bits;
    uint32_t mask = shift >= 32 ? UINT32_MAX : (1u << shift) - 1;
    if (ret_local)
        *ret_local = id & mask;
    return l->node_bits ? id >> shift : 0;
}

uint32_t cq__id_conn_node(const cq_idl_t *l, uint32_t conn_id, uint32_t *ret_local)
{
    return split(l, l->conn_bits, conn_id, ret_local);
}

bool cq__id_chan_node(const cq_idl_t *l, uint32_t chan_id, uint32_t *ret_node, uint32_t *ret_local)
{
    if (cq__id_chan_kind(chan_id) != CQ_CHAN_KIND_NONSPATIAL)
        return false;
    uint32_t node = split(l, CHAN_ID_BITS, chan_id, ret_local);
    if (ret_node)
        *ret_node = node;
    return true;
}

/* ---- where things live ------------------------------------------------------------------ */

/* For the io layer, before the connection exists: the acceptor hands a new socket to the worker
 * that will own its id. Routes are not consulted, as a new id is never a recovered one. */
int cq_shared_conn_worker(const cq_shared_t *sh, uint32_t conn_id)
{
    return (int)(conn_id % (uint32_t)sh->o.workers);
}

int cq_shared_chan_worker(const cq_shared_t *sh, uint32_t chan_id)
{
    return (int)(chan_id % (uint32_t)sh->o.workers);
}

int cq__conn_worker(const cq_core_t *c, uint32_t conn_id)
{
    if (cq_unlikely(c->sh->node)) {
        uint32_t node = cq__id_conn_node(&c->sh->ids, conn_id, NULL);
        if (node != c->sh->node)
            return cq__place_node(c, node);
    }
    if (cq_unlikely(cq_map_count(&c->routes))) {
        void *w = cq_map_get(&c->routes, conn_id);
        if (w)
            return (int)(uintptr_t)w - 1;
    }
    return (int)(conn_id % (uint32_t)c->nworkers);
}

/* Channels never move: a channel lives where its id hashes for its whole life, so no route. */
int cq__chan_worker(const cq_core_t *c, uint32_t chan_id)
{
    uint32_t node;
    if (cq_unlikely(c->sh->node)) {
        if (cq__id_chan_node(&c->sh->ids, chan_id, &node, NULL) && node != c->sh->node)
            return cq__place_node(c, node);
        /* GLOBAL lives on its home, where the directory is too, and so do the spatial
         * controller's cells and the entity channels, whose ids carry no node (node.c) */
        if (cq__id_chan_kind(chan_id) != CQ_CHAN_KIND_NONSPATIAL) {
            node = atomic_load_explicit(&c->sh->global_home, memory_order_relaxed);
            if (node && node != c->sh->node)
                return cq__place_node(c, node);
        }
    }
    return (int)(chan_id % (uint32_t)c->nworkers);
}

int cq__place_local_dir_worker(const cq_core_t *c)
{
    return (int)(CQ_CHAN_ID_GLOBAL % (uint32_t)c->nworkers);
}

int cq__place_dir_worker(const cq_core_t *c)
{
    return cq__chan_worker(c, CQ_CHAN_ID_GLOBAL);
}

void cq__place_route(cq_core_t *c, uint32_t conn_id, int worker)
{
    cq_map_put(&c->routes, conn_id, (void *)(uintptr_t)(worker + 1));
}

/* A successor accepted here takes over an old id whose home is another worker. Its socket and
 * loop are here, so the id moves to it instead: every worker learns the route. The ROUTEs are
 * posted before this worker posts the recovery (XM_RECOVER) to the same inboxes, so each worker
 * knows where the id lives before it restores its subscriptions and sends it anything. */
void cq__place_adopt_conn(cq_core_t *c, uint32_t conn_id)
{
    if ((int)(conn_id % (uint32_t)c->nworkers) == c->index)
        return;
    cq__place_route(c, conn_id, c->index);
    cq__xmsg_post_others(c, XM_ROUTE, conn_id, 0, (uint32_t)c->index, NULL);
}

void cq__place_forget(cq_core_t *c, uint32_t conn_id)
{
    cq_map_del(&c->routes, conn_id);
}

/* ---- cross-worker messages -------------------------------------------------------------- */

/* Zeroed, so the fields a kind does not use read as 0, which every handler takes as "none". */
cq_xmsg_t *cq__xmsg_new(int kind, size_t body_len)
{
    cq_xmsg_t *m = cq_calloc(1, sizeof(*m) + body_len);
    if (m) {
        m->kind = (uint8_t)kind;
        m->body_len = (uint32_t)body_len;
    }
    return m;
}

/* The body is copied: it lies in the sender's read buffer, which is reused once the read is
 * handled. Without the body (a REMOVE carries its target in u1) the copy is skipped. */
cq_xmsg_t *cq__xmsg_req(int kind, const cq_req_t *r, bool with_body)
{
    size_t blen = with_body ? r->mp.body_len : 0;
    cq_xmsg_t *m = cq__xmsg_new(kind, blen);
    if (!m)
        return NULL;
    m->conn_id = r->conn_id;
    m->conn_type = r->conn_type;
    m->mp = r->mp;
    if (blen)
        memcpy(m->body, r->mp.body, blen);
    if (!with_body) {
        m->mp.body = NULL;
        m->mp.body_len = 0;
    }
    return m;
}

cq_xmsg_t *cq__xmsg_free(cq_xmsg_t *m)
{
    if (!m)
        return NULL;
    cq_buf_unref(m->buf);
    cq_free(m);
    return NULL;
}

/* The cost counts the referenced record too, although it is shared: the target keeps it alive
 * until it handles the message. The count is relaxed, as it only paces senders; the MPSC push
 * is what publishes the message. wake_mask has a bit per worker (at most CQ_MAX_WORKERS, 64). */
void cq__xmsg_post(cq_core_t *c, int worker, cq_xmsg_t *m)
{
    if (cq_unlikely(worker >= c->nworkers)) {
        cq__node_post(c, cq__place_node_of(c, worker), m);
        return;
    }
    /* The causal flush: what this worker queued for other nodes goes to the relay before the
     * target can act on m, so a node record that m causes (from the target) cannot overtake one
     * queued before it (a spatial creation's SUB results, doc/relay-cluster.md). Not for a
     * delivery (a fan-out to the target's subscribers), which causes no such record: a flush
     * per broadcast cost a third of the relay's broadcast throughput. */
    if (c->n_rdirty && !cq__xm_delivers(m->kind))
        cq__node_flush(c);
    cq_core_t *t = c->sh->cores[worker];
    m->cost = (uint32_t)sizeof(*m) + m->body_len + (m->buf ? m->buf->len : 0);
    atomic_fetch_add_explicit(&t->inbox_bytes, m->cost, memory_order_relaxed);
    cq_mpsc_push(&t->inbox, &m->node);
    c->wake_mask |= 1ull << worker;
}

/* Why deferred: a wake is a syscall (eventfd write) and, when the target sleeps, a context
 * switch; one per message made a busy sender wake its peer hundreds of times per iteration, and
 * each wake drained only a few messages, so the peer's writes carried small batches. */
void cq__xmsg_wake_posted(cq_core_t *c)
{
    uint64_t mask = c->wake_mask;
    c->wake_mask = 0;
    while (mask) {
        int w = __builtin_ctzll(mask);
        mask &= mask - 1;
        c->sh->ops->wake(c->sh->ops_ud, w);
    }
}

/* The message is posted whatever the inbox holds: nothing is dropped. Instead the sender stops
 * being read (the io layer polls cq_conn_paused), so TCP pushes back on a peer that writes
 * faster than the channel's worker can handle. */
void cq__xmsg_post_paced(cq_core_t *c, int worker, cq_xmsg_t *m, cq_conn_t *sender)
{
    cq__xmsg_post(c, worker, m);
    /* another node's inbox is not seen from here: the relay's queue bounds what waits for it */
    if (worker < c->nworkers && cq__inbox_over(c, worker, CQ_INBOX_HIGH))
        sender->paused = 1;
}

void cq__xmsg_post_others(cq_core_t *c, int kind, uint32_t conn_id, uint8_t conn_type, uint32_t u1,
                          const char *body)
{
    size_t blen = body ? strlen(body) + 1 : 0;
    for (int w = 0; w < c->nworkers; w++) {
        if (w == c->index)
            continue;
        cq_xmsg_t *m = cq__xmsg_new(kind, blen);
        if (!m)
            continue;
        m->conn_id = conn_id;
        m->conn_type = conn_type;
        m->u1 = u1;
        if (blen)
            memcpy(m->body, body, blen);
        cq__xmsg_post(c, w, m);
    }
}

/* Woken at once: the caller is not a worker and has no end of iteration to defer the wake to. */
void cq__xmsg_post_any(cq_shared_t *sh, int worker, cq_xmsg_t *m)
{
    cq_mpsc_push(&sh->cores[worker]->inbox, &m->node);
    sh->ops->wake(sh->ops_ud, worker);
}

/* The same accounting as cq__xmsg_post (and node.c's in_post), so the bytes an outside
 * producer has queued pause the connections whose messages go to that worker, like anyone
 * else's: the inbox pacing still sees the whole backlog. */
void cq__xmsg_post_outside(cq_shared_t *sh, int worker, cq_xmsg_t *m)
{
    cq_core_t *t = sh->cores[worker];
    m->cost = (uint32_t)sizeof(*m) + m->body_len + (m->buf ? m->buf->len : 0);
    atomic_fetch_add_explicit(&t->inbox_bytes, m->cost, memory_order_relaxed);
    cq_mpsc_push(&t->inbox, &m->node);
    sh->ops->wake(sh->ops_ud, worker);
}

cq_xmsg_t *cq__xmsg_pop(cq_core_t *c)
{
    cq_mpsc_node_t *n = cq_mpsc_pop(&c->inbox);
    return n ? cq_container_of(n, cq_xmsg_t, node) : NULL;
}

/* After the handler ran, so the inbox counts a message until its work is done. */
void cq__xmsg_done(cq_core_t *c, cq_xmsg_t *m)
{
    atomic_fetch_sub_explicit(&c->inbox_bytes, m->cost, memory_order_relaxed);
    cq__xmsg_free(m);
}

/* ---- inbound flow control --------------------------------------------------------------- */

bool cq__inbox_over(const cq_core_t *c, int worker, int64_t limit)
{
    return atomic_load_explicit(&c->sh->cores[worker]->inbox_bytes, memory_order_relaxed) > limit;
}

bool cq_conn_paused(const cq_conn_t *conn)
{
    return conn->paused && conn->state != CONN_CLOSING;
}

/* Every inbox, not only the one that paused it: the connection's next messages may go to any
 * channel's worker. Resuming under CQ_INBOX_LOW, not CQ_INBOX_HIGH, keeps a sender from
 * flapping between paused and read at the threshold. */
bool cq_core_conn_resume(cq_core_t *c, cq_conn_t *conn)
{
    for (int w = 0; w < c->nworkers; w++)
        if (cq__inbox_over(c, w, CQ_INBOX_LOW))
            return false;
    conn->paused = 0;
    return true;
}
