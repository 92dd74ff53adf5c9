/* tests/unit/transport/ws: the WebSocket session (src/transport/ws/cq_ws) fed hand-built masked
 * client frames, with the server's output decoded back into frames.
 *
 * Covers the RFC 6455 checklist of transports.md section 7 at the unit level: 7/16/64-bit
 * lengths, every two-way split, fragmentation with an interleaved ping, control-frame rules,
 * close codes, UTF-8, the size limit, masking, and the order of own frames vs queued pongs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_ws.h"
#include "test_alloc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growable byte buffer ------------------------------------------------------------ */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes_t;

static void bytes_add(bytes_t *b, const void *p, size_t n)
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

/* ---- client frames --------------------------------------------------------------------- */

enum { OP_CONT = 0, OP_TEXT = 1, OP_BIN = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };
enum { F_NOMASK = 1, F_LEN16 = 2, F_LEN64 = 4, F_RSV1 = 8 };

/* Appends a client frame to b: masked (unless F_NOMASK) with a fixed key; F_LEN16/F_LEN64 force
 * that length encoding even when shorter would do. */
static void frame_ex(bytes_t *b, bool fin, int op, const void *payload, size_t len, int flags)
{
    static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
    uint8_t h[14];
    size_t n = 0;
    h[n++] = (uint8_t)((fin ? 0x80 : 0) | (flags & F_RSV1 ? 0x40 : 0) | op);
    uint8_t m = flags & F_NOMASK ? 0 : 0x80;
    if (len < 126 && !(flags & (F_LEN16 | F_LEN64))) {
        h[n++] = m | (uint8_t)len;
    } else if (len <= 0xffff && !(flags & F_LEN64)) {
        h[n++] = m | 126;
        h[n++] = (uint8_t)(len >> 8);
        h[n++] = (uint8_t)len;
    } else {
        h[n++] = m | 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    if (m) {
        memcpy(h + n, key, 4);
        n += 4;
    }
    bytes_add(b, h, n);
    size_t at = b->len;
    bytes_add(b, payload, len);
    if (m)
        for (size_t i = 0; i < len; i++)
            b->p[at + i] ^= key[i % 4];
}

static void frame(bytes_t *b, bool fin, int op, const void *payload, size_t len)
{
    frame_ex(b, fin, op, payload, len, 0);
}

static void close_frame(bytes_t *b, int code, const void *reason, size_t rlen)
{
    uint8_t p[130];
    p[0] = (uint8_t)(code >> 8);
    p[1] = (uint8_t)code;
    if (rlen)
        memcpy(p + 2, reason, rlen);
    frame(b, true, OP_CLOSE, p, rlen + 2);
}

/* ---- the session under test and its recorded output ------------------------------------ */

typedef struct msg {
    int opcode;
    uint8_t *data;
    size_t len;
} msg_t;

typedef struct fixture {
    cq_ws_t *ws;
    bytes_t out; /* everything on_send got */
    msg_t msgs[128];
    int nmsgs;
    int close_code; /* from on_close, 0 if not called */
    char close_reason[130];
    int send_fail_at; /* on_send call number that fails (1-based), 0 = never */
    int send_calls;
    bool reply_in_callback; /* on_message answers with a binary "re:" + payload */
} fixture_t;

typedef struct sframe {
    bool fin;
    int op;
    uint8_t *data; /* points into fixture out */
    size_t len;
} sframe_t;

static void on_message(void *ud, int opcode, const uint8_t *data, size_t len)
{
    fixture_t *f = ud;
    assert_true(f->nmsgs < 128);
    msg_t *m = &f->msgs[f->nmsgs++];
    m->opcode = opcode;
    m->len = len;
    m->data = malloc(len + 1);
    if (len)
        memcpy(m->data, data, len);
    if (f->reply_in_callback) {
        struct iovec iov[2] = {{(void *)"re:", 3}, {(void *)data, len}};
        assert_int_equal(cq_ws_send_binary(f->ws, iov, 2), 0);
    }
}

static int on_send(void *ud, const uint8_t *bytes, size_t len)
{
    fixture_t *f = ud;
    if (++f->send_calls == f->send_fail_at)
        return -ENOBUFS;
    bytes_add(&f->out, bytes, len);
    return 0;
}

static void on_close(void *ud, int code, const uint8_t *reason, size_t len)
{
    fixture_t *f = ud;
    f->close_code = code;
    memcpy(f->close_reason, reason, len);
    f->close_reason[len] = '\0';
}

static const cq_ws_callbacks_t CBS = {on_message, on_send, on_close};

static fixture_t *fx_new(size_t max_message)
{
    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->ws = cq_ws_new(&CBS, f, max_message);
    assert_non_null(f->ws);
    return f;
}

static void fx_free(fixture_t *f)
{
    cq_ws_free(f->ws);
    for (int i = 0; i < f->nmsgs; i++)
        free(f->msgs[i].data);
    free(f->out.p);
    free(f);
}

/* Decodes server frames from f->out (unmasked, minimal lengths). Returns the count. */
static int server_frames(fixture_t *f, sframe_t *fr, int max)
{
    int n = 0;
    size_t i = 0;
    while (i < f->out.len) {
        assert_true(n < max);
        assert_true(f->out.len - i >= 2);
        uint8_t b0 = f->out.p[i], b1 = f->out.p[i + 1];
        assert_int_equal(b1 & 0x80, 0); /* servers never mask */
        assert_int_equal(b0 & 0x70, 0);
        uint64_t len = b1 & 0x7f;
        size_t h = 2;
        if (len == 126) {
            len = (uint64_t)f->out.p[i + 2] << 8 | f->out.p[i + 3];
            assert_true(len >= 126);
            h = 4;
        } else if (len == 127) {
            len = 0;
            for (int k = 0; k < 8; k++)
                len = len << 8 | f->out.p[i + 2 + k];
            assert_true(len > 0xffff);
            h = 10;
        }
        assert_true(f->out.len - i - h >= len);
        fr[n].fin = b0 & 0x80;
        fr[n].op = b0 & 0x0f;
        fr[n].data = f->out.p + i + h;
        fr[n].len = (size_t)len;
        n++;
        i += h + (size_t)len;
    }
    return n;
}

/* Asserts that the output is exactly one Close frame with code (0: no status). */
static void assert_only_close(fixture_t *f, int code)
{
    sframe_t fr[8];
    int n = server_frames(f, fr, 8);
    assert_int_equal(n, 1);
    assert_int_equal(fr[0].op, OP_CLOSE);
    if (code == 0) {
        assert_int_equal(fr[0].len, 0);
        return;
    }
    assert_true(fr[0].len >= 2);
    assert_int_equal(fr[0].data[0] << 8 | fr[0].data[1], code);
}

/* Feeds in to a fresh session, split at k (k >= in->len: whole; SIZE_MAX: byte by byte);
 * returns the first non-zero result. */
static int feed_split(fixture_t *f, const bytes_t *in, size_t k)
{
    int r = 0;
    if (k == SIZE_MAX) {
        for (size_t i = 0; i < in->len; i++) {
            int e = cq_ws_input(f->ws, in->p + i, 1);
            if (e && !r)
                r = e;
        }
        return r;
    }
    k = k < in->len ? k : in->len;
    r = cq_ws_input(f->ws, in->p, k);
    int e = cq_ws_input(f->ws, in->p + k, in->len - k);
    return r ? r : e;
}

/* Feeds in to a fresh session whole, split at every position and byte by byte; expects
 * result r and a lone Close with code each time. */
static void expect_fail(const bytes_t *in, size_t max_message, int r, int code)
{
    for (size_t k = 0; k <= in->len + 1; k++) {
        fixture_t *f = fx_new(max_message);
        int got = feed_split(f, in, k <= in->len ? k : SIZE_MAX);
        if (got != r)
            fail_msg("split %zu: result %d, expected %d", k, got, r);
        assert_only_close(f, code);
        assert_int_equal(f->nmsgs, 0);
        assert_true(cq_ws_done(f->ws));
        assert_false(cq_ws_can_send(f->ws));
        assert_int_equal(cq_ws_close_code_sent(f->ws), code);
        /* further input is ignored */
        size_t before = f->out.len;
        assert_int_equal(cq_ws_input(f->ws, in->p, in->len), 0);
        assert_int_equal(f->out.len, before);
        fx_free(f);
    }
}

static uint8_t *pattern(size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(i % 251);
    return p;
}

/* ---- data messages --------------------------------------------------------------------- */

static void check_one_binary(size_t len, int flags)
{
    uint8_t *pl = pattern(len);
    bytes_t in = {0};
    frame_ex(&in, true, OP_BIN, pl, len, flags);
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 1);
    assert_int_equal(f->msgs[0].opcode, CQ_WS_BINARY);
    assert_int_equal(f->msgs[0].len, len);
    assert_memory_equal(f->msgs[0].data, pl, len);
    assert_int_equal(f->out.len, 0);
    assert_false(cq_ws_done(f->ws));
    assert_true(cq_ws_can_send(f->ws));
    fx_free(f);
    free(in.p);
    free(pl);
}

