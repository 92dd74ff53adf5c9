/* pkg/base: the error table, logging, clocks, the allocator seam, and fail-N loops. */
#include "test_pkg.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_map.h"
#include "cq_wire.h"
#include "test_alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- cq_err ---------------------------------------------------------------------------- */

typedef struct err_row {
    int code;
    const char *name;
    const char *msg;
} err_row_t;

/* The table is generated from the same X-macro, so adding a code adds a row here. */
static const err_row_t err_rows[] = {
#define ROW(name, val, msg) {CQ_##name, "CQ_" #name, msg},
    CQ_ERR_MAP(ROW)
#undef ROW
};

void test_err_every_code(void **state)
{
    (void)state;
    size_t n = sizeof(err_rows) / sizeof(err_rows[0]);
    assert_true(n >= 21);
    for (size_t i = 0; i < n; i++) {
        const err_row_t *r = &err_rows[i];
        assert_true(r->code <= -1000);
        assert_string_equal(cq_strerror(r->code), r->msg);
        assert_string_equal(cq_errname(r->code), r->name);
        assert_string_not_equal(cq_strerror(r->code), "unknown error");
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(r->code, err_rows[j].code);
            assert_string_not_equal(r->name, err_rows[j].name);
        }
    }
    /* A few codes whose values other modules and the docs rely on. */
    assert_int_equal(CQ_EMAGIC, -1000);
    assert_int_equal(CQ_EZEROLEN, -1001);
    assert_int_equal(CQ_ETOOBIG, -1002);
    assert_int_equal(CQ_EDECODE, -1003);
    assert_int_equal(CQ_ESNAPPY, -1004);
}

void test_err_errno_and_unknown(void **state)
{
    (void)state;
    assert_string_equal(cq_strerror(0), "success");
    assert_string_equal(cq_errname(0), "OK");
    assert_string_equal(cq_strerror(-ENOMEM), strerror(ENOMEM));
    assert_string_equal(cq_errname(-ENOMEM), "ENOMEM");
    assert_string_equal(cq_errname(-EINVAL), "EINVAL");
    assert_string_equal(cq_errname(-ECONNRESET), "ECONNRESET");
    /* Not errno and not in the table. */
    const int odd[] = {1, 77, -1999, -5000, -2147483647 - 1};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        assert_string_equal(cq_strerror(odd[i]), "unknown error");
        assert_string_equal(cq_errname(odd[i]), "UNKNOWN");
    }
    /* errno values glibc has no name for still get a non-NULL name. */
    assert_non_null(cq_errname(-999));
    assert_non_null(cq_strerror(-999));
}

/* ---- cq_log ---------------------------------------------------------------------------- */

typedef struct log_cap {
    int lines;
    cq_log_level_t lvl;
    char topic[32];
    char line[2048];
} log_cap_t;

static void cap_sink(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    log_cap_t *c = ud;
    c->lines++;
    c->lvl = lvl;
    snprintf(c->topic, sizeof(c->topic), "%s", topic);
    snprintf(c->line, sizeof(c->line), "%s", line);
}

static int side_effects;

static int bump(void)
{
    return ++side_effects;
}

void test_log_sink_and_levels(void **state)
{
    (void)state;
    log_cap_t c = {0};
    cq_log_level_t saved = cq_log_get_level();
    cq_log_set_sink(cap_sink, &c);

    cq_log_set_level(CQ_LOG_WARN);
    assert_int_equal(cq_log_get_level(), CQ_LOG_WARN);
    CQ_INFO("test", "dropped %d", 1);
    assert_int_equal(c.lines, 0);
    CQ_WARN("framing", "kept %d/%s", 2, "x");
    assert_int_equal(c.lines, 1);
    assert_int_equal(c.lvl, CQ_LOG_WARN);
    assert_string_equal(c.topic, "framing");
    assert_string_equal(c.line, "kept 2/x");
    CQ_ERROR("wire", "err");
    assert_int_equal(c.lines, 2);
    assert_int_equal(c.lvl, CQ_LOG_ERROR);

    /* CQ_DEBUG must not even evaluate its arguments when disabled. */
    side_effects = 0;
    CQ_DEBUG("test", "%d", bump());
    assert_int_equal(side_effects, 0);
    assert_int_equal(c.lines, 2);
    cq_log_set_level(CQ_LOG_DEBUG);
    CQ_DEBUG("test", "%d", bump());
    assert_int_equal(side_effects, 1);
    assert_int_equal(c.lines, 3);
    assert_string_equal(c.line, "1");

    /* OFF is a threshold, not a level one can log at. */
    cq_log(CQ_LOG_OFF, "test", "never");
    assert_int_equal(c.lines, 3);
    cq_log_set_level(CQ_LOG_OFF);
    CQ_ERROR("test", "never");
    assert_int_equal(c.lines, 3);

    /* Long lines are truncated, not overflowed. */
    cq_log_set_level(CQ_LOG_INFO);
    char big[1500];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CQ_INFO("test", "%s", big);
    assert_int_equal(c.lines, 4);
    assert_true(strlen(c.line) > 0 && strlen(c.line) < sizeof(big) - 1);

    cq_log_set_sink(NULL, NULL);
    cq_log_set_level(saved);
}

