/* coordrt.c - the coord runtime (cq_coordrt.h): the machine's thread, the db thread, the inbox. */
#include "cq_coordrt.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A failed (re)connect is tried again this much later: zookeeper_init fails only on a bad host
 * list or OOM, so retrying at once would spin. */
#define RT_RECONNECT_RETRY_MS 1000
/* A failed topic listing or write is tried again this much later. */
#define RT_TOPIC_RETRY_MS 200

typedef enum rt_msg_kind {
    M_EV,             /* ev: for the machine */
    M_TOPICS,         /* rc, topics[0..ntopics): a registry listing */
    M_TOPICS_CHANGED, /* the registry changed */
    M_PUT,            /* topics[0]: publish it (from cq_coordrt_publish_topic) */
    M_PUT_DONE,       /* rc, topics[0].name: a write completed */
} rt_msg_kind_t;

typedef struct rt_msg {
    struct rt_msg *next;
    rt_msg_kind_t kind;
    cq_coord_ev_t ev; /* M_EV; ev.members is set to members when it is fed */
    cq_coord_member_t members[CQ_COORD_MEMBERS_MAX];
    int rc;
    cq_coord_topic_t *topics; /* owned */
    size_t ntopics;
} rt_msg_t;

/* A publish waiting to be written, or being written. */
typedef struct rt_put {
    struct rt_put *next;
    cq_coord_topic_t t;
    bool inflight;
} rt_put_t;

typedef struct db_job {
    struct db_job *next;
    cq_coord_act_t act;
} db_job_t;

struct cq_coordrt {
    const cq_coord_zk_ops_t *zk;
    void *zk_ud;
    const cq_coord_db_ops_t *db;
    void *db_ud;
    cq_coordrt_role_fn on_role;
    void *role_ud;
    char *hosts, *root;
    cq_coord_zk_conf_t conf;
    cq_coord_t *co;        /* runtime thread only (and start/stop, when it does not run) */
    void *sess;            /* runtime thread only */
    uint64_t reconnect_at; /* runtime thread only: 0, or when to try connect() again */

    /* The topic registry (runtime thread only). */
    cq_coordrt_topics_fn on_topics;
    void *topics_ud;
    bool topics_needed, topics_inflight;
    uint64_t topics_retry_at; /* 0, or when to list again after a failure */
    rt_put_t *puts;           /* in publish order */
    uint64_t puts_retry_at;

    /* The inbox. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rt_msg_t *head, *tail;
    uint64_t gen;      /* the current session's generation (rt_enqueue) */
    bool down_pending; /* a session event other than CONNECTED waits in the inbox */
    bool stopping;
    pthread_t thread;

    /* The db thread's queue. */
    pthread_mutex_t db_mu;
    pthread_cond_t db_cv;
    db_job_t *db_head, *db_tail;
    bool db_stopping;
    pthread_t db_thread;

    /* The last member list, for cq_coordrt_members(). */
    pthread_mutex_t mem_mu;
    cq_coord_member_t members[CQ_COORD_MEMBERS_MAX];
    size_t nmembers;

    /* The master last told with a role (runtime thread): a slave is told again when the
     * shard's master changes (cq_coordrt_role_fn). */
    bool told_have;
    cq_coord_member_t told_master;

    _Atomic uint64_t ack_until;
    _Atomic int role, session;
    _Atomic uint64_t epoch, elections, fences, sessions, member_changes, ntopics;
};

/* ---- the inbox ---------------------------------------------------------------------------- */

static rt_msg_t *rt_msg_new(const cq_coord_ev_t *ev)
{
    rt_msg_t *m = cq_malloc(sizeof *m);
    if (!m)
        return NULL;
    m->next = NULL;
    m->kind = M_EV;
    m->topics = NULL;
    m->ntopics = 0;
    m->ev = *ev;
    m->ev.members = NULL;
    m->ev.nmembers = 0;
    if (ev->members && ev->nmembers) {
        size_t n = ev->nmembers < CQ_COORD_MEMBERS_MAX ? ev->nmembers : CQ_COORD_MEMBERS_MAX;
        memcpy(m->members, ev->members, n * sizeof m->members[0]);
        m->ev.nmembers = n;
    }
    return m;
}

