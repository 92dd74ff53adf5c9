/* entity.c - entity channels (CREATE_ENTITY_CHANNEL, well-known entities) and their groups
 * (ENTITY_GROUP_ADD/REMOVE), channeld-protocol.md §4.5.
 *
 * CREATE_ENTITY_CHANNEL arrives on GLOBAL or a spatial cell (that channel's worker checks the
 * id range) and is handed to the entity's own worker (XM_ENTITY), which alone can tell whether
 * the id is taken, creates the channel, replies, subscribes the well-known clients and the
 * owner, and tells the directory (XM_DIR_ADD) so that LIST shows it. Every reply of one
 * creation leaves that one worker, in channeld's order.
 *
 * Entity groups are one table for the process (sh->groups under groups_mu): a group's members
 * live on different workers, and a handover reads the whole group at once. The lock is a leaf,
 * taken by ENTITY_GROUP_ADD/REMOVE, an entity's removal and a handover decision only.
 *
 * Well-known entities: the list sh->wk_ids (under wk_mu) is appended by the entity's worker
 * after the channel exists and before it snapshots the authenticated clients of the
 * connection directory; a client that authenticates marks itself authenticated in the
 * directory (under dir_lock), then reads the list and asks the entity's worker (XM_WK_SUB).
 * Every authenticated client is thus in the snapshot or reads the list after the append; one
 * in both is subscribed once (the second request finds the subscription). */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

#define EN_LOG            "entity"
#define WK_LATER_DELAY_MS 1000 /* channeld: clients that authenticate after the creation */

/* -ecs; 0 means channeld's default. */
static uint32_t entity_start(const cq_core_t *c)
{
    return c->sh->o.entity_chan_start ? c->sh->o.entity_chan_start : CQ_CHAN_ID_ENTITY_START;
}

/* ---- an entity channel's own state ------------------------------------------------------ */

int cq__chan_ts_new(cq_chan_t *ch)
{
    if (ch->type != CHANNELDPB__CHANNEL_TYPE__ENTITY)
        return 0;
    ch->ts.entity = cq_calloc(1, sizeof(*ch->ts.entity));
    return ch->ts.entity ? 0 : -ENOMEM;
}

void cq__chan_ts_free(cq_chan_t *ch)
{
    cq_free(ch->ts.entity);
    ch->ts.entity = NULL;
}

/* ---- well-known entities ---------------------------------------------------------------- */

/* The SUB result for a well-known subscription goes to the client alone (stub 0). A client that
 * authenticates after the creation (later) is subscribed with fanOutDelayMs 1000, as channeld
 * does; one already subscribed is left as it is. */
static void wk_subscribe(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, bool later)
{
    if (cq_map_get(&ch->subs, conn_id))
        return;
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_fanoutdelayms = 1;
    o.fanoutdelayms = WK_LATER_DELAY_MS;
    cq_sub_t *s;
    int rc = cq__sub_add(c, ch, conn_id, CQ_CONN_CLIENT, later ? &o : NULL, &s);
    if (rc < 0) {
        CQ_MSG_LOG(c, EN_LOG, "conn %u: not subscribed to well-known entity %u: %s", conn_id,
                   ch->id, cq_strerror(rc));
        return;
    }
    Channeldpb__ChannelSubscriptionOptions so;
    cq__subopts_to_pb(&s->opts, &so);
    Channeldpb__SubscribedToChannelResultMessage out =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    out.connid = conn_id;
    out.suboptions = &so;
    out.conntype = CHANNELDPB__CONNECTION_TYPE__CLIENT;
    out.channeltype = CHANNELDPB__CHANNEL_TYPE__ENTITY;
    cq__notify(c, conn_id, ch->id, MT_SUB, &out.base);
}

static int wk_append(cq_shared_t *sh, uint32_t id)
{
    int rc = 0;
    pthread_mutex_lock(&sh->wk_mu);
    if (sh->n_wk == sh->cap_wk) {
        uint32_t ncap = sh->cap_wk ? sh->cap_wk * 2 : 8;
        uint32_t *n = cq_realloc(sh->wk_ids, ncap * sizeof(*n));
        if (n) {
            sh->wk_ids = n;
            sh->cap_wk = ncap;
        }
    }
    if (sh->n_wk < sh->cap_wk)
        sh->wk_ids[sh->n_wk++] = id;
    else
        rc = -ENOMEM;
    pthread_mutex_unlock(&sh->wk_mu);
    return rc;
}

/* The authenticated CLIENT connections of the directory (returned owned; *ret_n of them). A
 * connected client that has not authenticated yet is left out: channeld's allConnections
 * includes it (§4.5 step 5 says "every existing client"), but it would get the entity's
 * fan-outs before its AUTH; it gets the subscription at AUTH instead (delay 1000). */
