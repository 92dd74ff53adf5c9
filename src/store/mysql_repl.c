/* mysql_repl.c - replication control and status of a shard's MariaDB pair (cq_repl.h).
 *
 * The statements follow the tested recipe (cluster-recipes.md §4): promotion is STOP SLAVE
 * IO_THREAD, MASTER_GTID_WAIT(<Gtid_IO_Pos>), STOP SLAVE, RESET SLAVE ALL, read_only off; a
 * returning old primary follows with MASTER_USE_GTID=current_pos (its gtid_slave_pos is
 * useless); semi-sync master is switched on only when the server is a primary.
 */
#include "cq_repl.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_coord.h"
#include "cq_err.h"
#include "mysql_int.h"

#include <errmsg.h>
#include <inttypes.h>
#include <mysql.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DFL_HOST       "127.0.0.1"
#define DFL_PORT       3306
#define DFL_TIMEOUT_MS 2000
#define DFL_WAIT_MS    5000
#define DFL_SEMI_MS    2000
#define POLL_MS        50
#define SQL_MAX        1024
#define GTID_DOMAINS   16
#define HOST_MAX       127

struct cq_repl {
    char *host, *admin_user, *admin_password, *repl_user, *repl_password;
    unsigned port, timeout_s, wait_ms, semi_ms;
    bool wait_no_slave;
    MYSQL *db; /* our database; NULL until connected and after it broke */
    char errmsg[256];
};

/* ---- errors and connections --------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int fail(cq_repl_t *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
    va_end(ap);
    return code;
}

/* Client errors (CR_*: no answer, connection lost, timeout) mean the server is out of reach;
 * server errors mean it refused. */
static bool client_error(unsigned err)
{
    return err >= CR_MIN_ERROR && err <= CR_MAX_ERROR;
}

static int db_fail(cq_repl_t *r, MYSQL *db, const char *what)
{
    unsigned err = mysql_errno(db);
    int code = err == CR_OUT_OF_MEMORY ? -ENOMEM : client_error(err) ? CQ_REPL_EDOWN : CQ_ESTORE;
    return fail(r, code, "%s: %s (%u)", what, mysql_error(db), err);
}

/* Connects to host:port as the admin user; *ret owned (mysql_close). */
static int conn_open(cq_repl_t *r, const char *host, unsigned port, MYSQL **ret)
{
    if (cq__mysql_lib_init() != 0)
        return fail(r, CQ_ESTORE, "cannot initialize the MariaDB client library");
    unsigned t = r->timeout_s;
    my_bool off = 0;
    MYSQL *db = mysql_init(NULL);
    if (!db)
        return fail(r, -ENOMEM, "out of memory");
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_options(db, MYSQL_OPT_READ_TIMEOUT, &t);
    mysql_options(db, MYSQL_OPT_WRITE_TIMEOUT, &t);
    mysql_options(db, MYSQL_OPT_RECONNECT, &off);
    if (!mysql_real_connect(db, host, r->admin_user, r->admin_password, NULL, port, NULL, 0)) {
        char what[HOST_MAX + 32];
        snprintf(what, sizeof(what), "connect %s:%u", host, port);
        int code = db_fail(r, db, what);
        mysql_close(db);
        return code;
    }
    *ret = db;
    return 0;
}

static void own_drop(cq_repl_t *r)
{
    if (r->db)
        mysql_close(r->db);
    r->db = NULL;
}

/* Runs sql on db and discards any result. */
static int exec(cq_repl_t *r, MYSQL *db, const char *sql)
{
    if (mysql_real_query(db, sql, strlen(sql)) != 0)
        return db_fail(r, db, sql);
    MYSQL_RES *res = mysql_store_result(db);
    if (res)
        mysql_free_result(res);
    else if (mysql_field_count(db) != 0)
        return db_fail(r, db, sql);
    return 0;
}

/* Runs sql; *ret_res owned (mysql_free_result), NULL only on error. */
static int query(cq_repl_t *r, MYSQL *db, const char *sql, MYSQL_RES **ret_res)
{
    if (mysql_real_query(db, sql, strlen(sql)) != 0)
        return db_fail(r, db, sql);
    *ret_res = mysql_store_result(db);
    return *ret_res ? 0 : db_fail(r, db, sql);
}

