#include "cq_sbuf.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

int cq_sbuf_reserve(cq_sbuf_t *b, size_t n)
{
    if (b->cap - b->len >= n)
        return 0;
    if (n > SIZE_MAX / 2 - b->len)
        return -ENOMEM;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap - b->len < n)
        ncap *= 2;
    uint8_t *d = cq_realloc(b->data, ncap);
    if (!d)
        return -ENOMEM;
    b->data = d;
    b->cap = ncap;
    return 0;
}

int cq_sbuf_append(cq_sbuf_t *b, const void *p, size_t n)
{
    if (!n)
        return 0;
    int r = cq_sbuf_reserve(b, n);
    if (r < 0)
        return r;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int cq_sbuf_vprintf(cq_sbuf_t *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    int r = n < 0 ? -EINVAL : 0;
    if (r == 0 && (size_t)n < sizeof(small))
        r = cq_sbuf_append(b, small, (size_t)n);
    else if (r == 0 && (r = cq_sbuf_reserve(b, (size_t)n + 1)) == 0) {
        /* Formats straight into the buffer; the NUL lands in the reserved byte, not in len. */
        vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
    return r;
}

int cq_sbuf_printf(cq_sbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = cq_sbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

void cq_sbuf_consume(cq_sbuf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void cq_sbuf_done(cq_sbuf_t *b)
{
    cq_free(b->data);
    cq_sbuf_init(b);
}
