/* http_parse.c - the bounded HTTP/1.x request-head parser of the HTTP API. See cq_mqhttp.h. */
#include "cq_err.h"
#include "cq_mqhttp.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_vchar(unsigned char c)
{
    return c > 0x20 && c != 0x7f;
}

/* Finds the end of the head (just after CRLF CRLF) in p[0..n); 0 if absent. */
static size_t head_end(const char *p, size_t n)
{
    for (size_t i = 3; i < n; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r')
            return i + 1;
    return 0;
}

static bool token_eq(const char *p, size_t n, const char *word)
{
    return strlen(word) == n && strncasecmp(p, word, n) == 0;
}

/* Parses the request line p[0..n) (without CRLF). */
static int request_line(const char *p, size_t n, cq_mqhttp_req_t *r, bool *http11)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i >= n || p[i] != ' ')
        return CQ_EHEADER;
    r->method = p;
    r->method_len = i++;
    size_t t = i;
    while (i < n && is_vchar((unsigned char)p[i]))
        i++;
    if (i == t || i >= n || p[i] != ' ' || p[t] != '/')
        return CQ_EHEADER;
    r->path = p + t;
    r->path_len = i - t;
    const char *q = memchr(r->path, '?', r->path_len);
    if (q) {
        r->query = q + 1;
        r->query_len = r->path_len - (size_t)(q + 1 - r->path);
        r->path_len = (size_t)(q - r->path);
    }
    i++;
    if (n - i != 8 || strncmp(p + i, "HTTP/1.", 7) != 0 || (p[i + 7] != '0' && p[i + 7] != '1'))
        return CQ_EHEADER;
    *http11 = p[i + 7] == '1';
    return 0;
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

/* Parses one header line p[0..n) (without CRLF). */
static int header_line(const char *p, size_t n, cq_mqhttp_req_t *r, hdr_state_t *hs)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i >= n || p[i] != ':')
        return CQ_EHEADER;
    size_t name_len = i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t e = n;
    while (e > i && (p[e - 1] == ' ' || p[e - 1] == '\t'))
        e--;
    for (size_t k = i; k < e; k++)
        if ((unsigned char)p[k] < 0x20 && p[k] != '\t')
            return CQ_EHEADER;
    const char *v = p + i;
    size_t vn = e - i;
    if (token_eq(p, name_len, "content-length"))
        return content_length(v, vn, r, &hs->cl_seen);
    if (token_eq(p, name_len, "transfer-encoding"))
        r->chunked = true;
    else if (token_eq(p, name_len, "connection"))
        connection_value(v, vn, &hs->close, &hs->keep);
    else if (token_eq(p, name_len, "authorization")) {
        r->auth = v;
        r->auth_len = vn;
    }
    return 0;
}

ssize_t cq_mqhttp_parse(const char *p, size_t n, size_t max_head, cq_mqhttp_req_t *ret)
{
    size_t end = head_end(p, n < max_head ? n : max_head);
    if (!end)
        return n >= max_head ? CQ_EBADLEN : 0;
    cq_mqhttp_req_t r;
    memset(&r, 0, sizeof(r));
    hdr_state_t hs = {false, false, false};
    bool http11 = false;
    const char *line = p, *stop = p + end - 2; /* the final empty line */
    const char *eol = memchr(line, '\r', (size_t)(stop - line) + 1);
    if (!eol || eol[1] != '\n' || request_line(line, (size_t)(eol - line), &r, &http11) < 0)
        return CQ_EHEADER;
    for (line = eol + 2; line < stop; line = eol + 2) {
        eol = memchr(line, '\r', (size_t)(stop - line) + 1);
        if (!eol || eol[1] != '\n' || header_line(line, (size_t)(eol - line), &r, &hs) < 0)
            return CQ_EHEADER;
    }
    r.keep_alive = !hs.close && (http11 || hs.keep);
    *ret = r;
    return (ssize_t)end;
}
