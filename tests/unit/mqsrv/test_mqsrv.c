/* test_mqsrv.c - the seed-protocol engine (src/mqsrv), sans I/O: request frames go in, the exact
 * answer frames (type, msg id, JSON body) come out. A fake store port captures submitted
 * requests, so each case checks what reached the store (op, topic, consumer, clamped counts)
 * and completes it by hand, as the writer thread would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_sendq.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_mgrlink.h"
#include "cq_mqhttp.h"
#include "cq_mqmgr.h"
#include "cq_mqperm.h"
#include "cq_mqport.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fakes ---------------------------------------------------------------------------------- */

#define MAX_PENDING 2048
#define OUT_CAP     (1u << 20)

/* The edge side of one connection: everything it wrote, and closes. */
typedef struct fconn {
    cq_mqsrv_conn_t *c;
    cq_mqhttp_conn_t *h;
    uint8_t *out;
    size_t len, at; /* bytes received, bytes already checked */
    int closed, flushes, aborted;
    bool stalled; /* the peer reads nothing: flush writes nothing */
    bool gone;    /* the edge closed the socket: the engine must not call its ops */
    int abort_reason;
    char abort_why[128];
} fconn_t;

/* The store port: submitted requests wait here until the test completes them. */
typedef struct fport {
    cq_writer_req_t *pending[MAX_PENDING];
    size_t npending;
    int fail; /* submit answers this code (not taken) when non-zero */
} fport_t;

static fport_t fp;
static cq_mqsrv_t *eng;

static int fake_submit(void *ud, cq_writer_req_t *req)
{
    (void)ud;
    if (fp.fail)
        return fp.fail;
    assert_true(fp.npending < MAX_PENDING);
    fp.pending[fp.npending++] = req;
    return 0;
}

static cq_sendq_t *fconn_sendq(fconn_t *f)
{
    return f->c ? cq_mqsrv_conn_sendq(f->c) : cq_mqhttp_conn_sendq(f->h);
}

/* Transport op: writes everything queued, as a socket that takes it all would. */
static void fake_flush(void *ud)
{
    fconn_t *f = ud;
    assert_false(f->gone);
    f->flushes++;
    if (!f->stalled)
        test_sendq_drain(fconn_sendq(f), f->out, &f->len, OUT_CAP);
}

/* Transport op: what is queued is written, then the socket would close. */
static void fake_close(void *ud)
{
    fconn_t *f = ud;
    assert_false(f->gone);
    f->closed++;
    fake_flush(ud);
}

static void fake_abort(void *ud, int reason, const char *why)
{
    fconn_t *f = ud;
    assert_false(f->gone);
    f->aborted++;
    f->abort_reason = reason;
    snprintf(f->abort_why, sizeof(f->abort_why), "%s", why);
}

/* The peer address every new connection reports: loopback unless a test says otherwise (writes
 * from other addresses need a permissions file). */
static const char *fake_peer_addr = "127.0.0.1:4000";

static int fake_peer(void *ud, char *buf, size_t len)
{
    assert_false(((fconn_t *)ud)->gone);
    snprintf(buf, len, "%s", fake_peer_addr);
    return 0;
}

/* What fake_control answers for CQ_MQPORT_WRITER_STATS (reset by eng_start). */
static const cq_writer_stats_t wstats_dfl = {.transactions = 7, .messages = 70};
static cq_writer_stats_t wstats;

/* Answers CQ_MQPORT_WRITER_STATS with wstats; nothing else. */
static int fake_control(void *ud, int op, void *arg)
{
    (void)ud;
    if (op != CQ_MQPORT_WRITER_STATS)
        return -ENOTSUP;
    *(cq_writer_stats_t *)arg = wstats;
    return 0;
}

/* The fence of the cluster (issue 11): what the coordination runtime would say. */
static bool fence_open;
static bool fake_may_write(void *ud)
{
    assert_ptr_equal(ud, &fence_open);
    return fence_open;
}

/* What the engine told opts.on_topic: "name online retention;" per call (reset by eng_start). */
static char topic_log[1024];
static void fake_on_topic(void *ud, const char *name, bool online, uint32_t retention_days)
{
    assert_ptr_equal(ud, topic_log);
    size_t n = strlen(topic_log);
    snprintf(topic_log + n, sizeof(topic_log) - n, "%s %d %u;", name, online, retention_days);
}

static const cq_mqport_ops_t fport_ops = {fake_submit, fake_control};
static const cq_mqsrv_conn_ops_t fops = {{"fake", fake_flush, fake_close, fake_peer}, fake_abort};

/* ---- helpers -------------------------------------------------------------------------------- */

static const char perms_json[] =
    "{\"1\": {\"token\": \"s1\", \"admin\": true},"
    " \"2\": {\"token\": \"s2\", \"consume\": [\"orders\"]},"
    " \"3\": {\"token\": \"s3\", \"produce\": [\"orders\", \"Paused\"]}}";

static cq_mqperm_t *perms;
static struct cq_authlim *next_authlim; /* the failure budget of the next eng_start */
static size_t sq_soft, sq_hard;         /* send queue limits of the next eng_start (0: defaults) */
static uint32_t sq_soft_s;
static bool next_fence, next_slave; /* the next eng_start: fenced (fake_may_write), a slave */
static bool next_reads_off;         /* the next eng_start: --slave-reads off */
static uint32_t next_shard;

/* An engine with the topics orders (online, 2 messages so far), Paused (offline) and keep
 * (retention 0), all allowed (with_perms false) or under perms_json. */
/* The bridge's sink (opts.sink_*): it takes "orders" and logs "topic:offset/prev:content;". */
static bool next_sink;
static char sink_log[512];

static bool fake_sink_wants(void *ud, const char *topic)
{
    (void)ud;
    return strcmp(topic, "orders") == 0;
}

static void fake_sink_event(void *ud, const cq_mqsrv_event_t *ev)
{
    (void)ud;
    size_t n = strlen(sink_log);
    snprintf(sink_log + n, sizeof(sink_log) - n, "%s:%llu/%llu:%.*s;", ev->topic,
             (unsigned long long)ev->offset, (unsigned long long)ev->prev_offset, (int)ev->len,
             (const char *)ev->content);
}

static void eng_start(bool with_perms, uint32_t max_batch)
{
    memset(&fp, 0, sizeof(fp));
    char err[128];
    perms = NULL;
    if (with_perms)
        assert_int_equal(cq_mqperm_load(perms_json, strlen(perms_json), &perms, err, sizeof(err)),
                         0);
    cq_store_topic_t t[3] = {{.name = "Paused", .online = false, .retention_days = 7},
                             {.name = "keep", .online = true, .retention_days = 0},
                             {.name = "orders", .online = true, .retention_days = 30}};
    uint64_t hw[3] = {0, 0, 2};
    cq_mqsrv_opts_t o = {.limits = {.max_batch = max_batch},
                         .perms = perms,
                         .topics = t,
                         .high_water = hw,
                         .ntopics = 3,
                         .port = {&fport_ops, NULL},
                         .sendq_soft_limit = sq_soft,
                         .sendq_hard_limit = sq_hard,
                         .sendq_soft_seconds = sq_soft_s,
                         .authlim = next_authlim,
                         .may_write = next_fence ? fake_may_write : NULL,
                         .fence_ud = &fence_open,
                         .shard = next_shard,
                         .slave = next_slave,
                         .slave_reads_off = next_reads_off,
                         .on_topic = fake_on_topic,
                         .topic_ud = topic_log,
                         .sink_wants = next_sink ? fake_sink_wants : NULL,
                         .sink_event = next_sink ? fake_sink_event : NULL};
    next_sink = false;
    sink_log[0] = '\0';
    topic_log[0] = '\0';
    wstats = wstats_dfl;
    fence_open = true;
    next_fence = next_slave = next_reads_off = false; /* taken: a failed test leaks none */
    next_shard = 0;
    eng = cq_mqsrv_new(&o);
    assert_non_null(eng);
    cq_mqsrv_set_now(eng, 1700000000000);
}

static void fconn_free(fconn_t *f);

static void eng_stop(void)
{
    assert_int_equal(fp.npending, 0);
    eng = cq_mqsrv_free(eng);
    perms = cq_mqperm_free(perms);
    sq_soft = sq_hard = 0;
    sq_soft_s = 0;
}

static fconn_t *fconn_new(void)
{
    fconn_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->out = malloc(OUT_CAP);
    assert_non_null(f->out);
    f->c = cq_mqsrv_conn_new(eng, &fops, f);
    assert_non_null(f->c);
    return f;
}

static fconn_t *fhttp_new(void)
{
    fconn_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->out = malloc(OUT_CAP);
    assert_non_null(f->out);
    f->h = cq_mqhttp_conn_new(eng, &fops, f);
    assert_non_null(f->h);
    return f;
}

/* The edge closed the socket: the engine must never call ops again. f stays, so a call would
 * be seen. */
static void fconn_gone(fconn_t *f)
{
    if (f->c)
        cq_mqsrv_conn_close(f->c);
    if (f->h)
        cq_mqhttp_conn_close(f->h);
    f->c = NULL;
    f->h = NULL;
    f->gone = true;
    assert_int_equal(f->at, f->len); /* every answer was checked */
}

static void fconn_free(fconn_t *f)
{
    if (!f->gone)
        fconn_gone(f);
    free(f->out);
    free(f);
}

static void feed_raw(fconn_t *f, const void *p, size_t n)
{
    if (f->c)
        cq_mqsrv_conn_input(f->c, p, n);
    else
        cq_mqhttp_conn_input(f->h, p, n);
    cq_mqsrv_flush(eng); /* the edge writes once per loop iteration */
}

/* Encodes m (taken) and feeds it. */
static void feed(fconn_t *f, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    cq_mq_msg_free(m);
    feed_raw(f, b, n);
    cq_free(b);
}

/* A frame of the given type and body, as a client would send it. */
static void feed_json(fconn_t *f, uint8_t type, uint16_t msg_id, const char *body)
{
    size_t n = strlen(body);
    uint8_t *b = malloc(CQ_MQ_HDR_LEN + n);
    assert_non_null(b);
    cq_mq_header_write(b, (uint32_t)(CQ_MQ_HDR_LEN + n), type, msg_id);
    memcpy(b + CQ_MQ_HDR_LEN, body, n);
    feed_raw(f, b, CQ_MQ_HDR_LEN + n);
    free(b);
}

/* Checks the next frame sent to f: "<type> <msg id> <body>". */
static void expect(fconn_t *f, const char *want)
{
    cq_mq_frame_t fr;
    ssize_t r = cq_mq_parse(f->out + f->at, f->len - f->at, 0, &fr);
    if (r <= 0)
        fprintf(stderr, "# no frame where one was expected: %s\n", want);
    assert_true(r > 0);
    char got[OUT_CAP / 4];
    snprintf(got, sizeof(got), "%u %u %.*s", fr.type, fr.msg_id, (int)fr.body_len,
             (const char *)fr.body);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "# want %s\n#  got %s\n", want, got);
    assert_string_equal(got, want);
    f->at += (size_t)r;
}

/* Checks the next HTTP response sent to f (status line through body). */
static void expect_http(fconn_t *f, const char *want)
{
    size_t n = strlen(want);
    if (f->len - f->at < n || memcmp(f->out + f->at, want, n) != 0)
        fprintf(stderr, "# want %s\n#  got %.*s\n", want, (int)(f->len - f->at),
                (const char *)f->out + f->at);
    assert_true(f->len - f->at >= n);
    assert_memory_equal(f->out + f->at, want, n);
    f->at += n;
}

static void expect_nothing(fconn_t *f)
{
    if (f->at != f->len)
        fprintf(stderr, "# unexpected: %.*s\n", (int)(f->len - f->at),
                (const char *)f->out + f->at + CQ_MQ_HDR_LEN);
    assert_int_equal(f->at, f->len);
}

static cq_mq_msg_t *req(uint8_t type, uint16_t msg_id, uint32_t askid, const char *topic)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, msg_id);
    assert_non_null(m);
    m->askid = askid;
    m->has |= CQ_MQ_F_ASKID;
    if (topic)
        assert_int_equal(cq_mq_msg_set_topic(m, topic), 0);
    return m;
}

static void connect_as(fconn_t *f, uint32_t module, const char *token, const char *want)
{
    cq_mq_msg_t *m = req(CQ_MQ_REQ_CONNECT, 1, 1, NULL);
    m->module_id = module;
    m->client_type = CQ_MQ_PRODUCER;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, token), 0);
    m->has |= CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    feed(f, m);
    expect(f, want);
}

static cq_mq_msg_t *produce_req(uint16_t msg_id, const char *topic, size_t n, int64_t pid)
{
    cq_mq_msg_t *m = req(CQ_MQ_REQ_PRODUCE, msg_id, msg_id, topic);
    for (size_t i = 0; i < n; i++) {
        char c[24];
        snprintf(c, sizeof(c), "m%zu", i);
        assert_int_equal(cq_mq_msg_add_item(m, 0, -1, c, strlen(c), false), 0);
    }
    m->has |= n == 1 ? CQ_MQ_F_CONTENT : CQ_MQ_F_BATCH;
    if (pid) {
        m->producer_id = pid;
        m->seq = 10;
        m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
    }
    return m;
}

/* Takes the oldest submitted request; checks its op and topic. */
static cq_writer_req_t *take(cq_writer_op_t op, const char *topic)
{
    assert_true(fp.npending > 0);
    cq_writer_req_t *r = fp.pending[0];
    memmove(fp.pending, fp.pending + 1, --fp.npending * sizeof(fp.pending[0]));
    assert_int_equal(r->op, op);
    if (topic)
        assert_string_equal(r->topic, topic);
    return r;
}

/* Completes r (taken) as the writer would, then lets the engine send what it queued. */
static void done(cq_writer_req_t *r, int err)
{
    r->err = err;
    if (err)
        snprintf(r->errmsg, sizeof(r->errmsg), "disk on fire");
    cq_mqsrv_complete(NULL, r);
    cq_mqsrv_drain(eng);
    cq_mqsrv_flush(eng);
}

static void done_produce(cq_writer_req_t *r, uint64_t first)
{
    for (size_t i = 0; i < r->n_msgs; i++)
        r->offsets[i] = first + 2 * i;
    done(r, 0);
}

/* A READ answered with n records "r<offset>" from offset first on. */
static void done_read(cq_writer_req_t *r, uint64_t first, size_t n)
{
    r->recs = cq_calloc(n ? n : 1, sizeof(*r->recs));
    assert_non_null(r->recs);
    for (size_t i = 0; i < n; i++) {
        char *c = cq_malloc(24);
        assert_non_null(c);
        snprintf(c, 24, "r%llu", (unsigned long long)(first + i));
        r->recs[i] = (cq_store_rec_t){
            .offset = first + i, .create_ms = 1000 + (int64_t)i, .content = c, .len = strlen(c)};
    }
    r->n_recs = n;
    done(r, 0);
}

/* ---- sessions ------------------------------------------------------------------------------- */

