/* cq_wsup.c - the WebSocket listener's view of an HTTP/1.1 request head.
 *
 * The head is copied into one buffer of at most max_head bytes, and each feed hands the whole
 * buffer to the shared head parser (pkg/http, bare LF allowed, resuming its search for the end
 * where the previous feed stopped). Once the head is complete and well formed, its slices are
 * NUL-terminated in place, and the upgrade rules are applied: duplicates, the WebSocket
 * headers, the path and the Origin. Nothing is decided before the head is complete, so every
 * input split gives the same result.
 */
#include "cq_wsup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_http.h"

static const char WS_GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/* Headers that may appear at most once, and the list headers that are combined. */
typedef struct wsup_fields {
    const char *method;
    char *target;
    int minor; /* HTTP/1.<minor> */
    const char *host, *origin, *key, *ws_version;
    char *protocol; /* combined Sec-WebSocket-Protocol (into p->proto when repeated) */
    bool has_upgrade, upgrade_ws, conn_upgrade, body;
} wsup_fields_t;

struct cq_wsup {
    char *buf;
    size_t len, max_head;
    int result; /* 0 while incomplete, then CQ_WSUP_* or a negative error */
    int status;
    const char *reason;
    char *path_cfg, *origins;
    bool same_origin;
    char *proto; /* owned join of repeated Sec-WebSocket-Protocol values */
    cq_wsup_request_t req;
};

/* ---- small helpers --------------------------------------------------------------------- */

static int fail(cq_wsup_t *p, int status, const char *reason)
{
    p->status = status;
    p->reason = reason;
    p->result = CQ_EHTTP;
    return CQ_EHTTP;
}

/* True if the comma-separated list contains token (case-insensitive, OWS around items). */
static bool list_has(const char *list, const char *token)
{
    size_t tlen = strlen(token);
    const char *s = list;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        const char *e = s;
        while (*e && *e != ',')
            e++;
        const char *end = e;
        while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if ((size_t)(end - s) == tlen && strncasecmp(s, token, tlen) == 0)
            return true;
        s = e;
    }
    return false;
}

/* ---- life cycle ------------------------------------------------------------------------ */

cq_wsup_t *cq_wsup_new(const cq_wsup_config_t *cfg)
{
    cq_wsup_t *p = cq_calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    const char *path = cfg && cfg->path && cfg->path[0] ? cfg->path : "/";
    const char *origins = cfg && cfg->origins ? cfg->origins : "";
    p->max_head = cfg && cfg->max_head ? cfg->max_head : CQ_WSUP_DEFAULT_MAX_HEAD;
    p->path_cfg = cq_strdup(path);
    p->origins = cq_strdup(origins);
    p->same_origin = cfg && cfg->same_origin;
    if (!p->path_cfg || !p->origins) {
        cq_wsup_free(p);
        return NULL;
    }
    p->reason = "";
    return p;
}

void cq_wsup_free(cq_wsup_t *p)
{
    if (!p)
        return;
    cq_free(p->buf);
    cq_free(p->path_cfg);
    cq_free(p->origins);
    cq_free(p->proto);
    cq_free(p);
}

const cq_wsup_request_t *cq_wsup_request(const cq_wsup_t *p)
{
    return p->result > 0 ? &p->req : NULL;
}

int cq_wsup_status(const cq_wsup_t *p)
{
    return p->result == CQ_EHTTP ? p->status : 0;
}

const char *cq_wsup_reason(const cq_wsup_t *p)
{
    return p->reason;
}

/* ---- the complete head ----------------------------------------------------------------- */

/* Why the shared parser refused the head, in this parser's words. */
static const char *fault_reason(cq_http_fault_t f)
{
    switch (f) {
    case CQ_HTTP_FAULT_TARGET:
        return "malformed request target";
    case CQ_HTTP_FAULT_VERSION:
        return "unsupported HTTP version";
    case CQ_HTTP_FAULT_STRAY:
        return "stray CR or NUL in header line";
    case CQ_HTTP_FAULT_FOLD:
        return "folded header line (obs-fold)";
    case CQ_HTTP_FAULT_HEADER_LINE:
        return "malformed header line";
    case CQ_HTTP_FAULT_HEADER_NAME:
        return "malformed header name";
    case CQ_HTTP_FAULT_HEADER_VALUE:
        return "control character in header value";
    default:
        return "malformed request line";
    }
}

/* The slice s[0..n) of the parser's buffer, NUL-terminated in place (the byte after a slice is
 * a separator, a line end or the buffer's spare byte). */
static char *own(cq_wsup_t *p, const char *s, size_t n)
{
    char *m = p->buf + (s - p->buf);
    m[n] = '\0';
    return m;
}

