/* chanq.h - libchanq: the sans-I/O protocol core of the chanq / channeld client.
 *
 * The core does no I/O and includes neither socket headers nor <uv.h>. Bytes received from the
 * server go in through chanq_client_feed(), which parses packets (fixed or legacy "CH" header,
 * optional Snappy) and hands every MessagePack to a callback. Messages to send are queued with
 * chanq_client_send*() and the convenience encoders below; chanq_client_out() batches the queue
 * into packets (at most 65535 body bytes each) and exposes the bytes to write, and
 * chanq_client_out_consume() drops what the caller managed to write.
 *
 * Adapters: chanq_sync.h (blocking POSIX sockets, for tests) and chanq_uv.h (libuv, for the
 * benchmark) drive this core.
 *
 * Threads: a chanq_client_t belongs to one thread at a time; no function here is thread-safe
 * for the same client. Different clients are independent.
 *
 * Errors: functions return 0 (or a count) on success and a negative code on failure: -errno for
 * system errors (-ENOMEM, -EINVAL...), CQ_E* from cq_err.h for protocol errors. Print them with
 * cq_strerror().
 *
 * Memory: everything goes through cq_malloc/cq_free (cq_alloc.h).
 */
#ifndef CHANQ_H
#define CHANQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "bridge.pb-c.h"
#include "channeld.pb-c.h"
#include "options.pb-c.h"
#include "cq_err.h"

/* The largest packet body (after compression) and the header size. */
#define CHANQ_MAX_BODY 65535u
#define CHANQ_HDR_LEN  5
/* Default cap on a decompressed inbound packet body. */
#define CHANQ_DEFAULT_MAX_INFLATED (1u << 20)
/* First user-space message type. */
#define CHANQ_USER_SPACE_START 100u

typedef struct chanq_client chanq_client_t;

/* One received MessagePack. Every pointer is borrowed: body is valid only during the callback
 * it is passed to (it points into the client's receive or decompression buffer). */
typedef struct chanq_msg {
    uint32_t channel_id;
    uint32_t broadcast;
    uint32_t stub_id;
    uint32_t msg_type;
    const uint8_t *body; /* borrowed; NULL when body_len is 0 */
    uint32_t body_len;
} chanq_msg_t;

/* Called for each received message (see chanq_client_feed for which ones). ud is the opaque
 * pointer given with the callback. The callback may queue messages (chanq_client_send*) and
 * register or cancel stubs, but must not call chanq_client_feed or chanq_client_free. */
typedef void (*chanq_msg_fn)(void *ud, const chanq_msg_t *msg);

typedef enum {
    CHANQ_FRAMING_FIXED = 0,  /* 'C' 'H' len_hi len_lo ct (channeld >= PR #36, the UE plugin) */
    CHANQ_FRAMING_LEGACY = 1, /* 'C' 'H' 'N' len ct for bodies < 256 (Go, JS, Unity clients) */
} chanq_framing_t;

typedef struct chanq_opts {
    chanq_framing_t framing;
    /* Snappy-compress every outgoing packet (header byte 4 = 1). */
    bool compress;
    /* Turn `compress` on when a successful AuthResult says compressionType = SNAPPY, as the
     * Go, JS and Unity clients do. */
    bool follow_auth_compression;
    /* Cap on a decompressed inbound body; 0 means CHANQ_DEFAULT_MAX_INFLATED. */
    uint32_t max_inflated;
    /* Receives every message that no stub callback consumed. May be NULL (messages dropped). */
    chanq_msg_fn on_message;
    void *ud; /* borrowed; passed to on_message */
} chanq_opts_t;

/* ---- lifecycle ------------------------------------------------------------------------- */

/* Fills *opts with the defaults: fixed framing, no compression, no callback. */
void chanq_opts_init(chanq_opts_t *opts);

/* Creates a client. opts is copied (opts->ud stays borrowed). *ret_c is returned owned and is
 * written only on success. Returns 0, -EINVAL or -ENOMEM. */
int chanq_client_new(const chanq_opts_t *opts, chanq_client_t **ret_c);

/* Frees the client, its buffers and its stub registrations (their callbacks are not called).
 * Accepts NULL. Returns NULL. Must not be called from inside a callback of this client. */
chanq_client_t *chanq_client_free(chanq_client_t *c);

/* Replaces the message callback (fn may be NULL). */
void chanq_client_set_on_message(chanq_client_t *c, chanq_msg_fn fn, void *ud);

