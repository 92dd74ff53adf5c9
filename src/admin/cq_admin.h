/* cq_admin.h - admin HTTP requests, sans I/O: request bytes in, response bytes out.
 *
 * Endpoints: GET /metrics (Prometheus text), GET /healthz ("ok"). The parser is bounded:
 * a request head over CQ_ADMIN_MAX_HEAD bytes is answered 431 and the connection closed.
 */
#ifndef CQ_ADMIN_H
#define CQ_ADMIN_H

#include <stddef.h>
#include <sys/types.h>

#include "cq_core.h"
#include "cq_sbuf.h"

#define CQ_ADMIN_MAX_HEAD 8192

/* Looks for a complete request head in p[0..n). Returns the head length (> 0), 0 if more
 * bytes are needed, or -1 when the request is malformed or too large. Pure. */
ssize_t cq_admin_parse_head(const char *p, size_t n, char *method, size_t mlen, char *path,
                            size_t plen);
/* Appends the full HTTP/1.1 response for (method, path) to out (status line, headers with
 * Content-Length and Connection: close, body). bad_request answers 400. Returns 0 or
 * -ENOMEM. sh is read-only here and any worker may call it. */
int cq_admin_respond(cq_shared_t *sh, const char *method, const char *path, int bad_request,
                     cq_sbuf_t *out);

#endif
