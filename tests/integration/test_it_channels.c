/* test_it_channels.c - CREATE / REMOVE / LIST and GLOBAL possession (§1.7, §2.1, §2.2). */
#include "it_common.h"

#include <stdio.h>
#include <string.h>

static Channeldpb__ListChannelResultMessage *list(it_conn_t *c, uint32_t stub, uint32_t type,
                                                  const char *const *filters, size_t n)
{
    assert_int_equal(chanq_sync_list_channel(c->s, stub, type, filters, n), 0);
    chanq_owned_msg_t env;
    Channeldpb__ListChannelResultMessage *lr =
        it_expect(c, MT_LIST, stub, &channeldpb__list_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    return lr;
}

/* Returns the metadata of channel id in the list, or NULL. */
static const char *find(const Channeldpb__ListChannelResultMessage *lr, uint32_t id, uint32_t *type)
{
    for (size_t i = 0; i < lr->n_channels; i++) {
        if (lr->channels[i]->channelid == id) {
            if (type)
                *type = lr->channels[i]->channeltype;
            return lr->channels[i]->metadata;
        }
    }
    return NULL;
}

static void test_global_possession(void **state)
{
    it_start(NULL);
    it_conn_t *g1 = it_gowner();
    assert_int_equal(g1->id, 1);
    it_conn_t *g2 = it_server();
    /* A second CREATE GLOBAL fails silently: the next reply g2 sees is its LIST result. */
    assert_int_equal(chanq_sync_create_channel(g2->s, 7, CT_GLOBAL, "usurper", NULL), 0);
    Channeldpb__ListChannelResultMessage *lr = list(g2, 8, CT_GLOBAL, NULL, 0);
    assert_int_equal(lr->n_channels, 1);
    assert_int_equal(lr->channels[0]->channelid, 0);
    assert_string_equal(lr->channels[0]->metadata, "");
    chanq_unpack_free(lr);
    /* g1 still owns GLOBAL: a client's user message on channel 0 reaches g1 */
    it_conn_t *c = it_client();
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 100, "x", 1), 0);
    it_expect_user(g1, 0, 100, 0, 0, c->id, "x");
}

