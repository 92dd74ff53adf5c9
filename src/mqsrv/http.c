/* http.c - the HTTP/JSON API's front end: connections, routing, handlers that decode a request
 * and run it through the operation layer (ops.c), and the answers to store completions. The
 * policy (rights, topics, counts) is not here. See cq_mqhttp.h and doc/protocol-mq.md §HTTP.
 * No I/O. */
#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_http.h"
#include "cq_log.h"
#include "mqsrv_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_SEGS 6

/* One request being handled: the parsed head, its body and the caller's module. */
typedef struct hreq {
    cq_mqhttp_conn_t *h;
    const cq_mqhttp_req_t *rq;
    const char *body;
    size_t body_len;
    const char *seg[MAX_SEGS];
    size_t seg_len[MAX_SEGS];
    size_t nseg;
    uint32_t module_id;
} hreq_t;

/* ---- responses -------------------------------------------------------------------------- */

/* The HTTP status of a chanq error code. */
static int status_of(int err)
{
    switch (err) {
    case CQ_EJSON:
    case CQ_EFIELD:
    case CQ_EBADTOPIC:
    case CQ_EOFFRANGE:
    case CQ_EHEADER:
    case -EINVAL:
        return 400;
    case CQ_EAUTH:
        return 401;
    case CQ_EACL:
        return 403;
    case CQ_ENOTOPIC:
    case CQ_ENOMSG:
        return 404;
    case CQ_EOFFLINE:
    case CQ_ESEQCONFLICT:
    case CQ_ESEQORDER:
        return 409;
    case CQ_ECONTENT:
    case CQ_EBADLEN:
        return 413;
    case CQ_EBUSY:
    case CQ_ELIMIT:
        return 429;
    default:
        return 503;
    }
}

static void h_close(cq_mqhttp_conn_t *h)
{
    cq__mq_link_close(&h->l);
}

/* Sends status with body v (taken; NULL: answered 503 internal instead). */
static void respond(cq_mqhttp_conn_t *h, int status, json_t *v)
{
    if (h->l.dead || h->l.closing) {
        json_decref(v);
        return;
    }
    if (!v) { /* out of memory, or a stored message that is not UTF-8 text */
        status = 503;
        v = json_pack("{s:i,s:s}", "err_code", CQ_MQ_ERR_INTERNAL, "err_msg",
                      "cannot build the answer");
    }
    size_t blen = v ? json_dumpb(v, NULL, 0, JSON_COMPACT) : 0;
    if (v && !blen)
        status = 503;
    char head[192];
    const cq_http_answer_t a = {
        .status = status, .ctype = "application/json", .length = blen, .keep_alive = h->keep_alive};
    int hn = cq_http_answer_head(head, sizeof(head), &a);
    cq_buf_t *b = hn < 0 ? NULL : cq_buf_new((size_t)hn + blen); /* the answer goes into it */
    if (!b) {
        json_decref(v);
        h_close(h);
        return;
    }
    memcpy(b->data, head, (size_t)hn);
    if (blen)
        json_dumpb(v, (char *)b->data + hn, blen, JSON_COMPACT);
    b->len = (uint32_t)((size_t)hn + blen);
    json_decref(v);
    if (cq__mq_link_send(&h->l, b) < 0 || !h->keep_alive)
        h_close(h);
}

