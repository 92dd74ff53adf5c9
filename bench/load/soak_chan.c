/* soak_chan.c - the soak's channel side: broadcast, channel data and reconnect churn.
 *
 * Broadcast: the publisher (a SERVER connection) possesses GLOBAL and sends user messages with
 * broadcast ALL_BUT_SERVER whose payload starts with a 64-bit sequence number (little endian).
 * It subscribes each CLIENT to GLOBAL after the client's AUTH, and notes the sequence number of
 * the next message it will send: the messages after the SUB on the publisher's connection are
 * fanned out after the subscription, so that number is exactly the first one the client must
 * see, and every later one must follow without a gap.
 *
 * Channel data: the owner (a SERVER connection) creates a SUBWORLD channel with a
 * TestChannelDataMessage and sends updates whose num counts 1, 2, 3...; a subscriber's merged
 * fan-outs carry the newest num of their window, so what it sees must only increase, and after
 * the drain it must be the last num sent.
 *
 * Churn: `churn` CLIENT slots; each connects, authenticates, is subscribed to GLOBAL like a
 * broadcast subscriber (same gap check), and after a random life leaves: every other one
 * unsubscribes first, the rest just close. Then the slot starts over.
 */
#include "soak_int.h"

#include <stdlib.h>
#include <string.h>

typedef enum role { R_PUB, R_OWNER, R_BC, R_DATA, R_CHURN } role_t;

static const char *const role_names[] = {"publisher", "data owner", "broadcast sub", "data sub",
                                         "churn client"};

typedef struct sconn {
    chanq_uv_t *cu; /* NULL when not connected */
    role_t role;
    int idx;
    bool closing;    /* the driver closed it: its close is expected */
    bool ready;      /* publisher/owner: channel created; subscribers: SUB result seen */
    bool started;    /* subscribers: the first message arrived */
    uint64_t expect; /* GLOBAL subscribers: next sequence; data: last num seen */
    uint64_t step_t; /* when the pending setup step started; 0: none */
    uint64_t leave_at;
    uint64_t recv;
    uint32_t conn_id;
} sconn_t;

static sconn_t pub, owner;
static sconn_t *bcs, *datas, *churns;
static uint64_t bc_seq;   /* sequence number of the next broadcast */
static uint64_t data_num; /* num of the last update sent */
static uint32_t data_chan;
static uint64_t t_run0; /* start of PH_RUN, for the rates */
static uint8_t *bc_payload;

static void sub_start(sconn_t *c);

/* ---- connections ------------------------------------------------------------------------- */

static void on_close(chanq_uv_t *u, int err, void *ud)
{
    sconn_t *c = ud;
    (void)u;
    c->cu = NULL;
    c->ready = false;
    if (!c->closing) {
        soak_fail(SK_CLOSE, "%s %d closed by the server or the network: %s", role_names[c->role],
                  c->idx, err ? cq_strerror(err) : "eof");
        return;
    }
    if (c->role == R_CHURN && soak_phase == PH_RUN) {
        SS.churn_cycles++;
        sub_start(c);
    }
}

static void close_conn(sconn_t *c)
{
    c->closing = true;
    c->step_t = 0;
    if (c->cu)
        chanq_uv_close(c->cu);
}

static void dial(sconn_t *c, const struct sockaddr_in *to,
                 void (*on_connect)(chanq_uv_t *, int, void *),
                 void (*on_message)(chanq_uv_t *, const chanq_msg_t *, void *))
{
    chanq_uv_cbs_t cbs = {.on_connect = on_connect, .on_message = on_message, .on_close = on_close};
    c->closing = false;
    c->ready = false;
    c->started = false;
    c->conn_id = 0;
    c->step_t = soak_now_ms();
    int r = chanq_uv_connect(soak_loop, (const struct sockaddr *)to, NULL, &cbs, c, &c->cu);
    if (r < 0)
        soak_die("connect: %s", uv_strerror(r));
}

/* Sends AUTH with a stub whose callback is fn. */
static void auth(sconn_t *c, chanq_msg_fn fn, const char *pit)
{
    chanq_client_t *core = chanq_uv_client(c->cu);
    uint32_t stub;
    int r = chanq_client_stub_alloc(core, fn, c, &stub);
    if (r == 0)
        r = chanq_client_auth(core, stub, pit, "soak");
    if (r < 0)
        soak_die("auth: %s", cq_strerror(r));
}

/* ---- publisher and data owner -------------------------------------------------------------- */

