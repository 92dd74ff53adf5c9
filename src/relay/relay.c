/* relay.c - the relay runtime (cq_relay.h): the thread that owns this node's links, packs what
 * the workers queued into one packet per peer per round, and feeds what arrived to the
 * receivers. The network is an ops table (NATS in chanqd, a fake in the tests), so this file
 * does no I/O of its own. */
#include "cq_relay.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define DEF_KEEP  (4u << 20)
#define DEF_QUEUE (64u << 20)
#define EPOCH_T0  1704067200 /* 2024-01-01T00:00:00Z */

enum { IT_SEND, IT_INPUT };

typedef struct item {
    struct item *next;
    int kind;
    uint16_t node;
    uint8_t rkind;
    cq_buf_t *buf;
} item_t;

typedef struct peer {
    uint16_t node;
    char subject[CQ_RELAY_SUBJECT_MAX];
    cq_link_tx_t *tx;
    cq_link_rx_t *rx;
    cq_link_rec_t *recs; /* this round's records, bodies in bufs */
    cq_buf_t **bufs;
    uint32_t n, cap_recs, cap_bufs;
    uint64_t records_out, records_in, publish_errors;
    uint64_t head_due; /* when to send our last seq (HEAD) again */
    uint32_t head_step;
} peer_t;

/* After a peer's last data packet, HEAD goes out after these delays, so that a lost last packet
 * is found within the first; then every CQ_RELAY_HEAD_MS, so that a peer hears this node at
 * least that often while it lives (doc/relay-cluster.md "The link"). */
static const uint32_t head_after_ms[] = {50, CQ_RELAY_HEAD_MS};

struct cq_relay {
    cq_relay_conf_t conf;
    char *cluster;

    /* The peers: the relay thread's, and the input thread's when input is inline, under pmu
     * (taken before mu, never after: a delivery may queue a send). */
    pthread_mutex_t pmu;
    peer_t *peers[CQ_LINK_MAX_NODE + 1];
    uint16_t order[CQ_RELAY_MAX_PEERS]; /* the peers' nodes, in creation order */
    uint32_t npeers;

    /* the inbox */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item_t *head, *tail;
    size_t queued;
    uint64_t q_refused, q_dropped; /* what enqueue() turned away */
    bool stopping;
    bool kick; /* an inline input set a timer: the thread's wake-up is due again */
    pthread_t thread;

    /* stats: written under st_mu by the relay thread (peers) and under mu (totals) */
    pthread_mutex_t st_mu;
    cq_relay_stats_t st;
};

uint32_t cq_relay_epoch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t q = ((int64_t)ts.tv_sec - EPOCH_T0) * 4 + ts.tv_nsec / 250000000;
    return q > 0 ? (uint32_t)q : 1;
}

int cq_relay_subject(const char *cluster, uint16_t node, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "chanq.%s.node.%u", cluster && *cluster ? cluster : "default",
                     (unsigned)node);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

/* ---- peers (relay thread) ------------------------------------------------------------------ */

static peer_t *peer_free(peer_t *p)
{
    if (!p)
        return NULL;
    for (uint32_t i = 0; i < p->n; i++)
        cq_buf_unref(p->bufs[i]);
    cq_link_tx_free(p->tx);
    cq_link_rx_free(p->rx);
    cq_free(p->recs);
    cq_free(p->bufs);
    cq_free(p);
    return NULL;
}

/* The peer for node, made on first use; NULL when node is not a valid peer, the table is full
 * or memory is short. */
static peer_t *peer_get(cq_relay_t *r, uint16_t node)
{
    if (!node || node > CQ_LINK_MAX_NODE || node == r->conf.node)
        return NULL;
    if (r->peers[node])
        return r->peers[node];
    if (r->npeers == CQ_RELAY_MAX_PEERS)
        return NULL;
    peer_t *p = cq_calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->node = node;
    p->head_due = cq_clock_mono_ms() + CQ_RELAY_HEAD_MS;
    p->tx = cq_link_tx_new(r->conf.node, node, r->conf.epoch, r->conf.keep_bytes);
    p->rx = cq_link_rx_new(r->conf.node, node, &r->conf.rx);
    if (!p->tx || !p->rx || cq_relay_subject(r->cluster, node, p->subject, sizeof(p->subject)))
        return peer_free(p);
    pthread_mutex_lock(&r->st_mu);
    r->peers[node] = p;
    r->order[r->npeers++] = node;
    pthread_mutex_unlock(&r->st_mu);
    return p;
}

