/* test_it_mqhttp.c - the durable-topic HTTP/JSON API end to end: a real chanqd on the embedded
 * SQLite store, driven by a tiny blocking HTTP/1.1 client over a socket (keep-alive; JSON bodies
 * parsed with jansson). Every endpoint, permissions, offline topics, and bad input; each bad
 * request is followed by a request proving the server still serves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_mq.h"
#include "cq_testsrv.h"

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

static cq_testsrv_t srv;

static const char perms_json[] =
    "{\"1\": {\"token\": \"s1\", \"admin\": true, \"produce\": [\"*\"], \"consume\": [\"*\"]},"
    " \"2\": {\"token\": \"s2\", \"consume\": [\"orders\"]},"
    " \"3\": {\"token\": \"s3\", \"produce\": [\"orders\"]}}";

/* ---- server --------------------------------------------------------------------------------- */

static void start_srv(const char *const *extra)
{
    int r = cq_testsrv_start(&srv, extra);
    if (r < 0) {
        char *log = cq_testsrv_log(&srv);
        fprintf(stderr, "# chanqd did not start (%d):\n%s\n", r, log ? log : "");
        free(log);
    }
    assert_int_equal(r, 0);
    assert_true(srv.mq_http_port > 0);
}

static void start_with_perms(void)
{
    char path[512];
    assert_int_equal(cq_testsrv_file(&srv, "perms.json", perms_json, path, sizeof(path)), 0);
    const char *args[] = {"--mq-permissions-file", path, "--mq-max-content", "100", NULL};
    start_srv(args);
}

static int setup(void **state)
{
    (void)state;
    return cq_testsrv_init(&srv);
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
    for (size_t i = 0; i < len; i++) {
        int c = read_byte(fd);
        assert_true(c >= 0);
        body[i] = (char)c;
    }
    r.body = json_loadb(body, len, 0, NULL);
    free(body);
    return r;
}

/* Sends one request: auth "" = no Authorization header, body NULL = none. */
static void hsend(int fd, const char *method, const char *path, const char *auth, const char *body)
{
    char buf[16384];
    int n = snprintf(buf, sizeof(buf), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path);
    if (strcmp(method, "POST") == 0)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "Content-Type: application/json\r\n");
    if (*auth)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "Authorization: Bearer %s\r\n", auth);
    n += snprintf(buf + n, sizeof(buf) - (size_t)n, "Content-Length: %zu\r\n\r\n%s",
                  body ? strlen(body) : 0, body ? body : "");
    assert_true(n > 0 && (size_t)n < sizeof(buf));
    assert_int_equal(cq_raw_write(fd, buf, (size_t)n), 0);
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
    start_srv(NULL);
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
    start_srv(NULL);
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
    start_srv(NULL);
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
    start_srv(NULL);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permissions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_split, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
