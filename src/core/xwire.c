/* xwire.c - cross-worker messages as relay records. See xwire.h for the format. */
#include "xwire.h"

#include "cq_buf.h"
#include "cq_err.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define XW_FLAGS (CQ_XWIRE_F_MP | CQ_XWIRE_F_BODY | CQ_XWIRE_F_BUF)

/* What a kind's handler relies on (xwire.h "Shapes the handlers rely on"); S_LOCAL: a kind that
 * never leaves the process (xwire.h "Local kinds"). */
enum { S_BUF = 1, S_TEXT = 2, S_BODY = 4, S_LOCAL = 8 };

static const uint8_t shapes[XM__COUNT] = {
    [XM_SEND] = S_BUF,           [XM_FANOUT] = S_BUF,     [XM_SENDMANY] = S_BUF,
    [XM_ADJACENT] = S_BUF,       [XM_CONN_GONE] = S_TEXT, [XM_CLOSE] = S_TEXT,
    [XM_META] = S_TEXT,          [XM_DIR_ADD] = S_TEXT,   [XM_RECOVER] = S_TEXT | S_BODY,
    [XM_NODE_CONN] = S_TEXT,     [XM_SCHEMA] = S_LOCAL,   [XM_INJECT_BC] = S_LOCAL,
    [XM_INJECT_ROUTE] = S_LOCAL, [XM_RESUME] = S_LOCAL,   [XM_TOPIC_CHAN] = S_TEXT | S_BODY,
};

/* A message's fields as the record has them; both directions go through it, so that they check
 * the same rules. */
typedef struct xw {
    uint8_t kind, flags, conn_type;
    uint32_t conn_id, chan_id, u1, u2, u3;
    uint32_t mp[6]; /* channel_id, broadcast, stub_id, msg_type, off, len */
    const uint8_t *body, *buf;
    uint32_t body_len, buf_len;
} xw_t;

enum { MP_OFF = 4, MP_LEN = 5 };

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool mp_present(const xw_t *w)
{
    for (int i = 0; i < 6; i++)
        if (w->mp[i])
            return true;
    return false;
}

static bool shape_ok(const xw_t *w)
{
    if (w->kind >= XM__COUNT || (shapes[w->kind] & S_LOCAL))
        return false;
    uint32_t off = w->mp[MP_OFF], len = w->mp[MP_LEN];
    if (off > w->body_len || len > w->body_len - off || (len == 0 && off != 0))
        return false;
    uint8_t s = shapes[w->kind];
    if ((s & S_BUF) && !(w->flags & CQ_XWIRE_F_BUF))
        return false;
    if ((s & S_BODY) && !w->body_len)
        return false;
    return !(s & S_TEXT) || !w->body_len || w->body[w->body_len - 1] == 0;
}

/* ---- encode ----------------------------------------------------------------------------- */

/* The slice's offset (xwire.h "Where mp.body points"): the pointer's when it starts inside
 * body[], else 0, where xm_req reads; an empty slice is always at 0. The pointer is compared,
 * never read through. */
static uint32_t mp_off(const cq_xmsg_t *m)
{
    uintptr_t b = (uintptr_t)m->body, p = (uintptr_t)m->mp.body;
    if (!m->mp.body_len || !m->mp.body || p < b || p >= b + m->body_len)
        return 0;
    return (uint32_t)(p - b);
}

static void xw_from(const cq_xmsg_t *m, xw_t *w)
{
    *w = (xw_t){.kind = m->kind,
                .conn_type = m->conn_type,
                .conn_id = m->conn_id,
                .chan_id = m->chan_id,
                .u1 = m->u1,
                .u2 = m->u2,
                .u3 = m->u3,
                .mp = {m->mp.channel_id, m->mp.broadcast, m->mp.stub_id, m->mp.msg_type, mp_off(m),
                       m->mp.body_len},
                .body = m->body,
                .body_len = m->body_len};
    if (m->buf) {
        w->buf = m->buf->data;
        w->buf_len = m->buf->len;
    }
    w->flags = (uint8_t)((mp_present(w) ? CQ_XWIRE_F_MP : 0) | (w->body_len ? CQ_XWIRE_F_BODY : 0) |
                         (m->buf ? CQ_XWIRE_F_BUF : 0));
}

static uint64_t xw_size(const xw_t *w)
{
    uint64_t n = CQ_XWIRE_FIXED;
    if (w->flags & CQ_XWIRE_F_MP)
        n += CQ_XWIRE_MP_LEN;
    if (w->flags & CQ_XWIRE_F_BODY)
        n += 4 + (uint64_t)w->body_len;
    if (w->flags & CQ_XWIRE_F_BUF)
        n += 4 + (uint64_t)w->buf_len;
    return n;
}

/* A u32 length and its bytes. */
static uint8_t *put_part(uint8_t *p, const uint8_t *v, uint32_t n)
{
    put32(p, n);
    if (n)
        memcpy(p + 4, v, n);
    return p + 4 + n;
}