static void owner_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    (void)u;
    (void)m;
    (void)ud; /* copies of SUB results and the owner's own fan-outs: nothing to check */
}

static void on_created(void *ud, const chanq_msg_t *m)
{
    sconn_t *c = ud;
    Channeldpb__CreateChannelResultMessage *res =
        chanq_unpack(&channeldpb__create_channel_result_message__descriptor, m->body, m->body_len);
    uint32_t want = c->role == R_PUB ? SOAK_CT_GLOBAL : SOAK_CT_SUBWORLD;
    if (!res || res->channeltype != want) {
        soak_fail(SK_ERRCODE, "%s: CREATE_CHANNEL failed", role_names[c->role]);
        chanq_unpack_free(res);
        return;
    }
    if (c->role == R_OWNER)
        data_chan = res->channelid;
    chanq_unpack_free(res);
    c->ready = true;
    c->step_t = 0;
    sconn_t *subs = c->role == R_PUB ? bcs : datas;
    int n = c->role == R_PUB ? SO.bc_subs : SO.data_subs;
    for (int i = 0; i < n; i++)
        sub_start(&subs[i]);
    if (c->role == R_PUB)
        for (int i = 0; i < SO.churn; i++)
            sub_start(&churns[i]);
}

static void owner_authed(void *ud, const chanq_msg_t *m)
{
    sconn_t *c = ud;
    (void)m;
    chanq_client_t *core = chanq_uv_client(c->cu);
    if (!chanq_client_conn_id(core)) {
        soak_fail(SK_ERRCODE, "%s: AUTH refused", role_names[c->role]);
        return;
    }
    uint32_t stub;
    int r = chanq_client_stub_alloc(core, on_created, c, &stub);
    if (r == 0 && c->role == R_PUB) {
        r = chanq_client_create_channel(core, stub, SOAK_CT_GLOBAL, "soak", NULL);
    } else if (r == 0) {
        static const uint8_t init[] = {0x0a, 4, 'i', 'n', 'i', 't'}; /* text = "init" */
        chanq_channel_data_t d = {.type_url = SOAK_TESTPB_URL, .value = init, .len = sizeof(init)};
        r = chanq_client_create_channel_data(core, stub, SOAK_CT_SUBWORLD, "soak", NULL, &d);
    }
    if (r < 0)
        soak_die("create_channel: %s", cq_strerror(r));
}

static void owner_connected(chanq_uv_t *u, int status, void *ud)
{
    (void)u;
    if (status == 0)
        auth(ud, owner_authed, "soak-server");
}

/* ---- subscribers --------------------------------------------------------------------------- */

/* A GLOBAL user message: the sequence check of broadcast subscribers and churn clients. */
static void on_bc(sconn_t *c, const chanq_msg_t *m)
{
    Channeldpb__ServerForwardMessage *f =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, m->body, m->body_len);
    if (!f || f->payload.len != (size_t)SO.bc_size) {
        soak_fail(SK_PROTO, "%s %d: bad broadcast (%u B)", role_names[c->role], c->idx,
                  m->body_len);
        chanq_unpack_free(f);
        return;
    }
    uint64_t seq;
    memcpy(&seq, f->payload.data, 8);
    chanq_unpack_free(f);
    if (seq != c->expect) {
        soak_fail(SK_GAP, "%s %d: broadcast seq %llu, expected %llu%s", role_names[c->role], c->idx,
                  (unsigned long long)seq, (unsigned long long)c->expect,
                  c->started ? "" : " (the first after SUB)");
    }
    c->started = true;
    c->expect = seq + 1;
    c->recv++;
    if (c->role == R_CHURN)
        SS.churn_recv++;
    else
        SS.bc_recv++;
}

/* A channel-data fan-out: num must increase (the first one is the full state). */
static void on_fanout(sconn_t *c, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataUpdateMessage *u;
    chanq_testdata_t td;
    if (chanq_decode_data_update(m, &u) < 0) {
        soak_fail(SK_PROTO, "data sub %d: undecodable fan-out", c->idx);
        return;
    }
    int r = -1;
    if (u->data && u->data->type_url && strcmp(u->data->type_url, SOAK_TESTPB_URL) == 0)
        r = chanq_testdata_decode(u->data->value.data, u->data->value.len, &td);
    chanq_unpack_free(u);
    if (r < 0) {
        soak_fail(SK_PROTO, "data sub %d: fan-out is not a TestChannelDataMessage", c->idx);
        return;
    }
    if (c->started && td.num <= c->expect)
        soak_fail(SK_GAP, "data sub %d: num %u after %llu", c->idx, td.num,
                  (unsigned long long)c->expect);
    c->started = true;
    c->expect = td.num;
    c->recv++;
    SS.data_fanouts++;
}

