/* cq_mq.c - the durable-topic protocol codec (see cq_mq.h and doc/protocol-mq.md). */
#include "cq_mq.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- frames ---------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

ssize_t cq_mq_parse(const uint8_t *p, size_t n, uint32_t max_total, cq_mq_frame_t *ret)
{
    if (!max_total)
        max_total = CQ_MQ_DEFAULT_MAX_TOTAL;
    if (max_total < CQ_MQ_MIN_TOTAL)
        max_total = CQ_MQ_MIN_TOTAL;
    if (n < 4)
        return 0;
    uint32_t total = be32(p);
    if (total < CQ_MQ_MIN_TOTAL || total > max_total)
        return CQ_EBADLEN;
    if (n >= 6 && be16(p + 4) != CQ_MQ_HDR_LEN)
        return CQ_EHEADER;
    if (n >= 7 && p[6] != CQ_MQ_VERSION)
        return CQ_EHEADER;
    if (n >= 9 && p[8] != CQ_MQ_SER_JSON)
        return CQ_EHEADER;
    if (n >= 12 && p[11] != 0)
        return CQ_EHEADER;
    if (n < total)
        return 0;
    ret->body = p + CQ_MQ_HDR_LEN;
    ret->body_len = total - CQ_MQ_HDR_LEN;
    ret->msg_id = be16(p + 9);
    ret->type = p[7];
    return (ssize_t)total;
}

void cq_mq_header_write(uint8_t out[CQ_MQ_HDR_LEN], uint32_t total_len, uint8_t type,
                        uint16_t msg_id)
{
    out[0] = (uint8_t)(total_len >> 24);
    out[1] = (uint8_t)(total_len >> 16);
    out[2] = (uint8_t)(total_len >> 8);
    out[3] = (uint8_t)total_len;
    out[4] = 0;
    out[5] = CQ_MQ_HDR_LEN;
    out[6] = CQ_MQ_VERSION;
    out[7] = type;
    out[8] = CQ_MQ_SER_JSON;
    out[9] = (uint8_t)(msg_id >> 8);
    out[10] = (uint8_t)msg_id;
    out[11] = 0;
}

/* ---- the schema: fields and message types ---------------------------------------------- */

typedef enum {
    K_U32,
    K_U53,
    K_STR,
    K_TOPIC,
    K_CONTENT,
    K_BATCH,
    K_MSGS,
    K_COUNT,
    K_OFFS,
    K_BOOL,
    K_TOPICS
} kind_t;

typedef struct field_desc {
    const char *name;
    kind_t kind;
    size_t off;       /* of the value in cq_mq_msg_t (scalars and strings) */
    int64_t min, max; /* integers: range; strings: max bytes */
} field_desc_t;

#define U32_MAX_ ((int64_t)UINT32_MAX)
#define U53_MAX_ CQ_MQ_MAX_U53
#define AT(f)    offsetof(cq_mq_msg_t, f)

/* Indexed by bit number of cq_mq_field_t; encode writes fields in this order. */
static const field_desc_t fields[] = {
    {"askid", K_U32, AT(askid), 0, U32_MAX_},
    {"module_id", K_U32, AT(module_id), 0, U32_MAX_},
    {"token", K_STR, AT(token), 0, CQ_MQ_TOKEN_MAX},
    {"client_type", K_U32, AT(client_type), CQ_MQ_PRODUCER, CQ_MQ_CONSUMER},
    {"client_id", K_U53, AT(client_id), 0, U53_MAX_},
    {"topic", K_TOPIC, AT(topic), 0, 0},
    {"err_code", K_U32, AT(err_code), 0, 65535},
    {"err_msg", K_STR, AT(err_msg), 0, CQ_MQ_ERR_MSG_MAX},
    {"weight", K_U32, AT(weight), 0, U32_MAX_},
    {"topic_nums", K_U32, AT(topic_nums), 0, U32_MAX_},
    {"topic_message_total", K_U53, AT(topic_message_total), 0, U53_MAX_},
    {"total", K_U53, AT(total), 0, U53_MAX_},
    {"offset", K_U53, AT(offset), 0, U53_MAX_},
    {"max_count", K_U32, AT(max_count), 1, U32_MAX_},
    {"time", K_U53, AT(time), 0, U53_MAX_},
    {"producer_id", K_U53, AT(producer_id), 1, U53_MAX_},
    {"seq", K_U53, AT(seq), 0, U53_MAX_},
    {"content", K_CONTENT, 0, 0, 0},
    {"messages", K_BATCH, 0, 0, 0},
    {"messages", K_MSGS, 0, 0, 0},
    {"message_count", K_COUNT, 0, 0, U32_MAX_},
    {"offsets", K_OFFS, 0, 0, 0},
    {"committed", K_BOOL, AT(committed), 0, 0},
    {"last_offset", K_U53, AT(last_offset), 0, U53_MAX_},
    {"topics", K_TOPICS, 0, 0, 0},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

typedef struct type_desc {
    const char *name;
    uint32_t req, opt;
} type_desc_t;

#define F(x)          CQ_MQ_F_##x
#define RESP          (F(ASKID) | F(ERR_CODE))
#define COUNTERS_RESP (F(TOPIC) | F(ERR_MSG) | F(TOPIC_MESSAGE_TOTAL) | F(TOPIC_NUMS))

static const type_desc_t types[CQ_MQ_TYPE_MAX + 1] = {
    [CQ_MQ_REQ_CONNECT] = {"connect", F(ASKID) | F(MODULE_ID) | F(TOKEN) | F(CLIENT_TYPE), 0},
    [CQ_MQ_RESP_CONNECT] = {"connect_resp", RESP, F(ERR_MSG) | F(CLIENT_TYPE) | F(CLIENT_ID)},
    [CQ_MQ_REQ_KEEPALIVE] = {"keepalive", F(ASKID), F(CLIENT_ID)},
    [CQ_MQ_RESP_KEEPALIVE] = {"keepalive_resp", RESP, F(ERR_MSG) | F(WEIGHT)},
    [CQ_MQ_REQ_ADD_TOPIC] = {"add_topic", F(ASKID) | F(TOPIC), F(CLIENT_ID)},
    [CQ_MQ_RESP_ADD_TOPIC] = {"add_topic_resp", RESP, COUNTERS_RESP},
    [CQ_MQ_REQ_WATCH] = {"watch", F(ASKID) | F(TOPIC), F(CLIENT_ID)},
    [CQ_MQ_RESP_WATCH] = {"watch_resp", RESP, COUNTERS_RESP},
    [CQ_MQ_REQ_UNWATCH] = {"unwatch", F(ASKID) | F(TOPIC), F(CLIENT_ID)},
    [CQ_MQ_RESP_UNWATCH] = {"unwatch_resp", RESP, F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG)},
    [CQ_MQ_REQ_PRODUCE] = {"produce", F(ASKID) | F(TOPIC),
                           F(CLIENT_ID) | F(TIME) | F(PRODUCER_ID) | F(SEQ) | F(CONTENT) |
                               F(BATCH)},
    [CQ_MQ_RESP_PRODUCE] = {"produce_resp", RESP,
                            F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(TOTAL) | F(OFFSETS)},
    [CQ_MQ_REQ_CONSUME] = {"consume", F(ASKID) | F(TOPIC) | F(OFFSET), F(CLIENT_ID) | F(MAX_COUNT)},
    [CQ_MQ_RESP_CONSUME] = {"consume_resp", RESP,
                            F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(TOTAL) | F(OFFSET) |
                                F(MESSAGES) | F(MESSAGE_COUNT)},
    [CQ_MQ_REQ_COMMIT] = {"commit", F(ASKID) | F(TOPIC) | F(OFFSET), F(CLIENT_ID)},
    [CQ_MQ_RESP_COMMIT] = {"commit_resp", RESP, F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(OFFSET)},
    [CQ_MQ_PUSH] = {"push", F(TOPIC) | F(MESSAGES), F(TOTAL) | F(OFFSET) | F(MESSAGE_COUNT)},
    [CQ_MQ_RESP_ERROR] = {"error", F(ERR_CODE), F(ASKID) | F(ERR_MSG)},
    [CQ_MQ_REQ_OFFSET] = {"offset", F(ASKID) | F(TOPIC), F(CLIENT_ID)},
    [CQ_MQ_RESP_OFFSET] = {"offset_resp", RESP,
                           F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(OFFSET) | F(COMMITTED) |
                               F(LAST_OFFSET)},
    [CQ_MQ_REQ_TOPICS] = {"topics", F(ASKID), F(CLIENT_ID)},
    [CQ_MQ_RESP_TOPICS] = {"topics_resp", RESP, F(ERR_MSG) | F(TOPIC_NUMS) | F(TOPICS)},
};

