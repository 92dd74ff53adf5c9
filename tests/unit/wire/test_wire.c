/* tests/unit/wire: the Packet/MessagePack envelope, records and protobuf-c glue.
 *
 * The §1.2 vectors are rebuilt from protobuf-c messages with cq_wire_record_msg and
 * cq_framing_header and compared byte for byte (suite 'proto'), then parsed back. The rest
 * feeds malformed envelopes to the hand-written parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "channeld.pb-c.h"
#include "cq_err.h"
#include "cq_framing.h"
#include "cq_varint.h"
#include "cq_wire.h"
#include "options.pb-c.h"
#include "proto_vectors.h"
#include "test_alloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TYPE_URL "type.googleapis.com/testpb.TestChannelDataMessage"
static const uint8_t test_data_value[] = {0x0a, 0x01, 0x61, 0x10, 0x01}; /* {text:"a", num:1} */

/* ---- encoding helpers ------------------------------------------------------------------- */

/* Frames one record as a whole packet and compares it with the expected bytes. */
static void expect_packet(const cq_buf_t *rec, const uint8_t *want, size_t want_len)
{
    assert_non_null(rec);
    assert_int_equal(cq_buf_refs(rec), 1);
    uint8_t pkt[256];
    assert_true(CQ_FRAME_HDR_LEN + rec->len <= sizeof(pkt));
    cq_framing_header(pkt, rec->len, CQ_CT_NONE, CQ_FRAMING_FIXED);
    memcpy(pkt + CQ_FRAME_HDR_LEN, rec->data, rec->len);
    size_t n = CQ_FRAME_HDR_LEN + rec->len;
    if (n != want_len || memcmp(pkt, want, n) != 0) {
        for (size_t i = 0; i < n; i++)
            print_message("%02x%s", pkt[i], i + 1 < n ? " " : "\n");
        fail_msg("encoded packet differs from the §1.2 vector (%zu vs %zu bytes)", n, want_len);
    }
    /* The record is sized exactly. */
    assert_true(rec->len <= rec->cap);
}

/* Parses a framed vector down to its single MessagePack. */
static void parse_single(const uint8_t *v, size_t n, cq_mp_t *ret)
{
    cq_frame_t f;
    assert_int_equal(cq_framing_parse(v, n, CQ_FRAMING_FIXED, CQ_FRAME_MAX_BODY, &f), (ssize_t)n);
    assert_int_equal(f.ct, CQ_CT_NONE);
    assert_int_equal(cq_wire_packet_validate(f.body, f.len), 1);
    cq_packet_iter_t it;
    cq_wire_packet_iter_init(&it, f.body, f.len);
    assert_int_equal(cq_wire_packet_next(&it, ret), 1);
    cq_mp_t again;
    assert_int_equal(cq_wire_packet_next(&it, &again), 0);
    assert_int_equal(cq_wire_packet_next(&it, &again), 0); /* stays at the end */
    assert_true(ret->body_len == 0 ||
                (ret->body > f.body && ret->body + ret->body_len <= f.body + f.len));
    /* Re-encoding the parsed pack reproduces the packet body exactly. */
    cq_buf_t *raw = cq_wire_record_raw(ret);
    assert_non_null(raw);
    assert_int_equal(raw->len, f.len);
    assert_int_equal(cq_wire_record_size(ret), f.len);
    assert_memory_equal(raw->data, f.body, f.len);
    cq_buf_unref(raw);
}

static void expect_mp(const cq_mp_t *mp, uint32_t ch, uint32_t bc, uint32_t stub, uint32_t type,
                      uint32_t body_len)
{
    assert_int_equal(mp->channel_id, ch);
    assert_int_equal(mp->broadcast, bc);
    assert_int_equal(mp->stub_id, stub);
    assert_int_equal(mp->msg_type, type);
    assert_int_equal(mp->body_len, body_len);
}

static cq_wire_arena_t arena;
static long bufs_at_start;

static int setup(void **state)
{
    (void)state;
    cq_wire_arena_init(&arena, 64 * 1024);
    bufs_at_start = cq_buf_live();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cq_wire_arena_done(&arena);
    /* Every test releases every record it made. */
    return cq_buf_live() == bufs_at_start ? 0 : -1;
}

/* ---- the §1.2 vectors ------------------------------------------------------------------- */

static void test_vec_auth_request(void **state)
{
    (void)state;
    Channeldpb__AuthMessage m = CHANNELDPB__AUTH_MESSAGE__INIT;
    m.playeridentifiertoken = "test";
    m.logintoken = "test";
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 1, CHANNELDPB__MESSAGE_TYPE__AUTH, &m.base);
    expect_packet(rec, vec_auth_req, sizeof(vec_auth_req));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_auth_req, sizeof(vec_auth_req), &mp);
    expect_mp(&mp, 0, 0, 1, 1, 12);
    Channeldpb__AuthMessage *a =
        cq_wire_unpack(&channeldpb__auth_message__descriptor, mp.body, mp.body_len, &arena);
    assert_non_null(a);
    assert_string_equal(a->playeridentifiertoken, "test");
    assert_string_equal(a->logintoken, "test");
    cq_wire_arena_reset(&arena);
}

static void test_vec_auth_result(void **state)
{
    (void)state;
    Channeldpb__AuthResultMessage m = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    m.result = CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    m.connid = 1;
    m.compressiontype = CHANNELDPB__COMPRESSION_TYPE__NO_COMPRESSION;
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 1, CHANNELDPB__MESSAGE_TYPE__AUTH, &m.base);
    expect_packet(rec, vec_auth_result, sizeof(vec_auth_result));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_auth_result, sizeof(vec_auth_result), &mp);
    expect_mp(&mp, 0, 0, 1, 1, 2);
    Channeldpb__AuthResultMessage *r =
        cq_wire_unpack(&channeldpb__auth_result_message__descriptor, mp.body, mp.body_len, &arena);
    assert_non_null(r);
    assert_int_equal(r->result, CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL);
    assert_int_equal(r->connid, 1);
    assert_int_equal(r->compressiontype, CHANNELDPB__COMPRESSION_TYPE__NO_COMPRESSION);
    assert_false(r->shouldrecover);
    cq_wire_arena_reset(&arena);
}

