/* bindings.c - the bindings document (cq_bindings_parse) and its exact errors.
 *
 * Every refusal names where it is: "bindings: ..." for the document, "binding <i>: ..." for
 * the i-th binding (0-based) and its field. doc/bridge.md lists the messages; the unit tests
 * check each one byte for byte. */
#include "bridge_int.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- the document ------------------------------------------------------------------------ */

/* jansson 2.14 reports some allocation failures as syntax errors or with no text. A syntax
 * error is deterministic, so a failed parse is retried once: a retry that succeeds means the
 * first failure was memory (src/mq does the same). */
static int load(const char *json, size_t len, json_t **ret, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *v = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        v = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v && (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0'))
        return cq_err_fmt(err, errlen, -ENOMEM, "bindings: out of memory");
    if (!v)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "bindings: invalid JSON at line %d, column %d: %s", jerr.line,
                          jerr.column, jerr.text);
    *ret = v;
    return 0;
}

/* The "bindings" array of the document root (borrowed from it). */
static int top_array(json_t *root, json_t **ret, char *err, size_t errlen)
{
    if (!json_is_object(root))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "bindings: the document must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) if (strcmp(k, "bindings") != 0) return cq_err_fmt(
        err, errlen, CQ_ECONFIG, "bindings: unknown key \"%.64s\"", k);
    json_t *arr = json_object_get(root, "bindings");
    if (!json_is_array(arr))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "bindings: \"bindings\" must be an array");
    if (json_array_size(arr) > CQ_BRIDGE_BINDINGS_MAX)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "bindings: more than %d bindings",
                          CQ_BRIDGE_BINDINGS_MAX);
    *ret = arr;
    return 0;
}

/* ---- one binding ------------------------------------------------------------------------- */

typedef struct pctx {
    size_t i; /* the binding's index */
    char *err;
    size_t errlen;
} pctx_t;

__attribute__((format(printf, 3, 4))) static int bad(const pctx_t *c, int code, const char *fmt,
                                                     ...)
{
    if (c->err && c->errlen) {
        char what[192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errlen, "binding %zu: %s", c->i, what);
    }
    return code;
}

static int check_keys(const pctx_t *c, json_t *o)
{
    static const char *const known[] = {"topic", "broadcast", "route", "msg_type"};
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        size_t j = 0;
        while (j < sizeof(known) / sizeof(known[0]) && strcmp(k, known[j]) != 0)
            j++;
        if (j == sizeof(known) / sizeof(known[0]))
            return bad(c, CQ_ECONFIG, "unknown key \"%.64s\"", k);
    }
    return 0;
}

/* A copy of v's string (cq_malloc'd) when it is a string of 1..max bytes and ok says so; *ret
 * NULL with 0 when it is not (the caller reports), -ENOMEM. No string holds a NUL: jansson
 * refuses \u0000 (no JSON_ALLOW_NUL). */
static int dup_str(json_t *v, size_t max, bool (*ok)(const char *, size_t), char **ret)
{
    *ret = NULL;
    if (!json_is_string(v))
        return 0;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > max || (ok && !ok(s, n)))
        return 0;
    *ret = cq_strndup(s, n);
    return *ret ? 0 : -ENOMEM;
}

static bool channel_ok(const char *s, size_t n)
{
    return (n == 6 && memcmp(s, "global", 6) == 0) || (n == 5 && memcmp(s, "topic", 5) == 0);
}

static int parse_target(const pctx_t *c, json_t *o, cq_binding_t *b)
{
    json_t *bc = json_object_get(o, "broadcast"), *rt = json_object_get(o, "route");
    if (!bc == !rt)
        return bad(c, CQ_ECONFIG, "exactly one of \"broadcast\" and \"route\" is required");
    b->kind = bc ? CQ_BIND_BROADCAST : CQ_BIND_ROUTE;
    int rc = bc ? dup_str(bc, 6, channel_ok, &b->channel)
                : dup_str(rt, CQ_BRIDGE_FIELD_MAX, NULL, &b->key);
    if (rc < 0)
        return rc;
    if (bc && !b->channel)
        return bad(c, CQ_ECONFIG, "\"broadcast\" must be \"global\" or \"topic\"");
    if (rt && !b->key)
        return bad(c, CQ_ECONFIG, "\"route\" must be a field name (a string of 1 to %d bytes)",
                   CQ_BRIDGE_FIELD_MAX);
    return 0;
}