/* What this listener allows of the request line beyond the shared grammar: no obs-text in the
 * target, and only HTTP/1.0 or 1.1. */
static int request_line(cq_wsup_t *p, const cq_http_head_t *h, wsup_fields_t *f)
{
    for (size_t i = 0; i < h->target_len; i++)
        if ((unsigned char)h->target[i] >= 0x7f)
            return fail(p, 400, "malformed request target");
    if (h->minor_version > 1)
        return fail(p, 400, "unsupported HTTP version");
    f->method = own(p, h->method, h->method_len);
    f->target = own(p, h->target, h->target_len);
    f->minor = h->minor_version;
    return 0;
}

/* Stores a header that may appear only once. */
static int set_once(cq_wsup_t *p, const char **slot, const char *value, const char *dup)
{
    if (*slot)
        return fail(p, 400, dup);
    *slot = value;
    return 0;
}

static int add_protocol(cq_wsup_t *p, wsup_fields_t *f, char *value)
{
    if (!f->protocol) {
        f->protocol = value;
        return 0;
    }
    size_t a = strlen(f->protocol), b = strlen(value);
    char *j = cq_malloc(a + b + 3);
    if (!j) {
        p->result = -ENOMEM;
        return -ENOMEM;
    }
    memcpy(j, f->protocol, a);
    memcpy(j + a, ", ", 2);
    memcpy(j + a + 2, value, b + 1);
    cq_free(p->proto);
    p->proto = j;
    f->protocol = j;
    return 0;
}

static int store_header(cq_wsup_t *p, wsup_fields_t *f, const cq_http_header_t *h)
{
    if (memchr(h->value, 0x7f, h->value_len))
        return fail(p, 400, "control character in header value");
    char *value = own(p, h->value, h->value_len);
    if (cq_http_name_is(h, "Host"))
        return set_once(p, &f->host, value, "duplicate Host header");
    if (cq_http_name_is(h, "Origin"))
        return set_once(p, &f->origin, value, "duplicate Origin header");
    if (cq_http_name_is(h, "Sec-WebSocket-Key"))
        return set_once(p, &f->key, value, "duplicate Sec-WebSocket-Key header");
    if (cq_http_name_is(h, "Sec-WebSocket-Version"))
        return set_once(p, &f->ws_version, value, "duplicate Sec-WebSocket-Version header");
    if (cq_http_name_is(h, "Sec-WebSocket-Protocol"))
        return add_protocol(p, f, value);
    if (cq_http_name_is(h, "Upgrade")) {
        f->has_upgrade = true;
        f->upgrade_ws |= list_has(value, "websocket");
    } else if (cq_http_name_is(h, "Connection")) {
        f->conn_upgrade |= list_has(value, "upgrade");
    } else if (cq_http_name_is(h, "Content-Length")) {
        f->body |= strcmp(value, "0") != 0;
    } else if (cq_http_name_is(h, "Transfer-Encoding")) {
        f->body = true;
    }
    return 0;
}

/* Splits the request-target into path and query. Accepts origin-form and absolute-form. */
static int split_target(cq_wsup_t *p, char *target)
{
    char *path = target;
    if (strncasecmp(target, "http://", 7) == 0 || strncasecmp(target, "https://", 8) == 0) {
        char *auth = strstr(target, "//") + 2;
        path = strchr(auth, '/');
        if (!path) {
            /* "http://host" or "http://host?q": the path is "/"; reuse the "//" bytes. */
            char *q = strchr(auth, '?');
            auth[-2] = '/';
            auth[-1] = '\0';
            p->req.path = auth - 2;
            p->req.query = q ? q + 1 : NULL;
            return 0;
        }
    } else if (target[0] != '/') {
        return fail(p, 400, "unsupported request target form");
    }
    char *q = strchr(path, '?');
    if (q)
        *q++ = '\0';
    char *frag = strchr(q ? q : path, '#');
    if (frag)
        *frag = '\0';
    p->req.path = path;
    p->req.query = q;
    return 0;
}

/* Sec-WebSocket-Key: 24 base64 characters that decode to 16 bytes (22 digits + "=="). */
static bool key_valid(const char *key)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (strlen(key) != 24 || strcmp(key + 22, "==") != 0)
        return false;
    for (int i = 0; i < 22; i++)
        if (!strchr(b64, key[i]))
            return false;
    return true;
}

/* Writes "host:port" for authority s (host, host:port, [v6] or [v6]:port), with the scheme's
 * default port when s has none. Returns false if it does not fit. */
