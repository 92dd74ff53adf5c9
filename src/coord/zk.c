/* zk.c - the ZK ops of the coord runtime (cq_coordrt.h), the one-node client (cq_zknode.h) and
 * the group membership (cq_zkgroup.h) over libzookeeper-mt.
 *
 * The only file that includes <zookeeper/zookeeper.h> (scripts/check-layering.sh). Every call
 * is asynchronous; completions and watchers run on the library's completion thread, where they
 * turn results into cq_coord_ev_t and post them to the sink. Only async calls are made there.
 * Every context allocated here is freed by its completion, so every request must get exactly one.
 *
 * libzookeeper-mt (3.8) does not promise that at close. zookeeper_close() sets close_requested,
 * then free_completions() turns every request still in sent_requests into a fake ZCLOSING reply
 * queued on completions_to_process, and adaptor_finish() joins the threads. But the completion
 * thread (mt_adaptor.c do_completion) loops `while (!close_requested)`: when it is awake at
 * that moment (running a completion, e.g. list_children issuing the member reads), its
 * process_completions() returns on an empty queue and it exits before the fakes are queued; a
 * reply the IO thread queued late goes the same way. destroy() queues what is left once more,
 * and in the mt build nothing ever processes completions_to_process (process_async() is 0):
 * the library leaks its records and never calls our completion, which leaked our contexts.
 *
 * So, on our side: (1) every request goes through the zk_a* gates below, which refuse with
 * ZCLOSING once zk_close has begun (a completion chaining the next step while the session
 * closes gets a synchronous error, no request). (2) Each request passes a zk_req_t record to
 * the library instead of its context, with a trampoline per completion type; the record is
 * linked in the session's list until its completion ran. (3) zk_close first waits (bounded,
 * ZK_DRAIN_MS) until that list is empty, so nothing is outstanding when zookeeper_close()
 * starts and the library has nothing to drop; completions that run once close began report
 * ZCLOSING, as the library's own fakes do. (4) After zookeeper_close() returns (its threads are
 * joined: nothing runs any more) zk_close calls, on its own thread, the completion of every
 * record still linked, with ZCLOSING: each kind frees its context as always (the list with its
 * member reads, the epoch read, the topic listing, the one-node client's call record...).
 * (5) A server event read by the IO thread in its last iteration, once close_requested is set
 * (a watch firing because another member just left, a session event), is lost the same way
 * when the completion thread was busy at that moment - and it is, after (3): the drain ends
 * inside the last completion. The event's record (completion_list_t, 168 bytes, and its buffer)
 * is then neither run nor freed. Called on the completion thread, zookeeper_close() joins the
 * IO thread first and detaches the caller, which runs everything queued before it exits. So
 * zk_close issues one more request, a barrier, whose completion (closer_run) closes the handle
 * there, and waits until that thread has exited (the destructor of a thread-specific value).
 * When no barrier can be issued (an expired session, whose IO thread reads nothing any more)
 * or it has no answer within ZK_DRAIN_MS, zk_close closes the handle itself as in (4).
 * The library's own records are only lost when the drain or the barrier timed out.
 */
#define THREADED
#include "cq_coordzk.h"
#include "cq_zkgroup.h"
#include "cq_zknode.h"
#include "zkgroup_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

#define ZK_PATH_MAX 512
#define MEMBER_NAME "m_" /* member nodes: m_0000000012 */
#define DATA_MAX    1024 /* member and epoch data are short texts */
#define ZK_DRAIN_MS 2000 /* zk_close waits this long at most for the requests in flight */

struct zk_req;

/* zk_close's barrier: issued, then its completion closes the handle and the completion thread
 * exits (DONE); or the caller closes it (no answer in time, or no exit hook). */
typedef enum { ZC_NONE, ZC_BARRIER, ZC_CLOSING, ZC_DONE, ZC_CALLER } zk_closer_t;

typedef struct zk_sess {
    zhandle_t *zh;
    cq_coord_zk_sink_t sink;
    char root[ZK_PATH_MAX];    /* "/chanq" */
    char members[ZK_PATH_MAX]; /* "/chanq/shards/N/members" */
    char epoch[ZK_PATH_MAX];   /* "/chanq/shards/N/epoch" */
    char topics[ZK_PATH_MAX];  /* "/chanq/topics" */
    pthread_mutex_t node_mu;   /* node: written by a completion, read by leave */
    char node[ZK_PATH_MAX];    /* our member node, once joined ("" before and after leave) */
    pthread_mutex_t gate_mu;   /* held while a request is issued; closing is set under it */
    atomic_bool closing;       /* zk_close has begun: no request is issued any more */
    pthread_mutex_t req_mu;    /* reqs */
    pthread_cond_t req_cv;     /* reqs became empty, closer changed (CLOCK_MONOTONIC) */
    struct zk_req *reqs;       /* the requests whose completion has not run yet */
    zk_closer_t closer;        /* req_mu: who closes the handle (zk_close) */
} zk_sess_t;

/* One request in flight: the library gets this record as the completion's data and a trampoline
 * (req_* below) as the completion; the trampoline unlinks it, then calls fn with ud. */
typedef enum { ZR_STRING, ZR_DATA, ZR_STRINGS, ZR_STAT, ZR_VOID } zk_req_kind_t;

typedef struct zk_req {
    struct zk_req *prev, *next;
    zk_sess_t *s;
    zk_req_kind_t kind;
    union {
        string_completion_t string;
        data_completion_t data;
        strings_completion_t strings;
        stat_completion_t stat;
        void_completion_t vd;
    } fn;
    const void *ud;
} zk_req_t;

/* ---- helpers ------------------------------------------------------------------------------ */

/* A ZooKeeper error as a chanq code. */
static int zk_rc(int zrc)
{
    switch (zrc) {
    case ZOK:
        return 0;
    case ZNONODE:
        return -ENOENT;
    case ZNODEEXISTS:
    case ZBADVERSION:
        return CQ_ECONFLICT;
    case ZOPERATIONTIMEOUT:
        return CQ_ETIMEOUT;
    case ZCONNECTIONLOSS:
    case ZSESSIONEXPIRED:
    case ZINVALIDSTATE:
    case ZCLOSING:
        return -ENOTCONN;
    case ZSYSTEMERROR:
    case ZMARSHALLINGERROR:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

static void zk_post(zk_sess_t *s, const cq_coord_ev_t *ev)
{
    s->sink.post(s->sink.ud, s->sink.gen, ev);
}

static void zk_post_rc(zk_sess_t *s, cq_coord_ev_type_t type, int rc)
{
    cq_coord_ev_t ev = {.type = type, .rc = rc};
    zk_post(s, &ev);
}

/* ---- session ------------------------------------------------------------------------------ */

static void zk_session_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)path;
    zk_sess_t *s = ctx;
    if (type != ZOO_SESSION_EVENT)
        return;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_SESSION};
    if (state == ZOO_CONNECTED_STATE) {
        ev.arg = CQ_COORD_SESS_CONNECTED;
        int t = zoo_recv_timeout(zh);
        ev.session_ms = t > 0 ? (uint32_t)t : 0;
    } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
        ev.arg = CQ_COORD_SESS_CONNECTING;
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        ev.arg = CQ_COORD_SESS_EXPIRED;
    } else {
        return;
    }
    zk_post(s, &ev);
}

static int zk_paths(zk_sess_t *s, const cq_coord_zk_conf_t *c)
{
    size_t rl = strlen(c->root);
    if (rl == 0 || c->root[0] != '/' || c->root[rl - 1] == '/' || rl >= ZK_PATH_MAX / 2)
        return -EINVAL;
    memcpy(s->root, c->root, rl + 1);
    snprintf(s->members, sizeof s->members, "%s/shards/%" PRIu32 "/members", c->root, c->shard);
    snprintf(s->epoch, sizeof s->epoch, "%s/shards/%" PRIu32 "/epoch", c->root, c->shard);
    snprintf(s->topics, sizeof s->topics, "%s/topics", c->root);
    return 0;
}

static void zk_sess_free(zk_sess_t *s)
{
    pthread_mutex_destroy(&s->node_mu);
    pthread_mutex_destroy(&s->gate_mu);
    pthread_mutex_destroy(&s->req_mu);
    pthread_cond_destroy(&s->req_cv);
    cq_free(s);
}