static void test_lengths(void **state)
{
    (void)state;
    check_one_binary(0, 0);
    check_one_binary(5, 0);
    check_one_binary(125, 0);
    check_one_binary(126, 0);   /* 16-bit */
    check_one_binary(300, 0);   /* 16-bit */
    check_one_binary(65535, 0); /* 16-bit, largest */
    check_one_binary(65536, 0); /* 64-bit */
    check_one_binary(70000, 0); /* 64-bit */
}

static void test_text_message(void **state)
{
    (void)state;
    static const char txt[] = "h\xc3\xa9llo \xe2\x82\xac";
    bytes_t in = {0};
    frame(&in, true, OP_TEXT, txt, sizeof(txt) - 1);
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 1);
    assert_int_equal(f->msgs[0].opcode, CQ_WS_TEXT);
    assert_memory_equal(f->msgs[0].data, txt, sizeof(txt) - 1);
    fx_free(f);
    free(in.p);
}

/* A fragmented binary message with a ping between its fragments, a text message whose UTF-8
 * character is split across fragments, then a 16-bit binary: fed whole, split at every
 * position, and byte by byte. */
static void build_sequence(bytes_t *in)
{
    frame(in, false, OP_BIN, "ab", 2);
    frame(in, true, OP_PING, "p!", 2);
    frame(in, false, OP_CONT, "cd", 2);
    frame(in, true, OP_CONT, "ef", 2);
    frame(in, false, OP_TEXT, "x\xe2\x82", 3);
    frame(in, true, OP_CONT, "\xac", 1);
    uint8_t *pl = pattern(200);
    frame(in, true, OP_BIN, pl, 200);
    free(pl);
}

