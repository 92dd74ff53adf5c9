/* api.c - the manager's console and JSON API over HTTP/1.1 (common contract 3, doc/mgr.md
 * "Console"): the embedded page (src/mgr/console/), login sessions with a CSRF token each, the
 * admin token as a bearer credential (the CLI), the routes that read and change the managed
 * state through the engine (mgr_int.h), and the audit trail of every change and login.
 *
 * Sans I/O, engine thread only: the edge (src/io/mgr_io.c) feeds bytes with the wall clock and
 * writes what the connection's send queue holds when cq_mgr_flush() asks it to.
 *
 * Why sessions and a CSRF token: a browser sends the cookie with any request to this port,
 * including one a foreign page makes it send; only the page itself knows the CSRF token (an
 * answer to a GET is readable by the same origin only), and only JSON bodies are taken, which a
 * foreign form cannot send without a preflight that is never answered. The Host check stops a
 * DNS-rebinding page from becoming "the same origin".
 */
#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_buf.h"
#include "cq_err.h"
#include "cq_http.h"
#include "cq_list.h"
#include "cq_log.h"
#include "cq_sbuf.h"
#include "cq_util.h"
#include "mgr_console.h"
#include "mgr_int.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#define API_HEAD_MAX        8192
#define API_BODY_MAX        (64 * 1024)
#define API_SESSIONS        64
#define API_SESSION_IDLE_MS (12ull * 3600 * 1000)
#define API_AUDIT_KEEP      1000
#define API_AUDIT_DFL       100
#define API_SENDQ_HARD      (16u << 20) /* an audit or state answer is far below */
#define API_TOKEN_MAX       256
#define API_SEG_MAX         6
#define API_NAME_MAX        128 /* a path segment: topic names are <= 64 */
#define API_ERR_MAX         256
#define API_REASON_MAX      512 /* an invalidation's reason, bytes */
#define SID_HEX             64  /* 32 random bytes */
#define CSRF_HEX            32  /* 16 random bytes */

/* Login budget per address (cq_authlim): 10 wrong tokens within a minute block the address for
 * 1 s, doubled for each block in a row (at most 64 s). */
#define API_LIM_FAILURES  10
#define API_LIM_WINDOW_MS 60000
#define API_LIM_BACKOFF   1000

#define COOKIE_NAME "chanq_session"

typedef struct api_session {
    bool used;
    char id[SID_HEX + 1];
    char csrf[CSRF_HEX + 1];
    uint64_t last_ms;
} api_session_t;

struct cq_mgr_api {
    cq_mgr_t *m;
    api_session_t sess[API_SESSIONS];
    char *audit[API_AUDIT_KEEP]; /* owned lines, a ring: oldest at audit_head */
    size_t audit_head, audit_n;
    cq_authlim_t *lim;
    cq_list_t pending; /* connections with output to flush */
};

struct cq_mgr_hconn {
    cq_mgr_api_t *a;
    const cq_mgr_conn_ops_t *ops;
    void *tctx;
    char addr[64]; /* the peer's host */
    cq_sendq_t sendq;
    cq_sbuf_t in;
    cq_list_t pending_node;
    uint64_t now;
    bool keep_alive, closing;
    struct api_wait *wait; /* owned: a message command the engine answers later, or NULL */
};

/* One request: slices into h->in, valid while it is handled. */
typedef struct req {
    cq_mgr_hconn_t *h;
    const char *method, *path, *query, *csrf, *sid;
    size_t method_len, path_len, query_len, csrf_len, sid_len;
    cq_http_fields_t f; /* Content-Length, Host, Authorization, ... (pkg/http) */
    bool bad;           /* a malformed head: target or fields */
    const char *body;
    size_t body_len;
    const char *seg[API_SEG_MAX];
    size_t seg_len[API_SEG_MAX], nseg;
    bool api;               /* under /api/: no-store */
    const char *authkind;   /* "session" or "bearer" once authenticated */
    api_session_t *session; /* the caller's session, if any */
    const char *extra;      /* extra header lines for the answer (CRLF-terminated) */
    const char *reason;     /* an audited change's reason (invalidate), or NULL */
} req_t;

/* ---- answers ------------------------------------------------------------------------------ */

static void h_close(cq_mgr_hconn_t *h)
{
    if (h->closing)
        return;
    h->closing = true;
    cq_list_remove(&h->pending_node); /* the edge writes what is queued itself */
    h->ops->t.close(h->tctx);
}

/* Queues one answer: status, the security headers, body[0..blen) of type ctype. */
static void respond_raw(req_t *q, int status, const char *ctype, const void *body, size_t blen)
{
    cq_mgr_hconn_t *h = q->h;
    if (h->closing)
        return;
    static const char sec[] =
        "Content-Security-Policy: default-src 'self'; frame-ancestors 'none'\r\n"
        "X-Frame-Options: DENY\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Referrer-Policy: no-referrer\r\n";
    const char *extra[] = {sec, q->api ? "Cache-Control: no-store\r\n" : NULL, q->extra};
    char head[1024];
    const cq_http_answer_t a = {.status = status,
                                .ctype = ctype,
                                .length = blen,
                                .extra = extra,
                                .nextra = 3,
                                .keep_alive = h->keep_alive};
    int hn = cq_http_answer_head(head, sizeof(head), &a);
    if (hn < 0) {
        h_close(h);
        return;
    }
    cq_buf_t *b = cq_buf_new((size_t)hn + blen);
    if (!b) {
        h_close(h);
        return;
    }
    memcpy(b->data, head, (size_t)hn);
    if (blen)
        memcpy(b->data + hn, body, blen);
    b->len = (uint32_t)((size_t)hn + blen);
    int r = cq_sendq_push_ref(&h->sendq, b, CQ_SENDQ_PACKET, API_SENDQ_HARD);
    if (r < 0) {
        cq_buf_unref(b);
        h_close(h);
        return;
    }
    if (cq_list_empty(&h->pending_node))
        cq_list_insert_tail(&h->a->pending, &h->pending_node);
    if (!h->keep_alive)
        h_close(h);
}

