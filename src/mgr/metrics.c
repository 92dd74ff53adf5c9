/* metrics.c - the manager's Prometheus text (common.md contract 3): chanq_mgr_*. */
#include "engine.h"

#include <inttypes.h>

static int counts(const cq_mgr_t *m, cq_sbuf_t *out)
{
    static const char *const cmds[2] = {"publish_config", "offline"};
    static const char *const results[3] = {"ok", "error", "lost"};
    int rc = cq_sbuf_printf(out, "# HELP chanq_mgr_commands_total Commands sent to servers, by "
                                 "their answer (lost: the connection closed first).\n"
                                 "# TYPE chanq_mgr_commands_total counter\n");
    for (int c = 0; rc == 0 && c < 2; c++)
        for (int r = 0; rc == 0 && r < 3; r++)
            rc = cq_sbuf_printf(out,
                                "chanq_mgr_commands_total{cmd=\"%s\",result=\"%s\"} %" PRIu64 "\n",
                                cmds[c], results[r], m->commands[c][r]);
    if (rc == 0)
        rc = cq_sbuf_printf(
            out,
            "# HELP chanq_mgr_svrconfig_total svrconfig requests.\n"
            "# TYPE chanq_mgr_svrconfig_total counter\nchanq_mgr_svrconfig_total %" PRIu64 "\n"
            "# HELP chanq_mgr_sync_total sync_serverinfo reports.\n"
            "# TYPE chanq_mgr_sync_total counter\nchanq_mgr_sync_total %" PRIu64 "\n"
            "# HELP chanq_mgr_audit_total Audit log lines written.\n"
            "# TYPE chanq_mgr_audit_total counter\nchanq_mgr_audit_total %" PRIu64 "\n"
            "# HELP chanq_mgr_state_save_conflicts_total Saves that lost a compare-and-set.\n"
            "# TYPE chanq_mgr_state_save_conflicts_total counter\n"
            "chanq_mgr_state_save_conflicts_total %" PRIu64 "\n"
            "# HELP chanq_mgr_state_save_errors_total Saves that failed (retried).\n"
            "# TYPE chanq_mgr_state_save_errors_total counter\n"
            "chanq_mgr_state_save_errors_total %" PRIu64 "\n",
            m->svrconfig_total, m->sync_total, m->audit_total, m->save_conflicts, m->save_errors);
    return rc;
}

static int servers(const cq_mgr_t *m, uint64_t now, cq_sbuf_t *out)
{
    uint64_t live = 0, stale = 0, offline = 0;
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (cq__mgr_server_offline(m, s))
            offline++;
        else if (cq__mgr_server_stale(m, s, now))
            stale++;
        else
            live++;
    }
    return cq_sbuf_printf(out,
                          "# HELP chanq_mgr_servers Servers known to the manager, by state.\n"
                          "# TYPE chanq_mgr_servers gauge\n"
                          "chanq_mgr_servers{state=\"live\"} %" PRIu64 "\n"
                          "chanq_mgr_servers{state=\"stale\"} %" PRIu64 "\n"
                          "chanq_mgr_servers{state=\"offline\"} %" PRIu64 "\n"
                          "# HELP chanq_mgr_config_version The managed configuration's version.\n"
                          "# TYPE chanq_mgr_config_version gauge\n"
                          "chanq_mgr_config_version %" PRId64 "\n",
                          live, stale, offline, cq__mgr_state_version(m->doc));
}

/* Per shard with a reporting standby: how far behind it is, and the alert. */
static int repl(const cq_mgr_t *m, uint64_t now, cq_sbuf_t *out)
{
    int rc = cq_sbuf_printf(out, "# HELP chanq_mgr_repl_behind_seconds How long the shard's "
                                 "standby has not had everything applied.\n"
                                 "# TYPE chanq_mgr_repl_behind_seconds gauge\n");
    cq_sbuf_t alerts;
    cq_sbuf_init(&alerts);
    if (rc == 0)
        rc = cq_sbuf_printf(&alerts, "# HELP chanq_mgr_repl_lag_alert 1 when the shard's standby "
                                     "is behind by more than --mgr-lag-alert-ms.\n"
                                     "# TYPE chanq_mgr_repl_lag_alert gauge\n");
    uint32_t done[256];
    size_t ndone = 0;
    for (size_t i = 0; rc == 0 && i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (cq__mgr_server_stale(m, s, now) || cq__mgr_server_master(s) ||
            !(s->last->ext.has & CQ_MQMGR_X_REPL))
            continue;
        uint32_t sh = cq__mgr_server_shard(s);
        bool seen = false;
        for (size_t k = 0; k < ndone; k++)
            seen |= done[k] == sh;
        if (seen || ndone == sizeof(done) / sizeof(done[0]))
            continue;
        done[ndone++] = sh;
        int64_t behind;
        bool alert = cq__mgr_shard_alert(m, sh, now, &behind);
        rc = cq_sbuf_printf(out, "chanq_mgr_repl_behind_seconds{shard=\"%" PRIu32 "\"} %.3f\n", sh,
                            (double)behind / 1000.0);
        if (rc == 0)
            rc = cq_sbuf_printf(&alerts, "chanq_mgr_repl_lag_alert{shard=\"%" PRIu32 "\"} %d\n", sh,
                                alert ? 1 : 0);
    }
    if (rc == 0)
        rc = cq_sbuf_append(out, alerts.data, alerts.len);
    cq_sbuf_done(&alerts);
    return rc;
}

int cq__mgr_metrics(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out)
{
    int rc = servers(m, now_ms, out);
    if (rc == 0)
        rc = counts(m, out);
    if (rc == 0)
        rc = repl(m, now_ms, out);
    return rc;
}
