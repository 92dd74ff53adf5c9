/* soak - the soak driver (issue 10): broadcast, channel data, durable produce/consume/watch and
 * reconnect churn against one chanqd at once, for a given duration, checking that nothing is
 * lost and nothing fails. bench/soak.sh starts chanqd (and MariaDB) and runs it.
 *
 *   soak --ready-file F [--pid P] [--duration S] [rates...]
 *
 * F is chanqd's ready file (client=, server= and mq= addresses); P its pid, for the RSS and CPU
 * samples. The phases: setup (every connection authenticated and subscribed, the topic created
 * and watched; at most 120 s), run (--duration s of load at the given rates), drain (the load
 * stops; every subscriber must reach the last message, every produce be acked, pushed and
 * consumed; at most --drain s), check. See soak_int.h for the parts and --help for the knobs.
 *
 * Output: the first violations of each kind as they happen ("soak: VIOLATION ..."), then a
 * readable summary and one JSON line (starting with '{'). Exit status: 0 when no violation was
 * counted, 1 when some were, 2 when the driver itself could not run.
 */
#include "bench_util.h"
#include "soak_int.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define SETUP_TIMEOUT_MS 120000u
#define PRINT_PER_KIND   5
#define MAX_RSS_SAMPLES  100000

soak_opts_t SO = {
    .duration = 120,
    .warmup_frac = 0.2,
    .rss_every = 2,
    .rss_tol = 0.10,
    .drain = 60,
    .bc_subs = 50,
    .bc_rate = 1000,
    .bc_size = 64,
    .data_subs = 50,
    .data_rate = 500,
    .data_interval = 20,
    .mq_rate = 5000,
    .mq_batch = 50,
    .mq_window = 8,
    .mq_size = 128,
    .churn = 20,
    .churn_life = 4,
    .topic = "soak",
};
soak_stats_t SS;
uv_loop_t *soak_loop;
soak_phase_t soak_phase = PH_SETUP;
struct sockaddr_in soak_client_addr, soak_server_addr, soak_mq_addr;

static const char *const kind_names[SK_COUNT] = {
    "unexpected closes", "protocol errors", "error answers", "sequence gaps",
    "lost deliveries",   "durable losses",  "stalls",        "RSS not flat"};

static uv_timer_t tick_timer;
static uint64_t t_phase; /* start of the current phase */
static uint64_t t_run0, t_run1;
static double cpu0, cpu1, self0, self1;
static uint64_t *rss;   /* kB, one sample per --rss-every s of the run */
static uint64_t *rss_t; /* ms since the run started */
static size_t nrss;
static uint64_t next_rss; /* when the next sample is due */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* ---- small helpers -------------------------------------------------------------------------- */

uint64_t soak_now_ms(void)
{
    return bench_now_ns() / 1000000u;
}

uint32_t soak_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

void soak_fail(soak_kind_t k, const char *fmt, ...)
{
    if (++SS.viol[k] > PRINT_PER_KIND)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soak: VIOLATION (%s) ", kind_names[k]);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "%s\n",
            SS.viol[k] == PRINT_PER_KIND ? " [further ones of this kind counted only]" : "");
    va_end(ap);
}

