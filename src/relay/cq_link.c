/* cq_link.c - the relay link's packets and sequencing. See cq_link.h. */
#include "cq_link.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

#define DEF_HOLD_BYTES (4u << 20)
#define DEF_NACK_MS    50u
#define DEF_NACK_TRIES 5u

/* ---- packet format ---------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static bool node_ok(uint16_t n)
{
    return n >= 1 && n <= CQ_LINK_MAX_NODE;
}

static void put_hdr(uint8_t *p, const cq_link_hdr_t *h)
{
    memcpy(p, "CQL1", 4);
    put16(p + 4, h->src);
    put16(p + 6, h->dst);
    put32(p + 8, h->epoch);
    put64(p + 12, h->seq);
    put16(p + 20, h->flags);
    put16(p + 22, h->n_rec);
    put32(p + 24, h->len);
}

int cq_link_parse(const uint8_t *p, size_t n, cq_link_hdr_t *h)
{
    if (n < CQ_LINK_HDR_LEN || n > CQ_LINK_MAX_PACKET || memcmp(p, "CQL1", 4) != 0)
        return CQ_ELINK;
    *h = (cq_link_hdr_t){get16(p + 4),  get16(p + 6),  get32(p + 8), get64(p + 12),
                         get16(p + 20), get16(p + 22), get32(p + 24)};
    bool ctrl = h->flags & CQ_LINK_F_CTRL;
    if (!node_ok(h->src) || !node_ok(h->dst) || h->src == h->dst || !h->epoch ||
        (h->flags & ~(CQ_LINK_F_CTRL | CQ_LINK_F_RETX)) || h->len != n - CQ_LINK_HDR_LEN ||
        h->n_rec == 0 || (ctrl ? h->seq != 0 || h->n_rec != 1 : h->seq == 0))
        return CQ_ELINK;
    /* the records fill the body exactly */
    size_t off = CQ_LINK_HDR_LEN;
    for (uint32_t i = 0; i < h->n_rec; i++) {
        if (n - off < CQ_LINK_REC_HDR)
            return CQ_ELINK;
        uint32_t len = get32(p + off + 1);
        off += CQ_LINK_REC_HDR;
        if (len > n - off || (ctrl && len != 16))
            return CQ_ELINK;
        off += len;
    }
    return off == n ? 0 : CQ_ELINK;
}

bool cq_link_next(const uint8_t *p, const cq_link_hdr_t *h, uint32_t *it, cq_link_rec_t *rec)
{
    size_t end = CQ_LINK_HDR_LEN + (size_t)h->len;
    size_t off = CQ_LINK_HDR_LEN + *it;
    if (off + CQ_LINK_REC_HDR > end)
        return false;
    rec->kind = p[off];
    rec->len = get32(p + off + 1);
    rec->body = p + off + CQ_LINK_REC_HDR;
    *it += CQ_LINK_REC_HDR + rec->len;
    return true;
}

/* An owned packet: header h (len and n_rec from recs) and the records. */
static cq_buf_t *build(cq_link_hdr_t h, const cq_link_rec_t *recs, size_t n)
{
    size_t body = 0;
    for (size_t i = 0; i < n; i++)
        body += CQ_LINK_REC_HDR + (size_t)recs[i].len;
    if (n > UINT16_MAX || body > CQ_LINK_MAX_PACKET - CQ_LINK_HDR_LEN)
        return NULL;
    cq_buf_t *b = cq_buf_new(CQ_LINK_HDR_LEN + body);
    if (!b)
        return NULL;
    h.n_rec = (uint16_t)n;
    h.len = (uint32_t)body;
    put_hdr(b->data, &h);
    size_t off = CQ_LINK_HDR_LEN;
    for (size_t i = 0; i < n; i++) {
        b->data[off] = recs[i].kind;
        put32(b->data + off + 1, recs[i].len);
        if (recs[i].len)
            memcpy(b->data + off + CQ_LINK_REC_HDR, recs[i].body, recs[i].len);
        off += CQ_LINK_REC_HDR + recs[i].len;
    }
    b->len = (uint32_t)off;
    return b;
}

cq_buf_t *cq_link_ctrl(uint16_t src, uint16_t dst, uint32_t epoch, int kind, uint64_t a, uint64_t b)
{
    uint8_t v[16];
    put64(v, a);
    put64(v + 8, b);
    cq_link_rec_t r = {(uint8_t)kind, sizeof(v), v};
    return build((cq_link_hdr_t){src, dst, epoch, 0, CQ_LINK_F_CTRL, 0, 0}, &r, 1);
}