static void test_create_results_and_copy(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *g = it_gowner();
    g->skip_copies = false;
    assert_int_equal(chanq_sync_create_channel(s->s, 3, CT_PRIVATE, "room-a", NULL), 0);
    /* the creator: CreateChannelResult (stub echoed, channelId 0), then its SUB result */
    chanq_owned_msg_t env;
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(s, MT_CREATE, 3, &channeldpb__create_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(cr->channelid, 1);
    assert_int_equal(cr->channeltype, CT_PRIVATE);
    assert_string_equal(cr->metadata, "room-a");
    assert_int_equal(cr->ownerconnid, s->id);
    chanq_unpack_free(cr);
    it_expect_sub(s, 1, 0, s->id, CONN_SERVER, CT_PRIVATE, 1);
    /* the GLOBAL owner: a copy with stub 0 */
    cr = it_expect(g, MT_CREATE, 0, &channeldpb__create_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(cr->channelid, 1);
    assert_int_equal(cr->channeltype, CT_PRIVATE);
    assert_string_equal(cr->metadata, "room-a");
    assert_int_equal(cr->ownerconnid, s->id);
    chanq_unpack_free(cr);
    /* the GLOBAL owner creating a channel gets no extra copy: next is its own result */
    uint32_t id = it_create(g, CT_SUBWORLD, "by-g", 4);
    assert_int_equal(id, 2);
}

static void test_channel_id_reuse(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    uint32_t a = it_create(s, CT_PRIVATE, "A", 1);
    uint32_t b = it_create(s, CT_PRIVATE, "B", 2);
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    assert_int_equal(chanq_sync_remove_channel(s->s, 3, a), 0);
    it_expect_remove(s, a);                                /* the creator is a subscriber */
    assert_int_equal(it_create(s, CT_PRIVATE, "C", 4), 1); /* freed id reused at once */
    assert_int_equal(it_create(s, CT_PRIVATE, "D", 5), 3);
}

static void test_remove_notifies_subscribers(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c1 = it_client();
    it_conn_t *c2 = it_client();
    uint32_t ch = it_create(s, CT_PRIVATE, "doomed", 1);
    it_sub(s, 2, ch, c1->id, -1);
    it_expect_sub(s, ch, 2, c1->id, CONN_CLIENT, CT_PRIVATE, 1);
    it_expect_sub(c1, ch, 0, c1->id, CONN_CLIENT, CT_PRIVATE, 1);
    it_sub(s, 3, ch, c2->id, -1);
    it_expect_sub(s, ch, 3, c2->id, CONN_CLIENT, CT_PRIVATE, 1);
    it_expect_sub(c2, ch, 0, c2->id, CONN_CLIENT, CT_PRIVATE, 1);

    assert_int_equal(chanq_sync_remove_channel(s->s, 4, ch), 0);
    chanq_owned_msg_t env;
    it_conn_t *subs[] = {s, c1, c2};
    for (int i = 0; i < 3; i++) {
        Channeldpb__RemoveChannelMessage *rm =
            it_expect(subs[i], MT_REMOVE, 0, &channeldpb__remove_channel_message__descriptor, &env);
        assert_int_equal(env.channel_id, 0); /* the request's channelId */
        chanq_owned_msg_done(&env);
        assert_int_equal(rm->channelid, ch);
        chanq_unpack_free(rm);
    }
    /* the channel is gone: a broadcast to it is dropped ("unknown channel"), and a new
     * broadcast on a live channel still works */
    it_sfwd(s, ch, BC_ALL, 120, 0, "ghost");
    it_log_expect("unknown channel");
    uint32_t ch2 = it_create(s, CT_SUBWORLD, "next", 5);
    it_sfwd(s, ch2, BC_ALL, 121, 0, "live");
    it_expect_user(s, ch2, 121, BC_ALL, 0, 0, "live");
}

static void test_list_filters(void **state)
{
    it_start(NULL);
    it_conn_t *g = it_server();
    assert_int_equal(chanq_sync_create_channel(g->s, 1, CT_GLOBAL, "master", NULL), 0);
    it_expect(g, MT_CREATE, 1, NULL, NULL);
    it_expect_sub(g, 0, 0, g->id, CONN_SERVER, CT_GLOBAL, 1);
    it_conn_t *s = it_server();
    uint32_t p1 = it_create(s, CT_PRIVATE, "alpha-1", 1);
    uint32_t p2 = it_create(s, CT_PRIVATE, "beta-2", 2);
    uint32_t sw = it_create(s, CT_SUBWORLD, "alpha-beta", 3);
    uint32_t t = it_create(s, CT_TEST, "gamma", 4);
    uint32_t type = 0;

    Channeldpb__ListChannelResultMessage *lr = list(s, 10, 0, NULL, 0);
    assert_int_equal(lr->n_channels, 5);
    assert_string_equal(find(lr, 0, &type), "master");
    assert_int_equal(type, CT_GLOBAL);
    assert_string_equal(find(lr, p1, &type), "alpha-1");
    assert_int_equal(type, CT_PRIVATE);
    assert_string_equal(find(lr, sw, &type), "alpha-beta");
    assert_int_equal(type, CT_SUBWORLD);
    assert_string_equal(find(lr, t, &type), "gamma");
    assert_int_equal(type, CT_TEST);
    chanq_unpack_free(lr);

    lr = list(s, 11, CT_PRIVATE, NULL, 0);
    assert_int_equal(lr->n_channels, 2);
    assert_non_null(find(lr, p1, NULL));
    assert_non_null(find(lr, p2, NULL));
    chanq_unpack_free(lr);

    const char *f1[] = {"alpha"};
    lr = list(s, 12, 0, f1, 1);
    assert_int_equal(lr->n_channels, 2);
    assert_non_null(find(lr, p1, NULL));
    assert_non_null(find(lr, sw, NULL));
    chanq_unpack_free(lr);

    const char *f2[] = {"beta", "gamma"};
    lr = list(s, 13, 0, f2, 2);
    assert_int_equal(lr->n_channels, 3);
    assert_non_null(find(lr, p2, NULL));
    assert_non_null(find(lr, sw, NULL));
    assert_non_null(find(lr, t, NULL));
    chanq_unpack_free(lr);

    const char *f3[] = {"mast"};
    lr = list(s, 14, 0, f3, 1);
    assert_int_equal(lr->n_channels, 1);
    assert_non_null(find(lr, 0, NULL));
    chanq_unpack_free(lr);

    lr = list(s, 15, CT_PRIVATE, f2, 2); /* type AND (beta OR gamma) */
    assert_int_equal(lr->n_channels, 1);
    assert_non_null(find(lr, p2, NULL));
    chanq_unpack_free(lr);

    const char *f4[] = {"nope"};
    lr = list(s, 16, CT_SUBWORLD, f4, 1);
    assert_int_equal(lr->n_channels, 0);
    chanq_unpack_free(lr);
}

static void test_create_spatial_msgtype_nonspatial(void **state)
{
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *g = it_gowner();
    g->skip_copies = false;
    Channeldpb__CreateChannelMessage cm = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cm.channeltype = CHANNELDPB__CHANNEL_TYPE__PRIVATE;
    cm.metadata = "via-10";
    assert_int_equal(chanq_sync_send(s->s, 0, 0, 6, MT_CREATE_SPATIAL, &cm.base), 0);
    chanq_owned_msg_t env;
    Channeldpb__CreateChannelResultMessage *cr = it_expect(
        s, MT_CREATE_SPATIAL, 6, &channeldpb__create_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(cr->channeltype, CT_PRIVATE);
    assert_string_equal(cr->metadata, "via-10");
    assert_int_equal(cr->ownerconnid, s->id);
    uint32_t id = cr->channelid;
    assert_int_equal(id, 1);
    chanq_unpack_free(cr);
    it_expect_sub(s, id, 0, s->id, CONN_SERVER, CT_PRIVATE, 1);
    /* the GLOBAL owner's copy keeps msgType 10 */
    cr = it_expect(g, MT_CREATE_SPATIAL, 0, &channeldpb__create_channel_result_message__descriptor,
                   NULL);
    assert_int_equal(cr->channelid, id);
    chanq_unpack_free(cr);
}

/* Item 12: a CREATE_CHANNEL over --max-channels used to get no reply. channeld only logs
 * "non-spatial channels are full"; chanq closes the creator with the reason logged and counted
 * in chanq_limit_closed, and the channels that exist stay. */
static void test_create_over_max_channels_closes(void **state)
{
    it_start("--max-channels", "3", NULL); /* GLOBAL and two more */
    it_conn_t *g = it_gowner();
    it_conn_t *s = it_server();
    it_create(s, CT_SUBWORLD, "a", 1);
    uint32_t b = it_create(g, CT_SUBWORLD, "b", 2);
    it_log_mark();
    assert_int_equal(chanq_sync_create_channel(s->s, 3, CT_SUBWORLD, "over", NULL), 0);
    it_expect_closed(s);
    char line[96];
    snprintf(line, sizeof(line), "closing conn %u (SERVER, ", s->id);
    it_log_expect(line);
    it_log_expect("CREATE_CHANNEL over max-channels (3 channels): a configured limit was reached");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_limit_closed"), 1);
    /* g is still served; channel b stays (a goes with its owner: SUBWORLD removes itself) */
    Channeldpb__ListChannelResultMessage *lr = list(g, 4, CT_SUBWORLD, NULL, 0);
    assert_non_null(find(lr, b, NULL));
    chanq_unpack_free(lr);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_global_possession),
    IT_TEST(test_create_results_and_copy),
    IT_TEST(test_channel_id_reuse),
    IT_TEST(test_remove_notifies_subscribers),
    IT_TEST(test_list_filters),
    IT_TEST(test_create_spatial_msgtype_nonspatial),
    IT_TEST(test_create_over_max_channels_closes),
};

IT_MAIN(tests)
