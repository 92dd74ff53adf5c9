/* chanq_cluster.c - the cluster client's logic over an injected transport (see
 * chanq_cluster.h): server list, produce failover, cache, consumer, dedupe. No I/O here. */
#include "chanq_cluster.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEF_CACHE_MSGS    10000u
#define DEF_CACHE_BYTES   (16u << 20)
#define DEF_SHARD_TRIES   3u
#define DEF_RECONNECT_MS  1000u
#define DEF_RECHECK_MS    1000u
#define DEF_PRODUCERS     1024u
#define UNKNOWN_SHARD_KEY (1ull << 32)

typedef struct srv {
    chanq_cluster_server_t s;
    bool connected;
    int64_t weight;           /* -1: unknown */
    uint64_t retry_at;        /* reconnect backoff ends (0: none) */
    uint64_t notmaster_until; /* believed not master before this time */
} srv_t;

/* One cached request: its own copies of the topic and contents, its key assigned. */
typedef struct creq {
    struct creq *next;
    char topic[CQ_MQ_TOPIC_MAX + 1];
    chanq_mq_content_t *msgs;
    size_t n, bytes;
    int64_t producer_id, seq, time;
} creq_t;

struct chanq_cluster {
    srv_t srv[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n;
    chanq_cluster_transport_t tr;
    chanq_cluster_opts_t o;
    int64_t pid, next_seq;
    creq_t *head, *tail;
    size_t cached_msgs, cached_bytes;
    chanq_cluster_server_t view[CHANQ_CLUSTER_SERVERS_MAX]; /* chanq_cluster_servers() */
    uint64_t refreshed_ms; /* when opts.refresh last ran (0: never) */
};

/* Per-shard state of a consumer. */
typedef struct kshard {
    uint64_t key;
    int64_t offset;
    bool init;
} kshard_t;

struct chanq_cluster_consumer {
    chanq_cluster_t *c;
    char topic[CQ_MQ_TOPIC_MAX + 1];
    bool from_end;
    kshard_t sh[CHANQ_CLUSTER_SERVERS_MAX];
    size_t nsh;
};

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t mono_ms(void *ud)
{
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t now(const chanq_cluster_t *c)
{
    return c->o.now_ms(c->o.clock_ud);
}

/* Errors after which the server (not the request) is the problem: drop the connection. */
static bool conn_err(int rc)
{
    return rc == CQ_ECLOSED || rc == CQ_ETIMEOUT || (rc < 0 && rc > -1000 && rc != -ENOMEM);
}

/* Errors that let a request move on (rule 3/4 of the header); anything else is final. */
static bool movable(int rc)
{
    return conn_err(rc) || rc == CQ_ENOTMASTER || rc == CQ_ESRVOFFLINE || rc == CQ_EBUSY ||
           rc == CQ_ESTORE;
}

/* Servers of unknown shard are a shard of their own. */
static uint64_t shard_key(const srv_t *s)
{
    if (s->s.shard == CHANQ_CLUSTER_SHARD_UNKNOWN)
        return UNKNOWN_SHARD_KEY | s->s.index;
    return s->s.shard;
}

static bool believed_master(const chanq_cluster_t *c, const srv_t *s)
{
    return s->notmaster_until <= now(c);
}

static bool in_backoff(const chanq_cluster_t *c, const srv_t *s)
{
    return !s->connected && s->retry_at > now(c);
}

static uint32_t weight_of(const srv_t *s)
{
    return s->weight < 0 ? CHANQ_CLUSTER_WEIGHT_UNKNOWN : (uint32_t)s->weight;
}

static void apply_hello(chanq_cluster_t *c, srv_t *s, const chanq_cluster_hello_t *h)
{
    if (s->s.shard == CHANQ_CLUSTER_SHARD_UNKNOWN) /* a shard given in the list stays */
        s->s.shard = h->shard;
    if (h->weight >= 0)
        s->weight = h->weight;
    /* weight 0 from a master: taken offline by an operator (it refuses produces) */
    bool slave = h->master == 0 || h->weight == 0;
    if (slave)
        s->notmaster_until = now(c) + c->o.recheck_ms;
    else if (h->master == 1 || h->weight > 0)
        s->notmaster_until = 0;
}

static void mark_down(chanq_cluster_t *c, srv_t *s)
{
    if (s->connected && c->tr.disconnect)
        c->tr.disconnect(c->tr.ud, s->s.index);
    s->connected = false;
    s->retry_at = now(c) + c->o.reconnect_ms;
}

static void mark_not_master(chanq_cluster_t *c, srv_t *s)
{
    s->notmaster_until = now(c) + c->o.recheck_ms;
}

/* Connects s unless it is connected. Returns 0, -ECONNREFUSED while in backoff, or the
 * transport's error (s is then in backoff). */
static int ensure_conn(chanq_cluster_t *c, srv_t *s)
{
    if (s->connected)
        return 0;
    if (in_backoff(c, s))
        return -ECONNREFUSED;
    chanq_cluster_hello_t h = {CHANQ_CLUSTER_SHARD_UNKNOWN, -1, -1};
    int rc = c->tr.connect(c->tr.ud, s->s.index, s->s.addr, &h);
    if (rc < 0) {
        s->retry_at = now(c) + c->o.reconnect_ms;
        return rc;
    }
    s->connected = true;
    s->retry_at = 0;
    apply_hello(c, s, &h);
    return 0;
}

/* Better candidate first: believed master, then weight (larger), then index (lower). */
static bool better(const chanq_cluster_t *c, const srv_t *a, const srv_t *b)
{
    bool ma = believed_master(c, a), mb = believed_master(c, b);
    if (ma != mb)
        return ma;
    if (weight_of(a) != weight_of(b))
        return weight_of(a) > weight_of(b);
    return a->s.index < b->s.index;
}

/* The servers not in backoff (only those of shard key when key_only), best first, into
 * v[0..); returns how many. */
static size_t order(const chanq_cluster_t *c, bool key_only, uint64_t key, srv_t **v)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) {
        srv_t *s = (srv_t *)&c->srv[i];
        if (in_backoff(c, s) || (key_only && shard_key(s) != key))
            continue;
        size_t j = n++;
        while (j > 0 && better(c, s, v[j - 1])) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = s;
    }
    return n;
}

