/* chanqd - config -> modules -> run. The composition root. */
#include "cq_config.h"
#include "cq_core.h"
#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_fsm.h"
#include "cq_io.h"
#include "cq_log.h"
#include "cq_schema.h"
#include "cq_settings.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct app {
    cq_config_t cfg;
    cq_fsm_t *client_fsm, *server_fsm;
    cq_settings_t *settings;
    cq_schema_t *schema;
    cq_schema_t *old_schemas[64]; /* earlier schemas: channels may still point into them */
    int n_old;
    cq_shared_t *sh;
    cq_io_t *io;
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
    if (r < 0)
        CQ_ERROR("main", "channel settings: %s", err);
    return r;
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

/* SIGHUP: reload the descriptor sets; workers resolve channels of newly known types. */
static void on_hup(void *ud)
{
    app_t *a = ud;
    cq_schema_t *s;
    const char *list = a->cfg.channel_data_types;
    if (!list || !*list || a->n_old >= (int)(sizeof(a->old_schemas) / sizeof(a->old_schemas[0])))
        return;
    if (load_schema_files(list, &s) < 0)
        return; /* keep the current types */
    if (a->schema)
        a->old_schemas[a->n_old++] = a->schema;
    a->schema = s;
    cq_shared_set_schema(a->sh, s);
}

static void core_opts(const app_t *a, cq_core_opts_t *o)
{
    const cq_config_t *c = &a->cfg;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    memset(o, 0, sizeof(*o));
    o->workers = c->workers > 0 ? c->workers : (int)(ncpu > 0 ? ncpu : 1);
    o->client_fsm = a->client_fsm;
    o->server_fsm = a->server_fsm;
    o->settings = a->settings;
    o->dev = c->dev;
    o->server_bypass_auth = c->server_bypass_auth;
    o->server_recoverable = c->server_conn_recoverable;
    o->server_recover_timeout_ms = (uint32_t)c->server_conn_recover_timeout_ms;
    o->compression_type = (uint32_t)c->compression_type;
    o->auth_provider = strcasecmp(c->auth_provider, "file") == 0 ? CQ_AUTH_FILE : CQ_AUTH_DEV;
    o->auth_token_file = c->auth_token_file;
    o->auth_timeout_ms = (uint32_t)c->auth_timeout_ms;
    o->max_failed_auth = (uint32_t)c->max_failed_auth;
    o->conn_id_bits = (uint32_t)c->conn_id_bits;
    o->idle_timeout_ms = (uint32_t)c->idle_timeout_ms;
    o->max_packet_size = (uint32_t)c->max_packet_size;
    o->max_connections = (uint32_t)c->max_connections;
    o->max_channels = (uint32_t)c->max_channels;
    o->max_subs_per_conn = (uint32_t)c->max_subs_per_conn;
    o->sendq_soft_limit = c->sendq_soft_limit;
    o->sendq_soft_seconds = (uint32_t)c->sendq_soft_seconds;
    o->sendq_hard_limit = c->sendq_hard_limit;
    o->schema = a->schema;
    o->max_channel_data = c->max_channel_data_size;
}

static int start(app_t *a)
{
    cq_core_opts_t o;
    core_opts(a, &o);
    char err[512] = "";
    int r = cq_shared_new(&o, cq_io_core_ops(), NULL, &a->sh, err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("main", "%s", err);
        return r;
    }
    cq_io_opts_t io = {a->cfg.client_addr,       a->cfg.server_addr,       a->cfg.admin_addr,
                       a->cfg.client_legacy_tag, a->cfg.server_legacy_tag, a->cfg.tcp_keepalive_s,
                       a->cfg.ready_file};
    r = cq_io_start(a->sh, &io, &a->io, err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("main", "%s", err);
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
    r = load_config_files(&a);
    if (r == 0)
        r = load_schema(&a);
    if (r == 0)
        r = start(&a);
    if (r == 0)
        cq_io_run_until_signal(a.io, on_hup, &a);
    cq_io_free(a.io);
    cq_shared_free(a.sh);
    cq_settings_free(a.settings);
    cq_schema_free(a.schema);
    for (int i = 0; i < a.n_old; i++)
        cq_schema_free(a.old_schemas[i]);
    cq_fsm_free(a.client_fsm);
    cq_fsm_free(a.server_fsm);
    cq_config_done(&a.cfg);
    return r == 0 ? 0 : 1;
}
