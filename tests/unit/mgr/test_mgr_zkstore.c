/* tests/unit/mgr: the manager's ZooKeeper state store (src/mgr/zkstore.c) over a fake one-node
 * client (the cq_zknode_* functions below, a link seam): which node it opens, the parents
 * before a load or a first save, the error mapping, the watch re-armed before the manager hears
 * of a change, and a new session after an expiry. The real node is in it-coord (test_zknode),
 * the store over a real ensemble in it-mgrzk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mgrstore.h"
#include "cq_zknode.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- the fake one-node client --------------------------------------------------------------- */

struct cq_zknode {
    int id;
    cq_zknode_cb_t cb;
    void *arg;
};

static struct {
    char log[1024]; /* "open(/r,mgr/state,10000)=1 mkparents(1) ..." */
    int opened;     /* ids handed out */
    cq_zknode_t *last;
    int open_rc, mkparents_rc, get_rc, create_rc, set_rc;
    const char *doc; /* get's answer */
    int64_t ver;
} g;

static void logf_(const char *fmt, ...)
{
    size_t at = strlen(g.log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.log + at, sizeof g.log - at, fmt, ap);
    va_end(ap);
}

int cq_zknode_open(const char *hosts, const char *root, const char *name, uint32_t session_ms,
                   cq_zknode_cb_t cb, void *arg, cq_zknode_t **ret)
{
    logf_("open(%s,%s,%s,%u)", hosts, root, name, session_ms);
    *ret = NULL;
    if (g.open_rc < 0) {
        logf_("=%d ", g.open_rc);
        return g.open_rc;
    }
    cq_zknode_t *n = cq_calloc(1, sizeof *n);
    assert_non_null(n);
    *n = (cq_zknode_t){++g.opened, cb, arg};
    g.last = n;
    logf_("=%d ", n->id);
    *ret = n;
    return 0;
}

int cq_zknode_mkparents(cq_zknode_t *n)
{
    logf_("mkparents(%d) ", n->id);
    return g.mkparents_rc;
}

int cq_zknode_get(cq_zknode_t *n, char **ret_data, size_t *ret_len, int64_t *ret_ver)
{
    logf_("get(%d) ", n->id);
    if (g.get_rc < 0)
        return g.get_rc;
    *ret_data = cq_strdup(g.doc);
    *ret_len = strlen(g.doc);
    *ret_ver = g.ver;
    return 0;
}

int cq_zknode_create(cq_zknode_t *n, const char *data, size_t len, int64_t *ret_ver)
{
    logf_("create(%d,%.*s) ", n->id, (int)len, data);
    if (g.create_rc < 0)
        return g.create_rc;
    *ret_ver = 0;
    return 0;
}

int cq_zknode_set(cq_zknode_t *n, const char *data, size_t len, int64_t expect_ver,
                  int64_t *ret_ver)
{
    logf_("set(%d,%.*s,%lld) ", n->id, (int)len, data, (long long)expect_ver);
    if (g.set_rc < 0)
        return g.set_rc;
    *ret_ver = expect_ver + 1;
    return 0;
}

int cq_zknode_watch(cq_zknode_t *n)
{
    logf_("watch(%d) ", n->id);
    return 0;
}

