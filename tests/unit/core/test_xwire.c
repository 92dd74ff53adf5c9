/* Unit tests of the cross-worker message codec (src/core/xwire.h): the exact bytes, a round
 * trip of every kind and shape, each malformed record refused with CQ_ELINK (inputs placed
 * right before a PROT_NONE guard page), the messages that cannot leave the process, and the
 * allocation failures of both directions. */
#include <errno.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "msgtab.h"
#include "xwire.h"
#include "cq_buf.h"
#include "cq_err.h"
#include "cq_sbuf.h"
#include "test_alloc.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static cq_xmsg_t *msg(int kind, const void *body, size_t n)
{
    cq_xmsg_t *m = cq__xmsg_new(kind, n);
    assert_non_null(m);
    if (n)
        memcpy(m->body, body, n);
    return m;
}

static cq_xmsg_t *with_buf(cq_xmsg_t *m, const char *bytes, size_t n)
{
    m->buf = cq_buf_from(bytes, n);
    assert_non_null(m->buf);
    return m;
}

/* The encoding of m, which must succeed. */
static cq_sbuf_t enc(const cq_xmsg_t *m)
{
    cq_sbuf_t e;
    cq_sbuf_init(&e);
    assert_int_equal(cq__xwire_encode(m, &e), 0);
    return e;
}

static void assert_bytes(const cq_sbuf_t *e, const uint8_t *want, size_t n)
{
    assert_int_equal(e->len, n);
    assert_memory_equal(e->data, want, n);
}

/* m survives encode and decode field by field (not cost, not ptr), the decoded mp.body is
 * body[] + want_off (NULL without a body), and the decoded message encodes to the same bytes.
 * Frees m. */
static void round_trip(cq_xmsg_t *m, uint32_t want_off)
{
    long bufs = cq_buf_live() - (m->buf ? 1 : 0); /* once m is freed */
    cq_sbuf_t e = enc(m);
    cq_xmsg_t *d = NULL;
    assert_int_equal(cq__xwire_decode(e.data, e.len, &d), 0);
    assert_int_equal(d->kind, m->kind);
    assert_int_equal(d->conn_type, m->conn_type);
    assert_int_equal(d->conn_id, m->conn_id);
    assert_int_equal(d->chan_id, m->chan_id);
    assert_int_equal(d->u1, m->u1);
    assert_int_equal(d->u2, m->u2);
    assert_int_equal(d->u3, m->u3);
    assert_int_equal(d->mp.channel_id, m->mp.channel_id);
    assert_int_equal(d->mp.broadcast, m->mp.broadcast);
    assert_int_equal(d->mp.stub_id, m->mp.stub_id);
    assert_int_equal(d->mp.msg_type, m->mp.msg_type);
    assert_int_equal(d->mp.body_len, m->mp.body_len);
    if (m->body_len)
        assert_ptr_equal(d->mp.body, d->body + want_off);
    else
        assert_null(d->mp.body);
    assert_int_equal(d->body_len, m->body_len);
    assert_memory_equal(d->body, m->body, m->body_len);
    assert_null(d->ptr);
    assert_int_equal(d->cost, 0);
    if (m->buf) {
        assert_non_null(d->buf);
        assert_int_equal(cq_buf_refs(d->buf), 1);
        assert_int_equal(d->buf->len, m->buf->len);
        assert_memory_equal(d->buf->data, m->buf->data, m->buf->len);
    } else {
        assert_null(d->buf);
    }
    cq_sbuf_t e2 = enc(d);
    assert_bytes(&e2, e.data, e.len);
    cq_sbuf_done(&e2);
    cq_sbuf_done(&e);
    cq__xmsg_free(d);
    cq__xmsg_free(m);
    assert_int_equal(cq_buf_live(), bufs);
}

typedef struct guard {
    uint8_t *map;
    size_t page;
} guard_t;

static void guard_init(guard_t *g)
{
    g->page = (size_t)sysconf(_SC_PAGESIZE);
    g->map = mmap(NULL, 2 * g->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g->map != MAP_FAILED);
    assert_int_equal(mprotect(g->map + g->page, g->page, PROT_NONE), 0);
}

static void guard_done(guard_t *g)
{
    munmap(g->map, 2 * g->page);
}

