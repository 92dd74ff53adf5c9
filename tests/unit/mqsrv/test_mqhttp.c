/* test_mqhttp.c - the HTTP API's sans-I/O side: the request-head parser on every prefix and on
 * malformed heads, and a connection fed every two-way split of a pipelined byte stream, with a
 * fake store (submitted requests are captured and completed by hand).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_err.h"
#include "cq_mqhttp.h"
#include "cq_mqport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fakes ---------------------------------------------------------------------------------- */

#define MAX_PENDING 8

typedef struct fake {
    cq_writer_req_t *pending[MAX_PENDING];
    size_t npending;
    char out[65536]; /* everything sent */
    size_t outlen;
    int closed;
    int busy;            /* submit answers CQ_EBUSY */
    cq_mqhttp_conn_t *h; /* the connection whose send queue the fake edge writes */
} fake_t;

static fake_t fk;

static int fake_submit(void *ud, cq_writer_req_t *req)
{
    (void)ud;
    if (fk.busy || fk.npending == MAX_PENDING)
        return CQ_EBUSY;
    fk.pending[fk.npending++] = req;
    return 0;
}

/* The edge writes everything queued, as the socket would take it. */
static void fake_flush(void *ud)
{
    (void)ud;
    cq_sendq_t *q = cq_mqhttp_conn_sendq(fk.h);
    const struct iovec *iov;
    int n;
    while (cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            assert_true(fk.outlen + iov[i].iov_len < sizeof(fk.out));
            memcpy(fk.out + fk.outlen, iov[i].iov_base, iov[i].iov_len);
            fk.outlen += iov[i].iov_len;
            len += iov[i].iov_len;
        }
        fk.out[fk.outlen] = '\0';
        cq_sendq_written(q, len);
    }
}

static void fake_close(void *ud)
{
    fk.closed++;
    fake_flush(ud); /* what was queued is written before the close */
}

static void fake_abort(void *ud, int reason, const char *why)
{
    (void)ud;
    (void)reason;
    (void)why;
    fk.closed++;
}

/* The peer address every new connection reports: loopback unless a test says otherwise (writes
 * from other addresses need a permissions file). */
static const char *fake_peer_addr = "127.0.0.1:4000";

static int fake_peer(void *ud, char *buf, size_t len)
{
    (void)ud;
    snprintf(buf, len, "%s", fake_peer_addr);
    return 0;
}

static const cq_mqsrv_conn_ops_t ops = {{"fake", fake_flush, fake_close, fake_peer}, fake_abort};

/* Feeds bytes; the edge then writes what the engine queued (once per loop iteration). */
static int input(cq_mqsrv_t *s, cq_mqhttp_conn_t *h, const void *p, size_t n)
{
    int r = cq_mqhttp_conn_input(h, p, n);
    cq_mqsrv_flush(s);
    return r;
}

/* Engine options of the next new_engine (reset by it). */
static cq_mqsrv_opts_t next_opts;

static cq_mqsrv_t *new_engine(bool online)
{
    cq_mqsrv_opts_t extra = next_opts;
    memset(&next_opts, 0, sizeof(next_opts));
    memset(&fk, 0, sizeof(fk));
    cq_store_topic_t t = {.online = online, .retention_days = 30};
    snprintf(t.name, sizeof(t.name), "orders");
    static const cq_mqport_ops_t port_ops = {fake_submit, NULL};
    cq_mqsrv_opts_t o = extra;
    o.topics = &t;
    o.ntopics = 1;
    o.port = (cq_mqport_t){&port_ops, NULL};
    cq_mqsrv_t *s = cq_mqsrv_new(&o);
    assert_non_null(s);
    return s;
}

