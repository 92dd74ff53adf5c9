/* test_it_relay_move.c - a client of a relay node that dies moves to another node (issue 23
 * point 7, doc/relay-cluster.md "Clients that move"). Three chanqd nodes over real nats-server
 * and ZooKeeper (run_zk.sh and run_nats.sh start them: CQ_ZK_HOSTS, CQ_NATS_URLS), a game
 * server on node 1 that owns a channel, and a libchanq client given the addresses [node 3,
 * node 2] (chanq_sync_connect_list) that subscribed itself. Node 3 is SIGKILLed: the client
 * moves to node 2, authenticates and subscribes there again with the same options, and the
 * server's broadcasts reach it again. The time from the kill to the first broadcast received
 * again is printed (measured, never asserted). Client connections use TCP. */
#include "it_common.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES IT_RELAY_NODES

static cq_testsrv_t *node(int n)
{
    return it_node(n);
}

/* The nodes (it_relay.c): clients may subscribe themselves. */
static void relay_start(void)
{
    const char *args[] = {"--dev", "--client-fsm", it_client_auth_fsm(), NULL};
    it_relay_startv(args);
}

static chanq_sync_t *g_mover;

static int move_teardown(void **state)
{
    g_mover = chanq_sync_free(g_mover);
    return it_teardown(state);
}

typedef struct seen {
    int n;
    chanq_moved_t ev;
    char from[32], to[32];
    int64_t at;
} seen_t;

static void on_moved(void *ud, const chanq_moved_t *ev)
{
    seen_t *s = ud;
    s->n++;
    s->ev = *ev;
    snprintf(s->from, sizeof(s->from), "%s", ev->from_addr);
    snprintf(s->to, sizeof(s->to), "%s", ev->to_addr);
    s->ev.from_addr = s->ev.to_addr = NULL;
    s->at = cq_test_mono_ms();
}

/* The user-space message m (a ServerForwardMessage) carries payload exactly. */
static void assert_payload(const chanq_owned_msg_t *m, const char *payload)
{
    Channeldpb__ServerForwardMessage *f =
        chanq_sync_decode(m, &channeldpb__server_forward_message__descriptor);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, 0);
    assert_int_equal(f->payload.len, strlen(payload));
    assert_memory_equal(f->payload.data, payload, f->payload.len);
    chanq_unpack_free(f);
}

/* m is a SUB result on ch for conn_id whose options pack to want[0..n). */
static void assert_sub_result(const chanq_owned_msg_t *m, uint32_t ch, uint32_t stub,
                              uint32_t conn_id, const uint8_t *want, size_t n)
{
    assert_int_equal(m->msg_type, MT_SUB);
    assert_int_equal(m->channel_id, ch);
    assert_int_equal(m->stub_id, stub);
    Channeldpb__SubscribedToChannelResultMessage *r =
        chanq_sync_decode(m, &channeldpb__subscribed_to_channel_result_message__descriptor);
    assert_non_null(r);
    assert_int_equal(r->connid, conn_id);
    assert_int_equal(r->conntype, CONN_CLIENT);
    assert_int_equal(r->channeltype, CT_SUBWORLD);
    assert_non_null(r->suboptions);
    uint8_t packed[256];
    size_t k = protobuf_c_message_get_packed_size(&r->suboptions->base);
    assert_true(k <= sizeof(packed));
    protobuf_c_message_pack(&r->suboptions->base, packed);
    assert_int_equal(k, n);
    assert_memory_equal(packed, want, n);
    chanq_unpack_free(r);
}

/* Broadcasts from the server (not to itself) on ch. */
static void tick(it_conn_t *s, uint32_t ch, uint32_t type, const char *payload)
{
    it_sfwd(s, ch, BC_ALL | BC_BUT_SENDER, type, 0, payload);
}

/* After the kill: the server broadcasts tick-N whenever the client has had nothing for
 * TICK_MS, until one reaches it; the SUB result of the new subscription comes first (it leaves
 * the channel's worker before any fan-out to the new subscriber), at *sub_at. Returns the ms
 * from t0 to the first tick received. */
