/* sub.c - subscriptions: options, SUB/UNSUB, local fan-out lists, connection loss.
 *
 * The connection directory (dir_lock) counts each connection's subscriptions, as the one place
 * that sees them on every worker: the count enforces the per-connection limit, and the entry
 * gives the type of a connection another one subscribes. It is taken once per SUB and
 * removal, never per message.
 *
 * A subscription is recorded twice: by the channel's worker (cq_sub_t in the channel, with
 * the options and data schedule) and by the subscriber's worker (the channel's local fan-out
 * list, a plain array of connections), so that a broadcast is one message per worker and a
 * walk of an array there, not one message per subscriber. The channel's worker decides both:
 * it sends LSUB_ADD before any fan-out that must reach the new subscriber and LSUB_DEL after
 * the last one, on the same FIFO inbox, and the subscriber's worker changes its list only on
 * those messages or when the connection closes, so the two views always agree. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- options ---------------------------------------------------------------------------- */

void cq__subopts_done(cq_subopts_t *o)
{
    for (uint32_t i = 0; i < o->n_masks; i++)
        cq_free(o->masks[i]);
    cq_free(o->masks);
    o->masks = NULL;
    o->n_masks = 0;
}

/* A new subscription's options before the request's are merged (channeld §2.4): READ access
 * (an owner writes because it owns, not by its subscription), the channel type's interval and
 * delay, skip-self on, skip-first off, no masks. */
static void opts_default(cq_subopts_t *o, const cq_chan_settings_t *st)
{
    memset(o, 0, sizeof(*o));
    o->data_access = CHANNELDPB__CHANNEL_DATA_ACCESS__READ_ACCESS;
    o->interval_ms = st->fanout_interval_ms;
    o->delay_ms = st->fanout_delay_ms;
    o->skip_self = true;
}

/* Set fields win; masks append (channeld's protobuf Merge). Interval clamped to >= 1: any
 * connection that may SUB can send 0, which made channeld's fan-out loop spin for ever (§2.6,
 * §8.2). Masks appending on every re-subscription is channeld's behaviour, kept for its
 * clients (§8.2 lists it among the quirks to keep). */
static int opts_merge(cq_subopts_t *o, const Channeldpb__ChannelSubscriptionOptions *m)
{
    if (!m)
        return 0;
    if (m->has_dataaccess)
        o->data_access = m->dataaccess;
    if (m->has_fanoutintervalms)
        o->interval_ms = m->fanoutintervalms ? m->fanoutintervalms : 1;
    if (m->has_fanoutdelayms)
        o->delay_ms = m->fanoutdelayms;
    if (m->has_skipselfupdatefanout)
        o->skip_self = m->skipselfupdatefanout;
    if (m->has_skipfirstfanout)
        o->skip_first = m->skipfirstfanout;
    if (!m->n_datafieldmasks)
        return 0;
    char **nm = cq_realloc(o->masks, (o->n_masks + m->n_datafieldmasks) * sizeof(char *));
    if (!nm)
        return -ENOMEM;
    o->masks = nm;
    for (size_t i = 0; i < m->n_datafieldmasks; i++) {
        char *s = cq_strdup(m->datafieldmasks[i]);
        if (!s)
            return -ENOMEM;
        o->masks[o->n_masks++] = s;
    }
    return 0;
}

int cq__subopts_make(const cq_chan_settings_t *st,
                     const Channeldpb__ChannelSubscriptionOptions *req, cq_subopts_t *ret)
{
    opts_default(ret, st);
    return opts_merge(ret, req);
}

/* Every field marked present: a result states the options in effect, not only those the
 * request set. The masks are borrowed from o; pb lives only until its record is encoded. */
void cq__subopts_to_pb(const cq_subopts_t *o, Channeldpb__ChannelSubscriptionOptions *pb)
{
    channeldpb__channel_subscription_options__init(pb);
    pb->has_dataaccess = pb->has_fanoutintervalms = pb->has_fanoutdelayms = 1;
    pb->has_skipselfupdatefanout = pb->has_skipfirstfanout = 1;
    pb->dataaccess = o->data_access;
    pb->fanoutintervalms = o->interval_ms;
    pb->fanoutdelayms = o->delay_ms;
    pb->skipselfupdatefanout = o->skip_self;
    pb->skipfirstfanout = o->skip_first;
    pb->n_datafieldmasks = o->n_masks;
    pb->datafieldmasks = o->masks;
}