/* Decodes p[0..n) placed right before the guard page; returns the result. A success is freed. */
static int decode_guarded(guard_t *g, const uint8_t *p, size_t n)
{
    assert_true(n <= g->page);
    uint8_t *at = g->map + g->page - n;
    if (n)
        memcpy(at, p, n);
    cq_xmsg_t *d = (cq_xmsg_t *)(uintptr_t)1; /* untouched unless it succeeds */
    int r = cq__xwire_decode(at, n, &d);
    if (r == 0)
        cq__xmsg_free(d);
    else
        assert_ptr_equal(d, (cq_xmsg_t *)(uintptr_t)1);
    return r;
}

/* A record with every part: FANOUT {conn 9, chan 7}, mp {1,2,3,4, off 1, len 2}, body "abcd",
 * buf "XY". */
/* clang-format off */
static const uint8_t full[] = {
    1, XM_FANOUT, 7, 1,             /* version, kind, flags MP|BODY|BUF, conn_type */
    9, 0, 0, 0,   7, 0, 0, 0,       /* conn_id, chan_id */
    0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0, /* u1, u2, u3 */
    1, 0, 0, 0,   2, 0, 0, 0,   3, 0, 0, 0,   4, 0, 0, 0, /* channel_id .. msg_type */
    1, 0, 0, 0,   2, 0, 0, 0,       /* 40: off, 44: len */
    4, 0, 0, 0,   'a', 'b', 'c', 'd', /* 48: body */
    2, 0, 0, 0,   'X', 'Y',         /* 56: buf */
};
/* clang-format on */

/* ---- exact bytes ------------------------------------------------------------------------ */

/* A fan-out: the fixed part and the buffer, nothing else. */
static void test_fanout_bytes(void **state)
{
    (void)state;
    cq_xmsg_t *m = with_buf(msg(XM_FANOUT, NULL, 0), "hi", 2);
    m->conn_type = 1;
    m->conn_id = 0x01020304;
    m->chan_id = 7;
    m->u1 = 5;
    m->u2 = 6;
    m->u3 = 0x80;
    m->cost = 999; /* not carried */
    /* clang-format off */
    static const uint8_t want[] = {
        1, XM_FANOUT, CQ_XWIRE_F_BUF, 1,
        4, 3, 2, 1,   7, 0, 0, 0,
        5, 0, 0, 0,   6, 0, 0, 0,   0x80, 0, 0, 0,
        2, 0, 0, 0,   'h', 'i',
    };
    /* clang-format on */
    cq_sbuf_t e = enc(m);
    assert_bytes(&e, want, sizeof(want));
    cq_sbuf_done(&e);
    round_trip(m, 0);
}

/* A request made by cq__xmsg_req: its mp.body still points at the request's memory, which the
 * codec never reads; the slice is the copy at the start of body[]. */
static void test_request_bytes(void **state)
{
    (void)state;
    uint8_t req_body[3] = {'a', 'b', 'c'};
    cq_req_t r = {9, 2, {3, 1, 4, 100, req_body, 3}, NULL, 0};
    cq_xmsg_t *m = cq__xmsg_req(XM_DISPATCH, &r, true);
    assert_non_null(m);
    assert_ptr_equal(m->mp.body, req_body); /* what cq__xmsg_req does today */
    /* clang-format off */
    static const uint8_t want[] = {
        1, XM_DISPATCH, CQ_XWIRE_F_MP | CQ_XWIRE_F_BODY, 2,
        9, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
        3, 0, 0, 0,   1, 0, 0, 0,   4, 0, 0, 0,   100, 0, 0, 0,
        0, 0, 0, 0,   3, 0, 0, 0,   /* off 0: the copy at the start of body[] */
        3, 0, 0, 0,   'a', 'b', 'c',
    };
    /* clang-format on */
    cq_sbuf_t e = enc(m);
    assert_bytes(&e, want, sizeof(want));
    cq_sbuf_done(&e);
    memset(req_body, 'z', sizeof(req_body)); /* the read buffer is reused: nothing changes */
    e = enc(m);
    assert_bytes(&e, want, sizeof(want));
    cq_sbuf_done(&e);
    round_trip(m, 0);
}

/* Appending keeps what out held. */
static void test_encode_appends(void **state)
{
    (void)state;
    cq_xmsg_t *m = msg(XM_LSUB_ADD, NULL, 0), *d = NULL;
    m->conn_id = 1;
    cq_sbuf_t e;
    cq_sbuf_init(&e);
    assert_int_equal(cq_sbuf_append(&e, "pre", 3), 0);
    assert_int_equal(cq__xwire_encode(m, &e), 0);
    assert_int_equal(e.len, 3 + CQ_XWIRE_FIXED);
    assert_memory_equal(e.data, "pre", 3);
    assert_int_equal(cq__xwire_decode(e.data + 3, e.len - 3, &d), 0);
    assert_int_equal(d->conn_id, 1);
    cq__xmsg_free(d);
    cq__xmsg_free(m);
    cq_sbuf_done(&e);
}

