/* test_sendq.h - a fake peer that reads everything: drains a send queue into a buffer, batch
 * by batch, as a socket that accepts all would. Header only (cmocka asserts, cq_sendq.h). */
#ifndef TEST_SENDQ_H
#define TEST_SENDQ_H

#include <string.h>
#include <sys/uio.h>

#include "cq_sendq.h"

/* Appends every queued byte of q to out[*len..cap) (asserting it fits), advancing *len, and
 * marks it written. */
static inline void test_sendq_drain(cq_sendq_t *q, uint8_t *out, size_t *len, size_t cap)
{
    const struct iovec *iov;
    int n;
    while (cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t batch = 0;
        for (int i = 0; i < n; i++) {
            assert_true(*len + iov[i].iov_len <= cap);
            memcpy(out + *len, iov[i].iov_base, iov[i].iov_len);
            *len += iov[i].iov_len;
            batch += iov[i].iov_len;
        }
        cq_sendq_written(q, batch);
    }
}

#endif
