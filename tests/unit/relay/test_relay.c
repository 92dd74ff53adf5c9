/* Unit tests of the relay runtime (src/relay/cq_relay.h): two or three runtimes in one process
 * joined by a fake network that hands each publish to the subject's runtime, and can lose chosen
 * packets. Checks the exact records delivered, their order, the resets and the counters. Every
 * test runs twice: with input queued for the relay thread, the publish handing the packet over
 * at once; and with input inline (input_inline), a network thread handing the packets over as
 * libnats's delivery thread does. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_relay.h"
#include "test_wait.h"

#define NODES 3

/* ---- the fake network ---- */

typedef struct net {
    cq_relay_t *node[NODES + 1];
    /* drop the first transmission of data packet (src, dst, seq) */
    uint16_t drop_src, drop_dst;
    uint64_t drop_seq;
    bool dropped;
    _Atomic uint64_t published, ctrl, wrong;
    pthread_mutex_t mu;
    /* inline mode: the packets published, for the network thread */
    bool async;
    pthread_t thread;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    cq_buf_t **q;
    uint32_t qn, qcap;
    bool qstop;
} net_t;

static net_t NET;
static bool g_inline;

/* Drops the chosen packet, hands the others to their runtime. */
static void net_deliver(net_t *net, const cq_link_hdr_t *h, const uint8_t *p, size_t n)
{
    pthread_mutex_lock(&net->mu);
    bool drop = !(h->flags & CQ_LINK_F_CTRL) && !(h->flags & CQ_LINK_F_RETX) &&
                h->src == net->drop_src && h->dst == net->drop_dst && h->seq == net->drop_seq &&
                !net->dropped;
    if (drop)
        net->dropped = true;
    /* under the lock: stop() takes nodes out of the table before it frees them */
    if (!drop && h->dst <= NODES && net->node[h->dst])
        cq_relay_input(net->node[h->dst], p, n);
    pthread_mutex_unlock(&net->mu);
}

static void *net_main(void *arg)
{
    net_t *net = arg;
    pthread_mutex_lock(&net->qmu);
    for (;;) {
        while (!net->qn && !net->qstop)
            pthread_cond_wait(&net->qcv, &net->qmu);
        if (!net->qn)
            break;
        cq_buf_t *b = net->q[0];
        memmove(net->q, net->q + 1, --net->qn * sizeof(*net->q));
        pthread_mutex_unlock(&net->qmu);
        cq_link_hdr_t h;
        if (cq_link_parse(b->data, b->len, &h) == 0)
            net_deliver(net, &h, b->data, b->len);
        cq_buf_unref(b);
        pthread_mutex_lock(&net->qmu);
    }
    pthread_mutex_unlock(&net->qmu);
    return NULL;
}

static int fake_publish(void *ud, const char *subject, const uint8_t *p, size_t n)
{
    /* no cmocka assertions here: this runs on a relay thread; the counters say what was wrong */
    net_t *net = ud;
    cq_link_hdr_t h;
    char want[CQ_RELAY_SUBJECT_MAX];
    if (cq_link_parse(p, n, &h) < 0 || cq_relay_subject("t", h.dst, want, sizeof(want)) < 0 ||
        strcmp(subject, want) != 0) {
        atomic_fetch_add(&net->wrong, 1);
        return 0;
    }
    atomic_fetch_add(&net->published, 1);
    if (h.flags & CQ_LINK_F_CTRL)
        atomic_fetch_add(&net->ctrl, 1);
    if (!net->async) {
        net_deliver(net, &h, p, n);
        return 0;
    }
    /* inline input must not run inside a publish: queued for the network thread */
    cq_buf_t *b = cq_buf_from(p, n);
    pthread_mutex_lock(&net->qmu);
    if (b && cq_grow(&net->q, &net->qcap, net->qn + 1, sizeof(*net->q), 64) == 0) {
        net->q[net->qn++] = b;
        b = NULL;
        pthread_cond_signal(&net->qcv);
    }
    pthread_mutex_unlock(&net->qmu);
    if (b) {
        atomic_fetch_add(&net->wrong, 1);
        cq_buf_unref(b);
    }
    return 0;
}

static const cq_relay_net_ops_t fake_ops = {fake_publish};

/* ---- what each node received ---- */

#define MAXREC 4096

typedef struct got {
    pthread_mutex_t mu;
    int n;
    uint16_t from[MAXREC];
    uint8_t kind[MAXREC];
    char body[MAXREC][16];
    int resets, reset_why;
    uint16_t reset_node;
    uint64_t reset_lost;
    int on_net; /* records delivered on the network's thread (inline input) */
} got_t;