static void test_session(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *f = fconn_new();
    feed(f, req(CQ_MQ_REQ_KEEPALIVE, 3, 9, NULL)); /* answered before connect too */
    expect(f, "4 3 {\"askid\":9,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    feed(f, req(CQ_MQ_REQ_TOPICS, 4, 10, NULL));
    expect(f, "24 4 {\"askid\":10,\"err_code\":6,\"err_msg\":\"topics: connect first\"}");
    connect_as(f, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    cq_mq_msg_t *m = req(CQ_MQ_REQ_KEEPALIVE, 5, 11, NULL);
    m->client_id = 2;
    m->has |= CQ_MQ_F_CLIENT_ID;
    feed(f, m); /* keepalive does not check client_id */
    expect(f, "4 5 {\"askid\":11,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    m = req(CQ_MQ_REQ_ADD_TOPIC, 6, 12, "orders");
    m->client_id = 2;
    m->has |= CQ_MQ_F_CLIENT_ID;
    feed(f, m);
    expect(f, "6 6 {\"askid\":12,\"topic\":\"orders\",\"err_code\":5,\"err_msg\":"
              "\"add_topic: field \\\"client_id\\\": 2 is not this connection's id\"}");
    assert_int_equal(f->closed, 0);
    /* a wrong token: answered, then closed */
    fconn_t *g = fconn_new();
    connect_as(g, 3, "nope",
               "2 1 {\"askid\":1,\"client_type\":1,\"err_code\":6,\"err_msg\":"
               "\"connect: unknown module_id or wrong token\",\"shard\":0,\"master\":true}");
    assert_int_equal(g->closed, 1);
    fconn_free(g);
    fconn_free(f);
    eng_stop();
}

static void test_bad_frames(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *f = fconn_new();
    feed_json(f, CQ_MQ_REQ_PRODUCE, 7, "{bad");
    expect(f, "20 7 {\"err_code\":3,\"err_msg\":\"produce: invalid JSON at line 1 column 4: "
              "string or '}' expected near 'bad'\"}");
    feed_json(f, 17, 8, "{\"askid\":5}");
    expect(f, "20 8 {\"askid\":5,\"err_code\":4,\"err_msg\":\"unknown message type 17\"}");
    feed_json(f, CQ_MQ_RESP_PRODUCE, 9, "{\"askid\":5,\"err_code\":0}");
    expect(f, "20 9 {\"askid\":5,\"err_code\":4,\"err_msg\":\"message type 12 is not a request\"}");
    feed_json(f, CQ_MQ_REQ_PRODUCE, 10, "{\"askid\":6,\"topic\":\"a-b\",\"content\":\"x\"}");
    expect(f, "12 10 {\"askid\":6,\"err_code\":13,\"err_msg\":\"produce: field \\\"topic\\\": must "
              "be a string matching [A-Za-z0-9_]{1,64}\"}");
    assert_int_equal(f->closed, 0);
    /* a bad header: one error frame with msg id 0, then the close; later bytes are ignored */
    uint8_t h[CQ_MQ_HDR_LEN + 2];
    cq_mq_header_write(h, sizeof(h), CQ_MQ_REQ_KEEPALIVE, 1);
    memcpy(h + CQ_MQ_HDR_LEN, "{}", 2);
    h[6] = 2;
    feed_raw(f, h, sizeof(h));
    expect(f, "20 0 {\"err_code\":1,\"err_msg\":\"bad frame header (header length, version "
              "or serialization)\"}");
    assert_int_equal(f->closed, 1);
    assert_int_equal(cq_mqsrv_conn_input(f->c, h, sizeof(h)), CQ_ECLOSED);
    expect_nothing(f);
    fconn_free(f);
    /* frames split at every byte give the same answers */
    for (size_t cut = 1; cut <= 2 * CQ_MQ_HDR_LEN + 23; cut++) {
        f = fconn_new();
        uint8_t two[2 * CQ_MQ_HDR_LEN + 23];
        const char b1[] = "{\"askid\":1}", b2[] = "{\"askid\":22}";
        cq_mq_header_write(two, CQ_MQ_HDR_LEN + 11, CQ_MQ_REQ_KEEPALIVE, 1);
        memcpy(two + CQ_MQ_HDR_LEN, b1, 11);
        cq_mq_header_write(two + CQ_MQ_HDR_LEN + 11, CQ_MQ_HDR_LEN + 12, CQ_MQ_REQ_KEEPALIVE, 2);
        memcpy(two + 2 * CQ_MQ_HDR_LEN + 11, b2, 12);
        size_t n = 2 * CQ_MQ_HDR_LEN + 23;
        feed_raw(f, two, cut < n ? cut : n);
        if (cut < n)
            feed_raw(f, two + cut, n - cut);
        expect(f, "4 1 {\"askid\":1,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
        expect(f, "4 2 {\"askid\":22,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
        fconn_free(f);
    }
    eng_stop();
}

/* ---- topics and rights ---------------------------------------------------------------------- */

static void test_add_topic(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *adm = fconn_new(), *con = fconn_new(), *pro = fconn_new();
    connect_as(adm, 1, "s1",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(con, 2, "s2",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(pro, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":3,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(con, req(CQ_MQ_REQ_ADD_TOPIC, 2, 2, "ORDERS")); /* exists (any case): registered */
    expect(con, "6 2 "
                "{\"askid\":2,\"topic\":\"ORDERS\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
                "total\":0}");
    feed(con, req(CQ_MQ_REQ_ADD_TOPIC, 3, 3, "keep"));
    expect(con, "6 3 {\"askid\":3,\"topic\":\"keep\",\"err_code\":7,\"err_msg\":\"add_topic: "
                "module 2 has no right on topic \\\"keep\\\"\"}");
    feed(pro, req(CQ_MQ_REQ_ADD_TOPIC, 4, 4, "fresh"));
    expect(pro, "6 4 {\"askid\":4,\"topic\":\"fresh\",\"err_code\":7,\"err_msg\":\"add_topic: "
                "module 3 may not create topics\"}");
    assert_int_equal(fp.npending, 0);
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 5, 5, "fresh"));
    expect_nothing(adm); /* answered once the store created it */
    cq_writer_req_t *r = take(CQ_WRITER_TOPIC_CREATE, "fresh");
    assert_int_equal(r->retention_days, 30);
    assert_int_equal(r->now_ms, 1700000000000);
    done(r, 0);
    expect(adm, "6 5 "
                "{\"askid\":5,\"topic\":\"fresh\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
                "total\":0}");
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 6, 6, "again"));
    done(take(CQ_WRITER_TOPIC_CREATE, "again"), CQ_EEXIST); /* created by someone else */
    expect(adm, "6 6 "
                "{\"askid\":6,\"topic\":\"again\",\"err_code\":0,\"topic_nums\":2,\"topic_message_"
                "total\":0}");
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 7, 7, "broken"));
    done(take(CQ_WRITER_TOPIC_CREATE, "broken"), CQ_ESTORE);
    expect(adm, "6 7 {\"askid\":7,\"topic\":\"broken\",\"err_code\":12,\"err_msg\":\"add_topic: "
                "storage error: disk on fire\"}");
    /* the cache knows the created topics: sorted by name, as this module may see them */
    feed(adm, req(CQ_MQ_REQ_TOPICS, 8, 8, NULL));
    expect(adm, "24 8 {\"askid\":8,\"err_code\":0,\"topic_nums\":5,\"topics\":["
                "{\"topic\":\"again\",\"online\":true,\"retention_days\":30,\"last_offset\":0},"
                "{\"topic\":\"fresh\",\"online\":true,\"retention_days\":30,\"last_offset\":0},"
                "{\"topic\":\"keep\",\"online\":true,\"retention_days\":0,\"last_offset\":0},"
                "{\"topic\":\"orders\",\"online\":true,\"retention_days\":30,\"last_offset\":2},"
                "{\"topic\":\"Paused\",\"online\":false,\"retention_days\":7,\"last_offset\":0}]}");
    feed(pro, req(CQ_MQ_REQ_TOPICS, 9, 9, NULL));
    expect(pro, "24 9 {\"askid\":9,\"err_code\":0,\"topic_nums\":2,\"topics\":["
                "{\"topic\":\"orders\",\"online\":true,\"retention_days\":30,\"last_offset\":2},"
                "{\"topic\":\"Paused\",\"online\":false,\"retention_days\":7,\"last_offset\":0}]}");
    fconn_free(adm);
    fconn_free(con);
    fconn_free(pro);
    eng_stop();
}

/* ---- produce, consume, offsets -------------------------------------------------------------- */

static void test_produce(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *pro = fconn_new(), *con = fconn_new();
    connect_as(pro, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(con, 2, "s2",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(con, produce_req(2, "orders", 1, 0));
    expect(con, "12 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":7,\"err_msg\":\"produce: "
                "module 2 may not produce to topic \\\"orders\\\"\",\"shard\":0}");
    feed(pro, produce_req(3, "Paused", 1, 0));
    expect(pro, "12 3 {\"askid\":3,\"topic\":\"Paused\",\"err_code\":9,\"err_msg\":\"produce: "
                "topic \\\"Paused\\\" is offline\",\"shard\":0}");
    feed(pro, produce_req(4, "paused", 1, 0));
    expect(pro, "12 4 {\"askid\":4,\"topic\":\"paused\",\"err_code\":9,\"err_msg\":\"produce: "
                "topic \\\"paused\\\" is offline\",\"shard\":0}");
    feed(pro, produce_req(5, "Orders", 3, 77)); /* the store's spelling reaches the store */
    expect_nothing(pro);
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    assert_int_equal(r->n_msgs, 3);
    assert_int_equal(r->msgs[2].len, 2);
    assert_memory_equal(r->msgs[2].content, "m2", 2);
    assert_int_equal(r->msgs[2].producer_id, 77);
    assert_int_equal(r->msgs[2].seq, 12);
    done_produce(r, 10);
    expect(pro, "12 5 "
                "{\"askid\":5,\"topic\":\"Orders\",\"err_code\":0,\"total\":3,\"offsets\":[10,12,"
                "14],\"shard\":0}");
    feed(pro, produce_req(6, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    assert_int_equal(r->msgs[0].producer_id, 0);
    done(r, CQ_ESTORE);
    expect(pro, "12 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":12,\"err_msg\":\"produce: "
                "storage error: disk on fire; nothing was acknowledged: retry with the same "
                "producer_id and seq\",\"shard\":0}");
    /* each failure says once what was done and what to do */
    feed(pro, produce_req(6, "orders", 1, 0));
    done(take(CQ_WRITER_PRODUCE, "orders"), CQ_ESEQORDER);
    expect(pro, "12 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":16,\"err_msg\":\"produce: "
                "seq below the producer's last stored seq, and not a retry: disk on fire; "
                "nothing was stored: send these messages again with seqs above the producer's "
                "last stored seq\",\"shard\":0}");
    feed(pro, produce_req(6, "orders", 1, 0));
    done(take(CQ_WRITER_PRODUCE, "orders"), CQ_ESEQCONFLICT);
    expect(pro, "12 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":15,\"err_msg\":\"produce: "
                "producer_id and seq already stored with other content: disk on fire; nothing was "
                "acknowledged\",\"shard\":0}");
    feed(pro, produce_req(6, "orders", 1, 0));
    done(take(CQ_WRITER_PRODUCE, "orders"), -ENOMEM);
    expect(pro, "12 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":14,\"err_msg\":\"produce: "
                "Cannot allocate memory; nothing was acknowledged: retry with the same "
                "producer_id and seq\",\"shard\":0}");
    /* the store refuses at submit */
    fp.fail = CQ_EBUSY;
    feed(pro, produce_req(7, "orders", 1, 0));
    expect(pro, "12 7 {\"askid\":7,\"topic\":\"orders\",\"err_code\":11,\"err_msg\":\"produce: "
                "busy: pending writes over the limit, retry later\",\"shard\":0}");
    fp.fail = CQ_ELIMIT;
    feed(pro, produce_req(8, "orders", 1, 0));
    expect(pro, "12 8 {\"askid\":8,\"topic\":\"orders\",\"err_code\":11,\"err_msg\":\"produce: "
                "busy: pending writes over the limit, retry later\",\"shard\":0}");
    fp.fail = CQ_ECLOSED;
    feed(pro, produce_req(9, "orders", 1, 0));
    expect(pro, "12 9 {\"askid\":9,\"topic\":\"orders\",\"err_code\":14,\"err_msg\":\"produce: "
                "connection is closing\",\"shard\":0}");
    fp.fail = 0;
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.produced, 3);
    assert_int_equal(st.busy, 2); /* EBUSY and ELIMIT, both answered busy */
    /* the per-connection in-flight limit */
    for (size_t i = 0; i < CQ_MQSRV_CONN_INFLIGHT; i++)
        feed(pro, produce_req(10, "orders", 1, 0));
    feed(pro, produce_req(11, "orders", 1, 0));
    expect(pro, "12 11 {\"askid\":11,\"topic\":\"orders\",\"err_code\":11,\"err_msg\":\"produce: "
                "too many requests in flight on this connection\",\"shard\":0}");
    for (size_t i = 0; i < CQ_MQSRV_CONN_INFLIGHT; i++) {
        done_produce(take(CQ_WRITER_PRODUCE, "orders"), 100 + i);
        char want[128];
        snprintf(want, sizeof(want),
                 "12 10 {\"askid\":10,\"topic\":\"orders\",\"err_code\":0,\"total\":%zu,"
                 "\"offsets\":[%zu],\"shard\":0}",
                 4 + i, 100 + i);
        expect(pro, want);
    }
    fconn_free(pro);
    fconn_free(con);
    eng_stop();
}

static cq_mq_msg_t *consume_req(uint16_t id, const char *topic, int64_t offset, int64_t max)
{
    cq_mq_msg_t *m = req(CQ_MQ_REQ_CONSUME, id, id, topic);
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    if (max >= 0) {
        m->max_count = (uint32_t)max;
        m->has |= CQ_MQ_F_MAX_COUNT;
    }
    return m;
}

static void test_consume(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *con = fconn_new(), *pro = fconn_new();
    connect_as(con, 2, "s2",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(pro, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(pro, consume_req(2, "orders", 0, -1));
    expect(pro, "14 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":7,\"err_msg\":\"consume: "
                "module 3 may not consume topic \\\"orders\\\"\",\"shard\":0}");
    feed(con, consume_req(3, "nosuch", 0, -1));
    expect(con, "14 3 {\"askid\":3,\"topic\":\"nosuch\",\"err_code\":7,\"err_msg\":\"consume: "
                "module 2 may not consume topic \\\"nosuch\\\"\",\"shard\":0}");
    feed(con, consume_req(4, "orders", 5, -1)); /* default count */
    cq_writer_req_t *r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, CQ_MQSRV_CONSUME_DFL);
    assert_int_equal(r->from_offset, 5);
    done_read(r, 6, 2);
    expect(
        con,
        "14 4 "
        "{\"askid\":4,\"topic\":\"orders\",\"err_code\":0,\"total\":0,\"offset\":7,\"messages\":["
        "{\"offset_id\":6,\"message\":\"r6\",\"time\":1000},"
        "{\"offset_id\":7,\"message\":\"r7\",\"time\":1001}],\"message_count\":2,\"shard\":0}");
    feed(con, consume_req(5, "orders", 9, 5000)); /* capped at max_batch */
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, CQ_MQ_DEFAULT_MAX_BATCH);
    done_read(r, 0, 0);
    expect(con,
           "14 5 "
           "{\"askid\":5,\"topic\":\"orders\",\"err_code\":0,\"total\":0,\"offset\":9,\"messages\":"
           "[],\"message_count\":0,\"shard\":0}");
    feed(con, consume_req(6, "orders", 9, 3));
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, 3);
    r->recs = cq_calloc(1, sizeof(*r->recs));
    r->recs[0] = (cq_store_rec_t){.offset = 11, .content = cq_strndup("\xff", 1), .len = 1};
    r->n_recs = 1;
    done(r, 0);
    expect(con, "14 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":5,\"err_msg\":\"consume: "
                "message 11 is not valid UTF-8 text\",\"shard\":0}");
    feed(con, consume_req(7, "orders", 9, 3));
    done(take(CQ_WRITER_READ, "orders"), CQ_ESTORE);
    expect(con, "14 7 {\"askid\":7,\"topic\":\"orders\",\"err_code\":12,\"err_msg\":\"consume: "
                "storage error: disk on fire\",\"shard\":0}");
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.consumed, 2);
    fconn_free(con);
    fconn_free(pro);
    eng_stop();
    /* a batch limit over the store's read limit */
    eng_start(false, 20000);
    con = fconn_new();
    connect_as(con, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(con, consume_req(2, "orders", 0, 15000));
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, CQ_WRITER_READ_MAX);
    done_read(r, 0, 0);
    expect(con,
           "14 2 "
           "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":0,\"offset\":0,\"messages\":"
           "[],\"message_count\":0,\"shard\":0}");
    fconn_free(con);
    eng_stop();
}

static void test_commit_offset(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *con = fconn_new();
    connect_as(con, 2, "s2",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    cq_mq_msg_t *m = req(CQ_MQ_REQ_COMMIT, 2, 2, "orders");
    m->offset = 2;
    m->has |= CQ_MQ_F_OFFSET;
    feed(con, m);
    cq_writer_req_t *r = take(CQ_WRITER_COMMIT_OFFSET, "orders");
    assert_string_equal(r->consumer, "m2");
    assert_int_equal(r->offset, 2);
    assert_int_equal(r->now_ms, 1700000000000);
    done(r, 0);
    expect(con, "16 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"offset\":2}");
    feed(con, req(CQ_MQ_REQ_OFFSET, 3, 3, "orders"));
    r = take(CQ_WRITER_GET_OFFSET, "orders");
    assert_string_equal(r->consumer, "m2");
    done(r, -ENOENT); /* never committed */
    expect(con, "22 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"offset\":0,"
                "\"committed\":false,\"last_offset\":2,\"shard\":0}");
    feed(con, req(CQ_MQ_REQ_OFFSET, 4, 4, "orders"));
    r = take(CQ_WRITER_GET_OFFSET, "orders");
    r->offset = 2;
    done(r, 0);
    expect(con, "22 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":0,\"offset\":2,"
                "\"committed\":true,\"last_offset\":2,\"shard\":0}");
    /* beyond the topic's last offset (2): refused, nothing submitted */
    m = req(CQ_MQ_REQ_COMMIT, 6, 6, "orders");
    m->offset = 3;
    m->has |= CQ_MQ_F_OFFSET;
    feed(con, m);
    expect(con, "16 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":17,\"err_msg\":\"commit: "
                "offset is beyond the topic's last offset\"}");
    assert_int_equal(fp.npending, 0);
    feed(con, req(CQ_MQ_REQ_OFFSET, 5, 5, "orders"));
    done(take(CQ_WRITER_GET_OFFSET, "orders"), CQ_ESTORE);
    expect(con, "22 5 {\"askid\":5,\"topic\":\"orders\",\"err_code\":12,\"err_msg\":\"offset: "
                "storage error: disk on fire\",\"shard\":0}");
    fconn_free(con);
    eng_stop();
    /* an offline topic still answers commit; an unknown one does not */
    eng_start(false, 0);
    con = fconn_new();
    connect_as(con, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    m = req(CQ_MQ_REQ_COMMIT, 2, 2, "paused");
    m->offset = 0;
    m->has |= CQ_MQ_F_OFFSET;
    feed(con, m);
    r = take(CQ_WRITER_COMMIT_OFFSET, "Paused");
    done(r, 0);
    expect(con, "16 2 {\"askid\":2,\"topic\":\"paused\",\"err_code\":0,\"offset\":0}");
    m = req(CQ_MQ_REQ_COMMIT, 3, 3, "nosuch");
    m->offset = 1;
    m->has |= CQ_MQ_F_OFFSET;
    feed(con, m);
    expect(con, "16 3 {\"askid\":3,\"topic\":\"nosuch\",\"err_code\":8,\"err_msg\":\"commit: "
                "topic \\\"nosuch\\\" does not exist\"}");
    fconn_free(con);
    eng_stop();
}

/* ---- watch and push ------------------------------------------------------------------------- */

/* A catch-up read (rows committed without their answer) that fails is read again at the next
 * tick: the watchers of a topic that stays quiet must not wait for its next produce. */
static void test_catchup_retry_on_tick(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *w = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(w, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(w, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w, "8 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":0}");
    /* "orders" starts at offset 2; 3 and 4 committed without an answer, this produce got 5 */
    feed(p, produce_req(3, "orders", 1, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 4;
    done_produce(r, 5);
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"total\":1,"
              "\"offsets\":[5],\"shard\":0}");
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->from_offset, 2);
    done(r, CQ_ESTORE); /* the read failed: nothing pushed, nothing read again yet */
    expect_nothing(w);
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_tick(eng, 100);
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->from_offset, 2);
    done_read(r, 3, 3);
    expect(w,
           "18 0 {\"topic\":\"orders\",\"offset\":5,\"messages\":["
           "{\"offset_id\":3,\"message\":\"r3\",\"time\":1000},"
           "{\"offset_id\":4,\"message\":\"r4\",\"time\":1001},"
           "{\"offset_id\":5,\"message\":\"r5\",\"time\":1002}],\"message_count\":3,\"shard\":0}");
    cq_mqsrv_tick(eng, 200); /* caught up: no more reads */
    assert_int_equal(fp.npending, 0);
    fconn_free(p);
    fconn_free(w);
    eng_stop();
}

/* A produce that completes while a catch-up read is in flight may have committed after the
 * read's snapshot: the read coming back short proves nothing about it, and it is read again
 * (not skipped, which left its watchers without it: it-mqseq-mariadb under load). */
static void test_catchup_commit_during_read(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *w = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(w, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(w, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w, "8 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":0}");
    /* "orders" starts at offset 2; 3 committed without an answer, this produce got 4 */
    feed(p, produce_req(3, "orders", 1, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 3;
    done_produce(r, 4);
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"total\":1,"
              "\"offsets\":[4],\"shard\":0}");
    cq_writer_req_t *rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 2);
    /* the next produce commits (5) while the read is in flight, after its snapshot */
    feed(p, produce_req(4, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 4;
    done_produce(r, 5);
    expect(p, "12 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":0,\"total\":2,"
              "\"offsets\":[5],\"shard\":0}");
    assert_int_equal(fp.npending, 0); /* one read at a time */
    done_read(rd, 3, 2);              /* short: 3 and 4, not 5 */
    expect(w, "18 0 {\"topic\":\"orders\",\"offset\":4,\"messages\":["
              "{\"offset_id\":3,\"message\":\"r3\",\"time\":1000},"
              "{\"offset_id\":4,\"message\":\"r4\",\"time\":1001}],\"message_count\":2,"
              "\"shard\":0}");
    rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 4);
    done_read(rd, 5, 1);
    expect(w, "18 0 {\"topic\":\"orders\",\"offset\":5,\"messages\":["
              "{\"offset_id\":5,\"message\":\"r5\",\"time\":1000}],\"message_count\":1,"
              "\"shard\":0}");
    cq_mqsrv_tick(eng, 100); /* caught up: no more reads */
    assert_int_equal(fp.npending, 0);
    fconn_free(p);
    fconn_free(w);
    eng_stop();
}

static void test_watch_push(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *w1 = fconn_new(), *w2 = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(w1, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    connect_as(w2, 2, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":3,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(w1, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w1, "8 2 "
               "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
               "total\":0}");
    feed(w1, req(CQ_MQ_REQ_WATCH, 3, 3, "ORDERS")); /* already watching */
    expect(w1, "8 3 "
               "{\"askid\":3,\"topic\":\"ORDERS\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
               "total\":0}");
    feed(w2, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w2, "8 2 "
               "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
               "total\":0}");
    feed(w2, req(CQ_MQ_REQ_WATCH, 3, 3, "Paused"));
    expect(w2, "8 3 {\"askid\":3,\"topic\":\"Paused\",\"err_code\":9,\"err_msg\":\"watch: topic "
               "\\\"Paused\\\" is offline\"}");
    /* two produces completed in one drain give one push per watcher */
    feed(p, produce_req(4, "orders", 2, 0));
    feed(p, produce_req(5, "orders", 1, 0));
    cq_writer_req_t *a = take(CQ_WRITER_PRODUCE, "orders"), *b = take(CQ_WRITER_PRODUCE, "orders");
    a->offsets[0] = 3;
    a->offsets[1] = 4;
    b->offsets[0] = 6;
    cq_mqsrv_complete(NULL, a);
    cq_mqsrv_complete(NULL, b);
    cq_mqsrv_drain(eng);
    cq_mqsrv_flush(eng);
    expect(p, "12 4 "
              "{\"askid\":4,\"topic\":\"orders\",\"err_code\":0,\"total\":2,\"offsets\":[3,4],"
              "\"shard\":0}");
    expect(p, "12 5 "
              "{\"askid\":5,\"topic\":\"orders\",\"err_code\":0,\"total\":3,\"offsets\":[6],"
              "\"shard\":0}");
    const char *push = "18 0 {\"topic\":\"orders\",\"offset\":6,\"messages\":["
                       "{\"offset_id\":3,\"message\":\"m0\",\"time\":1700000000000},"
                       "{\"offset_id\":4,\"message\":\"m1\",\"time\":1700000000000},"
                       "{\"offset_id\":6,\"message\":\"m0\",\"time\":1700000000000}],"
                       "\"message_count\":3,\"shard\":0}";
    expect(w1, push);
    expect(w2, push);
    expect_nothing(p);
    /* an idempotent retry acknowledged with old offsets is not pushed again, nor counted */
    feed(p, produce_req(6, "orders", 1, 0));
    cq_writer_req_t *retry = take(CQ_WRITER_PRODUCE, "orders");
    retry->prev_offset = 6; /* the store's high water before it */
    done_produce(retry, 4);
    expect(p, "12 6 "
              "{\"askid\":6,\"topic\":\"orders\",\"err_code\":0,\"total\":3,\"offsets\":[4],"
              "\"shard\":0}");
    expect_nothing(w1);
    feed(w1, req(CQ_MQ_REQ_UNWATCH, 7, 7, "orders"));
    expect(w1, "10 7 {\"askid\":7,\"topic\":\"orders\",\"err_code\":0}");
    feed(p, produce_req(8, "orders", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "orders"), 9);
    expect(p, "12 8 "
              "{\"askid\":8,\"topic\":\"orders\",\"err_code\":0,\"total\":4,\"offsets\":[9],"
              "\"shard\":0}");
    expect_nothing(w1);
    expect(w2, "18 0 {\"topic\":\"orders\",\"offset\":9,\"messages\":[{\"offset_id\":9,"
               "\"message\":\"m0\",\"time\":1700000000000}],\"message_count\":1,\"shard\":0}");
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.pushes, 3);
    /* a watcher that goes away is forgotten */
    fconn_free(w2);
    feed(p, produce_req(10, "orders", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "orders"), 11);
    expect(p, "12 10 "
              "{\"askid\":10,\"topic\":\"orders\",\"err_code\":0,\"total\":5,\"offsets\":[11],"
              "\"shard\":0}");
    fconn_free(p);
    fconn_free(w1);
    eng_stop();
}

/* The bridge's sink takes every committed message of its topics once, in offset order, with no
 * watcher at all: from the completions, from a catch-up read of rows committed without their
 * answer, and not again for an idempotent retry. Topics it does not want are not given. */
static void test_sink(void **state)
{
    (void)state;
    next_sink = true;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(p, produce_req(2, "orders", 2, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->offsets[0] = 3;
    r->offsets[1] = 4;
    done(r, 0);
    expect(p, "12 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":2,"
              "\"offsets\":[3,4],\"shard\":0}");
    assert_string_equal(sink_log, "orders:3/2:m0;orders:4/3:m1;");
    /* 5 and 6 committed without an answer: read back before 7 */
    feed(p, produce_req(3, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 6;
    done_produce(r, 7);
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"total\":3,"
              "\"offsets\":[7],\"shard\":0}");
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->from_offset, 4);
    done_read(r, 5, 3);
    assert_string_equal(sink_log, "orders:3/2:m0;orders:4/3:m1;orders:5/4:r5;orders:6/5:r6;"
                                  "orders:7/6:r7;");
    /* an idempotent retry answered with an old offset is not given again */
    feed(p, produce_req(4, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 7;
    done_produce(r, 4);
    expect(p, "12 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":0,\"total\":3,"
              "\"offsets\":[4],\"shard\":0}");
    feed(p, produce_req(5, "keep", 1, 0)); /* not the sink's */
    done_produce(take(CQ_WRITER_PRODUCE, "keep"), 1);
    expect(p, "12 5 {\"askid\":5,\"topic\":\"keep\",\"err_code\":0,\"total\":1,"
              "\"offsets\":[1],\"shard\":0}");
    assert_string_equal(sink_log, "orders:3/2:m0;orders:4/3:m1;orders:5/4:r5;orders:6/5:r6;"
                                  "orders:7/6:r7;");
    fconn_free(p);
    eng_stop();
}

/* ---- one connection shape: refcounted frames, one flush, limits ---------------------------- */

/* A push to N watchers is encoded once: their queues hold N references to one buffer. */
static void test_push_refs(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *w[3];
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    for (int i = 0; i < 3; i++) {
        char want[128];
        w[i] = fconn_new();
        snprintf(want, sizeof(want),
                 "2 1 "
                 "{\"askid\":1,\"client_type\":1,\"client_id\":%d,\"err_code\":0,\"shard\":0,"
                 "\"master\":true}",
                 i + 2);
        connect_as(w[i], 2, "", want);
        feed(w[i], req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
        expect(w[i], "8 2 "
                     "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,\"topic_"
                     "message_total\":0}");
        w[i]->stalled = true;
    }
    long live = cq_buf_live();
    feed(p, produce_req(3, "orders", 2, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->offsets[0] = 3;
    r->offsets[1] = 4;
    cq_mqsrv_complete(NULL, r);
    cq_mqsrv_drain(eng);
    cq_buf_t *b = NULL;
    for (int i = 0; i < 3; i++) {
        cq_sendq_t *q = cq_mqsrv_conn_sendq(w[i]->c);
        assert_int_equal(q->count, 1);
        cq_buf_t *e = q->ring[q->head & (q->cap - 1)].buf;
        assert_true(b == NULL || e == b); /* the same bytes, not a copy */
        b = e;
    }
    assert_int_equal(cq_buf_refs(b), 3);
    assert_int_equal(cq_buf_live(), live + 2); /* the push and the producer's answer */
    cq_mqsrv_flush(eng);
    expect(p, "12 3 "
              "{\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"total\":2,\"offsets\":[3,4],"
              "\"shard\":0}");
    for (int i = 0; i < 3; i++) {
        w[i]->stalled = false;
        fake_flush(w[i]);
        expect(w[i], "18 0 {\"topic\":\"orders\",\"offset\":4,\"messages\":["
                     "{\"offset_id\":3,\"message\":\"m0\",\"time\":1700000000000},"
                     "{\"offset_id\":4,\"message\":\"m1\",\"time\":1700000000000}],"
                     "\"message_count\":2,\"shard\":0}");
        if (i < 2)
            assert_int_equal(cq_buf_refs(b), 2 - i);
        else
            assert_int_equal(cq_buf_live(), live); /* the last reference went: freed */
    }
    /* answers queued in one loop iteration are written with one flush */
    int before = p->flushes;
    cq_mq_msg_t *k1 = req(CQ_MQ_REQ_KEEPALIVE, 7, 7, NULL),
                *k2 = req(CQ_MQ_REQ_KEEPALIVE, 8, 8, NULL);
    uint8_t *a1, *a2;
    size_t n1, n2;
    assert_int_equal(cq_mq_encode(k1, &a1, &n1), 0);
    assert_int_equal(cq_mq_encode(k2, &a2, &n2), 0);
    uint8_t both[256];
    memcpy(both, a1, n1);
    memcpy(both + n1, a2, n2);
    feed_raw(p, both, n1 + n2);
    assert_int_equal(p->flushes, before + 1);
    expect(p, "4 7 {\"askid\":7,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    expect(p, "4 8 {\"askid\":8,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    cq_free(a1);
    cq_free(a2);
    cq_mq_msg_free(k1);
    cq_mq_msg_free(k2);
    for (int i = 0; i < 3; i++)
        fconn_free(w[i]);
    fconn_free(p);
    eng_stop();
}

/* Fills f's queue (the peer reads nothing) with keepalive answers, n at a time. */
static void keepalives(fconn_t *f, int n)
{
    for (int i = 0; i < n; i++) {
        feed(f, req(CQ_MQ_REQ_KEEPALIVE, 9, 9, NULL));
    }
}

#define KA_LEN 73 /* 12 + {"askid":9,"err_code":0,"weight":100,"shard":0,"master":true} */

static void test_sendq_limits(void **state)
{
    (void)state;
    cq_mqsrv_stats_t st;
    sq_hard = 100 * KA_LEN;
    sq_soft = 20 * KA_LEN;
    sq_soft_s = 2;
    eng_start(false, 0);
    /* hard: the answer that would go over closes at once */
    fconn_t *h = fconn_new();
    h->stalled = true;
    keepalives(h, 100);
    assert_int_equal(cq_sendq_bytes(cq_mqsrv_conn_sendq(h->c)), 100 * KA_LEN);
    assert_int_equal(h->aborted, 0);
    keepalives(h, 1);
    assert_int_equal(h->aborted, 1);
    assert_int_equal(h->abort_reason, CQ_ESLOW);
    assert_string_equal(h->abort_why, "slow consumer: over mq-sendq-hard-limit");
    assert_int_equal(h->closed, 0); /* not the graceful close: nothing more is written */
    assert_int_equal(cq_mqsrv_conn_input(h->c, (const uint8_t *)"x", 1), CQ_ECLOSED);
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.slow, 1);
    cq_mqsrv_tick(eng, 1000); /* no longer watched by the soft limit */
    assert_int_equal(h->aborted, 1);
    h->at = h->len;
    fconn_free(h);
    /* soft: over the limit for sq_soft_s seconds, counted from the first tick that saw it */
    fconn_t *s = fconn_new(), *ok = fconn_new();
    s->stalled = ok->stalled = true;
    keepalives(s, 21);
    keepalives(ok, 21);
    cq_mqsrv_tick(eng, 10000); /* both over: their clocks start */
    ok->stalled = false;
    fake_flush(ok); /* this one catches up */
    for (int i = 0; i < 21; i++)
        expect(ok, "4 9 {\"askid\":9,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    cq_mqsrv_tick(eng, 11999);
    assert_int_equal(s->aborted, 0);
    cq_mqsrv_tick(eng, 12000);
    assert_int_equal(s->aborted, 1);
    assert_int_equal(s->abort_reason, CQ_ESLOW);
    assert_string_equal(s->abort_why, "slow consumer: over mq-sendq-soft-limit too long");
    assert_int_equal(ok->aborted, 0);
    cq_mqsrv_tick(eng, 20000);
    assert_int_equal(s->aborted, 1);
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.slow, 2);
    s->at = s->len;
    fconn_free(s);
    fconn_free(ok);
    /* the metric */
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_mqsrv_metrics(eng, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((const char *)b.data, "\nchanq_mq_slow_consumers_total 2\n"));
    cq_sbuf_done(&b);
    eng_stop();
}

/* ---- the topic cache: many topics, any case ------------------------------------------------- */

#define CACHE_TOPICS 600

static void test_topic_cache(void **state)
{
    (void)state;
    static cq_store_topic_t t[CACHE_TOPICS];
    static uint64_t hw[CACHE_TOPICS];
    for (int i = 0; i < CACHE_TOPICS; i++) {
        t[i] = (cq_store_topic_t){.online = i % 5 != 0, .retention_days = 1};
        snprintf(t[i].name, sizeof(t[i].name), "Topic_%d_x", i);
        hw[i] = (uint64_t)i * 10;
    }
    memset(&fp, 0, sizeof(fp));
    cq_mqsrv_opts_t o = {
        .topics = t, .high_water = hw, .ntopics = CACHE_TOPICS, .port = {&fport_ops, NULL}};
    eng = cq_mqsrv_new(&o);
    assert_non_null(eng);
    cq_mqsrv_set_now(eng, 1700000000000);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    unsigned seed = 7;
    for (int k = 0; k < 2000; k++) {
        int i = (int)(rand_r(&seed) % CACHE_TOPICS);
        char name[CQ_MQ_TOPIC_MAX + 1], want[256];
        snprintf(name, sizeof(name), "%s", t[i].name);
        for (char *c = name; *c; c++) /* a random spelling of the same name */
            if (rand_r(&seed) & 1)
                *c = (char)(*c >= 'a' && *c <= 'z'   ? *c - 32
                            : *c >= 'A' && *c <= 'Z' ? *c + 32
                                                     : *c);
        feed(p, req(CQ_MQ_REQ_OFFSET, 2, 2, name));
        /* the store sees its own spelling; offline topics (every fifth) answer offsets too */
        done(take(CQ_WRITER_GET_OFFSET, t[i].name), -ENOENT);
        snprintf(want, sizeof(want),
                 "22 2 {\"askid\":2,\"topic\":\"%s\",\"err_code\":0,\"offset\":0,"
                 "\"committed\":false,\"last_offset\":%d,\"shard\":0}",
                 name, i * 10);
        expect(p, want);
    }
    feed(p, req(CQ_MQ_REQ_OFFSET, 3, 3, "Topic_600_x")); /* one past the last */
    expect(p, "22 3 {\"askid\":3,\"topic\":\"Topic_600_x\",\"err_code\":8,\"err_msg\":"
              "\"offset: topic \\\"Topic_600_x\\\" does not exist\",\"shard\":0}");
    /* a created topic joins the cache under the store's answer */
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 4, 4, "NewOne"));
    done(take(CQ_WRITER_TOPIC_CREATE, "NewOne"), 0);
    expect(p, "6 4 "
              "{\"askid\":4,\"topic\":\"NewOne\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
              "total\":0}");
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 5, 5, "NEWONE"));
    expect(p, "6 5 "
              "{\"askid\":5,\"topic\":\"NEWONE\",\"err_code\":0,\"topic_nums\":2,\"topic_message_"
              "total\":0}");
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_mqsrv_metrics(eng, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((const char *)b.data, "\nchanq_mq_topics 601\n"));
    cq_sbuf_done(&b);
    fconn_free(p);
    eng_stop();
}

/* ---- the engine's own requests ----------------------------------------------------------------
 */

static void test_online_retention(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "nosuch", true), CQ_ENOTOPIC);
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "ORDERS", false), 0);
    cq_writer_req_t *r = take(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(r->online);
    feed(p, produce_req(2, "orders", 1, 0)); /* still online until the store recorded it */
    done(r, 0);
    done_produce(take(CQ_WRITER_PRODUCE, "orders"), 3);
    expect(p, "12 2 "
              "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":1,\"offsets\":[3],"
              "\"shard\":0}");
    feed(p, produce_req(3, "orders", 1, 0));
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":9,\"err_msg\":\"produce: topic "
              "\\\"orders\\\" is offline\",\"shard\":0}");
    /* retention: one purge per topic with a retention, repeated while a purge was full */
    cq_mqsrv_retention(eng, 1700000000000);
    r = take(CQ_WRITER_PURGE, "Paused");
    assert_int_equal(r->max, CQ_MQSRV_PURGE_ROWS);
    assert_int_equal(r->older_than_ms, 1700000000000 - 7 * 86400000LL);
    cq_writer_req_t *r2 = take(CQ_WRITER_PURGE, "orders");
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_retention(eng, 1700000000001); /* purges in flight: nothing new */
    assert_int_equal(fp.npending, 0);
    r->purged = CQ_MQSRV_PURGE_ROWS;
    done(r, 0);
    r = take(CQ_WRITER_PURGE, "Paused");
    assert_int_equal(r->older_than_ms, 1700000000000 - 7 * 86400000LL);
    r->purged = 3;
    done(r, 0);
    done(r2, CQ_ESTORE);
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_retention(eng, 1700000000002);
    done(take(CQ_WRITER_PURGE, "Paused"), 0);
    done(take(CQ_WRITER_PURGE, "orders"), 0);
    fconn_free(p);
    eng_stop();
}

/* cq_malloc's blocks, passed through to libc and counted; freeing the watched one is seen. */
static long walloc_live;
static const void *walloc_watch;
static bool walloc_watch_freed;

static void *w_malloc(size_t size)
{
    void *p = malloc(size);
    walloc_live += p != NULL;
    return p;
}

static void *w_realloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size);
    walloc_live += !ptr && p;
    return p;
}

static void w_free(void *ptr)
{
    walloc_watch_freed |= ptr == walloc_watch;
    walloc_live--; /* cq_free() never passes NULL */
    free(ptr);
}

static const cq_allocator_t walloc = {w_malloc, w_realloc, w_free};

/* A connection that goes away with requests in flight: nothing more reaches its edge, each
 * completion still does the engine's part (the high water, the topic cache), the connection is
 * freed with its last completion, and the engine frees with nothing left. */
static void test_close_in_flight(void **state)
{
    (void)state;
    long bufs = cq_buf_live();
    walloc_live = 0;
    cq_alloc_set(&walloc);
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(p, produce_req(2, "orders", 1, 0));
    feed(p, consume_req(3, "orders", 0, -1));
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 4, 4, "later"));
    expect_nothing(p);
    walloc_watch = p->c;
    walloc_watch_freed = false;
    fconn_gone(p);
    int flushes = p->flushes;
    size_t len = p->len;
    done_produce(take(CQ_WRITER_PRODUCE, "orders"), 3);
    assert_false(walloc_watch_freed); /* two requests still refer to it */
    done_read(take(CQ_WRITER_READ, "orders"), 3, 1);
    assert_false(walloc_watch_freed);
    done(take(CQ_WRITER_TOPIC_CREATE, "later"), 0);
    assert_true(walloc_watch_freed); /* with its last completion */
    walloc_watch = NULL;
    /* nothing was written, flushed, closed or aborted on the dead connection */
    assert_int_equal(p->flushes, flushes);
    assert_int_equal(p->len, len);
    assert_int_equal(p->closed, 0);
    assert_int_equal(p->aborted, 0);
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.produced, 1);
    /* the topic it created is in the cache: registered without a store round trip, listed */
    fconn_t *q = fconn_new();
    connect_as(q, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(q, req(CQ_MQ_REQ_ADD_TOPIC, 2, 2, "LATER"));
    expect(q, "6 2 "
              "{\"askid\":2,\"topic\":\"LATER\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
              "total\":0}");
    assert_int_equal(fp.npending, 0);
    feed(q, req(CQ_MQ_REQ_TOPICS, 3, 3, NULL));
    expect(q, "24 3 {\"askid\":3,\"err_code\":0,\"topic_nums\":4,\"topics\":["
              "{\"topic\":\"keep\",\"online\":true,\"retention_days\":0,\"last_offset\":0},"
              "{\"topic\":\"later\",\"online\":true,\"retention_days\":30,\"last_offset\":0},"
              "{\"topic\":\"orders\",\"online\":true,\"retention_days\":30,\"last_offset\":3},"
              "{\"topic\":\"Paused\",\"online\":false,\"retention_days\":7,\"last_offset\":0}]}");
    fconn_free(q);
    fconn_free(p);
    eng_stop();
    cq_alloc_set(NULL);
    assert_int_equal(walloc_live, 0); /* the engine freed everything it allocated */
    assert_int_equal(cq_buf_live(), bufs);
}

/* ---- the completion inbox ------------------------------------------------------------------- */

static int wakes;

static void fake_wake(void *ud)
{
    assert_ptr_equal(ud, &wakes);
    wakes++;
}

static void *complete_thread(void *arg)
{
    cq_mqsrv_complete(NULL, arg); /* as the store thread does */
    return NULL;
}

/* Completions from another thread queue and wake; the engine's thread drains them. */
static void test_inbox(void **state)
{
    (void)state;
    static const cq_mqsrv_ops_t ops = {fake_wake};
    eng_start(false, 0);
    wakes = 0;
    cq_mqsrv_set_ops(eng, &ops, &wakes);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(p, produce_req(2, "orders", 1, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->offsets[0] = 5;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, complete_thread, r), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(wakes, 1);
    expect_nothing(p); /* not before the drain */
    cq_mqsrv_drain(eng);
    cq_mqsrv_flush(eng);
    expect(p, "12 2 "
              "{\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":1,\"offsets\":[5],"
              "\"shard\":0}");
    /* without ops completions only queue; freeing the engine runs them */
    cq_mqsrv_set_ops(eng, NULL, NULL);
    feed(p, produce_req(3, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    r->offsets[0] = 6;
    cq_mqsrv_complete(NULL, r);
    assert_int_equal(wakes, 1);
    fconn_free(p);
    eng_stop();
}

/* ---- metrics and the store port's control ---------------------------------------------------- */

static void test_metrics_port(void **state)
{
    (void)state;
    eng_start(false, 0);
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_mqsrv_metrics(eng, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    const char *text = (const char *)b.data;
    assert_non_null(strstr(text, "\nchanq_mq_topics 3\n"));
    assert_non_null(strstr(text, "\nchanq_mq_topic_last_offset{topic=\"orders\",shard=\"0\"} 2\n"));
    assert_non_null(strstr(text, "\nchanq_mq_writer_transactions_total 7\n"));
    assert_non_null(strstr(text, "\nchanq_mq_writer_messages_total 70\n"));
    cq_sbuf_done(&b);
    eng_stop();
    /* a port without control: no store-thread metrics */
    static const cq_mqport_ops_t bare = {fake_submit, NULL};
    cq_mqsrv_opts_t o = {.port = {&bare, NULL}};
    eng = cq_mqsrv_new(&o);
    assert_non_null(eng);
    cq_sbuf_init(&b);
    assert_int_equal(cq_mqsrv_metrics(eng, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((const char *)b.data, "\nchanq_mq_topics 0\n"));
    assert_null(strstr((const char *)b.data, "chanq_mq_writer_"));
    cq_sbuf_done(&b);
    eng = cq_mqsrv_free(eng);
    /* no submit: no engine */
    static const cq_mqport_ops_t none = {NULL, NULL};
    o.port.ops = &none;
    assert_null(cq_mqsrv_new(&o));
}

/* ---- HTTP answers --------------------------------------------------------------------------- */

/* Sends one request with body (NULL: none) as module:token (NULL: no Authorization). */
static void http(fconn_t *f, const char *method, const char *path, const char *auth,
                 const char *body)
{
    char text[4096];
    int n = snprintf(text, sizeof(text), "%s %s HTTP/1.1\r\n", method, path);
    if (auth)
        n += snprintf(text + n, sizeof(text) - (size_t)n, "Authorization: Bearer %s\r\n", auth);
    if (strcmp(method, "POST") == 0) /* what a browser cannot send cross-site */
        n += snprintf(text + n, sizeof(text) - (size_t)n, "Content-Type: application/json\r\n");
    if (body)
        n += snprintf(text + n, sizeof(text) - (size_t)n, "Content-Length: %zu\r\n", strlen(body));
    n += snprintf(text + n, sizeof(text) - (size_t)n, "\r\n%s", body ? body : "");
    feed_raw(f, text, (size_t)n);
}

/* Checks the next response: "<status> <reason>" and its JSON body. */
static void expect_resp(fconn_t *f, const char *status, const char *body)
{
    char want[8192];
    snprintf(want, sizeof(want),
             "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             status, strlen(body), body);
    expect_http(f, want);
}

static void test_http_ops(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *f = fhttp_new();
    http(f, "POST", "/v1/topics/orders/messages", "2:s2", "{\"content\":\"a\"}");
    expect_resp(f, "403 Forbidden",
                "{\"err_code\":7,\"err_msg\":\"module 2 may not produce to topic orders\"}");
    http(f, "POST", "/v1/topics/paused/messages", "3:s3", "{\"content\":\"a\"}");
    expect_resp(f, "409 Conflict",
                "{\"err_code\":9,\"err_msg\":\"topic \\\"Paused\\\" is offline\"}");
    http(f, "POST", "/v1/topics/nosuch/messages", "1:s1", "{\"content\":\"a\"}");
    expect_resp(f, "403 Forbidden", /* admin is not the produce right */
                "{\"err_code\":7,\"err_msg\":\"module 1 may not produce to topic nosuch\"}");
    http(f, "POST", "/v1/topics/orders/messages", "3:s3",
         "{\"messages\":[{\"content\":\"a\",\"producer_id\":5,\"seq\":1},{}]}");
    expect_resp(f, "400 Bad Request",
                "{\"err_code\":5,\"err_msg\":\"message 1: field \\\"content\\\": must be a string "
                "or an object\"}");
    http(f, "POST", "/v1/topics/ORDERS/messages", "3:s3",
         "{\"messages\":[{\"content\":\"a\",\"producer_id\":5,\"seq\":1},{\"content\":{\"k\":1},"
         "\"seq\":2}]}");
    expect_resp(f, "400 Bad Request",
                "{\"err_code\":5,\"err_msg\":\"message 1: \\\"producer_id\\\" (>= 1) and "
                "\\\"seq\\\" go together\"}");
    http(f, "POST", "/v1/topics/ORDERS/messages", "3:s3",
         "{\"messages\":[{\"content\":\"a\",\"producer_id\":5,\"seq\":1},{\"content\":{\"k\":1},"
         "\"producer_id\":5,\"seq\":2}]}");
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    assert_int_equal(r->n_msgs, 2);
    assert_int_equal(r->msgs[0].producer_id, 5);
    assert_int_equal(r->msgs[1].seq, 2);
    assert_int_equal(r->msgs[1].len, 7);
    assert_memory_equal(r->msgs[1].content, "{\"k\":1}", 7);
    done_produce(r, 40);
    expect_resp(f, "200 OK", "{\"offsets\":[40,42]}");
    http(f, "POST", "/v1/topics/orders/messages", "3:s3", "{\"content\":\"z\"}");
    done(take(CQ_WRITER_PRODUCE, "orders"), CQ_ESTORE);
    expect_resp(
        f, "503 Service Unavailable",
        "{\"err_code\":12,\"err_msg\":\"storage error: disk on fire; nothing was acknowledged: "
        "retry with the same producer_id and seq\"}");
    http(f, "GET", "/v1/topics/orders/messages?offset=3&max=5000", "2:s2", NULL);
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, CQ_MQ_DEFAULT_MAX_BATCH);
    assert_int_equal(r->from_offset, 3);
    done_read(r, 4, 1);
    expect_resp(f, "200 OK",
                "{\"messages\":[{\"offset\":4,\"content\":\"r4\",\"create_time\":1000}],"
                "\"next_offset\":4}");
    http(f, "GET", "/v1/topics/orders/messages?offset=7", "2:s2", NULL); /* no max: the default */
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, CQ_MQSRV_CONSUME_DFL);
    assert_int_equal(r->from_offset, 7);
    done_read(r, 0, 0);
    expect_resp(f, "200 OK", "{\"messages\":[],\"next_offset\":7}");
    http(f, "GET", "/v1/topics/orders/messages?max=0", "2:s2", NULL);
    r = take(CQ_WRITER_READ, "orders");
    assert_int_equal(r->max, 1);
    assert_int_equal(r->from_offset, 0);
    done_read(r, 0, 0);
    expect_resp(f, "200 OK", "{\"messages\":[],\"next_offset\":0}");
    http(f, "POST", "/v1/topics/orders/consumers/c1/offset", "2:s2", "{\"offset\":4}");
    r = take(CQ_WRITER_COMMIT_OFFSET, "orders");
    assert_string_equal(r->consumer, "c1");
    assert_int_equal(r->offset, 4);
    done(r, 0);
    expect_resp(f, "200 OK", "{\"topic\":\"orders\",\"consumer\":\"c1\",\"offset\":4}");
    http(f, "GET", "/v1/topics/orders/consumers/c2/offset", "2:s2", NULL);
    done(take(CQ_WRITER_GET_OFFSET, "orders"), -ENOENT);
    expect_resp(f, "200 OK",
                "{\"topic\":\"orders\",\"consumer\":\"c2\",\"offset\":0,\"committed\":false}");
    http(f, "GET", "/v1/topics/orders/consumers/c2/offset", "2:s2", NULL);
    r = take(CQ_WRITER_GET_OFFSET, "orders");
    r->offset = 4;
    done(r, 0);
    expect_resp(f, "200 OK",
                "{\"topic\":\"orders\",\"consumer\":\"c2\",\"offset\":4,\"committed\":true}");
    http(f, "POST", "/v1/topics", "3:s3", "{\"topic\":\"new\"}");
    expect_resp(f, "403 Forbidden",
                "{\"err_code\":7,\"err_msg\":\"module 3 may not administer topics\"}");
    http(f, "POST", "/v1/topics", "1:s1", "{\"topic\":\"new\",\"retention_days\":3}");
    r = take(CQ_WRITER_TOPIC_CREATE, "new");
    assert_int_equal(r->retention_days, 3);
    assert_int_equal(r->now_ms, 1700000000000);
    done(r, 0);
    expect_resp(f, "200 OK", "{\"topic\":\"new\",\"created\":true}");
    http(f, "POST", "/v1/topics", "1:s1", "{\"topic\":\"NEW\"}");
    expect_resp(f, "200 OK", "{\"topic\":\"new\",\"created\":false}");
    http(f, "POST", "/v1/topics", "1:s1", "{\"topic\":\"other\"}");
    done(take(CQ_WRITER_TOPIC_CREATE, "other"), CQ_EEXIST);
    expect_resp(f, "200 OK", "{\"topic\":\"other\",\"created\":false}");
    http(f, "POST", "/v1/topics/new/offline", "1:s1", NULL);
    r = take(CQ_WRITER_TOPIC_SET_ONLINE, "new");
    assert_false(r->online);
    done(r, 0);
    expect_resp(f, "200 OK", "{\"topic\":\"new\",\"online\":false}");
    http(f, "POST", "/v1/topics/new/online", "3:s3", NULL);
    expect_resp(f, "403 Forbidden",
                "{\"err_code\":7,\"err_msg\":\"module 3 may not administer topics\"}");
    http(f, "GET", "/v1/topics", "2:s2", NULL);
    expect_resp(f, "200 OK",
                "{\"topics\":["
                "{\"topic\":\"Paused\",\"online\":false,\"retention_days\":7,\"last_offset\":0},"
                "{\"topic\":\"keep\",\"online\":true,\"retention_days\":0,\"last_offset\":0},"
                "{\"topic\":\"orders\",\"online\":true,\"retention_days\":30,\"last_offset\":42},"
                "{\"topic\":\"new\",\"online\":false,\"retention_days\":3,\"last_offset\":0},"
                "{\"topic\":\"other\",\"online\":true,\"retention_days\":30,\"last_offset\":0}]}");
    http(f, "GET", "/v1/health", NULL, NULL);
    expect_resp(f, "200 OK", "{\"ok\":true,\"topics\":5,\"produced\":2,\"consumed\":1}");
    fp.fail = CQ_ELIMIT;
    http(f, "GET", "/v1/topics/orders/messages", "2:s2", NULL);
    expect_resp(f, "429 Too Many Requests",
                "{\"err_code\":11,\"err_msg\":\"busy: pending writes over the limit, retry "
                "later\"}");
    fp.fail = 0;
    http(f, "GET", "/v1/topics/orders/messages", "2:s2", NULL);
    done(take(CQ_WRITER_READ, "orders"), CQ_ESTORE);
    expect_resp(f, "503 Service Unavailable",
                "{\"err_code\":12,\"err_msg\":\"storage error: disk on fire; not done\"}");
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.busy, 1);
    assert_int_equal(st.consumed, 1);
    fconn_free(f);
    eng_stop();
    /* without permissions every module may do everything */
    eng_start(false, 0);
    f = fhttp_new();
    http(f, "POST", "/v1/topics/nosuch/messages", NULL, "{\"content\":\"a\"}");
    expect_resp(f, "404 Not Found",
                "{\"err_code\":8,\"err_msg\":\"topic \\\"nosuch\\\" does not exist\"}");
    /* a path that is not UTF-8 is quoted with '?' for the bad bytes, not refused as a 503 */
    http(f, "GET", "/v1/topics/nosuch/mess\xaages\xc3", NULL, NULL);
    expect_resp(f, "404 Not Found",
                "{\"err_code\":4,\"err_msg\":\"no endpoint GET /v1/topics/nosuch/mess?ges?\"}");
    http(f, "GET", "/v1/\xc3\xa9t\xc3\xa9", NULL, NULL); /* valid UTF-8 is kept */
    expect_resp(f, "404 Not Found",
                "{\"err_code\":4,\"err_msg\":\"no endpoint GET /v1/\xc3\xa9t\xc3\xa9\"}");
    http(f, "POST", "/v1/topics/keep/online", "7:x", NULL);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "keep"), CQ_ESTORE);
    expect_resp(f, "503 Service Unavailable",
                "{\"err_code\":12,\"err_msg\":\"storage error: disk on fire; not done\"}");
    fconn_free(f);
    eng_stop();
}

/* ---- issue 10: writes without a permissions file, the failure budget, reloads ------------ */

/* Without a permissions file, a peer that is not on loopback may read but not write: create
 * (add_topic of a new topic), produce and commit get err_code 7 naming the file. */
static void test_writes_need_loopback(void **state)
{
    (void)state;
    eng_start(false, 0);
    fake_peer_addr = "192.0.2.7:5000";
    fconn_t *f = fconn_new();
    fake_peer_addr = "127.0.0.1:4000";
    connect_as(f, 9, "",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(f, req(CQ_MQ_REQ_ADD_TOPIC, 2, 2, "fresh"));
    expect(f, "6 2 {\"askid\":2,\"topic\":\"fresh\",\"err_code\":7,\"err_msg\":\"add_topic: "
              "module 9 needs a permissions file (--mq-permissions-file) to write from an "
              "address that is not loopback\"}");
    feed(f, req(CQ_MQ_REQ_ADD_TOPIC, 3, 3, "orders")); /* registering an existing one is a read */
    expect(f, "6 3 "
              "{\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,\"topic_message_"
              "total\":0}");
    feed(f, produce_req(4, "orders", 1, 0));
    expect(f, "12 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":7,\"err_msg\":\"produce: "
              "needs a permissions file (--mq-permissions-file) to write from an address that is "
              "not loopback\",\"shard\":0}");
    cq_mq_msg_t *m = req(CQ_MQ_REQ_COMMIT, 5, 5, "orders");
    m->offset = 1;
    m->has |= CQ_MQ_F_OFFSET;
    feed(f, m);
    expect(f, "16 5 {\"askid\":5,\"topic\":\"orders\",\"err_code\":7,\"err_msg\":\"commit: "
              "needs a permissions file (--mq-permissions-file) to write from an address that is "
              "not loopback\"}");
    assert_int_equal(fp.npending, 0);
    feed(f, consume_req(6, "orders", 0, 10)); /* reads go on */
    done_read(take(CQ_WRITER_READ, "orders"), 1, 0);
    expect(
        f,
        "14 6 "
        "{\"askid\":6,\"topic\":\"orders\",\"err_code\":0,\"total\":0,\"offset\":0,\"messages\":[],"
        "\"message_count\":0,\"shard\":0}");
    fconn_free(f);
    eng_stop();
}

/* The seed connect and the failure budget: N wrong tokens from one address, on new
 * connections, then even the right token is refused (and the connection closed). */
static void test_connect_budget(void **state)
{
    (void)state;
    cq_authlim_opts_t lo = {.max_failures = 2, .window_ms = 600000, .backoff_ms = 600000};
    next_authlim = cq_authlim_new(&lo);
    eng_start(true, 0);
    fake_peer_addr = "10.9.9.9:1";
    for (int i = 0; i < 2; i++) {
        fconn_t *g = fconn_new();
        connect_as(g, 3, "guess",
                   "2 1 {\"askid\":1,\"client_type\":1,\"err_code\":6,\"err_msg\":"
                   "\"connect: unknown module_id or wrong token\",\"shard\":0,\"master\":true}");
        assert_int_equal(g->closed, 1);
        fconn_free(g);
    }
    fconn_t *g = fconn_new();
    connect_as(g, 3, "s3",
               "2 1 {\"askid\":1,\"client_type\":1,\"err_code\":6,\"err_msg\":\"connect: too "
               "many failed authentications from this address, retry "
               "later\",\"shard\":0,\"master\":true}");
    assert_int_equal(g->closed, 1);
    fconn_free(g);
    fake_peer_addr = "10.9.9.8:1"; /* its neighbour is another address */
    g = fconn_new();
    connect_as(g, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":4,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    fconn_free(g);
    fake_peer_addr = "127.0.0.1:4000";
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_authlim_metrics_append(next_authlim, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
    assert_non_null(strstr((char *)b.data, "chanq_auth_addr_refused_total{port=\"mq\"} 1\n"));
    cq_sbuf_done(&b);
    eng_stop();
    next_authlim = cq_authlim_free(next_authlim);
}

/* A permissions file without a token for a module does not load, naming the module. */
static void test_perm_token_required(void **state)
{
    (void)state;
    cq_mqperm_t *p = NULL;
    char err[256];
    const char j[] = "{\"1\": {\"token\": \"a\"}, \"7\": {\"produce\": [\"*\"]}}";
    assert_int_equal(cq_mqperm_load(j, strlen(j), &p, err, sizeof(err)), CQ_EFIELD);
    assert_string_equal(err, "module 7: \"token\" is missing");
    assert_null(p);
    const char ok[] = "{\"1\": {\"token\": \"\"}}"; /* explicitly empty is the operator's word */
    assert_int_equal(cq_mqperm_load(ok, strlen(ok), &p, err, sizeof(err)), 0);
    assert_true(cq_mqperm_auth(p, 1, ""));
    assert_true(cq_mqperm_auth(p, 1, NULL));
    assert_false(cq_mqperm_auth(p, 1, "x"));
    assert_false(cq_mqperm_auth(p, 2, ""));
    cq_mqperm_free(p);
}

/* A reloaded table takes effect at the engine's next drain; the handed-over one is owned. */
static void test_perms_reload(void **state)
{
    (void)state;
    eng_start(true, 0);
    const char j[] = "{\"3\": {\"token\": \"new3\", \"produce\": [\"orders\"]}}";
    cq_mqperm_t *p = NULL;
    char err[128];
    assert_int_equal(cq_mqperm_load(j, strlen(j), &p, err, sizeof(err)), 0);
    cq_mqsrv_set_perms(eng, p);
    fconn_t *f = fconn_new();
    connect_as(f, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    cq_mqsrv_drain(eng); /* the edge drains when woken */
    fconn_t *o = fconn_new(), *g = fconn_new();
    connect_as(o, 3, "s3",
               "2 1 {\"askid\":1,\"client_type\":1,\"err_code\":6,\"err_msg\":"
               "\"connect: unknown module_id or wrong token\",\"shard\":0,\"master\":true}");
    connect_as(g, 3, "new3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":3,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    fconn_free(f);
    fconn_free(g);
    fconn_free(o);
    eng_stop(); /* frees the reloaded table (ASan would see a leak) */
}

/* ---- the cluster (issue 11) ------------------------------------------------------------------ */

static cq_mq_msg_t *offset_req(uint8_t type, uint16_t id, const char *topic, int64_t offset)
{
    cq_mq_msg_t *m = req(type, id, id, topic);
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    return m;
}

/* A write is answered not_master (18) while the fence is closed, at admission (nothing reaches
 * the store) and at completion (committed, not acknowledged, not pushed); reads are served. */
static void test_fence(void **state)
{
    (void)state;
    cq_mqsrv_stats_t st;
    next_fence = true;
    next_shard = 3;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *w = fconn_new();
    connect_as(p, 1, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":3,"
               "\"master\":true}");
    connect_as(w, 2, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":2,\"err_code\":0,\"shard\":3,"
               "\"master\":true}");
    feed(w, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w, "8 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":0}");
    /* the fence closes between the submission and the commit */
    feed(p, produce_req(3, "orders", 2, 7));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    fence_open = false;
    r->prev_offset = 2;
    done_produce(r, 3);
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":18,\"err_msg\":\"produce: this "
              "server lost its shard's master role before the commit was acknowledged; the "
              "messages may be stored: retry with the same producer_id and seq on the shard's "
              "master\",\"shard\":3}");
    expect_nothing(w); /* pushes are what was acknowledged */
    /* closed: refused at admission, nothing submitted */
    feed(p, produce_req(4, "orders", 1, 0));
    expect(p, "12 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":18,\"err_msg\":\"produce: this "
              "server is not its shard's master now\",\"shard\":3}");
    feed(p, offset_req(CQ_MQ_REQ_COMMIT, 5, "orders", 1));
    expect(p, "16 5 {\"askid\":5,\"topic\":\"orders\",\"err_code\":18,\"err_msg\":\"commit: this "
              "server is not its shard's master now\"}");
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 6, 6, "brand_new"));
    expect(p, "6 6 {\"askid\":6,\"topic\":\"brand_new\",\"err_code\":18,\"err_msg\":\"add_topic: "
              "this server is not its shard's master now\"}");
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "orders", false), CQ_ENOTMASTER);
    cq_mqsrv_retention(eng, 1800000000000);
    assert_int_equal(fp.npending, 0);
    /* reads are served: an existing topic registers, consume, offset, topics, keepalive; the
     * fenced produce's rows are in the store, and counted */
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 7, 7, "orders"));
    expect(p, "6 7 {\"askid\":7,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":2}");
    feed(p, consume_req(8, "orders", 0, 5));
    r = take(CQ_WRITER_READ, "orders");
    r->recs = cq_calloc(2, sizeof(*r->recs));
    r->recs[0] = (cq_store_rec_t){.offset = 3,
                                  .create_ms = 5,
                                  .content = cq_strdup("a"),
                                  .len = 1,
                                  .producer_id = 7,
                                  .seq = 10};
    r->recs[1] = (cq_store_rec_t){
        .offset = 4, .create_ms = 6, .content = cq_strdup("b"), .len = 1}; /* no key: none sent */
    r->n_recs = 2;
    done(r, 0);
    expect(p, "14 8 {\"askid\":8,\"topic\":\"orders\",\"err_code\":0,\"total\":2,\"offset\":4,"
              "\"messages\":[{\"offset_id\":3,\"message\":\"a\",\"time\":5,\"producer_id\":7,"
              "\"seq\":10},{\"offset_id\":4,\"message\":\"b\",\"time\":6}],\"message_count\":2,"
              "\"shard\":3}");
    feed(p, req(CQ_MQ_REQ_OFFSET, 9, 9, "orders"));
    done(take(CQ_WRITER_GET_OFFSET, "orders"), -ENOENT);
    expect(p, "22 9 {\"askid\":9,\"topic\":\"orders\",\"err_code\":0,\"offset\":0,"
              "\"committed\":false,\"last_offset\":2,\"shard\":3}");
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 10, 10, NULL));
    expect(p, "4 10 {\"askid\":10,\"err_code\":0,\"weight\":0,\"shard\":3,\"master\":false}");
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.not_master, 5); /* 1 at completion, 4 at admission */
    assert_int_equal(st.produced, 0);
    /* open again: the same produce is acknowledged */
    fence_open = true;
    feed(p, produce_req(11, "orders", 1, 0));
    r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 4; /* the store's high water before it */
    done_produce(r, 5);
    expect(p, "12 11 {\"askid\":11,\"topic\":\"orders\",\"err_code\":0,\"total\":3,"
              "\"offsets\":[5],\"shard\":3}");
    /* rows 3 and 4 committed without an answer: the watcher gets them from the store, once */
    done_read(take(CQ_WRITER_READ, "orders"), 3, 3);
    expect(w, "18 0 {\"topic\":\"orders\",\"offset\":5,\"messages\":["
              "{\"offset_id\":3,\"message\":\"r3\",\"time\":1000},"
              "{\"offset_id\":4,\"message\":\"r4\",\"time\":1001},"
              "{\"offset_id\":5,\"message\":\"r5\",\"time\":1002}],\"message_count\":3,"
              "\"shard\":3}");
    fconn_free(p);
    fconn_free(w);
    eng_stop();
}

