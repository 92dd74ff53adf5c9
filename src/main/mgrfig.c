/* mgrfig.c - the host's figures for the manager's report. See mgrfig.h. Everything here is
 * read from /proc, getrusage or atomics: nothing locks a hot path. */
#include "mgrfig.h"

#include "cq_clock.h"
#include "cq_log.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Threads of this process ("Threads:" of /proc/self/status), 0 when unknown. */
static uint32_t proc_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned n = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %u", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* Resident memory in MiB (/proc/self/statm), 0 when unknown. */
static uint32_t proc_rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, rss = 0;
    if (f && fscanf(f, "%lu %lu", &size, &rss) != 2)
        rss = 0;
    if (f)
        fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return (uint32_t)(rss * (unsigned long)(page > 0 ? page : 4096) / (1024 * 1024));
}

/* CPU time of the process since the previous sample, in % of one core. */
static uint32_t cpu_percent(cq_main_figures_t *f)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return 0;
    uint64_t cpu = (uint64_t)ru.ru_utime.tv_sec * 1000000 + (uint64_t)ru.ru_utime.tv_usec +
                   (uint64_t)ru.ru_stime.tv_sec * 1000000 + (uint64_t)ru.ru_stime.tv_usec;
    uint64_t wall = cq_clock_mono_ms() * 1000;
    uint64_t pct = 0;
    if (f->wall_us && wall > f->wall_us)
        pct = (cpu - f->cpu_us) * 100 / (wall - f->wall_us);
    f->cpu_us = cpu;
    f->wall_us = wall;
    return (uint32_t)pct;
}

static uint64_t pos(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

static void relay(cq_shared_t *sh, cq_mgrlink_relay_t *r)
{
    int64_t conns[CQ_CONN_TRANSPORTS], chans[6], subs;
    cq_shared_gauges(sh, conns, chans, &subs);
    r->tcp = pos(conns[CQ_CONN_TCP]);
    r->ws = pos(conns[CQ_CONN_WS]);
    r->wss = pos(conns[CQ_CONN_WSS]);
    r->kcp = pos(conns[CQ_CONN_KCP]);
    for (int t = 0; t < CQ_MGRLINK_CHAN_N; t++)
        r->channels[t] = pos(chans[t + 1]);
    r->subscribers = pos(subs);
    r->fanouts_total = cq_shared_counter(sh, "chanq_fanouts_total");
    r->slow_consumer_closes_total = cq_shared_counter(sh, "slow_consumer_closed");
}

/* The reported form of a bound "H:P": the advertised host, or the bound one if that is not a
 * wildcard; "" otherwise. */
static void advertised(const char *bound, const char *host, char *out, size_t cap)
{
    const char *colon = strrchr(bound, ':');
    out[0] = '\0';
    if (!*bound || !colon)
        return;
    if (*host) {
        bool v6 = strchr(host, ':') && host[0] != '[';
        snprintf(out, cap, v6 ? "[%s]%s" : "%s%s", host, colon);
    } else if (strncmp(bound, "0.0.0.0:", 8) != 0 && strncmp(bound, "[::]:", 5) != 0) {
        snprintf(out, cap, "%s", bound);
    }
}

void cq_main_figures_addrs(cq_main_figures_t *f, const cq_io_t *io, const char *advertise_host)
{
    static const char *const names[CQ_MGRLINK_TRANSPORTS] = {"tcp", "ws", "wss", "kcp"};
    static const int conn[CQ_MGRLINK_TRANSPORTS] = {CQ_CONN_TCP, CQ_CONN_WS, CQ_CONN_WSS,
                                                    CQ_CONN_KCP};
    for (int t = 0; t < CQ_MGRLINK_TRANSPORTS; t++) {
        const char *b = cq_io_client_bound(io, conn[t]);
        advertised(b, advertise_host ? advertise_host : "", f->addrs[t], sizeof(f->addrs[t]));
        if (*b && !f->addrs[t][0])
            CQ_WARN("main",
                    "the %s listener is bound to %s: the managers are not told of it "
                    "(--relay-advertise-host sets the host they give clients)",
                    names[t], b);
    }
}

/* A relay node's identity, addresses and links (f->links, refilled). */
static void relay_node(cq_main_figures_t *f, cq_mgrlink_relay_t *r)
{
    if (cq_main_relay_report(f->relay, r, f->links, CQ_MAIN_RELAY_LINKS) < 0)
        CQ_WARN("main", "the report to the managers carries no relay link (out of memory)");
    for (int t = 0; t < CQ_MGRLINK_TRANSPORTS; t++)
        r->addrs[t] = f->addrs[t];
}

void cq_main_figures(void *ud, cq_mgrlink_host_t *h)
{
    cq_main_figures_t *f = ud;
    h->threads = proc_threads();
    h->mem = proc_rss_mib();
    h->cpu = cpu_percent(f);
    if (f->sh) {
        h->has_relay = true;
        relay(f->sh, &h->relay);
        if (f->relay)
            relay_node(f, &h->relay);
        h->sockets += (uint32_t)(h->relay.tcp + h->relay.ws + h->relay.wss + h->relay.kcp);
    }
    h->has_repl = f->cluster && cq_main_cluster_repl(f->cluster, &h->repl);
}