/* The first row's first column as text into out ("" for NULL or no row). */
static int query_text(cq_repl_t *r, MYSQL *db, const char *sql, char *out, size_t outlen)
{
    MYSQL_RES *res = NULL;
    int rc = query(r, db, sql, &res);
    if (rc < 0)
        return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    snprintf(out, outlen, "%s", row && row[0] ? row[0] : "");
    mysql_free_result(res);
    return 0;
}

/* A column of res's current row by name, or NULL (absent or NULL). */
static const char *col(MYSQL_RES *res, MYSQL_ROW row, const char *name)
{
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned n = mysql_num_fields(res);
    for (unsigned i = 0; row && i < n; i++) {
        if (strcmp(f[i].name, name) == 0)
            return row[i];
    }
    return NULL;
}

/* "host:port" -> host (escaped for a quoted SQL string) and port. */
static int peer_parse(cq_repl_t *r, const char *peer, char *host, size_t hostlen, unsigned *port)
{
    const char *colon = peer ? strrchr(peer, ':') : NULL;
    char *end = NULL;
    unsigned long p = colon ? strtoul(colon + 1, &end, 10) : 0;
    size_t hl = colon ? (size_t)(colon - peer) : 0;
    if (!colon || hl == 0 || hl >= hostlen || end == colon + 1 || *end || p == 0 || p > 65535)
        return fail(r, -EINVAL, "bad peer address '%s' (expected host:port)", peer ? peer : "");
    memcpy(host, peer, hl);
    host[hl] = '\0';
    *port = (unsigned)p;
    return 0;
}

/* ---- open, close ---------------------------------------------------------------------------- */

static char *dup_or(const char *s, const char *dfl, bool *oom)
{
    const char *v = s ? s : dfl;
    char *d = v ? cq_strdup(v) : NULL;
    if (v && !d)
        *oom = true;
    return d;
}

int cq_repl_open(const cq_repl_opts_t *o, cq_repl_t **ret)
{
    if (!o || o->port > 65535)
        return -EINVAL;
    cq_repl_t *r = cq_calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    bool oom = false;
    r->host = dup_or(o->host, DFL_HOST, &oom);
    r->admin_user = dup_or(o->admin_user, "root", &oom);
    r->admin_password = dup_or(o->admin_password, NULL, &oom);
    r->repl_user = dup_or(o->repl_user, "repl", &oom);
    r->repl_password = dup_or(o->repl_password, "", &oom);
    r->port = o->port ? o->port : DFL_PORT;
    r->timeout_s = ((o->timeout_ms ? o->timeout_ms : DFL_TIMEOUT_MS) + 999) / 1000;
    r->wait_ms = o->wait_ms ? o->wait_ms : DFL_WAIT_MS;
    r->semi_ms = o->semi_sync_timeout_ms ? o->semi_sync_timeout_ms : DFL_SEMI_MS;
    r->wait_no_slave = o->semi_sync_wait_no_slave;
    if (oom) {
        cq_repl_close(r);
        return -ENOMEM;
    }
    *ret = r;
    return 0;
}

void cq_repl_close(cq_repl_t *r)
{
    if (!r)
        return;
    own_drop(r);
    cq_free(r->host);
    cq_free(r->admin_user);
    cq_free(r->admin_password);
    cq_free(r->repl_user);
    cq_free(r->repl_password);
    cq_free(r);
}

const char *cq_repl_errmsg(const cq_repl_t *r)
{
    return r->errmsg;
}

/* Runs fn on our database, connecting first when needed. A connection that turns out to be
 * broken (the server restarted since the last call) is made again once and fn runs again:
 * every operation here is idempotent. */
static int with_own(cq_repl_t *r, int (*fn)(cq_repl_t *r, void *arg), void *arg)
{
    r->errmsg[0] = '\0';
    for (int attempt = 0;; attempt++) {
        bool fresh = r->db == NULL;
        int rc = fresh ? conn_open(r, r->host, r->port, &r->db) : 0;
        if (rc == 0)
            rc = fn(r, arg);
        if (rc == CQ_REPL_EDOWN)
            own_drop(r);
        if (rc != CQ_REPL_EDOWN || fresh || attempt > 0)
            return rc;
    }
}

/* ---- slave status ---------------------------------------------------------------------------- */