static void test_vec_sub_result(void **state)
{
    (void)state;
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_dataaccess = 1;
    o.dataaccess = 1; /* READ_ACCESS */
    o.has_fanoutintervalms = 1;
    o.fanoutintervalms = 20;
    o.has_fanoutdelayms = 1;
    o.fanoutdelayms = 0;
    o.has_skipselfupdatefanout = 1;
    o.skipselfupdatefanout = 1;
    o.has_skipfirstfanout = 1;
    o.skipfirstfanout = 0;
    Channeldpb__SubscribedToChannelResultMessage m =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    m.connid = 1;
    m.suboptions = &o;
    m.conntype = CHANNELDPB__CONNECTION_TYPE__CLIENT;
    m.channeltype = CHANNELDPB__CHANNEL_TYPE__GLOBAL;
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 0, CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL, &m.base);
    expect_packet(rec, vec_sub_result, sizeof(vec_sub_result));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_sub_result, sizeof(vec_sub_result), &mp);
    expect_mp(&mp, 0, 0, 0, 6, 18);
    Channeldpb__SubscribedToChannelResultMessage *r =
        cq_wire_unpack(&channeldpb__subscribed_to_channel_result_message__descriptor, mp.body,
                       mp.body_len, &arena);
    assert_non_null(r);
    assert_int_equal(r->connid, 1);
    assert_int_equal(r->conntype, CHANNELDPB__CONNECTION_TYPE__CLIENT);
    assert_int_equal(r->channeltype, CHANNELDPB__CHANNEL_TYPE__GLOBAL);
    assert_non_null(r->suboptions);
    /* Explicit presence survives the round trip, zeros included. */
    assert_true(r->suboptions->has_dataaccess && r->suboptions->dataaccess == 1);
    assert_true(r->suboptions->has_fanoutintervalms && r->suboptions->fanoutintervalms == 20);
    assert_true(r->suboptions->has_fanoutdelayms && r->suboptions->fanoutdelayms == 0);
    assert_true(r->suboptions->has_skipselfupdatefanout && r->suboptions->skipselfupdatefanout);
    assert_true(r->suboptions->has_skipfirstfanout && !r->suboptions->skipfirstfanout);
    assert_int_equal(r->suboptions->n_datafieldmasks, 0);
    cq_wire_arena_reset(&arena);
}

static void test_vec_data_update(void **state)
{
    (void)state;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = TYPE_URL;
    any.value.data = (uint8_t *)test_data_value;
    any.value.len = sizeof(test_data_value);
    Channeldpb__ChannelDataUpdateMessage m = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
    m.data = &any;
    cq_buf_t *rec =
        cq_wire_record_msg(5, 0, 0, CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE, &m.base);
    expect_packet(rec, vec_data_update, sizeof(vec_data_update));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_data_update, sizeof(vec_data_update), &mp);
    expect_mp(&mp, 5, 0, 0, 8, 60);
    Channeldpb__ChannelDataUpdateMessage *r = cq_wire_unpack(
        &channeldpb__channel_data_update_message__descriptor, mp.body, mp.body_len, &arena);
    assert_non_null(r);
    assert_non_null(r->data);
    assert_string_equal(r->data->type_url, TYPE_URL);
    assert_int_equal(r->data->value.len, sizeof(test_data_value));
    assert_memory_equal(r->data->value.data, test_data_value, sizeof(test_data_value));
    assert_int_equal(r->contextconnid, 0);
    cq_wire_arena_reset(&arena);
}

static void test_vec_user_forward(void **state)
{
    (void)state;
    Channeldpb__ServerForwardMessage m = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    m.clientconnid = 7;
    m.payload.data = (uint8_t *)"hi";
    m.payload.len = 2;
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 0, 100, &m.base);
    expect_packet(rec, vec_user_fwd, sizeof(vec_user_fwd));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_user_fwd, sizeof(vec_user_fwd), &mp);
    expect_mp(&mp, 0, 0, 0, 100, 6);
    Channeldpb__ServerForwardMessage *r = cq_wire_unpack(
        &channeldpb__server_forward_message__descriptor, mp.body, mp.body_len, &arena);
    assert_non_null(r);
    assert_int_equal(r->clientconnid, 7);
    assert_int_equal(r->payload.len, 2);
    assert_memory_equal(r->payload.data, "hi", 2);
    cq_wire_arena_reset(&arena);
}

static void test_vec_recovery_end(void **state)
{
    (void)state;
    /* No message and an empty message encode the same: no msgBody field at all. */
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 0, CHANNELDPB__MESSAGE_TYPE__RECOVERY_END, NULL);
    expect_packet(rec, vec_recovery_end, sizeof(vec_recovery_end));
    cq_buf_unref(rec);
    Channeldpb__EndRecoveryMesssage e = CHANNELDPB__END_RECOVERY_MESSSAGE__INIT;
    rec = cq_wire_record_msg(0, 0, 0, CHANNELDPB__MESSAGE_TYPE__RECOVERY_END, &e.base);
    expect_packet(rec, vec_recovery_end, sizeof(vec_recovery_end));
    cq_buf_unref(rec);

    cq_mp_t mp;
    parse_single(vec_recovery_end, sizeof(vec_recovery_end), &mp);
    expect_mp(&mp, 0, 0, 0, 21, 0);
    /* An empty body unpacks as an empty message. */
    assert_non_null(cq_wire_unpack(&channeldpb__end_recovery_messsage__descriptor, mp.body,
                                   mp.body_len, &arena));
    cq_wire_arena_reset(&arena);
}

