/* tests/unit/transport/ws: the HTTP upgrade parser (src/transport/ws/cq_wsup).
 *
 * Habits from style.md §12: every prefix and every two-way split of valid requests, input
 * placed right before a PROT_NONE guard page, every error status with its response, and a
 * fail-N allocation loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_wsup.h"
#include "test_alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* RFC 6455 section 1.3 sample. */
#define KEY    "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static const char UPGRADE[] = "GET /chat?room=1 HTTP/1.1\r\n"
                              "Host: server.example.com\r\n"
                              "Upgrade: websocket\r\n"
                              "Connection: Upgrade\r\n"
                              "Sec-WebSocket-Key: " KEY "\r\n"
                              "Origin: http://example.com\r\n"
                              "Sec-WebSocket-Protocol: chat, superchat\r\n"
                              "Sec-WebSocket-Version: 13\r\n"
                              "\r\n";

static const cq_wsup_config_t CHAT = {.path = "/chat"};

/* ---- helpers --------------------------------------------------------------------------- */

/* Copies len bytes so that they end right before a PROT_NONE page: any read past the end
 * faults. Release with guard_free(). */
static uint8_t *guard_copy(const void *data, size_t len, void **ret_map, size_t *ret_maplen)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (len + page - 1) / page * page + page;
    uint8_t *map = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span - page, page, PROT_NONE), 0);
    uint8_t *p = map + span - page - len;
    memcpy(p, data, len);
    *ret_map = map;
    *ret_maplen = span;
    return p;
}

static void guard_free(void *map, size_t maplen)
{
    munmap(map, maplen);
}

/* Feeds the whole of s (from a guard page) in one call; returns the result. */
static int feed_all(cq_wsup_t *p, const char *s, size_t *used)
{
    void *map;
    size_t maplen, len = strlen(s);
    const uint8_t *g = guard_copy(s, len, &map, &maplen);
    int r = cq_wsup_feed(p, g, len, used);
    guard_free(map, maplen);
    return r;
}

/* Parses s whole with cfg and returns the result; *ret_status gets the HTTP status. */
static int parse(const cq_wsup_config_t *cfg, const char *s, int *ret_status)
{
    cq_wsup_t *p = cq_wsup_new(cfg);
    assert_non_null(p);
    size_t used = 0;
    int r = feed_all(p, s, &used);
    if (ret_status)
        *ret_status = cq_wsup_status(p);
    if (r == CQ_EHTTP)
        assert_true(strlen(cq_wsup_reason(p)) > 0);
    else
        assert_int_equal(cq_wsup_status(p), 0);
    cq_wsup_free(p);
    return r;
}

static void assert_status(const cq_wsup_config_t *cfg, const char *req, int status)
{
    int st = 0;
    int r = parse(cfg, req, &st);
    if (r != CQ_EHTTP || st != status)
        fail_msg("expected %d, got r=%d status=%d for:\n%s", status, r, st, req);
}

static void check_upgrade_request(const cq_wsup_t *p)
{
    const cq_wsup_request_t *q = cq_wsup_request(p);
    assert_non_null(q);
    assert_string_equal(q->path, "/chat");
    assert_string_equal(q->query, "room=1");
    assert_string_equal(q->host, "server.example.com");
    assert_string_equal(q->origin, "http://example.com");
    assert_string_equal(q->key, KEY);
    assert_string_equal(q->protocol, "chat, superchat");
    assert_false(q->head);
}

/* ---- valid requests -------------------------------------------------------------------- */

static void test_upgrade_whole(void **state)
{
    (void)state;
    cq_wsup_t *p = cq_wsup_new(&CHAT);
    assert_non_null(p);
    size_t used = 0;
    assert_int_equal(feed_all(p, UPGRADE, &used), CQ_WSUP_WEBSOCKET);
    assert_int_equal(used, strlen(UPGRADE));
    check_upgrade_request(p);
    /* sticky: later feeds take nothing and return the same result */
    assert_int_equal(cq_wsup_feed(p, (const uint8_t *)"x", 1, &used), CQ_WSUP_WEBSOCKET);
    assert_int_equal(used, 0);
    cq_wsup_free(p);
}

