#include "cq_clock.h"

#include <time.h>

uint64_t cq_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t cq_clock_mono_ms(void)
{
    return cq_clock_mono_ns() / 1000000u;
}

int64_t cq_clock_unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
