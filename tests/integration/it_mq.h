/* it_mq.h - helpers shared by the durable-topic integration tests (test_it_mq*.c,
 * test_it_limits.c): the chanqd under test and its store, and a small blocking seed-protocol
 * client.
 *
 * The store is the embedded SQLite one, or, with --backend=mysql (itmq_backend), the MariaDB
 * server run_mariadb.sh started (CQ_MARIADB_PORT), in a database named per test (itmq_init).
 * Each test binary has one server, `srv`; the client asserts on everything it is not asked to
 * report, and every wait is bounded (a hang detector, never a timing assertion).
 */
#ifndef IT_MQ_H
#define IT_MQ_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_mq.h"
#include "cq_testsrv.h"

#define ITMQ_TMO 5000 /* one answer */

/* ---- the server and its store --------------------------------------------------------------- */

extern cq_testsrv_t srv;
extern bool use_mysql;      /* --backend=mysql */
extern unsigned mysql_port; /* the MariaDB server's port (CQ_MARIADB_PORT) */
extern char db_name[64];    /* this test's MariaDB database */

/* Reads --backend=mysql from the command line. False, after printing the TAP skip line, when
 * MariaDB is asked for but there is none (CQ_MARIADB_PORT unset, or !have_mysql: no client
 * library in this build). */
bool itmq_backend(int argc, char **argv, bool have_mysql);

/* Per-test setup: a fresh srv (asserts) and a new database name "<prefix>_<pid>_<n>". */
void itmq_init(const char *db_prefix);

/* Per-test teardown: stops srv. */
int itmq_teardown(void **state);

/* cq_testsrv_start(&srv, args), with chanqd's log on stderr when it does not start. */
int itmq_start_logged(const char *const *args);

/* What itmq_start asserts chanqd listens on. */
enum { ITMQ_SEED = 1, ITMQ_HTTP = 2 };

/* Starts chanqd (again, on the same data) on the test's store, plus the extra args
 * (NULL-terminated, may be NULL); db_port is where MariaDB is reached (0: mysql_port). Asserts
 * that it started and listens on the ports in need. */
void itmq_start_via(unsigned db_port, const char *const *extra, unsigned need);
void itmq_start(const char *const *extra, unsigned need);

/* Drops a table behind chanqd's back (MariaDB through the mariadb client, or the SQLite file):
 * every later statement on it fails. */
void itmq_drop_table(const char *table);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t itmq_now_ms(void);

/* ---- a small blocking seed-protocol client -------------------------------------------------- */

#define MQC_BUF (4u << 20)

typedef struct mqc {
    int fd;
    uint8_t buf[MQC_BUF];
    size_t len;
    uint32_t askid;
    size_t last_frame; /* total length of the last frame received */
} mqc_t;

/* How long mqc_recv and mqc_call wait for a frame (default ITMQ_TMO). */
extern int mqc_tmo;
/* The largest frame mqc accepts; 0 (the default): the codec's default maximum. A test that
 * checks the server's maximum itself sets it up to MQC_BUF. */
extern uint32_t mqc_max_frame;

/* A new connection to srv's seed port (asserts). */
mqc_t *mqc_open(void);
void mqc_close(mqc_t *c); /* NULL is fine */
/* Encodes and sends m (blocking), then frees it. */
void mqc_send(mqc_t *c, cq_mq_msg_t *m);
/* Sends m without blocking, then frees it; false when the whole frame could not be written at
 * once (the server stopped reading or closed). */
bool mqc_try_send(mqc_t *c, cq_mq_msg_t *m);
/* Sends a frame with the given type and body text (msg id 7). */
void mqc_send_raw(mqc_t *c, uint8_t type, const char *body);
/* The next message from the server, or NULL on EOF / timeout (asserts it parses). */
cq_mq_msg_t *mqc_recv_tmo(mqc_t *c, int timeout_ms);
/* The next message within mqc_tmo (asserts one comes). */
cq_mq_msg_t *mqc_recv(mqc_t *c);
/* True if the server closed the connection (after any frames it sent, dropped). */
bool mqc_eof(mqc_t *c);

/* A request with the next askid (msg id askid + 1 on 16 bits) and, when not NULL, a topic. */
cq_mq_msg_t *mqc_req(mqc_t *c, uint8_t type, const char *topic);
/* Sends m and returns the response (asserts its type and the askid and msg id echo). */
cq_mq_msg_t *mqc_call(mqc_t *c, cq_mq_msg_t *m);
/* mqc_call, returning only the err_code. */
uint32_t mqc_call_code(mqc_t *c, cq_mq_msg_t *m);

/* Sends a connect; returns the err_code. */
uint32_t mqc_connect(mqc_t *c, uint32_t module, const char *token, uint32_t type);
/* A new connection, connected as a producer (asserts ok). */
mqc_t *mqc_connected(uint32_t module, const char *token);
/* Adds topic; returns the err_code. */
uint32_t mqc_add_topic(mqc_t *c, const char *topic);
/* A produce of n messages "<prefix>-<first+i>", each padded with pad bytes of fill (none when
 * pad is 0); pid 0 = no idempotence key, else producer_id pid and seq first. */
cq_mq_msg_t *mqc_produce_msg(mqc_t *c, const char *topic, const char *prefix, size_t first,
                             size_t n, size_t pad, char fill, int64_t pid);
/* A consume from offset; max 0 = no max_count. */
cq_mq_msg_t *mqc_consume_msg(mqc_t *c, const char *topic, int64_t offset, uint32_t max);

#endif
