/* cq_settings.c - channel settings per channel type, with channeld's GLOBAL fallback.
 *
 * Settings are looked up when a channel is created and then kept as a pointer in it, so the
 * lookup is never on the per-message path; the loaded set is immutable and shared by every
 * worker. Zero intervals are raised to 1 ms at load time, where channeld would spin or loop,
 * so the scheduler never has to guard against them. */
#include "cq_settings.h"

#include "cq_alloc.h"
#include "cq_json.h"
#include "cq_err.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct entry {
    uint32_t type;
    cq_chan_settings_t cs;
} entry_t;

struct cq_settings {
    entry_t *entries; /* sorted by type; each owns its data_msg_full_name */
    size_t n;
    cq_chan_settings_t builtin; /* GLOBAL when the file has no "1" */
    cq_chan_settings_t missing; /* GLOBAL (from the file or built in) with the ACL None */
};

/* Field context for error messages. */
typedef struct ctx {
    const char *type; /* the key, as written */
    char *err;
    size_t errlen;
} ctx_t;

static const cq_chan_settings_t builtin_global = {
    .tick_interval_ms = 10,
    .fanout_interval_ms = 20,
};

/* cq_json_pick with this entry's context ("channel type \"2\": ACLSettings") in messages. */
static int pick_keys(json_t *obj, const char *const names[], json_t *out[], const char *section,
                     const ctx_t *c)
{
    char where[160];
    snprintf(where, sizeof(where), "channel type \"%s\"%s%s", c->type, *section ? ": " : "",
             section);
    return cq_json_pick(obj, names, out, where, c->err, c->errlen);
}

/* ---- fields ---------------------------------------------------------------------------- */

/* Reads an integer field in [min, max] into *ret; a missing field leaves *ret alone. */
static int get_int(json_t *v, json_int_t min, json_int_t max, const char *field, const ctx_t *c,
                   json_int_t *ret)
{
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": %s must be an integer in %" JSON_INTEGER_FORMAT
                          "..%" JSON_INTEGER_FORMAT,
                          c->type, field, min, max);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": %s: %" JSON_INTEGER_FORMAT
                          " is out of range %" JSON_INTEGER_FORMAT "..%" JSON_INTEGER_FORMAT,
                          c->type, field, x, min, max);
    *ret = x;
    return 0;
}

static int get_bool(json_t *v, const char *field, const ctx_t *c, bool *ret)
{
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": %s must be true or false", c->type, field);
    *ret = json_is_true(v);
    return 0;
}

static int get_level(json_t *v, const char *field, const ctx_t *c, uint8_t *ret)
{
    json_int_t x = 0;
    if (v && json_is_integer(v) &&
        (json_integer_value(v) < CQ_ACL_NONE || json_integer_value(v) > CQ_ACL_ANY))
        return cq_err_fmt(
            c->err, c->errlen, CQ_ECONFIG,
            "channel type \"%s\": ACLSettings.%s: %" JSON_INTEGER_FORMAT
            " is not an ACL level (0 None, 1 OwnerOnly, 2 OwnerAndGlobalOwner, 3 Any)",
            c->type, field, json_integer_value(v));
    char name[32];
    snprintf(name, sizeof(name), "ACLSettings.%s", field);
    int r = get_int(v, CQ_ACL_NONE, CQ_ACL_ANY, name, c, &x);
    if (r == 0)
        *ret = (uint8_t)x;
    return r;
}

static int get_acl(json_t *v, const ctx_t *c, cq_acl_t *ret)
{
    static const char *const keys[] = {"Sub", "Unsub", "Remove", NULL};
    json_t *f[3];
    if (!v)
        return 0;
    if (!json_is_object(v))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": ACLSettings must be an "
                          "object {\"Sub\", \"Unsub\", \"Remove\"}",
                          c->type);
    int r = pick_keys(v, keys, f, "ACLSettings", c);
    if (r == 0)
        r = get_level(f[0], "Sub", c, &ret->sub);
    if (r == 0)
        r = get_level(f[1], "Unsub", c, &ret->unsub);
    if (r == 0)
        r = get_level(f[2], "Remove", c, &ret->remove);
    return r;
}

static int get_name(json_t *v, const ctx_t *c, const char **ret)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": DataMsgFullName must be a "
                          "string",
                          c->type);
    if (json_string_length(v) == 0)
        return 0;
    char *s = cq_strdup(json_string_value(v));
    if (!s)
        return cq_err_fmt(c->err, c->errlen, -ENOMEM, "out of memory");
    *ret = s;
    return 0;
}

/* ---- entries --------------------------------------------------------------------------- */

/* Parses a channel-type key: decimal digits only, at most UINT32_MAX. */
static int parse_type(const char *key, const ctx_t *c, uint32_t *ret)
{
    uint64_t v = 0;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9' || v > UINT32_MAX)
            break;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    size_t n = strspn(key, "0123456789");
    if (n == 0 || key[n] != '\0' || v > UINT32_MAX)
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                          "channel type \"%s\": keys must be channel type numbers (0..4294967295)",
                          key);
    *ret = (uint32_t)v;
    return 0;
}

