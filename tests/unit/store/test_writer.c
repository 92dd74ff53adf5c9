/* tests/unit/store/test_writer.c: cmocka cases for src/store/cq_writer (the store thread with group
 * commit) over the SQLite backend. Every case runs in its own temp dir. Batching is made
 * deterministic with the pause hook: requests submitted while the thread is paused are all dequeued
 * in one round when it resumes. */
#include "cq_writer.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_CONTENT 1024

/* A stress request's result, written by the done callback (which then frees the request). */
typedef struct slot {
    int err;
    uint64_t offset;
    atomic_bool done;
} slot_t;

typedef struct fx {
    char dir[64];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t n_done; /* under mu */
    cq_writer_t *w;
    cq_store_t *s; /* the writer's store: faults are armed while the writer is paused */
} fx_t;

/* ---- helpers ------------------------------------------------------------------------------- */

static cq_store_t *store_open(const char *dir, int busy_timeout_ms)
{
    cq_store_opts_t o = {
        .dir = dir, .max_content = MAX_CONTENT, .busy_timeout_ms = busy_timeout_ms};
    cq_store_t *s = NULL;
    char err[512] = "";
    int r = cq_store_open(&cq_store_sqlite_ops, &o, &s, err, sizeof(err));
    if (r < 0)
        fail_msg("open %s: %s (%s)", dir, cq_errname(r), err);
    return s;
}

