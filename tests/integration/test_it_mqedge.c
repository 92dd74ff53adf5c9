/* test_it_mqedge.c - the durable-topic port at its edges (issue 10): a SIGTERM in the middle of
 * a produce stream loses no ack, consume replies stay within the frame maximum and the
 * 1000-message cap, the send queue limit applies to consume replies, and the seed's counters
 * and error codes. Runs on the embedded SQLite store (--backend=sqlite) and on the MariaDB
 * server run_mariadb.sh started (--backend=mysql, CQ_MARIADB_PORT).
 *
 * The client is it_mq.h's small blocking one over a socket using the codec; it also records
 * the length of every frame it receives, and accepts frames up to its buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TMO     5000
#define SLOWTMO 60000 /* a hang detector for the big cases, not a timing assertion */

/* ---- server and client (it_mq.h) ---------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    itmq_init("cqedge");
    return 0;
}

/* Produces and returns the answer (err_code asserted 0). */
__attribute__((unused)) static cq_mq_msg_t *produce_ok(mqc_t *c, const char *topic,
                                                       const char *prefix, size_t first, size_t n,
                                                       size_t pad, char fill)
{
    cq_mq_msg_t *r = mqc_call(c, mqc_produce_msg(c, topic, prefix, first, n, pad, fill, 0));
    assert_int_equal(r->err_code, CQ_MQ_OK);
    assert_int_equal(r->noffsets, n);
    return r;
}

static cq_mq_msg_t *consume(mqc_t *c, const char *topic, int64_t offset, uint32_t max)
{
    cq_mq_msg_t *r = mqc_call(c, mqc_consume_msg(c, topic, offset, max));
    assert_int_equal(r->err_code, CQ_MQ_OK);
    return r;
}

/* ---- SIGTERM in the middle of a produce stream ---------------------------------------------- */

#define TERM_N      20000 /* produces the producer wants to make */
#define TERM_WINDOW 256   /* produces in flight */
#define TERM_AT     3000  /* acks before the SIGTERM */
#define TERM_PID    91

typedef struct term {
    int64_t acked[TERM_N]; /* offset acknowledged for seq, 0 if not acked */
    uint32_t askid_seq[1 << 16];
    int next, nacked, inflight;
} term_t;

static bool term_send(mqc_t *c, term_t *k, bool nonblocking)
{
    k->askid_seq[(c->askid + 1) & 0xffff] = (uint32_t)k->next;
    cq_mq_msg_t *m = mqc_produce_msg(c, "term", "t", (size_t)k->next, 1, 0, 0, TERM_PID);
    if (nonblocking && !mqc_try_send(c, m))
        return false;
    if (!nonblocking)
        mqc_send(c, m);
    k->next++;
    k->inflight++;
    return true;
}

/* Reads one produce answer; false on EOF. Every answer is an ack: nothing fails here. */
static bool term_read(mqc_t *c, term_t *k)
{
    cq_mq_msg_t *r = mqc_recv_tmo(c, SLOWTMO);
    if (!r)
        return false;
    assert_int_equal(r->type, CQ_MQ_RESP_PRODUCE);
    assert_int_equal(r->err_code, CQ_MQ_OK);
    assert_int_equal(r->noffsets, 1);
    int seq = (int)k->askid_seq[r->askid & 0xffff];
    assert_int_equal(k->acked[seq], 0);
    k->acked[seq] = r->offsets[0];
    k->nacked++;
    k->inflight--;
    cq_mq_msg_free(r);
    return true;
}

/* The producer keeps its window full until the server stops taking requests, SIGTERM arrives
 * after TERM_AT acks; then every answer is read until the server closes. After a restart, the
 * topic holds exactly the acknowledged messages, at their acknowledged offsets: nothing was
 * committed without its ack, and the requests the server had not read were not committed. */
