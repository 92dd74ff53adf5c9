/* decode.c - frame body -> validated cq_mq_msg_t through jansson, and cq_mq_decode(), which
 * tries the one-pass reader (decode_direct.c) first. Every error and its message comes from
 * this file: the direct reader only gives up. See cq_mq.h and doc/protocol-mq.md section 2. */
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- decode ---------------------------------------------------------------------------- */

bool cq__mq_depth_ok(const uint8_t *p, size_t n, uint32_t max_depth)
{
    uint32_t depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (in_str) {
            if (b == '\\')
                i++;
            else if (b == '"')
                in_str = false;
        } else if (b == '"') {
            in_str = true;
        } else if (b == '[' || b == '{') {
            if (++depth > max_depth)
                return false;
        } else if ((b == ']' || b == '}') && depth) {
            depth--;
        }
    }
    return true;
}

/* A content value: a JSON string (kept as its text) or object (kept as compact JSON). */
static int get_content(const dctx_t *c, const char *name, json_t *v, char **out, size_t *len,
                       bool *is_json)
{
    if (json_is_string(v)) {
        *len = json_string_length(v);
        if (*len > c->lim->max_content)
            goto too_big;
        *out = cq_strndup(json_string_value(v), *len);
        *is_json = false;
        return *out ? 0 : -ENOMEM;
    }
    if (!json_is_object(v))
        return cq__mq_field_err(&c->f, CQ_EFIELD, name, "must be a string or a JSON object");
    *len = json_dumpb(v, NULL, 0, JSON_COMPACT);
    if (*len == 0)
        return -ENOMEM; /* an object dumps to at least "{}" */
    if (*len > c->lim->max_content)
        goto too_big;
    *out = cq_malloc(*len + 1);
    if (!*out)
        return -ENOMEM;
    if (json_dumpb(v, *out, *len, JSON_COMPACT) != *len) {
        *out = (cq_free(*out), NULL);
        return -ENOMEM;
    }
    (*out)[*len] = '\0';
    *is_json = true;
    return 0;
too_big:
    return cq__mq_field_err(&c->f, CQ_ECONTENT, name,
                            "content of %zu bytes exceeds the limit of %u bytes", *len,
                            c->lim->max_content);
}

/* An answer item's idempotence key: producer_id and seq, both or neither (key stays 0, 0). */
static int get_item_key(const dctx_t *c, json_t *it, size_t idx, int64_t key[2])
{
    static const char *const names[2] = {"producer_id", "seq"};
    json_t *v[2] = {json_object_get(it, names[0]), json_object_get(it, names[1])};
    char name[64];
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof(name), "messages[%zu].%s", idx, names[i]);
        if (!v[i] && v[1 - i])
            return cq__mq_field_err(&c->f, CQ_EFIELD, name,
                                    "missing (producer_id and seq go together)");
        int rc = v[i] ? cq__mq_get_int(&c->f, name, v[i], i == 0 ? 1 : 0, U53_MAX_, &key[i]) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* One element of "messages": produce batch {content, time?} or answer {offset_id, message,
 * time?}. */
static int get_item(const dctx_t *c, cq_mq_msg_t *m, json_t *it, size_t idx, bool answer)
{
    char name[64];
    const char *ckey = answer ? "message" : "content";
    snprintf(name, sizeof(name), "messages[%zu]", idx);
    if (!json_is_object(it))
        return cq__mq_field_err(&c->f, CQ_EFIELD, name, "must be an object");
    int64_t offset = 0, time = -1;
    int rc = 0;
    json_t *v;
    if (answer) {
        snprintf(name, sizeof(name), "messages[%zu].offset_id", idx);
        if (!(v = json_object_get(it, "offset_id")))
            return cq__mq_field_err(&c->f, CQ_EFIELD, name, "missing");
        if ((rc = cq__mq_get_int(&c->f, name, v, 0, U53_MAX_, &offset)) < 0)
            return rc;
    }
    snprintf(name, sizeof(name), "messages[%zu].time", idx);
    if ((v = json_object_get(it, "time")) &&
        (rc = cq__mq_get_int(&c->f, name, v, 0, U53_MAX_, &time)) < 0)
        return rc;
    int64_t key[2] = {0, 0};
    if (answer && (rc = get_item_key(c, it, idx, key)) < 0)
        return rc;
    snprintf(name, sizeof(name), "messages[%zu].%s", idx, ckey);
    if (!(v = json_object_get(it, ckey)))
        return cq__mq_field_err(&c->f, CQ_EFIELD, name, "missing");
    char *content;
    size_t len;
    bool is_json;
    if ((rc = get_content(c, name, v, &content, &len, &is_json)) < 0)
        return rc;
    if ((rc = cq__mq_push_item(m, offset, time, content, len, is_json)) == 0) {
        m->items[m->nitems - 1].producer_id = key[0];
        m->items[m->nitems - 1].seq = key[1];
    }
    return rc;
}