void test_log_parse_level(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        cq_log_level_t lvl;
    } ok[] = {{"debug", CQ_LOG_DEBUG}, {"DEBUG", CQ_LOG_DEBUG}, {"-1", CQ_LOG_DEBUG},
              {"info", CQ_LOG_INFO},   {"0", CQ_LOG_INFO},      {"Warn", CQ_LOG_WARN},
              {"1", CQ_LOG_WARN},      {"error", CQ_LOG_ERROR}, {"2", CQ_LOG_ERROR},
              {"3", CQ_LOG_ERROR},     {"off", CQ_LOG_OFF}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        cq_log_level_t l = CQ_LOG_OFF;
        if (ok[i].lvl == CQ_LOG_OFF)
            l = CQ_LOG_DEBUG;
        assert_int_equal(cq_log_parse_level(ok[i].s, &l), 0);
        assert_int_equal(l, ok[i].lvl);
    }
    const char *bad[] = {"", "verbose", "4", "debugx", " info"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cq_log_level_t l = CQ_LOG_WARN;
        assert_int_equal(cq_log_parse_level(bad[i], &l), -EINVAL);
        assert_int_equal(l, CQ_LOG_WARN); /* ret_* untouched on failure */
    }
}

/* ---- cq_clock -------------------------------------------------------------------------- */

void test_clock(void **state)
{
    (void)state;
    uint64_t prev = cq_clock_mono_ns();
    for (int i = 0; i < 1000; i++) {
        uint64_t now = cq_clock_mono_ns();
        assert_true(now >= prev);
        prev = now;
    }
    uint64_t ns = cq_clock_mono_ns();
    uint64_t ms = cq_clock_mono_ms();
    uint64_t ns2 = cq_clock_mono_ns();
    assert_true(ms >= ns / 1000000u && ms <= ns2 / 1000000u);
    /* After 2020-01-01 and before 2100-01-01. */
    int64_t u = cq_clock_unix_ns();
    assert_true(u > 1577836800LL * 1000000000LL);
    assert_true(u < 4102444800LL * 1000000000LL);
}

/* ---- cq_alloc -------------------------------------------------------------------------- */

void test_alloc_basics(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    char *s = cq_strdup("channeld");
    assert_non_null(s);
    assert_string_equal(s, "channeld");
    char *t = cq_strndup("chanqd!", 5);
    assert_string_equal(t, "chanq");
    unsigned char *z = cq_calloc(16, 4);
    assert_non_null(z);
    for (int i = 0; i < 64; i++)
        assert_int_equal(z[i], 0);
    void *zero = cq_malloc(0);
    assert_non_null(zero); /* size 0 still gives a unique pointer */
    assert_int_equal(test_alloc_live(), 4);
    z = cq_realloc(z, 4096);
    assert_non_null(z);
    assert_int_equal(test_alloc_live_bytes(), 9 + 6 + 4096 + 1);

    /* n * size overflowing is refused before reaching the allocator. */
    unsigned long calls = test_alloc_calls();
    assert_null(cq_calloc(SIZE_MAX / 2, 3));
    assert_int_equal(test_alloc_calls(), calls);

    cq_free(NULL);
    cq_free(s);
    cq_free(t);
    cq_free(z);
    cq_free(zero);
    assert_int_equal(test_alloc_live(), 0);
    assert_int_equal(test_alloc_live_bytes(), 0);

    /* cq_grow: nothing while there is room, doubling from `first`, contents kept, and a
     * failure leaves the array as it was. */
    uint32_t *arr = NULL, cap = 0;
    assert_int_equal(cq_grow(&arr, &cap, 0, sizeof(*arr), 2), 0);
    assert_int_equal(cap, 2);
    arr[0] = 7;
    arr[1] = 8;
    assert_int_equal(cq_grow(&arr, &cap, 1, sizeof(*arr), 2), 0);
    assert_int_equal(cap, 2);
    assert_int_equal(cq_grow(&arr, &cap, 2, sizeof(*arr), 2), 0);
    assert_int_equal(cap, 4);
    assert_int_equal(arr[0], 7);
    assert_int_equal(arr[1], 8);
    uint32_t big = UINT32_MAX / 2 + 1;
    assert_int_equal(cq_grow(&arr, &big, big, sizeof(*arr), 2), -ENOMEM);
    assert_int_equal(big, UINT32_MAX / 2 + 1);
    cq_free(arr);

    /* A failing allocator reaches every wrapper. */
    test_alloc_install(1, true);
    assert_null(cq_malloc(8));
    assert_null(cq_calloc(1, 8));
    assert_null(cq_strdup("x"));
    assert_int_equal(test_alloc_failed(), 3);
    test_alloc_remove();

    /* NULL restores libc. */
    void *p = cq_malloc(32);
    assert_non_null(p);
    free(p);
}

