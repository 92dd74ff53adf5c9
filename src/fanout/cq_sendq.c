/* cq_sendq.c - per-connection send queues of shared records (see cq_sendq.h).
 *
 * Why batches: a flush gathers a connection's queued records under as few packet headers as
 * fit, so one writev (or one KCP send) carries its whole backlog. A batch is one block
 * (headers, iovecs, held references and copied small records) from the queue's pool when the
 * edge gave it one, so forming a batch on every flush does not churn the allocator.
 */
#include "cq_sendq.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_snappy.h"
#include "cq_util.h"
#include "cq_wire.h"

#include <errno.h>
#include <string.h>

#define BATCH_MAX_ENTS  1024
#define BATCH_MAX_BYTES (512u * 1024u)
#define PAD_ROOM        264 /* legacy-tag padding, at most 256 + field overhead */
#define COPY_MAX        512 /* records up to this size are copied, not referenced */

/* One write's worth of output. Small records are copied into scratch (one iovec for a run of
 * them, and their references dropped at once); large records and packets are referenced. */
struct cq_sendq_batch {
    size_t size;        /* bytes allocated for the batch (given back to the pool) */
    int n_iov, cur_iov; /* iovecs, and the first not fully written */
    uint32_t n_ents;    /* references held until the batch is written */
    size_t cost;        /* queued-bytes accounting of every entry taken */
    cq_sendq_ent_t *ents;
    struct iovec *iov;
    uint8_t *scratch; /* headers, pads and copied records */
};

void cq_sendq_init(cq_sendq_t *q, cq_framing_mode_t mode)
{
    memset(q, 0, sizeof(*q));
    q->mode = (uint8_t)mode;
}

void cq_sendq_set_pool(cq_sendq_t *q, cq_pool_t *pool)
{
    q->pool = pool;
}

static void batch_free(cq_sendq_t *q, cq_sendq_batch_t *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; i < b->n_ents; i++)
        cq_buf_unref(b->ents[i].buf);
    cq_pool_put(q->pool, b, b->size);
}

void cq_sendq_done(cq_sendq_t *q)
{
    for (uint32_t i = 0; i < q->count; i++)
        cq_buf_unref(q->ring[(q->head + i) & (q->cap - 1)].buf);
    cq_free(q->ring);
    batch_free(q, q->batch);
    cq_pool_t *pool = q->pool;
    cq_sendq_init(q, (cq_framing_mode_t)q->mode); /* runs = 0 */
    q->pool = pool;
}

