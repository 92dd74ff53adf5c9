/* cq_fieldpath.c - vector at a field path, uint32-keyed map edits (see cq_fieldpath.h).
 *
 * Everything walks the wire once with the merge's field reader; nothing is decoded beyond the
 * fields on the path or the map's keys. */
#include "cq_fieldpath.h"

#include "cq_err.h"
#include "cq_merge.h"
#include "cq_varint.h"

#include <errno.h>
#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };
#define PATH_MAX_DEPTH 16

/* ---- path resolution -------------------------------------------------------------------- */

typedef struct vpath {
    const cq_fielddesc_t *f[PATH_MAX_DEPTH];
    size_t n;
    const cq_fielddesc_t *xyz[3]; /* NULL when the vector type lacks that component */
} vpath_t;

static bool is_real(const cq_fielddesc_t *f)
{
    return f && !f->repeated && (f->pb_type == 1 || f->pb_type == 2); /* double, float */
}

static int resolve(const cq_msgdesc_t *d, const char *path, vpath_t *vp)
{
    memset(vp, 0, sizeof(*vp));
    const char *s = path;
    while (s) { /* an empty element ("", "a.", ".a", "a..b") names nothing */
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        const cq_fielddesc_t *f = len ? cq_msgdesc_field_by_name(d, s, len) : NULL;
        if (!f || f->kind != CQ_FK_MESSAGE || f->repeated || !f->msg || vp->n == PATH_MAX_DEPTH)
            return CQ_EFIELD;
        vp->f[vp->n++] = f;
        d = f->msg;
        s = dot ? dot + 1 : NULL;
    }
    if (!vp->n)
        return CQ_EFIELD;
    static const char *const names[3] = {"x", "y", "z"};
    bool any = false;
    for (int i = 0; i < 3; i++) {
        const cq_fielddesc_t *f = cq_msgdesc_field_by_name(d, names[i], 1);
        vp->xyz[i] = is_real(f) ? f : NULL;
        any |= vp->xyz[i] != NULL;
    }
    return any ? 0 : CQ_EFIELD;
}

int cq_fieldpath_check_vec3(const cq_msgdesc_t *d, const char *path)
{
    vpath_t vp;
    return d && path ? resolve(d, path, &vp) : CQ_EFIELD;
}

/* ---- reading ---------------------------------------------------------------------------- */

static int read_comp(const cq_fielddesc_t *f, const cq__wfield_t *w, double *ret)
{
    if (f->pb_type == 2 && w->wt == WT_I32 && w->pay_len == 4) {
        float v;
        memcpy(&v, w->pay, 4); /* little-endian hosts only, like the rest of chandata */
        *ret = v;
        return 0;
    }
    if (f->pb_type == 1 && w->wt == WT_I64 && w->pay_len == 8) {
        double v;
        memcpy(&v, w->pay, 8);
        *ret = v;
        return 0;
    }
    return CQ_EDECODE;
}

/* Visits every occurrence of the path's level-th field in p[0..n), so that repeated
 * occurrences merge (the last component written wins). */
static int read_level(const vpath_t *vp, size_t level, const uint8_t *p, size_t n, double ret[3],
                      bool *found)
{
    const uint8_t *q = p, *end = p + n;
    while (q < end) {
        cq__wfield_t w;
        if (cq__merge_read_field(&q, end, 0, &w) < 0)
            return CQ_EDECODE;
        if (level == vp->n) {
            for (int i = 0; i < 3; i++)
                if (vp->xyz[i] && w.number == vp->xyz[i]->number &&
                    read_comp(vp->xyz[i], &w, &ret[i]) < 0)
                    return CQ_EDECODE;
            continue;
        }
        if (w.number != vp->f[level]->number)
            continue;
        if (w.wt != WT_LEN)
            return CQ_EDECODE;
        if (level + 1 == vp->n)
            *found = true;
        int r = read_level(vp, level + 1, w.pay, w.pay_len, ret, found);
        if (r < 0)
            return r;
    }
    return 0;
}

int cq_fieldpath_vec3(const cq_msgdesc_t *d, const char *path, const uint8_t *p, size_t n,
                      double ret[3])
{
    ret[0] = ret[1] = ret[2] = 0;
    vpath_t vp;
    int r = d && path ? resolve(d, path, &vp) : CQ_EFIELD;
    if (r < 0)
        return r;
    bool found = false;
    r = read_level(&vp, 0, p, n, ret, &found);
    if (r < 0 || !found) {
        ret[0] = ret[1] = ret[2] = 0;
        return r < 0 ? r : 0;
    }
    return 1;
}

/* ---- maps ------------------------------------------------------------------------------- */

const cq_fielddesc_t *cq_mapops_field(const cq_msgdesc_t *d, const char *field)
{
    if (!d || !field || !*field)
        return NULL;
    const cq_fielddesc_t *f = cq_msgdesc_field_by_name(d, field, strlen(field));
    if (!f || !f->is_map || !f->msg || !f->msg->map_key)
        return NULL;
    return f->msg->map_key->kind == CQ_FK_VARINT ? f : NULL;
}

