/* chanqd - config -> modules -> run. The composition root. */
#include "bridgemain.h"
#include "cluster.h"
#include "relaynode.h"
#include "mgr_main.h"
#include "mgrfig.h"
#include "reload.h"
#include "cq_admin.h"
#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_config.h"
#include "cq_core.h"
#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_fsm.h"
#include "cq_file.h"
#include "cq_io.h"
#include "cq_limits.h"
#include "cq_log.h"
#include "cq_mqio.h"
#include "cq_mqperm.h"
#include "cq_mqport.h"
#include "cq_schema.h"
#include "cq_settings.h"
#include "cq_spatial.h"
#include "cq_store.h"
#include "cq_writer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct app {
    cq_config_t cfg;
    cq_fsm_t *client_fsm, *server_fsm;
    cq_settings_t *settings;
    cq_spatial_cfg_t spatial; /* valid when has_spatial */
    bool has_spatial;
    cq_schema_t *schema;
    cq_schema_t **old_schemas; /* earlier schemas (owned): channels may still point into them */
    int n_old, cap_old;
    cq_shared_t *sh;
    cq_admin_t *admin; /* /metrics sources: the core's, then the MQ port's */
    cq_io_t *io;
    cq_mqperm_t *perms;    /* NULL: every module may do everything (writes from loopback only) */
    cq_authlim_t *authlim; /* the per-address failure budget of every authenticating port */
    cq_writer_t *writer;
    cq_mqsrv_t *mqsrv; /* the engine; runs on the MQ loop while mq runs */
    cq_mqio_t *mq;
    cq_main_cluster_t *cluster; /* with --zk-hosts: roles, fencing, replication control */
    cq_main_relay_t *relay;     /* with --relay-nats: this node of a relay */
    cq_main_bridge_t *bridge;   /* with --bridge-file or managed: topics into channels */
    cq_mgrlink_t *mgrlink;      /* with --mgr-servers: the reports and commands (MQ loop) */
    cq_main_figures_t figs;     /* the host's figures in those reports */
    cq_main_reload_t *reload;   /* SIGHUP: the configuration parsed again */
} app_t;

static int load_fsm(const char *path, const char *builtin, size_t blen, cq_fsm_t **ret,
                    const char *what)
{
    char err[512] = "";
    int r = path && *path ? cq_fsm_load_file(path, ret, err, sizeof(err))
                          : cq_fsm_load_json(builtin, blen, ret, err, sizeof(err));
    if (r < 0)
        CQ_ERROR("main", "%s FSM %s: %s", what, path && *path ? path : "(built-in)", err);
    return r;
}

static int load_config_files(app_t *a)
{
    const cq_config_t *c = &a->cfg;
    int r = load_fsm(c->client_fsm, cq_embedded_client_fsm, cq_embedded_client_fsm_len,
                     &a->client_fsm, "client");
    if (r == 0)
        r = load_fsm(c->server_fsm, cq_embedded_server_fsm, cq_embedded_server_fsm_len,
                     &a->server_fsm, "server");
    if (r < 0)
        return r;
    char err[512] = "";
    r = c->channel_settings && *c->channel_settings
            ? cq_settings_load_file(c->channel_settings, &a->settings, err, sizeof(err))
            : cq_settings_load_json(cq_embedded_settings, cq_embedded_settings_len, &a->settings,
                                    err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("main", "channel settings: %s", err);
        return r;
    }
    if (!*c->spatial_settings)
        return 0;
    r = cq_spatial_cfg_load(c->spatial_settings, &a->spatial, err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("main", "--spatial-settings %s: %s", c->spatial_settings, err);
        return r;
    }
    a->spatial.chan_start = (uint32_t)c->spatial_chan_start;
    a->spatial.entity_start = (uint32_t)c->entity_chan_start;
    if ((uint64_t)a->spatial.chan_start + cq_spatial_cells(&a->spatial) > a->spatial.entity_start) {
        CQ_ERROR("main",
                 "--spatial-settings %s: %u cells from --spatial-chan-start %u reach "
                 "--entity-chan-start %u",
                 c->spatial_settings, cq_spatial_cells(&a->spatial), a->spatial.chan_start,
                 a->spatial.entity_start);
        cq_spatial_cfg_done(&a->spatial);
        return CQ_ECONFIG;
    }
    a->has_spatial = true;
    return 0;
}

