/* cqbench_drive.c - the run: what a delivery counts as, how the publisher is driven (the closed
 * loop refills a window of outstanding messages after each poll; the rate and data shapes
 * publish from a 1 ms timer; idle publishes nothing), and the phases of a run (setup, warm-up,
 * measurement window, drain) with the watchdog that ends a stalled one.
 */
#include "cqbench_int.h"
#include "bench_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void all_ready(void);
static void measure_end(uv_timer_t *t);

/* ---- deliveries -------------------------------------------------------------------------- */

void cqb_add_sample(samples_t *s, int64_t ns)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1u << 16;
        uint32_t *p = realloc(s->v, s->cap * sizeof(*p));
        if (!p)
            cqb_die("out of memory");
        s->v = p;
    }
    s->v[s->n++] = ns < 0 ? 0 : ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

void cqb_add_latency(const bconn_t *s, int64_t app_ns, int64_t kernel_ns)
{
    cqb_add_sample(&G.lat, app_ns);
    if (s->rx_real)
        cqb_add_sample(&G.klat, kernel_ns);
    if (O.nsub_addrs < 2)
        return;
    int g = s->idx % O.nsub_addrs;
    cqb_add_sample(&G.lat_by[g], app_ns);
    if (s->rx_real)
        cqb_add_sample(&G.klat_by[g], kernel_ns);
}

void cqb_on_payload(bconn_t *s, const uint8_t *p, size_t n)
{
    if (n < 24 || n != (size_t)O.size) {
        G.bad++;
        return;
    }
    uint64_t seq, ts, rts;
    memcpy(&seq, p, 8);
    memcpy(&ts, p + 8, 8);
    memcpy(&rts, p + 16, 8);
    G.deliveries++;
    if (seq != s->next_seq) {
        if (seq > s->next_seq)
            G.lost += seq - s->next_seq;
        else
            G.dup++;
    }
    s->next_seq = seq + 1;
    if (O.mode == MODE_CLOSED) {
        if (seq >= G.acked && seq < G.sent) {
            uint32_t w = (uint32_t)O.window;
            if (++G.ring[seq % w] == (uint32_t)O.subs) {
                while (G.acked < G.sent && G.ring[G.acked % w] == (uint32_t)O.subs) {
                    G.ring[G.acked % w] = 0;
                    G.acked++;
                }
            }
        }
    } else if (O.mode == MODE_RATE) {
        if (seq >= G.m_seq0 && seq < G.m_seq1) {
            cqb_add_latency(s, (int64_t)(cqb_now_ns() - ts), (int64_t)(s->rx_real - rts));
        }
    }
}

void cqb_sub_ready(bconn_t *s)
{
    if (s->ready)
        return;
    s->ready = true;
    G.connecting--;
    G.nready++;
    if (G.nready == O.subs)
        all_ready();
    else
        cqb_start_more();
}

void cqb_conn_lost(bconn_t *c, int err)
{
    G.closed++;
    if (G.phase != PH_DONE)
        fprintf(stderr, "cqbench: %s connection %d lost: %s\n", target_names[O.target], c->idx,
                err == 0                      ? "closed"
                : err <= -1000 && err > -1100 ? cq_strerror(err)
                                              : uv_strerror(err));
    if (G.phase == PH_SETUP)
        cqb_finish("connection lost during setup");
}

/* ---- publishing -------------------------------------------------------------------------- */

static void publish_one(void)
{
    uint64_t seq = G.sent++, ts = cqb_now_ns(), rts = cqb_real_ns();
    if (O.mode == MODE_DATA) {
        size_t n = cqb_testpb_encode(G.payload, rts, seq + 1);
        int r = chanq_client_data_update(chanq_uv_client(G.pub.cu), G.chan_id, TESTPB_TYPE_URL,
                                         G.payload, n);
        if (r < 0)
            cqb_die("data update: %s", cq_strerror(r));
        return;
    }
    memcpy(G.payload, &seq, 8);
    memcpy(G.payload + 8, &ts, 8);
    memcpy(G.payload + 16, &rts, 8);
    switch (O.target) {
    case TGT_CHANQ: {
        int r = chanq_client_server_forward(chanq_uv_client(G.pub.cu), GLOBAL_CHANNEL,
                                            BC_ALL_BUT_SERVER, USER_MSG_TYPE, 0, G.payload,
                                            (size_t)O.size);
        if (r < 0)
            cqb_die("publish: %s", cq_strerror(r));
        break;
    }
    case TGT_REDIS: {
        char head[96];
        int k = snprintf(head, sizeof(head), "*3\r\n$7\r\nPUBLISH\r\n$%zu\r\n" TOPIC "\r\n$%d\r\n",
                         strlen(TOPIC), O.size);
        cqb_bbuf_append(&G.pub.out, head, (size_t)k);
        cqb_bbuf_append(&G.pub.out, G.payload, (size_t)O.size);
        cqb_bbuf_append(&G.pub.out, "\r\n", 2);
        break;
    }
    case TGT_NATS: {
        char head[64];
        int k = snprintf(head, sizeof(head), "PUB " TOPIC " %d\r\n", O.size);
        cqb_bbuf_append(&G.pub.out, head, (size_t)k);
        cqb_bbuf_append(&G.pub.out, G.payload, (size_t)O.size);
        cqb_bbuf_append(&G.pub.out, "\r\n", 2);
        break;
    }
    case TGT_FLOOR: /* nothing to publish: the floor writer writes on its own */
        break;
    }
}

static bool publishing(void)
{
    return (G.phase == PH_WARMUP || G.phase == PH_MEASURE) && G.pub.connected;
}

