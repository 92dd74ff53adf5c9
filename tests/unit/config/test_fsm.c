/* test_fsm.c - cq_fsm: channeld's fsm_test, parse errors, shipped and embedded files. */
#include "test_util.h"

#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_fsm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cq_fsm_t *load_source(const char *rel)
{
    char err[256], path[1024];
    cq_fsm_t *fsm = NULL;
    snprintf(path, sizeof(path), "%s/%s", CQ_SOURCE_ROOT, rel);
    int r = cq_fsm_load_file(path, &fsm, err, sizeof(err));
    if (r != 0)
        fail_msg("%s: %d %s", rel, r, err);
    assert_string_equal(err, "");
    return fsm;
}

static cq_fsm_t *load_str(const char *json)
{
    char err[256];
    cq_fsm_t *fsm = NULL;
    int r = cq_fsm_load_json(json, strlen(json), &fsm, err, sizeof(err));
    if (r != 0)
        fail_msg("%d %s", r, err);
    return fsm;
}

/* Loads json expecting failure with code and exactly msg; *ret must stay untouched. */
static void expect_error(const char *json, int code, const char *msg)
{
    char err[256];
    cq_fsm_t *sentinel = (cq_fsm_t *)&err, *fsm = sentinel;
    int r = cq_fsm_load_json(json, strlen(json), &fsm, err, sizeof(err));
    assert_int_equal(r, code);
    assert_ptr_equal(fsm, sentinel);
    if (msg)
        assert_string_equal(err, msg);
}

/* Whether exactly the types in [lo, hi] (within 0..70000) are allowed in state. */
static void assert_allows_only(const cq_fsm_t *fsm, int state, const uint32_t (*ranges)[2],
                               size_t n)
{
    for (uint32_t t = 0; t <= 70000; t++) {
        bool want = false;
        for (size_t i = 0; i < n; i++)
            want = want || (t >= ranges[i][0] && t <= ranges[i][1]);
        if (cq_fsm_allows(fsm, state, t) != want)
            fail_msg("state %d type %u: allowed=%d, want %d", state, t, !want, want);
    }
}

/* ---- channeld's pkg/fsm/fsm_test.go --------------------------------------------------- */

static void test_load(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_conn_fsm_test.json");
    assert_int_equal(cq_fsm_state_count(fsm), 3);
    assert_int_equal(cq_fsm_init_state(fsm), 0);
    assert_string_equal(cq_fsm_state_name(fsm, cq_fsm_init_state(fsm)), "INIT");
    /* Three transitions: each moves somewhere else. */
    assert_int_equal(cq_fsm_transition(fsm, 0, 1), 1);
    assert_int_equal(cq_fsm_transition(fsm, 1, 20), 2);
    assert_int_equal(cq_fsm_transition(fsm, 2, 22), 1);
    cq_fsm_free(fsm);
}

static void test_change_by_name(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_conn_fsm_test.json");
    assert_int_equal(cq_fsm_state_index(fsm, "INIT"), 0);
    assert_int_equal(cq_fsm_state_index(fsm, "OPEN"), 1);
    assert_int_equal(cq_fsm_state_index(fsm, "HANDOVER"), 2);
    assert_int_equal(cq_fsm_state_index(fsm, "open"), -1);
    assert_int_equal(cq_fsm_state_index(fsm, "NOPE"), -1);
    assert_string_equal(cq_fsm_state_name(fsm, 2), "HANDOVER");
    assert_null(cq_fsm_state_name(fsm, 3));
    assert_null(cq_fsm_state_name(fsm, -1));
    assert_null(cq_fsm_free(fsm));
    assert_null(cq_fsm_free(NULL));
}

