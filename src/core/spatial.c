/* spatial.c - the spatial controller: server slots, cell channels, border interest, regions,
 * queries (channeld-protocol.md §4.1-§4.3). Runs on GLOBAL's worker (the directory worker).
 *
 * The slots live here (c->slots, directory worker only) and are mirrored in sh->slot_owner for
 * the other workers. Cells are ordinary channels with the grid's fixed ids, living on the
 * worker their id hashes to; this worker creates (or takes over) them, and their workers
 * subscribe the owner and the border servers (XM_SP_CELL).
 *
 * Reply order (§4.3 steps 4-5). This worker first creates (or takes over) the slot's cells: one
 * XM_SP_CELL each, posted straight to the cell's worker, so a cell exists before anything that
 * announces it, and before any later step for it (every later step is causally after). Then it
 * builds the replies as a chain of steps in channeld's order - border subscriptions with their
 * SUB results, SPATIAL_CHANNELS_READY, the CreateSpatialChannelsResult (and the GLOBAL owner's
 * copy), the owner's subscriptions with their SUB results, SPATIAL_REGIONS_UPDATE - and runs it
 * (cq__spatial_chain): a step that subscribes someone to a cell runs on that cell's worker, which
 * subscribes silently and sends the SUB result itself (contents known in advance: the
 * connection, the request's subOptions merged over SPATIAL's defaults, SERVER, SPATIAL), then
 * runs the following steps or hands them to the next worker in one XM_SP_CELL. So (1) one
 * recipient's records enter its worker's inbox in chain order: each is posted causally after
 * the previous one, and the Vyukov MPSC queue is linearizable; (2) a SUB result leaves the
 * cell's worker before any fan-out or broadcast that worker sends the new subscriber. Sending
 * every reply from this worker (the earlier design) kept (1) but not (2).
 *
 * §8.2 fixes: an unknown data Any does not stop the creation (the cells start with the bytes
 * as they are, or without data, and the replies still go out); a server that takes over the
 * slot of a closed one takes its cells over (owner changes, subscribers stay) instead of
 * re-creating them, because cells are never removed for losing their owner. A server holds at
 * most one slot: repeating the request repeats the replies for the same slot (channeld would
 * hand it a second free slot). */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

#define SP_LOG "spatial"

/* ---- slots ------------------------------------------------------------------------------ */

static int slots_ready(cq_core_t *c)
{
    if (c->slots.holder)
        return 0;
    return cq_spatial_slots_init(&c->slots, c->sh->spatial);
}

/* Stores every slot, not only the one that changed: a few atomics, on a take or a release. The
 * other workers read them (an entity created on GLOBAL, a cross-server handover) instead of
 * asking this one, which would cost a round trip per decision. */
static void slot_publish(cq_core_t *c)
{
    for (uint32_t i = 0; i < c->slots.n; i++)
        atomic_store(&c->sh->slot_owner[i], c->slots.holder[i]);
}

void cq__spatial_release(cq_core_t *c, uint32_t conn_id)
{
    if (!c->sh->spatial || !c->slots.holder || c->index != cq__place_dir_worker(c))
        return;
    if (cq_spatial_slots_release(&c->slots, conn_id)) {
        CQ_INFO(SP_LOG, "conn %u left its spatial server slot", conn_id);
        slot_publish(c);
    }
}

/* A successor that recovers under its own id (on another relay node than its predecessor's,
 * recover.c) holds the slot from now on. */
void cq__spatial_rekey(cq_core_t *c, uint32_t old_id, uint32_t new_id)
{
    if (!c->sh->spatial || !c->slots.holder || c->index != cq__place_dir_worker(c))
        return;
    if (cq_spatial_slots_rekey(&c->slots, old_id, new_id)) {
        CQ_INFO(SP_LOG, "conn %u holds the spatial server slot of conn %u", new_id, old_id);
        slot_publish(c);
    }
}

/* A recoverable server keeps its slot for a successor with the same PIT, which takes the old id
 * and with it the slot, its cells and its border subscriptions; recover.c releases the slot if
 * the recovery times out. */
