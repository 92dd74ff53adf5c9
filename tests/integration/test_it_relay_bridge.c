/* test_it_relay_bridge.c - durable topics delivered into channels on relay nodes (issue 24 item
 * 6, doc/bridge.md "Relay nodes"). Three chanqd nodes over real nats-server and ZooKeeper
 * (run_zk.sh and run_nats.sh: CQ_ZK_HOSTS, CQ_NATS_URLS), each with the same bindings and
 * --bridge-follow naming a durable server of its own (shard 1, a standalone chanqd with its HTTP
 * API): every node follows the shard and delivers to its own connections.
 *  - broadcast: a client on each node subscribed to GLOBAL gets each of 10 events exactly once,
 *    in order, each naming the one before; each node took each event once from the shard
 *    (chanq_bridge_follow_events_total rose by exactly 10 on every node);
 *  - resume on node 3: a client that dropped gets, after its resume, exactly the 5 events
 *    published meanwhile, recovered, then a live one;
 *  - route: a player on node 2 gets its routed event once; a player of another name on node 3
 *    gets nothing;
 *  - route catch-up at login, its position on the shard: VIP events published while carol is
 *    offline reach her at login on node 2, once, in order, then a live one; she acknowledges the
 *    second; node 2 writes her position to the shard (an instance of the follower's module);
 *    at her next login, on node 3, she gets only what followed it;
 *  - a "topic" channel: the nodes' bridges ask GLOBAL's home for "topic:news", which makes one
 *    channel; a client on each node finds it with LIST (the same id on every node), SUBs, and
 *    gets each event once, in order, from its own node's bridge; node 1, GLOBAL's home, is
 *    SIGKILLed: the new home makes the channel anew for the bridges that ask again, and clients
 *    of nodes 2 and 3 that LIST and SUB again get the next events;
 *  - a relay node refuses bindings without --bridge-follow.
 * Skips without nats-server or ZooKeeper. */
#include "it_common.h"

#include "bridge.pb-c.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES IT_RELAY_NODES

static const char g_bindings[] =
    "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200},"
    "{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
    "{\"topic\":\"news\",\"broadcast\":\"topic\",\"msg_type\":202}]}";

static cq_testsrv_t g_src; /* the durable server: shard 1 */
static bool g_src_up;

static int src_teardown(void **state)
{
    int r = it_teardown(state);
    if (g_src_up)
        cq_testsrv_stop(&g_src);
    g_src_up = false;
    return r;
}

static int64_t metric(int n, const char *name)
{
    return cq_testsrv_metric(it_node(n), name);
}

/* The source, its topics, and the three nodes following it. */
static void start_all(void)
{
    const char *src_args[] = {"--dev", "--shard", "1", NULL};
    assert_int_equal(cq_testsrv_init(&g_src), 0);
    assert_int_equal(cq_testsrv_start(&g_src, src_args), 0);
    g_src_up = true;
    it_create_topic_on(&g_src, "release");
    it_create_topic_on(&g_src, "vip");
    it_create_topic_on(&g_src, "news");
    char follow[64];
    snprintf(follow, sizeof(follow), "1/127.0.0.1:%u", g_src.mq_port);
    const char *args[] = {"--dev",
                          "--client-fsm",
                          it_client_auth_fsm(),
                          "--mq-addr",
                          "127.0.0.1:0",
                          "--bridge-file",
                          it_file("bindings.json", g_bindings),
                          "--bridge-follow",
                          follow,
                          NULL};
    it_relay_startv(args);
    /* Each node's follow of each topic starts at the live stream once its watch and position
     * are in: warm-up events until every node handed on one of each topic. */
    const char *topics[] = {"release", "vip", "news"};
    for (int topic = 0; topic < 3; topic++) {
        const char *name = topics[topic];
        int64_t end = cq_test_mono_ms() + 10 * IT_TIMEOUT_MS;
        for (;;) {
            int64_t before[NODES + 1];
            for (int n = 1; n <= NODES; n++)
                before[n] = metric(n, "chanq_bridge_follow_events_total");
            it_produce_on(&g_src, name, "{\"user_id\":\"warmup\"}");
            cq_test_sleep_ms(300);
            int live = 0;
            for (int n = 1; n <= NODES; n++)
                live += metric(n, "chanq_bridge_follow_events_total") > before[n];
            if (live == NODES)
                break;
            assert_true(cq_test_mono_ms() < end);
        }
    }
}

