/* test_it_mgr.c - the management service with a real ZooKeeper (issue 13 acceptance; run_zk.sh
 * passes CQ_ZK_HOSTS): `chanqd --role mgr --zk-hosts` and two single-server shards (SQLite,
 * --zk-hosts, each its shard's master) reporting to it (--mgr-servers). One process set for
 * both cases:
 *  a. a permission changed through the console's JSON API (bearer token, as the CLI and the
 *     console do) is enforced by both servers without a restart: produce is refused with err 7
 *     (the time it took is printed; a 10 s safety stop only), then accepted again once granted;
 *  b. a server taken offline while the cluster SDK produces continuously: its topic's last
 *     offset stops once its drain is over (nothing admitted later is acknowledged), the SDK goes
 *     on with the other shard, every acknowledged message is read back exactly once per key,
 *     svrconfig no longer lists it; then online again (listed, produces accepted).
 * Skips without $CHANQD or ZooKeeper.
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

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO       10000
#define WAIT_MS   30000 /* safety stop of every wait */
#define MODULE    7
#define MTOKEN    "m7-token"
#define ADMIN_TOK "admin-token-it"
#define SRV_TOK   "server-secret-it"
#define NMSG      60

static const char *hosts;
static char root[64], dir[256];
static pid_t mgr_pid;
static uint16_t mgr_port, mgr_http_port;
static char mgr_addr[64];
static cq_testsrv_t s1, s2;

/* A loopback port nothing listens on now. */
static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

/* ---- the manager ---------------------------------------------------------------------------- */

static void start_mgr(void)
{
    char tok[320], adm[320], audit[320], state[320], log[320], a1[64], a2[64];
    snprintf(tok, sizeof(tok), "%s/srv.token", dir);
    snprintf(adm, sizeof(adm), "%s/admin.token", dir);
    snprintf(audit, sizeof(audit), "%s/audit.log", dir);
    snprintf(state, sizeof(state), "%s/state.json", dir);
    snprintf(log, sizeof(log), "%s/mgr.log", dir);
    write_file(tok, SRV_TOK "\n");
    write_file(adm, ADMIN_TOK "\n");
    mgr_port = free_port();
    mgr_http_port = free_port();
    snprintf(a1, sizeof(a1), "127.0.0.1:%u", mgr_port);
    snprintf(a2, sizeof(a2), "127.0.0.1:%u", mgr_http_port);
    snprintf(mgr_addr, sizeof(mgr_addr), "%s", a1);
    const char *argv[] = {getenv("CHANQD"),
                          "--role",
                          "mgr",
                          "--mgr-addr",
                          a1,
                          "--mgr-http-addr",
                          a2,
                          "--mgr-http-hosts",
                          "127.0.0.1",
                          "--mgr-token-file",
                          tok,
                          "--mgr-admin-token-file",
                          adm,
                          "--mgr-audit-log",
                          audit,
                          "--mgr-state-file",
                          state,
                          "--mgr-stale-ms",
                          "3000",
                          "--zk-hosts",
                          hosts,
                          "--zk-root",
                          root,
                          "--admin-addr",
                          "127.0.0.1:0",
                          "--log-level",
                          "debug",
                          NULL};
    mgr_pid = cq_testsrv_spawn_log(argv, log);
    assert_true(mgr_pid > 0);
    for (int waited = 0;; waited += 50) { /* until both ports take connections */
        int a = cq_raw_connect(mgr_port), b = a >= 0 ? cq_raw_connect(mgr_http_port) : -1;
        if (a >= 0)
            close(a);
        if (b >= 0) {
            close(b);
            break;
        }
        if (waited >= TMO)
            fail_msg("the manager did not listen within 10 s (log: %s)", log);
        cq_test_sleep_ms(50);
    }
}

static void stop_mgr(void)
{
    if (mgr_pid > 0) {
        kill(mgr_pid, SIGTERM);
        waitpid(mgr_pid, NULL, 0);
    }
    mgr_pid = 0;
}

/* One console API request with the admin bearer token; returns the status, body in body. */
static int api(const char *method, const char *path, const char *json, char *body, size_t cap)
{
    char req[2048];
    size_t blen = json ? strlen(json) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " ADMIN_TOK
                     "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     method, path, blen, json ? json : "");
    int status = cq_raw_http(mgr_http_port, req, (size_t)n, TMO, body, cap);
    assert_true(status > 0);
    return status;
}

