/* test_it_mq.c - durable topics end to end: a real chanqd, the seed protocol on its MQ port, and
 * the store behind it (--backend=sqlite, or --backend=mysql against the MariaDB server that
 * run_mariadb.sh started: CQ_MARIADB_PORT).
 *
 * The client is it_mq.h's tiny blocking one over a socket using the codec (cq_mq_encode /
 * cq_mq_parse / cq_mq_decode). Every bad-input case is followed by a round trip proving the server
 * still serves. The crash case SIGKILLs chanqd in the middle of a pipelined produce stream; on
 * MariaDB, test_mariadb_crash SIGKILLs the database server instead (mariadb.sh kill), restarts it
 * on the same data dir and port, and checks that every produce was answered (acked, or failed
 * with storage), that chanqd reconnects by itself, and that with idempotent retries every
 * message is stored exactly once at the offset it was acked with.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_store.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TMO 5000

/* ---- server --------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    itmq_init("cqit");
    return 0;
}

/* Opens the store chanqd uses (chanqd must be stopped for sqlite's exclusive habits). */
static cq_store_t *open_store(void)
{
    cq_store_opts_t o = {.dir = srv.store_path};
    const cq_store_ops_t *ops = &cq_store_sqlite_ops;
#ifdef CQ_HAVE_MYSQL
    if (use_mysql) {
        ops = &cq_store_mysql_ops;
        o = (cq_store_opts_t){
            .host = "127.0.0.1", .port = mysql_port, .user = "root", .database = db_name};
    }
#endif
    cq_store_t *st = NULL;
    char err[256] = "";
    int r = cq_store_open(ops, &o, &st, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "# store: %s\n", err);
    assert_int_equal(r, 0);
    return st;
}

/* ---- the seed client (it_mq.h) ------------------------------------------------------------- */

/* A keepalive round trip: the server still serves this connection. */
static void roundtrip(mqc_t *c)
{
    cq_mq_msg_t *r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_KEEPALIVE, NULL));
    assert_int_equal(r->err_code, 0);
    assert_true(r->has & CQ_MQ_F_WEIGHT);
    cq_mq_msg_free(r);
}

/* Builds a produce of n messages "<prefix>-<i>"; pid 0 = no idempotence key. */
static cq_mq_msg_t *produce_msg(mqc_t *c, const char *topic, const char *prefix, size_t n,
                                int64_t pid, int64_t seq)
{
    return mqc_produce_msg(c, topic, prefix, (size_t)seq, n, 0, 0, pid);
}

/* Produces and copies the offsets; returns the err_code. */
static uint32_t produce(mqc_t *c, const char *topic, const char *prefix, size_t n, int64_t pid,
                        int64_t seq, int64_t *offsets)
{
    cq_mq_msg_t *r = mqc_call(c, produce_msg(c, topic, prefix, n, pid, seq));
    uint32_t code = r->err_code;
    if (code == 0) {
        assert_int_equal(r->noffsets, n);
        for (size_t i = 0; offsets && i < n; i++)
            offsets[i] = r->offsets[i];
    }
    cq_mq_msg_free(r);
    return code;
}

static cq_mq_msg_t *consume(mqc_t *c, const char *topic, int64_t offset, uint32_t max)
{
    return mqc_call(c, mqc_consume_msg(c, topic, offset, max));
}

static const char perms_json[] =
    "{\"1\": {\"token\": \"s1\", \"produce\": [\"*\"], \"consume\": [\"*\"], \"admin\": true},"
    " \"2\": {\"token\": \"s2\", \"consume\": [\"orders\"]},"
    " \"3\": {\"token\": \"s3\", \"produce\": [\"orders\"]}}";

static void start_with_perms(void)
{
    char path[512];
    assert_int_equal(cq_testsrv_file(&srv, "perms.json", perms_json, path, sizeof(path)), 0);
    const char *args[] = {"--mq-permissions-file", path, NULL};
    itmq_start(args, ITMQ_SEED);
}

/* ---- cases ---------------------------------------------------------------------------------- */

static void test_connect_permissions(void **state)
{
    (void)state;
    start_with_perms();
    mqc_t *c = mqc_open();
    /* a request before connect */
    assert_int_equal(mqc_add_topic(c, "orders"), CQ_MQ_ERR_UNAUTHENTICATED);
    roundtrip(c);
    /* a wrong token is answered, then the connection is closed */
    assert_int_equal(mqc_connect(c, 1, "nope", CQ_MQ_PRODUCER), CQ_MQ_ERR_UNAUTHENTICATED);
    assert_true(mqc_eof(c));
    mqc_close(c);
    c = mqc_open();
    assert_int_equal(mqc_connect(c, 9, "", CQ_MQ_CONSUMER), CQ_MQ_ERR_UNAUTHENTICATED);
    mqc_close(c);

    mqc_t *admin = mqc_connected(1, "s1");
    mqc_t *cons = mqc_connected(2, "s2");
    mqc_t *prod = mqc_connected(3, "s3");
    assert_int_equal(mqc_add_topic(cons, "other"), CQ_MQ_ERR_NO_PERMISSION); /* no admin right */
    roundtrip(cons);
    assert_int_equal(mqc_add_topic(admin, "orders"), CQ_MQ_OK);
    assert_int_equal(mqc_add_topic(admin, "other"), CQ_MQ_OK);
    assert_int_equal(mqc_add_topic(prod, "orders"), CQ_MQ_OK); /* exists: registered */
    assert_int_equal(produce(cons, "orders", "x", 1, 0, 0, NULL), CQ_MQ_ERR_NO_PERMISSION);
    roundtrip(cons);
    assert_int_equal(produce(prod, "other", "x", 1, 0, 0, NULL), CQ_MQ_ERR_NO_PERMISSION);
    assert_int_equal(produce(prod, "orders", "x", 1, 0, 0, NULL), CQ_MQ_OK);
    cq_mq_msg_t *r = consume(prod, "orders", 0, 10);
    assert_int_equal(r->err_code, CQ_MQ_ERR_NO_PERMISSION);
    cq_mq_msg_free(r);
    r = consume(cons, "orders", 0, 10);
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->nitems, 1);
    cq_mq_msg_free(r);
    r = consume(cons, "other", 0, 10);
    assert_int_equal(r->err_code, CQ_MQ_ERR_NO_PERMISSION);
    cq_mq_msg_free(r);
    roundtrip(cons);
    mqc_close(admin);
    mqc_close(cons);
    mqc_close(prod);
}

