/* mysql.c - the MariaDB store backend (cq_store_mysql_ops), on MariaDB Connector/C: open and
 * close, the reconnect rule and the ops table. The work is split by job (see mysql_int.h).
 *
 * One connection per handle, autocommit off: every operation runs in one transaction that ends
 * (COMMIT on success, ROLLBACK on failure) before the call returns, so a later read on any
 * connection sees it and no snapshot or lock outlives a call. An append returns its offsets only
 * after COMMIT returned, which with innodb_flush_log_at_trx_commit=1 and sync_binlog=1 on the
 * server means the rows are on disk. The fixed tables come from the embedded migrations
 * (migrations/mysql/), applied at open under a named lock; each topic has two InnoDB tables
 * (mysql_schema.c).
 *
 * Topic names reach SQL text only as the tbl suffix, which is checked again where the text is
 * built (MY_TOPIC_SQL); every value is a bound parameter. The connection is never reconnected
 * inside a call (MYSQL_OPT_RECONNECT stays off, so a lost transaction is an error, never a
 * silent half-retry); the next call after a lost connection connects again. One exception: when
 * the connection breaks at an append's COMMIT, the transaction may have committed, so the append
 * connects once more to find out (append_resolve() in mysql_append.c): the batch is acknowledged
 * if its rows are there, failed if not, and failed as "unknown" if the server cannot be reached;
 * a retry with the same producer_id and seq then gets the stored offsets if it did commit.
 */
#include "mysql_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>

#define DFL_HOST     "127.0.0.1"
#define DFL_PORT     3306
#define DFL_DATABASE "chanq"
#define LOCK_WAIT_MS 5000

/* ---- open, close ---------------------------------------------------------------------------- */

static void my_close(cq_store_t *s)
{
    my_store_t *q = my_store(s);
    if (!q)
        return;
    cq__mysql_disconnect(q);
    cq_free(q->host);
    cq_free(q->user);
    cq_free(q->password);
    cq_free(q->database);
    cq_free(q);
}

static int copy_opts(my_store_t *q, const cq_store_opts_t *o)
{
    int ms = o->busy_timeout_ms > 0 ? o->busy_timeout_ms : LOCK_WAIT_MS;
    q->host = cq_strdup(o->host ? o->host : DFL_HOST);
    q->user = o->user ? cq_strdup(o->user) : NULL;
    q->password = o->password ? cq_strdup(o->password) : NULL;
    q->database = cq_strdup(o->database ? o->database : DFL_DATABASE);
    q->port = o->port ? o->port : DFL_PORT;
    q->lock_wait_s = (unsigned)(ms + 999) / 1000;
    if (!q->host || !q->database || (o->user && !q->user) || (o->password && !q->password))
        return cq__store_fail(&q->base, -ENOMEM, "out of memory");
    return 0;
}

static int my_open(const cq_store_opts_t *opts, cq_store_t **ret_store, char *err, size_t errlen)
{
    if (cq__mysql_lib_init() != 0)
        return cq_err_fmt(err, errlen, CQ_ESTORE, "mysql store: cannot initialize the client");
    if (opts->database && !cq__mysql_db_name_ok(opts->database))
        return cq_err_fmt(err, errlen, -EINVAL, "mysql store: bad database name");
    my_store_t *q = cq_calloc(1, sizeof(*q));
    if (!q)
        return cq_err_fmt(err, errlen, -ENOMEM, "mysql store: out of memory");
    int r = copy_opts(q, opts);
    if (r == 0)
        r = cq__mysql_connect(q);
    if (r == 0)
        r = cq__mysql_migrate(q);
    if (r == CQ_ENOTMASTER) { /* a read_only replica: see schema_ensure() */
        q->schema_pending = true;
        r = 0;
    }
    if (r < 0) {
        cq_err_fmt(err, errlen, r, "mysql store %s:%u/%s: %s", q->host ? q->host : "?", q->port,
                   q->database ? q->database : "?", q->base.errmsg);
        my_close(&q->base);
        return r;
    }
    *ret_store = &q->base;
    return 0;
}

/* ---- the ops table ------------------------------------------------------------------------- */

/* A store opened on a read_only replica whose schema was behind (issue 11: a standby, before
 * replication brought the tables, or before its promotion to a primary) migrates at the first
 * operation that finds the database writable or the tables replicated. Until then operations
 * run anyway: reads of missing tables fail, writes answer CQ_ENOTMASTER. */
