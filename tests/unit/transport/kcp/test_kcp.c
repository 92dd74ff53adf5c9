/* tests/unit/transport/kcp: the KCP engine over a simulated datagram link (style.md §12 habit 4).
 *
 * Two engines talk through an in-memory link with seeded loss, duplication, latency and
 * jitter (reordering), driven by a manual clock that jumps to the next event (a due
 * cq_kcp_check or a datagram arrival). Everything is deterministic: one xorshift PRNG per run.
 * Each direction carries a byte stream whose byte i is a hash of i, and the receiver checks
 * every byte as it reads it, so loss, duplication, reordering and truncation all show up; the
 * total count at the end proves every byte arrived exactly once. The file includes cq_kcp.c to
 * reach the sequence counters for the wraparound test (style.md §12 habit 5). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_kcp.c"
#include "cq_pool.h"
#include "test_alloc.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- deterministic helpers --------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Byte i of a stream: practically never repeats a pattern, so a lost, doubled or moved run of
 * bytes is caught at once. */
static uint8_t pat(uint64_t salt, uint64_t i)
{
    return (uint8_t)(mix64(salt ^ (i >> 3)) >> ((i & 7) * 8));
}

/* ---- the simulated link ------------------------------------------------------------------ */

typedef struct pkt {
    uint64_t at, seq;
    size_t len;
    uint8_t *data;
} pkt_t;

typedef struct link {
    pkt_t *q;
    size_t n, cap;
    unsigned loss, dup;       /* per 10000 */
    unsigned latency, jitter; /* ms; jitter > 0 reorders */
    bool block;               /* drop everything */
} link_t;

typedef struct tap {
    uint64_t at;
    int dir; /* 0: a -> b, 1: b -> a */
    uint8_t cmd;
    uint32_t sn, ts, una, wnd, len;
} tap_t;

typedef struct stream {
    uint64_t total, sent, recvd, salt;
} stream_t;

typedef struct sim sim_t;
typedef struct ep {
    sim_t *s;
    int dir;
} ep_t;

struct sim {
    uint64_t now, seq, rng;
    link_t link[2]; /* [0] carries a's output to b */
    cq_kcp_t *k[2]; /* [0] = a, [1] = b */
    ep_t ep[2];
    uint32_t mtu[2];
    stream_t st[2]; /* [0]: a -> b */
    bool read[2];   /* does the application on k[i] read? */
    bool flush_on_send;
    bool allow_enomem;
    tap_t *taps;
    size_t ntaps, tapcap;
    bool tapping;
    uint32_t max_rbuf[2]; /* most out-of-order segments k[i] held at once */
};

static void tap_dgram(sim_t *s, int dir, const uint8_t *d, size_t len)
{
    while (len >= CQ_KCP_OVERHEAD) {
        cq__kcp_hdr_t h;
        cq__kcp_decode(d, &h);
        if (s->ntaps == s->tapcap) {
            s->tapcap = s->tapcap ? s->tapcap * 2 : 256;
            s->taps = realloc(s->taps, s->tapcap * sizeof(*s->taps));
            assert_non_null(s->taps);
        }
        s->taps[s->ntaps++] = (tap_t){s->now, dir, h.cmd, h.sn, h.ts, h.una, h.wnd, h.len};
        assert_true(h.len <= len - CQ_KCP_OVERHEAD);
        d += CQ_KCP_OVERHEAD + h.len;
        len -= CQ_KCP_OVERHEAD + h.len;
    }
    assert_int_equal(len, 0); /* we never send trailing bytes */
}

static void link_push(sim_t *s, link_t *l, const uint8_t *d, size_t len, uint64_t at)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->q = realloc(l->q, l->cap * sizeof(*l->q));
        assert_non_null(l->q);
    }
    pkt_t *p = &l->q[l->n++];
    p->at = at;
    p->seq = s->seq++;
    p->len = len;
    p->data = malloc(len);
    assert_non_null(p->data);
    memcpy(p->data, d, len);
}

static void sim_out(void *ud, const uint8_t *d, size_t len)
{
    ep_t *e = ud;
    sim_t *s = e->s;
    assert_true(len >= CQ_KCP_OVERHEAD && len <= s->mtu[e->dir]);
    if (s->tapping)
        tap_dgram(s, e->dir, d, len);
    link_t *l = &s->link[e->dir];
    if (l->block || rnd(&s->rng) % 10000 < l->loss)
        return;
    int copies = 1 + (rnd(&s->rng) % 10000 < l->dup);
    for (int c = 0; c < copies; c++) {
        uint64_t delay = l->latency + (l->jitter ? rnd(&s->rng) % (l->jitter + 1) : 0);
        link_push(s, l, d, len, s->now + delay);
    }
}

static void sim_init(sim_t *s, const cq_kcp_opts_t *oa, const cq_kcp_opts_t *ob, uint32_t conv,
                     uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->rng = seed ? seed : 1;
    s->now = 1000;
    const cq_kcp_opts_t *o[2] = {oa, ob};
    for (int i = 0; i < 2; i++) {
        s->ep[i] = (ep_t){s, i};
        s->mtu[i] = o[i] ? o[i]->mtu : 1400;
        s->k[i] = cq_kcp_new(conv, o[i], sim_out, &s->ep[i]);
        assert_non_null(s->k[i]);
        s->read[i] = true;
        s->st[i].salt = 0x1234u + (uint64_t)i;
    }
}

static void sim_free(sim_t *s)
{
    for (int i = 0; i < 2; i++) {
        cq_kcp_free(s->k[i]);
        for (size_t j = 0; j < s->link[i].n; j++)
            free(s->link[i].q[j].data);
        free(s->link[i].q);
    }
    free(s->taps);
}

/* Delivers the earliest due datagram of link dir to its receiver; false when none is due. */
static bool sim_deliver_one(sim_t *s, int dir)
{
    link_t *l = &s->link[dir];
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < l->n; i++) {
        if (l->q[i].at > s->now)
            continue;
        if (best == SIZE_MAX || l->q[i].at < l->q[best].at ||
            (l->q[i].at == l->q[best].at && l->q[i].seq < l->q[best].seq))
            best = i;
    }
    if (best == SIZE_MAX)
        return false;
    pkt_t p = l->q[best];
    l->q[best] = l->q[--l->n];
    int r = cq_kcp_input(s->k[1 - dir], p.data, p.len, s->now);
    if (!(s->allow_enomem && r == -ENOMEM))
        assert_int_equal(r, 0);
    cq_kcp_stats_t st;
    cq_kcp_stats(s->k[1 - dir], &st);
    s->max_rbuf[1 - dir] = CQ_MAX(s->max_rbuf[1 - dir], st.rcv_buf);
    free(p.data);
    return true;
}

static void pump_send(sim_t *s, int i)
{
    stream_t *st = &s->st[i];
    uint8_t buf[3000];
    while (st->sent < st->total) {
        uint64_t want = rnd(&s->rng) % sizeof(buf) + 1; /* not inside CQ_MIN: evaluated twice */
        size_t n = (size_t)CQ_MIN(st->total - st->sent, want);
        for (size_t j = 0; j < n; j++)
            buf[j] = pat(st->salt, st->sent + j);
        ssize_t r = cq_kcp_send(s->k[i], buf, n);
        if (s->allow_enomem && r == -ENOMEM)
            break;
        assert_true(r >= 0 && (size_t)r <= n);
        st->sent += (uint64_t)r;
        if ((size_t)r < n)
            break;
    }
}

static void pump_recv(sim_t *s, int i)
{
    stream_t *st = &s->st[1 - i]; /* what the peer sends to k[i] */
    uint8_t buf[2500];
    size_t n;
    while ((n = cq_kcp_recv(s->k[i], buf, 1 + rnd(&s->rng) % sizeof(buf))) > 0) {
        assert_true(st->recvd + n <= st->total);
        for (size_t j = 0; j < n; j++)
            if (buf[j] != pat(st->salt, st->recvd + j))
                fail_msg("dir %d: byte %llu differs", 1 - i, (unsigned long long)(st->recvd + j));
        st->recvd += n;
    }
}

static void sim_step(sim_t *s)
{
    bool any;
    do {
        any = sim_deliver_one(s, 0);
        any = sim_deliver_one(s, 1) || any;
    } while (any);
    for (int i = 0; i < 2; i++) {
        if (s->read[i])
            pump_recv(s, i);
        uint64_t before = s->st[i].sent;
        pump_send(s, i);
        if (s->flush_on_send && s->st[i].sent != before)
            cq_kcp_flush(s->k[i], s->now);
        cq_kcp_update(s->k[i], s->now);
    }
    uint64_t next = UINT64_MAX;
    for (int i = 0; i < 2; i++) {
        uint64_t c = cq_kcp_check(s->k[i], s->now);
        assert_true(c >= s->now);
        next = CQ_MIN(next, c);
        for (size_t j = 0; j < s->link[i].n; j++)
            next = CQ_MIN(next, s->link[i].q[j].at);
    }
    s->now = next > s->now ? next : s->now + 1;
}

