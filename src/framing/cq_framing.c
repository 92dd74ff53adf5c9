#include "cq_framing.h"

#include "cq_err.h"

#define TAG_C 0x43
#define TAG_H 0x48
#define TAG_N 0x4E

static ssize_t check_len(uint32_t len, uint32_t max_body)
{
    if (len == 0)
        return CQ_EZEROLEN;
    if (len > max_body)
        return CQ_ETOOBIG;
    return 0;
}

static uint32_t legacy_len(const uint8_t *p)
{
    if (p[2] == TAG_N)
        return p[3];
    return (uint32_t)p[2] << 8 | p[3];
}

ssize_t cq_framing_parse(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max_body,
                         cq_frame_t *ret)
{
    if (n >= 1 && p[0] != TAG_C)
        return CQ_EMAGIC;
    if (mode == CQ_FRAMING_FIXED && n >= 2 && p[1] != TAG_H)
        return CQ_EMAGIC;
    if (mode == CQ_FRAMING_LEGACY && n >= 2 && p[1] != TAG_H)
        return CQ_ETOOBIG; /* byte 1 carried length bits: a body of 64 KiB or more */
    if (n < 4)
        return 0;
    uint32_t len = mode == CQ_FRAMING_LEGACY ? legacy_len(p) : ((uint32_t)p[2] << 8 | p[3]);
    ssize_t r = check_len(len, max_body);
    if (r < 0)
        return r;
    if (n < CQ_FRAME_HDR_LEN + (size_t)len)
        return 0;
    ret->body = p + CQ_FRAME_HDR_LEN;
    ret->len = len;
    ret->ct = p[4];
    return (ssize_t)(CQ_FRAME_HDR_LEN + len);
}

void cq_framing_header(uint8_t out[CQ_FRAME_HDR_LEN], uint32_t len, uint8_t ct,
                       cq_framing_mode_t mode)
{
    out[0] = TAG_C;
    out[1] = TAG_H;
    if (mode == CQ_FRAMING_LEGACY && len < 256) {
        out[2] = TAG_N;
        out[3] = (uint8_t)len;
    } else {
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
    }
    out[4] = ct;
}

uint32_t cq_framing_legacy_pad(uint32_t len)
{
    if (len >= 0x4E00 && len <= 0x4EFF)
        return 0x4F00 - len;
    return 0;
}
