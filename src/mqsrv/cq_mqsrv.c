/* cq_mqsrv.c - the engine: topics cache, connections, frames in, frames out. See cq_mqsrv.h. */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- topics ----------------------------------------------------------------------------- */

mq_topic_t *cq__mqsrv_topic(const cq_mqsrv_t *s, const char *name)
{
    for (size_t i = 0; i < s->ntopics; i++)
        if (strcasecmp(s->topics[i]->name, name) == 0)
            return s->topics[i];
    return NULL;
}

mq_topic_t *cq__mqsrv_topic_add(cq_mqsrv_t *s, const char *name, bool online, int retention)
{
    mq_topic_t *t = cq__mqsrv_topic(s, name);
    if (t)
        return t;
    if (s->ntopics == s->topics_cap) {
        size_t cap = s->topics_cap ? s->topics_cap * 2 : 16;
        mq_topic_t **nt = cq_realloc(s->topics, cap * sizeof(*nt));
        if (!nt)
            return NULL;
        s->topics = nt;
        s->topics_cap = cap;
    }
    t = cq_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->online = online;
    t->retention_days = retention;
    s->topics[s->ntopics++] = t;
    return t;
}

static void topic_free(mq_topic_t *t)
{
    cq_mq_msg_free(t->push);
    cq_free(t->consumers);
    cq_free(t->watchers);
    cq_free(t);
}

/* Adds (on) or removes c from t's watchers. Returns true if the set changed. */
bool cq__mqsrv_watch(mq_topic_t *t, cq_mqsrv_conn_t *c, bool on)
{
    for (size_t i = 0; i < t->nwatchers; i++) {
        if (t->watchers[i] != c)
            continue;
        if (on)
            return false;
        t->watchers[i] = t->watchers[--t->nwatchers];
        return true;
    }
    if (!on)
        return false;
    if (t->nwatchers == t->watchers_cap) {
        size_t cap = t->watchers_cap ? t->watchers_cap * 2 : 4;
        cq_mqsrv_conn_t **nw = cq_realloc(t->watchers, cap * sizeof(*nw));
        if (!nw)
            return false;
        t->watchers = nw;
        t->watchers_cap = cap;
    }
    t->watchers[t->nwatchers++] = c;
    return true;
}

/* ---- engine ----------------------------------------------------------------------------- */

cq_mqsrv_t *cq_mqsrv_new(const cq_mqsrv_opts_t *o)
{
    if (!o || !o->submit)
        return NULL;
    cq_mqsrv_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->lim = o->limits;
    if (!s->lim.max_batch)
        s->lim.max_batch = CQ_MQ_DEFAULT_MAX_BATCH;
    if (!s->lim.max_content)
        s->lim.max_content = CQ_MQ_DEFAULT_MAX_CONTENT;
    s->perms = o->perms;
    s->submit = o->submit;
    s->submit_ud = o->submit_ud;
    s->next_conn_id = 1;
    for (size_t i = 0; i < o->ntopics; i++) {
        const cq_store_topic_t *st = &o->topics[i];
        mq_topic_t *t = cq__mqsrv_topic_add(s, st->name, st->online, st->retention_days);
        if (!t)
            return cq_mqsrv_free(s);
        t->last_offset = o->high_water ? o->high_water[i] : 0;
    }
    return s;
}

cq_mqsrv_t *cq_mqsrv_free(cq_mqsrv_t *s)
{
    if (!s)
        return NULL;
    for (size_t i = 0; i < s->ntopics; i++)
        topic_free(s->topics[i]);
    cq_free(s->topics);
    cq_free(s);
    return NULL;
}

void cq_mqsrv_set_now(cq_mqsrv_t *s, int64_t now_unix_ms)
{
    s->now_ms = now_unix_ms;
}

void cq_mqsrv_stats(const cq_mqsrv_t *s, cq_mqsrv_stats_t *ret_stats)
{
    *ret_stats = s->st;
}

/* ---- connections ------------------------------------------------------------------------ */

cq_mqsrv_conn_t *cq_mqsrv_conn_new(cq_mqsrv_t *s, const cq_mqsrv_conn_ops_t *ops, void *ud)
{
    cq_mqsrv_conn_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->s = s;
    c->ops = ops;
    c->ud = ud;
    c->id = s->next_conn_id++;
    cq_sbuf_init(&c->in);
    s->st.conns++;
    return c;
}

/* Frees c once the edge closed it and no store request refers to it. */
void cq__mqsrv_conn_put(cq_mqsrv_conn_t *c)
{
    if (!c->dead || c->inflight)
        return;
    cq_sbuf_done(&c->in);
    cq_free(c);
}