/* ---- connection references (per worker reverse index) ---------------------------------- */

/* What this worker's channels hold of one connection: its subscriptions and the channels it
 * owns. A CONN_GONE then costs what the connection held here, not a walk of every channel. A
 * ref exists only while it holds something (cq__connref_gc), so callers that remove from it
 * look it up again afterwards. */
cq_connref_t *cq__connref(cq_core_t *c, uint32_t conn_id, bool create)
{
    cq_connref_t *ref = cq_map_get(&c->connrefs, conn_id);
    if (ref || !create)
        return ref;
    ref = cq_malloc(sizeof(*ref));
    if (!ref)
        return NULL;
    cq_list_init(&ref->subs);
    cq_list_init(&ref->owned);
    if (cq_map_put(&c->connrefs, conn_id, ref) < 0) {
        cq_free(ref);
        return NULL;
    }
    return ref;
}

void cq__connref_gc(cq_core_t *c, uint32_t conn_id)
{
    cq_connref_t *ref = cq_map_get(&c->connrefs, conn_id);
    if (ref && cq_list_empty(&ref->subs) && cq_list_empty(&ref->owned))
        cq_free(cq_map_del(&c->connrefs, conn_id));
}

/* ---- local fan-out lists ---------------------------------------------------------------- */

/* conn joins chan_id's local list and records its place there (conn->chans), so that a close
 * unlinks it from every list without searching them. On OOM it is not listed and misses the
 * channel's broadcasts; the LSUB_DEL that follows finds nothing to remove. */
void cq__lsub_add(cq_core_t *c, uint32_t chan_id, uint32_t conn_id)
{
    cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
    if (!conn || conn->state == CONN_CLOSING)
        return;       /* gone: its CONN_GONE cleans the channel side */
    cq__seg_close(c); /* a new subscriber gets only what is fanned out after it */
    cq_lsubs_t *l = cq_map_get(&c->lsubs, chan_id);
    if (!l && (!(l = cq_calloc(1, sizeof(*l))) || cq_map_put(&c->lsubs, chan_id, l) < 0)) {
        cq_free(l);
        return;
    }
    l->chan_id = chan_id;
    if (l->n == l->cap) {
        uint32_t ncap = l->cap ? l->cap * 2 : 4;
        cq_conn_t **nc = cq_realloc(l->conns, ncap * sizeof(*nc));
        if (!nc)
            return;
        l->conns = nc;
        l->cap = ncap;
    }
    if (conn->n_chans == conn->cap_chans) {
        uint32_t ncap = conn->cap_chans ? conn->cap_chans * 2 : 2;
        cq_conn_chan_t *nc = cq_realloc(conn->chans, ncap * sizeof(*nc));
        if (!nc)
            return;
        conn->chans = nc;
        conn->cap_chans = ncap;
    }
    conn->chans[conn->n_chans++] = (cq_conn_chan_t){chan_id, l->n};
    l->conns[l->n++] = conn;
}

static cq_conn_chan_t *conn_chan(cq_conn_t *conn, uint32_t chan_id)
{
    for (uint32_t i = 0; i < conn->n_chans; i++)
        if (conn->chans[i].chan_id == chan_id)
            return &conn->chans[i];
    return NULL;
}

/* Swap-removes position idx of the list of chan_id, fixing the moved connection's index. The
 * list stays a dense array for the fan-out walk; the order of recipients is not observable
 * (each connection's own queue keeps its order). An emptied list is freed with its fan-out
 * buffer (its segment was delivered above), so a worker keeps lists only for channels that
 * have subscribers here. */
static void lsub_unlink(cq_core_t *c, uint32_t chan_id, uint32_t idx)
{
    cq__seg_close(c); /* a leaving subscriber gets what was fanned out before */
    cq_lsubs_t *l = cq_map_get(&c->lsubs, chan_id);
    if (!l || idx >= l->n)
        return;
    c->lsub_gen++; /* a fan-out walking this list re-reads it */
    cq_conn_t *moved = l->conns[--l->n];
    l->conns[idx] = moved;
    if (idx < l->n) {
        cq_conn_chan_t *e = conn_chan(moved, chan_id);
        if (e)
            e->idx = idx;
    }
    if (l->n == 0) {
        cq_map_del(&c->lsubs, chan_id);
        cq__fanbuf_release(l);
        cq_free(l->conns);
        cq_free(l);
    }
}

