/* bridgemain.c - composes the bridge: the MQ engine's sink (its thread) runs each committed
 * message of a bound topic through the bridge engine (src/bridge) and hands each output to the
 * core (cq_shared_inject_*), which fans it out on the workers. The engine and the bridge live
 * on the MQ loop's thread; only the counters below are read from elsewhere (/metrics). */
#include "bridgemain.h"

#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_file.h"
#include "cq_log.h"
#include "cq_mpsc.h"
#include "cq_mqfollow.h"
#include "cq_resume.h"
#include "cq_route.h"
#include "cq_util.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* (producer id, seq) pairs remembered per topic: a producer's retry stored on two shards is
 * delivered once if its second copy comes within this many events (doc/bridge.md). */
#define DEDUP_WINDOW 4096
/* Resume requests queued for the MQ thread at most: more are answered "busy" (the 10,000
 * players of a balancer reload fit). */
#define RESUME_QUEUE_MAX 65536

/* A worker's ask (cq_core_resume_fn), queued for the MQ thread. */
typedef struct ask {
    cq_mpsc_node_t node;
    int what;
    uint32_t conn_id;
    size_t len;
    uint8_t body[];
} ask_t;

struct cq_main_bridge {
    cq_bridge_t *br;             /* the MQ thread's */
    _Atomic(cq_bridge_t *) next; /* a reload's, until the MQ thread takes it */
    cq_bridge_stats_t base;      /* the counters of the bridges reloads replaced */
    cq_shared_t *sh;
    atomic_bool stopped;
    uint64_t log_ms; /* the MQ thread's last warning: one a second at most */
    cq_bridge_out_t out[CQ_BRIDGE_BINDINGS_MAX]; /* the MQ thread's, reused by every event */
    /* /metrics: copies of the engine's counters, and the core's refusals */
    _Atomic uint64_t events, outputs, duplicates, unroutable, refused;
    /* Resume (cq_resume.h): the engine, the MQ thread's; the asks the workers queue for it. */
    cq_resume_t *rs;
    cq_mpsc_t asks;
    _Atomic int64_t nasks;
    /* Held while a worker queues an ask and pokes the MQ engine, and while stop sets stopped:
     * a worker never pokes an engine that stop_mq has begun to free. Asks are rare (one per
     * resume and chunk), so the lock is off every hot path. */
    pthread_mutex_t ask_mu;
    _Atomic(cq_mqsrv_t *) mq; /* set once the MQ engine exists (cq_main_bridge_attach) */
    uint64_t tick_ms;
    _Atomic uint64_t rs_requests, rs_recovered, rs_not_recovered, rs_refused, rs_ring, rs_store,
        rs_reads, rs_idle;
    _Atomic uint32_t rs_sessions, rs_sends_out, rs_send_waiting;
    _Atomic uint64_t rs_credits_lost;
    /* Chunks the workers applied (CQ_RESUME_ASK_APPLIED), and how many the engine heard of. */
    _Atomic uint64_t applied;
    uint64_t applied_seen;
    /* Route bindings' catch-up (cq_route.h), the MQ thread's; its chunks' count as applied's;
     * a copy of its counters for /metrics under st_mu. */
    cq_route_t *rt;
    _Atomic uint64_t rt_applied;
    uint64_t rt_applied_seen;
    pthread_mutex_t st_mu;
    cq_route_stats_t rt_st;
    /* The "topic" channels (MQ thread): per topic, its channel once the core made it; kept
     * across reloads, as the channels are. tchans_due: some are still to be asked for. */
    struct tchan {
        char topic[65];
        uint32_t id;
        bool asked;
    } tchans[CQ_BRIDGE_BINDINGS_MAX];
    int ntchans;
    bool tchans_due;
    uint32_t tchan_home;    /* a relay node: GLOBAL's home when the "topic" channels were asked */
    atomic_bool attached;   /* the core's hook is set: its answers reach the MQ thread */
    const cq_config_t *cfg; /* the process's, for check() */
    atomic_bool managed;    /* the manager's bindings are in force: SIGHUP leaves them */
    /* The shards this node follows (--bridge-follow; NULL: none), on the MQ loop like the
     * engine. fw_due: the bound topics changed, the follower takes them at the next sink_run
     * (never from inside its own callback). A copy of its counters for /metrics under st_mu. */
    cq_mqfollow_t *fw;
    bool fw_due;
    cq_mqfollow_stats_t fw_st;
    cq_mqfollow_link_stats_t fw_links[CQ_MQFOLLOW_LINKS_MAX];
    size_t fw_nlinks;
    uint32_t shard; /* this node's own (--shard) */
    bool relay;     /* a relay node: only the followed shards are bridged */
};

/* Route reads share sink_rows with the resume's: their tags have this bit. */
#define ROUTE_TAG (1ull << 63)

static struct tchan *tchan_of(cq_main_bridge_t *b, const char *topic, bool add)
{
    for (int i = 0; i < b->ntchans; i++)
        if (strcasecmp(b->tchans[i].topic, topic) == 0)
            return &b->tchans[i];
    if (!add || b->ntchans == CQ_BRIDGE_BINDINGS_MAX)
        return NULL;
    struct tchan *t = &b->tchans[b->ntchans++];
    snprintf(t->topic, sizeof(t->topic), "%s", topic);
    t->id = 0;
    t->asked = false;
    return t;
}

/* The channel a broadcast binding delivers to: GLOBAL, or its "topic" channel (0 as well
 * until the core made it: *ok false then). */
static uint32_t binding_chan(cq_main_bridge_t *b, const cq_binding_t *bd, bool *ok)
{
    *ok = true;
    if (strcmp(bd->channel, "topic") != 0)
        return 0;
    struct tchan *t = tchan_of(b, bd->topic, false);
    *ok = t && t->id;
    return t ? t->id : 0;
}

static void declare_resume(cq_main_bridge_t *b, const cq_binding_t *bd)
{
    bool ok;
    uint32_t ch = binding_chan(b, bd, &ok);
    if (!ok)
        return; /* declared when its channel is made (topic_chan_made) */
    int r = cq_resume_topic(b->rs, bd->topic, ch, bd->msg_type);
    if (r < 0)
        CQ_WARN("bridge", "topic %s: no resume on channel %u: %s", bd->topic, ch,
                r == -EEXIST ? "the topic is bound to another channel too" : cq_strerror(r));
}

/* Whether logins get a catch-up (and their routed events are held meanwhile): a route binding
 * is in force. Its positions are in the shards' stores (this node's own, and the followed
 * shards' through the follower), so a relay node's players get theirs too. */
static bool route_on(const cq_main_bridge_t *b)
{
    return cq_route_active(b->rt);
}