static void rt_msg_free(rt_msg_t *m)
{
    if (m)
        cq_free(m->topics);
    cq_free(m);
}

/* Queues m (owned). gen_check: drop it when it comes from an older session. */
static void rt_push(cq_coordrt_t *rt, rt_msg_t *m, bool gen_check, uint64_t gen)
{
    pthread_mutex_lock(&rt->mu);
    if (!gen_check || gen == rt->gen) {
        if (rt->tail)
            rt->tail->next = m;
        else
            rt->head = m;
        rt->tail = m;
        m = NULL;
        pthread_cond_signal(&rt->cv);
    }
    pthread_mutex_unlock(&rt->mu);
    rt_msg_free(m);
}

static bool ev_is_down(const cq_coord_ev_t *ev)
{
    return ev->type == CQ_COORD_EV_SESSION && ev->arg != CQ_COORD_SESS_CONNECTED;
}

/* Queues ev (copied). Session events of an older session (gen) are dropped: it was closed and
 * replaced. Completions are always delivered, even an old session's (failing while it closes):
 * the machine expects exactly one per action. any_gen: from the runtime itself. */
static void rt_enqueue(cq_coordrt_t *rt, bool any_gen, uint64_t gen, const cq_coord_ev_t *ev)
{
    bool down = ev_is_down(ev);
    /* Fencing first, before any lock: the engine must stop acknowledging now. The store is
     * repeated under the lock, after which the runtime thread publishes 0 until it has fed this
     * event to the machine (see rt_publish). */
    if (down)
        atomic_store(&rt->ack_until, 0);
    rt_msg_t *m = rt_msg_new(ev);
    pthread_mutex_lock(&rt->mu);
    if (down) {
        rt->down_pending = true;
        atomic_store(&rt->ack_until, 0);
    }
    if (m && (any_gen || gen == rt->gen || ev->type != CQ_COORD_EV_SESSION)) {
        if (rt->tail)
            rt->tail->next = m;
        else
            rt->head = m;
        rt->tail = m;
        m = NULL;
        pthread_cond_signal(&rt->cv);
    }
    pthread_mutex_unlock(&rt->mu);
    cq_free(m); /* an older session's session event (or NULL) */
}

static void rt_sink_post(void *ud, uint64_t gen, const cq_coord_ev_t *ev)
{
    rt_enqueue(ud, false, gen, ev);
}

/* The registry's messages belong to one session: an older session's are dropped (the runtime
 * forgets what was in flight when it replaces the session). */
static void rt_sink_topics(void *ud, uint64_t gen, int rc, const cq_coord_topic_t *t, size_t n)
{
    rt_msg_t *m = cq_calloc(1, sizeof *m);
    if (m && rc == 0 && n) {
        m->topics = cq_malloc(n * sizeof *t);
        if (m->topics)
            memcpy(m->topics, t, n * sizeof *t);
        else
            rc = -ENOMEM;
    }
    if (!m)
        return; /* OOM: the listing stays in flight until the next session */
    m->kind = M_TOPICS;
    m->rc = rc;
    m->ntopics = rc == 0 ? n : 0;
    rt_push(ud, m, true, gen);
}

static void rt_sink_topics_changed(void *ud, uint64_t gen)
{
    rt_msg_t *m = cq_calloc(1, sizeof *m);
    if (!m)
        return;
    m->kind = M_TOPICS_CHANGED;
    rt_push(ud, m, true, gen);
}

static void rt_sink_put_done(void *ud, uint64_t gen, const char *name, int rc)
{
    rt_msg_t *m = cq_calloc(1, sizeof *m);
    if (m)
        m->topics = cq_calloc(1, sizeof *m->topics);
    if (!m || !m->topics) {
        rt_msg_free(m);
        return;
    }
    m->kind = M_PUT_DONE;
    m->rc = rc;
    m->ntopics = 1;
    snprintf(m->topics[0].name, sizeof m->topics[0].name, "%s", name);
    rt_push(ud, m, true, gen);
}