static void test_vec_subopts_negative_delay(void **state)
{
    (void)state;
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_fanoutdelayms = 1;
    o.fanoutdelayms = -1;
    uint8_t out[32];
    size_t n = protobuf_c_message_get_packed_size(&o.base);
    assert_int_equal(n, sizeof(vec_subopts_delay));
    assert_int_equal(protobuf_c_message_pack(&o.base, out), n);
    assert_memory_equal(out, vec_subopts_delay, sizeof(vec_subopts_delay));
    Channeldpb__ChannelSubscriptionOptions *r =
        cq_wire_unpack(&channeldpb__channel_subscription_options__descriptor, vec_subopts_delay,
                       sizeof(vec_subopts_delay), &arena);
    assert_non_null(r);
    assert_true(r->has_fanoutdelayms);
    assert_int_equal(r->fanoutdelayms, -1);
    assert_false(r->has_dataaccess || r->has_fanoutintervalms || r->has_skipselfupdatefanout ||
                 r->has_skipfirstfanout);
    cq_wire_arena_reset(&arena);
}

/* All six packet bodies back to back are one Packet of six messages, in order. */
static void test_vectors_concatenated(void **state)
{
    (void)state;
    uint8_t body[512];
    size_t n = 0;
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        memcpy(body + n, proto_packets[i].bytes + CQ_FRAME_HDR_LEN,
               proto_packets[i].len - CQ_FRAME_HDR_LEN);
        n += proto_packets[i].len - CQ_FRAME_HDR_LEN;
    }
    assert_int_equal(cq_wire_packet_validate(body, n), (int)PROTO_NPACKETS);
    static const uint32_t types[] = {1, 1, 6, 8, 100, 21};
    cq_packet_iter_t it;
    cq_mp_t mp;
    cq_wire_packet_iter_init(&it, body, n);
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        assert_int_equal(cq_wire_packet_next(&it, &mp), 1);
        assert_int_equal(mp.msg_type, types[i]);
    }
    assert_int_equal(cq_wire_packet_next(&it, &mp), 0);
    /* Every strict prefix of a whole record ending is either a record boundary or an error. */
    size_t boundary = 0, rec = 0;
    for (size_t k = 0; k <= n; k++) {
        if (rec < PROTO_NPACKETS && k == boundary + proto_packets[rec].len - CQ_FRAME_HDR_LEN) {
            boundary = k;
            rec++;
        }
        int r = cq_wire_packet_validate(body, k);
        if (k == boundary)
            assert_int_equal(r, (int)rec);
        else
            assert_int_equal(r, CQ_EDECODE);
    }
}

/* ---- malformed envelopes ---------------------------------------------------------------- */

typedef struct bad_case {
    const char *what;
    uint8_t bytes[24];
    size_t len;
} bad_case_t;

#define BAD(what, ...)                                                                             \
    {                                                                                              \
        what, {__VA_ARGS__}, sizeof((uint8_t[]){__VA_ARGS__})                                      \
    }

/* Packet bodies the parser must refuse with CQ_EDECODE. */
static const bad_case_t bad_packets[] = {
    /* truncated varints */
    BAD("record tag only", 0x0a),
    BAD("record length varint cut", 0x0a, 0x80),
    BAD("tag varint cut", 0x8a),
    BAD("mp tag cut", 0x0a, 0x01, 0x88),
    BAD("channelId varint cut", 0x0a, 0x02, 0x08, 0x80),
    BAD("broadcast varint cut", 0x0a, 0x02, 0x10, 0xff),
    BAD("stubId varint cut", 0x0a, 0x03, 0x18, 0xff, 0xff),
    BAD("msgType varint cut", 0x0a, 0x02, 0x20, 0x80),
    BAD("msgBody length cut", 0x0a, 0x02, 0x2a, 0x80),
    BAD("11-byte channelId", 0x0a, 0x0c, 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
        0x80, 0x01),
    BAD("11-byte record length", 0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
        0x00),
    /* lengths past the end */
    BAD("record past end", 0x0a, 0x05, 0x08, 0x01),
    BAD("huge record length", 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x08, 0x01),
    BAD("msgBody past end", 0x0a, 0x03, 0x2a, 0x05, 0x00),
    BAD("msgBody past record end", 0x0a, 0x02, 0x2a, 0x01, 0x20, 0x01),
    BAD("unknown bytes past end", 0x0a, 0x03, 0x32, 0x02, 0x00),
    BAD("unknown fixed64 short", 0x0a, 0x08, 0x39, 1, 2, 3, 4, 5, 6, 7),
    BAD("unknown fixed32 short", 0x0a, 0x04, 0x3d, 1, 2, 3),
    BAD("packet-level bytes past end", 0x12, 0x04, 0x00),
    BAD("packet-level fixed64 short", 0x11, 1, 2, 3),
    /* wrong wire types for MessagePack fields 1-5 */
    BAD("channelId as bytes", 0x0a, 0x02, 0x0a, 0x00),
    BAD("channelId as fixed64", 0x0a, 0x09, 0x09, 1, 2, 3, 4, 5, 6, 7, 8),
    BAD("broadcast as fixed32", 0x0a, 0x05, 0x15, 1, 2, 3, 4),
    BAD("stubId as bytes", 0x0a, 0x02, 0x1a, 0x00),
    BAD("msgType as fixed32", 0x0a, 0x05, 0x25, 100, 0, 0, 0),
    BAD("msgBody as varint", 0x0a, 0x02, 0x28, 0x01),
    BAD("msgBody as fixed64", 0x0a, 0x09, 0x29, 1, 2, 3, 4, 5, 6, 7, 8),
    BAD("messages as varint", 0x08, 0x01),
    BAD("messages as fixed32", 0x0d, 1, 2, 3, 4),
    /* groups and reserved wire types */
    BAD("messages as start-group", 0x0b, 0x0c),
    BAD("messages as end-group", 0x0c),
    BAD("unknown start-group in mp", 0x0a, 0x04, 0x33, 0x08, 0x01, 0x34),
    BAD("unknown end-group in mp", 0x0a, 0x01, 0x34),
    BAD("packet-level start-group", 0x13, 0x14),
    BAD("msgType as group", 0x0a, 0x02, 0x23, 0x24),
    BAD("wire type 6", 0x0a, 0x02, 0x36, 0x00),
    BAD("wire type 7", 0x0a, 0x02, 0x3f, 0x00),
    BAD("packet-level wire type 6", 0x16, 0x00),
    /* field number 0 and out of range */
    BAD("field 0 in packet", 0x02, 0x00),
    BAD("field 0 in mp", 0x0a, 0x02, 0x00, 0x00),
    BAD("field 2^29 in mp", 0x0a, 0x06, 0x80, 0x80, 0x80, 0x80, 0x10, 0x00),
    /* one bad record after a good one poisons the packet */
    BAD("good then bad", 0x0a, 0x02, 0x20, 0x15, 0x0a, 0x02, 0x28, 0x01),
};

