/* msg.c - the message model: cq_mq_msg_t construction and its builders (topic, strings, items,
 * offsets, topic entries). A message is plain data owned by its holder; the builders validate
 * what they store so that encode never meets text it cannot write. See cq_mq.h. */
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

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
    cq_free(m->instance);
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

int cq__mq_set_strn(cq_mq_msg_t *m, cq_mq_field_t which, const char *s, size_t len)
{
    size_t max = which == CQ_MQ_F_TOKEN      ? CQ_MQ_TOKEN_MAX
                 : which == CQ_MQ_F_INSTANCE ? CQ_MQ_INSTANCE_MAX
                                             : CQ_MQ_ERR_MSG_MAX;
    if ((which != CQ_MQ_F_TOKEN && which != CQ_MQ_F_ERR_MSG && which != CQ_MQ_F_INSTANCE) ||
        len > max || !cq__mq_utf8_valid(s, len))
        return CQ_EFIELD;
    char *copy = cq_strndup(s, len);
    if (!copy)
        return -ENOMEM;
    char **slot = which == CQ_MQ_F_TOKEN      ? &m->token
                  : which == CQ_MQ_F_INSTANCE ? &m->instance
                                              : &m->err_msg;
    cq_free(*slot);
    *slot = copy;
    m->has |= which;
    return 0;
}

int cq_mq_msg_set_str(cq_mq_msg_t *m, cq_mq_field_t which, const char *s)
{
    return cq__mq_set_strn(m, which, s, strlen(s));
}

/* jansson 2.14 reports some allocation failures with no error text, and some (inside the
 * lexer) as syntax errors. A syntax error is deterministic, so a failed parse is retried once:
 * if the retry succeeds, the first failure was memory. Only a bad body pays for the retry. */
bool cq__mq_jansson_oom(const json_error_t *e)
{
    return json_error_code(e) == json_error_out_of_memory || e->text[0] == '\0';
}

json_t *cq__mq_load_json(const char *text, size_t len, json_error_t *jerr)
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
    json_t *v = cq__mq_load_json(text, len, &jerr);
    if (!v)
        return cq__mq_jansson_oom(&jerr) ? -ENOMEM : CQ_EFIELD;
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

int cq__mq_push_item(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content, size_t len,
                     bool json)
{
    if (grow((void **)&m->items, &m->items_cap, m->nitems, sizeof(*m->items)) < 0) {
        cq_free(content);
        return -ENOMEM;
    }
    m->items[m->nitems++] = (cq_mq_item_t){offset, time, content, len, json, 0, 0};
    return 0;
}

int cq_mq_msg_add_item_take(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content, size_t len)
{
    if (!content || content[len] != '\0' || !cq__mq_utf8_valid(content, len)) {
        cq_free(content);
        return CQ_EFIELD;
    }
    return cq__mq_push_item(m, offset, time, content, len, false);
}

int cq_mq_msg_add_item(cq_mq_msg_t *m, int64_t offset, int64_t time, const char *content,
                       size_t len, bool json)
{
    if (!cq__mq_utf8_valid(content, len))
        return CQ_EFIELD;
    if (json) {
        int rc = check_json_object(content, len);
        if (rc < 0)
            return rc;
    }
    char *copy = cq_strndup(content, len);
    if (!copy)
        return -ENOMEM;
    return cq__mq_push_item(m, offset, time, copy, len, json);
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
