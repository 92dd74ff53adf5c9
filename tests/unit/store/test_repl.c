/* tests/unit/store/test_repl.c: cq_repl (src/store/mysql_repl.c) and the store on a fenced or
 * replica database, against a REAL MariaDB primary + standby (tests/support/mariadb-pair.sh,
 * started and stopped by run_pair.sh, which passes CQ_PAIR_SH, CQ_PAIR_BASE, CQ_PRIMARY_PORT and
 * CQ_STANDBY_PORT).
 *
 * The pure cases (GTID positions, the metrics text) always run. The pair cases run in order on
 * one pair and build on each other, like a shard's life: probe, fence the store user, open the
 * store on the replica, lag, the standby dies (semi-sync falls back) and returns, kill -9 of
 * the primary and promotion of the standby, the old primary follows the new one, then a
 * switchover back with fence_peer. The store connects as the plain user chanq (not SUPER:
 * read_only fences it), cq_repl as the admin user cqadmin; the tests look behind both with the
 * mariadb command-line client as root (only src/store/mysql*.c include <mysql.h>). Every wait is
 * a bounded poll of an exact state; the bounds are only a safety stop. */
#include "cq_coord.h"
#include "cq_err.h"
#include "cq_repl.h"
#include "cq_sbuf.h"
#include "cq_store.h"
#include "cq_writer.h"
#include "cq_mq.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define TOPIC     "rt"
#define SEMI_MS   1000
#define SAFETY_MS 60000
#define PROMOTE_N 50

static const char *g_sh, *g_base;
static unsigned g_pport, g_sport;
static cq_repl_t *g_rp, *g_rs;  /* control of the primary's / standby's database */
static cq_store_t *g_sp, *g_ss; /* the store on each, as the plain user */
static uint64_t g_rows;         /* rows the topic holds on the current primary */

