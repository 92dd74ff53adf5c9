/* recover.c - server connection recovery (channeld -scr, reference §3.7).
 *
 * Recovery is per worker: each keeps what a lost server held on its own channels (c->recsubs)
 * and restores it itself. Only the handles (PIT -> old id) are shared, under dir_lock, because a
 * successor's claim must check and take the old id in the directory in one critical section.
 *
 * A SERVER connection that drops unexpectedly leaves a handle (PIT -> old id) in the shared
 * state; each worker keeps what that connection held there (subscriptions with options, and
 * ownerships) and tells subscribers CHANNEL_OWNER_LOST. A new server connection that
 * authenticates with the same PIT takes over the old id (AuthResult.shouldRecover), regains the
 * ownerships and subscriptions (skipFirstFanOut, no SUB result), receives
 * RECOVERY_CHANNEL_DATA per channel and RECOVERY_END 1 s later; subscribers hear
 * CHANNEL_OWNER_RECOVERED 1 s after the recovery. Unclaimed state expires after
 * server-conn-recover-timeout-ms, and then channels that remove themselves without an owner
 * are removed. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

/* channeld's ChannelDataRecoveryTimeout: RECOVERY_END and CHANNEL_OWNER_RECOVERED follow the
 * recovery by this much (§3.7). */
#define RECOVERY_DELAY_MS 1000

/* ---- timed events ----------------------------------------------------------------------- */

/* A few at a time (one per recovery and recovered channel), so an unsorted array scanned by the
 * 100 ms tick is enough; they fire with the tick's granularity, as channeld's once-a-second loop
 * fires RECOVERY_END. */
void cq__timed_add(cq_core_t *c, uint64_t due_ms, uint32_t kind, uint32_t conn_id, uint32_t chan_id)
{
    if (c->n_timed == c->cap_timed) {
        uint32_t ncap = c->cap_timed ? c->cap_timed * 2 : 8;
        cq_timed_t *n = cq_realloc(c->timed, ncap * sizeof(*n));
        if (!n)
            return;
        c->timed = n;
        c->cap_timed = ncap;
    }
    c->timed[c->n_timed++] = (cq_timed_t){due_ms, kind, conn_id, chan_id};
}

/* OWNER_LOST / OWNER_RECOVERED: no body, to every subscriber but the owner (channeld). */
static void broadcast_empty(cq_core_t *c, cq_chan_t *ch, uint32_t msg_type)
{
    cq_buf_t *rec = cq_wire_record_msg(ch->id, 0, 0, msg_type, NULL);
    if (rec) {
        cq__fanout(c, ch, rec, 0, BC_ALL | BC_BUT_OWNER);
        cq_buf_unref(rec);
    }
}

/* RECOVERY_END, a second after the recovery, unless GLOBAL's data is still to come: then when
 * it came (cq__recover_global_sent), or at the latest when GLOBAL's new home should be known. */
static void recovery_end(cq_core_t *c, const cq_timed_t *t)
{
    cq_conn_t *conn = cq_map_get(&c->conns, t->conn_id);
    if (conn && conn->rec_global && t->kind == T_RECOVERY_END) {
        conn->rec_end_due = 1;
        return;
    }
    if (conn && conn->rec_global) {
        CQ_WARN("recover", "conn %u: GLOBAL's recovery data did not come; RECOVERY_END without it",
                conn->id);
        conn->rec_global = conn->rec_end_due = 0;
    } else if (t->kind == T_RECOVERY_END_LATEST) {
        return; /* it came */
    }
    cq__notify(c, t->conn_id, 0, MT_RECOVERY_END, NULL);
}

void cq__recover_global_sent(cq_core_t *c, cq_conn_t *conn)
{
    if (!conn->rec_global)
        return;
    conn->rec_global = 0;
    if (conn->rec_end_due) {
        conn->rec_end_due = 0;
        cq__notify(c, conn->id, 0, MT_RECOVERY_END, NULL);
    }
}

static void timed_fire(cq_core_t *c, const cq_timed_t *t)
{
    if (t->kind == T_RECOVERY_END || t->kind == T_RECOVERY_END_LATEST) {
        recovery_end(c, t);
        return;
    }
    /* Only if the successor still owns the channel a second later. */
    cq_chan_t *ch = cq__chan_get(c, t->chan_id);
    if (ch && ch->owner == t->conn_id)
        broadcast_empty(c, ch, MT_CHANNEL_OWNER_RECOVERED);
}

static void timed_tick(cq_core_t *c, uint64_t now)
{
    for (uint32_t i = 0; i < c->n_timed;) {
        if (c->timed[i].due_ms > now) {
            i++;
            continue;
        }
        cq_timed_t t = c->timed[i];
        c->timed[i] = c->timed[--c->n_timed];
        timed_fire(c, &t);
    }
}

