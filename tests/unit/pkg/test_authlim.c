/* test_authlim.c - pkg/auth/cq_authlim: the per-address failure budget (count, block, backoff
 * doubling and its reset, the window, eviction), the failure-log rate limit, the metrics text
 * and the address helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_authlim.h"

#include <stdio.h>
#include <string.h>

static cq_authlim_t *mk(uint32_t max, uint32_t window, uint32_t backoff, size_t addrs)
{
    cq_authlim_opts_t o = {max, window, backoff, addrs};
    cq_authlim_t *l = cq_authlim_new(&o);
    assert_non_null(l);
    return l;
}

static void test_budget_blocks_at_n(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(3, 1000, 500, 0);
    assert_false(cq_authlim_failed(l, "10.0.0.1:4000", 0));
    assert_false(cq_authlim_failed(l, "10.0.0.1:4001", 1)); /* ports do not matter */
    assert_false(cq_authlim_blocked(l, "10.0.0.1:4002", CQ_AUTHLIM_CHANNEL, 2));
    assert_true(cq_authlim_failed(l, "10.0.0.1:4003", 3)); /* the 3rd blocks */
    assert_true(cq_authlim_blocked(l, "10.0.0.1:1", CQ_AUTHLIM_CHANNEL, 3));
    assert_true(cq_authlim_blocked(l, "10.0.0.1:1", CQ_AUTHLIM_MQ, 502));
    assert_false(cq_authlim_blocked(l, "10.0.0.2:1", CQ_AUTHLIM_CHANNEL, 4));   /* others are not */
    assert_false(cq_authlim_blocked(l, "10.0.0.1:1", CQ_AUTHLIM_CHANNEL, 503)); /* ended */
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_authlim_metrics_append(l, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_refused_total{port=\"channel\"} 1\n"));
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_refused_total{port=\"mq\"} 1\n"));
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_refused_total{port=\"mqhttp\"} 0\n"));
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_blocks_total 1\n"));
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_tracked 1\n"));
    cq_sbuf_done(&b);
    cq_authlim_free(l);
}

/* A block in a row doubles; quiet for a window after a block ends resets the backoff. */
static void test_backoff_doubles_and_resets(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(1, 1000, 100, 0);
    assert_true(cq_authlim_failed(l, "1.2.3.4", 0)); /* blocked 0..100 */
    assert_true(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, 99));
    assert_false(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, 100));
    assert_true(cq_authlim_failed(l, "1.2.3.4", 150)); /* blocked 150..350 */
    assert_true(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, 349));
    assert_false(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, 350));
    uint64_t t = 360;
    for (int i = 2; i < 10; i++) { /* then 400, 800, 1600, 3200, 6400, 6400 ...: capped */
        assert_true(cq_authlim_failed(l, "1.2.3.4", t));
        uint64_t want = 100u * (i >= 6 ? CQ_AUTHLIM_BACKOFF_MAX : 1u << i);
        assert_true(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, t + want - 1));
        assert_false(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, t + want));
        if (i == 9) { /* quiet for the window after the block ended: back to 100 */
            assert_true(cq_authlim_failed(l, "1.2.3.4", t + want + 1001));
            assert_false(cq_authlim_blocked(l, "1.2.3.4", CQ_AUTHLIM_CHANNEL, t + want + 1101));
        }
        t += want + 10; /* within the window of the block's end: the backoff goes on */
    }
    cq_authlim_free(l);
}

/* Failures further apart than the window never add up. */
static void test_window(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(2, 1000, 100, 0);
    assert_false(cq_authlim_failed(l, "::1", 0));
    assert_false(cq_authlim_failed(l, "::1", 1001));
    assert_true(cq_authlim_failed(l, "[::1]:9", 2000)); /* within the window of the last */
    cq_authlim_free(l);
}

