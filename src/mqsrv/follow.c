/* follow.c - following other shards' committed messages over the seed protocol. See
 * cq_mqfollow.h; the messages go through the seed codec (src/mq), the one the server decodes
 * them with. */
#include "cq_mqfollow.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mq.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Frames a server may send us: its answers stay within its own max_total (1 MiB by default);
 * this leaves room for a server configured larger. */
#define FRAME_MAX (16u << 20)
/* Bytes of content kept per topic during a consume (with opts.pending_max pushes): over it the
 * pushes are dropped and the consume goes on from its own offset, as over the count. */
#define PENDING_BYTES_MAX (8u << 20)

enum { L_DOWN, L_HELLO, L_UP };
/* A topic on one connection: not started (or waiting for retry_at), watch asked, its live
 * position asked, consuming, live (every push handed on). */
enum { T_IDLE, T_WATCH, T_PLACE, T_CONSUME, T_LIVE };

/* A push kept while the topic consumes (its bytes owned). */
typedef struct pend {
    uint64_t offset, pid, seq;
    int64_t time;
    char *content;
    size_t len;
} pend_t;

/* One topic on one link. cursor and placed outlive connections; the rest is the connection's. */
typedef struct ltopic {
    uint64_t cursor; /* the last offset handed on */
    bool placed;     /* cursor is known (the first connection asked for the live position) */
    int state;
    bool watched;
    uint32_t ask; /* the askid of the request in flight */
    uint64_t retry_at;
    pend_t *pend;
    size_t npend, cap, pend_bytes;
    bool overflow;
    bool warned; /* its last request was refused (logged once until one succeeds) */
    uint64_t events;
} ltopic_t;

enum { RD_ROWS, RD_OFFSET }; /* what a request answered later answers to */

typedef struct rd {
    uint32_t ask;
    uint64_t tag;
    int kind;
} rd_t;

typedef struct link {
    uint32_t shard;
    char addr[CQ_MQFOLLOW_SERVERS_MAX][CQ_MQFOLLOW_ADDR_MAX + 1];
    size_t naddr, cur;
    int phase;
    cq_sbuf_t in, out;
    uint32_t next_ask;
    uint16_t next_msg_id;
    uint64_t last_rx_ms, last_ka_ms, not_master_since;
    bool master;
    uint64_t epoch;
    ltopic_t *lt; /* f->ntopics entries */
    rd_t reads[CQ_MQFOLLOW_READS_MAX];
    size_t nreads;
    uint64_t events;
} link_t;

/* A read answered later with an error (never inside the call that caused it). */
typedef struct fail {
    uint64_t tag;
    int err, kind;
} fail_t;

struct cq_mqfollow {
    cq_mqfollow_opts_t o;
    char token[CQ_MQ_TOKEN_MAX + 1];
    link_t *links[CQ_MQFOLLOW_LINKS_MAX];
    size_t nlinks;
    char (*topics)[CQ_MQ_TOPIC_MAX + 1];
    size_t ntopics;
    fail_t *fails;
    size_t nfails, fails_cap;
    cq_mqfollow_stats_t st;
    cq_mq_limits_t lim;
};

/* ---- lifecycle ----------------------------------------------------------------------------- */

cq_mqfollow_t *cq_mqfollow_new(const cq_mqfollow_opts_t *o)
{
    cq_mqfollow_t *f = cq_calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->o = *o;
    f->o.token = NULL;
    snprintf(f->token, sizeof(f->token), "%s", o->token ? o->token : "");
    f->o.batch =
        o->batch && o->batch < CQ_MQ_DEFAULT_MAX_BATCH ? o->batch : CQ_MQ_DEFAULT_MAX_BATCH;
    f->o.keepalive_ms = o->keepalive_ms ? o->keepalive_ms : 1000;
    f->o.timeout_ms = o->timeout_ms ? o->timeout_ms : 10000;
    f->o.recheck_ms = o->recheck_ms ? o->recheck_ms : 5000;
    f->o.retry_ms = o->retry_ms ? o->retry_ms : 1000;
    f->o.pending_max = o->pending_max ? o->pending_max : 10000;
    f->lim = (cq_mq_limits_t){.max_total = FRAME_MAX,
                              .max_content = FRAME_MAX,
                              .max_batch = 1u << 16,
                              .max_depth = CQ_MQ_DEFAULT_MAX_DEPTH};
    return f;
}