static int load_fields(json_t *obj, const ctx_t *c, cq_chan_settings_t *cs)
{
    static const char *const keys[] = {"TickIntervalMs",
                                       "DefaultFanOutIntervalMs",
                                       "DefaultFanOutDelayMs",
                                       "RemoveChannelAfterOwnerRemoved",
                                       "SendOwnerLostAndRecovered",
                                       "ACLSettings",
                                       "DataMsgFullName",
                                       NULL};
    json_t *v[7];
    json_int_t tick = 0, fan = 0, delay = 0;
    if (!json_is_object(obj))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG, "channel type \"%s\": must be an object",
                          c->type);
    int r = pick_keys(obj, keys, v, "", c);
    if (r == 0)
        r = get_int(v[0], 0, UINT32_MAX, keys[0], c, &tick);
    if (r == 0)
        r = get_int(v[1], 0, UINT32_MAX, keys[1], c, &fan);
    if (r == 0)
        r = get_int(v[2], INT32_MIN, INT32_MAX, keys[2], c, &delay);
    if (r == 0)
        r = get_bool(v[3], keys[3], c, &cs->remove_after_owner_removed);
    if (r == 0)
        r = get_bool(v[4], keys[4], c, &cs->send_owner_lost_and_recovered);
    if (r == 0)
        r = get_acl(v[5], c, &cs->acl);
    if (r == 0)
        r = get_name(v[6], c, &cs->data_msg_full_name);
    cs->tick_interval_ms = tick < 1 ? 1 : (uint32_t)tick;
    cs->fanout_interval_ms = fan < 1 ? 1 : (uint32_t)fan;
    cs->fanout_delay_ms = (int32_t)delay;
    return r;
}

static int cmp_entry(const void *a, const void *b)
{
    uint32_t x = ((const entry_t *)a)->type, y = ((const entry_t *)b)->type;
    return (x > y) - (x < y);
}

static const entry_t *find(const cq_settings_t *s, uint32_t type)
{
    entry_t key = {.type = type};
    if (s->n == 0)
        return NULL;
    return bsearch(&key, s->entries, s->n, sizeof(*s->entries), cmp_entry);
}

static int load_root(cq_settings_t *s, json_t *root, char *err, size_t errlen)
{
    if (json_object_size(root) > 0) {
        s->entries = cq_calloc(json_object_size(root), sizeof(*s->entries));
        if (!s->entries)
            return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        ctx_t c = {key, err, errlen};
        entry_t *e = &s->entries[s->n];
        int r = parse_type(key, &c, &e->type);
        if (r == 0 && find(s, e->type))
            r = cq_err_fmt(err, errlen, CQ_ECONFIG, "channel type \"%s\": type %u is given twice",
                           key, e->type);
        s->n += r == 0; /* count it now so that free() sees its string on a later failure */
        if (r == 0)
            r = load_fields(val, &c, &e->cs);
        if (r < 0)
            return r;
        qsort(s->entries, s->n, sizeof(*s->entries), cmp_entry);
    }
    return 0;
}

static void finish(cq_settings_t *s)
{
    const entry_t *g = find(s, CQ_SETTINGS_GLOBAL_TYPE);
    s->builtin = builtin_global;
    s->missing = g ? g->cs : builtin_global;
    s->missing.acl = (cq_acl_t){CQ_ACL_NONE, CQ_ACL_NONE, CQ_ACL_NONE};
}

/* ---- public API ----------------------------------------------------------------------- */

#define TOP_LEVEL "a JSON object keyed by channel type"

/* The document's part of a load (cq_json_load does the rest): *ret is set only on success. */
static int load_doc(json_t *root, void *ret, char *err, size_t errlen)
{
    cq_settings_t *s = cq_calloc(1, sizeof(*s));
    int r = s ? load_root(s, root, err, errlen) : cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    if (r < 0) {
        cq_settings_free(s);
        return r;
    }
    finish(s);
    *(cq_settings_t **)ret = s;
    return 0;
}

int cq_settings_load_json(const char *json, size_t len, cq_settings_t **ret, char *err,
                          size_t errlen)
{
    return cq_json_load(json, len, TOP_LEVEL, load_doc, ret, err, errlen);
}

int cq_settings_load_file(const char *path, cq_settings_t **ret, char *err, size_t errlen)
{
    return cq_json_load_file(path, TOP_LEVEL, load_doc, ret, err, errlen);
}

cq_settings_t *cq_settings_new_default(void)
{
    cq_settings_t *s = cq_calloc(1, sizeof(*s));
    if (s)
        finish(s);
    return s;
}

cq_settings_t *cq_settings_free(cq_settings_t *s)
{
    if (!s)
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        cq_free((char *)s->entries[i].cs.data_msg_full_name);
    cq_free(s->entries);
    cq_free(s);
    return NULL;
}

const cq_chan_settings_t *cq_settings_get(const cq_settings_t *s, uint32_t channel_type)
{
    const entry_t *e = find(s, channel_type);
    if (e)
        return &e->cs;
    if (channel_type == CQ_SETTINGS_GLOBAL_TYPE)
        return &s->builtin;
    return &s->missing;
}