/* The key and value of one map entry's bytes (last occurrence of each wins). */
static int entry_parse(const uint8_t *p, size_t n, uint64_t *key, const uint8_t **v, size_t *vlen)
{
    const uint8_t *q = p, *end = p + n;
    *key = 0;
    *v = NULL;
    *vlen = 0;
    while (q < end) {
        cq__wfield_t w;
        if (cq__merge_read_field(&q, end, 0, &w) < 0)
            return CQ_EDECODE;
        if (w.number == 1) {
            if (w.wt != WT_VARINT || !cq_varint_get(w.pay, w.end, key))
                return CQ_EDECODE;
        } else if (w.number == 2) {
            if (w.wt != WT_LEN)
                return CQ_EDECODE;
            *v = w.pay;
            *vlen = w.pay_len;
        }
    }
    return 0;
}

static int key_index(const uint32_t *keys, size_t nkeys, uint64_t key)
{
    for (size_t i = 0; i < nkeys; i++)
        if (keys[i] == (uint32_t)key)
            return (int)i;
    return -1;
}

int cq_mapops_take(const cq_fielddesc_t *f, const uint8_t *p, size_t n, const uint32_t *keys,
                   size_t nkeys, cq_sbuf_t *out, cq_sbuf_t *taken, uint64_t *found)
{
    size_t start = out->len;
    const uint8_t *q = p, *end = p + n;
    uint64_t got = 0;
    int r = 0;
    if (nkeys > 64)
        return -EINVAL;
    if (taken)
        for (size_t i = 0; i < nkeys; i++)
            taken[i].len = 0;
    while (q < end) {
        cq__wfield_t w;
        if (cq__merge_read_field(&q, end, 0, &w) < 0) {
            r = CQ_EDECODE;
            break;
        }
        int k = -1;
        if (w.number == f->number) {
            uint64_t key;
            const uint8_t *v;
            size_t vlen;
            if (w.wt != WT_LEN || entry_parse(w.pay, w.pay_len, &key, &v, &vlen) < 0) {
                r = CQ_EDECODE;
                break;
            }
            k = key_index(keys, nkeys, key);
            if (k >= 0) {
                got |= 1ull << k;
                if (taken)
                    taken[k].len = 0;
                if (taken && vlen && (r = cq_sbuf_append(&taken[k], v, vlen)) < 0)
                    break;
            }
        }
        if (k < 0 && (r = cq_sbuf_append(out, w.start, (size_t)(w.end - w.start))) < 0)
            break;
    }
    if (r < 0) {
        out->len = start;
        return r;
    }
    if (found)
        *found = got;
    return 0;
}

int cq_mapops_put(const cq_fielddesc_t *f, uint32_t key, const uint8_t *v, size_t vlen,
                  cq_sbuf_t *out)
{
    size_t start = out->len, off, voff;
    int r = cq__merge_put_tag(out, f->number, WT_LEN);
    if (!r)
        r = cq__merge_begin_len(out, &off);
    if (!r)
        r = cq__merge_put_tag(out, 1, WT_VARINT);
    if (!r)
        r = cq__merge_put_varint(out, key);
    if (!r)
        r = cq__merge_put_tag(out, 2, WT_LEN);
    if (!r)
        r = cq__merge_begin_len(out, &voff);
    if (!r && vlen)
        r = cq_sbuf_append(out, v, vlen);
    if (!r)
        r = cq__merge_end_len(out, voff);
    if (!r)
        r = cq__merge_end_len(out, off);
    if (r < 0)
        out->len = start;
    return r;
}

int cq_fieldpath_set_any(const uint8_t *p, size_t n, uint32_t number, const char *type_url,
                         const uint8_t *v, size_t vlen, cq_sbuf_t *out)
{
    size_t start = out->len, off;
    const uint8_t *q = p, *end = p + n;
    int r = 0;
    while (!r && q < end) {
        cq__wfield_t w;
        if (cq__merge_read_field(&q, end, 0, &w) < 0)
            r = CQ_EDECODE;
        else if (w.number != number)
            r = cq_sbuf_append(out, w.start, (size_t)(w.end - w.start));
    }
    size_t ulen = strlen(type_url);
    if (!r)
        r = cq__merge_put_tag(out, number, WT_LEN);
    if (!r)
        r = cq__merge_begin_len(out, &off);
    if (!r && ulen && !(r = cq__merge_put_tag(out, 1, WT_LEN)) &&
        !(r = cq__merge_put_varint(out, ulen)))
        r = cq_sbuf_append(out, type_url, ulen);
    if (!r && vlen && !(r = cq__merge_put_tag(out, 2, WT_LEN)) &&
        !(r = cq__merge_put_varint(out, vlen)))
        r = cq_sbuf_append(out, v, vlen);
    if (!r)
        r = cq__merge_end_len(out, off);
    if (r < 0)
        out->len = start;
    return r;
}