/* Every prefix is "need more"; every two-way split, with WebSocket bytes glued to the end,
 * gives the same request and leaves exactly the trailing bytes to the caller. */
static void test_upgrade_every_split(void **state)
{
    (void)state;
    static const char tail[] = "\x82\x85WSBYTES";
    size_t hlen = strlen(UPGRADE), tlen = sizeof(tail) - 1;
    char all[1024];
    memcpy(all, UPGRADE, hlen);
    memcpy(all + hlen, tail, tlen);
    size_t total = hlen + tlen;
    for (size_t k = 0; k < hlen; k++) {
        cq_wsup_t *p = cq_wsup_new(&CHAT);
        size_t used = 99;
        assert_int_equal(cq_wsup_feed(p, (const uint8_t *)all, k, &used), CQ_WSUP_NEED_MORE);
        assert_int_equal(used, k);
        assert_null(cq_wsup_request(p));
        int r = cq_wsup_feed(p, (const uint8_t *)all + k, total - k, &used);
        assert_int_equal(r, CQ_WSUP_WEBSOCKET);
        assert_int_equal(used, hlen - k);
        assert_memory_equal(all + k + used, tail, tlen);
        check_upgrade_request(p);
        cq_wsup_free(p);
    }
}

static void test_upgrade_byte_by_byte(void **state)
{
    (void)state;
    cq_wsup_t *p = cq_wsup_new(&CHAT);
    size_t len = strlen(UPGRADE), used = 0;
    for (size_t i = 0; i < len; i++) {
        int r = cq_wsup_feed(p, (const uint8_t *)UPGRADE + i, 1, &used);
        assert_int_equal(r, i + 1 < len ? CQ_WSUP_NEED_MORE : CQ_WSUP_WEBSOCKET);
        assert_int_equal(used, 1);
    }
    check_upgrade_request(p);
    cq_wsup_free(p);
}

static void test_upgrade_lenient_forms(void **state)
{
    (void)state;
    /* bare LF line endings, odd case, token lists, repeated Connection, absolute-form target */
    const char *req = "GET http://h.example/chat HTTP/1.1\n"
                      "host: h.example\n"
                      "UPGRADE: WebSocket\n"
                      "connection: keep-alive\n"
                      "Connection: foo, UPGRADE\n"
                      "sec-websocket-key:" KEY "  \n"
                      "Sec-WebSocket-Version:   13\n"
                      "Sec-WebSocket-Protocol: a\n"
                      "Sec-WebSocket-Protocol: b\n"
                      "Sec-WebSocket-Extensions: permessage-deflate\n"
                      "\n";
    cq_wsup_t *p = cq_wsup_new(&CHAT);
    size_t used;
    assert_int_equal(feed_all(p, req, &used), CQ_WSUP_WEBSOCKET);
    assert_int_equal(used, strlen(req));
    const cq_wsup_request_t *q = cq_wsup_request(p);
    assert_string_equal(q->path, "/chat");
    assert_null(q->query);
    assert_string_equal(q->key, KEY);
    assert_string_equal(q->protocol, "a, b");
    assert_null(q->origin);
    cq_wsup_free(p);
}

static void test_default_path(void **state)
{
    (void)state;
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: " KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n";
    assert_int_equal(parse(NULL, req, NULL), CQ_WSUP_WEBSOCKET);
    cq_wsup_config_t empty = {.path = ""};
    assert_int_equal(parse(&empty, req, NULL), CQ_WSUP_WEBSOCKET);
    assert_status(&CHAT, req, 404);
}

