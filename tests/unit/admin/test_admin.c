/* Unit tests of the admin endpoints and the registry of metrics sources. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cq_admin.h"
#include "cq_err.h"

#include <errno.h>

static int src_text(void *ud, cq_sbuf_t *out)
{
    return cq_sbuf_append(out, ud, strlen(ud));
}

static int src_oom(void *ud, cq_sbuf_t *out)
{
    (void)ud;
    (void)out;
    return -ENOMEM;
}

static void assert_response(cq_admin_t *a, const char *method, const char *path, int bad,
                            const char *want)
{
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    assert_int_equal(cq_admin_respond(a, method, path, bad, &out), 0);
    assert_int_equal(out.len, strlen(want));
    assert_memory_equal(out.data, want, out.len);
    cq_sbuf_done(&out);
}

static void test_metrics_in_registration_order(void **state)
{
    (void)state;
    cq_admin_t *a = cq_admin_new();
    assert_non_null(a);
    assert_int_equal(cq_admin_add_source(a, "core", src_text, "a 1\n"), 0);
    assert_int_equal(cq_admin_add_source(a, "mq", src_text, "b 2\n"), 0);
    assert_response(a, "GET", "/metrics", 0,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    "Content-Length: 8\r\nConnection: close\r\n\r\na 1\nb 2\n");
    cq_admin_free(a);
}

static void test_remove_source(void **state)
{
    (void)state;
    cq_admin_t *a = cq_admin_new();
    assert_int_equal(cq_admin_add_source(a, "core", src_text, "a 1\n"), 0);
    assert_int_equal(cq_admin_add_source(a, "mq", src_text, "b 2\n"), 0);
    assert_int_equal(cq_admin_add_source(a, "x", src_text, "c 3\n"), 0);
    cq_admin_remove_source(a, src_text, "b 2\n");
    cq_admin_remove_source(a, src_oom, NULL); /* not registered: nothing */
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    assert_int_equal(cq_admin_metrics(a, &out), 0);
    assert_int_equal(out.len, 8);
    assert_memory_equal(out.data, "a 1\nc 3\n", 8);
    cq_sbuf_done(&out);
    cq_admin_free(a);
}

static void test_source_limit_and_null(void **state)
{
    (void)state;
    cq_admin_t *a = cq_admin_new();
    for (int i = 0; i < CQ_ADMIN_MAX_SOURCES; i++)
        assert_int_equal(cq_admin_add_source(a, "s", src_text, ""), 0);
    assert_int_equal(cq_admin_add_source(a, "s", src_text, ""), CQ_ELIMIT);
    assert_int_equal(cq_admin_add_source(a, "s", NULL, ""), -EINVAL);
    assert_null(cq_admin_free(a));
    assert_null(cq_admin_free(NULL));
}

static void test_source_error_fails_the_scrape(void **state)
{
    (void)state;
    cq_admin_t *a = cq_admin_new();
    assert_int_equal(cq_admin_add_source(a, "bad", src_oom, NULL), 0);
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    assert_int_equal(cq_admin_respond(a, "GET", "/metrics", 0, &out), -ENOMEM);
    assert_int_equal(out.len, 0);
    cq_sbuf_done(&out);
    cq_admin_free(a);
}

static void test_other_endpoints(void **state)
{
    (void)state;
    static const struct {
        const char *method, *path;
        int bad;
        const char *status, *body;
    } cases[] = {
        {"GET", "/healthz", 0, "200 OK", "ok\n"},
        {"GET", "/nope", 0, "404 Not Found", "not found\n"},
        {"POST", "/metrics", 0, "405 Method Not Allowed", "only GET\n"},
        {"", "", 1, "400 Bad Request", "bad request\n"},
    };
    cq_admin_t *a = cq_admin_new();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char want[256];
        snprintf(want, sizeof(want),
                 "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 cases[i].status, strlen(cases[i].body), cases[i].body);
        assert_response(a, cases[i].method, cases[i].path, cases[i].bad, want);
    }
    cq_admin_free(a);
}

static ssize_t parse(const char *head, char *method, char *path)
{
    return cq_admin_parse_head(head, strlen(head), method, 16, path, 256);
}

static void test_parse_head(void **state)
{
    (void)state;
    char method[16], path[256];
    const char *ok = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_int_equal(parse(ok, method, path), (ssize_t)strlen(ok));
    assert_string_equal(method, "GET");
    assert_string_equal(path, "/metrics");  /* the query is dropped */
    for (size_t n = 0; n < strlen(ok); n++) /* every prefix needs more */
        assert_int_equal(cq_admin_parse_head(ok, n, method, 16, path, 256), 0);
    /* malformed heads are answered 400: the request line, and (since the parser is pkg/http)
     * the header lines too */
    assert_int_equal(parse("GET /metrics\r\n\r\n", method, path), -1);
    assert_int_equal(parse("GET /metrics FTP/1.1\r\n\r\n", method, path), -1);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", method, path), -1);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\n folded\r\n\r\n", method, path), -1);
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost : a\r\n\r\n", method, path), -1);
    /* the method and the path must fit the caller's buffers */
    assert_int_equal(parse("GETTTTTTTTTTTTTTT / HTTP/1.1\r\n\r\n", method, path), -1);
    /* no end within CQ_ADMIN_MAX_HEAD bytes */
    static char big[CQ_ADMIN_MAX_HEAD + 1];
    memset(big, 'a', sizeof(big) - 1);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 20);
    assert_int_equal(cq_admin_parse_head(big, CQ_ADMIN_MAX_HEAD, method, 16, path, 256), -1);
    assert_int_equal(cq_admin_parse_head(big, CQ_ADMIN_MAX_HEAD - 1, method, 16, path, 256), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_in_registration_order),
        cmocka_unit_test(test_remove_source),
        cmocka_unit_test(test_source_limit_and_null),
        cmocka_unit_test(test_source_error_fails_the_scrape),
        cmocka_unit_test(test_other_endpoints),
        cmocka_unit_test(test_parse_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
