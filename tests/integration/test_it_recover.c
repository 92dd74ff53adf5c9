/* test_it_recover.c - server connection recovery (reference §3.7, --server-conn-recoverable):
 * a game server drops, subscribers hear CHANNEL_OWNER_LOST, a new server authenticating with
 * the same PIT takes over the old id and its channel, and subscribers hear
 * CHANNEL_OWNER_RECOVERED; the successor gets RECOVERY_CHANNEL_DATA and RECOVERY_END. */
#include "it_common.h"

#include <string.h>

enum { MT_RECOVERY_DATA = 20, MT_RECOVERY_END = 21, MT_OWNER_LOST = 22, MT_OWNER_RECOVERED = 23 };

static void test_server_recovers_channel(void **state)
{
    it_start("--server-conn-recoverable", NULL);
    Channeldpb__AuthResultMessage *ar;
    it_conn_t *s1 = it_server_pit(NULL, "zone-7", 1, &ar);
    assert_false(ar->shouldrecover);
    uint32_t old_id = s1->id;
    chanq_unpack_free(ar);
    it_conn_t *c = it_client();
    uint32_t ch = it_create(s1, CT_SUBWORLD, "zone", 2);
    it_sub(s1, 3, ch, c->id, -1);
    it_expect_sub(s1, ch, 3, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);

    it_close(s1); /* unexpected: the peer just goes away */
    it_expect_empty(c, MT_OWNER_LOST, ch);

    it_conn_t *s2 = it_server_pit(NULL, "zone-7", 9, &ar);
    assert_true(ar->shouldrecover);
    assert_int_equal(ar->connid, old_id); /* takes over the old connection id */
    chanq_unpack_free(ar);
    chanq_owned_msg_t env;
    Channeldpb__ChannelDataRecoveryMessage *rd = it_expect(
        s2, MT_RECOVERY_DATA, 0, &channeldpb__channel_data_recovery_message__descriptor, &env);
    assert_int_equal(env.channel_id, ch);
    assert_int_equal(rd->channelid, ch);
    assert_int_equal(rd->ownerconnid, old_id);
    assert_int_equal(rd->channeltype, CT_SUBWORLD);
    assert_string_equal(rd->metadata, "zone");
    assert_true(rd->subtime > 0);
    assert_non_null(rd->suboptions);
    assert_true(rd->suboptions->skipfirstfanout);
    chanq_unpack_free(rd);
    chanq_owned_msg_done(&env);
    it_expect_empty(s2, MT_RECOVERY_END, 0);
    it_expect_empty(c, MT_OWNER_RECOVERED, ch);

    /* The channel is the successor's: client messages reach it, its broadcasts reach them. */
    assert_int_equal(chanq_sync_user_msg(c->s, ch, 0, 100, "back?", 5), 0);
    it_expect_user(s2, ch, 100, 0, 0, c->id, "back?");
    it_sfwd(s2, ch, (BC_ALL | BC_BUT_SENDER), 101, 0, "yes");
    it_expect_user(c, ch, 101, (BC_ALL | BC_BUT_SENDER), 0, 0, "yes");
}

static void test_not_recoverable_by_default(void **state)
{
    it_start(NULL);
    Channeldpb__AuthResultMessage *ar;
    it_conn_t *s1 = it_server_pit(NULL, "zone-8", 1, &ar);
    chanq_unpack_free(ar);
    it_conn_t *c = it_client();
    uint32_t ch = it_create(s1, CT_SUBWORLD, "zone", 2);
    it_sub(s1, 3, ch, c->id, -1);
    it_expect_sub(s1, ch, 3, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_close(s1);
    it_expect_remove(c, ch); /* SUBWORLD removes itself without its owner */
    it_conn_t *s2 = it_server_pit(NULL, "zone-8", 4, &ar);
    assert_false(ar->shouldrecover);
    assert_int_not_equal(ar->connid, 1);
    chanq_unpack_free(ar);
    (void)s2;
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_server_recovers_channel),
    IT_TEST(test_not_recoverable_by_default),
};

IT_MAIN(tests)
