/* topics.c - cluster-wide topics (issue 11, doc/cluster.md "Topics"): a topic exists on every
 * shard, and each shard's master makes it so in its own database; slaves get it by replication.
 *
 * Two directions. Out: a creation or an online change made through this engine is told to
 * opts.on_topic once the store recorded it (chanqd publishes it to the ZooKeeper registry).
 * In: cq_mqsrv_topics_apply() hands the registry's whole list over; the engine keeps it and,
 * while it may write, makes each declared topic that is new or changed so in its store.
 *
 * Why only what is new or changed, not every listing in full: a listing may be older than a
 * change made here a moment ago (its publication not yet written), and applying it in full
 * would undo that change until the publication comes back. A changed declaration is the
 * registry's word; an unchanged one was applied already. A new master applies everything
 * once, after it read its topic list back (its cache then shows its database, not a slave's
 * last refresh). What the declaration causes is never told to on_topic: it came from the
 * registry, publishing it again would only loop.
 */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

typedef struct mq_decl {
    cq_mqsrv_topic_decl_t d;
    bool pending; /* new or changed: to be applied when the engine may write */
} mq_decl_t;

int cq_mqsrv_topics_apply(cq_mqsrv_t *s, const cq_mqsrv_topic_decl_t *t, size_t n)
{
    cq_mqsrv_topic_decl_t *v = cq_malloc((n ? n : 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    if (n)
        memcpy(v, t, n * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i].name[CQ_MQ_TOPIC_MAX] = '\0';
    pthread_mutex_lock(&s->inbox_mu);
    cq_mqsrv_topic_decl_t *old = s->decl_next; /* two before a drain: the last one wins */
    s->decl_next = v;
    s->decl_next_n = n;
    s->decl_handed = true;
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
    cq_free(old);
    return 0;
}

static mq_decl_t *decl_find(mq_decl_t *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(v[i].d.name, name) == 0) /* as the store and the cache compare */
            return &v[i];
    return NULL;
}

void cq__mqsrv_decl_swap(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    bool handed = s->decl_handed;
    cq_mqsrv_topic_decl_t *v = s->decl_next;
    size_t n = s->decl_next_n;
    s->decl_next = NULL;
    s->decl_handed = false;
    pthread_mutex_unlock(&s->inbox_mu);
    if (!handed)
        return;
    mq_decl_t *nd = cq_malloc((n ? n : 1) * sizeof(*nd));
    if (!nd) {
        CQ_WARN("mq", "cluster topics: out of memory; the declaration waits for the next one");
        cq_free(v);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const mq_decl_t *o = decl_find(s->decls, s->ndecls, v[i].name);
        nd[i].d = v[i];
        nd[i].pending = !o || o->pending || o->d.online != v[i].online;
        s->decl_dirty |= nd[i].pending;
    }
    cq_free(v);
    cq_free(s->decls);
    s->decls = nd;
    s->ndecls = n;
}

void cq__mqsrv_decl_all(cq_mqsrv_t *s)
{
    for (size_t i = 0; i < s->ndecls; i++)
        s->decls[i].pending = true;
    s->decl_dirty = s->ndecls > 0;
}

/* What d needs: a creation, an online change, or nothing. 0 or the submit error. */
static int decl_submit(cq_mqsrv_t *s, const cq_mqsrv_topic_decl_t *d)
{
    const mq_topic_t *t = cq__mqsrv_topic(s, d->name);
    if (t && t->online == d->online)
        return 0;
    cq_writer_req_t *req;
    int r = cq_writer_req_new(t ? CQ_WRITER_TOPIC_SET_ONLINE : CQ_WRITER_TOPIC_CREATE,
                              t ? t->name : d->name, NULL, &req);
    if (r < 0)
        return r;
    /* A creation makes it online; an offline one is set so when the creation completed. */
    req->online = d->online;
    req->retention_days = d->retention_days > INT_MAX ? INT_MAX : (int)d->retention_days;
    req->now_ms = s->now_ms;
    if (!t)
        CQ_INFO("mq", "cluster topics: creating %s (retention %u days)", d->name,
                d->retention_days);
    return cq__mqop_submit_decl(s, req);
}

void cq__mqsrv_decl_pass(cq_mqsrv_t *s)
{
    /* A new master waits for its topic list: its cache may still be a slave's last refresh. */
    if (!s->decl_dirty || !cq__mqsrv_writable(s) || s->reload_list || s->listing)
        return;
    s->decl_dirty = false;
    for (size_t i = 0; i < s->ndecls; i++) {
        mq_decl_t *d = &s->decls[i];
        if (!d->pending)
            continue;
        if (decl_submit(s, &d->d) < 0)
            s->decl_failed = true; /* stays pending: the tick tries again */
        else
            d->pending = false;
    }
}

void cq__mqsrv_decl_tick(cq_mqsrv_t *s, uint64_t now_ms)
{
    if (s->decl_failed && (now_ms - s->decl_ms >= CQ_MQSRV_REFRESH_MS || !s->decl_ms)) {
        s->decl_ms = now_ms;
        s->decl_failed = false;
        s->decl_dirty = true;
    }
    cq__mqsrv_decl_pass(s);
}

void cq__mqsrv_decl_done(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_decl_t *d = decl_find(s->decls, s->ndecls, req->topic);
    bool created = req->op == CQ_WRITER_TOPIC_CREATE && (req->err == 0 || req->err == CQ_EEXIST);
    if (!d || (req->err == 0 && !created))
        return; /* applied, or no longer declared */
    d->pending = true;
    if (created)
        s->decl_dirty = true; /* its online flag, at the end of this drain */
    else
        s->decl_failed = true; /* logged by the completion; again at the tick */
}

void cq__mqsrv_topic_changed(cq_mqsrv_t *s, const cq_writer_req_t *req, const mq_topic_t *t)
{
    if (!s->on_topic || req->err != 0)
        return; /* CQ_EEXIST: created by someone else, who told it */
    if (req->op == CQ_WRITER_TOPIC_CREATE)
        s->on_topic(s->topic_ud, req->topic, true, (uint32_t)req->retention_days);
    else if (t)
        s->on_topic(s->topic_ud, t->name, req->online,
                    t->retention_days > 0 ? (uint32_t)t->retention_days : 0);
}

void cq__mqsrv_decl_free(cq_mqsrv_t *s)
{
    cq_free(s->decls);
    cq_free(s->decl_next);
    s->decls = NULL;
    s->decl_next = NULL;
    s->ndecls = 0;
}
