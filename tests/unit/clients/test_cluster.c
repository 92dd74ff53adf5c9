/* test_cluster.c - the cluster client (clients/c/chanq_cluster.h) over a fake transport and a
 * manual clock: round-robin start at the lowest server, failover on not_master / timeout /
 * close, retries on the same shard with the same (producer_id, seq), moves that keep the key,
 * weight preference, the cache (bounded, flushed in order) and drop policies, the consumer's
 * merge across shards (reading a slave while the master is down) and the dedupe set. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq_cluster.h"
#include "cq_alloc.h"
#include "cq_mqmgr.h"

/* ---- the fake transport ---------------------------------------------------------------------- */

#define NSRV  8
#define NLOG  64
#define NMSG  64
#define NFAIL 8

typedef struct fmsg {
    int64_t offset, pid, seq;
    char content[32];
} fmsg_t;

typedef struct fshard {
    fmsg_t m[NMSG];
    size_t n;
    int64_t last;
} fshard_t;

typedef struct fsrv {
    bool up;
    chanq_cluster_hello_t hello;
    int always;      /* answer every produce with this (0: serve) */
    int fail[NFAIL]; /* then these, one per produce, before serving */
    size_t nfail, ifail;
    int connects, produces;
    int consume_err; /* answer every consume with this (0: serve) */
    int consumes;
    const char *named; /* with consume_err CQ_EREADMASTER: the master it names (NULL: none) */
} fsrv_t;

typedef struct call {
    uint32_t idx;
    int64_t pid, seq;
    size_t n;
    char content[32];
} call_t;

typedef struct fake {
    fsrv_t s[NSRV];
    fshard_t shard[4];
    call_t log[NLOG];
    size_t nlog;
    uint64_t now;
} fake_t;

static fake_t F;

static uint64_t fake_now(void *ud)
{
    (void)ud;
    return F.now;
}

static int f_connect(void *ud, uint32_t idx, const char *addr, chanq_cluster_hello_t *ret)
{
    (void)ud, (void)addr;
    F.s[idx].connects++;
    if (!F.s[idx].up)
        return -ECONNREFUSED;
    *ret = F.s[idx].hello;
    return 0;
}

static void f_disconnect(void *ud, uint32_t idx)
{
    (void)ud, (void)idx;
}

static int f_keepalive(void *ud, uint32_t idx, chanq_cluster_hello_t *ret)
{
    (void)ud;
    if (!F.s[idx].up)
        return CQ_ECLOSED;
    *ret = F.s[idx].hello;
    return 0;
}

/* Stores idempotently by (pid, seq) per shard, like chanqd. */
static int64_t store(fshard_t *sh, int64_t pid, int64_t seq, const char *content, size_t len)
{
    for (size_t i = 0; i < sh->n; i++)
        if (sh->m[i].pid == pid && sh->m[i].seq == seq)
            return sh->m[i].offset;
    assert_true(sh->n < NMSG);
    fmsg_t *m = &sh->m[sh->n++];
    m->offset = ++sh->last;
    m->pid = pid;
    m->seq = seq;
    snprintf(m->content, sizeof(m->content), "%.*s", (int)len, content);
    return m->offset;
}

static int f_produce(void *ud, uint32_t idx, const chanq_mq_produce_t *req, int64_t *ret_offsets)
{
    (void)ud;
    fsrv_t *s = &F.s[idx];
    assert_true(F.nlog < NLOG);
    call_t *c = &F.log[F.nlog++];
    *c = (call_t){idx, req->producer_id, req->seq, req->n, ""};
    snprintf(c->content, sizeof(c->content), "%.*s", (int)req->msgs[0].len, req->msgs[0].data);
    s->produces++;
    if (!s->up)
        return CQ_ECLOSED;
    if (s->always)
        return s->always;
    if (s->ifail < s->nfail)
        return s->fail[s->ifail++];
    fshard_t *sh = &F.shard[s->hello.shard];
    for (size_t i = 0; i < req->n; i++)
        ret_offsets[i] =
            store(sh, req->producer_id, req->seq + (int64_t)i, req->msgs[i].data, req->msgs[i].len);
    return 0;
}

static int f_consume(void *ud, uint32_t idx, uint32_t shard, const char *topic, int64_t offset,
                     uint32_t max_count, chanq_cluster_batch_t *out)
{
    (void)ud, (void)topic;
    if (!F.s[idx].up)
        return CQ_ECLOSED;
    F.s[idx].consumes++;
    if (F.s[idx].consume_err)
        return F.s[idx].consume_err;
    fshard_t *sh = &F.shard[F.s[idx].hello.shard];
    uint32_t k = 0;
    for (size_t i = 0; i < sh->n && (max_count == 0 || k < max_count); i++) {
        const fmsg_t *m = &sh->m[i];
        if (m->offset <= offset)
            continue;
        assert_int_equal(chanq_cluster_batch_add(out, shard, m->offset, -1, m->pid, m->seq,
                                                 m->content, strlen(m->content)),
                         0);
        out->last_offset = m->offset;
        k++;
    }
    return 0;
}

static int f_last_offset(void *ud, uint32_t idx, const char *topic, int64_t *ret_last)
{
    (void)ud, (void)topic;
    if (!F.s[idx].up)
        return CQ_ECLOSED;
    *ret_last = F.shard[F.s[idx].hello.shard].last;
    return 0;
}

static int f_read_master(void *ud, uint32_t idx, char *addr, size_t cap)
{
    (void)ud;
    if (!F.s[idx].named)
        return -ENOENT;
    snprintf(addr, cap, "%s", F.s[idx].named);
    return 0;
}