static uint32_t *dir_clients(cq_shared_t *sh, uint32_t *ret_n)
{
    *ret_n = 0;
    pthread_mutex_lock(&sh->dir_lock);
    uint32_t *ids = cq_malloc((cq_map_count(&sh->dir) + 1) * sizeof(uint32_t));
    uint32_t it = 0, id;
    void *v;
    while (ids && cq_map_next(&sh->dir, &it, &id, &v))
        if (((cq_dir_ent_t *)v)->type == CQ_CONN_CLIENT && ((cq_dir_ent_t *)v)->authed)
            ids[(*ret_n)++] = id;
    pthread_mutex_unlock(&sh->dir_lock);
    return ids;
}

/* The append comes before the snapshot: see the top of the file. */
static void wk_register(cq_core_t *c, cq_chan_t *ch)
{
    if (wk_append(c->sh, ch->id) < 0)
        CQ_WARN(EN_LOG, "well-known entity %u: out of memory; later clients miss it", ch->id);
    uint32_t n;
    uint32_t *ids = dir_clients(c->sh, &n);
    for (uint32_t i = 0; i < n; i++)
        wk_subscribe(c, ch, ids[i], false);
    cq_free(ids);
}

/* The entity may have been removed since the client read the list: then nothing happens. */
void cq__entity_wk_sub(cq_core_t *c, uint32_t chan_id, uint32_t conn_id)
{
    cq_chan_t *ch = cq__chan_get(c, chan_id);
    if (ch && ch->type == CHANNELDPB__CHANNEL_TYPE__ENTITY)
        wk_subscribe(c, ch, conn_id, true);
}

/* Marks the client authenticated in the directory, then reads the list (see the top of the
 * file: the mark before the read, the append before the snapshot). */
void cq__entity_client_authed(cq_core_t *c, uint32_t conn_id)
{
    cq_shared_t *sh = c->sh;
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, conn_id);
    if (e)
        e->authed = 1;
    pthread_mutex_unlock(&sh->dir_lock);
    /* In a relay the well-known entities live on GLOBAL's home, and their list with them: the
     * home subscribes the client (XM_WK_SUB for channel 0: all of them), after the client's
     * announcement, which left before (node.c). */
    uint32_t home = atomic_load_explicit(&sh->global_home, memory_order_relaxed);
    if (sh->node && home && home != sh->node) {
        cq_xmsg_t *x = cq__xmsg_new(XM_WK_SUB, 0);
        if (x) {
            x->conn_id = conn_id;
            cq__xmsg_post(c, cq__place_node(c, home), x);
        }
        return;
    }
    cq__entity_wk_all(c, conn_id);
}

/* Subscribes client conn_id to every well-known entity (on their workers). */
void cq__entity_wk_all(cq_core_t *c, uint32_t conn_id)
{
    cq_shared_t *sh = c->sh;
    pthread_mutex_lock(&sh->wk_mu);
    uint32_t n = sh->n_wk;
    uint32_t *ids = n ? cq_malloc(n * sizeof(uint32_t)) : NULL;
    if (ids)
        memcpy(ids, sh->wk_ids, n * sizeof(uint32_t));
    pthread_mutex_unlock(&sh->wk_mu);
    if (!ids)
        return;
    for (uint32_t i = 0; i < n; i++) {
        int w = cq__chan_worker(c, ids[i]);
        if (w == c->index) {
            cq__entity_wk_sub(c, ids[i], conn_id);
            continue;
        }
        cq_xmsg_t *x = cq__xmsg_new(XM_WK_SUB, 0);
        if (!x)
            continue;
        x->chan_id = ids[i];
        x->conn_id = conn_id;
        cq__xmsg_post(c, w, x);
    }
    cq_free(ids);
}

/* One lock after the other, never both: each is a leaf lock. */
void cq__entity_removed(cq_core_t *c, const cq_chan_t *ch)
{
    cq_shared_t *sh = c->sh;
    pthread_mutex_lock(&sh->groups_mu);
    cq_entgroups_forget(sh->groups, ch->id);
    pthread_mutex_unlock(&sh->groups_mu);
    pthread_mutex_lock(&sh->wk_mu);
    for (uint32_t i = 0; i < sh->n_wk; i++) {
        if (sh->wk_ids[i] == ch->id) {
            sh->wk_ids[i] = sh->wk_ids[--sh->n_wk];
            break;
        }
    }
    pthread_mutex_unlock(&sh->wk_mu);
}

/* ---- CREATE_ENTITY_CHANNEL -------------------------------------------------------------- */

/* The directory learns of an entity after it exists, as LIST may lag other channels by a
 * message too (chan.c). */