static int zk_connect(void *ud, const cq_coord_zk_conf_t *conf, const cq_coord_zk_sink_t *sink,
                      void **ret_sess)
{
    (void)ud;
    *ret_sess = NULL;
    zk_sess_t *s = cq_calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->sink = *sink;
    pthread_mutex_init(&s->node_mu, NULL);
    pthread_mutex_init(&s->gate_mu, NULL);
    pthread_mutex_init(&s->req_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->req_cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = zk_paths(s, conf);
    if (rc < 0)
        goto fail;
    /* The library logs to stderr; errors only (chanqd logs the session events itself). */
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    s->zh = zookeeper_init(conf->hosts, zk_session_watch, (int)conf->session_ms, NULL, s, 0);
    if (!s->zh) {
        rc = errno ? -errno : -EINVAL;
        goto fail;
    }
    *ret_sess = s;
    return 0;
fail:
    zk_sess_free(s);
    return rc;
}

/* ---- requests in flight ------------------------------------------------------------------ */

/* A linked record for a request about to be issued (NULL: out of memory). */
static zk_req_t *req_new(zk_sess_t *s, zk_req_kind_t kind, const void *ud)
{
    zk_req_t *r = cq_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->s = s;
    r->kind = kind;
    r->ud = ud;
    pthread_mutex_lock(&s->req_mu);
    r->next = s->reqs;
    if (s->reqs)
        s->reqs->prev = r;
    s->reqs = r;
    pthread_mutex_unlock(&s->req_mu);
    return r;
}

/* Unlinks and frees r; wakes zk_close's drain after the last one. */
static void req_end(zk_req_t *r)
{
    zk_sess_t *s = r->s;
    pthread_mutex_lock(&s->req_mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        s->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    if (!s->reqs)
        pthread_cond_broadcast(&s->req_cv);
    pthread_mutex_unlock(&s->req_mu);
    cq_free(r);
}

/* The code a completion reports: ZCLOSING once close began (the session's results no longer
 * count), like the library's own fakes; else the request's. */
static int req_rc(const zk_req_t *r, int zrc)
{
    return atomic_load(&r->s->closing) ? ZCLOSING : zrc;
}

static void req_string(int zrc, const char *name, const void *data)
{
    zk_req_t *r = (zk_req_t *)data;
    string_completion_t fn = r->fn.string;
    const void *ud = r->ud;
    zrc = req_rc(r, zrc);
    req_end(r);
    fn(zrc, zrc == ZOK ? name : NULL, ud);
}

static void req_data(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    zk_req_t *r = (zk_req_t *)data;
    data_completion_t fn = r->fn.data;
    const void *ud = r->ud;
    zrc = req_rc(r, zrc);
    req_end(r);
    if (zrc == ZOK)
        fn(zrc, value, len, st, ud);
    else
        fn(zrc, NULL, 0, NULL, ud);
}

static void req_strings(int zrc, const struct String_vector *v, const void *data)
{
    zk_req_t *r = (zk_req_t *)data;
    strings_completion_t fn = r->fn.strings;
    const void *ud = r->ud;
    zrc = req_rc(r, zrc);
    req_end(r);
    fn(zrc, zrc == ZOK ? v : NULL, ud);
}

static void req_stat(int zrc, const struct Stat *st, const void *data)
{
    zk_req_t *r = (zk_req_t *)data;
    stat_completion_t fn = r->fn.stat;
    const void *ud = r->ud;
    zrc = req_rc(r, zrc);
    req_end(r);
    fn(zrc, zrc == ZOK ? st : NULL, ud);
}

static void req_void(int zrc, const void *data)
{
    zk_req_t *r = (zk_req_t *)data;
    void_completion_t fn = r->fn.vd;
    const void *ud = r->ud;
    zrc = req_rc(r, zrc);
    req_end(r);
    fn(zrc, ud);
}

/* What the library never completed: its completion, with ZCLOSING, on the caller's thread. */
static void req_fail(zk_req_t *r)
{
    switch (r->kind) {
    case ZR_STRING:
        req_string(ZCLOSING, NULL, r);
        break;
    case ZR_DATA:
        req_data(ZCLOSING, NULL, 0, NULL, r);
        break;
    case ZR_STRINGS:
        req_strings(ZCLOSING, NULL, r);
        break;
    case ZR_STAT:
        req_stat(ZCLOSING, NULL, r);
        break;
    case ZR_VOID:
        req_void(ZCLOSING, r);
        break;
    }
}

/* CLOCK_MONOTONIC now + ms, for the condition variables on that clock. */
static struct timespec mono_after(uint64_t ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += (time_t)(ms / 1000);
    dl.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    return dl;
}

/* CLOCK_MONOTONIC now + ZK_DRAIN_MS, for req_cv. */
static struct timespec drain_deadline(void)
{
    return mono_after(ZK_DRAIN_MS);
}

/* Waits (at most ZK_DRAIN_MS) until every request issued has had its completion; false when
 * some had none by then. */
static bool req_drain(zk_sess_t *s)
{
    struct timespec dl = drain_deadline();
    pthread_mutex_lock(&s->req_mu);
    while (s->reqs)
        if (pthread_cond_timedwait(&s->req_cv, &s->req_mu, &dl) != 0)
            break;
    bool drained = !s->reqs;
    pthread_mutex_unlock(&s->req_mu);
    return drained;
}

/* Completes (ZCLOSING) whatever the library dropped; its threads are joined. A completion may
 * chain a request: the gate refuses it, so the list only shrinks. */
static void req_fail_all(zk_sess_t *s)
{
    for (;;) {
        pthread_mutex_lock(&s->req_mu);
        zk_req_t *r = s->reqs;
        pthread_mutex_unlock(&s->req_mu);
        if (!r)
            return;
        req_fail(r);
    }
}

/* ---- closing the handle on the completion thread (header, (5)) -------------------------- */

static pthread_key_t closer_key; /* set on a completion thread that closes its handle */
static pthread_once_t closer_once = PTHREAD_ONCE_INIT;
static bool closer_ok;

/* The completion thread that closed the handle is exiting: the library is done with it. */
static void closer_exited(void *arg)
{
    zk_sess_t *s = arg;
    pthread_mutex_lock(&s->req_mu);
    s->closer = ZC_DONE;
    pthread_cond_broadcast(&s->req_cv);
    pthread_mutex_unlock(&s->req_mu);
}

static void closer_init(void)
{
    closer_ok = pthread_key_create(&closer_key, closer_exited) == 0;
}

/* The barrier's completion: every reply before it has been run. Unless zk_close gave up
 * waiting (it closes the handle itself then), close the handle here, on the completion thread. */
static void closer_run(int zrc, const struct Stat *st, const void *data)
{
    (void)zrc, (void)st;
    zk_sess_t *s = (zk_sess_t *)data;
    pthread_mutex_lock(&s->req_mu);
    bool mine = s->closer == ZC_BARRIER;
    if (mine) /* the exit hook tells zk_close when this thread is gone */
        s->closer = pthread_setspecific(closer_key, s) == 0 ? ZC_CLOSING : ZC_CALLER;
    mine = s->closer == ZC_CLOSING;
    pthread_cond_broadcast(&s->req_cv);
    pthread_mutex_unlock(&s->req_mu);
    if (mine)
        zookeeper_close(s->zh); /* joins the IO thread; this one runs what is queued, exits */
}

/* Lets the completion thread close the handle (closer_run), then waits until it exited. false:
 * no barrier could be issued (an expired session refuses every request; its IO thread reads
 * nothing any more) or it had no answer within ZK_DRAIN_MS: the caller closes the handle. */
static bool close_on_completion_thread(zk_sess_t *s)
{
    if (pthread_once(&closer_once, closer_init) != 0 || !closer_ok)
        return false;
    s->closer = ZC_BARRIER;
    if (zoo_aexists(s->zh, "/", 0, closer_run, s) != ZOK)
        return false;
    struct timespec dl = drain_deadline();
    pthread_mutex_lock(&s->req_mu);
    while (s->closer == ZC_BARRIER)
        if (pthread_cond_timedwait(&s->req_cv, &s->req_mu, &dl) != 0)
            break;
    if (s->closer == ZC_BARRIER)
        s->closer = ZC_CALLER;
    while (s->closer == ZC_CLOSING) /* the library's close is bounded (flush 3 s, wait 1.5 s) */
        pthread_cond_wait(&s->req_cv, &s->req_mu);
    bool done = s->closer == ZC_DONE;
    pthread_mutex_unlock(&s->req_mu);
    return done;
}

static void zk_close(void *sess)
{
    zk_sess_t *s = sess;
    if (!s)
        return;
    pthread_mutex_lock(&s->gate_mu);
    atomic_store(&s->closing, true); /* no request from a completion can slip in any more */
    pthread_mutex_unlock(&s->gate_mu);
    /* nothing outstanding: the library has nothing to drop (header, (3)) */
    bool drained = req_drain(s);
    if (s->zh && !(drained && close_on_completion_thread(s)))
        zookeeper_close(s->zh);
    req_fail_all(s);
    zk_sess_free(s);
}

/* ---- the request gates: every asynchronous call goes through one of these -------------- */

static bool gate_enter(zk_sess_t *s)
{
    pthread_mutex_lock(&s->gate_mu);
    if (!atomic_load(&s->closing))
        return true;
    pthread_mutex_unlock(&s->gate_mu);
    return false;
}

static void gate_leave(zk_sess_t *s)
{
    pthread_mutex_unlock(&s->gate_mu);
}

/* gate_enter, then a record for the request (NULL: refused, *zrc says why). */
static zk_req_t *gate_req(zk_sess_t *s, zk_req_kind_t kind, const void *ud, int *zrc)
{
    if (!gate_enter(s)) {
        *zrc = ZCLOSING;
        return NULL;
    }
    zk_req_t *r = req_new(s, kind, ud);
    if (!r) {
        gate_leave(s);
        *zrc = ZSYSTEMERROR;
    }
    return r;
}

/* The request was issued (zrc ZOK: its completion will run) or not (no completion: unlink). */
static int gate_done(zk_sess_t *s, zk_req_t *r, int zrc)
{
    if (zrc != ZOK)
        req_end(r);
    gate_leave(s);
    return zrc;
}

static int zk_acreate(zk_sess_t *s, const char *path, const char *v, int len, int flags,
                      string_completion_t done, const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_STRING, data, &zrc);
    if (!r)
        return zrc;
    r->fn.string = done;
    zrc = zoo_acreate(s->zh, path, v, len, &ZOO_OPEN_ACL_UNSAFE, flags, req_string, r);
    return gate_done(s, r, zrc);
}

static int zk_aget(zk_sess_t *s, const char *path, watcher_fn w, void *wctx, data_completion_t done,
                   const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_DATA, data, &zrc);
    if (!r)
        return zrc;
    r->fn.data = done;
    zrc = w ? zoo_awget(s->zh, path, w, wctx, req_data, r) : zoo_aget(s->zh, path, 0, req_data, r);
    return gate_done(s, r, zrc);
}

static int zk_achildren(zk_sess_t *s, const char *path, watcher_fn w, void *wctx,
                        strings_completion_t done, const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_STRINGS, data, &zrc);
    if (!r)
        return zrc;
    r->fn.strings = done;
    zrc = zoo_awget_children(s->zh, path, w, wctx, req_strings, r);
    return gate_done(s, r, zrc);
}