static int peer_add_rec(peer_t *p, uint8_t kind, cq_buf_t *b)
{
    if (cq_grow(&p->recs, &p->cap_recs, p->n + 1, sizeof(*p->recs), 16) < 0 ||
        cq_grow(&p->bufs, &p->cap_bufs, p->n + 1, sizeof(*p->bufs), 16) < 0)
        return -ENOMEM;
    p->recs[p->n] = (cq_link_rec_t){kind, (uint32_t)b->len, b->data};
    p->bufs[p->n++] = b;
    return 0;
}

static void publish(cq_relay_t *r, peer_t *p, cq_buf_t *pkt)
{
    if (r->conf.net_ops->publish(r->conf.net, p->subject, pkt->data, pkt->len) < 0)
        p->publish_errors++; /* at most once anyway: the receiver's NACK asks again */
    cq_buf_unref(pkt);
}

/* Packs this round's records for p into packets under CQ_LINK_MAX_PACKET and publishes them. A
 * record that cannot fit any packet is dropped and counted (senders stay far below). */
static void peer_flush(cq_relay_t *r, peer_t *p, uint64_t now)
{
    p->head_due = now + head_after_ms[0];
    p->head_step = 0;
    uint32_t i = 0;
    while (i < p->n) {
        size_t size = CQ_LINK_HDR_LEN;
        uint32_t j = i;
        while (j < p->n && j - i < UINT16_MAX &&
               size + CQ_LINK_REC_HDR + p->recs[j].len <= CQ_LINK_MAX_PACKET)
            size += CQ_LINK_REC_HDR + p->recs[j++].len;
        if (j == i) {
            p->publish_errors++;
            i++;
            continue;
        }
        cq_buf_t *pkt = NULL;
        pthread_mutex_lock(&r->st_mu);
        int rc = cq_link_tx_pack(p->tx, p->recs + i, j - i, &pkt);
        pthread_mutex_unlock(&r->st_mu);
        if (rc == 0) {
            p->records_out += j - i;
            publish(r, p, pkt);
        } else {
            p->publish_errors++;
        }
        i = j;
    }
    for (uint32_t k = 0; k < p->n; k++)
        cq_buf_unref(p->bufs[k]);
    p->n = 0;
}

static void peer_head(cq_relay_t *r, peer_t *p, uint64_t now)
{
    cq_buf_t *c = cq_link_ctrl(r->conf.node, p->node, r->conf.epoch, CQ_LINK_CTRL_HEAD,
                               cq_link_tx_last_seq(p->tx), 0);
    if (c)
        publish(r, p, c);
    if (p->head_step + 1 < CQ_ARRAY_SIZE(head_after_ms))
        p->head_step++;
    p->head_due = now + head_after_ms[p->head_step];
}

static void answer_nack(cq_relay_t *r, peer_t *p, uint64_t from, uint64_t to)
{
    cq_buf_t *out[64], *gone = NULL;
    pthread_mutex_lock(&r->st_mu);
    int n = cq_link_tx_nack(p->tx, from, to, out, 64, &gone);
    pthread_mutex_unlock(&r->st_mu);
    for (int i = 0; i < n; i++)
        publish(r, p, out[i]);
    if (gone)
        publish(r, p, gone);
}

static void deliver(cq_relay_t *r, peer_t *p, const cq_link_ev_t *ev)
{
    cq_link_rec_t rec;
    uint32_t it = 0;
    while (cq_link_next(ev->buf->data, &ev->hdr, &it, &rec)) {
        p->records_in++;
        r->conf.deliver(r->conf.ud, p->node, rec.kind, rec.body, rec.len);
    }
}

/* Everything p's receiver has to say after an input or a tick. */
static void peer_events(cq_relay_t *r, peer_t *p)
{
    cq_link_ev_t ev;
    for (;;) {
        pthread_mutex_lock(&r->st_mu);
        bool more = cq_link_rx_next(p->rx, &ev);
        pthread_mutex_unlock(&r->st_mu);
        if (!more)
            return;
        switch (ev.kind) {
        case CQ_LINK_EV_DELIVER:
            deliver(r, p, &ev);
            break;
        case CQ_LINK_EV_NACK: {
            cq_buf_t *c =
                cq_link_ctrl(r->conf.node, p->node, r->conf.epoch, CQ_LINK_CTRL_NACK, ev.a, ev.b);
            if (c)
                publish(r, p, c);
            break;
        }
        case CQ_LINK_EV_CTRL:
            if (ev.ctrl == CQ_LINK_CTRL_NACK)
                answer_nack(r, p, ev.a, ev.b);
            break;
        case CQ_LINK_EV_RESET:
            if (r->conf.reset)
                r->conf.reset(r->conf.ud, p->node, ev.why, ev.a);
            break;
        case CQ_LINK_EV_DROP:
            break; /* counted by the receiver */
        }
    }
}

