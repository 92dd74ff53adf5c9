/* cq_config.h - chanqd's options: one table drives the command line, the config file,
 * --help, --dump-config and doc/config.md.
 *
 * Every option has a long name used as `--name=value` / `--name value` and as `name = value` in a
 * config file; most also accept channeld's single-dash flag (`-ca :12108`, `-ca=:12108`). One or
 * two dashes work for both spellings, as with Go's flag package. Booleans follow Go: `-dev`
 * alone means true, `-dev=false` sets false, and `--no-dev` is false too; a boolean never takes
 * the next argument as its value.
 *
 * `--config FILE` is applied before every other command-line option, wherever it appears, so
 * the command line always overrides the file. The file has one `name = value` per line; blank
 * lines and lines starting with `#` are ignored, and a value may be wrapped in double quotes
 * (needed for an empty string). `--dump-config` prints the current values in that format.
 *
 * Errors name the option and the reason, for example `--workers: "abc" is not an integer` or
 * `--max-packet-size: 70000 is above the maximum 65535`; file errors start with `PATH:LINE: `.
 *
 * Not thread-safe: configure once in main() before starting threads, then treat the struct as
 * read-only.
 */
#ifndef CQ_CONFIG_H
#define CQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* All strings are owned by the struct (released by cq_config_done) and never NULL after
 * cq_config_defaults; an empty string means "unset" where the comment says so. */
