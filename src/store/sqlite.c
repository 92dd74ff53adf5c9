/* sqlite.c - the embedded SQLite store backend (cq_store_sqlite_ops).
 *
 * One database file, <dir>/chanq.db, in WAL mode with synchronous=FULL: the WAL is fsynced at
 * every commit, so a transaction that returned is on disk. The fixed tables come from the
 * embedded migrations (migrations/sqlite/), applied in one transaction at open. Each topic has
 * two tables created from the templates below:
 *
 *   t_<topic>  id INTEGER PRIMARY KEY AUTOINCREMENT (the offset; AUTOINCREMENT so that an id is
 *              never reused, even after purge deleted the newest rows), create_time (unix ms),
 *              content BLOB, state (1 valid, 0 invalid), producer_id, seq, UNIQUE(producer_id,
 *              seq). producer_id and seq are NULL for messages without a producer id; NULLs are
 *              distinct in a UNIQUE index, so those are never deduplicated.
 *   o_<topic>  consumer_id TEXT PRIMARY KEY, update_time (unix ms), "offset" (quoted: it is a
 *              reserved word in MariaDB, and quoted here too so the templates read alike).
 *
 * Topic names reach SQL text only after cq_store_topic_name_ok() accepted them, and then in the
 * spelling stored in the topics table (names are unique case-insensitively); every value is a
 * bound parameter. SQLite serializes writers on the database lock and assigns ids inside the
 * write transaction, so offsets become visible in commit order.
 */
#include "cq_store_impl.h"
#include "sqlite_migrations.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DB_FILE         "chanq.db"
#define BUSY_TIMEOUT_MS 5000
#define SQL_MAX         1024

typedef struct sq_store {
    cq_store_t base; /* first: cq_store_t * converts both ways */
    sqlite3 *db;
} sq_store_t;

/* Forward-only, in version order. Add a row per new migrations/sqlite/NNNN_*.sql file. */
static const cq__migration_t migrations[] = {
    {1, cq_embedded_sqlite_0001},
};

static sq_store_t *SQ(cq_store_t *s)
{
    return (sq_store_t *)s;
}

/* ---- statement helpers --------------------------------------------------------------------- */

/* Records SQLite's error for what and returns the matching code. */
static int db_fail(sq_store_t *q, const char *what)
{
    int rc = sqlite3_errcode(q->db);
    int code = (rc == SQLITE_NOMEM) ? -ENOMEM : CQ_ESTORE;
    return cq__store_fail(&q->base, code, "sqlite %s: %s", what, sqlite3_errmsg(q->db));
}

static int prep(sq_store_t *q, const char *sql, sqlite3_stmt **ret_stmt)
{
    q->base.sql_count++;
    if (sqlite3_prepare_v2(q->db, sql, -1, ret_stmt, NULL) != SQLITE_OK)
        return db_fail(q, "prepare");
    return 0;
}

