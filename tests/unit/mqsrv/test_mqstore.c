/* test_mqstore.c - the engine (src/mqsrv) over the real store thread (cq_writer) and SQLite,
 * with the store's fault seams (cq__store_fault): the paths where a produce's answer and the
 * store disagree, seen through the seed protocol.
 *
 *   - a COMMIT whose answer is lost (the rows are stored, the produce is answered storage):
 *     total and topic_message_total must still count exactly what consume returns;
 *   - several produces of one producer in flight, one of them failing with a storage error
 *     while a later seq commits: the retry with the same producer_id and seq is acknowledged.
 *
 * The writer commits one request per transaction (max_batch 1), so a fault hits exactly the
 * request it is armed for; the writer is paused while a fault is armed and while requests are
 * queued that must be in flight together. Completions wake the test through a semaphore (the
 * engine's wake op), never a sleep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_sendq.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_mqport.h"

#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OUT_CAP (1u << 20)
#define HANG_S  30 /* a hang detector, not a timing assertion */
#define TOPIC   "t"

/* ---- the engine over a writer and SQLite --------------------------------------------------- */

typedef struct fconn {
    cq_mqsrv_conn_t *c;
    uint8_t *out;
    size_t len, at; /* bytes written to the peer, bytes already read back */
} fconn_t;

static char dir[64];
static cq_store_t *store; /* owned by the writer; the test arms faults while it is paused */
static cq_writer_t *wr;
static cq_mqsrv_t *eng;
static sem_t woken;

static void on_wake(void *ud)
{
    (void)ud;
    sem_post(&woken);
}

static const cq_mqsrv_ops_t eng_ops = {on_wake};

/* Transport op: the peer takes everything queued. */
static void fake_flush(void *ud)
{
    fconn_t *f = ud;
    test_sendq_drain(cq_mqsrv_conn_sendq(f->c), f->out, &f->len, OUT_CAP);
}

static void fake_close(void *ud)
{
    fake_flush(ud);
}

static void fake_abort(void *ud, int reason, const char *why)
{
    (void)ud;
    fail_msg("connection aborted (%d): %s", reason, why);
}

static int fake_peer(void *ud, char *buf, size_t len)
{
    (void)ud;
    snprintf(buf, len, "127.0.0.1:4000"); /* loopback: writes need no permissions file */
    return 0;
}

static const cq_mqsrv_conn_ops_t conn_ops = {{"fake", fake_flush, fake_close, fake_peer},
                                             fake_abort};

static int setup(void **state)
{
    (void)state;
    char err[128];
    snprintf(dir, sizeof(dir), "/tmp/cq_mqstore_XXXXXX");
    assert_non_null(mkdtemp(dir));
    cq_store_opts_t so = {.dir = dir};
    assert_int_equal(cq_store_open(&cq_store_sqlite_ops, &so, &store, err, sizeof(err)), 0);
    assert_int_equal(cq_store_topic_create(store, TOPIC, 0, 1), 0);
    assert_int_equal(sem_init(&woken, 0, 0), 0);
    cq_writer_opts_t wo = {.max_batch = 1, .done = cq_mqsrv_complete};
    assert_int_equal(cq_writer_new(store, &wo, &wr, err, sizeof(err)), 0);
    cq_store_topic_t t = {.name = TOPIC, .online = true};
    uint64_t zero = 0;
    cq_mqsrv_opts_t o = {.topics = &t,
                         .high_water = &zero,
                         .counts = &zero,
                         .ntopics = 1,
                         .port = cq_mqport_writer(wr)};
    eng = cq_mqsrv_new(&o);
    assert_non_null(eng);
    cq_mqsrv_set_ops(eng, &eng_ops, NULL);
    cq_mqsrv_set_now(eng, 1700000000000);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_writer_shutdown(wr);
    eng = cq_mqsrv_free(eng);
    wr = cq_writer_free(wr);
    store = NULL;
    sem_destroy(&woken);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

/* Arms faults on the store: the writer is paused meanwhile, and idle (nothing queued). */
static void arm(unsigned faults)
{
    cq__writer_pause(wr, true);
    cq__store_fault(store, faults);
    cq__writer_pause(wr, false);
}

/* Runs what the store completed, waiting for at least one completion. */
static void run_completions(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += HANG_S;
    int r;
    while ((r = sem_timedwait(&woken, &ts)) < 0 && errno == EINTR) {
    }
    assert_int_equal(r, 0);
    cq_mqsrv_drain(eng);
    cq_mqsrv_flush(eng);
}

static fconn_t *fconn_new(void)
{
    fconn_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->out = malloc(OUT_CAP);
    assert_non_null(f->out);
    f->c = cq_mqsrv_conn_new(eng, &conn_ops, f);
    assert_non_null(f->c);
    return f;
}

static void fconn_free(fconn_t *f)
{
    cq_mqsrv_conn_close(f->c);
    free(f->out);
    free(f);
}

/* Encodes m (taken) and feeds it to f. */
static void send_msg(fconn_t *f, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    cq_mq_msg_free(m);
    assert_int_equal(cq_mqsrv_conn_input(f->c, b, n), 0);
    cq_free(b);
    cq_mqsrv_flush(eng);
}

/* The next answer sent to f (returned owned), waiting for the store when there is none yet. */
static cq_mq_msg_t *recv_msg(fconn_t *f)
{
    cq_mq_frame_t fr;
    ssize_t r;
    while ((r = cq_mq_parse(f->out + f->at, f->len - f->at, 0, &fr)) == 0)
        run_completions();
    assert_true(r > 0);
    f->at += (size_t)r;
    cq_mq_msg_t *m = NULL;
    char err[128];
    assert_int_equal(cq_mq_decode(&fr, NULL, &m, err, sizeof(err)), 0);
    return m;
}

static cq_mq_msg_t *msg(uint8_t type, uint32_t askid)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, (uint16_t)askid);
    assert_non_null(m);
    m->askid = askid;
    m->has |= CQ_MQ_F_ASKID;
    if (type != CQ_MQ_REQ_CONNECT)
        assert_int_equal(cq_mq_msg_set_topic(m, TOPIC), 0);
    return m;
}

