/* cq_http.h - one HTTP/1.x request-head parser for every chanq listener.
 *
 * The shape is picohttpparser's: stateless, zero-copy, bounded. The caller hands in the bytes
 * received so far; the parser returns the length of the request head once it is complete, and
 * slices into the caller's buffer for the method, the request-target, the minor version and
 * the header fields. It allocates nothing and keeps no state between calls (last_len only
 * saves rescanning bytes already searched for the end of the head).
 *
 * Grammar (RFC 9112 section 2-5), with what each listener adds on top:
 *
 *   request-line = method SP request-target SP "HTTP/1." DIGIT
 *   method       = 1*tchar
 *   target       = 1*( VCHAR / obs-text )      (no check of the form: callers decide)
 *   field-line   = field-name ":" OWS field-value OWS
 *   field-name   = 1*tchar                     (no whitespace before the colon)
 *   field-value  = *( HTAB / SP / VCHAR / obs-text / DEL )
 *
 * Lines end in CRLF; with CQ_HTTP_BARE_LF a bare LF ends a line too (RFC 9112 section 2.2 lets
 * a server accept it), which also changes where the head ends (at LF LF or LF CR LF). A CR not
 * followed by LF, a NUL, and a bare LF without CQ_HTTP_BARE_LF are errors; so are folded
 * header lines (obs-fold) and empty lines before the request line. Anything accepted here is
 * accepted by every caller's old parser; the callers narrow it (version 1.0/1.1 only, origin
 * form only, no DEL in values, ...) with their own checks.
 *
 * Header names are returned as sent; compare them with cq_http_name_is() (case-insensitive).
 * Values are returned without the surrounding OWS. Repeated headers are returned in order,
 * each one; combining or rejecting duplicates is the caller's policy.
 *
 * Thread-safe (pure); no logging.
 */
#ifndef CQ_HTTP_H
#define CQ_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Flags of cq_http_opts_t. */
enum {
    CQ_HTTP_BARE_LF = 1u << 0, /* a bare LF ends a line (default: CRLF only) */
};

/* Header slices of the caller's array when the head has at most this many header lines
 * (cq_http_parse_all); past it, an array is allocated. */
#define CQ_HTTP_INLINE_HEADERS 32

typedef struct cq_http_opts {
    size_t max_head; /* bound on the head in bytes, request line through the empty line (> 0) */
    unsigned flags;  /* CQ_HTTP_* */
} cq_http_opts_t;

/* One header field: slices into the caller's buffer, valid while it is. */
typedef struct cq_http_header {
    const char *name, *value;
    size_t name_len, value_len;
} cq_http_header_t;

/* The request line and the header count: slices into the caller's buffer. */
typedef struct cq_http_head {
    const char *method, *target;
    size_t method_len, target_len;
    int minor_version;  /* 0..9, from "HTTP/1.<digit>" */
    size_t num_headers; /* header lines in the head (all of them, also when none are stored) */
} cq_http_head_t;

/* Which rule a malformed head broke (cq_http_fault()), in the order they are checked on each
 * line; the first broken rule of the first bad line is reported. */
typedef enum cq_http_fault {
    CQ_HTTP_FAULT_NONE = 0,
    CQ_HTTP_FAULT_REQUEST_LINE, /* not "method SP target SP version", a stray CR, NUL or bare
                                   LF in it, a method that is not a token, an empty target */
    CQ_HTTP_FAULT_TARGET,       /* a control character (or SP, DEL) in the request-target */
    CQ_HTTP_FAULT_VERSION,      /* not "HTTP/1.<digit>" */
    CQ_HTTP_FAULT_STRAY,        /* a stray CR, NUL or (without CQ_HTTP_BARE_LF) bare LF in a
                                   header line */
    CQ_HTTP_FAULT_FOLD,         /* a header line starting with SP or HTAB (obs-fold) */
    CQ_HTTP_FAULT_HEADER_LINE,  /* a header line without a colon */
    CQ_HTTP_FAULT_HEADER_NAME,  /* a header name that is empty or not a token */
    CQ_HTTP_FAULT_HEADER_VALUE, /* a control character in a header value */
} cq_http_fault_t;