static void test_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_packets) / sizeof(bad_packets[0]); i++) {
        const bad_case_t *c = &bad_packets[i];
        int r = cq_wire_packet_validate(c->bytes, c->len);
        if (r != CQ_EDECODE)
            fail_msg("%s: validate gave %d", c->what, r);
        /* The iterator reports the error too (after any good records). */
        cq_packet_iter_t it;
        cq_mp_t mp;
        cq_wire_packet_iter_init(&it, c->bytes, c->len);
        int n;
        while ((n = cq_wire_packet_next(&it, &mp)) == 1)
            ;
        if (n != CQ_EDECODE)
            fail_msg("%s: iterator gave %d", c->what, n);
    }
}

/* MessagePack-level: cq_wire_mp_parse on the record contents, and ret untouched on error. */
static void test_mp_parse_errors(void **state)
{
    (void)state;
    static const struct {
        uint8_t b[12];
        size_t n;
    } bad[] = {
        {{0x08}, 1},       {{0x08, 0x80}, 2},
        {{0x0a, 0x00}, 2}, {{0x2a, 0x01}, 2},
        {{0x28, 0x00}, 2}, {{0x33}, 1},
        {{0x00}, 1},       {{0x80}, 1},
        {{0x15, 1, 2}, 3}, {{0x1d, 1, 2, 3, 4}, 5},
        {{0x24}, 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cq_mp_t mp = {.channel_id = 0xabcd, .msg_type = 0x1234};
        assert_int_equal(cq_wire_mp_parse(bad[i].b, bad[i].n, &mp), CQ_EDECODE);
        assert_int_equal(mp.channel_id, 0xabcd);
        assert_int_equal(mp.msg_type, 0x1234);
    }
    /* An empty MessagePack is valid: all zero. */
    cq_mp_t mp = {.channel_id = 9, .body = (const uint8_t *)"x", .body_len = 1};
    assert_int_equal(cq_wire_mp_parse((const uint8_t *)"", 0, &mp), 0);
    expect_mp(&mp, 0, 0, 0, 0, 0);
    assert_null(mp.body);
}

static void test_unknown_fields_skipped(void **state)
{
    (void)state;
    /* A MessagePack with every skippable wire type around the known fields. */
    uint8_t inner[64];
    size_t n = 0;
    const uint8_t pre[] = {
        0x30, 0x96, 0x01,                            /* 6: varint 150 */
        0x08, 0x05,                                  /* channelId 5 */
        0x39, 1,    2,    3,    4,    5,    6, 7, 8, /* 7: fixed64 */
        0x10, 0x02,                                  /* broadcast 2 */
        0x42, 0x03, 'a',  'b',  'c',                 /* 8: bytes */
        0x18, 0x09,                                  /* stubId 9 */
        0x4d, 1,    2,    3,    4,                   /* 9: fixed32 */
        0x20, 0x64,                                  /* msgType 100 */
        0x2a, 0x02, 'h',  'i',                       /* msgBody "hi" */
        0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01,          /* 536870911 (max field): varint 1 */
        0xfa, 0x7f, 0x00,                            /* 2047: empty bytes */
    };
    memcpy(inner, pre, sizeof(pre));
    n = sizeof(pre);
    cq_mp_t mp;
    assert_int_equal(cq_wire_mp_parse(inner, n, &mp), 0);
    expect_mp(&mp, 5, 2, 9, 100, 2);
    assert_memory_equal(mp.body, "hi", 2);

    /* The same inside a Packet, with unknown Packet-level fields between records. */
    uint8_t body[128];
    size_t b = 0;
    const uint8_t lead[] = {0x10, 0x01, 0x1a, 0x02, 0xaa, 0xbb, 0x21, 1, 2, 3, 4, 5, 6, 7, 8};
    memcpy(body + b, lead, sizeof(lead));
    b += sizeof(lead);
    body[b++] = 0x0a;
    body[b++] = (uint8_t)n;
    memcpy(body + b, inner, n);
    b += n;
    body[b++] = 0x2d; /* 5: fixed32 */
    memcpy(body + b, "\x01\x02\x03\x04", 4);
    b += 4;
    memcpy(body + b, vec_recovery_end + CQ_FRAME_HDR_LEN, 4);
    b += 4;
    assert_int_equal(cq_wire_packet_validate(body, b), 2);
    cq_packet_iter_t it;
    cq_wire_packet_iter_init(&it, body, b);
    assert_int_equal(cq_wire_packet_next(&it, &mp), 1);
    expect_mp(&mp, 5, 2, 9, 100, 2);
    assert_int_equal(cq_wire_packet_next(&it, &mp), 1);
    expect_mp(&mp, 0, 0, 0, 21, 0);
    assert_int_equal(cq_wire_packet_next(&it, &mp), 0);

    /* Repeated scalar fields: the last one wins, as in protobuf. uint32 keeps the low bits. */
    static const uint8_t dup[] = {0x08, 0x01, 0x08, 0x02, 0x20, 0x85, 0x80, 0x80, 0x80,
                                  0x10, 0x2a, 0x01, 'a',  0x2a, 0x02, 'b',  'c'};
    assert_int_equal(cq_wire_mp_parse(dup, sizeof(dup), &mp), 0);
    assert_int_equal(mp.channel_id, 2);
    assert_int_equal(mp.msg_type, 5); /* 0x1_0000_0005 truncated */
    assert_int_equal(mp.body_len, 2);
    assert_memory_equal(mp.body, "bc", 2);
}

static void test_zero_messages(void **state)
{
    (void)state;
    cq_packet_iter_t it;
    cq_mp_t mp = {.channel_id = 77};
    assert_int_equal(cq_wire_packet_validate((const uint8_t *)"", 0), 0);
    cq_wire_packet_iter_init(&it, (const uint8_t *)"", 0);
    assert_int_equal(cq_wire_packet_next(&it, &mp), 0);
    assert_int_equal(mp.channel_id, 77);
    /* Only unknown fields (what a padded empty Packet looks like). */
    uint8_t pad[300];
    size_t n = cq_wire_pad(pad, 200);
    assert_int_equal(cq_wire_packet_validate(pad, n), 0);
    static const uint8_t only_unknown[] = {0x10, 0x01, 0x1a, 0x00};
    assert_int_equal(cq_wire_packet_validate(only_unknown, sizeof(only_unknown)), 0);
    /* An empty record is one (all-zero) message. */
    static const uint8_t empty_rec[] = {0x0a, 0x00};
    assert_int_equal(cq_wire_packet_validate(empty_rec, sizeof(empty_rec)), 1);
}

/* Every prefix of every vector body, placed right before a PROT_NONE page. */
static void test_guard_page(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, page, PROT_NONE), 0);
    for (size_t i = 0; i < PROTO_NPACKETS; i++) {
        const uint8_t *body = proto_packets[i].bytes + CQ_FRAME_HDR_LEN;
        size_t len = proto_packets[i].len - CQ_FRAME_HDR_LEN;
        for (size_t k = 0; k <= len; k++) {
            uint8_t *at = map + page - k;
            memcpy(at, body, k);
            int want = k == len ? 1 : (k == 0 ? 0 : CQ_EDECODE);
            assert_int_equal(cq_wire_packet_validate(at, k), want);
            /* The MessagePack inside, every prefix, too. */
            if (k >= 2) {
                cq_mp_t mp;
                (void)cq_wire_mp_parse(at + 2, k - 2, &mp);
            }
        }
    }
    for (size_t i = 0; i < sizeof(bad_packets) / sizeof(bad_packets[0]); i++) {
        uint8_t *at = map + page - bad_packets[i].len;
        memcpy(at, bad_packets[i].bytes, bad_packets[i].len);
        assert_int_equal(cq_wire_packet_validate(at, bad_packets[i].len), CQ_EDECODE);
    }
    munmap(map, 2 * page);
}