static void pend_clear(ltopic_t *t)
{
    for (size_t i = 0; i < t->npend; i++)
        cq_free(t->pend[i].content);
    t->npend = 0;
    t->pend_bytes = 0;
    t->overflow = false;
}

static void link_free(link_t *l, size_t ntopics)
{
    if (!l)
        return;
    for (size_t i = 0; l->lt && i < ntopics; i++) {
        pend_clear(&l->lt[i]);
        cq_free(l->lt[i].pend);
    }
    cq_free(l->lt);
    cq_sbuf_done(&l->in);
    cq_sbuf_done(&l->out);
    cq_free(l);
}

cq_mqfollow_t *cq_mqfollow_free(cq_mqfollow_t *f)
{
    if (!f)
        return NULL;
    for (size_t i = 0; i < f->nlinks; i++)
        link_free(f->links[i], f->ntopics);
    cq_free(f->topics);
    cq_free(f->fails);
    cq_free(f);
    return NULL;
}

/* ---- servers ------------------------------------------------------------------------------- */

static link_t *link_of(const cq_mqfollow_t *f, uint32_t shard)
{
    for (size_t i = 0; i < f->nlinks; i++)
        if (f->links[i]->shard == shard)
            return f->links[i];
    return NULL;
}

static link_t *link_add(cq_mqfollow_t *f, uint32_t shard)
{
    link_t *l = cq_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->lt = cq_calloc(f->ntopics ? f->ntopics : 1, sizeof(*l->lt));
    if (!l->lt) {
        cq_free(l);
        return NULL;
    }
    l->shard = shard;
    cq_sbuf_init(&l->in);
    cq_sbuf_init(&l->out);
    l->next_ask = 1;
    f->links[f->nlinks++] = l;
    return l;
}

/* One "S/HOST:PORT" entry. */
static int add_one(cq_mqfollow_t *f, const char *one, uint32_t skip, char *err, size_t errlen)
{
    char *end = NULL;
    unsigned long s = strtoul(one, &end, 10);
    const char *addr = end + 1;
    if (end == one || *end != '/' || s > UINT32_MAX || !strchr(addr, ':') ||
        strlen(addr) > CQ_MQFOLLOW_ADDR_MAX) {
        snprintf(err, errlen, "\"%s\" is not SHARD/HOST:PORT", one);
        return CQ_ECONFIG;
    }
    if ((uint32_t)s == skip)
        return 0;
    link_t *l = link_of(f, (uint32_t)s);
    if (!l && f->nlinks == CQ_MQFOLLOW_LINKS_MAX) {
        snprintf(err, errlen, "more than %d shards", CQ_MQFOLLOW_LINKS_MAX);
        return CQ_ECONFIG;
    }
    if (!l && !(l = link_add(f, (uint32_t)s)))
        return -ENOMEM;
    if (l->naddr == CQ_MQFOLLOW_SERVERS_MAX) {
        snprintf(err, errlen, "shard %lu: more than %d servers", s, CQ_MQFOLLOW_SERVERS_MAX);
        return CQ_ECONFIG;
    }
    snprintf(l->addr[l->naddr++], sizeof(l->addr[0]), "%s", addr);
    return 0;
}

