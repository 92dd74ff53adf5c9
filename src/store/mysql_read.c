/* mysql_read.c - reading in the MariaDB backend: messages after an offset, invalidating one,
 * the topic's high water, and consumer offsets (an upsert into the topic's o_ table).
 */
#include "mysql_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

/* ---- read ---------------------------------------------------------------------------------- */

typedef struct row_buf {
    MYSQL_BIND res[5];
    uint64_t id, producer_id, seq;
    int64_t create_ms;
    unsigned long content_len;
    my_bool pid_null, seq_null;
} row_buf_t;

static void row_bind(row_buf_t *b)
{
    memset(b->res, 0, sizeof(b->res));
    cq__mysql_r_u64(&b->res[0], &b->id, NULL);
    b->res[1].buffer_type = MYSQL_TYPE_LONGLONG;
    b->res[1].buffer = &b->create_ms;
    b->res[2].buffer_type = MYSQL_TYPE_BLOB;
    b->res[2].length = &b->content_len;
    cq__mysql_r_u64(&b->res[3], &b->producer_id, &b->pid_null);
    cq__mysql_r_u64(&b->res[4], &b->seq, &b->seq_null);
}

/* Copies the fetched row in b (its content still in the statement) to rec. */
static int rec_from_row(my_store_t *q, MYSQL_STMT *st, const row_buf_t *b, cq_store_rec_t *rec)
{
    size_t len = b->content_len;
    char *content = cq_malloc(len + 1); /* NUL-terminated for the caller's sake */
    if (!content)
        return cq__store_fail(&q->base, -ENOMEM, "out of memory reading %zu bytes", len);
    if (len) {
        MYSQL_BIND cb;
        unsigned long got = 0;
        memset(&cb, 0, sizeof(cb));
        cb.buffer_type = MYSQL_TYPE_BLOB;
        cb.buffer = content;
        cb.buffer_length = (unsigned long)len;
        cb.length = &got;
        if (mysql_stmt_fetch_column(st, &cb, 2, 0) != 0) {
            cq_free(content);
            return cq__mysql_st_fail(q, st, "fetch content");
        }
    }
    content[len] = '\0';
    rec->offset = b->id;
    rec->create_ms = b->create_ms;
    rec->producer_id = b->pid_null ? 0 : b->producer_id;
    rec->seq = b->seq_null ? 0 : b->seq;
    rec->content = content;
    rec->len = len;
    return 0;
}

static int read_rows(my_store_t *q, MYSQL_STMT *st, size_t max, cq_store_rec_t *recs, size_t *ret_n)
{
    row_buf_t b;
    size_t n = 0;
    int r = 0;
    row_bind(&b);
    if (mysql_stmt_store_result(st) != 0)
        r = cq__mysql_st_fail(q, st, "read");
    if (r == 0 && mysql_stmt_bind_result(st, b.res) != 0)
        r = cq__mysql_st_fail(q, st, "bind result");
    while (r == 0 && n < max && (r = cq__mysql_st_fetch(q, st, NULL)) == 1) {
        r = rec_from_row(q, st, &b, &recs[n]);
        if (r == 0)
            n++;
    }
    if (r < 0) {
        cq_store_recs_done(recs, n);
        return r;
    }
    *ret_n = n;
    return 0;
}

/* The byte bound, before any content is fetched: reads the ids and content lengths of the rows
 * a read would return and narrows it to the rows whose contents fit in max_bytes (at least one),
 * as *ret_max rows up to offset *ret_last. *ret_max 0: no row. */
static int bound_rows(my_store_t *q, const my_topic_t *t, uint64_t from, size_t max,
                      size_t max_bytes, uint64_t *ret_last, size_t *ret_max)
{
    char sql[MY_SQL_MAX];
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[2];
    uint64_t id = 0, len = 0, bytes = 0;
    size_t n = 0;
    int r = MY_TOPIC_SQL(q, sql,
                         "SELECT id, LENGTH(content) FROM `t_%s` WHERE id > ? AND state = 1 "
                         "ORDER BY id LIMIT ?",
                         t->tbl);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_u64(&p, from);
        cq__mysql_p_u64(&p, max > INT64_MAX ? INT64_MAX : (uint64_t)max);
        r = cq__mysql_st_run(q, sql, &p, &st);
    }
    cq__mysql_r_u64(&res[0], &id, NULL);
    cq__mysql_r_u64(&res[1], &len, NULL);
    while (r == 0 && (r = cq__mysql_st_fetch(q, st, n ? NULL : res)) == 1) {
        if (n > 0 && bytes + len > max_bytes) {
            r = 0;
            break;
        }
        bytes += len;
        *ret_last = id;
        n++;
        r = 0;
    }
    if (st)
        mysql_stmt_close(st); /* discards the rows not fetched */
    if (r == 0)
        *ret_max = n;
    return r;
}

int cq__mysql_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                   size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    MYSQL_STMT *st = NULL;
    size_t n = 0;
    uint64_t last = UINT64_MAX;
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0 && max_bytes)
        r = bound_rows(q, &t, from_offset_exclusive, max, max_bytes, &last, &max);
    if (r == 0 && max == 0) { /* nothing after the offset */
        r = cq__mysql_tx_end(q, 0);
        if (r == 0)
            *ret_n = 0;
        return r;
    }
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql,
                         "SELECT id, create_time, content, producer_id, seq FROM `t_%s` "
                         "WHERE id > ? AND id <= ? AND state = 1 ORDER BY id LIMIT ?",
                         t.tbl);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_u64(&p, from_offset_exclusive);
        cq__mysql_p_u64(&p, last > INT64_MAX ? INT64_MAX : last);
        cq__mysql_p_u64(&p, max > INT64_MAX ? INT64_MAX : (uint64_t)max);
        r = cq__mysql_st_run(q, sql, &p, &st);
    }
    if (r == 0)
        r = read_rows(q, st, max, ret_recs, &n);
    if (st)
        mysql_stmt_close(st);
    int e = cq__mysql_tx_end(q, r);
    if (r == 0 && e < 0)
        cq_store_recs_done(ret_recs, n);
    if (e == 0)
        *ret_n = n;
    return e;
}