/* ---- state ------------------------------------------------------------------------------ */

/* The connId from the last successful AuthResult received, or 0. */
uint32_t chanq_client_conn_id(const chanq_client_t *c);
/* The compressionType of the last successful AuthResult received (0 none, 1 Snappy). */
uint32_t chanq_client_auth_compression(const chanq_client_t *c);
/* 0 while the client is usable; otherwise the error that killed it (feed failed). */
int chanq_client_error(const chanq_client_t *c);
/* Turns Snappy compression of outgoing packets on or off (takes effect at the next packet). */
void chanq_client_set_compress(chanq_client_t *c, bool on);

/* ---- bytes in --------------------------------------------------------------------------- */

/* Feeds len received bytes (borrowed; copied only when a packet is incomplete). Parses every
 * complete packet, decompresses it when header byte 4 is 1, and delivers its messages in order:
 *   1. a successful AUTH result (msgType 1, stubId echoed or not) updates conn_id first;
 *   2. if stubId > 0 and a stub callback is registered for it, that callback is removed and then
 *      called, and on_message is NOT called for this message;
 *   3. otherwise on_message is called.
 * A packet is validated as a whole before any of its messages is delivered.
 * Returns the number of messages delivered (>= 0), or a negative error: CQ_EMAGIC, CQ_EZEROLEN,
 * CQ_ETOOBIG (framing), CQ_ESNAPPY, CQ_EDECODE (body), -ENOMEM, -EBUSY (called from inside a
 * callback). After an error other than -EBUSY the client is dead: every later feed returns the
 * same error (chanq_client_error). Sending still works so a caller can flush what is queued. */
int chanq_client_feed(chanq_client_t *c, const void *data, size_t len);

/* Bytes fed but not yet parsed (part of an incomplete packet). */
size_t chanq_client_in_pending(const chanq_client_t *c);

/* ---- bytes out -------------------------------------------------------------------------- */

/* Queues one message whose body is msg packed with protobuf-c (msg borrowed; NULL = empty
 * body). Returns 0, CQ_ETOOBIG when the record alone would not fit a packet, or -ENOMEM. */
int chanq_client_send(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                      uint32_t msg_type, const ProtobufCMessage *msg);

/* Like chanq_client_send with the body given as bytes (borrowed, copied). */
int chanq_client_send_raw(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                          uint32_t stub_id, uint32_t msg_type, const void *body, size_t len);

/* Closes the packet being filled, then exposes every pending outbound byte: *ret_p (borrowed,
 * valid until the next call on this client) and *ret_len (0 when nothing is pending). Messages
 * queued since the previous call are batched: each packet is a 5-byte header plus as many
 * whole records as fit in 65535 body bytes (before compression). Returns 0, or CQ_ESNAPPY /
 * -ENOMEM (the queued messages are then kept). */
int chanq_client_out(chanq_client_t *c, const uint8_t **ret_p, size_t *ret_len);

/* Drops the first n bytes returned by chanq_client_out (n is clamped to what is pending). */
void chanq_client_out_consume(chanq_client_t *c, size_t n);

/* Outbound bytes pending: finished packets plus records not yet closed into a packet. */
size_t chanq_client_out_pending(const chanq_client_t *c);

/* ---- RPC stubs -------------------------------------------------------------------------- */

/* Registers fn under the lowest free stubId >= 1 and returns that id in *ret_stub. fn is called
 * (once, after being removed) when a message with that stubId arrives; ud is borrowed.
 * Returns 0 or -ENOMEM. Use the id with any send function below. */
int chanq_client_stub_alloc(chanq_client_t *c, chanq_msg_fn fn, void *ud, uint32_t *ret_stub);

/* Frees a stub's ud when the stub dies without firing (see chanq_client_stub_alloc_owned). */
typedef void (*chanq_stub_drop_fn)(void *ud);

/* Like chanq_client_stub_alloc, but ud is owned by the registration: drop(ud) is called when the
 * stub is cancelled or the client is freed before the stub fired (drop may be NULL). When the
 * stub fires, fn receives ud and owns it from then on. Used by typed RPC helpers
 * (chanq_spatial.h) whose per-call context must not leak. */
int chanq_client_stub_alloc_owned(chanq_client_t *c, chanq_msg_fn fn, void *ud,
                                  chanq_stub_drop_fn drop, uint32_t *ret_stub);

