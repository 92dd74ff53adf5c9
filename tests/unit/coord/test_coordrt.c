/* test_coordrt.c - the coord runtime (src/coord/coordrt.c) over the real machine, with a fake
 * ZooKeeper (an in-process server shared by the runtimes of a case, completing every operation
 * at once on the calling thread) and a fake database control. Deterministic: each step waits on
 * a condition, with a 10 s safety stop. */
#include "cq_clock.h"
#include "cq_coordrt.h"
#include "cq_err.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TEST_WAIT_MS 10000
#include "test_wait.h"
#include <errno.h>

#define MAXS   8
#define MAXLOG 64

/* ---- the fake ZooKeeper ------------------------------------------------------------------- */

typedef struct fz fz_t;

typedef struct fsess {
    fz_t *z;
    cq_coord_zk_sink_t sink;
    uint32_t session_ms;
    uint64_t node; /* our member's seq, 0: none */
    bool watch;    /* a LIST's watch is armed */
    bool twatch;   /* a topic listing's watch is armed */
} fsess_t;

typedef struct fnode {
    uint64_t seq;
    char data[256];
    fsess_t *owner;
} fnode_t;

struct fz {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fsess_t *sess[MAXS];
    fnode_t nodes[MAXS];
    size_t nnodes;
    uint64_t next_seq;
    char epoch[256];
    int32_t epoch_version; /* -1: no epoch node */
    int connects, closes, lists, pings;
    bool gate_pings; /* PINGs wait in read_epoch until this is false */
    int ping_waiting;
    cq_coord_topic_t topics[MAXS]; /* the registry, in write order */
    size_t ntopics;
    int puts, topic_lists;
    int fail_puts; /* this many next writes fail with -ENOTCONN */
};

static void fz_init(fz_t *z)
{
    memset(z, 0, sizeof *z);
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cv, NULL);
    z->epoch_version = -1;
}

static void fz_destroy(fz_t *z)
{
    pthread_mutex_destroy(&z->mu);
    pthread_cond_destroy(&z->cv);
}

static void post(fsess_t *s, const cq_coord_ev_t *ev)
{
    s->sink.post(s->sink.ud, s->sink.gen, ev);
}

static void post_rc(fsess_t *s, cq_coord_ev_type_t type, int rc)
{
    cq_coord_ev_t ev = {.type = type, .rc = rc};
    post(s, &ev);
}

/* Under z->mu: the member list changed; fire the armed watches. */
static void fz_changed(fz_t *z)
{
    for (int i = 0; i < MAXS; i++) {
        if (z->sess[i] && z->sess[i]->watch) {
            z->sess[i]->watch = false;
            post_rc(z->sess[i], CQ_COORD_EV_MEMBERS_CHANGED, 0);
        }
    }
}

static void fz_drop_node(fz_t *z, fsess_t *s)
{
    for (size_t i = 0; i < z->nnodes; i++) {
        if (z->nodes[i].owner == s) {
            memmove(&z->nodes[i], &z->nodes[i + 1], (z->nnodes - i - 1) * sizeof z->nodes[0]);
            z->nnodes--;
            s->node = 0;
            fz_changed(z);
            return;
        }
    }
}

static int f_connect(void *ud, const cq_coord_zk_conf_t *conf, const cq_coord_zk_sink_t *sink,
                     void **ret)
{
    fz_t *z = ud;
    fsess_t *s = calloc(1, sizeof *s);
    s->z = z;
    s->sink = *sink;
    s->session_ms = conf->session_ms;
    pthread_mutex_lock(&z->mu);
    for (int i = 0; i < MAXS; i++) {
        if (!z->sess[i]) {
            z->sess[i] = s;
            break;
        }
    }
    z->connects++;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_SESSION,
                        .arg = CQ_COORD_SESS_CONNECTED,
                        .session_ms = conf->session_ms};
    post(s, &ev);
    pthread_mutex_unlock(&z->mu);
    *ret = s;
    return 0;
}

