/* test_it_zkgroup.c - the group membership (src/coord/cq_zkgroup.h) on a real 3-node ZooKeeper
 * ensemble (run_zk.sh passes CQ_ZK_HOSTS, and CQ_ZK_SH with CQ_ZK_BASE to restart its nodes):
 * members joining and leaving, a session expired and the member back with a new seq, the
 * connection lost without expiry, the member list's cap, and homes taken with compare-and-set.
 * Each case has its own path; every assertion is on exact lists (seq order, data bytes, self)
 * and exact event sequences; waits are on conditions (test_wait.h, safety stop 30 s).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define TEST_WAIT_MS 30000
#include "test_wait.h"

#include "cq_err.h"
#include "cq_zkgroup.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <zookeeper/zookeeper.h>

#define SESSION_MS 6000 /* survives a ZooKeeper node's restart on a loaded machine */
#define MAXEV      64
#define MAXGONE    8

static const char *g_hosts;

/* ---- a member and what its sink saw ------------------------------------------------------- */

typedef struct probe {
    pthread_mutex_t mu;
    cq_zkgroup_t *g;
    char data[128];
    cq_zkgroup_member_t *m; /* the last list */
    size_t n;
    int lists;
    cq_zkgroup_state_t ev[MAXEV]; /* session events, in order */
    uint32_t ev_ms[MAXEV];
    int nev;
    char gone[MAXGONE][CQ_ZKGROUP_NAME_MAX + 1];
    int ngone;
    int answers; /* claims answered; the last one: */
    int claim_rc;
    char holder[CQ_ZKGROUP_DATA_MAX + 1];
    bool mine;
    bool closed, late; /* cq_zkgroup_close returned; a callback came after it */
    bool overcap;      /* a list longer than CQ_ZKGROUP_MEMBERS_MAX came */
} probe_t;

static void on_members(void *ud, const cq_zkgroup_member_t *m, size_t n)
{
    probe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->late |= p->closed;
    p->overcap |= n > CQ_ZKGROUP_MEMBERS_MAX;
    p->n = n > CQ_ZKGROUP_MEMBERS_MAX ? CQ_ZKGROUP_MEMBERS_MAX : n;
    memcpy(p->m, m, p->n * sizeof *m);
    p->lists++;
    pthread_mutex_unlock(&p->mu);
}

static void on_session(void *ud, cq_zkgroup_state_t st, uint32_t session_ms)
{
    probe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->late |= p->closed;
    if (p->nev < MAXEV) {
        p->ev_ms[p->nev] = session_ms;
        p->ev[p->nev++] = st;
    }
    pthread_mutex_unlock(&p->mu);
}

static void on_home_gone(void *ud, const char *name)
{
    probe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->late |= p->closed;
    if (p->ngone < MAXGONE)
        snprintf(p->gone[p->ngone++], sizeof p->gone[0], "%s", name);
    pthread_mutex_unlock(&p->mu);
}

static void on_claim(void *ud, const char *name, int rc, const char *holder, size_t len, bool mine)
{
    (void)name;
    probe_t *p = ud;
    pthread_mutex_lock(&p->mu);
    p->late |= p->closed;
    p->claim_rc = rc;
    memcpy(p->holder, holder ? holder : "", holder ? len + 1 : 1);
    p->mine = mine;
    p->answers++;
    pthread_mutex_unlock(&p->mu);
}

static void probe_open(probe_t *p, const char *path, int node, uint32_t session_ms)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->m = calloc(CQ_ZKGROUP_MEMBERS_MAX, sizeof *p->m);
    assert_non_null(p->m);
    snprintf(p->data, sizeof p->data, "v1 node=%d addr=127.0.0.1:%d epoch=1700000000", node,
             12100 + node);
    cq_zkgroup_conf_t conf = {
        .hosts = g_hosts, .path = path, .session_ms = session_ms, .data = p->data};
    cq_zkgroup_sink_t sink = {
        .members = on_members, .session = on_session, .home_gone = on_home_gone, .ud = p};
    assert_int_equal(cq_zkgroup_open(&conf, &sink, &p->g), 0);
}

/* Closes the group; nothing may reach the probe afterwards (checked by probe_free). */
static void probe_close(probe_t *p)
{
    cq_zkgroup_close(p->g);
    p->g = NULL;
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    pthread_mutex_unlock(&p->mu);
}

static void probe_free(probe_t *p)
{
    if (p->g)
        probe_close(p);
    bool late = p->late, overcap = p->overcap;
    free(p->m);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
    assert_false(late);
    assert_false(overcap);
}

