/* io_ring.c - batched first writes over io_uring. See io_ring.h. */
#include "io_ring.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_sendq.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#ifdef CQ_HAVE_LIBURING
#include <liburing.h>

#define RING_ENTRIES 1024u

struct io_ring {
    struct io_uring ring;
    struct msghdr msgs[RING_ENTRIES]; /* one per queued send, in queueing order */
    io_conn_t *ics[RING_ENTRIES];     /* whose send each is */
    unsigned queued;                  /* sends queued and not yet submitted */
    bool open, busy;
};

int cq__io_ring_init(io_worker_t *w, int mode, char *err, size_t errlen)
{
    w->ring = NULL;
    if (mode == CQ_IO_URING_OFF)
        return 0;
    struct io_ring *r = cq_calloc(1, sizeof(*r));
    int rc = r ? io_uring_queue_init(RING_ENTRIES, &r->ring, 0) : -ENOMEM;
    if (rc < 0) {
        cq_free(r);
        if (mode == CQ_IO_URING_ON)
            return cq_err_fmt(err, errlen, rc, "--io-uring on: no ring (%s)", strerror(-rc));
        if (w->index == 0)
            CQ_INFO("io", "io_uring not available (%s): writing with write(2)", strerror(-rc));
        return 0;
    }
    w->ring = r;
    return 0;
}

void cq__io_ring_free(io_worker_t *w)
{
    if (!w->ring)
        return;
    io_uring_queue_exit(&w->ring->ring);
    cq_free(w->ring);
    w->ring = NULL;
}

bool cq__io_ring_on(const io_worker_t *w)
{
    return w->ring != NULL;
}

void cq__io_ring_open(io_worker_t *w)
{
    if (w->ring)
        w->ring->open = true;
}

bool cq__io_ring_queue(io_worker_t *w, io_conn_t *ic)
{
    struct io_ring *r = w->ring;
    if (!r || !r->open)
        return false;
    const struct iovec *iov;
    int n;
    if (cq_sendq_prepare(cq_conn_sendq(ic->conn), &iov, &n) < 0)
        return false; /* the plain path reports it */
    if (n == 0)
        return true;
    uv_os_fd_t fd;
    if (uv_fileno((const uv_handle_t *)&ic->tcp, &fd) < 0)
        return false;
    if (r->queued == RING_ENTRIES)
        cq__io_ring_submit(w), r->open = true;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (!sqe)
        return false;
    r->ics[r->queued] = ic;
    struct msghdr *m = &r->msgs[r->queued++];
    *m = (struct msghdr){.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    io_uring_prep_sendmsg(sqe, fd, m, MSG_NOSIGNAL | MSG_DONTWAIT);
    io_uring_sqe_set_data(sqe, ic);
    ic->writing = 1;
    ic->ring_queued = 1;
    return true;
}

/* The ring did not take the sends from `from` on: the worker goes back to write(2) for good.
 * Nothing is in flight (the sends never wait), so the ring can go; each connection left is
 * told -EAGAIN, which sends its batch the plain way. */
static void ring_fail(io_worker_t *w, int rc, unsigned from, unsigned total)
{
    struct io_ring *r = w->ring;
    CQ_WARN("io", "worker %d: io_uring submit failed (%s): writing with write(2) from now on",
            w->index, strerror(-rc));
    w->ring = NULL;
    io_uring_queue_exit(&r->ring);
    for (unsigned i = from; i < total; i++) {
        r->ics[i]->ring_queued = 0;
        cq__io_tcp_sent(r->ics[i], -EAGAIN);
    }
    cq_free(r);
}

void cq__io_ring_submit(io_worker_t *w)
{
    struct io_ring *r = w->ring;
    if (!r || r->busy)
        return;
    r->open = false;
    unsigned total = r->queued;
    if (!total)
        return;
    r->busy = true;
    r->queued = 0;
    int rc;
    do /* the sends are non-blocking: the wait ends as soon as the call returns */
        rc = io_uring_submit_and_wait(&r->ring, total);
    while (rc == -EINTR);
    unsigned sent = rc < 0 ? 0 : (unsigned)rc < total ? (unsigned)rc : total;
    for (unsigned left = sent; left; left--) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&r->ring, &cqe) < 0)
            break;
        io_conn_t *ic = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        ic->ring_queued = 0;
        cq__io_tcp_sent(ic, res);
    }
    r->busy = false;
    if (sent < total)
        ring_fail(w, rc < 0 ? rc : -EIO, sent, total);
}

#else /* !CQ_HAVE_LIBURING */

int cq__io_ring_init(io_worker_t *w, int mode, char *err, size_t errlen)
{
    w->ring = NULL;
    if (mode == CQ_IO_URING_ON)
        return cq_err_fmt(err, errlen, -ENOTSUP, "--io-uring on: built without liburing");
    return 0;
}

void cq__io_ring_free(io_worker_t *w)
{
    (void)w;
}

bool cq__io_ring_on(const io_worker_t *w)
{
    (void)w;
    return false;
}

void cq__io_ring_open(io_worker_t *w)
{
    (void)w;
}

bool cq__io_ring_queue(io_worker_t *w, io_conn_t *ic)
{
    (void)w;
    (void)ic;
    return false;
}

/* The ring failed to take the sends: the worker goes back to write(2) for good. Nothing is in
 * flight (the sends never wait), so the ring can go; each queued connection is told -EAGAIN,
 * which sends its batch the plain way. */
static void ring_fail(io_worker_t *w, int rc)
{
    struct io_ring *r = w->ring;
    CQ_WARN("io", "worker %d: io_uring submit failed (%s): writing with write(2) from now on",
            w->index, strerror(-rc));
    unsigned n = 0;
    io_conn_t *ics[RING_ENTRIES];
    struct io_uring_sqe *sqe;
    (void)sqe;
    for (unsigned head = r->ring.sq.sqe_head; head != r->ring.sq.sqe_tail; head++)
        ics[n++] = io_uring_sqe_get_data_ptr(&r->ring.sq.sqes[head & *r->ring.sq.kring_mask]);
    w->ring = NULL;
    io_uring_queue_exit(&r->ring);
    cq_free(r);
    for (unsigned i = 0; i < n; i++) {
        ics[i]->ring_queued = 0;
        cq__io_tcp_sent(ics[i], -EAGAIN);
    }
}

void cq__io_ring_submit(io_worker_t *w)
{
    (void)w;
}

#endif