static it_conn_t *player_on(int n, const char *pit)
{
    it_conn_t *c = it_connect_to(it_node(n), false, NULL);
    it_auth(c, pit, "lt");
    return c;
}

static void sub_global(it_conn_t *c)
{
    it_sub(c, 1, 0, c->id, -1);
    it_expect_sub(c, 0, 1, c->id, 2 /* CLIENT */, 1 /* GLOBAL */, 1);
}

/* c's next message of msg_type: a TopicEvent of topic at offset, following prev (NO_PREV: not
 * checked; returns its epoch). */
#define NO_PREV UINT64_MAX
static uint64_t expect_event(it_conn_t *c, uint32_t msg_type, const char *topic, uint64_t offset,
                             uint64_t prev)
{
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv_type(c->s, msg_type, &m, IT_TIMEOUT_MS), 0);
    Chanqpb__TopicEvent *ev = chanq_topic_event_decode(m.body, m.body_len);
    assert_non_null(ev);
    assert_string_equal(ev->topic, topic);
    assert_int_equal(ev->shard, 1);
    assert_int_equal(ev->offset, offset);
    if (prev != NO_PREV)
        assert_int_equal(ev->prev_offset, prev);
    uint64_t epoch = ev->epoch;
    chanq_unpack_free(&ev->base);
    chanq_owned_msg_done(&m);
    return epoch;
}

static void expect_nothing(it_conn_t *c, uint32_t msg_type)
{
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv_type(c->s, msg_type, &m, 300), CQ_ETIMEOUT);
}

static void test_broadcast_resume_route(void **state)
{
    (void)state;
    start_all();
    it_conn_t *p[NODES + 1];
    for (int n = 1; n <= NODES; n++) {
        char pit[16];
        snprintf(pit, sizeof(pit), "p%d", n);
        p[n] = player_on(n, pit);
        sub_global(p[n]);
    }
    int64_t before[NODES + 1];
    for (int n = 1; n <= NODES; n++)
        before[n] = metric(n, "chanq_bridge_follow_events_total");
    uint64_t off[10], prev = 0;
    for (int i = 0; i < 10; i++)
        off[i] = it_produce_on(&g_src, "release", "{\"v\":1}");
    uint64_t epoch = 0;
    for (int n = 1; n <= NODES; n++) {
        prev = off[0] - 1; /* the warm-up event before it: dense offsets on one topic */
        for (int i = 0; i < 10; i++) {
            epoch = expect_event(p[n], 200, "release", off[i], prev);
            prev = off[i];
        }
        expect_nothing(p[n], 200);
        /* the shard's events reached the node once each, whatever its subscribers */
        assert_int_equal(metric(n, "chanq_bridge_follow_events_total") - before[n], 10);
    }
    /* resume on node 3: the client drops, 5 events are published, it comes back */
    it_close(p[3]);
    uint64_t missed[5];
    for (int i = 0; i < 5; i++)
        missed[i] = it_produce_on(&g_src, "release", "{\"v\":2}");
    it_conn_t *back = player_on(3, "p3");
    sub_global(back);
    Chanqpb__TopicPosition pos = CHANQPB__TOPIC_POSITION__INIT, *pp = &pos;
    pos.topic = (char *)"release";
    pos.shard = 1;
    pos.epoch = epoch;
    pos.offset = off[9];
    Chanqpb__TopicResumeMessage rm = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    rm.n_positions = 1;
    rm.positions = &pp;
    assert_int_equal(chanq_sync_send(back->s, 0, 0, 0, 90, &rm.base), 0);
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv_type(back->s, 91, &m, IT_TIMEOUT_MS), 0);
    Chanqpb__TopicResumeResultMessage *res =
        chanqpb__topic_resume_result_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(res);
    assert_true(res->recovered);
    assert_string_equal(res->error, "");
    chanqpb__topic_resume_result_message__free_unpacked(res, NULL);
    chanq_owned_msg_done(&m);
    prev = off[9];
    for (int i = 0; i < 5; i++) {
        expect_event(back, 200, "release", missed[i], prev);
        prev = missed[i];
    }
    uint64_t live = it_produce_on(&g_src, "release", "{\"v\":3}");
    expect_event(back, 200, "release", live, prev);
    expect_nothing(back, 200);
    /* route: alice on node 2, bob on node 3 */
    it_conn_t *alice = player_on(2, "alice"), *bob = player_on(3, "bob");
    uint64_t o = it_produce_on(&g_src, "vip", "{\"user_id\":\"alice\",\"gems\":5}");
    chanq_owned_msg_t r;
    assert_int_equal(chanq_sync_recv_type(alice->s, 201, &r, IT_TIMEOUT_MS), 0);
    Chanqpb__TopicEvent *ev = chanq_topic_event_decode(r.body, r.body_len);
    assert_non_null(ev);
    assert_string_equal(ev->topic, "vip");
    assert_int_equal(ev->offset, o);
    chanq_unpack_free(&ev->base);
    chanq_owned_msg_done(&r);
    expect_nothing(alice, 201);
    expect_nothing(bob, 201);
}

