/* fault_driver.c - the producer, the watcher and the verifier of the cluster fault run (issue
 * 11, "The fault run"; tests/integration/cluster/faults.sh drives it around each fault).
 *
 *   fault_driver setup  SERVERS --topic T     adds the topic on every shard (its master)
 *   fault_driver run    SERVERS --topic T [--rate N] [--producer-id P] [--policy cache|drop]
 *                       [--timeout-ms N] [--drain-ms N]
 *   fault_driver verify SERVERS --topic T --log FILE [--fenced ADDR --after T_MS]
 *                       [--fault-ms T_MS --fault-shard S]
 *   SERVERS: --servers "S/H:P,..." | --zk HOSTS [--zk-root R]
 *
 * run: one producer (libchanq's cluster client, one message per produce, content
 * "fd p=<producer_id> s=<seq>", the idempotence key (producer_id, seq) set explicitly) and one
 * watcher thread reading every shard through its own cluster client per shard (so that it
 * knows when a shard's reads fail), polling every 30 ms. Until SIGTERM/SIGINT; then it stops
 * producing, flushes the cache, lets the watcher drain (until it saw every acked seq, or
 * --drain-ms) and exits 0. Its stdout is the log, one line per event, times are wall-clock ms
 * (CLOCK_REALTIME, so that `date +%s%3N` in a script compares):
 *   ack <seq> <shard> <offset> <t_ms> <server addr>     a produce acknowledged (by that server)
 *   cached <seq> <t_ms>                                 no master: the SDK cached it
 *   err <seq> <code> <name> <t_ms>                      produce failed (not acked)
 *   try <seq> <server addr> <code> <name> <t_ms>        one server refused or failed a try
 *   seen <shard> <offset> <producer_id> <seq> <t_ms>    the watcher read it
 *   readable <shard> <0|1> <t_ms> <code>                a shard's reads started failing / resumed
 *   # hello <server addr> master <m> weight <w> <t_ms>  a server's role or weight, as the
 *                                                       producer learned it (it picks by them)
 *   # ...                                               summaries
 * verify: reads every shard from offset 0 and checks, against the log, that every acked seq is
 * stored exactly at its acked (shard, offset) with its content, that no shard holds a seq twice
 * (copies on two shards are the duplicates consumers drop by (producer_id, seq): counted, not
 * an error), that the watcher saw every acked seq, and (--fenced) that ADDR acknowledged
 * nothing after --after. Prints the counts, and with --fault-ms the time until produce
 * succeeded again and until the faulted shard's reads resumed (printed, never asserted).
 * Exit 0 when every check holds, 1 with the exact seqs that failed, 2 on usage errors.
 */
#include "chanq_cluster.h"
#include "chanq_mq_sync.h"

#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_SHOWN 50 /* seqs listed per failed check */

typedef struct opts {
    const char *mode, *servers, *zk, *zk_root, *topic, *log, *fenced;
    int rate, timeout_ms, drain_ms;
    int64_t producer_id, after_ms, fault_ms;
    uint32_t module, fault_shard;
    bool cache;
} opts_t;

/* What is known of one seq of our producer. */
typedef struct rec {
    bool acked, seen;
    uint32_t shard;
    int64_t offset, t_ms;
    char addr[CHANQ_CLUSTER_ADDR_MAX + 1];
    uint32_t found; /* verify: copies stored, every shard */
    uint32_t found_in_shard;
} rec_t;

typedef struct recs {
    pthread_mutex_t mu;
    rec_t *v;
    size_t n;
} recs_t;

static recs_t recs = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t stop_producing;
static volatile int stop_watching;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One log line (the threads share stdout). */
static void log_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&log_mu);
    vprintf(fmt, ap);
    fflush(stdout);
    pthread_mutex_unlock(&log_mu);
    va_end(ap);
}

/* The record of seq, grown as needed; call with recs.mu held. NULL on OOM or a bad seq. */
static rec_t *rec_at(int64_t seq)
{
    if (seq < 0 || seq > 100000000)
        return NULL;
    if ((size_t)seq >= recs.n) {
        size_t n = recs.n ? recs.n : 4096;
        while (n <= (size_t)seq)
            n *= 2;
        rec_t *v = realloc(recs.v, n * sizeof(*v));
        if (!v)
            return NULL;
        memset(v + recs.n, 0, (n - recs.n) * sizeof(*v));
        recs.v = v;
        recs.n = n;
    }
    return &recs.v[seq];
}

