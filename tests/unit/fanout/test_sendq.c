/* Unit tests of the per-connection send queue: batching, partial writes, limits, Snappy, and
 * batches recycled through a worker's pool (with a fail-N loop). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_sendq.h"
#include "cq_snappy.h"
#include "cq_wire.h"
#include "test_alloc.h"

static cq_buf_t *record(uint32_t type, size_t body_len, uint8_t fill)
{
    uint8_t body[70000];
    memset(body, fill, sizeof(body));
    cq_mp_t mp = {0, 0, 0, type, body, (uint32_t)body_len};
    cq_buf_t *b = cq_wire_record_raw(&mp);
    assert_non_null(b);
    return b;
}

/* Concatenates the iovecs of the current batch, then marks them written. */
static size_t drain(cq_sendq_t *q, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        const struct iovec *iov;
        int cnt;
        assert_int_equal(cq_sendq_prepare(q, &iov, &cnt), 0);
        if (!cnt)
            return n;
        size_t batch = 0;
        for (int i = 0; i < cnt; i++) {
            assert_true(n + iov[i].iov_len <= cap);
            memcpy(out + n, iov[i].iov_base, iov[i].iov_len);
            n += iov[i].iov_len;
            batch += iov[i].iov_len;
        }
        assert_true(cq_sendq_written(q, batch));
    }
}

/* Parses out as packets; returns the number of MessagePacks and checks each body. */
static int count_messages(const uint8_t *p, size_t n, cq_framing_mode_t mode, int *packets)
{
    int msgs = 0;
    *packets = 0;
    size_t off = 0;
    while (off < n) {
        cq_frame_t f;
        ssize_t k = cq_framing_parse(p + off, n - off, mode, CQ_FRAME_MAX_BODY, &f);
        assert_true(k > 0);
        int r = cq_wire_packet_validate(f.body, f.len);
        assert_true(r >= 0);
        msgs += r;
        (*packets)++;
        off += (size_t)k;
    }
    return msgs;
}

static void test_batches_records_under_one_header(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *r = record(100, 10, 'a');
    for (int i = 0; i < 5; i++)
        assert_int_equal(cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0), 0);
    assert_int_equal(cq_buf_refs(r), 6); /* shared, not copied, while queued */
    const struct iovec *iov;
    int cnt;
    assert_int_equal(cq_sendq_prepare(&q, &iov, &cnt), 0);
    assert_int_equal(cnt, 1); /* small records: header and bodies in one contiguous iovec */
    assert_int_equal(iov[0].iov_len, 5 + 5 * r->len);
    assert_int_equal(cq_buf_refs(r), 1); /* copied into the batch: references dropped */
    uint8_t out[4096];
    size_t n = drain(&q, out, sizeof(out));
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), 5);
    assert_int_equal(packets, 1);
    assert_int_equal(n, 5 + 5 * r->len);
    assert_true(cq_sendq_idle(&q));
    assert_int_equal(cq_sendq_bytes(&q), 0);
    cq_buf_unref(r);
    cq_sendq_done(&q);
}

/* A held queue forms no batch: nothing to write, whoever asks, until it is released; what was
 * queued meanwhile then leaves whole, in order. */
static void test_hold(void **state)
{
    (void)state;
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *r = record(100, 10, 'a');
    cq_sendq_hold(&q, true);
    assert_int_equal(cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0), 0);
    assert_int_equal(cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0), 0);
    const struct iovec *iov;
    int cnt = -1;
    assert_int_equal(cq_sendq_prepare(&q, &iov, &cnt), 0);
    assert_int_equal(cnt, 0);
    assert_false(cq_sendq_idle(&q));
    assert_false(cq_sendq_writable(&q)); /* nothing to write now */
    assert_int_equal(cq_sendq_bytes(&q), 2 * (r->len + CQ_FRAME_HDR_LEN));
    cq_sendq_hold(&q, false);
    assert_true(cq_sendq_writable(&q));
    uint8_t out[4096];
    size_t n = drain(&q, out, sizeof(out));
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), 2);
    assert_int_equal(n, 5 + 2 * r->len);
    assert_true(cq_sendq_idle(&q));
    cq_buf_unref(r);
    cq_sendq_done(&q);
}

