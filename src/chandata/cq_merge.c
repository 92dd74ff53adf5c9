/* cq_merge.c - schema-driven merge and compaction on wire bytes (see cq_merge.h).
 *
 * One message level is processed in three steps:
 *   1. scan: every field of every input segment (dst, then src; or the payloads of all the
 *      occurrences of a singular sub-message) is recorded as an occurrence, in order;
 *   2. group: a stable counting sort by field index, unknown fields last;
 *   3. emit: each field is written in field-number order from its occurrences (the last one
 *      for scalars, all of them for repeated fields, their payloads as the segments of a
 *      recursive level for singular sub-messages).
 * Sub-message bodies are written in place and their length is inserted afterwards.
 */
#include "cq_merge.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_varint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };

#define MAX_INPUT ((size_t)INT32_MAX)

typedef struct seg {
    const uint8_t *p;
    size_t n;
    uint8_t origin; /* 0: from dst, 1: from src */
} seg_t;

/* One field occurrence: the payload for known fields, the whole field for unknown ones. */
typedef struct occ {
    const uint8_t *p;
    size_t n;
    uint32_t seq; /* position among all occurrences of the level */
    uint32_t fi;  /* index in d->fields; d->n_fields for unknown fields */
    uint8_t wt;
    uint8_t seg; /* origin of the bytes: 0 = dst, 1 = src (inherited by sub-messages) */
} occ_t;

typedef struct level {
    const cq_msgdesc_t *d;
    occ_t *occ; /* after group(): sorted by fi, stable */
    size_t n, cap;
    size_t *start;        /* n_fields + 2 group bounds */
    uint32_t *oneof_cur;  /* per oneof: field index of the member set last, or UINT32_MAX */
    uint32_t *oneof_from; /* per oneof: seq from which that member's occurrences count */
} level_t;

static int compact_segs(const cq_msgdesc_t *d, const seg_t *segs, size_t nsegs, int depth,
                        const cq_merge_opts_t *top, cq_sbuf_t *out);

/* ------------------------------------------------------------------------------------------ */
/* wire helpers */

static int skip_group(const uint8_t **p, const uint8_t *end, uint32_t number, int depth)
{
    if (depth > CQ_MERGE_MAX_DEPTH)
        return CQ_EDECODE;
    for (;;) {
        if (*p >= end)
            return CQ_EDECODE; /* unterminated group */
        cq__wfield_t f;
        const uint8_t *q = *p;
        uint64_t tag;
        size_t k = cq_varint_get(q, end, &tag);
        if (!k)
            return CQ_EDECODE;
        if ((tag & 7) == WT_EGROUP) {
            if ((tag >> 3) != number)
                return CQ_EDECODE;
            *p = q + k;
            return 0;
        }
        int r = cq__merge_read_field(p, end, depth + 1, &f);
        if (r < 0)
            return r;
    }
}

int cq__merge_read_field(const uint8_t **p, const uint8_t *end, int depth, cq__wfield_t *ret)
{
    const uint8_t *q = *p;
    uint64_t tag, v;
    size_t k = cq_varint_get(q, end, &tag);
    if (!k || (tag >> 3) == 0 || (tag >> 3) > 536870911u)
        return CQ_EDECODE;
    ret->start = q;
    ret->number = (uint32_t)(tag >> 3);
    ret->wt = (uint8_t)(tag & 7);
    q += k;
    ret->pay = q;
    switch (ret->wt) {
    case WT_VARINT:
        k = cq_varint_get(q, end, &v);
        if (!k)
            return CQ_EDECODE;
        q += k;
        break;
    case WT_I64:
    case WT_I32: {
        size_t w = ret->wt == WT_I64 ? 8 : 4;
        if ((size_t)(end - q) < w)
            return CQ_EDECODE;
        q += w;
        break;
    }
    case WT_LEN:
        k = cq_varint_get(q, end, &v);
        if (!k || v > (uint64_t)(end - q - (ptrdiff_t)k))
            return CQ_EDECODE;
        ret->pay = q + k;
        q += k + (size_t)v;
        break;
    case WT_SGROUP: {
        int r = skip_group(&q, end, ret->number, depth);
        if (r < 0)
            return r;
        break;
    }
    default:
        return CQ_EDECODE; /* end group without a start, or wire type 6/7 */
    }
    ret->end = q;
    ret->pay_len = (size_t)(q - ret->pay);
    *p = q;
    return 0;
}

