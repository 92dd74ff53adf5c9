/* resp.c - responses: the skeleton of a request's answer (echoes and err_code) and the answer
 * to a frame that did not decode. See cq_mq.h and doc/protocol-mq.md section 3. */
#include "mq_int.h"

#include "cq_err.h"

#include <errno.h>
#include <string.h>

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
    int rc = cq__mq_set_strn(r, CQ_MQ_F_ERR_MSG, err_msg, utf8_cut(err_msg, CQ_MQ_ERR_MSG_MAX));
    return rc == CQ_EFIELD ? 0 : rc; /* a message that is not UTF-8 is left out */
}

cq_mq_msg_t *cq_mq_resp_new(const cq_mq_msg_t *req, int err, const char *err_msg)
{
    if (!cq_mq_is_request(req->type))
        return NULL;
    cq_mq_msg_t *r = cq_mq_msg_new((uint8_t)(req->type + 1), req->msg_id);
    if (!r)
        return NULL;
    const type_desc_t *t = cq__mq_type_of(r->type);
    uint32_t echo = (req->has & (CQ_MQ_F_TOPIC | CQ_MQ_F_CLIENT_ID | CQ_MQ_F_CLIENT_TYPE)) & t->opt;
    memcpy(r->topic, req->topic, sizeof(r->topic));
    r->client_id = req->client_id;
    r->client_type = req->client_type;
    r->askid = req->askid;
    r->has |= echo | CQ_MQ_F_ASKID;
    if ((req->has & CQ_MQ_F_INSTANCE & t->opt) && req->instance &&
        cq_mq_msg_set_str(r, CQ_MQ_F_INSTANCE, req->instance) < 0)
        return cq_mq_msg_free(r);
    if (set_err(r, err, err_msg) < 0)
        return cq_mq_msg_free(r);
    return r;
}

/* The askid of a body that did not decode, if it has a valid one. */
static bool peek_askid(const cq_mq_frame_t *f, uint32_t *askid)
{
    if (!cq__mq_depth_ok(f->body, f->body_len, CQ_MQ_DEFAULT_MAX_DEPTH))
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

/* The answer to a frame that did not decode, as a message (returned owned). */
static int error_msg(const cq_mq_frame_t *f, int err, const char *err_msg, cq_mq_msg_t **ret)
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
    if (rc < 0) {
        cq_mq_msg_free(m);
        return rc;
    }
    *ret = m;
    return 0;
}

int cq_mq_encode_error(const cq_mq_frame_t *f, int err, const char *err_msg, uint8_t **ret,
                       size_t *ret_len)
{
    cq_mq_msg_t *m = NULL;
    int rc = error_msg(f, err, err_msg, &m);
    if (rc == 0)
        rc = cq_mq_encode(m, ret, ret_len);
    cq_mq_msg_free(m);
    return rc;
}

int cq_mq_encode_error_buf(const cq_mq_frame_t *f, int err, const char *err_msg, cq_buf_t **ret)
{
    cq_mq_msg_t *m = NULL;
    int rc = error_msg(f, err, err_msg, &m);
    if (rc == 0)
        rc = cq_mq_encode_buf(m, ret);
    cq_mq_msg_free(m);
    return rc;
}