/* The cluster's fields (issue 11) of one server: shard 0, master, writable. */
static void check_role(mqc_t *c)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_CONNECT, NULL);
    m->module_id = 5;
    m->client_type = CQ_MQ_PRODUCER;
    m->has |= CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, ""), 0);
    cq_mq_msg_t *r = mqc_call(c, m);
    assert_int_equal(r->err_code, 0);
    assert_true((r->has & (CQ_MQ_F_SHARD | CQ_MQ_F_MASTER)) == (CQ_MQ_F_SHARD | CQ_MQ_F_MASTER));
    assert_int_equal(r->shard, 0);
    assert_true(r->master);
    cq_mq_msg_free(r);
    r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_KEEPALIVE, NULL));
    assert_true(r->master && (r->has & CQ_MQ_F_SHARD) && r->shard == 0);
    assert_true(r->weight >= 1 && r->weight <= 100); /* load and commit time may lower it */
    cq_mq_msg_free(r);
}

static void test_produce_consume(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_open();
    check_role(c);
    assert_int_equal(mqc_add_topic(c, "events"), CQ_MQ_OK);
    assert_int_equal(produce(c, "unknown_topic", "a", 1, 0, 0, NULL), CQ_MQ_ERR_UNKNOWN_TOPIC);
    int64_t o1[1], o5[5], again[5];
    assert_int_equal(produce(c, "events", "m", 1, 42, 0, o1), CQ_MQ_OK);
    assert_true(o1[0] > 0);
    assert_int_equal(produce(c, "events", "m", 5, 42, 1, o5), CQ_MQ_OK);
    for (int i = 0; i < 5; i++)
        assert_true(o5[i] > (i ? o5[i - 1] : o1[0]));
    /* an idempotent retry gets the original offsets and stores nothing */
    assert_int_equal(produce(c, "events", "m", 5, 42, 1, again), CQ_MQ_OK);
    assert_memory_equal(again, o5, sizeof(o5));
    assert_int_equal(produce(c, "events", "m", 1, 42, 0, again), CQ_MQ_OK);
    assert_int_equal(again[0], o1[0]);

    cq_mq_msg_t *r = consume(c, "events", 0, 100);
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->nitems, 6);
    for (size_t i = 0; i < 6; i++) {
        char want[32];
        snprintf(want, sizeof(want), "m-%zu", i);
        assert_string_equal(r->items[i].content, want);
        assert_int_equal(r->items[i].offset, i ? o5[i - 1] : o1[0]);
        /* the idempotence key comes back from the store: a consumer of several shards drops
         * duplicates by it */
        assert_int_equal(r->items[i].producer_id, 42);
        assert_int_equal(r->items[i].seq, i);
    }
    assert_int_equal(r->offset, o5[4]);
    assert_true((r->has & CQ_MQ_F_SHARD) && r->shard == 0);
    cq_mq_msg_free(r);
    r = consume(c, "events", o5[1], 2); /* after an offset, bounded by max_count */
    assert_int_equal(r->nitems, 2);
    assert_int_equal(r->items[0].offset, o5[2]);
    assert_int_equal(r->items[1].offset, o5[3]);
    cq_mq_msg_free(r);
    r = consume(c, "events", o5[4], 0);
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->nitems, 0);
    cq_mq_msg_free(r);
    mqc_close(c);
}

static uint32_t commit(mqc_t *c, const char *topic, int64_t offset)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_COMMIT, topic);
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    cq_mq_msg_t *r = mqc_call(c, m);
    uint32_t code = r->err_code;
    if (code == 0)
        assert_int_equal(r->offset, offset);
    cq_mq_msg_free(r);
    return code;
}

static void test_commit_survives_restart(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(7, "");
    assert_int_equal(mqc_add_topic(c, "jobs"), CQ_MQ_OK);
    int64_t off[3];
    assert_int_equal(produce(c, "jobs", "j", 3, 0, 0, off), CQ_MQ_OK);
    assert_int_equal(commit(c, "jobs", off[1]), CQ_MQ_OK);
    assert_int_equal(commit(c, "nojobs", off[1]), CQ_MQ_ERR_UNKNOWN_TOPIC);
    mqc_close(c);
    assert_int_equal(cq_testsrv_kill(&srv, SIGKILL), 128 + SIGKILL);
    itmq_start(NULL, ITMQ_SEED);
    c = mqc_connected(7, "");
    cq_mq_msg_t *r = consume(c, "jobs", off[1], 10); /* resume after the committed offset */
    assert_int_equal(r->nitems, 1);
    assert_int_equal(r->items[0].offset, off[2]);
    cq_mq_msg_free(r);
    mqc_close(c);
    cq_testsrv_kill(&srv, SIGTERM);
    cq_store_t *st = open_store();
    uint64_t got = 0;
    assert_int_equal(cq_store_get_offset(st, "jobs", "m7", &got), 0);
    assert_int_equal(got, (uint64_t)off[1]);
    cq_store_close(st);
}

