/* echo_io.h - the echo engine's edge: its adapter on the engine-loop host (src/io/io_engine.h),
 * the worked example of doc/architecture.md, "The engine-loop host". One listener of echo
 * connections on its own loop thread.
 *
 * Lifecycle (one thread):
 *   echo_io_start()  binds the listener, sets the engine's wake and starts the loop thread
 *   echo_io_stop()   drains (the engine's work in flight is answered), closes, joins
 *   echo_io_free()   stops if needed, frees; the engine is the caller's */
#ifndef CQ_TEST_ECHO_IO_H
#define CQ_TEST_ECHO_IO_H

#include "cq_sbuf.h"
#include "echo.h"

#include <stddef.h>
#include <stdint.h>

typedef struct echo_io echo_io_t;

typedef struct echo_io_opts {
    const char *addr;         /* "HOST:PORT" */
    uint32_t max_conns;       /* over it: accepted and closed at once */
    uint32_t idle_timeout_ms; /* a connection that sent nothing for this long is closed; 0 = off */
    int shutdown_grace_ms;    /* echo_io_stop's longest wait for the work in flight */
} echo_io_opts_t;

/* Starts serving eng (borrowed: it must outlive echo_io_free) on o->addr; the bound address
 * goes to bound[0..blen). Returns 0 with *ret owned, or a negative code with err filled (and
 * nothing to free). */
int echo_io_start(echo_io_t **ret, echo_t *eng, const echo_io_opts_t *o, char *bound, size_t blen,
                  char *err, size_t errlen);
/* A metrics source (ud: the echo_io_t): the latest snapshot. Any thread. 0 or -ENOMEM. */
int echo_io_metrics_append(void *ud, cq_sbuf_t *out);
/* Drains and stops (idempotent). Blocks for at most the grace period. */
void echo_io_stop(echo_io_t *io);
/* Stops if needed and frees. Accepts NULL; returns NULL. */
echo_io_t *echo_io_free(echo_io_t *io);

#endif