static bool sim_done(const sim_t *s)
{
    for (int i = 0; i < 2; i++)
        if (s->st[i].recvd != s->st[i].total || cq_kcp_waitsnd(s->k[i]) != 0)
            return false;
    return true;
}

/* Runs until both streams are through, failing after limit_ms of simulated time. */
static void sim_run(sim_t *s, uint64_t limit_ms)
{
    uint64_t end = s->now + limit_ms;
    while (!sim_done(s)) {
        if (s->now > end)
            fail_msg("transfer incomplete after %llu ms: a->b %llu/%llu, b->a %llu/%llu",
                     (unsigned long long)limit_ms, (unsigned long long)s->st[0].recvd,
                     (unsigned long long)s->st[0].total, (unsigned long long)s->st[1].recvd,
                     (unsigned long long)s->st[1].total);
        sim_step(s);
    }
    /* Nothing more arrives afterwards: no byte is delivered twice. */
    for (int i = 0; i < 50; i++)
        sim_step(s);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s->st[i].recvd, s->st[i].total);
        assert_int_equal(cq_kcp_readable(s->k[1 - i]), 0);
    }
}

static void sim_advance(sim_t *s, uint64_t ms)
{
    uint64_t end = s->now + ms;
    while (s->now < end)
        sim_step(s);
}

typedef struct netcfg {
    unsigned loss, dup, latency, jitter;
} netcfg_t;

static void sim_net(sim_t *s, netcfg_t n)
{
    for (int i = 0; i < 2; i++) {
        s->link[i].loss = n.loss;
        s->link[i].dup = n.dup;
        s->link[i].latency = n.latency;
        s->link[i].jitter = n.jitter;
    }
}

/* Both directions at once, total bytes each way. Returns the finished sim (caller frees). */
static void transfer(sim_t *s, const cq_kcp_opts_t *oa, const cq_kcp_opts_t *ob, netcfg_t n,
                     uint64_t total, uint64_t seed, uint64_t limit_ms)
{
    sim_init(s, oa, ob, 0x87054f12u, seed);
    sim_net(s, n);
    s->st[0].total = total;
    s->st[1].total = total;
    sim_run(s, limit_ms);
}

/* ---- interop format (transports.md §1) ----------------------------------------------------- */

typedef struct capture {
    uint8_t d[8][1500];
    size_t len[8];
    int n;
} capture_t;

static void cap_out(void *ud, const uint8_t *d, size_t len)
{
    capture_t *c = ud;
    assert_true(c->n < 8 && len <= sizeof(c->d[0]));
    memcpy(c->d[c->n], d, len);
    c->len[c->n++] = len;
}

static void test_header_bytes(void **state)
{
    (void)state;
    /* kcp-go defaults, without the congestion window so that both pieces go out at once. */
    cq_kcp_opts_t o = cq_kcp_opts_default();
    o.nc = true;
    capture_t ca = {0}, cb = {0};
    cq_kcp_t *a = cq_kcp_new(0x87054f12u, &o, cap_out, &ca);
    cq_kcp_t *b = cq_kcp_new(0x87054f12u, &o, cap_out, &cb);
    assert_non_null(a);
    assert_non_null(b);
    uint8_t msg[2000];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i % 251);
    assert_int_equal(cq_kcp_send(a, msg, sizeof(msg)), 2000);
    assert_int_equal(cq_kcp_waitsnd(a), 2);
    cq_kcp_flush(a, 0);
    /* 24 + 1376 = 1400 = mtu: one segment per datagram. */
    assert_int_equal(ca.n, 2);
    assert_int_equal(ca.len[0], 1400);
    assert_int_equal(ca.len[1], 24 + 624);
    static const uint8_t h0[24] = {0x12, 0x4f, 0x05, 0x87, 0x51, 0x00, 0x20, 0x00,
                                   0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                   0x00, 0x00, 0x00, 0x00, 0x60, 0x05, 0x00, 0x00};
    static const uint8_t h1[24] = {0x12, 0x4f, 0x05, 0x87, 0x51, 0x00, 0x20, 0x00,
                                   0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
                                   0x00, 0x00, 0x00, 0x00, 0x70, 0x02, 0x00, 0x00};
    assert_memory_equal(ca.d[0], h0, 24);
    assert_memory_equal(ca.d[1], h1, 24);
    assert_memory_equal(ca.d[0] + 24, msg, 1376);
    assert_memory_equal(ca.d[1] + 24, msg + 1376, 624);

    /* The ACK answering the first one: wnd 31 (one segment queued, unread), ts 0, sn 0, una 1. */
    assert_int_equal(cq_kcp_input(b, ca.d[0], ca.len[0], 0), 0);
    cq_kcp_flush(b, 0);
    assert_int_equal(cb.n, 1);
    assert_int_equal(cb.len[0], 24);
    static const uint8_t ack[24] = {0x12, 0x4f, 0x05, 0x87, 0x52, 0x00, 0x1f, 0x00,
                                    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    assert_memory_equal(cb.d[0], ack, 24);
    uint8_t got[2000];
    assert_int_equal(cq_kcp_recv(b, got, sizeof(got)), 1376);
    assert_memory_equal(got, msg, 1376);

    /* The ACK clears sn 0 on the sender. */
    assert_int_equal(cq_kcp_input(a, cb.d[0], cb.len[0], 5), 0);
    assert_int_equal(cq_kcp_waitsnd(a), 1);
    cq_kcp_free(a);
    cq_kcp_free(b);
}

