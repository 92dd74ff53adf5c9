/* pkg/http/cq_httpmsg.c: the request rules and the header collector the JSON APIs share (the
 * MQ HTTP API and the manager's console API call these; their own suites cover the wiring), and
 * the answer head every listener writes (the admin endpoint and the WebSocket listener too). */
#include "test_pkg.h"

#include "cq_err.h"
#include "cq_http.h"

#include <errno.h>
#include <string.h>

static int target(const char *t, int minor, bool *h11, char *path, char *query)
{
    cq_http_head_t h = {.target = t, .target_len = strlen(t), .minor_version = minor};
    const char *p, *q;
    size_t pl, ql;
    int r = cq_http_origin_target(&h, h11, &p, &pl, &q, &ql);
    if (r == 0) {
        memcpy(path, p, pl);
        path[pl] = '\0';
        strcpy(query, "(none)");
        if (q) {
            memcpy(query, q, ql);
            query[ql] = '\0';
        }
    }
    return r;
}

void test_httpmsg_request_rules(void **state)
{
    (void)state;
    char path[64], query[64];
    bool h11 = false;
    assert_int_equal(target("/api/state?limit=5", 1, &h11, path, query), 0);
    assert_true(h11);
    assert_string_equal(path, "/api/state");
    assert_string_equal(query, "limit=5");
    assert_int_equal(target("/x", 0, &h11, path, query), 0);
    assert_false(h11);
    assert_string_equal(query, "(none)");
    assert_int_equal(target("/x?", 1, &h11, path, query), 0);
    assert_string_equal(query, "");
    assert_int_equal(target("http://h/x", 1, &h11, path, query), CQ_EHEADER);
    assert_int_equal(target("/x", 2, &h11, path, query), CQ_EHEADER);

    bool seen = false;
    uint64_t len = 0;
    assert_int_equal(cq_http_content_length("17", 2, &seen, &len), 0);
    assert_true(seen);
    assert_int_equal(len, 17);
    assert_int_equal(cq_http_content_length("17", 2, &seen, &len), 0); /* the same again */
    assert_int_equal(cq_http_content_length("18", 2, &seen, &len), CQ_EHEADER);
    assert_int_equal(len, 17);
    seen = false;
    assert_int_equal(cq_http_content_length("", 0, &seen, &len), CQ_EHEADER);
    assert_int_equal(cq_http_content_length("+1", 2, &seen, &len), CQ_EHEADER);
    assert_int_equal(cq_http_content_length("1234567890123456789", 19, &seen, &len), CQ_EHEADER);
    assert_false(seen);

    bool close = false, keep = false;
    cq_http_connection("Upgrade, Keep-Alive", 19, &close, &keep);
    assert_false(close);
    assert_true(keep);
    cq_http_connection(" ,close", 7, &close, &keep);
    assert_true(close);
    close = keep = false;
    cq_http_connection("closed, keep-alives", 19, &close, &keep);
    assert_false(close || keep);

    assert_true(cq_http_ctype_is("Application/JSON ; charset=utf-8", 32, "application/json"));
    assert_true(cq_http_ctype_is("application/json", 16, "application/json"));
    assert_false(cq_http_ctype_is("application/jsonx", 17, "application/json"));
    assert_false(cq_http_ctype_is("text/plain", 10, "application/json"));
    assert_false(cq_http_ctype_is(NULL, 0, "application/json"));
}

void test_httpmsg_hosts(void **state)
{
    (void)state;
    const char *list = " localhost , [::1],chanq.example:8080 ";
    assert_true(cq_http_host_listed(list, "localhost:12121", 15));
    assert_true(cq_http_host_listed(list, "LOCALHOST", 9));
    assert_true(cq_http_host_listed(list, "[::1]:12121", 11));
    assert_true(cq_http_host_listed(list, "chanq.example", 13)); /* any port */
    assert_false(cq_http_host_listed(list, "evil.example", 12));
    assert_false(cq_http_host_listed(list, "localhost.evil", 14));
    assert_false(cq_http_host_listed(list, NULL, 0));
    assert_true(cq_http_host_listed("a, *", NULL, 0)); /* "*": any, also none */
    assert_false(cq_http_host_listed("", "a", 1));
    assert_false(cq_http_host_listed(NULL, "a", 1));
    assert_false(cq_http_host_listed(" , ", "a", 1));
}

/* Collects the header lines of head (CRLF-terminated, parsed by the shared parser) into *f;
 * returns how many the collector left to the caller. */
static size_t collect(const char *head, cq_http_fields_t *f, bool *http11)
{
    const cq_http_opts_t o = {.max_head = 4096};
    cq_http_head_t h;
    cq_http_header_t v[16];
    assert_int_equal(cq_http_parse_head(head, strlen(head), 0, &o, &h, v, 16),
                     (ssize_t)strlen(head));
    memset(f, 0, sizeof(*f));
    *http11 = h.minor_version == 1;
    size_t left = 0;
    for (size_t i = 0; i < h.num_headers; i++)
        left += !cq_http_fields_take(f, &v[i]);
    return left;
}

static bool slice_is(const char *p, size_t n, const char *want)
{
    return p && n == strlen(want) && memcmp(p, want, n) == 0;
}

