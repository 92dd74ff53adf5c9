/* test_client.c - unit tests of the libchanq sans-I/O core (clients/c/chanq.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq.h"
#include "cq_framing.h"
#include "cq_snappy.h"

/* ---- §1.2 test vectors ------------------------------------------------------------------- */

static const uint8_t V_AUTH_REQ[] = {0x43, 0x48, 0x00, 0x14, 0x00, 0x0a, 0x12, 0x18, 0x01,
                                     0x20, 0x01, 0x2a, 0x0c, 0x0a, 0x04, 0x74, 0x65, 0x73,
                                     0x74, 0x12, 0x04, 0x74, 0x65, 0x73, 0x74};
static const uint8_t V_AUTH_RES[] = {0x43, 0x48, 0x00, 0x0a, 0x00, 0x0a, 0x08, 0x18,
                                     0x01, 0x20, 0x01, 0x2a, 0x02, 0x10, 0x01};
static const uint8_t V_SUB_RES[] = {0x43, 0x48, 0x00, 0x18, 0x00, 0x0a, 0x16, 0x20, 0x06, 0x2a,
                                    0x12, 0x08, 0x01, 0x12, 0x0a, 0x08, 0x01, 0x18, 0x14, 0x20,
                                    0x00, 0x28, 0x01, 0x30, 0x00, 0x18, 0x02, 0x20, 0x01};
static const uint8_t V_USER[] = {0x43, 0x48, 0x00, 0x0c, 0x00, 0x0a, 0x0a, 0x20, 0x64,
                                 0x2a, 0x06, 0x08, 0x07, 0x12, 0x02, 0x68, 0x69};
static const uint8_t V_RECOVERY_END[] = {0x43, 0x48, 0x00, 0x04, 0x00, 0x0a, 0x02, 0x20, 0x15};
static const uint8_t V_DELAY_MINUS1[] = {0x20, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x01};
static const char TYPE_URL[] = "type.googleapis.com/testpb.TestChannelDataMessage";

/* The CHANNEL_DATA_UPDATE vector, assembled around the 49-byte type URL. */
static size_t v_data_update(uint8_t *out)
{
    static const uint8_t head[] = {0x43, 0x48, 0x00, 0x44, 0x00, 0x0a, 0x42, 0x08, 0x05,
                                   0x20, 0x08, 0x2a, 0x3c, 0x0a, 0x3a, 0x0a, 0x31};
    static const uint8_t tail[] = {0x12, 0x05, 0x0a, 0x01, 0x61, 0x10, 0x01};
    size_t n = 0;
    memcpy(out, head, sizeof(head));
    n += sizeof(head);
    memcpy(out + n, TYPE_URL, sizeof(TYPE_URL) - 1);
    n += sizeof(TYPE_URL) - 1;
    memcpy(out + n, tail, sizeof(tail));
    return n + sizeof(tail);
}

/* ---- message collector ------------------------------------------------------------------- */

#define MAX_MSGS 64

typedef struct got {
    chanq_msg_t m[MAX_MSGS]; /* body points into bodies[i] */
    uint8_t *bodies[MAX_MSGS];
    int n;
} got_t;

static void collect(void *ud, const chanq_msg_t *m)
{
    got_t *g = ud;
    assert_true(g->n < MAX_MSGS);
    g->m[g->n] = *m;
    g->bodies[g->n] = NULL;
    if (m->body_len) {
        g->bodies[g->n] = malloc(m->body_len);
        assert_non_null(g->bodies[g->n]);
        memcpy(g->bodies[g->n], m->body, m->body_len);
        g->m[g->n].body = g->bodies[g->n];
    }
    g->n++;
}

static void got_reset(got_t *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->bodies[i]);
    g->n = 0;
}

static chanq_client_t *mk(got_t *g, chanq_framing_t framing, bool compress)
{
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.framing = framing;
    o.compress = compress;
    o.on_message = g ? collect : NULL;
    o.ud = g;
    chanq_client_t *c = NULL;
    assert_int_equal(chanq_client_new(&o, &c), 0);
    assert_non_null(c);
    return c;
}

/* Copies the client's pending output into a malloc'd buffer and consumes it. */
static uint8_t *take_out(chanq_client_t *c, size_t *ret_n)
{
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, p, n);
    chanq_client_out_consume(c, n);
    assert_int_equal(chanq_client_out_pending(c), 0);
    *ret_n = n;
    return copy;
}

/* Encodes whatever one client queued and decodes it with a fresh client of the same framing. */
static void roundtrip(chanq_client_t *src, chanq_framing_t framing, got_t *g)
{
    size_t n;
    uint8_t *bytes = take_out(src, &n);
    chanq_client_t *dst = mk(g, framing, false);
    int r = chanq_client_feed(dst, bytes, n);
    assert_int_equal(r, g->n);
    assert_int_equal(chanq_client_in_pending(dst), 0);
    chanq_client_free(dst);
    free(bytes);
}

/* ---- encoding vectors --------------------------------------------------------------------- */

static void test_auth_request_vector(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_auth(c, 1, "test", "test"), 0);
    assert_int_equal(chanq_client_out_pending(c), sizeof(V_AUTH_REQ) - CHANQ_HDR_LEN);
    size_t n;
    uint8_t *out = take_out(c, &n);
    assert_int_equal(n, sizeof(V_AUTH_REQ));
    assert_memory_equal(out, V_AUTH_REQ, sizeof(V_AUTH_REQ));
    free(out);
    chanq_client_free(c);
}

static void test_auth_request_via_call(void **state)
{
    (void)state;
    /* chanq_client_call picks stub 1 on a fresh client: the same bytes as the vector. */
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    Channeldpb__AuthMessage am = CHANNELDPB__AUTH_MESSAGE__INIT;
    am.playeridentifiertoken = "test";
    am.logintoken = "test";
    uint32_t stub = 0;
    assert_int_equal(chanq_client_call(c, 0, 0, 1, &am.base, collect, NULL, &stub), 0);
    assert_int_equal(stub, 1);
    size_t n;
    uint8_t *out = take_out(c, &n);
    assert_int_equal(n, sizeof(V_AUTH_REQ));
    assert_memory_equal(out, V_AUTH_REQ, n);
    free(out);
    chanq_client_free(c);
}

