/* test_it_data.c - channel data over TCP (issue 3): two game-defined types loaded from a
 * descriptor set, schema merge with merge options, masks, WRITE_ACCESS from a client,
 * skip-self, skip-first, and a 0 ms interval that does not stall the channel. */
#include "it_common.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chanqtest.pb-c.h"
#include "it_data.h"
#include "testpb.pb-c.h"

#define URL_CHAT "type.googleapis.com/chanqtest.ChatRoom"
#define URL_TEST "type.googleapis.com/testpb.TestChannelDataMessage"

static const char AUTH_CLIENT_FSM[] =
    "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"3-8,15-65535\"}]}\n";

static void start(void)
{
    const char *fds = getenv("CHANQTEST_FDS");
    const char *fds2 = getenv("TESTPB_FDS");
    assert_non_null(fds);
    assert_non_null(fds2);
    char types[4096];
    snprintf(types, sizeof(types), "%s,%s", fds, fds2);
    it_start("--channel-data-types", types, "--client-fsm",
             it_file("client_fsm.json", AUTH_CLIENT_FSM), NULL);
}

/* Map of entities with a `removed` flag: merged by schema, removed entries deleted from the
 * master state, masked subscribers see only the masked fields. */
static void test_entities_merge_remove_masks(void **state)
{
    start();
    it_conn_t *s = it_server();
    it_conn_t *full = it_client(), *masked = it_client();
    Chanqtest__EntityWorld w0 = CHANQTEST__ENTITY_WORLD__INIT;
    w0.name = "world";
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.shouldcheckremovablemapfield = 1;
    uint32_t ch = itd_create_with(s, URL_WORLD, &w0.base, &mo);
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, full, ch, &o, 1);
    char *mask[] = {"name"};
    Channeldpb__ChannelSubscriptionOptions om = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    om.n_datafieldmasks = 1;
    om.datafieldmasks = mask;
    itd_sub_opts(s, masked, ch, &om, 1);

    Chanqtest__EntityWorld *w =
        itd_next_data(full, ch, URL_WORLD, &chanqtest__entity_world__descriptor);
    assert_string_equal(w->name, "world"); /* first fan-out: the full state */
    chanqtest__entity_world__free_unpacked(w, NULL);

    Chanqtest__Entity e1, e2, gone;
    itd_world_update(s, ch, 1, itd_entity(&e1, "a", false), NULL);
    itd_world_update(s, ch, 2, itd_entity(&e2, "b", false), NULL);
    itd_world_update(s, ch, 1, itd_entity(&gone, "", true), NULL);
    /* A late subscriber's first fan-out is the master state: entity 1 is gone. */
    it_conn_t *late = it_client();
    itd_sub_opts(s, late, ch, &o, 1);
    w = itd_next_data(late, ch, URL_WORLD, &chanqtest__entity_world__descriptor);
    assert_string_equal(w->name, "world");
    assert_int_equal(w->n_entities, 1);
    assert_int_equal(w->entities[0]->key, 2);
    assert_string_equal(w->entities[0]->value->label, "b");
    chanqtest__entity_world__free_unpacked(w, NULL);

    /* The masked subscriber never sees entities, and sees the name change. */
    itd_world_update(s, ch, 0, NULL, "world2");
    for (;;) {
        w = itd_next_data(masked, ch, URL_WORLD, &chanqtest__entity_world__descriptor);
        assert_int_equal(w->n_entities, 0);
        bool done = strcmp(w->name, "world2") == 0;
        chanqtest__entity_world__free_unpacked(w, NULL);
        if (done)
            break;
    }
    /* ... while the unmasked one got the entities (in one or more windows). */
    int got_b = 0;
    for (;;) {
        w = itd_next_data(full, ch, URL_WORLD, &chanqtest__entity_world__descriptor);
        for (size_t i = 0; i < w->n_entities; i++)
            got_b |= w->entities[i]->key == 2 && strcmp(w->entities[i]->value->label, "b") == 0;
        bool done = strcmp(w->name, "world2") == 0;
        chanqtest__entity_world__free_unpacked(w, NULL);
        if (done)
            break;
    }
    assert_true(got_b);
}