/* ---- sender ----------------------------------------------------------------------------- */

/* The last packets sent, a ring indexed by seq: kept[(seq) & (cap - 1)] for seq in
 * [last - count + 1, last]. */
struct cq_link_tx {
    uint16_t self, peer;
    uint32_t epoch;
    uint64_t last;
    cq_buf_t **kept;
    uint32_t cap, count;
    size_t kept_bytes, keep_bytes;
    cq_link_tx_stats_t st;
};

cq_link_tx_t *cq_link_tx_new(uint16_t self, uint16_t peer, uint32_t epoch, size_t keep_bytes)
{
    if (!node_ok(self) || !node_ok(peer) || self == peer || !epoch)
        return NULL;
    cq_link_tx_t *tx = cq_calloc(1, sizeof(*tx));
    if (!tx)
        return NULL;
    *tx = (cq_link_tx_t){.self = self, .peer = peer, .epoch = epoch, .keep_bytes = keep_bytes};
    return tx;
}

static cq_buf_t **slot(const cq_link_tx_t *tx, uint64_t seq)
{
    return &tx->kept[seq & (tx->cap - 1)];
}

static void drop_oldest(cq_link_tx_t *tx)
{
    cq_buf_t **s = slot(tx, tx->last - tx->count + 1);
    tx->kept_bytes -= (*s)->len;
    cq_buf_unref(*s);
    *s = NULL;
    tx->count--;
}

cq_link_tx_t *cq_link_tx_free(cq_link_tx_t *tx)
{
    if (!tx)
        return NULL;
    while (tx->count)
        drop_oldest(tx);
    cq_free(tx->kept);
    cq_free(tx);
    return NULL;
}

static int grow(cq_link_tx_t *tx)
{
    uint32_t cap = tx->cap ? tx->cap * 2 : 64;
    cq_buf_t **k = cq_calloc(cap, sizeof(*k));
    if (!k)
        return -ENOMEM;
    for (uint64_t s = tx->last - tx->count + 1; s <= tx->last && tx->count; s++)
        k[s & (cap - 1)] = *slot(tx, s);
    cq_free(tx->kept);
    tx->kept = k;
    tx->cap = cap;
    return 0;
}

int cq_link_tx_pack(cq_link_tx_t *tx, const cq_link_rec_t *recs, size_t n, cq_buf_t **ret)
{
    *ret = NULL;
    if (!n)
        return -EINVAL;
    size_t body = 0;
    for (size_t i = 0; i < n; i++)
        body += CQ_LINK_REC_HDR + (size_t)recs[i].len;
    if (n > UINT16_MAX || body > CQ_LINK_MAX_PACKET - CQ_LINK_HDR_LEN)
        return -EINVAL;
    if (tx->count == tx->cap && grow(tx) < 0)
        return -ENOMEM;
    cq_buf_t *b =
        build((cq_link_hdr_t){tx->self, tx->peer, tx->epoch, tx->last + 1, 0, 0, 0}, recs, n);
    if (!b)
        return -ENOMEM;
    tx->last++;
    tx->count++;
    *slot(tx, tx->last) = cq_buf_ref(b);
    tx->kept_bytes += b->len;
    /* the newest is always kept, so a NACK for it can be answered */
    while (tx->count > 1 && tx->kept_bytes > tx->keep_bytes)
        drop_oldest(tx);
    tx->st.packets++;
    tx->st.bytes += b->len;
    *ret = b;
    return 0;
}

/* A retransmission: the kept packet with CQ_LINK_F_RETX set, copied (the original is shared
 * with the publish that may still hold it). */
static cq_buf_t *retx_copy(const cq_buf_t *orig)
{
    cq_buf_t *b = cq_buf_from(orig->data, orig->len);
    if (b)
        put16(b->data + 20, (uint16_t)(get16(b->data + 20) | CQ_LINK_F_RETX));
    return b;
}

int cq_link_tx_nack(cq_link_tx_t *tx, uint64_t from, uint64_t to, cq_buf_t **ret, size_t max,
                    cq_buf_t **gone)
{
    *gone = NULL;
    uint64_t oldest = tx->last - tx->count + 1;
    if (to > tx->last)
        to = tx->last;
    if (!tx->count || from < oldest || from > to) {
        tx->st.gone++;
        *gone = cq_link_ctrl(tx->self, tx->peer, tx->epoch, CQ_LINK_CTRL_GONE, from,
                             tx->count ? oldest : tx->last + 1);
        return 0;
    }
    size_t k = 0;
    for (uint64_t s = from; s <= to && k < max; s++) {
        cq_buf_t *b = retx_copy(*slot(tx, s));
        if (!b)
            break; /* out of memory: the peer's next NACK asks again */
        ret[k++] = b;
    }
    tx->st.retransmits += k;
    return (int)k;
}

