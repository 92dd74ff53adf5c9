/* chanq.c - the sans-I/O client core: packet parsing, batching, stubs, encoders. */
#include "chanq.h"

#include "cq_alloc.h"
#include "cq_framing.h"
#include "cq_sbuf.h"
#include "cq_snappy.h"
#include "cq_varint.h"
#include "cq_wire.h"

#include <errno.h>
#include <string.h>

typedef struct stub {
    uint32_t id;
    chanq_msg_fn fn;
    void *ud;
    chanq_stub_drop_fn drop; /* NULL, or frees ud when the stub dies without firing */
} stub_t;

struct chanq_client {
    chanq_opts_t o;
    cq_sbuf_t in; /* incomplete inbound packet bytes, from in_off */
    size_t in_off;
    cq_sbuf_t pend; /* records of the packet being filled (uncompressed body) */
    cq_sbuf_t out;  /* finished packets, from out_off */
    size_t out_off;
    uint8_t *inflate; /* decompression scratch */
    size_t inflate_cap;
    stub_t *stubs; /* sorted by id */
    size_t n_stubs, cap_stubs;
    uint32_t conn_id;
    uint32_t auth_ct;
    int err;
    bool in_feed;
    bool compress_by_auth; /* follow_auth_compression turned compress on */
    char *pit, *lt;        /* of the last chanq_client_auth, for chanq_client_reauth */
    chanq_sub_t *subs;     /* the connection's own subscriptions; opts owned */
    size_t n_subs, cap_subs;
    uint32_t *asked; /* channels of a SUB for itself queued, result not yet seen */
    size_t n_asked, cap_asked;
};

/* Room a legacy pad may need: cq_framing_legacy_pad() is at most 0x100, cq_wire_pad adds 4. */
#define LEGACY_PAD_ROOM 0x108

/* ---- protobuf-c allocator ---------------------------------------------------------------- */

static void *pb_alloc(void *ud, size_t n)
{
    (void)ud;
    return cq_malloc(n);
}

static void pb_free(void *ud, void *p)
{
    (void)ud;
    cq_free(p);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

ProtobufCAllocator *chanq_pb_allocator(void)
{
    return &pb_allocator;
}

void *chanq_unpack(const ProtobufCMessageDescriptor *d, const void *body, size_t len)
{
    static const uint8_t empty[1];
    return protobuf_c_message_unpack(d, &pb_allocator, len, body ? body : empty);
}

void chanq_unpack_free(void *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, &pb_allocator);
}

Chanqpb__TopicEvent *chanq_topic_event_decode(const void *body, size_t len)
{
    Channeldpb__ServerForwardMessage *f =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, body, len);
    if (!f)
        return NULL;
    Chanqpb__TopicEvent *ev =
        chanq_unpack(&chanqpb__topic_event__descriptor, f->payload.data, f->payload.len);
    chanq_unpack_free(f);
    return ev;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

void chanq_opts_init(chanq_opts_t *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->framing = CHANQ_FRAMING_FIXED;
}

int chanq_client_new(const chanq_opts_t *opts, chanq_client_t **ret_c)
{
    if (!opts || !ret_c)
        return -EINVAL;
    if (opts->framing != CHANQ_FRAMING_FIXED && opts->framing != CHANQ_FRAMING_LEGACY)
        return -EINVAL;
    chanq_client_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->o = *opts;
    if (!c->o.max_inflated)
        c->o.max_inflated = CHANQ_DEFAULT_MAX_INFLATED;
    cq_sbuf_init(&c->in);
    cq_sbuf_init(&c->pend);
    cq_sbuf_init(&c->out);
    *ret_c = c;
    return 0;
}

chanq_client_t *chanq_client_free(chanq_client_t *c)
{
    if (!c)
        return NULL;
    cq_sbuf_done(&c->in);
    cq_sbuf_done(&c->pend);
    cq_sbuf_done(&c->out);
    cq_free(c->inflate);
    for (size_t i = 0; i < c->n_stubs; i++)
        if (c->stubs[i].drop)
            c->stubs[i].drop(c->stubs[i].ud);
    cq_free(c->stubs);
    for (size_t i = 0; i < c->n_subs; i++)
        cq_free((uint8_t *)c->subs[i].opts);
    cq_free(c->subs);
    cq_free(c->asked);
    cq_free(c->pit);
    cq_free(c->lt);
    cq_free(c);
    return NULL;
}

