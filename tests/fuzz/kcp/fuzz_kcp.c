/* fuzz_kcp - datagrams and application calls driven into a live KCP engine (cq_kcp.h).
 *
 * Input: one profile byte, then a script of operations. Each operation is an opcode byte
 * followed by its argument bytes:
 *   0, 1, 2  a datagram: u16 LE length (mod 1600), then that many bytes (fewer at the end);
 *            conv bytes are left as given, so both matching and foreign convs are reached
 *   3        advance the clock by arg * 7 ms (1 byte), then cq_kcp_update
 *   4        cq_kcp_recv of up to arg * 16 bytes (1 byte)
 *   5        cq_kcp_send of arg * 32 bytes (1 byte)
 *   6        cq_kcp_flush
 *   7        zero-copy read: cq_kcp_peek, then cq_kcp_consume of arg (1 byte) bytes at most
 * The engine's conv is 0x01020304 (seed datagrams carry it). Invariants checked: input returns
 * 0 or one of its documented errors; every datagram the engine sends is 24..mtu bytes of
 * well-formed segments with our conv, frg 0 and a valid cmd; reads never exceed their cap and
 * match cq_kcp_readable; the queues stay within the windows; send never exceeds the bound. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_kcp.h"

#include <string.h>

#define CONV           0x01020304u
#define FUZZ_MAX_INPUT (1u << 16)

typedef struct fuzz_out {
    uint32_t mtu;
    uint64_t dgrams;
} fuzz_out_t;

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void check_out(void *ud, const uint8_t *d, size_t len)
{
    fuzz_out_t *o = ud;
    FUZZ_CHECK(len >= CQ_KCP_OVERHEAD && len <= o->mtu);
    while (len >= CQ_KCP_OVERHEAD) {
        FUZZ_CHECK(get32(d) == CONV);
        FUZZ_CHECK(d[4] >= CQ_KCP_CMD_PUSH && d[4] <= CQ_KCP_CMD_WINS);
        FUZZ_CHECK(d[5] == 0);
        uint32_t n = get32(d + 20);
        FUZZ_CHECK(n <= len - CQ_KCP_OVERHEAD && n <= o->mtu - CQ_KCP_OVERHEAD);
        FUZZ_CHECK(d[4] == CQ_KCP_CMD_PUSH || n == 0);
        d += CQ_KCP_OVERHEAD + n;
        len -= CQ_KCP_OVERHEAD + n;
    }
    FUZZ_CHECK(len == 0);
    o->dgrams++;
}

static cq_kcp_opts_t pick_opts(uint8_t b)
{
    cq_kcp_opts_t o = (b & 1) ? cq_kcp_opts_fast() : cq_kcp_opts_default();
    if (b & 2) {
        o.rcv_wnd = 4; /* small windows reach the full-queue paths quickly */
        o.snd_wnd = 4;
    }
    if (b & 4)
        o.mtu = 200;
    if (b & 8)
        o.ack_nodelay = !o.ack_nodelay;
    if (b & 16) { /* a server's anti-amplification limit */
        o.amp_factor = 3;
        o.ts_offset = 0x9e3779b9u;
    }
    o.max_snd_bytes = 16 * 1024;
    return o;
}

static void check_state(const cq_kcp_t *k, const cq_kcp_opts_t *o)
{
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    FUZZ_CHECK(st.rcv_queue <= o->rcv_wnd && st.rcv_buf <= o->rcv_wnd);
    FUZZ_CHECK(st.snd_nxt - st.snd_una <= o->snd_wnd);
    FUZZ_CHECK(st.rto <= CQ_KCP_RTO_MAX);
    FUZZ_CHECK(cq_kcp_send_space(k) <= o->max_snd_bytes);
    /* Before the peer's proof, never more than amp_factor times what came in. */
    FUZZ_CHECK(!o->amp_factor || st.verified || st.out_bytes <= o->amp_factor * st.in_bytes);
}

static void op_recv(cq_kcp_t *k, size_t cap)
{
    static uint8_t buf[255 * 16 + 1];
    size_t n = cq_kcp_recv(k, buf, cap);
    FUZZ_CHECK(n <= cap);
    /* Short only when drained (reading may release held segments, so n can exceed what was
     * readable before the call). */
    FUZZ_CHECK(n == cap || cq_kcp_readable(k) == 0);
}

static void op_peek(cq_kcp_t *k, size_t want)
{
    size_t n = 0;
    const uint8_t *p = cq_kcp_peek(k, &n);
    FUZZ_CHECK((p == NULL) == (n == 0));
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n; i++)
        sink ^= p[i]; /* ASan checks the whole run is readable */
    (void)sink;
    FUZZ_CHECK(n <= cq_kcp_readable(k));
    cq_kcp_consume(k, want < n ? want : n);
}

static void op_send(cq_kcp_t *k, size_t n)
{
    static uint8_t buf[255 * 32];
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i % 251);
    size_t space = cq_kcp_send_space(k);
    ssize_t r = cq_kcp_send(k, buf, n);
    FUZZ_CHECK(r >= 0 && (size_t)r <= n && (size_t)r <= space);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > FUZZ_MAX_INPUT)
        return 0;
    cq_kcp_opts_t o = pick_opts(data[0]);
    fuzz_out_t out = {o.mtu, 0};
    cq_kcp_t *k = cq_kcp_new(CONV, &o, check_out, &out);
    FUZZ_CHECK(k != NULL);
    uint64_t now = 1000;
    size_t i = 1;
    while (i < size) {
        uint8_t op = data[i++] & 7;
        uint8_t arg = i < size ? data[i] : 0;
        if (op <= 2) {
            size_t len = i + 1 < size ? (size_t)(data[i] | data[i + 1] << 8) % 1600 : 0;
            i += 2;
            if (i > size)
                break;
            len = len < size - i ? len : size - i;
            uint8_t *dg = malloc(len ? len : 1); /* exact size: ASan sees any over-read */
            FUZZ_CHECK(dg != NULL);
            memcpy(dg, data + i, len);
            int r = cq_kcp_input(k, dg, len, now);
            free(dg);
            FUZZ_CHECK(r == 0 || r == CQ_EKCPCONV || r == CQ_EKCPCMD || r == CQ_EKCPTRUNC ||
                       r == CQ_ETOOBIG);
            i += len;
        } else {
            i++;
            if (op == 3) {
                now += (uint64_t)arg * 7;
                cq_kcp_update(k, now);
                FUZZ_CHECK(cq_kcp_check(k, now) <= now + o.interval);
            } else if (op == 4) {
                op_recv(k, (size_t)arg * 16);
            } else if (op == 5) {
                op_send(k, (size_t)arg * 32);
            } else if (op == 6) {
                cq_kcp_flush(k, now);
            } else {
                op_peek(k, arg);
            }
        }
        check_state(k, &o);
    }
    cq_kcp_free(k);
    return 0;
}
