/* test_mq_client.c - the sans-I/O durable-topic client core (clients/c/chanq_mq.h) against
 * frames encoded with the codec: requests it queues, responses fed at every split, askid
 * matching out of order, push routing, err_code mapping, automatic produce seqs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq_mq.h"
#include "cq_alloc.h"

/* ---- recording callbacks ------------------------------------------------------------------- */

#define MAXREC 64

typedef struct rec {
    int n;
    int err[MAXREC];
    uint8_t type[MAXREC];
    uint32_t askid[MAXREC];
    char topic[MAXREC][CQ_MQ_TOPIC_MAX + 1];
    char err_msg[MAXREC][64];
    int64_t first[MAXREC]; /* offsets[0] or items[0].offset, -1 when none */
} rec_t;

static void record(rec_t *r, int err, const cq_mq_msg_t *m)
{
    assert_true(r->n < MAXREC);
    int i = r->n++;
    r->err[i] = err;
    r->type[i] = m ? m->type : 0;
    r->askid[i] = m ? m->askid : 0;
    r->first[i] = -1;
    r->topic[i][0] = r->err_msg[i][0] = '\0';
    if (!m)
        return;
    strcpy(r->topic[i], m->topic);
    if (m->err_msg)
        snprintf(r->err_msg[i], sizeof(r->err_msg[i]), "%s", m->err_msg);
    if (m->noffsets)
        r->first[i] = m->offsets[0];
    else if (m->nitems)
        r->first[i] = m->items[0].offset;
}

static void done_cb(chanq_mq_t *c, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)c;
    record(ud, err, resp);
    cq_mq_msg_free(resp);
}

static void push_cb(chanq_mq_t *c, cq_mq_msg_t *m, void *ud)
{
    (void)c;
    record(ud, 0, m);
    cq_mq_msg_free(m);
}

/* ---- frames -------------------------------------------------------------------------------- */

/* Decodes every frame queued in c's output into reqs[] (owned) and consumes it. */
static size_t take_out(chanq_mq_t *c, cq_mq_msg_t **reqs, size_t cap)
{
    size_t len, n = 0;
    const uint8_t *p = chanq_mq_out(c, &len);
    size_t off = 0;
    while (off < len) {
        cq_mq_frame_t f;
        ssize_t k = cq_mq_parse(p + off, len - off, 0, &f);
        assert_true(k > 0);
        assert_true(n < cap);
        assert_int_equal(cq_mq_decode(&f, NULL, &reqs[n], NULL, 0), 0);
        assert_int_equal(reqs[n]->msg_id, (uint16_t)reqs[n]->askid);
        n++;
        off += (size_t)k;
    }
    chanq_mq_out_consume(c, len);
    chanq_mq_out(c, &len);
    assert_int_equal(len, 0);
    return n;
}

/* Appends the encoding of m (taken) to buf. */
static size_t append(uint8_t *buf, size_t at, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    memcpy(buf + at, b, n);
    cq_free(b);
    cq_mq_msg_free(m);
    return at + n;
}

static cq_mq_msg_t *ok_resp(const cq_mq_msg_t *req)
{
    cq_mq_msg_t *r = cq_mq_resp_new(req, 0, NULL);
    assert_non_null(r);
    return r;
}

static cq_mq_msg_t *push_msg(const char *topic, int64_t offset)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    assert_int_equal(cq_mq_msg_set_topic(m, topic), 0);
    assert_int_equal(cq_mq_msg_add_item(m, offset, -1, "pushed", 6, false), 0);
    m->offset = offset;
    m->has |= CQ_MQ_F_TOPIC | CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    return m;
}

static chanq_mq_content_t one(const char *s)
{
    return (chanq_mq_content_t){s, strlen(s), false, -1};
}

/* ---- cases --------------------------------------------------------------------------------- */