typedef struct cq_config {
    int workers;                  /* worker threads; 0 = one per core */
    const char *pin_workers;      /* auto | on | off */
    const char *io_uring;         /* auto | on | off */
    char *client_addr;            /* client listener HOST:PORT */
    char *server_addr;            /* server listener HOST:PORT */
    char *client_network;         /* client listener network: "tcp" */
    char *server_network;         /* server listener network: "tcp" */
    bool client_legacy_tag;       /* client listener speaks the pre-2023 dynamic tag */
    bool server_legacy_tag;       /* server listener speaks the pre-2023 dynamic tag */
    char *ws_addr;                /* client WebSocket listener; "" disables it */
    char *wss_addr;               /* client WebSocket-over-TLS listener; "" disables it */
    char *kcp_addr;               /* client KCP (UDP) listener; "" disables it */
    char *server_ws_addr;         /* server WebSocket listener; "" disables it */
    char *server_kcp_addr;        /* server KCP listener; "" disables it */
    char *ws_path;                /* request path of WebSocket upgrades */
    char *ws_origins;             /* comma-separated allowed Origins; "" = any */
    size_t ws_max_message;        /* largest inbound WebSocket message */
    char *tls_cert;               /* PEM chain for wss */
    char *tls_key;                /* PEM key for wss */
    char *web_root;               /* static files for plain GETs on ws listeners; "" = none */
    char *kcp_profile;            /* "fast" or "kcp-go" */
    int kcp_idle_timeout_ms;      /* close KCP connections silent this long */
    int kcp_max_per_addr;         /* KCP connections per source IP */
    char *admin_addr;             /* HTTP /metrics listener; "" disables it */
    bool dev;                     /* development mode */
    int log_level;                /* a cq_log_level_t */
    char *client_fsm;             /* client FSM file; "" = built-in client_non_authoratative */
    char *server_fsm;             /* server FSM file; "" = built-in server_authoratative */
    char *channel_settings;       /* channel settings file; "" = built-in hifi */
    char *spatial_settings;       /* spatial controller: layout name or file; "" = none */
    int spatial_chan_start;       /* first spatial channel id (-scs) */
    int entity_chan_start;        /* first entity channel id (-ecs) */
    char *server_bypass_auth;     /* "auto" (loopback peers only), "true" or "false" */
    bool server_conn_recoverable; /* dropped server connections can be recovered */
    int server_conn_recover_timeout_ms; /* 0 = recoverable forever */
    int compression_type;               /* advertised in AuthResult: 0 none, 1 Snappy */
    char *auth_provider;                /* "dev" or "file" */
    char *auth_token_file;        /* JSON object PIT -> login token, for auth_provider "file" */
    int auth_timeout_ms;          /* close unauthenticated connections after this; 0 = never */
    int max_failed_auth;          /* close after this many failed AUTH attempts; 0 = no limit */
    int auth_addr_max_failures;   /* failed authentications per source address; 0 = no budget */
    int auth_addr_window_ms;      /* how long a source address's failures count */
    int auth_addr_backoff_ms;     /* first block of an address over its budget (doubles) */
    int conn_id_bits;             /* bits of a connection id, 8..31 */
    int idle_timeout_ms;          /* close connections silent this long; 0 = off */
    int tcp_keepalive_s;          /* TCP keepalive delay; 0 = off */
    int max_packet_size;          /* largest inbound packet body, 64..65535 */
    int max_connections;          /* connections accepted at once */
    int max_channels;             /* channels alive at once */
    int max_subs_per_conn;        /* subscriptions per client connection */
    int max_subs_per_server;      /* subscriptions per server connection, its own included */
    size_t sendq_soft_limit;      /* queued bytes that may persist only sendq_soft_seconds */
    int sendq_soft_seconds;       /* how long a connection may stay over the soft limit */
    size_t sendq_data_limit;      /* queued bytes above which channel data is merged, not queued */
    size_t sendq_hard_limit;      /* queued bytes that close the connection at once */
    char *channel_data_types;     /* comma-separated descriptor set files; "" = none */
    size_t max_channel_data_size; /* bytes of one channel's data state */
    char *ready_file;             /* written once listening: "client=H:P ... mq=H:P\n" */
    char *mq_addr;                /* durable-topic (seed protocol) listener; "" disables it */
    char *mq_http_addr;           /* durable-topic HTTP API listener; "" disables it */
    char *store_backend;          /* "sqlite" or "mysql" */
    char *store_dir;              /* sqlite data directory (created if missing) */
    char *mysql_host;             /* MariaDB server for store_backend mysql */
    int mysql_port;
    char *mysql_user;
    char *mysql_password;
    char *mysql_database;
    /* The cluster (doc/cluster.md); zk_hosts "" = a single node, no roles. */
    int shard;               /* this server's shard */
    char *zk_hosts;          /* ZooKeeper connect string */
    char *zk_root;           /* our subtree in ZooKeeper */
    int zk_session_ms;       /* session timeout asked for */
    char *cluster_advertise; /* the seed address SDKs use; "" = --mq-addr */
    bool cluster_promote;    /* a server whose database is a replica may take master */
    int cluster_db_down_ms;  /* a master without its database gives up after this */
    char *slave_reads;       /* "on": a slave serves reads; "off": only with no master */
    /* Relay nodes (issue 23, doc/relay-cluster.md); relay_nats "" = one node, no NATS. */
    char *relay_nats;     /* nats-server URLs */
    int relay_node_id;    /* this node, 1 .. 2^relay_node_bits - 1 */
    int relay_node_bits;  /* top bits of allocated ids that name the node */
    char *relay_cluster;  /* the relay's name: subjects and ZooKeeper paths */
    char *relay_zk_hosts; /* membership; "" = zk_hosts */
    char *relay_nats_user;
    char *relay_nats_password;
    char *relay_nats_token;
    bool relay_nats_tls;
    char *relay_nats_tls_ca;
    char *relay_nats_tls_cert;
    char *relay_nats_tls_key;
    /* the host of a relay node's client addresses in its reports; "" = as bound */
    char *relay_advertise_host;
    char *repl_admin_user; /* replication control (read_only, promotion): an admin */
    char *repl_admin_password;
    char *repl_user; /* what a standby replicates as (CHANGE MASTER) */
    char *repl_password;
    int repl_semi_sync_timeout_ms;     /* rpl_semi_sync_master_timeout */
    bool repl_semi_sync_wait_no_slave; /* rpl_semi_sync_master_wait_no_slave */
    /* the management service (issue 13) */
    char *role;                 /* "server" or "mgr" */
    char *mgr_addr;             /* mgr: management protocol listener */
    char *mgr_http_addr;        /* mgr: console + JSON API; "" = none */
    char *mgr_state_file;       /* mgr without ZooKeeper: the managed configuration */
    char *mgr_admin_token_file; /* mgr: console admin token; "" = generated */
    char *mgr_audit_log;        /* mgr: JSON lines, one per change */
    char *mgr_http_hosts;       /* mgr: Host names the console answers */
    int mgr_max_connections, mgr_http_max_connections;
    int mgr_auth_timeout_ms, mgr_idle_timeout_ms, mgr_http_timeout_ms;
    int mgr_stale_ms;           /* mgr: reports older than this mark a server stale */
    int mgr_lag_alert_ms;       /* mgr: replication lag alert threshold */
    int mgr_chart_ms;           /* mgr: the console's charts sample this often */
    char *mgr_servers;          /* server: managers to report to; "" = unmanaged */
    char *mgr_token_file;       /* both: the servers' shared secret */
    int mgr_report_ms;          /* server: sync_serverinfo period */
    int group_id, appid;        /* server: the seed's ids */
    char *mq_permissions_file;  /* JSON module permissions; "" = everything allowed */
    char *bridge_file;          /* JSON bindings of topics to channels (doc/bridge.md); "" none */
    int bridge_ring_events;     /* live events kept per broadcast-bound topic for resumes */
    int bridge_resume_chunk;    /* events per catch-up chunk, rows per store read */
    int bridge_resume_inflight; /* catch-up chunks at the workers at once */
    char *bridge_follow;        /* "S/H:P,...": other shards' servers the bridge follows */
    int bridge_follow_module;   /* the module_id it connects to them as */
    char *bridge_follow_token_file; /* that module's token */
    char *mq_http_hosts;            /* comma-separated Host names the MQ HTTP API answers */
    char *mq_http_origins;          /* comma-separated Origins allowed on the MQ HTTP API */
    size_t mq_max_content;          /* bytes of one message's content */
    int mq_max_pending;             /* pending durable writes before producers get busy */
    size_t mq_sendq_soft_limit;     /* MQ connections: unsent bytes allowed mq_sendq_soft_seconds */
    int mq_sendq_soft_seconds;
    size_t mq_sendq_hard_limit; /* MQ connections: unsent bytes that close at once */
    int retention_check_s;      /* seconds between retention purges */
    int shutdown_grace_ms;      /* MQ connections: time to send every answer on SIGTERM */
    char *config;               /* the last config file loaded, "" if none */
    /* listener limits (issue 10): caps, timeouts, pre-connect memory, file descriptors */
    int fd_reserve;              /* fds beyond the connection caps the start check keeps */
    int mq_max_connections;      /* seed connections at once */
    int mq_auth_timeout_ms;      /* seed: connect within this from accept; 0 = never */
    int mq_idle_timeout_ms;      /* seed: a whole frame at least this often; 0 = never */
    int mq_http_max_connections; /* HTTP API connections at once */
    int mq_http_timeout_ms;      /* HTTP API: an answer at least this often; 0 = never */
    int admin_max_connections;   /* admin listener connections at once */
    int admin_timeout_ms;        /* admin connection lifetime; 0 = unbounded */
    size_t mq_preauth_max_frame; /* seed: largest frame before connect */
    size_t mq_input_budget;      /* seed: bytes of partial frames, all connections */
} cq_config_t;

