/* test_mqfollow.c - the follower of other shards (src/mqsrv/follow.c, cq_mqfollow.h) against a
 * fake server: the frames it sends, decoded with the seed codec, and the answers and pushes fed
 * back, byte for byte as a chanqd would send them. Checks the events it hands on (order, once,
 * prev_offset, epoch), across a reconnection, the reads, the timers and every refusal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_mqfollow.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- what the follower hands on ---------------------------------------------------------- */

typedef struct got {
    char topic[65];
    uint32_t shard;
    uint64_t epoch, offset, prev;
    uint64_t pid, seq;
    char content[64];
} got_t;

static got_t g_ev[64];
static size_t g_nev;
static uint64_t g_rows_tag;
static int g_rows_err, g_rows_calls;
static size_t g_rows_n;
static uint64_t g_rows_first;

static void on_event(void *ud, const cq_mqsrv_event_t *ev)
{
    (void)ud;
    assert_true(g_nev < 64);
    got_t *g = &g_ev[g_nev++];
    snprintf(g->topic, sizeof(g->topic), "%s", ev->topic);
    g->shard = ev->shard;
    g->epoch = ev->epoch;
    g->offset = ev->offset;
    g->prev = ev->prev_offset;
    g->pid = ev->producer_id;
    g->seq = ev->seq;
    snprintf(g->content, sizeof(g->content), "%.*s", (int)ev->len, (const char *)ev->content);
}

static void on_rows(void *ud, uint64_t tag, int err, const cq_mqfollow_row_t *rows, size_t n)
{
    (void)ud;
    g_rows_calls++;
    g_rows_tag = tag;
    g_rows_err = err;
    g_rows_n = n;
    g_rows_first = n ? rows[0].offset : 0;
}

static uint64_t g_off_tag, g_off;
static int g_off_err, g_off_calls;

static void on_offset(void *ud, uint64_t tag, int err, uint64_t offset)
{
    (void)ud;
    g_off_calls++;
    g_off_tag = tag;
    g_off_err = err;
    g_off = offset;
}

static cq_mqfollow_t *follower(uint32_t batch)
{
    g_nev = 0;
    g_rows_calls = 0;
    g_off_calls = 0;
    cq_mqfollow_opts_t o = {.module_id = 7,
                            .token = "sekrit",
                            .batch = batch,
                            .keepalive_ms = 1000,
                            .timeout_ms = 10000,
                            .recheck_ms = 5000,
                            .retry_ms = 1000,
                            .pending_max = 4,
                            .on_event = on_event,
                            .on_rows = on_rows,
                            .on_offset = on_offset};
    cq_mqfollow_t *f = cq_mqfollow_new(&o);
    assert_non_null(f);
    char err[128] = "";
    assert_int_equal(
        cq_mqfollow_add_servers(f, "2/127.0.0.1:1001,2/127.0.0.1:1002", 1, err, sizeof(err)), 0);
    const char *topics[] = {"vip"};
    assert_int_equal(cq_mqfollow_set_topics(f, topics, 1), 0);
    return f;
}

/* ---- the fake server --------------------------------------------------------------------- */

/* The next frame the follower sent on link 0, decoded (the caller frees it). */
static cq_mq_msg_t *sent(cq_mqfollow_t *f)
{
    cq_sbuf_t *out = cq_mqfollow_output(f, 0);
    cq_mq_frame_t fr;
    ssize_t k = cq_mq_parse(out->data, out->len, 0, &fr);
    assert_true(k > 0);
    cq_mq_msg_t *m = NULL;
    char err[256];
    assert_int_equal(cq_mq_decode(&fr, NULL, &m, err, sizeof(err)), 0);
    cq_sbuf_consume(out, (size_t)k);
    return m;
}

static void nothing_sent(cq_mqfollow_t *f)
{
    assert_int_equal(cq_mqfollow_output(f, 0)->len, 0);
}

/* Expects a request of type (on topic, when not NULL) and returns its askid. */
static uint32_t expect_req(cq_mqfollow_t *f, uint8_t type, const char *topic, int64_t offset)
{
    cq_mq_msg_t *m = sent(f);
    assert_int_equal(m->type, type);
    if (topic)
        assert_string_equal(m->topic, topic);
    if (offset >= 0) {
        assert_true(m->has & CQ_MQ_F_OFFSET);
        assert_int_equal(m->offset, offset);
    }
    uint32_t ask = m->askid;
    cq_mq_msg_free(m);
    return ask;
}

