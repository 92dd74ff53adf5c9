/* cq_log.h - logging through one sink.
 *
 * Module code logs only at DEBUG; the edge (io, main) logs once with context. Every line goes to
 * the sink function (default: stderr, one write per line). Thread-safe as long as the sink is.
 * The level and the sink are process-wide; set them before starting threads.
 */
#ifndef CQ_LOG_H
#define CQ_LOG_H

#include <stdarg.h>

typedef enum {
    CQ_LOG_DEBUG = 0,
    CQ_LOG_INFO,
    CQ_LOG_WARN,
    CQ_LOG_ERROR,
    CQ_LOG_OFF
} cq_log_level_t;

typedef void (*cq_log_sink_fn)(void *ud, cq_log_level_t lvl, const char *topic, const char *line);

void cq_log_set_level(cq_log_level_t lvl);
cq_log_level_t cq_log_get_level(void);
/* Parse "debug"/"info"/"warn"/"error"/"off" or channeld's -1..3; returns 0 or -EINVAL. */
int cq_log_parse_level(const char *s, cq_log_level_t *ret_lvl);
/* NULL restores the stderr sink. */
void cq_log_set_sink(cq_log_sink_fn fn, void *ud);

void cq_log(cq_log_level_t lvl, const char *topic, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Lines logged at lvl (WARN and ERROR are counted; others read 0) since the start: the
 * logs{level} metric. Any thread. */
unsigned long long cq_log_count(cq_log_level_t lvl);

#define cq_log_enabled(lvl) ((lvl) >= cq_log_get_level())
#define CQ_DEBUG(topic, ...)                                                                       \
    do {                                                                                           \
        if (cq_log_enabled(CQ_LOG_DEBUG))                                                          \
            cq_log(CQ_LOG_DEBUG, topic, __VA_ARGS__);                                              \
    } while (0)
#define CQ_INFO(topic, ...)  cq_log(CQ_LOG_INFO, topic, __VA_ARGS__)
#define CQ_WARN(topic, ...)  cq_log(CQ_LOG_WARN, topic, __VA_ARGS__)
#define CQ_ERROR(topic, ...) cq_log(CQ_LOG_ERROR, topic, __VA_ARGS__)

#endif