/* With the congestion window on, the first flush sends one segment, and the ACK opens more. */
static void test_cwnd_slow_start(void **state)
{
    (void)state;
    capture_t ca = {0};
    cq_kcp_t *a = cq_kcp_new(7, NULL, cap_out, &ca);
    assert_non_null(a);
    uint8_t buf[1376 * 4] = {0};
    assert_int_equal(cq_kcp_send(a, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    cq_kcp_flush(a, 0);
    assert_int_equal(ca.n, 1);
    /* ACK sn 0 (una 0): snd_una advances, cwnd grows to 2. */
    uint8_t ackd[24];
    cq__kcp_hdr_t h = {7, CQ_KCP_CMD_ACK, 0, 32, 0, 0, 0, 0};
    cq__kcp_encode(ackd, &h);
    ca.n = 0;
    assert_int_equal(cq_kcp_input(a, ackd, sizeof(ackd), 20), 0);
    assert_int_equal(ca.n, 2); /* sent by the input that opened the window (kcp-go) */
    cq_kcp_flush(a, 20);
    assert_int_equal(ca.n, 2);
    cq_kcp_stats_t st;
    cq_kcp_stats(a, &st);
    assert_int_equal(st.cwnd, 2);
    assert_int_equal(st.snd_una, 1);
    assert_int_equal(st.snd_nxt, 3);
    assert_int_equal(st.srtt, 20);
    cq_kcp_free(a);
}

static void assert_push(const capture_t *c, int i, uint32_t sn, uint32_t ts)
{
    cq__kcp_hdr_t h;
    assert_true(i < c->n);
    assert_int_equal(c->len[i], 1400);
    cq__kcp_decode(c->d[i], &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_PUSH);
    assert_int_equal(h.sn, sn);
    assert_int_equal(h.ts, ts);
}

/* Item 13: on kcp-go's defaults (interval 100, congestion window on), the ACK that opens the
 * window sends the queued segments inside that same cq_kcp_input, as kcp-go's Input does, not
 * at the next interval tick; their retransmission is then due at send time + RTO. */
static void test_ack_opens_window(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(7, NULL, cap_out, &c);
    assert_non_null(k);
    uint8_t buf[1376 * 4] = {0};
    assert_int_equal(cq_kcp_send(k, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    cq_kcp_update(k, 0); /* cwnd 1: sn 0 only; the next tick is at 100 */
    assert_int_equal(c.n, 1);
    assert_push(&c, 0, 0, 0);
    assert_int_equal(cq_kcp_check(k, 20), 100);
    uint8_t ackd[24];
    cq__kcp_hdr_t h = {7, CQ_KCP_CMD_ACK, 0, 32, 0, 0, 1, 0};
    cq__kcp_encode(ackd, &h);
    c.n = 0;
    assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 20), 0);
    /* cwnd 2: sn 1 and 2 leave at 20, one full segment per datagram, nothing else. */
    assert_int_equal(c.n, 2);
    assert_push(&c, 0, 1, 20);
    assert_push(&c, 1, 2, 20);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.snd_nxt, 3);
    assert_int_equal(st.out_dgrams, 3);
    /* RTT 20: rto = 20 + max(interval 100, 4 * 10) = 120, first resend at 20 + 120 + 120 / 8. */
    assert_int_equal(st.rto, 120);
    c.n = 0;
    cq_kcp_update(k, 100); /* the tick: nothing is due */
    assert_int_equal(c.n, 0);
    assert_int_equal(cq_kcp_check(k, 100), 155);
    cq_kcp_update(k, 154);
    assert_int_equal(c.n, 0);
    cq_kcp_update(k, 155);
    assert_int_equal(c.n, 2);
    assert_push(&c, 0, 1, 155);
    assert_push(&c, 1, 2, 155);
    cq_kcp_stats(k, &st);
    assert_int_equal(st.retrans, 2);
    assert_int_equal(st.snd_nxt, 3);
    cq_kcp_free(k);
}

/* Every prefix of an ACK + PUSH datagram: header-short tails are ignored, a cut PUSH is
 * refused, and only the whole datagram delivers the data. */
static void test_every_prefix(void **state)
{
    (void)state;
    uint8_t d[24 + 24 + 100];
    cq__kcp_hdr_t ack = {5, CQ_KCP_CMD_ACK, 0, 32, 0, 9, 0, 0};
    cq__kcp_hdr_t push = {5, CQ_KCP_CMD_PUSH, 0, 32, 0, 0, 0, 100};
    cq__kcp_encode(d, &ack);
    cq__kcp_encode(d + 24, &push);
    for (int i = 0; i < 100; i++)
        d[48 + i] = (uint8_t)i;
    for (size_t n = 0; n <= sizeof(d); n++) {
        capture_t c = {0};
        cq_kcp_t *k = cq_kcp_new(5, NULL, cap_out, &c);
        assert_non_null(k);
        uint8_t *exact = malloc(n ? n : 1); /* exact size: ASan sees any over-read */
        assert_non_null(exact);
        memcpy(exact, d, n);
        int r = cq_kcp_input(k, exact, n, 0);
        free(exact);
        if (n < 48) {
            assert_int_equal(r, 0);
        } else if (n < sizeof(d)) {
            assert_int_equal(r, CQ_EKCPTRUNC);
        } else {
            assert_int_equal(r, 0);
        }
        assert_int_equal(cq_kcp_readable(k), n == sizeof(d) ? 100 : 0);
        cq_kcp_stats_t st;
        cq_kcp_stats(k, &st);
        assert_int_equal(st.in_segs, n < 24 ? 0 : (n == sizeof(d) ? 2 : 1));
        cq_kcp_free(k);
    }
}

/* ---- transfers ------------------------------------------------------------------------------ */

static void test_plain_default(void **state)
{
    (void)state;
    sim_t s;
    transfer(&s, NULL, NULL, (netcfg_t){0, 0, 20, 0}, 300000, 1, 60000);
    cq_kcp_stats_t st;
    cq_kcp_stats(s.k[0], &st);
    assert_int_equal(st.retrans, 0);
    assert_int_equal(st.fast_retrans, 0);
    /* RTT is 40 ms of simulated time plus up to one 100 ms flush interval of ACK delay. */
    assert_in_range(st.srtt, 40, 140);
    sim_free(&s);
}

static void test_plain_fast(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    transfer(&s, &f, &f, (netcfg_t){0, 0, 5, 0}, 1000000, 2, 60000);
    cq_kcp_stats_t st;
    cq_kcp_stats(s.k[1], &st);
    assert_int_equal(st.retrans, 0);
    assert_int_equal(st.in_dup, 0);
    assert_in_range(st.srtt, 10, 30);
    sim_free(&s);
}

/* A fast chanqd-style engine against a kcp-go-defaults peer (rcv_wnd 32, interval 100). */
static void test_fast_vs_default(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    transfer(&s, &f, NULL, (netcfg_t){1000, 0, 10, 5}, 200000, 3, 600000);
    cq_kcp_stats_t st;
    cq_kcp_stats(s.k[0], &st);
    assert_int_equal(st.rmt_wnd <= 32, true); /* the peer's small window is honoured */
    sim_free(&s);
}

static void test_loss_10(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    for (uint64_t seed = 10; seed < 13; seed++) {
        sim_t s;
        transfer(&s, &f, &f, (netcfg_t){1000, 0, 15, 0}, 300000, seed, 600000);
        cq_kcp_stats_t st;
        cq_kcp_stats(s.k[0], &st);
        assert_true(st.fast_retrans > 0); /* resend = 2 repairs most losses before the RTO */
        sim_free(&s);
        transfer(&s, NULL, NULL, (netcfg_t){1000, 0, 15, 0}, 100000, seed, 600000);
        sim_free(&s);
    }
}

static void test_loss_30(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    transfer(&s, &f, &f, (netcfg_t){3000, 0, 15, 0}, 200000, 30, 1800000);
    sim_free(&s);
    cq_kcp_opts_t d = cq_kcp_opts_default();
    d.dead_link = 1000; /* RTO backoff under 30 % loss may reach many transmissions */
    transfer(&s, &d, &d, (netcfg_t){3000, 0, 15, 0}, 50000, 31, 3600000);
    sim_free(&s);
}

static void test_reorder(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    transfer(&s, &f, &f, (netcfg_t){0, 0, 5, 60}, 400000, 40, 600000);
    assert_true(s.max_rbuf[1] > 1); /* segments did arrive out of order */
    sim_free(&s);
    transfer(&s, NULL, NULL, (netcfg_t){500, 0, 5, 80}, 100000, 41, 600000);
    sim_free(&s);
}

static void test_dup(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    transfer(&s, &f, &f, (netcfg_t){0, 3000, 5, 10}, 300000, 50, 600000);
    cq_kcp_stats_t st;
    cq_kcp_stats(s.k[1], &st);
    assert_true(st.in_dup > 0); /* duplicates arrived and were dropped */
    sim_free(&s);
    /* Everything at once: loss, duplication and reordering. */
    transfer(&s, &f, NULL, (netcfg_t){1500, 1500, 10, 40}, 150000, 51, 1800000);
    sim_free(&s);
}

/* Application flushes right after writing (kcp-go's Write), plus ack_nodelay on one side. */
static void test_flush_on_send(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    sim_init(&s, &f, NULL, 99, 60);
    sim_net(&s, (netcfg_t){1000, 0, 8, 4});
    s.flush_on_send = true;
    s.st[0].total = 200000;
    s.st[1].total = 50000;
    sim_run(&s, 600000);
    sim_free(&s);
}

/* ---- windows -------------------------------------------------------------------------------- */

static size_t count_taps(const sim_t *s, int dir, uint8_t cmd)
{
    size_t n = 0;
    for (size_t i = 0; i < s->ntaps; i++)
        n += s->taps[i].dir == dir && s->taps[i].cmd == cmd;
    return n;
}

static void test_zero_window_probe(void **state)
{
    (void)state;
    sim_t s;
    sim_init(&s, NULL, NULL, 3, 70); /* kcp-go defaults: rcv_wnd 32 */
    sim_net(&s, (netcfg_t){0, 0, 10, 0});
    s.read[1] = false; /* b's application does not read */
    s.st[0].total = 100 * 1376;
    s.tapping = true;
    sim_advance(&s, 3000);
    cq_kcp_stats_t sa, sb;
    cq_kcp_stats(s.k[0], &sa);
    cq_kcp_stats(s.k[1], &sb);
    assert_int_equal(sb.rcv_queue, 32); /* queue full: capped at rcv_wnd */
    assert_int_equal(sa.rmt_wnd, 0);    /* b advertises a zero window */
    assert_int_equal(sa.snd_una, sa.snd_nxt);
    assert_int_equal(sa.snd_nxt, 32); /* and a sends nothing new */
    assert_int_equal(count_taps(&s, 0, CQ_KCP_CMD_WASK), 0);

    /* After probe_wait (7 s) a asks, and b answers with WINS (still 0); then the wait grows
     * by half each time: 10.5 s, 15.75 s. Probes go out with the interval's flushes. */
    sim_advance(&s, 40000);
    assert_int_equal(count_taps(&s, 0, CQ_KCP_CMD_WASK), 3);
    assert_int_equal(count_taps(&s, 1, CQ_KCP_CMD_WINS), 3);
    uint64_t w[3];
    size_t nw = 0;
    for (size_t i = 0; i < s.ntaps; i++)
        if (s.taps[i].dir == 1 && s.taps[i].cmd != CQ_KCP_CMD_ACK)
            assert_int_equal(s.taps[i].wnd, 0);
        else if (s.taps[i].dir == 0 && s.taps[i].cmd == CQ_KCP_CMD_WASK)
            w[nw++] = s.taps[i].at;
    assert_int_equal(w[1] - w[0], 10500);
    assert_int_equal(w[2] - w[1], 15800); /* 15750, at the next 100 ms flush */
    cq_kcp_stats(s.k[0], &sa);
    assert_int_equal(sa.snd_nxt, 32);

    /* b reads: at its next flush a WINS tells a that the window reopened (long before the
     * next probe is due), and the transfer completes. */
    s.read[1] = true;
    sim_advance(&s, 300);
    assert_int_equal(count_taps(&s, 0, CQ_KCP_CMD_WASK), 3);
    assert_int_equal(count_taps(&s, 1, CQ_KCP_CMD_WINS), 4);
    cq_kcp_stats(s.k[0], &sa);
    assert_true(sa.rmt_wnd > 0 && sa.snd_nxt > 32);
    sim_run(&s, 600000);
    sim_free(&s);
}

/* A PUSH beyond rcv_nxt + rcv_wnd is neither stored nor acknowledged. */
static void test_beyond_window(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, NULL, cap_out, &c);
    assert_non_null(k);
    uint8_t d[24 + 4];
    cq__kcp_hdr_t h = {1, CQ_KCP_CMD_PUSH, 0, 32, 0, 32, 0, 4};
    cq__kcp_encode(d, &h);
    memcpy(d + 24, "abcd", 4);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0);
    h.sn = 31; /* the last sn inside the window: held out of order, acknowledged */
    cq__kcp_encode(d, &h);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0); /* duplicate: acked again */
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.rcv_buf, 1);
    assert_int_equal(st.in_dup, 2);
    assert_int_equal(cq_kcp_readable(k), 0);
    cq_kcp_flush(k, 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.len[0], 48);
    cq__kcp_hdr_t a;
    cq__kcp_decode(c.d[0], &a);
    assert_int_equal(a.cmd, CQ_KCP_CMD_ACK);
    assert_int_equal(a.sn, 31);
    assert_int_equal(a.una, 0);
    cq_kcp_free(k);
}