void cq__spatial_conn_gone(cq_core_t *c, uint32_t conn_id, bool recoverable)
{
    if (!recoverable)
        cq__spatial_release(c, conn_id);
}

bool cq__spatial_is_cell(const cq_core_t *c, const cq_chan_t *ch)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    return g && ch->type == CHANNELDPB__CHANNEL_TYPE__SPATIAL &&
           cq_spatial_chan_index(g, ch->id, NULL);
}

void cq__spatial_free(cq_core_t *c)
{
    if (c->slots.holder)
        cq_spatial_slots_done(&c->slots);
    memset(&c->slots, 0, sizeof(c->slots));
}

/* ---- on a cell's worker ----------------------------------------------------------------- */

/* who is a server (an owner or a border holder): only servers hold slots. Silent: the chain
 * sends the SUB result right after this step, from this worker. */
static void cell_subscribe(cq_core_t *c, cq_req_t *r, cq_chan_t *ch, uint32_t who,
                           const Channeldpb__ChannelSubscriptionOptions *o)
{
    if (cq_map_get(&ch->subs, who))
        return; /* already there (a redone border, a repeated request): options unchanged */
    cq_sub_t *s;
    int rc = cq__sub_add(c, ch, who, CQ_CONN_SERVER, o, &s);
    if (rc < 0)
        cq__sub_refused(c, r, who, ch->id, rc);
}

static cq_chan_t *cell_create(cq_core_t *c, cq_req_t *r, Channeldpb__CreateChannelMessage *m,
                              uint32_t id, uint32_t who)
{
    cq_chan_t *ch =
        cq__chan_create(c, id, CHANNELDPB__CHANNEL_TYPE__SPATIAL, m->metadata, who, CQ_CONN_SERVER);
    if (!ch) {
        CQ_WARN(SP_LOG, "conn %u: cannot create spatial channel %u: out of memory", r->conn_id, id);
        return NULL;
    }
    if (cq__data_create(c, ch, m->data, m->mergeoptions) < 0)
        CQ_MSG_LOG(c, SP_LOG, "conn %u: spatial channel %u: bad initial data; starts without data",
                   r->conn_id, id);
    CQ_INFO(SP_LOG, "conn %u created spatial channel %u", who, id);
    return ch;
}

/* The slot's new holder takes an existing cell over: owner, and data only if it has none. */
static void cell_take_over(cq_core_t *c, cq_req_t *r, Channeldpb__CreateChannelMessage *m,
                           cq_chan_t *ch, uint32_t who)
{
    if (ch->owner != who) {
        CQ_INFO(SP_LOG, "conn %u takes spatial channel %u over from conn %u", who, ch->id,
                ch->owner);
        cq__chan_set_owner(c, ch, who, CQ_CONN_SERVER);
    }
    bool new_data = m->data && m->data->type_url && *m->data->type_url;
    if (ch->data->state || !new_data)
        cq__data_set_merge_opts(ch, m->mergeoptions);
    else if (cq__data_create(c, ch, m->data, m->mergeoptions) < 0)
        CQ_MSG_LOG(c, SP_LOG, "conn %u: spatial channel %u: bad initial data", r->conn_id, ch->id);
}

/* On the cell's worker. The CREATE request is decoded again here, as a decoded message cannot
 * travel between workers (dispatch.c): its metadata, data and subOptions apply to every cell. */
void cq__spatial_cell(cq_core_t *c, cq_req_t *r, uint32_t id, uint32_t mode, uint32_t who)
{
    Channeldpb__CreateChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    cq_chan_t *ch = cq__chan_get(c, id);
    if (mode == SP_CELL_OWN) {
        if (!ch)
            cell_create(c, r, m, id, who);
        else
            cell_take_over(c, r, m, ch, who);
        return;
    }
    if (!ch) {
        CQ_MSG_LOG(c, SP_LOG, "spatial channel %u missing for conn %u's subscription", id, who);
        return;
    }
    cell_subscribe(c, r, ch, who, m->suboptions);
}

/* ---- the reply chain -------------------------------------------------------------------- */

/* A step of a creation's replies: on cell's worker (0: anywhere) run cq__spatial_cell(cell,
 * mode, who), then send the len record bytes that follow the step to `to` (0: none). */