static void on_input(cq_relay_t *r, cq_buf_t *pkt, uint64_t now)
{
    cq_link_hdr_t h;
    if (cq_link_parse(pkt->data, pkt->len, &h) < 0 || h.dst != r->conf.node) {
        pthread_mutex_lock(&r->st_mu);
        r->st.bad_packets++;
        pthread_mutex_unlock(&r->st_mu);
        return;
    }
    peer_t *p = peer_get(r, h.src);
    if (!p) {
        pthread_mutex_lock(&r->st_mu);
        r->st.unknown_src++;
        pthread_mutex_unlock(&r->st_mu);
        return;
    }
    if (r->conf.heard)
        r->conf.heard(r->conf.ud, p->node);
    pthread_mutex_lock(&r->st_mu);
    int rc = cq_link_rx_input(p->rx, pkt, now);
    pthread_mutex_unlock(&r->st_mu);
    (void)rc; /* -ENOMEM: treated as lost, the gap machinery asks again */
    peer_events(r, p);
}

static void on_send(cq_relay_t *r, item_t *it)
{
    peer_t *p = peer_get(r, it->node);
    if (p && peer_add_rec(p, it->rkind, it->buf) == 0) {
        it->buf = NULL; /* the peer holds the reference until its flush */
        return;
    }
    pthread_mutex_lock(&r->st_mu);
    r->st.refused_sends++;
    pthread_mutex_unlock(&r->st_mu);
}

/* ---- the thread --------------------------------------------------------------------------- */

static uint64_t next_due(cq_relay_t *r)
{
    uint64_t due = UINT64_MAX;
    for (uint32_t i = 0; i < r->npeers; i++) {
        const peer_t *p = r->peers[r->order[i]];
        uint64_t d = cq_link_rx_next_due(p->rx);
        due = CQ_MIN(due, d);
        due = CQ_MIN(due, p->head_due);
    }
    return due;
}

static void wait_work(cq_relay_t *r, uint64_t due)
{
    if (due == UINT64_MAX) {
        pthread_cond_wait(&r->cv, &r->mu);
        return;
    }
    uint64_t now = cq_clock_mono_ms();
    if (due <= now)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (due - now) * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

static void round_run(cq_relay_t *r, item_t *list)
{
    uint64_t now = cq_clock_mono_ms();
    for (item_t *it = list, *next; it; it = next) {
        next = it->next;
        if (it->kind == IT_SEND)
            on_send(r, it);
        else
            on_input(r, it->buf, now);
        cq_buf_unref(it->buf);
        cq_free(it);
    }
    for (uint32_t i = 0; i < r->npeers; i++) {
        peer_t *p = r->peers[r->order[i]];
        if (p->n)
            peer_flush(r, p, now);
        else if (p->head_due <= now)
            peer_head(r, p, now);
        if (cq_link_rx_next_due(p->rx) <= now) {
            pthread_mutex_lock(&r->st_mu);
            cq_link_rx_tick(p->rx, now);
            pthread_mutex_unlock(&r->st_mu);
            peer_events(r, p);
        }
    }
    pthread_mutex_lock(&r->st_mu);
    r->st.rounds++;
    pthread_mutex_unlock(&r->st_mu);
}

static void *relay_main(void *arg)
{
    cq_relay_t *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->pmu);
        uint64_t due = next_due(r);
        pthread_mutex_unlock(&r->pmu);
        pthread_mutex_lock(&r->mu);
        if (r->stopping) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        if (!r->head && !r->kick)
            wait_work(r, due);
        r->kick = false;
        item_t *list = r->head;
        r->head = r->tail = NULL;
        r->queued = 0;
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_lock(&r->pmu);
        round_run(r, list);
        pthread_mutex_unlock(&r->pmu);
    }
}

/* ---- the API ------------------------------------------------------------------------------ */

static void relay_free(cq_relay_t *r)
{
    for (item_t *it = r->head, *next; it; it = next) {
        next = it->next;
        cq_buf_unref(it->buf);
        cq_free(it);
    }
    for (uint32_t i = 0; i < r->npeers; i++)
        peer_free(r->peers[r->order[i]]);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->pmu);
    pthread_mutex_destroy(&r->st_mu);
    pthread_cond_destroy(&r->cv);
    cq_free(r->cluster);
    cq_free(r);
}

static int cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return -rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return -rc;
}