static void put_module(const char *produce)
{
    char json[256], body[512];
    snprintf(json, sizeof(json),
             "{\"token\":\"" MTOKEN "\",\"produce\":%s,\"consume\":[\"orders\"],\"admin\":true}",
             produce);
    int st = api("PUT", "/api/modules/7", json, body, sizeof(body));
    if (st != 200)
        fprintf(stderr, "# PUT /api/modules/7: %d %s\n", st, body);
    assert_int_equal(st, 200);
    assert_non_null(strstr(body, "\"version\":"));
}

/* ---- the servers ------------------------------------------------------------------------------
 */

static void start_shard(cq_testsrv_t *s, const char *shard, const char *appid)
{
    char tok[320];
    snprintf(tok, sizeof(tok), "%s/srv.token", dir);
    const char *args[] = {"--zk-hosts",
                          hosts,
                          "--zk-root",
                          root,
                          "--shard",
                          shard,
                          "--zk-session-ms",
                          "4000",
                          "--mgr-servers",
                          mgr_addr,
                          "--mgr-token-file",
                          tok,
                          "--mgr-report-ms",
                          "200",
                          "--group-id",
                          "1",
                          "--appid",
                          appid,
                          NULL};
    assert_int_equal(cq_testsrv_start(s, args), 0);
    assert_int_equal(cq_testsrv_metric_wait_ge(s, "chanq_mq_cluster_may_write", 1, WAIT_MS), 1);
    assert_int_equal(cq_testsrv_metric_wait_ge(s, "chanq_mq_mgr_connected", 1, WAIT_MS), 1);
}

static chanq_mq_sync_t *connect_to(const cq_testsrv_t *s)
{
    chanq_mq_sync_t *c = NULL;
    assert_int_equal(chanq_mq_sync_connect("127.0.0.1", s->mq_port, MODULE, MTOKEN, CQ_MQ_PRODUCER,
                                           TMO, NULL, 0, &c),
                     0);
    return c;
}

/* Produces one message to orders on s (a new connection: the permissions of now). */
static int produce_on(const cq_testsrv_t *s, int64_t *ret_off)
{
    chanq_mq_sync_t *c = NULL;
    int r = chanq_mq_sync_connect("127.0.0.1", s->mq_port, MODULE, MTOKEN, CQ_MQ_PRODUCER, TMO,
                                  NULL, 0, &c);
    if (r == 0)
        r = chanq_mq_sync_produce1(c, "orders", "probe", ret_off);
    chanq_mq_sync_close(c);
    return r;
}

static int64_t last_offset(const cq_testsrv_t *s)
{
    chanq_mq_sync_t *c = connect_to(s);
    int64_t last = -1;
    assert_int_equal(chanq_mq_sync_offset(c, "orders", NULL, NULL, &last), 0);
    chanq_mq_sync_close(c);
    return last;
}

/* The servers svrconfig gives module 7 now, as "port,port". */
static void listed(char *out, size_t cap)
{
    chanq_cluster_server_t sv[8];
    size_t n = 0;
    char err[256];
    out[0] = '\0';
    if (chanq_cluster_svrconfig(mgr_addr, MODULE, MTOKEN, TMO, sv, 8, &n, err, sizeof(err)) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *colon = strrchr(sv[i].addr, ':');
        size_t k = strlen(out);
        snprintf(out + k, cap - k, "%s%s", k ? "," : "", colon ? colon + 1 : sv[i].addr);
    }
}

static void wait_listed(const char *want)
{
    char got[128];
    listed(got, sizeof(got));
    for (int waited = 0; strcmp(got, want) != 0 && waited < WAIT_MS; waited += 100) {
        cq_test_sleep_ms(100);
        listed(got, sizeof(got));
    }
    assert_string_equal(got, want);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/cqmgr%d", (int)getpid());
    snprintf(dir, sizeof(dir), "%s/cq-itmgr.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
    start_mgr();
    start_shard(&s1, "1", "101");
    start_shard(&s2, "2", "102");
    /* the module and the topic every case uses */
    put_module("[\"orders\"]");
    chanq_mq_sync_t *c = connect_to(&s1);
    assert_int_equal(chanq_mq_sync_add_topic(c, "orders"), 0);
    chanq_mq_sync_close(c);
    c = connect_to(&s2);
    for (int waited = 0; chanq_mq_sync_add_topic(c, "orders") != 0; waited += 100) {
        assert_true(waited < WAIT_MS);
        cq_test_sleep_ms(100);
    }
    chanq_mq_sync_close(c);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_testsrv_stop(&s1);
    cq_testsrv_stop(&s2);
    stop_mgr();
    if (!getenv("CQ_IT_KEEP")) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        (void)system(cmd);
    } else {
        fprintf(stderr, "# kept %s\n", dir);
    }
    return 0;
}