/* Requests carry fresh askids, msg_id = askid, and the fields of the protocol. */
static void test_requests_encoded(void **state)
{
    (void)state;
    chanq_mq_t *c = chanq_mq_new(NULL);
    uint32_t ids[8];
    chanq_mq_content_t two[2] = {one("a"), {"{\"k\":1}", 7, true, 5}};
    chanq_mq_produce_t p = {"orders", two, 2, 0, -1, 99};
    assert_int_equal(chanq_mq_connect(c, 7, "tok", CQ_MQ_CONSUMER, NULL, NULL, &ids[0]), 0);
    assert_int_equal(chanq_mq_keepalive(c, NULL, NULL, &ids[1]), 0);
    assert_int_equal(chanq_mq_add_topic(c, "orders", NULL, NULL, &ids[2]), 0);
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, &ids[3]), 0);
    assert_int_equal(chanq_mq_consume(c, "orders", 12, 5, NULL, NULL, &ids[4]), 0);
    assert_int_equal(chanq_mq_commit(c, "orders", 13, NULL, NULL, &ids[5]), 0);
    assert_int_equal(chanq_mq_watch(c, "orders", NULL, NULL, NULL, NULL, &ids[6]), 0);
    assert_int_equal(chanq_mq_unwatch(c, "orders", NULL, NULL, &ids[7]), 0);
    assert_int_equal(chanq_mq_pending(c), 8);
    /* nothing is queued for a bad request */
    assert_int_equal(chanq_mq_add_topic(c, "bad-name", NULL, NULL, NULL), CQ_EBADTOPIC);
    p.n = 0;
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), CQ_EFIELD);

    cq_mq_msg_t *r[8];
    assert_int_equal(take_out(c, r, 8), 8);
    static const uint8_t types[] = {CQ_MQ_REQ_CONNECT, CQ_MQ_REQ_KEEPALIVE, CQ_MQ_REQ_ADD_TOPIC,
                                    CQ_MQ_REQ_PRODUCE, CQ_MQ_REQ_CONSUME,   CQ_MQ_REQ_COMMIT,
                                    CQ_MQ_REQ_WATCH,   CQ_MQ_REQ_UNWATCH};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(r[i]->type, types[i]);
        assert_int_equal(r[i]->askid, ids[i]);
        for (int j = 0; j < i; j++)
            assert_int_not_equal(ids[i], ids[j]);
    }
    assert_int_equal(r[0]->module_id, 7);
    assert_string_equal(r[0]->token, "tok");
    assert_int_equal(r[0]->client_type, CQ_MQ_CONSUMER);
    assert_true(r[3]->has & CQ_MQ_F_BATCH);
    assert_false(r[3]->has & (CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ));
    assert_int_equal(r[3]->time, 99);
    assert_int_equal(r[3]->nitems, 2);
    assert_string_equal(r[3]->items[1].content, "{\"k\":1}");
    assert_true(r[3]->items[1].json);
    assert_int_equal(r[3]->items[1].time, 5);
    assert_int_equal(r[4]->offset, 12);
    assert_int_equal(r[4]->max_count, 5);
    assert_int_equal(r[5]->offset, 13);
    assert_false(r[5]->has & CQ_MQ_F_MAX_COUNT);
    for (int i = 0; i < 8; i++)
        cq_mq_msg_free(r[i]);
    chanq_mq_free(c);
}

/* Three answers in reverse order plus a push, fed at every split point (two pieces and three
 * pieces) and byte by byte: each completes its own request exactly once. */
