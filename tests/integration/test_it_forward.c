/* test_it_forward.c - user-space messages (§1.8): client -> owner wrapping, server broadcast
 * flags, SINGLE_CONNECTION, invalid server bodies, DISCONNECT. */
#include "it_common.h"

#include <stdio.h>
#include <string.h>

typedef struct world {
    it_conn_t *s, *o, *c1, *c2; /* owner server, other server, two clients */
    uint32_t ch;
} world_t;

static void world_init(world_t *w)
{
    it_start(NULL);
    w->s = it_server();
    w->o = it_server();
    w->c1 = it_client();
    w->c2 = it_client();
    w->ch = it_create(w->s, CT_SUBWORLD, "fwd", 1);
    it_sub(w->o, 2, w->ch, w->o->id, -1);
    it_expect_sub(w->o, w->ch, 2, w->o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(w->s, w->ch, 0, w->o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_conn_t *cs[2] = {w->c1, w->c2};
    for (int i = 0; i < 2; i++) {
        it_sub(w->s, 3, w->ch, cs[i]->id, -1);
        it_expect_sub(w->s, w->ch, 3, cs[i]->id, CONN_CLIENT, CT_SUBWORLD, 1);
        it_expect_sub(cs[i], w->ch, 0, cs[i]->id, CONN_CLIENT, CT_SUBWORLD, 1);
    }
}

/* As it_check_marked, the marker from o. */
static void check_recipients(world_t *w, unsigned mask, uint32_t type, uint32_t bc, uint32_t stub,
                             uint32_t client, const char *payload)
{
    it_conn_t *all[4] = {w->s, w->o, w->c1, w->c2};
    it_check_marked(all, w->o, w->ch, mask, type, bc, stub, client, payload);
}

enum { R_S = IT_R_S, R_O = IT_R_O, R_C1 = IT_R_C1, R_C2 = IT_R_C2, R_ALL = IT_R_ALL };

static void test_server_broadcast_flags(void **state)
{
    world_t w;
    world_init(&w);
    /* chanq_fanouts_total (doc/metrics.md): one ALL broadcast queues one record per subscriber */
    int64_t f0 = cq_testsrv_metric(it_srv(), "chanq_fanouts_total");
    check_recipients(&w, 0, 0, 0, 0, 0, "");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_fanouts_total"), f0 + 4);
    it_conn_t *all[4] = {w.s, w.o, w.c1, w.c2};
    it_check_bc_cases(all, w.ch);
    /* the clientConnId and payload are passed through as sent (same sender as the markers:
     * only messages from one connection are ordered) */
    it_sfwd_stub(w.o, w.ch, BC_ALL | BC_BUT_OWNER, 121, 0, w.c2->id, "carry");
    check_recipients(&w, R_O | R_C1 | R_C2, 121, BC_ALL | BC_BUT_OWNER, 0, w.c2->id, "carry");
}

static void test_server_single_connection(void **state)
{
    world_t w;
    world_init(&w);
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 130, 4, w.c1->id, "only-c1");
    check_recipients(&w, R_C1, 130, BC_SINGLE, 4, w.c1->id, "only-c1");
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 131, 5, 0, "owner");
    check_recipients(&w, R_S, 131, BC_SINGLE, 5, 0, "owner");
    /* SINGLE_CONNECTION to a connection that is not subscribed still reaches it */
    it_conn_t *c3 = it_client();
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 132, 0, c3->id, "direct");
    it_expect_user(c3, w.ch, 132, BC_SINGLE, 0, c3->id, "direct");
    /* to a connection that does not exist: dropped */
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 133, 0, 60000, "void");
    check_recipients(&w, 0, 0, 0, 0, 0, "");
}

static void test_client_to_owner(void **state)
{
    world_t w;
    world_init(&w);
    uint32_t bcs[] = {0, BC_SINGLE, BC_ALL, BC_ALL | BC_BUT_SENDER, BC_ALL | BC_BUT_SERVER};
    for (size_t i = 0; i < sizeof(bcs) / sizeof(bcs[0]); i++) {
        char payload[32];
        snprintf(payload, sizeof(payload), "from-c1-%zu", i);
        assert_int_equal(
            chanq_sync_send_raw(w.c1->s, w.ch, bcs[i], 9, 140, payload, strlen(payload)), 0);
        /* only the owner, wrapped with clientConnId = c1, original envelope fields; the
         * marker (from another connection) is sent once the owner has it */
        it_expect_user(w.s, w.ch, 140, bcs[i], 9, w.c1->id, payload);
        check_recipients(&w, 0, 0, 0, 0, 0, "");
    }
    /* an empty client body: ServerForwardMessage{clientConnId} with no payload */
    assert_int_equal(chanq_sync_send_raw(w.c2->s, w.ch, 0, 0, 141, NULL, 0), 0);
    it_expect_user(w.s, w.ch, 141, 0, 0, w.c2->id, "");
    check_recipients(&w, 0, 0, 0, 0, 0, "");
}