static const type_desc_t *type_of(int type)
{
    if (type < 1 || type > CQ_MQ_TYPE_MAX || !types[type].name)
        return NULL;
    return &types[type];
}

const char *cq_mq_type_name(int type)
{
    const type_desc_t *t = type_of(type);
    return t ? t->name : NULL;
}

bool cq_mq_is_request(int type)
{
    return (type & 1) && type_of(type) != NULL;
}

bool cq_mq_topic_valid(const char *s, size_t len)
{
    if (len < 1 || len > CQ_MQ_TOPIC_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

static size_t utf8_seq_len(unsigned c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if ((c & 0xF0) == 0xE0)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF) without NUL. */
static bool utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        size_t k = utf8_seq_len(c);
        if (c == 0 || k == 0 || k > len - i)
            return false;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        for (size_t j = 1; j < k; j++) {
            unsigned b = p[i + j];
            if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF))
                return false;
        }
        i += k;
    }
    return true;
}

/* ---- messages: construction ----------------------------------------------------------- */

cq_mq_msg_t *cq_mq_msg_new(uint8_t type, uint16_t msg_id)
{
    cq_mq_msg_t *m = cq_calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->type = type;
    m->msg_id = msg_id;
    return m;
}

cq_mq_msg_t *cq_mq_msg_free(cq_mq_msg_t *m)
{
    if (!m)
        return NULL;
    for (size_t i = 0; i < m->nitems; i++)
        cq_free(m->items[i].content);
    cq_free(m->items);
    cq_free(m->offsets);
    cq_free(m->topic_infos);
    cq_free(m->token);
    cq_free(m->err_msg);
    cq_free(m);
    return NULL;
}

int cq_mq_msg_set_topic(cq_mq_msg_t *m, const char *topic)
{
    size_t len = strlen(topic);
    if (!cq_mq_topic_valid(topic, len))
        return CQ_EBADTOPIC;
    memcpy(m->topic, topic, len + 1);
    m->has |= CQ_MQ_F_TOPIC;
    return 0;
}

static int set_strn(cq_mq_msg_t *m, cq_mq_field_t which, const char *s, size_t len)
{
    size_t max = which == CQ_MQ_F_TOKEN ? CQ_MQ_TOKEN_MAX : CQ_MQ_ERR_MSG_MAX;
    if ((which != CQ_MQ_F_TOKEN && which != CQ_MQ_F_ERR_MSG) || len > max || !utf8_valid(s, len))
        return CQ_EFIELD;
    char *copy = cq_strndup(s, len);
    if (!copy)
        return -ENOMEM;
    char **slot = which == CQ_MQ_F_TOKEN ? &m->token : &m->err_msg;
    cq_free(*slot);
    *slot = copy;
    m->has |= which;
    return 0;
}

int cq_mq_msg_set_str(cq_mq_msg_t *m, cq_mq_field_t which, const char *s)
{
    return set_strn(m, which, s, strlen(s));
}

/* jansson 2.14 reports some allocation failures with no error text, and some (inside the
 * lexer) as syntax errors. A syntax error is deterministic, so a failed parse is retried once:
 * if the retry succeeds, the first failure was memory. Only a bad body pays for the retry. */
static bool jansson_oom(const json_error_t *e)
{
    return json_error_code(e) == json_error_out_of_memory || e->text[0] == '\0';
}

static json_t *load_json(const char *text, size_t len, json_error_t *jerr)
{
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, jerr);
    if (!v)
        v = json_loadb(text, len, JSON_REJECT_DUPLICATES, jerr);
    return v;
}