static int zk_aset(zk_sess_t *s, const char *path, const char *v, int len, int version,
                   stat_completion_t done, const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_STAT, data, &zrc);
    if (!r)
        return zrc;
    r->fn.stat = done;
    zrc = zoo_aset(s->zh, path, v, len, version, req_stat, r);
    return gate_done(s, r, zrc);
}

static int zk_aexists(zk_sess_t *s, const char *path, watcher_fn w, void *wctx,
                      stat_completion_t done, const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_STAT, data, &zrc);
    if (!r)
        return zrc;
    r->fn.stat = done;
    zrc = zoo_awexists(s->zh, path, w, wctx, req_stat, r);
    return gate_done(s, r, zrc);
}

static int zk_adelete(zk_sess_t *s, const char *path, void_completion_t done, const void *data)
{
    int zrc;
    zk_req_t *r = gate_req(s, ZR_VOID, data, &zrc);
    if (!r)
        return zrc;
    r->fn.vd = done;
    zrc = zoo_adelete(s->zh, path, -1, req_void, r);
    return gate_done(s, r, zrc);
}

/* ---- join: the persistent parents, then our member node ----------------------------------- */

/* The parents to create, one prefix of the members path at a time: "/chanq", "/chanq/shards",
 * ".../N", ".../members". */
typedef struct join_ctx {
    zk_sess_t *s;
    size_t at; /* the end of the prefix being created */
    char data[DATA_MAX];
    int len;
} join_ctx_t;

static void join_step(join_ctx_t *j);

static void join_created(int zrc, const char *name, const void *data)
{
    join_ctx_t *j = (join_ctx_t *)data;
    zk_sess_t *s = j->s;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_JOINED, .rc = zk_rc(zrc)};
    if (zrc == ZOK) {
        pthread_mutex_lock(&s->node_mu);
        snprintf(s->node, sizeof s->node, "%s", name);
        pthread_mutex_unlock(&s->node_mu);
        const char *p = strrchr(name, '/');
        p = p ? p + 1 : name;
        ev.seq = strtoull(p + strlen(MEMBER_NAME), NULL, 10);
    }
    cq_free(j);
    zk_post(s, &ev);
}

static void join_parent_done(int zrc, const char *name, const void *data)
{
    (void)name;
    join_ctx_t *j = (join_ctx_t *)data;
    if (zrc != ZOK && zrc != ZNODEEXISTS) {
        zk_sess_t *s = j->s;
        cq_free(j);
        zk_post_rc(s, CQ_COORD_EV_JOINED, zk_rc(zrc));
        return;
    }
    join_step(j);
}

static void join_step(join_ctx_t *j)
{
    zk_sess_t *s = j->s;
    size_t n = strlen(s->members);
    int zrc;
    if (j->at < n) {
        const char *slash = strchr(s->members + j->at + 1, '/');
        j->at = slash ? (size_t)(slash - s->members) : n;
        char path[ZK_PATH_MAX];
        snprintf(path, sizeof path, "%.*s", (int)j->at, s->members);
        zrc = zk_acreate(s, path, "", 0, ZOO_PERSISTENT, join_parent_done, j);
    } else {
        char path[ZK_PATH_MAX + sizeof MEMBER_NAME + 1];
        if (snprintf(path, sizeof path, "%s/" MEMBER_NAME, s->members) >= (int)sizeof path)
            zrc = ZBADARGUMENTS;
        else
            zrc =
                zk_acreate(s, path, j->data, j->len, ZOO_EPHEMERAL | ZOO_SEQUENCE, join_created, j);
    }
    if (zrc != ZOK) {
        cq_free(j);
        zk_post_rc(s, CQ_COORD_EV_JOINED, zk_rc(zrc));
    }
}

static int zk_join(void *sess, const char *text)
{
    zk_sess_t *s = sess;
    join_ctx_t *j = cq_calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    size_t len = strlen(text);
    if (len >= sizeof j->data) {
        cq_free(j);
        return -EINVAL;
    }
    j->s = s;
    memcpy(j->data, text, len + 1);
    j->len = (int)len;
    j->at = 0;
    join_step(j); /* posts EV_JOINED on failure too */
    return 0;
}

/* ---- list: the children, then each child's data ------------------------------------------- */

typedef struct list_ctx {
    zk_sess_t *s;
    int pending; /* data reads not answered yet */
    int rc;
    size_t n;
    cq_coord_member_t m[CQ_COORD_MEMBERS_MAX];
} list_ctx_t;

typedef struct get_ctx {
    list_ctx_t *l;
    uint64_t seq;
} get_ctx_t;

static int member_cmp(const void *a, const void *b)
{
    uint64_t x = ((const cq_coord_member_t *)a)->seq, y = ((const cq_coord_member_t *)b)->seq;
    return x < y ? -1 : x > y;
}

static void list_finish(list_ctx_t *l)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_MEMBERS, .rc = l->rc};
    if (l->rc == 0) {
        qsort(l->m, l->n, sizeof l->m[0], member_cmp);
        ev.members = l->m;
        ev.nmembers = l->n;
    }
    zk_sess_t *s = l->s;
    zk_post(s, &ev);
    cq_free(l);
}

static void list_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    get_ctx_t *g = (get_ctx_t *)data;
    list_ctx_t *l = g->l;
    cq_coord_member_t m;
    /* A member gone since the listing (ZNONODE) or with data we cannot read is skipped: the
     * watch reports the change. */
    if (zrc == ZOK && value && len > 0 && l->n < CQ_COORD_MEMBERS_MAX &&
        cq_coord_member_parse(value, (size_t)len, &m) == 0) {
        m.seq = g->seq;
        l->m[l->n++] = m;
    } else if (zrc != ZOK && zrc != ZNONODE && l->rc == 0) {
        l->rc = zk_rc(zrc);
    }
    cq_free(g);
    if (--l->pending == 0)
        list_finish(l);
}

static void list_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state, (void)path;
    /* Session events reach this watcher too: the session watcher handles them. */
    if (type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT || type == ZOO_CREATED_EVENT)
        zk_post_rc(ctx, CQ_COORD_EV_MEMBERS_CHANGED, 0);
}

static bool member_seq(const char *name, uint64_t *ret)
{
    size_t pl = strlen(MEMBER_NAME);
    if (strncmp(name, MEMBER_NAME, pl) != 0 || !name[pl])
        return false;
    char *end;
    *ret = strtoull(name + pl, &end, 10);
    return *end == '\0';
}

static void list_children(int zrc, const struct String_vector *v, const void *data)
{
    list_ctx_t *l = (list_ctx_t *)data;
    if (zrc != ZOK) {
        l->rc = zk_rc(zrc);
        list_finish(l);
        return;
    }
    l->pending = 1; /* ours, dropped below: the list finishes after the last read */
    for (int i = 0; i < v->count; i++) {
        get_ctx_t *g = cq_malloc(sizeof *g);
        char path[ZK_PATH_MAX];
        if (!g || !member_seq(v->data[i], &g->seq) ||
            snprintf(path, sizeof path, "%s/%s", l->s->members, v->data[i]) >= (int)sizeof path) {
            cq_free(g);
            continue;
        }
        g->l = l;
        l->pending++;
        int rc = zk_aget(l->s, path, NULL, NULL, list_got, g);
        if (rc != ZOK) {
            l->pending--;
            cq_free(g);
            if (l->rc == 0)
                l->rc = zk_rc(rc);
        }
    }
    if (--l->pending == 0)
        list_finish(l);
}

static int zk_list(void *sess)
{
    zk_sess_t *s = sess;
    list_ctx_t *l = cq_calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->s = s;
    int zrc = zk_achildren(s, s->members, list_watch, s, list_children, l);
    if (zrc != ZOK) {
        cq_free(l);
        return zk_rc(zrc);
    }
    return 0;
}

/* ---- the epoch node ----------------------------------------------------------------------- */

typedef struct epoch_ctx {
    zk_sess_t *s;
    bool is_ping;
    uint64_t sent_ms;
} epoch_ctx_t;

static void epoch_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    epoch_ctx_t *e = (epoch_ctx_t *)data;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_EPOCH,
                        .is_ping = e->is_ping,
                        .sent_ms = e->sent_ms,
                        .rc = zk_rc(zrc),
                        .version = -1};
    if (zrc == ZOK) {
        ev.version = st->version;
        ev.rc = cq_coord_epoch_parse(value ? value : "", len > 0 ? (size_t)len : 0, &ev.epoch,
                                     &ev.owner_seq, ev.owner_db, sizeof ev.owner_db);
    }
    zk_sess_t *s = e->s;
    cq_free(e);
    zk_post(s, &ev);
}

static int zk_read_epoch(void *sess, bool is_ping, uint64_t sent_ms)
{
    zk_sess_t *s = sess;
    epoch_ctx_t *e = cq_malloc(sizeof *e);
    if (!e)
        return -ENOMEM;
    *e = (epoch_ctx_t){.s = s, .is_ping = is_ping, .sent_ms = sent_ms};
    int zrc = zk_aget(s, s->epoch, NULL, NULL, epoch_got, e);
    if (zrc != ZOK) {
        cq_free(e);
        return zk_rc(zrc);
    }
    return 0;
}

static void epoch_set_done(int zrc, const void *data)
{
    zk_post_rc((zk_sess_t *)data, CQ_COORD_EV_EPOCH_SET, zk_rc(zrc));
}

static void epoch_created(int zrc, const char *name, const void *data)
{
    (void)name;
    epoch_set_done(zrc, data);
}

static void epoch_written(int zrc, const struct Stat *st, const void *data)
{
    (void)st;
    /* The node vanished under a versioned write: someone else changed it, same as a conflict. */
    epoch_set_done(zrc == ZNONODE ? ZBADVERSION : zrc, data);
}

