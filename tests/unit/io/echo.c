/* echo.c - a sans-I/O echo engine. See echo.h. */
#include "echo.h"

#include "cq_alloc.h"
#include "cq_list.h"
#include "cq_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define ECHO_SENDQ_HARD (1u << 20)

struct echo {
    bool hold;
    cq_list_t conns;   /* every echo_conn_t (loop thread) */
    cq_list_t pending; /* connections with output not yet flushed */
    size_t held;       /* inputs in flight */
    uint64_t inputs;   /* every input taken */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool completed;         /* under mu: echo_complete was called */
    uint64_t held_total;    /* under mu */
    void (*wake)(void *ud); /* under mu */
    void *wake_ud;
};

struct echo_conn {
    echo_t *e;
    const cq_transport_ops_t *t;
    void *tctx;
    cq_sendq_t q;
    cq_sbuf_t held;  /* the bytes in flight (hold) */
    size_t nheld;    /* their inputs */
    uint64_t inputs; /* every input taken */
    cq_list_t node, pending_node;
};

echo_t *echo_new(bool hold)
{
    echo_t *e = cq_calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->hold = hold;
    cq_list_init(&e->conns);
    cq_list_init(&e->pending);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    return e;
}

echo_t *echo_free(echo_t *e)
{
    if (!e)
        return NULL;
    while (!cq_list_empty(&e->conns))
        echo_conn_free(cq_container_of(e->conns.next, echo_conn_t, node));
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    cq_free(e);
    return NULL;
}

void echo_set_wake(echo_t *e, void (*wake)(void *ud), void *ud)
{
    pthread_mutex_lock(&e->mu);
    e->wake = wake;
    e->wake_ud = ud;
    pthread_mutex_unlock(&e->mu);
}

echo_conn_t *echo_conn_new(echo_t *e, const cq_transport_ops_t *t, void *tctx)
{
    echo_conn_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    *c = (echo_conn_t){.e = e, .t = t, .tctx = tctx};
    cq_sendq_init(&c->q, CQ_FRAMING_FIXED); /* PACKET entries only: the mode is unused */
    cq_sbuf_init(&c->held);
    cq_list_insert_tail(&e->conns, &c->node);
    cq_list_init(&c->pending_node);
    return c;
}

cq_sendq_t *echo_conn_sendq(echo_conn_t *c)
{
    return &c->q;
}

/* Queues bytes as they are (a PACKET entry is written unchanged) and marks c pending. */
static void queue(echo_conn_t *c, const uint8_t *p, size_t n)
{
    cq_buf_t *b = cq_buf_from(p, n);
    if (!b || cq_sendq_push_ref(&c->q, b, CQ_SENDQ_PACKET, ECHO_SENDQ_HARD) < 0) {
        cq_buf_unref(b);
        c->t->close(c->tctx); /* out of memory, or a peer that does not read */
        return;
    }
    if (cq_list_empty(&c->pending_node))
        cq_list_insert_tail(&c->e->pending, &c->pending_node);
}

static void hold(echo_conn_t *c, const uint8_t *p, size_t n)
{
    echo_t *e = c->e;
    if (cq_sbuf_append(&c->held, p, n) < 0) {
        c->t->close(c->tctx);
        return;
    }
    c->nheld++;
    e->held++;
    pthread_mutex_lock(&e->mu);
    e->held_total++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void echo_conn_input(echo_conn_t *c, const uint8_t *p, size_t n)
{
    c->inputs++;
    c->e->inputs++;
    if (c->e->hold)
        hold(c, p, n);
    else
        queue(c, p, n);
}

uint64_t echo_conn_inputs(const echo_conn_t *c)
{
    return c->inputs;
}

void echo_conn_free(echo_conn_t *c)
{
    if (!c)
        return;
    c->e->held -= c->nheld;
    cq_list_remove(&c->node);
    cq_list_remove(&c->pending_node);
    cq_sendq_done(&c->q);
    cq_sbuf_done(&c->held);
    cq_free(c);
}

void echo_flush(echo_t *e)
{
    while (!cq_list_empty(&e->pending)) {
        echo_conn_t *c = cq_container_of(e->pending.next, echo_conn_t, pending_node);
        cq_list_remove(&c->pending_node);
        cq_list_init(&c->pending_node);
        c->t->flush(c->tctx);
    }
}

void echo_drain(echo_t *e)
{
    pthread_mutex_lock(&e->mu);
    bool done = e->completed;
    e->completed = false;
    pthread_mutex_unlock(&e->mu);
    cq_list_t *n;
    cq_list_foreach(n, &e->conns)
    {
        echo_conn_t *c = cq_container_of(n, echo_conn_t, node);
        if (!done || !c->nheld)
            continue;
        queue(c, c->held.data, c->held.len);
        cq_sbuf_consume(&c->held, c->held.len);
        e->held -= c->nheld;
        c->nheld = 0;
    }
}

bool echo_idle(const echo_t *e)
{
    return e->held == 0;
}

int echo_metrics(const echo_t *e, cq_sbuf_t *b)
{
    return cq_sbuf_printf(b,
                          "# TYPE chanq_echo_inputs_total counter\nchanq_echo_inputs_total %llu\n",
                          (unsigned long long)e->inputs);
}

void echo_complete(echo_t *e)
{
    pthread_mutex_lock(&e->mu);
    e->completed = true;
    if (e->wake)
        e->wake(e->wake_ud);
    pthread_mutex_unlock(&e->mu);
}

bool echo_wait_held(echo_t *e, uint64_t n, int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&e->mu);
    int r = 0;
    while (e->held_total < n && r == 0)
        r = pthread_cond_timedwait(&e->cv, &e->mu, &until);
    bool ok = e->held_total >= n;
    pthread_mutex_unlock(&e->mu);
    return ok;
}