/* ---- arena-backed unpack ---------------------------------------------------------------- */

static void test_unpack_arena_cap(void **state)
{
    (void)state;
    cq_mp_t mp;
    parse_single(vec_data_update, sizeof(vec_data_update), &mp);
    test_alloc_install(0, false);
    /* Caps below what the message needs fail cleanly; from the threshold on, all succeed. */
    size_t threshold = 0;
    for (size_t cap = 0; cap <= 1024; cap++) {
        cq_wire_arena_t a;
        cq_wire_arena_init(&a, cap);
        Channeldpb__ChannelDataUpdateMessage *r = cq_wire_unpack(
            &channeldpb__channel_data_update_message__descriptor, mp.body, mp.body_len, &a);
        if (r) {
            if (!threshold)
                threshold = cap;
            assert_string_equal(r->data->type_url, TYPE_URL);
            assert_true(a.arena.used <= cap);
        } else {
            assert_int_equal(threshold, 0); /* monotone */
        }
        cq_wire_arena_done(&a);
        assert_int_equal(test_alloc_live(), 0);
    }
    assert_true(threshold > 0 && threshold <= 1024);

    /* A capped arena can be reset and reused after a failure. */
    cq_wire_arena_t a;
    cq_wire_arena_init(&a, threshold - 1);
    for (int i = 0; i < 3; i++) {
        assert_null(cq_wire_unpack(&channeldpb__channel_data_update_message__descriptor, mp.body,
                                   mp.body_len, &a));
        cq_wire_arena_reset(&a);
        assert_non_null(
            cq_wire_unpack(&channeldpb__auth_message__descriptor, vec_auth_req + 13, 12, &a));
        cq_wire_arena_reset(&a);
    }
    cq_wire_arena_done(&a);

    /* Many repeated strings: the cap stops the decoder long before the input is exhausted. */
    static uint8_t many[6000];
    size_t n = 0;
    while (n + 3 <= sizeof(many)) {
        many[n++] = 0x12; /* ListChannelMessage.metadataFilters */
        many[n++] = 0x01;
        many[n++] = 'm';
    }
    cq_wire_arena_init(&a, 4096);
    assert_null(cq_wire_unpack(&channeldpb__list_channel_message__descriptor, many, n, &a));
    assert_true(a.arena.used <= 4096);
    cq_wire_arena_done(&a);
    cq_wire_arena_init(&a, 1 << 20);
    Channeldpb__ListChannelMessage *l =
        cq_wire_unpack(&channeldpb__list_channel_message__descriptor, many, n, &a);
    assert_non_null(l);
    assert_int_equal(l->n_metadatafilters, n / 3);
    cq_wire_arena_done(&a);
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

static void test_unpack_bad_bodies(void **state)
{
    (void)state;
    /* Truncations of a valid body, and wrong wire types, are NULL, not a crash. */
    cq_mp_t mp;
    parse_single(vec_sub_result, sizeof(vec_sub_result), &mp);
    for (size_t k = 1; k < mp.body_len; k++) {
        void *r = cq_wire_unpack(&channeldpb__subscribed_to_channel_result_message__descriptor,
                                 mp.body, k, &arena);
        /* Cuts that land on a field boundary are valid shorter messages. */
        bool boundary = k == 2 || k == 14 || k == 16;
        if (boundary)
            assert_non_null(r);
        else
            assert_null(r);
        cq_wire_arena_reset(&arena);
    }
    static const uint8_t wrong_type[] = {0x0a, 0x01}; /* AuthResult.result as bytes */
    assert_null(cq_wire_unpack(&channeldpb__auth_result_message__descriptor, wrong_type,
                               sizeof(wrong_type), &arena));
    cq_wire_arena_reset(&arena);
}

static void test_unpack_failn(void **state)
{
    (void)state;
    cq_mp_t mp;
    parse_single(vec_sub_result, sizeof(vec_sub_result), &mp);
    unsigned long n;
    for (n = 1; n < 50; n++) {
        test_alloc_install(n, true);
        cq_wire_arena_t a;
        cq_wire_arena_init(&a, 1 << 20);
        Channeldpb__SubscribedToChannelResultMessage *r =
            cq_wire_unpack(&channeldpb__subscribed_to_channel_result_message__descriptor, mp.body,
                           mp.body_len, &a);
        bool ok = r != NULL;
        if (ok)
            assert_int_equal(r->suboptions->fanoutintervalms, 20);
        cq_wire_arena_done(&a);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
        if (ok)
            break;
    }
    assert_true(n > 1 && n < 50);
}

/* ---- record encoder --------------------------------------------------------------------- */

static void test_record_raw_fields(void **state)
{
    (void)state;
    static const uint32_t vals[] = {0, 1, 127, 128, 16384, UINT32_MAX};
    uint8_t body[300];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)i;
    static const uint32_t lens[] = {0, 1, 127, 128, 300};
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 6; b++)
            for (size_t l = 0; l < 5; l++) {
                cq_mp_t mp = {vals[a], vals[(a + b) % 6], vals[b], vals[(a * b) % 6], body,
                              lens[l]};
                cq_buf_t *rec = cq_wire_record_raw(&mp);
                assert_non_null(rec);
                assert_int_equal(rec->len, cq_wire_record_size(&mp));
                /* record_head + body is the same record. */
                uint8_t manual[400];
                size_t h = cq_wire_record_head(manual, &mp);
                memcpy(manual + h, body, lens[l]);
                assert_int_equal(h + lens[l], rec->len);
                assert_memory_equal(manual, rec->data, rec->len);
                /* It parses back to the same fields. */
                cq_mp_t back;
                assert_int_equal(cq_wire_packet_validate(rec->data, rec->len), 1);
                cq_packet_iter_t it;
                cq_wire_packet_iter_init(&it, rec->data, rec->len);
                assert_int_equal(cq_wire_packet_next(&it, &back), 1);
                expect_mp(&back, mp.channel_id, mp.broadcast, mp.stub_id, mp.msg_type, mp.body_len);
                if (mp.body_len)
                    assert_memory_equal(back.body, body, mp.body_len);
                cq_buf_unref(rec);
            }
}