static void check_sequence(fixture_t *f)
{
    assert_int_equal(f->nmsgs, 3);
    assert_int_equal(f->msgs[0].opcode, CQ_WS_BINARY);
    assert_int_equal(f->msgs[0].len, 6);
    assert_memory_equal(f->msgs[0].data, "abcdef", 6);
    assert_int_equal(f->msgs[1].opcode, CQ_WS_TEXT);
    assert_memory_equal(f->msgs[1].data, "x\xe2\x82\xac", 4);
    assert_int_equal(f->msgs[2].len, 200);
    sframe_t fr[4];
    assert_int_equal(server_frames(f, fr, 4), 1);
    assert_int_equal(fr[0].op, OP_PONG);
    assert_true(fr[0].fin);
    assert_int_equal(fr[0].len, 2);
    assert_memory_equal(fr[0].data, "p!", 2);
}

static void test_fragmentation_every_split(void **state)
{
    (void)state;
    bytes_t in = {0};
    build_sequence(&in);
    for (size_t k = 0; k <= in.len; k++) {
        fixture_t *f = fx_new(0);
        assert_int_equal(cq_ws_input(f->ws, in.p, k), 0);
        assert_int_equal(cq_ws_input(f->ws, in.p + k, in.len - k), 0);
        check_sequence(f);
        fx_free(f);
    }
    fixture_t *f = fx_new(0);
    for (size_t i = 0; i < in.len; i++)
        assert_int_equal(cq_ws_input(f->ws, in.p + i, 1), 0);
    check_sequence(f);
    fx_free(f);
    free(in.p);
}

