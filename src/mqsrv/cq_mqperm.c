/* cq_mqperm.c - see cq_mqperm.h. */
#include "cq_mqperm.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_err.h"
#include "cq_mq.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct perm_topics {
    char (*names)[CQ_MQ_TOPIC_MAX + 1];
    size_t n;
    bool all;
} perm_topics_t;

typedef struct perm_module {
    uint32_t id;
    char *token;
    perm_topics_t produce, consume;
    bool admin;
} perm_module_t;

struct cq_mqperm {
    perm_module_t *mods;
    size_t n;
};

static const perm_module_t *find_module(const cq_mqperm_t *p, uint32_t id)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->mods[i].id == id)
            return &p->mods[i];
    return NULL;
}

static bool topics_match(const perm_topics_t *t, const char *topic)
{
    if (t->all)
        return true;
    for (size_t i = 0; topic && i < t->n; i++)
        if (strcasecmp(t->names[i], topic) == 0)
            return true;
    return false;
}

static int load_topics(json_t *arr, perm_topics_t *t, const char *mod, const char *key, char *err,
                       size_t errlen)
{
    if (!json_is_array(arr))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: \"%s\" must be an array", mod, key);
    size_t n = json_array_size(arr);
    t->names = n ? cq_calloc(n, sizeof(*t->names)) : NULL;
    if (n && !t->names)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        const char *s = json_string_value(v);
        if (s && strcmp(s, "*") == 0) {
            t->all = true;
            continue;
        }
        if (!s || !cq_mq_topic_valid(s, json_string_length(v)))
            return cq_err_fmt(err, errlen, CQ_EFIELD,
                              "module %s: \"%s\"[%zu]: must be \"*\" or a topic name", mod, key, i);
        memcpy(t->names[t->n++], s, json_string_length(v) + 1);
    }
    return 0;
}

static int load_module(const char *key, json_t *obj, perm_module_t *m, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long id = strtoul(key, &end, 10);
    if (!*key || *end || errno || id > UINT32_MAX || key[0] == '-')
        return cq_err_fmt(err, errlen, CQ_EFIELD, "\"%s\": module ids are decimal u32", key);
    if (!json_is_object(obj))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: must be an object", key);
    m->id = (uint32_t)id;
    if (!json_object_get(obj, "token")) /* an empty token would let anyone in as this module */
        return cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: \"token\" is missing", key);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        int r = 0;
        if (strcmp(k, "token") == 0) {
            if (!json_is_string(v))
                return cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: token must be a string", key);
            m->token = cq_strdup(json_string_value(v));
            r = m->token ? 0 : -ENOMEM;
        } else if (strcmp(k, "produce") == 0) {
            r = load_topics(v, &m->produce, key, k, err, errlen);
        } else if (strcmp(k, "consume") == 0) {
            r = load_topics(v, &m->consume, key, k, err, errlen);
        } else if (strcmp(k, "admin") == 0 && json_is_boolean(v)) {
            m->admin = json_is_true(v);
        } else {
            return cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: unknown or invalid key \"%s\"",
                              key, k);
        }
        if (r < 0)
            return r;
    }
    return 0;
}

int cq_mqperm_load(const char *json, size_t len, cq_mqperm_t **ret_perm, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return cq_err_fmt(err, errlen, CQ_EJSON, "line %d: %s", je.line,
                          root ? "not a JSON object" : je.text);
    }
    cq_mqperm_t *p = cq_calloc(1, sizeof(*p));
    size_t n = json_object_size(root);
    int r = -ENOMEM;
    if (!p || (n && !(p->mods = cq_calloc(n, sizeof(*p->mods)))))
        goto fail;
    const char *k;
    json_t *v;
    r = 0;
    json_object_foreach(root, k, v)
    {
        if ((r = load_module(k, v, &p->mods[p->n++], err, errlen)) < 0)
            goto fail;
        if (find_module(&(cq_mqperm_t){p->mods, p->n - 1}, p->mods[p->n - 1].id)) {
            r = cq_err_fmt(err, errlen, CQ_EFIELD, "module %s: listed twice", k);
            goto fail;
        }
    }
    json_decref(root);
    *ret_perm = p;
    return 0;
fail:
    json_decref(root);
    cq_mqperm_free(p);
    return r;
}

cq_mqperm_t *cq_mqperm_free(cq_mqperm_t *p)
{
    if (!p)
        return NULL;
    for (size_t i = 0; i < p->n; i++) {
        cq_free(p->mods[i].token);
        cq_free(p->mods[i].produce.names);
        cq_free(p->mods[i].consume.names);
    }
    cq_free(p->mods);
    cq_free(p);
    return NULL;
}

bool cq_mqperm_auth(const cq_mqperm_t *p, uint32_t module_id, const char *token)
{
    if (!p)
        return true;
    const perm_module_t *m = find_module(p, module_id);
    return m && cq_token_eq(m->token, token);
}

bool cq_mqperm_allows(const cq_mqperm_t *p, uint32_t module_id, cq_mqperm_right_t right,
                      const char *topic)
{
    if (!p)
        return true;
    const perm_module_t *m = find_module(p, module_id);
    if (!m)
        return false;
    switch (right) {
    case CQ_MQPERM_PRODUCE:
        return topics_match(&m->produce, topic);
    case CQ_MQPERM_CONSUME:
        return topics_match(&m->consume, topic);
    case CQ_MQPERM_ADMIN:
        return m->admin;
    }
    return false;
}