static got_t GOT[NODES + 1];

static void on_deliver(void *ud, uint16_t node, uint8_t kind, const uint8_t *body, uint32_t len)
{
    got_t *g = ud;
    pthread_mutex_lock(&g->mu);
    if (g->n == MAXREC) { /* checked by the test's count */
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->on_net += NET.async && pthread_equal(pthread_self(), NET.thread);
    g->from[g->n] = node;
    g->kind[g->n] = kind;
    snprintf(g->body[g->n], sizeof(g->body[0]), "%.*s", (int)len, (const char *)body);
    g->n++;
    pthread_mutex_unlock(&g->mu);
}

static void on_reset(void *ud, uint16_t node, int why, uint64_t lost)
{
    got_t *g = ud;
    pthread_mutex_lock(&g->mu);
    g->resets++;
    g->reset_node = node;
    g->reset_why = why;
    g->reset_lost = lost;
    pthread_mutex_unlock(&g->mu);
}

static int got_n(int node)
{
    pthread_mutex_lock(&GOT[node].mu);
    int n = GOT[node].n;
    pthread_mutex_unlock(&GOT[node].mu);
    return n;
}

static int got_resets(int node)
{
    pthread_mutex_lock(&GOT[node].mu);
    int n = GOT[node].resets;
    pthread_mutex_unlock(&GOT[node].mu);
    return n;
}

static void start(int nodes, size_t keep, size_t queue)
{
    memset(&NET, 0, sizeof(NET));
    pthread_mutex_init(&NET.mu, NULL);
    NET.async = g_inline;
    if (NET.async) {
        pthread_mutex_init(&NET.qmu, NULL);
        pthread_cond_init(&NET.qcv, NULL);
        assert_int_equal(pthread_create(&NET.thread, NULL, net_main, &NET), 0);
    }
    for (int i = 1; i <= nodes; i++) {
        memset(&GOT[i], 0, sizeof(GOT[i]));
        pthread_mutex_init(&GOT[i].mu, NULL);
        cq_relay_conf_t c = {.node = (uint16_t)i,
                             .epoch = 100 + (uint32_t)i,
                             .cluster = "t",
                             .keep_bytes = keep,
                             .queue_bytes = queue,
                             .rx = {.nack_ms = 5},
                             .net_ops = &fake_ops,
                             .net = &NET,
                             .deliver = on_deliver,
                             .reset = on_reset,
                             .ud = &GOT[i],
                             .input_inline = g_inline};
        assert_int_equal(cq_relay_start(&c, &NET.node[i]), 0);
    }
}

static void stop(int nodes)
{
    /* every node first: a running one may still publish into a stopped one */
    cq_relay_t *r[NODES + 1];
    for (int i = 1; i <= nodes; i++)
        r[i] = NET.node[i];
    for (int i = 1; i <= nodes; i++) {
        pthread_mutex_lock(&NET.mu);
        NET.node[i] = NULL;
        pthread_mutex_unlock(&NET.mu);
    }
    if (NET.async) { /* nothing reaches a node from here on: the network stops first */
        pthread_mutex_lock(&NET.qmu);
        NET.qstop = true;
        pthread_cond_signal(&NET.qcv);
        pthread_mutex_unlock(&NET.qmu);
        pthread_join(NET.thread, NULL);
    }
    for (int i = 1; i <= nodes; i++)
        cq_relay_stop(r[i]);
    if (NET.async) { /* what the stopping nodes published last */
        for (uint32_t i = 0; i < NET.qn; i++)
            cq_buf_unref(NET.q[i]);
        cq_free(NET.q);
        pthread_mutex_destroy(&NET.qmu);
        pthread_cond_destroy(&NET.qcv);
    }
    assert_int_equal(atomic_load(&NET.wrong), 0);
}

static void send_str(int from, int to, uint8_t kind, const char *s)
{
    cq_buf_t *b = cq_buf_from(s, strlen(s));
    assert_non_null(b);
    assert_int_equal(cq_relay_send(NET.node[from], (uint16_t)to, kind, b), 0);
    cq_buf_unref(b);
}

static cq_relay_peer_stats_t peer_stats(int node, int peer)
{
    cq_relay_stats_t st;
    cq_relay_peer_stats_t ps[NODES];
    size_t n = cq_relay_stats(NET.node[node], &st, ps, NODES);
    for (size_t i = 0; i < n; i++)
        if (ps[i].node == peer)
            return ps[i];
    fail_msg("node %d has no peer %d", node, peer);
    return ps[0];
}

/* ---- tests ---- */

/* Records of two sending threads reach the peer exactly once, each thread's in its order. */
typedef struct sender {
    int from, to, tag, count;
} sender_t;

static void *sender_main(void *arg)
{
    sender_t *s = arg;
    for (int i = 0; i < s->count; i++) {
        char body[16];
        snprintf(body, sizeof(body), "%c%d", s->tag, i);
        cq_buf_t *b = cq_buf_from(body, strlen(body));
        while (cq_relay_send(NET.node[s->from], (uint16_t)s->to, 9, b) == CQ_ELIMIT)
            usleep(100);
        cq_buf_unref(b);
    }
    return NULL;
}

static void test_order_two_threads(void **state)
{
    (void)state;
    start(2, 0, 0);
    sender_t s[2] = {{1, 2, 'a', 1500}, {1, 2, 'b', 1500}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, sender_main, &s[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    WAIT_UNTIL(got_n(2) == 3000);
    int next[2] = {0, 0};
    for (int i = 0; i < 3000; i++) {
        int k = GOT[2].body[i][0] == 'a' ? 0 : 1;
        char want[16];
        snprintf(want, sizeof(want), "%c%d", k ? 'b' : 'a', next[k]++);
        assert_string_equal(GOT[2].body[i], want);
        assert_int_equal(GOT[2].from[i], 1);
        assert_int_equal(GOT[2].kind[i], 9);
    }
    cq_relay_peer_stats_t ps = peer_stats(1, 2);
    assert_int_equal(ps.records_out, 3000);
    assert_int_equal(peer_stats(2, 1).records_in, 3000);
    /* batched: fewer packets than records; none lost, none reset */
    assert_true(ps.tx.packets < 3000);
    assert_int_equal(peer_stats(2, 1).rx.gaps, 0);
    assert_int_equal(got_resets(2), 0);
    assert_int_equal(got_n(1), 0);
    /* inline: every record went through on the network's thread, none through the relay's */
    assert_int_equal(GOT[2].on_net, g_inline ? 3000 : 0);
    stop(2);
}

/* A lost packet is asked for again and delivered in its place: the order holds. */
static void test_loss_recovered(void **state)
{
    (void)state;
    start(2, 0, 0);
    NET.drop_src = 1, NET.drop_dst = 2, NET.drop_seq = 2;
    send_str(1, 2, 1, "one");
    WAIT_UNTIL(got_n(2) == 1);
    send_str(1, 2, 1, "two"); /* seq 2: lost */
    WAIT_UNTIL(peer_stats(1, 2).tx.packets == 2);
    send_str(1, 2, 1, "three");
    WAIT_UNTIL(got_n(2) == 3);
    assert_string_equal(GOT[2].body[0], "one");
    assert_string_equal(GOT[2].body[1], "two");
    assert_string_equal(GOT[2].body[2], "three");
    assert_true(NET.dropped);
    cq_relay_peer_stats_t rx = peer_stats(2, 1), tx = peer_stats(1, 2);
    assert_int_equal(rx.rx.gaps, 1);
    assert_int_equal(rx.rx.recovered, 1);
    assert_int_equal(tx.tx.retransmits, 1);
    assert_int_equal(got_resets(2), 0);
    stop(2);
}

/* The last packet lost, with nothing after it: the sender's idle HEAD shows the gap, and the
 * NACK brings it back. */
static void test_tail_loss_recovered(void **state)
{
    (void)state;
    start(2, 0, 0);
    NET.drop_src = 1, NET.drop_dst = 2, NET.drop_seq = 2;
    send_str(1, 2, 1, "one");
    WAIT_UNTIL(got_n(2) == 1);
    send_str(1, 2, 1, "two"); /* seq 2: lost, and nothing follows */
    WAIT_UNTIL(got_n(2) == 2);
    assert_string_equal(GOT[2].body[1], "two");
    assert_true(NET.dropped);
    assert_int_equal(peer_stats(2, 1).rx.recovered, 1);
    assert_int_equal(peer_stats(1, 2).tx.retransmits, 1);
    assert_int_equal(got_resets(2), 0);
    stop(2);
}

/* A lost packet the sender no longer keeps: GONE, and the stream resets with the loss counted;
 * the next records flow again. */
static void test_loss_gone_resets(void **state)
{
    (void)state;
    start(2, 1, 0); /* keeps (at least) the last packet only */
    NET.drop_src = 1, NET.drop_dst = 2, NET.drop_seq = 2;
    send_str(1, 2, 1, "one");
    WAIT_UNTIL(got_n(2) == 1);
    send_str(1, 2, 1, "two");
    WAIT_UNTIL(peer_stats(1, 2).tx.packets == 2);
    send_str(1, 2, 1, "three"); /* held behind the gap, then dropped with it */
    WAIT_UNTIL(got_resets(2) == 1);
    assert_int_equal(GOT[2].reset_node, 1);
    assert_int_equal(GOT[2].reset_why, CQ_LINK_WHY_GONE);
    assert_int_equal(GOT[2].reset_lost, 2);
    send_str(1, 2, 1, "four");
    WAIT_UNTIL(got_n(2) == 2);
    assert_string_equal(GOT[2].body[0], "one");
    assert_string_equal(GOT[2].body[1], "four");
    assert_int_equal(peer_stats(1, 2).tx.gone, 1);
    stop(2);
}

/* Garbage, a packet for another node and a record for this node itself are refused and counted;
 * nothing is delivered. */
static void test_bad_input(void **state)
{
    (void)state;
    start(3, 0, 0);
    static const uint8_t junk[] = "CQL1 but not a packet at all";
    cq_relay_input(NET.node[2], junk, sizeof(junk));
    /* a well-formed packet from 1 to 3, given to 2 */
    cq_link_tx_t *tx = cq_link_tx_new(1, 3, 7, 1024);
    cq_link_rec_t rec = {1, 3, (const uint8_t *)"abc"};
    cq_buf_t *p;
    assert_int_equal(cq_link_tx_pack(tx, &rec, 1, &p), 0);
    cq_relay_input(NET.node[2], p->data, p->len);
    cq_buf_unref(p);
    cq_link_tx_free(tx);
    cq_buf_t *b = cq_buf_from("x", 1);
    assert_int_equal(cq_relay_send(NET.node[2], 2, 1, b), -EINVAL);
    assert_int_equal(cq_relay_send(NET.node[2], 0, 1, b), -EINVAL);
    assert_int_equal(cq_relay_send(NET.node[2], CQ_LINK_MAX_NODE + 1, 1, b), -EINVAL);
    cq_buf_unref(b);
    cq_relay_stats_t st;
    cq_relay_peer_stats_t ps[NODES];
    WAIT_UNTIL((cq_relay_stats(NET.node[2], &st, ps, NODES), st.bad_packets == 2));
    assert_int_equal(got_n(2), 0);
    /* and the node still works */
    send_str(1, 2, 4, "ok");
    WAIT_UNTIL(got_n(2) == 1);
    assert_string_equal(GOT[2].body[0], "ok");
    stop(3);
}

/* The queue is bounded: a send past queue_bytes is refused and counted. */
static void test_queue_bound(void **state)
{
    (void)state;
    start(2, 0, 16); /* smaller than one item: every send is refused */
    cq_buf_t *b = cq_buf_from("0123456789", 10);
    assert_int_equal(cq_relay_send(NET.node[1], 2, 1, b), CQ_ELIMIT);
    cq_buf_unref(b);
    cq_relay_stats_t st;
    cq_relay_peer_stats_t ps[NODES];
    cq_relay_stats(NET.node[1], &st, ps, NODES);
    assert_int_equal(st.refused_sends, 1);
    stop(2);
}

static void test_subject_epoch(void **state)
{
    (void)state;
    char s[CQ_RELAY_SUBJECT_MAX];
    assert_int_equal(cq_relay_subject("prod", 12, s, sizeof(s)), 0);
    assert_string_equal(s, "chanq.prod.node.12");
    assert_int_equal(cq_relay_subject(NULL, 1, s, sizeof(s)), 0);
    assert_string_equal(s, "chanq.default.node.1");
    assert_int_equal(cq_relay_subject("prod", 12, s, 10), -ENOSPC);
    uint32_t e = cq_relay_epoch_now();
    assert_true(e > 4u * 86400 * 365 * 2); /* after 2026 */
}

static int set_queued(void **state)
{
    (void)state;
    g_inline = false;
    return 0;
}

static int set_inline(void **state)
{
    (void)state;
    g_inline = true;
    return 0;
}

/* Each test with input queued, then inline. */
#define BOTH(f)                                                                                    \
    {"queued: " #f, f, set_queued, NULL, NULL},                                                    \
    {                                                                                              \
        "inline: " #f, f, set_inline, NULL, NULL                                                   \
    }

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_order_two_threads),
        BOTH(test_loss_recovered),
        BOTH(test_tail_loss_recovered),
        BOTH(test_loss_gone_resets),
        BOTH(test_bad_input),
        BOTH(test_queue_bound),
        cmocka_unit_test(test_subject_epoch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