/* ---- round trips ------------------------------------------------------------------------ */

/* Ids only: no mp, body or buffer, so the 24 fixed bytes. */
static void test_ids_only(void **state)
{
    (void)state;
    cq_xmsg_t *m = msg(XM_LSUB_DEL, NULL, 0);
    m->conn_id = UINT32_MAX;
    m->chan_id = 0x80000;
    m->conn_type = 255;
    cq_sbuf_t e = enc(m);
    assert_int_equal(e.len, CQ_XWIRE_FIXED);
    assert_int_equal(e.data[2], 0);
    cq_sbuf_done(&e);
    round_trip(m, 0);
}

/* An empty buffer is a buffer: it comes back as one, of length 0. */
static void test_empty_buf(void **state)
{
    (void)state;
    cq_xmsg_t *m = with_buf(msg(XM_SEND, NULL, 0), "", 0);
    m->conn_id = 3;
    m->u1 = 1;
    cq_sbuf_t e = enc(m);
    assert_int_equal(e.len, CQ_XWIRE_FIXED + 4);
    assert_int_equal(e.data[2], CQ_XWIRE_F_BUF);
    cq_sbuf_done(&e);
    round_trip(m, 0);
}

/* Body and buffer together (a SENDMANY: the ids in body, the record in buf). */
static void test_body_and_buf(void **state)
{
    (void)state;
    const uint32_t ids[3] = {1, 2, 0x7ffffffe};
    cq_xmsg_t *m = with_buf(msg(XM_SENDMANY, ids, sizeof(ids)), "record", 6);
    m->chan_id = 12;
    round_trip(m, 0);
}

/* Text bodies, with their NUL. */
static void test_text_bodies(void **state)
{
    (void)state;
    cq_xmsg_t *m = msg(XM_CLOSE, "idle", 5);
    m->u1 = 1001;
    round_trip(m, 0);
    round_trip(msg(XM_RECOVER, "pit-1", 6), 0);
    round_trip(msg(XM_CONN_GONE, NULL, 0), 0);
}

/* The mp slice inside body[]: at 0 with more after it (an SP_CELL: the request's body, then the
 * chain's steps from u1), and at an offset. */
static void test_mp_slice_in_body(void **state)
{
    (void)state;
    cq_xmsg_t *m = msg(XM_SP_CELL, "reqSTEPSTEP", 11);
    m->u1 = 3;
    m->mp = (cq_mp_t){.channel_id = 0x10001, .msg_type = 3, .body = m->body, .body_len = 3};
    round_trip(m, 0);

    m = msg(XM_HANDOVER, "0123456789", 10);
    m->mp = (cq_mp_t){.stub_id = 77, .body = m->body + 4, .body_len = 3};
    cq_sbuf_t e = enc(m);
    assert_int_equal(e.data[CQ_XWIRE_FIXED + 16], 4); /* off */
    assert_int_equal(e.data[CQ_XWIRE_FIXED + 20], 3); /* len */
    cq_sbuf_done(&e);
    round_trip(m, 4);

    /* The whole body, ending at its last byte. */
    m = msg(XM_CREATE, "abc", 3);
    m->mp = (cq_mp_t){.msg_type = 3, .body = m->body, .body_len = 3};
    round_trip(m, 0);
}

/* mp without a body (a REMOVE carries its target in u1), and an empty slice whose pointer is
 * anywhere: both encode at offset 0, and come back with mp.body NULL. */
static void test_mp_without_body(void **state)
{
    (void)state;
    uint8_t elsewhere[4] = {0};
    cq_req_t r = {5, 1, {44, 0, 6, 4, elsewhere, 4}, NULL, 0};
    cq_xmsg_t *m = cq__xmsg_req(XM_REMOVE, &r, false);
    assert_non_null(m);
    m->u1 = 44;
    round_trip(m, 0);

    m = msg(XM_DISPATCH, NULL, 0);
    m->mp = (cq_mp_t){.msg_type = 100, .body = elsewhere, .body_len = 0};
    round_trip(m, 0);

    /* An empty slice at the end of a body is at 0 too. */
    m = msg(XM_ENTITY, "abcd", 4);
    m->mp = (cq_mp_t){.msg_type = 100, .body = m->body + 4, .body_len = 0};
    cq_sbuf_t e = enc(m);
    assert_int_equal(e.data[CQ_XWIRE_FIXED + 16], 0);
    cq_sbuf_done(&e);
    round_trip(m, 0);
}

