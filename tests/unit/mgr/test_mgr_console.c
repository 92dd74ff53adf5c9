/* test_mgr_console.c - the console's API (api.c) over the real engine (src/mgr), with a fake
 * edge and a fake store: what a console or CLI request changes in the state, what it answers
 * when the engine refuses, that tokens never come back, and that every change reaches the audit
 * log through the engine. The engine's own rules are tested in test_mgr.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_sendq.h"
#include "mgr_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int saves;
    int64_t ver;
    char audit[4096];
    int naudit;
    char out[65536];
    size_t outlen;
    cq_mgr_hconn_t *h;
} fx;

static void f_save(void *ud, const char *json, size_t len, int64_t expect_ver)
{
    (void)ud, (void)json, (void)len, (void)expect_ver;
    fx.saves++;
}
static void f_reload(void *ud)
{
    (void)ud;
}
static void f_audit(void *ud, const char *line, size_t len)
{
    (void)ud;
    snprintf(fx.audit, sizeof(fx.audit), "%.*s", (int)len, line);
    fx.naudit++;
}
static const cq_mgr_ops_t f_ops = {f_save, f_reload, f_audit};

static void e_flush(void *tctx)
{
    (void)tctx;
    cq_sendq_t *q = cq_mgr_hconn_sendq(fx.h);
    const struct iovec *iov;
    int n;
    while (cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t tot = 0;
        for (int i = 0; i < n; i++) {
            assert_true(fx.outlen + iov[i].iov_len < sizeof(fx.out));
            memcpy(fx.out + fx.outlen, iov[i].iov_base, iov[i].iov_len);
            fx.outlen += iov[i].iov_len;
            tot += iov[i].iov_len;
        }
        cq_sendq_written(q, tot);
    }
}
static void e_close(void *tctx)
{
    (void)tctx;
}
static int e_peer(void *tctx, char *buf, size_t len)
{
    (void)tctx;
    snprintf(buf, len, "127.0.0.1:4000");
    return 0;
}
static const cq_mgr_conn_ops_t e_ops = {{"tcp", e_flush, e_close, e_peer}};

static cq_mgr_t *m;
static const uint64_t NOW = 1796173323456ull;

/* One bearer request; returns the status and copies the body into body[cap]. */
static int call(const char *method, const char *path, const char *json, char *body, size_t cap)
{
    char rq[4096];
    int n = snprintf(rq, sizeof(rq),
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer adm\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, json ? strlen(json) : 0, json ? json : "");
    fx.outlen = 0;
    assert_int_equal(cq_mgr_hconn_input(fx.h, (const uint8_t *)rq, (size_t)n, NOW), 0);
    cq_mgr_flush(m);
    fx.out[fx.outlen] = '\0';
    const char *b = strstr(fx.out, "\r\n\r\n");
    assert_non_null(b);
    snprintf(body, cap, "%s", b + 4);
    return atoi(fx.out + 9);
}

static int setup(void **state)
{
    (void)state;
    memset(&fx, 0, sizeof(fx));
    cq_mgr_opts_t o = {.admin_token = "adm", .server_token = "srv", .http_hosts = "localhost"};
    char err[128];
    m = cq_mgr_new(&o, &f_ops, NULL, err, sizeof(err));
    assert_non_null(m);
    assert_int_equal(cq_mgr_store_loaded(m, "", 0, -1, err, sizeof(err)), 0);
    fx.h = cq_mgr_hconn_new(m, &e_ops, NULL, "127.0.0.1:4000");
    assert_non_null(fx.h);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_mgr_hconn_close(fx.h);
    m = cq_mgr_free(m);
    return 0;
}