void cq_mqsrv_conn_close(cq_mqsrv_conn_t *c)
{
    if (!c || c->dead)
        return;
    cq_mqsrv_t *s = c->s;
    for (size_t i = 0; i < s->ntopics; i++)
        cq__mqsrv_watch(s->topics[i], c, false);
    c->dead = true;
    cq_sbuf_done(&c->in);
    cq__mqsrv_conn_put(c);
}

void cq__mqsrv_close(cq_mqsrv_conn_t *c)
{
    if (c->closing || c->dead)
        return;
    c->closing = true;
    c->ops->close(c->ud);
}

static void send_frame(cq_mqsrv_conn_t *c, uint8_t *frame, size_t len)
{
    if (c->dead || c->closing) {
        cq_free(frame);
        return;
    }
    if (c->ops->send(c->ud, frame, len) < 0)
        cq__mqsrv_close(c);
}

/* Encodes and sends m (taken). */
void cq__mqsrv_send(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    uint8_t *buf;
    size_t len;
    if (!m)
        return;
    int r = cq_mq_encode(m, &buf, &len);
    if (r < 0)
        CQ_WARN("mq", "conn %llu: cannot encode %s: %s", (unsigned long long)c->id,
                cq_mq_type_name(m->type), cq_strerror(r));
    else
        send_frame(c, buf, len);
    cq_mq_msg_free(m);
}

/* Answers req with err (0 or a code) and an optional message. */
void cq__mqsrv_reply(cq_mqsrv_conn_t *c, const cq_mq_msg_t *req, int err, const char *fmt, ...)
{
    char msg[CQ_MQ_ERR_MSG_MAX + 1] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    cq__mqsrv_send(c, cq_mq_resp_new(req, err, fmt ? msg : NULL));
}

/* Submits req for connection c (NULL: the engine's own) with m (taken) as its context.
 * Returns 0 or the submit error (then req and m are still the caller's). */
int cq__mqsrv_submit(cq_mqsrv_t *s, cq_mqsrv_conn_t *c, cq_mq_msg_t *m, cq_writer_req_t *req)
{
    mq_pend_t *p = cq_malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    *p = (mq_pend_t){c, m, NULL};
    req->ud = p;
    int r = s->submit(s->submit_ud, req);
    if (r < 0) {
        req->ud = NULL;
        cq_free(p);
        if (r == CQ_EBUSY)
            s->st.busy++;
        return r;
    }
    /* completions run on this thread, later: counting after the submit is not too late */
    cq__mqsrv_metrics_submitted(s, req);
    if (c)
        c->inflight++;
    return 0;
}

/* ---- input ------------------------------------------------------------------------------ */

/* A header or length error: the stream cannot be resynchronised. */
static void bad_stream(cq_mqsrv_conn_t *c, int err)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_RESP_ERROR, 0);
    if (m) {
        m->err_code = (uint32_t)cq_mq_errcode(err);
        m->has |= CQ_MQ_F_ERR_CODE;
        cq_mq_msg_set_str(m, CQ_MQ_F_ERR_MSG, cq_strerror(err));
    }
    c->s->st.bad_frames++;
    cq__mqsrv_send(c, m);
    cq__mqsrv_close(c);
}

static void handle_frame(cq_mqsrv_conn_t *c, const cq_mq_frame_t *f)
{
    char err[CQ_MQ_ERR_MSG_MAX] = "";
    cq_mq_msg_t *m = NULL;
    c->s->st.frames++;
    int r = cq_mq_decode(f, &c->s->lim, &m, err, sizeof(err));
    if (r == 0 && !cq_mq_is_request(m->type)) {
        snprintf(err, sizeof(err), "message type %d is not a request", m->type);
        m = cq_mq_msg_free(m);
        r = CQ_ENOTYPE;
    }
    if (r == 0) {
        cq__mqsrv_dispatch(c, m);
        return;
    }
    uint8_t *buf;
    size_t len;
    c->s->st.bad_frames++;
    if (cq_mq_encode_error(f, r, err, &buf, &len) == 0)
        send_frame(c, buf, len);
}

/* Handles every whole frame in p[0..n); returns the bytes consumed or a negative code. */
static ssize_t parse_frames(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n && !c->closing && !c->dead) {
        cq_mq_frame_t f;
        ssize_t r = cq_mq_parse(p + off, n - off, c->s->lim.max_total, &f);
        if (r == 0)
            break;
        if (r < 0) {
            bad_stream(c, (int)r);
            return r;
        }
        handle_frame(c, &f);
        off += (size_t)r;
    }
    return (ssize_t)off;
}

