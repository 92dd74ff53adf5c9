/* cq_log.h - logging through one sink.
 *
 * Who logs. The module that decides what happens to a connection, a channel or a request logs
 * that decision once, with the ids that find it (conn id, peer address, channel, topic, module):
 * the core, the durable-topic engine (src/mqsrv) and the manager (src/mgr) for what they decide,
 * the edge (src/io, src/main) for what only it sees (listeners, accept errors, signals, start-up).
 * The libraries and pure engines below them (pkg, framing, wire, transport, fanout, chandata,
 * spatial, mq, config, store, coord) never log: they return a negative code, with an error text
 * where the caller needs one, and the caller decides.
 *
 * Levels.
 *   ERROR  the process cannot start, or what an operator relies on was not kept (the manager's
 *          state or audit log not written);
 *   WARN   the server failed to do its part: out of memory, a store request failed, a reply or
 *          a command lost, a cap reached, a fallback taken (io_uring to write(2)); also a server
 *          presenting a wrong secret to a manager (a misconfiguration, not a passing peer);
 *   INFO   one line per event of a peer or an object: a connection closed and why (a plain reset
 *          is DEBUG), an authentication refused, a channel created or removed, a role or a
 *          configuration applied, a listener bound;
 *   DEBUG  tracing, off by default.
 * WARN and ERROR lines are counted (the logs{level} metric).
 *
 * Nothing a peer can repeat floods the log: lines a peer causes per message (a message dropped
 * or denied) go through the core's per-worker limit (CQ_MSG_LOG, core_int.h: 50 lines a second,
 * the rest counted in one line), failed authentications through the address budget's
 * (cq_authlim_log_allow), refused accepts through the listener's (one line per 10 s, with the
 * count of the others).
 *
 * Every line goes to the sink function (default: stderr, one write per line). Thread-safe as long
 * as the sink is. The level and the sink are process-wide; set them before starting threads.
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
