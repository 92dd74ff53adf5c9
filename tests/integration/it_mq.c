/* it_mq.c - the durable-topic integration tests' server, store and seed client (it_mq.h). */
#include "it_mq.h"

#include "cq_alloc.h"

#include <poll.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

cq_testsrv_t srv;
bool use_mysql;
unsigned mysql_port;
char db_name[64];
int mqc_tmo = ITMQ_TMO;
uint32_t mqc_max_frame;

static int db_seq;

/* ---- the server and its store --------------------------------------------------------------- */

bool itmq_backend(int argc, char **argv, bool have_mysql)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--backend=mysql") == 0)
            use_mysql = true;
    if (!use_mysql)
        return true;
    const char *p = getenv("CQ_MARIADB_PORT");
    if (!have_mysql) {
        printf("1..0 # SKIP no MariaDB client library in this build\n");
        return false;
    }
    if (!p || !*p) {
        printf("1..0 # SKIP no MariaDB server (CQ_MARIADB_PORT unset)\n");
        return false;
    }
    mysql_port = (unsigned)atoi(p);
    return true;
}

void itmq_init(const char *db_prefix)
{
    assert_int_equal(cq_testsrv_init(&srv), 0);
    snprintf(db_name, sizeof(db_name), "%s_%d_%d", db_prefix, (int)getpid(), ++db_seq);
}

int itmq_teardown(void **state)
{
    (void)state;
    cq_testsrv_stop(&srv);
    return 0;
}

int itmq_start_logged(const char *const *args)
{
    int r = cq_testsrv_start(&srv, args);
    if (r < 0) {
        char *log = cq_testsrv_log(&srv);
        fprintf(stderr, "# chanqd did not start (%d):\n%s\n", r, log ? log : "");
        free(log);
    }
    return r;
}

void itmq_start_via(unsigned db_port, const char *const *extra, unsigned need)
{
    char port[16];
    const char *args[64];
    size_t n = 0;
    snprintf(port, sizeof(port), "%u", db_port ? db_port : mysql_port);
    if (use_mysql) {
        const char *my[] = {"--store-backend", "mysql", "--mysql-port",     port,
                            "--mysql-user",    "root",  "--mysql-database", db_name};
        for (size_t i = 0; i < sizeof(my) / sizeof(my[0]); i++)
            args[n++] = my[i];
    }
    while (extra && *extra) {
        assert_true(n < sizeof(args) / sizeof(args[0]) - 1);
        args[n++] = *extra++;
    }
    args[n] = NULL;
    assert_int_equal(itmq_start_logged(args), 0);
    if (need & ITMQ_SEED)
        assert_true(srv.mq_port > 0);
    if (need & ITMQ_HTTP)
        assert_true(srv.mq_http_port > 0);
}

void itmq_start(const char *const *extra, unsigned need)
{
    itmq_start_via(0, extra, need);
}

void itmq_drop_table(const char *table)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "DROP TABLE %s", table);
    if (use_mysql) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "mariadb -h 127.0.0.1 -P %u -u root %s -e '%s' >/dev/null 2>&1",
                 mysql_port, db_name, sql);
        assert_int_equal(system(cmd), 0);
        return;
    }
    char path[400];
    snprintf(path, sizeof(path), "%s/chanq.db", srv.store_path);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fprintf(stderr, "# sqlite: %s\n", err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    assert_int_equal(rc, SQLITE_OK);
}

int64_t itmq_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a small blocking seed-protocol client -------------------------------------------------- */

mqc_t *mqc_open(void)
{
    mqc_t *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->fd = cq_raw_connect(srv.mq_port);
    assert_true(c->fd >= 0);
    return c;
}

void mqc_close(mqc_t *c)
{
    if (c) {
        close(c->fd);
        free(c);
    }
}

void mqc_send(mqc_t *c, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    assert_int_equal(cq_raw_write(c->fd, b, n), 0);
    cq_free(b);
    cq_mq_msg_free(m);
}

bool mqc_try_send(mqc_t *c, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    ssize_t k = send(c->fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    cq_free(b);
    cq_mq_msg_free(m);
    return k == (ssize_t)n;
}

void mqc_send_raw(mqc_t *c, uint8_t type, const char *body)
{
    size_t n = strlen(body);
    uint8_t *b = malloc(CQ_MQ_HDR_LEN + n);
    assert_non_null(b);
    cq_mq_header_write(b, (uint32_t)(CQ_MQ_HDR_LEN + n), type, 7);
    memcpy(b + CQ_MQ_HDR_LEN, body, n);
    assert_int_equal(cq_raw_write(c->fd, b, CQ_MQ_HDR_LEN + n), 0);
    free(b);
}

/* Reads more bytes; false on EOF, error or timeout. */
static bool mqc_fill(mqc_t *c, int timeout_ms)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    ssize_t k = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    if (k <= 0)
        return false;
    c->len += (size_t)k;
    return true;
}

