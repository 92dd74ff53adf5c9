/* chan.c - channels: table, ids, create/remove/list, ownership, ACL.
 *
 * Replies follow channeld's echo rules (§1.9): a direct reply keeps the request's msgType and
 * channelId and echoes its stub; copies to third parties (the GLOBAL owner) carry stub 0.
 *
 * A channel lives on the worker its id hashes to (place.c), which alone touches it. Ids and
 * LIST need a view of every channel, so worker 0, which owns GLOBAL and receives every
 * CREATE_CHANNEL and LIST_CHANNEL (channel-0 messages), keeps the channel directory: it
 * allocates the id, then hands the creation to the new channel's worker (XM_CREATE), and the
 * channel's worker tells it when the id is free again (XM_FREE_ID) or the metadata changed
 * (XM_META). The directory learns of a channel before it exists and of its removal just
 * after, so a LIST may show a channel one message early or one message late. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The channel_num{type} gauge slot: GLOBAL..ENTITY by number, channeld's TEST..TEST4 types
 * together, anything else as OTHER. */
static int type_slot(uint32_t type)
{
    if (type >= 1 && type <= 5)
        return (int)type;
    return type >= 100 && type <= 104 ? 6 : 0;
}

cq_chan_t *cq__chan_get(cq_core_t *c, uint32_t id)
{
    return cq_map_get(&c->chans, id);
}

/* Creates channel id on this worker, which must be its own (id % workers); the caller has the
 * id already (the directory allocated it, the grid or the game chose it). It sends nothing:
 * each caller answers in the order its message type needs. The type's settings are resolved
 * once, as they are immutable after start; the data starts undefined (data.c). */
cq_chan_t *cq__chan_create(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata,
                           uint32_t owner, uint8_t owner_type)
{
    cq_chan_t *ch = cq_calloc(1, sizeof(*ch));
    if (!ch)
        return NULL;
    ch->id = id;
    ch->type = type;
    ch->metadata = cq_strdup(metadata ? metadata : "");
    ch->wcount = cq_calloc((size_t)c->nplaces, sizeof(uint32_t));
    ch->settings = cq_settings_get(c->sh->o.settings, type);
    cq_map_init(&ch->subs);
    cq_list_init(&ch->owner_node);
    if (!ch->metadata || !ch->wcount || cq__chan_ts_new(ch) < 0 || cq__data_attach(c, ch) < 0 ||
        cq_map_put(&c->chans, id, ch) < 0) {
        cq__data_detach(c, ch);
        cq__chan_ts_free(ch);
        cq_free(ch->metadata);
        cq_free(ch->wcount);
        cq_free(ch);
        return NULL;
    }
    cq__chan_set_owner(c, ch, owner, owner_type);
    atomic_fetch_add(&c->sh->metrics.channels[type_slot(type)], 1);
    return ch;
}

/* The one place ownership changes. It keeps the owner's connref, so that the owner's CONN_GONE
 * finds the channels it owned here, and for GLOBAL the atomic global_owner, which every worker
 * reads for the ACL and for the GLOBAL owner's copies (place.h). */
void cq__chan_set_owner(cq_core_t *c, cq_chan_t *ch, uint32_t owner, uint8_t owner_type)
{
    cq_list_remove(&ch->owner_node);
    ch->owner = owner;
    ch->owner_type = owner_type;
    if (owner) {
        cq_connref_t *ref = cq__connref(c, owner, true);
        if (ref)
            cq_list_insert_tail(&ref->owned, &ch->owner_node);
    }
    if (ch->id == 0) {
        atomic_store(&c->sh->global_owner, owner);
        cq__node_global_owner(c, owner); /* the other nodes read it too */
    }
}

/* Frees the channel without telling anyone: after cq__chan_remove has notified and dropped the
 * subscriptions, or at shutdown, when no worker is left to tell. */
static void chan_destroy(cq_core_t *c, cq_chan_t *ch)
{
    cq__data_detach(c, ch);
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&ch->subs, &it, NULL, &v)) {
        cq_sub_t *s = v;
        cq_list_remove(&s->by_conn);
        cq__subopts_done(&s->opts);
        cq_free(s);
    }
    cq_map_done(&ch->subs);
    cq_list_remove(&ch->owner_node);
    atomic_fetch_sub(&c->sh->metrics.channels[type_slot(ch->type)], 1);
    cq__chan_ts_free(ch);
    cq_free(ch->wcount);
    cq_free(ch->metadata);
    cq_free(ch);
}

