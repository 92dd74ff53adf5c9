/* test_it_mqcluster.c - the cluster client (libchanq chanq_cluster.h) and `chanq --servers`
 * against two real single-node chanqd (shards 1 and 2, each on its own SQLite store, on fixed
 * loopback ports so that a restart comes back at the same address): produce starts at the
 * lowest server, fails over when it is SIGKILLed, caches while no server is up and flushes in
 * order when one restarts; the consumer reads both shards, skipping the one that is down.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_cluster.h"
#include "chanq_mq_sync.h"
#include "cq_testsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO   3000
#define TOPIC "ct"

static cq_testsrv_t sa, sb;
static uint16_t pa, pb;
static char list[128];

/* A port of 26000-28999 nobody listens on now. */
static uint16_t free_port(uint16_t after)
{
    for (uint16_t p = (uint16_t)(after ? after + 1 : 26000 + getpid() % 3000); p < 29000; p++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int r = bind(fd, (struct sockaddr *)&a, sizeof(a));
        close(fd);
        if (r == 0)
            return p;
    }
    fail_msg("no free port in 26000-28999");
    return 0;
}

static void start(cq_testsrv_t *s, uint16_t port)
{
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    const char *args[] = {"--mq-addr", addr, NULL};
    int r = cq_testsrv_start(s, args);
    if (r < 0) {
        char *log = cq_testsrv_log(s);
        fprintf(stderr, "# chanqd did not start (%d):\n%s\n", r, log ? log : "");
        free(log);
    }
    assert_int_equal(r, 0);
    assert_int_equal(s->mq_port, port);
}

static chanq_mq_sync_t *open_direct(uint16_t port)
{
    chanq_mq_sync_t *s = NULL;
    assert_int_equal(
        chanq_mq_sync_connect("127.0.0.1", port, 1, "", CQ_MQ_CONSUMER, TMO, NULL, 0, &s), 0);
    chanq_mq_sync_set_timeout(s, TMO);
    return s;
}