static int get_items(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    bool answer = fd->kind == K_MSGS;
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > c->lim->max_batch || (!answer && n == 0))
        return cq__mq_field_err(&c->f, CQ_EFIELD, fd->name, "must be an array of %u to %u messages",
                                answer ? 0u : 1u, c->lim->max_batch);
    for (size_t i = 0; i < n; i++) {
        int rc = get_item(c, m, json_array_get(v, i), i, answer);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int get_offsets(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > c->lim->max_batch)
        return cq__mq_field_err(&c->f, CQ_EFIELD, fd->name,
                                "must be an array of at most %u offsets", c->lim->max_batch);
    for (size_t i = 0; i < n; i++) {
        char name[48];
        int64_t off;
        snprintf(name, sizeof(name), "offsets[%zu]", i);
        int rc = cq__mq_get_int(&c->f, name, json_array_get(v, i), 0, U53_MAX_, &off);
        if (rc < 0 || (rc = cq_mq_msg_add_offset(m, off)) < 0)
            return rc;
    }
    return 0;
}

/* One entry of "topics": {topic, online, retention_days, last_offset}, all required. */
static int get_topic_info(const dctx_t *c, cq_mq_msg_t *m, json_t *it, size_t idx)
{
    char name[48], topic[CQ_MQ_TOPIC_MAX + 1];
    int64_t days = 0, last = 0;
    bool online = false;
    int rc;
    snprintf(name, sizeof(name), "topics[%zu]", idx);
    if ((rc = cq__mq_need_object(&c->f, name, it)) < 0)
        return rc;
    snprintf(name, sizeof(name), "topics[%zu].topic", idx);
    if ((rc = cq__mq_get_topic(&c->f, name, json_object_get(it, "topic"), topic)) < 0)
        return rc;
    snprintf(name, sizeof(name), "topics[%zu].online", idx);
    if ((rc = cq__mq_get_bool(&c->f, name, json_object_get(it, "online"), &online)) < 0)
        return rc;
    snprintf(name, sizeof(name), "topics[%zu].retention_days", idx);
    json_t *dv = cq__mq_required(&c->f, it, "retention_days", name, &rc);
    if (!dv || (rc = cq__mq_get_int(&c->f, name, dv, 0, U32_MAX_, &days)) < 0)
        return rc;
    snprintf(name, sizeof(name), "topics[%zu].last_offset", idx);
    json_t *lv = cq__mq_required(&c->f, it, "last_offset", name, &rc);
    if (!lv || (rc = cq__mq_get_int(&c->f, name, lv, 0, U53_MAX_, &last)) < 0)
        return rc;
    return cq_mq_msg_add_topic_info(m, topic, online, (uint32_t)days, last);
}