static void run_split(size_t a, size_t b)
{
    rec_t done = {0}, pushes = {0};
    chanq_mq_t *c = chanq_mq_new(NULL);
    uint32_t ids[3];
    chanq_mq_content_t m = one("x");
    chanq_mq_produce_t p = {"t1", &m, 1, 0, -1, -1};
    assert_int_equal(chanq_mq_keepalive(c, done_cb, &done, &ids[0]), 0);
    assert_int_equal(chanq_mq_produce(c, &p, done_cb, &done, &ids[1]), 0);
    assert_int_equal(chanq_mq_watch(c, "t1", push_cb, &pushes, done_cb, &done, &ids[2]), 0);
    cq_mq_msg_t *r[3];
    assert_int_equal(take_out(c, r, 3), 3);

    uint8_t buf[4096];
    size_t n = 0;
    n = append(buf, n, ok_resp(r[2]));
    cq_mq_msg_t *pr = ok_resp(r[1]);
    assert_int_equal(cq_mq_msg_add_offset(pr, 41), 0);
    n = append(buf, n, pr);
    n = append(buf, n, push_msg("t1", 41));
    n = append(buf, n, ok_resp(r[0]));
    for (int i = 0; i < 3; i++)
        cq_mq_msg_free(r[i]);

    if (a == 0) { /* byte by byte */
        for (size_t i = 0; i < n; i++)
            assert_int_equal(chanq_mq_feed(c, buf + i, 1), 0);
    } else {
        a = a > n ? n : a;
        b = b > n ? n : (b < a ? a : b);
        assert_int_equal(chanq_mq_feed(c, buf, a), 0);
        assert_int_equal(chanq_mq_feed(c, buf + a, b - a), 0);
        assert_int_equal(chanq_mq_feed(c, buf + b, n - b), 0);
    }
    assert_int_equal(done.n, 3);
    assert_int_equal(done.askid[0], ids[2]);
    assert_int_equal(done.type[0], CQ_MQ_RESP_WATCH);
    assert_int_equal(done.askid[1], ids[1]);
    assert_int_equal(done.first[1], 41);
    assert_int_equal(done.askid[2], ids[0]);
    assert_int_equal(done.type[2], CQ_MQ_RESP_KEEPALIVE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(done.err[i], 0);
    assert_int_equal(pushes.n, 1);
    assert_int_equal(pushes.first[0], 41);
    assert_string_equal(pushes.topic[0], "t1");
    assert_int_equal(chanq_mq_pending(c), 0);
    chanq_mq_free(c);
}

static void test_every_split(void **state)
{
    (void)state;
    run_split(0, 0);
    for (size_t a = 1; a < 400; a++)
        run_split(a, a);
    for (size_t a = 1; a < 300; a += 7)
        for (size_t b = a; b < 400; b += 5)
            run_split(a, b);
}

/* Pushes go to their topic's callback, others to opts.on_push; unwatch stops the routing; a
 * refused watch removes its callback. */
static void test_push_routing(void **state)
{
    (void)state;
    rec_t dflt = {0}, t1 = {0}, done = {0};
    chanq_mq_opts_t o = {.on_push = push_cb, .ud = &dflt};
    chanq_mq_t *c = chanq_mq_new(&o);
    uint8_t buf[2048];
    size_t n = 0;
    assert_int_equal(chanq_mq_watch(c, "t1", push_cb, &t1, done_cb, &done, NULL), 0);
    assert_int_equal(chanq_mq_watch(c, "t2", push_cb, &t1, done_cb, &done, NULL), 0);
    cq_mq_msg_t *r[2];
    assert_int_equal(take_out(c, r, 2), 2);
    n = append(buf, n, ok_resp(r[0]));
    n = append(buf, n, cq_mq_resp_new(r[1], CQ_EACL, "watch: no"));
    n = append(buf, n, push_msg("t1", 1));
    n = append(buf, n, push_msg("t2", 2)); /* refused watch: default callback */
    n = append(buf, n, push_msg("t3", 3));
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(done.n, 2);
    assert_int_equal(done.err[1], CQ_EACL);
    assert_string_equal(done.err_msg[1], "watch: no");
    assert_int_equal(t1.n, 1);
    assert_int_equal(t1.first[0], 1);
    assert_int_equal(dflt.n, 2);
    assert_int_equal(dflt.first[0], 2);
    assert_int_equal(dflt.first[1], 3);
    cq_mq_msg_free(r[0]);
    cq_mq_msg_free(r[1]);

    assert_int_equal(chanq_mq_unwatch(c, "t1", NULL, NULL, NULL), 0);
    assert_int_equal(take_out(c, r, 1), 1);
    n = append(buf, 0, push_msg("t1", 4));
    n = append(buf, n, ok_resp(r[0]));
    cq_mq_msg_free(r[0]);
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(t1.n, 1);
    assert_int_equal(dflt.n, 3);
    assert_int_equal(chanq_mq_pending(c), 0);
    chanq_mq_free(c);
}

/* Every err_code maps to its CQ_E* code and reaches the callback with err_msg. */
static void test_error_mapping(void **state)
{
    (void)state;
    static const int want[] = {0,
                               CQ_EHEADER,
                               CQ_EBADLEN,
                               CQ_EJSON,
                               CQ_ENOTYPE,
                               CQ_EFIELD,
                               CQ_EAUTH,
                               CQ_EACL,
                               CQ_ENOTOPIC,
                               CQ_EOFFLINE,
                               CQ_ECONTENT,
                               CQ_EBUSY,
                               CQ_ESTORE,
                               CQ_EBADTOPIC,
                               -EREMOTEIO,
                               CQ_ESEQCONFLICT,
                               CQ_ESEQORDER,
                               CQ_EOFFRANGE,
                               CQ_ENOTMASTER,
                               CQ_ESRVOFFLINE,
                               CQ_EREADMASTER,
                               CQ_ENOMSG};
    for (uint32_t i = 0; i <= CQ_MQ_ERRCODE_MAX; i++) {
        assert_int_equal(chanq_mq_err(i), want[i]);
        if (i)
            assert_int_equal(cq_mq_errcode(want[i]), (int)i); /* the codec's inverse */
    }
    assert_int_equal(chanq_mq_err(CQ_MQ_ERRCODE_MAX + 1), -EREMOTEIO);
    assert_int_equal(chanq_mq_err(UINT32_MAX), -EREMOTEIO);

    rec_t done = {0}, dflt = {0};
    chanq_mq_opts_t o = {.on_push = push_cb, .ud = &dflt};
    chanq_mq_t *c = chanq_mq_new(&o);
    uint32_t ids[2];
    assert_int_equal(chanq_mq_consume(c, "nope", 0, 0, done_cb, &done, &ids[0]), 0);
    assert_int_equal(chanq_mq_keepalive(c, done_cb, &done, &ids[1]), 0);
    cq_mq_msg_t *r[2];
    assert_int_equal(take_out(c, r, 2), 2);
    uint8_t buf[2048];
    size_t n = append(buf, 0, cq_mq_resp_new(r[0], CQ_ENOTOPIC, "consume: no such topic"));
    /* an error frame (type 20) with the askid completes the request */
    cq_mq_msg_t *e = cq_mq_msg_new(CQ_MQ_RESP_ERROR, 0);
    e->askid = ids[1];
    e->err_code = CQ_MQ_ERR_UNKNOWN_TYPE;
    e->has |= CQ_MQ_F_ASKID | CQ_MQ_F_ERR_CODE;
    n = append(buf, n, e);
    /* without an askid, or with an unknown one, it is unsolicited */
    e = cq_mq_msg_new(CQ_MQ_RESP_ERROR, 0);
    e->err_code = CQ_MQ_ERR_BAD_HEADER;
    e->has |= CQ_MQ_F_ERR_CODE;
    n = append(buf, n, e);
    cq_mq_msg_t *stray = ok_resp(r[1]);
    stray->askid = 777;
    n = append(buf, n, stray);
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(done.n, 2);
    assert_int_equal(done.err[0], CQ_ENOTOPIC);
    assert_string_equal(done.err_msg[0], "consume: no such topic");
    assert_int_equal(done.err[1], CQ_ENOTYPE);
    assert_int_equal(done.type[1], CQ_MQ_RESP_ERROR);
    assert_int_equal(dflt.n, 2);
    assert_int_equal(dflt.type[0], CQ_MQ_RESP_ERROR);
    assert_int_equal(dflt.askid[1], 777);
    cq_mq_msg_free(r[0]);
    cq_mq_msg_free(r[1]);
    chanq_mq_free(c);
}

/* A response of the wrong type for its askid does not complete the request. */
static void test_type_mismatch(void **state)
{
    (void)state;
    rec_t done = {0};
    chanq_mq_t *c = chanq_mq_new(NULL);
    uint32_t id;
    assert_int_equal(chanq_mq_keepalive(c, done_cb, &done, &id), 0);
    cq_mq_msg_t *r[1];
    assert_int_equal(take_out(c, r, 1), 1);
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_COMMIT, 0);
    m->askid = id;
    m->has |= CQ_MQ_F_ASKID;
    assert_int_equal(cq_mq_msg_set_topic(m, "t"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    cq_mq_msg_t *wrong = ok_resp(m); /* commit_resp with the keepalive's askid */
    cq_mq_msg_free(m);
    uint8_t buf[512];
    size_t n = append(buf, 0, wrong);
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(done.n, 0);
    n = append(buf, 0, ok_resp(r[0]));
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(done.n, 1);
    cq_mq_msg_free(r[0]);
    chanq_mq_free(c);
}

/* Stream errors: a bad header and a request type from the server. */
static void test_stream_errors(void **state)
{
    (void)state;
    chanq_mq_t *c = chanq_mq_new(NULL);
    uint8_t hdr[CQ_MQ_HDR_LEN + 2];
    cq_mq_header_write(hdr, sizeof(hdr), CQ_MQ_RESP_KEEPALIVE, 1);
    memcpy(hdr + CQ_MQ_HDR_LEN, "{}", 2);
    hdr[6] = 2; /* version */
    assert_int_equal(chanq_mq_feed(c, hdr, sizeof(hdr)), CQ_EHEADER);
    chanq_mq_free(c);

    c = chanq_mq_new(NULL);
    uint8_t buf[256];
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_KEEPALIVE, 1);
    m->askid = 1;
    m->has |= CQ_MQ_F_ASKID;
    size_t n = append(buf, 0, m);
    assert_int_equal(chanq_mq_feed(c, buf, n), CQ_ENOTYPE);
    chanq_mq_free(c);
}

/* Automatic seqs per producer id; explicit seqs advance them; no key without a producer id. */
static void test_produce_seq(void **state)
{
    (void)state;
    chanq_mq_t *c = chanq_mq_new(NULL);
    chanq_mq_content_t m[3] = {one("a"), one("b"), one("c")};
    chanq_mq_produce_t p = {"t", m, 2, 7, -1, -1};
    assert_int_equal(chanq_mq_next_seq(c, 7), 0);
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0); /* seq 0, 1 */
    p.n = 3;
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0); /* seq 2..4 */
    assert_int_equal(chanq_mq_next_seq(c, 7), 5);
    p.seq = 10;
    p.n = 1;
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0); /* explicit */
    p.seq = 2; /* a retry does not move the counter back */
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0);
    assert_int_equal(chanq_mq_next_seq(c, 7), 11);
    p.producer_id = 8;
    p.seq = -1;
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0); /* another id: 0 */
    p.producer_id = 0;
    assert_int_equal(chanq_mq_produce(c, &p, NULL, NULL, NULL), 0);
    cq_mq_msg_t *r[6];
    assert_int_equal(take_out(c, r, 6), 6);
    static const int64_t seqs[] = {0, 2, 10, 2, 0};
    static const int64_t pids[] = {7, 7, 7, 7, 8};
    for (int i = 0; i < 5; i++) {
        assert_true(r[i]->has & CQ_MQ_F_SEQ);
        assert_int_equal(r[i]->seq, seqs[i]);
        assert_int_equal(r[i]->producer_id, pids[i]);
    }
    assert_true(r[0]->has & CQ_MQ_F_BATCH);
    assert_true(r[2]->has & CQ_MQ_F_CONTENT);
    assert_false(r[5]->has & (CQ_MQ_F_SEQ | CQ_MQ_F_PRODUCER_ID));
    for (int i = 0; i < 6; i++)
        cq_mq_msg_free(r[i]);
    chanq_mq_free(c);
}

