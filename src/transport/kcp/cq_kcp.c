/* cq_kcp.c - the KCP engine: segment codec, ARQ, RTO, congestion and window probing.
 *
 * Layout of the state (transports.md section 2):
 *   send:    snd_queue (list of chunks not yet in the window; every chunk but the tail is full)
 *            -> snd_buf (ring of snd_wnd slots holding sn in [snd_una, snd_nxt); a slot is NULL
 *            once that sn was acknowledged out of order)
 *   receive: rcv_buf (ring of rcv_wnd slots for sn in [rcv_nxt, rcv_nxt + rcv_wnd))
 *            -> rcv_queue (list of in-order segments, at most rcv_wnd, read as a byte stream)
 * All sn/una/ts comparisons go through cq__kcp_diff (32-bit serial arithmetic).
 */
#include "cq_kcp.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_pool.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

#define RTO_NDL      30
#define RTO_MIN      100
#define RTO_DEF      200
#define THRESH_INIT  2
#define THRESH_MIN   2
#define PROBE_INIT   7000
#define PROBE_LIMIT  120000
#define ASK_SEND     1u /* send WASK */
#define ASK_TELL     2u /* send WINS */
#define ACK_CAP_INIT 16u
#define RMT_WND_INIT 32 /* the peer's window until it tells us: kcp-go's default rcv_wnd */
#define AMP_RESERVE  48 /* amplification budget kept for resending the oldest segment, probes */

typedef struct cq__kcp_seg {
    struct cq__kcp_seg *next; /* snd_queue / rcv_queue link */
    uint32_t sn, ts;          /* ts: when last sent (send side), as received (receive side) */
    uint32_t ts_first;        /* send side: when first sent */
    uint32_t resendts, rto;   /* send side: next timeout and its current RTO */
    uint32_t fastack, xmit;   /* send side: later ACKs seen, transmissions */
    bool held;                /* send side: its last transmission was held back (amp_factor) */
    uint32_t len, cap;        /* payload bytes, allocated payload bytes */
    uint8_t data[];
} cq__kcp_seg_t;

typedef struct cq__kcp_hdr {
    uint32_t conv;
    uint8_t cmd, frg;
    uint16_t wnd;
    uint32_t ts, sn, una, len;
} cq__kcp_hdr_t;

struct cq_kcp {
    cq_kcp_opts_t o;
    uint32_t conv, mss, current;
    uint32_t snd_una, snd_nxt, rcv_nxt;
    uint32_t rmt_wnd, cwnd, ssthresh, incr;
    uint32_t rx_rto, rx_minrto, rx_srtt, rx_rttval;
    uint32_t ts_flush, probe, probe_wait, ts_probe;
    bool have_rtt, updated, dead;
    bool verified;  /* the peer echoed one of our ts: the amplification limit is off */
    bool amp_probe; /* a segment was held back by the limit: probe at the flush's end */
    bool probe_out; /* a proof probe (empty PUSH probe_sn at probe_ts) was sent */
    uint32_t probe_sn, probe_ts;
    /* send */
    cq__kcp_seg_t *sq_head, *sq_tail;
    uint32_t sq_count;
    size_t sq_bytes;
    cq__kcp_seg_t **sbuf; /* snd_wnd slots; slot of sn = (sb_head + sn - snd_una) % snd_wnd */
    uint32_t sb_head;
    size_t sb_bytes;
    /* receive */
    cq__kcp_seg_t **rbuf; /* rcv_wnd slots; slot of sn = (rb_head + sn - rcv_nxt) % rcv_wnd */
    uint32_t rb_head, rb_count;
    cq__kcp_seg_t *rq_head, *rq_tail;
    uint32_t rq_count;
    size_t rq_bytes, rq_off; /* ready bytes; bytes of rq_head already read */
    /* pending ACKs: (sn, ts) pairs */
    uint32_t *acks;
    uint32_t ack_count, ack_cap;
    /* output */
    cq_kcp_output_fn out;
    void *ud;
    cq_pool_t *pool; /* where segments come from; NULL: cq_malloc */
    uint8_t *obuf;
    size_t olen;
    cq_kcp_stats_t st;
};

static inline int32_t cq__kcp_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

