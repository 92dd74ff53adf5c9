/* io_ring.h - a worker's batched first writes over io_uring (--io-uring).
 *
 * Why: a channel-data window or a broadcast makes a worker write to many sockets in one loop
 * iteration, one small write each. With write(2) each costs a system call; here every plain
 * TCP connection flushed in the iteration gets one non-blocking sendmsg, and all of them go to
 * the kernel in one io_uring_enter at the end of the flush (bench/RESULTS.md, issue 14). The
 * sockets are non-blocking, so the kernel completes every send during that call (sent, short,
 * or -EAGAIN); the worker waits for all of them before it goes on, so nothing is in flight
 * across iterations and a connection's memory is never referenced by the ring afterwards.
 * What a send could not write goes the usual way (uv_try_write, then uv_write).
 *
 * Worker thread only. Without liburing at build time, or when the kernel refuses a ring,
 * cq__io_ring_init leaves the worker on the plain path.
 */
#ifndef CQ_IO_RING_H
#define CQ_IO_RING_H

#include <stdbool.h>

#include "io_int.h"

/* Creates w's ring when mode allows (CQ_IO_URING_*); returns 0, or a negative error for
 * CQ_IO_URING_ON when no ring can be had (err filled). */
int cq__io_ring_init(io_worker_t *w, int mode, char *err, size_t errlen);
void cq__io_ring_free(io_worker_t *w);
/* Opens and closes the window in which flushes are queued on the ring (on_prepare). */
void cq__io_ring_open(io_worker_t *w);
/* Queues one send of ic's current batch; false when the ring is not in use (write directly). */
bool cq__io_ring_queue(io_worker_t *w, io_conn_t *ic);
/* Closes the window, submits everything queued in one call, and completes each send
 * (cq__io_tcp_sent). Safe to call again from a completion (then it returns at once). */
void cq__io_ring_submit(io_worker_t *w);
/* Whether w uses a ring. */
bool cq__io_ring_on(const io_worker_t *w);

/* io.c: a ring send of ic finished with res (bytes, or -errno). */
void cq__io_tcp_sent(io_conn_t *ic, int res);

#endif