/* Loads every descriptor set named in --channel-data-types into a new schema. */
static int load_schema_files(const char *list, cq_schema_t **ret)
{
    cq_schema_t *schema = NULL;
    int r = cq_schema_new(&schema);
    if (r < 0)
        return r;
    char path[4096], err[512] = "";
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        snprintf(path, sizeof(path), "%.*s", (int)n, p);
        if (*path && (r = cq_schema_load_file(schema, path, err, sizeof(err))) < 0) {
            CQ_ERROR("main", "channel data types: %s", err);
            cq_schema_free(schema);
            return r;
        }
        p += n + (p[n] == ',');
    }
    CQ_INFO("main", "channel data types: %zu message types loaded", cq_schema_count(schema));
    *ret = schema;
    return 0;
}

static int load_schema(app_t *a)
{
    const char *list = a->cfg.channel_data_types;
    return list && *list ? load_schema_files(list, &a->schema) : 0;
}

static int read_perms(const char *path, cq_mqperm_t **ret)
{
    char *buf = NULL, err[512] = "";
    size_t len;
    int r = cq_file_read(path, 16u << 20, &buf, &len);
    if (r < 0) {
        CQ_ERROR("main", "--mq-permissions-file %s: %s", path, cq_strerror(r));
        return r;
    }
    r = cq_mqperm_load(buf, len, ret, err, sizeof(err));
    cq_free(buf);
    if (r < 0)
        CQ_ERROR("main", "--mq-permissions-file %s: %s", path, err);
    return r;
}

/* Keeps s until exit: channels resolved against it keep pointing into it. Returns 0 or
 * -ENOMEM. There is no fixed cap, so no reload is ever refused for lack of room. */