static void on_done(void *ud, cq_writer_req_t *req)
{
    fx_t *f = ud;
    slot_t *slot = req->ud;
    if (slot) {
        slot->err = req->err;
        slot->offset = req->err == 0 ? req->offsets[0] : 0;
        atomic_store(&slot->done, true);
        cq_writer_req_free(req);
    }
    pthread_mutex_lock(&f->mu);
    f->n_done++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static size_t done_count(fx_t *f)
{
    pthread_mutex_lock(&f->mu);
    size_t n = f->n_done;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void wait_done(fx_t *f, size_t n)
{
    pthread_mutex_lock(&f->mu);
    while (f->n_done < n)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

/* Opens the store, creates topics t0..t<ntopics-1>, starts a writer with o (done/ud filled). */
static void start(fx_t *f, cq_writer_opts_t o, int ntopics, int busy_timeout_ms)
{
    cq_store_t *s = store_open(f->dir, busy_timeout_ms);
    for (int i = 0; i < ntopics; i++) {
        char name[16];
        snprintf(name, sizeof(name), "t%d", i);
        assert_int_equal(cq_store_topic_create(s, name, 30, 1000), 0);
    }
    o.done = on_done;
    o.ud = f;
    f->s = s;
    char err[256] = "";
    int r = cq_writer_new(s, &o, &f->w, err, sizeof(err));
    if (r < 0)
        fail_msg("cq_writer_new: %s (%s)", err, cq_strerror(r));
    assert_non_null(f->w);
}

static cq_writer_req_t *produce_req(const char *topic, const char *text, uint64_t pid, uint64_t seq)
{
    cq_writer_req_t *req = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, topic, NULL, &req), 0);
    assert_int_equal(cq_writer_req_add_msg(req, text, strlen(text), pid, seq), 0);
    return req;
}

/* Submits req and waits for its done (only one request in flight). */
static int run(fx_t *f, cq_writer_req_t *req)
{
    size_t before = done_count(f);
    int r = cq_writer_submit(f->w, req);
    if (r < 0)
        return r;
    wait_done(f, before + 1);
    return req->err;
}

static void stats(fx_t *f, cq_writer_stats_t *st)
{
    cq_writer_stats(f->w, st);
}

/* Number of valid rows in topic, read with a fresh handle (the writer must be freed). */
static size_t count_rows(const char *dir, const char *topic)
{
    cq_store_t *s = store_open(dir, 0);
    cq_store_rec_t recs[256];
    size_t total = 0, n = 0;
    uint64_t from = 0;
    do {
        assert_int_equal(cq_store_read(s, topic, from, 256, recs, &n), 0);
        if (n)
            from = recs[n - 1].offset;
        total += n;
        cq_store_recs_done(recs, n);
    } while (n == 256);
    cq_store_close(s);
    return total;
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/cq_writer_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char path[128];
    cq_writer_free(f->w);
    static const char *const files[] = {"chanq.db", "chanq.db-wal", "chanq.db-shm"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", f->dir, files[i]);
        unlink(path);
    }
    rmdir(f->dir);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return 0;
}

/* ---- stress: 8 threads x 5000 produces to 3 topics ----------------------------------------- */

#define N_THREADS   8
#define PER_THREAD  5000
#define N_TOPICS    3
#define STRESS_PID0 100

typedef struct submitter {
    fx_t *f;
    int id;
    slot_t *slots; /* PER_THREAD */
    size_t busy;
} submitter_t;

static void stress_text(char *buf, size_t len, int thread, int i)
{
    snprintf(buf, len, "thread %d message %d", thread, i);
}

static void *submit_main(void *arg)
{
    submitter_t *sb = arg;
    char text[64], topic[16];
    for (int i = 0; i < PER_THREAD; i++) {
        stress_text(text, sizeof(text), sb->id, i);
        snprintf(topic, sizeof(topic), "t%d", (sb->id + i) % N_TOPICS);
        cq_writer_req_t *req = NULL;
        if (cq_writer_req_new(CQ_WRITER_PRODUCE, topic, NULL, &req) < 0 ||
            cq_writer_req_add_msg(req, text, strlen(text), STRESS_PID0 + (uint64_t)sb->id,
                                  (uint64_t)i + 1) < 0)
            abort();
        req->ud = &sb->slots[i];
        int r;
        while ((r = cq_writer_submit(sb->f->w, req)) == CQ_EBUSY) {
            sb->busy++;
            sched_yield();
        }
        if (r < 0)
            abort();
    }
    return NULL;
}

/* Checks every stored row of topic against the acknowledged slots; returns the row count. */
static size_t verify_topic(const char *dir, int topic, submitter_t *sbs)
{
    char name[16];
    snprintf(name, sizeof(name), "t%d", topic);
    cq_store_t *s = store_open(dir, 0);
    cq_store_rec_t recs[512];
    size_t total = 0, n = 0;
    uint64_t from = 0;
    do {
        assert_int_equal(cq_store_read(s, name, from, 512, recs, &n), 0);
        for (size_t k = 0; k < n; k++) {
            const cq_store_rec_t *rec = &recs[k];
            assert_true(rec->producer_id >= STRESS_PID0);
            int t = (int)(rec->producer_id - STRESS_PID0);
            assert_true(t < N_THREADS && rec->seq >= 1 && rec->seq <= PER_THREAD);
            int i = (int)rec->seq - 1;
            assert_int_equal((t + i) % N_TOPICS, topic);
            assert_int_equal(sbs[t].slots[i].err, 0);
            assert_int_equal(sbs[t].slots[i].offset, rec->offset);
            char text[64];
            stress_text(text, sizeof(text), t, i);
            assert_int_equal(rec->len, strlen(text));
            assert_memory_equal(rec->content, text, rec->len);
        }
        if (n)
            from = recs[n - 1].offset;
        total += n;
        cq_store_recs_done(recs, n);
    } while (n == 512);
    cq_store_close(s);
    return total;
}

static void stress(fx_t *f, cq_writer_opts_t o)
{
    start(f, o, N_TOPICS, 0);
    submitter_t sbs[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        sbs[t] = (submitter_t){.f = f, .id = t, .slots = calloc(PER_THREAD, sizeof(slot_t))};
        assert_int_equal(pthread_create(&th[t], NULL, submit_main, &sbs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    wait_done(f, (size_t)N_THREADS * PER_THREAD);

    /* every request succeeded; per thread and topic, offsets increase in submission order */
    for (int t = 0; t < N_THREADS; t++) {
        uint64_t last[N_TOPICS] = {0};
        for (int i = 0; i < PER_THREAD; i++) {
            slot_t *sl = &sbs[t].slots[i];
            assert_true(atomic_load(&sl->done));
            assert_int_equal(sl->err, 0);
            int topic = (t + i) % N_TOPICS;
            assert_true(sl->offset > last[topic]);
            last[topic] = sl->offset;
        }
    }
    cq_writer_stats_t st;
    stats(f, &st);
    size_t msgs = (size_t)N_THREADS * PER_THREAD;
    assert_int_equal(st.messages, msgs);
    assert_int_equal(st.produce_reqs, msgs);
    assert_int_equal(st.failed_txns, 0);
    assert_true(st.max_txn_msgs <= CQ_WRITER_MAX_BATCH_DFL);
    size_t busy = 0;
    for (int t = 0; t < N_THREADS; t++)
        busy += sbs[t].busy;
    printf("# stress (max_pending %zu, 0 = default): %" PRIu64
           " transactions for %zu messages (ratio %.4f, %.1f msgs/txn, "
           "largest %" PRIu64 "), busy retries %zu\n",
           o.max_pending, st.transactions, msgs, (double)st.transactions / (double)msgs,
           (double)msgs / (double)st.transactions, st.max_txn_msgs, busy);
    /* group commit: while one transaction runs, the others queue up for the next one */
    assert_true(st.transactions < msgs / 4);
    f->w = cq_writer_free(f->w);

    /* stored rows are exactly the acknowledged ones, once each */
    size_t rows = 0;
    for (int topic = 0; topic < N_TOPICS; topic++)
        rows += verify_topic(f->dir, topic, sbs);
    assert_int_equal(rows, msgs);
    for (int t = 0; t < N_THREADS; t++)
        free(sbs[t].slots);
}

static void test_stress_group_commit(void **state)
{
    stress(*state, (cq_writer_opts_t){.max_wait_us = 0});
}

/* The same with a small pending limit: submitters get CQ_EBUSY and retry, the thread sleeps and
 * wakes far more often, and batches are bounded by max_pending. */
static void test_stress_small_pending(void **state)
{
    stress(*state, (cq_writer_opts_t){.max_wait_us = 0, .max_pending = 256});
}

/* ---- batching ------------------------------------------------------------------------------ */

/* Many topics, each produced to under several spellings: one group (one transaction) per topic
 * and round, whatever the case, also when a group comes back after it emptied. */
#define MANY_TOPICS 120
static void test_many_topics_mixed_case(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, MANY_TOPICS, 0);
    cq_writer_req_t *reqs[2][MANY_TOPICS][3];
    for (int round = 0; round < 2; round++) {
        cq__writer_pause(f->w, true);
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < MANY_TOPICS; i++) {
                char name[16];
                snprintf(name, sizeof(name), "%c%d", (i + k + round) % 2 ? 'T' : 't', i);
                reqs[round][i][k] = produce_req(name, "x", 0, 0);
                assert_int_equal(cq_writer_submit(f->w, reqs[round][i][k]), 0);
            }
        }
        cq__writer_pause(f->w, false);
        wait_done(f, (size_t)(round + 1) * 3 * MANY_TOPICS);
        cq_writer_stats_t st;
        stats(f, &st);
        assert_int_equal(st.transactions, (uint64_t)(round + 1) * MANY_TOPICS);
        assert_int_equal(st.failed_txns, 0);
        assert_int_equal(st.max_txn_msgs, 3);
        for (int i = 0; i < MANY_TOPICS; i++) {
            for (int k = 0; k < 3; k++) {
                assert_int_equal(reqs[round][i][k]->err, 0);
                if (k)
                    assert_true(reqs[round][i][k]->offsets[0] > reqs[round][i][k - 1]->offsets[0]);
                else if (round)
                    assert_true(reqs[round][i][0]->offsets[0] > reqs[0][i][2]->offsets[0]);
            }
        }
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < MANY_TOPICS; i++)
            for (int k = 0; k < 3; k++)
                cq_writer_req_free(reqs[round][i][k]);
    cq_writer_free(f->w);
    f->w = NULL;
    assert_int_equal(count_rows(f->dir, "t0"), 6);
    assert_int_equal(count_rows(f->dir, "T119"), 6);
}

static void test_max_batch(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_batch = 4, .max_wait_us = 1000}, 1, 0);
    cq_writer_req_t *reqs[11];
    cq__writer_pause(f->w, true);
    for (int i = 0; i < 10; i++) {
        reqs[i] = produce_req("t0", "x", 0, 0);
        assert_int_equal(cq_writer_submit(f->w, reqs[i]), 0);
    }
    cq__writer_pause(f->w, false);
    wait_done(f, 10);
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.transactions, 3); /* 4 + 4 + 2 */
    assert_int_equal(st.max_txn_msgs, 4);
    assert_int_equal(st.messages, 10);
    for (int i = 1; i < 10; i++)
        assert_true(reqs[i]->offsets[0] > reqs[i - 1]->offsets[0]);

    /* a single request over max_batch is committed alone, never split */
    cq_writer_req_t *big = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "t0", NULL, &big), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(cq_writer_req_add_msg(big, "y", 1, 0, 0), 0);
    assert_int_equal(run(f, big), 0);
    stats(f, &st);
    assert_int_equal(st.transactions, 4);
    assert_int_equal(st.max_txn_msgs, 6);
    for (int i = 1; i < 6; i++)
        assert_true(big->offsets[i] > big->offsets[i - 1]);
    assert_true(big->offsets[0] > reqs[9]->offsets[0]);
    cq_writer_req_free(big);
    for (int i = 0; i < 10; i++)
        cq_writer_req_free(reqs[i]);
}

