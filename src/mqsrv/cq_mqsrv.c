/* cq_mqsrv.c - the engine: the topic cache, seed connections, frames in and out, pushes. The
 * requests themselves are decoded by handlers.c and run by ops.c (see mqsrv_int.h). See
 * cq_mqsrv.h. */
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- topics ----------------------------------------------------------------------------- */

mq_topic_t *cq__mqsrv_topic(const cq_mqsrv_t *s, const char *name)
{
    return cq_smap_get(&s->topic_idx, name);
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
    t->sunk = s->sink_wants && s->sink_wants(s->sink_ud, t->name);
    if (cq_smap_put(&s->topic_idx, t->name, t) < 0) { /* the key is the topic's own name */
        cq_free(t);
        return NULL;
    }
    s->topics[s->ntopics++] = t;
    return t;
}

static void topic_free(mq_topic_t *t)
{
    cq_mq_msg_free(t->push);
    cq_free(t->consumers);
    cq_free(t->watchers);
    cq_free(t->holes);
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
    if (!o || !o->port.ops || !o->port.ops->submit)
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
    s->authlim = o->authlim;
    s->http_hosts = o->http_hosts ? o->http_hosts : CQ_MQHTTP_HOSTS_DFL;
    s->http_origins = o->http_origins ? o->http_origins : "";
    s->port = o->port;
    cq_smap_init(&s->topic_idx, true);
    cq_mpsc_init(&s->inbox);
    pthread_mutex_init(&s->inbox_mu, NULL);
    cq_list_init(&s->pending);
    cq_list_init(&s->soft);
    s->sendq_soft = o->sendq_soft_limit;
    s->sendq_soft_s = o->sendq_soft_seconds;
    s->sendq_hard = o->sendq_hard_limit ? o->sendq_hard_limit : CQ_MQSRV_SENDQ_HARD_DFL;
    s->preauth_frame = o->preauth_frame ? o->preauth_frame : CQ_MQSRV_PREAUTH_FRAME_DFL;
    s->input_budget = o->input_budget ? o->input_budget : CQ_MQSRV_INPUT_BUDGET_DFL;
    s->next_conn_id = 1;
    s->may_write = o->may_write;
    s->fence_ud = o->fence_ud;
    s->shard = o->shard;
    s->epoch = o->epoch;
    s->master = !o->slave;
    s->slave_reads_off = o->slave_reads_off;
    s->on_topic = o->on_topic;
    s->topic_ud = o->topic_ud;
    s->sink_wants = o->sink_event ? o->sink_wants : NULL;
    s->sink_event = o->sink_event;
    s->sink_ud = o->sink_ud;
    s->sink_run = o->sink_run;
    s->sink_rows = o->sink_rows;
    s->sink_offset = o->sink_offset;
    s->sink_invalidated = o->sink_invalidated;
    for (size_t i = 0; i < o->ntopics; i++) {
        const cq_store_topic_t *st = &o->topics[i];
        mq_topic_t *t = cq__mqsrv_topic_add(s, st->name, st->online, st->retention_days);
        if (!t)
            return cq_mqsrv_free(s);
        t->last_offset = o->high_water ? o->high_water[i] : 0;
        t->pushed = t->last_offset; /* a watcher sees what commits after it watched */
        t->count = o->counts ? o->counts[i] : 0;
    }
    return s;
}

cq_mqsrv_t *cq_mqsrv_free(cq_mqsrv_t *s)
{
    if (!s)
        return NULL;
    cq_mqsrv_drain(s);
    cq_mqperm_free(s->perms_owned);
    cq_mqperm_free(s->perms_next);
    cq__mqsrv_decl_free(s);
    pthread_mutex_destroy(&s->inbox_mu);
    for (size_t i = 0; i < s->ntopics; i++)
        topic_free(s->topics[i]);
    cq_free(s->topics);
    cq_smap_done(&s->topic_idx);
    cq_free(s);
    return NULL;
}

bool cq_mqsrv_idle(const cq_mqsrv_t *s)
{
    return s->inflight == 0;
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
    cq__mq_link_init(&c->l, s, &cq__mqsrv_fe, ops, ud);
    c->id = s->next_conn_id++;
    c->l.hard_limit = CQ_MQSRV_PREAUTH_SENDQ; /* until connect succeeds */
    cq_sbuf_init(&c->in);
    s->st.conns++;
    return c;
}

void cq__mqsrv_conn_free(mq_link_t *l)
{
    cq_mqsrv_conn_t *c = (cq_mqsrv_conn_t *)l;
    cq_sbuf_done(&c->in);
    cq_free(c);
}