typedef struct slave {
    bool configured; /* a row with a master */
    char host[HOST_MAX + 1];
    unsigned port;
    char io[16], sql[16]; /* Slave_IO_Running (Yes/No/Connecting), Slave_SQL_Running */
    int64_t behind;       /* -1: NULL */
    char io_pos[CQ_REPL_GTID_MAX + 1];
} slave_t;

static void copy_col(char *out, size_t outlen, const char *v)
{
    snprintf(out, outlen, "%s", v ? v : "");
}

static int slave_read(cq_repl_t *r, slave_t *s)
{
    MYSQL_RES *res = NULL;
    memset(s, 0, sizeof(*s));
    s->behind = -1;
    int rc = query(r, r->db, "SHOW SLAVE STATUS", &res);
    if (rc < 0)
        return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    const char *host = col(res, row, "Master_Host"), *port = col(res, row, "Master_Port");
    const char *behind = col(res, row, "Seconds_Behind_Master");
    s->configured = host && host[0];
    copy_col(s->host, sizeof(s->host), host);
    s->port = port ? (unsigned)strtoul(port, NULL, 10) : 0;
    copy_col(s->io, sizeof(s->io), col(res, row, "Slave_IO_Running"));
    copy_col(s->sql, sizeof(s->sql), col(res, row, "Slave_SQL_Running"));
    copy_col(s->io_pos, sizeof(s->io_pos), col(res, row, "Gtid_IO_Pos"));
    s->behind = behind ? strtoll(behind, NULL, 10) : -1;
    mysql_free_result(res);
    return 0;
}

static int read_only_get(cq_repl_t *r, bool *ret)
{
    char v[16];
    int rc = query_text(r, r->db, "SELECT @@GLOBAL.read_only", v, sizeof(v));
    *ret = rc == 0 && strcmp(v, "1") == 0;
    return rc;
}

/* ---- probe ------------------------------------------------------------------------------------
 */

static int do_probe(cq_repl_t *r, void *arg)
{
    cq_repl_probe_t *p = arg;
    slave_t s;
    int rc = read_only_get(r, &p->read_only);
    if (rc == 0)
        rc = slave_read(r, &s);
    p->replica = rc == 0 && s.configured;
    return rc;
}

int cq_repl_probe(cq_repl_t *r, cq_repl_probe_t *ret)
{
    memset(ret, 0, sizeof(*ret));
    return with_own(r, do_probe, ret);
}

/* ---- writable, read_only ----------------------------------------------------------------------
 */

static int semi_master_on(cq_repl_t *r)
{
    char sql[SQL_MAX];
    snprintf(sql, sizeof(sql),
             "SET GLOBAL rpl_semi_sync_master_timeout = %u, "
             "GLOBAL rpl_semi_sync_master_wait_no_slave = %s, "
             "GLOBAL rpl_semi_sync_master_enabled = ON",
             r->semi_ms, r->wait_no_slave ? "ON" : "OFF");
    return exec(r, r->db, sql);
}

static int do_writable(cq_repl_t *r, void *arg)
{
    (void)arg;
    int rc = semi_master_on(r);
    return rc < 0 ? rc : exec(r, r->db, "SET GLOBAL read_only = 0");
}

int cq_repl_writable(cq_repl_t *r)
{
    return with_own(r, do_writable, NULL);
}

static int do_read_only(cq_repl_t *r, void *arg)
{
    (void)arg;
    return exec(r, r->db, "SET GLOBAL read_only = 1");
}

int cq_repl_read_only(cq_repl_t *r)
{
    return with_own(r, do_read_only, NULL);
}

/* ---- fence --------------------------------------------------------------------------------------
 */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* What our database has received: Gtid_IO_Pos when it replicates, else its own position. */
static int own_received(cq_repl_t *r, char *out, size_t outlen)
{
    slave_t s;
    int rc = slave_read(r, &s);
    if (rc == 0 && s.configured) {
        snprintf(out, outlen, "%s", s.io_pos);
        return 0;
    }
    return rc < 0 ? rc : query_text(r, r->db, "SELECT @@GLOBAL.gtid_current_pos", out, outlen);
}