static void test_splits_packets_at_64k(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *r = record(100, 30000, 'b');
    for (int i = 0; i < 5; i++)
        assert_int_equal(cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0), 0);
    static uint8_t out[400000];
    size_t n = drain(&q, out, sizeof(out));
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), 5);
    assert_int_equal(packets, 3); /* two records per packet at most */
    cq_buf_unref(r);
    cq_sendq_done(&q);
}

static void test_partial_writes_keep_bytes_exact(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *a = record(101, 100, 'x'), *b = record(102, 3, 'y');
    cq_sendq_push(&q, a, CQ_SENDQ_RECORD, 0);
    cq_sendq_push(&q, b, CQ_SENDQ_RECORD, 0);
    uint8_t out[1024];
    size_t n = 0;
    for (;;) { /* write 7 bytes at a time */
        const struct iovec *iov;
        int cnt;
        cq_sendq_prepare(&q, &iov, &cnt);
        if (!cnt)
            break;
        size_t want = 7, got = 0;
        for (int i = 0; i < cnt && got < want; i++) {
            size_t k = iov[i].iov_len < want - got ? iov[i].iov_len : want - got;
            memcpy(out + n + got, iov[i].iov_base, k);
            got += k;
        }
        n += got;
        cq_sendq_written(&q, got);
    }
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), 2);
    assert_int_equal(packets, 1);
    assert_memory_equal(out + 5, a->data, a->len);
    assert_memory_equal(out + 5 + a->len, b->data, b->len);
    cq_buf_unref(a);
    cq_buf_unref(b);
    cq_sendq_done(&q);
}

static void test_hard_limit_refuses(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *r = record(100, 1000, 'c');
    int ok = 0, r2 = 0;
    while ((r2 = cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 10000)) == 0)
        ok++;
    assert_int_equal(r2, CQ_ESLOW);
    assert_true(ok >= 8 && ok <= 10);
    assert_true(cq_sendq_bytes(&q) <= 10000);
    cq_buf_unref(r);
    cq_sendq_done(&q);
    assert_int_equal(cq_buf_live(), 0);
}

/* A fan-out buffer: records appended in order, as a worker's channel buffer is. */
static uint32_t fb_add(cq_buf_t *fb, const cq_buf_t *rec)
{
    uint32_t off = fb->len;
    assert_true(fb->cap - fb->len >= rec->len);
    memcpy(fb->data + off, rec->data, rec->len);
    fb->len += rec->len;
    return off;
}

/* Slices: the first is added (a reference used), the next contiguous ones extend it, the
 * bytes and the accounting are exact, and the buffer's references all come back. */
static void test_slices_extend_and_follow(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *fb1 = cq_buf_new(64), *fb2 = cq_buf_new(1024);
    cq_buf_t *r[4];
    for (int i = 0; i < 4; i++)
        r[i] = record(100 + (uint32_t)i, 20, (uint8_t)('a' + i));
    uint32_t o0 = fb_add(fb1, r[0]), o1 = fb_add(fb1, r[1]);
    cq_buf_ref_n(fb1, 2);
    assert_int_equal(cq_sendq_push_slice(&q, fb1, o0, r[0]->len, NULL, 0), CQ_SENDQ_ADDED);
    assert_int_equal(cq_sendq_push_slice(&q, fb1, o1, r[1]->len, NULL, 0), CQ_SENDQ_EXTENDED);
    cq_buf_unref(fb1); /* the unused reference */
    assert_int_equal(q.count, 1);
    assert_int_equal(cq_sendq_bytes(&q), r[0]->len + r[1]->len + 5);
    /* fb1 is full: the next record goes to fb2 at 0, following fb1's last byte. */
    uint32_t o2 = fb_add(fb2, r[2]), o3 = fb_add(fb2, r[3]);
    cq_buf_ref_n(fb2, 2);
    assert_int_equal(cq_sendq_push_slice(&q, fb2, o2, r[2]->len, fb1, 0), CQ_SENDQ_ADDED);
    assert_int_equal(cq_sendq_push_slice(&q, fb2, o3, r[3]->len, fb1, 0), CQ_SENDQ_EXTENDED);
    cq_buf_unref(fb2);
    assert_int_equal(q.count, 2);
    assert_int_equal(q.runs, 1); /* one run over two buffers */
    cq_buf_unref(fb1);
    cq_buf_unref(fb2); /* the owner's references: the queue keeps both alive */
    static uint8_t out[4096];
    size_t n = drain(&q, out, sizeof(out));
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), 4);
    assert_int_equal(packets, 1);
    size_t off = 5;
    for (int i = 0; i < 4; i++) {
        assert_memory_equal(out + off, r[i]->data, r[i]->len);
        off += r[i]->len;
        cq_buf_unref(r[i]);
    }
    assert_int_equal(off, n);
    assert_int_equal(cq_sendq_bytes(&q), 0);
    assert_int_equal(q.runs, 0);
    cq_sendq_done(&q);
    assert_int_equal(cq_buf_live(), 0);
}