uint64_t cq_link_tx_last_seq(const cq_link_tx_t *tx)
{
    return tx->last;
}

const cq_link_tx_stats_t *cq_link_tx_stats(const cq_link_tx_t *tx)
{
    return &tx->st;
}

/* ---- receiver --------------------------------------------------------------------------- */

typedef struct held {
    uint64_t seq;
    cq_buf_t *buf;
} held_t;

struct cq_link_rx {
    uint16_t self, peer;
    cq_link_rx_cfg_t cfg;
    uint32_t epoch; /* the stream's; 0 before the first packet */
    uint64_t next;  /* the next seq to deliver */
    bool restart;   /* after a RESET: the next packet starts the stream */
    held_t *hold;   /* packets behind a gap, by seq */
    uint32_t nhold, caphold;
    size_t hold_bytes;
    uint64_t announced; /* the last seq the peer said it sent (HEAD), of this epoch */
    uint64_t nack_due;  /* UINT64_MAX: no gap */
    uint32_t tries;
    cq_link_ev_t *evs; /* queued events (their bufs referenced) */
    uint32_t nev, capev, head;
    cq_buf_t *popped; /* the last popped event's buffer, kept until the next call */
    cq_link_rx_stats_t st;
};

cq_link_rx_t *cq_link_rx_new(uint16_t self, uint16_t peer, const cq_link_rx_cfg_t *cfg)
{
    if (!node_ok(self) || !node_ok(peer) || self == peer)
        return NULL;
    cq_link_rx_t *rx = cq_calloc(1, sizeof(*rx));
    if (!rx)
        return NULL;
    rx->self = self;
    rx->peer = peer;
    rx->cfg = cfg ? *cfg : (cq_link_rx_cfg_t){0};
    if (!rx->cfg.hold_bytes)
        rx->cfg.hold_bytes = DEF_HOLD_BYTES;
    if (!rx->cfg.nack_ms)
        rx->cfg.nack_ms = DEF_NACK_MS;
    if (!rx->cfg.nack_tries)
        rx->cfg.nack_tries = DEF_NACK_TRIES;
    rx->nack_due = UINT64_MAX;
    return rx;
}

static void release_popped(cq_link_rx_t *rx)
{
    cq_buf_unref(rx->popped);
    rx->popped = NULL;
    if (rx->head == rx->nev)
        rx->head = rx->nev = 0;
}

static void drop_hold(cq_link_rx_t *rx)
{
    for (uint32_t i = 0; i < rx->nhold; i++)
        cq_buf_unref(rx->hold[i].buf);
    rx->nhold = 0;
    rx->hold_bytes = 0;
}

cq_link_rx_t *cq_link_rx_free(cq_link_rx_t *rx)
{
    if (!rx)
        return NULL;
    release_popped(rx);
    for (uint32_t i = rx->head; i < rx->nev; i++)
        cq_buf_unref(rx->evs[i].buf);
    drop_hold(rx);
    cq_free(rx->hold);
    cq_free(rx->evs);
    cq_free(rx);
    return NULL;
}

/* Queues ev, taking a reference on its buffer. A full queue that cannot grow loses the event;
 * the only events that can be lost that way are under out of memory, and the rx then resets
 * the stream (see push's callers). Returns 0 or -ENOMEM. */
static int push(cq_link_rx_t *rx, cq_link_ev_t ev)
{
    if (cq_grow(&rx->evs, &rx->capev, rx->nev, sizeof(*rx->evs), 16) < 0)
        return -ENOMEM;
    if (ev.buf)
        cq_buf_ref(ev.buf);
    rx->evs[rx->nev++] = ev;
    return 0;
}

static void drop_ev(cq_link_rx_t *rx, cq_link_why_t why)
{
    rx->st.dropped++;
    (void)push(rx, (cq_link_ev_t){.kind = CQ_LINK_EV_DROP, .why = why});
}

/* The last seq the open gap reaches: the last held packet or the peer's HEAD; next - 1 when
 * there is no gap. */
