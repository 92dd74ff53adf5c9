/* test_it_subs.c - SUB_TO_CHANNEL / UNSUB_FROM_CHANNEL (§1.7) and the channel ACL (§2.3). */
#include "it_common.h"

#include <stdio.h>
#include <string.h>

/* channeld's client_authoratative_fsm.json */
static const char CLIENT_AUTH_FSM[] =
    "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\", \"MsgTypeBlacklist\": \"\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"3-8,15-65535\", \"MsgTypeBlacklist\": \"\"}],"
    " \"Transitions\": []}\n";

static void start_auth_fsm(const char *settings)
{
    const char *fsm = it_file("client_fsm.json", CLIENT_AUTH_FSM);
    if (settings)
        it_start("--client-fsm", fsm, "--channel-settings", it_file("settings.json", settings),
                 NULL);
    else
        it_start("--client-fsm", fsm, NULL);
}

static void test_sub_client_self(void **state)
{
    start_auth_fsm(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c = it_client();
    uint32_t ch = it_create(s, CT_SUBWORLD, "w", 1);

    /* connId is ignored for a CLIENT: it always subscribes itself */
    it_sub(c, 5, ch, 999, -1);
    it_expect_sub(c, ch, 5, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1); /* owner copy, stub 0 */
    /* chanq_subscribers (doc/metrics.md): the owner's subscription and c's */
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_subscribers"), 2);

    /* same access again: no reply; changed access: a reply (so c's next is stub 7) */
    it_sub(c, 6, ch, 0, 1);
    it_sub(c, 7, ch, 0, 2);
    it_expect_sub(c, ch, 7, c->id, CONN_CLIENT, CT_SUBWORLD, 2);
    it_expect_sub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 2);

    /* UNSUB self: sender (stub echoed) and owner (stub 0) */
    assert_int_equal(chanq_sync_unsub_from_channel(c->s, 8, ch, c->id), 0);
    it_expect_unsub(c, ch, 8, c->id, CONN_CLIENT, CT_SUBWORLD);
    it_expect_unsub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_subscribers"), 1);

    /* UNSUB again: not subscribed, nothing is sent; SUB again works (stub 10 is next) */
    assert_int_equal(chanq_sync_unsub_from_channel(c->s, 9, ch, c->id), 0);
    it_sub(c, 10, ch, 0, -1);
    it_expect_sub(c, ch, 10, c->id, CONN_CLIENT, CT_SUBWORLD, 1);

    /* a subscription to an unknown channel is dropped silently; the connection stays */
    it_sub(c, 11, 4242, 0, -1);
    it_sub(c, 12, ch, 0, 2);
    it_expect_sub(c, ch, 12, c->id, CONN_CLIENT, CT_SUBWORLD, 2);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_subscribers"), 2);
}

static void test_sub_other_by_server(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *o = it_server();
    it_conn_t *s2 = it_server();
    it_conn_t *c = it_client();
    uint32_t ch = it_create(s, CT_SUBWORLD, "w", 1);

    /* another server subscribes the client: sender (stub), subject (0), owner (0) */
    it_sub(o, 3, ch, c->id, -1);
    it_expect_sub(o, ch, 3, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);

    /* a server subject: connType SERVER */
    it_sub(o, 4, ch, s2->id, -1);
    it_expect_sub(o, ch, 4, s2->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(s2, ch, 0, s2->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, s2->id, CONN_SERVER, CT_SUBWORLD, 1);

    /* connId 0 from a server is an error; an unknown connection too: no replies, so o's
     * next reply is stub 7 */
    it_sub(o, 5, ch, 0, -1);
    it_sub(o, 6, ch, 77777, -1);
    it_sub(o, 7, ch, o->id, -1);
    it_expect_sub(o, ch, 7, o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, o->id, CONN_SERVER, CT_SUBWORLD, 1);

    /* UNSUB of another connection */
    assert_int_equal(chanq_sync_unsub_from_channel(o->s, 8, ch, c->id), 0);
    it_expect_unsub(o, ch, 8, c->id, CONN_CLIENT, CT_SUBWORLD);
    it_expect_unsub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD);
    it_expect_unsub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD);

    /* the owner subscribing someone: sender + subject only (no third copy) */
    it_sub(s, 9, ch, c->id, 2);
    it_expect_sub(s, ch, 9, c->id, CONN_CLIENT, CT_SUBWORLD, 2);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 2);
    /* and a re-SUB of it with changed access by another server reaches all three */
    it_sub(o, 10, ch, c->id, 1);
    it_expect_sub(o, ch, 10, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
}