/* ---- produce ------------------------------------------------------------------------------ */

typedef struct outcome {
    bool not_master; /* some server answered not_master */
    int soft;        /* last busy / storage answer, 0 if none */
} outcome_t;

/* One server of the shard: up to *tries busy/storage tries. Returns the transport's code. */
static int produce_srv(chanq_cluster_t *c, srv_t *s, const chanq_mq_produce_t *req,
                       int64_t *offsets, uint32_t *tries, outcome_t *oc)
{
    for (;;) {
        int rc = ensure_conn(c, s);
        if (rc == 0)
            rc = c->tr.produce(c->tr.ud, s->s.index, req, offsets);
        if (rc == 0 || !movable(rc))
            return rc;
        if (rc == CQ_ENOTMASTER || rc == CQ_ESRVOFFLINE) {
            mark_not_master(c, s);
            oc->not_master = true;
            return rc;
        }
        if (conn_err(rc)) {
            mark_down(c, s);
            return rc;
        }
        oc->soft = rc; /* busy or storage: the shard is there, retry the same key */
        if (++*tries >= c->o.shard_tries)
            return rc;
    }
}

/* Every server of the shard key, masters first, while the shard is reachable. Returns 0 (the
 * server's shard in *ret_shard), a final error, or a movable one. */
static int produce_shard(chanq_cluster_t *c, uint64_t key, const chanq_mq_produce_t *req,
                         int64_t *offsets, uint32_t *ret_shard, outcome_t *oc)
{
    srv_t *v[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n = order(c, true, key, v);
    uint32_t tries = 0;
    int rc = -ECONNREFUSED;
    for (size_t i = 0; i < n && tries < c->o.shard_tries; i++) {
        rc = produce_srv(c, v[i], req, offsets, &tries, oc);
        if (rc == 0)
            *ret_shard = v[i]->s.shard;
        if (!movable(rc) || rc == CQ_EBUSY || rc == CQ_ESTORE)
            return rc;
    }
    return rc == CQ_ESRVOFFLINE ? CQ_ENOTMASTER : rc;
}

/* Rules 1-4: the shards in the order of their best master. Returns 0, a final error, or the
 * no-master error (CQ_ENOTMASTER, the last busy/storage, else -ECONNREFUSED). */
static int produce_any(chanq_cluster_t *c, const chanq_mq_produce_t *req, int64_t *offsets,
                       uint32_t *ret_shard)
{
    srv_t *v[CHANQ_CLUSTER_SERVERS_MAX];
    uint64_t done[CHANQ_CLUSTER_SERVERS_MAX];
    size_t ndone = 0;
    outcome_t oc = {false, 0};
    size_t n = order(c, false, 0, v);
    for (size_t i = 0; i < n; i++) {
        if (!believed_master(c, v[i]))
            continue; /* (beliefs change while trying: check each) */
        uint64_t key = shard_key(v[i]);
        bool seen = false;
        for (size_t j = 0; j < ndone; j++)
            seen |= done[j] == key;
        if (seen)
            continue;
        done[ndone++] = key;
        int rc = produce_shard(c, key, req, offsets, ret_shard, &oc);
        if (rc == 0 || !movable(rc))
            return rc;
    }
    if (oc.not_master)
        return CQ_ENOTMASTER;
    return oc.soft ? oc.soft : -ECONNREFUSED;
}

static creq_t *creq_free(creq_t *q)
{
    if (!q)
        return NULL;
    for (size_t i = 0; q->msgs && i < q->n; i++)
        cq_free((void *)q->msgs[i].data);
    cq_free(q->msgs);
    cq_free(q);
    return NULL;
}

static creq_t *creq_copy(const chanq_mq_produce_t *r)
{
    creq_t *q = cq_calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->msgs = cq_calloc(r->n, sizeof(*q->msgs));
    if (!q->msgs)
        return creq_free(q);
    q->n = r->n;
    snprintf(q->topic, sizeof(q->topic), "%s", r->topic);
    for (size_t i = 0; i < r->n; i++) {
        char *d = cq_malloc(r->msgs[i].len + 1);
        if (!d)
            return creq_free(q);
        memcpy(d, r->msgs[i].data, r->msgs[i].len);
        d[r->msgs[i].len] = '\0';
        q->msgs[i] = r->msgs[i];
        q->msgs[i].data = d;
        q->bytes += r->msgs[i].len;
    }
    q->producer_id = r->producer_id;
    q->seq = r->seq;
    q->time = r->time;
    return q;
}

static chanq_mq_produce_t creq_req(const creq_t *q)
{
    return (chanq_mq_produce_t){q->topic, q->msgs, q->n, q->producer_id, q->seq, q->time};
}

/* Queues a copy of r behind the cache. Returns CHANQ_CLUSTER_CACHED, CQ_ELIMIT or -ENOMEM. */
static int cache_put(chanq_cluster_t *c, const chanq_mq_produce_t *r)
{
    size_t bytes = 0;
    for (size_t i = 0; i < r->n; i++)
        bytes += r->msgs[i].len;
    if (c->cached_msgs + r->n > c->o.cache_max_msgs ||
        c->cached_bytes + bytes > c->o.cache_max_bytes)
        return CQ_ELIMIT;
    creq_t *q = creq_copy(r);
    if (!q)
        return -ENOMEM;
    if (c->tail)
        c->tail->next = q;
    else
        c->head = q;
    c->tail = q;
    c->cached_msgs += q->n;
    c->cached_bytes += q->bytes;
    return CHANQ_CLUSTER_CACHED;
}

static void cache_pop(chanq_cluster_t *c)
{
    creq_t *q = c->head;
    c->head = q->next;
    if (!c->head)
        c->tail = NULL;
    c->cached_msgs -= q->n;
    c->cached_bytes -= q->bytes;
    creq_free(q);
}

size_t chanq_cluster_flush(chanq_cluster_t *c)
{
    while (c->head) {
        creq_t *q = c->head;
        int64_t *offs = cq_calloc(q->n, sizeof(*offs));
        if (!offs)
            break;
        chanq_mq_produce_t r = creq_req(q);
        uint32_t shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
        int rc = produce_any(c, &r, offs, &shard);
        if (rc < 0 && movable(rc)) {
            cq_free(offs);
            break;
        }
        if (c->o.on_cached)
            c->o.on_cached(c->o.cached_ud, q->topic, q->producer_id, q->seq, q->n, rc, shard,
                           rc == 0 ? offs : NULL);
        cq_free(offs);
        cache_pop(c);
    }
    return c->cached_msgs;
}

int chanq_cluster_produce(chanq_cluster_t *c, const chanq_mq_produce_t *req, int64_t *ret_offsets,
                          uint32_t *ret_shard)
{
    if (!c || !req || !req->topic || !req->msgs || req->n == 0 ||
        (req->producer_id > 0 && req->seq < 0))
        return -EINVAL;
    if (!cq_mq_topic_valid(req->topic, strlen(req->topic)))
        return CQ_EBADTOPIC;
    chanq_mq_produce_t r = *req;
    if (r.producer_id <= 0) {
        r.producer_id = c->pid;
        r.seq = c->next_seq;
        c->next_seq += (int64_t)r.n;
    }
    if (c->head && chanq_cluster_flush(c) > 0)
        return cache_put(c, &r); /* behind the cache, to keep the order */
    int64_t tmp[1];
    int64_t *offs = ret_offsets ? ret_offsets : (r.n == 1 ? tmp : cq_calloc(r.n, sizeof(*offs)));
    if (!offs)
        return -ENOMEM;
    uint32_t shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
    int rc = produce_any(c, &r, offs, &shard);
    if (offs != ret_offsets && offs != tmp)
        cq_free(offs);
    if (rc == 0 && ret_shard)
        *ret_shard = shard;
    if (rc == 0 || !movable(rc) || c->o.policy != CHANQ_CLUSTER_CACHE)
        return rc;
    return cache_put(c, &r);
}

/* The list's source, every refresh_ms. */
static void refresh(chanq_cluster_t *c)
{
    chanq_cluster_server_t v[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n = 0;
    uint64_t t = now(c);
    if (!c->o.refresh || (c->refreshed_ms && t - c->refreshed_ms < c->o.refresh_ms))
        return;
    c->refreshed_ms = t ? t : 1;
    if (c->o.refresh(c->o.refresh_ud, v, CHANQ_CLUSTER_SERVERS_MAX, &n) == 0 && n > 0)
        (void)chanq_cluster_set_servers(c, v, n);
}

int chanq_cluster_set_servers(chanq_cluster_t *c, const chanq_cluster_server_t *servers, size_t n)
{
    if (n == 0 || n > CHANQ_CLUSTER_SERVERS_MAX || !servers)
        return -EINVAL;
    for (size_t i = 0; i < c->n || i < n; i++) {
        srv_t *s = &c->srv[i];
        bool same = i < c->n && i < n && strcmp(s->s.addr, servers[i].addr) == 0;
        if (same) {
            if (servers[i].shard != CHANQ_CLUSTER_SHARD_UNKNOWN)
                s->s.shard = servers[i].shard;
            continue;
        }
        if (i < c->n && s->connected && c->tr.disconnect)
            c->tr.disconnect(c->tr.ud, (uint32_t)i);
        memset(s, 0, sizeof(*s));
        if (i >= n)
            continue;
        s->s = servers[i];
        s->s.index = (uint32_t)i;
        s->weight = -1;
    }
    c->n = n;
    return 0;
}

size_t chanq_cluster_tick(chanq_cluster_t *c)
{
    refresh(c);
    for (size_t i = 0; i < c->n; i++) {
        srv_t *s = &c->srv[i];
        if (!s->connected) {
            (void)ensure_conn(c, s);
            continue;
        }
        chanq_cluster_hello_t h = {CHANQ_CLUSTER_SHARD_UNKNOWN, -1, -1};
        int rc = c->tr.keepalive(c->tr.ud, s->s.index, &h);
        if (rc == 0)
            apply_hello(c, s, &h);
        else if (conn_err(rc))
            mark_down(c, s);
    }
    return chanq_cluster_flush(c);
}

size_t chanq_cluster_cached(const chanq_cluster_t *c, size_t *ret_bytes)
{
    if (ret_bytes)
        *ret_bytes = c->cached_bytes;
    return c->cached_msgs;
}

int64_t chanq_cluster_producer_id(const chanq_cluster_t *c)
{
    return c->pid;
}

int64_t chanq_cluster_next_seq(const chanq_cluster_t *c)
{
    return c->next_seq;
}

const chanq_cluster_server_t *chanq_cluster_servers(chanq_cluster_t *c, size_t *ret_n)
{
    for (size_t i = 0; i < c->n; i++)
        c->view[i] = c->srv[i].s;
    *ret_n = c->n;
    return c->view;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int64_t random_pid(void)
{
    uint64_t x = mono_ms(NULL) ^ ((uint64_t)getpid() << 32);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x ^= (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x &= (uint64_t)CQ_MQ_MAX_U53;
    return x ? (int64_t)x : 1;
}

static void opts_defaults(chanq_cluster_opts_t *o)
{
    if (!o->cache_max_msgs)
        o->cache_max_msgs = DEF_CACHE_MSGS;
    if (!o->cache_max_bytes)
        o->cache_max_bytes = DEF_CACHE_BYTES;
    if (!o->shard_tries)
        o->shard_tries = DEF_SHARD_TRIES;
    if (!o->reconnect_ms)
        o->reconnect_ms = DEF_RECONNECT_MS;
    if (!o->recheck_ms)
        o->recheck_ms = DEF_RECHECK_MS;
    if (!o->now_ms)
        o->now_ms = mono_ms;
    if (!o->refresh_ms)
        o->refresh_ms = 5000;
}

chanq_cluster_t *chanq_cluster_new(const chanq_cluster_server_t *servers, size_t n,
                                   const chanq_cluster_transport_t *tr,
                                   const chanq_cluster_opts_t *opts)
{
    chanq_cluster_t *c = NULL;
    if (!tr)
        return NULL;
    if (n == 0 || n > CHANQ_CLUSTER_SERVERS_MAX || !servers)
        goto fail;
    c = cq_calloc(1, sizeof(*c));
    if (!c)
        goto fail;
    c->tr = *tr;
    if (opts)
        c->o = *opts;
    opts_defaults(&c->o);
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        c->srv[i].s = servers[i];
        c->srv[i].s.index = (uint32_t)i;
        c->srv[i].weight = -1;
    }
    c->pid = c->o.producer_id > 0 ? c->o.producer_id : random_pid();
    return c;
fail:
    if (tr->free)
        tr->free(tr->ud);
    return NULL;
}

chanq_cluster_t *chanq_cluster_free(chanq_cluster_t *c)
{
    if (!c)
        return NULL;
    for (size_t i = 0; i < c->n; i++)
        if (c->srv[i].connected && c->tr.disconnect)
            c->tr.disconnect(c->tr.ud, (uint32_t)i);
    while (c->head)
        cache_pop(c);
    if (c->tr.free)
        c->tr.free(c->tr.ud);
    cq_free(c);
    return NULL;
}

/* ---- server lists ------------------------------------------------------------------------- */

static int parse_entry(const char *p, size_t len, chanq_cluster_server_t *e)
{
    char buf[CHANQ_CLUSTER_ADDR_MAX + 16];
    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, p, len);
    buf[len] = '\0';
    const char *addr = buf;
    e->shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
    char *slash = strchr(buf, '/');
    if (slash) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(buf, &end, 10);
        if (end != slash || end == buf || errno || v >= CHANQ_CLUSTER_SHARD_UNKNOWN)
            return -EINVAL;
        e->shard = (uint32_t)v;
        addr = slash + 1;
    }
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1] || strlen(addr) > CHANQ_CLUSTER_ADDR_MAX)
        return -EINVAL;
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    return 0;
}