void cq__chan_free_all(cq_core_t *c)
{
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->chans, &it, NULL, &v))
        chan_destroy(c, v);
    cq_map_done(&c->chans);
    cq_map_init(&c->chans);
}

/* Frees the id on the directory worker first: the notified subscribers may create a channel at
 * once, and the directory's inbox then holds FREE_ID ahead of their CREATE, so the id is reused
 * as channeld does. This worker finishes the removal before it handles anything for the reused
 * id. */
static void free_id(cq_core_t *c, uint32_t id)
{
    int w = cq__place_dir_worker(c);
    if (c->index == w) {
        cq__dir_free_id(c, id);
        return;
    }
    cq_xmsg_t *m = cq__xmsg_new(XM_FREE_ID, 0);
    if (m) {
        m->chan_id = id;
        cq__xmsg_post(c, w, m);
    }
}

/* Notifies every subscriber, drops every subscription everywhere, frees the id. The
 * RemoveChannelMessage is fanned out before the subscriptions go, so on every worker its FANOUT
 * precedes the LSUB_DELs and each subscriber gets it (channeld: every subscriber, stub 0,
 * channelId = the request's; the requester only if subscribed; no GLOBAL owner copy).
 * notify_chan_id is the request's channel id, 0 for a removal nobody asked for. */
void cq__chan_remove(cq_core_t *c, cq_chan_t *ch, uint32_t notify_chan_id)
{
    if (ch->type == CHANNELDPB__CHANNEL_TYPE__ENTITY)
        cq__entity_removed(c, ch);
    free_id(c, ch->id);
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = ch->id;
    cq_buf_t *rec = cq_wire_record_msg(notify_chan_id, 0, 0, MT_REMOVE_CHANNEL, &rm.base);
    if (rec) {
        cq__fanout(c, ch, rec, 0, BC_ALL);
        cq_buf_unref(rec);
    }
    CQ_INFO("chan", "channel %u (type %u) removed", ch->id, ch->type);
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&ch->subs, &it, NULL, &v)) {
        cq__sub_remove(c, v, true);
        it = 0; /* the map changed */
    }
    cq_map_del(&c->chans, ch->id);
    chan_destroy(c, ch);
}

/* ---- ACL ---- */

static uint8_t acl_level(const cq_acl_t *a, cq_acl_access_t access)
{
    switch (access) {
    case CQ_ACCESS_SUB:
        return a->sub;
    case CQ_ACCESS_UNSUB:
        return a->unsub;
    default:
        return a->remove;
    }
}

/* channeld's levels (§2.3). who 0 never passes an owner check, as 0 means "no owner" (and no
 * GLOBAL owner). A type missing from the settings file has level None for all three: its other
 * settings fall back to GLOBAL's, its ACL does not (cq_settings.c), as in channeld. */
bool cq__acl_allows(const cq_chan_t *ch, cq_acl_access_t access, uint32_t who,
                    uint32_t global_owner)
{
    switch ((cq_acl_level_t)acl_level(&ch->settings->acl, access)) {
    case CQ_ACL_ANY:
        return true;
    case CQ_ACL_OWNER_AND_GLOBAL_OWNER:
        return who && (who == ch->owner || who == global_owner);
    case CQ_ACL_OWNER_ONLY:
        return who && who == ch->owner;
    default:
        return false; /* CQ_ACL_NONE, and nothing else loads (cq_settings.c checks 0..3) */
    }
}

/* ---- directory and ids (worker 0) ------------------------------------------------------- */

static cq_chaninfo_t *info_new(uint32_t id, uint32_t type, const char *metadata)
{
    cq_chaninfo_t *i = cq_calloc(1, sizeof(*i));
    if (!i)
        return NULL;
    i->id = id;
    i->type = type;
    i->metadata = cq_strdup(metadata ? metadata : "");
    if (!i->metadata) {
        cq_free(i);
        return NULL;
    }
    return i;
}

static void info_free(cq_chaninfo_t *i)
{
    if (i) {
        cq_free(i->metadata);
        cq_free(i);
    }
}

void cq__chaninfo_free_all(cq_core_t *c)
{
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->chaninfo, &it, NULL, &v))
        info_free(v);
    cq_map_done(&c->chaninfo);
    cq_map_init(&c->chaninfo);
}

/* The directory holds every live channel (GLOBAL, cells and entities too), which is what LIST
 * shows and what max-channels counts. */
int cq__dir_add(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata)
{
    cq_chaninfo_t *i = info_new(id, type, metadata);
    if (!i || cq_map_put(&c->chaninfo, id, i) < 0) {
        info_free(i);
        return -ENOMEM;
    }
    return 0;
}