static int exec(sq_store_t *q, const char *sql)
{
    q->base.sql_count++;
    if (sqlite3_exec(q->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(q, "exec");
    return 0;
}

/* Steps a statement that returns no row (or whose rows are ignored). */
static int step_done(sq_store_t *q, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return db_fail(q, "step");
    return 0;
}

static int tx_begin(sq_store_t *q)
{
    return exec(q, "BEGIN IMMEDIATE");
}

static int tx_commit(sq_store_t *q)
{
    return exec(q, "COMMIT");
}

/* Rolls back if a transaction is open (SQLite may already have rolled back after an I/O error).
 * Keeps the error text of the failure that caused the rollback. */
static void tx_rollback(sq_store_t *q)
{
    if (!sqlite3_get_autocommit(q->db)) {
        q->base.sql_count++;
        sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
    }
}

/* Ends a transaction: commits when r == 0, rolls back otherwise. Returns the final code. */
static int tx_end(sq_store_t *q, int r)
{
    if (r == 0)
        r = tx_commit(q);
    if (r < 0)
        tx_rollback(q);
    return r;
}

/* The per-topic SQL text: fmt is a literal with one "%s" where the topic name goes. The name is
 * checked again here, as this is where it becomes SQL. */
#define TOPIC_SQL(q, buf, fmt, name)                                                               \
    (cq_store_topic_name_ok(name) && snprintf((buf), sizeof(buf), fmt, name) < SQL_MAX             \
         ? 0                                                                                       \
         : cq__store_fail(&(q)->base, CQ_EBADTOPIC, "bad topic name"))

/* ---- topics -------------------------------------------------------------------------------- */

/* Finds topic (any case) and writes its stored spelling to canon. CQ_ENOTOPIC if absent. */
static int topic_resolve(sq_store_t *q, const char *topic, char canon[CQ_STORE_TOPIC_MAX + 1])
{
    sqlite3_stmt *st = NULL;
    int r = prep(q, "SELECT name FROM topics WHERE name = ?1", &st);
    if (r < 0)
        return r;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (cq_store_topic_name_ok(name))
            memcpy(canon, name, strlen(name) + 1);
        else
            r = cq__store_fail(&q->base, CQ_ESTORE, "topics table holds a bad name");
    } else if (rc == SQLITE_DONE) {
        r = cq__store_fail(&q->base, CQ_ENOTOPIC, "unknown topic '%s'", topic);
    } else {
        r = db_fail(q, "topic lookup");
    }
    sqlite3_finalize(st);
    return r;
}

static int topic_insert(sq_store_t *q, const char *topic, int retention_days, int64_t now_ms)
{
    sqlite3_stmt *st = NULL;
    int r = prep(q,
                 "INSERT INTO topics (name, online, retention_days, created_ms) "
                 "VALUES (?1, 1, ?2, ?3)",
                 &st);
    if (r < 0)
        return r;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, retention_days);
    sqlite3_bind_int64(st, 3, now_ms);
    r = step_done(q, st);
    sqlite3_finalize(st);
    return r;
}

static int topic_tables_create(sq_store_t *q, const char *topic)
{
    char sql[SQL_MAX];
    int r = TOPIC_SQL(q, sql,
                      "CREATE TABLE \"t_%s\" ("
                      "id INTEGER PRIMARY KEY AUTOINCREMENT, "
                      "create_time INTEGER NOT NULL, "
                      "content BLOB NOT NULL, "
                      "state INTEGER NOT NULL DEFAULT 1, "
                      "producer_id INTEGER, "
                      "seq INTEGER, "
                      "UNIQUE (producer_id, seq))",
                      topic);
    if (r == 0)
        r = exec(q, sql);
    if (r == 0)
        r = TOPIC_SQL(q, sql,
                      "CREATE TABLE \"o_%s\" ("
                      "consumer_id TEXT NOT NULL PRIMARY KEY, "
                      "update_time INTEGER NOT NULL, "
                      "\"offset\" INTEGER NOT NULL)",
                      topic);
    return r < 0 ? r : exec(q, sql);
}

static int sq_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1];
    int r = tx_begin(q);
    if (r < 0)
        return r;
    r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = cq__store_fail(s, CQ_EEXIST, "topic '%s' exists", canon);
    else if (r == CQ_ENOTOPIC)
        r = topic_insert(q, topic, retention_days, now_ms);
    if (r == 0)
        r = topic_tables_create(q, topic);
    if (r == 0)
        s->errmsg[0] = '\0';
    return tx_end(q, r);
}

static void topic_from_row(sqlite3_stmt *st, cq_store_topic_t *t)
{
    const char *name = (const char *)sqlite3_column_text(st, 0);
    snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
    t->online = sqlite3_column_int(st, 1) != 0;
    t->retention_days = sqlite3_column_int(st, 2);
    t->created_ms = sqlite3_column_int64(st, 3);
}

