/* tests/unit/store: cmocka cases for src/store, run against one backend chosen at start:
 *
 *   test_store [--backend=sqlite]   every case in its own temp dir (fixture)
 *   test_store --backend=mysql      every case in its own database on the MariaDB server at
 *                                   127.0.0.1:$CQ_MARIADB_PORT (user root, no password), dropped
 *                                   afterwards; run_mariadb.sh starts and stops that server.
 *                                   Prints "1..0 # SKIP" when there is no server or no backend.
 *
 * The semantic cases run on both backends; the file-layout cases (WAL mode, data dir) are
 * SQLite-only and the server cases MariaDB-only. The tests reach the database behind the store
 * only through db_int()/db_exec(): sqlite3 for SQLite, the mariadb command-line client for
 * MariaDB (so only src/store/mysql*.c include <mysql.h>). The crash case forks a writer that is
 * SIGKILLed mid-stream. */
#include "cq_store.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

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
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_CONTENT 1024

typedef enum backend { BACKEND_SQLITE, BACKEND_MYSQL } backend_t;

/* Chosen in main(), read-only afterwards. */
static backend_t g_backend = BACKEND_SQLITE;
static const cq_store_ops_t *g_ops = &cq_store_sqlite_ops;
static unsigned g_port; /* mysql */

typedef struct fx {
    char dir[64];      /* sqlite: the data dir */
    char database[64]; /* mysql: this case's database */
    cq_store_t *s;
} fx_t;

/* ---- backend plumbing ---------------------------------------------------------------------- */

static cq_store_opts_t fx_opts(const fx_t *f)
{
    cq_store_opts_t o = {.max_content = MAX_CONTENT};
    if (g_backend == BACKEND_SQLITE) {
        o.dir = f->dir;
    } else {
        o.host = "127.0.0.1";
        o.port = g_port;
        o.user = "root";
        o.password = "";
        o.database = f->database;
    }
    return o;
}

static cq_store_t *store_open(const fx_t *f)
{
    cq_store_opts_t o = fx_opts(f);
    cq_store_t *s = NULL;
    char err[512] = "";
    int r = cq_store_open(g_ops, &o, &s, err, sizeof(err));
    if (r < 0)
        fail_msg("open %s: %s (%s)", g_ops->name, cq_errname(r), err);
    return s;
}

static void reopen(fx_t *f)
{
    cq_store_close(f->s);
    f->s = store_open(f);
}

/* Runs the mariadb client on sql (in database, if not NULL) and captures up to outlen - 1 bytes
 * of its output in out (tab-separated, no column names). Returns its exit status. */
