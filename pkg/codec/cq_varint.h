/* cq_varint.h - protobuf base-128 varints. Pure, header-only. */
#ifndef CQ_VARINT_H
#define CQ_VARINT_H

#include <stddef.h>
#include <stdint.h>

static inline size_t cq_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v at p (room for 10 bytes); returns bytes written. */
static inline size_t cq_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Reads a varint from [p, end). Returns bytes consumed, or 0 if truncated or over 10 bytes. */
static inline size_t cq_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *ret)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *ret = v;
            return i + 1;
        }
    }
    return 0;
}

#endif