/* Fills c with the defaults. c's previous contents are not freed (call cq_config_done first
 * when reusing a struct). Aborts on OOM, like any startup allocation failure. */
void cq_config_defaults(cq_config_t *c);

/* Applies the command line (argv[0] is the program name and is skipped) to c, which must hold
 * defaults or earlier values. `--config FILE` options are loaded first, then the others in
 * order, then cross-option checks run.
 * Returns 0; a negative code with a message in err (CQ_ECONFIG for a bad option or value,
 * -errno when a --config file cannot be read, -ENOMEM); or 1 when --help, --version,
 * --dump-config or --config-markdown printed to stdout and the caller should exit 0. On error
 * c may hold some of the new values (it stays valid for cq_config_done). */
int cq_config_parse_args(cq_config_t *c, int argc, char **argv, char *err, size_t errlen);

/* Applies the config file at path (borrowed) to c, then records path in c->config.
 * Returns 0, CQ_ECONFIG (bad content, err is `PATH:LINE: name: reason`) or -errno (err is
 * `PATH: reason`). */
int cq_config_load_file(cq_config_t *c, const char *path, char *err, size_t errlen);

/* Checks rules that span options (the soft send-queue limit must not exceed the hard one;
 * auth-provider=file needs auth-token-file; auth-provider=dev needs --dev unless every channel
 * listener is on loopback). Returns 0 or CQ_ECONFIG with a message. Called
 * by cq_config_parse_args; call it yourself after cq_config_load_file alone. */
int cq_config_check(const cq_config_t *c, char *err, size_t errlen);

/* Writes the --help text: usage and every option with its type, default and meaning. */
void cq_config_print_help(FILE *f);

/* Writes the Markdown reference that is checked in as doc/config.md. */
void cq_config_print_markdown(FILE *f);

/* Writes c in the config-file format, one commented `name = value` per option; loading the
 * output with cq_config_load_file gives back the same values. */
void cq_config_dump(const cq_config_t *c, FILE *f);

/* Frees the strings in c (not c itself) and zeroes it. Safe on a zeroed struct. */
void cq_config_done(cq_config_t *c);

#endif