static void test_sub_options_negative_delay(void **state)
{
    (void)state;
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_fanoutdelayms = 1;
    o.fanoutdelayms = -1;
    uint8_t buf[32];
    size_t n = protobuf_c_message_pack(&o.base, buf);
    assert_int_equal(n, sizeof(V_DELAY_MINUS1));
    assert_memory_equal(buf, V_DELAY_MINUS1, n);

    /* The same options through the SUB encoder: the record's body must end with them. */
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_sub_to_channel(c, 3, 9, 0, &o), 0);
    got_t g = {0};
    roundtrip(c, CHANQ_FRAMING_FIXED, &g);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.m[0].channel_id, 9);
    assert_int_equal(g.m[0].stub_id, 3);
    assert_int_equal(g.m[0].msg_type, CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL);
    /* SubscribedToChannelMessage{subOptions} = 12 0b <options> */
    assert_int_equal(g.m[0].body_len, 2 + sizeof(V_DELAY_MINUS1));
    assert_int_equal(g.m[0].body[0], 0x12);
    assert_int_equal(g.m[0].body[1], sizeof(V_DELAY_MINUS1));
    assert_memory_equal(g.m[0].body + 2, V_DELAY_MINUS1, sizeof(V_DELAY_MINUS1));
    got_reset(&g);
    chanq_client_free(c);
}

/* ---- decoding vectors -------------------------------------------------------------------- */

static void test_auth_result_vector(void **state)
{
    (void)state;
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_conn_id(c), 0);
    assert_int_equal(chanq_client_feed(c, V_AUTH_RES, sizeof(V_AUTH_RES)), 1);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.m[0].channel_id, 0);
    assert_int_equal(g.m[0].broadcast, 0);
    assert_int_equal(g.m[0].stub_id, 1);
    assert_int_equal(g.m[0].msg_type, CHANNELDPB__MESSAGE_TYPE__AUTH);
    assert_int_equal(g.m[0].body_len, 2);
    Channeldpb__AuthResultMessage *ar =
        chanq_unpack(&channeldpb__auth_result_message__descriptor, g.m[0].body, g.m[0].body_len);
    assert_non_null(ar);
    assert_int_equal(ar->result, CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL);
    assert_int_equal(ar->connid, 1);
    assert_int_equal(ar->compressiontype, 0);
    chanq_unpack_free(ar);
    assert_int_equal(chanq_client_conn_id(c), 1);
    assert_int_equal(chanq_client_auth_compression(c), 0);
    got_reset(&g);
    chanq_client_free(c);
}

static void test_auth_conn_id_first_success_only(void **state)
{
    (void)state;
    /* Failure first (no connId), then our success (7), then a GLOBAL-owner copy for conn 9. */
    static const uint8_t fail[] = {0x43, 0x48, 0x00, 0x08, 0x00, 0x0a, 0x06,
                                   0x20, 0x01, 0x2a, 0x02, 0x08, 0x01};
    static const uint8_t ok7[] = {0x43, 0x48, 0x00, 0x0a, 0x00, 0x0a, 0x08, 0x18,
                                  0x02, 0x20, 0x01, 0x2a, 0x02, 0x10, 0x07};
    static const uint8_t copy9[] = {0x43, 0x48, 0x00, 0x08, 0x00, 0x0a, 0x06,
                                    0x20, 0x01, 0x2a, 0x02, 0x10, 0x09};
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, fail, sizeof(fail)), 1);
    assert_int_equal(chanq_client_conn_id(c), 0);
    assert_int_equal(chanq_client_feed(c, ok7, sizeof(ok7)), 1);
    assert_int_equal(chanq_client_conn_id(c), 7);
    assert_int_equal(chanq_client_feed(c, copy9, sizeof(copy9)), 1);
    assert_int_equal(chanq_client_conn_id(c), 7);
    assert_int_equal(g.n, 3);
    got_reset(&g);
    chanq_client_free(c);
}

static void test_follow_auth_compression(void **state)
{
    (void)state;
    /* AuthResult{connId 1, compressionType SNAPPY}: 10 01 18 01 */
    static const uint8_t res[] = {0x43, 0x48, 0x00, 0x0a, 0x00, 0x0a, 0x08, 0x20,
                                  0x01, 0x2a, 0x04, 0x10, 0x01, 0x18, 0x01};
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.follow_auth_compression = true;
    chanq_client_t *c = NULL;
    assert_int_equal(chanq_client_new(&o, &c), 0);
    assert_int_equal(chanq_client_feed(c, res, sizeof(res)), 1);
    assert_int_equal(chanq_client_auth_compression(c), 1);
    assert_int_equal(chanq_client_auth(c, 0, "p", "l"), 0);
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    assert_true(n > CHANQ_HDR_LEN);
    assert_int_equal(p[4], 1);
    chanq_client_free(c);
}

static void check_sub_result(const chanq_msg_t *m)
{
    assert_int_equal(m->channel_id, 0);
    assert_int_equal(m->stub_id, 0);
    assert_int_equal(m->msg_type, CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL);
    Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
        &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
    assert_non_null(r);
    assert_int_equal(r->connid, 1);
    assert_int_equal(r->conntype, CHANNELDPB__CONNECTION_TYPE__CLIENT);
    assert_int_equal(r->channeltype, CHANNELDPB__CHANNEL_TYPE__GLOBAL);
    assert_non_null(r->suboptions);
    const Channeldpb__ChannelSubscriptionOptions *o = r->suboptions;
    assert_true(o->has_dataaccess);
    assert_int_equal(o->dataaccess, 1);
    assert_true(o->has_fanoutintervalms);
    assert_int_equal(o->fanoutintervalms, 20);
    assert_true(o->has_fanoutdelayms); /* present although zero */
    assert_int_equal(o->fanoutdelayms, 0);
    assert_true(o->has_skipselfupdatefanout);
    assert_true(o->skipselfupdatefanout);
    assert_true(o->has_skipfirstfanout); /* present although false */
    assert_false(o->skipfirstfanout);
    chanq_unpack_free(r);
}

static void check_user(const chanq_msg_t *m)
{
    assert_int_equal(m->msg_type, 100);
    assert_int_equal(m->channel_id, 0);
    Channeldpb__ServerForwardMessage *f =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, m->body, m->body_len);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, 7);
    assert_int_equal(f->payload.len, 2);
    assert_memory_equal(f->payload.data, "hi", 2);
    chanq_unpack_free(f);
}

static void check_recovery_end(const chanq_msg_t *m)
{
    assert_int_equal(m->msg_type, CHANNELDPB__MESSAGE_TYPE__RECOVERY_END);
    assert_int_equal(m->channel_id, 0);
    assert_int_equal(m->stub_id, 0);
    assert_int_equal(m->body_len, 0);
    assert_null(m->body);
}

