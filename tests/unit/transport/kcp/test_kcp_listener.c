/* tests/unit/transport/kcp: the KCP listener policy (src/transport/kcp/cq_kcp_listener), one case
 * per rule, with a manual clock and exact outcomes: the verdict, the drop reason, the displaced
 * session, the listener's counts and the shared per-IP count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_kcp.h"
#include "cq_kcp_listener.h"
#include "test_alloc.h"

#include <string.h>

#define IDLE 1000

typedef struct fx {
    cq_kcp_ipcount_t *ips;
    cq_kcp_listener_t *l;
    int sess[8]; /* the sessions' ud */
} fx_t;

static fx_t fx;

static int setup_max(uint32_t max)
{
    memset(&fx, 0, sizeof(fx));
    fx.ips = cq_kcp_ipcount_new(max);
    cq_kcp_listener_opts_t o = {.idle_ms = IDLE, .ipcount = fx.ips};
    fx.l = cq_kcp_listener_new(&o);
    return fx.ips && fx.l ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    return setup_max(4);
}

static int teardown(void **state)
{
    (void)state;
    fx.l = cq_kcp_listener_free(fx.l);
    fx.ips = cq_kcp_ipcount_free(fx.ips);
    return 0;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static cq_kcp_addr_t v4(uint8_t last, uint16_t port)
{
    cq_kcp_addr_t a = {.ip_len = 4, .ip = {10, 0, 0, last}};
    a.port[0] = (uint8_t)(port >> 8);
    a.port[1] = (uint8_t)port;
    return a;
}

/* A one-segment datagram: conv, cmd, sn (little-endian header, no data). */
static void seg(uint8_t d[CQ_KCP_OVERHEAD], uint32_t conv, uint8_t cmd, uint32_t sn)
{
    memset(d, 0, CQ_KCP_OVERHEAD);
    for (int i = 0; i < 4; i++) {
        d[i] = (uint8_t)(conv >> (8 * i));
        d[12 + i] = (uint8_t)(sn >> (8 * i));
    }
    d[4] = cmd;
}

static cq_kcp_action_t in(const cq_kcp_addr_t *a, uint32_t conv, uint8_t cmd, uint32_t sn,
                          uint64_t now)
{
    uint8_t d[CQ_KCP_OVERHEAD];
    seg(d, conv, cmd, sn);
    cq_kcp_action_t act;
    memset(&act, 0x5a, sizeof(act));
    cq_kcp_listener_input(fx.l, a, d, sizeof(d), now, &act);
    return act;
}

static cq_kcp_action_t push0(const cq_kcp_addr_t *a, uint32_t conv, uint64_t now)
{
    return in(a, conv, CQ_KCP_CMD_PUSH, 0, now);
}

static void assert_drop(cq_kcp_action_t act, cq_kcp_drop_t why)
{
    assert_int_equal(act.verdict, CQ_KCP_DROP);
    assert_int_equal(act.why, why);
    assert_null(act.replaced);
}

/* A new session for a (conv) at now, attached as fx.sess[i]. */
static cq_kcp_peer_t *open_sess(const cq_kcp_addr_t *a, uint32_t conv, uint64_t now, int i)
{
    cq_kcp_action_t act = push0(a, conv, now);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_non_null(act.peer);
    assert_null(act.replaced);
    cq_kcp_listener_attach(fx.l, act.peer, &fx.sess[i]);
    return act.peer;
}

static void assert_counts(uint32_t sessions, uint32_t closing, uint32_t tombstones)
{
    cq_kcp_listener_stats_t st;
    cq_kcp_listener_stats(fx.l, &st);
    assert_int_equal(st.sessions, sessions);
    assert_int_equal(st.closing, closing);
    assert_int_equal(st.tombstones, tombstones);
}

static void *idle_seen[8];
static int n_idle;

static void on_idle(void *ctx, void *ud)
{
    assert_ptr_equal(ctx, &fx);
    idle_seen[n_idle++] = ud;
}

/* ---- rules ------------------------------------------------------------------------------ */

/* Datagrams shorter than a segment header are dropped before any lookup. */
static void test_short_datagram(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    uint8_t d[CQ_KCP_OVERHEAD];
    seg(d, 7, CQ_KCP_CMD_PUSH, 0);
    cq_kcp_action_t act;
    cq_kcp_listener_input(fx.l, &a, d, CQ_KCP_OVERHEAD - 1, 0, &act);
    assert_drop(act, CQ_KCP_DROP_SHORT);
    assert_counts(0, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 0);
}

/* The first datagram of an address creates a session (whatever its command); the next ones
 * with the same conv are delivered to it. */
static void test_create_then_deliver(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    cq_kcp_action_t act = in(&a, 7, CQ_KCP_CMD_ACK, 9, 100);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_int_equal(act.conv, 7);
    assert_null(act.replaced);
    cq_kcp_listener_attach(fx.l, act.peer, &fx.sess[0]);
    assert_counts(1, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 1);
    cq_kcp_action_t d = in(&a, 7, CQ_KCP_CMD_PUSH, 3, 200);
    assert_int_equal(d.verdict, CQ_KCP_DELIVER);
    assert_ptr_equal(d.peer, act.peer);
    assert_ptr_equal(d.ud, &fx.sess[0]);
    assert_int_equal(d.conv, 7);
    assert_null(d.replaced);
    /* another port of the same IP, and the same port on IPv6, are other peers */
    cq_kcp_addr_t b = v4(1, 5001);
    open_sess(&b, 7, 300, 1);
    cq_kcp_addr_t c = {.ip_len = 16, .ip = {10, 0, 0, 1}, .port = {0x13, 0x88}};
    open_sess(&c, 7, 300, 2);
    assert_counts(3, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 2);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &c), 1);
    assert_ptr_equal(push0(&a, 7, 400).ud, &fx.sess[0]);
}