void cq__lsub_del(cq_core_t *c, uint32_t chan_id, uint32_t conn_id)
{
    cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
    cq_conn_chan_t *e = conn ? conn_chan(conn, chan_id) : NULL;
    if (!e)
        return;
    lsub_unlink(c, chan_id, e->idx);
    *e = conn->chans[--conn->n_chans];
}

/* At the close: the connection leaves every local list at once, not when the channels' LSUB_DELs
 * arrive (they find nothing then), so no broadcast in between is queued for it. */
void cq__lsub_conn_drop(cq_core_t *c, cq_conn_t *conn)
{
    while (conn->n_chans) {
        cq_conn_chan_t e = conn->chans[--conn->n_chans];
        lsub_unlink(c, e.chan_id, e.idx);
    }
}

/* A subscriber on this worker is changed at once: its local fan-out is a direct call too
 * (cq__fanout), so list changes and broadcasts keep their call order, as they keep their post
 * order on another worker's FIFO. */
static void lsub_post(cq_core_t *c, int kind, uint32_t chan_id, uint32_t conn_id)
{
    int w = cq__conn_worker(c, conn_id);
    if (w == c->index) {
        if (kind == XM_LSUB_ADD)
            cq__lsub_add(c, chan_id, conn_id);
        else
            cq__lsub_del(c, chan_id, conn_id);
        return;
    }
    cq_xmsg_t *m = cq__xmsg_new(kind, 0);
    if (!m)
        return;
    m->chan_id = chan_id;
    m->conn_id = conn_id;
    cq__xmsg_post(c, w, m);
}

/* ---- subscription records --------------------------------------------------------------- */

/* A game server is subscribed to every channel it creates, and owns one per entity: servers
 * get a limit of their own, sized for that, instead of a client's. */
static uint32_t sub_limit(const cq_shared_t *sh, uint8_t conn_type)
{
    return conn_type == CQ_CONN_SERVER ? sh->o.max_subs_per_server : sh->o.max_subs_per_conn;
}

/* Counts the subscription against the connection's limit; fills its type if unknown. */
static int dir_sub_inc(cq_shared_t *sh, uint32_t conn_id, uint8_t *type)
{
    int r = 0;
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, conn_id);
    uint32_t limit = e ? sub_limit(sh, e->type) : 0;
    if (!e)
        r = CQ_ENOCONN;
    else if (limit && e->subs >= limit)
        r = CQ_ELIMIT;
    else {
        e->subs++;
        *type = e->type;
        atomic_fetch_add(&sh->metrics.subscriptions, 1);
    }
    pthread_mutex_unlock(&sh->dir_lock);
    return r;
}

/* The connection's type from the directory (0 when it is gone): only on a refusal. */
static uint8_t dir_type(cq_shared_t *sh, uint32_t conn_id)
{
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, conn_id);
    uint8_t type = e ? e->type : 0;
    pthread_mutex_unlock(&sh->dir_lock);
    return type;
}

static void dir_sub_dec(cq_shared_t *sh, uint32_t conn_id)
{
    pthread_mutex_lock(&sh->dir_lock);
    cq_dir_ent_t *e = cq_map_get(&sh->dir, conn_id);
    if (e && e->subs) {
        e->subs--;
        atomic_fetch_sub(&sh->metrics.subscriptions, 1);
    }
    pthread_mutex_unlock(&sh->dir_lock);
}

/* Creates the record; its options are the channel type's defaults. The directory is asked
 * first, so a refusal (over the limit, or the connection is gone) leaves nothing to undo. The
 * subscription time is kept for RECOVERY_CHANNEL_DATA.subTime. */
static int sub_new(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, uint8_t conn_type, cq_sub_t **ret)
{
    uint8_t type = conn_type;
    int r = dir_sub_inc(c->sh, conn_id, &type);
    if (r < 0)
        return r;
    cq_sub_t *s = cq_calloc(1, sizeof(*s));
    cq_connref_t *ref = cq__connref(c, conn_id, true);
    if (!s || !ref || cq_map_put(&ch->subs, conn_id, s) < 0) {
        cq_free(s);
        dir_sub_dec(c->sh, conn_id);
        return -ENOMEM;
    }
    s->conn_id = conn_id;
    s->conn_type = type;
    s->chan = ch;
    s->sub_time_ms = c->now_ms;
    opts_default(&s->opts, ch->settings);
    cq_list_insert_tail(&ref->subs, &s->by_conn);
    *ret = s;
    return 0;
}