/* Answers an error: status, {"err_code": wire code, "err_msg": text}. */
static void fail_status(cq_mqhttp_conn_t *h, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_status(cq_mqhttp_conn_t *h, int status, int code, const char *fmt, ...)
{
    char msg[CQ_MQ_ERR_MSG_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cq_http_scrub_utf8(msg); /* msg quotes the request: a JSON answer must still be built */
    respond(h, status, json_pack("{s:i,s:s}", "err_code", code, "err_msg", msg));
}

#define FAIL(h, err, ...) fail_status((h), status_of(err), cq_mq_errcode(err), __VA_ARGS__)

/* ---- small helpers ---------------------------------------------------------------------- */

static bool seg_is(const hreq_t *q, size_t i, const char *word)
{
    return i < q->nseg && strlen(word) == q->seg_len[i] && !memcmp(q->seg[i], word, q->seg_len[i]);
}

static bool method_is(const hreq_t *q, const char *m)
{
    return strlen(m) == q->rq->method_len && !memcmp(q->rq->method, m, q->rq->method_len);
}

/* Splits the path after "/v1/" into segments. False when it is not a /v1/ path. */
static bool split_path(hreq_t *q)
{
    const char *p = q->rq->path, *end = p + q->rq->path_len;
    if (q->rq->path_len < 4 || memcmp(p, "/v1/", 4) != 0)
        return false;
    p += 4;
    while (p <= end && q->nseg < MAX_SEGS) {
        const char *s = memchr(p, '/', (size_t)(end - p));
        s = s ? s : end;
        q->seg[q->nseg] = p;
        q->seg_len[q->nseg++] = (size_t)(s - p);
        p = s + 1;
    }
    return p > end;
}

/* Copies segment i into out (size CQ_MQHTTP_CONSUMER_MAX + 1). False if too long. */
static bool seg_copy(const hreq_t *q, size_t i, char *out, size_t cap)
{
    if (q->seg_len[i] >= cap)
        return false;
    memcpy(out, q->seg[i], q->seg_len[i]);
    out[q->seg_len[i]] = '\0';
    return true;
}

/* A credential that failed: the address budget, and a rate-limited log line. */
static void auth_failed(hreq_t *q, uint64_t now, uint32_t id)
{
    cq_mqsrv_t *s = q->h->l.s;
    char note[48];
    bool now_blocked = cq_authlim_failed(s->authlim, q->h->l.peer, now);
    if (cq_authlim_log_allow(s->authlim, now, note, sizeof(note)))
        CQ_INFO("mq", "HTTP request from %s, module %u: authentication failed%s%s", q->h->l.peer,
                id, now_blocked ? ", address now blocked" : "", note);
}

/* Checks the Authorization header against the permissions, after the address budget. Answers
 * and returns false when the caller is not authenticated. */
static bool authenticate(hreq_t *q)
{
    const cq_mqhttp_req_t *rq = q->rq;
    const cq_mqperm_t *perms = q->h->l.s->perms;
    uint64_t now = cq_clock_mono_ns() / 1000000u;
    if (cq_authlim_blocked(q->h->l.s->authlim, q->h->l.peer, CQ_AUTHLIM_MQHTTP, now)) {
        fail_status(q->h, 429, CQ_MQ_ERR_UNAUTHENTICATED,
                    "too many failed authentications from this address, retry later");
        return false;
    }
    char tok[CQ_MQ_TOKEN_MAX + 1];
    uint64_t id = 0;
    size_t i = 7;
    bool ok = rq->auth && rq->auth_len > 7 && !strncasecmp(rq->auth, "Bearer ", 7);
    for (; ok && i < rq->auth_len && rq->auth[i] >= '0' && rq->auth[i] <= '9' && id <= UINT32_MAX;
         i++)
        id = id * 10 + (uint64_t)(rq->auth[i] - '0');
    ok = ok && i > 7 && i < rq->auth_len && rq->auth[i] == ':' && id <= UINT32_MAX &&
         rq->auth_len - i - 1 <= CQ_MQ_TOKEN_MAX;
    if (ok) {
        memcpy(tok, rq->auth + i + 1, rq->auth_len - i - 1);
        tok[rq->auth_len - i - 1] = '\0';
    }
    if (!perms) {
        q->module_id = q->h->l.module_id = ok ? (uint32_t)id : 0;
        return true;
    }
    if (!ok || !cq_mqperm_auth(perms, (uint32_t)id, tok)) {
        auth_failed(q, now, (uint32_t)id);
        FAIL(q->h, CQ_EAUTH,
             ok ? "unknown module_id or wrong token"
                : "missing or malformed \"Authorization: Bearer <module_id>:<token>\"");
        return false;
    }
    q->module_id = q->h->l.module_id = (uint32_t)id;
    return true;
}

/* Answers CQ_EACL for right on topic (NULL with CQ_MQPERM_ADMIN). */
static void acl_fail(hreq_t *q, cq_mqperm_right_t right, const char *topic)
{
    static const char *const what[] = {"", "produce to", "consume", "administer"};
    FAIL(q->h, CQ_EACL, "module %u may not %s%s%s", q->module_id, what[right],
         right == CQ_MQPERM_ADMIN ? " topics" : " topic ", right == CQ_MQPERM_ADMIN ? "" : topic);
}

static bool allowed(hreq_t *q, cq_mqperm_right_t right, const char *topic)
{
    if (cq__mqop_may(q->h->l.s, q->module_id, right, topic))
        return true;
    acl_fail(q, right, topic);
    return false;
}

/* Parses the body as a JSON object. Answers and returns NULL when it is not one. */
static json_t *body_object(hreq_t *q)
{
    json_error_t jerr;
    json_t *v = json_loadb(q->body, q->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v || !json_is_object(v)) {
        FAIL(q->h, CQ_EJSON, "body: %s", v ? "must be a JSON object" : jerr.text);
        json_decref(v);
        return NULL;
    }
    return v;
}

/* Reads an optional integer field in 0..max. Answers and returns false when it is wrong. */
static bool int_field(hreq_t *q, json_t *o, const char *key, int64_t max, int64_t *ret, bool *has)
{
    json_t *v = json_object_get(o, key);
    *has = v != NULL;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
        FAIL(q->h, CQ_EFIELD, "field \"%s\": must be an integer in 0..%lld", key, (long long)max);
        return false;
    }
    *ret = json_integer_value(v);
    return true;
}

/* After a submission that returned r: 0 (h waits for the completion) or the refusal, answered
 * with *why (read only now: an argument is evaluated before the call). */
static void submitted(cq_mqhttp_conn_t *h, int r, const char *const *why)
{
    if (r == 0)
        h->busy = true;
    else
        FAIL(h, r, "%s", *why);
}

/* ---- handlers --------------------------------------------------------------------------- */

static void on_health(hreq_t *q)
{
    const cq_mqsrv_t *s = q->h->l.s;
    respond(q->h, 200,
            json_pack("{s:b,s:I,s:I,s:I}", "ok", 1, "topics", (json_int_t)s->ntopics, "produced",
                      (json_int_t)s->st.produced, "consumed", (json_int_t)s->st.consumed));
}

static void on_list(hreq_t *q)
{
    mq_topic_t **v = NULL;
    size_t n = 0;
    json_t *arr = cq__mqop_topics(q->h->l.s, false, 0, &v, &n) == 0 ? json_array() : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        const mq_topic_t *t = v[i];
        if (json_array_append_new(arr, json_pack("{s:s,s:b,s:i,s:I}", "topic", t->name, "online",
                                                 t->online, "retention_days", t->retention_days,
                                                 "last_offset", (json_int_t)t->last_offset)) < 0)
            arr = (json_decref(arr), NULL);
    }
    cq_free(v);
    respond(q->h, 200, arr ? json_pack("{s:o}", "topics", arr) : NULL);
}