/* A slice that does not continue the queue starts a run, up to CQ_SENDQ_RUNS waiting; then the
 * queue refuses (APART) and the caller queues the record itself, in order. */
static void test_slice_runs_bounded(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *fb = cq_buf_new(8192);
    cq_buf_t *r = record(100, 10, 'r');
    cq_buf_ref_n(fb, 2 * CQ_SENDQ_RUNS);
    int used = 0;
    for (int i = 0; i < CQ_SENDQ_RUNS; i++) {
        uint32_t o = fb_add(fb, r);
        fb_add(fb, r); /* a record this queue does not get: the next one is apart */
        assert_int_equal(cq_sendq_push_slice(&q, fb, o, r->len, NULL, 0), CQ_SENDQ_ADDED);
        used++;
    }
    uint32_t o = fb_add(fb, r);
    assert_int_equal(cq_sendq_push_slice(&q, fb, o, r->len, NULL, 0), CQ_SENDQ_APART);
    assert_int_equal(cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0), 0);
    /* A record entry at the tail: a contiguous slice after it would reorder, so it is apart. */
    assert_int_equal(cq_sendq_push_slice(&q, fb, fb_add(fb, r), r->len, NULL, 0), CQ_SENDQ_APART);
    cq_buf_unref_n(fb, 2 * CQ_SENDQ_RUNS - (uint32_t)used);
    assert_int_equal(q.runs, CQ_SENDQ_RUNS);
    static uint8_t out[8192];
    size_t n = drain(&q, out, sizeof(out));
    int packets;
    assert_int_equal(count_messages(out, n, CQ_FRAMING_FIXED, &packets), CQ_SENDQ_RUNS + 1);
    assert_int_equal(q.runs, 0);
    /* Drained: a new run may start. */
    cq_buf_ref(fb);
    assert_int_equal(cq_sendq_push_slice(&q, fb, fb_add(fb, r), r->len, NULL, 0), CQ_SENDQ_ADDED);
    cq_buf_unref(fb);
    cq_buf_unref(r);
    cq_sendq_done(&q);
    assert_int_equal(cq_buf_live(), 0);
}

/* The hard limit applies to slices too, added or extended. */
static void test_slice_hard_limit(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *fb = cq_buf_new(16384);
    cq_buf_t *r = record(100, 1000, 's');
    cq_buf_ref(fb);
    assert_int_equal(cq_sendq_push_slice(&q, fb, fb_add(fb, r), r->len, NULL, 4096),
                     CQ_SENDQ_ADDED);
    int ok = 1, res;
    while ((res = cq_sendq_push_slice(&q, fb, fb_add(fb, r), r->len, NULL, 4096)) ==
           CQ_SENDQ_EXTENDED)
        ok++;
    assert_int_equal(res, CQ_ESLOW);
    assert_int_equal(ok, (4096 - 5) / r->len); /* one header for the whole slice */
    assert_int_equal(cq_sendq_bytes(&q), 4 * r->len + 5);
    cq_buf_unref(fb);
    cq_buf_unref(r);
    cq_sendq_done(&q);
    assert_int_equal(cq_buf_live(), 0);
}

static void test_soft_limit_needs_duration(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_buf_t *r = record(100, 1000, 'd');
    for (int i = 0; i < 5; i++)
        cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0);
    assert_int_equal(cq_sendq_check_soft(&q, 2000, 1000, 10), 0);   /* starts the clock */
    assert_int_equal(cq_sendq_check_soft(&q, 2000, 1000, 1009), 0); /* 999 ms over */
    assert_int_equal(cq_sendq_check_soft(&q, 2000, 1000, 1010), CQ_ESLOW);
    uint8_t out[8192];
    drain(&q, out, sizeof(out));
    assert_int_equal(cq_sendq_check_soft(&q, 2000, 1000, 5000), 0); /* drained: reset */
    assert_int_equal(q.soft_since_ms, 0);
    cq_buf_unref(r);
    cq_sendq_done(&q);
}