/* Checks that text is one JSON object; -ENOMEM if jansson ran out of memory. */
static int check_json_object(const char *text, size_t len)
{
    json_error_t jerr;
    json_t *v = load_json(text, len, &jerr);
    if (!v)
        return jansson_oom(&jerr) ? -ENOMEM : CQ_EFIELD;
    int rc = json_is_object(v) ? 0 : CQ_EFIELD;
    json_decref(v);
    return rc;
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 4;
    void *p = cq_realloc(*arr, ncap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Appends an item taking ownership of content (freed on failure). */
static int push_item(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content, size_t len,
                     bool json)
{
    if (grow((void **)&m->items, &m->items_cap, m->nitems, sizeof(*m->items)) < 0) {
        cq_free(content);
        return -ENOMEM;
    }
    m->items[m->nitems++] = (cq_mq_item_t){offset, time, content, len, json};
    return 0;
}

int cq_mq_msg_add_item_take(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content, size_t len)
{
    if (!content || content[len] != '\0' || !utf8_valid(content, len)) {
        cq_free(content);
        return CQ_EFIELD;
    }
    return push_item(m, offset, time, content, len, false);
}

int cq_mq_msg_add_item(cq_mq_msg_t *m, int64_t offset, int64_t time, const char *content,
                       size_t len, bool json)
{
    if (!utf8_valid(content, len))
        return CQ_EFIELD;
    if (json) {
        int rc = check_json_object(content, len);
        if (rc < 0)
            return rc;
    }
    char *copy = cq_strndup(content, len);
    if (!copy)
        return -ENOMEM;
    return push_item(m, offset, time, copy, len, json);
}

int cq_mq_msg_add_offset(cq_mq_msg_t *m, int64_t offset)
{
    if (grow((void **)&m->offsets, &m->offsets_cap, m->noffsets, sizeof(*m->offsets)) < 0)
        return -ENOMEM;
    m->offsets[m->noffsets++] = offset;
    m->has |= CQ_MQ_F_OFFSETS;
    return 0;
}

int cq_mq_msg_add_topic_info(cq_mq_msg_t *m, const char *topic, bool online,
                             uint32_t retention_days, int64_t last_offset)
{
    size_t len = strlen(topic);
    if (!cq_mq_topic_valid(topic, len))
        return CQ_EBADTOPIC;
    if (m->ntopic_infos >= CQ_MQ_TOPICS_MAX)
        return CQ_ELIMIT;
    if (grow((void **)&m->topic_infos, &m->topic_infos_cap, m->ntopic_infos,
             sizeof(*m->topic_infos)) < 0)
        return -ENOMEM;
    cq_mq_topic_info_t *t = &m->topic_infos[m->ntopic_infos++];
    memcpy(t->topic, topic, len + 1);
    t->online = online;
    t->retention_days = retention_days;
    t->last_offset = last_offset;
    m->has |= CQ_MQ_F_TOPICS;
    return 0;
}

/* ---- decode ---------------------------------------------------------------------------- */

typedef struct dctx {
    const cq_mq_limits_t *lim;
    const char *tname;
    char *err;
    size_t errlen;
} dctx_t;

__attribute__((format(printf, 4, 5))) static int field_err(const dctx_t *c, int code,
                                                           const char *field, const char *fmt, ...)
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

/* Nesting depth of [ and { outside strings, so a deep body is refused before jansson sees it. */
static bool depth_ok(const uint8_t *p, size_t n, uint32_t max_depth)
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

static int get_int(const dctx_t *c, const char *name, json_t *v, int64_t min, int64_t max,
                   int64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return field_err(c, CQ_EFIELD, name, "must be an integer in [%lld, %lld]", (long long)min,
                         (long long)max);
    *out = json_integer_value(v);
    return 0;
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
        return field_err(c, CQ_EFIELD, name, "must be a string or a JSON object");
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
    return field_err(c, CQ_ECONTENT, name, "content of %zu bytes exceeds the limit of %u bytes",
                     *len, c->lim->max_content);
}

/* One element of "messages": produce batch {content, time?} or answer {offset_id, message,
 * time?}. */
static int get_item(const dctx_t *c, cq_mq_msg_t *m, json_t *it, size_t idx, bool answer)
{
    char name[64];
    const char *ckey = answer ? "message" : "content";
    snprintf(name, sizeof(name), "messages[%zu]", idx);
    if (!json_is_object(it))
        return field_err(c, CQ_EFIELD, name, "must be an object");
    int64_t offset = 0, time = -1;
    int rc = 0;
    json_t *v;
    if (answer) {
        snprintf(name, sizeof(name), "messages[%zu].offset_id", idx);
        if (!(v = json_object_get(it, "offset_id")))
            return field_err(c, CQ_EFIELD, name, "missing");
        if ((rc = get_int(c, name, v, 0, U53_MAX_, &offset)) < 0)
            return rc;
    }
    snprintf(name, sizeof(name), "messages[%zu].time", idx);
    if ((v = json_object_get(it, "time")) && (rc = get_int(c, name, v, 0, U53_MAX_, &time)) < 0)
        return rc;
    snprintf(name, sizeof(name), "messages[%zu].%s", idx, ckey);
    if (!(v = json_object_get(it, ckey)))
        return field_err(c, CQ_EFIELD, name, "missing");
    char *content;
    size_t len;
    bool is_json;
    if ((rc = get_content(c, name, v, &content, &len, &is_json)) < 0)
        return rc;
    return push_item(m, offset, time, content, len, is_json);
}

static int get_items(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    bool answer = fd->kind == K_MSGS;
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > c->lim->max_batch || (!answer && n == 0))
        return field_err(c, CQ_EFIELD, fd->name, "must be an array of %u to %u messages",
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
        return field_err(c, CQ_EFIELD, fd->name, "must be an array of at most %u offsets",
                         c->lim->max_batch);
    for (size_t i = 0; i < n; i++) {
        char name[48];
        int64_t off;
        snprintf(name, sizeof(name), "offsets[%zu]", i);
        int rc = get_int(c, name, json_array_get(v, i), 0, U53_MAX_, &off);
        if (rc < 0 || (rc = cq_mq_msg_add_offset(m, off)) < 0)
            return rc;
    }
    return 0;
}

/* One entry of "topics": {topic, online, retention_days, last_offset}, all required. */
static int get_topic_info(const dctx_t *c, cq_mq_msg_t *m, json_t *it, size_t idx)
{
    char name[48];
    int64_t days = 0, last = 0;
    int rc;
    json_t *tv = json_object_get(it, "topic"), *ov = json_object_get(it, "online");
    snprintf(name, sizeof(name), "topics[%zu]", idx);
    if (!json_is_object(it))
        return field_err(c, CQ_EFIELD, name, "must be an object");
    snprintf(name, sizeof(name), "topics[%zu].topic", idx);
    if (!json_is_string(tv) || !cq_mq_topic_valid(json_string_value(tv), json_string_length(tv)))
        return field_err(c, CQ_EBADTOPIC, name, "must be a string matching [A-Za-z0-9_]{1,64}");
    snprintf(name, sizeof(name), "topics[%zu].online", idx);
    if (!json_is_boolean(ov))
        return field_err(c, CQ_EFIELD, name, "must be true or false");
    snprintf(name, sizeof(name), "topics[%zu].retention_days", idx);
    json_t *dv = json_object_get(it, "retention_days");
    if (!dv || (rc = get_int(c, name, dv, 0, U32_MAX_, &days)) < 0)
        return dv ? rc : field_err(c, CQ_EFIELD, name, "missing");
    snprintf(name, sizeof(name), "topics[%zu].last_offset", idx);
    json_t *lv = json_object_get(it, "last_offset");
    if (!lv || (rc = get_int(c, name, lv, 0, U53_MAX_, &last)) < 0)
        return lv ? rc : field_err(c, CQ_EFIELD, name, "missing");
    return cq_mq_msg_add_topic_info(m, json_string_value(tv), json_is_true(ov), (uint32_t)days,
                                    last);
}

static int get_topics(const dctx_t *c, const field_desc_t *fd, json_t *v, cq_mq_msg_t *m)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_array(v) || n > CQ_MQ_TOPICS_MAX)
        return field_err(c, CQ_EFIELD, fd->name, "must be an array of at most %d topics",
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
        if ((rc = get_int(c, fd->name, v, fd->min, fd->max, &x)) < 0)
            return rc;
        *(uint32_t *)(void *)base = (uint32_t)x;
        return 0;
    case K_U53:
        if ((rc = get_int(c, fd->name, v, fd->min, fd->max, &x)) < 0)
            return rc;
        *(int64_t *)(void *)base = x;
        return 0;
    case K_BOOL:
        if (!json_is_boolean(v))
            return field_err(c, CQ_EFIELD, fd->name, "must be true or false");
        *(bool *)(void *)base = json_is_true(v);
        return 0;
    case K_STR:
        if (!json_is_string(v) || json_string_length(v) > (size_t)fd->max)
            return field_err(c, CQ_EFIELD, fd->name, "must be a string of at most %lld bytes",
                             (long long)fd->max);
        *(char **)(void *)base = cq_strndup(json_string_value(v), json_string_length(v));
        return *(char **)(void *)base ? 0 : -ENOMEM;
    default: /* K_TOPIC */
        if (!json_is_string(v) || !cq_mq_topic_valid(json_string_value(v), json_string_length(v)))
            return field_err(c, CQ_EBADTOPIC, fd->name,
                             "must be a string matching [A-Za-z0-9_]{1,64}");
        memcpy(m->topic, json_string_value(v), json_string_length(v) + 1);
        return 0;
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
        return push_item(m, 0, -1, content, len, is_json);
    }
    case K_BATCH:
    case K_MSGS:
        return get_items(c, fd, v, m);
    case K_OFFS:
        return get_offsets(c, fd, v, m);
    case K_TOPICS:
        return get_topics(c, fd, v, m);
    case K_COUNT:
        if ((rc = get_int(c, fd->name, v, 0, fd->max, &x)) < 0)
            return rc;
        if ((size_t)x != m->nitems) /* "messages" (bit 19) was decoded before this (bit 20) */
            return field_err(c, CQ_EFIELD, fd->name, "must equal the number of messages (%zu)",
                             m->nitems);
        return 0;
    default:
        return get_scalar(c, fd, v, m);
    }
}

