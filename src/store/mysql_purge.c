/* mysql_purge.c - retention in the MariaDB backend: deletes the oldest prefix of a topic's rows
 * older than a cutoff, scanning at most max_rows of them per call.
 */
#include "mysql_int.h"

#include "cq_err.h"

#include <stdint.h>
#include <string.h>

/* ---- purge --------------------------------------------------------------------------------- */

/* Scans at most max_rows of the oldest rows and finds the last id of the prefix older than
 * cutoff. *ret_n = 0 when the oldest row is not old enough. */
static int purge_scan(my_store_t *q, const my_topic_t *t, int64_t cutoff, size_t max_rows,
                      uint64_t *ret_last, size_t *ret_n)
{
    char sql[MY_SQL_MAX];
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[2];
    uint64_t id = 0, last = 0;
    int64_t create_ms = 0;
    size_t n = 0;
    cq__mysql_r_u64(&res[0], &id, NULL);
    memset(&res[1], 0, sizeof(res[1]));
    res[1].buffer_type = MYSQL_TYPE_LONGLONG;
    res[1].buffer = &create_ms;
    int r = MY_TOPIC_SQL(
        q, sql, "SELECT id, create_time FROM `t_%s` ORDER BY id LIMIT ? FOR UPDATE", t->tbl);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_u64(&p, max_rows > INT64_MAX ? INT64_MAX : (uint64_t)max_rows);
        r = cq__mysql_st_run(q, sql, &p, &st);
    }
    if (r == 0 && mysql_stmt_store_result(st) != 0)
        r = cq__mysql_st_fail(q, st, "purge scan");
    if (r == 0 && mysql_stmt_bind_result(st, res) != 0)
        r = cq__mysql_st_fail(q, st, "bind result");
    while (r == 0) {
        r = cq__mysql_st_fetch(q, st, NULL);
        if (r != 1 || create_ms >= cutoff)
            break;
        r = 0;
        last = id;
        n++;
    }
    if (r == 1)
        r = 0;
    if (st)
        mysql_stmt_close(st);
    if (r < 0)
        return r;
    *ret_last = last;
    *ret_n = n;
    return 0;
}

int cq__mysql_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                    size_t *ret_purged)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    char sql[MY_SQL_MAX];
    uint64_t last = 0;
    size_t n = 0;
    int r = cq__mysql_topic_resolve(q, topic, false, &t);
    if (r == 0)
        r = purge_scan(q, &t, older_than_unix_ms, max_rows, &last, &n);
    if (r == 0 && n > 0)
        r = MY_TOPIC_SQL(q, sql, "DELETE FROM `t_%s` WHERE id <= ?", t.tbl);
    if (r == 0 && n > 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_u64(&p, last);
        r = cq__mysql_st_run(q, sql, &p, NULL);
    }
    r = cq__mysql_tx_end(q, r);
    if (r == 0)
        *ret_purged = n;
    return r;
}
