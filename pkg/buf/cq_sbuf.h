/* cq_sbuf.h - growable byte buffer (per-connection read remainder, scratch encoding).
 *
 * Owned by one thread. cq_sbuf_done() frees the storage and leaves an empty buffer.
 */
#ifndef CQ_SBUF_H
#define CQ_SBUF_H

#include <stdarg.h>
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
/* Appends the formatted text (no NUL), whatever its length. Returns 0, -ENOMEM, or -EINVAL
 * when the format fails (an encoding error); on error b is unchanged. */
__attribute__((format(printf, 2, 3))) int cq_sbuf_printf(cq_sbuf_t *b, const char *fmt, ...);
__attribute__((format(printf, 2, 0))) int cq_sbuf_vprintf(cq_sbuf_t *b, const char *fmt,
                                                          va_list ap);
/* Drops the first n bytes. */
void cq_sbuf_consume(cq_sbuf_t *b, size_t n);
void cq_sbuf_done(cq_sbuf_t *b);

#endif
