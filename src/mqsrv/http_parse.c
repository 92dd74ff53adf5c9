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

typedef struct hdr_state {
    bool cl_seen, close, keep;
} hdr_state_t;

static int header(const cq_http_header_t *h, cq_mqhttp_req_t *r, hdr_state_t *hs)
{
    if (cq_http_name_is(h, "content-length"))
        return cq_http_content_length(h->value, h->value_len, &hs->cl_seen, &r->content_length);
    if (cq_http_name_is(h, "transfer-encoding"))
        r->chunked = true;
    else if (cq_http_name_is(h, "connection"))
        cq_http_connection(h->value, h->value_len, &hs->close, &hs->keep);
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
    /* only HTTP/1.0 and 1.1, and only origin-form targets ("/path?query") */
    int e = cq_http_origin_target(&h, &http11, &r.path, &r.path_len, &r.query, &r.query_len);
    r.method = h.method;
    r.method_len = h.method_len;
    for (size_t i = 0; i < hs.n && e == 0; i++)
        e = header(&hs.v[i], &r, &st);
    cq_http_headers_done(&hs);
    if (e < 0)
        return e;
    r.keep_alive = !st.close && (http11 || st.keep);
    *ret = r;
    return end;
}
