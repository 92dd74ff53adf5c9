/* cq_wsup.h - bounded, incremental HTTP/1.1 request heads for WebSocket upgrades.
 *
 * A WebSocket listener receives an HTTP request head first. cq_wsup accumulates it (up to a
 * configured limit, 8 KiB by default), parses it with the shared head parser
 * (pkg/http/cq_http.h, bare LF allowed) and recognises two kinds of complete request:
 *
 *  - CQ_WSUP_WEBSOCKET: a valid RFC 6455 opening handshake (GET, HTTP/1.1, Host, Upgrade:
 *    websocket, Connection containing the "upgrade" token, Sec-WebSocket-Version: 13, a
 *    Sec-WebSocket-Key that decodes to 16 bytes, the configured path, an allowed Origin);
 *  - CQ_WSUP_PLAIN: a GET or HEAD with none of the WebSocket headers, so the io layer can
 *    serve a static page from the same port. The path is returned; no path check is made.
 *
 * A request is treated as a WebSocket attempt (and must then be fully valid) as soon as it
 * carries an Upgrade header naming websocket, a Sec-WebSocket-Key or a Sec-WebSocket-Version.
 * Anything else invalid is answered with an HTTP status (cq_wsup_status()) and a reason text
 * (cq_wsup_reason()), from which cq_wsup_response_error() builds the response:
 *
 *   400  malformed request line or header, obs-fold (folded header lines are rejected),
 *        duplicate Host/Sec-WebSocket-Key/Sec-WebSocket-Version/Origin, a request body
 *        (Content-Length > 0 or Transfer-Encoding), missing Host, HTTP/1.0 upgrade, missing
 *        or wrong Upgrade/Connection tokens, bad Sec-WebSocket-Key
 *   403  Origin present and not allowed: not in the allow-list; or, with an empty list and
 *        same_origin set, naming another host or port than the Host header (a request
 *        without Origin is allowed: only browsers send it, and the check exists to stop
 *        cross-site pages)
 *   404  WebSocket upgrade for a path other than the configured one (the query is ignored)
 *   405  a method other than GET (or HEAD for plain requests)
 *   426  Sec-WebSocket-Version missing or not 13 (the response carries
 *        "Sec-WebSocket-Version: 13")
 *   431  the head is larger than the limit
 *
 * Lines may end in CRLF or a bare LF. Header names are case-insensitive; Connection and
 * Upgrade are comma lists whose tokens are compared case-insensitively, and repeated
 * Connection/Upgrade/Sec-WebSocket-Protocol headers are combined. Sec-WebSocket-Extensions is
 * ignored (chanq negotiates no extension, so permessage-deflate is declined by not echoing it).
 *
 * Pure: no I/O, no logging. One parser per connection, owned by its worker thread.
 */
#ifndef CQ_WSUP_H
#define CQ_WSUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_WSUP_DEFAULT_MAX_HEAD 8192

typedef struct cq_wsup_config {
    const char *path;    /* upgrade path; NULL or "" = "/" */
    const char *origins; /* comma-separated allowed Origins (exact, case-insensitive match,
                            e.g. "https://game.example, http://localhost:8080"), or "*" for
                            any; NULL or "": see same_origin */
    bool same_origin;    /* with no origins: allow only an Origin whose host and port are
                            the Host header's (default ports implied: 80 for http, 443 for
                            https); false allows any Origin */
    size_t max_head;     /* limit on the request head in bytes; 0 = CQ_WSUP_DEFAULT_MAX_HEAD */
} cq_wsup_config_t;

/* Return values of cq_wsup_feed() besides negative errors. */
enum {
    CQ_WSUP_NEED_MORE = 0, /* the head is not complete yet; feed more bytes */
    CQ_WSUP_WEBSOCKET = 1, /* a valid upgrade request: answer with cq_wsup_response_101() */
    CQ_WSUP_PLAIN = 2,     /* a plain GET/HEAD: see cq_wsup_request() for method and path */
};

typedef struct cq_wsup cq_wsup_t;

/* The parsed request. All strings are NUL-terminated and point into the parser's buffer:
 * borrowed, valid until cq_wsup_free(). Fields that were absent are NULL. */
