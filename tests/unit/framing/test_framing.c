/* tests/unit/framing: the 5-byte channeld header, fixed and legacy modes.
 *
 * Habits from style.md §12: every prefix, every two-way (and three-way) split through an
 * accumulator, and inputs placed right before a PROT_NONE guard page. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_framing.h"
#include "cq_sbuf.h"
#include "proto_vectors.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const cq_frame_t sentinel = {(const uint8_t *)"sentinel", 0xdeadbeefu, 0x77};

static void assert_untouched(const cq_frame_t *f)
{
    assert_ptr_equal(f->body, sentinel.body);
    assert_int_equal(f->len, sentinel.len);
    assert_int_equal(f->ct, sentinel.ct);
}

static ssize_t parse(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max,
                     cq_frame_t *f)
{
    *f = sentinel;
    ssize_t r = cq_framing_parse(p, n, mode, max, f);
    if (r <= 0)
        assert_untouched(f); /* *ret is written only on success */
    return r;
}

/* ---- vectors ----------------------------------------------------------------------------- */

static void test_vector_headers(void **state)
{
    (void)state;
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        const proto_vector_t *v = &proto_packets[i];
        uint32_t body = (uint32_t)v->bytes[2] << 8 | v->bytes[3];
        assert_int_equal(body + CQ_FRAME_HDR_LEN, v->len);
        for (int mode = 0; mode < 2; mode++) {
            cq_frame_t f;
            ssize_t r = parse(v->bytes, v->len, (cq_framing_mode_t)mode, CQ_FRAME_MAX_BODY, &f);
            assert_int_equal(r, (ssize_t)v->len);
            assert_ptr_equal(f.body, v->bytes + CQ_FRAME_HDR_LEN);
            assert_int_equal(f.len, body);
            assert_int_equal(f.ct, CQ_CT_NONE);
            /* The smallest limit that admits it, and one less. */
            assert_int_equal(parse(v->bytes, v->len, (cq_framing_mode_t)mode, body, &f),
                             (ssize_t)v->len);
            assert_int_equal(parse(v->bytes, v->len, (cq_framing_mode_t)mode, body - 1, &f),
                             CQ_ETOOBIG);
        }
        /* Trailing bytes (the next packet) are left for the next call. */
        uint8_t two[200];
        memcpy(two, v->bytes, v->len);
        memcpy(two + v->len, vec_auth_req, sizeof(vec_auth_req));
        cq_frame_t f;
        assert_int_equal(
            parse(two, v->len + sizeof(vec_auth_req), CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f),
            (ssize_t)v->len);
        /* A Snappy ct byte is passed through as received, and so is an unknown one. */
        memcpy(two, v->bytes, v->len);
        for (unsigned ct = 1; ct < 256; ct += 127) {
            two[4] = (uint8_t)ct;
            assert_int_equal(parse(two, v->len, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f),
                             (ssize_t)v->len);
            assert_int_equal(f.ct, ct);
        }
    }
}

static void test_vector_prefixes(void **state)
{
    (void)state;
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        const proto_vector_t *v = &proto_packets[i];
        for (int mode = 0; mode < 2; mode++) {
            for (size_t k = 0; k < v->len; k++) {
                cq_frame_t f;
                ssize_t r = parse(v->bytes, k, (cq_framing_mode_t)mode, CQ_FRAME_MAX_BODY, &f);
                if (r != 0)
                    fail_msg("%s: prefix %zu in mode %d gave %zd", v->name, k, mode, r);
            }
        }
    }
}

/* ---- accumulator: a connection's read remainder ------------------------------------------- */

#define MAX_FRAMES 64

typedef struct acc {
    cq_sbuf_t in;
    size_t nframes;
    uint32_t len[MAX_FRAMES];
    uint8_t ct[MAX_FRAMES];
    uint8_t body[MAX_FRAMES][128];
    ssize_t err;
} acc_t;

static void acc_feed(acc_t *a, const uint8_t *p, size_t n, cq_framing_mode_t mode)
{
    if (a->err)
        return;
    /* Zero-length appends are skipped: cq_sbuf_append(empty, p, 0) is UB (kept as the test's own
     * habit). */
    if (n)
        assert_int_equal(cq_sbuf_append(&a->in, p, n), 0);
    for (;;) {
        cq_frame_t f;
        ssize_t r = parse(a->in.data, a->in.len, mode, CQ_FRAME_MAX_BODY, &f);
        if (r < 0) {
            a->err = r;
            return;
        }
        if (r == 0)
            return;
        assert_true(a->nframes < MAX_FRAMES);
        assert_true(f.len <= sizeof(a->body[0]));
        a->len[a->nframes] = f.len;
        a->ct[a->nframes] = f.ct;
        memcpy(a->body[a->nframes], f.body, f.len);
        a->nframes++;
        cq_sbuf_consume(&a->in, (size_t)r);
    }
}