int cq_mqfollow_add_servers(cq_mqfollow_t *f, const char *list, uint32_t skip_shard, char *err,
                            size_t errlen)
{
    for (const char *p = list ? list : ""; *p;) {
        size_t k = strcspn(p, ",");
        char one[CQ_MQFOLLOW_ADDR_MAX + 16];
        if (k >= sizeof(one)) {
            snprintf(err, errlen, "an entry longer than %zu bytes", sizeof(one) - 1);
            return CQ_ECONFIG;
        }
        snprintf(one, sizeof(one), "%.*s", (int)k, p);
        p += k + (p[k] == ',');
        if (!*one)
            continue;
        int r = add_one(f, one, skip_shard, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

size_t cq_mqfollow_nlinks(const cq_mqfollow_t *f)
{
    return f->nlinks;
}

uint32_t cq_mqfollow_shard(const cq_mqfollow_t *f, size_t link)
{
    return f->links[link]->shard;
}

const char *cq_mqfollow_addr(const cq_mqfollow_t *f, size_t link, size_t *ret_idx)
{
    const link_t *l = f->links[link];
    if (ret_idx)
        *ret_idx = l->cur;
    return l->addr[l->cur];
}

size_t cq_mqfollow_nservers(const cq_mqfollow_t *f, size_t link)
{
    return f->links[link]->naddr;
}

const char *cq_mqfollow_server(const cq_mqfollow_t *f, size_t link, size_t i)
{
    return f->links[link]->addr[i];
}

bool cq_mqfollow_has_shard(const cq_mqfollow_t *f, uint32_t shard)
{
    return link_of(f, shard) != NULL;
}

/* ---- frames out ---------------------------------------------------------------------------- */

static int send_msg(link_t *l, cq_mq_msg_t *m)
{
    m->msg_id = l->next_msg_id;
    int r = cq_mq_encode_to(m, &l->out);
    if (r == 0)
        l->next_msg_id++;
    return r;
}

static uint32_t next_ask(link_t *l)
{
    uint32_t a = l->next_ask++;
    if (!l->next_ask)
        l->next_ask = 1;
    return a;
}

/* A request of type on topic (NULL: none): its askid, or 0 when it could not be queued. */
static uint32_t request(link_t *l, uint8_t type, const char *topic, uint64_t offset, uint32_t max)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, 0);
    if (!m)
        return 0;
    uint32_t ask = next_ask(l);
    m->askid = ask;
    m->has |= CQ_MQ_F_ASKID;
    int r = topic ? cq_mq_msg_set_topic(m, topic) : 0;
    if (type == CQ_MQ_REQ_CONSUME) {
        m->offset = (int64_t)offset;
        m->max_count = max;
        m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_MAX_COUNT;
    }
    if (r == 0)
        r = send_msg(l, m);
    cq_mq_msg_free(m);
    return r == 0 ? ask : 0;
}

static int hello(cq_mqfollow_t *f, link_t *l)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_CONNECT, 0);
    if (!m)
        return -ENOMEM;
    m->askid = next_ask(l);
    m->module_id = f->o.module_id;
    m->client_type = CQ_MQ_CONSUMER;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    int r = cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, f->token);
    if (r == 0)
        r = send_msg(l, m);
    cq_mq_msg_free(m);
    return r;
}

/* ---- reads answered later ------------------------------------------------------------------ */

static void fail_later(cq_mqfollow_t *f, uint64_t tag, int err, int kind)
{
    if (f->nfails == f->fails_cap) {
        size_t cap = f->fails_cap ? f->fails_cap * 2 : 16;
        fail_t *v = cq_realloc(f->fails, cap * sizeof(*v));
        if (!v)
            return; /* the caller's read waits for its own timeout */
        f->fails = v;
        f->fails_cap = cap;
    }
    f->fails[f->nfails++] = (fail_t){tag, err, kind};
}

static void fails_drain(cq_mqfollow_t *f)
{
    while (f->nfails) {
        fail_t x = f->fails[0];
        memmove(f->fails, f->fails + 1, --f->nfails * sizeof(*f->fails));
        if (x.kind == RD_ROWS && f->o.on_rows)
            f->o.on_rows(f->o.ud, x.tag, x.err, NULL, 0);
        else if (x.kind == RD_OFFSET && f->o.on_offset)
            f->o.on_offset(f->o.ud, x.tag, x.err, 0);
    }
}

/* The link a request answered later can go on, or NULL (its failure queued). */
static link_t *link_for_request(cq_mqfollow_t *f, uint32_t shard, uint64_t tag, int kind)
{
    link_t *l = link_of(f, shard);
    int err = !l                                   ? -ENOENT
              : l->phase != L_UP                   ? -ENOTCONN
              : l->nreads == CQ_MQFOLLOW_READS_MAX ? CQ_EBUSY
                                                   : 0;
    if (err)
        fail_later(f, tag, err, kind);
    return err ? NULL : l;
}

static void track(cq_mqfollow_t *f, link_t *l, uint32_t ask, uint64_t tag, int kind)
{
    if (ask)
        l->reads[l->nreads++] = (rd_t){ask, tag, kind};
    else
        fail_later(f, tag, -ENOMEM, kind);
}