bool cq__merge_wt_ok(const cq_fielddesc_t *f, uint8_t wt)
{
    switch (f->kind) {
    case CQ_FK_STRING:
    case CQ_FK_BYTES:
    case CQ_FK_MESSAGE:
        return wt == WT_LEN;
    case CQ_FK_FIXED32:
        return wt == WT_I32 || (f->repeated && wt == WT_LEN);
    case CQ_FK_FIXED64:
        return wt == WT_I64 || (f->repeated && wt == WT_LEN);
    default:
        return wt == WT_VARINT || (f->repeated && wt == WT_LEN);
    }
}

int cq__merge_put_tag(cq_sbuf_t *out, uint32_t number, uint8_t wt)
{
    int r = cq_sbuf_reserve(out, 5);
    if (r < 0)
        return r;
    out->len += cq_varint_put(out->data + out->len, ((uint64_t)number << 3) | wt);
    return 0;
}

int cq__merge_put_varint(cq_sbuf_t *out, uint64_t v)
{
    int r = cq_sbuf_reserve(out, 10);
    if (r < 0)
        return r;
    out->len += cq_varint_put(out->data + out->len, v);
    return 0;
}

int cq__merge_begin_len(cq_sbuf_t *out, size_t *ret_off)
{
    int r = cq_sbuf_reserve(out, 1);
    if (r < 0)
        return r;
    out->data[out->len++] = 0; /* one byte assumed; end_len() makes room for more */
    *ret_off = out->len;
    return 0;
}