static void test_fifty_frames_one_write(void **state)
{
    (void)state;
    bytes_t in = {0};
    for (int i = 0; i < 50; i++) {
        char p[16];
        int n = snprintf(p, sizeof(p), "m%d", i);
        frame(&in, true, OP_BIN, p, (size_t)n);
    }
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 50);
    for (int i = 0; i < 50; i++) {
        char p[16];
        int n = snprintf(p, sizeof(p), "m%d", i);
        assert_int_equal(f->msgs[i].len, (size_t)n);
        assert_memory_equal(f->msgs[i].data, p, (size_t)n);
    }
    fx_free(f);
    free(in.p);
}

/* ---- control frames -------------------------------------------------------------------- */

static void test_ping_pong(void **state)
{
    (void)state;
    uint8_t big[125];
    memset(big, 'z', sizeof(big));
    bytes_t in = {0};
    frame(&in, true, OP_PING, big, sizeof(big)); /* the largest ping */
    frame(&in, true, OP_PONG, "u", 1);           /* unsolicited pong: ignored */
    frame(&in, true, OP_PING, NULL, 0);
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    sframe_t fr[4];
    assert_int_equal(server_frames(f, fr, 4), 2);
    assert_int_equal(fr[0].op, OP_PONG);
    assert_int_equal(fr[0].len, 125);
    assert_memory_equal(fr[0].data, big, 125);
    assert_int_equal(fr[1].op, OP_PONG);
    assert_int_equal(fr[1].len, 0);
    assert_int_equal(f->nmsgs, 0);
    fx_free(f);
    free(in.p);
}

static void test_control_frame_rules(void **state)
{
    (void)state;
    uint8_t big[126];
    memset(big, 'z', sizeof(big));
    bytes_t in = {0};
    frame(&in, false, OP_PING, "x", 1); /* fragmented control frame */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame(&in, true, OP_PING, big, 126); /* oversized ping */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame(&in, false, OP_CLOSE, NULL, 0);
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame_ex(&in, true, OP_PONG, "x", 1, F_LEN16); /* a control frame with a 16-bit length */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    free(in.p);
}

/* A bad header whose first byte arrives in one call and the rest in the next still gives
 * 1002, and a pong for a ping before it goes out first. */
static void test_bad_header_split(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame(&in, true, OP_PING, "1", 1);
    size_t bad = in.len;
    frame(&in, false, OP_PING, "x", 1);
    for (size_t k = 0; k <= in.len; k++) {
        fixture_t *f = fx_new(0);
        int r1 = cq_ws_input(f->ws, in.p, k);
        int r2 = cq_ws_input(f->ws, in.p + k, in.len - k);
        /* the error comes with the second header byte of the bad frame */
        assert_int_equal(r1, k >= bad + 2 ? CQ_EWSPROTO : 0);
        assert_int_equal(r2, k >= bad + 2 ? 0 : CQ_EWSPROTO);
        sframe_t fr[4];
        if (server_frames(f, fr, 4) != 2)
            fail_msg("split at %zu: expected a pong and a Close", k);
        assert_int_equal(fr[0].op, OP_PONG);
        assert_int_equal(fr[1].op, OP_CLOSE);
        assert_int_equal(fr[1].data[0] << 8 | fr[1].data[1], 1002);
        fx_free(f);
    }
    free(in.p);
}

/* ---- header-level protocol errors ------------------------------------------------------- */

static void test_rsv_and_reserved_opcodes(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame_ex(&in, true, OP_BIN, "x", 1, F_RSV1);
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    static const int ops[] = {3, 4, 7, 11, 15};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        in.len = 0;
        frame(&in, true, ops[i], "x", 1);
        expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    }
    free(in.p);
}