static int f_join(void *sess, const char *text)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    pthread_mutex_lock(&z->mu);
    fnode_t *n = &z->nodes[z->nnodes++];
    n->seq = z->next_seq++;
    snprintf(n->data, sizeof n->data, "%s", text);
    n->owner = s;
    s->node = n->seq;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_JOINED, .seq = n->seq};
    post(s, &ev);
    fz_changed(z);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static int f_list(void *sess)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    cq_coord_member_t m[MAXS];
    size_t n = 0;
    pthread_mutex_lock(&z->mu);
    for (size_t i = 0; i < z->nnodes; i++) {
        if (cq_coord_member_parse(z->nodes[i].data, strlen(z->nodes[i].data), &m[n]) == 0)
            m[n++].seq = z->nodes[i].seq;
    }
    s->watch = true;
    z->lists++;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_MEMBERS, .members = m, .nmembers = n};
    post(s, &ev);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static int f_read_epoch(void *sess, bool is_ping, uint64_t sent_ms)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_EPOCH, .is_ping = is_ping, .sent_ms = sent_ms};
    pthread_mutex_lock(&z->mu);
    if (is_ping) {
        z->pings++;
        z->ping_waiting++;
        pthread_cond_broadcast(&z->cv);
        while (z->gate_pings)
            pthread_cond_wait(&z->cv, &z->mu);
        z->ping_waiting--;
    }
    ev.version = z->epoch_version;
    if (z->epoch_version < 0)
        ev.rc = -ENOENT;
    else
        ev.rc = cq_coord_epoch_parse(z->epoch, strlen(z->epoch), &ev.epoch, &ev.owner_seq,
                                     ev.owner_db, sizeof ev.owner_db);
    post(s, &ev);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static int f_set_epoch(void *sess, const char *text, int32_t version)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    int rc = 0;
    pthread_mutex_lock(&z->mu);
    if (version != z->epoch_version) {
        rc = CQ_ECONFLICT;
    } else {
        snprintf(z->epoch, sizeof z->epoch, "%s", text);
        z->epoch_version++;
    }
    post_rc(s, CQ_COORD_EV_EPOCH_SET, rc);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static int f_leave(void *sess)
{
    fsess_t *s = sess;
    pthread_mutex_lock(&s->z->mu);
    fz_drop_node(s->z, s);
    post_rc(s, CQ_COORD_EV_LEFT, 0);
    pthread_mutex_unlock(&s->z->mu);
    return 0;
}

static void f_close(void *sess)
{
    fsess_t *s = sess;
    if (!s)
        return;
    fz_t *z = s->z;
    pthread_mutex_lock(&z->mu);
    for (int i = 0; i < MAXS; i++)
        if (z->sess[i] == s)
            z->sess[i] = NULL;
    fz_drop_node(z, s);
    z->closes++;
    pthread_mutex_unlock(&z->mu);
    free(s);
}

static int topic_cmp(const void *a, const void *b)
{
    return strcmp(((const cq_coord_topic_t *)a)->name, ((const cq_coord_topic_t *)b)->name);
}

static int f_topics(void *sess)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    cq_coord_topic_t t[MAXS];
    pthread_mutex_lock(&z->mu);
    memcpy(t, z->topics, z->ntopics * sizeof t[0]);
    qsort(t, z->ntopics, sizeof t[0], topic_cmp);
    s->twatch = true;
    z->topic_lists++;
    s->sink.topics(s->sink.ud, s->sink.gen, 0, t, z->ntopics);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static int f_put_topic(void *sess, const char *name, const char *text)
{
    fsess_t *s = sess;
    fz_t *z = s->z;
    int rc = 0;
    pthread_mutex_lock(&z->mu);
    z->puts++;
    if (z->fail_puts > 0) {
        z->fail_puts--;
        rc = -ENOTCONN;
    } else {
        size_t i = 0;
        while (i < z->ntopics && strcmp(z->topics[i].name, name) != 0)
            i++;
        if (i == z->ntopics)
            z->ntopics++;
        snprintf(z->topics[i].name, sizeof z->topics[i].name, "%s", name);
        assert_int_equal(cq_coord_topic_parse(text, strlen(text), &z->topics[i]), 0);
        for (int k = 0; k < MAXS; k++) {
            if (z->sess[k] && z->sess[k]->twatch) {
                z->sess[k]->twatch = false;
                z->sess[k]->sink.topics_changed(z->sess[k]->sink.ud, z->sess[k]->sink.gen);
            }
        }
    }
    s->sink.put_done(s->sink.ud, s->sink.gen, name, rc);
    pthread_mutex_unlock(&z->mu);
    return 0;
}

