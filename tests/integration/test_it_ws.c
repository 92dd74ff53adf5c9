/* test_it_ws.c - chanqd's WebSocket listener at the HTTP level, with raw sockets: static files
 * from --web-root (and what must not be served), upgrade refusals (path, Origin, version), the
 * default Origin rule on public and loopback listeners, the message size limit, and a WSS listener
 * with an unusable certificate refusing to start. Frame-level conformance is run_ws_conformance.sh;
 * full scenarios run through the bridges. */
#include "it_common.h"

#include "cq_err.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY "dGhlIHNhbXBsZSBub25jZQ=="

/* Reads until the peer closes or the buffer is full; returns the length (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    return n;
}

/* Sends req on a new connection to the WS port and returns the whole answer (until close, or
 * the first 2 s of it for an accepted upgrade). */
static char *ask(const char *req)
{
    int fd = cq_raw_connect(it_srv()->ws_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, req, strlen(req)), 0);
    static char buf[65536];
    read_all(fd, buf, sizeof(buf), 2000);
    close(fd);
    return buf;
}

static void test_web_root(void **state)
{
    const char *page = it_file("index.html", "<h1>chat</h1>\n");
    char root[512];
    snprintf(root, sizeof(root), "%s", page);
    *strrchr(root, '/') = '\0';
    it_start("--web-root", root, NULL);
    char *r = ask("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    assert_non_null(strstr(r, "text/html"));
    assert_non_null(strstr(r, "<h1>chat</h1>"));
    r = ask("HEAD /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 200"));
    assert_null(strstr(r, "<h1>"));
    /* nothing outside the root, and no missing files */
    r = ask("GET /../ready HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    r = ask("GET /nope.js HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
}

static void test_upgrade_refusals(void **state)
{
    it_start("--ws-path", "/game", "--ws-origins", "https://game.example", NULL);
    char *r = ask("GET /other HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    r = ask("GET /game HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n"
            "Origin: https://evil.example\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 403"));
    r = ask("GET /game HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 8\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 426"));
    assert_non_null(strstr(r, "Sec-WebSocket-Version: 13"));
    /* no web root: a plain GET is a 404, not a crash */
    r = ask("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    /* the allowed Origin upgrades (RFC 6455's sample key and accept) */
    r = ask("GET /game?x=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n"
            "Origin: https://game.example\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 101"));
    assert_non_null(strstr(r, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
}

/* The answer's status line to an upgrade to "/" with Host host and Origin origin (NULL: none). */
static const char *upgrade_status(const char *host, const char *origin)
{
    char req[512];
    snprintf(req, sizeof(req),
             "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n%s%s%s\r\n",
             host, origin ? "Origin: " : "", origin ? origin : "", origin ? "\r\n" : "");
    int fd = cq_raw_connect(it_srv()->ws_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, req, strlen(req)), 0);
    static char buf[4096];
    size_t n = 0;
    while (n + 1 < sizeof(buf) && !memmem(buf, n, "\r\n", 2)) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t k = poll(&p, 1, IT_TIMEOUT_MS) == 1 ? read(fd, buf + n, sizeof(buf) - 1 - n) : 0;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = '\0';
    char *eol = strstr(buf, "\r\n");
    if (eol)
        *eol = '\0';
    return buf;
}

/* Without --ws-origins, a listener other hosts can reach (here: every address) refuses pages
 * of another origin with 403; its own pages and clients that send no Origin (not browsers)
 * still upgrade. */
static void test_origin_default_public(void **state)
{
    it_start("--ws-addr", "0.0.0.0:0", "--dev", NULL);
    char host[64], self[80];
    snprintf(host, sizeof(host), "127.0.0.1:%u", it_srv()->ws_port);
    snprintf(self, sizeof(self), "http://%s", host);
    assert_string_equal(upgrade_status(host, "https://evil.example"), "HTTP/1.1 403 Forbidden");
    assert_string_equal(upgrade_status(host, "null"), "HTTP/1.1 403 Forbidden");
    assert_string_equal(upgrade_status(host, self), "HTTP/1.1 101 Switching Protocols");
    assert_string_equal(upgrade_status(host, NULL), "HTTP/1.1 101 Switching Protocols");
    assert_true(cq_testsrv_log_wait(it_srv(), "HTTP 403", IT_TIMEOUT_MS));
}

/* On loopback the default stays open: a page served from another local port may connect. */
static void test_origin_default_loopback(void **state)
{
    it_start(NULL);
    char host[64];
    snprintf(host, sizeof(host), "127.0.0.1:%u", it_srv()->ws_port);
    assert_string_equal(upgrade_status(host, "http://localhost:8080"),
                        "HTTP/1.1 101 Switching Protocols");
    assert_string_equal(upgrade_status(host, "https://evil.example"),
                        "HTTP/1.1 101 Switching Protocols");
}

/* A message over --ws-max-message fails that connection with 1009; others keep working. */
static void test_message_limit(void **state)
{
    it_start("--ws-max-message", "1k", NULL);
    int fd = cq_raw_connect(it_srv()->ws_port);
    assert_true(fd >= 0);
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n";
    assert_int_equal(cq_raw_write(fd, req, strlen(req)), 0);
    /* masked binary frame of 2000 bytes (16-bit length), mask 0 */
    uint8_t frame[4 + 4 + 2000] = {0x82, 0x80 | 126, 2000 >> 8, 2000 & 0xff, 0, 0, 0, 0};
    assert_int_equal(cq_raw_write(fd, frame, sizeof(frame)), 0);
    static char buf[4096];
    size_t n = read_all(fd, buf, sizeof(buf), 2000);
    close(fd);
    char *end = strstr(buf, "\r\n\r\n");
    assert_non_null(end);
    const uint8_t *f = (const uint8_t *)end + 4;
    assert_true((size_t)((const char *)f - buf) + 4 <= n);
    assert_int_equal(f[0], 0x88); /* Close */
    assert_int_equal((f[2] << 8) | f[3], 1009);
    /* the server still answers */
    char *r = ask("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
}

/* An unusable certificate stops chanqd at start with the reason. */
static void test_bad_certificate(void **state)
{
    const char *cert = it_file("cert.pem", "not a certificate\n");
    const char *args[] = {"--wss-addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", cert, NULL};
    assert_int_equal(cq_testsrv_start(it_srv(), args), -ECHILD);
    assert_true(cq_testsrv_log_wait(it_srv(), "cannot load the TLS certificate", 2000));
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_web_root),
    IT_TEST(test_upgrade_refusals),
    IT_TEST(test_origin_default_public),
    IT_TEST(test_origin_default_loopback),
    IT_TEST(test_message_limit),
    IT_TEST(test_bad_certificate),
};

IT_MAIN(tests)