/* The members of a case: static, so that a case that failed midway leaves no sink pointing
 * into a dead stack frame; the teardown closes what it left open. */
static probe_t g_probe[3];

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        if (g_probe[i].m)
            probe_free(&g_probe[i]);
    return 0;
}

/* The last list is exactly want[0..n)'s data, in this order, with p itself flagged self. */
static bool list_is(probe_t *p, probe_t *const *want, size_t n)
{
    pthread_mutex_lock(&p->mu);
    bool eq = p->lists > 0 && p->n == n;
    for (size_t i = 0; eq && i < n; i++)
        eq = strcmp(p->m[i].data, want[i]->data) == 0 && p->m[i].len == strlen(want[i]->data) &&
             p->m[i].self == (want[i] == p) && (i == 0 || p->m[i].seq > p->m[i - 1].seq);
    pthread_mutex_unlock(&p->mu);
    return eq;
}

static uint64_t seq_at(probe_t *p, size_t i)
{
    pthread_mutex_lock(&p->mu);
    uint64_t seq = p->m[i].seq;
    pthread_mutex_unlock(&p->mu);
    return seq;
}

static int nev(probe_t *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->nev;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static cq_zkgroup_state_t ev_at(probe_t *p, int i)
{
    pthread_mutex_lock(&p->mu);
    cq_zkgroup_state_t st = p->ev[i];
    pthread_mutex_unlock(&p->mu);
    return st;
}

static int answers(probe_t *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->answers;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static int ngone(probe_t *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->ngone;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Claims name with data and waits for the answer: it must be rc 0 with holder and mine. */
static void claim_ok(probe_t *p, const char *name, const char *data, const char *holder, bool mine)
{
    int before = answers(p);
    assert_int_equal(cq_zkgroup_claim(p->g, name, data, on_claim, p), 0);
    WAIT_UNTIL(answers(p) > before);
    pthread_mutex_lock(&p->mu); /* copied: a failed assertion must not leave it locked */
    probe_t got = *p;
    pthread_mutex_unlock(&p->mu);
    assert_int_equal(got.answers, before + 1);
    assert_int_equal(got.claim_rc, 0);
    assert_string_equal(got.holder, holder);
    assert_int_equal(got.mine, mine);
}

static void assert_stats(probe_t *p, uint64_t sessions, uint64_t expiries)
{
    cq_zkgroup_stats_t st;
    cq_zkgroup_stats(p->g, &st);
    assert_int_equal(st.sessions, sessions);
    assert_int_equal(st.expiries, expiries);
    assert_int_equal(st.truncations, 0);
    assert_true(st.lists >= 1);
}

/* ---- the cases ---------------------------------------------------------------------------- */

/* Two, then three members join (each after the previous one is in): every one sees the exact
 * list, in join order, itself flagged; the seqs agree across members. The middle one closes:
 * the others see the exact list without it. Each was told CONNECTED once, with the session
 * timeout it asked for (inside the ensemble's 1000..30000). */
static void test_join_and_leave(void **state)
{
    (void)state;
    const char *path = "/it-zkgroup/join/members";
    probe_t *a = &g_probe[0], *b = &g_probe[1], *c = &g_probe[2];
    probe_open(a, path, 1, SESSION_MS);
    WAIT_UNTIL(list_is(a, (probe_t *[]){a}, 1));
    probe_open(b, path, 2, SESSION_MS);
    probe_t *ab[] = {a, b};
    WAIT_UNTIL(list_is(a, ab, 2) && list_is(b, ab, 2));
    assert_int_equal(seq_at(a, 0), seq_at(b, 0));
    assert_int_equal(seq_at(a, 1), seq_at(b, 1));

    probe_open(c, path, 3, SESSION_MS);
    probe_t *abc[] = {a, b, c};
    WAIT_UNTIL(list_is(a, abc, 3) && list_is(b, abc, 3) && list_is(c, abc, 3));
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(seq_at(c, i), seq_at(a, i));
        assert_int_equal(seq_at(c, i), seq_at(b, i));
    }
    uint64_t sa = seq_at(a, 0), sc = seq_at(a, 2);

    probe_close(b);
    probe_t *ac[] = {a, c};
    WAIT_UNTIL(list_is(a, ac, 2) && list_is(c, ac, 2));
    assert_int_equal(seq_at(a, 0), sa);
    assert_int_equal(seq_at(a, 1), sc);
    assert_int_equal(seq_at(c, 1), sc);
    probe_t *all[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(nev(all[i]), 1);
        assert_int_equal(ev_at(all[i], 0), CQ_ZKGROUP_CONNECTED);
        assert_int_equal(all[i]->ev_ms[0], SESSION_MS);
    }
    assert_stats(a, 1, 0);
    for (int i = 0; i < 3; i++)
        probe_free(all[i]);
}

/* b's session is ended by the ensemble: a sees b's node go, b is told EXPIRED then CONNECTED
 * (a new session) and joins again with a new seq, above everything before; both see it. */
static void test_expiry_rejoins(void **state)
{
    (void)state;
    const char *path = "/it-zkgroup/expiry/members";
    probe_t *a = &g_probe[0], *b = &g_probe[1];
    probe_open(a, path, 1, SESSION_MS);
    WAIT_UNTIL(list_is(a, (probe_t *[]){a}, 1));
    probe_open(b, path, 2, 2000);
    probe_t *ab[] = {a, b};
    WAIT_UNTIL(list_is(a, ab, 2) && list_is(b, ab, 2));
    uint64_t sa = seq_at(a, 0), old = seq_at(b, 1);
    int lists_before = a->lists;
    assert_int_equal(nev(b), 1);

    assert_int_equal(cq_zkgroup_kill_session(b->g), 0);
    WAIT_UNTIL(list_is(a, ab, 2) && seq_at(a, 1) > old && list_is(b, ab, 2) && seq_at(b, 1) > old);
    assert_true(a->lists > lists_before);
    assert_int_equal(seq_at(a, 0), sa);
    assert_int_equal(seq_at(b, 0), sa);
    assert_int_equal(seq_at(b, 1), seq_at(a, 1));
    /* b: CONNECTED, then DISCONNECTED when the ensemble dropped its connection (it may have
     * taken the session back once before the close went out: the hook then tries again),
     * then EXPIRED and CONNECTED on the new session, last. */
    int n = nev(b);
    assert_true(n >= 3);
    assert_int_equal(ev_at(b, 0), CQ_ZKGROUP_CONNECTED);
    assert_int_equal(ev_at(b, n - 2), CQ_ZKGROUP_EXPIRED);
    assert_int_equal(ev_at(b, n - 1), CQ_ZKGROUP_CONNECTED);
    for (int i = 1; i < n - 2; i++)
        assert_int_not_equal(ev_at(b, i), CQ_ZKGROUP_EXPIRED);
    assert_stats(b, 2, 1);
    assert_stats(a, 1, 0);
    assert_int_equal(nev(a), 1);
    probe_free(b);
    probe_free(a);
}

/* Runs "$CQ_ZK_SH CMD $CQ_ZK_BASE ARG" (run_zk.sh's ensemble); its exit status. */
static int zksh(const char *cmd, int node)
{
    char line[1024];
    snprintf(line, sizeof line, "'%s' %s '%s' %d >/dev/null", getenv("CQ_ZK_SH"), cmd,
             getenv("CQ_ZK_BASE"), node);
    int st = system(line);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Every ZooKeeper node is killed and started again in turn, so each member loses its
 * connection at least once: it is told DISCONNECTED and CONNECTED, never EXPIRED, keeps its
 * session and its node (the same seqs), and the list ends as it began. */
static void test_disconnect_keeps_session(void **state)
{
    (void)state;
    if (!getenv("CQ_ZK_SH") || !getenv("CQ_ZK_BASE"))
        skip();
    const char *path = "/it-zkgroup/disconnect/members";
    probe_t *a = &g_probe[0], *b = &g_probe[1];
    probe_open(a, path, 1, SESSION_MS);
    WAIT_UNTIL(list_is(a, (probe_t *[]){a}, 1));
    probe_open(b, path, 2, SESSION_MS);
    probe_t *ab[] = {a, b};
    WAIT_UNTIL(list_is(a, ab, 2) && list_is(b, ab, 2));
    uint64_t sa = seq_at(a, 0), sb = seq_at(a, 1);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(zksh("kill-node", i), 0);
        assert_int_equal(zksh("start-node", i), 0);
    }
    probe_t *all[] = {a, b};
    for (int k = 0; k < 2; k++) {
        probe_t *p = all[k];
        WAIT_UNTIL(nev(p) >= 3 && ev_at(p, nev(p) - 1) == CQ_ZKGROUP_CONNECTED);
        int n = nev(p);
        for (int i = 0; i < n; i++) /* alternating, from CONNECTED */
            assert_int_equal(ev_at(p, i), i % 2 ? CQ_ZKGROUP_DISCONNECTED : CQ_ZKGROUP_CONNECTED);
        assert_stats(p, 1, 0);
        WAIT_UNTIL(list_is(p, ab, 2));
        assert_int_equal(seq_at(p, 0), sa);
        assert_int_equal(seq_at(p, 1), sb);
    }
    probe_free(b);
    probe_free(a);
}

/* A home with compare-and-set: a takes it; b finds it held (a's data, not b's); a's second
 * claim finds its own. a leaves: b is told once, takes it; c watching it sees b's session
 * expire and takes it in turn; b takes its other home back on its new session. Bad names and
 * data are refused before anything is sent. */
static void test_claim(void **state)
{
    (void)state;
    const char *path = "/it-zkgroup/claim/members";
    probe_t *a = &g_probe[0], *b = &g_probe[1], *c = &g_probe[2];
    probe_t *abc[] = {a, b, c};
    for (size_t i = 0; i < 3; i++) { /* in this order: a's seq is the lowest */
        probe_open(abc[i], path, (int)i + 1, SESSION_MS);
        WAIT_UNTIL(list_is(abc[i], abc, i + 1));
    }

    claim_ok(a, "GLOBAL", "node=1", "node=1", true);
    claim_ok(b, "GLOBAL", "node=2", "node=1", false);
    claim_ok(a, "GLOBAL", "node=1 again", "node=1", true);
    claim_ok(b, "spatial-ctl.0", "node=2", "node=2", true); /* another home: b's */

    probe_close(a);
    WAIT_UNTIL(ngone(b) == 1);
    assert_string_equal(b->gone[0], "GLOBAL");
    claim_ok(b, "GLOBAL", "node=2", "node=2", true);
    claim_ok(c, "GLOBAL", "node=3", "node=2", false);

    assert_int_equal(cq_zkgroup_kill_session(b->g), 0);
    WAIT_UNTIL(ngone(c) == 1);
    assert_string_equal(c->gone[0], "GLOBAL");
    claim_ok(c, "GLOBAL", "node=3", "node=3", true);
    /* b's homes went with its session, and its watches. Whether b's connection was still
     * there to be told of their deletion depends on the server it was on: each at most once. */
    probe_t *cb[] = {c, b}; /* b's new node is above c's */
    WAIT_UNTIL(list_is(b, cb, 2) && list_is(c, cb, 2));
    int n = ngone(b);
    assert_true(n >= 1 && n <= 3);
    for (int i = 1; i < n; i++) {
        assert_true(strcmp(b->gone[i], "GLOBAL") == 0 || strcmp(b->gone[i], "spatial-ctl.0") == 0);
        assert_true(i == 1 || strcmp(b->gone[1], b->gone[2]) != 0);
    }
    claim_ok(b, "spatial-ctl.0", "node=2", "node=2", true);

    assert_int_equal(cq_zkgroup_claim(c->g, "", "x", on_claim, c), -EINVAL);
    assert_int_equal(cq_zkgroup_claim(c->g, "..", "x", on_claim, c), -EINVAL);
    assert_int_equal(cq_zkgroup_claim(c->g, "a/b", "x", on_claim, c), -EINVAL);
    char big[CQ_ZKGROUP_DATA_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(cq_zkgroup_claim(c->g, "GLOBAL", big, on_claim, c), -EINVAL);
    assert_int_equal(answers(c), 2);
    assert_int_equal(ngone(c), 1);
    probe_free(a);
    probe_free(b);
    probe_free(c);
}

/* ---- the cap: more children than CQ_ZKGROUP_MEMBERS_MAX ---------------------------------- */

typedef struct zkc {
    pthread_mutex_t mu;
    int connected, done, failed;
} zkc_t;

static void zkc_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)path;
    zkc_t *z = ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        pthread_mutex_lock(&z->mu);
        z->connected = 1;
        pthread_mutex_unlock(&z->mu);
    }
}

