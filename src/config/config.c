/* config.c - the option table and everything generated from it: command line, config file,
 * --help, --dump-config and the Markdown reference (doc/config.md). */
#include "cq_config.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef CQ_VERSION
#define CQ_VERSION "unknown"
#endif

/* ---- the table ------------------------------------------------------------------------ */

typedef enum { OPT_BOOL, OPT_INT, OPT_SIZE, OPT_STRING, OPT_LOGLEVEL, OPT_ACTION } opt_type_t;

typedef enum { ACT_NONE, ACT_HELP, ACT_VERSION, ACT_DUMP, ACT_MARKDOWN } opt_action_t;

#define F_CONFIG 1u /* the --config option: loaded before the rest, never in a file or a dump */
/* A string of choices "auto|true|false" that also reads like a boolean: bare --name is true,
 * --no-name false, and every boolean spelling is accepted (stored as "true" or "false"). */
#define F_AUTOBOOL 2u

typedef struct opt {
    const char *name;  /* long name: --name on the command line, name in a file */
    const char *alias; /* channeld's flag without the dash, or NULL */
    opt_type_t type;
    const char *def;     /* default, written as a user would (NULL for actions) */
    long long min, max;  /* OPT_INT and OPT_SIZE bounds */
    const char *choices; /* OPT_STRING: allowed values as "a|b", or NULL for any */
    const char *meta;    /* value placeholder in --help */
    size_t off;          /* offsetof(cq_config_t, field); unused for actions */
    opt_action_t action;
    unsigned flags;
    const char *help; /* one or more sentences */
} opt_t;

/* clang-format off */
#define OFF(f) offsetof(cq_config_t, f)
#define BOOL(n, a, f, d, h) {n, a, OPT_BOOL, d, 0, 0, NULL, NULL, OFF(f), ACT_NONE, 0, h}
#define INT(n, a, f, d, lo, hi, m, h) {n, a, OPT_INT, d, lo, hi, NULL, m, OFF(f), ACT_NONE, 0, h}
#define SIZE(n, a, f, d, lo, hi, h) {n, a, OPT_SIZE, d, lo, hi, NULL, "SIZE", OFF(f), ACT_NONE, 0, h}
#define STR(n, a, f, d, ch, m, h) {n, a, OPT_STRING, d, 0, 0, ch, m, OFF(f), ACT_NONE, 0, h}
#define LOGLVL(n, a, f, d, h) {n, a, OPT_LOGLEVEL, d, 0, 0, NULL, "LEVEL", OFF(f), ACT_NONE, 0, h}
#define ACTION(n, act, h) {n, NULL, OPT_ACTION, NULL, 0, 0, NULL, NULL, 0, act, 0, h}
#define AUTOBOOL(n, a, f, d, h) {n, a, OPT_STRING, d, 0, 0, "auto|true|false", "auto|BOOL", OFF(f), ACT_NONE, F_AUTOBOOL, h}
/* clang-format on */
#define KIB (1024LL)
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)

