/* test_mgr_api.c - the console's HTTP side (src/mgr/api.c) against a fake engine (the functions
 * of mgr_int.h that the engine provides are defined here) and a fake edge (flush copies the send
 * queue into a buffer): pages and security headers, the Host check, login and sessions, CSRF,
 * the bearer token, each route and what it hands the engine, engine refusals as JSON errors,
 * limits, the login budget, session expiry and eviction, and the audit trail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_err.h"
#include "cq_sendq.h"
#include "mgr_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fake engine ------------------------------------------------------------------------ */

struct cq_mgr {
    cq_mgr_opts_t opts;
    cq_mgr_api_t *api;
    int64_t version;
    int64_t next_err; /* the next change fails with this (and err_text) */
    char err_text[128];
    char last_call[256]; /* what the last change was asked */
    char audit[8][1024]; /* audit lines written, the last 8 */
    size_t naudit;
    void *wait_ud; /* the API's context of the invalidate in flight */
    int cancelled; /* cq__mgr_invalidate_cancel calls */
};

static struct cq_mgr fm;

const cq_mgr_opts_t *cq__mgr_opts(const cq_mgr_t *m)
{
    return &m->opts;
}

cq_mgr_api_t *cq__mgr_api(const cq_mgr_t *m)
{
    return m->api;
}

static int64_t change(cq_mgr_t *m, char *err, size_t errlen)
{
    if (m->next_err) {
        int64_t e = m->next_err;
        m->next_err = 0;
        snprintf(err, errlen, "%s", m->err_text);
        return e;
    }
    return ++m->version;
}

int64_t cq__mgr_module_put(cq_mgr_t *m, uint32_t id, const char *json, size_t len, char *err,
                           size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "put %u %.*s", id, (int)len, json);
    return change(m, err, errlen);
}

int64_t cq__mgr_module_delete(cq_mgr_t *m, uint32_t id, char *err, size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "delete %u", id);
    return change(m, err, errlen);
}

int64_t cq__mgr_topic_set_online(cq_mgr_t *m, const char *topic, bool online, char *err,
                                 size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "topic %s %d", topic, online);
    return change(m, err, errlen);
}

/* As the engine's (mgr.c): the days are checked there, and the path and body here. */
int64_t cq__mgr_topic_set_retention(cq_mgr_t *m, const char *topic, int64_t days, uint64_t now,
                                    char *err, size_t errlen)
{
    (void)now;
    snprintf(m->last_call, sizeof(m->last_call), "retention %s %lld", topic, (long long)days);
    if (days < 0 || days > 36500)
        return snprintf(err, errlen, "days: must be an integer in [0, 36500] (0: keep forever)"),
               CQ_EFIELD;
    return change(m, err, errlen);
}

int cq__mgr_charts_json(const cq_mgr_t *m, const char *prefix, cq_sbuf_t *out)
{
    (void)m;
    return cq_sbuf_printf(out, "{\"prefix\":\"%s\"}", prefix);
}

int64_t cq__mgr_topic_create(cq_mgr_t *m, const char *topic, int64_t days, char *err, size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "create %s %lld", topic, (long long)days);
    if (days < -1 || days > 36500)
        return snprintf(err, errlen, "retention_days: must be an integer in [0, 36500]"), CQ_EFIELD;
    return change(m, err, errlen);
}

/* As the engine's (msgcmd.c): asked, the outcome comes later through cq__mgr_api_invalidated. */
int cq__mgr_invalidate(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset,
                       uint64_t now, void *ud, char *err, size_t errlen)
{
    (void)now;
    snprintf(m->last_call, sizeof(m->last_call), "invalidate %s %u %llu", topic, shard,
             (unsigned long long)offset);
    int64_t r = change(m, err, errlen);
    if (r < 0)
        return (int)r;
    m->wait_ud = ud;
    return 0;
}

int cq__mgr_message(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset, uint64_t now,
                    void *ud, char *err, size_t errlen)
{
    (void)now;
    snprintf(m->last_call, sizeof(m->last_call), "message %s %u %llu", topic, shard,
             (unsigned long long)offset);
    int64_t r = change(m, err, errlen);
    if (r < 0)
        return (int)r;
    m->wait_ud = ud;
    return 0;
}

int cq__mgr_message_key(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t producer_id,
                        uint64_t seq, uint64_t now, void *ud, char *err, size_t errlen)
{
    (void)now;
    snprintf(m->last_call, sizeof(m->last_call), "message-key %s %u %llu %llu", topic, shard,
             (unsigned long long)producer_id, (unsigned long long)seq);
    int64_t r = change(m, err, errlen);
    if (r < 0)
        return (int)r;
    m->wait_ud = ud;
    return 0;
}

void cq__mgr_invalidate_cancel(cq_mgr_t *m, void *ud)
{
    if (m->wait_ud == ud) {
        m->wait_ud = NULL;
        m->cancelled++;
    }
}

int64_t cq__mgr_server_set_offline(cq_mgr_t *m, uint32_t appid, bool offline, char *err,
                                   size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "server %u %d", appid, offline);
    return change(m, err, errlen);
}

int64_t cq__mgr_bindings_put(cq_mgr_t *m, const char *json, size_t len, char *err, size_t errlen)
{
    snprintf(m->last_call, sizeof(m->last_call), "bindings %.*s", (int)len, json);
    return change(m, err, errlen);
}

int cq__mgr_bindings_json(const cq_mgr_t *m, cq_sbuf_t *out)
{
    return cq_sbuf_printf(out, "{\"bindings\":[{\"v\":%lld}]}", (long long)m->version);
}