static void test_record_size_limit(void **state)
{
    (void)state;
    static uint8_t body[70000];
    /* With msgType 100, the largest body whose record still fits 65535 bytes. */
    cq_mp_t mp = {.msg_type = 100, .body = body};
    uint32_t best = 0;
    for (uint32_t l = 65500; l < 65535; l++) {
        mp.body_len = l;
        if (cq_wire_record_size(&mp) <= CQ_WIRE_MAX_RECORD)
            best = l;
    }
    assert_int_equal(best, 65525); /* 0a fd ff 03 | 20 64 2a f5 ff 03 | body */
    mp.body_len = best;
    cq_buf_t *rec = cq_wire_record_raw(&mp);
    assert_non_null(rec);
    assert_int_equal(rec->len, 65535);
    assert_int_equal(cq_wire_packet_validate(rec->data, rec->len), 1);
    cq_buf_unref(rec);
    mp.body_len = best + 1;
    assert_null(cq_wire_record_raw(&mp));
    mp.body_len = sizeof(body);
    assert_null(cq_wire_record_raw(&mp));

    /* The same limit through cq_wire_record_msg. */
    Channeldpb__ServerForwardMessage m = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    m.payload.data = body;
    m.payload.len = 65525 - 4; /* 12 f1 ff 03 + payload = 65525 */
    rec = cq_wire_record_msg(0, 0, 0, 100, &m.base);
    assert_non_null(rec);
    assert_int_equal(rec->len, 65535);
    cq_buf_unref(rec);
    m.payload.len++;
    assert_null(cq_wire_record_msg(0, 0, 0, 100, &m.base));
    m.payload.len = 69000;
    assert_null(cq_wire_record_msg(0, 0, 0, 100, &m.base));
}

static void test_pad(void **state)
{
    (void)state;
    uint8_t out[1100];
    for (size_t min = 0; min <= 1000; min++) {
        memset(out, 0xcc, sizeof(out));
        size_t w = cq_wire_pad(out, min);
        assert_true(w >= min);
        assert_true(w <= min + 3 && w >= 3);
        assert_int_equal(out[w], 0xcc); /* nothing beyond what it reports */
        /* Field 2047, wire type 2: skipped by the Packet and MessagePack parsers. */
        assert_int_equal(out[0], 0xfa);
        assert_int_equal(out[1], 0x7f);
        assert_int_equal(cq_wire_packet_validate(out, w), 0);
        cq_mp_t mp;
        assert_int_equal(cq_wire_mp_parse(out, w, &mp), 0);
        /* And protobuf-c skips it as an unknown field. */
        Channeldpb__Packet *p =
            (Channeldpb__Packet *)cq_wire_unpack(&channeldpb__packet__descriptor, out, w, &arena);
        assert_non_null(p);
        assert_int_equal(p->n_messages, 0);
        cq_wire_arena_reset(&arena);
    }
}