int chanq_cluster_parse_servers(const char *list, chanq_cluster_server_t *ret, size_t cap,
                                size_t *ret_n)
{
    size_t n = 0;
    if (!list || !*list)
        return -EINVAL;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == cap)
            return CQ_ELIMIT;
        int rc = parse_entry(p, len, &ret[n]);
        if (rc < 0)
            return rc;
        ret[n].index = (uint32_t)n;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    *ret_n = n;
    return 0;
}

int chanq_cluster_parse_member(const char *data, char *adv, size_t cap, bool *ret_eligible)
{
    if (!data || strncmp(data, "v1 ", 3) != 0)
        return -EINVAL;
    const char *a = strstr(data, " adv="), *e = strstr(data, " elig=");
    if (!a || !e || (e[6] != '0' && e[6] != '1'))
        return -EINVAL;
    a += 5;
    size_t len = strcspn(a, " ");
    if (len == 0 || len >= cap || !memchr(a, ':', len))
        return -EINVAL;
    memcpy(adv, a, len);
    adv[len] = '\0';
    *ret_eligible = e[6] == '1';
    return 0;
}

/* ---- batches ------------------------------------------------------------------------------ */

int chanq_cluster_batch_add(chanq_cluster_batch_t *b, uint32_t shard, int64_t offset, int64_t time,
                            int64_t producer_id, int64_t seq, const char *content, size_t len)
{
    if (b->n == b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 16;
        chanq_cluster_item_t *v = cq_realloc(b->items, ncap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        b->items = v;
        b->cap = ncap;
    }
    char *d = cq_malloc(len + 1);
    if (!d)
        return -ENOMEM;
    memcpy(d, content, len);
    d[len] = '\0';
    b->items[b->n++] = (chanq_cluster_item_t){shard, offset, time, producer_id, seq, d, len};
    return 0;
}

void chanq_cluster_batch_clear(chanq_cluster_batch_t *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        cq_free(b->items[i].content);
    cq_free(b->items);
    b->items = NULL;
    b->n = b->cap = 0;
}

/* ---- consumer ----------------------------------------------------------------------------- */

chanq_cluster_consumer_t *chanq_cluster_consumer_new(chanq_cluster_t *c, const char *topic,
                                                     bool from_end)
{
    if (!c || !topic || !cq_mq_topic_valid(topic, strlen(topic)))
        return NULL;
    chanq_cluster_consumer_t *k = cq_calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->c = c;
    snprintf(k->topic, sizeof(k->topic), "%s", topic);
    k->from_end = from_end;
    return k;
}

chanq_cluster_consumer_t *chanq_cluster_consumer_free(chanq_cluster_consumer_t *k)
{
    cq_free(k);
    return NULL;
}

static kshard_t *kshard(chanq_cluster_consumer_t *k, uint64_t key)
{
    for (size_t i = 0; i < k->nsh; i++)
        if (k->sh[i].key == key)
            return &k->sh[i];
    if (k->nsh == CHANQ_CLUSTER_SERVERS_MAX)
        return NULL;
    k->sh[k->nsh] = (kshard_t){key, 0, !k->from_end};
    return &k->sh[k->nsh++];
}

/* One server's answer for shard state ks. */
static int consume_srv(chanq_cluster_consumer_t *k, srv_t *s, kshard_t *ks, uint32_t max,
                       chanq_cluster_batch_t *out)
{
    chanq_cluster_t *c = k->c;
    int rc = ensure_conn(c, s);
    if (rc == 0 && !ks->init) {
        int64_t last = 0;
        rc = c->tr.last_offset(c->tr.ud, s->s.index, k->topic, &last);
        if (rc == 0) {
            ks->offset = last;
            ks->init = true;
        }
    }
    if (rc == 0) {
        out->last_offset = -1;
        rc = c->tr.consume(c->tr.ud, s->s.index, s->s.shard, k->topic, ks->offset, max, out);
        if (rc == 0 && out->last_offset > ks->offset)
            ks->offset = out->last_offset;
    }
    if (conn_err(rc))
        mark_down(c, s);
    return rc;
}

/* The server of the list at addr, or a new entry for it in shard (NULL when the list is full). */
static srv_t *srv_at(chanq_cluster_t *c, const char *addr, uint32_t shard)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->srv[i].s.addr, addr) == 0)
            return &c->srv[i];
    if (c->n == CHANQ_CLUSTER_SERVERS_MAX)
        return NULL;
    srv_t *s = &c->srv[c->n];
    memset(s, 0, sizeof(*s));
    s->s.shard = shard;
    snprintf(s->s.addr, sizeof(s->s.addr), "%s", addr);
    s->s.index = (uint32_t)c->n++;
    s->weight = -1;
    return s;
}