static uint32_t cq__kcp_clamp(uint32_t v, uint32_t lo, uint32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ---- options and lifetime --------------------------------------------------------------- */

cq_kcp_opts_t cq_kcp_opts_default(void)
{
    cq_kcp_opts_t o = {
        .mtu = 1400,
        .snd_wnd = 32,
        .rcv_wnd = 32,
        .interval = 100,
        .nodelay = 0,
        .resend = 0,
        .nc = false,
        .ack_nodelay = false,
        .minrto = 0,
        .dead_link = 20,
        .max_snd_bytes = 256 * 1024,
    };
    return o;
}

cq_kcp_opts_t cq_kcp_opts_fast(void)
{
    cq_kcp_opts_t o = cq_kcp_opts_default();
    o.nodelay = 1;
    o.interval = 10;
    o.resend = 2;
    o.nc = true;
    o.snd_wnd = 128;
    o.rcv_wnd = 128;
    o.ack_nodelay = true;
    return o;
}

int cq_kcp_opts_check(const cq_kcp_opts_t *o)
{
    if (!o || o->mtu < CQ_KCP_MTU_MIN || o->mtu > CQ_KCP_MTU_MAX)
        return CQ_ECONFIG;
    if (o->snd_wnd < 1 || o->snd_wnd > CQ_KCP_WND_MAX || o->rcv_wnd < 1 ||
        o->rcv_wnd > CQ_KCP_WND_MAX)
        return CQ_ECONFIG;
    if (o->interval < CQ_KCP_INTERVAL_MIN || o->interval > CQ_KCP_INTERVAL_MAX)
        return CQ_ECONFIG;
    if (o->nodelay > 2 || o->minrto > CQ_KCP_RTO_MAX || o->dead_link < 1)
        return CQ_ECONFIG;
    if (o->max_snd_bytes < o->mtu - CQ_KCP_OVERHEAD)
        return CQ_ECONFIG;
    return 0;
}

cq_kcp_t *cq_kcp_new(uint32_t conv, const cq_kcp_opts_t *opts, cq_kcp_output_fn out, void *ud)
{
    cq_kcp_opts_t def = cq_kcp_opts_default();
    if (!opts)
        opts = &def;
    if (cq_kcp_opts_check(opts) < 0 || !out)
        return NULL;
    cq_kcp_t *k = cq_calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->o = *opts;
    k->conv = conv;
    k->mss = opts->mtu - CQ_KCP_OVERHEAD;
    k->out = out;
    k->ud = ud;
    k->rmt_wnd = RMT_WND_INIT;
    k->cwnd = 1;
    k->incr = k->mss;
    k->ssthresh = THRESH_INIT;
    k->rx_rto = RTO_DEF;
    k->rx_minrto = opts->minrto ? opts->minrto : (opts->nodelay ? RTO_NDL : RTO_MIN);
    k->sbuf = cq_calloc(opts->snd_wnd, sizeof(*k->sbuf));
    k->rbuf = cq_calloc(opts->rcv_wnd, sizeof(*k->rbuf));
    k->obuf = cq_malloc(opts->mtu);
    if (!k->sbuf || !k->rbuf || !k->obuf)
        goto fail;
    return k;
fail:
    cq_kcp_free(k);
    return NULL;
}

void cq_kcp_set_pool(cq_kcp_t *k, cq_pool_t *pool)
{
    k->pool = pool;
}

/* A segment with room for cap data bytes, header zeroed. */
static cq__kcp_seg_t *cq__kcp_seg_new(cq_kcp_t *k, uint32_t cap)
{
    cq__kcp_seg_t *s = cq_pool_get(k->pool, sizeof(*s) + cap);
    if (s) {
        memset(s, 0, sizeof(*s));
        s->cap = cap;
    }
    return s;
}

static void cq__kcp_seg_free(cq_kcp_t *k, cq__kcp_seg_t *s)
{
    if (s)
        cq_pool_put(k->pool, s, sizeof(*s) + s->cap);
}

/* s with its capacity cut to its length (s itself if that fails). */
static cq__kcp_seg_t *cq__kcp_seg_trim(cq_kcp_t *k, cq__kcp_seg_t *s)
{
    size_t size = sizeof(*s) + s->len;
    cq__kcp_seg_t *t = k->pool ? cq_pool_get(k->pool, size) : cq_realloc(s, size);
    if (!t)
        return s;
    if (k->pool) {
        memcpy(t, s, size);
        cq__kcp_seg_free(k, s);
    }
    t->cap = t->len;
    return t;
}

static void cq__kcp_free_list(cq_kcp_t *k, cq__kcp_seg_t *s)
{
    while (s) {
        cq__kcp_seg_t *next = s->next;
        cq__kcp_seg_free(k, s);
        s = next;
    }
}

void cq_kcp_free(cq_kcp_t *k)
{
    if (!k)
        return;
    cq__kcp_free_list(k, k->sq_head);
    cq__kcp_free_list(k, k->rq_head);
    if (k->sbuf)
        for (uint32_t i = 0; i < k->o.snd_wnd; i++)
            cq__kcp_seg_free(k, k->sbuf[i]);
    if (k->rbuf)
        for (uint32_t i = 0; i < k->o.rcv_wnd; i++)
            cq__kcp_seg_free(k, k->rbuf[i]);
    cq_free(k->sbuf);
    cq_free(k->rbuf);
    cq_free(k->acks);
    cq_free(k->obuf);
    cq_free(k);
}

/* ---- segment codec and output ------------------------------------------------------------ */

static void cq__kcp_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t cq__kcp_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void cq__kcp_encode(uint8_t *p, const cq__kcp_hdr_t *h)
{
    cq__kcp_put32(p, h->conv);
    p[4] = h->cmd;
    p[5] = h->frg;
    p[6] = (uint8_t)h->wnd;
    p[7] = (uint8_t)(h->wnd >> 8);
    cq__kcp_put32(p + 8, h->ts);
    cq__kcp_put32(p + 12, h->sn);
    cq__kcp_put32(p + 16, h->una);
    cq__kcp_put32(p + 20, h->len);
}

static void cq__kcp_decode(const uint8_t *p, cq__kcp_hdr_t *h)
{
    h->conv = cq__kcp_get32(p);
    h->cmd = p[4];
    h->frg = p[5];
    h->wnd = (uint16_t)(p[6] | p[7] << 8);
    h->ts = cq__kcp_get32(p + 8);
    h->sn = cq__kcp_get32(p + 12);
    h->una = cq__kcp_get32(p + 16);
    h->len = cq__kcp_get32(p + 20);
}

/* True if a segment of n bytes fits in the anti-amplification budget, after what was sent and
 * what the datagram being built holds (or if no limit applies). New data leaves AMP_RESERVE
 * bytes of it unused: a peer whose ACK was lost may send nothing more, and the proof then has
 * to come from the resend of the oldest segment or a probe, which must still fit. */
static bool cq__kcp_amp_fits(const cq_kcp_t *k, size_t n, bool reserve)
{
    if (!k->o.amp_factor || k->verified)
        return true;
    uint64_t need = k->st.out_bytes + k->olen + n + (reserve ? AMP_RESERVE : 0);
    return need <= (uint64_t)k->o.amp_factor * k->st.in_bytes;
}

static void cq__kcp_emit(cq_kcp_t *k)
{
    if (k->olen == 0)
        return;
    k->st.out_dgrams++;
    k->st.out_bytes += k->olen;
    k->out(k->ud, k->obuf, k->olen);
    k->olen = 0;
}

/* Free receive-window slots, as advertised in every segment we send. */
static uint16_t cq__kcp_wnd_unused(const cq_kcp_t *k)
{
    uint32_t w = k->rq_count < k->o.rcv_wnd ? k->o.rcv_wnd - k->rq_count : 0;
    return (uint16_t)CQ_MIN(w, 0xffffu);
}

/* Appends one segment to the datagram being built, sending the datagram first if the segment
 * would not fit. len <= mss always holds for what we send. Returns false, appending nothing,
 * when the segment is over the anti-amplification budget: it is then as if lost. Checking each
 * segment rather than each datagram lets the oldest ones (an AuthResult) through first. */
static bool cq__kcp_put(cq_kcp_t *k, uint8_t cmd, uint32_t ts, uint32_t sn, const uint8_t *data,
                        uint32_t len)
{
    bool reserve = cmd == CQ_KCP_CMD_PUSH && len && sn != k->snd_una;
    if (!cq__kcp_amp_fits(k, CQ_KCP_OVERHEAD + len, reserve)) {
        k->st.amp_blocked++;
        k->amp_probe = true;
        return false;
    }
    if (k->olen + CQ_KCP_OVERHEAD + len > k->o.mtu)
        cq__kcp_emit(k);
    if (cmd == CQ_KCP_CMD_PUSH)
        ts += k->o.ts_offset; /* our own clock: echoed back in the ACK */
    cq__kcp_hdr_t h = {k->conv, cmd, 0, cq__kcp_wnd_unused(k), ts, sn, k->rcv_nxt, len};
    cq__kcp_encode(k->obuf + k->olen, &h);
    if (len)
        memcpy(k->obuf + k->olen + CQ_KCP_OVERHEAD, data, len);
    k->olen += CQ_KCP_OVERHEAD + len;
    k->st.out_segs++;
    return true;
}

/* ---- RTT and the send buffer --------------------------------------------------------------- */

/* RFC 6298 smoothing with kcp's weights; rto = srtt + max(interval, 4 rttval), clamped. */
static void cq__kcp_rtt_sample(cq_kcp_t *k, int32_t rtt)
{
    if (rtt < 0)
        return;
    uint32_t r = CQ_MIN((uint32_t)rtt, (uint32_t)CQ_KCP_RTO_MAX); /* keeps the sums in range */
    if (!k->have_rtt) {
        k->have_rtt = true;
        k->rx_srtt = r;
        k->rx_rttval = r / 2;
    } else {
        uint32_t delta = r > k->rx_srtt ? r - k->rx_srtt : k->rx_srtt - r;
        k->rx_rttval = (3 * k->rx_rttval + delta) / 4;
        k->rx_srtt = (7 * k->rx_srtt + r) / 8;
        if (k->rx_srtt < 1)
            k->rx_srtt = 1;
    }
    uint32_t rto = k->rx_srtt + CQ_MAX(k->o.interval, 4 * k->rx_rttval);
    k->rx_rto = cq__kcp_clamp(rto, k->rx_minrto, CQ_KCP_RTO_MAX);
}

static cq__kcp_seg_t **cq__kcp_sslot(cq_kcp_t *k, uint32_t sn)
{
    return &k->sbuf[(k->sb_head + (sn - k->snd_una)) % k->o.snd_wnd];
}

static void cq__kcp_sdrop(cq_kcp_t *k, cq__kcp_seg_t **slot)
{
    if (*slot) {
        k->sb_bytes -= (*slot)->len;
        cq__kcp_seg_free(k, *slot);
        *slot = NULL;
    }
}

/* Moves snd_una to the oldest sn still held (or snd_nxt). */
static void cq__kcp_shrink(cq_kcp_t *k)
{
    while (k->snd_una != k->snd_nxt && k->sbuf[k->sb_head] == NULL) {
        k->sb_head = (k->sb_head + 1) % k->o.snd_wnd;
        k->snd_una++;
    }
}

/* Cumulative ACK: everything below una arrived. A una past snd_nxt is clamped to it. */
static void cq__kcp_parse_una(cq_kcp_t *k, uint32_t una)
{
    while (k->snd_una != k->snd_nxt && cq__kcp_diff(una, k->snd_una) > 0) {
        cq__kcp_sdrop(k, &k->sbuf[k->sb_head]);
        k->sb_head = (k->sb_head + 1) % k->o.snd_wnd;
        k->snd_una++;
    }
    cq__kcp_shrink(k);
}

static bool cq__kcp_in_flight(const cq_kcp_t *k, uint32_t sn)
{
    return cq__kcp_diff(sn, k->snd_una) >= 0 && cq__kcp_diff(sn, k->snd_nxt) < 0;
}

static void cq__kcp_parse_ack(cq_kcp_t *k, uint32_t sn)
{
    if (!cq__kcp_in_flight(k, sn))
        return;
    cq__kcp_sdrop(k, cq__kcp_sslot(k, sn));
    cq__kcp_shrink(k);
}

/* Segments older than the newest acked sn, and sent no later than it, were skipped once more. */
static void cq__kcp_parse_fastack(cq_kcp_t *k, uint32_t maxack, uint32_t ts)
{
    if (!cq__kcp_in_flight(k, maxack))
        return;
    for (uint32_t sn = k->snd_una; cq__kcp_diff(sn, maxack) < 0; sn++) {
        cq__kcp_seg_t *s = *cq__kcp_sslot(k, sn);
        if (s && cq__kcp_diff(s->ts, ts) <= 0)
            s->fastack++;
    }
}

/* Window growth once per input that advanced snd_una: slow start, then additive increase. */
static void cq__kcp_grow_cwnd(cq_kcp_t *k)
{
    if (k->cwnd >= k->rmt_wnd)
        return;
    uint32_t mss = k->mss;
    if (k->cwnd < k->ssthresh) {
        k->cwnd++;
        k->incr += mss;
    } else {
        if (k->incr < mss)
            k->incr = mss;
        k->incr += (mss * mss) / k->incr + mss / 16;
        if ((k->cwnd + 1) * mss <= k->incr)
            k->cwnd = (k->incr + mss - 1) / mss;
    }
    if (k->cwnd > k->rmt_wnd) {
        k->cwnd = k->rmt_wnd;
        k->incr = k->rmt_wnd * mss;
    }
}

/* ---- receive path -------------------------------------------------------------------------- */

static void cq__kcp_rq_push(cq_kcp_t *k, cq__kcp_seg_t *s)
{
    s->next = NULL;
    if (k->rq_tail)
        k->rq_tail->next = s;
    else
        k->rq_head = s;
    k->rq_tail = s;
    k->rq_count++;
    k->rq_bytes += s->len;
}

/* Moves the in-order run at rcv_nxt from rcv_buf to rcv_queue while the queue has room. */
static void cq__kcp_deliver(cq_kcp_t *k)
{
    while (k->rq_count < k->o.rcv_wnd && k->rbuf[k->rb_head]) {
        cq__kcp_seg_t *s = k->rbuf[k->rb_head];
        k->rbuf[k->rb_head] = NULL;
        k->rb_head = (k->rb_head + 1) % k->o.rcv_wnd;
        k->rb_count--;
        k->rcv_nxt++;
        cq__kcp_rq_push(k, s);
    }
}

static int cq__kcp_ack_push(cq_kcp_t *k, uint32_t sn, uint32_t ts);

/* Called for sn in [rcv_nxt, rcv_nxt + rcv_wnd). Duplicates are dropped. */
static int cq__kcp_parse_data(cq_kcp_t *k, const cq__kcp_hdr_t *h, const uint8_t *data)
{
    cq__kcp_seg_t **slot = &k->rbuf[(k->rb_head + (h->sn - k->rcv_nxt)) % k->o.rcv_wnd];
    if (*slot) {
        k->st.in_dup++;
        return 0;
    }
    cq__kcp_seg_t *s = cq__kcp_seg_new(k, h->len);
    if (!s)
        return -ENOMEM;
    s->sn = h->sn;
    s->ts = h->ts;
    s->len = h->len;
    if (h->len)
        memcpy(s->data, data, h->len);
    *slot = s;
    k->rb_count++;
    cq__kcp_deliver(k);
    return 0;
}

/* Stores the data first and acknowledges it after, so that a failed allocation leaves the
 * segment unacknowledged (the peer resends it) rather than acknowledged and lost. */
static int cq__kcp_on_push(cq_kcp_t *k, const cq__kcp_hdr_t *h, const uint8_t *data)
{
    if (cq__kcp_diff(h->sn, k->rcv_nxt + k->o.rcv_wnd) >= 0) {
        k->st.in_dup++; /* beyond the window: no ACK, the peer resends later */
        return 0;
    }
    if (cq__kcp_diff(h->sn, k->rcv_nxt) >= 0) {
        int r = cq__kcp_parse_data(k, h, data);
        if (r < 0)
            return r;
    } else {
        k->st.in_dup++; /* already delivered: our ACK was lost */
    }
    return cq__kcp_ack_push(k, h->sn, h->ts);
}

/* Validates the segment at p (n bytes left) and fills *h. */
static int cq__kcp_check_seg(const cq_kcp_t *k, const uint8_t *p, size_t n, cq__kcp_hdr_t *h)
{
    cq__kcp_decode(p, h);
    if (h->conv != k->conv)
        return CQ_EKCPCONV;
    if (h->cmd < CQ_KCP_CMD_PUSH || h->cmd > CQ_KCP_CMD_WINS)
        return CQ_EKCPCMD;
    if (h->len > n - CQ_KCP_OVERHEAD)
        return CQ_EKCPTRUNC;
    if (h->cmd == CQ_KCP_CMD_PUSH &&
        h->len > CQ_MAX(k->o.mtu, (uint32_t)CQ_KCP_RCV_MTU) - CQ_KCP_OVERHEAD)
        return CQ_ETOOBIG;
    return 0;
}

typedef struct cq__kcp_acks_seen {
    bool any;
    uint32_t maxack, ts;
} cq__kcp_acks_seen_t;

/* RTT is sampled only from the ACK of a segment's first transmission (the ACK echoes the ts
 * of the copy it answers). ACKs of resent copies would bias the estimate low against a peer
 * that delays its ACKs (kcp-go on defaults acks at its 100 ms flush): the RTO would then keep
 * firing before the ACK comes. Runs before the una of the same header drops the segment. */
static void cq__kcp_ack_rtt(cq_kcp_t *k, const cq__kcp_hdr_t *h)
{
    if (k->probe_out && h->sn == k->probe_sn && h->ts == k->probe_ts)
        k->verified = true; /* the echo of our proof probe */
    if (!cq__kcp_in_flight(k, h->sn))
        return;
    const cq__kcp_seg_t *s = *cq__kcp_sslot(k, h->sn);
    if (s && h->ts == s->ts_first)
        cq__kcp_rtt_sample(k, cq__kcp_diff(k->current, h->ts));
    if (s && (h->ts == s->ts_first || h->ts == s->ts))
        k->verified = true; /* the peer saw a copy of this segment: it receives from us */
}

static int cq__kcp_on_seg(cq_kcp_t *k, const cq__kcp_hdr_t *h, const uint8_t *data,
                          cq__kcp_acks_seen_t *seen)
{
    k->rmt_wnd = h->wnd;
    if (h->cmd == CQ_KCP_CMD_ACK)
        cq__kcp_ack_rtt(k, h);
    cq__kcp_parse_una(k, h->una);
    switch (h->cmd) {
    case CQ_KCP_CMD_ACK:
        cq__kcp_parse_ack(k, h->sn);
        if (!seen->any || cq__kcp_diff(h->sn, seen->maxack) > 0) {
            seen->any = true;
            seen->maxack = h->sn;
            seen->ts = h->ts;
        }
        return 0;
    case CQ_KCP_CMD_PUSH:
        return cq__kcp_on_push(k, h, data);
    case CQ_KCP_CMD_WASK:
        k->probe |= ASK_TELL;
        return 0;
    default: /* WINS: the window update above is all it carries */
        return 0;
    }
}

static void cq__kcp_flush_acks(cq_kcp_t *k);

/* The peer just proved its address: segments the limit held back are due now, not at their
 * (backed-off) timeout. */
static void cq__kcp_release_held(cq_kcp_t *k)
{
    for (uint32_t sn = k->snd_una; sn != k->snd_nxt; sn++) {
        cq__kcp_seg_t *s = *cq__kcp_sslot(k, sn);
        if (s && s->held)
            s->resendts = k->current;
    }
}

int cq_kcp_input(cq_kcp_t *k, const uint8_t *dgram, size_t len, uint64_t now_ms)
{
    k->current = (uint32_t)now_ms;
    k->st.in_dgrams++;
    k->st.in_bytes += len;
    uint32_t prev_una = k->snd_una;
    bool was_verified = k->verified;
    cq__kcp_acks_seen_t seen = {false, 0, 0};
    int r = 0;
    while (len >= CQ_KCP_OVERHEAD) {
        cq__kcp_hdr_t h;
        r = cq__kcp_check_seg(k, dgram, len, &h);
        if (r < 0)
            break;
        if (h.cmd == CQ_KCP_CMD_ACK)
            h.ts -= k->o.ts_offset; /* back to our clock (see cq__kcp_put) */
        r = cq__kcp_on_seg(k, &h, dgram + CQ_KCP_OVERHEAD, &seen);
        if (r < 0)
            break;
        k->st.in_segs++;
        dgram += CQ_KCP_OVERHEAD + h.len;
        len -= CQ_KCP_OVERHEAD + h.len;
    }
    if (seen.any)
        cq__kcp_parse_fastack(k, seen.maxack, seen.ts);
    bool slid = cq__kcp_diff(k->snd_una, prev_una) > 0;
    if (slid)
        cq__kcp_grow_cwnd(k);
    bool proved = k->o.amp_factor && k->verified && !was_verified;
    if (proved)
        cq__kcp_release_held(k);
    if (slid || proved) {
        /* kcp-go's Input: the window slid, so send what it now admits (and the ACKs) at once
         * rather than at the next interval tick, which under loss costs up to an interval per
         * round trip. */
        cq_kcp_flush(k, now_ms);
    } else if (k->o.ack_nodelay && (k->ack_count || k->probe)) {
        cq__kcp_flush_acks(k);
        cq__kcp_emit(k);
    }
    return r;
}

/* ---- stream read --------------------------------------------------------------------------- */

const uint8_t *cq_kcp_peek(const cq_kcp_t *k, size_t *len)
{
    for (const cq__kcp_seg_t *s = k->rq_head; s; s = s->next) {
        size_t off = s == k->rq_head ? k->rq_off : 0;
        if (s->len > off) {
            *len = s->len - off;
            return s->data + off;
        }
    }
    *len = 0;
    return NULL;
}

size_t cq_kcp_readable(const cq_kcp_t *k)
{
    return k->rq_bytes;
}

static void cq__kcp_rq_pop(cq_kcp_t *k)
{
    cq__kcp_seg_t *s = k->rq_head;
    k->rq_head = s->next;
    if (!k->rq_head)
        k->rq_tail = NULL;
    k->rq_count--;
    cq__kcp_seg_free(k, s);
}

void cq_kcp_consume(cq_kcp_t *k, size_t n)
{
    bool was_full = k->rq_count >= k->o.rcv_wnd;
    n = CQ_MIN(n, k->rq_bytes);
    k->rq_bytes -= n;
    size_t off = k->rq_off + n;
    while (k->rq_head && off >= k->rq_head->len) { /* fully read, or empty */
        off -= k->rq_head->len;
        cq__kcp_rq_pop(k);
    }
    k->rq_off = off;
    cq__kcp_deliver(k);
    if (was_full && k->rq_count < k->o.rcv_wnd)
        k->probe |= ASK_TELL; /* the peer saw wnd 0: tell it the window reopened */
}

size_t cq_kcp_recv(cq_kcp_t *k, uint8_t *buf, size_t cap)
{
    size_t got = 0, n;
    const uint8_t *p;
    while (got < cap && (p = cq_kcp_peek(k, &n)) != NULL) {
        n = CQ_MIN(n, cap - got);
        memcpy(buf + got, p, n);
        cq_kcp_consume(k, n);
        got += n;
    }
    if (got == 0)
        cq_kcp_consume(k, 0); /* frees empty segments, if any */
    return got;
}

/* ---- stream write -------------------------------------------------------------------------- */

size_t cq_kcp_send_space(const cq_kcp_t *k)
{
    size_t used = k->sq_bytes + k->sb_bytes;
    return used < k->o.max_snd_bytes ? k->o.max_snd_bytes - used : 0;
}

uint32_t cq_kcp_waitsnd(const cq_kcp_t *k)
{
    return k->sq_count + (k->snd_nxt - k->snd_una);
}

/* Appends to the queue tail while it has room, then adds full-size chunks. */
static ssize_t cq__kcp_queue(cq_kcp_t *k, const uint8_t *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        cq__kcp_seg_t *t = k->sq_tail;
        if (!t || t->len == t->cap) {
            t = cq__kcp_seg_new(k, k->mss);
            if (!t)
                return done ? (ssize_t)done : -ENOMEM;
            if (k->sq_tail)
                k->sq_tail->next = t;
            else
                k->sq_head = t;
            k->sq_tail = t;
            k->sq_count++;
        }
        size_t c = CQ_MIN(n - done, (size_t)(t->cap - t->len));
        memcpy(t->data + t->len, p + done, c);
        t->len += (uint32_t)c;
        k->sq_bytes += c;
        done += c;
    }
    return (ssize_t)done;
}