static void rt_complete(cq_coordrt_t *rt, cq_coord_ev_type_t type, int rc)
{
    cq_coord_ev_t ev = {.type = type, .rc = rc};
    rt_enqueue(rt, true, 0, &ev);
}

static void rt_free_msgs(rt_msg_t *m)
{
    while (m) {
        rt_msg_t *next = m->next;
        rt_msg_free(m);
        m = next;
    }
}

/* ---- the db thread ------------------------------------------------------------------------ */

static int db_default(const cq_coord_act_t *a, cq_coord_ev_t *ret)
{
    (void)a;
    ret->db_replica = false;
    ret->db_read_only = false;
    return 0;
}

static void *db_main(void *arg)
{
    cq_coordrt_t *rt = arg;
    for (;;) {
        pthread_mutex_lock(&rt->db_mu);
        while (!rt->db_head && !rt->db_stopping)
            pthread_cond_wait(&rt->db_cv, &rt->db_mu);
        db_job_t *j = rt->db_stopping ? NULL : rt->db_head;
        if (j) {
            rt->db_head = j->next;
            if (!rt->db_head)
                rt->db_tail = NULL;
        }
        pthread_mutex_unlock(&rt->db_mu);
        if (!j)
            return NULL;
        cq_coord_ev_t ev = {.type = CQ_COORD_EV_DB, .arg = (int)j->act.type};
        ev.rc = rt->db ? rt->db->run(rt->db_ud, &j->act, &ev) : db_default(&j->act, &ev);
        ev.type = CQ_COORD_EV_DB;
        ev.arg = (int)j->act.type;
        ev.members = NULL;
        if (j->act.type == CQ_COORD_ACT_DB_FENCE && ev.rc == 0)
            atomic_fetch_add(&rt->fences, 1);
        rt_enqueue(rt, true, 0, &ev);
        cq_free(j);
    }
}

static void db_submit(cq_coordrt_t *rt, const cq_coord_act_t *a)
{
    db_job_t *j = cq_malloc(sizeof *j);
    if (!j) {
        rt_complete(rt, CQ_COORD_EV_DB, -ENOMEM);
        return;
    }
    j->next = NULL;
    j->act = *a;
    pthread_mutex_lock(&rt->db_mu);
    if (rt->db_tail)
        rt->db_tail->next = j;
    else
        rt->db_head = j;
    rt->db_tail = j;
    pthread_cond_signal(&rt->db_cv);
    pthread_mutex_unlock(&rt->db_mu);
}

/* ---- sessions ----------------------------------------------------------------------------- */

/* Opens a new session; its events carry a new generation (rt_enqueue). */
static int rt_connect(cq_coordrt_t *rt, uint64_t now)
{
    pthread_mutex_lock(&rt->mu);
    cq_coord_zk_sink_t sink = {.post = rt_sink_post,
                               .topics = rt_sink_topics,
                               .topics_changed = rt_sink_topics_changed,
                               .put_done = rt_sink_put_done,
                               .ud = rt,
                               .gen = ++rt->gen};
    pthread_mutex_unlock(&rt->mu);
    int rc = rt->zk->connect(rt->zk_ud, &rt->conf, &sink, &rt->sess);
    if (rc < 0) {
        rt->sess = NULL;
        rt->reconnect_at = now + RT_RECONNECT_RETRY_MS;
        return rc;
    }
    rt->reconnect_at = 0;
    atomic_fetch_add(&rt->sessions, 1);
    return 0;
}

static void rt_reconnect(cq_coordrt_t *rt, uint64_t now)
{
    pthread_mutex_lock(&rt->mu);
    rt->gen++; /* drop the session events the old session still posts while it closes */
    pthread_mutex_unlock(&rt->mu);
    rt->zk->close(rt->sess);
    rt->sess = NULL;
    atomic_store(&rt->session, CQ_COORDRT_SESS_NONE);
    /* What the old session had in flight is dropped with its messages: do it again. */
    rt->topics_inflight = false;
    for (rt_put_t *p = rt->puts; p; p = p->next)
        p->inflight = false;
    (void)rt_connect(rt, now);
}