static void sub_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    sconn_t *c = ud;
    (void)u;
    uint32_t chan = c->role == R_DATA ? data_chan : SOAK_GLOBAL_CHANNEL;
    if (m->channel_id != chan)
        return;
    if (m->msg_type == SOAK_MT_SUB) {
        c->ready = true;
        c->step_t = 0;
    } else if (c->role == R_DATA && m->msg_type == SOAK_MT_DATA) {
        on_fanout(c, m);
    } else if (c->role != R_DATA && m->msg_type == SOAK_USER_MSG) {
        on_bc(c, m);
    }
}

/* The subscriber's AUTH succeeded: its channel's owner subscribes it. */
static void sub_authed(void *ud, const chanq_msg_t *m)
{
    sconn_t *c = ud;
    (void)m;
    c->conn_id = chanq_client_conn_id(chanq_uv_client(c->cu));
    if (!c->conn_id) {
        soak_fail(SK_ERRCODE, "%s %d: AUTH refused", role_names[c->role], c->idx);
        close_conn(c);
        return;
    }
    sconn_t *o = c->role == R_DATA ? &owner : &pub;
    if (!o->cu || !o->ready) {
        close_conn(c);
        return;
    }
    int r;
    if (c->role == R_DATA) {
        Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
        so.has_fanoutintervalms = true;
        so.fanoutintervalms = (uint32_t)SO.data_interval;
        r = chanq_client_sub_to_channel(chanq_uv_client(o->cu), 0, data_chan, c->conn_id, &so);
    } else {
        c->expect = bc_seq; /* the next broadcast goes out after this SUB */
        r = chanq_client_sub_to_channel(chanq_uv_client(o->cu), 0, SOAK_GLOBAL_CHANNEL, c->conn_id,
                                        NULL);
    }
    if (r < 0)
        soak_die("sub_to_channel: %s", cq_strerror(r));
    c->step_t = soak_now_ms();
}

static void sub_connected(chanq_uv_t *u, int status, void *ud)
{
    (void)u;
    if (status == 0)
        auth(ud, sub_authed, "soak-client");
}

static void sub_start(sconn_t *c)
{
    c->recv = 0;
    if (c->role == R_CHURN) {
        uint64_t life = (uint64_t)(SO.churn_life * 1000.0);
        c->leave_at = soak_now_ms() + life / 2 + soak_rand() % (life / 2 + 1);
    }
    dial(c, &soak_client_addr, sub_connected, sub_msg);
}

/* A churn client leaves: every other one unsubscribes from GLOBAL first. */
static void churn_leave(sconn_t *c)
{
    if (c->cu && c->conn_id && (SS.churn_cycles & 1))
        chanq_client_unsub_from_channel(chanq_uv_client(c->cu), 0, SOAK_GLOBAL_CHANNEL, c->conn_id);
    close_conn(c);
}

/* ---- the phases ------------------------------------------------------------------------------ */

static sconn_t *alloc_conns(int n, role_t role)
{
    sconn_t *v = calloc((size_t)(n > 0 ? n : 1), sizeof(*v));
    if (!v)
        soak_die("out of memory");
    for (int i = 0; i < n; i++)
        v[i] = (sconn_t){.role = role, .idx = i};
    return v;
}

void soak_chan_start(void)
{
    bcs = alloc_conns(SO.bc_subs, R_BC);
    datas = alloc_conns(SO.data_subs, R_DATA);
    churns = alloc_conns(SO.churn, R_CHURN);
    bc_payload = calloc(1, (size_t)SO.bc_size);
    if (!bc_payload)
        soak_die("out of memory");
    memset(bc_payload + 8, 'b', (size_t)SO.bc_size - 8);
    pub = (sconn_t){.role = R_PUB};
    owner = (sconn_t){.role = R_OWNER};
    dial(&pub, &soak_server_addr, owner_connected, owner_msg);
    if (SO.data_subs > 0)
        dial(&owner, &soak_server_addr, owner_connected, owner_msg);
}

static bool all_ready(const sconn_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!v[i].ready)
            return false;
    return true;
}

bool soak_chan_ready(void)
{
    return pub.ready && (SO.data_subs == 0 || owner.ready) && all_ready(bcs, SO.bc_subs) &&
           all_ready(datas, SO.data_subs) && all_ready(churns, SO.churn);
}