static void on_create(hreq_t *q)
{
    if (!allowed(q, CQ_MQPERM_ADMIN, NULL))
        return;
    json_t *o = body_object(q);
    if (!o)
        return;
    json_t *tv = json_object_get(o, "topic");
    int64_t days = 0;
    bool has;
    if (!json_is_string(tv) || !cq_mq_topic_valid(json_string_value(tv), json_string_length(tv)))
        FAIL(q->h, CQ_EBADTOPIC, "field \"topic\": must be a string matching [A-Za-z0-9_]{1,64}");
    else if (int_field(q, o, "retention_days", 36500, &days, &has)) {
        const mq_topic_t *t = cq__mqsrv_topic(q->h->l.s, json_string_value(tv));
        const char *why;
        if (t)
            respond(q->h, 200, json_pack("{s:s,s:b}", "topic", t->name, "created", 0));
        else
            submitted(q->h,
                      cq__mqop_create(&q->h->l, q->module_id, json_string_value(tv),
                                      has ? (int)days : -1, NULL, &why),
                      &why);
    }
    json_decref(o);
}

/* The topic of /v1/topics/<t>/...: validated, known, and (need_online) online. Answers and
 * returns NULL otherwise. right is checked between validation and existence. */
static mq_topic_t *topic_of(hreq_t *q, cq_mqperm_right_t right, bool need_online)
{
    char name[CQ_MQ_TOPIC_MAX + 1];
    mq_topic_t *t = NULL;
    if (!seg_copy(q, 1, name, sizeof(name)))
        return NULL;
    int r = cq__mqop_topic(q->h->l.s, q->module_id, right, name, need_online, &t);
    if (r == CQ_EACL)
        acl_fail(q, right, name);
    else if (r == CQ_ENOTOPIC)
        FAIL(q->h, r, "topic \"%s\" does not exist", name);
    else if (r == CQ_EOFFLINE)
        FAIL(q->h, r, "topic \"%s\" is offline", t->name);
    return r == 0 ? t : NULL;
}