static void xw_write(const xw_t *w, uint8_t *p)
{
    p[0] = CQ_XWIRE_VERSION;
    p[1] = w->kind;
    p[2] = w->flags;
    p[3] = w->conn_type;
    const uint32_t fixed[5] = {w->conn_id, w->chan_id, w->u1, w->u2, w->u3};
    for (int i = 0; i < 5; i++)
        put32(p + 4 + 4 * i, fixed[i]);
    p += CQ_XWIRE_FIXED;
    if (w->flags & CQ_XWIRE_F_MP) {
        for (int i = 0; i < 6; i++)
            put32(p + 4 * i, w->mp[i]);
        p += CQ_XWIRE_MP_LEN;
    }
    if (w->flags & CQ_XWIRE_F_BODY)
        p = put_part(p, w->body, w->body_len);
    if (w->flags & CQ_XWIRE_F_BUF)
        put_part(p, w->buf, w->buf_len);
}

int cq__xwire_encode(const cq_xmsg_t *m, cq_sbuf_t *out)
{
    xw_t w;
    if (m->ptr)
        return -EINVAL;
    xw_from(m, &w);
    uint64_t n = xw_size(&w);
    if (!shape_ok(&w) || n > UINT32_MAX)
        return -EINVAL;
    int r = cq_sbuf_reserve(out, (size_t)n);
    if (r < 0)
        return r;
    xw_write(&w, out->data + out->len);
    out->len += (size_t)n;
    return 0;
}

/* ---- decode ----------------------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t n, at;
} rd_t;

/* The next k bytes, or NULL when fewer remain. */
static const uint8_t *rd_take(rd_t *r, size_t k)
{
    if (r->n - r->at < k)
        return NULL;
    r->at += k;
    return r->p + r->at - k;
}

/* A u32 length and its bytes; a body is never empty (its absence is the flag's). */
static bool rd_part(rd_t *r, bool nonempty, const uint8_t **ret, uint32_t *len)
{
    const uint8_t *l = rd_take(r, 4);
    if (!l)
        return false;
    *len = get32(l);
    *ret = rd_take(r, *len);
    return *ret && (*len || !nonempty);
}

static int xw_parse(const uint8_t *p, size_t n, xw_t *w)
{
    rd_t r = {p, n, 0};
    const uint8_t *f = rd_take(&r, CQ_XWIRE_FIXED);
    if (!f || f[0] != CQ_XWIRE_VERSION || (f[2] & ~XW_FLAGS))
        return CQ_ELINK;
    *w = (xw_t){.kind = f[1],
                .flags = f[2],
                .conn_type = f[3],
                .conn_id = get32(f + 4),
                .chan_id = get32(f + 8),
                .u1 = get32(f + 12),
                .u2 = get32(f + 16),
                .u3 = get32(f + 20)};
    if (w->flags & CQ_XWIRE_F_MP) {
        const uint8_t *q = rd_take(&r, CQ_XWIRE_MP_LEN);
        if (!q)
            return CQ_ELINK;
        for (int i = 0; i < 6; i++)
            w->mp[i] = get32(q + 4 * i);
        if (!mp_present(w))
            return CQ_ELINK; /* the flag of an all-zero part: not the canonical encoding */
    }
    if ((w->flags & CQ_XWIRE_F_BODY) && !rd_part(&r, true, &w->body, &w->body_len))
        return CQ_ELINK;
    if ((w->flags & CQ_XWIRE_F_BUF) && !rd_part(&r, false, &w->buf, &w->buf_len))
        return CQ_ELINK;
    return r.at == n && shape_ok(w) ? 0 : CQ_ELINK;
}

static int xw_build(const xw_t *w, cq_xmsg_t **ret)
{
    cq_xmsg_t *m = cq__xmsg_new(w->kind, w->body_len);
    if (!m)
        return -ENOMEM;
    if ((w->flags & CQ_XWIRE_F_BUF) && !(m->buf = cq_buf_from(w->buf, w->buf_len))) {
        cq__xmsg_free(m);
        return -ENOMEM;
    }
    m->conn_type = w->conn_type;
    m->conn_id = w->conn_id;
    m->chan_id = w->chan_id;
    m->u1 = w->u1;
    m->u2 = w->u2;
    m->u3 = w->u3;
    if (w->body_len)
        memcpy(m->body, w->body, w->body_len);
    m->mp = (cq_mp_t){.channel_id = w->mp[0],
                      .broadcast = w->mp[1],
                      .stub_id = w->mp[2],
                      .msg_type = w->mp[3],
                      .body_len = w->mp[MP_LEN],
                      .body = w->body_len ? m->body + w->mp[MP_OFF] : NULL};
    *ret = m;
    return 0;
}

int cq__xwire_decode(const uint8_t *p, size_t n, cq_xmsg_t **ret)
{
    xw_t w;
    int r = xw_parse(p, n, &w);
    return r < 0 ? r : xw_build(&w, ret);
}
