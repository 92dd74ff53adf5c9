/* test_config.c - the option table: command line, config file, help, dump, doc/config.md. */
#include "test_util.h"

#include "cq_config.h"
#include "cq_limits.h"
#include "cq_err.h"
#include "cq_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

/* Every option of the brief, with its channeld alias (NULL if none). */
static const struct {
    const char *name, *alias;
} all_opts[] = {
    {"workers", NULL},
    {"client-addr", "ca"},
    {"server-addr", "sa"},
    {"client-network", "cn"},
    {"server-network", "sn"},
    {"client-legacy-tag", NULL},
    {"server-legacy-tag", NULL},
    {"admin-addr", NULL},
    {"dev", "dev"},
    {"log-level", "loglevel"},
    {"client-fsm", "cfsm"},
    {"server-fsm", "sfsm"},
    {"channel-settings", "chs"},
    {"server-bypass-auth", "sba"},
    {"compression-type", "ct"},
    {"auth-provider", NULL},
    {"auth-token-file", NULL},
    {"auth-timeout-ms", "cat"},
    {"max-failed-auth", "mfaa"},
    {"conn-id-bits", "mcb"},
    {"idle-timeout-ms", NULL},
    {"tcp-keepalive-s", NULL},
    {"max-packet-size", NULL},
    {"max-connections", NULL},
    {"max-channels", NULL},
    {"max-subs-per-conn", NULL},
    {"sendq-soft-limit", NULL},
    {"sendq-soft-seconds", NULL},
    {"sendq-hard-limit", NULL},
    {"ready-file", NULL},
    {"config", NULL},
    {"help", NULL},
    {"version", NULL},
    {"dump-config", NULL},
    {"config-markdown", NULL},
};

/* Parses the NULL-terminated argument list into a fresh default config. */
static int parse(cq_config_t *c, char *err, size_t errlen, ...)
{
    char *argv[64] = {"chanqd"};
    int argc = 1;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) && argc < 63;)
        argv[argc++] = a;
    va_end(ap);
    cq_config_defaults(c);
    return cq_config_parse_args(c, argc, argv, err, errlen);
}

#define PARSE_OK(c, ...)                                                                           \
    do {                                                                                           \
        char e_[256] = "";                                                                         \
        int r_ = parse(c, e_, sizeof(e_), __VA_ARGS__, (char *)NULL);                              \
        if (r_ != 0)                                                                               \
            fail_msg("parse: %d %s", r_, e_);                                                      \
    } while (0)

/* Expects parsing to fail with CQ_ECONFIG and exactly msg. */
#define PARSE_ERR(msg, ...)                                                                        \
    do {                                                                                           \
        char e_[256] = "";                                                                         \
        cq_config_t c_;                                                                            \
        int r_ = parse(&c_, e_, sizeof(e_), __VA_ARGS__, (char *)NULL);                            \
        cq_config_done(&c_);                                                                       \
        assert_int_equal(r_, CQ_ECONFIG);                                                          \
        assert_string_equal(e_, msg);                                                              \
    } while (0)

/* Runs fn with stdout redirected to a temporary file; returns what it printed (malloc'd). */
static char *capture_stdout(int (*fn)(void *), void *arg, int *ret)
{
    char path[] = "/tmp/cq_config_out_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    *ret = fn(arg);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fd);
    char *out = tu_read_file(path, NULL);
    unlink(path);
    return out;
}

static char *mem_output(void (*fn)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f);
    fclose(f);
    return buf;
}

static char *dump_string(const cq_config_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cq_config_dump(c, f);
    fclose(f);
    return buf;
}