/* Answers JSON v (taken). NULL (out of memory): 503. */
static void respond_json(req_t *q, int status, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (!s) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        respond_raw(q, 503, "application/json", oom, sizeof(oom) - 1);
        return;
    }
    respond_raw(q, status, "application/json", s, strlen(s));
    free(s);
}

static void fail(req_t *q, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(req_t *q, int status, const char *fmt, ...)
{
    char msg[API_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cq_http_scrub_utf8(msg);
    respond_json(q, status, json_pack("{s:s}", "error", msg));
}

/* ---- audit -------------------------------------------------------------------------------- */

static void audit_keep(cq_mgr_api_t *a, char *line)
{
    size_t i = (a->audit_head + a->audit_n) % API_AUDIT_KEEP;
    if (a->audit_n == API_AUDIT_KEEP) {
        cq_free(a->audit[a->audit_head]);
        a->audit_head = (a->audit_head + 1) % API_AUDIT_KEEP;
        i = (a->audit_head + a->audit_n - 1) % API_AUDIT_KEEP;
    } else {
        a->audit_n++;
    }
    a->audit[i] = line;
}

/* "2026-12-02T01:02:03.456Z" of a wall-clock time in ms. */
static void iso_time(uint64_t ms, char *out, size_t cap)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&s, &tm)) {
        snprintf(out, cap, "1970-01-01T00:00:00.000Z");
        return;
    }
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03uZ", base, (unsigned)(ms % 1000));
}

/* One audit line: through the engine to --mgr-audit-log, and into the ring for GET /api/audit.
 * version 0: nothing changed. result "ok" or the error. */
static void audit(req_t *q, const char *action, const char *target, int64_t version,
                  const char *result)
{
    cq_mgr_api_t *a = q->h->a;
    char t[40], tgt[API_NAME_MAX + 1], res[API_ERR_MAX];
    iso_time(q->h->now, t, sizeof(t));
    snprintf(tgt, sizeof(tgt), "%s", target);
    snprintf(res, sizeof(res), "%s", result);
    cq_http_scrub_utf8(tgt);
    cq_http_scrub_utf8(res);
    json_t *v = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:s}", "time", t, "addr", q->h->addr, "auth",
                          q->authkind ? q->authkind : "none", "action", action, "target", tgt,
                          "version", (json_int_t)(version > 0 ? version : 0), "result", res);
    if (v && q->reason)
        json_object_set_new(v, "reason", json_string(q->reason));
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!s)
        return;
    size_t n = strlen(s);
    cq__mgr_audit_write(a->m, s, n);
    char *own = cq_malloc(n + 1);
    if (own) {
        memcpy(own, s, n + 1);
        audit_keep(a, own);
    }
    free(s);
}

/* ---- sessions ----------------------------------------------------------------------------- */

static int random_hex(char *out, size_t nbytes)
{
    uint8_t b[32];
    static const char hx[] = "0123456789abcdef";
    if (nbytes > sizeof(b) || getrandom(b, nbytes, 0) != (ssize_t)nbytes)
        return -EIO;
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

static void session_drop(api_session_t *s)
{
    memset(s, 0, sizeof(*s));
}

/* A new session, evicting the one idle longest when all are taken. NULL if no randomness. */
static api_session_t *session_new(cq_mgr_api_t *a, uint64_t now)
{
    api_session_t *s = NULL;
    for (size_t i = 0; i < API_SESSIONS; i++) {
        api_session_t *c = &a->sess[i];
        if (!c->used) {
            s = c;
            break;
        }
        if (!s || c->last_ms < s->last_ms)
            s = c;
    }
    session_drop(s);
    if (random_hex(s->id, SID_HEX / 2) < 0 || random_hex(s->csrf, CSRF_HEX / 2) < 0) {
        session_drop(s);
        return NULL;
    }
    s->used = true;
    s->last_ms = now;
    return s;
}

static bool expired(const api_session_t *s, uint64_t now)
{
    return now > s->last_ms && now - s->last_ms >= API_SESSION_IDLE_MS;
}

/* The live session whose id is sid[0..n), compared in constant time against every slot. */
static api_session_t *session_find(cq_mgr_api_t *a, const char *sid, size_t n, uint64_t now)
{
    char want[SID_HEX + 1];
    api_session_t *hit = NULL;
    if (n != SID_HEX)
        return NULL;
    memcpy(want, sid, n);
    want[n] = '\0';
    for (size_t i = 0; i < API_SESSIONS; i++)
        if (a->sess[i].used && cq_token_eq(a->sess[i].id, want))
            hit = &a->sess[i];
    if (hit && expired(hit, now)) {
        session_drop(hit);
        hit = NULL;
    }
    return hit;
}

/* ---- request head ------------------------------------------------------------------------- */

/* Finds chanq_session=<value> among the "; "-separated pairs of a Cookie header. */
static void cookie_value(req_t *q, const char *v, size_t n)
{
    static const char name[] = COOKIE_NAME "=";
    const size_t nl = sizeof(name) - 1;
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == ';'))
            i++;
        size_t s = i;
        while (i < n && v[i] != ';')
            i++;
        size_t e = i;
        while (e > s && v[e - 1] == ' ')
            e--;
        if (e - s >= nl && memcmp(v + s, name, nl) == 0) {
            q->sid = v + s + nl;
            q->sid_len = e - s - nl;
        }
    }
}

/* The console's own headers; the ones both JSON APIs read go to q->f. */
static void header(req_t *q, const cq_http_header_t *hd)
{
    if (cq_http_fields_take(&q->f, hd))
        return;
    if (cq_http_name_is(hd, "x-csrf-token")) {
        q->csrf = hd->value;
        q->csrf_len = hd->value_len;
    } else if (cq_http_name_is(hd, "cookie"))
        cookie_value(q, hd->value, hd->value_len);
}