static int mariadb_cli(const char *database, const char *sql, char *out, size_t outlen)
{
    char port[16];
    int p[2];
    snprintf(port, sizeof(port), "-P%u", g_port);
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        if (database)
            execlp("mariadb", "mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", port, "-N", "-B",
                   "-D", database, "-e", sql, (char *)NULL);
        else
            execlp("mariadb", "mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", port, "-N", "-B",
                   "-e", sql, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    while (n < outlen - 1 && (k = read(p[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(p[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int64_t sqlite_int(const char *dir, const char *sql)
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

/* The integer in the first column of the first row of sql, run behind the store's back. */
static int64_t db_int(const fx_t *f, const char *sql)
{
    if (g_backend == BACKEND_SQLITE)
        return sqlite_int(f->dir, sql);
    char out[256];
    int rc = mariadb_cli(f->database, sql, out, sizeof(out));
    if (rc != 0 || out[0] < '-' || out[0] > '9')
        fail_msg("mariadb: '%s' exited %d with '%s'", sql, rc, out);
    return strtoll(out, NULL, 10);
}

/* Runs sql behind the store's back (committed when this returns). */
static void db_exec(const fx_t *f, const char *sql)
{
    if (g_backend == BACKEND_SQLITE) {
        char path[128];
        sqlite3 *db = NULL;
        snprintf(path, sizeof(path), "%s/chanq.db", f->dir);
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, sql, 0, 0, 0), SQLITE_OK);
        sqlite3_close(db);
        return;
    }
    char out[256];
    assert_int_equal(mariadb_cli(f->database, sql, out, sizeof(out)), 0);
}

static int setup(void **state)
{
    static unsigned n;
    fx_t *f = calloc(1, sizeof(*f));
    if (g_backend == BACKEND_SQLITE) {
        snprintf(f->dir, sizeof(f->dir), "/tmp/cq_store_XXXXXX");
        if (!mkdtemp(f->dir))
            return -1;
    } else {
        snprintf(f->database, sizeof(f->database), "cq_test_%ld_%u", (long)getpid(), n++);
    }
    f->s = store_open(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char path[128];
    cq_store_close(f->s);
    if (g_backend == BACKEND_MYSQL) {
        char sql[128], out[64];
        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", f->database);
        mariadb_cli(NULL, sql, out, sizeof(out));
        free(f);
        return 0;
    }
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

/* ---- open and migrations ------------------------------------------------------------------- */

static void test_migrations_once(void **state)
{
    fx_t *f = *state;
    reopen(f);
    reopen(f);
    assert_int_equal(db_int(f, "SELECT count(*) FROM schema_version"), 1);
    assert_int_equal(db_int(f, "SELECT max(version) FROM schema_version"), 1);
    assert_true(db_int(f, "SELECT applied_ms FROM schema_version") > 1600000000000LL);
    assert_int_equal(db_int(f, "SELECT count(*) FROM topics"), 0);
}

static void test_open_refuses_newer_schema(void **state)
{
    fx_t *f = *state;
    char err[512] = "";
    db_exec(f, "INSERT INTO schema_version VALUES (9999, 0)");
    cq_store_t *s2 = NULL;
    cq_store_opts_t o = fx_opts(f);
    assert_int_equal(cq_store_open(g_ops, &o, &s2, err, sizeof(err)), CQ_ESTORE);
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

#ifdef CQ_HAVE_MYSQL
static void test_open_no_server(void **state)
{
    (void)state;
    cq_store_t *s = NULL;
    char err[512] = "";
    cq_store_opts_t o = {.host = "127.0.0.1", .port = 1, .user = "root", .database = "x"};
    assert_int_equal(cq_store_open(&cq_store_mysql_ops, &o, &s, err, sizeof(err)), CQ_ESTORE);
    assert_null(s);
    assert_non_null(strstr(err, "127.0.0.1:1"));
}

static void test_open_bad_database(void **state)
{
    (void)state;
    cq_store_t *s = NULL;
    char err[512] = "";
    cq_store_opts_t o = {.port = g_port, .user = "root", .database = "x`; DROP DATABASE mysql"};
    assert_int_equal(cq_store_open(&cq_store_mysql_ops, &o, &s, err, sizeof(err)), -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err, "database name"));
}

/* Topic names up to 64 characters fit MariaDB's 64-character table names: names too long for
 * "t_" + name get hashed table names, distinct even when the names differ only at the end. */
static void test_long_topic_tables(void **state)
{
    fx_t *f = *state;
    char a[CQ_STORE_TOPIC_MAX + 1], b[CQ_STORE_TOPIC_MAX + 1], c[CQ_STORE_TOPIC_MAX - 1];
    uint64_t off[2];
    cq_store_rec_t r[4];
    memset(a, 'a', sizeof(a) - 1);
    a[sizeof(a) - 1] = '\0';
    memcpy(b, a, sizeof(b));
    b[CQ_STORE_TOPIC_MAX - 1] = 'b';
    memcpy(c, a, sizeof(c) - 1);
    c[sizeof(c) - 1] = '\0';
    create(f->s, a);
    create(f->s, b);
    create(f->s, c);
    append_n(f->s, a, "in-a", 1, off);
    append_n(f->s, b, "in-b", 1, off + 1);
    assert_int_equal(read_all(f->s, b, 0, r, 4), 1);
    assert_rec(&r[0], off[1], "in-b0");
    cq_store_recs_done(r, 1);
    assert_int_equal(read_all(f->s, c, 0, r, 4), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM information_schema.tables WHERE "
                               "table_schema = DATABASE() AND table_name LIKE 't\\_%'"),
                     3);
    assert_int_equal(db_int(f, "SELECT max(char_length(table_name)) FROM "
                               "information_schema.tables WHERE table_schema = DATABASE()"),
                     64);
}

/* The server drops the store's connection: the call that finds out connects again and runs
 * once more (nothing of it had committed), or fails with CQ_ESTORE; retrying the batch with the
 * same producer ids neither loses nor duplicates it. */
static void test_reconnect(void **state)
{
    fx_t *f = *state;
    char sql[128];
    uint64_t a[2] = {0, 0}, b[2] = {0, 0};
    cq_store_rec_t r[4];
    cq_store_msg_t m[2] = {msg("k1", 9, 1), msg("k2", 9, 2)};
    create(f->s, "t");
    int64_t id = db_int(f, "SELECT id FROM information_schema.processlist "
                           "WHERE db = DATABASE() AND id <> CONNECTION_ID()");
    snprintf(sql, sizeof(sql), "KILL %" PRId64, id);
    db_exec(f, sql);
    int rc = cq_store_append_batch(f->s, "t", m, 2, a);
    if (rc == CQ_ESTORE) {
        assert_non_null(strstr(cq_store_errmsg(f->s), "mysql"));
        rc = cq_store_append_batch(f->s, "t", m, 2, a);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, b), 0);
    assert_memory_equal(a, b, sizeof(a));
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 2);
    cq_store_recs_done(r, 2);
    /* a call that finds the connection gone before anything committed runs again on a new
     * one: the caller sees no error (here: a read, and an append) */
    for (int i = 0; i < 2; i++) {
        id = db_int(f, "SELECT id FROM information_schema.processlist "
                       "WHERE db = DATABASE() AND id <> CONNECTION_ID()");
        snprintf(sql, sizeof(sql), "KILL %" PRId64, id);
        db_exec(f, sql);
        if (i == 0) {
            assert_int_equal(read_all(f->s, "t", 0, r, 4), 2);
            cq_store_recs_done(r, 2);
        } else {
            assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, b), 0);
            assert_memory_equal(a, b, sizeof(a));
        }
    }
}

/* Appends "<prefix><i>" for i in [0, n) (producer pid, seq base + i) and checks the result
 * against a read of the topic: every offset as read back, increasing. Returns the number of
 * statements the append alone ran. */
static uint64_t append_checked(fx_t *f, const char *prefix, size_t n, uint64_t pid, uint64_t base,
                               uint64_t *offs)
{
    static char text[700][24];
    static cq_store_msg_t m[700];
    static cq_store_rec_t r[700];
    assert_true(n <= 700);
    uint64_t from = 0;
    assert_int_equal(cq_store_high_water(f->s, "t", &from), 0);
    for (size_t i = 0; i < n; i++) {
        snprintf(text[i], sizeof(text[i]), "%s%zu", prefix, i);
        m[i] = msg(text[i], pid, base + i);
    }
    uint64_t before = cq__store_sql_count(f->s);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, n, offs), 0);
    uint64_t ran = cq__store_sql_count(f->s) - before;
    assert_int_equal(read_all(f->s, "t", from, r, n), n);
    for (size_t i = 0; i < n; i++)
        assert_rec(&r[i], offs[i], text[i]);
    cq_store_recs_done(r, n);
    return ran;
}

/* The new rows' offsets are derived from the INSERT's first id (no read-back) only where that is
 * proven: with auto_increment_increment 2 the MAX(id) check fails and the store reads them back,
 * so they still match what a reader sees; with 1 they are consecutive and no read-back runs. */
static void test_derived_offsets(void **state)
{
    fx_t *f = *state;
    static uint64_t a[600], b[600];
    create(f->s, "t");
    db_exec(f, "SET GLOBAL auto_increment_increment = 2");
    reopen(f); /* the session takes the global value at connect */
    append_checked(f, "inc2_", 600, 0, 0, a);
    append_checked(f, "inc2k_", 300, 4, 0, b);
    db_exec(f, "SET GLOBAL auto_increment_increment = 1");
    for (size_t i = 1; i < 600; i++)
        assert_true(a[i] > a[i - 1] + 1); /* really not consecutive: spaced by 2 */
    reopen(f);
    append_checked(f, "warm", 2, 0, 0, a); /* prepares the kept statements */
    uint64_t ran = append_checked(f, "inc1_", 600, 0, 0, a);
    for (size_t i = 1; i < 600; i++)
        assert_int_equal(a[i], a[i - 1] + 1);
    assert_int_equal(ran, 5); /* locked topic lookup, INSERT, MAX(id), UPDATE, COMMIT */
}

/* The connection breaks right after COMMIT: the rows are stored, so the append is acknowledged
 * (with the offsets a reader sees) instead of failing and being stored twice by a retry. */
static void test_commit_lost_after(void **state)
{
    fx_t *f = *state;
    uint64_t a[3], b[3];
    cq_store_rec_t r[8];
    create(f->s, "t");
    cq__store_fault(f->s, CQ__STORE_FAULT_LOST_AFTER_COMMIT);
    append_checked(f, "after", 3, 0, 0, a); /* no producer id: only the resolution saves it */
    cq__store_fault(f->s, CQ__STORE_FAULT_LOST_AFTER_COMMIT);
    append_checked(f, "keyed", 3, 8, 10, b);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 6);
    cq_store_recs_done(r, 6);
}