static void dir_add_entity(cq_core_t *c, const cq_chan_t *ch)
{
    int w = cq__place_dir_worker(c);
    if (w == c->index) {
        cq__dir_add(c, ch->id, ch->type, ch->metadata);
        return;
    }
    size_t n = strlen(ch->metadata) + 1;
    cq_xmsg_t *x = cq__xmsg_new(XM_DIR_ADD, n);
    if (!x)
        return;
    x->chan_id = ch->id;
    x->u1 = ch->type;
    memcpy(x->body, ch->metadata, n);
    cq__xmsg_post(c, w, x);
}

/* A CreateChannelResultMessage under msgType 15 (channeld's reply reuses the request's type,
 * §8.2), channelId = the request's, stub echoed; unlike CREATE_CHANNEL, no GLOBAL-owner copy. */
static void reply_entity(cq_core_t *c, const cq_req_t *r, const cq_chan_t *ch)
{
    Channeldpb__CreateChannelResultMessage out = CHANNELDPB__CREATE_CHANNEL_RESULT_MESSAGE__INIT;
    out.channeltype = CHANNELDPB__CHANNEL_TYPE__ENTITY;
    out.metadata = ch->metadata;
    out.ownerconnid = ch->owner;
    out.channelid = ch->id;
    cq__reply(c, r, r->mp.channel_id, MT_CREATE_ENTITY, &out.base); /* no GLOBAL-owner copy */
}

/* The owner last (§4.5 step 6), with the request's subOptions and a SUB result with stub 0; an
 * owner that was subscribed already (a well-known client) keeps its subscription. */
static void subscribe_owner(cq_core_t *c, cq_req_t *r, cq_chan_t *ch,
                            const Channeldpb__ChannelSubscriptionOptions *o)
{
    cq_sub_t *s = cq_map_get(&ch->subs, ch->owner);
    if (s)
        return;
    int rc = cq__sub_add(c, ch, ch->owner, ch->owner_type, o, &s);
    if (rc < 0) {
        cq__sub_refused(c, r, ch->owner, ch->id, rc);
        return;
    }
    cq_req_t third = *r;
    third.mp.stub_id = 0;
    third.mp.broadcast = 0;
    cq__sub_result(c, ch, s, &third);
}

/* §4.5 step 3: an entity created on GLOBAL whose data puts it in a cell belongs to that cell's
 * server (the holder of its slot), and the creation is answered to that server instead of the
 * sender, under MessagePack channelId = the cell, with the request's stub (channeld overwrites
 * the reply context's connection and channel, not its stub); that server, not the sender, is
 * then subscribed with subOptions. A cell whose slot is free leaves the sender the owner.
 * `to` (a copy of r) is redirected in place. */
static void spatially_owned(cq_core_t *c, const cq_req_t *r, cq_chan_t *ch, cq_req_t *to)
{
    uint32_t idx, cell = ch->ts.entity->cell;
    if (r->mp.channel_id != CQ_CHAN_ID_GLOBAL || !c->sh->spatial || !cell ||
        !cq_spatial_chan_index(c->sh->spatial, cell, &idx))
        return;
    uint32_t owner = atomic_load(&c->sh->slot_owner[cq_spatial_cell_server(c->sh->spatial, idx)]);
    if (!owner) {
        CQ_MSG_LOG(c, EN_LOG, "entity channel %u: cell %u has no server; conn %u keeps it", ch->id,
                   cell, r->conn_id);
        return;
    }
    CQ_INFO(EN_LOG, "entity channel %u belongs to conn %u, the server of cell %u", ch->id, owner,
            cell);
    cq__chan_set_owner(c, ch, owner, CQ_CONN_SERVER);
    to->conn_id = owner;
    to->conn_type = CQ_CONN_SERVER;
    to->conn = owner == r->conn_id ? r->conn : NULL;
    to->mp.channel_id = cell;
}

/* On the entity's worker, in channeld's order (§4.5): create, data, reply, well-known clients,
 * owner. Only here can a live channel with the id be found: a taken id is logged and answered
 * with nothing (channeld). The entity's cell is read from its data now, so its first update
 * that changes cells is a handover, not the entity's first position. */