void cq_mqsrv_conn_close(cq_mqsrv_conn_t *c)
{
    if (!c || c->l.dead)
        return;
    cq_mqsrv_t *s = c->l.s;
    for (size_t i = 0; i < s->ntopics; i++)
        cq__mqsrv_watch(s->topics[i], c, false);
    cq__mq_link_dead(&c->l);
    s->st.input_bytes -= c->in.len;
    cq_sbuf_done(&c->in);
    cq__mq_link_put(&c->l);
}

cq_sendq_t *cq_mqsrv_conn_sendq(cq_mqsrv_conn_t *c)
{
    return &c->l.sendq;
}

void cq_mqsrv_conn_progress(const cq_mqsrv_conn_t *c, uint64_t *ret_frames, bool *ret_authed)
{
    *ret_frames = c->frames;
    *ret_authed = c->authed;
}

void cq__mqsrv_close(cq_mqsrv_conn_t *c)
{
    cq__mq_link_close(&c->l);
}

/* Encodes and sends m (taken). */
void cq__mqsrv_send(cq_mqsrv_conn_t *c, cq_mq_msg_t *m)
{
    cq_buf_t *b;
    if (!m)
        return;
    cq__mqsrv_stamp(c->l.s, m);
    int r = cq_mq_encode_buf(m, &b);
    if (r < 0)
        CQ_WARN("mq", "conn %llu: cannot encode %s: %s", (unsigned long long)c->id,
                cq_mq_type_name(m->type), cq_strerror(r));
    else
        cq__mq_link_send(&c->l, b);
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
    c->l.s->st.bad_frames++;
    cq__mqsrv_send(c, m);
    cq__mqsrv_close(c);
}

static void handle_frame(cq_mqsrv_conn_t *c, const cq_mq_frame_t *f)
{
    char err[CQ_MQ_ERR_MSG_MAX] = "";
    cq_mq_msg_t *m = NULL;
    c->l.s->st.frames++;
    c->frames++;
    int r = cq_mq_decode(f, &c->l.s->lim, &m, err, sizeof(err));
    if (r == 0 && !cq_mq_is_request(m->type)) {
        snprintf(err, sizeof(err), "message type %d is not a request", m->type);
        m = cq_mq_msg_free(m);
        r = CQ_ENOTYPE;
    }
    if (r == 0) {
        cq__mqsrv_dispatch(c, m);
        if (c->authed)
            c->l.hard_limit = 0; /* the engine's send limits from now on */
        return;
    }
    cq_buf_t *b;
    c->l.s->st.bad_frames++;
    if (cq_mq_encode_error_buf(f, r, err, &b) == 0)
        cq__mq_link_send(&c->l, b);
}

/* The largest frame c may send now: before connect, at most the pre-connect limit. */
static uint32_t frame_max(const cq_mqsrv_conn_t *c)
{
    const cq_mqsrv_t *s = c->l.s;
    uint32_t max = s->lim.max_total ? s->lim.max_total : CQ_MQ_DEFAULT_MAX_TOTAL;
    if (!c->authed && s->preauth_frame < max)
        max = (uint32_t)s->preauth_frame;
    return max;
}

/* Handles every whole frame in p[0..n); returns the bytes consumed or a negative code. */
static ssize_t parse_frames(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n && !c->l.closing && !c->l.dead) {
        cq_mq_frame_t f;
        ssize_t r = cq_mq_parse(p + off, n - off, frame_max(c), &f);
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

/* Over the input budget: one busy error frame (msg id 0), then the close. */
static int refuse_busy(cq_mqsrv_conn_t *c)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_RESP_ERROR, 0);
    if (m) {
        m->err_code = (uint32_t)cq_mq_errcode(CQ_EBUSY);
        m->has |= CQ_MQ_F_ERR_CODE;
        cq_mq_msg_set_str(m, CQ_MQ_F_ERR_MSG,
                          "the server holds too many partial frames (mq-input-budget): retry");
    }
    c->l.s->st.input_refused++;
    cq__mqsrv_send(c, m);
    cq__mqsrv_close(c);
    return CQ_EBUSY;
}

/* Keeps the n bytes of a partial frame in c->in, within the engine's input budget. */
static int hold(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n)
{
    cq_mqsrv_t *s = c->l.s;
    if (s->st.input_bytes + n > s->input_budget)
        return refuse_busy(c);
    if (cq_sbuf_append(&c->in, p, n) < 0) {
        cq__mqsrv_close(c);
        return -ENOMEM;
    }
    s->st.input_bytes += n;
    return 0;
}