int cq__mgr_state_json(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out)
{
    return cq_sbuf_printf(out, "{\"version\":%lld,\"now_ms\":%llu}", (long long)m->version,
                          (unsigned long long)now_ms);
}

void cq__mgr_audit_write(cq_mgr_t *m, const char *line, size_t len)
{
    snprintf(m->audit[m->naudit % 8], sizeof(m->audit[0]), "%.*s", (int)len, line);
    m->naudit++;
}

static const char *last_audit(void)
{
    return fm.naudit ? fm.audit[(fm.naudit - 1) % 8] : "";
}

/* ---- the fake edge -------------------------------------------------------------------------- */

typedef struct edge {
    cq_mgr_hconn_t *h;
    char out[512 * 1024];
    size_t outlen;
    int closed;
} edge_t;

static void e_flush(void *tctx)
{
    edge_t *e = tctx;
    cq_sendq_t *q = cq_mgr_hconn_sendq(e->h);
    const struct iovec *iov;
    int n;
    while (cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t tot = 0;
        for (int i = 0; i < n; i++) {
            assert_true(e->outlen + iov[i].iov_len < sizeof(e->out));
            memcpy(e->out + e->outlen, iov[i].iov_base, iov[i].iov_len);
            e->outlen += iov[i].iov_len;
            tot += iov[i].iov_len;
        }
        cq_sendq_written(q, tot);
    }
}

static void e_close(void *tctx)
{
    edge_t *e = tctx;
    e_flush(e); /* the edge writes what is queued, then closes */
    e->closed++;
}

static int e_peer(void *tctx, char *buf, size_t len)
{
    (void)tctx;
    snprintf(buf, len, "127.0.0.1:5555");
    return 0;
}

static const cq_mgr_conn_ops_t e_ops = {{"tcp", e_flush, e_close, e_peer}};

static uint64_t now_ms = 1796173323456ull; /* 2026-12-02T01:02:03.456Z */

static edge_t *edge_new(const char *peer)
{
    edge_t *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    e->h = cq_mgr_hconn_new(&fm, &e_ops, e, peer);
    assert_non_null(e->h);
    return e;
}

static void edge_free(edge_t *e)
{
    cq_mgr_hconn_close(e->h);
    free(e);
}

static int feed(edge_t *e, const char *p, size_t n)
{
    int r = cq_mgr_hconn_input(e->h, (const uint8_t *)p, n, now_ms);
    cq__mgr_api_flush(fm.api);
    return r;
}

/* One answer taken from the front of e->out. */
typedef struct resp {
    int status;
    char head[2048];
    char body[256 * 1024];
} resp_t;

static bool take(edge_t *e, resp_t *r)
{
    memset(r, 0, sizeof(*r));
    e->out[e->outlen] = '\0';
    char *end = strstr(e->out, "\r\n\r\n");
    if (!end)
        return false;
    size_t hl = (size_t)(end - e->out) + 4;
    assert_true(hl < sizeof(r->head));
    memcpy(r->head, e->out, hl);
    const char *cl = strstr(r->head, "Content-Length: ");
    assert_non_null(cl);
    size_t bl = strtoul(cl + 16, NULL, 10);
    assert_true(hl + bl <= e->outlen && bl < sizeof(r->body));
    memcpy(r->body, e->out + hl, bl);
    r->status = atoi(r->head + 9);
    memmove(e->out, e->out + hl + bl, e->outlen - hl - bl);
    e->outlen -= hl + bl;
    return true;
}

static char creq[128 * 1024];

/* Sends one request (extra: header lines, each ending in CRLF) and takes its answer. */
static resp_t *call(edge_t *e, const char *method, const char *path, const char *extra,
                    const char *body)
{
    static resp_t r;
    int n = snprintf(creq, sizeof(creq), "%s %s HTTP/1.1\r\nHost: 127.0.0.1:12121\r\n%s", method,
                     path, extra ? extra : "");
    if (body)
        n += snprintf(creq + n, sizeof(creq) - (size_t)n, "Content-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
    else
        n += snprintf(creq + n, sizeof(creq) - (size_t)n, "\r\n");
    feed(e, creq, (size_t)n);
    assert_true(take(e, &r));
    return &r;
}

static bool has(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("missing \"%s\" in:\n%s\n", needle, hay);
        return false;
    }
    return true;
}

/* Logs in; returns the cookie header line and the CSRF header line. */
static void login(edge_t *e, char *cookie, size_t ccap, char *csrf, size_t scap)
{
    resp_t *r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n",
                     "{\"token\":\"admintok\"}");
    assert_int_equal(r->status, 200);
    const char *sc = strstr(r->head, "Set-Cookie: chanq_session=");
    assert_non_null(sc);
    sc += strlen("Set-Cookie: chanq_session=");
    assert_int_equal(strspn(sc, "0123456789abcdef"), 64);
    assert_true(has(r->head, "; HttpOnly; SameSite=Strict; Path=/\r\n"));
    snprintf(cookie, ccap, "Cookie: a=b; chanq_session=%.64s\r\n", sc);
    const char *c = strstr(r->body, "{\"csrf\":\"");
    assert_non_null(c);
    c += 9;
    assert_int_equal(strspn(c, "0123456789abcdef"), 32);
    assert_string_equal(c + 32, "\"}");
    snprintf(csrf, scap, "X-CSRF-Token: %.32s\r\n", c);
}