/* The connection breaks before COMMIT: nothing is stored and the append fails; a retry stores
 * the messages once. */
static void test_commit_lost_before(void **state)
{
    fx_t *f = *state;
    uint64_t a[3], hw = 1;
    cq_store_msg_t m[3] = {msg("x0", 5, 0), msg("x1", 5, 1), msg("x2", 5, 2)};
    cq_store_rec_t r[8];
    create(f->s, "t");
    cq__store_fault(f->s, CQ__STORE_FAULT_LOST_BEFORE_COMMIT);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, a), CQ_ESTORE);
    assert_non_null(strstr(cq_store_errmsg(f->s), "did not commit"));
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 0);
    assert_int_equal(cq_store_high_water(f->s, "t", &hw), 0);
    assert_int_equal(hw, 0);
    append_checked(f, "x", 3, 5, 0, a);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 3);
    cq_store_recs_done(r, 3);
}

/* The connection breaks after COMMIT and the server cannot be reached to find out: the append
 * fails as unknown (nothing acknowledged); once the server is back, the retry with the same
 * producer ids gets the offsets the commit gave them, and nothing is stored twice. */
static void test_commit_unknown(void **state)
{
    fx_t *f = *state;
    uint64_t a[3] = {0, 0, 0}, b[3];
    cq_store_msg_t m[3] = {msg("u0", 6, 0), msg("u1", 6, 1), msg("u2", 6, 2)};
    cq_store_rec_t r[8];
    create(f->s, "t");
    cq__store_fault(f->s, CQ__STORE_FAULT_LOST_AFTER_COMMIT | CQ__STORE_FAULT_NO_RECONNECT);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, a), CQ_ESTORE);
    assert_non_null(strstr(cq_store_errmsg(f->s), "unknown"));
    assert_int_equal(a[0], 0); /* nothing written on failure */
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, b), CQ_ESTORE); /* still down */
    cq__store_fault(f->s, 0);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, b), 0);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 3); /* the first try had committed */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(r[i].offset, b[i]);
    cq_store_recs_done(r, 3);
}
#endif

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

