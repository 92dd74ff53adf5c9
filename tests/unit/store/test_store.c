/* tests/unit/store: cmocka cases for src/store with the SQLite backend. Every case runs in its
 * own temp dir (fixture), and the crash case forks a writer that is SIGKILLed mid-stream. */
#include "cq_store.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_CONTENT 1024

typedef struct fx {
    char dir[64];
    cq_store_t *s;
} fx_t;

/* ---- helpers ------------------------------------------------------------------------------- */

static cq_store_t *store_open(const char *dir)
{
    cq_store_opts_t o = {.dir = dir, .max_content = MAX_CONTENT};
    cq_store_t *s = NULL;
    char err[512] = "";
    int r = cq_store_open(&cq_store_sqlite_ops, &o, &s, err, sizeof(err));
    if (r < 0)
        fail_msg("open %s: %s (%s)", dir, cq_errname(r), err);
    return s;
}

static void reopen(fx_t *f)
{
    cq_store_close(f->s);
    f->s = store_open(f->dir);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/cq_store_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->s = store_open(f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char path[128];
    cq_store_close(f->s);
    static const char *const files[] = {"chanq.db", "chanq.db-wal", "chanq.db-shm"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", f->dir, files[i]);
        unlink(path);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static cq_store_msg_t msg(const char *text, uint64_t producer_id, uint64_t seq)
{
    return (cq_store_msg_t){
        .content = text, .len = strlen(text), .producer_id = producer_id, .seq = seq};
}

static void create(cq_store_t *s, const char *topic)
{
    assert_int_equal(cq_store_topic_create(s, topic, 30, 1000), 0);
}

/* Appends n messages "<prefix><i>" without producer ids; offsets to offs. */
static void append_n(cq_store_t *s, const char *topic, const char *prefix, size_t n, uint64_t *offs)
{
    char text[64][32];
    cq_store_msg_t m[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        snprintf(text[i], sizeof(text[i]), "%s%zu", prefix, i);
        m[i] = msg(text[i], 0, 0);
    }
    assert_int_equal(cq_store_append_batch(s, topic, m, n, offs), 0);
}

/* Reads every valid message after from; returns how many, up to max. */
static size_t read_all(cq_store_t *s, const char *topic, uint64_t from, cq_store_rec_t *recs,
                       size_t max)
{
    size_t n = 99999;
    int r = cq_store_read(s, topic, from, max, recs, &n);
    if (r < 0)
        fail_msg("read: %s (%s)", cq_errname(r), cq_store_errmsg(s));
    return n;
}

static void assert_rec(const cq_store_rec_t *r, uint64_t offset, const char *text)
{
    assert_int_equal(r->offset, offset);
    assert_int_equal(r->len, strlen(text));
    assert_memory_equal(r->content, text, r->len);
}

static int64_t db_int(const char *dir, const char *sql)
{
    char path[128];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    snprintf(path, sizeof(path), "%s/chanq.db", dir);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* ---- open and migrations ------------------------------------------------------------------- */

static void test_migrations_once(void **state)
{
    fx_t *f = *state;
    reopen(f);
    reopen(f);
    assert_int_equal(db_int(f->dir, "SELECT count(*) FROM schema_version"), 1);
    assert_int_equal(db_int(f->dir, "SELECT max(version) FROM schema_version"), 1);
    assert_true(db_int(f->dir, "SELECT applied_ms FROM schema_version") > 1600000000000LL);
    assert_int_equal(db_int(f->dir, "SELECT count(*) FROM topics"), 0);
}

static void test_open_refuses_newer_schema(void **state)
{
    fx_t *f = *state;
    char path[128], err[512] = "";
    sqlite3 *db = NULL;
    snprintf(path, sizeof(path), "%s/chanq.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO schema_version VALUES (9999, 0)", 0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(db);
    cq_store_t *s2 = NULL;
    cq_store_opts_t o = {.dir = f->dir};
    assert_int_equal(cq_store_open(&cq_store_sqlite_ops, &o, &s2, err, sizeof(err)), CQ_ESTORE);
    assert_null(s2);
    assert_non_null(strstr(err, "newer"));
}

static void test_open_bad_dir(void **state)
{
    (void)state;
    cq_store_t *s = NULL;
    char err[512] = "";
    cq_store_opts_t o = {.dir = "/nonexistent/cq_store"};
    assert_int_equal(cq_store_open(&cq_store_sqlite_ops, &o, &s, err, sizeof(err)), CQ_ESTORE);
    assert_null(s);
    assert_non_null(strstr(err, "/nonexistent/cq_store/chanq.db"));
}

static void test_wal_mode(void **state)
{
    fx_t *f = *state;
    char path[128];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    snprintf(path, sizeof(path), "%s/chanq.db", f->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* ---- topics -------------------------------------------------------------------------------- */

static void test_topics(void **state)
{
    fx_t *f = *state;
    cq_store_topic_t *t = NULL;
    size_t n = 0;
    assert_int_equal(cq_store_topic_list(f->s, &t, &n), 0);
    assert_int_equal(n, 0);
    assert_null(t);
    assert_int_equal(cq_store_topic_create(f->s, "orders", 7, 1234), 0);
    assert_int_equal(cq_store_topic_create(f->s, "Events_2", 0, 5678), 0);
    assert_int_equal(cq_store_topic_create(f->s, "orders", 7, 1), CQ_EEXIST);
    assert_int_equal(cq_store_topic_create(f->s, "ORDERS", 7, 1), CQ_EEXIST);
    assert_int_equal(cq_store_topic_create(f->s, "x", -1, 1), -EINVAL);
    assert_int_equal(cq_store_topic_create(f->s, "x", CQ_STORE_RETENTION_MAX + 1, 1), -EINVAL);
    assert_int_equal(cq_store_topic_set_online(f->s, "orders", false), 0);
    assert_int_equal(cq_store_topic_set_online(f->s, "nope", false), CQ_ENOTOPIC);
    reopen(f);
    assert_int_equal(cq_store_topic_list(f->s, &t, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].name, "Events_2");
    assert_true(t[0].online);
    assert_int_equal(t[0].retention_days, 0);
    assert_int_equal(t[0].created_ms, 5678);
    assert_string_equal(t[1].name, "orders");
    assert_false(t[1].online);
    assert_int_equal(t[1].retention_days, 7);
    cq_free(t);
    assert_int_equal(cq_store_topic_set_online(f->s, "ORDERS", true), 0);
    assert_int_equal(cq_store_topic_list(f->s, &t, &n), 0);
    assert_true(t[1].online);
    cq_free(t);
}

static void test_topic_case_insensitive_ops(void **state)
{
    fx_t *f = *state;
    uint64_t off[1], hw = 0;
    cq_store_rec_t r[4];
    create(f->s, "Mixed");
    append_n(f->s, "mixed", "m", 1, off);
    assert_int_equal(read_all(f->s, "MIXED", 0, r, 4), 1);
    cq_store_recs_done(r, 1);
    assert_int_equal(cq_store_high_water(f->s, "mIxEd", &hw), 0);
    assert_int_equal(hw, off[0]);
}

/* ---- append -------------------------------------------------------------------------------- */

static void test_append_offsets_in_order(void **state)
{
    fx_t *f = *state;
    uint64_t off[8], hw = 0;
    cq_store_rec_t r[16];
    create(f->s, "t");
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, 0);
    append_n(f->s, "t", "a", 5, off);
    append_n(f->s, "t", "b", 3, off + 5);
    for (size_t i = 1; i < 8; i++)
        assert_true(off[i] > off[i - 1]);
    assert_int_equal(read_all(f->s, "t", 0, r, 16), 8);
    assert_rec(&r[0], off[0], "a0");
    assert_rec(&r[4], off[4], "a4");
    assert_rec(&r[5], off[5], "b0");
    assert_rec(&r[7], off[7], "b2");
    assert_int_equal(r[0].producer_id, 0);
    assert_true(r[0].create_ms > 1600000000000LL);
    cq_store_recs_done(r, 8);
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, off[7]);
}

static void test_append_empty_content(void **state)
{
    fx_t *f = *state;
    uint64_t off[1];
    cq_store_rec_t r[2];
    cq_store_msg_t m = {.content = NULL, .len = 0, .create_ms = 42};
    create(f->s, "t");
    assert_int_equal(cq_store_append_batch(f->s, "t", &m, 1, off), 0);
    assert_int_equal(read_all(f->s, "t", 0, r, 2), 1);
    assert_int_equal(r[0].len, 0);
    assert_non_null(r[0].content);
    assert_int_equal(r[0].create_ms, 42);
    cq_store_recs_done(r, 1);
}

static void test_append_atomic(void **state)
{
    fx_t *f = *state;
    static char big[MAX_CONTENT + 1];
    uint64_t off[3] = {7, 7, 7}, hw = 0, before = 0;
    cq_store_rec_t r[4];
    create(f->s, "t");
    append_n(f->s, "t", "x", 1, off);
    assert_int_equal(cq_store_high_water(f->s, "t", &before), 0);
    memset(big, 'z', sizeof(big));
    cq_store_msg_t m[3] = {
        msg("first", 1, 1), {.content = big, .len = sizeof(big)}, msg("third", 1, 3)};
    off[0] = off[1] = off[2] = 7;
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, off), CQ_ECONTENT);
    assert_non_null(strstr(cq_store_errmsg(f->s), "message 1"));
    assert_int_equal(off[0], 7); /* output untouched on failure */
    assert_int_equal(read_all(f->s, "t", before, r, 4), 0);
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, before);
    /* Exactly the limit is fine, and the rolled-back (producer, seq) are free again. */
    m[1].len = MAX_CONTENT;
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, off), 0);
    assert_int_equal(read_all(f->s, "t", before, r, 4), 3);
    assert_rec(&r[0], off[0], "first");
    assert_int_equal(r[1].len, MAX_CONTENT);
    assert_rec(&r[2], off[2], "third");
    cq_store_recs_done(r, 3);
}

