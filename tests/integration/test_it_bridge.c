/* test_it_bridge.c - durable topics delivered into channels (issue 24, doc/bridge.md), end to
 * end: chanqd with --bridge-file, messages produced over the HTTP API, and game clients that
 * receive them as TopicEvents: a broadcast binding on GLOBAL, and a route binding that finds
 * the player by the PIT it authenticated with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bridge.pb-c.h"
#include "it_common.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MT_RELEASE = 200, MT_VIP = 201 };

static const char bindings[] =
    "{\"bindings\": ["
    "{\"topic\": \"release\", \"broadcast\": \"global\", \"msg_type\": 200},"
    "{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 201}]}";

/* --backend=mysql (it-bridge-mariadb): the store is a database of the MariaDB server that
 * run_mariadb.sh started (CQ_MARIADB_PORT), a new one per test; else the embedded SQLite. */
static const char *g_mysql_port;
static char g_db[64];
static int g_db_seq;

static const char *g_bindings = bindings; /* the file start_resume writes */

static int teardown(void **state)
{
    g_bindings = bindings;
    g_db_seq++; /* the next test gets a database of its own; a restart keeps this one */
    return it_teardown(state);
}

static void start_resume(const char *ring, const char *chunk)
{
    const char *path = it_file("bindings.json", g_bindings);
    const char *args[24] = {"--dev",
                            "--client-fsm",
                            it_client_auth_fsm(),
                            "--bridge-file",
                            path,
                            "--bridge-ring-events",
                            ring,
                            "--bridge-resume-chunk",
                            chunk};
    size_t n = 9;
    if (g_mysql_port) {
        snprintf(g_db, sizeof(g_db), "bridge_%d_%d", (int)getpid(), g_db_seq);
        const char *my[] = {"--store-backend", "mysql", "--mysql-port",     g_mysql_port,
                            "--mysql-user",    "root",  "--mysql-database", g_db};
        for (size_t i = 0; i < sizeof(my) / sizeof(my[0]); i++)
            args[n++] = my[i];
    }
    args[n] = NULL;
    it_startv(args);
}

static void start_ring(const char *ring)
{
    start_resume(ring, "512");
}

static void start(void)
{
    start_ring("8192");
}

/* c's next message is a TopicEvent of msg_type on channel 0 for topic at offset, following
 * prev, with content; returns it (chanqpb__topic_event__free_unpacked). */
static uint64_t expect_event_on(it_conn_t *c, uint32_t chan, uint32_t msg_type, const char *topic,
                                uint64_t offset, uint64_t prev, const char *content)
{
    chanq_owned_msg_t m;
    it_recv(c, &m);
    assert_int_equal(m.msg_type, msg_type);
    assert_int_equal(m.channel_id, chan);
    assert_int_equal(m.stub_id, 0);
    /* as a server's broadcast reaches a client: the event is the ServerForwardMessage's payload */
    Channeldpb__ServerForwardMessage *f =
        channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, 0);
    Chanqpb__TopicEvent *ev = chanqpb__topic_event__unpack(NULL, f->payload.len, f->payload.data);
    channeldpb__server_forward_message__free_unpacked(f, NULL);
    assert_non_null(ev);
    assert_string_equal(ev->topic, topic);
    assert_int_equal(ev->offset, offset);
    assert_int_equal(ev->prev_offset, prev);
    assert_int_equal(ev->shard, 0);
    assert_int_equal(ev->content.len, strlen(content));
    assert_memory_equal(ev->content.data, content, strlen(content));
    assert_true(ev->time_ms > 1700000000000);
    uint64_t epoch = ev->epoch;
    chanqpb__topic_event__free_unpacked(ev, NULL);
    chanq_owned_msg_done(&m);
    return epoch;
}

/* ... on channel 0; returns the event's epoch */
static uint64_t expect_event(it_conn_t *c, uint32_t msg_type, const char *topic, uint64_t offset,
                             uint64_t prev, const char *content)
{
    return expect_event_on(c, 0, msg_type, topic, offset, prev, content);
}

/* The epoch of c's next TopicEvent (release, msg 200), which must be at offset. */
static uint64_t event_epoch(it_conn_t *c, uint64_t offset)
{
    chanq_owned_msg_t m;
    it_recv(c, &m);
    assert_int_equal(m.msg_type, MT_RELEASE);
    Channeldpb__ServerForwardMessage *f =
        channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(f);
    Chanqpb__TopicEvent *ev = chanqpb__topic_event__unpack(NULL, f->payload.len, f->payload.data);
    assert_non_null(ev);
    assert_int_equal(ev->offset, offset);
    uint64_t epoch = ev->epoch;
    chanqpb__topic_event__free_unpacked(ev, NULL);
    channeldpb__server_forward_message__free_unpacked(f, NULL);
    chanq_owned_msg_done(&m);
    return epoch;
}