/* A partial batch waits (up to max_wait_us) for more; reaching max_batch commits it at once. */
static void test_wait_then_full(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_batch = 4, .max_wait_us = 60 * 1000000}, 1, 0);
    cq_writer_req_t *r[4];
    r[0] = produce_req("t0", "first", 0, 0);
    assert_int_equal(cq_writer_submit(f->w, r[0]), 0);
    usleep(50 * 1000);
    assert_int_equal(done_count(f), 0); /* still waiting for company (60 s bound) */
    for (int i = 1; i < 4; i++) {
        r[i] = produce_req("t0", "more", 0, 0);
        assert_int_equal(cq_writer_submit(f->w, r[i]), 0);
    }
    wait_done(f, 4);
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.transactions, 1);
    assert_int_equal(st.max_txn_msgs, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i]->err, 0);
        cq_writer_req_free(r[i]);
    }
}

static void test_oversize_fails_alone(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 0);
    static char huge[MAX_CONTENT + 1];
    memset(huge, 'h', sizeof(huge));
    cq__writer_pause(f->w, true);
    cq_writer_req_t *a = produce_req("t0", "a", 0, 0);
    cq_writer_req_t *b = produce_req("t0", "b-ok", 0, 0);
    assert_int_equal(cq_writer_req_add_msg(b, huge, sizeof(huge), 0, 0), 0);
    cq_writer_req_t *c = produce_req("t0", "c", 0, 0);
    assert_int_equal(cq_writer_submit(f->w, a), 0);
    assert_int_equal(cq_writer_submit(f->w, b), 0);
    assert_int_equal(cq_writer_submit(f->w, c), 0);
    cq__writer_pause(f->w, false);
    wait_done(f, 3);
    assert_int_equal(a->err, 0);
    assert_int_equal(b->err, CQ_ECONTENT);
    assert_non_null(strstr(b->errmsg, "over the limit"));
    assert_int_equal(c->err, 0);
    assert_true(c->offsets[0] > a->offsets[0]);
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.transactions, 1); /* a and c together */
    assert_int_equal(st.rejected, 1);
    assert_int_equal(st.messages, 2);
    cq_writer_req_free(a);
    cq_writer_req_free(b);
    cq_writer_req_free(c);
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 2); /* b's valid message was not stored either */
}