/* HTTP writes on a server that may not write: 503 with err_code 18; reads are served. */
static void test_fence_http(void **state)
{
    (void)state;
    next_fence = true;
    eng_start(true, 0);
    fence_open = false;
    fconn_t *f = fhttp_new();
    http(f, "POST", "/v1/topics/orders/messages", "3:s3", "{\"content\":\"a\"}");
    expect_resp(f, "503 Service Unavailable",
                "{\"err_code\":18,\"err_msg\":\"this server is not its shard's master now\"}");
    http(f, "POST", "/v1/topics", "1:s1", "{\"topic\":\"x\"}");
    expect_resp(f, "503 Service Unavailable",
                "{\"err_code\":18,\"err_msg\":\"this server is not its shard's master now\"}");
    http(f, "GET", "/v1/topics/orders/messages?offset=0", "2:s2", NULL);
    done_read(take(CQ_WRITER_READ, "orders"), 1, 0);
    expect_resp(f, "200 OK", "{\"messages\":[],\"next_offset\":0}");
    /* the fence closes between the submission and the commit */
    fence_open = true;
    http(f, "POST", "/v1/topics/orders/messages", "3:s3",
         "{\"content\":\"a\",\"producer_id\":4,\"seq\":1}");
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    fence_open = false;
    done_produce(r, 3);
    expect_resp(f, "503 Service Unavailable",
                "{\"err_code\":18,\"err_msg\":\"not the shard's master: produce on another "
                "server; the messages may be stored: retry with the same producer_id and seq on "
                "the shard's master\"}");
    fconn_free(f);
    eng_stop();
}

