/* test_zk.c - src/coord/zk.c: what closing a session does with the replies and server events
 * still on their way, against a model of libzookeeper-mt linked in the library's place (this
 * file defines the functions zk.c calls; the real library is not linked).
 *
 * The model keeps the two threads of the library that matter here, as mt_adaptor.c runs them
 * (3.8): a completion thread that loops `while (!close_requested)`, sleeping on an empty queue
 * and otherwise running every queued completion before it looks at the flag again; and an IO
 * thread whose last loop iteration, once close is requested, may still read a server message
 * (a watch event) and queue it. zookeeper_close() sets the flag, joins the IO thread, then wakes
 * and joins the completion thread; called on the completion thread it detaches it instead, and
 * that thread runs what is queued and destroys the handle when its loop ends. Whatever is queued
 * after the completion thread left its loop is never run: the library frees nothing of it (a
 * LeakSanitizer report in the real one; here, model_dropped()). The model takes the worst
 * interleaving the real threads allow: the IO thread's last read comes after the completion
 * thread decided whether to go on. Every request is answered at once, in order, unless held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_coordzk.h"
#include "cq_zkgroup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

/* ---- the library's constants (the values of libzookeeper 3.8) ----------------------------- */

const int ZOO_PERSISTENT = 0;
const int ZOO_EPHEMERAL = 1;
const int ZOO_SEQUENCE = 1 << 1;
const int ZOO_EXPIRED_SESSION_STATE = -112;
const int ZOO_AUTH_FAILED_STATE = -113;
const int ZOO_CONNECTING_STATE = 1;
const int ZOO_ASSOCIATING_STATE = 2;
const int ZOO_CONNECTED_STATE = 3;
const int ZOO_CREATED_EVENT = 1;
const int ZOO_DELETED_EVENT = 2;
const int ZOO_CHANGED_EVENT = 3;
const int ZOO_CHILD_EVENT = 4;
const int ZOO_SESSION_EVENT = -1;
static struct ACL model_acl[] = {{0x1f, {"world", "anyone"}}};
struct ACL_vector ZOO_OPEN_ACL_UNSAFE = {1, model_acl};

/* ---- the model ---------------------------------------------------------------------------- */

typedef enum { K_WATCH, K_STRING, K_DATA, K_STRINGS, K_STAT, K_VOID } kind_t;

typedef struct item {
    struct item *next;
    kind_t kind;
    int rc;
    union {
        watcher_fn watch;
        string_completion_t string;
        data_completion_t data;
        strings_completion_t strings;
        stat_completion_t stat;
        void_completion_t vd;
    } fn;
    const void *ud;  /* the completion's data, or the watcher's context */
    int type, state; /* K_WATCH */
    char path[128];
} item_t;

typedef enum { C_RUNNING, C_WAITING, C_EXITED } cstate_t;