static int setup(void **state)
{
    (void)state;
    memset(&fm, 0, sizeof(fm));
    fm.opts.admin_token = "admintok";
    fm.opts.http_hosts = "localhost,127.0.0.1";
    fm.version = 4;
    fm.api = cq__mgr_api_new(&fm);
    assert_non_null(fm.api);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fm.api = cq__mgr_api_free(fm.api);
    return 0;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_pages(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    resp_t *r = call(e, "GET", "/", NULL, NULL);
    assert_int_equal(r->status, 200);
    assert_true(has(r->head, "Content-Type: text/html; charset=utf-8\r\n"));
    assert_true(has(r->head, "Content-Security-Policy: default-src 'self'"));
    assert_true(has(r->head, "X-Frame-Options: DENY\r\n"));
    assert_true(has(r->head, "X-Content-Type-Options: nosniff\r\n"));
    assert_true(has(r->body, "<script src=\"/console.js\"></script>"));
    assert_null(strstr(r->body, "http://"));
    assert_null(strstr(r->body, "https://"));
    r = call(e, "GET", "/console.js", NULL, NULL);
    assert_int_equal(r->status, 200);
    assert_true(has(r->head, "Content-Type: text/javascript; charset=utf-8\r\n"));
    r = call(e, "GET", "/console.css", NULL, NULL);
    assert_int_equal(r->status, 200);
    assert_true(has(r->head, "Content-Type: text/css; charset=utf-8\r\n"));
    r = call(e, "POST", "/", NULL, "");
    assert_int_equal(r->status, 405);
    assert_true(has(r->head, "Allow: GET\r\n"));
    r = call(e, "GET", "/nope", NULL, NULL);
    assert_int_equal(r->status, 404);
    assert_string_equal(r->body, "{\"error\":\"no such page\"}");
    assert_int_equal(e->closed, 0);
    edge_free(e);
}

static void test_host(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *rq = "GET / HTTP/1.1\r\nHost: evil.example:12121\r\n\r\n";
    resp_t r;
    feed(e, rq, strlen(rq));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 421);
    assert_string_equal(r.body, "{\"error\":\"Host: not one of --mgr-http-hosts\"}");
    rq = "GET / HTTP/1.1\r\nHost: LOCALHOST:1\r\n\r\n";
    feed(e, rq, strlen(rq));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    rq = "GET / HTTP/1.0\r\n\r\n"; /* no Host: not one of the list */
    feed(e, rq, strlen(rq));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 421);
    assert_int_equal(e->closed, 1); /* HTTP/1.0 without keep-alive */
    edge_free(e);
    fm.opts.http_hosts = "*";
    e = edge_new("127.0.0.1:5555");
    rq = "GET / HTTP/1.1\r\nHost: whatever\r\n\r\n";
    feed(e, rq, strlen(rq));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    edge_free(e);
}

static void test_login_session_csrf(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    char cookie[128], csrf[64], hdr[512];
    resp_t *r = call(e, "GET", "/api/state", NULL, NULL);
    assert_int_equal(r->status, 401);
    assert_true(has(r->head, "Cache-Control: no-store\r\n"));
    assert_true(has(r->body, "\"error\":\"not logged in"));
    r = call(e, "POST", "/api/login", "Content-Type: text/plain\r\n", "{\"token\":\"admintok\"}");
    assert_int_equal(r->status, 415);
    r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n", "{\"tok\":1}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"token: must be a string of at most 256 bytes\"}");
    r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n", "[1");
    assert_int_equal(r->status, 400);
    assert_true(has(r->body, "{\"error\":\"body: "));
    r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n", "{\"token\":\"x\"}");
    assert_int_equal(r->status, 401);
    assert_string_equal(r->body, "{\"error\":\"token: wrong admin token\"}");
    assert_string_equal(last_audit(),
                        "{\"time\":\"2026-12-02T01:02:03.456Z\",\"addr\":\"127.0.0.1\","
                        "\"auth\":\"session\",\"action\":\"login.failed\",\"target\":\"\","
                        "\"version\":0,\"result\":\"wrong admin token\"}");
    login(e, cookie, sizeof(cookie), csrf, sizeof(csrf));
    assert_true(has(last_audit(), "\"action\":\"login\",\"target\":\"\",\"version\":0,"
                                  "\"result\":\"ok\"}"));
    r = call(e, "GET", "/api/state", cookie, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"version\":4,\"now_ms\":1796173323456}");
    /* a mutation: the cookie alone is not enough */
    snprintf(hdr, sizeof(hdr), "%sContent-Type: application/json\r\n", cookie);
    r = call(e, "POST", "/api/topics/orders/offline", hdr, "{}");
    assert_int_equal(r->status, 403);
    assert_string_equal(r->body, "{\"error\":\"X-CSRF-Token: missing or wrong\"}");
    snprintf(hdr, sizeof(hdr),
             "%sX-CSRF-Token: 00000000000000000000000000000000\r\n"
             "Content-Type: application/json\r\n",
             cookie);
    r = call(e, "POST", "/api/topics/orders/offline", hdr, "{}");
    assert_int_equal(r->status, 403);
    snprintf(hdr, sizeof(hdr), "%s%s", cookie, csrf);
    r = call(e, "POST", "/api/topics/orders/offline", hdr, "{}");
    assert_int_equal(r->status, 415);
    fm.last_call[0] = '\0';
    snprintf(hdr, sizeof(hdr), "%s%sContent-Type: application/json; charset=utf-8\r\n", cookie,
             csrf);
    r = call(e, "POST", "/api/topics/orders/offline", hdr, "");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"version\":5}");
    assert_string_equal(fm.last_call, "topic orders 0");
    assert_string_equal(last_audit(),
                        "{\"time\":\"2026-12-02T01:02:03.456Z\",\"addr\":\"127.0.0.1\","
                        "\"auth\":\"session\",\"action\":\"topic.offline\",\"target\":\"orders\","
                        "\"version\":5,\"result\":\"ok\"}");
    r = call(e, "POST", "/api/topics/orders/online", hdr, "{}");
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "topic orders 1");
    /* retention, in days (0: keep forever), audited like every change */
    r = call(e, "PUT", "/api/topics/orders/retention", hdr, "{\"days\": 7}");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"version\":7}");
    assert_string_equal(fm.last_call, "retention orders 7");
    assert_true(has(last_audit(), "\"action\":\"topic.retention\",\"target\":\"orders\","
                                  "\"version\":7,\"result\":\"ok\"}"));
    r = call(e, "PUT", "/api/topics/orders/retention", hdr, "{\"days\": \"7\"}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"days: must be an integer in [0, 36500] (0: keep forever)\"}");
    assert_true(has(last_audit(), "\"action\":\"topic.retention\",\"target\":\"orders\","
                                  "\"version\":0,\"result\":\"days: must be an integer"));
    r = call(e, "PUT", "/api/topics/orders/retention", hdr, "[7]");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"body: must be a JSON object\"}");
    r = call(e, "POST", "/api/topics/orders/retention", hdr, "{\"days\": 7}");
    assert_int_equal(r->status, 405);
    assert_string_equal(r->body, "{\"error\":\"method not allowed: use PUT\"}");
    /* a new topic, with or without a retention; what is wrong with the body, said exactly */
    r = call(e, "POST", "/api/topics", hdr, "{\"topic\": \"refunds\", \"retention_days\": 3}");
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "create refunds 3");
    assert_true(has(last_audit(), "\"action\":\"topic.create\",\"target\":\"refunds\","));
    r = call(e, "POST", "/api/topics", hdr, "{\"topic\": \"chargebacks\"}");
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "create chargebacks -1");
    r = call(e, "POST", "/api/topics", hdr, "{\"topic\": \"refunds\", \"retention_days\": \"3\"}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"retention_days: must be an integer in [0, 36500]\"}");
    r = call(e, "POST", "/api/topics", hdr, "{\"topic\": 7}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"topic: must be a topic name matching [A-Za-z0-9_]{1,64}\"}");
    fm.next_err = CQ_ECONFLICT;
    snprintf(fm.err_text, sizeof(fm.err_text), "topic refunds: exists already");
    r = call(e, "POST", "/api/topics", hdr, "{\"topic\": \"refunds\"}");
    assert_int_equal(r->status, 409);
    assert_string_equal(r->body, "{\"error\":\"topic refunds: exists already\"}");
    r = call(e, "PUT", "/api/topics", hdr, "{\"topic\": \"refunds\"}");
    assert_int_equal(r->status, 405);
    /* logout ends the session */
    r = call(e, "POST", "/api/logout", hdr, "{}");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{}");
    assert_true(has(r->head, "Max-Age=0"));
    r = call(e, "GET", "/api/state", cookie, NULL);
    assert_int_equal(r->status, 401);
    assert_int_equal(e->closed, 0);
    edge_free(e);
}