/* Feeds the answer/push m (freed here); returns the follower's verdict. */
static int feed(cq_mqfollow_t *f, cq_mq_msg_t *m, uint64_t now)
{
    uint8_t *p = NULL;
    size_t n = 0;
    assert_int_equal(cq_mq_encode(m, &p, &n), 0);
    cq_mq_msg_free(m);
    int r = cq_mqfollow_input(f, 0, p, n, now);
    cq_free(p);
    return r;
}

static cq_mq_msg_t *resp(uint8_t type, uint32_t ask, int err_code)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, 0);
    m->askid = ask;
    m->err_code = (uint32_t)err_code;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_ERR_CODE;
    return m;
}

static cq_mq_msg_t *hello(uint32_t ask, bool master, uint64_t epoch)
{
    cq_mq_msg_t *m = resp(CQ_MQ_RESP_CONNECT, ask, 0);
    m->shard = 2;
    m->master = master;
    m->epoch = (int64_t)epoch;
    m->client_id = 5;
    m->has |= CQ_MQ_F_SHARD | CQ_MQ_F_MASTER | CQ_MQ_F_EPOCH | CQ_MQ_F_CLIENT_ID;
    return m;
}

/* Adds messages offsets from[0..n) (content "m<offset>", key (9, offset)). */
static void add_items(cq_mq_msg_t *m, const int64_t *offs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c[32];
        snprintf(c, sizeof(c), "m%lld", (long long)offs[i]);
        assert_int_equal(cq_mq_msg_add_item(m, offs[i], 1000 + offs[i], c, strlen(c), false), 0);
        m->items[m->nitems - 1].producer_id = 9;
        m->items[m->nitems - 1].seq = offs[i];
    }
    m->has |= CQ_MQ_F_MESSAGES;
}

