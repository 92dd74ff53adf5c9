/* forward.c - user-space messages (>= 100) and the encode-once fan-out.
 *
 * A broadcast is encoded once into a refcounted record. The channel's worker pushes it to its
 * own subscribers and sends one reference per other worker that has subscribers (XM_FANOUT);
 * each worker filters its local subscriber list by the broadcast flags. Snappy peers get a
 * compressed packet built once per worker per message. */
#include "core_int.h"

#include "cq_alloc.h"

#include <string.h>

/* ---- fan-out ---------------------------------------------------------------------------- */

static bool skip(const cq_conn_t *conn, uint32_t sender, uint32_t owner, uint32_t flags)
{
    if (conn->state == CONN_CLOSING)
        return true;
    if ((flags & BC_BUT_SENDER) && conn->id == sender)
        return true;
    if ((flags & BC_BUT_OWNER) && conn->id == owner)
        return true;
    if ((flags & BC_BUT_CLIENT) && conn->type == CQ_CONN_CLIENT)
        return true;
    if ((flags & BC_BUT_SERVER) && conn->type == CQ_CONN_SERVER)
        return true;
    return false;
}

/* Plain recipients first: their references are taken with one atomic add, then each queue
 * takes one. Snappy recipients share one compressed packet built for this worker. The walk is
 * backwards and re-reads the list, because a push may close a slow subscriber, which
 * swap-removes it. */
void cq__local_fanout(cq_core_t *c, uint32_t chan_id, cq_buf_t *rec, uint32_t sender,
                      uint32_t owner, uint32_t flags)
{
    cq_lsubs_t *l = cq_map_get(&c->lsubs, chan_id);
    if (!l)
        return;
    uint32_t plain = 0, snappy = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        const cq_conn_t *conn = l->conns[i];
        if (!skip(conn, sender, owner, flags))
            conn->out_ct == CQ_CT_SNAPPY ? snappy++ : plain++;
    }
    cq_buf_ref_n(rec, plain);
    CQ_METRIC_ADD(c, M_FANOUTS, 0, plain + snappy);
    cq_buf_t *packet = NULL;
    for (uint32_t i = l->n; i-- > 0;) {
        l = cq_map_get(&c->lsubs, chan_id);
        if (!l || i >= l->n)
            break;
        cq_conn_t *conn = l->conns[i];
        if (skip(conn, sender, owner, flags))
            continue;
        if (conn->out_ct != CQ_CT_SNAPPY) {
            if (plain) {
                plain--;
                cq__conn_push_record_ref(c, conn, rec);
            }
            continue;
        }
        if (!packet && snappy)
            packet = cq_sendq_compress_record(rec, CQ_FRAMING_FIXED);
        if (packet && conn->framing == CQ_FRAMING_FIXED)
            cq__conn_push_packet(c, conn, packet);
        else
            cq__conn_push(c, conn, rec);
    }
    while (plain--) /* recipients closed during the walk */
        cq_buf_unref(rec);
    cq_buf_unref(packet);
}

void cq__fanout(cq_core_t *c, cq_chan_t *ch, cq_buf_t *rec, uint32_t sender, uint32_t flags)
{
    for (int w = 0; w < c->nworkers; w++) {
        if (!ch->wcount[w] || w == c->index)
            continue;
        cq_xmsg_t *m = cq__xmsg_new(XM_FANOUT, 0);
        if (!m)
            continue;
        m->chan_id = ch->id;
        m->buf = cq_buf_ref(rec);
        m->u1 = sender;
        m->u2 = ch->owner;
        m->u3 = flags;
        cq__xmsg_post(c, w, m);
    }
    if (ch->wcount[c->index])
        cq__local_fanout(c, ch->id, rec, sender, ch->owner, flags);
}

/* ---- user-space messages ---------------------------------------------------------------- */

static void from_client(cq_core_t *c, cq_req_t *r, cq_chan_t *ch)
{
    if (!ch->owner) {
        /* channeld: client broadcast needs enableClientBroadcast, which nothing sets. */
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u on channel %u dropped: channel has no owner",
                   r->conn_id, r->mp.msg_type, ch->id);
        return;
    }
    cq_buf_t *rec = cq_wire_sfm_record(&r->mp, r->conn_id);
    if (!rec) {
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u too large to forward", r->conn_id,
                   r->mp.msg_type);
        return;
    }
    cq__send_to(c, ch->owner, rec);
    cq_buf_unref(rec);
}

static void to_one(cq_core_t *c, cq_req_t *r, uint32_t target, const char *what)
{
    if (!target) {
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u on channel %u dropped: no %s", r->conn_id,
                   r->mp.msg_type, r->mp.channel_id, what);
        return;
    }
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    cq__send_to(c, target, rec);
    cq_buf_unref(rec);
}