/* Messages due at rate r since the run started, minus those sent (at most 1000 per tick). */
static uint64_t due(double r, uint64_t sent, uint64_t now)
{
    double want = r * (double)(now - t_run0) / 1000.0;
    if (want <= (double)sent)
        return 0;
    uint64_t n = (uint64_t)want - sent;
    return n > 1000 ? 1000 : n;
}

static void send_broadcasts(uint64_t now)
{
    for (uint64_t n = due(SO.bc_rate, SS.bc_sent, now); n && pub.cu; n--) {
        memcpy(bc_payload, &bc_seq, 8);
        int r = chanq_client_server_forward(chanq_uv_client(pub.cu), SOAK_GLOBAL_CHANNEL,
                                            SOAK_BC_ALL_BUT_SRV, SOAK_USER_MSG, 0, bc_payload,
                                            (size_t)SO.bc_size);
        if (r < 0)
            soak_die("publish: %s", cq_strerror(r));
        bc_seq++;
        SS.bc_sent++;
    }
}

static void send_updates(uint64_t now)
{
    uint8_t v[64];
    for (uint64_t n = due(SO.data_rate, SS.data_sent, now); n && owner.cu; n--) {
        /* TestChannelDataMessage{text = "u", num = data_num + 1} */
        uint64_t num = ++data_num;
        size_t k = 0;
        v[k++] = 0x0a;
        v[k++] = 1;
        v[k++] = 'u';
        v[k++] = 0x10;
        do {
            v[k++] = (uint8_t)((num & 0x7f) | (num > 0x7f ? 0x80 : 0));
            num >>= 7;
        } while (num);
        int r =
            chanq_client_data_update(chanq_uv_client(owner.cu), data_chan, SOAK_TESTPB_URL, v, k);
        if (r < 0)
            soak_die("data update: %s", cq_strerror(r));
        SS.data_sent++;
    }
}

static void check_stalls(sconn_t *v, int n, uint64_t now)
{
    for (int i = 0; i < n; i++) {
        if (v[i].step_t && now - v[i].step_t > SOAK_STEP_TIMEOUT_MS) {
            soak_fail(SK_STALL, "%s %d: no AUTH or SUB result within %u ms", role_names[v[i].role],
                      i, SOAK_STEP_TIMEOUT_MS);
            close_conn(&v[i]);
        }
    }
}

void soak_chan_tick(uint64_t now)
{
    check_stalls(&pub, 1, now);
    check_stalls(&owner, 1, now);
    check_stalls(bcs, SO.bc_subs, now);
    check_stalls(datas, SO.data_subs, now);
    check_stalls(churns, SO.churn, now);
    if (soak_phase != PH_RUN)
        return;
    if (!t_run0)
        t_run0 = now;
    if (pub.ready)
        send_broadcasts(now);
    if (owner.ready)
        send_updates(now);
    for (int i = 0; i < SO.churn; i++)
        if (churns[i].ready && churns[i].cu && !churns[i].closing && now >= churns[i].leave_at)
            churn_leave(&churns[i]);
}

bool soak_chan_drained(void)
{
    for (int i = 0; i < SO.bc_subs; i++)
        if (bcs[i].cu && bcs[i].expect != bc_seq)
            return false;
    for (int i = 0; i < SO.data_subs; i++)
        if (datas[i].cu && datas[i].expect != data_num)
            return false;
    return true;
}

void soak_chan_check(void)
{
    for (int i = 0; i < SO.bc_subs; i++)
        if (bcs[i].expect != bc_seq)
            soak_fail(SK_LOST, "broadcast sub %d ends at seq %llu of %llu", i,
                      (unsigned long long)bcs[i].expect, (unsigned long long)bc_seq);
    for (int i = 0; i < SO.data_subs; i++)
        if (datas[i].expect != data_num)
            soak_fail(SK_LOST, "data sub %d ends at num %llu, the last update was %llu", i,
                      (unsigned long long)datas[i].expect, (unsigned long long)data_num);
}

void soak_chan_close(void)
{
    for (int i = 0; i < SO.churn; i++)
        close_conn(&churns[i]);
    for (int i = 0; i < SO.bc_subs; i++)
        close_conn(&bcs[i]);
    for (int i = 0; i < SO.data_subs; i++)
        close_conn(&datas[i]);
    close_conn(&pub);
    close_conn(&owner);
}