/* Sends a TopicResumeMessage (type 90) on chan with one position of topic. */
static void send_resume_on(it_conn_t *c, uint32_t chan, const char *topic, uint64_t epoch,
                           uint64_t offset)
{
    Chanqpb__TopicPosition p = CHANQPB__TOPIC_POSITION__INIT, *pp = &p;
    p.topic = (char *)topic;
    p.shard = 0;
    p.epoch = epoch;
    p.offset = offset;
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    m.n_positions = 1;
    m.positions = &pp;
    assert_int_equal(chanq_sync_send(c->s, chan, 0, 0, 90, &m.base), 0);
}

/* ... on GLOBAL, of "release". */
static void send_resume(it_conn_t *c, uint64_t epoch, uint64_t offset)
{
    send_resume_on(c, 0, "release", epoch, offset);
}

/* c's next message is the TopicResumeResultMessage (type 91 on GLOBAL): recovered, the one
 * position (release at offset), the error text. */
static void expect_result_on(it_conn_t *c, uint32_t chan, const char *topic, bool recovered,
                             uint64_t epoch, uint64_t offset, const char *error)
{
    chanq_owned_msg_t env;
    Chanqpb__TopicResumeResultMessage *r =
        it_expect(c, 91, 0, &chanqpb__topic_resume_result_message__descriptor, &env);
    assert_non_null(r);
    assert_int_equal(env.channel_id, chan);
    assert_int_equal(r->recovered, recovered);
    assert_string_equal(r->error, error);
    assert_int_equal(r->n_positions, 1);
    assert_string_equal(r->positions[0]->topic, topic);
    assert_int_equal(r->positions[0]->shard, 0);
    assert_int_equal(r->positions[0]->epoch, epoch);
    assert_int_equal(r->positions[0]->offset, offset);
    chanq_unpack_free(r);
    chanq_owned_msg_done(&env);
}

static void expect_result(it_conn_t *c, bool recovered, uint64_t epoch, uint64_t offset,
                          const char *error)
{
    expect_result_on(c, 0, "release", recovered, epoch, offset, error);
}

static it_conn_t *player(const char *pit)
{
    it_conn_t *c = it_connect(false, NULL);
    it_auth(c, pit, "lt");
    return c;
}

/* A broadcast binding: every subscriber of GLOBAL gets each message of "release" once, in
 * offset order, each event pointing at the previous one; a player not subscribed gets none (a
 * routed event that follows is its next message). */
static void test_broadcast_global(void **state)
{
    (void)state;
    start();
    it_create_topic("release");
    it_create_topic("vip");
    it_conn_t *a = player("alice"), *b = player("bob"), *n = player("nobody");
    it_sub(a, 1, 0, a->id, -1);
    it_expect_sub(a, 0, 1, a->id, 2 /* CLIENT */, 1 /* GLOBAL */, 1);
    it_sub(b, 2, 0, b->id, -1);
    it_expect_sub(b, 0, 2, b->id, 2, 1, 1);
    uint64_t o[3], prev = 0;
    const char *content[3] = {"{\"version\":\"1.0.1\"}", "\"1.0.2\"", "{\"version\":\"1.1\"}"};
    const char *stored[3] = {"{\"version\":\"1.0.1\"}", "1.0.2", "{\"version\":\"1.1\"}"};
    for (int i = 0; i < 3; i++)
        o[i] = it_produce("release", content[i]);
    for (int i = 0; i < 3; i++) {
        assert_true(o[i] > prev);
        expect_event(a, MT_RELEASE, "release", o[i], prev, stored[i]);
        expect_event(b, MT_RELEASE, "release", o[i], prev, stored[i]);
        prev = o[i];
    }
    uint64_t v = it_produce("vip", "{\"user_id\":\"nobody\"}");
    expect_event(n, MT_VIP, "vip", v, 0, "{\"user_id\":\"nobody\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 4);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_outputs_total"), 4);
}

/* Produces n messages of "release" ({"n":i} for i from first), their offsets into o. */
static void produce_n(uint64_t *o, int first, int n)
{
    for (int i = 0; i < n; i++) {
        char content[32];
        snprintf(content, sizeof(content), "{\"n\":%d}", first + i);
        o[i] = it_produce("release", content);
    }
}

static void expect_n(it_conn_t *c, const uint64_t *o, int first, int n, uint64_t prev)
{
    for (int i = 0; i < n; i++) {
        char content[32];
        snprintf(content, sizeof(content), "{\"n\":%d}", first + i);
        expect_event(c, MT_RELEASE, "release", o[i], prev, content);
        prev = o[i];
    }
}

/* A player authenticated with pit and subscribed to GLOBAL (its SUB result consumed). */
static it_conn_t *on_global(const char *pit)
{
    it_conn_t *c = player(pit);
    it_sub(c, 1, 0, c->id, -1);
    it_expect_sub(c, 0, 1, c->id, 2, 1, 1);
    return c;
}

