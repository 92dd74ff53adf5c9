/* mgr_store.c - the manager's store thread. See mgr_store.h. */
#include "mgr_store.h"

#include "cq_alloc.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

struct mgr_store {
    const cq_mgrstore_ops_t *ops;
    void *ud;
    void (*wake)(void *);
    void *wake_ud;
    pthread_t thread;
    bool started;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit, want_load, want_save;
    char *save_json; /* the next save's document (owned) */
    size_t save_len;
    int64_t save_expect;
    mgr_store_res_t *head, *tail;
};

static void push(mgr_store_t *s, mgr_store_res_t *r) /* under mu */
{
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    s->wake(s->wake_ud);
}

/* Runs one call (mu held on entry and exit, released during the store's call). */
static void run_one(mgr_store_t *s, mgr_store_res_t *r)
{
    if (s->want_save) {
        char *json = s->save_json;
        size_t len = s->save_len;
        int64_t expect = s->save_expect;
        s->save_json = NULL;
        s->want_save = false;
        pthread_mutex_unlock(&s->mu);
        r->save = true;
        r->rc = s->ops->save(s->ud, json, len, expect, &r->ver);
        cq_free(json);
    } else {
        s->want_load = false;
        pthread_mutex_unlock(&s->mu);
        r->ver = -1;
        r->rc = s->ops->load(s->ud, &r->json, &r->len, &r->ver);
    }
    pthread_mutex_lock(&s->mu);
    push(s, r);
}

static void *thread_main(void *arg)
{
    mgr_store_t *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        if (!s->want_save && !s->want_load) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        mgr_store_res_t *r = cq_calloc(1, sizeof(*r));
        if (!r) { /* out of memory: try again later */
            pthread_mutex_unlock(&s->mu);
            usleep(100000);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        run_one(s, r);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The store's watch (any thread): the document may have changed under us. */
static void changed(void *arg)
{
    cq__mgr_store_load(arg);
}

mgr_store_t *cq__mgr_store_new(const cq_mgrstore_ops_t *ops, void *ud, void (*wake)(void *),
                               void *wake_ud)
{
    mgr_store_t *s = cq_calloc(1, sizeof(*s));
    if (!s) {
        if (ops->free)
            ops->free(ud);
        return NULL;
    }
    *s = (mgr_store_t){.ops = ops, .ud = ud, .wake = wake, .wake_ud = wake_ud};
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

int cq__mgr_store_start(mgr_store_t *s)
{
    if (s->ops->watch)
        s->ops->watch(s->ud, changed, s);
    s->want_load = true; /* the first load */
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0)
        return -EAGAIN;
    s->started = true;
    return 0;
}

void cq__mgr_store_save(mgr_store_t *s, const char *json, size_t len, int64_t expect_ver)
{
    char *copy = cq_malloc(len + 1);
    if (copy) {
        memcpy(copy, json, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&s->mu);
    if (copy) {
        cq_free(s->save_json);
        s->save_json = copy;
        s->save_len = len;
        s->save_expect = expect_ver;
        s->want_save = true;
        pthread_cond_signal(&s->cv);
    } else { /* answered as a failed save: the engine tries again at its tick */
        mgr_store_res_t *r = cq_calloc(1, sizeof(*r));
        if (r) {
            r->save = true;
            r->rc = -ENOMEM;
            push(s, r);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

void cq__mgr_store_load(mgr_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->want_load = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

mgr_store_res_t *cq__mgr_store_take(mgr_store_t *s)
{
    pthread_mutex_lock(&s->mu);
    mgr_store_res_t *r = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void cq__mgr_store_res_free(mgr_store_res_t *r)
{
    if (!r)
        return;
    cq_free(r->json);
    cq_free(r);
}

void cq__mgr_store_stop(mgr_store_t *s)
{
    if (!s || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
}

mgr_store_t *cq__mgr_store_free(mgr_store_t *s)
{
    if (!s)
        return NULL;
    cq__mgr_store_stop(s);
    if (s->ops->free) /* after it returns no watch callback runs */
        s->ops->free(s->ud);
    for (mgr_store_res_t *r = s->head, *n; r; r = n) {
        n = r->next;
        cq__mgr_store_res_free(r);
    }
    cq_free(s->save_json);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    cq_free(s);
    return NULL;
}