static void test_disabled_and_null(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(0, 1000, 100, 0);
    for (int i = 0; i < 100; i++)
        assert_false(cq_authlim_failed(l, "1.1.1.1", 0));
    assert_false(cq_authlim_blocked(l, "1.1.1.1", CQ_AUTHLIM_CHANNEL, 0));
    cq_authlim_free(l);
    assert_false(cq_authlim_failed(NULL, "1.1.1.1", 0));
    assert_false(cq_authlim_blocked(NULL, "1.1.1.1", CQ_AUTHLIM_CHANNEL, 0));
    assert_null(cq_authlim_free(NULL));
}

/* A full table evicts the unblocked address idle longest; blocked ones stay. */
static void test_eviction(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(2, 100000, 100000, 3);
    assert_false(cq_authlim_failed(l, "a", 10));
    assert_false(cq_authlim_failed(l, "b", 5));
    assert_false(cq_authlim_failed(l, "c", 1));
    assert_true(cq_authlim_failed(l, "c", 2)); /* c blocked: never the victim while others aren't */
    assert_false(cq_authlim_failed(l, "d", 20)); /* evicts b (oldest unblocked) */
    assert_true(cq_authlim_failed(l, "a", 21));  /* a kept its count */
    assert_false(cq_authlim_failed(l, "b", 22)); /* b starts over (evicts d) */
    assert_true(cq_authlim_blocked(l, "c", CQ_AUTHLIM_CHANNEL, 30));
    cq_authlim_free(l);
}

static void test_log_rate(void **state)
{
    (void)state;
    cq_authlim_t *l = mk(5, 1000, 100, 0);
    char note[64];
    for (int i = 0; i < CQ_AUTHLIM_LOG_PER_S; i++) {
        assert_true(cq_authlim_log_allow(l, 5000, note, sizeof(note)));
        assert_string_equal(note, "");
    }
    for (int i = 0; i < 7; i++)
        assert_false(cq_authlim_log_allow(l, 5999, note, sizeof(note)));
    assert_true(cq_authlim_log_allow(l, 6000, note, sizeof(note)));
    assert_string_equal(note, " (7 similar lines suppressed)");
    assert_true(cq_authlim_log_allow(l, 6000, note, sizeof(note)));
    assert_string_equal(note, "");
    cq_authlim_free(l);
}

static void test_token_eq(void **state)
{
    (void)state;
    assert_true(cq_token_eq("secret", "secret"));
    assert_true(cq_token_eq("", NULL));
    assert_true(cq_token_eq(NULL, NULL));
    assert_false(cq_token_eq("secret", "secreT"));
    assert_false(cq_token_eq("secret", "secret2"));
    assert_false(cq_token_eq("secret2", "secret"));
    assert_false(cq_token_eq("s", ""));
    assert_false(cq_token_eq(NULL, "x"));
}

static void test_peer_helpers(void **state)
{
    (void)state;
    char h[64];
    assert_int_equal(cq_peer_host("1.2.3.4:5", h, sizeof(h)), 7);
    assert_string_equal(h, "1.2.3.4");
    cq_peer_host("[::1]:80", h, sizeof(h));
    assert_string_equal(h, "::1");
    cq_peer_host("fe80::1", h, sizeof(h));
    assert_string_equal(h, "fe80::1");
    cq_peer_host(":12108", h, sizeof(h));
    assert_string_equal(h, "");
    static const char *const yes[] = {"127.0.0.1:1", "127.9.8.7",    "[::1]:5",
                                      "::1",         "localhost:80", "[::ffff:127.0.0.1]:3",
                                      "LOCALHOST"};
    static const char *const no[] = {":12108",      "0.0.0.0:1", "[::]:1",
                                     "192.0.2.2:7", "128.0.0.1", "fake",
                                     "example:80",  "",          "[::ffff:10.0.0.1]:3"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        assert_true(cq_peer_is_loopback(yes[i]));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        assert_false(cq_peer_is_loopback(no[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_blocks_at_n),
        cmocka_unit_test(test_backoff_doubles_and_resets),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_disabled_and_null),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_log_rate),
        cmocka_unit_test(test_peer_helpers),
        cmocka_unit_test(test_token_eq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