/* Polls until our database received want (bounded by wait_ms). */
static int wait_received(cq_repl_t *r, const char *want)
{
    char have[CQ_REPL_GTID_MAX + 1];
    uint64_t deadline = cq_clock_mono_ms() + r->wait_ms;
    for (;;) {
        int rc = own_received(r, have, sizeof(have));
        if (rc < 0)
            return rc;
        if (cq_repl_gtid_covers(have, want))
            return 0;
        if (cq_clock_mono_ms() >= deadline)
            return fail(r, CQ_ETIMEOUT, "our database received '%s', the peer has '%s'", have,
                        want);
        sleep_ms(POLL_MS);
    }
}

/* On the peer: read_only on, then its binlog position (read after: nothing commits since). */
static int peer_fence(cq_repl_t *r, const char *peer, char *pos, size_t poslen)
{
    char host[HOST_MAX + 1];
    unsigned port = 0;
    MYSQL *db = NULL;
    int rc = peer_parse(r, peer, host, sizeof(host), &port);
    if (rc == 0)
        rc = conn_open(r, host, port, &db);
    if (rc < 0)
        return rc; /* CQ_REPL_EDOWN here: unreachable, so it commits nothing either */
    rc = exec(r, db, "SET GLOBAL read_only = 1");
    if (rc == 0)
        rc = query_text(r, db, "SELECT @@GLOBAL.gtid_binlog_pos", pos, poslen);
    mysql_close(db);
    /* It answered, then broke or timed out: it may still take writes, so it is not "down". */
    return rc == CQ_REPL_EDOWN ? CQ_ESTORE : rc;
}

typedef struct fence_arg {
    const char *peer;
    char pos[CQ_REPL_GTID_MAX + 1];
} fence_arg_t;

static int do_fence_wait(cq_repl_t *r, void *arg)
{
    return wait_received(r, ((fence_arg_t *)arg)->pos);
}

int cq_repl_fence_peer(cq_repl_t *r, const char *peer)
{
    fence_arg_t a = {peer, ""};
    r->errmsg[0] = '\0';
    int rc = peer_fence(r, peer, a.pos, sizeof(a.pos));
    return rc < 0 ? rc : with_own(r, do_fence_wait, &a);
}

/* ---- promote
 * ------------------------------------------------------------------------------------- */

/* MASTER_GTID_WAIT in steps shorter than the read timeout, until wait_ms. */
static int wait_applied(cq_repl_t *r, const char *pos)
{
    char sql[SQL_MAX], v[16];
    char esc[2 * CQ_REPL_GTID_MAX + 1];
    mysql_real_escape_string(r->db, esc, pos, strlen(pos));
    unsigned step = r->timeout_s > 1 ? r->timeout_s - 1 : 1;
    snprintf(sql, sizeof(sql), "SELECT MASTER_GTID_WAIT('%s', %u)", esc, step);
    uint64_t deadline = cq_clock_mono_ms() + r->wait_ms;
    for (;;) {
        int rc = query_text(r, r->db, sql, v, sizeof(v));
        if (rc < 0 || strcmp(v, "0") == 0)
            return rc;
        if (cq_clock_mono_ms() >= deadline)
            return fail(r, CQ_ETIMEOUT, "received '%s' not applied within %u ms", pos, r->wait_ms);
    }
}

static int do_promote(cq_repl_t *r, void *arg)
{
    slave_t s;
    int rc = slave_read(r, &s);
    if (rc < 0 || !s.configured)
        return rc < 0 ? rc : do_writable(r, arg);
    rc = exec(r, r->db, "STOP SLAVE IO_THREAD");
    if (rc == 0)
        rc = slave_read(r, &s); /* Gtid_IO_Pos is final now */
    if (rc == 0 && strcmp(s.sql, "Yes") != 0)
        rc = exec(r, r->db, "START SLAVE SQL_THREAD");
    if (rc == 0 && s.io_pos[0])
        rc = wait_applied(r, s.io_pos);
    if (rc == 0)
        rc = exec(r, r->db, "STOP SLAVE");
    if (rc == 0)
        rc = exec(r, r->db, "RESET SLAVE ALL");
    return rc < 0 ? rc : do_writable(r, arg);
}

int cq_repl_promote(cq_repl_t *r)
{
    return with_own(r, do_promote, NULL);
}

/* ---- follow
 * -------------------------------------------------------------------------------------- */

typedef struct follow_arg {
    char host[HOST_MAX + 1];
    unsigned port;
} follow_arg_t;