void cq_mqfollow_read(cq_mqfollow_t *f, uint32_t shard, const char *topic, uint64_t from,
                      uint32_t max, uint64_t tag)
{
    f->st.reads++;
    link_t *l = link_for_request(f, shard, tag, RD_ROWS);
    if (l)
        track(
            f, l,
            request(l, CQ_MQ_REQ_CONSUME, topic, from, max && max < f->o.batch ? max : f->o.batch),
            tag, RD_ROWS);
}

void cq_mqfollow_offset(cq_mqfollow_t *f, uint32_t shard, const char *topic, const char *instance,
                        bool commit, uint64_t offset, uint64_t tag)
{
    link_t *l = link_for_request(f, shard, tag, RD_OFFSET);
    if (!l)
        return;
    cq_mq_msg_t *m = cq_mq_msg_new(commit ? CQ_MQ_REQ_COMMIT : CQ_MQ_REQ_OFFSET, 0);
    uint32_t ask = m ? next_ask(l) : 0;
    int r = m ? cq_mq_msg_set_topic(m, topic) : -ENOMEM;
    if (r == 0)
        r = cq_mq_msg_set_str(m, CQ_MQ_F_INSTANCE, instance);
    if (r == 0) {
        m->askid = ask;
        m->offset = (int64_t)offset;
        m->has |= CQ_MQ_F_ASKID | (commit ? CQ_MQ_F_OFFSET : 0);
        r = send_msg(l, m);
    }
    cq_mq_msg_free(m);
    track(f, l, r == 0 ? ask : 0, tag, RD_OFFSET);
}

/* ---- topics -------------------------------------------------------------------------------- */

static int topic_index(const cq_mqfollow_t *f, const char *name)
{
    for (size_t i = 0; i < f->ntopics; i++)
        if (strcasecmp(f->topics[i], name) == 0)
            return (int)i;
    return -1;
}

int cq_mqfollow_set_topics(cq_mqfollow_t *f, const char *const *names, size_t n)
{
    if (n > CQ_MQFOLLOW_TOPICS_MAX)
        return -ENOSPC;
    char(*tv)[CQ_MQ_TOPIC_MAX + 1] = cq_calloc(n ? n : 1, sizeof(*tv));
    ltopic_t *lv[CQ_MQFOLLOW_LINKS_MAX] = {0};
    bool ok = tv != NULL;
    for (size_t k = 0; ok && k < f->nlinks; k++)
        ok = (lv[k] = cq_calloc(n ? n : 1, sizeof(ltopic_t))) != NULL;
    if (!ok) {
        cq_free(tv);
        for (size_t k = 0; k < f->nlinks; k++)
            cq_free(lv[k]);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(tv[i], sizeof(tv[i]), "%s", names[i]);
        int old = topic_index(f, names[i]);
        for (size_t k = 0; k < f->nlinks && old >= 0; k++) {
            lv[k][i] = f->links[k]->lt[old]; /* its state and pushes move */
            f->links[k]->lt[old] = (ltopic_t){0};
        }
    }
    for (size_t k = 0; k < f->nlinks; k++) {
        link_t *l = f->links[k];
        for (size_t i = 0; i < f->ntopics; i++) { /* the ones no longer followed */
            pend_clear(&l->lt[i]);
            cq_free(l->lt[i].pend);
        }
        cq_free(l->lt);
        l->lt = lv[k]; /* a new topic is T_IDLE: an up link starts it at its next tick */
    }
    cq_free(f->topics);
    f->topics = tv;
    f->ntopics = n;
    return 0;
}

bool cq_mqfollow_position(const cq_mqfollow_t *f, uint32_t shard, const char *topic,
                          uint64_t *ret_epoch, uint64_t *ret_offset)
{
    const link_t *l = link_of(f, shard);
    int i = l ? topic_index(f, topic) : -1;
    if (i < 0)
        return false;
    *ret_epoch = l->epoch;
    *ret_offset = l->lt[i].cursor;
    return l->lt[i].placed;
}

/* ---- the follow of one topic ---------------------------------------------------------------- */