static int keep_old_schema(app_t *a, cq_schema_t *s)
{
    if (a->n_old == a->cap_old) {
        int cap = a->cap_old ? a->cap_old * 2 : 8;
        cq_schema_t **p = cq_realloc(a->old_schemas, (size_t)cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        a->old_schemas = p;
        a->cap_old = cap;
    }
    a->old_schemas[a->n_old++] = s;
    return 0;
}

/* SIGHUP, the credentials: the token file and the permissions file are read here, on the main
 * thread; the core swaps its token table under its lock, the MQ engine takes the new table on
 * its own loop (cq_mqsrv_set_perms). A file that does not load keeps the one in force. */
static void reload_credentials(app_t *a)
{
    char err[512] = "";
    const cq_config_t *c = &a->cfg;
    cq_mqperm_t *p = NULL;
    if (strcasecmp(c->auth_provider, "file") == 0) {
        if (cq_shared_reload_tokens(a->sh, c->auth_token_file, err, sizeof(err)) < 0)
            CQ_ERROR("main", "SIGHUP: keeping the current tokens: %s", err);
        else
            CQ_INFO("main", "SIGHUP: tokens reloaded from %s", c->auth_token_file);
    }
    if (!a->mqsrv || !*c->mq_permissions_file)
        return;
    if (cq_mgrlink_perms_managed(a->mgrlink)) {
        CQ_INFO("main", "SIGHUP: MQ permissions are the manager's; %s not reloaded",
                c->mq_permissions_file);
        return;
    }
    if (read_perms(c->mq_permissions_file, &p) < 0) {
        CQ_ERROR("main", "SIGHUP: keeping the current MQ permissions");
        return;
    }
    cq_mqsrv_set_perms(a->mqsrv, p);
    CQ_INFO("main", "SIGHUP: MQ permissions reloaded from %s", c->mq_permissions_file);
}

/* SIGHUP: the configuration first (its log level applies to what follows), the credentials,
 * and the descriptor sets (workers resolve channels of newly known types). */
static void on_hup(void *ud)
{
    app_t *a = ud;
    cq_schema_t *s;
    cq_main_reload_config(a->reload);
    reload_credentials(a);
    cq_main_bridge_reload(a->bridge, &a->cfg, a->mqsrv);
    const char *list = a->cfg.channel_data_types;
    if (!list || !*list)
        return;
    if (load_schema_files(list, &s) < 0)
        return; /* keep the current types (the loader logged why) */
    if (a->schema && keep_old_schema(a, a->schema) < 0) {
        CQ_WARN("main", "SIGHUP: out of memory; channel data types not reloaded");
        cq_schema_free(s);
        return;
    }
    a->schema = s;
    cq_shared_set_schema(a->sh, s);
}

static void core_opts(const app_t *a, cq_core_opts_t *o)
{
    const cq_config_t *c = &a->cfg;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    memset(o, 0, sizeof(*o));
    if (ncpu > CQ_MAX_WORKERS) /* --workers 0 on a big machine: as many as the core allows */
        ncpu = CQ_MAX_WORKERS;
    o->workers = c->workers > 0 ? c->workers : (int)(ncpu > 0 ? ncpu : 1);
    o->client_fsm = a->client_fsm;
    o->server_fsm = a->server_fsm;
    o->settings = a->settings;
    o->spatial = a->has_spatial ? &a->spatial : NULL;
    o->entity_chan_start = (uint32_t)c->entity_chan_start;
    o->dev = c->dev;
    o->server_bypass_auth = strcmp(c->server_bypass_auth, "false") != 0;
    o->server_bypass_loopback = strcmp(c->server_bypass_auth, "auto") == 0;
    o->authlim = a->authlim;
    o->server_recoverable = c->server_conn_recoverable;
    o->server_recover_timeout_ms = (uint32_t)c->server_conn_recover_timeout_ms;
    o->compression_type = (uint32_t)c->compression_type;
    o->auth_provider = strcasecmp(c->auth_provider, "file") == 0 ? CQ_AUTH_FILE : CQ_AUTH_DEV;
    o->auth_token_file = c->auth_token_file;
    o->auth_timeout_ms = (uint32_t)c->auth_timeout_ms;
    o->max_failed_auth = (uint32_t)c->max_failed_auth;
    o->conn_id_bits = (uint32_t)c->conn_id_bits;
    if (*c->relay_nats) { /* ids carry the node (place.h) */
        o->relay_node = (uint16_t)c->relay_node_id;
        o->relay_node_bits = (uint8_t)c->relay_node_bits;
        /* its ZooKeeper session, plus the listing and the relay's own hops */
        o->relay_loss_ms = (uint32_t)c->zk_session_ms + 1000;
    }
    o->idle_timeout_ms = (uint32_t)c->idle_timeout_ms;
    o->max_packet_size = (uint32_t)c->max_packet_size;
    o->max_connections = (uint32_t)c->max_connections;
    o->max_channels = (uint32_t)c->max_channels;
    o->max_subs_per_conn = (uint32_t)c->max_subs_per_conn;
    o->max_subs_per_server = (uint32_t)c->max_subs_per_server;
    o->sendq_soft_limit = c->sendq_soft_limit;
    o->sendq_soft_seconds = (uint32_t)c->sendq_soft_seconds;
    o->sendq_hard_limit = c->sendq_hard_limit;
    /* a connection over the soft limit would be closed for the data it was spared */
    o->sendq_data_limit =
        c->sendq_data_limit < c->sendq_soft_limit ? c->sendq_data_limit : c->sendq_soft_limit;
    o->schema = a->schema;
    o->max_channel_data = c->max_channel_data_size;
}

/* ---- file descriptors --------------------------------------------------------------------- */

#define AUTO_MAX_CONNECTIONS 100000 /* --max-connections 0, when the open-file limit allows */

/* Raises the open-file limit to the hard limit: a server that holds one fd per connection must
 * not stop at the login shell's 1024. */
static rlim_t raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t cur = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            rl.rlim_cur = cur; /* e.g. RLIM_INFINITY above fs.nr_open */
    }
    return rl.rlim_cur;
}

/* Every connection cap plus --fd-reserve must fit in the open-file limit, or fd exhaustion is a
 * matter of time; --max-connections 0 takes what is left (at most AUTO_MAX_CONNECTIONS). */