/* Parses the request head at buf[0..len).
 *
 * last_len is how many of these bytes the previous call on the same request already saw (0 on
 * the first call, or always): the search for the end of the head resumes near there. headers
 * is the caller's array of max_headers slices, or NULL (then max_headers is ignored: header
 * lines are checked and counted but not stored).
 *
 * Returns the length of the head (> 0, through the empty line) and fills *ret_head and
 * headers[0..ret_head->num_headers); 0 when the head is not complete yet and len < max_head;
 * or a negative code:
 *   CQ_EBADLEN  too large: no complete head within the first max_head bytes and len >=
 *               max_head (so a head of exactly max_head bytes fits);
 *   CQ_ELIMIT   too many headers: more than max_headers header lines (headers not NULL);
 *               reported as soon as line max_headers + 1 is seen;
 *   CQ_EHEADER  malformed (cq_http_fault() tells which rule was broken).
 * *ret_head is written only on success; headers may be written on failure too. Borrowed
 * buffers only; no allocation. */
ssize_t cq_http_parse_head(const char *buf, size_t len, size_t last_len, const cq_http_opts_t *o,
                           cq_http_head_t *ret_head, cq_http_header_t *headers, size_t max_headers);

/* After cq_http_parse_head() returned CQ_EHEADER for the same buf, len and o: the rule the head
 * broke, and the head's length in *ret_head_len (may be NULL). CQ_HTTP_FAULT_NONE if the head
 * is not malformed. Pure. */
cq_http_fault_t cq_http_fault(const char *buf, size_t len, const cq_http_opts_t *o,
                              size_t *ret_head_len);

/* Every header of a head, however many: in a fixed inline array when they fit, else in one
 * allocated array. Declare it uninitialised, pass it to cq_http_parse_all(), read v[0..n),
 * then cq_http_headers_done(). */
typedef struct cq_http_headers {
    cq_http_header_t *v; /* inline or allocated */
    size_t n;
    cq_http_header_t inline_v[CQ_HTTP_INLINE_HEADERS];
} cq_http_headers_t;

/* cq_http_parse_head() without a header limit: returns what it returns, except that CQ_ELIMIT
 * never happens; a head with more than CQ_HTTP_INLINE_HEADERS header lines is parsed again into
 * an allocated array (cq_malloc), and -ENOMEM is returned when that allocation fails. hs is
 * always initialised (v = NULL, n = 0 unless the result is > 0), so cq_http_headers_done() may
 * be called whatever the result. */
ssize_t cq_http_parse_all(const char *buf, size_t len, size_t last_len, const cq_http_opts_t *o,
                          cq_http_head_t *ret_head, cq_http_headers_t *hs);
/* Frees the array cq_http_parse_all() may have allocated. Accepts a zeroed or done hs. */
void cq_http_headers_done(cq_http_headers_t *hs);

/* True if the header's name is name, compared case-insensitively (name is ASCII). */
bool cq_http_name_is(const cq_http_header_t *h, const char *name);

/* ---- request rules shared by the JSON APIs (cq_httpmsg.c) ---------------------------------
 * What the MQ HTTP API (src/mqsrv) and the manager's console API (src/mgr) both apply to a
 * parsed head. Pure; no logging. */

/* The request line of an API: HTTP/1.0 or 1.1 and an origin-form target ("/path?query").
 * Returns 0 with *http11 and the path and query slices (query NULL without '?'), or CQ_EHEADER. */
int cq_http_origin_target(const cq_http_head_t *h, bool *http11, const char **path,
                          size_t *path_len, const char **query, size_t *query_len);
/* A Content-Length value: 1 to 18 digits. *seen tells whether one was already taken (a repeat
 * must carry the same value); on success *seen is set and *len holds the value. Returns 0 or
 * CQ_EHEADER. */
int cq_http_content_length(const char *v, size_t n, bool *seen, uint64_t *len);
/* Scans a comma-separated Connection value: sets *close on "close", *keep on "keep-alive"
 * (case-insensitive); other tokens are ignored. */
void cq_http_connection(const char *v, size_t n, bool *close, bool *keep);
/* True when the Content-Type value v[0..n) is the media type type (lower case), optionally
 * followed by blanks and ";" parameters. v NULL: false. */
bool cq_http_ctype_is(const char *v, size_t n, const char *type);
/* Calls f on each comma-separated, blank-trimmed, non-empty item of list (NULL: none) until it
 * returns true; returns whether one did. */
