/* io_snapshot.c - a published metrics text. See io_snapshot.h. */
#include "io_snapshot.h"

void cq__io_snapshot_init(io_snapshot_t *s)
{
    pthread_mutex_init(&s->mu, NULL);
    cq_sbuf_init(&s->text);
    s->on = false;
}

void cq__io_snapshot_done(io_snapshot_t *s)
{
    cq__io_snapshot_unpublish(s);
    pthread_mutex_destroy(&s->mu);
}

void cq__io_snapshot_publish(io_snapshot_t *s, cq_sbuf_t *b)
{
    pthread_mutex_lock(&s->mu);
    cq_sbuf_t old = s->text;
    s->text = *b;
    s->on = true;
    pthread_mutex_unlock(&s->mu);
    cq_sbuf_done(&old);
    cq_sbuf_init(b);
}

int cq__io_snapshot_append(io_snapshot_t *s, cq_sbuf_t *out)
{
    int r = 0;
    pthread_mutex_lock(&s->mu);
    if (s->on && s->text.len)
        r = cq_sbuf_append(out, s->text.data, s->text.len);
    pthread_mutex_unlock(&s->mu);
    return r;
}

void cq__io_snapshot_unpublish(io_snapshot_t *s)
{
    pthread_mutex_lock(&s->mu);
    cq_sbuf_t old = s->text;
    cq_sbuf_init(&s->text);
    s->on = false;
    pthread_mutex_unlock(&s->mu);
    cq_sbuf_done(&old);
}