/* A record of content "r<offset>" with an idempotence key. */
static void set_rec(cq_store_rec_t *rec, uint64_t offset, uint64_t pid, uint64_t seq)
{
    char *c = cq_malloc(24);
    assert_non_null(c);
    snprintf(c, 24, "r%llu", (unsigned long long)offset);
    *rec = (cq_store_rec_t){.offset = offset,
                            .create_ms = 9,
                            .content = c,
                            .len = strlen(c),
                            .producer_id = pid,
                            .seq = seq};
}

/* A slave: its watchers get what replication brought, in order, exactly once, from polls of
 * the store; the topic list and the high waters are read again every second. */
static void test_slave_poll(void **state)
{
    (void)state;
    next_slave = true;
    next_shard = 1;
    eng_start(false, 2);
    fconn_t *w = fconn_new();
    connect_as(w, 2, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":1,"
               "\"master\":false}");
    feed(w, req(CQ_MQ_REQ_WATCH, 2, 2, "orders"));
    expect(w, "8 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":0}");
    cq_mqsrv_tick(eng, 1000);
    cq_writer_req_t *rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 2); /* after what the watcher was sent */
    assert_int_equal(rd->max, 2);
    cq_writer_req_t *ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    cq_writer_req_t *hw[3];
    hw[0] = take(CQ_WRITER_HIGH_WATER, "Paused"); /* in cache order */
    hw[1] = take(CQ_WRITER_HIGH_WATER, "keep");
    hw[2] = take(CQ_WRITER_HIGH_WATER, "orders");
    assert_int_equal(fp.npending, 0);
    /* a full read: the next one follows at once */
    rd->recs = cq_calloc(2, sizeof(*rd->recs));
    set_rec(&rd->recs[0], 3, 7, 1);
    set_rec(&rd->recs[1], 5, 0, 0);
    rd->n_recs = 2;
    done(rd, 0);
    expect(w, "18 0 {\"topic\":\"orders\",\"offset\":5,\"messages\":["
              "{\"offset_id\":3,\"message\":\"r3\",\"time\":9,\"producer_id\":7,\"seq\":1},"
              "{\"offset_id\":5,\"message\":\"r5\",\"time\":9}],\"message_count\":2,"
              "\"shard\":1}");
    rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 5);
    rd->recs = cq_calloc(1, sizeof(*rd->recs));
    set_rec(&rd->recs[0], 6, 7, 2);
    rd->n_recs = 1;
    done(rd, 0); /* short: caught up until the next poll */
    expect(w, "18 0 {\"topic\":\"orders\",\"offset\":6,\"messages\":["
              "{\"offset_id\":6,\"message\":\"r6\",\"time\":9,\"producer_id\":7,\"seq\":2}],"
              "\"message_count\":1,\"shard\":1}");
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_tick(eng, 1100); /* too soon for the next poll */
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_tick(eng, 1150);
    rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 6);
    done_read(rd, 7, 0);
    expect_nothing(w);
    /* the list brings a topic created on the master; its high water is read before polls */
    ls->topics = cq_calloc(2, sizeof(*ls->topics));
    ls->topics[0] = (cq_store_topic_t){.name = "fresh", .online = true, .retention_days = 3};
    ls->topics[1] = (cq_store_topic_t){.name = "Paused", .online = true, .retention_days = 7};
    ls->n_topics = 2;
    done(ls, 0);
    cq_writer_req_t *fh = take(CQ_WRITER_HIGH_WATER, "fresh");
    hw[2]->offset = 9; /* replication went on */
    hw[1]->offset = 12;
    for (int i = 0; i < 3; i++)
        done(hw[i], 0);
    fh->offset = 40;
    done(fh, 0);
    feed(w, req(CQ_MQ_REQ_TOPICS, 3, 3, NULL));
    expect(w, "24 3 {\"askid\":3,\"err_code\":0,\"topic_nums\":4,\"topics\":["
              "{\"topic\":\"fresh\",\"online\":true,\"retention_days\":3,\"last_offset\":40},"
              "{\"topic\":\"keep\",\"online\":true,\"retention_days\":0,\"last_offset\":12},"
              "{\"topic\":\"orders\",\"online\":true,\"retention_days\":30,\"last_offset\":9},"
              "{\"topic\":\"Paused\",\"online\":true,\"retention_days\":7,\"last_offset\":0}]}");
    /* a watcher of the new topic sees what commits after its high water */
    feed(w, req(CQ_MQ_REQ_WATCH, 4, 4, "fresh"));
    expect(w, "8 4 {\"askid\":4,\"topic\":\"fresh\",\"err_code\":0,\"topic_nums\":2,"
              "\"topic_message_total\":0}");
    /* so does one of a topic no one watched: from the high water of the last refresh */
    feed(w, req(CQ_MQ_REQ_WATCH, 5, 5, "keep"));
    expect(w, "8 5 {\"askid\":5,\"topic\":\"keep\",\"err_code\":0,\"topic_nums\":3,"
              "\"topic_message_total\":0}");
    cq_mqsrv_tick(eng, 1300);
    rd = take(CQ_WRITER_READ, "keep"); /* in cache order */
    assert_int_equal(rd->from_offset, 12);
    done_read(rd, 13, 0);
    rd = take(CQ_WRITER_READ, "orders");
    assert_int_equal(rd->from_offset, 6);
    done_read(rd, 7, 0);
    rd = take(CQ_WRITER_READ, "fresh");
    assert_int_equal(rd->from_offset, 40);
    done_read(rd, 41, 1);
    expect(w, "18 0 {\"topic\":\"fresh\",\"offset\":41,\"messages\":["
              "{\"offset_id\":41,\"message\":\"r41\",\"time\":1000}],\"message_count\":1,"
              "\"shard\":1}");
    assert_int_equal(fp.npending, 0);
    fconn_free(w);
    eng_stop();
}