typedef struct sp_step {
    uint32_t cell, mode, who, to, len;
} sp_step_t;

typedef struct sp_chain {
    cq_sbuf_t b; /* sp_step_t, record bytes, sp_step_t, ... */
    int err;
} sp_chain_t;

static void chain_add(sp_chain_t *ch, uint32_t cell, uint32_t mode, uint32_t who, uint32_t to,
                      cq_buf_t *rec)
{
    sp_step_t st = {cell, mode, who, rec ? to : 0, rec ? (uint32_t)rec->len : 0};
    if (cq_sbuf_append(&ch->b, &st, sizeof(st)) < 0 ||
        (rec && cq_sbuf_append(&ch->b, rec->data, rec->len) < 0))
        ch->err = -ENOMEM;
}

/* Appends a step sending msg to `to` under (chan_id, bc, stub), after (cell, mode, who). */
static void chain_msg(sp_chain_t *ch, uint32_t cell, uint32_t mode, uint32_t who, uint32_t to,
                      uint32_t chan_id, uint32_t bc, uint32_t stub, uint32_t type,
                      const ProtobufCMessage *msg)
{
    cq_buf_t *rec = cq_wire_record_msg(chan_id, bc, stub, type, msg);
    if (!rec) {
        ch->err = -ENOMEM;
        return;
    }
    chain_add(ch, cell, mode, who, to, rec);
    cq_buf_unref(rec);
}

/* The rest of the chain goes to worker w with the request's body in front of it (u1 = where the
 * steps start), so that the steps there can decode the request. */
static void chain_post(cq_core_t *c, const cq_req_t *r, int w, const uint8_t *p, size_t n)
{
    cq_xmsg_t *x = cq__xmsg_new(XM_SP_CELL, r->mp.body_len + n);
    if (!x) {
        CQ_WARN(SP_LOG, "conn %u: spatial creation replies lost: out of memory", r->conn_id);
        return;
    }
    x->conn_id = r->conn_id;
    x->conn_type = r->conn_type;
    x->mp = r->mp;
    if (r->mp.body_len)
        memcpy(x->body, r->mp.body, r->mp.body_len);
    memcpy(x->body + r->mp.body_len, p, n);
    x->u1 = (uint32_t)r->mp.body_len;
    cq__xmsg_post(c, w, x);
}

/* Runs the steps p[0..n) here until one belongs to another worker, then hands the rest to it.
 * Each worker posts the records of its steps before it hands the rest on, so every record of a
 * chain enters its recipient's inbox after the previous one (causal order on a linearizable
 * MPSC queue), and a SUB result leaves the cell's worker right after the subscription, before
 * anything that worker sends the subscriber later. */
void cq__spatial_chain(cq_core_t *c, cq_req_t *r, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off + sizeof(sp_step_t) <= n) {
        sp_step_t st;
        memcpy(&st, p + off, sizeof(st));
        if (st.len > n - off - sizeof(st))
            return;
        if (st.cell) {
            int w = cq__chan_worker(c, st.cell);
            if (w != c->index) {
                chain_post(c, r, w, p + off, n - off);
                return;
            }
            cq__spatial_cell(c, r, st.cell, st.mode, st.who);
        }
        cq_buf_t *rec = st.to ? cq_buf_from(p + off + sizeof(st), st.len) : NULL;
        if (rec) {
            cq__send_to(c, st.to, rec);
            cq_buf_unref(rec);
        }
        off += sizeof(st) + st.len;
    }
}

/* ---- on the directory worker ------------------------------------------------------------ */

/* Creates (or takes over) cell id for who: one step posted straight from this worker, so that
 * it precedes, on the cell's FIFO, every later chain step for the cell (causally after it). */
static void post_create(cq_core_t *c, cq_req_t *r, uint32_t id, uint32_t who)
{
    sp_step_t st = {id, SP_CELL_OWN, who, 0, 0};
    cq__spatial_chain(c, r, (const uint8_t *)&st, sizeof(st));
}