static const chanq_cluster_transport_t fake_tr = {NULL,          f_connect, f_disconnect,
                                                  f_keepalive,   f_produce, f_consume,
                                                  f_last_offset, NULL,      f_read_master};

/* A server of the fake: shard, master, weight (-1 unknown). */
static void fake_srv(uint32_t idx, uint32_t shard, int master, int64_t weight)
{
    F.s[idx] = (fsrv_t){.up = true, .hello = {shard, master, weight}};
}

static void fake_reset(void)
{
    memset(&F, 0, sizeof(F));
    F.now = 1000;
}

typedef struct cached_rec {
    int n;
    int64_t seq[16];
    int err[16];
    int64_t offset[16];
    uint32_t shard[16];
} cached_rec_t;

static void on_cached(void *ud, const char *topic, int64_t pid, int64_t first_seq, size_t n,
                      int err, uint32_t shard, const int64_t *offsets)
{
    (void)topic, (void)pid, (void)n;
    cached_rec_t *r = ud;
    assert_true(r->n < 16);
    r->seq[r->n] = first_seq;
    r->err[r->n] = err;
    r->shard[r->n] = shard;
    r->offset[r->n] = offsets ? offsets[0] : -1;
    r->n++;
}

static chanq_cluster_t *cluster(const char *list, const chanq_cluster_opts_t *o)
{
    chanq_cluster_server_t sv[NSRV];
    size_t n = 0;
    assert_int_equal(chanq_cluster_parse_servers(list, sv, NSRV, &n), 0);
    chanq_cluster_opts_t opts = o ? *o : (chanq_cluster_opts_t){0};
    opts.now_ms = fake_now;
    if (!opts.producer_id)
        opts.producer_id = 77;
    chanq_cluster_t *c = chanq_cluster_new(sv, n, &fake_tr, &opts);
    assert_non_null(c);
    return c;
}

static int produce(chanq_cluster_t *c, const char *text, int64_t *ret_off, uint32_t *ret_shard)
{
    chanq_mq_content_t m = {text, strlen(text), false, -1};
    chanq_mq_produce_t r = {"t", &m, 1, 0, -1, -1};
    return chanq_cluster_produce(c, &r, ret_off, ret_shard);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_parse(void **state)
{
    (void)state;
    chanq_cluster_server_t sv[3];
    size_t n = 0;
    assert_int_equal(chanq_cluster_parse_servers("1/a:1,2/[::1]:2,b:3", sv, 3, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(sv[0].shard, 1);
    assert_string_equal(sv[0].addr, "a:1");
    assert_int_equal(sv[1].shard, 2);
    assert_string_equal(sv[1].addr, "[::1]:2");
    assert_int_equal(sv[2].shard, CHANQ_CLUSTER_SHARD_UNKNOWN);
    assert_int_equal(sv[2].index, 2);
    assert_int_equal(chanq_cluster_parse_servers("a:1,b:2,c:3,d:4", sv, 3, &n), CQ_ELIMIT);
    assert_int_equal(chanq_cluster_parse_servers("", sv, 3, &n), -EINVAL);
    assert_int_equal(chanq_cluster_parse_servers("a:1,,b:2", sv, 3, &n), -EINVAL);
    assert_int_equal(chanq_cluster_parse_servers("x/a:1", sv, 3, &n), -EINVAL);
    assert_int_equal(chanq_cluster_parse_servers("noport", sv, 3, &n), -EINVAL);

    char adv[64];
    bool elig = false;
    assert_int_equal(chanq_cluster_parse_member("v1 adv=h:12 db=d:3306 elig=1", adv, 64, &elig), 0);
    assert_string_equal(adv, "h:12");
    assert_true(elig);
    assert_int_equal(chanq_cluster_parse_member("v1 adv=h:12 db=d:1 elig=0", adv, 64, &elig), 0);
    assert_false(elig);
    assert_int_equal(chanq_cluster_parse_member("v2 adv=h:12 db=d:1 elig=0", adv, 64, &elig),
                     -EINVAL);
    assert_int_equal(chanq_cluster_parse_member("v1 db=d:1 elig=0", adv, 64, &elig), -EINVAL);
}

/* Equal weights: every produce goes to the lowest-numbered server; shards learned by hello. */
static void test_round_robin_lowest(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    fake_srv(2, 3, -1, -1);
    chanq_cluster_t *c = cluster("a:1,b:2,c:3", NULL);
    int64_t off = 0;
    uint32_t shard = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(produce(c, "m", &off, &shard), 0);
        assert_int_equal(off, i + 1);
        assert_int_equal(shard, 1);
    }
    assert_int_equal(F.nlog, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(F.log[i].idx, 0);
        assert_int_equal(F.log[i].pid, 77);
        assert_int_equal(F.log[i].seq, (int64_t)i);
    }
    assert_int_equal(chanq_cluster_next_seq(c), 3);
    /* The list now carries the shards the servers announced. */
    assert_int_equal(chanq_cluster_tick(c), 0);
    size_t n = 0;
    const chanq_cluster_server_t *sv = chanq_cluster_servers(c, &n);
    assert_int_equal(n, 3);
    assert_int_equal(sv[1].shard, 2);
    assert_int_equal(sv[2].shard, 3);
    chanq_cluster_free(c);

    /* A shard given in the list stays, whatever the server announces. */
    c = cluster("5/a:1", NULL);
    assert_int_equal(produce(c, "m", &off, &shard), 0);
    assert_int_equal(shard, 5);
    assert_int_equal(chanq_cluster_tick(c), 0);
    sv = chanq_cluster_servers(c, &n);
    assert_int_equal(sv[0].shard, 5);
    chanq_cluster_free(c);
}

/* not_master from every server of shard 1 moves the message to shard 2 with the same key; the
 * belief holds recheck_ms, then the lowest server is tried again. */
static void test_failover_not_master(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 1, -1, -1);
    fake_srv(2, 2, -1, -1);
    F.s[0].always = CQ_ENOTMASTER;
    F.s[1].always = CQ_ENOTMASTER;
    chanq_cluster_opts_t o = {.recheck_ms = 500};
    chanq_cluster_t *c = cluster("1/a:1,1/b:2,2/c:3", &o);
    uint32_t shard = 0;
    int64_t off = 0;
    assert_int_equal(produce(c, "x", &off, &shard), 0);
    assert_int_equal(shard, 2);
    assert_int_equal(F.nlog, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(F.log[i].idx, i);
        assert_int_equal(F.log[i].seq, 0); /* the same key on every try */
    }
    /* Believed not master: straight to shard 2 with the next seq. */
    assert_int_equal(produce(c, "y", &off, &shard), 0);
    assert_int_equal(F.nlog, 4);
    assert_int_equal(F.log[3].idx, 2);
    assert_int_equal(F.log[3].seq, 1);
    /* shard 1 got a master again; after recheck_ms it is the lowest once more. */
    F.s[0].always = 0;
    F.now += 500;
    assert_int_equal(produce(c, "z", &off, &shard), 0);
    assert_int_equal(shard, 1);
    assert_int_equal(F.log[4].idx, 0);
    assert_int_equal(F.log[4].seq, 2);
    chanq_cluster_free(c);
}

/* A closed connection tries the shard's other server (same key); the dead server waits its
 * backoff before being connected again. A timeout moves on likewise. */
static void test_failover_close_timeout(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 1, -1, -1);
    fake_srv(2, 2, -1, -1);
    chanq_cluster_opts_t o = {.reconnect_ms = 1000};
    chanq_cluster_t *c = cluster("1/a:1,1/b:2,2/c:3", &o);
    int64_t off = 0;
    uint32_t shard = 0;
    assert_int_equal(produce(c, "a", &off, &shard), 0); /* connects idx 0 */
    F.s[0].up = false;
    assert_int_equal(produce(c, "b", &off, &shard), 0);
    assert_int_equal(shard, 1);
    assert_int_equal(F.nlog, 3);
    assert_int_equal(F.log[1].idx, 0);
    assert_int_equal(F.log[2].idx, 1);
    assert_int_equal(F.log[1].seq, 1);
    assert_int_equal(F.log[2].seq, 1);
    /* In backoff: not tried, not connected. */
    int connects = F.s[0].connects;
    assert_int_equal(produce(c, "c", &off, &shard), 0);
    assert_int_equal(F.log[3].idx, 1);
    assert_int_equal(F.s[0].connects, connects);
    /* Backoff over and up again: back at the lowest. */
    F.s[0].up = true;
    F.now += 1000;
    assert_int_equal(produce(c, "d", &off, &shard), 0);
    assert_int_equal(F.log[4].idx, 0);
    assert_int_equal(F.s[0].connects, connects + 1);
    /* A timeout on idx 0, then idx 1 (same shard) closes: the message moves to shard 2. */
    F.s[0].fail[F.s[0].nfail++] = CQ_ETIMEOUT;
    F.s[1].up = false;
    assert_int_equal(produce(c, "e", &off, &shard), 0);
    assert_int_equal(shard, 2);
    size_t k = F.nlog;
    assert_int_equal(F.log[k - 1].idx, 2);
    assert_int_equal(F.log[k - 1].seq, 4);
    assert_int_equal(F.log[k - 2].seq, 4);
    chanq_cluster_free(c);
}