static bool authority(const char *s, bool https, char *out, size_t cap)
{
    size_t n = strcspn(s, "/?#");
    const char *v6end = memchr(s, ']', n);
    const char *from = v6end ? v6end : s;
    bool has_port = memchr(from, ':', n - (size_t)(from - s)) != NULL;
    int k = has_port ? snprintf(out, cap, "%.*s", (int)n, s)
                     : snprintf(out, cap, "%.*s:%s", (int)n, s, https ? "443" : "80");
    return n > 0 && k > 0 && (size_t)k < cap;
}

/* True when origin ("scheme://host[:port]") names the host and port of the Host header. An
 * opaque Origin ("null", from sandboxed pages and files) matches nothing. */
static bool same_site(const char *origin, const char *host)
{
    const char *sep = strstr(origin, "://");
    if (!sep || !host)
        return false;
    bool https = sep - origin == 5 && strncasecmp(origin, "https", 5) == 0;
    char a[300], b[300];
    return authority(sep + 3, https, a, sizeof(a)) && authority(host, https, b, sizeof(b)) &&
           strcasecmp(a, b) == 0;
}

static bool origin_allowed(const cq_wsup_t *p, const char *origin, const char *host)
{
    if (!origin)
        return true;
    if (p->origins[0] == '\0')
        return !p->same_origin || same_site(origin, host);
    return list_has(p->origins, "*") || list_has(p->origins, origin);
}

static int check_websocket(cq_wsup_t *p, const wsup_fields_t *f)
{
    if (strcmp(f->method, "GET") != 0)
        return fail(p, 405, "WebSocket upgrades must use GET");
    if (f->minor != 1)
        return fail(p, 400, "WebSocket upgrades need HTTP/1.1");
    if (!f->upgrade_ws)
        return fail(p, 400, "missing or invalid Upgrade header (expected websocket)");
    if (!f->conn_upgrade)
        return fail(p, 400, "Connection header lacks the upgrade token");
    if (!f->ws_version || strcmp(f->ws_version, "13") != 0)
        return fail(p, 426, "unsupported Sec-WebSocket-Version (expected 13)");
    if (!f->key || !key_valid(f->key))
        return fail(p, 400, "missing or invalid Sec-WebSocket-Key");
    if (strcmp(p->req.path, p->path_cfg) != 0)
        return fail(p, 404, "no WebSocket endpoint at this path");
    if (!origin_allowed(p, f->origin, f->host))
        return fail(p, 403, "Origin not allowed");
    return CQ_WSUP_WEBSOCKET;
}

static int classify(cq_wsup_t *p, const wsup_fields_t *f)
{
    bool ws = f->upgrade_ws || f->key || f->ws_version;
    bool head = strcmp(f->method, "HEAD") == 0;
    if (!ws && strcmp(f->method, "GET") != 0 && !head)
        return fail(p, 405, "method not allowed");
    if (f->body)
        return fail(p, 400, "request body not allowed");
    if (!f->host && f->minor == 1)
        return fail(p, 400, "missing Host header");
    p->req.host = f->host;
    p->req.origin = f->origin;
    p->req.key = f->key;
    p->req.protocol = f->protocol;
    if (ws)
        return check_websocket(p, f);
    p->req.head = head;
    return CQ_WSUP_PLAIN;
}

/* Applies the listener's rules to a well-formed head. */
static int check_head(cq_wsup_t *p, const cq_http_head_t *h, const cq_http_headers_t *hs)
{
    wsup_fields_t f = {0};
    int r = request_line(p, h, &f);
    for (size_t i = 0; r == 0 && i < hs->n; i++)
        r = store_header(p, &f, &hs->v[i]);
    if (r == 0)
        r = split_target(p, f.target);
    if (r == 0)
        r = classify(p, &f);
    p->result = r;
    return r;
}

/* ---- feeding --------------------------------------------------------------------------- */

int cq_wsup_feed(cq_wsup_t *p, const uint8_t *data, size_t len, size_t *ret_used)
{
    if (ret_used)
        *ret_used = 0;
    if (p->result != 0)
        return p->result;
    if (!p->buf) {
        p->buf = cq_malloc(p->max_head + 1); /* +1: room for a NUL after a full head */
        if (!p->buf)
            return p->result = -ENOMEM;
    }
    size_t old = p->len;
    size_t take = len < p->max_head - old ? len : p->max_head - old;
    if (take)
        memcpy(p->buf + old, data, take);
    p->len += take;
    p->buf[p->len] = '\0';
    const cq_http_opts_t o = {.max_head = p->max_head, .flags = CQ_HTTP_BARE_LF};
    cq_http_head_t h;
    cq_http_headers_t hs;
    ssize_t end = cq_http_parse_all(p->buf, p->len, old, &o, &h, &hs);
    if (end == 0) {
        if (ret_used)
            *ret_used = len;
        return CQ_WSUP_NEED_MORE;
    }
    if (end == CQ_EBADLEN)
        return fail(p, 431, "request head too large");
    if (end == CQ_EHEADER) {
        size_t head_len = 0;
        cq_http_fault_t f = cq_http_fault(p->buf, p->len, &o, &head_len);
        if (ret_used)
            *ret_used = head_len - old;
        return fail(p, 400, fault_reason(f));
    }
    if (end < 0)
        return p->result = (int)end;
    if (ret_used)
        *ret_used = (size_t)end - old;
    int r = check_head(p, &h, &hs);
    cq_http_headers_done(&hs);
    return r;
}