/* Produces n events of "release" into o[0..n) and checks c receives them, in order after none;
 * returns their epoch. */
static uint64_t live_n(it_conn_t *c, uint64_t *o, int n)
{
    produce_n(o, 0, n);
    uint64_t epoch = event_epoch(c, o[0]);
    expect_n(c, o + 1, 1, n - 1, o[0]);
    return epoch;
}

/* Resume: a player drops halfway through a stream, the stream goes on while it is away, and it
 * comes back with its position: the result says recovered with its position, then every event
 * after it comes once, in order, then the live ones (the switch). With a ring of 100 events the
 * position is older than the ring: it is checked in the store and the missed events are read
 * from it. */
static void resume_after_drop(const char *ring)
{
    start_ring(ring);
    it_create_topic("release");
    enum { N = 1000, HALF = 500 };
    static uint64_t o[N + 1];
    it_conn_t *a = on_global("alice");
    uint64_t epoch = live_n(a, o, HALF);
    it_close(a);
    produce_n(o + HALF, HALF, N - HALF); /* while alice is away */
    it_conn_t *b = on_global("alice");
    send_resume(b, epoch, o[HALF - 1]);
    expect_result(b, true, epoch, o[HALF - 1], "");
    expect_n(b, o + HALF, HALF, N - HALF, o[HALF - 1]);
    produce_n(o + N, N, 1); /* live again: the next one follows the catch-up */
    expect_n(b, o + N, N, 1, o[N - 1]);
    long reads = cq_testsrv_metric(it_srv(), "chanq_bridge_resume_reads_total");
    long ring_ev = cq_testsrv_metric(it_srv(), "chanq_bridge_resume_events_total{source=\"ring\"}");
    long store_ev =
        cq_testsrv_metric(it_srv(), "chanq_bridge_resume_events_total{source=\"store\"}");
    assert_int_equal(ring_ev + store_ev, N - HALF);
    if (atoi(ring) >= N) {
        assert_int_equal(reads, 0);
        assert_int_equal(ring_ev, N - HALF);
    } else {
        /* the check of the position, then one read of the 500 rows (a chunk is 512) */
        assert_int_equal(reads, 2);
        assert_int_equal(store_ev, N - HALF);
    }
    assert_int_equal(
        cq_testsrv_metric(it_srv(), "chanq_bridge_resumes_total{outcome=\"recovered\"}"), 1);
}

/* The baseline: a player resumes right after its first SUB, with no position, while the topic
 * has no event; the result's position is offset 0 under the store's epoch. It drops before the
 * first event, 150 are published while it is away, and it resumes from offset 0: recovered, all
 * 150 once and in order (one read of the store: the ring keeps 100 and so lacks the first), then
 * the live one.
 * Before the rule for offset 0 under the shard's epoch, it got none of them and no hole showed. */
static void test_resume_from_baseline(void **state)
{
    (void)state;
    start_ring("100");
    it_create_topic("release");
    enum { N = 150 };
    static uint64_t o[N + 1];
    it_conn_t *a = on_global("alice");
    Chanqpb__TopicResumeMessage none = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    assert_int_equal(chanq_sync_send(a->s, 0, 0, 0, 90, &none.base), 0);
    chanq_owned_msg_t env;
    Chanqpb__TopicResumeResultMessage *r =
        it_expect(a, 91, 0, &chanqpb__topic_resume_result_message__descriptor, &env);
    assert_non_null(r);
    assert_true(r->recovered);
    assert_int_equal(r->n_positions, 1);
    assert_string_equal(r->positions[0]->topic, "release");
    assert_int_equal(r->positions[0]->offset, 0);
    uint64_t epoch = r->positions[0]->epoch;
    assert_true(epoch > 0);
    chanq_unpack_free(r);
    chanq_owned_msg_done(&env);
    it_close(a);
    produce_n(o, 0, N);
    it_conn_t *b = on_global("alice");
    send_resume(b, epoch, 0);
    expect_result(b, true, epoch, 0, "");
    expect_n(b, o, 0, N, 0);
    produce_n(o + N, N, 1);
    expect_n(b, o + N, N, 1, o[N - 1]);
    assert_int_equal(
        cq_testsrv_metric(it_srv(), "chanq_bridge_resume_events_total{source=\"store\"}"), N);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_resume_reads_total"), 1);
}

static void test_resume_from_ring(void **state)
{
    (void)state;
    resume_after_drop("8192");
}

static void test_resume_from_store(void **state)
{
    (void)state;
    resume_after_drop("100");
}

/* The same across a SIGKILL of chanqd and a restart on the same store: every event the
 * publisher had an answer for reaches the player once, in order (the ring is gone: the
 * position is checked in the store and the missed events are read from it). */
