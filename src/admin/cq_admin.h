/* cq_admin.h - admin HTTP requests, sans I/O: request bytes in, response bytes out.
 *
 * Endpoints: GET /metrics (Prometheus text), GET /healthz ("ok"). The parser is bounded:
 * a request head over CQ_ADMIN_MAX_HEAD bytes is answered 400 and the connection closed.
 *
 * /metrics is the concatenation of the registered metrics sources, in registration order.
 * Modules do not know the admin listener: the composition root (src/main) registers each
 * module's source (the channel core's, the MQ port's, later the cluster's) with
 * cq_admin_add_source(). The registry has no process globals.
 */
#ifndef CQ_ADMIN_H
#define CQ_ADMIN_H

#include <stddef.h>
#include <sys/types.h>

#include "cq_sbuf.h"

#define CQ_ADMIN_MAX_HEAD    8192
#define CQ_ADMIN_MAX_SOURCES 16

typedef struct cq_admin cq_admin_t;

/* A metrics source: appends Prometheus text (version 0.0.4) to out. Called on the admin
 * listener's thread, so it must only read state that is safe to read from another thread
 * (atomics, or a snapshot under the source's own lock). Returns 0 or -ENOMEM. */
typedef int (*cq_admin_metrics_fn)(void *ud, cq_sbuf_t *out);

/* Returns a new, empty registry (owned; cq_admin_free) or NULL on OOM. */
cq_admin_t *cq_admin_new(void);
/* Frees the registry. No request may be in progress. Accepts NULL; returns NULL. */
cq_admin_t *cq_admin_free(cq_admin_t *a);
/* Adds a metrics source (name and ud borrowed: they must outlive the registry, or be removed
 * first). Any thread. Returns 0, CQ_ELIMIT when CQ_ADMIN_MAX_SOURCES are registered, or
 * -EINVAL for a NULL fn. */
int cq_admin_add_source(cq_admin_t *a, const char *name, cq_admin_metrics_fn fn, void *ud);
/* Removes the source registered with (fn, ud); nothing if there is none. After it returns, fn
 * is not running and is never called again with ud. Any thread. */
void cq_admin_remove_source(cq_admin_t *a, cq_admin_metrics_fn fn, void *ud);
/* Appends every source's text to out, in registration order. Any thread. Returns 0 or
 * -ENOMEM (out then holds part of the text). */
int cq_admin_metrics(cq_admin_t *a, cq_sbuf_t *out);

/* Looks for a complete request head in p[0..n). Returns the head length (> 0), 0 if more
 * bytes are needed, or -1 when the request is malformed or too large. Pure. */
ssize_t cq_admin_parse_head(const char *p, size_t n, char *method, size_t mlen, char *path,
                            size_t plen);
/* Appends the full HTTP/1.1 response for (method, path) to out (status line, headers with
 * Content-Length and Connection: close, body). bad_request answers 400. Returns 0 or
 * -ENOMEM. Any thread. */
int cq_admin_respond(cq_admin_t *a, const char *method, const char *path, int bad_request,
                     cq_sbuf_t *out);

#endif