/* ---- defaults and types --------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    cq_config_t c;
    cq_config_defaults(&c);
    assert_int_equal(c.workers, 0);
    assert_string_equal(c.client_addr, "127.0.0.1:12108");
    assert_string_equal(c.server_addr, "127.0.0.1:11288");
    assert_string_equal(c.client_network, "tcp");
    assert_string_equal(c.server_network, "tcp");
    assert_false(c.client_legacy_tag);
    assert_false(c.server_legacy_tag);
    assert_string_equal(c.admin_addr, "127.0.0.1:8080");
    assert_false(c.dev);
    assert_int_equal(c.log_level, CQ_LOG_INFO);
    assert_string_equal(c.client_fsm, "");
    assert_string_equal(c.server_fsm, "");
    assert_string_equal(c.channel_settings, "");
    assert_string_equal(c.server_bypass_auth, "auto");
    assert_int_equal(c.auth_addr_max_failures, 10);
    assert_int_equal(c.auth_addr_window_ms, 60000);
    assert_int_equal(c.auth_addr_backoff_ms, 10000);
    assert_string_equal(c.mq_http_hosts, "127.0.0.1,localhost,[::1]");
    assert_string_equal(c.mq_http_origins, "");
    assert_int_equal(c.compression_type, 0);
    assert_string_equal(c.auth_provider, "dev");
    assert_string_equal(c.auth_token_file, "");
    assert_int_equal(c.auth_timeout_ms, 5000);
    assert_int_equal(c.max_failed_auth, 5);
    assert_int_equal(c.conn_id_bits, 31);
    assert_int_equal(c.idle_timeout_ms, 0);
    assert_int_equal(c.tcp_keepalive_s, 60);
    assert_int_equal(c.max_packet_size, 65535);
    assert_int_equal(c.max_connections, 0); /* what the open-file limit leaves */
    assert_int_equal(c.fd_reserve, 256);
    assert_int_equal(c.mq_max_connections, 1024);
    assert_int_equal(c.mq_auth_timeout_ms, 10000);
    assert_int_equal(c.mq_idle_timeout_ms, 300000);
    assert_int_equal(c.mq_http_max_connections, 256);
    assert_int_equal(c.mq_http_timeout_ms, 30000);
    assert_int_equal(c.admin_max_connections, 16);
    assert_int_equal(c.admin_timeout_ms, 10000);
    assert_int_equal(c.mq_preauth_max_frame, 4 * KIB);
    assert_int_equal(c.mq_input_budget, 64 * MIB);
    assert_int_equal(c.max_channels, 65535);
    assert_int_equal(c.max_subs_per_conn, 1024);
    assert_int_equal(c.max_subs_per_server, 100000);
    assert_int_equal(c.sendq_soft_limit, MIB);
    assert_int_equal(c.sendq_soft_seconds, 10);
    assert_int_equal(c.sendq_hard_limit, 8 * MIB);
    assert_string_equal(c.ready_file, "");
    assert_string_equal(c.config, "");
    char err[64];
    assert_int_equal(cq_config_check(&c, err, sizeof(err)), 0);
    cq_config_done(&c);
    assert_null(c.client_addr);
    cq_config_done(&c); /* twice is fine */
}

static void test_types(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_OK(&c, "--workers=4", "--max-channels", "100", "--client-addr=0.0.0.0:1", "--server-addr",
             "", "--log-level=debug", "--sendq-hard-limit=16m", "--sendq-soft-limit", "64K",
             "--client-legacy-tag", "--server-legacy-tag=true", "--dev");
    assert_int_equal(c.workers, 4);
    assert_int_equal(c.max_channels, 100);
    assert_string_equal(c.client_addr, "0.0.0.0:1");
    assert_string_equal(c.server_addr, "");
    assert_int_equal(c.log_level, CQ_LOG_DEBUG);
    assert_int_equal(c.sendq_hard_limit, 16 * MIB);
    assert_int_equal(c.sendq_soft_limit, 64 * KIB);
    assert_true(c.client_legacy_tag);
    assert_true(c.server_legacy_tag);
    cq_config_done(&c);
    PARSE_OK(&c, "--sendq-hard-limit=1G", "--sendq-soft-limit=5000", "--log-level", "-1",
             "--idle-timeout-ms=+30", "--workers=0");
    assert_int_equal(c.sendq_hard_limit, GIB);
    assert_int_equal(c.sendq_soft_limit, 5000);
    assert_int_equal(c.log_level, CQ_LOG_DEBUG);
    assert_int_equal(c.idle_timeout_ms, 30);
    cq_config_done(&c);
    PARSE_OK(&c, "--log-level=3", "--auth-provider=file", "--auth-token-file=t.json");
    assert_int_equal(c.log_level, CQ_LOG_ERROR);
    assert_string_equal(c.auth_provider, "file");
    cq_config_done(&c);
    PARSE_OK(&c, "--log-level=WARN", "--max-packet-size=64", "--conn-id-bits=8");
    assert_int_equal(c.log_level, CQ_LOG_WARN);
    assert_int_equal(c.max_packet_size, 64);
    assert_int_equal(c.conn_id_bits, 8);
    cq_config_done(&c);
}

