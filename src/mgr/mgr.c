/* mgr.c - the management engine: construction, the state's life (changes applied at once and
 * kept as ops until saved; a compare-and-set miss reloads and applies them again), the store's
 * answers, housekeeping and the functions api.c calls (mgr_int.h). */
#include "engine.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- construction ------------------------------------------------------------------------ */

static char *dup_or_empty(const char *s)
{
    return cq_strdup(s ? s : "");
}

cq_mgr_t *cq_mgr_new(const cq_mgr_opts_t *opts, const cq_mgr_ops_t *ops, void *ud, char *err,
                     size_t errlen)
{
    if (!opts->admin_token || !opts->admin_token[0]) {
        cq_err_fmt(err, errlen, CQ_ECONFIG, "the manager needs an admin token");
        return NULL;
    }
    cq_mgr_t *m = cq_calloc(1, sizeof(*m));
    if (!m)
        goto oom;
    m->o = *opts;
    m->ops = ops;
    m->ud = ud;
    m->store_ver = -1;
    cq_list_init(&m->conns);
    cq_list_init(&m->flushq);
    m->admin_token = dup_or_empty(opts->admin_token);
    m->server_token = dup_or_empty(opts->server_token);
    m->http_hosts = dup_or_empty(opts->http_hosts);
    m->audit_path = dup_or_empty(opts->audit_path);
    m->doc = cq__mgr_state_empty();
    cq_authlim_opts_t lo = {10, 60000, 1000, 0};
    m->authlim = cq_authlim_new(&lo);
    if (!m->admin_token || !m->server_token || !m->http_hosts || !m->audit_path || !m->doc ||
        !m->authlim)
        goto oom;
    /* the copies outlive the caller's strings */
    m->o.admin_token = m->admin_token;
    m->o.server_token = m->server_token;
    m->o.http_hosts = m->http_hosts;
    m->o.audit_path = m->audit_path;
    if (!m->o.stale_ms)
        m->o.stale_ms = 6000;
    if (!m->o.lag_alert_ms)
        m->o.lag_alert_ms = 30000;
    if (!m->o.preauth_max_frame)
        m->o.preauth_max_frame = CQ_MQMGR_PREAUTH_MAX_TOTAL;
    if (!m->o.max_frame)
        m->o.max_frame = CQ_MQMGR_MAX_TOTAL;
    if (!m->o.chart_ms)
        m->o.chart_ms = 10000;
    /* an hour of samples */
    uint32_t points = 3600000u / m->o.chart_ms;
    if (!(m->hist = cq__mgr_hist_new(points < 2 ? 2 : points, CQ_MGR_CHART_SERIES_MAX)))
        goto oom;
    if (!(m->api = cq__mgr_api_new(m)))
        goto oom;
    return m;
oom:
    cq_mgr_free(m);
    cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    return NULL;
}

cq_mgr_t *cq_mgr_free(cq_mgr_t *m)
{
    if (!m)
        return NULL;
    cq__mgr_waits_end(m); /* before the API: a connection may outlive it, its wait may not */
    cq__mgr_api_free(m->api);
    for (size_t i = 0; i < m->nservers; i++) {
        cq_mqmgr_msg_free(m->servers[i]->last);
        cq_mqmgr_msg_free(m->servers[i]->prev);
        cq_free(m->servers[i]);
    }
    cq_free(m->servers);
    for (size_t i = 0; i < m->npending; i++)
        cq__mgr_op_done(&m->pending[i]);
    cq_free(m->pending);
    json_decref(m->doc);
    cq_authlim_free(m->authlim);
    cq__mgr_hist_free(m->hist);
    cq_free(m->admin_token);
    cq_free(m->server_token);
    cq_free(m->http_hosts);
    cq_free(m->audit_path);
    cq_free(m);
    return NULL;
}

const cq_mgr_opts_t *cq__mgr_opts(const cq_mgr_t *m)
{
    return &m->o;
}

cq_mgr_api_t *cq__mgr_api(const cq_mgr_t *m)
{
    return m->api;
}

/* ---- saving -------------------------------------------------------------------------------- */

