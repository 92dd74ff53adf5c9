/* io_drain.h - the shutdown of a loop that drives a sans-I/O engine over io_sqconn connections
 * (mq_io.c, mgr_io.c). SIGTERM must not lose what was acknowledged, so it goes in three steps:
 * DRAIN (the listeners close and no connection is read any more, so no new request can start;
 * the engine's work in flight completes and is answered as usual), then CLOSE once the engine is
 * idle (every connection writes what it has queued, shuts its write side down and closes; the
 * other handles close now), and the loop ends when the last connection closed (the grace timer
 * closes with it). The grace timer, started at DRAIN, bounds both steps: when it fires every
 * connection is dropped as it is. Loop thread. */
#ifndef CQ_IO_DRAIN_H
#define CQ_IO_DRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* The owner's hooks (ud is its own). */
typedef struct io_drain_ops {
    /* h is a connection: an io_sqconn_t's handle (h->data). */
    bool (*is_conn)(void *ud, const uv_handle_t *h);
    /* The engine has nothing in flight: the last answers can be written. */
    bool (*idle)(void *ud);
    /* CLOSE: the engine queues the answers its last completions produced. */
    void (*flush)(void *ud);
    /* DRAIN: h is not a connection (close the listeners here, and what would start new work). */
    void (*drain)(void *ud, uv_handle_t *h);
    /* CLOSE or drop: h is not a connection nor the grace timer, and not closing: close it. */
    void (*close)(void *ud, uv_handle_t *h);
    /* Before the connections close (graceful or not); NULL: nothing. */
    void (*closing)(void *ud);
    /* The grace period is over (the owner logs what it gives up). */
    void (*grace_over)(void *ud);
} io_drain_ops_t;

typedef enum { IO_RUN, IO_DRAIN, IO_CLOSE } io_phase_t;

typedef struct io_drain {
    uv_loop_t *loop;
    const io_drain_ops_t *ops;
    void *ud;
    uint64_t grace_ms;
    uv_timer_t grace;
    bool grace_on;    /* grace was initialised (the shutdown started) */
    io_phase_t phase; /* the shutdown's progress */
    size_t nlive;     /* connections not yet closed (their callback not run) */
} io_drain_t;

void cq__io_drain_init(io_drain_t *d, uv_loop_t *loop, uint64_t grace_ms, const io_drain_ops_t *ops,
                       void *ud);
/* One step: at the start of the shutdown (RUN -> DRAIN, the grace timer starts) and after each
 * completion (DRAIN -> CLOSE once the engine is idle). */
void cq__io_drain_step(io_drain_t *d);
/* Closes every handle at once, the connections with what they queued (the grace period is over,
 * or the loop never ran). */
void cq__io_drain_drop(io_drain_t *d);
/* A connection was made (its handle initialised) / its close callback ran. */
void cq__io_drain_opened(io_drain_t *d);
void cq__io_drain_closed(io_drain_t *d);

#endif