static void on_set_online(hreq_t *q, bool online)
{
    mq_topic_t *t = topic_of(q, CQ_MQPERM_ADMIN, false);
    if (!t)
        return;
    const char *why;
    submitted(q->h, cq__mqop_set_online(q->h->l.s, &q->h->l, t->name, online, &why), &why);
}

/* Adds one {"content", "producer_id"?, "seq"?} (or the top-level object) to req. */
static bool add_message(hreq_t *q, cq_writer_req_t *req, json_t *m, size_t idx)
{
    json_t *c = json_object_get(m, "content");
    int64_t pid = 0, seq = 0;
    bool has_pid, has_seq;
    if (!json_is_object(m) || (!json_is_string(c) && !json_is_object(c))) {
        FAIL(q->h, CQ_EFIELD, "message %zu: field \"content\": must be a string or an object", idx);
        return false;
    }
    if (!int_field(q, m, "producer_id", CQ_MQ_MAX_U53, &pid, &has_pid) ||
        !int_field(q, m, "seq", CQ_MQ_MAX_U53, &seq, &has_seq))
        return false;
    if (has_pid != has_seq || (has_pid && pid == 0)) {
        FAIL(q->h, CQ_EFIELD, "message %zu: \"producer_id\" (>= 1) and \"seq\" go together", idx);
        return false;
    }
    size_t len = json_is_string(c) ? json_string_length(c) : json_dumpb(c, NULL, 0, JSON_COMPACT);
    if (len > q->h->l.s->lim.max_content) {
        FAIL(q->h, CQ_ECONTENT, "message %zu: content of %zu bytes is over the limit of %u", idx,
             len, q->h->l.s->lim.max_content);
        return false;
    }
    char *buf = cq_malloc(len ? len : 1);
    if (buf && json_is_string(c))
        memcpy(buf, json_string_value(c), len);
    else if (buf)
        json_dumpb(c, buf, len, JSON_COMPACT);
    int r = buf ? cq_writer_req_add_msg_take(req, buf, len, (uint64_t)pid, (uint64_t)seq) : -ENOMEM;
    if (r < 0)
        FAIL(q->h, r, "%s", cq_strerror(r));
    return r == 0;
}

static bool fill_produce(hreq_t *q, cq_writer_req_t *req, json_t *o)
{
    json_t *msgs = json_object_get(o, "messages");
    if (!msgs)
        return add_message(q, req, o, 0);
    size_t n = json_is_array(msgs) ? json_array_size(msgs) : 0;
    if (n == 0 || n > q->h->l.s->lim.max_batch || json_object_get(o, "content")) {
        FAIL(q->h, n > q->h->l.s->lim.max_batch ? CQ_ECONTENT : CQ_EFIELD,
             "field \"messages\": must be an array of 1..%u messages, without \"content\" beside",
             q->h->l.s->lim.max_batch);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (!add_message(q, req, json_array_get(msgs, i), i))
            return false;
    return true;
}

static void on_produce(hreq_t *q)
{
    const char *why;
    cq_writer_req_t *req = NULL;
    mq_topic_t *t = topic_of(q, CQ_MQPERM_PRODUCE, true);
    json_t *o = t ? body_object(q) : NULL;
    int r = o ? cq_writer_req_new(CQ_WRITER_PRODUCE, t->name, NULL, &req) : 0;
    if (r < 0)
        FAIL(q->h, r, "%s", cq_strerror(r));
    if (req && fill_produce(q, req, o))
        submitted(q->h, cq__mqop_produce(&q->h->l, req, NULL, &why), &why);
    else
        cq_writer_req_free(req);
    json_decref(o);
}

/* Reads name=<decimal> from the query; false (answered) when present but not a number. */
static bool query_u64(hreq_t *q, const char *name, uint64_t *ret)
{
    const char *p = q->rq->query, *end = p ? p + q->rq->query_len : NULL;
    size_t nl = strlen(name);
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        amp = amp ? amp : end;
        if ((size_t)(amp - p) > nl && !memcmp(p, name, nl) && p[nl] == '=') {
            uint64_t x = 0;
            const char *d = p + nl + 1;
            bool ok = d < amp && amp - d <= 15;
            for (; ok && d < amp; d++)
                ok = *d >= '0' && *d <= '9' && ((x = x * 10 + (uint64_t)(*d - '0')), true);
            if (!ok) {
                FAIL(q->h, CQ_EFIELD, "query \"%s\": must be a decimal integer", name);
                return false;
            }
            *ret = x;
        }
        p = amp + 1;
    }
    return true;
}