static void test_aliases(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_OK(&c, "-ca", ":1", "-sa=:2", "--cn=tcp", "-sn", "tcp", "-cfsm", "c.json", "-sfsm=s.json",
             "-chs", "h.json", "-ct=1", "-cat", "0", "-mfaa=3", "-mcb", "13", "-loglevel=2",
             "-dev");
    assert_string_equal(c.client_addr, ":1");
    assert_string_equal(c.server_addr, ":2");
    assert_string_equal(c.client_fsm, "c.json");
    assert_string_equal(c.server_fsm, "s.json");
    assert_string_equal(c.channel_settings, "h.json");
    assert_int_equal(c.compression_type, 1);
    assert_int_equal(c.auth_timeout_ms, 0);
    assert_int_equal(c.max_failed_auth, 3);
    assert_int_equal(c.conn_id_bits, 13);
    assert_int_equal(c.log_level, CQ_LOG_ERROR);
    assert_true(c.dev);
    cq_config_done(&c);
    /* Long names work with one dash too, like Go's flag package; later values win. */
    PARSE_OK(&c, "-workers", "2", "-client-addr=:9", "--workers=3", "-dev");
    assert_int_equal(c.workers, 3);
    assert_string_equal(c.client_addr, ":9");
    cq_config_done(&c);
}

static void test_go_bools(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_OK(&c, "-dev", "-sba=false");
    assert_true(c.dev);
    assert_string_equal(c.server_bypass_auth, "false");
    cq_config_done(&c);
    PARSE_OK(&c, "-dev=false", "--no-server-bypass-auth", "--no-client-legacy-tag");
    assert_false(c.dev);
    assert_string_equal(c.server_bypass_auth, "false");
    assert_false(c.client_legacy_tag);
    cq_config_done(&c);
    PARSE_OK(&c, "--dev=1", "-sba=0", "--client-legacy-tag=yes", "--server-legacy-tag=T");
    assert_true(c.dev);
    assert_string_equal(c.server_bypass_auth, "false");
    assert_true(c.client_legacy_tag);
    assert_true(c.server_legacy_tag);
    cq_config_done(&c);
    PARSE_OK(&c, "--no-sba", "--dev=off", "--dev=ON");
    assert_string_equal(c.server_bypass_auth, "false");
    assert_true(c.dev);
    cq_config_done(&c);
    /* A boolean never consumes the next argument. */
    PARSE_ERR("unexpected argument \"false\"", "-dev", "false");
}

/* ---- errors ----------------------------------------------------------------------------- */

/* The core cannot run more workers than CQ_MAX_WORKERS: the option refuses more. */
_Static_assert(CQ_MAX_WORKERS == 64, "--workers' maximum in src/config/config.c must be the "
                                     "core's CQ_MAX_WORKERS (src/core/cq_limits.h)");

static void test_workers_max_is_the_core_cap(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_OK(&c, "--workers=64");
    assert_int_equal(c.workers, CQ_MAX_WORKERS);
    cq_config_done(&c);
    PARSE_ERR("--workers: 65 is above the maximum 64", "--workers=65");
    PARSE_ERR("--workers: 256 is above the maximum 64", "--workers", "256");
}

