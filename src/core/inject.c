/* inject.c - bridge events: records that a thread outside the workers (the MQ loop's bridge,
 * issue 24) hands the core for game clients (cq_core.h, "bridge events"; doc/threads.md).
 *
 * The caller's thread only encodes the record and posts it: it touches no channel and no
 * connection, and reads nothing of a worker but its inbox. A broadcast goes to the channel's
 * worker, the only place a channel's broadcasts are ordered (forward.c), which fans it out to
 * every subscriber as a server's ALL broadcast would, through the encode-once path. A routed
 * event goes to every worker, because a player's connections may live on any of them; each
 * worker finds its own in its PIT index, kept here on its own thread: a client enters it at its
 * first successful AUTH (auth.c) and leaves it at its close (conn.c), so an event never reaches
 * a connection that has not authenticated or is closing, and a released one is never found.
 *
 * Relay nodes (issue 24 item 6): every node runs a bridge of its own that follows the durable
 * cluster's shards, so each event reaches each node once, from the shard, and each node
 * delivers it to its own connections only. A broadcast there goes to every worker of this node
 * as an XM_FANOUT (each walks its own subscribers of the channel, as for a fan-out from another
 * node) rather than through the channel's worker, which may be on another node and would fan
 * it out to every node again. A routed event goes to this node's workers, whose PIT indexes
 * hold this node's players. A relay's "topic" channels live on GLOBAL's home (below). */
#include "core.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "msgtab.h"

#include <errno.h>
#include <string.h>

/* ---- the caller's thread ---------------------------------------------------------------- */

/* One record for every recipient; *ret owned. The body is copied into it, as the payload of a
 * ServerForwardMessage with clientConnId 0: what a channeld client gets from a server's
 * broadcast, so its user-space handler reads the event unchanged. */
static int make_record(uint32_t chan_id, uint32_t msg_type, const cq_buf_t *body, cq_buf_t **ret)
{
    cq_mp_t mp = {.channel_id = chan_id,
                  .msg_type = msg_type,
                  .body = body ? body->data : NULL,
                  .body_len = body ? body->len : 0};
    /* the wrapping adds at most 2 + 1 + 5 bytes (clientConnId, the payload's tag and length) */
    if (cq_wire_record_size(&mp) + 8 > CQ_WIRE_MAX_RECORD)
        return CQ_ETOOBIG;
    *ret = cq_wire_sfm_record(&mp, 0);
    return *ret ? 0 : -ENOMEM;
}

/* A relay node: one XM_FANOUT per worker of this node, all made before any is posted. */
static int inject_local(cq_shared_t *sh, uint32_t chan_id, cq_buf_t *rec)
{
    int nw = sh->o.workers;
    cq_xmsg_t *ms[CQ_MAX_WORKERS] = {0};
    for (int w = 0; w < nw; w++) {
        if (!(ms[w] = cq__xmsg_new(XM_FANOUT, 0))) {
            for (int k = 0; k < w; k++)
                cq__xmsg_free(ms[k]);
            cq_buf_unref(rec);
            return -ENOMEM;
        }
        ms[w]->chan_id = chan_id;
        ms[w]->buf = cq_buf_ref(rec);
        ms[w]->u1 = 0; /* sender 0, flags ALL: every subscriber, as below */
        ms[w]->u2 = 0;
        ms[w]->u3 = BC_ALL | BC_BRIDGE;
    }
    cq_buf_unref(rec); /* the messages hold it now */
    for (int w = 0; w < nw; w++)
        cq__xmsg_post_outside(sh, w, ms[w]);
    return 0;
}