static void test_transition_and_allowance(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_conn_fsm_test.json");
    int s = cq_fsm_init_state(fsm);
    assert_true(cq_fsm_allows(fsm, s, 1));
    assert_false(cq_fsm_allows(fsm, s, 2));
    assert_false(cq_fsm_allows(fsm, s, 21));
    s = cq_fsm_transition(fsm, s, 1);
    assert_string_equal(cq_fsm_state_name(fsm, s), "OPEN");
    assert_false(cq_fsm_allows(fsm, s, 1));
    assert_true(cq_fsm_allows(fsm, s, 2));
    assert_false(cq_fsm_allows(fsm, s, 9));
    assert_false(cq_fsm_allows(fsm, s, 100));
    assert_int_equal(cq_fsm_transition(fsm, s, 2), s); /* no transition on 2 */
    s = cq_fsm_transition(fsm, s, 20);
    assert_string_equal(cq_fsm_state_name(fsm, s), "HANDOVER");
    assert_true(cq_fsm_allows(fsm, s, 21));
    assert_false(cq_fsm_allows(fsm, s, 2));
    assert_false(cq_fsm_allows(fsm, s, 100));
    s = cq_fsm_transition(fsm, s, 22);
    assert_string_equal(cq_fsm_state_name(fsm, s), "OPEN");
    cq_fsm_free(fsm);
}

static void test_exact_sets_of_test_file(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_conn_fsm_test.json");
    const uint32_t init[][2] = {{1, 1}}, open[][2] = {{2, 8}, {10, 10}, {20, 20}},
                   handover[][2] = {{21, 22}};
    assert_allows_only(fsm, 0, init, 1);
    assert_allows_only(fsm, 1, open, 3);
    assert_allows_only(fsm, 2, handover, 1);
    assert_false(cq_fsm_allows(fsm, 3, 1)); /* no such state */
    assert_false(cq_fsm_allows(fsm, -1, 1));
    cq_fsm_free(fsm);
}

static void test_next_state(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_conn_fsm_test.json");
    assert_int_equal(cq_fsm_next_state(fsm, 0), 1);
    assert_int_equal(cq_fsm_next_state(fsm, 1), 2);
    assert_int_equal(cq_fsm_next_state(fsm, 2), 2);
    cq_fsm_free(fsm);
}

/* ---- shipped files -------------------------------------------------------------------- */

static void test_shipped_server_authoratative(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/server_authoratative_fsm.json");
    const uint32_t init[][2] = {{1, 1}}, open[][2] = {{2, 65535}};
    assert_int_equal(cq_fsm_state_count(fsm), 2);
    assert_int_equal(cq_fsm_init_state(fsm), 0);
    assert_allows_only(fsm, 0, init, 1);
    assert_allows_only(fsm, 1, open, 1);
    assert_false(cq_fsm_allows(fsm, 1, 65536));
    assert_false(cq_fsm_allows(fsm, 1, UINT32_MAX));
    assert_int_equal(cq_fsm_transition(fsm, 0, 1), 0); /* AUTH moves by next_state only */
    assert_int_equal(cq_fsm_next_state(fsm, 0), 1);
    cq_fsm_free(fsm);
}

static void test_shipped_client_non_authoratative(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/client_non_authoratative_fsm.json");
    /* 90-92: chanq's bridge resume and acknowledge (doc/protocol.md) */
    const uint32_t init[][2] = {{1, 1}}, open[][2] = {{7, 7}, {90, 92}, {99, 65535}};
    assert_allows_only(fsm, 0, init, 1);
    assert_allows_only(fsm, 1, open, 3);
    cq_fsm_free(fsm);
}

static void test_shipped_client_authoratative(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_source("config/client_authoratative_fsm.json");
    const uint32_t init[][2] = {{1, 1}}, open[][2] = {{3, 8}, {15, 65535}};
    assert_allows_only(fsm, 0, init, 1);
    assert_allows_only(fsm, 1, open, 2);
    cq_fsm_free(fsm);
}

static void expect_embedded(const char *data, size_t len, const char *rel)
{
    size_t flen;
    char *file = tu_read_source(rel, &flen);
    assert_int_equal(len, flen);
    assert_memory_equal(data, file, flen);
    assert_int_equal(data[len], '\0');
    free(file);
}

static void test_embedded_fsms(void **state)
{
    (void)state;
    char err[256];
    cq_fsm_t *fsm = NULL;
    expect_embedded(cq_embedded_client_fsm, cq_embedded_client_fsm_len,
                    "config/client_non_authoratative_fsm.json");
    expect_embedded(cq_embedded_server_fsm, cq_embedded_server_fsm_len,
                    "config/server_authoratative_fsm.json");
    assert_int_equal(cq_fsm_load_json(cq_embedded_client_fsm, cq_embedded_client_fsm_len, &fsm, err,
                                      sizeof(err)),
                     0);
    assert_true(cq_fsm_allows(fsm, 1, 7));
    fsm = cq_fsm_free(fsm);
    assert_int_equal(cq_fsm_load_json(cq_embedded_server_fsm, cq_embedded_server_fsm_len, &fsm, err,
                                      sizeof(err)),
                     0);
    assert_true(cq_fsm_allows(fsm, 1, 2));
    cq_fsm_free(fsm);
}