/* Completes the oldest pending request as the store would, with offsets from first. */
static void complete_next(cq_mqsrv_t *s, uint64_t first)
{
    assert_true(fk.npending > 0);
    cq_writer_req_t *req = fk.pending[0];
    memmove(fk.pending, fk.pending + 1, --fk.npending * sizeof(fk.pending[0]));
    if (req->op == CQ_WRITER_PRODUCE) {
        assert_non_null(req->offsets); /* sized by cq_writer_req_add_msg */
        for (size_t i = 0; i < req->n_msgs; i++)
            req->offsets[i] = first + i;
    }
    cq_mqsrv_complete(NULL, req);
    cq_mqsrv_drain(s);
    cq_mqsrv_flush(s);
}

/* ---- the parser ----------------------------------------------------------------------------- */

static void test_parse_prefixes(void **state)
{
    (void)state;
    const char req[] = "POST /v1/topics/orders/messages?x=1 HTTP/1.1\r\nHost: a\r\n"
                       "Authorization:  Bearer 1:tok \r\nContent-Length: 5\r\n"
                       "Connection: close\r\n\r\nhello";
    size_t head = strlen(req) - 5;
    cq_mqhttp_req_t r;
    for (size_t i = 0; i < head; i++)
        assert_int_equal(cq_mqhttp_parse(req, i, CQ_MQHTTP_HEAD_MAX, &r), 0);
    for (size_t i = head; i <= strlen(req); i++) {
        memset(&r, 0xff, sizeof(r));
        assert_int_equal(cq_mqhttp_parse(req, i, CQ_MQHTTP_HEAD_MAX, &r), (ssize_t)head);
        assert_int_equal(r.path_len, strlen("/v1/topics/orders/messages"));
        assert_memory_equal(r.query, "x=1", 3);
        assert_int_equal(r.query_len, 3);
        assert_int_equal(r.auth_len, strlen("Bearer 1:tok"));
        assert_memory_equal(r.auth, "Bearer 1:tok", r.auth_len);
        assert_int_equal(r.content_length, 5);
        assert_false(r.keep_alive);
        assert_false(r.chunked);
    }
    /* the head limit: a head that does not fit */
    assert_int_equal(cq_mqhttp_parse(req, head - 1, head - 1, &r), CQ_EBADLEN);
    assert_int_equal(cq_mqhttp_parse(req, head, head, &r), (ssize_t)head);
}

static void test_parse_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "GET\r\n\r\n",
        "GET /x\r\n\r\n",
        "GET /x HTTP/2.0\r\n\r\n",
        "GET x HTTP/1.1\r\n\r\n",
        "G(T /x HTTP/1.1\r\n\r\n",
        "GET /x HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET /x HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
        "GET /x HTTP/1.1\r\nContent-Length: \r\n\r\n",
        "GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "GET /x HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n",
        "GET /x HTTP/1.1\r\nA: b\nc\r\n\r\n",
        "GET /x HTTP/1.1\nA: b\r\n\r\n",
    };
    cq_mqhttp_req_t r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ssize_t n = cq_mqhttp_parse(bad[i], strlen(bad[i]), CQ_MQHTTP_HEAD_MAX, &r);
        if (n != CQ_EHEADER)
            fprintf(stderr, "# case %zu: %zd\n", i, n);
        assert_int_equal(n, CQ_EHEADER);
    }
    const char ok10[] = "GET /x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
    assert_int_equal(cq_mqhttp_parse(ok10, strlen(ok10), 100, &r), (ssize_t)strlen(ok10));
    assert_true(r.keep_alive);
    const char dup[] = "GET /x HTTP/1.0\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n";
    assert_int_equal(cq_mqhttp_parse(dup, strlen(dup), 100, &r), (ssize_t)strlen(dup));
    assert_false(r.keep_alive);
}

/* ---- a connection --------------------------------------------------------------------------- */

static const char stream[] =
    "GET /v1/health HTTP/1.1\r\n\r\n"
    "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json\r\n"
    "Content-Length: 45\r\n\r\n"
    "{\"messages\":[{\"content\":\"a\"},{\"content\":{}}]}"
    "GET /v1/topics HTTP/1.1\r\nConnection: close\r\n\r\n";