static int fit_fd_limit(cq_config_t *c)
{
    rlim_t lim = raise_nofile();
    unsigned long long mq = *c->mq_addr ? (unsigned long long)c->mq_max_connections : 0;
    unsigned long long http = *c->mq_addr && *c->mq_http_addr ? c->mq_http_max_connections : 0;
    unsigned long long adm = *c->admin_addr ? (unsigned long long)c->admin_max_connections : 0;
    unsigned long long other = mq + http + adm + (unsigned long long)c->fd_reserve;
    if (c->max_connections == 0 && lim > other)
        c->max_connections =
            (int)(lim - other > AUTO_MAX_CONNECTIONS ? AUTO_MAX_CONNECTIONS : lim - other);
    unsigned long long need = other + (unsigned long long)c->max_connections;
    if (c->max_connections > 0 && need <= lim) {
        CQ_INFO("main", "open-file limit %llu: --max-connections %d", (unsigned long long)lim,
                c->max_connections);
        return 0;
    }
    CQ_ERROR("main",
             "open-file limit %llu is below the %llu file descriptors the caps need "
             "(--max-connections %d + --mq-max-connections %llu + --mq-http-max-connections %llu "
             "+ --admin-max-connections %llu + --fd-reserve %d): raise the limit (ulimit -Hn, "
             "LimitNOFILE=) or lower the caps",
             (unsigned long long)lim, need + (c->max_connections ? 0 : 1), c->max_connections, mq,
             http, adm, c->fd_reserve);
    return CQ_ECONFIG;
}

/* ---- durable topics ---------------------------------------------------------------------- */

static int load_perms(app_t *a)
{
    const char *path = a->cfg.mq_permissions_file;
    return *path ? read_perms(path, &a->perms) : 0;
}

static int open_store(const cq_config_t *c, cq_store_t **ret)
{
    const cq_store_ops_t *ops = &cq_store_sqlite_ops;
    bool mysql = strcmp(c->store_backend, "mysql") == 0;
    if (mysql) {
#ifdef CQ_HAVE_MYSQL
        ops = &cq_store_mysql_ops;
#else
        CQ_ERROR("main", "--store-backend=mysql: this chanqd was built without libmariadb");
        return CQ_ECONFIG;
#endif
    } else if (mkdir(c->store_dir, 0750) < 0 && errno != EEXIST) {
        int e = errno;
        CQ_ERROR("main", "--store-dir %s: %s", c->store_dir, strerror(e));
        return -e;
    }
    cq_store_opts_t so = {.dir = c->store_dir,
                          .max_content = c->mq_max_content,
                          .host = c->mysql_host,
                          .port = (unsigned)c->mysql_port,
                          .user = *c->mysql_user ? c->mysql_user : NULL,
                          .password = *c->mysql_password ? c->mysql_password : NULL,
                          .database = c->mysql_database};
    char err[512] = "";
    int r = cq_store_open(ops, &so, ret, err, sizeof(err));
    if (r < 0)
        CQ_ERROR("main", "store (%s): %s", ops->name, err);
    return r;
}

/* /metrics source: the SQLite store's file system (chanq_mq_store_*_bytes). ud: the app. */
static int store_disk_metrics(void *ud, cq_sbuf_t *out)
{
    const app_t *a = ud;
    return cq_store_disk_metrics(a->cfg.store_dir, out);
}

/* Reads the topics, their high-water offsets and message counts for the engine's cache. hw
 * holds 2 * n entries: the high waters, then the counts. */
static int list_topics(cq_store_t *st, cq_store_topic_t **ret_topics, uint64_t **ret_hw,
                       size_t *ret_n)
{
    cq_store_topic_t *t = NULL;
    size_t n = 0;
    int r = cq_store_topic_list(st, &t, &n);
    uint64_t *hw = r == 0 && n ? cq_calloc(2 * n, sizeof(*hw)) : NULL;
    if (r == 0 && n && !hw)
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = cq_store_high_water(st, t[i].name, &hw[i]);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = cq_store_count(st, t[i].name, &hw[n + i]);
    if (r < 0) {
        CQ_ERROR("main", "store: cannot list topics: %s", cq_store_errmsg(st));
        cq_free(t);
        cq_free(hw);
        return r;
    }
    *ret_topics = t;
    *ret_hw = hw;
    *ret_n = n;
    return 0;
}

