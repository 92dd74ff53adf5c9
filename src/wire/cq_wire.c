/* cq_wire.c - the Packet/MessagePack envelope by hand, bodies through protobuf-c.
 *
 * The envelope is parsed and written by hand because every message crosses it: parsing gives
 * slices into the packet (no copy, no allocation), and writing a record is a few varints in
 * front of a body packed in place, so a fan-out record is built once. Bodies go through
 * protobuf-c into a capped arena per inbound frame, so a hostile body cannot make the server
 * allocate more than the cap, and everything is freed in one step. Unknown fields are
 * skipped as protobuf does, so newer clients keep working. */
#include "cq_wire.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_varint.h"

#include <string.h>

/* ---- envelope parsing ------------------------------------------------------------------- */

/* Skips one field value of wire type wt starting at p. Returns the new p or NULL if bad. */
static const uint8_t *skip_field(const uint8_t *p, const uint8_t *end, unsigned wt)
{
    uint64_t v;
    size_t k;
    switch (wt) {
    case 0:
        k = cq_varint_get(p, end, &v);
        return k ? p + k : NULL;
    case 1:
        return end - p >= 8 ? p + 8 : NULL;
    case 2:
        k = cq_varint_get(p, end, &v);
        if (!k || v > (uint64_t)(end - p - (ptrdiff_t)k))
            return NULL;
        return p + k + v;
    case 5:
        return end - p >= 4 ? p + 4 : NULL;
    default:
        return NULL; /* groups (3, 4) and reserved types are not accepted */
    }
}

/* Reads a tag; returns bytes consumed or 0. Field number 0 is invalid. */
static size_t get_tag(const uint8_t *p, const uint8_t *end, uint32_t *field, unsigned *wt)
{
    uint64_t t;
    size_t k = cq_varint_get(p, end, &t);
    if (!k || (t >> 3) == 0 || (t >> 3) > 0x1fffffff)
        return 0;
    *field = (uint32_t)(t >> 3);
    *wt = (unsigned)(t & 7);
    return k;
}

int cq_wire_mp_parse(const uint8_t *p, size_t n, cq_mp_t *ret)
{
    const uint8_t *end = p + n;
    cq_mp_t mp = {0};
    while (p < end) {
        uint32_t f;
        unsigned wt;
        size_t k = get_tag(p, end, &f, &wt);
        if (!k)
            return CQ_EDECODE;
        p += k;
        if (f >= 1 && f <= 4 && wt == 0) {
            uint64_t v;
            k = cq_varint_get(p, end, &v);
            if (!k)
                return CQ_EDECODE;
            p += k;
            uint32_t *dst[] = {&mp.channel_id, &mp.broadcast, &mp.stub_id, &mp.msg_type};
            *dst[f - 1] = (uint32_t)v; /* proto uint32 keeps the low 32 bits */
        } else if (f == 5 && wt == 2) {
            uint64_t v;
            k = cq_varint_get(p, end, &v);
            if (!k || v > (uint64_t)(end - p - (ptrdiff_t)k))
                return CQ_EDECODE;
            mp.body = p + k;
            mp.body_len = (uint32_t)v;
            p += k + v;
        } else if (f <= 5) {
            return CQ_EDECODE; /* a known field with the wrong wire type */
        } else {
            p = skip_field(p, end, wt);
            if (!p)
                return CQ_EDECODE;
        }
    }
    *ret = mp;
    return 0;
}

void cq_wire_packet_iter_init(cq_packet_iter_t *it, const uint8_t *body, size_t len)
{
    static const uint8_t empty[1];
    it->p = len ? body : empty;
    it->end = it->p + len;
}

/* Errors are sticky: the iterator stays at its end and keeps returning CQ_EDECODE. */
static int iter_fail(cq_packet_iter_t *it)
{
    it->p = it->end = NULL;
    return CQ_EDECODE;
}