static cq_mq_msg_t *push(const int64_t *offs, size_t n)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    assert_int_equal(cq_mq_msg_set_topic(m, "vip"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    add_items(m, offs, n);
    return m;
}

static cq_mq_msg_t *consumed(uint32_t ask, const int64_t *offs, size_t n)
{
    cq_mq_msg_t *m = resp(CQ_MQ_RESP_CONSUME, ask, 0);
    assert_int_equal(cq_mq_msg_set_topic(m, "vip"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    add_items(m, offs, n);
    return m;
}

static cq_mq_msg_t *topic_resp(uint8_t type, uint32_t ask, int err_code)
{
    cq_mq_msg_t *m = resp(type, ask, err_code);
    assert_int_equal(cq_mq_msg_set_topic(m, "vip"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    return m;
}

static void expect_ev(size_t i, uint64_t offset, uint64_t prev, uint64_t epoch)
{
    assert_true(i < g_nev);
    assert_string_equal(g_ev[i].topic, "vip");
    assert_int_equal(g_ev[i].shard, 2);
    assert_int_equal(g_ev[i].offset, offset);
    assert_int_equal(g_ev[i].prev, prev);
    assert_int_equal(g_ev[i].epoch, epoch);
    assert_int_equal(g_ev[i].pid, 9);
    assert_int_equal(g_ev[i].seq, offset);
    char c[32];
    snprintf(c, sizeof(c), "m%llu", (unsigned long long)offset);
    assert_string_equal(g_ev[i].content, c);
}

/* Connects link 0 and answers the hello; returns the watch's askid. */
static uint32_t up(cq_mqfollow_t *f, bool master, uint64_t epoch, uint64_t now)
{
    cq_mqfollow_connected(f, 0, now);
    cq_mq_msg_t *m = sent(f);
    assert_int_equal(m->type, CQ_MQ_REQ_CONNECT);
    assert_int_equal(m->module_id, 7);
    assert_string_equal(m->token, "sekrit");
    assert_int_equal(m->client_type, CQ_MQ_CONSUMER);
    uint32_t ask = m->askid;
    cq_mq_msg_free(m);
    assert_int_equal(feed(f, hello(ask, master, epoch), now), 0);
    return expect_req(f, CQ_MQ_REQ_WATCH, "vip", -1);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_servers(void **state)
{
    (void)state;
    cq_mqfollow_opts_t o = {0};
    cq_mqfollow_t *f = cq_mqfollow_new(&o);
    char err[128] = "";
    assert_int_equal(cq_mqfollow_add_servers(f, "1/a:1,2/b:2,,3/c:3,2/d:4", 3, err, sizeof(err)),
                     0);
    assert_int_equal(cq_mqfollow_nlinks(f), 2); /* shard 3 is ours: left out */
    assert_int_equal(cq_mqfollow_shard(f, 0), 1);
    assert_int_equal(cq_mqfollow_shard(f, 1), 2);
    assert_int_equal(cq_mqfollow_nservers(f, 1), 2);
    assert_string_equal(cq_mqfollow_server(f, 1, 1), "d:4");
    size_t idx = 9;
    assert_string_equal(cq_mqfollow_addr(f, 1, &idx), "b:2");
    assert_int_equal(idx, 0);
    assert_true(cq_mqfollow_has_shard(f, 2));
    assert_false(cq_mqfollow_has_shard(f, 3));
    assert_int_equal(cq_mqfollow_add_servers(f, "x:1", 0, err, sizeof(err)), CQ_ECONFIG);
    assert_string_equal(err, "\"x:1\" is not SHARD/HOST:PORT");
    assert_int_equal(cq_mqfollow_add_servers(f, "1/nocolon", 0, err, sizeof(err)), CQ_ECONFIG);
    assert_string_equal(err, "\"1/nocolon\" is not SHARD/HOST:PORT");
    assert_int_equal(cq_mqfollow_add_servers(f,
                                             "5/a:1,5/a:2,5/a:3,5/a:4,5/a:5,5/a:6,5/a:7,5/a:8,"
                                             "5/a:9",
                                             0, err, sizeof(err)),
                     CQ_ECONFIG);
    assert_string_equal(err, "shard 5: more than 8 servers");
    cq_mqfollow_free(f);
    f = cq_mqfollow_new(&o);
    char list[512] = "";
    for (int s = 1; s <= 17; s++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d/h:%d", s > 1 ? "," : "", s,
                 s);
    assert_int_equal(cq_mqfollow_add_servers(f, list, 0, err, sizeof(err)), CQ_ECONFIG);
    assert_string_equal(err, "more than 16 shards");
    cq_mqfollow_free(f);
    cq_mqfollow_free(NULL);
}

/* The first connection: watch, then the live position; pushes that came meanwhile above it
 * are handed on, the ones at or below it not; then every push as it comes. */
static void test_first_follow_starts_live(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    uint32_t w = up(f, true, 7, 100);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 100), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    int64_t early[] = {10, 11, 12};
    assert_int_equal(feed(f, push(early, 3), 101), 0);
    assert_int_equal(g_nev, 0); /* kept: the position is not known yet */
    cq_mq_msg_t *m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 11;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 102), 0);
    assert_int_equal(g_nev, 1);
    expect_ev(0, 12, 11, 7);
    int64_t live[] = {13, 15};
    assert_int_equal(feed(f, push(live, 2), 103), 0);
    assert_int_equal(g_nev, 3);
    expect_ev(1, 13, 12, 7);
    expect_ev(2, 15, 13, 7);
    uint64_t epoch = 0, off = 0;
    assert_true(cq_mqfollow_position(f, 2, "VIP", &epoch, &off));
    assert_int_equal(epoch, 7);
    assert_int_equal(off, 15);
    assert_false(cq_mqfollow_position(f, 1, "vip", &epoch, &off));
    cq_mqfollow_link_stats_t ls;
    cq_mqfollow_link_stats(f, 0, &ls);
    assert_true(ls.up && ls.master);
    assert_int_equal(ls.events, 3);
    cq_mqfollow_free(f);
}

/* After a reconnection (to the shard's next server), the link consumes from the last offset it
 * handed on: what committed meanwhile comes once, in order, and the pushes that overlap the
 * consume are not repeated; a full batch asks for the next. */
static void test_reconnect_consumes_the_gap(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(2);
    uint32_t w = up(f, true, 7, 100);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 100), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    cq_mq_msg_t *m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 20;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 100), 0);
    int64_t a[] = {21};
    assert_int_equal(feed(f, push(a, 1), 101), 0);
    assert_int_equal(g_nev, 1);
    /* the master dies: the next server is the standby, soon master at epoch 8 */
    cq_mqfollow_closed(f, 0, 200);
    size_t idx = 0;
    assert_string_equal(cq_mqfollow_addr(f, 0, &idx), "127.0.0.1:1002");
    nothing_sent(f);
    w = up(f, false, 8, 300);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 300), 0);
    uint32_t c = expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 21);
    int64_t during[] = {24, 25};
    assert_int_equal(feed(f, push(during, 2), 301), 0);
    int64_t b1[] = {22, 23};
    assert_int_equal(feed(f, consumed(c, b1, 2), 302), 0); /* a full batch: more */
    c = expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 23);
    int64_t b2[] = {24};
    assert_int_equal(feed(f, consumed(c, b2, 1), 303), 0); /* short: caught up */
    assert_int_equal(g_nev, 5);
    expect_ev(1, 22, 21, 8);
    expect_ev(2, 23, 22, 8);
    expect_ev(3, 24, 23, 8);
    expect_ev(4, 25, 24, 8); /* the push kept during the consume, once */
    int64_t d[] = {26};
    assert_int_equal(feed(f, push(d, 1), 304), 0);
    expect_ev(5, 26, 25, 8);
    cq_mqfollow_stats_t st;
    cq_mqfollow_stats(f, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 1);
    assert_int_equal(st.events, 6);
    cq_mqfollow_free(f);
}