/* s, a standby, refused the read while its shard has a master (read_on_master): the read goes
 * once to the master it named. *ret_followed: a master was named and asked (its answer is the
 * shard's outcome); else the caller tries the shard's next server. */
static int follow_master(chanq_cluster_consumer_t *k, srv_t *s, kshard_t *ks, uint32_t max,
                         chanq_cluster_batch_t *out, bool *ret_followed)
{
    chanq_cluster_t *c = k->c;
    char addr[CHANQ_CLUSTER_ADDR_MAX + 1];
    uint32_t idx = s->s.index;
    mark_not_master(c, s);
    *ret_followed = false;
    if (!c->tr.read_master || c->tr.read_master(c->tr.ud, idx, addr, sizeof(addr)) < 0)
        return CQ_EREADMASTER;
    srv_t *m = srv_at(c, addr, s->s.shard);
    if (!m || m == s)
        return CQ_EREADMASTER;
    *ret_followed = true;
    m->notmaster_until = 0; /* its standby says it is master */
    return consume_srv(k, m, ks, max, out);
}

/* Every shard key of the list, in the order of its first server. */
static size_t shard_keys(chanq_cluster_t *c, uint64_t *keys)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) {
        uint64_t key = shard_key(&c->srv[i]);
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen |= keys[j] == key;
        if (!seen)
            keys[n++] = key;
    }
    return n;
}