static void test_resume_after_sigkill(void **state)
{
    (void)state;
    start();
    it_create_topic("release");
    enum { N = 200, HALF = 100 };
    static uint64_t o[N + 1];
    it_conn_t *a = on_global("alice");
    uint64_t epoch = live_n(a, o, HALF);
    produce_n(o + HALF, HALF, N - HALF - 50); /* acknowledged: alice may or may not see them */
    cq_testsrv_kill(it_srv(), SIGKILL);
    it_close(a); /* its socket died with the server */
    start();
    produce_n(o + N - 50, N - 50, 50); /* after the restart */
    it_conn_t *b = on_global("alice");
    send_resume(b, epoch, o[HALF - 1]);
    expect_result(b, true, epoch, o[HALF - 1], "");
    expect_n(b, o + HALF, HALF, N - HALF, o[HALF - 1]);
    produce_n(o + N, N, 1);
    expect_n(b, o + N, N, 1, o[N - 1]);
}

/* A store made anew (deleted, or another database) is a new history: its epoch is its creation
 * time, so a position of the old one is not recovered, even where the new one has the same
 * offsets, rather than silently resumed into other events. */
static void test_resume_new_store(void **state)
{
    (void)state;
    start();
    it_create_topic("release");
    uint64_t o[8];
    it_conn_t *a = on_global("alice");
    produce_n(o, 0, 1);
    uint64_t epoch = event_epoch(a, o[0]), old = o[0];
    assert_true(epoch > 1700000000000ull); /* a time in ms */
    cq_testsrv_kill(it_srv(), SIGKILL);
    it_close(a);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", it_srv()->store_path);
    assert_int_equal(system(cmd), 0);
    g_db_seq++; /* the MariaDB variant: another database */
    cq_test_sleep_ms(5);
    start();
    it_create_topic("release");
    it_conn_t *b = on_global("alice");
    produce_n(o, 0, 3); /* offsets from 1 again: the old position's offset exists here too */
    assert_true(o[2] > old);
    uint64_t epoch2 = event_epoch(b, o[0]);
    assert_true(epoch2 > epoch);
    expect_n(b, o + 1, 1, 2, o[0]);
    send_resume(b, epoch, old);
    char why[256];
    snprintf(why, sizeof(why),
             "topic release: epoch %llu is not the shard's (%llu): its history may have been "
             "rewritten",
             (unsigned long long)epoch, (unsigned long long)epoch2);
    expect_result(b, false, epoch2, o[2], why);
}

/* The switch under load: events keep being published while the player resumes. Whatever came
 * before the result is the old stream; after it, every event after the position arrives once,
 * in order, across the end of the catch-up and into the live ones. */
static void test_resume_while_publishing(void **state)
{
    (void)state;
    start_resume("64", "2"); /* many chunks: live events come while the catch-up runs */
    it_create_topic("release");
    enum { N = 400, FIRST = 100 };
    static uint64_t o[N + 1];
    it_conn_t *a = on_global("alice");
    uint64_t epoch = live_n(a, o, FIRST);
    /* alice keeps her connection but asks for everything after event 9: the catch-up overlaps
     * the live events she already got, and more are published meanwhile */
    send_resume(a, epoch, o[9]);
    produce_n(o + FIRST, FIRST, N - FIRST);
    chanq_owned_msg_t m;
    for (;;) { /* the old stream, then the result */
        it_recv(a, &m);
        if (m.msg_type == 91)
            break;
        assert_int_equal(m.msg_type, MT_RELEASE);
        chanq_owned_msg_done(&m);
    }
    Chanqpb__TopicResumeResultMessage *r =
        chanqpb__topic_resume_result_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(r);
    assert_true(r->recovered);
    assert_int_equal(r->positions[0]->offset, o[9]);
    chanqpb__topic_resume_result_message__free_unpacked(r, NULL);
    chanq_owned_msg_done(&m);
    expect_n(a, o + 10, 10, N - 10, o[9]);
    produce_n(o + N, N, 1); /* nothing left over: the next message is this live one */
    expect_n(a, o + N, N, 1, o[N - 1]);
}

/* A position under another epoch, one past the live offset, and one that does not decode:
 * recovered false with the reason, delivery from the live offset on, never a silent gap. */
static void test_resume_not_recovered(void **state)
{
    (void)state;
    start();
    it_create_topic("release");
    uint64_t o[3];
    it_conn_t *a = on_global("alice");
    produce_n(o, 0, 2);
    uint64_t epoch = event_epoch(a, o[0]);
    expect_n(a, o + 1, 1, 1, o[0]);
    char why[256];
    send_resume(a, epoch + 1, o[0]);
    snprintf(why, sizeof(why),
             "topic release: epoch %llu is not the shard's (%llu): its history may have been "
             "rewritten",
             (unsigned long long)(epoch + 1), (unsigned long long)epoch);
    expect_result(a, false, epoch, o[1], why);
    send_resume(a, epoch, o[1] + 5);
    snprintf(why, sizeof(why),
             "topic release: offset %llu is beyond the last delivered offset %llu",
             (unsigned long long)(o[1] + 5), (unsigned long long)o[1]);
    expect_result(a, false, epoch, o[1], why);
    produce_n(o + 2, 2, 1);
    expect_n(a, o + 2, 2, 1, o[1]);
    assert_int_equal(
        cq_testsrv_metric(it_srv(), "chanq_bridge_resumes_total{outcome=\"not_recovered\"}"), 2);
}