/* More pushes than pending_max during a consume: they are dropped and the consume goes on
 * from its own offset, so nothing is lost. */
static void test_pending_overflow(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(100);
    uint32_t w = up(f, true, 7, 100);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 100), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    int64_t many[] = {2, 3, 4, 5, 6};
    assert_int_equal(feed(f, push(many, 5), 100), 0); /* over 4: dropped */
    cq_mq_msg_t *m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 1;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 100), 0);
    assert_int_equal(g_nev, 0);
    uint32_t c = expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 1);
    assert_int_equal(feed(f, consumed(c, many, 5), 101), 0);
    assert_int_equal(g_nev, 5);
    expect_ev(0, 2, 1, 7);
    expect_ev(4, 6, 5, 7);
    cq_mqfollow_stats_t st;
    cq_mqfollow_stats(f, &st);
    assert_int_equal(st.pushes_dropped, 1);
    cq_mqfollow_free(f);
}

/* The kept pushes are bounded in bytes too: two of 5 MiB during a consume are dropped, and the
 * consume goes on from its own offset. */
static void test_pending_bytes(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(100);
    uint32_t w = up(f, true, 7, 100);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 100), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    size_t big = 5u << 20;
    char *c = cq_malloc(big);
    memset(c, 'x', big);
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    assert_int_equal(cq_mq_msg_set_topic(m, "vip"), 0);
    m->has |= CQ_MQ_F_TOPIC | CQ_MQ_F_MESSAGES;
    assert_int_equal(cq_mq_msg_add_item(m, 2, 1, c, big, false), 0);
    assert_int_equal(cq_mq_msg_add_item(m, 3, 1, c, big, false), 0);
    cq_free(c);
    assert_int_equal(feed(f, m, 101), 0);
    m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 1;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 102), 0);
    assert_int_equal(g_nev, 0);
    expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 1); /* from its own offset: nothing lost */
    cq_mqfollow_stats_t st;
    cq_mqfollow_stats(f, &st);
    assert_int_equal(st.pushes_dropped, 1);
    cq_mqfollow_free(f);
}

/* A refused watch is asked again after retry_ms, at a tick; keepalives go every keepalive_ms
 * and carry the role: a standby for recheck_ms is left for the shard's next server; silence
 * for timeout_ms closes. */