static int sq_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n)
{
    sq_store_t *q = SQ(s);
    sqlite3_stmt *st = NULL;
    cq_store_topic_t *v = NULL;
    size_t n = 0, cap = 0;
    int rc = SQLITE_DONE;
    int r =
        prep(q, "SELECT name, online, retention_days, created_ms FROM topics ORDER BY name", &st);
    while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            cq_store_topic_t *nv = cq_realloc(v, ncap * sizeof(*v));
            if (!nv) {
                r = cq__store_fail(s, -ENOMEM, "out of memory listing topics");
                break;
            }
            v = nv;
            cap = ncap;
        }
        topic_from_row(st, &v[n++]);
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = db_fail(q, "topic list");
    sqlite3_finalize(st);
    if (r < 0) {
        cq_free(v);
        return r;
    }
    *ret_topics = n ? v : NULL;
    if (!n)
        cq_free(v);
    *ret_n = n;
    return 0;
}

static int sq_topic_set_online(cq_store_t *s, const char *topic, bool online)
{
    sq_store_t *q = SQ(s);
    sqlite3_stmt *st = NULL;
    int r = prep(q, "UPDATE topics SET online = ?1 WHERE name = ?2", &st);
    if (r < 0)
        return r;
    sqlite3_bind_int(st, 1, online ? 1 : 0);
    sqlite3_bind_text(st, 2, topic, -1, SQLITE_STATIC);
    r = step_done(q, st);
    sqlite3_finalize(st);
    if (r == 0 && sqlite3_changes(q->db) == 0)
        r = cq__store_fail(s, CQ_ENOTOPIC, "unknown topic '%s'", topic);
    return r;
}

/* ---- append -------------------------------------------------------------------------------- */

typedef struct append_ctx {
    sq_store_t *q;
    sqlite3_stmt *ins;  /* insert */
    sqlite3_stmt *dup;  /* offset of a stored (producer_id, seq), and whether content is equal */
    sqlite3_stmt *last; /* a producer's highest stored seq */
    uint64_t pid;       /* the producer whose last seq is in pid_last (0: none yet) */
    bool pid_any;       /* pid has a stored message */
    int64_t pid_last;
    int64_t now_ms;
} append_ctx_t;

static int append_prepare(append_ctx_t *c, const char *canon)
{
    char sql[SQL_MAX];
    int r = TOPIC_SQL(c->q, sql,
                      "INSERT INTO \"t_%s\" (create_time, content, state, producer_id, seq) "
                      "VALUES (?1, ?2, 1, ?3, ?4)",
                      canon);
    if (r == 0)
        r = prep(c->q, sql, &c->ins);
    if (r == 0)
        r = TOPIC_SQL(c->q, sql,
                      "SELECT id, content = ?3 FROM \"t_%s\" WHERE producer_id = ?1 AND seq = ?2",
                      canon);
    if (r == 0)
        r = prep(c->q, sql, &c->dup);
    if (r == 0)
        r = TOPIC_SQL(c->q, sql, "SELECT MAX(seq) FROM \"t_%s\" WHERE producer_id = ?1", canon);
    if (r == 0)
        r = prep(c->q, sql, &c->last);
    return r;
}

/* The topic's high water before the batch: its AUTOINCREMENT counter, under the write lock. */
static int append_base(append_ctx_t *c, const char *canon)
{
    char name[CQ_STORE_TOPIC_MAX + 3];
    sqlite3_stmt *st = NULL;
    snprintf(name, sizeof(name), "t_%s", canon);
    int r = prep(c->q, "SELECT seq FROM sqlite_sequence WHERE name = ?1", &st);
    if (r < 0)
        return r;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    c->q->base.append_base = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        r = db_fail(c->q, "high water");
    sqlite3_finalize(st);
    return r;
}

/* Looks m's (producer_id, seq) up: 1 with its offset and whether the stored content is m's, 0
 * when it is not stored. */
