/* cq_wire.h - the Packet/MessagePack envelope and protobuf-c glue.
 *
 * The envelope is parsed by hand (zero-copy slices into the packet body) because it is the hot
 * path; message bodies are unpacked with protobuf-c into a per-frame arena with a byte cap.
 *
 * A "record" is one encoded Packet.messages entry: 0x0a <varint len> <MessagePack>. A Packet
 * body is a concatenation of records, so an outbound message is encoded once into a record
 * (a refcounted cq_buf) and batched into any connection's packet by reference.
 */
#ifndef CQ_WIRE_H
#define CQ_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "channeld.pb-c.h"
#include "cq_arena.h"
#include "cq_buf.h"

/* The largest record that fits a packet body on its own. */
#define CQ_WIRE_MAX_RECORD 65535u

typedef struct cq_mp {
    uint32_t channel_id;
    uint32_t broadcast;
    uint32_t stub_id;
    uint32_t msg_type;
    const uint8_t *body; /* borrowed slice */
    uint32_t body_len;
} cq_mp_t;

/* ---- inbound ---- */

/* Checks that body[0..len) is a well-formed Packet (skipping unknown fields as protobuf does).
 * Returns the number of MessagePacks (>= 0) or CQ_EDECODE. */
int cq_wire_packet_validate(const uint8_t *body, size_t len);

typedef struct cq_packet_iter {
    const uint8_t *p, *end;
} cq_packet_iter_t;

void cq_wire_packet_iter_init(cq_packet_iter_t *it, const uint8_t *body, size_t len);
/* Returns 1 and fills *ret, 0 at the end, or CQ_EDECODE. Slices point into the body. */
int cq_wire_packet_next(cq_packet_iter_t *it, cq_mp_t *ret);
/* Parses one MessagePack (the bytes inside a record). Returns 0 or CQ_EDECODE. */
int cq_wire_mp_parse(const uint8_t *p, size_t n, cq_mp_t *ret);

/* protobuf-c allocator over an arena with a byte cap (per inbound frame). */
typedef struct cq_wire_arena {
    ProtobufCAllocator pa;
    cq_arena_t arena;
} cq_wire_arena_t;

void cq_wire_arena_init(cq_wire_arena_t *a, size_t cap);
void cq_wire_arena_reset(cq_wire_arena_t *a);
void cq_wire_arena_done(cq_wire_arena_t *a);
/* Unpacks into the arena; returns NULL if the bytes are not a valid message of type d or the
 * cap is hit. The result lives until cq_wire_arena_reset(). */
void *cq_wire_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n,
                     cq_wire_arena_t *a);

/* ---- outbound ---- */

/* Size of the record for mp (its body_len counts; body may be NULL when sizing). */
size_t cq_wire_record_size(const cq_mp_t *mp);
/* Writes the record header (0x0a, len, MessagePack fields up to the body's length prefix) at
 * out and returns its size; the caller then writes body_len body bytes. */
size_t cq_wire_record_head(uint8_t *out, const cq_mp_t *mp);
/* Returns an owned record holding mp with body copied from mp->body, or NULL on OOM or when the
 * record would exceed CQ_WIRE_MAX_RECORD. */
cq_buf_t *cq_wire_record_raw(const cq_mp_t *mp);
/* Returns an owned record whose body is msg packed in place (msg may be NULL: empty body). */
cq_buf_t *cq_wire_record_msg(uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                             uint32_t msg_type, const ProtobufCMessage *msg);

/* ---- ServerForwardMessage ----
 *
 * ServerForwardMessage {1 uint32 clientConnId, 2 bytes payload} is the body of every
 * user-space message (msgType >= 100) to or from a SERVER connection. Relaying one is the hot
 * path of a game, so the three things the core does with it are done here by hand, without
 * allocating or unpacking: check a server's body, read its clientConnId, and wrap a client's
 * body in one. */

/* True when p[0..n) (borrowed) is a well-formed ServerForwardMessage: every field well formed
 * (unknown fields are accepted as protobuf does, groups are not), field 1 a varint and field 2
 * length-delimited. An empty body is valid. */
bool cq_wire_sfm_valid(const uint8_t *p, size_t n);
/* The clientConnId of a body that cq_wire_sfm_valid() accepted (the last one wins, as in
 * protobuf), or 0 when it has none. Reading stops at the first value that is not a varint when
 * read as one, so call it on validated bodies only. */
uint32_t cq_wire_sfm_client(const uint8_t *p, size_t n);
/* Returns an owned record for mp (borrowed) whose body is ServerForwardMessage{clientConnId =
 * client_conn_id, payload = mp->body[0..body_len)}: the same bytes protobuf-c packs, except
 * that clientConnId is written even when 0 (connection ids never are). The payload field is
 * left out when body_len is 0. NULL on OOM or when the record would exceed
 * CQ_WIRE_MAX_RECORD. */
cq_buf_t *cq_wire_sfm_record(const cq_mp_t *mp, uint32_t client_conn_id);

/* Writes an unknown length-delimited field (number 2047) of at least min_total bytes at out
 * (room for min_total + 3); returns the bytes written. Used to steer legacy-tag lengths. */
size_t cq_wire_pad(uint8_t *out, size_t min_total);

#endif
