/* encode.c - cq_mq_msg_t -> frame through jansson, and cq_mq_encode(), which takes the direct
 * writer (encode_direct.c) whenever the message fits it. Both give the same bytes. See
 * cq_mq.h. */
#include "mq_int.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_sbuf.h"

#include <errno.h>
#include <string.h>

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
    if (!it->content || !cq__mq_utf8_valid(it->content, it->len))
        return CQ_EFIELD;
    if (!it->json) {
        *ret = json_stringn_nocheck(it->content, it->len);
        return *ret ? 0 : -ENOMEM;
    }
    json_error_t jerr;
    json_t *v = cq__mq_load_json(it->content, it->len, &jerr);
    if (!v)
        return cq__mq_jansson_oom(&jerr) ? -ENOMEM : CQ_EFIELD;
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
    if (rc == 0 && answer && it->producer_id)
        rc = put_int(o, "producer_id", it->producer_id, 1, U53_MAX_);
    if (rc == 0 && answer && it->producer_id)
        rc = put_int(o, "seq", it->seq, 0, U53_MAX_);
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
        if (!s || len > (size_t)fd->max || !cq__mq_utf8_valid(s, len))
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

static int build_object(const cq_mq_msg_t *m, const type_desc_t *t, json_t *root)
{
    int r = cq__mq_encode_check(m, t);
    if (r < 0)
        return r;
    for (size_t i = 0; i < CQ__MQ_NFIELDS; i++) {
        if (!cq__mq_field_wanted(t, 1u << i, m))
            continue;
        int rc = put_field(root, &cq__mq_fields[i], m);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int dump_frame(const cq_mq_msg_t *m, json_t *root, mq_out_t *o, bool shared)
{
    size_t len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    if (len == 0)
        return -ENOMEM; /* an object dumps to at least "{}" */
    if (len > UINT32_MAX - CQ_MQ_HDR_LEN)
        return CQ_EBADLEN;
    int rc = cq__mq_out_init(o, CQ_MQ_HDR_LEN + len, shared);
    if (rc < 0)
        return rc;
    if (json_dumpb(root, (char *)o->p + CQ_MQ_HDR_LEN, len, JSON_COMPACT) != len) {
        cq__mq_out_done(o);
        return -ENOMEM;
    }
    o->len = CQ_MQ_HDR_LEN + len;
    return cq__mq_out_finish(o, m);
}

int cq__mq_encode_jansson_out(const cq_mq_msg_t *m, mq_out_t *o, bool shared)
{
    const type_desc_t *t = cq__mq_type_of(m->type);
    if (!t)
        return CQ_ENOTYPE;
    json_t *root = json_object();
    if (!root)
        return -ENOMEM;
    int rc = build_object(m, t, root);
    if (rc == 0)
        rc = dump_frame(m, root, o, shared);
    json_decref(root);
    return rc;
}

int cq__mq_encode_jansson(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len)
{
    mq_out_t o;
    int rc = cq__mq_encode_jansson_out(m, &o, false);
    if (rc == 0) {
        *ret = o.p;
        *ret_len = o.len;
    }
    return rc;
}

/* ---- output: an array or a shared buffer ---------------------------------------------------- */

int cq__mq_out_init(mq_out_t *o, size_t cap, bool shared)
{
    *o = (mq_out_t){NULL, 0, 0, NULL};
    if (cap > UINT32_MAX)
        return CQ_EBADLEN;
    if (shared) {
        o->buf = cq_buf_new(cap);
        o->p = o->buf ? o->buf->data : NULL;
    } else {
        o->p = cq_malloc(cap ? cap : 1);
    }
    if (!o->p)
        return -ENOMEM;
    o->cap = cap;
    return 0;
}

int cq__mq_out_grow(mq_out_t *o, size_t need)
{
    size_t cap = o->cap * 2 > o->len + need ? o->cap * 2 : o->len + need + 256;
    if (cap > UINT32_MAX)
        cap = UINT32_MAX;
    int rc = o->len + need > cap ? CQ_EBADLEN : 0;
    uint8_t *p = NULL;
    cq_buf_t *b = NULL;
    if (rc == 0 && o->buf && (b = cq_buf_new(cap)))
        p = memcpy(b->data, o->p, o->len);
    else if (rc == 0 && !o->buf)
        p = cq_realloc(o->p, cap);
    if (!p) {
        cq__mq_out_done(o);
        return rc ? rc : -ENOMEM;
    }
    if (o->buf)
        cq_buf_unref(o->buf);
    o->buf = b;
    o->p = p;
    o->cap = cap;
    return 0;
}

void cq__mq_out_done(mq_out_t *o)
{
    if (o->buf)
        cq_buf_unref(o->buf);
    else
        cq_free(o->p);
    *o = (mq_out_t){NULL, 0, 0, NULL};
}

int cq__mq_out_append(int rc, mq_out_t *o, size_t max, struct cq_sbuf *out)
{
    if (rc != 0)
        return rc; /* the encoder released o */
    if (o->len > max)
        rc = CQ_EBADLEN;
    else if (cq_sbuf_append(out, o->p, o->len) < 0)
        rc = -ENOMEM;
    cq__mq_out_done(o);
    return rc;
}

int cq__mq_out_finish(mq_out_t *o, const cq_mq_msg_t *m)
{
    if (o->len > UINT32_MAX)
        return CQ_EBADLEN;
    cq_mq_header_write(o->p, (uint32_t)o->len, m->type, m->msg_id);
    if (o->buf)
        o->buf->len = (uint32_t)o->len;
    return 0;
}

/* ---- the entry points ----------------------------------------------------------------------- */

static int encode_out(const cq_mq_msg_t *m, mq_out_t *o, bool shared)
{
    const type_desc_t *t = cq__mq_type_of(m->type);
    if (!t)
        return CQ_ENOTYPE;
    return cq__mq_encode_direct_fits(m, t) ? cq__mq_encode_direct(m, t, o, shared)
                                           : cq__mq_encode_jansson_out(m, o, shared);
}

int cq_mq_encode(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len)
{
    mq_out_t o;
    int rc = encode_out(m, &o, false);
    if (rc == 0) {
        *ret = o.p;
        *ret_len = o.len;
    }
    return rc;
}

int cq_mq_encode_to(const cq_mq_msg_t *m, struct cq_sbuf *out)
{
    mq_out_t o;
    return cq__mq_out_append(encode_out(m, &o, false), &o, SIZE_MAX, out);
}

int cq_mq_encode_buf(const cq_mq_msg_t *m, cq_buf_t **ret)
{
    mq_out_t o;
    int rc = encode_out(m, &o, true);
    if (rc == 0)
        *ret = o.buf;
    return rc;
}