/* Both backends list names as SQLite's NOCASE orders them: ASCII case folded to lower. */
static void test_topic_list_order(void **state)
{
    fx_t *f = *state;
    static const char *const names[] = {"ab", "a_", "B", "a", "Z9", "z_1"};
    static const char *const sorted[] = {"a", "a_", "ab", "B", "Z9", "z_1"};
    cq_store_topic_t *t = NULL;
    size_t n = 0;
    for (size_t i = 0; i < CQ_ARRAY_SIZE(names); i++)
        create(f->s, names[i]);
    assert_int_equal(cq_store_topic_list(f->s, &t, &n), 0);
    assert_int_equal(n, CQ_ARRAY_SIZE(sorted));
    for (size_t i = 0; i < n; i++)
        assert_string_equal(t[i].name, sorted[i]);
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

/* count and count_range count valid messages only, count_range those in (after, upto]. */
static void test_count_range(void **state)
{
    fx_t *f = *state;
    uint64_t off[6], n = 99;
    create(f->s, "t");
    assert_int_equal(cq_store_count_range(f->s, "t", 0, UINT64_MAX, &n), 0);
    assert_int_equal(n, 0);
    append_n(f->s, "t", "c", 6, off);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[2]), 0);
    assert_int_equal(cq_store_count(f->s, "t", &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(cq_store_count_range(f->s, "t", off[0], off[3], &n), 0);
    assert_int_equal(n, 2); /* off[1], off[3]; off[2] is invalid */
    assert_int_equal(cq_store_count_range(f->s, "t", off[5], UINT64_MAX, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(cq_store_count_range(f->s, "nope", 0, 1, &n), CQ_ENOTOPIC);
}

/* The wrapper's fault seams (any backend): FAIL_APPEND fails before anything is written and
 * leaves no base; ANSWER_LOST fails after the commit, with the base the batch locked. Each
 * fires once. */
static void test_append_faults(void **state)
{
    fx_t *f = *state;
    uint64_t off[2] = {0, 0};
    cq_store_msg_t m[2] = {msg("f0", 3, 1), msg("f1", 3, 2)};
    cq_store_rec_t r[4];
    create(f->s, "t");
    append_n(f->s, "t", "x", 1, off);
    cq__store_fault(f->s, CQ__STORE_FAULT_FAIL_APPEND);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, off), CQ_ESTORE);
    assert_string_equal(cq_store_errmsg(f->s), "append failed (injected)");
    assert_int_equal(cq_store_append_base(f->s), CQ_STORE_BASE_NONE);
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 1);
    cq_store_recs_done(r, 1);
    cq__store_fault(f->s, CQ__STORE_FAULT_ANSWER_LOST);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, off), CQ_ESTORE);
    assert_non_null(strstr(cq_store_errmsg(f->s), "COMMIT outcome unknown"));
    assert_int_equal(cq_store_append_base(f->s), 1);
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 3); /* committed */
    cq_store_recs_done(r, 3);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 2, off), 0); /* fired once: a retry */
    assert_int_equal(cq_store_append_base(f->s), 3);
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 3);
    assert_int_equal(r[1].offset, off[0]);
    cq_store_recs_done(r, 3);
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

/* The sequence rules of cq_store.h: conflicts and seqs going down are refused whole, naming the
 * message; retries of older seqs and gaps are fine. */