static void zkc_created(int rc, const char *name, const void *data)
{
    (void)name;
    zkc_t *z = (zkc_t *)data;
    pthread_mutex_lock(&z->mu);
    z->done++;
    z->failed += rc != ZOK;
    pthread_mutex_unlock(&z->mu);
}

static int zkc_get(zkc_t *z, int *field)
{
    pthread_mutex_lock(&z->mu);
    int v = *field;
    pthread_mutex_unlock(&z->mu);
    return v;
}

/* A list cut at the cap was reported: the 1024 lowest seqs, 0..1023. */
static bool cap_listed(probe_t *p)
{
    cq_zkgroup_stats_t st;
    cq_zkgroup_stats(p->g, &st);
    pthread_mutex_lock(&p->mu);
    bool cut = (st.truncations > 0 || p->overcap) && p->n == CQ_ZKGROUP_MEMBERS_MAX &&
               p->m[p->n - 1].seq == 1023;
    pthread_mutex_unlock(&p->mu);
    return cut;
}

/* Our member is seq 0; another session adds 1030 members' nodes by hand (seqs 1..1030, as
 * ZooKeeper would name them): the list is cut to the 1024 lowest seqs, counted once per list
 * read, and each member's data is its own. */
static void test_cap(void **state)
{
    (void)state;
    const char *path = "/it-zkgroup/cap/members";
    enum { EXTRA = 1030 };
    probe_t *a = &g_probe[0];
    probe_open(a, path, 1, SESSION_MS);
    WAIT_UNTIL(list_is(a, (probe_t *[]){a}, 1));
    assert_int_equal(seq_at(a, 0), 0);

    zkc_t z = {.connected = 0};
    pthread_mutex_init(&z.mu, NULL);
    zhandle_t *zh = zookeeper_init(g_hosts, zkc_watch, SESSION_MS, NULL, &z, 0);
    assert_non_null(zh);
    WAIT_UNTIL(zkc_get(&z, &z.connected));
    for (int i = 1; i <= EXTRA; i++) {
        char p[256], d[32];
        snprintf(p, sizeof p, "%s/m_00000000000000ff_%010d", path, i);
        int n = snprintf(d, sizeof d, "f%d", i);
        assert_int_equal(
            zoo_acreate(zh, p, d, n, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, zkc_created, &z), ZOK);
    }
    WAIT_UNTIL(zkc_get(&z, &z.done) == EXTRA);
    assert_int_equal(zkc_get(&z, &z.failed), 0);

    WAIT_UNTIL(cap_listed(a));
    static cq_zkgroup_member_t m[CQ_ZKGROUP_MEMBERS_MAX]; /* copied: no assertion locked */
    pthread_mutex_lock(&a->mu);
    size_t n = a->n;
    memcpy(m, a->m, n * sizeof m[0]);
    pthread_mutex_unlock(&a->mu);
    assert_int_equal(n, CQ_ZKGROUP_MEMBERS_MAX);
    assert_true(m[0].self);
    assert_string_equal(m[0].data, a->data);
    for (size_t i = 1; i < n; i++) {
        char d[32];
        snprintf(d, sizeof d, "f%zu", i);
        assert_int_equal(m[i].seq, i);
        assert_false(m[i].self);
        assert_string_equal(m[i].data, d);
    }
    zookeeper_close(zh); /* its 1030 nodes go: a's list is a alone again */
    pthread_mutex_destroy(&z.mu);
    WAIT_UNTIL(list_is(a, (probe_t *[]){a}, 1));
    probe_free(a);
}