/* The kinds that never leave the process (xwire.h "Local kinds"). */
static bool local_kind(int k)
{
    return k == XM_SCHEMA || k == XM_INJECT_BC || k == XM_INJECT_ROUTE || k == XM_RESUME;
}

/* Every kind that may leave the process, with everything set. */
static void test_every_kind(void **state)
{
    (void)state;
    for (int k = 0; k < XM__COUNT; k++) {
        if (local_kind(k))
            continue;
        cq_xmsg_t *m = with_buf(msg(k, "x\0", 2), "buf", 3);
        m->conn_type = (uint8_t)k;
        m->conn_id = 100u + (uint32_t)k;
        m->chan_id = 200u + (uint32_t)k;
        m->u1 = 1;
        m->u2 = 2;
        m->u3 = 3;
        m->mp = (cq_mp_t){1, 2, 3, 4, m->body, 1};
        round_trip(m, 0);
    }
}

/* ---- malformed records ------------------------------------------------------------------ */

static void test_full_decodes(void **state)
{
    (void)state;
    cq_xmsg_t *d = NULL;
    assert_int_equal(cq__xwire_decode(full, sizeof(full), &d), 0);
    assert_int_equal(d->kind, XM_FANOUT);
    assert_int_equal(d->conn_type, 1);
    assert_int_equal(d->conn_id, 9);
    assert_int_equal(d->chan_id, 7);
    assert_int_equal(d->mp.channel_id, 1);
    assert_int_equal(d->mp.broadcast, 2);
    assert_int_equal(d->mp.stub_id, 3);
    assert_int_equal(d->mp.msg_type, 4);
    assert_ptr_equal(d->mp.body, d->body + 1);
    assert_int_equal(d->mp.body_len, 2);
    assert_int_equal(d->body_len, 4);
    assert_memory_equal(d->body, "abcd", 4);
    assert_int_equal(d->buf->len, 2);
    assert_memory_equal(d->buf->data, "XY", 2);
    cq_sbuf_t e = enc(d);
    assert_bytes(&e, full, sizeof(full));
    cq_sbuf_done(&e);
    cq__xmsg_free(d);
}

/* Every proper prefix of a valid record, the empty one included. */
static void test_truncated(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    for (size_t n = 0; n < sizeof(full); n++)
        assert_int_equal(decode_guarded(&g, full, n), CQ_ELINK);
    assert_int_equal(decode_guarded(&g, full, sizeof(full)), 0);
    guard_done(&g);
}

/* full with byte i set to v: the decoder's answer. */
static int patched(guard_t *g, size_t i, uint8_t v)
{
    uint8_t p[sizeof(full)];
    memcpy(p, full, sizeof(full));
    p[i] = v;
    return decode_guarded(g, p, sizeof(p));
}

static void test_bad_header(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    assert_int_equal(patched(&g, 0, 0), CQ_ELINK); /* version */
    assert_int_equal(patched(&g, 0, 2), CQ_ELINK);
    assert_int_equal(patched(&g, 1, XM__COUNT), CQ_ELINK); /* kind */
    assert_int_equal(patched(&g, 1, 255), CQ_ELINK);
    assert_int_equal(patched(&g, 1, XM_SCHEMA), CQ_ELINK);
    assert_int_equal(patched(&g, 1, XM_INJECT_BC), CQ_ELINK); /* the bridge's, local */
    assert_int_equal(patched(&g, 1, XM_INJECT_ROUTE), CQ_ELINK);
    assert_int_equal(patched(&g, 2, 7 | 8), CQ_ELINK); /* an unknown flag */
    assert_int_equal(patched(&g, 2, 7 | 0x80), CQ_ELINK);
    assert_int_equal(patched(&g, 1, XM_SEND), 0); /* the control: another kind is fine */
    guard_done(&g);
}

