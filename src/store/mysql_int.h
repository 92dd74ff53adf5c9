/* mysql_int.h - what the files of the MariaDB store backend share. Not for callers.
 *
 * The backend is cq_store_mysql_ops (mysql.c), split by job:
 *   mysql.c         open and close, the reconnect rule (RUN) and the ops table
 *   mysql_conn.c    connecting, the session set-up, error mapping (which errors lose the
 *                   connection)
 *   mysql_sql.c     statements: plain queries, transactions, bound parameters, the prepared
 *                   statement cache, fetch helpers
 *   mysql_schema.c  migrations, table names and the per-topic tables
 *   mysql_topic.c   topics: resolve, create, list, set online
 *   mysql_append.c  produce: idempotent array-bound inserts, COMMIT-uncertainty resolution
 *   mysql_read.c    reads, invalidation, the high water, consumer offsets
 *   mysql_purge.c   retention purge
 * mysql_repl.c (cq_repl.h, replication control) is not part of the backend; it shares only
 * cq__mysql_lib_init().
 * Only these files include <mysql.h> (scripts/check-layering.sh). Every function here runs on the
 * store thread that owns the handle; none calls back. Functions returning int return 0 or a
 * negative code and record the error text on the handle (cq__store_fail()).
 */
#ifndef CQ_STORE_MYSQL_INT_H
#define CQ_STORE_MYSQL_INT_H

#include "cq_store_impl.h"

#include <mysql.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MY_STC_MAX   64 /* prepared statements kept per connection */
#define MY_SQL_MAX   1024
#define MY_IDENT_MAX 64 /* MariaDB identifier length limit, characters */
#define MY_TBL_MAX   (MY_IDENT_MAX - 2)
#define MY_PMAX      6

/* A prepared statement kept for reuse on this connection, keyed by its SQL text. */
typedef struct my_stc {
    char *sql; /* owned */
    MYSQL_STMT *st;
    uint64_t used; /* LRU tick */
} my_stc_t;

typedef struct my_store {
    cq_store_t base;      /* first: cq_store_t * converts both ways */
    MYSQL *db;            /* NULL until connected */
    bool lost;            /* the connection broke: the next call connects again */
    bool bulk;            /* the server takes array-bound statements (MariaDB >= 10.2) */
    uint64_t autoinc_inc; /* the session's auto_increment_increment */
    my_stc_t stc[MY_STC_MAX];
    size_t nstc;
    uint64_t tick;
    /* What connect() needs again after a lost connection (owned copies). */
    char *host, *user, *password, *database;
    unsigned port;
    unsigned lock_wait_s;
    bool schema_pending; /* opened read_only with migrations not applied (mysql.c) */
} my_store_t;

/* A resolved topic: its stored spelling, table suffix and high water. */
typedef struct my_topic {
    char name[CQ_STORE_TOPIC_MAX + 1];
    char tbl[MY_TBL_MAX + 1];
    uint64_t high_water;
} my_topic_t;

/* Bound parameters: values are copied in, so a my_pbind_t must not move after p_init*(). Small
 * sets live inside the struct; p_init_heap() makes room for many (release with p_done()). */
typedef struct my_pbind {
    MYSQL_BIND *b;
    unsigned long *len;
    uint64_t *v;
    size_t n, cap;
    MYSQL_BIND small_b[MY_PMAX];
    unsigned long small_len[MY_PMAX];
    uint64_t small_v[MY_PMAX];
} my_pbind_t;

static inline my_store_t *my_store(cq_store_t *s)
{
    return (my_store_t *)s;
}

/* ---- mysql_conn.c: connection and error mapping ------------------------------------------ */

/* Record the connection's (db_fail) or the statement's (st_fail) last error for what and return
 * its code: -ENOMEM for a client out of memory, CQ_ESTORE otherwise. An error that loses the
 * connection sets q->lost; the next call connects again. */
int cq__mysql_db_fail(my_store_t *q, const char *what);
int cq__mysql_st_fail(my_store_t *q, MYSQL_STMT *st, const char *what);

/* Initializes the client library once per process (any thread); 0 or non-zero on failure. */
int cq__mysql_lib_init(void);

/* True when name may be a database name (the topic name rule: [A-Za-z0-9_]{1,64}). */
bool cq__mysql_db_name_ok(const char *name);

/* Connects (again) with the options in q and sets the session up (strict mode, lock wait,
 * autocommit off, the database created and selected, bulk and auto_increment_increment probed).
 * Any previous connection is closed first; on failure q is left without a connection. */
int cq__mysql_connect(my_store_t *q);

/* Closes the connection, if any, and the statements kept on it; clears q->lost. */
void cq__mysql_disconnect(my_store_t *q);

/* ---- mysql_sql.c: statements and transactions ------------------------------------------- */

/* Runs sql (no parameters) and discards its result. sql is borrowed. */
int cq__mysql_query(my_store_t *q, const char *sql);

/* Commit, roll back (keeping the error text; a no-op without a live connection), or end the
 * call's transaction: commit when r == 0, roll back otherwise; tx_end returns the final code. */
int cq__mysql_tx_commit(my_store_t *q);
void cq__mysql_tx_rollback(my_store_t *q);
int cq__mysql_tx_end(my_store_t *q, int r);