static void hand_on(cq_mqfollow_t *f, link_t *l, size_t i, uint64_t offset, int64_t time,
                    uint64_t pid, uint64_t seq, const char *content, size_t len)
{
    ltopic_t *t = &l->lt[i];
    if (offset <= t->cursor)
        return; /* had it: the consume and the pushes overlap */
    cq_mqsrv_event_t ev = {f->topics[i], l->shard,  l->epoch,
                           offset,       t->cursor, time,
                           pid,          seq,       (const uint8_t *)content,
                           len};
    t->cursor = offset;
    t->placed = true;
    t->events++;
    l->events++;
    f->st.events++;
    if (f->o.on_event)
        f->o.on_event(f->o.ud, &ev);
}

/* The next request of topic i on l, from its state. */
static void step(cq_mqfollow_t *f, link_t *l, size_t i, uint64_t now_ms)
{
    ltopic_t *t = &l->lt[i];
    uint32_t ask = 0;
    if (!t->watched) {
        t->state = T_WATCH;
        ask = request(l, CQ_MQ_REQ_WATCH, f->topics[i], 0, 0);
    } else if (!t->placed) {
        t->state = T_PLACE;
        ask = request(l, CQ_MQ_REQ_OFFSET, f->topics[i], 0, 0);
    } else {
        t->state = T_CONSUME;
        ask = request(l, CQ_MQ_REQ_CONSUME, f->topics[i], t->cursor, f->o.batch);
    }
    t->ask = ask;
    if (!ask) { /* out of memory: again later */
        t->state = T_IDLE;
        t->retry_at = now_ms + f->o.retry_ms;
    }
}

/* Caught up: the pushes kept meanwhile follow, then the topic is live. */
static void go_live(cq_mqfollow_t *f, link_t *l, size_t i, uint64_t now_ms)
{
    ltopic_t *t = &l->lt[i];
    if (t->overflow) { /* some pushes were dropped: consume again from where we are */
        pend_clear(t);
        step(f, l, i, now_ms);
        return;
    }
    t->state = T_LIVE;
    t->ask = 0;
    for (size_t k = 0; k < t->npend; k++) {
        pend_t *p = &t->pend[k];
        hand_on(f, l, i, p->offset, p->time, p->pid, p->seq, p->content, p->len);
    }
    pend_clear(t);
}

static void keep_push(cq_mqfollow_t *f, ltopic_t *t, const cq_mq_item_t *it)
{
    if (t->overflow)
        return;
    if (t->npend == f->o.pending_max || t->pend_bytes + it->len > PENDING_BYTES_MAX) {
        pend_clear(t);
        t->overflow = true;
        f->st.pushes_dropped++;
        return;
    }
    if (t->npend == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        pend_t *v = cq_realloc(t->pend, cap * sizeof(*v));
        if (!v) {
            pend_clear(t);
            t->overflow = true;
            return;
        }
        t->pend = v;
        t->cap = cap;
    }
    char *c = cq_malloc(it->len + 1);
    if (!c) {
        pend_clear(t);
        t->overflow = true;
        return;
    }
    memcpy(c, it->content, it->len);
    c[it->len] = 0;
    t->pend_bytes += it->len;
    t->pend[t->npend++] = (pend_t){
        (uint64_t)it->offset, (uint64_t)it->producer_id, (uint64_t)it->seq, it->time, c, it->len};
}

static void on_push(cq_mqfollow_t *f, link_t *l, const cq_mq_msg_t *m)
{
    int i = topic_index(f, m->topic);
    if (i < 0)
        return; /* a topic no longer followed */
    ltopic_t *t = &l->lt[i];
    for (size_t k = 0; k < m->nitems; k++) {
        const cq_mq_item_t *it = &m->items[k];
        if (t->state == T_LIVE)
            hand_on(f, l, (size_t)i, (uint64_t)it->offset, it->time, (uint64_t)it->producer_id,
                    (uint64_t)it->seq, it->content, it->len);
        else
            keep_push(f, t, it);
    }
}