/* A legacy-mode sender pads a body whose length has 'N' as its high byte. */
static void test_pad_legacy_ambiguity(void **state)
{
    (void)state;
    static uint8_t body[0x5000];
    for (uint32_t len = 0x4E00; len <= 0x4EFF; len++) {
        /* A Packet of one user-space record of exactly len bytes. */
        cq_mp_t mp = {.msg_type = 100, .body = body};
        mp.body_len = len - 8; /* 0a xx xx | 20 64 2a yy yy */
        while (cq_wire_record_size(&mp) < len)
            mp.body_len++;
        while (cq_wire_record_size(&mp) > len)
            mp.body_len--;
        if (cq_wire_record_size(&mp) != len)
            continue; /* not every length is reachable with one record */
        uint8_t *pkt = malloc(CQ_FRAME_HDR_LEN + len + 300);
        assert_non_null(pkt);
        size_t h = cq_wire_record_head(pkt + CQ_FRAME_HDR_LEN, &mp);
        memset(pkt + CQ_FRAME_HDR_LEN + h, 0x55, mp.body_len);
        uint32_t need = cq_framing_legacy_pad(len);
        assert_true(need > 0);
        uint32_t total = len + (uint32_t)cq_wire_pad(pkt + CQ_FRAME_HDR_LEN + len, need);
        assert_int_equal(cq_framing_legacy_pad(total), 0);
        cq_framing_header(pkt, total, CQ_CT_NONE, CQ_FRAMING_LEGACY);
        /* Both readers see the same single message. */
        for (int mode = 0; mode < 2; mode++) {
            cq_frame_t f;
            assert_int_equal(cq_framing_parse(pkt, CQ_FRAME_HDR_LEN + total,
                                              (cq_framing_mode_t)mode, CQ_FRAME_MAX_BODY, &f),
                             (ssize_t)(CQ_FRAME_HDR_LEN + total));
            assert_int_equal(cq_wire_packet_validate(f.body, f.len), 1);
        }
        free(pkt);
    }
}

/* After an error from skip_field the iterator's p is NULL, so calling next again compares and
 * dereferences NULL; after an error inside a record it has already moved past that record
 * and carries on. Either way a second call should give the same error (sticky). */
static void test_iter_error_sticky(void **state)
{
    (void)state;
    static const uint8_t bad_skip[] = {0x12, 0x05, 0x00};                  /* field 2 past end */
    static const uint8_t bad_rec[] = {0x0a, 0x02, 0x28, 0x01, 0x0a, 0x00}; /* then a good one */
    cq_packet_iter_t it;
    cq_mp_t mp;
    cq_wire_packet_iter_init(&it, bad_skip, sizeof(bad_skip));
    assert_int_equal(cq_wire_packet_next(&it, &mp), CQ_EDECODE);
    assert_int_equal(cq_wire_packet_next(&it, &mp), CQ_EDECODE);
    cq_wire_packet_iter_init(&it, bad_rec, sizeof(bad_rec));
    assert_int_equal(cq_wire_packet_next(&it, &mp), CQ_EDECODE);
    assert_int_equal(cq_wire_packet_next(&it, &mp), CQ_EDECODE);
}

/* ---- ServerForwardMessage --------------------------------------------------------------- */

/* protobuf-c's packing of SFM{client, payload} as the body of a record like mp's. */
static cq_buf_t *sfm_by_protobuf(const cq_mp_t *mp, uint32_t client)
{
    Channeldpb__ServerForwardMessage m = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    m.clientconnid = client;
    m.payload.data = (uint8_t *)mp->body;
    m.payload.len = mp->body_len;
    return cq_wire_record_msg(mp->channel_id, mp->broadcast, mp->stub_id, mp->msg_type, &m.base);
}

static void expect_sfm_record(const cq_mp_t *mp, uint32_t client, const uint8_t *want, size_t n)
{
    cq_buf_t *rec = cq_wire_sfm_record(mp, client);
    assert_non_null(rec);
    assert_int_equal(rec->len, n);
    assert_memory_equal(rec->data, want, n);
    cq_buf_t *pb = sfm_by_protobuf(mp, client);
    assert_non_null(pb);
    assert_int_equal(pb->len, rec->len);
    assert_memory_equal(pb->data, rec->data, rec->len);
    cq_buf_unref(pb);
    cq_buf_unref(rec);
}

static void test_sfm_record_bytes(void **state)
{
    (void)state;
    /* The §1.2 user-space vector: client 7 wrapping "hi". */
    cq_mp_t mp = {.msg_type = 100, .body = (const uint8_t *)"hi", .body_len = 2};
    expect_sfm_record(&mp, 7, vec_user_fwd + CQ_FRAME_HDR_LEN,
                      sizeof(vec_user_fwd) - CQ_FRAME_HDR_LEN);
    /* An empty payload leaves field 2 out, as protobuf-c does for empty proto3 bytes. */
    static const uint8_t empty[] = {0x0a, 0x06, 0x20, 0x64, 0x2a, 0x02, 0x08, 0x07};
    mp.body = NULL;
    mp.body_len = 0;
    expect_sfm_record(&mp, 7, empty, sizeof(empty));
    /* Every envelope field kept; multi-byte client id and type. */
    static const uint8_t full[] = {0x0a, 0x12, 0x08, 0x05, 0x10, 0x02, 0x18, 0x09, 0x20, 0xc8,
                                   0x01, 0x2a, 0x07, 0x08, 0xac, 0x02, 0x12, 0x02, 'o',  'k'};
    mp = (cq_mp_t){5, 2, 9, 200, (const uint8_t *)"ok", 2};
    expect_sfm_record(&mp, 300, full, sizeof(full));
    /* A zero client id is still written (protobuf-c would leave it out). */
    static const uint8_t zero[] = {0x0a, 0x06, 0x20, 0x64, 0x2a, 0x02, 0x08, 0x00};
    mp = (cq_mp_t){.msg_type = 100};
    cq_buf_t *rec = cq_wire_sfm_record(&mp, 0);
    assert_non_null(rec);
    assert_int_equal(rec->len, sizeof(zero));
    assert_memory_equal(rec->data, zero, sizeof(zero));
    cq_buf_unref(rec);
}