typedef struct cq_wsup_request {
    bool head;            /* the method was HEAD (only for CQ_WSUP_PLAIN) */
    const char *path;     /* path part of the request-target, without the query */
    const char *query;    /* the query without '?', or NULL */
    const char *host;     /* Host */
    const char *origin;   /* Origin */
    const char *key;      /* Sec-WebSocket-Key (24 base64 characters, validated) */
    const char *protocol; /* Sec-WebSocket-Protocol as sent (a comma list), or NULL */
} cq_wsup_request_t;

/* Creates a parser. cfg is copied (its strings too); NULL means all defaults. Returns an owned
 * parser or NULL on OOM. */
cq_wsup_t *cq_wsup_new(const cq_wsup_config_t *cfg);
/* Frees the parser and its buffer. Takes NULL. */
void cq_wsup_free(cq_wsup_t *p);

/* Feeds the next len bytes received from the peer (borrowed; copied as needed).
 *
 * Returns CQ_WSUP_NEED_MORE (all len bytes were taken), CQ_WSUP_WEBSOCKET or CQ_WSUP_PLAIN (the
 * head ended inside this chunk: *ret_used is set to the number of bytes of THIS chunk that
 * belonged to the head; the remaining len - *ret_used bytes are the first WebSocket bytes and
 * must be kept by the caller), or a negative error: CQ_EHTTP (see cq_wsup_status() and
 * cq_wsup_reason()) or -ENOMEM. After a non-zero return, further calls return the same value
 * and take nothing. ret_used may be NULL. */
int cq_wsup_feed(cq_wsup_t *p, const uint8_t *data, size_t len, size_t *ret_used);

/* The parsed request after CQ_WSUP_WEBSOCKET or CQ_WSUP_PLAIN, else NULL. Borrowed. */
const cq_wsup_request_t *cq_wsup_request(const cq_wsup_t *p);
/* After CQ_EHTTP: the HTTP status to answer with (400, 403, 404, 405, 426, 431); 0 if the
 * parser has not failed. */
int cq_wsup_status(const cq_wsup_t *p);
/* After CQ_EHTTP: a short reason text for logs and the response body (static; never NULL). */
const char *cq_wsup_reason(const cq_wsup_t *p);

/* The Sec-WebSocket-Accept value for key: base64(SHA1(key + GUID)), 28 characters + NUL
 * written to out. Returns 0 or CQ_EHTTP if the digest fails. */
int cq_wsup_accept(const char *key, char out[29]);

/* The following builders write a complete response head into buf (cap bytes, with
 * cq_http_answer_head(), pkg/http) and return its length, or -ENOSPC if it does not fit with a
 * NUL after it (512 bytes is always enough for reasons of at most 200 bytes). */

/* "101 Switching Protocols" for req, with Sec-WebSocket-Protocol: protocol when protocol is
 * non-NULL (it must be one the client offered; chanq itself uses none). */
int cq_wsup_response_101(const cq_wsup_request_t *req, const char *protocol, char *buf, size_t cap);

/* An error response for status (as from cq_wsup_status()): status line, Content-Type
 * text/plain, Content-Length, "Sec-WebSocket-Version: 13" for 426, "Allow: GET, HEAD" for 405,
 * Connection: close, then the body "<reason>\n" (reason may be NULL: the reason phrase). The
 * caller writes it and closes the connection after the write. */
int cq_wsup_response_error(int status, const char *reason, char *buf, size_t cap);

/* A static-file response head for a CQ_WSUP_PLAIN request: status 200 or 404 (other values
 * give their standard phrase), Content-Type from the extension of name (html, htm, js, mjs,
 * css, json, map, txt, svg, png, jpg, jpeg, gif, ico, wasm; otherwise
 * application/octet-stream; 404 is always text/plain), Content-Length: content_length,
 * Cache-Control: no-cache, X-Content-Type-Options: nosniff and Connection: close. chanq
 * serves one response per connection: the caller writes the head and, unless the request was
 * HEAD, content_length body bytes, then closes. name is borrowed. */
int cq_wsup_response_file(int status, const char *name, uint64_t content_length, char *buf,
                          size_t cap);

#endif