/* Another conv from a known address: dropped unless it starts a conversation (PUSH sn 0). */
static void test_other_conv_dropped(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    cq_kcp_peer_t *p = open_sess(&a, 7, 0, 0);
    assert_drop(in(&a, 8, CQ_KCP_CMD_PUSH, 1, 10), CQ_KCP_DROP_CONV);
    assert_drop(in(&a, 8, CQ_KCP_CMD_ACK, 0, 10), CQ_KCP_DROP_CONV);
    assert_drop(in(&a, 8, CQ_KCP_CMD_WASK, 0, 10), CQ_KCP_DROP_CONV);
    cq_kcp_action_t d = in(&a, 7, CQ_KCP_CMD_ACK, 0, 20);
    assert_int_equal(d.verdict, CQ_KCP_DELIVER);
    assert_ptr_equal(d.peer, p);
    assert_counts(1, 0, 0);
}

/* A new conversation from a known address replaces the session, which is handed back. */
static void test_new_conv_replaces(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    open_sess(&a, 7, 0, 0);
    cq_kcp_action_t act = push0(&a, 8, 50);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_ptr_equal(act.replaced, &fx.sess[0]);
    assert_false(act.replaced_closing);
    cq_kcp_listener_attach(fx.l, act.peer, &fx.sess[1]);
    assert_counts(1, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 1);
    assert_ptr_equal(in(&a, 8, CQ_KCP_CMD_PUSH, 1, 60).ud, &fx.sess[1]);
    assert_drop(in(&a, 7, CQ_KCP_CMD_PUSH, 1, 60), CQ_KCP_DROP_CONV);
    /* the displaced session was closing: said so */
    cq_kcp_listener_closing(fx.l, act.peer);
    act = push0(&a, 9, 70);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_ptr_equal(act.replaced, &fx.sess[1]);
    assert_true(act.replaced_closing);
    cq_kcp_listener_attach(fx.l, act.peer, &fx.sess[2]);
    assert_counts(1, 0, 0);
}

/* A closing session drops its datagrams and is not reported idle; buried, it is a tombstone. */
static void test_closing(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    cq_kcp_peer_t *p = open_sess(&a, 7, 0, 0);
    cq_kcp_listener_closing(fx.l, p);
    assert_counts(0, 1, 0);
    assert_drop(in(&a, 7, CQ_KCP_CMD_PUSH, 1, 10), CQ_KCP_DROP_CLOSING);
    n_idle = 0;
    cq_kcp_listener_expire(fx.l, 10 * IDLE, on_idle, &fx);
    assert_int_equal(n_idle, 0);
    assert_counts(0, 1, 0);
    cq_kcp_listener_bury(fx.l, p);
    assert_counts(0, 0, 1);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 1);
}

