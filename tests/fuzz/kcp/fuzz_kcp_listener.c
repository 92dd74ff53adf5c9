/* fuzz_kcp_listener - sequences of datagrams and clock steps driven into two KCP listener
 * policies (cq_kcp_listener.h) that share one per-IP count, as two workers do, checked step by
 * step against a reference model of the rules.
 *
 * Input: a script of operations, each an opcode byte and one argument byte:
 *   0, 1, 2  a datagram: arg picks the listener (bit 7), the source (bits 0-3: 9 addresses,
 *            3 IPs x 3 ports; the third IP is IPv6), and the next byte (if any) the conv
 *            (bits 0-1), PUSH or ACK (bit 2), sn 0 or 1 (bit 3), a short datagram (bit 4),
 *            and after a CREATE whether the session is set up (bits 5-6: attach, attach,
 *            bury as a failed set-up, forget as out of memory)
 *   3        the core closes the session at arg's source (if it has one)
 *   4        the edge releases closing sessions of listener arg & 1 (they become tombstones)
 *   5        the clock advances arg * 8 ms, then both listeners expire; the sessions they
 *            report idle are closed
 * Invariants: every action (verdict, reason, peer, session, displaced session) is the model's;
 * idle reports are exactly the model's; the listeners' counts and the shared per-IP counts
 * match the model after every step, never exceed the limit, and return to zero when the
 * listeners are freed. */
#include "fuzz_common.h"

#include "cq_kcp.h"
#include "cq_kcp_listener.h"

#include <string.h>

#define NADDR   9
#define MAX_IP  2
#define IDLE_MS 1000

enum { M_NONE, M_LIVE, M_CLOSING, M_TOMB };

typedef struct mpeer {
    int state;
    uint32_t conv;
    uint64_t last_rx;
    cq_kcp_peer_t *peer;
    int *ud;
    uint64_t order; /* creation order: the listener reports idle sessions in it */
} mpeer_t;

typedef struct world {
    cq_kcp_ipcount_t *ips;
    cq_kcp_listener_t *l[2];
    mpeer_t m[2][NADDR];
    int tokens[4096];
    size_t ntok;
    uint64_t now, order;
    int *idle[2 * NADDR];
    size_t nidle;
} world_t;

static world_t W;

static cq_kcp_addr_t addr_of(int i)
{
    cq_kcp_addr_t a = {.ip_len = i / 3 == 2 ? 16 : 4, .port = {0x10, (uint8_t)(i % 3)}};
    a.ip[0] = 10;
    a.ip[3] = (uint8_t)(i / 3);
    return a;
}

static uint32_t model_ip_count(int ip)
{
    uint32_t n = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < NADDR; i++)
            n += i / 3 == ip && W.m[l][i].state != M_NONE;
    return n;
}

static void check_counts(void)
{
    for (int l = 0; l < 2; l++) {
        cq_kcp_listener_stats_t st;
        cq_kcp_listener_stats(W.l[l], &st);
        uint32_t n[4] = {0, 0, 0, 0};
        for (int i = 0; i < NADDR; i++)
            n[W.m[l][i].state]++;
        FUZZ_CHECK(st.sessions == n[M_LIVE] && st.closing == n[M_CLOSING]);
        FUZZ_CHECK(st.tombstones == n[M_TOMB]);
    }
    for (int ip = 0; ip < 3; ip++) {
        cq_kcp_addr_t a = addr_of(ip * 3);
        uint32_t c = cq_kcp_ipcount_get(W.ips, &a);
        FUZZ_CHECK(c == model_ip_count(ip) && c <= MAX_IP);
    }
}

/* ---- datagrams -------------------------------------------------------------------------- */

static void build(uint8_t d[CQ_KCP_OVERHEAD], uint32_t conv, bool push, uint32_t sn)
{
    memset(d, 0, CQ_KCP_OVERHEAD);
    for (int i = 0; i < 4; i++) {
        d[i] = (uint8_t)(conv >> (8 * i));
        d[12 + i] = (uint8_t)(sn >> (8 * i));
    }
    d[4] = push ? CQ_KCP_CMD_PUSH : CQ_KCP_CMD_ACK;
}

/* The model's verdict for a datagram; updates the model as the listener must. */
static cq_kcp_action_t model_input(int l, int i, uint32_t conv, bool start, bool shrt)
{
    cq_kcp_action_t a = {.verdict = CQ_KCP_DROP, .conv = conv};
    mpeer_t *m = &W.m[l][i];
    if (shrt) {
        a.why = CQ_KCP_DROP_SHORT;
        a.conv = 0;
        return a;
    }
    if (m->state != M_NONE && m->conv != conv) {
        if (!start) {
            a.why = CQ_KCP_DROP_CONV;
            return a;
        }
        if (m->state != M_TOMB) {
            a.replaced = m->ud;
            a.replaced_closing = m->state == M_CLOSING;
        }
        m->state = M_NONE;
    }
    if (m->state == M_NONE) {
        if (model_ip_count(i / 3) >= MAX_IP) {
            a.why = CQ_KCP_DROP_LIMIT;
            return a;
        }
        *m = (mpeer_t){M_LIVE, conv, W.now, NULL, NULL, W.order++};
        a.verdict = CQ_KCP_CREATE;
        return a;
    }
    m->last_rx = W.now;
    if (m->state == M_LIVE) {
        a.verdict = CQ_KCP_DELIVER;
        a.peer = m->peer;
        a.ud = m->ud;
    } else {
        a.why = m->state == M_TOMB ? CQ_KCP_DROP_TOMBSTONE : CQ_KCP_DROP_CLOSING;
    }
    return a;
}