static void test_append_bad_args(void **state)
{
    fx_t *f = *state;
    uint64_t off[1];
    cq_store_msg_t m = msg("a", 0, 0);
    create(f->s, "t");
    assert_int_equal(cq_store_append_batch(f->s, "t", &m, 0, off), -EINVAL);
    assert_int_equal(cq_store_append_batch(f->s, "t", NULL, 1, off), -EINVAL);
    assert_int_equal(cq_store_append_batch(f->s, "nope", &m, 1, off), CQ_ENOTOPIC);
    assert_non_null(strstr(cq_store_errmsg(f->s), "nope"));
    m.content = NULL;
    assert_int_equal(cq_store_append_batch(f->s, "t", &m, 1, off), -EINVAL);
}

static void test_idempotent_retry(void **state)
{
    fx_t *f = *state;
    uint64_t a[3], b[3], c[4], d[2], e[4];
    cq_store_rec_t r[16];
    create(f->s, "t");
    cq_store_msg_t m1[3] = {msg("s1", 7, 1), msg("s2", 7, 2), msg("s3", 7, 3)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m1, 3, a), 0);
    assert_int_equal(cq_store_append_batch(f->s, "t", m1, 3, b), 0);
    assert_memory_equal(a, b, sizeof(a));
    /* Partly new: s2, s3 old; s4 new; s4 repeated in the same batch. */
    cq_store_msg_t m2[4] = {msg("s2", 7, 2), msg("s3", 7, 3), msg("s4", 7, 4), msg("s4", 7, 4)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m2, 4, c), 0);
    assert_int_equal(c[0], a[1]);
    assert_int_equal(c[1], a[2]);
    assert_true(c[2] > a[2]);
    assert_int_equal(c[3], c[2]);
    /* Another producer's seq 1 is a different message. */
    cq_store_msg_t m3[2] = {msg("p8", 8, 1), msg("p8", 8, 1)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m3, 2, d), 0);
    assert_int_equal(d[0], d[1]);
    reopen(f);
    assert_int_equal(cq_store_append_batch(f->s, "t", m2, 4, e), 0);
    assert_memory_equal(e, c, sizeof(c));
    assert_int_equal(read_all(f->s, "t", 0, r, 16), 5);
    assert_rec(&r[0], a[0], "s1");
    assert_int_equal(r[0].producer_id, 7);
    assert_int_equal(r[0].seq, 1);
    assert_rec(&r[3], c[2], "s4");
    assert_rec(&r[4], d[0], "p8");
    cq_store_recs_done(r, 5);
}