static int append_find_dup(append_ctx_t *c, const cq_store_msg_t *m, uint64_t *ret_offset,
                           bool *ret_same)
{
    sqlite3_stmt *st = c->dup;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)m->producer_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)m->seq);
    sqlite3_bind_blob(st, 3, m->content ? m->content : "", (int)m->len, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return 0;
    if (rc != SQLITE_ROW)
        return db_fail(c->q, "dedup lookup");
    *ret_offset = (uint64_t)sqlite3_column_int64(st, 0);
    *ret_same = sqlite3_column_int(st, 1) == 1;
    return 1;
}

/* Loads pid's highest stored seq into c (once per run of one producer's messages). */
static int append_last_seq(append_ctx_t *c, uint64_t pid)
{
    if (c->pid == pid)
        return 0;
    sqlite3_stmt *st = c->last;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)pid);
    if (sqlite3_step(st) != SQLITE_ROW)
        return db_fail(c->q, "last seq");
    c->pid = pid;
    c->pid_any = sqlite3_column_type(st, 0) != SQLITE_NULL;
    c->pid_last = sqlite3_column_int64(st, 0);
    return 0;
}

/* The sequence rules of a message with a producer id (cq_store.h): 1 with *ret_offset for a
 * retry, 0 when it is new, or a sequence error naming message i. */
static int append_seq_check(append_ctx_t *c, size_t i, const cq_store_msg_t *m,
                            uint64_t *ret_offset)
{
    cq_store_t *s = &c->q->base;
    bool same = false;
    int r = append_find_dup(c, m, ret_offset, &same);
    if (r == 1 && !same) {
        s->append_bad = i;
        return cq__store_fail(s, CQ_ESEQCONFLICT,
                              "message %zu: producer_id %" PRIu64 " seq %" PRIu64
                              " is stored at offset %" PRIu64 " with other content",
                              i, m->producer_id, m->seq, *ret_offset);
    }
    if (r != 0)
        return r;
    r = append_last_seq(c, m->producer_id);
    if (r == 0 && !m->hole && c->pid_any && (int64_t)m->seq < c->pid_last) {
        s->append_bad = i;
        return cq__store_fail(s, CQ_ESEQORDER,
                              "message %zu: producer_id %" PRIu64 " seq %" PRIu64
                              " is below its last stored seq %" PRId64,
                              i, m->producer_id, m->seq, c->pid_last);
    }
    return r;
}

static int append_one(append_ctx_t *c, size_t i, const cq_store_msg_t *m, uint64_t *ret_offset)
{
    cq_store_t *s = &c->q->base;
    if (m->len > s->max_content)
        return cq__store_fail(s, CQ_ECONTENT, "message %zu: %zu bytes, over the limit of %zu", i,
                              m->len, s->max_content);
    if (m->len > INT32_MAX || (m->len && !m->content))
        return cq__store_fail(s, -EINVAL, "message %zu: bad content", i);
    int r = m->producer_id ? append_seq_check(c, i, m, ret_offset) : 0;
    if (r != 0)
        return r < 0 ? r : 0; /* 1: a retry, *ret_offset is the original */
    sqlite3_stmt *st = c->ins;
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, m->create_ms ? m->create_ms : c->now_ms);
    sqlite3_bind_blob(st, 2, m->content ? m->content : "", (int)m->len, SQLITE_STATIC);
    if (m->producer_id) {
        sqlite3_bind_int64(st, 3, (sqlite3_int64)m->producer_id);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)m->seq);
    } else {
        sqlite3_bind_null(st, 3);
        sqlite3_bind_null(st, 4);
    }
    r = step_done(c->q, st);
    if (r < 0)
        return r;
    /* the producer's last seq is now this one, unless it is a hole's, below it */
    if (m->producer_id && (!c->pid_any || (int64_t)m->seq > c->pid_last)) {
        c->pid_any = true;
        c->pid_last = (int64_t)m->seq;
    }
    *ret_offset = (uint64_t)sqlite3_last_insert_rowid(c->q->db);
    return 0;
}

