/* test_it_relay_mgr.c - the manager lists relay nodes (issue 23, doc/mgr.md "Relay nodes in
 * svrconfig"): a real `chanqd --role mgr` and three chanqd relay nodes over real nats-server and
 * ZooKeeper (run_nats.sh, run_zk.sh: CQ_NATS_URLS, CQ_ZK_HOSTS), each reporting to the manager
 * through its MQ port (the default; cq_testsrv binds it to 127.0.0.1:0).
 *  - svrconfig's relay_nodes (chanq_cluster_relay_nodes) lists exactly nodes 1, 2 and 3 of the
 *    relay with the client addresses each bound (tcp, ws, kcp; no wss), and svrconfig's servers
 *    none of them (their MQ ports are no shard's);
 *  - /api/state shows each node with its links up and GLOBAL's home marked;
 *  - node 3 SIGKILLed: once its last report is older than --mgr-stale-ms, svrconfig lists
 *    exactly nodes 1 and 2 (the time it took is printed, never asserted).
 * Skips without $CHANQD, nats-server or ZooKeeper.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_cluster.h"
#include "cq_testsrv.h"
#include "it_mgr.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES     3
#define TMO       5000
#define WAIT_MS   30000 /* safety stop of every wait */
#define STALE_MS  "1500"
#define MODULE    7
#define MTOKEN    "m7-token"
#define ADMIN_TOK "admin-token-it"
#define SRV_TOK   "server-secret-it"

static char relay[32];
static it_mgr_t mgr;
static cq_testsrv_t nodes[NODES + 1];

/* The manager, with module 7 in its state file and a short --mgr-stale-ms. */
static void start_mgr(void)
{
    static const char *const extra[] = {"--mgr-stale-ms", STALE_MS, NULL};
    assert_int_equal(
        it_mgr_start(&mgr, "relaymgr", ADMIN_TOK, SRV_TOK,
                     "{\"version\":1,\"modules\":{\"7\":{\"token\":\"" MTOKEN
                     "\",\"produce\":[\"*\"],\"consume\":[\"*\"],\"admin\":false}},\"topics\":{},"
                     "\"offline\":[],\"groups\":{}}",
                     extra),
        0);
}

/* Relay node n, reporting to the manager every 200 ms. */
static void start_node(int n)
{
    char id[8], tok[320];
    snprintf(id, sizeof(id), "%d", n);
    it_mgr_path(&mgr, "srv.token", tok, sizeof(tok));
    const char *args[] = {"--ws-addr",
                          "127.0.0.1:0",
                          "--kcp-addr",
                          "127.0.0.1:0",
                          "--mq-http-addr",
                          "",
                          "--relay-nats",
                          getenv("CQ_NATS_URLS"),
                          "--relay-zk-hosts",
                          getenv("CQ_ZK_HOSTS"),
                          "--relay-cluster",
                          relay,
                          "--relay-node-id",
                          id,
                          "--zk-session-ms",
                          "2000",
                          "--mgr-servers",
                          mgr.addr,
                          "--mgr-token-file",
                          tok,
                          "--mgr-report-ms",
                          "200",
                          NULL};
    int r = cq_testsrv_start(&nodes[n], args);
    if (r < 0) {
        char *log = cq_testsrv_log(&nodes[n]);
        print_error("node %d did not start (%d); log:\n%s\n", n, r, log ? log : "(none)");
        free(log);
    }
    assert_int_equal(r, 0);
}

/* The relay nodes svrconfig lists now, as "N tcp ws wss kcp; ..." (relay name checked). */
static void listed(char *out, size_t cap)
{
    chanq_cluster_relay_node_t rn[8];
    size_t n = 0;
    char err[256] = "";
    int r = chanq_cluster_relay_nodes(mgr.addr, MODULE, MTOKEN, TMO, rn, 8, &n, err, sizeof(err));
    if (r < 0)
        fail_msg("svrconfig: %d %s", r, err);
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && at < cap; i++) {
        assert_string_equal(rn[i].cluster, relay);
        at += (size_t)snprintf(out + at, cap - at, "%s%u %s %s %s %s", i ? "; " : "", rn[i].node,
                               rn[i].tcp, rn[i].ws, rn[i].wss[0] ? rn[i].wss : "-", rn[i].kcp);
    }
}