/* The frames every split must reproduce: each vector in order, nothing left over. */
static void acc_check_stream(const acc_t *a)
{
    assert_int_equal(a->err, 0);
    assert_int_equal(a->in.len, 0);
    assert_int_equal(a->nframes, PROTO_NPACKETS);
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        const proto_vector_t *v = &proto_packets[i];
        assert_int_equal(a->len[i], v->len - CQ_FRAME_HDR_LEN);
        assert_int_equal(a->ct[i], 0);
        assert_memory_equal(a->body[i], v->bytes + CQ_FRAME_HDR_LEN, a->len[i]);
    }
}

static size_t build_stream(uint8_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        memcpy(out + n, proto_packets[i].bytes, proto_packets[i].len);
        n += proto_packets[i].len;
    }
    return n;
}

static void test_two_way_splits(void **state)
{
    (void)state;
    uint8_t stream[512];
    size_t n = build_stream(stream);
    static acc_t a;
    for (int mode = 0; mode < 2; mode++) {
        for (size_t cut = 0; cut <= n; cut++) {
            memset(&a, 0, sizeof(a));
            cq_sbuf_init(&a.in);
            acc_feed(&a, stream, cut, (cq_framing_mode_t)mode);
            acc_feed(&a, stream + cut, n - cut, (cq_framing_mode_t)mode);
            acc_check_stream(&a);
            cq_sbuf_done(&a.in);
        }
        /* Each vector alone, split everywhere, too. */
        for (size_t i = 0; i < PROTO_NPACKETS; i++) {
            const proto_vector_t *v = &proto_packets[i];
            for (size_t cut = 0; cut <= v->len; cut++) {
                memset(&a, 0, sizeof(a));
                cq_sbuf_init(&a.in);
                acc_feed(&a, v->bytes, cut, (cq_framing_mode_t)mode);
                assert_int_equal(a.nframes, cut == v->len ? 1 : 0);
                acc_feed(&a, v->bytes + cut, v->len - cut, (cq_framing_mode_t)mode);
                assert_int_equal(a.nframes, 1);
                assert_int_equal(a.in.len, 0);
                cq_sbuf_done(&a.in);
            }
        }
    }
}

static void test_three_way_and_bytewise(void **state)
{
    (void)state;
    uint8_t stream[512];
    size_t n = build_stream(stream);
    static acc_t a;
    for (size_t c1 = 0; c1 <= n; c1 += 3) {
        for (size_t c2 = c1; c2 <= n; c2++) {
            memset(&a, 0, sizeof(a));
            cq_sbuf_init(&a.in);
            acc_feed(&a, stream, c1, CQ_FRAMING_FIXED);
            acc_feed(&a, stream + c1, c2 - c1, CQ_FRAMING_FIXED);
            acc_feed(&a, stream + c2, n - c2, CQ_FRAMING_FIXED);
            acc_check_stream(&a);
            cq_sbuf_done(&a.in);
        }
    }
    /* One byte per read. */
    memset(&a, 0, sizeof(a));
    cq_sbuf_init(&a.in);
    for (size_t i = 0; i < n; i++)
        acc_feed(&a, stream + i, 1, CQ_FRAMING_FIXED);
    acc_check_stream(&a);
    cq_sbuf_done(&a.in);
}

/* ---- guard page ------------------------------------------------------------------------- */

typedef struct guard {
    uint8_t *map;
    size_t page;
} guard_t;

static void guard_init(guard_t *g)
{
    g->page = (size_t)sysconf(_SC_PAGESIZE);
    g->map = mmap(NULL, 2 * g->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect(g->map + g->page, g->page, PROT_NONE), 0);
}

/* Copies p[0..n) so that its last byte is the last readable byte before the guard page. */
static const uint8_t *guard_place(guard_t *g, const uint8_t *p, size_t n)
{
    assert_true(n <= g->page);
    uint8_t *at = g->map + g->page - n;
    if (n)
        memcpy(at, p, n);
    return at;
}

static void guard_done(guard_t *g)
{
    munmap(g->map, 2 * g->page);
}