static const cq_coord_zk_ops_t fz_ops = {
    .topics = f_topics,
    .put_topic = f_put_topic,
    .connect = f_connect,
    .join = f_join,
    .list = f_list,
    .read_epoch = f_read_epoch,
    .set_epoch = f_set_epoch,
    .leave = f_leave,
    .close = f_close,
};

/* The test thread posts session events as the library's session watcher would. */
static void fz_session_event(fz_t *z, int slot, int state)
{
    pthread_mutex_lock(&z->mu);
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_SESSION, .arg = state};
    if (state == CQ_COORD_SESS_CONNECTED)
        ev.session_ms = z->sess[slot]->session_ms;
    post(z->sess[slot], &ev);
    pthread_mutex_unlock(&z->mu);
}

/* ---- a member: the fake database and the role log ----------------------------------------- */

typedef struct rec {
    cq_coord_role_t role;
    uint64_t epoch;
    uint64_t master_seq; /* UINT64_MAX: none */
} rec_t;

typedef struct member {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rec_t roles[MAXLOG];
    int nroles;
    cq_coord_act_type_t db_log[MAXLOG * 4];
    int ndb;
    cq_coord_act_type_t gate_type; /* this DB action waits while gate is set */
    bool gate;
    bool gated; /* a DB action waits at the gate */
    char adv[32], db[32];
    cq_coordrt_t *rt;
    cq_coord_topic_t topics[MAXS]; /* the last registry seen */
    size_t ntopics;
    int topic_calls;
} member_t;

static void on_topics(void *ud, const cq_coord_topic_t *t, size_t n)
{
    member_t *mb = ud;
    pthread_mutex_lock(&mb->mu);
    mb->ntopics = n < MAXS ? n : MAXS;
    memcpy(mb->topics, t, mb->ntopics * sizeof t[0]);
    mb->topic_calls++;
    pthread_mutex_unlock(&mb->mu);
}

/* "name:online:retention,..." of the last registry the member saw. */
static void topics_text(member_t *mb, char *out, size_t n)
{
    size_t off = 0;
    out[0] = '\0';
    pthread_mutex_lock(&mb->mu);
    for (size_t i = 0; i < mb->ntopics && off < n; i++)
        off +=
            (size_t)snprintf(out + off, n - off, "%s%s:%d:%llu", i ? "," : "", mb->topics[i].name,
                             mb->topics[i].online, (unsigned long long)mb->topics[i].retention);
    pthread_mutex_unlock(&mb->mu);
}

static bool topics_are(member_t *mb, const char *want)
{
    char got[512];
    topics_text(mb, got, sizeof got);
    return strcmp(got, want) == 0;
}

static void on_role(void *ud, cq_coord_role_t role, uint64_t epoch, const cq_coord_member_t *m)
{
    member_t *mb = ud;
    pthread_mutex_lock(&mb->mu);
    if (mb->nroles < MAXLOG)
        mb->roles[mb->nroles++] = (rec_t){role, epoch, m ? m->seq : UINT64_MAX};
    pthread_mutex_unlock(&mb->mu);
}

static int db_run(void *ud, const cq_coord_act_t *a, cq_coord_ev_t *ret)
{
    member_t *mb = ud;
    pthread_mutex_lock(&mb->mu);
    if ((size_t)mb->ndb < sizeof mb->db_log / sizeof mb->db_log[0])
        mb->db_log[mb->ndb++] = a->type;
    while (mb->gate && a->type == mb->gate_type) {
        mb->gated = true;
        pthread_cond_wait(&mb->cv, &mb->mu);
    }
    mb->gated = false;
    pthread_mutex_unlock(&mb->mu);
    ret->db_replica = false;
    ret->db_read_only = false;
    return 0;
}