static uint64_t gap_top(const cq_link_rx_t *rx)
{
    uint64_t top = rx->nhold ? rx->hold[rx->nhold - 1].seq : rx->next - 1;
    return CQ_MAX(top, rx->announced);
}

/* The stream broke: everything from next to the gap's top is lost, held packets included; the
 * next packet restarts it. */
static void reset(cq_link_rx_t *rx, cq_link_why_t why)
{
    uint64_t top = gap_top(rx);
    uint64_t lost = top >= rx->next ? top - rx->next + 1 : 0;
    rx->announced = 0;
    drop_hold(rx);
    rx->st.resets++;
    rx->st.lost += lost;
    rx->restart = true;
    rx->nack_due = UINT64_MAX;
    rx->tries = 0;
    (void)push(rx, (cq_link_ev_t){.kind = CQ_LINK_EV_RESET, .why = why, .a = lost});
}

static int deliver(cq_link_rx_t *rx, cq_buf_t *b)
{
    cq_link_hdr_t h;
    (void)cq_link_parse(b->data, b->len, &h); /* accepted before it was kept */
    int r = push(rx, (cq_link_ev_t){.kind = CQ_LINK_EV_DELIVER, .hdr = h, .buf = b});
    if (r == 0) {
        rx->next++;
        rx->st.delivered++;
    }
    return r;
}

static void nack(cq_link_rx_t *rx, uint64_t now)
{
    rx->st.nacks++;
    rx->tries++;
    rx->nack_due = now + rx->cfg.nack_ms;
    uint64_t b = rx->nhold ? rx->hold[0].seq - 1 : rx->announced; /* a HEAD's tail gap: up to it */
    (void)push(rx, (cq_link_ev_t){.kind = CQ_LINK_EV_NACK, .a = rx->next, .b = b});
}

/* Delivers what the hold has in order from next; a gap still open keeps its NACK clock. */
static void drain_hold(cq_link_rx_t *rx)
{
    uint32_t k = 0;
    while (k < rx->nhold && rx->hold[k].seq == rx->next) {
        if (deliver(rx, rx->hold[k].buf) < 0)
            break;
        rx->hold_bytes -= rx->hold[k].buf->len;
        cq_buf_unref(rx->hold[k].buf);
        k++;
    }
    if (k) /* hold is NULL until the first gap */
        memmove(rx->hold, rx->hold + k, (rx->nhold - k) * sizeof(*rx->hold));
    rx->nhold -= k;
    if (!rx->nhold && rx->announced < rx->next && rx->nack_due != UINT64_MAX) {
        rx->st.recovered++;
        rx->nack_due = UINT64_MAX;
        rx->tries = 0;
    }
}

/* Holds b (seq above next); 0, or the packet is refused (duplicate) or the hold overflows. */
static void hold(cq_link_rx_t *rx, cq_buf_t *b, uint64_t seq, uint64_t now)
{
    uint32_t i = rx->nhold;
    while (i > 0 && rx->hold[i - 1].seq > seq)
        i--;
    if (i > 0 && rx->hold[i - 1].seq == seq) {
        drop_ev(rx, CQ_LINK_WHY_OLD);
        return;
    }
    if (cq_grow(&rx->hold, &rx->caphold, rx->nhold, sizeof(*rx->hold), 16) < 0) {
        reset(rx, CQ_LINK_WHY_HOLD);
        return;
    }
    memmove(rx->hold + i + 1, rx->hold + i, (rx->nhold - i) * sizeof(*rx->hold));
    rx->hold[i] = (held_t){seq, cq_buf_ref(b)};
    rx->nhold++;
    rx->hold_bytes += b->len;
    if (rx->hold_bytes > rx->cfg.hold_bytes) {
        reset(rx, CQ_LINK_WHY_HOLD);
        return;
    }
    if (rx->nack_due == UINT64_MAX) {
        rx->st.gaps++;
        rx->tries = 0;
        nack(rx, now);
    }
}

/* HEAD: the peer's sender last sent seq a. A tail packet lost with nothing after it shows no
 * gap to the receiver; the HEAD the sender repeats while idle does. A HEAD of a stream this
 * receiver has not seen a packet of (lost from its first one) starts it at 1. After a RESET the
 * next data packet restarts the stream, so a HEAD then says nothing. */