/* Rules that span fields. */
static int check_message(const dctx_t *c, const cq_mq_msg_t *m)
{
    if (m->type != CQ_MQ_REQ_PRODUCE)
        return 0;
    bool content = m->has & CQ_MQ_F_CONTENT, batch = m->has & CQ_MQ_F_BATCH;
    if (content == batch)
        return field_err(c, CQ_EFIELD, "content",
                         "exactly one of \"content\" and \"messages\" is "
                         "required");
    if (!(m->has & CQ_MQ_F_PRODUCER_ID) != !(m->has & CQ_MQ_F_SEQ))
        return field_err(c, CQ_EFIELD, m->has & CQ_MQ_F_SEQ ? "producer_id" : "seq",
                         "\"producer_id\" and \"seq\" go together");
    return 0;
}

static int decode_object(const dctx_t *c, const type_desc_t *t, json_t *root, cq_mq_msg_t *m)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        uint32_t bit = 1u << i;
        if (!((t->req | t->opt) & bit))
            continue;
        json_t *v = json_object_get(root, fields[i].name);
        if (!v) {
            if (t->req & bit)
                return field_err(c, CQ_EFIELD, fields[i].name, "missing");
            continue;
        }
        int rc = get_field(c, &fields[i], v, m);
        if (rc < 0)
            return rc;
        m->has |= bit;
    }
    return check_message(c, m);
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

