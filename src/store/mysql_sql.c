/* mysql_sql.c - statements for the MariaDB backend: plain queries, the call's transaction,
 * bound parameters, prepared statements and their per-connection cache, fetch helpers.
 *
 * Statements that run on every append or read are prepared once per connection and kept
 * (stc_*, MY_STC_MAX of them, least recently used out first); the others are prepared, run
 * and closed (st_run). Every statement prepared or run counts in the handle's sql_count.
 */
#include "mysql_int.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

/* ---- statements ---------------------------------------------------------------------------- */

/* Runs a statement without parameters and discards its result. */
int cq__mysql_query(my_store_t *q, const char *sql)
{
    q->base.sql_count++;
    if (mysql_real_query(q->db, sql, strlen(sql)) != 0)
        return cq__mysql_db_fail(q, "query");
    MYSQL_RES *res = mysql_store_result(q->db);
    if (res)
        mysql_free_result(res);
    else if (mysql_errno(q->db))
        return cq__mysql_db_fail(q, "query result");
    return 0;
}

int cq__mysql_tx_commit(my_store_t *q)
{
    q->base.sql_count++;
    return mysql_commit(q->db) == 0 ? 0 : cq__mysql_db_fail(q, "commit");
}

/* Rolls back the open transaction, if the connection is still there. Keeps the error text of
 * the failure that caused the rollback. */
void cq__mysql_tx_rollback(my_store_t *q)
{
    if (q->db && !q->lost) {
        q->base.sql_count++;
        mysql_rollback(q->db);
    }
}

/* Ends the call's transaction: commits when r == 0, rolls back otherwise. Returns the final
 * code. */
int cq__mysql_tx_end(my_store_t *q, int r)
{
    if (r == 0)
        r = cq__mysql_tx_commit(q);
    if (r < 0)
        cq__mysql_tx_rollback(q);
    return r;
}

void cq__mysql_p_init(my_pbind_t *p)
{
    p->b = p->small_b;
    p->len = p->small_len;
    p->v = p->small_v;
    p->n = 0;
    p->cap = MY_PMAX;
}

int cq__mysql_p_init_heap(my_store_t *q, my_pbind_t *p, size_t cap)
{
    cq__mysql_p_init(p);
    p->b = cq_calloc(cap, sizeof(*p->b));
    p->len = cq_calloc(cap, sizeof(*p->len));
    p->v = cq_calloc(cap, sizeof(*p->v));
    p->cap = cap;
    if (p->b && p->len && p->v)
        return 0;
    cq_free(p->b);
    cq_free(p->len);
    cq_free(p->v);
    cq__mysql_p_init(p);
    return cq__store_fail(&q->base, -ENOMEM, "out of memory for %zu parameters", cap);
}

void cq__mysql_p_done(my_pbind_t *p)
{
    if (p->b != p->small_b) {
        cq_free(p->b);
        cq_free(p->len);
        cq_free(p->v);
    }
    cq__mysql_p_init(p);
}

static MYSQL_BIND *p_next(my_pbind_t *p)
{
    cq_assert(p->n < p->cap);
    MYSQL_BIND *b = &p->b[p->n++];
    memset(b, 0, sizeof(*b));
    return b;
}

void cq__mysql_p_u64(my_pbind_t *p, uint64_t v)
{
    MYSQL_BIND *b = p_next(p);
    p->v[p->n - 1] = v;
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = &p->v[p->n - 1];
    b->is_unsigned = 1;
}

void cq__mysql_p_i64(my_pbind_t *p, int64_t v)
{
    cq__mysql_p_u64(p, (uint64_t)v);
    p->b[p->n - 1].is_unsigned = 0;
}

void cq__mysql_p_bytes(my_pbind_t *p, enum enum_field_types type, const void *data, size_t len)
{
    MYSQL_BIND *b = p_next(p);
    p->len[p->n - 1] = (unsigned long)len;
    b->buffer_type = type;
    b->buffer = (void *)(data ? data : "");
    b->buffer_length = (unsigned long)len;
    b->length = &p->len[p->n - 1];
}

void cq__mysql_p_str(my_pbind_t *p, const char *s)
{
    cq__mysql_p_bytes(p, MYSQL_TYPE_STRING, s, strlen(s));
}

void cq__mysql_p_null(my_pbind_t *p)
{
    p_next(p)->buffer_type = MYSQL_TYPE_NULL;
}

int cq__mysql_st_prepare(my_store_t *q, const char *sql, MYSQL_STMT **ret_st)
{
    q->base.sql_count++;
    MYSQL_STMT *st = mysql_stmt_init(q->db);
    if (!st)
        return cq__store_fail(&q->base, -ENOMEM, "mysql: out of memory for a statement");
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0) {
        int r = cq__mysql_st_fail(q, st, "prepare");
        mysql_stmt_close(st);
        return r;
    }
    *ret_st = st;
    return 0;
}