/* Parses the head at h->in. Returns its length, 0 (incomplete) or a negative code. */
static ssize_t parse_head(req_t *q, bool *http11)
{
    cq_mgr_hconn_t *h = q->h;
    const cq_http_opts_t o = {.max_head = API_HEAD_MAX};
    cq_http_head_t hh;
    cq_http_headers_t hs;
    ssize_t end = cq_http_parse_all((const char *)h->in.data, h->in.len, 0, &o, &hh, &hs);
    if (end <= 0)
        return end;
    if (cq_http_origin_target(&hh, http11, &q->path, &q->path_len, &q->query, &q->query_len) < 0)
        q->bad = true;
    q->method = hh.method;
    q->method_len = hh.method_len;
    for (size_t i = 0; i < hs.n; i++)
        header(q, &hs.v[i]);
    cq_http_headers_done(&hs);
    q->bad = q->bad || q->f.bad;
    return end;
}

/* ---- small helpers ------------------------------------------------------------------------ */

static bool method_is(const req_t *q, const char *m)
{
    return strlen(m) == q->method_len && memcmp(q->method, m, q->method_len) == 0;
}

static bool path_is(const req_t *q, const char *p)
{
    return strlen(p) == q->path_len && memcmp(q->path, p, q->path_len) == 0;
}

static bool seg_is(const req_t *q, size_t i, const char *w)
{
    return i < q->nseg && strlen(w) == q->seg_len[i] && memcmp(q->seg[i], w, q->seg_len[i]) == 0;
}

/* Splits the path after "/api/" into segments; false when there are too many. */
static bool split_api(req_t *q)
{
    const char *p = q->path + 5, *end = q->path + q->path_len;
    while (p <= end) {
        if (q->nseg == API_SEG_MAX)
            return false;
        const char *s = memchr(p, '/', (size_t)(end - p));
        s = s ? s : end;
        q->seg[q->nseg] = p;
        q->seg_len[q->nseg++] = (size_t)(s - p);
        p = s + 1;
    }
    return true;
}

/* Copies segment i into out[cap]; false when empty or too long. */
static bool seg_copy(const req_t *q, size_t i, char *out, size_t cap)
{
    if (i >= q->nseg || q->seg_len[i] == 0 || q->seg_len[i] >= cap)
        return false;
    memcpy(out, q->seg[i], q->seg_len[i]);
    out[q->seg_len[i]] = '\0';
    return true;
}

/* A decimal u32 without sign or leading zeros (except "0"). */
static bool parse_u32(const char *s, size_t n, uint32_t *ret)
{
    uint64_t x = 0;
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    if (x > UINT32_MAX)
        return false;
    *ret = (uint32_t)x;
    return true;
}

static bool ctype_json(const req_t *q)
{
    return cq_http_ctype_is(q->f.ctype, q->f.ctype_len, "application/json");
}

/* True when Host is one of the comma-separated --mgr-http-hosts ("*": any, also none). */
static bool host_ok(const req_t *q)
{
    return cq_http_host_listed(cq__mgr_opts(q->h->a->m)->http_hosts, q->f.host, q->f.host_len);
}

/* ---- static assets ------------------------------------------------------------------------ */

static void on_asset(req_t *q)
{
    const char *type, *data;
    size_t len;
    if (path_is(q, "/") || path_is(q, "/index.html")) {
        type = "text/html; charset=utf-8";
        data = cq_embedded_console_html;
        len = cq_embedded_console_html_len;
    } else if (path_is(q, "/console.js")) {
        type = "text/javascript; charset=utf-8";
        data = cq_embedded_console_js;
        len = cq_embedded_console_js_len;
    } else if (path_is(q, "/console.css")) {
        type = "text/css; charset=utf-8";
        data = cq_embedded_console_css;
        len = cq_embedded_console_css_len;
    } else {
        fail(q, 404, "no such page");
        return;
    }
    if (!method_is(q, "GET")) {
        q->extra = "Allow: GET\r\n";
        fail(q, 405, "method not allowed: use GET");
        return;
    }
    respond_raw(q, 200, type, data, len);
}

/* ---- authentication ----------------------------------------------------------------------- */

static void auth_failed(req_t *q, const char *what)
{
    cq_mgr_api_t *a = q->h->a;
    char note[48];
    bool blocked = cq_authlim_failed(a->lim, q->h->addr, q->h->now);
    if (cq_authlim_log_allow(a->lim, q->h->now, note, sizeof(note)))
        CQ_INFO("mgr", "console request from %s: %s%s%s", q->h->addr, what,
                blocked ? ", address now blocked" : "", note);
}

static bool blocked(req_t *q)
{
    if (!cq_authlim_blocked(q->h->a->lim, q->h->addr, CQ_AUTHLIM_MQHTTP, q->h->now))
        return false;
    fail(q, 429, "too many failed authentications from this address, retry later");
    return true;
}

static bool admin_token_eq(req_t *q, const char *tok)
{
    const char *want = cq__mgr_opts(q->h->a->m)->admin_token;
    return want && *want && cq_token_eq(want, tok);
}

/* Bearer admin token (no CSRF: a browser cannot send it cross-site without a preflight), or the
 * session cookie plus X-CSRF-Token on anything but GET. Answers and returns false otherwise. */