ssize_t cq_kcp_send(cq_kcp_t *k, const uint8_t *p, size_t n)
{
    n = CQ_MIN(n, cq_kcp_send_space(k));
    return n ? cq__kcp_queue(k, p, n) : 0;
}

ssize_t cq_kcp_sendv(cq_kcp_t *k, const struct iovec *iov, int iovcnt)
{
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        ssize_t r = cq_kcp_send(k, iov[i].iov_base, iov[i].iov_len);
        if (r < 0)
            return total ? (ssize_t)total : r;
        total += (size_t)r;
        if ((size_t)r < iov[i].iov_len)
            break;
    }
    return (ssize_t)total;
}

/* ---- flush --------------------------------------------------------------------------------- */

static int cq__kcp_ack_push(cq_kcp_t *k, uint32_t sn, uint32_t ts)
{
    uint32_t limit = 2 * k->o.rcv_wnd;
    if (k->ack_count == limit) {
        cq__kcp_flush_acks(k); /* bounded list: send what we have now */
        cq__kcp_emit(k);
    }
    if (k->ack_count == k->ack_cap) {
        uint32_t cap = k->ack_cap ? CQ_MIN(k->ack_cap * 2, limit) : CQ_MIN(ACK_CAP_INIT, limit);
        uint32_t *a = cq_realloc(k->acks, (size_t)cap * 2 * sizeof(*a));
        if (!a)
            return -ENOMEM;
        k->acks = a;
        k->ack_cap = cap;
    }
    k->acks[2 * k->ack_count] = sn;
    k->acks[2 * k->ack_count + 1] = ts;
    k->ack_count++;
    return 0;
}

