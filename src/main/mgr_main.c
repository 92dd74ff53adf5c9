/* mgr_main.c - `chanqd --role mgr`: the management service's composition root (doc/mgr.md).
 * Tokens, the state store (a file, or ZooKeeper with --zk-hosts), the edge (src/io/mgr_io.c)
 * with its engine, the admin registry, the ready file and the signals. */
#include "mgr_main.h"
#include "reload.h"

#include "cq_admin.h"
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_file.h"
#include "cq_io.h"
#include "cq_log.h"
#include "cq_mgrio.h"
#include "cq_mgrstore.h"
#include "cq_mq.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define TOKEN_NAME "chanq-mgr-admin-token" /* the generated token, next to the state file */

typedef struct mgr_app {
    const cq_config_t *c;
    char admin_token[CQ_MQ_TOKEN_MAX + 1];
    char server_token[CQ_MQ_TOKEN_MAX + 1];
    cq_admin_t *admin;
    cq_mgrio_t *io;
    cq_main_reload_t *reload; /* SIGHUP: --log-level from the options parsed again */
} mgr_app_t;

/* A token file's text, trailing whitespace removed, into buf. "" path: buf "". */
static int read_token(const char *opt, const char *path, char *buf, size_t len)
{
    int r = cq_file_read_secret(path, buf, len);
    if (r < 0 && r != -ENAMETOOLONG) {
        CQ_ERROR("mgr", "--%s %s: %s", opt, path, cq_strerror(r));
        return r;
    }
    if (*path && (r < 0 || !*buf)) {
        CQ_ERROR("mgr", "--%s %s: the token must be 1 to %zu bytes", opt, path, len - 1);
        return CQ_ECONFIG;
    }
    return 0;
}

/* The directory of path (with its slash), or "" for a bare name. */
static void dir_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) + 1 : 0;
    snprintf(out, cap, "%.*s", (int)n, path);
}

/* No --mgr-admin-token-file: a random token (32 bytes, hex), written next to the state file
 * (mode 0600, replaced at every start) so that the operator can read it. */
static int generate_token(mgr_app_t *a)
{
    uint8_t b[32];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        CQ_ERROR("mgr", "cannot generate the admin token: %s", strerror(errno));
        return -EIO;
    }
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(a->admin_token + 2 * i, 3, "%02x", b[i]);
    char dir[4096], path[4200], tmp[4300];
    dir_of(a->c->mgr_state_file, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s%s", dir, TOKEN_NAME);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int r = fd < 0 ? -errno : 0;
    if (r == 0 && (write(fd, a->admin_token, 64) != 64 || write(fd, "\n", 1) != 1))
        r = -EIO;
    if (fd >= 0)
        close(fd);
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0) {
        CQ_ERROR("mgr", "cannot write the admin token to %s: %s", path, cq_strerror(r));
        return r;
    }
    CQ_INFO("mgr", "admin token generated: %s (mode 0600)", path);
    return 0;
}

static int read_tokens(mgr_app_t *a, bool at_start)
{
    const cq_config_t *c = a->c;
    int r = 0;
    if (*c->mgr_admin_token_file)
        r = read_token("mgr-admin-token-file", c->mgr_admin_token_file, a->admin_token,
                       sizeof(a->admin_token));
    else if (at_start)
        r = generate_token(a);
    if (r == 0 && *c->mgr_token_file)
        r = read_token("mgr-token-file", c->mgr_token_file, a->server_token,
                       sizeof(a->server_token));
    if (r == 0 && !*c->mgr_token_file && !c->dev && at_start)
        CQ_WARN("mgr", "no --mgr-token-file: every server report is refused (or use --dev)");
    return r;
}

/* The state store: the file, or ZooKeeper with --zk-hosts. */
static int make_store(const cq_config_t *c, const cq_mgrstore_ops_t **ops, void **ud)
{
    int r;
    if (!*c->zk_hosts) {
        *ops = &cq_mgrstore_file_ops;
        r = cq_mgrstore_file_new(c->mgr_state_file, ud);
        if (r < 0)
            CQ_ERROR("mgr", "--mgr-state-file %s: %s", c->mgr_state_file, cq_strerror(r));
        else
            CQ_INFO("mgr", "state in %s", c->mgr_state_file);
        return r;
    }
#ifdef CQ_HAVE_ZOOKEEPER
    *ops = &cq_mgrstore_zk_ops;
    r = cq_mgrstore_zk_new(c->zk_hosts, c->zk_root, (uint32_t)c->zk_session_ms, ud);
    if (r < 0)
        CQ_ERROR("mgr", "--zk-hosts %s: %s", c->zk_hosts, cq_strerror(r));
    else
        CQ_INFO("mgr", "state in ZooKeeper %s%s/mgr/state", c->zk_hosts, c->zk_root);
    return r;
#else
    CQ_ERROR("mgr", "--zk-hosts: ZooKeeper state store not built (libzookeeper-mt missing)");
    return CQ_ECONFIG;
#endif
}