/* The route catch-up on relay nodes: the player's position lives on the shard, so a login on
 * any node resumes from the last acknowledgement made on any other. */
static void test_route_catch_up(void **state)
{
    (void)state;
    start_all();
    uint64_t o[4];
    char content[64];
    for (int i = 0; i < 3; i++) {
        snprintf(content, sizeof(content), "{\"user_id\":\"carol\",\"n\":%d}", i);
        o[i] = it_produce_on(&g_src, "vip", content);
    }
    uint64_t dave = it_produce_on(&g_src, "vip", "{\"user_id\":\"dave\",\"n\":9}");
    it_conn_t *c = player_on(2, "carol");
    /* a routed event names the topic's row before it, whoever it was for (the warm-up's) */
    uint64_t epoch = expect_event(c, 201, "vip", o[0], NO_PREV);
    expect_event(c, 201, "vip", o[1], o[0]);
    expect_event(c, 201, "vip", o[2], o[1]);
    snprintf(content, sizeof(content), "{\"user_id\":\"carol\",\"n\":%d}", 3);
    o[3] = it_produce_on(&g_src, "vip", content); /* live, after the FINAL */
    expect_event(c, 201, "vip", o[3], dave);
    expect_nothing(c, 201);
    it_topic_ack(c, "vip", 1, epoch, o[1]);
    for (int i = 0; metric(2, "chanq_bridge_route_offset_ops_total{op=\"write\"}") < 1; i++) {
        assert_true(i < IT_TIMEOUT_MS / 10);
        cq_test_sleep_ms(10);
    }
    it_close(c);
    c = player_on(3, "carol");
    expect_event(c, 201, "vip", o[2], o[1]);
    expect_event(c, 201, "vip", o[3], dave);
    expect_nothing(c, 201);
    assert_int_equal(metric(3, "chanq_bridge_route_logins_total{outcome=\"caught_up\"}"), 1);
    assert_true(metric(3, "chanq_bridge_route_events_total{source=\"store\"}") +
                    metric(3, "chanq_bridge_route_events_total{source=\"ring\"}") >=
                2);
}

/* The "topic" channel of a relay: one channel for the relay, on GLOBAL's home, delivered on
 * every node by that node's bridge to its own subscribers. */