static void test_sigterm_acks(void **state)
{
    (void)state;
    static term_t k;
    memset(&k, 0, sizeof(k));
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "term"), CQ_MQ_OK);
    bool termed = false, open = true;
    while (k.next < TERM_N || k.inflight > 0) {
        while (open && k.inflight < TERM_WINDOW && k.next < TERM_N)
            open = term_send(c, &k, termed);
        if (!term_read(c, &k))
            break;
        if (!termed && k.nacked == TERM_AT) {
            assert_int_equal(kill(srv.pid, SIGTERM), 0);
            termed = true;
        }
    }
    assert_true(termed);
    while (term_read(c, &k)) /* the rest, until the server closes */
        ;
    mqc_close(c);
    assert_int_equal(cq_testsrv_kill(&srv, 0), 0); /* a clean exit */
    print_message("# sigterm: %d sent, %d acked\n", k.next, k.nacked);

    itmq_start(NULL, ITMQ_SEED);
    c = mqc_connected(1, "");
    int64_t from = 0;
    int committed = 0;
    for (;;) {
        cq_mq_msg_t *r = consume(c, "term", from, 1000);
        size_t n = r->nitems;
        for (size_t i = 0; i < n; i++) {
            int seq = atoi(r->items[i].content + 2); /* "t-<seq>" */
            assert_true(seq >= 0 && seq < k.next);
            assert_int_equal(r->items[i].offset, k.acked[seq]); /* acked, at that offset */
            committed++;
        }
        from = r->offset;
        cq_mq_msg_free(r);
        if (n == 0)
            break;
    }
    assert_int_equal(committed, k.nacked); /* every committed message was acknowledged */
    mqc_close(c);
}

/* ---- consume replies: the 1000-message cap and the frame maximum ------------------------- */

/* Asks for more than the cap: exactly 1000 come back, and the answer says where to continue. */
static void test_consume_cap(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "cap"), CQ_MQ_OK);
    int64_t off[1500];
    for (size_t b = 0; b < 3; b++) {
        cq_mq_msg_t *r = produce_ok(c, "cap", "c", b * 500, 500, 0, 0);
        for (size_t i = 0; i < 500; i++)
            off[b * 500 + i] = r->offsets[i];
        cq_mq_msg_free(r);
    }
    cq_mq_msg_t *r = consume(c, "cap", 0, 5000);
    assert_int_equal(r->nitems, 1000);
    assert_int_equal(r->offset, off[999]);
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(r->items[i].offset, off[i]);
    assert_string_equal(r->items[999].content, "c-999");
    cq_mq_msg_free(r);
    r = consume(c, "cap", off[999], 5000);
    assert_int_equal(r->nitems, 500);
    assert_int_equal(r->items[0].offset, off[1000]);
    assert_int_equal(r->offset, off[1499]);
    cq_mq_msg_free(r);
    mqc_close(c);
}

#define BIG_LEN   60000 /* padding of a big message: 17 fit in one answer, 18 do not */
#define BIG_N     40
#define FRAME_MAX 1048588u /* doc/protocol-mq.md: CQ_MQ_DEFAULT_MAX_TOTAL */

/* Produces BIG_N messages of BIG_LEN bytes of fill on topic, one per request. */
static void produce_big(mqc_t *c, const char *topic, char fill, int64_t *off)
{
    assert_int_equal(mqc_add_topic(c, topic), CQ_MQ_OK);
    for (size_t i = 0; i < BIG_N; i++) {
        cq_mq_msg_t *r = produce_ok(c, topic, "b", i, 1, BIG_LEN, fill);
        off[i] = r->offsets[0];
        cq_mq_msg_free(r);
    }
}

/* Reads the topic with consumes of max 100 from offset 0; each answer must be within the frame
 * maximum and hold exactly per[k] messages, continuing where the previous one stopped. */
static void consume_in_parts(mqc_t *c, const char *topic, const int64_t *off, const size_t *per,
                             size_t nper)
{
    int64_t from = 0;
    size_t seen = 0;
    for (size_t k = 0; k < nper; k++) {
        cq_mq_msg_t *r = consume(c, topic, from, 100);
        assert_true(c->last_frame <= FRAME_MAX);
        assert_int_equal(r->nitems, per[k]);
        for (size_t i = 0; i < r->nitems; i++) {
            assert_int_equal(r->items[i].offset, off[seen + i]);
            assert_int_equal(r->items[i].len, strlen("b-") + (seen + i >= 10) + 1 + BIG_LEN);
        }
        seen += r->nitems;
        if (r->nitems)
            assert_int_equal(r->offset, off[seen - 1]);
        from = r->offset;
        cq_mq_msg_free(r);
    }
    assert_int_equal(seen, BIG_N);
}