static const cq_coord_db_ops_t fdb_ops = {.run = db_run};

static void member_start(member_t *mb, fz_t *z, int i)
{
    memset(mb, 0, sizeof *mb);
    pthread_mutex_init(&mb->mu, NULL);
    pthread_cond_init(&mb->cv, NULL);
    snprintf(mb->adv, sizeof mb->adv, "127.0.0.1:%d", 27000 + i);
    snprintf(mb->db, sizeof mb->db, "127.0.0.1:%d", 23300 + i);
    cq_coordrt_opts_t o = {
        .coord = {.shard = 3, .adv = mb->adv, .db = mb->db, .session_ms = 2000},
        .zk_hosts = "fake:1",
        .zk = &fz_ops,
        .zk_ud = z,
        .db = &fdb_ops,
        .db_ud = mb,
        .on_role = on_role,
        .role_ud = mb,
        .on_topics = on_topics,
        .topics_ud = mb,
    };
    assert_int_equal(cq_coordrt_start(&o, &mb->rt), 0);
}

static void member_stop(member_t *mb)
{
    cq_coordrt_stop(mb->rt);
    mb->rt = NULL;
    pthread_mutex_destroy(&mb->mu);
    pthread_cond_destroy(&mb->cv);
}

static int nroles(member_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    int n = mb->nroles;
    pthread_mutex_unlock(&mb->mu);
    return n;
}

static rec_t role_at(member_t *mb, int i)
{
    pthread_mutex_lock(&mb->mu);
    rec_t r = mb->roles[i];
    pthread_mutex_unlock(&mb->mu);
    return r;
}

static int db_count(member_t *mb, cq_coord_act_type_t t)
{
    int n = 0;
    pthread_mutex_lock(&mb->mu);
    for (int i = 0; i < mb->ndb; i++)
        n += mb->db_log[i] == t;
    pthread_mutex_unlock(&mb->mu);
    return n;
}

static void set_gate(member_t *mb, cq_coord_act_type_t t, bool on)
{
    pthread_mutex_lock(&mb->mu);
    mb->gate_type = t;
    mb->gate = on;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

static bool is_gated(member_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    bool g = mb->gated;
    pthread_mutex_unlock(&mb->mu);
    return g;
}

/* ---- waiting ------------------------------------------------------------------------------ */

static int zint(fz_t *z, const int *p)
{
    pthread_mutex_lock(&z->mu);
    int v = *p;
    pthread_mutex_unlock(&z->mu);
    return v;
}

static void zget_epoch(fz_t *z, char *out, size_t n)
{
    pthread_mutex_lock(&z->mu);
    snprintf(out, n, "%s", z->epoch);
    pthread_mutex_unlock(&z->mu);
}

static bool acking(member_t *mb)
{
    return cq_coordrt_ack_until(mb->rt) > cq_clock_mono_ms();
}

/* ---- cases -------------------------------------------------------------------------------- */

/* One member: probe, join, elected, epoch 1 written, database made writable, MASTER. */
static void test_single_master(void **state)
{
    (void)state;
    fz_t z;
    member_t a;
    fz_init(&z);
    member_start(&a, &z, 1);
    WAIT_UNTIL(nroles(&a) >= 1);
    rec_t r = role_at(&a, 0);
    assert_int_equal(r.role, CQ_COORD_MASTER);
    assert_int_equal(r.epoch, 1);
    assert_int_equal(r.master_seq, 0);
    WAIT_UNTIL(acking(&a));
    char ep[256];
    zget_epoch(&z, ep, sizeof ep);
    assert_string_equal(ep, "1 0 127.0.0.1:23301");
    assert_int_equal(db_count(&a, CQ_COORD_ACT_DB_WRITABLE), 1);
    assert_int_equal(db_count(&a, CQ_COORD_ACT_DB_FENCE), 0); /* nobody to fence */

    cq_coord_member_t m[4];
    assert_int_equal(cq_coordrt_members(a.rt, m, 4), 1);
    assert_string_equal(m[0].adv, "127.0.0.1:27001");
    assert_string_equal(m[0].db, "127.0.0.1:23301");
    assert_true(m[0].eligible);

    cq_coordrt_stats_t st;
    cq_coordrt_stats(a.rt, &st);
    assert_int_equal(st.role, CQ_COORD_MASTER);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.session, CQ_COORD_SESS_CONNECTED);
    assert_int_equal(st.elections, 1);
    assert_int_equal(st.sessions, 1);
    assert_int_equal(nroles(&a), 1);

    member_stop(&a);
    assert_int_equal(z.closes, 1);
    assert_int_equal(z.nnodes, 0); /* the session's node went with it */
    fz_destroy(&z);
}