static void parse_all_prefixes_guarded(guard_t *g, const uint8_t *p, size_t n)
{
    for (int mode = 0; mode < 2; mode++) {
        for (size_t k = 0; k <= n; k++) {
            const uint8_t *at = guard_place(g, p, k);
            cq_frame_t f;
            ssize_t r = parse(at, k, (cq_framing_mode_t)mode, CQ_FRAME_MAX_BODY, &f);
            if (r > 0) {
                /* The body slice lies inside what was given. */
                assert_true(f.body >= at && f.body + f.len <= at + k);
                assert_int_equal((size_t)r, CQ_FRAME_HDR_LEN + f.len);
            }
        }
    }
}

static void test_guard_page(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    for (size_t i = 0; i < PROTO_NPACKETS; i++)
        parse_all_prefixes_guarded(&g, proto_packets[i].bytes, proto_packets[i].len);
    static const uint8_t bad[][6] = {
        {'X', 'H', 0, 1, 0, 0},       {'C', 'X', 0, 1, 0, 0},   {'C', 'H', 0, 0, 0, 0},
        {'C', 'H', 0xff, 0xff, 0, 0}, {'C', 'H', 'N', 1, 0, 0}, {'C', 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        parse_all_prefixes_guarded(&g, bad[i], sizeof(bad[i]));
    /* A maximal body ending at the guard. */
    static uint8_t big[CQ_FRAME_HDR_LEN + 4000];
    memset(big, 0x11, sizeof(big));
    big[0] = 'C';
    big[1] = 'H';
    big[2] = 4000 >> 8;
    big[3] = 4000 & 0xff;
    big[4] = 0;
    const uint8_t *at = guard_place(&g, big, sizeof(big));
    cq_frame_t f;
    assert_int_equal(parse(at, sizeof(big), CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f),
                     (ssize_t)sizeof(big));
    assert_int_equal(parse(at, sizeof(big) - 1, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f), 0);
    guard_done(&g);
}

/* ---- errors ----------------------------------------------------------------------------- */

/* For a bad header: every prefix up to `from` needs more; from there on it is `err`. */
static void expect_error_from(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max,
                              size_t from, ssize_t err)
{
    for (size_t k = 0; k <= n; k++) {
        cq_frame_t f;
        ssize_t r = parse(p, k, mode, max, &f);
        ssize_t want = k < from ? 0 : err;
        if (r != want)
            fail_msg("prefix %zu: got %zd, want %zd", k, r, want);
    }
}

static void test_errors(void **state)
{
    (void)state;
    uint8_t p[16];
    for (int mode = 0; mode < 2; mode++) {
        cq_framing_mode_t m = (cq_framing_mode_t)mode;
        /* Wrong byte 0: provable from the first byte, in both modes. */
        static const uint8_t b0[] = {0x00, 'c', 'H', 0x48, 0xff};
        for (size_t i = 0; i < sizeof(b0); i++) {
            memcpy(p, vec_auth_result, sizeof(vec_auth_result));
            p[0] = b0[i];
            expect_error_from(p, sizeof(vec_auth_result), m, CQ_FRAME_MAX_BODY, 1, CQ_EMAGIC);
        }
        /* Zero length: provable at 4 bytes. */
        static const uint8_t z[] = {'C', 'H', 0, 0, 0, 'x', 'y'};
        expect_error_from(z, sizeof(z), m, CQ_FRAME_MAX_BODY, 4, CQ_EZEROLEN);
        /* Over the limit: provable at 4 bytes, whatever the limit. */
        static const uint8_t big[] = {'C', 'H', 0x01, 0x01, 0};
        expect_error_from(big, sizeof(big), m, 256, 4, CQ_ETOOBIG);
        expect_error_from(big, sizeof(big), m, 0, 4, CQ_ETOOBIG);
        cq_frame_t f;
        assert_int_equal(parse(big, sizeof(big), m, 257, &f), 0); /* fits: needs 257 bytes */
        static const uint8_t max[] = {'C', 'H', 0xff, 0xff, 0};
        assert_int_equal(parse(max, sizeof(max), m, CQ_FRAME_MAX_BODY, &f), 0);
        assert_int_equal(parse(max, sizeof(max), m, CQ_FRAME_MAX_BODY - 1, &f), CQ_ETOOBIG);
    }
    /* Wrong byte 1 in fixed mode: provable at 2 bytes. */
    static const uint8_t b1[] = {0x00, 'h', 'C', 'N', 0x49, 0xff};
    for (size_t i = 0; i < sizeof(b1); i++) {
        memcpy(p, vec_auth_result, sizeof(vec_auth_result));
        p[1] = b1[i];
        expect_error_from(p, sizeof(vec_auth_result), CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, 2,
                          CQ_EMAGIC);
    }
    /* A body of exactly 65535 bytes is accepted and consumed whole. */
    uint8_t *whole = calloc(1, CQ_FRAME_HDR_LEN + 65535u);
    assert_non_null(whole);
    whole[0] = 'C';
    whole[1] = 'H';
    whole[2] = 0xff;
    whole[3] = 0xff;
    cq_frame_t f;
    assert_int_equal(
        parse(whole, CQ_FRAME_HDR_LEN + 65535u, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f),
        (ssize_t)(CQ_FRAME_HDR_LEN + 65535u));
    assert_int_equal(f.len, 65535u);
    free(whole);
}

/* ---- legacy mode ------------------------------------------------------------------------ */

static void test_legacy_short_tag(void **state)
{
    (void)state;
    /* 'C' 'H' 'N' len ct: the pre-2023 tag for bodies < 256 (Go client, JS demo, Unity). */
    uint8_t p[5 + 255];
    memset(p, 0x2a, sizeof(p));
    for (uint32_t len = 1; len < 256; len++) {
        p[0] = 'C';
        p[1] = 'H';
        p[2] = 'N';
        p[3] = (uint8_t)len;
        p[4] = CQ_CT_SNAPPY;
        cq_frame_t f;
        for (size_t k = 0; k < 5 + len; k++)
            assert_int_equal(parse(p, k, CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, &f), 0);
        assert_int_equal(parse(p, 5 + len, CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, &f),
                         (ssize_t)(5 + len));
        assert_int_equal(f.len, len);
        assert_int_equal(f.ct, CQ_CT_SNAPPY);
        assert_ptr_equal(f.body, p + 5);
        /* The fixed reader sees 0x4E00 + len and waits (channeld's stall), or refuses it
         * under a smaller limit. */
        assert_int_equal(parse(p, 5 + len, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f), 0);
        assert_int_equal(parse(p, 5 + len, CQ_FRAMING_FIXED, 0x4E00, &f), CQ_ETOOBIG);
    }
    /* 'C' 'H' 'N' 0 is a zero length. */
    static const uint8_t z[] = {'C', 'H', 'N', 0, 0};
    expect_error_from(z, sizeof(z), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 4, CQ_EZEROLEN);
    /* Legacy bodies >= 256 use hi lo, the same bytes as fixed mode. */
    uint8_t *big = calloc(1, 5 + 1000);
    assert_non_null(big);
    big[0] = 'C';
    big[1] = 'H';
    big[2] = 1000 >> 8;
    big[3] = 1000 & 0xff;
    cq_frame_t f;
    assert_int_equal(parse(big, 5 + 1000, CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, &f), 5 + 1000);
    assert_int_equal(f.len, 1000);
    free(big);
}

static void test_legacy_large_tag(void **state)
{
    (void)state;
    /* Bodies >= 64 KiB put length bits in byte 1: over any 16-bit limit, and known to be so
     * from byte 1 on, whatever bytes 2-3 hold. */
    static const uint8_t t64k[] = {'C', 0x01, 0x00, 0x00, 0};
    expect_error_from(t64k, sizeof(t64k), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 2, CQ_ETOOBIG);
    static const uint8_t t16m[] = {'C', 0xff, 0xff, 0xff, 0};
    expect_error_from(t16m, sizeof(t16m), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 2, CQ_ETOOBIG);
    static const uint8_t tH1[] = {'C', 'H' + 1, 0x00, 0x01, 0};
    expect_error_from(tH1, sizeof(tH1), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 2, CQ_ETOOBIG);
    /* Byte 1 = 0 is no legacy writer's output (lengths >= 64 KiB have a non-zero top byte). */
    static const uint8_t t0[] = {'C', 0x00, 0x00, 0x10, 0};
    expect_error_from(t0, sizeof(t0), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 2, CQ_ETOOBIG);
    /* The same bytes are a bad magic in fixed mode, known from byte 1. */
    expect_error_from(t64k, sizeof(t64k), CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, 2, CQ_EMAGIC);
    /* Byte 0 is checked in legacy mode too. */
    static const uint8_t bad0[] = {'D', 'H', 'N', 1, 0, 0};
    expect_error_from(bad0, sizeof(bad0), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, 1, CQ_EMAGIC);
}

/* ---- header writer and legacy padding ---------------------------------------------------- */

static void test_header_writer(void **state)
{
    (void)state;
    static uint8_t body[65535];
    static uint8_t pkt[CQ_FRAME_HDR_LEN + 65535];
    for (uint32_t len = 1; len <= 65535; len++) {
        for (uint8_t ct = 0; ct < 2; ct++) {
            uint8_t h[CQ_FRAME_HDR_LEN];
            cq_frame_t f;
            /* Fixed: always C H hi lo ct, and it parses back in fixed mode. */
            cq_framing_header(h, len, ct, CQ_FRAMING_FIXED);
            const uint8_t want[] = {'C', 'H', (uint8_t)(len >> 8), (uint8_t)len, ct};
            assert_memory_equal(h, want, CQ_FRAME_HDR_LEN);
            if (len % 251 == 0 || len < 300 || (len >= 0x4DF0 && len <= 0x4F10) || len > 65500) {
                memcpy(pkt, h, CQ_FRAME_HDR_LEN);
                memcpy(pkt + CQ_FRAME_HDR_LEN, body, len);
                assert_int_equal(
                    parse(pkt, CQ_FRAME_HDR_LEN + len, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f),
                    (ssize_t)(CQ_FRAME_HDR_LEN + len));
                assert_int_equal(f.len, len);
                assert_int_equal(f.ct, ct);
            }
            /* Legacy: C H N len ct under 256, otherwise the fixed bytes. */
            cq_framing_header(h, len, ct, CQ_FRAMING_LEGACY);
            if (len < 256) {
                const uint8_t lw[] = {'C', 'H', 'N', (uint8_t)len, ct};
                assert_memory_equal(h, lw, CQ_FRAME_HDR_LEN);
            } else {
                assert_memory_equal(h, want, CQ_FRAME_HDR_LEN);
            }
            /* Legacy writer -> legacy reader round-trips, except the 'N' high byte range. */
            memcpy(pkt, h, CQ_FRAME_HDR_LEN);
            ssize_t r = parse(pkt, sizeof(pkt), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, &f);
            if (len >= 0x4E00 && len <= 0x4EFF) {
                assert_int_equal(r, (len & 0xff) ? (ssize_t)(CQ_FRAME_HDR_LEN + (len & 0xff))
                                                 : CQ_EZEROLEN);
                assert_true(cq_framing_legacy_pad(len) > 0);
            } else {
                assert_int_equal(r, (ssize_t)(CQ_FRAME_HDR_LEN + len));
                assert_int_equal(f.len, len);
            }
        }
    }
}

static void test_legacy_pad(void **state)
{
    (void)state;
    for (uint32_t len = 0; len <= 65535; len++) {
        uint32_t pad = cq_framing_legacy_pad(len);
        bool ambiguous = len >= 0x4E00 && len <= 0x4EFF;
        if (!ambiguous) {
            assert_int_equal(pad, 0);
            continue;
        }
        /* Padding moves the length just past the range, never over the packet limit. */
        assert_true(pad >= 1 && pad <= 256);
        assert_int_equal(len + pad, 0x4F00);
        assert_int_equal(cq_framing_legacy_pad(len + pad), 0);
        /* And the padded length is read identically in both modes. */
        uint8_t h[CQ_FRAME_HDR_LEN];
        cq_framing_header(h, len + pad, 0, CQ_FRAMING_LEGACY);
        cq_frame_t a, b;
        static uint8_t pkt[CQ_FRAME_HDR_LEN + 0x4F00];
        memcpy(pkt, h, CQ_FRAME_HDR_LEN);
        assert_int_equal(parse(pkt, sizeof(pkt), CQ_FRAMING_LEGACY, CQ_FRAME_MAX_BODY, &a),
                         (ssize_t)sizeof(pkt));
        assert_int_equal(parse(pkt, sizeof(pkt), CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &b),
                         (ssize_t)sizeof(pkt));
        assert_int_equal(a.len, 0x4F00);
        assert_int_equal(b.len, 0x4F00);
    }
    /* Edges. */
    assert_int_equal(cq_framing_legacy_pad(0x4DFF), 0);
    assert_int_equal(cq_framing_legacy_pad(0x4E00), 256);
    assert_int_equal(cq_framing_legacy_pad(0x4EFF), 1);
    assert_int_equal(cq_framing_legacy_pad(0x4F00), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_headers),   cmocka_unit_test(test_vector_prefixes),
        cmocka_unit_test(test_two_way_splits),   cmocka_unit_test(test_three_way_and_bytewise),
        cmocka_unit_test(test_guard_page),       cmocka_unit_test(test_errors),
        cmocka_unit_test(test_legacy_short_tag), cmocka_unit_test(test_legacy_large_tag),
        cmocka_unit_test(test_header_writer),    cmocka_unit_test(test_legacy_pad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