static void on_consume(hreq_t *q)
{
    uint64_t from = 0, max = UINT64_MAX; /* query_u64 reads at most 15 digits */
    const char *why;
    mq_topic_t *t = topic_of(q, CQ_MQPERM_CONSUME, true);
    if (!t || !query_u64(q, "offset", &from) || !query_u64(q, "max", &max))
        return;
    submitted(q->h, cq__mqop_consume(&q->h->l, t, from, max != UINT64_MAX, max, NULL, &why), &why);
}

static void on_offset(hreq_t *q, bool commit)
{
    char consumer[CQ_MQHTTP_CONSUMER_MAX + 1];
    mq_topic_t *t = topic_of(q, CQ_MQPERM_CONSUME, false);
    if (!t)
        return;
    if (!seg_copy(q, 3, consumer, sizeof(consumer)) || !cq_store_consumer_id_ok(consumer)) {
        FAIL(q->h, CQ_EFIELD, "consumer id: must be 1..%d printable ASCII bytes",
             CQ_MQHTTP_CONSUMER_MAX);
        return;
    }
    int64_t off = 0;
    bool has = true;
    json_t *o = commit ? body_object(q) : NULL;
    if (commit && (!o || !int_field(q, o, "offset", CQ_MQ_MAX_U53, &off, &has) || !has)) {
        if (o && !has)
            FAIL(q->h, CQ_EFIELD, "field \"offset\": required");
        json_decref(o);
        return;
    }
    json_decref(o);
    const char *why;
    submitted(q->h, cq__mqop_offset(&q->h->l, t, consumer, commit, (uint64_t)off, NULL, &why),
              &why);
}

/* POST /v1/topics/<t>/messages/<offset>/invalidate (admin): the message's state 0. */
static void on_invalidate(hreq_t *q)
{
    char num[24];
    mq_topic_t *t = topic_of(q, CQ_MQPERM_ADMIN, false);
    if (!t)
        return;
    uint64_t off = 0;
    bool ok = seg_copy(q, 3, num, sizeof(num)) && num[0] && strlen(num) <= 16;
    for (const char *p = num; ok && *p; p++) {
        ok = *p >= '0' && *p <= '9';
        off = off * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || off == 0 || off > (uint64_t)CQ_MQ_MAX_U53) {
        FAIL(q->h, CQ_EOFFRANGE, "offset: must be an integer in [1, 9007199254740991]");
        return;
    }
    const char *why;
    submitted(q->h, cq__mqop_invalidate(q->h->l.s, &q->h->l, t, off, 0, &why), &why);
}

/* Routes /v1/topics/<t>/... once the topic segment is valid and the caller authenticated. */
static bool route_topic(hreq_t *q)
{
    bool post = method_is(q, "POST"), get = method_is(q, "GET");
    if (q->nseg == 3 && post && (seg_is(q, 2, "online") || seg_is(q, 2, "offline")))
        on_set_online(q, seg_is(q, 2, "online"));
    else if (q->nseg == 3 && seg_is(q, 2, "messages") && (post || get))
        post ? on_produce(q) : on_consume(q);
    else if (q->nseg == 5 && post && seg_is(q, 2, "messages") && seg_is(q, 4, "invalidate"))
        on_invalidate(q);
    else if (q->nseg == 5 && seg_is(q, 2, "consumers") && seg_is(q, 4, "offset") && (post || get))
        on_offset(q, post);
    else
        return false;
    return true;
}

/* ---- before the body ------------------------------------------------------------------- */

/* The cross-site rules. A web page the operator visits can send requests to the API (it runs
 * on the operator's machine, next to the API), and a page of a name that resolves to us (DNS
 * rebinding) can read the answers as its own. So the Host must be one the API is known by, a
 * browser's Origin must be allowed, and a POST must say application/json, which a page can
 * only send to another origin after a CORS preflight this API never answers. A request without
 * Host (HTTP/1.0) or Origin is not a browser's and passes. Answers and returns false when one
 * fails. */
