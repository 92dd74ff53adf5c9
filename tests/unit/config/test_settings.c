/* test_settings.c - cq_settings: GLOBAL fallback, ACL None for missing types, clamps, errors,
 * shipped and embedded files. */
#include "test_util.h"

#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cq_settings_t *load_source(const char *rel)
{
    char err[256], path[1024];
    cq_settings_t *s = NULL;
    snprintf(path, sizeof(path), "%s/%s", CQ_SOURCE_ROOT, rel);
    int r = cq_settings_load_file(path, &s, err, sizeof(err));
    if (r != 0)
        fail_msg("%s: %d %s", rel, r, err);
    return s;
}

static cq_settings_t *load_str(const char *json)
{
    char err[256];
    cq_settings_t *s = NULL;
    int r = cq_settings_load_json(json, strlen(json), &s, err, sizeof(err));
    if (r != 0)
        fail_msg("%d %s", r, err);
    assert_string_equal(err, "");
    return s;
}

static void expect_error(const char *json, int code, const char *msg)
{
    char err[256];
    cq_settings_t *sentinel = (cq_settings_t *)&err, *s = sentinel;
    int r = cq_settings_load_json(json, strlen(json), &s, err, sizeof(err));
    assert_int_equal(r, code);
    assert_ptr_equal(s, sentinel);
    if (msg)
        assert_string_equal(err, msg);
}

static void expect(const cq_settings_t *s, uint32_t type, uint32_t tick, uint32_t fan,
                   int32_t delay, bool remove, bool lost, int sub, int unsub, int rm)
{
    const cq_chan_settings_t *cs = cq_settings_get(s, type);
    assert_non_null(cs);
    if (cs->tick_interval_ms != tick || cs->fanout_interval_ms != fan ||
        cs->fanout_delay_ms != delay || cs->remove_after_owner_removed != remove ||
        cs->send_owner_lost_and_recovered != lost || cs->acl.sub != sub || cs->acl.unsub != unsub ||
        cs->acl.remove != rm)
        fail_msg("type %u: got %u/%u/%d remove=%d lost=%d acl=%d/%d/%d", type, cs->tick_interval_ms,
                 cs->fanout_interval_ms, cs->fanout_delay_ms, cs->remove_after_owner_removed,
                 cs->send_owner_lost_and_recovered, cs->acl.sub, cs->acl.unsub, cs->acl.remove);
}

static void test_builtin_defaults(void **state)
{
    (void)state;
    cq_settings_t *s = cq_settings_new_default();
    assert_non_null(s);
    expect(s, 1, 10, 20, 0, false, false, 0, 0, 0);
    expect(s, 2, 10, 20, 0, false, false, 0, 0, 0);
    expect(s, 0, 10, 20, 0, false, false, 0, 0, 0);
    expect(s, UINT32_MAX, 10, 20, 0, false, false, 0, 0, 0);
    assert_null(cq_settings_get(s, 1)->data_msg_full_name);
    assert_null(cq_settings_free(s));
    assert_null(cq_settings_free(NULL));
    s = load_str("{}");
    expect(s, 1, 10, 20, 0, false, false, 0, 0, 0);
    cq_settings_free(s);
}

static void test_shipped_hifi(void **state)
{
    (void)state;
    cq_settings_t *s = load_source("config/channel_settings_hifi.json");
    expect(s, 1, 20, 20, 0, false, true, 3, 3, 0);
    expect(s, 2, 20, 20, 0, true, true, 2, 2, 2);
    expect(s, 3, 20, 20, 0, true, true, 3, 3, 2);
    expect(s, 4, 20, 20, 0, true, true, 3, 3, 2);
    expect(s, 5, 20, 20, 0, true, false, 3, 3, 2);
    /* Missing types: GLOBAL's settings, ACL None. */
    expect(s, 0, 20, 20, 0, false, true, 0, 0, 0);
    expect(s, 100, 20, 20, 0, false, true, 0, 0, 0);
    cq_settings_free(s);
}

static void test_shipped_lofi(void **state)
{
    (void)state;
    cq_settings_t *s = load_source("config/channel_settings_lofi.json");
    expect(s, 1, 100, 200, 0, false, false, 0, 0, 0);
    expect(s, 2, 100, 200, 0, true, false, 0, 0, 0);
    expect(s, 3, 100, 200, 0, true, false, 0, 0, 0);
    expect(s, 4, 100, 200, 0, false, false, 0, 0, 0);
    cq_settings_free(s);
}

static void test_embedded_settings(void **state)
{
    (void)state;
    size_t len;
    char err[256];
    char *file = tu_read_source("config/channel_settings_hifi.json", &len);
    assert_int_equal(cq_embedded_settings_len, len);
    assert_memory_equal(cq_embedded_settings, file, len);
    assert_int_equal(cq_embedded_settings[len], '\0');
    free(file);
    cq_settings_t *s = NULL;
    assert_int_equal(
        cq_settings_load_json(cq_embedded_settings, cq_embedded_settings_len, &s, err, sizeof(err)),
        0);
    expect(s, 2, 20, 20, 0, true, true, 2, 2, 2);
    cq_settings_free(s);
}