/* The engine over the store thread: limits, permissions and the topics at start. */
static int make_engine(app_t *a, const cq_store_topic_t *topics, const uint64_t *hw, size_t n,
                       uint64_t epoch)
{
    const cq_config_t *c = &a->cfg;
    cq_mqsrv_opts_t so = {
        .limits = {.max_content = (uint32_t)c->mq_max_content},
        .perms = a->perms,
        .topics = topics,
        .high_water = hw,
        .counts = hw ? hw + n : NULL,
        .ntopics = n,
        .port = cq_mqport_writer(a->writer),
        .sendq_soft_limit = c->mq_sendq_soft_limit,
        .sendq_soft_seconds = (uint32_t)c->mq_sendq_soft_seconds,
        .sendq_hard_limit = c->mq_sendq_hard_limit,
        .authlim = a->authlim,
        .http_hosts = c->mq_http_hosts,
        .http_origins = c->mq_http_origins,
        .preauth_frame = c->mq_preauth_max_frame,
        .input_budget = c->mq_input_budget,
        .shard = (uint32_t)c->shard,
        .epoch = epoch,
    };
    if (a->cluster)
        cq_main_cluster_fence(a->cluster, &so);
    cq_main_bridge_sink(a->bridge, &so);
    /* a frame must hold at least one message of the largest size, with its JSON around it */
    uint64_t total = (uint64_t)c->mq_max_content + 4096;
    so.limits.max_total = total > CQ_MQ_DEFAULT_MAX_TOTAL ? (uint32_t)total : 0;
    if (c->mq_input_budget < (total > CQ_MQ_DEFAULT_MAX_TOTAL ? total : CQ_MQ_DEFAULT_MAX_TOTAL)) {
        CQ_ERROR("main",
                 "--mq-input-budget %zu is below the largest frame (%llu bytes): one "
                 "frame could never be received",
                 c->mq_input_budget,
                 (unsigned long long)(total > CQ_MQ_DEFAULT_MAX_TOTAL ? total
                                                                      : CQ_MQ_DEFAULT_MAX_TOTAL));
        return CQ_ECONFIG;
    }
    a->mqsrv = cq_mqsrv_new(&so);
    cq_main_bridge_attach(a->bridge, a->mqsrv);
    return a->mqsrv ? 0 : -ENOMEM;
}

/* The servers' shared secret (--mgr-token-file), trailing whitespace removed, into buf. */
static int read_mgr_token(const char *path, char *buf, size_t len)
{
    int r = cq_file_read_secret(path, buf, len);
    if (r < 0)
        CQ_ERROR("main", "--mgr-token-file %s: %s", path,
                 r == -ENAMETOOLONG ? "longer than a token may be" : cq_strerror(r));
    return r;
}

/* publish_config's bindings (the MQ loop): the bridge checks them as it checks --bridge-file. */
static int apply_bindings(void *ud, const char *json, size_t len, char *err, size_t errlen)
{
    app_t *a = ud;
    return cq_main_bridge_apply(a->bridge, a->mqsrv, json, len, err, errlen);
}

/* The link to the managers (--mgr-servers): created here, driven by the MQ loop. */
static int make_mgrlink(app_t *a, cq_mqio_opts_t *mo)
{
    const cq_config_t *c = &a->cfg;
    char token[CQ_MQ_TOKEN_MAX + 1];
    if (!*c->mgr_servers)
        return 0;
    int r = read_mgr_token(c->mgr_token_file, token, sizeof(token));
    if (r < 0)
        return r;
    cq_mgrlink_opts_t lo = {.group_id = (uint32_t)c->group_id,
                            .appid = (uint32_t)c->appid,
                            .token = token,
                            .addr = c->cluster_advertise,
                            .report_ms = (uint32_t)c->mgr_report_ms,
                            /* a relay node has no bridge: it ignores the bindings */
                            .apply_bindings = a->bridge ? apply_bindings : NULL,
                            .bindings_ud = a,
                            .no_shard = *c->relay_nats != '\0'};
    if (!(a->mgrlink = cq_mgrlink_new(a->mqsrv, &lo)))
        return -ENOMEM;
    a->figs = (cq_main_figures_t){.sh = a->sh, .cluster = a->cluster, .relay = a->relay};
    if (a->relay)
        cq_main_figures_addrs(&a->figs, a->io, c->relay_advertise_host);
    mo->mgr_servers = c->mgr_servers;
    mo->mgr_link = a->mgrlink;
    mo->mgr_figures = cq_main_figures;
    mo->mgr_figures_ud = &a->figs;
    return 0;
}