/* ---- shared handles --------------------------------------------------------------------- */

void cq__recover_handle_locked(cq_shared_t *sh, const char *pit, uint32_t old_id, uint64_t now)
{
    cq_recov_handle_t *h = cq_calloc(1, sizeof(*h));
    char *p = cq_strdup(pit);
    if (!h || !p) {
        cq_free(h);
        cq_free(p);
        return;
    }
    h->pit = p;
    h->old_id = old_id;
    h->since_ms = now;
    h->next = sh->recov;
    sh->recov = h;
}

static void handle_add(cq_shared_t *sh, const char *pit, uint32_t old_id, uint64_t now)
{
    pthread_mutex_lock(&sh->dir_lock);
    cq__recover_handle_locked(sh, pit, old_id, now);
    pthread_mutex_unlock(&sh->dir_lock);
    /* Once per lost connection: from here a successor with this pit gets shouldRecover. */
    CQ_INFO("recover", "conn %u lost; recoverable by pit \"%s\"", old_id, pit);
}

void cq__recov_handles_free(cq_shared_t *sh)
{
    while (sh->recov) {
        cq_recov_handle_t *h = sh->recov;
        sh->recov = h->next;
        cq_free(h->pit);
        cq_free(h);
    }
}

/* On the directory worker. An expired handle also frees the spatial server slot its
 * connection kept while it was recoverable (released after dir_lock: a leaf lock). A timeout of
 * 0 waits for ever (channeld's -scrt 0). At most 16 expire per tick, so the ids fit on the
 * stack; the rest go at the next tick. */