static int content_of(int64_t pid, int64_t seq, char *buf, size_t cap)
{
    return snprintf(buf, cap, "fd p=%" PRId64 " s=%" PRId64, pid, seq);
}

/* (producer_id, seq) of a content this driver wrote; false for anything else. */
static bool parse_content(const char *c, size_t len, int64_t *pid, int64_t *seq)
{
    char buf[96];
    if (len >= sizeof(buf))
        return false;
    memcpy(buf, c, len);
    buf[len] = '\0';
    long long p, s;
    int end = 0;
    if (sscanf(buf, "fd p=%lld s=%lld%n", &p, &s, &end) != 2 || (size_t)end != len)
        return false;
    *pid = p;
    *seq = s;
    return true;
}

/* ---- servers and the transport that tells which server answered -------------------------- */

typedef struct servers {
    chanq_cluster_server_t v[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n;
} servers_t;

static int load_servers(const opts_t *o, servers_t *s)
{
    char err[256] = "";
    int rc = o->servers
                 ? chanq_cluster_parse_servers(o->servers, s->v, CHANQ_CLUSTER_SERVERS_MAX, &s->n)
                 : chanq_cluster_discover_zk(o->zk, o->zk_root, 10000, s->v,
                                             CHANQ_CLUSTER_SERVERS_MAX, &s->n, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "fault_driver: servers: %s %s\n", cq_errname(rc), err);
    for (size_t i = 0; rc == 0 && i < s->n; i++)
        if (s->v[i].shard == CHANQ_CLUSTER_SHARD_UNKNOWN) {
            fprintf(stderr, "fault_driver: %s has no shard (use S/H:P)\n", s->v[i].addr);
            rc = -EINVAL;
        }
    return rc;
}

/* The shards of s, each once, in list order; returns how many. */
static size_t shard_list(const servers_t *s, uint32_t *ret)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            seen |= ret[j] == s->v[i].shard;
        if (!seen)
            ret[n++] = s->v[i].shard;
    }
    return n;
}

/* Wraps the SDK's sync transport to learn which server acknowledged (the SDK says only the
 * shard) and to log every failed try. */
typedef struct wrap {
    chanq_cluster_transport_t in;
    servers_t srv;
    uint32_t last_ok;
    int64_t cur_seq; /* the seq being produced, for the try lines */
    bool log_hello;  /* the producer's: a hello line when a server's role or weight changes */
    chanq_cluster_hello_t last[CHANQ_CLUSTER_SERVERS_MAX];
} wrap_t;

/* The producer picks the shard by these answers: the log shows why it moved. */
static void note_hello(wrap_t *w, uint32_t idx, int rc, const chanq_cluster_hello_t *h)
{
    chanq_cluster_hello_t *l = &w->last[idx];
    if (!w->log_hello || rc != 0 || (l->master == h->master && l->weight == h->weight))
        return;
    *l = *h;
    log_line("# hello %s master %d weight %" PRId64 " %" PRId64 "\n", w->srv.v[idx].addr, h->master,
             h->weight, wall_ms());
}

static int w_connect(void *ud, uint32_t idx, const char *addr, chanq_cluster_hello_t *ret)
{
    wrap_t *w = ud;
    int rc = w->in.connect(w->in.ud, idx, addr, ret);
    note_hello(w, idx, rc, ret);
    return rc;
}

static void w_disconnect(void *ud, uint32_t idx)
{
    wrap_t *w = ud;
    w->in.disconnect(w->in.ud, idx);
}

static int w_keepalive(void *ud, uint32_t idx, chanq_cluster_hello_t *ret)
{
    wrap_t *w = ud;
    int rc = w->in.keepalive(w->in.ud, idx, ret);
    note_hello(w, idx, rc, ret);
    return rc;
}

static int w_produce(void *ud, uint32_t idx, const chanq_mq_produce_t *req, int64_t *offs)
{
    wrap_t *w = ud;
    int rc = w->in.produce(w->in.ud, idx, req, offs);
    if (rc == 0)
        w->last_ok = idx;
    else
        log_line("try %" PRId64 " %s %d %s %" PRId64 "\n", req->seq, w->srv.v[idx].addr, rc,
                 cq_errname(rc), wall_ms());
    return rc;
}

static int w_consume(void *ud, uint32_t idx, uint32_t shard, const char *topic, int64_t offset,
                     uint32_t max, chanq_cluster_batch_t *out)
{
    wrap_t *w = ud;
    return w->in.consume(w->in.ud, idx, shard, topic, offset, max, out);
}