/* Sends m (taken) and returns its answer (owned). */
static cq_mq_msg_t *call(fconn_t *f, cq_mq_msg_t *m)
{
    uint32_t askid = m->askid;
    send_msg(f, m);
    cq_mq_msg_t *a = recv_msg(f);
    assert_int_equal(a->askid, askid);
    return a;
}

static fconn_t *producer(void)
{
    fconn_t *f = fconn_new();
    cq_mq_msg_t *m = msg(CQ_MQ_REQ_CONNECT, 1);
    m->module_id = 1;
    m->client_type = CQ_MQ_PRODUCER;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, ""), 0);
    m->has |= CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    m = call(f, m);
    assert_int_equal(m->err_code, 0);
    cq_mq_msg_free(m);
    return f;
}

/* A produce of the n texts "<prefix><i>"; pid 0: no idempotence key, else message i has seq + i. */
static cq_mq_msg_t *produce_msg(uint32_t askid, const char *prefix, size_t n, int64_t pid,
                                int64_t seq)
{
    cq_mq_msg_t *m = msg(CQ_MQ_REQ_PRODUCE, askid);
    for (size_t i = 0; i < n; i++) {
        char c[32];
        snprintf(c, sizeof(c), "%s%zu", prefix, i);
        assert_int_equal(cq_mq_msg_add_item(m, 0, -1, c, strlen(c), false), 0);
    }
    m->has |= n == 1 ? CQ_MQ_F_CONTENT : CQ_MQ_F_BATCH;
    if (pid) {
        m->producer_id = pid;
        m->seq = seq;
        m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
    }
    return m;
}

/* Produces and expects an acknowledgement with total; returns the answer (owned). */
static cq_mq_msg_t *produce_ok(fconn_t *f, uint32_t askid, const char *prefix, size_t n,
                               int64_t pid, int64_t seq, int64_t total)
{
    cq_mq_msg_t *a = call(f, produce_msg(askid, prefix, n, pid, seq));
    if (a->err_code)
        fprintf(stderr, "# produce %u: %u %s\n", askid, a->err_code, a->err_msg);
    assert_int_equal(a->err_code, 0);
    assert_int_equal(a->noffsets, n);
    assert_int_equal(a->total, total);
    return a;
}

/* Consumes everything: asserts the texts in offset order and the answer's total. */
static void expect_log(fconn_t *f, const char *const *texts, size_t n, int64_t total)
{
    cq_mq_msg_t *m = msg(CQ_MQ_REQ_CONSUME, 90);
    m->offset = 0;
    m->max_count = 100;
    m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_MAX_COUNT;
    cq_mq_msg_t *a = call(f, m);
    assert_int_equal(a->err_code, 0);
    assert_int_equal(a->nitems, n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(a->items[i].content, texts[i]);
        assert_true(i == 0 || a->items[i].offset > a->items[i - 1].offset);
    }
    assert_int_equal(a->total, total);
    cq_mq_msg_free(a);
}

/* add_topic's topic_message_total. */
static int64_t message_total(fconn_t *f)
{
    cq_mq_msg_t *a = call(f, msg(CQ_MQ_REQ_ADD_TOPIC, 91));
    assert_int_equal(a->err_code, 0);
    int64_t n = a->topic_message_total;
    cq_mq_msg_free(a);
    return n;
}