static void test_bearer_routes(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *ok = "Authorization: Bearer admintok\r\nContent-Type: application/json\r\n";
    resp_t *r = call(e, "PUT", "/api/modules/7", ok, "{\"produce\":[\"orders\"]}");
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"version\":5}");
    assert_string_equal(fm.last_call, "put 7 {\"produce\":[\"orders\"]}");
    assert_true(has(last_audit(), "\"auth\":\"bearer\",\"action\":\"module.put\","
                                  "\"target\":\"7\",\"version\":5,\"result\":\"ok\"}"));
    r = call(e, "DELETE", "/api/modules/7", ok, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "delete 7");
    r = call(e, "POST", "/api/servers/4294967295/offline", ok, "{}");
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "server 4294967295 1");
    r = call(e, "POST", "/api/servers/12/online", ok, "{}");
    assert_int_equal(r->status, 200);
    assert_string_equal(fm.last_call, "server 12 0");
    assert_true(has(last_audit(), "\"action\":\"server.online\",\"target\":\"12\""));
    /* engine refusals: the engine's text, the status of its code, an audit line */
    fm.next_err = CQ_EFIELD;
    snprintf(fm.err_text, sizeof(fm.err_text), "produce[2]: must be a topic name or \"*\"");
    r = call(e, "PUT", "/api/modules/7", ok, "{\"produce\":[\"a\",\"b\",\"-\"]}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"produce[2]: must be a topic name or \\\"*\\\"\"}");
    assert_true(has(last_audit(), "\"version\":0,\"result\":\"produce[2]: must be a topic name "
                                  "or \\\"*\\\"\"}"));
    fm.next_err = -ENOENT;
    snprintf(fm.err_text, sizeof(fm.err_text), "module 9: not in the state");
    r = call(e, "DELETE", "/api/modules/9", ok, NULL);
    assert_int_equal(r->status, 404);
    assert_string_equal(r->body, "{\"error\":\"module 9: not in the state\"}");
    fm.next_err = -ENOMEM;
    fm.err_text[0] = '\0';
    r = call(e, "POST", "/api/topics/t/online", ok, "{}");
    assert_int_equal(r->status, 503);
    /* bad paths and methods */
    r = call(e, "PUT", "/api/modules/4294967296", ok, "{}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"path: module id must be an integer in 0..4294967295\"}");
    r = call(e, "PUT", "/api/modules/07", ok, "{}");
    assert_int_equal(r->status, 400);
    r = call(e, "GET", "/api/topics/t/online", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 405);
    assert_true(has(r->head, "Allow: POST\r\n"));
    r = call(e, "POST", "/api/modules/7", ok, "{}");
    assert_int_equal(r->status, 405);
    assert_true(has(r->head, "Allow: PUT, DELETE\r\n"));
    r = call(e, "GET", "/api/nothing", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 404);
    r = call(e, "GET", "/api/a/b/c/d/e", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 404);
    r = call(e, "PUT", "/api/modules/7", "Authorization: Bearer admintok\r\n", "{}");
    assert_int_equal(r->status, 415);
    r = call(e, "GET", "/api/state", "Authorization: Bearer wrong\r\n", NULL);
    assert_int_equal(r->status, 401);
    assert_string_equal(r->body, "{\"error\":\"Authorization: wrong admin token\"}");
    r = call(e, "GET", "/api/state", "Authorization: Basic eDp5\r\n", NULL);
    assert_int_equal(r->status, 401);
    r = call(e, "GET", "/api/state", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 200);
    assert_int_equal(e->closed, 0);
    edge_free(e);
}

