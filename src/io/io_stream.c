/* io_stream.c - the stream writer shared by channel and durable-topic connections: try the
 * socket first (most batches leave in that one system call, with no request allocated), then
 * one uv_write for what is left. See io_stream.h. */
#include "io_stream.h"

#include <errno.h>

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec), "uv_buf_t must match struct iovec");

int cq__io_stream_write(uv_stream_t *s, cq_sendq_t *q, uv_write_t *wreq, uv_write_cb cb,
                        bool may_queue, size_t *ret_inflight)
{
    *ret_inflight = 0;
    for (;;) {
        const struct iovec *iov;
        int n;
        if (cq_sendq_prepare(q, &iov, &n) < 0)
            return -ENOMEM;
        if (n == 0)
            return 0;
        int r = uv_try_write(s, (const uv_buf_t *)iov, (unsigned)n);
        if (r < 0 && r != UV_EAGAIN)
            return r;
        if (r > 0 && cq_sendq_written(q, (size_t)r))
            continue;
        if (!may_queue)
            return 0;
        cq_sendq_prepare(q, &iov, &n);
        size_t left = 0;
        for (int i = 0; i < n; i++)
            left += iov[i].iov_len;
        r = uv_write(wreq, s, (const uv_buf_t *)iov, (unsigned)n, cb);
        if (r < 0)
            return r;
        *ret_inflight = left;
        return 0;
    }
}