static bool cross_site_ok(hreq_t *q)
{
    const cq_mqhttp_req_t *rq = q->rq;
    const cq_mqsrv_t *s = q->h->l.s;
    if (rq->host && !cq_mqhttp_host_ok(s->http_hosts, rq->host, rq->host_len)) {
        fail_status(q->h, 421, CQ_MQ_ERR_NO_PERMISSION,
                    "Host \"%.*s\" is not a name of this API (--mq-http-hosts)",
                    (int)(rq->host_len > 100 ? 100 : rq->host_len), rq->host);
        return false;
    }
    if (rq->origin && !cq_mqhttp_origin_ok(s->http_origins, rq->origin, rq->origin_len)) {
        fail_status(q->h, 403, CQ_MQ_ERR_NO_PERMISSION,
                    "Origin \"%.*s\" is not allowed (--mq-http-origins)",
                    (int)(rq->origin_len > 100 ? 100 : rq->origin_len), rq->origin);
        return false;
    }
    if (method_is(q, "POST") && !(rq->ctype && cq_mqhttp_ctype_json(rq->ctype, rq->ctype_len))) {
        fail_status(q->h, 415, CQ_MQ_ERR_BAD_HEADER, "POST needs Content-Type: application/json");
        return false;
    }
    return true;
}

/* What is decided from the head alone, before a byte of the body is held: the cross-site
 * rules, the topic name, the credentials and, without a permissions file, whether the peer may
 * write. Answers and returns false when the request is refused. */
static bool gate(hreq_t *q, bool known)
{
    const char *why;
    if (!cross_site_ok(q))
        return false;
    if (!known || !seg_is(q, 0, "topics"))
        return true;
    if (q->nseg >= 2 && !cq_mq_topic_valid(q->seg[1], q->seg_len[1])) {
        FAIL(q->h, CQ_EBADTOPIC, "topic name: must match [A-Za-z0-9_]{1,64}");
        return false;
    }
    if (!authenticate(q))
        return false;
    /* a GET reads: refused on a standby with --slave-reads off (503, err 20 naming the master) */
    int r = method_is(q, "POST") ? cq__mqop_may_write(&q->h->l, &why)
                                 : cq__mqop_may_read(q->h->l.s, &why);
    if (r == CQ_EACL) {
        FAIL(q->h, r, "module %u %s", q->module_id, why);
        return false;
    }
    if (r < 0) { /* CQ_ENOTMASTER, CQ_EREADMASTER: 503 with err_code 18, 20 */
        FAIL(q->h, r, "%s", why);
        return false;
    }
    return true;
}

/* Routes a request that passed the gate, its body received. */
static void dispatch(hreq_t *q, bool known)
{
    if (known && seg_is(q, 0, "health") && q->nseg == 1 && method_is(q, "GET")) {
        on_health(q);
        return;
    }
    if (known && seg_is(q, 0, "topics") && q->nseg == 1 && method_is(q, "GET"))
        on_list(q);
    else if (known && seg_is(q, 0, "topics") && q->nseg == 1 && method_is(q, "POST"))
        on_create(q);
    else if (!known || !seg_is(q, 0, "topics") || q->nseg < 3 || !route_topic(q))
        fail_status(q->h, 404, CQ_MQ_ERR_UNKNOWN_TYPE, "no endpoint %.*s %.*s",
                    (int)q->rq->method_len, q->rq->method, (int)q->rq->path_len, q->rq->path);
}

/* ---- completions ------------------------------------------------------------------------ */

static json_t *produce_answer(const cq_writer_req_t *req)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < req->n_msgs; i++)
        if (json_array_append_new(arr, json_integer((json_int_t)req->offsets[i])) < 0)
            arr = (json_decref(arr), NULL);
    return arr ? json_pack("{s:o}", "offsets", arr) : NULL;
}

/* Bytes of one record in the consume answer's "messages", comma excluded. */
static size_t read_item_len(const cq_store_rec_t *r)
{
    char num[48];
    int k = snprintf(num, sizeof(num), "%llu%lld", (unsigned long long)r->offset,
                     (long long)r->create_ms);
    return sizeof("{\"offset\":,\"content\":,\"create_time\":}") - 1 + (size_t)k +
           cq_mq_json_str_len(r->content, r->len);
}

/* The records that fit in the seed protocol's frame maximum, as there; next_offset says where
 * the next consume continues. */
