/* echo_io.c - the echo engine on the engine-loop host: the ops table, the connection class, the
 * lifecycle. See echo_io.h; the host is src/io/io_engine.c. */
#include "echo_io.h"

#include "cq_alloc.h"
#include "cq_log.h"
#include "io_engine.h"

#include <errno.h>

#define ECHO_TICK_MS 10 /* the idle timeout holds to within this */

struct echo_io {
    io_engine_t *host;
    echo_t *eng; /* borrowed */
};

/* ---- the engine's ops (loop thread) ------------------------------------------------------- */

static void eng_wake(void *ud) /* the engine's wake: any thread */
{
    cq__io_engine_wake(((echo_io_t *)ud)->host);
}

static void on_wake(void *ud)
{
    echo_drain(((echo_io_t *)ud)->eng);
}

static void on_flush(void *ud)
{
    echo_flush(((echo_io_t *)ud)->eng);
}

static bool on_idle(void *ud)
{
    return echo_idle(((echo_io_t *)ud)->eng);
}

static int on_metrics(void *ud, cq_sbuf_t *b)
{
    return echo_metrics(((echo_io_t *)ud)->eng, b);
}

static void on_unwake(void *ud)
{
    echo_set_wake(((echo_io_t *)ud)->eng, NULL, NULL); /* completions only queue from now on */
}

static void on_grace_over(void *ud, size_t nlive)
{
    CQ_WARN("echo", "shutdown: the grace period is over: dropping %zu connections", nlive);
}

static const io_engine_ops_t host_ops = {.wake = on_wake,
                                         .flush = on_flush,
                                         .idle = on_idle,
                                         .metrics = on_metrics,
                                         .unwake = on_unwake,
                                         .grace_over = on_grace_over};

/* ---- the connection class ----------------------------------------------------------------- */

static const cq_transport_ops_t tcp_ops = IO_ENGINE_TCP_OPS;

static cq_sendq_t *conn_open(void *ud, io_econn_t *c)
{
    echo_conn_t *ec = echo_conn_new(((echo_io_t *)ud)->eng, &tcp_ops, &c->sc);
    c->conn = ec;
    return ec ? echo_conn_sendq(ec) : NULL;
}

static void conn_input(void *ud, io_econn_t *c, const uint8_t *p, size_t n)
{
    echo_conn_input(c->conn, p, n);
}

static void conn_closed(void *ud, io_econn_t *c)
{
    echo_conn_free(c->conn);
}

static uint64_t conn_frames(void *ud, const io_econn_t *c)
{
    return echo_conn_inputs(c->conn);
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

int echo_io_start(echo_io_t **ret, echo_t *eng, const echo_io_opts_t *o, char *bound, size_t blen,
                  char *err, size_t errlen)
{
    const io_engine_opts_t ho = {
        .name = "echo",
        .tick_ms = ECHO_TICK_MS,
        .metrics_ms = ECHO_TICK_MS,
        .grace_ms = (uint64_t)(o->shutdown_grace_ms > 0 ? o->shutdown_grace_ms : 0),
        .conns_family = "chanq_echo_connections",
        .errors_family = "chanq_echo_accept_errors_total",
        .closes_family = "chanq_echo_closes_total"};
    const io_eclass_t k = {.name = "echo",
                           .cap_text = "echo-max-connections reached",
                           .open = conn_open,
                           .input = conn_input,
                           .closed = conn_closed,
                           .frames = conn_frames,
                           .idle_timeout_ms = o->idle_timeout_ms,
                           .max_conns = o->max_conns};
    echo_io_t *io = cq_calloc(1, sizeof(*io));
    if (!io)
        return -ENOMEM;
    io->eng = eng;
    io->host = cq__io_engine_new(&ho, &host_ops, io, err, errlen);
    int r = io->host ? 0 : -ENOMEM;
    if (r == 0)
        echo_set_wake(eng, eng_wake, io);
    if (r == 0)
        r = cq__io_engine_listen(io->host, &k, o->addr, bound, blen, err, errlen);
    if (r >= 0)
        r = cq__io_engine_run(io->host, err, errlen);
    if (r < 0) {
        echo_io_free(io);
        return r;
    }
    *ret = io;
    return 0;
}

int echo_io_metrics_append(void *ud, cq_sbuf_t *out)
{
    return cq__io_engine_metrics_append(((echo_io_t *)ud)->host, out);
}

void echo_io_stop(echo_io_t *io)
{
    cq__io_engine_stop(io->host);
}

echo_io_t *echo_io_free(echo_io_t *io)
{
    if (!io)
        return NULL;
    io->host = cq__io_engine_free(io->host);
    cq_free(io);
    return NULL;
}
