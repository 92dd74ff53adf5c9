/* node.c - this node's side of a relay of chanqd nodes (issue 23, doc/relay-cluster.md): the
 * places that are other nodes, what a worker sends them and what arrives from them.
 *
 * A place is where a message goes (place.h): 0 .. nworkers - 1 are this node's workers,
 * nworkers + n is node n. A message for another node is encoded once (xwire.h) into the
 * worker's outbox for that node and leaves at the end of the loop iteration as one relay
 * record (CQ_CORE_REC_XMSGS: u32 length + xwire bytes, repeated), handed to the relay thread
 * (cq_shared_set_relay). What arrives from node n is decoded on the relay thread and posted to
 * the worker that owns its target here: the channel's, the connection's, or every worker for a
 * broadcast; in stream order, so the ordering arguments of doc/threads.md hold per node pair.
 *
 * Connections of other nodes are known here from the moment they authenticate
 * (XM_NODE_CONN: the directory gets an entry of theirs, so a SUB of them is counted and typed
 * as a local one is) until they close (XM_CONN_GONE from their node).
 *
 * Without a relay (node 0) none of this runs: every place is a worker. */
#include "core.h"
#include "xwire.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Posting from the relay and ZooKeeper threads (below). */
static void in_post(cq_shared_t *sh, int w, cq_xmsg_t *m, uint64_t *wake);
static void wake_all(cq_shared_t *sh, uint64_t wake);

/* A node heard from within this (three of its HEAD intervals) is alive enough to wait for. */
#define HEARD_FRESH_MS 600

void cq_shared_relay_heard(cq_shared_t *sh, uint16_t node)
{
    if (node < 256)
        atomic_store_explicit(&sh->heard_ms[node], cq_clock_mono_ms(), memory_order_relaxed);
}

/* ---- places ------------------------------------------------------------------------------- */

int cq__place_node(const cq_core_t *c, uint32_t node)
{
    return c->nworkers + (int)node;
}

uint32_t cq__place_node_of(const cq_core_t *c, int place)
{
    return place >= c->nworkers ? (uint32_t)(place - c->nworkers) : 0;
}

int cq__nplaces(const cq_shared_t *sh)
{
    return sh->o.workers + (sh->node ? 1 << sh->ids.node_bits : 0);
}

/* ---- sending: the worker's outboxes --------------------------------------------------------- */

/* m (taken) leaves for node with this iteration's other messages for it. A message that cannot
 * be encoded (a kind that cannot leave the process) or queued is dropped and counted: the
 * receiver's side of each kind says what a loss means (doc/relay-cluster.md). */
void cq__node_post(cq_core_t *c, uint32_t node, cq_xmsg_t *m)
{
    cq_sbuf_t *o = &c->rout[node];
    size_t at = o->len;
    uint32_t len = 0;
    int r = cq_sbuf_append(o, &len, sizeof(len)); /* patched below */
    if (r == 0)
        r = cq__xwire_encode(m, o);
    if (r < 0) {
        o->len = at;
        CQ_METRIC_ADD(c, M_NODE_DROPPED, 0, 1);
        CQ_MSG_LOG(c, "node", "message kind %u for node %u dropped: %s", m->kind, node,
                   cq_strerror(r));
    } else {
        len = (uint32_t)(o->len - at - sizeof(len));
        memcpy(o->data + at, &len, sizeof(len));
        if (at == 0)
            c->rdirty[c->n_rdirty++] = (uint16_t)node;
    }
    cq__xmsg_free(m);
}

/* End of the loop iteration: each node's outbox leaves as one record. */
void cq__node_flush(cq_core_t *c)
{
    cq_shared_t *sh = c->sh;
    for (uint32_t i = 0; i < c->n_rdirty; i++) {
        uint16_t node = c->rdirty[i];
        cq_sbuf_t *o = &c->rout[node];
        cq_buf_t *b = cq_buf_from(o->data, o->len);
        int r = b ? sh->relay_send(sh->relay_ud, node, b) : -ENOMEM;
        if (r < 0) {
            CQ_METRIC_ADD(c, M_NODE_DROPPED, 0, 1);
            CQ_MSG_LOG(c, "node", "%zu bytes of messages for node %u dropped: %s", o->len, node,
                       cq_strerror(r));
        }
        cq_buf_unref(b);
        o->len = 0;
        if (o->cap > (64u << 10))
            cq_sbuf_done(o); /* a burst's buffer is not kept */
    }
    c->n_rdirty = 0;
}

int cq__node_init(cq_core_t *c)
{
    if (!c->sh->node)
        return 0;
    size_t n = (size_t)1 << c->sh->ids.node_bits;
    c->rout = cq_calloc(n, sizeof(*c->rout));
    c->rdirty = cq_calloc(n, sizeof(*c->rdirty));
    return c->rout && c->rdirty ? 0 : -ENOMEM;
}

void cq__node_free(cq_core_t *c)
{
    if (c->rout)
        for (size_t i = 0; i < ((size_t)1 << c->sh->ids.node_bits); i++)
            cq_sbuf_done(&c->rout[i]);
    cq_free(c->rout);
    cq_free(c->rdirty);
    c->rout = NULL;
    c->rdirty = NULL;
}