static void test_unmasked_and_bad_lengths(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame_ex(&in, true, OP_BIN, "x", 1, F_NOMASK);
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame_ex(&in, true, OP_BIN, "abc", 3, F_LEN16); /* non-minimal 16-bit length */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame_ex(&in, true, OP_BIN, "abc", 3, F_LEN64); /* non-minimal 64-bit length */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    static const uint8_t top[] = {0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
    bytes_add(&in, top, sizeof(top)); /* 64-bit length with the top bit set */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    free(in.p);
}

static void test_continuation_rules(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame(&in, true, OP_CONT, "x", 1); /* stray continuation */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    in.len = 0;
    frame(&in, false, OP_TEXT, "a", 1); /* unfinished message, then a new one */
    frame(&in, true, OP_TEXT, "b", 1);
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    free(in.p);
}

/* ---- close handshake ------------------------------------------------------------------- */

static void test_close_1000_echo(void **state)
{
    (void)state;
    bytes_t in = {0};
    close_frame(&in, 1000, "bye", 3);
    frame(&in, true, OP_BIN, "late", 4); /* data after close: ignored */
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->close_code, 1000);
    assert_string_equal(f->close_reason, "bye");
    assert_int_equal(f->nmsgs, 0);
    sframe_t fr[2];
    assert_int_equal(server_frames(f, fr, 2), 1);
    assert_int_equal(fr[0].op, OP_CLOSE);
    assert_int_equal(fr[0].data[0] << 8 | fr[0].data[1], 1000);
    assert_true(cq_ws_done(f->ws));
    assert_false(cq_ws_can_send(f->ws));
    assert_int_equal(cq_ws_close_code_received(f->ws), 1000);
    struct iovec iov = {(void *)"x", 1};
    assert_int_equal(cq_ws_send_binary(f->ws, &iov, 1), CQ_ECLOSED);
    assert_int_equal(cq_ws_ping(f->ws, NULL, 0), CQ_ECLOSED);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    fx_free(f);
    free(in.p);
}

/* wslay checks a Close reason per payload chunk; the session hands it a Close in one piece,
 * so a multi-byte reason split anywhere is still accepted and echoed intact. */
static void test_close_reason_every_split(void **state)
{
    (void)state;
    static const char reason[] = "fin \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ok";
    bytes_t in = {0};
    frame(&in, true, OP_PING, "p", 1);
    close_frame(&in, 1000, reason, sizeof(reason) - 1);
    for (size_t k = 0; k <= in.len + 1; k++) {
        fixture_t *f = fx_new(0);
        assert_int_equal(feed_split(f, &in, k <= in.len ? k : SIZE_MAX), 0);
        assert_int_equal(f->close_code, 1000);
        assert_string_equal(f->close_reason, reason);
        sframe_t fr[4];
        assert_int_equal(server_frames(f, fr, 4), 2);
        assert_int_equal(fr[0].op, OP_PONG);
        assert_int_equal(fr[1].op, OP_CLOSE);
        assert_int_equal(fr[1].len, sizeof(reason) + 1);
        assert_memory_equal(fr[1].data + 2, reason, sizeof(reason) - 1);
        assert_true(cq_ws_done(f->ws));
        fx_free(f);
    }
    free(in.p);
}

static void test_close_without_status(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame(&in, true, OP_CLOSE, NULL, 0);
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->close_code, 1005);
    assert_only_close(f, 0);
    assert_true(cq_ws_done(f->ws));
    fx_free(f);
    free(in.p);
}

/* wslay discards queued pongs when a Close is queued: a ping answered in the same input as a
 * Close (echoed or failing) still gets its pong, first. */