static void test_legacy_mode_headers_and_pad(void **state)
{
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_LEGACY);
    cq_buf_t *small = record(100, 10, 'e');
    cq_sendq_push(&q, small, CQ_SENDQ_RECORD, 0);
    uint8_t out[200000];
    size_t n = drain(&q, out, sizeof(out));
    assert_int_equal(out[2], 'N'); /* legacy tag for bodies < 256 */
    assert_int_equal(out[3], small->len);
    /* A body of 0x4E00..0x4EFF would be misread by legacy readers: it gets padded. */
    cq_mp_t mp = {0, 0, 0, 100, NULL, 0};
    size_t body = 0x4E10 - 8;
    uint8_t *big = calloc(1, body);
    mp.body = big;
    mp.body_len = (uint32_t)body;
    size_t rs = cq_wire_record_size(&mp);
    mp.body_len = (uint32_t)(body - (rs - 0x4E10)); /* record exactly 0x4E10 bytes */
    cq_buf_t *r = cq_wire_record_raw(&mp);
    assert_int_equal(r->len, 0x4E10);
    cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0);
    n = drain(&q, out, sizeof(out));
    uint32_t len = (uint32_t)out[2] << 8 | out[3];
    assert_true(len >= 0x4F00);
    assert_int_equal(n, 5 + len);
    assert_int_equal(cq_wire_packet_validate(out + 5, len), 1); /* pad is a skipped field */
    free(big);
    cq_buf_unref(r);
    cq_buf_unref(small);
    cq_sendq_done(&q);
}

static void test_compress_record(void **state)
{
    cq_buf_t *r = record(100, 2000, 'z'); /* compressible */
    cq_buf_t *p = cq_sendq_compress_record(r, CQ_FRAMING_FIXED);
    assert_non_null(p);
    assert_int_equal(p->data[4], CQ_CT_SNAPPY);
    assert_true(p->len < r->len);
    uint8_t plain[4096];
    size_t plen;
    assert_int_equal(cq_snappy_uncompress(p->data + 5, p->len - 5, plain, sizeof(plain), &plen), 0);
    assert_int_equal(plen, r->len);
    assert_memory_equal(plain, r->data, r->len);
    cq_buf_t *tiny = record(100, 1, 'q'); /* not smaller, still Snappy (channeld's rule) */
    cq_buf_t *tp = cq_sendq_compress_record(tiny, CQ_FRAMING_FIXED);
    assert_int_equal(tp->data[4], CQ_CT_SNAPPY);
    assert_int_equal(cq_snappy_uncompress(tp->data + 5, tp->len - 5, plain, sizeof(plain), &plen),
                     0);
    assert_int_equal(plen, tiny->len);
    assert_memory_equal(plain, tiny->data, tiny->len);
    cq_sendq_t q;
    cq_sendq_init(&q, CQ_FRAMING_FIXED);
    cq_sendq_push(&q, p, CQ_SENDQ_PACKET, 0);
    cq_sendq_push(&q, tiny, CQ_SENDQ_RECORD, 0);
    uint8_t out[8192];
    size_t n = drain(&q, out, sizeof(out));
    assert_int_equal(n, p->len + 5 + tiny->len); /* packet verbatim, then a framed record */
    assert_memory_equal(out, p->data, p->len);
    cq_sendq_done(&q);
    cq_buf_unref(p);
    cq_buf_unref(tp);
    cq_buf_unref(tiny);
    cq_buf_unref(r);
}

/* ---- batches from a pool ---------------------------------------------------------------- */

/* Fills q with a mix: small records (copied), a large one (referenced) and a packet. */
static void push_mix(cq_sendq_t *q, cq_buf_t *small, cq_buf_t *large, cq_buf_t *packet)
{
    for (int i = 0; i < 3; i++)
        assert_int_equal(cq_sendq_push(q, small, CQ_SENDQ_RECORD, 0), 0);
    assert_int_equal(cq_sendq_push(q, large, CQ_SENDQ_RECORD, 0), 0);
    assert_int_equal(cq_sendq_push(q, packet, CQ_SENDQ_PACKET, 0), 0);
}