void chanq_client_set_on_message(chanq_client_t *c, chanq_msg_fn fn, void *ud)
{
    c->o.on_message = fn;
    c->o.ud = ud;
}

uint32_t chanq_client_conn_id(const chanq_client_t *c)
{
    return c->conn_id;
}

uint32_t chanq_client_auth_compression(const chanq_client_t *c)
{
    return c->auth_ct;
}

int chanq_client_error(const chanq_client_t *c)
{
    return c->err;
}

void chanq_client_set_compress(chanq_client_t *c, bool on)
{
    c->o.compress = on;
}

/* ---- stubs ------------------------------------------------------------------------------- */

int chanq_client_stub_alloc(chanq_client_t *c, chanq_msg_fn fn, void *ud, uint32_t *ret_stub)
{
    return chanq_client_stub_alloc_owned(c, fn, ud, NULL, ret_stub);
}

int chanq_client_stub_alloc_owned(chanq_client_t *c, chanq_msg_fn fn, void *ud,
                                  chanq_stub_drop_fn drop, uint32_t *ret_stub)
{
    if (!fn || !ret_stub)
        return -EINVAL;
    if (c->n_stubs == c->cap_stubs) {
        size_t ncap = c->cap_stubs ? c->cap_stubs * 2 : 8;
        stub_t *ns = cq_realloc(c->stubs, ncap * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        c->stubs = ns;
        c->cap_stubs = ncap;
    }
    /* The array is sorted and ids start at 1, so the first i with id != i + 1 is a gap. */
    size_t i = 0;
    while (i < c->n_stubs && c->stubs[i].id == i + 1)
        i++;
    memmove(&c->stubs[i + 1], &c->stubs[i], (c->n_stubs - i) * sizeof(stub_t));
    c->stubs[i] = (stub_t){(uint32_t)(i + 1), fn, ud, drop};
    c->n_stubs++;
    *ret_stub = (uint32_t)(i + 1);
    return 0;
}

static stub_t *stub_find(chanq_client_t *c, uint32_t id)
{
    size_t lo = 0, hi = c->n_stubs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->stubs[mid].id == id)
            return &c->stubs[mid];
        if (c->stubs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void stub_remove(chanq_client_t *c, stub_t *s)
{
    size_t i = (size_t)(s - c->stubs);
    memmove(s, s + 1, (c->n_stubs - i - 1) * sizeof(stub_t));
    c->n_stubs--;
}

int chanq_client_stub_cancel(chanq_client_t *c, uint32_t stub)
{
    stub_t *s = stub_find(c, stub);
    if (!s)
        return -ENOENT;
    stub_t copy = *s;
    stub_remove(c, s);
    if (copy.drop)
        copy.drop(copy.ud);
    return 0;
}

size_t chanq_client_stub_count(const chanq_client_t *c)
{
    return c->n_stubs;
}

/* ---- own subscriptions (what a move redoes: chanq.h) ------------------------------------- */

/* Makes room for one more element of size elem in *arr (n used of *cap). */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *na = cq_realloc(*arr, ncap * elem);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = ncap;
    return 0;
}

static size_t asked_find(const chanq_client_t *c, uint32_t ch)
{
    size_t i = 0;
    while (i < c->n_asked && c->asked[i] != ch)
        i++;
    return i;
}

/* Returns 1 when ch was added, 0 when it was asked already, or -ENOMEM. */
static int asked_add(chanq_client_t *c, uint32_t ch)
{
    if (asked_find(c, ch) < c->n_asked)
        return 0;
    if (grow((void **)&c->asked, &c->cap_asked, c->n_asked, sizeof(*c->asked)) < 0)
        return -ENOMEM;
    c->asked[c->n_asked++] = ch;
    return 1;
}

static void asked_del(chanq_client_t *c, uint32_t ch)
{
    size_t i = asked_find(c, ch);
    if (i < c->n_asked)
        c->asked[i] = c->asked[--c->n_asked];
}

const chanq_sub_t *chanq_client_sub_find(const chanq_client_t *c, uint32_t channel_id)
{
    for (size_t i = 0; i < c->n_subs; i++)
        if (c->subs[i].channel_id == channel_id)
            return &c->subs[i];
    return NULL;
}

size_t chanq_client_sub_count(const chanq_client_t *c)
{
    return c->n_subs;
}

const chanq_sub_t *chanq_client_sub_at(const chanq_client_t *c, size_t i)
{
    return i < c->n_subs ? &c->subs[i] : NULL;
}

/* Keeps the order of the others: a move subscribes again in the order the client did. */
static void sub_forget(chanq_client_t *c, uint32_t ch)
{
    asked_del(c, ch);
    chanq_sub_t *s = (chanq_sub_t *)chanq_client_sub_find(c, ch);
    if (!s)
        return;
    size_t i = (size_t)(s - c->subs);
    cq_free((uint8_t *)s->opts);
    memmove(s, s + 1, (c->n_subs - i - 1) * sizeof(*s));
    c->n_subs--;
}

/* Records (or updates) ch with the options packed. Out of memory the subscription is not
 * recorded, and a move would not redo it: nothing else can be done from inside a feed. */
static void sub_record(chanq_client_t *c, uint32_t ch, uint32_t type,
                       const Channeldpb__ChannelSubscriptionOptions *o)
{
    size_t n = o ? protobuf_c_message_get_packed_size(&o->base) : 0;
    uint8_t *packed = cq_malloc(n ? n : 1);
    if (!packed)
        return;
    if (n)
        protobuf_c_message_pack(&o->base, packed);
    chanq_sub_t *s = (chanq_sub_t *)chanq_client_sub_find(c, ch);
    if (!s) {
        if (grow((void **)&c->subs, &c->cap_subs, c->n_subs, sizeof(*c->subs)) < 0) {
            cq_free(packed);
            return;
        }
        s = &c->subs[c->n_subs++];
        s->opts = NULL;
    }
    cq_free((uint8_t *)s->opts);
    *s = (chanq_sub_t){ch, type, packed, n};
}

/* A SUB result naming this connection: its own request's, or an update of one it recorded. */
static void note_sub_result(chanq_client_t *c, const chanq_msg_t *m)
{
    bool asked = asked_find(c, m->channel_id) < c->n_asked;
    if (!asked && !chanq_client_sub_find(c, m->channel_id))
        return; /* a server's doing: the server redoes it */
    Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
        &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
    if (r && c->conn_id && r->connid == c->conn_id) {
        asked_del(c, m->channel_id);
        sub_record(c, m->channel_id, (uint32_t)r->channeltype, r->suboptions);
    }
    chanq_unpack_free(r);
}

static void note_unsub_result(chanq_client_t *c, const chanq_msg_t *m)
{
    Channeldpb__UnsubscribedFromChannelResultMessage *r = chanq_unpack(
        &channeldpb__unsubscribed_from_channel_result_message__descriptor, m->body, m->body_len);
    if (r && c->conn_id && r->connid == c->conn_id)
        sub_forget(c, m->channel_id);
    chanq_unpack_free(r);
}

static void note_remove(chanq_client_t *c, const chanq_msg_t *m)
{
    Channeldpb__RemoveChannelMessage *r =
        chanq_unpack(&channeldpb__remove_channel_message__descriptor, m->body, m->body_len);
    if (r)
        sub_forget(c, r->channelid);
    chanq_unpack_free(r);
}

/* Only a client that asked for or holds a subscription pays for the decoding. */
static void note_subs(chanq_client_t *c, const chanq_msg_t *m)
{
    if (!c->n_asked && !c->n_subs)
        return;
    switch (m->msg_type) {
    case CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL:
        note_sub_result(c, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__UNSUB_FROM_CHANNEL:
        note_unsub_result(c, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__REMOVE_CHANNEL:
        note_remove(c, m);
        break;
    default:
        break;
    }
}

/* ---- inbound ----------------------------------------------------------------------------- */

/* Records conn id and compression from our own successful AuthResult. Only the first success
 * counts: a connection that owns GLOBAL later receives copies of other connections' results. */
static void note_auth(chanq_client_t *c, const chanq_msg_t *m)
{
    if (c->conn_id)
        return;
    Channeldpb__AuthResultMessage *ar =
        chanq_unpack(&channeldpb__auth_result_message__descriptor, m->body, m->body_len);
    if (!ar)
        return;
    if (ar->result == CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL && ar->connid) {
        c->conn_id = ar->connid;
        c->auth_ct = (uint32_t)ar->compressiontype;
        if (c->o.follow_auth_compression &&
            ar->compressiontype == CHANNELDPB__COMPRESSION_TYPE__SNAPPY && !c->o.compress) {
            c->o.compress = true;
            c->compress_by_auth = true;
        }
    }
    chanq_unpack_free(ar);
}

static void dispatch(chanq_client_t *c, const cq_mp_t *mp)
{
    chanq_msg_t m = {
        mp->channel_id, mp->broadcast, mp->stub_id, mp->msg_type, mp->body_len ? mp->body : NULL,
        mp->body_len};
    if (m.msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH)
        note_auth(c, &m);
    else
        note_subs(c, &m);
    if (m.stub_id) {
        stub_t *s = stub_find(c, m.stub_id);
        if (s) {
            stub_t copy = *s;
            stub_remove(c, s);
            copy.fn(copy.ud, &m);
            return;
        }
    }
    if (c->o.on_message)
        c->o.on_message(c->o.ud, &m);
}

/* Decompresses a Snappy body into c->inflate; sets *ret_p and *ret_n. */
static int inflate_body(chanq_client_t *c, const uint8_t *p, size_t n, const uint8_t **ret_p,
                        size_t *ret_n)
{
    uint64_t dlen;
    if (!cq_varint_get(p, p + n, &dlen) || dlen > UINT32_MAX)
        return CQ_ESNAPPY;
    if (dlen > c->o.max_inflated)
        return CQ_ETOOBIG;
    if (dlen > c->inflate_cap || !c->inflate) {
        size_t cap = dlen ? (size_t)dlen : 1;
        uint8_t *nb = cq_realloc(c->inflate, cap);
        if (!nb)
            return -ENOMEM;
        c->inflate = nb;
        c->inflate_cap = cap;
    }
    size_t out_n;
    int r = cq_snappy_uncompress(p, n, c->inflate, c->inflate_cap, &out_n);
    if (r < 0)
        return r == CQ_ETOOBIG ? CQ_ESNAPPY : r;
    *ret_p = c->inflate;
    *ret_n = out_n;
    return 0;
}

static int handle_packet(chanq_client_t *c, const cq_frame_t *fr, int *delivered)
{
    const uint8_t *body = fr->body;
    size_t len = fr->len;
    if (fr->ct == CQ_CT_SNAPPY) {
        int r = inflate_body(c, fr->body, fr->len, &body, &len);
        if (r < 0)
            return r;
    }
    /* Unknown compression bytes are read raw, as channeld does. */
    int r = cq_wire_packet_validate(body, len);
    if (r < 0)
        return r;
    cq_packet_iter_t it;
    cq_mp_t mp;
    cq_wire_packet_iter_init(&it, body, len);
    while (cq_wire_packet_next(&it, &mp) == 1) {
        dispatch(c, &mp);
        (*delivered)++;
    }
    return 0;
}

/* Parses and handles every complete packet at p[0..n). *ret_used = bytes of whole packets. */
static int parse_all(chanq_client_t *c, const uint8_t *p, size_t n, size_t *ret_used,
                     int *delivered)
{
    size_t off = 0;
    int r = 0;
    for (;;) {
        cq_frame_t fr;
        ssize_t k = cq_framing_parse(p + off, n - off, (cq_framing_mode_t)c->o.framing,
                                     CHANQ_MAX_BODY, &fr);
        if (k <= 0) {
            r = (int)k;
            break;
        }
        off += (size_t)k;
        r = handle_packet(c, &fr, delivered);
        if (r < 0)
            break;
    }
    *ret_used = off;
    return r;
}

static int feed_buffered(chanq_client_t *c, const uint8_t *data, size_t len, int *delivered)
{
    int r = cq_sbuf_append(&c->in, data, len);
    if (r < 0)
        return r;
    size_t used;
    r = parse_all(c, c->in.data + c->in_off, c->in.len - c->in_off, &used, delivered);
    c->in_off += used;
    if (c->in_off == c->in.len)
        c->in.len = c->in_off = 0;
    else if (c->in_off > CHANQ_MAX_BODY) {
        cq_sbuf_consume(&c->in, c->in_off);
        c->in_off = 0;
    }
    return r;
}

static int feed_direct(chanq_client_t *c, const uint8_t *data, size_t len, int *delivered)
{
    size_t used;
    c->in.len = c->in_off = 0;
    int r = parse_all(c, data, len, &used, delivered);
    if (r == 0 && used < len)
        r = cq_sbuf_append(&c->in, data + used, len - used);
    return r;
}

int chanq_client_feed(chanq_client_t *c, const void *data, size_t len)
{
    if (c->in_feed)
        return -EBUSY;
    if (c->err)
        return c->err;
    if (!len)
        return 0;
    if (!data)
        return -EINVAL;
    int delivered = 0, r;
    c->in_feed = true;
    if (c->in.len == c->in_off)
        r = feed_direct(c, data, len, &delivered);
    else
        r = feed_buffered(c, data, len, &delivered);
    c->in_feed = false;
    if (r < 0) {
        c->err = r;
        return r;
    }
    return delivered;
}

size_t chanq_client_in_pending(const chanq_client_t *c)
{
    return c->in.len - c->in_off;
}

/* ---- outbound ---------------------------------------------------------------------------- */

/* Appends a legacy-mode pad to pend when its length would be misread by legacy readers. */
static int legacy_fix(chanq_client_t *c)
{
    if (c->o.framing != CHANQ_FRAMING_LEGACY)
        return 0;
    uint32_t pad = cq_framing_legacy_pad((uint32_t)c->pend.len);
    if (!pad)
        return 0;
    int r = cq_sbuf_reserve(&c->pend, LEGACY_PAD_ROOM);
    if (r < 0)
        return r;
    c->pend.len += cq_wire_pad(c->pend.data + c->pend.len, pad);
    return 0;
}

/* Tries to write pend Snappy-compressed to out. Returns 1 if done, 0 if the plain form must be
 * used instead (compressed body too big or misread by legacy readers), or an error. */
static int seal_compressed(chanq_client_t *c)
{
    size_t max = cq_snappy_max_compressed(c->pend.len);
    int r = cq_sbuf_reserve(&c->out, CHANQ_HDR_LEN + max);
    if (r < 0)
        return r;
    uint8_t *h = c->out.data + c->out.len;
    size_t clen;
    r = cq_snappy_compress(c->pend.data, c->pend.len, h + CHANQ_HDR_LEN, &clen);
    if (r < 0)
        return r;
    if (clen == 0 || clen > CHANQ_MAX_BODY)
        return 0;
    if (c->o.framing == CHANQ_FRAMING_LEGACY && cq_framing_legacy_pad((uint32_t)clen))
        return 0;
    cq_framing_header(h, (uint32_t)clen, CQ_CT_SNAPPY, (cq_framing_mode_t)c->o.framing);
    c->out.len += CHANQ_HDR_LEN + clen;
    return 1;
}

static int seal_plain(chanq_client_t *c)
{
    int r = legacy_fix(c);
    if (r < 0)
        return r;
    r = cq_sbuf_reserve(&c->out, CHANQ_HDR_LEN + c->pend.len);
    if (r < 0)
        return r;
    uint8_t *h = c->out.data + c->out.len;
    cq_framing_header(h, (uint32_t)c->pend.len, CQ_CT_NONE, (cq_framing_mode_t)c->o.framing);
    memcpy(h + CHANQ_HDR_LEN, c->pend.data, c->pend.len);
    c->out.len += CHANQ_HDR_LEN + c->pend.len;
    return 0;
}

/* Closes the packet being filled (if any) into out. */
static int seal(chanq_client_t *c)
{
    if (!c->pend.len)
        return 0;
    int r = 0;
    if (c->o.compress)
        r = seal_compressed(c);
    if (r == 0)
        r = seal_plain(c);
    if (r < 0)
        return r;
    c->pend.len = 0;
    return 0;
}

/* Reserves room for a record of rec_size bytes in pend, closing the current packet first when
 * the record would push it over the limit. Returns a pointer to the room or NULL with *err. */
static uint8_t *pend_room(chanq_client_t *c, size_t rec_size, int *err)
{
    if (rec_size > CHANQ_MAX_BODY) {
        *err = CQ_ETOOBIG;
        return NULL;
    }
    if (c->pend.len + rec_size > CHANQ_MAX_BODY) {
        *err = seal(c);
        if (*err < 0)
            return NULL;
    }
    *err = cq_sbuf_reserve(&c->pend, rec_size);
    return *err < 0 ? NULL : c->pend.data + c->pend.len;
}

int chanq_client_send_raw(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                          uint32_t stub_id, uint32_t msg_type, const void *body, size_t len)
{
    if (len > CHANQ_MAX_BODY)
        return CQ_ETOOBIG;
    if (len && !body)
        return -EINVAL;
    cq_mp_t mp = {channel_id, broadcast, stub_id, msg_type, body, (uint32_t)len};
    size_t size = cq_wire_record_size(&mp);
    int err;
    uint8_t *p = pend_room(c, size, &err);
    if (!p)
        return err;
    size_t h = cq_wire_record_head(p, &mp);
    if (len)
        memcpy(p + h, body, len);
    c->pend.len += size;
    return 0;
}

int chanq_client_send(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                      uint32_t msg_type, const ProtobufCMessage *msg)
{
    size_t blen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    if (blen > CHANQ_MAX_BODY)
        return CQ_ETOOBIG;
    cq_mp_t mp = {channel_id, broadcast, stub_id, msg_type, NULL, (uint32_t)blen};
    size_t size = cq_wire_record_size(&mp);
    int err;
    uint8_t *p = pend_room(c, size, &err);
    if (!p)
        return err;
    size_t h = cq_wire_record_head(p, &mp);
    if (blen)
        protobuf_c_message_pack(msg, p + h);
    c->pend.len += size;
    return 0;
}

int chanq_client_out(chanq_client_t *c, const uint8_t **ret_p, size_t *ret_len)
{
    int r = seal(c);
    if (r < 0)
        return r;
    *ret_p = c->out.data + c->out_off;
    *ret_len = c->out.len - c->out_off;
    return 0;
}

void chanq_client_out_consume(chanq_client_t *c, size_t n)
{
    size_t avail = c->out.len - c->out_off;
    c->out_off += n < avail ? n : avail;
    if (c->out_off == c->out.len)
        c->out.len = c->out_off = 0;
}

size_t chanq_client_out_pending(const chanq_client_t *c)
{
    return c->out.len - c->out_off + c->pend.len;
}

int chanq_client_call(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                      const ProtobufCMessage *msg, chanq_msg_fn fn, void *ud, uint32_t *ret_stub)
{
    uint32_t stub;
    int r = chanq_client_stub_alloc(c, fn, ud, &stub);
    if (r < 0)
        return r;
    r = chanq_client_send(c, channel_id, broadcast, stub, msg_type, msg);
    if (r < 0) {
        chanq_client_stub_cancel(c, stub);
        return r;
    }
    if (ret_stub)
        *ret_stub = stub;
    return 0;
}

/* ---- convenience encoders ---------------------------------------------------------------- */

/* protobuf-c message structs hold non-const pointers; the encoders only read through them. */
static char *str_arg(const char *s)
{
    return (char *)(s ? s : "");
}

static Channeldpb__ChannelSubscriptionOptions *
opts_arg(const Channeldpb__ChannelSubscriptionOptions *o)
{
    return (Channeldpb__ChannelSubscriptionOptions *)o;
}

static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cq_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Keeps copies for chanq_client_reauth (pit and lt may be the copies themselves). */
static int keep_credentials(chanq_client_t *c, const char *pit, const char *lt)
{
    char *p = str_dup(pit), *l = str_dup(lt);
    if (!p || !l) {
        cq_free(p);
        cq_free(l);
        return -ENOMEM;
    }
    cq_free(c->pit);
    cq_free(c->lt);
    c->pit = p;
    c->lt = l;
    return 0;
}

int chanq_client_auth(chanq_client_t *c, uint32_t stub_id, const char *pit, const char *lt)
{
    int r = keep_credentials(c, str_arg(pit), str_arg(lt));
    if (r < 0)
        return r;
    Channeldpb__AuthMessage m = CHANNELDPB__AUTH_MESSAGE__INIT;
    m.playeridentifiertoken = c->pit; /* pit and lt may have been the copies just replaced */
    m.logintoken = c->lt;
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__AUTH, &m.base);
}

int chanq_client_create_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_type,
                                const char *metadata,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts)
{
    Channeldpb__CreateChannelMessage m = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    m.channeltype = (Channeldpb__ChannelType)channel_type;
    m.metadata = str_arg(metadata);
    m.suboptions = opts_arg(sub_opts);
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__CREATE_CHANNEL, &m.base);
}