/* Posts {kind, conn_id, conn_type, u1, text} to every live node, for what every node must hear
 * (a connection's arrival and departure, a recovery); text (borrowed, may be NULL) travels with
 * its NUL. Returns how many of them were heard from lately (CQ_RELAY_HEAD_MS-paced HEADs: a
 * node that died is not waited for). */
static uint32_t post_peers(cq_core_t *c, int kind, uint32_t conn_id, uint8_t conn_type, uint32_t u1,
                           const char *text)
{
    cq_shared_t *sh = c->sh;
    uint32_t posted = 0;
    uint64_t now = cq_clock_mono_ms();
    size_t len = text ? strlen(text) + 1 : 0;
    for (uint32_t n = 1; n < (1u << sh->ids.node_bits); n++) {
        if (n == sh->node || !cq__node_live(sh, n))
            continue;
        cq_xmsg_t *m = cq__xmsg_new(kind, len);
        if (!m)
            continue;
        m->conn_id = conn_id;
        m->conn_type = conn_type;
        m->u1 = u1;
        if (len)
            memcpy(m->body, text, len);
        cq__node_post(c, n, m);
        /* heard_ms is stored by the relay thread: it may be later than our `now`. */
        uint64_t heard = atomic_load_explicit(&sh->heard_ms[n], memory_order_relaxed);
        posted += heard >= now || now - heard < HEARD_FRESH_MS;
    }
    return posted;
}

void cq__node_global_owner(cq_core_t *c, uint32_t owner)
{
    cq_shared_t *sh = c->sh;
    uint16_t home = atomic_load_explicit(&sh->global_home, memory_order_relaxed);
    if (sh->node && (!home || home == sh->node))
        post_peers(c, XM_GLOBAL_OWNER, owner, 0, 0, NULL);
}

/* A new home: GLOBAL starts there ownerless (GLOBAL's state was the old home's), and every
 * node tells it its channels, so that its directory (LIST) holds the relay's channels again. */
void cq_shared_relay_global_home(cq_shared_t *sh, uint16_t node)
{
    uint16_t before = atomic_exchange(&sh->global_home, node);
    if (before == node)
        return;
    CQ_INFO("node", "node %u: GLOBAL's home is node %u", sh->node, node);
    if (!before || !atomic_load_explicit(&sh->relay_ready, memory_order_acquire))
        return;
    /* a successor of the owner recovers GLOBAL at its new home (drop_conns, recover.c) */
    atomic_store(&sh->global_owner_was, atomic_exchange(&sh->global_owner, 0));
    uint64_t wake = 0;
    for (int w = 0; w < sh->o.workers; w++) {
        cq_xmsg_t *m = cq__xmsg_new(XM_NODE_REHOME, 0);
        if (!m)
            continue;
        m->u1 = node;
        in_post(sh, w, m, &wake);
    }
    wake_all(sh, wake);
}

void cq__node_rehome_local(cq_core_t *c, const cq_xmsg_t *m)
{
    if (m->u1 == c->sh->node)
        cq__recover_rehome(c); /* GLOBAL's successor, if its RECOVER came first */
    /* GLOBAL's subscribers here subscribed at the old home: that state is gone */
    cq_lsubs_t *l = cq_map_get(&c->lsubs, CQ_CHAN_ID_GLOBAL);
    uint32_t *ids = NULL, n = 0, cap = 0;
    for (uint32_t i = 0; l && i < l->n; i++)
        if (cq_grow(&ids, &cap, n + 1, sizeof(*ids), 16) == 0)
            ids[n++] = l->conns[i]->id;
    char why[64];
    snprintf(why, sizeof(why), "GLOBAL's home moved to node %u", m->u1);
    for (uint32_t i = 0; i < n; i++)
        cq__close_conn(c, ids[i], CQ_ELINK, why);
    cq_free(ids);
    int dir = cq__place_dir_worker(c);
    uint32_t it = 0, id;
    void *v;
    while (cq_map_next(&c->chans, &it, &id, &v)) {
        const cq_chan_t *ch = v;
        if (id == CQ_CHAN_ID_GLOBAL)
            continue;
        size_t len = strlen(ch->metadata) + 1;
        cq_xmsg_t *x = cq__xmsg_new(XM_DIR_ADD, len);
        if (!x)
            continue;
        x->chan_id = id;
        x->u1 = ch->type;
        memcpy(x->body, ch->metadata, len);
        cq__xmsg_post(c, dir, x);
    }
}

void cq__node_adjacent(cq_core_t *c, const uint32_t *cells, uint32_t n, cq_buf_t *rec,
                       uint32_t sender, uint32_t skip_client, uint32_t bc)
{
    cq_shared_t *sh = c->sh;
    for (uint32_t node = 1; sh->node && node < (1u << sh->ids.node_bits); node++) {
        if (node == sh->node || !cq__node_live(sh, node))
            continue;
        cq_xmsg_t *m = cq__xmsg_new(XM_ADJACENT, n * sizeof(uint32_t));
        if (!m)
            continue;
        memcpy(m->body, cells, n * sizeof(uint32_t));
        m->buf = cq_buf_ref(rec);
        m->u1 = sender;
        m->u2 = skip_client;
        m->u3 = bc;
        cq__node_post(c, node, m);
    }
}

