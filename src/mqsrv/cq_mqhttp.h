/* cq_mqhttp.h - the durable-topic HTTP/JSON API (issue 4 item 7), sans I/O.
 *
 * An HTTP connection belongs to a cq_mqsrv_t engine and shares its topic cache, permissions,
 * store submission and completions with the seed-protocol sessions; like them it lives on the
 * engine's thread (the MQ loop) and every function below must be called from that thread. The
 * edge (src/io/mq_io.c) feeds received bytes with cq_mqhttp_conn_input() and writes the
 * responses queued on the connection's send queue (cq_mqhttp_conn_sendq, by ops->t.flush).
 * doc/protocol-mq.md §HTTP lists the endpoints.
 *
 * HTTP/1.0 and 1.1, one request at a time per connection: the request head (request line and
 * headers) is at most CQ_MQHTTP_HEAD_MAX bytes, the body is delimited by Content-Length (no
 * chunked encoding) and at most the engine's HTTP body limit. Keep-alive is supported (the
 * HTTP/1.1 default; HTTP/1.0 needs "Connection: keep-alive"); "Connection: close" closes after
 * the response. Pipelined requests are buffered and answered in order: the next request is
 * parsed only when the previous one was answered, which for a store request is after its
 * completion. A request whose framing cannot be trusted (bad head, head too large, body too
 * large, Transfer-Encoding) is answered and the connection closed; any other error is answered
 * and the connection keeps serving.
 */
#ifndef CQ_MQHTTP_H
#define CQ_MQHTTP_H

#include "cq_mqsrv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CQ_MQHTTP_HEAD_MAX     (16u * 1024u)         /* request line + headers */
#define CQ_MQHTTP_BODY_CAP     (64u * 1024u * 1024u) /* upper bound of the body limit */
#define CQ_MQHTTP_BODY_SLACK   (64u * 1024u)         /* JSON around the contents */
#define CQ_MQHTTP_CONSUMER_MAX 128
#define CQ_MQHTTP_HOSTS_DFL    "127.0.0.1,localhost,[::1]" /* Host names answered by default */
/* A request refused before its body (credentials, Host, Origin, Content-Type) has the body
 * skipped, keeping the connection, when it is at most this long; a longer one is not read: the
 * answer closes the connection. */
#define CQ_MQHTTP_DISCARD_MAX (64u * 1024u)

typedef struct cq_mqhttp_conn cq_mqhttp_conn_t;

/* A parsed request head: slices into the caller's buffer, valid while it is. */
typedef struct cq_mqhttp_req {
    const char *method, *path, *query, *auth; /* query and auth NULL when absent */
    size_t method_len, path_len, query_len, auth_len;
    const char *host, *origin, *ctype; /* Host, Origin, Content-Type: NULL when absent */
    size_t host_len, origin_len, ctype_len;
    uint64_t content_length; /* 0 when absent */
    bool keep_alive;         /* after the response: HTTP version and Connection header */
    bool chunked;            /* a Transfer-Encoding header was present */
} cq_mqhttp_req_t;

/* True when the Host value h[0..n) names one of hosts (comma-separated names, "*" for any; an
 * IPv6 address in brackets), ignoring h's port, ASCII case-insensitively. */
bool cq_mqhttp_host_ok(const char *hosts, const char *h, size_t n);
/* True when the Origin value o[0..n) is one of origins (comma-separated, exact but for ASCII
 * case; "" allows none). */
bool cq_mqhttp_origin_ok(const char *origins, const char *o, size_t n);
/* True when the Content-Type value v[0..n) is application/json, with or without parameters. */
bool cq_mqhttp_ctype_json(const char *v, size_t n);

/* Parses a request head at p[0..n) with the shared head parser (pkg/http/cq_http.h; CRLF line
 * ends only) and the API's own rules. Pure; allocates only for a head of more than
 * CQ_HTTP_INLINE_HEADERS header lines. Returns the head's length (through the empty line) and
 * fills *ret; 0 if more bytes are needed; CQ_EBADLEN when no complete head fits in max_head
 * bytes; CQ_EHEADER for a malformed request line or header, an HTTP version other than
 * 1.0/1.1, a target not in origin form, or a bad or conflicting Content-Length; -ENOMEM.
 * *ret is written only on success. */
ssize_t cq_mqhttp_parse(const char *p, size_t n, size_t max_head, cq_mqhttp_req_t *ret);

/* The largest request body s accepts: max_content x max_batch plus slack, at most
 * CQ_MQHTTP_BODY_CAP. */
size_t cq_mqhttp_max_body(const cq_mqsrv_t *s);

/* A new HTTP connection on s. ops is borrowed (static), ud the edge's. Returns the connection
 * (owned by the engine) or NULL on OOM. */
cq_mqhttp_conn_t *cq_mqhttp_conn_new(cq_mqsrv_t *s, const cq_mqsrv_conn_ops_t *ops, void *ud);
/* Feeds received bytes (borrowed). Returns 0, or a negative code when the connection is closing
 * (a close op was called). */
int cq_mqhttp_conn_input(cq_mqhttp_conn_t *h, const uint8_t *p, size_t n);
/* The edge is done with h: ops are never called again; h is freed when its store request (if
 * any) completes. Accepts NULL. */
void cq_mqhttp_conn_close(cq_mqhttp_conn_t *h);
/* h's send queue (borrowed, valid until cq_mqhttp_conn_close): what ops->t.flush writes. */
cq_sendq_t *cq_mqhttp_conn_sendq(cq_mqhttp_conn_t *h);

#endif