/* Closed loop: runs after each poll; refills the window. For chanq the adapter flushes the
 * queued messages in its prepare hook before the loop next blocks. */
static void on_pump(uv_check_t *h)
{
    (void)h;
    if (!publishing())
        return;
    bool any = false;
    while (G.sent - G.acked < (uint64_t)O.window) {
        publish_one();
        any = true;
    }
    if (any && O.target != TGT_CHANQ)
        cqb_raw_flush(&G.pub);
}

static void on_rate_tick(uv_timer_t *t)
{
    (void)t;
    if (!publishing())
        return;
    uint64_t due = (uint64_t)((double)(cqb_now_ns() - G.t_pub0) * O.rate / 1e9);
    bool any = false;
    while (G.sent < due) {
        publish_one();
        any = true;
    }
    if (any && O.target != TGT_CHANQ)
        cqb_raw_flush(&G.pub);
}

/* ---- phases ------------------------------------------------------------------------------ */

void cqb_start_more(void)
{
    if (!G.pub.ready)
        return;
    while (G.started < O.subs && G.connecting < O.parallel) {
        bconn_t *s = &G.subs[G.started];
        s->idx = G.started++;
        G.connecting++;
        cqb_sub_connect(s);
    }
}

/* Subscriber wire counters at the start (i = 0) or end (i = 1) of the measurement window. */
static void snap_wire(int i)
{
    G.m_reads[i] = G.rx_reads;
    G.m_bytes[i] = G.rx_bytes;
    G.m_txd[i] = G.tx_dgrams;
    G.m_kdup[i] = cqb_kcp_dup_total();
    G.m_udrops[i] = O.transport == TR_KCP ? cqb_proc_udp_drops(ntohs(O.kcp_addr.sin_port)) : -1;
}

static void measure_start(uv_timer_t *t)
{
    (void)t;
    cqb_perf_enable(); /* first: it waits for perf's ack */
    G.phase = PH_MEASURE;
    G.m_t0 = cqb_now_ns();
    G.m_del0 = G.deliveries;
    G.m_seq0 = G.sent;
    G.cpu0 = cqb_servers_cpu_s(&G.ucpu0, G.cpu_each0);
    G.ccpu0 = cqb_self_cpu_s();
    G.wait0 = cqb_servers_runq_wait_s();
    G.cwait0 = cqb_proc_runq_wait_s(0);
    snap_wire(0);
    uv_timer_start(&G.phase_timer, measure_end, (uint64_t)(O.duration * 1000), 0);
}

static void on_drain(uv_timer_t *t)
{
    (void)t;
    bool done = G.deliveries >= G.sent * (uint64_t)O.subs;
    if (done || cqb_now_ns() - G.drain_t0 > (uint64_t)DRAIN_MAX_MS * 1000000u)
        cqb_finish(NULL);
}

static void measure_end(uv_timer_t *t)
{
    (void)t;
    G.m_t1 = cqb_now_ns();
    G.m_del1 = G.deliveries;
    G.m_seq1 = G.sent;
    G.cpu1 = cqb_servers_cpu_s(&G.ucpu1, G.cpu_each1);
    G.ccpu1 = cqb_self_cpu_s();
    G.wait1 = cqb_servers_runq_wait_s();
    G.cwait1 = cqb_proc_runq_wait_s(0);
    G.rss_end = cqb_servers_rss_kb();
    snap_wire(1);
    cqb_perf_stop();
    if (O.mode == MODE_IDLE || O.mode == MODE_DATA) {
        cqb_finish(NULL); /* data: fan-outs are counted by arrival within the window */
        return;
    }
    G.phase = PH_DRAIN;
    G.drain_t0 = cqb_now_ns();
    uv_timer_stop(&G.rate_timer);
    uv_timer_start(&G.drain_timer, on_drain, 10, 10);
}

static void all_ready(void)
{
    G.setup_ns = cqb_now_ns() - G.setup_t0;
    G.rss_ready = cqb_servers_rss_kb();
    G.phase = PH_WARMUP;
    if (O.mode == MODE_CLOSED) {
        uv_check_start(&G.pump, on_pump);
    } else if (O.mode == MODE_RATE || (O.mode == MODE_DATA && O.target != TGT_FLOOR)) {
        G.t_pub0 = cqb_now_ns();
        uv_timer_start(&G.rate_timer, on_rate_tick, 1, 1);
    }
    /* idle: the warm-up is a settle time; nothing is sent (floor: the writer sends) */
    if (O.mode != MODE_IDLE)
        cqb_perf_start();
    uv_timer_start(&G.phase_timer, measure_start, (uint64_t)(O.warmup * 1000), 0);
}

void cqb_on_watchdog(uv_timer_t *t)
{
    (void)t;
    if (G.phase == PH_SETUP) {
        if (cqb_now_ns() - G.setup_t0 > (uint64_t)SETUP_TIMEOUT_MS * 1000000u)
            cqb_finish("setup timed out");
        return;
    }
    if (O.mode == MODE_IDLE || G.phase == PH_DONE)
        return;
    /* floor: nothing is sent from here, but a packet is due on every connection every window */
    bool owed = O.target == TGT_FLOOR || G.sent * (uint64_t)O.subs > G.deliveries;
    if (G.deliveries == G.wd_last && owed) {
        if (++G.wd_still >= STALL_SECONDS)
            cqb_finish("stalled: no delivery for 5 s");
    } else {
        G.wd_still = 0;
    }
    G.wd_last = G.deliveries;
}
