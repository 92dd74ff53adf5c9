/* state.c - the managed state document (common.md contract 2): validation, the changes, and
 * the publish_config it becomes. Modules are validated by the MQ port's own permission loader
 * (cq_mqperm_load) and bindings by the bridge's parser (cq_bindings_parse), so the manager
 * accepts exactly what the servers will. */
#include "engine.h"

#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_err.h"
#include "cq_mqperm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUPS_MAX 64 /* groups of one module */

/* ---- validation ------------------------------------------------------------------------ */

/* True when s is the canonical decimal text of a u32 ("7", not "07" or "+7"). */
static bool u32_key(const char *s, uint32_t *out)
{
    size_t len = strlen(s);
    if (len == 0 || len > 10 || (len > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return false;
    if (out)
        *out = (uint32_t)v;
    return true;
}

static bool is_u32(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 &&
           json_integer_value(v) <= (json_int_t)UINT32_MAX;
}

static int check_groups(const char *id, json_t *g, char *err, size_t errlen)
{
    if (!json_is_array(g) || json_array_size(g) > GROUPS_MAX)
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "modules.%s.groups: must be an array of at most %d group ids", id,
                          GROUPS_MAX);
    size_t i;
    json_t *v;
    json_array_foreach(g, i, v)
    {
        if (!is_u32(v))
            return cq_err_fmt(err, errlen, CQ_EFIELD,
                              "modules.%s.groups[%zu]: must be an integer in [0, 4294967295]", id,
                              i);
    }
    return 0;
}

/* One module: groups checked here, the rest by the permission loader. */
static int check_module(const char *id, json_t *mod, char *err, size_t errlen)
{
    if (!u32_key(id, NULL))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "modules.%s: module ids are decimal u32", id);
    if (!json_is_object(mod))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "modules.%s: must be an object", id);
    json_t *g = json_object_get(mod, "groups");
    int rc = g ? check_groups(id, g, err, errlen) : 0;
    if (rc < 0)
        return rc;
    json_t *copy = json_copy(mod), *wrap = json_object();
    char *text = NULL;
    if (copy && wrap) {
        json_object_del(copy, "groups");
        if (json_object_set(wrap, id, copy) == 0)
            text = json_dumps(wrap, JSON_COMPACT);
    }
    json_decref(copy);
    json_decref(wrap);
    if (!text)
        return -ENOMEM;
    cq_mqperm_t *perm = NULL;
    char why[256] = "";
    rc = cq_mqperm_load(text, strlen(text), &perm, why, sizeof(why));
    cq_mqperm_free(perm);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0)
        return cq_err_fmt(err, errlen, CQ_EFIELD, "modules.%s: %s", id, why);
    return 0;
}

