/* cqbench_report.c - the end of a run: latency percentiles, the result as one JSON line (starts
 * with '{', read by bench/run.sh) and one readable line (starts with '#'), and the exit (over KCP
 * only after the publisher's DISCONNECTs for every subscriber are written).
 */
#include "cqbench_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- percentiles ------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct pct {
    double p50, p99, max, mean; /* microseconds; -1 without samples */
} pct_t;

static pct_t pct(samples_t *s)
{
    pct_t r = {-1, -1, -1, -1};
    if (!s->n)
        return r;
    qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
    r.p50 = s->v[(s->n - 1) / 2] / 1e3;
    r.p99 = s->v[(size_t)((double)(s->n - 1) * 0.99)] / 1e3;
    r.max = s->v[s->n - 1] / 1e3;
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    r.mean = sum / (double)s->n / 1e3;
    return r;
}

/* ---- exit -------------------------------------------------------------------------------- */

static void on_exit_tick(uv_timer_t *t)
{
    (void)t;
    bool flushed = !G.pub.cu || chanq_uv_pending(G.pub.cu) == 0;
    if (flushed || cqb_now_ns() - G.exit_t0 > (uint64_t)EXIT_FLUSH_MS * 1000000u)
        exit(G.exit_code);
}

/* KCP has no close: the publisher (a SERVER connection) asks chanqd to DISCONNECT every
 * subscriber, so the server stops fanning out to them once cqbench is gone. Returns true if
 * DISCONNECTs were queued; the exit then waits until they are written (on_exit_tick). */
static bool kcp_disconnect_all(void)
{
    if (O.target != TGT_CHANQ || O.transport != TR_KCP || !G.pub.cu)
        return false;
    chanq_client_t *pc = chanq_uv_client(G.pub.cu);
    for (int i = 0; i < G.started; i++) {
        uint32_t id = G.subs[i].core ? chanq_client_conn_id(G.subs[i].core) : 0;
        if (id && chanq_client_disconnect(pc, id) < 0)
            return false;
    }
    return true;
}

/* ---- the result -------------------------------------------------------------------------- */