static void check_data_update(const chanq_msg_t *m)
{
    assert_int_equal(m->channel_id, 5);
    assert_int_equal(m->msg_type, CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE);
    Channeldpb__ChannelDataUpdateMessage *u =
        chanq_unpack(&channeldpb__channel_data_update_message__descriptor, m->body, m->body_len);
    assert_non_null(u);
    assert_non_null(u->data);
    assert_string_equal(u->data->type_url, TYPE_URL);
    static const uint8_t val[] = {0x0a, 0x01, 0x61, 0x10, 0x01};
    assert_int_equal(u->data->value.len, sizeof(val));
    assert_memory_equal(u->data->value.data, val, sizeof(val));
    assert_int_equal(u->contextconnid, 0);
    chanq_unpack_free(u);
}

static void test_decode_vectors(void **state)
{
    (void)state;
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    uint8_t du[128];
    size_t dun = v_data_update(du);
    assert_int_equal(dun, 5 + 0x44);
    assert_int_equal(chanq_client_feed(c, V_SUB_RES, sizeof(V_SUB_RES)), 1);
    assert_int_equal(chanq_client_feed(c, V_USER, sizeof(V_USER)), 1);
    assert_int_equal(chanq_client_feed(c, V_RECOVERY_END, sizeof(V_RECOVERY_END)), 1);
    assert_int_equal(chanq_client_feed(c, du, dun), 1);
    assert_int_equal(g.n, 4);
    check_sub_result(&g.m[0]);
    check_user(&g.m[1]);
    check_recovery_end(&g.m[2]);
    check_data_update(&g.m[3]);
    got_reset(&g);
    chanq_client_free(c);
}

/* ---- splits and coalescing --------------------------------------------------------------- */

/* All six vectors back to back. */
static size_t stream(uint8_t *out)
{
    size_t n = 0;
    memcpy(out + n, V_AUTH_RES, sizeof(V_AUTH_RES));
    n += sizeof(V_AUTH_RES);
    memcpy(out + n, V_SUB_RES, sizeof(V_SUB_RES));
    n += sizeof(V_SUB_RES);
    memcpy(out + n, V_USER, sizeof(V_USER));
    n += sizeof(V_USER);
    memcpy(out + n, V_RECOVERY_END, sizeof(V_RECOVERY_END));
    n += sizeof(V_RECOVERY_END);
    n += v_data_update(out + n);
    memcpy(out + n, V_AUTH_REQ, sizeof(V_AUTH_REQ)); /* decodes too: any MessagePack does */
    n += sizeof(V_AUTH_REQ);
    return n;
}

static void check_stream(const got_t *g)
{
    assert_int_equal(g->n, 6);
    assert_int_equal(g->m[0].msg_type, 1);
    assert_int_equal(g->m[0].stub_id, 1);
    check_sub_result(&g->m[1]);
    check_user(&g->m[2]);
    check_recovery_end(&g->m[3]);
    check_data_update(&g->m[4]);
    assert_int_equal(g->m[5].msg_type, 1);
    assert_int_equal(g->m[5].body_len, 12);
    assert_memory_equal(g->m[5].body, V_AUTH_REQ + 13, 12);
}

static void test_several_packets_one_feed(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = stream(buf);
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, buf, n), 6);
    check_stream(&g);
    assert_int_equal(chanq_client_conn_id(c), 1);
    assert_int_equal(chanq_client_in_pending(c), 0);
    got_reset(&g);
    chanq_client_free(c);
}

static void test_every_two_way_split(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = stream(buf);
    for (size_t i = 0; i <= n; i++) {
        got_t g = {0};
        chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
        int a = chanq_client_feed(c, buf, i);
        assert_true(a >= 0);
        int b = chanq_client_feed(c, buf + i, n - i);
        assert_true(b >= 0);
        assert_int_equal(a + b, 6);
        assert_int_equal(g.n, 6);
        check_stream(&g);
        assert_int_equal(chanq_client_in_pending(c), 0);
        got_reset(&g);
        chanq_client_free(c);
    }
}

static void test_byte_by_byte(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = stream(buf);
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        int r = chanq_client_feed(c, buf + i, 1);
        assert_true(r >= 0);
        total += r;
        /* Messages come out exactly when the last byte of their packet arrives. */
        if (i + 1 == sizeof(V_AUTH_RES))
            assert_int_equal(total, 1);
    }
    assert_int_equal(total, 6);
    check_stream(&g);
    got_reset(&g);
    chanq_client_free(c);
}

/* ---- Snappy ------------------------------------------------------------------------------ */

static void test_snappy_out(void **state)
{
    (void)state;
    chanq_client_t *plain = mk(NULL, CHANQ_FRAMING_FIXED, false);
    chanq_client_t *comp = mk(NULL, CHANQ_FRAMING_FIXED, true);
    uint8_t payload[3000];
    memset(payload, 'x', sizeof(payload)); /* compressible */
    for (int i = 0; i < 2; i++) {
        chanq_client_t *c = i ? comp : plain;
        assert_int_equal(chanq_client_auth(c, 1, "test", "test"), 0);
        assert_int_equal(chanq_client_user_msg(c, 3, 2, 150, payload, sizeof(payload)), 0);
    }
    size_t pn, cn;
    uint8_t *pb = take_out(plain, &pn);
    uint8_t *cb = take_out(comp, &cn);
    assert_int_equal(pb[4], 0);
    assert_int_equal(cb[0], 0x43);
    assert_int_equal(cb[1], 0x48);
    assert_int_equal(cb[4], 1);
    size_t clen = (size_t)cb[2] << 8 | cb[3];
    assert_int_equal(clen + CHANQ_HDR_LEN, cn);
    assert_true(cn < pn);
    /* The compressed body decodes to exactly the plain body. */
    uint8_t dec[8192];
    size_t dn;
    assert_int_equal(cq_snappy_uncompress(cb + 5, clen, dec, sizeof(dec), &dn), 0);
    assert_int_equal(dn, pn - CHANQ_HDR_LEN);
    assert_memory_equal(dec, pb + 5, dn);
    /* And a client reading it gets both messages. */
    got_t g = {0};
    chanq_client_t *r = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(r, cb, cn), 2);
    assert_int_equal(g.m[1].msg_type, 150);
    assert_int_equal(g.m[1].channel_id, 3);
    assert_int_equal(g.m[1].broadcast, 2);
    assert_int_equal(g.m[1].body_len, sizeof(payload));
    assert_memory_equal(g.m[1].body, payload, sizeof(payload));
    got_reset(&g);
    chanq_client_free(r);
    free(pb);
    free(cb);
    chanq_client_free(plain);
    chanq_client_free(comp);
}