/* busy / storage retry the same shard with the same key (an idempotent store answers the
 * original offset); after shard_tries the message moves, still with the same key. */
static void test_retry_same_shard(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    chanq_cluster_opts_t o = {.shard_tries = 3};
    chanq_cluster_t *c = cluster("1/a:1,2/b:2", &o);
    F.s[0].fail[F.s[0].nfail++] = CQ_EBUSY;
    F.s[0].fail[F.s[0].nfail++] = CQ_ESTORE;
    int64_t off = 0;
    uint32_t shard = 0;
    assert_int_equal(produce(c, "a", &off, &shard), 0);
    assert_int_equal(shard, 1);
    assert_int_equal(off, 1);
    assert_int_equal(F.nlog, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(F.log[i].idx, 0);
        assert_int_equal(F.log[i].seq, 0);
    }
    /* Three storage answers: the message moves to shard 2 with seq 1. */
    for (int i = 0; i < 3; i++)
        F.s[0].fail[F.s[0].nfail++] = CQ_ESTORE;
    assert_int_equal(produce(c, "b", &off, &shard), 0);
    assert_int_equal(shard, 2);
    assert_int_equal(F.nlog, 7);
    assert_int_equal(F.log[6].idx, 1);
    assert_int_equal(F.log[6].pid, 77);
    assert_int_equal(F.log[6].seq, 1);
    for (size_t i = 3; i < 6; i++)
        assert_int_equal(F.log[i].seq, 1);
    chanq_cluster_free(c);
}

/* Final errors are not retried anywhere. */
static void test_final_error(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    F.s[0].always = CQ_EACL;
    chanq_cluster_t *c = cluster("a:1,b:2", NULL);
    assert_int_equal(produce(c, "a", NULL, NULL), CQ_EACL);
    assert_int_equal(F.nlog, 1);
    assert_int_equal(produce(c, "bad", NULL, NULL), CQ_EACL);
    chanq_mq_content_t m = {"x", 1, false, -1};
    chanq_mq_produce_t r = {"bad-topic", &m, 1, 0, -1, -1};
    assert_int_equal(chanq_cluster_produce(c, &r, NULL, NULL), CQ_EBADTOPIC);
    chanq_cluster_free(c);
}