/* Removes the registration for stub without calling it (its drop function, if any, runs).
 * Returns 0 or -ENOENT. */
int chanq_client_stub_cancel(chanq_client_t *c, uint32_t stub);

/* Number of registered stubs. */
size_t chanq_client_stub_count(const chanq_client_t *c);

/* chanq_client_stub_alloc + chanq_client_send. On a send failure the stub is released. */
int chanq_client_call(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                      const ProtobufCMessage *msg, chanq_msg_fn fn, void *ud, uint32_t *ret_stub);

/* ---- convenience encoders --------------------------------------------------------------- *
 * Each builds the protobuf-c message and calls chanq_client_send. stub_id 0 means "no reply
 * expected"; pass an id from chanq_client_stub_alloc to get the reply in a callback. String and
 * options arguments are borrowed; NULL strings mean "". Same return codes as chanq_client_send,
 * plus -EINVAL for a bad argument. */

/* AUTH (1) on channel 0. Records pit and lt for chanq_client_reauth (-ENOMEM if it cannot). */
int chanq_client_auth(chanq_client_t *c, uint32_t stub_id, const char *pit, const char *lt);

/* CREATE_CHANNEL (3) on channel 0. sub_opts may be NULL. */
int chanq_client_create_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_type,
                                const char *metadata,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts);

/* Channel data of a CREATE_CHANNEL: the initial state as an Any, and the merge options. */
typedef struct chanq_channel_data {
    const char *type_url; /* "type.googleapis.com/pkg.Msg" */
    const void *value;    /* serialized initial state (may be empty) */
    size_t len;
    const Channeldpb__ChannelDataMergeOptions *merge_opts; /* NULL: plain protobuf merge */
} chanq_channel_data_t;

/* CREATE_CHANNEL (3) with initial channel data (data borrowed; NULL = none). */
int chanq_client_create_channel_data(chanq_client_t *c, uint32_t stub_id, uint32_t channel_type,
                                     const char *metadata,
                                     const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                                     const chanq_channel_data_t *data);

/* Decodes a received CHANNEL_DATA_UPDATE (8) fan-out. On success *ret_update is an owned
 * message (free with chanq_unpack_free); its data->type_url and data->value hold the merged
 * update of one window (or the whole state on a first fan-out). Returns 0, -EINVAL for another
 * message type, or CQ_EDECODE. */
int chanq_decode_data_update(const chanq_msg_t *msg,
                             Channeldpb__ChannelDataUpdateMessage **ret_update);

/* channeld's test channel data type, testpb.TestChannelDataMessage {1 string text; 2 uint32
 * num} (type URL "type.googleapis.com/testpb.TestChannelDataMessage"), decoded without
 * generated code: text points into the input (borrowed, not NUL-terminated). The last
 * occurrence of a field wins, as in a protobuf parse, so an unmerged concatenation decodes too.
 * Returns 0 or CQ_EDECODE. */
typedef struct chanq_testdata {
    const char *text;
    size_t text_len;
    uint32_t num;
} chanq_testdata_t;
int chanq_testdata_decode(const void *value, size_t len, chanq_testdata_t *ret);

/* REMOVE_CHANNEL (4) on channel 0, body channelId = channel_id. */
int chanq_client_remove_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id);

/* LIST_CHANNEL (5) on channel 0. filters: n_filters borrowed strings (may be NULL if 0). */
int chanq_client_list_channel(chanq_client_t *c, uint32_t stub_id, uint32_t type_filter,
                              const char *const *filters, size_t n_filters);

/* SUB_TO_CHANNEL (6) targeting channel_id. sub_opts may be NULL. conn_id 0 or this connection's
 * id: a subscription of its own, recorded when its result arrives (see chanq_client_sub_at). */
int chanq_client_sub_to_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                uint32_t conn_id,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts);

/* UNSUB_FROM_CHANNEL (7) targeting channel_id. */
int chanq_client_unsub_from_channel(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                    uint32_t conn_id);

/* CHANNEL_DATA_UPDATE (8) targeting channel_id with Any{type_url, value}. */
int chanq_client_data_update(chanq_client_t *c, uint32_t channel_id, const char *type_url,
                             const void *value, size_t len);

/* DISCONNECT (9) on channel 0 for conn_id (server connections only). */
int chanq_client_disconnect(chanq_client_t *c, uint32_t conn_id);

/* A user-space message as a CLIENT sends it: msgBody = payload as is. msg_type must be >= 100
 * (-EINVAL otherwise). */