static void test_timers(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    uint32_t w = up(f, false, 7, 1000);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, CQ_MQ_ERR_UNKNOWN_TOPIC), 1000), 0);
    assert_int_equal(cq_mqfollow_tick(f, 0, 1500), 0);
    nothing_sent(f);
    assert_int_equal(cq_mqfollow_tick(f, 0, 2000), 0);
    expect_req(f, CQ_MQ_REQ_KEEPALIVE, NULL, -1);
    expect_req(f, CQ_MQ_REQ_WATCH, "vip", -1);
    nothing_sent(f);
    /* not master since 1000: at 6000 the link moves on */
    assert_int_equal(cq_mqfollow_tick(f, 0, 5999), 0);
    expect_req(f, CQ_MQ_REQ_KEEPALIVE, NULL, -1);
    assert_int_equal(cq_mqfollow_tick(f, 0, 6000), CQ_ENOTMASTER);
    cq_mqfollow_closed(f, 0, 6000);
    assert_int_equal(cq_mqfollow_tick(f, 0, 7000), 0); /* down: nothing to do */
    /* master at epoch 9 on the next server; a keepalive answer saying epoch 10 moves it */
    w = up(f, true, 9, 7000);
    assert_int_equal(cq_mqfollow_tick(f, 0, 8000), 0);
    uint32_t k = expect_req(f, CQ_MQ_REQ_KEEPALIVE, NULL, -1);
    cq_mq_msg_t *m = resp(CQ_MQ_RESP_KEEPALIVE, k, 0);
    m->master = true;
    m->epoch = 10;
    m->shard = 2;
    m->has |= CQ_MQ_F_MASTER | CQ_MQ_F_EPOCH | CQ_MQ_F_SHARD;
    assert_int_equal(feed(f, m, 8001), 0);
    cq_mqfollow_link_stats_t ls;
    cq_mqfollow_link_stats(f, 0, &ls);
    assert_int_equal(ls.epoch, 10);
    /* a server that does not know the epoch (a standby says 0, or nothing) leaves it */
    assert_int_equal(cq_mqfollow_tick(f, 0, 9001), 0);
    k = expect_req(f, CQ_MQ_REQ_KEEPALIVE, NULL, -1);
    m = resp(CQ_MQ_RESP_KEEPALIVE, k, 0);
    m->master = true;
    m->epoch = 0;
    m->has |= CQ_MQ_F_MASTER | CQ_MQ_F_EPOCH;
    assert_int_equal(feed(f, m, 9002), 0);
    cq_mqfollow_link_stats(f, 0, &ls);
    assert_int_equal(ls.epoch, 10);
    (void)w;
    /* nothing received since 9002 */
    assert_int_equal(cq_mqfollow_tick(f, 0, 19001), 0);
    expect_req(f, CQ_MQ_REQ_KEEPALIVE, NULL, -1);
    assert_int_equal(cq_mqfollow_tick(f, 0, 19002), CQ_ETIMEOUT);
    cq_mqfollow_free(f);
}

/* The hello's refusals: a wrong token, a server of another shard, a frame before the hello's
 * answer, a broken stream. */