/* Lengths past the end, and bytes after it. */
static void test_bad_lengths(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    assert_int_equal(patched(&g, 48, 5), CQ_ELINK);    /* body longer than what follows */
    assert_int_equal(patched(&g, 51, 0xff), CQ_ELINK); /* body length 2^32 - 4 */
    assert_int_equal(patched(&g, 56, 3), CQ_ELINK);    /* buffer longer than what follows */
    assert_int_equal(patched(&g, 56, 1), CQ_ELINK);    /* shorter: a trailing byte */
    uint8_t p[sizeof(full) + 1];
    memcpy(p, full, sizeof(full));
    p[sizeof(full)] = 0;
    assert_int_equal(decode_guarded(&g, p, sizeof(p)), CQ_ELINK);
    /* A body flag whose length is 0. */
    /* clang-format off */
    static const uint8_t empty_body[] = {
        1, XM_LSUB_ADD, CQ_XWIRE_F_BODY, 0,
        0, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,
    };
    /* clang-format on */
    assert_int_equal(decode_guarded(&g, empty_body, sizeof(empty_body)), CQ_ELINK);
    guard_done(&g);
}

/* The mp slice must lie within body[], and have the one encoding of its content. */
static void test_bad_slice(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    assert_int_equal(patched(&g, 44, 4), CQ_ELINK);    /* off 1 + len 4 > 4 */
    assert_int_equal(patched(&g, 40, 5), CQ_ELINK);    /* off 5 > 4 */
    assert_int_equal(patched(&g, 40, 3), CQ_ELINK);    /* off 3 + len 2 > 4 */
    assert_int_equal(patched(&g, 40, 2), 0);           /* off 2 + len 2: the last two bytes */
    assert_int_equal(patched(&g, 44, 0), CQ_ELINK);    /* len 0 at off 1 is not canonical */
    assert_int_equal(patched(&g, 43, 0xff), CQ_ELINK); /* off 2^32 - 255 */
    /* A slice with no body at all. */
    /* clang-format off */
    static const uint8_t no_body[] = {
        1, XM_DISPATCH, CQ_XWIRE_F_MP, 0,
        0, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   1, 0, 0, 0,   /* 44: len 1 */
    };
    /* clang-format on */
    assert_int_equal(decode_guarded(&g, no_body, sizeof(no_body)), CQ_ELINK);
    /* The mp flag with six zeros: the canonical encoding leaves the part out. */
    uint8_t zero_mp[sizeof(no_body)];
    memcpy(zero_mp, no_body, sizeof(no_body));
    zero_mp[44] = 0;
    assert_int_equal(decode_guarded(&g, zero_mp, sizeof(zero_mp)), CQ_ELINK);
    guard_done(&g);
}

/* A record whose handler could not run safely on the decoded message. */
static void test_bad_shapes(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    /* full without its buffer (flags 3, 6 bytes shorter) is a FANOUT with nothing to fan out. */
    uint8_t p[sizeof(full)];
    memcpy(p, full, sizeof(full));
    p[2] = CQ_XWIRE_F_MP | CQ_XWIRE_F_BODY;
    assert_int_equal(decode_guarded(&g, p, sizeof(full) - 6), CQ_ELINK);
    p[1] = XM_DISPATCH;
    assert_int_equal(decode_guarded(&g, p, sizeof(full) - 6), 0); /* control */
    /* "abcd" is no text: no NUL at its end; "abc\0" is. Without a buffer, the kinds that
     * deliver one are refused either way. */
    for (int k = 0; k < XM__COUNT; k++) {
        bool bad =
            local_kind(k) || k == XM_SEND || k == XM_FANOUT || k == XM_SENDMANY || k == XM_ADJACENT;
        bool text = k == XM_CONN_GONE || k == XM_CLOSE || k == XM_META || k == XM_DIR_ADD ||
                    k == XM_RECOVER || k == XM_NODE_CONN || k == XM_TOPIC_CHAN;
        p[1] = (uint8_t)k;
        assert_int_equal(decode_guarded(&g, p, sizeof(full) - 6), bad || text ? CQ_ELINK : 0);
        p[55] = 0;
        assert_int_equal(decode_guarded(&g, p, sizeof(full) - 6), bad ? CQ_ELINK : 0);
        p[55] = 'd';
    }
    /* RECOVER and TOPIC_CHAN need their body. */
    /* clang-format off */
    uint8_t recover[] = {
        1, XM_RECOVER, 0, 0,
        1, 0, 0, 0,   0, 0, 0, 0,
        0, 0, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
    };
    /* clang-format on */
    assert_int_equal(decode_guarded(&g, recover, sizeof(recover)), CQ_ELINK);
    recover[1] = XM_TOPIC_CHAN;
    assert_int_equal(decode_guarded(&g, recover, sizeof(recover)), CQ_ELINK);
    guard_done(&g);
}

/* ---- what cannot leave the process ------------------------------------------------------ */