/* The session watcher zeroes ack_until itself, while the runtime thread is busy: here it is
 * stuck in a heartbeat (the fake holds its PING), so only the watcher path can have done it. */
static void test_watcher_zeroes_ack_until(void **state)
{
    (void)state;
    fz_t z;
    member_t a;
    fz_init(&z);
    member_start(&a, &z, 1);
    WAIT_UNTIL(nroles(&a) >= 1 && acking(&a));

    pthread_mutex_lock(&z.mu);
    z.gate_pings = true;
    pthread_mutex_unlock(&z.mu);
    WAIT_UNTIL(zint(&z, &z.ping_waiting) == 1);
    assert_true(acking(&a)); /* the lease still holds: pings go every session/6 */
    fz_session_event(&z, 0, CQ_COORD_SESS_CONNECTING);
    assert_int_equal(cq_coordrt_ack_until(a.rt), 0); /* at once, runtime thread still stuck */

    pthread_mutex_lock(&z.mu);
    z.gate_pings = false;
    pthread_cond_broadcast(&z.cv);
    pthread_mutex_unlock(&z.mu);
    /* The machine has seen CONNECTING: still master, but no acks until connected again. */
    cq_coordrt_stats_t st;
    do {
        cq_coordrt_stats(a.rt, &st);
        assert_int_equal(cq_coordrt_ack_until(a.rt), 0);
    } while (st.session != CQ_COORD_SESS_CONNECTING);
    assert_int_equal(cq_coordrt_ack_until(a.rt), 0);
    assert_int_equal(st.lease_remaining_ms, 0);

    fz_session_event(&z, 0, CQ_COORD_SESS_CONNECTED);
    WAIT_UNTIL(acking(&a));
    assert_int_equal(nroles(&a), 1); /* never lost the role: same session */
    assert_int_equal(role_at(&a, 0).epoch, 1);
    member_stop(&a);
    fz_destroy(&z);
}

/* Session expired: DOWN at once (ack_until 0), the runtime opens a new session, joins again and
 * takes the role with the next epoch. */
static void test_expired_reconnects(void **state)
{
    (void)state;
    fz_t z;
    member_t a;
    fz_init(&z);
    member_start(&a, &z, 1);
    WAIT_UNTIL(nroles(&a) >= 1 && acking(&a));
    /* ack_until is 0 from here until the new session's election; that the watcher zeroes it
     * at once is test_watcher_zeroes_ack_until's (there the runtime is held, so it can be
     * asserted). Not asserted here: the fake completes the new session and its election at
     * once, so on a loaded machine the runtime may be master again before this thread reads. */
    fz_session_event(&z, 0, CQ_COORD_SESS_EXPIRED);
    WAIT_UNTIL(nroles(&a) >= 3);
    assert_int_equal(role_at(&a, 1).role, CQ_COORD_DOWN);
    assert_int_equal(role_at(&a, 2).role, CQ_COORD_MASTER);
    assert_int_equal(role_at(&a, 2).epoch, 2);
    assert_int_equal(role_at(&a, 2).master_seq, 1); /* its new node */
    assert_int_equal(zint(&z, &z.connects), 2);
    assert_int_equal(zint(&z, &z.closes), 1);
    WAIT_UNTIL(acking(&a));
    cq_coordrt_stats_t st;
    cq_coordrt_stats(a.rt, &st);
    assert_int_equal(st.sessions, 2);
    assert_int_equal(st.elections, 2);
    member_stop(&a);
    fz_destroy(&z);
}