static void test_pong_before_close(void **state)
{
    (void)state;
    static const int result[] = {0, CQ_EWSPROTO, CQ_EWSDATA, CQ_EWSPROTO, CQ_EWSPROTO};
    static const int code[] = {1000, 1002, 1007, 1002, 1002};
    for (int variant = 0; variant < 5; variant++) {
        bytes_t in = {0};
        frame(&in, true, OP_PING, "p", 1);
        if (variant == 0)
            close_frame(&in, 1000, NULL, 0);
        else if (variant == 1)
            frame(&in, true, OP_CLOSE, "\x03", 1);
        else if (variant == 2)
            frame(&in, true, OP_TEXT, "\xff", 1);
        else if (variant == 3)
            frame(&in, true, OP_CONT, "x", 1); /* wslay fails it before any callback */
        else
            frame_ex(&in, true, OP_BIN, "x", 1, F_RSV1); /* the scanner fails it */
        fixture_t *f = fx_new(0);
        assert_int_equal(cq_ws_input(f->ws, in.p, in.len), result[variant]);
        sframe_t fr[4];
        assert_int_equal(server_frames(f, fr, 4), 2);
        assert_int_equal(fr[0].op, OP_PONG);
        assert_int_equal(fr[1].op, OP_CLOSE);
        assert_int_equal(fr[1].data[0] << 8 | fr[1].data[1], code[variant]);
        assert_true(cq_ws_done(f->ws));
        fx_free(f);
        free(in.p);
    }
}

static void test_close_bad_codes(void **state)
{
    (void)state;
    static const int bad[] = {0, 999, 1004, 1005, 1006, 1016, 2999, 5000, 65535};
    bytes_t in = {0};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        in.len = 0;
        close_frame(&in, bad[i], NULL, 0);
        expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    }
    in.len = 0;
    frame(&in, true, OP_CLOSE, "\x03", 1); /* 1-byte payload: the wslay fix */
    expect_fail(&in, 0, CQ_EWSPROTO, 1002);
    static const int good[] = {1000, 1001, 1003, 1007, 1011, 3000, 4999};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        in.len = 0;
        close_frame(&in, good[i], NULL, 0);
        fixture_t *f = fx_new(0);
        assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
        assert_int_equal(f->close_code, good[i]);
        assert_only_close(f, good[i]);
        fx_free(f);
    }
    free(in.p);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame(&in, true, OP_TEXT, "ok\xff", 3);
    expect_fail(&in, 0, CQ_EWSDATA, 1007);
    in.len = 0;
    frame(&in, false, OP_TEXT, "a\xe2\x82", 3); /* truncated sequence at the end */
    frame(&in, true, OP_CONT, "b", 1);
    expect_fail(&in, 0, CQ_EWSDATA, 1007);
    in.len = 0;
    frame(&in, true, OP_TEXT, "\xed\xa0\x80", 3); /* a UTF-16 surrogate */
    expect_fail(&in, 0, CQ_EWSDATA, 1007);
    in.len = 0;
    close_frame(&in, 1000, "\xc0\xaf", 2); /* overlong encoding in the close reason */
    expect_fail(&in, 0, CQ_EWSDATA, 1007);
    in.len = 0;
    frame(&in, true, OP_TEXT, "\xff", 1); /* the first failure decides the code */
    frame_ex(&in, true, OP_BIN, "x", 1, F_RSV1);
    expect_fail(&in, 0, CQ_EWSDATA, 1007);
    in.len = 0;
    frame(&in, true, OP_BIN, "\xff", 1); /* binary is not checked */
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 1);
    fx_free(f);
    free(in.p);
}

static void test_message_too_big(void **state)
{
    (void)state;
    uint8_t *pl = pattern(201);
    bytes_t in = {0};
    frame(&in, true, OP_BIN, pl, 200); /* exactly the limit: fine */
    fixture_t *f = fx_new(200);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 1);
    fx_free(f);
    in.len = 0;
    frame(&in, true, OP_BIN, pl, 201);
    expect_fail(&in, 200, CQ_ETOOBIG, 1009);
    in.len = 0;
    frame(&in, false, OP_BIN, pl, 120); /* fragments adding up past the limit */
    frame(&in, true, OP_CONT, pl, 81);
    expect_fail(&in, 200, CQ_ETOOBIG, 1009);
    in.len = 0;
    /* a limit below 125 is raised to 125: the largest ping still passes */
    frame(&in, true, OP_PING, pl, 125);
    f = fx_new(10);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    sframe_t fr[2];
    assert_int_equal(server_frames(f, fr, 2), 1);
    assert_int_equal(fr[0].op, OP_PONG);
    fx_free(f);
    in.len = 0;
    frame(&in, true, OP_BIN, pl, 126);
    expect_fail(&in, 10, CQ_ETOOBIG, 1009);
    in.len = 0;
    static const uint8_t huge[] = {0x82, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 'x'};
    bytes_add(&in, huge, sizeof(huge));
    expect_fail(&in, 0, CQ_ETOOBIG, 1009);
    free(in.p);
    free(pl);
}