/* Order and size over every transport (the shared scenarios run this over WebSocket, KCP and
 * KCP through a proxy dropping 10% of datagrams): 50 messages arrive in order, and a 40 KB
 * packet goes each way (30 KCP segments: within kcp-go's 32-segment receive window). */
static void test_ordered_and_big(void **state)
{
    world_t w;
    world_init(&w);
    char payload[32];
    for (int i = 0; i < 50; i++) {
        snprintf(payload, sizeof(payload), "seq-%03d", i);
        it_sfwd_stub(w.o, w.ch, BC_SINGLE, 150, 0, w.c1->id, payload);
    }
    for (int i = 0; i < 50; i++) {
        snprintf(payload, sizeof(payload), "seq-%03d", i);
        it_expect_user(w.c1, w.ch, 150, BC_SINGLE, 0, w.c1->id, payload);
    }
    static char big[40001];
    for (int i = 0; i < 40000; i++)
        big[i] = (char)('a' + i % 26);
    big[40000] = '\0';
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 151, 0, w.c1->id, big);
    it_expect_user(w.c1, w.ch, 151, BC_SINGLE, 0, w.c1->id, big);
    assert_int_equal(chanq_sync_send_raw(w.c1->s, w.ch, 0, 0, 152, big, 40000), 0);
    it_expect_user(w.s, w.ch, 152, 0, 0, w.c1->id, big);
    check_recipients(&w, 0, 0, 0, 0, 0, "");
}

static void test_server_invalid_body_dropped(void **state)
{
    world_t w;
    world_init(&w);
    static const uint8_t garbage[] = {0xff, 0xff, 0xff};
    static const uint8_t wrong_wire[] = {0x0a, 0x02, 'h', 'i'}; /* field 1 as bytes */
    assert_int_equal(chanq_sync_send_raw(w.o->s, w.ch, BC_ALL, 0, 150, garbage, 3), 0);
    assert_int_equal(chanq_sync_send_raw(w.o->s, w.ch, BC_ALL, 0, 151, wrong_wire, 4), 0);
    check_recipients(&w, 0, 0, 0, 0, 0, "");
    it_log_expect("not a ServerForwardMessage");
    /* a valid one from the same connection is still forwarded */
    it_sfwd_stub(w.o, w.ch, BC_ALL, 152, 0, 0, "valid");
    check_recipients(&w, R_ALL, 152, BC_ALL, 0, 0, "valid");
}

static void test_disconnect(void **state)
{
    world_t w;
    world_init(&w);
    /* a client may not send DISCONNECT (FSM): dropped, both stay */
    assert_int_equal(chanq_sync_disconnect(w.c1->s, w.c2->id), 0);
    it_log_expect("not allowed by the connection's FSM state");
    check_recipients(&w, 0, 0, 0, 0, 0, "");
    /* a server's DISCONNECT closes the target; the owner hears of the lost subscription */
    assert_int_equal(chanq_sync_disconnect(w.o->s, w.c2->id), 0);
    it_expect_closed(w.c2);
    it_expect_unsub(w.s, w.ch, 0, w.c2->id, CONN_CLIENT, CT_SUBWORLD);
    it_log_expect("DISCONNECT requested");
    /* everyone else keeps working */
    it_sfwd_stub(w.o, w.ch, BC_ALL, 160, 0, 0, "after");
    it_expect_user(w.s, w.ch, 160, BC_ALL, 0, 0, "after");
    it_expect_user(w.o, w.ch, 160, BC_ALL, 0, 0, "after");
    it_expect_user(w.c1, w.ch, 160, BC_ALL, 0, 0, "after");
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_server_broadcast_flags),
    IT_TEST(test_server_single_connection),
    IT_TEST(test_client_to_owner),
    IT_TEST(test_ordered_and_big),
    IT_TEST(test_server_invalid_body_dropped),
    IT_TEST(test_disconnect),
};

IT_MAIN(tests)