/* A slave that becomes master reads each topic's high water and count back before it takes
 * produces to it; shard and epoch come with the role. */
static void test_role_handover(void **state)
{
    (void)state;
    next_slave = true;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":false}");
    cq_mqsrv_set_role(eng, true, 2, 5);
    cq_mqsrv_drain(eng);
    cq_writer_req_t *ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    cq_writer_req_t *paused = take(CQ_WRITER_TOPIC_STATS, "Paused");
    cq_writer_req_t *keep = take(CQ_WRITER_TOPIC_STATS, "keep");
    cq_writer_req_t *st = take(CQ_WRITER_TOPIC_STATS, "orders");
    feed(p, produce_req(2, "orders", 1, 0));
    expect(p, "12 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":11,\"err_msg\":\"produce: this "
              "server is taking over as its shard's master: retry\",\"shard\":2}");
    st->offset = 9;
    st->count = 5;
    done(st, 0);
    feed(p, produce_req(3, "orders", 1, 0));
    cq_writer_req_t *r = take(CQ_WRITER_PRODUCE, "orders");
    r->prev_offset = 9;
    done_produce(r, 11);
    expect(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"total\":6,"
              "\"offsets\":[11],\"shard\":2}");
    /* a failed reload is tried again at the tick */
    done(keep, CQ_ESTORE);
    done(paused, 0);
    done(ls, 0);
    cq_mqsrv_tick(eng, 1000);
    keep = take(CQ_WRITER_TOPIC_STATS, "keep");
    assert_int_equal(fp.npending, 0); /* a master neither polls nor refreshes */
    done(keep, 0);
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 4, 4, NULL));
    expect(p, "4 4 {\"askid\":4,\"err_code\":0,\"weight\":100,\"shard\":2,\"master\":true,"
              "\"epoch\":5}");
    cq_mqsrv_set_role(eng, false, 2, 6);
    cq_mqsrv_drain(eng);
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 5, 5, NULL));
    expect(p, "4 5 {\"askid\":5,\"err_code\":0,\"weight\":0,\"shard\":2,\"master\":false,"
              "\"epoch\":6}"); /* a slave knows its shard's epoch too */
    fconn_free(p);
    eng_stop();
}

/* --slave-reads off (doc/cluster.md "Standby reads"): a slave that knows its shard's master
 * answers every read read_on_master (20) naming it, on the seed protocol and the HTTP API;
 * writes stay not_master (18), connect, keepalive and unwatch are served. With no master known,
 * or as master, it serves reads. */
#define READ_WHY                                                                                   \
    "this server is a standby of shard 3 and serves no reads while the shard has a master "        \
    "(--slave-reads off): read on master=10.0.0.1:12110"