int chanq_client_create_channel_data(chanq_client_t *c, uint32_t stub_id, uint32_t channel_type,
                                     const char *metadata,
                                     const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                                     const chanq_channel_data_t *data)
{
    Channeldpb__CreateChannelMessage m = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    m.channeltype = (Channeldpb__ChannelType)channel_type;
    m.metadata = str_arg(metadata);
    m.suboptions = opts_arg(sub_opts);
    if (data) {
        any.type_url = str_arg(data->type_url);
        any.value.data = (uint8_t *)data->value;
        any.value.len = data->len;
        m.data = &any;
        m.mergeoptions = (Channeldpb__ChannelDataMergeOptions *)data->merge_opts;
    }
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__CREATE_CHANNEL, &m.base);
}

int chanq_decode_data_update(const chanq_msg_t *msg,
                             Channeldpb__ChannelDataUpdateMessage **ret_update)
{
    if (msg->msg_type != CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE)
        return -EINVAL;
    Channeldpb__ChannelDataUpdateMessage *m = chanq_unpack(
        &channeldpb__channel_data_update_message__descriptor, msg->body, msg->body_len);
    if (!m || !m->data) {
        chanq_unpack_free(m);
        return CQ_EDECODE;
    }
    *ret_update = m;
    return 0;
}