bool cq_http_list_any(const char *list, const char *v, size_t n,
                      bool (*f)(const char *item, size_t ilen, const char *v, size_t n));
/* True when the Host value h[0..n) is in list, comma-separated names with optional blanks
 * around them ("*" matches any Host, also none; a name matches whatever port, "[v6]" the same
 * way). list NULL or "", or h NULL (no Host header) with a list without "*": false. */
bool cq_http_host_listed(const char *list, const char *h, size_t n);

/* The request headers both JSON APIs read, collected from a parsed head's slices (valid while
 * the head's buffer is). Zero-initialise, pass each header to cq_http_fields_take(). */
typedef struct cq_http_fields {
    const char *host, *origin, *ctype, *auth; /* Host, Origin, Content-Type, Authorization:
                                                 the last one of each; NULL when absent */
    size_t host_len, origin_len, ctype_len, auth_len;
    uint64_t content_length;    /* 0 when absent */
    bool cl_seen;               /* a valid Content-Length was taken */
    bool chunked;               /* a Transfer-Encoding header was present */
    bool conn_close, conn_keep; /* Connection tokens "close", "keep-alive" */
    bool bad; /* a malformed Content-Length, two that differ, or a second Host (which of two
                 Hosts a proxy or the browser meant is unknowable) */
} cq_http_fields_t;

/* Takes h into f when it is one of the headers above (compared case-insensitively) and returns
 * true; returns false and leaves f as it was for any other header (Cookie, X-CSRF-Token, ...),
 * which is the caller's. Values are checked as cq_http_content_length() and
 * cq_http_connection() do. Pure. */
bool cq_http_fields_take(cq_http_fields_t *f, const cq_http_header_t *h);
/* Whether the connection stays open after the answer: an HTTP/1.1 request unless it said
 * "Connection: close", an HTTP/1.0 one only when it said "keep-alive". */
bool cq_http_fields_keep_alive(const cq_http_fields_t *f, bool http11);

/* Answers quote requests (a path segment, a name): a byte of s that is not part of valid UTF-8
 * (or a sequence cut short) becomes '?', so that a JSON answer can still be built. Overlong forms
 * and surrogates pass: jansson takes them. */
void cq_http_scrub_utf8(char *s);

/* ---- answer heads: the one writer of an HTTP/1.1 status line and header block -----------
 * Every chanq listener answers through cq_http_answer_head(): the JSON APIs (src/mqsrv,
 * src/mgr), the admin endpoint (src/admin) and the WebSocket listener's 101, error and file
 * answers (src/transport/ws). */

/* The reason phrase of status: the standard one for each status a chanq listener answers (101,
 * 200, 400, 401, 403, 404, 405, 409, 413, 415, 421, 426, 429, 431, 500, 503), "Service
 * Unavailable" for any other. Static. */
const char *cq_http_reason(int status);

/* What an answer's head says. Zero-initialise and set what applies: the zero value is a
 * "Connection: close" answer with "Content-Length: 0" and no Content-Type. */
typedef struct cq_http_answer {
    int status;               /* the reason phrase is cq_http_reason(status) */
    const char *ctype;        /* Content-Type value; NULL: no Content-Type line */
    uint64_t length;          /* Content-Length value */
    bool no_length;           /* no Content-Length line (a 101 has no body to count) */
    const char *const *extra; /* written in order after Content-Length (NULL items skipped):
                                 whole header lines, or pieces of them, CRLF-terminated */
    size_t nextra;
    bool keep_alive; /* false: "Connection: close" after the extra lines */
} cq_http_answer_t;

/* Writes a's head into buf[cap], NUL-terminated:
 *
 *   HTTP/1.1 <status> <reason>\r\n
 *   Content-Type: <ctype>\r\n          unless ctype is NULL
 *   Content-Length: <length>\r\n       unless no_length
 *   <extra[0]><extra[1]>...
 *   Connection: close\r\n              unless keep_alive
 *   \r\n
 *
 * Returns the head's length (without the NUL), or -ENOSPC when it does not fit in cap with its
 * NUL. a and the strings it points to are borrowed. Pure. */
int cq_http_answer_head(char *buf, size_t cap, const cq_http_answer_t *a);

#endif