static void test_slave_reads_off(void **state)
{
    (void)state;
    next_slave = next_reads_off = true;
    next_shard = 3;
    eng_start(false, 0);
    fconn_t *p = fconn_new(), *h = fhttp_new();
    connect_as(p, 1, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":3,"
               "\"master\":false}");
    feed(p, consume_req(2, "orders", 0, -1)); /* no master known: served */
    done_read(take(CQ_WRITER_READ, "orders"), 1, 0);
    expect(p, "14 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":0,"
              "\"offset\":0,\"messages\":[],\"message_count\":0,\"shard\":3}");
    cq_mqsrv_set_master(eng, "10.0.0.1:12110");
    cq_mqsrv_drain(eng);
    feed(p, consume_req(3, "orders", 0, -1));
    expect(p,
           "14 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":20,\"err_msg\":\"consume: " READ_WHY
           "\",\"shard\":3}");
    feed(p, offset_req(CQ_MQ_REQ_OFFSET, 4, "orders", 0));
    expect(p,
           "22 4 {\"askid\":4,\"topic\":\"orders\",\"err_code\":20,\"err_msg\":\"offset: " READ_WHY
           "\",\"shard\":3}");
    feed(p, req(CQ_MQ_REQ_TOPICS, 5, 5, NULL));
    expect(p, "24 5 {\"askid\":5,\"err_code\":20,\"err_msg\":\"topics: " READ_WHY "\"}");
    feed(p, req(CQ_MQ_REQ_WATCH, 6, 6, "orders"));
    expect(p, "8 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":20,\"err_msg\":\"watch: " READ_WHY
              "\"}");
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 7, 7, "orders"));
    expect(
        p,
        "6 7 {\"askid\":7,\"topic\":\"orders\",\"err_code\":20,\"err_msg\":\"add_topic: " READ_WHY
        "\"}");
    feed(p, req(CQ_MQ_REQ_UNWATCH, 8, 8, "orders"));
    expect(p, "10 8 {\"askid\":8,\"topic\":\"orders\",\"err_code\":0}");
    feed(p, offset_req(CQ_MQ_REQ_COMMIT, 9, "orders", 1)); /* a write: as before */
    expect(p, "16 9 {\"askid\":9,\"topic\":\"orders\",\"err_code\":18,\"err_msg\":\"commit: this "
              "server is not its shard's master now\"}");
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 10, 10, NULL));
    expect(p, "4 10 {\"askid\":10,\"err_code\":0,\"weight\":0,\"shard\":3,\"master\":false}");
    http(h, "GET", "/v1/topics/orders/messages?offset=0", NULL, NULL);
    expect_resp(h, "503 Service Unavailable", "{\"err_code\":20,\"err_msg\":\"" READ_WHY "\"}");
    http(h, "GET", "/v1/topics", NULL, NULL);
    expect_resp(h, "503 Service Unavailable", "{\"err_code\":20,\"err_msg\":\"" READ_WHY "\"}");
    assert_int_equal(fp.npending, 0); /* nothing reached the store */
    /* the master is gone (the shard has none): the standby serves reads, as the seed says */
    cq_mqsrv_set_master(eng, NULL);
    cq_mqsrv_drain(eng);
    feed(p, consume_req(11, "orders", 0, -1));
    done_read(take(CQ_WRITER_READ, "orders"), 1, 0);
    expect(p, "14 11 {\"askid\":11,\"topic\":\"orders\",\"err_code\":0,\"total\":0,"
              "\"offset\":0,\"messages\":[],\"message_count\":0,\"shard\":3}");
    /* as master it serves whatever it was told last */
    cq_mqsrv_set_master(eng, "10.0.0.1:12110");
    cq_mqsrv_set_role(eng, true, 3, 2);
    cq_mqsrv_drain(eng);
    cq_writer_req_t *ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    done(take(CQ_WRITER_TOPIC_STATS, "Paused"), 0);
    done(take(CQ_WRITER_TOPIC_STATS, "keep"), 0);
    done(take(CQ_WRITER_TOPIC_STATS, "orders"), 0);
    done(ls, 0);
    feed(p, offset_req(CQ_MQ_REQ_OFFSET, 12, "orders", 0));
    done(take(CQ_WRITER_GET_OFFSET, "orders"), -ENOENT);
    expect(p, "22 12 {\"askid\":12,\"topic\":\"orders\",\"err_code\":0,\"offset\":0,"
              "\"committed\":false,\"last_offset\":2,\"shard\":3}");
    assert_int_equal(fp.npending, 0);
    fconn_free(p);
    fconn_free(h);
    eng_stop();
}

/* --slave-reads on (the default): a slave that knows its shard's master serves reads. */
static void test_slave_reads_on(void **state)
{
    (void)state;
    next_slave = true;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":false}");
    cq_mqsrv_set_master(eng, "10.0.0.1:12110");
    cq_mqsrv_drain(eng);
    feed(p, consume_req(2, "orders", 0, -1));
    done_read(take(CQ_WRITER_READ, "orders"), 1, 0);
    expect(p, "14 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"total\":0,"
              "\"offset\":0,\"messages\":[],\"message_count\":0,\"shard\":0}");
    feed(p, req(CQ_MQ_REQ_WATCH, 3, 3, "orders"));
    expect(p, "8 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
              "\"topic_message_total\":0}");
    fconn_free(p);
    eng_stop();
}

/* ---- cluster-wide topics -------------------------------------------------------------------- */

static void declare(const cq_mqsrv_topic_decl_t *d, size_t n)
{
    assert_int_equal(cq_mqsrv_topics_apply(eng, d, n), 0);
    cq_mqsrv_drain(eng);
}

/* on_topic: once per creation and online change the store recorded, through the seed protocol,
 * the HTTP API or the engine's own call; never for a topic that existed or a failed request. */
static void test_topic_told(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *adm = fconn_new(), *h = fhttp_new();
    connect_as(adm, 1, "s1",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 2, 2, "orders")); /* exists: registered, not created */
    expect(adm, "6 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0,\"topic_nums\":1,"
                "\"topic_message_total\":0}");
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 3, 3, "fresh"));
    done(take(CQ_WRITER_TOPIC_CREATE, "fresh"), 0);
    expect(adm, "6 3 {\"askid\":3,\"topic\":\"fresh\",\"err_code\":0,\"topic_nums\":2,"
                "\"topic_message_total\":0}");
    assert_string_equal(topic_log, "fresh 1 30;");
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 4, 4, "again"));
    done(take(CQ_WRITER_TOPIC_CREATE, "again"), CQ_EEXIST); /* someone else's: they told it */
    feed(adm, req(CQ_MQ_REQ_ADD_TOPIC, 5, 5, "broken"));
    done(take(CQ_WRITER_TOPIC_CREATE, "broken"), CQ_ESTORE);
    adm->at = adm->len;
    assert_string_equal(topic_log, "fresh 1 30;");
    http(h, "POST", "/v1/topics", "1:s1", "{\"topic\":\"web\",\"retention_days\":3}");
    done(take(CQ_WRITER_TOPIC_CREATE, "web"), 0);
    expect_resp(h, "200 OK", "{\"topic\":\"web\",\"created\":true}");
    http(h, "POST", "/v1/topics/WEB/offline", "1:s1", NULL);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "web"), 0);
    expect_resp(h, "200 OK", "{\"topic\":\"web\",\"online\":false}");
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "paused", true), 0);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "Paused"), 0);
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "orders", false), 0);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "orders"), CQ_ESTORE);
    assert_string_equal(topic_log, "fresh 1 30;web 1 3;web 0 3;Paused 1 7;");
    fconn_free(adm);
    fconn_free(h);
    eng_stop();
}

/* A master applies what is new or changed: creates the missing topics with their retention,
 * sets the online flags that differ, and tells on_topic none of it. */
static void test_topics_apply(void **state)
{
    (void)state;
    eng_start(false, 0);
    cq_mqsrv_topic_decl_t d[4] = {
        {"orders", false, 30}, {"keep", true, 0}, {"fresh", true, 5}, {"cold", false, 9}};
    declare(d, 4);
    cq_writer_req_t *off = take(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(off->online);
    cq_writer_req_t *fresh = take(CQ_WRITER_TOPIC_CREATE, "fresh");
    assert_int_equal(fresh->retention_days, 5);
    assert_int_equal(fresh->now_ms, 1700000000000);
    cq_writer_req_t *cold = take(CQ_WRITER_TOPIC_CREATE, "cold");
    assert_int_equal(cold->retention_days, 9);
    assert_int_equal(fp.npending, 0); /* keep is as declared */
    done(off, 0);
    done(fresh, 0);
    done(cold, 0); /* created online: then set offline, as declared */
    cq_writer_req_t *r = take(CQ_WRITER_TOPIC_SET_ONLINE, "cold");
    assert_false(r->online);
    done(r, 0);
    assert_int_equal(fp.npending, 0);
    assert_string_equal(topic_log, ""); /* nothing goes back to the registry */
    /* the same declaration again (a listing after another topic changed): nothing to do, even
     * where this server changed a topic since (its publication is not yet in the listing) */
    assert_int_equal(cq_mqsrv_topic_set_online(eng, "orders", true), 0);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "orders"), 0);
    assert_string_equal(topic_log, "orders 1 30;");
    declare(d, 4);
    assert_int_equal(fp.npending, 0);
    /* a changed declaration is applied; a failure is tried again at the tick */
    d[0].online = true;
    d[1].online = false;
    declare(d, 4);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "keep"), CQ_ESTORE);
    assert_int_equal(fp.npending, 0); /* orders is online already */
    cq_mqsrv_tick(eng, 5000);
    r = take(CQ_WRITER_TOPIC_SET_ONLINE, "keep");
    assert_false(r->online);
    done(r, 0);
    cq_mqsrv_tick(eng, 10000);
    assert_int_equal(fp.npending, 0);
    assert_string_equal(topic_log, "orders 1 30;");
    eng_stop();
}

/* A slave only remembers; becoming master (and once its fence opens) it applies the whole
 * declaration, after its topic list was read back. */
static void test_topics_apply_at_promotion(void **state)
{
    (void)state;
    next_slave = true;
    next_fence = true;
    eng_start(false, 0);
    cq_mqsrv_topic_decl_t d[2] = {{"orders", false, 30}, {"fresh", true, 5}};
    declare(d, 2);
    cq_mqsrv_tick(eng, 1000);
    cq_writer_req_t *ls = take(CQ_WRITER_TOPIC_LIST, NULL); /* a slave's refresh */
    for (int i = 0; i < 3; i++)
        done(take(CQ_WRITER_HIGH_WATER, NULL), 0);
    done(ls, 0);
    assert_int_equal(fp.npending, 0); /* nothing written as a slave */
    fence_open = false;
    cq_mqsrv_set_role(eng, true, 1, 3);
    cq_mqsrv_drain(eng);
    ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    for (int i = 0; i < 3; i++)
        done(take(CQ_WRITER_TOPIC_STATS, NULL), 0);
    assert_int_equal(fp.npending, 0); /* the list is not back yet */
    fence_open = true;
    cq_mqsrv_tick(eng, 1100);
    assert_int_equal(fp.npending, 0);
    done(ls, 0);
    cq_writer_req_t *off = take(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(off->online);
    done(take(CQ_WRITER_TOPIC_CREATE, "fresh"), 0);
    done(off, 0);
    assert_int_equal(fp.npending, 0);
    /* slave again: its database shows orders online (written by another master); the
     * declaration did not change, yet a new master applies all of it once more */
    cq_mqsrv_set_role(eng, false, 1, 4);
    cq_mqsrv_drain(eng);
    cq_mqsrv_tick(eng, 3000);
    ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    for (int i = 0; i < 4; i++)
        done(take(CQ_WRITER_HIGH_WATER, NULL), 0);
    ls->topics = cq_calloc(1, sizeof(*ls->topics));
    ls->topics[0] = (cq_store_topic_t){.name = "orders", .online = true, .retention_days = 30};
    ls->n_topics = 1;
    done(ls, 0);
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_set_role(eng, true, 1, 5);
    cq_mqsrv_drain(eng);
    ls = take(CQ_WRITER_TOPIC_LIST, NULL);
    for (int i = 0; i < 4; i++)
        done(take(CQ_WRITER_TOPIC_STATS, NULL), 0);
    done(ls, 0);
    off = take(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(off->online);
    done(off, 0);
    assert_int_equal(fp.npending, 0);
    assert_string_equal(topic_log, "");
    eng_stop();
}

/* The keepalive weight: 100 scaled by the writer's free pending room and by the recent mean
 * commit time over CQ_MQSRV_WEIGHT_SLOW_US; never 0 while writable. */
static void test_weight(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    wstats.pending = 250;
    wstats.max_pending = 1000;
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 1, 1, NULL));
    expect(p, "4 1 {\"askid\":1,\"err_code\":0,\"weight\":75,\"shard\":0,\"master\":true}");
    wstats.transactions = 7;
    wstats.commit_us_sum = 7 * 40000; /* 40 ms per commit */
    cq_mqsrv_tick(eng, 1000);
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 2, 2, NULL));
    expect(p, "4 2 {\"askid\":2,\"err_code\":0,\"weight\":18,\"shard\":0,\"master\":true}");
    wstats.transactions = 17;
    wstats.commit_us_sum += 10 * 5000; /* the last second: 5 ms per commit */
    wstats.pending = 1000;
    cq_mqsrv_tick(eng, 2000);
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 3, 3, NULL));
    expect(p, "4 3 {\"askid\":3,\"err_code\":0,\"weight\":1,\"shard\":0,\"master\":true}");
    wstats.pending = 0;
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 4, 4, NULL));
    expect(p, "4 4 {\"askid\":4,\"err_code\":0,\"weight\":100,\"shard\":0,\"master\":true}");
    fconn_free(p);
    eng_stop();
}

/* ---- the manager's link (issue 13) ------------------------------------------------------------
 */

/* Checks that the next frame sent to f starts with want ("<type> <msg id> <body prefix>"). */
static void expect_prefix(fconn_t *f, const char *want)
{
    cq_mq_frame_t fr;
    ssize_t r = cq_mq_parse(f->out + f->at, f->len - f->at, 0, &fr);
    assert_true(r > 0);
    char got[4096];
    snprintf(got, sizeof(got), "%u %u %.*s", fr.type, fr.msg_id, (int)fr.body_len,
             (const char *)fr.body);
    if (strncmp(got, want, strlen(want)) != 0)
        fprintf(stderr, "# want %s...\n#  got %s\n", want, got);
    assert_int_equal(strncmp(got, want, strlen(want)), 0);
    f->at += (size_t)r;
}

/* Takes the submitted request of op on topic wherever it is in the queue. */
static cq_writer_req_t *take_any(cq_writer_op_t op, const char *topic)
{
    for (size_t i = 0; i < fp.npending; i++) {
        cq_writer_req_t *r = fp.pending[i];
        if (r->op == op && (!topic || strcmp(r->topic, topic) == 0)) {
            memmove(fp.pending + i, fp.pending + i + 1, (--fp.npending - i) * sizeof(r));
            return r;
        }
    }
    fail_msg("no request %d on %s was submitted", (int)op, topic ? topic : "-");
    return NULL;
}

static void done_all(void)
{
    while (fp.npending)
        done(take(fp.pending[0]->op, NULL), 0);
}

/* ---- retryable holes (holes.c) -------------------------------------------------------------- */

/* Feeds a produce of n messages with producer pid and seqs seq.. on p; returns what reached
 * the store. */
static cq_writer_req_t *produce_seq(fconn_t *p, uint16_t id, size_t n, int64_t pid, int64_t seq)
{
    cq_mq_msg_t *m = produce_req(id, "orders", n, pid);
    m->seq = seq;
    feed(p, m);
    return take(CQ_WRITER_PRODUCE, "orders");
}

/* Completes r as the writer would acknowledge its new messages (above the high water 100). */
static void ack_new(fconn_t *p, cq_writer_req_t *r)
{
    r->prev_offset = 100;
    done_produce(r, 101);
    expect_prefix(p, "12 ");
}

static void expect_marked(const cq_writer_req_t *r, bool hole)
{
    for (size_t i = 0; i < r->n_msgs; i++)
        assert_int_equal(r->msgs[i].hole, hole);
}

static uint64_t holes(void)
{
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    return st.holes;
}

/* The keys of produces refused with "retry with the same producer_id and seq" (storage, busy)
 * are remembered as ranges per (topic, producer): a later produce's messages with those keys
 * are marked for the store, others are not. Touching ranges merge; refusals a retry would meet
 * again (sequence errors, a produce that never fits) leave none; ranges expire
 * CQ_MQSRV_HOLE_TTL_MS after the tick that first saw them, and there are at most
 * CQ_MQSRV_HOLES_MAX. */
static void test_holes(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "",
               "2 1 {\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    ack_new(p, produce_seq(p, 2, 1, 7, 1)); /* nothing refused yet: nothing marked */
    cq_writer_req_t *r = produce_seq(p, 3, 3, 7, 10);
    expect_marked(r, false);
    done(r, CQ_ESTORE);
    expect_prefix(p, "12 3 {\"askid\":3,\"topic\":\"orders\",\"err_code\":12,");
    assert_int_equal(holes(), 1);
    r = produce_seq(p, 4, 3, 7, 10); /* the retry */
    expect_marked(r, true);
    ack_new(p, r);
    r = produce_seq(p, 5, 1, 7, 11); /* inside the range */
    expect_marked(r, true);
    ack_new(p, r);
    r = produce_seq(p, 6, 2, 7, 12); /* 12 is, 13 is not */
    assert_true(r->msgs[0].hole);
    assert_false(r->msgs[1].hole);
    ack_new(p, r);
    r = produce_seq(p, 7, 1, 8, 10); /* another producer */
    expect_marked(r, false);
    ack_new(p, r);
    /* a refusal a retry would meet again leaves no hole */
    r = produce_seq(p, 8, 1, 9, 10);
    done(r, CQ_ESEQCONFLICT);
    expect_prefix(p, "12 8 {\"askid\":8,\"topic\":\"orders\",\"err_code\":15,");
    fp.fail = CQ_ELIMIT;
    feed(p, produce_req(9, "orders", 1, 9));
    expect_prefix(p, "12 9 {\"askid\":9,\"topic\":\"orders\",\"err_code\":11,");
    assert_int_equal(holes(), 1);
    /* busy at submission does */
    fp.fail = CQ_EBUSY;
    cq_mq_msg_t *m = produce_req(10, "orders", 1, 9);
    m->seq = 20;
    feed(p, m);
    expect_prefix(p, "12 10 {\"askid\":10,\"topic\":\"orders\",\"err_code\":11,");
    fp.fail = 0;
    assert_int_equal(holes(), 2);
    r = produce_seq(p, 11, 1, 9, 20);
    expect_marked(r, true);
    ack_new(p, r);
    /* 13 touches 10..12: one range */
    r = produce_seq(p, 12, 1, 7, 13);
    done(r, CQ_ESTORE);
    expect_prefix(p, "12 12 ");
    assert_int_equal(holes(), 2);
    r = produce_seq(p, 13, 4, 7, 10);
    expect_marked(r, true);
    ack_new(p, r);
    /* expiry: the first tick stamps, the tick HOLE_TTL_MS later forgets */
    cq_mqsrv_tick(eng, 5000);
    cq_mqsrv_tick(eng, 5000 + CQ_MQSRV_HOLE_TTL_MS - 1);
    assert_int_equal(holes(), 2);
    cq_mqsrv_tick(eng, 5000 + CQ_MQSRV_HOLE_TTL_MS);
    assert_int_equal(holes(), 0);
    r = produce_seq(p, 14, 1, 7, 10);
    expect_marked(r, false);
    ack_new(p, r);
    /* the bound: seqs 0, 2, 4, ... each a range of its own; the last one is dropped */
    r = produce_seq(p, 15, 1, 11, 0);
    for (uint64_t i = 1; i <= CQ_MQSRV_HOLES_MAX; i++)
        assert_int_equal(cq_writer_req_add_msg(r, "x", 1, 11, 2 * i), 0);
    done(r, CQ_ESTORE);
    expect_prefix(p, "12 15 ");
    cq_mqsrv_stats_t st;
    cq_mqsrv_stats(eng, &st);
    assert_int_equal(st.holes, CQ_MQSRV_HOLES_MAX);
    assert_int_equal(st.holes_dropped, 1);
    fconn_free(p);
    eng_stop();
}