/* Larger weight wins; weight 0 (master not sent) means not master. */
static void test_weight(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, 50);
    fake_srv(1, 2, -1, 200);
    fake_srv(2, 3, -1, 200);
    fake_srv(3, 4, -1, 0);
    chanq_cluster_t *c = cluster("a:1,b:2,c:3,d:4", NULL);
    assert_int_equal(chanq_cluster_tick(c), 0); /* learns the weights */
    uint32_t shard = 0;
    assert_int_equal(produce(c, "a", NULL, &shard), 0);
    assert_int_equal(shard, 2);
    assert_int_equal(F.log[0].idx, 1);
    /* Weights change: 50 beats 10; weight 0 (idx 3) stays a slave. */
    F.s[1].hello.weight = 10;
    F.s[2].hello.weight = 10;
    F.s[3].hello.weight = 0;
    assert_int_equal(chanq_cluster_tick(c), 0);
    assert_int_equal(produce(c, "b", NULL, &shard), 0);
    assert_int_equal(shard, 1); /* 50 > 10 */
    /* master=0 from the hello: not a candidate even with a large weight. */
    F.s[0].hello = (chanq_cluster_hello_t){1, 0, 1000};
    assert_int_equal(chanq_cluster_tick(c), 0);
    assert_int_equal(produce(c, "c", NULL, &shard), 0);
    assert_int_equal(shard, 2);
    size_t produced_on_3 = (size_t)F.s[3].produces;
    assert_int_equal(produced_on_3, 0);
    chanq_cluster_free(c);
}

/* Cache: bounded by messages and bytes, flushed in order (by tick and by the next produce). */
static void test_cache(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    F.s[0].up = F.s[1].up = false;
    cached_rec_t rec = {0};
    chanq_cluster_opts_t o = {.policy = CHANQ_CLUSTER_CACHE,
                              .cache_max_msgs = 3,
                              .cache_max_bytes = 100,
                              .reconnect_ms = 1000,
                              .on_cached = on_cached,
                              .cached_ud = &rec};
    chanq_cluster_t *c = cluster("a:1,b:2", &o);
    assert_int_equal(produce(c, "m0", NULL, NULL), CHANQ_CLUSTER_CACHED);
    assert_int_equal(produce(c, "m1", NULL, NULL), CHANQ_CLUSTER_CACHED);
    assert_int_equal(produce(c, "m2", NULL, NULL), CHANQ_CLUSTER_CACHED);
    assert_int_equal(produce(c, "m3", NULL, NULL), CQ_ELIMIT);
    size_t bytes = 0;
    assert_int_equal(chanq_cluster_cached(c, &bytes), 3);
    assert_int_equal(bytes, 6);
    /* Servers still in backoff: a tick sends nothing. */
    F.s[1].up = true;
    size_t before = F.nlog;
    assert_int_equal(chanq_cluster_tick(c), 3);
    assert_int_equal(F.nlog, before);
    F.now += 1000;
    assert_int_equal(chanq_cluster_tick(c), 0);
    assert_int_equal(rec.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rec.err[i], 0);
        assert_int_equal(rec.seq[i], i);
        assert_int_equal(rec.offset[i], i + 1);
        assert_int_equal(rec.shard[i], 2);
    }
    assert_string_equal(F.shard[2].m[0].content, "m0");
    assert_string_equal(F.shard[2].m[1].content, "m1");
    assert_string_equal(F.shard[2].m[2].content, "m2");
    /* m3 was refused (seq 3 spent, a gap); the next one goes straight through. */
    int64_t off = 0;
    assert_int_equal(produce(c, "m4", &off, NULL), 0);
    assert_int_equal(off, 4);
    assert_int_equal(F.shard[2].m[3].seq, 4);

    /* Byte bound, and a new produce queues behind the cache while it cannot flush. */
    F.s[1].up = false;
    assert_int_equal(produce(c, "0123456789", NULL, NULL), CHANQ_CLUSTER_CACHED);
    chanq_mq_content_t big = {"x", 95, false, -1};
    char buf[96];
    memset(buf, 'x', sizeof(buf));
    big.data = buf;
    chanq_mq_produce_t r = {"t", &big, 1, 0, -1, -1};
    assert_int_equal(chanq_cluster_produce(c, &r, NULL, NULL), CQ_ELIMIT);
    F.s[1].up = true;
    F.now += 1000;
    assert_int_equal(produce(c, "after", &off, NULL), 0); /* the cache first, then this */
    assert_int_equal(chanq_cluster_cached(c, NULL), 0);
    assert_string_equal(F.shard[2].m[4].content, "0123456789");
    assert_string_equal(F.shard[2].m[5].content, "after");
    chanq_cluster_free(c);
}

/* Drop: -ECONNREFUSED when nothing answered, CQ_ENOTMASTER when a server said so. */
static void test_drop(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    F.s[0].up = F.s[1].up = false;
    chanq_cluster_t *c = cluster("a:1,b:2", NULL);
    assert_int_equal(produce(c, "m", NULL, NULL), -ECONNREFUSED);
    assert_int_equal(chanq_cluster_cached(c, NULL), 0);
    chanq_cluster_free(c);

    fake_reset();
    fake_srv(0, 1, -1, -1);
    fake_srv(1, 2, -1, -1);
    F.s[0].always = F.s[1].always = CQ_ENOTMASTER;
    c = cluster("a:1,b:2", NULL);
    assert_int_equal(produce(c, "m", NULL, NULL), CQ_ENOTMASTER);
    assert_int_equal(F.nlog, 2);
    chanq_cluster_free(c);

    /* A keepalive weight of 0 (master not sent) marks a slave: not tried while other servers
     * are down, until the belief expires. */
    fake_reset();
    fake_srv(0, 1, -1, 0);
    fake_srv(1, 2, -1, -1);
    F.s[1].up = false;
    c = cluster("a:1,b:2", NULL);
    assert_int_equal(chanq_cluster_tick(c), 0);
    assert_int_equal(produce(c, "m", NULL, NULL), -ECONNREFUSED);
    assert_int_equal(F.s[0].produces, 0);
    chanq_cluster_free(c);
}

