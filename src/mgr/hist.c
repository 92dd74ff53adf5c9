/* hist.c - the console's charts: a ring of sample times and, per series, a ring of values on
 * the same slots (NaN: a gap). See hist.h. */
#include "hist.h"

#include "cq_alloc.h"
#include "cq_smap.h"

#include <errno.h>
#include <math.h>
#include <string.h>

typedef struct series {
    char *key;     /* owned; the map holds this pointer */
    double *v;     /* points values, on the rounds' slots */
    uint32_t gaps; /* rounds since its last value */
} series_t;

struct mgr_hist {
    uint32_t points, series_max;
    uint64_t *t;  /* points round times (ms) */
    uint32_t n;   /* rounds in the window */
    uint32_t cur; /* the open round's slot */
    bool open;
    cq_smap_t by_key; /* key -> series_t */
    uint64_t refused;
};

mgr_hist_t *cq__mgr_hist_new(uint32_t points, uint32_t series_max)
{
    mgr_hist_t *h = points >= 2 ? cq_calloc(1, sizeof(*h)) : NULL;
    if (!h)
        return NULL;
    h->points = points;
    h->series_max = series_max;
    if (!(h->t = cq_calloc(points, sizeof(*h->t)))) {
        cq_free(h);
        return NULL;
    }
    cq_smap_init(&h->by_key, false);
    return h;
}

static void series_free(series_t *s)
{
    cq_free(s->key);
    cq_free(s->v);
    cq_free(s);
}

void cq__mgr_hist_free(mgr_hist_t *h)
{
    if (!h)
        return;
    void *v;
    for (uint32_t i = 0; cq_smap_next(&h->by_key, &i, NULL, &v);)
        series_free(v);
    cq_smap_done(&h->by_key);
    cq_free(h->t);
    cq_free(h);
}

/* Forgets the series that had only gaps for a whole window. */
static void forget_idle(mgr_hist_t *h)
{
    const char *k;
    void *v;
    for (uint32_t i = 0; cq_smap_next(&h->by_key, &i, &k, &v);) {
        series_t *s = v;
        if (s->gaps < h->points)
            continue;
        cq_smap_del(&h->by_key, s->key);
        series_free(s);
        i = 0; /* the map changed */
    }
}

void cq__mgr_hist_begin(mgr_hist_t *h, uint64_t t_ms)
{
    h->cur = h->n ? (h->cur + 1) % h->points : 0;
    if (h->n < h->points)
        h->n++;
    h->t[h->cur] = t_ms;
    h->open = true;
    void *v;
    for (uint32_t i = 0; cq_smap_next(&h->by_key, &i, NULL, &v);) {
        series_t *s = v;
        s->v[h->cur] = NAN;
        s->gaps++;
    }
    forget_idle(h);
}

static series_t *series_new(mgr_hist_t *h, const char *key)
{
    series_t *s = cq_calloc(1, sizeof(*s));
    if (!s || !(s->key = cq_strdup(key)) || !(s->v = cq_malloc(h->points * sizeof(*s->v))) ||
        cq_smap_put(&h->by_key, s->key, s) < 0) {
        if (s)
            series_free(s);
        return NULL;
    }
    for (uint32_t i = 0; i < h->points; i++)
        s->v[i] = NAN;
    return s;
}

int cq__mgr_hist_put(mgr_hist_t *h, const char *key, double v)
{
    size_t len = key ? strlen(key) : 0;
    if (!h->open || len == 0 || len > CQ_MGR_HIST_KEY_MAX)
        return -EINVAL;
    series_t *s = cq_smap_get(&h->by_key, key);
    if (!s && cq_smap_count(&h->by_key) >= h->series_max) {
        h->refused++;
        return -ENOSPC;
    }
    if (!s && !(s = series_new(h, key)))
        return -ENOMEM;
    s->v[h->cur] = v;
    s->gaps = 0;
    return 0;
}

/* The window's slot of its i-th round, oldest first. */
static uint32_t slot(const mgr_hist_t *h, uint32_t i)
{
    return (h->cur + h->points - (h->n - 1) + i) % h->points;
}

static json_t *values_json(const mgr_hist_t *h, const series_t *s)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < h->n; i++) {
        double x = s->v[slot(h, i)];
        if (json_array_append_new(a, isnan(x) ? json_null() : json_real(x)) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

json_t *cq__mgr_hist_json(const mgr_hist_t *h, const char *prefix)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    json_t *o = json_object(), *t = json_array(), *ser = json_object();
    bool ok = o && t && ser;
    for (uint32_t i = 0; ok && i < h->n; i++)
        ok = json_array_append_new(t, json_integer((json_int_t)h->t[slot(h, i)])) == 0;
    const char *k;
    void *v;
    for (uint32_t i = 0; ok && cq_smap_next(&h->by_key, &i, &k, &v);) {
        if (plen && strncmp(k, prefix, plen) != 0)
            continue;
        json_t *a = values_json(h, v);
        ok = a && json_object_set_new(ser, k, a) == 0;
    }
    if (ok) { /* _set_new takes the value, also when it fails */
        ok = json_object_set_new(o, "t", t) == 0;
        t = NULL;
    }
    if (ok) {
        ok = json_object_set_new(o, "series", ser) == 0;
        ser = NULL;
    }
    json_decref(t);
    json_decref(ser);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

size_t cq__mgr_hist_count(const mgr_hist_t *h)
{
    return cq_smap_count(&h->by_key);
}

uint64_t cq__mgr_hist_refused(const mgr_hist_t *h)
{
    return h->refused;
}