static void test_plain_get_and_head(void **state)
{
    (void)state;
    cq_wsup_t *p = cq_wsup_new(&CHAT);
    size_t used;
    const char *get = "GET /index.html?v=2#frag HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\nNEXT";
    assert_int_equal(feed_all(p, get, &used), CQ_WSUP_PLAIN);
    assert_int_equal(used, strlen(get) - 4);
    const cq_wsup_request_t *q = cq_wsup_request(p);
    assert_string_equal(q->path, "/index.html"); /* any path: no 404 for plain requests */
    assert_string_equal(q->query, "v=2");
    assert_false(q->head);
    assert_null(q->key);
    cq_wsup_free(p);

    p = cq_wsup_new(NULL);
    assert_int_equal(feed_all(p, "HEAD /x HTTP/1.0\r\n\r\n", &used), CQ_WSUP_PLAIN);
    assert_true(cq_wsup_request(p)->head);
    assert_string_equal(cq_wsup_request(p)->path, "/x");
    assert_null(cq_wsup_request(p)->host); /* HTTP/1.0 needs no Host */
    cq_wsup_free(p);

    /* an Upgrade to something else is ignored: a plain GET */
    assert_int_equal(parse(NULL, "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n", NULL),
                     CQ_WSUP_PLAIN);
    assert_int_equal(parse(NULL, "GET http://a HTTP/1.1\r\nHost: a\r\n\r\n", NULL), CQ_WSUP_PLAIN);
}

/* ---- errors ---------------------------------------------------------------------------- */

#define H "Host: x\r\n"
#define U "Upgrade: websocket\r\n"
#define C "Connection: Upgrade\r\n"
#define K "Sec-WebSocket-Key: " KEY "\r\n"
#define V "Sec-WebSocket-Version: 13\r\n"

static void test_status_400(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\r\n\r\n",
        "GET\r\n\r\n",
        "GET / HTTP/1.1 extra\r\n" H "\r\n",
        "GET  / HTTP/1.1\r\n" H "\r\n",
        "GET / HTTP/2.0\r\n" H "\r\n",
        "G(T / HTTP/1.1\r\n" H "\r\n",
        "GET * HTTP/1.1\r\n" H "\r\n",
        "GET /\x7f HTTP/1.1\r\n" H "\r\n",
        "GET / HTTP/1.1\r\n\r\n",                           /* no Host */
        "GET / HTTP/1.1\r\n" H "Bad Name: v\r\n\r\n",       /* space in name */
        "GET / HTTP/1.1\r\n" H "NoColon\r\n\r\n",           /* no colon */
        "GET / HTTP/1.1\r\n" H "X: a\x01z\r\n\r\n",         /* control character */
        "GET / HTTP/1.1\r\n" H "X: a\rz\r\n\r\n",           /* stray CR */
        "GET / HTTP/1.1\r\n" H "X: a\r\n b\r\n\r\n",        /* obs-fold */
        "GET / HTTP/1.1\r\n" H "X: a\r\n\tb\r\n\r\n",       /* obs-fold with a tab */
        "GET / HTTP/1.1\r\n" H H "\r\n",                    /* duplicate Host */
        "GET / HTTP/1.1\r\n" H "Content-Length: 5\r\n\r\n", /* body */
        "GET / HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.0\r\n" H U C K V "\r\n",                  /* upgrade needs 1.1 */
        "GET / HTTP/1.1\r\n" U C K V "\r\n",                    /* no Host */
        "GET / HTTP/1.1\r\n" H C K V "\r\n",                    /* missing Upgrade */
        "GET / HTTP/1.1\r\n" H "Upgrade: h2c\r\n" C K V "\r\n", /* wrong Upgrade */
        "GET / HTTP/1.1\r\n" H U K V "\r\n",                    /* missing Connection */
        "GET / HTTP/1.1\r\n" H U "Connection: keep-alive\r\n" K V "\r\n",
        "GET / HTTP/1.1\r\n" H U "Connection: upgrades\r\n" K V "\r\n",
        "GET / HTTP/1.1\r\n" H U C V "\r\n",     /* missing key */
        "GET / HTTP/1.1\r\n" H U C K K V "\r\n", /* duplicate key */
        "GET / HTTP/1.1\r\n" H U C V "Sec-WebSocket-Key: abc\r\n\r\n",
        "GET / HTTP/1.1\r\n" H U C V "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=\r\n\r\n",
        "GET / HTTP/1.1\r\n" H U C V "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j*Q==\r\n\r\n",
        "GET / HTTP/1.1\r\n" H U C V "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==x\r\n\r\n",
        "GET / HTTP/1.1\r\n" H U C V "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQAA\r\n\r\n",
        "GET / HTTP/1.1\r\n" H U C K V "Origin: a\r\nOrigin: a\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_status(NULL, bad[i], 400);
}

