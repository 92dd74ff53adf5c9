/* chanq_uv.h - a libuv adapter for the libchanq core (for the benchmark and async tools).
 *
 * Pattern: the core stays sans-I/O; this adapter owns a uv_tcp_t and a uv_prepare_t on the
 * caller's loop. Messages are queued in the core (chanq_uv_client + any chanq_client_* encoder,
 * or chanq_uv_send*) and flushed once per loop iteration, just before the loop blocks: the
 * prepare hook tries uv_try_write and hands the remainder to uv_write from a buffer the adapter
 * owns until the write callback. At most one uv_write is in flight; bytes queued meanwhile go
 * out at the next iteration after it completes.
 *
 * Threads: everything runs on the loop's thread. No function here may be called from another
 * thread.
 *
 * Lifetime: chanq_uv_close() (or a read/write error, or EOF) closes both handles; on_close is
 * called exactly once, after which the chanq_uv_t is freed by the adapter. Never free it
 * yourself. It is safe to call chanq_uv_close() from any callback of the adapter.
 *
 * Moving (chanq_uv_connect_list, chanq_move.h): the client takes a list of numeric addresses;
 * on_connect reports the first connection made (or, when the engine gives up before any, its
 * error, then on_close). When the connection is lost (EOF, a reset, a socket error such as the
 * keepalive's UV_ETIMEDOUT; bad bytes from the server still close the client) it is not closed:
 * a timer runs the engine's backoff, a new connection is made to the next address, AUTH and the
 * client's own SUBs are sent again, and the engine's on_moved reports the move. Messages queued
 * between the loss and the new connection are dropped with the old connection's. on_close comes
 * only after chanq_uv_close, a core error, or when the engine gives up (its error: CQ_EAUTH, the
 * last try's error after max_tries).
 */
#ifndef CHANQ_UV_H
#define CHANQ_UV_H

#include <uv.h>

#include "chanq.h"
#include "chanq_move.h"

typedef struct chanq_uv chanq_uv_t;

typedef struct chanq_uv_cbs {
    /* status 0: connected; otherwise a libuv error (negative); on failure on_close follows. */
    void (*on_connect)(chanq_uv_t *c, int status, void *ud);
    /* Every received message not consumed by a stub callback; msg is borrowed. */
    void (*on_message)(chanq_uv_t *c, const chanq_msg_t *msg, void *ud);
    /* The connection is gone: err is 0 after chanq_uv_close, UV_EOF when the peer closed, a
     * libuv error, or a chanq core error (CQ_EDECODE...). c is freed right after this returns. */
    void (*on_close)(chanq_uv_t *c, int err, void *ud);
} chanq_uv_cbs_t;

/* Starts connecting to addr (borrowed, copied by libuv) on loop (borrowed; must outlive c).
 * opts may be NULL (defaults); its on_message/ud are ignored (use cbs). cbs is copied; ud is
 * borrowed. *ret_c is returned owned by the adapter (see Lifetime) and written only on
 * success. Returns 0 or a negative libuv / errno code (nothing to close on failure). */
int chanq_uv_connect(uv_loop_t *loop, const struct sockaddr *addr, const chanq_opts_t *opts,
                     const chanq_uv_cbs_t *cbs, void *ud, chanq_uv_t **ret_c);

/* Starts connecting to the first address of addrs ("ip:port,[ip6]:port...", numeric; borrowed)
 * that answers, and moves along the list whenever the connection is lost (see Moving). mopts is
 * copied (NULL = chanq_move_opts_init's defaults; its ud stays borrowed); the rest as for
 * chanq_uv_connect. Returns 0, UV_EINVAL (a bad list, a host that is not a numeric address),
 * UV_ENOMEM or a libuv error (nothing to close on failure). */
int chanq_uv_connect_list(uv_loop_t *loop, const char *addrs, const chanq_opts_t *opts,
                          const chanq_move_opts_t *mopts, const chanq_uv_cbs_t *cbs, void *ud,
                          chanq_uv_t **ret_c);

/* The move engine of a chanq_uv_connect_list client (borrowed), NULL otherwise. */
const chanq_move_t *chanq_uv_move(const chanq_uv_t *c);

/* The core (borrowed; owned by c). Queue messages with chanq_client_* encoders; they are
 * flushed before the loop next blocks. */
chanq_client_t *chanq_uv_client(chanq_uv_t *c);

/* Queue helpers (same semantics as chanq_client_send / _send_raw). */
int chanq_uv_send(chanq_uv_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                  uint32_t msg_type, const ProtobufCMessage *msg);
int chanq_uv_send_raw(chanq_uv_t *c, uint32_t channel_id, uint32_t broadcast, uint32_t stub_id,
                      uint32_t msg_type, const void *body, size_t len);

/* Bytes queued in the core plus bytes handed to uv_write and not yet completed. */
size_t chanq_uv_pending(const chanq_uv_t *c);

/* Starts closing (idempotent). Queued bytes not yet written are dropped. on_close follows. */
void chanq_uv_close(chanq_uv_t *c);

#endif