void cq__dir_free_id(cq_core_t *c, uint32_t id)
{
    info_free(cq_map_del(&c->chaninfo, id));
    /* channeld: the cursor jumps back to a freed id, so ids are reused quickly. Only ids this
     * server allocates move it; cells and entities have ids of their own. */
    uint32_t local;
    if (cq__id_chan_node(&c->sh->ids, id, NULL, &local) && local >= 1)
        c->id_cursor = local;
}

/* The directory's copy only: the channel's own metadata lives with the channel, and META keeps
 * the two in step. */
void cq__dir_set_meta(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata)
{
    cq_chaninfo_t *i = cq_map_get(&c->chaninfo, id);
    char *md = cq_strdup(metadata);
    if (!i || !md) {
        cq_free(md);
        return;
    }
    cq_free(i->metadata);
    i->metadata = md;
    i->type = type;
}

/* Rotating cursor over the non-spatial ids (1..65535 without node bits): the first free id
 * from the cursor on, wrapping. max-channels counts every directory entry, GLOBAL included
 * (doc/protocol.md, Limits); 0 when it is reached or the range is full. */
static uint32_t id_alloc(cq_core_t *c, uint32_t node);

uint32_t cq__dir_alloc(cq_core_t *c)
{
    return id_alloc(c, c->sh->node);
}

static uint32_t id_alloc(cq_core_t *c, uint32_t node)
{
    if (cq_map_count(&c->chaninfo) >= c->sh->o.max_channels)
        return 0;
    uint32_t id = c->id_cursor, max = cq__id_chan_max(&c->sh->ids);
    for (uint32_t n = 0; n < max; n++) {
        if (id < 1 || id > max)
            id = 1;
        /* in a relay, the top bits name the node the channel will live on (place.h) */
        uint32_t full = cq__id_chan(&c->sh->ids, node, id);
        if (!cq_map_get(&c->chaninfo, full)) {
            c->id_cursor = id;
            return full;
        }
        id++;
    }
    return 0;
}

/* ---- CREATE_CHANNEL (on worker 0) ------------------------------------------------------- */

static Channeldpb__CreateChannelMessage *create_msg(cq_core_t *c, const cq_req_t *r)
{
    return cq__req_body(c, r); /* CREATE_CHANNEL or CREATE_SPATIAL_CHANNEL */
}

/* Under the request's msgType (channeld's replies reuse it, §8.2) and channelId, stub echoed; the
 * GLOBAL owner gets a copy with stub 0 unless it is the creator. */
static void reply_created(cq_core_t *c, cq_req_t *r, const cq_chan_t *ch)
{
    Channeldpb__CreateChannelResultMessage out = CHANNELDPB__CREATE_CHANNEL_RESULT_MESSAGE__INIT;
    out.channeltype = (Channeldpb__ChannelType)ch->type;
    out.metadata = ch->metadata;
    out.ownerconnid = ch->owner;
    out.channelid = ch->id;
    cq__reply(c, r, r->mp.channel_id, r->mp.msg_type, &out.base);
    cq__notify_gowner(c, r->conn_id, r->mp.channel_id, r->mp.msg_type, &out.base);
}

/* Subscribes the creator and sends it the SUB result (channel id = the new channel, stub 0).
 * Stub 0 although it goes to the requester: its direct reply was the CreateChannelResult
 * (§1.7 step 4). A creator over max-subs-per-conn is closed here, after its channel was
 * created and answered (doc/protocol.md, Limits). */
static void subscribe_creator(cq_core_t *c, cq_req_t *r, cq_chan_t *ch,
                              const Channeldpb__ChannelSubscriptionOptions *o)
{
    cq_sub_t *s;
    int rc = cq__sub_add(c, ch, r->conn_id, r->conn_type, o, &s);
    if (rc < 0) {
        cq__sub_refused(c, r, r->conn_id, ch->id, rc);
        return;
    }
    cq_req_t third = *r;
    third.mp.stub_id = 0;
    third.mp.broadcast = 0;
    cq__sub_result(c, ch, s, &third);
}

/* GLOBAL is never created, only possessed: the first CREATE_CHANNEL{GLOBAL} makes its sender the
 * GLOBAL owner (channeld's master server); a second one is dropped without a reply, as in
 * channeld. GLOBAL outlives its owners, so a new possessor keeps the data an earlier one left,
 * unless it brings data of its own. */