static void test_snappy_in(void **state)
{
    (void)state;
    uint8_t buf[512], pkt[600];
    size_t n = stream(buf);
    /* Compress every packet body of the stream separately, with byte 4 = 1. */
    size_t off = 0, pn = 0;
    while (off < n) {
        size_t blen = (size_t)buf[off + 2] << 8 | buf[off + 3];
        size_t clen;
        assert_int_equal(cq_snappy_compress(buf + off + 5, blen, pkt + pn + 5, &clen), 0);
        cq_framing_header(pkt + pn, (uint32_t)clen, CQ_CT_SNAPPY, CQ_FRAMING_FIXED);
        pn += 5 + clen;
        off += 5 + blen;
    }
    for (size_t i = 0; i <= pn; i += 3) {
        got_t g = {0};
        chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
        assert_true(chanq_client_feed(c, pkt, i) >= 0);
        assert_true(chanq_client_feed(c, pkt + i, pn - i) >= 0);
        check_stream(&g);
        got_reset(&g);
        chanq_client_free(c);
    }
}

static void test_snappy_corrupt(void **state)
{
    (void)state;
    static const uint8_t bad[] = {0x43, 0x48, 0x00, 0x04, 0x01, 0x7f, 0x00, 0xff, 0xff};
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, bad, sizeof(bad)), CQ_ESNAPPY);
    assert_int_equal(g.n, 0);
    assert_int_equal(chanq_client_error(c), CQ_ESNAPPY);
    chanq_client_free(c);

    /* A block declaring more than max_inflated bytes is refused before decoding. */
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.max_inflated = 16;
    assert_int_equal(chanq_client_new(&o, &c), 0);
    uint8_t big[64], pkt[128];
    memset(big, 0, sizeof(big));
    size_t clen;
    assert_int_equal(cq_snappy_compress(big, sizeof(big), pkt + 5, &clen), 0);
    cq_framing_header(pkt, (uint32_t)clen, CQ_CT_SNAPPY, CQ_FRAMING_FIXED);
    assert_int_equal(chanq_client_feed(c, pkt, 5 + clen), CQ_ETOOBIG);
    chanq_client_free(c);
}

/* ---- legacy tag -------------------------------------------------------------------------- */

static void test_legacy_encode_decode(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_LEGACY, false);
    assert_int_equal(chanq_client_auth(c, 1, "test", "test"), 0);
    size_t n;
    uint8_t *out = take_out(c, &n);
    assert_int_equal(n, sizeof(V_AUTH_REQ));
    static const uint8_t hdr[] = {0x43, 0x48, 0x4e, 0x14, 0x00};
    assert_memory_equal(out, hdr, 5);
    assert_memory_equal(out + 5, V_AUTH_REQ + 5, n - 5);
    free(out);
    chanq_client_free(c);

    /* The legacy header of the AUTH result decodes in legacy mode ... */
    uint8_t in[sizeof(V_AUTH_RES)];
    memcpy(in, V_AUTH_RES, sizeof(in));
    in[2] = 0x4e;
    got_t g = {0};
    c = mk(&g, CHANQ_FRAMING_LEGACY, false);
    assert_int_equal(chanq_client_feed(c, in, sizeof(in)), 1);
    assert_int_equal(g.m[0].msg_type, 1);
    assert_int_equal(chanq_client_conn_id(c), 1);
    /* ... and so does a fixed header with a length >= 256. */
    uint8_t big[5 + 300 + 8];
    chanq_client_t *s = mk(NULL, CHANQ_FRAMING_FIXED, false);
    uint8_t payload[300];
    memset(payload, 7, sizeof(payload));
    assert_int_equal(chanq_client_user_msg(s, 1, 0, 100, payload, sizeof(payload) - 10), 0);
    const uint8_t *p;
    assert_int_equal(chanq_client_out(s, &p, &n), 0);
    assert_true(n <= sizeof(big) && n > 256);
    assert_int_not_equal(p[2], 0x4e);
    assert_int_equal(chanq_client_feed(c, p, n), 1);
    assert_int_equal(g.m[1].msg_type, 100);
    got_reset(&g);
    chanq_client_free(s);
    chanq_client_free(c);

    /* A fixed-mode reader takes 43 48 4E xx as a 19968+ byte packet and waits. */
    c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, in, sizeof(in)), 0);
    assert_int_equal(chanq_client_in_pending(c), sizeof(in));
    assert_int_equal(g.n, 0);
    chanq_client_free(c);
}

static void test_legacy_pad_out_of_n_range(void **state)
{
    (void)state;
    /* A body of 0x4E10 bytes would be misread by legacy readers; the sender pads it. */
    size_t target = 0x4E10;
    size_t plen = target - 1 - 3 - (2 + 1 + 3); /* record: 0a len3 | 20 64 2a len3 payload */
    uint8_t *payload = malloc(plen);
    assert_non_null(payload);
    memset(payload, 0xab, plen);
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_LEGACY, false);
    assert_int_equal(chanq_client_user_msg(c, 0, 0, 100, payload, plen), 0);
    assert_int_equal(chanq_client_out_pending(c), target);
    size_t n;
    uint8_t *out = take_out(c, &n);
    size_t blen = (size_t)out[2] << 8 | out[3];
    assert_int_equal(blen + 5, n);
    assert_true(blen > target);
    assert_true(out[2] != 0x4e);
    got_t g = {0};
    chanq_client_t *r = mk(&g, CHANQ_FRAMING_LEGACY, false);
    assert_int_equal(chanq_client_feed(r, out, n), 1);
    assert_int_equal(g.m[0].body_len, plen);
    assert_memory_equal(g.m[0].body, payload, plen);
    got_reset(&g);
    chanq_client_free(r);
    chanq_client_free(c);
    free(out);
    free(payload);
}

/* ---- batching ---------------------------------------------------------------------------- */