/* ---- format details ------------------------------------------------------------------- */

static void test_init_state_and_lists(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_str("{\"States\":[{\"Name\":\"A\",\"MsgTypeWhitelist\":\" 1 , 3 - 5,"
                             "65535 \"},{\"Name\":\"B\",\"MsgTypeWhitelist\":\"0-65535\","
                             "\"MsgTypeBlacklist\":\"0-9,11-65535\"},{\"Name\":\"C\"}],"
                             "\"InitState\":\"B\"}");
    const uint32_t a[][2] = {{1, 1}, {3, 5}, {65535, 65535}}, b[][2] = {{10, 10}};
    assert_int_equal(cq_fsm_init_state(fsm), 1);
    assert_allows_only(fsm, 0, a, 3);
    assert_allows_only(fsm, 1, b, 1);
    assert_allows_only(fsm, 2, NULL, 0);
    cq_fsm_free(fsm);
    /* Keys match case-insensitively (Go's encoding/json); null and "" mean "not given". */
    fsm = load_str("{\"states\":[{\"name\":\"X\",\"msgtypewhitelist\":\"2\",\"MsgTypeBlacklist\":"
                   "null}],\"initstate\":\"\",\"transitions\":null}");
    assert_int_equal(cq_fsm_init_state(fsm), 0);
    assert_true(cq_fsm_allows(fsm, 0, 2));
    cq_fsm_free(fsm);
}

static void test_transition_to_self_and_unknown(void **state)
{
    (void)state;
    cq_fsm_t *fsm = load_str("{\"States\":[{\"Name\":\"A\"},{\"Name\":\"B\"}],\"Transitions\":"
                             "[{\"FromState\":\"A\",\"ToState\":\"A\",\"MsgType\":5},"
                             "{\"FromState\":\"B\",\"ToState\":\"A\",\"MsgType\":4294967295}]}");
    assert_int_equal(cq_fsm_transition(fsm, 0, 5), 0);
    assert_int_equal(cq_fsm_transition(fsm, 1, 5), 1);
    assert_int_equal(cq_fsm_transition(fsm, 1, UINT32_MAX), 0);
    assert_int_equal(cq_fsm_transition(fsm, 7, 5), 7);
    cq_fsm_free(fsm);
}

static void test_errors_lists(void **state)
{
    (void)state;
#define ST(list) "{\"States\":[{\"Name\":\"OPEN\",\"MsgTypeWhitelist\":\"" list "\"}]}"
    expect_error(ST("5-2"), CQ_ECONFIG, "state \"OPEN\": bad range \"5-2\" in MsgTypeWhitelist");
    expect_error(ST("1, x"), CQ_ECONFIG, "state \"OPEN\": bad number \"x\" in MsgTypeWhitelist");
    expect_error(ST("1,-3"), CQ_ECONFIG, "state \"OPEN\": missing number in MsgTypeWhitelist");
    expect_error(ST("1,,2"), CQ_ECONFIG, "state \"OPEN\": empty item in MsgTypeWhitelist");
    expect_error(ST("1,"), CQ_ECONFIG, "state \"OPEN\": empty item in MsgTypeWhitelist");
    expect_error(ST("1-2-3"), CQ_ECONFIG, "state \"OPEN\": bad number \"2-3\" in MsgTypeWhitelist");
    expect_error(ST("70000"), CQ_ECONFIG,
                 "state \"OPEN\": 70000 in MsgTypeWhitelist is above the largest message type "
                 "65535");
    expect_error(ST("99-99999999999999999999"), CQ_ECONFIG,
                 "state \"OPEN\": 99999999999999999999 in MsgTypeWhitelist is above the largest "
                 "message type 65535");
#undef ST
    expect_error("{\"States\":[{\"Name\":\"S\",\"MsgTypeBlacklist\":\"9a\"}]}", CQ_ECONFIG,
                 "state \"S\": bad number \"9a\" in MsgTypeBlacklist");
    expect_error("{\"States\":[{\"Name\":\"S\",\"MsgTypeWhitelist\":5}]}", CQ_ECONFIG,
                 "state \"S\": MsgTypeWhitelist must be a string");
}