/* A chat list with listSizeLimit 3 and truncateTop keeps the newest three messages. */
static void test_chat_list_limit(void **state)
{
    start();
    it_conn_t *s = it_server();
    Chanqtest__ChatRoom r0 = CHANQTEST__CHAT_ROOM__INIT;
    r0.title = "lobby";
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 3;
    mo.truncatetop = 1;
    uint32_t ch = itd_create_with(s, URL_CHAT, &r0.base, &mo);
    char text[5][8];
    for (int i = 0; i < 5; i++) {
        Chanqtest__ChatMessage m = CHANQTEST__CHAT_MESSAGE__INIT;
        snprintf(text[i], sizeof(text[i]), "m%d", i + 1);
        m.sender = "s";
        m.text = text[i];
        Chanqtest__ChatMessage *ms[1] = {&m};
        Chanqtest__ChatRoom r = CHANQTEST__CHAT_ROOM__INIT;
        r.n_messages = 1;
        r.messages = ms;
        itd_update(s, ch, URL_CHAT, &r.base);
    }
    it_conn_t *c = it_client();
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, c, ch, &o, 1);
    Chanqtest__ChatRoom *r = itd_next_data(c, ch, URL_CHAT, &chanqtest__chat_room__descriptor);
    assert_string_equal(r->title, "lobby");
    assert_int_equal(r->n_messages, 3);
    assert_string_equal(r->messages[0]->text, "m3");
    assert_string_equal(r->messages[2]->text, "m5");
    chanqtest__chat_room__free_unpacked(r, NULL);
}

static void test_update(it_conn_t *c, uint32_t ch, const char *text, uint32_t num)
{
    Testpb__TestChannelDataMessage m = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    m.text = (char *)text;
    m.num = num;
    itd_update(c, ch, URL_TEST, &m.base);
}

/* WRITE_ACCESS from a client, skip-self (default) and skip-first. */
static void test_client_write_skip_self_first(void **state)
{
    start();
    it_conn_t *s = it_server();
    it_conn_t *writer = it_client(), *reader = it_client(), *ro = it_client();
    Testpb__TestChannelDataMessage t0 = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    t0.text = "init";
    uint32_t ch = itd_create_with(s, URL_TEST, &t0.base, NULL);
    Channeldpb__ChannelSubscriptionOptions ow = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    ow.has_dataaccess = 1;
    ow.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS;
    itd_sub_opts(s, writer, ch, &ow, 2);
    Channeldpb__ChannelSubscriptionOptions os = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    os.has_skipfirstfanout = 1;
    os.skipfirstfanout = 1;
    itd_sub_opts(s, reader, ch, &os, 1);
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, ro, ch, &o, 1);

    Testpb__TestChannelDataMessage *t =
        itd_next_data(writer, ch, URL_TEST, &testpb__test_channel_data_message__descriptor);
    assert_string_equal(t->text, "init"); /* the writer's full state */
    testpb__test_channel_data_message__free_unpacked(t, NULL);
    test_update(ro, ch, "denied", 99); /* READ_ACCESS: refused */
    it_log_expect("no write access");
    test_update(writer, ch, "", 5);
    /* skip-first: the reader's first fan-out is the update, not the state */
    t = itd_next_data(reader, ch, URL_TEST, &testpb__test_channel_data_message__descriptor);
    assert_string_equal(t->text, "");
    assert_int_equal(t->num, 5);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
    /* skip-self: the writer next sees only the server's update, not its own */
    test_update(s, ch, "srv", 0);
    t = itd_next_data(writer, ch, URL_TEST, &testpb__test_channel_data_message__descriptor);
    assert_string_equal(t->text, "srv");
    assert_int_equal(t->num, 0);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
    /* the master state holds both: a late subscriber's full state */
    it_conn_t *late = it_client();
    itd_sub_opts(s, late, ch, &o, 1);
    t = itd_next_data(late, ch, URL_TEST, &testpb__test_channel_data_message__descriptor);
    assert_string_equal(t->text, "srv");
    assert_int_equal(t->num, 5);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
}

