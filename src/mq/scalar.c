/* scalar.c - what both JSON decoders (decode.c: the seed protocol, mgr_decode.c: the management
 * port) read the same way: the body as one JSON object, and the scalars in it (integers within
 * bounds, booleans, strings, topic names), each failure named after its field:
 *
 *   <type name>: field "<field>": <what is wrong>
 *
 * The decoders keep only what is particular to their messages. See mq_int.h. */
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cq__mq_field_err(const mq_fctx_t *c, int code, const char *field, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        char what[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errlen, "%s: field \"%s\": %s", c->tname, field, what);
    }
    return code;
}

/* ---- the body ----------------------------------------------------------------------------- */

int cq__mq_load_object(const mq_fctx_t *c, const cq_mq_frame_t *f, uint32_t max_depth, json_t **ret)
{
    if (!cq__mq_depth_ok(f->body, f->body_len, max_depth))
        return cq_err_fmt(c->err, c->errlen, CQ_EJSON, "%s: JSON nested deeper than %u", c->tname,
                          max_depth);
    json_error_t jerr;
    json_t *root = cq__mq_load_json((const char *)f->body, f->body_len, &jerr);
    if (!root && cq__mq_jansson_oom(&jerr))
        return cq_err_fmt(c->err, c->errlen, -ENOMEM, "%s: out of memory", c->tname);
    if (!root)
        return cq_err_fmt(c->err, c->errlen, CQ_EJSON, "%s: invalid JSON at line %d column %d: %s",
                          c->tname, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return cq_err_fmt(c->err, c->errlen, CQ_EJSON, "%s: body must be a JSON object", c->tname);
    }
    *ret = root;
    return 0;
}

json_t *cq__mq_required(const mq_fctx_t *c, json_t *obj, const char *key, const char *name, int *rc)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        *rc = cq__mq_field_err(c, CQ_EFIELD, name, "missing");
    return v;
}

int cq__mq_need_object(const mq_fctx_t *c, const char *name, json_t *v)
{
    return json_is_object(v) ? 0 : cq__mq_field_err(c, CQ_EFIELD, name, "must be an object");
}

/* ---- scalars ------------------------------------------------------------------------------ */

int cq__mq_get_int(const mq_fctx_t *c, const char *name, json_t *v, int64_t min, int64_t max,
                   int64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return cq__mq_field_err(c, CQ_EFIELD, name, "must be an integer in [%lld, %lld]",
                                (long long)min, (long long)max);
    *out = json_integer_value(v);
    return 0;
}

int cq__mq_get_u32(const mq_fctx_t *c, const char *name, json_t *v, uint32_t *out)
{
    int64_t x = 0;
    int rc = cq__mq_get_int(c, name, v, 0, UINT32_MAX, &x);
    if (rc == 0)
        *out = (uint32_t)x;
    return rc;
}

int cq__mq_get_bool(const mq_fctx_t *c, const char *name, json_t *v, bool *out)
{
    if (!json_is_boolean(v))
        return cq__mq_field_err(c, CQ_EFIELD, name, "must be true or false");
    *out = json_is_true(v);
    return 0;
}

/* The string at v when it is one of at most max bytes (and, with text, valid UTF-8 without
 * NUL); else the field error, and NULL. */
static const char *str_ok(const mq_fctx_t *c, const char *name, json_t *v, size_t max, bool text,
                          size_t *len, int *rc)
{
    *len = json_is_string(v) ? json_string_length(v) : 0;
    if (!json_is_string(v) || *len > max ||
        (text && !cq__mq_utf8_valid(json_string_value(v), *len))) {
        *rc = cq__mq_field_err(c, CQ_EFIELD, name, "must be a string of at most %zu bytes", max);
        return NULL;
    }
    return json_string_value(v);
}

int cq__mq_get_strdup(const mq_fctx_t *c, const char *name, json_t *v, size_t max, bool text,
                      char **out)
{
    size_t len;
    int rc = 0;
    const char *s = str_ok(c, name, v, max, text, &len, &rc);
    if (!s)
        return rc;
    *out = cq_strndup(s, len);
    return *out ? 0 : -ENOMEM;
}

int cq__mq_get_strbuf(const mq_fctx_t *c, const char *name, json_t *v, size_t max, char *buf)
{
    size_t len;
    int rc = 0;
    const char *s = str_ok(c, name, v, max, true, &len, &rc);
    if (!s)
        return rc;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 0;
}

int cq__mq_get_topic(const mq_fctx_t *c, const char *name, json_t *v, char buf[CQ_MQ_TOPIC_MAX + 1])
{
    if (!json_is_string(v) || !cq_mq_topic_valid(json_string_value(v), json_string_length(v)))
        return cq__mq_field_err(c, CQ_EBADTOPIC, name,
                                "must be a string matching [A-Za-z0-9_]{1,64}");
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}