static json_t *read_answer(cq_mqsrv_t *s, const cq_writer_req_t *req)
{
    json_t *arr = json_array();
    uint64_t next = req->from_offset;
    size_t budget = cq__mqop_reply_budget(s), used = 0, n = 0;
    for (size_t i = 0; arr && i < req->n_recs; i++, n++) {
        const cq_store_rec_t *r = &req->recs[i];
        size_t len = read_item_len(r) + (i > 0);
        if (i > 0 && used + len > budget)
            break;
        used += len;
        json_t *c = json_stringn(r->content, r->len);
        if (!c || !json_is_string(c) ||
            json_array_append_new(arr, json_pack("{s:I,s:o,s:I}", "offset", (json_int_t)r->offset,
                                                 "content", c, "create_time",
                                                 (json_int_t)r->create_ms)) < 0)
            arr = (json_decref(arr), NULL);
        next = r->offset;
    }
    s->st.consumed += arr ? n : 0;
    return arr ? json_pack("{s:o,s:I}", "messages", arr, "next_offset", (json_int_t)next) : NULL;
}

static json_t *answer(cq_mqsrv_t *s, const cq_writer_req_t *req, const mq_result_t *res)
{
    switch (req->op) {
    case CQ_WRITER_PRODUCE:
        return produce_answer(req);
    case CQ_WRITER_READ:
        return read_answer(s, req);
    case CQ_WRITER_TOPIC_CREATE:
        return json_pack("{s:s,s:b}", "topic", req->topic, "created", res->created);
    case CQ_WRITER_TOPIC_SET_ONLINE:
        return json_pack("{s:s,s:b}", "topic", req->topic, "online", req->online);
    case CQ_WRITER_INVALIDATE:
        return json_pack("{s:s,s:I,s:i}", "topic", req->topic, "offset", (json_int_t)req->offset,
                         "state", 0);
    case CQ_WRITER_GET_OFFSET:
        return json_pack("{s:s,s:s,s:I,s:b}", "topic", req->topic, "consumer", req->consumer,
                         "offset", (json_int_t)res->offset, "committed", res->committed);
    default:
        return json_pack("{s:s,s:s,s:I}", "topic", req->topic, "consumer", req->consumer, "offset",
                         (json_int_t)res->offset);
    }
}

static void process(cq_mqhttp_conn_t *h);

static void done(mq_link_t *l, cq_writer_req_t *req, const mq_result_t *res, void *ctx)
{
    cq_mqhttp_conn_t *h = (cq_mqhttp_conn_t *)l;
    h->busy = false;
    if (l->dead)
        return;
    char why[CQ_MQ_ERR_MSG_MAX];
    if (res->err == CQ_ENOTMASTER) /* fenced before the answer: the rows may be stored */
        FAIL(h, res->err,
             "%s; the messages may be stored: retry with the same producer_id and "
             "seq on the shard's master",
             cq_strerror(res->err));
    else if (res->err == CQ_ENOMSG)
        FAIL(h, res->err, "topic %s: no message at offset %llu", req->topic,
             (unsigned long long)req->offset);
    else if (res->err)
        FAIL(h, res->err, "%s; %s", cq__mqop_err_text(req, res->err, why, sizeof(why)),
             req->op == CQ_WRITER_PRODUCE ? cq__mqop_produce_advice(res->err) : "not done");
    else
        respond(h, 200, answer(l->s, req, res));
    process(h); /* h stays: its request is in flight until this returns */
}

static void conn_free(mq_link_t *l)
{
    cq_mqhttp_conn_t *h = (cq_mqhttp_conn_t *)l;
    cq_sbuf_done(&h->in);
    cq_free(h);
}

const mq_fe_t cq__mqhttp_fe = {done, conn_free};

/* ---- connections ------------------------------------------------------------------------ */

size_t cq_mqhttp_max_body(const cq_mqsrv_t *s)
{
    uint64_t b = (uint64_t)s->lim.max_content * s->lim.max_batch + CQ_MQHTTP_BODY_SLACK;
    return b > CQ_MQHTTP_BODY_CAP ? CQ_MQHTTP_BODY_CAP : (size_t)b;
}

cq_mqhttp_conn_t *cq_mqhttp_conn_new(cq_mqsrv_t *s, const cq_mqsrv_conn_ops_t *ops, void *ud)
{
    cq_mqhttp_conn_t *h = cq_calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    cq__mq_link_init(&h->l, s, &cq__mqhttp_fe, ops, ud);
    h->keep_alive = true;
    cq_sbuf_init(&h->in);
    s->st.conns++;
    return h;
}