static void test_failed_batch_fails_all(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 50);
    /* another connection holds the write lock: the batch's transaction cannot commit */
    char path[128];
    snprintf(path, sizeof(path), "%s/chanq.db", f->dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);

    cq__writer_pause(f->w, true);
    cq_writer_req_t *r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = produce_req("t0", "locked out", 9, (uint64_t)i + 1);
        assert_int_equal(cq_writer_submit(f->w, r[i]), 0);
    }
    cq__writer_pause(f->w, false);
    wait_done(f, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i]->err, CQ_ESTORE);
        assert_true(r[i]->errmsg[0] != '\0');
        cq_writer_req_free(r[i]);
    }
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.transactions, 1);
    assert_int_equal(st.failed_txns, 1);
    assert_int_equal(st.messages, 0);

    /* lock released: the same messages go through (none was half-stored); a batch for a topic
     * that does not exist fails on its own, next to another topic's batch that commits */
    assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    cq__writer_pause(f->w, true);
    cq_writer_req_t *ok = produce_req("t0", "locked out", 9, 1);
    cq_writer_req_t *no1 = produce_req("nosuch", "nowhere", 0, 0);
    cq_writer_req_t *no2 = produce_req("nosuch", "nowhere", 0, 0);
    assert_int_equal(cq_writer_submit(f->w, no1), 0);
    assert_int_equal(cq_writer_submit(f->w, ok), 0);
    assert_int_equal(cq_writer_submit(f->w, no2), 0);
    cq__writer_pause(f->w, false);
    wait_done(f, 6);
    assert_int_equal(ok->err, 0);
    assert_int_equal(no1->err, CQ_ENOTOPIC);
    assert_int_equal(no2->err, CQ_ENOTOPIC);
    stats(f, &st);
    assert_int_equal(st.transactions, 3);
    assert_int_equal(st.failed_txns, 2);
    assert_int_equal(st.messages, 1);
    cq_writer_req_free(ok);
    cq_writer_req_free(no1);
    cq_writer_req_free(no2);
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 1);
}

/* ---- limits -------------------------------------------------------------------------------- */