static int sq_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                           uint64_t *ret_offsets)
{
    sq_store_t *q = SQ(s);
    append_ctx_t c = {.q = q, .now_ms = cq__store_now_ms()};
    char canon[CQ_STORE_TOPIC_MAX + 1];
    uint64_t *offs = cq_malloc(n * sizeof(*offs));
    if (!offs)
        return cq__store_fail(s, -ENOMEM, "out of memory for %zu offsets", n);
    int r = tx_begin(q);
    if (r < 0)
        goto out;
    r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = append_prepare(&c, canon);
    if (r == 0)
        r = append_base(&c, canon);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = append_one(&c, i, &msgs[i], &offs[i]);
    sqlite3_finalize(c.ins);
    sqlite3_finalize(c.dup);
    sqlite3_finalize(c.last);
    r = tx_end(q, r);
    if (r == 0)
        memcpy(ret_offsets, offs, n * sizeof(*offs));
out:
    cq_free(offs);
    return r;
}

/* ---- read ---------------------------------------------------------------------------------- */

static int rec_from_row(sq_store_t *q, sqlite3_stmt *st, cq_store_rec_t *rec)
{
    const void *blob = sqlite3_column_blob(st, 2);
    size_t len = (size_t)sqlite3_column_bytes(st, 2);
    char *content = cq_malloc(len + 1); /* NUL-terminated for the caller's sake */
    if (!content)
        return cq__store_fail(&q->base, -ENOMEM, "out of memory reading %zu bytes", len);
    if (len)
        memcpy(content, blob, len);
    content[len] = '\0';
    rec->offset = (uint64_t)sqlite3_column_int64(st, 0);
    rec->create_ms = sqlite3_column_int64(st, 1);
    rec->producer_id = (uint64_t)sqlite3_column_int64(st, 3);
    rec->seq = (uint64_t)sqlite3_column_int64(st, 4);
    rec->content = content;
    rec->len = len;
    return 0;
}

/* Steps through the rows one at a time: a row over the byte bound is looked at (its length)
 * but its content is not copied, and nothing after it is read. */
static int read_rows(sq_store_t *q, sqlite3_stmt *st, size_t max, size_t max_bytes,
                     cq_store_rec_t *recs, size_t *ret_n)
{
    size_t n = 0, bytes = 0;
    int rc = SQLITE_DONE, r = 0;
    bool full = false;
    while (n < max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t len = (size_t)sqlite3_column_bytes(st, 2);
        if (max_bytes && n > 0 && bytes + len > max_bytes) {
            full = true;
            break;
        }
        r = rec_from_row(q, st, &recs[n]);
        if (r < 0)
            break;
        bytes += len;
        n++;
    }
    if (r == 0 && !full && n < max && rc != SQLITE_DONE)
        r = db_fail(q, "read");
    if (r < 0) {
        cq_store_recs_done(recs, n);
        return r;
    }
    *ret_n = n;
    return 0;
}

static int sq_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                   size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0 && from_offset_exclusive >= INT64_MAX) {
        *ret_n = 0;
        return 0;
    }
    if (r == 0)
        r = TOPIC_SQL(q, sql,
                      "SELECT id, create_time, content, producer_id, seq FROM \"t_%s\" "
                      "WHERE id > ?1 AND state = 1 ORDER BY id LIMIT ?2",
                      canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)from_offset_exclusive);
        sqlite3_bind_int64(st, 2, max > INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
        r = read_rows(q, st, max, max_bytes, ret_recs, ret_n);
    }
    sqlite3_finalize(st);
    return r;
}

/* The state of the row at offset into *ret_state; -ENOENT when none. */
static int sq_state(sq_store_t *q, const char *canon, uint64_t offset, int *ret_state)
{
    char sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = TOPIC_SQL(q, sql, "SELECT state FROM \"t_%s\" WHERE id = ?1", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)offset);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *ret_state = sqlite3_column_int(st, 0);
        else
            r = rc == SQLITE_DONE
                    ? cq__store_fail(&q->base, -ENOENT, "no message at offset %" PRIu64, offset)
                    : db_fail(q, "read");
    }
    sqlite3_finalize(st);
    return r;
}