/* The consumer reads every shard, from a slave while the master is down, and the dedupe set
 * drops the cross-shard duplicate of (77, 2). */
static void test_consume_merge_dedupe(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, 1, -1);
    fake_srv(1, 1, 0, -1);
    fake_srv(2, 2, 1, -1);
    store(&F.shard[1], 77, 0, "s1a", 3);
    store(&F.shard[1], 77, 1, "s1b", 3);
    store(&F.shard[1], 77, 2, "dup", 3);
    store(&F.shard[2], 77, 2, "dup", 3);
    store(&F.shard[2], 77, 3, "s2b", 3);
    F.s[0].up = false;
    chanq_cluster_t *c = cluster("1/a:1,1/b:2,2/c:3", NULL);
    chanq_cluster_consumer_t *k = chanq_cluster_consumer_new(c, "t", false);
    chanq_cluster_dedupe_t *d = chanq_cluster_dedupe_new(4);
    chanq_cluster_batch_t b = {0};
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 5);
    const char *want[] = {"s1a", "s1b", "dup", "s2b"};
    size_t kept = 0;
    for (size_t i = 0; i < b.n; i++) {
        if (chanq_cluster_dedupe_seen(d, b.items[i].producer_id, b.items[i].seq))
            continue;
        assert_true(kept < 4);
        assert_string_equal(b.items[i].content, want[kept]);
        kept++;
    }
    assert_int_equal(kept, 4);
    assert_int_equal(b.items[0].shard, 1);
    assert_int_equal(b.items[3].shard, 2);
    assert_int_equal(b.items[3].offset, 1);
    assert_int_equal(chanq_cluster_consumer_offset(k, 1), 3);
    assert_int_equal(chanq_cluster_consumer_offset(k, 2), 2);
    chanq_cluster_batch_clear(&b);
    /* Nothing new; then one new message on shard 2 only. */
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 0);
    store(&F.shard[2], 77, 4, "new", 3);
    assert_int_equal(chanq_cluster_consume(k, 1, &b), 0);
    assert_int_equal(b.n, 1);
    assert_string_equal(b.items[0].content, "new");
    chanq_cluster_batch_clear(&b);
    /* from_end: starts at each shard's last offset. */
    chanq_cluster_consumer_t *k2 = chanq_cluster_consumer_new(c, "t", true);
    assert_int_equal(chanq_cluster_consume(k2, 0, &b), 0);
    assert_int_equal(b.n, 0);
    store(&F.shard[1], 77, 5, "late", 4);
    assert_int_equal(chanq_cluster_consume(k2, 0, &b), 0);
    assert_int_equal(b.n, 1);
    assert_string_equal(b.items[0].content, "late");
    chanq_cluster_batch_clear(&b);
    /* No server of any shard: the error. */
    F.s[1].up = F.s[2].up = false;
    assert_int_equal(chanq_cluster_consume(k2, 0, &b), CQ_ECLOSED);
    chanq_cluster_consumer_free(k2);
    chanq_cluster_consumer_free(k);
    chanq_cluster_dedupe_free(d);
    chanq_cluster_free(c);
}

/* A master whose database is gone answers consume with storage (or busy): the consumer reads
 * the shard from its other server in the same call, and a final error stops at the first. */
/* A standby with --slave-reads off answers read_on_master naming its master: the consumer reads
 * there (the master joins the list with the standby's shard) and reads it first from then on. A
 * master that refuses too, or is down, ends the shard's read for that call: each server is
 * asked once. A standby that names none passes the read to the shard's next server. */