/* ---- responses ------------------------------------------------------------------------- */

int cq_wsup_accept(const char *key, char out[29])
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char in[64 + sizeof(WS_GUID)];
    size_t klen = strlen(key);
    if (klen > 64)
        return CQ_EHTTP;
    memcpy(in, key, klen);
    memcpy(in + klen, WS_GUID, sizeof(WS_GUID) - 1);
    if (!EVP_Digest(in, klen + sizeof(WS_GUID) - 1, md, &mdlen, EVP_sha1(), NULL) || mdlen != 20)
        return CQ_EHTTP;
    EVP_EncodeBlock((unsigned char *)out, md, 20); /* 28 characters + NUL */
    return 0;
}

int cq_wsup_response_101(const cq_wsup_request_t *req, const char *protocol, char *buf, size_t cap)
{
    char accept[29];
    if (!req->key || cq_wsup_accept(req->key, accept) != 0)
        return -EINVAL;
    /* Connection: Upgrade is one of the lines, in RFC 6455's order; keep_alive only means
     * "no Connection: close". */
    const char *const extra[] = {"Upgrade: websocket\r\n",
                                 "Connection: Upgrade\r\n",
                                 "Sec-WebSocket-Accept: ",
                                 accept,
                                 "\r\n",
                                 protocol ? "Sec-WebSocket-Protocol: " : NULL,
                                 protocol,
                                 protocol ? "\r\n" : NULL};
    const cq_http_answer_t a = {.status = 101,
                                .no_length = true,
                                .extra = extra,
                                .nextra = sizeof(extra) / sizeof(extra[0]),
                                .keep_alive = true};
    return cq_http_answer_head(buf, cap, &a);
}

int cq_wsup_response_error(int status, const char *reason, char *buf, size_t cap)
{
    const char *extra = NULL;
    if (status == 426)
        extra = "Sec-WebSocket-Version: 13\r\n";
    else if (status == 405)
        extra = "Allow: GET, HEAD\r\n";
    if (!reason)
        reason = cq_http_reason(status);
    const cq_http_answer_t a = {.status = status,
                                .ctype = "text/plain; charset=utf-8",
                                .length = strlen(reason) + 1,
                                .extra = &extra,
                                .nextra = 1};
    int n = cq_http_answer_head(buf, cap, &a);
    if (n < 0)
        return n;
    int b = snprintf(buf + n, cap - (size_t)n, "%s\n", reason);
    return b < 0 || (size_t)b >= cap - (size_t)n ? -ENOSPC : n + b;
}

static const char *content_type(const char *name)
{
    static const char *const map[][2] = {
        {"html", "text/html; charset=utf-8"},
        {"htm", "text/html; charset=utf-8"},
        {"js", "text/javascript; charset=utf-8"},
        {"mjs", "text/javascript; charset=utf-8"},
        {"css", "text/css; charset=utf-8"},
        {"json", "application/json"},
        {"map", "application/json"},
        {"txt", "text/plain; charset=utf-8"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"ico", "image/x-icon"},
        {"wasm", "application/wasm"},
    };
    const char *slash = name ? strrchr(name, '/') : NULL;
    const char *dot = name ? strrchr(slash ? slash : name, '.') : NULL;
    if (dot)
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
            if (strcasecmp(dot + 1, map[i][0]) == 0)
                return map[i][1];
    return "application/octet-stream";
}

int cq_wsup_response_file(int status, const char *name, uint64_t content_length, char *buf,
                          size_t cap)
{
    static const char *const extra[] = {"Cache-Control: no-cache\r\n",
                                        "X-Content-Type-Options: nosniff\r\n"};
    const cq_http_answer_t a = {.status = status,
                                .ctype = status == 200 ? content_type(name)
                                                       : "text/plain; charset=utf-8",
                                .length = content_length,
                                .extra = extra,
                                .nextra = 2};
    return cq_http_answer_head(buf, cap, &a);
}
