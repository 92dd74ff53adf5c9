/* admin.c - the admin endpoints and the registry of metrics sources. Sans I/O: the listener in
 * src/io feeds request heads and writes the responses. The registry takes a mutex because
 * sources come and go on other threads than the listener's (the MQ port starts after the
 * workers); a scrape is rare, so the lock is never on a hot path. */
#include "cq_admin.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_http.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

typedef struct admin_source {
    const char *name;
    cq_admin_metrics_fn fn;
    void *ud;
} admin_source_t;

struct cq_admin {
    pthread_mutex_t lock; /* guards src and n; held while sources render */
    admin_source_t src[CQ_ADMIN_MAX_SOURCES];
    size_t n;
};

/* ---- metrics sources -------------------------------------------------------------------- */

cq_admin_t *cq_admin_new(void)
{
    cq_admin_t *a = cq_calloc(1, sizeof(*a));
    if (a)
        pthread_mutex_init(&a->lock, NULL);
    return a;
}

cq_admin_t *cq_admin_free(cq_admin_t *a)
{
    if (!a)
        return NULL;
    pthread_mutex_destroy(&a->lock);
    cq_free(a);
    return NULL;
}

int cq_admin_add_source(cq_admin_t *a, const char *name, cq_admin_metrics_fn fn, void *ud)
{
    if (!fn)
        return -EINVAL;
    int r = CQ_ELIMIT;
    pthread_mutex_lock(&a->lock);
    if (a->n < CQ_ADMIN_MAX_SOURCES) {
        a->src[a->n++] = (admin_source_t){name, fn, ud};
        r = 0;
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}

void cq_admin_remove_source(cq_admin_t *a, cq_admin_metrics_fn fn, void *ud)
{
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->n; i++) {
        if (a->src[i].fn != fn || a->src[i].ud != ud)
            continue;
        memmove(&a->src[i], &a->src[i + 1], (a->n - i - 1) * sizeof(a->src[0]));
        a->n--;
        break;
    }
    pthread_mutex_unlock(&a->lock);
}

int cq_admin_metrics(cq_admin_t *a, cq_sbuf_t *out)
{
    int r = 0;
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->n && r == 0; i++)
        r = a->src[i].fn(a->src[i].ud, out);
    pthread_mutex_unlock(&a->lock);
    return r;
}

/* ---- requests --------------------------------------------------------------------------- */

/* The admin listener reads 1 KiB at a time and gives up once a read leaves CQ_ADMIN_MAX_HEAD
 * bytes or more without a complete head; a head that the same read completes is taken whole.
 * The parser's bound is set to keep exactly that. Headers are checked, none is stored. */
ssize_t cq_admin_parse_head(const char *p, size_t n, char *method, size_t mlen, char *path,
                            size_t plen)
{
    const cq_http_opts_t o = {.max_head = n > CQ_ADMIN_MAX_HEAD ? n : CQ_ADMIN_MAX_HEAD};
    cq_http_head_t h;
    ssize_t end = cq_http_parse_head(p, n, 0, &o, &h, NULL, 0);
    if (end <= 0)
        return end < 0 ? -1 : 0;
    if (h.method_len >= mlen || h.target_len >= plen)
        return -1;
    memcpy(method, h.method, h.method_len);
    method[h.method_len] = '\0';
    memcpy(path, h.target, h.target_len);
    path[h.target_len] = '\0';
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    return end;
}

static int respond(cq_sbuf_t *out, int status, const char *ctype, const char *body, size_t blen)
{
    char head[256];
    const cq_http_answer_t a = {.status = status, .ctype = ctype, .length = blen};
    int n = cq_http_answer_head(head, sizeof(head), &a);
    if (n < 0)
        return n;
    if (cq_sbuf_append(out, head, (size_t)n) < 0 || cq_sbuf_append(out, body, blen) < 0)
        return -ENOMEM;
    return 0;
}

int cq_admin_respond(cq_admin_t *a, const char *method, const char *path, int bad_request,
                     cq_sbuf_t *out)
{
    static const char text[] = "text/plain; charset=utf-8";
    if (bad_request)
        return respond(out, 400, text, "bad request\n", 12);
    if (strcmp(method, "GET") != 0)
        return respond(out, 405, text, "only GET\n", 9);
    if (strcmp(path, "/healthz") == 0)
        return respond(out, 200, text, "ok\n", 3);
    if (strcmp(path, "/metrics") == 0) {
        cq_sbuf_t body;
        cq_sbuf_init(&body);
        int r = cq_admin_metrics(a, &body);
        if (r == 0)
            r = respond(out, 200, "text/plain; version=0.0.4", (const char *)body.data, body.len);
        cq_sbuf_done(&body);
        return r;
    }
    return respond(out, 404, text, "not found\n", 10);
}