static void test_status_405_426_404(void **state)
{
    (void)state;
    assert_status(NULL, "POST / HTTP/1.1\r\n" H "\r\n", 405);
    assert_status(NULL, "PUT / HTTP/1.1\r\n" H U C K V "\r\n", 405);
    assert_status(NULL, "HEAD / HTTP/1.1\r\n" H U C K V "\r\n", 405);
    assert_status(NULL, "GET / HTTP/1.1\r\n" H U C K "\r\n", 426);
    assert_status(NULL, "GET / HTTP/1.1\r\n" H U C K "Sec-WebSocket-Version: 8\r\n\r\n", 426);
    assert_status(NULL, "GET / HTTP/1.1\r\n" H U C K V V "\r\n", 400);
    assert_status(NULL, "GET /other HTTP/1.1\r\n" H U C K V "\r\n", 404);
    assert_status(&CHAT, "GET /chat/ HTTP/1.1\r\n" H U C K V "\r\n", 404);
    assert_status(&CHAT, "GET /CHAT HTTP/1.1\r\n" H U C K V "\r\n", 404);
}

static void test_status_431(void **state)
{
    (void)state;
    /* default limit: 8 KiB */
    char big[9000];
    int n = snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    memset(big + n, 'a', sizeof(big) - (size_t)n - 1);
    big[sizeof(big) - 1] = '\0';
    assert_status(NULL, big, 431);

    /* a head of exactly max_head bytes fits; one byte more does not */
    const char *req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    cq_wsup_config_t cfg = {.max_head = strlen(req)};
    assert_int_equal(parse(&cfg, req, NULL), CQ_WSUP_PLAIN);
    cfg.max_head--;
    assert_status(&cfg, req, 431);

    /* fed in small pieces, the limit still holds */
    cq_wsup_config_t small = {.max_head = 64};
    cq_wsup_t *p = cq_wsup_new(&small);
    int r = CQ_WSUP_NEED_MORE;
    for (int i = 0; i < 100 && r == CQ_WSUP_NEED_MORE; i++)
        r = cq_wsup_feed(p, (const uint8_t *)"GET /aaaa", 9, NULL);
    assert_int_equal(r, CQ_EHTTP);
    assert_int_equal(cq_wsup_status(p), 431);
    cq_wsup_free(p);
}

static void test_origin_allow_list(void **state)
{
    (void)state;
    cq_wsup_config_t cfg = {.origins = "https://game.example, http://localhost:8080"};
    const char *base = "GET / HTTP/1.1\r\n" H U C K V;
    char req[512];
    snprintf(req, sizeof(req), "%sOrigin: https://game.example\r\n\r\n", base);
    assert_int_equal(parse(&cfg, req, NULL), CQ_WSUP_WEBSOCKET);
    snprintf(req, sizeof(req), "%sOrigin: HTTP://LOCALHOST:8080\r\n\r\n", base);
    assert_int_equal(parse(&cfg, req, NULL), CQ_WSUP_WEBSOCKET);
    snprintf(req, sizeof(req), "%sOrigin: https://evil.example\r\n\r\n", base);
    assert_status(&cfg, req, 403);
    snprintf(req, sizeof(req), "%sOrigin: https://game.example.evil\r\n\r\n", base);
    assert_status(&cfg, req, 403);
    snprintf(req, sizeof(req), "%s\r\n", base); /* no Origin: not a browser, allowed */
    assert_int_equal(parse(&cfg, req, NULL), CQ_WSUP_WEBSOCKET);
    cq_wsup_config_t any = {.origins = "*"};
    snprintf(req, sizeof(req), "%sOrigin: https://evil.example\r\n\r\n", base);
    assert_int_equal(parse(&any, req, NULL), CQ_WSUP_WEBSOCKET);
    assert_int_equal(parse(NULL, req, NULL), CQ_WSUP_WEBSOCKET);
}

/* An upgrade for Host host carrying Origin origin (NULL: none), parsed with cfg. */
static int with_origin(const cq_wsup_config_t *cfg, const char *host, const char *origin,
                       int *ret_status)
{
    char req[512];
    snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n" U C K V "%s%s%s\r\n", host,
             origin ? "Origin: " : "", origin ? origin : "", origin ? "\r\n" : "");
    return parse(cfg, req, ret_status);
}

