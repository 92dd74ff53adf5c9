/* mysql_schema.c - what the MariaDB backend's database looks like: the migrations of the fixed
 * tables, the table name of each topic and the two tables every topic gets.
 *
 * The fixed tables (topics, schema_version) come from the embedded migrations
 * (migrations/mysql/), applied at open under a named lock. Each topic has two InnoDB tables
 * created from the templates in cq__mysql_topic_tables_create():
 *
 *   t_<tbl>  id BIGINT UNSIGNED AUTO_INCREMENT (the offset; not dense: InnoDB burns ids on
 *            rollback and duplicate keys), create_time (unix ms), content LONGBLOB, state (1
 *            valid, 0 invalid), producer_id, seq, UNIQUE(producer_id, seq). producer_id and seq
 *            are NULL for messages without a producer id; NULLs are distinct in a UNIQUE index,
 *            so those are never deduplicated.
 *   o_<tbl>  consumer_id VARBINARY (byte-exact, like SQLite's TEXT key: no case folding, no
 *            trailing-space padding), update_time (unix ms), `offset` (a reserved word in
 *            MariaDB, so always quoted with backticks).
 *
 * <tbl> is the topic name as created when "t_" + name fits MariaDB's 64-character identifier
 * limit, otherwise a shortened form with a hash (see cq__mysql_table_suffix()); it is stored in
 * the topics row, whose UNIQUE index keeps two topics from ever sharing a table.
 */
#include "mysql_int.h"

#include "cq_err.h"
#include "cq_util.h"
#include "mysql_migrations.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TBL_HASHED_PREFIX (MY_TBL_MAX - 17) /* then '$' and 16 hex digits */

/* The o_ template spells the consumer id limit out. */
_Static_assert(CQ_STORE_CONSUMER_MAX == 128,
               "update VARBINARY(128) in cq__mysql_topic_tables_create()");

/* Forward-only, in version order. Add a row per new migrations/mysql/NNNN_*.sql file. */
static const cq__migration_t migrations[] = {
    {1, cq_embedded_mysql_0001},
};

/* ---- per-topic tables -------------------------------------------------------------------- */

static bool tbl_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '$';
}

/* True when tbl is a table suffix this file could have made: [A-Za-z0-9_$]{1,62}. */
bool cq__mysql_tbl_ok(const char *tbl)
{
    size_t i = 0;
    for (; tbl[i]; i++) {
        if (i >= MY_TBL_MAX || !tbl_char_ok(tbl[i]))
            return false;
    }
    return i > 0;
}

/* The table suffix of a (valid) topic name: the name itself when it fits, else its first
 * TBL_HASHED_PREFIX characters, '$' and the FNV-1a 64 hash of the whole name in hex. '$' never
 * occurs in a topic name, so hashed suffixes cannot equal plain ones. */
void cq__mysql_table_suffix(const char *name, char tbl[MY_TBL_MAX + 1])
{
    size_t len = strlen(name);
    if (len <= MY_TBL_MAX) {
        memcpy(tbl, name, len + 1);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 0x100000001b3ULL;
    }
    snprintf(tbl, MY_TBL_MAX + 1, "%.*s$%016" PRIx64, TBL_HASHED_PREFIX, name, h);
}

/* Creates the topic's tables. DDL commits implicitly in MariaDB, so this runs before the topics
 * row is inserted: a crash in between leaves empty tables that a later create reuses. */
int cq__mysql_topic_tables_create(my_store_t *q, const char *tbl)
{
    char sql[MY_SQL_MAX];
    int r = MY_TOPIC_SQL(q, sql,
                         "CREATE TABLE IF NOT EXISTS `t_%s` ("
                         "id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, "
                         "create_time BIGINT NOT NULL, "
                         "content LONGBLOB NOT NULL, "
                         "state TINYINT NOT NULL DEFAULT 1, "
                         "producer_id BIGINT UNSIGNED NULL, "
                         "seq BIGINT UNSIGNED NULL, "
                         "UNIQUE KEY producer_seq (producer_id, seq)"
                         ") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
                         tbl);
    if (r == 0)
        r = cq__mysql_query(q, sql);
    if (r == 0)
        r = MY_TOPIC_SQL(q, sql,
                         "CREATE TABLE IF NOT EXISTS `o_%s` ("
                         "consumer_id VARBINARY(128) NOT NULL PRIMARY KEY, "
                         "update_time BIGINT NOT NULL, "
                         "`offset` BIGINT UNSIGNED NOT NULL"
                         ") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
                         tbl);
    return r < 0 ? r : cq__mysql_query(q, sql);
}

