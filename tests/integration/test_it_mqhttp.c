/* test_it_mqhttp.c - the durable-topic HTTP/JSON API end to end: a real chanqd on the embedded
 * SQLite store (--backend=sqlite) or on the MariaDB server run_mariadb.sh started
 * (--backend=mysql, CQ_MARIADB_PORT), driven by a tiny blocking HTTP/1.1 client over a socket
 * (keep-alive; JSON bodies parsed with jansson). Every endpoint, permissions, offline topics,
 * bad input, consume bounds and storage errors; each bad request is followed by a request
 * proving the server still serves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_mq.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 5000

static const char perms_json[] =
    "{\"1\": {\"token\": \"s1\", \"admin\": true, \"produce\": [\"*\"], \"consume\": [\"*\"]},"
    " \"2\": {\"token\": \"s2\", \"consume\": [\"orders\"]},"
    " \"3\": {\"token\": \"s3\", \"produce\": [\"orders\"]}}";

/* ---- server --------------------------------------------------------------------------------- */

static void start_with_perms(void)
{
    char path[512];
    assert_int_equal(cq_testsrv_file(&srv, "perms.json", perms_json, path, sizeof(path)), 0);
    const char *args[] = {"--mq-permissions-file", path, "--mq-max-content", "100", NULL};
    itmq_start(args, ITMQ_HTTP);
}

static int setup(void **state)
{
    (void)state;
    itmq_init("cqhttp");
    return 0;
}

static void hclose_all(void);

static int teardown(void **state)
{
    (void)state;
    hclose_all(); /* a failed case may leave the keep-alive connection open */
    cq_testsrv_stop(&srv);
    return 0;
}

/* ---- a tiny blocking HTTP client ---------------------------------------------------------- */

typedef struct hresp {
    int status;
    json_t *body; /* owned, NULL when the body is not JSON */
    bool close;   /* the server said Connection: close */
} hresp_t;

static int hopen(void)
{
    int fd = cq_raw_connect(srv.mq_http_port);
    assert_true(fd >= 0);
    return fd;
}

/* Reads one byte with a timeout; -1 on EOF or timeout. */
static int read_byte(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    unsigned char c;
    if (poll(&p, 1, TMO) <= 0 || read(fd, &c, 1) != 1)
        return -1;
    return c;
}

/* Reads one response. status -1 when the connection closed first. */
static hresp_t hread(int fd)
{
    hresp_t r = {-1, NULL, false};
    char head[8192];
    size_t n = 0;
    while (n < sizeof(head) - 1 && (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4) != 0)) {
        int c = read_byte(fd);
        if (c < 0)
            return r;
        head[n++] = (char)c;
    }
    head[n] = '\0';
    assert_int_equal(sscanf(head, "HTTP/1.1 %d", &r.status), 1);
    const char *cl = strstr(head, "Content-Length: ");
    assert_non_null(cl);
    size_t len = (size_t)strtoul(cl + 16, NULL, 10);
    r.close = strstr(head, "Connection: close") != NULL;
    char *body = malloc(len + 1);
    assert_non_null(body);
    for (size_t i = 0; i < len;) { /* the body's length is known: read it in chunks */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t k = poll(&p, 1, TMO) == 1 ? read(fd, body + i, len - i) : -1;
        assert_true(k > 0);
        i += (size_t)k;
    }
    r.body = json_loadb(body, len, 0, NULL);
    free(body);
    return r;
}