static bool authenticate(req_t *q)
{
    if (q->f.auth) {
        const char *auth = q->f.auth;
        const size_t auth_len = q->f.auth_len;
        char tok[API_TOKEN_MAX + 1];
        size_t n = auth_len - (auth_len > 7 ? 7 : auth_len);
        if (blocked(q))
            return false;
        if (auth_len <= 7 || strncasecmp(auth, "Bearer ", 7) != 0 || n > API_TOKEN_MAX) {
            auth_failed(q, "malformed Authorization");
            fail(q, 401, "Authorization: must be \"Bearer <admin token>\"");
            return false;
        }
        memcpy(tok, auth + 7, n);
        tok[n] = '\0';
        if (!admin_token_eq(q, tok)) {
            auth_failed(q, "wrong admin token");
            fail(q, 401, "Authorization: wrong admin token");
            return false;
        }
        q->authkind = "bearer";
        return true;
    }
    api_session_t *s = q->sid ? session_find(q->h->a, q->sid, q->sid_len, q->h->now) : NULL;
    if (!s) {
        fail(q, 401, "not logged in: POST /api/login first, or send Authorization: Bearer");
        return false;
    }
    if (!method_is(q, "GET")) {
        char got[CSRF_HEX + 1];
        bool ok = q->csrf && q->csrf_len == CSRF_HEX;
        if (ok) {
            memcpy(got, q->csrf, CSRF_HEX);
            got[CSRF_HEX] = '\0';
            ok = cq_token_eq(s->csrf, got);
        }
        if (!ok) {
            fail(q, 403, "X-CSRF-Token: missing or wrong");
            return false;
        }
    }
    s->last_ms = q->h->now;
    q->session = s;
    q->authkind = "session";
    return true;
}

/* ---- handlers ----------------------------------------------------------------------------- */

static json_t *body_object(req_t *q)
{
    json_error_t jerr;
    json_t *v = json_loadb(q->body, q->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v || !json_is_object(v)) {
        fail(q, 400, "body: %s", v ? "must be a JSON object" : jerr.text);
        json_decref(v);
        return NULL;
    }
    return v;
}

static void on_login(req_t *q)
{
    q->authkind = "session";
    if (blocked(q))
        return;
    json_t *o = body_object(q);
    if (!o)
        return;
    json_t *t = json_object_get(o, "token");
    if (!json_is_string(t) || json_string_length(t) > API_TOKEN_MAX ||
        strlen(json_string_value(t)) != json_string_length(t)) {
        json_decref(o);
        fail(q, 400, "token: must be a string of at most %d bytes", API_TOKEN_MAX);
        return;
    }
    bool ok = admin_token_eq(q, json_string_value(t));
    json_decref(o);
    if (!ok) {
        auth_failed(q, "console login with a wrong admin token");
        audit(q, "login.failed", "", 0, "wrong admin token");
        fail(q, 401, "token: wrong admin token");
        return;
    }
    api_session_t *s = session_new(q->h->a, q->h->now);
    if (!s) {
        fail(q, 503, "no randomness for a session id");
        return;
    }
    char extra[160];
    snprintf(extra, sizeof(extra),
             "Set-Cookie: " COOKIE_NAME "=%s; HttpOnly; SameSite=Strict; Path=/\r\n", s->id);
    q->extra = extra;
    audit(q, "login", "", 0, "ok");
    respond_json(q, 200, json_pack("{s:s}", "csrf", s->csrf));
}

static void on_logout(req_t *q)
{
    if (q->session)
        session_drop(q->session);
    q->extra = "Set-Cookie: " COOKIE_NAME "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0\r\n";
    respond_json(q, 200, json_object());
}

static void on_state(req_t *q)
{
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    if (cq__mgr_state_json(q->h->a->m, q->h->now, &sb) < 0)
        fail(q, 503, "out of memory");
    else
        respond_raw(q, 200, "application/json", sb.data, sb.len);
    cq_sbuf_done(&sb);
}

/* prefix=P of the query into out (empty when absent): a series key's start, of the characters
 * keys have ([A-Za-z0-9_/@.-], at most CQ_MGR_CHART_KEY_MAX); false when it has others. */
static bool charts_prefix(const req_t *q, char *out, size_t cap)
{
    *out = '\0';
    const char *p = q->query, *end = q->query + q->query_len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        size_t n = (size_t)((amp ? amp : end) - p);
        if (n >= 7 && memcmp(p, "prefix=", 7) == 0) {
            if (n - 7 >= cap)
                return false;
            for (size_t i = 7; i < n; i++)
                if (!isalnum((unsigned char)p[i]) && !strchr("_/@.-", p[i]))
                    return false;
            memcpy(out, p + 7, n - 7);
            out[n - 7] = '\0';
        }
        p = amp ? amp + 1 : NULL;
    }
    return true;
}

static bool need(req_t *q, const char *method);

/* GET /api/charts[?prefix=P]: the last hour of the charts' samples (cq__mgr_charts_json). */
static void on_charts(req_t *q)
{
    char prefix[CQ_MGR_CHART_KEY_MAX + 1];
    if (!need(q, "GET"))
        return;
    if (!charts_prefix(q, prefix, sizeof(prefix))) {
        fail(q, 400, "prefix: must be at most %d characters of [A-Za-z0-9_/@.-]",
             CQ_MGR_CHART_KEY_MAX);
        return;
    }
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    if (cq__mgr_charts_json(q->h->a->m, prefix, &sb) < 0)
        fail(q, 503, "out of memory");
    else
        respond_raw(q, 200, "application/json", sb.data, sb.len);
    cq_sbuf_done(&sb);
}

/* limit=N of the query (1..API_AUDIT_KEEP, default API_AUDIT_DFL); false when malformed. */
static bool audit_limit(const req_t *q, size_t *ret)
{
    *ret = API_AUDIT_DFL;
    const char *p = q->query, *end = q->query + q->query_len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        uint32_t v;
        if ((size_t)(e - p) > 6 && memcmp(p, "limit=", 6) == 0) {
            if (!parse_u32(p + 6, (size_t)(e - p) - 6, &v) || v < 1 || v > API_AUDIT_KEEP)
                return false;
            *ret = v;
        } else if ((size_t)(e - p) >= 5 && memcmp(p, "limit", 5) == 0) {
            return false;
        }
        p = amp ? amp + 1 : NULL;
    }
    return true;
}

