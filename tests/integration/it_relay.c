/* it_relay.c - integration tests against three chanqd nodes as one relay (issue 23,
 * doc/relay-cluster.md): nats-server and ZooKeeper from run_nats.sh and run_zk.sh
 * (CQ_NATS_URLS, CQ_ZK_HOSTS). Node 1 is it_srv(); nodes 2 and 3 are started here with the same
 * options. In relay mode (`--relay`, it_run) it_startv starts the three nodes and it_connect
 * spreads connections over them: servers on nodes 1, 2, 3, 1...; clients on nodes 3, 1, 2, 3...
 * so a scenario written for one node runs with its game servers and clients on different
 * nodes, unchanged. */
#include "it_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool it_relay;

/* channeld's client_authoratative_fsm.json: clients may SUB and UNSUB themselves */
static const char CLIENT_AUTH_FSM[] =
    "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\", \"MsgTypeBlacklist\": \"\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"3-8,15-65535\", \"MsgTypeBlacklist\": \"\"}],"
    " \"Transitions\": []}\n";
static char g_fsm[64];

static void fsm_remove(void)
{
    unlink(g_fsm);
}

const char *it_client_auth_fsm(void)
{
    if (g_fsm[0])
        return g_fsm;
    snprintf(g_fsm, sizeof(g_fsm), "%s", "/tmp/cq-it-fsm.XXXXXX");
    int fd = mkstemp(g_fsm);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, CLIENT_AUTH_FSM, strlen(CLIENT_AUTH_FSM)),
                     (ssize_t)strlen(CLIENT_AUTH_FSM));
    close(fd);
    atexit(fsm_remove);
    return g_fsm;
}

static cq_testsrv_t g_nodes[IT_RELAY_NODES + 1];
static const char *g_urls[IT_RELAY_NODES + 1];
static char g_cluster[32];
static int g_servers, g_clients;

void it_relay_set_nats(int n, const char *urls)
{
    g_urls[n] = urls;
}

const char *it_relay_name(void)
{
    return g_cluster;
}

cq_testsrv_t *it_node(int n)
{
    return n == 1 ? it_srv() : &g_nodes[n];
}

/* What every node runs with besides the test's own options: its relay, and ports of its own. */
static size_t relay_args(int n, const char **a, char *id, size_t idlen)
{
    snprintf(id, idlen, "%d", n);
    const char *v[] = {"--ws-addr",        "127.0.0.1:0",
                       "--kcp-addr",       "127.0.0.1:0",
                       "--mq-addr",        "",
                       "--mq-http-addr",   "",
                       "--relay-nats",     g_urls[n] ? g_urls[n] : getenv("CQ_NATS_URLS"),
                       "--relay-zk-hosts", getenv("CQ_ZK_HOSTS"),
                       "--relay-cluster",  g_cluster,
                       "--relay-node-id",  id,
                       "--zk-session-ms",  "2000"};
    size_t k = 0;
    for (; k < sizeof(v) / sizeof(v[0]); k++)
        a[k] = v[k];
    return k;
}

static void start_node(int n, const char *const *args)
{
    const char *a[80];
    char id[8], workers[8];
    size_t k = relay_args(n, a, id, sizeof(id));
    for (; args && *args && k < 76; args++)
        a[k++] = *args;
    if (n == 1) {
        a[k] = NULL;
        it_start_one(a);
        return;
    }
    snprintf(workers, sizeof(workers), "%d", it_workers);
    a[k++] = "--workers";
    a[k++] = workers;
    a[k] = NULL;
    assert_int_equal(cq_testsrv_init(&g_nodes[n]), 0);
    int r = cq_testsrv_start(&g_nodes[n], a);
    if (r < 0) {
        char *log = cq_testsrv_log(&g_nodes[n]);
        print_error("node %d did not start (%d); log:\n%s\n", n, r, log ? log : "(none)");
        free(log);
    }
    assert_int_equal(r, 0);
    it_bridge(&g_nodes[n]);
}

/* Node 1 first (it claims GLOBAL's home), then the others; ready when each has heard every
 * other over NATS (its HELLO): the members are known everywhere and every link carries. */
void it_relay_startv(const char *const *args)
{
    static int seq;
    assert_non_null(getenv("CQ_NATS_URLS"));
    assert_non_null(getenv("CQ_ZK_HOSTS"));
    snprintf(g_cluster, sizeof(g_cluster), "it%d_%d", (int)getpid(), ++seq);
    g_servers = g_clients = 0;
    for (int n = 1; n <= IT_RELAY_NODES; n++)
        start_node(n, args);
    for (int n = 1; n <= IT_RELAY_NODES; n++)
        assert_int_equal(cq_testsrv_metric_wait_ge(it_node(n), "chanq_relay_peers_up",
                                                   IT_RELAY_NODES - 1, 10 * IT_TIMEOUT_MS),
                         IT_RELAY_NODES - 1);
}

int it_relay_pick(bool server)
{
    return server ? g_servers++ % IT_RELAY_NODES + 1 : (2 + g_clients++) % IT_RELAY_NODES + 1;
}

int it_relay_stop(void)
{
    int bad = 0;
    for (int n = 2; n <= IT_RELAY_NODES; n++)
        if (g_nodes[n].pid && cq_testsrv_stop(&g_nodes[n]) != 0)
            bad = -1;
    return bad;
}

int it_relay_run(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv)
{
    if (!getenv("CQ_NATS_URLS") || !getenv("CQ_ZK_HOSTS")) {
        printf("1..0 # SKIP needs nats-server and ZooKeeper (run through run_zk.sh and "
               "run_nats.sh)\n");
        return 0;
    }
    return it_run(name, tests, n, argc, argv);
}
