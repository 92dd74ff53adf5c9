/* fuzz_wire_packet - the hand-written Packet/MessagePack parser and the arena-backed unpack.
 *
 * The input is a Packet body (what follows the 5-byte header). Checks:
 *  - validate and the iterator agree (count, or error);
 *  - every slice lies inside the input, and re-encoding a parsed MessagePack with
 *    cq_wire_record_raw parses back to the same fields and body bytes;
 *  - differential: whenever both protobuf-c (as channeldpb.Packet) and the hand-written parser
 *    accept the body, they see the same messages and fields. They may disagree on acceptance:
 *    protobuf-c takes field number 0 (e.g. the overlong tag 80 80 00), which Go's protowire
 *    and chanq refuse, and refuses tags longer than 5 bytes, which chanq takes;
 *  - each message body is unpacked as the channeld type for its msgType through an arena
 *    capped at 16 KiB; a successful unpack re-packs, and when those bytes unpack again they
 *    re-pack identically (pack(unpack(pack(m))) == pack(m)). The re-packed bytes need not
 *    unpack: protobuf-c re-emits an unknown field 0 read from an overlong tag (80 00) as the
 *    minimal tag 00, which it then refuses; and it truncates strings at an embedded NUL.
 * The input is also parsed directly as one MessagePack. */
#include "fuzz_common.h"

#include "channeld.pb-c.h"
#include "cq_err.h"
#include "cq_wire.h"

#include <string.h>

#define ARENA_CAP      (16u * 1024u)
#define FUZZ_MAX_INPUT 65535u

static cq_wire_arena_t arena, arena2, big;

static const ProtobufCMessageDescriptor *desc_for(uint32_t msg_type)
{
    switch (msg_type) {
    case 1:
        return &channeldpb__auth_message__descriptor;
    case 3:
        return &channeldpb__create_channel_message__descriptor;
    case 4:
        return &channeldpb__remove_channel_message__descriptor;
    case 5:
        return &channeldpb__list_channel_message__descriptor;
    case 6:
        return &channeldpb__subscribed_to_channel_message__descriptor;
    case 7:
        return &channeldpb__unsubscribed_from_channel_message__descriptor;
    case 8:
        return &channeldpb__channel_data_update_message__descriptor;
    case 9:
        return &channeldpb__disconnect_message__descriptor;
    default:
        return msg_type >= 100 ? &channeldpb__server_forward_message__descriptor : NULL;
    }
}

static void check_reencode(const cq_mp_t *mp)
{
    cq_buf_t *rec = cq_wire_record_raw(mp);
    if (!rec) {
        FUZZ_CHECK(cq_wire_record_size(mp) > CQ_WIRE_MAX_RECORD);
        return;
    }
    FUZZ_CHECK(rec->len == cq_wire_record_size(mp));
    cq_packet_iter_t it;
    cq_mp_t back;
    cq_wire_packet_iter_init(&it, rec->data, rec->len);
    FUZZ_CHECK(cq_wire_packet_next(&it, &back) == 1);
    FUZZ_CHECK(cq_wire_packet_next(&it, &back) == 0);
    cq_wire_packet_iter_init(&it, rec->data, rec->len);
    FUZZ_CHECK(cq_wire_packet_next(&it, &back) == 1);
    FUZZ_CHECK(back.channel_id == mp->channel_id && back.broadcast == mp->broadcast);
    FUZZ_CHECK(back.stub_id == mp->stub_id && back.msg_type == mp->msg_type);
    FUZZ_CHECK(back.body_len == mp->body_len);
    FUZZ_CHECK(!mp->body_len || memcmp(back.body, mp->body, mp->body_len) == 0);
    cq_buf_unref(rec);
}

