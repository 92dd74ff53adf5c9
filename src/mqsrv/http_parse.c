/* http_parse.c - the HTTP API's view of a request head (see cq_mqhttp.h).
 *
 * The bytes are parsed by the shared head parser (pkg/http, CRLF line ends only); what is
 * particular to the HTTP API is checked here: HTTP/1.0 or 1.1, an origin-form target, the
 * headers it reads (Content-Length, Transfer-Encoding, Connection, Authorization, Host, Origin,
 * Content-Type: collected by cq_http_fields_take(), as the manager's console API does), and the
 * Host, Origin and Content-Type rules of the API's cross-site defence.
 */
#include "cq_err.h"
#include "cq_http.h"
#include "cq_mqhttp.h"

#include <string.h>
#include <strings.h>

bool cq_mqhttp_host_ok(const char *hosts, const char *h, size_t n)
{
    return cq_http_host_listed(hosts, h, n);
}

static bool origin_match(const char *item, size_t ilen, const char *o, size_t n)
{
    return ilen == n && strncasecmp(item, o, n) == 0;
}

bool cq_mqhttp_origin_ok(const char *origins, const char *o, size_t n)
{
    return cq_http_list_any(origins, o, n, origin_match);
}

bool cq_mqhttp_ctype_json(const char *v, size_t n)
{
    return cq_http_ctype_is(v, n, "application/json");
}

static void from_fields(cq_mqhttp_req_t *r, const cq_http_fields_t *f, bool http11)
{
    r->auth = f->auth;
    r->auth_len = f->auth_len;
    r->host = f->host;
    r->host_len = f->host_len;
    r->origin = f->origin;
    r->origin_len = f->origin_len;
    r->ctype = f->ctype;
    r->ctype_len = f->ctype_len;
    r->content_length = f->content_length;
    r->chunked = f->chunked;
    r->keep_alive = cq_http_fields_keep_alive(f, http11);
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
    cq_http_fields_t f;
    memset(&f, 0, sizeof(f));
    bool http11 = false;
    /* only HTTP/1.0 and 1.1, and only origin-form targets ("/path?query") */
    int e = cq_http_origin_target(&h, &http11, &r.path, &r.path_len, &r.query, &r.query_len);
    r.method = h.method;
    r.method_len = h.method_len;
    for (size_t i = 0; i < hs.n; i++)
        cq_http_fields_take(&f, &hs.v[i]);
    cq_http_headers_done(&hs);
    if (e < 0 || f.bad)
        return CQ_EHEADER;
    from_fields(&r, &f, http11);
    *ret = r;
    return end;
}