/* offset (21) and topics (23), the messages protocol v1 adds to the seed: each module sees the
 * topics it may use and reads back the offset its consumer committed. */
static void test_offset_topics(void **state)
{
    (void)state;
    start_with_perms();
    mqc_t *admin = mqc_connected(1, "s1"), *cons = mqc_connected(2, "s2"),
          *prod = mqc_connected(3, "s3");
    assert_int_equal(mqc_add_topic(admin, "orders"), CQ_MQ_OK);
    assert_int_equal(mqc_add_topic(admin, "other"), CQ_MQ_OK);
    int64_t off[3];
    assert_int_equal(produce(admin, "orders", "o", 3, 0, 0, off), CQ_MQ_OK);
    /* topics, filtered by the module's rights, sorted */
    cq_mq_msg_t *r = mqc_call(admin, mqc_req(admin, CQ_MQ_REQ_TOPICS, NULL));
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->ntopic_infos, 2);
    assert_int_equal(r->topic_nums, 2);
    assert_string_equal(r->topic_infos[0].topic, "orders");
    assert_true(r->topic_infos[0].online);
    assert_int_equal(r->topic_infos[0].retention_days, 30);
    assert_int_equal(r->topic_infos[0].last_offset, off[2]);
    assert_string_equal(r->topic_infos[1].topic, "other");
    assert_int_equal(r->topic_infos[1].last_offset, 0);
    cq_mq_msg_free(r);
    mqc_t *who[2] = {cons, prod};
    for (int i = 0; i < 2; i++) {
        r = mqc_call(who[i], mqc_req(who[i], CQ_MQ_REQ_TOPICS, NULL));
        assert_int_equal(r->ntopic_infos, 1);
        assert_string_equal(r->topic_infos[0].topic, "orders");
        cq_mq_msg_free(r);
    }
    /* offset: none yet, then the committed one; no right, unknown topic */
    r = mqc_call(cons, mqc_req(cons, CQ_MQ_REQ_OFFSET, "orders"));
    assert_int_equal(r->err_code, 0);
    assert_true(r->has & CQ_MQ_F_COMMITTED);
    assert_false(r->committed);
    assert_int_equal(r->offset, 0);
    assert_int_equal(r->last_offset, off[2]);
    cq_mq_msg_free(r);
    assert_int_equal(commit(cons, "orders", off[1]), CQ_MQ_OK);
    r = mqc_call(cons, mqc_req(cons, CQ_MQ_REQ_OFFSET, "orders"));
    assert_true(r->committed);
    assert_int_equal(r->offset, off[1]);
    assert_string_equal(r->topic, "orders");
    cq_mq_msg_free(r);
    assert_int_equal(mqc_call_code(prod, mqc_req(prod, CQ_MQ_REQ_OFFSET, "orders")),
                     CQ_MQ_ERR_NO_PERMISSION);
    assert_int_equal(mqc_call_code(cons, mqc_req(cons, CQ_MQ_REQ_OFFSET, "other")),
                     CQ_MQ_ERR_NO_PERMISSION);
    assert_int_equal(mqc_call_code(admin, mqc_req(admin, CQ_MQ_REQ_OFFSET, "nosuch")),
                     CQ_MQ_ERR_UNKNOWN_TOPIC);
    /* another module's consumer is its own: admin never committed */
    r = mqc_call(admin, mqc_req(admin, CQ_MQ_REQ_OFFSET, "orders"));
    assert_false(r->committed);
    cq_mq_msg_free(r);
    /* before connect: unauthenticated, and the connection keeps serving */
    mqc_t *anon = mqc_open();
    assert_int_equal(mqc_call_code(anon, mqc_req(anon, CQ_MQ_REQ_TOPICS, NULL)),
                     CQ_MQ_ERR_UNAUTHENTICATED);
    roundtrip(anon);
    mqc_close(anon);
    /* the committed offset survives a restart */
    mqc_close(admin);
    mqc_close(cons);
    mqc_close(prod);
    assert_int_equal(cq_testsrv_kill(&srv, SIGKILL), 128 + SIGKILL);
    start_with_perms();
    cons = mqc_connected(2, "s2");
    r = mqc_call(cons, mqc_req(cons, CQ_MQ_REQ_OFFSET, "orders"));
    assert_true(r->committed);
    assert_int_equal(r->offset, off[1]);
    assert_int_equal(r->last_offset, off[2]);
    cq_mq_msg_free(r);
    mqc_close(cons);
}

/* A commit or offset request of instance (NULL: the module's own consumer); the answer. */
static cq_mq_msg_t *instance_call(mqc_t *c, int type, const char *instance, int64_t offset)
{
    cq_mq_msg_t *m = mqc_req(c, type, "jobs");
    if (type == CQ_MQ_REQ_COMMIT) {
        m->offset = offset;
        m->has |= CQ_MQ_F_OFFSET;
    }
    if (instance)
        assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_INSTANCE, instance), 0);
    return mqc_call(c, m);
}

/* Per-instance consumers (issue 25): two instances of module 7 commit different offsets and
 * each reads back its own; the module's own consumer is a third; the answers echo the instance;
 * the store holds "m7/<instance>"; a bad instance id gets bad_field with what is wrong. */