/* /api/bindings: GET answers the engine's document, PUT hands it the body as it came, a refusal
 * is a 400 with the engine's text (the bindings parser's), each PUT is audited. */
static void test_bindings_route(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *bearer = "Authorization: Bearer admintok\r\n";
    const char *ok = "Authorization: Bearer admintok\r\nContent-Type: application/json\r\n";
    fm.version = 4;
    resp_t *r = call(e, "GET", "/api/bindings", bearer, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"bindings\":[{\"v\":4}]}");
    assert_true(has(r->head, "Cache-Control: no-store\r\n"));
    const char *doc =
        "{\"bindings\": [{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}";
    r = call(e, "PUT", "/api/bindings", ok, doc);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"version\":5}");
    char want[256];
    snprintf(want, sizeof(want), "bindings %s", doc);
    assert_string_equal(fm.last_call, want);
    assert_true(has(last_audit(), "\"auth\":\"bearer\",\"action\":\"bindings.put\","
                                  "\"target\":\"\",\"version\":5,\"result\":\"ok\"}"));
    fm.next_err = CQ_EFIELD;
    snprintf(fm.err_text, sizeof(fm.err_text),
             "binding 0: \"msg_type\" must be an integer from 100 to 65535");
    r = call(e, "PUT", "/api/bindings", ok, "{\"bindings\":[{\"topic\":\"a\"}]}");
    assert_int_equal(r->status, 400);
    assert_string_equal(
        r->body,
        "{\"error\":\"binding 0: \\\"msg_type\\\" must be an integer from 100 to 65535\"}");
    assert_true(has(last_audit(), "\"action\":\"bindings.put\",\"target\":\"\",\"version\":0,"
                                  "\"result\":\"binding 0: \\\"msg_type\\\" must be an integer "
                                  "from 100 to 65535\"}"));
    r = call(e, "DELETE", "/api/bindings", ok, NULL);
    assert_int_equal(r->status, 405);
    assert_true(has(r->head, "Allow: GET, PUT\r\n"));
    assert_string_equal(r->body, "{\"error\":\"method not allowed: use GET or PUT\"}");
    r = call(e, "PUT", "/api/bindings", bearer, "{}");
    assert_int_equal(r->status, 415);
    r = call(e, "GET", "/api/bindings", NULL, NULL);
    assert_int_equal(r->status, 401);
    assert_int_equal(e->closed, 0);
    edge_free(e);
}

/* GET /api/charts[?prefix=P]: the prefix reaches the engine; one of other characters, or too
 * long, is refused with what is wrong; other methods get 405. */
static void test_charts_route(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *ok = "Authorization: Bearer admintok\r\nContent-Type: application/json\r\n";
    resp_t *r = call(e, "GET", "/api/charts", ok, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"prefix\":\"\"}");
    r = call(e, "GET", "/api/charts?prefix=topic/orders/lag/m1@1", ok, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"prefix\":\"topic/orders/lag/m1@1\"}");
    r = call(e, "GET", "/api/charts?prefix=a%20b", ok, NULL);
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"prefix: must be at most 256 characters of "
                                 "[A-Za-z0-9_/@.-]\"}");
    r = call(e, "POST", "/api/charts", ok, "{}");
    assert_int_equal(r->status, 405);
    r = call(e, "GET", "/api/charts", NULL, NULL);
    assert_int_equal(r->status, 401);
    edge_free(e);
}

static void test_audit_route(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *ok = "Authorization: Bearer admintok\r\nContent-Type: application/json\r\n";
    resp_t *r = call(e, "GET", "/api/audit", ok, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"entries\":[]}");
    for (int i = 0; i < 1005; i++)
        call(e, "POST", i % 2 ? "/api/topics/a/online" : "/api/topics/b/offline", ok, "{}");
    r = call(e, "GET", "/api/audit?limit=2", ok, NULL);
    assert_int_equal(r->status, 200);
    char want[1024];
    /* the 1004th change (odd: online) then the 1005th (even index 1004: offline) */
    snprintf(want, sizeof(want),
             "{\"entries\":[{\"time\":\"2026-12-02T01:02:03.456Z\",\"addr\":\"127.0.0.1\","
             "\"auth\":\"bearer\",\"action\":\"topic.online\",\"target\":\"a\",\"version\":1008,"
             "\"result\":\"ok\"},{\"time\":\"2026-12-02T01:02:03.456Z\",\"addr\":\"127.0.0.1\","
             "\"auth\":\"bearer\",\"action\":\"topic.offline\",\"target\":\"b\",\"version\":1009,"
             "\"result\":\"ok\"}]}");
    assert_string_equal(r->body, want);
    r = call(e, "GET", "/api/audit?limit=1000", ok, NULL);
    assert_int_equal(r->status, 200);
    int n = 0;
    for (const char *p = r->body; (p = strstr(p, "\"action\"")); p++)
        n++;
    assert_int_equal(n, 1000); /* the ring keeps the last 1000 */
    assert_true(has(r->body, "{\"entries\":[{\"time\":\"2026-12-02T01:02:03.456Z\",\"addr\":"
                             "\"127.0.0.1\",\"auth\":\"bearer\",\"action\":\"topic.online\","
                             "\"target\":\"a\",\"version\":10,"));
    r = call(e, "GET", "/api/audit?limit=0", ok, NULL);
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"limit: must be an integer in 1..1000\"}");
    r = call(e, "GET", "/api/audit?limit=1001", ok, NULL);
    assert_int_equal(r->status, 400);
    r = call(e, "GET", "/api/audit?x=1&limit=abc", ok, NULL);
    assert_int_equal(r->status, 400);
    edge_free(e);
}