static void test_sfm_record_max_size(void **state)
{
    (void)state;
    static uint8_t body[70000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)i;
    /* 0a fb ff 03 | 20 64 2a f5 ff 03 | 08 07 12 ef ff 03 payload: 16 + 65519 = 65535 bytes. */
    cq_mp_t mp = {.msg_type = 100, .body = body, .body_len = 65519};
    cq_buf_t *rec = cq_wire_sfm_record(&mp, 7);
    assert_non_null(rec);
    assert_int_equal(rec->len, CQ_WIRE_MAX_RECORD);
    static const uint8_t head[] = {0x0a, 0xfb, 0xff, 0x03, 0x20, 0x64, 0x2a, 0xf5,
                                   0xff, 0x03, 0x08, 0x07, 0x12, 0xef, 0xff, 0x03};
    assert_memory_equal(rec->data, head, sizeof(head));
    assert_memory_equal(rec->data + sizeof(head), body, 65519);
    cq_buf_t *pb = sfm_by_protobuf(&mp, 7);
    assert_non_null(pb);
    assert_int_equal(pb->len, rec->len);
    assert_memory_equal(pb->data, rec->data, rec->len);
    cq_buf_unref(pb);
    assert_int_equal(cq_wire_packet_validate(rec->data, rec->len), 1);
    cq_buf_unref(rec);
    /* One byte more does not fit, and neither does it through protobuf-c. */
    mp.body_len = 65520;
    assert_null(cq_wire_sfm_record(&mp, 7));
    assert_null(sfm_by_protobuf(&mp, 7));
    mp.body_len = sizeof(body);
    assert_null(cq_wire_sfm_record(&mp, 7));
}

static void test_sfm_record_failn(void **state)
{
    (void)state;
    cq_mp_t mp = {.msg_type = 100, .body = (const uint8_t *)"hi", .body_len = 2};
    test_alloc_install(1, true);
    assert_null(cq_wire_sfm_record(&mp, 7));
    assert_int_equal(test_alloc_live(), 0);
    test_alloc_remove();
}

/* Bodies protobuf-c packs, and hand-made ones with unknown fields, are valid; their client id
 * is the one protobuf-c unpacks. */
static void test_sfm_valid_and_client(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint8_t b[24];
        size_t n;
        uint32_t client;
    } ok[] = {
        {"empty", {0}, 0, 0},
        {"id only", {0x08, 0x07}, 2, 7},
        {"payload only", {0x12, 0x02, 'h', 'i'}, 4, 0},
        {"both", {0x08, 0xac, 0x02, 0x12, 0x01, 'x'}, 6, 300},
        {"payload first", {0x12, 0x00, 0x08, 0x09}, 4, 9},
        {"last id wins", {0x08, 0x01, 0x08, 0x02}, 4, 2},
        {"over 32 bits keeps the low bits", {0x08, 0x85, 0x80, 0x80, 0x80, 0x10}, 6, 5},
        {"unknown varint", {0x18, 0x05, 0x08, 0x03}, 4, 3},
        {"unknown fixed32", {0x25, 1, 2, 3, 4, 0x08, 0x04}, 7, 4},
        {"unknown fixed64", {0x29, 1, 2, 3, 4, 5, 6, 7, 8, 0x08, 0x06}, 11, 6},
        {"unknown bytes", {0x32, 0x03, 'a', 'b', 'c', 0x08, 0x0b}, 7, 11},
        /* fixed bytes that, read as a varint with the next tag (field 2048, three bytes), make
         * one of eleven bytes */
        {"unknown fixed64 of 0x80s",
         {0x29, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00, 0x08, 0x0d},
         15,
         13},
        {"unknown fixed32 of 0x80s", {0x25, 0x80, 0x80, 0x80, 0x80, 0x08, 0x0e}, 7, 14},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (!cq_wire_sfm_valid(ok[i].b, ok[i].n))
            fail_msg("%s: rejected", ok[i].name);
        assert_int_equal(cq_wire_sfm_client(ok[i].b, ok[i].n), ok[i].client);
        Channeldpb__ServerForwardMessage *m = cq_wire_unpack(
            &channeldpb__server_forward_message__descriptor, ok[i].b, ok[i].n, &arena);
        assert_non_null(m);
        assert_int_equal(m->clientconnid, ok[i].client);
        cq_wire_arena_reset(&arena);
    }
    static const struct {
        const char *name;
        uint8_t b[16];
        size_t n;
    } bad[] = {
        {"id as bytes", {0x0a, 0x01, 0x07}, 3},
        {"payload as varint", {0x10, 0x07}, 2},
        {"truncated id", {0x08, 0x80}, 2},
        {"truncated tag", {0x80}, 1},
        {"payload past end", {0x12, 0x05, 'a'}, 3},
        {"field 0", {0x00, 0x01}, 2},
        {"group", {0x1b, 0x1c}, 2},
        {"reserved wire type", {0x1e, 0x00}, 2},
        {"truncated fixed64", {0x29, 1, 2, 3}, 4},
        {"truncated fixed32", {0x25, 1, 2, 3}, 4},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (cq_wire_sfm_valid(bad[i].b, bad[i].n))
            fail_msg("%s: accepted", bad[i].name);
    /* An absent body (a MessagePack without field 5) is a NULL slice: valid, no client. */
    assert_true(cq_wire_sfm_valid(NULL, 0));
    assert_int_equal(cq_wire_sfm_client(NULL, 0), 0);
    /* A packed message is read back, whatever its size. */
    static uint8_t payload[1000];
    cq_mp_t mp = {.msg_type = 100, .body = payload, .body_len = sizeof(payload)};
    cq_buf_t *rec = cq_wire_sfm_record(&mp, 123456);
    cq_packet_iter_t it;
    cq_mp_t back;
    cq_wire_packet_iter_init(&it, rec->data, rec->len);
    assert_int_equal(cq_wire_packet_next(&it, &back), 1);
    assert_true(cq_wire_sfm_valid(back.body, back.body_len));
    assert_int_equal(cq_wire_sfm_client(back.body, back.body_len), 123456);
    cq_buf_unref(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_vec_auth_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_auth_result, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_sub_result, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_data_update, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_user_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_recovery_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vec_subopts_negative_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vectors_concatenated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mp_parse_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_fields_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_page, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpack_arena_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpack_bad_bodies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unpack_failn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_raw_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_size_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad_legacy_ambiguity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iter_error_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sfm_record_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sfm_record_max_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sfm_record_failn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sfm_valid_and_client, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