static int get_topics(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQ_TOPICS_MAX)
        return cq__mq_field_err(&c->f, CQ_EFIELD, fd->name, "must be an array of at most %d topics",
                                CQ_MQ_TOPICS_MAX);
    for (size_t i = 0; i < n; i++) {
        int rc = get_topic_info(c, m, json_array_get(v, i), i);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int get_scalar(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    char *base = (char *)m + fd->off;
    int64_t x;
    int rc;
    switch (fd->kind) {
    case K_U32:
        if ((rc = cq__mq_get_int(&c->f, fd->name, v, fd->min, fd->max, &x)) < 0)
            return rc;
        *(uint32_t *)(void *)base = (uint32_t)x;
        return 0;
    case K_U53:
        if ((rc = cq__mq_get_int(&c->f, fd->name, v, fd->min, fd->max, &x)) < 0)
            return rc;
        *(int64_t *)(void *)base = x;
        return 0;
    case K_BOOL:
        return cq__mq_get_bool(&c->f, fd->name, v, (bool *)(void *)base);
    case K_STR:
        return cq__mq_get_strdup(&c->f, fd->name, v, (size_t)fd->max, false, (char **)(void *)base);
    default: /* K_TOPIC */
        return cq__mq_get_topic(&c->f, fd->name, v, m->topic);
    }
}

static int get_field(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    int64_t x;
    int rc;
    switch (fd->kind) {
    case K_CONTENT: {
        char *content;
        size_t len;
        bool is_json;
        if ((rc = get_content(c, fd->name, v, &content, &len, &is_json)) < 0)
            return rc;
        return cq__mq_push_item(m, 0, -1, content, len, is_json);
    }
    case K_BATCH:
    case K_MSGS:
        return get_items(c, fd, v, m);
    case K_OFFS:
        return get_offsets(c, fd, v, m);
    case K_TOPICS:
        return get_topics(c, fd, v, m);
    case K_COUNT:
        if ((rc = cq__mq_get_int(&c->f, fd->name, v, 0, fd->max, &x)) < 0)
            return rc;
        if ((size_t)x != m->nitems) /* "messages" (bit 19) was decoded before this (bit 20) */
            return cq__mq_field_err(&c->f, CQ_EFIELD, fd->name,
                                    "must equal the number of messages (%zu)", m->nitems);
        return 0;
    default:
        return get_scalar(c, fd, v, m);
    }
}

int cq__mq_check_message(const dctx_t *c, const cq_mq_msg_t *m)
{
    if (m->type != CQ_MQ_REQ_PRODUCE)
        return 0;
    bool content = m->has & CQ_MQ_F_CONTENT, batch = m->has & CQ_MQ_F_BATCH;
    if (content == batch)
        return cq__mq_field_err(&c->f, CQ_EFIELD, "content",
                                "exactly one of \"content\" and \"messages\" is "
                                "required");
    if (!(m->has & CQ_MQ_F_PRODUCER_ID) != !(m->has & CQ_MQ_F_SEQ))
        return cq__mq_field_err(&c->f, CQ_EFIELD, m->has & CQ_MQ_F_SEQ ? "producer_id" : "seq",
                                "\"producer_id\" and \"seq\" go together");
    return 0;
}

static int decode_object(const dctx_t *c, const type_desc_t *t, json_t *root, cq_mq_msg_t *m)
{
    for (size_t i = 0; i < CQ__MQ_NFIELDS; i++) {
        uint32_t bit = 1u << i;
        if (!((t->req | t->opt) & bit))
            continue;
        json_t *v = json_object_get(root, cq__mq_fields[i].name);
        if (!v) {
            if (t->req & bit)
                return cq__mq_field_err(&c->f, CQ_EFIELD, cq__mq_fields[i].name, "missing");
            continue;
        }
        int rc = get_field(c, &cq__mq_fields[i], v, m);
        if (rc < 0)
            return rc;
        m->has |= bit;
    }
    return cq__mq_check_message(c, m);
}

static cq_mq_limits_t limits_or_default(const cq_mq_limits_t *lim)
{
    cq_mq_limits_t l = lim ? *lim : (cq_mq_limits_t){0, 0, 0, 0};
    if (!l.max_total)
        l.max_total = CQ_MQ_DEFAULT_MAX_TOTAL;
    if (!l.max_content)
        l.max_content = CQ_MQ_DEFAULT_MAX_CONTENT;
    if (!l.max_batch)
        l.max_batch = CQ_MQ_DEFAULT_MAX_BATCH;
    if (!l.max_depth)
        l.max_depth = CQ_MQ_DEFAULT_MAX_DEPTH;
    return l;
}

int cq__mq_decode_jansson(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, cq_mq_msg_t **ret,
                          char *err, size_t errlen)
{
    const type_desc_t *t = cq__mq_type_of(f->type);
    if (!t)
        return cq_err_fmt(err, errlen, CQ_ENOTYPE, "unknown message type %u", f->type);
    cq_mq_limits_t l = limits_or_default(lim);
    dctx_t c = {&l, {t->name, err, errlen}};
    json_t *root = NULL;
    int rc = cq__mq_load_object(&c.f, f, l.max_depth, &root);
    if (rc < 0)
        return rc;
    cq_mq_msg_t *m = cq_mq_msg_new(f->type, f->msg_id);
    rc = m ? decode_object(&c, t, root, m) : -ENOMEM;
    json_decref(root);
    if (rc < 0) {
        cq_mq_msg_free(m);
        if (rc == -ENOMEM)
            cq_err_fmt(err, errlen, rc, "%s: out of memory", t->name);
        return rc;
    }
    *ret = m;
    return 0;
}

int cq_mq_decode(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, cq_mq_msg_t **ret, char *err,
                 size_t errlen)
{
    const type_desc_t *t = cq__mq_type_of(f->type);
    if (!t)
        return cq_err_fmt(err, errlen, CQ_ENOTYPE, "unknown message type %u", f->type);
    cq_mq_limits_t l = limits_or_default(lim);
    dctx_t c = {&l, {t->name, err, errlen}};
    cq_mq_msg_t *m = cq__mq_decode_direct(f, t, &c);
    if (!m)
        return cq__mq_decode_jansson(f, lim, ret, err, errlen);
    *ret = m;
    return 0;
}
