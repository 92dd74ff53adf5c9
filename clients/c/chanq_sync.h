/* chanq_sync.h - a blocking libchanq adapter over POSIX TCP sockets and poll(), for tests.
 *
 * Every send function queues the message in the core and then writes all pending bytes before
 * returning (the socket is non-blocking internally; while a write would block, incoming bytes
 * are read and parsed so neither side can deadlock). Received messages are copied into an
 * in-order queue and handed out by chanq_sync_recv*().
 *
 * Threads: a chanq_sync_t belongs to one thread at a time. The library never raises SIGPIPE
 * (writes use MSG_NOSIGNAL).
 *
 * Return codes: 0 on success; CQ_ETIMEOUT when a timeout expires; CHANQ_SYNC_EOF (= CQ_ECLOSED)
 * when the peer closed the connection in order (FIN); -ECONNRESET (RST) or another -errno on a
 * socket error; a core error (CQ_EMAGIC, CQ_EDECODE...) when the server sent bad bytes.
 * chanq_sync_err_is_closed() tells "the server closed my connection" from everything else.
 * Messages received before the close are still returned first.
 * Timeouts are in milliseconds; a negative timeout waits forever.
 *
 * MOVING (chanq_sync_connect_list, chanq_move.h): the client takes a list of addresses and, when
 * its connection is lost (FIN, RST, a socket error such as the keepalive's ETIMEDOUT; not bad
 * bytes from the server, which kill the client as above), moves to the next one inside the
 * operation that saw the loss: it connects with the engine's backoff, authenticates again with
 * the same credentials, subscribes again to its own subscriptions, and calls on_moved. The move
 * runs within that operation's timeout (a connection try in progress finishes first, within
 * connect_timeout_ms); if the timeout passes first the operation returns CQ_ETIMEOUT and the
 * next operation carries the move on. Then:
 *  - chanq_sync_recv* keep waiting, on the new connection, until their timeout: the messages
 *    received before the loss come first, then the SUB results of the new subscriptions;
 *  - a send, flush or call whose bytes or reply went with the old connection (or were still
 *    queued when the core was reset for the new one) returns CHANQ_SYNC_MOVED: the message
 *    may or may not have reached the old node; the new connection is up; resync, then send
 *    again what must arrive;
 *  - when the engine gives up (max_tries, or an AUTH the new node refused: CQ_EAUTH) every
 *    operation returns that error.
 * chanq_sync_is_closed() observes a close and never moves. chanq_sync_fd() is -1 between
 * connections.
 */
#ifndef CHANQ_SYNC_H
#define CHANQ_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chanq.h"
#include "chanq_move.h"

/* Returned when the peer closed the connection (read returned 0). */
#define CHANQ_SYNC_EOF CQ_ECLOSED
/* Returned (> 0) by a send, flush or call of a moving client when its message or the reply went
 * with the old connection (see MOVING). */
#define CHANQ_SYNC_MOVED 1
/* Timeout used by the send functions (which take no timeout argument) until changed. */
#define CHANQ_SYNC_DEFAULT_SEND_TIMEOUT_MS 10000

typedef struct chanq_sync chanq_sync_t;

/* A received message with its own copy of the body. */
typedef struct chanq_owned_msg {
    uint32_t channel_id;
    uint32_t broadcast;
    uint32_t stub_id;
    uint32_t msg_type;
    uint8_t *body; /* owned (cq_malloc); NULL when body_len is 0 */
    uint32_t body_len;
} chanq_owned_msg_t;

/* Frees the body and zeroes *m. Accepts a zeroed or already-done message. */
void chanq_owned_msg_done(chanq_owned_msg_t *m);
/* Copies a borrowed message (its body too) into *out, owned by the caller. Returns 0 or
 * -ENOMEM (then *out is untouched). */
int chanq_owned_msg_copy(const chanq_msg_t *m, chanq_owned_msg_t *out);

/* True for the codes meaning the peer closed the connection: CHANQ_SYNC_EOF, -ECONNRESET,
 * -EPIPE. */
bool chanq_sync_err_is_closed(int err);

/* ---- lifecycle ------------------------------------------------------------------------- */

/* Connects to host:port (numeric or resolvable; IPv4 or IPv6) within timeout_ms, sets
 * TCP_NODELAY and creates the core with opts (opts may be NULL for the defaults; on_message/ud
 * in opts are ignored: the adapter owns the message callback). *ret_c is returned owned and
 * written only on success. Returns 0, CQ_ETIMEOUT, -ECONNREFUSED, -EINVAL (bad host/port),
 * -ENOMEM or another -errno. */
int chanq_sync_connect(const char *host, uint16_t port, const chanq_opts_t *opts, int timeout_ms,
                       chanq_sync_t **ret_c);

/* Connects to the first address of addrs ("host:port,host:port...", borrowed; chanq_move.h)
 * that answers, trying them in order with mopts' backoff (mopts copied, NULL = defaults of
 * chanq_move_opts_init; its ud stays borrowed), within timeout_ms in all; from then on the client
 * moves along the list when its connection is lost (see MOVING). Returns 0, -EINVAL (a bad
 * list), -ENOMEM, the last try's error when no address answered within timeout_ms (or
 * CQ_ETIMEOUT), or the engine's error after max_tries. A one-address list reconnects to it. */
