/* cqbench_util.c - cqbench's small helpers: fatal errors, clocks, a growing byte buffer, and
 * the /proc sampling of the server process (CPU, RSS, run-queue wait, UDP drops) and the load.
 */
#include "cqbench_int.h"
#include "bench_util.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------------- */

void cqb_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cqbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

uint64_t cqb_now_ns(void)
{
    return bench_now_ns();
}

void cqb_bbuf_append(bbuf_t *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            cqb_die("out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

void cqb_bbuf_consume(bbuf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* ---- /proc sampling ---------------------------------------------------------------------- */

/* VmRSS in KiB, or -1. */
long cqb_proc_rss_kb(int pid)
{
    if (pid <= 0)
        return -1;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* Time the threads of pid spent waiting on a run queue (runnable, not running), in seconds,
 * summed over /proc/PID/task/TID/schedstat; -1 if unavailable. A high value means the process
 * was starved of CPU (the machine was busy), not that it was idle. pid 0: this process. */
double cqb_proc_runq_wait_s(int pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", pid > 0 ? pid : (int)getpid());
    DIR *d = opendir(path);
    if (!d)
        return -1;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sp[400];
        snprintf(sp, sizeof(sp), "%s/%s/schedstat", path, e->d_name);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue;
        unsigned long long run, wait;
        if (fscanf(f, "%llu %llu", &run, &wait) == 2)
            sum += (double)wait / 1e9;
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* --pid P1,P2,...: the servers of one run (a relay's nodes and its nats-server), summed. */
double cqb_servers_cpu_s(double *user, double *each)
{
    double sum = 0, usum = 0;
    if (O.npids == 0)
        return -1;
    for (int i = 0; i < O.npids; i++) {
        double u = 0, c = bench_proc_cpu_s(O.pids[i], &u);
        if (c < 0)
            return -1;
        if (each)
            each[i] = c;
        sum += c;
        usum += u;
    }
    if (user)
        *user = usum;
    return sum;
}

long cqb_servers_rss_kb(void)
{
    long sum = 0;
    if (O.npids == 0)
        return -1;
    for (int i = 0; i < O.npids; i++) {
        long kb = cqb_proc_rss_kb(O.pids[i]);
        if (kb < 0)
            return -1;
        sum += kb;
    }
    return sum;
}

double cqb_servers_runq_wait_s(void)
{
    double sum = 0;
    if (O.npids == 0)
        return -1;
    for (int i = 0; i < O.npids; i++) {
        double w = cqb_proc_runq_wait_s(O.pids[i]);
        if (w < 0)
            return -1;
        sum += w;
    }
    return sum;
}

/* Datagrams the kernel dropped on the UDP sockets bound to port (the "drops" column of
 * /proc/net/udp, summed: chanqd binds one SO_REUSEPORT socket per worker), or -1. */
long long cqb_proc_udp_drops(unsigned port)
{
    FILE *f = fopen("/proc/net/udp", "r");
    if (!f)
        return -1;
    char line[512];
    long long sum = 0;
    unsigned lport;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, " %*u: %*8x:%4x", &lport) != 1 || lport != port)
            continue;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops */
        char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
        for (int i = 0; tok && i < 12; i++)
            tok = strtok_r(NULL, " \t\n", &save);
        if (tok)
            sum += atoll(tok);
    }
    fclose(f);
    return sum;
}

double cqb_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

void cqb_loadavg(char *out, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
            a = b = c = 0;
        fclose(f);
    }
    snprintf(out, len, "%.2f %.2f %.2f", a, b, c);
}

/* ---- clocks ------------------------------------------------------------------------------ */

uint64_t cqb_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