static void test_bounds_errors(void **state)
{
    (void)state;
    PARSE_ERR("--workers: \"abc\" is not an integer", "--workers=abc");
    PARSE_ERR("--workers: \"\" is not an integer", "--workers=");
    PARSE_ERR("--workers: \"4x\" is not an integer", "--workers", "4x");
    PARSE_ERR("--workers: \" 4\" is not an integer", "--workers", " 4");
    PARSE_ERR("--workers: \"4k\" is not an integer", "--workers=4k");
    PARSE_ERR("--workers: -1 is below the minimum 0", "--workers=-1");
    PARSE_ERR("--max-packet-size: 70000 is above the maximum 65535", "--max-packet-size=70000");
    PARSE_ERR("--max-packet-size: 63 is below the minimum 64", "--max-packet-size", "63");
    PARSE_ERR("--conn-id-bits: 7 is below the minimum 8", "-mcb", "7");
    PARSE_ERR("--conn-id-bits: 32 is above the maximum 31", "-mcb=32");
    PARSE_ERR("--compression-type: 2 is above the maximum 1", "-ct=2");
    PARSE_ERR("--workers: 99999999999999999999 is above the maximum 64",
              "--workers=99999999999999999999");
    PARSE_ERR("--workers: -99999999999999999999 is below the minimum 0",
              "--workers=-99999999999999999999");
    PARSE_ERR("--sendq-hard-limit: \"2x\" is not a size (a number with an optional k, m or g "
              "suffix)",
              "--sendq-hard-limit=2x");
    PARSE_ERR("--sendq-hard-limit: \"2mb\" is not a size (a number with an optional k, m or g "
              "suffix)",
              "--sendq-hard-limit=2mb");
    PARSE_ERR("--sendq-hard-limit: 2g is above the maximum 1g", "--sendq-hard-limit=2g");
    PARSE_ERR("--sendq-soft-limit: 1k is below the minimum 4k", "--sendq-soft-limit=1k");
    PARSE_ERR("--sendq-soft-limit: 99999999999g is above the maximum 1g",
              "--sendq-soft-limit=99999999999g");
    PARSE_ERR("--dev: \"maybe\" is not a boolean (true or false)", "--dev=maybe");
    PARSE_ERR("--server-bypass-auth: \"\" is not one of: auto, true, false", "-sba=");
    PARSE_ERR("--server-bypass-auth: \"loopback\" is not one of: auto, true, false",
              "--server-bypass-auth=loopback");
    PARSE_ERR("--client-network: \"udp\" is not one of: tcp, ws, kcp", "-cn", "udp");
    PARSE_ERR("--server-network: \"quic\" is not one of: tcp, ws, kcp", "--server-network=quic");
    PARSE_ERR("--auth-provider: \"ldap\" is not one of: dev, file", "--auth-provider=ldap");
    PARSE_ERR("--log-level: \"loud\" is not a log level (debug, info, warn, error, off, or -1..3)",
              "-loglevel=loud");
}

static void test_syntax_errors(void **state)
{
    (void)state;
    PARSE_ERR("unknown option \"--bogus\"", "--bogus");
    PARSE_ERR("unknown option \"--bogus\"", "--bogus=1");
    PARSE_ERR("unknown option \"-x\"", "-x", "1");
    PARSE_ERR("unknown option \"---workers\"", "---workers=1");
    PARSE_ERR("unknown option \"--no-bogus\"", "--no-bogus");
    PARSE_ERR("--workers: missing value", "--workers");
    PARSE_ERR("--config: missing value", "--config");
    PARSE_ERR("--no-workers: only boolean options can be negated", "--no-workers");
    PARSE_ERR("--no-dev: takes no value", "--no-dev=true");
    PARSE_ERR("--help: takes no value", "--help=1");
    PARSE_ERR("unexpected argument \"foo\"", "foo");
    PARSE_ERR("unexpected argument \"-\"", "-");
    PARSE_ERR("unexpected argument \"--\"", "--");
    /* The error stops parsing before later arguments, even --help. */
    PARSE_ERR("--workers: \"x\" is not an integer", "--workers=x", "--help");
}

static void test_cross_checks(void **state)
{
    (void)state;
    PARSE_ERR("--sendq-soft-limit: 16m is above --sendq-hard-limit 8m", "--sendq-soft-limit=16m");
    PARSE_ERR("--auth-provider: file needs --auth-token-file", "--auth-provider=file");
    cq_config_t c;
    PARSE_OK(&c, "--sendq-soft-limit=8m");
    cq_config_done(&c);
}