int cq_wire_packet_next(cq_packet_iter_t *it, cq_mp_t *ret)
{
    if (!it->p)
        return CQ_EDECODE;
    while (it->p < it->end) {
        uint32_t f;
        unsigned wt;
        size_t k = get_tag(it->p, it->end, &f, &wt);
        if (!k)
            return iter_fail(it);
        const uint8_t *v = it->p + k;
        if (f == 1) {
            uint64_t len;
            if (wt != 2)
                return iter_fail(it);
            size_t kl = cq_varint_get(v, it->end, &len);
            if (!kl || len > (uint64_t)(it->end - v - (ptrdiff_t)kl))
                return iter_fail(it);
            it->p = v + kl + len;
            if (cq_wire_mp_parse(v + kl, (size_t)len, ret) < 0)
                return iter_fail(it);
            return 1;
        }
        const uint8_t *next = skip_field(v, it->end, wt);
        if (!next)
            return iter_fail(it);
        it->p = next;
    }
    return 0;
}

int cq_wire_packet_validate(const uint8_t *body, size_t len)
{
    cq_packet_iter_t it;
    cq_mp_t mp;
    int n = 0, r;
    cq_wire_packet_iter_init(&it, body, len);
    while ((r = cq_wire_packet_next(&it, &mp)) == 1)
        n++;
    return r < 0 ? r : n;
}

/* ---- arena allocator -------------------------------------------------------------------- */

static void *arena_alloc(void *ud, size_t size)
{
    return cq_arena_alloc(&((cq_wire_arena_t *)ud)->arena, size);
}

static void arena_free(void *ud, void *p)
{
    (void)ud;
    (void)p; /* freed in one step by reset */
}

void cq_wire_arena_init(cq_wire_arena_t *a, size_t cap)
{
    a->pa.alloc = arena_alloc;
    a->pa.free = arena_free;
    a->pa.allocator_data = a;
    cq_arena_init(&a->arena, cap);
}

void cq_wire_arena_reset(cq_wire_arena_t *a)
{
    cq_arena_reset(&a->arena);
}

void cq_wire_arena_done(cq_wire_arena_t *a)
{
    cq_arena_done(&a->arena);
}

void *cq_wire_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
                     cq_wire_arena_t *a)
{
    return protobuf_c_message_unpack(d, &a->pa, n, p);
}

/* ---- record encoding -------------------------------------------------------------------- */

static size_t mp_head_size(const cq_mp_t *mp)
{
    size_t n = 0;
    if (mp->channel_id)
        n += 1 + cq_varint_size(mp->channel_id);
    if (mp->broadcast)
        n += 1 + cq_varint_size(mp->broadcast);
    if (mp->stub_id)
        n += 1 + cq_varint_size(mp->stub_id);
    if (mp->msg_type)
        n += 1 + cq_varint_size(mp->msg_type);
    if (mp->body_len)
        n += 1 + cq_varint_size(mp->body_len);
    return n;
}

size_t cq_wire_record_size(const cq_mp_t *mp)
{
    size_t inner = mp_head_size(mp) + mp->body_len;
    return 1 + cq_varint_size(inner) + inner;
}

size_t cq_wire_record_head(uint8_t *out, const cq_mp_t *mp)
{
    size_t inner = mp_head_size(mp) + mp->body_len;
    uint8_t *p = out;
    *p++ = 0x0a;
    p += cq_varint_put(p, inner);
    if (mp->channel_id) {
        *p++ = 0x08;
        p += cq_varint_put(p, mp->channel_id);
    }
    if (mp->broadcast) {
        *p++ = 0x10;
        p += cq_varint_put(p, mp->broadcast);
    }
    if (mp->stub_id) {
        *p++ = 0x18;
        p += cq_varint_put(p, mp->stub_id);
    }
    if (mp->msg_type) {
        *p++ = 0x20;
        p += cq_varint_put(p, mp->msg_type);
    }
    if (mp->body_len) {
        *p++ = 0x2a;
        p += cq_varint_put(p, mp->body_len);
    }
    return (size_t)(p - out);
}

cq_buf_t *cq_wire_record_raw(const cq_mp_t *mp)
{
    size_t total = cq_wire_record_size(mp);
    if (total > CQ_WIRE_MAX_RECORD)
        return NULL;
    cq_buf_t *b = cq_buf_new(total);
    if (!b)
        return NULL;
    size_t h = cq_wire_record_head(b->data, mp);
    if (mp->body_len)
        memcpy(b->data + h, mp->body, mp->body_len);
    b->len = (uint32_t)total;
    return b;
}