int cq_mqsrv_conn_input(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n)
{
    if (c->closing || c->dead)
        return CQ_ECLOSED;
    if (c->in.len == 0) { /* common case: parse in place, keep only a partial frame */
        ssize_t r = parse_frames(c, p, n);
        if (r < 0)
            return (int)r;
        if ((size_t)r < n && !c->closing && cq_sbuf_append(&c->in, p + r, n - (size_t)r) < 0)
            goto oom;
        return c->closing ? CQ_ECLOSED : 0;
    }
    if (cq_sbuf_append(&c->in, p, n) < 0)
        goto oom;
    ssize_t r = parse_frames(c, c->in.data, c->in.len);
    if (r < 0)
        return (int)r;
    if (!c->dead)
        cq_sbuf_consume(&c->in, (size_t)r);
    return c->closing ? CQ_ECLOSED : 0;
oom:
    cq__mqsrv_close(c);
    return -ENOMEM;
}

/* ---- completions, pushes, housekeeping -------------------------------------------------- */

void cq_mqsrv_complete(cq_mqsrv_t *s, cq_writer_req_t *req)
{
    mq_pend_t *p = req->ud;
    cq__mqsrv_metrics_completed(s, req);
    if (p && p->h) {
        cq__mqhttp_completed(s, req, p);
        p->h->inflight--;
        cq__mqhttp_conn_put(p->h);
    } else {
        cq__mqsrv_completed(s, req, p);
    }
    if (p && p->c) {
        p->c->inflight--;
        cq__mqsrv_conn_put(p->c);
    }
    if (p)
        cq_mq_msg_free(p->req);
    cq_free(p);
    cq_writer_req_free(req);
}

static void flush_topic(cq_mqsrv_t *s, mq_topic_t *t)
{
    cq_mq_msg_t *m = t->push;
    t->push = NULL;
    uint8_t *buf;
    size_t len;
    int r = cq_mq_encode(m, &buf, &len);
    cq_mq_msg_free(m);
    if (r < 0) {
        CQ_WARN("mq", "topic %s: cannot encode push: %s", t->name, cq_strerror(r));
        return;
    }
    for (size_t i = 0; i < t->nwatchers; i++) {
        uint8_t *copy = i + 1 == t->nwatchers ? buf : cq_malloc(len);
        if (!copy)
            continue;
        if (copy != buf)
            memcpy(copy, buf, len);
        s->st.pushes++;
        send_frame(t->watchers[i], copy, len);
    }
    if (t->nwatchers == 0)
        cq_free(buf);
}

void cq_mqsrv_flush(cq_mqsrv_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++)
        if (s->topics[i]->push)
            flush_topic(s, s->topics[i]);
}

int cq__mqsrv_set_online(cq_mqsrv_t *s, const char *topic, bool online, cq_mqhttp_conn_t *h)
{
    mq_topic_t *t = cq__mqsrv_topic(s, topic);
    if (!t)
        return CQ_ENOTOPIC;
    cq_writer_req_t *req;
    int r = cq_writer_req_new(CQ_WRITER_TOPIC_SET_ONLINE, t->name, NULL, &req);
    if (r < 0)
        return r;
    req->online = online;
    r = cq__mqsrv_submit(s, NULL, NULL, req);
    if (r < 0) {
        cq_writer_req_free(req);
        return r;
    }
    if (h) { /* req is in flight: no completion can have run yet on this thread */
        ((mq_pend_t *)req->ud)->h = h;
        h->inflight++;
    }
    return 0;
}

int cq_mqsrv_topic_set_online(cq_mqsrv_t *s, const char *topic, bool online)
{
    return cq__mqsrv_set_online(s, topic, online, NULL);
}

static void purge_topic(cq_mqsrv_t *s, mq_topic_t *t, int64_t now_ms)
{
    cq_writer_req_t *req;
    if (cq_writer_req_new(CQ_WRITER_PURGE, t->name, NULL, &req) < 0)
        return;
    req->max = CQ_MQSRV_PURGE_ROWS;
    req->older_than_ms = now_ms - (int64_t)t->retention_days * 86400000;
    if (cq__mqsrv_submit(s, NULL, NULL, req) < 0) {
        cq_writer_req_free(req);
        return;
    }
    t->purging = true;
}

void cq_mqsrv_retention(cq_mqsrv_t *s, int64_t now_unix_ms)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        mq_topic_t *t = s->topics[i];
        if (t->retention_days > 0 && !t->purging)
            purge_topic(s, t, now_unix_ms);
    }
}