static int zk_set_epoch(void *sess, const char *text, int32_t version)
{
    zk_sess_t *s = sess;
    int len = (int)strlen(text), zrc;
    if (version < 0)
        zrc = zk_acreate(s, s->epoch, text, len, ZOO_PERSISTENT, epoch_created, s);
    else
        zrc = zk_aset(s, s->epoch, text, len, version, epoch_written, s);
    return zk_rc(zrc);
}

/* ---- leave -------------------------------------------------------------------------------- */

static void left(int zrc, const void *data)
{
    zk_post_rc((zk_sess_t *)data, CQ_COORD_EV_LEFT, zrc == ZNONODE ? 0 : zk_rc(zrc));
}

static int zk_leave(void *sess)
{
    zk_sess_t *s = sess;
    char node[ZK_PATH_MAX];
    pthread_mutex_lock(&s->node_mu);
    memcpy(node, s->node, sizeof node);
    s->node[0] = '\0';
    pthread_mutex_unlock(&s->node_mu);
    if (!node[0]) {
        zk_post_rc(s, CQ_COORD_EV_LEFT, 0);
        return 0;
    }
    return zk_rc(zk_adelete(s, node, left, s));
}

/* ---- persistent paths --------------------------------------------------------------------- */

typedef void (*mk_then_fn)(void *arg, int zrc);

/* Creates every component of path that is missing, one after the other, then calls then(arg,
 * ZOK) - or then(arg, error) at the first failure. */
typedef struct mk_ctx {
    zk_sess_t *s;
    char path[ZK_PATH_MAX];
    size_t at; /* the end of the prefix being created */
    mk_then_fn then;
    void *arg;
} mk_ctx_t;

static void mk_step(mk_ctx_t *m);

static void mk_finish(mk_ctx_t *m, int zrc)
{
    mk_then_fn then = m->then;
    void *arg = m->arg;
    cq_free(m);
    then(arg, zrc);
}

static void mk_created(int zrc, const char *name, const void *data)
{
    (void)name;
    mk_ctx_t *m = (mk_ctx_t *)data;
    if (zrc != ZOK && zrc != ZNODEEXISTS)
        mk_finish(m, zrc);
    else
        mk_step(m);
}

static void mk_step(mk_ctx_t *m)
{
    size_t n = strlen(m->path);
    if (m->at >= n) {
        mk_finish(m, ZOK);
        return;
    }
    const char *slash = strchr(m->path + m->at + 1, '/');
    m->at = slash ? (size_t)(slash - m->path) : n;
    char prefix[ZK_PATH_MAX];
    snprintf(prefix, sizeof prefix, "%.*s", (int)m->at, m->path);
    int zrc = zk_acreate(m->s, prefix, "", 0, ZOO_PERSISTENT, mk_created, m);
    if (zrc != ZOK)
        mk_finish(m, zrc);
}

/* Returns 0 (then will be called, maybe before this returns) or -ENOMEM (it will not). */
static int zk_mkpath(zk_sess_t *s, const char *path, mk_then_fn then, void *arg)
{
    mk_ctx_t *m = cq_calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->s = s;
    snprintf(m->path, sizeof m->path, "%s", path);
    m->then = then;
    m->arg = arg;
    mk_step(m);
    return 0;
}

/* ---- the topic registry ------------------------------------------------------------------- */

typedef struct tlist_ctx {
    zk_sess_t *s;
    int pending;
    int rc;
    size_t n, cap;
    cq_coord_topic_t *t;
} tlist_ctx_t;

typedef struct tget_ctx {
    tlist_ctx_t *l;
    char name[CQ_COORD_TOPIC_MAX + 1];
} tget_ctx_t;

static int topic_cmp(const void *a, const void *b)
{
    return strcmp(((const cq_coord_topic_t *)a)->name, ((const cq_coord_topic_t *)b)->name);
}

static void tlist_finish(tlist_ctx_t *l)
{
    if (l->rc == 0)
        qsort(l->t, l->n, sizeof l->t[0], topic_cmp);
    l->s->sink.topics(l->s->sink.ud, l->s->sink.gen, l->rc, l->t, l->rc == 0 ? l->n : 0);
    cq_free(l->t);
    cq_free(l);
}

static void topics_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state, (void)path;
    zk_sess_t *s = ctx;
    if (type == ZOO_CHILD_EVENT || type == ZOO_CHANGED_EVENT || type == ZOO_DELETED_EVENT ||
        type == ZOO_CREATED_EVENT)
        s->sink.topics_changed(s->sink.ud, s->sink.gen);
}

static void tlist_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    tget_ctx_t *g = (tget_ctx_t *)data;
    tlist_ctx_t *l = g->l;
    cq_coord_topic_t t = {0};
    /* A topic gone since the listing, or with data we cannot read, is skipped. */
    if (zrc == ZOK && value && len > 0 && l->n < l->cap &&
        cq_coord_topic_parse(value, (size_t)len, &t) == 0) {
        memcpy(t.name, g->name, sizeof t.name);
        l->t[l->n++] = t;
    } else if (zrc != ZOK && zrc != ZNONODE && l->rc == 0) {
        l->rc = zk_rc(zrc);
    }
    cq_free(g);
    if (--l->pending == 0)
        tlist_finish(l);
}

static void tlist_get(tlist_ctx_t *l, const char *name)
{
    char path[ZK_PATH_MAX + CQ_COORD_TOPIC_MAX + 2];
    tget_ctx_t *g = cq_malloc(sizeof *g);
    size_t n = strlen(name);
    if (!g || n == 0 || n > CQ_COORD_TOPIC_MAX ||
        snprintf(path, sizeof path, "%s/%s", l->s->topics, name) >= (int)sizeof path) {
        cq_free(g);
        return;
    }
    g->l = l;
    memcpy(g->name, name, n + 1);
    l->pending++;
    /* Watch each topic's data too: an online flag or a retention that changes is a change. */
    int zrc = zk_aget(l->s, path, topics_watch, l->s, tlist_got, g);
    if (zrc != ZOK) {
        l->pending--;
        cq_free(g);
        if (l->rc == 0)
            l->rc = zk_rc(zrc);
    }
}

static void tlist_children(int zrc, const struct String_vector *v, const void *data)
{
    tlist_ctx_t *l = (tlist_ctx_t *)data;
    if (zrc != ZOK) {
        l->rc = zk_rc(zrc);
        tlist_finish(l);
        return;
    }
    l->cap = v->count > 0 ? (size_t)v->count : 1;
    l->t = cq_calloc(l->cap, sizeof l->t[0]);
    if (!l->t) {
        l->rc = -ENOMEM;
        tlist_finish(l);
        return;
    }
    l->pending = 1; /* ours, dropped below */
    for (int i = 0; i < v->count; i++)
        tlist_get(l, v->data[i]);
    if (--l->pending == 0)
        tlist_finish(l);
}

static void tlist_start(void *arg, int zrc)
{
    tlist_ctx_t *l = arg;
    if (zrc == ZOK)
        zrc = zk_achildren(l->s, l->s->topics, topics_watch, l->s, tlist_children, l);
    if (zrc != ZOK) {
        l->rc = zk_rc(zrc);
        tlist_finish(l);
    }
}

static int zk_topics(void *sess)
{
    zk_sess_t *s = sess;
    tlist_ctx_t *l = cq_calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->s = s;
    int rc = zk_mkpath(s, s->topics, tlist_start, l); /* a child watch needs the node */
    if (rc < 0)
        cq_free(l);
    return rc;
}

/* A write: set (any version); missing: create; created meanwhile by another: set again. */
typedef struct tput_ctx {
    zk_sess_t *s;
    char name[CQ_COORD_TOPIC_MAX + 1];
    char path[ZK_PATH_MAX + CQ_COORD_TOPIC_MAX + 2];
    char data[DATA_MAX];
    int len;
    int tries;
} tput_ctx_t;

static void tput_finish(tput_ctx_t *p, int zrc)
{
    zk_sess_t *s = p->s;
    char name[CQ_COORD_TOPIC_MAX + 1];
    memcpy(name, p->name, sizeof name);
    cq_free(p);
    s->sink.put_done(s->sink.ud, s->sink.gen, name, zk_rc(zrc));
}

static void tput_set(tput_ctx_t *p);

static void tput_created(int zrc, const char *name, const void *data)
{
    (void)name;
    tput_ctx_t *p = (tput_ctx_t *)data;
    if (zrc == ZNODEEXISTS && p->tries++ < 3)
        tput_set(p);
    else
        tput_finish(p, zrc);
}

static void tput_written(int zrc, const struct Stat *st, const void *data)
{
    (void)st;
    tput_ctx_t *p = (tput_ctx_t *)data;
    if (zrc == ZNONODE && p->tries++ < 3) {
        zrc = zk_acreate(p->s, p->path, p->data, p->len, ZOO_PERSISTENT, tput_created, p);
        if (zrc == ZOK)
            return;
    }
    tput_finish(p, zrc);
}

static void tput_set(tput_ctx_t *p)
{
    int zrc = zk_aset(p->s, p->path, p->data, p->len, -1, tput_written, p);
    if (zrc != ZOK)
        tput_finish(p, zrc);
}

static void tput_start(void *arg, int zrc)
{
    tput_ctx_t *p = arg;
    if (zrc != ZOK)
        tput_finish(p, zrc);
    else
        tput_set(p);
}

static int zk_put_topic(void *sess, const char *name, const char *text)
{
    zk_sess_t *s = sess;
    size_t nl = strlen(name), tl = strlen(text);
    if (nl == 0 || nl > CQ_COORD_TOPIC_MAX || tl >= DATA_MAX)
        return -EINVAL;
    tput_ctx_t *p = cq_calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->s = s;
    memcpy(p->name, name, nl + 1);
    snprintf(p->path, sizeof p->path, "%s/%s", s->topics, name);
    memcpy(p->data, text, tl + 1);
    p->len = (int)tl;
    int rc = zk_mkpath(s, s->topics, tput_start, p);
    if (rc < 0)
        cq_free(p);
    return rc;
}