/* A relay node needs an id its bits can hold and a name fit for subjects and ZooKeeper; without
 * --relay-nats neither is looked at. */
static void test_relay_checks(void **state)
{
    (void)state;
    PARSE_ERR("--relay-nats: the nodes find each other in ZooKeeper: set --relay-zk-hosts or "
              "--zk-hosts",
              "--relay-nats=nats://127.0.0.1:4222", "--relay-node-id=1");
    PARSE_ERR("--relay-node-id: 0 is not in 1..15 (--relay-node-bits 4)",
              "--relay-nats=nats://127.0.0.1:4222", "--relay-zk-hosts=127.0.0.1:2181");
    PARSE_ERR("--relay-node-id: 16 is not in 1..15 (--relay-node-bits 4)",
              "--relay-nats=nats://127.0.0.1:4222", "--relay-node-id=16",
              "--zk-hosts=127.0.0.1:2181");
    PARSE_ERR("--relay-node-id: 4 is not in 1..3 (--relay-node-bits 2)",
              "--relay-nats=nats://127.0.0.1:4222", "--relay-node-id=4", "--relay-node-bits=2",
              "--zk-hosts=127.0.0.1:2181");
    PARSE_ERR("--relay-cluster: \"a.b\" is not 1 to 32 of [A-Za-z0-9_-]",
              "--relay-nats=nats://127.0.0.1:4222", "--relay-node-id=1", "--relay-cluster=a.b",
              "--zk-hosts=127.0.0.1:2181");
    cq_config_t c;
    PARSE_OK(&c, "--relay-node-id=0", "--relay-cluster=a.b"); /* one node: not used */
    cq_config_done(&c);
    PARSE_OK(&c, "--relay-nats=nats://127.0.0.1:4222", "--relay-node-id=255", "--relay-node-bits=8",
             "--relay-cluster=prod-eu_1", "--relay-zk-hosts=127.0.0.1:2181");
    assert_int_equal(c.relay_node_id, 255);
    assert_string_equal(c.relay_cluster, "prod-eu_1");
    cq_config_done(&c);
}

/* --server-bypass-auth is auto, or a boolean in any spelling (channeld's -sba is a Go bool). */
static void test_bypass_auto(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_OK(&c, "-sba");
    assert_string_equal(c.server_bypass_auth, "true");
    cq_config_done(&c);
    PARSE_OK(&c, "--server-bypass-auth", "--dev");
    assert_string_equal(c.server_bypass_auth, "true");
    assert_true(c.dev);
    cq_config_done(&c);
    PARSE_OK(&c, "-sba=yes", "--server-bypass-auth=auto");
    assert_string_equal(c.server_bypass_auth, "auto");
    cq_config_done(&c);
    PARSE_OK(&c, "-sba=ON");
    assert_string_equal(c.server_bypass_auth, "true");
    cq_config_done(&c);
    PARSE_OK(&c, "-sba=f");
    assert_string_equal(c.server_bypass_auth, "false");
    cq_config_done(&c);
}

/* The dev provider accepts every login: without --dev it may listen on loopback only. */
static void test_dev_provider_needs_dev(void **state)
{
    (void)state;
    cq_config_t c;
    PARSE_ERR("--auth-provider=dev accepts every login and --client-addr 0.0.0.0:12108 is not a "
              "loopback address: configure --auth-provider=file with --auth-token-file, keep the "
              "listeners on loopback, or add --dev",
              "--client-addr=0.0.0.0:12108");
    PARSE_ERR("--auth-provider=dev accepts every login and --server-addr :11288 is not a "
              "loopback address: configure --auth-provider=file with --auth-token-file, keep the "
              "listeners on loopback, or add --dev",
              "-sa", ":11288");
    PARSE_ERR("--auth-provider=dev accepts every login and --kcp-addr 192.0.2.1:1 is not a "
              "loopback address: configure --auth-provider=file with --auth-token-file, keep the "
              "listeners on loopback, or add --dev",
              "--kcp-addr=192.0.2.1:1");
    PARSE_ERR("--auth-provider=dev accepts every login and --server-ws-addr [::]:1 is not a "
              "loopback address: configure --auth-provider=file with --auth-token-file, keep the "
              "listeners on loopback, or add --dev",
              "--server-ws-addr=[::]:1");
    /* loopback everywhere (names and v6 too), --dev, or a real provider */
    PARSE_OK(&c, "--client-addr=localhost:1", "--server-addr=[::1]:2", "--ws-addr=127.0.0.2:3",
             "--wss-addr=", "--kcp-addr=");
    cq_config_done(&c);
    PARSE_OK(&c, "--client-addr=0.0.0.0:1", "--dev");
    cq_config_done(&c);
    PARSE_OK(&c, "--client-addr=0.0.0.0:1", "--auth-provider=file", "--auth-token-file=t.json");
    cq_config_done(&c);
    /* the durable-topic and admin ports have rules of their own */
    PARSE_OK(&c, "--mq-addr=0.0.0.0:1", "--mq-http-addr=:2", "--admin-addr=:3");
    cq_config_done(&c);
}

