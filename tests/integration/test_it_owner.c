/* test_it_owner.c - ownership and connection loss (§2.2): auto-removal, ownerless channels,
 * lost subscribers, GLOBAL unpossession. */
#include "it_common.h"

#include <stdio.h>
#include <string.h>

static void sub_client(it_conn_t *s, uint32_t ch, it_conn_t *c, uint32_t type, uint32_t stub)
{
    it_sub(s, stub, ch, c->id, -1);
    it_expect_sub(s, ch, stub, c->id, CONN_CLIENT, type, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, type, 1);
}

static void test_owner_leaves_private_removed(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c1 = it_client();
    it_conn_t *c2 = it_client();
    uint32_t ch = it_create(s, CT_PRIVATE, "room", 1);
    sub_client(s, ch, c1, CT_PRIVATE, 2);
    sub_client(s, ch, c2, CT_PRIVATE, 3);
    it_close(s);
    it_expect_remove(c1, ch);
    it_expect_remove(c2, ch);
}

static const char KEEP_SETTINGS[] =
    "{\"1\": {\"TickIntervalMs\": 20, \"DefaultFanOutIntervalMs\": 20,"
    " \"ACLSettings\": {\"Sub\": 3, \"Unsub\": 3, \"Remove\": 0}},"
    " \"2\": {\"TickIntervalMs\": 20, \"DefaultFanOutIntervalMs\": 20,"
    " \"RemoveChannelAfterOwnerRemoved\": false,"
    " \"ACLSettings\": {\"Sub\": 2, \"Unsub\": 2, \"Remove\": 2}}}\n";

static void test_owner_leaves_channel_kept(void **state)
{
    it_start("--channel-settings", it_file("settings.json", KEEP_SETTINGS), NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *s = it_server();
    it_conn_t *c1 = it_client();
    it_conn_t *c2 = it_client();
    uint32_t ch = it_create(s, CT_PRIVATE, "room", 1);
    sub_client(s, ch, c1, CT_PRIVATE, 2);
    char line[96];
    snprintf(line, sizeof(line), "channel %u: owner conn %u left", ch, s->id);
    it_close(s);
    it_log_expect(line);

    /* the channel still exists: the GLOBAL owner (ACL 2) subscribes c2 to it */
    it_sub(g, 5, ch, c2->id, -1);
    it_expect_sub(g, ch, 5, c2->id, CONN_CLIENT, CT_PRIVATE, 1);
    it_expect_sub(c2, ch, 0, c2->id, CONN_CLIENT, CT_PRIVATE, 1);

    /* a client's user message on the ownerless channel is dropped */
    assert_int_equal(chanq_sync_user_msg(c1->s, ch, 0, 100, "lost", 4), 0);
    it_log_expect("channel has no owner");
    /* SINGLE_CONNECTION with clientConnId 0 on an ownerless channel: dropped (channeld
     * panics here); the server stays up and broadcasts still work */
    it_sfwd(g, ch, BC_SINGLE, 101, 0, "to-nobody");
    it_sfwd(g, ch, BC_ALL, 102, 0, "everyone");
    it_expect_user(c1, ch, 102, BC_ALL, 0, 0, "everyone");
    it_expect_user(c2, ch, 102, BC_ALL, 0, 0, "everyone");
    assert_true(cq_testsrv_running(it_srv()));
    /* NO_BROADCAST to the missing owner: dropped too */
    it_sfwd(g, ch, 0, 103, 0, "owner?");
    it_sfwd(g, ch, BC_ALL, 104, 0, "again");
    it_expect_user(c1, ch, 104, BC_ALL, 0, 0, "again");
    assert_true(cq_testsrv_running(it_srv()));
}

static void test_non_owner_leaves(void **state)
{
    it_need_visible_close("a KCP client that leaves is noticed only at the idle timeout");
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c1 = it_client();
    it_conn_t *c2 = it_client();
    it_conn_t *o = it_server();
    uint32_t ch = it_create(s, CT_SUBWORLD, "w", 1);
    sub_client(s, ch, c1, CT_SUBWORLD, 2);
    sub_client(s, ch, c2, CT_SUBWORLD, 3);
    it_sub(o, 4, ch, o->id, -1);
    it_expect_sub(o, ch, 4, o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(s, ch, 0, o->id, CONN_SERVER, CT_SUBWORLD, 1);

    uint32_t lost = c1->id;
    it_close(c1);
    it_expect_unsub(s, ch, 0, lost, CONN_CLIENT, CT_SUBWORLD);
    uint32_t lost2 = o->id;
    it_close(o);
    it_expect_unsub(s, ch, 0, lost2, CONN_SERVER, CT_SUBWORLD);
    /* the others are still subscribed: a broadcast reaches c2 and the owner only */
    it_sfwd(s, ch, BC_ALL, 110, 0, "left");
    it_expect_user(c2, ch, 110, BC_ALL, 0, 0, "left");
    it_expect_user(s, ch, 110, BC_ALL, 0, 0, "left");
}

static void test_owner_unsub_self_loses_ownership(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c = it_client();
    uint32_t ch = it_create(s, CT_SUBWORLD, "w", 1);
    sub_client(s, ch, c, CT_SUBWORLD, 2);
    assert_int_equal(chanq_sync_unsub_from_channel(s->s, 3, ch, s->id), 0);
    it_expect_unsub(s, ch, 3, s->id, CONN_SERVER, CT_SUBWORLD);
    /* ownerless now: the client's message is dropped, the owner gets nothing; prove with a
     * later message on a channel s still owns */
    uint32_t ch2 = it_create(s, CT_SUBWORLD, "w2", 4);
    assert_int_equal(chanq_sync_user_msg(c->s, ch, 0, 100, "nobody", 6), 0);
    it_log_expect("channel has no owner");
    assert_int_equal(chanq_sync_user_msg(c->s, ch2, 0, 100, "owned", 5), 0);
    it_expect_user(s, ch2, 100, 0, 0, c->id, "owned");
}

static void test_global_owner_leaves(void **state)
{
    it_start(NULL);
    it_conn_t *g1 = it_gowner();
    it_conn_t *c = it_client();
    uint32_t g1id = g1->id;
    it_close(g1);
    char line[64];
    snprintf(line, sizeof(line), "GLOBAL unpossessed: owner conn %u left", g1id);
    it_log_expect(line);
    it_conn_t *g2 = it_gowner(); /* asserts CreateChannelResult{GLOBAL, owner g2} */
    assert_int_not_equal(g2->id, g1id);
    /* the new owner gets copies of AuthResults and the client's messages */
    g2->skip_copies = false;
    it_conn_t *c2 = it_client();
    Channeldpb__AuthResultMessage *ar =
        it_expect(g2, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, NULL);
    assert_int_equal(ar->connid, c2->id);
    assert_int_equal(ar->result, 0);
    chanq_unpack_free(ar);
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 100, "new-master", 10), 0);
    it_expect_user(g2, 0, 100, 0, 0, c->id, "new-master");
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_owner_leaves_private_removed),
    IT_TEST(test_owner_leaves_channel_kept),
    IT_TEST(test_non_owner_leaves),
    IT_TEST(test_owner_unsub_self_loses_ownership),
    IT_TEST(test_global_owner_leaves),
};

IT_MAIN(tests)