/* ---- one node on a session of its own (cq_zknode.h) -------------------------------------
 *
 * For the manager's state store (src/mgr/zkstore.c), which keeps its document in one node and
 * must not see this library. The blocking calls each issue one asynchronous request through
 * the gates and wait for its completion on a condition variable, with a safety stop. The
 * waiter and the completion share the call record (two references), so a completion arriving
 * after the caller gave up frees it. The watch is an exists-watch (it fires on creation, change
 * and deletion); the session's expiry is reported through the same callback.
 */

struct cq_zknode {
    zk_sess_t *sess;
    cq_zknode_cb_t cb;
    void *arg;
    pthread_mutex_t mu; /* the calls */
    pthread_cond_t cv;  /* a call completed */
    char parent[ZK_PATH_MAX];
    char path[ZK_PATH_MAX];
    uint32_t session_ms;
};

typedef struct zn_call {
    cq_zknode_t *n;
    int refs; /* under n->mu: the waiter and the completion */
    bool done;
    int zrc;
    char *data; /* get: owned copy */
    int len;
    int64_t ver;
} zn_call_t;

static void zn_sink_post(void *ud, uint64_t gen, const cq_coord_ev_t *ev)
{
    (void)gen;
    cq_zknode_t *n = ud;
    if (ev->type == CQ_COORD_EV_SESSION && ev->arg == CQ_COORD_SESS_EXPIRED)
        n->cb(n->arg, CQ_ZKNODE_EXPIRED);
}

static void zn_sink_topics(void *ud, uint64_t gen, int rc, const cq_coord_topic_t *t, size_t n)
{
    (void)ud, (void)gen, (void)rc, (void)t, (void)n;
}

static void zn_sink_changed(void *ud, uint64_t gen)
{
    (void)ud, (void)gen;
}

static void zn_sink_put(void *ud, uint64_t gen, const char *name, int rc)
{
    (void)ud, (void)gen, (void)name, (void)rc;
}

static zn_call_t *zn_call_new(cq_zknode_t *n)
{
    zn_call_t *c = cq_calloc(1, sizeof *c);
    if (c) {
        c->n = n;
        c->refs = 2;
        c->ver = -1;
    }
    return c;
}

/* Drops one reference (n->mu held); the last one frees. */
static void zn_call_unref(zn_call_t *c)
{
    if (--c->refs == 0) {
        cq_free(c->data);
        cq_free(c);
    }
}

/* The completion side: records the result, wakes the waiter, drops its reference. */
static void zn_call_finish(zn_call_t *c, int zrc, const char *data, int len, int64_t ver)
{
    cq_zknode_t *n = c->n;
    pthread_mutex_lock(&n->mu);
    c->zrc = zrc;
    c->ver = ver;
    if (zrc == ZOK && data && len > 0) {
        c->data = cq_malloc((size_t)len + 1);
        if (c->data) {
            memcpy(c->data, data, (size_t)len);
            c->data[len] = '\0';
            c->len = len;
        } else {
            c->zrc = ZSYSTEMERROR;
        }
    }
    c->done = true;
    pthread_cond_broadcast(&n->cv);
    zn_call_unref(c);
    pthread_mutex_unlock(&n->mu);
}

/* The waiter side: zrc as issued (the request never went out: the completion's reference is
 * dropped here too), then waits. Returns the request's ZooKeeper code, ZOPERATIONTIMEOUT at the
 * safety stop. The caller drops its reference with zn_call_done. */
static int zn_call_wait(cq_zknode_t *n, zn_call_t *c, int issued)
{
    pthread_mutex_lock(&n->mu);
    if (issued != ZOK) {
        c->refs--; /* no completion will come */
        c->done = true;
        c->zrc = issued;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    uint64_t wait_ms = (uint64_t)n->session_ms + 5000;
    dl.tv_sec += (time_t)(wait_ms / 1000);
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    while (!c->done)
        if (pthread_cond_timedwait(&n->cv, &n->mu, &dl) != 0)
            break;
    int zrc = c->done ? c->zrc : ZOPERATIONTIMEOUT;
    pthread_mutex_unlock(&n->mu);
    return zrc;
}

static void zn_call_done(cq_zknode_t *n, zn_call_t *c)
{
    pthread_mutex_lock(&n->mu);
    zn_call_unref(c);
    pthread_mutex_unlock(&n->mu);
}

static void zn_mk_done(void *arg, int zrc)
{
    zn_call_finish(arg, zrc, NULL, 0, -1);
}

static void zn_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    zn_call_finish((zn_call_t *)data, zrc, value, len, zrc == ZOK && st ? st->version : -1);
}

static void zn_created(int zrc, const char *name, const void *data)
{
    (void)name;
    zn_call_finish((zn_call_t *)data, zrc, NULL, 0, zrc == ZOK ? 0 : -1);
}

static void zn_written(int zrc, const struct Stat *st, const void *data)
{
    zn_call_finish((zn_call_t *)data, zrc, NULL, 0, zrc == ZOK && st ? st->version : -1);
}

int cq_zknode_mkparents(cq_zknode_t *n)
{
    zn_call_t *c = zn_call_new(n);
    if (!c)
        return -ENOMEM;
    int rc = zk_mkpath(n->sess, n->parent, zn_mk_done, c);
    int zrc = zn_call_wait(n, c, rc < 0 ? ZSYSTEMERROR : ZOK);
    zn_call_done(n, c);
    return zk_rc(zrc);
}

int cq_zknode_get(cq_zknode_t *n, char **ret_data, size_t *ret_len, int64_t *ret_ver)
{
    zn_call_t *c = zn_call_new(n);
    if (!c)
        return -ENOMEM;
    int rc = zk_rc(zn_call_wait(n, c, zk_aget(n->sess, n->path, NULL, NULL, zn_got, c)));
    if (rc == 0) {
        char *data = c->data ? c->data : cq_calloc(1, 1);
        if (data) {
            c->data = NULL;
            *ret_data = data;
            *ret_len = (size_t)c->len;
            *ret_ver = c->ver;
        } else {
            rc = -ENOMEM;
        }
    }
    zn_call_done(n, c);
    return rc;
}

int cq_zknode_create(cq_zknode_t *n, const char *data, size_t len, int64_t *ret_ver)
{
    if (len > INT32_MAX)
        return -EINVAL;
    zn_call_t *c = zn_call_new(n);
    if (!c)
        return -ENOMEM;
    int zrc = zk_acreate(n->sess, n->path, data, (int)len, ZOO_PERSISTENT, zn_created, c);
    int rc = zk_rc(zn_call_wait(n, c, zrc));
    if (rc == 0)
        *ret_ver = c->ver;
    zn_call_done(n, c);
    return rc;
}

int cq_zknode_set(cq_zknode_t *n, const char *data, size_t len, int64_t expect_ver,
                  int64_t *ret_ver)
{
    if (len > INT32_MAX || expect_ver < 0)
        return -EINVAL;
    zn_call_t *c = zn_call_new(n);
    if (!c)
        return -ENOMEM;
    int zrc = ZBADVERSION; /* beyond INT32_MAX: no node has that version */
    if (expect_ver <= INT32_MAX)
        zrc = zk_aset(n->sess, n->path, data, (int)len, (int)expect_ver, zn_written, c);
    int rc = zk_rc(zn_call_wait(n, c, zrc));
    if (rc == 0)
        *ret_ver = c->ver;
    zn_call_done(n, c);
    return rc;
}

static void zn_exists_done(int zrc, const struct Stat *stat, const void *data)
{
    (void)zrc, (void)stat, (void)data; /* the watch is what matters */
}

static void zn_watch_fn(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state, (void)path;
    if (type != ZOO_CREATED_EVENT && type != ZOO_CHANGED_EVENT && type != ZOO_DELETED_EVENT)
        return; /* session events: zn_sink_post */
    cq_zknode_t *n = ctx;
    n->cb(n->arg, CQ_ZKNODE_CHANGED);
}

int cq_zknode_watch(cq_zknode_t *n)
{
    return zk_rc(zk_aexists(n->sess, n->path, zn_watch_fn, n, zn_exists_done, NULL));
}

void cq_zknode_close(cq_zknode_t *n)
{
    if (!n)
        return;
    zk_close(n->sess); /* completions (ZCLOSING) and watchers are done when it returns */
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    cq_free(n);
}

int cq_zknode_open(const char *hosts, const char *root, const char *name, uint32_t session_ms,
                   cq_zknode_cb_t cb, void *arg, cq_zknode_t **ret)
{
    *ret = NULL;
    size_t nl = strlen(name);
    if (nl == 0 || name[0] == '/' || name[nl - 1] == '/' || strlen(root) + 1 + nl >= ZK_PATH_MAX)
        return -EINVAL;
    cq_zknode_t *n = cq_calloc(1, sizeof *n);
    if (!n)
        return -ENOMEM;
    n->cb = cb;
    n->arg = arg;
    n->session_ms = session_ms;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    snprintf(n->path, sizeof n->path, "%s/%s", root, name);
    snprintf(n->parent, sizeof n->parent, "%.*s", (int)(strrchr(n->path, '/') - n->path), n->path);
    cq_coord_zk_sink_t sink = {.post = zn_sink_post,
                               .topics = zn_sink_topics,
                               .topics_changed = zn_sink_changed,
                               .put_done = zn_sink_put,
                               .ud = n};
    cq_coord_zk_conf_t conf = {.hosts = hosts, .root = root, .session_ms = session_ms};
    void *sess = NULL;
    int rc = zk_connect(NULL, &conf, &sink, &sess); /* checks root: -EINVAL */
    n->sess = sess;
    if (rc < 0) {
        cq_zknode_close(n);
        return rc;
    }
    *ret = n;
    return 0;
}