/* Zero-window probing: while the peer advertises 0, ask after probe_wait (7 s, x1.5, 120 s). */
static void cq__kcp_probe_timer(cq_kcp_t *k)
{
    if (k->rmt_wnd != 0) {
        k->probe_wait = 0;
        k->ts_probe = 0;
        return;
    }
    if (k->probe_wait == 0) {
        k->probe_wait = PROBE_INIT;
        k->ts_probe = k->current + k->probe_wait;
    } else if (cq__kcp_diff(k->current, k->ts_probe) >= 0) {
        k->probe_wait = CQ_MIN(k->probe_wait + k->probe_wait / 2, (uint32_t)PROBE_LIMIT);
        k->ts_probe = k->current + k->probe_wait;
        k->probe |= ASK_SEND;
    }
}

/* ACKs, then WASK/WINS, into the datagram being built (not emitted yet). */
static void cq__kcp_flush_acks(cq_kcp_t *k)
{
    for (uint32_t i = 0; i < k->ack_count; i++)
        cq__kcp_put(k, CQ_KCP_CMD_ACK, k->acks[2 * i + 1], k->acks[2 * i], NULL, 0);
    k->ack_count = 0;
    if (k->probe & ASK_SEND)
        cq__kcp_put(k, CQ_KCP_CMD_WASK, 0, 0, NULL, 0);
    if (k->probe & ASK_TELL)
        cq__kcp_put(k, CQ_KCP_CMD_WINS, 0, 0, NULL, 0);
    k->probe = 0;
}