/* No allow-list on a listener others can reach: only same-origin pages (and non-browsers). */
static void test_origin_same_site(void **state)
{
    (void)state;
    cq_wsup_config_t cfg = {.same_origin = true};
    static const struct {
        const char *host, *origin;
        int want; /* CQ_WSUP_WEBSOCKET or an HTTP status */
    } cases[] = {
        {"game.example", NULL, CQ_WSUP_WEBSOCKET},
        {"game.example", "https://game.example", CQ_WSUP_WEBSOCKET},
        {"game.example:443", "https://game.example", CQ_WSUP_WEBSOCKET},
        {"Game.Example", "http://game.example:80", CQ_WSUP_WEBSOCKET},
        {"10.0.0.5:9000", "http://10.0.0.5:9000", CQ_WSUP_WEBSOCKET},
        {"[::1]:9000", "http://[::1]:9000", CQ_WSUP_WEBSOCKET},
        {"game.example", "https://evil.example", 403},
        {"game.example", "https://game.example.evil", 403},
        {"game.example", "http://game.example:8080", 403},
        {"game.example:9000", "http://game.example", 403},
        {"[::1]:9000", "http://[::1]", 403},
        {"game.example", "null", 403},
        {"game.example", "game.example", 403},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int status = 0;
        int r = with_origin(&cfg, cases[i].host, cases[i].origin, &status);
        if (r != (cases[i].want == CQ_WSUP_WEBSOCKET ? CQ_WSUP_WEBSOCKET : CQ_EHTTP) ||
            (r == CQ_EHTTP && status != cases[i].want))
            fail_msg("Host %s, Origin %s: got r=%d status=%d, want %d", cases[i].host,
                     cases[i].origin ? cases[i].origin : "(none)", r, status, cases[i].want);
    }
    /* an allow-list replaces the rule; without same_origin any Origin passes (loopback) */
    cq_wsup_config_t listed = {.origins = "https://evil.example", .same_origin = true};
    assert_int_equal(with_origin(&listed, "game.example", "https://evil.example", NULL),
                     CQ_WSUP_WEBSOCKET);
    cq_wsup_config_t open = {0};
    assert_int_equal(with_origin(&open, "game.example", "https://evil.example", NULL),
                     CQ_WSUP_WEBSOCKET);
}

/* ---- responses ------------------------------------------------------------------------- */

static void test_accept_and_101(void **state)
{
    (void)state;
    char acc[29];
    assert_int_equal(cq_wsup_accept(KEY, acc), 0);
    assert_string_equal(acc, ACCEPT);

    cq_wsup_t *p = cq_wsup_new(&CHAT);
    assert_int_equal(feed_all(p, UPGRADE, NULL), CQ_WSUP_WEBSOCKET);
    char buf[512];
    int n = cq_wsup_response_101(cq_wsup_request(p), NULL, buf, sizeof(buf));
    assert_true(n > 0);
    buf[n] = '\0';
    assert_string_equal(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             "Connection: Upgrade\r\nSec-WebSocket-Accept: " ACCEPT "\r\n\r\n");
    n = cq_wsup_response_101(cq_wsup_request(p), "chat", buf, sizeof(buf));
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\r\nSec-WebSocket-Protocol: chat\r\n\r\n"));
    assert_int_equal(cq_wsup_response_101(cq_wsup_request(p), NULL, buf, 50), -ENOSPC);
    cq_wsup_free(p);
}