static const opt_t opts[] = {
    /* The maximum is the core's CQ_MAX_WORKERS (src/core/cq_limits.h); test_config.c checks. */
    INT("workers", NULL, workers, "0", 0, 64, "N",
        "Worker threads; 0 means one per CPU core, at most 64."),
    STR("io-uring", NULL, io_uring, "auto", "auto|on|off", "MODE",
        "Send each loop iteration's TCP writes in one io_uring submission: auto uses it when "
        "the kernel allows a ring; on refuses to start without one; off writes with write(2)."),
    STR("pin-workers", NULL, pin_workers, "auto", "auto|on|off", "MODE",
        "Pin worker i to the i-th CPU the process may use: on; auto pins only when there are "
        "more such CPUs than workers (one left for the other threads); off never."),
    STR("client-addr", "ca", client_addr, "127.0.0.1:12108", NULL, "HOST:PORT",
        "Address of the client listener. Port 0 picks a free port (see --ready-file)."),
    STR("server-addr", "sa", server_addr, "127.0.0.1:11288", NULL, "HOST:PORT",
        "Address of the server listener (game servers and the GLOBAL owner)."),
    STR("client-network", "cn", client_network, "tcp", "tcp|ws|kcp", "NETWORK",
        "Network of --client-addr: tcp, ws (WebSocket) or kcp (UDP), as channeld's -cn. "
        "--ws-addr and --kcp-addr add listeners beside it."),
    STR("server-network", "sn", server_network, "tcp", "tcp|ws|kcp", "NETWORK",
        "Network of --server-addr: tcp, ws or kcp."),
    BOOL("client-legacy-tag", NULL, client_legacy_tag, "false",
         "Read and write the pre-2023 dynamic packet tag on the client listener (old Go, JS and "
         "Unity clients)."),
    BOOL("server-legacy-tag", NULL, server_legacy_tag, "false",
         "Read and write the pre-2023 dynamic packet tag on the server listener."),
    /* transports (doc/transports.md) */
    STR("ws-addr", NULL, ws_addr, "127.0.0.1:12112", NULL, "HOST:PORT",
        "Address of the client WebSocket listener (ws://HOST:PORT plus --ws-path); empty "
        "disables it."),
    STR("wss-addr", NULL, wss_addr, "", NULL, "HOST:PORT",
        "Address of the client WebSocket-over-TLS listener; needs --tls-cert and --tls-key; "
        "empty disables it."),
    STR("kcp-addr", NULL, kcp_addr, "127.0.0.1:12108", NULL, "HOST:PORT",
        "UDP address of the client KCP listener (kcp-go compatible, no FEC, no encryption); "
        "empty disables it."),
    STR("server-ws-addr", NULL, server_ws_addr, "", NULL, "HOST:PORT",
        "Address of a WebSocket listener for server connections; empty disables it."),
    STR("server-kcp-addr", NULL, server_kcp_addr, "", NULL, "HOST:PORT",
        "UDP address of a KCP listener for server connections; empty disables it."),
    STR("ws-path", NULL, ws_path, "/", NULL, "PATH",
        "Request path of WebSocket upgrades; other paths get 404."),
    STR("ws-origins", NULL, ws_origins, "", NULL, "LIST",
        "Comma-separated Origin values allowed to upgrade (e.g. https://game.example), or * for "
        "any. Empty: on a loopback listener any Origin; on any other listener only a page of "
        "the listener's own origin (Origin host and port = Host header). Clients that send no "
        "Origin (not browsers) are always allowed."),
    SIZE("ws-max-message", NULL, ws_max_message, "256k", 1 * KIB, 16 * MIB,
         "Largest inbound WebSocket message; a larger one fails the connection with close "
         "1009. Messages are never truncated."),
    STR("tls-cert", NULL, tls_cert, "", NULL, "FILE", "PEM certificate chain of --wss-addr."),
    STR("tls-key", NULL, tls_key, "", NULL, "FILE", "PEM private key of --wss-addr."),
    STR("web-root", NULL, web_root, "", NULL, "DIR",
        "Directory served to plain HTTP GETs on the WebSocket listeners (the chat-rooms demo); "
        "empty serves nothing."),
    STR("kcp-profile", NULL, kcp_profile, "fast", "fast|kcp-go", "NAME",
        "KCP tuning of chanqd's side: fast (nodelay, 10 ms interval, fast resend, window 128) "
        "or kcp-go (kcp-go's defaults, as channeld runs)."),
    INT("kcp-idle-timeout-ms", NULL, kcp_idle_timeout_ms, "60000", 1000, 86400000, "MS",
        "Close a KCP connection after this long without a datagram (KCP has no close)."),
    INT("kcp-max-per-addr", NULL, kcp_max_per_addr, "1024", 1, 1000000, "N",
        "KCP connections (and closed ones still remembered) from one source IP address at the "
        "same time; players behind one carrier-grade NAT share an address."),
    STR("admin-addr", NULL, admin_addr, "127.0.0.1:8080", NULL, "HOST:PORT",
        "Address of the HTTP listener serving /metrics; empty disables it."),
    INT("admin-max-connections", NULL, admin_max_connections, "16", 1, 100000, "N",
        "Admin listener connections at the same time; more are closed on accept. A scraper "
        "and a health check need one each."),
    INT("admin-timeout-ms", NULL, admin_timeout_ms, "10000", 0, 3600000, "MS",
        "Longest life of an admin connection (one request and its answer) from accept; 0 "
        "disables. Slower peers, e.g. one sending its request a byte at a time, are closed."),
    BOOL("dev", "dev", dev, "false",
         "Development mode: allows --auth-provider=dev (every AUTH accepted) on listeners that "
         "are not on loopback; without it chanqd refuses to start that way."),
    LOGLVL("log-level", "loglevel", log_level, "info",
           "Lowest level logged; channeld's numbers -1 (debug) to 3 are accepted too."),
    STR("client-fsm", "cfsm", client_fsm, "", NULL, "FILE",
        "Client connection FSM file (channeld format); empty uses the built-in "
        "client_non_authoratative_fsm.json."),
    STR("server-fsm", "sfsm", server_fsm, "", NULL, "FILE",
        "Server connection FSM file (channeld format); empty uses the built-in "
        "server_authoratative_fsm.json."),
    STR("channel-settings", "chs", channel_settings, "", NULL, "FILE",
        "Channel settings file (channeld format); empty uses the built-in "
        "channel_settings_hifi.json."),
    STR("spatial-settings", "scc", spatial_settings, "", NULL, "LAYOUT|FILE",
        "Spatial controller (channeld's spatial_static JSON, plus chanq's optional \"Handover\" "
        "section, doc/spatial.md): a shipped layout (2x2, 4x1, benchmark, tanks_small, "
        "tanks_big) or a file. Empty: no spatial channels."),
    INT("spatial-chan-start", "scs", spatial_chan_start, "65536", 1, 16777216, "ID",
        "First spatial channel id: cell i is this + i."),
    INT("entity-chan-start", "ecs", entity_chan_start, "524288", 2, 2147483647, "ID",
        "First entity channel id: CREATE_ENTITY_CHANNEL needs entityId >= this."),
    AUTOBOOL("server-bypass-auth", "sba", server_bypass_auth, "auto",
             "Server connections skip authentication (any token is accepted): auto only for "
             "connections from a loopback address, true for every server connection (channeld's "
             "default), false never. A bare --server-bypass-auth means true."),
    BOOL("server-conn-recoverable", "scr", server_conn_recoverable, "false",
         "A server connection that drops unexpectedly can be recovered by a new server "
         "connection authenticating with the same PIT: it takes over the old connection id, "
         "ownerships and subscriptions (ChannelOwnerLost/ChannelOwnerRecovered, "
         "RECOVERY_CHANNEL_DATA, RECOVERY_END)."),
    INT("server-conn-recover-timeout-ms", "scrt", server_conn_recover_timeout_ms, "0", 0, 86400000,
        "MS", "How long a dropped server connection stays recoverable; 0 = forever."),
    INT("compression-type", "ct", compression_type, "0", 0, 1, "N",
        "Compression advertised to clients in AuthResult: 0 none, 1 Snappy."),
    STR("auth-provider", NULL, auth_provider, "dev", "dev|file", "NAME",
        "How AUTH is checked: dev accepts every login; file checks the token against "
        "--auth-token-file. dev needs --dev unless every client and server listener is on a "
        "loopback address."),
    STR("auth-token-file", NULL, auth_token_file, "", NULL, "FILE",
        "JSON object mapping player identifier (PIT) to login token, for --auth-provider=file; "
        "reloaded on SIGHUP (a file that does not load keeps the current tokens)."),
    INT("auth-timeout-ms", "cat", auth_timeout_ms, "5000", 0, 3600000, "MS",
        "Close connections that have not authenticated after this many milliseconds; 0 "
        "disables."),
    INT("max-failed-auth", "mfaa", max_failed_auth, "5", 0, 1000, "N",
        "Close a connection after this many failed AUTH attempts; 0 means no limit. A "
        "successful AUTH resets the connection's count."),
    INT("auth-addr-max-failures", NULL, auth_addr_max_failures, "10", 0, 1000000, "N",
        "Failed authentications (channel AUTH, MQ connect, MQ HTTP Authorization) from one "
        "source IP address, across connections, before the address is blocked for "
        "--auth-addr-backoff-ms; while blocked every authentication from it is refused, a right "
        "one included. A success does not reset the count. 0 disables the budget."),
    INT("auth-addr-window-ms", NULL, auth_addr_window_ms, "60000", 1, 86400000, "MS",
        "An address's failures and backoff are forgotten after this long without a failure "
        "(counted from the end of its last block)."),
    INT("auth-addr-backoff-ms", NULL, auth_addr_backoff_ms, "10000", 1, 86400000, "MS",
        "How long an address over --auth-addr-max-failures is blocked; doubled for each "
        "further block in a row, at most 64 times."),
    INT("conn-id-bits", "mcb", conn_id_bits, "31", 8, 31, "N", "Maximum bits of a connection id."),
    INT("idle-timeout-ms", NULL, idle_timeout_ms, "0", 0, 86400000, "MS",
        "Close connections that send nothing for this many milliseconds; 0 disables."),
    INT("tcp-keepalive-s", NULL, tcp_keepalive_s, "60", 0, 32767, "SECONDS",
        "TCP keepalive idle time in seconds; 0 disables keepalive."),
    INT("max-packet-size", NULL, max_packet_size, "65535", 64, 65535, "BYTES",
        "Largest inbound packet body; a larger one closes the connection."),
    INT("max-connections", NULL, max_connections, "0", 0, 10000000, "N",
        "Channel connections (every client and server listener and transport) at the same "
        "time; more are closed on accept. 0: what the open-file limit leaves after the other "
        "caps and --fd-reserve, at most 100000. A value that does not fit in the open-file "
        "limit stops chanqd at start."),
    INT("fd-reserve", NULL, fd_reserve, "256", 0, 1000000, "N",
        "File descriptors chanqd keeps for itself beyond the connection caps (store files, "
        "listeners, loops, timers, logs). At start chanqd raises its open-file limit "
        "(RLIMIT_NOFILE) to the hard limit and refuses to start when --max-connections, "
        "--mq-max-connections, --mq-http-max-connections, --admin-max-connections and this do "
        "not fit in it."),
    INT("max-channels", NULL, max_channels, "65535", 1, 65535, "N",
        "Channels alive at the same time (GLOBAL included); a CREATE_CHANNEL beyond closes the "
        "creator, logged and counted in chanq_limit_closed."),
    INT("max-subs-per-conn", NULL, max_subs_per_conn, "1024", 1, 65535, "N",
        "Channel subscriptions per client connection; a SUB beyond closes the connection it "
        "was for, logged and counted in chanq_limit_closed."),
    INT("max-subs-per-server", NULL, max_subs_per_server, "100000", 1, 16777216, "N",
        "Channel subscriptions per server connection, its own subscription to each channel it "
        "creates included (a game server owns an entity channel per entity); a SUB or creation "
        "beyond closes the server, logged and counted in chanq_limit_closed."),
    SIZE("sendq-soft-limit", NULL, sendq_soft_limit, "1m", 4 * KIB, GIB,
         "Queued outbound bytes a connection may hold for at most --sendq-soft-seconds."),
    INT("sendq-soft-seconds", NULL, sendq_soft_seconds, "10", 0, 3600, "SECONDS",
        "Seconds a connection may stay over --sendq-soft-limit before it is closed."),
    SIZE("sendq-data-limit", NULL, sendq_data_limit, "256k", 0, GIB,
         "Queued outbound bytes above which a connection is behind: its channel-data fan-outs "
         "are not queued, and it gets the channel's full state (everything it missed, merged) "
         "once it is below again. Replies, handovers and subscriptions are always queued. "
         "Never above --sendq-soft-limit; 0 turns it off (doc/spatial.md, Overload)."),
    STR("channel-data-types", NULL, channel_data_types, "", NULL, "FILES",
        "Comma-separated descriptor sets (protoc --include_imports --descriptor_set_out) of the "
        "game's channel data types; channels of a known type are merged by schema, others by "
        "protobuf's concatenation."),
    SIZE("max-channel-data-size", NULL, max_channel_data_size, "1m", 4 * KIB, GIB,
         "Largest state of one channel's data; updates that would grow it beyond are refused."),
    SIZE("sendq-hard-limit", NULL, sendq_hard_limit, "8m", 4 * KIB, GIB,
         "Queued outbound bytes that close a connection at once."),
    STR("ready-file", NULL, ready_file, "", NULL, "FILE",
        "Once listening, write \"client=HOST:PORT server=HOST:PORT admin=HOST:PORT "
        "mq=HOST:PORT mqhttp=HOST:PORT ws=HOST:PORT wss=HOST:PORT kcp=HOST:PORT\" and a newline "
        "to this file (for tests using port 0); a disabled listener is written as -."),
    STR("mq-addr", NULL, mq_addr, "127.0.0.1:12110", NULL, "HOST:PORT",
        "Address of the durable-topic listener (seed protocol, doc/protocol-mq.md); empty "
        "disables durable topics."),
    STR("mq-http-addr", NULL, mq_http_addr, "127.0.0.1:12111", NULL, "HOST:PORT",
        "Address of the durable-topic HTTP/JSON API (doc/protocol-mq.md, HTTP section), served "
        "by the same loop as --mq-addr; empty disables it."),
    STR("store-backend", NULL, store_backend, "sqlite", "sqlite|mysql", "NAME",
        "Where durable topics are stored: sqlite (a file in --store-dir) or mysql (MariaDB at "
        "--mysql-host)."),
    STR("store-dir", NULL, store_dir, "chanq-data", NULL, "DIR",
        "Data directory of the sqlite store (chanq.db); created if missing."),
    STR("mysql-host", NULL, mysql_host, "127.0.0.1", NULL, "HOST",
        "MariaDB server of --store-backend=mysql."),
    INT("mysql-port", NULL, mysql_port, "3306", 1, 65535, "PORT", "MariaDB server port."),
    STR("mysql-user", NULL, mysql_user, "", NULL, "USER",
        "MariaDB user; empty uses the client library's default (the login name)."),
    STR("mysql-password", NULL, mysql_password, "", NULL, "PASSWORD",
        "MariaDB password; empty means none."),
    STR("mysql-database", NULL, mysql_database, "chanq", NULL, "NAME",
        "MariaDB database ([A-Za-z0-9_]{1,64}); created if missing."),
    INT("shard", NULL, shard, "0", 0, 1023, "N",
        "The durable-topic shard this server belongs to (doc/cluster.md). Used with "
        "--zk-hosts."),
    STR("zk-hosts", NULL, zk_hosts, "", NULL, "LIST",
        "ZooKeeper ensemble (host:port,...) deciding each shard's master; empty runs a single "
        "node that is always master."),
    STR("zk-root", NULL, zk_root, "/chanq", NULL, "PATH",
        "The cluster's ZooKeeper subtree: shards/N/members and shards/N/epoch live under it."),
    INT("zk-session-ms", NULL, zk_session_ms, "4000", 1000, 60000, "MS",
        "ZooKeeper session timeout asked for. A master stops acknowledging writes half of it "
        "after its last heartbeat answer, before its session can expire; a new master is "
        "elected about this long after the old one died."),
    STR("cluster-advertise", NULL, cluster_advertise, "", NULL, "HOST:PORT",
        "The seed-protocol address SDKs should use for this server, published in ZooKeeper; "
        "empty publishes --mq-addr."),
    BOOL("cluster-promote", NULL, cluster_promote, "false",
         "Let a server whose MariaDB is a standby become master when the master is gone: it "
         "fences the old primary, waits for what it received, and promotes its database. Off: "
         "the standby only serves reads, as the seed's design says."),
    INT("cluster-db-down-ms", NULL, cluster_db_down_ms, "5000", 100, 600000, "MS",
        "A master whose MariaDB does not answer for this long gives up its role."),
    STR("slave-reads", NULL, slave_reads, "on", "on|off", "on|off",
        "Whether a slave serves reads (consume, offset, topics, watch) while its shard has a "
        "master: on serves them from its standby; off is the seed's standby, which serves "
        "nobody until the master is gone: reads get err_code 20 read_on_master naming the "
        "master (doc/cluster.md \"Standby reads\")."),
    /* Relay nodes (issue 23, doc/relay-cluster.md). */
    STR("relay-nats", NULL, relay_nats, "", NULL, "URLS",
        "nats-server URLs (nats://host:port,...) of the relay's data plane: chanqd runs as one "
        "node of a relay of several (doc/relay-cluster.md). Empty runs one node alone, with no "
        "NATS."),
    INT("relay-node-id", NULL, relay_node_id, "0", 0, 255, "N",
        "This relay node's id, 1 .. 2^--relay-node-bits - 1, unique in the relay. Needed with "
        "--relay-nats."),
    INT("relay-node-bits", NULL, relay_node_bits, "4", 1, 8, "N",
        "How many top bits of the connection and channel ids chanqd allocates name the node "
        "(doc/relay-cluster.md); the rest are the node's own. Every node of a relay must use "
        "the same value."),
    STR("relay-cluster", NULL, relay_cluster, "default", NULL, "NAME",
        "The relay's name ([A-Za-z0-9_-]{1,32}): its NATS subjects (chanq.NAME.node.ID) and "
        "its ZooKeeper subtree. Nodes with the same name form one relay."),
    STR("relay-zk-hosts", NULL, relay_zk_hosts, "", NULL, "LIST",
        "ZooKeeper ensemble (host:port,...) where the relay's nodes find each other "
        "(--zk-root/relay/NAME); empty uses --zk-hosts. A relay node needs one of them."),
    STR("relay-advertise-host", NULL, relay_advertise_host, "", NULL, "HOST",
        "The host a relay node's client addresses (TCP, WS, WSS, KCP) carry in its reports to "
        "the managers, which list them to clients in svrconfig (doc/mgr.md); empty: the bound "
        "address, and a listener bound to a wildcard (0.0.0.0, [::]) is not reported."),
    STR("relay-nats-user", NULL, relay_nats_user, "", NULL, "USER",
        "User of nats-server's user/password authorization; empty: none (or in the URL)."),
    STR("relay-nats-password", NULL, relay_nats_password, "", NULL, "PASSWORD",
        "Password of --relay-nats-user."),
    STR("relay-nats-token", NULL, relay_nats_token, "", NULL, "TOKEN",
        "Token of nats-server's token authorization; empty: none."),
    BOOL("relay-nats-tls", NULL, relay_nats_tls, "false",
         "Require TLS to nats-server (implied by --relay-nats-tls-ca)."),
    STR("relay-nats-tls-ca", NULL, relay_nats_tls_ca, "", NULL, "FILE",
        "PEM file of the CAs trusted for nats-server's certificate."),
    STR("relay-nats-tls-cert", NULL, relay_nats_tls_cert, "", NULL, "FILE",
        "PEM client certificate chain for nats-server's mutual TLS (with --relay-nats-tls-key)."),
    STR("relay-nats-tls-key", NULL, relay_nats_tls_key, "", NULL, "FILE",
        "PEM private key of --relay-nats-tls-cert."),
    STR("repl-admin-user", NULL, repl_admin_user, "root", NULL, "USER",
        "MariaDB user for replication control (read_only, promotion, status); needs SUPER or "
        "the REPLICATION and READ_ONLY ADMIN privileges. --mysql-user must NOT have them, or "
        "read_only would not fence it."),
    STR("repl-admin-password", NULL, repl_admin_password, "", NULL, "PASSWORD",
        "Password of --repl-admin-user; empty means none."),
    STR("repl-user", NULL, repl_user, "repl", NULL, "USER",
        "MariaDB user a standby replicates as (CHANGE MASTER TO ... MASTER_USER)."),
    STR("repl-password", NULL, repl_password, "", NULL, "PASSWORD", "Password of --repl-user."),
    INT("repl-semi-sync-timeout-ms", NULL, repl_semi_sync_timeout_ms, "2000", 1, 3600000, "MS",
        "rpl_semi_sync_master_timeout set on the master's MariaDB: how long a commit waits "
        "for the standby's receipt before semi-sync falls back to async "
        "(chanq_mq_repl_semi_sync_on 0)."),
    BOOL("repl-semi-sync-wait-no-slave", NULL, repl_semi_sync_wait_no_slave, "true",
         "rpl_semi_sync_master_wait_no_slave: with no standby connected, true makes a commit "
         "wait the timeout before falling back; false falls back at once."),
    /* The management service (issue 13, doc/mgr.md): the manager role's own options, then a
     * durable-topic server's link to its managers. */
    STR("role", NULL, role, "server", "server|mgr", "NAME",
        "What this process is: server (channels and durable topics) or mgr (the management "
        "service: the seed's management protocol on --mgr-addr and the admin console on "
        "--mgr-http-addr)."),
    STR("mgr-addr", NULL, mgr_addr, "127.0.0.1:12120", NULL, "HOST:PORT",
        "--role mgr: the management protocol listener (SDKs ask it for servers, servers "
        "report to it and take its commands)."),
    STR("mgr-http-addr", NULL, mgr_http_addr, "127.0.0.1:12121", NULL, "HOST:PORT",
        "--role mgr: the admin console and its JSON API; empty disables it."),
    STR("mgr-state-file", NULL, mgr_state_file, "chanq-mgr-state.json", NULL, "FILE",
        "--role mgr without --zk-hosts: where the managed configuration (modules, "
        "permissions, topics, offline servers) is kept. With --zk-hosts it lives in "
        "ZooKeeper under --zk-root."),
    STR("mgr-admin-token-file", NULL, mgr_admin_token_file, "", NULL, "FILE",
        "--role mgr: file holding the console's admin token. Empty: a random token is "
        "generated at start, written next to --mgr-state-file (mode 0600) and its path "
        "logged."),
    STR("mgr-audit-log", NULL, mgr_audit_log, "chanq-mgr-audit.log", NULL, "FILE",
        "--role mgr: every change made through the console or the API is appended here, one "
        "JSON line each."),
    STR("mgr-http-hosts", NULL, mgr_http_hosts, "127.0.0.1,localhost,[::1]", NULL, "LIST",
        "--role mgr: Host names the console answers (another Host gets 421, against DNS "
        "rebinding); * allows any."),
    INT("mgr-max-connections", NULL, mgr_max_connections, "1024", 1, 1000000, "N",
        "--role mgr: management-protocol connections at the same time; more are closed on "
        "accept."),
    INT("mgr-http-max-connections", NULL, mgr_http_max_connections, "64", 1, 100000, "N",
        "--role mgr: console connections at the same time; more are closed on accept."),
    INT("mgr-auth-timeout-ms", NULL, mgr_auth_timeout_ms, "10000", 0, 3600000, "MS",
        "--role mgr: close management connections whose first request has not come this "
        "long after accept; 0 disables."),
    INT("mgr-idle-timeout-ms", NULL, mgr_idle_timeout_ms, "60000", 0, 86400000, "MS",
        "--role mgr: close management connections that sent no whole frame for this long; 0 "
        "disables. Servers report every --mgr-report-ms."),
    INT("mgr-http-timeout-ms", NULL, mgr_http_timeout_ms, "30000", 0, 3600000, "MS",
        "--role mgr: close console connections with no answer for this long; 0 disables."),
    INT("mgr-stale-ms", NULL, mgr_stale_ms, "6000", 100, 3600000, "MS",
        "--role mgr: a server whose reports stopped this long ago is marked stale and left "
        "out of server lists."),
    INT("mgr-lag-alert-ms", NULL, mgr_lag_alert_ms, "30000", 1, 86400000, "MS",
        "--role mgr: replication lag over this raises the shard's alert "
        "(chanq_mgr_repl_lag_alert 1); the seed's threshold is 30 s."),
    INT("mgr-chart-ms", NULL, mgr_chart_ms, "10000", 100, 600000, "MS",
        "--role mgr: the console's charts (produce rates, consumers' lag, replication lag, "
        "connections) take a sample this often and keep the last hour of them, in memory."),
    STR("mgr-servers", NULL, mgr_servers, "", NULL, "LIST",
        "--role server: managers (host:port,...) this server reports to and takes commands "
        "from; empty: not managed."),
    STR("mgr-token-file", NULL, mgr_token_file, "", NULL, "FILE",
        "File holding the secret servers present to the manager (both roles read it). "
        "Empty on the manager refuses every server report unless --dev."),
    INT("mgr-report-ms", NULL, mgr_report_ms, "2000", 100, 600000, "MS",
        "--role server: how often this server sends its figures (sync_serverinfo) to the "
        "manager."),
    INT("group-id", NULL, group_id, "0", 0, 2147483647, "N",
        "--role server: the seed's group_id, the server group this server belongs to; modules "
        "may be limited to groups."),
    INT("appid", NULL, appid, "0", 0, 2147483647, "N",
        "--role server: the seed's appid, this process's unique id at the manager; 0 derives "
        "one from --shard and the advertised port."),
    STR("bridge-file", NULL, bridge_file, "", NULL, "FILE",
        "JSON bindings that deliver durable topics' messages into channels: {\"bindings\": "
        "[{\"topic\": \"release\", \"broadcast\": \"global\", \"msg_type\": 200}, "
        "{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 201}]} "
        "(doc/bridge.md). Needs --mq-addr. Empty: none. Reloaded on SIGHUP (a file that does "
        "not load keeps the bindings in force). A managed server (--mgr-servers) takes the "
        "manager's bindings instead once the manager saved some; from then on the file is not "
        "read (doc/mgr.md \"Bindings\")."),
    INT("bridge-ring-events", NULL, bridge_ring_events, "8192", 1, 1048576, "N",
        "Live events of each broadcast-bound topic kept in memory for resumes (doc/bridge.md "
        "\"Resume\"): a client whose position is among them catches up without reading the "
        "store."),
    INT("bridge-resume-chunk", NULL, bridge_resume_chunk, "512", 1, 4096, "N",
        "Events per chunk of a resume's catch-up, and rows per store read (doc/bridge.md "
        "\"Resume\"); the connection asks for the next chunk once its send queue has room."),
    INT("bridge-resume-inflight", NULL, bridge_resume_inflight, "32", 1, 65536, "N",
        "Catch-up chunks handed to the workers and not yet queued for their connections, for "
        "all resumes together (doc/bridge.md \"Resume\"): a mass reconnect waits its turn "
        "rather than filling a worker with chunks to drain before its other work."),
    STR("bridge-follow", NULL, bridge_follow, "", NULL, "LIST",
        "Other shards whose bound topics the bridge delivers too (doc/bridge.md \"Shards\"): "
        "every server of each, as SHARD/HOST:PORT,... (their seed ports; this node's own shard "
        "is left out). The bridge reads each shard from its master, or its standby while it "
        "has none, over the seed protocol, and drops the copies a producer's retry stored on "
        "two shards. Empty: only this node's store."),
    INT("bridge-follow-module", NULL, bridge_follow_module, "0", 0, 2147483647, "N",
        "The module_id --bridge-follow connects as; it needs the consume right on the bound "
        "topics where the followed servers have permissions."),
    STR("bridge-follow-token-file", NULL, bridge_follow_token_file, "", NULL, "FILE",
        "File holding the token of --bridge-follow-module (trailing whitespace removed); empty: "
        "no token."),
    STR("mq-permissions-file", NULL, mq_permissions_file, "", NULL, "FILE",
        "JSON object {\"<module_id>\": {\"token\": \"...\", \"produce\": [\"topic\", \"*\"], "
        "\"consume\": [...], \"admin\": true}}; every module needs a token. Empty lets every "
        "module do everything from loopback addresses, and only read (consume, watch, offsets) "
        "from others. Reloaded on SIGHUP (a file that does not load keeps the current one)."),
    STR("mq-http-hosts", NULL, mq_http_hosts, "127.0.0.1,localhost,[::1]", NULL, "LIST",
        "Comma-separated host names the MQ HTTP API answers (the Host header, with or without "
        "a port); another Host gets 421, against DNS rebinding. * allows any."),
    STR("mq-http-origins", NULL, mq_http_origins, "", NULL, "LIST",
        "Comma-separated Origin values (e.g. https://ops.example) allowed to call the MQ HTTP "
        "API from a browser; a request with another Origin gets 403. Empty allows none."),
    SIZE("mq-max-content", NULL, mq_max_content, "64k", 1, 16 * MIB,
         "Largest content of one durable message; larger ones are refused, never truncated."),
    INT("mq-max-connections", NULL, mq_max_connections, "1024", 1, 1000000, "N",
        "Seed-protocol (--mq-addr) connections at the same time; more are closed on accept. "
        "Producers and consumers are backend services holding long-lived connections."),
    INT("mq-auth-timeout-ms", NULL, mq_auth_timeout_ms, "10000", 0, 3600000, "MS",
        "Close seed-protocol connections that have not completed connect this long after "
        "accept; 0 disables."),
    INT("mq-idle-timeout-ms", NULL, mq_idle_timeout_ms, "300000", 0, 86400000, "MS",
        "Close connected seed-protocol connections that neither sent a whole frame nor took "
        "any output (answers, pushes) for this long; 0 disables. A watcher of a quiet topic "
        "sends keepalive more often than this: the default leaves room for a keepalive every "
        "60 s to be missed four times."),
    INT("mq-http-max-connections", NULL, mq_http_max_connections, "256", 1, 1000000, "N",
        "HTTP API (--mq-http-addr) connections at the same time; more are closed on accept."),
    INT("mq-http-timeout-ms", NULL, mq_http_timeout_ms, "30000", 0, 3600000, "MS",
        "Close HTTP API connections that got no answer for this long, counted from accept or "
        "from the previous answer: a request not whole (or not answered) in time, and an idle "
        "keep-alive connection; 0 disables."),
    SIZE("mq-preauth-max-frame", NULL, mq_preauth_max_frame, "4k", 64, 16 * MIB,
         "Largest seed-protocol frame before a successful connect (a connect is a few hundred "
         "bytes); a larger one is answered bad_length and the connection closed."),
    SIZE("mq-input-budget", NULL, mq_input_budget, "64m", 64 * KIB, 64 * GIB,
         "Bytes of partial seed-protocol frames all connections may hold together; the "
         "connection whose bytes would go over it is answered busy and closed. At least the "
         "largest frame (--mq-max-content + 4 KiB, at least 1 MiB)."),
    INT("mq-max-pending", NULL, mq_max_pending, "100000", 1, 100000000, "N",
        "Durable writes pending in the store thread before producers get err busy."),
    SIZE("mq-sendq-soft-limit", NULL, mq_sendq_soft_limit, "0", 0, GIB,
         "Unsent bytes a durable-topic connection (seed or HTTP) may hold for at most "
         "--mq-sendq-soft-seconds; 0 disables the soft limit."),
    INT("mq-sendq-soft-seconds", NULL, mq_sendq_soft_seconds, "10", 0, 3600, "SECONDS",
        "Seconds a durable-topic connection may stay over --mq-sendq-soft-limit before it is "
        "closed as a slow consumer."),
    SIZE("mq-sendq-hard-limit", NULL, mq_sendq_hard_limit, "64m", 4 * KIB, GIB,
         "Unsent bytes that close a durable-topic connection at once (a slow consumer)."),
    INT("retention-check-s", NULL, retention_check_s, "60", 1, 86400, "SECONDS",
        "Seconds between purges of messages older than their topic's retention."),
    INT("shutdown-grace-ms", NULL, shutdown_grace_ms, "10000", 0, 600000, "MS",
        "On SIGTERM/SIGINT, how long durable-topic connections may take to receive the answers "
        "of the requests already read (acks of committed produces among them) before they are "
        "closed anyway; 0 closes them at once."),
    {"config", NULL, OPT_STRING, "", 0, 0, NULL, "FILE", OFF(config), ACT_NONE, F_CONFIG,
     "Load options from this file first; the command line overrides it."},
    ACTION("dump-config", ACT_DUMP,
           "Print the resulting configuration in config-file format "
           "and exit."),
    ACTION("config-markdown", ACT_MARKDOWN, "Print this reference as Markdown and exit."),
    ACTION("help", ACT_HELP, "Print this help and exit."),
    ACTION("version", ACT_VERSION, "Print the version and exit."),
};

