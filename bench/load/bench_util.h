/* bench_util.h - helpers shared by the load generators (cqbench, mqbench). */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>

/* Monotonic clock in nanoseconds. */
uint64_t bench_now_ns(void);

/* utime + stime of process pid in seconds (from /proc/PID/stat), or -1 when unreadable;
 * *user (if not NULL) gets utime alone. */
double bench_proc_cpu_s(int pid, double *user);

#endif