static void test_no_dedup_without_producer(void **state)
{
    fx_t *f = *state;
    uint64_t a[2];
    cq_store_rec_t r[4];
    create(f->s, "t");
    cq_store_msg_t m[2] = {msg("same", 0, 1), msg("same", 0, 1)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, a), 0);
    assert_true(a[1] > a[0]);
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 2);
    cq_store_recs_done(r, 2);
}

static void test_big_producer_ids(void **state)
{
    fx_t *f = *state;
    uint64_t a[1], b[1];
    cq_store_rec_t r[2];
    create(f->s, "t");
    cq_store_msg_t m = msg("u64", UINT64_MAX, UINT64_MAX - 1);
    assert_int_equal(cq_store_append_batch(f->s, "t", &m, 1, a), 0);
    assert_int_equal(cq_store_append_batch(f->s, "t", &m, 1, b), 0);
    assert_int_equal(a[0], b[0]);
    assert_int_equal(read_all(f->s, "t", 0, r, 2), 1);
    assert_true(r[0].producer_id == UINT64_MAX);
    assert_true(r[0].seq == UINT64_MAX - 1);
    cq_store_recs_done(r, 1);
}

/* ---- read ---------------------------------------------------------------------------------- */

static void test_read_from_offset(void **state)
{
    fx_t *f = *state;
    uint64_t off[10];
    cq_store_rec_t r[16];
    create(f->s, "t");
    append_n(f->s, "t", "m", 10, off);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[3]), 0);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[4]), 0);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[9] + 100), -ENOENT);
    /* After m1, at most 3: m2, then m5 and m6 (m3, m4 invalid). */
    assert_int_equal(read_all(f->s, "t", off[1], r, 3), 3);
    assert_rec(&r[0], off[2], "m2");
    assert_rec(&r[1], off[5], "m5");
    assert_rec(&r[2], off[6], "m6");
    cq_store_recs_done(r, 3);
    /* From the last returned offset: the rest. */
    assert_int_equal(read_all(f->s, "t", off[6], r, 16), 3);
    assert_rec(&r[0], off[7], "m7");
    assert_rec(&r[2], off[9], "m9");
    cq_store_recs_done(r, 3);
    /* An offset between rows (offsets are not dense) and past the end. */
    assert_int_equal(read_all(f->s, "t", off[9], r, 16), 0);
    assert_int_equal(read_all(f->s, "t", UINT64_MAX, r, 16), 0);
    assert_int_equal(read_all(f->s, "t", 0, r, 16), 8);
    cq_store_recs_done(r, 8);
    size_t n = 0;
    assert_int_equal(cq_store_read(f->s, "t", 0, 0, r, &n), -EINVAL);
    assert_int_equal(cq_store_read(f->s, "nope", 0, 4, r, &n), CQ_ENOTOPIC);
}

