/* test_buf.h - the channel-data merge of the scheduler's test fixtures (test_sched.c,
 * fuzz_sched.c): updates are opaque bytes, and protobuf merges serialized messages by
 * concatenation, so a merge is the concatenation and every output can be compared byte for byte.
 * Header only. */
#ifndef TEST_BUF_H
#define TEST_BUF_H

#include <stddef.h>
#include <string.h>

#include "cq_buf.h"

/* parts[0..n) one after the other in a new buffer (owned), NULL on out of memory. */
static inline cq_buf_t *test_buf_concat(cq_buf_t *const *parts, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += parts[i]->len;
    cq_buf_t *b = cq_buf_new(len);
    for (size_t i = 0; b && i < n; i++) {
        memcpy(b->data + b->len, parts[i]->data, parts[i]->len);
        b->len += parts[i]->len;
    }
    return b;
}

#endif
