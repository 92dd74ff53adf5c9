/* Unit tests of the overload policy (src/chandata/cq_coarsen.c) on a manual clock: when the
 * level rises and falls, and the stretch table of cq_coarsen.h, value by value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_coarsen.h"

/* Rises: lateness at or above up_ms (30) for sustain_ms (100) raises the level; then one more
 * per step_ms (250) while it lasts, never past the top. */
static void test_rise(void **state)
{
    (void)state;
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    assert_int_equal(co.level, 0);
    assert_int_equal(cq_coarsen_observe(&co, 0, 29), 0);    /* just under up_ms */
    assert_int_equal(cq_coarsen_observe(&co, 1, 30), 0);    /* the late run starts at 1 */
    assert_int_equal(cq_coarsen_observe(&co, 100, 119), 0); /* under burst_ms */
    assert_int_equal(co.level, 0);
    assert_int_equal(cq_coarsen_observe(&co, 101, 30), 1);
    assert_int_equal(co.level, 1);
    assert_int_equal(co.changed_ms, 101);
    assert_int_equal(cq_coarsen_observe(&co, 350, 500), 0); /* 249 ms after: too soon */
    assert_int_equal(co.level, 1);
    assert_int_equal(cq_coarsen_observe(&co, 351, 31), 1);
    assert_int_equal(cq_coarsen_observe(&co, 601, 31), 1);
    assert_int_equal(cq_coarsen_observe(&co, 851, 31), 1);
    assert_int_equal(co.level, CQ_COARSEN_MAX);
    assert_int_equal(cq_coarsen_observe(&co, 5000, 999), 0); /* the top */
    assert_int_equal(co.level, CQ_COARSEN_MAX);
    assert_int_equal(co.st.rises, 4);
    assert_int_equal(co.st.falls, 0);
    assert_int_equal(co.last_late, 999);
}

/* One late sample under burst_ms (120) is not overload: a worker descheduled for a moment is
 * on time again at its next sample, and the late run starts over. One at burst_ms is. */
static void test_spike(void **state)
{
    (void)state;
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    for (uint64_t t = 0; t < 5000; t += 200) {
        assert_int_equal(cq_coarsen_observe(&co, t, 119), 0);    /* 119 ms late, once */
        assert_int_equal(cq_coarsen_observe(&co, t + 10, 0), 0); /* then on time */
    }
    assert_int_equal(co.level, 0);
    assert_int_equal(co.st.rises, 0);
    assert_int_equal(cq_coarsen_observe(&co, 6000, 120), 1); /* stood still 120 ms */
    assert_int_equal(cq_coarsen_observe(&co, 6010, 0), 0);
    assert_int_equal(co.level, 1);
}

/* Falls: hold_ms (1000) of samples below down_ms (10) per step; a sample between down and up
 * breaks the calm run, a late one too (and may raise the level again). */
static void test_fall(void **state)
{
    (void)state;
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    assert_int_equal(cq_coarsen_observe(&co, 0, 40), 0);
    assert_int_equal(cq_coarsen_observe(&co, 100, 40), 1);
    assert_int_equal(cq_coarsen_observe(&co, 350, 40), 1);
    assert_int_equal(co.level, 2);
    assert_int_equal(cq_coarsen_observe(&co, 1000, 9), 0); /* calm from 1000 */
    assert_int_equal(cq_coarsen_observe(&co, 1999, 0), 0);
    assert_int_equal(cq_coarsen_observe(&co, 2000, 0), -1);
    assert_int_equal(co.level, 1);
    assert_int_equal(cq_coarsen_observe(&co, 2500, 0), 0);  /* a new run starts at 2500 */
    assert_int_equal(cq_coarsen_observe(&co, 3000, 10), 0); /* not calm: the run is broken */
    assert_int_equal(cq_coarsen_observe(&co, 3100, 0), 0);  /* calm again from 3100 */
    assert_int_equal(cq_coarsen_observe(&co, 4099, 0), 0);
    assert_int_equal(co.level, 1);
    assert_int_equal(cq_coarsen_observe(&co, 4100, 0), -1);
    assert_int_equal(co.level, 0);
    assert_int_equal(cq_coarsen_observe(&co, 9000, 0), 0); /* level 0 stays */
    assert_int_equal(co.st.rises, 2);
    assert_int_equal(co.st.falls, 2);
}

/* A calm run that starts at time 0 on a manual clock counts like any other. */
static void test_fall_from_zero(void **state)
{
    (void)state;
    cq_coarsen_t co;
    cq_coarsen_init(&co, &(cq_coarsen_cfg_t){.up_ms = 5, .hold_ms = 100});
    co.level = 1;
    assert_int_equal(cq_coarsen_observe(&co, 0, 0), 0);
    assert_int_equal(cq_coarsen_observe(&co, 99, 0), 0);
    assert_int_equal(cq_coarsen_observe(&co, 100, 0), -1);
    assert_int_equal(co.cfg.up_ms, 5);
    assert_int_equal(co.cfg.down_ms, CQ_COARSEN_DOWN_MS); /* 0: the default */
    assert_int_equal(co.cfg.step_ms, CQ_COARSEN_STEP_MS);
    assert_int_equal(co.cfg.sustain_ms, CQ_COARSEN_SUSTAIN_MS);
    assert_int_equal(co.cfg.burst_ms, CQ_COARSEN_BURST_MS);
}

/* The table of cq_coarsen.h, value by value: far (>= 100 ms) first, then mid, then near. */
static void test_table(void **state)
{
    (void)state;
    static const uint32_t want[CQ_COARSEN_MAX + 1][3] = {
        {1, 1, 1}, {2, 1, 1}, {4, 2, 1}, {4, 4, 2}, {8, 4, 2},
    };
    static const uint32_t iv[3][2] = {{100, 5000}, {50, 99}, {1, 49}}; /* band edges */
    for (uint32_t l = 0; l <= CQ_COARSEN_MAX; l++)
        for (int b = 0; b < 3; b++)
            for (int e = 0; e < 2; e++)
                assert_int_equal(cq_coarsen_factor(l, iv[b][e]), want[l][b]);
    assert_int_equal(cq_coarsen_factor(99, 100), 8); /* clamped to the top */
}

/* Spans: the interval times the factor, capped at max(interval, 1 s). */
static void test_span(void **state)
{
    (void)state;
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    assert_int_equal(cq_coarsen_span(NULL, 100), 100);
    assert_int_equal(cq_coarsen_span(&co, 100), 100);
    co.level = 4;
    assert_int_equal(cq_coarsen_span(&co, 20), 40);
    assert_int_equal(cq_coarsen_span(&co, 50), 200);
    assert_int_equal(cq_coarsen_span(&co, 100), 800);
    assert_int_equal(cq_coarsen_span(&co, 200), 1000);  /* 1600, capped */
    assert_int_equal(cq_coarsen_span(&co, 3000), 3000); /* never shorter than the interval */
    assert_true(cq_coarsen_merging(&co));
    co.level = 0;
    assert_false(cq_coarsen_merging(&co));
    assert_false(cq_coarsen_merging(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rise),  cmocka_unit_test(test_spike),
        cmocka_unit_test(test_fall),  cmocka_unit_test(test_fall_from_zero),
        cmocka_unit_test(test_table), cmocka_unit_test(test_span),
    };
    return cmocka_run_group_tests_name("coarsen", tests, NULL, NULL);
}