/* Bound parameters (my_pbind_t). p_init() for at most MY_PMAX values, p_init_heap() for cap
 * values (-ENOMEM recorded on q when out of memory), p_done() releases. The appenders copy
 * integers in; p_bytes() and p_str() borrow their data until the statement has executed. */
void cq__mysql_p_init(my_pbind_t *p);
int cq__mysql_p_init_heap(my_store_t *q, my_pbind_t *p, size_t cap);
void cq__mysql_p_done(my_pbind_t *p);
void cq__mysql_p_u64(my_pbind_t *p, uint64_t v);
void cq__mysql_p_i64(my_pbind_t *p, int64_t v);
void cq__mysql_p_bytes(my_pbind_t *p, enum enum_field_types type, const void *data, size_t len);
void cq__mysql_p_str(my_pbind_t *p, const char *s);
void cq__mysql_p_null(my_pbind_t *p);

/* Prepares sql; *ret_st is returned owned (mysql_stmt_close()). */
int cq__mysql_st_prepare(my_store_t *q, const char *sql, MYSQL_STMT **ret_st);

/* Prepares and executes sql with parameters p (may be NULL). *ret_st is returned owned (close
 * with mysql_stmt_close) when ret_st is not NULL; otherwise the statement is closed here. */
int cq__mysql_st_run(my_store_t *q, const char *sql, my_pbind_t *p, MYSQL_STMT **ret_st);

/* The statement cache: stc_get() returns the kept statement for sql, prepared now if needed
 * (borrowed: valid until the connection is dropped; never close it). stc_run() also executes it
 * with p (may be NULL); release its result with stc_done() (takes NULL) before the next use.
 * stc_clear() closes every kept statement. */
int cq__mysql_stc_get(my_store_t *q, const char *sql, MYSQL_STMT **ret_st);
int cq__mysql_stc_run(my_store_t *q, const char *sql, my_pbind_t *p, MYSQL_STMT **ret_st);
void cq__mysql_stc_done(MYSQL_STMT *st);
void cq__mysql_stc_clear(my_store_t *q);

/* Fetches the next row of st, binding res first when not NULL. 1 = a row, 0 = no more rows. */
int cq__mysql_st_fetch(my_store_t *q, MYSQL_STMT *st, MYSQL_BIND *res);

/* Sets b up as an unsigned 64-bit result column into *v (*is_null may be NULL). */
void cq__mysql_r_u64(MYSQL_BIND *b, uint64_t *v, my_bool *is_null);

/* Runs sql (one row of one unsigned integer expected). *ret_found = false when no row; *ret_v
 * is 0 for no row or NULL. */
int cq__mysql_query_u64(my_store_t *q, const char *sql, my_pbind_t *p, uint64_t *ret_v,
                        bool *ret_found);

/* ---- mysql_schema.c: migrations and table names ------------------------------------------ */

/* Applies every migration newer than the database under a named lock. Called by open. */
int cq__mysql_migrate(my_store_t *q);

/* True when tbl is a table suffix this backend could have made: [A-Za-z0-9_$]{1,62}. */
bool cq__mysql_tbl_ok(const char *tbl);

/* The table suffix of a (valid) topic name, written to tbl. */
void cq__mysql_table_suffix(const char *name, char tbl[MY_TBL_MAX + 1]);

/* Creates the topic's t_ and o_ tables (IF NOT EXISTS; DDL commits implicitly). */
int cq__mysql_topic_tables_create(my_store_t *q, const char *tbl);

/* The per-topic SQL text: fmt is a literal whose "%s" markers all take the table suffix. The
 * suffix is checked again here, as this is where it becomes SQL. */
#define MY_TOPIC_SQL(q, buf, fmt, tbl)                                                             \
    (cq__mysql_tbl_ok(tbl) && snprintf((buf), sizeof(buf), fmt, tbl) < (int)sizeof(buf)            \
         ? 0                                                                                       \
         : cq__store_fail(&(q)->base, CQ_EBADTOPIC, "bad topic name"))

/* ---- the operations (one transaction each, ended before they return) --------------------- */

/* mysql_topic.c. topic_resolve finds topic (any case); with lock, the topics row stays locked
 * until the transaction ends; CQ_ENOTOPIC if absent. The others are the cq_store_ops_t
 * operations of the same name (cq_store.h), run on a live connection by mysql.c. */
int cq__mysql_topic_resolve(my_store_t *q, const char *topic, bool lock, my_topic_t *ret_t);
int cq__mysql_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms);
int cq__mysql_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n);
int cq__mysql_topic_set_online(cq_store_t *s, const char *topic, bool online);

/* mysql_append.c. Settles a connection lost at COMMIT itself (no lost connection is left). */
int cq__mysql_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                           uint64_t *ret_offsets);

/* mysql_read.c */
int cq__mysql_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                   size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n);
int cq__mysql_invalidate(cq_store_t *s, const char *topic, uint64_t offset);
int cq__mysql_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                       uint64_t *ret_offset);
int cq__mysql_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                       int *ret_state);
int cq__mysql_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset);
int cq__mysql_created_ms(cq_store_t *s, uint64_t *ret_ms);
int cq__mysql_count(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                    uint64_t *ret_n);
int cq__mysql_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                            uint64_t offset, int64_t now_ms);
int cq__mysql_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                         uint64_t *ret_offset);

/* mysql_purge.c */
int cq__mysql_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                    size_t *ret_purged);

#endif