int cq_shared_inject_broadcast(cq_shared_t *sh, uint32_t chan_id, uint32_t msg_type, cq_buf_t *body)
{
    cq_buf_t *rec;
    int r = make_record(chan_id, msg_type, body, &rec);
    if (r < 0)
        return r;
    if (sh->node)
        return inject_local(sh, chan_id, rec);
    cq_xmsg_t *m = cq__xmsg_new(XM_INJECT_BC, 0);
    if (!m) {
        cq_buf_unref(rec);
        return -ENOMEM;
    }
    m->chan_id = chan_id;
    m->mp.msg_type = msg_type; /* for the log line of an undeliverable event */
    m->buf = rec;              /* the message's reference */
    cq__xmsg_post_outside(sh, cq_shared_chan_worker(sh, chan_id), m);
    return 0;
}

/* Every message is made before any is posted: an event reaches all of the player's
 * connections or, on OOM, none, which the caller can retry; never some of them. */
int cq_shared_inject_route(cq_shared_t *sh, const char *pit, uint32_t msg_type, cq_buf_t *body)
{
    if (!pit || !*pit)
        return -EINVAL;
    cq_buf_t *rec;
    int r = make_record(0, msg_type, body, &rec);
    if (r < 0)
        return r;
    int nw = sh->o.workers;
    size_t len = strlen(pit) + 1;
    cq_xmsg_t *ms[CQ_MAX_WORKERS] = {0};
    for (int w = 0; w < nw; w++) {
        if (!(ms[w] = cq__xmsg_new(XM_INJECT_ROUTE, len))) {
            for (int k = 0; k < w; k++)
                cq__xmsg_free(ms[k]);
            cq_buf_unref(rec);
            return -ENOMEM;
        }
        memcpy(ms[w]->body, pit, len);
        ms[w]->buf = cq_buf_ref(rec);
    }
    cq_buf_unref(rec); /* the messages hold it now */
    for (int w = 0; w < nw; w++)
        cq__xmsg_post_outside(sh, w, ms[w]);
    return nw;
}

/* ---- the workers ------------------------------------------------------------------------ */

/* Sender 0 and flags ALL, as a server's ALL broadcast: every subscriber, the owner included.
 * The channel may have been removed since the event was injected, or never existed. */
void cq__inject_bc(cq_core_t *c, const cq_xmsg_t *m)
{
    cq_chan_t *ch = cq__chan_get(c, m->chan_id);
    if (!ch) {
        CQ_METRIC_ADD(c, M_BRIDGE_UNDELIVERABLE, 0, 1);
        CQ_MSG_LOG(c, "inject", "bridge event (msg type %u) for channel %u dropped: no channel",
                   m->mp.msg_type, m->chan_id);
        return;
    }
    cq__fanout(c, ch, m->buf, 0, BC_ALL | BC_BRIDGE);
}

/* The recipients' ids are taken first: a push may close its connection (over the hard limit),
 * which takes it out of the entry, or frees the entry, in the middle of the walk. The index
 * holds only authenticated clients that are not closing, so each id found is a recipient. */