/* ---- a. permissions ---------------------------------------------------------------------------
 */

/* Waits until produce on s answers want; returns the ms it took from since. */
static int64_t wait_produce(const cq_testsrv_t *s, int want, int64_t since)
{
    int64_t off;
    int r = produce_on(s, &off);
    while (r != want && cq_test_mono_ms() - since < 10000) {
        cq_test_sleep_ms(5);
        r = produce_on(s, &off);
    }
    assert_int_equal(r, want);
    return cq_test_mono_ms() - since;
}

static void test_permission_enforced(void **state)
{
    (void)state;
    int64_t off;
    assert_int_equal(produce_on(&s1, &off), 0);
    assert_int_equal(produce_on(&s2, &off), 0);
    int64_t t0 = cq_test_mono_ms();
    put_module("[]"); /* no produce right any more */
    int64_t t1 = wait_produce(&s1, CQ_EACL, t0), t2 = wait_produce(&s2, CQ_EACL, t0);
    fprintf(stderr,
            "# permission revoked: enforced by shard 1 after %" PRId64
            " ms, by shard 2 after %" PRId64 " ms\n",
            t1, t2);
    /* the exact refusal: err_code 7 */
    chanq_mq_sync_t *c = connect_to(&s1);
    assert_int_equal(chanq_mq_sync_produce1(c, "orders", "x", &off), CQ_EACL);
    assert_int_equal(chanq_mq_sync_errcode(c), 7);
    chanq_mq_sync_close(c);
    t0 = cq_test_mono_ms();
    put_module("[\"orders\"]");
    t1 = wait_produce(&s1, 0, t0);
    t2 = wait_produce(&s2, 0, t0);
    fprintf(stderr,
            "# permission granted: shard 1 after %" PRId64 " ms, shard 2 after %" PRId64 " ms\n",
            t1, t2);
}

/* ---- b. offline --------------------------------------------------------------------------- */

typedef struct acked {
    int64_t seq;
    uint32_t shard;
    int64_t offset;
} acked_t;

static int sdk_refresh(void *ud, chanq_cluster_server_t *ret, size_t cap, size_t *ret_n)
{
    char err[256];
    (void)ud;
    return chanq_cluster_svrconfig(mgr_addr, MODULE, MTOKEN, TMO, ret, cap, ret_n, err,
                                   sizeof(err));
}

static int produce_one(chanq_cluster_t *k, int i, acked_t *a)
{
    char text[32];
    snprintf(text, sizeof(text), "m%d", i);
    chanq_mq_content_t m = {text, strlen(text), false, -1};
    chanq_mq_produce_t r = {"orders", &m, 1, 0, -1, -1};
    int64_t seq = chanq_cluster_next_seq(k);
    int rc = chanq_cluster_produce(k, &r, &a->offset, &a->shard);
    a->seq = seq;
    return rc;
}

/* Every message of shard s's orders after 0, counted per key of producer pid into seen[]. */
static void read_back(const cq_testsrv_t *s, int64_t pid, int *seen, size_t nseen)
{
    chanq_mq_sync_t *c = connect_to(s);
    int64_t from = 0;
    for (;;) {
        cq_mq_msg_t *resp = NULL;
        assert_int_equal(chanq_mq_sync_consume(c, "orders", from, 500, &resp), 0);
        size_t n = resp->nitems;
        for (size_t i = 0; i < n; i++) {
            const cq_mq_item_t *it = &resp->items[i];
            if (it->producer_id == pid && it->seq >= 0 && (size_t)it->seq < nseen)
                seen[it->seq]++;
            from = it->offset;
        }
        cq_mq_msg_free(resp);
        if (n == 0)
            break;
    }
    chanq_mq_sync_close(c);
}