void soak_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soak: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* VmRSS of pid in kB, or 0 when unreadable. */
static uint64_t rss_kb(int pid)
{
    char path[64], line[256];
    uint64_t kb = 0;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %" SCNu64, &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* ---- the ready file ----------------------------------------------------------------------------
 */

/* Sets *out from "key=HOST:PORT" in line; the listener must be on. */
static void ready_addr(const char *line, const char *key, struct sockaddr_in *out)
{
    char pat[16], host[64];
    unsigned port;
    snprintf(pat, sizeof(pat), "%s=", key);
    const char *p = strstr(line, pat);
    if (p && p != line && p[-1] != ' ')
        p = strstr(p + 1, pat);
    if (!p || sscanf(p + strlen(pat), "%63[^:]:%u", host, &port) != 2 || port == 0 ||
        uv_ip4_addr(host, (int)port, out) != 0)
        soak_die("ready file: no %s address (is that listener on?)", key);
}

static void read_ready(void)
{
    char line[1024];
    FILE *f = fopen(SO.ready_file, "r");
    if (!f || !fgets(line, sizeof(line), f))
        soak_die("cannot read the ready file %s", SO.ready_file);
    fclose(f);
    ready_addr(line, "client", &soak_client_addr);
    ready_addr(line, "server", &soak_server_addr);
    if (SO.mq_rate > 0)
        ready_addr(line, "mq", &soak_mq_addr);
}

/* ---- phases ------------------------------------------------------------------------------------
 */

static void sample_rss(uint64_t now)
{
    if (!SO.pid || now < next_rss || nrss >= MAX_RSS_SAMPLES)
        return;
    next_rss = now + (uint64_t)(SO.rss_every * 1000.0);
    rss[nrss] = rss_kb(SO.pid);
    rss_t[nrss] = now - t_run0;
    nrss++;
}

static void enter(soak_phase_t ph, uint64_t now)
{
    soak_phase = ph;
    t_phase = now;
    if (ph == PH_RUN) {
        t_run0 = now;
        next_rss = now;
        cpu0 = SO.pid ? bench_proc_cpu_s(SO.pid, NULL) : 0;
        self0 = self_cpu_s();
        fprintf(stderr, "soak: set up, running %.0f s\n", SO.duration);
    } else if (ph == PH_DRAIN) {
        t_run1 = now;
        cpu1 = SO.pid ? bench_proc_cpu_s(SO.pid, NULL) : 0;
        self1 = self_cpu_s();
    } else if (ph == PH_DONE) {
        soak_chan_check();
        soak_mq_check();
        soak_chan_close();
        soak_mq_close();
        uv_timer_stop(&tick_timer);
        uv_close((uv_handle_t *)&tick_timer, NULL);
    }
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = soak_now_ms();
    (void)t;
    soak_chan_tick(now);
    soak_mq_tick(now);
    switch (soak_phase) {
    case PH_SETUP:
        if (soak_chan_ready() && soak_mq_ready()) {
            enter(PH_RUN, now);
        } else if (now - t_phase > SETUP_TIMEOUT_MS) {
            soak_fail(SK_STALL, "setup did not finish within %u ms", SETUP_TIMEOUT_MS);
            enter(PH_RUN, now);
            enter(PH_DRAIN, now);
            enter(PH_DONE, now);
        }
        break;
    case PH_RUN:
        sample_rss(now);
        if (now - t_run0 >= (uint64_t)(SO.duration * 1000.0)) {
            sample_rss(now + (uint64_t)(SO.rss_every * 1000.0));
            enter(PH_DRAIN, now);
        }
        break;
    case PH_DRAIN:
        if ((soak_chan_drained() && soak_mq_drained()) ||
            now - t_phase > (uint64_t)(SO.drain * 1000.0))
            enter(PH_DONE, now);
        break;
    case PH_DONE:
        break;
    }
}

/* ---- the summary -------------------------------------------------------------------------------
 */

/* Checks the samples after the warm-up; *lo and *hi get their range. */
static void check_rss(uint64_t *lo, uint64_t *hi, size_t *from)
{
    uint64_t warm = (uint64_t)(SO.duration * SO.warmup_frac * 1000.0);
    *lo = UINT64_MAX;
    *hi = 0;
    *from = nrss;
    for (size_t i = 0; i < nrss; i++) {
        if (rss_t[i] < warm)
            continue;
        if (*from == nrss)
            *from = i;
        *lo = rss[i] < *lo ? rss[i] : *lo;
        *hi = rss[i] > *hi ? rss[i] : *hi;
    }
    if (!SO.pid)
        return;
    if (*from == nrss || *lo == 0) {
        soak_fail(SK_RSS, "no RSS sample after the warm-up");
        return;
    }
    if (SO.rss_tol > 0 && (double)(*hi - *lo) > SO.rss_tol * (double)*lo)
        soak_fail(SK_RSS,
                  "RSS after the warm-up ranges %" PRIu64 "..%" PRIu64
                  " kB (%.1f %%, limit %.0f %%)",
                  *lo, *hi, 100.0 * (double)(*hi - *lo) / (double)*lo, 100.0 * SO.rss_tol);
}

static void summary(void)
{
    uint64_t lo, hi, total = 0;
    size_t from;
    check_rss(&lo, &hi, &from);
    double secs = (double)(t_run1 - t_run0) / 1000.0;
    double cores = secs > 0 && SO.pid ? (cpu1 - cpu0) / secs : -1;
    double self = secs > 0 ? (self1 - self0) / secs : -1;
    for (int k = 0; k < SK_COUNT; k++)
        total += SS.viol[k];
    printf("# soak: %.0f s of load; chanqd %.3f cores, driver %.3f cores\n", secs, cores, self);
    printf("# broadcast: %" PRIu64 " sent to %d subscribers, %" PRIu64 " received\n", SS.bc_sent,
           SO.bc_subs, SS.bc_recv);
    printf("# channel data: %" PRIu64 " updates to %d subscribers, %" PRIu64 " fan-outs\n",
           SS.data_sent, SO.data_subs, SS.data_fanouts);
    printf("# durable: %" PRIu64 " produced, %" PRIu64 " acked, %" PRIu64 " pushed, %" PRIu64
           " consumed (window full %" PRIu64 " times)\n",
           SS.mq_produced, SS.mq_acked, SS.mq_pushed, SS.mq_consumed, SS.mq_behind);
    printf("# churn: %" PRIu64 " clients came and left, %" PRIu64 " broadcasts received by them\n",
           SS.churn_cycles, SS.churn_recv);
    if (nrss)
        printf("# RSS kB: first %" PRIu64 ", after warm-up min %" PRIu64 " max %" PRIu64
               " (%.1f %%), last %" PRIu64 " (%zu samples)\n",
               rss[0], lo, hi, lo && lo != UINT64_MAX ? 100.0 * (double)(hi - lo) / (double)lo : -1,
               rss[nrss - 1], nrss);
    for (int k = 0; k < SK_COUNT; k++)
        printf("# %s: %" PRIu64 "\n", kind_names[k], SS.viol[k]);
    printf("# verdict: %s\n", total ? "FAIL" : "PASS");
    printf("{\"mode\":\"soak\",\"seconds\":%.1f,\"chanqd_cores\":%.3f,\"driver_cores\":%.3f,"
           "\"bc_sent\":%" PRIu64 ",\"bc_recv\":%" PRIu64 ",\"data_sent\":%" PRIu64
           ",\"data_fanouts\":%" PRIu64 ",\"mq_acked\":%" PRIu64 ",\"mq_pushed\":%" PRIu64
           ",\"mq_consumed\":%" PRIu64 ",\"churn\":%" PRIu64 ",\"violations\":%" PRIu64
           ",\"rss_kb\":[",
           secs, cores, self, SS.bc_sent, SS.bc_recv, SS.data_sent, SS.data_fanouts, SS.mq_acked,
           SS.mq_pushed, SS.mq_consumed, SS.churn_cycles, total);
    for (size_t i = 0; i < nrss; i++)
        printf("%s%" PRIu64, i ? "," : "", rss[i]);
    printf("]}\n");
}

/* ---- options --------------------------------------------------------------------------------- */

static void usage(void)
{
    printf("usage: soak --ready-file F [--pid P] [options]\n"
           "  --duration S [120]  --warmup-frac F [0.2]  --rss-every S [2]  --rss-tol F [0.10]\n"
           "  (--rss-tol 0: RSS reported, not checked)\n"
           "  --drain S [60]  --topic T [soak]\n"
           "  --bc-subs N [50]  --bc-rate MSG/S [1000]  --bc-size B [64]\n"
           "  --data-subs N [50]  --data-rate UPD/S [500]  --data-interval MS [20]\n"
           "  --mq-rate MSG/S [5000]  --mq-batch N [50]  --mq-window N [8]  --mq-size B [128]\n"
           "  --churn N [20]  --churn-life S [4]\n"
           "A rate of 0 (or 0 subscribers) turns that part off.\n");
}

static void parse_opts(int argc, char **argv)
{
    static const struct option lo[] = {{"ready-file", 1, 0, 'r'},    {"pid", 1, 0, 'p'},
                                       {"duration", 1, 0, 'd'},      {"warmup-frac", 1, 0, 'w'},
                                       {"rss-every", 1, 0, 'e'},     {"rss-tol", 1, 0, 't'},
                                       {"drain", 1, 0, 'D'},         {"bc-subs", 1, 0, 'B'},
                                       {"bc-rate", 1, 0, 'R'},       {"bc-size", 1, 0, 'S'},
                                       {"data-subs", 1, 0, 'X'},     {"data-rate", 1, 0, 'Y'},
                                       {"data-interval", 1, 0, 'I'}, {"mq-rate", 1, 0, 'm'},
                                       {"mq-batch", 1, 0, 'b'},      {"mq-window", 1, 0, 'W'},
                                       {"mq-size", 1, 0, 's'},       {"churn", 1, 0, 'c'},
                                       {"churn-life", 1, 0, 'l'},    {"topic", 1, 0, 'T'},
                                       {"help", 0, 0, 'h'},          {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'r':
            SO.ready_file = optarg;
            break;
        case 'p':
            SO.pid = atoi(optarg);
            break;
        case 'd':
            SO.duration = atof(optarg);
            break;
        case 'w':
            SO.warmup_frac = atof(optarg);
            break;
        case 'e':
            SO.rss_every = atof(optarg);
            break;
        case 't':
            SO.rss_tol = atof(optarg);
            break;
        case 'D':
            SO.drain = atof(optarg);
            break;
        case 'B':
            SO.bc_subs = atoi(optarg);
            break;
        case 'R':
            SO.bc_rate = atof(optarg);
            break;
        case 'S':
            SO.bc_size = atoi(optarg);
            break;
        case 'X':
            SO.data_subs = atoi(optarg);
            break;
        case 'Y':
            SO.data_rate = atof(optarg);
            break;
        case 'I':
            SO.data_interval = atoi(optarg);
            break;
        case 'm':
            SO.mq_rate = atof(optarg);
            break;
        case 'b':
            SO.mq_batch = atoi(optarg);
            break;
        case 'W':
            SO.mq_window = atoi(optarg);
            break;
        case 's':
            SO.mq_size = atoi(optarg);
            break;
        case 'c':
            SO.churn = atoi(optarg);
            break;
        case 'l':
            SO.churn_life = atof(optarg);
            break;
        case 'T':
            SO.topic = optarg;
            break;
        case 'h':
            usage();
            exit(0);
        default:
            usage();
            exit(2);
        }
    }
    if (!SO.ready_file || SO.duration <= 0 || SO.bc_size < 8 || SO.mq_size < 32 ||
        SO.mq_batch < 1 || SO.mq_window < 1 || SO.churn_life < 0.1 || SO.rss_every <= 0 ||
        SO.data_interval < 1 || SO.bc_subs < 0 || SO.data_subs < 0 || SO.churn < 0) {
        usage();
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse_opts(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    read_ready();
    rss = calloc(MAX_RSS_SAMPLES, sizeof(*rss));
    rss_t = calloc(MAX_RSS_SAMPLES, sizeof(*rss_t));
    if (!rss || !rss_t)
        soak_die("out of memory");
    soak_loop = uv_default_loop();
    uv_timer_init(soak_loop, &tick_timer);
    t_phase = soak_now_ms();
    soak_chan_start();
    soak_mq_start();
    uv_timer_start(&tick_timer, on_tick, SOAK_TICK_MS, SOAK_TICK_MS);
    uv_run(soak_loop, UV_RUN_DEFAULT);
    soak_mq_free();
    summary();
    uint64_t total = 0;
    for (int k = 0; k < SK_COUNT; k++)
        total += SS.viol[k];
    free(rss);
    free(rss_t);
    uv_loop_close(soak_loop);
    return total ? 1 : 0;
}
