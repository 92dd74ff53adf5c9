/* cq_http.c - the HTTP/1.x request-head parser (see cq_http.h).
 *
 * Why one parser: the admin endpoint, the MQ HTTP API and the WebSocket upgrade each had their
 * own, with three different ideas of a header line. Here the head is found first (bounded by
 * max_head, resumable through last_len), then cut into lines, and each line is checked rule by
 * rule in a fixed order, so a bad head always reports the same fault whatever the input split.
 * Nothing before the end of the head is parsed, so every prefix of a valid head is "need more".
 */
#include "cq_http.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

/* A line of the head without its terminator, and what was wrong with how it ended. */
typedef struct line {
    const char *p;
    size_t n;
    bool stray; /* a CR not before the LF, a NUL, or a bare LF that the flags do not allow */
} line_t;

/* ---- characters ------------------------------------------------------------------------- */

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool all_tchar(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)p[i]))
            return false;
    return n > 0;
}

/* ---- the end of the head ---------------------------------------------------------------- */

/* Length of the head through its empty line within buf[0..n), or 0. from: first byte not yet
 * searched by an earlier call. */
static size_t find_end(const char *buf, size_t n, size_t from, unsigned flags)
{
    size_t i = from > 3 ? from - 3 : 0;
    if (!(flags & CQ_HTTP_BARE_LF)) {
        for (i = i < 3 ? 3 : i; i < n; i++)
            if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
                return i + 1;
        return 0;
    }
    for (; i + 1 < n; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r' && i + 2 < n && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* Cuts the next line out of [*cur, end); end is just after the head's final LF, so every line
 * has one. */
static line_t next_line(const char **cur, const char *end, unsigned flags)
{
    const char *s = *cur;
    const char *lf = memchr(s, '\n', (size_t)(end - s));
    line_t l = {s, (size_t)(lf - s), false};
    *cur = lf + 1;
    if (l.n > 0 && s[l.n - 1] == '\r')
        l.n--;
    else if (!(flags & CQ_HTTP_BARE_LF))
        l.stray = true;
    if (memchr(s, '\r', l.n) || memchr(s, '\0', l.n))
        l.stray = true;
    return l;
}

/* ---- lines ------------------------------------------------------------------------------ */

static cq_http_fault_t request_line(line_t l, cq_http_head_t *h)
{
    const char *end = l.p + l.n;
    if (l.stray)
        return CQ_HTTP_FAULT_REQUEST_LINE;
    const char *sp1 = memchr(l.p, ' ', l.n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    if (!sp2 || memchr(sp2 + 1, ' ', (size_t)(end - sp2 - 1)))
        return CQ_HTTP_FAULT_REQUEST_LINE;
    if (!all_tchar(l.p, (size_t)(sp1 - l.p)) || sp2 == sp1 + 1)
        return CQ_HTTP_FAULT_REQUEST_LINE;
    for (const char *t = sp1 + 1; t < sp2; t++)
        if ((unsigned char)*t <= 0x20 || *t == 0x7f)
            return CQ_HTTP_FAULT_TARGET;
    const char *v = sp2 + 1;
    if (end - v != 8 || memcmp(v, "HTTP/1.", 7) != 0 || v[7] < '0' || v[7] > '9')
        return CQ_HTTP_FAULT_VERSION;
    h->method = l.p;
    h->method_len = (size_t)(sp1 - l.p);
    h->target = sp1 + 1;
    h->target_len = (size_t)(sp2 - sp1 - 1);
    h->minor_version = v[7] - '0';
    return CQ_HTTP_FAULT_NONE;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static cq_http_fault_t header_line(line_t l, cq_http_header_t *ret)
{
    if (l.stray)
        return CQ_HTTP_FAULT_STRAY;
    if (is_ows(l.p[0]))
        return CQ_HTTP_FAULT_FOLD;
    const char *colon = memchr(l.p, ':', l.n);
    if (!colon)
        return CQ_HTTP_FAULT_HEADER_LINE;
    if (!all_tchar(l.p, (size_t)(colon - l.p)))
        return CQ_HTTP_FAULT_HEADER_NAME;
    const char *v = colon + 1, *e = l.p + l.n;
    for (const char *c = v; c < e; c++)
        if ((unsigned char)*c < 0x20 && *c != '\t')
            return CQ_HTTP_FAULT_HEADER_VALUE;
    while (v < e && is_ows(*v))
        v++;
    while (e > v && is_ows(e[-1]))
        e--;
    *ret = (cq_http_header_t){l.p, v, (size_t)(colon - l.p), (size_t)(e - v)};
    return CQ_HTTP_FAULT_NONE;
}

/* ---- the head --------------------------------------------------------------------------- */

/* Checks the complete head buf[0..end) line by line. Returns 0, CQ_ELIMIT or CQ_EHEADER (with
 * the rule in *ret_fault). */
static int parse_lines(const char *buf, size_t end, unsigned flags, cq_http_head_t *h,
                       cq_http_header_t *headers, size_t max_headers, cq_http_fault_t *ret_fault)
{
    const char *cur = buf, *stop = buf + end;
    cq_http_fault_t f = request_line(next_line(&cur, stop, flags), h);
    h->num_headers = 0;
    while (f == CQ_HTTP_FAULT_NONE) {
        line_t l = next_line(&cur, stop, flags);
        if (l.n == 0 && !l.stray)
            break; /* the empty line: find_end() put it last */
        cq_http_header_t hd;
        f = header_line(l, &hd);
        if (f != CQ_HTTP_FAULT_NONE)
            break;
        if (headers && h->num_headers == max_headers)
            return CQ_ELIMIT;
        if (headers)
            headers[h->num_headers] = hd;
        h->num_headers++;
    }
    *ret_fault = f;
    return f == CQ_HTTP_FAULT_NONE ? 0 : CQ_EHEADER;
}

static ssize_t parse(const char *buf, size_t len, size_t last_len, const cq_http_opts_t *o,
                     cq_http_head_t *ret_head, cq_http_header_t *headers, size_t max_headers,
                     cq_http_fault_t *ret_fault)
{
    size_t n = len < o->max_head ? len : o->max_head;
    size_t end = find_end(buf, n, last_len <= len ? last_len : 0, o->flags);
    if (!end)
        return len >= o->max_head ? CQ_EBADLEN : 0;
    cq_http_head_t h;
    int r = parse_lines(buf, end, o->flags, &h, headers, max_headers, ret_fault);
    if (r < 0)
        return r;
    *ret_head = h;
    return (ssize_t)end;
}

ssize_t cq_http_parse_head(const char *buf, size_t len, size_t last_len, const cq_http_opts_t *o,
                           cq_http_head_t *ret_head, cq_http_header_t *headers, size_t max_headers)
{
    cq_http_fault_t f;
    return parse(buf, len, last_len, o, ret_head, headers, max_headers, &f);
}

cq_http_fault_t cq_http_fault(const char *buf, size_t len, const cq_http_opts_t *o,
                              size_t *ret_head_len)
{
    cq_http_fault_t f = CQ_HTTP_FAULT_NONE;
    cq_http_head_t h;
    if (parse(buf, len, 0, o, &h, NULL, 0, &f) != CQ_EHEADER)
        return CQ_HTTP_FAULT_NONE;
    if (ret_head_len)
        *ret_head_len = find_end(buf, len < o->max_head ? len : o->max_head, 0, o->flags);
    return f;
}

/* ---- every header ----------------------------------------------------------------------- */

ssize_t cq_http_parse_all(const char *buf, size_t len, size_t last_len, const cq_http_opts_t *o,
                          cq_http_head_t *ret_head, cq_http_headers_t *hs)
{
    hs->v = NULL;
    hs->n = 0;
    cq_http_head_t h;
    ssize_t r = cq_http_parse_head(buf, len, last_len, o, &h, hs->inline_v, CQ_HTTP_INLINE_HEADERS);
    if (r == CQ_ELIMIT) {
        /* Count them (the head is complete and its lines are valid up to here), then store. */
        r = cq_http_parse_head(buf, len, last_len, o, &h, NULL, 0);
        if (r <= 0)
            return r;
        cq_http_header_t *v = cq_malloc(h.num_headers * sizeof(*v));
        if (!v)
            return -ENOMEM;
        r = cq_http_parse_head(buf, len, last_len, o, &h, v, h.num_headers);
        hs->v = v;
    } else if (r > 0) {
        hs->v = hs->inline_v;
    }
    if (r > 0) {
        hs->n = h.num_headers;
        *ret_head = h;
    }
    return r;
}

void cq_http_headers_done(cq_http_headers_t *hs)
{
    if (hs->v && hs->v != hs->inline_v)
        cq_free(hs->v);
    hs->v = NULL;
    hs->n = 0;
}

bool cq_http_name_is(const cq_http_header_t *h, const char *name)
{
    return strlen(name) == h->name_len && strncasecmp(h->name, name, h->name_len) == 0;
}