/* ---- sending --------------------------------------------------------------------------- */

static void check_send(size_t len)
{
    uint8_t *pl = pattern(len);
    fixture_t *f = fx_new(0);
    size_t a = len / 3, b = len / 2;
    struct iovec iov[3] = {{pl, a}, {pl + a, b - a}, {pl + b, len - b}};
    assert_int_equal(cq_ws_send_binary(f->ws, iov, 3), 0);
    sframe_t fr[2];
    assert_int_equal(server_frames(f, fr, 2), 1);
    assert_true(fr[0].fin);
    assert_int_equal(fr[0].op, OP_BIN);
    assert_int_equal(fr[0].len, len);
    assert_memory_equal(fr[0].data, pl, len);
    /* the payload went straight through: header call + one call per non-empty iovec */
    int parts = (a > 0) + (b - a > 0) + (len - b > 0);
    assert_int_equal(f->send_calls, 1 + parts);
    fx_free(f);
    free(pl);
}

static void test_send_binary_lengths(void **state)
{
    (void)state;
    check_send(0);
    check_send(7);
    check_send(125);
    check_send(126);
    check_send(65535);
    check_send(65536);
    check_send(100000);
    uint8_t hdr[CQ_WS_HEADER_MAX];
    assert_int_equal(cq_ws_binary_header(5, hdr), 2);
    assert_int_equal(hdr[0], 0x82);
    assert_int_equal(hdr[1], 5);
    assert_int_equal(cq_ws_binary_header(1000, hdr), 4);
    assert_int_equal(cq_ws_binary_header(1u << 20, hdr), 10);
    assert_int_equal(hdr[7], 0x10);
}

/* A pong queued by input goes out before a binary sent from on_message. */
static void test_send_order_in_callback(void **state)
{
    (void)state;
    bytes_t in = {0};
    frame(&in, true, OP_PING, "p", 1);
    frame(&in, true, OP_BIN, "hi", 2);
    fixture_t *f = fx_new(0);
    f->reply_in_callback = true;
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    sframe_t fr[4];
    assert_int_equal(server_frames(f, fr, 4), 2);
    assert_int_equal(fr[0].op, OP_PONG);
    assert_int_equal(fr[1].op, OP_BIN);
    assert_int_equal(fr[1].len, 5);
    assert_memory_equal(fr[1].data, "re:hi", 5);
    fx_free(f);
    free(in.p);
}

static void test_begin_binary(void **state)
{
    (void)state;
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_ping(f->ws, (const uint8_t *)"abc", 3), 0);
    uint8_t hdr[CQ_WS_HEADER_MAX];
    assert_int_equal(cq_ws_begin_binary(f->ws, 300, hdr), 4);
    assert_int_equal(hdr[0], 0x82);
    assert_int_equal(hdr[1], 126);
    sframe_t fr[2];
    assert_int_equal(server_frames(f, fr, 2), 1);
    assert_int_equal(fr[0].op, OP_PING);
    assert_memory_equal(fr[0].data, "abc", 3);
    uint8_t big[126] = {0};
    assert_int_equal(cq_ws_ping(f->ws, big, 126), -EINVAL);
    fx_free(f);

    f = fx_new(0);
    struct iovec iov[2] = {{(void *)"h\xc3\xa9", 3}, {(void *)"llo", 3}};
    assert_int_equal(cq_ws_send(f->ws, CQ_WS_TEXT, iov, 2), 0);
    assert_int_equal(cq_ws_send(f->ws, OP_PING, iov, 2), -EINVAL);
    assert_int_equal(server_frames(f, fr, 2), 1);
    assert_int_equal(fr[0].op, OP_TEXT);
    assert_true(fr[0].fin);
    assert_int_equal(fr[0].len, 6);
    assert_memory_equal(fr[0].data, "h\xc3\xa9llo", 6);
    fx_free(f);
}

