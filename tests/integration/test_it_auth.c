/* test_it_auth.c - AUTH (§1.7, §3.4): providers, failures, retries, limits, timeout, copies
 * to the GLOBAL owner, and AUTH on a channel other than 0. */
#include "it_common.h"

#include <string.h>

static const char TOKENS[] = "{\"alice\": \"secret\", \"bob\": \"pw\"}\n";

static int try_auth(it_conn_t *c, const char *pit, const char *lt, uint32_t *id)
{
    int res = -1;
    uint32_t cid = 0;
    int r = chanq_sync_auth(c->s, pit, lt, IT_TIMEOUT_MS, &res, &cid);
    if (r < 0)
        print_error("auth(%s): %s\n", pit, cq_strerror(r));
    assert_int_equal(r, 0);
    if (id)
        *id = cid;
    return res;
}

/* The client proves it is authenticated (FSM in OPEN) by reaching the GLOBAL owner. */
static void prove_open(it_conn_t *g, it_conn_t *c, const char *payload)
{
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 150, payload, strlen(payload)), 0);
    it_expect_user(g, 0, 150, 0, 0, c->id, payload);
}

static void expect_auth_copy(it_conn_t *g, uint32_t conn_id, int result)
{
    chanq_owned_msg_t env;
    Channeldpb__AuthResultMessage *ar =
        it_expect(g, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(ar->result, result);
    assert_int_equal(ar->connid, conn_id);
    chanq_unpack_free(ar);
}

static void test_auth_dev_provider(void **state)
{
    it_start(NULL);
    it_conn_t *c = it_connect(false, NULL);
    uint32_t id = 0;
    assert_int_equal(try_auth(c, "anyone", "anything", &id), 0);
    assert_int_equal(id, 1);
    assert_int_equal(chanq_client_conn_id(chanq_sync_client(c->s)), 1);
    it_conn_t *c2 = it_connect(false, NULL);
    assert_int_equal(try_auth(c2, "", "", &id), 0);
    assert_int_equal(id, 2);
}

static void test_auth_file_provider(void **state)
{
    const char *tok = it_file("tokens.json", TOKENS);
    it_start("--auth-provider", "file", "--auth-token-file", tok, NULL);
    it_conn_t *g = it_gowner();
    g->skip_copies = false;

    /* success */
    it_conn_t *a = it_connect(false, NULL);
    uint32_t id = 0;
    assert_int_equal(try_auth(a, "alice", "secret", &id), 0);
    a->id = id;
    assert_true(id > g->id);
    expect_auth_copy(g, a->id, 0);
    prove_open(g, a, "alice-in");

    /* INVALID_PIT, INVALID_LT, then a retry that succeeds on the same connection */
    it_conn_t *b = it_connect(false, NULL);
    assert_int_equal(try_auth(b, "mallory", "pw", NULL), 1);
    uint32_t bid = a->id + 1;
    expect_auth_copy(g, bid, 1);
    assert_int_equal(try_auth(b, "bob", "wrong", NULL), 2);
    expect_auth_copy(g, bid, 2);
    assert_int_equal(try_auth(b, "bob", "pw", &id), 0);
    assert_int_equal(id, bid);
    b->id = id;
    expect_auth_copy(g, bid, 0);
    prove_open(g, b, "bob-in");

    /* An unauthenticated client's user message is refused by the FSM (INIT allows 1 only). */
    it_conn_t *u = it_connect(false, NULL);
    assert_int_equal(try_auth(u, "alice", "nope", NULL), 2);
    expect_auth_copy(g, bid + 1, 2);
    assert_int_equal(chanq_sync_user_msg(u->s, 0, 0, 150, "early", 5), 0);
    prove_open(g, a, "after-early"); /* the owner's next message is not "early" */
    it_log_expect("not allowed by the connection's FSM state");
}

static void test_auth_max_failed(void **state)
{
    const char *tok = it_file("tokens.json", TOKENS);
    it_start("--auth-provider", "file", "--auth-token-file", tok, "--max-failed-auth", "2", NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *c = it_connect(false, NULL);
    assert_int_equal(try_auth(c, "alice", "bad1", NULL), 2);
    /* second failure: the result is still sent, then the connection is closed */
    assert_int_equal(try_auth(c, "nobody", "bad2", NULL), 1);
    it_expect_closed(c);
    it_log_expect("too many failed AUTH attempts");
    assert_int_equal(cq_testsrv_metric_wait_ge(it_srv(), "auth_failed", 2, IT_TIMEOUT_MS), 2);
    /* others keep working */
    it_conn_t *ok = it_connect(false, NULL);
    uint32_t id;
    assert_int_equal(try_auth(ok, "alice", "secret", &id), 0);
    ok->id = id;
    g->skip_copies = true;
    prove_open(g, ok, "still-fine");
}

static void test_auth_timeout(void **state)
{
    it_start("--auth-timeout-ms", "300", NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *c = it_client();
    it_conn_t *silent = it_connect(false, NULL);
    it_expect_closed(silent);
    it_log_expect("not authenticated within auth-timeout-ms");
    assert_int_equal(cq_testsrv_metric_wait_ge(it_srv(), "auth_timeout_closed", 1, IT_TIMEOUT_MS),
                     1);
    /* the authenticated connections were not affected */
    prove_open(g, c, "alive");
}

static void test_auth_wrong_channel_closes(void **state)
{
    it_start(NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *c = it_connect(false, NULL);
    Channeldpb__AuthMessage am = CHANNELDPB__AUTH_MESSAGE__INIT;
    am.playeridentifiertoken = "pit";
    am.logintoken = "lt";
    assert_int_equal(chanq_sync_send(c->s, 5, 0, 1, MT_AUTH, &am.base), 0);
    it_expect_closed(c);
    it_log_expect("AUTH must be sent on channel 0");
    /* also on GLOBAL's neighbour ids after authentication: AUTH again on channel 0 is fine */
    it_conn_t *ok = it_client();
    prove_open(g, ok, "fine");
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_auth_dev_provider),         IT_TEST(test_auth_file_provider),
    IT_TEST(test_auth_max_failed),           IT_TEST(test_auth_timeout),
    IT_TEST(test_auth_wrong_channel_closes),
};

IT_MAIN(tests)
