/* test_mgr_hist.c - the console charts' history (src/mgr/hist.c): rounds and gaps, the window
 * wrapping, a series forgotten after a whole window of gaps, the bounds on series and keys, and
 * the prefix filter. */
#include "hist.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* h's JSON (prefix) as compact text, checked against want. */
static void expect_json(const mgr_hist_t *h, const char *prefix, const char *want)
{
    json_t *o = cq__mgr_hist_json(h, prefix);
    assert_non_null(o);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
    json_decref(o);
    assert_non_null(s);
    if (strcmp(s, want) != 0)
        fail_msg("got  %s\nwant %s", s, want);
    free(s);
}

static void test_rounds_and_gaps(void **state)
{
    (void)state;
    mgr_hist_t *h = cq__mgr_hist_new(3, 8);
    assert_non_null(h);
    assert_int_equal(cq__mgr_hist_put(h, "a", 1), -EINVAL); /* no round open */
    cq__mgr_hist_begin(h, 100);
    assert_int_equal(cq__mgr_hist_put(h, "a", 1), 0);
    assert_int_equal(cq__mgr_hist_put(h, "a", 2), 0); /* replaces it in the round */
    cq__mgr_hist_begin(h, 200);
    assert_int_equal(cq__mgr_hist_put(h, "b", 5), 0);
    expect_json(h, NULL, "{\"series\":{\"a\":[2.0,null],\"b\":[null,5.0]},\"t\":[100,200]}");
    cq__mgr_hist_begin(h, 300);
    assert_int_equal(cq__mgr_hist_put(h, "a", 3), 0);
    cq__mgr_hist_begin(h, 400); /* the window keeps 3 rounds: 100 leaves */
    assert_int_equal(cq__mgr_hist_put(h, "a", 4), 0);
    expect_json(h, NULL,
                "{\"series\":{\"a\":[null,3.0,4.0],\"b\":[5.0,null,null]},\"t\":[200,300,400]}");
    cq__mgr_hist_begin(h, 500); /* b's last value leaves with 200: forgotten */
    expect_json(h, NULL, "{\"series\":{\"a\":[3.0,4.0,null]},\"t\":[300,400,500]}");
    assert_int_equal(cq__mgr_hist_count(h), 1);
    cq__mgr_hist_free(h);
    cq__mgr_hist_free(NULL);
}

static void test_bounds_and_prefix(void **state)
{
    (void)state;
    mgr_hist_t *h = cq__mgr_hist_new(4, 2);
    cq__mgr_hist_begin(h, 10);
    assert_int_equal(cq__mgr_hist_put(h, "topic/x/produce", 1.5), 0);
    assert_int_equal(cq__mgr_hist_put(h, "shard/1/behind_ms", 7), 0);
    assert_int_equal(cq__mgr_hist_put(h, "server/3/sockets", 1), -ENOSPC); /* over 2 series */
    assert_int_equal(cq__mgr_hist_refused(h), 1);
    assert_int_equal(cq__mgr_hist_put(h, "topic/x/produce", 2.5), 0); /* a known one still */
    char key[CQ_MGR_HIST_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    assert_int_equal(cq__mgr_hist_put(h, key, 1), -EINVAL);
    assert_int_equal(cq__mgr_hist_put(h, "", 1), -EINVAL);
    expect_json(h, "topic/", "{\"series\":{\"topic/x/produce\":[2.5]},\"t\":[10]}");
    expect_json(h, "nothing/", "{\"series\":{},\"t\":[10]}");
    cq__mgr_hist_free(h);
    assert_null(cq__mgr_hist_new(1, 8)); /* a window needs 2 rounds */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounds_and_gaps),
        cmocka_unit_test(test_bounds_and_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