static void test_offsets_survive_reopen(void **state)
{
    fx_t *f = *state;
    uint64_t a[3], b[3], hw = 0;
    cq_store_rec_t r[8];
    create(f->s, "t");
    append_n(f->s, "t", "a", 3, a);
    reopen(f);
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, a[2]);
    append_n(f->s, "t", "b", 3, b);
    assert_true(b[0] > a[2]);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 6);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(r[i].offset, a[i]);
        assert_int_equal(r[3 + i].offset, b[i]);
    }
    cq_store_recs_done(r, 6);
}

/* ---- consumer offsets ---------------------------------------------------------------------- */

static void test_consumer_offsets(void **state)
{
    fx_t *f = *state;
    uint64_t o = 99;
    create(f->s, "t");
    create(f->s, "u");
    assert_int_equal(cq_store_get_offset(f->s, "t", "svc-a", &o), -ENOENT);
    assert_int_equal(o, 99);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "svc-a", 5, 1000), 0);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "svc-b", 9, 1000), 0);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "svc-a", 12, 2000), 0);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "svc-b", 3, 2000), 0); /* rewind */
    assert_int_equal(cq_store_commit_offset(f->s, "u", "svc-a", 1, 2000), 0);
    reopen(f);
    assert_int_equal(cq_store_get_offset(f->s, "t", "svc-a", &o), 0);
    assert_int_equal(o, 12);
    assert_int_equal(cq_store_get_offset(f->s, "t", "svc-b", &o), 0);
    assert_int_equal(o, 3);
    assert_int_equal(cq_store_get_offset(f->s, "u", "svc-a", &o), 0);
    assert_int_equal(o, 1);
    assert_int_equal(db_int(f->dir, "SELECT update_time FROM o_t WHERE consumer_id = 'svc-a'"),
                     2000);
    assert_int_equal(cq_store_commit_offset(f->s, "nope", "svc-a", 1, 1), CQ_ENOTOPIC);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "", 1, 1), -EINVAL);
    assert_int_equal(cq_store_commit_offset(f->s, "t", "tab\there", 1, 1), -EINVAL);
    char longid[CQ_STORE_CONSUMER_MAX + 2];
    memset(longid, 'c', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(cq_store_commit_offset(f->s, "t", longid, 1, 1), -EINVAL);
    longid[CQ_STORE_CONSUMER_MAX] = '\0';
    assert_int_equal(cq_store_commit_offset(f->s, "t", longid, 1, 1), 0);
    /* A consumer id with quotes is data, bound as a parameter. */
    assert_int_equal(cq_store_commit_offset(f->s, "t", "x'); DROP TABLE t_t; --", 4, 1), 0);
    assert_int_equal(cq_store_get_offset(f->s, "t", "x'); DROP TABLE t_t; --", &o), 0);
    assert_int_equal(o, 4);
    assert_int_equal(db_int(f->dir, "SELECT count(*) FROM t_t"), 0);
}