/* Links a new record into the fan-out accounting and the subscriber's local list. wcount tells
 * cq__fanout which workers have subscribers, so a broadcast posts nothing to the others. The
 * LSUB_ADD leaves now, before any broadcast this worker sends the channel later. */
static void sub_link(cq_core_t *c, cq_chan_t *ch, cq_sub_t *s)
{
    ch->wcount[cq__conn_worker(c, s->conn_id)]++;
    lsub_post(c, XM_LSUB_ADD, ch->id, s->conn_id);
}

/* The channel-data schedule takes the options once they are final. */
static void sub_schedule(cq_core_t *c, cq_chan_t *ch, cq_sub_t *s)
{
    cq__data_sub(c, ch, s);
}

/* For subscriptions whose options are complete already: a recovered server's (its old options
 * and subscription time), a handover's. *opts, masks included, moves into the record on
 * success; on failure the caller still owns it. */
int cq__sub_add_opts(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, uint8_t conn_type,
                     const cq_subopts_t *opts, uint64_t sub_time_ms, cq_sub_t **ret)
{
    cq_sub_t *s;
    int r = sub_new(c, ch, conn_id, conn_type, &s);
    if (r < 0)
        return r;
    s->opts = *opts;
    s->sub_time_ms = sub_time_ms;
    sub_link(c, ch, s);
    sub_schedule(c, ch, s);
    *ret = s;
    return 0;
}

/* A subscription asked for: the request's options merged over the channel type's defaults. */
int cq__sub_add(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, uint8_t conn_type,
                const Channeldpb__ChannelSubscriptionOptions *req, cq_sub_t **ret)
{
    cq_sub_t *s;
    int r = sub_new(c, ch, conn_id, conn_type, &s);
    if (r < 0)
        return r;
    opts_merge(&s->opts, req);
    sub_link(c, ch, s);
    sub_schedule(c, ch, s);
    *ret = s;
    return 0;
}

/* The schedule forgets the subscriber first, so no fan-out is built for it any more; then the
 * LSUB_DEL is posted after every FANOUT this worker already posted for the channel, so the
 * leaving subscriber gets what was broadcast before it left and nothing after. dir_update is
 * false when the directory entry is gone already (a closed connection: dir_remove took the
 * count with it). */
void cq__sub_remove(cq_core_t *c, cq_sub_t *s, bool dir_update)
{
    cq_chan_t *ch = s->chan;
    cq__data_unsub(c, ch, s->conn_id);
    cq_map_del(&ch->subs, s->conn_id);
    cq_list_remove(&s->by_conn);
    ch->wcount[cq__conn_worker(c, s->conn_id)]--;
    lsub_post(c, XM_LSUB_DEL, ch->id, s->conn_id);
    if (dir_update)
        dir_sub_dec(c->sh, s->conn_id);
    cq__connref_gc(c, s->conn_id);
    cq__subopts_done(&s->opts);
    cq_free(s);
}

/* ---- replies ---------------------------------------------------------------------------- */

/* Sends a result to the requester (stub echoed), the subject if different and the owner if
 * neither (stub 0), as channeld does, except that channeld sends an owner that is also the
 * subject (and not the requester) a second copy; here it gets one. */
static void send_three(cq_core_t *c, const cq_chan_t *ch, const cq_req_t *r, uint32_t subject,
                       uint32_t msg_type, const ProtobufCMessage *msg)
{
    cq__reply(c, r, ch->id, msg_type, msg);
    if (subject != r->conn_id)
        cq__notify(c, subject, ch->id, msg_type, msg);
    if (ch->owner && ch->owner != r->conn_id && ch->owner != subject)
        cq__notify(c, ch->owner, ch->id, msg_type, msg);
}

