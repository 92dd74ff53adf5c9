/* handle_disconnect.c - DISCONNECT (9): a connection, normally the GLOBAL owner, asks the
 * server to close another one (reference §1.7). There is no ACL, only the FSM, and no reply.
 *
 * It is the example of a message type in its own file (see msgtab.c): the row in the table
 * says the body is a DisconnectMessage and that the handler runs on GLOBAL's worker; the
 * handler decodes the body, and reaches the target connection's worker through the placement
 * seam. */
#include "core_int.h"

void cq__handle_disconnect(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__DisconnectMessage *m = cq__req_body(c, r);
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