void cq__inject_route(cq_core_t *c, const cq_xmsg_t *m)
{
    const cq_pitconns_t *e = m->body_len ? cq_smap_get(&c->pits, (const char *)m->body) : NULL;
    if (!e)
        return;
    uint32_t small[8], *ids = small, n = e->n;
    if (n > 8 && !(ids = cq_malloc(n * sizeof(*ids)))) {
        CQ_WARN("inject", "routed bridge event for %u connections dropped: out of memory", n);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        ids[i] = e->conns[i]->id;
    for (uint32_t i = 0; i < n; i++) {
        cq_conn_t *conn = cq_map_get(&c->conns, ids[i]);
        /* held: its login's catch-up carries it (resume.c) */
        if (conn && !conn->route_hold)
            cq__conn_push(c, conn, m->buf);
    }
    if (ids != small)
        cq_free(ids);
}

/* ---- the PIT index (the connection's worker) ------------------------------------------------ */

int cq__inject_index(cq_core_t *c, cq_conn_t *conn)
{
    if (conn->type != CQ_CONN_CLIENT || !conn->pit || !*conn->pit)
        return 0; /* an empty PIT names no player: routing refuses it */
    cq_pitconns_t *e = cq_smap_get(&c->pits, conn->pit);
    bool fresh = !e;
    if (fresh) {
        size_t len = strlen(conn->pit) + 1;
        if (!(e = cq_calloc(1, sizeof(*e) + len)))
            return -ENOMEM;
        memcpy(e->pit, conn->pit, len);
        if (cq_smap_put(&c->pits, e->pit, e) < 0) {
            cq_free(e);
            return -ENOMEM;
        }
    }
    if (cq_grow(&e->conns, &e->cap, e->n, sizeof(*e->conns), 2) < 0) {
        if (fresh) {
            cq_smap_del(&c->pits, e->pit);
            cq_free(e);
        }
        return -ENOMEM;
    }
    e->conns[e->n++] = conn;
    return 0;
}

/* The entry goes with its last connection, so the index holds only PITs of live clients. */
void cq__inject_unindex(cq_core_t *c, cq_conn_t *conn)
{
    if (conn->type != CQ_CONN_CLIENT || !conn->pit || !*conn->pit)
        return;
    cq_pitconns_t *e = cq_smap_get(&c->pits, conn->pit);
    for (uint32_t i = 0; e && i < e->n; i++) {
        if (e->conns[i] != conn)
            continue;
        e->conns[i] = e->conns[--e->n];
        if (!e->n) {
            cq_smap_del(&c->pits, e->pit);
            cq_free(e->conns);
            cq_free(e);
        }
        return;
    }
}

void cq__inject_free_all(cq_core_t *c)
{
    const char *k;
    void *v;
    for (uint32_t it = 0; cq_smap_next(&c->pits, &it, &k, &v);) {
        cq_free(((cq_pitconns_t *)v)->conns);
        cq_free(v);
    }
    cq_smap_done(&c->pits);
}

/* ---- "topic" channels (the bridge's thread, then the directory, then the channel's worker) --- */

/* On a relay, the directory is on GLOBAL's home: every node's bridge asks there (u1 its node),
 * the home finds or makes the channel, on itself, and tells the asking node (u2 CQ_TOPIC_TOLD).
 * When the home moves, the bridges ask again (cq_shared_relay_home). */
int cq_shared_topic_channel(cq_shared_t *sh, const char *metadata)
{
    size_t len = metadata ? strlen(metadata) + 1 : 0;
    if (len < 2 || len > 256)
        return -EINVAL;
    cq_xmsg_t *m = cq__xmsg_new(XM_TOPIC_CHAN, len);
    if (!m)
        return -ENOMEM;
    memcpy(m->body, metadata, len);
    m->u1 = sh->node;
    cq__xmsg_post_outside(sh, cq_shared_chan_worker(sh, CQ_CHAN_ID_GLOBAL), m);
    return 0;
}

uint32_t cq_shared_relay_home(const cq_shared_t *sh)
{
    return atomic_load_explicit(&sh->global_home, memory_order_relaxed);
}

/* The answer (id, 0: not made) for the bridge of node asker: this node's, or posted there. */
static void topic_chan_told(cq_core_t *c, uint32_t asker, uint32_t id, const char *metadata)
{
    size_t len = strlen(metadata) + 1;
    if (asker && asker != c->sh->node) {
        cq_xmsg_t *x = cq__xmsg_new(XM_TOPIC_CHAN, len);
        if (!x)
            return; /* that bridge asks again at its next home change or reload */
        memcpy(x->body, metadata, len);
        x->chan_id = id;
        x->u2 = CQ_TOPIC_TOLD;
        cq__xmsg_post(c, cq__place_node(c, asker), x);
        return;
    }
    cq_core_resume_fn fn = atomic_load_explicit(&c->sh->resume_fn, memory_order_acquire);
    if (fn)
        fn(c->sh->resume_ud, CQ_RESUME_ASK_TOPIC_CHAN, id, metadata, len);
}

/* The directory: the SUBWORLD channel with this metadata if there is one (a reload, or a
 * binding of the same topic), else a new id, created on its worker. */
static void topic_chan_dir(cq_core_t *c, const cq_xmsg_t *m)
{
    const char *md = (const char *)m->body;
    uint32_t it = 0, id;
    void *v;
    while (cq_map_next(&c->chaninfo, &it, &id, &v)) {
        const cq_chaninfo_t *i = v;
        if (i->type == CHANNELDPB__CHANNEL_TYPE__SUBWORLD && strcmp(i->metadata, md) == 0) {
            topic_chan_told(c, m->u1, id, md);
            return;
        }
    }
    if (!(id = cq__dir_alloc(c)) ||
        cq__dir_add(c, id, CHANNELDPB__CHANNEL_TYPE__SUBWORLD, md) < 0) {
        CQ_WARN("inject", "channel \"%s\" for the bridge not made: %s", md,
                id ? "out of memory" : "no free channel id (--max-channels)");
        if (id)
            cq__dir_free_id(c, id);
        topic_chan_told(c, m->u1, 0, md);
        return;
    }
    cq_xmsg_t *x = cq__xmsg_new(XM_TOPIC_CHAN, m->body_len);
    if (!x) {
        cq__dir_free_id(c, id);
        topic_chan_told(c, m->u1, 0, md);
        return;
    }
    memcpy(x->body, m->body, m->body_len);
    x->chan_id = id;
    x->u1 = m->u1;
    cq__xmsg_post(c, cq__chan_worker(c, id), x);
}

/* A relay node that is not GLOBAL's home: the ask goes there (no home yet: not made now; the
 * bridge asks again once there is one). */
static void topic_chan_to_home(cq_core_t *c, const cq_xmsg_t *m)
{
    uint32_t home = cq_shared_relay_home(c->sh);
    cq_xmsg_t *x = home ? cq__xmsg_new(XM_TOPIC_CHAN, m->body_len) : NULL;
    if (!x) {
        topic_chan_told(c, 0, 0, (const char *)m->body);
        return;
    }
    memcpy(x->body, m->body, m->body_len);
    x->u1 = c->sh->node;
    cq__xmsg_post(c, cq__place_node(c, home), x);
}

void cq__topic_chan(cq_core_t *c, cq_xmsg_t *m)
{
    if (!m->body_len || m->body[m->body_len - 1] != '\0')
        return;
    if (m->u2 == CQ_TOPIC_TOLD) {
        topic_chan_told(c, 0, m->chan_id, (const char *)m->body);
        return;
    }
    if (!m->chan_id && c->sh->node && cq_shared_relay_home(c->sh) != c->sh->node) {
        topic_chan_to_home(c, m);
        return;
    }
    if (!m->chan_id) {
        topic_chan_dir(c, m);
        return;
    }
    const char *md = (const char *)m->body;
    cq_chan_t *ch = cq__chan_get(c, m->chan_id);
    if (!ch)
        ch = cq__chan_create(c, m->chan_id, CHANNELDPB__CHANNEL_TYPE__SUBWORLD, md, 0, 0);
    if (!ch) {
        CQ_WARN("inject", "channel %u \"%s\" for the bridge not made: out of memory", m->chan_id,
                md);
        cq_xmsg_t *x = cq__xmsg_new(XM_FREE_ID, 0);
        if (x) {
            x->chan_id = m->chan_id;
            cq__xmsg_post(c, cq__place_dir_worker(c), x);
        }
        topic_chan_told(c, m->u1, 0, md);
        return;
    }
    CQ_INFO("inject", "channel %u \"%s\" made for the bridge (SUBWORLD, no owner)", m->chan_id, md);
    topic_chan_told(c, m->u1, m->chan_id, md);
}