static void test_instances(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(7, "");
    assert_int_equal(mqc_add_topic(c, "jobs"), CQ_MQ_OK);
    int64_t off[3];
    assert_int_equal(produce(c, "jobs", "j", 3, 0, 0, off), CQ_MQ_OK);
    const char *inst[2] = {"vip-1", "vip-2"};
    for (int i = 0; i < 2; i++) {
        cq_mq_msg_t *r = instance_call(c, CQ_MQ_REQ_COMMIT, inst[i], off[i]);
        assert_int_equal(r->err_code, 0);
        assert_int_equal(r->offset, off[i]);
        assert_true(r->has & CQ_MQ_F_INSTANCE);
        assert_string_equal(r->instance, inst[i]);
        cq_mq_msg_free(r);
    }
    assert_int_equal(commit(c, "jobs", off[2]), CQ_MQ_OK);
    for (int i = 0; i < 2; i++) {
        cq_mq_msg_t *r = instance_call(c, CQ_MQ_REQ_OFFSET, inst[i], 0);
        assert_int_equal(r->err_code, 0);
        assert_true(r->committed);
        assert_int_equal(r->offset, off[i]);
        assert_int_equal(r->last_offset, off[2]);
        assert_string_equal(r->instance, inst[i]);
        cq_mq_msg_free(r);
    }
    cq_mq_msg_t *r = instance_call(c, CQ_MQ_REQ_OFFSET, "vip-3", 0);
    assert_int_equal(r->err_code, 0);
    assert_false(r->committed);
    cq_mq_msg_free(r);
    r = instance_call(c, CQ_MQ_REQ_OFFSET, NULL, 0);
    assert_int_equal(r->offset, off[2]);
    assert_false(r->has & CQ_MQ_F_INSTANCE);
    cq_mq_msg_free(r);
    const char *bad[2] = {"has space", ""};
    for (int i = 0; i < 2; i++) {
        r = instance_call(c, CQ_MQ_REQ_COMMIT, bad[i], off[0]);
        assert_int_equal(r->err_code, CQ_MQ_ERR_BAD_FIELD);
        assert_string_equal(
            r->err_msg, "commit: instance must be 1 to 100 printable ASCII characters, no space");
        cq_mq_msg_free(r);
    }
    roundtrip(c);
    mqc_close(c);
    cq_testsrv_kill(&srv, SIGTERM);
    cq_store_t *st = open_store();
    uint64_t got = 0;
    assert_int_equal(cq_store_get_offset(st, "jobs", "m7/vip-2", &got), 0);
    assert_int_equal(got, (uint64_t)off[1]);
    assert_int_equal(cq_store_get_offset(st, "jobs", "m7", &got), 0);
    assert_int_equal(got, (uint64_t)off[2]);
    cq_store_close(st);
}

static void test_watch_push(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *p = mqc_connected(1, ""), *w = mqc_connected(2, ""), *w2 = mqc_connected(2, "");
    assert_int_equal(mqc_add_topic(p, "feed"), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(w, mqc_req(w, CQ_MQ_REQ_WATCH, "feed")), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(w2, mqc_req(w2, CQ_MQ_REQ_WATCH, "feed")), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(w, mqc_req(w, CQ_MQ_REQ_WATCH, "nofeed")),
                     CQ_MQ_ERR_UNKNOWN_TOPIC);
    int64_t off[3];
    assert_int_equal(produce(p, "feed", "f", 3, 0, 0, off), CQ_MQ_OK);
    mqc_t *ws[2] = {w, w2};
    for (int k = 0; k < 2; k++) {
        cq_mq_msg_t *m = mqc_recv(ws[k]);
        assert_int_equal(m->type, CQ_MQ_PUSH);
        assert_string_equal(m->topic, "feed");
        assert_int_equal(m->nitems, 3); /* one push for the commit */
        for (int i = 0; i < 3; i++)
            assert_int_equal(m->items[i].offset, off[i]);
        assert_string_equal(m->items[2].content, "f-2");
        assert_int_equal(m->items[2].producer_id, 0); /* produced without a key: none */
        assert_true((m->has & CQ_MQ_F_SHARD) && m->shard == 0);
        cq_mq_msg_free(m);
    }
    assert_int_equal(mqc_call_code(w, mqc_req(w, CQ_MQ_REQ_UNWATCH, "feed")), CQ_MQ_OK);
    assert_int_equal(produce(p, "feed", "g", 1, 0, 0, off), CQ_MQ_OK);
    cq_mq_msg_t *m = mqc_recv(w2);
    assert_int_equal(m->type, CQ_MQ_PUSH);
    assert_int_equal(m->items[0].offset, off[0]);
    cq_mq_msg_free(m);
    roundtrip(w); /* the next frame is the keepalive answer: no push after unwatch */
    mqc_close(p);
    mqc_close(w);
    mqc_close(w2);
}

static void test_offline_topic(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "paused"), CQ_MQ_OK);
    assert_int_equal(mqc_add_topic(c, "live"), CQ_MQ_OK);
    assert_int_equal(produce(c, "paused", "p", 1, 0, 0, NULL), CQ_MQ_OK);
    mqc_close(c);
    cq_testsrv_kill(&srv, SIGTERM);
    cq_store_t *st = open_store();
    assert_int_equal(cq_store_topic_set_online(st, "paused", false), 0);
    cq_store_close(st);
    itmq_start(NULL, ITMQ_SEED);
    c = mqc_connected(1, "");
    assert_int_equal(produce(c, "paused", "p", 1, 0, 0, NULL), CQ_MQ_ERR_TOPIC_OFFLINE);
    cq_mq_msg_t *r = consume(c, "paused", 0, 10);
    assert_int_equal(r->err_code, CQ_MQ_ERR_TOPIC_OFFLINE);
    cq_mq_msg_free(r);
    assert_int_equal(mqc_call_code(c, mqc_req(c, CQ_MQ_REQ_WATCH, "paused")),
                     CQ_MQ_ERR_TOPIC_OFFLINE);
    assert_int_equal(produce(c, "live", "l", 1, 0, 0, NULL), CQ_MQ_OK);
    mqc_close(c);
}