static void test_limits_and_framing(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    /* two pipelined requests in one read, then one fed byte by byte */
    const char *two = "GET /console.css HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      "GET /api/state HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "
                      "admintok\r\n\r\n";
    resp_t r;
    feed(e, two, strlen(two));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"version\":4,\"now_ms\":1796173323456}");
    const char *one = "POST /api/topics/x/online HTTP/1.1\r\nHost: localhost\r\nAuthorization: "
                      "Bearer admintok\r\nContent-Type: application/json\r\nContent-Length: "
                      "2\r\n\r\n{}";
    for (size_t i = 0; i < strlen(one); i++) {
        assert_int_equal(feed(e, one + i, 1), 0);
        assert_int_equal(e->outlen == 0, i + 1 < strlen(one));
    }
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(fm.last_call, "topic x 1");
    /* a body over 64 KiB: 413, closed */
    const char *big = "PUT /api/modules/1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
                      "65537\r\n\r\n";
    assert_int_equal(feed(e, big, strlen(big)), CQ_ECLOSED);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 413);
    assert_string_equal(r.body, "{\"error\":\"body: over the limit of 65536 bytes\"}");
    assert_true(has(r.head, "Connection: close\r\n"));
    assert_int_equal(e->closed, 1);
    assert_int_equal(feed(e, "GET", 3), CQ_ECLOSED);
    edge_free(e);
    /* a malformed head: 400, closed */
    e = edge_new("127.0.0.1:5555");
    assert_int_equal(feed(e, "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 27), CQ_ECLOSED);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 400);
    assert_int_equal(e->closed, 1);
    edge_free(e);
    /* chunked: refused */
    e = edge_new("127.0.0.1:5555");
    one = "POST /api/login HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n";
    feed(e, one, strlen(one));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 400);
    assert_int_equal(e->closed, 1);
    edge_free(e);
    /* a head over 8 KiB: 431 */
    e = edge_new("127.0.0.1:5555");
    static char huge[9000];
    memset(huge, 'a', sizeof(huge));
    memcpy(huge, "GET / HTTP/1.1\r\nX: ", 19);
    feed(e, huge, sizeof(huge));
    assert_true(take(e, &r));
    assert_int_equal(r.status, 431);
    assert_int_equal(e->closed, 1);
    edge_free(e);
    /* Connection: close is honoured */
    e = edge_new("127.0.0.1:5555");
    one = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    assert_int_equal(feed(e, one, strlen(one)), CQ_ECLOSED);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_int_equal(e->closed, 1);
    edge_free(e);
}

static void test_login_budget(void **state)
{
    (void)state;
    edge_t *e = edge_new("10.0.0.9:4444");
    resp_t *r;
    for (int i = 0; i < 10; i++) {
        r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n",
                 "{\"token\":\"guess\"}");
        assert_int_equal(r->status, 401);
    }
    size_t audits = fm.naudit;
    r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n",
             "{\"token\":\"admintok\"}");
    assert_int_equal(r->status, 429);
    r = call(e, "GET", "/api/state", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 429);
    assert_int_equal(fm.naudit, audits);
    assert_true(has(last_audit(), "\"addr\":\"10.0.0.9\""));
    /* another address is not blocked */
    edge_t *o = edge_new("10.0.0.10:4444");
    r = call(o, "GET", "/api/state", "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 200);
    edge_free(o);
    /* after the block (1 s) the right token works */
    now_ms += 1000;
    r = call(e, "POST", "/api/login", "Content-Type: application/json\r\n",
             "{\"token\":\"admintok\"}");
    assert_int_equal(r->status, 200);
    now_ms -= 1000;
    edge_free(e);
}

static void test_session_expiry_and_cap(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    char c0[128], s0[64], c1[128], s1[64], c[128], s[64];
    login(e, c0, sizeof(c0), s0, sizeof(s0));
    login(e, c1, sizeof(c1), s1, sizeof(s1));
    assert_string_not_equal(c0, c1);
    assert_string_not_equal(s0, s1);
    uint64_t t0 = now_ms;
    /* c1 is used 11 h later; 12 h after login c0 is gone, c1 is not */
    now_ms = t0 + 11ull * 3600 * 1000;
    assert_int_equal(call(e, "GET", "/api/state", c1, NULL)->status, 200);
    now_ms = t0 + 12ull * 3600 * 1000;
    cq__mgr_api_tick(fm.api, now_ms);
    assert_int_equal(call(e, "GET", "/api/state", c0, NULL)->status, 401);
    assert_int_equal(call(e, "GET", "/api/state", c1, NULL)->status, 200);
    /* at most 64: a 65th login evicts the session idle longest */
    char first[128], second[128];
    for (int i = 0; i < 64; i++) {
        now_ms++;
        login(e, c, sizeof(c), s, sizeof(s));
        if (i == 0)
            memcpy(first, c, sizeof(c));
        if (i == 1)
            memcpy(second, c, sizeof(c));
    }
    assert_int_equal(call(e, "GET", "/api/state", first, NULL)->status, 200);
    assert_int_equal(call(e, "GET", "/api/state", c1, NULL)->status, 401); /* evicted */
    now_ms++;
    login(e, c, sizeof(c), s, sizeof(s));
    assert_int_equal(call(e, "GET", "/api/state", second, NULL)->status, 401);
    assert_int_equal(call(e, "GET", "/api/state", first, NULL)->status, 200);
    assert_int_equal(call(e, "GET", "/api/state", c, NULL)->status, 200);
    now_ms = t0;
    edge_free(e);
}