static void handles_expire(cq_core_t *c, uint64_t now)
{
    cq_shared_t *sh = c->sh;
    uint32_t to = sh->o.server_recover_timeout_ms;
    if (!to)
        return;
    uint32_t gone[16], n_gone = 0;
    pthread_mutex_lock(&sh->dir_lock);
    for (cq_recov_handle_t **pp = &sh->recov; *pp;) {
        cq_recov_handle_t *h = *pp;
        if (now - h->since_ms < to || n_gone == 16) { /* the rest expire on the next tick */
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        gone[n_gone++] = h->old_id;
        cq_free(h->pit);
        cq_free(h);
    }
    pthread_mutex_unlock(&sh->dir_lock);
    for (uint32_t i = 0; i < n_gone; i++)
        cq__spatial_release(c, gone[i]);
}

/* ---- a recoverable server dropped ------------------------------------------------------- */

static cq_recsub_t *recsub_new(cq_core_t *c, const char *pit, uint32_t chan_id)
{
    cq_recsub_t *r = cq_calloc(1, sizeof(*r));
    if (!r || !(r->pit = cq_strdup(pit))) {
        cq_free(r);
        return NULL;
    }
    r->chan_id = chan_id;
    r->since_ms = c->now_ms;
    cq_list_insert_tail(&c->recsubs, &r->node);
    return r;
}

static void recsub_free(cq_recsub_t *r)
{
    cq_list_remove(&r->node);
    cq__subopts_done(&r->opts);
    cq_free(r->pit);
    cq_free(r);
}

static cq_recsub_t *recsub_find(cq_core_t *c, const char *pit, uint32_t chan_id)
{
    cq_list_t *n;
    cq_list_foreach(n, &c->recsubs)
    {
        cq_recsub_t *r = cq_container_of(n, cq_recsub_t, node);
        if (r->chan_id == chan_id && strcmp(r->pit, pit) == 0)
            return r;
    }
    return NULL;
}

/* At the CONN_GONE of a lost recoverable server, on every worker: what the connection held here
 * is set aside under its PIT. Its subscriptions go like any other (their LSUB_DELs included),
 * keeping their options and time for the successor; the channels it owned stay, ownerless, and
 * are not removed before the recovery times out, whatever their settings say (channeld §3.7): a
 * client's user-space messages to them are dropped meanwhile, for want of an owner. The shared
 * handle is added once, by the directory worker. */
void cq__recover_store(cq_core_t *c, uint32_t conn_id, const char *pit, bool owned_global)
{
    cq_connref_t *ref = cq_map_get(&c->connrefs, conn_id);
    /* another node's: the relay thread added the handle as the directory forgot it (node.c) */
    if (c->index == cq__place_local_dir_worker(c) &&
        cq__id_conn_node(&c->sh->ids, conn_id, NULL) == c->sh->node)
        handle_add(c->sh, pit, conn_id, c->now_ms);
    while (ref && !cq_list_empty(&ref->subs)) {
        cq_sub_t *s = cq_container_of(ref->subs.next, cq_sub_t, by_conn);
        cq_recsub_t *r = recsub_new(c, pit, s->chan->id);
        if (r) {
            r->was_subscribed = true;
            r->opts = s->opts; /* moved */
            r->sub_time_ms = s->sub_time_ms;
            memset(&s->opts, 0, sizeof(s->opts));
        }
        cq__sub_remove(c, s, false);
        ref = cq_map_get(&c->connrefs, conn_id);
    }
    while (ref && !cq_list_empty(&ref->owned)) {
        cq_chan_t *ch = cq_container_of(ref->owned.next, cq_chan_t, owner_node);
        cq_recsub_t *r = recsub_find(c, pit, ch->id);
        if (!r)
            r = recsub_new(c, pit, ch->id);
        if (r)
            r->was_owner = true;
        if (ch->settings->send_owner_lost_and_recovered)
            broadcast_empty(c, ch, MT_CHANNEL_OWNER_LOST);
        CQ_INFO("recover", "channel %u: owner conn %u lost; recoverable by pit \"%s\"", ch->id,
                conn_id, pit);
        cq__chan_set_owner(c, ch, 0, 0);
        ref = cq_map_get(&c->connrefs, conn_id);
    }
    /* GLOBAL's home died with the owner's node: its possession is kept here, where it counts
     * if GLOBAL's new home is this node (recover_one). */
    if (owned_global && c->index == cq__place_local_dir_worker(c) &&
        !recsub_find(c, pit, CQ_CHAN_ID_GLOBAL)) {
        cq_recsub_t *r = recsub_new(c, pit, CQ_CHAN_ID_GLOBAL);
        if (r)
            r->was_owner = true;
    }
    cq__connref_gc(c, conn_id);
}

/* ---- a successor authenticated ---------------------------------------------------------- */

uint32_t cq__recover_pending(cq_shared_t *sh, uint8_t type, const char *pit)
{
    if (!sh->node || !sh->o.server_recoverable || type != CQ_CONN_SERVER || !pit || !*pit)
        return 0;
    uint32_t found = 0, it = 0, id;
    void *v;
    pthread_mutex_lock(&sh->dir_lock);
    while (!found && cq_map_next(&sh->dir, &it, &id, &v)) {
        const cq_dir_ent_t *e = v;
        if (e->remote && e->pit && strcmp(e->pit, pit) == 0)
            found = id;
    }
    pthread_mutex_unlock(&sh->dir_lock);
    return found;
}

/* Under dir_lock: claims the handle for pit if its old id is free. The old id must be free, as
 * in channeld: if it was allocated again meanwhile, the successor keeps its new id and recovers
 * nothing. An old id of this node is taken over: the successor's directory entry moves to it.
 * One of another relay node stays that node's (ids carry their node): the successor keeps its
 * own id and recovers under it (*ret_moved). */
static uint32_t claim(cq_shared_t *sh, const char *pit, uint32_t new_id, bool *ret_moved)
{
    uint32_t old = 0;
    pthread_mutex_lock(&sh->dir_lock);
    for (cq_recov_handle_t **pp = &sh->recov; *pp; pp = &(*pp)->next) {
        cq_recov_handle_t *h = *pp;
        if (strcmp(h->pit, pit) != 0 || cq_map_get(&sh->dir, h->old_id))
            continue;
        *ret_moved = sh->node && cq__id_conn_node(&sh->ids, h->old_id, NULL) != sh->node;
        cq_dir_ent_t *e = cq_map_get(&sh->dir, new_id);
        if (*ret_moved)
            e = NULL; /* nothing to re-key */
        else if (!e || cq_map_put(&sh->dir, h->old_id, e) < 0)
            break;
        else
            cq_map_del(&sh->dir, new_id);
        old = h->old_id;
        *pp = h->next;
        cq_free(h->pit);
        cq_free(h);
        break;
    }
    pthread_mutex_unlock(&sh->dir_lock);
    return old;
}

/* At a server's first successful AUTH (auth.c), before its AuthResult is built: the result
 * carries the old id and shouldRecover. */
bool cq__recover_takeover(cq_core_t *c, cq_conn_t *conn, uint32_t *ret_old)
{
    if (!c->sh->o.server_recoverable || conn->type != CQ_CONN_SERVER || !conn->pit)
        return false;
    bool moved = false;
    uint32_t old = claim(c->sh, conn->pit, conn->id, &moved);
    if (!old)
        return false;
    *ret_old = old;
    if (moved) {
        CQ_INFO("recover", "conn %u recovers conn %u of node %u (pit \"%s\") under its own id",
                conn->id, old, cq__id_conn_node(&c->sh->ids, old, NULL), conn->pit);
        return true;
    }
    CQ_INFO("recover", "conn %u recovers conn %u (pit \"%s\")", conn->id, old, conn->pit);
    /* The successor becomes the old id: channels and subscribers everywhere know it by that. */
    cq_map_del(&c->conns, conn->id);
    conn->id = old;
    cq_map_put(&c->conns, old, conn);
    cq__place_adopt_conn(c, old);
    return true;
}

/* GLOBAL's owner as the other nodes last heard it from GLOBAL's home, which is gone if the
 * owner has not been reset since (GLOBAL's home resets it when the owner is lost). */
static bool global_possessed(cq_shared_t *sh, uint32_t old_id)
{
    return sh->node && (atomic_load(&sh->global_owner) == old_id ||
                        atomic_load(&sh->global_owner_was) == old_id);
}

/* RECOVERY_CHANNEL_DATA (20), one per channel the successor gets back: the channel's full data
 * and the restored options; subTime is the original subscription's, in unix nanoseconds. */
static void send_recovery_data(cq_core_t *c, cq_chan_t *ch, const cq_sub_t *s, uint32_t conn_id,
                               uint64_t sub_time_ms)
{
    Channeldpb__ChannelDataRecoveryMessage m = CHANNELDPB__CHANNEL_DATA_RECOVERY_MESSAGE__INIT;
    Channeldpb__ChannelSubscriptionOptions o;
    m.channelid = ch->id;
    m.channeltype = (Channeldpb__ChannelType)ch->type;
    m.metadata = ch->metadata;
    m.ownerconnid = ch->owner;
    m.subtime = (int64_t)sub_time_ms * 1000000 + c->sh->unix_offset_ns;
    if (s) {
        cq__subopts_to_pb(&s->opts, &o);
        m.suboptions = &o;
    }
    Google__Protobuf__Any data;
    if (cq__data_any(ch, &data))
        m.channeldata = &data;
    if (ch->id != CQ_CHAN_ID_GLOBAL) {
        cq__notify(c, conn_id, ch->id, MT_RECOVERY_CHANNEL_DATA, &m.base);
        return;
    }
    cq_buf_t *b = cq_wire_record_msg(ch->id, 0, 0, MT_RECOVERY_CHANNEL_DATA, &m.base);
    if (b)
        cq__send_global_recovery(c, conn_id, b);
    cq_buf_unref(b);
}

/* Ownership comes back only if nobody took the channel meanwhile. The subscription comes back
 * with its old options, with skipFirstFanOut and without a SUB result (channeld): the recovery
 * data that follows carries the full state. Returns false when r is kept: GLOBAL counts only at
 * its home, and when the home died with the owner, this node may learn that it is the new home
 * just after the successor's RECOVER came (two ZooKeeper events): GLOBAL waits for that, with
 * its successor, until the handle's timeout. */
static bool recover_one(cq_core_t *c, cq_recsub_t *r, uint32_t conn_id)
{
    cq_chan_t *ch = cq__chan_get(c, r->chan_id);
    uint32_t home = atomic_load_explicit(&c->sh->global_home, memory_order_relaxed);
    if (ch && ch->id == CQ_CHAN_ID_GLOBAL && home && home != c->sh->node) {
        r->successor = conn_id;
        return false;
    }
    if (!ch)
        return true;
    if (r->was_owner && !ch->owner) {
        cq__chan_set_owner(c, ch, conn_id, CQ_CONN_SERVER);
        if (ch->settings->send_owner_lost_and_recovered)
            cq__timed_add(c, c->now_ms + RECOVERY_DELAY_MS, T_OWNER_RECOVERED, conn_id, ch->id);
    }
    cq_sub_t *s = cq_map_get(&ch->subs, conn_id);
    if (r->was_subscribed && !s) {
        r->opts.skip_first = true;
        if (cq__sub_add_opts(c, ch, conn_id, CQ_CONN_SERVER, &r->opts, r->sub_time_ms, &s) == 0)
            memset(&r->opts, 0, sizeof(r->opts)); /* the subscription took the masks */
        else
            s = NULL;
    }
    send_recovery_data(c, ch, s, conn_id, r->sub_time_ms);
    return true;
}

void cq__recover_rehome(cq_core_t *c)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->recsubs)
    {
        cq_recsub_t *r = cq_container_of(n, cq_recsub_t, node);
        if (r->chan_id == CQ_CHAN_ID_GLOBAL && r->successor && recover_one(c, r, r->successor))
            recsub_free(r);
    }
}