static void test_negative_value_taken_from_next_arg(void **state)
{
    (void)state;
    cq_config_t c;
    /* Like Go, a value option takes the next argument even if it starts with a dash. */
    PARSE_OK(&c, "--client-addr", "-dev", "--auth-provider=file", "--auth-token-file=t.json");
    assert_string_equal(c.client_addr, "-dev");
    assert_false(c.dev);
    cq_config_done(&c);
}

/* ---- config files --------------------------------------------------------------------- */

static void test_file(void **state)
{
    (void)state;
    char err[512];
    char *path = tu_write_temp("# chanqd test config\n"
                               "\n"
                               "   # indented comment\n"
                               "workers = 7\n"
                               "client-addr = \"0.0.0.0:12108\"\n"
                               "admin-addr = \"\"\n"
                               "ca=1.2.3.4:5\r\n"
                               "dev = true\n"
                               "log-level = warn\n"
                               "sendq-hard-limit = 2m\n"
                               "\tmax-packet-size\t=\t1024   \n"
                               "ready-file = /tmp/x y\n");
    cq_config_t c;
    cq_config_defaults(&c);
    assert_int_equal(cq_config_load_file(&c, path, err, sizeof(err)), 0);
    assert_int_equal(c.workers, 7);
    assert_string_equal(c.client_addr, "1.2.3.4:5");
    assert_string_equal(c.admin_addr, "");
    assert_true(c.dev);
    assert_int_equal(c.log_level, CQ_LOG_WARN);
    assert_int_equal(c.sendq_hard_limit, 2 * MIB);
    assert_int_equal(c.max_packet_size, 1024);
    assert_string_equal(c.ready_file, "/tmp/x y");
    assert_string_equal(c.config, path);
    cq_config_done(&c);
    /* The command line overrides the file, wherever --config appears. */
    PARSE_OK(&c, "--workers=3", "--config", path, "-loglevel=error");
    assert_int_equal(c.workers, 3);
    assert_true(c.dev);
    assert_int_equal(c.log_level, CQ_LOG_ERROR);
    assert_string_equal(c.config, path);
    cq_config_done(&c);
    tu_remove_temp(path);
}

