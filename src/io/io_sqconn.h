/* io_sqconn.h - a TCP connection on a libuv loop whose output is a sans-I/O engine's send queue
 * (cq_sendq): the connection plumbing of the engine-loop host (io_engine.c), under the
 * durable-topic port, the manager and the next front ends. It reads into its class's buffer and
 * hands the bytes to the class's input hook; writes the queue the one way of the edge (io_stream.c:
 * try first, then one uv_write, whose callback releases what was written); closes gracefully (stop
 * reading, write what is queued, shut the write side down, close) or at once; and keeps the
 * timestamps that the class's timeouts are checked against (cq__io_sqconn_sweep). Loop thread only.
 *
 * Ownership: the owner allocates the struct that embeds an io_sqconn_t as its FIRST member
 * (tcp.data is the io_sqconn_t; the host's is an io_econn_t) and frees it in the class's closed
 * hook, which libuv runs after every write callback: the engine connection, and the send queue
 * it owns, may go there. The class is the owner's and outlives its connections. */
#ifndef CQ_IO_SQCONN_H
#define CQ_IO_SQCONN_H

#include "cq_list.h"
#include "cq_sendq.h"
#include "io_int.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct io_sqconn io_sqconn_t;

/* What the connections of one listener share. */
typedef struct io_sqclass {
    /* Bytes read (the connection is not closing); required. */
    void (*input)(io_sqconn_t *c, const uint8_t *p, size_t n);
    /* The close callback ran: release the engine connection and free the struct; required. */
    void (*closed)(io_sqconn_t *c);
    /* Queued output reached the socket; NULL: nothing to do. */
    void (*delivered)(io_sqconn_t *c);
    /* Whether the peer authenticated (for auth_timeout_ms); NULL: not checked. */
    bool (*authed)(const io_sqconn_t *c);
    /* Request/answer (HTTP): output queued at a flush is progress (the request was whole), and
     * timeout_ms bounds the time since accept or the last answer. Else auth_timeout_ms bounds
     * the time from accept to authentication and idle_timeout_ms the time without progress
     * (active_ms, which the owner moves). 0 disables each. */
    bool http;
    uint64_t timeout_ms, auth_timeout_ms, idle_timeout_ms;
    io_lsn_t *lsn;        /* the listener: refusals and timeout closes are counted there */
    uint32_t max_conns;   /* accepted over it: closed at once (cq__io_sqclass_full) */
    const char *cap_text; /* its log text, e.g. "mq-max-connections reached" (static) */
    int keepalive_s;      /* 0 = off */
    uint8_t *rbuf;        /* the loop's read buffer (input is consumed at once), rlen bytes */
    size_t rlen;
    uint32_t nopen; /* open (listed) connections */
} io_sqclass_t;

struct io_sqconn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    io_sqclass_t *cls;
    cq_sendq_t *q;   /* the engine connection's send queue (borrowed); set before start */
    size_t inflight; /* bytes of the uv_write in flight */
    bool writing;    /* a uv_write is in flight */
    bool closing;    /* close asked: stop reading, write what is queued, shut down */
    bool shut;       /* uv_shutdown was called */
    bool dropped;    /* uv_close was called: nothing is written any more */
    cq_list_t node;  /* in the owner's list while open (cq__io_sqconn_start) */
    uint64_t accepted_ms, active_ms; /* uv_now at accept; at the last progress */
    uint64_t frames;                 /* the owner's progress count at active_ms */
};

/* True (and fd refused: closed, counted, logged) when the class is at its cap. */
bool cq__io_sqclass_full(io_sqclass_t *cls, int fd);
/* Sets c (zeroed) up on loop and opens fd on it; fd is closed on failure. Returns 0, or a
 * negative code: then the handle is initialised and the caller calls cq__io_sqconn_drop(c). */
int cq__io_sqconn_open(io_sqconn_t *c, io_sqclass_t *cls, uv_loop_t *loop, int fd);
/* With c->q set: lists c in list, counts it, stamps accepted_ms and active_ms, sets TCP_NODELAY
 * and the keepalive, and starts reading. */
void cq__io_sqconn_start(io_sqconn_t *c, cq_list_t *list);
/* Closes at once with what is queued (idempotent); unlists and uncounts c. */
void cq__io_sqconn_drop(io_sqconn_t *c);
/* The reason c is over one of its class's limits at now (IO_CLOSE_*), or -1. */
int cq__io_sqconn_expired(const io_sqconn_t *c, uint64_t now);
/* Drops every connection of list (io_sqconn_t by node) over a limit at now, counting the
 * reason on its class's listener. */
void cq__io_sqconn_sweep(cq_list_t *list, uint64_t now);

/* Transport ops (cq_transport_ops_t; tctx is the io_sqconn_t): write the queue; stop reading,
 * write what is queued, then close; the peer's "HOST:PORT". */
void cq__io_sqconn_flush(void *tctx);
void cq__io_sqconn_close(void *tctx);
int cq__io_sqconn_peer(void *tctx, char *buf, size_t len);

#endif