static int sq_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                       int *ret_state)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int r = topic_resolve(q, topic, canon);
    if (r == 0 && offset > INT64_MAX)
        return cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    if (r == 0)
        r = sq_state(q, canon, offset, ret_state);
    if (r == 0)
        r = TOPIC_SQL(q, sql,
                      "SELECT id, create_time, content, producer_id, seq FROM \"t_%s\" "
                      "WHERE id = ?1",
                      canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)offset);
        r = read_rows(q, st, 1, 0, ret_rec, &n);
    }
    sqlite3_finalize(st);
    if (r == 0 && n == 0)
        r = cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    return r;
}

static int sq_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                       uint64_t *ret_offset)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = TOPIC_SQL(q, sql, "SELECT id FROM \"t_%s\" WHERE producer_id = ?1 AND seq = ?2", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)producer_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *ret_offset = (uint64_t)sqlite3_column_int64(st, 0);
        else
            r = rc == SQLITE_DONE
                    ? cq__store_fail(s, -ENOENT, "no message of producer %" PRIu64 " seq %" PRIu64,
                                     producer_id, seq)
                    : db_fail(q, "read");
    }
    sqlite3_finalize(st);
    return r;
}

static int sq_invalidate(cq_store_t *s, const char *topic, uint64_t offset)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = TOPIC_SQL(q, sql, "UPDATE \"t_%s\" SET state = 0 WHERE id = ?1", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)offset);
        r = step_done(q, st);
    }
    sqlite3_finalize(st);
    if (r == 0 && sqlite3_changes(q->db) == 0)
        r = cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    return r;
}

/* ---- purge and high water ------------------------------------------------------------------ */

/* Scans at most max_rows of the oldest rows and finds the last id of the prefix older than
 * cutoff. *ret_n = 0 when the oldest row is not old enough. */
static int purge_scan(sq_store_t *q, const char *canon, int64_t cutoff, size_t max_rows,
                      int64_t *ret_last, size_t *ret_n)
{
    char sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    size_t n = 0;
    int64_t last = 0;
    int rc = SQLITE_DONE;
    int r = TOPIC_SQL(q, sql, "SELECT id, create_time FROM \"t_%s\" ORDER BY id LIMIT ?1", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0)
        sqlite3_bind_int64(st, 1, max_rows > INT64_MAX ? INT64_MAX : (sqlite3_int64)max_rows);
    while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_int64(st, 1) >= cutoff)
            break;
        last = sqlite3_column_int64(st, 0);
        n++;
    }
    if (r == 0 && rc != SQLITE_ROW && rc != SQLITE_DONE)
        r = db_fail(q, "purge scan");
    sqlite3_finalize(st);
    if (r == 0) {
        *ret_last = last;
        *ret_n = n;
    }
    return r;
}

static int purge_delete(sq_store_t *q, const char *canon, int64_t last)
{
    char sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = TOPIC_SQL(q, sql, "DELETE FROM \"t_%s\" WHERE id <= ?1", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_int64(st, 1, last);
        r = step_done(q, st);
    }
    sqlite3_finalize(st);
    return r;
}

static int sq_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                    size_t *ret_purged)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1];
    int64_t last = 0;
    size_t n = 0;
    int r = tx_begin(q);
    if (r < 0)
        return r;
    r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = purge_scan(q, canon, older_than_unix_ms, max_rows, &last, &n);
    if (r == 0 && n > 0)
        r = purge_delete(q, canon, last);
    r = tx_end(q, r);
    if (r == 0)
        *ret_purged = n;
    return r;
}

