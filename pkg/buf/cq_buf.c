#include "cq_buf.h"

#include "cq_alloc.h"

#include <string.h>

static _Atomic long live;

cq_buf_t *cq_buf_new(size_t cap)
{
    if (cap > UINT32_MAX - sizeof(cq_buf_t))
        return NULL;
    cq_buf_t *b = cq_malloc(sizeof(*b) + cap);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = 0;
    b->cap = (uint32_t)cap;
    b->aux = 0;
    atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
    return b;
}

cq_buf_t *cq_buf_from(const void *p, size_t n)
{
    cq_buf_t *b = cq_buf_new(n);
    if (b) {
        if (n)
            memcpy(b->data, p, n);
        b->len = (uint32_t)n;
    }
    return b;
}

void cq_buf_unref(cq_buf_t *b)
{
    if (!b)
        return;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
        cq_free(b);
    }
}

void cq_buf_unref_n(cq_buf_t *b, uint32_t n)
{
    if (!b || !n)
        return;
    if (atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) == n) {
        atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
        cq_free(b);
    }
}

long cq_buf_live(void)
{
    return atomic_load_explicit(&live, memory_order_relaxed);
}
