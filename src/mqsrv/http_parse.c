/* http_parse.c - the HTTP API's view of a request head (see cq_mqhttp.h).
 *
 * The bytes are parsed by the shared head parser (pkg/http, CRLF line ends only); what is
 * particular to the HTTP API is checked here: HTTP/1.0 or 1.1, an origin-form target, and the
 * headers it reads (Content-Length, Transfer-Encoding, Connection, Authorization, Host, Origin,
 * Content-Type), and the Host, Origin and Content-Type rules of the API's cross-site defence.
 */
#include "cq_err.h"
#include "cq_http.h"
#include "cq_mqhttp.h"

#include <string.h>
#include <strings.h>

static bool token_eq(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && strncasecmp(p, word, n) == 0;
}

/* Scans the comma-separated Connection value for close / keep-alive. */
static void connection_value(const char *v, size_t n, bool *close, bool *keep)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (token_eq(v + s, i - s, "close"))
            *close = true;
        else if (token_eq(v + s, i - s, "keep-alive"))
            *keep = true;
    }
}

static int content_length(const char *v, size_t n, cq_mqhttp_req_t *r, bool *seen)
{
    uint64_t x = 0;
    if (n == 0 || n > 18)
        return CQ_EHEADER;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return CQ_EHEADER;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (*seen && x != r->content_length)
        return CQ_EHEADER;
    *seen = true;
    r->content_length = x;
    return 0;
}

typedef struct hdr_state {
    bool cl_seen, close, keep;
} hdr_state_t;

static int header(const cq_http_header_t *h, cq_mqhttp_req_t *r, hdr_state_t *hs)
{
    if (cq_http_name_is(h, "content-length"))
        return content_length(h->value, h->value_len, r, &hs->cl_seen);
    if (cq_http_name_is(h, "transfer-encoding"))
        r->chunked = true;
    else if (cq_http_name_is(h, "connection"))
        connection_value(h->value, h->value_len, &hs->close, &hs->keep);
    else if (cq_http_name_is(h, "authorization")) {
        r->auth = h->value;
        r->auth_len = h->value_len;
    } else if (cq_http_name_is(h, "host")) {
        if (r->host) /* two Hosts: which one a proxy or the browser meant is unknowable */
            return CQ_EHEADER;
        r->host = h->value;
        r->host_len = h->value_len;
    } else if (cq_http_name_is(h, "origin")) {
        r->origin = h->value;
        r->origin_len = h->value_len;
    } else if (cq_http_name_is(h, "content-type")) {
        r->ctype = h->value;
        r->ctype_len = h->value_len;
    }
    return 0;
}

/* The request line: only HTTP/1.0 and 1.1, and only origin-form targets ("/path?query"). */
static int request_line(const cq_http_head_t *h, cq_mqhttp_req_t *r, bool *http11)
{
    if (h->minor_version > 1 || h->target[0] != '/')
        return CQ_EHEADER;
    *http11 = h->minor_version == 1;
    r->method = h->method;
    r->method_len = h->method_len;
    r->path = h->target;
    r->path_len = h->target_len;
    const char *q = memchr(r->path, '?', r->path_len);
    if (q) {
        r->query = q + 1;
        r->query_len = r->path_len - (size_t)(q + 1 - r->path);
        r->path_len = (size_t)(q - r->path);
    }
    return 0;
}

/* Calls f on each comma-separated, blank-trimmed item of list until it returns true. */
static bool any_item(const char *list, const char *v, size_t n,
                     bool (*f)(const char *item, size_t ilen, const char *v, size_t n))
{
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        const char *e = c ? c : p + strlen(p);
        const char *s = p;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s && f(s, (size_t)(e - s), v, n))
            return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

/* The host part of a Host value or list item: "[v6]:port" -> "[v6]", "name:port" -> "name". */
static size_t host_part(const char *h, size_t n)
{
    if (n && h[0] == '[') {
        const char *b = memchr(h, ']', n);
        return b ? (size_t)(b - h) + 1 : n;
    }
    const char *c = memchr(h, ':', n);
    return c ? (size_t)(c - h) : n;
}

static bool host_match(const char *item, size_t ilen, const char *h, size_t n)
{
    if (ilen == 1 && item[0] == '*')
        return true;
    size_t a = host_part(item, ilen), b = host_part(h, n);
    return a == b && strncasecmp(item, h, a) == 0;
}

bool cq_mqhttp_host_ok(const char *hosts, const char *h, size_t n)
{
    return any_item(hosts, h, n, host_match);
}

static bool origin_match(const char *item, size_t ilen, const char *o, size_t n)
{
    return ilen == n && strncasecmp(item, o, n) == 0;
}

bool cq_mqhttp_origin_ok(const char *origins, const char *o, size_t n)
{
    return any_item(origins, o, n, origin_match);
}

bool cq_mqhttp_ctype_json(const char *v, size_t n)
{
    static const char want[] = "application/json";
    const size_t wl = sizeof(want) - 1;
    if (n < wl || strncasecmp(v, want, wl) != 0)
        return false;
    size_t i = wl;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    return i == n || v[i] == ';';
}

ssize_t cq_mqhttp_parse(const char *p, size_t n, size_t max_head, cq_mqhttp_req_t *ret)
{
    const cq_http_opts_t o = {.max_head = max_head};
    cq_http_head_t h;
    cq_http_headers_t hs;
    ssize_t end = cq_http_parse_all(p, n, 0, &o, &h, &hs);
    if (end <= 0)
        return end;
    cq_mqhttp_req_t r;
    memset(&r, 0, sizeof(r));
    hdr_state_t st = {false, false, false};
    bool http11 = false;
    int e = request_line(&h, &r, &http11);
    for (size_t i = 0; i < hs.n && e == 0; i++)
        e = header(&hs.v[i], &r, &st);
    cq_http_headers_done(&hs);
    if (e < 0)
        return e;
    r.keep_alive = !st.close && (http11 || st.keep);
    *ret = r;
    return end;
}