static void test_errors_structure(void **state)
{
    (void)state;
    expect_error("{}", CQ_ECONFIG, "no states: States must be a non-empty array");
    expect_error("{\"States\":[]}", CQ_ECONFIG, "no states: States must be a non-empty array");
    expect_error("{\"States\":{}}", CQ_ECONFIG, "no states: States must be a non-empty array");
    expect_error("[]", CQ_ECONFIG, "the top level must be a JSON object");
    expect_error("{\"States\":[{\"Name\":\"A\"},{\"MsgTypeWhitelist\":\"1\"}]}", CQ_ECONFIG,
                 "States[1]: missing Name (a non-empty string)");
    expect_error("{\"States\":[{\"Name\":\"\"}]}", CQ_ECONFIG,
                 "States[0]: missing Name (a non-empty string)");
    expect_error("{\"States\":[7]}", CQ_ECONFIG, "States[0]: must be an object");
    expect_error("{\"States\":[{\"Name\":\"A\"},{\"Name\":\"A\"}]}", CQ_ECONFIG,
                 "States[1]: duplicate state name \"A\"");
    expect_error("{\"States\":[{\"Name\":\"A\",\"Whitelist\":\"1\"}]}", CQ_ECONFIG,
                 "States[0]: unknown key \"Whitelist\"");
    expect_error("{\"States\":[{\"Name\":\"A\",\"name\":\"B\"}]}", CQ_ECONFIG,
                 "States[0]: key \"Name\" given twice");
    expect_error("{\"States\":[{\"Name\":\"A\"}],\"Extra\":1}", CQ_ECONFIG,
                 "top level: unknown key \"Extra\"");
    expect_error("{\"States\":[{\"Name\":\"A\"}],\"InitState\":\"B\"}", CQ_ECONFIG,
                 "InitState \"B\" is not a state");
    expect_error("{\"States\":[{\"Name\":\"A\"}],\"InitState\":1}", CQ_ECONFIG,
                 "InitState must be a string");
}

static void test_too_many_states(void **state)
{
    (void)state;
    char *json = malloc(16 * 1024);
    size_t n = (size_t)sprintf(json, "{\"States\":[");
    for (int i = 0; i < CQ_FSM_MAX_STATES; i++)
        n += (size_t)sprintf(json + n, "%s{\"Name\":\"S%d\"}", i ? "," : "", i);
    strcpy(json + n, "]}");
    cq_fsm_t *fsm = load_str(json);
    assert_int_equal(cq_fsm_state_count(fsm), CQ_FSM_MAX_STATES);
    assert_int_equal(cq_fsm_next_state(fsm, CQ_FSM_MAX_STATES - 1), CQ_FSM_MAX_STATES - 1);
    cq_fsm_free(fsm);
    strcpy(json + n, ",{\"Name\":\"ONE_TOO_MANY\"}]}");
    expect_error(json, CQ_ECONFIG, "too many states (257, at most 256)");
    free(json);
}

static void test_errors_transitions(void **state)
{
    (void)state;
#define TR(t) "{\"States\":[{\"Name\":\"A\"},{\"Name\":\"B\"}],\"Transitions\":[" t "]}"
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"NOPE\",\"MsgType\":1}"), CQ_ECONFIG,
                 "Transitions[0]: unknown state \"NOPE\" in ToState");
    expect_error(TR("{\"FromState\":\"C\",\"ToState\":\"A\",\"MsgType\":1}"), CQ_ECONFIG,
                 "Transitions[0]: unknown state \"C\" in FromState");
    expect_error(TR("{\"ToState\":\"A\",\"MsgType\":1}"), CQ_ECONFIG,
                 "Transitions[0]: missing FromState (a state name)");
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"B\",\"MsgType\":\"1\"}"), CQ_ECONFIG,
                 "Transitions[0]: MsgType must be an integer in 0..4294967295");
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"B\",\"MsgType\":-1}"), CQ_ECONFIG,
                 "Transitions[0]: MsgType must be an integer in 0..4294967295");
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"B\"}"), CQ_ECONFIG,
                 "Transitions[0]: MsgType must be an integer in 0..4294967295");
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"B\",\"MsgType\":3},"
                    "{\"FromState\":\"A\",\"ToState\":\"A\",\"MsgType\":3}"),
                 CQ_ECONFIG, "Transitions[1]: a transition from \"A\" on 3 is already defined");
    expect_error(TR("{\"FromState\":\"A\",\"ToState\":\"B\",\"MsgType\":3,\"Note\":1}"), CQ_ECONFIG,
                 "Transitions[0]: unknown key \"Note\"");
    expect_error(TR("1"), CQ_ECONFIG, "Transitions[0]: must be an object");