int cq_mqsrv_conn_input(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n)
{
    if (c->l.closing || c->l.dead)
        return CQ_ECLOSED;
    if (c->in.len == 0) { /* common case: parse in place, keep only a partial frame */
        ssize_t r = parse_frames(c, p, n);
        if (r < 0)
            return (int)r;
        int h = (size_t)r < n && !c->l.closing ? hold(c, p + r, n - (size_t)r) : 0;
        if (h < 0)
            return h;
        return c->l.closing ? CQ_ECLOSED : 0;
    }
    int h = hold(c, p, n);
    if (h < 0)
        return h;
    ssize_t r = parse_frames(c, c->in.data, c->in.len);
    if (r < 0)
        return (int)r;
    if (!c->l.dead) {
        cq_sbuf_consume(&c->in, (size_t)r);
        c->l.s->st.input_bytes -= (size_t)r;
    }
    return c->l.closing ? CQ_ECLOSED : 0;
}

/* ---- completions, pushes, housekeeping -------------------------------------------------- */

void cq_mqsrv_set_ops(cq_mqsrv_t *s, const cq_mqsrv_ops_t *ops, void *ud)
{
    pthread_mutex_lock(&s->inbox_mu);
    s->ops = ops;
    s->ops_ud = ud;
    pthread_mutex_unlock(&s->inbox_mu);
}

void cq_mqsrv_complete(void *ud, cq_writer_req_t *req)
{
    cq_mqsrv_t *s = cq__mqop_engine(req);
    (void)ud;
    cq_mpsc_push(&s->inbox, &req->node); /* the store is done with req->node */
    pthread_mutex_lock(&s->inbox_mu);
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
}

void cq_mqsrv_set_perms(cq_mqsrv_t *s, cq_mqperm_t *p)
{
    pthread_mutex_lock(&s->inbox_mu);
    cq_mqperm_t *old = s->perms_next; /* two reloads before a drain: the last one wins */
    s->perms_next = p;
    s->perms_handed = true;
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
    cq_mqperm_free(old);
}

/* A table handed over by cq_mqsrv_set_perms takes effect (engine thread). */
static void perms_swap(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    bool handed = s->perms_handed;
    cq_mqperm_t *p = s->perms_next;
    s->perms_next = NULL;
    s->perms_handed = false;
    pthread_mutex_unlock(&s->inbox_mu);
    if (!handed)
        return;
    cq_mqperm_free(s->perms_owned);
    s->perms_owned = p;
    s->perms = p;
    CQ_INFO("mq", "permissions table replaced");
}

void cq_mqsrv_sink_poke(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
}

bool cq_mqsrv_sink_position(cq_mqsrv_t *s, const char *topic, uint64_t *epoch, uint64_t *pushed)
{
    mq_topic_t *t = cq__mqsrv_topic(s, topic);
    if (!t)
        return false;
    *epoch = s->epoch;
    *pushed = t->pushed;
    return true;
}

void cq_mqsrv_sink_changed(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    s->sink_handed = true;
    if (s->ops)
        s->ops->wake(s->ops_ud);
    pthread_mutex_unlock(&s->inbox_mu);
}

static void sink_swap(cq_mqsrv_t *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    bool handed = s->sink_handed;
    s->sink_handed = false;
    pthread_mutex_unlock(&s->inbox_mu);
    if (handed)
        cq_mqsrv_sink_refresh(s);
}

void cq_mqsrv_drain(cq_mqsrv_t *s)
{
    cq_mpsc_node_t *n;
    perms_swap(s);
    sink_swap(s);
    cq__mqsrv_role_swap(s);
    cq__mqsrv_decl_swap(s);
    while ((n = cq_mpsc_pop(&s->inbox)))
        cq__mqop_complete(s, cq_container_of(n, cq_writer_req_t, node));
    cq__mqsrv_decl_pass(s); /* after the completions: a new master's topic list may be in */
    if (s->sink_run)
        s->sink_run(s->sink_ud, s);
    cq__mqsrv_flush_pushes(s);
}