/* What open refuses, before any session. */
static void test_open_refuses(void **state)
{
    (void)state;
    cq_zkgroup_sink_t sink = {.members = on_members, .session = on_session};
    cq_zkgroup_t *g = NULL;
    const char *bad[] = {"", "/", "members", "/a/", "/a//b", "/a/./b", "/a/.."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cq_zkgroup_conf_t conf = {.hosts = g_hosts, .path = bad[i], .data = "x"};
        assert_int_equal(cq_zkgroup_open(&conf, &sink, &g), -EINVAL);
        assert_null(g);
    }
    char big[CQ_ZKGROUP_DATA_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cq_zkgroup_conf_t conf = {.hosts = g_hosts, .path = "/it-zkgroup/x", .data = big};
    assert_int_equal(cq_zkgroup_open(&conf, &sink, &g), -EINVAL);
    conf = (cq_zkgroup_conf_t){.hosts = "", .path = "/it-zkgroup/x", .data = "x"};
    assert_int_equal(cq_zkgroup_open(&conf, &sink, &g), -EINVAL);
    cq_zkgroup_close(NULL);
}

int main(void)
{
    g_hosts = getenv("CQ_ZK_HOSTS");
    if (!g_hosts || !*g_hosts) {
        printf("1..0 # SKIP needs CQ_ZK_HOSTS (run_zk.sh sets it)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_open_refuses, teardown),
        cmocka_unit_test_teardown(test_join_and_leave, teardown),
        cmocka_unit_test_teardown(test_expiry_rejoins, teardown),
        cmocka_unit_test_teardown(test_claim, teardown),
        cmocka_unit_test_teardown(test_cap, teardown),
        cmocka_unit_test_teardown(test_disconnect_keeps_session, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