static void on_audit(req_t *q)
{
    cq_mgr_api_t *a = q->h->a;
    size_t n;
    if (!audit_limit(q, &n)) {
        fail(q, 400, "limit: must be an integer in 1..%d", API_AUDIT_KEEP);
        return;
    }
    n = n < a->audit_n ? n : a->audit_n;
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    int r = cq_sbuf_printf(&sb, "{\"entries\":[");
    for (size_t i = 0; r == 0 && i < n; i++) {
        const char *line = a->audit[(a->audit_head + a->audit_n - n + i) % API_AUDIT_KEEP];
        r = cq_sbuf_printf(&sb, "%s%s", i ? "," : "", line);
    }
    r = r ? r : cq_sbuf_printf(&sb, "]}");
    if (r < 0)
        fail(q, 503, "out of memory");
    else
        respond_raw(q, 200, "application/json", sb.data, sb.len);
    cq_sbuf_done(&sb);
}

/* The status of an engine refusal. */
static int status_of(int64_t err)
{
    switch (err) {
    case CQ_EFIELD:
    case CQ_EJSON:
    case CQ_EBADTOPIC:
    case -EINVAL:
        return 400;
    case -ENOENT:
    case CQ_ENOTOPIC:
        return 404;
    case CQ_ECONFLICT:
    case CQ_EEXIST:
        return 409;
    case CQ_ELIMIT:
        return 413;
    default:
        return 503;
    }
}

/* After an engine change returned v (version or error; err its text): audit, then answer. */
static void changed(req_t *q, const char *action, const char *target, int64_t v, const char *err)
{
    if (v > 0) {
        audit(q, action, target, v, "ok");
        respond_json(q, 200, json_pack("{s:I}", "version", (json_int_t)v));
        return;
    }
    const char *why = err && *err ? err : cq_strerror((int)v);
    audit(q, action, target, 0, why);
    fail(q, status_of(v), "%s", why);
}

static bool need(req_t *q, const char *method)
{
    if (method_is(q, method))
        return true;
    char allow[32];
    snprintf(allow, sizeof(allow), "Allow: %s\r\n", method);
    q->extra = allow;
    fail(q, 405, "method not allowed: use %s", method);
    q->extra = NULL;
    return false;
}

static void on_module(req_t *q)
{
    char id_s[16];
    uint32_t id;
    char err[API_ERR_MAX] = "";
    if (!parse_u32(q->seg[1], q->seg_len[1], &id)) {
        fail(q, 400, "path: module id must be an integer in 0..4294967295");
        return;
    }
    snprintf(id_s, sizeof(id_s), "%u", id);
    if (method_is(q, "PUT"))
        changed(q, "module.put", id_s,
                cq__mgr_module_put(q->h->a->m, id, q->body, q->body_len, err, sizeof(err)), err);
    else if (method_is(q, "DELETE"))
        changed(q, "module.delete", id_s, cq__mgr_module_delete(q->h->a->m, id, err, sizeof(err)),
                err);
    else {
        q->extra = "Allow: PUT, DELETE\r\n";
        fail(q, 405, "method not allowed: use PUT or DELETE");
    }
}

static void on_topic(req_t *q, bool online)
{
    char name[API_NAME_MAX + 1];
    char err[API_ERR_MAX] = "";
    if (!need(q, "POST"))
        return;
    if (!seg_copy(q, 1, name, sizeof(name))) {
        fail(q, 400, "path: topic name must be 1 to 64 characters of [A-Za-z0-9_]");
        return;
    }
    changed(q, online ? "topic.online" : "topic.offline", name,
            cq__mgr_topic_set_online(q->h->a->m, name, online, err, sizeof(err)), err);
}

/* PUT /api/topics/T/retention {"days": N}: 0 keeps forever. */
static void on_topic_retention(req_t *q)
{
    char name[API_NAME_MAX + 1];
    char err[API_ERR_MAX] = "";
    if (!need(q, "PUT"))
        return;
    if (!seg_copy(q, 1, name, sizeof(name))) {
        fail(q, 400, "path: topic name must be 1 to 64 characters of [A-Za-z0-9_]");
        return;
    }
    json_t *o = body_object(q);
    if (!o)
        return;
    json_t *d = json_object_get(o, "days");
    int64_t days = json_is_integer(d) ? (int64_t)json_integer_value(d) : -1;
    json_decref(o);
    changed(q, "topic.retention", name,
            cq__mgr_topic_set_retention(q->h->a->m, name, days, q->h->now, err, sizeof(err)), err);
}