void cq__sub_result(cq_core_t *c, cq_chan_t *ch, const cq_sub_t *s, const cq_req_t *r)
{
    Channeldpb__ChannelSubscriptionOptions o;
    cq__subopts_to_pb(&s->opts, &o);
    Channeldpb__SubscribedToChannelResultMessage out =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    out.connid = s->conn_id;
    out.suboptions = &o;
    out.conntype = (Channeldpb__ConnectionType)s->conn_type;
    out.channeltype = (Channeldpb__ChannelType)ch->type;
    send_three(c, ch, r, s->conn_id, MT_SUB, &out.base);
}

/* r NULL: the connection was lost, and only the owner hears of it (channeld §2.2). */
static void unsub_result(cq_core_t *c, const cq_chan_t *ch, const cq_req_t *r, uint32_t conn_id,
                         uint8_t conn_type)
{
    Channeldpb__UnsubscribedFromChannelResultMessage out =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_RESULT_MESSAGE__INIT;
    out.connid = conn_id;
    out.conntype = (Channeldpb__ConnectionType)conn_type;
    out.channeltype = (Channeldpb__ChannelType)ch->type;
    if (r) {
        send_three(c, ch, r, conn_id, MT_UNSUB, &out.base);
        return;
    }
    cq__notify(c, ch->owner, ch->id, MT_UNSUB, &out.base); /* connection lost */
}

/* ---- SUB_TO_CHANNEL / UNSUB_FROM_CHANNEL ------------------------------------------------ */

void cq__sub_refused(cq_core_t *c, const cq_req_t *r, uint32_t target, uint32_t chan_id, int rc)
{
    if (rc != CQ_ELIMIT) {
        CQ_MSG_LOG(c, "sub", "conn %u: cannot subscribe conn %u to channel %u: %s", r->conn_id,
                   target, chan_id, cq_strerror(rc));
        return;
    }
    uint8_t type = dir_type(c->sh, target);
    char why[96];
    snprintf(why, sizeof(why), "SUB to channel %u over %s (%u)", chan_id,
             type == CQ_CONN_SERVER ? "max-subs-per-server" : "max-subs-per-conn",
             sub_limit(c->sh, type));
    cq__close_conn(c, target, rc, why);
}

/* SUB on an existing subscription: the options merge (masks append) and the result is sent
 * only when dataAccess changed, as in channeld (§1.7); a client waiting on its stub for any
 * other change waits in channeld too. */
static void resubscribe(cq_core_t *c, cq_chan_t *ch, cq_sub_t *s, const cq_req_t *r,
                        const Channeldpb__ChannelSubscriptionOptions *o)
{
    uint32_t before = s->opts.data_access;
    s->by_handover = 0; /* asked for now: a handover no longer takes it away */
    if (opts_merge(&s->opts, o) < 0)
        return;
    sub_schedule(c, ch, s); /* option updates keep the subscriber's timing */
    if (s->opts.data_access != before)
        cq__sub_result(c, ch, s, r);
}

void cq__handle_sub(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    Channeldpb__SubscribedToChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    /* channeld: a CLIENT always subscribes itself (connId is ignored); a SERVER names whom. */
    uint32_t target = r->conn_type == CQ_CONN_CLIENT ? r->conn_id : m->connid;
    if (!target) {
        CQ_MSG_LOG(c, "sub", "conn %u: SUB_TO_CHANNEL %u without connId", r->conn_id, ch->id);
        return;
    }
    /* The ACL guards only acting on another connection: subscribing oneself is allowed whenever
     * the FSM let SUB through (channeld). */
    if (target != r->conn_id &&
        !cq__acl_allows(ch, CQ_ACCESS_SUB, r->conn_id, atomic_load(&c->sh->global_owner))) {
        CQ_MSG_LOG(c, "sub", "conn %u: subscribing conn %u to channel %u denied by the ACL",
                   r->conn_id, target, ch->id);
        return;
    }
    cq_sub_t *s = cq_map_get(&ch->subs, target);
    if (s) {
        resubscribe(c, ch, s, r, m->suboptions);
        return;
    }
    /* The directory counts it against the subscriber's limit and supplies its type. */
    int rc = cq__sub_add(c, ch, target, target == r->conn_id ? r->conn_type : 0, m->suboptions, &s);
    if (rc == CQ_ENOCONN && !r->bounced && cq__node_bounce(c, r, target))
        return; /* comes back once its node vouched for it */
    if (rc < 0) {
        cq__sub_refused(c, r, target, ch->id, rc);
        return;
    }
    cq__sub_result(c, ch, s, r);
}

