/* pkg/codec: varints and the Snappy block wrapper. */
#include "test_pkg.h"

#include "cq_err.h"
#include "cq_snappy.h"
#include "cq_varint.h"

#include <stdlib.h>
#include <string.h>

/* ---- cq_varint ------------------------------------------------------------------------- */

static const uint64_t varint_values[] = {
    0,          1,          127,
    128,        255,        300,
    16383,      16384,      2097151,
    2097152,    268435455,  268435456,
    UINT32_MAX, 1ULL << 32, 1ULL << 35,
    1ULL << 49, 1ULL << 56, (1ULL << 63) - 1,
    1ULL << 63, UINT64_MAX, 0xfffffffffffffffeULL,
};

void test_varint_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(varint_values) / sizeof(varint_values[0]); i++) {
        uint64_t v = varint_values[i];
        uint8_t buf[16];
        memset(buf, 0xee, sizeof(buf));
        size_t n = cq_varint_put(buf, v);
        assert_int_equal(n, cq_varint_size(v));
        /* 7 bits per byte: the size is ceil(bits / 7), at least 1, at most 10. */
        size_t bits = 0;
        for (uint64_t t = v; t; t >>= 1)
            bits++;
        assert_int_equal(n, bits ? (bits + 6) / 7 : 1);
        assert_int_equal(buf[n], 0xee); /* nothing written past the end */
        for (size_t j = 0; j + 1 < n; j++)
            assert_true(buf[j] & 0x80);
        assert_false(buf[n - 1] & 0x80);
        uint64_t back = 12345;
        assert_int_equal(cq_varint_get(buf, buf + n, &back), n);
        assert_int_equal(back, v);
        /* Trailing bytes are not consumed. */
        assert_int_equal(cq_varint_get(buf, buf + sizeof(buf), &back), n);
        assert_int_equal(back, v);
    }
    /* Random values of every length. */
    uint64_t s = 42;
    for (int i = 0; i < 100000; i++) {
        uint64_t v = test_rand(&s) >> (test_rand(&s) % 64);
        uint8_t buf[10];
        uint64_t back;
        size_t n = cq_varint_put(buf, v);
        assert_int_equal(cq_varint_get(buf, buf + n, &back), n);
        assert_int_equal(back, v);
    }
}

void test_varint_truncation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(varint_values) / sizeof(varint_values[0]); i++) {
        uint8_t buf[10];
        size_t n = cq_varint_put(buf, varint_values[i]);
        /* Every proper prefix is "truncated" (0), and the output is left alone. */
        for (size_t k = 0; k < n; k++) {
            uint64_t back = 777;
            assert_int_equal(cq_varint_get(buf, buf + k, &back), 0);
            assert_int_equal(back, 777);
        }
    }
    /* Over 10 bytes: refused even with more input available. */
    uint8_t eleven[12];
    memset(eleven, 0x80, sizeof(eleven));
    eleven[10] = 0x01;
    uint64_t v = 5;
    assert_int_equal(cq_varint_get(eleven, eleven + sizeof(eleven), &v), 0);
    assert_int_equal(v, 5);
    /* Non-minimal but <= 10 bytes is accepted (protobuf does too): 0x80 0x80 0x00 = 0. */
    static const uint8_t padded[] = {0x80, 0x80, 0x00};
    assert_int_equal(cq_varint_get(padded, padded + 3, &v), 3);
    assert_int_equal(v, 0);
}

void test_varint_protocol_vector(void **state)
{
    (void)state;
    /* channeld-protocol.md §1.2: int32 -1 is sent as a 10-byte varint. */
    static const uint8_t minus1[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    uint64_t v = 0;
    assert_int_equal(cq_varint_get(minus1, minus1 + sizeof(minus1), &v), 10);
    assert_int_equal(v, UINT64_MAX);
    assert_int_equal((int32_t)(uint32_t)v, -1);
    uint8_t out[10];
    assert_int_equal(cq_varint_put(out, (uint64_t)(int64_t)-1), 10);
    assert_memory_equal(out, minus1, 10);
    /* 150 -> 96 01, the protobuf documentation's own example. */
    assert_int_equal(cq_varint_put(out, 150), 2);
    assert_int_equal(out[0], 0x96);
    assert_int_equal(out[1], 0x01);
}

/* ---- cq_snappy ------------------------------------------------------------------------- */

static void fill(uint8_t *p, size_t n, int kind, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case 0:
            p[i] = (uint8_t)test_rand(s); /* incompressible */
            break;
        case 1:
            p[i] = (uint8_t) "channeld chanq "[i % 15]; /* repetitive */
            break;
        default:
            p[i] = (uint8_t)(test_rand(s) % 4); /* low entropy */
            break;
        }
    }
}