/* A connection that authenticated is announced to every live node, and what is queued for it
 * from now on, its AuthResult first, is held until each node heard from lately has acknowledged
 * (XM_NODE_CONN_ACK) or ANNOUNCE_MAX_MS passed: whatever its client or anyone it tells does
 * after reading its AuthResult then reaches nodes that know it, as on one node, where the
 * directory is shared. The bound is short because a node that just died is still "heard lately"
 * for HEARD_FRESH_MS, and the clients moving away from it authenticate right then. */
#define ANNOUNCE_MAX_MS 300

/* A recoverable server's PIT travels with it: if its node dies, the others keep what it held
 * for a successor (drop_conns). */
void cq__node_conn_up(cq_core_t *c, cq_conn_t *conn)
{
    if (!c->sh->node)
        return;
    bool rec =
        conn->type == CQ_CONN_SERVER && c->sh->o.server_recoverable && conn->pit && *conn->pit;
    uint32_t n = post_peers(c, XM_NODE_CONN, conn->id, conn->type, 0, rec ? conn->pit : NULL);
    conn->node_up = 1;
    if (!n)
        return;
    conn->announce_wait = (uint8_t)n;
    /* Held in the queue itself: a transport that writes on its own (KCP's timer and ACKs)
     * must not send the AuthResult either. */
    cq_sendq_hold(cq_conn_sendq(conn), true);
    conn->accepted_ms = c->now_ms; /* the auth timeout's use of it is over */
    cq_list_remove(&conn->unauth_node);
    cq_list_insert_tail(&c->announcing, &conn->unauth_node);
}

/* XM_NODE_CONN_ACK on the connection's worker: one node more knows it. */
void cq__node_conn_ack(cq_core_t *c, uint32_t conn_id)
{
    cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
    if (conn && conn->announce_wait && --conn->announce_wait == 0)
        cq__conn_release_held(c, conn);
}

/* Housekeeping: a node that never acknowledged (it died meanwhile) holds nothing for long. */
void cq__node_tick(cq_core_t *c, uint64_t now_ms)
{
    while (!cq_list_empty(&c->announcing)) {
        cq_conn_t *conn = cq_container_of(c->announcing.next, cq_conn_t, unauth_node);
        if (now_ms - conn->accepted_ms < ANNOUNCE_MAX_MS)
            break;
        CQ_MSG_LOG(c, "node", "conn %u: %u nodes did not acknowledge its announcement in %u ms",
                   conn->id, conn->announce_wait, ANNOUNCE_MAX_MS);
        cq__conn_release_held(c, conn);
    }
}

void cq__node_conn_gone(cq_core_t *c, const cq_conn_t *conn, const char *pit)
{
    if (conn->node_up)
        post_peers(c, XM_CONN_GONE, conn->id, conn->type, 0, pit);
}

void cq__node_recover(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit)
{
    if (c->sh->node)
        post_peers(c, XM_RECOVER, conn_id, CQ_CONN_SERVER, old_id, pit);
}

bool cq__node_bounce(cq_core_t *c, const cq_req_t *r, uint32_t conn_id)
{
    cq_shared_t *sh = c->sh;
    uint32_t node = sh->node ? cq__id_conn_node(&sh->ids, conn_id, NULL) : 0;
    if (!node || node == sh->node || !cq__node_live(sh, node))
        return false;
    cq_xmsg_t *m = cq__xmsg_req(XM_BOUNCE, r, true);
    if (!m)
        return false;
    m->u1 = conn_id;
    cq__node_post(c, node, m);
    return true;
}

/* ---- membership --------------------------------------------------------------------------- */

bool cq__node_live(const cq_shared_t *sh, uint32_t node)
{
    return node < 256 &&
           (atomic_load_explicit(&sh->live_nodes[node / 64], memory_order_relaxed) >> (node % 64)) &
               1;
}

void cq_shared_relay_members(cq_shared_t *sh, const uint16_t *nodes, size_t n)
{
    uint64_t bits[4] = {0};
    for (size_t i = 0; i < n; i++)
        if (nodes[i] < 256)
            bits[nodes[i] / 64] |= 1ull << (nodes[i] % 64);
    for (int i = 0; i < 4; i++)
        atomic_store_explicit(&sh->live_nodes[i], bits[i], memory_order_relaxed);
}

void cq_shared_set_relay(cq_shared_t *sh, cq_core_relay_send_fn send, void *ud)
{
    sh->relay_send = send;
    sh->relay_ud = ud;
}

void cq_shared_relay_ready(cq_shared_t *sh)
{
    atomic_store_explicit(&sh->relay_ready, true, memory_order_release);
}

/* ---- receiving (the relay thread) ----------------------------------------------------------- */