cq_buf_t *cq_wire_record_msg(uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                             uint32_t msg_type, const ProtobufCMessage *msg)
{
    size_t blen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    if (blen > CQ_WIRE_MAX_RECORD)
        return NULL;
    cq_mp_t mp = {channel_id, broadcast, stub_id, msg_type, NULL, (uint32_t)blen};
    size_t total = cq_wire_record_size(&mp);
    if (total > CQ_WIRE_MAX_RECORD)
        return NULL;
    cq_buf_t *b = cq_buf_new(total);
    if (!b)
        return NULL;
    size_t h = cq_wire_record_head(b->data, &mp);
    if (blen)
        protobuf_c_message_pack(msg, b->data + h);
    b->len = (uint32_t)total;
    return b;
}

/* ---- ServerForwardMessage ------------------------------------------------------------------ */

bool cq_wire_sfm_valid(const uint8_t *p, size_t n)
{
    if (!n)
        return true; /* and p may be NULL: an absent body, where NULL + 0 would be UB */
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t tag, v;
        size_t k = cq_varint_get(p, end, &tag);
        if (!k)
            return false;
        p += k;
        unsigned wt = (unsigned)(tag & 7);
        if ((tag >> 3) == 0)
            return false;
        if (wt == 0) {
            k = cq_varint_get(p, end, &v);
        } else if (wt == 2) {
            k = cq_varint_get(p, end, &v);
            if (k && v > (uint64_t)(end - p - (ptrdiff_t)k))
                return false;
            if (k)
                k += (size_t)v;
        } else if (wt == 1 || wt == 5) {
            k = wt == 1 ? 8 : 4;
            if ((size_t)(end - p) < k)
                return false;
        } else {
            return false;
        }
        if (!k || ((tag >> 3) == 1 && wt != 0) || ((tag >> 3) == 2 && wt != 2))
            return false;
        p += k;
    }
    return true;
}

uint32_t cq_wire_sfm_client(const uint8_t *p, size_t n)
{
    if (!n)
        return 0; /* p may be NULL */
    const uint8_t *end = p + n;
    uint32_t id = 0;
    while (p < end) {
        uint64_t tag, v = 0;
        size_t k = cq_varint_get(p, end, &tag);
        if (!k)
            break;
        p += k;
        unsigned wt = (unsigned)(tag & 7);
        /* Only varints and lengths are varints: a fixed field's bytes are skipped as they are
         * (read as a varint, eight 0x80 bytes would end the walk before a later clientConnId). */
        if (wt == 0 || wt == 2) {
            k = cq_varint_get(p, end, &v);
            if (!k)
                break;
        } else {
            k = wt == 1 ? 8 : 4;
        }
        if ((size_t)(end - p) < k || (wt == 2 && v > (uint64_t)(end - p) - k))
            break;
        if (wt == 0 && (tag >> 3) == 1)
            id = (uint32_t)v;
        p += wt == 2 ? k + (size_t)v : k;
    }
    return id;
}

cq_buf_t *cq_wire_sfm_record(const cq_mp_t *mp, uint32_t client_conn_id)
{
    size_t plen = mp->body_len;
    size_t sfm = 1 + cq_varint_size(client_conn_id) + (plen ? 1 + cq_varint_size(plen) + plen : 0);
    cq_mp_t head = *mp;
    head.body = NULL;
    head.body_len = (uint32_t)sfm;
    size_t total = cq_wire_record_size(&head);
    if (total > CQ_WIRE_MAX_RECORD)
        return NULL;
    cq_buf_t *b = cq_buf_new(total);
    if (!b)
        return NULL;
    uint8_t *p = b->data + cq_wire_record_head(b->data, &head);
    *p++ = 0x08; /* field 1, varint */
    p += cq_varint_put(p, client_conn_id);
    if (plen) {
        *p++ = 0x12; /* field 2, length-delimited */
        p += cq_varint_put(p, plen);
        memcpy(p, mp->body, plen);
    }
    b->len = (uint32_t)total;
    return b;
}

size_t cq_wire_pad(uint8_t *out, size_t min_total)
{
    /* tag for field 2047, wire type 2: (2047 << 3) | 2 = 16378 -> 0xfa 0x7f */
    size_t data = min_total > 3 ? min_total - 3 : 0;
    if (data > 127)
        data = min_total - 4 < 128 ? 128 : min_total - 4;
    uint8_t *p = out;
    *p++ = 0xfa;
    *p++ = 0x7f;
    p += cq_varint_put(p, data);
    memset(p, 0, data);
    return (size_t)(p - out) + data;
}
