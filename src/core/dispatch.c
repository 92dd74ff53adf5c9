/* dispatch.c - the inbound pipeline for each MessagePack, in channeld's order:
 * handler lookup -> FSM check -> body decode -> FSM transition -> route to the channel's worker.
 * The channel lookup happens on the channel's worker (it owns the channel table).
 *
 * The order is channeld's, and observable: a message the FSM forbids is dropped even if its
 * body is garbage, and the FSM moves on a message that will then be dropped for an unknown
 * channel. Everything that differs between types comes from the message table (msgtab.c), so
 * this file has no per-type code. The body is decoded here, on the sender's worker, only to
 * reject it early; the handler decodes it again where it runs, because the decoded message
 * lives in this worker's arena and cannot travel to another worker, and a handler does not
 * know where it was called from. */
#include "core.h"
#include "msgtab.h"

#include "cq_err.h"

/* A message that fails a check is dropped, neither answered nor closed: channeld has no error
 * reply and drops these too. Only a bad packet (framing, an undecodable Packet) closes the
 * connection (conn.c). The drop is counted and logged within the worker's log budget. */
static void drop(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp, const char *why)
{
    CQ_METRIC_ADD(c, M_DROPPED, conn->type, 1);
    CQ_MSG_LOG(c, "dispatch", "conn %u: dropped msgType %u on channel %u: %s", conn->id,
               mp->msg_type, mp->channel_id, why);
}

/* Steps 2-5 for mp, whose row is d (NULL: none); returns true to route, false to drop. */
static bool admit(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp, const cq_msg_def_t *d)
{
    if (!d) {
        drop(c, conn, mp, "no handler for this message type");
        return false;
    }
    if (!cq_fsm_allows(conn->fsm, conn->fsm_state, mp->msg_type)) {
        CQ_METRIC_ADD(c, M_FSM_DISALLOWED, conn->type, 1);
        drop(c, conn, mp, "not allowed by the connection's FSM state");
        return false;
    }
    if (d->body && !cq_wire_unpack(d->body, mp->body, mp->body_len, &c->arena)) {
        drop(c, conn, mp, "body does not decode as its message type");
        return false;
    }
    if ((d->flags & CQ_MSGF_SERVER_SFM) && conn->type == CQ_CONN_SERVER &&
        !cq_wire_sfm_valid(mp->body, mp->body_len)) {
        drop(c, conn, mp, "server user-space body is not a ServerForwardMessage");
        return false;
    }
    conn->fsm_state = (uint8_t)cq_fsm_transition(conn->fsm, conn->fsm_state, mp->msg_type);
    return true;
}

/* Runs the handler here when the row says so (AUTH) or when the channel lives on this worker;
 * otherwise hands the message to the channel's worker. Channel-0 requests about another
 * channel are passed on again by their handlers, to where that channel lives. */
static void route(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp, const cq_msg_def_t *d)
{
    cq_req_t r = {conn->id, conn->type, *mp, conn, 0};
    if (d->where == CQ_WHERE_SENDER) {
        d->handler(c, &r);
        return;
    }
    int w = cq__chan_worker(c, mp->channel_id);
    if (w == c->index) {
        cq__handle_req(c, &r);
        return;
    }
    /* Paced: a sender whose target inbox is too full stops being read (place.c). */
    cq_xmsg_t *m = cq__xmsg_req(XM_DISPATCH, &r, true);
    if (m)
        cq__xmsg_post_paced(c, w, m, conn);
}

/* The whole Packet is checked before any of its messages is handled, so a corrupt packet closes
 * the connection with none of it applied. AUTH on a channel other than 0 is the one message
 * that closes the connection instead of being dropped (channeld §1.7). */
int cq__dispatch_packet(cq_core_t *c, cq_conn_t *conn, const uint8_t *body, size_t len)
{
    int n = cq_wire_packet_validate(body, len);
    if (n < 0)
        return n;
    cq_packet_iter_t it;
    cq_mp_t mp;
    cq_wire_packet_iter_init(&it, body, len);
    while (conn->state != CONN_CLOSING && cq_wire_packet_next(&it, &mp) == 1) {
        CQ_METRIC_ADD(c, M_MESSAGES_IN, conn->type, 1);
        const cq_msg_def_t *d = cq__msg_def(mp.msg_type);
        if (d && (d->flags & CQ_MSGF_CLOSE_OFF_GLOBAL) && mp.channel_id != 0)
            return CQ_EBADTARGET;
        if (admit(c, conn, &mp, d))
            route(c, conn, &mp, d);
        cq_wire_arena_reset(&c->arena);
    }
    return 0;
}

/* ---- handling on the channel's worker --------------------------------------------------- */

/* On the channel's worker, the only one that can tell whether the channel exists: a request for
 * an unknown channel is dropped here, unlogged for SUB and UNSUB (channeld drops those silently
 * once a channel is removed, §2.2). */
void cq__handle_req(cq_core_t *c, cq_req_t *r)
{
    uint32_t t = r->mp.msg_type;
    const cq_msg_def_t *d = cq__msg_def(t);
    if (!cq__chan_get(c, r->mp.channel_id)) {
        CQ_METRIC_ADD(c, M_DROPPED, r->conn_type, 1);
        if (!d || !(d->flags & CQ_MSGF_QUIET_NO_CHANNEL))
            CQ_MSG_LOG(c, "dispatch", "conn %u: dropped msgType %u: unknown channel %u", r->conn_id,
                       t, r->mp.channel_id);
        return;
    }
    if (d && d->where == CQ_WHERE_GLOBAL && r->mp.channel_id != 0) {
        CQ_MSG_LOG(c, "dispatch", "conn %u: msgType %u must target channel 0, not %u; ignored",
                   r->conn_id, t, r->mp.channel_id);
        return;
    }
    if (d && d->where != CQ_WHERE_SENDER) /* sender-side handlers never come this way */
        d->handler(c, r);
}