/* ---- the subscription limit -------------------------------------------------------------- */

/* The owner s hears that c left: one UNSUB result (stub 0) per channel c was in, a and b, in
 * either order (they may live on different workers). */
static void expect_lost(it_conn_t *s, it_conn_t *c, uint32_t a, uint32_t b)
{
    bool seen_a = false, seen_b = false;
    for (int i = 0; i < 2; i++) {
        chanq_owned_msg_t env;
        Channeldpb__UnsubscribedFromChannelResultMessage *ur =
            it_expect(s, MT_UNSUB, 0,
                      &channeldpb__unsubscribed_from_channel_result_message__descriptor, &env);
        assert_int_equal(ur->connid, c->id);
        assert_int_equal(ur->conntype, CONN_CLIENT);
        seen_a |= env.channel_id == a;
        seen_b |= env.channel_id == b;
        chanq_owned_msg_done(&env);
        chanq_unpack_free(ur);
    }
    assert_true(seen_a && seen_b);
}

/* c was closed for a SUB to chan over `limit` (the option and its value, "max-subs-per-conn
 * (2)"), the count-th close for a limit. */
static void expect_limit_close_by(it_conn_t *c, const char *type, uint32_t chan, const char *limit,
                                  int64_t count)
{
    it_expect_closed(c);
    char line[160];
    snprintf(line, sizeof(line), "closing conn %u (%s, ", c->id, type);
    it_log_expect(line);
    snprintf(line, sizeof(line), "SUB to channel %u over %s: a configured limit was reached", chan,
             limit);
    it_log_expect(line);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_limit_closed"), count);
}

static void expect_limit_close(it_conn_t *c, const char *type, uint32_t chan, int64_t count)
{
    expect_limit_close_by(c, type, chan, "max-subs-per-conn (2)", count);
}

/* Item 12: a SUB over --max-subs-per-conn used to get no reply, so the requester waited
 * forever. channeld has no error reply: the connection that would hold the subscription is
 * closed, with the reason logged and counted in chanq_limit_closed. */
