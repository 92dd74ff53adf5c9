/* frame.c - the 12-byte frame header: the three-way parser that checks each header field as
 * soon as its bytes arrive, before anything is allocated, and the header writer. See cq_mq.h
 * and doc/protocol-mq.md section 1. */
#include "cq_mq.h"

#include "cq_err.h"
#include "cq_sbuf.h"

#include <errno.h>

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

int cq_mq_feed(struct cq_sbuf *in, const uint8_t *p, size_t n, uint32_t max_total,
               cq_mq_frame_fn fn, void *ud)
{
    if (cq_sbuf_append(in, p, n) < 0)
        return -ENOMEM;
    size_t at = 0;
    int r = 0;
    while (r == 0 && at < in->len) {
        cq_mq_frame_t f;
        ssize_t k = cq_mq_parse(in->data + at, in->len - at, max_total, &f);
        if (k <= 0) {
            r = (int)k;
            break;
        }
        at += (size_t)k;
        r = fn(ud, &f);
    }
    cq_sbuf_consume(in, at);
    return r;
}