/* m is refused with -EINVAL and out is left as it was. Frees m. */
static void refused(cq_xmsg_t *m)
{
    cq_sbuf_t e;
    cq_sbuf_init(&e);
    assert_int_equal(cq_sbuf_append(&e, "pre", 3), 0);
    assert_int_equal(cq__xwire_encode(m, &e), -EINVAL);
    assert_int_equal(e.len, 3);
    assert_memory_equal(e.data, "pre", 3);
    cq_sbuf_done(&e);
    cq__xmsg_free(m);
}

static void test_encode_refuses(void **state)
{
    (void)state;
    static const int schema = 1;
    cq_xmsg_t *m = msg(XM_SCHEMA, NULL, 0);
    m->ptr = &schema;
    refused(m);
    m = msg(XM_DISPATCH, "a", 1); /* any kind with a pointer */
    m->ptr = &schema;
    refused(m);
    refused(msg(XM_SCHEMA, NULL, 0));
    /* The bridge's events, even in the shape a SEND would have. */
    refused(with_buf(msg(XM_INJECT_BC, NULL, 0), "rec", 3));
    refused(with_buf(msg(XM_INJECT_ROUTE, "pit\0", 4), "rec", 3));
    refused(with_buf(msg(XM_RESUME, NULL, 0), "rec", 3));
    refused(msg(XM__COUNT, NULL, 0));
    refused(msg(255, NULL, 0));
    /* An mp slice longer than the body xm_req would read it from. */
    uint8_t elsewhere[8] = {0};
    m = msg(XM_DISPATCH, "abc", 3);
    m->mp = (cq_mp_t){.body = elsewhere, .body_len = 4};
    refused(m);
    m = msg(XM_DISPATCH, NULL, 0);
    m->mp = (cq_mp_t){.body = elsewhere, .body_len = 1};
    refused(m);
    /* Starting inside body[] but running past its end. */
    m = msg(XM_DISPATCH, "abc", 3);
    m->mp = (cq_mp_t){.body = m->body + 2, .body_len = 2};
    refused(m);
    /* Shapes. */
    refused(msg(XM_SEND, NULL, 0));
    refused(msg(XM_ADJACENT, "\1\0\0\0", 4));
    refused(msg(XM_CLOSE, "why", 3));
    refused(msg(XM_RECOVER, NULL, 0));
}

/* ---- allocation failures ---------------------------------------------------------------- */

static void test_encode_oom(void **state)
{
    (void)state;
    cq_xmsg_t *m = with_buf(msg(XM_SENDMANY, "\1\0\0\0", 4), "rec", 3);
    for (unsigned long n = 1;; n++) {
        cq_sbuf_t e;
        cq_sbuf_init(&e);
        test_alloc_install(n, true);
        int r = cq__xwire_encode(m, &e);
        if (r != 0) {
            assert_int_equal(r, -ENOMEM);
            assert_int_equal(e.len, 0);
        }
        cq_sbuf_done(&e);
        if (test_alloc_round_end(r == 0))
            break;
    }
    cq__xmsg_free(m);
}

/* The message, then its buffer: each failure leaves nothing behind and *ret unset. */
static void test_decode_oom(void **state)
{
    (void)state;
    long bufs = cq_buf_live();
    unsigned long rounds = 0;
    for (unsigned long n = 1;; n++, rounds++) {
        cq_xmsg_t *d = NULL;
        test_alloc_install(n, true);
        int r = cq__xwire_decode(full, sizeof(full), &d);
        if (r != 0) {
            assert_int_equal(r, -ENOMEM);
            assert_null(d);
        }
        cq__xmsg_free(d);
        if (test_alloc_round_end(r == 0))
            break;
    }
    assert_int_equal(rounds, 2);
    assert_int_equal(cq_buf_live(), bufs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fanout_bytes),    cmocka_unit_test(test_request_bytes),
        cmocka_unit_test(test_encode_appends),  cmocka_unit_test(test_ids_only),
        cmocka_unit_test(test_empty_buf),       cmocka_unit_test(test_body_and_buf),
        cmocka_unit_test(test_text_bodies),     cmocka_unit_test(test_mp_slice_in_body),
        cmocka_unit_test(test_mp_without_body), cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_full_decodes),    cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad_header),      cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_bad_slice),       cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_encode_refuses),  cmocka_unit_test(test_encode_oom),
        cmocka_unit_test(test_decode_oom),
    };
    return cmocka_run_group_tests_name("core-xwire", tests, NULL, NULL);
}