static void possess_global(cq_core_t *c, cq_req_t *r, Channeldpb__CreateChannelMessage *m)
{
    cq_chan_t *g = cq__chan_get(c, 0);
    if (g->owner) {
        CQ_MSG_LOG(c, "chan", "conn %u: GLOBAL is already possessed by conn %u", r->conn_id,
                   g->owner);
        return;
    }
    cq__chan_set_owner(c, g, r->conn_id, r->conn_type);
    /* The possessor's metadata becomes GLOBAL's (and LIST's); none keeps the previous one. */
    if (m->metadata && *m->metadata) {
        char *md = cq_strdup(m->metadata);
        if (md) {
            cq_free(g->metadata);
            g->metadata = md;
            cq__dir_set_meta(c, 0, g->type, md);
        }
    }
    CQ_INFO("chan", "conn %u possesses the GLOBAL channel", r->conn_id);
    bool new_data = m->data && m->data->type_url && *m->data->type_url;
    if (g->data->state && !new_data)
        cq__data_set_merge_opts(g, m->mergeoptions); /* a new possessor keeps the state */
    else if (cq__data_create(c, g, m->data, m->mergeoptions) < 0)
        CQ_MSG_LOG(c, "chan", "conn %u: GLOBAL data not initialised", r->conn_id);
    reply_created(c, r, g);
    cq_sub_t *s = cq_map_get(&g->subs, r->conn_id);
    if (!s)
        subscribe_creator(c, r, g, m->suboptions);
}

/* channeld has no error reply and only logs "non-spatial channels are full"; a creator left
 * without an answer waits forever, so the refusal closes it, with the reason logged. No made-up
 * result instead: a CreateChannelResult with id 0 would name GLOBAL. */
static void create_refused(cq_core_t *c, const cq_req_t *r)
{
    char why[96];
    snprintf(why, sizeof(why), "CREATE_CHANNEL over max-channels (%u channels)",
             c->sh->o.max_channels);
    cq__close_conn(c, r->conn_id, CQ_ELIMIT, why);
}

/* On the directory worker (a channel-0 message). The id is allocated and entered in the
 * directory here, before the channel exists on its own worker, so the next CREATE cannot be
 * given the same id; the channel's worker answers (XM_CREATE). */
void cq__handle_create(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__CreateChannelMessage *m = create_msg(c, r);
    if (!m)
        return;
    switch (m->channeltype) {
    case CHANNELDPB__CHANNEL_TYPE__UNKNOWN:
        CQ_MSG_LOG(c, "chan", "conn %u: CREATE_CHANNEL with type UNKNOWN rejected", r->conn_id);
        return;
    case CHANNELDPB__CHANNEL_TYPE__GLOBAL:
        possess_global(c, r, m);
        return;
    case CHANNELDPB__CHANNEL_TYPE__SPATIAL:
        if (c->sh->spatial) {
            cq__handle_create_spatial(c, r);
            return;
        }
        CQ_MSG_LOG(c, "chan",
                   "conn %u: SPATIAL channels need a spatial controller (not configured)",
                   r->conn_id);
        return;
    default:
        break;
    }
    /* In a relay the directory is GLOBAL's home, and a channel lives on its creator's node. */
    uint32_t node = c->sh->node ? cq__id_conn_node(&c->sh->ids, r->conn_id, NULL) : 0;
    uint32_t id = id_alloc(c, node);
    if (!id) {
        create_refused(c, r);
        return;
    }
    if (cq__dir_add(c, id, (uint32_t)m->channeltype, m->metadata) < 0) {
        CQ_WARN("chan", "conn %u: cannot create a channel: out of memory", r->conn_id);
        return;
    }
    int w = cq__chan_worker(c, id);
    if (w == c->index) {
        cq__handle_create_here(c, r, id);
        return;
    }
    cq_xmsg_t *x = cq__xmsg_req(XM_CREATE, r, true);
    if (!x)
        return;
    x->u1 = id;
    cq__xmsg_post(c, w, x);
}

/* On the new channel's worker: create, reply, subscribe the creator. A creation that fails gives
 * the id back (FREE_ID) and answers nothing. Initial data never stops it: an unknown type is
 * kept as bytes (data.c), and data that does not parse leaves the channel without data. channeld
 * created the channel and then sent nothing on an unknown type, leaving the creator unsubscribed
 * and the channel leaked (§8.2). */
