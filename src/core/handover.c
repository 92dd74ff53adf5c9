/* handover.c - entity handover between spatial cells (channeld-protocol.md §4.6).
 *
 * chanq has no compiled-in game types: an entity's position is read from its channel data at
 * the configured field path (cq_spatial_handover_cfg_t, cq_fieldpath.h). When an accepted
 * update moves entity E from cell S to cell D, the handover runs as a chain of XM_HANDOVER
 * stages, each on the worker that owns what it touches (place.h), so no channel is locked:
 *   S  (S's worker)  collect S's subscribers; take the entities' entries out of S's data;
 *   D  (D's worker)  collect D's subscribers; put the entries into D's data; send the
 *                    ids-only CHANNEL_DATA_HANDOVER to the S-only subscribers;
 *   E  (each entity's worker, one message per entity)  on a cross-server handover unsubscribe
 *                    the source server unless it is in D, and move the ownership; subscribe
 *                    every D subscriber not yet subscribed (skipSelf, skipFirst); set the cell;
 *                    send each D subscriber its CHANNEL_DATA_HANDOVER, with the entity's full
 *                    data for a subscription that just started.
 * The E stage snapshots the entity's data, creates the subscriptions and sends the handover
 * in one step on the entity's thread, so the entity's later fan-outs follow the handover on
 * the same FIFO and start exactly after the snapshot (cq_sched floors a new subscription at
 * the next update): no gap, no duplicate. A group is handed over as one such message per
 * entity (doc/threads.md), which keeps that argument per entity.
 */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_fieldpath.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bounds a group handed over at once (doc/spatial.md, Deviations): the stages keep arrays of
 * this size on the stack, and the context stays one bounded message. */
#define HO_MAX_ENTS 64

enum { ST_S = 1, ST_D = 2, ST_E = 3 };

/* The context travelling between the stages (the XM_HANDOVER body):
 *   hdr, ents[n_ents], ssubs[n_ssubs], dsubs[n_dsubs], entry lengths[n_ents], entry bytes.
 * Flat (no pointers), so it travels as one message body. A type URL that does not fit dst_url is
 * carried as none: the handover then goes without data. */
typedef struct ho_hdr {
    uint32_t src, dst, ctx;
    uint32_t n_ents, n_ssubs, n_dsubs;
    uint32_t n_dserv;  /* dsubs[0, n_dserv) are servers, the rest clients; each part sorted */
    uint32_t entity;   /* ST_E: the entity this message is for */
    char dst_url[192]; /* ST_E: the type URL of D's data (set by ST_D), "" = none */
} ho_hdr_t;

typedef struct ho {
    ho_hdr_t h;
    uint32_t *ents, *ssubs, *dsubs, *elen;
    const uint8_t *ebytes;
} ho_t;

/* ---- position --------------------------------------------------------------------------- */

/* Most entity data never yields a position (no handover section, an unknown type), which is
 * not an error: 0, and the entity simply has no cell. */
int cq__entity_position(cq_core_t *c, const cq_chan_t *ch, cq_spatial_vec_t *ret)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    const cq_chandata_t *d = ch->data;
    if (!g || !*g->handover.position_path || !d || !d->desc || !d->state)
        return 0;
    double v[3];
    int r = cq_fieldpath_vec3(d->desc, g->handover.position_path, d->state->data, d->state->len, v);
    if (r <= 0)
        return r;
    ret->x = v[g->handover.axes[0]];
    ret->y = v[g->handover.axes[1]];
    ret->z = v[g->handover.axes[2]];
    return 1;
}

/* The cell the entity's data puts it in, or 0. */
static uint32_t entity_cell(cq_core_t *c, const cq_chan_t *ch)
{
    cq_spatial_vec_t p;
    uint32_t idx;
    if (cq__entity_position(c, ch, &p) <= 0 || cq_spatial_cell_of(c->sh->spatial, p.x, p.z, &idx))
        return 0;
    return cq_spatial_chan_id(c->sh->spatial, idx);
}

