/* cq_mqio.h - the durable-topic port: ONE dedicated libuv loop thread (not a channel worker)
 * with its own listeners (seed protocol, HTTP API) and TCP connections, driving the sans-I/O engine
 * (src/mqsrv) and receiving store completions from the writer thread through an MPSC queue +
 * uv_async.
 *
 * Lifecycle (main thread):
 *   cq_mqio_new()        allocates; the writer is created next with cq_mqio_writer_done and the
 *                        returned object as its ud
 *   cq_mqio_start()      binds the listener, builds the engine, starts the thread
 *   cq_mqio_stop()       closes the listener and every connection and joins the thread; later
 *                        completions are only queued
 *   cq_writer_shutdown() the writer completes everything still queued
 *   cq_mqio_free()       runs the queued completions (freeing the requests) and frees all
 */
#ifndef CQ_MQIO_H
#define CQ_MQIO_H

#include "cq_mqperm.h"
#include "cq_sbuf.h"
#include "cq_store.h"
#include "cq_writer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cq_mqio cq_mqio_t;

#define CQ_MQIO_METRICS_MS 250 /* how often the loop publishes its metrics snapshot */

typedef struct cq_mqio_opts {
    const char *addr;               /* "HOST:PORT" */
    const char *http_addr;          /* "HOST:PORT" of the HTTP API; NULL or "" = none */
    size_t max_content;             /* bytes of one message */
    const cq_mqperm_t *perms;       /* borrowed, must outlive the object; NULL = all allowed */
    int retention_check_s;          /* seconds between retention purges */
    int tcp_keepalive_s;            /* 0 = off */
    const cq_store_topic_t *topics; /* borrowed during start: topics at start */
    const uint64_t *high_water;     /* borrowed during start: ntopics last offsets, or NULL */
    size_t ntopics;
} cq_mqio_opts_t;

/* Returns an owned, not yet started object, or NULL on OOM. */
cq_mqio_t *cq_mqio_new(void);
/* The writer's done callback (cq_writer_opts_t.done, ud = the cq_mqio_t). Writer thread. */
void cq_mqio_writer_done(void *ud, cq_writer_req_t *req);
/* Binds opts->addr, creates the engine and starts the loop thread. w is borrowed and must
 * outlive cq_mqio_free(). The bound address is written to bound[0..blen). Errors in err. */
int cq_mqio_start(cq_mqio_t *io, cq_writer_t *w, const cq_mqio_opts_t *opts, char *bound,
                  size_t blen, char *err, size_t errlen);
/* The address the HTTP API is bound to (borrowed, valid until cq_mqio_free), or "" when it is
 * off. Main thread, after a successful cq_mqio_start(). */
const char *cq_mqio_http_bound(const cq_mqio_t *io);
/* A metrics source for the admin registry (ud is the cq_mqio_t): appends the port's latest
 * metrics snapshot (Prometheus text, see cq_mqsrv_metrics(); at most CQ_MQIO_METRICS_MS old) to
 * out; nothing when the port does not run. Any thread. Returns 0 or -ENOMEM. */
int cq_mqio_metrics_append(void *ud, cq_sbuf_t *out);
/* Stops the loop thread (idempotent). Main thread. */
void cq_mqio_stop(cq_mqio_t *io);
/* Stops if needed, completes queued writer requests, frees. Call after cq_writer_shutdown().
 * Accepts NULL; returns NULL. */
cq_mqio_t *cq_mqio_free(cq_mqio_t *io);

#endif