/* Composes the durable topics: store thread, engine, then the edge that runs the engine. */
static int start_mq(app_t *a, char *bound, size_t blen)
{
    const cq_config_t *c = &a->cfg;
    cq_store_t *st = NULL, *rd = NULL; /* rd: consume reads, off the writer thread */
    cq_store_topic_t *topics = NULL;
    uint64_t *hw = NULL;
    size_t n = 0;
    int r = load_perms(a);
    if (r == 0)
        r = open_store(c, &st);
    if (r == 0)
        r = open_store(c, &rd);
    if (r == 0)
        r = list_topics(st, &topics, &hw, &n);
    /* a standalone server's epoch: its store's creation time (a cluster's comes from its role) */
    uint64_t epoch = 0;
    if (r == 0 && !*c->zk_hosts && cq_store_created_ms(st, &epoch) < 0) {
        CQ_WARN("main", "store: its creation time is not known (%s): epoch 0", cq_store_errmsg(st));
        epoch = 0;
    }
    if (r < 0) {
        cq_store_close(st);
        cq_store_close(rd);
        return r;
    }
    cq_writer_opts_t wo = {.max_wait_us = -1,
                           .max_pending = (size_t)c->mq_max_pending,
                           .done = cq_mqsrv_complete,
                           .reader = rd};
    cq_mqio_opts_t mo = {.addr = c->mq_addr,
                         .http_addr = c->mq_http_addr,
                         .retention_check_s = c->retention_check_s,
                         .tcp_keepalive_s = c->tcp_keepalive_s,
                         .lim = {.max_conns = (uint32_t)c->mq_max_connections,
                                 .http_max_conns = (uint32_t)c->mq_http_max_connections,
                                 .auth_timeout_ms = (uint32_t)c->mq_auth_timeout_ms,
                                 .idle_timeout_ms = (uint32_t)c->mq_idle_timeout_ms,
                                 .http_timeout_ms = (uint32_t)c->mq_http_timeout_ms},
                         .shutdown_grace_ms = c->shutdown_grace_ms};
    char err[512] = "cannot start the store thread";
    r = cq_writer_new(st, &wo, &a->writer, err, sizeof(err)); /* takes st and rd; err says why */
    if (r == 0 && *c->zk_hosts && !(a->cluster = cq_main_cluster_new(c)))
        r = -ENOMEM;
    if (r == 0)
        r = cq_main_bridge_new(c, a->sh, a->admin, &a->bridge, err, sizeof(err));
    mo.follow = cq_main_bridge_follower(a->bridge);
    if (r == 0 && (r = make_engine(a, topics, hw, n, epoch)) == CQ_ECONFIG)
        snprintf(err, sizeof(err), "durable topics not started");
    if (r == 0 && (r = make_mgrlink(a, &mo)) < 0)
        snprintf(err, sizeof(err), "--mgr-servers: cannot start the link to the managers");
    if (r == 0 && !(a->mq = cq_mqio_new()))
        r = -ENOMEM;
    if (r == 0)
        r = cq_mqio_start(a->mq, a->mqsrv, &mo, bound, blen, err, sizeof(err));
    if (r == 0 && (r = cq_admin_add_source(a->admin, "mq", cq_mqio_metrics_append, a->mq)) < 0)
        snprintf(err, sizeof(err), "cannot register the MQ metrics: %s", cq_strerror(r));
    if (r == 0 && strcmp(c->store_backend, "mysql") != 0 &&
        (r = cq_admin_add_source(a->admin, "store", store_disk_metrics, a)) < 0)
        snprintf(err, sizeof(err), "cannot register the store metrics: %s", cq_strerror(r));
    if (r == 0 && a->cluster)
        r = cq_main_cluster_start(a->cluster, a->mqsrv, a->admin, bound, err, sizeof(err));
    if (r < 0)
        CQ_ERROR("main", "%s", err);
    else
        CQ_INFO("main", "durable topics: %s store, %zu topics", c->store_backend, n);
    cq_free(topics);
    cq_free(hw);
    return r;
}

