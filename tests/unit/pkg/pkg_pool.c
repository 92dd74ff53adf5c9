/* pkg/buf: the block pool (cq_pool): classes, reuse, the byte bound, unpooled sizes, the NULL
 * pool, and allocation failures. Allocations are counted with the test allocator. */
#include "test_pkg.h"

#include "cq_pool.h"
#include "test_alloc.h"

#include <string.h>

static cq_pool_stats_t stats(const cq_pool_t *p)
{
    cq_pool_stats_t st;
    cq_pool_stats(p, &st);
    return st;
}

/* A block goes back to its class and is the next one given out for any size of that class. */
void test_pool_reuse(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    cq_pool_t *p = cq_pool_new(1 << 20);
    assert_non_null(p);
    void *a = cq_pool_get(p, 600);
    assert_non_null(a);
    memset(a, 0xaa, 640); /* the whole class block is usable */
    cq_pool_put(p, a, 600);
    assert_int_equal(stats(p).cached_blocks, 1);
    assert_int_equal(stats(p).cached_bytes, 640);
    unsigned long calls = test_alloc_calls();
    assert_ptr_equal(cq_pool_get(p, 513), a); /* 513..640 share the 640-byte class */
    assert_int_equal(test_alloc_calls(), calls);
    cq_pool_put(p, a, 513);
    void *b = cq_pool_get(p, 641); /* the next class: a new block */
    assert_true(b != a);
    assert_int_equal(test_alloc_calls(), calls + 1);
    cq_pool_put(p, b, 641);
    /* LIFO within a class */
    void *c1 = cq_pool_get(p, 100000), *c2 = cq_pool_get(p, 100000);
    cq_pool_put(p, c1, 100000);
    cq_pool_put(p, c2, 100000);
    assert_ptr_equal(cq_pool_get(p, 100000), c2);
    assert_ptr_equal(cq_pool_get(p, 99000), c1);
    cq_pool_put(p, c1, 99000);
    cq_pool_put(p, c2, 100000);
    cq_pool_stats_t st = stats(p);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.misses, 4);
    assert_int_equal(st.released, 0);
    assert_int_equal(st.cached_blocks, 4);
    assert_int_equal(st.cached_bytes, 640 + 768 + 2 * 114688);
    assert_int_equal(test_alloc_live(), 5); /* the pool and its four blocks */
    cq_pool_free(p);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

/* Block sizes: 512 for small requests, then at most 25 % over the request. */
void test_pool_classes(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    cq_pool_t *p = cq_pool_new(0); /* keeps nothing: every get allocates its class block */
    static const size_t req[][2] = {{1, 512},         {512, 512},        {513, 640},
                                    {1024, 1024},     {1025, 1280},      {1536, 1536},
                                    {1537, 1792},     {524288, 524288},  {524289, 655360},
                                    {800000, 917504}, {1048576, 1048576}};
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        long before = test_alloc_live_bytes();
        void *b = cq_pool_get(p, req[i][0]);
        assert_int_equal(test_alloc_live_bytes() - before, (long)req[i][1]);
        cq_pool_put(p, b, req[i][0]);
        assert_int_equal(test_alloc_live_bytes(), before);
    }
    cq_pool_free(p);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

/* Past max_bytes of free blocks, and above the largest class, blocks go back to the allocator. */
void test_pool_bound(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    cq_pool_t *p = cq_pool_new(2048);
    void *b[4];
    for (int i = 0; i < 4; i++)
        b[i] = cq_pool_get(p, 1000); /* 1024-byte blocks */
    assert_int_equal(test_alloc_live(), 5);
    for (int i = 0; i < 4; i++)
        cq_pool_put(p, b[i], 1000);
    cq_pool_stats_t st = stats(p);
    assert_int_equal(st.cached_blocks, 2);
    assert_int_equal(st.cached_bytes, 2048);
    assert_int_equal(st.released, 2);
    assert_int_equal(test_alloc_live(), 3);
    /* too large for any class: never kept */
    long before = test_alloc_live_bytes();
    void *big = cq_pool_get(p, CQ_POOL_MAX_BLOCK + 1);
    assert_non_null(big);
    assert_int_equal(test_alloc_live_bytes() - before, CQ_POOL_MAX_BLOCK + 1);
    cq_pool_put(p, big, CQ_POOL_MAX_BLOCK + 1);
    assert_int_equal(stats(p).released, 3);
    assert_int_equal(test_alloc_live(), 3);
    /* a zero bound keeps nothing */
    cq_pool_t *none = cq_pool_new(0);
    void *z = cq_pool_get(none, 10);
    cq_pool_put(none, z, 10);
    assert_int_equal(stats(none).cached_blocks, 0);
    assert_int_equal(stats(none).released, 1);
    cq_pool_free(none);
    cq_pool_free(p);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

/* A NULL pool is plain cq_malloc/cq_free. */
void test_pool_null(void **state)
{
    (void)state;
    test_alloc_install(0, false);
    void *b = cq_pool_get(NULL, 3000);
    assert_non_null(b);
    assert_int_equal(test_alloc_live_bytes(), 3000);
    cq_pool_put(NULL, b, 3000);
    cq_pool_put(NULL, NULL, 3000);
    assert_int_equal(test_alloc_live(), 0);
    cq_pool_stats_t st;
    memset(&st, 0xff, sizeof(st));
    cq_pool_stats(NULL, &st);
    assert_int_equal(st.cached_bytes + st.hits + st.misses, 0);
    assert_null(cq_pool_free(NULL));
    test_alloc_remove();
}

/* Fail-N: a failed get returns NULL and leaves the pool as it was; a cached block is served
 * without allocating, so it cannot fail. */
void test_pool_fail_n(void **state)
{
    (void)state;
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        cq_pool_t *p = cq_pool_new(1 << 20);
        bool ok = p != NULL;
        void *a = ok ? cq_pool_get(p, 5000) : NULL;
        ok = ok && a;
        if (ok) {
            cq_pool_put(p, a, 5000);
            assert_ptr_equal(cq_pool_get(p, 5000), a); /* reuse never allocates */
            void *b = cq_pool_get(p, 5000);
            ok = b != NULL;
            if (!ok)
                assert_int_equal(stats(p).cached_blocks, 0);
            cq_pool_put(p, b, 5000);
            cq_pool_put(p, a, 5000);
        }
        cq_pool_free(p);
        if (test_alloc_round_end(ok))
            break;
    }
}