/* A peer that ignores our window: the unread queue stops at rcv_wnd, out-of-order storage at
 * rcv_wnd more, and the rest is dropped unacknowledged; reading lets everything through. */
static void test_window_caps(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, NULL, cap_out, &c);
    assert_non_null(k);
    uint8_t d[24 + 2];
    for (uint32_t sn = 0; sn < 100; sn++) {
        cq__kcp_hdr_t h = {1, CQ_KCP_CMD_PUSH, 0, 128, 0, sn, 0, 2};
        cq__kcp_encode(d, &h);
        d[24] = (uint8_t)sn;
        d[25] = (uint8_t)~sn;
        assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0);
        assert_true(k->ack_count <= 64);
    }
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.rcv_queue, 32);
    assert_int_equal(st.rcv_buf, 32);
    assert_int_equal(st.rcv_nxt, 32);
    assert_int_equal(st.in_dup, 100 - 64);
    assert_int_equal(cq_kcp_readable(k), 64);
    c.n = 0;
    cq_kcp_flush(k, 0);
    cq__kcp_hdr_t a;
    cq__kcp_decode(c.d[0], &a);
    assert_int_equal(a.wnd, 0); /* truthful: nothing free */
    uint8_t out[200];
    assert_int_equal(cq_kcp_recv(k, out, sizeof(out)), 128); /* 64 segments */
    for (uint32_t i = 0; i < 64; i++) {
        assert_int_equal(out[2 * i], (uint8_t)i);
        assert_int_equal(out[2 * i + 1], (uint8_t)~i);
    }
    cq_kcp_stats(k, &st);
    assert_int_equal(st.rcv_nxt, 64);
    assert_int_equal(st.rcv_queue, 0);
    cq_kcp_free(k);
}

/* Two later ACKs resend a segment before its RTO (resend = 2); with resend = 0 they do not
 * while new data goes out in the same flush (else early retransmit applies: see below). */
static void test_fast_resend(void **state)
{
    (void)state;
    for (int on = 0; on < 2; on++) {
        cq_kcp_opts_t o = cq_kcp_opts_fast();
        o.resend = on ? 2 : 0;
        o.ack_nodelay = false;
        capture_t c = {0};
        cq_kcp_t *k = cq_kcp_new(1, &o, cap_out, &c);
        assert_non_null(k);
        uint8_t buf[4 * 1376] = {0};
        assert_int_equal(cq_kcp_send(k, buf, sizeof(buf)), (ssize_t)sizeof(buf));
        cq_kcp_flush(k, 0);
        assert_int_equal(c.n, 4);
        for (uint32_t sn = 1; sn <= 2; sn++) { /* sn 0 was lost; 1 and 2 arrived */
            uint8_t ackd[24];
            cq__kcp_hdr_t h = {1, CQ_KCP_CMD_ACK, 0, 128, 0, sn, 0, 0};
            cq__kcp_encode(ackd, &h);
            assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 5 + sn), 0);
        }
        c.n = 0;
        assert_int_equal(cq_kcp_send(k, buf, 10), 10); /* sn 4, admitted by the next flush */
        cq_kcp_flush(k, 8);                            /* the RTO (200 ms) is far away */
        cq_kcp_stats_t st;
        cq_kcp_stats(k, &st);
        assert_int_equal(st.retrans, 0);
        assert_int_equal(st.fast_retrans, (uint64_t)on);
        assert_int_equal(c.n, 1 + on);
        cq__kcp_hdr_t hn;
        cq__kcp_decode(c.d[on], &hn);
        assert_int_equal(hn.sn, 4);
        if (on) {
            cq__kcp_hdr_t h;
            cq__kcp_decode(c.d[0], &h);
            assert_int_equal(h.sn, 0);
            assert_int_equal(h.ts, 8);
            c.n = 0;
            cq_kcp_flush(k, 9); /* fastack was reset: no second resend */
            assert_int_equal(c.n, 0);
            /* ACKs of segments sent before the resend (ts 0 < 8) do not count against it. */
            uint8_t ackd[24];
            cq__kcp_hdr_t h3 = {1, CQ_KCP_CMD_ACK, 0, 128, 0, 3, 0, 0};
            cq__kcp_encode(ackd, &h3);
            assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 10), 0);
            assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 11), 0);
            cq_kcp_flush(k, 12);
            assert_int_equal(c.n, 0);
            /* The ACK of the resent copy (ts 8) is no RTT sample: srtt keeps the first ones. */
            cq_kcp_stats(k, &st);
            uint32_t srtt = st.srtt;
            cq__kcp_hdr_t h0 = {1, CQ_KCP_CMD_ACK, 0, 128, 8, 0, 0, 0};
            cq__kcp_encode(ackd, &h0);
            assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 500), 0);
            cq_kcp_stats(k, &st);
            assert_int_equal(st.srtt, srtt);
            assert_int_equal(st.snd_una, 4);
        }
        cq_kcp_free(k);
    }
}

/* kcp-go's early retransmit: one later ACK resends the skipped segment at the next flush that
 * sends no new data, whatever resend says; a flush that sends new data does not. */
static void test_early_retransmit(void **state)
{
    (void)state;
    cq_kcp_opts_t o = cq_kcp_opts_default();
    o.nc = true; /* all four in flight at once */
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, &o, cap_out, &c);
    assert_non_null(k);
    uint8_t buf[4 * 1376] = {0};
    assert_int_equal(cq_kcp_send(k, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    cq_kcp_flush(k, 0);
    assert_int_equal(c.n, 4);
    uint8_t ackd[24];
    cq__kcp_hdr_t h = {1, CQ_KCP_CMD_ACK, 0, 32, 0, 1, 0, 0}; /* sn 1 arrived, sn 0 did not */
    cq__kcp_encode(ackd, &h);
    assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 30), 0);
    c.n = 0;
    assert_int_equal(cq_kcp_send(k, buf, 10), 10);
    cq_kcp_flush(k, 40); /* new data (sn 4) goes out: no early retransmit */
    assert_int_equal(c.n, 1);
    cq__kcp_hdr_t d;
    cq__kcp_decode(c.d[0], &d);
    assert_int_equal(d.sn, 4);
    c.n = 0;
    cq_kcp_flush(k, 50); /* nothing new: sn 0 is resent now, long before its RTO */
    assert_int_equal(c.n, 1);
    cq__kcp_decode(c.d[0], &d);
    assert_int_equal(d.cmd, CQ_KCP_CMD_PUSH);
    assert_int_equal(d.sn, 0);
    assert_int_equal(d.ts, 50);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.fast_retrans, 1);
    assert_int_equal(st.retrans, 0);
    c.n = 0;
    cq_kcp_flush(k, 60); /* once per later ACK */
    assert_int_equal(c.n, 0);
    cq_kcp_free(k);
}

/* ---- anti-amplification (item 14) ------------------------------------------------------------ */

#define AMP_OFF 0x5a5a0000u

/* A server engine (kcp-go defaults, no congestion window, amp_factor 3, ts_offset AMP_OFF) that
 * received one 43-byte PUSH sn 0 (19 payload bytes) at time 0 and queued reply bytes. */