/* A broadcast binding with 1000 players subscribed to GLOBAL: each receives every event once,
 * in order (the encode-once fan-out, one record for all). */
static void test_broadcast_1000(void **state)
{
    (void)state;
    enum { P = 1000, N = 20 };
    struct rlimit rl; /* 1000 sockets here: a fresh machine's soft limit is often 1024 */
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < P + 100 && rl.rlim_max >= P + 100) {
        rl.rlim_cur = rl.rlim_max;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    if (rl.rlim_cur < P + 100) {
        print_message("SKIP: RLIMIT_NOFILE %llu < %d: not enough descriptors for %d players\n",
                      (unsigned long long)rl.rlim_cur, P + 100, P);
        skip();
    }
    start();
    it_create_topic("release");
    static it_conn_t *p[P];
    for (int i = 0; i < P; i++) {
        char pit[16];
        snprintf(pit, sizeof(pit), "p%d", i);
        p[i] = on_global(pit);
    }
    uint64_t o[N];
    char content[N][16];
    for (int k = 0; k < N; k++) {
        snprintf(content[k], sizeof(content[k]), "\"v%d\"", k);
        o[k] = it_produce("release", content[k]);
    }
    for (int i = 0; i < P; i++)
        for (int k = 0; k < N; k++) {
            char want[16];
            snprintf(want, sizeof(want), "v%d", k);
            expect_event(p[i], MT_RELEASE, "release", o[k], k ? o[k - 1] : 0, want);
        }
    uint64_t last = it_produce("release", "\"end\""); /* nothing else came before it */
    for (int i = 0; i < P; i += 97)
        expect_event(p[i], MT_RELEASE, "release", last, o[N - 1], "end");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), N + 1);
}

/* A route binding: each player gets only the events whose user_id is its PIT, on every one of
 * its connections; content that names no player is counted, not delivered. */
static void test_route_by_pit(void **state)
{
    (void)state;
    start();
    it_create_topic("vip");
    it_conn_t *a1 = player("alice"), *a2 = player("alice"), *b = player("bob");
    uint64_t o1 = it_produce("vip", "{\"user_id\":\"alice\",\"level\":3}");
    uint64_t o2 = it_produce("vip", "{\"user_id\":\"carol\"}"); /* offline: nobody */
    uint64_t o3 = it_produce("vip", "\"no player here\"");
    uint64_t o4 = it_produce("vip", "{\"user_id\":\"bob\",\"level\":1}");
    assert_true(o1 < o2 && o2 < o3 && o3 < o4);
    expect_event(a1, MT_VIP, "vip", o1, 0, "{\"user_id\":\"alice\",\"level\":3}");
    expect_event(a2, MT_VIP, "vip", o1, 0, "{\"user_id\":\"alice\",\"level\":3}");
    expect_event(b, MT_VIP, "vip", o4, o3, "{\"user_id\":\"bob\",\"level\":1}");
    /* alice's next message is the next one for her, nothing of carol's or bob's */
    uint64_t o5 = it_produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a1, MT_VIP, "vip", o5, o4, "{\"user_id\":\"alice\"}");
    expect_event(a2, MT_VIP, "vip", o5, o4, "{\"user_id\":\"alice\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 5);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_unroutable_total"), 1);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_outputs_total"), 4);
}

/* Sends a TopicAckMessage (type 92) on GLOBAL: the player handled "vip" up to offset. */
/* Waits until /metrics shows at least n of the route's offset writes. */
static void wait_offset_writes(int64_t n)
{
    for (int i = 0; i < IT_TIMEOUT_MS / 10; i++) {
        if (cq_testsrv_metric(it_srv(), "chanq_bridge_route_offset_ops_total{op=\"write\"}") >= n)
            return;
        cq_test_sleep_ms(10);
    }
    fail_msg("the acknowledged offset was not written");
}

/* VIP events published while the player is offline reach it at login, once, in order, then
 * the live ones: no subscription and no client change (the events it never acknowledged are
 * pending; channeld clients work unchanged). A player that acknowledged them gets none again,
 * on any connection; one that did not, gets them again. */
