/* interest.c - UPDATE_SPATIAL_INTEREST (channeld-protocol.md §4.4).
 *
 * Three places take part, each touching only its own state (place.h):
 *   1. the worker of the channel the request was sent on decodes the query and runs it through
 *      the spatial engine; a failed query (a missing centre, extent or direction, an off-grid
 *      centre, a non-positive size: channeld panics or stalls on some, §8.2) changes nothing
 *      and sends nothing. The wanted cells with their distances go, as XM_INTEREST, to
 *   2. the worker of the client (connId), which keeps the client's interest set: the cells it
 *      asked for last time plus the spatial cells it is subscribed to (its local lists), so two
 *      updates in a row diff correctly even before the first one's subscriptions are
 *      confirmed. Each cell that is no longer wanted gets an UNSUB, each wanted cell a SUB,
 *      both as if the client had sent them (so no ACL), posted to
 *   3. the cell's worker as ordinary requests, where sub.c answers them exactly as it answers
 *      the client's own: a new subscription's SUB result goes to the client (stub 0) and the
 *      cell's owner, a changed interval is applied silently, and the UNSUB result carries the
 *      UPDATE request's stubId to the client and stub 0 to the owner.
 */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

/* ---- 1. the query, on the request's channel worker --------------------------------------- */

static cq_spatial_vec_t vec_of(const Channeldpb__SpatialInfo *s)
{
    return (cq_spatial_vec_t){s->x, s->y, s->z};
}

/* Fills q from the message; spots/dists point into *spots and m (freed by the caller). A
 * missing centre, extent or direction is passed on as missing, not as the origin: the engine
 * refuses the whole query, where channeld dereferenced it and panicked (§8.2). */
static int query_decode(const Channeldpb__SpatialInterestQuery *m, cq_spatial_query_t *q,
                        cq_spatial_vec_t **spots)
{
    memset(q, 0, sizeof(*q));
    *spots = NULL;
    if (!m)
        return 0;
    if (m->spotsaoi) {
        const Channeldpb__SpotsAOI *s = m->spotsaoi;
        q->spots = true;
        if (s->n_spots && !(*spots = cq_calloc(s->n_spots, sizeof(**spots))))
            return -ENOMEM;
        for (size_t i = 0; i < s->n_spots; i++)
            (*spots)[i] = s->spots[i] ? vec_of(s->spots[i]) : (cq_spatial_vec_t){0, 0, 0};
        q->spot = *spots;
        q->n_spots = s->n_spots;
        q->dists = s->dists;
        q->n_dists = s->n_dists;
    }
    if (m->boxaoi) {
        q->box = true;
        if ((q->box_has_center = m->boxaoi->center != NULL))
            q->box_center = vec_of(m->boxaoi->center);
        if ((q->box_has_extent = m->boxaoi->extent != NULL))
            q->box_extent = vec_of(m->boxaoi->extent);
    }
    if (m->sphereaoi) {
        q->sphere = true;
        if ((q->sphere_has_center = m->sphereaoi->center != NULL))
            q->sphere_center = vec_of(m->sphereaoi->center);
        q->sphere_radius = m->sphereaoi->radius;
    }
    if (m->coneaoi) {
        q->cone = true;
        if ((q->cone_has_center = m->coneaoi->center != NULL))
            q->cone_center = vec_of(m->coneaoi->center);
        if ((q->cone_has_dir = m->coneaoi->direction != NULL))
            q->cone_dir = vec_of(m->coneaoi->direction);
        q->cone_angle = m->coneaoi->angle;
        q->cone_radius = m->coneaoi->radius;
    }
    return 0;
}

/* On the worker of the channel the request was sent on (any existing channel, as channeld
 * allows). Only the query runs here; the diff needs the client's interest set, which lives on
 * the client's worker, so the hits go there with the request's stub and broadcast, which the
 * UNSUB results echo. */
void cq__handle_update_interest(cq_core_t *c, cq_req_t *r)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    Channeldpb__UpdateSpatialInterestMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    if (!g) {
        CQ_MSG_LOG(c, "interest", "conn %u: UPDATE_SPATIAL_INTEREST without a spatial controller",
                   r->conn_id);
        return;
    }
    if (!m->connid) {
        CQ_MSG_LOG(c, "interest", "conn %u: UPDATE_SPATIAL_INTEREST without connId", r->conn_id);
        return;
    }
    cq_spatial_query_t q;
    cq_spatial_vec_t *spots;
    cq_spatial_hits_t hits = {0};
    int rc = query_decode(m->query, &q, &spots);
    if (rc == 0)
        rc = cq_spatial_query(g, &q, &hits);
    cq_free(spots);
    if (rc < 0) {
        CQ_MSG_LOG(c, "interest", "conn %u: interest query for conn %u refused: %s", r->conn_id,
                   m->connid, cq_strerror(rc));
        cq_spatial_hits_done(&hits);
        return;
    }
    cq_xmsg_t *x = cq__xmsg_new(XM_INTEREST, (size_t)hits.n * sizeof(cq_spatial_hit_t));
    if (x) {
        x->conn_id = m->connid;
        x->u1 = r->mp.stub_id;
        x->u2 = r->mp.broadcast;
        if (hits.n)
            memcpy(x->body, hits.v, (size_t)hits.n * sizeof(cq_spatial_hit_t));
        cq__xmsg_post(c, cq__conn_worker(c, m->connid), x);
    }
    cq_spatial_hits_done(&hits);
}

