/* pkg/buf: refcounted buffers, the capped arena and the growable buffer. */
#include "test_pkg.h"

#include "cq_arena.h"
#include "cq_buf.h"
#include "cq_sbuf.h"
#include "test_alloc.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* ---- cq_buf ---------------------------------------------------------------------------- */

void test_buf_refcount(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    long live0 = cq_buf_live();
    cq_buf_t *b = cq_buf_new(100);
    assert_non_null(b);
    assert_int_equal(cq_buf_refs(b), 1);
    assert_int_equal(b->len, 0);
    assert_int_equal(b->cap, 100);
    assert_int_equal(cq_buf_live(), live0 + 1);
    memset(b->data, 0xab, 100); /* the whole capacity is usable */

    assert_ptr_equal(cq_buf_ref(b), b);
    assert_int_equal(cq_buf_refs(b), 2);
    cq_buf_ref_n(b, 0);
    assert_int_equal(cq_buf_refs(b), 2);
    cq_buf_ref_n(b, 5);
    assert_int_equal(cq_buf_refs(b), 7);
    for (int i = 0; i < 6; i++) {
        cq_buf_unref(b);
        assert_int_equal(cq_buf_live(), live0 + 1);
        assert_int_equal(test_alloc_live(), 1);
    }
    assert_int_equal(cq_buf_refs(b), 1);
    cq_buf_unref(b);
    assert_int_equal(cq_buf_live(), live0);
    assert_int_equal(test_alloc_live(), 0);
    cq_buf_unref(NULL);
    assert_int_equal(cq_buf_live(), live0);
    test_alloc_remove();
}

void test_buf_from_and_limits(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    long live0 = cq_buf_live();
    static const char text[] = "encode once, fan out by reference";
    cq_buf_t *b = cq_buf_from(text, sizeof(text));
    assert_non_null(b);
    assert_int_equal(b->len, sizeof(text));
    assert_memory_equal(b->data, text, sizeof(text));
    cq_buf_t *e = cq_buf_from(NULL, 0);
    assert_non_null(e);
    assert_int_equal(e->len, 0);
    assert_int_equal(cq_buf_live(), live0 + 2);
    cq_buf_unref(b);
    cq_buf_unref(e);

    /* A capacity that cannot be stored in the 32-bit field is refused without allocating. */
    unsigned long calls = test_alloc_calls();
    assert_null(cq_buf_new((size_t)UINT32_MAX));
    assert_null(cq_buf_new(SIZE_MAX));
    assert_int_equal(test_alloc_calls(), calls);

    /* OOM: NULL, and the live counter does not move. */
    test_alloc_install(1, true);
    assert_null(cq_buf_new(10));
    assert_null(cq_buf_from("x", 1));
    assert_int_equal(cq_buf_live(), live0);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

#define UNREF_THREADS 4
#define UNREF_EACH    50000u

static void *unref_many(void *arg)
{
    cq_buf_t *b = arg;
    for (uint32_t i = 0; i < UNREF_EACH; i++) {
        cq_buf_ref(b);
        cq_buf_unref(b);
        cq_buf_unref(b);
    }
    return NULL;
}

/* References taken up front (fan-out style) and dropped from several threads: the buffer is
 * freed exactly once, by whichever thread drops the last reference. */
void test_buf_threaded_unref(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    long live0 = cq_buf_live();
    for (int round = 0; round < 4; round++) {
        cq_buf_t *b = cq_buf_new(64);
        assert_non_null(b);
        cq_buf_ref_n(b, UNREF_THREADS * UNREF_EACH - 1);
        pthread_t th[UNREF_THREADS];
        for (int i = 0; i < UNREF_THREADS; i++)
            assert_int_equal(pthread_create(&th[i], NULL, unref_many, b), 0);
        for (int i = 0; i < UNREF_THREADS; i++)
            assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(cq_buf_live(), live0);
        assert_int_equal(test_alloc_live(), 0);
    }
    test_alloc_remove();
}

/* ---- cq_arena -------------------------------------------------------------------------- */

void test_arena_cap(void **state)
{
    (void)state;
    cq_arena_t a;
    cq_arena_init(&a, 100);
    unsigned char *p = cq_arena_alloc(&a, 1);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 8, 0);
    assert_int_equal(a.used, 8);
    /* 8 + 96 > 100: refused, and nothing is charged. */
    assert_null(cq_arena_alloc(&a, 92));
    assert_int_equal(a.used, 8);
    unsigned char *q = cq_arena_alloc(&a, 88);
    assert_non_null(q);
    assert_int_equal((uintptr_t)q % 8, 0);
    assert_int_equal(a.used, 96);
    memset(q, 0x5a, 88);
    assert_true(q >= p + 8);            /* no overlap */
    assert_null(cq_arena_alloc(&a, 1)); /* 4 bytes left, but sizes round up to 8 */
    assert_null(cq_arena_alloc(&a, 0)); /* even 0 costs 8 bytes */
    assert_int_equal(a.used, 96);
    cq_arena_done(&a);

    /* Exactly up to the cap. */
    cq_arena_init(&a, 96);
    assert_non_null(cq_arena_alloc(&a, 90));
    assert_int_equal(a.used, 96);
    assert_null(cq_arena_alloc(&a, 1));
    cq_arena_done(&a);

    /* Every allocation is 8-aligned and distinct. */
    cq_arena_init(&a, 1 << 20);
    unsigned char *prev = NULL;
    for (size_t n = 0; n < 300; n++) {
        unsigned char *r = cq_arena_alloc(&a, n);
        assert_non_null(r);
        assert_int_equal((uintptr_t)r % 8, 0);
        if (n)
            memset(r, (int)n, n);
        assert_true(r != prev);
        prev = r;
    }
    cq_arena_done(&a);

    /* A zero cap refuses everything. */
    cq_arena_init(&a, 0);
    assert_null(cq_arena_alloc(&a, 1));
    cq_arena_done(&a);
}