struct _zhandle {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* the queue, cstate */
    item_t *head, *tail; /* completions_to_process */
    item_t *held;        /* requests not answered while model_hold() is on */
    item_t watch;        /* the one child watch set (K_WATCH when set) */
    bool watch_set;
    bool close_requested, closed_on_completion, expired;
    int closes; /* zookeeper_close() calls */
    cstate_t cstate;
    pthread_t completion;
    watcher_fn watcher;
    void *context;
    int recv_timeout;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static zhandle_t *g_zh;        /* the last handle opened */
static int g_live;             /* handles not destroyed yet */
static int g_dropped;          /* queued completions the library never ran */
static bool g_hold;            /* hold the answers to new requests */
static bool g_event_at_close;  /* the IO thread's last iteration reads a watch event */
static atomic_bool g_closing;  /* the test called close: report the library's next call */
static bool g_called_in_close; /* the library was called after close began */

static void model_note_call(void)
{
    if (!atomic_load(&g_closing))
        return;
    pthread_mutex_lock(&g_mu);
    g_called_in_close = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void push(zhandle_t *zh, item_t *it)
{
    it->next = NULL;
    if (zh->tail)
        zh->tail->next = it;
    else
        zh->head = it;
    zh->tail = it;
    pthread_cond_broadcast(&zh->cv);
}

static void run(zhandle_t *zh, item_t *it)
{
    static const struct Stat st;
    static const struct String_vector none = {0, NULL};
    bool ok = it->rc == ZOK;
    switch (it->kind) {
    case K_WATCH:
        it->fn.watch(zh, it->type, it->state, it->path, (void *)it->ud);
        break;
    case K_STRING:
        it->fn.string(it->rc, ok ? it->path : NULL, it->ud);
        break;
    case K_DATA:
        it->fn.data(it->rc, ok ? "x" : NULL, ok ? 1 : -1, ok ? &st : NULL, it->ud);
        break;
    case K_STRINGS:
        it->fn.strings(it->rc, ok ? &none : NULL, it->ud);
        break;
    case K_STAT:
        it->fn.stat(it->rc, ok ? &st : NULL, it->ud);
        break;
    case K_VOID:
        it->fn.vd(it->rc, it->ud);
        break;
    }
}

static void model_destroy(zhandle_t *zh)
{
    int left = 0;
    for (item_t *it = zh->head, *next; it; it = next) {
        next = it->next;
        left++;
        free(it);
    }
    pthread_mutex_lock(&g_mu);
    g_dropped += left;
    g_live--;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_destroy(&zh->mu);
    pthread_cond_destroy(&zh->cv);
    free(zh);
}

/* mt_adaptor.c do_completion() */
static void *model_completion(void *arg)
{
    zhandle_t *zh = arg;
    pthread_mutex_lock(&zh->mu);
    while (!zh->close_requested) {
        while (!zh->head && !zh->close_requested) {
            zh->cstate = C_WAITING;
            pthread_cond_broadcast(&zh->cv);
            pthread_cond_wait(&zh->cv, &zh->mu);
        }
        zh->cstate = C_RUNNING;
        for (item_t *it; (it = zh->head);) { /* process_completions() */
            zh->head = it->next;
            if (!zh->head)
                zh->tail = NULL;
            pthread_mutex_unlock(&zh->mu);
            run(zh, it);
            free(it);
            pthread_mutex_lock(&zh->mu);
        }
    }
    zh->cstate = C_EXITED;
    pthread_cond_broadcast(&zh->cv);
    bool destroy = zh->closed_on_completion;
    pthread_mutex_unlock(&zh->mu);
    if (destroy) /* api_epilog(): the last reference closes the handle */
        model_destroy(zh);
    return NULL;
}

/* A request: its answer (req: kind, fn and ud set) is queued now, or held. */
static int answer(zhandle_t *zh, item_t req, const char *path)
{
    model_note_call();
    item_t *it = calloc(1, sizeof *it);
    assert_non_null(it);
    *it = req;
    it->rc = ZOK;
    snprintf(it->path, sizeof it->path, "%s", path);
    pthread_mutex_lock(&zh->mu);
    int zrc = ZOK;
    if (zh->expired || zh->close_requested) {
        zrc = ZINVALIDSTATE;
        free(it);
    } else if (g_hold) {
        it->next = zh->held;
        zh->held = it;
    } else {
        push(zh, it);
    }
    pthread_mutex_unlock(&zh->mu);
    return zrc;
}

zhandle_t *zookeeper_init(const char *host, watcher_fn fn, int recv_timeout,
                          const clientid_t *clientid, void *context, int flags)
{
    (void)host, (void)clientid, (void)flags;
    zhandle_t *zh = calloc(1, sizeof *zh);
    assert_non_null(zh);
    pthread_mutex_init(&zh->mu, NULL);
    pthread_cond_init(&zh->cv, NULL);
    zh->watcher = fn;
    zh->context = context;
    zh->recv_timeout = recv_timeout;
    item_t *it = calloc(1, sizeof *it);
    assert_non_null(it);
    *it = (item_t){.kind = K_WATCH, .fn.watch = fn, .ud = context};
    it->type = ZOO_SESSION_EVENT;
    it->state = ZOO_CONNECTED_STATE;
    push(zh, it);
    pthread_mutex_lock(&g_mu);
    g_zh = zh;
    g_live++;
    pthread_mutex_unlock(&g_mu);
    assert_int_equal(pthread_create(&zh->completion, NULL, model_completion, zh), 0);
    return zh;
}

/* The IO thread's last iteration: the server's event for the watch set, if the test asks. */
static void io_last_read(zhandle_t *zh)
{
    if (!g_event_at_close || !zh->watch_set || zh->expired)
        return; /* an expired handle's IO thread reads nothing any more */
    item_t *it = calloc(1, sizeof *it);
    assert_non_null(it);
    *it = zh->watch;
    it->type = ZOO_CHILD_EVENT;
    it->state = ZOO_CONNECTED_STATE;
    zh->watch_set = false;
    push(zh, it);
}

int zookeeper_close(zhandle_t *zh)
{
    bool on_c = pthread_equal(pthread_self(), zh->completion);
    pthread_mutex_lock(&zh->mu);
    assert_int_equal(zh->closes++, 0);
    zh->close_requested = true;
    model_note_call(); /* after the flag: a busy completion thread sees it when it is done */
    for (item_t *it; (it = zh->held);) { /* free_completions(ZCLOSING) */
        zh->held = it->next;
        it->rc = ZCLOSING;
        push(zh, it);
    }
    /* adaptor_finish(): join the IO thread, whose last read may come once the completion thread
     * has either left its loop or gone to sleep (it cannot be either while it calls us). */
    while (!on_c && zh->cstate == C_RUNNING)
        pthread_cond_wait(&zh->cv, &zh->mu);
    io_last_read(zh);
    if (on_c) {
        zh->closed_on_completion = true;
        pthread_mutex_unlock(&zh->mu);
        pthread_detach(zh->completion);
        return ZOK;
    }
    pthread_cond_broadcast(&zh->cv);
    pthread_mutex_unlock(&zh->mu);
    pthread_join(zh->completion, NULL);
    model_destroy(zh);
    return ZOK;
}

void zoo_set_debug_level(ZooLogLevel level)
{
    (void)level;
}

int zoo_recv_timeout(zhandle_t *zh)
{
    return zh->recv_timeout;
}

const clientid_t *zoo_client_id(zhandle_t *zh)
{
    static const clientid_t id = {0x1234, {0}}; /* the group's member names */
    (void)zh;
    return &id;
}

int zoo_acreate(zhandle_t *zh, const char *path, const char *value, int valuelen,
                const struct ACL_vector *acl, int mode, string_completion_t completion,
                const void *data)
{
    (void)value, (void)valuelen, (void)acl, (void)mode;
    return answer(zh, (item_t){.kind = K_STRING, .fn.string = completion, .ud = data}, path);
}

int zoo_aget(zhandle_t *zh, const char *path, int watch, data_completion_t dc, const void *data)
{
    (void)watch;
    return answer(zh, (item_t){.kind = K_DATA, .fn.data = dc, .ud = data}, path);
}

int zoo_awget(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
              data_completion_t dc, const void *data)
{
    (void)watcher, (void)watcherCtx;
    return answer(zh, (item_t){.kind = K_DATA, .fn.data = dc, .ud = data}, path);
}

int zoo_awget_children(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
                       strings_completion_t dc, const void *data)
{
    int zrc = answer(zh, (item_t){.kind = K_STRINGS, .fn.strings = dc, .ud = data}, path);
    if (zrc == ZOK && watcher) {
        pthread_mutex_lock(&zh->mu);
        zh->watch = (item_t){.kind = K_WATCH, .fn.watch = watcher, .ud = watcherCtx};
        snprintf(zh->watch.path, sizeof zh->watch.path, "%s", path);
        zh->watch_set = true;
        pthread_mutex_unlock(&zh->mu);
    }
    return zrc;
}

int zoo_aset(zhandle_t *zh, const char *path, const char *buffer, int buflen, int version,
             stat_completion_t dc, const void *data)
{
    (void)buffer, (void)buflen, (void)version;
    return answer(zh, (item_t){.kind = K_STAT, .fn.stat = dc, .ud = data}, path);
}

int zoo_aexists(zhandle_t *zh, const char *path, int watch, stat_completion_t completion,
                const void *data)
{
    (void)watch;
    return answer(zh, (item_t){.kind = K_STAT, .fn.stat = completion, .ud = data}, path);
}

int zoo_awexists(zhandle_t *zh, const char *path, watcher_fn watcher, void *watcherCtx,
                 stat_completion_t completion, const void *data)
{
    (void)watcher, (void)watcherCtx;
    return answer(zh, (item_t){.kind = K_STAT, .fn.stat = completion, .ud = data}, path);
}

int zoo_adelete(zhandle_t *zh, const char *path, int version, void_completion_t completion,
                const void *data)
{
    (void)version;
    return answer(zh, (item_t){.kind = K_VOID, .fn.vd = completion, .ud = data}, path);
}

/* The session expires: its event is queued and the handle refuses every request from now on. */
static void model_expire(zhandle_t *zh)
{
    item_t *it = calloc(1, sizeof *it);
    assert_non_null(it);
    *it = (item_t){.kind = K_WATCH, .fn.watch = zh->watcher, .ud = zh->context};
    it->type = ZOO_SESSION_EVENT;
    it->state = ZOO_EXPIRED_SESSION_STATE;
    pthread_mutex_lock(&zh->mu);
    zh->expired = true;
    push(zh, it);
    pthread_mutex_unlock(&zh->mu);
}

static void model_reset(void)
{
    pthread_mutex_lock(&g_mu);
    g_zh = NULL;
    g_dropped = 0;
    g_hold = false;
    g_event_at_close = false;
    g_called_in_close = false;
    atomic_store(&g_closing, false);
    pthread_mutex_unlock(&g_mu);
}

/* ---- the sink ----------------------------------------------------------------------------- */

typedef struct probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool connected, expired, block_epoch, blocked, closed;
    int members, epochs, changed, after_close;
} probe_t;

/* Blocks the completion thread in its EV_EPOCH until the library is called after close began:
 * the completion thread is then busy when the session closes. */
static void probe_block(probe_t *p)
{
    p->blocked = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&g_mu);
    while (!g_called_in_close)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_lock(&p->mu);
}