static void check_unpack(const cq_mp_t *mp)
{
    static uint8_t packed[2][ARENA_CAP * 2];
    const ProtobufCMessageDescriptor *d = desc_for(mp->msg_type);
    if (!d)
        return;
    ProtobufCMessage *m = cq_wire_unpack(d, mp->body, mp->body_len, &arena);
    FUZZ_CHECK(arena.arena.used <= ARENA_CAP);
    if (m) {
        FUZZ_CHECK(m->descriptor == d);
        size_t n1 = protobuf_c_message_get_packed_size(m);
        if (n1 <= sizeof(packed[0])) {
            FUZZ_CHECK(protobuf_c_message_pack(m, packed[0]) == n1);
            ProtobufCMessage *m2 = cq_wire_unpack(d, packed[0], n1, &arena2);
            /* The re-packed form can need more arena (unknown fields), so use a larger one. */
            if (!m2)
                m2 = cq_wire_unpack(d, packed[0], n1, &big);
            if (m2) {
                size_t n2 = protobuf_c_message_get_packed_size(m2);
                FUZZ_CHECK(n2 == n1);
                FUZZ_CHECK(protobuf_c_message_pack(m2, packed[1]) == n2);
                FUZZ_CHECK(memcmp(packed[0], packed[1], n1) == 0);
            }
        }
    }
    cq_wire_arena_reset(&arena);
    cq_wire_arena_reset(&arena2);
    cq_wire_arena_reset(&big);
}

/* protobuf-c as the reference parser for the envelope. */
static void differential(const uint8_t *data, size_t size, int n)
{
    Channeldpb__Packet *pk =
        (Channeldpb__Packet *)cq_wire_unpack(&channeldpb__packet__descriptor, data, size, &big);
    if (pk && n >= 0) {
        FUZZ_CHECK(pk->n_messages == (size_t)n);
        cq_packet_iter_t it;
        cq_mp_t mp;
        cq_wire_packet_iter_init(&it, data, size);
        for (size_t i = 0; i < pk->n_messages; i++) {
            const Channeldpb__MessagePack *r = pk->messages[i];
            FUZZ_CHECK(cq_wire_packet_next(&it, &mp) == 1);
            FUZZ_CHECK(mp.channel_id == r->channelid && mp.broadcast == r->broadcast);
            FUZZ_CHECK(mp.stub_id == r->stubid && mp.msg_type == r->msgtype);
            FUZZ_CHECK(mp.body_len == r->msgbody.len);
            FUZZ_CHECK(!mp.body_len || memcmp(mp.body, r->msgbody.data, mp.body_len) == 0);
        }
    }
    cq_wire_arena_reset(&big);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int inited;
    if (!inited) {
        cq_wire_arena_init(&arena, ARENA_CAP);
        cq_wire_arena_init(&arena2, ARENA_CAP);
        cq_wire_arena_init(&big, 64u << 20);
        inited = 1;
    }
    if (size > FUZZ_MAX_INPUT)
        return 0;
    long bufs = cq_buf_live();

    int n = cq_wire_packet_validate(data, size);
    FUZZ_CHECK(n >= 0 || n == CQ_EDECODE);
    cq_packet_iter_t it;
    cq_mp_t mp;
    int r, count = 0;
    cq_wire_packet_iter_init(&it, data, size);
    while ((r = cq_wire_packet_next(&it, &mp)) == 1) {
        count++;
        FUZZ_CHECK(mp.body_len == 0 || (mp.body >= data && mp.body + mp.body_len <= data + size));
        check_reencode(&mp);
        check_unpack(&mp);
    }
    FUZZ_CHECK(r == 0 || r == CQ_EDECODE);
    FUZZ_CHECK(n < 0 ? r == CQ_EDECODE : (r == 0 && count == n));
    differential(data, size, n);

    /* The input as the contents of a single record. */
    if (cq_wire_mp_parse(data, size, &mp) == 0) {
        FUZZ_CHECK(mp.body_len == 0 || (mp.body >= data && mp.body + mp.body_len <= data + size));
        check_reencode(&mp);
    }
    FUZZ_CHECK(cq_buf_live() == bufs);
    return 0;
}
