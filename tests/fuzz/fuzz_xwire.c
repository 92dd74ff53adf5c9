/* fuzz_xwire - the cross-worker message codec of the relay records (src/core/xwire.h).
 *
 * The input is used twice:
 *   - as a record: it decodes (0), or is refused with CQ_ELINK. A record that decodes is
 *     canonical: the message encodes back to exactly the input, and no proper prefix of it
 *     decodes. The decoded message is one a handler can take: no ptr, a kind that may leave the
 *     process (not XM_SCHEMA nor the bridge's XM_INJECT_*), its mp slice inside body[].
 *   - as a message: the first 8 bytes choose the kind, the shape and where mp.body points
 *     (NULL, inside body[], outside it, with ptr set), the rest are the body and the buffer.
 *     The encoder accepts exactly the messages a small model of xwire.h's rules accepts, and
 *     those decode back to the same fields, mp.body at the offset the rules give.
 * No buffer outlives the input. */
#include "fuzz_common.h"

#include "cq_buf.h"
#include "cq_err.h"
#include "cq_sbuf.h"
#include "xwire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1u << 16)

/* xwire.h "Local kinds": never in a record. */
static bool local_kind(int k)
{
    return k == XM_SCHEMA || k == XM_INJECT_BC || k == XM_INJECT_ROUTE || k == XM_RESUME;
}

/* The input as a record. */
static void as_record(const uint8_t *data, size_t size)
{
    cq_xmsg_t *m = NULL;
    int r = cq__xwire_decode(data, size, &m);
    FUZZ_CHECK(r == 0 || r == CQ_ELINK);
    if (r != 0) {
        FUZZ_CHECK(m == NULL);
        return;
    }
    FUZZ_CHECK(!m->ptr && m->kind < XM__COUNT && !local_kind(m->kind) && m->cost == 0);
    FUZZ_CHECK(m->body_len ? m->mp.body >= m->body &&
                                 m->mp.body_len <= m->body_len - (size_t)(m->mp.body - m->body)
                           : !m->mp.body && !m->mp.body_len);
    FUZZ_CHECK(!m->buf || cq_buf_refs(m->buf) == 1);
    cq_sbuf_t e;
    cq_sbuf_init(&e);
    FUZZ_CHECK(cq__xwire_encode(m, &e) == 0);
    FUZZ_CHECK(e.len == size && memcmp(e.data, data, size) == 0);
    cq_sbuf_done(&e);
    cq__xmsg_free(m);
    for (size_t n = 0; n < size; n++) {
        cq_xmsg_t *p = NULL;
        FUZZ_CHECK(cq__xwire_decode(data, n, &p) == CQ_ELINK && !p);
    }
}

/* xwire.h's rules, written again from the header: may m leave the process? */
static bool model_ok(const cq_xmsg_t *m, uint32_t off)
{
    if (m->ptr || m->kind >= XM__COUNT || local_kind(m->kind))
        return false;
    if (m->mp.body_len > m->body_len || off > m->body_len - m->mp.body_len)
        return false;
    int k = m->kind;
    if ((k == XM_SEND || k == XM_FANOUT || k == XM_SENDMANY || k == XM_ADJACENT) && !m->buf)
        return false;
    if ((k == XM_RECOVER || k == XM_TOPIC_CHAN) && !m->body_len)
        return false;
    bool text = k == XM_CONN_GONE || k == XM_CLOSE || k == XM_META || k == XM_DIR_ADD ||
                k == XM_RECOVER || k == XM_NODE_CONN || k == XM_TOPIC_CHAN;
    return !text || !m->body_len || m->body[m->body_len - 1] == 0;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The input as a message:
 *   0 kind   1 conn_type   2 where mp.body points (bits 0-1) | ptr (bit 2) | a buffer (bit 3)
 *   3 off    4 mp.body_len 5 body length (of the rest; the buffer is what follows it)
 *   6.. the rest, also read (cyclically) for the ids and the mp's numbers. */
static void as_message(const uint8_t *data, size_t size)
{
    if (size < 8)
        return;
    const uint8_t *rest = data + 6;
    size_t nrest = size - 6, blen = data[5] % (nrest + 1);
    cq_xmsg_t *m = cq__xmsg_new(data[0] % (XM__COUNT + 2), blen);
    FUZZ_CHECK(m);
    memcpy(m->body, rest, blen);
    if (data[2] & 8) {
        m->buf = cq_buf_from(rest + blen, nrest - blen);
        FUZZ_CHECK(m->buf);
    }
    uint8_t ids[32];
    for (size_t i = 0; i < sizeof(ids); i++)
        ids[i] = rest[i % nrest];
    m->conn_type = data[1];
    m->conn_id = rd32(ids);
    m->chan_id = rd32(ids + 4);
    m->u1 = rd32(ids + 8);
    m->u2 = rd32(ids + 12);
    m->u3 = rd32(ids + 16);
    m->mp = (cq_mp_t){ids[20], ids[21], ids[22], ids[23], NULL, data[4] % 8};
    m->ptr = data[2] & 4 ? data : NULL;
    uint32_t off = 0; /* the slice's offset by the rules */
    int where = data[2] & 3;
    if (where == 1 && blen) {
        m->mp.body = m->body + data[3] % blen;
        off = m->mp.body_len ? data[3] % (uint32_t)blen : 0;
    } else if (where == 2) {
        m->mp.body = data; /* outside body[] */
    }
    long bufs = cq_buf_live();
    cq_sbuf_t e;
    cq_sbuf_init(&e);
    int r = cq__xwire_encode(m, &e);
    FUZZ_CHECK(r == (model_ok(m, off) ? 0 : -EINVAL));
    if (r == 0) {
        cq_xmsg_t *d = NULL;
        FUZZ_CHECK(cq__xwire_decode(e.data, e.len, &d) == 0);
        FUZZ_CHECK(d->kind == m->kind && d->conn_type == m->conn_type && d->conn_id == m->conn_id &&
                   d->chan_id == m->chan_id && d->u1 == m->u1 && d->u2 == m->u2 && d->u3 == m->u3);
        FUZZ_CHECK(d->mp.channel_id == m->mp.channel_id && d->mp.broadcast == m->mp.broadcast &&
                   d->mp.stub_id == m->mp.stub_id && d->mp.msg_type == m->mp.msg_type &&
                   d->mp.body_len == m->mp.body_len);
        FUZZ_CHECK(d->mp.body == (blen ? d->body + off : NULL));
        FUZZ_CHECK(d->body_len == blen && memcmp(d->body, m->body, blen) == 0);
        FUZZ_CHECK(!d->buf == !m->buf);
        FUZZ_CHECK(!d->buf || (d->buf->len == m->buf->len &&
                               memcmp(d->buf->data, m->buf->data, m->buf->len) == 0));
        as_record(e.data, e.len);
        cq__xmsg_free(d);
    } else {
        FUZZ_CHECK(e.len == 0);
    }
    cq_sbuf_done(&e);
    FUZZ_CHECK(cq_buf_live() == bufs);
    cq__xmsg_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    as_record(data, size);
    as_message(data, size);
    FUZZ_CHECK(cq_buf_live() == 0);
    return 0;
}