/* The resume and route engines' topics, and the "topic" channels to ask for. */
static void declare_topics(cq_main_bridge_t *b)
{
    cq_resume_topics_clear(b->rs);
    cq_route_topics_clear(b->rt);
    const cq_bindings_t *bs = cq_bridge_bindings(b->br);
    for (size_t i = 0; i < bs->n; i++) {
        const cq_binding_t *bd = &bs->v[i];
        if (bd->kind == CQ_BIND_ROUTE) {
            cq_route_topic(b->rt, bd->topic, bd->key, bd->msg_type);
            continue;
        }
        if (strcmp(bd->channel, "topic") == 0) {
            struct tchan *t = tchan_of(b, bd->topic, true);
            if (t && !t->id)
                b->tchans_due = true;
        }
        declare_resume(b, bd);
    }
    if (b->sh)
        cq_shared_set_route(b->sh, route_on(b));
}

/* The MQ thread takes a reloaded bridge (its dedup window starts empty). */
static void take_next(cq_main_bridge_t *b)
{
    cq_bridge_t *nb = atomic_exchange(&b->next, NULL);
    if (!nb)
        return;
    cq_bridge_stats_t st;
    cq_bridge_stats(b->br, &st);
    b->base.events += st.events;
    b->base.outputs += st.outputs;
    b->base.duplicates += st.duplicates;
    b->base.unroutable += st.unroutable;
    cq_bridge_free(b->br);
    b->br = nb;
    declare_topics(b); /* the sessions in progress end (a hole their clients see) */
    b->fw_due = b->fw != NULL;
}

static bool sink_wants(void *ud, const char *topic)
{
    cq_main_bridge_t *b = ud;
    take_next(b);
    return !b->relay && cq_bridge_watches(b->br, topic); /* a relay node: check() */
}

/* Logs once a second at most: a bad event stream must not flood the log. */
static bool log_now(cq_main_bridge_t *b)
{
    uint64_t now = cq_clock_mono_ms();
    if (b->log_ms && now - b->log_ms < 1000)
        return false;
    b->log_ms = now;
    return true;
}

/* One output to the core: a broadcast binding's channel (GLOBAL: "topic" channels are refused
 * at load), or the player's connections. */
static void deliver(cq_main_bridge_t *b, const cq_bridge_out_t *o)
{
    bool ok = true;
    uint32_t ch = o->b->kind == CQ_BIND_BROADCAST ? binding_chan(b, o->b, &ok) : 0;
    int r = !ok ? -EAGAIN /* its channel is not made yet: nobody can be on it */
            : o->b->kind == CQ_BIND_ROUTE
                ? cq_shared_inject_route(b->sh, o->key, o->b->msg_type, o->event)
                : cq_shared_inject_broadcast(b->sh, ch, o->b->msg_type, o->event);
    if (r >= 0)
        return;
    atomic_fetch_add(&b->refused, 1);
    if (log_now(b))
        CQ_WARN("bridge", "topic %s: event not delivered: %s", o->b->topic, cq_strerror(r));
}

/* One committed message of a bound topic, from this node's store (the MQ engine's sink) or
 * from a followed shard (the follower): deduplicated across shards by the bridge engine, then
 * delivered. Every shard feeds the resume's and the route catch-up's rings (a stream per topic
 * and shard). */
static void on_event(cq_main_bridge_t *b, const cq_mqsrv_event_t *ev)
{
    char pid[24] = "";
    if (ev->producer_id)
        snprintf(pid, sizeof(pid), "%" PRIu64, ev->producer_id);
    cq_topic_event_t te = {ev->topic,   ev->shard, ev->epoch, ev->offset,  ev->prev_offset,
                           ev->time_ms, pid,       ev->seq,   ev->content, ev->len};
    cq_bridge_out_t *out = b->out;
    int n = cq_bridge_event(b->br, &te, out, CQ_BRIDGE_BINDINGS_MAX);
    if (n < 0 && log_now(b))
        CQ_WARN("bridge", "topic %s offset %" PRIu64 ": %s", ev->topic, ev->offset, cq_strerror(n));
    bool rung = false;
    for (int i = 0; i < n; i++) {
        deliver(b, &out[i]);
        if (out[i].b->kind == CQ_BIND_BROADCAST && !rung) { /* one encode for all */
            cq_resume_live(b->rs, ev->topic, ev->shard, ev->epoch, ev->offset, out[i].prev_offset,
                           out[i].event);
            rung = true;
        } else if (out[i].b->kind == CQ_BIND_ROUTE) {
            cq_route_live(b->rt, ev->topic, ev->shard, ev->epoch, ev->offset, out[i].prev_offset,
                          out[i].b->key, out[i].key, out[i].event);
        }
        cq_buf_unref(out[i].event);
    }
    cq_bridge_stats_t st;
    cq_bridge_stats(b->br, &st);
    atomic_store(&b->events, b->base.events + st.events);
    atomic_store(&b->outputs, b->base.outputs + st.outputs);
    atomic_store(&b->duplicates, b->base.duplicates + st.duplicates);
    atomic_store(&b->unroutable, b->base.unroutable + st.unroutable);
}

static void sink_event(void *ud, const cq_mqsrv_event_t *ev)
{
    cq_main_bridge_t *b = ud;
    if (atomic_load(&b->stopped))
        return;
    take_next(b);
    on_event(b, ev);
}

/* A followed shard's message (the MQ loop, inside the follower: no reload is taken here). */
static void follow_event(void *ud, const cq_mqsrv_event_t *ev)
{
    cq_main_bridge_t *b = ud;
    if (!atomic_load(&b->stopped))
        on_event(b, ev);
}

/* The follower takes the bound topics (the MQ loop, outside its callbacks). */
static void follow_topics(cq_main_bridge_t *b)
{
    b->fw_due = false;
    const char *v[CQ_BRIDGE_BINDINGS_MAX];
    size_t n = cq_bridge_ntopics(b->br);
    for (size_t i = 0; i < n && i < CQ_BRIDGE_BINDINGS_MAX; i++)
        v[i] = cq_bridge_topic(b->br, i);
    int r =
        cq_mqfollow_set_topics(b->fw, v, n < CQ_BRIDGE_BINDINGS_MAX ? n : CQ_BRIDGE_BINDINGS_MAX);
    if (r < 0) {
        b->fw_due = true; /* out of memory: again at the next run */
        if (log_now(b))
            CQ_WARN("bridge", "the followed shards keep their topics: %s", cq_strerror(r));
    }
}

/* /metrics' copy of the follower's counters. */
static void follow_stats(cq_main_bridge_t *b)
{
    pthread_mutex_lock(&b->st_mu);
    cq_mqfollow_stats(b->fw, &b->fw_st);
    b->fw_nlinks = cq_mqfollow_nlinks(b->fw);
    for (size_t i = 0; i < b->fw_nlinks; i++)
        cq_mqfollow_link_stats(b->fw, i, &b->fw_links[i]);
    pthread_mutex_unlock(&b->st_mu);
}