/* A displaced session leaves the model's other entries alone (it is no peer any more). */
static void datagram(uint8_t arg, uint8_t bits)
{
    int l = arg >> 7, i = (arg & 15) % NADDR;
    uint32_t conv = bits & 3;
    bool push = bits & 4, shrt = bits & 16;
    uint32_t sn = (bits >> 3) & 1;
    uint8_t d[CQ_KCP_OVERHEAD];
    build(d, conv, push, sn);
    cq_kcp_addr_t a = addr_of(i);
    cq_kcp_action_t want = model_input(l, i, conv, push && sn == 0, shrt);
    cq_kcp_action_t got;
    cq_kcp_listener_input(W.l[l], &a, d, shrt ? CQ_KCP_OVERHEAD - 1 : sizeof(d), W.now, &got);
    FUZZ_CHECK(got.verdict == want.verdict && got.replaced == want.replaced);
    if (got.replaced)
        FUZZ_CHECK(got.replaced_closing == want.replaced_closing);
    if (got.verdict == CQ_KCP_DROP) {
        FUZZ_CHECK(got.why == want.why);
        return;
    }
    FUZZ_CHECK(got.conv == want.conv);
    if (got.verdict == CQ_KCP_DELIVER) {
        FUZZ_CHECK(got.peer == want.peer && got.ud == want.ud && got.ud != NULL);
        return;
    }
    mpeer_t *m = &W.m[l][i];
    m->peer = got.peer;
    switch ((bits >> 5) & 3) {
    case 2:
        cq_kcp_listener_bury(W.l[l], got.peer);
        m->state = M_TOMB;
        break;
    case 3:
        cq_kcp_listener_forget(W.l[l], got.peer);
        m->state = M_NONE;
        break;
    default:
        m->ud = &W.tokens[W.ntok++ % (sizeof(W.tokens) / sizeof(W.tokens[0]))];
        cq_kcp_listener_attach(W.l[l], got.peer, m->ud);
    }
}

/* ---- the edge's calls ------------------------------------------------------------------- */

static void close_at(int l, int i)
{
    mpeer_t *m = &W.m[l][i];
    if (m->state != M_LIVE)
        return;
    cq_kcp_listener_closing(W.l[l], m->peer);
    m->state = M_CLOSING;
}

static void release_closing(int l)
{
    for (int i = 0; i < NADDR; i++) {
        if (W.m[l][i].state != M_CLOSING)
            continue;
        cq_kcp_listener_bury(W.l[l], W.m[l][i].peer);
        W.m[l][i].state = M_TOMB;
        W.m[l][i].ud = NULL;
    }
}

static void on_idle(void *ctx, void *ud)
{
    FUZZ_CHECK(ctx == &W && W.nidle < 2 * NADDR);
    W.idle[W.nidle++] = ud;
}

/* Expires listener l and checks the idle reports, in creation order, against the model. */
static void expire(int l)
{
    int *want[NADDR];
    uint64_t order[NADDR];
    size_t n = 0;
    for (int i = 0; i < NADDR; i++) {
        mpeer_t *m = &W.m[l][i];
        if (m->state == M_CLOSING || m->state == M_NONE || W.now - m->last_rx < IDLE_MS)
            continue;
        if (m->state == M_TOMB) {
            m->state = M_NONE;
            continue;
        }
        size_t k = n++;
        for (; k > 0 && order[k - 1] > m->order; k--) {
            want[k] = want[k - 1];
            order[k] = order[k - 1];
        }
        want[k] = m->ud;
        order[k] = m->order;
    }
    W.nidle = 0;
    cq_kcp_listener_expire(W.l[l], W.now, on_idle, &W);
    FUZZ_CHECK(W.nidle == n);
    for (size_t k = 0; k < n; k++)
        FUZZ_CHECK(W.idle[k] == want[k]);
    for (int i = 0; i < NADDR; i++)
        if (W.m[l][i].state == M_LIVE && W.now - W.m[l][i].last_rx >= IDLE_MS)
            close_at(l, i); /* the edge closes what was reported idle */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 14))
        return 0;
    memset(&W, 0, sizeof(W));
    W.ips = cq_kcp_ipcount_new(MAX_IP);
    cq_kcp_listener_opts_t o = {.idle_ms = IDLE_MS, .ipcount = W.ips};
    W.l[0] = cq_kcp_listener_new(&o);
    W.l[1] = cq_kcp_listener_new(&o);
    FUZZ_CHECK(W.ips && W.l[0] && W.l[1]);
    for (size_t p = 0; p + 1 < size; p += 2) {
        uint8_t op = data[p] % 6, arg = data[p + 1];
        if (op <= 2) {
            datagram(arg, p + 2 < size ? data[p + 2] : 0);
            p++;
        } else if (op == 3) {
            close_at(arg >> 7, (arg & 15) % NADDR);
        } else if (op == 4) {
            release_closing(arg & 1);
        } else {
            W.now += (uint64_t)arg * 8;
            expire(0);
            expire(1);
        }
        check_counts();
    }
    W.l[0] = cq_kcp_listener_free(W.l[0]);
    W.l[1] = cq_kcp_listener_free(W.l[1]);
    for (int ip = 0; ip < 3; ip++) {
        cq_kcp_addr_t a = addr_of(ip * 3);
        FUZZ_CHECK(cq_kcp_ipcount_get(W.ips, &a) == 0);
    }
    W.ips = cq_kcp_ipcount_free(W.ips);
    return 0;
}