static int ring_grow(cq_sendq_t *q)
{
    uint32_t ncap = q->cap ? q->cap * 2 : 8;
    cq_sendq_ent_t *n = cq_malloc(ncap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    for (uint32_t i = 0; i < q->count; i++)
        n[i] = q->ring[(q->head + i) & (q->cap - 1)];
    cq_free(q->ring);
    q->ring = n;
    q->cap = ncap;
    q->head = 0;
    return 0;
}

/* What an entry adds to queued: its bytes, plus a header for records and slices (a slice is
 * charged one header however many records it grew by). */
static size_t ent_cost(const cq_sendq_ent_t *e)
{
    return e->len + (e->kind != CQ_SENDQ_PACKET ? CQ_FRAME_HDR_LEN : 0);
}

static int ring_append(cq_sendq_t *q, cq_sendq_ent_t e)
{
    size_t cost = ent_cost(&e);
    if (q->count == q->cap) {
        int r = ring_grow(q);
        if (r < 0)
            return r;
    }
    q->ring[(q->head + q->count) & (q->cap - 1)] = e;
    q->count++;
    q->queued += cost;
    return 0;
}

int cq_sendq_push_ref(cq_sendq_t *q, cq_buf_t *buf, uint32_t kind, size_t hard_limit)
{
    size_t cost = buf->len + (kind == CQ_SENDQ_RECORD ? CQ_FRAME_HDR_LEN : 0);
    if (hard_limit && q->queued + cost > hard_limit)
        return CQ_ESLOW;
    return ring_append(q, (cq_sendq_ent_t){buf, 0, buf->len, kind, 0});
}

int cq_sendq_push_slice(cq_sendq_t *q, cq_buf_t *buf, uint32_t off, uint32_t len,
                        const cq_buf_t *prev, size_t hard_limit)
{
    cq_sendq_ent_t *t = q->count ? &q->ring[(q->head + q->count - 1) & (q->cap - 1)] : NULL;
    if (t && t->kind == CQ_SENDQ_SLICE && t->buf == buf && t->off + t->len == off &&
        t->len + len <= CQ_SENDQ_SLICE_MAX) {
        if (hard_limit && q->queued + len > hard_limit)
            return CQ_ESLOW;
        t->len += len;
        q->queued += len;
        return CQ_SENDQ_EXTENDED;
    }
    /* t->buf, not prev, is read: prev may be gone, but then no entry refers to it. */
    bool follows = t && t->kind == CQ_SENDQ_SLICE && t->buf == prev && off == 0 &&
                   t->off + t->len == t->buf->len;
    if (!follows && q->runs >= CQ_SENDQ_RUNS)
        return CQ_SENDQ_APART;
    if (hard_limit && q->queued + len + CQ_FRAME_HDR_LEN > hard_limit)
        return CQ_ESLOW;
    int r = ring_append(q, (cq_sendq_ent_t){buf, off, len, CQ_SENDQ_SLICE, !follows});
    if (r < 0)
        return r;
    q->runs += !follows;
    return CQ_SENDQ_ADDED;
}

int cq_sendq_push(cq_sendq_t *q, cq_buf_t *buf, uint32_t kind, size_t hard_limit)
{
    int r = cq_sendq_push_ref(q, cq_buf_ref(buf), kind, hard_limit);
    if (r < 0)
        cq_buf_unref(buf);
    return r;
}

/* A slice is a run of whole records, so it frames like one record. */
static bool is_record(const cq_sendq_ent_t *e)
{
    return e->kind != CQ_SENDQ_PACKET;
}

static bool copied(const cq_sendq_ent_t *e)
{
    return is_record(e) && e->len <= COPY_MAX;
}

/* Sizes the next batch: entries taken, iovecs, held references and scratch bytes (upper
 * bounds). */
static uint32_t batch_plan(const cq_sendq_t *q, int *ret_iov, uint32_t *ret_held,
                           size_t *ret_scratch)
{
    uint32_t n = 0, held = 0, body = 0; /* body: open record run, 0 = none */
    size_t bytes = 0, scratch = 0;
    int iov = 0;
    while (n < q->count && n < BATCH_MAX_ENTS && bytes < BATCH_MAX_BYTES) {
        const cq_sendq_ent_t *e = &q->ring[(q->head + n) & (q->cap - 1)];
        if (e->kind == CQ_SENDQ_PACKET) {
            body = 0;
        } else if (!body || body + e->len > CQ_FRAME_MAX_BODY - PAD_ROOM) {
            iov += 2; /* header + pad slot */
            scratch += CQ_FRAME_HDR_LEN + PAD_ROOM;
            body = 0;
        }
        if (is_record(e))
            body += e->len;
        if (copied(e))
            scratch += e->len;
        else
            held++;
        iov++;
        bytes += e->len;
        n++;
    }
    *ret_iov = iov;
    *ret_held = held;
    *ret_scratch = scratch;
    return n;
}

/* Appends [p, p+n) of scratch, extending the last iovec when it ends right there. */
static void add_scratch(cq_sendq_batch_t *b, uint8_t *p, size_t n)
{
    struct iovec *last = b->n_iov ? &b->iov[b->n_iov - 1] : NULL;
    if (last && (uint8_t *)last->iov_base + last->iov_len == p)
        last->iov_len += n;
    else
        b->iov[b->n_iov++] = (struct iovec){p, n};
}

/* Opens a run of records: its header goes first in scratch (written at close, when the
 * length is known), so a run of copied records is one contiguous iovec with its header. */
static uint8_t *open_run(cq_sendq_batch_t *b, uint8_t **scratch)
{
    uint8_t *h = *scratch;
    *scratch += CQ_FRAME_HDR_LEN;
    b->iov[b->n_iov++] = (struct iovec){h, CQ_FRAME_HDR_LEN};
    return h;
}

/* Closes a run: pads it for legacy peers if needed and writes its header. */
static void close_run(cq_sendq_batch_t *b, uint8_t mode, uint8_t *h, uint32_t body,
                      uint8_t **scratch)
{
    uint32_t pad = mode == CQ_FRAMING_LEGACY ? cq_framing_legacy_pad(body) : 0;
    if (pad) {
        size_t plen = cq_wire_pad(*scratch, pad);
        add_scratch(b, *scratch, plen);
        *scratch += plen;
        body += (uint32_t)plen;
    }
    cq_framing_header(h, body, CQ_CT_NONE, (cq_framing_mode_t)mode);
}

/* Appends one entry's bytes: small records are copied, everything else is referenced. */
static void add_bytes(cq_sendq_batch_t *b, cq_sendq_ent_t e, uint8_t **scratch)
{
    if (!copied(&e)) {
        b->ents[b->n_ents++] = e;
        b->iov[b->n_iov++] = (struct iovec){e.buf->data + e.off, e.len};
        return;
    }
    memcpy(*scratch, e.buf->data + e.off, e.len);
    add_scratch(b, *scratch, e.len);
    *scratch += e.len;
    cq_buf_unref(e.buf);
}

static cq_sendq_batch_t *batch_alloc(cq_pool_t *pool, uint32_t held, int niov, size_t nscratch)
{
    size_t sz = sizeof(cq_sendq_batch_t) + held * sizeof(cq_sendq_ent_t) +
                (size_t)niov * sizeof(struct iovec) + nscratch;
    cq_sendq_batch_t *b = cq_pool_get(pool, sz);
    if (!b)
        return NULL;
    b->size = sz;
    b->ents = (cq_sendq_ent_t *)(b + 1);
    b->iov = (struct iovec *)(b->ents + held);
    b->scratch = (uint8_t *)(b->iov + niov);
    b->n_iov = b->cur_iov = 0;
    b->n_ents = 0;
    b->cost = 0;
    return b;
}

static int batch_form(cq_sendq_t *q)
{
    int niov;
    uint32_t held;
    size_t nscratch;
    uint32_t n = batch_plan(q, &niov, &held, &nscratch);
    cq_sendq_batch_t *b = batch_alloc(q->pool, held, niov, nscratch);
    if (!b)
        return -ENOMEM;
    uint8_t *scratch = b->scratch;
    uint8_t *hdr = NULL; /* header of the open run of records */
    uint32_t body = 0;
    for (uint32_t i = 0; i < n; i++) {
        cq_sendq_ent_t e = q->ring[(q->head + i) & (q->cap - 1)];
        b->cost += ent_cost(&e);
        q->runs -= e.run;
        bool rec = is_record(&e);
        if (hdr && (!rec || body + e.len > CQ_FRAME_MAX_BODY - PAD_ROOM)) {
            close_run(b, q->mode, hdr, body, &scratch);
            hdr = NULL;
        }
        if (rec && !hdr) {
            hdr = open_run(b, &scratch);
            body = 0;
        }
        if (rec)
            body += e.len;
        add_bytes(b, e, &scratch);
    }
    if (hdr)
        close_run(b, q->mode, hdr, body, &scratch);
    q->head = (q->head + n) & (q->cap - 1);
    q->count -= n;
    q->batch = b;
    return 0;
}

void cq_sendq_hold(cq_sendq_t *q, bool on)
{
    q->held = on;
}

int cq_sendq_prepare(cq_sendq_t *q, const struct iovec **ret_iov, int *ret_n)
{
    if (!q->batch && q->count && !q->held) {
        int r = batch_form(q);
        if (r < 0)
            return r;
    }
    if (!q->batch) {
        *ret_iov = NULL;
        *ret_n = 0;
        return 0;
    }
    *ret_iov = q->batch->iov + q->batch->cur_iov;
    *ret_n = q->batch->n_iov - q->batch->cur_iov;
    return 0;
}

bool cq_sendq_written(cq_sendq_t *q, size_t n)
{
    cq_sendq_batch_t *b = q->batch;
    if (!b)
        return true;
    while (n && b->cur_iov < b->n_iov) {
        struct iovec *v = &b->iov[b->cur_iov];
        size_t k = CQ_MIN(n, v->iov_len);
        v->iov_base = (uint8_t *)v->iov_base + k;
        v->iov_len -= k;
        n -= k;
        if (v->iov_len == 0)
            b->cur_iov++;
    }
    if (b->cur_iov < b->n_iov)
        return false;
    q->queued = q->queued > b->cost ? q->queued - b->cost : 0;
    batch_free(q, b);
    q->batch = NULL;
    return true;
}

int cq_sendq_check_soft(cq_sendq_t *q, size_t soft_limit, uint64_t soft_ms, uint64_t now_ms)
{
    if (!soft_limit || q->queued <= soft_limit) {
        q->soft_since_ms = 0;
        return 0;
    }
    if (!q->soft_since_ms) {
        q->soft_since_ms = now_ms ? now_ms : 1;
        return 0;
    }
    return now_ms - q->soft_since_ms >= soft_ms ? CQ_ESLOW : 0;
}

cq_buf_t *cq_sendq_compress_record(const cq_buf_t *record, cq_framing_mode_t mode)
{
    size_t max = cq_snappy_max_compressed(record->len);
    cq_buf_t *p = cq_buf_new(CQ_FRAME_HDR_LEN + CQ_MAX(max, (size_t)record->len) + PAD_ROOM);
    if (!p)
        return NULL;
    size_t clen = 0;
    uint8_t *body = p->data + CQ_FRAME_HDR_LEN;
    if (cq_snappy_compress(record->data, record->len, body, &clen) == 0 &&
        clen <= CQ_FRAME_MAX_BODY &&
        (mode != CQ_FRAMING_LEGACY || !cq_framing_legacy_pad((uint32_t)clen))) {
        cq_framing_header(p->data, (uint32_t)clen, CQ_CT_SNAPPY, mode);
        p->len = (uint32_t)(CQ_FRAME_HDR_LEN + clen);
        return p;
    }
    /* Plain packet: the compressed body would not fit (peers read byte 4 per packet). */
    memcpy(body, record->data, record->len);
    uint32_t len = record->len;
    if (mode == CQ_FRAMING_LEGACY && cq_framing_legacy_pad(len))
        len += (uint32_t)cq_wire_pad(body + len, cq_framing_legacy_pad(len));
    cq_framing_header(p->data, len, CQ_CT_NONE, mode);
    p->len = CQ_FRAME_HDR_LEN + len;
    return p;
}