static void round_trip(const uint8_t *in, size_t n)
{
    size_t max = cq_snappy_max_compressed(n);
    assert_true(max >= n);
    uint8_t *c = malloc(max);
    uint8_t *d = malloc(n + 1);
    assert_non_null(c);
    assert_non_null(d);
    size_t clen = SIZE_MAX, dlen = SIZE_MAX;
    assert_int_equal(cq_snappy_compress(in, n, c, &clen), 0);
    assert_true(clen <= max);
    assert_int_equal(cq_snappy_uncompress(c, clen, d, n, &dlen), 0);
    assert_int_equal(dlen, n);
    if (n)
        assert_memory_equal(d, in, n);
    free(c);
    free(d);
}

void test_snappy_round_trip(void **state)
{
    (void)state;
    static const size_t sizes[] = {0,   1,    2,    15,    16,    17,    60,    61,
                                   100, 1000, 4096, 32768, 65535, 65536, 100000};
    uint64_t s = 7;
    uint8_t *in = malloc(100000);
    assert_non_null(in);
    for (int kind = 0; kind < 3; kind++) {
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            fill(in, sizes[i], kind, &s);
            round_trip(in, sizes[i]);
        }
    }
    /* Repetitive data actually shrinks. */
    fill(in, 10000, 1, &s);
    uint8_t *c = malloc(cq_snappy_max_compressed(10000));
    size_t clen;
    assert_int_equal(cq_snappy_compress(in, 10000, c, &clen), 0);
    assert_true(clen < 1000);
    free(c);
    free(in);
}

void test_snappy_corrupt(void **state)
{
    (void)state;
    uint8_t out[256];
    size_t len = 999;
    /* Empty input, and a preamble varint that never ends. */
    assert_int_equal(cq_snappy_uncompress((const uint8_t *)"", 0, out, sizeof(out), &len),
                     CQ_ESNAPPY);
    static const uint8_t endless[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(cq_snappy_uncompress(endless, sizeof(endless), out, sizeof(out), &len),
                     CQ_ESNAPPY);
    /* Says 10 bytes, carries a 3-byte literal. */
    static const uint8_t short_lit[] = {0x0a, 0x08, 'a', 'b', 'c'};
    assert_int_equal(cq_snappy_uncompress(short_lit, sizeof(short_lit), out, sizeof(out), &len),
                     CQ_ESNAPPY);
    /* A copy whose offset points before the start of the output. */
    static const uint8_t bad_copy[] = {0x08, 0x00, 'a', 0x0d, 0x05};
    assert_int_equal(cq_snappy_uncompress(bad_copy, sizeof(bad_copy), out, sizeof(out), &len),
                     CQ_ESNAPPY);
    assert_int_equal(len, 999); /* ret_len untouched on failure */

    /* A valid block, then every truncation of it, and a flipped length byte. */
    uint8_t in[200], c[300];
    uint64_t s = 3;
    fill(in, sizeof(in), 2, &s);
    size_t clen;
    assert_int_equal(cq_snappy_compress(in, sizeof(in), c, &clen), 0);
    for (size_t k = 0; k < clen; k++)
        assert_int_equal(cq_snappy_uncompress(c, k, out, sizeof(out), &len), CQ_ESNAPPY);
    c[0] ^= 0x01; /* 200 -> 201 declared: the stream ends one byte short */
    int r = cq_snappy_uncompress(c, clen, out, sizeof(out), &len);
    assert_int_equal(r, CQ_ESNAPPY);
    assert_int_equal(len, 999);
}

void test_snappy_cap(void **state)
{
    (void)state;
    uint8_t in[1000], c[1200], out[1000];
    uint64_t s = 11;
    fill(in, sizeof(in), 1, &s);
    size_t clen, len = 4242;
    assert_int_equal(cq_snappy_compress(in, sizeof(in), c, &clen), 0);
    assert_int_equal(cq_snappy_uncompress(c, clen, out, 999, &len), CQ_ETOOBIG);
    assert_int_equal(cq_snappy_uncompress(c, clen, out, 0, &len), CQ_ETOOBIG);
    assert_int_equal(len, 4242);
    assert_int_equal(cq_snappy_uncompress(c, clen, out, 1000, &len), 0);
    assert_int_equal(len, 1000);
    assert_memory_equal(out, in, 1000);
    /* A bomb: a tiny block declaring 4 GiB - 1 is refused by the cap before any work. */
    static const uint8_t bomb[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 'x'};
    len = 1;
    assert_int_equal(cq_snappy_uncompress(bomb, sizeof(bomb), out, sizeof(out), &len), CQ_ETOOBIG);
    assert_int_equal(len, 1);
}