cq_mq_msg_t *mqc_recv_tmo(mqc_t *c, int timeout_ms)
{
    for (;;) {
        cq_mq_frame_t f;
        ssize_t r = cq_mq_parse(c->buf, c->len, mqc_max_frame, &f);
        assert_true(r >= 0);
        if (r > 0) {
            cq_mq_msg_t *m = NULL;
            char err[256] = "";
            cq_mq_limits_t lim = {.max_total = mqc_max_frame};
            int d = cq_mq_decode(&f, mqc_max_frame ? &lim : NULL, &m, err, sizeof(err));
            if (d < 0)
                fprintf(stderr, "# decode: %s\n", err);
            assert_int_equal(d, 0);
            c->last_frame = (size_t)r;
            memmove(c->buf, c->buf + r, c->len - (size_t)r);
            c->len -= (size_t)r;
            return m;
        }
        if (!mqc_fill(c, timeout_ms))
            return NULL;
    }
}

cq_mq_msg_t *mqc_recv(mqc_t *c)
{
    cq_mq_msg_t *m = mqc_recv_tmo(c, mqc_tmo);
    assert_non_null(m);
    return m;
}

bool mqc_eof(mqc_t *c)
{
    cq_mq_msg_t *m;
    while ((m = mqc_recv_tmo(c, ITMQ_TMO)))
        cq_mq_msg_free(m);
    char b;
    return recv(c->fd, &b, 1, MSG_DONTWAIT) == 0;
}

cq_mq_msg_t *mqc_req(mqc_t *c, uint8_t type, const char *topic)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, (uint16_t)(c->askid + 1));
    assert_non_null(m);
    m->askid = ++c->askid;
    m->has |= CQ_MQ_F_ASKID;
    if (topic) {
        assert_int_equal(cq_mq_msg_set_topic(m, topic), 0);
        m->has |= CQ_MQ_F_TOPIC;
    }
    return m;
}

cq_mq_msg_t *mqc_call(mqc_t *c, cq_mq_msg_t *m)
{
    uint8_t type = m->type;
    uint32_t askid = m->askid;
    uint16_t id = m->msg_id;
    mqc_send(c, m);
    cq_mq_msg_t *r = mqc_recv(c);
    assert_int_equal(r->type, type + 1);
    assert_int_equal(r->askid, askid);
    assert_int_equal(r->msg_id, id);
    return r;
}

uint32_t mqc_call_code(mqc_t *c, cq_mq_msg_t *m)
{
    cq_mq_msg_t *r = mqc_call(c, m);
    uint32_t code = r->err_code;
    cq_mq_msg_free(r);
    return code;
}

uint32_t mqc_connect(mqc_t *c, uint32_t module, const char *token, uint32_t type)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_CONNECT, NULL);
    m->module_id = module;
    m->client_type = type;
    m->has |= CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, token), 0);
    return mqc_call_code(c, m);
}

mqc_t *mqc_connected(uint32_t module, const char *token)
{
    mqc_t *c = mqc_open();
    assert_int_equal(mqc_connect(c, module, token, CQ_MQ_PRODUCER), CQ_MQ_OK);
    return c;
}

uint32_t mqc_add_topic(mqc_t *c, const char *topic)
{
    return mqc_call_code(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, topic));
}

cq_mq_msg_t *mqc_produce_msg(mqc_t *c, const char *topic, const char *prefix, size_t first,
                             size_t n, size_t pad, char fill, int64_t pid)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_PRODUCE, topic);
    char *s = malloc(pad + 64);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) {
        int k = snprintf(s, 64, "%s-%zu", prefix, first + i);
        memset(s + k, fill, pad);
        assert_int_equal(cq_mq_msg_add_item(m, 0, -1, s, (size_t)k + pad, false), 0);
    }
    free(s);
    m->has |= n == 1 ? CQ_MQ_F_CONTENT : CQ_MQ_F_BATCH;
    if (pid) {
        m->producer_id = pid;
        m->seq = (int64_t)first;
        m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
    }
    return m;
}

cq_mq_msg_t *mqc_consume_msg(mqc_t *c, const char *topic, int64_t offset, uint32_t max)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_CONSUME, topic);
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    if (max) {
        m->max_count = max;
        m->has |= CQ_MQ_F_MAX_COUNT;
    }
    return m;
}