int chanq_client_user_msg(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                          uint32_t msg_type, const void *payload, size_t len);

/* A user-space message as a SERVER sends it: msgBody = ServerForwardMessage{client_conn_id,
 * payload}. msg_type must be >= 100 (-EINVAL otherwise). */
int chanq_client_server_forward(chanq_client_t *c, uint32_t channel_id, uint32_t broadcast,
                                uint32_t msg_type, uint32_t client_conn_id, const void *payload,
                                size_t len);

/* ---- what a move redoes: credentials and the client's own subscriptions ------------------ *
 * A connection that moves to another node (chanq_move.h) authenticates there again and
 * subscribes again to what it had subscribed ITSELF to. The core records both:
 *  - the PIT and login token of the last chanq_client_auth (copied);
 *  - each subscription this connection asked for itself: chanq_client_sub_to_channel with
 *    conn_id 0 or this connection's id marks the channel as asked; the SUB result naming this
 *    connection on that channel then records it with the channel type and the effective
 *    options the result carried. A later SUB result naming this connection on a recorded
 *    channel (its options changed) updates the record; an UNSUB result naming this connection
 *    or a REMOVE_CHANNEL of the channel forgets it.
 * Subscriptions a server made for this connection (a SUB naming it, a spatial interest, a
 * handover) are not recorded: after a move they are that server's to redo. A request whose
 * result never arrived (the connection was lost first) is not recorded either. Messages queued
 * with chanq_client_send* directly are not looked at. */

/* A recorded subscription. Borrowed from the client: valid until the next feed, sub, reset or
 * free. */
typedef struct chanq_sub {
    uint32_t channel_id;
    uint32_t channel_type;
    const uint8_t *opts; /* packed ChannelSubscriptionOptions as the result carried them */
    size_t opts_len;
} chanq_sub_t;

/* Number of recorded subscriptions, and the i-th (in the order their first results arrived;
 * NULL past the end). */
size_t chanq_client_sub_count(const chanq_client_t *c);
const chanq_sub_t *chanq_client_sub_at(const chanq_client_t *c, size_t i);
/* The record of channel_id, or NULL. */
const chanq_sub_t *chanq_client_sub_find(const chanq_client_t *c, uint32_t channel_id);

/* Starts over on a new connection: drops unparsed input and unsent output (queued messages
 * too), forgets the conn id, the AuthResult's compression (compression that followed it is
 * turned off again), the error and the channels asked for, and cancels every stub (their drop
 * functions run). Keeps the options, the message callback, the credentials and the recorded
 * subscriptions. Returns 0, or -EBUSY from inside a callback of this client. */
int chanq_client_reset(chanq_client_t *c);

/* AUTH (1) again with the credentials of the last chanq_client_auth. Returns like
 * chanq_client_auth, or -ENOENT when chanq_client_auth was never called. */
int chanq_client_reauth(chanq_client_t *c, uint32_t stub_id);

/* SUB_TO_CHANNEL (6), stub 0, for every recorded subscription, naming this connection's id with
 * the recorded options; *ret_n (may be NULL) is the number queued. Returns 0 or the first
 * error (-ENOMEM, CQ_EDECODE for a record that does not unpack; the ones before it stay queued). */
int chanq_client_resubscribe(chanq_client_t *c, size_t *ret_n);

/* ---- decoding helpers ------------------------------------------------------------------- */

/* The protobuf-c allocator over cq_malloc/cq_free used by chanq_unpack. Static; never NULL. */
ProtobufCAllocator *chanq_pb_allocator(void);

/* Unpacks body[0..len) (borrowed) as a message of type d. Returns it owned (free it with
 * chanq_unpack_free), or NULL if the bytes are not a valid message or on OOM. */
void *chanq_unpack(const ProtobufCMessageDescriptor *d, const void *body, size_t len);

/* Frees a message returned by chanq_unpack. Accepts NULL. */
void chanq_unpack_free(void *msg);

/* A durable-topic event as chanqd's bridge delivers it (doc/bridge.md): the body of a
 * user-space message, ServerForwardMessage{clientConnId 0, payload: chanqpb.TopicEvent}.
 * Returns the TopicEvent (free with chanq_unpack_free), or NULL when body[0..len) is not one
 * or on OOM. */
Chanqpb__TopicEvent *chanq_topic_event_decode(const void *body, size_t len);

#endif
