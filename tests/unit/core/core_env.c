/* core_env.c - the core unit tests' harness (core_env.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "channeld.pb-c.h"
#include "core_env.h"
#include "cq_core.h"
#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_sendq.h"
#include "cq_wire.h"
env_t E;

static void fake_flush(void *tctx)
{
    fconn_t *f = tctx;
    if (f->stalled)
        return;
    cq_sendq_t *q = cq_conn_sendq(f->conn);
    for (;;) {
        const struct iovec *iov;
        int n;
        assert_int_equal(cq_sendq_prepare(q, &iov, &n), 0);
        if (!n)
            return;
        f->writes++;
        size_t tot = 0;
        for (int i = 0; i < n; i++) {
            cq_sbuf_append(&f->out, iov[i].iov_base, iov[i].iov_len);
            tot += iov[i].iov_len;
        }
        cq_sendq_written(q, tot);
    }
}

static void fake_close(void *tctx)
{
    ((fconn_t *)tctx)->closed = 1;
}

/* The address every fake connection reports; NULL: "test:<index>" (not an IP address). */
const char *fake_peer_addr;

static int fake_peer(void *tctx, char *buf, size_t len)
{
    if (fake_peer_addr) {
        snprintf(buf, len, "%s", fake_peer_addr);
        return 0;
    }
    snprintf(buf, len, "test:%d", (int)((fconn_t *)tctx - E.fc));
    return 0;
}

static const cq_transport_ops_t fake_ops = {"fake", fake_flush, fake_close, fake_peer};

static void wake(void *ud, int w) {}
static const cq_core_ops_t ops = {wake};

/* Client FSM for the next env_up (NULL: the built-in non-authoritative one). */
const char *client_fsm_json;

void env_up(int workers, const cq_core_opts_t *extra)
{
    memset(&E, 0, sizeof(E));
    char err[256];
    const char *cj = client_fsm_json ? client_fsm_json : cq_embedded_client_fsm;
    size_t cl = client_fsm_json ? strlen(client_fsm_json) : cq_embedded_client_fsm_len;
    client_fsm_json = NULL;
    assert_int_equal(cq_fsm_load_json(cj, cl, &E.cfsm, err, sizeof(err)), 0);
    assert_int_equal(cq_fsm_load_json(cq_embedded_server_fsm, cq_embedded_server_fsm_len, &E.sfsm,
                                      err, sizeof(err)),
                     0);
    assert_int_equal(cq_settings_load_json(cq_embedded_settings, cq_embedded_settings_len,
                                           &E.settings, err, sizeof(err)),
                     0);
    cq_core_opts_t o = extra ? *extra : (cq_core_opts_t){0};
    o.workers = workers;
    o.client_fsm = E.cfsm;
    o.server_fsm = E.sfsm;
    o.settings = E.settings;
    o.server_bypass_auth = true;
    if (!o.max_packet_size)
        o.max_packet_size = 65535;
    o.max_connections = 1000;
    o.max_channels = 65535;
    o.conn_id_bits = 31;
    assert_int_equal(cq_shared_new(&o, &ops, NULL, &E.sh, err, sizeof(err)), 0);
    E.n = workers;
    for (int i = 0; i < workers; i++)
        assert_non_null(E.cores[i] = cq_core_new(E.sh, i));
    E.now = 1000;
}

/* Runs inboxes and flushes until nothing moves. */
void pump(void)
{
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < E.n; i++)
            cq_core_drain(E.cores[i], E.now);
        for (int i = 0; i < E.n; i++)
            cq_core_flush(E.cores[i]);
    }
    for (int i = 0; i < E.nfc; i++) {
        fconn_t *f = &E.fc[i];
        if (f->closed && !f->released) {
            f->released = 1;
            cq_core_conn_release(E.cores[f->worker], f->conn);
        }
    }
}

void env_down(void)
{
    pump();
    for (int i = 0; i < E.nfc; i++) {
        if (!E.fc[i].released)
            cq_core_conn_close(E.cores[E.fc[i].worker], E.fc[i].conn, 0, "test end");
    }
    pump();
    for (int i = 0; i < E.n; i++)
        cq_core_free(E.cores[i]);
    for (int i = 0; i < E.nfc; i++)
        cq_sbuf_done(&E.fc[i].out);
    cq_shared_free(E.sh);
    cq_fsm_free(E.cfsm);
    cq_fsm_free(E.sfsm);
    cq_settings_free(E.settings);
    assert_int_equal(cq_buf_live(), 0);
}

fconn_t *connect_as(int type)
{
    uint32_t id = cq_shared_conn_id_alloc(E.sh, type);
    assert_true(id > 0);
    fconn_t *f = &E.fc[E.nfc++];
    f->worker = cq_shared_conn_worker(E.sh, id);
    f->conn = cq_core_conn_new(E.cores[f->worker], id, type, CQ_FRAMING_FIXED, &fake_ops, f, E.now);
    assert_non_null(f->conn);
    return f;
}

