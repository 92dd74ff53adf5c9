/* cq_transport.h - the one transport vtable, implemented by TCP and WS/WSS (src/io/io.c,
 * src/io/ws.c) and KCP (src/io/kcp.c).
 *
 * The core and the fan-out code never switch on the transport type: they only call these ops.
 * All ops run on the connection's worker thread.
 */
#ifndef CQ_TRANSPORT_H
#define CQ_TRANSPORT_H

#include <stddef.h>

typedef struct cq_transport_ops {
    const char *name; /* "tcp", "kcp", "ws" */
    /* Writes what the connection's send queue holds (cq_conn_sendq), gathered, without
     * blocking; may leave a write in flight and continue it from its own callback. */
    void (*flush)(void *tctx);
    /* Starts closing the transport. It later calls cq_core_conn_release() exactly once. */
    void (*close)(void *tctx);
    /* Writes the peer address as text ("1.2.3.4:5678"); returns 0 or a negative error. */
    int (*peer)(void *tctx, char *buf, size_t len);
} cq_transport_ops_t;

#endif