/* Stops in the order that answers every request in flight: the edge first (it stops reading,
 * waits until the store thread completed every request already read and their answers are
 * written, then closes the connections; bounded by --shutdown-grace-ms), then the store thread,
 * which completes what it still holds when the grace ran out (produces commit, unanswered),
 * then the engine, which runs those completions and frees the requests. */
static void stop_mq(app_t *a)
{
    /* the workers stop: what commits from here reaches players when they resume */
    cq_main_bridge_stop(a->bridge);
    if (a->mq)
        cq_admin_remove_source(a->admin, cq_mqio_metrics_append, a->mq);
    cq_admin_remove_source(a->admin, store_disk_metrics, a); /* nothing when not added */
    cq_mqio_stop(a->mq);
    if (a->writer)
        cq_writer_shutdown(a->writer); /* completes every queued request */
    /* The fence held while the edge drained; from here nothing more is acknowledged. */
    cq_main_cluster_stop(a->cluster, a->admin);
    a->cluster = NULL;
    a->mq = cq_mqio_free(a->mq);
    a->mgrlink = cq_mgrlink_free(a->mgrlink); /* the loop that drove it is gone */
    a->mqsrv = cq_mqsrv_free(a->mqsrv);       /* runs those completions */
    a->writer = cq_writer_free(a->writer);
    a->perms = cq_mqperm_free(a->perms);
}

/* ---- start ------------------------------------------------------------------------------ */

static int start(app_t *a)
{
    cq_core_opts_t o;
    const cq_config_t *c = &a->cfg;
    cq_authlim_opts_t lo = {.max_failures = (uint32_t)c->auth_addr_max_failures,
                            .window_ms = (uint32_t)c->auth_addr_window_ms,
                            .backoff_ms = (uint32_t)c->auth_addr_backoff_ms};
    if (!(a->authlim = cq_authlim_new(&lo))) {
        CQ_ERROR("main", "out of memory");
        return -ENOMEM;
    }
    core_opts(a, &o);
    char err[512] = "";
    int r = cq_shared_new(&o, NULL, NULL, &a->sh, err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("main", "%s", err);
        return r;
    }
    if (!(a->admin = cq_admin_new()) ||
        cq_admin_add_source(a->admin, "core", cq_shared_metrics_append, a->sh) < 0 ||
        cq_admin_add_source(a->admin, "auth", cq_authlim_metrics_append, a->authlim) < 0) {
        CQ_ERROR("main", "out of memory");
        return -ENOMEM;
    }
    /* before the workers run: they hand what they send other nodes to it */
    if (*c->relay_nats &&
        (r = cq_main_relay_start(c, a->sh, a->admin, &a->relay, err, sizeof(err))) < 0) {
        CQ_ERROR("main", "%s", err);
        return r;
    }
    cq_io_opts_t io = {
        .client_addr = c->client_addr,
        .server_addr = c->server_addr,
        .client_network = c->client_network,
        .server_network = c->server_network,
        .admin_addr = c->admin_addr,
        .admin = a->admin,
        .client_legacy_tag = c->client_legacy_tag,
        .server_legacy_tag = c->server_legacy_tag,
        .tcp_keepalive_s = c->tcp_keepalive_s,
        .ready_file = c->ready_file,
        .defer_ready = true,
        .ws_addr = c->ws_addr,
        .wss_addr = c->wss_addr,
        .kcp_addr = c->kcp_addr,
        .server_ws_addr = c->server_ws_addr,
        .server_kcp_addr = c->server_kcp_addr,
        .ws_path = c->ws_path,
        .ws_origins = c->ws_origins,
        .ws_max_message = c->ws_max_message,
        .tls_cert = c->tls_cert,
        .tls_key = c->tls_key,
        .web_root = c->web_root,
        .kcp_fast = strcmp(c->kcp_profile, "fast") == 0,
        .kcp_idle_timeout_ms = c->kcp_idle_timeout_ms,
        .kcp_max_per_addr = c->kcp_max_per_addr,
        .io_uring = strcmp(c->io_uring, "on") == 0    ? CQ_IO_URING_ON
                    : strcmp(c->io_uring, "off") == 0 ? CQ_IO_URING_OFF
                                                      : CQ_IO_URING_AUTO,
        .pin_workers = strcmp(c->pin_workers, "on") == 0    ? CQ_IO_PIN_ON
                       : strcmp(c->pin_workers, "off") == 0 ? CQ_IO_PIN_OFF
                                                            : CQ_IO_PIN_AUTO,
        .max_packet_size = (size_t)c->max_packet_size,
        .admin_max_conns = (uint32_t)c->admin_max_connections,
        .admin_timeout_ms = (uint32_t)c->admin_timeout_ms,
    };
    r = cq_io_start(a->sh, &io, &a->io, err, sizeof(err));
    if (r == 0 && (r = cq_admin_add_source(a->admin, "io", cq_io_metrics_append, a->io)) < 0)
        snprintf(err, sizeof(err), "cannot register the listener metrics: %s", cq_strerror(r));
    if (r < 0) {
        CQ_ERROR("main", "%s", err);
        return r;
    }
    if (a->relay && (r = cq_main_relay_join(a->relay, err, sizeof(err))) < 0) {
        CQ_ERROR("main", "%s", err);
        return r;
    }
    char mq_bound[80] = "";
    if (*a->cfg.mq_addr && (r = start_mq(a, mq_bound, sizeof(mq_bound))) < 0)
        return r;
    if ((r = cq_io_write_ready(a->io, mq_bound, cq_mqio_http_bound(a->mq))) < 0) {
        CQ_ERROR("main", "cannot write ready file %s: %s", a->cfg.ready_file, cq_strerror(r));
        return r;
    }
    CQ_INFO("main", "chanqd running: %d workers, auth provider %s%s", o.workers,
            o.auth_provider == CQ_AUTH_FILE ? "file" : "dev", o.dev ? ", dev mode" : "");
    return 0;
}