/* The cells are listed by LIST like any channel; a cell taken over shows its new metadata. */
static void dir_register(cq_core_t *c, uint32_t id, const char *metadata)
{
    if (cq_map_get(&c->chaninfo, id))
        cq__dir_set_meta(c, id, CHANNELDPB__CHANNEL_TYPE__SPATIAL, metadata ? metadata : "");
    else if (cq__dir_add(c, id, CHANNELDPB__CHANNEL_TYPE__SPATIAL, metadata) < 0)
        CQ_WARN(SP_LOG, "spatial channel %u: not listed: out of memory", id);
}

/* Subscribes `who` to cell silently on the cell's worker, which then sends the SUB result. */
static void chain_sub(sp_chain_t *ch, uint32_t who, uint32_t cell, const cq_subopts_t *opts)
{
    Channeldpb__ChannelSubscriptionOptions o;
    cq__subopts_to_pb(opts, &o);
    Channeldpb__SubscribedToChannelResultMessage out =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    out.connid = who;
    out.suboptions = &o;
    out.conntype = CHANNELDPB__CONNECTION_TYPE__SERVER;
    out.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    chain_msg(ch, cell, SP_CELL_SUB, who, who, cell, 0, 0, MT_SUB, &out.base);
}

static void chain_ready(sp_chain_t *ch, uint32_t to, uint32_t count)
{
    Channeldpb__SpatialChannelsReadyMessage out = CHANNELDPB__SPATIAL_CHANNELS_READY_MESSAGE__INIT;
    out.serverindex = count; /* channeld puts the count in both fields */
    out.servercount = count;
    if (to)
        chain_msg(ch, 0, 0, 0, to, 0, 0, 0, MT_SPATIAL_READY, &out.base);
}

/* The last slot was filled (§4.3 step 4): border interest for every server, then READY. Every
 * server's border subscriptions take the last requester's subOptions, as in channeld. READY
 * goes to each slot holder and to the GLOBAL owner, so twice to a GLOBAL owner that is also a
 * spatial server (channeld does the same). */
static void all_ready(cq_core_t *c, sp_chain_t *chain, const cq_subopts_t *opts)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    uint32_t cap = cq_spatial_cells(g);
    uint32_t *cells = cq_calloc(cap ? cap : 1, sizeof(uint32_t));
    if (!cells) {
        chain->err = -ENOMEM;
        return;
    }
    for (uint32_t s = 0; s < c->slots.n; s++) {
        uint32_t who = c->slots.holder[s];
        uint32_t n = cq_spatial_border_cells(g, s, cells, cap);
        for (uint32_t i = 0; i < n && i < cap; i++)
            chain_sub(chain, who, cells[i], opts);
    }
    cq_free(cells);
    for (uint32_t s = 0; s < c->slots.n; s++)
        chain_ready(chain, c->slots.holder[s], c->slots.n);
    chain_ready(chain, atomic_load(&c->sh->global_owner), c->slots.n);
    CQ_INFO(SP_LOG, "spatial channels ready: %u servers", c->slots.n);
}

/* Under msgType 10 whatever the request's type (a type-3 SPATIAL create too, as channeld). */
static void chain_created(sp_chain_t *ch, const cq_req_t *r,
                          const Channeldpb__CreateChannelMessage *m, uint32_t *cells, uint32_t n,
                          uint32_t gowner)
{
    Channeldpb__CreateSpatialChannelsResultMessage out =
        CHANNELDPB__CREATE_SPATIAL_CHANNELS_RESULT_MESSAGE__INIT;
    out.n_spatialchannelid = n;
    out.spatialchannelid = cells;
    out.metadata = m->metadata;
    out.ownerconnid = r->conn_id;
    chain_msg(ch, 0, 0, 0, r->conn_id, r->mp.channel_id, r->mp.broadcast, r->mp.stub_id,
              MT_CREATE_SPATIAL, &out.base);
    if (gowner && gowner != r->conn_id)
        chain_msg(ch, 0, 0, 0, gowner, r->mp.channel_id, 0, 0, MT_CREATE_SPATIAL, &out.base);
}

/* SpatialRegionsUpdateMessage with every cell's region, in cell order, as msgType 13 under
 * (chan_id, bc, stub); NULL on OOM. */