static bool follows(const slave_t *s, const follow_arg_t *f)
{
    return s->configured && strcmp(s->host, f->host) == 0 && s->port == f->port &&
           (strcmp(s->io, "Yes") == 0 || strcmp(s->io, "Connecting") == 0) &&
           strcmp(s->sql, "Yes") == 0;
}

static int change_master(cq_repl_t *r, const follow_arg_t *f)
{
    char sql[SQL_MAX], host[2 * HOST_MAX + 1], user[2 * HOST_MAX + 1], pw[2 * HOST_MAX + 1];
    if (strlen(r->repl_user) > HOST_MAX || strlen(r->repl_password) > HOST_MAX)
        return fail(r, -EINVAL, "replication user or password too long");
    mysql_real_escape_string(r->db, host, f->host, strlen(f->host));
    mysql_real_escape_string(r->db, user, r->repl_user, strlen(r->repl_user));
    mysql_real_escape_string(r->db, pw, r->repl_password, strlen(r->repl_password));
    snprintf(sql, sizeof(sql),
             "CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %u, MASTER_USER = '%s', "
             "MASTER_PASSWORD = '%s', MASTER_USE_GTID = current_pos, MASTER_CONNECT_RETRY = 1",
             host, f->port, user, pw);
    return exec(r, r->db, sql);
}

static int do_follow(cq_repl_t *r, void *arg)
{
    const follow_arg_t *f = arg;
    slave_t s;
    int rc = slave_read(r, &s);
    if (rc < 0 || follows(&s, f))
        return rc;
    rc = exec(r, r->db, "SET GLOBAL read_only = 1");
    if (rc == 0)
        rc = exec(r, r->db, "STOP SLAVE");
    if (rc == 0)
        rc = change_master(r, f);
    if (rc == 0) /* takes effect when the IO thread starts */
        rc = exec(r, r->db,
                  "SET GLOBAL rpl_semi_sync_master_enabled = OFF, "
                  "GLOBAL rpl_semi_sync_slave_enabled = ON");
    return rc < 0 ? rc : exec(r, r->db, "START SLAVE");
}

int cq_repl_follow(cq_repl_t *r, const char *peer)
{
    follow_arg_t f;
    r->errmsg[0] = '\0';
    int rc = peer_parse(r, peer, f.host, sizeof(f.host), &f.port);
    return rc < 0 ? rc : with_own(r, do_follow, &f);
}

/* ---- status -------------------------------------------------------------------------------------
 */

static uint64_t to_u64(const char *v)
{
    return v ? strtoull(v, NULL, 10) : 0;
}

static int semi_read(cq_repl_t *r, cq_repl_status_t *st)
{
    MYSQL_RES *res = NULL;
    int rc = query(r, r->db,
                   "SHOW GLOBAL STATUS WHERE Variable_name IN ('Rpl_semi_sync_master_status', "
                   "'Rpl_semi_sync_master_clients', 'Rpl_semi_sync_master_yes_tx', "
                   "'Rpl_semi_sync_master_no_tx', 'Rpl_semi_sync_master_tx_avg_wait_time')",
                   &res);
    if (rc < 0)
        return rc;
    for (MYSQL_ROW row; (row = mysql_fetch_row(res)) && row[0];) {
        const char *n = row[0] + strlen("Rpl_semi_sync_master_"), *v = row[1];
        if (strcmp(n, "status") == 0)
            st->semi_sync_on = v && strcmp(v, "ON") == 0;
        else if (strcmp(n, "clients") == 0)
            st->semi_sync_clients = to_u64(v);
        else if (strcmp(n, "yes_tx") == 0)
            st->semi_sync_yes_tx = to_u64(v);
        else if (strcmp(n, "no_tx") == 0)
            st->semi_sync_no_tx = to_u64(v);
        else if (strcmp(n, "tx_avg_wait_time") == 0)
            st->semi_sync_avg_wait_us = to_u64(v);
    }
    mysql_free_result(res);
    return 0;
}