int main(int argc, char **argv)
{
    app_t a;
    memset(&a, 0, sizeof(a));
    signal(SIGPIPE, SIG_IGN);
    cq_config_defaults(&a.cfg);
    char err[1024] = "";
    int r = cq_config_parse_args(&a.cfg, argc, argv, err, sizeof(err));
    if (r != 0) {
        if (r < 0)
            fprintf(stderr, "chanqd: %s\n(see chanqd --help)\n", err);
        cq_config_done(&a.cfg);
        return r < 0 ? 2 : 0;
    }
    cq_log_set_level((cq_log_level_t)a.cfg.log_level);
    if (strcmp(a.cfg.role, "mgr") == 0) { /* the management service: a composition of its own */
        r = cq_main_mgr(&a.cfg, argc, argv);
        cq_config_done(&a.cfg);
        return r == 0 ? 0 : 1;
    }
    /* before fit_fd_limit() fills --max-connections 0: SIGHUP compares with what was asked */
    if (!(a.reload = cq_main_reload_new(&a.cfg, argc, argv))) {
        CQ_ERROR("main", "out of memory");
        r = -ENOMEM;
    }
    if (r == 0)
        r = fit_fd_limit(&a.cfg);
    if (r == 0)
        r = load_config_files(&a);
    if (r == 0)
        r = load_schema(&a);
    if (r == 0)
        r = start(&a);
    if (r == 0)
        cq_io_run_until_signal(a.io, on_hup, &a);
    stop_mq(&a);
    cq_main_relay_stop(a.relay, a.admin);
    if (a.io)
        cq_admin_remove_source(a.admin, cq_io_metrics_append, a.io);
    cq_io_free(a.io);
    /* after the workers: a connection released at shutdown tells the bridge its resume ended */
    a.bridge = cq_main_bridge_free(a.bridge, a.admin);
    cq_admin_free(a.admin);
    cq_shared_free(a.sh);
    cq_authlim_free(a.authlim);
    cq_settings_free(a.settings);
    cq_spatial_cfg_done(&a.spatial);
    cq_schema_free(a.schema);
    for (int i = 0; i < a.n_old; i++)
        cq_schema_free(a.old_schemas[i]);
    cq_free(a.old_schemas);
    cq_fsm_free(a.client_fsm);
    cq_fsm_free(a.server_fsm);
    cq_main_reload_free(a.reload);
    cq_config_done(&a.cfg);
    return r == 0 ? 0 : 1;
}