static int check_modules(json_t *mods, char *err, size_t errlen)
{
    if (!json_is_object(mods))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "modules: must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(mods, k, v)
    {
        int rc = check_module(k, v, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int check_topic(const char *name, json_t *t, char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(name, strlen(name)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topics.%s: must be a topic name matching [A-Za-z0-9_]{1,64}", name);
    if (!json_is_object(t))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "topics.%s: must be an object", name);
    json_t *o = json_object_get(t, "online"), *r = json_object_get(t, "retention");
    if (!json_is_boolean(o))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "topics.%s.online: must be true or false", name);
    if (r &&
        (!json_is_integer(r) || json_integer_value(r) < 0 || json_integer_value(r) > CQ_MQ_MAX_U53))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topics.%s.retention: must be an integer in [0, 9007199254740991]", name);
    return 0; /* no retention: the manager never set one, and each server keeps its own */
}

static int check_topics(json_t *topics, char *err, size_t errlen)
{
    if (!json_is_object(topics))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "topics: must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(topics, k, v)
    {
        int rc = check_topic(k, v, err, errlen);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int check_offline(json_t *off, char *err, size_t errlen)
{
    if (!json_is_array(off) || json_array_size(off) > MGR_SERVERS_MAX)
        return cq_err_fmt(err, errlen, CQ_EFIELD, "offline: must be an array of at most %d appids",
                          MGR_SERVERS_MAX);
    size_t i;
    json_t *v;
    json_array_foreach(off, i, v)
    {
        if (!is_u32(v))
            return cq_err_fmt(err, errlen, CQ_EFIELD,
                              "offline[%zu]: must be an integer in [0, 4294967295]", i);
    }
    return 0;
}

static int check_groups_doc(json_t *groups, char *err, size_t errlen)
{
    if (!json_is_object(groups))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "groups: must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(groups, k, v)
    {
        if (!u32_key(k, NULL))
            return cq_err_fmt(err, errlen, CQ_EFIELD, "groups.%s: group ids are decimal u32", k);
        json_t *n = json_is_object(v) ? json_object_get(v, "name") : NULL;
        if (!json_is_object(v) || (n && !json_is_string(n)))
            return cq_err_fmt(err, errlen, CQ_EFIELD,
                              "groups.%s: must be an object {\"name\": string}", k);
    }
    return 0;
}

int cq__mgr_bindings_check(const char *json, size_t len, char *err, size_t errlen)
{
    cq_bindings_t bs = {0};
    int rc = cq_bindings_parse(json, len, &bs, err, errlen);
    cq_bindings_free(&bs);
    return rc == 0 || rc == -ENOMEM ? rc : CQ_EFIELD;
}

/* A stored "bindings" (any JSON value) checked as a document. */
static int check_bindings(const json_t *b, char *err, size_t errlen)
{
    char *text = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return -ENOMEM;
    int rc = cq__mgr_bindings_check(text, strlen(text), err, errlen);
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    return rc;
}

/* doc[key], created from mk() when missing. */
static json_t *section(json_t *doc, const char *key, json_t *(*mk)(void))
{
    json_t *v = json_object_get(doc, key);
    if (!v && json_object_set_new(doc, key, mk()) == 0)
        v = json_object_get(doc, key);
    return v;
}

int cq__mgr_state_check(json_t *doc, char *err, size_t errlen)
{
    if (!json_is_object(doc))
        return cq_err_fmt(err, errlen, CQ_EJSON, "the state must be a JSON object");
    json_t *v = json_object_get(doc, "version");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > CQ_MQ_MAX_U53)
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "version: must be an integer in [0, 9007199254740991]");
    json_t *mods = section(doc, "modules", json_object);
    json_t *topics = section(doc, "topics", json_object);
    json_t *off = section(doc, "offline", json_array);
    json_t *groups = section(doc, "groups", json_object);
    if (!mods || !topics || !off || !groups)
        return -ENOMEM;
    int rc = check_modules(mods, err, errlen);
    if (rc == 0)
        rc = check_topics(topics, err, errlen);
    if (rc == 0)
        rc = check_offline(off, err, errlen);
    if (rc == 0)
        rc = check_groups_doc(groups, err, errlen);
    json_t *b = json_object_get(doc, "bindings"); /* absent: never saved, not managed */
    if (rc == 0 && b)
        rc = check_bindings(b, err, errlen);
    return rc;
}

json_t *cq__mgr_state_empty(void)
{
    json_t *doc = json_pack("{s:i, s:{}, s:{}, s:[], s:{}}", "version", 0, "modules", "topics",
                            "offline", "groups");
    return doc;
}

/* ---- reading ----------------------------------------------------------------------------- */

int64_t cq__mgr_state_version(const json_t *doc)
{
    return json_integer_value(json_object_get(doc, "version"));
}

bool cq__mgr_state_offline(const json_t *doc, uint32_t appid)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(doc, "offline"), i, v)
    {
        if (json_integer_value(v) == (json_int_t)appid)
            return true;
    }
    return false;
}

json_t *cq__mgr_state_module(const json_t *doc, uint32_t id)
{
    char key[16];
    snprintf(key, sizeof(key), "%" PRIu32, id);
    return json_object_get(json_object_get(doc, "modules"), key);
}