static int sq_created_ms(cq_store_t *s, uint64_t *ret_ms)
{
    sq_store_t *q = SQ(s);
    sqlite3_stmt *st = NULL;
    int r = prep(q, "SELECT applied_ms FROM schema_version WHERE version = 1", &st);
    if (r < 0)
        return r;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *ret_ms = (uint64_t)sqlite3_column_int64(st, 0);
    else
        r = rc == SQLITE_DONE ? cq__store_fail(s, -ENOENT, "no first migration")
                              : db_fail(q, "created");
    sqlite3_finalize(st);
    return r;
}

static int sq_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 2 + 1] = "t_";
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon + 2);
    if (r == 0)
        r = prep(q, "SELECT seq FROM sqlite_sequence WHERE name = ?1", &st);
    if (r < 0)
        return r;
    sqlite3_bind_text(st, 1, canon, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    uint64_t hw = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        r = db_fail(q, "high water");
    sqlite3_finalize(st);
    if (r == 0)
        *ret_offset = hw;
    return r;
}

static int sq_count(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                    uint64_t *ret_n)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = TOPIC_SQL(q, sql,
                      "SELECT COUNT(*) FROM \"t_%s\" WHERE state = 1 AND id > ?1 AND id <= ?2",
                      canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r < 0)
        return r;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)after);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)upto);
    int rc = sqlite3_step(st);
    uint64_t n = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW)
        r = db_fail(q, "count");
    sqlite3_finalize(st);
    if (r == 0)
        *ret_n = n;
    return r;
}

/* ---- consumer offsets ---------------------------------------------------------------------- */

static int sq_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                            uint64_t offset, int64_t now_ms)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = TOPIC_SQL(q, sql,
                      "INSERT INTO \"o_%s\" (consumer_id, update_time, \"offset\") "
                      "VALUES (?1, ?2, ?3) ON CONFLICT (consumer_id) DO UPDATE SET "
                      "update_time = excluded.update_time, \"offset\" = excluded.\"offset\"",
                      canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r == 0) {
        sqlite3_bind_text(st, 1, consumer_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now_ms);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)offset);
        r = step_done(q, st);
    }
    sqlite3_finalize(st);
    return r;
}

static int sq_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                         uint64_t *ret_offset)
{
    sq_store_t *q = SQ(s);
    char canon[CQ_STORE_TOPIC_MAX + 1], sql[SQL_MAX];
    sqlite3_stmt *st = NULL;
    int r = topic_resolve(q, topic, canon);
    if (r == 0)
        r = TOPIC_SQL(q, sql, "SELECT \"offset\" FROM \"o_%s\" WHERE consumer_id = ?1", canon);
    if (r == 0)
        r = prep(q, sql, &st);
    if (r < 0)
        return r;
    sqlite3_bind_text(st, 1, consumer_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *ret_offset = (uint64_t)sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE)
        r = cq__store_fail(s, -ENOENT, "consumer has no committed offset");
    else
        r = db_fail(q, "get offset");
    sqlite3_finalize(st);
    return r;
}

/* ---- open, migrations, close --------------------------------------------------------------- */

/* The highest applied migration, 0 for a new database. */
static int schema_version(sq_store_t *q, int *ret_version)
{
    sqlite3_stmt *st = NULL;
    int r = prep(q,
                 "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                 "AND name = 'schema_version'",
                 &st);
    if (r < 0)
        return r;
    bool exists = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (!exists) {
        *ret_version = 0;
        return 0;
    }
    r = prep(q, "SELECT COALESCE(MAX(version), 0) FROM schema_version", &st);
    if (r < 0)
        return r;
    if (sqlite3_step(st) == SQLITE_ROW)
        *ret_version = sqlite3_column_int(st, 0);
    else
        r = db_fail(q, "schema version");
    sqlite3_finalize(st);
    return r;
}