/* Posted from the relay thread: counted against the target's inbox like a worker's post, and
 * woken once per record (wake below). */
static void in_post(cq_shared_t *sh, int w, cq_xmsg_t *m, uint64_t *wake)
{
    cq_core_t *t = sh->cores[w];
    m->cost = (uint32_t)sizeof(*m) + m->body_len + (m->buf ? m->buf->len : 0);
    atomic_fetch_add_explicit(&t->inbox_bytes, m->cost, memory_order_relaxed);
    cq_mpsc_push(&t->inbox, &m->node);
    *wake |= 1ull << w;
}

/* A copy of m for another worker: the buffer is shared, the body copied. */
static cq_xmsg_t *in_dup(const cq_xmsg_t *m)
{
    cq_xmsg_t *d = cq__xmsg_new(m->kind, m->body_len);
    if (!d)
        return NULL;
    memcpy(d, m, sizeof(*d) + m->body_len);
    d->node = (cq_mpsc_node_t){0};
    if (d->buf)
        cq_buf_ref(d->buf);
    if (m->mp.body && m->body_len)
        d->mp.body = d->body + (m->mp.body - m->body);
    return d;
}

static void in_all(cq_shared_t *sh, cq_xmsg_t *m, uint64_t *wake)
{
    for (int w = 1; w < sh->o.workers; w++) {
        cq_xmsg_t *d = in_dup(m);
        if (d)
            in_post(sh, w, d, wake);
    }
    in_post(sh, 0, m, wake);
}

/* SENDMANY: its recipients may live on several workers here: one message per worker. */
static void in_sendmany(cq_shared_t *sh, cq_xmsg_t *m, uint64_t *wake)
{
    uint32_t n = m->body_len / sizeof(uint32_t);
    int nw = sh->o.workers;
    for (int w = 0; w < nw; w++) {
        cq_xmsg_t *d = NULL;
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t id;
            memcpy(&id, m->body + i * sizeof(id), sizeof(id));
            if (cq_shared_conn_worker(sh, id) != w)
                continue;
            if (!d && !(d = cq__xmsg_new(XM_SENDMANY, (n - i) * sizeof(id))))
                break;
            memcpy(d->body + k++ * sizeof(id), &id, sizeof(id));
        }
        if (!d)
            continue;
        d->body_len = k * sizeof(uint32_t);
        d->chan_id = m->chan_id;
        d->buf = cq_buf_ref(m->buf);
        in_post(sh, w, d, wake);
    }
    cq__xmsg_free(m);
}

/* A connection of node `from` authenticated: the directory knows it from now on. */
static void in_conn_up(cq_shared_t *sh, uint32_t from, const cq_xmsg_t *m)
{
    if (cq__id_conn_node(&sh->ids, m->conn_id, NULL) != from)
        return;
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, m->conn_id);
    if (!e && (e = cq_calloc(1, sizeof(*e)))) {
        if (cq_map_put(&sh->dir, m->conn_id, e) < 0) {
            cq_free(e);
            e = NULL;
        } else {
            sh->dir_remote++;
        }
    }
    if (e) {
        e->type = m->conn_type;
        e->authed = 1;
        e->remote = 1;
        if (m->body_len && !e->pit)
            e->pit = cq_strdup((const char *)m->body); /* out of memory: not recoverable */
    }
    pthread_mutex_unlock(&sh->dir_lock);
}

/* A lost recoverable server of another node (pit) leaves its handle here in the same critical
 * section as the directory forgets it, and its CONN_GONE reaches every worker before a
 * successor that finds the handle can post its RECOVER (auth.c holds a successor until the
 * directory no longer has its predecessor). m (taken) goes to every worker. */
static void gone_post(cq_shared_t *sh, cq_xmsg_t *m, uint64_t *wake, bool *ret_handle)
{
    *ret_handle = false;
    if (m->body_len && !sh->o.server_recoverable)
        m->body_len = 0; /* kept nowhere here */
    if (m->body_len && m->conn_type == CQ_CONN_SERVER) {
        cq__recover_handle_locked(sh, (const char *)m->body, m->conn_id, cq_clock_mono_ms());
        *ret_handle = true;
    }
    in_all(sh, m, wake);
}

static void gone_log(uint32_t id, const char *pit)
{
    CQ_INFO("recover", "conn %u lost; recoverable by pit \"%s\"", id, pit);
}

/* Under dir_lock, right after a CONN_GONE was posted: a RECOVER that waited for it follows. */
static void rec_wait_release(cq_shared_t *sh, uint32_t gone, uint64_t *wake)
{
    for (uint32_t i = 0; i < sh->n_rec_wait;) {
        cq_xmsg_t *m = sh->rec_wait[i];
        if (m->u1 != gone) {
            i++;
            continue;
        }
        sh->rec_wait[i] = sh->rec_wait[--sh->n_rec_wait];
        in_all(sh, m, wake);
    }
}

/* XM_RECOVER from the successor's node: its predecessor's CONN_GONE comes on another stream
 * (its own node's, or this node's ZooKeeper listing when that node died), so it may not have
 * arrived yet. What this node keeps for the successor is set aside at that CONN_GONE: the
 * RECOVER waits for it, at most CQ_REC_WAIT_MAX of them (the oldest goes, logged). */