/* Feeds stream split at i (and j), completing the produce when it is submitted; returns what
 * was sent. */
static void run_split(size_t i, size_t j, char *out, size_t cap)
{
    cq_mqsrv_t *s = new_engine(true);
    cq_mqhttp_conn_t *h = fk.h = cq_mqhttp_conn_new(s, &ops, NULL);
    assert_non_null(h);
    size_t n = strlen(stream), cut[3] = {i, j, n}, at = 0;
    for (size_t k = 0; k < 3; k++) {
        int r = fk.closed ? 0 : input(s, h, (const uint8_t *)stream + at, cut[k] - at);
        assert_true(r == 0 || (r == CQ_ECLOSED && fk.closed));
        at = cut[k];
        while (fk.npending)
            complete_next(s, 1);
    }
    assert_int_equal(fk.closed, 1);
    assert_true(fk.outlen < cap);
    memcpy(out, fk.out, fk.outlen + 1);
    cq_mqhttp_conn_close(h);
    cq_mqsrv_free(s);
}

static void test_every_split(void **state)
{
    (void)state;
    char want[4096], got[4096];
    size_t n = strlen(stream);
    run_split(n, n, want, sizeof(want));
    assert_non_null(strstr(want, "{\"ok\":true"));
    assert_non_null(strstr(want, "{\"offsets\":[1,2]}"));
    assert_non_null(strstr(want, "\"online\":true"));
    assert_non_null(strstr(want, "Connection: close"));
    for (size_t i = 0; i <= n; i++) {
        run_split(i, n, got, sizeof(got));
        assert_string_equal(got, want);
    }
    for (size_t i = 0; i <= n; i += 7)
        for (size_t j = i; j <= n; j += 5) {
            run_split(i, j, got, sizeof(got));
            assert_string_equal(got, want);
        }
}

/* Sends one request on a fresh connection; returns the response text in fk.out. */
static cq_mqsrv_t *one(const char *req, bool online, bool complete)
{
    cq_mqsrv_t *s = new_engine(online);
    cq_mqhttp_conn_t *h = fk.h = cq_mqhttp_conn_new(s, &ops, NULL);
    input(s, h, (const uint8_t *)req, strlen(req));
    while (complete && fk.npending)
        complete_next(s, 1);
    cq_mqhttp_conn_close(h);
    return s;
}

static void expect_status(const char *req, bool online, const char *status, const char *code)
{
    cq_mqsrv_t *s = one(req, online, true);
    if (strncmp(fk.out, status, strlen(status)) != 0 || !strstr(fk.out, code))
        fprintf(stderr, "# %s -> %s\n", req, fk.out);
    assert_memory_equal(fk.out, status, strlen(status));
    assert_non_null(strstr(fk.out, code));
    cq_mqsrv_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    expect_status("POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json\r\n"
                  "Content-Length: 4\r\n\r\n{bad",
                  true, "HTTP/1.1 400", "\"err_code\":3");
    expect_status("GET /v1/topics/or'ders/messages HTTP/1.1\r\n\r\n", true, "HTTP/1.1 400",
                  "\"err_code\":13");
    expect_status("GET /v1/topics/orders/messages HTTP/1.1\r\n\r\n", false, "HTTP/1.1 409",
                  "\"err_code\":9");
    expect_status("GET /v1/topics/nope/messages HTTP/1.1\r\n\r\n", true, "HTTP/1.1 404",
                  "\"err_code\":8");
    expect_status("GET /v1/x HTTP/1.1\r\n\r\n", true, "HTTP/1.1 404", "\"err_code\":4");
    expect_status("POST /v1/topics HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", true,
                  "HTTP/1.1 413", "\"err_code\":2");
    fk.busy = 1;
    cq_mqsrv_t *s = new_engine(true);
    fk.busy = 1;
    cq_mqhttp_conn_t *h = fk.h = cq_mqhttp_conn_new(s, &ops, NULL);
    const char req[] = "GET /v1/topics/orders/messages HTTP/1.1\r\n\r\n";
    input(s, h, (const uint8_t *)req, strlen(req));
    assert_memory_equal(fk.out, "HTTP/1.1 429", 12);
    cq_mqhttp_conn_close(h);
    cq_mqsrv_free(s);
}