static int w_last_offset(void *ud, uint32_t idx, const char *topic, int64_t *ret)
{
    wrap_t *w = ud;
    return w->in.last_offset(w->in.ud, idx, topic, ret);
}

static void w_free(void *ud)
{
    wrap_t *w = ud;
    if (w && w->in.free)
        w->in.free(w->in.ud);
    free(w);
}

/* A cluster client over srv (only the servers of shard when shard is not UNKNOWN); *ret_w
 * (may be NULL) gets the wrapper, owned by the cluster. NULL on failure. */
static chanq_cluster_t *open_cluster(const opts_t *o, const servers_t *srv, uint32_t shard,
                                     uint32_t type, const chanq_cluster_opts_t *co, wrap_t **ret_w)
{
    wrap_t *w = calloc(1, sizeof(*w));
    if (!w || chanq_cluster_sync_transport(o->module, "", type, o->timeout_ms, &w->in) < 0) {
        free(w);
        return NULL;
    }
    for (size_t i = 0; i < srv->n; i++)
        if (shard == CHANQ_CLUSTER_SHARD_UNKNOWN || srv->v[i].shard == shard)
            w->srv.v[w->srv.n++] = srv->v[i];
    for (size_t i = 0; i < w->srv.n; i++) {
        w->srv.v[i].index = (uint32_t)i;
        w->last[i] = (chanq_cluster_hello_t){.master = -2, .weight = -2}; /* none logged */
    }
    w->log_hello = type == CQ_MQ_PRODUCER;
    chanq_cluster_transport_t tr = {w,         w_connect,     w_disconnect, w_keepalive, w_produce,
                                    w_consume, w_last_offset, w_free,       NULL};
    if (ret_w)
        *ret_w = w;
    return chanq_cluster_new(w->srv.v, w->srv.n, &tr, co);
}

/* ---- setup ------------------------------------------------------------------------------- */

/* add_topic on one server: 0, or the error. */
static int add_topic_on(const opts_t *o, const char *addr)
{
    char host[CHANQ_CLUSTER_ADDR_MAX + 1];
    uint16_t port;
    chanq_mq_sync_t *s = NULL;
    int rc = chanq_mq_sync_parse_addr(addr, host, sizeof(host), &port);
    if (rc == 0)
        rc = chanq_mq_sync_connect(host, port, o->module, "", CQ_MQ_PRODUCER, o->timeout_ms, NULL,
                                   0, &s);
    if (rc == 0) {
        chanq_mq_sync_set_timeout(s, o->timeout_ms);
        rc = chanq_mq_sync_add_topic(s, o->topic);
    }
    chanq_mq_sync_close(s);
    return rc;
}

/* Every shard needs one server (its master) that took add_topic; slaves answer not_master. */
static int do_setup(const opts_t *o, const servers_t *srv)
{
    uint32_t shards[CHANQ_CLUSTER_SERVERS_MAX];
    bool done[CHANQ_CLUSTER_SERVERS_MAX] = {false};
    size_t ns = shard_list(srv, shards), left = ns;
    for (int64_t end = wall_ms() + 30000; left > 0 && wall_ms() < end; sleep_ms(200)) {
        for (size_t i = 0; i < ns; i++)
            for (size_t j = 0; j < srv->n && !done[i]; j++) {
                if (srv->v[j].shard != shards[i])
                    continue;
                int rc = add_topic_on(o, srv->v[j].addr);
                printf("# add_topic %s on %u/%s: %s\n", o->topic, shards[i], srv->v[j].addr,
                       cq_errname(rc));
                if (rc == 0 && (done[i] = true))
                    left--;
            }
    }
    if (left > 0)
        fprintf(stderr, "fault_driver: setup: %zu shard(s) without the topic after 30 s\n", left);
    return left > 0 ? 1 : 0;
}

/* ---- run: producer ----------------------------------------------------------------------- */

typedef struct producer {
    const opts_t *o;
    chanq_cluster_t *c;
    wrap_t *w;
} producer_t;

static void log_ack(producer_t *p, int64_t seq, uint32_t shard, int64_t offset)
{
    int64_t t = wall_ms();
    const char *addr = p->w->srv.v[p->w->last_ok].addr;
    pthread_mutex_lock(&recs.mu);
    rec_t *r = rec_at(seq);
    if (r) {
        *r = (rec_t){.acked = true, .seen = r->seen, .shard = shard, .offset = offset, .t_ms = t};
        snprintf(r->addr, sizeof(r->addr), "%s", addr);
    }
    pthread_mutex_unlock(&recs.mu);
    log_line("ack %" PRId64 " %u %" PRId64 " %" PRId64 " %s\n", seq, shard, offset, t, addr);
}

