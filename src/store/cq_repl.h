/* cq_repl.h - control and status of a shard's MariaDB replication (issue 11).
 *
 * A shard's two chanqd each have their own MariaDB: the master's is the primary, the slave's the
 * standby, replicating from it (GTID, semi-sync AFTER_SYNC). This module is the coord runtime's
 * hands on those databases: it probes our own database, fences the previous master's, promotes
 * a standby, makes a primary writable or read_only, points a database at a new primary, and
 * reads the replication status for /metrics. It connects with an ADMIN user (SUPER or READ_ONLY
 * ADMIN: read_only and replication need it); chanqd's store connects with a plain user, which
 * is why read_only fences the store (doc/cluster recipes, §4.7 of cluster-recipes.md).
 *
 * Every call blocks (libmariadb; connect, read and write timeouts of opts.timeout_ms, rounded up
 * to whole seconds) and is meant for the coord runtime's own database thread. The connection to
 * our database is made on demand and made again after it broke; a call that finds it broken
 * reconnects once and runs again (every call here is idempotent). The previous master's
 * database (fence, follow) is reached by a short connection of its own per call.
 *
 * Returns: 0, or
 *   CQ_REPL_EDOWN (-EHOSTDOWN)  the server could not be reached or the connection broke (for
 *                               fence: the PEER is down, which fences it too: go on);
 *   CQ_ETIMEOUT                 a bounded wait (opts.wait_ms) ended before the position was
 *                               reached (fence, promote);
 *   CQ_ESTORE                   the server refused a statement (privileges, a bad peer
 *                               address...); -ENOMEM; -EINVAL for a peer that is not host:port.
 * cq_repl_errmsg() has the text of the last failure.
 *
 * Threads: a handle belongs to one thread at a time. cq_repl_metrics() is pure (any thread).
 */
#ifndef CQ_REPL_H
#define CQ_REPL_H

#include "cq_sbuf.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_REPL_EDOWN    (-EHOSTDOWN)
#define CQ_REPL_GTID_MAX 255 /* a GTID position's text, without the NUL; longer ones are cut */

typedef struct cq_repl_opts {
    const char *host;           /* our database (borrowed during cq_repl_open; NULL: 127.0.0.1) */
    unsigned port;              /* 0: 3306 */
    const char *admin_user;     /* SUPER / READ_ONLY ADMIN + REPLICATION SLAVE ADMIN (NULL: root) */
    const char *admin_password; /* NULL: none */
    const char *repl_user;      /* CHANGE MASTER TO ... MASTER_USER (NULL: repl) */
    const char *repl_password;  /* NULL: none */
    unsigned timeout_ms;        /* connect, read and write timeout (0: 2000; whole seconds) */
    unsigned wait_ms;           /* fence and promote: how long to wait for a position (0: 5000) */
    /* Semi-sync on a primary (set by cq_repl_writable and cq_repl_promote): how long a commit
     * waits for the standby's ack before semi-sync falls back to async (0: 2000), and whether a
     * commit waits that long also when no standby is connected (wait_no_slave; false: with no
     * standby connected, commits are async at once). */
    unsigned semi_sync_timeout_ms;
    bool semi_sync_wait_no_slave;
} cq_repl_opts_t;

/* What DB_PROBE reports about our database. */
typedef struct cq_repl_probe {
    bool read_only; /* @@read_only */
    bool replica;   /* replication is configured (SHOW SLAVE STATUS has a master) */
} cq_repl_probe_t;

/* The replication status of one database, for /metrics. */
typedef struct cq_repl_status {
    bool up; /* the status could be read (false: the rest is zero) */
    bool read_only;
    bool semi_sync_on; /* Rpl_semi_sync_master_status: commits wait for a standby's ack */
    uint64_t semi_sync_clients, semi_sync_yes_tx, semi_sync_no_tx;
    uint64_t semi_sync_avg_wait_us;        /* Rpl_semi_sync_master_tx_avg_wait_time */
    bool replica, io_running, sql_running; /* io_running: Slave_IO_Running is Yes */
    int64_t lag_seconds;      /* Seconds_Behind_Master; -1 when NULL or not a replica */
    int64_t lag_transactions; /* received, not applied (Gtid_IO_Pos - gtid_slave_pos, same
                               * domain); -1 when not comparable */
    char binlog_pos[CQ_REPL_GTID_MAX + 1]; /* @@gtid_binlog_pos: what this server's binlog has */
    char io_pos[CQ_REPL_GTID_MAX + 1];     /* Gtid_IO_Pos: received (a replica; else "") */
    char slave_pos[CQ_REPL_GTID_MAX + 1];  /* @@gtid_slave_pos: applied from a primary */
} cq_repl_status_t;