/* ---- resume (the workers ask, the MQ thread answers) ------------------------------------ */

/* A worker's thread: queued for the MQ thread, which it wakes. */
static int resume_ask(void *ud, int what, uint32_t conn_id, const void *body, size_t len)
{
    cq_main_bridge_t *b = ud;
    if (what == CQ_RESUME_ASK_APPLIED || what == CQ_RESUME_ASK_LOGIN_APPLIED) {
        /* a count, not a queued ask: one per chunk */
        atomic_fetch_add(what == CQ_RESUME_ASK_APPLIED ? &b->applied : &b->rt_applied, 1);
        pthread_mutex_lock(&b->ask_mu);
        cq_mqsrv_t *mq = atomic_load(&b->mq);
        if (mq && !atomic_load(&b->stopped))
            cq_mqsrv_sink_poke(mq);
        pthread_mutex_unlock(&b->ask_mu);
        return 0;
    }
    if ((what == CQ_RESUME_ASK_REQUEST || what == CQ_RESUME_ASK_LOGIN ||
         what == CQ_RESUME_ASK_ACK) &&
        atomic_load(&b->nasks) >= RESUME_QUEUE_MAX)
        return CQ_EBUSY;
    ask_t *a = cq_malloc(sizeof(*a) + len);
    if (!a)
        return -ENOMEM;
    a->what = what;
    a->conn_id = conn_id;
    a->len = len;
    if (len)
        memcpy(a->body, body, len);
    pthread_mutex_lock(&b->ask_mu);
    cq_mqsrv_t *mq = atomic_load(&b->mq);
    if (!mq || atomic_load(&b->stopped)) {
        pthread_mutex_unlock(&b->ask_mu);
        cq_free(a);
        return -ENOTCONN;
    }
    atomic_fetch_add(&b->nasks, 1);
    cq_mpsc_push(&b->asks, &a->node);
    cq_mqsrv_sink_poke(mq);
    pthread_mutex_unlock(&b->ask_mu);
    return 0;
}

/* A topic's place on a shard: this node's MQ engine for its own, the follower for another. */
static bool resume_position(void *ud, const char *topic, uint32_t shard, uint64_t *epoch,
                            uint64_t *pushed)
{
    cq_main_bridge_t *b = ud;
    if (shard != b->shard)
        return b->fw && cq_mqfollow_position(b->fw, shard, topic, epoch, pushed);
    cq_mqsrv_t *mq = atomic_load(&b->mq);
    return mq && cq_mqsrv_sink_position(mq, topic, epoch, pushed);
}

/* A chunk's events as the core takes them: the buffers (borrowed) and their msg types, in two
 * arrays (one allocation; *ret_ty points into it). NULL on OOM. */
static cq_buf_t **split_evs(const cq_resume_ev_t *evs, size_t n, uint32_t **ret_ty)
{
    size_t k = n ? n : 1;
    cq_buf_t **ev = cq_malloc(k * (sizeof(*ev) + sizeof(**ret_ty)));
    if (!ev)
        return NULL;
    uint32_t *ty = (uint32_t *)(void *)(ev + k);
    for (size_t i = 0; i < n; i++) {
        ev[i] = evs[i].event;
        ty[i] = evs[i].msg_type;
    }
    *ret_ty = ty;
    return ev;
}

/* A chunk that never reaches a worker gives its place back at once (applied counts it). */
static void send_failed(cq_main_bridge_t *b, _Atomic uint64_t *applied, uint32_t conn_id,
                        const char *what, int r)
{
    atomic_fetch_add(applied, 1);
    if (log_now(b))
        CQ_WARN("bridge", "conn %u: a %s chunk was not sent: %s", conn_id, what, cq_strerror(r));
}

static void run_send(cq_main_bridge_t *b, const cq_resume_action_t *a)
{
    uint32_t *ty;
    cq_buf_t **ev = split_evs(a->evs, a->nevs, &ty);
    int r = ev ? cq_shared_resume_chunk(b->sh, a->chan_id, a->conn_id, a->flags, a->result, ev, ty,
                                        a->nevs)
               : -ENOMEM;
    cq_free(ev);
    if (r < 0)
        send_failed(b, &b->applied, a->conn_id, "resume", r);
}

static void run_route_send(cq_main_bridge_t *b, const cq_route_action_t *a)
{
    uint32_t *ty;
    cq_buf_t **ev = split_evs(a->evs, a->nevs, &ty);
    int r = ev ? cq_shared_route_chunk(b->sh, a->conn_id, a->final, ev, ty, a->nevs) : -ENOMEM;
    cq_free(ev);
    if (r < 0)
        send_failed(b, &b->rt_applied, a->conn_id, "login catch-up", r);
}

/* A route action on a followed shard: a consume, or an offset of the player's instance, on its
 * link, answered in follow_rows / follow_offset. */
static void run_route_followed(cq_main_bridge_t *b, const cq_route_action_t *a)
{
    if (!b->fw && a->kind == CQ_ROUTE_READ)
        cq_route_rows(b->rt, a->id, -ENOENT, NULL, 0, cq_clock_mono_ms());
    else if (!b->fw)
        cq_route_offset(b->rt, a->id, -EIO, 0, cq_clock_mono_ms());
    else if (a->kind == CQ_ROUTE_READ)
        cq_mqfollow_read(b->fw, a->shard, a->topic, a->from, a->max, a->id | ROUTE_TAG);
    else
        cq_mqfollow_offset(b->fw, a->shard, a->topic, a->consumer, a->kind == CQ_ROUTE_COMMIT,
                           a->offset, a->id);
}

/* The route engine's actions: reads and offsets to the store's threads (or the follower's
 * links), chunks to the connections' workers. A refusal comes back at once as the action's
 * result. */
static void run_route_actions(cq_main_bridge_t *b, cq_mqsrv_t *s)
{
    cq_route_action_t a;
    while (cq_route_next(b->rt, &a)) {
        int r = 0;
        if (a.kind != CQ_ROUTE_SEND && a.shard != b->shard) {
            run_route_followed(b, &a);
            cq_route_action_done(&a);
            continue;
        }
        switch (a.kind) {
        case CQ_ROUTE_READ:
            if ((r = cq_mqsrv_sink_read(s, a.topic, a.from, a.max, a.id | ROUTE_TAG)) < 0)
                cq_route_rows(b->rt, a.id, r, NULL, 0, cq_clock_mono_ms());
            break;
        case CQ_ROUTE_GET:
        case CQ_ROUTE_COMMIT:
            r = a.kind == CQ_ROUTE_GET
                    ? cq_mqsrv_sink_get_offset(s, a.topic, a.consumer, a.id)
                    : cq_mqsrv_sink_commit_offset(s, a.topic, a.consumer, a.offset, a.id);
            if (r < 0)
                cq_route_offset(b->rt, a.id, r == -ENOENT ? -EIO : r, 0, cq_clock_mono_ms());
            break;
        case CQ_ROUTE_SEND:
            run_route_send(b, &a);
            break;
        default:
            break;
        }
        cq_route_action_done(&a);
    }
    pthread_mutex_lock(&b->st_mu);
    cq_route_stats(b->rt, &b->rt_st);
    pthread_mutex_unlock(&b->st_mu);
}