/* Sends one request: auth "" = no Authorization header, body NULL = none. */
static void hsend(int fd, const char *method, const char *path, const char *auth, const char *body)
{
    size_t cap = 16384 + (body ? strlen(body) : 0);
    char *buf = malloc(cap);
    assert_non_null(buf);
    int n = snprintf(buf, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path);
    if (strcmp(method, "POST") == 0)
        n += snprintf(buf + n, cap - (size_t)n, "Content-Type: application/json\r\n");
    if (*auth)
        n += snprintf(buf + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", auth);
    n += snprintf(buf + n, cap - (size_t)n, "Content-Length: %zu\r\n\r\n%s",
                  body ? strlen(body) : 0, body ? body : "");
    assert_true(n > 0 && (size_t)n < cap);
    assert_int_equal(cq_raw_write(fd, buf, (size_t)n), 0);
    free(buf);
}

static int conn_fd = -1;

/* One request on the shared keep-alive connection (reopened when the server closed it). */
static hresp_t call(const char *method, const char *path, const char *auth, const char *body)
{
    if (conn_fd < 0)
        conn_fd = hopen();
    hsend(conn_fd, method, path, auth, body);
    hresp_t r = hread(conn_fd);
    if (r.close || r.status < 0) {
        close(conn_fd);
        conn_fd = -1;
    }
    return r;
}

static void hclose_all(void)
{
    if (conn_fd >= 0)
        close(conn_fd);
    conn_fd = -1;
}

static int64_t jint(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return (int64_t)json_integer_value(v);
}

/* Asserts status and, for an error, err_code. */
static void expect(const char *method, const char *path, const char *auth, const char *body,
                   int status, int err_code)
{
    hresp_t r = call(method, path, auth, body);
    if (r.status != status)
        fprintf(stderr, "# %s %s: got %d\n", method, path, r.status);
    assert_int_equal(r.status, status);
    assert_non_null(r.body);
    if (status != 200)
        assert_int_equal(jint(r.body, "err_code"), err_code);
    json_decref(r.body);
}

/* The server still serves. */
static void alive(void)
{
    expect("GET", "/v1/health", "", NULL, 200, 0);
}

/* ---- cases ---------------------------------------------------------------------------------- */

static void test_endpoints(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_HTTP);
    hresp_t r = call("GET", "/v1/health", "", NULL);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.body, "ok")));
    json_decref(r.body);

    r = call("POST", "/v1/topics", "", "{\"topic\": \"orders\", \"retention_days\": 7}");
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.body, "created")));
    json_decref(r.body);
    r = call("POST", "/v1/topics", "", "{\"topic\": \"orders\"}");
    assert_true(json_is_false(json_object_get(r.body, "created")));
    json_decref(r.body);

    r = call("GET", "/v1/topics", "", NULL);
    json_t *t0 = json_array_get(json_object_get(r.body, "topics"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "topic")), "orders");
    assert_true(json_is_true(json_object_get(t0, "online")));
    assert_int_equal(jint(t0, "retention_days"), 7);
    json_decref(r.body);

    r = call("POST", "/v1/topics/orders/messages", "", "{\"content\": \"hello\"}");
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(r.body, "offsets"), 0)), 1);
    json_decref(r.body);
    r = call("POST", "/v1/topics/orders/messages", "",
             "{\"messages\": [{\"content\": {\"a\": 1}}, {\"content\": \"x\", \"producer_id\": 7, "
             "\"seq\": 1}]}");
    assert_int_equal(json_array_size(json_object_get(r.body, "offsets")), 2);
    json_decref(r.body);
    /* an idempotent retry gets the same offset */
    r = call("POST", "/v1/topics/orders/messages", "",
             "{\"content\": \"x\", \"producer_id\": 7, \"seq\": 1}");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(r.body, "offsets"), 0)), 3);
    json_decref(r.body);

    r = call("GET", "/v1/topics/orders/messages?offset=1&max=10", "", NULL);
    assert_int_equal(r.status, 200);
    json_t *msgs = json_object_get(r.body, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    assert_int_equal(jint(json_array_get(msgs, 0), "offset"), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
                        "{\"a\":1}");
    assert_true(jint(json_array_get(msgs, 1), "create_time") > 0);
    json_decref(r.body);

    r = call("GET", "/v1/topics/orders/consumers/billing/offset", "", NULL);
    assert_int_equal(jint(r.body, "offset"), 0);
    assert_true(json_is_false(json_object_get(r.body, "committed")));
    json_decref(r.body);
    expect("POST", "/v1/topics/orders/consumers/billing/offset", "", "{\"offset\": 2}", 200, 0);
    r = call("GET", "/v1/topics/orders/consumers/billing/offset", "", NULL);
    assert_int_equal(jint(r.body, "offset"), 2);
    json_decref(r.body);

    /* offline: produce and consume refused, offset calls still work; persisted across restart */
    expect("POST", "/v1/topics/orders/offline", "", NULL, 200, 0);
    expect("POST", "/v1/topics/orders/messages", "", "{\"content\": \"y\"}", 409,
           CQ_MQ_ERR_TOPIC_OFFLINE);
    expect("GET", "/v1/topics/orders/messages", "", NULL, 409, CQ_MQ_ERR_TOPIC_OFFLINE);
    hclose_all();
    assert_true(cq_testsrv_kill(&srv, SIGTERM) >= 0); /* keeps the store */
    itmq_start(NULL, ITMQ_HTTP);
    expect("GET", "/v1/topics/orders/messages", "", NULL, 409, CQ_MQ_ERR_TOPIC_OFFLINE);
    expect("POST", "/v1/topics/orders/online", "", NULL, 200, 0);
    expect("GET", "/v1/topics/orders/messages", "", NULL, 200, 0);
    expect("GET", "/v1/topics/nosuch/messages", "", NULL, 404, CQ_MQ_ERR_UNKNOWN_TOPIC);
    hclose_all();
}