/* ---- actions ------------------------------------------------------------------------------ */

/* Starts a ZK operation; when it cannot start, its completion is posted with the error. */
static void rt_zk_op(cq_coordrt_t *rt, const cq_coord_act_t *a, uint64_t now)
{
    cq_coord_ev_t ev = {0};
    int rc = -ENOTCONN;
    switch (a->type) {
    case CQ_COORD_ACT_JOIN:
        ev.type = CQ_COORD_EV_JOINED;
        if (rt->sess)
            rc = rt->zk->join(rt->sess, a->text);
        break;
    case CQ_COORD_ACT_LIST:
        ev.type = CQ_COORD_EV_MEMBERS;
        if (rt->sess)
            rc = rt->zk->list(rt->sess);
        break;
    case CQ_COORD_ACT_READ_EPOCH:
    case CQ_COORD_ACT_PING:
        ev.type = CQ_COORD_EV_EPOCH;
        ev.is_ping = a->type == CQ_COORD_ACT_PING;
        ev.sent_ms = ev.is_ping ? now : 0;
        if (rt->sess)
            rc = rt->zk->read_epoch(rt->sess, ev.is_ping, ev.sent_ms);
        break;
    case CQ_COORD_ACT_SET_EPOCH:
        ev.type = CQ_COORD_EV_EPOCH_SET;
        if (rt->sess)
            rc = rt->zk->set_epoch(rt->sess, a->text, a->version);
        break;
    case CQ_COORD_ACT_LEAVE:
        ev.type = CQ_COORD_EV_LEFT;
        if (rt->sess)
            rc = rt->zk->leave(rt->sess);
        break;
    default:
        return;
    }
    if (rc < 0) {
        ev.rc = rc;
        rt_enqueue(rt, true, 0, &ev);
    }
}

/* Tells opts.on_role role and epoch with the master as the machine knows it now. */
static void rt_tell(cq_coordrt_t *rt, cq_coord_role_t role, uint64_t epoch)
{
    const cq_coord_member_t *m = cq_coord_master(rt->co);
    rt->told_have = m != NULL;
    if (m)
        rt->told_master = *m;
    if (rt->on_role)
        rt->on_role(rt->role_ud, role, epoch, m);
}

static void rt_role(cq_coordrt_t *rt, const cq_coord_act_t *a)
{
    int prev = atomic_exchange(&rt->role, (int)a->role);
    atomic_store(&rt->epoch, a->epoch);
    if (a->role == CQ_COORD_MASTER && prev != CQ_COORD_MASTER)
        atomic_fetch_add(&rt->elections, 1);
    rt_tell(rt, a->role, a->epoch);
}

/* A slave whose shard's master changed (another member, or none: it died and no one else may
 * take the role) is told its role again with the new master. */
static void rt_master_step(cq_coordrt_t *rt)
{
    const cq_coord_member_t *m = cq_coord_master(rt->co);
    bool same = m ? rt->told_have && m->seq == rt->told_master.seq &&
                        strcmp(m->adv, rt->told_master.adv) == 0
                  : !rt->told_have;
    /* not while the machine took the role itself (ELECTED): MASTER is told once it holds it */
    if (!same && atomic_load(&rt->role) == CQ_COORD_SLAVE &&
        cq_coord_role(rt->co) == CQ_COORD_SLAVE)
        rt_tell(rt, CQ_COORD_SLAVE, atomic_load(&rt->epoch));
}