static int write_ready(mgr_app_t *a)
{
    const char *path = a->c->ready_file;
    if (!*path)
        return 0;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    /* mgrhttp= repeats http= under the name the server's mqhttp= suggests (tests use both) */
    const char *http = cq_mgrio_http_bound(a->io);
    fprintf(f, "mgr=%s http=%s mgrhttp=%s admin=%s\n", cq_mgrio_bound(a->io), http, http,
            cq_mgrio_admin_bound(a->io));
    if (fclose(f) != 0)
        return -EIO;
    return rename(tmp, path) < 0 ? -errno : 0;
}

static int start(mgr_app_t *a)
{
    const cq_config_t *c = a->c;
    const cq_mgrstore_ops_t *sops = NULL;
    void *sud = NULL;
    int r = read_tokens(a, true);
    if (r == 0)
        r = make_store(c, &sops, &sud);
    if (r < 0)
        return r;
    if (!(a->admin = cq_admin_new()) || !(a->io = cq_mgrio_new())) {
        sops->free(sud);
        return -ENOMEM;
    }
    cq_mgr_opts_t mo = {.admin_token = a->admin_token,
                        .server_token = a->server_token,
                        .http_hosts = c->mgr_http_hosts,
                        .audit_path = c->mgr_audit_log,
                        .dev = c->dev,
                        .stale_ms = (uint32_t)c->mgr_stale_ms,
                        .lag_alert_ms = (uint32_t)c->mgr_lag_alert_ms,
                        .chart_ms = (uint32_t)c->mgr_chart_ms};
    cq_mgrio_opts_t io = {.addr = c->mgr_addr,
                          .http_addr = c->mgr_http_addr,
                          .admin_addr = c->admin_addr,
                          .admin = a->admin,
                          .audit_path = c->mgr_audit_log,
                          .max_conns = (uint32_t)c->mgr_max_connections,
                          .http_max_conns = (uint32_t)c->mgr_http_max_connections,
                          .admin_max_conns = (uint32_t)c->admin_max_connections,
                          .auth_timeout_ms = (uint32_t)c->mgr_auth_timeout_ms,
                          .idle_timeout_ms = (uint32_t)c->mgr_idle_timeout_ms,
                          .http_timeout_ms = (uint32_t)c->mgr_http_timeout_ms,
                          .admin_timeout_ms = (uint32_t)c->admin_timeout_ms,
                          .tcp_keepalive_s = c->tcp_keepalive_s,
                          .shutdown_grace_ms = c->shutdown_grace_ms};
    char err[512] = "";
    r = cq_admin_add_source(a->admin, "mgr", cq_mgrio_metrics_append, a->io);
    if (r < 0)
        sops->free(sud);
    else /* takes the store, also when it fails */
        r = cq_mgrio_start(a->io, &mo, sops, sud, &io, err, sizeof(err));
    if (r < 0) {
        CQ_ERROR("mgr", "%s", err[0] ? err : cq_strerror(r));
        return r;
    }
    if ((r = write_ready(a)) < 0) {
        CQ_ERROR("mgr", "cannot write ready file %s: %s", c->ready_file, cq_strerror(r));
        return r;
    }
    if (strcmp(cq_mgrio_http_bound(a->io), "-") != 0)
        CQ_INFO("mgr", "console: http://%s/", cq_mgrio_http_bound(a->io));
    CQ_INFO("mgr", "chanqd manager running%s", c->dev ? " (dev mode)" : "");
    return 0;
}

/* SIGHUP: the two token files again; a file that cannot be read keeps the current tokens. */
static void on_hup(void *ud)
{
    mgr_app_t *a = ud;
    cq_main_reload_config(a->reload);
    char keep_admin[sizeof(a->admin_token)], keep_server[sizeof(a->server_token)];
    memcpy(keep_admin, a->admin_token, sizeof(keep_admin));
    memcpy(keep_server, a->server_token, sizeof(keep_server));
    if (read_tokens(a, false) < 0 || cq_mgrio_set_tokens(a->io, a->admin_token, a->server_token)) {
        memcpy(a->admin_token, keep_admin, sizeof(keep_admin));
        memcpy(a->server_token, keep_server, sizeof(keep_server));
        CQ_ERROR("mgr", "SIGHUP: keeping the current tokens");
        return;
    }
    CQ_INFO("mgr", "SIGHUP: tokens reloaded");
}

int cq_main_mgr(const cq_config_t *c, int argc, char **argv)
{
    mgr_app_t a;
    memset(&a, 0, sizeof(a));
    a.c = c;
    a.reload = cq_main_reload_new(c, argc, argv);
    int r = a.reload ? start(&a) : -ENOMEM;
    if (r == 0)
        cq_io_run_until_signal(NULL, on_hup, &a);
    if (a.io)
        cq_admin_remove_source(a.admin, cq_mgrio_metrics_append, a.io);
    a.io = cq_mgrio_free(a.io);
    cq_admin_free(a.admin);
    cq_main_reload_free(a.reload);
    explicit_bzero(a.admin_token, sizeof(a.admin_token));
    explicit_bzero(a.server_token, sizeof(a.server_token));
    return r;
}