/* Module ids in numeric order, so that the published document does not depend on history. */
static int cmp_ids(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static json_t *modules_for_servers(const json_t *doc)
{
    json_t *mods = json_object_get(doc, "modules");
    size_t n = json_object_size(mods), k = 0;
    uint32_t *ids = cq_malloc((n ? n : 1) * sizeof(*ids));
    json_t *out = json_object();
    if (!ids || !out)
        goto fail;
    const char *key;
    json_t *v;
    json_object_foreach(mods, key, v)
    {
        u32_key(key, &ids[k++]);
    }
    qsort(ids, k, sizeof(*ids), cmp_ids);
    for (size_t i = 0; i < k; i++) {
        char idk[16];
        snprintf(idk, sizeof(idk), "%" PRIu32, ids[i]);
        json_t *copy = json_copy(json_object_get(mods, idk));
        if (!copy)
            goto fail;
        json_object_del(copy, "groups");
        if (json_object_set_new(out, idk, copy) < 0)
            goto fail;
    }
    cq_free(ids);
    return out;
fail:
    cq_free(ids);
    json_decref(out);
    return NULL;
}

static int config_topics(const json_t *doc, cq_mqmgr_config_t *cfg)
{
    int rc = 0;
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(doc, "topics"), name, t)
    {
        if (rc < 0)
            break;
        json_t *r = json_object_get(t, "retention");
        rc = cq_mqmgr_config_add_topic(cfg, name, json_is_true(json_object_get(t, "online")),
                                       r ? json_integer_value(r) : CQ_MQMGR_RETENTION_UNSET);
    }
    return rc;
}

/* Sets what set() takes from the compact text of v (borrowed). 0 or -ENOMEM. */
static int config_object(const json_t *v, cq_mqmgr_config_t *cfg,
                         int (*set)(cq_mqmgr_config_t *, const char *, size_t))
{
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text)
        return -ENOMEM;
    int rc = set(cfg, text, strlen(text));
    json_free_t jfree;
    json_get_alloc_funcs(NULL, &jfree);
    jfree(text);
    return rc;
}

static int config_modules(const json_t *doc, cq_mqmgr_config_t *cfg)
{
    if (json_object_size(json_object_get(doc, "modules")) == 0)
        return 0; /* no module yet: permissions not managed */
    json_t *mods = modules_for_servers(doc);
    int rc = mods ? config_object(mods, cfg, cq_mqmgr_config_set_modules) : -ENOMEM;
    json_decref(mods);
    return rc;
}

int cq__mgr_state_config(const json_t *doc, cq_mqmgr_config_t *cfg)
{
    cfg->version = cq__mgr_state_version(doc);
    int rc = config_modules(doc, cfg);
    if (rc == 0)
        rc = config_topics(doc, cfg);
    /* never saved: the servers keep their --bridge-file; saved (an empty list too): in force */
    const json_t *b = json_object_get(doc, "bindings");
    if (rc == 0 && b)
        rc = config_object(b, cfg, cq_mqmgr_config_set_bindings);
    return rc;
}

/* ---- changes ----------------------------------------------------------------------------- */

static const char *const module_keys[] = {"token", "produce", "consume", "admin", "groups"};

static int module_put(json_t *doc, const mgr_op_t *op, char *err, size_t errlen)
{
    char id[16];
    snprintf(id, sizeof(id), "%" PRIu32, op->id);
    if (!json_is_object(op->module))
        return cq_err_fmt(err, errlen, CQ_EFIELD, "the body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(op->module, k, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(module_keys) / sizeof(module_keys[0]); i++)
            known |= strcmp(k, module_keys[i]) == 0;
        if (!known)
            return cq_err_fmt(err, errlen, CQ_EFIELD, "%s: unknown key", k);
    }
    json_t *mods = json_object_get(doc, "modules");
    json_t *cur = json_object_get(mods, id);
    json_t *mod = json_deep_copy(op->module);
    if (!mod)
        return -ENOMEM;
    if (!json_object_get(mod, "token")) {
        json_t *tok = json_object_get(cur, "token");
        if (!tok) {
            json_decref(mod);
            return cq_err_fmt(err, errlen, CQ_EFIELD, "token: required for a new module");
        }
        if (json_object_set(mod, "token", tok) < 0) {
            json_decref(mod);
            return -ENOMEM;
        }
    }
    int rc = check_module(id, mod, err, errlen);
    if (rc == 0 && json_object_set(mods, id, mod) < 0)
        rc = -ENOMEM;
    json_decref(mod);
    return rc;
}