static void test_error_responses(void **state)
{
    (void)state;
    char buf[512];
    int n = cq_wsup_response_error(426, "bad version", buf, sizeof(buf));
    assert_true(n > 0);
    buf[n] = '\0';
    assert_true(strncmp(buf, "HTTP/1.1 426 Upgrade Required\r\n", 31) == 0);
    assert_non_null(strstr(buf, "\r\nSec-WebSocket-Version: 13\r\n"));
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(buf, "\r\nContent-Length: 12\r\n"));
    assert_non_null(strstr(buf, "\r\n\r\nbad version\n"));
    n = cq_wsup_response_error(405, NULL, buf, sizeof(buf));
    buf[n] = '\0';
    assert_non_null(strstr(buf, "\r\nAllow: GET, HEAD\r\n"));
    assert_string_equal(buf, "HTTP/1.1 405 Method Not Allowed\r\n" /* exactly, reason NULL */
                             "Content-Type: text/plain; charset=utf-8\r\n"
                             "Content-Length: 19\r\n"
                             "Allow: GET, HEAD\r\n"
                             "Connection: close\r\n"
                             "\r\n"
                             "Method Not Allowed\n");
    static const int st[] = {400, 403, 404, 431};
    static const char *const phrase[] = {"Bad Request", "Forbidden", "Not Found",
                                         "Request Header Fields Too Large"};
    for (int i = 0; i < 4; i++) {
        n = cq_wsup_response_error(st[i], "r", buf, sizeof(buf));
        assert_true(n > 0);
        buf[n] = '\0';
        char line[80];
        snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", st[i], phrase[i]);
        assert_true(strncmp(buf, line, strlen(line)) == 0);
        assert_null(strstr(buf, "Sec-WebSocket-Version"));
    }
    assert_int_equal(cq_wsup_response_error(400, "r", buf, 20), -ENOSPC);
}

static void test_file_responses(void **state)
{
    (void)state;
    char buf[512];
    int n = cq_wsup_response_file(200, "/www/demo/index.HTML", 1234, buf, sizeof(buf));
    assert_true(n > 0);
    buf[n] = '\0';
    assert_true(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
    assert_non_null(strstr(buf, "\r\nContent-Type: text/html; charset=utf-8\r\n"));
    assert_non_null(strstr(buf, "\r\nContent-Length: 1234\r\n"));
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
    assert_true(strcmp(buf + n - 4, "\r\n\r\n") == 0);
    static const char *const names[][2] = {
        {"a.js", "text/javascript"},    {"a.mjs", "text/javascript"}, {"a.css", "text/css"},
        {"a.wasm", "application/wasm"}, {"a.png", "image/png"},       {"x.d/noext", "octet-stream"},
        {"a.json", "application/json"}, {"a.svg", "image/svg+xml"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        n = cq_wsup_response_file(200, names[i][0], 0, buf, sizeof(buf));
        buf[n] = '\0';
        assert_non_null(strstr(buf, names[i][1]));
    }
    n = cq_wsup_response_file(404, "a.png", 10, buf, sizeof(buf));
    buf[n] = '\0';
    assert_true(strncmp(buf, "HTTP/1.1 404 Not Found\r\n", 24) == 0);
    assert_non_null(strstr(buf, "text/plain"));
    assert_int_equal(cq_wsup_response_file(200, "a", 1, buf, 30), -ENOSPC);
}

/* ---- allocation failures --------------------------------------------------------------- */

static void test_fail_n(void **state)
{
    (void)state;
    const char *req = "GET /chat HTTP/1.1\r\n" H U C K V "Sec-WebSocket-Protocol: a\r\n"
                      "Sec-WebSocket-Protocol: b\r\n\r\n";
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        int r = 0;
        cq_wsup_t *p = cq_wsup_new(&CHAT);
        if (p)
            r = cq_wsup_feed(p, (const uint8_t *)req, strlen(req), NULL);
        bool ok = p && r == CQ_WSUP_WEBSOCKET;
        if (ok)
            assert_string_equal(cq_wsup_request(p)->protocol, "a, b");
        else if (p)
            assert_int_equal(r, -ENOMEM);
        cq_wsup_free(p);
        if (test_alloc_round_end(ok))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upgrade_whole),
        cmocka_unit_test(test_upgrade_every_split),
        cmocka_unit_test(test_upgrade_byte_by_byte),
        cmocka_unit_test(test_upgrade_lenient_forms),
        cmocka_unit_test(test_default_path),
        cmocka_unit_test(test_plain_get_and_head),
        cmocka_unit_test(test_status_400),
        cmocka_unit_test(test_status_405_426_404),
        cmocka_unit_test(test_status_431),
        cmocka_unit_test(test_origin_allow_list),
        cmocka_unit_test(test_origin_same_site),
        cmocka_unit_test(test_accept_and_101),
        cmocka_unit_test(test_error_responses),
        cmocka_unit_test(test_file_responses),
        cmocka_unit_test(test_fail_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