static void test_batching_over_65535(void **state)
{
    (void)state;
    enum { N = 10, PL = 10000 };
    static uint8_t payload[PL];
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    for (int i = 0; i < N; i++) {
        memset(payload, i, PL);
        assert_int_equal(chanq_client_send_raw(c, 1, 0, 0, 100 + (uint32_t)i, payload, PL), 0);
    }
    size_t n;
    uint8_t *out = take_out(c, &n);
    /* Record = 0a 9f 4e | 08 01 20 xx 2a 90 4e | 10000 = 10010 bytes; 6 fit in 65535, 7 do not. */
    size_t off = 0;
    int pkts = 0, per[4] = {0};
    got_t g = {0};
    chanq_client_t *r = mk(&g, CHANQ_FRAMING_FIXED, false);
    while (off < n) {
        cq_frame_t fr;
        ssize_t k = cq_framing_parse(out + off, n - off, CQ_FRAMING_FIXED, 65535, &fr);
        assert_true(k > 0);
        assert_true(fr.len <= 65535);
        assert_int_equal(fr.ct, 0);
        assert_true(pkts < 4);
        per[pkts++] = chanq_client_feed(r, out + off, (size_t)k);
        off += (size_t)k;
    }
    assert_int_equal(pkts, 2);
    assert_int_equal(per[0], 6);
    assert_int_equal(per[1], 4);
    assert_int_equal(g.n, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g.m[i].msg_type, 100 + (uint32_t)i);
        assert_int_equal(g.m[i].body_len, PL);
        assert_int_equal(g.m[i].body[0], i);
        assert_int_equal(g.m[i].body[PL - 1], i);
    }
    got_reset(&g);
    chanq_client_free(r);
    free(out);
    chanq_client_free(c);
}

static void test_batching_limits(void **state)
{
    (void)state;
    static uint8_t payload[65535];
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    /* A record of exactly 65535 bytes: 0a ff ff 03 | 20 64 2a f6 ff 03 | body. */
    size_t plen = 65535 - 4 - 6;
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 100, payload, plen), 0);
    assert_int_equal(chanq_client_out_pending(c), 65535);
    /* One byte more does not fit any packet. */
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 100, payload, plen + 1), CQ_ETOOBIG);
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 100, payload, 65535), CQ_ETOOBIG);
    /* A tiny message after the full one goes in a second packet. */
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 21, NULL, 0), 0);
    size_t n;
    uint8_t *out = take_out(c, &n);
    assert_int_equal(n, 5 + 65535 + 5 + 4);
    assert_int_equal(out[2], 0xff);
    assert_int_equal(out[3], 0xff);
    static const uint8_t tail[] = {0x43, 0x48, 0x00, 0x04, 0x00, 0x0a, 0x02, 0x20, 0x15};
    assert_memory_equal(out + 5 + 65535, tail, sizeof(tail));
    free(out);
    chanq_client_free(c);
}

static void test_out_partial_consume(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_auth(c, 1, "test", "test"), 0);
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    assert_int_equal(n, sizeof(V_AUTH_REQ));
    chanq_client_out_consume(c, 7);
    /* Queue more: it is a new packet after the remaining bytes of the first. */
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 21, NULL, 0), 0);
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    assert_int_equal(n, sizeof(V_AUTH_REQ) - 7 + sizeof(V_RECOVERY_END));
    assert_memory_equal(p, V_AUTH_REQ + 7, sizeof(V_AUTH_REQ) - 7);
    assert_memory_equal(p + sizeof(V_AUTH_REQ) - 7, V_RECOVERY_END, sizeof(V_RECOVERY_END));
    chanq_client_out_consume(c, 1000); /* clamped */
    assert_int_equal(chanq_client_out_pending(c), 0);
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    assert_int_equal(n, 0);
    chanq_client_free(c);
}

/* ---- stubs ------------------------------------------------------------------------------- */

typedef struct stub_hit {
    int calls;
    uint32_t stub, type;
} stub_hit_t;

static void on_stub(void *ud, const chanq_msg_t *m)
{
    stub_hit_t *h = ud;
    h->calls++;
    h->stub = m->stub_id;
    h->type = m->msg_type;
}

/* A packet with one empty-body message of type 5 and the given stub. */
static size_t reply_pkt(uint8_t *out, uint32_t stub)
{
    const uint8_t p[] = {0x43, 0x48, 0x00, 0x06, 0x00, 0x0a, 0x04, 0x18, (uint8_t)stub, 0x20, 5};
    memcpy(out, p, sizeof(p));
    return sizeof(p);
}

static void test_stub_alloc_and_removal(void **state)
{
    (void)state;
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    stub_hit_t h1 = {0}, h2 = {0}, h3 = {0}, h4 = {0};
    uint32_t s1, s2, s3, s4;
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h1, &s1), 0);
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h2, &s2), 0);
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h3, &s3), 0);
    assert_int_equal(s1, 1);
    assert_int_equal(s2, 2);
    assert_int_equal(s3, 3);
    assert_int_equal(chanq_client_stub_cancel(c, 2), 0);
    assert_int_equal(chanq_client_stub_cancel(c, 2), -ENOENT);
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h4, &s4), 0);
    assert_int_equal(s4, 2); /* lowest free id is reused */
    assert_int_equal(chanq_client_stub_count(c), 3);

    uint8_t pkt[16];
    size_t n = reply_pkt(pkt, 2);
    assert_int_equal(chanq_client_feed(c, pkt, n), 1);
    assert_int_equal(h4.calls, 1);
    assert_int_equal(h4.stub, 2);
    assert_int_equal(h4.type, 5);
    assert_int_equal(h2.calls, 0);
    assert_int_equal(g.n, 0); /* consumed by the stub, not passed to on_message */
    assert_int_equal(chanq_client_stub_count(c), 2);
    /* The callback was removed: the same stub again goes to on_message. */
    assert_int_equal(chanq_client_feed(c, pkt, n), 1);
    assert_int_equal(h4.calls, 1);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.m[0].stub_id, 2);
    /* Stub 0 never matches a callback; unknown stub 9 goes to on_message. */
    n = reply_pkt(pkt, 9);
    assert_int_equal(chanq_client_feed(c, pkt, n), 1);
    assert_int_equal(g.n, 2);
    /* The freed id 2 is handed out again, before 4. */
    uint32_t s5;
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h2, &s5), 0);
    assert_int_equal(s5, 2);
    uint32_t s6;
    assert_int_equal(chanq_client_stub_alloc(c, on_stub, &h2, &s6), 0);
    assert_int_equal(s6, 4);
    n = reply_pkt(pkt, 1);
    assert_int_equal(chanq_client_feed(c, pkt, n), 1);
    assert_int_equal(h1.calls, 1);
    assert_int_equal(chanq_client_stub_count(c), 3);
    got_reset(&g);
    chanq_client_free(c); /* frees registrations without calling them */
    assert_int_equal(h3.calls, 0);
}