/* Parses body as one JSON object; returns it (owned) in *ret. */
static int load_object(const dctx_t *c, const cq_mq_frame_t *f, json_t **ret)
{
    if (!depth_ok(f->body, f->body_len, c->lim->max_depth))
        return cq_err_fmt(c->err, c->errlen, CQ_EJSON, "%s: JSON nested deeper than %u", c->tname,
                          c->lim->max_depth);
    json_error_t jerr;
    json_t *root = load_json((const char *)f->body, f->body_len, &jerr);
    if (!root && jansson_oom(&jerr))
        return -ENOMEM;
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

/* ---- decode: the direct reader -----------------------------------------------------------
 * Well-formed frames of the shapes chanq's own encoder writes (string contents, the fields of
 * the type, no unknown keys, no duplicate keys, no JSON-object content, no topic list) are
 * decoded in one pass without building a jansson tree: a produce of 1000 messages and a consume
 * answer of 1000 messages spent most of their CPU there. Anything else, and every error, makes
 * the reader give up (NULL) and the jansson path decode the frame from the start, so errors and
 * their messages come from one place. For an input both accept, both give the same message
 * (tests/unit/mq and the fuzz target compare them). */

typedef struct jr {
    const char *p, *end;
    const cq_mq_limits_t *lim;
} jr_t;

static void jr_ws(jr_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool jr_ch(jr_t *r, char c)
{
    jr_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static bool jr_lit(jr_t *r, const char *lit)
{
    size_t n = strlen(lit);
    jr_ws(r);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, lit, n) != 0)
        return false;
    r->p += n;
    return true;
}

static int jr_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends code point cp (not a surrogate, not 0) as UTF-8 at out; returns its length. */
static size_t jr_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape at *pp (after the backslash) into out; returns the bytes written, 0 on anything
 * jansson would refuse (\u0000, a lone surrogate, an unknown escape). */
static size_t jr_escape(const char **pp, const char *end, char *out)
{
    const char *p = *pp;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = p < end ? strchr(from, *p) : NULL;
    if (k && *p) {
        *out = to[k - from];
        *pp = p + 1;
        return 1;
    }
    if (p >= end || *p != 'u' || end - p < 5)
        return 0;
    int cp = jr_hex4(p + 1);
    p += 5;
    if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
        return 0;
    unsigned full = (unsigned)cp;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        int lo = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? jr_hex4(p + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return 0;
        full = 0x10000 + (((unsigned)cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
        p += 6;
    }
    *pp = p;
    return jr_utf8(out, full);
}

/* A string: returned owned (NUL-terminated) in *ret_s with its length, or false. */
static bool jr_str(jr_t *r, char **ret_s, size_t *ret_len)
{
    if (!jr_ch(r, '"'))
        return false;
    const char *s = r->p, *q = s;
    bool esc = false;
    while (q < r->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return false;
        if (*q == '\\') {
            esc = true;
            q++;
        }
        q++;
    }
    if (q >= r->end)
        return false;
    size_t raw = (size_t)(q - s), n = 0;
    char *out = cq_malloc(raw + 1);
    if (!out)
        return false;
    for (const char *p = s; p < q;) {
        if (!esc || *p != '\\') {
            out[n++] = *p++;
            continue;
        }
        p++;
        size_t k = jr_escape(&p, q, out + n);
        if (k == 0) {
            cq_free(out);
            return false;
        }
        n += k;
    }
    out[n] = '\0';
    if (!utf8_valid(out, n)) {
        cq_free(out);
        return false;
    }
    r->p = q + 1;
    *ret_s = out;
    *ret_len = n;
    return true;
}

/* A key: plain bytes up to the quote (no escape, no control byte), into key[0..cap). */
static bool jr_key(jr_t *r, char *key, size_t cap)
{
    if (!jr_ch(r, '"'))
        return false;
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\\' || (unsigned char)*r->p < 0x20 || n + 1 >= cap)
            return false;
        key[n++] = *r->p++;
    }
    if (r->p >= r->end)
        return false;
    r->p++;
    key[n] = '\0';
    return jr_ch(r, ':');
}

/* An integer in [min, max] (JSON integer syntax: no leading zero, fraction or exponent). */
static bool jr_int(jr_t *r, int64_t min, int64_t max, int64_t *ret)
{
    jr_ws(r);
    const char *p = r->p;
    bool neg = p < r->end && *p == '-';
    p += neg;
    if (p >= r->end || *p < '0' || *p > '9' ||
        (*p == '0' && p + 1 < r->end && p[1] >= '0' && p[1] <= '9'))
        return false;
    uint64_t v = 0;
    for (; p < r->end && *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p < r->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return false;
    if (v > (uint64_t)INT64_MAX)
        return false;
    int64_t x = neg ? -(int64_t)v : (int64_t)v;
    if (x < min || x > max)
        return false;
    r->p = p;
    *ret = x;
    return true;
}

/* {content|message, time?, offset_id (answers)} of a messages array. */
static bool jr_item(jr_t *r, cq_mq_msg_t *m, bool answer)
{
    char key[16];
    char *content = NULL;
    size_t len = 0;
    int64_t offset = 0, time = -1;
    bool has_off = false, has_time = false;
    if (!jr_ch(r, '{'))
        return false;
    for (bool first = true; !jr_ch(r, '}'); first = false) {
        if ((!first && !jr_ch(r, ',')) || !jr_key(r, key, sizeof(key)))
            goto fail;
        if (strcmp(key, answer ? "message" : "content") == 0 && !content) {
            if (!jr_str(r, &content, &len) || len > r->lim->max_content)
                goto fail;
        } else if (strcmp(key, "time") == 0 && !has_time) {
            has_time = jr_int(r, 0, U53_MAX_, &time);
            if (!has_time)
                goto fail;
        } else if (answer && strcmp(key, "offset_id") == 0 && !has_off) {
            has_off = jr_int(r, 0, U53_MAX_, &offset);
            if (!has_off)
                goto fail;
        } else {
            goto fail;
        }
    }
    if (!content || (answer && !has_off))
        goto fail;
    return push_item(m, offset, time, content, len, false) == 0;
fail:
    cq_free(content);
    return false;
}

static bool jr_items(jr_t *r, cq_mq_msg_t *m, bool answer)
{
    if (!jr_ch(r, '['))
        return false;
    for (bool first = true; !jr_ch(r, ']'); first = false) {
        if ((!first && !jr_ch(r, ',')) || m->nitems >= r->lim->max_batch || !jr_item(r, m, answer))
            return false;
    }
    return answer || m->nitems > 0;
}

static bool jr_offsets(jr_t *r, cq_mq_msg_t *m)
{
    int64_t v;
    if (!jr_ch(r, '['))
        return false;
    for (bool first = true; !jr_ch(r, ']'); first = false) {
        if ((!first && !jr_ch(r, ',')) || m->noffsets >= r->lim->max_batch ||
            !jr_int(r, 0, U53_MAX_, &v) || cq_mq_msg_add_offset(m, v) < 0)
            return false;
    }
    return true;
}

static bool jr_value(jr_t *r, const field_desc_t *fd, cq_mq_msg_t *m, int64_t *count)
{
    char *base = (char *)m + fd->off, *s = NULL;
    size_t len = 0;
    int64_t x;
    switch (fd->kind) {
    case K_U32:
        if (!jr_int(r, fd->min, fd->max, &x))
            return false;
        *(uint32_t *)(void *)base = (uint32_t)x;
        return true;
    case K_U53:
        return jr_int(r, fd->min, fd->max, (int64_t *)(void *)base);
    case K_COUNT:
        return jr_int(r, 0, fd->max, count);
    case K_BOOL:
        if (jr_lit(r, "true"))
            return *(bool *)(void *)base = true;
        return jr_lit(r, "false");
    case K_STR:
        if (!jr_str(r, &s, &len) || len > (size_t)fd->max) {
            cq_free(s);
            return false;
        }
        *(char **)(void *)base = s;
        return true;
    case K_TOPIC: {
        bool ok = jr_str(r, &s, &len) && cq_mq_topic_valid(s, len);
        if (ok)
            memcpy(m->topic, s, len + 1);
        cq_free(s);
        return ok;
    }
    case K_CONTENT:
        if (!jr_str(r, &s, &len) || len > r->lim->max_content) {
            cq_free(s);
            return false;
        }
        return push_item(m, 0, -1, s, len, false) == 0;
    case K_BATCH:
    case K_MSGS:
        return jr_items(r, m, fd->kind == K_MSGS);
    case K_OFFS:
        return jr_offsets(r, m);
    default: /* K_TOPICS: the jansson path */
        return false;
    }
}

/* The field of type t called key, or -1. */
static int jr_field(const type_desc_t *t, const char *key)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        if (((t->req | t->opt) & (1u << i)) && strcmp(fields[i].name, key) == 0)
            return (int)i;
    }
    return -1;
}

/* Decodes f on the direct path; NULL when it cannot (the jansson path then decides). */
static cq_mq_msg_t *jr_decode(const cq_mq_frame_t *f, const type_desc_t *t, const dctx_t *c)
{
    jr_t r = {(const char *)f->body, (const char *)f->body + f->body_len, c->lim};
    cq_mq_msg_t *m = cq_mq_msg_new(f->type, f->msg_id);
    int64_t count = -1;
    char key[32];
    if (!m || !jr_ch(&r, '{'))
        goto fail;
    for (bool first = true; !jr_ch(&r, '}'); first = false) {
        if ((!first && !jr_ch(&r, ',')) || !jr_key(&r, key, sizeof(key)))
            goto fail;
        int i = jr_field(t, key);
        if (i < 0 || (m->has & (1u << i)) || !jr_value(&r, &fields[i], m, &count))
            goto fail; /* unknown or repeated key, or a value this path does not take */
        m->has |= 1u << i;
    }
    jr_ws(&r);
    if (r.p != r.end || (t->req & m->has) != t->req ||
        ((m->has & CQ_MQ_F_MESSAGE_COUNT) && (size_t)count != m->nitems))
        goto fail;
    dctx_t quiet = {c->lim, c->tname, NULL, 0};
    if (check_message(&quiet, m) < 0)
        goto fail;
    return m;
fail:
    return cq_mq_msg_free(m);
}

int cq__mq_decode_jansson(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, cq_mq_msg_t **ret,
                          char *err, size_t errlen)
{
    const type_desc_t *t = type_of(f->type);
    if (!t)
        return cq_err_fmt(err, errlen, CQ_ENOTYPE, "unknown message type %u", f->type);
    cq_mq_limits_t l = limits_or_default(lim);
    dctx_t c = {&l, t->name, err, errlen};
    json_t *root = NULL;
    int rc = load_object(&c, f, &root);
    if (rc < 0)
        return rc == -ENOMEM ? cq_err_fmt(err, errlen, rc, "%s: out of memory", t->name) : rc;
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
    const type_desc_t *t = type_of(f->type);
    if (!t)
        return cq_err_fmt(err, errlen, CQ_ENOTYPE, "unknown message type %u", f->type);
    cq_mq_limits_t l = limits_or_default(lim);
    dctx_t c = {&l, t->name, err, errlen};
    cq_mq_msg_t *m = jr_decode(f, t, &c);
    if (!m)
        return cq__mq_decode_jansson(f, lim, ret, err, errlen);
    *ret = m;
    return 0;
}

/* ---- encode ---------------------------------------------------------------------------- */

static int put(json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new_nocheck(obj, key, v) < 0)
        return -ENOMEM; /* set_new releases v on failure */
    return 0;
}

static json_t *int_or_null(int64_t v, int64_t min, int64_t max, int *rc)
{
    if (v < min || v > max) {
        *rc = CQ_EFIELD;
        return NULL;
    }
    json_t *j = json_integer(v);
    if (!j)
        *rc = -ENOMEM;
    return j;
}

static int put_int(json_t *obj, const char *key, int64_t v, int64_t min, int64_t max)
{
    int rc = 0;
    json_t *j = int_or_null(v, min, max, &rc);
    if (!j)
        return rc;
    return put(obj, key, j);
}

