/* dispatch.c - the inbound pipeline for each MessagePack, in channeld's order:
 * handler lookup -> FSM check -> body decode -> FSM transition -> route to the channel's worker.
 * The channel lookup happens on the channel's worker (it owns the channel table). */
#include "core_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <string.h>

/* Body type per built-in message type the server handles; NULL = no handler (dropped). */
static const ProtobufCMessageDescriptor *body_desc(uint32_t t)
{
    switch (t) {
    case MT_AUTH:
        return &channeldpb__auth_message__descriptor;
    case MT_CREATE_CHANNEL:
    case MT_CREATE_SPATIAL:
        return &channeldpb__create_channel_message__descriptor;
    case MT_REMOVE_CHANNEL:
        return &channeldpb__remove_channel_message__descriptor;
    case MT_LIST_CHANNEL:
        return &channeldpb__list_channel_message__descriptor;
    case MT_SUB:
        return &channeldpb__subscribed_to_channel_message__descriptor;
    case MT_UNSUB:
        return &channeldpb__unsubscribed_from_channel_message__descriptor;
    case MT_DISCONNECT:
        return &channeldpb__disconnect_message__descriptor;
    case MT_DATA_UPDATE:
        return &channeldpb__channel_data_update_message__descriptor;
    default:
        return NULL;
    }
}

static void drop(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp, const char *why)
{
    CQ_METRIC_ADD(c, M_DROPPED, conn->type, 1);
    CQ_MSG_LOG(c, "dispatch", "conn %u: dropped msgType %u on channel %u: %s", conn->id,
               mp->msg_type, mp->channel_id, why);
}

/* Steps 2-5; returns 1 to route, 0 to drop, or a negative error that closes the connection. */
static int admit(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp)
{
    const ProtobufCMessageDescriptor *d = body_desc(mp->msg_type);
    bool user = mp->msg_type >= CQ_USER_SPACE_START;
    if (!d && !user) {
        drop(c, conn, mp, "no handler for this message type");
        return 0;
    }
    if (!cq_fsm_allows(conn->fsm, conn->fsm_state, mp->msg_type)) {
        CQ_METRIC_ADD(c, M_FSM_DISALLOWED, conn->type, 1);
        drop(c, conn, mp, "not allowed by the connection's FSM state");
        return 0;
    }
    if (d && !cq_wire_unpack(d, mp->body, mp->body_len, &c->arena)) {
        drop(c, conn, mp, "body does not decode as its message type");
        return 0;
    }
    if (user && conn->type == CQ_CONN_SERVER && !cq_wire_sfm_valid(mp->body, mp->body_len)) {
        drop(c, conn, mp, "server user-space body is not a ServerForwardMessage");
        return 0;
    }
    conn->fsm_state = (uint8_t)cq_fsm_transition(conn->fsm, conn->fsm_state, mp->msg_type);
    return 1;
}

/* Channel the message must be handled on: channel-0 requests about another channel are
 * handled where that channel lives. */
static void route(cq_core_t *c, cq_conn_t *conn, const cq_mp_t *mp)
{
    cq_req_t r = {conn->id, conn->type, *mp, conn};
    if (mp->msg_type == MT_AUTH) {
        cq__handle_auth(c, &r);
        return;
    }
    int w = cq__chan_worker(c, mp->channel_id);
    if (w == c->index) {
        cq__handle_req(c, &r);
        return;
    }
    cq_xmsg_t *m = cq__xmsg_new(XM_DISPATCH, mp->body_len);
    if (!m)
        return;
    m->conn_id = conn->id;
    m->conn_type = conn->type;
    m->mp = *mp;
    if (mp->body_len)
        memcpy(m->body, mp->body, mp->body_len);
    cq__xmsg_post(c, w, m);
    if (cq__inbox_over(c, w, CQ_INBOX_HIGH))
        conn->paused = 1;
}

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
        if (mp.msg_type == MT_AUTH && mp.channel_id != 0)
            return CQ_EBADTARGET;
        int r = admit(c, conn, &mp);
        if (r < 0)
            return r;
        if (r > 0)
            route(c, conn, &mp);
        cq_wire_arena_reset(&c->arena);
    }
    return 0;
}

/* ---- handling on the channel's worker --------------------------------------------------- */

static bool target_must_be_global(uint32_t t)
{
    return t == MT_CREATE_CHANNEL || t == MT_CREATE_SPATIAL || t == MT_LIST_CHANNEL ||
           t == MT_DISCONNECT;
}

static void handle_disconnect(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__DisconnectMessage *m = cq_wire_unpack(&channeldpb__disconnect_message__descriptor,
                                                      r->mp.body, r->mp.body_len, &c->arena);
    if (!m || !m->connid)
        return;
    CQ_INFO("core", "conn %u asks to disconnect conn %u", r->conn_id, m->connid);
    int w = cq__conn_worker(c, m->connid);
    if (w == c->index) {
        cq__close_local(c, m->connid, 0, "DISCONNECT requested");
        return;
    }
    cq_xmsg_t *x = cq__xmsg_new(XM_CLOSE, 0);
    if (x) {
        x->conn_id = m->connid;
        cq__xmsg_post(c, w, x);
    }
}

void cq__handle_req(cq_core_t *c, cq_req_t *r)
{
    uint32_t t = r->mp.msg_type;
    if (!cq__chan_get(c, r->mp.channel_id)) {
        CQ_METRIC_ADD(c, M_DROPPED, r->conn_type, 1);
        if (t != MT_SUB && t != MT_UNSUB)
            CQ_MSG_LOG(c, "dispatch", "conn %u: dropped msgType %u: unknown channel %u", r->conn_id,
                       t, r->mp.channel_id);
        return;
    }
    if (target_must_be_global(t) && r->mp.channel_id != 0) {
        CQ_MSG_LOG(c, "dispatch", "conn %u: msgType %u must target channel 0, not %u; ignored",
                   r->conn_id, t, r->mp.channel_id);
        return;
    }
    switch (t) {
    case MT_CREATE_CHANNEL:
    case MT_CREATE_SPATIAL:
        cq__handle_create(c, r);
        break;
    case MT_REMOVE_CHANNEL:
        cq__handle_remove(c, r);
        break;
    case MT_LIST_CHANNEL:
        cq__handle_list(c, r);
        break;
    case MT_SUB:
        cq__handle_sub(c, r);
        break;
    case MT_UNSUB:
        cq__handle_unsub(c, r);
        break;
    case MT_DISCONNECT:
        handle_disconnect(c, r);
        break;
    case MT_DATA_UPDATE:
        cq__handle_data_update(c, r);
        break;
    default:
        if (t >= CQ_USER_SPACE_START)
            cq__handle_user(c, r);
        break;
    }
}