static void test_route_offline_login(void **state)
{
    (void)state;
    start();
    it_create_topic("vip");
    uint64_t o1 = it_produce("vip", "{\"user_id\":\"xena\",\"vip\":1}");
    uint64_t o2 = it_produce("vip", "{\"user_id\":\"yuri\",\"vip\":1}");
    uint64_t o3 = it_produce("vip", "{\"user_id\":\"xena\",\"vip\":2}");
    it_conn_t *x = player("xena");
    uint64_t epoch = expect_event(x, MT_VIP, "vip", o1, 0, "{\"user_id\":\"xena\",\"vip\":1}");
    expect_event(x, MT_VIP, "vip", o3, o2, "{\"user_id\":\"xena\",\"vip\":2}");
    uint64_t o4 = it_produce("vip", "{\"user_id\":\"xena\",\"vip\":3}");
    expect_event(x, MT_VIP, "vip", o4, o3, "{\"user_id\":\"xena\",\"vip\":3}");
    /* another connection of xena's, without an ack: everything again */
    it_conn_t *x2 = player("xena");
    expect_event(x2, MT_VIP, "vip", o1, 0, "{\"user_id\":\"xena\",\"vip\":1}");
    expect_event(x2, MT_VIP, "vip", o3, o2, "{\"user_id\":\"xena\",\"vip\":2}");
    expect_event(x2, MT_VIP, "vip", o4, o3, "{\"user_id\":\"xena\",\"vip\":3}");
    it_close(x2);
    /* an ack of o3: the next login gets o4 only, then the live ones */
    it_topic_ack(x, "vip", 0, epoch + 1, o3); /* another epoch: ignored */
    it_topic_ack(x, "vip", 0, epoch, o3);
    it_close(x);
    uint64_t o5 = it_produce("vip", "{\"user_id\":\"xena\",\"vip\":4}");
    it_conn_t *x3 = player("xena");
    expect_event(x3, MT_VIP, "vip", o4, o3, "{\"user_id\":\"xena\",\"vip\":3}");
    expect_event(x3, MT_VIP, "vip", o5, o4, "{\"user_id\":\"xena\",\"vip\":4}");
    uint64_t o6 = it_produce("vip", "{\"user_id\":\"xena\",\"vip\":5}");
    expect_event(x3, MT_VIP, "vip", o6, o5, "{\"user_id\":\"xena\",\"vip\":5}");
    /* yuri, never connected, still has his */
    it_conn_t *y = player("yuri");
    expect_event(y, MT_VIP, "vip", o2, o1, "{\"user_id\":\"yuri\",\"vip\":1}");
    uint64_t o7 = it_produce("vip", "{\"user_id\":\"yuri\",\"vip\":2}");
    expect_event(y, MT_VIP, "vip", o7, o6, "{\"user_id\":\"yuri\",\"vip\":2}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_route_acks_total"), 2);
    assert_int_equal(
        cq_testsrv_metric(it_srv(), "chanq_bridge_route_logins_total{outcome=\"started\"}"), 4);
    assert_int_equal(
        cq_testsrv_metric(it_srv(), "chanq_bridge_route_logins_total{outcome=\"caught_up\"}"), 4);
}

/* The acknowledged offset is the store's: after it was written, a SIGKILL and a restart on the
 * same store, the player gets only what followed it (published before and after the restart),
 * read from the store. Many events of others in between are filtered out by key. */
static void test_route_ack_after_sigkill(void **state)
{
    (void)state;
    start_ring("16"); /* the catch-up after the restart crosses more than the ring */
    it_create_topic("vip");
    uint64_t a = it_produce("vip", "{\"user_id\":\"xena\",\"n\":1}");
    it_conn_t *x = player("xena");
    uint64_t epoch = expect_event(x, MT_VIP, "vip", a, 0, "{\"user_id\":\"xena\",\"n\":1}");
    it_topic_ack(x, "vip", 0, epoch, a);
    wait_offset_writes(1);
    uint64_t b = it_produce("vip", "{\"user_id\":\"xena\",\"n\":2}");
    expect_event(x, MT_VIP, "vip", b, a, "{\"user_id\":\"xena\",\"n\":2}");
    cq_testsrv_kill(it_srv(), SIGKILL);
    it_close(x);
    start_ring("16");
    uint64_t last = b;
    for (int i = 0; i < 40; i++) /* others' events: the ring holds the last 16 of them */
        last = it_produce("vip", "{\"user_id\":\"other\"}");
    uint64_t c = it_produce("vip", "{\"user_id\":\"xena\",\"n\":3}");
    it_conn_t *x2 = player("xena");
    expect_event(x2, MT_VIP, "vip", b, a, "{\"user_id\":\"xena\",\"n\":2}");
    expect_event(x2, MT_VIP, "vip", c, last, "{\"user_id\":\"xena\",\"n\":3}");
    uint64_t d = it_produce("vip", "{\"user_id\":\"xena\",\"n\":4}");
    expect_event(x2, MT_VIP, "vip", d, c, "{\"user_id\":\"xena\",\"n\":4}");
    assert_true(cq_testsrv_metric(it_srv(), "chanq_bridge_route_reads_total{kind=\"issued\"}") >=
                1);
}