/* Expects an error answer of the given response type and code to the last frame sent. */
static void expect_error(mqc_t *c, uint8_t type, uint32_t code)
{
    cq_mq_msg_t *r = mqc_recv(c);
    assert_int_equal(r->type, type);
    assert_int_equal(r->err_code, code);
    cq_mq_msg_free(r);
}

static void expect_close(const uint8_t *bytes, size_t n, uint32_t code)
{
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(cq_raw_write(c->fd, bytes, n), 0);
    expect_error(c, CQ_MQ_RESP_ERROR, code);
    assert_true(mqc_eof(c));
    mqc_close(c);
}

static void test_bad_input(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "safe"), CQ_MQ_OK);
    mqc_send_raw(c, CQ_MQ_REQ_PRODUCE, "{bad");
    expect_error(c, CQ_MQ_RESP_ERROR, CQ_MQ_ERR_BAD_JSON);
    roundtrip(c);
    mqc_send_raw(c, CQ_MQ_REQ_PRODUCE, "[1,2]");
    expect_error(c, CQ_MQ_RESP_ERROR, CQ_MQ_ERR_BAD_JSON);
    roundtrip(c);
    mqc_send_raw(c, 17, "{\"askid\": 5}");
    expect_error(c, CQ_MQ_RESP_ERROR, CQ_MQ_ERR_UNKNOWN_TYPE);
    roundtrip(c);
    mqc_send_raw(c, CQ_MQ_RESP_PRODUCE, "{\"askid\": 5, \"err_code\": 0}");
    expect_error(c, CQ_MQ_RESP_ERROR, CQ_MQ_ERR_UNKNOWN_TYPE);
    roundtrip(c);
    mqc_send_raw(c, CQ_MQ_REQ_PRODUCE, "{\"askid\": 5, \"topic\": \"safe\"}");
    expect_error(c, CQ_MQ_RESP_PRODUCE, CQ_MQ_ERR_BAD_FIELD);
    roundtrip(c);
    static const char *const bad_topics[] = {
        "x; DROP TABLE t_safe; --",
        "safe' OR '1'='1",
        "t`x`",
        "a-b",
        "",
        "a1234567890123456789012345678901234567890123456789012345678901234"};
    for (size_t i = 0; i < sizeof(bad_topics) / sizeof(bad_topics[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"askid\": 9, \"topic\": \"%s\", \"content\": \"x\"}",
                 bad_topics[i]);
        mqc_send_raw(c, CQ_MQ_REQ_PRODUCE, body);
        expect_error(c, CQ_MQ_RESP_PRODUCE, CQ_MQ_ERR_BAD_TOPIC_NAME);
        mqc_send_raw(c, CQ_MQ_REQ_ADD_TOPIC, body);
        expect_error(c, CQ_MQ_RESP_ADD_TOPIC, CQ_MQ_ERR_BAD_TOPIC_NAME);
        roundtrip(c);
    }
    /* oversize content (default limit 64 KiB) */
    size_t big = 64 * 1024 + 1;
    char *text = malloc(big + 1);
    memset(text, 'a', big);
    text[big] = '\0';
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_PRODUCE, "safe");
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, text, big, false), 0);
    m->has |= CQ_MQ_F_CONTENT;
    free(text);
    assert_int_equal(mqc_call_code(c, m), CQ_MQ_ERR_CONTENT_TOO_LARGE);
    roundtrip(c);
    /* a wrong client_id */
    m = mqc_req(c, CQ_MQ_REQ_CONSUME, "safe");
    m->offset = 0;
    m->client_id = 999999;
    m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_CLIENT_ID;
    assert_int_equal(mqc_call_code(c, m), CQ_MQ_ERR_BAD_FIELD);
    roundtrip(c);
    /* the topic table is intact */
    assert_int_equal(produce(c, "safe", "s", 1, 0, 0, NULL), CQ_MQ_OK);
    mqc_close(c);

    /* header and length errors: one error frame, then a clean close; others keep working */
    uint8_t h[CQ_MQ_HDR_LEN + 2];
    cq_mq_header_write(h, sizeof(h), CQ_MQ_REQ_KEEPALIVE, 1);
    memcpy(h + CQ_MQ_HDR_LEN, "{}", 2);
    h[6] = 2; /* version */
    expect_close(h, sizeof(h), CQ_MQ_ERR_BAD_HEADER);
    h[6] = CQ_MQ_VERSION;
    h[5] = 13; /* header length */
    expect_close(h, sizeof(h), CQ_MQ_ERR_BAD_HEADER);
    h[5] = CQ_MQ_HDR_LEN;
    h[3] = 5; /* total length below the minimum */
    expect_close(h, sizeof(h), CQ_MQ_ERR_BAD_LENGTH);
    h[0] = 0x7f; /* total length over the maximum */
    expect_close(h, sizeof(h), CQ_MQ_ERR_BAD_LENGTH);
    c = mqc_connected(1, "");
    roundtrip(c);
    mqc_close(c);
}