static void test_server_close(void **state)
{
    (void)state;
    fixture_t *f = fx_new(0);
    assert_int_equal(cq_ws_close(f->ws, 999, NULL), -EINVAL);
    assert_int_equal(cq_ws_close(f->ws, 1005, NULL), -EINVAL);
    char longr[130];
    memset(longr, 'r', 124);
    longr[124] = '\0';
    assert_int_equal(cq_ws_close(f->ws, 1000, longr), -EINVAL);
    assert_int_equal(cq_ws_close(f->ws, 1001, "going away"), 0);
    assert_only_close(f, 1001);
    assert_false(cq_ws_can_send(f->ws));
    assert_false(cq_ws_done(f->ws)); /* waits for the peer's Close */
    assert_int_equal(cq_ws_close(f->ws, 1000, NULL), CQ_ECLOSED);
    uint8_t hdr[CQ_WS_HEADER_MAX];
    assert_int_equal(cq_ws_begin_binary(f->ws, 1, hdr), CQ_ECLOSED);
    bytes_t in = {0};
    frame(&in, true, OP_BIN, "still", 5); /* messages may still arrive */
    close_frame(&in, 1001, NULL, 0);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0);
    assert_int_equal(f->nmsgs, 1);
    assert_int_equal(f->close_code, 1001);
    assert_only_close(f, 1001); /* no second Close */
    assert_true(cq_ws_done(f->ws));
    fx_free(f);
    free(in.p);
}

static void test_on_send_failure(void **state)
{
    (void)state;
    fixture_t *f = fx_new(0);
    f->send_fail_at = 2; /* the payload of the first message */
    struct iovec iov = {(void *)"abc", 3};
    assert_int_equal(cq_ws_send_binary(f->ws, &iov, 1), -ENOBUFS);
    assert_false(cq_ws_can_send(f->ws));
    assert_int_equal(cq_ws_send_binary(f->ws, &iov, 1), -ENOBUFS);
    fx_free(f);

    f = fx_new(0);
    f->send_fail_at = 1; /* the pong */
    bytes_t in = {0};
    frame(&in, true, OP_PING, "p", 1);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), -ENOBUFS);
    assert_int_equal(cq_ws_input(f->ws, in.p, in.len), 0); /* ignored from now on */
    fx_free(f);
    free(in.p);
}

static void test_fail_n(void **state)
{
    (void)state;
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        cq_ws_t *ws = cq_ws_new(&CBS, NULL, 0);
        bool ok = ws != NULL;
        cq_ws_free(ws);
        if (test_alloc_round_end(ok))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_text_message),
        cmocka_unit_test(test_fragmentation_every_split),
        cmocka_unit_test(test_fifty_frames_one_write),
        cmocka_unit_test(test_ping_pong),
        cmocka_unit_test(test_control_frame_rules),
        cmocka_unit_test(test_bad_header_split),
        cmocka_unit_test(test_rsv_and_reserved_opcodes),
        cmocka_unit_test(test_unmasked_and_bad_lengths),
        cmocka_unit_test(test_continuation_rules),
        cmocka_unit_test(test_close_1000_echo),
        cmocka_unit_test(test_close_reason_every_split),
        cmocka_unit_test(test_close_without_status),
        cmocka_unit_test(test_pong_before_close),
        cmocka_unit_test(test_close_bad_codes),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_message_too_big),
        cmocka_unit_test(test_send_binary_lengths),
        cmocka_unit_test(test_send_order_in_callback),
        cmocka_unit_test(test_begin_binary),
        cmocka_unit_test(test_server_close),
        cmocka_unit_test(test_on_send_failure),
        cmocka_unit_test(test_fail_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
