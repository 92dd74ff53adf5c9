/* io_stream.h - the one stream writer of the edge: channel connections over TCP (io.c) and the
 * durable-topic connections (mq_io.c) write their send queues (cq_sendq) the same way. Loop
 * thread of the stream. */
#ifndef CQ_IO_STREAM_H
#define CQ_IO_STREAM_H

#include "cq_sendq.h"

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

/* Writes q's batches with uv_try_write; what the socket does not take at once goes to one
 * uv_write on wreq, whose callback cb must call cq_sendq_written(q, *ret_inflight) on success.
 * With may_queue false nothing is queued (a best-effort write before a close). Returns 0 and
 * *ret_inflight: the bytes handed to uv_write, or 0 when nothing was (all written, nothing to
 * write, or may_queue false); or a negative code (-ENOMEM, or the libuv error). */
int cq__io_stream_write(uv_stream_t *s, cq_sendq_t *q, uv_write_t *wreq, uv_write_cb cb,
                        bool may_queue, size_t *ret_inflight);

#endif