void cq__entity_init_cell(cq_core_t *c, cq_chan_t *ch)
{
    ch->ts.entity->cell = entity_cell(c, ch);
}

/* ---- the context ------------------------------------------------------------------------- */

/* Only the stages make these messages, but the counts in the header are checked against the
 * body anyway before any array is read. */
static int ho_parse(const cq_xmsg_t *m, ho_t *ho)
{
    if (m->body_len < sizeof(ho_hdr_t))
        return CQ_EDECODE;
    memcpy(&ho->h, m->body, sizeof(ho->h));
    size_t nw = (size_t)ho->h.n_ents * 2 + ho->h.n_ssubs + ho->h.n_dsubs;
    if (ho->h.n_ents > HO_MAX_ENTS || sizeof(ho->h) + nw * 4 > m->body_len)
        return CQ_EDECODE;
    uint32_t *w = (uint32_t *)(void *)(m->body + sizeof(ho->h)); /* body is 4-aligned */
    ho->ents = w;
    ho->ssubs = ho->ents + ho->h.n_ents;
    ho->dsubs = ho->ssubs + ho->h.n_ssubs;
    ho->elen = ho->dsubs + ho->h.n_dsubs;
    ho->ebytes = (const uint8_t *)(ho->elen + ho->h.n_ents);
    size_t total = 0;
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        total += ho->elen[i];
    return sizeof(ho->h) + nw * 4 + total > m->body_len ? CQ_EDECODE : 0;
}

static uint8_t *put_ids(uint8_t *p, const uint32_t *v, uint32_t n)
{
    if (n)
        memcpy(p, v, n * 4u);
    return p + n * 4u;
}