static const char offline_msg[] = "\"err_code\":19,\"err_msg\":\"produce: this server was taken "
                                  "offline by an operator: produce on another server\"";

/* Offline: a produce admitted before is acknowledged at its completion (draining meanwhile);
 * new produces and creating add_topics are answered server_offline (19) before the store; a
 * consume still works; keepalive weight 0; online again takes produces. */
static void test_offline(void **state)
{
    (void)state;
    eng_start(false, 0);
    fconn_t *p = fconn_new();
    connect_as(p, 1, "s1",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    feed(p, produce_req(2, "orders", 1, 0));
    cq_writer_req_t *before = take(CQ_WRITER_PRODUCE, "orders");
    cq_mqsrv_set_offline(eng, true);
    bool off, draining;
    cq_mqsrv_offline_state(eng, &off, &draining);
    assert_true(off);
    assert_true(draining);
    feed(p, produce_req(3, "orders", 1, 0));
    char want[512];
    snprintf(want, sizeof(want), "12 3 {\"askid\":3,\"topic\":\"orders\",%s,\"shard\":0}",
             offline_msg);
    expect(p, want);
    feed(p, req(CQ_MQ_REQ_ADD_TOPIC, 4, 4, "fresh"));
    expect_prefix(p, "6 4 {\"askid\":4,\"topic\":\"fresh\",\"err_code\":19,");
    assert_int_equal(fp.npending, 0); /* nothing reached the store */
    feed(p, req(CQ_MQ_REQ_KEEPALIVE, 5, 5, NULL));
    expect(p, "4 5 {\"askid\":5,\"err_code\":0,\"weight\":0,\"shard\":0,\"master\":true}");
    done_produce(before, 10); /* the drain: acknowledged */
    expect_prefix(p, "12 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":0");
    cq_mqsrv_offline_state(eng, &off, &draining);
    assert_false(draining);
    cq_sbuf_t m;
    cq_sbuf_init(&m);
    assert_int_equal(cq_mqsrv_metrics(eng, &m), 0);
    assert_int_equal(cq_sbuf_append(&m, "", 1), 0);
    assert_non_null(strstr((char *)m.data, "\nchanq_mq_offline 1\n"));
    assert_non_null(strstr((char *)m.data, "\nchanq_mq_offline_refused_total 2\n"));
    cq_sbuf_done(&m);
    cq_mqsrv_set_offline(eng, false);
    feed(p, produce_req(6, "orders", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "orders"), 20);
    expect_prefix(p, "12 6 {\"askid\":6,\"topic\":\"orders\",\"err_code\":0");
    fconn_free(p);
    eng_stop();
}

/* The link's output, decoded: exactly one frame of kind. */
static cq_mqmgr_msg_t *link_out(cq_mgrlink_t *l, cq_mqmgr_kind_t kind)
{
    cq_sbuf_t *o = cq_mgrlink_output(l);
    cq_mq_frame_t f;
    ssize_t n = cq_mq_parse(o->data, o->len, CQ_MQMGR_MAX_TOTAL, &f);
    assert_true(n > 0);
    assert_int_equal((size_t)n, o->len);
    cq_mqmgr_msg_t *m = NULL;
    char err[256];
    assert_int_equal(cq_mqmgr_decode(&f, 0, &m, err, sizeof(err)), 0);
    cq_sbuf_consume(o, (size_t)n);
    assert_int_equal(m->kind, kind);
    return m;
}

/* Feeds m (taken) to the link as the manager would send it. */
static int link_in(cq_mgrlink_t *l, cq_mqmgr_msg_t *m, uint64_t now)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mqmgr_encode(m, &b, &n), 0);
    cq_mqmgr_msg_free(m);
    int r = cq_mgrlink_input(l, b, n, now);
    cq_free(b);
    return r;
}

static cq_mgrlink_t *link_new(uint32_t appid)
{
    cq_mgrlink_opts_t o = {.group_id = 3, .appid = appid, .token = "sek", .report_ms = 2000};
    cq_mgrlink_t *l = cq_mgrlink_new(eng, &o);
    assert_non_null(l);
    cq_mgrlink_bound(l, "127.0.0.1:7001");
    return l;
}

/* A sync: the seed's serverinfo and chanq's ext from the host's figures and the engine's; one
 * per report period; the manager's err 6 closes. */
static void test_mgrlink_sync(void **state)
{
    (void)state;
    eng_start(true, 0);
    cq_mgrlink_t *l = link_new(0);
    assert_int_equal(cq_mgrlink_appid(l), 7001); /* shard 0 * 65536 + port */
    assert_false(cq_mgrlink_sync_due(l, 5));
    cq_mgrlink_connected(l);
    assert_true(cq_mgrlink_sync_due(l, 5));
    cq_mgrlink_host_t h = {.threads = 9,
                           .cpu = 12,
                           .mem = 34,
                           .sockets = 5,
                           .queued_bytes = 1025,
                           .has_repl = true,
                           .repl = {.replica = true,
                                    .io_running = true,
                                    .lag_seconds = 3,
                                    .lag_transactions = 4,
                                    .behind_ms = 5000}};
    wstats.pending = 7;
    assert_int_equal(cq_mgrlink_sync(l, &h, 5), 0);
    cq_mqmgr_msg_t *m = link_out(l, CQ_MQMGR_SYNC);
    assert_int_equal(m->askid, 1);
    assert_int_equal(m->group_id, 3);
    assert_int_equal(m->appid, 7001);
    assert_string_equal(m->token, "sek");
    assert_int_equal(m->info.threads, 9);
    assert_int_equal(m->info.packages, 9); /* 7 pending + 2 KiB queued */
    assert_int_equal(m->info.cpu, 12);
    assert_int_equal(m->info.mem, 34);
    assert_int_equal(m->info.sockets, 5);
    assert_string_equal(m->ext.addr, "127.0.0.1:7001");
    assert_true(m->ext.master);
    assert_false(m->ext.offline);
    assert_true(m->ext.has & CQ_MQMGR_X_REPL);
    assert_false(m->ext.repl.sql_running);
    assert_int_equal(m->ext.repl.behind_ms, 5000);
    assert_int_equal(m->ext.ntopics, 3);
    assert_string_equal(m->ext.topics[2].name, "orders");
    assert_int_equal(m->ext.topics[2].last_offset, 2);
    cq_mqmgr_msg_free(m);
    assert_false(cq_mgrlink_sync_due(l, 2004));
    assert_true(cq_mgrlink_sync_due(l, 2005));
    /* the manager refuses the token */
    m = cq_mqmgr_msg_new(CQ_MQMGR_SYNC_RESP, 1);
    m->askid = 1;
    m->has_askid = true;
    m->err_code = 6;
    assert_int_equal(link_in(l, m, 10), CQ_EAUTH);
    cq_mgrlink_disconnected(l);
    assert_false(cq_mgrlink_sync_due(l, 99999));
    cq_mgrlink_free(l);
    eng_stop();
}

/* A relay node's report: its gauges, identity, addresses (an off transport left out) and
 * links, as the host's figures gave them; a node 0 report carries the gauges only. */
static void test_mgrlink_relay_node(void **state)
{
    (void)state;
    eng_start(true, 0);
    cq_mgrlink_t *l = link_new(0);
    cq_mgrlink_connected(l);
    cq_mgrlink_link_t links[2] = {{.peer = 1,
                                   .up = true,
                                   .packets_in = 10,
                                   .packets_out = 11,
                                   .bytes_out = 1200,
                                   .gaps = 2,
                                   .resets = 1,
                                   .lost = 3},
                                  {.peer = 3}};
    cq_mgrlink_host_t h = {.has_relay = true,
                           .relay = {.tcp = 4,
                                     .kcp = 1,
                                     .channels = {1, 0, 2},
                                     .subscribers = 5,
                                     .node = 2,
                                     .global_home = 1,
                                     .members = 3,
                                     .cluster = "eu-1",
                                     .addrs = {"10.0.0.2:7100", "10.0.0.2:7180", "", NULL},
                                     .links = links,
                                     .nlinks = 2}};
    assert_int_equal(cq_mgrlink_sync(l, &h, 5), 0);
    cq_mqmgr_msg_t *m = link_out(l, CQ_MQMGR_SYNC);
    const cq_mqmgr_relay_t *r = &m->ext.relay;
    assert_true(m->ext.has & CQ_MQMGR_X_RELAY);
    assert_int_equal(r->connections[0], 4);
    assert_int_equal(r->connections[3], 1);
    assert_int_equal(r->channels[2], 2);
    assert_int_equal(r->subscribers, 5);
    assert_int_equal(r->node, 2);
    assert_string_equal(r->cluster, "eu-1");
    assert_int_equal(r->global_home, 1);
    assert_int_equal(r->members, 3);
    assert_string_equal(r->addrs[0], "10.0.0.2:7100");
    assert_string_equal(r->addrs[1], "10.0.0.2:7180");
    assert_string_equal(r->addrs[2], "");
    assert_string_equal(r->addrs[3], "");
    assert_int_equal(r->nlinks, 2);
    assert_int_equal(r->links[0].peer, 1);
    assert_true(r->links[0].up);
    assert_int_equal(r->links[0].packets_in, 10);
    assert_int_equal(r->links[0].packets_out, 11);
    assert_int_equal(r->links[0].bytes_out, 1200);
    assert_int_equal(r->links[0].gaps, 2);
    assert_int_equal(r->links[0].resets, 1);
    assert_int_equal(r->links[0].lost, 3);
    assert_int_equal(r->links[1].peer, 3);
    assert_false(r->links[1].up);
    cq_mqmgr_msg_free(m);
    h.relay.node = 0;
    assert_int_equal(cq_mgrlink_sync(l, &h, 2005), 0);
    m = link_out(l, CQ_MQMGR_SYNC);
    assert_int_equal(m->ext.relay.connections[0], 4);
    assert_int_equal(m->ext.relay.node, 0);
    assert_int_equal(m->ext.relay.nlinks, 0);
    cq_mqmgr_msg_free(m);
    cq_mgrlink_free(l);
    eng_stop();
}

static cq_mqmgr_msg_t *command(uint32_t askid, uint32_t cmdid)
{
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, (uint16_t)askid);
    assert_non_null(m);
    m->askid = askid;
    m->has_askid = true;
    m->cmdid = cmdid;
    return m;
}

static cq_mqmgr_msg_t *publish(uint32_t askid, int64_t version, const char *modules,
                               bool orders_online)
{
    cq_mqmgr_msg_t *m = command(askid, CQ_MQMGR_CMD_PUBLISH_CONFIG);
    m->config.version = version;
    assert_int_equal(cq_mqmgr_config_set_modules(&m->config, modules, strlen(modules)), 0);
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "orders", orders_online, 3600), 0);
    return m;
}

/* The answer to a command: askid, cmdid, err_code and the start of err_msg. */
static void expect_answer(cq_mgrlink_t *l, uint32_t askid, uint32_t cmdid, uint32_t err,
                          const char *msg)
{
    cq_mqmgr_msg_t *m = link_out(l, CQ_MQMGR_COMMAND_RESP);
    assert_int_equal(m->askid, askid);
    assert_int_equal(m->cmdid, cmdid);
    assert_int_equal(m->err_code, err);
    if (msg) {
        assert_non_null(m->err_msg);
        if (strncmp(m->err_msg, msg, strlen(msg)) != 0)
            fprintf(stderr, "# err_msg %s\n", m->err_msg);
        assert_int_equal(strncmp(m->err_msg, msg, strlen(msg)), 0);
    }
    cq_mqmgr_msg_free(m);
}

/* publish_config swaps the permissions (enforced at the next drain), sets a topic offline
 * through the store and takes its retention in seconds; a bad one changes nothing and is
 * answered 5; offline refuses produces with 19. */
/* A master engine with a connected link (appid 42) and module 3 connected as a producer. */
static cq_mgrlink_t *link_producer(fconn_t **ret_p)
{
    eng_start(false, 0);
    cq_mgrlink_t *l = link_new(42);
    cq_mgrlink_connected(l);
    *ret_p = fconn_new();
    connect_as(*ret_p, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    return l;
}

static void test_mgrlink_commands(void **state)
{
    (void)state;
    fconn_t *p;
    cq_mgrlink_t *l = link_producer(&p);
    assert_int_equal(
        link_in(l, publish(77, 5, "{\"3\":{\"token\":\"s3\",\"produce\":[\"keep\"]}}", false), 1),
        0);
    expect_answer(l, 77, 1, 0, NULL);
    cq_writer_req_t *r = take(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(r->online);
    done(r, 0); /* the drain also swaps the permissions in */
    feed(p, produce_req(2, "orders", 1, 0));
    expect_prefix(p, "12 2 {\"askid\":2,\"topic\":\"orders\",\"err_code\":7");
    cq_mqsrv_retention(eng, 10000000);
    done(take(CQ_WRITER_PURGE, "Paused"), 0);
    r = take(CQ_WRITER_PURGE, "orders");
    assert_int_equal(r->older_than_ms, 10000000 - 3600 * 1000); /* seconds, not the store's days */
    done(r, 0);
    cq_mgrlink_stats_t st;
    cq_mgrlink_stats(l, &st);
    assert_int_equal(st.config_version, 5);
    /* a table that does not load: answered 5, nothing changes */
    assert_int_equal(link_in(l, publish(78, 6, "{\"3\":{\"token\":5}}", true), 2), 0);
    expect_answer(l, 78, 1, 5, "content.modules: ");
    cq_mgrlink_stats(l, &st);
    assert_int_equal(st.config_version, 5);
    assert_int_equal(fp.npending, 0);
    /* offline, then online */
    cq_mqmgr_msg_t *m = command(79, CQ_MQMGR_CMD_OFFLINE);
    m->offline = true;
    assert_int_equal(link_in(l, m, 3), 0);
    expect_answer(l, 79, 2, 0, NULL);
    feed(p, produce_req(3, "keep", 1, 0));
    char want[512];
    snprintf(want, sizeof(want), "12 3 {\"askid\":3,\"topic\":\"keep\",%s", offline_msg);
    expect_prefix(p, want);
    cq_mgrlink_host_t h = {0};
    assert_int_equal(cq_mgrlink_sync(l, &h, 4), 0);
    m = link_out(l, CQ_MQMGR_SYNC);
    assert_true(m->ext.offline);
    assert_int_equal(m->ext.config_version, 5);
    assert_int_equal(m->appid, 42);
    cq_mqmgr_msg_free(m);
    m = command(80, CQ_MQMGR_CMD_OFFLINE);
    m->offline = false;
    assert_int_equal(link_in(l, m, 5), 0);
    expect_answer(l, 80, 2, 0, NULL);
    feed(p, produce_req(4, "keep", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "keep"), 1);
    expect_prefix(p, "12 4 {\"askid\":4,\"topic\":\"keep\",\"err_code\":0");
    fconn_free(p);
    cq_mgrlink_free(l);
    eng_stop();
}

/* A topic whose retention the manager never set (a console toggle of a topic it did not know)
 * keeps the server's own: orders' 30 days stay in force and its rows still expire (issue 25:
 * the toggle used to write 0, keep forever). */
static void test_mgrlink_retention_unset(void **state)
{
    (void)state;
    fconn_t *p;
    cq_mgrlink_t *l = link_producer(&p);
    cq_mqmgr_msg_t *m = command(77, CQ_MQMGR_CMD_PUBLISH_CONFIG);
    m->config.version = 2;
    assert_int_equal(
        cq_mqmgr_config_add_topic(&m->config, "orders", false, CQ_MQMGR_RETENTION_UNSET), 0);
    assert_int_equal(link_in(l, m, 1), 0);
    expect_answer(l, 77, 1, 0, NULL);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "orders"), 0);
    cq_mqsrv_retention(eng, 10000000000);
    done(take(CQ_WRITER_PURGE, "Paused"), 0);
    cq_writer_req_t *r = take(CQ_WRITER_PURGE, "orders");
    assert_int_equal(r->older_than_ms, 10000000000 - 30 * 86400000LL); /* its own 30 days */
    done(r, 0);
    assert_int_equal(fp.npending, 0);
    fconn_free(p);
    cq_mgrlink_free(l);
    eng_stop();
}

/* A publish_config without modules (the manager has none yet) leaves the server's own table in
 * force: module 3 still produces; one with modules replaces it, and from then on SIGHUP leaves
 * the permissions file alone (cq_mgrlink_perms_managed). */
static void test_mgrlink_unmanaged(void **state)
{
    (void)state;
    fconn_t *p;
    cq_mgrlink_t *l = link_producer(&p);
    cq_mqmgr_msg_t *m = command(77, CQ_MQMGR_CMD_PUBLISH_CONFIG);
    m->config.version = 1;
    assert_int_equal(link_in(l, m, 1), 0);
    expect_answer(l, 77, 1, 0, NULL);
    assert_false(cq_mgrlink_perms_managed(l));
    feed(p, produce_req(2, "keep", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "keep"), 1);
    expect_prefix(p, "12 2 {\"askid\":2,\"topic\":\"keep\",\"err_code\":0");
    assert_int_equal(
        link_in(l, publish(78, 2, "{\"3\":{\"token\":\"s3\",\"consume\":[\"keep\"]}}", false), 2),
        0);
    expect_answer(l, 78, 1, 0, NULL);
    assert_true(cq_mgrlink_perms_managed(l));
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "orders"), 0); /* the drain swaps the table in */
    feed(p, produce_req(3, "keep", 1, 0));
    expect_prefix(p, "12 3 {\"askid\":3,\"topic\":\"keep\",\"err_code\":7");
    fconn_free(p);
    cq_mgrlink_free(l);
    eng_stop();
}

