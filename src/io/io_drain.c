/* io_drain.c - the three-step shutdown of an engine's loop. See io_drain.h. */
#include "io_drain.h"

#include "io_sqconn.h"

static void grace_closed(io_drain_t *d)
{
    if (d->grace_on && !uv_is_closing((uv_handle_t *)&d->grace))
        uv_close((uv_handle_t *)&d->grace, NULL);
}

static void close_other(io_drain_t *d, uv_handle_t *h)
{
    if (h != (uv_handle_t *)&d->grace)
        d->ops->close(d->ud, h);
}

static void drain_walk(uv_handle_t *h, void *arg)
{
    io_drain_t *d = arg;
    if (uv_is_closing(h))
        return;
    if (d->ops->is_conn(d->ud, h))
        uv_read_stop((uv_stream_t *)h); /* what was read is handled; nothing more is read */
    else if (h != (uv_handle_t *)&d->grace)
        d->ops->drain(d->ud, h);
}

/* CLOSE: each connection writes what is queued, then shuts down and closes. */
static void close_walk(uv_handle_t *h, void *arg)
{
    io_drain_t *d = arg;
    if (uv_is_closing(h))
        return;
    if (d->ops->is_conn(d->ud, h))
        cq__io_sqconn_close(h->data);
    else
        close_other(d, h);
}

static void drop_walk(uv_handle_t *h, void *arg)
{
    io_drain_t *d = arg;
    if (uv_is_closing(h))
        return;
    if (d->ops->is_conn(d->ud, h))
        cq__io_sqconn_drop(h->data);
    else
        close_other(d, h);
}

static void stop_close(io_drain_t *d)
{
    d->phase = IO_CLOSE;
    d->ops->flush(d->ud); /* the answers the last completions queued */
    if (d->ops->closing)
        d->ops->closing(d->ud);
    uv_walk(d->loop, close_walk, d);
    if (d->nlive == 0)
        grace_closed(d);
}

void cq__io_drain_drop(io_drain_t *d)
{
    d->phase = IO_CLOSE;
    if (d->ops->closing)
        d->ops->closing(d->ud);
    uv_walk(d->loop, drop_walk, d);
    grace_closed(d);
}

static void on_grace(uv_timer_t *t)
{
    io_drain_t *d = t->data;
    d->ops->grace_over(d->ud);
    cq__io_drain_drop(d);
}

void cq__io_drain_init(io_drain_t *d, uv_loop_t *loop, uint64_t grace_ms, const io_drain_ops_t *ops,
                       void *ud)
{
    *d = (io_drain_t){.loop = loop, .ops = ops, .ud = ud, .grace_ms = grace_ms};
}

void cq__io_drain_step(io_drain_t *d)
{
    if (d->phase == IO_RUN) {
        d->phase = IO_DRAIN;
        uv_walk(d->loop, drain_walk, d);
        uv_timer_init(d->loop, &d->grace);
        d->grace_on = true;
        d->grace.data = d;
        uv_timer_start(&d->grace, on_grace, d->grace_ms, 0);
    }
    if (d->phase == IO_DRAIN && d->ops->idle(d->ud))
        stop_close(d);
}

void cq__io_drain_opened(io_drain_t *d)
{
    d->nlive++;
}

void cq__io_drain_closed(io_drain_t *d)
{
    if (--d->nlive == 0 && d->phase == IO_CLOSE)
        grace_closed(d);
}
