/* encode_direct.c - the direct JSON writer: why it exists, below. */
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- encode: the direct writer ----------------------------------------------------------
 * The same bytes as the jansson path of encode.c (compact, fields in table order, jansson's string
 * escapes), written straight into the frame buffer: consume answers and pushes of 1000
 * messages spent most of their time building and dumping jansson trees. Messages holding a
 * JSON-object content or a topic list still take the jansson path. */

typedef struct jw {
    mq_out_t o;
    int err;
} jw_t;

static void jw_put(jw_t *w, const void *s, size_t n)
{
    if (w->err)
        return;
    if (w->o.len + n > w->o.cap && (w->err = cq__mq_out_grow(&w->o, n)) < 0)
        return;
    memcpy(w->o.p + w->o.len, s, n);
    w->o.len += n;
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

size_t cq_mq_json_str_len(const char *s, size_t len)
{
    size_t n = len + 2; /* the quotes */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r')
            n += 1;
        else if (c < 0x20)
            n += 5;
    }
    return n;
}

static size_t int_len(int64_t v)
{
    char b[24];
    return (size_t)snprintf(b, sizeof(b), "%lld", (long long)v);
}

size_t cq_mq_answer_item_len(int64_t offset, int64_t time, const char *content, size_t len)
{
    size_t n = sizeof("{\"offset_id\":,\"message\":}") - 1 + int_len(offset);
    n += cq_mq_json_str_len(content, len);
    if (time != -1)
        n += sizeof(",\"time\":") - 1 + int_len(time);
    return n;
}

size_t cq_mq_answer_key_len(int64_t producer_id, int64_t seq)
{
    if (!producer_id)
        return 0;
    return sizeof(",\"producer_id\":,\"seq\":") - 1 + int_len(producer_id) + int_len(seq);
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
    if (!it->content || it->json || !cq__mq_utf8_valid(it->content, it->len))
        return CQ_EFIELD;
    jw_put(w, "{", 1);
    if (answer && jw_int_field(w, "offset_id", &first, it->offset, 0, U53_MAX_) < 0)
        return CQ_EFIELD;
    jw_key(w, answer ? "message" : "content", &first);
    jw_str(w, it->content, it->len);
    if (it->time != -1 && jw_int_field(w, "time", &first, it->time, 0, U53_MAX_) < 0)
        return CQ_EFIELD;
    if (answer && it->producer_id &&
        (jw_int_field(w, "producer_id", &first, it->producer_id, 1, U53_MAX_) < 0 ||
         jw_int_field(w, "seq", &first, it->seq, 0, U53_MAX_) < 0))
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
        if (!s || len > (size_t)fd->max || !cq__mq_utf8_valid(s, len))
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
            !cq__mq_utf8_valid(m->items[0].content, m->items[0].len))
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

bool cq__mq_encode_direct_fits(const cq_mq_msg_t *m, const type_desc_t *t)
{
    if (cq__mq_field_wanted(t, CQ_MQ_F_TOPICS, m))
        return false;
    if (!cq__mq_field_wanted(t, CQ_MQ_F_CONTENT, m) && !cq__mq_field_wanted(t, CQ_MQ_F_BATCH, m) &&
        !cq__mq_field_wanted(t, CQ_MQ_F_MESSAGES, m))
        return true;
    for (size_t i = 0; i < m->nitems; i++)
        if (m->items[i].json)
            return false;
    return true;
}

int cq__mq_encode_direct(const cq_mq_msg_t *m, const type_desc_t *t, mq_out_t *o, bool shared)
{
    int r = cq__mq_encode_check(m, t);
    if (r < 0)
        return r;
    jw_t w = {{NULL, 0, 0, NULL}, 0};
    size_t guess = CQ_MQ_HDR_LEN + 64;
    for (size_t i = 0; i < m->nitems; i++)
        guess += m->items[i].len + 48;
    int rc = cq__mq_out_init(&w.o, guess, shared);
    if (rc < 0)
        return rc;
    w.o.len = CQ_MQ_HDR_LEN;
    bool first = true;
    jw_put(&w, "{", 1);
    for (size_t i = 0; rc == 0 && i < CQ__MQ_NFIELDS; i++) {
        if (cq__mq_field_wanted(t, 1u << i, m))
            rc = jw_field(&w, &cq__mq_fields[i], m, &first);
    }
    jw_put(&w, "}", 1);
    if (rc == 0)
        rc = w.err;
    if (rc == 0)
        rc = cq__mq_out_finish(&w.o, m);
    if (rc < 0) {
        cq__mq_out_done(&w.o);
        return rc;
    }
    *o = w.o;
    return 0;
}