#undef TR
    expect_error("{\"States\":[{\"Name\":\"A\"}],\"Transitions\":{}}", CQ_ECONFIG,
                 "Transitions must be an array");
}

static void test_errors_json_and_files(void **state)
{
    (void)state;
    char err[256];
    cq_fsm_t *fsm = NULL;
    expect_error("{\"States\": [", CQ_EJSON, NULL);
    assert_int_equal(cq_fsm_load_json("{\"States\":[", 11, &fsm, err, sizeof(err)), CQ_EJSON);
    assert_true(strncmp(err, "line 1 column ", 14) == 0);
    expect_error("{\"States\":[{\"Name\":\"A\"}],\"States\":[]}", CQ_EJSON, NULL);
    /* Not NUL-terminated: only len bytes are read. */
    assert_int_equal(
        cq_fsm_load_json("{\"States\":[{\"Name\":\"A\"}]}XYZ", 25, &fsm, err, sizeof(err)), 0);
    fsm = cq_fsm_free(fsm);
    assert_int_equal(cq_fsm_load_file("/nonexistent/fsm.json", &fsm, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "/nonexistent/fsm.json: No such file or directory");
    char *path = tu_write_temp("{\"States\":[{\"Name\":\"OPEN\",\"MsgTypeWhitelist\":\"5-2\"}]}");
    assert_int_equal(cq_fsm_load_file(path, &fsm, err, sizeof(err)), CQ_ECONFIG);
    char want[512];
    snprintf(want, sizeof(want), "%s: state \"OPEN\": bad range \"5-2\" in MsgTypeWhitelist", path);
    assert_string_equal(err, want);
    assert_null(fsm);
    /* A NULL error buffer is fine. */
    assert_int_equal(cq_fsm_load_file(path, &fsm, NULL, 0), CQ_ECONFIG);
    tu_remove_temp(path);
}

static void test_fsm_alloc_failures(void **state)
{
    (void)state;
    size_t len;
    char *json = tu_read_source("config/server_conn_fsm_test.json", &len);
    long live = tu_alloc_live();
    for (int n = 1;; n++) {
        char err[256];
        cq_fsm_t *fsm = NULL;
        tu_fail_alloc_at(n);
        int r = cq_fsm_load_json(json, len, &fsm, err, sizeof(err));
        tu_fail_alloc_at(0);
        if (r == 0) {
            assert_true(n > 3);
            cq_fsm_free(fsm);
            break;
        }
        assert_int_equal(r, -ENOMEM);
        assert_null(fsm);
        assert_int_equal(tu_alloc_live(), live);
    }
    assert_int_equal(tu_alloc_live(), live);
    free(json);
}

const struct CMUnitTest test_fsm_cases[] = {
    cmocka_unit_test(test_load),
    cmocka_unit_test(test_change_by_name),
    cmocka_unit_test(test_transition_and_allowance),
    cmocka_unit_test(test_exact_sets_of_test_file),
    cmocka_unit_test(test_next_state),
    cmocka_unit_test(test_shipped_server_authoratative),
    cmocka_unit_test(test_shipped_client_non_authoratative),
    cmocka_unit_test(test_shipped_client_authoratative),
    cmocka_unit_test(test_embedded_fsms),
    cmocka_unit_test(test_init_state_and_lists),
    cmocka_unit_test(test_transition_to_self_and_unknown),
    cmocka_unit_test(test_errors_lists),
    cmocka_unit_test(test_errors_structure),
    cmocka_unit_test(test_too_many_states),
    cmocka_unit_test(test_errors_transitions),
    cmocka_unit_test(test_errors_json_and_files),
    cmocka_unit_test(test_fsm_alloc_failures),
};
const size_t test_fsm_count = sizeof(test_fsm_cases) / sizeof(test_fsm_cases[0]);