static void test_close_in_flight(void **state)
{
    (void)state;
    /* the edge closes while the produce is in the store: answered to no one, freed after */
    cq_mqsrv_t *s = one("POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Length: 15\r\n"
                        "Content-Type: application/json\r\n\r\n"
                        "{\"content\":\"a\"}GET /v1/health HTTP/1.1\r\n\r\n",
                        true, false);
    assert_int_equal(fk.npending, 1);
    assert_int_equal(fk.outlen, 0);
    complete_next(s, 1);
    assert_int_equal(fk.outlen, 0);
    cq_mqsrv_free(s);
}

/* ---- before the body: credentials, cross-site rules, writes from other addresses ---------- */

static const char PERMS[] =
    "{\"1\": {\"token\": \"tok\", \"produce\": [\"*\"], \"consume\": [\"*\"]}}";

static cq_mqperm_t *perms(void)
{
    cq_mqperm_t *p = NULL;
    char err[128];
    assert_int_equal(cq_mqperm_load(PERMS, strlen(PERMS), &p, err, sizeof(err)), 0);
    return p;
}

/* Unauthenticated heads are answered before their body: a long body is never read (the answer
 * closes the connection at once), a short one is skipped and the connection serves on. */
static void test_auth_before_body(void **state)
{
    (void)state;
    cq_mqperm_t *p = perms();
    next_opts.perms = p;
    cq_mqsrv_t *s = new_engine(true);
    cq_mqhttp_conn_t *h = fk.h = cq_mqhttp_conn_new(s, &ops, NULL);
    const char big[] = "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json"
                       "\r\nContent-Length: 60000000\r\n\r\n{\"content\":";
    assert_int_equal(input(s, h, big, strlen(big)), CQ_ECLOSED);
    assert_int_equal(fk.closed, 1);
    assert_int_equal(fk.npending, 0);
    assert_memory_equal(fk.out, "HTTP/1.1 401 Unauthorized\r\n", 27);
    assert_non_null(strstr(fk.out, "Connection: close\r\n"));
    assert_non_null(strstr(fk.out, "\"err_code\":6"));
    cq_mqhttp_conn_close(h);
    cq_mqsrv_free(s);

    /* a short body: skipped as it arrives, in pieces; the next request is served */
    next_opts.perms = p;
    s = new_engine(true);
    h = fk.h = cq_mqhttp_conn_new(s, &ops, NULL);
    const char small[] =
        "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json"
        "\r\nAuthorization: Bearer 1:nope\r\nContent-Length: 15\r\n\r\n{\"con";
    assert_int_equal(input(s, h, small, strlen(small)), 0);
    assert_memory_equal(fk.out, "HTTP/1.1 401 Unauthorized\r\n", 27);
    assert_null(strstr(fk.out, "Connection: close"));
    assert_int_equal(input(s, h, "tent\":", 6), 0);
    const char rest[] = "\"a\"}GET /v1/topics HTTP/1.1\r\nAuthorization: Bearer 1:tok\r\n\r\n";
    assert_int_equal(input(s, h, rest, strlen(rest)), 0);
    assert_int_equal(fk.closed, 0);
    assert_int_equal(fk.npending, 0);
    const char *second = strstr(fk.out + 1, "HTTP/1.1 ");
    assert_non_null(second);
    assert_memory_equal(second, "HTTP/1.1 200 OK\r\n", 17);
    assert_non_null(strstr(second, "\"topic\":\"orders\""));
    cq_mqhttp_conn_close(h);
    cq_mqsrv_free(s);
    cq_mqperm_free(p);
}