/* The handle for pit goes (on the nodes where the successor did not claim it). */
static void handle_drop(cq_shared_t *sh, const char *pit)
{
    pthread_mutex_lock(&sh->dir_lock);
    for (cq_recov_handle_t **pp = &sh->recov; *pp; pp = &(*pp)->next) {
        cq_recov_handle_t *h = *pp;
        if (strcmp(h->pit, pit) == 0) {
            *pp = h->next;
            cq_free(h->pit);
            cq_free(h);
            break;
        }
    }
    pthread_mutex_unlock(&sh->dir_lock);
}

/* After the AuthResult, on the successor's worker: every worker of every node restores what it
 * kept for pit, to conn_id (old_id's successor), and RECOVERY_END is timed. The successor's own
 * worker restores through its inbox too, like the others: a CONN_GONE of the predecessor that
 * is still queued there (it was queued before the handle could be claimed) is handled first.
 * The RECOVERs follow the ROUTEs the adoption posted (place.c) and, to the other nodes, the
 * successor's announcement (auth.c). */
void cq__recover_start(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit)
{
    cq_conn_t *conn = cq_map_get(&c->conns, conn_id);
    /* Its predecessor possessed GLOBAL at a home that died with it: GLOBAL's data comes from the
     * new home once ZooKeeper has chosen it, which can take longer than a second. */
    if (conn && global_possessed(c->sh, old_id)) {
        conn->rec_global = 1;
        uint32_t wait = c->sh->o.relay_loss_ms ? c->sh->o.relay_loss_ms : 3000;
        cq__timed_add(c, c->now_ms + RECOVERY_DELAY_MS + wait, T_RECOVERY_END_LATEST, conn_id, 0);
    }
    cq__xmsg_post_others(c, XM_RECOVER, conn_id, 0, old_id, pit);
    size_t len = strlen(pit) + 1;
    cq_xmsg_t *m = cq__xmsg_new(XM_RECOVER, len);
    if (m) {
        m->conn_id = conn_id;
        m->u1 = old_id;
        memcpy(m->body, pit, len);
        cq__xmsg_post(c, c->index, m);
    }
    cq__node_recover(c, conn_id, old_id, pit);
    cq__timed_add(c, c->now_ms + RECOVERY_DELAY_MS, T_RECOVERY_END, conn_id, 0);
}

