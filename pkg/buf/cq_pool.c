/* cq_pool.c - recycled blocks by size class (see cq_pool.h).
 *
 * Why: a worker forms a send batch on every flush and frees it once written; with plain malloc
 * that churned the heap top of the worker's arena (trimmed and grown again, measured at 19 % of
 * chanqd's CPU in a KCP fan-out). A free block's first bytes link it into its class's list, so
 * the pool itself allocates nothing but its header.
 */
#include "cq_pool.h"

#include "cq_alloc.h"

#include <string.h>

/* 512, then 4 classes per power of two from 2^9 to 2^20. */
#define NCLASS (1 + 4 * 11)

typedef struct free_block {
    struct free_block *next;
} free_block_t;

struct cq_pool {
    free_block_t *free[NCLASS];
    size_t max_bytes;
    cq_pool_stats_t st;
};

/* The class of a request of size bytes (<= CQ_POOL_MAX_BLOCK), and its block size. */
static unsigned class_of(size_t size, size_t *ret_block)
{
    if (size <= CQ_POOL_MIN_BLOCK) {
        *ret_block = CQ_POOL_MIN_BLOCK;
        return 0;
    }
    unsigned e = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1)); /* 9..19 */
    size_t base = (size_t)1 << e, step = base >> 2;
    size_t k = (size - base + step - 1) / step; /* 1..4 */
    *ret_block = base + k * step;
    return 1 + (e - 9) * 4 + (unsigned)(k - 1);
}

cq_pool_t *cq_pool_new(size_t max_bytes)
{
    cq_pool_t *p = cq_calloc(1, sizeof(*p));
    if (p)
        p->max_bytes = max_bytes;
    return p;
}

cq_pool_t *cq_pool_free(cq_pool_t *p)
{
    if (!p)
        return NULL;
    for (unsigned c = 0; c < NCLASS; c++) {
        while (p->free[c]) {
            free_block_t *b = p->free[c];
            p->free[c] = b->next;
            cq_free(b);
        }
    }
    cq_free(p);
    return NULL;
}

void *cq_pool_get(cq_pool_t *p, size_t size)
{
    if (!p)
        return cq_malloc(size);
    if (size > CQ_POOL_MAX_BLOCK) {
        p->st.misses++;
        return cq_malloc(size);
    }
    size_t block;
    unsigned c = class_of(size, &block);
    free_block_t *b = p->free[c];
    if (!b) {
        p->st.misses++;
        return cq_malloc(block);
    }
    p->free[c] = b->next;
    p->st.hits++;
    p->st.cached_blocks--;
    p->st.cached_bytes -= block;
    return b;
}

void cq_pool_put(cq_pool_t *p, void *block, size_t size)
{
    if (!block)
        return;
    if (!p) {
        cq_free(block);
        return;
    }
    size_t bsize = 0;
    unsigned c = size > CQ_POOL_MAX_BLOCK ? NCLASS : class_of(size, &bsize);
    if (c == NCLASS || p->st.cached_bytes + bsize > p->max_bytes) {
        p->st.released++;
        cq_free(block);
        return;
    }
    free_block_t *b = block;
    b->next = p->free[c];
    p->free[c] = b;
    p->st.cached_blocks++;
    p->st.cached_bytes += bsize;
}

void cq_pool_stats(const cq_pool_t *p, cq_pool_stats_t *ret)
{
    if (p)
        *ret = p->st;
    else
        memset(ret, 0, sizeof(*ret));
}