static void test_busy(void **state)
{
    (void)state;
    const char *args[] = {"--mq-max-pending", "2", NULL};
    itmq_start(args, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "small"), CQ_MQ_OK);
    assert_int_equal(produce(c, "small", "b", 3, 0, 0, NULL), CQ_MQ_ERR_BUSY); /* never fits */
    roundtrip(c);
    int64_t off[2];
    assert_int_equal(produce(c, "small", "b", 2, 0, 0, off), CQ_MQ_OK);
    cq_mq_msg_t *r = consume(c, "small", 0, 10);
    assert_int_equal(r->nitems, 2); /* nothing of the refused produce was stored */
    assert_int_equal(r->items[1].offset, off[1]);
    cq_mq_msg_free(r);
    mqc_close(c);
}

/* ---- metrics on the admin port ------------------------------------------------------------- */

/* GET /metrics from the admin port; returns the body (malloc'd) or NULL. */
static char *get_metrics(void)
{
    int fd = cq_raw_connect(srv.admin_port);
    assert_true(fd >= 0);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(cq_raw_write(fd, req, sizeof(req) - 1), 0);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, TMO) <= 0)
            break;
        ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200", 12), 0);
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
}

/* The value of the sample whose line starts with "series " (name and labels), or -1. */
static int64_t sample(const char *body, const char *series)
{
    size_t n = strlen(series);
    for (const char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, series, n) == 0 && l[n] == ' ')
            return strtoll(l + n + 1, NULL, 10);
    }
    return -1;
}

/* Polls /metrics until series has the value want (the snapshot is refreshed every 250 ms);
 * returns the last body (malloc'd). */
static char *metrics_when(const char *series, int64_t want)
{
    for (int i = 0; i < 200; i++) {
        char *b = get_metrics();
        if (sample(b, series) == want)
            return b;
        free(b);
        usleep(50 * 1000);
    }
    char *b = get_metrics();
    fprintf(stderr, "# %s never became %lld:\n%s\n", series, (long long)want, b);
    fail();
    return b;
}

static void test_metrics(void **state)
{
    (void)state;
    start_with_perms();
    mqc_t *admin = mqc_connected(1, "s1"), *cons = mqc_connected(2, "s2");
    assert_int_equal(mqc_add_topic(admin, "orders"), CQ_MQ_OK);
    assert_int_equal(mqc_add_topic(admin, "other"), CQ_MQ_OK);
    int64_t off[5], o2[2];
    assert_int_equal(produce(admin, "orders", "m", 5, 0, 0, off), CQ_MQ_OK);
    assert_int_equal(produce(admin, "other", "n", 1, 0, 0, o2), CQ_MQ_OK);
    assert_int_equal(produce(admin, "other", "n", 1, 0, 0, o2 + 1), CQ_MQ_OK);
    assert_int_equal(commit(cons, "orders", off[1]), CQ_MQ_OK);
    char *b = metrics_when("chanq_mq_consumer_offset{topic=\"orders\",consumer=\"m2\",shard=\"0\"}",
                           off[1]);
    assert_int_equal(sample(b, "chanq_mq_topic_produced_total{topic=\"orders\",shard=\"0\"}"), 5);
    assert_int_equal(sample(b, "chanq_mq_topic_produced_total{topic=\"other\",shard=\"0\"}"), 2);
    assert_int_equal(sample(b, "chanq_mq_topic_last_offset{topic=\"orders\",shard=\"0\"}"), off[4]);
    assert_int_equal(sample(b, "chanq_mq_topic_last_offset{topic=\"other\",shard=\"0\"}"), o2[1]);
    assert_int_equal(sample(b, "chanq_mq_topic_pending_messages{topic=\"orders\",shard=\"0\"}"), 0);
    assert_int_equal(sample(b, "chanq_mq_topic_purged_total{topic=\"orders\",shard=\"0\"}"), 0);
    assert_int_equal(sample(b, "chanq_mq_topic_online{topic=\"orders\",shard=\"0\"}"), 1);
    assert_int_equal(
        sample(b, "chanq_mq_consumer_lag{topic=\"orders\",consumer=\"m2\",shard=\"0\"}"),
        off[4] - off[1]);
    assert_int_equal(sample(b, "chanq_mq_produced_total"), 7);
    assert_int_equal(sample(b, "chanq_mq_topics"), 2);
    /* the writer: 3 produce transactions (5 + 1 + 1 messages) in the histograms */
    assert_int_equal(sample(b, "chanq_mq_writer_transactions_total"), 3);
    assert_int_equal(sample(b, "chanq_mq_writer_messages_total"), 7);
    assert_int_equal(sample(b, "chanq_mq_writer_batch_messages_bucket{le=\"1\"}"), 2);
    assert_int_equal(sample(b, "chanq_mq_writer_batch_messages_bucket{le=\"5\"}"), 3);
    assert_int_equal(sample(b, "chanq_mq_writer_batch_messages_bucket{le=\"+Inf\"}"), 3);
    assert_int_equal(sample(b, "chanq_mq_writer_batch_messages_count"), 3);
    assert_int_equal(sample(b, "chanq_mq_writer_commit_seconds_bucket{le=\"+Inf\"}"), 3);
    assert_int_equal(sample(b, "chanq_mq_writer_commit_seconds_count"), 3);
    assert_non_null(strstr(b, "# TYPE chanq_mq_writer_commit_seconds histogram\n"));
    /* the channel metrics come first */
    assert_true(sample(b, "messages_in{connType=\"CLIENT\"}") >= 0);
    assert_true(strstr(b, "messages_in") < strstr(b, "chanq_mq_"));
    free(b);
    /* reading an offset back records it too, and the lag follows new produces */
    assert_int_equal(produce(admin, "orders", "m", 1, 0, 0, off), CQ_MQ_OK);
    b = metrics_when("chanq_mq_topic_produced_total{topic=\"orders\",shard=\"0\"}", 6);
    assert_int_equal(
        sample(b, "chanq_mq_consumer_lag{topic=\"orders\",consumer=\"m2\",shard=\"0\"}"),
        off[0] - sample(b, "chanq_mq_consumer_offset{topic=\"orders\","
                           "consumer=\"m2\",shard=\"0\"}"));
    free(b);
    mqc_close(admin);
    mqc_close(cons);
}

