/* schema.c - the seed protocol's schema: one row per field (name, kind, range, place in
 * cq_mq_msg_t) and one row per message type (its required and optional fields). Decode and
 * encode, on both paths, read these two tables only, so they cannot drift apart; the names
 * and text checks every part of the codec shares live here too. See cq_mq.h. */
#include "cq_err.h"
#include "mq_int.h"

#include <stddef.h>
#include <string.h>

/* ---- the schema: fields and message types ---------------------------------------------- */

#define AT(f) offsetof(cq_mq_msg_t, f)

/* Indexed by bit number of cq_mq_field_t; encode writes fields in this order. */
const field_desc_t cq__mq_fields[CQ__MQ_NFIELDS] = {
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
    {"shard", K_U32, AT(shard), 0, U32_MAX_},
    {"master", K_BOOL, AT(master), 0, 0},
    {"epoch", K_U53, AT(epoch), 0, U53_MAX_},
    {"instance", K_STR, AT(instance), 0, CQ_MQ_INSTANCE_MAX},
};
#define F(x)          CQ_MQ_F_##x
#define RESP          (F(ASKID) | F(ERR_CODE))
#define COUNTERS_RESP (F(TOPIC) | F(ERR_MSG) | F(TOPIC_MESSAGE_TOTAL) | F(TOPIC_NUMS))
#define ROLE          (F(SHARD) | F(MASTER) | F(EPOCH))

static const type_desc_t types[CQ_MQ_TYPE_MAX + 1] = {
    [CQ_MQ_REQ_CONNECT] = {"connect", F(ASKID) | F(MODULE_ID) | F(TOKEN) | F(CLIENT_TYPE), 0},
    [CQ_MQ_RESP_CONNECT] = {"connect_resp", RESP,
                            F(ERR_MSG) | F(CLIENT_TYPE) | F(CLIENT_ID) | ROLE},
    [CQ_MQ_REQ_KEEPALIVE] = {"keepalive", F(ASKID), F(CLIENT_ID)},
    [CQ_MQ_RESP_KEEPALIVE] = {"keepalive_resp", RESP, F(ERR_MSG) | F(WEIGHT) | ROLE},
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
                            F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(TOTAL) | F(OFFSETS) |
                                F(SHARD)},
    [CQ_MQ_REQ_CONSUME] = {"consume", F(ASKID) | F(TOPIC) | F(OFFSET), F(CLIENT_ID) | F(MAX_COUNT)},
    [CQ_MQ_RESP_CONSUME] = {"consume_resp", RESP,
                            F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(TOTAL) | F(OFFSET) |
                                F(MESSAGES) | F(MESSAGE_COUNT) | F(SHARD)},
    [CQ_MQ_REQ_COMMIT] = {"commit", F(ASKID) | F(TOPIC) | F(OFFSET), F(CLIENT_ID) | F(INSTANCE)},
    [CQ_MQ_RESP_COMMIT] = {"commit_resp", RESP,
                           F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(OFFSET) | F(INSTANCE)},
    [CQ_MQ_PUSH] = {"push", F(TOPIC) | F(MESSAGES),
                    F(TOTAL) | F(OFFSET) | F(MESSAGE_COUNT) | F(SHARD)},
    [CQ_MQ_RESP_ERROR] = {"error", F(ERR_CODE), F(ASKID) | F(ERR_MSG)},
    [CQ_MQ_REQ_OFFSET] = {"offset", F(ASKID) | F(TOPIC), F(CLIENT_ID) | F(INSTANCE)},
    [CQ_MQ_RESP_OFFSET] = {"offset_resp", RESP,
                           F(TOPIC) | F(CLIENT_ID) | F(ERR_MSG) | F(OFFSET) | F(COMMITTED) |
                               F(LAST_OFFSET) | F(SHARD) | F(INSTANCE)},
    [CQ_MQ_REQ_TOPICS] = {"topics", F(ASKID), F(CLIENT_ID)},
    [CQ_MQ_RESP_TOPICS] = {"topics_resp", RESP, F(ERR_MSG) | F(TOPIC_NUMS) | F(TOPICS)},
};

const type_desc_t *cq__mq_type_of(int type)
{
    if (type < 1 || type > CQ_MQ_TYPE_MAX || !types[type].name)
        return NULL;
    return &types[type];
}

_Static_assert(CQ_MQ_F_INSTANCE == 1u << (CQ__MQ_NFIELDS - 1), "one field row per CQ_MQ_F_* bit");

/* ---- types and names ---------------------------------------------------------------------- */

const char *cq_mq_type_name(int type)
{
    const type_desc_t *t = cq__mq_type_of(type);
    return t ? t->name : NULL;
}

bool cq_mq_is_request(int type)
{
    return (type & 1) && cq__mq_type_of(type) != NULL;
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

/* ---- text --------------------------------------------------------------------------------- */

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

bool cq__mq_utf8_valid(const char *s, size_t len)
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

/* ---- encoders' view ------------------------------------------------------------------------ */

bool cq__mq_field_wanted(const type_desc_t *t, uint32_t bit, const cq_mq_msg_t *m)
{
    if (!((t->req | t->opt) & bit))
        return false;
    if (bit == CQ_MQ_F_MESSAGE_COUNT) /* derived from the messages array */
        return (m->has & CQ_MQ_F_MESSAGES) != 0;
    return (m->has & bit) != 0;
}

int cq__mq_encode_check(const cq_mq_msg_t *m, const type_desc_t *t)
{
    if ((t->req & m->has) != t->req)
        return CQ_EFIELD;
    /* a produce has content or a batch, not both, and producer_id and seq together */
    if (m->type == CQ_MQ_REQ_PRODUCE &&
        (!(m->has & CQ_MQ_F_CONTENT) == !(m->has & CQ_MQ_F_BATCH) ||
         !(m->has & CQ_MQ_F_PRODUCER_ID) != !(m->has & CQ_MQ_F_SEQ)))
        return CQ_EFIELD;
    return 0;
}