static cq_kcp_t *amp_server(capture_t *c, size_t reply)
{
    cq_kcp_opts_t o = cq_kcp_opts_default();
    o.nc = true;
    o.amp_factor = 3;
    o.ts_offset = AMP_OFF;
    cq_kcp_t *k = cq_kcp_new(5, &o, cap_out, c);
    assert_non_null(k);
    uint8_t d[43] = {0};
    cq__kcp_hdr_t h = {5, CQ_KCP_CMD_PUSH, 0, 32, 0, 0, 0, 19};
    cq__kcp_encode(d, &h);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0);
    uint8_t buf[5000] = {0};
    assert_int_equal(cq_kcp_recv(k, buf, sizeof(buf)), 19);
    assert_int_equal(cq_kcp_send(k, buf, reply), (ssize_t)reply);
    return k;
}

static void amp_input(cq_kcp_t *k, uint8_t cmd, uint32_t sn, uint32_t ts, uint32_t una,
                      uint64_t now)
{
    uint8_t d[24];
    cq__kcp_hdr_t h = {5, cmd, 0, 32, ts, sn, una, 0};
    cq__kcp_encode(d, &h);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), now), 0);
}

/* A spoofed source that never answers: 43 bytes in, at most 129 out, whatever the timers do. */
static void test_amp_spoofed(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = amp_server(&c, 17);
    for (uint64_t t = 0; t <= 60000; t += 5)
        cq_kcp_update(k, t);
    /* At 0: ACK + PUSH (24 + 24 + 17 = 65). At 225 (rto 200 + 200 / 8) the resend, 41 bytes:
     * 106 in all. Each later resend (625, 1425, 3025, 6225, 12625, 25425, 51025: rto doubling)
     * would pass 129, and so would a WASK (130): 7 held back. */
    assert_int_equal(c.n, 2);
    assert_int_equal(c.len[0], 65);
    assert_int_equal(c.len[1], 41);
    cq__kcp_hdr_t h;
    cq__kcp_decode(c.d[0] + 24, &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_PUSH);
    assert_int_equal(h.ts, AMP_OFF); /* sent at 0: the ts carries the offset */
    cq__kcp_decode(c.d[1], &h);
    assert_int_equal(h.ts, AMP_OFF + 225);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.in_bytes, 43);
    assert_int_equal(st.out_bytes, 106);
    assert_int_equal(st.out_dgrams, 2);
    assert_int_equal(st.amp_blocked, 7);
    assert_int_equal(st.xmit_max, 9);
    assert_false(st.verified);
    cq_kcp_free(k);
}

/* The same on chanqd's fast profile: the ACK leaves at once, alone. */
static void test_amp_spoofed_fast(void **state)
{
    (void)state;
    cq_kcp_opts_t o = cq_kcp_opts_fast();
    o.amp_factor = 3;
    o.ts_offset = AMP_OFF;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(5, &o, cap_out, &c);
    assert_non_null(k);
    uint8_t d[43] = {0};
    cq__kcp_hdr_t h = {5, CQ_KCP_CMD_PUSH, 0, 32, 0, 0, 0, 19};
    cq__kcp_encode(d, &h);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 0), 0);
    assert_int_equal(c.n, 1); /* the ACK, 24 */
    uint8_t buf[19];
    assert_int_equal(cq_kcp_recv(k, buf, sizeof(buf)), 19);
    assert_int_equal(cq_kcp_send(k, buf, 17), 17);
    for (uint64_t t = 0; t <= 10000; t += 5)
        cq_kcp_update(k, t);
    /* sn 0 at 0 (41) and at 200 (41): 106. Then 500, 950, 1625, 2637, 4155, 6432, 9847 (rto
     * x1.5) are over 129, and so is a WASK (130). */
    assert_int_equal(c.n, 3);
    assert_int_equal(c.len[0], 24);
    assert_int_equal(c.len[1], 41);
    assert_int_equal(c.len[2], 41);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.out_bytes, 106);
    assert_int_equal(st.amp_blocked, 7);
    assert_false(st.verified);
    cq_kcp_free(k);
}

/* An ACK proves the peer receives only if it echoes the ts we sent (offset included); then the
 * limit is off for good. New data keeps 48 bytes of the budget for resending the oldest segment
 * or a probe; the oldest segment may use all of it. */
static void test_amp_echo_proves(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = amp_server(&c, 17); /* 43 in: 129 allowed */
    cq_kcp_flush(k, 0);               /* ACK + sn 0: 65 */
    uint8_t buf[5000] = {0};
    assert_int_equal(cq_kcp_send(k, buf, 17), 17);
    cq_kcp_flush(k, 10); /* sn 1 (41) would leave less than 48: held; a WASK (24): 89 */
    assert_int_equal(c.n, 2);
    assert_int_equal(c.len[1], 24);
    cq__kcp_hdr_t h;
    cq__kcp_decode(c.d[1], &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_WASK);
    amp_input(k, CQ_KCP_CMD_ACK, 0, 0, 0, 20); /* a blind guess of our clock: no proof */
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_false(st.verified);
    assert_int_equal(st.snd_una, 1); /* it still acknowledges sn 0 */
    assert_int_equal(c.n, 2);
    cq_kcp_flush(k, 234);
    assert_int_equal(c.n, 2);
    cq_kcp_flush(k, 235); /* sn 1's timeout (10 + 200 + 25); the oldest now: 130 of 201 */
    assert_int_equal(c.n, 3);
    assert_int_equal(c.len[2], 41);
    cq__kcp_decode(c.d[2], &h);
    assert_int_equal(h.sn, 1);
    assert_int_equal(h.ts, AMP_OFF + 235);
    amp_input(k, CQ_KCP_CMD_ACK, 1, AMP_OFF + 235, 0, 245); /* the echo */
    cq_kcp_stats(k, &st);
    assert_true(st.verified);
    assert_int_equal(st.amp_blocked, 1);
    c.n = 0;
    assert_int_equal(cq_kcp_send(k, buf, 4000), 4000);
    cq_kcp_flush(k, 250); /* no limit now: 1376 + 1376 + 1248 bytes */
    assert_int_equal(c.n, 3);
    cq_kcp_stats(k, &st);
    assert_int_equal(st.out_bytes, 130 + 1400 + 1400 + 1272);
    assert_int_equal(st.amp_blocked, 1);
    cq_kcp_free(k);
}

/* Nothing of ours in flight was acknowledged by echo (una took it): the empty PUSH probe's ACK
 * is the proof, and releases what was held back in the same input. */
