/* chanq.c - the `chanq` operator CLI for chanqd's durable topics (seed protocol v1, see
 * doc/protocol-mq.md), on the blocking client libchanq/chanq_mq_sync.h.
 *
 *   chanq [--addr H:P] [--module M --token T] produce TOPIC [--batch N] [--producer-id P]
 *   chanq [...] consume TOPIC [--from OFFSET] [--max N] [--commit] [--instance ID]
 *   chanq [...] tail TOPIC [--from OFFSET] [--count N]
 *   chanq [...] add-topic TOPIC
 *   chanq [...] offset TOPIC [--instance ID]
 *   chanq [...] topics
 *   chanq --servers LIST | --zk HOSTS [--zk-root R] produce|consume|tail|watch TOPIC [...]
 *   chanq --mgr H:P[,H:P] [--zk HOSTS] produce|consume|tail|watch TOPIC [...]
 *   chanq admin [--mgr-http H:P] --admin-token-file F COMMAND ...   (chanq_admin.c)
 *
 * With --servers or --zk the command runs over the cluster client (libchanq/chanq_cluster.h):
 * produce fails over between shards (--policy cache|drop when no master is reachable) and
 * prints SHARD<TAB>OFFSET per message; consume and tail read every shard and print
 * SHARD<TAB>OFFSET<TAB>CONTENT, dropping duplicates by (producer_id, seq). `watch` is `tail`.
 *
 * Exit codes: 0 success; 1 the server refused a request (err_code, its name and err_msg are
 * printed on stderr) or the connection failed; 2 usage.
 */
#include "chanq_admin.h"
#include "chanq_cluster.h"
#include "chanq_mq_sync.h"

#include "cq_err.h"
#include "cq_mq.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXIT_SERVER   1
#define EXIT_USAGE    2
#define DEFAULT_ADDR  "127.0.0.1:12110"
#define CONSUME_CHUNK 1000u

typedef struct cli {
    const char *addr;
    uint32_t module;
    const char *token;
    int timeout_ms;
    const char *cmd;
    const char *topic;
    int64_t from;        /* -1: not given */
    int64_t max;         /* consume: -1 = all */
    int64_t count;       /* tail: -1 = until interrupted */
    size_t batch;        /* produce: lines per request */
    int64_t producer;    /* produce: idempotence key, 0 = none */
    bool commit;         /* consume: commit the last offset printed */
    const char *servers; /* cluster: static list, or NULL */
    const char *zk;      /* cluster: ZooKeeper hosts, or NULL */
    const char *zk_root;
    const char *mgr;      /* cluster: managers asked for the server list (svrconfig), or NULL */
    const char *instance; /* commit and offset: the module's consumer instance, or NULL */
    bool cache;           /* cluster produce: cache when no master is reachable */
} cli_t;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: chanq [OPTIONS] COMMAND [ARGS]\n"
               "\n"
               "Commands:\n"
               "  produce TOPIC     one message per stdin line; prints each acked offset\n"
               "                    [--batch N] lines per request (default 1)\n"
               "                    [--producer-id P] idempotence key (seq assigned from 0)\n"
               "  consume TOPIC     prints OFFSET<TAB>CONTENT for messages after --from\n"
               "                    [--from OFFSET] (default 0: from the start) [--max N]\n"
               "                    [--commit] commit the last offset printed\n"
               "                    [--instance ID] as consumer instance ID of the module\n"
               "                    (an offset of its own; offset TOPIC takes it too)\n"
               "  tail|watch TOPIC  watches the topic and prints pushed messages until\n"
               "                    interrupted; [--from OFFSET] prints the backlog first,\n"
               "                    [--count N] stops after N messages\n"
               "  add-topic TOPIC   registers (creates, for an admin module) the topic\n"
               "  offset TOPIC      prints OFFSET<TAB>LAST_OFFSET: the offset this module\n"
               "                    committed (- if never) and the topic's last offset\n"
               "  topics            prints TOPIC<TAB>online|offline<TAB>RETENTION_DAYS<TAB>\n"
               "                    LAST_OFFSET for each topic this module may use\n"
               "  admin ...         the manager's operations (servers, shards, topics,\n"
               "                    modules, offline, online...): chanq admin --help\n"
               "\n"
               "Options:\n"
               "  --addr H:P        chanqd's --mq-addr (default " DEFAULT_ADDR ")\n"
               "  --module M        module_id (default 0)\n"
               "  --token T         the module's token (default empty)\n"
               "  --timeout MS      per-request timeout (default 10000)\n"
               "  --servers LIST    cluster mode: \"H:P,...\" or \"SHARD/H:P,...\"\n"
               "  --zk HOSTS        cluster mode: servers from ZooKeeper (H:P,...)\n"
               "  --zk-root PATH    the cluster's ZooKeeper root (default /chanq)\n"
               "  --mgr H:P,...     cluster mode: servers from the managers (svrconfig with\n"
               "                    --module and --token), refreshed every 5 s; --zk is the\n"
               "                    fallback when no manager answers\n"
               "  --policy P        cluster produce without a master: drop (default) or\n"
               "                    cache (kept in memory, sent in order within --timeout)\n"
               "  -h, --help        this text\n"
               "\n"
               "Exit codes: 0 ok, 1 server or connection error, 2 usage.\n");
}

