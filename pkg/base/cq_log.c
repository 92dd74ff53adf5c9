#include "cq_log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int level = CQ_LOG_INFO;
static cq_log_sink_fn sink_fn;
static void *sink_ud;

static _Atomic unsigned long long counts[CQ_LOG_OFF]; /* lines logged, by level */

static const char *const names[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};

void cq_log_set_level(cq_log_level_t lvl)
{
    atomic_store(&level, (int)lvl);
}

cq_log_level_t cq_log_get_level(void)
{
    return (cq_log_level_t)atomic_load_explicit(&level, memory_order_relaxed);
}

int cq_log_parse_level(const char *s, cq_log_level_t *ret_lvl)
{
    static const struct {
        const char *name;
        cq_log_level_t lvl;
    } tab[] = {{"debug", CQ_LOG_DEBUG}, {"-1", CQ_LOG_DEBUG},  {"-2", CQ_LOG_DEBUG},
               {"-3", CQ_LOG_DEBUG},    {"-4", CQ_LOG_DEBUG},  {"info", CQ_LOG_INFO},
               {"0", CQ_LOG_INFO},      {"warn", CQ_LOG_WARN}, {"1", CQ_LOG_WARN},
               {"error", CQ_LOG_ERROR}, {"2", CQ_LOG_ERROR},   {"3", CQ_LOG_ERROR},
               {"off", CQ_LOG_OFF}};
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (strcasecmp(s, tab[i].name) == 0) {
            *ret_lvl = tab[i].lvl;
            return 0;
        }
    }
    return -EINVAL;
}

void cq_log_set_sink(cq_log_sink_fn fn, void *ud)
{
    sink_fn = fn;
    sink_ud = ud;
}

static void stderr_sink(cq_log_level_t lvl, const char *topic, const char *line)
{
    char out[1200];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(out, sizeof(out), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %-8s %s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[lvl], topic, line);
    if (n >= (int)sizeof(out)) {
        n = sizeof(out) - 1;
        out[n - 1] = '\n'; /* truncated: still one line */
    }
    ssize_t w = write(STDERR_FILENO, out, (size_t)n);
    (void)w;
}

void cq_log(cq_log_level_t lvl, const char *topic, const char *fmt, ...)
{
    if (lvl < cq_log_get_level() || lvl >= CQ_LOG_OFF)
        return;
    if (lvl >= CQ_LOG_WARN)
        atomic_fetch_add_explicit(&counts[lvl], 1, memory_order_relaxed);
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (sink_fn)
        sink_fn(sink_ud, lvl, topic, line);
    else
        stderr_sink(lvl, topic, line);
}

unsigned long long cq_log_count(cq_log_level_t lvl)
{
    if (lvl < CQ_LOG_WARN || lvl >= CQ_LOG_OFF)
        return 0;
    return atomic_load_explicit(&counts[lvl], memory_order_relaxed);
}