static int st_execute(my_store_t *q, MYSQL_STMT *st, my_pbind_t *p)
{
    if (p && mysql_stmt_bind_param(st, p->b) != 0)
        return cq__mysql_st_fail(q, st, "bind");
    if (mysql_stmt_execute(st) != 0)
        return cq__mysql_st_fail(q, st, "execute");
    return 0;
}

/* Prepares and executes sql with parameters p (may be NULL). *ret_st is returned owned (close
 * with mysql_stmt_close) when ret_st is not NULL; otherwise the statement is closed here. */
int cq__mysql_st_run(my_store_t *q, const char *sql, my_pbind_t *p, MYSQL_STMT **ret_st)
{
    MYSQL_STMT *st = NULL;
    int r = cq__mysql_st_prepare(q, sql, &st);
    if (r == 0)
        r = st_execute(q, st, p);
    if (r < 0 || !ret_st) {
        if (st)
            mysql_stmt_close(st);
        return r;
    }
    *ret_st = st;
    return 0;
}

/* ---- the statement cache -------------------------------------------------------------------- */

/* Closes every kept statement (before the connection closes, or when it is gone). */
void cq__mysql_stc_clear(my_store_t *q)
{
    for (size_t i = 0; i < q->nstc; i++) {
        mysql_stmt_close(q->stc[i].st);
        cq_free(q->stc[i].sql);
    }
    q->nstc = 0;
}

/* The kept statement for sql, prepared now if it is not kept yet (the least recently used one
 * makes room). Borrowed: valid until the connection is dropped; do not close it. */
int cq__mysql_stc_get(my_store_t *q, const char *sql, MYSQL_STMT **ret_st)
{
    for (size_t i = 0; i < q->nstc; i++) {
        if (strcmp(q->stc[i].sql, sql) == 0) {
            q->stc[i].used = ++q->tick;
            *ret_st = q->stc[i].st;
            return 0;
        }
    }
    char *copy = cq_strdup(sql);
    if (!copy)
        return cq__store_fail(&q->base, -ENOMEM, "out of memory for a statement");
    MYSQL_STMT *st = NULL;
    int r = cq__mysql_st_prepare(q, sql, &st);
    if (r < 0) {
        cq_free(copy);
        return r;
    }
    size_t slot = q->nstc;
    if (slot == MY_STC_MAX) {
        slot = 0;
        for (size_t i = 1; i < MY_STC_MAX; i++)
            if (q->stc[i].used < q->stc[slot].used)
                slot = i;
        mysql_stmt_close(q->stc[slot].st);
        cq_free(q->stc[slot].sql);
    } else {
        q->nstc++;
    }
    q->stc[slot] = (my_stc_t){copy, st, ++q->tick};
    *ret_st = st;
    return 0;
}

/* Executes the kept statement for sql with parameters p (may be NULL). *ret_st is borrowed;
 * release its result with cq__mysql_stc_done() before the next use. */
int cq__mysql_stc_run(my_store_t *q, const char *sql, my_pbind_t *p, MYSQL_STMT **ret_st)
{
    MYSQL_STMT *st = NULL;
    int r = cq__mysql_stc_get(q, sql, &st);
    if (r == 0) {
        q->base.sql_count++;
        r = st_execute(q, st, p);
    }
    if (r == 0)
        *ret_st = st;
    return r;
}

/* Ends the use of a kept statement: drops what is left of its result. */
void cq__mysql_stc_done(MYSQL_STMT *st)
{
    if (st)
        mysql_stmt_free_result(st);
}

/* Fetches the next row into the bound result res. 1 = a row, 0 = no more rows. */
int cq__mysql_st_fetch(my_store_t *q, MYSQL_STMT *st, MYSQL_BIND *res)
{
    if (res && mysql_stmt_bind_result(st, res) != 0)
        return cq__mysql_st_fail(q, st, "bind result");
    int rc = mysql_stmt_fetch(st);
    if (rc == 0 || rc == MYSQL_DATA_TRUNCATED)
        return 1;
    if (rc == MYSQL_NO_DATA)
        return 0;
    return cq__mysql_st_fail(q, st, "fetch");
}

void cq__mysql_r_u64(MYSQL_BIND *b, uint64_t *v, my_bool *is_null)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
    b->is_null = is_null;
}

/* Runs sql (one row of one unsigned integer expected). *ret_found = false when no row. */
int cq__mysql_query_u64(my_store_t *q, const char *sql, my_pbind_t *p, uint64_t *ret_v,
                        bool *ret_found)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[1];
    uint64_t v = 0;
    my_bool is_null = 0;
    cq__mysql_r_u64(&res[0], &v, &is_null);
    int r = cq__mysql_st_run(q, sql, p, &st);
    if (r == 0)
        r = cq__mysql_st_fetch(q, st, res);
    if (st)
        mysql_stmt_close(st);
    if (r < 0)
        return r;
    *ret_v = is_null ? 0 : v;
    *ret_found = r == 1;
    return 0;
}