static uint32_t cq__kcp_send_window(const cq_kcp_t *k)
{
    uint32_t w = CQ_MIN(k->o.snd_wnd, k->rmt_wnd);
    return k->o.nc ? w : CQ_MIN(w, k->cwnd);
}

/* Takes the queue head into the window; a partly filled chunk is trimmed to its length. */
static void cq__kcp_admit(cq_kcp_t *k, uint32_t wnd)
{
    while (k->sq_head && k->snd_nxt - k->snd_una < wnd) {
        cq__kcp_seg_t *s = k->sq_head;
        k->sq_head = s->next;
        if (!k->sq_head)
            k->sq_tail = NULL;
        k->sq_count--;
        k->sq_bytes -= s->len;
        if (s->len < s->cap)
            s = cq__kcp_seg_trim(k, s);
        s->next = NULL;
        s->sn = k->snd_nxt++;
        s->xmit = 0;
        s->fastack = 0;
        s->held = false;
        *cq__kcp_sslot(k, s->sn) = s;
        k->sb_bytes += s->len;
    }
}

/* Backoff of one segment's RTO after a timeout (C kcp's three nodelay modes). */
static uint32_t cq__kcp_backoff(const cq_kcp_t *k, uint32_t rto)
{
    uint32_t add;
    if (k->o.nodelay == 0)
        add = CQ_MAX(rto, k->rx_rto);
    else if (k->o.nodelay == 1)
        add = rto / 2;
    else
        add = k->rx_rto / 2;
    return CQ_MIN(rto + add, (uint32_t)CQ_KCP_RTO_MAX);
}