/* 40 messages of 60 KB: 2.4 MB that one consume asked for. Each answer stays within the frame
 * maximum, trimmed to 17 messages, and says where to continue; a content that JSON escapes six
 * times over (control bytes) is trimmed by its encoded size, 2 per answer. */
static void test_consume_bounded(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    static int64_t off[BIG_N];
    produce_big(c, "big", 'a', off);
    static const size_t plain[] = {17, 17, 6, 0};
    consume_in_parts(c, "big", off, plain, 4);
    produce_big(c, "esc", '\x01', off);
    static const size_t esc[] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0};
    consume_in_parts(c, "esc", off, esc, sizeof(esc) / sizeof(esc[0]));
    mqc_close(c);
}

/* The send queue's hard limit applies to consume answers: a consumer that asks for 60 answers
 * of 1 MB and reads none is closed as a slow consumer, once. */
static void test_consume_sendq_limit(void **state)
{
    (void)state;
    const char *args[] = {"--mq-sendq-hard-limit", "4m", NULL};
    itmq_start(args, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    static int64_t off[BIG_N];
    produce_big(c, "slow", 'a', off);
    for (int i = 0; i < 60; i++)
        mqc_send(c, mqc_consume_msg(c, "slow", 0, 100));
    assert_int_equal(cq_testsrv_metric_wait_ge(&srv, "chanq_mq_slow_consumers_total", 1, SLOWTMO),
                     1);
    int answers = 0;
    cq_mq_msg_t *r;
    while ((r = mqc_recv_tmo(c, SLOWTMO))) {
        assert_int_equal(r->type, CQ_MQ_RESP_CONSUME);
        assert_int_equal(r->nitems, 17);
        answers++;
        cq_mq_msg_free(r);
    }
    assert_true(answers < 60); /* closed before the rest was queued */
    char b;
    assert_true(recv(c->fd, &b, 1, MSG_DONTWAIT) <= 0); /* closed, not a timeout */
    assert_int_equal(cq_testsrv_metric(&srv, "chanq_mq_slow_consumers_total"), 1);
    mqc_close(c);
}

/* ---- the seed's counters and error texts ------------------------------------------------ */

static cq_mq_msg_t *commit_msg(mqc_t *c, const char *topic, int64_t offset)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_COMMIT, topic);
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    return m;
}

/* add_topic / watch answer topic_message_total, produce / consume answer total: the messages in
 * the topic (an idempotent retry adds none), also after a restart. */
static void test_counters(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    cq_mq_msg_t *r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, "cnt"));
    assert_int_equal(r->err_code, 0);
    assert_true(r->has & CQ_MQ_F_TOPIC_MESSAGE_TOTAL);
    assert_int_equal(r->topic_message_total, 0);
    assert_int_equal(r->topic_nums, 1);
    cq_mq_msg_free(r);
    r = produce_ok(c, "cnt", "n", 0, 3, 0, 0);
    assert_true(r->has & CQ_MQ_F_TOTAL);
    assert_int_equal(r->total, 3);
    cq_mq_msg_free(r);
    int64_t first = 0;
    for (int k = 0; k < 2; k++) { /* the second time: a retry, stored once */
        r = mqc_call(c, mqc_produce_msg(c, "cnt", "k", 0, 2, 0, 0, 5));
        assert_int_equal(r->err_code, 0);
        assert_int_equal(r->total, 5);
        if (k == 0)
            first = r->offsets[0];
        assert_int_equal(r->offsets[0], first);
        cq_mq_msg_free(r);
    }
    r = consume(c, "cnt", 0, 2);
    assert_true(r->has & CQ_MQ_F_TOTAL);
    assert_int_equal(r->total, 5);
    assert_int_equal(r->nitems, 2);
    cq_mq_msg_free(r);
    r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_WATCH, "cnt"));
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->topic_message_total, 5);
    assert_int_equal(r->topic_nums, 1);
    cq_mq_msg_free(r);
    mqc_close(c);
    assert_int_equal(cq_testsrv_kill(&srv, SIGTERM), 0);
    itmq_start(NULL, ITMQ_SEED);
    c = mqc_connected(1, "");
    r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, "cnt"));
    assert_int_equal(r->topic_message_total, 5); /* counted by the store at start */
    cq_mq_msg_free(r);
    mqc_close(c);
}