static cq_buf_t *regions_record(cq_core_t *c, uint32_t chan_id, uint32_t bc, uint32_t stub)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    uint32_t n = cq_spatial_cells(g);
    cq_buf_t *rec = NULL;
    Channeldpb__SpatialRegion *regs = cq_calloc(n ? n : 1, sizeof(*regs));
    Channeldpb__SpatialRegion **ptrs = cq_calloc(n ? n : 1, sizeof(*ptrs));
    Channeldpb__SpatialInfo *pts = cq_calloc(2 * (size_t)(n ? n : 1), sizeof(*pts));
    if (!regs || !ptrs || !pts)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        cq_spatial_region_t reg;
        cq_spatial_region(g, i, &reg);
        Channeldpb__SpatialInfo *lo = &pts[2 * i], *hi = &pts[2 * i + 1];
        channeldpb__spatial_info__init(lo);
        channeldpb__spatial_info__init(hi);
        lo->x = reg.min.x;
        lo->y = reg.min.y;
        lo->z = reg.min.z;
        hi->x = reg.max.x;
        hi->y = reg.max.y;
        hi->z = reg.max.z;
        channeldpb__spatial_region__init(&regs[i]);
        regs[i].min = lo;
        regs[i].max = hi;
        regs[i].channelid = reg.chan_id;
        regs[i].serverindex = reg.server;
        ptrs[i] = &regs[i];
    }
    Channeldpb__SpatialRegionsUpdateMessage out = CHANNELDPB__SPATIAL_REGIONS_UPDATE_MESSAGE__INIT;
    out.n_regions = n;
    out.regions = ptrs;
    rec = cq_wire_record_msg(chan_id, bc, stub, MT_REGIONS_UPDATE, &out.base);
out:
    cq_free(regs);
    cq_free(ptrs);
    cq_free(pts);
    return rec;
}

/* The requester's replies (§4.3 step 5); its own cells' subscriptions happen on their workers
 * right before their SUB results. SPATIAL_REGIONS_UPDATE carries stub 0 when another connection
 * owns GLOBAL: channeld's handler zeroes the request's stub in place when it sends the GLOBAL
 * owner's copy of the result, and the later reply inherits it (§4.3 step 5). */
static void reply_all(cq_core_t *c, sp_chain_t *ch, const cq_req_t *r,
                      const Channeldpb__CreateChannelMessage *m, uint32_t *cells, uint32_t n,
                      const cq_subopts_t *opts)
{
    uint32_t g = atomic_load(&c->sh->global_owner);
    chain_created(ch, r, m, cells, n, g);
    for (uint32_t i = 0; i < n; i++)
        chain_sub(ch, r->conn_id, cells[i], opts);
    uint32_t stub = g && g != r->conn_id ? 0 : r->mp.stub_id;
    cq_buf_t *rec = regions_record(c, r->mp.channel_id, r->mp.broadcast, stub);
    if (!rec)
        ch->err = -ENOMEM;
    chain_add(ch, 0, 0, 0, r->conn_id, rec);
    cq_buf_unref(rec);
}

/* Creates the slot's cells, then runs the chain of every reply in channeld's order. */
static void create_in_slot(cq_core_t *c, cq_req_t *r, const Channeldpb__CreateChannelMessage *m,
                           int slot, bool filled)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    uint32_t n = cq_spatial_slot_cells(g, (uint32_t)slot, NULL, 0);
    uint32_t *cells = cq_calloc(n ? n : 1, sizeof(uint32_t));
    sp_chain_t chain = {.err = 0};
    cq_sbuf_init(&chain.b);
    cq_subopts_t opts;
    int rc = cq__subopts_make(cq_settings_get(c->sh->o.settings, CHANNELDPB__CHANNEL_TYPE__SPATIAL),
                              m->suboptions, &opts);
    if (!cells || rc < 0)
        goto oom;
    n = cq_spatial_slot_cells(g, (uint32_t)slot, cells, n);
    for (uint32_t i = 0; i < n; i++) {
        dir_register(c, cells[i], m->metadata);
        post_create(c, r, cells[i], r->conn_id);
    }
    if (filled)
        all_ready(c, &chain, &opts);
    reply_all(c, &chain, r, m, cells, n, &opts);
    if (chain.err < 0)
        goto oom;
    cq__spatial_chain(c, r, chain.b.data, chain.b.len);
    goto out;