void cq__handle_create_here(cq_core_t *c, cq_req_t *r, uint32_t id)
{
    Channeldpb__CreateChannelMessage *m = create_msg(c, r);
    cq_chan_t *ch =
        m ? cq__chan_create(c, id, (uint32_t)m->channeltype, m->metadata, r->conn_id, r->conn_type)
          : NULL;
    if (!ch) {
        CQ_WARN("chan", "conn %u: cannot create channel %u", r->conn_id, id);
        cq_xmsg_t *x = cq__xmsg_new(XM_FREE_ID, 0);
        if (x) {
            x->chan_id = id;
            cq__xmsg_post(c, cq__place_dir_worker(c), x);
        }
        return;
    }
    CQ_INFO("chan", "conn %u created channel %u (type %u, metadata \"%s\")", r->conn_id, id,
            ch->type, ch->metadata);
    if (cq__data_create(c, ch, m->data, m->mergeoptions) < 0)
        CQ_MSG_LOG(c, "chan", "conn %u: channel %u: bad initial data; starts without data",
                   r->conn_id, id);
    reply_created(c, r, ch);
    subscribe_creator(c, r, ch, m->suboptions);
}

/* ---- REMOVE_CHANNEL --------------------------------------------------------------------- */

/* Checked where the channel lives, the only worker that knows its owner. GLOBAL is never
 * removed, whatever the settings say; a denial is dropped without a reply (channeld). */
static void remove_here(cq_core_t *c, cq_req_t *r, uint32_t id)
{
    cq_chan_t *ch = cq__chan_get(c, id);
    if (!ch) {
        CQ_MSG_LOG(c, "chan", "conn %u: REMOVE_CHANNEL of unknown channel %u", r->conn_id, id);
        return;
    }
    if (id == 0 ||
        !cq__acl_allows(ch, CQ_ACCESS_REMOVE, r->conn_id, atomic_load(&c->sh->global_owner))) {
        CQ_MSG_LOG(c, "chan", "conn %u: REMOVE_CHANNEL %u denied by the channel ACL", r->conn_id,
                   id);
        return;
    }
    cq__chan_remove(c, ch, r->mp.channel_id);
}

/* REMOVE_CHANNEL names its channel in the body; the MessagePack target need only exist (clients
 * send 0, channeld §1.7). The request goes on to that channel's worker without its body: the id
 * travels in u1. */
void cq__handle_remove(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__RemoveChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    int w = cq__chan_worker(c, m->channelid);
    if (w == c->index) {
        remove_here(c, r, m->channelid);
        return;
    }
    cq_xmsg_t *x = cq__xmsg_req(XM_REMOVE, r, false);
    if (!x)
        return;
    x->u1 = m->channelid;
    cq__xmsg_post(c, w, x);
}

void cq__handle_remove_here(cq_core_t *c, cq_req_t *r, uint32_t id)
{
    remove_here(c, r, id);
}

/* ---- LIST_CHANNEL (worker 0) ------------------------------------------------------------ */

static bool list_match(const cq_chaninfo_t *i, const Channeldpb__ListChannelMessage *m)
{
    if (m->typefilter && (uint32_t)m->typefilter != i->type)
        return false;
    if (!m->n_metadatafilters)
        return true;
    for (size_t k = 0; k < m->n_metadatafilters; k++)
        if (strstr(i->metadata, m->metadatafilters[k]))
            return true;
    return false;
}

/* On the directory worker, the only one that sees every channel (§1.7: typeFilter 0 matches
 * every type, metadataFilters are an OR of substrings, GLOBAL is listed). */
void cq__handle_list(cq_core_t *c, cq_req_t *r)
{
    Channeldpb__ListChannelMessage *m = cq__req_body(c, r);
    /* Sized for every entry, as the filters only drop: one pass, no growth. */
    uint32_t n = cq_map_count(&c->chaninfo);
    Channeldpb__ListChannelResultMessage__ChannelInfo *infos = cq_calloc(n + 1, sizeof(*infos));
    Channeldpb__ListChannelResultMessage__ChannelInfo **ptrs = cq_calloc(n + 1, sizeof(*ptrs));
    if (!m || !infos || !ptrs)
        goto out;
    Channeldpb__ListChannelResultMessage out = CHANNELDPB__LIST_CHANNEL_RESULT_MESSAGE__INIT;
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->chaninfo, &it, NULL, &v)) {
        const cq_chaninfo_t *i = v;
        if (!list_match(i, m))
            continue;
        Channeldpb__ListChannelResultMessage__ChannelInfo *ci = &infos[out.n_channels];
        channeldpb__list_channel_result_message__channel_info__init(ci);
        ci->channelid = i->id;
        ci->channeltype = (Channeldpb__ChannelType)i->type;
        ci->metadata = i->metadata;
        ptrs[out.n_channels++] = ci;
    }
    out.channels = ptrs;
    cq__reply(c, r, r->mp.channel_id, MT_LIST_CHANNEL, &out.base);
out:
    cq_free(infos);
    cq_free(ptrs);
}
