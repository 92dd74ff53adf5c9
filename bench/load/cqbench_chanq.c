/* cqbench_chanq.c - chanqd: the channel client protocol over libchanq. The publisher is a
 * SERVER connection (libchanq's libuv adapter) that creates the channel (GLOBAL, or SUBWORLD with
 * initial data for the data shape) and subscribes each CLIENT connection to it; it publishes
 * ServerForwardMessage with broadcast ALL_BUT_SERVER. Subscribers are libchanq sans-I/O cores fed
 * from cqbench_sub.c's reads.
 */
#include "cqbench_int.h"

#include <string.h>

/* ---- ServerForwardMessage payload -------------------------------------------------------- */

/* One field of a serialized protobuf message: its number, wire type, varint value (wire type
 * 0; the length for wire type 2) and bytes (wire types 1, 2, 5; borrowed from the input). */
typedef struct pbf {
    uint32_t num;
    unsigned wt;
    uint64_t v;
    const uint8_t *p;
    size_t len;
} pbf_t;

static bool pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned sh = 0; *pp < end && sh < 64; sh += 7) {
        uint8_t b = *(*pp)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Reads the field at *pp and advances past it: 1 = a field, 0 = end of input, -1 = malformed. */
static int pb_next(const uint8_t **pp, const uint8_t *end, pbf_t *f)
{
    uint64_t tag;
    if (*pp >= end)
        return 0;
    if (!pb_varint(pp, end, &tag))
        return -1;
    *f = (pbf_t){.num = (uint32_t)(tag >> 3), .wt = (unsigned)(tag & 7)};
    size_t k;
    switch (f->wt) {
    case 0:
        return pb_varint(pp, end, &f->v) ? 1 : -1;
    case 1:
    case 5:
        k = f->wt == 1 ? 8 : 4;
        break;
    case 2:
        if (!pb_varint(pp, end, &f->v) || f->v > (uint64_t)(end - *pp))
            return -1;
        k = (size_t)f->v;
        break;
    default:
        return -1;
    }
    if ((size_t)(end - *pp) < k)
        return -1;
    f->p = *pp;
    f->len = k;
    *pp += k;
    return 1;
}

/* ServerForwardMessage.payload (field 2), or NULL. */
static const uint8_t *sfm_payload(const uint8_t *p, size_t n, size_t *plen)
{
    const uint8_t *end = p + n;
    pbf_t f;
    while (pb_next(&p, end, &f) > 0) {
        if (f.num == 2 && f.wt == 2) {
            *plen = f.len;
            return f.p;
        }
    }
    return NULL;
}

/* ---- connections and messages ------------------------------------------------------------ */

static void cq_on_close(chanq_uv_t *u, int err, void *ud)
{
    bconn_t *c = ud;
    (void)u;
    c->cu = NULL;
    c->connected = false;
    cqb_conn_lost(c, err);
}

static void cq_sub_msg(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    if (O.mode == MODE_DATA) {
        if (m->channel_id != G.chan_id)
            return;
        if (m->msg_type == MT_DATA_UPDATE)
            cqb_on_data_fanout(c, m);
        else if (m->msg_type == MT_SUB_TO_CHAN)
            cqb_sub_ready(c);
        return;
    }
    if (m->msg_type == USER_MSG_TYPE) {
        size_t plen = 0;
        const uint8_t *pl = sfm_payload(m->body, m->body_len, &plen);
        if (pl)
            cqb_on_payload(c, pl, plen);
        else
            G.bad++;
    } else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL &&
               m->channel_id == GLOBAL_CHANNEL) {
        cqb_sub_ready(c);
    }
}

static void cq_pub_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    (void)u;
    (void)ud;
    (void)m; /* AUTH copies, SUB results: nothing to do */
}

static void cq_sub_auth(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    (void)m;
    uint32_t id = chanq_client_conn_id(c->core);
    if (!id) {
        cqb_finish("chanq: client AUTH failed");
        return;
    }
    if (!G.pub.cu) {
        cqb_finish("chanq: publisher gone");
        return;
    }
    int r;
    if (O.mode == MODE_DATA) {
        Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
        so.has_fanoutintervalms = true;
        so.fanoutintervalms = (uint32_t)O.interval;
        r = chanq_client_sub_to_channel(chanq_uv_client(G.pub.cu), 0, G.chan_id, id, &so);
    } else {
        r = chanq_client_sub_to_channel(chanq_uv_client(G.pub.cu), 0, GLOBAL_CHANNEL, id, NULL);
    }
    if (r < 0)
        cqb_die("sub_to_channel: %s", cq_strerror(r));
}