oom:
    CQ_WARN(SP_LOG, "conn %u: spatial channels: replies lost: out of memory", r->conn_id);
out:
    cq_sbuf_done(&chain.b);
    cq__subopts_done(&opts);
    cq_free(cells);
}

/* On the directory worker, where the slots live. Only a SERVER creates spatial channels, and
 * without a free slot nothing is answered (channeld). The readiness steps run only when this
 * request filled the last free slot: a holder repeating its request gets its own replies again,
 * not another round of border subscriptions and READY. */
void cq__handle_create_spatial(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__CreateChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    if (r->conn_type != CQ_CONN_SERVER) {
        CQ_MSG_LOG(c, SP_LOG, "conn %u: only SERVER connections create spatial channels",
                   r->conn_id);
        return;
    }
    if (slots_ready(c) < 0) {
        CQ_WARN(SP_LOG, "conn %u: spatial slots: out of memory", r->conn_id);
        return;
    }
    bool was_full = cq_spatial_slots_full(&c->slots);
    int slot = cq_spatial_slots_take(&c->slots, r->conn_id);
    if (slot < 0) {
        /* channeld answers nothing; the server may retry once a slot frees */
        CQ_MSG_LOG(c, SP_LOG, "conn %u: no free spatial server slot (%u servers)", r->conn_id,
                   c->slots.n);
        return;
    }
    slot_publish(c);
    CQ_INFO(SP_LOG, "conn %u holds spatial server slot %d", r->conn_id, slot);
    create_in_slot(c, r, m, slot, !was_full && cq_spatial_slots_full(&c->slots));
}

/* ---- QUERY_SPATIAL_CHANNEL, DEBUG_GET_SPATIAL_REGIONS ------------------------------------ */

/* Each SpatialInfo to its cell's id, in order; off the grid (or NULL) gives 0 (§1.7). */
void cq__handle_query_spatial(cq_core_t *c, cq_req_t *r)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    Channeldpb__QuerySpatialChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    if (!g) { /* channeld: no controller, no answer */
        CQ_MSG_LOG(c, SP_LOG, "conn %u: QUERY_SPATIAL_CHANNEL without a spatial controller",
                   r->conn_id);
        return;
    }
    uint32_t *ids = cq_calloc(m->n_spatialinfo ? m->n_spatialinfo : 1, sizeof(uint32_t));
    if (!ids)
        return;
    for (size_t i = 0; i < m->n_spatialinfo; i++) {
        const Channeldpb__SpatialInfo *p = m->spatialinfo[i];
        uint32_t idx;
        if (p && cq_spatial_cell_of(g, p->x, p->z, &idx) == 0)
            ids[i] = cq_spatial_chan_id(g, idx);
    }
    Channeldpb__QuerySpatialChannelResultMessage out =
        CHANNELDPB__QUERY_SPATIAL_CHANNEL_RESULT_MESSAGE__INIT;
    out.n_channelid = m->n_spatialinfo;
    out.channelid = ids;
    cq__reply(c, r, r->mp.channel_id, MT_QUERY_SPATIAL, &out.base);
    cq_free(ids);
}

/* --dev only, as in channeld; answered under msgType 13 with the request's stub. */
void cq__handle_debug_regions(cq_core_t *c, cq_req_t *r)
{
    if (!c->sh->o.dev || !c->sh->spatial) {
        CQ_MSG_LOG(c, SP_LOG, "conn %u: DEBUG_GET_SPATIAL_REGIONS dropped (%s)", r->conn_id,
                   c->sh->o.dev ? "no spatial controller" : "not in --dev mode");
        return;
    }
    cq_buf_t *rec = regions_record(c, r->mp.channel_id, r->mp.broadcast, r->mp.stub_id);
    if (!rec) {
        CQ_WARN(SP_LOG, "regions for conn %u: out of memory", r->conn_id);
        return;
    }
    if (r->conn)
        cq__conn_push(c, r->conn, rec);
    else
        cq__send_to(c, r->conn_id, rec);
    cq_buf_unref(rec);
}