/* The switch at login: events keep being published for the player while its catch-up runs in
 * 2-event chunks; it gets every one once, in order, across the end of the catch-up and into the
 * live ones (the routed live events are held until the FINAL chunk). */
static void test_route_login_while_publishing(void **state)
{
    (void)state;
    start_resume("16", "2");
    it_create_topic("vip");
    enum { N = 300, BEFORE = 100 };
    static uint64_t o[N];
    char content[N][64];
    for (int i = 0; i < N; i++)
        snprintf(content[i], sizeof(content[i]), "{\"user_id\":\"xena\",\"i\":%d}", i);
    for (int i = 0; i < BEFORE; i++)
        o[i] = it_produce("vip", content[i]);
    it_conn_t *x = player("xena");
    for (int i = BEFORE; i < N; i++)
        o[i] = it_produce("vip", content[i]);
    for (int i = 0; i < N; i++)
        expect_event(x, MT_VIP, "vip", o[i], i ? o[i - 1] : 0, content[i]);
    uint64_t last = it_produce("vip", "{\"user_id\":\"xena\"}");
    expect_event(x, MT_VIP, "vip", last, o[N - 1], "{\"user_id\":\"xena\"}");
}

/* A "topic" binding: chanq makes the SUBWORLD channel "topic:news" (LIST finds it), a plain SUB
 * receives the events on it, and a resume on that channel catches up on that channel; the
 * hold is that channel's: GLOBAL's events published during the catch-up still arrive. A resume
 * on a channel with no topic bound is refused. */
static void test_topic_channel(void **state)
{
    (void)state;
    g_bindings = "{\"bindings\": ["
                 "{\"topic\": \"release\", \"broadcast\": \"global\", \"msg_type\": 200},"
                 "{\"topic\": \"news\", \"broadcast\": \"topic\", \"msg_type\": 203}]}";
    start_resume("8192", "2");
    it_create_topic("news");
    it_create_topic("release");
    it_conn_t *a = on_global("alice");
    uint32_t ch = it_topic_channel(a, "news");
    assert_int_not_equal(ch, 0);
    it_sub(a, 1, ch, a->id, -1);
    it_expect_sub(a, ch, 1, a->id, 2, 3, 1);
    enum { NN = 300 }; /* a catch-up long enough for r1 to commit during it */
    static uint64_t n[NN + 2];
    n[0] = it_produce("news", "\"n0\"");
    uint64_t epoch = expect_event_on(a, ch, 203, "news", n[0], 0, "n0");
    uint64_t r0 = it_produce("release", "\"r0\"");
    expect_event(a, MT_RELEASE, "release", r0, 0, "r0");
    it_close(a);
    for (int i = 1; i <= NN; i++) {
        char c[16];
        snprintf(c, sizeof(c), "\"n%d\"", i);
        n[i] = it_produce("news", c);
    }
    it_conn_t *b = on_global("alice");
    it_sub(b, 1, ch, b->id, -1);
    it_expect_sub(b, ch, 1, b->id, 2, 3, 1);
    send_resume_on(b, 77, "news", 0, n[0]); /* no topic there */
    chanq_owned_msg_t env;
    Chanqpb__TopicResumeResultMessage *rr =
        it_expect(b, 91, 0, &chanqpb__topic_resume_result_message__descriptor, &env);
    assert_non_null(rr);
    assert_int_equal(env.channel_id, 77);
    assert_false(rr->recovered);
    assert_int_equal(rr->n_positions, 0);
    assert_string_equal(rr->error, "no durable topic is bound to channel 77");
    chanq_unpack_free(rr);
    chanq_owned_msg_done(&env);
    send_resume_on(b, ch, "news", epoch, n[0]);
    uint64_t r1 = it_produce("release", "\"r1\""); /* during the catch-up (2-event chunks) */
    /* the two channels' streams interleave as they will; each is checked in its order */
    int news = 0, rel = 0, results = 0;
    while (news < NN || !rel || !results) {
        chanq_owned_msg_t m;
        it_recv(b, &m);
        Channeldpb__ServerForwardMessage *f = NULL;
        Chanqpb__TopicEvent *ev = NULL;
        if (m.msg_type == 91) {
            assert_int_equal(m.channel_id, ch);
            assert_int_equal(news, 0);
            Chanqpb__TopicResumeResultMessage *res =
                chanqpb__topic_resume_result_message__unpack(NULL, m.body_len, m.body);
            assert_non_null(res);
            assert_true(res->recovered);
            assert_int_equal(res->n_positions, 1);
            assert_int_equal(res->positions[0]->offset, n[0]);
            chanqpb__topic_resume_result_message__free_unpacked(res, NULL);
            results++;
        } else {
            f = channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
            assert_non_null(f);
            ev = chanqpb__topic_event__unpack(NULL, f->payload.len, f->payload.data);
            assert_non_null(ev);
            if (m.msg_type == 203) {
                assert_int_equal(m.channel_id, ch);
                assert_int_equal(results, 1);
                assert_int_equal(ev->offset, n[news + 1]);
                assert_int_equal(ev->prev_offset, n[news]);
                news++;
            } else {
                assert_int_equal(m.msg_type, MT_RELEASE);
                assert_int_equal(m.channel_id, 0);
                assert_int_equal(ev->offset, r1);
                assert_int_equal(rel, 0);
                rel++;
            }
            chanqpb__topic_event__free_unpacked(ev, NULL);
            channeldpb__server_forward_message__free_unpacked(f, NULL);
        }
        chanq_owned_msg_done(&m);
    }
    n[NN + 1] = it_produce("news", "\"last\"");
    expect_event_on(b, ch, 203, "news", n[NN + 1], n[NN], "last");
}