int cq__mysql_invalidate(cq_store_t *s, const char *topic, uint64_t offset)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    uint64_t one = 0;
    bool found = false;
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, offset);
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql, "SELECT 1 FROM `t_%s` WHERE id = ? FOR UPDATE", t.tbl);
    if (r == 0)
        r = cq__mysql_query_u64(q, sql, &p, &one, &found);
    if (r == 0 && !found)
        r = cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql, "UPDATE `t_%s` SET state = 0 WHERE id = ?", t.tbl);
    if (r == 0)
        r = cq__mysql_st_run(q, sql, &p, NULL);
    return cq__mysql_tx_end(q, r);
}

int cq__mysql_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                       int *ret_state)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    MYSQL_STMT *st = NULL;
    uint64_t state = 0;
    bool found = false;
    size_t n = 0;
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, offset > INT64_MAX ? INT64_MAX : offset);
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql, "SELECT state FROM `t_%s` WHERE id = ?", t.tbl);
    if (r == 0)
        r = cq__mysql_query_u64(q, sql, &p, &state, &found);
    if (r == 0 && !found)
        r = cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql,
                         "SELECT id, create_time, content, producer_id, seq FROM `t_%s` "
                         "WHERE id = ?",
                         t.tbl);
    if (r == 0)
        r = cq__mysql_st_run(q, sql, &p, &st);
    if (r == 0)
        r = read_rows(q, st, 1, ret_rec, &n);
    if (st)
        mysql_stmt_close(st);
    if (r == 0 && n == 0)
        r = cq__store_fail(s, -ENOENT, "no message at offset %" PRIu64, offset);
    int e = cq__mysql_tx_end(q, r);
    if (r == 0 && e < 0)
        cq_store_recs_done(ret_rec, n);
    if (e == 0)
        *ret_state = (int)state;
    return e;
}

int cq__mysql_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                       uint64_t *ret_offset)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    bool found = false;
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, producer_id);
    cq__mysql_p_u64(&p, seq);
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql, "SELECT id FROM `t_%s` WHERE producer_id = ? AND seq = ?", t.tbl);
    if (r == 0)
        r = cq__mysql_query_u64(q, sql, &p, ret_offset, &found);
    if (r == 0 && !found)
        r = cq__store_fail(s, -ENOENT, "no message of producer %" PRIu64 " seq %" PRIu64,
                           producer_id, seq);
    return cq__mysql_tx_end(q, r);
}

/* ---- high water -------------------------------------------------------------------------- */

int cq__mysql_created_ms(cq_store_t *s, uint64_t *ret_ms)
{
    my_store_t *q = my_store(s);
    bool found = false;
    int r = cq__mysql_query_u64(q, "SELECT applied_ms FROM schema_version WHERE version = 1", NULL,
                                ret_ms, &found);
    if (r == 0 && !found)
        r = cq__store_fail(s, -ENOENT, "no first migration");
    return cq__mysql_tx_end(q, r);
}

int cq__mysql_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    int r = cq__mysql_tx_end(q, cq__mysql_topic_resolve(q, topic, false, &t));
    if (r == 0)
        *ret_offset = t.high_water;
    return r;
}

int cq__mysql_count(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                    uint64_t *ret_n)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    my_pbind_t p;
    uint64_t n = 0;
    bool found = false;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, after);
    cq__mysql_p_u64(&p, upto);
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(
            q, sql, "SELECT COUNT(*) FROM `t_%s` WHERE state = 1 AND id > ? AND id <= ?", t.tbl);
    if (r == 0)
        r = cq__mysql_query_u64(q, sql, &p, &n, &found);
    r = cq__mysql_tx_end(q, r);
    if (r == 0)
        *ret_n = n;
    return r;
}

/* ---- consumer offsets ---------------------------------------------------------------------- */

int cq__mysql_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                            uint64_t offset, int64_t now_ms)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql,
                         "INSERT INTO `o_%s` (consumer_id, update_time, `offset`) VALUES (?, ?, ?) "
                         "ON DUPLICATE KEY UPDATE update_time = VALUES(update_time), "
                         "`offset` = VALUES(`offset`)",
                         t.tbl);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_bytes(&p, MYSQL_TYPE_STRING, consumer_id, strlen(consumer_id));
        cq__mysql_p_i64(&p, now_ms);
        cq__mysql_p_u64(&p, offset);
        r = cq__mysql_st_run(q, sql, &p, NULL);
    }
    return cq__mysql_tx_end(q, r);
}

int cq__mysql_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                         uint64_t *ret_offset)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    uint64_t v = 0;
    bool found = false;
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql, "SELECT `offset` FROM `o_%s` WHERE consumer_id = ?", t.tbl);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_bytes(&p, MYSQL_TYPE_STRING, consumer_id, strlen(consumer_id));
        r = cq__mysql_query_u64(q, sql, &p, &v, &found);
    }
    if (r == 0 && !found)
        r = cq__store_fail(s, -ENOENT, "consumer has no committed offset");
    r = cq__mysql_tx_end(q, r);
    if (r == 0)
        *ret_offset = v;
    return r;
}