/* XM_RECOVER, on every worker of every node: what this worker kept for pit is conn_id's. A
 * successor on another node than old_id's takes old_id's server slot. */
void cq__recover_apply(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit)
{
    if (c->index == cq__place_local_dir_worker(c) &&
        cq__id_conn_node(&c->sh->ids, conn_id, NULL) != c->sh->node)
        handle_drop(c->sh, pit);
    if (old_id && old_id != conn_id)
        cq__spatial_rekey(c, old_id, conn_id);
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->recsubs)
    {
        cq_recsub_t *r = cq_container_of(n, cq_recsub_t, node);
        if (strcmp(r->pit, pit) == 0 && recover_one(c, r, conn_id))
            recsub_free(r);
    }
}

/* ---- expiry ----------------------------------------------------------------------------- */

/* Unclaimed state expires after server-conn-recover-timeout-ms (0: never). Only then are the
 * channels it owned removed, if they remove themselves without an owner and are still
 * ownerless: the grace period is what recovery is for. GLOBAL and the cells are never removed. */
void cq__recover_tick(cq_core_t *c, uint64_t now_ms)
{
    timed_tick(c, now_ms);
    uint32_t to = c->sh->o.server_recover_timeout_ms;
    if (c->index == cq__place_local_dir_worker(c))
        handles_expire(c, now_ms);
    if (!to)
        return;
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->recsubs)
    {
        cq_recsub_t *r = cq_container_of(n, cq_recsub_t, node);
        if (now_ms - r->since_ms < to)
            continue;
        cq_chan_t *ch = cq__chan_get(c, r->chan_id);
        bool remove = r->was_owner && ch && !ch->owner && ch->id != 0 &&
                      ch->settings->remove_after_owner_removed && !cq__spatial_is_cell(c, ch);
        recsub_free(r);
        if (remove) {
            CQ_INFO("recover", "channel %u: owner not recovered in time; removing", ch->id);
            cq__chan_remove(c, ch, 0);
        }
    }
}

void cq__recover_free_all(cq_core_t *c)
{
    while (!cq_list_empty(&c->recsubs))
        recsub_free(cq_container_of(c->recsubs.next, cq_recsub_t, node));
    cq_free(c->timed);
    c->timed = NULL;
    c->n_timed = c->cap_timed = 0;
}
