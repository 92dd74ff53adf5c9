/* test_it_mqtopics.c - add-topic and online/offline apply cluster-wide (issue 11,
 * doc/cluster.md "Topics"), on a real ZooKeeper ensemble (run_zk.sh passes CQ_ZK_HOSTS): two
 * single-server shards (chanqd --zk-hosts --shard 1 / --shard 2, SQLite: roles only, each its
 * own master). A topic added on shard 1 while shard 2 is not running exists on shard 2 once it
 * starts; one added on shard 2 appears on shard 1; one set offline through shard 1's HTTP API is
 * offline on shard 2, and online again likewise. Waits are bounded (a safety stop only).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_mq_sync.h"
#include "cq_mq.h"
#include "cq_testsrv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TMO     10000
#define WAIT_MS 30000 /* the registry's write, its watch and the apply: well under a second */

static const char *hosts;
static char root[64];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts a chanqd for shard in the cluster and waits until it is its shard's master. */
static void start_shard(cq_testsrv_t *s, const char *shard)
{
    const char *args[] = {"--zk-hosts",      hosts,  "--zk-root", root, "--shard", shard,
                          "--zk-session-ms", "4000", NULL};
    assert_int_equal(cq_testsrv_start(s, args), 0);
    assert_int_equal(cq_testsrv_metric_wait_ge(s, "chanq_mq_cluster_may_write", 1, WAIT_MS), 1);
}

static chanq_mq_sync_t *connect_to(const cq_testsrv_t *s)
{
    chanq_mq_sync_t *c = NULL;
    assert_int_equal(
        chanq_mq_sync_connect("127.0.0.1", s->mq_port, 1, "", CQ_MQ_PRODUCER, TMO, NULL, 0, &c), 0);
    return c;
}

/* The topic's state on c's server: -1 unknown, 0 offline, 1 online. */
static int topic_state(chanq_mq_sync_t *c, const char *topic)
{
    cq_mq_msg_t *resp = NULL;
    assert_int_equal(chanq_mq_sync_topics(c, &resp), 0);
    int st = -1;
    for (size_t i = 0; i < resp->ntopic_infos; i++)
        if (strcmp(resp->topic_infos[i].topic, topic) == 0)
            st = resp->topic_infos[i].online;
    cq_mq_msg_free(resp);
    return st;
}

/* Waits (bounded) until topic is in state want on c's server; returns the last state seen. */
static int wait_state(chanq_mq_sync_t *c, const char *topic, int want)
{
    int st = topic_state(c, topic);
    for (int waited = 0; st != want && waited < WAIT_MS; waited += 100) {
        sleep_ms(100);
        st = topic_state(c, topic);
    }
    return st;
}

/* POST path on s's HTTP API (loopback, no permissions file: allowed); returns the status and
 * the body in body[0..cap). */
static int http_post(const cq_testsrv_t *s, const char *path, char *body, size_t cap)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: 0\r\n"
                     "Connection: close\r\n\r\n",
                     path);
    int status = cq_raw_http(s->mq_http_port, req, (size_t)n, TMO, body, cap);
    assert_true(status > 0);
    return status;
}

static void test_topics_cluster_wide(void **state)
{
    (void)state;
    if (!getenv("CHANQD"))
        skip();
    snprintf(root, sizeof(root), "/cqtopics%d", (int)getpid());
    cq_testsrv_t s1 = {0}, s2 = {0};
    start_shard(&s1, "1");
    chanq_mq_sync_t *c1 = connect_to(&s1);
    /* added while shard 2 has no server: shard 2 creates it when it starts */
    assert_int_equal(chanq_mq_sync_add_topic(c1, "early"), 0);
    start_shard(&s2, "2");
    chanq_mq_sync_t *c2 = connect_to(&s2);
    assert_int_equal(wait_state(c2, "early", 1), 1);
    /* added on shard 2 while both run */
    assert_int_equal(chanq_mq_sync_add_topic(c2, "late"), 0);
    assert_int_equal(wait_state(c1, "late", 1), 1);
    /* it is a real topic on shard 1: produce takes it there */
    int64_t off = 0;
    assert_int_equal(chanq_mq_sync_produce1(c1, "late", "x", &off), 0);
    assert_int_equal(off, 1);
    /* offline through shard 1's HTTP API: offline on shard 2; then online again */
    char body[512];
    assert_int_equal(http_post(&s1, "/v1/topics/early/offline", body, sizeof(body)), 200);
    assert_string_equal(body, "{\"topic\":\"early\",\"online\":false}");
    assert_int_equal(wait_state(c2, "early", 0), 0);
    assert_int_equal(http_post(&s2, "/v1/topics/early/online", body, sizeof(body)), 200);
    assert_int_equal(wait_state(c1, "early", 1), 1);
    assert_int_equal(topic_state(c2, "early"), 1);
    chanq_mq_sync_close(c1);
    chanq_mq_sync_close(c2);
    /* a clean exit (ASan builds: no leak) with the registry's session open */
    assert_int_equal(cq_testsrv_stop(&s2), 0);
    assert_int_equal(cq_testsrv_stop(&s1), 0);
}

int main(void)
{
    hosts = getenv("CQ_ZK_HOSTS");
    if (!hosts) {
        printf("1..0 # SKIP CQ_ZK_HOSTS is not set (run through run_zk.sh)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topics_cluster_wide),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