static void test_fallback_and_clamp(void **state)
{
    (void)state;
    cq_settings_t *s = load_str(
        "{\"1\":{\"TickIntervalMs\":0,\"DefaultFanOutIntervalMs\":0,\"DefaultFanOutDelayMs\":-5,"
        "\"SendOwnerLostAndRecovered\":true,\"ACLSettings\":{\"Sub\":3},"
        "\"DataMsgFullName\":\"x.GlobalData\"},"
        "\"7\":{\"TickIntervalMs\":4294967295,\"DefaultFanOutIntervalMs\":50,"
        "\"DefaultFanOutDelayMs\":2147483647,\"RemoveChannelAfterOwnerRemoved\":true,"
        "\"DataMsgFullName\":\"\"},"
        "\"5\":{}}");
    expect(s, 1, 1, 1, -5, false, true, 3, 0, 0);
    assert_string_equal(cq_settings_get(s, 1)->data_msg_full_name, "x.GlobalData");
    expect(s, 7, UINT32_MAX, 50, INT32_MAX, true, false, 0, 0, 0);
    assert_null(cq_settings_get(s, 7)->data_msg_full_name);
    expect(s, 5, 1, 1, 0, false, false, 0, 0, 0); /* present but empty: Go zero values */
    expect(s, 9, 1, 1, -5, false, true, 0, 0, 0); /* missing: GLOBAL, ACL None */
    assert_string_equal(cq_settings_get(s, 9)->data_msg_full_name, "x.GlobalData");
    cq_settings_free(s);
}

static void test_case_insensitive_keys(void **state)
{
    (void)state;
    cq_settings_t *s = load_str("{\"2\":{\"tickintervalms\":30,\"DEFAULTFANOUTINTERVALMS\":40,"
                                "\"aclsettings\":{\"sub\":1,\"UNSUB\":2,\"Remove\":3},"
                                "\"DataMsgFullName\":\"p.Private\"}}");
    expect(s, 2, 30, 40, 0, false, false, 1, 2, 3);
    assert_string_equal(cq_settings_get(s, 2)->data_msg_full_name, "p.Private");
    expect(s, 1, 10, 20, 0, false, false, 0, 0, 0); /* no "1": built-in GLOBAL */
    expect(s, 3, 10, 20, 0, false, false, 0, 0, 0);
    assert_null(cq_settings_get(s, 3)->data_msg_full_name);
    cq_settings_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{\"2\":{\"ACLSettings\":{\"Sub\":4}}}", CQ_ECONFIG,
                 "channel type \"2\": ACLSettings.Sub: 4 is not an ACL level (0 None, 1 OwnerOnly, "
                 "2 OwnerAndGlobalOwner, 3 Any)");
    expect_error("{\"2\":{\"ACLSettings\":{\"Remove\":-1}}}", CQ_ECONFIG,
                 "channel type \"2\": ACLSettings.Remove: -1 is not an ACL level (0 None, 1 "
                 "OwnerOnly, 2 OwnerAndGlobalOwner, 3 Any)");
    expect_error("{\"2\":{\"ACLSettings\":{\"Unsub\":\"Any\"}}}", CQ_ECONFIG,
                 "channel type \"2\": ACLSettings.Unsub must be an integer in 0..3");
    expect_error("{\"2\":{\"ACLSettings\":{\"Sub\":1,\"All\":1}}}", CQ_ECONFIG,
                 "channel type \"2\": ACLSettings: unknown key \"All\"");
    expect_error("{\"2\":{\"ACLSettings\":3}}", CQ_ECONFIG,
                 "channel type \"2\": ACLSettings must be an object {\"Sub\", \"Unsub\", "
                 "\"Remove\"}");
    expect_error("{\"GLOBAL\":{}}", CQ_ECONFIG,
                 "channel type \"GLOBAL\": keys must be channel type numbers (0..4294967295)");
    expect_error("{\"\":{}}", CQ_ECONFIG,
                 "channel type \"\": keys must be channel type numbers (0..4294967295)");
    expect_error("{\"-1\":{}}", CQ_ECONFIG,
                 "channel type \"-1\": keys must be channel type numbers (0..4294967295)");
    expect_error("{\"4294967296\":{}}", CQ_ECONFIG,
                 "channel type \"4294967296\": keys must be channel type numbers (0..4294967295)");
    expect_error("{\"1\":{},\"01\":{}}", CQ_ECONFIG, "channel type \"01\": type 1 is given twice");
    expect_error("{\"1\":{\"TickIntervalMs\":-1}}", CQ_ECONFIG,
                 "channel type \"1\": TickIntervalMs: -1 is out of range 0..4294967295");
    expect_error("{\"1\":{\"DefaultFanOutIntervalMs\":4294967296}}", CQ_ECONFIG,
                 "channel type \"1\": DefaultFanOutIntervalMs: 4294967296 is out of range "
                 "0..4294967295");
    expect_error("{\"1\":{\"TickIntervalMs\":1.5}}", CQ_ECONFIG,
                 "channel type \"1\": TickIntervalMs must be an integer in 0..4294967295");
    expect_error("{\"1\":{\"DefaultFanOutDelayMs\":2147483648}}", CQ_ECONFIG,
                 "channel type \"1\": DefaultFanOutDelayMs: 2147483648 is out of range "
                 "-2147483648..2147483647");
    expect_error("{\"1\":{\"RemoveChannelAfterOwnerRemoved\":1}}", CQ_ECONFIG,
                 "channel type \"1\": RemoveChannelAfterOwnerRemoved must be true or false");
    expect_error("{\"1\":{\"SendOwnerLostAndRecovered\":\"yes\"}}", CQ_ECONFIG,
                 "channel type \"1\": SendOwnerLostAndRecovered must be true or false");
    expect_error("{\"1\":{\"DataMsgFullName\":5}}", CQ_ECONFIG,
                 "channel type \"1\": DataMsgFullName must be a string");
    expect_error("{\"1\":{\"TickMs\":5}}", CQ_ECONFIG,
                 "channel type \"1\": unknown key \"TickMs\"");
    expect_error("{\"1\":{\"TickIntervalMs\":5,\"tickIntervalMs\":6}}", CQ_ECONFIG,
                 "channel type \"1\": key \"TickIntervalMs\" given twice");
    expect_error("{\"1\":[]}", CQ_ECONFIG, "channel type \"1\": must be an object");
    expect_error("[]", CQ_ECONFIG, "the top level must be a JSON object keyed by channel type");
    expect_error("{\"1\":{}", CQ_EJSON, NULL);
    expect_error("{\"1\":{},\"1\":{}}", CQ_EJSON, NULL);
    /* An error after an entry with a name: no leak (checked by ASan/LSan and the counter). */
    expect_error("{\"1\":{\"DataMsgFullName\":\"a.B\"},\"2\":{\"TickIntervalMs\":-1}}", CQ_ECONFIG,
                 "channel type \"2\": TickIntervalMs: -1 is out of range 0..4294967295");
}