int feed(fconn_t *f, const void *p, size_t n)
{
    int r = cq_core_conn_input(E.cores[f->worker], f->conn, p, n, E.now);
    pump();
    return r;
}

void send_msg(fconn_t *f, uint32_t ch, uint32_t bc, uint32_t stub, uint32_t type,
              const ProtobufCMessage *m)
{
    cq_buf_t *rec = cq_wire_record_msg(ch, bc, stub, type, m);
    uint8_t pkt[70000];
    cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
    memcpy(pkt + 5, rec->data, rec->len);
    assert_int_equal(feed(f, pkt, 5 + rec->len), 0);
    cq_buf_unref(rec);
}

/* Counts received MessagePacks of msg_type (all types if 0); consumes the output. */
int take(fconn_t *f, uint32_t msg_type, cq_mp_t *last, uint8_t *body_copy)
{
    int n = scan(f, msg_type, last, body_copy);
    f->out.len = 0;
    return n;
}

/* Calls fn(ud, mp) for each MessagePack in f's output, in order. */
static void each_msg(fconn_t *f, void (*fn)(void *ud, const cq_mp_t *mp), void *ud)
{
    size_t off = 0;
    while (off < f->out.len) {
        cq_frame_t fr;
        ssize_t k =
            cq_framing_parse(f->out.data + off, f->out.len - off, CQ_FRAMING_FIXED, 65535, &fr);
        assert_true(k > 0);
        cq_packet_iter_t it;
        cq_mp_t mp;
        cq_wire_packet_iter_init(&it, fr.body, fr.len);
        while (cq_wire_packet_next(&it, &mp) == 1)
            fn(ud, &mp);
        off += (size_t)k;
    }
}

typedef struct scan_st {
    uint32_t msg_type;
    int n;
    cq_mp_t *last;
    uint8_t *body_copy;
    uint32_t *types;
    int max;
} scan_st_t;

static void scan_one(void *ud, const cq_mp_t *mp)
{
    scan_st_t *st = ud;
    if (st->types) {
        assert_true(st->n < st->max);
        st->types[st->n++] = mp->msg_type;
        return;
    }
    if (st->msg_type && mp->msg_type != st->msg_type)
        return;
    st->n++;
    if (st->last)
        *st->last = *mp;
    if (st->body_copy)
        memcpy(st->body_copy, mp->body, mp->body_len);
}

int take_types(fconn_t *f, uint32_t *types, int max)
{
    scan_st_t st = {0, 0, NULL, NULL, types, max};
    each_msg(f, scan_one, &st);
    f->out.len = 0;
    return st.n;
}

/* Like take, but leaves the output in place. */
int scan(fconn_t *f, uint32_t msg_type, cq_mp_t *last, uint8_t *body_copy)
{
    scan_st_t st = {msg_type, 0, last, body_copy, NULL, 0};
    each_msg(f, scan_one, &st);
    return st.n;
}

const char ENV_TURL[] = "type.googleapis.com/testpb.TestChannelDataMessage";

void env_auth(fconn_t *f)
{
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    a.playeridentifiertoken = "p";
    a.logintoken = "l";
    send_msg(f, 0, 0, 0, 1, &a.base);
    assert_int_equal(take(f, 1, NULL, NULL), 1);
}

Channeldpb__AuthResultMessage *env_auth_pit(fconn_t *f, const char *pit)
{
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    a.playeridentifiertoken = (char *)pit;
    a.logintoken = "l";
    send_msg(f, 0, 0, 0, 1, &a.base);
    cq_mp_t mp;
    uint8_t body[256];
    assert_int_equal(scan(f, 1, &mp, body), 1);
    Channeldpb__AuthResultMessage *ar =
        channeldpb__auth_result_message__unpack(NULL, mp.body_len, body);
    assert_non_null(ar);
    return ar;
}

void env_send_update(fconn_t *f, uint32_t ch, const void *v, size_t n)
{
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = (char *)ENV_TURL;
    any.value.data = (uint8_t *)v;
    any.value.len = n;
    Channeldpb__ChannelDataUpdateMessage m = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
    m.data = &any;
    send_msg(f, ch, 0, 0, 8, &m.base);
}

void env_create_data_channel(fconn_t *srv, const char *init)
{
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = (char *)ENV_TURL;
    any.value.data = (uint8_t *)init;
    any.value.len = strlen(init);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    cc.data = &any;
    send_msg(srv, 0, 0, 1, 3, &cc.base);
    take(srv, 0, NULL, NULL);
}