static void test_busy(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_pending = 5, .max_wait_us = 0}, 1, 0);
    cq__writer_pause(f->w, true);
    cq_writer_req_t *r[5];
    for (int i = 0; i < 5; i++) {
        r[i] = produce_req("t0", "p", 0, 0);
        assert_int_equal(cq_writer_submit(f->w, r[i]), 0);
    }
    cq_writer_req_t *extra = produce_req("t0", "over", 0, 0);
    assert_int_equal(cq_writer_submit(f->w, extra), CQ_EBUSY);
    cq_writer_req_t *rd = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_READ, "t0", NULL, &rd), 0);
    rd->max = 10;
    assert_int_equal(cq_writer_submit(f->w, rd), CQ_EBUSY);
    cq_writer_req_t *huge = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "t0", NULL, &huge), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(cq_writer_req_add_msg(huge, "z", 1, 0, 0), 0);
    assert_int_equal(cq_writer_submit(f->w, huge), CQ_ELIMIT);
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.busy, 2);
    assert_int_equal(st.pending, 5);
    cq__writer_pause(f->w, false);
    wait_done(f, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r[i]->err, 0);
        cq_writer_req_free(r[i]);
    }
    stats(f, &st);
    assert_int_equal(st.pending, 0);
    /* room again: the refused requests were not taken and can be resubmitted */
    assert_int_equal(run(f, extra), 0);
    assert_int_equal(run(f, rd), 0);
    assert_int_equal(rd->n_recs, 6);
    cq_writer_req_free(extra);
    cq_writer_req_free(rd);
    cq_writer_req_free(huge);
}

static void test_bad_requests(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 0);
    cq_writer_req_t *req = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "bad-name", NULL, &req), CQ_EBADTOPIC);
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "t0; DROP", NULL, &req), CQ_EBADTOPIC);
    assert_int_equal(cq_writer_req_new(CQ_WRITER_GET_OFFSET, "t0", "", &req), -EINVAL);
    assert_int_equal(cq_writer_req_new((cq_writer_op_t)99, "t0", NULL, &req), -EINVAL);
    assert_null(req);
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "t0", NULL, &req), 0);
    assert_int_equal(cq_writer_submit(f->w, req), -EINVAL); /* no messages */
    assert_int_equal(cq_writer_req_add_msg(req, NULL, 3, 0, 0), -EINVAL);
    cq_writer_req_free(req);
    assert_int_equal(cq_writer_req_new(CQ_WRITER_READ, "t0", NULL, &req), 0);
    assert_int_equal(cq_writer_submit(f->w, req), -EINVAL); /* max 0 */
    req->max = CQ_WRITER_READ_MAX + 1;
    assert_int_equal(cq_writer_submit(f->w, req), -EINVAL);
    cq_writer_req_free(req);
    cq_writer_opts_t o = {0};
    cq_writer_t *w = NULL;
    char err[128] = "";
    assert_int_equal(cq_writer_new(store_open(f->dir, 0), &o, &w, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "store writer: no done callback"); /* and the store is closed */
    assert_null(w);
    o.done = on_done;
    assert_int_equal(cq_writer_new(NULL, &o, &w, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "store writer: no store");
    assert_int_equal(cq_writer_new(NULL, NULL, &w, NULL, 0), -EINVAL); /* no text wanted */
    assert_null(w);
}

/* ---- idempotency --------------------------------------------------------------------------- */

static void test_idempotent_retry(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 0);
    cq_writer_req_t *first = produce_req("t0", "vip top-up", 7, 1);
    assert_int_equal(run(f, first), 0);
    cq_writer_req_t *other = produce_req("t0", "other", 7, 2);
    assert_int_equal(run(f, other), 0);
    /* the producer did not see the ack and retries: same offset, no new row */
    cq_writer_req_t *retry = produce_req("t0", "vip top-up", 7, 1);
    assert_int_equal(run(f, retry), 0);
    assert_int_equal(retry->offsets[0], first->offsets[0]);

    /* a retry that lands in the same batch as the original */
    cq__writer_pause(f->w, true);
    cq_writer_req_t *x = produce_req("t0", "dup", 7, 3);
    cq_writer_req_t *y = produce_req("t0", "dup", 7, 3);
    assert_int_equal(cq_writer_submit(f->w, x), 0);
    assert_int_equal(cq_writer_submit(f->w, y), 0);
    size_t before = done_count(f);
    cq__writer_pause(f->w, false);
    wait_done(f, before + 2);
    assert_int_equal(x->err, 0);
    assert_int_equal(y->err, 0);
    assert_int_equal(x->offsets[0], y->offsets[0]);
    cq_writer_req_free(first);
    cq_writer_req_free(other);
    cq_writer_req_free(retry);
    cq_writer_req_free(x);
    cq_writer_req_free(y);
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 3);
}

/* A request that breaks the sequence rules fails alone; the others of its batch commit, and
 * each learns the offset committed below its own new messages. */