int cq__merge_end_len(cq_sbuf_t *out, size_t off)
{
    size_t n = out->len - off, vs = cq_varint_size(n);
    if (vs > 1) {
        int r = cq_sbuf_reserve(out, vs - 1);
        if (r < 0)
            return r;
        memmove(out->data + off + vs - 1, out->data + off, n);
        out->len += vs - 1;
    }
    cq_varint_put(out->data + off - 1, n);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* scalars */

/* Reads one value of f's kind at *p in its unpacked wire form (varint or fixed width). */
static int get_scalar(const cq_fielddesc_t *f, const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    if (f->kind == CQ_FK_FIXED32 || f->kind == CQ_FK_FIXED64) {
        size_t w = f->kind == CQ_FK_FIXED32 ? 4 : 8;
        if ((size_t)(end - *p) < w)
            return CQ_EDECODE;
        uint64_t x = 0;
        for (size_t i = 0; i < w; i++)
            x |= (uint64_t)(*p)[i] << (8 * i);
        *p += w;
        *v = x;
        return 0;
    }
    size_t k = cq_varint_get(*p, end, v);
    if (!k)
        return CQ_EDECODE;
    *p += k;
    return 0;
}

/* The canonical varint for a decoded value, as protobuf parsers interpret it. */
static uint64_t norm_varint(const cq_fielddesc_t *f, uint64_t v)
{
    switch (f->kind) {
    case CQ_FK_BOOL:
        return v != 0;
    case CQ_FK_ZIGZAG32:
        return (uint32_t)v;
    case CQ_FK_ENUM:
        return (uint64_t)(int64_t)(int32_t)(uint32_t)v;
    case CQ_FK_VARINT:
        if (f->bits32)
            return f->is_signed ? (uint64_t)(int64_t)(int32_t)(uint32_t)v : (uint32_t)v;
        return v;
    default:
        return v;
    }
}

static int put_scalar(cq_sbuf_t *out, const cq_fielddesc_t *f, uint64_t v)
{
    if (f->kind != CQ_FK_FIXED32 && f->kind != CQ_FK_FIXED64)
        return cq__merge_put_varint(out, norm_varint(f, v));
    size_t w = f->kind == CQ_FK_FIXED32 ? 4 : 8;
    int r = cq_sbuf_reserve(out, w);
    if (r < 0)
        return r;
    for (size_t i = 0; i < w; i++)
        out->data[out->len++] = (uint8_t)(v >> (8 * i));
    return 0;
}

static uint8_t scalar_wt(const cq_fielddesc_t *f)
{
    return f->kind == CQ_FK_FIXED32 ? WT_I32 : f->kind == CQ_FK_FIXED64 ? WT_I64 : WT_VARINT;
}

/* ------------------------------------------------------------------------------------------ */
/* scan and group */

static void level_done(level_t *lv)
{
    cq_free(lv->occ);
    cq_free(lv->start);
}

static int level_init(level_t *lv, const cq_msgdesc_t *d)
{
    memset(lv, 0, sizeof(*lv));
    lv->d = d;
    size_t nf = d->n_fields + 2, no = d->n_oneofs;
    size_t bytes = nf * sizeof(size_t) + 2 * no * sizeof(uint32_t);
    lv->start = cq_calloc(1, bytes);
    if (!lv->start)
        return -ENOMEM;
    lv->oneof_cur = (uint32_t *)(void *)(lv->start + nf);
    lv->oneof_from = lv->oneof_cur + no;
    for (size_t i = 0; i < no; i++)
        lv->oneof_cur[i] = UINT32_MAX;
    return 0;
}

static int level_push(level_t *lv, const occ_t *o)
{
    if (lv->n == lv->cap) {
        size_t ncap = lv->cap ? lv->cap * 2 : 16;
        occ_t *nv = cq_realloc(lv->occ, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        lv->occ = nv;
        lv->cap = ncap;
    }
    lv->occ[lv->n++] = *o;
    return 0;
}

static int scan_seg(level_t *lv, const seg_t *sg, int depth)
{
    const cq_msgdesc_t *d = lv->d;
    if (!sg->n)
        return 0; /* p may be NULL */
    const uint8_t *p = sg->p, *end = sg->p + sg->n;
    while (p < end) {
        cq__wfield_t w;
        int r = cq__merge_read_field(&p, end, depth, &w);
        if (r < 0)
            return r;
        const cq_fielddesc_t *f = cq_msgdesc_field(d, w.number);
        occ_t o = {w.pay, w.pay_len, (uint32_t)lv->n, (uint32_t)d->n_fields, w.wt, sg->origin};
        if (f && cq__merge_wt_ok(f, w.wt)) {
            o.fi = (uint32_t)(f - d->fields);
            if (f->oneof >= 0 && lv->oneof_cur[f->oneof] != o.fi) {
                lv->oneof_cur[f->oneof] = o.fi;
                lv->oneof_from[f->oneof] = o.seq;
            }
        } else {
            o.p = w.start;
            o.n = (size_t)(w.end - w.start);
        }
        if ((r = level_push(lv, &o)) < 0)
            return r;
    }
    return 0;
}

/* Stable counting sort of the occurrences by field index. */
static int group(level_t *lv)
{
    size_t nf = lv->d->n_fields + 1;
    if (lv->n < 2)
        goto bounds;
    occ_t *sorted = cq_malloc(lv->n * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    for (size_t i = 0; i < lv->n; i++)
        lv->start[lv->occ[i].fi + 1]++;
    for (size_t i = 1; i <= nf; i++)
        lv->start[i] += lv->start[i - 1];
    for (size_t i = 0; i < lv->n; i++)
        sorted[lv->start[lv->occ[i].fi]++] = lv->occ[i];
    cq_free(lv->occ);
    lv->occ = sorted;
    lv->cap = lv->n;
    memset(lv->start, 0, (nf + 1) * sizeof(size_t));
bounds:
    for (size_t i = 0; i < lv->n; i++)
        lv->start[lv->occ[i].fi + 1]++;
    for (size_t i = 1; i <= nf; i++)
        lv->start[i] += lv->start[i - 1];
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* repeated fields */

/* Elements [from, to) of count kept by the top-level list options. */
static void select_range(size_t count, const cq_merge_opts_t *top, size_t *from, size_t *to)
{
    *from = 0;
    *to = count;
    if (!top || !top->list_size_limit || count <= top->list_size_limit)
        return;
    if (top->truncate_top)
        *from = count - top->list_size_limit;
    else
        *to = top->list_size_limit;
}

/* Writes element number idx when it is in [from, to). */
static int put_elem(const cq_fielddesc_t *f, uint64_t v, size_t idx, size_t from, size_t to,
                    cq_sbuf_t *out)
{
    if (idx < from || idx >= to)
        return 0;
    int r = 0;
    if (!f->packed)
        r = cq__merge_put_tag(out, f->number, scalar_wt(f));
    return r < 0 ? r : put_scalar(out, f, v);
}

/* Walks the scalar elements of occurrences o[0..k): counts them (out == NULL) or writes
 * elements [from, to). Validates packed payloads. */
static int walk_scalars(const cq_fielddesc_t *f, const occ_t *o, size_t k, size_t from, size_t to,
                        size_t *count, cq_sbuf_t *out)
{
    size_t idx = 0;
    for (size_t i = 0; i < k; i++) {
        const uint8_t *p = o[i].p, *end = o[i].p + o[i].n;
        bool packed = o[i].wt == WT_LEN;
        for (bool first = true; packed ? p < end : first; first = false) {
            uint64_t v;
            int r = get_scalar(f, &p, end, &v);
            if (r == 0 && out)
                r = put_elem(f, v, idx, from, to, out);
            if (r < 0)
                return r;
            idx++;
        }
    }
    *count = idx;
    return 0;
}

static int emit_rep_scalar(const cq_fielddesc_t *f, const occ_t *o, size_t k,
                           const cq_merge_opts_t *top, cq_sbuf_t *out)
{
    size_t count = 0, from, to, off;
    int r = walk_scalars(f, o, k, 0, 0, &count, NULL);
    if (r < 0 || count == 0)
        return r;
    select_range(count, top, &from, &to);
    if (!f->packed)
        return walk_scalars(f, o, k, from, to, &count, out);
    if ((r = cq__merge_put_tag(out, f->number, WT_LEN)) < 0 ||
        (r = cq__merge_begin_len(out, &off)) < 0 ||
        (r = walk_scalars(f, o, k, from, to, &count, out)) < 0)
        return r;
    return cq__merge_end_len(out, off);
}

/* One LEN field: tag, then either the payload verbatim or its compaction as type sub. */
static int emit_len(const cq_fielddesc_t *f, const cq_msgdesc_t *sub, const seg_t *segs,
                    size_t nsegs, int depth, cq_sbuf_t *out)
{
    size_t off;
    int r = cq__merge_put_tag(out, f->number, WT_LEN);
    if (r < 0 || (r = cq__merge_begin_len(out, &off)) < 0)
        return r;
    if (!sub)
        r = nsegs ? cq_sbuf_append(out, segs[0].p, segs[0].n) : 0;
    else
        r = compact_segs(sub, segs, nsegs, depth + 1, NULL, out);
    if (r < 0)
        return r;
    return cq__merge_end_len(out, off);
}

static int emit_rep_len(const cq_fielddesc_t *f, const occ_t *o, size_t k,
                        const cq_merge_opts_t *top, int depth, cq_sbuf_t *out)
{
    size_t from, to;
    select_range(k, top, &from, &to);
    const cq_msgdesc_t *sub = f->kind == CQ_FK_MESSAGE ? f->msg : NULL;
    for (size_t i = sub ? 0 : from; i < (sub ? k : to); i++) {
        size_t mark = out->len;
        seg_t sg = {o[i].p, o[i].n, o[i].seg};
        int r = emit_len(f, sub, &sg, 1, depth, out);
        if (r < 0)
            return r;
        if (i < from || i >= to)
            out->len = mark; /* dropped by the list limit, but validated */
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* maps */

typedef struct mkey {
    uint64_t ord;     /* numeric key, biased so unsigned order is the key's order */
    const uint8_t *s; /* string key */
    size_t sn;
    size_t idx; /* occurrence index, the tie-breaker that keeps the sort stable */
} mkey_t;

static int cmp_mkey(const void *a, const void *b)
{
    const mkey_t *x = a, *y = b;
    if (x->ord != y->ord)
        return x->ord < y->ord ? -1 : 1;
    size_t n = x->sn < y->sn ? x->sn : y->sn;
    int c = n ? memcmp(x->s, y->s, n) : 0;
    if (c)
        return c;
    if (x->sn != y->sn)
        return x->sn < y->sn ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static uint64_t key_order(const cq_fielddesc_t *kf, uint64_t v)
{
    int64_t sv;
    switch (kf->kind) {
    case CQ_FK_ZIGZAG32:
        v = (uint32_t)v;
        sv = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        break;
    case CQ_FK_ZIGZAG64:
        sv = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        break;
    case CQ_FK_FIXED32:
        sv = kf->is_signed ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        break;
    default:
        v = norm_varint(kf, v);
        sv = (int64_t)v;
        if (!kf->is_signed)
            return v;
        break;
    }
    return (uint64_t)sv ^ (1ULL << 63);
}

/* The key of one map entry (the last well-typed key field; the default when absent). */
static int entry_key(const cq_msgdesc_t *ed, const occ_t *o, int depth, mkey_t *key)
{
    const cq_fielddesc_t *kf = ed->map_key;
    const uint8_t *p = o->p, *end = o->p + o->n;
    uint64_t v = 0;
    key->s = NULL;
    key->sn = 0;
    while (p < end) {
        cq__wfield_t w;
        int r = cq__merge_read_field(&p, end, depth, &w);
        if (r < 0)
            return r;
        if (w.number != kf->number || !cq__merge_wt_ok(kf, w.wt))
            continue; /* the key is singular: only its own wire type is accepted */
        if (w.wt == WT_LEN) {
            key->s = w.pay;
            key->sn = w.pay_len;
        } else {
            const uint8_t *q = w.pay;
            if ((r = get_scalar(kf, &q, w.end, &v)) < 0)
                return r;
        }
    }
    key->ord = (kf->kind == CQ_FK_STRING || kf->kind == CQ_FK_BYTES) ? 0 : key_order(kf, v);
    return 0;
}

/* True when the canonical map entry e[0..n) has a message value whose bool field number
 * `removed` is set (canonical: at most one occurrence of each). */
static bool entry_removed(const uint8_t *e, size_t n, uint32_t removed)
{
    const uint8_t *p = e, *end = e + n;
    cq__wfield_t w;
    while (p < end && cq__merge_read_field(&p, end, 0, &w) == 0) {
        if (w.number != 2 || w.wt != WT_LEN)
            continue;
        const uint8_t *q = w.pay, *qend = w.pay + w.pay_len;
        cq__wfield_t x;
        while (q < qend && cq__merge_read_field(&q, qend, 0, &x) == 0) {
            uint64_t v;
            if (x.number == removed && x.wt == WT_VARINT && cq_varint_get(x.pay, x.end, &v))
                return v != 0;
        }
    }
    return false;
}

static bool same_key(const mkey_t *a, const mkey_t *b)
{
    return a->ord == b->ord && a->sn == b->sn && (!a->sn || !memcmp(a->s, b->s, a->sn));
}

/* Writes the last entry of each key (keys sorted by key, then by position). Replaced entries
 * are compacted too, then dropped, so that every input byte is validated. */
static int emit_map_entries(const cq_fielddesc_t *f, const occ_t *o, const mkey_t *keys, size_t k,
                            int depth, bool removable, cq_sbuf_t *out)
{
    const cq_msgdesc_t *vd = f->msg->map_value->msg;
    uint32_t rm = removable && vd && vd->removed ? vd->removed->number : 0;
    for (size_t i = 0; i < k; i++) {
        size_t mark = out->len;
        seg_t sg = {o[keys[i].idx].p, o[keys[i].idx].n, o[keys[i].idx].seg};
        int r = emit_len(f, f->msg, &sg, 1, depth, out);
        if (r < 0)
            return r;
        const uint8_t *ep = out->data + mark;
        cq__wfield_t w;
        if (i + 1 < k && same_key(&keys[i], &keys[i + 1]))
            out->len = mark; /* a later entry has the same key (this one is validated) */
        else if (rm && cq__merge_read_field(&ep, out->data + out->len, 0, &w) == 0 &&
                 entry_removed(w.pay, w.pay_len, rm))
            out->len = mark;
    }
    return 0;
}

static int emit_map(const cq_fielddesc_t *f, const occ_t *o, size_t k, int depth, bool removable,
                    cq_sbuf_t *out)
{
    if (!k)
        return 0;
    mkey_t *keys = cq_malloc(k * sizeof(*keys));
    if (!keys)
        return -ENOMEM;
    int r = 0;
    for (size_t i = 0; i < k && r == 0; i++) {
        r = entry_key(f->msg, &o[i], depth + 1, &keys[i]);
        keys[i].idx = i;
    }
    if (r == 0) {
        qsort(keys, k, sizeof(*keys), cmp_mkey);
        r = emit_map_entries(f, o, keys, k, depth, removable, out);
    }
    cq_free(keys);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* singular fields */

static int emit_submsg(const cq_fielddesc_t *f, const occ_t *o, size_t k, int depth, cq_sbuf_t *out)
{
    seg_t one = {NULL, 0, 0}, *segs = &one;
    if (k > 1 && !(segs = cq_malloc(k * sizeof(*segs))))
        return -ENOMEM;
    for (size_t i = 0; i < k; i++)
        segs[i] = (seg_t){o[i].p, o[i].n, o[i].seg};
    int r = emit_len(f, f->msg, segs, k, depth, out);
    if (segs != &one)
        cq_free(segs);
    return r;
}

static bool occ_is_zero(const cq_fielddesc_t *f, const occ_t *o)
{
    uint64_t v = 0;
    const uint8_t *p = o->p;
    if (f->kind == CQ_FK_STRING || f->kind == CQ_FK_BYTES)
        return o->n == 0;
    return get_scalar(f, &p, o->p + o->n, &v) == 0 && norm_varint(f, v) == 0;
}

/* The occurrence that decides an implicit-presence scalar, as Merge(decode(dst),
 * decode(src)) does: src's last value unless it is zero, then dst's last value. */
static const occ_t *implicit_winner(const cq_fielddesc_t *f, const occ_t *o, size_t k)
{
    if (!k || o[k - 1].seg == 0 || !occ_is_zero(f, &o[k - 1]))
        return k ? &o[k - 1] : NULL;
    while (k && o[k - 1].seg == 1)
        k--;
    return k ? &o[k - 1] : NULL;
}

/* The last occurrence (or the default when o is NULL: map entries write key and value). */
static int emit_singular(const cq_fielddesc_t *f, const occ_t *o, bool force, cq_sbuf_t *out)
{
    int r;
    if (f->kind == CQ_FK_STRING || f->kind == CQ_FK_BYTES) {
        size_t n = o ? o->n : 0, off;
        if (!n && !f->has_presence && !force)
            return 0;
        if ((r = cq__merge_put_tag(out, f->number, WT_LEN)) < 0 ||
            (r = cq__merge_begin_len(out, &off)) < 0 ||
            (r = cq_sbuf_append(out, o ? o->p : NULL, n)) < 0)
            return r;
        return cq__merge_end_len(out, off);
    }
    uint64_t v = 0;
    if (o) {
        const uint8_t *p = o->p;
        if ((r = get_scalar(f, &p, o->p + o->n, &v)) < 0)
            return r;
    }
    if (!f->has_presence && !force && norm_varint(f, v) == 0)
        return 0;
    if ((r = cq__merge_put_tag(out, f->number, scalar_wt(f))) < 0)
        return r;
    return put_scalar(out, f, v);
}

/* ------------------------------------------------------------------------------------------ */
/* one level */

static int emit_repeated(const cq_fielddesc_t *f, const occ_t *o, size_t k, int depth,
                         const cq_merge_opts_t *top, cq_sbuf_t *out)
{
    if (f->is_map)
        return emit_map(f, o, k, depth, top && top->check_removable_map, out);
    bool len = f->kind == CQ_FK_MESSAGE || f->kind == CQ_FK_STRING || f->kind == CQ_FK_BYTES;
    if (top && top->replace_list) {
        size_t nd = 0, mark = out->len;
        while (nd < k && o[nd].seg == 0) /* dst's occurrences come first */
            nd++;
        int r =
            len ? emit_rep_len(f, o, nd, NULL, depth, out) : emit_rep_scalar(f, o, nd, NULL, out);
        out->len = mark; /* validated, then dropped */
        if (r < 0 || nd == k)
            return r;
        o += nd;
        k -= nd;
    }
    if (len)
        return emit_rep_len(f, o, k, top, depth, out);
    return emit_rep_scalar(f, o, k, top, out);
}

static int emit_field(const level_t *lv, size_t fi, int depth, const cq_merge_opts_t *top,
                      cq_sbuf_t *out)
{
    const cq_msgdesc_t *d = lv->d;
    const cq_fielddesc_t *f = &d->fields[fi];
    size_t k = lv->start[fi + 1] - lv->start[fi];
    const occ_t *o = k ? lv->occ + lv->start[fi] : NULL;
    if (f->repeated)
        return emit_repeated(f, o, k, depth, top, out);
    if (f->oneof >= 0) {
        size_t nd = 0;
        while (nd < k && (lv->oneof_cur[f->oneof] != fi || o[nd].seq < lv->oneof_from[f->oneof]))
            nd++;
        if (nd && f->kind == CQ_FK_MESSAGE) { /* cleared by another member: validate only */
            size_t mark = out->len;
            int r = emit_submsg(f, o, nd, depth, out);
            out->len = mark;
            if (r < 0)
                return r;
        }
        if (nd == k)
            return 0;
        o += nd;
        k -= nd;
    }
    if (!k && !d->map_entry)
        return 0;
    if (f->kind == CQ_FK_MESSAGE)
        return emit_submsg(f, o, k, depth, out);
    if (!f->has_presence && !d->map_entry)
        return emit_singular(f, implicit_winner(f, o, k), false, out);
    return emit_singular(f, k ? &o[k - 1] : NULL, d->map_entry, out);
}

static int emit_level(const level_t *lv, int depth, const cq_merge_opts_t *top, cq_sbuf_t *out)
{
    const cq_msgdesc_t *d = lv->d;
    for (size_t fi = 0; fi < d->n_fields; fi++) {
        int r = emit_field(lv, fi, depth, top, out);
        if (r < 0)
            return r;
    }
    if (d->map_entry)
        return 0; /* protobuf drops unknown fields of map entries */
    for (size_t i = lv->start[d->n_fields]; i < lv->n; i++) {
        int r = cq_sbuf_append(out, lv->occ[i].p, lv->occ[i].n);
        if (r < 0)
            return r;
    }
    return 0;
}

static int compact_segs(const cq_msgdesc_t *d, const seg_t *segs, size_t nsegs, int depth,
                        const cq_merge_opts_t *top, cq_sbuf_t *out)
{
    if (depth > CQ_MERGE_MAX_DEPTH)
        return CQ_EDECODE;
    level_t lv;
    int r = level_init(&lv, d);
    for (size_t i = 0; i < nsegs && r == 0; i++)
        r = scan_seg(&lv, &segs[i], depth);
    if (r == 0)
        r = group(&lv);
    if (r == 0)
        r = emit_level(&lv, depth, top, out);
    level_done(&lv);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* public */

int cq_merge(const cq_msgdesc_t *d, const uint8_t *dst, size_t dlen, const uint8_t *src,
             size_t slen, const cq_merge_opts_t *opts, cq_sbuf_t *out)
{
    if (dlen > MAX_INPUT || slen > MAX_INPUT - dlen)
        return CQ_ETOOBIG;
    seg_t segs[2] = {{dst, dlen, 0}, {src, slen, 1}};
    size_t mark = out->len;
    int r = compact_segs(d, segs, 2, 0, opts, out);
    if (r < 0)
        out->len = mark;
    return r;
}

int cq_compact(const cq_msgdesc_t *d, const uint8_t *p, size_t n, cq_sbuf_t *out)
{
    return cq_merge(d, p, n, NULL, 0, NULL, out);
}