static int content_json(const cq_mq_item_t *it, json_t **ret)
{
    if (!it->content || !utf8_valid(it->content, it->len))
        return CQ_EFIELD;
    if (!it->json) {
        *ret = json_stringn_nocheck(it->content, it->len);
        return *ret ? 0 : -ENOMEM;
    }
    json_error_t jerr;
    json_t *v = load_json(it->content, it->len, &jerr);
    if (!v)
        return jansson_oom(&jerr) ? -ENOMEM : CQ_EFIELD;
    if (!json_is_object(v)) {
        json_decref(v);
        return CQ_EFIELD;
    }
    *ret = v;
    return 0;
}

static int put_content(json_t *obj, const char *key, const cq_mq_item_t *it)
{
    json_t *v;
    int rc = content_json(it, &v);
    return rc < 0 ? rc : put(obj, key, v);
}

static int item_json(const cq_mq_item_t *it, bool answer, json_t **ret)
{
    json_t *o = json_object();
    if (!o)
        return -ENOMEM;
    int rc = 0;
    if (answer)
        rc = put_int(o, "offset_id", it->offset, 0, U53_MAX_);
    if (rc == 0)
        rc = put_content(o, answer ? "message" : "content", it);
    if (rc == 0 && it->time != -1)
        rc = put_int(o, "time", it->time, 0, U53_MAX_);
    if (rc < 0) {
        json_decref(o);
        return rc;
    }
    *ret = o;
    return 0;
}

/* Builds element i of an array (a new reference in *ret) or returns a negative error. */
typedef int (*elem_fn)(const cq_mq_msg_t *m, size_t i, bool answer, json_t **ret);

/* obj[key] = [elem(0), ..., elem(n - 1)]; nothing is set on error. */
static int put_array(json_t *obj, const char *key, size_t n, elem_fn elem, const cq_mq_msg_t *m,
                     bool answer)
{
    json_t *arr = json_array();
    if (!arr)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *o = NULL;
        int rc = elem(m, i, answer, &o);
        if (rc == 0 && json_array_append_new(arr, o) < 0)
            rc = -ENOMEM;
        if (rc < 0) {
            json_decref(arr);
            return rc;
        }
    }
    return put(obj, key, arr);
}

static int item_elem(const cq_mq_msg_t *m, size_t i, bool answer, json_t **ret)
{
    return item_json(&m->items[i], answer, ret);
}

static int offset_elem(const cq_mq_msg_t *m, size_t i, bool answer, json_t **ret)
{
    int rc = 0;
    *ret = int_or_null(m->offsets[i], 0, U53_MAX_, &rc);
    return rc < 0 ? rc : *ret ? 0 : -ENOMEM;
}

static int topic_elem(const cq_mq_msg_t *m, size_t i, bool answer, json_t **ret)
{
    const cq_mq_topic_info_t *t = &m->topic_infos[i];
    if (!cq_mq_topic_valid(t->topic, strnlen(t->topic, sizeof(t->topic))) || t->last_offset < 0 ||
        t->last_offset > U53_MAX_)
        return CQ_EFIELD;
    json_t *o = json_object();
    if (!o || put(o, "topic", json_string_nocheck(t->topic)) < 0 ||
        put(o, "online", json_boolean(t->online)) < 0 ||
        put(o, "retention_days", json_integer(t->retention_days)) < 0 ||
        put(o, "last_offset", json_integer(t->last_offset)) < 0) {
        json_decref(o);
        return -ENOMEM;
    }
    *ret = o;
    return 0;
}

static int put_items(json_t *obj, const cq_mq_msg_t *m, bool answer)
{
    if (!answer && m->nitems == 0)
        return CQ_EFIELD;
    return put_array(obj, "messages", m->nitems, item_elem, m, answer);
}

static int put_offsets(json_t *obj, const cq_mq_msg_t *m)
{
    return put_array(obj, "offsets", m->noffsets, offset_elem, m, false);
}

static int put_topics(json_t *obj, const cq_mq_msg_t *m)
{
    return put_array(obj, "topics", m->ntopic_infos, topic_elem, m, false);
}

static int put_field(json_t *obj, const field_desc_t *fd, const cq_mq_msg_t *m)
{
    const char *base = (const char *)m + fd->off;
    switch (fd->kind) {
    case K_U32:
        return put_int(obj, fd->name, *(const uint32_t *)(const void *)base, fd->min, fd->max);
    case K_U53:
        return put_int(obj, fd->name, *(const int64_t *)(const void *)base, fd->min, fd->max);
    case K_STR: {
        const char *s = *(char *const *)(const void *)base;
        size_t len = s ? strlen(s) : 0;
        if (!s || len > (size_t)fd->max || !utf8_valid(s, len))
            return CQ_EFIELD;
        return put(obj, fd->name, json_stringn_nocheck(s, len));
    }
    case K_TOPIC:
        if (!cq_mq_topic_valid(m->topic, strnlen(m->topic, sizeof(m->topic))))
            return CQ_EBADTOPIC;
        return put(obj, fd->name, json_string_nocheck(m->topic));
    case K_CONTENT:
        return m->nitems == 1 ? put_content(obj, fd->name, &m->items[0]) : CQ_EFIELD;
    case K_BATCH:
    case K_MSGS:
        return put_items(obj, m, fd->kind == K_MSGS);
    case K_COUNT:
        return put_int(obj, fd->name, (int64_t)m->nitems, 0, fd->max);
    case K_BOOL:
        return put(obj, fd->name, json_boolean(*(const bool *)(const void *)base));
    case K_TOPICS:
        return put_topics(obj, m);
    default: /* K_OFFS */
        return put_offsets(obj, m);
    }
}

static bool field_wanted(const type_desc_t *t, uint32_t bit, const cq_mq_msg_t *m)
{
    if (!((t->req | t->opt) & bit))
        return false;
    if (bit == CQ_MQ_F_MESSAGE_COUNT) /* derived from the messages array */
        return (m->has & CQ_MQ_F_MESSAGES) != 0;
    return (m->has & bit) != 0;
}

static int build_object(const cq_mq_msg_t *m, const type_desc_t *t, json_t *root)
{
    if ((t->req & m->has) != t->req)
        return CQ_EFIELD;
    if (m->type == CQ_MQ_REQ_PRODUCE &&
        (!(m->has & CQ_MQ_F_CONTENT) == !(m->has & CQ_MQ_F_BATCH) ||
         !(m->has & CQ_MQ_F_PRODUCER_ID) != !(m->has & CQ_MQ_F_SEQ)))
        return CQ_EFIELD;
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!field_wanted(t, 1u << i, m))
            continue;
        int rc = put_field(root, &fields[i], m);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int dump_frame(const cq_mq_msg_t *m, json_t *root, uint8_t **ret, size_t *ret_len)
{
    size_t len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    if (len == 0)
        return -ENOMEM; /* an object dumps to at least "{}" */
    if (len > UINT32_MAX - CQ_MQ_HDR_LEN)
        return CQ_EBADLEN;
    uint8_t *buf = cq_malloc(CQ_MQ_HDR_LEN + len);
    if (!buf)
        return -ENOMEM;
    if (json_dumpb(root, (char *)buf + CQ_MQ_HDR_LEN, len, JSON_COMPACT) != len) {
        cq_free(buf);
        return -ENOMEM;
    }
    cq_mq_header_write(buf, (uint32_t)(CQ_MQ_HDR_LEN + len), m->type, m->msg_id);
    *ret = buf;
    *ret_len = CQ_MQ_HDR_LEN + len;
    return 0;
}