/* A tombstone keeps its address and conv: its datagrams open nothing and keep it alive until
 * idle_ms of silence; a new conversation replaces it at once. */
static void test_tombstone(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    cq_kcp_peer_t *p = open_sess(&a, 7, 0, 0);
    cq_kcp_listener_closing(fx.l, p);
    cq_kcp_listener_bury(fx.l, p);
    assert_drop(in(&a, 7, CQ_KCP_CMD_PUSH, 0, 500), CQ_KCP_DROP_TOMBSTONE);
    assert_drop(in(&a, 8, CQ_KCP_CMD_PUSH, 4, 500), CQ_KCP_DROP_CONV);
    n_idle = 0;
    cq_kcp_listener_expire(fx.l, 500 + IDLE - 1, on_idle, &fx);
    assert_counts(0, 0, 1);
    cq_kcp_listener_expire(fx.l, 500 + IDLE, on_idle, &fx);
    assert_int_equal(n_idle, 0);
    assert_counts(0, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 0);
    /* a forgotten address opens a fresh session */
    p = open_sess(&a, 7, 2000, 1);
    cq_kcp_listener_bury(fx.l, p);
    cq_kcp_action_t act = push0(&a, 8, 2100);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_null(act.replaced);
    assert_counts(1, 0, 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a), 1);
}

/* A session that could not be set up is buried at once: the peer is ignored while it talks. */
static void test_setup_failed(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000);
    cq_kcp_action_t act = push0(&a, 7, 0);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    cq_kcp_listener_bury(fx.l, act.peer);
    assert_drop(in(&a, 7, CQ_KCP_CMD_PUSH, 1, 900), CQ_KCP_DROP_TOMBSTONE);
    cq_kcp_listener_expire(fx.l, 900 + IDLE - 1, on_idle, &fx);
    assert_counts(0, 0, 1);
    /* out of memory for a session: the peer is forgotten, the next datagram tries again */
    cq_kcp_addr_t b = v4(2, 5000);
    act = push0(&b, 9, 1000);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &b), 1);
    cq_kcp_listener_forget(fx.l, act.peer);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &b), 0);
    assert_counts(0, 0, 1);
    act = in(&b, 9, CQ_KCP_CMD_PUSH, 5, 1001);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_int_equal(act.conv, 9);
}

/* Sessions silent for idle_ms are reported on every expiry until closed. */
static void test_idle(void **state)
{
    (void)state;
    cq_kcp_addr_t a = v4(1, 5000), b = v4(2, 5000);
    open_sess(&a, 7, 0, 0);
    cq_kcp_peer_t *pb = open_sess(&b, 7, 0, 1);
    assert_int_equal(in(&b, 7, CQ_KCP_CMD_ACK, 0, 300).verdict, CQ_KCP_DELIVER);
    n_idle = 0;
    cq_kcp_listener_expire(fx.l, IDLE - 1, on_idle, &fx);
    assert_int_equal(n_idle, 0);
    cq_kcp_listener_expire(fx.l, IDLE, on_idle, &fx);
    assert_int_equal(n_idle, 1);
    assert_ptr_equal(idle_seen[0], &fx.sess[0]);
    cq_kcp_listener_expire(fx.l, 300 + IDLE, on_idle, &fx);
    assert_int_equal(n_idle, 3);
    assert_ptr_equal(idle_seen[1], &fx.sess[0]);
    assert_ptr_equal(idle_seen[2], &fx.sess[1]);
    cq_kcp_listener_closing(fx.l, pb);
    cq_kcp_listener_expire(fx.l, 300 + IDLE, on_idle, &fx);
    assert_int_equal(n_idle, 4);
    assert_ptr_equal(idle_seen[3], &fx.sess[0]);
    assert_counts(1, 1, 0);
}

/* The per-IP limit counts sessions, closing sessions and tombstones, across listeners that
 * share the count. */