/* Runs the engine's actions: reads go to the store's reader thread, chunks to the workers. */
static void run_actions(cq_main_bridge_t *b, cq_mqsrv_t *s)
{
    run_route_actions(b, s);
    cq_resume_action_t a;
    while (cq_resume_next(b->rs, &a)) {
        if (a.kind == CQ_RESUME_READ && a.shard != b->shard) {
            /* a followed shard's rows: a consume on its link, answered in follow_rows */
            if (b->fw)
                cq_mqfollow_read(b->fw, a.shard, a.topic, a.from, a.max, a.read_id);
            else
                cq_resume_rows(b->rs, a.read_id, -ENOENT, NULL, 0, cq_clock_mono_ms());
        } else if (a.kind == CQ_RESUME_READ) {
            int r = cq_mqsrv_sink_read(s, a.topic, a.from, a.max, a.read_id);
            if (r < 0)
                cq_resume_rows(b->rs, a.read_id, r, NULL, 0, cq_clock_mono_ms());
        } else if (a.kind == CQ_RESUME_SEND) {
            run_send(b, &a);
        }
        cq_resume_action_done(&a);
    }
    cq_resume_stats_t st;
    cq_resume_stats(b->rs, &st);
    atomic_store(&b->rs_requests, st.requests);
    atomic_store(&b->rs_recovered, st.recovered);
    atomic_store(&b->rs_not_recovered, st.not_recovered);
    atomic_store(&b->rs_refused, st.refused);
    atomic_store(&b->rs_ring, st.events_ring);
    atomic_store(&b->rs_store, st.events_store);
    atomic_store(&b->rs_reads, st.reads);
    atomic_store(&b->rs_idle, st.dropped_idle);
    atomic_store(&b->rs_sessions, st.sessions);
    atomic_store(&b->rs_sends_out, st.sends_out);
    atomic_store(&b->rs_send_waiting, st.send_waiting);
    atomic_store(&b->rs_credits_lost, st.credits_lost);
}

/* The core made (or found) the channel "topic:<name>": its binding delivers there from now on,
 * and resumes on it. 0: it could not be made (said in the log); asked again at a reload. */
static void topic_chan_made(cq_main_bridge_t *b, const char *metadata, uint32_t id)
{
    if (strncmp(metadata, "topic:", 6) != 0)
        return;
    struct tchan *t = tchan_of(b, metadata + 6, false);
    if (!t)
        return;
    t->id = id;
    t->asked = id != 0;
    if (!id)
        return;
    CQ_INFO("bridge", "topic %s: delivered on channel %u (\"%s\")", t->topic, id, metadata);
    const cq_bindings_t *bs = cq_bridge_bindings(b->br);
    for (size_t i = 0; i < bs->n; i++)
        if (bs->v[i].kind == CQ_BIND_BROADCAST && strcmp(bs->v[i].channel, "topic") == 0 &&
            strcasecmp(bs->v[i].topic, t->topic) == 0)
            declare_resume(b, &bs->v[i]);
}

/* A relay node's "topic" channels live on GLOBAL's home: when it moves (or becomes known), they
 * are asked for anew (the old home's went with it), and their resumes follow the new ids. */
static void tchans_rehome(cq_main_bridge_t *b)
{
    uint32_t home = b->sh ? cq_shared_relay_home(b->sh) : 0;
    if (!b->relay || !b->ntchans || home == b->tchan_home)
        return;
    b->tchan_home = home;
    for (int i = 0; i < b->ntchans; i++) {
        b->tchans[i].id = 0;
        b->tchans[i].asked = false;
    }
    declare_topics(b); /* sets tchans_due; the sessions in progress end */
}

/* Asks the core for the "topic" channels not made yet (once the hook can carry the answer). */
static void ask_tchans(cq_main_bridge_t *b)
{
    b->tchans_due = false;
    for (int i = 0; i < b->ntchans; i++) {
        struct tchan *t = &b->tchans[i];
        if (t->id || t->asked)
            continue;
        char md[80];
        snprintf(md, sizeof(md), "topic:%s", t->topic);
        int r = cq_shared_topic_channel(b->sh, md);
        if (r < 0)
            CQ_WARN("bridge", "topic %s: channel \"%s\" not asked for: %s", t->topic, md,
                    cq_strerror(r));
        t->asked = r == 0;
    }
}

/* One ask of a worker, to its engine. An ACK's body is the PIT, its NUL, then the message. */
static void ask_run(cq_main_bridge_t *b, const ask_t *a, uint64_t now)
{
    const char *key = (const char *)a->body;
    size_t klen = a->len ? strnlen(key, a->len) : 0;
    switch (a->what) {
    case CQ_RESUME_ASK_REQUEST:
        if (a->len >= 4) {
            uint32_t ch = (uint32_t)a->body[0] | (uint32_t)a->body[1] << 8 |
                          (uint32_t)a->body[2] << 16 | (uint32_t)a->body[3] << 24;
            cq_resume_request(b->rs, a->conn_id, ch, a->body + 4, a->len - 4, now);
        }
        break;
    case CQ_RESUME_ASK_TOPIC_CHAN:
        if (klen < a->len)
            topic_chan_made(b, key, a->conn_id);
        break;
    case CQ_RESUME_ASK_MORE:
        cq_resume_more(b->rs, a->conn_id, now);
        break;
    case CQ_RESUME_ASK_GONE:
        cq_resume_gone(b->rs, a->conn_id);
        break;
    case CQ_RESUME_ASK_LOGIN:
        cq_route_login(b->rt, a->conn_id, klen < a->len ? key : "", now);
        break;
    case CQ_RESUME_ASK_LOGIN_MORE:
        cq_route_more(b->rt, a->conn_id, now);
        break;
    case CQ_RESUME_ASK_LOGIN_GONE:
        cq_route_gone(b->rt, a->conn_id);
        break;
    case CQ_RESUME_ASK_ACK:
        if (klen < a->len)
            cq_route_ack(b->rt, key, a->body + klen + 1, a->len - klen - 1, now);
        break;
    default:
        break;
    }
}

/* Every drain and tick of the MQ engine: the workers' asks, then the idle sessions (at most
 * every 100 ms), then the actions. */