typedef struct cq__kcp_flush_res {
    bool lost, fast;
    bool admitted; /* this flush took new segments into the window */
} cq__kcp_flush_res_t;

/* Decides whether segment s goes out in this flush, updating its timers. */
static bool cq__kcp_due(cq_kcp_t *k, cq__kcp_seg_t *s, cq__kcp_flush_res_t *res)
{
    uint32_t rtomin = k->o.nodelay == 0 ? k->rx_rto / 8 : 0;
    if (s->xmit == 0) {
        s->rto = k->rx_rto;
        s->resendts = k->current + s->rto + rtomin;
        return true;
    }
    if (cq__kcp_diff(k->current, s->resendts) >= 0) {
        s->rto = cq__kcp_backoff(k, s->rto);
        s->resendts = k->current + s->rto;
        k->st.retrans++;
        res->lost = true;
        return true;
    }
    if (k->o.resend && s->fastack >= k->o.resend) {
        s->fastack = 0;
        s->resendts = k->current + s->rto;
        k->st.fast_retrans++;
        res->fast = true;
        return true;
    }
    if (s->fastack > 0 && !res->admitted) {
        /* kcp-go's early retransmit: a later segment was acknowledged and no new data is
         * going out to draw more ACKs, so fast resend would never trigger. */
        s->fastack = 0;
        s->resendts = k->current + s->rto;
        k->st.fast_retrans++;
        res->fast = true;
        return true;
    }
    return false;
}

