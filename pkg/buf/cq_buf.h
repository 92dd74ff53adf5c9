/* cq_buf.h - refcounted byte buffers: encode once, share by reference.
 *
 * A cq_buf is allocated once with its bytes inline. cq_buf_new() returns it owned with one
 * reference. Any thread may take (cq_buf_ref, cq_buf_ref_n) or drop (cq_buf_unref) references;
 * the count is atomic. The bytes must not be written after the buffer is shared.
 */
#ifndef CQ_BUF_H
#define CQ_BUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_buf {
    _Atomic uint32_t refs;
    uint32_t len; /* bytes in use */
    uint32_t cap; /* bytes allocated for data */
    uint32_t aux; /* free for the owner's use (e.g. a kind tag) */
    uint8_t data[];
} cq_buf_t;

/* Returns owned (refs = 1, len = 0) or NULL on OOM. */
cq_buf_t *cq_buf_new(size_t cap);
/* Returns an owned buffer holding a copy of p[0..n). */
cq_buf_t *cq_buf_from(const void *p, size_t n);
/* Takes one more reference; returns b. */
static inline cq_buf_t *cq_buf_ref(cq_buf_t *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}
/* Takes n more references at once (fan-out counts recipients first). */
static inline void cq_buf_ref_n(cq_buf_t *b, uint32_t n)
{
    if (n)
        atomic_fetch_add_explicit(&b->refs, n, memory_order_relaxed);
}
/* Drops one reference; frees at zero. Accepts NULL. */
void cq_buf_unref(cq_buf_t *b);
/* Drops n references at once (those a fan-out took and did not use); frees at zero. Accepts
 * NULL and n = 0. */
void cq_buf_unref_n(cq_buf_t *b, uint32_t n);
static inline uint32_t cq_buf_refs(const cq_buf_t *b)
{
    return atomic_load_explicit(&b->refs, memory_order_relaxed);
}
/* Live buffer count, for leak checks in tests and /metrics. */
long cq_buf_live(void);

#endif