int chanq_testdata_decode(const void *value, size_t len, chanq_testdata_t *ret)
{
    const uint8_t *p = value, *end = p + len;
    chanq_testdata_t t = {"", 0, 0};
    while (p < end) {
        uint64_t tag, v;
        size_t k = cq_varint_get(p, end, &tag);
        if (!k)
            return CQ_EDECODE;
        p += k;
        if ((tag & 7) == 0) {
            if (!(k = cq_varint_get(p, end, &v)))
                return CQ_EDECODE;
            if ((tag >> 3) == 2)
                t.num = (uint32_t)v;
            p += k;
        } else if ((tag & 7) == 2) {
            if (!(k = cq_varint_get(p, end, &v)) || v > (uint64_t)(end - p - (ptrdiff_t)k))
                return CQ_EDECODE;
            if ((tag >> 3) == 1) {
                t.text = (const char *)p + k;
                t.text_len = (size_t)v;
            }
            p += k + v;
        } else if ((tag & 7) == 1 || (tag & 7) == 5) {
            size_t n = (tag & 7) == 1 ? 8 : 4;
            if ((size_t)(end - p) < n)
                return CQ_EDECODE;
            p += n;
        } else {
            return CQ_EDECODE;
        }
    }
    *ret = t;
    return 0;
}