static void test_sequence_rules(void **state)
{
    fx_t *f = *state;
    uint64_t a[2], b[3];
    cq_store_rec_t r[8];
    create(f->s, "t");
    cq_store_msg_t m1[2] = {msg("a", 4, 10), msg("b", 4, 12)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m1, 2, a), 0);
    assert_int_equal(cq_store_append_base(f->s), 0);
    /* (4, 12) is stored with other content */
    cq_store_msg_t m2[2] = {msg("c", 4, 13), msg("B", 4, 12)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m2, 2, b), CQ_ESEQCONFLICT);
    assert_int_equal(cq_store_append_bad(f->s), 1);
    assert_non_null(strstr(cq_store_errmsg(f->s), "other content"));
    /* repeated in the batch with other content */
    cq_store_msg_t m3[3] = {msg("c", 4, 13), msg("x", 5, 1), msg("C", 4, 13)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m3, 3, b), CQ_ESEQCONFLICT);
    assert_int_equal(cq_store_append_bad(f->s), 2);
    /* a retry of seq 10 is fine, a new seq 11 below the last stored 12 is not */
    cq_store_msg_t m4[2] = {msg("a", 4, 10), msg("d", 4, 11)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m4, 2, b), CQ_ESEQORDER);
    assert_int_equal(cq_store_append_bad(f->s), 1);
    /* going down inside the batch */
    cq_store_msg_t m5[2] = {msg("e", 4, 20), msg("f", 4, 15)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m5, 2, b), CQ_ESEQORDER);
    assert_int_equal(cq_store_append_bad(f->s), 1);
    /* nothing of those was stored: a retry, a gap and another producer's first seq */
    cq_store_msg_t m6[3] = {msg("b", 4, 12), msg("g", 4, 30), msg("h", 6, 1)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m6, 3, b), 0);
    assert_int_equal(cq_store_append_base(f->s), a[1]);
    assert_int_equal(b[0], a[1]);
    assert_true(b[1] > a[1] && b[2] > b[1]);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 4);
    assert_rec(&r[0], a[0], "a");
    assert_rec(&r[1], a[1], "b");
    assert_rec(&r[2], b[1], "g");
    assert_rec(&r[3], b[2], "h");
    cq_store_recs_done(r, 4);
}

/* A batch bigger than one statement (MariaDB splits it): retries, new rows and repeats mixed. */
static cq_store_msg_t hole(const char *text, uint64_t producer_id, uint64_t seq)
{
    cq_store_msg_t m = msg(text, producer_id, seq);
    m.hole = true;
    return m;
}

/* A message marked hole (its key was refused earlier, unstored) is stored below the producer's
 * last seq, in batch order, beside other producers' messages, in any order with other holes; it
 * does not lower the last seq, a second try is a duplicate, and other content is still a
 * conflict. */
static void test_hole_below_last(void **state)
{
    fx_t *f = *state;
    uint64_t a[3], b[4], c[2];
    cq_store_rec_t r[8];
    create(f->s, "t");
    cq_store_msg_t m1[3] = {msg("s10", 7, 10), msg("s30", 7, 30), msg("s40", 7, 40)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m1, 3, a), 0);
    cq_store_msg_t m2[1] = {msg("s20", 7, 20)}; /* unmarked: out of order */
    assert_int_equal(cq_store_append_batch(f->s, "t", m2, 1, b), CQ_ESEQORDER);
    cq_store_msg_t m3[4] = {msg("q1", 8, 1), msg("s50", 7, 50), hole("s20", 7, 20),
                            hole("s5", 7, 5)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m3, 4, b), 0);
    assert_true(b[0] > a[2]);
    for (size_t i = 1; i < 4; i++)
        assert_true(b[i] > b[i - 1]);
    cq_store_msg_t m4[2] = {hole("s15", 7, 15), msg("s45", 7, 45)}; /* the last is still 50 */
    assert_int_equal(cq_store_append_batch(f->s, "t", m4, 2, c), CQ_ESEQORDER);
    assert_int_equal(cq_store_append_bad(f->s), 1);
    cq_store_msg_t m5[1] = {hole("S20", 7, 20)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m5, 1, c), CQ_ESEQCONFLICT);
    cq_store_msg_t m6[2] = {hole("s20", 7, 20), msg("s60", 7, 60)};
    assert_int_equal(cq_store_append_batch(f->s, "t", m6, 2, c), 0);
    assert_int_equal(c[0], b[2]); /* a duplicate */
    assert_true(c[1] > b[3]);
    assert_int_equal(read_all(f->s, "t", 0, r, 8), 8);
    const char *want[] = {"s10", "s30", "s40", "q1", "s50", "s20", "s5", "s60"};
    for (size_t i = 0; i < 8; i++)
        assert_string_equal(r[i].content, want[i]);
    cq_store_recs_done(r, 8);
}