static void cq__kcp_flush_data(cq_kcp_t *k, cq__kcp_flush_res_t *res)
{
    for (uint32_t sn = k->snd_una; sn != k->snd_nxt; sn++) {
        cq__kcp_seg_t *s = *cq__kcp_sslot(k, sn);
        if (!s || !cq__kcp_due(k, s, res))
            continue;
        s->xmit++;
        s->ts = k->current;
        if (s->xmit == 1)
            s->ts_first = s->ts;
        s->held = !cq__kcp_put(k, CQ_KCP_CMD_PUSH, s->ts, s->sn, s->data, s->len);
        if (s->xmit >= k->o.dead_link)
            k->dead = true;
    }
}

/* Congestion reaction: halve on fast resend (keeping resend segments of slack), reset on loss. */
static void cq__kcp_adjust_cwnd(cq_kcp_t *k, const cq__kcp_flush_res_t *res, uint32_t wnd)
{
    if (res->fast) {
        uint32_t inflight = k->snd_nxt - k->snd_una;
        k->ssthresh = CQ_MAX(inflight / 2, (uint32_t)THRESH_MIN);
        k->cwnd = k->ssthresh + k->o.resend;
        k->incr = k->cwnd * k->mss;
    }
    if (res->lost) {
        k->ssthresh = CQ_MAX(wnd / 2, (uint32_t)THRESH_MIN);
        k->cwnd = 1;
        k->incr = k->mss;
    }
    if (k->cwnd < 1) {
        k->cwnd = 1;
        k->incr = k->mss;
    }
}

/* Something was held back: 24 bytes that make a real peer answer, which a spoofed address
 * cannot. Once the peer has acknowledged something (snd_una > 0), an empty PUSH with the last
 * delivered sn: every KCP receiver acknowledges an old sn again (echoing our ts, which proves
 * the address) and stores nothing. Before that, a WASK: its WINS answer only adds budget, for
 * the resend of the first segments, whose ACK is then the proof. */