static void rt_act(cq_coordrt_t *rt, const cq_coord_act_t *a, uint64_t now)
{
    switch (a->type) {
    case CQ_COORD_ACT_RECONNECT:
        rt_reconnect(rt, now);
        break;
    case CQ_COORD_ACT_ROLE:
        rt_role(rt, a);
        break;
    case CQ_COORD_ACT_DB_PROBE:
    case CQ_COORD_ACT_DB_FENCE:
    case CQ_COORD_ACT_DB_PROMOTE:
    case CQ_COORD_ACT_DB_WRITABLE:
    case CQ_COORD_ACT_DB_READ_ONLY:
    case CQ_COORD_ACT_DB_FOLLOW:
        db_submit(rt, a);
        break;
    default:
        rt_zk_op(rt, a, now);
        break;
    }
}

static void rt_drain(cq_coordrt_t *rt, uint64_t now)
{
    cq_coord_act_t a;
    while (cq_coord_next_action(rt->co, &a))
        rt_act(rt, &a, now);
}

/* ---- the topic registry ------------------------------------------------------------------- */

static bool rt_connected(const cq_coordrt_t *rt)
{
    return rt->sess && atomic_load(&rt->session) == CQ_COORD_SESS_CONNECTED;
}

static void rt_put_done(cq_coordrt_t *rt, const rt_msg_t *m, uint64_t now)
{
    rt_put_t **pp = &rt->puts;
    while (*pp && !((*pp)->inflight && strcmp((*pp)->t.name, m->topics[0].name) == 0))
        pp = &(*pp)->next;
    rt_put_t *p = *pp;
    if (!p)
        return;
    if (m->rc < 0) {
        p->inflight = false;
        rt->puts_retry_at = now + RT_TOPIC_RETRY_MS;
        return;
    }
    *pp = p->next;
    cq_free(p);
}

static void rt_topics_listed(cq_coordrt_t *rt, const rt_msg_t *m, uint64_t now)
{
    rt->topics_inflight = false;
    if (m->rc < 0) {
        rt->topics_needed = true;
        rt->topics_retry_at = now + RT_TOPIC_RETRY_MS;
        return;
    }
    atomic_store(&rt->ntopics, m->ntopics);
    static const cq_coord_topic_t none[1]; /* never NULL for the callback, even when empty */
    if (rt->on_topics)
        rt->on_topics(rt->topics_ud, m->topics ? m->topics : none, m->ntopics);
}

/* The first queued publish of a name that has none in flight (publishes of one name go in
 * order, one at a time). */
static rt_put_t *rt_next_put(cq_coordrt_t *rt)
{
    for (rt_put_t *p = rt->puts; p; p = p->next) {
        if (p->inflight)
            continue;
        bool busy = false;
        for (rt_put_t *q = rt->puts; q != p; q = q->next)
            busy |= strcmp(q->t.name, p->t.name) == 0;
        if (!busy)
            return p;
    }
    return NULL;
}

static void rt_topics_step(cq_coordrt_t *rt, uint64_t now)
{
    if (!rt_connected(rt))
        return;
    if (now >= rt->puts_retry_at) {
        rt_put_t *p;
        while ((p = rt_next_put(rt))) {
            char text[64];
            cq_coord_topic_format(&p->t, text, sizeof text);
            if (rt->zk->put_topic(rt->sess, p->t.name, text) < 0) {
                rt->puts_retry_at = now + RT_TOPIC_RETRY_MS;
                break;
            }
            p->inflight = true;
        }
    }
    if (rt->on_topics && rt->topics_needed && !rt->topics_inflight && now >= rt->topics_retry_at) {
        if (rt->zk->topics(rt->sess) < 0) {
            rt->topics_retry_at = now + RT_TOPIC_RETRY_MS;
            return;
        }
        rt->topics_needed = false;
        rt->topics_inflight = true;
    }
}

static uint64_t rt_topics_deadline(const cq_coordrt_t *rt)
{
    uint64_t dl = UINT64_MAX;
    if (rt->topics_needed && !rt->topics_inflight && rt->topics_retry_at)
        dl = rt->topics_retry_at;
    for (rt_put_t *p = rt->puts; p; p = p->next)
        if (!p->inflight && rt->puts_retry_at && rt->puts_retry_at < dl)
            dl = rt->puts_retry_at;
    return dl;
}