static void in_recover(cq_shared_t *sh, cq_xmsg_t *m, uint64_t *wake)
{
    cq_xmsg_t *drop = NULL;
    pthread_mutex_lock(&sh->dir_lock);
    const cq_dir_ent_t *e = m->u1 != m->conn_id ? cq_map_get(&sh->dir, m->u1) : NULL;
    if (!e || !e->remote) {
        in_all(sh, m, wake);
    } else {
        if (sh->n_rec_wait == CQ_REC_WAIT_MAX) {
            drop = sh->rec_wait[0];
            memmove(sh->rec_wait, sh->rec_wait + 1, --sh->n_rec_wait * sizeof(*sh->rec_wait));
        }
        sh->rec_wait[sh->n_rec_wait++] = m;
    }
    pthread_mutex_unlock(&sh->dir_lock);
    if (drop) {
        CQ_WARN("recover",
                "conn %u's recovery of conn %u dropped: too many wait for their "
                "predecessor's loss",
                drop->conn_id, drop->u1);
        cq__xmsg_free(drop);
    }
}

/* XM_CONN_GONE from node `from`: the directory forgets the connection, every worker drops
 * what it held (or keeps it for a successor). */
static void in_conn_gone(cq_shared_t *sh, cq_xmsg_t *m, uint64_t *wake)
{
    char pit[128] = "";
    bool handle;
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, m->conn_id);
    if (e && e->remote) {
        cq_map_del(&sh->dir, m->conn_id);
        sh->dir_remote--;
        atomic_fetch_sub(&sh->metrics.subscriptions, e->subs);
        cq_free(e->pit);
        cq_free(e);
    }
    uint32_t id = m->conn_id;
    if (m->body_len)
        snprintf(pit, sizeof(pit), "%s", (const char *)m->body);
    gone_post(sh, m, wake, &handle);
    rec_wait_release(sh, id, wake);
    pthread_mutex_unlock(&sh->dir_lock);
    if (handle)
        gone_log(id, pit);
}

/* XM_BOUNCE: the request comes back as a DISPATCH marked bounced (u3 1) when its connection
 * is one of this node's, behind this node's announcement of it (the relay's queue keeps the
 * order the worker that announced it, and this thread, queued in). */
/* Sends m (taken) to node `to` from the relay thread itself: behind everything this node's
 * workers queued for it before. */
static void in_reply(cq_shared_t *sh, uint32_t to, cq_xmsg_t *m)
{
    cq_sbuf_t o;
    cq_sbuf_init(&o);
    uint32_t len = 0;
    int r = cq_sbuf_append(&o, &len, sizeof(len));
    if (r == 0)
        r = cq__xwire_encode(m, &o);
    cq_buf_t *b = NULL;
    if (r == 0) {
        len = (uint32_t)(o.len - sizeof(len));
        memcpy(o.data, &len, sizeof(len));
        b = cq_buf_from(o.data, o.len);
    }
    if (!b || sh->relay_send(sh->relay_ud, (uint16_t)to, b) < 0)
        atomic_fetch_add(&sh->relay_refused, 1);
    cq_buf_unref(b);
    cq_sbuf_done(&o);
    cq__xmsg_free(m);
}

static bool in_bounce(cq_shared_t *sh, uint32_t from, cq_xmsg_t *m)
{
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, m->u1);
    bool here = e && !e->remote && cq__id_conn_node(&sh->ids, m->u1, NULL) == sh->node;
    pthread_mutex_unlock(&sh->dir_lock);
    if (!here)
        return false;
    m->kind = XM_DISPATCH;
    m->u1 = 0;
    m->u3 = 1;
    in_reply(sh, from, m);
    return true;
}

/* Where m, from node `from`, goes here; false when it does not belong here (a forged or stale
 * target: a connection or channel of another node). */