/* Sends one request without waiting for an answer. */
static void send_only(edge_t *e, const char *method, const char *path, const char *extra,
                      const char *body)
{
    int n = snprintf(creq, sizeof(creq),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:12121\r\n%sContent-Length: %zu\r\n\r\n%s",
                     method, path, extra, strlen(body), body);
    feed(e, creq, (size_t)n);
}

/* The engine's outcome of the invalidate in flight, and the answer it makes. */
static resp_t *outcome(edge_t *e, int err, const char *why)
{
    static resp_t r;
    assert_non_null(fm.wait_ud);
    void *ud = fm.wait_ud;
    fm.wait_ud = NULL;
    cq__mgr_api_invalidated(fm.api, ud, err, why);
    cq__mgr_api_flush(fm.api);
    assert_true(take(e, &r));
    return &r;
}

/* POST /api/topics/T/messages/S/O/invalidate: the path and reason checked here, the answer
 * held until the engine tells the master's outcome (other requests wait behind it), the audit
 * line with the reason, each error's exact status and text. */
static void test_invalidate_route(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    const char *ok = "Authorization: Bearer admintok\r\nContent-Type: application/json\r\n";
    send_only(e, "POST", "/api/topics/ev/messages/1/42/invalidate", ok,
              "{\"reason\":\"bad release\"}");
    assert_string_equal(fm.last_call, "invalidate ev 1 42");
    assert_int_equal(e->outlen, 0); /* not before the master answered */
    send_only(e, "GET", "/api/state", "Authorization: Bearer admintok\r\n", "");
    assert_int_equal(e->outlen, 0); /* behind it */
    resp_t *r = outcome(e, 0, NULL);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "{\"topic\":\"ev\",\"shard\":1,\"offset\":42,\"state\":0}");
    assert_true(has(last_audit(), "\"auth\":\"bearer\",\"action\":\"message.invalidate\","
                                  "\"target\":\"ev/1/42\",\"version\":0,\"result\":\"ok\","
                                  "\"reason\":\"bad release\"}"));
    assert_true(take(e, r)); /* the GET that waited */
    assert_int_equal(r->status, 200);
    assert_true(has(r->body, "\"version\":5")); /* the fake's change() counted the ask */
    /* the master's refusals, in the status of their code */
    send_only(e, "POST", "/api/topics/ev/messages/1/43/invalidate", ok, "{\"reason\":\"x\"}");
    r = outcome(e, CQ_ENOMSG, "topic ev: no message at offset 43");
    assert_int_equal(r->status, 404);
    assert_string_equal(r->body, "{\"error\":\"shard 1: topic ev: no message at offset 43\"}");
    assert_true(has(last_audit(), "\"result\":\"topic ev: no message at offset 43\","
                                  "\"reason\":\"x\"}"));
    send_only(e, "POST", "/api/topics/ev/messages/1/43/invalidate", ok, "{\"reason\":\"x\"}");
    r = outcome(e, CQ_ETIMEOUT, "the master did not answer in time");
    assert_int_equal(r->status, 504);
    send_only(e, "POST", "/api/topics/nope/messages/1/43/invalidate", ok, "{\"reason\":\"x\"}");
    r = outcome(e, CQ_ENOTOPIC, "topic nope: unknown on this server");
    assert_int_equal(r->status, 404);
    assert_string_equal(r->body, "{\"error\":\"shard 1: topic nope: unknown on this server\"}");
    /* the engine's refusal: at once */
    fm.next_err = CQ_ENOTMASTER;
    snprintf(fm.err_text, sizeof(fm.err_text), "shard 7: no master reports to this manager now");
    r = call(e, "POST", "/api/topics/ev/messages/7/1/invalidate", ok, "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 503);
    assert_string_equal(r->body, "{\"error\":\"shard 7: no master reports to this manager now\"}");
    /* bad input */
    r = call(e, "POST", "/api/topics/ev/messages/1/42/invalidate", ok, "{}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"reason: required, a string of 1 to 512 bytes\"}");
    char big[700];
    int n = snprintf(big, sizeof(big), "{\"reason\":\"");
    memset(big + n, 'r', 513);
    snprintf(big + n + 513, sizeof(big) - (size_t)n - 513, "\"}");
    r = call(e, "POST", "/api/topics/ev/messages/1/42/invalidate", ok, big);
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"reason: required, a string of 1 to 512 bytes\"}");
    r = call(e, "POST", "/api/topics/ev/messages/1/0/invalidate", ok, "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"path: offset must be an integer in [1, 9007199254740991]\"}");
    r = call(e, "POST", "/api/topics/ev/messages/1/9007199254740992/invalidate", ok,
             "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 400);
    r = call(e, "POST", "/api/topics/ev/messages/x/1/invalidate", ok, "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body, "{\"error\":\"path: shard must be an integer in 0..4294967295\"}");
    r = call(e, "POST", "/api/topics/a-b/messages/1/1/invalidate", ok, "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 400);
    assert_string_equal(r->body,
                        "{\"error\":\"topic: must be a topic name matching [A-Za-z0-9_]{1,64}\"}");
    r = call(e, "GET", "/api/topics/ev/messages/1/1/invalidate",
             "Authorization: Bearer admintok\r\n", NULL);
    assert_int_equal(r->status, 405);
    /* a session without its CSRF token is refused before anything is asked */
    char cookie[128], csrf[64], hdr[512];
    login(e, cookie, sizeof(cookie), csrf, sizeof(csrf));
    snprintf(hdr, sizeof(hdr), "%sContent-Type: application/json\r\n", cookie);
    fm.last_call[0] = '\0';
    r = call(e, "POST", "/api/topics/ev/messages/1/42/invalidate", hdr, "{\"reason\":\"x\"}");
    assert_int_equal(r->status, 403);
    assert_string_equal(r->body, "{\"error\":\"X-CSRF-Token: missing or wrong\"}");
    assert_string_equal(fm.last_call, "");
    /* a connection that closes while it waits: the engine is told */
    send_only(e, "POST", "/api/topics/ev/messages/1/42/invalidate", ok, "{\"reason\":\"x\"}");
    assert_non_null(fm.wait_ud);
    edge_free(e);
    assert_null(fm.wait_ud);
    assert_int_equal(fm.cancelled, 1);
}

/* GET /api/topics/T/messages/S/O: held until the engine has the server's answer, which is
 * the answer's body as the engine made it; its errors in their statuses; reads need no CSRF. */
static void test_message_route(void **state)
{
    (void)state;
    edge_t *e = edge_new("127.0.0.1:5555");
    char cookie[128], csrf[64];
    login(e, cookie, sizeof(cookie), csrf, sizeof(csrf));
    feed(e, creq,
         (size_t)snprintf(creq, sizeof(creq),
                          "GET /api/topics/ev/messages/2/9 HTTP/1.1\r\nHost: "
                          "127.0.0.1:12121\r\n%s\r\n",
                          cookie));
    assert_string_equal(fm.last_call, "message ev 2 9");
    assert_int_equal(e->outlen, 0);
    void *ud = fm.wait_ud;
    fm.wait_ud = NULL;
    cq__mgr_api_message(fm.api, ud, 0, NULL, "{\"topic\":\"ev\",\"message\":{\"state\":0}}");
    cq__mgr_api_flush(fm.api);
    resp_t r;
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"topic\":\"ev\",\"message\":{\"state\":0}}");
    const char *bearer = "Authorization: Bearer admintok\r\n";
    feed(e, creq,
         (size_t)snprintf(creq, sizeof(creq),
                          "GET /api/topics/ev/messages/2/10 HTTP/1.1\r\nHost: "
                          "127.0.0.1:12121\r\n%s\r\n",
                          bearer));
    ud = fm.wait_ud;
    fm.wait_ud = NULL;
    cq__mgr_api_message(fm.api, ud, CQ_ENOMSG, "topic ev: no message at offset 10", NULL);
    cq__mgr_api_flush(fm.api);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 404);
    assert_string_equal(r.body, "{\"error\":\"shard 2: topic ev: no message at offset 10\"}");
    resp_t *p = call(e, "GET", "/api/topics/ev/messages/2/0", bearer, NULL);
    assert_int_equal(p->status, 400);
    assert_string_equal(p->body,
                        "{\"error\":\"path: offset must be an integer in [1, 9007199254740991]\"}");
    p = call(e, "GET", "/api/topics/a-b/messages/2/1", bearer, NULL);
    assert_int_equal(p->status, 400);
    fm.next_err = CQ_ENOTMASTER;
    snprintf(fm.err_text, sizeof(fm.err_text), "shard 3: no server reports to this manager now");
    p = call(e, "GET", "/api/topics/ev/messages/3/1", bearer, NULL);
    assert_int_equal(p->status, 503);
    assert_string_equal(p->body, "{\"error\":\"shard 3: no server reports to this manager now\"}");
    /* by producer key */
    feed(e, creq,
         (size_t)snprintf(creq, sizeof(creq),
                          "GET /api/topics/ev/messages/2?seq=0&producer_id=77 "
                          "HTTP/1.1\r\nHost: 127.0.0.1:12121\r\n%s\r\n",
                          bearer));
    assert_string_equal(fm.last_call, "message-key ev 2 77 0");
    ud = fm.wait_ud;
    fm.wait_ud = NULL;
    cq__mgr_api_message(fm.api, ud, 0, NULL, "{\"offset\":12}");
    cq__mgr_api_flush(fm.api);
    assert_true(take(e, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"offset\":12}");
    p = call(e, "GET", "/api/topics/ev/messages/2?producer_id=77", bearer, NULL);
    assert_int_equal(p->status, 400);
    assert_string_equal(p->body,
                        "{\"error\":\"query: producer_id=P&seq=S (integers) are required\"}");
    fm.next_err = CQ_EFIELD;
    snprintf(fm.err_text, sizeof(fm.err_text), "producer_id: bad");
    p = call(e, "GET", "/api/topics/ev/messages/2?producer_id=0&seq=1", bearer, NULL);
    assert_int_equal(p->status, 400);
    assert_string_equal(p->body, "{\"error\":\"producer_id: bad\"}");
    p = call(e, "POST", "/api/topics/ev/messages/3/1",
             "Authorization: Bearer admintok\r\n"
             "Content-Type: application/json\r\n",
             "{}");
    assert_int_equal(p->status, 405);
    edge_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_login_session_csrf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bearer_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bindings_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_charts_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_audit_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_and_framing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_login_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_expiry_and_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalidate_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_message_route, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