const cq_coord_zk_ops_t cq_coord_zk_libzk = {
    .connect = zk_connect,
    .join = zk_join,
    .list = zk_list,
    .read_epoch = zk_read_epoch,
    .set_epoch = zk_set_epoch,
    .leave = zk_leave,
    .topics = zk_topics,
    .put_topic = zk_put_topic,
    .close = zk_close,
};

/* ---- a group membership (cq_zkgroup.h) ----------------------------------------------------
 *
 * One session at a time (grp_sess_t), on a zk_sess_t of its own whose sink is the group's
 * (grp_post gets its session events). Whatever a session does once it is connected runs on its
 * completion thread, through the gates: the join, the listings, the claims' later steps. The
 * group's own thread (grp_keeper) only replaces an expired session: it closes the old one (its
 * threads joined, its completions run) before it opens the next, so two sessions' callbacks
 * never interleave. g->mu guards g->cur and every session's state; it is held while a session
 * is opened, so that session's first event waits until g->cur names it, and while a claim
 * issues its first request, so the keeper cannot free the session meanwhile. No callback of
 * the caller's runs under g->mu. The pure parts (names, paths, what a listing means) are in
 * zkgroup.c.
 */

/* Our member node: none yet, create in flight, its create's answer lost with the connection
 * (the node may exist: the next listing looks for it by the session id in its name), ours. */
typedef enum { GJ_NONE, GJ_CREATING, GJ_UNSURE, GJ_JOINED } grp_join_t;

typedef struct grp_home {
    struct grp_home *next;
    cq_zkgroup_t *g;
    char name[CQ_ZKGROUP_NAME_MAX + 1];
    char path[CQ__ZKGROUP_FULL_MAX];
} grp_home_t;

typedef struct grp_sess {
    cq_zkgroup_t *g;
    zk_sess_t *zs;
    uint64_t sessid; /* once connected */
    grp_join_t join;
    uint64_t self_seq; /* GJ_JOINED */
    int join_tries;    /* creates issued since a listing last showed ours (GRP_JOIN_TRIES) */
    bool connected, expired;
    bool listing, relist;        /* one listing at a time; a change meanwhile: one more */
    cq_zkgroup_state_t reported; /* the last state reported (0: none) */
} grp_sess_t;

struct cq_zkgroup {
    cq_zkgroup_sink_t sink;
    char *hosts;
    char path[CQ_ZKGROUP_PATH_MAX];
    char homes[CQ__ZKGROUP_FULL_MAX];
    char data[CQ_ZKGROUP_DATA_MAX + 1];
    int len;
    uint32_t session_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* reopen or closing (keeper), an expiry (kill_session); monotonic */
    grp_sess_t *cur;   /* NULL while the keeper replaces it, and once closing */
    bool reopen, closing;
    pthread_t keeper;
    grp_home_t *home_list; /* the homes claimed: their watches' contexts, until close */
    size_t nhomes;
    _Atomic uint64_t sessions, expiries, lists, truncations;
};

typedef enum { GN_NONE, GN_JOIN, GN_LIST } grp_next_t;

/* Creates of our node before a listing shows it, after which the session gives up joining: a
 * name it cannot read back (a counter past 2^31), or a node that some other client deletes as
 * soon as it is made, must not create nodes for ever. */
#define GRP_JOIN_TRIES 8

/* g->mu held: gs is the group's session, not expired, and the group is not closing. */
static bool grp_live(const grp_sess_t *gs)
{
    return gs->g->cur == gs && !gs->expired && !gs->g->closing;
}

static bool grp_is_live(grp_sess_t *gs)
{
    pthread_mutex_lock(&gs->g->mu);
    bool live = grp_live(gs);
    pthread_mutex_unlock(&gs->g->mu);
    return live;
}

static bool zrc_lost(int zrc)
{
    return zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT;
}

static void grp_ignore(int zrc, const void *data)
{
    (void)zrc, (void)data;
}

static void grp_delete(grp_sess_t *gs, const cq__zkgroup_child_t *c)
{
    char path[CQ__ZKGROUP_FULL_MAX];
    if (cq__zkgroup_child_path(gs->g->path, c, path, sizeof path) == 0)
        zk_adelete(gs->zs, path, grp_ignore, NULL); /* best effort: the session takes it anyway */
}

static void grp_list(grp_sess_t *gs);
static void grp_join(grp_sess_t *gs);

static void grp_do(grp_sess_t *gs, grp_next_t next)
{
    if (next == GN_JOIN)
        grp_join(gs);
    else if (next == GN_LIST)
        grp_list(gs);
}

/* ---- the group: joining ------------------------------------------------------------------- */

/* The join did not complete: after a lost answer the node may exist (a listing tells); after a
 * parent deleted meanwhile, try again; else wait for the next CONNECTED. */
static void grp_join_failed(grp_sess_t *gs, int zrc)
{
    grp_next_t next = GN_NONE;
    pthread_mutex_lock(&gs->g->mu);
    if (zrc_lost(zrc)) {
        gs->join = GJ_UNSURE;
        next = gs->connected ? GN_LIST : GN_NONE;
    } else {
        gs->join = GJ_NONE;
        if (zrc == ZNONODE)
            next = GN_JOIN;
    }
    pthread_mutex_unlock(&gs->g->mu);
    grp_do(gs, next);
}

static void grp_join_created(int zrc, const char *name, const void *data)
{
    grp_sess_t *gs = (grp_sess_t *)data;
    cq__zkgroup_child_t c;
    const char *base = name ? strrchr(name, '/') : NULL;
    if (zrc != ZOK || !base || !cq__zkgroup_child_parse(base + 1, &c)) {
        grp_join_failed(gs, zrc == ZOK ? ZCONNECTIONLOSS : zrc); /* unparsable: look for it */
        return;
    }
    pthread_mutex_lock(&gs->g->mu);
    bool twice = gs->join == GJ_JOINED; /* a listing found an earlier one of ours meanwhile */
    if (!twice) {                       /* join_tries is reset once a listing shows the node */
        gs->join = GJ_JOINED;
        gs->self_seq = c.seq;
    }
    pthread_mutex_unlock(&gs->g->mu);
    if (twice)
        grp_delete(gs, &c);
    else
        grp_list(gs);
}

static void grp_join_create(void *arg, int zrc)
{
    grp_sess_t *gs = arg;
    char prefix[CQ__ZKGROUP_FULL_MAX];
    pthread_mutex_lock(&gs->g->mu);
    uint64_t sessid = gs->sessid;
    pthread_mutex_unlock(&gs->g->mu);
    if (zrc == ZOK && cq__zkgroup_prefix(gs->g->path, sessid, prefix, sizeof prefix) < 0)
        zrc = ZBADARGUMENTS;
    if (zrc == ZOK)
        zrc = zk_acreate(gs->zs, prefix, gs->g->data, gs->g->len, ZOO_EPHEMERAL | ZOO_SEQUENCE,
                         grp_join_created, gs);
    if (zrc != ZOK)
        grp_join_failed(gs, zrc);
}

/* The persistent parents, then our EPHEMERAL|SEQUENCE node. */
static void grp_join(grp_sess_t *gs)
{
    pthread_mutex_lock(&gs->g->mu);
    bool go = grp_live(gs) && (gs->join == GJ_NONE || gs->join == GJ_UNSURE) &&
              gs->join_tries < GRP_JOIN_TRIES;
    if (go) {
        gs->join = GJ_CREATING;
        gs->join_tries++;
    }
    pthread_mutex_unlock(&gs->g->mu);
    if (go && zk_mkpath(gs->zs, gs->g->path, grp_join_create, gs) < 0)
        grp_join_failed(gs, ZSYSTEMERROR);
}

/* ---- the group: listing ------------------------------------------------------------------- */

typedef struct grp_get {
    struct grp_list *l;
    size_t i; /* in l->m */
    bool ok;
} grp_get_t;

typedef struct grp_list {
    grp_sess_t *gs;
    int pending; /* data reads not answered yet, + 1 while they are issued */
    int zrc;     /* the first error of a read, or ZOK */
    bool truncated;
    size_t n; /* members read (m and gets) */
    cq_zkgroup_member_t *m;
    grp_get_t *gets;
} grp_list_t;

static void grp_list_free(grp_list_t *l)
{
    if (l) {
        cq_free(l->m);
        cq_free(l->gets);
        cq_free(l);
    }
}

/* The listing is over: list again when a change came meanwhile or its answer was lost. */
static void grp_list_end(grp_sess_t *gs, int zrc)
{
    pthread_mutex_lock(&gs->g->mu);
    gs->listing = false;
    bool again = gs->relist || zrc_lost(zrc);
    gs->relist = false;
    pthread_mutex_unlock(&gs->g->mu);
    if (again)
        grp_list(gs);
}

/* Every read answered: the members whose data was read, to the sink. */
static void grp_list_done(grp_list_t *l)
{
    grp_sess_t *gs = l->gs;
    cq_zkgroup_t *g = gs->g;
    int zrc = l->zrc;
    if (zrc == ZOK && grp_is_live(gs)) {
        size_t k = 0;
        for (size_t i = 0; i < l->n; i++)
            if (l->gets[i].ok)
                l->m[k++] = l->m[i];
        atomic_fetch_add(&g->lists, 1);
        if (l->truncated)
            atomic_fetch_add(&g->truncations, 1);
        g->sink.members(g->sink.ud, l->m, k);
    }
    grp_list_free(l);
    grp_list_end(gs, zrc);
}

static void grp_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    (void)st;
    grp_get_t *get = (grp_get_t *)data;
    grp_list_t *l = get->l;
    /* Gone since the listing (ZNONODE) or over the limit: left out; the watch reports the
     * change. */
    if (zrc == ZOK && len <= CQ_ZKGROUP_DATA_MAX) {
        cq_zkgroup_member_t *m = &l->m[get->i];
        m->len = len > 0 ? (size_t)len : 0;
        if (m->len)
            memcpy(m->data, value, m->len);
        m->data[m->len] = '\0';
        get->ok = true;
    } else if (zrc != ZOK && zrc != ZNONODE && l->zrc == ZOK) {
        l->zrc = zrc;
    }
    if (--l->pending == 0)
        grp_list_done(l);
}