void test_httpmsg_fields(void **state)
{
    (void)state;
    cq_http_fields_t f;
    bool h11;
    assert_int_equal(collect("POST /v1/x HTTP/1.1\r\nHOST: a.example:80\r\n"
                             "content-length: 12\r\nContent-Type: application/json\r\n"
                             "Origin: http://a.example\r\nAuthorization: Bearer t\r\n"
                             "Cookie: s=1\r\nX-CSRF-Token: abc\r\nConnection: keep-alive\r\n"
                             "Content-Length: 12\r\n\r\n",
                             &f, &h11),
                     2); /* Cookie and X-CSRF-Token are the caller's */
    assert_true(slice_is(f.host, f.host_len, "a.example:80"));
    assert_true(slice_is(f.ctype, f.ctype_len, "application/json"));
    assert_true(slice_is(f.origin, f.origin_len, "http://a.example"));
    assert_true(slice_is(f.auth, f.auth_len, "Bearer t"));
    assert_int_equal(f.content_length, 12);
    assert_true(f.cl_seen);
    assert_false(f.bad || f.chunked || f.conn_close);
    assert_true(f.conn_keep);
    assert_true(cq_http_fields_keep_alive(&f, true));
    assert_true(cq_http_fields_keep_alive(&f, false)); /* HTTP/1.0 with keep-alive */

    assert_int_equal(collect("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", &f, &h11), 0);
    assert_true(f.chunked);
    assert_null(f.host);
    assert_null(f.auth);
    assert_false(f.bad || f.cl_seen);
    assert_int_equal(f.content_length, 0);
    assert_false(cq_http_fields_keep_alive(&f, h11)); /* HTTP/1.0 without keep-alive */
    assert_true(cq_http_fields_keep_alive(&f, true));

    collect("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n", &f, &h11);
    assert_false(cq_http_fields_keep_alive(&f, h11)); /* close wins */
    assert_false(f.bad);

    collect("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &f, &h11);
    assert_true(f.bad); /* two Hosts: the last is kept, the head is bad */
    assert_true(slice_is(f.host, f.host_len, "b"));
    collect("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &f, &h11);
    assert_true(f.bad);
    assert_int_equal(f.content_length, 1);
    collect("GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", &f, &h11);
    assert_true(f.bad);
    assert_false(f.cl_seen);
}

void test_httpmsg_answer(void **state)
{
    (void)state;
    char b[256];
    const char *extra[] = {"X-A: 1\r\n", NULL, "X-B: 2\r\n"};
    cq_http_answer_t a = {
        .status = 415, .ctype = "application/json", .length = 12, .extra = extra, .nextra = 3};
    int n = cq_http_answer_head(b, sizeof(b), &a);
    static const char want[] = "HTTP/1.1 415 Unsupported Media Type\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 12\r\n"
                               "X-A: 1\r\nX-B: 2\r\n"
                               "Connection: close\r\n\r\n";
    assert_int_equal(n, sizeof(want) - 1);
    assert_string_equal(b, want);
    assert_int_equal(cq_http_answer_head(b, sizeof(want) - 1, &a),
                     -ENOSPC); /* one byte short for the NUL */
    assert_int_equal(cq_http_answer_head(b, sizeof(want), &a), sizeof(want) - 1);
    const cq_http_answer_t keep = {.status = 599, .keep_alive = true};
    n = cq_http_answer_head(b, sizeof(b), &keep);
    assert_string_equal(b, "HTTP/1.1 599 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(n, (int)strlen(b));
    assert_int_equal(cq_http_answer_head(b, 10, &keep), -ENOSPC);
    assert_int_equal(cq_http_answer_head(b, 0, &keep), -ENOSPC);
    assert_string_equal(cq_http_reason(421), "Misdirected Request");
    assert_string_equal(cq_http_reason(405), "Method Not Allowed");
    assert_string_equal(cq_http_reason(426), "Upgrade Required");
    assert_string_equal(cq_http_reason(101), "Switching Protocols");

    /* a 101: no Content-Length, no Connection: close, extra items as pieces of lines */
    const char *const up[] = {"Upgrade: websocket\r\n", "Connection: Upgrade\r\n",
                              "Sec-WebSocket-Accept: ", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "\r\n"};
    const cq_http_answer_t sw = {
        .status = 101, .no_length = true, .extra = up, .nextra = 5, .keep_alive = true};
    n = cq_http_answer_head(b, sizeof(b), &sw);
    static const char want101[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                  "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    assert_int_equal(n, sizeof(want101) - 1);
    assert_string_equal(b, want101);
    /* a file's head: the largest length, headers between it and Connection: close */
    const char *const file[] = {"Cache-Control: no-cache\r\n"};
    const cq_http_answer_t big = {
        .status = 200, .ctype = "image/png", .length = UINT64_MAX, .extra = file, .nextra = 1};
    n = cq_http_answer_head(b, sizeof(b), &big);
    assert_string_equal(b, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                           "Content-Length: 18446744073709551615\r\n"
                           "Cache-Control: no-cache\r\nConnection: close\r\n\r\n");
    assert_int_equal(n, (int)strlen(b));

    char s[] = "ok \xc3\xa9 \xff cut \xe2\x82";
    cq_http_scrub_utf8(s);
    assert_string_equal(s, "ok \xc3\xa9 ? cut ??");
}