/* SIGHUP reads the bindings file again: a topic no longer bound is no longer delivered (nor
 * counted), a new msg_type applies from the next event; a file that does not load keeps the
 * bindings in force. */
static void test_reload(void **state)
{
    (void)state;
    start();
    it_create_topic("release");
    it_create_topic("vip");
    it_create_topic("news"); /* not bound yet */
    it_conn_t *a = on_global("alice");
    uint64_t n1 = it_produce("news", "\"unbound\"");
    uint64_t o1 = it_produce("release", "\"1.0\"");
    expect_event(a, MT_RELEASE, "release", o1, 0, "1.0");
    it_file("bindings.json",
            "{\"bindings\": [{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 202},"
            "{\"topic\": \"news\", \"broadcast\": \"global\", \"msg_type\": 203}]}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("SIGHUP: 2 bindings reloaded from");
    it_produce("release", "\"2.0\"");
    uint64_t v1 = it_produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a, 202, "vip", v1, 0, "{\"user_id\":\"alice\"}");
    uint64_t n2 = it_produce("news", "\"bound\"");
    expect_event(a, 203, "news", n2, n1, "bound");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 3);
    it_file("bindings.json", "{\"bindings\": [{\"topic\": \"vip\"}]}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("SIGHUP: keeping the current bindings: --bridge-file ");
    uint64_t v2 = it_produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a, 202, "vip", v2, v1, "{\"user_id\":\"alice\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 4);
}

/* A bindings file that does not load stops chanqd at start, saying which binding and why. */
static void test_bad_file(void **state)
{
    (void)state;
    cq_testsrv_t s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(cq_testsrv_init(&s), 0);
    char path[512];
    assert_int_equal(cq_testsrv_file(&s, "b.json",
                                     "{\"bindings\": [{\"topic\": \"vip\", \"route\": "
                                     "\"user_id\", \"msg_type\": 42}]}",
                                     path, sizeof(path)),
                     0);
    const char *args[] = {"--dev", "--bridge-file", path, NULL};
    assert_int_equal(cq_testsrv_start(&s, args), -ECHILD);
    char *log = cq_testsrv_log(&s);
    assert_non_null(log);
    assert_non_null(strstr(log, "binding 0: \"msg_type\" must be an integer from 100 to 65535"));
    free(log);
    cq_testsrv_stop(&s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broadcast_global, teardown),
        cmocka_unit_test_teardown(test_broadcast_1000, teardown),
        cmocka_unit_test_teardown(test_route_by_pit, teardown),
        cmocka_unit_test_teardown(test_route_offline_login, teardown),
        cmocka_unit_test_teardown(test_route_ack_after_sigkill, teardown),
        cmocka_unit_test_teardown(test_route_login_while_publishing, teardown),
        cmocka_unit_test_teardown(test_topic_channel, teardown),
        cmocka_unit_test_teardown(test_reload, teardown),
        cmocka_unit_test_teardown(test_resume_from_baseline, teardown),
        cmocka_unit_test_teardown(test_resume_from_ring, teardown),
        cmocka_unit_test_teardown(test_resume_from_store, teardown),
        cmocka_unit_test_teardown(test_resume_not_recovered, teardown),
        cmocka_unit_test_teardown(test_resume_after_sigkill, teardown),
        cmocka_unit_test_teardown(test_resume_new_store, teardown),
        cmocka_unit_test_teardown(test_resume_while_publishing, teardown),
        cmocka_unit_test(test_bad_file),
    };
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--backend=mysql") == 0) {
            g_mysql_port = getenv("CQ_MARIADB_PORT");
            if (!g_mysql_port || !*g_mysql_port) {
                printf("1..0 # SKIP no MariaDB server (CQ_MARIADB_PORT unset)\n");
                return 0;
            }
        }
    return it_run("bridge", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
