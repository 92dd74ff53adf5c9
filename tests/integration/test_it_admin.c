/* test_it_admin.c - the admin listener of a real chanqd (--admin-addr), over raw sockets: each
 * request gets its whole response, byte for byte where the bytes are known, and the connection
 * is closed after it (Connection: close). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_testsrv.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO 5000

static cq_testsrv_t srv;

static int setup(void **state)
{
    (void)state;
    const char *args[] = {"--ws-addr", "", "--kcp-addr", "", NULL};
    assert_int_equal(cq_testsrv_init(&srv), 0);
    assert_int_equal(cq_testsrv_start(&srv, args), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_testsrv_stop(&srv);
    return 0;
}

/* Sends req on a new connection and returns everything until the server closes (malloc'd). */
static char *ask(const char *req)
{
    int fd = cq_raw_connect(srv.admin_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, req, strlen(req)), 0);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, TMO), 1); /* the close must come */
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        assert_true(n >= 0);
        if (n == 0)
            break;
        len += (size_t)n;
        assert_true(len < cap - 1);
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}

static void expect(const char *req, const char *want)
{
    char *got = ask(req);
    assert_string_equal(got, want);
    free(got);
}

#define TEXT "Content-Type: text/plain; charset=utf-8\r\n"

static void test_healthz(void **state)
{
    (void)state;
    expect("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
           "HTTP/1.1 200 OK\r\n" TEXT "Content-Length: 3\r\nConnection: close\r\n\r\nok\n");
    /* a query string does not change the path */
    expect("GET /healthz?probe=1 HTTP/1.0\r\n\r\n",
           "HTTP/1.1 200 OK\r\n" TEXT "Content-Length: 3\r\nConnection: close\r\n\r\nok\n");
}

static void test_metrics(void **state)
{
    (void)state;
    char *got = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        "Content-Length: ";
    assert_memory_equal(got, head, sizeof(head) - 1);
    char *body = strstr(got, "\r\n\r\n");
    assert_non_null(body);
    body += 4;
    assert_int_equal(strtoul(got + sizeof(head) - 1, NULL, 10), strlen(body));
    /* the core's, the listeners' and the MQ port's sources, in that order */
    char *core = strstr(body, "\nconnection_num{type=\"CLIENT\"} 0\n");
    char *io = strstr(body, "\nchanq_listener_closes_total{port=\"admin\",reason=\"cap\"} 0\n");
    char *mq = strstr(body, "\nchanq_mq_topics 0\n");
    assert_non_null(core);
    assert_non_null(io);
    assert_non_null(mq);
    assert_true(core < io && io < mq);
    free(got);
}

static void test_errors(void **state)
{
    (void)state;
    expect("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
           "HTTP/1.1 404 Not Found\r\n" TEXT
           "Content-Length: 10\r\nConnection: close\r\n\r\nnot found\n");
    expect("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 405 Method Not Allowed\r\n" TEXT
           "Content-Length: 9\r\nConnection: close\r\n\r\nonly GET\n");
    expect("GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n",
           "HTTP/1.1 400 Bad Request\r\n" TEXT
           "Content-Length: 12\r\nConnection: close\r\n\r\nbad request\n");
    expect("\x01\x02\x03 garbage\r\n\r\n",
           "HTTP/1.1 400 Bad Request\r\n" TEXT "Content-Length: 12\r\nConnection: close\r\n\r\n"
           "bad request\n");
    /* and the listener still serves */
    expect("GET /healthz HTTP/1.0\r\n\r\n",
           "HTTP/1.1 200 OK\r\n" TEXT "Content-Length: 3\r\nConnection: close\r\n\r\nok\n");
}

/* The value of the sample `series` (name and labels, exactly as written) in /metrics; -1 when
 * absent. */
static double series(const char *name_labels)
{
    char *got = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s ", name_labels);
    char *p = strstr(got, needle);
    double v = p ? strtod(p + strlen(needle), NULL) : -1;
    free(got);
    return v;
}

/* channeld's names (logs, packets_drop/frag/comb, channel_tick_duration) and chanq's own relay
 * metrics (doc/metrics.md), with exact values: two authenticated TCP clients and one raw
 * connection that sent half a packet header. */
static void test_relay_metrics(void **state)
{
    (void)state;
    chanq_sync_t *a = cq_testsrv_connect(&srv, false, NULL, NULL);
    chanq_sync_t *b = cq_testsrv_connect(&srv, false, NULL, NULL);
    assert_non_null(a);
    assert_non_null(b);
    int res = -1;
    assert_int_equal(chanq_sync_auth(a, "pit", "lt", TMO, &res, NULL), 0);
    assert_int_equal(res, 0);
    assert_int_equal(chanq_sync_auth(b, "pit", "lt", TMO, &res, NULL), 0);
    assert_int_equal(res, 0);
    int fd = cq_raw_connect(srv.client_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, "CH", 2), 0); /* a read that ends mid-header */
    assert_int_equal(cq_testsrv_metric_wait_ge(&srv, "packets_frag", 1, TMO), 1);
    assert_true(series("chanq_connections{transport=\"tcp\",type=\"CLIENT\"}") == 3);
    assert_true(series("chanq_connections{transport=\"tcp\",type=\"SERVER\"}") == 0);
    assert_true(series("chanq_connections{transport=\"ws\",type=\"CLIENT\"}") == 0);
    assert_true(series("chanq_connections{transport=\"kcp\",type=\"CLIENT\"}") == 0);
    assert_true(series("connection_num{type=\"CLIENT\"}") == 3);
    assert_true(series("packets_frag{connType=\"CLIENT\"}") == 1);
    /* one AUTH packet parsed per client */
    assert_true(series("packets_comb{connType=\"CLIENT\"}") == 2);
    assert_true(series("packets_in{connType=\"CLIENT\"}") == 2);
    assert_true(series("packets_drop{connType=\"CLIENT\"}") == 0);
    assert_true(series("chanq_subscribers") == 0);
    assert_true(series("chanq_fanouts_total") == 0);
    assert_true(series("channel_tick_duration{type=\"GLOBAL\"}") >= 0);
    assert_true(series("logs{level=\"warn\"}") >= 0);
    assert_true(series("logs{level=\"error\"}") >= 0);
    assert_true(series("chanq_mq_role{shard=\"0\"}") == 1);
    close(fd);
    chanq_sync_free(a);
    chanq_sync_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relay_metrics, setup, teardown),
    };
    return cmocka_run_group_tests_name("admin", tests, NULL, NULL);
}