static void cq__kcp_amp_probe(cq_kcp_t *k)
{
    if (k->snd_una == 0) {
        cq__kcp_put(k, CQ_KCP_CMD_WASK, 0, 0, NULL, 0);
        return;
    }
    k->probe_out = true;
    k->probe_sn = k->snd_una - 1;
    k->probe_ts = k->current;
    cq__kcp_put(k, CQ_KCP_CMD_PUSH, k->probe_ts, k->probe_sn, NULL, 0);
}

void cq_kcp_flush(cq_kcp_t *k, uint64_t now_ms)
{
    k->current = (uint32_t)now_ms;
    cq__kcp_probe_timer(k);
    cq__kcp_flush_acks(k);
    uint32_t wnd = cq__kcp_send_window(k);
    uint32_t nxt = k->snd_nxt;
    cq__kcp_admit(k, wnd);
    cq__kcp_flush_res_t res = {false, false, k->snd_nxt != nxt};
    cq__kcp_flush_data(k, &res);
    if (k->amp_probe) {
        k->amp_probe = false;
        if (cq__kcp_amp_fits(k, CQ_KCP_OVERHEAD, false))
            cq__kcp_amp_probe(k);
    }
    cq__kcp_emit(k);
    cq__kcp_adjust_cwnd(k, &res, wnd);
}

static bool cq__kcp_resend_due(const cq_kcp_t *k)
{
    for (uint32_t sn = k->snd_una; sn != k->snd_nxt; sn++) {
        const cq__kcp_seg_t *s = k->sbuf[(k->sb_head + (sn - k->snd_una)) % k->o.snd_wnd];
        if (s && cq__kcp_diff(k->current, s->resendts) >= 0)
            return true;
    }
    return false;
}

void cq_kcp_update(cq_kcp_t *k, uint64_t now_ms)
{
    k->current = (uint32_t)now_ms;
    if (!k->updated) {
        k->updated = true;
        k->ts_flush = k->current;
    }
    int32_t slap = cq__kcp_diff(k->current, k->ts_flush);
    if (slap >= 10000 || slap < -10000) {
        k->ts_flush = k->current; /* the clock jumped: resynchronise */
        slap = 0;
    }
    if (slap >= 0) {
        k->ts_flush += k->o.interval;
        if (cq__kcp_diff(k->current, k->ts_flush) >= 0)
            k->ts_flush = k->current + k->o.interval;
        cq_kcp_flush(k, now_ms);
    } else if (cq__kcp_resend_due(k)) {
        cq_kcp_flush(k, now_ms); /* a retransmission timer fired between two intervals */
    }
}

uint64_t cq_kcp_check(const cq_kcp_t *k, uint64_t now_ms)
{
    if (!k->updated)
        return now_ms;
    uint32_t cur = (uint32_t)now_ms;
    int32_t to_flush = cq__kcp_diff(k->ts_flush, cur);
    if (to_flush >= 10000 || to_flush < -10000 || to_flush <= 0)
        return now_ms; /* due now (update resynchronises a jumped clock) */
    uint32_t next = CQ_MIN((uint32_t)to_flush, k->o.interval);
    for (uint32_t sn = k->snd_una; sn != k->snd_nxt; sn++) {
        const cq__kcp_seg_t *s = k->sbuf[(k->sb_head + (sn - k->snd_una)) % k->o.snd_wnd];
        if (!s)
            continue;
        int32_t d = cq__kcp_diff(s->resendts, cur);
        if (d <= 0)
            return now_ms;
        next = CQ_MIN(next, (uint32_t)d);
    }
    return now_ms + next;
}

/* ---- queries and helpers ------------------------------------------------------------------- */

bool cq_kcp_dead(const cq_kcp_t *k)
{
    return k->dead;
}

uint32_t cq_kcp_conv(const cq_kcp_t *k)
{
    return k->conv;
}

void cq_kcp_stats(const cq_kcp_t *k, cq_kcp_stats_t *st)
{
    *st = k->st;
    st->srtt = k->rx_srtt;
    st->rttval = k->rx_rttval;
    st->rto = k->rx_rto;
    st->cwnd = k->cwnd;
    st->rmt_wnd = k->rmt_wnd;
    st->snd_una = k->snd_una;
    st->snd_nxt = k->snd_nxt;
    st->rcv_nxt = k->rcv_nxt;
    st->rcv_queue = k->rq_count;
    st->rcv_buf = k->rb_count;
    st->verified = k->verified;
    st->xmit_max = 0;
    for (uint32_t i = 0; i < k->o.snd_wnd; i++)
        if (k->sbuf[i] && k->sbuf[i]->xmit > st->xmit_max)
            st->xmit_max = k->sbuf[i]->xmit;
}

int cq_kcp_peek_conv(const uint8_t *dgram, size_t len, uint32_t *conv)
{
    if (len < CQ_KCP_OVERHEAD)
        return CQ_EKCPTRUNC;
    *conv = cq__kcp_get32(dgram);
    return 0;
}

bool cq_kcp_is_conv_start(const uint8_t *dgram, size_t len)
{
    if (len < CQ_KCP_OVERHEAD)
        return false;
    cq__kcp_hdr_t h;
    cq__kcp_decode(dgram, &h);
    return h.cmd == CQ_KCP_CMD_PUSH && h.sn == 0;
}