/* Committing an offset beyond the topic's last offset is refused with offset_out_of_range (17);
 * the last offset itself and 0 (a rewind) are accepted. */
static void test_commit_out_of_range(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "range"), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(c, commit_msg(c, "range", 1)), CQ_MQ_ERR_OFFSET_OUT_OF_RANGE);
    cq_mq_msg_t *p = produce_ok(c, "range", "r", 0, 2, 0, 0);
    int64_t last = p->offsets[1];
    cq_mq_msg_free(p);
    cq_mq_msg_t *r = mqc_call(c, commit_msg(c, "range", last + 1));
    assert_int_equal(r->err_code, CQ_MQ_ERR_OFFSET_OUT_OF_RANGE);
    assert_string_equal(r->err_msg, "commit: offset is beyond the topic's last offset");
    cq_mq_msg_free(r);
    assert_int_equal(mqc_call_code(c, commit_msg(c, "range", last)), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(c, commit_msg(c, "range", 0)), CQ_MQ_OK);
    r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_OFFSET, "range"));
    assert_int_equal(r->offset, 0);
    assert_true(r->committed);
    cq_mq_msg_free(r);
    mqc_close(c);
}

/* storage (12) carries the database's error, with what it quotes (names, values, users) left
 * out: here the missing table's kind of error, not the database's name. */
static void test_storage_err_msg(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "gone"), CQ_MQ_OK);
    itmq_drop_table("t_gone");
    cq_mq_msg_t *r = mqc_call(c, mqc_produce_msg(c, "gone", "g", 0, 1, 0, 0, 0));
    assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE);
    print_message("# err_msg: %s\n", r->err_msg);
    const char *pre = "produce: storage error: ",
               *post = "; nothing was acknowledged: retry with the same producer_id and seq";
    size_t n = strlen(r->err_msg);
    assert_int_equal(strncmp(r->err_msg, pre, strlen(pre)), 0);
    assert_true(n > strlen(pre) + strlen(post));
    assert_string_equal(r->err_msg + n - strlen(post), post);
    assert_non_null(strcasestr(r->err_msg, "table"));
    assert_null(strstr(r->err_msg, db_name));
    if (use_mysql) /* the quoted name is left out, the rest of the text stays */
        assert_non_null(strstr(r->err_msg, "Table '?' doesn't exist"));
    cq_mq_msg_free(r);
    r = mqc_consume_msg(c, "gone", 0, 10);
    r = mqc_call(c, r);
    assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE);
    assert_non_null(strcasestr(r->err_msg, "table"));
    assert_null(strstr(r->err_msg, db_name));
    cq_mq_msg_free(r);
    mqc_close(c);
}

int main(int argc, char **argv)
{
    if (!itmq_backend(argc, argv, true))
        return 0;
    mqc_tmo = SLOWTMO;
    mqc_max_frame = MQC_BUF; /* the server's maximum is checked by the tests, not by the parser */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sigterm_acks, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_consume_cap, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_consume_bounded, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_consume_sendq_limit, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_counters, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_commit_out_of_range, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_storage_err_msg, setup, itmq_teardown),
    };
    return _cmocka_run_group_tests(use_mysql ? "it-mqedge-mariadb" : "it-mqedge-sqlite", tests,
                                   sizeof(tests) / sizeof(tests[0]), NULL, NULL);
}