static void test_call_uses_stub(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    stub_hit_t h = {0};
    uint32_t stub;
    Channeldpb__ListChannelMessage lm = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    assert_int_equal(chanq_client_call(c, 0, 0, 5, &lm.base, on_stub, &h, &stub), 0);
    assert_int_equal(stub, 1);
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    static const uint8_t want[] = {0x43, 0x48, 0x00, 0x06, 0x00, 0x0a, 0x04, 0x18, 0x01, 0x20, 5};
    assert_int_equal(n, sizeof(want));
    assert_memory_equal(p, want, n);
    /* Feeding the client its own bytes: the message carries stub 1 and fires the callback. */
    uint8_t copy[sizeof(want)];
    memcpy(copy, p, n);
    assert_int_equal(chanq_client_feed(c, copy, n), 1);
    assert_int_equal(h.calls, 1);
    assert_int_equal(chanq_client_stub_count(c), 0);
    /* A failed send releases the stub. */
    static uint8_t huge[65535];
    Channeldpb__ServerForwardMessage f = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    f.payload.data = huge;
    f.payload.len = sizeof(huge);
    assert_int_equal(chanq_client_call(c, 0, 0, 100, &f.base, on_stub, &h, &stub), CQ_ETOOBIG);
    assert_int_equal(chanq_client_stub_count(c), 0);
    chanq_client_free(c);
}

/* ---- callbacks re-entering the client ---------------------------------------------------- */

typedef struct echo {
    chanq_client_t *c;
    int feed_r;
} echo_t;

static void on_echo(void *ud, const chanq_msg_t *m)
{
    echo_t *e = ud;
    e->feed_r = chanq_client_feed(e->c, V_RECOVERY_END, sizeof(V_RECOVERY_END));
    assert_int_equal(chanq_client_send_raw(e->c, m->channel_id, 0, m->stub_id, m->msg_type + 1,
                                           m->body, m->body_len),
                     0);
}

static void test_callback_reentry(void **state)
{
    (void)state;
    echo_t e = {0};
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = on_echo;
    o.ud = &e;
    assert_int_equal(chanq_client_new(&o, &e.c), 0);
    assert_int_equal(chanq_client_feed(e.c, V_RECOVERY_END, sizeof(V_RECOVERY_END)), 1);
    assert_int_equal(e.feed_r, -EBUSY);
    assert_int_equal(chanq_client_error(e.c), 0); /* -EBUSY does not kill the client */
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(e.c, &p, &n), 0);
    static const uint8_t want[] = {0x43, 0x48, 0x00, 0x04, 0x00, 0x0a, 0x02, 0x20, 0x16};
    assert_int_equal(n, sizeof(want));
    assert_memory_equal(p, want, n);
    chanq_client_free(e.c);
}

/* ---- convenience encoders ---------------------------------------------------------------- */

static void test_encoders_roundtrip(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    so.has_dataaccess = 1;
    so.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS;
    const char *filters[] = {"room", "lobby"};
    assert_int_equal(
        chanq_client_create_channel(c, 2, CHANNELDPB__CHANNEL_TYPE__PRIVATE, "m1", &so), 0);
    assert_int_equal(chanq_client_remove_channel(c, 0, 42), 0);
    assert_int_equal(chanq_client_list_channel(c, 3, 2, filters, 2), 0);
    assert_int_equal(chanq_client_unsub_from_channel(c, 4, 42, 8), 0);
    assert_int_equal(chanq_client_disconnect(c, 8), 0);
    assert_int_equal(chanq_client_server_forward(c, 42, 4, 101, 8, "hey", 3), 0);
    assert_int_equal(chanq_client_user_msg(c, 42, 0, 102, "yo", 2), 0);
    assert_int_equal(chanq_client_data_update(c, 42, TYPE_URL, "\x0a\x01\x61", 3), 0);
    assert_int_equal(chanq_client_user_msg(c, 42, 0, 99, "no", 2), -EINVAL);
    assert_int_equal(chanq_client_server_forward(c, 42, 0, 8, 1, "no", 2), -EINVAL);
    assert_int_equal(chanq_client_create_channel(c, 0, 1, NULL, NULL), 0);

    got_t g = {0};
    roundtrip(c, CHANQ_FRAMING_FIXED, &g);
    assert_int_equal(g.n, 9);

    Channeldpb__CreateChannelMessage *cc =
        chanq_unpack(&channeldpb__create_channel_message__descriptor, g.m[0].body, g.m[0].body_len);
    assert_non_null(cc);
    assert_int_equal(g.m[0].msg_type, 3);
    assert_int_equal(g.m[0].stub_id, 2);
    assert_int_equal(cc->channeltype, CHANNELDPB__CHANNEL_TYPE__PRIVATE);
    assert_string_equal(cc->metadata, "m1");
    assert_non_null(cc->suboptions);
    assert_true(cc->suboptions->has_dataaccess);
    assert_int_equal(cc->suboptions->dataaccess, 2);
    assert_false(cc->suboptions->has_fanoutintervalms);
    chanq_unpack_free(cc);

    Channeldpb__RemoveChannelMessage *rm =
        chanq_unpack(&channeldpb__remove_channel_message__descriptor, g.m[1].body, g.m[1].body_len);
    assert_non_null(rm);
    assert_int_equal(g.m[1].msg_type, 4);
    assert_int_equal(g.m[1].channel_id, 0);
    assert_int_equal(rm->channelid, 42);
    chanq_unpack_free(rm);

    Channeldpb__ListChannelMessage *lm =
        chanq_unpack(&channeldpb__list_channel_message__descriptor, g.m[2].body, g.m[2].body_len);
    assert_non_null(lm);
    assert_int_equal(lm->typefilter, 2);
    assert_int_equal(lm->n_metadatafilters, 2);
    assert_string_equal(lm->metadatafilters[0], "room");
    assert_string_equal(lm->metadatafilters[1], "lobby");
    chanq_unpack_free(lm);

    Channeldpb__UnsubscribedFromChannelMessage *um = chanq_unpack(
        &channeldpb__unsubscribed_from_channel_message__descriptor, g.m[3].body, g.m[3].body_len);
    assert_non_null(um);
    assert_int_equal(g.m[3].msg_type, 7);
    assert_int_equal(g.m[3].channel_id, 42);
    assert_int_equal(g.m[3].stub_id, 4);
    assert_int_equal(um->connid, 8);
    chanq_unpack_free(um);

    Channeldpb__DisconnectMessage *dm =
        chanq_unpack(&channeldpb__disconnect_message__descriptor, g.m[4].body, g.m[4].body_len);
    assert_non_null(dm);
    assert_int_equal(g.m[4].msg_type, 9);
    assert_int_equal(dm->connid, 8);
    chanq_unpack_free(dm);

    Channeldpb__ServerForwardMessage *fm =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, g.m[5].body, g.m[5].body_len);
    assert_non_null(fm);
    assert_int_equal(g.m[5].msg_type, 101);
    assert_int_equal(g.m[5].broadcast, 4);
    assert_int_equal(g.m[5].channel_id, 42);
    assert_int_equal(fm->clientconnid, 8);
    assert_int_equal(fm->payload.len, 3);
    assert_memory_equal(fm->payload.data, "hey", 3);
    chanq_unpack_free(fm);

    assert_int_equal(g.m[6].msg_type, 102);
    assert_int_equal(g.m[6].body_len, 2);
    assert_memory_equal(g.m[6].body, "yo", 2);

    Channeldpb__ChannelDataUpdateMessage *du = chanq_unpack(
        &channeldpb__channel_data_update_message__descriptor, g.m[7].body, g.m[7].body_len);
    assert_non_null(du);
    assert_int_equal(g.m[7].msg_type, 8);
    assert_string_equal(du->data->type_url, TYPE_URL);
    assert_int_equal(du->data->value.len, 3);
    chanq_unpack_free(du);

    /* CreateChannel{GLOBAL} with no metadata or options: exactly 08 01. */
    assert_int_equal(g.m[8].body_len, 2);
    assert_int_equal(g.m[8].body[0], 0x08);
    assert_int_equal(g.m[8].body[1], 0x01);
    got_reset(&g);
    chanq_client_free(c);
}