static void cq_pub_created(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    Channeldpb__CreateChannelResultMessage *res =
        chanq_unpack(&channeldpb__create_channel_result_message__descriptor, m->body, m->body_len);
    if (!res) {
        cqb_finish("chanq: bad CREATE_CHANNEL result");
        return;
    }
    if (O.mode == MODE_DATA) {
        G.chan_id = res->channelid;
        if (!G.chan_id || res->channeltype != CHANNELDPB__CHANNEL_TYPE__SUBWORLD) {
            chanq_unpack_free(res);
            cqb_finish("chanq: CREATE_CHANNEL(SUBWORLD) failed");
            return;
        }
    }
    chanq_unpack_free(res);
    c->ready = true;
    cqb_start_more();
}

static void cq_pub_auth(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    (void)m;
    if (!chanq_client_conn_id(chanq_uv_client(c->cu))) {
        cqb_finish("chanq: server AUTH failed");
        return;
    }
    chanq_client_t *core = chanq_uv_client(c->cu);
    uint32_t stub;
    if (chanq_client_stub_alloc(core, cq_pub_created, c, &stub) < 0)
        cqb_die("stub_alloc failed");
    int r;
    if (O.mode == MODE_DATA) {
        /* initial state: TestChannelDataMessage{text: DATA_INITIAL_TXT} (num 0: not encoded) */
        uint8_t init[64];
        size_t n = strlen(DATA_INITIAL_TXT);
        init[0] = 0x0a;
        init[1] = (uint8_t)n;
        memcpy(init + 2, DATA_INITIAL_TXT, n);
        chanq_channel_data_t data = {.type_url = TESTPB_TYPE_URL, .value = init, .len = n + 2};
        r = chanq_client_create_channel_data(core, stub, CT_SUBWORLD, "cqbench", NULL, &data);
    } else {
        r = chanq_client_create_channel(core, stub, CT_GLOBAL, "cqbench", NULL);
    }
    if (r < 0)
        cqb_die("create_channel failed: %s", cq_strerror(r));
}

static void cq_on_connect(chanq_uv_t *u, int status, void *ud)
{
    bconn_t *c = ud;
    if (status < 0)
        return; /* on_close follows */
    c->connected = true;
    chanq_client_t *core = chanq_uv_client(u);
    uint32_t stub;
    int r = chanq_client_stub_alloc(core, cq_pub_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(core, stub, "cqbench-server", "cqbench");
    if (r < 0)
        cqb_die("auth: %s", cq_strerror(r));
}

/* The publisher: a SERVER connection through libchanq's libuv adapter. */
void cqb_chanq_connect_pub(bconn_t *c)
{
    chanq_uv_cbs_t cbs = {
        .on_connect = cq_on_connect,
        .on_message = cq_pub_msg,
        .on_close = cq_on_close,
    };
    int r = chanq_uv_connect(G.loop, (const struct sockaddr *)&O.saddr, NULL, &cbs, c, &c->cu);
    if (r < 0)
        cqb_die("connect: %s", uv_strerror(r));
}

/* ---- subscribers ------------------------------------------------------------------------- */

/* Writes what a subscriber's sans-I/O core has queued (ws: once the upgrade is done). */
void cqb_sub_chanq_flush(bconn_t *c)
{
    const uint8_t *p;
    size_t n;
    if (c->ws && !bench_ws_open(c->ws))
        return;
    int r = chanq_client_out(c->core, &p, &n);
    if (r < 0)
        cqb_die("chanq_client_out: %s", cq_strerror(r));
    if (n) {
        cqb_sub_send(c, p, n);
        chanq_client_out_consume(c->core, n);
    }
}

/* A subscriber (CLIENT) is connected: create its core and authenticate. */
void cqb_chanq_sub_start(bconn_t *c)
{
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = cq_sub_msg;
    o.ud = c;
    uint32_t stub;
    int r = chanq_client_new(&o, &c->core);
    if (r == 0)
        r = chanq_client_stub_alloc(c->core, cq_sub_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(c->core, stub, "cqbench", "cqbench");
    if (r < 0)
        cqb_die("auth: %s", cq_strerror(r));
    if (O.transport == TR_WS)
        cqb_ws_start(c);
    cqb_sub_chanq_flush(c);
}