void cq__entity_create_here(cq_core_t *c, cq_req_t *r, uint32_t id)
{
    Channeldpb__CreateEntityChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    if (cq__chan_get(c, id)) {
        CQ_MSG_LOG(c, EN_LOG, "conn %u: CREATE_ENTITY_CHANNEL: channel %u already exists",
                   r->conn_id, id);
        return;
    }
    cq_chan_t *ch = cq__chan_create(c, id, CHANNELDPB__CHANNEL_TYPE__ENTITY, m->metadata,
                                    r->conn_id, r->conn_type);
    if (!ch) {
        CQ_WARN(EN_LOG, "conn %u: cannot create entity channel %u: out of memory", r->conn_id, id);
        return;
    }
    CQ_INFO(EN_LOG, "conn %u created entity channel %u%s", r->conn_id, id,
            m->iswellknown ? " (well-known)" : "");
    if (cq__data_create(c, ch, m->data, m->mergeoptions) < 0) /* §4.5 step 2: not fatal */
        CQ_MSG_LOG(c, EN_LOG, "conn %u: entity channel %u: bad initial data; starts without data",
                   r->conn_id, id);
    cq__entity_init_cell(c, ch);
    dir_add_entity(c, ch);
    cq_req_t to = *r;
    spatially_owned(c, r, ch, &to);
    reply_entity(c, &to, ch);
    if (m->iswellknown)
        wk_register(c, ch);
    subscribe_owner(c, &to, ch, m->suboptions);
}

/* On the worker of the channel it was sent on (GLOBAL or a cell): the checks that need no entity
 * state run here, the rest on the entity's own worker. A refusal is logged without a reply, as
 * in channeld. */
void cq__handle_create_entity(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    Channeldpb__CreateEntityChannelMessage *m = cq__req_body(c, r);
    if (!ch || !m)
        return;
    if (ch->type != CHANNELDPB__CHANNEL_TYPE__GLOBAL &&
        ch->type != CHANNELDPB__CHANNEL_TYPE__SPATIAL) {
        CQ_MSG_LOG(c, EN_LOG, "conn %u: CREATE_ENTITY_CHANNEL on channel %u (type %u) dropped",
                   r->conn_id, ch->id, ch->type);
        return;
    }
    if (m->entityid < entity_start(c)) {
        CQ_MSG_LOG(c, EN_LOG, "conn %u: entity id %u is below the entity range (%u)", r->conn_id,
                   m->entityid, entity_start(c));
        return;
    }
    int w = cq__chan_worker(c, m->entityid);
    if (w == c->index) {
        cq__entity_create_here(c, r, m->entityid);
        return;
    }
    cq_xmsg_t *x = cq__xmsg_req(XM_ENTITY, r, true);
    if (!x)
        return;
    x->u1 = m->entityid;
    cq__xmsg_post(c, w, x);
}

/* ---- ENTITY_GROUP_ADD / ENTITY_GROUP_REMOVE --------------------------------------------- */

/* The entity channel of r if the sender owns it, else NULL (logged): channeld accepts group
 * changes from the entity's owner only. */
static cq_chan_t *group_chan(cq_core_t *c, const cq_req_t *r, const char *what)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    if (!ch)
        return NULL;
    if (ch->type != CHANNELDPB__CHANNEL_TYPE__ENTITY || ch->owner != r->conn_id) {
        CQ_MSG_LOG(c, EN_LOG, "conn %u: %s on channel %u dropped (%s)", r->conn_id, what, ch->id,
                   ch->type != CHANNELDPB__CHANNEL_TYPE__ENTITY ? "not an entity channel"
                                                                : "only its owner may");
        return NULL;
    }
    return ch;
}

/* Any change of the groups may unlock a handover that a LOCK group refused: the generation is
 * bumped (even when the change failed) and each entity retries at its next update. */
void cq__handle_group_add(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__AddEntityGroupMessage *m = cq__req_body(c, r);
    cq_chan_t *ch = m ? group_chan(c, r, "ENTITY_GROUP_ADD") : NULL;
    if (!ch)
        return;
    pthread_mutex_lock(&c->sh->groups_mu);
    int rc = cq_entgroups_add(c->sh->groups, ch->id, (cq_entgroup_type_t)m->type, m->entitiestoadd,
                              m->n_entitiestoadd);
    pthread_mutex_unlock(&c->sh->groups_mu);
    cq__handover_groups_changed(c);
    if (rc < 0)
        CQ_MSG_LOG(c, EN_LOG, "conn %u: ENTITY_GROUP_ADD on %u: %s", r->conn_id, ch->id,
                   cq_strerror(rc));
}

void cq__handle_group_remove(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__RemoveEntityGroupMessage *m = cq__req_body(c, r);
    cq_chan_t *ch = m ? group_chan(c, r, "ENTITY_GROUP_REMOVE") : NULL;
    if (!ch)
        return;
    pthread_mutex_lock(&c->sh->groups_mu);
    int rc = cq_entgroups_remove(c->sh->groups, ch->id, (cq_entgroup_type_t)m->type,
                                 m->entitiestoremove, m->n_entitiestoremove);
    pthread_mutex_unlock(&c->sh->groups_mu);
    cq__handover_groups_changed(c);
    if (rc < 0)
        CQ_MSG_LOG(c, EN_LOG, "conn %u: ENTITY_GROUP_REMOVE on %u: %s", r->conn_id, ch->id,
                   cq_strerror(rc));
}