/* Posts stage `stage` of ho to worker, with the entries entries[i] (NULL: ho's own). */
static void ho_post(cq_core_t *c, int worker, int stage, const ho_t *ho, const cq_sbuf_t *entries)
{
    size_t total = 0;
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        total += entries ? entries[i].len : ho->elen[i];
    size_t nw = (size_t)ho->h.n_ents * 2 + ho->h.n_ssubs + ho->h.n_dsubs;
    cq_xmsg_t *m = cq__xmsg_new(XM_HANDOVER, sizeof(ho->h) + nw * 4 + total);
    if (!m) {
        CQ_WARN("handover", "out of memory: handover %u -> %u lost", ho->h.src, ho->h.dst);
        return;
    }
    m->u1 = (uint32_t)stage;
    uint8_t *p = m->body;
    memcpy(p, &ho->h, sizeof(ho->h));
    p += sizeof(ho->h);
    p = put_ids(p, ho->ents, ho->h.n_ents);
    p = put_ids(p, ho->ssubs, ho->h.n_ssubs);
    p = put_ids(p, ho->dsubs, ho->h.n_dsubs);
    for (uint32_t i = 0; i < ho->h.n_ents; i++) {
        uint32_t l = entries ? (uint32_t)entries[i].len : ho->elen[i];
        memcpy(p, &l, 4);
        p += 4;
    }
    const uint8_t *src = ho->ebytes;
    for (uint32_t i = 0; i < ho->h.n_ents; i++) {
        size_t l = entries ? entries[i].len : ho->elen[i];
        if (l)
            memcpy(p, entries ? entries[i].data : src, l);
        if (!entries) /* src is NULL when the entries come from `entries` */
            src += l;
        p += l;
    }
    cq__xmsg_post(c, worker, m);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The subscriber ids of ch (NULL: none) in a new array, servers first, each part sorted (the
 * stages test membership by binary search: cells may have thousands of subscribers); *n its
 * length, *n_serv the servers'. */
static uint32_t *subs_of(const cq_chan_t *ch, uint32_t *n, uint32_t *n_serv)
{
    uint32_t cnt = ch ? cq_map_count(&ch->subs) : 0, ns = 0, nc = 0, it = 0, key;
    uint32_t *v = cq_malloc((cnt ? cnt : 1) * sizeof(*v));
    void *val;
    if (!v)
        return NULL;
    while (ch && cq_map_next(&ch->subs, &it, &key, &val) && ns + nc < cnt)
        if (((const cq_sub_t *)val)->conn_type != CQ_CONN_CLIENT)
            v[ns++] = key;
    it = 0;
    while (ch && cq_map_next(&ch->subs, &it, &key, &val) && ns + nc < cnt)
        if (((const cq_sub_t *)val)->conn_type == CQ_CONN_CLIENT)
            v[ns + nc++] = key;
    qsort(v, ns, sizeof(*v), cmp_u32);
    qsort(v + ns, nc, sizeof(*v), cmp_u32);
    *n = ns + nc;
    if (n_serv)
        *n_serv = ns;
    return v;
}

/* True when id is in v[0, n), sorted in the two parts [0, split) and [split, n). */
static bool has_id(const uint32_t *v, uint32_t split, uint32_t n, uint32_t id)
{
    return (split && bsearch(&id, v, split, sizeof(*v), cmp_u32)) ||
           (n > split && bsearch(&id, v + split, n - split, sizeof(*v), cmp_u32));
}

/* The entities field of a cell's data, when configured and the data's type has it. */
static const cq_fielddesc_t *cell_map(const cq_core_t *c, cq_chan_t *cell)
{
    if (!cell || !cell->data || !cell->data->desc || !cq__data_state(cell))
        return NULL;
    return cq_mapops_field(cell->data->desc, c->sh->spatial->handover.entities_field);
}

/* A cell's data is replaced by a new buffer, like any merged state (data.c); on OOM it stays
 * as it was. This is not an update: the subscribers of both cells learn of the move
 * from CHANNEL_DATA_HANDOVER, so nothing goes to the scheduler. */
static void set_state(cq_chan_t *ch, cq_sbuf_t *sb)
{
    cq_buf_t *b = cq_buf_from(sb->data, sb->len);
    if (!b)
        return;
    cq_buf_unref(ch->data->state);
    ch->data->state = b;
}

/* ---- stage S: the source cell --------------------------------------------------------------- */

/* On S's worker: S's subscribers, for the later stages to compare with D's, and the entities'
 * entries taken out of S's map, which travel to D so that D's data gets exactly what S had. */
static void stage_s(cq_core_t *c, ho_t *ho)
{
    cq_chan_t *s = cq__chan_get(c, ho->h.src);
    uint32_t n;
    uint32_t *subs = subs_of(s, &n, NULL);
    cq_sbuf_t taken[HO_MAX_ENTS], rest;
    if (!subs)
        return;
    cq_sbuf_init(&rest);
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        cq_sbuf_init(&taken[i]);
    const cq_fielddesc_t *f = cell_map(c, s);
    if (f && cq_mapops_take(f, s->data->state->data, s->data->state->len, ho->ents, ho->h.n_ents,
                            &rest, taken, NULL) == 0)
        set_state(s, &rest);
    ho->h.n_ssubs = n;
    ho->ssubs = subs;
    ho->h.n_dsubs = 0;
    ho_post(c, cq__chan_worker(c, ho->h.dst), ST_D, ho, taken);
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        cq_sbuf_done(&taken[i]);
    cq_sbuf_done(&rest);
    cq_free(subs);
}

/* ---- stage D: the destination cell ------------------------------------------------------- */

static cq_buf_t *handover_record(const ho_t *ho, const char *type_url, const cq_sbuf_t *data)
{
    Channeldpb__ChannelDataHandoverMessage out = CHANNELDPB__CHANNEL_DATA_HANDOVER_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    out.srcchannelid = ho->h.src;
    out.dstchannelid = ho->h.dst;
    out.contextconnid = ho->h.ctx;
    if (data && type_url) {
        any.type_url = (char *)type_url;
        any.value.data = data->data;
        any.value.len = data->len;
        out.data = &any;
    }
    return cq_wire_record_msg(ho->h.dst, 0, 0, MT_DATA_HANDOVER, &out.base);
}

/* S's entries go into D's map. An entity that D's map holds already keeps D's entry: the
 * entity left D (if it ever was there) by a handover that took its entry out, so an entry in D
 * now was written after the entity moved here, by the update that moved it or a later one,
 * while S's entry is from before the move. Putting S's over it made D's data go back in time:
 * a later subscriber's full state missed the entity's last update for good (bench/spatial.sh's
 * convergence check found it). */
static void put_entries(cq_core_t *c, cq_chan_t *d, const ho_t *ho)
{
    const cq_fielddesc_t *f = cell_map(c, d);
    if (!f)
        return;
    cq_sbuf_t sb, own[HO_MAX_ENTS];
    uint64_t found = 0;
    cq_sbuf_init(&sb);
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        cq_sbuf_init(&own[i]);
    /* take first, keeping what D had, then append one entry per entity */
    int r = cq_mapops_take(f, d->data->state->data, d->data->state->len, ho->ents, ho->h.n_ents,
                           &sb, own, &found);
    const uint8_t *p = ho->ebytes;
    for (uint32_t i = 0; r == 0 && i < ho->h.n_ents; p += ho->elen[i], i++) {
        if (found & ((uint64_t)1 << i))
            r = cq_mapops_put(f, ho->ents[i], (const uint8_t *)own[i].data, own[i].len, &sb);
        else if (ho->elen[i])
            r = cq_mapops_put(f, ho->ents[i], p, ho->elen[i], &sb);
    }
    if (r == 0)
        set_state(d, &sb);
    for (uint32_t i = 0; i < ho->h.n_ents; i++)
        cq_sbuf_done(&own[i]);
    cq_sbuf_done(&sb);
}

/* On D's worker: the entries go into D's map, and the subscribers of S that are not in D get the
 * ids-only handover here, as no entity stage sends them a handover. Then one E message per
 * entity, each with D's subscribers and the type URL of D's data, which the entities' workers
 * cannot read themselves. */
static void stage_d(cq_core_t *c, ho_t *ho)
{
    cq_chan_t *d = cq__chan_get(c, ho->h.dst);
    uint32_t n, ns;
    uint32_t *subs = subs_of(d, &n, &ns);
    if (!subs)
        return;
    if (d)
        put_entries(c, d, ho);
    cq_buf_t *rec = handover_record(ho, NULL, NULL);
    for (uint32_t i = 0; rec && i < ho->h.n_ssubs; i++)
        if (!has_id(subs, ns, n, ho->ssubs[i]))
            cq__send_lazy(c, ho->ssubs[i], rec);
    cq_buf_unref(rec);
    ho->h.n_dsubs = n;
    ho->h.n_dserv = ns;
    ho->dsubs = subs;
    memset(ho->h.dst_url, 0, sizeof(ho->h.dst_url));
    if (d && d->data && d->data->type_url && strlen(d->data->type_url) < sizeof(ho->h.dst_url))
        strcpy(ho->h.dst_url, d->data->type_url);
    for (uint32_t i = 0; i < ho->h.n_ents; i++) {
        ho->h.entity = ho->ents[i];
        ho_post(c, cq__chan_worker(c, ho->ents[i]), ST_E, ho, NULL);
    }
    cq_free(subs);
}

static void ho_start(cq_core_t *c, cq_chan_t *ch, uint32_t ctx);

/* ---- stage E: each entity ----------------------------------------------------------------- */

/* From the published slot holders: the entity's worker cannot ask the directory worker without
 * a round trip (place.h lists slot_owner among the shared reads). */
static uint32_t cell_owner(const cq_core_t *c, uint32_t cell)
{
    uint32_t idx;
    if (!cq_spatial_chan_index(c->sh->spatial, cell, &idx))
        return 0;
    return atomic_load(&c->sh->slot_owner[cq_spatial_cell_server(c->sh->spatial, idx)]);
}

static void notify_unsub(cq_core_t *c, const cq_chan_t *e, uint32_t conn_id)
{
    Channeldpb__UnsubscribedFromChannelResultMessage out =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_RESULT_MESSAGE__INIT;
    out.connid = conn_id;
    out.conntype = CHANNELDPB__CONNECTION_TYPE__SERVER;
    out.channeltype = (Channeldpb__ChannelType)e->type;
    cq__notify(c, conn_id, e->id, MT_UNSUB, &out.base);
}

/* Cross-server: the source server leaves (unless it watches D) and the owner moves (§4.6 step
 * 2). Within one server's cells nothing changes: the owner is the same. */
static void move_owner(cq_core_t *c, cq_chan_t *e, const ho_t *ho)
{
    uint32_t from = cell_owner(c, ho->h.src), to = cell_owner(c, ho->h.dst);
    if (!from || !to || from == to)
        return;
    cq_sub_t *s = cq_map_get(&e->subs, from);
    if (s && !has_id(ho->dsubs, ho->h.n_dserv, ho->h.n_dsubs, from)) {
        cq__sub_remove(c, s, true);
        notify_unsub(c, e, from);
    }
    cq__chan_set_owner(c, e, to, CQ_CONN_SERVER);
}

/* The entity left every cell of the S-only subscribers: a subscription a handover made for one
 * of them goes (channeld keeps it, so a client collects every entity that ever crossed its
 * interest until max-subs-per-conn; it applies this rule to the source server only). A
 * subscription asked for with SUB_TO_CHANNEL stays. */
static void drop_left(cq_core_t *c, cq_chan_t *e, const ho_t *ho)
{
    for (uint32_t i = 0; i < ho->h.n_ssubs; i++) {
        uint32_t id = ho->ssubs[i];
        cq_sub_t *s = cq_map_get(&e->subs, id);
        if (!s || !s->by_handover || id == e->owner ||
            has_id(ho->dsubs, ho->h.n_dserv, ho->h.n_dsubs, id))
            continue;
        uint8_t type = s->conn_type;
        cq__sub_remove(c, s, true);
        Channeldpb__UnsubscribedFromChannelResultMessage out =
            CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_RESULT_MESSAGE__INIT;
        out.connid = id;
        out.conntype = (Channeldpb__ConnectionType)type;
        out.channeltype = (Channeldpb__ChannelType)e->type;
        cq__notify(c, id, e->id, MT_UNSUB, &out.base);
    }
}

/* Subscribes conn to e as a handover does; true when the subscription is new. WRITE for the
 * entity's owner, else READ; skipSelf, and skipFirst because the handover itself carries the
 * entity's full data to a new subscriber, which the first fan-out would only repeat. The SUB
 * result goes to the subscriber with a copy to the owner, as for any SUB. */
static bool ho_subscribe(cq_core_t *c, cq_chan_t *e, uint32_t conn)
{
    if (cq_map_get(&e->subs, conn))
        return false;
    cq_subopts_t o = {
        .data_access = conn == e->owner ? CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS
                                        : CHANNELDPB__CHANNEL_DATA_ACCESS__READ_ACCESS,
        .interval_ms = e->settings->fanout_interval_ms,
        .delay_ms = e->settings->fanout_delay_ms,
        .skip_self = true,
        .skip_first = true,
    };
    cq_sub_t *s;
    int r = cq__sub_add_opts(c, e, conn, 0, &o, c->now_ms, &s);
    if (r < 0) {
        CQ_MSG_LOG(c, "handover", "cannot subscribe conn %u to entity %u: %s", conn, e->id,
                   cq_strerror(r));
        return false;
    }
    s->by_handover = 1;
    cq_req_t r0 = {conn, s->conn_type, {0}, NULL, 0};
    r0.mp.msg_type = MT_SUB;
    r0.mp.channel_id = e->id;
    cq__sub_result(c, e, s, &r0);
    return true;
}

/* SpatialChannelData{entities: {E: entry (+ entityData = full data when full)}}. */
static int ho_data(cq_core_t *c, const cq_chan_t *e, const ho_t *ho, const uint8_t *entry,
                   size_t elen, bool full, const cq_fielddesc_t *f, cq_sbuf_t *out)
{
    const cq_spatial_handover_cfg_t *hc = &c->sh->spatial->handover;
    if (!full || !*hc->entity_data_field || !e->data || !e->data->state)
        return cq_mapops_put(f, ho->h.entity, entry, elen, out);
    const cq_fielddesc_t *any =
        f->msg->map_value && f->msg->map_value->msg
            ? cq_msgdesc_field_by_name(f->msg->map_value->msg, hc->entity_data_field,
                                       strlen(hc->entity_data_field))
            : NULL;
    if (!any)
        return cq_mapops_put(f, ho->h.entity, entry, elen, out);
    cq_sbuf_t v;
    cq_sbuf_init(&v);
    int r = cq_fieldpath_set_any(entry, elen, any->number, e->data->type_url, e->data->state->data,
                                 e->data->state->len, &v);
    if (r == 0)
        r = cq_mapops_put(f, ho->h.entity, v.data, v.len, out);
    cq_sbuf_done(&v);
    return r;
}

static void send_e(cq_core_t *c, const cq_chan_t *e, const ho_t *ho, const bool *fresh)
{
    const uint8_t *entry = ho->ebytes;
    size_t elen = 0;
    for (uint32_t i = 0; i < ho->h.n_ents; entry += ho->elen[i], i++)
        if (ho->ents[i] == ho->h.entity) {
            elen = ho->elen[i];
            break;
        }
    const char *url = ho->h.dst_url;
    const cq_msgdesc_t *cd = c->schema && *url ? cq_schema_find_type_url(c->schema, url) : NULL;
    const cq_fielddesc_t *f = cq_mapops_field(cd, c->sh->spatial->handover.entities_field);
    /* Two contents at most (with and without the full entity data): each is encoded once and
     * shared by its recipients' queues. */
    cq_buf_t *recs[2] = {NULL, NULL};
    bool made[2] = {false, false};
    for (uint32_t i = 0; i < ho->h.n_dsubs; i++) {
        int k = fresh[i] ? 1 : 0;
        if (!made[k]) {
            made[k] = true;
            cq_sbuf_t data;
            cq_sbuf_init(&data);
            bool with = f && ho_data(c, e, ho, entry, elen, k == 1, f, &data) == 0;
            recs[k] = handover_record(ho, with ? url : NULL, with ? &data : NULL);
            cq_sbuf_done(&data);
        }
        if (recs[k])
            cq__send_lazy(c, ho->dsubs[i], recs[k]);
    }
    cq_buf_unref(recs[0]);
    cq_buf_unref(recs[1]);
}

/* On the entity's worker, the only writer of its data and subscriptions: ownership,
 * subscriptions, the cell and every handover record are done in this one step, so each new
 * subscriber's fan-outs of the entity come after its handover and start after the snapshot the
 * handover carries (doc/threads.md, "Handover order"). Without SubscribeClients only D's
 * servers, dsubs[0, n_dserv), are subscribed. */
static void stage_e(cq_core_t *c, ho_t *ho)
{
    cq_chan_t *e = cq__chan_get(c, ho->h.entity);
    if (!e)
        return;
    cq_entity_state_t *es = e->ts.entity; /* NULL: a group listed a channel of another type */
    bool trigger = es && es->ho_pending;
    if (es)
        es->ho_pending = false;
    move_owner(c, e, ho);
    drop_left(c, e, ho);
    bool *fresh = cq_calloc(ho->h.n_dsubs ? ho->h.n_dsubs : 1, sizeof(*fresh));
    if (!fresh)
        return;
    uint32_t n = c->sh->spatial->handover.subscribe_clients ? ho->h.n_dsubs : ho->h.n_dserv;
    for (uint32_t i = 0; i < n; i++)
        fresh[i] = ho_subscribe(c, e, ho->dsubs[i]);
    if (es)
        es->cell = ho->h.dst;
    send_e(c, e, ho, fresh);
    cq_free(fresh);
    /* Updates that arrived meanwhile were not checked (ho_pending): the entity may already be
     * past D, and no later update may come to notice it. */
    if (trigger)
        ho_start(c, e, ho->h.ctx);
}

void cq__handover_stage(cq_core_t *c, const cq_xmsg_t *m)
{
    ho_t ho;
    if (!c->sh->spatial || ho_parse(m, &ho) < 0)
        return;
    if (m->u1 == ST_S)
        stage_s(c, &ho);
    else if (m->u1 == ST_D)
        stage_d(c, &ho);
    else if (m->u1 == ST_E)
        stage_e(c, &ho);
}

/* Atomic: the entities on every worker compare it with the generation they were refused at. */
void cq__handover_groups_changed(cq_core_t *c)
{
    atomic_fetch_add(&c->sh->groups_gen, 1);
}

/* ---- the trigger --------------------------------------------------------------------------- */

/* A handover refused by a LOCK group is remembered with the cell and the groups' generation, so
 * the entity's next updates do not take groups_mu again until one of them changes. While a
 * handover is on its way (ho_pending) no other starts; the E stage looks at the position again
 * when it ends. */

/* contextConnId of the handover: the update's sender when a client sent it, else the update's
 * own contextConnId (channeld's latest data-update connection, §1.7). */
static uint32_t context_conn(cq_core_t *c, const cq_req_t *r)
{
    if (r->conn_type == CQ_CONN_CLIENT)
        return r->conn_id;
    Channeldpb__ChannelDataUpdateMessage *m = cq__req_body(c, r);
    return m ? m->contextconnid : 0;
}

/* Hands ch over if its data puts it in another cell than its current one. */
static void ho_start(cq_core_t *c, cq_chan_t *ch, uint32_t ctx)
{
    cq_entity_state_t *es = ch->ts.entity;
    uint32_t dst = entity_cell(c, ch);
    if (!dst || dst == es->cell) {
        es->ho_blocked = 0;
        return;
    }
    if (!es->cell) { /* first known position: no handover, the entity starts there */
        es->cell = dst;
        return;
    }
    uint32_t gen = atomic_load(&c->sh->groups_gen);
    if (dst == es->ho_blocked && gen == es->ho_blocked_gen)
        return; /* locked: not retried until the cell or the groups change */
    uint32_t ents[HO_MAX_ENTS];
    pthread_mutex_lock(&c->sh->groups_mu);
    size_t n = cq_entgroups_handover_set(c->sh->groups, ch->id, ents, HO_MAX_ENTS);
    pthread_mutex_unlock(&c->sh->groups_mu);
    if (!n) {
        CQ_MSG_LOG(c, "handover", "entity %u: %u -> %u refused: locked", ch->id, es->cell, dst);
        es->ho_blocked = dst;
        es->ho_blocked_gen = gen;
        return;
    }
    ho_t ho = {{es->cell, dst, ctx, (uint32_t)n, 0, 0, 0, 0, ""}, ents, NULL, NULL, NULL, NULL};
    es->ho_pending = true;
    es->ho_blocked = 0;
    cq_sbuf_t none[HO_MAX_ENTS];
    for (size_t i = 0; i < n; i++)
        cq_sbuf_init(&none[i]);
    ho_post(c, cq__chan_worker(c, ho.h.src), ST_S, &ho, none);
}

/* After every accepted update of an entity channel (data.c), on the entity's worker: only the
 * merged state says where the entity is now. */
void cq__handover_check(cq_core_t *c, cq_chan_t *ch, const cq_req_t *r)
{
    if (!c->sh->spatial || !*c->sh->spatial->handover.position_path || ch->ts.entity->ho_pending)
        return;
    ho_start(c, ch, context_conn(c, r));
}