static void test_topic_channel(void **state)
{
    (void)state;
    start_all();
    it_conn_t *c[NODES + 1];
    uint32_t id = 0;
    for (int n = 1; n <= NODES; n++) {
        char pit[16];
        snprintf(pit, sizeof(pit), "reader%d", n);
        c[n] = player_on(n, pit);
        uint32_t got = it_topic_channel(c[n], "news");
        if (n == 1)
            id = got;
        assert_int_equal(got, id);
        it_sub(c[n], 1, id, c[n]->id, -1);
        it_expect_sub(c[n], id, 1, c[n]->id, 2 /* CLIENT */, 3 /* SUBWORLD */, 1);
    }
    /* every node's bridge learns the id from the home's answer: warm-up events until each
     * client got one (then each has drained up to the last warm-up event) */
    uint64_t last = 0;
    for (int ready = 0; ready < NODES;) {
        last = it_produce_on(&g_src, "news", "{\"warm\":1}");
        ready = 0;
        for (int n = 1; n <= NODES; n++) {
            chanq_owned_msg_t m;
            while (chanq_sync_recv_type(c[n]->s, 202, &m, 300) == 0) {
                Chanqpb__TopicEvent *ev = chanq_topic_event_decode(m.body, m.body_len);
                assert_non_null(ev);
                ready += ev->offset == last;
                chanq_unpack_free(&ev->base);
                chanq_owned_msg_done(&m);
            }
        }
    }
    int64_t refused[NODES + 1];
    for (int n = 1; n <= NODES; n++)
        refused[n] = metric(n, "chanq_bridge_refused_total");
    uint64_t o[5], prev = last;
    for (int i = 0; i < 5; i++)
        o[i] = it_produce_on(&g_src, "news", "{\"headline\":\"x\"}");
    for (int n = 1; n <= NODES; n++) {
        prev = last;
        for (int i = 0; i < 5; i++) {
            expect_event(c[n], 202, "news", o[i], prev);
            prev = o[i];
        }
        expect_nothing(c[n], 202);
        assert_int_equal(metric(n, "chanq_bridge_refused_total"), refused[n]);
    }
    /* the home dies with its channels; the bridges of nodes 2 and 3 ask the new home */
    assert_int_equal(metric(2, "chanq_relay_global_home"), 1);
    assert_int_equal(cq_testsrv_kill(it_srv(), SIGKILL), 128 + SIGKILL);
    int64_t h2 = 0, h3 = 0;
    for (int i = 0; i < IT_TIMEOUT_MS && !(h2 == h3 && (h2 == 2 || h2 == 3)); i += 10) {
        h2 = metric(2, "chanq_relay_global_home");
        h3 = metric(3, "chanq_relay_global_home");
        cq_test_sleep_ms(10);
    }
    assert_int_equal(h2, h3);
    assert_true(h2 == 2 || h2 == 3);
    printf("# GLOBAL's home moved to node %lld\n", (long long)h2);
    it_conn_t *d[NODES + 1];
    uint32_t id2 = 0;
    for (int n = 2; n <= NODES; n++) {
        char pit[16];
        snprintf(pit, sizeof(pit), "again%d", n);
        d[n] = player_on(n, pit);
        uint32_t got = it_topic_channel(d[n], "news");
        if (n == 2)
            id2 = got;
        assert_int_equal(got, id2);
        it_sub(d[n], 1, id2, d[n]->id, -1);
        it_expect_sub(d[n], id2, 1, d[n]->id, 2, 3, 1);
    }
    assert_int_not_equal(id2, id);
    /* both bridges deliver on the new channel: warm-up until each client got one */
    for (int ready = 0; ready < NODES - 1;) {
        last = it_produce_on(&g_src, "news", "{\"warm\":2}");
        ready = 0;
        for (int n = 2; n <= NODES; n++) {
            chanq_owned_msg_t m;
            while (chanq_sync_recv_type(d[n]->s, 202, &m, 300) == 0) {
                Chanqpb__TopicEvent *ev = chanq_topic_event_decode(m.body, m.body_len);
                assert_non_null(ev);
                ready += ev->offset == last;
                chanq_unpack_free(&ev->base);
                chanq_owned_msg_done(&m);
            }
        }
    }
    uint64_t z = it_produce_on(&g_src, "news", "{\"headline\":\"after\"}");
    for (int n = 2; n <= NODES; n++) {
        expect_event(d[n], 202, "news", z, last);
        expect_nothing(d[n], 202);
    }
}

/* A relay node refuses what it cannot serve, at start, and says why. */
static void test_relay_refusals(void **state)
{
    (void)state;
    const char *bad[][16] = {
        {"--relay-nats", getenv("CQ_NATS_URLS"), "--relay-zk-hosts", getenv("CQ_ZK_HOSTS"),
         "--relay-cluster", "refuse2", "--relay-node-id", "1", "--bridge-file",
         it_file("b.json", g_bindings), NULL},
    };
    const char *why[] = {
        "--bridge-file on a relay node needs --bridge-follow: its events come from the durable "
        "cluster's shards"};
    for (int i = 0; i < 1; i++) {
        cq_testsrv_t s;
        assert_int_equal(cq_testsrv_init(&s), 0);
        assert_true(cq_testsrv_start(&s, bad[i]) < 0);
        char *log = cq_testsrv_log(&s);
        assert_non_null(log);
        if (!strstr(log, why[i]))
            fail_msg("the log does not say \"%s\":\n%s", why[i], log);
        free(log);
        cq_testsrv_stop(&s);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broadcast_resume_route, src_teardown),
        cmocka_unit_test_teardown(test_route_catch_up, src_teardown),
        cmocka_unit_test_teardown(test_topic_channel, src_teardown),
        cmocka_unit_test_teardown(test_relay_refusals, it_teardown),
    };
    return it_relay_run("relay-bridge", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
