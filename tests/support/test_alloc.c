#include "test_alloc.h"

#include "cq_alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Each block carries a header with its size and a magic word, so frees of foreign blocks (from
 * libc, or double frees) are caught at once instead of corrupting the counters. */
#define HDR   16u
#define MAGIC 0x7e57a110c0ffeeULL

typedef struct hdr {
    uint64_t magic;
    uint64_t size;
} hdr_t;

static _Atomic unsigned long calls, failed;
static _Atomic long live, live_bytes;
static unsigned long fail_at_n;
static bool fail_sticky;

static bool should_fail(void)
{
    unsigned long n = atomic_fetch_add(&calls, 1) + 1;
    if (!fail_at_n)
        return false;
    if (n == fail_at_n || (fail_sticky && n > fail_at_n)) {
        atomic_fetch_add(&failed, 1);
        return true;
    }
    return false;
}

static hdr_t *hdr_of(void *p)
{
    hdr_t *h = (hdr_t *)(void *)((char *)p - HDR);
    if (h->magic != MAGIC)
        abort(); /* not ours, or freed twice */
    return h;
}

static void *t_malloc(size_t size)
{
    if (should_fail() || size > SIZE_MAX - HDR)
        return NULL;
    hdr_t *h = malloc(HDR + size);
    if (!h)
        return NULL;
    h->magic = MAGIC;
    h->size = size;
    atomic_fetch_add(&live, 1);
    atomic_fetch_add(&live_bytes, (long)size);
    return (char *)h + HDR;
}

static void t_free(void *p)
{
    if (!p)
        return;
    hdr_t *h = hdr_of(p);
    atomic_fetch_sub(&live, 1);
    atomic_fetch_sub(&live_bytes, (long)h->size);
    h->magic = 0;
    free(h);
}

static void *t_realloc(void *p, size_t size)
{
    if (!p)
        return t_malloc(size);
    if (should_fail() || size > SIZE_MAX - HDR)
        return NULL; /* the old block stays valid, as with realloc() */
    hdr_t *old = hdr_of(p);
    uint64_t osize = old->size;
    hdr_t *h = realloc(old, HDR + size);
    if (!h)
        return NULL;
    h->size = size;
    atomic_fetch_add(&live_bytes, (long)size - (long)osize);
    return (char *)h + HDR;
}

static const cq_allocator_t test_allocator = {t_malloc, t_realloc, t_free};

void test_alloc_install(unsigned long fail_at, bool sticky)
{
    atomic_store(&calls, 0);
    atomic_store(&failed, 0);
    fail_at_n = fail_at;
    fail_sticky = sticky;
    cq_alloc_set(&test_allocator);
}

void test_alloc_remove(void)
{
    cq_alloc_set(NULL);
    fail_at_n = 0;
}

long test_alloc_live(void)
{
    return atomic_load(&live);
}

long test_alloc_live_bytes(void)
{
    return atomic_load(&live_bytes);
}

unsigned long test_alloc_calls(void)
{
    return atomic_load(&calls);
}

unsigned long test_alloc_failed(void)
{
    return atomic_load(&failed);
}

bool test_alloc_round_end(bool ok)
{
    unsigned long nfailed = test_alloc_failed();
    test_alloc_remove();
    assert_int_equal(test_alloc_live(), 0);
    if (nfailed == 0) {
        assert_true(ok);
        return true;
    }
    assert_false(ok);
    return false;
}