/* The children as members (c sorted and planned): read each listed one's data. */
static void grp_list_read(grp_list_t *l, const cq__zkgroup_child_t *c, size_t n)
{
    grp_sess_t *gs = l->gs;
    l->pending = 1; /* ours, dropped below: done after the last read */
    for (size_t i = 0; i < n; i++) {
        char path[CQ__ZKGROUP_FULL_MAX];
        if (c[i].role == CQ__ZKG_EXTRA)
            grp_delete(gs, &c[i]);
        if ((c[i].role != CQ__ZKG_MEMBER && c[i].role != CQ__ZKG_SELF) ||
            cq__zkgroup_child_path(gs->g->path, &c[i], path, sizeof path) < 0)
            continue;
        size_t k = l->n++;
        l->m[k].seq = c[i].seq;
        l->m[k].self = c[i].role == CQ__ZKG_SELF;
        l->gets[k] = (grp_get_t){.l = l, .i = k};
        l->pending++;
        int zrc = zk_aget(gs->zs, path, NULL, NULL, grp_got, &l->gets[k]);
        if (zrc != ZOK) {
            l->pending--;
            if (l->zrc == ZOK)
                l->zrc = zrc;
        }
    }
    if (--l->pending == 0)
        grp_list_done(l);
}

/* What the listing means for our node (g->mu held): GN_LIST to read and report it, GN_JOIN
 * when ours is not there (create it), GN_NONE while our create is in flight (no report). */
static grp_next_t grp_list_plan(grp_sess_t *gs, cq__zkgroup_child_t *c, size_t n,
                                cq__zkgroup_plan_t *p)
{
    cq__zkgroup_plan(c, n, gs->sessid, gs->join == GJ_JOINED, gs->self_seq, CQ_ZKGROUP_MEMBERS_MAX,
                     p);
    if (gs->join != GJ_JOINED && gs->join != GJ_UNSURE)
        return GN_NONE;
    if (!p->found) { /* never created, or deleted by someone: a new node */
        gs->join = GJ_NONE;
        return GN_JOIN;
    }
    gs->join = GJ_JOINED;
    gs->self_seq = p->self_seq;
    gs->join_tries = 0;
    return GN_LIST;
}

static void grp_children(int zrc, const struct String_vector *v, const void *data)
{
    grp_list_t *l = (grp_list_t *)data;
    grp_sess_t *gs = l->gs;
    size_t cap = zrc == ZOK && v->count > 0 ? (size_t)v->count : 1, n = 0;
    cq__zkgroup_child_t *c = zrc == ZOK ? cq_calloc(cap, sizeof *c) : NULL;
    if (zrc == ZOK && !c)
        zrc = ZSYSTEMERROR;
    for (int i = 0; zrc == ZOK && i < v->count; i++)
        if (cq__zkgroup_child_parse(v->data[i], &c[n])) /* others' nodes are not members */
            n++;
    cq__zkgroup_plan_t p;
    grp_next_t next = GN_NONE;
    if (zrc == ZOK) {
        pthread_mutex_lock(&gs->g->mu);
        next = grp_list_plan(gs, c, n, &p);
        pthread_mutex_unlock(&gs->g->mu);
        size_t slots = p.listed ? p.listed : 1;
        l->truncated = p.truncated;
        l->m = next == GN_LIST ? cq_calloc(slots, sizeof *l->m) : NULL;
        l->gets = next == GN_LIST ? cq_calloc(slots, sizeof *l->gets) : NULL;
        if (next == GN_LIST && (!l->m || !l->gets))
            zrc = ZSYSTEMERROR;
    }
    if (zrc == ZOK && next == GN_LIST) {
        grp_list_read(l, c, n);
    } else {
        grp_list_free(l);
        grp_list_end(gs, zrc);
        grp_do(gs, next == GN_JOIN ? next : GN_NONE);
    }
    cq_free(c);
}

static void grp_list_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state, (void)path;
    /* Session events reach this watcher too: grp_post has them. */
    if (type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT || type == ZOO_CREATED_EVENT)
        grp_list(ctx);
}

/* Lists the children with a watch, then reads the members' data (grp_children). */
static void grp_list(grp_sess_t *gs)
{
    pthread_mutex_lock(&gs->g->mu);
    bool go = grp_live(gs) && !gs->listing;
    if (go)
        gs->listing = true;
    else if (grp_live(gs))
        gs->relist = true;
    pthread_mutex_unlock(&gs->g->mu);
    if (!go)
        return;
    grp_list_t *l = cq_calloc(1, sizeof *l);
    int zrc = ZSYSTEMERROR;
    if (l) {
        l->gs = gs;
        zrc = zk_achildren(gs->zs, gs->g->path, grp_list_watch, gs, grp_children, l);
    }
    if (zrc != ZOK) {
        cq_free(l);
        grp_list_end(gs, zrc);
    }
}

/* ---- the group: its session --------------------------------------------------------------- */

static cq_zkgroup_state_t grp_state(const cq_coord_ev_t *ev)
{
    if (ev->arg == CQ_COORD_SESS_CONNECTED)
        return CQ_ZKGROUP_CONNECTED;
    return ev->arg == CQ_COORD_SESS_EXPIRED ? CQ_ZKGROUP_EXPIRED : CQ_ZKGROUP_DISCONNECTED;
}

/* A session event (on the session's completion thread): reported once per change of state;
 * CONNECTED joins (or lists again), EXPIRED wakes the keeper. */