static void test_refusals(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    cq_mqfollow_connected(f, 0, 1);
    uint32_t ask = expect_req(f, CQ_MQ_REQ_CONNECT, NULL, -1);
    assert_int_equal(feed(f, resp(CQ_MQ_RESP_CONNECT, ask, CQ_MQ_ERR_UNAUTHENTICATED), 1),
                     CQ_EAUTH);
    cq_mqfollow_closed(f, 0, 1);
    cq_mqfollow_connected(f, 0, 2);
    ask = expect_req(f, CQ_MQ_REQ_CONNECT, NULL, -1);
    cq_mq_msg_t *m = hello(ask, true, 1);
    m->shard = 3;
    assert_int_equal(feed(f, m, 2), CQ_ECONFIG);
    cq_mqfollow_closed(f, 0, 2);
    cq_mqfollow_connected(f, 0, 3);
    expect_req(f, CQ_MQ_REQ_CONNECT, NULL, -1);
    int64_t o[] = {1};
    assert_int_equal(feed(f, push(o, 1), 3), CQ_EHEADER);
    cq_mqfollow_closed(f, 0, 3);
    cq_mqfollow_connected(f, 0, 4);
    expect_req(f, CQ_MQ_REQ_CONNECT, NULL, -1);
    const uint8_t junk[14] = {0, 0, 0, 14, 0, 13, 1, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(cq_mqfollow_input(f, 0, junk, sizeof(junk), 4), CQ_EHEADER);
    assert_int_equal(g_nev, 0);
    cq_mqfollow_free(f);
}

/* Reads: a consume of their own, answered through on_rows; a read the link cannot serve is
 * answered at the next tick, never inside the call. */
static void test_reads(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    cq_mqfollow_read(f, 2, "vip", 5, 10, 77);
    cq_mqfollow_read(f, 4, "vip", 5, 10, 78);
    assert_int_equal(g_rows_calls, 0);
    cq_mqfollow_tick(f, 0, 1);
    assert_int_equal(g_rows_calls, 2);
    assert_int_equal(g_rows_tag, 78);
    assert_int_equal(g_rows_err, -ENOENT);
    uint32_t w = up(f, true, 7, 10);
    cq_mqfollow_read(f, 2, "vip", 5, 10, 79);
    uint32_t c = expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 5);
    int64_t rows[] = {6, 9};
    assert_int_equal(feed(f, consumed(c, rows, 2), 11), 0);
    assert_int_equal(g_rows_calls, 3);
    assert_int_equal(g_rows_tag, 79);
    assert_int_equal(g_rows_err, 0);
    assert_int_equal(g_rows_n, 2);
    assert_int_equal(g_rows_first, 6);
    assert_int_equal(g_nev, 0); /* a read hands nothing on */
    /* an error answer, and a read in flight when the link closes */
    cq_mqfollow_read(f, 2, "vip", 5, 10, 80);
    c = expect_req(f, CQ_MQ_REQ_CONSUME, "vip", 5);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_CONSUME, c, CQ_MQ_ERR_UNKNOWN_TOPIC), 12), 0);
    assert_int_equal(g_rows_err, CQ_ENOTOPIC);
    cq_mqfollow_read(f, 2, "vip", 5, 10, 81);
    cq_mqfollow_closed(f, 0, 13);
    cq_mqfollow_tick(f, 0, 14);
    assert_int_equal(g_rows_tag, 81);
    assert_int_equal(g_rows_err, -ENOTCONN);
    (void)w;
    cq_mqfollow_free(f);
}

/* The next request must be an offset (21) or commit (15) of instance on vip; its askid. */
static uint32_t expect_offset_req(cq_mqfollow_t *f, uint8_t type, const char *instance,
                                  int64_t offset)
{
    cq_mq_msg_t *m = sent(f);
    assert_int_equal(m->type, type);
    assert_string_equal(m->topic, "vip");
    assert_true(m->has & CQ_MQ_F_INSTANCE);
    assert_string_equal(m->instance, instance);
    assert_int_equal((m->has & CQ_MQ_F_OFFSET) != 0, offset >= 0);
    if (offset >= 0)
        assert_int_equal(m->offset, offset);
    uint32_t ask = m->askid;
    cq_mq_msg_free(m);
    return ask;
}

/* Offsets of a consumer instance (the route bindings' positions on a followed shard): a read
 * that was never committed answers -ENOENT, then the committed one; a commit answers the
 * offset written, a refusal its error; none while the link is down, and those in flight fail
 * when it closes. An offset answer for the topic's own follow is not taken for one of these. */