int chanq_client_remove_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id)
{
    Channeldpb__RemoveChannelMessage m = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    m.channelid = channel_id;
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__REMOVE_CHANNEL, &m.base);
}

int chanq_client_list_channel(chanq_client_t *c, uint32_t stub_id, uint32_t type_filter,
                              const char *const *filters, size_t n_filters)
{
    if (n_filters && !filters)
        return -EINVAL;
    Channeldpb__ListChannelMessage m = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    m.typefilter = (Channeldpb__ChannelType)type_filter;
    m.n_metadatafilters = n_filters;
    m.metadatafilters = (char **)filters;
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__LIST_CHANNEL, &m.base);
}

int chanq_client_sub_to_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                uint32_t conn_id,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts)
{
    int added = 0;
    if (conn_id == 0 || conn_id == c->conn_id) {
        added = asked_add(c, channel_id);
        if (added < 0)
            return added;
    }
    Channeldpb__SubscribedToChannelMessage m = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    m.connid = conn_id;
    m.suboptions = opts_arg(sub_opts);
    int r = chanq_client_send(c, channel_id, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL,
                              &m.base);
    if (r < 0 && added)
        asked_del(c, channel_id);
    return r;
}

int chanq_client_unsub_from_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                    uint32_t conn_id)
{
    Channeldpb__UnsubscribedFromChannelMessage m =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_MESSAGE__INIT;
    m.connid = conn_id;
    return chanq_client_send(c, channel_id, 0, stub_id,
                             CHANNELDPB__MESSAGE_TYPE__UNSUB_FROM_CHANNEL, &m.base);
}