static bool in_route(cq_shared_t *sh, uint32_t from, cq_xmsg_t *m, uint64_t *wake)
{
    const cq_idl_t *l = &sh->ids;
    uint32_t node;
    switch (m->kind) {
    case XM_DISPATCH:
    case XM_RESYNC:
        if (cq__id_chan_node(l, m->kind == XM_DISPATCH ? m->mp.channel_id : m->chan_id, &node,
                             NULL) &&
            node != sh->node)
            return false;
        in_post(sh,
                cq_shared_chan_worker(sh, m->kind == XM_DISPATCH ? m->mp.channel_id : m->chan_id),
                m, wake);
        return true;
    case XM_CREATE:
    case XM_REMOVE: /* u1: the channel: a node's own, or a cell or entity of GLOBAL's home */
        if (cq__id_chan_node(l, m->u1, &node, NULL) ? node != sh->node
                                                    : atomic_load(&sh->global_home) != sh->node)
            return false;
        in_post(sh, cq_shared_chan_worker(sh, m->u1), m, wake);
        return true;
    case XM_FREE_ID:
    case XM_META:
    case XM_DIR_ADD: /* for the directory: GLOBAL's home is here */
        in_post(sh, cq_shared_chan_worker(sh, CQ_CHAN_ID_GLOBAL), m, wake);
        return true;
    case XM_GLOBAL_OWNER:
        if (from == atomic_load_explicit(&sh->global_home, memory_order_relaxed))
            atomic_store(&sh->global_owner, m->conn_id);
        cq__xmsg_free(m);
        return true;
    case XM_SEND:
        if (m->u2 == CQ_XSEND_GOWNER) { /* for GLOBAL's owner: GLOBAL's worker knows it */
            in_post(sh, cq_shared_chan_worker(sh, CQ_CHAN_ID_GLOBAL), m, wake);
            return true;
        }
        /* fall through */
    case XM_CLOSE:
    case XM_LSUB_ADD:
    case XM_LSUB_DEL:
        if (cq__id_conn_node(l, m->conn_id, NULL) != sh->node)
            return false;
        in_post(sh, cq_shared_conn_worker(sh, m->conn_id), m, wake);
        return true;
    case XM_SENDMANY:
        in_sendmany(sh, m, wake);
        return true;
    case XM_FANOUT:
    case XM_ADJACENT: /* every worker walks its own lists of the cells */
        in_all(sh, m, wake);
        return true;
    case XM_INTEREST: /* to the client's worker: it diffs and subscribes */
        if (cq__id_conn_node(l, m->conn_id, NULL) != sh->node)
            return false;
        in_post(sh, cq_shared_conn_worker(sh, m->conn_id), m, wake);
        return true;
    case XM_TOPIC_CHAN: /* an ask for the directory, a creation here, or an answer (u2) */
        if (m->u2 > CQ_TOPIC_TOLD)
            return false;
        if (m->u2 == 0 && m->chan_id == 0 && atomic_load(&sh->global_home) != sh->node)
            return false; /* the home moved: the asking bridge asks again */
        if (m->u2 == 0 && m->chan_id &&
            (!cq__id_chan_node(l, m->chan_id, &node, NULL) || node != sh->node))
            return false;
        if (m->u2 == 0 && m->u1 != from)
            return false;
        in_post(sh, cq_shared_chan_worker(sh, m->chan_id ? m->chan_id : CQ_CHAN_ID_GLOBAL), m,
                wake);
        return true;
    case XM_WK_SUB: /* a well-known entity lives on GLOBAL's home */
        in_post(sh, cq_shared_chan_worker(sh, m->chan_id), m, wake);
        return true;
    case XM_BOUNCE:
        return in_bounce(sh, from, m);
    case XM_NODE_CONN: /* known here from now on: say so */
        in_conn_up(sh, from, m);
        m->kind = XM_NODE_CONN_ACK;
        m->body_len = 0;
        in_reply(sh, from, m);
        return true;
    case XM_NODE_CONN_ACK:
        if (cq__id_conn_node(l, m->conn_id, NULL) != sh->node)
            return false;
        in_post(sh, cq_shared_conn_worker(sh, m->conn_id), m, wake);
        return true;
    case XM_CONN_GONE:
        if (cq__id_conn_node(l, m->conn_id, NULL) != from)
            return false;
        m->u1 = 0; /* a lost recoverable server's PIT (body) stays */
        in_conn_gone(sh, m, wake);
        return true;
    case XM_RECOVER: /* a successor of node `from`: every worker gives back what it kept */
        if (cq__id_conn_node(l, m->conn_id, NULL) != from || !m->body_len)
            return false;
        in_recover(sh, m, wake);
        return true;
    default:
        return false;
    }
}

static void wake_all(cq_shared_t *sh, uint64_t wake)
{
    while (wake) {
        int w = __builtin_ctzll(wake);
        wake &= wake - 1;
        sh->ops->wake(sh->ops_ud, w);
    }
}

static bool node_dead(const cq_shared_t *sh, uint32_t node)
{
    return (atomic_load_explicit(&sh->dead_nodes[node / 64], memory_order_acquire) >> (node % 64)) &
           1;
}

/* Node left the relay (its ZooKeeper member is gone: it died, or lost its session). Every
 * connection of it that this node knew is gone as if it had closed: the directory forgets it
 * and every worker drops its subscriptions and ownerships, so owners get the UNSUB results
 * channeld sends when a connection drops. What is still in flight from it is dropped from now
 * on, until its HELLO says it is back (a new process, or the same one after a new session). */
/* Every connection of node that this node knows is gone as if it had closed: the directory
 * forgets it, and every worker drops its subscriptions and ownerships (owners get the UNSUB
 * results channeld sends when a connection drops). Returns how many. */