static int gtid_read(cq_repl_t *r, cq_repl_status_t *st)
{
    MYSQL_RES *res = NULL;
    int rc = query(r, r->db, "SELECT @@GLOBAL.gtid_binlog_pos, @@GLOBAL.gtid_slave_pos", &res);
    if (rc < 0)
        return rc;
    MYSQL_ROW row = mysql_fetch_row(res);
    copy_col(st->binlog_pos, sizeof(st->binlog_pos), row ? row[0] : NULL);
    copy_col(st->slave_pos, sizeof(st->slave_pos), row ? row[1] : NULL);
    mysql_free_result(res);
    return 0;
}

static int do_status(cq_repl_t *r, void *arg)
{
    cq_repl_status_t *st = arg;
    slave_t s;
    memset(st, 0, sizeof(*st));
    int rc = read_only_get(r, &st->read_only);
    if (rc == 0)
        rc = semi_read(r, st);
    if (rc == 0)
        rc = gtid_read(r, st);
    if (rc == 0)
        rc = slave_read(r, &s);
    if (rc < 0) {
        memset(st, 0, sizeof(*st));
        st->lag_seconds = st->lag_transactions = -1;
        return rc;
    }
    st->up = true;
    st->replica = s.configured;
    st->io_running = strcmp(s.io, "Yes") == 0;
    st->sql_running = strcmp(s.sql, "Yes") == 0;
    st->lag_seconds = s.configured ? s.behind : -1;
    snprintf(st->io_pos, sizeof(st->io_pos), "%s", s.io_pos);
    st->lag_transactions = s.configured ? cq_repl_gtid_distance(s.io_pos, st->slave_pos) : -1;
    return 0;
}

int cq_repl_status(cq_repl_t *r, cq_repl_status_t *ret)
{
    memset(ret, 0, sizeof(*ret)); /* as after a failure, also when connecting fails */
    ret->lag_seconds = ret->lag_transactions = -1;
    return with_own(r, do_status, ret);
}

/* ---- GTID positions ---------------------------------------------------------------------------
 */

typedef struct gtid {
    uint32_t domain, server;
    uint64_t seq;
} gtid_t;

/* Parses "D-S-N,D-S-N" (spaces and newlines allowed around items) into v; the count, or -1. */
static int gtid_parse(const char *s, gtid_t *v, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        while (*s == ' ' || *s == '\n' || *s == ',')
            s++;
        if (!*s)
            break;
        if (n == max)
            return -1;
        unsigned long d = strtoul(s, &end, 10);
        if (end == s || *end != '-')
            return -1;
        unsigned long sv = strtoul(end + 1, &end, 10);
        if (*end != '-')
            return -1;
        const char *p = end + 1;
        unsigned long long q = strtoull(p, &end, 10);
        if (end == p || (*end && *end != ',' && *end != ' ' && *end != '\n'))
            return -1;
        v[n++] = (gtid_t){(uint32_t)d, (uint32_t)sv, q};
        s = end;
    }
    return n;
}

static const gtid_t *gtid_find(const gtid_t *v, int n, uint32_t domain)
{
    for (int i = 0; i < n; i++) {
        if (v[i].domain == domain)
            return &v[i];
    }
    return NULL;
}

bool cq_repl_gtid_covers(const char *have, const char *want)
{
    gtid_t h[GTID_DOMAINS], w[GTID_DOMAINS];
    int nh = gtid_parse(have, h, GTID_DOMAINS), nw = gtid_parse(want, w, GTID_DOMAINS);
    if (nh < 0 || nw < 0)
        return false;
    for (int i = 0; i < nw; i++) {
        const gtid_t *x = gtid_find(h, nh, w[i].domain);
        if (!x || x->seq < w[i].seq)
            return false;
    }
    return true;
}

int64_t cq_repl_gtid_distance(const char *ahead, const char *behind)
{
    gtid_t a[GTID_DOMAINS], b[GTID_DOMAINS];
    int na = gtid_parse(ahead, a, GTID_DOMAINS), nb = gtid_parse(behind, b, GTID_DOMAINS);
    int64_t sum = 0;
    if (na < 0 || nb < 0)
        return -1;
    for (int i = 0; i < na; i++) {
        const gtid_t *x = gtid_find(b, nb, a[i].domain);
        if (!x)
            return -1;
        sum += a[i].seq > x->seq ? (int64_t)(a[i].seq - x->seq) : 0;
    }
    return sum;
}

/* ---- metrics ------------------------------------------------------------------------------------
 */