static void sink_run(void *ud, cq_mqsrv_t *s)
{
    cq_main_bridge_t *b = ud;
    take_next(b);
    if (b->fw_due)
        follow_topics(b);
    tchans_rehome(b);
    if (b->tchans_due && atomic_load(&b->attached))
        ask_tchans(b);
    uint64_t now = cq_clock_mono_ms();
    uint64_t applied = atomic_load(&b->applied);
    if (applied != b->applied_seen) {
        cq_resume_applied(b->rs, (uint32_t)(applied - b->applied_seen), now);
        b->applied_seen = applied;
        run_actions(b, s);
    }
    applied = atomic_load(&b->rt_applied);
    if (applied != b->rt_applied_seen) {
        cq_route_applied(b->rt, (uint32_t)(applied - b->rt_applied_seen), now);
        b->rt_applied_seen = applied;
        run_actions(b, s);
    }
    cq_mpsc_node_t *n;
    while ((n = cq_mpsc_pop(&b->asks))) {
        ask_t *a = cq_container_of(n, ask_t, node);
        atomic_fetch_sub(&b->nasks, 1);
        ask_run(b, a, now);
        cq_free(a);
        run_actions(b, s);
    }
    if (now - b->tick_ms >= 100) {
        b->tick_ms = now;
        cq_resume_tick(b->rs, now);
        cq_route_tick(b->rt, now);
        if (b->fw)
            follow_stats(b);
    }
    run_actions(b, s);
}

static void sink_rows(void *ud, cq_mqsrv_t *s, uint64_t tag, int err, const cq_store_rec_t *recs,
                      size_t n)
{
    cq_main_bridge_t *b = ud;
    bool route = tag & ROUTE_TAG;
    tag &= ~ROUTE_TAG;
    cq_resume_row_t *rows = n ? cq_malloc(n * sizeof(*rows)) : NULL;
    if (n && !rows) {
        err = -ENOMEM;
        n = 0;
    }
    for (size_t i = 0; i < n; i++)
        rows[i] = (cq_resume_row_t){recs[i].offset, recs[i].create_ms, recs[i].producer_id,
                                    recs[i].seq,    recs[i].content,   recs[i].len};
    if (route)
        cq_route_rows(b->rt, tag, err, rows, n, cq_clock_mono_ms());
    else
        cq_resume_rows(b->rs, tag, err, rows, n, cq_clock_mono_ms());
    cq_free(rows);
    run_actions(b, s);
}

static void sink_offset(void *ud, cq_mqsrv_t *s, uint64_t tag, int err, uint64_t offset)
{
    cq_main_bridge_t *b = ud;
    cq_route_offset(b->rt, tag, err, offset, cq_clock_mono_ms());
    run_actions(b, s);
}

static int route_metrics(cq_main_bridge_t *b, cq_sbuf_t *out)
{
    pthread_mutex_lock(&b->st_mu);
    cq_route_stats_t st = b->rt_st;
    pthread_mutex_unlock(&b->st_mu);
    return cq_sbuf_printf(
        out,
        "# HELP chanq_bridge_route_logins_total Logins of players with route bindings, by "
        "outcome (caught_up: the catch-up reached the live stream; refused: over the limit, "
        "no catch-up; idle: cut for making no progress).\n"
        "# TYPE chanq_bridge_route_logins_total counter\n"
        "chanq_bridge_route_logins_total{outcome=\"started\"} %" PRIu64 "\n"
        "chanq_bridge_route_logins_total{outcome=\"caught_up\"} %" PRIu64 "\n"
        "chanq_bridge_route_logins_total{outcome=\"refused\"} %" PRIu64 "\n"
        "chanq_bridge_route_logins_total{outcome=\"idle\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_route_events_total Login catch-up events sent, by where they came "
        "from.\n"
        "# TYPE chanq_bridge_route_events_total counter\n"
        "chanq_bridge_route_events_total{source=\"ring\"} %" PRIu64 "\n"
        "chanq_bridge_route_events_total{source=\"store\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_route_reads_total Store reads of login catch-ups (shared: a login "
        "that joined a read already asked for).\n"
        "# TYPE chanq_bridge_route_reads_total counter\n"
        "chanq_bridge_route_reads_total{kind=\"issued\"} %" PRIu64 "\n"
        "chanq_bridge_route_reads_total{kind=\"shared\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_route_rows_total Rows those reads returned.\n"
        "# TYPE chanq_bridge_route_rows_total counter\n"
        "chanq_bridge_route_rows_total %" PRIu64 "\n"
        "# HELP chanq_bridge_route_acks_total Players' TopicAck messages.\n"
        "# TYPE chanq_bridge_route_acks_total counter\n"
        "chanq_bridge_route_acks_total %" PRIu64 "\n"
        "# HELP chanq_bridge_route_offset_ops_total Players' offsets read from and written to "
        "the store (write_error: written again later).\n"
        "# TYPE chanq_bridge_route_offset_ops_total counter\n"
        "chanq_bridge_route_offset_ops_total{op=\"read\"} %" PRIu64 "\n"
        "chanq_bridge_route_offset_ops_total{op=\"write\"} %" PRIu64 "\n"
        "chanq_bridge_route_offset_ops_total{op=\"write_error\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_route_sessions Login catch-ups in progress.\n"
        "# TYPE chanq_bridge_route_sessions gauge\n"
        "chanq_bridge_route_sessions %u\n"
        "# HELP chanq_bridge_route_offsets Players' offsets cached (dirty: not written yet).\n"
        "# TYPE chanq_bridge_route_offsets gauge\n"
        "chanq_bridge_route_offsets{state=\"cached\"} %u\n"
        "chanq_bridge_route_offsets{state=\"dirty\"} %u\n",
        st.logins, st.caught_up, st.refused, st.dropped_idle, st.events_ring, st.events_store,
        st.reads, st.reads_shared, st.rows_read, st.acks, st.gets, st.commits, st.commit_errors,
        st.sessions, st.cached, st.dirty);
}

