/* mysql_conn.c - the MariaDB backend's connection: connecting (again after a lost connection),
 * the session set-up, and the mapping of client and server errors to codes, which is also where
 * a lost connection is noticed. The connection is never reconnected inside a call: an error
 * that loses it only marks it (q->lost), and the next call connects again (RUN in mysql.c).
 */
#include "mysql_int.h"

#include "cq_err.h"

#include <errmsg.h>
#include <errno.h>
#include <mysqld_error.h>
#include <pthread.h>
#include <stdio.h>

#define CONNECT_TIMEOUT_S 10
#define IO_TIMEOUT_S      30 /* a read or write on a server that stopped answering */

/* ---- errors -------------------------------------------------------------------------------- */

/* Errors after which the connection is unusable (dropped, killed, server shutting down). */
static bool conn_lost(unsigned err)
{
    return err == CR_SERVER_GONE_ERROR || err == CR_SERVER_LOST || err == CR_SERVER_LOST_EXTENDED ||
           err == ER_CONNECTION_KILLED || err == ER_SERVER_SHUTDOWN;
}

/* Records a client or server error for what and returns the matching code. A lost connection
 * is only marked here (statements may still be in the caller's hands): the next call drops it
 * and connects again. */
static int fail_code(my_store_t *q, const char *what, unsigned err, const char *msg)
{
    int code = err == CR_OUT_OF_MEMORY ? -ENOMEM : CQ_ESTORE;
    /* 1290: the server runs with read_only, which a plain user (the store's, in a cluster) cannot
     * pass: this database was fenced, its chanqd is no longer the shard's master (issue 11). */
    if (err == ER_OPTION_PREVENTS_STATEMENT)
        code = CQ_ENOTMASTER;
    cq__store_fail(&q->base, code, "mysql %s: %s (%u)", what, msg, err);
    if (conn_lost(err))
        q->lost = true;
    return code;
}

int cq__mysql_db_fail(my_store_t *q, const char *what)
{
    return fail_code(q, what, mysql_errno(q->db), mysql_error(q->db));
}

int cq__mysql_st_fail(my_store_t *q, MYSQL_STMT *st, const char *what)
{
    return fail_code(q, what, mysql_stmt_errno(st), mysql_stmt_error(st));
}

/* ---- the client library -------------------------------------------------------------------- */

static int lib_init_rc = -1;

static void lib_init(void)
{
    lib_init_rc = mysql_library_init(0, NULL, NULL);
}

/* mysql_init() would initialize the library on first use, which is not thread-safe: the store
 * thread and the coord runtime's database thread (mysql_repl.c) both come through here. */
int cq__mysql_lib_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, lib_init);
    return lib_init_rc;
}

/* ---- connect ------------------------------------------------------------------------------ */

bool cq__mysql_db_name_ok(const char *name)
{
    return cq_store_topic_name_ok(name); /* the same rule: [A-Za-z0-9_]{1,64} */
}

static int session_setup(my_store_t *q)
{
    char sql[MY_SQL_MAX];
    snprintf(sql, sizeof(sql),
             "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', "
             "SESSION innodb_lock_wait_timeout = %u",
             q->lock_wait_s);
    int r = cq__mysql_query(q, sql);
    if (r == 0 && mysql_autocommit(q->db, 0) != 0)
        r = cq__mysql_db_fail(q, "autocommit off");
    /* The name was checked by my_open(); checked again here, where it becomes SQL. */
    if (r == 0 && !cq__mysql_db_name_ok(q->database))
        r = cq__store_fail(&q->base, -EINVAL, "bad database name");
    /* Created only when absent: a read_only replica refuses even CREATE ... IF NOT EXISTS. */
    bool exists = r == 0 && mysql_select_db(q->db, q->database) == 0;
    if (r == 0 && !exists) {
        snprintf(sql, sizeof(sql),
                 "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
                 q->database);
        r = cq__mysql_query(q, sql);
        if (r == 0 && mysql_select_db(q->db, q->database) != 0)
            r = cq__mysql_db_fail(q, "select database");
    }
    bool found = false;
    if (r == 0)
        r = cq__mysql_query_u64(q, "SELECT @@SESSION.auto_increment_increment", NULL,
                                &q->autoinc_inc, &found);
    unsigned long caps = 0;
    if (r == 0) /* array binding: MariaDB >= 10.2, not MySQL */
        q->bulk =
            mariadb_get_infov(q->db, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &caps) == 0 &&
            (caps & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32));
    return r;
}

/* Closes the connection and the statements kept on it. */
void cq__mysql_disconnect(my_store_t *q)
{
    cq__mysql_stc_clear(q);
    if (q->db)
        mysql_close(q->db);
    q->db = NULL;
    q->lost = false;
}

/* Connects (again). Any previous connection is closed. Never retries inside a call: a server
 * that is down fails this call at once (connection refused) or after CONNECT_TIMEOUT_S. */
int cq__mysql_connect(my_store_t *q)
{
    unsigned timeout = CONNECT_TIMEOUT_S, io_timeout = IO_TIMEOUT_S;
    my_bool off = 0;
    cq__mysql_disconnect(q);
    if (q->base.fault & CQ__STORE_FAULT_NO_RECONNECT)
        return cq__store_fail(&q->base, CQ_ESTORE, "mysql connect: refused (injected)");
    q->db = mysql_init(NULL);
    if (!q->db)
        return cq__store_fail(&q->base, -ENOMEM, "mysql: out of memory");
    mysql_options(q->db, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    mysql_options(q->db, MYSQL_OPT_READ_TIMEOUT, &io_timeout);
    mysql_options(q->db, MYSQL_OPT_WRITE_TIMEOUT, &io_timeout);
    mysql_options(q->db, MYSQL_OPT_RECONNECT, &off);
    mysql_options(q->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(q->db, q->host, q->user, q->password, NULL, q->port, NULL, 0)) {
        int r = cq__store_fail(&q->base, CQ_ESTORE, "mysql connect %s:%u: %s (%u)", q->host,
                               q->port, mysql_error(q->db), mysql_errno(q->db));
        cq__mysql_disconnect(q);
        return r;
    }
    int r = session_setup(q);
    if (r < 0)
        cq__mysql_disconnect(q);
    return r;
}
