/* cq_sbuf.h - growable byte buffer (per-connection read remainder, scratch encoding).
 *
 * Owned by one thread. cq_sbuf_done() frees the storage and leaves an empty buffer.
 */
#ifndef CQ_SBUF_H
#define CQ_SBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct cq_sbuf {
    uint8_t *data;
    size_t len, cap;
} cq_sbuf_t;

static inline void cq_sbuf_init(cq_sbuf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}
/* Ensures room for n more bytes. Returns 0 or -ENOMEM. */
int cq_sbuf_reserve(cq_sbuf_t *b, size_t n);
int cq_sbuf_append(cq_sbuf_t *b, const void *p, size_t n);
/* Drops the first n bytes. */
void cq_sbuf_consume(cq_sbuf_t *b, size_t n);
void cq_sbuf_done(cq_sbuf_t *b);

#endif