static void test_sequence_error_alone(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 0);
    cq_writer_req_t *orig = produce_req("t0", "original", 2, 1);
    assert_int_equal(run(f, orig), 0);
    cq__writer_pause(f->w, true);
    cq_writer_req_t *good1 = produce_req("t0", "one", 1, 1);
    cq_writer_req_t *bad = produce_req("t0", "other", 2, 1);
    cq_writer_req_t *good2 = produce_req("t0", "three", 3, 1);
    assert_int_equal(cq_writer_submit(f->w, good1), 0);
    assert_int_equal(cq_writer_submit(f->w, bad), 0);
    assert_int_equal(cq_writer_submit(f->w, good2), 0);
    size_t before = done_count(f);
    cq__writer_pause(f->w, false);
    wait_done(f, before + 3);
    assert_int_equal(bad->err, CQ_ESEQCONFLICT);
    assert_non_null(strstr(bad->errmsg, "other content"));
    assert_int_equal(good1->err, 0);
    assert_int_equal(good2->err, 0);
    assert_int_equal(good1->prev_offset, orig->offsets[0]);
    assert_int_equal(good2->prev_offset, good1->offsets[0]);
    assert_true(good2->offsets[0] > good1->offsets[0]);
    cq_writer_stats_t st;
    cq_writer_stats(f->w, &st);
    assert_int_equal(st.rejected, 1);
    cq_writer_req_free(orig);
    cq_writer_req_free(good1);
    cq_writer_req_free(bad);
    cq_writer_req_free(good2);
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 3);
}

static cq_writer_req_t *op_req(cq_writer_op_t op, const char *topic, const char *consumer);

/* ---- counting after a lost COMMIT answer --------------------------------------------------- */

/* Arms faults on the writer's store (the writer is idle: nothing in flight). */
static void arm(fx_t *f, unsigned faults)
{
    cq__writer_pause(f->w, true);
    cq__store_fault(f->s, faults);
    cq__writer_pause(f->w, false);
}

/* Runs req (taken) and checks its outcome and the unseen rows it carries. */
static void run_expect(fx_t *f, cq_writer_req_t *req, int err, uint64_t unseen)
{
    assert_int_equal(run(f, req), err);
    assert_int_equal(req->unseen, unseen);
    cq_writer_req_free(req);
}

/* A transaction whose COMMIT answer was lost fails, though its rows are stored: the writer
 * counts them before the topic's next append or purge, and that completion carries them
 * (unseen), whatever its own outcome. A failure before anything was written, or a TOPIC_STATS
 * (the caller counted the topic again), leaves nothing to carry. */
static void test_unseen_rows(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 0}, 1, 0);
    run_expect(f, produce_req("t0", "a", 7, 1), 0, 0);
    arm(f, CQ__STORE_FAULT_ANSWER_LOST);
    run_expect(f, produce_req("t0", "b", 7, 2), CQ_ESTORE, 0);
    cq_writer_req_t *c = produce_req("t0", "c", 0, 0);
    assert_int_equal(run(f, c), 0);
    assert_int_equal(c->unseen, 1); /* b */
    assert_int_equal(c->prev_offset, 2);
    assert_int_equal(c->offsets[0], 3);
    cq_writer_req_free(c);
    run_expect(f, produce_req("t0", "b", 7, 2), 0, 0); /* the retry: a duplicate */
    arm(f, CQ__STORE_FAULT_ANSWER_LOST);
    run_expect(f, produce_req("t0", "d", 7, 3), CQ_ESTORE, 0);
    cq_writer_req_t *p = op_req(CQ_WRITER_PURGE, "t0", NULL);
    p->max = 10;
    p->older_than_ms = 1;   /* nothing that old */
    run_expect(f, p, 0, 1); /* d, counted before the purge could remove it */
    arm(f, CQ__STORE_FAULT_FAIL_APPEND);
    run_expect(f, produce_req("t0", "e", 7, 4), CQ_ESTORE, 0);
    run_expect(f, produce_req("t0", "e", 7, 4), 0, 0); /* nothing was written: nothing unseen */
    arm(f, CQ__STORE_FAULT_ANSWER_LOST);
    run_expect(f, produce_req("t0", "g", 7, 5), CQ_ESTORE, 0);
    cq_writer_req_t *st = op_req(CQ_WRITER_TOPIC_STATS, "t0", NULL);
    assert_int_equal(run(f, st), 0);
    assert_int_equal(st->count, 6); /* a, b, c, d, e, g */
    assert_int_equal(st->offset, 6);
    cq_writer_req_free(st);
    run_expect(f, produce_req("t0", "h", 7, 6), 0, 0); /* g is in the count just read */
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 7);
}