#define TICK_MS 5
static int64_t receive_again(it_conn_t *s, uint32_t ch, const uint8_t *opts, size_t opts_len,
                             int64_t t0, seen_t *seen, int64_t *sub_at)
{
    bool got_sub = false;
    char payload[32];
    for (int k = 0;; k++) {
        assert_true(cq_test_mono_ms() - t0 < 30000);
        snprintf(payload, sizeof(payload), "tick-%d", k);
        tick(s, ch, 160, payload);
        chanq_owned_msg_t m;
        int r;
        while ((r = chanq_sync_recv(g_mover, &m, TICK_MS)) == 0) {
            if (m.msg_type == MT_SUB) {
                assert_false(got_sub);
                assert_int_equal(seen->n, 1);
                assert_sub_result(&m, ch, 0, seen->ev.conn_id, opts, opts_len);
                got_sub = true;
                *sub_at = cq_test_mono_ms();
                chanq_owned_msg_done(&m);
                continue;
            }
            int64_t dt = cq_test_mono_ms() - t0;
            assert_true(got_sub);
            assert_int_equal(m.msg_type, 160);
            assert_int_equal(m.channel_id, ch);
            assert_int_equal(m.broadcast, BC_ALL | BC_BUT_SENDER);
            Channeldpb__ServerForwardMessage *f =
                chanq_sync_decode(&m, &channeldpb__server_forward_message__descriptor);
            assert_non_null(f);
            assert_true(f->payload.len > 5 && !memcmp(f->payload.data, "tick-", 5));
            chanq_unpack_free(f);
            chanq_owned_msg_done(&m);
            return dt;
        }
        assert_int_equal(r, CQ_ETIMEOUT);
    }
}

/* The owner hears of both connections: the new one's SUB (stub 0) and, once node 1 sees node
 * 3 leave (the ZooKeeper session), the old one's UNSUB; in either order. */
static void owner_sees_move(it_conn_t *s, uint32_t ch, uint32_t old_id, uint32_t new_id)
{
    bool sub = false, unsub = false;
    while (!sub || !unsub) {
        chanq_owned_msg_t m;
        assert_int_equal(chanq_sync_recv(s->s, &m, 20000), 0);
        assert_int_equal(m.channel_id, ch);
        assert_int_equal(m.stub_id, 0);
        if (m.msg_type == MT_SUB) {
            Channeldpb__SubscribedToChannelResultMessage *r = chanq_sync_decode(
                &m, &channeldpb__subscribed_to_channel_result_message__descriptor);
            assert_non_null(r);
            assert_int_equal(r->connid, new_id);
            chanq_unpack_free(r);
            assert_false(sub);
            sub = true;
        } else {
            assert_int_equal(m.msg_type, MT_UNSUB);
            Channeldpb__UnsubscribedFromChannelResultMessage *u = chanq_sync_decode(
                &m, &channeldpb__unsubscribed_from_channel_result_message__descriptor);
            assert_non_null(u);
            assert_int_equal(u->connid, old_id);
            assert_int_equal(u->conntype, CONN_CLIENT);
            chanq_unpack_free(u);
            assert_false(unsub);
            unsub = true;
        }
        chanq_owned_msg_done(&m);
    }
}