static void rt_put_add(cq_coordrt_t *rt, const cq_coord_topic_t *t)
{
    rt_put_t *p = cq_calloc(1, sizeof *p);
    if (!p)
        return; /* OOM: the publish is lost, as if it had not been made */
    p->t = *t;
    rt_put_t **pp = &rt->puts;
    while (*pp)
        pp = &(*pp)->next;
    *pp = p;
}

/* Runtime thread: a message that is not for the machine. */
static void rt_feed_topics(cq_coordrt_t *rt, rt_msg_t *m, uint64_t now)
{
    switch (m->kind) {
    case M_TOPICS:
        rt_topics_listed(rt, m, now);
        break;
    case M_TOPICS_CHANGED:
        rt->topics_needed = true;
        break;
    case M_PUT:
        rt_put_add(rt, &m->topics[0]);
        break;
    case M_PUT_DONE:
        rt_put_done(rt, m, now);
        break;
    default:
        break;
    }
}

/* ---- the runtime thread ------------------------------------------------------------------- */

static void rt_feed(cq_coordrt_t *rt, rt_msg_t *m, uint64_t now)
{
    if (m->kind != M_EV) {
        rt_feed_topics(rt, m, now);
        return;
    }
    cq_coord_ev_t *ev = &m->ev;
    if (ev->type == CQ_COORD_EV_MEMBERS) {
        ev->members = m->members;
        if (ev->rc == 0) {
            pthread_mutex_lock(&rt->mem_mu);
            memcpy(rt->members, m->members, ev->nmembers * sizeof m->members[0]);
            rt->nmembers = ev->nmembers;
            pthread_mutex_unlock(&rt->mem_mu);
            atomic_fetch_add(&rt->member_changes, 1);
        }
    } else if (ev->type == CQ_COORD_EV_SESSION) {
        atomic_store(&rt->session, ev->arg);
        if (ev->arg == CQ_COORD_SESS_CONNECTED)
            rt->topics_needed = true; /* changes may have been missed while disconnected */
    }
    cq_coord_event(rt->co, ev, now);
    rt_drain(rt, now);
}

/* Publishes the machine's ack_until, unless a session-down event waits in the inbox: then the
 * watcher already zeroed it and the machine does not know yet. Under the inbox lock, so the
 * watcher's zero is never overwritten by an older value. */
static void rt_publish(cq_coordrt_t *rt)
{
    uint64_t v = cq_coord_ack_until(rt->co);
    pthread_mutex_lock(&rt->mu);
    atomic_store(&rt->ack_until, rt->down_pending ? 0 : v);
    pthread_mutex_unlock(&rt->mu);
}