void cq__mgr_save_kick(cq_mgr_t *m)
{
    if (m->saving || !m->loaded || (!m->npending && !m->save_failed) || m->reload_wanted)
        return;
    char *text = json_dumps(m->doc, JSON_COMPACT);
    if (!text)
        return; /* out of memory: the next tick tries again */
    m->saving = true;
    m->save_failed = false;
    m->ninflight = m->npending;
    m->ops->save(m->ud, text, strlen(text), m->store_ver);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
}

static void drop_pending(cq_mgr_t *m, size_t n)
{
    if (n == 0)
        return; /* pending may be NULL */
    for (size_t i = 0; i < n; i++)
        cq__mgr_op_done(&m->pending[i]);
    memmove(m->pending, m->pending + n, (m->npending - n) * sizeof(*m->pending));
    m->npending -= n;
}

void cq_mgr_store_done(cq_mgr_t *m, int err, int64_t new_ver)
{
    m->saving = false;
    if (err == 0) {
        m->store_ver = new_ver;
        drop_pending(m, m->ninflight);
    } else if (err == CQ_ECONFLICT) {
        m->save_conflicts++;
        m->reload_wanted = true; /* the answer re-applies the pending ops */
    } else {
        m->save_errors++;
        m->save_failed = true; /* the tick saves again */
        cq_log(CQ_LOG_ERROR, "mgr", "saving the state failed: %s", cq_strerror(err));
    }
    m->ninflight = 0;
    if (m->reload_wanted) {
        m->ops->reload(m->ud);
        return;
    }
    if (err == 0) /* a failed save waits for the tick */
        cq__mgr_save_kick(m);
}

/* Applies the pending ops on top of doc (each bumps the version); an op that no longer applies
 * (its module was deleted meanwhile) is dropped. */
static void reapply(cq_mgr_t *m, json_t *doc)
{
    size_t keep = 0;
    for (size_t i = 0; i < m->npending; i++) {
        char err[256];
        int rc = cq__mgr_state_apply(doc, &m->pending[i], err, sizeof(err));
        if (rc < 0) {
            cq_log(CQ_LOG_WARN, "mgr", "a change no longer applies after a concurrent one: %s",
                   err);
            cq__mgr_op_done(&m->pending[i]);
            continue;
        }
        json_object_set_new(doc, "version", json_integer(cq__mgr_state_version(doc) + 1));
        m->pending[keep++] = m->pending[i];
    }
    m->npending = keep;
}

int cq_mgr_store_loaded(cq_mgr_t *m, const char *json, size_t len, int64_t ver, char *err,
                        size_t errlen)
{
    if (m->saving) { /* wait for the save's answer, then load again */
        m->reload_wanted = true;
        return 0;
    }
    m->reload_wanted = false;
    json_t *doc = NULL;
    if (json && ver >= 0) {
        json_error_t jerr;
        doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!doc)
            return cq_err_fmt(err, errlen, CQ_EJSON, "the stored state: line %d: %s", jerr.line,
                              jerr.text);
        int rc = cq__mgr_state_check(doc, err, errlen);
        if (rc < 0) {
            json_decref(doc);
            return rc;
        }
    } else {
        doc = cq__mgr_state_empty();
        if (!doc)
            return -ENOMEM;
        if (!m->npending) /* the first manager writes version 1, with nothing in it */
            json_object_set_new(doc, "version", json_integer(1));
    }
    bool first = !m->loaded;
    int64_t before = cq__mgr_state_version(m->doc);
    bool empty_store = !json || ver < 0;
    reapply(m, doc);
    json_t *old = m->doc;
    m->doc = doc;
    m->store_ver = empty_store ? -1 : ver;
    m->loaded = true;
    if (empty_store && !m->npending)
        m->save_failed = true; /* nothing stored yet: write version 1 */
    if (first || cq__mgr_state_version(doc) != before || !json_equal(old, doc))
        cq__mgr_broadcast(m, old);
    json_decref(old);
    cq__mgr_save_kick(m);
    return 0;
}

bool cq_mgr_store_idle(const cq_mgr_t *m)
{
    return !m->saving && !m->npending && !m->save_failed;
}