/* POST /api/topics {"topic": T, "retention_days": N}: retention_days may be absent. */
static void on_topic_create(req_t *q)
{
    char err[API_ERR_MAX] = "";
    if (!need(q, "POST"))
        return;
    json_t *o = body_object(q);
    if (!o)
        return;
    json_t *t = json_object_get(o, "topic"), *d = json_object_get(o, "retention_days");
    char name[API_NAME_MAX + 1] = "";
    if (json_is_string(t) && json_string_length(t) <= API_NAME_MAX)
        snprintf(name, sizeof(name), "%s", json_string_value(t));
    int64_t days = !d ? -1 : json_is_integer(d) ? (int64_t)json_integer_value(d) : -2;
    json_decref(o);
    if (!*name) {
        fail(q, 400, "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
        return;
    }
    if (days < -1 && d) /* not an integer, or negative */
        days = CQ_MGR_RETENTION_DAYS_MAX + 1;
    changed(q, "topic.create", name, cq__mgr_topic_create(q->h->a->m, name, days, err, sizeof(err)),
            err);
}

/* ---- messages (issue 25): invalidate, answered when the shard's master has done it ---------- */

/* What the answer to a message command needs once the engine tells its outcome. */
typedef struct api_wait {
    char topic[API_NAME_MAX + 1], target[API_NAME_MAX + 48];
    char reason[API_REASON_MAX + 1];
    const char *authkind;
    uint32_t shard;
    uint64_t offset;
} api_wait_t;

#define API_OFFSET_MAX ((1ull << 53) - 1) /* JSON-safe, as the MQ port's offsets */

/* [A-Za-z0-9_]{1,64}, as cq_mq_topic_valid (the engine checks again). */
static bool topic_ok(const char *t)
{
    size_t n = strlen(t);
    for (size_t i = 0; i < n; i++)
        if (!(t[i] == '_' || (t[i] >= '0' && t[i] <= '9') ||
              ((t[i] | 32) >= 'a' && (t[i] | 32) <= 'z')))
            return false;
    return n >= 1 && n <= 64;
}

/* A decimal offset in [1, 2^53 - 1] without sign or leading zeros. */
static bool parse_offset(const char *s, size_t n, uint64_t *ret)
{
    uint64_t x = 0;
    if (n == 0 || n > 16 || s[0] == '0')
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *ret = x;
    return x <= API_OFFSET_MAX;
}

/* The status of a message command's outcome. */
static int msg_status(int err)
{
    switch (err) {
    case CQ_ENOMSG:
    case CQ_ENOTOPIC:
        return 404;
    case CQ_EOFFRANGE:
    case CQ_EBADTOPIC:
    case CQ_EFIELD:
        return 400;
    case CQ_EBUSY:
        return 429;
    case CQ_ETIMEOUT:
        return 504;
    default:
        return 503;
    }
}

/* The reason of an invalidate body, copied into w->reason; answers 400 when missing or too long. */
static bool take_reason(req_t *q, api_wait_t *w)
{
    json_t *o = body_object(q);
    if (!o)
        return false;
    json_t *r = json_object_get(o, "reason");
    bool ok = json_is_string(r) && json_string_length(r) >= 1 &&
              json_string_length(r) <= API_REASON_MAX &&
              !memchr(json_string_value(r), 0, json_string_length(r));
    if (ok)
        snprintf(w->reason, sizeof(w->reason), "%s", json_string_value(r));
    json_decref(o);
    if (!ok)
        fail(q, 400, "reason: required, a string of 1 to %d bytes", API_REASON_MAX);
    return ok;
}

/* The path of /api/topics/<t>/messages/<shard>/<offset>[/...] into w; answers 400 when bad. */
static bool message_path(req_t *q, api_wait_t *w)
{
    if (!seg_copy(q, 1, w->topic, sizeof(w->topic)) || !topic_ok(w->topic)) {
        fail(q, 400, "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
        return false;
    }
    if (!parse_u32(q->seg[3], q->seg_len[3], &w->shard)) {
        fail(q, 400, "path: shard must be an integer in 0..4294967295");
        return false;
    }
    if (!parse_offset(q->seg[4], q->seg_len[4], &w->offset)) {
        fail(q, 400, "path: offset must be an integer in [1, 9007199254740991]");
        return false;
    }
    snprintf(w->target, sizeof(w->target), "%s/%u/%llu", w->topic, w->shard,
             (unsigned long long)w->offset);
    return true;
}

/* POST /api/topics/<t>/messages/<shard>/<offset>/invalidate {"reason": "..."}. */
static void on_invalidate(req_t *q)
{
    char err[API_ERR_MAX] = "";
    api_wait_t *w = need(q, "POST") ? cq_calloc(1, sizeof(*w)) : NULL;
    if (!w || !message_path(q, w) || !take_reason(q, w)) {
        if (!w && method_is(q, "POST"))
            fail(q, 503, "out of memory");
        cq_free(w);
        return;
    }
    w->authkind = q->authkind;
    q->reason = w->reason;
    int r = cq__mgr_invalidate(q->h->a->m, w->topic, w->shard, w->offset, q->h->now, q->h, err,
                               sizeof(err));
    if (r < 0) {
        audit(q, "message.invalidate", w->target, 0, err);
        fail(q, msg_status(r), "%s", err);
        cq_free(w);
        return;
    }
    q->h->wait = w; /* the connection takes no other request until the answer */
}

/* GET /api/topics/<t>/messages/<shard>/<offset>: answered when the server has read it. */
static void on_message(req_t *q)
{
    char err[API_ERR_MAX] = "";
    api_wait_t *w = need(q, "GET") ? cq_calloc(1, sizeof(*w)) : NULL;
    if (!w || !message_path(q, w)) {
        if (!w && method_is(q, "GET"))
            fail(q, 503, "out of memory");
        cq_free(w);
        return;
    }
    int r = cq__mgr_message(q->h->a->m, w->topic, w->shard, w->offset, q->h->now, q->h, err,
                            sizeof(err));
    if (r < 0) {
        fail(q, msg_status(r), "%s", err);
        cq_free(w);
        return;
    }
    q->h->wait = w;
}

/* The decimal value of name=V in the query (no sign, at most 16 digits); false when absent or
 * not one. */
static bool query_num(const req_t *q, const char *name, uint64_t *ret)
{
    size_t k = strlen(name);
    const char *p = q->query, *end = q->query + q->query_len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        size_t n = (size_t)((amp ? amp : end) - p);
        if (n > k && p[k] == '=' && memcmp(p, name, k) == 0) {
            uint64_t x = 0;
            bool ok = n - k - 1 >= 1 && n - k - 1 <= 16;
            for (size_t i = k + 1; ok && i < n; i++) {
                ok = p[i] >= '0' && p[i] <= '9';
                x = x * 10 + (uint64_t)(p[i] - '0');
            }
            *ret = x;
            return ok;
        }
        p = amp ? amp + 1 : NULL;
    }
    return false;
}

/* GET /api/topics/<t>/messages/<shard>?producer_id=P&seq=S: the lookup by producer key. */
static void on_message_key(req_t *q)
{
    char err[API_ERR_MAX] = "";
    uint64_t pid = 0, seq = 0;
    int r = 1; /* 0 once asked */
    api_wait_t *w = need(q, "GET") ? cq_calloc(1, sizeof(*w)) : NULL;
    if (!w) {
        if (method_is(q, "GET"))
            fail(q, 503, "out of memory");
        return;
    }
    if (!seg_copy(q, 1, w->topic, sizeof(w->topic)) || !topic_ok(w->topic))
        fail(q, 400, "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    else if (!parse_u32(q->seg[3], q->seg_len[3], &w->shard))
        fail(q, 400, "path: shard must be an integer in 0..4294967295");
    else if (!query_num(q, "producer_id", &pid) || !query_num(q, "seq", &seq))
        fail(q, 400, "query: producer_id=P&seq=S (integers) are required");
    else if ((r = cq__mgr_message_key(q->h->a->m, w->topic, w->shard, pid, seq, q->h->now, q->h,
                                      err, sizeof(err))) < 0)
        fail(q, msg_status(r), "%s", err);
    if (r != 0) {
        cq_free(w);
        return;
    }
    q->h->wait = w; /* asked */
}

/* The requests that came while h waited, now. */
static void wait_done(cq_mgr_hconn_t *h)
{
    if (!h->closing && h->in.len)
        cq_mgr_hconn_input(h, NULL, 0, h->now);
}

void cq__mgr_api_message(cq_mgr_api_t *a, void *ud, int err, const char *why, const char *json)
{
    (void)a;
    cq_mgr_hconn_t *h = ud;
    api_wait_t *w = h->wait;
    if (!w)
        return;
    h->wait = NULL;
    req_t q = {.h = h, .api = true};
    if (err)
        fail(&q, msg_status(err), "shard %u: %s", w->shard, why);
    else
        respond_raw(&q, 200, "application/json", json, strlen(json));
    cq_free(w);
    wait_done(h);
}

void cq__mgr_api_invalidated(cq_mgr_api_t *a, void *ud, int err, const char *why)
{
    (void)a;
    cq_mgr_hconn_t *h = ud;
    api_wait_t *w = h->wait;
    if (!w)
        return;
    h->wait = NULL;
    req_t q = {.h = h, .api = true, .authkind = w->authkind, .reason = w->reason};
    audit(&q, "message.invalidate", w->target, 0, err ? why : "ok");
    if (err)
        fail(&q, msg_status(err), "shard %u: %s", w->shard, why);
    else
        respond_json(&q, 200,
                     json_pack("{s:s,s:I,s:I,s:i}", "topic", w->topic, "shard",
                               (json_int_t)w->shard, "offset", (json_int_t)w->offset, "state", 0));
    cq_free(w);
    if (!h->closing && h->in.len)
        cq_mgr_hconn_input(h, NULL, 0, h->now); /* the requests that came meanwhile */
}

static void on_server(req_t *q, bool offline)
{
    char id_s[16];
    uint32_t appid;
    char err[API_ERR_MAX] = "";
    if (!need(q, "POST"))
        return;
    if (!parse_u32(q->seg[1], q->seg_len[1], &appid)) {
        fail(q, 400, "path: appid must be an integer in 0..4294967295");
        return;
    }
    snprintf(id_s, sizeof(id_s), "%u", appid);
    changed(q, offline ? "server.offline" : "server.online", id_s,
            cq__mgr_server_set_offline(q->h->a->m, appid, offline, err, sizeof(err)), err);
}

/* GET: the document as stored; PUT: the whole document replaced (an empty list removes every
 * binding and leaves them managed). */
static void on_bindings(req_t *q)
{
    char err[API_ERR_MAX] = "";
    if (method_is(q, "PUT")) {
        changed(q, "bindings.put", "",
                cq__mgr_bindings_put(q->h->a->m, q->body, q->body_len, err, sizeof(err)), err);
        return;
    }
    if (!method_is(q, "GET")) {
        q->extra = "Allow: GET, PUT\r\n";
        fail(q, 405, "method not allowed: use GET or PUT");
        return;
    }
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    if (cq__mgr_bindings_json(q->h->a->m, &sb) < 0)
        fail(q, 503, "out of memory");
    else
        respond_raw(q, 200, "application/json", sb.data, sb.len);
    cq_sbuf_done(&sb);
}

/* Routes /api/...: login first (it needs no credential), then authentication, CSRF and the
 * content type, then the route. An unknown path answers 404 only to an authenticated caller. */
static void on_api(req_t *q)
{
    q->api = true;
    if (!split_api(q)) {
        fail(q, 404, "no such API route");
        return;
    }
    bool get = method_is(q, "GET");
    if (q->nseg == 1 && seg_is(q, 0, "login")) {
        if (!need(q, "POST"))
            return;
        if (!ctype_json(q)) {
            fail(q, 415, "Content-Type: must be application/json");
            return;
        }
        on_login(q);
        return;
    }
    if (!authenticate(q))
        return;
    if (!get && !ctype_json(q)) {
        fail(q, 415, "Content-Type: must be application/json");
        return;
    }
    if (q->nseg == 1 && seg_is(q, 0, "logout")) {
        if (need(q, "POST"))
            on_logout(q);
    } else if (q->nseg == 1 && seg_is(q, 0, "state")) {
        if (need(q, "GET"))
            on_state(q);
    } else if (q->nseg == 1 && seg_is(q, 0, "charts")) {
        on_charts(q);
    } else if (q->nseg == 1 && seg_is(q, 0, "audit")) {
        if (need(q, "GET"))
            on_audit(q);
    } else if (q->nseg == 2 && seg_is(q, 0, "modules")) {
        on_module(q);
    } else if (q->nseg == 1 && seg_is(q, 0, "bindings")) {
        on_bindings(q);
    } else if (q->nseg == 3 && seg_is(q, 0, "topics") &&
               (seg_is(q, 2, "online") || seg_is(q, 2, "offline"))) {
        on_topic(q, seg_is(q, 2, "online"));
    } else if (q->nseg == 1 && seg_is(q, 0, "topics")) {
        on_topic_create(q);
    } else if (q->nseg == 3 && seg_is(q, 0, "topics") && seg_is(q, 2, "retention")) {
        on_topic_retention(q);
    } else if (q->nseg == 6 && seg_is(q, 0, "topics") && seg_is(q, 2, "messages") &&
               seg_is(q, 5, "invalidate")) {
        on_invalidate(q);
    } else if (q->nseg == 5 && seg_is(q, 0, "topics") && seg_is(q, 2, "messages")) {
        on_message(q);
    } else if (q->nseg == 4 && seg_is(q, 0, "topics") && seg_is(q, 2, "messages")) {
        on_message_key(q);
    } else if (q->nseg == 3 && seg_is(q, 0, "servers") &&
               (seg_is(q, 2, "offline") || seg_is(q, 2, "online"))) {
        on_server(q, seg_is(q, 2, "offline"));
    } else {
        fail(q, 404, "no such API route");
    }
}

static void dispatch(req_t *q)
{
    if (!host_ok(q)) {
        fail(q, 421, "Host: not one of --mgr-http-hosts");
        return;
    }
    if (q->path_len >= 5 && memcmp(q->path, "/api/", 5) == 0)
        on_api(q);
    else
        on_asset(q);
}

/* ---- connections -------------------------------------------------------------------------- */

/* Handles the request at the head of h->in. Returns the bytes it used (0: need more). */
static size_t one_request(cq_mgr_hconn_t *h)
{
    req_t q;
    memset(&q, 0, sizeof(q));
    q.h = h;
    bool http11 = false;
    ssize_t r = parse_head(&q, &http11);
    if (r == 0)
        return 0;
    if (r < 0 || q.bad || q.f.chunked || q.f.content_length > API_BODY_MAX) {
        h->keep_alive = false;
        if (r == CQ_EBADLEN || r == CQ_ELIMIT)
            fail(&q, 431, "request head over %d bytes", API_HEAD_MAX);
        else if (r < 0 || q.bad)
            fail(&q, 400, "malformed HTTP request head");
        else if (q.f.chunked)
            fail(&q, 400, "Transfer-Encoding: not supported, send Content-Length");
        else
            fail(&q, 413, "body: over the limit of %d bytes", API_BODY_MAX);
        return h->in.len;
    }
    if (h->in.len - (size_t)r < q.f.content_length)
        return 0;
    h->keep_alive = cq_http_fields_keep_alive(&q.f, http11);
    q.body = (const char *)h->in.data + r;
    q.body_len = (size_t)q.f.content_length;
    dispatch(&q);
    return (size_t)r + q.body_len;
}

cq_mgr_hconn_t *cq_mgr_hconn_new(cq_mgr_t *m, const cq_mgr_conn_ops_t *ops, void *tctx,
                                 const char *peer_ip)
{
    cq_mgr_api_t *a = cq__mgr_api(m);
    cq_mgr_hconn_t *h = a ? cq_calloc(1, sizeof(*h)) : NULL;
    if (!h)
        return NULL;
    h->a = a;
    h->ops = ops;
    h->tctx = tctx;
    cq_peer_host(peer_ip ? peer_ip : "?", h->addr, sizeof(h->addr));
    cq_sendq_init(&h->sendq, CQ_FRAMING_FIXED); /* PACKET entries only: the mode is unused */
    cq_sbuf_init(&h->in);
    cq_list_init(&h->pending_node);
    h->keep_alive = true;
    return h;
}

int cq_mgr_hconn_input(cq_mgr_hconn_t *h, const uint8_t *p, size_t n, uint64_t now_ms)
{
    if (h->closing)
        return CQ_ECLOSED;
    h->now = now_ms;
    if (h->in.len + n > 2 * (API_HEAD_MAX + API_BODY_MAX)) {
        h_close(h); /* pipelining beyond what one request may hold */
        return CQ_ECLOSED;
    }
    if (n && cq_sbuf_append(&h->in, p, n) < 0) {
        h_close(h);
        return -ENOMEM;
    }
    while (!h->closing && !h->wait && h->in.len) {
        size_t used = one_request(h);
        if (!used)
            break;
        cq_sbuf_consume(&h->in, used);
    }
    return h->closing ? CQ_ECLOSED : 0;
}

void cq_mgr_hconn_close(cq_mgr_hconn_t *h)
{
    if (!h)
        return;
    if (h->wait) /* its answer is for no one now */
        cq__mgr_invalidate_cancel(h->a->m, h);
    cq_free(h->wait);
    cq_list_remove(&h->pending_node);
    cq_sendq_done(&h->sendq);
    cq_sbuf_done(&h->in);
    cq_free(h);
}

cq_sendq_t *cq_mgr_hconn_sendq(cq_mgr_hconn_t *h)
{
    return &h->sendq;
}

/* ---- the engine's side -------------------------------------------------------------------- */

cq_mgr_api_t *cq__mgr_api_new(cq_mgr_t *m)
{
    cq_mgr_api_t *a = cq_calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    const cq_authlim_opts_t lo = {.max_failures = API_LIM_FAILURES,
                                  .window_ms = API_LIM_WINDOW_MS,
                                  .backoff_ms = API_LIM_BACKOFF};
    a->m = m;
    cq_list_init(&a->pending);
    a->lim = cq_authlim_new(&lo);
    if (!a->lim) {
        cq_free(a);
        return NULL;
    }
    return a;
}

cq_mgr_api_t *cq__mgr_api_free(cq_mgr_api_t *a)
{
    if (!a)
        return NULL;
    for (size_t i = 0; i < a->audit_n; i++)
        cq_free(a->audit[(a->audit_head + i) % API_AUDIT_KEEP]);
    while (!cq_list_empty(&a->pending)) /* connections outliving the engine: unlist them */
        cq_list_remove(a->pending.next);
    cq_authlim_free(a->lim);
    cq_free(a);
    return NULL;
}

void cq__mgr_api_flush(cq_mgr_api_t *a)
{
    while (a && !cq_list_empty(&a->pending)) {
        cq_list_t *n = a->pending.next;
        cq_list_remove(n);
        cq_mgr_hconn_t *h = cq_container_of(n, cq_mgr_hconn_t, pending_node);
        h->ops->t.flush(h->tctx);
    }
}

void cq__mgr_api_tick(cq_mgr_api_t *a, uint64_t now_ms)
{
    for (size_t i = 0; a && i < API_SESSIONS; i++)
        if (a->sess[i].used && expired(&a->sess[i], now_ms))
            session_drop(&a->sess[i]);
}
