/* test_it_mqslave.c - the standby read policy (--slave-reads, doc/cluster.md "Standby reads") on
 * a real ZooKeeper ensemble (run_zk.sh passes CQ_ZK_HOSTS): three chanqd of shard 0 on SQLite
 * (roles only, no replication, so each server's rows are its own and tell who answered). Each
 * first runs alone and stores one row of its own ("a1" "a2" on A, "b1" on B, "c1" on C), then
 * joins the cluster: A first (master), B with --slave-reads off, C with the default (on).
 *
 *   - B answers consume, offset, topics and watch err_code 20 read_on_master, err_msg ending
 *     "master=127.0.0.1:<A's port>"; its HTTP API answers 503 with the same body; a commit
 *     stays not_master (18);
 *   - libchanq's cluster consumer given only B follows the answer and reads A's rows;
 *   - C serves its own rows as a slave (on: today's behaviour);
 *   - A SIGKILLed (by PID): once its member node is gone the shard's master is no longer A, and
 *     B serves reads (its own row).
 * Waits poll for the condition (bounded as a safety stop only).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_cluster.h"
#include "chanq_mq_sync.h"
#include "cq_mq.h"
#include "cq_testsrv.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TMO     5000
#define WAIT_MS 60000
#define TOPIC   "sr"

static const char *hosts;
static char root[64];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static chanq_mq_sync_t *connect_to(const cq_testsrv_t *s, uint32_t type)
{
    chanq_mq_sync_t *c = NULL;
    assert_int_equal(chanq_mq_sync_connect("127.0.0.1", s->mq_port, 1, "", type, TMO, NULL, 0, &c),
                     0);
    chanq_mq_sync_set_timeout(c, TMO);
    return c;
}

/* Runs s alone (its own store), stores rows of its own in TOPIC, and stops it (the store stays
 * for the restart). */