/* ---- migrations ---------------------------------------------------------------------------- */

/* Runs a multi-statement script (a migration file) and consumes every result. */
static int run_script(my_store_t *q, const char *sql)
{
    int r = 0;
    q->base.sql_count++;
    if (mysql_set_server_option(q->db, MYSQL_OPTION_MULTI_STATEMENTS_ON) != 0)
        return cq__mysql_db_fail(q, "multi statements on");
    if (mysql_real_query(q->db, sql, strlen(sql)) != 0)
        r = cq__mysql_db_fail(q, "migration");
    for (int more = 0; r == 0; more = mysql_next_result(q->db)) {
        if (more > 0) {
            r = cq__mysql_db_fail(q, "migration");
            break;
        }
        if (more < 0)
            break;
        MYSQL_RES *res = mysql_store_result(q->db);
        if (res)
            mysql_free_result(res);
    }
    if (q->db && mysql_set_server_option(q->db, MYSQL_OPTION_MULTI_STATEMENTS_OFF) != 0 && r == 0)
        r = cq__mysql_db_fail(q, "multi statements off");
    return r;
}

/* The highest applied migration, 0 for a new database. */
static int schema_version(my_store_t *q, int *ret_version)
{
    uint64_t v = 0;
    bool found = false;
    int r = cq__mysql_query_u64(q,
                                "SELECT COUNT(*) FROM information_schema.tables "
                                "WHERE table_schema = DATABASE() AND table_name = 'schema_version'",
                                NULL, &v, &found);
    if (r < 0 || v == 0) {
        if (r == 0)
            *ret_version = 0;
        return r;
    }
    r = cq__mysql_query_u64(q, "SELECT COALESCE(MAX(version), 0) FROM schema_version", NULL, &v,
                            &found);
    if (r == 0)
        *ret_version = (int)v;
    return r;
}

static int migration_apply(my_store_t *q, const cq__migration_t *m)
{
    int r = run_script(q, m->sql);
    if (r == 0) {
        my_pbind_t p;
        cq__mysql_p_init(&p);
        cq__mysql_p_i64(&p, m->version);
        cq__mysql_p_i64(&p, cq__store_now_ms());
        r = cq__mysql_st_run(q, "INSERT INTO schema_version (version, applied_ms) VALUES (?, ?)",
                             &p, NULL);
    }
    return cq__mysql_tx_end(q, r);
}

static int apply_one(void *ud, const cq__migration_t *m)
{
    return migration_apply(ud, m);
}

/* Applies every migration newer than the database, each committed on its own (MariaDB commits
 * DDL implicitly anyway), under a named lock so that concurrent opens do not race. */
int cq__mysql_migrate(my_store_t *q)
{
    int version = 0;
    uint64_t got = 0;
    bool found = false;
    int r = cq__mysql_query_u64(q, "SELECT GET_LOCK(CONCAT(DATABASE(), '.chanq_migrate'), 60)",
                                NULL, &got, &found);
    if (r == 0 && got != 1)
        r = cq__store_fail(&q->base, CQ_ESTORE, "mysql: timed out waiting for the migration lock");
    if (r < 0)
        return r;
    r = schema_version(q, &version);
    if (r == 0)
        r = cq__store_migrate_from(&q->base, migrations, CQ_ARRAY_SIZE(migrations), version,
                                   apply_one, q);
    r = cq__mysql_tx_end(q, r);
    if (q->db && cq__mysql_query(q, "DO RELEASE_LOCK(CONCAT(DATABASE(), '.chanq_migrate'))") < 0 &&
        r == 0)
        r = CQ_ESTORE;
    return r;
}