/* ---- small helpers ---------------------------------------------------------------------- */

static void *field(cq_config_t *c, const opt_t *o)
{
    return (char *)c + o->off;
}

static const void *cfield(const cq_config_t *c, const opt_t *o)
{
    return (const char *)c + o->off;
}

/* The option called name[0..len) (long name or alias), or NULL. */
static const opt_t *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++) {
        const opt_t *o = &opts[i];
        if ((strlen(o->name) == len && strncmp(o->name, name, len) == 0) ||
            (o->alias && strlen(o->alias) == len && strncmp(o->alias, name, len) == 0))
            return o;
    }
    return NULL;
}

static void fmt_size(long long v, char *buf, size_t len)
{
    static const char suffix[] = "gmk";
    static const long long unit[] = {GIB, MIB, KIB};
    for (int i = 0; i < 3; i++) {
        if (v != 0 && v % unit[i] == 0) {
            snprintf(buf, len, "%lld%c", v / unit[i], suffix[i]);
            return;
        }
    }
    snprintf(buf, len, "%lld", v);
}

static const char *level_name(int lvl)
{
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    return lvl >= 0 && lvl < (int)CQ_ARRAY_SIZE(names) ? names[lvl] : "info";
}

/* ---- value parsers ---------------------------------------------------------------------- */