/* ---- crash: SIGKILL in the middle of a produce stream --------------------------------------- */

#define CRASH_PID    77
#define CRASH_WINDOW 64 /* produces in flight */
#define CRASH_KILL   400
#define CRASH_MAX    4096

typedef struct crash {
    int64_t acked[CRASH_MAX]; /* offset acknowledged for seq, 0 if not acked */
    int next;                 /* next seq to send */
    int nacked;
} crash_t;

/* Reads one produce answer and records it. Returns false on EOF. */
static bool crash_read(mqc_t *c, crash_t *k, const uint32_t *askid_seq, int timeout_ms)
{
    cq_mq_msg_t *r = mqc_recv_tmo(c, timeout_ms);
    if (!r)
        return false;
    assert_int_equal(r->type, CQ_MQ_RESP_PRODUCE);
    int seq = (int)askid_seq[r->askid % CRASH_MAX];
    if (r->err_code == 0) {
        assert_int_equal(r->noffsets, 1);
        assert_int_equal(k->acked[seq], 0);
        k->acked[seq] = r->offsets[0];
        k->nacked++;
    }
    cq_mq_msg_free(r);
    return true;
}

/* Streams produces with a window, kills chanqd after CRASH_KILL sends, reads what was acked. */
static void crash_stream(crash_t *k)
{
    mqc_t *c = mqc_connected(1, "");
    static uint32_t askid_seq[CRASH_MAX];
    int inflight = 0;
    while (k->next < CRASH_KILL) {
        while (inflight < CRASH_WINDOW && k->next < CRASH_KILL) {
            askid_seq[(c->askid + 1) % CRASH_MAX] = (uint32_t)k->next;
            mqc_send(c, produce_msg(c, "crash", "c", 1, CRASH_PID, k->next++));
            inflight++;
        }
        assert_true(crash_read(c, k, askid_seq, TMO));
        inflight--;
    }
    assert_int_equal(cq_testsrv_kill(&srv, SIGKILL), 128 + SIGKILL); /* mid-stream */
    while (crash_read(c, k, askid_seq, TMO)) /* answers sent before the kill */
        ;
    mqc_close(c);
}

static void test_crash(void **state)
{
    (void)state;
    static crash_t k;
    memset(&k, 0, sizeof(k));
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "crash"), CQ_MQ_OK);
    mqc_close(c);
    crash_stream(&k);
    print_message("# crash: %d sent, %d acked before SIGKILL\n", k.next, k.nacked);
    itmq_start(NULL, ITMQ_SEED);
    c = mqc_connected(1, "");
    /* the producer retries everything not acked, with the same producer id and seq */
    for (int s = 0; s < k.next; s++) {
        int64_t off;
        assert_int_equal(produce(c, "crash", "c", 1, CRASH_PID, s, &off), CQ_MQ_OK);
        if (k.acked[s])
            assert_int_equal(off, k.acked[s]); /* acked before: stored once, same offset */
        k.acked[s] = off;
    }
    /* every message is there exactly once, with its acknowledged offset, in order */
    int64_t from = 0;
    int seen = 0;
    for (;;) {
        cq_mq_msg_t *r = consume(c, "crash", from, 1000);
        assert_int_equal(r->err_code, 0);
        if (r->nitems == 0) {
            cq_mq_msg_free(r);
            break;
        }
        for (size_t i = 0; i < r->nitems; i++) {
            char want[32];
            snprintf(want, sizeof(want), "c-%d", seen);
            assert_string_equal(r->items[i].content, want);
            assert_int_equal(r->items[i].offset, k.acked[seen]);
            seen++;
        }
        from = r->offset;
        cq_mq_msg_free(r);
    }
    assert_int_equal(seen, k.next);
    mqc_close(c);
}

/* ---- crash: MariaDB SIGKILLed and restarted under a produce stream ------------------------- */

#define DBC_PID    88
#define DBC_WINDOW 16
#define DBC_ACKED  200   /* acks before the kill */
#define DBC_FAILED 40    /* error answers to see while the server is down */
#define DBC_TMO    60000 /* a hang detector, not a timing assertion */

typedef struct dbcrash {
    int64_t acked[CRASH_MAX];
    uint8_t answered[CRASH_MAX];
    uint32_t askid_seq[CRASH_MAX];
    int next, nacked, nfailed, inflight;
} dbcrash_t;