/* A topic's request failed: the same step again after retry_ms. */
static void refused(cq_mqfollow_t *f, link_t *l, size_t i, const cq_mq_msg_t *m, uint64_t now_ms)
{
    ltopic_t *t = &l->lt[i];
    if (!t->warned)
        CQ_WARN("mq", "follow shard %u topic %s: %s answered %s %s (again in %u ms)", l->shard,
                f->topics[i], cq_mq_type_name(m->type), cq_mq_errcode_name((int)m->err_code),
                m->err_msg ? m->err_msg : "", f->o.retry_ms);
    t->warned = true;
    t->state = T_IDLE;
    t->ask = 0;
    t->retry_at = now_ms + f->o.retry_ms;
}

static void on_topic_answer(cq_mqfollow_t *f, link_t *l, const cq_mq_msg_t *m, uint64_t now_ms)
{
    int i = topic_index(f, m->topic);
    if (i < 0 || l->lt[i].ask != m->askid)
        return; /* a topic no longer followed, or an answer to a request of an older list */
    ltopic_t *t = &l->lt[i];
    if (m->err_code) {
        refused(f, l, (size_t)i, m, now_ms);
        return;
    }
    t->ask = 0;
    t->warned = false;
    switch (m->type) {
    case CQ_MQ_RESP_WATCH:
        t->watched = true;
        step(f, l, (size_t)i, now_ms);
        break;
    case CQ_MQ_RESP_OFFSET:
        /* the first follow of the topic starts at its live position */
        t->cursor = (m->has & CQ_MQ_F_LAST_OFFSET) ? (uint64_t)m->last_offset : 0;
        t->placed = true;
        go_live(f, l, (size_t)i, now_ms);
        break;
    case CQ_MQ_RESP_CONSUME:
        for (size_t k = 0; k < m->nitems; k++) {
            const cq_mq_item_t *it = &m->items[k];
            hand_on(f, l, (size_t)i, (uint64_t)it->offset, it->time, (uint64_t)it->producer_id,
                    (uint64_t)it->seq, it->content, it->len);
        }
        if (m->nitems >= f->o.batch)
            step(f, l, (size_t)i, now_ms);
        else
            go_live(f, l, (size_t)i, now_ms);
        break;
    default:
        break;
    }
}

/* ---- frames in ----------------------------------------------------------------------------- */

static void start_topics(cq_mqfollow_t *f, link_t *l, uint64_t now_ms)
{
    for (size_t i = 0; i < f->ntopics; i++)
        step(f, l, i, now_ms);
}

/* The server's role and epoch. A standby that does not know its shard's epoch says 0: its rows
 * are the history of the master it replicates, so the epoch known from before stays. */
static void role_of(cq_mqfollow_t *f, link_t *l, const cq_mq_msg_t *m, uint64_t now_ms)
{
    uint64_t epoch = (m->has & CQ_MQ_F_EPOCH) ? (uint64_t)m->epoch : 0;
    if (epoch && epoch != l->epoch) {
        if (l->epoch)
            CQ_INFO("mq", "follow shard %u: %s says epoch %" PRIu64 " (was %" PRIu64 ")", l->shard,
                    l->addr[l->cur], epoch, l->epoch);
        l->epoch = epoch;
    }
    l->master = (m->has & CQ_MQ_F_MASTER) && m->master;
    if (l->master)
        l->not_master_since = 0;
    else if (!l->not_master_since)
        l->not_master_since = now_ms ? now_ms : 1;
    (void)f;
}

static int on_hello(cq_mqfollow_t *f, link_t *l, const cq_mq_msg_t *m, uint64_t now_ms)
{
    if (m->err_code) {
        CQ_WARN("mq", "follow shard %u: %s refused our connect (module %u): %s %s", l->shard,
                l->addr[l->cur], f->o.module_id, cq_mq_errcode_name((int)m->err_code),
                m->err_msg ? m->err_msg : "");
        return CQ_EAUTH;
    }
    if ((m->has & CQ_MQ_F_SHARD) && m->shard != l->shard) {
        CQ_WARN("mq", "follow shard %u: %s serves shard %u: check --bridge-follow", l->shard,
                l->addr[l->cur], m->shard);
        return CQ_ECONFIG;
    }
    role_of(f, l, m, now_ms);
    l->phase = L_UP;
    l->last_ka_ms = now_ms;
    f->st.connects++;
    CQ_INFO("mq", "follow shard %u: connected to %s (%s, epoch %" PRIu64 ")", l->shard,
            l->addr[l->cur], l->master ? "master" : "standby", l->epoch);
    start_topics(f, l, now_ms);
    return 0;
}