/* ---- purge --------------------------------------------------------------------------------- */

static void append_at(cq_store_t *s, const char *topic, int64_t create_ms, uint64_t *off)
{
    cq_store_msg_t m = {.content = "p", .len = 1, .create_ms = create_ms};
    assert_int_equal(cq_store_append_batch(s, topic, &m, 1, off), 0);
}

static void test_purge(void **state)
{
    fx_t *f = *state;
    uint64_t off[16], hw = 0;
    size_t n = 0;
    cq_store_rec_t r[16];
    create(f->s, "t");
    for (size_t i = 0; i < 10; i++)
        append_at(f->s, "t", 1000 + (int64_t)i, &off[i]); /* old */
    for (size_t i = 10; i < 14; i++)
        append_at(f->s, "t", 5000, &off[i]); /* new */
    append_at(f->s, "t", 1500, &off[14]);    /* old, but behind new rows */
    assert_int_equal(cq_store_purge(f->s, "t", 2000, 4, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(read_all(f->s, "t", 0, r, 16), 11);
    assert_int_equal(r[0].offset, off[4]);
    cq_store_recs_done(r, 11);
    assert_int_equal(cq_store_purge(f->s, "t", 2000, 4, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(cq_store_purge(f->s, "t", 2000, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(cq_store_purge(f->s, "t", 2000, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(read_all(f->s, "t", 0, r, 16), 5);
    assert_int_equal(r[0].offset, off[10]);
    assert_int_equal(r[4].offset, off[14]);
    cq_store_recs_done(r, 5);
    /* Purging everything keeps the high water: offsets are never reused. */
    assert_int_equal(cq_store_purge(f->s, "t", 9999, 100, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, off[14]);
    reopen(f);
    append_at(f->s, "t", 1, &off[15]);
    assert_true(off[15] > off[14]);
    assert_int_equal(cq_store_purge(f->s, "t", 0, 0, &n), -EINVAL);
    assert_int_equal(cq_store_purge(f->s, "nope", 0, 1, &n), CQ_ENOTOPIC);
}

/* ---- bad names ----------------------------------------------------------------------------- */

static const char *const bad_names[] = {
    "",    "a;DROP TABLE x", "a'b", "a\"b", "a b", "t_x\"; DROP TABLE topics; --", "a-b", "a.b",
    "a`b", "\xc3\xa9",       "x\n",
};

static void check_bad_name(cq_store_t *s, const char *name)
{
    uint64_t off[1], o;
    size_t n;
    cq_store_rec_t r[1];
    cq_store_msg_t m = msg("a", 0, 0);
    cq_store_topic_t *t;
    uint64_t before = cq__store_sql_count(s);
    assert_int_equal(cq_store_topic_create(s, name, 1, 1), CQ_EBADTOPIC);
    assert_int_equal(cq_store_topic_set_online(s, name, false), CQ_EBADTOPIC);
    assert_int_equal(cq_store_append_batch(s, name, &m, 1, off), CQ_EBADTOPIC);
    assert_int_equal(cq_store_read(s, name, 0, 1, r, &n), CQ_EBADTOPIC);
    assert_int_equal(cq_store_invalidate(s, name, 1), CQ_EBADTOPIC);
    assert_int_equal(cq_store_commit_offset(s, name, "c", 1, 1), CQ_EBADTOPIC);
    assert_int_equal(cq_store_get_offset(s, name, "c", &o), CQ_EBADTOPIC);
    assert_int_equal(cq_store_purge(s, name, 1, 1, &n), CQ_EBADTOPIC);
    assert_int_equal(cq_store_high_water(s, name, &o), CQ_EBADTOPIC);
    assert_int_equal(cq__store_sql_count(s), before); /* no SQL ran */
    assert_int_equal(cq_store_topic_list(s, &t, &n), 0);
    assert_int_equal(n, 1);
    cq_free(t);
}

static void test_bad_topic_names(void **state)
{
    fx_t *f = *state;
    char name[CQ_STORE_TOPIC_MAX + 2];
    create(f->s, "x");
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
        check_bad_name(f->s, bad_names[i]);
    check_bad_name(f->s, NULL);
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(strlen(name), 65);
    check_bad_name(f->s, name);
    name[64] = '\0';
    assert_int_equal(cq_store_topic_create(f->s, name, 1, 1), 0);
    assert_int_equal(db_int(f->dir, "SELECT count(*) FROM t_x"), 0); /* still there */
    assert_true(cq_store_topic_name_ok("Abc_09"));
    assert_false(cq_store_topic_name_ok("a;DROP TABLE x"));
}

/* ---- crash --------------------------------------------------------------------------------- */

#define CRASH_BATCH   20
#define CRASH_BATCHES 40 /* batches reported before the kill */
#define CRASH_PID     42

typedef struct crash_rec {
    uint64_t batch;
    uint64_t off[CRASH_BATCH];
} crash_rec_t;

static void crash_batch(uint64_t b, char text[CRASH_BATCH][32], cq_store_msg_t *m)
{
    for (size_t i = 0; i < CRASH_BATCH; i++) {
        uint64_t seq = b * CRASH_BATCH + i;
        snprintf(text[i], 32, "crash-%" PRIu64, seq);
        m[i] = msg(text[i], CRASH_PID, seq);
    }
}

/* The child: appends batches forever and reports each committed one on fd. */
static void crash_child(const char *dir, int fd)
{
    cq_store_opts_t o = {.dir = dir, .max_content = MAX_CONTENT};
    cq_store_t *s = NULL;
    if (cq_store_open(&cq_store_sqlite_ops, &o, &s, NULL, 0) < 0)
        _exit(3);
    char text[CRASH_BATCH][32];
    cq_store_msg_t m[CRASH_BATCH];
    crash_rec_t rec;
    for (uint64_t b = 0;; b++) {
        crash_batch(b, text, m);
        if (cq_store_append_batch(s, "crash", m, CRASH_BATCH, rec.off) < 0)
            _exit(2);
        rec.batch = b;
        if (write(fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec))
            _exit(4);
    }
}

/* Reads reports until EOF; kills the child after CRASH_BATCHES. Returns how many arrived. */
static size_t crash_collect(pid_t pid, int fd, crash_rec_t *recs, size_t max)
{
    size_t n = 0;
    bool killed = false;
    while (n < max && read(fd, &recs[n], sizeof(recs[n])) == (ssize_t)sizeof(recs[n])) {
        n++;
        if (n == CRASH_BATCHES && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
    }
    if (!killed)
        kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    return n;
}

static void crash_verify(cq_store_t *s, const crash_rec_t *recs, size_t n)
{
    cq_store_rec_t r[CRASH_BATCH];
    char text[CRASH_BATCH][32];
    cq_store_msg_t m[CRASH_BATCH];
    for (size_t b = 0; b < n; b++) {
        assert_int_equal(recs[b].batch, b);
        crash_batch(b, text, m);
        assert_int_equal(read_all(s, "crash", recs[b].off[0] - 1, r, CRASH_BATCH), CRASH_BATCH);
        for (size_t i = 0; i < CRASH_BATCH; i++) {
            assert_rec(&r[i], recs[b].off[i], text[i]);
            assert_int_equal(r[i].seq, b * CRASH_BATCH + i);
        }
        cq_store_recs_done(r, CRASH_BATCH);
    }
}

static void test_crash_sigkill(void **state)
{
    fx_t *f = *state;
    enum { MAXREC = 100000 };
    create(f->s, "crash");
    cq_store_close(f->s);
    f->s = NULL;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        crash_child(f->dir, p[1]);
    }
    close(p[1]);
    crash_rec_t *recs = calloc(MAXREC, sizeof(*recs));
    size_t n = crash_collect(pid, p[0], recs, MAXREC);
    close(p[0]);
    assert_true(n >= CRASH_BATCHES);
    f->s = store_open(f->dir);
    crash_verify(f->s, recs, n);
    /* Retry the last reported batch and the next one (which may have committed unreported):
     * the reported offsets come back, nothing is duplicated, and the topic then holds exactly
     * batches 0..n in order. */
    char text[CRASH_BATCH][32];
    cq_store_msg_t m[2 * CRASH_BATCH];
    uint64_t off[2 * CRASH_BATCH];
    crash_batch(n - 1, text, m);
    char text2[CRASH_BATCH][32];
    crash_batch(n, text2, m + CRASH_BATCH);
    assert_int_equal(cq_store_append_batch(f->s, "crash", m, 2 * CRASH_BATCH, off), 0);
    assert_memory_equal(off, recs[n - 1].off, sizeof(recs[n - 1].off));
    assert_int_equal(db_int(f->dir, "SELECT count(*) FROM t_crash"), (n + 1) * CRASH_BATCH);
    assert_int_equal(db_int(f->dir, "SELECT count(DISTINCT seq) FROM t_crash"),
                     (n + 1) * CRASH_BATCH);
    free(recs);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_migrations_once),
        T(test_open_refuses_newer_schema),
        cmocka_unit_test(test_open_bad_dir),
        T(test_wal_mode),
        T(test_topics),
        T(test_topic_case_insensitive_ops),
        T(test_append_offsets_in_order),
        T(test_append_empty_content),
        T(test_append_atomic),
        T(test_append_bad_args),
        T(test_idempotent_retry),
        T(test_no_dedup_without_producer),
        T(test_big_producer_ids),
        T(test_read_from_offset),
        T(test_offsets_survive_reopen),
        T(test_consumer_offsets),
        T(test_purge),
        T(test_bad_topic_names),
        T(test_crash_sigkill),
    };
#undef T
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