static void test_sub_over_limit_closes(void **state)
{
    it_need_visible_close("the refusal is a close of the client");
    it_start("--client-fsm", it_file("client_fsm.json", CLIENT_AUTH_FSM), "--max-subs-per-conn",
             "2", NULL);
    it_conn_t *s = it_server();
    uint32_t a = it_create(s, CT_SUBWORLD, "a", 1);
    uint32_t b = it_create(s, CT_SUBWORLD, "b", 2); /* s now holds 2 */

    /* a client subscribing itself: the third (GLOBAL, no owner) is refused */
    it_conn_t *c = it_client();
    it_sub(c, 5, a, 0, -1);
    it_expect_sub(c, a, 5, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, a, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_sub(c, 6, b, 0, -1);
    it_expect_sub(c, b, 6, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, b, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_sub(c, 7, 0, 0, -1);
    expect_limit_close(c, "CLIENT", 0, 1);
    expect_lost(s, c, a, b);

    /* the owner subscribing a client: the client is closed, the owner gets no SUB result
     * (its next reply is LIST's) */
    it_conn_t *c2 = it_client();
    it_sub(s, 8, a, c2->id, -1);
    it_expect_sub(s, a, 8, c2->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c2, a, 0, c2->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_sub(s, 9, b, c2->id, -1);
    it_expect_sub(s, b, 9, c2->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c2, b, 0, c2->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_sub(s, 10, 0, c2->id, -1);
    expect_limit_close(c2, "CLIENT", 0, 2);
    expect_lost(s, c2, a, b);
    assert_int_equal(chanq_sync_list_channel(s->s, 11, 0, NULL, 0), 0);
    Channeldpb__ListChannelResultMessage *lr =
        it_expect(s, MT_LIST, 11, &channeldpb__list_channel_result_message__descriptor, NULL);
    assert_int_equal(lr->n_channels, 3); /* GLOBAL, a, b */
    chanq_unpack_free(lr);

    /* others are unaffected */
    it_conn_t *c3 = it_client();
    it_sub(c3, 12, a, 0, -1);
    it_expect_sub(c3, a, 12, c3->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(s, a, 0, c3->id, CONN_CLIENT, CT_SUBWORLD, 1);
}

/* Issue 22: a game server was closed when it created its 1,024th channel, because its own
 * subscription to each channel it creates counted against --max-subs-per-conn, a client's
 * limit. A server's subscriptions have a limit of their own, --max-subs-per-server. */
static void test_server_owns_many_channels(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    for (uint32_t i = 1; i <= 1100; i++)
        it_create(s, CT_SUBWORLD, "m", i); /* each answered: result and the creator's SUB */
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_subscribers"), 1100);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_limit_closed"), 0);
    assert_int_equal(chanq_sync_list_channel(s->s, 2000, CT_SUBWORLD, NULL, 0), 0);
    Channeldpb__ListChannelResultMessage *lr =
        it_expect(s, MT_LIST, 2000, &channeldpb__list_channel_result_message__descriptor, NULL);
    assert_int_equal(lr->n_channels, 1100);
    chanq_unpack_free(lr);
}

/* The server limit is enforced as the client one is: the subscribed connection is closed with
 * the reason logged and counted. A creation over it is answered first (the channel exists),
 * then the creator, which cannot be subscribed, is closed. */
static void test_server_over_limit_closes(void **state)
{
    it_start("--max-subs-per-server", "3", "--max-subs-per-conn", "1", NULL);
    it_conn_t *s = it_server();
    it_create(s, CT_SUBWORLD, "a", 1);
    it_create(s, CT_SUBWORLD, "b", 2);
    it_create(s, CT_SUBWORLD, "c", 3); /* 3: over a client's limit, within a server's */
    assert_int_equal(chanq_sync_create_channel(s->s, 4, CT_SUBWORLD, "d", NULL), 0);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(s, MT_CREATE, 4, &channeldpb__create_channel_result_message__descriptor, NULL);
    uint32_t d = cr->channelid;
    assert_int_equal(cr->ownerconnid, s->id);
    chanq_unpack_free(cr);
    expect_limit_close_by(s, "SERVER", d, "max-subs-per-server (3)", 1);

    /* a server subscribing another server over its limit closes the subscribed one */
    it_conn_t *full = it_server();
    it_conn_t *owner = it_server();
    it_create(full, CT_SUBWORLD, "e", 5);
    it_create(full, CT_SUBWORLD, "f", 6);
    it_create(full, CT_SUBWORLD, "g", 7);
    uint32_t x = it_create(owner, CT_SUBWORLD, "x", 8);
    it_sub(owner, 9, x, full->id, -1);
    expect_limit_close_by(full, "SERVER", x, "max-subs-per-server (3)", 2);
    /* the requester is served on: its next reply is LIST's (no SUB result) */
    assert_int_equal(chanq_sync_list_channel(owner->s, 10, 0, NULL, 0), 0);
    chanq_unpack_free(
        it_expect(owner, MT_LIST, 10, &channeldpb__list_channel_result_message__descriptor, NULL));
}

/* ---- ACL ---------------------------------------------------------------------------------- */

/* Types 100..103 get ACL level 0..3 for Sub, Unsub and Remove. */
static const char ACL_SETTINGS[] =
    "{\"1\": {\"TickIntervalMs\": 20, \"DefaultFanOutIntervalMs\": 20,"
    " \"ACLSettings\": {\"Sub\": 3, \"Unsub\": 3, \"Remove\": 0}},"
    " \"100\": {\"ACLSettings\": {\"Sub\": 0, \"Unsub\": 0, \"Remove\": 0}},"
    " \"101\": {\"ACLSettings\": {\"Sub\": 1, \"Unsub\": 1, \"Remove\": 1}},"
    " \"102\": {\"ACLSettings\": {\"Sub\": 2, \"Unsub\": 2, \"Remove\": 2}},"
    " \"103\": {\"ACLSettings\": {\"Sub\": 3, \"Unsub\": 3, \"Remove\": 3}}}\n";

enum { ACT_OTHER, ACT_GOWNER, ACT_OWNER };

static bool acl_allowed(int level, int actor)
{
    switch (actor) {
    case ACT_OTHER:
        return level == 3;
    case ACT_GOWNER:
        return level >= 2;
    default:
        return level >= 1;
    }
}

static uint32_t g_stub = 100;

/* Toggles x's own subscription access on ch and discards everything up to its reply. When
 * used right after an operation, check_first tells whether the operation's reply (stub
 * op_stub, msg_type) must come first. */
static void barrier(it_conn_t *x, uint32_t ch, int *acc)
{
    *acc = *acc == 1 ? 2 : 1;
    uint32_t stub = ++g_stub;
    it_sub(x, stub, ch, x->id, *acc);
    for (;;) {
        chanq_owned_msg_t m;
        it_recv(x, &m);
        bool done = m.stub_id == stub && m.msg_type == MT_SUB;
        chanq_owned_msg_done(&m);
        if (done)
            return;
    }
}

/* After an op with stub op_stub: the op's reply comes first iff allowed, then the barrier's. */
static void expect_verdict(it_conn_t *x, uint32_t ch, int *acc, uint32_t op_type, uint32_t op_stub,
                           bool allowed, int level, int actor)
{
    *acc = *acc == 1 ? 2 : 1;
    uint32_t stub = ++g_stub;
    it_sub(x, stub, ch, x->id, *acc);
    chanq_owned_msg_t m;
    it_recv(x, &m);
    bool got_op = m.msg_type == op_type && m.stub_id == op_stub;
    if (got_op != allowed)
        print_error("ACL level %d actor %d msgType %u: expected %s, got msgType %u stub %u\n",
                    level, actor, op_type, allowed ? "allowed" : "denied", m.msg_type, m.stub_id);
    assert_true(got_op == allowed);
    if (!got_op)
        assert_true(m.msg_type == MT_SUB && m.stub_id == stub);
    chanq_owned_msg_done(&m);
    if (got_op)
        it_expect(x, MT_SUB, stub, NULL, NULL);
}

/* Creates channels owned by x until one shares ch's worker (id % workers); returns it. */
static uint32_t same_worker_channel(it_conn_t *x, uint32_t ch)
{
    for (;;) {
        uint32_t id = it_create(x, 103, "barrier", ++g_stub);
        if (id % (uint32_t)it_workers == ch % (uint32_t)it_workers)
            return id;
    }
}

static void test_acl_levels(void **state)
{
    start_auth_fsm(ACL_SETTINGS);
    it_conn_t *s = it_server(); /* owner of the test channels */
    it_conn_t *g = it_gowner();
    it_conn_t *o = it_server();
    it_conn_t *c = it_client();
    it_conn_t *actors[3] = {o, g, s};

    for (int level = 0; level <= 3; level++) {
        uint32_t type = 100u + (uint32_t)level;
        uint32_t ch = it_create(s, type, "acl", ++g_stub);
        int acc[3] = {1, 1, 1};
        /* o and g subscribe themselves (always allowed: self) to get a barrier channel */
        it_sub(o, ++g_stub, ch, o->id, 1);
        it_expect_sub(o, ch, g_stub, o->id, CONN_SERVER, type, 1);
        it_sub(g, ++g_stub, ch, g->id, 1);
        it_expect_sub(g, ch, g_stub, g->id, CONN_SERVER, type, 1);

        for (int a = 0; a < 3; a++) {
            it_conn_t *x = actors[a];
            bool ok = acl_allowed(level, a);
            /* Sub: x subscribes the client */
            barrier(x, ch, &acc[a]);
            uint32_t op = ++g_stub;
            it_sub(x, op, ch, c->id, -1);
            expect_verdict(x, ch, &acc[a], MT_SUB, op, ok, level, a);
            if (ok) {
                it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, type, 1);
                uint32_t u = ++g_stub;
                assert_int_equal(chanq_sync_unsub_from_channel(c->s, u, ch, c->id), 0);
                it_expect_unsub(c, ch, u, c->id, CONN_CLIENT, type);
            }
            /* Unsub: the client subscribes itself, x unsubscribes it */
            uint32_t sc = ++g_stub;
            it_sub(c, sc, ch, 0, -1);
            it_expect_sub(c, ch, sc, c->id, CONN_CLIENT, type, 1);
            barrier(x, ch, &acc[a]);
            op = ++g_stub;
            assert_int_equal(chanq_sync_unsub_from_channel(x->s, op, ch, c->id), 0);
            expect_verdict(x, ch, &acc[a], MT_UNSUB, op, ok, level, a);
            if (ok) {
                it_expect_unsub(c, ch, 0, c->id, CONN_CLIENT, type);
            } else {
                uint32_t u = ++g_stub;
                assert_int_equal(chanq_sync_unsub_from_channel(c->s, u, ch, c->id), 0);
                it_expect_unsub(c, ch, u, c->id, CONN_CLIENT, type);
            }
        }

        /* Remove, least privileged actor first, on a channel of its own per actor. */
        for (int a = 0; a < 3; a++) {
            it_conn_t *x = actors[a];
            bool ok = acl_allowed(level, a);
            barrier(s, ch, &acc[2]); /* s (the owner) also got copies of the above */
            uint32_t rc = it_create(s, type, "acl-rm", ++g_stub);
            if (x != s) {
                it_sub(x, ++g_stub, rc, x->id, 1);
                it_expect_sub(x, rc, g_stub, x->id, CONN_SERVER, type, 1);
            }
            uint32_t bar = same_worker_channel(x, rc);
            assert_int_equal(chanq_sync_remove_channel(x->s, ++g_stub, rc), 0);
            assert_int_equal(chanq_sync_remove_channel(x->s, ++g_stub, bar), 0);
            chanq_owned_msg_t m;
            for (;;) { /* skip SUB copies about rc from before */
                it_recv(x, &m);
                if (m.msg_type == MT_REMOVE)
                    break;
                chanq_owned_msg_done(&m);
            }
            Channeldpb__RemoveChannelMessage *rm =
                chanq_sync_decode(&m, &channeldpb__remove_channel_message__descriptor);
            assert_non_null(rm);
            if ((rm->channelid == rc) != ok)
                print_error("ACL level %d actor %d REMOVE: expected %s\n", level, a,
                            ok ? "allowed" : "denied");
            assert_true((rm->channelid == rc) == ok);
            if (ok) {
                chanq_unpack_free(rm);
                chanq_owned_msg_done(&m);
                rm =
                    it_expect(x, MT_REMOVE, 0, &channeldpb__remove_channel_message__descriptor, &m);
            }
            assert_int_equal(rm->channelid, bar);
            chanq_unpack_free(rm);
            chanq_owned_msg_done(&m);
        }
    }
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_sub_client_self),          IT_TEST(test_sub_other_by_server),
    IT_TEST(test_sub_over_limit_closes),    IT_TEST(test_server_owns_many_channels),
    IT_TEST(test_server_over_limit_closes), IT_TEST(test_acl_levels),
};

IT_MAIN(tests)