static uint32_t drop_conns(cq_shared_t *sh, uint16_t node)
{
    uint32_t n = 0, cap = 0, *ids = NULL;
    uint8_t *types = NULL;
    char **pits = NULL;
    pthread_mutex_lock(&sh->dir_lock);
    uint32_t it = 0, id;
    void *v;
    while (cq_map_next(&sh->dir, &it, &id, &v)) {
        cq_dir_ent_t *e = v;
        if (!e->remote || cq__id_conn_node(&sh->ids, id, NULL) != node)
            continue;
        uint32_t c2 = cap, c3 = cap;
        if (cq_grow(&ids, &cap, n + 1, sizeof(*ids), 64) < 0 ||
            cq_grow(&types, &c2, n + 1, sizeof(*types), 64) < 0 ||
            cq_grow(&pits, &c3, n + 1, sizeof(*pits), 64) < 0)
            break; /* out of memory: the rest stay until the node is back or gone again */
        ids[n] = id;
        types[n++] = e->type;
    }
    uint64_t wake = 0;
    for (uint32_t i = 0; i < n; i++) {
        cq_dir_ent_t *e = cq_map_del(&sh->dir, ids[i]);
        sh->dir_remote--;
        atomic_fetch_sub(&sh->metrics.subscriptions, e->subs);
        pits[i] = e->pit; /* moved */
        cq_free(e);
        size_t len = pits[i] ? strlen(pits[i]) + 1 : 0;
        cq_xmsg_t *m = cq__xmsg_new(XM_CONN_GONE, len);
        bool handle = false;
        if (m) {
            m->conn_id = ids[i];
            m->conn_type = types[i];
            if (len)
                memcpy(m->body, pits[i], len);
            /* A recoverable server that possessed GLOBAL on a home that died with it: the new
             * home gives GLOBAL to its successor (recover.c). */
            m->u1 = len && (ids[i] == atomic_load(&sh->global_owner) ||
                            ids[i] == atomic_load(&sh->global_owner_was));
            gone_post(sh, m, &wake, &handle); /* under dir_lock: see in_conn_gone */
        }
        rec_wait_release(sh, ids[i], &wake);
        if (!handle) {
            cq_free(pits[i]);
            pits[i] = NULL;
        }
    }
    pthread_mutex_unlock(&sh->dir_lock);
    for (uint32_t i = 0; i < n; i++)
        if (pits[i]) {
            gone_log(ids[i], pits[i]);
            cq_free(pits[i]);
        }
    wake_all(sh, wake);
    cq_free(ids);
    cq_free(types);
    cq_free(pits);
    return n;
}

/* Node left the relay (its ZooKeeper member is gone: it died, or lost its session): its
 * connections are dropped here, and what is still in flight from it is dropped from now on,
 * until its HELLO says it is back (a new process, or the same one after a new session). */
static void close_subscribers(cq_shared_t *sh, uint16_t node, uint64_t lost);

void cq_shared_relay_node_gone(cq_shared_t *sh, uint16_t node)
{
    if (!node || node >= (1u << sh->ids.node_bits) || node == sh->node)
        return;
    atomic_fetch_or_explicit(&sh->dead_nodes[node / 64], 1ull << (node % 64), memory_order_acq_rel);
    atomic_fetch_and_explicit(&sh->heard_nodes[node / 64], ~(1ull << (node % 64)),
                              memory_order_acq_rel);
    uint32_t n = drop_conns(sh, node);
    CQ_WARN("node", "node %u left the relay: %u of its connections dropped here", node, n);
    close_subscribers(sh, node, 0); /* its channels died with it */
}

/* The stream from node broke (the relay thread, cq_relay.h): what it sent since the last packet
 * delivered may be lost, and no one can say which messages those were. Nothing may be silently
 * wrong, so what could be is rebuilt: every connection of this node subscribed to a channel of
 * node (or to GLOBAL, when node is its home) is closed with the reason logged, and its client
 * reconnects and subscribes again; the CONN_GONEs tell node to forget them. When node restarted
 * (a new epoch), its connections are gone with its old process and are dropped here first. */
/* Every worker closes its connections subscribed to a channel of node (XM_NODE_RESET). */
static void close_subscribers(cq_shared_t *sh, uint16_t node, uint64_t lost)
{
    uint64_t wake = 0;
    for (int w = 0; w < sh->o.workers; w++) {
        cq_xmsg_t *m = cq__xmsg_new(XM_NODE_RESET, 0);
        if (!m)
            continue;
        m->u1 = node;
        m->u2 = (uint32_t)CQ_MIN(lost, UINT32_MAX);
        m->u3 = atomic_load(&sh->global_home) == node;
        in_post(sh, w, m, &wake);
    }
    wake_all(sh, wake);
}

void cq_shared_relay_reset(cq_shared_t *sh, uint16_t node, bool restarted, uint64_t lost)
{
    if (!node || node >= (1u << sh->ids.node_bits) || node == sh->node)
        return;
    uint32_t n = restarted ? drop_conns(sh, node) : 0;
    CQ_WARN("node",
            "the stream from node %u broke (%s, %llu packets lost): closing this node's "
            "subscribers of its channels%s",
            node, restarted ? "it restarted" : "loss", (unsigned long long)lost,
            restarted ? "; its connections dropped" : "");
    (void)n;
    close_subscribers(sh, node, lost);
}