static void on_cached(void *ud, const char *topic, int64_t pid, int64_t first_seq, size_t n,
                      int err, uint32_t shard, const int64_t *offsets)
{
    (void)topic, (void)pid;
    for (size_t i = 0; i < n; i++) {
        if (err == 0)
            log_ack(ud, first_seq + (int64_t)i, shard, offsets[i]);
        else
            log_line("err %" PRId64 " %d %s %" PRId64 "\n", first_seq + (int64_t)i, err,
                     cq_errname(err), wall_ms());
    }
}

static void produce_one(producer_t *p, int64_t seq)
{
    char buf[96];
    int len = content_of(p->o->producer_id, seq, buf, sizeof(buf));
    chanq_mq_content_t m = {buf, (size_t)len, false, -1};
    chanq_mq_produce_t req = {p->o->topic, &m, 1, p->o->producer_id, seq, -1};
    int64_t off = -1;
    uint32_t shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
    p->w->cur_seq = seq;
    int rc = chanq_cluster_produce(p->c, &req, &off, &shard);
    if (rc == 0)
        log_ack(p, seq, shard, off);
    else if (rc == CHANQ_CLUSTER_CACHED)
        log_line("cached %" PRId64 " %" PRId64 "\n", seq, wall_ms());
    else
        log_line("err %" PRId64 " %d %s %" PRId64 "\n", seq, rc, cq_errname(rc), wall_ms());
}

/* Produces at o->rate until stop_producing; returns the next seq. */
static int64_t produce_loop(producer_t *p)
{
    int64_t start = wall_ms(), seq = 0, last_tick = start;
    for (; !stop_producing; seq++) {
        sleep_ms(start + seq * 1000 / p->o->rate - wall_ms());
        produce_one(p, seq);
        /* keepalives (weights, roles) each second, as an SDK user does; while messages are
         * cached, each 200 ms (the tick flushes them when a master is back) */
        int64_t every = chanq_cluster_cached(p->c, NULL) > 0 ? 200 : 1000;
        if (wall_ms() - last_tick >= every) {
            chanq_cluster_tick(p->c);
            last_tick = wall_ms();
        }
    }
    return seq;
}

/* After the last produce: the cache must go out too (or is reported). */
static void flush_cache(producer_t *p)
{
    int64_t end = wall_ms() + p->o->drain_ms;
    while (chanq_cluster_tick(p->c) > 0 && wall_ms() < end)
        sleep_ms(100);
    size_t left = chanq_cluster_cached(p->c, NULL);
    if (left > 0)
        log_line("# producer: %zu message(s) still cached after %d ms (never acked)\n", left,
                 p->o->drain_ms);
}

/* ---- run: watcher ------------------------------------------------------------------------ */

typedef struct watch_shard {
    uint32_t shard;
    chanq_cluster_t *c;
    chanq_cluster_consumer_t *k;
    int readable; /* -1 unknown, 0 failing, 1 reading */
} watch_shard_t;