/* Encodes t's push once; every watcher's queue takes a reference to the same bytes. */
static void flush_topic(cq_mqsrv_t *s, mq_topic_t *t)
{
    cq_mq_msg_t *m = t->push;
    t->push = NULL;
    cq_buf_t *b;
    cq__mqsrv_stamp(s, m);
    int r = cq_mq_encode_buf(m, &b);
    cq_mq_msg_free(m);
    if (r < 0) {
        CQ_WARN("mq", "topic %s: cannot encode push: %s", t->name, cq_strerror(r));
        return;
    }
    cq_buf_ref_n(b, (uint32_t)t->nwatchers); /* one per watcher, taken by each send */
    for (size_t i = 0; i < t->nwatchers; i++) {
        s->st.pushes++;
        cq__mq_link_send(&t->watchers[i]->l, b);
    }
    cq_buf_unref(b);
}

void cq__mqsrv_flush_pushes(cq_mqsrv_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++)
        if (s->topics[i]->push)
            flush_topic(s, s->topics[i]);
}

void cq__mqsrv_item_key(cq_mq_item_t *it, uint64_t producer_id, uint64_t seq)
{
    if (producer_id && producer_id <= (uint64_t)CQ_MQ_MAX_U53 && seq <= (uint64_t)CQ_MQ_MAX_U53) {
        it->producer_id = (int64_t)producer_id;
        it->seq = (int64_t)seq;
    }
}

void cq_mqsrv_sink_refresh(cq_mqsrv_t *s)
{
    for (size_t i = 0; s->sink_wants && i < s->ntopics; i++) {
        mq_topic_t *t = s->topics[i];
        bool was = cq__mqsrv_watched(t);
        t->sunk = s->sink_wants(s->sink_ud, t->name);
        if (!was && t->sunk && !t->catchup_to && !t->catchup_reading)
            t->pushed = t->last_offset; /* from now on, as a new watcher */
    }
}

/* Adds the committed message at offset to t's next push (for its watchers, if any), with its
 * idempotence key (producer_id 0: none; keys beyond 2^53 - 1 are not sent). */
static void push_add(cq_mqsrv_t *s, mq_topic_t *t, uint64_t offset, int64_t time_ms,
                     const void *content, size_t len, uint64_t producer_id, uint64_t seq)
{
    uint64_t prev = t->pushed;
    t->pushed = offset;
    if (t->sunk) {
        cq_mqsrv_event_t ev = {t->name, s->shard,    s->epoch, offset,  prev,
                               time_ms, producer_id, seq,      content, len};
        s->sink_event(s->sink_ud, &ev);
    }
    if (!t->nwatchers)
        return;
    if (!t->push && (t->push = cq_mq_msg_new(CQ_MQ_PUSH, 0)) &&
        cq_mq_msg_set_topic(t->push, t->name) == 0)
        t->push->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    if (!t->push || cq_mq_msg_add_item(t->push, (int64_t)offset, time_ms, content, len, false) < 0)
        return;
    cq__mqsrv_item_key(&t->push->items[t->push->nitems - 1], producer_id, seq);
    t->push->offset = (int64_t)offset;
    if (t->push->nitems >= s->lim.max_batch)
        cq__mqsrv_flush_pushes(s);
}

/* Submits the read of the rows after t->pushed. It will see every row committed up to
 * last_offset now (their completions came before it), but maybe not the later ones. */
static void read_next(cq_mqsrv_t *s, mq_topic_t *t)
{
    size_t max = s->lim.max_batch < CQ_WRITER_READ_MAX ? s->lim.max_batch : CQ_WRITER_READ_MAX;
    if (cq__mqop_read_log(s, t, t->pushed, max) == 0) {
        t->catchup_reading = true;
        t->read_upto = t->last_offset;
    }
}

/* Reads the next rows after t->pushed back from the store, unless a read is in flight; ends
 * the catch-up once pushed reached catchup_to. A read that cannot be submitted now (busy), or
 * that failed, is tried again at the topic's next completion or the next tick
 * (cq__mqsrv_catchup_retry), whichever comes first. */
static void catch_up(cq_mqsrv_t *s, mq_topic_t *t)
{
    if (t->catchup_reading)
        return;
    if (t->pushed >= t->catchup_to) {
        t->catchup_to = 0;
        return;
    }
    read_next(s, t);
}

void cq__mqsrv_catchup_retry(cq_mqsrv_t *s)
{
    for (size_t i = 0; i < s->ntopics; i++) {
        mq_topic_t *t = s->topics[i];
        if (t->catchup_to && !t->catchup_reading)
            catch_up(s, t);
    }
}

void cq__mqsrv_poll(cq_mqsrv_t *s, mq_topic_t *t)
{
    if (t->catchup_reading || t->catchup_to || t->hw_unknown)
        return; /* a read is in flight; or where to start is not known yet */
    read_next(s, t);
}