/* The followed shards (none: nothing). */
static int follow_metrics(cq_main_bridge_t *b, cq_sbuf_t *out)
{
    if (!b->fw)
        return 0;
    pthread_mutex_lock(&b->st_mu);
    cq_mqfollow_stats_t st = b->fw_st;
    size_t n = b->fw_nlinks;
    cq_mqfollow_link_stats_t ls[CQ_MQFOLLOW_LINKS_MAX];
    memcpy(ls, b->fw_links, n * sizeof(ls[0]));
    pthread_mutex_unlock(&b->st_mu);
    int r = cq_sbuf_printf(
        out,
        "# HELP chanq_bridge_follow_events_total Messages the followed shards (--bridge-follow) "
        "handed to the bridge.\n"
        "# TYPE chanq_bridge_follow_events_total counter\n"
        "chanq_bridge_follow_events_total %" PRIu64 "\n"
        "# HELP chanq_bridge_follow_connects_total Connections made to followed shards' servers.\n"
        "# TYPE chanq_bridge_follow_connects_total counter\n"
        "chanq_bridge_follow_connects_total %" PRIu64 "\n"
        "# HELP chanq_bridge_follow_disconnects_total Connections to followed shards' servers "
        "lost or left.\n"
        "# TYPE chanq_bridge_follow_disconnects_total counter\n"
        "chanq_bridge_follow_disconnects_total %" PRIu64 "\n"
        "# HELP chanq_bridge_follow_pushes_dropped_total Times a topic's pushes kept during a "
        "consume went over the bound (the consume went on from its own offset).\n"
        "# TYPE chanq_bridge_follow_pushes_dropped_total counter\n"
        "chanq_bridge_follow_pushes_dropped_total %" PRIu64 "\n"
        "# HELP chanq_bridge_follow_up 1 while the followed shard's connection is up.\n"
        "# TYPE chanq_bridge_follow_up gauge\n",
        st.events, st.connects, st.disconnects, st.pushes_dropped);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = cq_sbuf_printf(out, "chanq_bridge_follow_up{shard=\"%u\"} %d\n", ls[i].shard,
                           ls[i].up ? 1 : 0);
    if (r == 0)
        r = cq_sbuf_printf(out, "# HELP chanq_bridge_follow_master 1 while the server a followed "
                                "shard is read from is its master (0: a standby, or down).\n"
                                "# TYPE chanq_bridge_follow_master gauge\n");
    for (size_t i = 0; r == 0 && i < n; i++)
        r = cq_sbuf_printf(out, "chanq_bridge_follow_master{shard=\"%u\"} %d\n", ls[i].shard,
                           ls[i].up && ls[i].master ? 1 : 0);
    if (r == 0)
        r = cq_sbuf_printf(out, "# HELP chanq_bridge_follow_epoch The followed shard's epoch.\n"
                                "# TYPE chanq_bridge_follow_epoch gauge\n");
    for (size_t i = 0; r == 0 && i < n; i++)
        r = cq_sbuf_printf(out, "chanq_bridge_follow_epoch{shard=\"%u\"} %" PRIu64 "\n",
                           ls[i].shard, ls[i].epoch);
    return r;
}

static int metrics(void *ud, cq_sbuf_t *out)
{
    cq_main_bridge_t *b = ud;
    int r = route_metrics(b, out);
    if (r == 0)
        r = follow_metrics(b, out);
    if (r < 0)
        return r;
    return cq_sbuf_printf(
        out,
        "# HELP chanq_bridge_events_total Committed messages of bound topics the bridge took.\n"
        "# TYPE chanq_bridge_events_total counter\n"
        "chanq_bridge_events_total %" PRIu64 "\n"
        "# HELP chanq_bridge_outputs_total Events handed to channels or players.\n"
        "# TYPE chanq_bridge_outputs_total counter\n"
        "chanq_bridge_outputs_total %" PRIu64 "\n"
        "# HELP chanq_bridge_duplicates_total Events dropped as a copy of one already "
        "delivered (same producer id and seq).\n"
        "# TYPE chanq_bridge_duplicates_total counter\n"
        "chanq_bridge_duplicates_total %" PRIu64 "\n"
        "# HELP chanq_bridge_unroutable_total Events of a route binding whose content named "
        "no player.\n"
        "# TYPE chanq_bridge_unroutable_total counter\n"
        "chanq_bridge_unroutable_total %" PRIu64 "\n"
        "# HELP chanq_bridge_refused_total Outputs the core refused (out of memory, too "
        "large).\n"
        "# TYPE chanq_bridge_refused_total counter\n"
        "chanq_bridge_refused_total %" PRIu64 "\n"
        "# HELP chanq_bridge_resumes_total Resume requests by outcome (recovered, "
        "not_recovered, refused).\n"
        "# TYPE chanq_bridge_resumes_total counter\n"
        "chanq_bridge_resumes_total{outcome=\"recovered\"} %" PRIu64 "\n"
        "chanq_bridge_resumes_total{outcome=\"not_recovered\"} %" PRIu64 "\n"
        "chanq_bridge_resumes_total{outcome=\"refused\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_resume_events_total Catch-up events sent, by where they came from.\n"
        "# TYPE chanq_bridge_resume_events_total counter\n"
        "chanq_bridge_resume_events_total{source=\"ring\"} %" PRIu64 "\n"
        "chanq_bridge_resume_events_total{source=\"store\"} %" PRIu64 "\n"
        "# HELP chanq_bridge_resume_reads_total Store reads the resumes asked for.\n"
        "# TYPE chanq_bridge_resume_reads_total counter\n"
        "chanq_bridge_resume_reads_total %" PRIu64 "\n"
        "# HELP chanq_bridge_resume_idle_total Resumes cut for making no progress.\n"
        "# TYPE chanq_bridge_resume_idle_total counter\n"
        "chanq_bridge_resume_idle_total %" PRIu64 "\n"
        "# HELP chanq_bridge_resume_sessions Resumes in progress.\n"
        "# TYPE chanq_bridge_resume_sessions gauge\n"
        "chanq_bridge_resume_sessions %u\n"
        "# HELP chanq_bridge_resume_chunks_inflight Catch-up chunks handed to the workers and "
        "not yet queued for their connections (at most --bridge-resume-inflight).\n"
        "# TYPE chanq_bridge_resume_chunks_inflight gauge\n"
        "chanq_bridge_resume_chunks_inflight %u\n"
        "# HELP chanq_bridge_resume_waiting Resumes waiting for a place among those chunks.\n"
        "# TYPE chanq_bridge_resume_waiting gauge\n"
        "chanq_bridge_resume_waiting %u\n"
        "# HELP chanq_bridge_resume_chunks_lost_total Chunks that never reported back within "
        "the idle time, whose places were taken back.\n"
        "# TYPE chanq_bridge_resume_chunks_lost_total counter\n"
        "chanq_bridge_resume_chunks_lost_total %" PRIu64 "\n",
        atomic_load(&b->events), atomic_load(&b->outputs), atomic_load(&b->duplicates),
        atomic_load(&b->unroutable), atomic_load(&b->refused), atomic_load(&b->rs_recovered),
        atomic_load(&b->rs_not_recovered), atomic_load(&b->rs_refused), atomic_load(&b->rs_ring),
        atomic_load(&b->rs_store), atomic_load(&b->rs_reads), atomic_load(&b->rs_idle),
        atomic_load(&b->rs_sessions), atomic_load(&b->rs_sends_out),
        atomic_load(&b->rs_send_waiting), atomic_load(&b->rs_credits_lost));
}

/* What this node cannot do, refused at start rather than found missing later. A relay node
 * bridges the shards it follows only (its own store is not a shard of the durable cluster:
 * what it stores would reach its own players alone), and delivers to its own connections. */