void cqb_finish(const char *error)
{
    if (G.phase == PH_DONE)
        return;
    cqb_perf_stop(); /* ended early: perf is still counting */
    bool measured = G.m_t1 != 0;
    G.phase = PH_DONE;
    double secs = measured ? (double)(G.m_t1 - G.m_t0) / 1e9 : 0;
    double dels = measured ? (double)(G.m_del1 - G.m_del0) : 0;
    double cpu = measured && G.cpu0 >= 0 && G.cpu1 >= 0 ? G.cpu1 - G.cpu0 : -1;
    double ccpu = measured ? G.ccpu1 - G.ccpu0 : -1;
    double dps = secs > 0 ? dels / secs : 0;
    double dpc = cpu > 0 ? dels / cpu : -1;
    double cores = cpu >= 0 && secs > 0 ? cpu / secs : -1;
    uint64_t expected = G.sent * (uint64_t)O.subs;
    uint64_t missing = expected > G.deliveries ? expected - G.deliveries : 0;
    /* data: a fan-out per subscriber and window; nothing else is "expected" per message */
    double ideal = O.mode == MODE_DATA ? O.subs * 1000.0 / O.interval : 0;
    if (O.mode == MODE_DATA)
        missing = 0;
    double fanout_b = G.deliveries ? (double)G.fanout_bytes / (double)G.deliveries : 0;
    double ucores = measured && cpu >= 0 && secs > 0 ? (G.ucpu1 - G.ucpu0) / secs : -1;
    double swait = measured && O.pid > 0 && G.wait0 >= 0 && G.wait1 >= 0 ? G.wait1 - G.wait0 : -1;
    double cwait = measured && G.cwait0 >= 0 && G.cwait1 >= 0 ? G.cwait1 - G.cwait0 : -1;
    pct_t la = pct(&G.lat), lk = pct(&G.klat);
    long long udrops =
        measured && G.m_udrops[0] >= 0 && G.m_udrops[1] >= 0 ? G.m_udrops[1] - G.m_udrops[0] : -1;
    long rss = G.rss_end > 0 ? G.rss_end : cqb_servers_rss_kb();
    double rss_per_conn = -1;
    int conns = O.subs + 1;
    if (O.mode == MODE_IDLE && rss > 0 && G.rss_base > 0)
        rss_per_conn = (double)(rss - G.rss_base) * 1024.0 / conns;
    char load_end[64];
    cqb_loadavg(load_end, sizeof(load_end));
    /* server CPU per delivery: perf's task-clock over the window when measured, else /proc */
    bool by_perf = measured && G.perf_task_s >= 0;
    double cpu_ns = by_perf ? G.perf_task_s * 1e9 : cpu >= 0 ? cpu * 1e9 : -1;
    double ns_per_del = cpu_ns >= 0 && dels > 0 ? cpu_ns / dels : -1;
    double cyc_per_del = measured && G.perf_cycles >= 0 && dels > 0 ? G.perf_cycles / dels : -1;
    double ins_per_del = measured && G.perf_instr >= 0 && dels > 0 ? G.perf_instr / dels : -1;

    /* with several --sub-addrs: the latencies of each address's subscribers */
    char by[128 * MAX_SUB_ADDRS + 8];
    size_t bl = 0;
    by[bl++] = '[';
    for (int i = 0; O.nsub_addrs > 1 && i < O.nsub_addrs; i++) {
        pct_t a = pct(&G.lat_by[i]), k = pct(&G.klat_by[i]);
        bl +=
            (size_t)snprintf(by + bl, sizeof(by) - bl,
                             "%s{\"p50_us\":%.1f,\"p99_us\":%.1f,\"kp50_us\":%.1f,\"kp99_us\":%.1f,"
                             "\"samples\":%zu}",
                             i ? "," : "", a.p50, a.p99, k.p50, k.p99, G.lat_by[i].n);
    }
    snprintf(by + bl, sizeof(by) - bl, "]");
    /* --pid's processes one by one, in its order (CPU seconds over the window) */
    char each[32 * MAX_PIDS + 8];
    size_t el = 0;
    each[el++] = '[';
    for (int i = 0; measured && cpu >= 0 && i < O.npids; i++)
        el += (size_t)snprintf(each + el, sizeof(each) - el, "%s%.3f", i ? "," : "",
                               G.cpu_each1[i] - G.cpu_each0[i]);
    snprintf(each + el, sizeof(each) - el, "]");

    printf("{\"target\":\"%s\",\"label\":\"%s\",\"mode\":\"%s\",\"subs\":%d,\"size\":%d,"
           "\"window\":%d,\"rate\":%.0f,\"duration_s\":%.3f,\"sent\":%" PRIu64
           ",\"deliveries\":%.0f,\"deliveries_total\":%" PRIu64 ",\"missing\":%" PRIu64
           ",\"lost\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"closed\":%" PRIu64
           ",\"deliveries_per_s\":%.0f,\"server_cpu_s\":%.3f,\"server_cores\":%.4f,"
           "\"deliveries_per_server_cpu_s\":%.0f,\"client_cpu_s\":%.3f,"
           "\"lat_samples\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,"
           "\"klat_samples\":%zu,\"kp50_us\":%.1f,\"kp99_us\":%.1f,\"kmax_us\":%.1f,"
           "\"rss_base_kb\":%ld,\"rss_ready_kb\":%ld,\"rss_kb\":%ld,\"rss_per_conn_b\":%.0f,"
           "\"setup_s\":%.3f,\"interval_ms\":%d,\"ideal_per_s\":%.0f,\"of_ideal\":%.4f,"
           "\"initial_fanouts\":%" PRIu64 ",\"stale\":%" PRIu64 ",\"fanout_value_b\":%.1f,"
           "\"server_runq_wait_s\":%.3f,\"client_runq_wait_s\":%.3f,\"server_user_cores\":%.4f,"
           "\"transport\":\"%s\",\"sub_reads\":%" PRIu64 ",\"sub_rx_bytes\":%" PRIu64
           ",\"sub_tx_dgrams\":%" PRIu64 ",\"kcp_dup_segs\":%" PRIu64 ",\"server_udp_drops\":%lld,"
           "\"perf_events\":\"%s\",\"perf_task_clock_s\":%.4f,\"perf_cycles\":%.0f,"
           "\"perf_instructions\":%.0f,\"cpu_source\":\"%s\",\"ns_cpu_per_delivery\":%.1f,"
           "\"cycles_per_delivery\":%.1f,\"instructions_per_delivery\":%.1f,"
           "\"server_cpu_each_s\":%s,\"sub_addrs\":%d,\"lat_by_sub_addr\":%s,"
           "\"load_start\":\"%s\",\"load_end\":\"%s\",\"error\":%s%s%s}\n",
           target_names[O.target], O.label, mode_names[O.mode], O.subs, O.size, O.window, O.rate,
           secs, G.sent, dels, G.deliveries, missing, G.lost, G.dup, G.bad, G.closed, dps, cpu,
           cores, dpc, ccpu, G.lat.n, la.p50, la.p99, la.max, la.mean, G.klat.n, lk.p50, lk.p99,
           lk.max, G.rss_base, G.rss_ready, rss, rss_per_conn, (double)G.setup_ns / 1e9,
           O.mode == MODE_DATA ? O.interval : 0, ideal, ideal > 0 ? dps / ideal : 0, G.full_fanouts,
           G.stale, fanout_b, swait, cwait, ucores, transport_names[O.transport],
           G.m_reads[1] - G.m_reads[0], G.m_bytes[1] - G.m_bytes[0], G.m_txd[1] - G.m_txd[0],
           G.m_kdup[1] - G.m_kdup[0], udrops, O.perf_events ? O.perf_events : "",
           measured ? G.perf_task_s : -1, measured ? G.perf_cycles : -1,
           measured ? G.perf_instr : -1, by_perf ? "perf" : "proc", ns_per_del, cyc_per_del,
           ins_per_del, each, O.nsub_addrs, by, G.load_start, load_end, error ? "\"" : "",
           error ? error : "null", error ? "\"" : "");
    printf("# %s %s %s %s subs=%d size=%d: %.0f deliveries/s, server %.2f cores, %.0f "
           "deliveries/server-cpu-s, %.0f ns server CPU/delivery (%s)",
           target_names[O.target], O.label, mode_names[O.mode], transport_names[O.transport],
           O.subs, O.size, dps, cores, dpc, ns_per_del, by_perf ? "perf task-clock" : "/proc");
    if (cyc_per_del >= 0)
        printf(", %.0f cycles/delivery", cyc_per_del);
    printf(", client cpu %.2f s", ccpu);
    if (O.mode == MODE_RATE)
        printf(", latency (app) p50 %.1f us p99 %.1f us max %.1f us, (kernel rx) p50 %.1f us p99 "
               "%.1f us max %.1f us",
               la.p50, la.p99, la.max, lk.p50, lk.p99, lk.max);
    if (O.mode == MODE_DATA)
        printf(" (ideal %.0f/s = %.1f %%), latency of the newest update (app) p50 %.1f us p99 "
               "%.1f us max %.1f us, (kernel rx) p50 %.1f us p99 %.1f us, %.0f B/fan-out, rss "
               "%ld kB, stale %" PRIu64 ", run-queue wait server %.2f s client %.2f s",
               ideal, ideal > 0 ? 100.0 * dps / ideal : 0, la.p50, la.p99, la.max, lk.p50, lk.p99,
               fanout_b, rss, G.stale, swait, cwait);
    if (O.mode == MODE_IDLE)
        printf(", rss %ld kB (base %ld kB) = %.0f B/conn", rss, G.rss_base, rss_per_conn);
    printf(", missing %" PRIu64 ", load %s%s%s\n", missing, G.load_start, error ? ", ERROR: " : "",
           error ? error : "");
    fflush(stdout);
    /* The server side is torn down by its own process; exiting closes every socket. */
    G.exit_code = error ? 1 : 0;
    if (kcp_disconnect_all()) {
        G.exit_t0 = cqb_now_ns();
        uv_timer_start(&G.exit_timer, on_exit_tick, 10, 10);
        return;
    }
    exit(G.exit_code);
}