/* ---- arguments ----------------------------------------------------------------------------- */

static bool parse_i64(const char *s, int64_t min, int64_t *ret)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !*s || *end || v < min || v > CQ_MQ_MAX_U53)
        return false;
    *ret = v;
    return true;
}

enum {
    O_ADDR = 256,
    O_MODULE,
    O_TOKEN,
    O_TIMEOUT,
    O_FROM,
    O_MAX,
    O_COUNT,
    O_BATCH,
    O_PID,
    O_COMMIT,
    O_SERVERS,
    O_ZK,
    O_ZK_ROOT,
    O_POLICY,
    O_MGR,
    O_INSTANCE
};

static int parse_opt(cli_t *c, int o, const char *arg)
{
    int64_t v = 0;
    switch (o) {
    case O_ADDR:
        c->addr = arg;
        return 0;
    case O_TOKEN:
        c->token = arg;
        return 0;
    case O_COMMIT:
        c->commit = true;
        return 0;
    case O_INSTANCE:
        c->instance = arg;
        return 0;
    case O_SERVERS:
        c->servers = arg;
        return 0;
    case O_ZK:
        c->zk = arg;
        return 0;
    case O_ZK_ROOT:
        c->zk_root = arg;
        return 0;
    case O_MGR:
        c->mgr = arg;
        return 0;
    case O_POLICY:
        if (strcmp(arg, "cache") != 0 && strcmp(arg, "drop") != 0)
            return -1;
        c->cache = strcmp(arg, "cache") == 0;
        return 0;
    case O_MODULE:
        if (!parse_i64(arg, 0, &v) || v > UINT32_MAX)
            return -1;
        c->module = (uint32_t)v;
        return 0;
    case O_TIMEOUT:
        if (!parse_i64(arg, 1, &v) || v > 3600000)
            return -1;
        c->timeout_ms = (int)v;
        return 0;
    case O_FROM:
        return parse_i64(arg, 0, &c->from) ? 0 : -1;
    case O_MAX:
        return parse_i64(arg, 1, &c->max) ? 0 : -1;
    case O_COUNT:
        return parse_i64(arg, 1, &c->count) ? 0 : -1;
    case O_PID:
        return parse_i64(arg, 1, &c->producer) ? 0 : -1;
    case O_BATCH:
        if (!parse_i64(arg, 1, &v) || v > CQ_MQ_DEFAULT_MAX_BATCH)
            return -1;
        c->batch = (size_t)v;
        return 0;
    default:
        return -1;
    }
}