static void test_big_batch(void **state)
{
    enum { OLD = 300, ALL = 600, REP = 100 };
    fx_t *f = *state;
    static char text[ALL][16];
    static cq_store_msg_t m[ALL + REP];
    static uint64_t a[OLD], b[ALL + REP];
    static cq_store_rec_t r[ALL + 1];
    create(f->s, "t");
    for (size_t i = 0; i < ALL; i++) {
        snprintf(text[i], sizeof(text[i]), "big%zu", i);
        m[i] = msg(text[i], 5, 1000 + i);
    }
    for (size_t i = 0; i < REP; i++)
        m[ALL + i] = m[ALL - REP + i];
    assert_int_equal(cq_store_append_batch(f->s, "t", m, OLD, a), 0);
    assert_int_equal(cq_store_append_batch(f->s, "t", m, ALL + REP, b), 0);
    assert_memory_equal(a, b, sizeof(a));
    for (size_t i = OLD; i < ALL; i++)
        assert_true(b[i] > b[i - 1]);
    for (size_t i = 0; i < REP; i++)
        assert_int_equal(b[ALL + i], b[ALL - REP + i]);
    assert_int_equal(read_all(f->s, "t", 0, r, ALL + 1), ALL);
    for (size_t i = 0; i < ALL; i++) {
        assert_rec(&r[i], b[i], text[i]);
        assert_int_equal(r[i].seq, 1000 + i);
    }
    cq_store_recs_done(r, ALL);
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

/* cq_store_read_one (issue 25's lookup): one row whatever its state, with its producer key and
 * time; -ENOENT where none is. */
static void test_read_one(void **state)
{
    fx_t *f = *state;
    uint64_t off[3];
    cq_store_msg_t m[3] = {msg("a", 0, 0), msg("b", 77, 9), msg("c", 0, 0)};
    create(f->s, "t");
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 3, off), 0);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[1]), 0);
    cq_store_rec_t r;
    int st = -1;
    assert_int_equal(cq_store_read_one(f->s, "t", off[1], &r, &st), 0);
    assert_rec(&r, off[1], "b");
    assert_int_equal(st, 0);
    assert_true(r.producer_id == 77 && r.seq == 9);
    assert_true(r.create_ms > 0);
    cq_store_recs_done(&r, 1);
    assert_int_equal(cq_store_read_one(f->s, "t", off[2], &r, &st), 0);
    assert_rec(&r, off[2], "c");
    assert_int_equal(st, 1);
    assert_true(r.producer_id == 0);
    cq_store_recs_done(&r, 1);
    assert_int_equal(cq_store_read_one(f->s, "t", off[2] + 100, &r, &st), -ENOENT);
    assert_int_equal(cq_store_read_one(f->s, "t", UINT64_MAX, &r, &st), -ENOENT);
    assert_int_equal(cq_store_read_one(f->s, "nope", off[0], &r, &st), CQ_ENOTOPIC);
    assert_int_equal(cq_store_read_one(f->s, "a-b", off[0], &r, &st), CQ_EBADTOPIC);
    uint64_t o = 0;
    assert_int_equal(cq_store_find_key(f->s, "t", 77, 9, &o), 0); /* invalid, found all the same */
    assert_int_equal(o, off[1]);
    assert_int_equal(cq_store_find_key(f->s, "t", 77, 10, &o), -ENOENT);
    assert_int_equal(cq_store_find_key(f->s, "t", 0, 0, &o), -EINVAL);
    assert_int_equal(cq_store_find_key(f->s, "nope", 77, 9, &o), CQ_ENOTOPIC);
}

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

/* A read bounded by bytes stops before the record that would go over, returns the first record
 * whatever its size, skips invalid rows as a plain read does, and a bound of 0 is none. */
static void test_read_bounded(void **state)
{
    fx_t *f = *state;
    static const char *const text[] = {"aaaa", "bbbbbbbbbb", "cc", "dddddd", "e"};
    uint64_t off[5];
    cq_store_msg_t m[5];
    cq_store_rec_t r[8];
    size_t n = 99;
    for (size_t i = 0; i < 5; i++)
        m[i] = msg(text[i], 0, 0);
    create(f->s, "t");
    assert_int_equal(cq_store_append_batch(f->s, "t", m, 5, off), 0);
    /* 4 + 10 > 13: one record; 4 + 10 = 14: two */
    assert_int_equal(cq_store_read_bounded(f->s, "t", 0, 8, 13, r, &n), 0);
    assert_int_equal(n, 1);
    assert_rec(&r[0], off[0], "aaaa");
    cq_store_recs_done(r, n);
    assert_int_equal(cq_store_read_bounded(f->s, "t", 0, 8, 14, r, &n), 0);
    assert_int_equal(n, 2);
    assert_rec(&r[1], off[1], "bbbbbbbbbb");
    cq_store_recs_done(r, n);
    /* the first record alone is over the bound: returned anyway */
    assert_int_equal(cq_store_read_bounded(f->s, "t", off[0], 8, 3, r, &n), 0);
    assert_int_equal(n, 1);
    assert_rec(&r[0], off[1], "bbbbbbbbbb");
    cq_store_recs_done(r, n);
    /* an invalid row costs nothing: after aaaa, cc + dddddd + e = 9 */
    assert_int_equal(cq_store_invalidate(f->s, "t", off[1]), 0);
    assert_int_equal(cq_store_read_bounded(f->s, "t", off[0], 8, 9, r, &n), 0);
    assert_int_equal(n, 3);
    assert_rec(&r[0], off[2], "cc");
    assert_rec(&r[2], off[4], "e");
    cq_store_recs_done(r, n);
    /* the count still bounds; 0 bytes is no bound; nothing after the end */
    assert_int_equal(cq_store_read_bounded(f->s, "t", 0, 2, 0, r, &n), 0);
    assert_int_equal(n, 2);
    cq_store_recs_done(r, n);
    assert_int_equal(cq_store_read_bounded(f->s, "t", off[4], 8, 100, r, &n), 0);
    assert_int_equal(n, 0);
}