/* ---- helpers --------------------------------------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs argv, capturing stdout and stderr in out; returns the exit status. */
static int run(char *const argv[], char *out, size_t outlen)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    char sink[256];
    while ((k = read(p[0], n < outlen - 1 ? out + n : sink,
                     n < outlen - 1 ? outlen - 1 - n : sizeof(sink))) > 0)
        n += n < outlen - 1 ? (size_t)k : 0;
    out[n] = '\0';
    close(p[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* mariadb-pair.sh CMD BASE [ARG]; must succeed. */
static void pair(const char *cmd, const char *arg)
{
    char out[2048];
    char *argv[] = {(char *)g_sh, (char *)cmd, (char *)g_base, (char *)arg, NULL};
    int rc = run(argv, out, sizeof(out));
    if (rc != 0)
        fail_msg("mariadb-pair.sh %s: exit %d: %s", cmd, rc, out);
}

/* The mariadb client on port as user (password pw) runs sql; output in out. */
static int cli(unsigned port, const char *user, const char *pw, const char *sql, char *out,
               size_t outlen)
{
    char p[16], u[80], w[80];
    snprintf(p, sizeof(p), "-P%u", port);
    snprintf(u, sizeof(u), "-u%s", user);
    snprintf(w, sizeof(w), "-p%s", pw);
    /* an empty password: "-N" again in its place (-p alone would prompt) */
    char *argv[] = {"mariadb", "--no-defaults", "-h127.0.0.1", p, u, pw[0] ? w : "-N", "-N", "-B",
                    "-e",      (char *)sql,     NULL};
    return run(argv, out, outlen);
}

static int64_t root_int(unsigned port, const char *sql)
{
    char out[512];
    int rc = cli(port, "root", "", sql, out, sizeof(out));
    if (rc != 0)
        fail_msg("mariadb -P%u '%s': exit %d: %s", port, sql, rc, out);
    return strtoll(out, NULL, 10);
}

static cq_repl_t *repl_open(unsigned port, bool wait_no_slave)
{
    cq_repl_opts_t o = {.host = "127.0.0.1",
                        .port = port,
                        .admin_user = "cqadmin",
                        .admin_password = "cqadminpw",
                        .repl_user = "repl",
                        .repl_password = "replpw",
                        .timeout_ms = 2000,
                        .wait_ms = 10000,
                        .semi_sync_timeout_ms = SEMI_MS,
                        .semi_sync_wait_no_slave = wait_no_slave};
    cq_repl_t *r = NULL;
    assert_int_equal(cq_repl_open(&o, &r), 0);
    return r;
}

static int store_open_db(unsigned port, const char *database, cq_store_t **ret)
{
    cq_store_opts_t o = {.host = "127.0.0.1",
                         .port = port,
                         .user = "chanq",
                         .password = "chanqpw",
                         .database = database};
    char err[512] = "";
    int r = cq_store_open(&cq_store_mysql_ops, &o, ret, err, sizeof(err));
    if (r < 0)
        print_message("# store open :%u: %s (%s)\n", port, cq_errname(r), err);
    return r;
}

static int store_open(unsigned port, cq_store_t **ret)
{
    return store_open_db(port, "chanq", ret);
}

/* Appends one message (its own transaction); its offset in *ret_off when not NULL. */
static int append1(cq_store_t *s, const char *text, uint64_t *ret_off)
{
    cq_store_msg_t m = {.content = text, .len = strlen(text)};
    uint64_t off = 0;
    int r = cq_store_append_batch(s, TOPIC, &m, 1, &off);
    if (ret_off)
        *ret_off = off;
    return r;
}

static uint64_t count(cq_store_t *s)
{
    uint64_t n = 0;
    int r = cq_store_count(s, TOPIC, &n);
    if (r < 0)
        fail_msg("count: %s (%s)", cq_errname(r), cq_store_errmsg(s));
    return n;
}

static void status(cq_repl_t *r, cq_repl_status_t *st)
{
    int rc = cq_repl_status(r, st);
    if (rc < 0)
        fail_msg("status: %s (%s)", cq_errname(rc), cq_repl_errmsg(r));
}

/* Waits until replica's applied position covers primary's binlog. */
static void wait_applied(cq_repl_t *primary, cq_repl_t *replica)
{
    cq_repl_status_t p, s;
    status(primary, &p);
    uint64_t t0 = now_ms();
    do {
        status(replica, &s);
        if (cq_repl_gtid_covers(s.slave_pos, p.binlog_pos))
            return;
        sleep_ms(20);
    } while (now_ms() - t0 < SAFETY_MS);
    fail_msg("replica applied '%s', primary has '%s'", s.slave_pos, p.binlog_pos);
}

/* Waits until r's semi-sync master is ON with one standby. */
static void wait_semi_on(cq_repl_t *r)
{
    cq_repl_status_t st;
    uint64_t t0 = now_ms();
    do {
        status(r, &st);
        if (st.semi_sync_on && st.semi_sync_clients == 1)
            return;
        sleep_ms(50);
    } while (now_ms() - t0 < SAFETY_MS);
    fail_msg("semi-sync stayed %s with %" PRIu64 " clients", st.semi_sync_on ? "ON" : "OFF",
             st.semi_sync_clients);
}

/* One produce through the writer thread (the engine's path) on a store of port; its err. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static cq_writer_req_t *g_done;

static void on_done(void *ud, cq_writer_req_t *req)
{
    (void)ud;
    pthread_mutex_lock(&g_mu);
    g_done = req;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static int writer_produce(unsigned port)
{
    cq_store_t *s = NULL;
    assert_int_equal(store_open(port, &s), 0);
    cq_writer_opts_t o = {.max_wait_us = 0, .done = on_done};
    cq_writer_t *w = NULL;
    char why[256] = "";
    if (cq_writer_new(s, &o, &w, why, sizeof(why)) < 0)
        fail_msg("cq_writer_new: %s", why);
    assert_non_null(w);
    cq_writer_req_t *req = NULL;
    assert_int_equal(cq_writer_req_new(CQ_WRITER_PRODUCE, TOPIC, NULL, &req), 0);
    assert_int_equal(cq_writer_req_add_msg(req, "w", 1, 0, 0), 0);
    g_done = NULL;
    assert_int_equal(cq_writer_submit(w, req), 0);
    pthread_mutex_lock(&g_mu);
    while (!g_done)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    int err = g_done->err;
    cq_writer_req_free(g_done);
    cq_writer_free(w);
    return err;
}

static bool has_line(const cq_sbuf_t *b, const char *line)
{
    char want[256];
    snprintf(want, sizeof(want), "\n%s\n", line);
    return b->len && memmem(b->data, b->len, want, strlen(want)) != NULL;
}

/* First line of the pair cases: skipped without a pair (run_pair.sh sets the environment). */
static void need_pair(void)
{
    if (!g_rp)
        skip();
}

/* ---- pure: GTID positions and the metrics text ------------------------------------------------
 */

static void test_gtid_covers(void **state)
{
    (void)state;
    assert_true(cq_repl_gtid_covers("0-1-10", "0-1-9"));
    assert_true(cq_repl_gtid_covers("0-1-10", "0-1-10"));
    assert_false(cq_repl_gtid_covers("0-1-9", "0-1-10"));
    assert_true(cq_repl_gtid_covers("0-2-12", "0-1-10")); /* after a promotion: same domain */
    assert_true(cq_repl_gtid_covers("1-1-5,0-1-3", "0-1-3,1-1-5"));
    assert_false(cq_repl_gtid_covers("0-1-5", "0-1-3,1-1-1"));
    assert_true(cq_repl_gtid_covers("0-1-5", ""));
    assert_false(cq_repl_gtid_covers("", "0-1-1"));
    assert_false(cq_repl_gtid_covers("junk", "0-1-1"));
    assert_false(cq_repl_gtid_covers("0-1-5", "0-1"));
    assert_int_equal(cq_repl_gtid_distance("0-1-12", "0-1-9"), 3);
    assert_int_equal(cq_repl_gtid_distance("0-1-12,1-1-4", "1-1-1,0-1-12"), 3);
    assert_int_equal(cq_repl_gtid_distance("0-1-5", "0-1-9"), 0);
    assert_int_equal(cq_repl_gtid_distance("0-1-5", ""), -1);
    assert_int_equal(cq_repl_gtid_distance("0-1-x", "0-1-1"), -1);
}

static void test_metrics_text(void **state)
{
    (void)state;
    cq_repl_status_t st = {.up = true,
                           .semi_sync_on = true,
                           .semi_sync_clients = 1,
                           .semi_sync_yes_tx = 7,
                           .semi_sync_no_tx = 2,
                           .semi_sync_avg_wait_us = 353,
                           .replica = false,
                           .lag_seconds = -1,
                           .lag_transactions = -1,
                           .binlog_pos = "0-1-9"};
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_repl_metrics(&st, &b), 0);
    assert_true(has_line(&b, "chanq_mq_db_up 1"));
    assert_true(has_line(&b, "chanq_mq_db_read_only 0"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_on 1"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_clients 1"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_yes_tx_total 7"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_no_tx_total 2"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_avg_wait_seconds 0.000353"));
    assert_true(has_line(&b, "chanq_mq_repl_io_running 0"));
    assert_true(has_line(&b, "chanq_mq_repl_gtid_info{binlog=\"0-1-9\",io=\"\",slave=\"\"} 1"));
    assert_null(memmem(b.data, b.len, "chanq_mq_repl_lag_", 18)); /* unknown: absent */
    b.len = 0;
    st.replica = st.io_running = true;
    st.lag_seconds = 4;
    st.lag_transactions = 3;
    assert_int_equal(cq_repl_metrics(&st, &b), 0);
    assert_true(has_line(&b, "chanq_mq_repl_lag_seconds 4"));
    assert_true(has_line(&b, "chanq_mq_repl_lag_transactions 3"));
    assert_true(has_line(&b, "chanq_mq_repl_io_running 1"));
    b.len = 0;
    st = (cq_repl_status_t){.up = false};
    assert_int_equal(cq_repl_metrics(&st, &b), 0);
    assert_int_equal(b.len, strlen("# HELP chanq_mq_db_up 1 when the database's status could be "
                                   "read.\n# TYPE chanq_mq_db_up gauge\nchanq_mq_db_up 0\n"));
    cq_sbuf_done(&b);
}

static void test_bad_peer(void **state)
{
    (void)state;
    cq_repl_t *r = repl_open(1, false);
    assert_int_equal(cq_repl_fence_peer(r, "nocolon"), -EINVAL);
    assert_int_equal(cq_repl_follow(r, "127.0.0.1:0"), -EINVAL);
    assert_int_equal(cq_repl_follow(r, ":3306"), -EINVAL);
    /* nothing listens on port 1: our own database is down */
    cq_repl_probe_t p;
    assert_int_equal(cq_repl_probe(r, &p), CQ_REPL_EDOWN);
    cq_repl_status_t st;
    memset(&st, 0xff, sizeof(st));
    assert_int_equal(cq_repl_status(r, &st), CQ_REPL_EDOWN);
    assert_false(st.up);
    assert_int_equal(st.lag_seconds, -1);
    assert_int_equal(st.semi_sync_clients, 0);
    cq_repl_close(r);
    cq_repl_close(NULL);
}

/* ---- the pair ---------------------------------------------------------------------------------
 */

/* Primary: writable, not a replica, semi-sync ON with one standby; standby: read_only replica
 * with both threads running. The coord DB ops adapter reports the same. */
static void test_probe(void **state)
{
    (void)state;
    need_pair();
    cq_repl_probe_t p;
    assert_int_equal(cq_repl_probe(g_rp, &p), 0);
    assert_false(p.read_only);
    assert_false(p.replica);
    assert_int_equal(cq_repl_probe(g_rs, &p), 0);
    assert_true(p.read_only);
    assert_true(p.replica);

    cq_repl_status_t st;
    status(g_rp, &st);
    assert_true(st.up);
    assert_true(st.semi_sync_on);
    assert_int_equal(st.semi_sync_clients, 1);
    assert_int_equal(st.semi_sync_no_tx, 0);
    assert_false(st.replica);
    assert_int_equal(st.lag_seconds, -1);
    assert_true(st.binlog_pos[0] != '\0');
    status(g_rs, &st);
    assert_true(st.replica && st.io_running && st.sql_running && st.read_only);

    cq_coord_act_t a = {.type = CQ_COORD_ACT_DB_PROBE};
    cq_coord_ev_t ev;
    assert_int_equal(cq_repl_db_run(g_rs, &a, &ev), 0);
    assert_int_equal(ev.type, CQ_COORD_EV_DB);
    assert_int_equal(ev.arg, CQ_COORD_ACT_DB_PROBE);
    assert_int_equal(ev.rc, 0);
    assert_true(ev.db_replica);
    assert_true(ev.db_read_only);
    a.type = CQ_COORD_ACT_JOIN;
    assert_int_equal(cq_repl_db_run(g_rs, &a, &ev), -EINVAL);
}

/* read_only refuses the plain store user: 1290, mapped to CQ_ENOTMASTER; writable again. */
static void test_fence_store_user(void **state)
{
    (void)state;
    need_pair();
    char out[512];
    uint64_t off = 0;
    assert_int_equal(store_open(g_pport, &g_sp), 0);
    assert_int_equal(cq_store_topic_create(g_sp, TOPIC, 0, 0), 0);
    assert_int_equal(append1(g_sp, "m1", &off), 0);
    assert_int_equal(off, 1);
    assert_int_equal(cq_repl_read_only(g_rp), 0);
    assert_int_equal(append1(g_sp, "fenced", NULL), CQ_ENOTMASTER);
    assert_int_equal(cq_store_topic_create(g_sp, "other", 0, 0), CQ_ENOTMASTER);
    assert_int_not_equal(cli(g_pport, "chanq", "chanqpw",
                             "INSERT INTO chanq.t_rt (create_time, "
                             "content) VALUES (0, 'x')",
                             out, sizeof(out)),
                         0);
    assert_non_null(strstr(out, "ERROR 1290"));
    assert_int_equal(writer_produce(g_pport), CQ_ENOTMASTER); /* answered with err_code 18 */
    assert_int_equal(cq_mq_errcode(CQ_ENOTMASTER), 18);
    assert_int_equal(cq_repl_writable(g_rp), 0);
    assert_int_equal(root_int(g_pport, "SELECT @@GLOBAL.rpl_semi_sync_master_timeout"), SEMI_MS);
    assert_int_equal(root_int(g_pport, "SELECT @@GLOBAL.read_only"), 0);
    assert_int_equal(append1(g_sp, "m2", NULL), 0);
    g_rows = 2;
    assert_int_equal(count(g_sp), g_rows);
}

/* The store opens on the read_only standby (tables replicated; no CREATE), reads, and answers
 * writes with CQ_ENOTMASTER. */
static void test_open_on_replica(void **state)
{
    (void)state;
    need_pair();
    wait_applied(g_rp, g_rs);
    assert_int_equal(store_open(g_sport, &g_ss), 0);
    assert_int_equal(count(g_ss), g_rows);
    assert_int_equal(append1(g_ss, "no", NULL), CQ_ENOTMASTER);
    assert_int_equal(cq_store_topic_create(g_ss, "other", 0, 0), CQ_ENOTMASTER);
    assert_int_equal(root_int(g_sport, "SELECT COUNT(*) FROM chanq.t_rt"), g_rows);
}

/* The store opens on the standby before the primary created the schema (a database without
 * tables): the migrations wait, and run, or find themselves replicated, at a later operation. */
static void test_open_replica_no_schema(void **state)
{
    (void)state;
    need_pair();
    char out[256];
    cq_store_t *s = NULL, *p = NULL;
    uint64_t n = 9;
    assert_int_equal(cli(g_pport, "root", "",
                         "CREATE DATABASE pend; GRANT ALL ON pend.* TO 'chanq'@'%'", out,
                         sizeof(out)),
                     0);
    wait_applied(g_rp, g_rs);
    assert_int_equal(store_open_db(g_sport, "pend", &s), 0);
    assert_int_equal(cq_store_count(s, TOPIC, &n), CQ_ESTORE); /* no tables yet */
    assert_int_equal(cq_store_topic_create(s, TOPIC, 0, 0), CQ_ENOTMASTER);
    assert_int_equal(append1(s, "no", NULL), CQ_ENOTMASTER);
    assert_int_equal(store_open_db(g_pport, "pend", &p), 0);
    assert_int_equal(cq_store_topic_create(p, TOPIC, 0, 0), 0);
    assert_int_equal(append1(p, "one", NULL), 0);
    wait_applied(g_rp, g_rs);
    assert_int_equal(cq_store_count(s, TOPIC, &n), 0);
    assert_int_equal(n, 1);
    cq_store_close(s);
    cq_store_close(p);
}

/* With the SQL thread stopped, the lag is the exact number of transactions received. */
static void test_lag(void **state)
{
    (void)state;
    need_pair();
    char out[256];
    wait_applied(g_rp, g_rs);
    assert_int_equal(cli(g_sport, "root", "", "STOP SLAVE SQL_THREAD", out, sizeof(out)), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(append1(g_sp, "lag", NULL), 0);
    g_rows += 3;
    cq_repl_status_t p, s;
    status(g_rp, &p);
    uint64_t t0 = now_ms();
    for (;;) {
        status(g_rs, &s);
        if (cq_repl_gtid_covers(s.io_pos, p.binlog_pos) || now_ms() - t0 > SAFETY_MS)
            break;
        sleep_ms(20);
    }
    assert_true(cq_repl_gtid_covers(s.io_pos, p.binlog_pos));
    assert_int_equal(s.lag_transactions, 3);
    assert_false(s.sql_running);
    assert_true(s.io_running);
    assert_int_equal(s.lag_seconds, -1); /* NULL while a thread is stopped */
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_repl_metrics(&s, &b), 0);
    assert_true(has_line(&b, "chanq_mq_repl_lag_transactions 3"));
    assert_true(has_line(&b, "chanq_mq_repl_sql_running 0"));
    cq_sbuf_done(&b);
    assert_int_equal(cli(g_sport, "root", "", "START SLAVE SQL_THREAD", out, sizeof(out)), 0);
    wait_applied(g_rp, g_rs);
    status(g_rs, &s);
    assert_int_equal(s.lag_transactions, 0);
    assert_int_equal(count(g_ss), g_rows);
}

/* The standby dies: the next commit waits the timeout and falls back to async (no_tx 1,
 * semi-sync OFF); it returns: semi-sync is ON again with one client. */
static void test_standby_dies(void **state)
{
    (void)state;
    need_pair();
    cq_repl_status_t st;
    status(g_rp, &st);
    assert_true(st.semi_sync_on);
    assert_int_equal(st.semi_sync_no_tx, 0);
    uint64_t yes = st.semi_sync_yes_tx;
    assert_true(yes >= g_rows);
    pair("kill-standby", NULL);
    assert_int_equal(append1(g_sp, "async", NULL), 0);
    g_rows++;
    status(g_rp, &st);
    assert_false(st.semi_sync_on);
    assert_int_equal(st.semi_sync_no_tx, 1);
    assert_int_equal(st.semi_sync_yes_tx, yes);
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    assert_int_equal(cq_repl_metrics(&st, &b), 0);
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_on 0"));
    assert_true(has_line(&b, "chanq_mq_repl_semi_sync_no_tx_total 1"));
    cq_sbuf_done(&b);
    pair("restart-standby", NULL);
    wait_semi_on(g_rp);
    wait_applied(g_rp, g_rs);
    assert_int_equal(count(g_ss), g_rows); /* the store reconnected after the restart */
}

/* kill -9 of the primary right after acknowledged commits; promoting the standby keeps every
 * acknowledged row, and it takes writes. */
static void test_promote(void **state)
{
    (void)state;
    need_pair();
    for (int i = 0; i < PROMOTE_N; i++)
        assert_int_equal(append1(g_sp, "acked", NULL), 0);
    g_rows += PROMOTE_N;
    pair("kill-primary", NULL);
    cq_coord_act_t a = {.type = CQ_COORD_ACT_DB_PROMOTE};
    cq_coord_ev_t ev;
    int rc = cq_repl_db_run(g_rs, &a, &ev);
    if (rc != 0)
        fail_msg("promote: %s (%s)", cq_errname(rc), cq_repl_errmsg(g_rs));
    cq_repl_probe_t p;
    assert_int_equal(cq_repl_probe(g_rs, &p), 0);
    assert_false(p.read_only);
    assert_false(p.replica);
    assert_int_equal(count(g_ss), g_rows);
    assert_int_equal(append1(g_ss, "on the new primary", NULL), 0);
    g_rows++;
    cq_repl_status_t st;
    status(g_rs, &st);
    assert_false(st.replica);
    assert_int_equal(root_int(g_sport, "SELECT @@GLOBAL.rpl_semi_sync_master_enabled"), 1);
    assert_int_equal(root_int(g_sport, "SELECT @@GLOBAL.rpl_semi_sync_master_wait_no_slave"), 0);
    /* a second promotion of a primary only makes it writable */
    assert_int_equal(cq_repl_promote(g_rs), 0);
}

/* The old primary comes back as a replica (--init-rpl-role=SLAVE), follows the new one and
 * catches up; its store is fenced. */
static void test_follow(void **state)
{
    (void)state;
    need_pair();
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%u", g_sport);
    pair("restart-primary", "as-replica");
    cq_coord_act_t a = {.type = CQ_COORD_ACT_DB_FOLLOW};
    snprintf(a.peer, sizeof(a.peer), "%s", peer);
    cq_coord_ev_t ev;
    int rc = cq_repl_db_run(g_rp, &a, &ev);
    if (rc != 0)
        fail_msg("follow: %s (%s)", cq_errname(rc), cq_repl_errmsg(g_rp));
    assert_int_equal(cq_repl_follow(g_rp, peer), 0); /* already: a no-op */
    cq_repl_probe_t p;
    assert_int_equal(cq_repl_probe(g_rp, &p), 0);
    assert_true(p.read_only);
    assert_true(p.replica);
    for (int i = 0; i < 5; i++)
        assert_int_equal(append1(g_ss, "after", NULL), 0);
    g_rows += 5;
    wait_applied(g_rs, g_rp);
    wait_semi_on(g_rs);
    assert_int_equal(root_int(g_pport, "SELECT COUNT(*) FROM chanq.t_rt"), g_rows);
    assert_int_equal(root_int(g_pport, "SELECT @@GLOBAL.rpl_semi_sync_master_enabled"), 0);
    /* the old master's store reconnects to a read_only server */
    assert_int_equal(append1(g_sp, "stale master", NULL), CQ_ENOTMASTER);
    assert_int_equal(count(g_sp), g_rows);
    cq_repl_status_t st;
    status(g_rp, &st);
    assert_true(st.replica && st.io_running && st.sql_running);
}

/* Switchover back: the old primary fences the current one and waits for its binlog, is
 * promoted, and the other follows. An unreachable peer is CQ_REPL_EDOWN. */
static void test_fence_peer(void **state)
{
    (void)state;
    need_pair();
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%u", g_sport);
    int rc = cq_repl_fence_peer(g_rp, peer);
    if (rc != 0)
        fail_msg("fence: %s (%s)", cq_errname(rc), cq_repl_errmsg(g_rp));
    assert_int_equal(root_int(g_sport, "SELECT @@GLOBAL.read_only"), 1);
    assert_int_equal(append1(g_ss, "fenced", NULL), CQ_ENOTMASTER);
    cq_repl_status_t a, b;
    status(g_rs, &a);
    status(g_rp, &b);
    assert_true(cq_repl_gtid_covers(b.io_pos, a.binlog_pos));
    assert_int_equal(cq_repl_promote(g_rp), 0);
    snprintf(peer, sizeof(peer), "127.0.0.1:%u", g_pport);
    assert_int_equal(cq_repl_follow(g_rs, peer), 0);
    assert_int_equal(append1(g_sp, "back", NULL), 0);
    g_rows++;
    wait_applied(g_rp, g_rs);
    wait_semi_on(g_rp);
    assert_int_equal(count(g_ss), g_rows);
    assert_int_equal(count(g_sp), g_rows);
    assert_int_equal(cq_repl_fence_peer(g_rp, "127.0.0.1:1"), CQ_REPL_EDOWN);
}

static int teardown(void **state)
{
    (void)state;
    cq_store_close(g_sp);
    cq_store_close(g_ss);
    cq_repl_close(g_rp);
    cq_repl_close(g_rs);
    return 0;
}

/* The pair cases skip without run_pair.sh's environment; they run in order. */
#define PAIR_TEST(f) cmocka_unit_test(f)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gtid_covers),
        cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_bad_peer),
        PAIR_TEST(test_probe),
        PAIR_TEST(test_fence_store_user),
        PAIR_TEST(test_open_on_replica),
        PAIR_TEST(test_open_replica_no_schema),
        PAIR_TEST(test_lag),
        PAIR_TEST(test_standby_dies),
        PAIR_TEST(test_promote),
        PAIR_TEST(test_follow),
        PAIR_TEST(test_fence_peer),
    };
    g_sh = getenv("CQ_PAIR_SH");
    g_base = getenv("CQ_PAIR_BASE");
    const char *pp = getenv("CQ_PRIMARY_PORT"), *sp = getenv("CQ_STANDBY_PORT");
    g_pport = pp ? (unsigned)strtoul(pp, NULL, 10) : 0;
    g_sport = sp ? (unsigned)strtoul(sp, NULL, 10) : 0;
    if (g_sh && g_base && g_pport && g_sport) {
        g_rp = repl_open(g_pport, true);
        g_rs = repl_open(g_sport, false);
    }
    return cmocka_run_group_tests_name("repl", tests, NULL, teardown);
}