static void test_offsets(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", false, 0, 90);
    cq_mqfollow_tick(f, 0, 1);
    assert_int_equal(g_off_calls, 1);
    assert_int_equal(g_off_tag, 90);
    assert_int_equal(g_off_err, -ENOTCONN);
    uint32_t w = up(f, true, 7, 10);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", false, 0, 91);
    uint32_t a = expect_offset_req(f, CQ_MQ_REQ_OFFSET, "bridge/user_id/u1", -1);
    cq_mq_msg_t *m = topic_resp(CQ_MQ_RESP_OFFSET, a, 0);
    m->offset = 0;
    m->committed = false;
    m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_COMMITTED;
    assert_int_equal(feed(f, m, 11), 0);
    assert_int_equal(g_off_calls, 2);
    assert_int_equal(g_off_tag, 91);
    assert_int_equal(g_off_err, -ENOENT);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", true, 42, 92);
    a = expect_offset_req(f, CQ_MQ_REQ_COMMIT, "bridge/user_id/u1", 42);
    m = topic_resp(CQ_MQ_RESP_COMMIT, a, 0);
    m->offset = 42;
    m->has |= CQ_MQ_F_OFFSET;
    assert_int_equal(feed(f, m, 12), 0);
    assert_int_equal(g_off_tag, 92);
    assert_int_equal(g_off_err, 0);
    assert_int_equal(g_off, 42);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", false, 0, 93);
    a = expect_offset_req(f, CQ_MQ_REQ_OFFSET, "bridge/user_id/u1", -1);
    m = topic_resp(CQ_MQ_RESP_OFFSET, a, 0);
    m->offset = 42;
    m->committed = true;
    m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_COMMITTED;
    assert_int_equal(feed(f, m, 13), 0);
    assert_int_equal(g_off_tag, 93);
    assert_int_equal(g_off_err, 0);
    assert_int_equal(g_off, 42);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", true, 50, 94);
    a = expect_offset_req(f, CQ_MQ_REQ_COMMIT, "bridge/user_id/u1", 50);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_COMMIT, a, CQ_MQ_ERR_NOT_MASTER), 14), 0);
    assert_int_equal(g_off_tag, 94);
    assert_int_equal(g_off_err, CQ_ENOTMASTER);
    assert_int_equal(g_off_calls, 5);
    /* the topic's own follow still gets its offset answer */
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 15), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 3;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 15), 0);
    assert_int_equal(g_off_calls, 5);
    uint64_t epoch = 0, at = 0;
    assert_true(cq_mqfollow_position(f, 2, "vip", &epoch, &at));
    assert_int_equal(at, 3);
    cq_mqfollow_offset(f, 2, "vip", "bridge/user_id/u1", false, 0, 95);
    (void)expect_offset_req(f, CQ_MQ_REQ_OFFSET, "bridge/user_id/u1", -1);
    cq_mqfollow_closed(f, 0, 16);
    cq_mqfollow_tick(f, 0, 17);
    assert_int_equal(g_off_tag, 95);
    assert_int_equal(g_off_err, -ENOTCONN);
    cq_mqfollow_free(f);
}

/* A new topic list keeps the position of the topics kept and starts the new ones at the next
 * tick; an answer for a topic dropped from the list is ignored. */
static void test_set_topics(void **state)
{
    (void)state;
    cq_mqfollow_t *f = follower(0);
    uint32_t w = up(f, true, 7, 10);
    assert_int_equal(feed(f, topic_resp(CQ_MQ_RESP_WATCH, w, 0), 10), 0);
    uint32_t o = expect_req(f, CQ_MQ_REQ_OFFSET, "vip", -1);
    cq_mq_msg_t *m = topic_resp(CQ_MQ_RESP_OFFSET, o, 0);
    m->last_offset = 3;
    m->has |= CQ_MQ_F_LAST_OFFSET;
    assert_int_equal(feed(f, m, 10), 0);
    const char *two[] = {"news", "vip"};
    assert_int_equal(cq_mqfollow_set_topics(f, two, 2), 0);
    nothing_sent(f);
    assert_int_equal(cq_mqfollow_tick(f, 0, 11), 0);
    expect_req(f, CQ_MQ_REQ_WATCH, "news", -1);
    nothing_sent(f);
    uint64_t epoch, off;
    assert_true(cq_mqfollow_position(f, 2, "vip", &epoch, &off));
    assert_int_equal(off, 3);
    int64_t p[] = {4};
    assert_int_equal(feed(f, push(p, 1), 12), 0);
    assert_int_equal(g_nev, 1);
    expect_ev(0, 4, 3, 7);
    const char *none[] = {"news"};
    assert_int_equal(cq_mqfollow_set_topics(f, none, 1), 0);
    assert_int_equal(feed(f, push(p, 1), 13), 0);
    assert_int_equal(g_nev, 1);
    assert_false(cq_mqfollow_position(f, 2, "vip", &epoch, &off));
    cq_mqfollow_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_servers),
        cmocka_unit_test(test_first_follow_starts_live),
        cmocka_unit_test(test_reconnect_consumes_the_gap),
        cmocka_unit_test(test_pending_overflow),
        cmocka_unit_test(test_pending_bytes),
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_reads),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_set_topics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