typedef struct cq_repl cq_repl_t;

/* Makes a handle (no connection yet). *ret is owned (cq_repl_close). 0, -ENOMEM or -EINVAL. */
int cq_repl_open(const cq_repl_opts_t *o, cq_repl_t **ret);
/* Accepts NULL. */
void cq_repl_close(cq_repl_t *r);
/* The text of the last failure ("" after a success). Borrowed until the next call. */
const char *cq_repl_errmsg(const cq_repl_t *r);

/* Our database: reachable (0), read_only, replica. */
int cq_repl_probe(cq_repl_t *r, cq_repl_probe_t *ret);

/* Fences the previous master's database peer ("host:port"): SET GLOBAL read_only=1 there, then
 * waits up to wait_ms until our database RECEIVED all the peer's binlog has (our Gtid_IO_Pos, or
 * our gtid_current_pos when we do not replicate, covers the peer's @@gtid_binlog_pos).
 * CQ_REPL_EDOWN: the peer cannot be reached (a down primary writes nothing: go on); a peer
 * that answered and then broke or timed out is CQ_ESTORE (it may still take writes);
 * CQ_ETIMEOUT: the peer is read_only now but we lack some of its transactions. */
int cq_repl_fence_peer(cq_repl_t *r, const char *peer);

/* Our database, a standby, becomes a primary: STOP SLAVE IO_THREAD, wait (wait_ms) until what
 * it received is applied, STOP SLAVE, RESET SLAVE ALL, then as cq_repl_writable. On a database
 * that does not replicate it is cq_repl_writable. */
int cq_repl_promote(cq_repl_t *r);

/* Our database (a primary): semi-sync master on with the configured timeout and wait_no_slave,
 * then read_only off. */
int cq_repl_writable(cq_repl_t *r);
/* Our database: read_only on. */
int cq_repl_read_only(cq_repl_t *r);

/* Our database replicates from peer ("host:port"): a no-op when it already does (that master,
 * IO thread Yes or Connecting, SQL thread Yes); otherwise read_only on, STOP SLAVE, CHANGE
 * MASTER TO peer with the repl user, MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1,
 * semi-sync master off and slave on, START SLAVE. */
int cq_repl_follow(cq_repl_t *r, const char *peer);

/* Reads our database's replication status into *ret (ret->up false and an error when it
 * cannot). */
int cq_repl_status(cq_repl_t *r, cq_repl_status_t *ret);

/* Appends st as Prometheus text (chanq_mq_db_up, chanq_mq_db_read_only,
 * chanq_mq_repl_semi_sync_on, _clients, _yes_tx_total, _no_tx_total, _avg_wait_seconds,
 * chanq_mq_repl_replica, _io_running, _sql_running, _lag_seconds and _lag_transactions when
 * known, chanq_mq_repl_gtid_info{binlog,io,slave}). 0 or -ENOMEM. */
int cq_repl_metrics(const cq_repl_status_t *st, cq_sbuf_t *out);

/* GTID positions ("D-S-N[,D-S-N...]"): true when have includes want, i.e. for every domain of
 * want, have has that domain with a sequence number at least as high. Text that does not parse
 * is never covered. */
bool cq_repl_gtid_covers(const char *have, const char *want);
/* Transactions in ahead that behind lacks, summed over the domains both have; -1 when a domain
 * of ahead is missing from behind or the text does not parse. */
int64_t cq_repl_gtid_distance(const char *ahead, const char *behind);

/* The coord runtime's DB ops (cq_coord.h): ud is a cq_repl_t. Carries out a DB_* action and
 * fills *ret as its CQ_COORD_EV_DB event (arg = the action, rc, and for DB_PROBE db_replica and
 * db_read_only). Returns rc. Defined in mysql_repl.c; it reads only cq_coord.h (a leaf). */
struct cq_coord_act;
struct cq_coord_ev;
int cq_repl_db_run(void *ud, const struct cq_coord_act *a, struct cq_coord_ev *ret);

#endif