static void seed_rows(cq_testsrv_t *s, const char *const *rows, size_t n)
{
    const char *args[] = {NULL};
    assert_int_equal(cq_testsrv_start(s, args), 0);
    chanq_mq_sync_t *c = connect_to(s, CQ_MQ_PRODUCER);
    assert_int_equal(chanq_mq_sync_add_topic(c, TOPIC), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(chanq_mq_sync_produce1(c, TOPIC, rows[i], NULL), 0);
    chanq_mq_sync_close(c);
    assert_true(cq_testsrv_kill(s, SIGTERM) >= 0);
}

/* Restarts s on its store as a member of shard 0, with --slave-reads reads. */
static void join(cq_testsrv_t *s, const char *reads)
{
    const char *args[] = {"--zk-hosts",      hosts,  "--zk-root",     root,  "--shard", "0",
                          "--zk-session-ms", "4000", "--slave-reads", reads, NULL};
    assert_int_equal(cq_testsrv_start(s, args), 0);
}

/* The contents s's consume of TOPIC from offset 0 returns, joined with ","; the call's result. */
static int contents(chanq_mq_sync_t *c, char *out, size_t cap)
{
    cq_mq_msg_t *m = NULL;
    out[0] = '\0';
    int r = chanq_mq_sync_consume(c, TOPIC, 0, 0, &m);
    size_t n = 0;
    for (size_t i = 0; r == 0 && i < m->nitems; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%.*s", i ? "," : "", (int)m->items[i].len,
                              m->items[i].content);
    cq_mq_msg_free(m);
    return r;
}

static void test_slave_reads(void **state)
{
    (void)state;
    if (!getenv("CHANQD"))
        skip();
    snprintf(root, sizeof(root), "/cqslave%d", (int)getpid());
    cq_testsrv_t a = {0}, b = {0}, c = {0};
    seed_rows(&a, (const char *[]){"a1", "a2"}, 2);
    seed_rows(&b, (const char *[]){"b1"}, 1);
    seed_rows(&c, (const char *[]){"c1"}, 1);
    join(&a, "off");
    assert_int_equal(cq_testsrv_metric_wait_ge(&a, "chanq_mq_cluster_may_write", 1, WAIT_MS), 1);
    char master[64], why[256];
    snprintf(master, sizeof(master), "master 127.0.0.1:%u", a.mq_port);
    join(&b, "off");
    join(&c, "on");
    assert_true(cq_testsrv_log_wait(&b, master, WAIT_MS));
    assert_true(cq_testsrv_log_wait(&c, master, WAIT_MS));

    /* B refuses every read, naming A */
    chanq_mq_sync_t *cb = connect_to(&b, CQ_MQ_CONSUMER);
    char got[256];
    snprintf(why, sizeof(why),
             "consume: this server is a standby of shard 0 and serves no reads while "
             "the shard has a master (--slave-reads off): read on master=127.0.0.1:%u",
             a.mq_port);
    assert_int_equal(contents(cb, got, sizeof(got)), CQ_EREADMASTER);
    assert_int_equal(chanq_mq_sync_errcode(cb), CQ_MQ_ERR_READ_ON_MASTER);
    assert_string_equal(chanq_mq_sync_errmsg(cb), why);
    assert_int_equal(chanq_mq_sync_offset(cb, TOPIC, NULL, NULL, NULL), CQ_EREADMASTER);
    cq_mq_msg_t *m = NULL;
    assert_int_equal(chanq_mq_sync_topics(cb, &m), CQ_EREADMASTER);
    assert_int_equal(chanq_mq_sync_watch(cb, TOPIC), CQ_EREADMASTER);
    assert_int_equal(chanq_mq_sync_commit(cb, TOPIC, 1), CQ_ENOTMASTER); /* writes as before */
    char body[1024], req[256], want[512];
    int n = snprintf(req, sizeof(req),
                     "GET /v1/topics/" TOPIC "/messages?offset=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Connection: close\r\n\r\n");
    assert_int_equal(cq_raw_http(b.mq_http_port, req, (size_t)n, TMO, body, sizeof(body)), 503);
    snprintf(want, sizeof(want), "{\"err_code\":20,\"err_msg\":\"%s\"}", why + strlen("consume: "));
    assert_string_equal(body, want);

    /* libchanq's consumer, given only B, follows it to A and reads A's rows */
    chanq_cluster_server_t sv[1];
    size_t nsv = 0;
    char list[64];
    snprintf(list, sizeof(list), "0/127.0.0.1:%u", b.mq_port);
    assert_int_equal(chanq_cluster_parse_servers(list, sv, 1, &nsv), 0);
    chanq_cluster_t *cl = chanq_cluster_sync_new(sv, nsv, 1, "", CQ_MQ_CONSUMER, TMO, NULL);
    assert_non_null(cl);
    chanq_cluster_consumer_t *k = chanq_cluster_consumer_new(cl, TOPIC, false);
    chanq_cluster_batch_t batch = {0};
    assert_int_equal(chanq_cluster_consume(k, 0, &batch), 0);
    assert_int_equal(batch.n, 2);
    assert_string_equal(batch.items[0].content, "a1");
    assert_string_equal(batch.items[1].content, "a2");
    assert_int_equal(batch.items[1].offset, 2);
    chanq_cluster_batch_clear(&batch);
    size_t nl = 0;
    const chanq_cluster_server_t *v = chanq_cluster_servers(cl, &nl);
    assert_int_equal(nl, 2);
    snprintf(list, sizeof(list), "127.0.0.1:%u", a.mq_port);
    assert_string_equal(v[1].addr, list);
    chanq_cluster_consumer_free(k);
    chanq_cluster_free(cl);

    /* C (on) serves its own rows as a slave */
    chanq_mq_sync_t *cc = connect_to(&c, CQ_MQ_CONSUMER);
    assert_int_equal(contents(cc, got, sizeof(got)), 0);
    assert_string_equal(got, "c1");
    chanq_mq_sync_close(cc);

    /* A killed: once ZooKeeper drops its node the shard's master is not A, and B serves */
    assert_true(cq_testsrv_kill(&a, SIGKILL) >= 0);
    int r = CQ_EREADMASTER;
    for (int waited = 0; r == CQ_EREADMASTER && waited < WAIT_MS; waited += 200) {
        sleep_ms(200);
        r = contents(cb, got, sizeof(got));
    }
    assert_int_equal(r, 0);
    assert_string_equal(got, "b1");
    chanq_mq_sync_close(cb);
    cq_testsrv_stop(&c);
    cq_testsrv_stop(&b);
    cq_testsrv_stop(&a);
}

int main(void)
{
    hosts = getenv("CQ_ZK_HOSTS");
    if (!hosts) {
        printf("1..0 # SKIP CQ_ZK_HOSTS is not set (run through run_zk.sh)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slave_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