/* fanOutIntervalMs 0 is clamped: the subscriber gets data and the channel keeps serving. */
static void test_zero_interval_does_not_stall(void **state)
{
    start();
    it_conn_t *s = it_server();
    it_conn_t *fast = it_client(), *other = it_client();
    Testpb__TestChannelDataMessage t0 = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    uint32_t ch = itd_create_with(s, URL_TEST, &t0.base, NULL);
    Channeldpb__ChannelSubscriptionOptions oz = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    oz.has_fanoutintervalms = 1;
    oz.fanoutintervalms = 0;
    assert_int_equal(chanq_sync_sub_to_channel(s->s, 12, ch, fast->id, &oz), 0);
    Channeldpb__SubscribedToChannelResultMessage *sr = it_expect(
        s, MT_SUB, 12, &channeldpb__subscribed_to_channel_result_message__descriptor, NULL);
    assert_int_equal(sr->suboptions->fanoutintervalms, 1); /* clamped */
    chanq_unpack_free(sr);
    it_expect_sub(fast, ch, 0, fast->id, CONN_CLIENT, CT_SUBWORLD, 1);
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, other, ch, &o, 1);
    for (uint32_t i = 1; i <= 20; i++)
        test_update(s, ch, "", i);
    uint32_t last = 0;
    while (last < 20) { /* every update reaches the 0 ms subscriber, in order */
        Testpb__TestChannelDataMessage *t =
            itd_next_data(fast, ch, URL_TEST, &testpb__test_channel_data_message__descriptor);
        assert_true(t->num >= last);
        last = t->num;
        testpb__test_channel_data_message__free_unpacked(t, NULL);
    }
    /* the channel's worker still answers */
    assert_int_equal(chanq_sync_list_channel(s->s, 13, 0, NULL, 0), 0);
    Channeldpb__ListChannelResultMessage *lr =
        it_expect(s, MT_LIST, 13, &channeldpb__list_channel_result_message__descriptor, NULL);
    assert_int_equal(lr->n_channels, 2); /* GLOBAL and ch */
    chanq_unpack_free(lr);
}

/* Full state as raw Any value bytes (len returned), from a new subscriber's first fan-out. */
static size_t full_state_len(it_conn_t *s, uint32_t ch, Testpb__TestChannelDataMessage **ret)
{
    it_conn_t *c = it_client();
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, c, ch, &o, 1);
    chanq_owned_msg_t env;
    Channeldpb__ChannelDataUpdateMessage *u =
        it_expect(c, MT_DATA, 0, &channeldpb__channel_data_update_message__descriptor, &env);
    chanq_owned_msg_done(&env);
    size_t len = u->data->value.len;
    *ret = testpb__test_channel_data_message__unpack(NULL, len, u->data->value.data);
    assert_non_null(*ret);
    chanq_unpack_free(u);
    return len;
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* A channel of type URL_TEST created while the type is unknown, with state "x" then num 1..5
 * concatenated (13 bytes). */
static uint32_t unknown_type_channel(it_conn_t *s)
{
    Testpb__TestChannelDataMessage t0 = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    t0.text = "x";
    uint32_t ch = itd_create_with(s, URL_TEST, &t0.base, NULL);
    for (uint32_t i = 1; i <= 5; i++)
        test_update(s, ch, "", i);
    Testpb__TestChannelDataMessage *t;
    size_t before = full_state_len(s, ch, &t);
    assert_int_equal(before, 3 + 5 * 2); /* "x" then five num fields, concatenated */
    assert_string_equal(t->text, "x");
    assert_int_equal(t->num, 5);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
    return ch;
}

static void expect_compacted(it_conn_t *s, uint32_t ch)
{
    Testpb__TestChannelDataMessage *t;
    size_t after = full_state_len(s, ch, &t);
    assert_int_equal(after, 3 + 2); /* compact: text "x", num 5 */
    assert_string_equal(t->text, "x");
    assert_int_equal(t->num, 5);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
}

/* A channel of a type chanqd does not know yet merges by concatenation (correct, not compact);
 * once the type's descriptor set is loaded (SIGHUP), its state is compacted. */
static void test_type_known_later_is_compacted(void **state)
{
    const char *types = it_file("types.fds", ""); /* an empty descriptor set at first */
    it_start("--channel-data-types", types, NULL);
    it_conn_t *s = it_server();
    uint32_t ch = unknown_type_channel(s);
    copy_file(getenv("TESTPB_FDS"), types);
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("now known; state compacted");
    expect_compacted(s, ch);
}