static void grp_post(void *ud, uint64_t gen, const cq_coord_ev_t *ev)
{
    (void)gen;
    grp_sess_t *gs = ud;
    cq_zkgroup_t *g = gs->g;
    if (ev->type != CQ_COORD_EV_SESSION)
        return;
    cq_zkgroup_state_t st = grp_state(ev);
    grp_next_t next = GN_NONE;
    pthread_mutex_lock(&g->mu);
    bool live = grp_live(gs), report = live && gs->reported != st;
    if (report)
        gs->reported = st;
    gs->connected = st == CQ_ZKGROUP_CONNECTED;
    if (live && st == CQ_ZKGROUP_CONNECTED) {
        gs->sessid = (uint64_t)zoo_client_id(gs->zs->zh)->client_id;
        next = gs->join == GJ_NONE ? GN_JOIN : gs->join == GJ_CREATING ? GN_NONE : GN_LIST;
    } else if (live && st == CQ_ZKGROUP_EXPIRED) {
        gs->expired = true;
        g->reopen = true;
        atomic_fetch_add(&g->expiries, 1);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (report)
        g->sink.session(g->sink.ud, st, st == CQ_ZKGROUP_CONNECTED ? ev->session_ms : 0);
    grp_do(gs, next);
}

/* g->mu held: a new session becomes g->cur (its events wait for the mutex). */
static int grp_sess_open(cq_zkgroup_t *g)
{
    grp_sess_t *gs = cq_calloc(1, sizeof *gs);
    if (!gs)
        return -ENOMEM;
    gs->g = g;
    cq_coord_zk_sink_t sink = {.post = grp_post,
                               .topics = zn_sink_topics,
                               .topics_changed = zn_sink_changed,
                               .put_done = zn_sink_put,
                               .ud = gs};
    cq_coord_zk_conf_t conf = {.hosts = g->hosts, .root = g->path, .session_ms = g->session_ms};
    void *zs = NULL;
    int rc = zk_connect(NULL, &conf, &sink, &zs);
    if (rc < 0) {
        cq_free(gs);
        return rc;
    }
    gs->zs = zs;
    g->cur = gs;
    atomic_fetch_add(&g->sessions, 1);
    return 0;
}

/* Not under g->mu: joins the session's threads, whose last completions may take it. */
static void grp_sess_close(grp_sess_t *gs)
{
    if (gs) {
        zk_close(gs->zs);
        cq_free(gs);
    }
}

/* The group's thread: replaces an expired session (retries each second when it cannot). */
static void *grp_keeper(void *arg)
{
    cq_zkgroup_t *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->closing) {
        if (!g->reopen) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        grp_sess_t *old = g->cur;
        g->cur = NULL;
        pthread_mutex_unlock(&g->mu);
        grp_sess_close(old);
        pthread_mutex_lock(&g->mu);
        if (g->closing)
            break;
        if (grp_sess_open(g) == 0) {
            g->reopen = false;
        } else {
            struct timespec dl = mono_after(1000);
            pthread_cond_timedwait(&g->cv, &g->mu, &dl);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- the group: homes --------------------------------------------------------------------- */

typedef struct grp_claim {
    grp_sess_t *gs;
    grp_home_t *h;
    char data[CQ_ZKGROUP_DATA_MAX + 1]; /* ours to create, then the holder's */
    int len;
    int tries; /* steps repeated because the home or its parent vanished meanwhile */
    cq_zkgroup_claim_fn cb;
    void *ud;
} grp_claim_t;

static void grp_home_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)state, (void)path;
    grp_home_t *h = ctx;
    cq_zkgroup_t *g = h->g;
    if (type != ZOO_DELETED_EVENT) /* session events; a change (homes are never rewritten) */
        return;
    pthread_mutex_lock(&g->mu);
    bool closing = g->closing;
    pthread_mutex_unlock(&g->mu);
    if (!closing && g->sink.home_gone)
        g->sink.home_gone(g->sink.ud, h->name);
}

static void claim_end(grp_claim_t *c, int zrc, const char *value, int len, bool mine)
{
    cq_zkgroup_t *g = c->gs->g;
    int rc = zk_rc(zrc);
    if (zrc == ZOK && len > CQ_ZKGROUP_DATA_MAX)
        rc = -EIO;
    size_t n = rc == 0 && len > 0 ? (size_t)len : 0;
    if (n)
        memcpy(c->data, value, n);
    c->data[n] = '\0';
    pthread_mutex_lock(&g->mu);
    bool closing = g->closing;
    pthread_mutex_unlock(&g->mu);
    if (!closing)
        c->cb(c->ud, c->h->name, rc, rc == 0 ? c->data : NULL, n, rc == 0 && mine);
    cq_free(c);
}

static int claim_create(grp_claim_t *c);

static void claim_got(int zrc, const char *value, int len, const struct Stat *st, const void *data)
{
    grp_claim_t *c = (grp_claim_t *)data;
    if (zrc == ZNONODE && c->tries++ < 3) { /* its holder left since: take it */
        zrc = claim_create(c);
        if (zrc == ZOK)
            return;
    }
    bool mine = false;
    if (zrc == ZOK && st) {
        pthread_mutex_lock(&c->gs->g->mu);
        mine = (uint64_t)st->ephemeralOwner == c->gs->sessid;
        pthread_mutex_unlock(&c->gs->g->mu);
    }
    claim_end(c, zrc, value, len, mine);
}

static void claim_mk_done(void *arg, int zrc)
{
    grp_claim_t *c = arg;
    if (zrc == ZOK)
        zrc = claim_create(c);
    if (zrc != ZOK)
        claim_end(c, zrc, NULL, 0, false);
}

/* Created, or held already: read the holder's data and watch the home. No parent: create the
 * parents first. */
static void claim_created(int zrc, const char *name, const void *data)
{
    (void)name;
    grp_claim_t *c = (grp_claim_t *)data;
    if (zrc == ZOK || zrc == ZNODEEXISTS) {
        zrc = zk_aget(c->gs->zs, c->h->path, grp_home_watch, c->h, claim_got, c);
    } else if (zrc == ZNONODE && c->tries++ < 3) {
        if (zk_mkpath(c->gs->zs, c->gs->g->homes, claim_mk_done, c) == 0)
            return;
        zrc = ZSYSTEMERROR;
    }
    if (zrc != ZOK)
        claim_end(c, zrc, NULL, 0, false);
}

static int claim_create(grp_claim_t *c)
{
    return zk_acreate(c->gs->zs, c->h->path, c->data, c->len, ZOO_EPHEMERAL, claim_created, c);
}

/* g->mu held: the home's record (its watch's context), found or added. */
static int grp_home(cq_zkgroup_t *g, const char *name, grp_home_t **ret)
{
    for (grp_home_t *h = g->home_list; h; h = h->next) {
        if (strcmp(h->name, name) == 0) { /* the same context: the library keeps one watch */
            *ret = h;
            return 0;
        }
    }
    if (g->nhomes == CQ_ZKGROUP_HOMES_MAX)
        return CQ_ELIMIT;
    grp_home_t *h = cq_calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->g = g;
    snprintf(h->name, sizeof h->name, "%s", name);
    if (cq__zkgroup_homes_path(g->path, name, h->path, sizeof h->path) < 0) {
        cq_free(h);
        return -EINVAL;
    }
    h->next = g->home_list;
    g->home_list = h;
    g->nhomes++;
    *ret = h;
    return 0;
}

int cq_zkgroup_claim(cq_zkgroup_t *g, const char *name, const char *data, cq_zkgroup_claim_fn cb,
                     void *ud)
{
    size_t len = data ? strlen(data) : 0;
    if (!cb || cq__zkgroup_name_check(name) < 0 || len > CQ_ZKGROUP_DATA_MAX)
        return -EINVAL;
    grp_claim_t *c = cq_calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    memcpy(c->data, data ? data : "", len + 1);
    c->len = (int)len;
    c->cb = cb;
    c->ud = ud;
    pthread_mutex_lock(&g->mu);
    int rc = -ENOTCONN;
    if (g->cur && grp_live(g->cur))
        rc = grp_home(g, name, &c->h);
    if (rc == 0) { /* under the mutex: the keeper does not close this session meanwhile */
        c->gs = g->cur;
        rc = zk_rc(claim_create(c));
    }
    pthread_mutex_unlock(&g->mu);
    if (rc < 0)
        cq_free(c);
    return rc;
}

/* ---- the group: open, close, stats -------------------------------------------------------- */

static void grp_free(cq_zkgroup_t *g)
{
    for (grp_home_t *h = g->home_list, *next; h; h = next) {
        next = h->next;
        cq_free(h);
    }
    cq_free(g->hosts);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    cq_free(g);
}

static cq_zkgroup_t *grp_new(const cq_zkgroup_conf_t *conf, const cq_zkgroup_sink_t *sink)
{
    cq_zkgroup_t *g = cq_calloc(1, sizeof *g);
    size_t hl = strlen(conf->hosts);
    char *hosts = cq_malloc(hl + 1);
    if (!g || !hosts) {
        cq_free(g);
        cq_free(hosts);
        return NULL;
    }
    memcpy(hosts, conf->hosts, hl + 1);
    g->hosts = hosts;
    g->sink = *sink;
    snprintf(g->path, sizeof g->path, "%s", conf->path);
    cq__zkgroup_homes_path(conf->path, NULL, g->homes, sizeof g->homes); /* path checked */
    g->len = (int)strlen(conf->data);
    memcpy(g->data, conf->data, (size_t)g->len + 1);
    g->session_ms = conf->session_ms;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    return g;
}

int cq_zkgroup_open(const cq_zkgroup_conf_t *conf, const cq_zkgroup_sink_t *sink,
                    cq_zkgroup_t **ret)
{
    *ret = NULL;
    if (!conf->hosts || !conf->hosts[0] || cq__zkgroup_path_check(conf->path) < 0 || !conf->data ||
        strlen(conf->data) > CQ_ZKGROUP_DATA_MAX || !sink->members || !sink->session)
        return -EINVAL;
    cq_zkgroup_t *g = grp_new(conf, sink);
    if (!g)
        return -ENOMEM;
    pthread_mutex_lock(&g->mu);
    int rc = grp_sess_open(g);
    if (rc == 0)
        rc = -pthread_create(&g->keeper, NULL, grp_keeper, g);
    grp_sess_t *gs = rc < 0 ? g->cur : NULL;
    if (rc < 0) {
        g->closing = true;
        g->cur = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    if (rc < 0) {
        grp_sess_close(gs);
        grp_free(g);
        return rc;
    }
    *ret = g;
    return 0;
}

void cq_zkgroup_close(cq_zkgroup_t *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->closing = true; /* no callback from here on */
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->keeper, NULL);
    pthread_mutex_lock(&g->mu);
    grp_sess_t *gs = g->cur;
    g->cur = NULL;
    bool joined = gs && gs->join == GJ_JOINED;
    cq__zkgroup_child_t self = {.sess = gs ? gs->sessid : 0, .seq = gs ? gs->self_seq : 0};
    pthread_mutex_unlock(&g->mu);
    if (joined) /* zk_close waits for the answer (bounded) */
        grp_delete(gs, &self);
    grp_sess_close(gs);
    grp_free(g);
}

void cq_zkgroup_stats(const cq_zkgroup_t *g, cq_zkgroup_stats_t *ret)
{
    *ret = (cq_zkgroup_stats_t){.sessions = atomic_load(&g->sessions),
                                .expiries = atomic_load(&g->expiries),
                                .lists = atomic_load(&g->lists),
                                .truncations = atomic_load(&g->truncations)};
}

/* ---- the group: ending a session from the server's side (tests, drills) ------------------ */

typedef struct kill_ctx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* the second handle's last session state */
} kill_ctx_t;

static void kill_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)path;
    kill_ctx_t *k = ctx;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&k->mu);
    k->state = state;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* A second handle on the session: once it is connected, closing it closes the session. */
static int kill_once(cq_zkgroup_t *g, const clientid_t *id)
{
    kill_ctx_t k = {.state = 0};
    pthread_mutex_init(&k.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k.cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = 0;
    zhandle_t *zh = zookeeper_init(g->hosts, kill_watch, (int)g->session_ms, id, &k, 0);
    if (!zh) {
        rc = errno ? -errno : -EINVAL;
    } else {
        struct timespec dl = mono_after((uint64_t)g->session_ms + 5000);
        pthread_mutex_lock(&k.mu);
        while (k.state != ZOO_CONNECTED_STATE && k.state != ZOO_EXPIRED_SESSION_STATE)
            if (pthread_cond_timedwait(&k.cv, &k.mu, &dl) != 0)
                break;
        pthread_mutex_unlock(&k.mu);
        zookeeper_close(zh); /* joins its threads: kill_watch is done */
    }
    pthread_cond_destroy(&k.cv);
    pthread_mutex_destroy(&k.mu);
    return rc;
}

int cq_zkgroup_kill_session(cq_zkgroup_t *g)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        pthread_mutex_lock(&g->mu);
        grp_sess_t *gs = g->cur;
        if (!gs || !grp_live(gs) || !gs->connected) {
            pthread_mutex_unlock(&g->mu);
            return -ENOTCONN;
        }
        clientid_t id = *zoo_client_id(gs->zs->zh);
        uint64_t before = atomic_load(&g->expiries);
        pthread_mutex_unlock(&g->mu);
        int rc = kill_once(g, &id);
        if (rc < 0)
            return rc;
        /* The session is closed unless our own handle took it back before the close went out
         * (the server moves a session to its last connection): then try again. */
        struct timespec dl = mono_after((uint64_t)g->session_ms + 5000);
        pthread_mutex_lock(&g->mu);
        while (atomic_load(&g->expiries) == before)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) != 0)
                break;
        bool expired = atomic_load(&g->expiries) != before;
        pthread_mutex_unlock(&g->mu);
        if (expired)
            return 0;
    }
    return CQ_ETIMEOUT;
}