static void test_amp_probe_echo(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = amp_server(&c, 17);
    cq_kcp_flush(k, 0);                         /* ACK + sn 0: 65 */
    amp_input(k, CQ_KCP_CMD_WINS, 0, 0, 1, 30); /* una 1 takes sn 0; budget 3 * 67 = 201 */
    uint8_t buf[2000] = {0};
    assert_int_equal(cq_kcp_send(k, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    c.n = 0;
    cq_kcp_flush(k, 40); /* sn 1 (1400) and sn 2 (648) are over: only the probe goes, 89 */
    assert_int_equal(c.n, 1);
    assert_int_equal(c.len[0], 24);
    cq__kcp_hdr_t h;
    cq__kcp_decode(c.d[0], &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_PUSH);
    assert_int_equal(h.sn, 0);
    assert_int_equal(h.len, 0);
    assert_int_equal(h.ts, AMP_OFF + 40);
    amp_input(k, CQ_KCP_CMD_ACK, 0, AMP_OFF + 39, 1, 45); /* a wrong echo proves nothing */
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_false(st.verified);
    assert_int_equal(c.n, 1);
    amp_input(k, CQ_KCP_CMD_ACK, 0, AMP_OFF + 40, 1, 50); /* the echo */
    cq_kcp_stats(k, &st);
    assert_true(st.verified);
    assert_int_equal(c.n, 3); /* sn 1 and 2 released inside that input */
    assert_int_equal(c.len[1], 1400);
    assert_int_equal(c.len[2], 648);
    cq__kcp_decode(c.d[2], &h);
    assert_int_equal(h.sn, 2);
    assert_int_equal(st.amp_blocked, 2);
    cq_kcp_free(k);
}

/* A reply too big for the budget: the ACK and a WASK go, the real peer's WINS adds 72 bytes of
 * budget, and the retransmission then fits. */
static void test_amp_wask_probe(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = amp_server(&c, 100);
    cq_kcp_flush(k, 0); /* ACK (24) fits, PUSH (124) would make 148: held back; WASK: 48 */
    assert_int_equal(c.n, 1);
    assert_int_equal(c.len[0], 48);
    cq__kcp_hdr_t h;
    cq__kcp_decode(c.d[0], &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_ACK);
    cq__kcp_decode(c.d[0] + 24, &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_WASK);
    amp_input(k, CQ_KCP_CMD_WINS, 0, 0, 0, 30); /* budget 3 * 67 = 201 */
    cq_kcp_flush(k, 224);
    assert_int_equal(c.n, 1);
    cq_kcp_flush(k, 225); /* the timeout of sn 0: 124 bytes, 172 in all */
    assert_int_equal(c.n, 2);
    assert_int_equal(c.len[1], 124);
    cq__kcp_decode(c.d[1], &h);
    assert_int_equal(h.cmd, CQ_KCP_CMD_PUSH);
    assert_int_equal(h.ts, AMP_OFF + 225);
    amp_input(k, CQ_KCP_CMD_ACK, 0, AMP_OFF + 225, 1, 240);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_true(st.verified);
    assert_int_equal(st.snd_una, 1);
    assert_int_equal(st.out_bytes, 172);
    assert_int_equal(st.amp_blocked, 1);
    cq_kcp_free(k);
}

/* Both are off in the profiles (clients, kcp_echo): no limit, and ts is the clock. */
static void test_amp_off(void **state)
{
    (void)state;
    cq_kcp_opts_t d = cq_kcp_opts_default(), f = cq_kcp_opts_fast();
    assert_int_equal(d.amp_factor, 0);
    assert_int_equal(d.ts_offset, 0);
    assert_int_equal(f.amp_factor, 0);
    assert_int_equal(f.ts_offset, 0);
    capture_t c = {0};
    d.nc = true;
    cq_kcp_t *k = cq_kcp_new(5, &d, cap_out, &c);
    assert_non_null(k);
    uint8_t buf[3000] = {0};
    assert_int_equal(cq_kcp_send(k, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    cq_kcp_flush(k, 70); /* nothing received, and still all of it goes out */
    assert_int_equal(c.n, 3);
    cq__kcp_hdr_t h;
    cq__kcp_decode(c.d[2], &h);
    assert_int_equal(h.ts, 70);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.out_bytes, 3000 + 3 * 24);
    assert_int_equal(st.amp_blocked, 0);
    cq_kcp_free(k);
}

/* ---- timers --------------------------------------------------------------------------------- */

/* Transmission times of a's first data segment while everything a sends is lost. */
static size_t rto_times(const cq_kcp_opts_t *o, uint64_t *times, size_t max, bool *dead_at_limit)
{
    sim_t s;
    sim_init(&s, o, NULL, 11, 80);
    s.link[0].block = true;
    s.st[0].total = 100;
    s.tapping = true;
    size_t n = 0;
    *dead_at_limit = false;
    while (n < max && s.now < 5000000) {
        bool dead_before = cq_kcp_dead(s.k[0]);
        size_t had = s.ntaps;
        sim_step(&s);
        for (size_t i = had; i < s.ntaps; i++)
            if (s.taps[i].dir == 0 && s.taps[i].cmd == CQ_KCP_CMD_PUSH) {
                assert_int_equal(s.taps[i].sn, 0);
                times[n++] = s.taps[i].at;
                /* dead is set by the dead_link-th transmission, not before */
                assert_false(dead_before);
                cq_kcp_stats_t st;
                cq_kcp_stats(s.k[0], &st);
                assert_int_equal(st.xmit_max, n);
                if (n == o->dead_link)
                    *dead_at_limit = cq_kcp_dead(s.k[0]);
            }
    }
    sim_free(&s);
    return n;
}

static void test_rto_backoff(void **state)
{
    (void)state;
    uint64_t t[20];
    bool dead;
    cq_kcp_opts_t d = cq_kcp_opts_default(); /* nodelay 0: rto doubles, 200 ms first */
    size_t n = rto_times(&d, t, 20, &dead);
    assert_int_equal(n, 20);
    assert_true(dead);
    /* first timeout: rto 200 + rto/8; then 400, 800, ... doubling up to 60 s */
    assert_int_equal(t[1] - t[0], 200 + 200 / 8);
    uint64_t gap = 200;
    for (size_t i = 2; i < n; i++) {
        gap = CQ_MIN(gap * 2, (uint64_t)CQ_KCP_RTO_MAX);
        assert_int_equal(t[i] - t[i - 1], gap);
    }
    assert_int_equal(t[19] - t[18], CQ_KCP_RTO_MAX); /* capped */

    cq_kcp_opts_t f = cq_kcp_opts_fast(); /* nodelay 1: rto grows by half */
    f.dead_link = 8;
    n = rto_times(&f, t, 8, &dead);
    assert_int_equal(n, 8);
    assert_true(dead);
    uint32_t rto = 200;
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(t[i] - t[i - 1], rto);
        rto += rto / 2;
    }
}

static void test_check_schedule(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, NULL, cap_out, &c);
    assert_non_null(k);
    assert_int_equal(cq_kcp_check(k, 500), 500); /* never updated: due now */
    cq_kcp_update(k, 500);
    assert_int_equal(cq_kcp_check(k, 500), 600);
    assert_int_equal(cq_kcp_check(k, 550), 600);
    assert_int_equal(cq_kcp_check(k, 600), 600);
    uint8_t b[10] = {0};
    assert_int_equal(cq_kcp_send(k, b, sizeof(b)), 10);
    cq_kcp_update(k, 600); /* sends sn 0, resend due at 600 + 200 + 25 */
    assert_int_equal(c.n, 1);
    assert_int_equal(cq_kcp_check(k, 600), 700);
    cq_kcp_update(k, 700);
    cq_kcp_update(k, 800);
    assert_int_equal(cq_kcp_check(k, 800), 825);
    assert_int_equal(cq_kcp_check(k, 900), 900);
    /* A clock jump resynchronises instead of flushing in a burst. */
    cq_kcp_update(k, 100000);
    assert_int_equal(cq_kcp_check(k, 100000), 100000 + 100);
    cq_kcp_free(k);
}

static void test_ack_nodelay(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(9, &f, cap_out, &c);
    assert_non_null(k);
    uint8_t d[24 + 3];
    cq__kcp_hdr_t h = {9, CQ_KCP_CMD_PUSH, 0, 32, 77, 0, 0, 3};
    cq__kcp_encode(d, &h);
    memcpy(d + 24, "xyz", 3);
    assert_int_equal(cq_kcp_input(k, d, sizeof(d), 1000), 0);
    assert_int_equal(c.n, 1); /* the ACK left inside input */
    cq__kcp_hdr_t a;
    cq__kcp_decode(c.d[0], &a);
    assert_int_equal(a.cmd, CQ_KCP_CMD_ACK);
    assert_int_equal(a.ts, 77);
    assert_int_equal(a.una, 1);
    assert_int_equal(a.wnd, 127);
    /* WASK is answered with WINS at once too. */
    h.cmd = CQ_KCP_CMD_WASK;
    h.len = 0;
    cq__kcp_encode(d, &h);
    assert_int_equal(cq_kcp_input(k, d, 24, 1001), 0);
    assert_int_equal(c.n, 2);
    cq__kcp_decode(c.d[1], &a);
    assert_int_equal(a.cmd, CQ_KCP_CMD_WINS);
    cq_kcp_free(k);
}

/* ---- sequence numbers near 2^32 ------------------------------------------------------------- */

static void set_sn(cq_kcp_t *snd, cq_kcp_t *rcv, uint32_t sn)
{
    snd->snd_una = snd->snd_nxt = sn;
    rcv->rcv_nxt = sn;
}

static void test_sn_wraparound(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    const cq_kcp_opts_t *profiles[2] = {&f, NULL};
    for (int p = 0; p < 2; p++) {
        sim_t s;
        sim_init(&s, profiles[p], profiles[p], 21, 90 + (uint64_t)p);
        sim_net(&s, (netcfg_t){1000, 500, 10, 20});
        set_sn(s.k[0], s.k[1], 0xffffffffu - 100);
        set_sn(s.k[1], s.k[0], 0xffffffffu - 3);
        s.st[0].total = 400 * 1376;
        s.st[1].total = 30 * 1376;
        sim_run(&s, 3600000);
        cq_kcp_stats_t st;
        cq_kcp_stats(s.k[0], &st);
        assert_true(st.snd_nxt >= 299 && st.snd_nxt < 100000); /* wrapped */
        assert_int_equal(st.snd_una, st.snd_nxt);
        cq_kcp_stats(s.k[1], &st);
        assert_int_equal(st.rcv_nxt, s.k[0]->snd_nxt);
        sim_free(&s);
    }
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_segments(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(0x01020304u, NULL, cap_out, &c);
    assert_non_null(k);
    uint8_t d[3 * 24 + 8];
    cq__kcp_hdr_t push = {0x01020304u, CQ_KCP_CMD_PUSH, 0, 32, 0, 0, 0, 8};
    cq__kcp_hdr_t bad = push;

    /* conv mismatch on the first segment: nothing processed */
    bad.conv = 0x01020305u;
    cq__kcp_encode(d, &bad);
    assert_int_equal(cq_kcp_input(k, d, 24 + 8, 0), CQ_EKCPCONV);
    assert_int_equal(cq_kcp_readable(k), 0);

    /* a valid PUSH, then an unknown cmd: the PUSH stays processed */
    cq__kcp_encode(d, &push);
    memcpy(d + 24, "12345678", 8);
    for (unsigned cmd = 0; cmd < 256; cmd++) {
        if (cmd >= CQ_KCP_CMD_PUSH && cmd <= CQ_KCP_CMD_WINS)
            continue;
        bad = push;
        bad.cmd = (uint8_t)cmd;
        bad.len = 0;
        cq__kcp_encode(d + 32, &bad);
        assert_int_equal(cq_kcp_input(k, d, 32 + 24, 0), CQ_EKCPCMD);
    }
    assert_int_equal(cq_kcp_readable(k), 8); /* the first copy; the rest were duplicates */

    /* len past the end of the datagram */
    bad = push;
    bad.sn = 1;
    bad.len = 9;
    cq__kcp_encode(d, &bad);
    assert_int_equal(cq_kcp_input(k, d, 24 + 8, 0), CQ_EKCPTRUNC);
    bad.len = 0xffffffffu;
    cq__kcp_encode(d, &bad);
    assert_int_equal(cq_kcp_input(k, d, 24 + 8, 0), CQ_EKCPTRUNC);

    /* an oversized PUSH (beyond 1500 - 24) in a big datagram */
    size_t big = 24 + 1477;
    uint8_t *g = calloc(1, big);
    assert_non_null(g);
    bad.len = 1477;
    cq__kcp_encode(g, &bad);
    assert_int_equal(cq_kcp_input(k, g, big, 0), CQ_ETOOBIG);
    bad.len = 1476; /* the largest accepted */
    cq__kcp_encode(g, &bad);
    assert_int_equal(cq_kcp_input(k, g, big - 1, 0), 0);
    assert_int_equal(cq_kcp_readable(k), 8 + 1476);
    free(g);

    /* short datagrams and short tails are ignored */
    assert_int_equal(cq_kcp_input(k, d, 23, 0), 0);
    assert_int_equal(cq_kcp_input(k, d, 0, 0), 0);
    cq_kcp_free(k);
}

static void test_garbage(void **state)
{
    (void)state;
    capture_t c = {0};
    uint64_t rng = 0xfeedfaceULL;
    cq_kcp_t *k = cq_kcp_new(0xabcdef01u, NULL, cap_out, &c);
    assert_non_null(k);
    uint8_t d[1600];
    for (int iter = 0; iter < 40000; iter++) {
        size_t len = rnd(&rng) % sizeof(d);
        for (size_t i = 0; i < len; i++)
            d[i] = (uint8_t)rnd(&rng);
        /* Make most of it plausible: right conv, valid cmd, small len, nearby sn. */
        for (size_t off = 0; off + 24 <= len; off += 24 + (d[off + 20] & 0x3f)) {
            if (rnd(&rng) % 8)
                cq__kcp_put32(d + off, 0xabcdef01u);
            if (rnd(&rng) % 8)
                d[off + 4] = (uint8_t)(CQ_KCP_CMD_PUSH + rnd(&rng) % 4);
            if (rnd(&rng) % 4)
                cq__kcp_put32(d + off + 20, d[off + 20] & 0x3f);
            if (rnd(&rng) % 2)
                cq__kcp_put32(d + off + 12, k->rcv_nxt + (uint32_t)(rnd(&rng) % 64) - 8);
        }
        int r = cq_kcp_input(k, d, len, (uint64_t)iter);
        assert_true(r == 0 || r == CQ_EKCPCONV || r == CQ_EKCPCMD || r == CQ_EKCPTRUNC ||
                    r == CQ_ETOOBIG);
        if (iter % 7 == 0)
            cq_kcp_update(k, (uint64_t)iter);
        if (iter % 3 == 0) {
            uint8_t out[512];
            assert_true(cq_kcp_recv(k, out, sizeof(out)) <= sizeof(out));
        }
        c.n = 0;
        cq_kcp_stats_t st;
        cq_kcp_stats(k, &st);
        assert_true(st.rcv_queue <= 32 && st.rcv_buf <= 32);
        assert_true(k->ack_count <= 64);
    }
    cq_kcp_free(k);
}

/* Datagrams for another conversation change nothing on a live pair. */
static void test_conv_mismatch_live(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    sim_t s;
    sim_init(&s, &f, &f, 1000, 100);
    sim_net(&s, (netcfg_t){500, 0, 5, 5});
    s.st[0].total = 200000;
    s.st[1].total = 200000;
    uint64_t rng = 77;
    for (int i = 0; i < 300; i++) {
        sim_step(&s);
        uint8_t d[24 + 16];
        cq__kcp_hdr_t h = {1001, CQ_KCP_CMD_PUSH, 0, 0, 0, s.k[1]->rcv_nxt, 0xffff, 16};
        cq__kcp_encode(d, &h);
        for (int j = 0; j < 16; j++)
            d[24 + j] = (uint8_t)rnd(&rng);
        cq_kcp_stats_t b, a;
        cq_kcp_stats(s.k[1], &b);
        assert_int_equal(cq_kcp_input(s.k[1], d, sizeof(d), s.now), CQ_EKCPCONV);
        cq_kcp_stats(s.k[1], &a);
        assert_int_equal(a.in_dgrams, b.in_dgrams + 1);
        assert_true(a.in_segs == b.in_segs && a.in_dup == b.in_dup && a.rcv_nxt == b.rcv_nxt);
        assert_true(a.rcv_queue == b.rcv_queue && a.rcv_buf == b.rcv_buf);
        assert_true(a.rmt_wnd == b.rmt_wnd && a.snd_una == b.snd_una && a.out_segs == b.out_segs);
    }
    sim_run(&s, 600000);
    sim_free(&s);
}

static void test_listener_helpers(void **state)
{
    (void)state;
    uint8_t d[24 + 4];
    cq__kcp_hdr_t h = {0x87054f12u, CQ_KCP_CMD_PUSH, 0, 32, 5, 0, 0, 4};
    cq__kcp_encode(d, &h);
    uint32_t conv = 0;
    assert_int_equal(cq_kcp_peek_conv(d, sizeof(d), &conv), 0);
    assert_int_equal(conv, 0x87054f12u);
    assert_int_equal(cq_kcp_peek_conv(d, 23, &conv), CQ_EKCPTRUNC);
    assert_true(cq_kcp_is_conv_start(d, sizeof(d)));
    assert_true(cq_kcp_is_conv_start(d, 24));
    assert_false(cq_kcp_is_conv_start(d, 23));
    h.sn = 1;
    cq__kcp_encode(d, &h);
    assert_false(cq_kcp_is_conv_start(d, sizeof(d)));
    h.sn = 0;
    h.cmd = CQ_KCP_CMD_ACK;
    cq__kcp_encode(d, &h);
    assert_false(cq_kcp_is_conv_start(d, sizeof(d)));
}

/* ---- API details ---------------------------------------------------------------------------- */

static void test_opts(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_opts_t o = cq_kcp_opts_default();
    assert_int_equal(cq_kcp_opts_check(&o), 0);
    assert_int_equal(o.rcv_wnd, 32);
    assert_int_equal(o.interval, 100);
    o = cq_kcp_opts_fast();
    assert_int_equal(cq_kcp_opts_check(&o), 0);
    assert_true(o.nodelay == 1 && o.interval == 10 && o.resend == 2 && o.nc);
    assert_int_equal(cq_kcp_opts_check(NULL), CQ_ECONFIG);
    const struct {
        size_t off;
        uint32_t val;
    } bad[] = {
        {offsetof(cq_kcp_opts_t, mtu), 49},        {offsetof(cq_kcp_opts_t, mtu), 65536},
        {offsetof(cq_kcp_opts_t, snd_wnd), 0},     {offsetof(cq_kcp_opts_t, rcv_wnd), 0},
        {offsetof(cq_kcp_opts_t, rcv_wnd), 8193},  {offsetof(cq_kcp_opts_t, interval), 9},
        {offsetof(cq_kcp_opts_t, interval), 5001}, {offsetof(cq_kcp_opts_t, nodelay), 3},
        {offsetof(cq_kcp_opts_t, dead_link), 0},   {offsetof(cq_kcp_opts_t, minrto), 60001},
    };
    for (size_t i = 0; i < CQ_ARRAY_SIZE(bad); i++) {
        o = cq_kcp_opts_default();
        memcpy((char *)&o + bad[i].off, &bad[i].val, sizeof(uint32_t));
        assert_int_equal(cq_kcp_opts_check(&o), CQ_ECONFIG);
        assert_null(cq_kcp_new(1, &o, cap_out, &c));
    }
    o = cq_kcp_opts_default();
    o.max_snd_bytes = 1375;
    assert_int_equal(cq_kcp_opts_check(&o), CQ_ECONFIG);
    assert_null(cq_kcp_new(1, NULL, NULL, NULL));
    cq_kcp_free(NULL);
    cq_kcp_t *k = cq_kcp_new(42, NULL, cap_out, &c);
    assert_non_null(k);
    assert_int_equal(cq_kcp_conv(k), 42);
    assert_false(cq_kcp_dead(k));
    cq_kcp_free(k);
}

/* Short counts at max_snd_bytes; ACKs make room again; sendv gathers. */
static void test_send_bound(void **state)
{
    (void)state;
    cq_kcp_opts_t o = cq_kcp_opts_default();
    o.max_snd_bytes = 5000;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, &o, cap_out, &c);
    assert_non_null(k);
    uint8_t buf[8000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(cq_kcp_send_space(k), 5000);
    assert_int_equal(cq_kcp_send(k, buf, 3000), 3000);
    assert_int_equal(cq_kcp_send(k, buf + 3000, 5000), 2000); /* short count */
    assert_int_equal(cq_kcp_send(k, buf, 10), 0);
    assert_int_equal(cq_kcp_send_space(k), 0);
    assert_int_equal(cq_kcp_waitsnd(k), 4); /* 1376 * 3 + 872, coalesced */
    cq_kcp_flush(k, 0);                     /* cwnd 1: one segment in flight */
    assert_int_equal(c.n, 1);
    assert_int_equal(cq_kcp_send_space(k), 0); /* in flight still counts */
    uint8_t ackd[24];
    cq__kcp_hdr_t h = {1, CQ_KCP_CMD_ACK, 0, 32, 0, 0, 1, 0};
    cq__kcp_encode(ackd, &h);
    assert_int_equal(cq_kcp_input(k, ackd, sizeof(ackd), 10), 0);
    assert_int_equal(cq_kcp_send_space(k), 1376);
    assert_int_equal(cq_kcp_waitsnd(k), 3);
    struct iovec iov[3] = {{buf, 1000}, {buf + 1000, 300}, {buf + 1300, 500}};
    assert_int_equal(cq_kcp_sendv(k, iov, 3), 1376); /* stops inside the third */
    assert_int_equal(cq_kcp_sendv(k, iov, 3), 0);
    cq_kcp_free(k);
}

/* Zero-copy reading across segment boundaries, and small reads. */
static void test_peek_consume(void **state)
{
    (void)state;
    capture_t c = {0};
    cq_kcp_t *k = cq_kcp_new(1, NULL, cap_out, &c);
    assert_non_null(k);
    size_t n;
    assert_null(cq_kcp_peek(k, &n));
    assert_int_equal(n, 0);
    /* sn 0: 5 bytes, sn 1: empty, sn 2: 3 bytes; delivered out of order. */
    uint8_t d[3][24 + 5];
    const char *txt[3] = {"hello", "", "abc"};
    for (uint32_t i = 0; i < 3; i++) {
        cq__kcp_hdr_t h = {1, CQ_KCP_CMD_PUSH, 0, 32, 0, i, 0, (uint32_t)strlen(txt[i])};
        cq__kcp_encode(d[i], &h);
        memcpy(d[i] + 24, txt[i], h.len);
    }
    assert_int_equal(cq_kcp_input(k, d[2], 27, 0), 0);
    assert_int_equal(cq_kcp_readable(k), 0);
    assert_int_equal(cq_kcp_input(k, d[1], 24, 0), 0);
    assert_int_equal(cq_kcp_input(k, d[0], 29, 0), 0);
    assert_int_equal(cq_kcp_readable(k), 8);
    const uint8_t *p = cq_kcp_peek(k, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(p, "hello", 5);
    cq_kcp_consume(k, 2);
    p = cq_kcp_peek(k, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "llo", 3);
    cq_kcp_consume(k, 3);
    p = cq_kcp_peek(k, &n); /* skips the empty segment */
    assert_int_equal(n, 3);
    assert_memory_equal(p, "abc", 3);
    uint8_t out[2];
    assert_int_equal(cq_kcp_recv(k, out, 2), 2);
    assert_memory_equal(out, "ab", 2);
    assert_int_equal(cq_kcp_recv(k, out, 2), 1);
    assert_int_equal(out[0], 'c');
    assert_int_equal(cq_kcp_recv(k, out, 2), 0);
    cq_kcp_stats_t st;
    cq_kcp_stats(k, &st);
    assert_int_equal(st.rcv_queue, 0);
    assert_int_equal(st.rcv_nxt, 3);
    cq_kcp_free(k);
}

/* ---- allocation failures -------------------------------------------------------------------- */

static void test_fail_n(void **state)
{
    (void)state;
    /* cq_kcp_new: every allocation failing in turn gives NULL and no leak. */
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        capture_t c = {0};
        cq_kcp_t *k = cq_kcp_new(1, NULL, cap_out, &c);
        cq_kcp_free(k);
        bool failed = test_alloc_failed() > 0;
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
        if (!failed) {
            assert_non_null(k);
            break;
        }
        assert_null(k);
    }
    /* A transfer survives one failed allocation anywhere (as a lost datagram or a refused
     * send), and leaks nothing. */
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    for (unsigned long n = 9; n < 400; n += 3) {
        test_alloc_install(n, false);
        sim_t s;
        sim_init(&s, &f, NULL, 5, n);
        s.allow_enomem = true;
        sim_net(&s, (netcfg_t){500, 0, 5, 5});
        s.st[0].total = 30000;
        s.st[1].total = 30000;
        sim_run(&s, 600000);
        sim_free(&s);
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
    }
}

/* Segments from a pool: the same run, datagram for datagram, as with cq_malloc; a roomy pool
 * serves every segment after the peak from freed ones, a small one sends the surplus back. */
static void test_pooled_segments(void **state)
{
    (void)state;
    cq_kcp_opts_t f = cq_kcp_opts_fast();
    netcfg_t net = {1000, 200, 15, 10};
    sim_t plain, pooled;
    transfer(&plain, &f, &f, net, 300000, 77, 600000);
    test_alloc_install(0, false);
    size_t bound[2] = {1 << 20, 16 * 1024};
    cq_pool_t *pool[2] = {cq_pool_new(bound[0]), cq_pool_new(bound[1])};
    sim_init(&pooled, &f, &f, 0x87054f12u, 77);
    for (int i = 0; i < 2; i++)
        cq_kcp_set_pool(pooled.k[i], pool[i]);
    sim_net(&pooled, net);
    pooled.st[0].total = pooled.st[1].total = 300000;
    sim_run(&pooled, 600000);
    for (int i = 0; i < 2; i++) {
        cq_kcp_stats_t a, b;
        cq_kcp_stats(plain.k[i], &a);
        cq_kcp_stats(pooled.k[i], &b);
        assert_memory_equal(&a, &b, sizeof(a));
        cq_pool_stats_t ps;
        cq_pool_stats(pool[i], &ps);
        assert_true(ps.hits > 0 && ps.cached_bytes <= bound[i]);
        if (i == 0)
            assert_true(ps.hits >= 100 && ps.released == 0); /* 133 of 439 today */
        else
            assert_true(ps.released > 0);
    }
    assert_int_equal(plain.now, pooled.now);
    sim_free(&pooled);
    for (int i = 0; i < 2; i++)
        cq_pool_free(pool[i]);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
    sim_free(&plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_bytes),     cmocka_unit_test(test_cwnd_slow_start),
        cmocka_unit_test(test_every_prefix),     cmocka_unit_test(test_plain_default),
        cmocka_unit_test(test_plain_fast),       cmocka_unit_test(test_fast_vs_default),
        cmocka_unit_test(test_loss_10),          cmocka_unit_test(test_loss_30),
        cmocka_unit_test(test_reorder),          cmocka_unit_test(test_dup),
        cmocka_unit_test(test_flush_on_send),    cmocka_unit_test(test_zero_window_probe),
        cmocka_unit_test(test_beyond_window),    cmocka_unit_test(test_window_caps),
        cmocka_unit_test(test_fast_resend),      cmocka_unit_test(test_rto_backoff),
        cmocka_unit_test(test_check_schedule),   cmocka_unit_test(test_ack_nodelay),
        cmocka_unit_test(test_sn_wraparound),    cmocka_unit_test(test_bad_segments),
        cmocka_unit_test(test_garbage),          cmocka_unit_test(test_conv_mismatch_live),
        cmocka_unit_test(test_listener_helpers), cmocka_unit_test(test_opts),
        cmocka_unit_test(test_send_bound),       cmocka_unit_test(test_peek_consume),
        cmocka_unit_test(test_fail_n),           cmocka_unit_test(test_pooled_segments),
        cmocka_unit_test(test_ack_opens_window), cmocka_unit_test(test_early_retransmit),
        cmocka_unit_test(test_amp_spoofed),      cmocka_unit_test(test_amp_echo_proves),
        cmocka_unit_test(test_amp_wask_probe),   cmocka_unit_test(test_amp_off),
        cmocka_unit_test(test_amp_probe_echo),   cmocka_unit_test(test_amp_spoofed_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