void test_arena_reset_reuse(void **state)
{
    (void)state;
    cq_arena_t a;
    cq_arena_init(&a, 64 * 1024);
    void *first = cq_arena_alloc(&a, 16);
    assert_non_null(first);
    for (int i = 0; i < 100; i++)
        assert_non_null(cq_arena_alloc(&a, 100)); /* spills into more blocks */
    assert_int_equal(a.used, 16 + 100 * 104);
    cq_arena_reset(&a);
    assert_int_equal(a.used, 0);
    /* The first (oldest) block is kept and rewound. */
    assert_ptr_equal(cq_arena_alloc(&a, 16), first);
    /* The cap applies afresh after a reset. */
    cq_arena_reset(&a);
    assert_non_null(cq_arena_alloc(&a, 60 * 1024));
    assert_null(cq_arena_alloc(&a, 8 * 1024));
    cq_arena_reset(&a);
    assert_non_null(cq_arena_alloc(&a, 8 * 1024));
    cq_arena_done(&a);
    assert_null(a.blocks);
    cq_arena_done(&a); /* twice is harmless */
}

void test_arena_blocks_freed(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    cq_arena_t a;
    cq_arena_init(&a, 1 << 20);
    cq_arena_reset(&a); /* reset of an empty arena */
    assert_int_equal(test_alloc_live(), 0);

    assert_non_null(cq_arena_alloc(&a, 10));
    assert_int_equal(test_alloc_live(), 1);
    assert_non_null(cq_arena_alloc(&a, 20000)); /* oversize block */
    assert_non_null(cq_arena_alloc(&a, 4000));
    assert_non_null(cq_arena_alloc(&a, 4000));
    assert_true(test_alloc_live() >= 3);
    cq_arena_reset(&a);
    assert_int_equal(test_alloc_live(), 1); /* only the first standard block survives */

    cq_arena_done(&a);
    assert_int_equal(test_alloc_live(), 0);

    /* An arena whose first block is oversize keeps nothing across a reset. */
    cq_arena_init(&a, 1 << 20);
    assert_non_null(cq_arena_alloc(&a, 10000));
    assert_non_null(cq_arena_alloc(&a, 10000));
    cq_arena_reset(&a);
    assert_int_equal(test_alloc_live(), 0);
    assert_non_null(cq_arena_alloc(&a, 8));
    cq_arena_done(&a);
    assert_int_equal(test_alloc_live(), 0);

    /* Refusals over the cap never allocate. */
    cq_arena_init(&a, 64);
    unsigned long calls = test_alloc_calls();
    assert_null(cq_arena_alloc(&a, 65));
    assert_int_equal(test_alloc_calls(), calls);
    cq_arena_done(&a);
    test_alloc_remove();
}

void test_arena_oom(void **state)
{
    (void)state;
    test_alloc_install(1, true);
    cq_arena_t a;
    cq_arena_init(&a, 1 << 20);
    assert_null(cq_arena_alloc(&a, 8));
    assert_int_equal(a.used, 0); /* not charged */
    assert_null(a.blocks);
    cq_arena_done(&a);
    assert_int_equal(test_alloc_live(), 0);

    /* The second block fails: the first stays usable. */
    test_alloc_install(2, true);
    cq_arena_init(&a, 1 << 20);
    assert_non_null(cq_arena_alloc(&a, 4000));
    assert_null(cq_arena_alloc(&a, 4000));
    assert_int_equal(a.used, 4000);
    assert_non_null(cq_arena_alloc(&a, 96));
    cq_arena_done(&a);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

/* Sizes within 7 of SIZE_MAX wrap to 0 when rounded up and are then served as 8 bytes. */
void test_arena_huge_request(void **state)
{
    (void)state;
    cq_arena_t a;
    cq_arena_init(&a, 1 << 20);
    for (size_t d = 0; d < 16; d++)
        assert_null(cq_arena_alloc(&a, SIZE_MAX - d));
    assert_int_equal(a.used, 0);
    cq_arena_done(&a);
}

/* Appending nothing to an empty buffer calls memcpy(NULL + 0, p, 0): undefined behaviour
 * (clang UBSan: "applying zero offset to null pointer", "null pointer passed as argument 1";
 * gcc's UBSan does not flag it). */
void test_sbuf_append_zero(void **state)
{
    (void)state;
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_sbuf_append(&b, "x", 0), 0);
    assert_int_equal(cq_sbuf_append(&b, NULL, 0), 0);
    assert_int_equal(b.len, 0);
    cq_sbuf_done(&b);
}