int cq_mgr_set_tokens(cq_mgr_t *m, const char *admin_token, const char *server_token)
{
    if (!admin_token || !admin_token[0])
        return CQ_ECONFIG;
    char *a = cq_strdup(admin_token), *s = cq_strdup(server_token ? server_token : "");
    if (!a || !s) {
        cq_free(a);
        cq_free(s);
        return -ENOMEM;
    }
    cq_free(m->admin_token);
    cq_free(m->server_token);
    m->o.admin_token = m->admin_token = a;
    m->o.server_token = m->server_token = s;
    return 0;
}

/* ---- changes ------------------------------------------------------------------------------- */

int64_t cq__mgr_change(cq_mgr_t *m, mgr_op_t *op, char *err, size_t errlen)
{
    json_t *old = json_deep_copy(m->doc);
    int rc = old ? 0 : -ENOMEM;
    if (rc == 0 && m->npending == m->pending_cap) {
        size_t cap = m->pending_cap ? m->pending_cap * 2 : 8;
        mgr_op_t *p = cq_realloc(m->pending, cap * sizeof(*p));
        if (p) {
            m->pending = p;
            m->pending_cap = cap;
        }
        rc = p ? 0 : -ENOMEM;
    }
    if (rc == 0)
        rc = cq__mgr_state_apply(m->doc, op, err, errlen);
    if (rc < 0) {
        if (rc == -ENOMEM)
            cq_err_fmt(err, errlen, rc, "out of memory");
        json_decref(old);
        cq__mgr_op_done(op);
        return rc;
    }
    int64_t ver = cq__mgr_state_version(m->doc) + 1;
    json_object_set_new(m->doc, "version", json_integer(ver));
    m->pending[m->npending++] = *op;
    cq__mgr_broadcast(m, old);
    json_decref(old);
    cq__mgr_save_kick(m);
    return ver;
}

int64_t cq__mgr_module_put(cq_mgr_t *m, uint32_t id, const char *json, size_t len, char *err,
                           size_t errlen)
{
    json_error_t jerr;
    json_t *body = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!body)
        return cq_err_fmt(err, errlen, CQ_EJSON, "invalid JSON: %s", jerr.text);
    mgr_op_t op = {.kind = MGR_OP_MODULE_PUT, .id = id, .module = body};
    return cq__mgr_change(m, &op, err, errlen);
}

int64_t cq__mgr_module_delete(cq_mgr_t *m, uint32_t id, char *err, size_t errlen)
{
    mgr_op_t op = {.kind = MGR_OP_MODULE_DELETE, .id = id};
    return cq__mgr_change(m, &op, err, errlen);
}