static void test_permissions(void **state)
{
    (void)state;
    start_with_perms();
    alive(); /* health needs no credentials */
    expect("GET", "/v1/topics", "", NULL, 401, CQ_MQ_ERR_UNAUTHENTICATED);
    expect("GET", "/v1/topics", "1:wrong", NULL, 401, CQ_MQ_ERR_UNAUTHENTICATED);
    expect("GET", "/v1/topics", "x1:s1", NULL, 401, CQ_MQ_ERR_UNAUTHENTICATED);
    expect("POST", "/v1/topics", "2:s2", "{\"topic\": \"orders\"}", 403, CQ_MQ_ERR_NO_PERMISSION);
    expect("POST", "/v1/topics", "1:s1", "{\"topic\": \"orders\"}", 200, 0);
    expect("POST", "/v1/topics", "1:s1", "{\"topic\": \"other\"}", 200, 0);
    expect("POST", "/v1/topics/orders/messages", "2:s2", "{\"content\": \"x\"}", 403,
           CQ_MQ_ERR_NO_PERMISSION);
    expect("POST", "/v1/topics/other/messages", "3:s3", "{\"content\": \"x\"}", 403,
           CQ_MQ_ERR_NO_PERMISSION);
    expect("POST", "/v1/topics/orders/messages", "3:s3", "{\"content\": \"x\"}", 200, 0);
    expect("GET", "/v1/topics/orders/messages", "3:s3", NULL, 403, CQ_MQ_ERR_NO_PERMISSION);
    expect("GET", "/v1/topics/orders/messages", "2:s2", NULL, 200, 0);
    expect("POST", "/v1/topics/orders/consumers/c/offset", "3:s3", "{\"offset\": 1}", 403,
           CQ_MQ_ERR_NO_PERMISSION);
    expect("POST", "/v1/topics/orders/consumers/c/offset", "2:s2", "{\"offset\": 1}", 200, 0);
    expect("POST", "/v1/topics/orders/offline", "2:s2", NULL, 403, CQ_MQ_ERR_NO_PERMISSION);
    expect("POST", "/v1/topics/orders/offline", "1:s1", NULL, 200, 0);
    expect("POST", "/v1/topics/orders/messages", "3:s3", "{\"content\": \"x\"}", 409,
           CQ_MQ_ERR_TOPIC_OFFLINE);
    /* oversize content (--mq-max-content 100) and batch */
    char big[400];
    snprintf(big, sizeof(big), "{\"content\": \"%0200d\"}", 0);
    expect("POST", "/v1/topics/other/messages", "1:s1", big, 413, CQ_MQ_ERR_CONTENT_TOO_LARGE);
    alive();
    hclose_all();
}

/* Sends raw bytes on a fresh connection and expects status (and err_code) back. */
static void raw_expect(const char *bytes, int status, int err_code, bool closes)
{
    int fd = hopen();
    assert_int_equal(cq_raw_write(fd, bytes, strlen(bytes)), 0);
    hresp_t r = hread(fd);
    assert_int_equal(r.status, status);
    assert_int_equal(jint(r.body, "err_code"), err_code);
    assert_true(r.close == closes);
    json_decref(r.body);
    if (closes)
        assert_int_equal(read_byte(fd), -1);
    close(fd);
    alive();
}