/* The same bytes as without a pool, and every batch after the first reuses its block. */
static void test_pool_recycles_batches(void **state)
{
    (void)state;
    cq_buf_t *small = record(100, 40, 's'), *large = record(100, 3000, 'l');
    cq_buf_t *packet = cq_sendq_compress_record(small, CQ_FRAMING_FIXED);
    cq_sendq_t plain, pooled;
    cq_sendq_init(&plain, CQ_FRAMING_FIXED);
    cq_sendq_init(&pooled, CQ_FRAMING_FIXED);
    cq_pool_t *pool = cq_pool_new(1 << 20);
    cq_sendq_set_pool(&pooled, pool);
    static uint8_t a[16384], b[16384];
    for (int round = 0; round < 4; round++) {
        push_mix(&plain, small, large, packet);
        push_mix(&pooled, small, large, packet);
        size_t na = drain(&plain, a, sizeof(a)), nb = drain(&pooled, b, sizeof(b));
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        assert_true(cq_sendq_idle(&pooled));
        assert_int_equal(cq_sendq_bytes(&pooled), 0);
    }
    cq_pool_stats_t st;
    cq_pool_stats(pool, &st);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.cached_blocks, 1);
    assert_int_equal(cq_buf_refs(large), 1); /* every reference the batches held is dropped */
    /* done with a batch in flight gives it back, and keeps the pool */
    push_mix(&pooled, small, large, packet);
    const struct iovec *iov;
    int cnt;
    assert_int_equal(cq_sendq_prepare(&pooled, &iov, &cnt), 0);
    cq_sendq_written(&pooled, 1);
    cq_pool_stats(pool, &st);
    assert_int_equal(st.cached_blocks, 0);
    cq_sendq_done(&pooled);
    cq_pool_stats(pool, &st);
    assert_int_equal(st.cached_blocks, 1);
    assert_ptr_equal(pooled.pool, pool);
    assert_int_equal(cq_buf_refs(large), 1);
    cq_sendq_done(&plain);
    cq_pool_free(pool);
    cq_buf_unref(small);
    cq_buf_unref(large);
    cq_buf_unref(packet);
}

/* Fail-N over forming a batch from a pool: a failed batch is -ENOMEM with the queue intact,
 * and the next try sends the same bytes. */
static void test_pool_fail_n(void **state)
{
    (void)state;
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        cq_pool_t *pool = cq_pool_new(1 << 20);
        cq_buf_t *r = cq_buf_from("\x0a\x02hi", 4);
        cq_sendq_t q;
        cq_sendq_init(&q, CQ_FRAMING_FIXED);
        cq_sendq_set_pool(&q, pool);
        bool ok = pool && r && cq_sendq_push(&q, r, CQ_SENDQ_RECORD, 0) == 0;
        if (ok) {
            const struct iovec *iov;
            int cnt;
            int e = cq_sendq_prepare(&q, &iov, &cnt);
            ok = e == 0;
            if (!ok) {
                assert_int_equal(e, -ENOMEM);
                assert_int_equal(q.count, 1);
                assert_null(q.batch);
                assert_int_equal(cq_sendq_bytes(&q), 4 + CQ_FRAME_HDR_LEN);
            } else {
                assert_int_equal(cnt, 1);
                assert_int_equal(iov[0].iov_len, CQ_FRAME_HDR_LEN + 4);
                assert_memory_equal((const uint8_t *)iov[0].iov_base + CQ_FRAME_HDR_LEN,
                                    "\x0a\x02hi", 4);
                assert_true(cq_sendq_written(&q, CQ_FRAME_HDR_LEN + 4));
            }
        }
        cq_sendq_done(&q);
        cq_buf_unref(r);
        cq_pool_free(pool);
        if (test_alloc_round_end(ok))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_records_under_one_header),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_splits_packets_at_64k),
        cmocka_unit_test(test_partial_writes_keep_bytes_exact),
        cmocka_unit_test(test_hard_limit_refuses),
        cmocka_unit_test(test_slices_extend_and_follow),
        cmocka_unit_test(test_slice_runs_bounded),
        cmocka_unit_test(test_slice_hard_limit),
        cmocka_unit_test(test_soft_limit_needs_duration),
        cmocka_unit_test(test_legacy_mode_headers_and_pad),
        cmocka_unit_test(test_compress_record),
        cmocka_unit_test(test_pool_recycles_batches),
        cmocka_unit_test(test_pool_fail_n),
    };
    return cmocka_run_group_tests_name("fanout", tests, NULL, NULL);
}