/* Starts "mariadb.sh CMD BASE" on the server run_mariadb.sh started; returns its pid. */
static pid_t mariadb_ctl_start(const char *cmd)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(2, 1); /* "restart" prints the port: keep it out of the TAP stream on stdout */
        execlp("sh", "sh", getenv("CQ_MARIADB_SH"), cmd, getenv("CQ_MARIADB_BASE"), (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void mariadb_ctl_wait(pid_t pid)
{
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void mariadb_ctl(const char *cmd)
{
    mariadb_ctl_wait(mariadb_ctl_start(cmd));
}

static void dbc_send(mqc_t *c, dbcrash_t *k)
{
    k->askid_seq[(c->askid + 1) % CRASH_MAX] = (uint32_t)k->next;
    mqc_send(c, produce_msg(c, "dbcrash", "d", 1, DBC_PID, k->next++));
    k->inflight++;
}

/* Reads one produce answer: every request is answered (acked, or failed with an error code). */
static void dbc_read(mqc_t *c, dbcrash_t *k)
{
    cq_mq_msg_t *r = mqc_recv_tmo(c, DBC_TMO);
    assert_non_null(r); /* no hang */
    assert_int_equal(r->type, CQ_MQ_RESP_PRODUCE);
    int seq = (int)k->askid_seq[r->askid % CRASH_MAX];
    assert_int_equal(k->answered[seq], 0);
    k->answered[seq] = 1;
    k->inflight--;
    if (r->err_code == 0) {
        assert_int_equal(r->noffsets, 1);
        k->acked[seq] = r->offsets[0];
        k->nacked++;
    } else {
        assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE); /* nothing acknowledged */
        assert_int_equal(r->noffsets, 0);
        k->nfailed++;
    }
    cq_mq_msg_free(r);
}

/* Produces with the same producer id and seq until it is acked (chanqd reconnects by itself). */
static int64_t dbc_produce_until_ok(mqc_t *c, int seq)
{
    for (int tries = 0; tries < 300; tries++) {
        int64_t off = 0;
        uint32_t code = produce(c, "dbcrash", "d", 1, DBC_PID, seq, &off);
        if (code == CQ_MQ_OK)
            return off;
        assert_int_equal(code, CQ_MQ_ERR_STORAGE);
        usleep(100 * 1000);
    }
    fail_msg("produce of seq %d never succeeded after the restart", seq);
    return 0;
}

static void test_mariadb_crash(void **state)
{
    (void)state;
    static dbcrash_t k;
    memset(&k, 0, sizeof(k));
    itmq_start(NULL, ITMQ_SEED);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_add_topic(c, "dbcrash"), CQ_MQ_OK);
    /* a stream with DBC_WINDOW produces in flight; MariaDB dies in the middle of it */
    while (k.nacked < DBC_ACKED) {
        while (k.inflight < DBC_WINDOW)
            dbc_send(c, &k);
        dbc_read(c, &k);
    }
    pid_t killer = mariadb_ctl_start("kill"); /* lands while produces are in flight */
    while (k.nfailed < DBC_FAILED && k.next < CRASH_MAX - DBC_WINDOW) {
        while (k.inflight < DBC_WINDOW)
            dbc_send(c, &k);
        dbc_read(c, &k);
    }
    while (k.inflight > 0)
        dbc_read(c, &k);
    mariadb_ctl_wait(killer);
    assert_true(k.nfailed >= DBC_FAILED);
    print_message("# mariadb crash: %d sent, %d acked, %d failed while it was down\n", k.next,
                  k.nacked, k.nfailed);
    mariadb_ctl("restart");
    /* chanqd connects again by itself. The producer retries what was not acked with the same
     * producer id and seq, in seq order (a seq below its last stored one that is not a retry is
     * sequence_out_of_order); what was acked keeps its offset (an acked message was committed,
     * and is stored once) */
    int fresh = k.next++;
    for (int s = 0; s < fresh; s++) {
        int64_t off = dbc_produce_until_ok(c, s);
        if (k.acked[s])
            assert_int_equal(off, k.acked[s]);
        k.acked[s] = off;
    }
    /* and new produces succeed */
    k.acked[fresh] = dbc_produce_until_ok(c, fresh);
    /* every message is there exactly once, at the offset it was acked with */
    static uint8_t seen[CRASH_MAX];
    memset(seen, 0, sizeof(seen));
    int64_t from = 0;
    int total = 0;
    for (;;) {
        cq_mq_msg_t *r = consume(c, "dbcrash", from, 1000);
        assert_int_equal(r->err_code, 0);
        size_t n = r->nitems;
        for (size_t i = 0; i < n; i++) {
            int s = atoi(r->items[i].content + 2); /* "d-<seq>" */
            assert_true(s >= 0 && s < k.next);
            assert_int_equal(seen[s], 0);
            seen[s] = 1;
            assert_int_equal(r->items[i].offset, k.acked[s]);
            total++;
        }
        from = r->offset;
        cq_mq_msg_free(r);
        if (n == 0)
            break;
    }
    assert_int_equal(total, k.next);
    mqc_close(c);
}

int main(int argc, char **argv)
{
#ifdef CQ_HAVE_MYSQL
    bool have_mysql = true;
#else
    bool have_mysql = false;
#endif
    if (!itmq_backend(argc, argv, have_mysql))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_connect_permissions, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_produce_consume, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_commit_survives_restart, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_offset_topics, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_instances, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_watch_push, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_offline_topic, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_busy, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_crash, setup, itmq_teardown),
        /* MariaDB only (run_mariadb.sh says how to kill and restart its server) */
        cmocka_unit_test_setup_teardown(test_mariadb_crash, setup, itmq_teardown),
    };
    size_t n = sizeof(tests) / sizeof(tests[0]);
    if (!use_mysql || !getenv("CQ_MARIADB_SH") || !getenv("CQ_MARIADB_BASE"))
        n--;
    return _cmocka_run_group_tests(use_mysql ? "it-mq-mariadb" : "it-mq-sqlite", tests, n, NULL,
                                   NULL);
}