void cq__handle_unsub(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    Channeldpb__UnsubscribedFromChannelMessage *m = cq__req_body(c, r);
    if (!m)
        return;
    /* Unlike SUB, connId is read from clients too (channeld): a client naming another
     * connection needs the Unsub ACL like anyone. */
    uint32_t target = m->connid;
    if (target != r->conn_id &&
        !cq__acl_allows(ch, CQ_ACCESS_UNSUB, r->conn_id, atomic_load(&c->sh->global_owner))) {
        CQ_MSG_LOG(c, "sub", "conn %u: unsubscribing conn %u from channel %u denied by the ACL",
                   r->conn_id, target, ch->id);
        return;
    }
    cq_sub_t *s = cq_map_get(&ch->subs, target);
    if (!s) {
        CQ_MSG_LOG(c, "sub", "conn %u: conn %u is not subscribed to channel %u", r->conn_id, target,
                   ch->id);
        return;
    }
    uint8_t type = s->conn_type;
    cq__sub_remove(c, s, true);
    unsub_result(c, ch, r, target, type);
    if (ch->owner == target) { /* channeld: an owner that unsubscribes gives the channel up */
        CQ_MSG_LOG(c, "sub", "channel %u lost its owner conn %u (unsubscribed)", ch->id, target);
        cq__chan_set_owner(c, ch, 0, 0);
        cq__connref_gc(c, target);
    }
}

/* ---- a connection closed ---------------------------------------------------------------- */

/* The owner closed. GLOBAL is never removed (§2.2): it waits, unpossessed, for the next
 * CREATE_CHANNEL{GLOBAL}. Nor is a spatial cell: the grid is fixed, and the server that takes the
 * slot over takes its cells over with their subscribers (§8.2 fix). Other channels follow their
 * type's RemoveChannelAfterOwnerRemoved. */
static void owner_gone(cq_core_t *c, cq_chan_t *ch)
{
    uint32_t owner = ch->owner;
    cq__chan_set_owner(c, ch, 0, 0);
    if (ch->id == 0) {
        CQ_INFO("chan", "GLOBAL unpossessed: owner conn %u left", owner);
        return;
    }
    if (ch->settings->remove_after_owner_removed && !cq__spatial_is_cell(c, ch)) {
        CQ_INFO("chan", "channel %u: owner conn %u left; removing (RemoveChannelAfterOwnerRemoved)",
                ch->id, owner);
        cq__chan_remove(c, ch, 0);
    } else {
        CQ_INFO("chan", "channel %u: owner conn %u left", ch->id, owner);
    }
}

/* On every worker (XM_CONN_GONE; directly on the connection's own): what this worker holds of
 * the connection goes. A lost recoverable server (pit set) keeps it instead: recover.c moves
 * its subscriptions and ownerships aside for a successor with the same PIT. Subscriptions are
 * removed with dir_update false: the close took the directory entry and its count. */
void cq__conn_gone(cq_core_t *c, uint32_t conn_id, uint8_t conn_type, const char *pit,
                   bool owned_global)
{
    (void)conn_type;
    cq__place_forget(c, conn_id);
    cq__spatial_conn_gone(c, conn_id, pit != NULL);
    if (pit) {
        cq__recover_store(c, conn_id, pit, owned_global);
        return;
    }
    cq_connref_t *ref = cq_map_get(&c->connrefs, conn_id);
    if (!ref)
        return;
    /* Subscriptions first: owners hear about each lost subscriber. */
    while (ref && !cq_list_empty(&ref->subs)) {
        cq_sub_t *s = cq_container_of(ref->subs.next, cq_sub_t, by_conn);
        cq_chan_t *ch = s->chan;
        uint8_t type = s->conn_type;
        cq__sub_remove(c, s, false);
        if (ch->owner && ch->owner != conn_id)
            unsub_result(c, ch, NULL, conn_id, type);
        ref = cq_map_get(&c->connrefs, conn_id);
    }
    while (ref && !cq_list_empty(&ref->owned)) {
        owner_gone(c, cq_container_of(ref->owned.next, cq_chan_t, owner_node));
        ref = cq_map_get(&c->connrefs, conn_id);
    }
    cq__connref_gc(c, conn_id);
}