/* ---- shutdown ------------------------------------------------------------------------------ */

static void test_shutdown_drains(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_wait_us = 60 * 1000000}, 2, 0); /* 60 s: only drain commits */
    cq__writer_pause(f->w, true);
    slot_t slots[100];
    memset(slots, 0, sizeof(slots));
    for (int i = 0; i < 100; i++) {
        cq_writer_req_t *req = produce_req(i % 2 ? "t1" : "t0", "queued", 0, 0);
        req->ud = &slots[i];
        assert_int_equal(cq_writer_submit(f->w, req), 0);
    }
    cq_writer_req_t *hw = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_HIGH_WATER, "t0", NULL, &hw), 0);
    assert_int_equal(cq_writer_submit(f->w, hw), 0);
    cq_writer_shutdown(f->w); /* overrides the pause, commits what is queued */
    assert_int_equal(done_count(f), 101);
    for (int i = 0; i < 100; i++) {
        assert_true(atomic_load(&slots[i].done));
        assert_int_equal(slots[i].err, 0);
    }
    assert_int_equal(hw->err, 0);
    cq_writer_req_free(hw);
    cq_writer_req_t *late = produce_req("t0", "late", 0, 0);
    assert_int_equal(cq_writer_submit(f->w, late), CQ_ECLOSED);
    cq_writer_req_free(late);
    cq_writer_shutdown(f->w); /* idempotent */
    f->w = cq_writer_free(f->w);
    assert_int_equal(count_rows(f->dir, "t0"), 50);
    assert_int_equal(count_rows(f->dir, "t1"), 50);
}

/* ---- other operations ---------------------------------------------------------------------- */

static cq_writer_req_t *op_req(cq_writer_op_t op, const char *topic, const char *consumer)
{
    cq_writer_req_t *req = NULL;
    assert_int_equal(cq_writer_req_new(op, topic, consumer, &req), 0);
    return req;
}

static void test_ops_through_thread(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){0}, 0, 0);
    cq_writer_req_t *req = op_req(CQ_WRITER_TOPIC_CREATE, "orders", NULL);
    req->retention_days = 7;
    req->now_ms = 1700000000000;
    assert_int_equal(run(f, req), 0);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_TOPIC_CREATE, "ORDERS", NULL);
    assert_int_equal(run(f, req), CQ_EEXIST);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_PRODUCE, "orders", NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cq_writer_req_add_msg(req, "m", 1, 0, 0), 0);
    assert_int_equal(run(f, req), 0);
    uint64_t off[3];
    memcpy(off, req->offsets, sizeof(off));
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_READ, "orders", NULL);
    req->from_offset = off[0];
    req->max = 10;
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->n_recs, 2);
    assert_int_equal(req->recs[0].offset, off[1]);
    assert_int_equal(req->recs[1].offset, off[2]);
    assert_memory_equal(req->recs[1].content, "m", 1);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_GET_OFFSET, "orders", "c1");
    assert_int_equal(run(f, req), -ENOENT);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_COMMIT_OFFSET, "orders", "c1");
    req->offset = off[1];
    req->now_ms = 1700000000001;
    assert_int_equal(run(f, req), 0);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_GET_OFFSET, "orders", "c1");
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->offset, off[1]);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_HIGH_WATER, "orders", NULL);
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->offset, off[2]);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_TOPIC_STATS, "orders", NULL);
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->offset, off[2]);
    assert_int_equal(req->count, 3);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_TOPIC_STATS, "nosuch", NULL);
    assert_int_equal(run(f, req), CQ_ENOTOPIC);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_TOPIC_SET_ONLINE, "orders", NULL);
    req->online = false;
    assert_int_equal(run(f, req), 0);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_TOPIC_LIST, NULL, NULL);
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->n_topics, 1);
    assert_string_equal(req->topics[0].name, "orders");
    assert_false(req->topics[0].online);
    assert_int_equal(req->topics[0].retention_days, 7);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_INVALIDATE, "orders", NULL);
    req->offset = off[2];
    assert_int_equal(run(f, req), 0);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_READ_ONE, "orders", NULL); /* the invalid row, all the same */
    req->offset = off[2];
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->n_recs, 1);
    assert_int_equal(req->recs[0].offset, off[2]);
    assert_int_equal(req->state, 0);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_READ_ONE, "orders", NULL);
    req->offset = off[2] + 1000;
    assert_int_equal(run(f, req), -ENOENT);
    cq_writer_req_free(req);
    req = op_req(CQ_WRITER_PURGE, "orders", NULL);
    req->older_than_ms = INT64_MAX;
    req->max = 100;
    assert_int_equal(run(f, req), 0);
    assert_int_equal(req->purged, 3);
    cq_writer_req_free(req);

    req = op_req(CQ_WRITER_READ, "nosuch", NULL);
    req->max = 1;
    assert_int_equal(run(f, req), CQ_ENOTOPIC);
    assert_true(req->errmsg[0] != '\0');
    cq_writer_req_free(req);

    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.other_ops, 16);
    assert_int_equal(st.transactions, 1);
}