static void test_per_ip_limit(void **state)
{
    (void)state;
    teardown(NULL);
    assert_int_equal(setup_max(2), 0);
    cq_kcp_listener_opts_t o = {.idle_ms = IDLE, .ipcount = fx.ips};
    cq_kcp_listener_t *other = cq_kcp_listener_new(&o); /* another worker's */
    cq_kcp_addr_t a1 = v4(1, 1), a2 = v4(1, 2), a3 = v4(1, 3), b = v4(2, 1);
    cq_kcp_peer_t *p1 = open_sess(&a1, 7, 0, 0);
    uint8_t d[CQ_KCP_OVERHEAD];
    seg(d, 7, CQ_KCP_CMD_PUSH, 0);
    cq_kcp_action_t act;
    cq_kcp_listener_input(other, &a2, d, sizeof(d), 0, &act);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    cq_kcp_listener_attach(other, act.peer, &fx.sess[1]);
    assert_drop(push0(&a3, 7, 0), CQ_KCP_DROP_LIMIT);
    cq_kcp_listener_input(other, &a3, d, sizeof(d), 0, &act);
    assert_drop(act, CQ_KCP_DROP_LIMIT);
    open_sess(&b, 7, 0, 2); /* another IP */
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a1), 2);
    /* a tombstone still counts; forgetting it frees the slot */
    cq_kcp_listener_closing(fx.l, p1);
    assert_drop(push0(&a3, 7, 10), CQ_KCP_DROP_LIMIT);
    cq_kcp_listener_bury(fx.l, p1);
    assert_drop(push0(&a3, 7, 10), CQ_KCP_DROP_LIMIT);
    /* each refused datagram is counted for chanq_kcp_refused_total */
    assert_int_equal(cq_kcp_ipcount_refused(fx.ips), 4);
    cq_kcp_ipcount_add_amp(fx.ips, 5);
    char text[1024];
    size_t tl = cq_kcp_ipcount_metrics(fx.ips, text, sizeof(text));
    assert_true(tl < sizeof(text));
    assert_non_null(strstr(text, "\nchanq_kcp_refused_total{reason=\"max_per_addr\"} 4\n"));
    assert_non_null(strstr(text, "\nchanq_kcp_amp_blocked_total 5\n"));
    cq_kcp_listener_expire(fx.l, IDLE, on_idle, &fx);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a1), 1);
    open_sess(&a3, 7, IDLE, 3);
    /* a replacement keeps the count: the old peer gives back what the new one takes */
    act = push0(&a3, 8, IDLE);
    assert_int_equal(act.verdict, CQ_KCP_CREATE);
    assert_ptr_equal(act.replaced, &fx.sess[3]);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a1), 2);
    /* freeing a listener gives its peers' counts back */
    cq_kcp_listener_free(other);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a1), 1);
    cq_kcp_listener_free(fx.l);
    fx.l = NULL;
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a1), 0);
    assert_int_equal(cq_kcp_ipcount_get(fx.ips, &b), 0);
}

/* Allocation failures while creating peers: a clean drop with the count given back. */
static void test_fail_n(void **state)
{
    (void)state;
    teardown(NULL);
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, false);
        bool ok = setup_max(4) == 0;
        cq_kcp_addr_t a[3] = {v4(1, 1), v4(1, 2), v4(3, 1)};
        uint32_t created = 0;
        for (int i = 0; ok && i < 3; i++) {
            cq_kcp_action_t act = push0(&a[i], 7, 0);
            if (act.verdict == CQ_KCP_DROP) {
                assert_int_equal(act.why, CQ_KCP_DROP_NOMEM);
                ok = false;
                break;
            }
            cq_kcp_listener_attach(fx.l, act.peer, &fx.sess[i]);
            created++;
        }
        if (ok) {
            assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a[0]), 2);
            assert_ptr_equal(push0(&a[2], 7, 1).ud, &fx.sess[2]);
        } else if (fx.l && fx.ips) {
            /* the failed peer left nothing behind */
            assert_counts(created, 0, 0);
            assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a[0]), created < 2 ? created : 2);
            assert_int_equal(cq_kcp_ipcount_get(fx.ips, &a[2]), 0);
        }
        teardown(NULL);
        if (test_alloc_round_end(ok))
            break;
    }
    setup(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_short_datagram, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_then_deliver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_conv_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_conv_replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tombstone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_setup_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_ip_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_n, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
