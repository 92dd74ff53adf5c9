/* mysql_topic.c - topics in the MariaDB backend: resolving a name to its stored spelling, table
 * suffix and high water (every operation on a topic starts here), and create, list, set online.
 *
 * MariaDB commits DDL implicitly, so topic_create cannot be one transaction as in SQLite: it
 * creates the tables (IF NOT EXISTS) first and commits the topics row last, so a crash in between
 * leaves only empty tables that the next create of that name reuses; the topic exists once its
 * row does, as with SQLite.
 */
#include "mysql_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <mysqld_error.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- topics -------------------------------------------------------------------------------- */

/* Finds topic (any case). With lock, the topics row stays locked until the transaction ends.
 * CQ_ENOTOPIC if absent. */
int cq__mysql_topic_resolve(my_store_t *q, const char *topic, bool lock, my_topic_t *ret_t)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[3];
    my_topic_t t = {0};
    unsigned long len[2] = {0, 0};
    my_bool hw_null = 0;
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_str(&p, topic);
    memset(res, 0, sizeof(res));
    res[0].buffer_type = MYSQL_TYPE_STRING;
    res[0].buffer = t.name;
    res[0].buffer_length = sizeof(t.name);
    res[0].length = &len[0];
    res[1].buffer_type = MYSQL_TYPE_STRING;
    res[1].buffer = t.tbl;
    res[1].buffer_length = sizeof(t.tbl);
    res[1].length = &len[1];
    cq__mysql_r_u64(&res[2], &t.high_water, &hw_null);
    int r = cq__mysql_stc_run(
        q,
        lock ? "SELECT name, tbl, high_water FROM topics WHERE name = ? FOR UPDATE"
             : "SELECT name, tbl, high_water FROM topics WHERE name = ?",
        &p, &st);
    if (r == 0)
        r = cq__mysql_st_fetch(q, st, res);
    cq__mysql_stc_done(st);
    if (r < 0)
        return r;
    if (r == 0)
        return cq__store_fail(&q->base, CQ_ENOTOPIC, "unknown topic '%s'", topic);
    if (len[0] >= sizeof(t.name) || len[1] >= sizeof(t.tbl))
        return cq__store_fail(&q->base, CQ_ESTORE, "topics table holds a bad name");
    t.name[len[0]] = '\0';
    t.tbl[len[1]] = '\0';
    if (!cq_store_topic_name_ok(t.name) || !cq__mysql_tbl_ok(t.tbl))
        return cq__store_fail(&q->base, CQ_ESTORE, "topics table holds a bad name");
    *ret_t = t;
    return 0;
}

static int topic_insert(my_store_t *q, const char *topic, const char *tbl, int retention_days,
                        int64_t now_ms)
{
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_str(&p, topic);
    cq__mysql_p_str(&p, tbl);
    cq__mysql_p_i64(&p, retention_days);
    cq__mysql_p_i64(&p, now_ms);
    MYSQL_STMT *st = NULL;
    int r =
        cq__mysql_st_prepare(q,
                             "INSERT INTO topics (name, tbl, online, retention_days, created_ms) "
                             "VALUES (?, ?, 1, ?, ?)",
                             &st);
    if (r < 0)
        return r;
    if (mysql_stmt_bind_param(st, p.b) != 0)
        r = cq__mysql_st_fail(q, st, "bind");
    else if (mysql_stmt_execute(st) == 0)
        r = 0;
    else if (mysql_stmt_errno(st) == ER_DUP_ENTRY) /* a concurrent create won */
        r = cq__store_fail(&q->base, CQ_EEXIST, "topic '%s' exists (or shares its tables)", topic);
    else
        r = cq__mysql_st_fail(q, st, "topic insert");
    mysql_stmt_close(st);
    return r;
}

int cq__mysql_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char tbl[MY_TBL_MAX + 1];
    cq__mysql_table_suffix(topic, tbl);
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = cq__store_fail(s, CQ_EEXIST, "topic '%s' exists", t.name);
    else if (r == CQ_ENOTOPIC)
        r = cq__mysql_topic_tables_create(q, tbl);
    if (r == 0)
        r = topic_insert(q, topic, tbl, retention_days, now_ms);
    if (r == 0)
        s->errmsg[0] = '\0';
    return cq__mysql_tx_end(q, r);
}

static int topic_from_row(my_store_t *q, MYSQL_ROW row, const unsigned long *len,
                          cq_store_topic_t *t)
{
    if (!row[0] || len[0] > CQ_STORE_TOPIC_MAX || !row[1] || !row[2] || !row[3])
        return cq__store_fail(&q->base, CQ_ESTORE, "topics table holds a bad row");
    memcpy(t->name, row[0], len[0]);
    t->name[len[0]] = '\0';
    t->online = strtol(row[1], NULL, 10) != 0;
    t->retention_days = (int)strtol(row[2], NULL, 10);
    t->created_ms = strtoll(row[3], NULL, 10);
    return 0;
}

/* Names sort as SQLite's NOCASE sorts them: ASCII letters folded to lower case, then bytes. */
static int topic_cmp(const void *a, const void *b)
{
    return strcasecmp(((const cq_store_topic_t *)a)->name, ((const cq_store_topic_t *)b)->name);
}

static int topic_rows(my_store_t *q, MYSQL_RES *res, cq_store_topic_t **ret_v, size_t *ret_n)
{
    size_t n = (size_t)mysql_num_rows(res);
    cq_store_topic_t *v = n ? cq_calloc(n, sizeof(*v)) : NULL;
    if (n && !v)
        return cq__store_fail(&q->base, -ENOMEM, "out of memory listing topics");
    MYSQL_ROW row;
    size_t i = 0;
    int r = 0;
    while (r == 0 && i < n && (row = mysql_fetch_row(res)) != NULL)
        r = topic_from_row(q, row, mysql_fetch_lengths(res), &v[i++]);
    if (r < 0) {
        cq_free(v);
        return r;
    }
    if (n)
        qsort(v, n, sizeof(*v), topic_cmp);
    *ret_v = v;
    *ret_n = n;
    return 0;
}

int cq__mysql_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n)
{
    my_store_t *q = my_store(s);
    cq_store_topic_t *v = NULL;
    size_t n = 0;
    q->base.sql_count++;
    int r = 0;
    if (mysql_query(q->db, "SELECT name, online, retention_days, created_ms FROM topics") != 0) {
        r = cq__mysql_db_fail(q, "topic list");
    } else {
        MYSQL_RES *res = mysql_store_result(q->db);
        r = res ? topic_rows(q, res, &v, &n) : cq__mysql_db_fail(q, "topic list");
        if (res)
            mysql_free_result(res);
    }
    r = cq__mysql_tx_end(q, r);
    if (r < 0) {
        cq_free(v);
        return r;
    }
    *ret_topics = v;
    *ret_n = n;
    return 0;
}

int cq__mysql_topic_set_online(cq_store_t *s, const char *topic, bool online)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    int r = cq__mysql_topic_resolve(q, topic, true, &t);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_i64(&p, online ? 1 : 0);
        cq__mysql_p_str(&p, t.name);
        r = cq__mysql_st_run(q, "UPDATE topics SET online = ? WHERE name = ?", &p, NULL);
    }
    return cq__mysql_tx_end(q, r);
}
