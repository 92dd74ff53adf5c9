/* link.c - one connection shape for the seed protocol and the HTTP API, the same as channel
 * connections have: answers and pushes are refcounted frames queued by reference in a
 * per-connection send queue (cq_sendq, PACKET entries written as they are), the engine marks a
 * connection pending and the edge writes every pending one once per loop iteration
 * (cq_mqsrv_flush from uv_prepare), and the queued bytes have a hard limit (close at once) and
 * a soft one (close when it held for the configured seconds, checked by cq_mqsrv_tick).
 * Why: a push to N watchers used to be N mallocs, N memcpys and N uv_writes; now it is one
 * buffer with N references, written with the connection's other frames in one system call.
 */
#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <stdio.h>

void cq__mq_link_init(mq_link_t *l, cq_mqsrv_t *s, const mq_fe_t *fe,
                      const cq_mqsrv_conn_ops_t *ops, void *ud)
{
    *l = (mq_link_t){.s = s, .fe = fe, .ops = ops, .ud = ud};
    /* Who the peer is, once: the per-address failure budget and the loopback rule need it. */
    if (ops->t.peer(ud, l->peer, sizeof(l->peer)) < 0)
        snprintf(l->peer, sizeof(l->peer), "?");
    l->peer_loopback = cq_peer_is_loopback(l->peer);
    cq_sendq_init(&l->sendq, CQ_FRAMING_FIXED); /* PACKET entries only: the mode is unused */
    cq_list_init(&l->pending_node);
    cq_list_init(&l->soft_node);
}

static void unlist(mq_link_t *l)
{
    cq_list_remove(&l->pending_node);
    cq_list_remove(&l->soft_node);
}

void cq__mq_link_close(mq_link_t *l)
{
    if (l->closing || l->dead)
        return;
    l->closing = true;
    unlist(l); /* the edge writes what is queued itself */
    l->ops->t.close(l->ud);
}

/* A slow consumer: closed at once, what it did not read is dropped. */
static void link_abort(mq_link_t *l, const char *why)
{
    l->closing = true;
    unlist(l);
    l->s->st.slow++;
    l->ops->abort(l->ud, CQ_ESLOW, why);
}

int cq__mq_link_send(mq_link_t *l, cq_buf_t *b)
{
    cq_mqsrv_t *s = l->s;
    if (l->closing || l->dead) {
        cq_buf_unref(b);
        return CQ_ECLOSED;
    }
    bool pre = l->hard_limit && l->hard_limit < s->sendq_hard; /* before connect */
    int r = cq_sendq_push_ref(&l->sendq, b, CQ_SENDQ_PACKET, pre ? l->hard_limit : s->sendq_hard);
    if (r < 0) {
        cq_buf_unref(b);
        if (r == CQ_ESLOW && pre)
            link_abort(l, "over the unsent bytes allowed before connect");
        else if (r == CQ_ESLOW)
            link_abort(l, "slow consumer: over mq-sendq-hard-limit");
        else
            cq__mq_link_close(l);
        return r;
    }
    if (s->sendq_soft && cq_sendq_bytes(&l->sendq) > s->sendq_soft && cq_list_empty(&l->soft_node))
        cq_list_insert_tail(&s->soft, &l->soft_node); /* the next tick starts its clock */
    if (cq_list_empty(&l->pending_node))
        cq_list_insert_tail(&s->pending, &l->pending_node);
    return 0;
}

void cq__mq_link_dead(mq_link_t *l)
{
    l->dead = true;
    unlist(l);
    cq_sendq_done(&l->sendq);
}

void cq__mq_link_put(mq_link_t *l)
{
    if (l->dead && !l->inflight)
        l->fe->free(l);
}

/* ---- once per loop iteration, and on the tick ------------------------------------------- */

void cq_mqsrv_flush(cq_mqsrv_t *s)
{
    while (!cq_list_empty(&s->pending)) {
        cq_list_t *n = s->pending.next;
        cq_list_remove(n);
        mq_link_t *l = cq_container_of(n, mq_link_t, pending_node);
        l->ops->t.flush(l->ud);
    }
}

void cq_mqsrv_tick(cq_mqsrv_t *s, uint64_t now_ms)
{
    cq_list_t *n, *tmp;
    /* Watchers waiting on a catch-up whose read failed must not wait for the next produce on a
     * topic that may stay quiet. */
    cq__mqsrv_catchup_retry(s);
    if (s->sink_run)
        s->sink_run(s->sink_ud, s); /* the bridge's resume sessions time out too */
    cq__mqsrv_role_tick(s, now_ms);
    cq__mqsrv_decl_tick(s, now_ms);
    cq__mqsrv_holes_tick(s, now_ms);
    uint64_t soft_ms = (uint64_t)s->sendq_soft_s * 1000;
    cq_list_foreach_safe(n, tmp, &s->soft)
    {
        mq_link_t *l = cq_container_of(n, mq_link_t, soft_node);
        if (cq_sendq_check_soft(&l->sendq, s->sendq_soft, soft_ms, now_ms) == CQ_ESLOW)
            link_abort(l, "slow consumer: over mq-sendq-soft-limit too long");
        else if (!l->sendq.soft_since_ms)
            cq_list_remove(&l->soft_node);
    }
}