int chanq_cluster_consume(chanq_cluster_consumer_t *k, uint32_t max_per_shard,
                          chanq_cluster_batch_t *out)
{
    chanq_cluster_t *c = k->c;
    for (size_t i = 0; i < c->n; i++) /* learn shards before grouping */
        if (c->srv[i].s.shard == CHANQ_CLUSTER_SHARD_UNKNOWN)
            (void)ensure_conn(c, &c->srv[i]);
    uint64_t keys[CHANQ_CLUSTER_SERVERS_MAX];
    size_t nkeys = shard_keys(c, keys);
    int last = -ECONNREFUSED;
    bool any = false;
    for (size_t i = 0; i < nkeys; i++) {
        kshard_t *ks = kshard(k, keys[i]);
        srv_t *v[CHANQ_CLUSTER_SERVERS_MAX];
        size_t n = ks ? order(c, true, keys[i], v) : 0;
        for (size_t j = 0; j < n; j++) {
            bool followed = false;
            int rc = consume_srv(k, v[j], ks, max_per_shard, out);
            if (rc == CQ_EREADMASTER)
                rc = follow_master(k, v[j], ks, max_per_shard, out, &followed);
            if (rc == 0)
                any = true;
            if (rc != 0)
                last = rc;
            /* storage and busy are this server's trouble (a master whose database is gone):
             * the shard's other server may serve the read, as after a connection error; so
             * may it after a standby that named no master. */
            bool next = movable(rc) || (rc == CQ_EREADMASTER && !followed);
            if (followed || !next || rc == CQ_ENOTMASTER)
                break;
        }
    }
    return any ? 0 : last;
}