/* The bridge's side of the link in these tests: the documents it was handed; one whose
 * msg_type is 1 is refused as cq_bindings_parse would. */
static struct {
    int calls;
    char last[256];
} fb;

static int fake_apply_bindings(void *ud, const char *json, size_t len, char *err, size_t errlen)
{
    assert_ptr_equal(ud, &fb);
    fb.calls++;
    snprintf(fb.last, sizeof(fb.last), "%.*s", (int)len, json);
    if (strstr(fb.last, "\"msg_type\":1}")) {
        snprintf(err, errlen, "binding 0: \"msg_type\" must be an integer from 100 to 65535");
        return CQ_ECONFIG;
    }
    return 0;
}

static cq_mqmgr_msg_t *publish_bindings(uint32_t askid, int64_t version, const char *modules,
                                        const char *bindings)
{
    cq_mqmgr_msg_t *m = publish(askid, version, modules, false);
    assert_int_equal(cq_mqmgr_config_set_bindings(&m->config, bindings, strlen(bindings)), 0);
    return m;
}

#define KEEP_ONLY_CONSUME "{\"3\":{\"token\":\"s3\",\"consume\":[\"keep\"]}}"
#define KEEP_PRODUCE      "{\"3\":{\"token\":\"s3\",\"produce\":[\"keep\"]}}"
#define VIP_BINDINGS      "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}"

/* publish_config's bindings go to the bridge once per document (the same one again is left
 * alone); one the bridge refuses is answered err 5 "content.bindings: <why>" and nothing of the
 * command applies: not the modules, not the topics, not the version. */
static void test_mgrlink_bindings(void **state)
{
    (void)state;
    memset(&fb, 0, sizeof(fb));
    eng_start(false, 0);
    cq_mgrlink_opts_t o = {.group_id = 3,
                           .appid = 42,
                           .token = "sek",
                           .apply_bindings = fake_apply_bindings,
                           .bindings_ud = &fb};
    cq_mgrlink_t *l = cq_mgrlink_new(eng, &o);
    assert_non_null(l);
    cq_mgrlink_connected(l);
    fconn_t *p = fconn_new();
    connect_as(p, 3, "s3",
               "2 1 "
               "{\"askid\":1,\"client_type\":1,\"client_id\":1,\"err_code\":0,\"shard\":0,"
               "\"master\":true}");
    /* without bindings the bridge is not asked (the server keeps its --bridge-file) */
    assert_int_equal(link_in(l, publish(70, 1, KEEP_PRODUCE, true), 1), 0);
    expect_answer(l, 70, 1, 0, NULL);
    assert_int_equal(fb.calls, 0);
    /* with bindings: handed over compact, once */
    assert_int_equal(link_in(l,
                             publish_bindings(71, 2, KEEP_PRODUCE,
                                              "{ \"bindings\": [ {\"topic\": \"vip\", \"route\": "
                                              "\"user_id\", \"msg_type\": 201} ] }"),
                             2),
                     0);
    expect_answer(l, 71, 1, 0, NULL);
    assert_int_equal(fb.calls, 1);
    assert_string_equal(fb.last, VIP_BINDINGS);
    done(take(CQ_WRITER_TOPIC_SET_ONLINE, "orders"), 0);
    assert_int_equal(link_in(l, publish_bindings(72, 3, KEEP_PRODUCE, VIP_BINDINGS), 3), 0);
    expect_answer(l, 72, 1, 0, NULL);
    assert_int_equal(fb.calls, 1); /* the same document: left alone */
    cq_mgrlink_stats_t st;
    cq_mgrlink_stats(l, &st);
    assert_int_equal(st.config_version, 3);
    /* refused: the bridge's exact text, and the modules that would stop module 3 producing,
     * the version and the topics stay as they were */
    assert_int_equal(link_in(l,
                             publish_bindings(73, 4, KEEP_ONLY_CONSUME,
                                              "{\"bindings\":[{\"topic\":\"vip\",\"route\":"
                                              "\"user_id\",\"msg_type\":1}]}"),
                             4),
                     0);
    cq_mqmgr_msg_t *m = link_out(l, CQ_MQMGR_COMMAND_RESP);
    assert_int_equal(m->askid, 73);
    assert_int_equal(m->err_code, 5);
    assert_string_equal(m->err_msg, "content.bindings: binding 0: \"msg_type\" must be an integer "
                                    "from 100 to 65535");
    cq_mqmgr_msg_free(m);
    assert_int_equal(fb.calls, 2);
    cq_mgrlink_stats(l, &st);
    assert_int_equal(st.config_version, 3);
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_drain(eng);
    feed(p, produce_req(2, "keep", 1, 0));
    done_produce(take(CQ_WRITER_PRODUCE, "keep"), 1);
    expect_prefix(p, "12 2 {\"askid\":2,\"topic\":\"keep\",\"err_code\":0");
    /* the refused document is not remembered: the one in force is still left alone */
    assert_int_equal(link_in(l, publish_bindings(74, 5, KEEP_PRODUCE, VIP_BINDINGS), 5), 0);
    expect_answer(l, 74, 1, 0, NULL);
    assert_int_equal(fb.calls, 2);
    /* an empty list is a document too */
    assert_int_equal(link_in(l, publish_bindings(75, 6, KEEP_PRODUCE, "{\"bindings\":[]}"), 6), 0);
    expect_answer(l, 75, 1, 0, NULL);
    assert_int_equal(fb.calls, 3);
    assert_string_equal(fb.last, "{\"bindings\":[]}");
    fconn_free(p);
    cq_mgrlink_free(l);
    /* a link that takes no bindings (a relay node: no bridge) ignores them; the rest applies */
    l = link_new(43);
    cq_mgrlink_connected(l);
    assert_int_equal(link_in(l, publish_bindings(76, 7, KEEP_PRODUCE, VIP_BINDINGS), 7), 0);
    m = link_out(l, CQ_MQMGR_COMMAND_RESP);
    assert_int_equal(m->err_code, 0);
    cq_mqmgr_msg_free(m);
    cq_mgrlink_free(l);
    done_all();
    eng_stop();
}

/* A slave records the managed flags; once it is master the tick sets them. */
static cq_mqmgr_msg_t *invalidate_cmd(uint32_t askid, const char *topic, uint64_t offset)
{
    cq_mqmgr_msg_t *m = command(askid, CQ_MQMGR_CMD_INVALIDATE);
    snprintf(m->topic, sizeof(m->topic), "%s", topic);
    m->offset = offset;
    return m;
}

/* Command 3 (issue 25): the master's store invalidates, and the answer goes when it is done;
 * the store's -ENOENT is err 21 no_message; an unknown topic is answered at once; a link freed
 * while the store works answers no one. */
static void test_mgrlink_invalidate(void **state)
{
    (void)state;
    fconn_t *p;
    cq_mgrlink_t *l = link_producer(&p);
    assert_int_equal(link_in(l, invalidate_cmd(81, "orders", 5), 1), 0);
    assert_int_equal(cq_mgrlink_output(l)->len, 0); /* not before the store is done */
    cq_writer_req_t *r = take(CQ_WRITER_INVALIDATE, "orders");
    assert_int_equal(r->offset, 5);
    done(r, 0);
    expect_answer(l, 81, 3, 0, NULL);
    assert_int_equal(link_in(l, invalidate_cmd(82, "orders", 6), 2), 0);
    done(take(CQ_WRITER_INVALIDATE, "orders"), -ENOENT);
    expect_answer(l, 82, 3, 21, "topic orders: no message at offset 6");
    assert_int_equal(link_in(l, invalidate_cmd(83, "nosuch", 6), 3), 0);
    expect_answer(l, 83, 3, 8, "topic nosuch: unknown on this server");
    assert_int_equal(fp.npending, 0);
    assert_int_equal(link_in(l, invalidate_cmd(84, "orders", 7), 4), 0);
    r = take(CQ_WRITER_INVALIDATE, "orders");
    cq_mgrlink_free(l);
    done(r, 0); /* no link: nothing to answer, nothing touched */
    fconn_free(p);
    eng_stop();
}

/* Completes a READ_ONE with one row (content of len bytes) in state. */
static void done_one(cq_writer_req_t *r, const char *content, size_t len, int state)
{
    r->recs = cq_calloc(1, sizeof(*r->recs));
    assert_non_null(r->recs);
    r->recs[0] = (cq_store_rec_t){.offset = r->offset,
                                  .create_ms = 1700000000123,
                                  .producer_id = 42,
                                  .seq = 7,
                                  .content = cq_strndup(content, len),
                                  .len = len};
    r->n_recs = 1;
    r->state = state;
    done(r, 0);
}

/* The answer to command 4 askid: its "message" (err 0), or its err and text. */
static void expect_message(cq_mgrlink_t *l, uint32_t askid, uint32_t err, const char *want)
{
    cq_mqmgr_msg_t *m = link_out(l, CQ_MQMGR_COMMAND_RESP);
    assert_int_equal(m->askid, askid);
    assert_int_equal(m->cmdid, CQ_MQMGR_CMD_MESSAGE);
    assert_int_equal(m->err_code, err);
    const char *got = err ? m->err_msg : m->message;
    assert_non_null(got);
    if (strcmp(got, want) != 0)
        fail_msg("got %s\nwant %s", got, want);
    cq_mqmgr_msg_free(m);
}

/* Command 4 (issue 25's lookup): one row whatever its state, read by the store on any role;
 * its content as text, hex when not UTF-8, cut at CQ_MGRLINK_CONTENT_CAP. */
static void test_mgrlink_message(void **state)
{
    (void)state;
    fconn_t *p;
    cq_mgrlink_t *l = link_producer(&p);
    cq_mqmgr_msg_t *m = invalidate_cmd(90, "orders", 5);
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    assert_int_equal(link_in(l, m, 1), 0);
    assert_int_equal(cq_mgrlink_output(l)->len, 0);
    cq_writer_req_t *r = take(CQ_WRITER_READ_ONE, "orders");
    assert_int_equal(r->offset, 5);
    done_one(r, "{\"v\":\"1.2\"}", 11, 0);
    expect_message(l, 90, 0,
                   "{\"offset\":5,\"state\":0,\"create_time\":1700000000123,\"producer_id\":42,"
                   "\"seq\":7,\"size\":11,\"truncated\":false,\"content\":\"{\\\"v\\\":"
                   "\\\"1.2\\\"}\"}");
    m = invalidate_cmd(91, "orders", 6);
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    assert_int_equal(link_in(l, m, 2), 0);
    done_one(take(CQ_WRITER_READ_ONE, "orders"), "\xff\x00\x01", 3, 1);
    expect_message(l, 91, 0,
                   "{\"offset\":6,\"state\":1,\"create_time\":1700000000123,\"producer_id\":42,"
                   "\"seq\":7,\"size\":3,\"truncated\":false,\"content_hex\":\"ff0001\"}");
    static char big[5000];
    memset(big, 'a', sizeof(big));
    m = invalidate_cmd(92, "orders", 7);
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    assert_int_equal(link_in(l, m, 3), 0);
    done_one(take(CQ_WRITER_READ_ONE, "orders"), big, sizeof(big), 1);
    cq_mqmgr_msg_t *a = link_out(l, CQ_MQMGR_COMMAND_RESP);
    assert_non_null(strstr(a->message, "\"size\":5000,\"truncated\":true,\"content\":\"aaa"));
    assert_int_equal(strlen(strstr(a->message, "\"content\":\"")) - 13, 4096);
    cq_mqmgr_msg_free(a);
    m = invalidate_cmd(93, "orders", 8);
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    assert_int_equal(link_in(l, m, 4), 0);
    done(take(CQ_WRITER_READ_ONE, "orders"), -ENOENT);
    expect_message(l, 93, 21, "topic orders: no message at offset 8");
    m = invalidate_cmd(94, "nosuch", 8);
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    assert_int_equal(link_in(l, m, 5), 0);
    expect_message(l, 94, 8, "topic nosuch: unknown on this server");
    m = invalidate_cmd(95, "orders", 0); /* by producer key */
    m->cmdid = CQ_MQMGR_CMD_MESSAGE;
    m->key_producer = 77;
    m->key_seq = 3;
    assert_int_equal(link_in(l, m, 6), 0);
    r = take(CQ_WRITER_READ_ONE, "orders");
    assert_int_equal(r->offset, 0);
    assert_true(r->key_producer == 77 && r->key_seq == 3);
    done(r, -ENOENT);
    expect_message(l, 95, 21, "topic orders: no message of producer 77 seq 3");
    fconn_free(p);
    cq_mgrlink_free(l);
    eng_stop();
}

/* On a slave, command 3 is refused at once with 18 not_master: nothing reaches the store. */
static void test_mgrlink_invalidate_slave(void **state)
{
    (void)state;
    next_slave = true;
    eng_start(false, 0);
    cq_mgrlink_t *l = link_new(1);
    cq_mgrlink_connected(l);
    assert_int_equal(link_in(l, invalidate_cmd(9, "orders", 5), 1), 0);
    expect_answer(l, 9, 3, 18, "this server is not its shard's master now");
    assert_int_equal(fp.npending, 0);
    cq_mgrlink_free(l);
    eng_stop();
}

/* POST /v1/topics/T/messages/O/invalidate: admin only, the offset checked, the store's answer
 * (or its -ENOENT as 404 no_message). */
static void test_http_invalidate(void **state)
{
    (void)state;
    eng_start(true, 0);
    fconn_t *f = fhttp_new();
    http(f, "POST", "/v1/topics/orders/messages/5/invalidate", "2:s2", "{}");
    expect_resp(f, "403 Forbidden",
                "{\"err_code\":7,\"err_msg\":\"module 2 may not administer topics\"}");
    http(f, "POST", "/v1/topics/orders/messages/5/invalidate", "1:s1", "{}");
    cq_writer_req_t *r = take(CQ_WRITER_INVALIDATE, "orders");
    assert_int_equal(r->offset, 5);
    done(r, 0);
    expect_resp(f, "200 OK", "{\"topic\":\"orders\",\"offset\":5,\"state\":0}");
    http(f, "POST", "/v1/topics/orders/messages/6/invalidate", "1:s1", "{}");
    done(take(CQ_WRITER_INVALIDATE, "orders"), -ENOENT);
    expect_resp(f, "404 Not Found",
                "{\"err_code\":21,\"err_msg\":\"topic orders: no message at offset 6\"}");
    http(f, "POST", "/v1/topics/orders/messages/0/invalidate", "1:s1", "{}");
    expect_resp(f, "400 Bad Request",
                "{\"err_code\":17,\"err_msg\":\"offset: must be an integer in [1, "
                "9007199254740991]\"}");
    http(f, "POST", "/v1/topics/orders/messages/9007199254740992/invalidate", "1:s1", "{}");
    expect_resp(f, "400 Bad Request",
                "{\"err_code\":17,\"err_msg\":\"offset: must be an integer in [1, "
                "9007199254740991]\"}");
    http(f, "POST", "/v1/topics/orders/messages/x/invalidate", "1:s1", "{}");
    expect_resp(f, "400 Bad Request",
                "{\"err_code\":17,\"err_msg\":\"offset: must be an integer in [1, "
                "9007199254740991]\"}");
    http(f, "POST", "/v1/topics/nosuch/messages/5/invalidate", "1:s1", "{}");
    expect_resp(f, "404 Not Found",
                "{\"err_code\":8,\"err_msg\":\"topic \\\"nosuch\\\" does not exist\"}");
    assert_int_equal(fp.npending, 0);
    fconn_free(f);
    eng_stop();
}

static void test_mgrlink_slave(void **state)
{
    (void)state;
    next_slave = true;
    eng_start(false, 0);
    cq_mgrlink_t *l = link_new(1);
    cq_mgrlink_connected(l);
    assert_int_equal(link_in(l, publish(5, 2, "{}", false), 1), 0);
    expect_answer(l, 5, 1, 0, NULL);
    cq_mgrlink_tick(l, 2);
    assert_int_equal(fp.npending, 0);
    cq_mqsrv_set_role(eng, true, 0, 1);
    cq_mqsrv_drain(eng);
    cq_mgrlink_tick(l, 3);
    cq_writer_req_t *r = take_any(CQ_WRITER_TOPIC_SET_ONLINE, "orders");
    assert_false(r->online);
    done(r, 0);
    done_all();
    cq_mgrlink_free(l);
    eng_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_add_topic),
        cmocka_unit_test(test_produce),
        cmocka_unit_test(test_consume),
        cmocka_unit_test(test_commit_offset),
        cmocka_unit_test(test_watch_push),
        cmocka_unit_test(test_catchup_retry_on_tick),
        cmocka_unit_test(test_catchup_commit_during_read),
        cmocka_unit_test(test_sink),
        cmocka_unit_test(test_online_retention),
        cmocka_unit_test(test_close_in_flight),
        cmocka_unit_test(test_push_refs),
        cmocka_unit_test(test_sendq_limits),
        cmocka_unit_test(test_topic_cache),
        cmocka_unit_test(test_inbox),
        cmocka_unit_test(test_metrics_port),
        cmocka_unit_test(test_http_ops),
        cmocka_unit_test(test_http_invalidate),
        cmocka_unit_test(test_mgrlink_invalidate),
        cmocka_unit_test(test_mgrlink_invalidate_slave),
        cmocka_unit_test(test_mgrlink_message),
        cmocka_unit_test(test_fence),
        cmocka_unit_test(test_fence_http),
        cmocka_unit_test(test_slave_poll),
        cmocka_unit_test(test_role_handover),
        cmocka_unit_test(test_slave_reads_off),
        cmocka_unit_test(test_slave_reads_on),
        cmocka_unit_test(test_weight),
        cmocka_unit_test(test_topic_told),
        cmocka_unit_test(test_topics_apply),
        cmocka_unit_test(test_topics_apply_at_promotion),
        cmocka_unit_test(test_writes_need_loopback),
        cmocka_unit_test(test_connect_budget),
        cmocka_unit_test(test_perm_token_required),
        cmocka_unit_test(test_perms_reload),
        cmocka_unit_test(test_offline),
        cmocka_unit_test(test_holes),
        cmocka_unit_test(test_mgrlink_sync),
        cmocka_unit_test(test_mgrlink_relay_node),
        cmocka_unit_test(test_mgrlink_commands),
        cmocka_unit_test(test_mgrlink_unmanaged),
        cmocka_unit_test(test_mgrlink_retention_unset),
        cmocka_unit_test(test_mgrlink_bindings),
        cmocka_unit_test(test_mgrlink_slave),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