static int parse_bool(const char *v, bool *ret)
{
    static const char *const yes[] = {"true", "t", "1", "yes", "on"};
    static const char *const no[] = {"false", "f", "0", "no", "off"};
    for (size_t i = 0; i < CQ_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *ret = strcasecmp(v, yes[i]) == 0;
            return 0;
        }
    }
    return -1;
}

/* Parses a decimal integer, optionally followed by k/m/g when units is true. Returns 0,
 * -EINVAL (not a number) or -ERANGE (too large for long long). */
static int parse_number(const char *v, bool units, long long *ret)
{
    char *end;
    if (!(*v == '-' || *v == '+' || (*v >= '0' && *v <= '9')))
        return -EINVAL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || (end[-1] < '0' || end[-1] > '9'))
        return -EINVAL;
    if (errno == ERANGE)
        return -ERANGE;
    if (units && *end) {
        const char *u = strchr("kmg", *end | 0x20);
        long long mul = !u ? 0 : *u == 'k' ? KIB : *u == 'm' ? MIB : GIB;
        if (!mul || end[1] != '\0')
            return -EINVAL;
        if (x > LLONG_MAX / mul || x < LLONG_MIN / mul)
            return -ERANGE;
        x *= mul;
        end++;
    }
    if (*end)
        return -EINVAL;
    *ret = x;
    return 0;
}