int chanq_client_data_update(chanq_client_t *c, uint32_t channel_id, const char *type_url,
                             const void *value, size_t len)
{
    if (len && !value)
        return -EINVAL;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = str_arg(type_url);
    any.value.data = (uint8_t *)value;
    any.value.len = len;
    Channeldpb__ChannelDataUpdateMessage m = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
    m.data = &any;
    return chanq_client_send(c, channel_id, 0, 0, CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE,
                             &m.base);
}

int chanq_client_disconnect(chanq_client_t *c, uint32_t conn_id)
{
    Channeldpb__DisconnectMessage m = CHANNELDPB__DISCONNECT_MESSAGE__INIT;
    m.connid = conn_id;
    return chanq_client_send(c, 0, 0, 0, CHANNELDPB__MESSAGE_TYPE__DISCONNECT, &m.base);
}

int chanq_client_user_msg(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                          uint32_t msg_type, const void *payload, size_t len)
{
    if (msg_type < CHANQ_USER_SPACE_START)
        return -EINVAL;
    return chanq_client_send_raw(c, channel_id, broadcast, 0, msg_type, payload, len);
}

int chanq_client_server_forward(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                                uint32_t msg_type, uint32_t client_conn_id, const void *payload,
                                size_t len)
{
    if (msg_type < CHANQ_USER_SPACE_START || (len && !payload))
        return -EINVAL;
    Channeldpb__ServerForwardMessage m = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    m.clientconnid = client_conn_id;
    m.payload.data = (uint8_t *)payload;
    m.payload.len = len;
    return chanq_client_send(c, channel_id, broadcast, 0, msg_type, &m.base);
}