/* Two members: the first is master, the second a slave that knows it; stopping the master
 * (its node goes with its session) makes the second master with epoch 2, after fencing the
 * first one's database. */
static void test_failover_two_members(void **state)
{
    (void)state;
    fz_t z;
    member_t a, b;
    fz_init(&z);
    member_start(&a, &z, 1);
    WAIT_UNTIL(nroles(&a) >= 1);
    member_start(&b, &z, 2);
    WAIT_UNTIL(nroles(&b) >= 1);
    assert_int_equal(role_at(&b, 0).role, CQ_COORD_SLAVE);
    assert_int_equal(role_at(&b, 0).master_seq, 0);
    assert_false(acking(&b));
    cq_coord_member_t m[4];
    WAIT_UNTIL(cq_coordrt_members(a.rt, m, 4) == 2);
    assert_int_equal(m[1].seq, 1);
    assert_string_equal(m[1].adv, "127.0.0.1:27002");

    member_stop(&a);
    WAIT_UNTIL(nroles(&b) >= 2);
    assert_int_equal(role_at(&b, 1).role, CQ_COORD_MASTER);
    assert_int_equal(role_at(&b, 1).epoch, 2);
    assert_int_equal(role_at(&b, 1).master_seq, 1);
    WAIT_UNTIL(acking(&b));
    assert_int_equal(db_count(&b, CQ_COORD_ACT_DB_FENCE), 1);
    char ep[256];
    zget_epoch(&z, ep, sizeof ep);
    assert_string_equal(ep, "2 1 127.0.0.1:23302");
    cq_coordrt_stats_t st;
    cq_coordrt_stats(b.rt, &st);
    assert_int_equal(st.fences, 1);
    assert_int_equal(st.elections, 1);
    member_stop(&b);
    fz_destroy(&z);
}

/* A database action that blocks does not block the machine: while DB_WRITABLE waits, member
 * changes are still listed. */
static void test_db_thread_does_not_block(void **state)
{
    (void)state;
    fz_t z;
    member_t a, b;
    fz_init(&z);
    member_start(&a, &z, 1);
    set_gate(&a, CQ_COORD_ACT_DB_WRITABLE, true);
    WAIT_UNTIL(is_gated(&a));
    int lists = zint(&z, &z.lists);
    member_start(&b, &z, 2); /* its join fires a's watch: a lists again */
    WAIT_UNTIL(zint(&z, &z.lists) >= lists + 2);
    cq_coord_member_t m[4];
    WAIT_UNTIL(cq_coordrt_members(a.rt, m, 4) == 2);
    assert_int_equal(nroles(&a), 0); /* still taking the role */
    assert_int_equal(cq_coordrt_ack_until(a.rt), 0);
    set_gate(&a, CQ_COORD_ACT_DB_WRITABLE, false);
    WAIT_UNTIL(nroles(&a) >= 1);
    assert_int_equal(role_at(&a, 0).role, CQ_COORD_MASTER);
    assert_int_equal(role_at(&a, 0).epoch, 1);
    member_stop(&b);
    member_stop(&a);
    fz_destroy(&z);
}

/* Stop while a database action is still running: it is waited for, and no callback runs
 * afterwards. */
static void test_stop(void **state)
{
    (void)state;
    fz_t z;
    member_t a;
    fz_init(&z);
    cq_coordrt_stop(NULL);
    member_start(&a, &z, 1);
    WAIT_UNTIL(nroles(&a) >= 1);
    cq_coordrt_stop(a.rt);
    assert_int_equal(z.closes, 1);
    assert_int_equal(z.nnodes, 0);
    assert_int_equal(nroles(&a), 1);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);

    cq_coordrt_opts_t o = {.coord = {.adv = "127.0.0.1:1", .db = "127.0.0.1:2"}};
    cq_coordrt_t *rt = (cq_coordrt_t *)&o;
    assert_int_equal(cq_coordrt_start(&o, &rt), -EINVAL); /* no zk ops */
    assert_null(rt);
    o.zk = &fz_ops;
    o.zk_ud = &z;
    o.zk_hosts = "fake:1";
    o.coord.adv = "not an address";
    assert_int_equal(cq_coordrt_start(&o, &rt), -EINVAL); /* the machine refused the options */
    fz_destroy(&z);
}