static int check_range(const opt_t *o, const char *label, const char *v, long long x, int pr,
                       char *err, size_t errlen)
{
    char lim[32];
    bool low = pr == -ERANGE ? *v == '-' : x < o->min;
    if (pr == 0 && x >= o->min && x <= o->max)
        return 0;
    if (o->type == OPT_SIZE)
        fmt_size(low ? o->min : o->max, lim, sizeof(lim));
    else
        snprintf(lim, sizeof(lim), "%lld", low ? o->min : o->max);
    return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: %s is %s the %s %s", label, v,
                      low ? "below" : "above", low ? "minimum" : "maximum", lim);
}

static int set_number(cq_config_t *c, const opt_t *o, const char *label, const char *v, char *err,
                      size_t errlen)
{
    long long x = 0;
    int r = parse_number(v, o->type == OPT_SIZE, &x);
    if (r == -EINVAL && o->type == OPT_SIZE)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "%s: \"%s\" is not a size (a number with an optional k, m or g suffix)",
                          label, v);
    if (r == -EINVAL)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: \"%s\" is not an integer", label, v);
    r = check_range(o, label, v, x, r, err, errlen);
    if (r < 0)
        return r;
    if (o->type == OPT_SIZE)
        *(size_t *)field(c, o) = (size_t)x;
    else
        *(int *)field(c, o) = (int)x;
    return 0;
}