int cq__mq_encode_jansson(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len)
{
    const type_desc_t *t = type_of(m->type);
    if (!t)
        return CQ_ENOTYPE;
    json_t *root = json_object();
    if (!root)
        return -ENOMEM;
    int rc = build_object(m, t, root);
    if (rc == 0)
        rc = dump_frame(m, root, ret, ret_len);
    json_decref(root);
    return rc;
}

/* ---- encode: the direct writer ----------------------------------------------------------
 * The same bytes as the jansson path above (compact, fields in table order, jansson's string
 * escapes), written straight into the frame buffer: consume answers and pushes of 1000
 * messages spent most of their time building and dumping jansson trees. Messages holding a
 * JSON-object content or a topic list still take the jansson path. */

typedef struct jw {
    uint8_t *p;
    size_t len, cap;
    int err;
} jw_t;

static void jw_put(jw_t *w, const void *s, size_t n)
{
    if (w->err)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap * 2 > w->len + n ? w->cap * 2 : w->len + n + 256;
        uint8_t *p = cq_realloc(w->p, cap);
        if (!p) {
            w->err = -ENOMEM;
            return;
        }
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

static void jw_lit(jw_t *w, const char *s)
{
    jw_put(w, s, strlen(s));
}

static void jw_int(jw_t *w, int64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof(b), "%lld", (long long)v);
    jw_put(w, b, (size_t)n);
}