/* ---- counters after an unknown COMMIT outcome ---------------------------------------------- */

/* A COMMIT whose answer was lost: the produce is answered storage though its 3 rows are
 * stored. Every later answer counts them: total and topic_message_total equal what consume
 * returns (5), before the retry, after it (a duplicate, not counted again) and after another
 * produce. */
static void test_counts_after_lost_answer(void **state)
{
    (void)state;
    fconn_t *p = producer();
    arm(CQ__STORE_FAULT_ANSWER_LOST);
    cq_mq_msg_t *a = call(p, produce_msg(2, "a", 3, 7, 1));
    assert_int_equal(a->err_code, CQ_MQ_ERR_STORAGE);
    assert_string_equal(a->err_msg,
                        "produce: storage error: connection lost at COMMIT (injected); COMMIT "
                        "outcome unknown (cannot check); nothing was acknowledged: retry with the "
                        "same producer_id and seq");
    cq_mq_msg_free(a);
    cq_mq_msg_t *b = produce_ok(p, 3, "b", 1, 0, 0, 4);
    cq_mq_msg_t *r = produce_ok(p, 4, "a", 3, 7, 1, 4); /* the retry finds the stored rows */
    assert_true(r->offsets[2] < b->offsets[0]);
    cq_mq_msg_free(produce_ok(p, 5, "c", 1, 0, 0, 5));
    expect_log(p, (const char *[]){"a0", "a1", "a2", "b0", "c0"}, 5, 5);
    assert_int_equal(message_total(p), 5);
    cq_mq_msg_free(b);
    cq_mq_msg_free(r);
    fconn_free(p);
}

/* ---- retries after a storage error while later seqs commit --------------------------------- */

/* The text of a produce answered storage: the store's words once, what to do once. */
static const char storage_msg[] = "produce: storage error: append failed (injected); nothing "
                                  "was acknowledged: retry with the same producer_id and seq";

/* Produces of seqs 2, 3, 4 (one request each) in flight together; the transaction of seq 2
 * fails with a storage error (nothing stored) while 3 and 4 commit. The retry of seq 2 with the
 * same producer_id and seq is acknowledged, with an offset after seq 4's: offsets follow the
 * commits. A second retry is a duplicate (same offset); a seq below the producer's last that
 * was never refused is still sequence_out_of_order. */
static void test_retry_after_storage_error(void **state)
{
    (void)state;
    fconn_t *p = producer();
    cq_mq_msg_free(produce_ok(p, 1, "s1-", 1, 7, 1, 1));
    cq__writer_pause(wr, true);
    for (uint32_t seq = 2; seq <= 4; seq++) {
        char prefix[8];
        snprintf(prefix, sizeof(prefix), "s%u-", seq);
        send_msg(p, produce_msg(10 + seq, prefix, 1, 7, seq));
    }
    cq__store_fault(store, CQ__STORE_FAULT_FAIL_APPEND); /* the next transaction: seq 2's */
    cq__writer_pause(wr, false);
    int64_t off[5] = {0};
    for (int i = 0; i < 3; i++) {
        cq_mq_msg_t *a = recv_msg(p);
        uint32_t seq = a->askid - 10;
        if (seq == 2) {
            assert_int_equal(a->err_code, CQ_MQ_ERR_STORAGE);
            assert_string_equal(a->err_msg, storage_msg);
        } else {
            assert_int_equal(a->err_code, 0);
            off[seq] = a->offsets[0];
        }
        cq_mq_msg_free(a);
    }
    assert_true(off[4] > off[3]);
    cq_mq_msg_t *a = produce_ok(p, 20, "s2-", 1, 7, 2, 4);
    off[2] = a->offsets[0];
    assert_true(off[2] > off[4]);
    cq_mq_msg_free(a);
    a = produce_ok(p, 21, "s2-", 1, 7, 2, 4);
    assert_int_equal(a->offsets[0], off[2]);
    cq_mq_msg_free(a);
    a = call(p, produce_msg(22, "s0-", 1, 7, 0)); /* never refused: still out of order */
    assert_int_equal(a->err_code, CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER);
    assert_string_equal(a->err_msg,
                        "produce: seq below the producer's last stored seq, and not a retry: "
                        "message 0: producer_id 7 seq 0 is below its last stored seq 4; nothing "
                        "was stored: send these messages again with seqs above the producer's "
                        "last stored seq");
    cq_mq_msg_free(a);
    expect_log(p, (const char *[]){"s1-0", "s3-0", "s4-0", "s2-0"}, 4, 4);
    fconn_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_after_lost_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after_storage_error, setup, teardown),
    };
    return cmocka_run_group_tests_name("mqsrv-store", tests, NULL, NULL);
}
