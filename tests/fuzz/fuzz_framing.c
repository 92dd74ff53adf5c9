/* fuzz_framing - cq_framing_parse over a byte stream, in both modes and two body limits.
 *
 * The input is what a connection would read. It is parsed three ways that must agree: in one
 * buffer, and through an accumulator fed in chunks whose sizes are derived from the input
 * (one-byte chunks, and pseudo-random ones), as a connection's read remainder would be.
 * Invariants: each frame's slice and length agree with the header bytes; every prefix of a
 * frame needs more data; an error is one of the three codes and stays the same error as
 * more bytes arrive; the header writer round-trips. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_framing.h"

#include <string.h>

#define FUZZ_MAX_INPUT (1u << 18)

typedef struct summary {
    uint64_t frames; /* count */
    uint64_t hash;   /* over (offset, len, ct) of every frame */
    size_t consumed; /* bytes in complete frames */
    ssize_t err;     /* 0 if it ended needing more (or exactly at a boundary) */
} summary_t;

static void add_frame(summary_t *s, size_t off, const cq_frame_t *f)
{
    uint64_t v[3] = {off, f->len, f->ct};
    s->hash = (s->hash ^ fuzz_hash((const uint8_t *)v, sizeof(v))) * 0x100000001b3ULL;
    s->frames++;
}

static void check_frame(const uint8_t *p, size_t n, ssize_t r, const cq_frame_t *f,
                        cq_framing_mode_t mode, uint32_t max)
{
    FUZZ_CHECK(f->len >= 1 && f->len <= max);
    FUZZ_CHECK((size_t)r == CQ_FRAME_HDR_LEN + f->len && (size_t)r <= n);
    FUZZ_CHECK(f->body == p + CQ_FRAME_HDR_LEN);
    FUZZ_CHECK(f->ct == p[4]);
    FUZZ_CHECK(p[0] == 'C');
    uint8_t h[CQ_FRAME_HDR_LEN];
    if (mode == CQ_FRAMING_FIXED) {
        FUZZ_CHECK(p[1] == 'H');
        cq_framing_header(h, f->len, f->ct, CQ_FRAMING_FIXED);
        FUZZ_CHECK(memcmp(h, p, CQ_FRAME_HDR_LEN) == 0);
    } else {
        /* The legacy writer's header parses back to the same length unless it is ambiguous. */
        cq_framing_header(h, f->len, f->ct, CQ_FRAMING_LEGACY);
        cq_frame_t g;
        uint8_t pkt[CQ_FRAME_HDR_LEN + 256];
        size_t k = f->len < 256 ? f->len : 0;
        memcpy(pkt, h, CQ_FRAME_HDR_LEN);
        memset(pkt + CQ_FRAME_HDR_LEN, 0, k);
        ssize_t rr = cq_framing_parse(pkt, CQ_FRAME_HDR_LEN + k, mode, max, &g);
        if (f->len < 256)
            FUZZ_CHECK(rr == r && g.len == f->len);
        else if (!cq_framing_legacy_pad(f->len))
            FUZZ_CHECK(rr == 0); /* needs the body */
    }
    /* Every proper prefix needs more data (parsing is O(1), so this is O(frame)). */
    for (size_t k = 0; k < (size_t)r; k++) {
        cq_frame_t g;
        FUZZ_CHECK(cq_framing_parse(p, k, mode, max, &g) == 0);
    }
}

static void check_error(const uint8_t *p, size_t n, ssize_t r, cq_framing_mode_t mode, uint32_t max)
{
    FUZZ_CHECK(r == CQ_EMAGIC || r == CQ_EZEROLEN || r == CQ_ETOOBIG);
    /* Errors are decided within the first four bytes, and do not change afterwards. */
    ssize_t first = 0;
    size_t lim = n < 16 ? n : 16;
    for (size_t k = 0; k <= lim; k++) {
        cq_frame_t g;
        ssize_t x = cq_framing_parse(p, k, mode, max, &g);
        if (first)
            FUZZ_CHECK(x == first);
        else if (x)
            first = x;
        if (k >= 4)
            FUZZ_CHECK(x == r);
    }
    FUZZ_CHECK(first == r);
    if (r == CQ_EMAGIC)
        FUZZ_CHECK(p[0] != 'C' || (mode == CQ_FRAMING_FIXED && p[1] != 'H'));
}

static summary_t run_whole(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max)
{
    summary_t s = {0, 0, 0, 0};
    size_t off = 0;
    for (;;) {
        cq_frame_t f;
        ssize_t r = cq_framing_parse(p + off, n - off, mode, max, &f);
        if (r > 0) {
            check_frame(p + off, n - off, r, &f, mode, max);
            add_frame(&s, off, &f);
            off += (size_t)r;
            continue;
        }
        if (r < 0)
            check_error(p + off, n - off, r, mode, max);
        s.err = r;
        break;
    }
    s.consumed = off;
    return s;
}

/* An accumulator: append a chunk, parse what is complete, move the remainder to the front. */
static summary_t run_chunked(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max,
                             uint64_t seed, uint8_t *acc)
{
    summary_t s = {0, 0, 0, 0};
    size_t have = 0, in = 0, base = 0;
    while (in < n && !s.err) {
        size_t chunk = seed ? 1 + (size_t)(fuzz_next(&seed) % 97) : 1;
        if (chunk > n - in)
            chunk = n - in;
        memcpy(acc + have, p + in, chunk);
        have += chunk;
        in += chunk;
        size_t off = 0;
        for (;;) {
            cq_frame_t f;
            ssize_t r = cq_framing_parse(acc + off, have - off, mode, max, &f);
            if (r > 0) {
                add_frame(&s, base + off, &f);
                off += (size_t)r;
                continue;
            }
            s.err = r;
            break;
        }
        if (off) {
            memmove(acc, acc + off, have - off);
            have -= off;
            base += off;
        }
    }
    s.consumed = base;
    return s;
}

static void same(const summary_t *a, const summary_t *b)
{
    FUZZ_CHECK(a->frames == b->frames);
    FUZZ_CHECK(a->hash == b->hash);
    FUZZ_CHECK(a->consumed == b->consumed);
    FUZZ_CHECK(a->err == b->err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t acc[FUZZ_MAX_INPUT];
    if (size > FUZZ_MAX_INPUT)
        return 0;
    uint64_t seed = fuzz_hash(data, size) | 1;
    static const uint32_t limits[] = {CQ_FRAME_MAX_BODY, 64};
    for (int mode = 0; mode < 2; mode++) {
        for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
            cq_framing_mode_t m = (cq_framing_mode_t)mode;
            summary_t whole = run_whole(data, size, m, limits[i]);
            summary_t bytewise = run_chunked(data, size, m, limits[i], 0, acc);
            summary_t chunked = run_chunked(data, size, m, limits[i], seed, acc);
            same(&whole, &bytewise);
            same(&whole, &chunked);
        }
    }
    return 0;
}