/* A JSON string of s[0..len) (valid UTF-8, checked by the caller), escaped as jansson does. */
static void jw_str(jw_t *w, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    jw_put(w, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jw_put(w, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', (char)c, 0, 0, 0, 0};
        size_t k = 2;
        if (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r')
            e[1] = c == '\b' ? 'b' : c == '\t' ? 't' : c == '\n' ? 'n' : c == '\f' ? 'f' : 'r';
        else if (c < 0x20) {
            memcpy(e + 1, "u00", 3);
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            k = 6;
        }
        jw_put(w, e, k);
    }
    jw_put(w, s + run, len - run);
    jw_put(w, "\"", 1);
}

static void jw_key(jw_t *w, const char *key, bool *first)
{
    if (!*first)
        jw_put(w, ",", 1);
    *first = false;
    jw_put(w, "\"", 1);
    jw_lit(w, key);
    jw_put(w, "\":", 2);
}

static int jw_int_field(jw_t *w, const char *key, bool *first, int64_t v, int64_t min, int64_t max)
{
    if (v < min || v > max)
        return CQ_EFIELD;
    jw_key(w, key, first);
    jw_int(w, v);
    return 0;
}

static int jw_item(jw_t *w, const cq_mq_item_t *it, bool answer)
{
    bool first = true;
    if (!it->content || it->json || !utf8_valid(it->content, it->len))
        return CQ_EFIELD;
    jw_put(w, "{", 1);
    if (answer && jw_int_field(w, "offset_id", &first, it->offset, 0, U53_MAX_) < 0)
        return CQ_EFIELD;
    jw_key(w, answer ? "message" : "content", &first);
    jw_str(w, it->content, it->len);
    if (it->time != -1 && jw_int_field(w, "time", &first, it->time, 0, U53_MAX_) < 0)
        return CQ_EFIELD;
    jw_put(w, "}", 1);
    return 0;
}

static int jw_items(jw_t *w, const cq_mq_msg_t *m, bool answer)
{
    if (!answer && m->nitems == 0)
        return CQ_EFIELD;
    jw_put(w, "[", 1);
    for (size_t i = 0; i < m->nitems; i++) {
        if (i)
            jw_put(w, ",", 1);
        int rc = jw_item(w, &m->items[i], answer);
        if (rc < 0)
            return rc;
    }
    jw_put(w, "]", 1);
    return 0;
}

static int jw_offsets(jw_t *w, const cq_mq_msg_t *m)
{
    jw_put(w, "[", 1);
    for (size_t i = 0; i < m->noffsets; i++) {
        if (m->offsets[i] < 0 || m->offsets[i] > U53_MAX_)
            return CQ_EFIELD;
        if (i)
            jw_put(w, ",", 1);
        jw_int(w, m->offsets[i]);
    }
    jw_put(w, "]", 1);
    return 0;
}

static int jw_field(jw_t *w, const field_desc_t *fd, const cq_mq_msg_t *m, bool *first)
{
    const char *base = (const char *)m + fd->off;
    switch (fd->kind) {
    case K_U32:
        return jw_int_field(w, fd->name, first, *(const uint32_t *)(const void *)base, fd->min,
                            fd->max);
    case K_U53:
        return jw_int_field(w, fd->name, first, *(const int64_t *)(const void *)base, fd->min,
                            fd->max);
    case K_COUNT:
        return jw_int_field(w, fd->name, first, (int64_t)m->nitems, 0, fd->max);
    case K_STR: {
        const char *s = *(char *const *)(const void *)base;
        size_t len = s ? strlen(s) : 0;
        if (!s || len > (size_t)fd->max || !utf8_valid(s, len))
            return CQ_EFIELD;
        jw_key(w, fd->name, first);
        jw_str(w, s, len);
        return 0;
    }
    case K_TOPIC: {
        size_t len = strnlen(m->topic, sizeof(m->topic));
        if (!cq_mq_topic_valid(m->topic, len))
            return CQ_EBADTOPIC;
        jw_key(w, fd->name, first);
        jw_str(w, m->topic, len);
        return 0;
    }
    case K_BOOL:
        jw_key(w, fd->name, first);
        jw_lit(w, *(const bool *)(const void *)base ? "true" : "false");
        return 0;
    case K_CONTENT:
        if (m->nitems != 1 || !m->items[0].content ||
            !utf8_valid(m->items[0].content, m->items[0].len))
            return CQ_EFIELD;
        jw_key(w, fd->name, first);
        jw_str(w, m->items[0].content, m->items[0].len);
        return 0;
    case K_BATCH:
    case K_MSGS:
        jw_key(w, fd->name, first);
        return jw_items(w, m, fd->kind == K_MSGS);
    case K_OFFS:
        jw_key(w, fd->name, first);
        return jw_offsets(w, m);
    default: /* K_TOPICS: not on this path */
        return CQ_EFIELD;
    }
}

/* True when the direct writer can encode m: no JSON-object content, no topic list. */
static bool jw_fits(const cq_mq_msg_t *m, const type_desc_t *t)
{
    if (field_wanted(t, CQ_MQ_F_TOPICS, m))
        return false;
    if (!field_wanted(t, CQ_MQ_F_CONTENT, m) && !field_wanted(t, CQ_MQ_F_BATCH, m) &&
        !field_wanted(t, CQ_MQ_F_MESSAGES, m))
        return true;
    for (size_t i = 0; i < m->nitems; i++)
        if (m->items[i].json)
            return false;
    return true;
}

static int jw_encode(const cq_mq_msg_t *m, const type_desc_t *t, uint8_t **ret, size_t *ret_len)
{
    if ((t->req & m->has) != t->req)
        return CQ_EFIELD;
    if (m->type == CQ_MQ_REQ_PRODUCE &&
        (!(m->has & CQ_MQ_F_CONTENT) == !(m->has & CQ_MQ_F_BATCH) ||
         !(m->has & CQ_MQ_F_PRODUCER_ID) != !(m->has & CQ_MQ_F_SEQ)))
        return CQ_EFIELD;
    jw_t w = {NULL, 0, 0, 0};
    size_t guess = CQ_MQ_HDR_LEN + 64;
    for (size_t i = 0; i < m->nitems; i++)
        guess += m->items[i].len + 48;
    w.p = cq_malloc(guess);
    if (!w.p)
        return -ENOMEM;
    w.cap = guess;
    w.len = CQ_MQ_HDR_LEN;
    bool first = true;
    int rc = 0;
    jw_put(&w, "{", 1);
    for (size_t i = 0; rc == 0 && i < NFIELDS; i++) {
        if (field_wanted(t, 1u << i, m))
            rc = jw_field(&w, &fields[i], m, &first);
    }
    jw_put(&w, "}", 1);
    if (rc == 0)
        rc = w.err;
    if (rc == 0 && w.len > UINT32_MAX)
        rc = CQ_EBADLEN;
    if (rc < 0) {
        cq_free(w.p);
        return rc;
    }
    cq_mq_header_write(w.p, (uint32_t)w.len, m->type, m->msg_id);
    *ret = w.p;
    *ret_len = w.len;
    return 0;
}

int cq_mq_encode(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len)
{
    const type_desc_t *t = type_of(m->type);
    if (!t)
        return CQ_ENOTYPE;
    return jw_fits(m, t) ? jw_encode(m, t, ret, ret_len) : cq__mq_encode_jansson(m, ret, ret_len);
}

/* ---- responses ------------------------------------------------------------------------- */

/* err_msg cut to at most max bytes, on a UTF-8 boundary. */
static size_t utf8_cut(const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len <= max)
        return len;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

static int set_err(cq_mq_msg_t *r, int err, const char *err_msg)
{
    r->err_code = (uint32_t)cq_mq_errcode(err);
    r->has |= CQ_MQ_F_ERR_CODE;
    if (!err_msg && err)
        err_msg = cq_strerror(err);
    if (!err_msg)
        return 0;
    int rc = set_strn(r, CQ_MQ_F_ERR_MSG, err_msg, utf8_cut(err_msg, CQ_MQ_ERR_MSG_MAX));
    return rc == CQ_EFIELD ? 0 : rc; /* a message that is not UTF-8 is left out */
}

cq_mq_msg_t *cq_mq_resp_new(const cq_mq_msg_t *req, int err, const char *err_msg)
{
    if (!cq_mq_is_request(req->type))
        return NULL;
    cq_mq_msg_t *r = cq_mq_msg_new((uint8_t)(req->type + 1), req->msg_id);
    if (!r)
        return NULL;
    const type_desc_t *t = type_of(r->type);
    uint32_t echo = (req->has & (CQ_MQ_F_TOPIC | CQ_MQ_F_CLIENT_ID | CQ_MQ_F_CLIENT_TYPE)) & t->opt;
    memcpy(r->topic, req->topic, sizeof(r->topic));
    r->client_id = req->client_id;
    r->client_type = req->client_type;
    r->askid = req->askid;
    r->has |= echo | CQ_MQ_F_ASKID;
    if (set_err(r, err, err_msg) < 0)
        return cq_mq_msg_free(r);
    return r;
}

/* The askid of a body that did not decode, if it has a valid one. */
static bool peek_askid(const cq_mq_frame_t *f, uint32_t *askid)
{
    if (!depth_ok(f->body, f->body_len, CQ_MQ_DEFAULT_MAX_DEPTH))
        return false;
    json_t *root = json_loadb((const char *)f->body, f->body_len, JSON_REJECT_DUPLICATES, NULL);
    json_t *v = json_object_get(root, "askid"); /* NULL-safe */
    bool ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
              json_integer_value(v) <= (json_int_t)UINT32_MAX;
    if (ok)
        *askid = (uint32_t)json_integer_value(v);
    json_decref(root);
    return ok;
}

int cq_mq_encode_error(const cq_mq_frame_t *f, int err, const char *err_msg, uint8_t **ret,
                       size_t *ret_len)
{
    uint32_t askid = 0;
    bool has_askid = f && peek_askid(f, &askid);
    uint8_t type = CQ_MQ_RESP_ERROR;
    if (f && has_askid && cq_mq_is_request(f->type))
        type = (uint8_t)(f->type + 1);
    cq_mq_msg_t *m = cq_mq_msg_new(type, f ? f->msg_id : 0);
    if (!m)
        return -ENOMEM;
    m->askid = askid;
    m->has |= has_askid ? CQ_MQ_F_ASKID : 0;
    int rc = set_err(m, err, err_msg);
    if (rc == 0)
        rc = cq_mq_encode(m, ret, ret_len);
    cq_mq_msg_free(m);
    return rc;
}

/* ---- error codes ----------------------------------------------------------------------- */

static const struct {
    int err, code;
    const char *name;
} errmap[] = {
    {0, CQ_MQ_OK, "ok"},
    {CQ_EHEADER, CQ_MQ_ERR_BAD_HEADER, "bad_header"},
    {CQ_EBADLEN, CQ_MQ_ERR_BAD_LENGTH, "bad_length"},
    {CQ_EJSON, CQ_MQ_ERR_BAD_JSON, "bad_json"},
    {CQ_ENOTYPE, CQ_MQ_ERR_UNKNOWN_TYPE, "unknown_type"},
    {CQ_EFIELD, CQ_MQ_ERR_BAD_FIELD, "bad_field"},
    {CQ_EAUTH, CQ_MQ_ERR_UNAUTHENTICATED, "unauthenticated"},
    {CQ_EACL, CQ_MQ_ERR_NO_PERMISSION, "no_permission"},
    {CQ_ENOTOPIC, CQ_MQ_ERR_UNKNOWN_TOPIC, "unknown_topic"},
    {CQ_EOFFLINE, CQ_MQ_ERR_TOPIC_OFFLINE, "topic_offline"},
    {CQ_ECONTENT, CQ_MQ_ERR_CONTENT_TOO_LARGE, "content_too_large"},
    {CQ_EBUSY, CQ_MQ_ERR_BUSY, "busy"},
    {CQ_ESTORE, CQ_MQ_ERR_STORAGE, "storage"},
    {CQ_EBADTOPIC, CQ_MQ_ERR_BAD_TOPIC_NAME, "bad_topic_name"},
    {1, CQ_MQ_ERR_INTERNAL, "internal"}, /* err 1 never occurs: matched by code only */
};
#define NERRMAP (sizeof(errmap) / sizeof(errmap[0]))

int cq_mq_errcode(int err)
{
    for (size_t i = 0; i + 1 < NERRMAP; i++)
        if (errmap[i].err == err)
            return errmap[i].code;
    return CQ_MQ_ERR_INTERNAL;
}

const char *cq_mq_errcode_name(int code)
{
    for (size_t i = 0; i < NERRMAP; i++)
        if (errmap[i].code == code)
            return errmap[i].name;
    return "unknown";
}