static void test_changes_reach_the_state(void **state)
{
    (void)state;
    char b[16384];
    assert_int_equal(call("GET", "/api/state", NULL, b, sizeof(b)), 200);
    long v0 = strtol(strstr(b, "\"version\":") + 10, NULL, 10);
    assert_int_equal(call("PUT", "/api/modules/7",
                          "{\"token\":\"secret7\",\"produce\":[\"orders\"],\"consume\":[\"*\"],"
                          "\"admin\":false}",
                          b, sizeof(b)),
                     200);
    char want[64];
    snprintf(want, sizeof(want), "{\"version\":%ld}", v0 + 1);
    assert_string_equal(b, want);
    assert_true(strstr(fx.audit, "\"action\":\"module.put\",\"target\":\"7\"") != NULL);
    assert_int_equal(call("POST", "/api/topics/orders/offline", "{}", b, sizeof(b)), 200);
    assert_int_equal(call("POST", "/api/servers/5/offline", "{}", b, sizeof(b)), 200);
    assert_int_equal(call("GET", "/api/state", NULL, b, sizeof(b)), 200);
    assert_null(strstr(b, "secret7")); /* tokens are never returned */
    assert_non_null(strstr(b, "\"produce\":[\"orders\"]"));
    assert_non_null(strstr(b, "\"name\":\"orders\",\"online\":false"));
    snprintf(want, sizeof(want), "\"version\":%ld", v0 + 3);
    assert_non_null(strstr(b, want));
    assert_int_equal(call("POST", "/api/topics/orders/online", "{}", b, sizeof(b)), 200);
    assert_int_equal(call("GET", "/api/audit?limit=4", NULL, b, sizeof(b)), 200);
    assert_non_null(strstr(b, "\"action\":\"topic.online\",\"target\":\"orders\""));
    assert_int_equal(fx.naudit, 4);
    assert_true(fx.saves >= 1);
}

static void test_engine_refusals(void **state)
{
    (void)state;
    char b[4096];
    assert_int_equal(call("PUT", "/api/modules/8", "{\"produce\":[],\"consume\":[]}", b, sizeof(b)),
                     400); /* a new module needs its token */
    assert_non_null(strstr(b, "token"));
    assert_int_equal(call("PUT", "/api/modules/8",
                          "{\"token\":\"t\",\"produce\":[\"no way\"],"
                          "\"consume\":[],\"admin\":false}",
                          b, sizeof(b)),
                     400);
    assert_string_equal(b, "{\"error\":\"modules.8: module 8: \\\"produce\\\"[0]: must be "
                           "\\\"*\\\" or a topic name\"}");
    assert_int_equal(call("PUT", "/api/modules/8", "not json", b, sizeof(b)), 400);
    assert_int_equal(call("DELETE", "/api/modules/99", NULL, b, sizeof(b)), 404);
    assert_int_equal(call("POST", "/api/topics/bad-name/offline", "{}", b, sizeof(b)), 400);
    assert_true(strstr(fx.audit, "\"version\":0,\"result\":\"") != NULL);
    assert_null(strstr(fx.audit, "\"result\":\"ok\""));
}

/* Bindings over HTTP: a refused document is 400 with the parser's exact message and the old
 * bindings stay; a good one answers the new version and GET gives it back as stored. */
static void test_bindings(void **state)
{
    (void)state;
    char b[4096];
    assert_int_equal(call("GET", "/api/bindings", NULL, b, sizeof(b)), 200);
    assert_string_equal(b, "{\"bindings\":[]}");
    const char *doc = "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\","
                      "\"msg_type\":200}]}";
    assert_int_equal(call("PUT", "/api/bindings", doc, b, sizeof(b)), 200);
    assert_string_equal(b, "{\"version\":2}");
    assert_non_null(strstr(fx.audit, "\"action\":\"bindings.put\",\"target\":\"\",\"version\":2,"
                                     "\"result\":\"ok\"}"));
    assert_int_equal(call("PUT", "/api/bindings",
                          "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"GLOBAL\","
                          "\"msg_type\":200}]}",
                          b, sizeof(b)),
                     400);
    assert_string_equal(
        b, "{\"error\":\"binding 0: \\\"broadcast\\\" must be \\\"global\\\" or \\\"topic\\\"\"}");
    assert_non_null(strstr(fx.audit, "\"action\":\"bindings.put\",\"target\":\"\",\"version\":0,"
                                     "\"result\":\"binding 0: \\\"broadcast\\\" must be"));
    assert_int_equal(call("PUT", "/api/bindings", "{\"bindings\":[", b, sizeof(b)), 400);
    assert_string_equal(b, "{\"error\":\"bindings: invalid JSON at line 1, column 13: "
                           "']' expected near end of file\"}");
    assert_int_equal(call("GET", "/api/bindings", NULL, b, sizeof(b)), 200);
    assert_string_equal(b, doc);
    assert_int_equal(call("GET", "/api/state", NULL, b, sizeof(b)), 200);
    assert_non_null(strstr(b, "\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\","
                              "\"msg_type\":200}]"));
    assert_non_null(strstr(b, "\"version\":2,"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_changes_reach_the_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bindings, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