static void test_cross_site(void **state)
{
    (void)state;
    const char *const post = "POST /v1/topics/orders/messages HTTP/1.1\r\n";
    char req[512];
#define CASE(hdrs, status, code)                                                                   \
    do {                                                                                           \
        snprintf(req, sizeof(req), "%s%sContent-Length: 15\r\n\r\n{\"content\":\"a\"}", post,      \
                 hdrs);                                                                            \
        next_opts.http_origins = "https://ops.example, http://127.0.0.1:9000";                     \
        expect_status(req, true, status, code);                                                    \
    } while (0)
    CASE("Host: evil.example\r\nContent-Type: application/json\r\n", "HTTP/1.1 421 Misdirected",
         "\"err_code\":7");
    CASE("Host: 127.0.0.1.evil.example\r\nContent-Type: application/json\r\n", "HTTP/1.1 421",
         "Host \\\"127.0.0.1.evil.example\\\" is not a name of this API");
    CASE("Host: localhost:12111\r\nOrigin: https://evil.example\r\n"
         "Content-Type: application/json\r\n",
         "HTTP/1.1 403 Forbidden", "\"err_code\":7");
    CASE("Host: localhost\r\nOrigin: null\r\nContent-Type: application/json\r\n", "HTTP/1.1 403",
         "Origin \\\"null\\\" is not allowed");
    CASE("Host: 127.0.0.1:1\r\nContent-Type: text/plain\r\n", "HTTP/1.1 415 Unsupported",
         "\"err_code\":1");
    CASE("Host: 127.0.0.1:1\r\n", "HTTP/1.1 415", "POST needs Content-Type: application/json");
    CASE("Host: 127.0.0.1:1\r\nContent-Type: application/jsonx\r\n", "HTTP/1.1 415", "err_code");
    /* passes: loopback names with or without a port, an allowed Origin, JSON with parameters */
    CASE("Host: [::1]:8\r\nOrigin: HTTPS://ops.example\r\nContent-Type: application/json\r\n",
         "HTTP/1.1 200", "{\"offsets\":[1]}");
    CASE("Host: LOCALHOST\r\nContent-Type: Application/JSON; charset=utf-8\r\n", "HTTP/1.1 200",
         "{\"offsets\":[1]}");
    CASE("", "HTTP/1.1 415", "err_code"); /* no Host (HTTP/1.0 style): only the type is missing */
#undef CASE
    /* GET needs no Content-Type; a wrong Host is refused on every path */
    expect_status("GET /v1/health HTTP/1.1\r\nHost: rebind.example:12111\r\n\r\n", true,
                  "HTTP/1.1 421", "\"err_code\":7");
    next_opts.http_hosts = "*";
    expect_status("GET /v1/health HTTP/1.1\r\nHost: any.example\r\n\r\n", true, "HTTP/1.1 200",
                  "\"ok\":true");
    next_opts.http_hosts = "api.example";
    expect_status("GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n", true, "HTTP/1.1 421",
                  "err_code");
    /* two Host headers: a bad head */
    expect_status("GET /v1/health HTTP/1.1\r\nHost: localhost\r\nHost: evil\r\n\r\n", true,
                  "HTTP/1.1 400", "\"err_code\":1");
}

/* Without a permissions file, writes need a loopback peer: refused before the body, err_code 7
 * with the reason; reads stay open; with a permissions file the address does not matter. */