static void test_bad_input(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_HTTP);
    expect("POST", "/v1/topics", "", "{\"topic\": \"orders\"}", 200, 0);
    /* bad JSON, wrong shapes */
    expect("POST", "/v1/topics/orders/messages", "", "{bad", 400, CQ_MQ_ERR_BAD_JSON);
    expect("POST", "/v1/topics/orders/messages", "", "[1]", 400, CQ_MQ_ERR_BAD_JSON);
    expect("POST", "/v1/topics/orders/messages", "", "{\"content\": 5}", 400, CQ_MQ_ERR_BAD_FIELD);
    expect("POST", "/v1/topics/orders/messages", "", "{\"messages\": []}", 400,
           CQ_MQ_ERR_BAD_FIELD);
    expect("POST", "/v1/topics/orders/consumers/c/offset", "", "{\"offset\": -1}", 400,
           CQ_MQ_ERR_BAD_FIELD);
    expect("GET", "/v1/topics/orders/messages?offset=abc", "", NULL, 400, CQ_MQ_ERR_BAD_FIELD);
    alive();
    /* bad topic names, SQL metacharacters included, in the path and in a body */
    expect("GET", "/v1/topics/a';DROP%20TABLE%20t_orders;--/messages", "", NULL, 400,
           CQ_MQ_ERR_BAD_TOPIC_NAME);
    expect("POST", "/v1/topics/orders%60/messages", "", "{\"content\": \"x\"}", 400,
           CQ_MQ_ERR_BAD_TOPIC_NAME);
    expect("POST", "/v1/topics", "", "{\"topic\": \"x; DROP TABLE t_orders\"}", 400,
           CQ_MQ_ERR_BAD_TOPIC_NAME);
    expect("POST", "/v1/topics", "",
           "{\"topic\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
           400, CQ_MQ_ERR_BAD_TOPIC_NAME);
    /* unknown paths and methods */
    expect("GET", "/v1/nope", "", NULL, 404, CQ_MQ_ERR_UNKNOWN_TYPE);
    expect("DELETE", "/v1/topics/orders/messages", "", NULL, 404, CQ_MQ_ERR_UNKNOWN_TYPE);
    expect("GET", "/", "", NULL, 404, CQ_MQ_ERR_UNKNOWN_TYPE);
    /* framing errors: answered, then closed */
    raw_expect("POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n",
               413, CQ_MQ_ERR_BAD_LENGTH, true);
    raw_expect("GARBAGE\r\n\r\n", 400, CQ_MQ_ERR_BAD_HEADER, true);
    raw_expect("GET /v1/health HTTP/2.0\r\n\r\n", 400, CQ_MQ_ERR_BAD_HEADER, true);
    raw_expect("POST /v1/topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
               CQ_MQ_ERR_BAD_HEADER, true);
    char *huge = malloc(20000);
    assert_non_null(huge);
    memset(huge, 'a', 19999);
    huge[19999] = '\0';
    memcpy(huge, "GET /v1/health HTTP/1.1\r\nX: ", 28);
    raw_expect(huge, 413, CQ_MQ_ERR_BAD_LENGTH, true);
    free(huge);
    /* Connection: close is honoured */
    raw_expect("GET /v1/nope HTTP/1.1\r\nConnection: close\r\n\r\n", 404, CQ_MQ_ERR_UNKNOWN_TYPE,
               true);
    hclose_all();
}

static void test_pipelined_split(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_HTTP);
    expect("POST", "/v1/topics", "", "{\"topic\": \"orders\"}", 200, 0);
    const char req[] = "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Length: 17\r\n"
                       "Content-Type: application/json\r\n\r\n"
                       "{\"content\": \"a\"}\n"
                       "POST /v1/topics/orders/messages HTTP/1.1\r\nContent-Length: 16\r\n"
                       "Content-Type: application/json\r\n\r\n"
                       "{\"content\": \"b\"}"
                       "GET /v1/topics/orders/messages?offset=0 HTTP/1.1\r\n\r\n";
    int fd = hopen();
    /* byte by byte, then everything at once */
    for (size_t i = 0; i < sizeof(req) - 1; i++) {
        assert_int_equal(cq_raw_write(fd, req + i, 1), 0);
        if (i % 16 == 0)
            usleep(1000);
    }
    assert_int_equal(cq_raw_write(fd, req, sizeof(req) - 1), 0);
    int64_t last = 0;
    for (int i = 0; i < 6; i++) {
        hresp_t r = hread(fd);
        assert_int_equal(r.status, 200);
        if (i % 3 < 2) {
            int64_t off = json_integer_value(json_array_get(json_object_get(r.body, "offsets"), 0));
            assert_true(off > last);
            last = off;
        } else {
            assert_int_equal(json_array_size(json_object_get(r.body, "messages")), i == 2 ? 2 : 4);
        }
        json_decref(r.body);
    }
    close(fd);
    alive();
    hclose_all();
}

/* ---- consume: next_offset, the caps; storage errors ---------------------------------------- */