/* What node n's entry must be: the addresses it bound. */
static size_t expected(int n, char *out, size_t cap)
{
    const cq_testsrv_t *s = &nodes[n];
    return (size_t)snprintf(out, cap, "%d 127.0.0.1:%u 127.0.0.1:%u - 127.0.0.1:%u", n,
                            s->client_port, s->ws_port, s->kcp_port);
}

/* The entries of nodes ns[0..k), as listed() writes them. */
static void expect_nodes(char *out, size_t cap, const int *ns, size_t k)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < k && at < cap; i++) {
        if (i)
            at += (size_t)snprintf(out + at, cap - at, "; ");
        at += expected(ns[i], out + at, cap - at);
    }
}

/* Waits until svrconfig lists exactly want (a safety stop only); returns the ms it took. */
static int64_t wait_listed(const char *want)
{
    char got[1024];
    int64_t t0 = cq_test_mono_ms();
    for (;;) {
        listed(got, sizeof(got));
        if (strcmp(got, want) == 0)
            return cq_test_mono_ms() - t0;
        if (cq_test_mono_ms() - t0 > WAIT_MS)
            fail_msg("svrconfig lists\n  %s\nnot\n  %s", got, want);
        cq_test_sleep_ms(50);
    }
}

static int api_state(char *body, size_t cap)
{
    return it_mgr_api(&mgr, ADMIN_TOK, "GET", "/api/state", NULL, body, cap);
}

static void test_relay_nodes_listed(void **state)
{
    (void)state;
    start_mgr();
    for (int n = 1; n <= NODES; n++)
        start_node(n);
    for (int n = 1; n <= NODES; n++)
        assert_int_equal(
            cq_testsrv_metric_wait_ge(&nodes[n], "chanq_relay_peers_up", NODES - 1, WAIT_MS),
            NODES - 1);
    char want[1024];
    expect_nodes(want, sizeof(want), (const int[]){1, 2, 3}, 3);
    wait_listed(want);

    /* their MQ ports are no durable-topic servers */
    chanq_cluster_server_t sv[8];
    size_t ns = 9;
    char err[256];
    assert_int_equal(
        chanq_cluster_svrconfig(mgr.addr, MODULE, MTOKEN, TMO, sv, 8, &ns, err, sizeof(err)), 0);
    assert_int_equal(ns, 0);

    /* the console's view: node 1 is GLOBAL's home (it started first) and its links are up once
     * a report after the HELLOs came */
    static char body[1 << 16];
    for (int64_t t0 = cq_test_mono_ms();; cq_test_sleep_ms(50)) {
        assert_int_equal(api_state(body, sizeof(body)), 200);
        if (strstr(body, "\"links\":[{\"peer\":2,\"up\":true") &&
            strstr(body, "{\"peer\":3,\"up\":true"))
            break;
        if (cq_test_mono_ms() - t0 > WAIT_MS)
            fail_msg("/api/state: %s", body);
    }
    assert_non_null(strstr(body, "\"node\":1,\"cluster\":"));
    assert_non_null(strstr(body, "\"global_home\":1,\"home\":true"));

    /* node 3 SIGKILLed: it drops out once its last report is older than --mgr-stale-ms */
    int64_t t0 = cq_test_mono_ms();
    assert_int_equal(cq_testsrv_kill(&nodes[3], SIGKILL), 128 + SIGKILL);
    expect_nodes(want, sizeof(want), (const int[]){1, 2}, 2);
    wait_listed(want);
    fprintf(stderr, "# node 3 left svrconfig %lld ms after its SIGKILL (--mgr-stale-ms %s)\n",
            (long long)(cq_test_mono_ms() - t0), STALE_MS);
}

static int teardown(void **state)
{
    (void)state;
    int bad = 0;
    for (int n = 1; n <= NODES; n++)
        if (nodes[n].pid && cq_testsrv_stop(&nodes[n]) != 0)
            bad = -1;
    if (it_mgr_stop(&mgr) != 0) /* removes its files, or keeps them and says so */
        bad = -1;
    return bad;
}

int main(void)
{
    if (!getenv("CHANQD") || !getenv("CQ_NATS_URLS") || !getenv("CQ_ZK_HOSTS")) {
        printf("1..0 # SKIP needs CHANQD, CQ_NATS_URLS and CQ_ZK_HOSTS (run_nats.sh, run_zk.sh)\n");
        return 0;
    }
    snprintf(relay, sizeof(relay), "rm%d", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_relay_nodes_listed, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