static void test_consume_read_master(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, 0, -1); /* the standby, the only server listed */
    fake_srv(1, 1, 1, -1); /* its master, index 1 once appended */
    F.s[0].consume_err = CQ_EREADMASTER;
    F.s[0].named = "m:9";
    store(&F.shard[1], 5, 0, "a", 1);
    store(&F.shard[1], 5, 1, "b", 1);
    chanq_cluster_t *c = cluster("1/s:1", NULL);
    chanq_cluster_consumer_t *k = chanq_cluster_consumer_new(c, "t", false);
    chanq_cluster_batch_t b = {0};
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 2);
    assert_string_equal(b.items[0].content, "a");
    assert_int_equal(b.items[1].shard, 1);
    assert_int_equal(chanq_cluster_consumer_offset(k, 1), 2);
    size_t n;
    const chanq_cluster_server_t *v = chanq_cluster_servers(c, &n);
    assert_int_equal(n, 2);
    assert_string_equal(v[1].addr, "m:9");
    assert_int_equal(v[1].shard, 1);
    assert_int_equal(F.s[0].consumes, 1);
    assert_int_equal(F.s[1].consumes, 1);
    chanq_cluster_batch_clear(&b);
    store(&F.shard[1], 5, 2, "c", 1);
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0); /* the master first now */
    assert_int_equal(b.n, 1);
    assert_string_equal(b.items[0].content, "c");
    assert_int_equal(F.s[0].consumes, 1);
    assert_int_equal(F.s[1].consumes, 2);
    chanq_cluster_batch_clear(&b);
    /* the master down: the standby is asked, names it, it is down: no loop */
    F.s[1].up = false;
    F.now += 5000;
    assert_int_equal(chanq_cluster_consume(k, 0, &b), CQ_ECLOSED);
    assert_int_equal(F.s[0].consumes, 2);
    assert_int_equal(b.n, 0);
    /* two servers naming each other: each asked once */
    F.s[1].up = true;
    F.s[1].consume_err = CQ_EREADMASTER;
    F.s[1].named = "s:1";
    F.now += 5000;
    assert_int_equal(chanq_cluster_consume(k, 0, &b), CQ_EREADMASTER);
    assert_int_equal(F.s[0].consumes, 3);
    assert_int_equal(F.s[1].consumes, 3);
    chanq_cluster_consumer_free(k);
    chanq_cluster_free(c);
    /* the address is err_msg's last master=HOST:PORT */
    char a[16];
    assert_int_equal(chanq_mq_read_master("consume: read on master=10.0.0.1:12110", a, 16), 0);
    assert_string_equal(a, "10.0.0.1:12110");
    assert_int_equal(chanq_mq_read_master("x master=a:1 master=[::1]:5", a, 16), 0);
    assert_string_equal(a, "[::1]:5");
    assert_int_equal(chanq_mq_read_master("not master now", a, 16), -EINVAL);
    assert_int_equal(chanq_mq_read_master("master=", a, 16), -EINVAL);
    assert_int_equal(chanq_mq_read_master("master=10.0.0.100:12110", a, 16), -EINVAL);
    assert_int_equal(chanq_mq_read_master(NULL, a, 16), -EINVAL);
    /* a standby that names no master: the shard's next server serves */
    fake_reset();
    fake_srv(0, 1, 0, -1);
    fake_srv(1, 1, 0, -1);
    F.s[0].consume_err = CQ_EREADMASTER;
    store(&F.shard[1], 5, 0, "a", 1);
    c = cluster("1/s:1,1/t:2", NULL);
    k = chanq_cluster_consumer_new(c, "t", false);
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 1);
    assert_int_equal(F.s[1].consumes, 1);
    chanq_cluster_batch_clear(&b);
    chanq_cluster_consumer_free(k);
    chanq_cluster_free(c);
}

static void test_consume_store_error(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, 1, -1);
    fake_srv(1, 1, 0, -1);
    store(&F.shard[1], 5, 0, "a", 1);
    store(&F.shard[1], 5, 1, "b", 1);
    F.s[0].consume_err = CQ_ESTORE;
    chanq_cluster_t *c = cluster("1/a:1,1/b:2", NULL);
    chanq_cluster_consumer_t *k = chanq_cluster_consumer_new(c, "t", false);
    chanq_cluster_batch_t b = {0};
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 2);
    assert_string_equal(b.items[1].content, "b");
    assert_int_equal(chanq_cluster_consumer_offset(k, 1), 2);
    chanq_cluster_batch_clear(&b);
    F.s[0].consume_err = CQ_EBUSY;
    store(&F.shard[1], 5, 2, "c", 1);
    assert_int_equal(chanq_cluster_consume(k, 0, &b), 0);
    assert_int_equal(b.n, 1);
    assert_string_equal(b.items[0].content, "c");
    chanq_cluster_batch_clear(&b);
    /* unknown_topic is the same answer everywhere: no second server is asked. */
    F.s[0].consume_err = CQ_ENOTOPIC;
    F.s[1].consume_err = CQ_EACL;
    assert_int_equal(chanq_cluster_consume(k, 0, &b), CQ_ENOTOPIC);
    chanq_cluster_consumer_free(k);
    chanq_cluster_free(c);
}

static void test_dedupe(void **state)
{
    (void)state;
    chanq_cluster_dedupe_t *d = chanq_cluster_dedupe_new(2);
    assert_false(chanq_cluster_dedupe_seen(d, 0, 5));
    assert_false(chanq_cluster_dedupe_seen(d, 0, 5)); /* no key: never a duplicate */
    assert_false(chanq_cluster_dedupe_seen(d, 1, 10));
    assert_true(chanq_cluster_dedupe_seen(d, 1, 10));
    assert_false(chanq_cluster_dedupe_seen(d, 1, 8)); /* below the high water, in the window */
    assert_true(chanq_cluster_dedupe_seen(d, 1, 8));
    assert_false(chanq_cluster_dedupe_seen(d, 1, 9));
    /* The window slides: seqs that wrap onto old bits are new. */
    int64_t far = 10 + CHANQ_CLUSTER_DEDUPE_WINDOW;
    assert_false(chanq_cluster_dedupe_seen(d, 1, far - 1));
    assert_false(chanq_cluster_dedupe_seen(d, 1, far));
    assert_false(chanq_cluster_dedupe_seen(d, 1, far - 2)); /* bit of far-2-W cleared */
    assert_true(chanq_cluster_dedupe_seen(d, 1, far - 1));
    assert_false(chanq_cluster_dedupe_seen(d, 1, 8)); /* older than the window: counts as new */
    /* LRU: a third producer evicts the least recently used (pid 2, not pid 1). */
    assert_false(chanq_cluster_dedupe_seen(d, 2, 1));
    assert_true(chanq_cluster_dedupe_seen(d, 1, far));
    assert_false(chanq_cluster_dedupe_seen(d, 3, 1));
    assert_true(chanq_cluster_dedupe_seen(d, 1, far));
    assert_false(chanq_cluster_dedupe_seen(d, 2, 1)); /* forgotten */
    chanq_cluster_dedupe_free(d);
}