/* Returns 0, or EXIT_USAGE after printing why. */
static int parse_args(cli_t *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"addr", required_argument, NULL, O_ADDR},
        {"module", required_argument, NULL, O_MODULE},
        {"token", required_argument, NULL, O_TOKEN},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"from", required_argument, NULL, O_FROM},
        {"max", required_argument, NULL, O_MAX},
        {"count", required_argument, NULL, O_COUNT},
        {"batch", required_argument, NULL, O_BATCH},
        {"producer-id", required_argument, NULL, O_PID},
        {"commit", no_argument, NULL, O_COMMIT},
        {"servers", required_argument, NULL, O_SERVERS},
        {"zk", required_argument, NULL, O_ZK},
        {"zk-root", required_argument, NULL, O_ZK_ROOT},
        {"policy", required_argument, NULL, O_POLICY},
        {"mgr", required_argument, NULL, O_MGR},
        {"instance", required_argument, NULL, O_INSTANCE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 'h') {
            usage(stdout);
            exit(0);
        }
        if (o == '?' || parse_opt(c, o, optarg) < 0) {
            if (o != '?')
                fprintf(stderr, "chanq: bad value for --%s: %s\n", opts[o - O_ADDR].name, optarg);
            return EXIT_USAGE;
        }
    }
    int rest = argc - optind;
    if (rest < 1) {
        fprintf(stderr, "chanq: missing COMMAND\n");
        return EXIT_USAGE;
    }
    c->cmd = argv[optind];
    bool needs_topic = strcmp(c->cmd, "topics") != 0;
    if (rest != (needs_topic ? 2 : 1)) {
        fprintf(stderr, "chanq: %s: %s\n", c->cmd,
                needs_topic ? "expects exactly one TOPIC" : "takes no argument");
        return EXIT_USAGE;
    }
    c->topic = needs_topic ? argv[optind + 1] : NULL;
    if (c->topic && !cq_mq_topic_valid(c->topic, strlen(c->topic))) {
        fprintf(stderr, "chanq: bad topic name \"%s\" (allowed: [A-Za-z0-9_], 1 to 64)\n",
                c->topic);
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* Prints a failed call and returns EXIT_SERVER. */
static int fail(chanq_mq_sync_t *s, const char *what, int err)
{
    uint32_t code = s ? chanq_mq_sync_errcode(s) : 0;
    const char *msg = s ? chanq_mq_sync_errmsg(s) : "";
    if (code)
        fprintf(stderr, "chanq: %s: err_code %u (%s): %s\n", what, code,
                cq_mq_errcode_name((int)code), msg);
    else
        fprintf(stderr, "chanq: %s: %s (%s)\n", what, msg && *msg ? msg : cq_strerror(err),
                cq_errname(err));
    return EXIT_SERVER;
}

static int open_conn(const cli_t *c, uint32_t type, chanq_mq_sync_t **ret_s)
{
    char host[256];
    uint16_t port;
    if (chanq_mq_sync_parse_addr(c->addr, host, sizeof(host), &port) < 0) {
        fprintf(stderr, "chanq: bad --addr \"%s\" (expected HOST:PORT)\n", c->addr);
        return EXIT_USAGE;
    }
    char err[CQ_MQ_ERR_MSG_MAX + 64] = "";
    int r = chanq_mq_sync_connect(host, port, c->module, c->token, type, c->timeout_ms, err,
                                  sizeof(err), ret_s);
    if (r < 0) {
        fprintf(stderr, "chanq: connect to %s: %s (%s)\n", c->addr, err, cq_errname(r));
        return EXIT_SERVER;
    }
    chanq_mq_sync_set_timeout(*ret_s, c->timeout_ms);
    if (c->instance && chanq_mq_sync_set_instance(*ret_s, c->instance) < 0) {
        fprintf(stderr,
                "chanq: bad --instance \"%s\" (1 to 100 printable ASCII characters, no "
                "space)\n",
                c->instance);
        *ret_s = chanq_mq_sync_close(*ret_s);
        return EXIT_USAGE;
    }
    return 0;
}

static void print_item(const cq_mq_item_t *it)
{
    printf("%" PRId64 "\t%s\n", it->offset, it->content);
}

static bool is_tail(const char *cmd)
{
    return strcmp(cmd, "tail") == 0 || strcmp(cmd, "watch") == 0;
}

/* ---- commands ------------------------------------------------------------------------------ */

typedef struct lines {
    char **v;
    size_t *len;
    size_t n;
} lines_t;

/* Sends the collected lines as one produce and prints their offsets. */
static int produce_flush(chanq_mq_sync_t *s, const cli_t *c, lines_t *l)
{
    chanq_mq_content_t msgs[CQ_MQ_DEFAULT_MAX_BATCH];
    int64_t offs[CQ_MQ_DEFAULT_MAX_BATCH];
    for (size_t i = 0; i < l->n; i++)
        msgs[i] = (chanq_mq_content_t){l->v[i], l->len[i], false, -1};
    chanq_mq_produce_t req = {c->topic, msgs, l->n, c->producer, -1, -1};
    int r = l->n ? chanq_mq_sync_produce(s, &req, offs) : 0;
    for (size_t i = 0; i < l->n; i++) {
        if (r == 0)
            printf("%" PRId64 "\n", offs[i]);
        free(l->v[i]);
    }
    l->n = 0;
    fflush(stdout);
    return r < 0 ? fail(s, "produce", r) : 0;
}

static int cmd_produce(chanq_mq_sync_t *s, const cli_t *c)
{
    char *v[CQ_MQ_DEFAULT_MAX_BATCH];
    size_t len[CQ_MQ_DEFAULT_MAX_BATCH];
    lines_t l = {v, len, 0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t k;
    int rc = 0;
    while (rc == 0 && (k = getline(&line, &cap, stdin)) >= 0) {
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
            line[--k] = '\0';
        l.v[l.n] = line;
        l.len[l.n++] = (size_t)k;
        line = NULL;
        cap = 0;
        if (l.n == c->batch)
            rc = produce_flush(s, c, &l);
    }
    free(line);
    return rc ? rc : produce_flush(s, c, &l);
}

static int cmd_consume(chanq_mq_sync_t *s, const cli_t *c)
{
    int64_t off = c->from < 0 ? 0 : c->from, left = c->max;
    bool any = false;
    while (left != 0) {
        uint32_t want = left < 0 || left > CONSUME_CHUNK ? CONSUME_CHUNK : (uint32_t)left;
        cq_mq_msg_t *m = NULL;
        int r = chanq_mq_sync_consume(s, c->topic, off, want, &m);
        if (r < 0)
            return fail(s, "consume", r);
        for (size_t i = 0; i < m->nitems; i++)
            print_item(&m->items[i]);
        size_t got = m->nitems;
        if (got)
            off = m->items[got - 1].offset;
        any = any || got;
        cq_mq_msg_free(m);
        if (got == 0)
            break;
        if (left > 0)
            left -= (int64_t)got;
    }
    fflush(stdout);
    if (c->commit && any) {
        int r = chanq_mq_sync_commit(s, c->topic, off);
        if (r < 0)
            return fail(s, "commit", r);
    }
    return 0;
}

/* Prints the items of m after *last, up to *left (-1: unbounded). */
static void tail_print(const cq_mq_msg_t *m, int64_t *last, int64_t *left)
{
    for (size_t i = 0; i < m->nitems && *left != 0; i++) {
        if (m->items[i].offset <= *last)
            continue; /* already printed from the backlog */
        print_item(&m->items[i]);
        *last = m->items[i].offset;
        if (*left > 0)
            (*left)--;
    }
    fflush(stdout);
}

/* The backlog after from, consumed after the watch so nothing falls between the two. */
static int tail_backlog(chanq_mq_sync_t *s, const cli_t *c, int64_t *last, int64_t *left)
{
    for (;;) {
        cq_mq_msg_t *m = NULL;
        int r = chanq_mq_sync_consume(s, c->topic, *last, CONSUME_CHUNK, &m);
        if (r < 0)
            return fail(s, "consume", r);
        size_t got = m->nitems;
        tail_print(m, last, left);
        cq_mq_msg_free(m);
        if (got == 0 || *left == 0)
            return 0;
    }
}

static int cmd_tail(chanq_mq_sync_t *s, const cli_t *c)
{
    int64_t last = c->from < 0 ? -1 : c->from, left = c->count;
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: poll returns early */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int r = chanq_mq_sync_watch(s, c->topic);
    if (r < 0)
        return fail(s, "watch", r);
    if (c->from >= 0 && tail_backlog(s, c, &last, &left) != 0)
        return EXIT_SERVER;
    while (left != 0 && !interrupted) {
        cq_mq_msg_t *m = NULL;
        r = chanq_mq_sync_wait_push(s, 200, &m);
        if (r == CQ_ETIMEOUT)
            continue;
        if (r < 0)
            return fail(s, "tail", r);
        tail_print(m, &last, &left);
        cq_mq_msg_free(m);
    }
    return 0;
}

static int cmd_offset(chanq_mq_sync_t *s, const cli_t *c)
{
    int64_t off = 0, last = 0;
    bool committed = false;
    int r = chanq_mq_sync_offset(s, c->topic, &off, &committed, &last);
    if (r < 0)
        return fail(s, "offset", r);
    if (committed)
        printf("%" PRId64 "\t%" PRId64 "\n", off, last);
    else
        printf("-\t%" PRId64 "\n", last);
    return 0;
}

static int cmd_topics(chanq_mq_sync_t *s)
{
    cq_mq_msg_t *m = NULL;
    int r = chanq_mq_sync_topics(s, &m);
    if (r < 0)
        return fail(s, "topics", r);
    for (size_t i = 0; i < m->ntopic_infos; i++) {
        const cq_mq_topic_info_t *t = &m->topic_infos[i];
        printf("%s\t%s\t%" PRIu32 "\t%" PRId64 "\n", t->topic, t->online ? "online" : "offline",
               t->retention_days, t->last_offset);
    }
    cq_mq_msg_free(m);
    return 0;
}

/* ---- cluster mode -------------------------------------------------------------------------- */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void print_shard(uint32_t shard)
{
    if (shard == CHANQ_CLUSTER_SHARD_UNKNOWN)
        printf("-");
    else
        printf("%" PRIu32, shard);
}

static int cluster_fail(const char *what, int err)
{
    fprintf(stderr, "chanq: %s: %s (%s)\n", what, cq_strerror(err), cq_errname(err));
    return EXIT_SERVER;
}

/* A cached request sent at last (or refused). */
static void cluster_on_cached(void *ud, const char *topic, int64_t pid, int64_t first_seq, size_t n,
                              int err, uint32_t shard, const int64_t *offsets)
{
    (void)topic, (void)pid, (void)first_seq;
    int *rc = ud;
    for (size_t i = 0; i < n && err == 0; i++) {
        print_shard(shard);
        printf("\t%" PRId64 "\n", offsets[i]);
    }
    if (err)
        *rc = cluster_fail("produce (cached)", err);
    fflush(stdout);
}

/* The managers' list (opts.refresh of the cluster): ud is the cli. */
static int mgr_refresh(void *ud, chanq_cluster_server_t *ret, size_t cap, size_t *ret_n)
{
    const cli_t *c = ud;
    char err[256] = "";
    int r = chanq_cluster_svrconfig(c->mgr, c->module, c->token, c->timeout_ms, ret, cap, ret_n,
                                    err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "chanq: --mgr: %s\n", err);
    return r;
}

/* The server list: --servers, else the managers (--mgr), else (or when no manager gave one)
 * ZooKeeper (--zk). */
static int cluster_list(const cli_t *c, chanq_cluster_server_t *sv, size_t *n)
{
    char err[256] = "";
    int r = -ENOENT;
    if (c->servers) {
        if (chanq_cluster_parse_servers(c->servers, sv, CHANQ_CLUSTER_SERVERS_MAX, n) == 0)
            return 0;
        fprintf(stderr, "chanq: bad --servers: %s\n", c->servers);
        return EXIT_USAGE;
    }
    if (c->mgr && (r = mgr_refresh((void *)c, sv, CHANQ_CLUSTER_SERVERS_MAX, n)) == 0 && *n)
        return 0;
    if (c->mgr && r == 0)
        fprintf(stderr, "chanq: --mgr: no server may be used now\n");
    if (!c->zk)
        return EXIT_SERVER;
    r = chanq_cluster_discover_zk(c->zk, c->zk_root, c->timeout_ms, sv, CHANQ_CLUSTER_SERVERS_MAX,
                                  n, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "chanq: --zk: %s\n", err);
    return r < 0 ? EXIT_SERVER : 0;
}

static int cluster_open(const cli_t *c, uint32_t type, int *cached_rc, chanq_cluster_t **ret)
{
    chanq_cluster_server_t sv[CHANQ_CLUSTER_SERVERS_MAX];
    size_t n = 0;
    int rc = cluster_list(c, sv, &n);
    if (rc)
        return rc;
    chanq_cluster_opts_t o = {.policy = c->cache ? CHANQ_CLUSTER_CACHE : CHANQ_CLUSTER_DROP,
                              .producer_id = c->producer,
                              .on_cached = cluster_on_cached,
                              .cached_ud = cached_rc,
                              .refresh = c->mgr ? mgr_refresh : NULL,
                              .refresh_ud = (void *)c};
    *ret = chanq_cluster_sync_new(sv, n, c->module, c->token, type, c->timeout_ms, &o);
    return *ret ? 0 : cluster_fail("cluster", -ENOMEM);
}

static int cluster_produce_flush(chanq_cluster_t *k, const cli_t *c, lines_t *l)
{
    chanq_mq_content_t msgs[CQ_MQ_DEFAULT_MAX_BATCH];
    int64_t offs[CQ_MQ_DEFAULT_MAX_BATCH];
    for (size_t i = 0; i < l->n; i++)
        msgs[i] = (chanq_mq_content_t){l->v[i], l->len[i], false, -1};
    chanq_mq_produce_t req = {c->topic, msgs, l->n, 0, -1, -1};
    uint32_t shard = CHANQ_CLUSTER_SHARD_UNKNOWN;
    int r = l->n ? chanq_cluster_produce(k, &req, offs, &shard) : 0;
    for (size_t i = 0; i < l->n; i++) {
        if (r == 0) {
            print_shard(shard);
            printf("\t%" PRId64 "\n", offs[i]);
        }
        free(l->v[i]);
    }
    l->n = 0;
    fflush(stdout);
    return r < 0 ? cluster_fail("produce", r) : 0;
}

/* Sends what the cache still holds, ticking until --timeout. */
static int cluster_drain(chanq_cluster_t *k, const cli_t *c)
{
    for (int waited = 0; chanq_cluster_tick(k) > 0; waited += 100) {
        if (waited >= c->timeout_ms || interrupted) {
            fprintf(stderr, "chanq: produce: %zu messages still cached (no master)\n",
                    chanq_cluster_cached(k, NULL));
            return EXIT_SERVER;
        }
        sleep_ms(100);
    }
    return 0;
}

static int cluster_produce(chanq_cluster_t *k, const cli_t *c, const int *cached_rc)
{
    char *v[CQ_MQ_DEFAULT_MAX_BATCH];
    size_t len[CQ_MQ_DEFAULT_MAX_BATCH];
    lines_t l = {v, len, 0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        l.v[l.n] = line;
        l.len[l.n++] = (size_t)n;
        line = NULL;
        cap = 0;
        if (l.n == c->batch)
            rc = cluster_produce_flush(k, c, &l);
    }
    free(line);
    rc = rc ? rc : cluster_produce_flush(k, c, &l);
    rc = rc ? rc : cluster_drain(k, c);
    return rc ? rc : *cached_rc;
}

/* Prints the batch without duplicates; returns how many were printed. */
static int64_t cluster_print(chanq_cluster_dedupe_t *d, chanq_cluster_batch_t *b, int64_t left)
{
    int64_t printed = 0;
    for (size_t i = 0; i < b->n && (left < 0 || printed < left); i++) {
        const chanq_cluster_item_t *it = &b->items[i];
        if (chanq_cluster_dedupe_seen(d, it->producer_id, it->seq))
            continue;
        print_shard(it->shard);
        printf("\t%" PRId64 "\t%s\n", it->offset, it->content);
        printed++;
    }
    fflush(stdout);
    chanq_cluster_batch_clear(b);
    return printed;
}

/* consume: every shard from its start until nothing is left; tail: from the ends (or from the
 * start with --from 0), polling until --count or a signal. */
static int cluster_read(chanq_cluster_t *k, const cli_t *c, bool tail)
{
    chanq_cluster_consumer_t *cons = chanq_cluster_consumer_new(k, c->topic, tail && c->from < 0);
    chanq_cluster_dedupe_t *d = chanq_cluster_dedupe_new(0);
    chanq_cluster_batch_t b = {0};
    int64_t left = tail ? c->count : c->max;
    int rc = cons && d ? 0 : cluster_fail("consume", -ENOMEM);
    if (tail) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    for (int idle = 0; rc == 0 && left != 0 && !interrupted;) {
        int r = chanq_cluster_consume(cons, CONSUME_CHUNK, &b);
        if (r < 0 && !tail) {
            rc = cluster_fail("consume", r);
            break;
        }
        size_t got = b.n;
        int64_t printed = cluster_print(d, &b, left);
        if (left > 0)
            left -= printed;
        if (got > 0)
            continue;
        if (!tail)
            break;
        if (++idle % 10 == 0)
            chanq_cluster_tick(k); /* reconnects servers whose backoff ended */
        sleep_ms(100);
    }
    chanq_cluster_batch_clear(&b);
    chanq_cluster_dedupe_free(d);
    chanq_cluster_consumer_free(cons);
    return rc;
}

static int cluster_run(const cli_t *c)
{
    bool produce = strcmp(c->cmd, "produce") == 0;
    if (!produce && strcmp(c->cmd, "consume") != 0 && !is_tail(c->cmd)) {
        fprintf(stderr, "chanq: %s: not available with --servers / --zk\n", c->cmd);
        return EXIT_USAGE;
    }
    int cached_rc = 0;
    chanq_cluster_t *k = NULL;
    int rc = cluster_open(c, produce ? CQ_MQ_PRODUCER : CQ_MQ_CONSUMER, &cached_rc, &k);
    if (rc)
        return rc;
    rc = produce ? cluster_produce(k, c, &cached_rc) : cluster_read(k, c, is_tail(c->cmd));
    chanq_cluster_free(k);
    return rc;
}

static int run(const cli_t *c)
{
    if (c->servers || c->zk || c->mgr)
        return cluster_run(c);
    bool producer = strcmp(c->cmd, "produce") == 0 || strcmp(c->cmd, "add-topic") == 0;
    bool consumer = strcmp(c->cmd, "consume") == 0 || is_tail(c->cmd) ||
                    strcmp(c->cmd, "offset") == 0 || strcmp(c->cmd, "topics") == 0;
    if (!producer && !consumer) {
        fprintf(stderr, "chanq: unknown command \"%s\"\n", c->cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    chanq_mq_sync_t *s = NULL;
    int rc = open_conn(c, producer ? CQ_MQ_PRODUCER : CQ_MQ_CONSUMER, &s);
    if (rc)
        return rc;
    if (strcmp(c->cmd, "produce") == 0)
        rc = cmd_produce(s, c);
    else if (strcmp(c->cmd, "consume") == 0)
        rc = cmd_consume(s, c);
    else if (is_tail(c->cmd))
        rc = cmd_tail(s, c);
    else if (strcmp(c->cmd, "offset") == 0)
        rc = cmd_offset(s, c);
    else if (strcmp(c->cmd, "topics") == 0)
        rc = cmd_topics(s);
    else {
        int r = chanq_mq_sync_add_topic(s, c->topic);
        rc = r < 0 ? fail(s, "add-topic", r) : 0;
    }
    chanq_mq_sync_close(s);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "admin") == 0) {
        signal(SIGPIPE, SIG_IGN);
        return chanq_admin_main(argc - 1, argv + 1);
    }
    cli_t c = {.addr = DEFAULT_ADDR,
               .token = "",
               .timeout_ms = CHANQ_MQ_SYNC_DEFAULT_TIMEOUT_MS,
               .from = -1,
               .max = -1,
               .count = -1,
               .batch = 1};
    int rc = parse_args(&c, argc, argv);
    if (rc) {
        fprintf(stderr, "Try 'chanq --help'.\n");
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);
    return run(&c);
}
