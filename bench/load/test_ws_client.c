/* test_ws_client.c - cqbench's WebSocket client framing (ws_client.c) against chanqd's own
 * server engines: the upgrade parser (cq_wsup) and the session (cq_ws). Server bytes are fed
 * to the client in every two-way split (and byte by byte), client frames go into cq_ws_input.
 */
#include "ws_client.h"

#include "cq_err.h"
#include "cq_ws.h"
#include "cq_wsup.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A growing byte buffer. */
typedef struct tbuf {
    uint8_t *p;
    size_t len, cap;
} tbuf_t;

static void tbuf_add(tbuf_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* ---- client side: what the callbacks received ---- */

typedef struct cside {
    tbuf_t data; /* on_data payload bytes */
    tbuf_t sent; /* on_send frames */
} cside_t;

static void c_on_data(void *ud, const uint8_t *p, size_t n)
{
    tbuf_add(&((cside_t *)ud)->data, p, n);
}

static void c_on_send(void *ud, const uint8_t *p, size_t n)
{
    tbuf_add(&((cside_t *)ud)->sent, p, n);
}

static const bench_ws_cbs_t ccbs = {c_on_data, c_on_send};

/* ---- server side: a cq_ws session capturing its output and messages ---- */

typedef struct sside {
    tbuf_t wire; /* on_send bytes */
    tbuf_t msgs; /* on_message payloads, concatenated */
    int nmsgs, closes;
} sside_t;

static int s_on_send(void *ud, const uint8_t *p, size_t n)
{
    tbuf_add(&((sside_t *)ud)->wire, p, n);
    return 0;
}

static void s_on_message(void *ud, int opcode, const uint8_t *p, size_t n)
{
    sside_t *s = ud;
    assert_int_equal(opcode, CQ_WS_BINARY);
    tbuf_add(&s->msgs, p, n);
    s->nmsgs++;
}

static void s_on_close(void *ud, int code, const uint8_t *reason, size_t len)
{
    (void)code;
    (void)reason;
    (void)len;
    ((sside_t *)ud)->closes++;
}

static const cq_ws_callbacks_t scbs = {s_on_message, s_on_send, s_on_close};

/* Runs the handshake through cq_wsup; returns the server's 101 response in resp. */
static size_t handshake(bench_ws_t *ws, char *resp, size_t cap)
{
    char req[512];
    int n = bench_ws_request(ws, "127.0.0.1:9", "/", req, sizeof(req));
    assert_true(n > 0);
    assert_false(bench_ws_open(ws));
    cq_wsup_t *up = cq_wsup_new(NULL);
    assert_non_null(up);
    size_t used = 0;
    assert_int_equal(cq_wsup_feed(up, (const uint8_t *)req, (size_t)n, &used), CQ_WSUP_WEBSOCKET);
    assert_int_equal(used, (size_t)n);
    int k = cq_wsup_response_101(cq_wsup_request(up), NULL, resp, cap);
    assert_true(k > 0);
    cq_wsup_free(up);
    return (size_t)k;
}

/* Feeds bytes to a fresh client in two pieces split at cut (a fresh handshake each time). */
static int feed_split(bench_ws_t *ws, cside_t *cs, const uint8_t *p, size_t n, size_t cut)
{
    int r = bench_ws_feed(ws, p, cut, &ccbs, cs);
    if (r < 0)
        return r;
    return bench_ws_feed(ws, p + cut, n - cut, &ccbs, cs);
}

static void free_cside(cside_t *cs)
{
    free(cs->data.p);
    free(cs->sent.p);
    memset(cs, 0, sizeof(*cs));
}

static void test_handshake_every_split(void **state)
{
    (void)state;
    char resp[512];
    bench_ws_t ws;
    size_t n = handshake(&ws, resp, sizeof(resp));
    bench_ws_t saved = ws;
    for (size_t cut = 0; cut <= n; cut++) {
        cside_t cs = {0};
        ws = saved;
        assert_int_equal(feed_split(&ws, &cs, (const uint8_t *)resp, n, cut), 0);
        assert_true(bench_ws_open(&ws));
        assert_int_equal(cs.data.len, 0);
        free_cside(&cs);
    }
}

static void test_handshake_rejects(void **state)
{
    (void)state;
    char resp[512];
    bench_ws_t ws;
    cside_t cs = {0};
    size_t n = handshake(&ws, resp, sizeof(resp));
    char *acc = strstr(resp, "Sec-WebSocket-Accept: ");
    assert_non_null(acc);
    acc[22] = acc[22] == 'A' ? 'B' : 'A'; /* a wrong accept value */
    assert_int_equal(bench_ws_feed(&ws, (const uint8_t *)resp, n, &ccbs, &cs), CQ_EWSPROTO);
    assert_non_null(bench_ws_why(&ws));
    assert_false(bench_ws_open(&ws));

    handshake(&ws, resp, sizeof(resp));
    const char *bad = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(bench_ws_feed(&ws, (const uint8_t *)bad, strlen(bad), &ccbs, &cs),
                     CQ_EWSPROTO);
    /* once failed, always failed */
    assert_int_equal(bench_ws_feed(&ws, (const uint8_t *)"x", 1, &ccbs, &cs), CQ_EWSPROTO);
    free_cside(&cs);
}

/* An open client plus the server-side session. */
static void open_pair(bench_ws_t *ws, cq_ws_t **sws, sside_t *ss)
{
    char resp[512];
    cside_t cs = {0};
    size_t n = handshake(ws, resp, sizeof(resp));
    assert_int_equal(bench_ws_feed(ws, (const uint8_t *)resp, n, &ccbs, &cs), 0);
    assert_true(bench_ws_open(ws));
    *sws = cq_ws_new(&scbs, ss, 0);
    assert_non_null(*sws);
    free_cside(&cs);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 7 + seed) % 251);
}