static void test_lifecycle(void **state)
{
    (void)state;
    fake_reset();
    assert_null(chanq_cluster_new(NULL, 0, &fake_tr, NULL));
    assert_null(chanq_cluster_free(NULL));
    assert_null(chanq_cluster_dedupe_free(NULL));
    assert_null(chanq_cluster_consumer_free(NULL));
    chanq_cluster_batch_clear(NULL);
    chanq_cluster_server_t sv = {0, "a:1", 0};
    chanq_cluster_t *c = chanq_cluster_new(&sv, 1, &fake_tr, NULL);
    assert_true(chanq_cluster_producer_id(c) >= 1);
    assert_true(chanq_cluster_producer_id(c) <= CQ_MQ_MAX_U53);
    chanq_cluster_free(c);
#ifndef CHANQ_HAVE_ZK
    char err[64];
    size_t n;
    assert_int_equal(chanq_cluster_discover_zk("h:1", NULL, 10, &sv, 1, &n, err, sizeof(err)),
                     -ENOTSUP);
#endif
}

/* ---- managers (issue 13) ----------------------------------------------------------------------
 */

/* server_offline (19) counts as not_master: the next server of the shard, then the next shard,
 * with the same key; a keepalive weight 0 from a master (offline) keeps it passed over. */
static void test_failover_offline(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, 1, 100);
    fake_srv(1, 2, 1, 100);
    F.s[0].always = CQ_ESRVOFFLINE;
    chanq_cluster_opts_t o = {.recheck_ms = 500};
    chanq_cluster_t *c = cluster("1/a:1,2/b:2", &o);
    uint32_t shard = 0;
    int64_t off = 0;
    assert_int_equal(produce(c, "x", &off, &shard), 0);
    assert_int_equal(shard, 2);
    assert_int_equal(F.nlog, 2);
    assert_int_equal(F.log[0].idx, 0);
    assert_int_equal(F.log[1].idx, 1);
    assert_int_equal(F.log[1].seq, F.log[0].seq); /* the same key */
    F.s[0].hello.weight = 0;                      /* what an offline master's keepalive says */
    F.now += 600;
    chanq_cluster_tick(c);
    assert_int_equal(produce(c, "y", &off, &shard), 0);
    assert_int_equal(F.nlog, 3);
    assert_int_equal(F.log[2].idx, 1); /* not tried again */
    /* every server offline: the caller sees not_master */
    F.s[1].always = CQ_ESRVOFFLINE;
    F.s[0].hello.weight = 100;
    F.now += 600;
    chanq_cluster_tick(c);
    assert_int_equal(produce(c, "z", &off, &shard), CQ_ENOTMASTER);
    chanq_cluster_free(c);
}

/* The fake manager: what it was asked, what it answers. */
typedef struct fmgr {
    char asked[8][64]; /* "addr module token" */
    int nasked;
    uint32_t err_code[4]; /* per manager index: 0 serves */
    bool down[4];
    bool relay[4]; /* the answer lists relay nodes too */
} fmgr_t;

static int fm_exchange(void *ud, const char *addr, const uint8_t *req, size_t n, uint8_t *resp,
                       size_t cap, size_t *ret_n, int timeout_ms)
{
    fmgr_t *fm = ud;
    (void)timeout_ms;
    int i = addr[1] - '0'; /* "m0:1", "m1:1", ... */
    cq_mq_frame_t f;
    assert_true(cq_mq_parse(req, n, 0, &f) > 0);
    cq_mqmgr_msg_t *m = NULL;
    char err[128];
    assert_int_equal(cq_mqmgr_decode(&f, 0, &m, err, sizeof(err)), 0);
    assert_int_equal(m->kind, CQ_MQMGR_SVRCONFIG);
    assert_true(fm->nasked < 8);
    snprintf(fm->asked[fm->nasked++], sizeof(fm->asked[0]), "%s %u %s", addr, m->module_id,
             m->token);
    cq_mqmgr_msg_t *a = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG_RESP, m->msg_id);
    a->askid = m->askid;
    a->has_askid = true;
    a->module_id = m->module_id;
    a->err_code = fm->err_code[i];
    cq_mqmgr_msg_free(m);
    if (fm->down[i]) {
        cq_mqmgr_msg_free(a);
        return -ECONNREFUSED;
    }
    if (!a->err_code) {
        assert_int_equal(cq_mqmgr_msg_add_server(a, "10.0.0.1", 7001, 1), 0);
        assert_int_equal(cq_mqmgr_msg_add_server(a, "::1", 7002, 2), 0);
    }
    const char *n1[4] = {"10.0.0.3:7100", "10.0.0.3:7180", NULL, "10.0.0.3:7101"};
    const char *n2[4] = {"[::1]:7100", NULL, "relay.example:443", NULL};
    if (!a->err_code && fm->relay[i]) {
        assert_int_equal(cq_mqmgr_msg_add_relay_node(a, 1, "eu", n1), 0);
        assert_int_equal(cq_mqmgr_msg_add_relay_node(a, 2, "eu", n2), 0);
    }
    uint8_t *b;
    size_t bn;
    assert_int_equal(cq_mqmgr_encode(a, &b, &bn), 0);
    cq_mqmgr_msg_free(a);
    assert_true(bn <= cap);
    memcpy(resp, b, bn);
    cq_free(b);
    *ret_n = bn;
    return 0;
}