/* ---- a new connection (chanq_move.h) ----------------------------------------------------- */

int chanq_client_reset(chanq_client_t *c)
{
    if (c->in_feed)
        return -EBUSY;
    c->in.len = c->in_off = 0;
    c->pend.len = 0;
    c->out.len = c->out_off = 0;
    c->conn_id = 0;
    c->auth_ct = 0;
    c->err = 0;
    c->n_asked = 0;
    if (c->compress_by_auth)
        c->o.compress = false;
    c->compress_by_auth = false;
    while (c->n_stubs)
        chanq_client_stub_cancel(c, c->stubs[c->n_stubs - 1].id);
    return 0;
}

int chanq_client_reauth(chanq_client_t *c, uint32_t stub_id)
{
    if (!c->pit)
        return -ENOENT;
    return chanq_client_auth(c, stub_id, c->pit, c->lt);
}

int chanq_client_resubscribe(chanq_client_t *c, size_t *ret_n)
{
    size_t n = 0;
    int r = 0;
    /* Sending never changes the records (only results do), so the loop's array is stable. */
    for (size_t i = 0; i < c->n_subs && r == 0; i++) {
        const chanq_sub_t *s = &c->subs[i];
        Channeldpb__ChannelSubscriptionOptions *o = chanq_unpack(
            &channeldpb__channel_subscription_options__descriptor, s->opts, s->opts_len);
        if (!o) {
            r = CQ_EDECODE;
            break;
        }
        r = chanq_client_sub_to_channel(c, 0, s->channel_id, c->conn_id, o);
        chanq_unpack_free(o);
        if (r == 0)
            n++;
    }
    if (ret_n)
        *ret_n = n;
    return r;
}