/* Item 12: every SIGHUP reload is applied, however many came before (the 65th used to be
 * ignored silently), and a burst of them is merged into reloads without losing the last. */
static void test_reload_after_100_sighups(void **state)
{
    const char *types = it_file("types.fds", "");
    it_start("--channel-data-types", types, NULL);
    it_conn_t *s = it_server();
    uint32_t ch = unknown_type_channel(s);
    it_log_mark();
    for (int i = 0; i < 100; i++) { /* one at a time: 100 reloads really run */
        assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
        it_log_expect("SIGHUP: reloading");
        it_log_expect("channel data types: 0 message types loaded");
    }
    for (int i = 0; i < 100; i++) /* a burst: merged, in as many reloads as it takes */
        assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    copy_file(getenv("TESTPB_FDS"), types);
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("now known; state compacted");
    expect_compacted(s, ch);
    assert_true(cq_testsrv_running(it_srv()));
}

/* --max-channel-data-size, known type: an update whose merge would grow the state beyond the
 * limit is refused (logged); the state is what it was, and later updates still apply. */
static void test_data_size_limit_known_type(void **state)
{
    it_start("--channel-data-types", getenv("TESTPB_FDS"), "--max-channel-data-size", "4k", NULL);
    it_conn_t *s = it_server();
    Testpb__TestChannelDataMessage t0 = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    t0.text = "x";
    uint32_t ch = itd_create_with(s, URL_TEST, &t0.base, NULL);
    char big[5000];
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    it_log_mark();
    test_update(s, ch, big, 1);
    char line[160];
    snprintf(line, sizeof(line),
             "update of channel %u (" URL_TEST ") refused: a configured limit was reached", ch);
    it_log_expect(line);
    test_update(s, ch, "", 7);
    Testpb__TestChannelDataMessage *t;
    assert_int_equal(full_state_len(s, ch, &t), 3 + 2); /* text "x", num 7 */
    assert_string_equal(t->text, "x");
    assert_int_equal(t->num, 7);
    testpb__test_channel_data_message__free_unpacked(t, NULL);
}

/* --max-channel-data-size, unknown type (merged by concatenation, so it only grows): the update
 * that would take the state beyond the limit is refused. */
static void test_data_size_limit_unknown_type(void **state)
{
    it_start("--channel-data-types", it_file("types.fds", ""), "--max-channel-data-size", "4k",
             NULL);
    it_conn_t *s = it_server();
    Testpb__TestChannelDataMessage t0 = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
    t0.text = "x";
    uint32_t ch = itd_create_with(s, URL_TEST, &t0.base, NULL); /* 3 bytes */
    char txt[3][1501];
    for (int i = 0; i < 3; i++) {
        memset(txt[i], 'a' + i, 1500);
        txt[i][1500] = '\0';
    }
    it_log_mark();
    test_update(s, ch, txt[0], 0); /* + 1503: 1506 */
    test_update(s, ch, txt[1], 0); /* + 1503: 3009 */
    test_update(s, ch, txt[2], 0); /* + 1503: 4512 > 4096, refused */
    char line[160];
    snprintf(line, sizeof(line),
             "update of channel %u (" URL_TEST ") refused: a configured limit was reached", ch);
    it_log_expect(line);
    assert_int_equal(it_log_count("refused: a configured limit was reached"), 0);
    Testpb__TestChannelDataMessage *t;
    assert_int_equal(full_state_len(s, ch, &t), 3 + 2 * 1503);
    assert_string_equal(t->text, txt[1]); /* the last applied update wins */
    testpb__test_channel_data_message__free_unpacked(t, NULL);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_type_known_later_is_compacted), IT_TEST(test_reload_after_100_sighups),
    IT_TEST(test_entities_merge_remove_masks),   IT_TEST(test_chat_list_limit),
    IT_TEST(test_client_write_skip_self_first),  IT_TEST(test_zero_interval_does_not_stall),
    IT_TEST(test_data_size_limit_known_type),    IT_TEST(test_data_size_limit_unknown_type),
};

IT_MAIN(tests)
