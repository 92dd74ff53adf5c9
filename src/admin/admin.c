#include "cq_admin.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

ssize_t cq_admin_parse_head(const char *p, size_t n, char *method, size_t mlen, char *path,
                            size_t plen)
{
    const char *end = NULL;
    for (size_t i = 3; i < n; i++) {
        if (p[i - 3] == '\r' && p[i - 2] == '\n' && p[i - 1] == '\r' && p[i] == '\n') {
            end = p + i + 1;
            break;
        }
    }
    if (!end)
        return n >= CQ_ADMIN_MAX_HEAD ? -1 : 0;
    const char *sp1 = memchr(p, ' ', (size_t)(end - p));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || (size_t)(sp1 - p) >= mlen || (size_t)(sp2 - sp1 - 1) >= plen || sp1 == p ||
        sp2 == sp1 + 1 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return -1;
    memcpy(method, p, (size_t)(sp1 - p));
    method[sp1 - p] = '\0';
    memcpy(path, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    path[sp2 - sp1 - 1] = '\0';
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    return end - p;
}

static int respond(cq_sbuf_t *out, int status, const char *reason, const char *ctype,
                   const char *body, size_t blen)
{
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, reason, ctype, blen);
    if (cq_sbuf_append(out, head, (size_t)n) < 0 || cq_sbuf_append(out, body, blen) < 0)
        return -ENOMEM;
    return 0;
}

int cq_admin_respond(cq_shared_t *sh, const char *method, const char *path, int bad_request,
                     cq_sbuf_t *out)
{
    static const char text[] = "text/plain; charset=utf-8";
    if (bad_request)
        return respond(out, 400, "Bad Request", text, "bad request\n", 12);
    if (strcmp(method, "GET") != 0)
        return respond(out, 405, "Method Not Allowed", text, "only GET\n", 9);
    if (strcmp(path, "/healthz") == 0)
        return respond(out, 200, "OK", text, "ok\n", 3);
    if (strcmp(path, "/metrics") == 0) {
        size_t cap = 64 * 1024;
        char *buf = cq_malloc(cap);
        if (!buf)
            return -ENOMEM;
        size_t n = cq_shared_metrics(sh, buf, cap);
        int r = respond(out, 200, "OK", "text/plain; version=0.0.4", buf, n);
        cq_free(buf);
        return r;
    }
    return respond(out, 404, "Not Found", text, "not found\n", 10);
}