/* ---- fail-N loops ---------------------------------------------------------------------- */

#define FAILN_KEYS 300u

static void *val_of(uint32_t k)
{
    return (void *)(uintptr_t)(k * 8u + 8u);
}

/* Inserts keys 0..FAILN_KEYS-1 (growing from 0 to 512 slots) with allocation N failing once,
 * and retries a failed put: every failure must be a clean -ENOMEM that leaves the map intact. */
void test_failn_map_put(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1;; n++) {
        cq_map_t m;
        cq_map_init(&m);
        test_alloc_install(n, false);
        int failures = 0;
        for (uint32_t k = 0; k < FAILN_KEYS; k++) {
            int r = cq_map_put(&m, k * 2654435761u, val_of(k));
            if (r < 0) {
                failures++;
                assert_int_equal(r, -ENOMEM);
                assert_int_equal(cq_map_count(&m), k);
                assert_null(cq_map_get(&m, k * 2654435761u));
                for (uint32_t j = 0; j < k; j++)
                    assert_ptr_equal(cq_map_get(&m, j * 2654435761u), val_of(j));
                r = cq_map_put(&m, k * 2654435761u, val_of(k));
                assert_int_equal(r, 0);
            }
        }
        assert_int_equal(cq_map_count(&m), FAILN_KEYS);
        for (uint32_t j = 0; j < FAILN_KEYS; j++)
            assert_ptr_equal(cq_map_get(&m, j * 2654435761u), val_of(j));
        bool injected = test_alloc_failed() > 0;
        assert_int_equal(failures, injected ? 1 : 0);
        cq_map_done(&m);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
        if (!injected)
            break;
    }
    /* 8, 16, ..., 512 slots: seven grows, so the loop must have run past all of them. */
    assert_int_equal(n, 8);
}

/* Same with every allocation from N on failing: stop at the first failure, check, clean up. */
void test_failn_map_put_sticky(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1;; n++) {
        cq_map_t m;
        cq_map_init(&m);
        test_alloc_install(n, true);
        uint32_t k;
        int r = 0;
        for (k = 0; k < FAILN_KEYS; k++) {
            r = cq_map_put(&m, k, val_of(k));
            if (r < 0)
                break;
        }
        if (r < 0) {
            assert_int_equal(r, -ENOMEM);
            assert_int_equal(cq_map_count(&m), k);
            for (uint32_t j = 0; j < k; j++)
                assert_ptr_equal(cq_map_get(&m, j), val_of(j));
            /* Replacing an existing key never allocates, so it still works. */
            if (k > 0) {
                assert_int_equal(cq_map_put(&m, 0, val_of(99)), 0);
                assert_ptr_equal(cq_map_get(&m, 0), val_of(99));
            }
        }
        cq_map_done(&m);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
        if (r == 0)
            break;
    }
    assert_int_equal(n, 8);
}

void test_failn_record_msg(void **state)
{
    (void)state;
    Channeldpb__AuthMessage am = CHANNELDPB__AUTH_MESSAGE__INIT;
    am.playeridentifiertoken = "test";
    am.logintoken = "test";
    long bufs = cq_buf_live();
    unsigned long n;
    cq_buf_t *b = NULL;
    for (n = 1; n < 100; n++) {
        test_alloc_install(n, true);
        b = cq_wire_record_msg(0, 0, 1, 1, &am.base);
        if (b)
            break;
        assert_int_equal(test_alloc_live(), 0);
        assert_int_equal(cq_buf_live(), bufs);
        test_alloc_remove();
    }
    assert_non_null(b);
    assert_int_equal(n, 2); /* exactly one allocation: the record buffer */
    assert_int_equal(cq_buf_live(), bufs + 1);
    assert_int_equal(b->len, 20);
    cq_buf_unref(b);
    assert_int_equal(test_alloc_live(), 0);
    assert_int_equal(cq_buf_live(), bufs);
    test_alloc_remove();

    /* cq_wire_record_raw the same way. */
    static const uint8_t body[] = {0x08, 0x07, 0x12, 0x02, 0x68, 0x69};
    cq_mp_t mp = {.msg_type = 100, .body = body, .body_len = sizeof(body)};
    for (n = 1; n < 100; n++) {
        test_alloc_install(n, true);
        b = cq_wire_record_raw(&mp);
        if (b)
            break;
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
    assert_int_equal(n, 2);
    assert_int_equal(b->len, 12);
    cq_buf_unref(b);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}