/* A reservation beyond SIZE_MAX/2 doubles the capacity until it wraps to 0; realloc(p, 0)
 * (turned into 1 byte) then "succeeds", leaving cap = 0 < len, after which every reserve
 * believes there is room and appends write past the 1-byte block. */
void test_sbuf_huge_reserve(void **state)
{
    (void)state;
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_sbuf_append(&b, "x", 1), 0);
    assert_int_equal(cq_sbuf_reserve(&b, SIZE_MAX - 8), -ENOMEM);
    cq_sbuf_done(&b);
}

/* ---- cq_sbuf --------------------------------------------------------------------------- */

void test_sbuf_append_consume(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_sbuf_reserve(&b, 0), 0);
    assert_int_equal(test_alloc_live(), 0); /* reserving nothing allocates nothing */
    uint8_t ref[10000];
    for (size_t i = 0; i < sizeof(ref); i++)
        ref[i] = (uint8_t)(i * 31 + 7);
    size_t off = 0;
    /* Append in growing pieces: contents match and capacity only grows. */
    for (size_t n = 1; off + n <= sizeof(ref); n++) {
        size_t cap0 = b.cap;
        assert_int_equal(cq_sbuf_append(&b, ref + off, n), 0);
        off += n;
        assert_int_equal(b.len, off);
        assert_true(b.cap >= b.len && b.cap >= cap0);
    }
    assert_memory_equal(b.data, ref, off);
    assert_int_equal(b.cap & (b.cap - 1), 0); /* doubled from 64 */

    assert_int_equal(cq_sbuf_reserve(&b, 100000), 0);
    assert_true(b.cap - b.len >= 100000);
    assert_memory_equal(b.data, ref, off);

    /* Consume shifts the remainder to the front. */
    size_t len = b.len;
    cq_sbuf_consume(&b, 0);
    assert_int_equal(b.len, len);
    cq_sbuf_consume(&b, 7);
    assert_int_equal(b.len, len - 7);
    assert_memory_equal(b.data, ref + 7, len - 7);
    cq_sbuf_consume(&b, b.len - 3);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, ref + len - 3, 3);
    cq_sbuf_consume(&b, 1000); /* more than there is */
    assert_int_equal(b.len, 0);
    assert_int_equal(cq_sbuf_append(&b, "abc", 3), 0);
    assert_memory_equal(b.data, "abc", 3);
    assert_int_equal(cq_sbuf_append(&b, "z", 0), 0);
    assert_int_equal(b.len, 3);

    cq_sbuf_done(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(test_alloc_live(), 0);
    cq_sbuf_done(&b); /* twice is harmless */
    test_alloc_remove();
}

void test_sbuf_oom(void **state)
{
    (void)state;
    /* Fail each growth in turn: -ENOMEM, contents intact, and retrying succeeds. */
    for (unsigned long n = 1; n < 10; n++) {
        test_alloc_install(n, false);
        cq_sbuf_t b;
        cq_sbuf_init(&b);
        int failures = 0;
        for (int i = 0; i < 100; i++) {
            uint8_t chunk[10];
            memset(chunk, i, sizeof(chunk));
            int r = cq_sbuf_append(&b, chunk, sizeof(chunk));
            if (r < 0) {
                failures++;
                assert_int_equal(r, -ENOMEM);
                assert_int_equal(b.len, (size_t)i * 10);
                r = cq_sbuf_append(&b, chunk, sizeof(chunk));
            }
            assert_int_equal(r, 0);
        }
        for (int i = 0; i < 100; i++)
            assert_int_equal(b.data[i * 10 + 9], i);
        /* 64 -> 128 -> 256 -> 512 -> 1024: five allocations. */
        assert_int_equal(failures, n <= 5 ? 1 : 0);
        cq_sbuf_done(&b);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
}

/* Formatted appends of any length: short ones, one longer than any line buffer the metrics
 * writers used to have (they copied n bytes from a 512-byte line when the text was longer). */
void test_sbuf_printf(void **state)
{
    (void)state;
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_sbuf_printf(&b, "a=%d ", 42), 0);
    char big[5000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(cq_sbuf_printf(&b, "%s|%s", big, "end"), 0);
    assert_int_equal(b.len, 5 + 4999 + 4);
    assert_memory_equal(b.data, "a=42 x", 6);
    assert_memory_equal(b.data + b.len - 5, "x|end", 5);
    assert_int_equal(cq_sbuf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, 5 + 4999 + 4);
    cq_sbuf_done(&b);
}