static int module_delete(json_t *doc, uint32_t id, char *err, size_t errlen)
{
    char key[16];
    snprintf(key, sizeof(key), "%" PRIu32, id);
    json_t *mods = json_object_get(doc, "modules");
    if (!json_object_get(mods, key))
        return cq_err_fmt(err, errlen, -ENOENT, "module %s: no such module", key);
    /* Why: with no module left the servers would fall back to their own permissions (their
     * file, or every module from loopback), which is not what deleting a module asks for. */
    if (json_object_size(mods) == 1)
        return cq_err_fmt(err, errlen, CQ_ECONFLICT,
                          "module %s: the last module cannot be deleted (the servers would go back "
                          "to their own permissions); add another module first",
                          key);
    json_object_del(mods, key);
    return 0;
}

static int topic_set(json_t *doc, const char *name, bool online, char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(name, strlen(name)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    json_t *topics = json_object_get(doc, "topics");
    json_t *t = json_object_get(topics, name);
    if (!t) { /* an online flag only: the servers keep their retention (issue 25) */
        t = json_pack("{s:b}", "online", online);
        return t && json_object_set_new(topics, name, t) == 0 ? 0 : -ENOMEM;
    }
    return json_object_set_new(t, "online", json_boolean(online)) == 0 ? 0 : -ENOMEM;
}

/* A topic new to the state takes online as its flag: the caller passes what the servers
 * report, so that setting a retention never brings a topic online or takes it offline. */
static int topic_retention(json_t *doc, const mgr_op_t *op, char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(op->topic, strlen(op->topic)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    json_t *topics = json_object_get(doc, "topics");
    json_t *t = json_object_get(topics, op->topic);
    if (!t) {
        t = json_pack("{s:b, s:I}", "online", op->flag, "retention", (json_int_t)op->retention);
        return t && json_object_set_new(topics, op->topic, t) == 0 ? 0 : -ENOMEM;
    }
    return json_object_set_new(t, "retention", json_integer(op->retention)) == 0 ? 0 : -ENOMEM;
}

/* A topic the operator creates: every shard's master makes it (mgrlink.c apply_topics), online,
 * with the retention asked for or, without one, each server's own. */
static int topic_create(json_t *doc, const mgr_op_t *op, char *err, size_t errlen)
{
    if (!cq_mq_topic_valid(op->topic, strlen(op->topic)))
        return cq_err_fmt(err, errlen, CQ_EFIELD,
                          "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    json_t *topics = json_object_get(doc, "topics");
    if (json_object_get(topics, op->topic))
        return cq_err_fmt(err, errlen, CQ_ECONFLICT,
                          "topic %s: exists already (set its retention or flag instead)",
                          op->topic);
    json_t *t = op->retention == CQ_MQMGR_RETENTION_UNSET
                    ? json_pack("{s:b}", "online", 1)
                    : json_pack("{s:b, s:I}", "online", 1, "retention", (json_int_t)op->retention);
    return t && json_object_set_new(topics, op->topic, t) == 0 ? 0 : -ENOMEM;
}

static int server_set(json_t *doc, uint32_t appid, bool offline)
{
    json_t *off = json_object_get(doc, "offline");
    size_t i;
    json_t *v;
    json_array_foreach(off, i, v)
    {
        if (json_integer_value(v) == (json_int_t)appid) {
            if (!offline)
                json_array_remove(off, i);
            return 0;
        }
    }
    if (!offline)
        return 0;
    return json_array_append_new(off, json_integer(appid)) == 0 ? 0 : -ENOMEM;
}

int cq__mgr_state_apply(json_t *doc, const mgr_op_t *op, char *err, size_t errlen)
{
    switch (op->kind) {
    case MGR_OP_MODULE_PUT:
        return module_put(doc, op, err, errlen);
    case MGR_OP_MODULE_DELETE:
        return module_delete(doc, op->id, err, errlen);
    case MGR_OP_TOPIC:
        return topic_set(doc, op->topic, op->flag, err, errlen);
    case MGR_OP_TOPIC_RETENTION:
        return topic_retention(doc, op, err, errlen);
    case MGR_OP_TOPIC_CREATE:
        return topic_create(doc, op, err, errlen);
    case MGR_OP_BINDINGS: /* checked when the change was asked for: the last one wins */
        return json_object_set_new(doc, "bindings", json_deep_copy(op->bindings)) == 0 ? 0
                                                                                       : -ENOMEM;
    default:
        return server_set(doc, op->id, op->flag);
    }
}

void cq__mgr_op_done(mgr_op_t *op)
{
    json_decref(op->module);
    op->module = NULL;
    json_decref(op->bindings);
    op->bindings = NULL;
}