/* Server messages of every length class (7-bit, 16-bit, 64-bit) back to back, fed to the
 * client in every two-way split (small stream) or in 1-byte and 1000-byte chunks (large). */
static void test_server_frames(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 5, 125, 126, 200, 65535, 65536, 70000};
    bench_ws_t ws;
    cq_ws_t *sws;
    sside_t ss = {0};
    open_pair(&ws, &sws, &ss);
    tbuf_t want = {0};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        uint8_t *m = malloc(lens[i]);
        assert_non_null(m);
        fill(m, lens[i], (unsigned)i);
        struct iovec iov = {m, lens[i]};
        assert_int_equal(cq_ws_send_binary(sws, &iov, 1), 0);
        tbuf_add(&want, m, lens[i]);
        free(m);
    }
    bench_ws_t open = ws;
    /* every split of the first five messages (their wire bytes come first) */
    size_t small = 0, small_data = 0;
    for (size_t i = 0; i < 5; i++) {
        small += lens[i] + (lens[i] < 126 ? 2 : 4);
        small_data += lens[i];
    }
    for (size_t cut = 0; cut <= small; cut++) {
        cside_t cs = {0};
        ws = open;
        assert_int_equal(feed_split(&ws, &cs, ss.wire.p, small, cut), 0);
        assert_int_equal(cs.data.len, small_data);
        assert_memory_equal(cs.data.p, want.p, cs.data.len);
        free_cside(&cs);
    }
    static const size_t chunks[] = {1, 1000};
    for (size_t c = 0; c < 2; c++) {
        cside_t cs = {0};
        ws = open;
        for (size_t off = 0; off < ss.wire.len; off += chunks[c]) {
            size_t k = ss.wire.len - off < chunks[c] ? ss.wire.len - off : chunks[c];
            assert_int_equal(bench_ws_feed(&ws, ss.wire.p + off, k, &ccbs, &cs), 0);
        }
        assert_int_equal(cs.data.len, want.len);
        assert_memory_equal(cs.data.p, want.p, want.len);
        assert_int_equal(cs.sent.len, 0);
        free_cside(&cs);
    }
    cq_ws_free(sws);
    free(ss.wire.p);
    free(want.p);
}

/* Client frames of every length class are accepted by the server session, masked. */
static void test_client_frames(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 125, 126, 65535, 65536, 100000};
    bench_ws_t ws;
    cq_ws_t *sws;
    sside_t ss = {0};
    open_pair(&ws, &sws, &ss);
    tbuf_t want = {0};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        uint8_t *m = malloc(lens[i]), *f = malloc(lens[i] + BENCH_WS_FRAME_HDR);
        assert_non_null(m);
        assert_non_null(f);
        fill(m, lens[i], (unsigned)i + 3);
        int k = bench_ws_frame(BENCH_WS_BINARY, m, lens[i], f);
        assert_true(k > (int)lens[i]);
        assert_true(f[1] & 0x80); /* masked */
        assert_int_equal(cq_ws_input(sws, f, (size_t)k), 0);
        tbuf_add(&want, m, lens[i]);
        free(m);
        free(f);
    }
    assert_int_equal(ss.nmsgs, 6);
    assert_int_equal(ss.msgs.len, want.len);
    assert_memory_equal(ss.msgs.p, want.p, want.len);
    assert_int_equal(ss.wire.len, 0); /* nothing to answer */
    cq_ws_free(sws);
    free(ss.msgs.p);
    free(want.p);
}