/* svrconfig: managers in turn until one answers err 0; the list with its shards. */
static void test_svrconfig(void **state)
{
    (void)state;
    fmgr_t fm = {.err_code = {6, 0}, .down = {false, false, true}};
    chanq_cluster_mgr_io_t io = {fm_exchange, &fm};
    chanq_cluster_server_t sv[4];
    size_t n = 0;
    char err[256] = "";
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, "m0:1,m1:1", 7, "tok", 1000, sv, 4, &n, err, sizeof(err)),
        0);
    assert_int_equal(fm.nasked, 2);
    assert_string_equal(fm.asked[0], "m0:1 7 tok");
    assert_string_equal(fm.asked[1], "m1:1 7 tok");
    assert_int_equal(n, 2);
    assert_string_equal(sv[0].addr, "10.0.0.1:7001");
    assert_int_equal(sv[0].shard, 1);
    assert_string_equal(sv[1].addr, "[::1]:7002");
    assert_int_equal(sv[1].shard, 2);
    /* every manager fails: the last one's error, named */
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, "m0:1,m2:1", 7, "tok", 1000, sv, 4, &n, err, sizeof(err)),
        -ECONNREFUSED);
    assert_non_null(strstr(err, "manager m2:1"));
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, "m0:1", 7, "bad", 1000, sv, 4, &n, err, sizeof(err)),
        CQ_EAUTH);
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, "m1:1", 7, "tok", 1000, sv, 1, &n, err, sizeof(err)),
        CQ_ELIMIT);
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, ",", 7, "tok", 1000, sv, 4, &n, err, sizeof(err)), -EINVAL);
}

/* The relay nodes of a svrconfig answer; the servers of the same answer are read as before. */
static void test_relay_nodes(void **state)
{
    (void)state;
    fmgr_t fm = {.err_code = {6, 0, 0}, .relay = {true, true, false}};
    chanq_cluster_mgr_io_t io = {fm_exchange, &fm};
    chanq_cluster_server_t sv[4];
    chanq_cluster_relay_node_t rn[4];
    size_t n = 0;
    char err[256] = "";
    assert_int_equal(
        chanq_cluster_svrconfig_io(&io, "m1:1", 7, "tok", 1000, sv, 4, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_string_equal(sv[1].addr, "[::1]:7002");
    assert_int_equal(
        chanq_cluster_relay_nodes_io(&io, "m0:1,m1:1", 7, "tok", 1000, rn, 4, &n, err, sizeof(err)),
        0);
    assert_int_equal(n, 2);
    assert_int_equal(rn[0].node, 1);
    assert_string_equal(rn[0].cluster, "eu");
    assert_string_equal(rn[0].tcp, "10.0.0.3:7100");
    assert_string_equal(rn[0].ws, "10.0.0.3:7180");
    assert_string_equal(rn[0].wss, "");
    assert_string_equal(rn[0].kcp, "10.0.0.3:7101");
    assert_int_equal(rn[1].node, 2);
    assert_string_equal(rn[1].tcp, "[::1]:7100");
    assert_string_equal(rn[1].ws, "");
    assert_string_equal(rn[1].wss, "relay.example:443");
    /* a manager that lists none: none */
    n = 9;
    assert_int_equal(
        chanq_cluster_relay_nodes_io(&io, "m2:1", 7, "tok", 1000, rn, 4, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    assert_int_equal(
        chanq_cluster_relay_nodes_io(&io, "m1:1", 7, "tok", 1000, rn, 1, &n, err, sizeof(err)),
        CQ_ELIMIT);
    assert_string_equal(err, "manager m1:1: 2 relay nodes, more than 1");
    assert_int_equal(
        chanq_cluster_relay_nodes_io(&io, "m0:1", 7, "tok", 1000, rn, 4, &n, err, sizeof(err)),
        CQ_EAUTH);
}

static int refreshes;
static chanq_cluster_server_t next_list[2];
static size_t next_n;

static int fake_refresh(void *ud, chanq_cluster_server_t *ret, size_t cap, size_t *ret_n)
{
    (void)ud, (void)cap;
    refreshes++;
    memcpy(ret, next_list, next_n * sizeof(*ret));
    *ret_n = next_n;
    return 0;
}

/* The list's source runs every refresh_ms from tick; a new list replaces the old one (the same
 * address at the same position keeps its connection), an empty one is ignored. */
static void test_refresh(void **state)
{
    (void)state;
    fake_reset();
    fake_srv(0, 1, 1, 100);
    fake_srv(1, 2, 1, 100);
    chanq_cluster_opts_t o = {.refresh = fake_refresh, .refresh_ms = 1000};
    chanq_cluster_t *c = cluster("1/a:1,2/b:2", &o);
    next_n = 0;
    refreshes = 0;
    chanq_cluster_tick(c); /* connects both, refresh: empty, kept */
    assert_int_equal(refreshes, 1);
    size_t n;
    const chanq_cluster_server_t *v = chanq_cluster_servers(c, &n);
    assert_int_equal(n, 2);
    next_list[0] = (chanq_cluster_server_t){.shard = 1, .addr = "a:1"};
    next_n = 1; /* b:2 went offline */
    F.now += 999;
    chanq_cluster_tick(c);
    assert_int_equal(refreshes, 1);
    F.now += 1;
    chanq_cluster_tick(c);
    assert_int_equal(refreshes, 2);
    v = chanq_cluster_servers(c, &n);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].addr, "a:1");
    int connects = F.s[0].connects;
    uint32_t shard = 0;
    int64_t off = 0;
    assert_int_equal(produce(c, "x", &off, &shard), 0);
    assert_int_equal(shard, 1);
    assert_int_equal(F.s[0].connects, connects); /* kept its connection */
    chanq_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_round_robin_lowest),
        cmocka_unit_test(test_failover_not_master),
        cmocka_unit_test(test_failover_close_timeout),
        cmocka_unit_test(test_retry_same_shard),
        cmocka_unit_test(test_final_error),
        cmocka_unit_test(test_weight),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_drop),
        cmocka_unit_test(test_consume_merge_dedupe),
        cmocka_unit_test(test_consume_read_master),
        cmocka_unit_test(test_consume_store_error),
        cmocka_unit_test(test_dedupe),
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_failover_offline),
        cmocka_unit_test(test_svrconfig),
        cmocka_unit_test(test_relay_nodes),
        cmocka_unit_test(test_refresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