int64_t cq__mgr_topic_set_online(cq_mgr_t *m, const char *topic, bool online, char *err,
                                 size_t errlen)
{
    if (!cq_mq_topic_valid(topic, strlen(topic)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    mgr_op_t op = {.kind = MGR_OP_TOPIC, .flag = online};
    memcpy(op.topic, topic, strlen(topic) + 1);
    return cq__mgr_change(m, &op, err, errlen);
}

/* What the live masters report of topic: offline when one says so, else online. */
static bool reported_online(const cq_mgr_t *m, const char *topic, uint64_t now)
{
    for (size_t i = 0; i < m->nservers; i++) {
        const mgr_server_t *s = m->servers[i];
        if (!s->last || !cq__mgr_server_master(s) || cq__mgr_server_stale(m, s, now))
            continue;
        for (size_t k = 0; k < s->last->ext.ntopics; k++)
            if (strcmp(s->last->ext.topics[k].name, topic) == 0 && !s->last->ext.topics[k].online)
                return false;
    }
    return true;
}

int64_t cq__mgr_topic_set_retention(cq_mgr_t *m, const char *topic, int64_t days, uint64_t now,
                                    char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(topic, strlen(topic)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    if (days < 0 || days > CQ_MGR_RETENTION_DAYS_MAX)
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "days: must be an integer in [0, %d] (0: keep forever)",
                          CQ_MGR_RETENTION_DAYS_MAX);
    mgr_op_t op = {.kind = MGR_OP_TOPIC_RETENTION,
                   .retention = days * 86400,
                   .flag = reported_online(m, topic, now)};
    memcpy(op.topic, topic, strlen(topic) + 1);
    return cq__mgr_change(m, &op, err, errlen);
}

int64_t cq__mgr_topic_create(cq_mgr_t *m, const char *topic, int64_t days, char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(topic, strlen(topic)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    if (days < -1 || days > CQ_MGR_RETENTION_DAYS_MAX)
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "retention_days: must be an integer in [0, %d] (0: keep forever), or "
                          "absent (each server's own)",
                          CQ_MGR_RETENTION_DAYS_MAX);
    mgr_op_t op = {.kind = MGR_OP_TOPIC_CREATE,
                   .retention = days < 0 ? CQ_MQMGR_RETENTION_UNSET : days * 86400};
    memcpy(op.topic, topic, strlen(topic) + 1);
    return cq__mgr_change(m, &op, err, errlen);
}

int64_t cq__mgr_server_set_offline(cq_mgr_t *m, uint32_t appid, bool offline, char *err,
                                   size_t errlen)
{
    mgr_op_t op = {.kind = MGR_OP_SERVER, .id = appid, .flag = offline};
    return cq__mgr_change(m, &op, err, errlen);
}

int64_t cq__mgr_bindings_put(cq_mgr_t *m, const char *json, size_t len, char *err, size_t errlen)
{
    /* the text itself, so that a syntax error names its line and column as the servers would */
    int rc = cq__mgr_bindings_check(json, len, err, errlen);
    if (rc < 0)
        return rc;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
    if (!doc)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    mgr_op_t op = {.kind = MGR_OP_BINDINGS, .bindings = doc};
    return cq__mgr_change(m, &op, err, errlen);
}

int cq__mgr_bindings_json(const cq_mgr_t *m, cq_sbuf_t *out)
{
    const json_t *b = json_object_get(m->doc, "bindings");
    if (!b)
        return cq_sbuf_printf(out, "{\"bindings\":[]}");
    char *text = json_dumps(b, JSON_COMPACT);
    if (!text)
        return -ENOMEM;
    int rc = cq_sbuf_append(out, text, strlen(text));
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    return rc;
}

void cq__mgr_audit_write(cq_mgr_t *m, const char *line, size_t len)
{
    m->audit_total++;
    m->ops->audit(m->ud, line, len);
}

/* ---- housekeeping -------------------------------------------------------------------------- */

void cq_mgr_flush(cq_mgr_t *m)
{
    while (!cq_list_empty(&m->flushq)) {
        cq_list_t *n = m->flushq.next;
        cq_list_remove(n);
        cq_mgr_conn_t *c = (cq_mgr_conn_t *)((char *)n - offsetof(cq_mgr_conn_t, flush_node));
        c->ops.t.flush(c->tctx);
    }
    cq__mgr_api_flush(m->api);
}

void cq_mgr_tick(cq_mgr_t *m, uint64_t now_ms)
{
    m->now_ms = now_ms;
    cq__mgr_save_kick(m); /* a failed save is retried */
    cq__mgr_waits_tick(m, now_ms);
    if (!m->sampled_ms || now_ms - m->sampled_ms >= m->o.chart_ms) {
        m->sampled_ms = now_ms ? now_ms : 1;
        cq__mgr_sample(m, now_ms);
    }
    cq__mgr_api_tick(m->api, now_ms);
}

_Static_assert(CQ_MGR_CHART_KEY_MAX == CQ_MGR_HIST_KEY_MAX, "one bound for the charts' keys");

int cq__mgr_charts_json(const cq_mgr_t *m, const char *prefix, cq_sbuf_t *out)
{
    json_t *o = cq__mgr_hist_json(m->hist, prefix);
    if (o && json_object_set_new(o, "interval_ms", json_integer(m->o.chart_ms)) < 0)
        o = (json_decref(o), NULL);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    int r = s ? cq_sbuf_append(out, s, strlen(s)) : -ENOMEM;
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    if (s)
        jfree(s);
    return r < 0 ? -ENOMEM : 0;
}

int cq_mgr_metrics(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out)
{
    return cq__mgr_metrics(m, now_ms, out);
}