/* Whether v is one of the '|'-separated choices. */
static bool in_choices(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

static int set_string(cq_config_t *c, const opt_t *o, const char *label, const char *v, char *err,
                      size_t errlen)
{
    bool b;
    if ((o->flags & F_AUTOBOOL) && parse_bool(v, &b) == 0)
        v = b ? "true" : "false";
    if (o->choices && !in_choices(o->choices, v)) {
        char list[128];
        size_t n = 0;
        for (const char *p = o->choices; *p && n + 3 < sizeof(list); p++) {
            if (*p == '|') {
                list[n++] = ',';
                list[n++] = ' ';
            } else {
                list[n++] = *p;
            }
        }
        list[n] = '\0';
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: \"%s\" is not one of: %s", label, v, list);
    }
    char *s = cq_strdup(v);
    if (!s)
        return cq_err_fmt(err, errlen, -ENOMEM, "%s: out of memory", label);
    char **slot = field(c, o);
    cq_free(*slot);
    *slot = s;
    return 0;
}

/* Stores the text v into o's field. label names the option in error messages. */
static int set_value(cq_config_t *c, const opt_t *o, const char *label, const char *v, char *err,
                     size_t errlen)
{
    cq_log_level_t lvl;
    switch (o->type) {
    case OPT_BOOL:
        if (parse_bool(v, field(c, o)) < 0)
            return cq_err_fmt(err, errlen, CQ_ECONFIG,
                              "%s: \"%s\" is not a boolean (true or false)", label, v);
        return 0;
    case OPT_INT:
    case OPT_SIZE:
        return set_number(c, o, label, v, err, errlen);
    case OPT_STRING:
        return set_string(c, o, label, v, err, errlen);
    case OPT_LOGLEVEL:
        if (cq_log_parse_level(v, &lvl) < 0)
            return cq_err_fmt(
                err, errlen, CQ_ECONFIG,
                "%s: \"%s\" is not a log level (debug, info, warn, error, off, or -1..3)", label,
                v);
        *(int *)field(c, o) = (int)lvl;
        return 0;
    case OPT_ACTION:
        break;
    }
    return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: cannot be set", label);
}

/* Writes o's current value in c as it is written in a config file (strings quoted). */
static void print_value(const cq_config_t *c, const opt_t *o, FILE *f)
{
    char buf[32];
    switch (o->type) {
    case OPT_BOOL:
        fputs(*(const bool *)cfield(c, o) ? "true" : "false", f);
        break;
    case OPT_INT:
        fprintf(f, "%d", *(const int *)cfield(c, o));
        break;
    case OPT_SIZE:
        fmt_size((long long)*(const size_t *)cfield(c, o), buf, sizeof(buf));
        fputs(buf, f);
        break;
    case OPT_STRING:
        fprintf(f, "\"%s\"", *(char *const *)cfield(c, o));
        break;
    case OPT_LOGLEVEL:
        fputs(level_name(*(const int *)cfield(c, o)), f);
        break;
    case OPT_ACTION:
        break;
    }
}

/* ---- defaults, file, checks ----------------------------------------------------------- */

void cq_config_defaults(cq_config_t *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++) {
        if (opts[i].type == OPT_ACTION)
            continue;
        int r = set_value(c, &opts[i], opts[i].name, opts[i].def, NULL, 0);
        cq_assert(r == 0); /* a bad default is a bug; OOM at startup is fatal anyway */
    }
}

void cq_config_done(cq_config_t *c)
{
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++) {
        if (opts[i].type == OPT_STRING)
            cq_free(*(char **)field(c, &opts[i]));
    }
    memset(c, 0, sizeof(*c));
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* Applies one line of a config file; where is "PATH:LINE". */
static int load_line(cq_config_t *c, char *line, const char *where, char *err, size_t errlen)
{
    char *s = trim(line);
    if (*s == '\0' || *s == '#')
        return 0;
    char *eq = strchr(s, '=');
    if (!eq)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: expected \"name = value\"", where);
    *eq = '\0';
    char *name = trim(s), *value = trim(eq + 1);
    size_t vlen = strlen(value);
    if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
        value[vlen - 1] = '\0';
        value++;
    }
    const opt_t *o = find_opt(name, strlen(name));
    if (!o)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: unknown option \"%s\"", where, name);
    if (o->type == OPT_ACTION || (o->flags & F_CONFIG))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: \"%s\" cannot be used in a config file",
                          where, name);
    char label[600];
    snprintf(label, sizeof(label), "%.500s: %s", where, o->name);
    return set_value(c, o, label, value, err, errlen);
}

