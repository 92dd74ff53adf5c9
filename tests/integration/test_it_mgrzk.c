/* test_it_mgrzk.c - the manager's ZooKeeper state store (src/mgr/zkstore.c: cq_mgrstore_zk_*)
 * on a real ZooKeeper (run_zk.sh passes CQ_ZK_HOSTS): two managers' stores on one root. Moved
 * from it-coord with the store; tests/unit/mgr/test_mgr_zkstore.c has the rest of its rules
 * over a fake node. Skips without CQ_ZK_HOSTS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define TEST_WAIT_MS 30000
#include "test_wait.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_mgrstore.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SESSION_MS 6000

static const char *g_hosts;

/* ---- the manager's state store (cq_mgrstore_zk_*) -------------------------------------------- */

static atomic_int g_changed; /* watch callbacks seen by store B */

static void on_changed(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* Two managers' stores on one root: the absent document, a create, a load by the other, a CAS
 * conflict each way, and B's watch firing on A's saves (twice: it re-arms itself). */
static void test_mgr_store(void **state)
{
    (void)state;
    const char *root = "/it-mgrstore";
    const cq_mgrstore_ops_t *ops = &cq_mgrstore_zk_ops; /* B goes through the table */
    void *a = NULL, *b = NULL;
    assert_int_equal(cq_mgrstore_zk_new(g_hosts, root, SESSION_MS, &a), 0);
    assert_int_equal(cq_mgrstore_zk_new(g_hosts, root, SESSION_MS, &b), 0);
    char *json = (char *)"x";
    size_t len = 99;
    int64_t ver = 99, nv = 99;
    assert_int_equal(cq_mgrstore_zk_load(a, &json, &len, &ver), 0);
    assert_null(json);
    assert_int_equal(len, 0);
    assert_int_equal(ver, -1);
    atomic_store(&g_changed, 0);
    ops->watch(b, on_changed, &g_changed);
    /* The watch is set by a request of B's session that may still wait for B to connect; B's
     * load answers after it (one session's requests are answered in order), so from here on A's
     * creation fires it. */
    assert_int_equal(ops->load(b, &json, &len, &ver), 0);
    assert_null(json);
    assert_int_equal(ver, -1);

    const char *d1 = "{\"version\":1}";
    assert_int_equal(cq_mgrstore_zk_save(a, d1, strlen(d1), -1, &nv), 0);
    assert_int_equal(nv, 0);
    WAIT_UNTIL(atomic_load(&g_changed) >= 1); /* B learns of the creation */
    assert_int_equal(ops->load(b, &json, &len, &ver), 0);
    assert_int_equal(ver, 0);
    assert_int_equal(len, strlen(d1));
    assert_string_equal(json, d1);
    cq_free(json);
    /* Creating again is a conflict: the document exists. */
    assert_int_equal(ops->save(b, d1, strlen(d1), -1, &nv), CQ_ECONFLICT);
    assert_int_equal(nv, -1);

    const char *d2 = "{\"version\":2}";
    int before = atomic_load(&g_changed);
    assert_int_equal(cq_mgrstore_zk_save(a, d2, strlen(d2), 0, &nv), 0);
    assert_int_equal(nv, 1);
    WAIT_UNTIL(atomic_load(&g_changed) > before); /* the watch was re-armed */
    /* B still believes version 0: its write loses and the document is A's. */
    const char *d3 = "{\"version\":3}";
    assert_int_equal(ops->save(b, d3, strlen(d3), 0, &nv), CQ_ECONFLICT);
    assert_int_equal(ops->load(b, &json, &len, &ver), 0);
    assert_int_equal(ver, 1);
    assert_string_equal(json, d2);
    cq_free(json);
    /* After reloading, B writes; A's stale version now loses. */
    assert_int_equal(ops->save(b, d3, strlen(d3), 1, &nv), 0);
    assert_int_equal(nv, 2);
    assert_int_equal(cq_mgrstore_zk_save(a, d2, strlen(d2), 1, &nv), CQ_ECONFLICT);
    assert_int_equal(cq_mgrstore_zk_load(a, &json, &len, &ver), 0);
    assert_int_equal(ver, 2);
    assert_string_equal(json, d3);
    cq_free(json);
    cq_mgrstore_zk_free(a);
    ops->free(b);
}

int main(void)
{
    g_hosts = getenv("CQ_ZK_HOSTS");
    if (!g_hosts || !*g_hosts) {
        printf("1..0 # SKIP needs CQ_ZK_HOSTS (run_zk.sh sets it)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mgr_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