static void test_offline_drain(void **state)
{
    (void)state;
    char body[512];
    char both[64];
    snprintf(both, sizeof(both), "%u,%u", s1.mq_port, s2.mq_port);
    wait_listed(both);
    chanq_cluster_server_t sv[8];
    size_t n = 0;
    char err[256];
    assert_int_equal(
        chanq_cluster_svrconfig(mgr_addr, MODULE, MTOKEN, TMO, sv, 8, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    chanq_cluster_opts_t o = {.refresh = sdk_refresh, .refresh_ms = 300, .recheck_ms = 60000};
    chanq_cluster_t *k = chanq_cluster_sync_new(sv, n, MODULE, MTOKEN, CQ_MQ_PRODUCER, TMO, &o);
    assert_non_null(k);
    static acked_t acks[NMSG];
    int nacked = 0, after_drain_on_1 = 0;
    int64_t frozen = -1;
    for (int i = 0; i < NMSG; i++) {
        if (i == NMSG / 3) {
            assert_int_equal(api("POST", "/api/servers/101/offline", "{}", body, sizeof(body)),
                             200);
        }
        if (i > NMSG / 3 && frozen < 0) {
            int64_t off;
            /* the drain is over once a new produce is refused there (19) */
            if (produce_on(&s1, &off) == CQ_ESRVOFFLINE)
                frozen = last_offset(&s1);
        }
        chanq_cluster_tick(k);
        int rc = produce_one(k, i, &acks[nacked]);
        assert_int_equal(rc, 0);
        if (frozen >= 0 && acks[nacked].shard == 1)
            after_drain_on_1++;
        nacked++;
    }
    int on1 = 0;
    for (int i = 0; i < nacked; i++)
        on1 += acks[i].shard == 1;
    fprintf(stderr,
            "# %d acknowledged: %d on shard 1 (its last offset froze at %" PRId64 "), %d on 2\n",
            nacked, on1, frozen, nacked - on1);
    assert_true(on1 > 0);     /* the SDK used shard 1 before it went offline */
    assert_true(frozen >= 0); /* the offline command reached the server */
    assert_int_equal(after_drain_on_1, 0);
    assert_int_equal(last_offset(&s1), frozen); /* nothing acknowledged there after the drain */
    /* svrconfig no longer lists it */
    char only2[16];
    snprintf(only2, sizeof(only2), "%u", s2.mq_port);
    wait_listed(only2);
    /* every acknowledged message exactly once, by its key */
    static int seen[NMSG];
    memset(seen, 0, sizeof(seen));
    int64_t pid = chanq_cluster_producer_id(k);
    read_back(&s1, pid, seen, NMSG);
    read_back(&s2, pid, seen, NMSG);
    for (int i = 0; i < nacked; i++) {
        if (seen[acks[i].seq] != 1)
            fprintf(stderr, "# seq %" PRId64 " read %d times\n", acks[i].seq, seen[acks[i].seq]);
        assert_int_equal(seen[acks[i].seq], 1);
    }
    chanq_cluster_free(k);
    /* online again: listed, and produces are taken */
    assert_int_equal(api("POST", "/api/servers/101/online", "{}", body, sizeof(body)), 200);
    wait_listed(both);
    int64_t off;
    assert_int_equal(produce_on(&s1, &off), 0);
    assert_true(off > frozen);
}

/* `chanq --mgr` produces through the managers' list; a wrong token is refused by them. */
static void test_cli_mgr(void **state)
{
    (void)state;
    const char *cli = getenv("CHANQ_CLI");
    if (!cli)
        skip();
    char out[400], cmd[1400];
    snprintf(out, sizeof(out), "%s/cli.out", dir);
    snprintf(cmd, sizeof(cmd),
             "printf 'c0\\nc1\\n' | %s --mgr %s --module 7 --token " MTOKEN
             " produce orders > %s 2>&1",
             cli, mgr_addr, out);
    assert_int_equal(system(cmd), 0);
    FILE *fp = fopen(out, "r");
    assert_non_null(fp);
    unsigned shard[2] = {0, 0};
    long long off[2] = {0, 0};
    assert_int_equal(fscanf(fp, "%u\t%lld\n%u\t%lld\n", &shard[0], &off[0], &shard[1], &off[1]), 4);
    fclose(fp);
    for (int i = 0; i < 2; i++) {
        assert_true(shard[i] == 1 || shard[i] == 2);
        assert_true(off[i] > 0);
    }
    snprintf(cmd, sizeof(cmd),
             "echo x | %s --mgr %s --module 7 --token wrong produce orders > %s 2>&1", cli,
             mgr_addr, out);
    assert_int_equal(WEXITSTATUS(system(cmd)), 1);
    fp = fopen(out, "r");
    assert_non_null(fp);
    char got[512];
    size_t k = fread(got, 1, sizeof(got) - 1, fp);
    got[k] = '\0';
    fclose(fp);
    assert_non_null(strstr(got, "chanq: --mgr: manager 127.0.0.1:"));
}

int main(void)
{
    hosts = getenv("CQ_ZK_HOSTS");
    if (!hosts || !getenv("CHANQD")) {
        printf("1..0 # SKIP needs CQ_ZK_HOSTS and CHANQD\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permission_enforced),
        cmocka_unit_test(test_offline_drain),
        cmocka_unit_test(test_cli_mgr),
    };
    return cmocka_run_group_tests_name("it-mgr", tests, setup, teardown);
}