static void test_writes_need_loopback_or_perms(void **state)
{
    (void)state;
    static const char *const writes[] = {
        "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 15\r\n\r\n{\"content\":\"a\"}",
        "POST /v1/topics HTTP/1.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 16\r\n\r\n{\"topic\":\"news\"}",
        "POST /v1/topics/orders/offline HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
        "POST /v1/topics/orders/consumers/c1/offset HTTP/1.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 12\r\n\r\n{\"offset\":0}", /* 0: within the empty topic (err 17) */
    };
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        fake_peer_addr = "192.0.2.7:5000";
        cq_mqsrv_t *s = one(writes[i], true, false);
        if (strncmp(fk.out, "HTTP/1.1 403", 12) != 0)
            fprintf(stderr, "# %s -> %s\n", writes[i], fk.out);
        assert_memory_equal(fk.out, "HTTP/1.1 403 Forbidden\r\n", 24);
        assert_non_null(strstr(fk.out, "\"err_code\":7,\"err_msg\":\"module 0 needs a permissions "
                                       "file (--mq-permissions-file) to write from an address "
                                       "that is not loopback\"}"));
        assert_int_equal(fk.npending, 0);
        cq_mqsrv_free(s);
        fake_peer_addr = "127.0.0.1:4000"; /* the same from loopback: submitted */
        s = one(writes[i], true, false);
        assert_int_equal(fk.outlen, 0);
        assert_int_equal(fk.npending, 1);
        while (fk.npending)
            complete_next(s, 1);
        cq_mqsrv_free(s);
    }
    /* reads from anywhere */
    fake_peer_addr = "[2001:db8::1]:5000";
    expect_status("GET /v1/topics/orders/messages?offset=0 HTTP/1.1\r\n\r\n", true, "HTTP/1.1 200",
                  "\"messages\":[]");
    /* with a permissions file, the module's rights decide */
    cq_mqperm_t *p = perms();
    next_opts.perms = p;
    expect_status("POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Type: application/json\r\n"
                  "Authorization: Bearer 1:tok\r\nContent-Length: 15\r\n\r\n{\"content\":\"a\"}",
                  true, "HTTP/1.1 200", "{\"offsets\":[1]}");
    cq_mqperm_free(p);
    fake_peer_addr = "127.0.0.1:4000";
}

/* The per-address budget: N wrong Authorization headers from one address, over new
 * connections, then any request from it gets 429 until the block ends, a right token too. */
static void test_auth_budget(void **state)
{
    (void)state;
    cq_authlim_opts_t lo = {.max_failures = 3, .window_ms = 600000, .backoff_ms = 600000};
    cq_authlim_t *lim = cq_authlim_new(&lo);
    cq_mqperm_t *p = perms();
    const char bad[] = "GET /v1/topics HTTP/1.1\r\nAuthorization: Bearer 1:guess\r\n\r\n";
    const char good[] = "GET /v1/topics HTTP/1.1\r\nAuthorization: Bearer 1:tok\r\n\r\n";
    fake_peer_addr = "10.1.1.1:1";
    for (int i = 0; i < 3; i++) {
        next_opts.perms = p;
        next_opts.authlim = lim;
        expect_status(bad, true, "HTTP/1.1 401", "\"err_code\":6");
    }
    next_opts.perms = p;
    next_opts.authlim = lim;
    expect_status(good, true, "HTTP/1.1 429 Too Many Requests",
                  "\"err_code\":6,\"err_msg\":\"too many failed authentications from this "
                  "address, retry later\"");
    fake_peer_addr = "10.1.1.2:1"; /* another address is not blocked */
    next_opts.perms = p;
    next_opts.authlim = lim;
    expect_status(good, true, "HTTP/1.1 200", "\"topics\":[");
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_authlim_metrics_append(lim, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_refused_total{port=\"mqhttp\"} 1\n"));
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_blocks_total 1\n"));
    cq_sbuf_done(&b);
    fake_peer_addr = "127.0.0.1:4000";
    cq_mqperm_free(p);
    cq_authlim_free(lim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_prefixes),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_close_in_flight),
        cmocka_unit_test(test_auth_before_body),
        cmocka_unit_test(test_cross_site),
        cmocka_unit_test(test_writes_need_loopback_or_perms),
        cmocka_unit_test(test_auth_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