/* Setting what is already set succeeds (MariaDB reports 0 changed rows for it). */
static void test_repeat_updates(void **state)
{
    fx_t *f = *state;
    uint64_t off[2];
    cq_store_rec_t r[4];
    create(f->s, "t");
    append_n(f->s, "t", "r", 2, off);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[0]), 0);
    assert_int_equal(cq_store_invalidate(f->s, "t", off[0]), 0);
    assert_int_equal(cq_store_topic_set_online(f->s, "t", true), 0);
    assert_int_equal(cq_store_topic_set_online(f->s, "t", false), 0);
    assert_int_equal(cq_store_topic_set_online(f->s, "T", false), 0);
    assert_int_equal(read_all(f->s, "t", 0, r, 4), 1);
    assert_rec(&r[0], off[1], "r1");
    cq_store_recs_done(r, 1);
}

/* The store's creation time (a standalone server's epoch) is the first migration's, the same
 * after a reopen, and what the table says. */
static void test_created_ms(void **state)
{
    fx_t *f = *state;
    uint64_t c1 = 0, c2 = 0;
    assert_int_equal(cq_store_created_ms(f->s, &c1), 0);
    assert_int_equal((int64_t)c1,
                     db_int(f, "SELECT applied_ms FROM schema_version WHERE version = 1"));
    assert_true(c1 > 1700000000000ull);
    reopen(f);
    assert_int_equal(cq_store_created_ms(f->s, &c2), 0);
    assert_int_equal(c2, c1);
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
    assert_int_equal(db_int(f, "SELECT update_time FROM o_t WHERE consumer_id = 'svc-a'"), 2000);
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
    assert_int_equal(db_int(f, "SELECT count(*) FROM t_t"), 0);
}