static int check(const cq_config_t *c, char *err, size_t errlen)
{
    if (!*c->mq_addr) {
        snprintf(err, errlen, "--bridge-file needs durable topics (--mq-addr)");
        return CQ_ECONFIG;
    }
    if (!*c->relay_nats)
        return 0;
    if (!*c->bridge_follow) {
        snprintf(err, errlen,
                 "--bridge-file on a relay node needs --bridge-follow: its events come from the "
                 "durable cluster's shards");
        return CQ_ECONFIG;
    }
    return 0;
}

static int load(const cq_config_t *c, cq_bindings_t *bs, char *err, size_t errlen)
{
    char *text = NULL, why[256] = "";
    size_t len = 0;
    int r = cq_file_read(c->bridge_file, CQ_BRIDGE_FILE_MAX, &text, &len);
    if (r < 0) {
        snprintf(err, errlen, "--bridge-file %s: %s", c->bridge_file, cq_strerror(r));
        return r == -ENOMEM ? r : CQ_ECONFIG;
    }
    r = cq_bindings_parse(text, len, bs, why, sizeof(why));
    cq_free(text);
    if (r < 0)
        snprintf(err, errlen, "--bridge-file %s: %s", c->bridge_file, why);
    return r;
}

/* The rows a resume read from a followed shard (the MQ loop, inside the follower: its reads
 * may be called from here). */
static void follow_rows(void *ud, uint64_t tag, int err, const cq_mqfollow_row_t *rows, size_t n)
{
    cq_main_bridge_t *b = ud;
    cq_mqsrv_t *mq = atomic_load(&b->mq);
    if (atomic_load(&b->stopped) || !mq)
        return;
    _Static_assert(sizeof(cq_mqfollow_row_t) == sizeof(cq_resume_row_t) &&
                       offsetof(cq_mqfollow_row_t, content) == offsetof(cq_resume_row_t, content),
                   "a followed shard's rows are resume rows");
    const cq_resume_row_t *rr = (const cq_resume_row_t *)(const void *)rows;
    if (tag & ROUTE_TAG)
        cq_route_rows(b->rt, tag & ~ROUTE_TAG, err, rr, n, cq_clock_mono_ms());
    else
        cq_resume_rows(b->rs, tag, err, rr, n, cq_clock_mono_ms());
    run_actions(b, mq);
}

static void follow_offset(void *ud, uint64_t tag, int err, uint64_t offset)
{
    cq_main_bridge_t *b = ud;
    cq_mqsrv_t *mq = atomic_load(&b->mq);
    if (atomic_load(&b->stopped) || !mq)
        return;
    /* -ENOENT is "never committed" for the engine; a refusal (not master) is written again */
    cq_route_offset(b->rt, tag, err, offset, cq_clock_mono_ms());
    run_actions(b, mq);
}

/* The follower of --bridge-follow's shards (none: 0 and b->fw NULL). */
static int make_follower(cq_main_bridge_t *b, const cq_config_t *c, char *err, size_t errlen)
{
    if (!*c->bridge_follow)
        return 0;
    char token[CQ_MQ_TOKEN_MAX + 1], why[256] = "";
    int r = cq_file_read_secret(c->bridge_follow_token_file, token, sizeof(token));
    if (r < 0) {
        snprintf(err, errlen, "--bridge-follow-token-file %s: %s", c->bridge_follow_token_file,
                 r == -ENAMETOOLONG ? "longer than a token may be" : cq_strerror(r));
        return CQ_ECONFIG;
    }
    cq_mqfollow_opts_t o = {.module_id = (uint32_t)c->bridge_follow_module,
                            .token = token,
                            .on_event = follow_event,
                            .on_rows = follow_rows,
                            .on_offset = follow_offset,
                            .ud = b};
    if (!(b->fw = cq_mqfollow_new(&o))) {
        snprintf(err, errlen, "--bridge-follow: out of memory");
        return -ENOMEM;
    }
    /* a cluster member follows the other shards; a standalone node may name any shard but the
     * one its own answers carry */
    bool member = *c->zk_hosts != '\0';
    r = cq_mqfollow_add_servers(b->fw, c->bridge_follow, member ? b->shard : UINT32_MAX, why,
                                sizeof(why));
    if (r == 0 && cq_mqfollow_has_shard(b->fw, b->shard)) {
        snprintf(why, sizeof(why), "shard %u is this server's own (--shard)", b->shard);
        r = CQ_ECONFIG;
    }
    cq_resume_topics_clear(b->rs); /* the shards first, then the topics: a stream per shard */
    cq_route_topics_clear(b->rt);
    for (size_t i = 0; r == 0 && i < cq_mqfollow_nlinks(b->fw); i++)
        if ((r = cq_resume_add_shard(b->rs, cq_mqfollow_shard(b->fw, i))) < 0 ||
            (r = cq_route_add_shard(b->rt, cq_mqfollow_shard(b->fw, i))) < 0)
            snprintf(why, sizeof(why), "cannot resume shard %u: %s", cq_mqfollow_shard(b->fw, i),
                     cq_strerror(r));
    if (r < 0) {
        snprintf(err, errlen, "--bridge-follow: %s", r == -ENOMEM ? "out of memory" : why);
        return r;
    }
    declare_topics(b); /* now with a stream per followed shard */
    follow_topics(b);
    if (b->fw_due)
        snprintf(err, errlen, "--bridge-follow: out of memory");
    return b->fw_due ? -ENOMEM : 0;
}

cq_mqfollow_t *cq_main_bridge_follower(cq_main_bridge_t *b)
{
    return b ? b->fw : NULL;
}