static hresp_t call_ok(const char *method, const char *path, const char *body)
{
    hresp_t r = call(method, path, "", body);
    assert_int_equal(r.status, 200);
    assert_non_null(r.body);
    return r;
}

/* GET messages after offset (max 0: none asked); asserts n messages and next_offset. */
static void consume_expect(const char *topic, int64_t offset, int max, size_t n, int64_t next)
{
    char path[160];
    snprintf(path, sizeof(path), "/v1/topics/%s/messages?offset=%lld%s%.0d", topic,
             (long long)offset, max ? "&max=" : "", max);
    hresp_t r = call_ok("GET", path, NULL);
    assert_int_equal(json_array_size(json_object_get(r.body, "messages")), n);
    assert_int_equal(jint(r.body, "next_offset"), next);
    json_decref(r.body);
}

/* Produces n messages "<i>" padded with pad bytes 'p', in requests of at most 500; returns the
 * last offset. */
static int64_t produce_n(const char *topic, size_t n, size_t pad, int64_t *offs)
{
    char path[128];
    snprintf(path, sizeof(path), "/v1/topics/%s/messages", topic);
    size_t cap = 500 * (pad + 48) + 64;
    char *body = malloc(cap);
    assert_non_null(body);
    int64_t last = 0;
    for (size_t i = 0; i < n;) {
        size_t len = (size_t)snprintf(body, cap, "{\"messages\": [");
        for (size_t k = 0; k < 500 && i + k < n; k++) {
            len += (size_t)snprintf(body + len, cap - len, "%s{\"content\": \"%zu", k ? "," : "",
                                    i + k);
            memset(body + len, 'p', pad);
            len += pad;
            len += (size_t)snprintf(body + len, cap - len, "\"}");
        }
        snprintf(body + len, cap - len, "]}");
        hresp_t r = call_ok("POST", path, body);
        json_t *o = json_object_get(r.body, "offsets");
        for (size_t k = 0; k < json_array_size(o); k++, i++) {
            last = (int64_t)json_integer_value(json_array_get(o, k));
            if (offs)
                offs[i] = last;
        }
        json_decref(r.body);
    }
    free(body);
    return last;
}

/* next_offset is the offset asked for when nothing comes back (never 0); max is capped at 1000;
 * big messages are trimmed to what fits in the seed protocol's frame maximum. */
static void test_consume_limits(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_HTTP);
    expect("POST", "/v1/topics", "", "{\"topic\": \"many\"}", 200, 0);
    consume_expect("many", 0, 0, 0, 0);
    consume_expect("many", 12345, 0, 0, 12345); /* empty topic, an offset past the end */
    static int64_t off[1500];
    int64_t last = produce_n("many", 1500, 0, off);
    consume_expect("many", last, 10, 0, last);
    consume_expect("many", last + 77, 0, 0, last + 77);
    consume_expect("many", 0, 5000, 1000, off[999]);
    consume_expect("many", off[999], 5000, 500, last);
    /* 40 messages of 60 KB: 17 fit in one answer (about 1 MiB), as over the seed protocol */
    expect("POST", "/v1/topics", "", "{\"topic\": \"big\"}", 200, 0);
    static int64_t big[40];
    produce_n("big", 40, 60000, big);
    consume_expect("big", 0, 100, 17, big[16]);
    consume_expect("big", big[16], 100, 17, big[33]);
    consume_expect("big", big[33], 100, 6, big[39]);
    hclose_all();
}

/* A store failure is 503 with err_code 12 (storage), not 500; the server keeps serving. */
static void test_storage_error(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_HTTP);
    expect("POST", "/v1/topics", "", "{\"topic\": \"gone\"}", 200, 0);
    expect("POST", "/v1/topics", "", "{\"topic\": \"kept\"}", 200, 0);
    expect("POST", "/v1/topics/gone/messages", "", "{\"content\": \"a\"}", 200, 0);
    itmq_drop_table("t_gone");
    expect("POST", "/v1/topics/gone/messages", "", "{\"content\": \"b\"}", 503, CQ_MQ_ERR_STORAGE);
    expect("GET", "/v1/topics/gone/messages?offset=0", "", NULL, 503, CQ_MQ_ERR_STORAGE);
    expect("POST", "/v1/topics/kept/messages", "", "{\"content\": \"c\"}", 200, 0);
    alive();
    hclose_all();
}

int main(int argc, char **argv)
{
    if (!itmq_backend(argc, argv, true))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permissions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_consume_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storage_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
