/* forward.c - user-space messages (>= 100) and the encode-once fan-out.
 *
 * A broadcast is encoded once into a refcounted record. The channel's worker pushes it to its
 * own subscribers and sends one reference per other worker that has subscribers (XM_FANOUT);
 * each worker filters its local subscriber list by the broadcast flags. Snappy peers get a
 * compressed packet built once per worker per message. */
#include "core_int.h"

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
        CQ_MSG_LOG(c, "fwd",
                   "conn %u: ADJACENT_CHANNELS broadcast on non-spatial channel %u dropped",
                   r->conn_id, ch->id);
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