static void rt_wait(cq_coordrt_t *rt)
{
    uint64_t dl = cq_coord_next_deadline(rt->co);
    if (rt->reconnect_at && rt->reconnect_at < dl)
        dl = rt->reconnect_at;
    uint64_t tdl = rt_topics_deadline(rt);
    if (tdl < dl)
        dl = tdl;
    while (!rt->head && !rt->stopping) {
        uint64_t now = cq_clock_mono_ms();
        if (dl <= now)
            return;
        if (dl == UINT64_MAX) {
            pthread_cond_wait(&rt->cv, &rt->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (dl - now) * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
    }
}

static void rt_round(cq_coordrt_t *rt, rt_msg_t *msgs)
{
    uint64_t now = cq_clock_mono_ms();
    for (rt_msg_t *m = msgs; m; m = m->next)
        rt_feed(rt, m, now);
    rt_free_msgs(msgs);
    now = cq_clock_mono_ms();
    if (rt->reconnect_at && rt->reconnect_at <= now)
        (void)rt_connect(rt, now);
    cq_coord_tick(rt->co, now);
    rt_drain(rt, now);
    rt_master_step(rt);
    rt_publish(rt);
    rt_topics_step(rt, now);
}

static void *rt_main(void *arg)
{
    cq_coordrt_t *rt = arg;
    rt_drain(rt, cq_clock_mono_ms()); /* a new machine has asked for its first probe */
    pthread_mutex_lock(&rt->mu);
    while (!rt->stopping) {
        rt_wait(rt);
        if (rt->stopping)
            break;
        rt_msg_t *msgs = rt->head;
        rt->head = rt->tail = NULL;
        rt->down_pending = false; /* fed below, before the next publish */
        pthread_mutex_unlock(&rt->mu);
        rt_round(rt, msgs);
        pthread_mutex_lock(&rt->mu);
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

/* ---- life --------------------------------------------------------------------------------- */

static void rt_free(cq_coordrt_t *rt)
{
    rt_free_msgs(rt->head);
    for (rt_put_t *p = rt->puts, *next; p; p = next) {
        next = p->next;
        cq_free(p);
    }
    for (db_job_t *j = rt->db_head, *next; j; j = next) {
        next = j->next;
        cq_free(j);
    }
    cq_coord_free(rt->co);
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->cv);
    pthread_mutex_destroy(&rt->db_mu);
    pthread_cond_destroy(&rt->db_cv);
    pthread_mutex_destroy(&rt->mem_mu);
    cq_free(rt->hosts);
    cq_free(rt->root);
    cq_free(rt);
}

static int rt_init_sync(cq_coordrt_t *rt)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -ENOMEM;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&rt->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -rc;
    pthread_cond_init(&rt->db_cv, NULL);
    pthread_mutex_init(&rt->mu, NULL);
    pthread_mutex_init(&rt->db_mu, NULL);
    pthread_mutex_init(&rt->mem_mu, NULL);
    return 0;
}

static int rt_new(const cq_coordrt_opts_t *o, cq_coordrt_t **ret)
{
    cq_coordrt_t *rt = cq_calloc(1, sizeof *rt);
    if (!rt)
        return -ENOMEM;
    if (rt_init_sync(rt) < 0) {
        cq_free(rt);
        return -ENOMEM;
    }
    rt->zk = o->zk;
    rt->zk_ud = o->zk_ud;
    rt->db = o->db;
    rt->db_ud = o->db_ud;
    rt->on_role = o->on_role;
    rt->role_ud = o->role_ud;
    rt->on_topics = o->on_topics;
    rt->topics_ud = o->topics_ud;
    rt->hosts = cq_strdup(o->zk_hosts);
    rt->root = cq_strdup(o->zk_root ? o->zk_root : "/chanq");
    if (!rt->hosts || !rt->root) {
        rt_free(rt);
        return -ENOMEM;
    }
    /* NULL: invalid options (an address that is not host:port) or, unlikely this early, OOM. */
    rt->co = cq_coord_new(&o->coord);
    if (!rt->co) {
        rt_free(rt);
        return -EINVAL;
    }
    rt->conf = (cq_coord_zk_conf_t){.hosts = rt->hosts,
                                    .root = rt->root,
                                    .shard = o->coord.shard,
                                    .session_ms = o->coord.session_ms};
    *ret = rt;
    return 0;
}

int cq_coordrt_start(const cq_coordrt_opts_t *o, cq_coordrt_t **ret)
{
    *ret = NULL;
    if (!o || !o->zk || !o->zk_hosts || (o->db && !o->db->run))
        return -EINVAL;
    cq_coordrt_t *rt;
    int rc = rt_new(o, &rt);
    if (rc < 0)
        return rc;
    /* The first session opens before the runtime thread runs: nothing else touches sess yet. */
    rc = rt_connect(rt, cq_clock_mono_ms());
    if (rc < 0)
        goto fail;
    rc = -pthread_create(&rt->db_thread, NULL, db_main, rt);
    if (rc < 0)
        goto fail_sess;
    rc = -pthread_create(&rt->thread, NULL, rt_main, rt);
    if (rc < 0)
        goto fail_db;
    *ret = rt;
    return 0;
fail_db:
    pthread_mutex_lock(&rt->db_mu);
    rt->db_stopping = true;
    pthread_cond_signal(&rt->db_cv);
    pthread_mutex_unlock(&rt->db_mu);
    pthread_join(rt->db_thread, NULL);
fail_sess:
    rt->zk->close(rt->sess);
fail:
    rt_free(rt);
    return rc;
}

void cq_coordrt_stop(cq_coordrt_t *rt)
{
    if (!rt)
        return;
    atomic_store(&rt->ack_until, 0);
    pthread_mutex_lock(&rt->mu);
    rt->stopping = true;
    pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    pthread_join(rt->thread, NULL);
    /* Closing the session deletes our member node at once: the others elect without waiting
     * for the session timeout. */
    rt->zk->close(rt->sess);
    rt->sess = NULL;
    pthread_mutex_lock(&rt->db_mu);
    rt->db_stopping = true;
    pthread_cond_signal(&rt->db_cv);
    pthread_mutex_unlock(&rt->db_mu);
    pthread_join(rt->db_thread, NULL);
    atomic_store(&rt->ack_until, 0);
    rt_free(rt);
}

static bool topic_name_valid(const char *name)
{
    size_t n = strnlen(name, CQ_COORD_TOPIC_MAX + 1);
    if (n == 0 || n > CQ_COORD_TOPIC_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

int cq_coordrt_publish_topic(cq_coordrt_t *rt, const cq_coord_topic_t *t)
{
    if (!topic_name_valid(t->name))
        return -EINVAL;
    rt_msg_t *m = cq_calloc(1, sizeof *m);
    if (m)
        m->topics = cq_malloc(sizeof *m->topics);
    if (!m || !m->topics) {
        rt_msg_free(m);
        return -ENOMEM;
    }
    m->kind = M_PUT;
    m->topics[0] = *t;
    m->ntopics = 1;
    rt_push(rt, m, false, 0);
    return 0;
}

int cq_coord_topic_format(const cq_coord_topic_t *t, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "online=%d retention=%" PRIu64, t->online ? 1 : 0, t->retention);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

/* Consumes the literal lit at *p. */
static bool eat(const char **p, const char *end, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
        return false;
    *p += n;
    return true;
}

/* Decimal digits up to end, at least one, no sign, no overflow. */
static bool digits_u64(const char *p, const char *end, uint64_t *ret)
{
    uint64_t v = 0;
    if (p == end)
        return false;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *ret = v;
    return true;
}

int cq_coord_topic_parse(const char *text, size_t len, cq_coord_topic_t *ret)
{
    const char *p = text, *end = text + len;
    uint64_t retention;
    if (!eat(&p, end, "online=") || p == end || (*p != '0' && *p != '1'))
        return CQ_EFIELD;
    bool online = *p++ == '1';
    if (!eat(&p, end, " retention=") || !digits_u64(p, end, &retention))
        return CQ_EFIELD;
    ret->online = online;
    ret->retention = retention;
    return 0;
}

/* ---- queries ------------------------------------------------------------------------------ */

uint64_t cq_coordrt_ack_until(const cq_coordrt_t *rt)
{
    return atomic_load(&rt->ack_until);
}

size_t cq_coordrt_members(cq_coordrt_t *rt, cq_coord_member_t *out, size_t n)
{
    pthread_mutex_lock(&rt->mem_mu);
    size_t have = rt->nmembers;
    if (n > 0)
        memcpy(out, rt->members, (n < have ? n : have) * sizeof out[0]);
    pthread_mutex_unlock(&rt->mem_mu);
    return have;
}

void cq_coordrt_stats(const cq_coordrt_t *rt, cq_coordrt_stats_t *ret)
{
    uint64_t now = cq_clock_mono_ms();
    uint64_t until = atomic_load(&rt->ack_until);
    *ret = (cq_coordrt_stats_t){
        .role = (cq_coord_role_t)atomic_load(&rt->role),
        .epoch = atomic_load(&rt->epoch),
        .session = atomic_load(&rt->session),
        .lease_remaining_ms = until > now ? until - now : 0,
        .elections = atomic_load(&rt->elections),
        .fences = atomic_load(&rt->fences),
        .sessions = atomic_load(&rt->sessions),
        .member_changes = atomic_load(&rt->member_changes),
        .topics = atomic_load(&rt->ntopics),
    };
}
