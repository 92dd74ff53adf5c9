/* fuzz_ws - a server WebSocket session (src/transport/ws/cq_ws) fed arbitrary bytes.
 *
 * The input is what a client would send after the upgrade. It is fed whole, one byte at a
 * time and in pseudo-random chunks, each into a fresh session with a 4 KiB message limit.
 * Invariants: every chunking delivers the same messages, emits the same wire bytes and ends
 * with the same result; the output parses as unmasked, minimal-length server frames whose
 * control frames are at most 125 bytes; a Close, if any, is the last frame and carries a valid
 * code; after an error or once done, input is ignored; a session that can still send emits a
 * well-formed binary frame. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_ws.h"

#include <string.h>

#define FUZZ_MAX_INPUT (1u << 17)
#define MAX_MESSAGE    4096

typedef struct run {
    cq_ws_t *ws;
    uint64_t msg_hash;
    size_t msgs, msg_bytes;
    uint8_t out[1u << 17]; /* everything emitted, up to its size */
    size_t out_len;
    int close_code;
} run_t;

static void on_message(void *ud, int opcode, const uint8_t *data, size_t len)
{
    run_t *r = ud;
    FUZZ_CHECK(opcode == CQ_WS_TEXT || opcode == CQ_WS_BINARY);
    FUZZ_CHECK(len <= MAX_MESSAGE);
    FUZZ_CHECK((len == 0) == (data == NULL));
    r->msg_hash = (r->msg_hash ^ fuzz_hash(data, len) ^ (uint64_t)opcode) * 0x100000001b3ULL;
    r->msgs++;
    r->msg_bytes += len;
}

static int on_send(void *ud, const uint8_t *bytes, size_t len)
{
    run_t *r = ud;
    FUZZ_CHECK(len > 0);
    size_t n = len < sizeof(r->out) - r->out_len ? len : sizeof(r->out) - r->out_len;
    memcpy(r->out + r->out_len, bytes, n);
    r->out_len += n;
    return 0;
}

static void on_close(void *ud, int code, const uint8_t *reason, size_t len)
{
    run_t *r = ud;
    FUZZ_CHECK(len <= 123 && reason != NULL);
    r->close_code = code;
}

static const cq_ws_callbacks_t CBS = {on_message, on_send, on_close};

/* Checks that out[0..len) is a sequence of well-formed server frames. Returns the number of
 * frames, or 0 when the output was truncated by the buffer. */
static size_t check_output(const run_t *r)
{
    size_t i = 0, frames = 0;
    bool closed = false;
    while (i < r->out_len) {
        FUZZ_CHECK(!closed); /* nothing after a Close */
        if (r->out_len - i < 2)
            return 0;
        uint8_t b0 = r->out[i], b1 = r->out[i + 1], op = b0 & 0x0f;
        FUZZ_CHECK((b0 & 0xf0) == 0x80 && !(b1 & 0x80)); /* FIN, no RSV, unmasked */
        uint64_t len = b1 & 0x7f;
        size_t h = 2;
        if (len == 126) {
            if (r->out_len - i < 4)
                return 0;
            len = (uint64_t)r->out[i + 2] << 8 | r->out[i + 3];
            FUZZ_CHECK(len >= 126);
            h = 4;
        } else if (len == 127) {
            if (r->out_len - i < 10)
                return 0;
            len = 0;
            for (int k = 0; k < 8; k++)
                len = len << 8 | r->out[i + 2 + k];
            FUZZ_CHECK(len > 0xffff);
            h = 10;
        }
        FUZZ_CHECK(op == 2 || op == 8 || op == 9 || op == 10);
        if (op >= 8)
            FUZZ_CHECK(len <= 125);
        if (op == 8) {
            FUZZ_CHECK(len != 1);
            closed = true;
        }
        if (r->out_len - i - h < len)
            return 0;
        i += h + (size_t)len;
        frames++;
    }
    return frames;
}

static int feed(run_t *r, const uint8_t *data, size_t size, int chunk)
{
    uint64_t rnd = fuzz_hash(data, size) | 1;
    int result = 0;
    size_t off = 0;
    while (off < size) {
        size_t n = size - off;
        if (chunk == 1)
            n = 1;
        else if (chunk > 1 && n > 1)
            n = 1 + fuzz_next(&rnd) % (n < 300 ? n : 300);
        bool over = result != 0 || cq_ws_done(r->ws);
        size_t before = r->out_len;
        int e = cq_ws_input(r->ws, data + off, n);
        if (over) /* ignored once failed or done */
            FUZZ_CHECK(e == 0 && r->out_len == before);
        if (e != 0)
            result = e;
        off += n;
    }
    return result;
}

static void run_once(run_t *r, const uint8_t *data, size_t size, int chunk, int *ret_result)
{
    memset(r, 0, sizeof(*r));
    r->ws = cq_ws_new(&CBS, r, MAX_MESSAGE);
    FUZZ_CHECK(r->ws != NULL);
    int res = feed(r, data, size, chunk);
    FUZZ_CHECK(res == 0 || res == CQ_EWSPROTO || res == CQ_EWSDATA || res == CQ_ETOOBIG);
    FUZZ_CHECK(r->msg_bytes <= size);
    if (res != 0) {
        FUZZ_CHECK(cq_ws_done(r->ws) && !cq_ws_can_send(r->ws));
        size_t before = r->out_len;
        FUZZ_CHECK(cq_ws_input(r->ws, data, size) == 0 && r->out_len == before);
    }
    if (r->close_code)
        FUZZ_CHECK(cq_ws_done(r->ws));
    check_output(r);
    *ret_result = res;
}

/* After the input, a session that can still send emits a binary frame, a ping and a Close. */
static void send_after(run_t *r)
{
    if (!cq_ws_can_send(r->ws))
        return;
    size_t before = r->out_len;
    struct iovec iov[2] = {{(void *)"CH", 2}, {(void *)"\x00\x01\x00x", 4}};
    FUZZ_CHECK(cq_ws_send_binary(r->ws, iov, 2) == 0);
    FUZZ_CHECK(r->out_len == before + 8 && r->out[before] == 0x82 && r->out[before + 1] == 6);
    FUZZ_CHECK(cq_ws_ping(r->ws, (const uint8_t *)"p", 1) == 0);
    FUZZ_CHECK(cq_ws_close(r->ws, 1000, "bye") == 0);
    FUZZ_CHECK(!cq_ws_can_send(r->ws));
    check_output(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    static run_t a, b;
    int ra, rb;
    run_once(&a, data, size, 0, &ra);
    for (int chunk = 1; chunk <= 2; chunk++) {
        run_once(&b, data, size, chunk, &rb);
        FUZZ_CHECK(ra == rb);
        FUZZ_CHECK(a.msgs == b.msgs && a.msg_hash == b.msg_hash);
        FUZZ_CHECK(a.out_len == b.out_len && memcmp(a.out, b.out, a.out_len) == 0);
        FUZZ_CHECK(a.close_code == b.close_code);
        cq_ws_free(b.ws);
    }
    send_after(&a);
    cq_ws_free(a.ws);
    return 0;
}