static void test_client_moves(void **state)
{
    (void)state;
    relay_start();
    it_conn_t *s = it_connect_to(node(1), true, NULL);
    it_auth(s, "server", "");
    uint32_t ch = it_create(s, CT_SUBWORLD, "move", 1);
    assert_int_equal(ch >> 12, 1); /* a channel of node 1 */

    char list[64];
    snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:%u", node(3)->client_port,
             node(2)->client_port);
    seen_t seen = {0};
    chanq_move_opts_t mo;
    chanq_move_opts_init(&mo);
    mo.on_moved = on_moved;
    mo.ud = &seen;
    assert_int_equal(chanq_sync_connect_list(list, NULL, &mo, IT_TIMEOUT_MS, &g_mover), 0);
    int result = -1;
    uint32_t id3 = 0;
    assert_int_equal(chanq_sync_auth(g_mover, "pit", "lt", IT_TIMEOUT_MS, &result, &id3), 0);
    assert_int_equal(result, 0);
    assert_int_equal(id3 >> 27, 3); /* ids carry their node (--relay-node-bits 4) */

    /* it subscribes itself, with options of every kind */
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    char *masks[] = {"name"};
    o.has_dataaccess = 1;
    o.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__READ_ACCESS;
    o.has_fanoutintervalms = 1;
    o.fanoutintervalms = 40;
    o.n_datafieldmasks = 1;
    o.datafieldmasks = masks;
    assert_int_equal(chanq_sync_sub_to_channel(g_mover, 5, ch, 0, &o), 0);
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(g_mover, &m, IT_TIMEOUT_MS), 0);
    const chanq_sub_t *rec = chanq_client_sub_find(chanq_sync_client(g_mover), ch);
    assert_non_null(rec);
    uint8_t opts[256];
    size_t opts_len = rec->opts_len;
    assert_true(opts_len <= sizeof(opts));
    memcpy(opts, rec->opts, opts_len);
    assert_sub_result(&m, ch, 5, id3, opts, opts_len);
    chanq_owned_msg_done(&m);
    it_expect_sub(s, ch, 0, id3, CONN_CLIENT, CT_SUBWORLD, 1);
    tick(s, ch, 150, "before");
    assert_int_equal(chanq_sync_recv(g_mover, &m, IT_TIMEOUT_MS), 0);
    assert_int_equal(m.msg_type, 150);
    assert_payload(&m, "before");
    chanq_owned_msg_done(&m);

    int64_t t0 = cq_test_mono_ms();
    assert_int_equal(cq_testsrv_kill(it_node(3), SIGKILL), 128 + SIGKILL);
    int64_t sub_at = 0;
    int64_t dt = receive_again(s, ch, opts, opts_len, t0, &seen, &sub_at);
    printf("# node 3 killed: the client moved to node 2 after %lld ms, had its SUB result after "
           "%lld ms and a broadcast (one every %d ms) after %lld ms\n",
           (long long)(seen.at - t0), (long long)(sub_at - t0), TICK_MS, (long long)dt);

    /* the move: from node 3 to node 2, a new id of node 2, the one subscription redone */
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.ev.from, 0);
    assert_int_equal(seen.ev.to, 1);
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", node(3)->client_port);
    assert_string_equal(seen.from, addr);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", node(2)->client_port);
    assert_string_equal(seen.to, addr);
    assert_int_equal(seen.ev.old_conn_id, id3);
    uint32_t id2 = seen.ev.conn_id;
    assert_int_equal(id2 >> 27, 2);
    assert_int_equal(chanq_client_conn_id(chanq_sync_client(g_mover)), id2);
    assert_int_equal(seen.ev.resubscribed, 1);
    assert_int_equal(seen.ev.tries, 1);
    assert_true(chanq_sync_err_is_closed(seen.ev.reason));
    rec = chanq_client_sub_find(chanq_sync_client(g_mover), ch);
    assert_non_null(rec);
    assert_int_equal(rec->opts_len, opts_len);
    assert_memory_equal(rec->opts, opts, opts_len);

    /* exactly the server's broadcasts from then on: ticks in flight, then this one */
    tick(s, ch, 161, "after-move");
    for (;;) {
        assert_int_equal(chanq_sync_recv(g_mover, &m, IT_TIMEOUT_MS), 0);
        if (m.msg_type == 161)
            break;
        assert_int_equal(m.msg_type, 160);
        chanq_owned_msg_done(&m);
    }
    assert_int_equal(m.channel_id, ch);
    assert_payload(&m, "after-move");
    chanq_owned_msg_done(&m);
    owner_sees_move(s, ch, id3, id2);
    const chanq_move_t *e = chanq_sync_move(g_mover);
    assert_int_equal(chanq_move_moves(e), 1);
    assert_int_equal(chanq_move_target(e), 1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_client_moves, move_teardown),
    };
    return it_relay_run("relay-move", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