/* ---- 2. the diff, on the client's worker -------------------------------------------------- */

static bool is_cell(const cq_core_t *c, uint32_t chan_id)
{
    return cq_spatial_chan_index(c->sh->spatial, chan_id, NULL);
}

static bool has_id(const uint32_t *v, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

static bool hit_wanted(const cq_spatial_hit_t *h, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (h[i].chan_id == id)
            return true;
    return false;
}

/* Posts a SUB (sub) or UNSUB of conn to cell as the client's own request: conn_type CLIENT and
 * connId = the client, so no ACL applies (a connection acting on itself), as in channeld. It is
 * posted even when the cell lives here, and so takes the path of every dispatched request
 * (xm_dispatch: the channel check, the row's handler, the arena reset). body holds either
 * request, whose fields are a connection id and one interval. */
static void post_as_client(cq_core_t *c, const cq_conn_t *conn, uint32_t cell, bool sub,
                           uint32_t stub, uint32_t broadcast, uint32_t interval_ms)
{
    uint8_t body[64];
    size_t n;
    cq_req_t r = {conn->id, CQ_CONN_CLIENT, {0}, NULL, 0};
    if (sub) {
        Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
        o.has_fanoutintervalms = 1;
        o.fanoutintervalms = interval_ms;
        Channeldpb__SubscribedToChannelMessage s = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
        s.connid = conn->id;
        s.suboptions = &o;
        n = protobuf_c_message_pack(&s.base, body);
        r.mp.msg_type = MT_SUB;
    } else {
        Channeldpb__UnsubscribedFromChannelMessage u =
            CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_MESSAGE__INIT;
        u.connid = conn->id;
        n = protobuf_c_message_pack(&u.base, body);
        r.mp.msg_type = MT_UNSUB;
        r.mp.stub_id = stub; /* the UNSUB result echoes the UPDATE request's stub */
        r.mp.broadcast = broadcast;
    }
    r.mp.channel_id = cell;
    r.mp.body = body;
    r.mp.body_len = (uint32_t)n;
    cq_xmsg_t *m = cq__xmsg_req(XM_DISPATCH, &r, true);
    if (m)
        cq__xmsg_post(c, cq__chan_worker(c, cell), m);
}

/* The cells conn is in or asked for: its interest set plus its confirmed spatial lists. The set
 * covers SUBs still on their way, so an update right after another does not miss an UNSUB; the
 * lists add cells subscribed by other means (the client's own SUBs, a server's SUB for it). */
static int current_cells(cq_core_t *c, const cq_conn_t *conn, uint32_t **ret, uint32_t *n)
{
    const cq_aoi_t *a = cq_map_get(&c->aoi, conn->id);
    uint32_t na = a ? a->n : 0, cap = na + conn->n_chans, k = 0;
    uint32_t *v = cq_malloc((cap ? cap : 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < na; i++)
        v[k++] = a->cells[i];
    for (uint32_t i = 0; i < conn->n_chans; i++) {
        uint32_t id = conn->chans[i].chan_id;
        if (is_cell(c, id) && !has_id(v, k, id))
            v[k++] = id;
    }
    *ret = v;
    *n = k;
    return 0;
}

/* XM_INTEREST on the client's worker. Cells no longer wanted get an UNSUB; every wanted cell
 * gets a SUB with its damped interval, whether subscribed or not: an existing subscription
 * takes the new interval silently (sub.c, as channeld merges the options). The set of wanted
 * cells then replaces the client's interest set. */
void cq__interest_apply(cq_core_t *c, const cq_xmsg_t *m)
{
    cq_conn_t *conn = cq_map_get(&c->conns, m->conn_id);
    if (!conn || conn->state == CONN_CLOSING || !c->sh->spatial)
        return;
    const cq_spatial_hit_t *hits = (const cq_spatial_hit_t *)m->body;
    uint32_t nh = m->body_len / sizeof(*hits);
    cq_aoi_t *want = cq_malloc(sizeof(*want) + (size_t)nh * sizeof(uint32_t));
    uint32_t *cur = NULL, ncur = 0;
    if (!want || current_cells(c, conn, &cur, &ncur) < 0) {
        cq_free(want);
        CQ_WARN("interest", "conn %u: out of memory applying an interest update", conn->id);
        return;
    }
    for (uint32_t i = 0; i < ncur; i++)
        if (!hit_wanted(hits, nh, cur[i]))
            post_as_client(c, conn, cur[i], false, m->u1, m->u2, 0);
    uint32_t def =
        cq_settings_get(c->sh->o.settings, CHANNELDPB__CHANNEL_TYPE__SPATIAL)->fanout_interval_ms;
    for (uint32_t i = 0; i < nh; i++) {
        want->cells[i] = hits[i].chan_id;
        post_as_client(c, conn, hits[i].chan_id, true, 0, 0,
                       cq_spatial_damping_ms(hits[i].dist, def));
    }
    cq_free(cur);
    want->n = nh;
    cq_free(cq_map_del(&c->aoi, conn->id));
    if (cq_map_put(&c->aoi, conn->id, want) < 0)
        cq_free(want);
}