static void expect_file_error(const char *text, const char *msg_after_path)
{
    char err[512], want[512];
    char *path = tu_write_temp(text);
    cq_config_t c;
    cq_config_defaults(&c);
    assert_int_equal(cq_config_load_file(&c, path, err, sizeof(err)), CQ_ECONFIG);
    snprintf(want, sizeof(want), "%s%s", path, msg_after_path);
    assert_string_equal(err, want);
    cq_config_done(&c);
    /* Through --config the message is the same. */
    char *argv[] = {"chanqd", "--config", path};
    cq_config_defaults(&c);
    assert_int_equal(cq_config_parse_args(&c, 3, argv, err, sizeof(err)), CQ_ECONFIG);
    assert_string_equal(err, want);
    cq_config_done(&c);
    tu_remove_temp(path);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("workers = 1\nworkers = abc\n", ":2: workers: \"abc\" is not an integer");
    expect_file_error("# x\nmax-packet-size = 70000\n",
                      ":2: max-packet-size: 70000 is above the maximum 65535");
    expect_file_error("bogus = 1\n", ":1: unknown option \"bogus\"");
    expect_file_error("--workers = 1\n", ":1: unknown option \"--workers\"");
    expect_file_error("\n\nworkers 1\n", ":3: expected \"name = value\"");
    expect_file_error("config = other.conf\n", ":1: \"config\" cannot be used in a config file");
    expect_file_error("help = true\n", ":1: \"help\" cannot be used in a config file");
    expect_file_error("dev =\n", ":1: dev: \"\" is not a boolean (true or false)");
    expect_file_error("sendq-soft-limit = 1k\n",
                      ":1: sendq-soft-limit: 1k is below the minimum 4k");
    char err[256];
    cq_config_t c;
    cq_config_defaults(&c);
    assert_int_equal(cq_config_load_file(&c, "/nonexistent/chanqd.conf", err, sizeof(err)),
                     -ENOENT);
    assert_string_equal(err, "/nonexistent/chanqd.conf: No such file or directory");
    assert_string_equal(c.config, "");
    cq_config_done(&c);
    char *argv[] = {"chanqd", "--config=/nonexistent/chanqd.conf"};
    cq_config_defaults(&c);
    assert_int_equal(cq_config_parse_args(&c, 2, argv, err, sizeof(err)), -ENOENT);
    cq_config_done(&c);
}

/* ---- generated text ------------------------------------------------------------------- */

typedef struct run_args {
    int argc;
    char **argv;
    cq_config_t *c;
} run_args_t;

static int run_parse(void *p)
{
    run_args_t *a = p;
    char err[256];
    return cq_config_parse_args(a->c, a->argc, a->argv, err, sizeof(err));
}

/* Runs chanqd's argument parsing and returns its stdout; *ret gets the return code. */
static char *run_cli(cq_config_t *c, int argc, char **argv, int *ret)
{
    run_args_t a = {argc, argv, c};
    cq_config_defaults(c);
    return capture_stdout(run_parse, &a, ret);
}