static int migration_apply(sq_store_t *q, const cq__migration_t *m)
{
    sqlite3_stmt *st = NULL;
    int r = exec(q, m->sql);
    if (r == 0)
        r = prep(q, "INSERT INTO schema_version (version, applied_ms) VALUES (?1, ?2)", &st);
    if (r == 0) {
        sqlite3_bind_int(st, 1, m->version);
        sqlite3_bind_int64(st, 2, cq__store_now_ms());
        r = step_done(q, st);
    }
    sqlite3_finalize(st);
    return r;
}

static int apply_one(void *ud, const cq__migration_t *m)
{
    return migration_apply(ud, m);
}

/* Applies every migration newer than the database, all in one transaction. */
static int migrate(sq_store_t *q)
{
    int version = 0;
    int r = tx_begin(q);
    if (r < 0)
        return r;
    r = schema_version(q, &version);
    if (r == 0)
        r = cq__store_migrate_from(&q->base, migrations, CQ_ARRAY_SIZE(migrations), version,
                                   apply_one, q);
    return tx_end(q, r);
}

/* journal_mode=WAL answers with the mode now in effect; anything but "wal" is an error. */
static int set_wal(sq_store_t *q)
{
    sqlite3_stmt *st = NULL;
    int r = prep(q, "PRAGMA journal_mode = WAL", &st);
    if (r < 0)
        return r;
    const char *mode = NULL;
    if (sqlite3_step(st) == SQLITE_ROW)
        mode = (const char *)sqlite3_column_text(st, 0);
    if (!mode || strcmp(mode, "wal") != 0)
        r = cq__store_fail(&q->base, CQ_ESTORE, "cannot enable WAL mode (got %s)",
                           mode ? mode : "nothing");
    sqlite3_finalize(st);
    return r;
}

static int db_setup(sq_store_t *q, const cq_store_opts_t *opts)
{
    sqlite3_extended_result_codes(q->db, 1);
    sqlite3_busy_timeout(q->db, opts->busy_timeout_ms ? opts->busy_timeout_ms : BUSY_TIMEOUT_MS);
    int r = set_wal(q);
    if (r == 0)
        r = exec(q, "PRAGMA synchronous = FULL");
    if (r == 0)
        r = migrate(q);
    return r;
}

static void sq_close(cq_store_t *s)
{
    sq_store_t *q = SQ(s);
    if (!q)
        return;
    sqlite3_close_v2(q->db);
    cq_free(q);
}

static int sq_open(const cq_store_opts_t *opts, cq_store_t **ret_store, char *err, size_t errlen)
{
    char path[4096];
    if (!opts->dir || snprintf(path, sizeof(path), "%s/" DB_FILE, opts->dir) >= (int)sizeof(path))
        return cq_err_fmt(err, errlen, -EINVAL, "sqlite store: missing or too long data dir");
    sq_store_t *q = cq_calloc(1, sizeof(*q));
    if (!q)
        return cq_err_fmt(err, errlen, -ENOMEM, "sqlite store: out of memory");
    int r = 0;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, &q->db, flags, NULL) != SQLITE_OK) {
        r = q->db ? db_fail(q, "open") : cq__store_fail(&q->base, -ENOMEM, "out of memory");
        goto fail;
    }
    r = db_setup(q, opts);
    if (r < 0)
        goto fail;
    *ret_store = &q->base;
    return 0;
fail:
    cq_err_fmt(err, errlen, r, "%s: %s", path, q->base.errmsg);
    sq_close(&q->base);
    return r;
}

const cq_store_ops_t cq_store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .topic_create = sq_topic_create,
    .topic_list = sq_topic_list,
    .topic_set_online = sq_topic_set_online,
    .append_batch = sq_append_batch,
    .read = sq_read,
    .invalidate = sq_invalidate,
    .read_one = sq_read_one,
    .find_key = sq_find_key,
    .commit_offset = sq_commit_offset,
    .get_offset = sq_get_offset,
    .purge = sq_purge,
    .high_water = sq_high_water,
    .created_ms = sq_created_ms,
    .count = sq_count,
};