/* XM_NODE_RESET on every worker: its connections subscribed to a channel of node u1 close. */
void cq__node_reset_local(cq_core_t *c, const cq_xmsg_t *m)
{
    cq_shared_t *sh = c->sh;
    uint32_t node = m->u1, home = atomic_load(&sh->global_home), *ids = NULL, n = 0, cap = 0;
    uint32_t it = 0, chan, cn;
    void *v;
    while (cq_map_next(&c->lsubs, &it, &chan, &v)) {
        const cq_lsubs_t *l = v;
        bool theirs = cq__id_chan_node(&sh->ids, chan, &cn, NULL)
                          ? cn == node
                          : chan == 0 && (home == node || m->u3);
        for (uint32_t i = 0; theirs && i < l->n; i++)
            if (cq_grow(&ids, &cap, n + 1, sizeof(*ids), 16) == 0)
                ids[n++] = l->conns[i]->id;
    }
    char why[96];
    snprintf(why, sizeof(why), "the relay link from node %u broke (%u packets lost)", node, m->u2);
    for (uint32_t i = 0; i < n; i++)
        cq__close_conn(c, ids[i], CQ_ELINK, why); /* twice in ids: the second finds it closing */
    cq_free(ids);
}

/* A HELLO makes a node one messages are taken from, even before this node's member list shows
 * it (its list and ours are read at different times): it greets a node before it announces
 * anything to it. */
void cq_shared_relay_node_up(cq_shared_t *sh, uint16_t node)
{
    if (!node || node >= (1u << sh->ids.node_bits))
        return;
    atomic_fetch_and_explicit(&sh->dead_nodes[node / 64], ~(1ull << (node % 64)),
                              memory_order_acq_rel);
    atomic_fetch_or_explicit(&sh->heard_nodes[node / 64], 1ull << (node % 64),
                             memory_order_acq_rel);
}

uint32_t cq_shared_relay_global_owner(cq_shared_t *sh)
{
    return atomic_load(&sh->global_owner);
}

void cq_shared_relay_counts(cq_shared_t *sh, uint64_t *in, uint64_t *refused, uint64_t *paced)
{
    *in = atomic_load(&sh->relay_in);
    *refused = atomic_load(&sh->relay_refused);
    *paced = atomic_load(&sh->relay_paced);
}

/* Messages are taken only from nodes of the relay: a member, or one that said HELLO, and not
 * one that left since. (Who may publish on the relay's subjects at all is nats-server's
 * authorization: doc/relay-cluster.md, "Trust".) */
static bool node_known(const cq_shared_t *sh, uint32_t node)
{
    uint64_t bit = 1ull << (node % 64);
    return !node_dead(sh, node) &&
           ((atomic_load_explicit(&sh->live_nodes[node / 64], memory_order_relaxed) |
             atomic_load_explicit(&sh->heard_nodes[node / 64], memory_order_acquire)) &
            bit);
}

/* Another node's messages are paced as a connection's are: while a worker's inbox holds more
 * than CQ_INBOX_HIGH, the relay thread waits (up to PACE_MAX_MS per record) for it to fall under
 * CQ_INBOX_LOW. The relay thread's queue then fills, then the NATS subscription's pending limit
 * drops packets (counted), and the links ask for them again: a flood costs the sender retries,
 * never the receiver's memory. */
#define PACE_MAX_MS 100

static bool inbox_high(const cq_shared_t *sh, int64_t limit)
{
    for (int w = 0; w < sh->o.workers; w++)
        if (atomic_load_explicit(&sh->cores[w]->inbox_bytes, memory_order_relaxed) > limit)
            return true;
    return false;
}

static void pace(cq_shared_t *sh)
{
    if (!inbox_high(sh, CQ_INBOX_HIGH))
        return;
    atomic_fetch_add(&sh->relay_paced, 1);
    for (int i = 0; i < PACE_MAX_MS && inbox_high(sh, CQ_INBOX_LOW); i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* One record of kind CQ_CORE_REC_XMSGS from node `from`, on the relay thread. */
void cq_shared_relay_input(cq_shared_t *sh, uint16_t from, const uint8_t *p, size_t n)
{
    if (!atomic_load_explicit(&sh->relay_ready, memory_order_acquire) || !from ||
        from == sh->node || from >= (1u << sh->ids.node_bits) || !node_known(sh, from)) {
        atomic_fetch_add(&sh->relay_refused, 1);
        return;
    }
    pace(sh);
    uint64_t wake = 0;
    size_t off = 0;
    while (off < n) {
        uint32_t len;
        cq_xmsg_t *m = NULL;
        if (n - off < sizeof(len) || (memcpy(&len, p + off, sizeof(len)), len > n - off - 4) ||
            cq__xwire_decode(p + off + 4, len, &m) < 0) {
            atomic_fetch_add(&sh->relay_refused, 1); /* the rest of a bad record is not read */
            break;
        }
        off += sizeof(len) + len;
        atomic_fetch_add(&sh->relay_in, 1);
        if (!in_route(sh, from, m, &wake)) {
            atomic_fetch_add(&sh->relay_refused, 1);
            cq__xmsg_free(m);
        }
    }
    wake_all(sh, wake);
}