typedef struct out {
    cq_sbuf_t *sb;
    int err;
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (o->err == 0)
        o->err = cq_sbuf_vprintf(o->sb, fmt, ap);
    va_end(ap);
}

static void metric(out_t *o, const char *name, const char *type, const char *help, uint64_t v)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, v);
}

int cq_repl_metrics(const cq_repl_status_t *st, cq_sbuf_t *out)
{
    out_t o = {out, 0};
    metric(&o, "chanq_mq_db_up", "gauge", "1 when the database's status could be read.", st->up);
    if (!st->up)
        return o.err;
    metric(&o, "chanq_mq_db_read_only", "gauge", "The database's @@read_only.", st->read_only);
    metric(&o, "chanq_mq_repl_semi_sync_on", "gauge",
           "1 while commits wait for a standby's ack (Rpl_semi_sync_master_status).",
           st->semi_sync_on);
    metric(&o, "chanq_mq_repl_semi_sync_clients", "gauge", "Standbys connected with semi-sync.",
           st->semi_sync_clients);
    metric(&o, "chanq_mq_repl_semi_sync_yes_tx_total", "counter",
           "Commits acknowledged by a standby (since the server started).", st->semi_sync_yes_tx);
    metric(&o, "chanq_mq_repl_semi_sync_no_tx_total", "counter",
           "Commits not acknowledged by a standby: async (since the server started).",
           st->semi_sync_no_tx);
    put(&o,
        "# HELP chanq_mq_repl_semi_sync_avg_wait_seconds Average wait of a commit for the "
        "standby's ack.\n# TYPE chanq_mq_repl_semi_sync_avg_wait_seconds gauge\n"
        "chanq_mq_repl_semi_sync_avg_wait_seconds %.6f\n",
        (double)st->semi_sync_avg_wait_us / 1e6);
    metric(&o, "chanq_mq_repl_replica", "gauge", "1 when the database replicates from another.",
           st->replica);
    metric(&o, "chanq_mq_repl_io_running", "gauge", "Slave_IO_Running is Yes.", st->io_running);
    metric(&o, "chanq_mq_repl_sql_running", "gauge", "Slave_SQL_Running is Yes.", st->sql_running);
    if (st->lag_seconds >= 0)
        metric(&o, "chanq_mq_repl_lag_seconds", "gauge", "Seconds_Behind_Master.",
               (uint64_t)st->lag_seconds);
    if (st->lag_transactions >= 0)
        metric(&o, "chanq_mq_repl_lag_transactions", "gauge",
               "Transactions received and not applied yet.", (uint64_t)st->lag_transactions);
    put(&o,
        "# HELP chanq_mq_repl_gtid_info GTID positions: binlog (written here), io (received), "
        "slave (applied).\n# TYPE chanq_mq_repl_gtid_info gauge\n"
        "chanq_mq_repl_gtid_info{binlog=\"%s\",io=\"%s\",slave=\"%s\"} 1\n",
        st->binlog_pos, st->io_pos, st->slave_pos);
    return o.err;
}

/* ---- the coord runtime's DB ops
 * ------------------------------------------------------------------ */

static int db_act(cq_repl_t *r, const cq_coord_act_t *a, cq_coord_ev_t *ret)
{
    cq_repl_probe_t p;
    int rc;
    switch (a->type) {
    case CQ_COORD_ACT_DB_PROBE:
        rc = cq_repl_probe(r, &p);
        ret->db_replica = p.replica;
        ret->db_read_only = p.read_only;
        return rc;
    case CQ_COORD_ACT_DB_FENCE:
        return cq_repl_fence_peer(r, a->peer);
    case CQ_COORD_ACT_DB_PROMOTE:
        return cq_repl_promote(r);
    case CQ_COORD_ACT_DB_WRITABLE:
        return cq_repl_writable(r);
    case CQ_COORD_ACT_DB_READ_ONLY:
        return cq_repl_read_only(r);
    case CQ_COORD_ACT_DB_FOLLOW:
        return cq_repl_follow(r, a->peer);
    default:
        return fail(r, -EINVAL, "not a database action: %d", (int)a->type);
    }
}

int cq_repl_db_run(void *ud, const struct cq_coord_act *a, struct cq_coord_ev *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->type = CQ_COORD_EV_DB;
    ret->arg = (int)a->type;
    ret->rc = db_act(ud, a, ret);
    return ret->rc;
}