int chanq_sync_connect_list(const char *addrs, const chanq_opts_t *opts,
                            const chanq_move_opts_t *mopts, int timeout_ms, chanq_sync_t **ret_c);

/* The move engine of a chanq_sync_connect_list client (borrowed: chanq_move_target,
 * chanq_move_moves...), NULL for chanq_sync_connect. */
const chanq_move_t *chanq_sync_move(const chanq_sync_t *c);

/* Closes the socket and frees everything, including queued messages. Accepts NULL. Returns
 * NULL. */
chanq_sync_t *chanq_sync_free(chanq_sync_t *c);

/* The core (borrowed; owned by c). Queue with any chanq_client_* encoder, then call
 * chanq_sync_flush. */
chanq_client_t *chanq_sync_client(chanq_sync_t *c);

/* The socket, e.g. for shutdown() in tests. Borrowed; do not close it. */
int chanq_sync_fd(const chanq_sync_t *c);

/* Sets the timeout used by every send function. */
void chanq_sync_set_send_timeout(chanq_sync_t *c, int timeout_ms);

/* Writes every byte the core has pending. Returns 0, CQ_ETIMEOUT, or a close/socket error
 * (CHANQ_SYNC_MOVED for a moving client). */
int chanq_sync_flush(chanq_sync_t *c, int timeout_ms);

/* ---- sending (queue in the core, then flush with the send timeout) ---------------------- */

int chanq_sync_send(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                    uint32_t msg_type, const ProtobufCMessage *msg);
int chanq_sync_send_raw(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                        uint32_t msg_type, const void *body, size_t len);
int chanq_sync_create_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_type,
                              const char *metadata,
                              const Channeldpb__ChannelSubscriptionOptions *sub_opts);
int chanq_sync_remove_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id);
int chanq_sync_list_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t type_filter,
                            const char *const *filters, size_t n_filters);
int chanq_sync_sub_to_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id,
                              uint32_t conn_id,
                              const Channeldpb__ChannelSubscriptionOptions *sub_opts);
int chanq_sync_unsub_from_channel(chanq_sync_t *c, uint32_t stub_id, uint32_t channel_id,
                                  uint32_t conn_id);
int chanq_sync_data_update(chanq_sync_t *c, uint32_t channel_id, const char *type_url,
                           const void *value, size_t len);
int chanq_sync_disconnect(chanq_sync_t *c, uint32_t conn_id);
int chanq_sync_user_msg(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                        const void *payload, size_t len);
int chanq_sync_server_forward(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast,
                              uint32_t msg_type, uint32_t client_conn_id, const void *payload,
                              size_t len);

/* Flushes what the core has pending, then writes bytes[0..n) (borrowed) as they are, with no
 * framing: for sending hand-crafted (malformed) input. Returns like chanq_sync_flush. */
int chanq_sync_write_raw(chanq_sync_t *c, const void *bytes, size_t n);

/* ---- receiving -------------------------------------------------------------------------- */

/* Returns the next received message in *out (owned by the caller: chanq_owned_msg_done).
 * *out is written only on success. Returns 0, CQ_ETIMEOUT, CHANQ_SYNC_EOF, -ECONNRESET, or a
 * core decode error. */
int chanq_sync_recv(chanq_sync_t *c, chanq_owned_msg_t *out, int timeout_ms);

/* Like chanq_sync_recv, but discards messages until one of msg_type arrives. timeout_ms bounds
 * the whole wait. */
int chanq_sync_recv_type(chanq_sync_t *c, uint32_t msg_type, chanq_owned_msg_t *out,
                         int timeout_ms);

/* Number of received messages waiting in the queue (without reading the socket). */
size_t chanq_sync_queued(const chanq_sync_t *c);

/* Waits until the peer closes the connection (FIN or RST), reading and queueing any messages
 * that arrive meanwhile. Returns 1 if the connection was closed, 0 if it was still open when
 * timeout_ms expired, or a negative error other than a close. Never moves. */
int chanq_sync_is_closed(chanq_sync_t *c, int timeout_ms);

/* Sends msg as an RPC (lowest free stubId) and waits for the message carrying that stubId.
 * The reply is returned in *out (owned by the caller); other messages that arrive meanwhile
 * stay queued for chanq_sync_recv. On timeout the stub is cancelled. Returns 0 or an error. */
int chanq_sync_call(chanq_sync_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t msg_type,
                    const ProtobufCMessage *msg, chanq_owned_msg_t *out, int timeout_ms);

/* Sends AUTH(pit, lt) as an RPC and waits for its AuthResult. On success (return 0) *ret_result
 * is the AuthResult code (0 SUCCESSFUL, 1 INVALID_PIT, 2 INVALID_LT) and *ret_conn_id the
 * connId (0 unless successful); either pointer may be NULL. Returns 0, CQ_EDECODE if the reply
 * body is not an AuthResultMessage, or a recv error. */
int chanq_sync_auth(chanq_sync_t *c, const char *pit, const char *lt, int timeout_ms,
                    int *ret_result, uint32_t *ret_conn_id);

/* Decodes m's body as a message of type d (see chanq_unpack). Returns it owned (free with
 * chanq_unpack_free) or NULL. */
void *chanq_sync_decode(const chanq_owned_msg_t *m, const ProtobufCMessageDescriptor *d);

#endif