void cq_zknode_close(cq_zknode_t *n)
{
    if (n)
        logf_("close(%d) ", n->id);
    cq_free(n);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static int reset(void **state)
{
    (void)state;
    memset(&g, 0, sizeof g);
    g.doc = "{}";
    return 0;
}

static void *new_store(void)
{
    void *st = NULL;
    assert_int_equal(cq_mgrstore_zk_new("h:1", "/r", 0, &st), 0);
    assert_non_null(st);
    g.log[0] = '\0';
    return st;
}

static void on_changed(void *arg)
{
    (void)arg;
    logf_("changed ");
}

/* ---- cases -------------------------------------------------------------------------------- */

/* Bad arguments open nothing; the node is <root>/mgr/state, 10 s when no session time is
 * given; a refused open is the answer, and frees what new allocated (LeakSanitizer). */
static void test_new(void **state)
{
    (void)state;
    void *st = (void *)1;
    assert_int_equal(cq_mgrstore_zk_new("", "/r", 0, &st), -EINVAL);
    assert_null(st);
    assert_int_equal(cq_mgrstore_zk_new(NULL, "/r", 0, &st), -EINVAL);
    char root[600];
    memset(root, 'r', sizeof root - 1);
    root[0] = '/';
    root[sizeof root - 1] = '\0';
    assert_int_equal(cq_mgrstore_zk_new("h:1", root, 0, &st), -EINVAL);
    assert_string_equal(g.log, "");
    g.open_rc = -EINVAL; /* the client's answer to a root that is not "/x" */
    assert_int_equal(cq_mgrstore_zk_new("h:1", "r", 0, &st), -EINVAL);
    assert_null(st);
    assert_string_equal(g.log, "open(h:1,r,mgr/state,10000)=-22 ");
    g.open_rc = 0;
    g.log[0] = '\0';
    assert_int_equal(cq_mgrstore_zk_new("h:1", "/r", 2500, &st), 0);
    assert_string_equal(g.log, "open(h:1,/r,mgr/state,2500)=1 ");
    cq_mgrstore_zk_ops.free(st);
    cq_mgrstore_zk_free(NULL);
    assert_string_equal(g.log, "open(h:1,/r,mgr/state,2500)=1 close(1) ");
}

/* A load creates the parents, then reads: the document, or none (-ENOENT: 0 with NULL, -1). */
static void test_load(void **state)
{
    (void)state;
    void *st = new_store();
    char *json = (char *)"x";
    size_t len = 99;
    int64_t ver = 99;
    g.doc = "{\"version\":1}";
    g.ver = 4;
    assert_int_equal(cq_mgrstore_zk_load(st, &json, &len, &ver), 0);
    assert_string_equal(json, "{\"version\":1}");
    assert_int_equal(len, strlen(json));
    assert_int_equal(ver, 4);
    cq_free(json);
    g.get_rc = -ENOENT;
    assert_int_equal(cq_mgrstore_zk_load(st, &json, &len, &ver), 0);
    assert_null(json);
    assert_int_equal(len, 0);
    assert_int_equal(ver, -1);
    g.get_rc = CQ_ETIMEOUT;
    assert_int_equal(cq_mgrstore_zk_load(st, &json, &len, &ver), CQ_ETIMEOUT);
    assert_null(json);
    assert_int_equal(ver, -1);
    g.mkparents_rc = -ENOTCONN; /* no read without the parents */
    assert_int_equal(cq_mgrstore_zk_load(st, &json, &len, &ver), -ENOTCONN);
    assert_string_equal(g.log, "mkparents(1) get(1) mkparents(1) get(1) mkparents(1) get(1) "
                               "mkparents(1) ");
    cq_mgrstore_zk_free(st);
}

/* The first save creates (after the parents), later ones write with the version; a node that
 * is missing under either is a conflict; new_ver is -1 on failure. */
static void test_save(void **state)
{
    (void)state;
    void *st = new_store();
    int64_t nv = 99;
    assert_int_equal(cq_mgrstore_zk_save(st, "a", 1, -1, &nv), 0);
    assert_int_equal(nv, 0);
    assert_int_equal(cq_mgrstore_zk_save(st, "b", 1, 0, &nv), 0);
    assert_int_equal(nv, 1);
    g.set_rc = CQ_ECONFLICT;
    assert_int_equal(cq_mgrstore_zk_save(st, "c", 1, 0, &nv), CQ_ECONFLICT);
    assert_int_equal(nv, -1);
    g.set_rc = -ENOENT; /* deleted under a versioned write: someone else changed it */
    assert_int_equal(cq_mgrstore_zk_save(st, "d", 1, 1, &nv), CQ_ECONFLICT);
    g.create_rc = -ENOENT; /* the parents vanished between the two calls */
    assert_int_equal(cq_mgrstore_zk_save(st, "e", 1, -1, &nv), CQ_ECONFLICT);
    g.create_rc = CQ_ECONFLICT;
    assert_int_equal(cq_mgrstore_zk_save(st, "f", 1, -1, &nv), CQ_ECONFLICT);
    g.set_rc = -ENOTCONN;
    assert_int_equal(cq_mgrstore_zk_save(st, "g", 1, 2, &nv), -ENOTCONN);
    assert_int_equal(cq_mgrstore_zk_save(st, "h", (size_t)INT32_MAX + 1, 2, &nv), -EINVAL);
    assert_int_equal(nv, -1);
    assert_string_equal(g.log, "mkparents(1) create(1,a) set(1,b,0) set(1,c,0) set(1,d,1) "
                               "mkparents(1) create(1,e) mkparents(1) create(1,f) set(1,g,2) ");
    cq_mgrstore_zk_free(st);
}

/* The watch is armed on the session; a change re-arms it before the manager hears of it. */
static void test_watch(void **state)
{
    (void)state;
    void *st = new_store();
    cq_mgrstore_zk_ops.watch(st, on_changed, NULL);
    g.last->cb(g.last->arg, CQ_ZKNODE_CHANGED);
    g.last->cb(g.last->arg, CQ_ZKNODE_CHANGED);
    assert_string_equal(g.log, "watch(1) watch(1) changed watch(1) changed ");
    cq_mgrstore_zk_free(st);
}

/* An expiry tells the manager (no re-arm: that session is dead); the next call closes it, opens
 * a new one and re-arms the watch there, then goes on; a change on the old session's callback
 * after that re-arms on the new one. */
static void test_expiry(void **state)
{
    (void)state;
    void *st = new_store();
    cq_mgrstore_zk_watch(st, on_changed, NULL);
    cq_zknode_t *first = g.last;
    cq_zknode_cb_t cb = first->cb;
    void *arg = first->arg;
    first->cb(first->arg, CQ_ZKNODE_EXPIRED);
    assert_string_equal(g.log, "watch(1) changed ");
    g.log[0] = '\0';
    char *json = NULL;
    size_t len = 0;
    int64_t ver = 0;
    assert_int_equal(cq_mgrstore_zk_load(st, &json, &len, &ver), 0);
    cq_free(json);
    assert_string_equal(g.log,
                        "close(1) open(h:1,/r,mgr/state,10000)=2 watch(2) mkparents(2) get(2) ");
    g.log[0] = '\0';
    cb(arg, CQ_ZKNODE_CHANGED); /* the store is the callback's arg, whichever session fired */
    assert_string_equal(g.log, "watch(2) changed ");
    cq_mgrstore_zk_free(st);
}

/* A new session that cannot be opened fails the call; the next call tries again. Without a
 * watch, a reopened session arms none. */
static void test_reopen_fails(void **state)
{
    (void)state;
    void *st = new_store();
    g.last->cb(g.last->arg, CQ_ZKNODE_EXPIRED); /* no watch yet: nobody to tell */
    g.open_rc = -ENOMEM;
    int64_t nv = 0;
    assert_int_equal(cq_mgrstore_zk_save(st, "a", 1, 3, &nv), -ENOMEM);
    g.open_rc = 0;
    assert_int_equal(cq_mgrstore_zk_save(st, "a", 1, 3, &nv), 0);
    assert_int_equal(nv, 4);
    assert_string_equal(g.log, "close(1) open(h:1,/r,mgr/state,10000)=-12 "
                               "open(h:1,/r,mgr/state,10000)=2 set(2,a,3) ");
    cq_mgrstore_zk_free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_new, reset),
        cmocka_unit_test_setup(test_load, reset),
        cmocka_unit_test_setup(test_save, reset),
        cmocka_unit_test_setup(test_watch, reset),
        cmocka_unit_test_setup(test_expiry, reset),
        cmocka_unit_test_setup(test_reopen_fails, reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