/* fail_all completes everything with the error; a cancelled request's answer is dropped; the
 * connect answer records the client id; askids stay unique. */
static void test_fail_cancel_connect(void **state)
{
    (void)state;
    rec_t done = {0};
    chanq_mq_t *c = chanq_mq_new(NULL);
    uint32_t ids[3];
    assert_int_equal(chanq_mq_client_id(c), -1);
    assert_int_equal(chanq_mq_connect(c, 1, NULL, CQ_MQ_PRODUCER, done_cb, &done, &ids[0]), 0);
    assert_int_equal(chanq_mq_keepalive(c, done_cb, &done, &ids[1]), 0);
    assert_int_equal(chanq_mq_keepalive(c, done_cb, &done, &ids[2]), 0);
    assert_int_equal(chanq_mq_cancel(c, ids[1]), 0);
    assert_int_equal(chanq_mq_cancel(c, 9999), -ENOENT);
    cq_mq_msg_t *r[3];
    assert_int_equal(take_out(c, r, 3), 3);
    assert_string_equal(r[0]->token, "");
    cq_mq_msg_t *cr = ok_resp(r[0]);
    cr->client_id = 1234;
    cr->has |= CQ_MQ_F_CLIENT_ID;
    uint8_t buf[512];
    size_t n = append(buf, 0, cr);
    n = append(buf, n, ok_resp(r[1]));
    assert_int_equal(chanq_mq_feed(c, buf, n), 0);
    assert_int_equal(done.n, 1);
    assert_int_equal(chanq_mq_client_id(c), 1234);
    assert_int_equal(chanq_mq_pending(c), 1);
    chanq_mq_fail_all(c, CQ_ECLOSED);
    assert_int_equal(done.n, 2);
    assert_int_equal(done.err[1], CQ_ECLOSED);
    assert_int_equal(done.type[1], 0); /* no response */
    assert_int_equal(chanq_mq_pending(c), 0);
    for (int i = 0; i < 3; i++)
        cq_mq_msg_free(r[i]);
    chanq_mq_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requests_encoded), cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_push_routing),     cmocka_unit_test(test_error_mapping),
        cmocka_unit_test(test_type_mismatch),    cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_produce_seq),      cmocka_unit_test(test_fail_cancel_connect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