static void test_help(void **state)
{
    (void)state;
    char *help = mem_output(cq_config_print_help);
    for (size_t i = 0; i < sizeof(all_opts) / sizeof(all_opts[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "  --%s", all_opts[i].name);
        if (!strstr(help, want))
            fail_msg("--help lacks %s", want);
        snprintf(want, sizeof(want), "(channeld: -%s)", all_opts[i].alias ? all_opts[i].alias : "");
        if (all_opts[i].alias && !strstr(help, want))
            fail_msg("--help lacks %s", want);
    }
    assert_non_null(strstr(help, "Default: \"127.0.0.1:12108\"."));
    assert_non_null(strstr(help, "Allowed: 64..65535."));
    cq_config_t c;
    int r;
    char *argv[] = {"chanqd", "--workers=2", "-help", "--bogus"};
    char *out = run_cli(&c, 4, argv, &r);
    assert_int_equal(r, 1);
    assert_string_equal(out, help);
    free(out);
    cq_config_done(&c);
    free(help);
}

static void test_version(void **state)
{
    (void)state;
    cq_config_t c;
    int r;
    char *argv[] = {"chanqd", "--version"};
    char *out = run_cli(&c, 2, argv, &r);
    assert_int_equal(r, 1);
    assert_true(strncmp(out, "chanqd ", 7) == 0);
    free(out);
    cq_config_done(&c);
}

static void test_markdown(void **state)
{
    (void)state;
    char *md = mem_output(cq_config_print_markdown);
    for (size_t i = 0; i < sizeof(all_opts) / sizeof(all_opts[0]); i++) {
        char want[96];
        snprintf(want, sizeof(want), "| `--%s` | %s%s%s |", all_opts[i].name,
                 all_opts[i].alias ? "`-" : "", all_opts[i].alias ? all_opts[i].alias : "",
                 all_opts[i].alias ? "`" : "");
        if (!strstr(md, want))
            fail_msg("markdown lacks %s", want);
    }
    /* Pipes inside cells are escaped so the table keeps its columns. */
    assert_non_null(strstr(md, "`dev\\|file`"));
    cq_config_t c;
    int r;
    char *argv[] = {"chanqd", "--config-markdown"};
    char *out = run_cli(&c, 2, argv, &r);
    assert_int_equal(r, 1);
    assert_string_equal(out, md);
    free(out);
    cq_config_done(&c);
    free(md);
}

static void test_doc_is_current(void **state)
{
    (void)state;
    char *md = mem_output(cq_config_print_markdown);
    char *doc = tu_read_source("doc/config.md", NULL);
    if (strcmp(md, doc) != 0)
        fail_msg("doc/config.md is stale: regenerate it with `chanqd --config-markdown > "
                 "doc/config.md`");
    free(doc);
    free(md);
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    char err[256];
    cq_config_t a, b;
    PARSE_OK(&a, "--workers=5", "-ca=:1", "--admin-addr=", "-dev", "-loglevel=error",
             "--sendq-soft-limit=12345", "--sendq-hard-limit=1g", "--no-sba", "--ready-file=/tmp/r",
             "--auth-provider=file", "--auth-token-file=t.json");
    char *dump = dump_string(&a);
    assert_non_null(strstr(dump, "\nworkers = 5\n"));
    assert_non_null(strstr(dump, "\nclient-addr = \":1\"\n"));
    assert_non_null(strstr(dump, "\nadmin-addr = \"\"\n"));
    assert_non_null(strstr(dump, "\nlog-level = error\n"));
    assert_non_null(strstr(dump, "\nsendq-hard-limit = 1g\n"));
    assert_non_null(strstr(dump, "\nsendq-soft-limit = 12345\n"));
    assert_non_null(strstr(dump, "\nserver-bypass-auth = \"false\"\n"));
    assert_null(strstr(dump, "\nconfig ="));
    char *path = tu_write_temp(dump);
    cq_config_defaults(&b);
    assert_int_equal(cq_config_load_file(&b, path, err, sizeof(err)), 0);
    char *dump2 = dump_string(&b);
    assert_string_equal(dump, dump2);
    /* --dump-config prints after every option is applied, wherever it appears. */
    int r;
    char *argv[] = {"chanqd", "--dump-config", "--config", path};
    cq_config_t c;
    char *out = run_cli(&c, 4, argv, &r);
    assert_int_equal(r, 1);
    assert_string_equal(out, dump);
    free(out);
    cq_config_done(&c);
    tu_remove_temp(path);
    free(dump2);
    free(dump);
    cq_config_done(&b);
    cq_config_done(&a);
}

static void test_defaults_dump_loads(void **state)
{
    (void)state;
    char err[256];
    cq_config_t a, b;
    cq_config_defaults(&a);
    char *dump = dump_string(&a);
    char *path = tu_write_temp(dump);
    cq_config_defaults(&b);
    b.workers = 99;
    assert_int_equal(cq_config_load_file(&b, path, err, sizeof(err)), 0);
    assert_int_equal(b.workers, 0);
    tu_remove_temp(path);
    free(dump);
    cq_config_done(&a);
    cq_config_done(&b);
}

const struct CMUnitTest test_config_cases[] = {
    cmocka_unit_test(test_defaults),
    cmocka_unit_test(test_types),
    cmocka_unit_test(test_aliases),
    cmocka_unit_test(test_go_bools),
    cmocka_unit_test(test_bounds_errors),
    cmocka_unit_test(test_workers_max_is_the_core_cap),
    cmocka_unit_test(test_syntax_errors),
    cmocka_unit_test(test_cross_checks),
    cmocka_unit_test(test_relay_checks),
    cmocka_unit_test(test_negative_value_taken_from_next_arg),
    cmocka_unit_test(test_bypass_auto),
    cmocka_unit_test(test_dev_provider_needs_dev),
    cmocka_unit_test(test_file),
    cmocka_unit_test(test_file_errors),
    cmocka_unit_test(test_help),
    cmocka_unit_test(test_version),
    cmocka_unit_test(test_markdown),
    cmocka_unit_test(test_doc_is_current),
    cmocka_unit_test(test_dump_round_trip),
    cmocka_unit_test(test_defaults_dump_loads),
};
const size_t test_config_count = sizeof(test_config_cases) / sizeof(test_config_cases[0]);