/* An offset or commit answer: the stored offset, -ENOENT when never committed. */
static void on_offset_answer(cq_mqfollow_t *f, uint64_t tag, const cq_mq_msg_t *m)
{
    int err = m->err_code ? cq_mq_err_of_code((int)m->err_code)
              : m->type == CQ_MQ_RESP_OFFSET && !(m->committed && (m->has & CQ_MQ_F_COMMITTED))
                  ? -ENOENT
                  : 0;
    if (f->o.on_offset)
        f->o.on_offset(f->o.ud, tag, err, err ? 0 : (uint64_t)m->offset);
}

static void on_read_answer(cq_mqfollow_t *f, link_t *l, size_t k, const cq_mq_msg_t *m)
{
    uint64_t tag = l->reads[k].tag;
    int kind = l->reads[k].kind;
    memmove(&l->reads[k], &l->reads[k + 1], (--l->nreads - k) * sizeof(l->reads[0]));
    if (kind == RD_OFFSET) {
        on_offset_answer(f, tag, m);
        return;
    }
    if (!f->o.on_rows)
        return;
    if (m->err_code) {
        f->o.on_rows(f->o.ud, tag, cq_mq_err_of_code((int)m->err_code), NULL, 0);
        return;
    }
    cq_mqfollow_row_t stack[64], *rows = m->nitems <= 64 ? stack : NULL;
    if (!rows && !(rows = cq_malloc(m->nitems * sizeof(*rows)))) {
        f->o.on_rows(f->o.ud, tag, -ENOMEM, NULL, 0);
        return;
    }
    for (size_t i = 0; i < m->nitems; i++) {
        const cq_mq_item_t *it = &m->items[i];
        rows[i] = (cq_mqfollow_row_t){(uint64_t)it->offset,         it->time,
                                      (uint64_t)it->producer_id,    (uint64_t)it->seq,
                                      (const uint8_t *)it->content, it->len};
    }
    f->o.on_rows(f->o.ud, tag, 0, rows, m->nitems);
    if (rows != stack)
        cq_free(rows);
}

static int on_msg(cq_mqfollow_t *f, link_t *l, const cq_mq_msg_t *m, uint64_t now_ms)
{
    if (l->phase == L_HELLO)
        return m->type == CQ_MQ_RESP_CONNECT ? on_hello(f, l, m, now_ms) : CQ_EHEADER;
    switch (m->type) {
    case CQ_MQ_RESP_KEEPALIVE:
        role_of(f, l, m, now_ms);
        return 0;
    case CQ_MQ_PUSH:
        on_push(f, l, m);
        return 0;
    case CQ_MQ_RESP_CONSUME:
    case CQ_MQ_RESP_OFFSET:
    case CQ_MQ_RESP_COMMIT:
        for (size_t k = 0; k < l->nreads; k++)
            if (l->reads[k].ask == m->askid) {
                on_read_answer(f, l, k, m);
                return 0;
            }
        if (m->type != CQ_MQ_RESP_COMMIT)
            on_topic_answer(f, l, m, now_ms);
        return 0;
    case CQ_MQ_RESP_WATCH:
        on_topic_answer(f, l, m, now_ms);
        return 0;
    case CQ_MQ_RESP_ERROR:
        CQ_WARN("mq", "follow shard %u: %s answered an error frame: %s %s", l->shard,
                l->addr[l->cur], cq_mq_errcode_name((int)m->err_code),
                m->err_msg ? m->err_msg : "");
        return CQ_EHEADER;
    default:
        return 0; /* another answer: nothing waits for it */
    }
}

/* One frame from link's server (cq_mq_feed's callback). */
typedef struct feed_ctx {
    cq_mqfollow_t *f;
    link_t *l;
    uint64_t now_ms;
} feed_ctx_t;

static int on_frame(void *ud, const cq_mq_frame_t *fr)
{
    feed_ctx_t *x = ud;
    cq_mq_msg_t *m = NULL;
    char err[CQ_MQ_ERR_MSG_MAX];
    int r = cq_mq_decode(fr, &x->f->lim, &m, err, sizeof(err));
    if (r < 0)
        CQ_WARN("mq", "follow shard %u: a frame of type %u from %s does not decode: %s",
                x->l->shard, fr->type, x->l->addr[x->l->cur], err);
    else
        r = on_msg(x->f, x->l, m, x->now_ms);
    cq_mq_msg_free(m);
    return r;
}