int cq_config_load_file(cq_config_t *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        return cq_err_fmt(err, errlen, -e, "%s: %s", path, strerror(e));
    }
    char *line = NULL, where[512];
    size_t cap = 0;
    int r = 0;
    for (int lineno = 1; r == 0 && getline(&line, &cap, f) >= 0; lineno++) {
        snprintf(where, sizeof(where), "%s:%d", path, lineno);
        r = load_line(c, line, where, err, errlen);
    }
    if (r == 0 && ferror(f))
        r = cq_err_fmt(err, errlen, -EIO, "%s: read error", path);
    free(line); /* allocated by getline() */
    fclose(f);
    if (r == 0)
        r = set_value(c, find_opt("config", 6), "--config", path, err, errlen);
    return r;
}

/* --auth-provider=dev accepts every AUTH: without --dev it may only listen on loopback, so that
 * a deployment that forgot to configure authentication does not start open to the network.
 * The durable-topic and admin ports have rules of their own (permissions file, loopback peers). */
static int check_dev_provider(const cq_config_t *c, char *err, size_t errlen)
{
    static const char *const names[] = {"client-addr",    "server-addr", "ws-addr",
                                        "wss-addr",       "kcp-addr",    "server-ws-addr",
                                        "server-kcp-addr"};
    const char *const addrs[] = {c->client_addr, c->server_addr,    c->ws_addr,        c->wss_addr,
                                 c->kcp_addr,    c->server_ws_addr, c->server_kcp_addr};
    if (c->dev || strcmp(c->auth_provider, "dev") != 0)
        return 0;
    for (size_t i = 0; i < CQ_ARRAY_SIZE(addrs); i++)
        if (addrs[i] && *addrs[i] && !cq_peer_is_loopback(addrs[i]))
            return cq_err_fmt(err, errlen, CQ_ECONFIG,
                              "--auth-provider=dev accepts every login and --%s %s is not a "
                              "loopback address: configure --auth-provider=file with "
                              "--auth-token-file, keep the listeners on loopback, or add --dev",
                              names[i], addrs[i]);
    return 0;
}

/* A relay node needs an id its bits can hold, and a name fit for a NATS subject token and a
 * ZooKeeper node. */
static int check_relay(const cq_config_t *c, char *err, size_t errlen)
{
    if (!*c->relay_nats)
        return 0;
    if (!*c->relay_zk_hosts && !*c->zk_hosts)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "--relay-nats: the nodes find each other in ZooKeeper: set "
                          "--relay-zk-hosts or --zk-hosts");
    int max = (1 << c->relay_node_bits) - 1;
    if (c->relay_node_id < 1 || c->relay_node_id > max)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "--relay-node-id: %d is not in 1..%d (--relay-node-bits %d)",
                          c->relay_node_id, max, c->relay_node_bits);
    size_t n = strlen(c->relay_cluster);
    if (n < 1 || n > 32 ||
        strspn(c->relay_cluster,
               "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != n)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "--relay-cluster: \"%s\" is not 1 to 32 of [A-Za-z0-9_-]",
                          c->relay_cluster);
    return 0;
}

int cq_config_check(const cq_config_t *c, char *err, size_t errlen)
{
    if (c->sendq_soft_limit > c->sendq_hard_limit) {
        char soft[32], hard[32];
        fmt_size((long long)c->sendq_soft_limit, soft, sizeof(soft));
        fmt_size((long long)c->sendq_hard_limit, hard, sizeof(hard));
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "--sendq-soft-limit: %s is above --sendq-hard-limit %s", soft, hard);
    }
    if (c->mq_sendq_soft_limit > c->mq_sendq_hard_limit) {
        char soft[32], hard[32];
        fmt_size((long long)c->mq_sendq_soft_limit, soft, sizeof(soft));
        fmt_size((long long)c->mq_sendq_hard_limit, hard, sizeof(hard));
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "--mq-sendq-soft-limit: %s is above --mq-sendq-hard-limit %s", soft,
                          hard);
    }
    int r = check_relay(c, err, errlen);
    if (r < 0)
        return r;
    if (strcmp(c->auth_provider, "file") == 0 && c->auth_token_file[0] == '\0')
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "--auth-provider: file needs --auth-token-file");
    return check_dev_provider(c, err, errlen);
}

/* ---- command line --------------------------------------------------------------------- */

typedef struct arg {
    const opt_t *o;
    const char *value; /* NULL for an action */
    int used;          /* argv entries consumed */
    char label[80];    /* "--name" */
} arg_t;

/* Resolves the option named by flag[0..len), handling the --no- prefix of booleans. */
static const opt_t *resolve_name(const char *flag, size_t len, bool *negated)
{
    const opt_t *o = find_opt(flag, len);
    *negated = false;
    if (!o && len > 3 && strncmp(flag, "no-", 3) == 0) {
        o = find_opt(flag + 3, len - 3);
        *negated = o != NULL;
    }
    return o;
}

/* Splits argv[i] (and maybe argv[i + 1]) into an option and its value. */
static int split_arg(int argc, char **argv, int i, arg_t *a, char *err, size_t errlen)
{
    const char *s = argv[i];
    if (s[0] != '-' || s[1] == '\0' || (s[1] == '-' && s[2] == '\0'))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "unexpected argument \"%s\"", s);
    const char *flag = s + (s[1] == '-' ? 2 : 1), *eq = strchr(flag, '=');
    size_t len = eq ? (size_t)(eq - flag) : strlen(flag);
    bool negated;
    a->o = resolve_name(flag, len, &negated);
    if (!a->o)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "unknown option \"%.*s\"",
                          (int)(flag - s + (ptrdiff_t)len), s);
    snprintf(a->label, sizeof(a->label), "--%s%s", negated ? "no-" : "", a->o->name);
    a->used = 1;
    a->value = eq ? eq + 1 : NULL;
    bool boolish = a->o->type == OPT_BOOL || (a->o->flags & F_AUTOBOOL);
    if (negated && !boolish)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: only boolean options can be negated",
                          a->label);
    if ((negated || a->o->type == OPT_ACTION) && eq)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: takes no value", a->label);
    if (negated || (boolish && !eq))
        a->value = negated ? "false" : "true";
    else if (a->o->type != OPT_ACTION && !eq) {
        if (i + 1 >= argc)
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: missing value", a->label);
        a->value = argv[i + 1];
        a->used = 2;
    }
    return 0;
}

/* Runs an action option. Returns 1 when it printed and the caller should exit. */
static int run_action(const opt_t *o, bool *dump)
{
    switch (o->action) {
    case ACT_HELP:
        cq_config_print_help(stdout);
        return 1;
    case ACT_VERSION:
        printf("chanqd %s\n", CQ_VERSION);
        return 1;
    case ACT_MARKDOWN:
        cq_config_print_markdown(stdout);
        return 1;
    case ACT_DUMP:
        *dump = true;
        return 0;
    case ACT_NONE:
        break;
    }
    return 0;
}

/* First pass: load every --config file. Errors in other options wait for the second pass. */
static int load_config_args(cq_config_t *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc;) {
        arg_t a;
        int r = split_arg(argc, argv, i, &a, NULL, 0);
        if (r < 0) {
            i++;
            continue;
        }
        if (a.o->flags & F_CONFIG) {
            r = cq_config_load_file(c, a.value, err, errlen);
            if (r < 0)
                return r;
        }
        i += a.used;
    }
    return 0;
}