/* A server ping is answered with a masked pong the server accepts; a server Close is echoed,
 * ends the session with CQ_ECLOSED and completes the server's closing handshake. */
static void test_ping_and_close(void **state)
{
    (void)state;
    bench_ws_t ws;
    cq_ws_t *sws;
    sside_t ss = {0};
    cside_t cs = {0};
    open_pair(&ws, &sws, &ss);
    assert_int_equal(cq_ws_ping(sws, (const uint8_t *)"abc", 3), 0);
    assert_int_equal(bench_ws_feed(&ws, ss.wire.p, ss.wire.len, &ccbs, &cs), 0);
    assert_int_equal(cs.sent.len, 2 + 4 + 3);
    assert_int_equal(cs.sent.p[0], 0x80 | BENCH_WS_PONG);
    assert_int_equal(cs.sent.p[1], 0x80 | 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cs.sent.p[6 + i] ^ cs.sent.p[2 + i], "abc"[i]);
    assert_int_equal(cq_ws_input(sws, cs.sent.p, cs.sent.len), 0);
    ss.wire.len = 0;
    cs.sent.len = 0;

    assert_int_equal(cq_ws_close(sws, 1000, "bye"), 0);
    assert_int_equal(bench_ws_feed(&ws, ss.wire.p, ss.wire.len, &ccbs, &cs), CQ_ECLOSED);
    assert_false(bench_ws_open(&ws));
    assert_int_equal(cs.sent.p[0], 0x80 | BENCH_WS_CLOSE);
    assert_int_equal(cq_ws_input(sws, cs.sent.p, cs.sent.len), 0);
    assert_true(cq_ws_done(sws));
    assert_int_equal(ss.closes, 1);
    assert_int_equal(cs.data.len, 0);
    cq_ws_free(sws);
    free(ss.wire.p);
    free_cside(&cs);
}

/* Server frames a client must refuse. */
static void test_bad_frames(void **state)
{
    (void)state;
    static const uint8_t bad[][6] = {
        {0x82, 0x81, 1, 2, 3, 4}, /* masked server frame */
        {0xc2, 0x01, 'x'},        /* RSV1 */
        {0x83, 0x01, 'x'},        /* reserved data opcode */
        {0x8b, 0x00},             /* reserved control opcode */
        {0x80, 0x01, 'x'},        /* continuation outside a message */
        {0x09, 0x00},             /* fragmented ping */
        {0x88, 0x01, 3},          /* Close with a 1-byte payload */
    };
    static const size_t len[] = {6, 3, 3, 2, 3, 2, 3};
    for (size_t i = 0; i < sizeof(len) / sizeof(len[0]); i++) {
        bench_ws_t ws;
        cq_ws_t *sws;
        sside_t ss = {0};
        cside_t cs = {0};
        open_pair(&ws, &sws, &ss);
        assert_int_equal(bench_ws_feed(&ws, bad[i], len[i], &ccbs, &cs), CQ_EWSPROTO);
        assert_non_null(bench_ws_why(&ws));
        assert_int_equal(cs.data.len, 0);
        cq_ws_free(sws);
        free_cside(&cs);
    }
    /* a data frame inside a fragmented message */
    bench_ws_t ws;
    cq_ws_t *sws;
    sside_t ss = {0};
    cside_t cs = {0};
    open_pair(&ws, &sws, &ss);
    static const uint8_t two[] = {0x02, 0x01, 'a', 0x82, 0x01, 'b'};
    assert_int_equal(bench_ws_feed(&ws, two, sizeof(two), &ccbs, &cs), CQ_EWSPROTO);
    assert_int_equal(cs.data.len, 1);
    cq_ws_free(sws);
    free_cside(&cs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_every_split), cmocka_unit_test(test_handshake_rejects),
        cmocka_unit_test(test_server_frames),         cmocka_unit_test(test_client_frames),
        cmocka_unit_test(test_ping_and_close),        cmocka_unit_test(test_bad_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