typedef struct watcher {
    watch_shard_t sh[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n;
} watcher_t;

static void note_seen(const chanq_cluster_item_t *it, int64_t our_pid)
{
    int64_t pid, seq, t = wall_ms();
    if (!parse_content(it->content, it->len, &pid, &seq)) {
        log_line("# seen a foreign message at %u/%" PRId64 "\n", it->shard, it->offset);
        return;
    }
    log_line("seen %u %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n", it->shard, it->offset,
             pid, seq, t);
    if (pid != our_pid)
        return;
    pthread_mutex_lock(&recs.mu);
    rec_t *r = rec_at(seq);
    if (r)
        r->seen = true;
    pthread_mutex_unlock(&recs.mu);
}

static void watch_once(watch_shard_t *ws, int64_t our_pid)
{
    chanq_cluster_batch_t b = {0};
    int rc;
    do {
        rc = chanq_cluster_consume(ws->k, 1000, &b);
        for (size_t i = 0; i < b.n; i++)
            note_seen(&b.items[i], our_pid);
        size_t got = b.n;
        chanq_cluster_batch_clear(&b);
        if (got == 0)
            break;
    } while (rc == 0);
    int now = rc == 0 ? 1 : 0;
    if (now != ws->readable)
        log_line("readable %u %d %" PRId64 " %s\n", ws->shard, now, wall_ms(), cq_errname(rc));
    ws->readable = now;
}

static int64_t g_pid; /* our producer_id, for the watcher */

/* Polls every shard each 30 ms. Every 500 ms a tick (keepalives) lets the client learn which
 * server is master now: without it a consumer keeps reading from a server whose database
 * answers errors, since only connection failures move it to the shard's next server. */
static void *watch_thread(void *arg)
{
    watcher_t *w = arg;
    int64_t last_tick = wall_ms();
    while (!stop_watching) {
        for (size_t i = 0; i < w->n; i++)
            watch_once(&w->sh[i], g_pid);
        if (wall_ms() - last_tick >= 500) {
            for (size_t i = 0; i < w->n; i++)
                chanq_cluster_tick(w->sh[i].c);
            last_tick = wall_ms();
        }
        sleep_ms(30);
    }
    return NULL;
}

static int watcher_open(const opts_t *o, const servers_t *srv, watcher_t *w)
{
    uint32_t shards[CHANQ_CLUSTER_SERVERS_MAX];
    size_t ns = shard_list(srv, shards);
    chanq_cluster_opts_t co = {.policy = CHANQ_CLUSTER_DROP, .reconnect_ms = 300};
    for (size_t i = 0; i < ns; i++) {
        watch_shard_t *ws = &w->sh[w->n++];
        ws->shard = shards[i];
        ws->readable = -1;
        ws->c = open_cluster(o, srv, shards[i], CQ_MQ_CONSUMER, &co, NULL);
        ws->k = ws->c ? chanq_cluster_consumer_new(ws->c, o->topic, false) : NULL;
        if (!ws->k)
            return -ENOMEM;
    }
    return 0;
}

static void watcher_close(watcher_t *w)
{
    for (size_t i = 0; i < w->n; i++) {
        chanq_cluster_consumer_free(w->sh[i].k);
        chanq_cluster_free(w->sh[i].c);
    }
}

/* Acked seqs the watcher has not seen yet (0..nseq). */
static size_t unseen_count(int64_t nseq, bool print)
{
    size_t n = 0;
    pthread_mutex_lock(&recs.mu);
    for (int64_t s = 0; s < nseq && (size_t)s < recs.n; s++)
        if (recs.v[s].acked && !recs.v[s].seen && n++ < LIST_SHOWN && print)
            log_line("# unseen %" PRId64 " (acked at %u/%" PRId64 ")\n", s, recs.v[s].shard,
                     recs.v[s].offset);
    pthread_mutex_unlock(&recs.mu);
    return n;
}

static void on_stop(int sig)
{
    (void)sig;
    stop_producing = 1;
}

static int do_run(const opts_t *o, const servers_t *srv)
{
    g_pid = o->producer_id;
    watcher_t w = {.n = 0};
    producer_t p = {o, NULL, NULL};
    chanq_cluster_opts_t co = {.policy = o->cache ? CHANQ_CLUSTER_CACHE : CHANQ_CLUSTER_DROP,
                               .producer_id = o->producer_id,
                               .on_cached = on_cached,
                               .cached_ud = &p};
    pthread_t th;
    int rc = watcher_open(o, srv, &w);
    p.c = rc == 0 ? open_cluster(o, srv, CHANQ_CLUSTER_SHARD_UNKNOWN, CQ_MQ_PRODUCER, &co, &p.w)
                  : NULL;
    if (!p.c || pthread_create(&th, NULL, watch_thread, &w) != 0) {
        fprintf(stderr, "fault_driver: run: cannot start\n");
        chanq_cluster_free(p.c);
        watcher_close(&w);
        return 1;
    }
    log_line("# run: producer_id %" PRId64 " topic %s rate %d/s servers %zu start %" PRId64 "\n",
             o->producer_id, o->topic, o->rate, srv->n, wall_ms());
    int64_t nseq = produce_loop(&p);
    log_line("# producer: stopped after %" PRId64 " produce(s) at %" PRId64 "\n", nseq, wall_ms());
    flush_cache(&p);
    int64_t end = wall_ms() + o->drain_ms;
    while (unseen_count(nseq, false) > 0 && wall_ms() < end)
        sleep_ms(50);
    stop_watching = 1;
    pthread_join(th, NULL);
    size_t unseen = unseen_count(nseq, true);
    log_line("# run: done at %" PRId64 "; %zu acked seq(s) unseen by the watcher\n", wall_ms(),
             unseen);
    chanq_cluster_free(p.c);
    watcher_close(&w);
    return 0;
}

/* ---- verify ------------------------------------------------------------------------------ */

/* What the log says, besides the per-seq records. */
typedef struct logsum {
    int64_t pid, nacked, nseen_lines;
    int64_t first_err_after, first_ack_after_err; /* -1: none (relative to --fault-ms) */
    int64_t shard_ack_after, shard_unread_at, shard_read_again;
    size_t fenced_bad;
} logsum_t;

static void note_ack_line(const opts_t *o, logsum_t *ls, int64_t seq, uint32_t shard, int64_t off,
                          int64_t t, const char *addr)
{
    rec_t *r = rec_at(seq);
    if (!r)
        return;
    if (r->acked)
        printf("FAIL: seq %" PRId64 " acked twice (%u/%" PRId64 " and %u/%" PRId64 ")\n", seq,
               r->shard, r->offset, shard, off);
    *r = (rec_t){.acked = true, .seen = r->seen, .shard = shard, .offset = off, .t_ms = t};
    snprintf(r->addr, sizeof(r->addr), "%s", addr);
    ls->nacked++;
    if (o->fenced && strcmp(addr, o->fenced) == 0 && t > o->after_ms) {
        if (ls->fenced_bad++ < LIST_SHOWN)
            printf("FAIL: seq %" PRId64 " acked by %s at %" PRId64 ", %" PRId64
                   " ms after it may no longer acknowledge\n",
                   seq, addr, t, t - o->after_ms);
    }
    if (o->fault_ms <= 0 || t < o->fault_ms)
        return;
    if (ls->first_err_after >= 0 && ls->first_ack_after_err < 0)
        ls->first_ack_after_err = t;
    if (shard == o->fault_shard && ls->shard_ack_after < 0)
        ls->shard_ack_after = t;
}

static void note_fail_line(const opts_t *o, logsum_t *ls, int64_t t)
{
    if (o->fault_ms > 0 && t >= o->fault_ms && ls->first_err_after < 0)
        ls->first_err_after = t;
}

static void note_readable_line(const opts_t *o, logsum_t *ls, uint32_t shard, int ok, int64_t t)
{
    if (o->fault_ms <= 0 || t < o->fault_ms || shard != o->fault_shard)
        return;
    if (!ok && ls->shard_unread_at < 0)
        ls->shard_unread_at = t;
    if (ok && ls->shard_unread_at >= 0 && ls->shard_read_again < 0)
        ls->shard_read_again = t;
}

static void parse_line(const opts_t *o, logsum_t *ls, const char *l)
{
    long long a, b, c, d, e;
    unsigned sh;
    int ok;
    char addr[CHANQ_CLUSTER_ADDR_MAX + 1];
    if (sscanf(l, "ack %lld %u %lld %lld %127s", &a, &sh, &b, &c, addr) == 5)
        note_ack_line(o, ls, a, sh, b, c, addr);
    else if (sscanf(l, "seen %u %lld %lld %lld %lld", &sh, &a, &b, &c, &d) == 5) {
        ls->nseen_lines++;
        rec_t *r = b == ls->pid ? rec_at(c) : NULL;
        if (r)
            r->seen = true;
    } else if (sscanf(l, "err %lld %lld %*s %lld", &a, &b, &c) == 3 ||
               sscanf(l, "cached %lld %lld", &a, &c) == 2 ||
               sscanf(l, "try %lld %*s %lld %*s %lld", &a, &b, &c) == 3)
        note_fail_line(o, ls, c);
    else if (sscanf(l, "readable %u %d %lld", &sh, &ok, &e) == 3)
        note_readable_line(o, ls, sh, ok, e);
    else if (sscanf(l, "# run: producer_id %lld", &a) == 1)
        ls->pid = a;
}

static int read_log(const opts_t *o, logsum_t *ls)
{
    FILE *f = fopen(o->log, "r");
    if (!f) {
        fprintf(stderr, "fault_driver: %s: %s\n", o->log, strerror(errno));
        return -errno;
    }
    char line[512];
    while (fgets(line, sizeof(line), f))
        parse_line(o, ls, line);
    fclose(f);
    return 0;
}

/* The highest acked offset of shard (0: none). */
static int64_t max_acked(uint32_t shard)
{
    int64_t m = 0;
    for (size_t s = 0; s < recs.n; s++)
        if (recs.v[s].acked && recs.v[s].shard == shard && recs.v[s].offset > m)
            m = recs.v[s].offset;
    return m;
}

typedef struct vcount {
    size_t stored, foreign, dup_in_shard, wrong_place, unacked;
} vcount_t;

/* One stored message of shard: counted, and checked against the record of its seq. */
static void check_item(const logsum_t *ls, const chanq_cluster_item_t *it, uint8_t *in_shard,
                       vcount_t *vc)
{
    int64_t pid, seq;
    vc->stored++;
    if (!parse_content(it->content, it->len, &pid, &seq) || pid != ls->pid) {
        vc->foreign++;
        return;
    }
    rec_t *r = rec_at(seq);
    if (!r)
        return;
    r->found++;
    if (in_shard[seq]++ > 0 && vc->dup_in_shard++ < LIST_SHOWN)
        printf("FAIL: seq %" PRId64 " stored twice in shard %u (again at offset %" PRId64 ")\n",
               seq, it->shard, it->offset);
    if (!r->acked)
        vc->unacked++;
    else if (r->shard == it->shard && r->offset == it->offset)
        r->found_in_shard = 1; /* content matched: the parse above is exact */
    else if (r->shard == it->shard && vc->wrong_place++ < LIST_SHOWN)
        printf("FAIL: seq %" PRId64 " acked at %u/%" PRId64 " but stored at %u/%" PRId64 "\n", seq,
               r->shard, r->offset, it->shard, it->offset);
}

/* Reads shard from offset 0 until it answered empty past its highest acked offset (or 30 s). */
static int read_shard(const opts_t *o, const servers_t *srv, const logsum_t *ls, uint32_t shard,
                      vcount_t *vc)
{
    chanq_cluster_t *c = open_cluster(o, srv, shard, CQ_MQ_CONSUMER, NULL, NULL);
    chanq_cluster_consumer_t *k = c ? chanq_cluster_consumer_new(c, o->topic, false) : NULL;
    uint8_t *in_shard = calloc(recs.n ? recs.n : 1, 1);
    chanq_cluster_batch_t b = {0};
    int64_t want = max_acked(shard), end = wall_ms() + 30000;
    int rc = k && in_shard ? -EAGAIN : -ENOMEM;
    while (rc != 0 && rc != -ENOMEM && wall_ms() < end) {
        int r = chanq_cluster_consume(k, 1000, &b);
        for (size_t i = 0; i < b.n; i++)
            check_item(ls, &b.items[i], in_shard, vc);
        if (r == 0 && b.n == 0 && chanq_cluster_consumer_offset(k, shard) >= want)
            rc = 0;
        else if (r != 0 || b.n == 0)
            sleep_ms(200);
        chanq_cluster_batch_clear(&b);
    }
    printf("# shard %u: read up to offset %" PRId64 " (highest acked %" PRId64 ")%s\n", shard,
           k ? chanq_cluster_consumer_offset(k, shard) : 0, want,
           rc == 0 ? "" : " - INCOMPLETE after 30 s");
    free(in_shard);
    chanq_cluster_consumer_free(k);
    chanq_cluster_free(c);
    return rc;
}

/* Every acked seq stored at its place, and seen by the watcher. Returns the failures. */
static size_t check_acked(size_t *ret_unseen, size_t *ret_cross)
{
    size_t missing = 0, unseen = 0, cross = 0;
    for (size_t s = 0; s < recs.n; s++) {
        const rec_t *r = &recs.v[s];
        cross += r->found > 1;
        if (!r->acked)
            continue;
        if (!r->found_in_shard && missing++ < LIST_SHOWN)
            printf("FAIL: seq %zu acked at %u/%" PRId64 " by %s is not stored there (%u copies "
                   "elsewhere)\n",
                   s, r->shard, r->offset, r->addr, r->found);
        if (!r->seen && unseen++ < LIST_SHOWN)
            printf("FAIL: seq %zu acked at %u/%" PRId64 " was never seen by the watcher\n", s,
                   r->shard, r->offset);
    }
    *ret_unseen = unseen;
    *ret_cross = cross;
    return missing;
}

/* "+N ms" after the fault, or "never". */
static const char *rel(const opts_t *o, int64_t t, char *buf, size_t cap)
{
    if (t < 0)
        return "never";
    snprintf(buf, cap, "+%" PRId64 " ms", t - o->fault_ms);
    return buf;
}

static void print_times(const opts_t *o, const logsum_t *ls)
{
    char a[32], b[32];
    if (o->fault_ms <= 0)
        return;
    if (ls->first_err_after < 0)
        printf("TIME produce: no failure after the fault\n");
    else
        printf("TIME produce: first failure %s, succeeded again %s\n",
               rel(o, ls->first_err_after, a, sizeof(a)),
               rel(o, ls->first_ack_after_err, b, sizeof(b)));
    printf("TIME shard %u: first ack after the fault %s\n", o->fault_shard,
           rel(o, ls->shard_ack_after, a, sizeof(a)));
    if (ls->shard_unread_at < 0)
        printf("TIME reads of shard %u: never failed after the fault\n", o->fault_shard);
    else
        printf("TIME reads of shard %u: failing %s, resumed %s\n", o->fault_shard,
               rel(o, ls->shard_unread_at, a, sizeof(a)),
               rel(o, ls->shard_read_again, b, sizeof(b)));
}

static int do_verify(const opts_t *o, const servers_t *srv)
{
    logsum_t ls = {o->producer_id, 0, 0, -1, -1, -1, -1, -1, 0};
    if (!o->log || read_log(o, &ls) < 0)
        return 2;
    uint32_t shards[CHANQ_CLUSTER_SERVERS_MAX];
    size_t ns = shard_list(srv, shards), incomplete = 0;
    vcount_t vc = {0};
    for (size_t i = 0; i < ns; i++)
        incomplete += read_shard(o, srv, &ls, shards[i], &vc) != 0;
    size_t unseen, cross, missing = check_acked(&unseen, &cross);
    size_t fails = missing + unseen + vc.dup_in_shard + vc.wrong_place + ls.fenced_bad + incomplete;
    printf("VERIFY acked=%" PRId64 " stored=%zu foreign=%zu cross_shard_copies=%zu "
           "stored_unacked=%zu seen_lines=%" PRId64 " missing=%zu dup_in_shard=%zu "
           "wrong_place=%zu unseen=%zu fenced_violations=%zu incomplete_shards=%zu -> %s\n",
           ls.nacked, vc.stored, vc.foreign, cross, vc.unacked, ls.nseen_lines, missing,
           vc.dup_in_shard, vc.wrong_place, unseen, ls.fenced_bad, incomplete,
           fails ? "FAIL" : "OK");
    print_times(o, &ls);
    if (ls.nacked == 0) {
        printf("FAIL: nothing was acknowledged at all\n");
        fails++;
    }
    return fails ? 1 : 0;
}

/* ---- main -------------------------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: fault_driver setup|run|verify (--servers S/H:P,... | --zk HOSTS "
                    "[--zk-root R]) --topic T [options] (see the header of fault_driver.c)\n");
    return 2;
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.zk_root = "/chanq",
                  .rate = 300,
                  .timeout_ms = 1000,
                  .drain_ms = 20000,
                  .producer_id = 4242,
                  .module = 1,
                  .cache = true,
                  .fault_shard = 1};
    if (argc < 2)
        return -1;
    o->mode = argv[1];
    for (int i = 2; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -1;
#define STR(name, field)                                                                           \
    if (strcmp(k, name) == 0) {                                                                    \
        o->field = v;                                                                              \
        continue;                                                                                  \
    }
#define NUM(name, field)                                                                           \
    if (strcmp(k, name) == 0) {                                                                    \
        o->field = strtoll(v, NULL, 10);                                                           \
        continue;                                                                                  \
    }
        STR("--servers", servers)
        STR("--zk", zk)
        STR("--zk-root", zk_root)
        STR("--topic", topic)
        STR("--log", log)
        STR("--fenced", fenced)
        NUM("--rate", rate)
        NUM("--timeout-ms", timeout_ms)
        NUM("--drain-ms", drain_ms)
        NUM("--producer-id", producer_id)
        NUM("--after", after_ms)
        NUM("--fault-ms", fault_ms)
        NUM("--fault-shard", fault_shard)
        NUM("--module", module)
#undef STR
#undef NUM
        if (strcmp(k, "--policy") == 0 && (strcmp(v, "cache") == 0 || strcmp(v, "drop") == 0)) {
            o->cache = strcmp(v, "cache") == 0;
            continue;
        }
        return -1;
    }
    return (o->servers || o->zk) && o->topic && o->rate > 0 && o->producer_id > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    opts_t o;
    servers_t srv = {.n = 0};
    if (parse_args(argc, argv, &o) < 0)
        return usage();
    if (load_servers(&o, &srv) < 0)
        return 2;
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc;
    if (strcmp(o.mode, "setup") == 0)
        rc = do_setup(&o, &srv);
    else if (strcmp(o.mode, "run") == 0)
        rc = do_run(&o, &srv);
    else if (strcmp(o.mode, "verify") == 0)
        rc = do_verify(&o, &srv);
    else
        rc = usage();
    free(recs.v);
    return rc;
}