/* The contents stored on one server, joined with ",". */
static void contents(uint16_t port, char *out, size_t cap)
{
    chanq_mq_sync_t *s = open_direct(port);
    cq_mq_msg_t *m = NULL;
    assert_int_equal(chanq_mq_sync_consume(s, TOPIC, 0, 100, &m), 0);
    out[0] = '\0';
    for (size_t i = 0; i < m->nitems; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", m->items[i].content);
    cq_mq_msg_free(m);
    chanq_mq_sync_close(s);
}

static void add_topic(uint16_t port)
{
    chanq_mq_sync_t *s = open_direct(port);
    assert_int_equal(chanq_mq_sync_add_topic(s, TOPIC), 0);
    chanq_mq_sync_close(s);
}

static int setup(void **state)
{
    (void)state;
    memset(&sa, 0, sizeof(sa));
    memset(&sb, 0, sizeof(sb));
    pa = free_port(0);
    pb = free_port(pa);
    start(&sa, pa);
    start(&sb, pb);
    add_topic(pa);
    add_topic(pb);
    snprintf(list, sizeof(list), "1/127.0.0.1:%u,2/127.0.0.1:%u", pa, pb);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_testsrv_stop(&sa);
    cq_testsrv_stop(&sb);
    return 0;
}

static int produce(chanq_cluster_t *c, const char *text, uint32_t *ret_shard)
{
    chanq_mq_content_t m = {text, strlen(text), false, -1};
    chanq_mq_produce_t r = {TOPIC, &m, 1, 0, -1, -1};
    int64_t off = 0;
    *ret_shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
    return chanq_cluster_produce(c, &r, &off, ret_shard);
}

typedef struct flushed {
    int n;
    int64_t seq[8];
    uint32_t shard[8];
    int err[8];
} flushed_t;

static void on_cached(void *ud, const char *topic, int64_t pid, int64_t first_seq, size_t n,
                      int err, uint32_t shard, const int64_t *offsets)
{
    (void)topic, (void)pid, (void)n, (void)offsets;
    flushed_t *f = ud;
    assert_true(f->n < 8);
    f->seq[f->n] = first_seq;
    f->shard[f->n] = shard;
    f->err[f->n++] = err;
}

static chanq_cluster_t *cluster(uint32_t type, chanq_cluster_policy_t policy, flushed_t *f)
{
    chanq_cluster_server_t sv[2];
    size_t n = 0;
    assert_int_equal(chanq_cluster_parse_servers(list, sv, 2, &n), 0);
    chanq_cluster_opts_t o = {.policy = policy,
                              .reconnect_ms = 100,
                              .producer_id = 4242,
                              .on_cached = on_cached,
                              .cached_ud = f};
    chanq_cluster_t *c = chanq_cluster_sync_new(sv, n, 1, "", type, TMO, &o);
    assert_non_null(c);
    return c;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_failover_and_cache(void **state)
{
    (void)state;
    flushed_t f = {0};
    chanq_cluster_t *c = cluster(CQ_MQ_PRODUCER, CHANQ_CLUSTER_CACHE, &f);
    uint32_t shard = 0;
    /* Round-robin start: the lowest server takes everything while it is up. */
    for (int i = 0; i < 3; i++) {
        char m[8];
        snprintf(m, sizeof(m), "a%d", i);
        assert_int_equal(produce(c, m, &shard), 0);
        assert_int_equal(shard, 1);
    }
    char got[256];
    contents(pa, got, sizeof(got));
    assert_string_equal(got, "a0,a1,a2");
    contents(pb, got, sizeof(got));
    assert_string_equal(got, "");

    /* SIGKILL shard 1: the next produce fails over to shard 2. */
    assert_true(cq_testsrv_kill(&sa, SIGKILL) >= 0);
    assert_int_equal(produce(c, "b0", &shard), 0);
    assert_int_equal(shard, 2);
    assert_int_equal(produce(c, "b1", &shard), 0);
    assert_int_equal(shard, 2);
    contents(pb, got, sizeof(got));
    assert_string_equal(got, "b0,b1");

    /* Nothing up: cached, in order. */
    assert_true(cq_testsrv_kill(&sb, SIGKILL) >= 0);
    assert_int_equal(produce(c, "c0", &shard), CHANQ_CLUSTER_CACHED);
    assert_int_equal(produce(c, "c1", &shard), CHANQ_CLUSTER_CACHED);
    assert_int_equal(chanq_cluster_cached(c, NULL), 2);
    assert_int_equal(chanq_cluster_next_seq(c), 7);

    /* Shard 1 restarts on its data: the cache goes there, in order, with its keys. */
    start(&sa, pa);
    int64_t t0 = 0;
    for (; chanq_cluster_tick(c) > 0; t0 += 50) {
        assert_true(t0 < 10000); /* hang guard */
        sleep_ms(50);
    }
    assert_int_equal(f.n, 2);
    assert_int_equal(f.err[0], 0);
    assert_int_equal(f.err[1], 0);
    assert_int_equal(f.seq[0], 5);
    assert_int_equal(f.seq[1], 6);
    assert_int_equal(f.shard[0], 1);
    contents(pa, got, sizeof(got));
    assert_string_equal(got, "a0,a1,a2,c0,c1");
    assert_int_equal(produce(c, "d0", &shard), 0);
    assert_int_equal(shard, 1);
    chanq_cluster_free(c);

    /* The consumer reads both shards; shard 2 is down, then back. */
    chanq_cluster_t *k = cluster(CQ_MQ_CONSUMER, CHANQ_CLUSTER_DROP, NULL);
    chanq_cluster_consumer_t *cons = chanq_cluster_consumer_new(k, TOPIC, false);
    chanq_cluster_batch_t b = {0};
    assert_int_equal(chanq_cluster_consume(cons, 0, &b), 0);
    assert_int_equal(b.n, 6);
    for (size_t i = 0; i < b.n; i++)
        assert_int_equal(b.items[i].shard, 1);
    assert_string_equal(b.items[5].content, "d0");
#ifdef CHANQ_MQ_HAVE_SHARD /* consumed items carry their (producer_id, seq) */
    const int64_t seqs[] = {0, 1, 2, 5, 6, 7};
    for (size_t i = 0; i < b.n; i++) {
        assert_int_equal(b.items[i].producer_id, 4242);
        assert_int_equal(b.items[i].seq, seqs[i]);
    }
#endif
    chanq_cluster_batch_clear(&b);
    start(&sb, pb);
    for (t0 = 0; b.n == 0; t0 += 50) {
        assert_true(t0 < 10000);
        sleep_ms(50);
        assert_int_equal(chanq_cluster_consume(cons, 0, &b), 0);
    }
    assert_int_equal(b.n, 2);
    assert_int_equal(b.items[0].shard, 2);
    assert_string_equal(b.items[0].content, "b0");
    assert_string_equal(b.items[1].content, "b1");
    chanq_cluster_batch_clear(&b);
#ifdef CHANQ_MQ_HAVE_SHARD
    /* A cross-shard duplicate (d0's key, as if its answer from shard 1 had been lost and the
     * SDK had moved it: shard 2's last seq of 4242 is 4, so 7 is in order there) is dropped by
     * the dedupe set; b0, b1 (seqs 3, 4) are not. */
    chanq_mq_sync_t *s = open_direct(pb);
    chanq_mq_content_t m = {"d0", 2, false, -1};
    chanq_mq_produce_t r = {TOPIC, &m, 1, 4242, 7, -1};
    assert_int_equal(chanq_mq_sync_produce(s, &r, NULL), 0);
    chanq_mq_sync_close(s);
    chanq_cluster_consumer_t *all = chanq_cluster_consumer_new(k, TOPIC, false);
    chanq_cluster_dedupe_t *d = chanq_cluster_dedupe_new(0);
    assert_int_equal(chanq_cluster_consume(all, 0, &b), 0);
    assert_int_equal(b.n, 9);
    char kept[128] = "";
    for (size_t i = 0; i < b.n; i++)
        if (!chanq_cluster_dedupe_seen(d, b.items[i].producer_id, b.items[i].seq))
            snprintf(kept + strlen(kept), sizeof(kept) - strlen(kept), "%s%s", i ? "," : "",
                     b.items[i].content);
    assert_string_equal(kept, "a0,a1,a2,c0,c1,d0,b0,b1");
    chanq_cluster_batch_clear(&b);
    chanq_cluster_dedupe_free(d);
    chanq_cluster_consumer_free(all);
#endif
    chanq_cluster_consumer_free(cons);
    chanq_cluster_free(k);
}

static void test_drop(void **state)
{
    (void)state;
    chanq_cluster_t *c = cluster(CQ_MQ_PRODUCER, CHANQ_CLUSTER_DROP, NULL);
    assert_true(cq_testsrv_kill(&sa, SIGKILL) >= 0);
    assert_true(cq_testsrv_kill(&sb, SIGKILL) >= 0);
    uint32_t shard = 0;
    assert_int_equal(produce(c, "x", &shard), -ECONNREFUSED);
    assert_int_equal(chanq_cluster_cached(c, NULL), 0);
    chanq_cluster_free(c);
}

/* Runs the CLI through the shell with stdin from `input`; its stdout into out. */
static int run_cli(const char *input, const char *args, char *out, size_t cap)
{
    const char *cli = getenv("CHANQ_CLI");
    char path[400], cmd[1024];
    snprintf(path, sizeof(path), "%s/cli.out", sa.dir);
    snprintf(cmd, sizeof(cmd), "printf '%s' | %s --timeout %d %s > %s", input, cli, TMO, args,
             path);
    int st = system(cmd);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, cap - 1, fp);
    out[n] = '\0';
    fclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void **state)
{
    (void)state;
    if (!getenv("CHANQ_CLI"))
        skip();
    char args[256], out[512];
    snprintf(args, sizeof(args), "--servers %s produce " TOPIC, list);
    assert_int_equal(run_cli("p0\\np1\\n", args, out, sizeof(out)), 0);
    assert_string_equal(out, "1\t1\n1\t2\n");
    assert_true(cq_testsrv_kill(&sa, SIGKILL) >= 0);
    assert_int_equal(run_cli("p2\\n", args, out, sizeof(out)), 0);
    assert_string_equal(out, "2\t1\n");
    snprintf(args, sizeof(args), "--servers %s consume " TOPIC, list);
    start(&sa, pa);
    assert_int_equal(run_cli("", args, out, sizeof(out)), 0);
    assert_string_equal(out, "1\t1\tp0\n1\t2\tp1\n2\t1\tp2\n");
    /* Both down, drop: exit 1; cache: exit 1 after --timeout with the message still cached. */
    assert_true(cq_testsrv_kill(&sa, SIGKILL) >= 0);
    assert_true(cq_testsrv_kill(&sb, SIGKILL) >= 0);
    snprintf(args, sizeof(args), "--servers %s produce " TOPIC, list);
    assert_int_equal(run_cli("p3\\n", args, out, sizeof(out)), 1);
    assert_string_equal(out, "");
}

int main(void)
{
    if (!getenv("CHANQD")) {
        printf("1..0 # SKIP CHANQD is not set\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failover_and_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