static int parse_msg_type(const pctx_t *c, json_t *o, cq_binding_t *b)
{
    json_t *v = json_object_get(o, "msg_type");
    json_int_t t = json_is_integer(v) ? json_integer_value(v) : 0;
    if (t < CQ_BRIDGE_MSG_TYPE_MIN || t > CQ_BRIDGE_MSG_TYPE_MAX)
        return bad(c, CQ_ECONFIG, "\"msg_type\" must be an integer from %d to %d",
                   CQ_BRIDGE_MSG_TYPE_MIN, CQ_BRIDGE_MSG_TYPE_MAX);
    b->msg_type = (uint32_t)t;
    return 0;
}

/* Fills *b from o; on failure *b may hold strings (the caller frees them with the array). */
static int parse_one(const pctx_t *c, json_t *o, cq_binding_t *b)
{
    if (!json_is_object(o))
        return bad(c, CQ_ECONFIG, "must be an object");
    int rc = check_keys(c, o);
    if (rc == 0)
        rc = dup_str(json_object_get(o, "topic"), CQ_MQ_TOPIC_MAX, cq_mq_topic_valid, &b->topic);
    if (rc == 0 && !b->topic)
        rc = bad(c, CQ_ECONFIG, "\"topic\" must be a topic name ([A-Za-z0-9_], 1 to %d characters)",
                 CQ_MQ_TOPIC_MAX);
    if (rc == 0)
        rc = parse_target(c, o, b);
    if (rc == 0)
        rc = parse_msg_type(c, o, b);
    return rc;
}

static bool same_target(const cq_binding_t *a, const cq_binding_t *b)
{
    if (a->kind != b->kind || strcasecmp(a->topic, b->topic) != 0)
        return false;
    return a->kind == CQ_BIND_BROADCAST ? strcmp(a->channel, b->channel) == 0
                                        : strcmp(a->key, b->key) == 0;
}

/* Binding i against the ones before it (topics compare case-insensitively, as the store's). */
static int check_dup(const pctx_t *c, const cq_bindings_t *b)
{
    for (size_t j = 0; j < c->i; j++)
        if (same_target(&b->v[j], &b->v[c->i]))
            return bad(c, CQ_ECONFIG, "same topic and target as binding %zu", j);
    return 0;
}

/* ---- the array --------------------------------------------------------------------------- */

static int parse_all(json_t *arr, cq_bindings_t *b, char *err, size_t errlen)
{
    size_t n = json_array_size(arr);
    b->v = cq_calloc(n ? n : 1, sizeof(*b->v));
    if (!b->v)
        return cq_err_fmt(err, errlen, -ENOMEM, "bindings: out of memory");
    for (size_t i = 0; i < n; i++) {
        pctx_t c = {i, err, errlen};
        b->n = i + 1; /* so that a failure frees this binding's strings too */
        int rc = parse_one(&c, json_array_get(arr, i), &b->v[i]);
        if (rc == 0)
            rc = check_dup(&c, b);
        if (rc == -ENOMEM)
            return cq_err_fmt(err, errlen, -ENOMEM, "bindings: out of memory");
        if (rc < 0)
            return rc;
    }
    return 0;
}

int cq_bindings_parse(const char *json, size_t len, cq_bindings_t *out, char *err, size_t errlen)
{
    if (len > CQ_BRIDGE_FILE_MAX)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "bindings: larger than %u bytes",
                          CQ_BRIDGE_FILE_MAX);
    json_t *root = NULL, *arr = NULL;
    cq_bindings_t b = {NULL, 0};
    int rc = load(json, len, &root, err, errlen);
    if (rc == 0)
        rc = top_array(root, &arr, err, errlen);
    if (rc == 0)
        rc = parse_all(arr, &b, err, errlen);
    json_decref(root);
    if (rc < 0) {
        cq_bindings_free(&b);
        return rc;
    }
    *out = b;
    return 0;
}

void cq_bindings_free(cq_bindings_t *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++) {
        cq_free(b->v[i].topic);
        cq_free(b->v[i].channel);
        cq_free(b->v[i].key);
    }
    cq_free(b->v);
    b->v = NULL;
    b->n = 0;
}