int64_t chanq_cluster_consumer_offset(const chanq_cluster_consumer_t *k, uint32_t shard)
{
    for (size_t i = 0; i < k->nsh; i++)
        if (k->sh[i].key == shard)
            return k->sh[i].offset;
    return 0;
}

/* ---- dedupe ------------------------------------------------------------------------------- */

typedef struct producer {
    int64_t pid, hw;
    uint64_t stamp;
    uint64_t bits[CHANQ_CLUSTER_DEDUPE_WINDOW / 64]; /* ring: bit seq % WINDOW */
} producer_t;

struct chanq_cluster_dedupe {
    producer_t *v;
    size_t n, cap;
    uint64_t clock;
};

chanq_cluster_dedupe_t *chanq_cluster_dedupe_new(size_t max_producers)
{
    chanq_cluster_dedupe_t *d = cq_calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->cap = max_producers ? max_producers : DEF_PRODUCERS;
    d->v = cq_calloc(d->cap, sizeof(*d->v));
    if (!d->v)
        return chanq_cluster_dedupe_free(d);
    return d;
}

chanq_cluster_dedupe_t *chanq_cluster_dedupe_free(chanq_cluster_dedupe_t *d)
{
    if (d)
        cq_free(d->v);
    cq_free(d);
    return NULL;
}

