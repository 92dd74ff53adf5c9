#include "bench_util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_proc_cpu_s(int pid, double *user)
{
    if (pid <= 0)
        return -1;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* comm may contain spaces and ')' */
    if (!p)
        return -1;
    unsigned long ut, st;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    double hz = (double)sysconf(_SC_CLK_TCK);
    if (user)
        *user = (double)ut / hz;
    return (double)(ut + st) / hz;
}