int cq_mqfollow_input(cq_mqfollow_t *f, size_t link, const uint8_t *p, size_t n, uint64_t now_ms)
{
    link_t *l = f->links[link];
    if (l->phase == L_DOWN)
        return 0;
    l->last_rx_ms = now_ms;
    feed_ctx_t x = {f, l, now_ms};
    return cq_mq_feed(&l->in, p, n, FRAME_MAX, on_frame, &x);
}

/* ---- connection events --------------------------------------------------------------------- */

static void reset_conn(cq_mqfollow_t *f, link_t *l)
{
    l->in.len = 0;
    l->out.len = 0;
    l->master = false;
    l->not_master_since = 0;
    for (size_t i = 0; i < f->ntopics; i++) {
        ltopic_t *t = &l->lt[i];
        pend_clear(t);
        t->state = T_IDLE;
        t->watched = false;
        t->ask = 0;
        t->retry_at = 0;
    }
    for (size_t k = 0; k < l->nreads; k++)
        fail_later(f, l->reads[k].tag, -ENOTCONN, l->reads[k].kind);
    l->nreads = 0;
}

void cq_mqfollow_connected(cq_mqfollow_t *f, size_t link, uint64_t now_ms)
{
    link_t *l = f->links[link];
    reset_conn(f, l);
    l->phase = L_HELLO;
    l->last_rx_ms = now_ms;
    if (hello(f, l) < 0)
        l->last_rx_ms = 0; /* out of memory: the next tick closes it */
}

void cq_mqfollow_closed(cq_mqfollow_t *f, size_t link, uint64_t now_ms)
{
    link_t *l = f->links[link];
    (void)now_ms;
    if (l->phase == L_UP)
        f->st.disconnects++;
    reset_conn(f, l);
    l->phase = L_DOWN;
    l->cur = (l->cur + 1) % (l->naddr ? l->naddr : 1);
}

cq_sbuf_t *cq_mqfollow_output(cq_mqfollow_t *f, size_t link)
{
    return &f->links[link]->out;
}

int cq_mqfollow_tick(cq_mqfollow_t *f, size_t link, uint64_t now_ms)
{
    fails_drain(f);
    link_t *l = f->links[link];
    if (l->phase == L_DOWN)
        return 0;
    if (now_ms - l->last_rx_ms >= f->o.timeout_ms) {
        CQ_WARN("mq", "follow shard %u: %s sent nothing for %u ms: closing", l->shard,
                l->addr[l->cur], f->o.timeout_ms);
        return CQ_ETIMEOUT;
    }
    if (l->phase != L_UP)
        return 0;
    if (l->naddr > 1 && l->not_master_since && now_ms - l->not_master_since >= f->o.recheck_ms) {
        CQ_INFO("mq", "follow shard %u: %s is not master: trying the shard's next server", l->shard,
                l->addr[l->cur]);
        return CQ_ENOTMASTER;
    }
    if (now_ms - l->last_ka_ms >= f->o.keepalive_ms) {
        l->last_ka_ms = now_ms;
        if (!request(l, CQ_MQ_REQ_KEEPALIVE, NULL, 0, 0))
            return -ENOMEM;
    }
    for (size_t i = 0; i < f->ntopics; i++)
        if (l->lt[i].state == T_IDLE && !l->lt[i].ask && now_ms >= l->lt[i].retry_at)
            step(f, l, i, now_ms);
    return 0;
}

/* ---- stats --------------------------------------------------------------------------------- */

void cq_mqfollow_stats(const cq_mqfollow_t *f, cq_mqfollow_stats_t *ret)
{
    *ret = f->st;
}

void cq_mqfollow_link_stats(const cq_mqfollow_t *f, size_t link, cq_mqfollow_link_stats_t *ret)
{
    const link_t *l = f->links[link];
    *ret = (cq_mqfollow_link_stats_t){l->shard, l->phase == L_UP, l->master, l->epoch, l->events};
}