static void probe_post(void *ud, uint64_t gen, const cq_coord_ev_t *ev)
{
    (void)gen;
    probe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->after_close += p->closed;
    if (ev->type == CQ_COORD_EV_SESSION) {
        p->connected = ev->arg == CQ_COORD_SESS_CONNECTED;
        p->expired |= ev->arg == CQ_COORD_SESS_EXPIRED;
    } else if (ev->type == CQ_COORD_EV_MEMBERS) {
        p->members++;
    } else if (ev->type == CQ_COORD_EV_MEMBERS_CHANGED) {
        p->changed++;
    } else if (ev->type == CQ_COORD_EV_EPOCH) {
        p->epochs++;
        if (p->block_epoch)
            probe_block(p);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void probe_topics(void *ud, uint64_t gen, int rc, const cq_coord_topic_t *t, size_t n)
{
    (void)ud, (void)gen, (void)rc, (void)t, (void)n;
}

static void probe_changed(void *ud, uint64_t gen)
{
    (void)ud, (void)gen;
}

static void probe_put(void *ud, uint64_t gen, const char *name, int rc)
{
    (void)ud, (void)gen, (void)name, (void)rc;
}

#define PROBE_WAIT(p, cond)                                                                        \
    do {                                                                                           \
        pthread_mutex_lock(&(p)->mu);                                                              \
        while (!(cond))                                                                            \
            pthread_cond_wait(&(p)->cv, &(p)->mu);                                                 \
        pthread_mutex_unlock(&(p)->mu);                                                            \
    } while (0)

static void *open_session(probe_t *p)
{
    model_reset();
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    cq_coord_zk_sink_t sink = {.post = probe_post,
                               .topics = probe_topics,
                               .topics_changed = probe_changed,
                               .put_done = probe_put,
                               .ud = p};
    cq_coord_zk_conf_t conf = {.hosts = "model:1", .root = "/t", .shard = 1, .session_ms = 6000};
    void *sess = NULL;
    assert_int_equal(cq_coord_zk_libzk.connect(NULL, &conf, &sink, &sess), 0);
    PROBE_WAIT(p, p->connected);
    return sess;
}

/* close, then no call of the sink any more, every handle destroyed, nothing dropped. */
static void close_session(probe_t *p, void *sess)
{
    atomic_store(&g_closing, true);
    cq_coord_zk_libzk.close(sess);
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_lock(&g_mu);
    int live = g_live, dropped = g_dropped;
    pthread_mutex_unlock(&g_mu);
    assert_int_equal(live, 0);
    assert_int_equal(dropped, 0); /* the library ran every completion it queued */
}

static void probe_done(probe_t *p)
{
    assert_int_equal(p->after_close, 0);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

/* ---- cases -------------------------------------------------------------------------------- */

/* The session closes while the completion thread runs its last reply (close saw nothing in
 * flight) and a watch event comes in the IO thread's last read: it must still be run before
 * close returns, not left queued behind a completion thread that already stopped. */
static void test_event_while_completion_busy(void **state)
{
    (void)state;
    probe_t p;
    void *sess = open_session(&p);
    assert_int_equal(cq_coord_zk_libzk.list(sess), 0); /* sets the child watch */
    PROBE_WAIT(&p, p.members == 1);
    pthread_mutex_lock(&p.mu);
    p.block_epoch = true;
    pthread_mutex_unlock(&p.mu);
    assert_int_equal(cq_coord_zk_libzk.read_epoch(sess, false, 0), 0);
    PROBE_WAIT(&p, p.blocked);
    g_event_at_close = true;
    close_session(&p, sess);
    assert_int_equal(p.epochs, 1);
    assert_int_equal(p.changed, 1); /* the watch event ran, before close returned */
    probe_done(&p);
}

/* An expired session: the library refuses requests and reads nothing any more; close closes
 * the handle itself at once. */
static void test_close_expired(void **state)
{
    (void)state;
    probe_t p;
    void *sess = open_session(&p);
    assert_int_equal(cq_coord_zk_libzk.list(sess), 0);
    PROBE_WAIT(&p, p.members == 1);
    model_expire(g_zh);
    PROBE_WAIT(&p, p.expired);
    g_event_at_close = true;
    close_session(&p, sess);
    assert_int_equal(p.changed, 0);
    probe_done(&p);
}

/* No answer comes (the ensemble is unreachable): close stops waiting for its barrier and closes
 * the handle itself; the library then fails the barrier (ZCLOSING), which must not close the
 * handle a second time (the model fails on a second zookeeper_close). */
static void test_close_unanswered(void **state)
{
    (void)state;
    probe_t p;
    void *sess = open_session(&p);
    g_hold = true;
    close_session(&p, sess);
    probe_done(&p);
}

/* ---- the group membership (cq_zkgroup.h) ------------------------------------------------ */

typedef struct gprobe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cq_zkgroup_state_t ev[8];
    int nev, members;
    bool closed;
    int after_close;
} gprobe_t;

static void gprobe_members(void *ud, const cq_zkgroup_member_t *m, size_t n)
{
    (void)m, (void)n;
    gprobe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->after_close += p->closed;
    p->members++;
    pthread_mutex_unlock(&p->mu);
}

static void gprobe_session(void *ud, cq_zkgroup_state_t st, uint32_t session_ms)
{
    (void)session_ms;
    gprobe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->after_close += p->closed;
    if (p->nev < 8)
        p->ev[p->nev++] = st;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* A group's session expires while its join is in flight: the group closes that handle and opens
 * a new one (EXPIRED, then CONNECTED). The model never lists our node (its children are always
 * none), so each session gives up joining after a bounded number of creates, and reports no
 * list (a list is reported only once we are in it). Closing then destroys every handle, runs
 * every completion, and nothing reaches the sink afterwards. */
static void test_group_expiry_and_close(void **state)
{
    (void)state;
    model_reset();
    gprobe_t p = {.nev = 0};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    cq_zkgroup_conf_t conf = {
        .hosts = "model:1", .path = "/t/g/members", .session_ms = 6000, .data = "v1 node=1"};
    cq_zkgroup_sink_t sink = {.members = gprobe_members, .session = gprobe_session, .ud = &p};
    cq_zkgroup_t *g = NULL;
    assert_int_equal(cq_zkgroup_open(&conf, &sink, &g), 0);
    PROBE_WAIT(&p, p.nev == 1);
    pthread_mutex_lock(&g_mu);
    zhandle_t *first = g_zh;
    pthread_mutex_unlock(&g_mu);
    model_expire(first);
    PROBE_WAIT(&p, p.nev == 3);
    assert_int_equal(p.ev[0], CQ_ZKGROUP_CONNECTED);
    assert_int_equal(p.ev[1], CQ_ZKGROUP_EXPIRED);
    assert_int_equal(p.ev[2], CQ_ZKGROUP_CONNECTED);
    cq_zkgroup_stats_t st;
    cq_zkgroup_stats(g, &st);
    assert_int_equal(st.sessions, 2);
    assert_int_equal(st.expiries, 1);
    atomic_store(&g_closing, true);
    cq_zkgroup_close(g);
    pthread_mutex_lock(&p.mu);
    p.closed = true;
    pthread_mutex_unlock(&p.mu);
    pthread_mutex_lock(&g_mu);
    int live = g_live, dropped = g_dropped;
    pthread_mutex_unlock(&g_mu);
    assert_int_equal(live, 0);
    assert_int_equal(dropped, 0);
    assert_int_equal(p.members, 0);
    assert_int_equal(p.nev, 3);
    assert_int_equal(p.after_close, 0);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event_while_completion_busy),
        cmocka_unit_test(test_close_expired),
        cmocka_unit_test(test_close_unanswered),
        cmocka_unit_test(test_group_expiry_and_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