int cq_main_bridge_new(const cq_config_t *c, cq_shared_t *sh, cq_admin_t *admin,
                       cq_main_bridge_t **ret, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    *ret = NULL;
    /* managed servers get a bridge with no binding, which the manager's may fill */
    bool managed = *c->mgr_servers && *c->mq_addr && !*c->relay_nats;
    if (!*c->bridge_file && !managed && *c->bridge_follow) {
        snprintf(err, errlen, "--bridge-follow needs bindings: --bridge-file, or --mgr-servers");
        return CQ_ECONFIG;
    }
    if (!*c->bridge_file && !managed)
        return 0;
    cq_bindings_t bs = {0};
    int r = *c->bridge_file ? load(c, &bs, err, errlen) : 0;
    if (r == 0)
        r = check(c, err, errlen);
    cq_main_bridge_t *b = r == 0 ? cq_calloc(1, sizeof(*b)) : NULL;
    if (r == 0 && (!b || !(b->br = cq_bridge_new(&bs, DEDUP_WINDOW))))
        r = -ENOMEM;
    cq_resume_limits_t lim = {.ring_events = (uint32_t)c->bridge_ring_events,
                              .chunk_events = (uint32_t)c->bridge_resume_chunk,
                              .sends_max = (uint32_t)c->bridge_resume_inflight};
    if (r == 0 && !(b->rs = cq_resume_new(&lim, (uint32_t)c->shard, resume_position, b)))
        r = -ENOMEM;
    cq_route_limits_t rlim = {.ring_events = (uint32_t)c->bridge_ring_events,
                              .chunk_events = (uint32_t)c->bridge_resume_chunk,
                              .sends_max = (uint32_t)c->bridge_resume_inflight};
    /* a relay node bridges no store of its own (check()): its route streams are the followed
     * shards' alone */
    uint32_t own = *c->relay_nats ? CQ_ROUTE_NO_SHARD : (uint32_t)c->shard;
    if (r == 0 && !(b->rt = cq_route_new(&rlim, own, resume_position, b)))
        r = -ENOMEM;
    if (r == 0) {
        cq_mpsc_init(&b->asks);
        pthread_mutex_init(&b->ask_mu, NULL);
        pthread_mutex_init(&b->st_mu, NULL);
        declare_topics(b);
        b->shard = (uint32_t)c->shard;
        b->relay = *c->relay_nats != '\0';
        r = make_follower(b, c, err, errlen);
    }
    if (r == 0 && (r = cq_admin_add_source(admin, "bridge", metrics, b)) < 0)
        snprintf(err, errlen, "cannot register the bridge's metrics: %s", cq_strerror(r));
    if (r == -ENOMEM && !*err)
        snprintf(err, errlen, "--bridge-file: out of memory");
    if (r < 0) {
        cq_bindings_free(&bs); /* taken by cq_bridge_new when it succeeded: then empty */
        cq_main_bridge_free(b, NULL);
        return r;
    }
    b->sh = sh;
    b->cfg = c;
    cq_shared_set_route(sh, route_on(b));
    if (*c->bridge_file)
        CQ_INFO("bridge", "%zu bindings from %s", cq_bridge_bindings(b->br)->n, c->bridge_file);
    *ret = b;
    return 0;
}

/* A message of this node's shard invalidated (issue 25): out of the resume and route rings, so
 * no catch-up served from memory delivers it (followed shards' rings keep theirs: doc/mgr.md
 * "Messages"). */
static void sink_invalidated(void *ud, cq_mqsrv_t *s, const char *topic, uint64_t offset)
{
    cq_main_bridge_t *b = ud;
    (void)s;
    bool resume = cq_resume_drop(b->rs, topic, b->shard, offset);
    bool route = cq_route_drop(b->rt, topic, b->shard, offset);
    if (resume || route)
        CQ_INFO("bridge", "topic %s: offset %llu left the catch-up rings (invalidated)", topic,
                (unsigned long long)offset);
}

void cq_main_bridge_sink(cq_main_bridge_t *b, cq_mqsrv_opts_t *o)
{
    if (!b)
        return;
    o->sink_wants = sink_wants;
    o->sink_event = sink_event;
    o->sink_run = sink_run;
    o->sink_rows = sink_rows;
    o->sink_offset = sink_offset;
    o->sink_invalidated = sink_invalidated;
    o->sink_ud = b;
}

void cq_main_bridge_attach(cq_main_bridge_t *b, cq_mqsrv_t *s)
{
    if (!b)
        return;
    atomic_store(&b->mq, s);
    cq_shared_set_resume(b->sh, resume_ask, b);
    atomic_store(&b->attached, true);
    cq_mqsrv_sink_poke(s); /* the "topic" channels are asked for at its next drain */
}

int cq_main_bridge_reload(cq_main_bridge_t *b, const cq_config_t *c, cq_mqsrv_t *s)
{
    if (!b || !*c->bridge_file)
        return 0;
    if (atomic_load(&b->managed)) {
        CQ_INFO("main", "SIGHUP: --bridge-file not read: the manager's bindings are in force");
        return 0;
    }
    char err[512] = "";
    cq_bindings_t bs = {0};
    int r = load(c, &bs, err, sizeof(err));
    if (r == 0)
        r = check(c, err, sizeof(err));
    cq_bridge_t *nb = r == 0 ? cq_bridge_new(&bs, DEDUP_WINDOW) : NULL;
    if (r == 0 && !nb)
        snprintf(err, sizeof(err), "out of memory");
    if (!nb) {
        cq_bindings_free(&bs);
        CQ_ERROR("main", "SIGHUP: keeping the current bindings: %s", err);
        return r < 0 ? r : -ENOMEM;
    }
    size_t n = cq_bridge_bindings(nb)->n;
    cq_bridge_free(atomic_exchange(&b->next, nb)); /* one the MQ thread had not taken yet */
    cq_mqsrv_sink_changed(s);
    CQ_INFO("main", "SIGHUP: %zu bindings reloaded from %s", n, c->bridge_file);
    return 0;
}

int cq_main_bridge_apply(cq_main_bridge_t *b, cq_mqsrv_t *s, const char *json, size_t len,
                         char *err, size_t errlen)
{
    if (!b) {
        snprintf(err, errlen, "this server has no bridge (a relay node, or no MQ port)");
        return CQ_ECONFIG;
    }
    cq_bindings_t bs = {0};
    int r = cq_bindings_parse(json, len, &bs, err, errlen);
    if (r == 0)
        r = check(b->cfg, err, errlen);
    cq_bridge_t *nb = r == 0 ? cq_bridge_new(&bs, DEDUP_WINDOW) : NULL;
    if (r == 0 && !nb) {
        snprintf(err, errlen, "bindings: out of memory");
        r = -ENOMEM;
    }
    if (!nb) {
        cq_bindings_free(&bs);
        return r;
    }
    size_t n = cq_bridge_bindings(nb)->n;
    cq_bridge_free(atomic_exchange(&b->next, nb));
    atomic_store(&b->managed, true);
    cq_mqsrv_sink_changed(s);
    CQ_INFO("bridge", "%zu bindings from the manager", n);
    return 0;
}

void cq_main_bridge_stop(cq_main_bridge_t *b)
{
    if (!b)
        return;
    if (b->rs) /* ask_mu is set up with rs */
        pthread_mutex_lock(&b->ask_mu);
    atomic_store(&b->stopped, true);
    if (b->rs)
        pthread_mutex_unlock(&b->ask_mu);
}

cq_main_bridge_t *cq_main_bridge_free(cq_main_bridge_t *b, cq_admin_t *admin)
{
    if (!b)
        return NULL;
    if (admin)
        cq_admin_remove_source(admin, metrics, b);
    cq_bridge_free(b->br);
    cq_bridge_free(atomic_load(&b->next));
    cq_mpsc_node_t *n;
    while (b->rs && (n = cq_mpsc_pop(&b->asks))) /* asks is set up with rs */
        cq_free(cq_container_of(n, ask_t, node));
    if (b->rs) {
        pthread_mutex_destroy(&b->ask_mu);
        pthread_mutex_destroy(&b->st_mu);
    }
    cq_resume_free(b->rs);
    cq_route_free(b->rt);
    cq_mqfollow_free(b->fw);
    cq_free(b);
    return NULL;
}
