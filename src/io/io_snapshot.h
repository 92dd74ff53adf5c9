/* io_snapshot.h - a metrics text that one loop thread renders and others read: an engine-loop
 * host's part of /metrics (io_engine.c: the MQ port's, the manager's), which the admin listener
 * (another thread) serves. The loop renders into a private buffer and swaps it in under the mutex;
 * readers copy it under the same mutex. Neither side is a hot path. */
#ifndef CQ_IO_SNAPSHOT_H
#define CQ_IO_SNAPSHOT_H

#include "cq_sbuf.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct io_snapshot {
    pthread_mutex_t mu;
    cq_sbuf_t text; /* under mu; empty while unpublished */
    bool on;        /* under mu */
} io_snapshot_t;

void cq__io_snapshot_init(io_snapshot_t *s);
/* Unpublishes and releases s (the owner's memory stays). */
void cq__io_snapshot_done(io_snapshot_t *s);
/* Publishes *b (taken: *b is left empty); the previous text is freed. */
void cq__io_snapshot_publish(io_snapshot_t *s, cq_sbuf_t *b);
/* Appends the published text to out (nothing while unpublished). Any thread. 0 or -ENOMEM. */
int cq__io_snapshot_append(io_snapshot_t *s, cq_sbuf_t *out);
/* Frees the text; readers get nothing until the next publish. Idempotent. */
void cq__io_snapshot_unpublish(io_snapshot_t *s);

#endif