/* The registry: a publish on one member reaches every member's on_topics, in order, a failed
 * write is retried, and a bad name is refused. */
static void test_topic_registry(void **state)
{
    (void)state;
    fz_t z;
    member_t a, b;
    fz_init(&z);
    member_start(&a, &z, 1);
    member_start(&b, &z, 2);
    WAIT_UNTIL(nroles(&b) >= 1);
    cq_coord_topic_t t = {.name = "orders", .online = true, .retention = 100};
    pthread_mutex_lock(&z.mu);
    z.fail_puts = 1;
    pthread_mutex_unlock(&z.mu);
    assert_int_equal(cq_coordrt_publish_topic(a.rt, &t), 0);
    WAIT_UNTIL(topics_are(&b, "orders:1:100"));
    assert_int_equal(zint(&z, &z.puts), 2); /* the failed write, then its retry */
    t.online = false;
    assert_int_equal(cq_coordrt_publish_topic(a.rt, &t), 0);
    cq_coord_topic_t u = {.name = "audit_log", .online = true, .retention = 0};
    assert_int_equal(cq_coordrt_publish_topic(b.rt, &u), 0);
    WAIT_UNTIL(topics_are(&a, "audit_log:1:0,orders:0:100"));
    WAIT_UNTIL(topics_are(&b, "audit_log:1:0,orders:0:100"));
    cq_coordrt_stats_t st;
    cq_coordrt_stats(a.rt, &st);
    assert_int_equal(st.topics, 2);

    cq_coord_topic_t bad = {.name = "no-dash"};
    assert_int_equal(cq_coordrt_publish_topic(a.rt, &bad), -EINVAL);
    memset(bad.name, 'x', CQ_COORD_TOPIC_MAX);
    bad.name[CQ_COORD_TOPIC_MAX] = '\0';
    assert_int_equal(cq_coordrt_publish_topic(a.rt, &bad), 0); /* 64 is the limit */
    bad.name[0] = '\0';
    assert_int_equal(cq_coordrt_publish_topic(a.rt, &bad), -EINVAL);
    member_stop(&b);
    member_stop(&a);
    fz_destroy(&z);
}

static void test_topic_text(void **state)
{
    (void)state;
    cq_coord_topic_t t = {.name = "keep"};
    char buf[64];
    assert_int_equal(cq_coord_topic_parse("online=1 retention=0", 20, &t), 0);
    assert_true(t.online);
    assert_int_equal(t.retention, 0);
    assert_string_equal(t.name, "keep");
    const char *max = "online=0 retention=18446744073709551615";
    assert_int_equal(cq_coord_topic_parse(max, strlen(max), &t), 0);
    assert_false(t.online);
    assert_true(t.retention == UINT64_MAX);
    assert_int_equal(cq_coord_topic_format(&t, buf, sizeof buf), 0);
    assert_string_equal(buf, max);
    assert_int_equal(cq_coord_topic_format(&t, buf, 10), -ENOSPC);
    const char *bad[] = {"",
                         "online=2 retention=1",
                         "online=1 retention=",
                         "online=1 retention=-1",
                         "online=1  retention=1",
                         "online=1 retention=1 ",
                         "online=1",
                         "online=1 retention=18446744073709551616",
                         "online=1 retention=1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cq_coord_topic_parse(bad[i], strlen(bad[i]), &t), CQ_EFIELD);
    /* Only len bytes count: the 5 is not part of the text. */
    assert_int_equal(cq_coord_topic_parse("online=1 retention=5", 19, &t), CQ_EFIELD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_master),
        cmocka_unit_test(test_watcher_zeroes_ack_until),
        cmocka_unit_test(test_expired_reconnects),
        cmocka_unit_test(test_failover_two_members),
        cmocka_unit_test(test_db_thread_does_not_block),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_topic_registry),
        cmocka_unit_test(test_topic_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