static void test_files(void **state)
{
    (void)state;
    char err[256];
    cq_settings_t *s = NULL;
    assert_int_equal(cq_settings_load_file("/nonexistent/s.json", &s, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "/nonexistent/s.json: No such file or directory");
    char *path = tu_write_temp("{\"3\": {\"ACLSettings\": {\"Sub\": 9}}}");
    assert_int_equal(cq_settings_load_file(path, &s, err, sizeof(err)), CQ_ECONFIG);
    assert_null(s);
    assert_true(strstr(err, path) == err);
    assert_non_null(strstr(err, ": channel type \"3\": ACLSettings.Sub: 9 is not an ACL level"));
    tu_remove_temp(path);
}

static void test_settings_alloc_failures(void **state)
{
    (void)state;
    size_t len;
    char *json = tu_read_source("config/channel_settings_hifi.json", &len);
    const char *named = "{\"1\":{\"DataMsgFullName\":\"a.B\"},\"5\":{\"DataMsgFullName\":\"c.D\"}}";
    const char *inputs[] = {json, named};
    size_t lens[] = {len, strlen(named)};
    long live = tu_alloc_live();
    for (int i = 0; i < 2; i++) {
        for (int n = 1;; n++) {
            cq_settings_t *s = NULL;
            tu_fail_alloc_at(n);
            int r = cq_settings_load_json(inputs[i], lens[i], &s, NULL, 0);
            tu_fail_alloc_at(0);
            if (r == 0) {
                cq_settings_free(s);
                break;
            }
            assert_int_equal(r, -ENOMEM);
            assert_int_equal(tu_alloc_live(), live);
        }
    }
    tu_fail_alloc_at(1);
    assert_null(cq_settings_new_default());
    tu_fail_alloc_at(0);
    assert_int_equal(tu_alloc_live(), live);
    free(json);
}

const struct CMUnitTest test_settings_cases[] = {
    cmocka_unit_test(test_builtin_defaults),
    cmocka_unit_test(test_shipped_hifi),
    cmocka_unit_test(test_shipped_lofi),
    cmocka_unit_test(test_embedded_settings),
    cmocka_unit_test(test_fallback_and_clamp),
    cmocka_unit_test(test_case_insensitive_keys),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_files),
    cmocka_unit_test(test_settings_alloc_failures),
};
const size_t test_settings_count = sizeof(test_settings_cases) / sizeof(test_settings_cases[0]);