/* ---- ADJACENT_CHANNELS (§1.8 item 4) ------------------------------------------------------
 *
 * The subscribers of a cell's 3x3 neighbourhood (the centre too unless bit 8), each once, but
 * the sender (bit 4), clients (16), servers (32) and the SFM's clientConnId. The cells live on
 * different workers and a connection may be in several of their lists, so the record is
 * encoded once and every worker gets the cell list: it walks its own local lists of those
 * cells and marks each connection with the broadcast's generation, so it delivers at most
 * once. Every worker is asked, because only a cell's own worker knows where its subscribers
 * are, and asking it first would cost a hop per cell. */

static bool adj_skip(const cq_conn_t *conn, const cq_xmsg_t *m)
{
    if (conn->state == CONN_CLOSING || conn->id == m->u2)
        return true;
    if ((m->u3 & BC_BUT_SENDER) && conn->id == m->u1)
        return true;
    if ((m->u3 & BC_BUT_CLIENT) && conn->type == CQ_CONN_CLIENT)
        return true;
    return (m->u3 & BC_BUT_SERVER) && conn->type == CQ_CONN_SERVER;
}

static void adj_push(cq_core_t *c, const uint32_t *ids, uint32_t n, cq_buf_t *rec)
{
    for (uint32_t j = 0; j < n; j++) { /* by id: a push may close a slow subscriber */
        cq_conn_t *conn = cq_map_get(&c->conns, ids[j]);
        if (conn && conn->state != CONN_CLOSING)
            cq__conn_push(c, conn, rec);
    }
}

void cq__adjacent_deliver(cq_core_t *c, const cq_xmsg_t *m)
{
    const uint32_t *cells = (const uint32_t *)m->body;
    uint32_t ncells = m->body_len / sizeof(uint32_t), gen = ++c->adj_gen;
    uint32_t *ids = NULL, n = 0, cap = 0;
    for (uint32_t k = 0; k < ncells; k++) {
        const cq_lsubs_t *l = cq_map_get(&c->lsubs, cells[k]);
        for (uint32_t i = 0; l && i < l->n; i++) {
            cq_conn_t *conn = l->conns[i];
            if (conn->adj_gen == gen || adj_skip(conn, m))
                continue;
            conn->adj_gen = gen;
            if (n == cap) {
                uint32_t ncap = cap ? cap * 2 : 64;
                uint32_t *t = cq_realloc(ids, ncap * sizeof(*t));
                if (!t)
                    goto out;
                ids = t;
                cap = ncap;
            }
            ids[n++] = conn->id;
        }
    }
out:
    adj_push(c, ids, n, m->buf);
    cq_free(ids);
}

static void adjacent(cq_core_t *c, cq_req_t *r, cq_chan_t *ch, uint32_t bc)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    uint32_t index, cells[9];
    if (!g || ch->type != CHANNELDPB__CHANNEL_TYPE__SPATIAL ||
        !cq_spatial_chan_index(g, ch->id, &index)) {
        CQ_MSG_LOG(c, "fwd",
                   "conn %u: ADJACENT_CHANNELS broadcast on non-spatial channel %u dropped",
                   r->conn_id, ch->id);
        return;
    }
    uint32_t n = cq_spatial_adjacent(g, index, !(bc & BC_BUT_OWNER), cells);
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    uint32_t skip_client = cq_wire_sfm_client(r->mp.body, r->mp.body_len);
    for (int w = 0; w < c->nworkers; w++) {
        cq_xmsg_t *m = cq__xmsg_new(XM_ADJACENT, n * sizeof(uint32_t));
        if (!m)
            continue;
        memcpy(m->body, cells, n * sizeof(uint32_t));
        m->buf = cq_buf_ref(rec);
        m->u1 = r->conn_id;
        m->u2 = skip_client;
        m->u3 = bc;
        if (w == c->index) {
            cq__adjacent_deliver(c, m);
            cq__xmsg_free(m);
        } else {
            cq__xmsg_post(c, w, m);
        }
    }
    cq_buf_unref(rec);
}

static void from_server(cq_core_t *c, cq_req_t *r, cq_chan_t *ch)
{
    uint32_t bc = r->mp.broadcast;
    if (bc == 0) {
        to_one(c, r, ch->owner, "channel owner");
        return;
    }
    if (bc == BC_SINGLE) {
        uint32_t client = cq_wire_sfm_client(r->mp.body, r->mp.body_len);
        to_one(c, r, client ? client : ch->owner, client ? "connection" : "channel owner");
        return;
    }
    if (bc & BC_ADJACENT) {
        adjacent(c, r, ch, bc);
        return;
    }
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    cq__fanout(c, ch, rec, r->conn_id, bc);
    cq_buf_unref(rec);
}

void cq__handle_user(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    if (!ch)
        return;
    if (r->conn_type == CQ_CONN_CLIENT)
        from_client(c, r, ch);
    else
        from_server(c, r, ch);
}