cq_sendq_t *cq_mqhttp_conn_sendq(cq_mqhttp_conn_t *h)
{
    return &h->l.sendq;
}

void cq_mqhttp_conn_close(cq_mqhttp_conn_t *h)
{
    if (!h || h->l.dead)
        return;
    cq__mq_link_dead(&h->l);
    cq_sbuf_done(&h->in);
    cq__mq_link_put(&h->l);
}

/* After a refusal answered from the head: the bytes of h->in to drop. A short body is skipped
 * (what is buffered now, the rest as it arrives); a longer one is never read, the answer closed
 * the connection. */
static size_t skip_body(cq_mqhttp_conn_t *h, size_t head, uint64_t cl)
{
    if (cl > CQ_MQHTTP_DISCARD_MAX)
        return h->in.len;
    size_t have = h->in.len - head;
    size_t take = have < cl ? have : (size_t)cl;
    h->discard = cl - take;
    return head + take;
}

/* Handles the request at the head of h->in: its head is checked as soon as it is complete (the
 * gate, once per request), then the request runs when its body is in. Returns the bytes it used
 * (0: need more). A request whose framing is bad is answered with a close. */
static size_t one_request(cq_mqhttp_conn_t *h)
{
    cq_mqhttp_req_t rq;
    size_t max_body = cq_mqhttp_max_body(h->l.s);
    ssize_t r = cq_mqhttp_parse((const char *)h->in.data, h->in.len, CQ_MQHTTP_HEAD_MAX, &rq);
    if (r == 0)
        return 0;
    h->l.s->st.frames++;
    if (r < 0 || rq.chunked || rq.content_length > max_body) {
        h->keep_alive = false;
        h->l.s->st.bad_frames++;
        if (r == CQ_EBADLEN)
            FAIL(h, CQ_EBADLEN, "request head over %u bytes", CQ_MQHTTP_HEAD_MAX);
        else if (r < 0 || rq.chunked)
            FAIL(h, CQ_EHEADER, "%s",
                 r < 0 ? "malformed HTTP request head" : "Transfer-Encoding is not supported");
        else
            FAIL(h, CQ_EBADLEN, "body of %llu bytes is over the limit of %zu",
                 (unsigned long long)rq.content_length, max_body);
        return h->in.len;
    }
    hreq_t q = {.h = h,
                .rq = &rq,
                .body = (const char *)h->in.data + r,
                .body_len = (size_t)rq.content_length};
    bool known = split_path(&q);
    if (!h->gated) {
        /* a refusal closes unless its body can be skipped */
        h->keep_alive = rq.keep_alive && rq.content_length <= CQ_MQHTTP_DISCARD_MAX;
        if (!gate(&q, known))
            return skip_body(h, (size_t)r, rq.content_length);
        h->gated = true;
    }
    if (h->in.len - (size_t)r < rq.content_length)
        return 0;
    h->gated = false;
    h->keep_alive = rq.keep_alive;
    q.module_id = h->l.module_id;
    dispatch(&q, known);
    return (size_t)r + (size_t)rq.content_length;
}

static void process(cq_mqhttp_conn_t *h)
{
    while (!h->busy && !h->l.closing && !h->l.dead && h->in.len) {
        size_t used = one_request(h);
        if (!used)
            return;
        if (!h->l.dead)
            cq_sbuf_consume(&h->in, used);
    }
}

int cq_mqhttp_conn_input(cq_mqhttp_conn_t *h, const uint8_t *p, size_t n)
{
    if (h->l.closing || h->l.dead)
        return CQ_ECLOSED;
    size_t skip = h->discard < n ? (size_t)h->discard : n; /* a refused request's body */
    h->discard -= skip;
    p += skip;
    n -= skip;
    if (h->in.len + n > 2 * CQ_MQHTTP_HEAD_MAX + cq_mqhttp_max_body(h->l.s)) {
        h_close(h); /* pipelining beyond what one request may hold */
        return CQ_ECLOSED;
    }
    if (cq_sbuf_append(&h->in, p, n) < 0) {
        h_close(h);
        return -ENOMEM;
    }
    process(h);
    return h->l.closing ? CQ_ECLOSED : 0;
}