static int schema_ensure(my_store_t *q)
{
    int r = cq__mysql_migrate(q);
    if (r == 0)
        q->schema_pending = false;
    return r == CQ_ENOTMASTER ? 0 : r;
}

/* Every operation connects again first if the connection was lost by an earlier call. */
static int ensure(cq_store_t *s)
{
    my_store_t *q = my_store(s);
    int r = q->db && !q->lost ? 0 : cq__mysql_connect(q);
    return r == 0 && q->schema_pending ? schema_ensure(q) : r;
}

/* Runs call on a live connection. When it fails because the connection broke (a server restart,
 * a killed session, an idle timeout), it runs once more on a new connection: the broken
 * transaction never committed (the server rolls it back when the session ends), so the retry
 * cannot apply anything twice. The one unsafe case, a connection lost at an append's COMMIT, is
 * settled inside the append (append_resolve()), which leaves no lost connection behind. Every
 * other operation is idempotent even if its COMMIT did get through (an upsert, a flag, a purge
 * up to an id, CREATE ... IF NOT EXISTS then a unique row). */
#define RUN(s, call)                                                                               \
    do {                                                                                           \
        int run_r_ = ensure(s);                                                                    \
        if (run_r_ == 0)                                                                           \
            run_r_ = (call);                                                                       \
        if (run_r_ < 0 && my_store(s)->lost && (run_r_ = ensure(s)) == 0)                          \
            run_r_ = (call);                                                                       \
        return run_r_;                                                                             \
    } while (0)

/* A write on a read_only replica without the schema: what the tables would have answered. */
static int schema_write(cq_store_t *s)
{
    return cq__store_fail(s, CQ_ENOTMASTER, "mysql: read_only database without the schema");
}

#define RUN_WRITE(s, call) RUN(s, my_store(s)->schema_pending ? schema_write(s) : (call))

static int op_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms)
{
    RUN_WRITE(s, cq__mysql_topic_create(s, topic, retention_days, now_ms));
}

static int op_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n)
{
    RUN(s, cq__mysql_topic_list(s, ret_topics, ret_n));
}

static int op_topic_set_online(cq_store_t *s, const char *topic, bool online)
{
    RUN(s, cq__mysql_topic_set_online(s, topic, online));
}

static int op_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                           uint64_t *ret_offsets)
{
    RUN_WRITE(s, cq__mysql_append_batch(s, topic, msgs, n, ret_offsets));
}

static int op_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                   size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n)
{
    RUN(s, cq__mysql_read(s, topic, from_offset_exclusive, max, max_bytes, ret_recs, ret_n));
}

static int op_invalidate(cq_store_t *s, const char *topic, uint64_t offset)
{
    RUN(s, cq__mysql_invalidate(s, topic, offset));
}

static int op_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                       int *ret_state)
{
    RUN(s, cq__mysql_read_one(s, topic, offset, ret_rec, ret_state));
}

static int op_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                       uint64_t *ret_offset)
{
    RUN(s, cq__mysql_find_key(s, topic, producer_id, seq, ret_offset));
}

static int op_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                            uint64_t offset, int64_t now_ms)
{
    RUN(s, cq__mysql_commit_offset(s, topic, consumer_id, offset, now_ms));
}

static int op_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                         uint64_t *ret_offset)
{
    RUN(s, cq__mysql_get_offset(s, topic, consumer_id, ret_offset));
}

static int op_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                    size_t *ret_purged)
{
    RUN(s, cq__mysql_purge(s, topic, older_than_unix_ms, max_rows, ret_purged));
}

static int op_count(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                    uint64_t *ret_n)
{
    RUN(s, cq__mysql_count(s, topic, after, upto, ret_n));
}

static int op_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset)
{
    RUN(s, cq__mysql_high_water(s, topic, ret_offset));
}

static int op_created_ms(cq_store_t *s, uint64_t *ret_ms)
{
    RUN(s, cq__mysql_created_ms(s, ret_ms));
}

const cq_store_ops_t cq_store_mysql_ops = {
    .name = "mysql",
    .open = my_open,
    .close = my_close,
    .topic_create = op_topic_create,
    .topic_list = op_topic_list,
    .topic_set_online = op_topic_set_online,
    .append_batch = op_append_batch,
    .read = op_read,
    .invalidate = op_invalidate,
    .read_one = op_read_one,
    .find_key = op_find_key,
    .commit_offset = op_commit_offset,
    .get_offset = op_get_offset,
    .purge = op_purge,
    .high_water = op_high_water,
    .created_ms = op_created_ms,
    .count = op_count,
};