static producer_t *producer_get(chanq_cluster_dedupe_t *d, int64_t pid, bool *ret_new)
{
    size_t lru = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (d->v[i].pid == pid)
            return &d->v[i];
        if (d->v[i].stamp < d->v[lru].stamp)
            lru = i;
    }
    producer_t *p = d->n < d->cap ? &d->v[d->n++] : &d->v[lru];
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    *ret_new = true;
    return p;
}

static bool bit_swap(producer_t *p, int64_t seq)
{
    uint64_t i = (uint64_t)seq % CHANQ_CLUSTER_DEDUPE_WINDOW, m = 1ull << (i % 64);
    bool was = p->bits[i / 64] & m;
    p->bits[i / 64] |= m;
    return was;
}

static void bit_clear(producer_t *p, int64_t seq)
{
    uint64_t i = (uint64_t)seq % CHANQ_CLUSTER_DEDUPE_WINDOW;
    p->bits[i / 64] &= ~(1ull << (i % 64));
}

bool chanq_cluster_dedupe_seen(chanq_cluster_dedupe_t *d, int64_t producer_id, int64_t seq)
{
    if (producer_id <= 0 || seq < 0)
        return false;
    bool fresh = false;
    producer_t *p = producer_get(d, producer_id, &fresh);
    p->stamp = ++d->clock;
    if (fresh || seq > p->hw) {
        int64_t from = fresh ? seq : p->hw + 1;
        if (seq - from >= (int64_t)CHANQ_CLUSTER_DEDUPE_WINDOW)
            memset(p->bits, 0, sizeof(p->bits));
        else
            for (int64_t s = from; s < seq; s++)
                bit_clear(p, s);
        if (fresh)
            memset(p->bits, 0, sizeof(p->bits));
        p->hw = seq;
        bit_swap(p, seq);
        return false;
    }
    if (seq <= p->hw - (int64_t)CHANQ_CLUSTER_DEDUPE_WINDOW)
        return false; /* older than the window: cannot tell, counts as new */
    return bit_swap(p, seq);
}