/* ---- malformed input --------------------------------------------------------------------- */

static void expect_error(const uint8_t *p, size_t n, int err, int delivered)
{
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, p, n), err);
    assert_int_equal(g.n, delivered);
    assert_int_equal(chanq_client_error(c), err);
    /* The client stays dead, even for valid input. */
    assert_int_equal(chanq_client_feed(c, V_AUTH_RES, sizeof(V_AUTH_RES)), err);
    assert_int_equal(g.n, delivered);
    /* Sending still works. */
    assert_int_equal(chanq_client_auth(c, 1, "a", "b"), 0);
    got_reset(&g);
    chanq_client_free(c);
}

static void test_malformed(void **state)
{
    (void)state;
    static const uint8_t magic0[] = {0x44, 0x48, 0x00, 0x01, 0x00, 0x00};
    static const uint8_t magic1[] = {0x43, 0x47};
    static const uint8_t zero[] = {0x43, 0x48, 0x00, 0x00, 0x00};
    /* Record length 5 with only 1 byte left. */
    static const uint8_t trunc[] = {0x43, 0x48, 0x00, 0x03, 0x00, 0x0a, 0x05, 0x20};
    /* Packet field 1 with wire type 0. */
    static const uint8_t wt[] = {0x43, 0x48, 0x00, 0x02, 0x00, 0x08, 0x01};
    /* MessagePack msgType (field 4) sent as length-delimited. */
    static const uint8_t mpwt[] = {0x43, 0x48, 0x00, 0x05, 0x00, 0x0a, 0x03, 0x22, 0x01, 0x00};
    /* Field number 0. */
    static const uint8_t f0[] = {0x43, 0x48, 0x00, 0x02, 0x00, 0x00, 0x00};
    expect_error(magic0, sizeof(magic0), CQ_EMAGIC, 0);
    expect_error(magic1, sizeof(magic1), CQ_EMAGIC, 0);
    expect_error(zero, sizeof(zero), CQ_EZEROLEN, 0);
    expect_error(trunc, sizeof(trunc), CQ_EDECODE, 0);
    expect_error(wt, sizeof(wt), CQ_EDECODE, 0);
    expect_error(mpwt, sizeof(mpwt), CQ_EDECODE, 0);
    expect_error(f0, sizeof(f0), CQ_EDECODE, 0);

    /* A good packet, then a bad one in the same feed: the first is delivered. */
    uint8_t two[64];
    memcpy(two, V_RECOVERY_END, sizeof(V_RECOVERY_END));
    memcpy(two + sizeof(V_RECOVERY_END), trunc, sizeof(trunc));
    expect_error(two, sizeof(V_RECOVERY_END) + sizeof(trunc), CQ_EDECODE, 1);

    /* A bad packet whose first record is fine: nothing of it is delivered. */
    static const uint8_t half[] = {0x43, 0x48, 0x00, 0x06, 0x00, 0x0a,
                                   0x02, 0x20, 0x15, 0x0a, 0x09};
    expect_error(half, sizeof(half), CQ_EDECODE, 0);
}

static void test_malformed_split(void **state)
{
    (void)state;
    /* The magic is checked as soon as the bytes arrive, before the header is complete. */
    got_t g = {0};
    chanq_client_t *c = mk(&g, CHANQ_FRAMING_FIXED, false);
    static const uint8_t a[] = {0x43};
    static const uint8_t b[] = {0x00};
    assert_int_equal(chanq_client_feed(c, a, 1), 0);
    assert_int_equal(chanq_client_in_pending(c), 1);
    assert_int_equal(chanq_client_feed(c, b, 1), CQ_EMAGIC);
    chanq_client_free(c);

    /* A valid packet split, then a corrupt continuation. */
    c = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_feed(c, V_USER, 8), 0);
    static const uint8_t bad_tail[] = {0x2a, 0x7f, 0x08, 0x07, 0x12, 0x02, 0x68, 0x69, 0x43};
    assert_int_equal(chanq_client_feed(c, bad_tail, sizeof(bad_tail)), CQ_EDECODE);
    assert_int_equal(g.n, 0);
    chanq_client_free(c);
}

static void test_bad_args(void **state)
{
    (void)state;
    chanq_client_t *c = NULL;
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.framing = (chanq_framing_t)7;
    assert_int_equal(chanq_client_new(&o, &c), -EINVAL);
    assert_null(c);
    assert_null(chanq_client_free(NULL));
    c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    assert_int_equal(chanq_client_send_raw(c, 0, 0, 0, 100, NULL, 3), -EINVAL);
    assert_int_equal(chanq_client_list_channel(c, 0, 0, NULL, 2), -EINVAL);
    assert_int_equal(chanq_client_feed(c, NULL, 0), 0);
    assert_int_equal(chanq_client_out_pending(c), 0);
    assert_null(chanq_client_free(c));
}