int cq_relay_start(const cq_relay_conf_t *conf, cq_relay_t **ret)
{
    if (!conf || !conf->node || conf->node > CQ_LINK_MAX_NODE || !conf->net_ops ||
        !conf->net_ops->publish || !conf->deliver)
        return -EINVAL;
    cq_relay_t *r = cq_calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->conf = *conf;
    if (!r->conf.epoch)
        r->conf.epoch = cq_relay_epoch_now();
    if (!r->conf.keep_bytes)
        r->conf.keep_bytes = DEF_KEEP;
    if (!r->conf.queue_bytes)
        r->conf.queue_bytes = DEF_QUEUE;
    r->cluster = cq_strdup(conf->cluster && *conf->cluster ? conf->cluster : "default");
    int rc = r->cluster ? cond_init_mono(&r->cv) : -ENOMEM;
    if (rc) {
        cq_free(r->cluster);
        cq_free(r);
        return rc;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->pmu, NULL);
    pthread_mutex_init(&r->st_mu, NULL);
    rc = -pthread_create(&r->thread, NULL, relay_main, r);
    if (rc) {
        relay_free(r);
        return rc;
    }
    *ret = r;
    return 0;
}

void cq_relay_stop(cq_relay_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    relay_free(r);
}

/* Queues it (owned) unless the queue is over its bound; returns 0 or CQ_ELIMIT. */
static int enqueue(cq_relay_t *r, item_t *it)
{
    size_t cost = it->buf->len + sizeof(*it);
    pthread_mutex_lock(&r->mu);
    if (r->queued + cost > r->conf.queue_bytes) {
        if (it->kind == IT_SEND)
            r->q_refused++;
        else
            r->q_dropped++;
        pthread_mutex_unlock(&r->mu);
        return CQ_ELIMIT;
    }
    r->queued += cost;
    if (r->tail)
        r->tail->next = it;
    else
        r->head = it;
    r->tail = it;
    /* one wake per empty-to-non-empty: the thread takes the whole list at once */
    if (r->head == it)
        pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int cq_relay_send(cq_relay_t *r, uint16_t node, uint8_t kind, cq_buf_t *body)
{
    if (!body || !node || node > CQ_LINK_MAX_NODE || node == r->conf.node)
        return -EINVAL;
    item_t *it = cq_malloc(sizeof(*it));
    if (!it)
        return -ENOMEM;
    *it = (item_t){NULL, IT_SEND, node, kind, cq_buf_ref(body)};
    int rc = enqueue(r, it);
    if (rc < 0) {
        cq_buf_unref(it->buf);
        cq_free(it);
    }
    return rc;
}

/* Inline: the packet goes through its receiver on the calling thread, which saves the relay
 * thread's wake-up on every packet that arrives (the hop's latency, doc/relay-cluster.md). A
 * timer the packet sets (a NACK's) that is due before the relay thread's wake-up wakes it. */
static void input_inline(cq_relay_t *r, const uint8_t *p, size_t n)
{
    cq_buf_t *b = cq_buf_from(p, n);
    if (!b) {
        pthread_mutex_lock(&r->mu);
        r->q_dropped++;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_lock(&r->pmu);
    uint64_t before = next_due(r);
    on_input(r, b, cq_clock_mono_ms());
    bool earlier = next_due(r) < before;
    pthread_mutex_unlock(&r->pmu);
    cq_buf_unref(b);
    if (earlier) {
        pthread_mutex_lock(&r->mu);
        r->kick = true;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

void cq_relay_input(cq_relay_t *r, const uint8_t *p, size_t n)
{
    if (r->conf.input_inline) {
        input_inline(r, p, n);
        return;
    }
    item_t *it = cq_malloc(sizeof(*it));
    cq_buf_t *b = it ? cq_buf_from(p, n) : NULL;
    if (!b) {
        cq_free(it);
        pthread_mutex_lock(&r->mu);
        r->q_dropped++;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    *it = (item_t){NULL, IT_INPUT, 0, 0, b};
    if (enqueue(r, it) < 0) {
        cq_buf_unref(b);
        cq_free(it);
    }
}

uint16_t cq_relay_node(const cq_relay_t *r)
{
    return r->conf.node;
}

uint32_t cq_relay_epoch(const cq_relay_t *r)
{
    return r->conf.epoch;
}

size_t cq_relay_stats(cq_relay_t *r, cq_relay_stats_t *st, cq_relay_peer_stats_t *out, size_t max)
{
    pthread_mutex_lock(&r->mu);
    size_t queued = r->queued;
    uint64_t refused = r->q_refused, dropped = r->q_dropped;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&r->st_mu);
    *st = r->st;
    st->refused_sends += refused;
    st->dropped_inputs = dropped;
    st->queued_bytes = queued;
    size_t n = 0;
    for (uint32_t i = 0; i < r->npeers && n < max; i++) {
        const peer_t *p = r->peers[r->order[i]];
        out[n++] = (cq_relay_peer_stats_t){
            p->node,       *cq_link_tx_stats(p->tx), *cq_link_rx_stats(p->rx), p->records_out,
            p->records_in, p->publish_errors};
    }
    pthread_mutex_unlock(&r->st_mu);
    return n;
}