static void on_head(cq_link_rx_t *rx, const cq_link_hdr_t *h, uint64_t a, uint64_t now)
{
    if (h->epoch != rx->epoch) {
        if (h->epoch < rx->epoch) {
            drop_ev(rx, CQ_LINK_WHY_STALE);
            return;
        }
        if (rx->epoch)
            reset(rx, CQ_LINK_WHY_EPOCH);
        rx->epoch = h->epoch;
        rx->next = 1;
        rx->restart = false;
    }
    if (rx->restart || a < rx->next || a <= rx->announced) {
        rx->announced = CQ_MAX(rx->announced, a);
        return;
    }
    rx->announced = a;
    if (rx->nack_due == UINT64_MAX) {
        rx->st.gaps++;
        rx->tries = 0;
        nack(rx, now);
    }
}

static void on_ctrl(cq_link_rx_t *rx, const cq_buf_t *b, const cq_link_hdr_t *h, uint64_t now)
{
    cq_link_rec_t r;
    uint32_t it = 0;
    (void)cq_link_next(b->data, h, &it, &r);
    uint64_t a = get64(r.body), v = get64(r.body + 8);
    if (r.kind == CQ_LINK_CTRL_GONE) {
        /* only when the sender no longer holds the next packet of a gap this stream has open
         * (v: the oldest it keeps); a late GONE for a gap since recovered is stale */
        (void)a;
        if (h->epoch == rx->epoch && rx->nhold && v > rx->next)
            reset(rx, CQ_LINK_WHY_GONE);
        else
            drop_ev(rx, CQ_LINK_WHY_OLD);
        return;
    }
    if (r.kind == CQ_LINK_CTRL_HEAD) {
        on_head(rx, h, a, now);
        return;
    }
    if (r.kind != CQ_LINK_CTRL_NACK) {
        drop_ev(rx, CQ_LINK_WHY_MALFORMED);
        return;
    }
    (void)push(rx,
               (cq_link_ev_t){.kind = CQ_LINK_EV_CTRL, .hdr = *h, .ctrl = r.kind, .a = a, .b = v});
}

int cq_link_rx_input(cq_link_rx_t *rx, cq_buf_t *pkt, uint64_t now_ms)
{
    release_popped(rx);
    cq_link_hdr_t h;
    if (cq_link_parse(pkt->data, pkt->len, &h) < 0) {
        drop_ev(rx, CQ_LINK_WHY_MALFORMED);
        return 0;
    }
    if (h.src != rx->peer || h.dst != rx->self) {
        drop_ev(rx, CQ_LINK_WHY_NOT_OURS);
        return 0;
    }
    if (h.flags & CQ_LINK_F_CTRL) {
        on_ctrl(rx, pkt, &h, now_ms);
        return 0;
    }
    if (rx->epoch && h.epoch < rx->epoch) {
        drop_ev(rx, CQ_LINK_WHY_STALE);
        return 0;
    }
    if (h.epoch != rx->epoch) { /* the first stream, or the peer restarted */
        if (rx->epoch)
            reset(rx, CQ_LINK_WHY_EPOCH);
        rx->epoch = h.epoch;
        rx->next = 1;
        rx->restart = false;
    }
    if (rx->restart) {
        rx->next = h.seq;
        rx->restart = false;
    }
    if (h.seq < rx->next) {
        drop_ev(rx, CQ_LINK_WHY_OLD);
        return 0;
    }
    if (h.seq > rx->next) {
        hold(rx, pkt, h.seq, now_ms);
        return 0;
    }
    if (deliver(rx, pkt) < 0)
        return -ENOMEM;
    drain_hold(rx);
    return 0;
}

void cq_link_rx_tick(cq_link_rx_t *rx, uint64_t now_ms)
{
    release_popped(rx);
    if (rx->nack_due == UINT64_MAX || now_ms < rx->nack_due)
        return;
    if (rx->tries >= rx->cfg.nack_tries)
        reset(rx, CQ_LINK_WHY_TRIES);
    else
        nack(rx, now_ms);
}

bool cq_link_rx_next(cq_link_rx_t *rx, cq_link_ev_t *ev)
{
    cq_buf_unref(rx->popped);
    rx->popped = NULL;
    if (rx->head == rx->nev) {
        rx->head = rx->nev = 0;
        return false;
    }
    *ev = rx->evs[rx->head++];
    rx->popped = ev->buf;
    return true;
}

uint64_t cq_link_rx_next_due(const cq_link_rx_t *rx)
{
    return rx->nack_due;
}

const cq_link_rx_stats_t *cq_link_rx_stats(const cq_link_rx_t *rx)
{
    return &rx->st;
}