void cq__mqsrv_log_read(cq_mqsrv_t *s, mq_topic_t *t, const cq_writer_req_t *req)
{
    t->catchup_reading = false;
    if (req->err)
        return; /* logged; read again at the next completion or tick */
    for (size_t i = 0; i < req->n_recs; i++) {
        const cq_store_rec_t *r = &req->recs[i];
        if (r->offset <= t->pushed)
            continue;
        if (r->offset > t->last_offset) { /* a slave: replication brought it */
            t->last_offset = r->offset;
            /* A master counts from its own completions only (a read may see a commit whose
             * completion is still on its way): a slave has none, and counts what it reads. */
            if (!s->master)
                t->count++;
        }
        push_add(s, t, r->offset, r->create_ms, r->content, r->len, r->producer_id, r->seq);
    }
    if (!t->catchup_to) { /* a poll: a full read says more may be waiting */
        if (req->n_recs == req->max)
            cq__mqsrv_poll(s, t);
        return;
    }
    /* A short read saw every row committed before it was submitted: what is missing below
     * read_upto was purged or invalidated, and is not delivered anyway. Not below catchup_to: a
     * produce that completed meanwhile may have committed after the read's snapshot, and is
     * read next. */
    if (req->n_recs < req->max && t->pushed < t->read_upto)
        t->pushed = t->read_upto;
    catch_up(s, t);
}

/* Queues the newly committed messages of a produce for the topic's watchers, in offset order,
 * each once: from the completion itself, unless rows committed without an answer lie between
 * the last pushed offset and this request (or a catch-up is running): then from the store. */
static void queue_push(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    mq_topic_t *t = cq__mqsrv_topic(s, req->topic);
    if (!t)
        return;
    uint64_t hi = req->prev_offset;
    for (size_t i = 0; i < req->n_msgs; i++)
        hi = req->offsets[i] > hi ? req->offsets[i] : hi;
    if (hi > t->last_offset)
        t->last_offset = hi;
    if (t->catchup_to || req->prev_offset > t->pushed) {
        if (!cq__mqsrv_watched(t) && !t->catchup_reading) { /* no one to catch up */
            t->pushed = t->last_offset;
            t->catchup_to = 0;
            return;
        }
        t->catchup_to = t->last_offset;
        catch_up(s, t);
        return;
    }
    for (size_t i = 0; i < req->n_msgs; i++) {
        if (req->offsets[i] <= t->pushed)
            continue; /* an idempotent retry, or a repeat: already delivered */
        const cq_store_msg_t *sm = &req->msgs[i];
        push_add(s, t, req->offsets[i], s->now_ms, sm->content, sm->len, sm->producer_id, sm->seq);
    }
}

void cq__mqsrv_produced(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    s->st.produced += req->n_msgs;
    queue_push(s, req);
}

void cq__mqsrv_invalidated(cq_mqsrv_t *s, const char *topic, uint64_t offset)
{
    CQ_INFO("mq", "topic %s: the message at offset %llu is invalid now", topic,
            (unsigned long long)offset);
    if (s->sink_invalidated)
        s->sink_invalidated(s->sink_ud, s, topic, offset);
}

int cq_mqsrv_topic_set_online(cq_mqsrv_t *s, const char *topic, bool online)
{
    const char *why;
    return cq__mqop_set_online(s, NULL, topic, online, &why);
}

void cq_mqsrv_set_offline(cq_mqsrv_t *s, bool offline)
{
    if (offline != s->offline)
        CQ_INFO("mq", "%s",
                offline ? "offline: new produces are refused (server_offline)"
                        : "online: produces accepted again");
    s->offline = offline;
}

void cq_mqsrv_offline_state(const cq_mqsrv_t *s, bool *ret_offline, bool *ret_draining)
{
    uint64_t pending = 0;
    for (size_t i = 0; i < s->ntopics; i++)
        pending += s->topics[i]->pending;
    *ret_offline = s->offline;
    *ret_draining = s->offline && pending > 0;
}

int cq_mqsrv_topic_set_retention(cq_mqsrv_t *s, const char *topic, uint64_t seconds)
{
    mq_topic_t *t = cq__mqsrv_topic(s, topic);
    if (!t)
        return CQ_ENOTOPIC;
    t->retention_managed = true;
    t->retention_s = seconds;
    return 0;
}

void cq_mqsrv_retention(cq_mqsrv_t *s, int64_t now_unix_ms)
{
    cq__mqop_retention(s, now_unix_ms);
}
