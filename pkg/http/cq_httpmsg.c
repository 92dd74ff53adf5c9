/* cq_httpmsg.c - the request rules of chanq's JSON APIs and the answer head of every listener
 * (see cq_http.h): the MQ HTTP API and the manager's console API apply the same checks to a
 * parsed head, and every answer's status line and headers are written by one function. */
#include "cq_err.h"
#include "cq_http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int cq_http_origin_target(const cq_http_head_t *h, bool *http11, const char **path,
                          size_t *path_len, const char **query, size_t *query_len)
{
    if (h->minor_version > 1 || h->target[0] != '/')
        return CQ_EHEADER;
    *http11 = h->minor_version == 1;
    *path = h->target;
    *path_len = h->target_len;
    *query = NULL;
    *query_len = 0;
    const char *q = memchr(h->target, '?', h->target_len);
    if (q) {
        *query = q + 1;
        *query_len = h->target_len - (size_t)(q + 1 - h->target);
        *path_len = (size_t)(q - h->target);
    }
    return 0;
}

int cq_http_content_length(const char *v, size_t n, bool *seen, uint64_t *len)
{
    uint64_t x = 0;
    if (n == 0 || n > 18)
        return CQ_EHEADER;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return CQ_EHEADER;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (*seen && x != *len)
        return CQ_EHEADER;
    *seen = true;
    *len = x;
    return 0;
}

static bool token_eq(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && strncasecmp(p, word, n) == 0;
}

void cq_http_connection(const char *v, size_t n, bool *close, bool *keep)
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

bool cq_http_ctype_is(const char *v, size_t n, const char *type)
{
    const size_t tl = strlen(type);
    if (!v || n < tl || strncasecmp(v, type, tl) != 0)
        return false;
    size_t i = tl;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    return i == n || v[i] == ';';
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
    if (!h)
        return false;
    size_t a = host_part(item, ilen), b = host_part(h, n);
    return a == b && strncasecmp(item, h, a) == 0;
}

bool cq_http_list_any(const char *list, const char *v, size_t n,
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

bool cq_http_host_listed(const char *list, const char *h, size_t n)
{
    return cq_http_list_any(list, h, n, host_match);
}

/* ---- the headers the JSON APIs read ------------------------------------------------------ */

static void take_slice(const cq_http_header_t *h, const char **v, size_t *n)
{
    *v = h->value;
    *n = h->value_len;
}

bool cq_http_fields_take(cq_http_fields_t *f, const cq_http_header_t *h)
{
    if (cq_http_name_is(h, "content-length")) {
        if (cq_http_content_length(h->value, h->value_len, &f->cl_seen, &f->content_length) < 0)
            f->bad = true;
    } else if (cq_http_name_is(h, "transfer-encoding")) {
        f->chunked = true;
    } else if (cq_http_name_is(h, "connection")) {
        cq_http_connection(h->value, h->value_len, &f->conn_close, &f->conn_keep);
    } else if (cq_http_name_is(h, "host")) {
        f->bad = f->bad || f->host != NULL;
        take_slice(h, &f->host, &f->host_len);
    } else if (cq_http_name_is(h, "origin")) {
        take_slice(h, &f->origin, &f->origin_len);
    } else if (cq_http_name_is(h, "content-type")) {
        take_slice(h, &f->ctype, &f->ctype_len);
    } else if (cq_http_name_is(h, "authorization")) {
        take_slice(h, &f->auth, &f->auth_len);
    } else {
        return false;
    }
    return true;
}

bool cq_http_fields_keep_alive(const cq_http_fields_t *f, bool http11)
{
    return !f->conn_close && (http11 || f->conn_keep);
}

/* ---- answer heads ------------------------------------------------------------------------ */

const char *cq_http_reason(int status)
{
    switch (status) {
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 421:
        return "Misdirected Request";
    case 426:
        return "Upgrade Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    default:
        return "Service Unavailable";
    }
}

/* Where a head is written: past cap, len keeps counting, so one check at the end tells. */
typedef struct head_out {
    char *p;
    size_t cap, len;
} head_out_t;

__attribute__((format(printf, 2, 3))) static void put(head_out_t *o, const char *fmt, ...)
{
    bool room = o->len < o->cap;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? o->p + o->len : NULL, room ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    o->len += n < 0 ? o->cap : (size_t)n;
}

int cq_http_answer_head(char *buf, size_t cap, const cq_http_answer_t *a)
{
    head_out_t o = {buf, cap, 0};
    put(&o, "HTTP/1.1 %d %s\r\n", a->status, cq_http_reason(a->status));
    if (a->ctype)
        put(&o, "Content-Type: %s\r\n", a->ctype);
    if (!a->no_length)
        put(&o, "Content-Length: %" PRIu64 "\r\n", a->length);
    for (size_t i = 0; i < a->nextra; i++)
        if (a->extra[i])
            put(&o, "%s", a->extra[i]);
    put(&o, "%s\r\n", a->keep_alive ? "" : "Connection: close\r\n");
    return o.len < cap ? (int)o.len : -ENOSPC;
}

/* ---- text in answers ---------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    size_t k = p[0] < 0x80             ? 1
               : (p[0] & 0xe0) == 0xc0 ? 2
               : (p[0] & 0xf0) == 0xe0 ? 3
               : (p[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (!k || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return k;
}

void cq_http_scrub_utf8(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k)
            s[i++] = '?';
        else
            i += k;
    }
}