/* Consumer ids are exact bytes: no case folding, trailing spaces count. */
static void test_consumer_ids_exact(void **state)
{
    fx_t *f = *state;
    static const char *const ids[] = {"c", "C", "c ", " c", "c  "};
    uint64_t o = 0;
    create(f->s, "t");
    for (size_t i = 0; i < CQ_ARRAY_SIZE(ids); i++)
        assert_int_equal(cq_store_commit_offset(f->s, "t", ids[i], 10 + i, 1), 0);
    for (size_t i = 0; i < CQ_ARRAY_SIZE(ids); i++) {
        assert_int_equal(cq_store_get_offset(f->s, "t", ids[i], &o), 0);
        assert_int_equal(o, 10 + i);
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM o_t"), CQ_ARRAY_SIZE(ids));
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
    assert_int_equal(db_int(f, "SELECT count(*) FROM t_x"), 0); /* still there */
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
static void crash_child(const fx_t *f, int fd)
{
    cq_store_opts_t o = fx_opts(f);
    cq_store_t *s = NULL;
    if (cq_store_open(g_ops, &o, &s, NULL, 0) < 0)
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
        crash_child(f, p[1]);
    }
    close(p[1]);
    crash_rec_t *recs = calloc(MAXREC, sizeof(*recs));
    size_t n = crash_collect(pid, p[0], recs, MAXREC);
    close(p[0]);
    assert_true(n >= CRASH_BATCHES);
    f->s = store_open(f);
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
    assert_int_equal(db_int(f, "SELECT count(*) FROM t_crash"), (n + 1) * CRASH_BATCH);
    assert_int_equal(db_int(f, "SELECT count(DISTINCT seq) FROM t_crash"), (n + 1) * CRASH_BATCH);
    free(recs);
}

/* ---- main -------------------------------------------------------------------------------- */

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
/* The cases whose semantics both backends share. */
#define COMMON_TESTS                                                                               \
    T(test_migrations_once), T(test_open_refuses_newer_schema), T(test_topics),                    \
        T(test_topic_list_order), T(test_topic_case_insensitive_ops),                              \
        T(test_append_offsets_in_order), T(test_count_range), T(test_append_faults),               \
        T(test_append_empty_content), T(test_append_atomic), T(test_append_bad_args),              \
        T(test_idempotent_retry), T(test_sequence_rules), T(test_hole_below_last),                 \
        T(test_big_batch), T(test_no_dedup_without_producer), T(test_big_producer_ids),            \
        T(test_read_from_offset), T(test_read_one), T(test_read_bounded), T(test_repeat_updates),  \
        T(test_offsets_survive_reopen), T(test_created_ms), T(test_consumer_offsets),              \
        T(test_consumer_ids_exact), T(test_purge), T(test_bad_topic_names), T(test_crash_sigkill)

/* cq_store_disk_metrics: a directory's file system as statvfs() gives it (the size exactly;
 * the free bytes move with the machine's other writers), HELP and TYPE first; nothing at all
 * for a directory that does not exist. */
static void test_disk_metrics(void **state)
{
    (void)state;
    char dir[] = "/tmp/cq_store_disk_XXXXXX";
    assert_non_null(mkdtemp(dir));
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_store_disk_metrics(dir, &b), 0);
    assert_int_equal(cq_sbuf_append(&b, "", 1), 0); /* a C string from here on */
    struct statvfs v;
    assert_int_equal(statvfs(dir, &v), 0);
    unsigned long long unit = v.f_frsize ? v.f_frsize : v.f_bsize, avail = 0, size = 0;
    const char *text = (const char *)b.data;
    assert_non_null(strstr(text, "# HELP chanq_mq_store_avail_bytes "));
    assert_non_null(strstr(text, "# TYPE chanq_mq_store_avail_bytes gauge\n"));
    assert_non_null(strstr(text, "# HELP chanq_mq_store_size_bytes "));
    assert_non_null(strstr(text, "# TYPE chanq_mq_store_size_bytes gauge\n"));
    const char *a = strstr(text, "\nchanq_mq_store_avail_bytes ");
    const char *z = strstr(text, "\nchanq_mq_store_size_bytes ");
    assert_non_null(a);
    assert_non_null(z);
    assert_int_equal(sscanf(a, "\nchanq_mq_store_avail_bytes %llu", &avail), 1);
    assert_int_equal(sscanf(z, "\nchanq_mq_store_size_bytes %llu", &size), 1);
    assert_true(size == unit * (unsigned long long)v.f_blocks);
    assert_true(avail <= size);
    unsigned long long now = unit * (unsigned long long)v.f_bavail;
    assert_true((avail > now ? avail - now : now - avail) < (1ull << 30));
    cq_sbuf_done(&b);
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(cq_store_disk_metrics(dir, &b), 0);
    assert_int_equal(b.len, 0);
    cq_sbuf_done(&b);
}

static int run_sqlite(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_bad_dir),
        cmocka_unit_test(test_disk_metrics),
        T(test_wal_mode),
        COMMON_TESTS,
    };
    return cmocka_run_group_tests_name("store-sqlite", tests, NULL, NULL);
}

#ifdef CQ_HAVE_MYSQL
static int run_mysql(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_no_server),
        cmocka_unit_test(test_open_bad_database),
        T(test_long_topic_tables),
        T(test_reconnect),
        T(test_derived_offsets),
        T(test_commit_lost_after),
        T(test_commit_lost_before),
        T(test_commit_unknown),
        COMMON_TESTS,
    };
    return cmocka_run_group_tests_name("store-mysql", tests, NULL, NULL);
}
#endif
#undef T

/* Prints a TAP plan that skips everything, with the reason. */
static int skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    return 0;
}

int main(int argc, char **argv)
{
    const char *backend = getenv("CQ_STORE_BACKEND");
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--backend=", 10) == 0)
            backend = argv[i] + 10;
    }
    if (!backend || strcmp(backend, "sqlite") == 0)
        return run_sqlite();
    if (strcmp(backend, "mysql") != 0) {
        fprintf(stderr, "unknown backend '%s' (sqlite, mysql)\n", backend);
        return 2;
    }
#ifdef CQ_HAVE_MYSQL
    const char *port = getenv("CQ_MARIADB_PORT");
    g_port = port ? (unsigned)strtoul(port, NULL, 10) : 0;
    if (g_port == 0 || g_port > 65535)
        return skip_all("no MariaDB server (CQ_MARIADB_PORT unset; run via run_mariadb.sh)");
    g_backend = BACKEND_MYSQL;
    g_ops = &cq_store_mysql_ops;
    return run_mysql();
#else
    return skip_all("built without libmariadb (the mysql store backend)");
#endif
}
