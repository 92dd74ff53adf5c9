/* io_outconn.h - one outgoing TCP connection of an engine loop (internal to src/io): connect,
 * read into the owner's input callback, write what the owner's sans-I/O link queued (one write
 * in flight, the link's buffer swapped with an empty one), and one callback when it ends,
 * whatever ended it. The owner keeps the reconnect policy (which address next, back-off): the
 * manager link (mq_mgr.c) and the followed shards (mq_follow.c). Loop thread only.
 */
#ifndef CQ_IO_OUTCONN_H
#define CQ_IO_OUTCONN_H

#include "cq_sbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct io_outconn io_outconn_t;

typedef struct io_outconn_ops {
    /* The connection is up (the owner's link may queue its hello; a flush follows). */
    void (*up)(void *ud);
    /* Bytes read (borrowed); < 0 ends the connection with that code as the reason. */
    int (*input)(void *ud, const uint8_t *p, size_t n);
    /* The bytes to write (the owner's link's buffer: swapped out when written). */
    cq_sbuf_t *(*output)(void *ud);
    /* It ended: was_up says whether it had connected; why is the reason (borrowed). Called
     * once; the object is closing and must not be used again. */
    void (*lost)(void *ud, bool was_up, const char *why);
} io_outconn_ops_t;

/* Starts connecting to addr on loop. Returns the connection (the loop frees it once closed),
 * or NULL on OOM or when the connect could not start (lost is not called then: *ret_err says
 * why). */
io_outconn_t *cq__io_outconn_start(uv_loop_t *loop, const struct sockaddr *addr,
                                   const io_outconn_ops_t *ops, void *ud, int *ret_err);
/* Writes what the owner queued, if connected and no write is in flight. */
void cq__io_outconn_flush(io_outconn_t *o);
/* Ends it now: lost(why) is called, then the handle closes. Accepts NULL. */
void cq__io_outconn_close(io_outconn_t *o, const char *why);
bool cq__io_outconn_up(const io_outconn_t *o);
/* True when h is o's socket. */
bool cq__io_outconn_owns(const io_outconn_t *o, const uv_handle_t *h);

#endif