/* With a reader handle, READ requests run on their own thread: they complete while the writer
 * thread is paused (it dequeues nothing), see what was committed before, and a shutdown
 * completes the reads still queued. */
static void test_reader_thread(void **state)
{
    fx_t *f = *state;
    cq_writer_opts_t o = {.max_wait_us = 0, .reader = store_open(f->dir, 0)};
    start(f, o, 1, 0);
    cq_writer_req_t *p = produce_req("t0", "first", 0, 0);
    assert_int_equal(run(f, p), 0);
    uint64_t first = p->offsets[0];
    cq_writer_req_free(p);
    cq__writer_pause(f->w, true);
    p = produce_req("t0", "paused", 0, 0); /* waits for the writer */
    assert_int_equal(cq_writer_submit(f->w, p), 0);
    cq_writer_req_t *rd = op_req(CQ_WRITER_READ, "t0", NULL);
    rd->max = 10;
    size_t before = done_count(f);
    assert_int_equal(cq_writer_submit(f->w, rd), 0);
    wait_done(f, before + 1); /* the read, while the writer is paused */
    assert_int_equal(rd->err, 0);
    assert_int_equal(rd->n_recs, 1);
    assert_int_equal(rd->recs[0].offset, first);
    assert_memory_equal(rd->recs[0].content, "first", 6); /* with its '\0' */
    assert_int_equal(done_count(f), before + 1);          /* the produce still waits */
    cq_writer_req_free(rd);
    cq__writer_pause(f->w, false);
    wait_done(f, before + 2);
    assert_int_equal(p->err, 0);
    cq_writer_req_free(p);
    /* reads queued at shutdown are completed */
    slot_t slots[20];
    memset(slots, 0, sizeof(slots));
    cq_writer_req_t *reads[20];
    for (int i = 0; i < 20; i++) {
        reads[i] = op_req(CQ_WRITER_READ, i % 2 ? "t0" : "nosuch", NULL);
        reads[i]->max = 5;
        assert_int_equal(cq_writer_submit(f->w, reads[i]), 0);
    }
    cq_writer_shutdown(f->w);
    assert_int_equal(done_count(f), before + 22);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(reads[i]->err, i % 2 ? 0 : CQ_ENOTOPIC);
        if (i % 2)
            assert_int_equal(reads[i]->n_recs, 2);
        cq_writer_req_free(reads[i]);
    }
    cq_writer_stats_t st;
    stats(f, &st);
    assert_int_equal(st.other_ops, 21);
    assert_int_equal(st.pending, 0);
}

/* The transaction-size and duration histograms count every append transaction once. */
static void test_histograms(void **state)
{
    fx_t *f = *state;
    start(f, (cq_writer_opts_t){.max_batch = 100, .max_wait_us = 0}, 1, 0);
    cq_writer_req_t *big = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, "t0", NULL, &big), 0);
    for (int i = 0; i < 7; i++)
        assert_int_equal(cq_writer_req_add_msg(big, "y", 1, 0, 0), 0);
    assert_int_equal(run(f, big), 0);
    cq_writer_req_free(big);
    cq_writer_req_t *one = produce_req("t0", "x", 0, 0);
    assert_int_equal(run(f, one), 0);
    cq_writer_req_free(one);
    cq_writer_stats_t st;
    stats(f, &st);
    uint64_t nb = 0, nc = 0;
    for (int i = 0; i < CQ_WRITER_HIST_N; i++) {
        nb += st.batch[i];
        nc += st.commit_us[i];
    }
    assert_int_equal(nb, 2);
    assert_int_equal(nc, 2);
    assert_int_equal(st.batch[0], 1); /* <= 1 */
    assert_int_equal(st.batch[3], 1); /* 5 < 7 <= 10 */
    assert_int_equal(cq_writer_batch_bounds[3], 10);
    assert_int_equal(st.batch_sum, 8);
    assert_true(st.commit_us_sum > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ops_through_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_topics_mixed_case, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_then_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversize_fails_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_batch_fails_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_busy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequence_error_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unseen_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_drains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stress_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stress_small_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histograms, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