int cq_config_parse_args(cq_config_t *c, int argc, char **argv, char *err, size_t errlen)
{
    bool dump = false;
    if (err && errlen)
        err[0] = '\0';
    int r = load_config_args(c, argc, argv, err, errlen);
    for (int i = 1; r == 0 && i < argc;) {
        arg_t a;
        r = split_arg(argc, argv, i, &a, err, errlen);
        if (r == 0 && a.o->type == OPT_ACTION)
            r = run_action(a.o, &dump);
        else if (r == 0 && !(a.o->flags & F_CONFIG))
            r = set_value(c, a.o, a.label, a.value, err, errlen);
        i += r == 0 ? a.used : 0;
    }
    if (r == 0)
        r = cq_config_check(c, err, errlen);
    if (r == 0 && dump) {
        cq_config_dump(c, stdout);
        r = 1;
    }
    return r;
}

/* ---- generated text ------------------------------------------------------------------- */

static const char *type_name(const opt_t *o)
{
    static const char *const names[] = {"bool",   "integer",   "size",
                                        "string", "log level", "command"};
    return names[o->type];
}

/* "0..1024", "4k..1g", "tcp", "dev | file", or "" when any value of the type goes. */
static void fmt_allowed(const opt_t *o, char *buf, size_t len)
{
    char lo[32], hi[32];
    buf[0] = '\0';
    if (o->type == OPT_INT || o->type == OPT_SIZE) {
        if (o->type == OPT_SIZE) {
            fmt_size(o->min, lo, sizeof(lo));
            fmt_size(o->max, hi, sizeof(hi));
        } else {
            snprintf(lo, sizeof(lo), "%lld", o->min);
            snprintf(hi, sizeof(hi), "%lld", o->max);
        }
        snprintf(buf, len, "%s..%s", lo, hi);
    } else if (o->type == OPT_STRING && o->choices) {
        snprintf(buf, len, "%s", o->choices);
    } else if (o->type == OPT_LOGLEVEL) {
        snprintf(buf, len, "debug|info|warn|error|off|-1..3");
    }
}

/* Writes text word-wrapped at 80 columns, each line indented by indent spaces. */
static void print_wrapped(FILE *f, const char *text, int indent)
{
    const int width = 80 - indent;
    while (*text) {
        int n = (int)strlen(text);
        if (n > width) {
            n = width;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = width;
        }
        fprintf(f, "%*s%.*s\n", indent, "", n, text);
        text += n;
        while (*text == ' ')
            text++;
    }
}

static void print_help_opt(FILE *f, const opt_t *o)
{
    char head[128], text[512], allowed[80];
    int n = snprintf(head, sizeof(head), "  --%s", o->name);
    if (o->type == OPT_BOOL)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "[=BOOL], --no-%s", o->name);
    else if (o->type != OPT_ACTION)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "=%s", o->meta);
    if (o->alias)
        snprintf(head + n, sizeof(head) - (size_t)n, "   (channeld: -%s)", o->alias);
    fprintf(f, "%s\n", head);
    fmt_allowed(o, allowed, sizeof(allowed));
    n = snprintf(text, sizeof(text), "%s", o->help);
    if (allowed[0])
        n += snprintf(text + n, sizeof(text) - (size_t)n, " Allowed: %s.", allowed);
    if (o->def)
        snprintf(text + n, sizeof(text) - (size_t)n, " Default: %s%s%s.",
                 o->type == OPT_STRING ? "\"" : "", o->def, o->type == OPT_STRING ? "\"" : "");
    print_wrapped(f, text, 8);
}

void cq_config_print_help(FILE *f)
{
    fprintf(f,
            "Usage: chanqd [options]\n\n"
            "chanqd %s, a realtime relay server wire-compatible with channeld.\n\n"
            "Options are --name=value or --name value; channeld's single-dash flags are\n"
            "accepted too. Booleans: --name, --name=false, --no-name. --config FILE is\n"
            "loaded first and the command line overrides it.\n\n",
            CQ_VERSION);
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++)
        print_help_opt(f, &opts[i]);
}

/* Writes s with Markdown table cell escaping ('|'). */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', f);
        fputc(*s, f);
    }
}

static void print_md_opt(FILE *f, const opt_t *o)
{
    char allowed[80];
    fprintf(f, "| `--%s` | %s%s%s | %s | ", o->name, o->alias ? "`-" : "", o->alias ? o->alias : "",
            o->alias ? "`" : "", type_name(o));
    if (o->def)
        fprintf(f, "`%s%s%s`", o->type == OPT_STRING ? "\"" : "", o->def,
                o->type == OPT_STRING ? "\"" : "");
    fmt_allowed(o, allowed, sizeof(allowed));
    fputs(" | ", f);
    if (allowed[0]) {
        fputc('`', f);
        md_cell(f, allowed);
        fputc('`', f);
    }
    fputs(" | ", f);
    md_cell(f, o->help);
    fputs(" |\n", f);
}

static const char md_intro[] =
    "# chanqd configuration\n"
    "\n"
    "<!-- Generated by `chanqd --config-markdown` from the option table in src/config/config.c.\n"
    "     Do not edit: change the table and regenerate. The `config` unit test fails when this\n"
    "     file is stale. -->\n"
    "\n"
    "Every option can be given on the command line or in a config file.\n"
    "\n"
    "* **Command line.** `--name=value` or `--name value`. Where channeld has a flag for the\n"
    "  same setting, its single-dash form works too (`-ca :12108`, `-ca=:12108`); one or two\n"
    "  dashes are accepted for every spelling, as with Go's flag package.\n"
    "* **Booleans** follow Go: `--dev` alone means true, `--dev=false` sets false, and\n"
    "  `--no-dev` is false too. A boolean never takes the next argument as its value.\n"
    "  Accepted values: true/false, t/f, 1/0, yes/no, on/off.\n"
    "* **Sizes** are bytes with an optional `k`, `m` or `g` suffix (powers of 1024).\n"
    "* **Config file.** `--config FILE` is loaded before every other command-line option,\n"
    "  wherever it appears, so the command line always overrides the file. One\n"
    "  `name = value` per line (long names; channeld flag names also work); blank lines and\n"
    "  lines starting with `#` are ignored; wrap a value in double quotes to give an empty\n"
    "  string. `--dump-config` prints the current values in this format.\n"
    "* Unknown options and out-of-range values are errors that name the option, for example\n"
    "  `--max-packet-size: 70000 is above the maximum 65535`.\n"
    "\n"
    "## Options\n"
    "\n"
    "| Option | channeld flag | Type | Default | Allowed | Description |\n"
    "|---|---|---|---|---|---|\n";

void cq_config_print_markdown(FILE *f)
{
    fputs(md_intro, f);
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++)
        print_md_opt(f, &opts[i]);
}

void cq_config_dump(const cq_config_t *c, FILE *f)
{
    fprintf(f, "# chanqd %s configuration (--dump-config)\n", CQ_VERSION);
    for (size_t i = 0; i < CQ_ARRAY_SIZE(opts); i++) {
        const opt_t *o = &opts[i];
        if (o->type == OPT_ACTION || (o->flags & F_CONFIG))
            continue;
        fprintf(f, "\n# %s\n%s = ", o->help, o->name);
        print_value(c, o, f);
        fputc('\n', f);
    }
}