/* CREATE_CHANNEL with data and merge options, and decoding a CHANNEL_DATA_UPDATE fan-out
 * (the §1.2 vector: channel 5, testpb.TestChannelDataMessage{text "a", num 1}). */
static void test_channel_data_api(void **state)
{
    got_t g = {0};
    chanq_client_t *c = mk(NULL, CHANQ_FRAMING_FIXED, false);
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 3;
    static const uint8_t init[] = {0x0a, 0x01, 0x61};
    chanq_channel_data_t d = {TYPE_URL, init, sizeof(init), &mo};
    assert_int_equal(chanq_client_create_channel_data(c, 4, 3, "room", NULL, &d), 0);
    roundtrip(c, CHANQ_FRAMING_FIXED, &g);
    assert_int_equal(g.n, 1);
    Channeldpb__CreateChannelMessage *cm =
        chanq_unpack(&channeldpb__create_channel_message__descriptor, g.m[0].body, g.m[0].body_len);
    assert_non_null(cm);
    assert_int_equal(cm->channeltype, 3);
    assert_string_equal(cm->data->type_url, TYPE_URL);
    assert_int_equal(cm->data->value.len, sizeof(init));
    assert_memory_equal(cm->data->value.data, init, sizeof(init));
    assert_non_null(cm->mergeoptions);
    assert_int_equal(cm->mergeoptions->listsizelimit, 3);
    chanq_unpack_free(cm);
    got_reset(&g);
    chanq_client_free(c);

    uint8_t pkt[128];
    size_t n = v_data_update(pkt);
    chanq_client_t *r = mk(&g, CHANQ_FRAMING_FIXED, false);
    assert_true(chanq_client_feed(r, pkt, n) >= 0);
    assert_int_equal(g.n, 1);
    Channeldpb__ChannelDataUpdateMessage *u = NULL;
    assert_int_equal(chanq_decode_data_update(&g.m[0], &u), 0);
    assert_string_equal(u->data->type_url, TYPE_URL);
    static const uint8_t val[] = {0x0a, 0x01, 0x61, 0x10, 0x01};
    assert_int_equal(u->data->value.len, sizeof(val));
    assert_memory_equal(u->data->value.data, val, sizeof(val));
    chanq_testdata_t td;
    assert_int_equal(chanq_testdata_decode(u->data->value.data, u->data->value.len, &td), 0);
    assert_int_equal(td.text_len, 1);
    assert_memory_equal(td.text, "a", 1);
    assert_int_equal(td.num, 1);
    chanq_unpack_free(u);
    static const uint8_t concat[] = {0x0a, 0x01, 0x61, 0x10, 0x01, 0x10, 0x05};
    assert_int_equal(chanq_testdata_decode(concat, sizeof(concat), &td), 0);
    assert_int_equal(td.num, 5); /* last wins, as a protobuf parse */
    static const uint8_t bad[] = {0x0a, 0x05, 0x61};
    assert_int_equal(chanq_testdata_decode(bad, sizeof(bad), &td), CQ_EDECODE);
    chanq_msg_t other = g.m[0];
    other.msg_type = 6;
    assert_int_equal(chanq_decode_data_update(&other, &u), -EINVAL);
    got_reset(&g);
    chanq_client_free(r);
}

/* A bridge delivery's body (doc/bridge.md): ServerForwardMessage{clientConnId 0, payload
 * TopicEvent{topic "announcements", offset 1, time_ms 1700000000123, content "hello"}}, the
 * bytes protoc --decode reads back (clients/js/test/bridge.test.js has the same vector). A
 * body that is not one, or an event cut short, decodes to NULL. */
static void test_topic_event_decode(void **state)
{
    (void)state;
    static const uint8_t body[] = {0x08, 0x00, 0x12, 0x1f, 0x0a, 0x0d, 'a',  'n',  'n',
                                   'o',  'u',  'n',  'c',  'e',  'm',  'e',  'n',  't',
                                   's',  0x20, 0x01, 0x30, 0xfb, 0xd0, 0x95, 0xff, 0xbc,
                                   0x31, 0x4a, 0x05, 'h',  'e',  'l',  'l',  'o'};
    Chanqpb__TopicEvent *ev = chanq_topic_event_decode(body, sizeof(body));
    assert_non_null(ev);
    assert_string_equal(ev->topic, "announcements");
    assert_int_equal(ev->offset, 1);
    assert_int_equal(ev->prev_offset, 0);
    assert_int_equal(ev->time_ms, 1700000000123);
    assert_int_equal(ev->content.len, 5);
    assert_memory_equal(ev->content.data, "hello", 5);
    chanq_unpack_free(ev);
    assert_null(chanq_topic_event_decode(body, sizeof(body) - 1)); /* the payload cut short */
    static const uint8_t cut[] = {0x08, 0x00, 0x12, 0x03, 0x0a, 0x05, 'a'}; /* the topic's */
    assert_null(chanq_topic_event_decode(cut, sizeof(cut)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_channel_data_api),
        cmocka_unit_test(test_auth_request_vector),
        cmocka_unit_test(test_auth_request_via_call),
        cmocka_unit_test(test_sub_options_negative_delay),
        cmocka_unit_test(test_auth_result_vector),
        cmocka_unit_test(test_auth_conn_id_first_success_only),
        cmocka_unit_test(test_follow_auth_compression),
        cmocka_unit_test(test_decode_vectors),
        cmocka_unit_test(test_several_packets_one_feed),
        cmocka_unit_test(test_every_two_way_split),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_snappy_out),
        cmocka_unit_test(test_snappy_in),
        cmocka_unit_test(test_snappy_corrupt),
        cmocka_unit_test(test_legacy_encode_decode),
        cmocka_unit_test(test_legacy_pad_out_of_n_range),
        cmocka_unit_test(test_batching_over_65535),
        cmocka_unit_test(test_batching_limits),
        cmocka_unit_test(test_out_partial_consume),
        cmocka_unit_test(test_stub_alloc_and_removal),
        cmocka_unit_test(test_call_uses_stub),
        cmocka_unit_test(test_callback_reentry),
        cmocka_unit_test(test_encoders_roundtrip),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_malformed_split),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_topic_event_decode),
    };
    return cmocka_run_group_tests_name("client", tests, NULL, NULL);
}
