/* echo.h - a sans-I/O echo engine: the worked example of doc/architecture.md, "The engine-loop
 * host" (echo_io.c hosts it). What a connection sends is queued back on its send queue, and a
 * connection with output is written once per loop iteration (echo_flush).
 *
 * With hold, every input is work in flight, the way a produce waits for its commit: nothing is
 * answered until another thread calls echo_complete(), which hands the completion back through
 * the engine's wake; the loop then answers everything held (echo_drain). No loop, no socket, no
 * clock: bytes in, bytes and wakes out.
 *
 * Threads: echo_complete and echo_wait_held from any thread; the rest on the loop thread (or
 * before it runs). */
#ifndef CQ_TEST_ECHO_H
#define CQ_TEST_ECHO_H

#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct echo echo_t;
typedef struct echo_conn echo_conn_t;

/* Returns an owned engine, or NULL on OOM. */
echo_t *echo_new(bool hold);
/* Frees e (its connections are freed first). Accepts NULL; returns NULL. */
echo_t *echo_free(echo_t *e);
/* The loop's wake: called (under the engine's lock, from echo_complete's thread) when
 * completions wait for echo_drain. NULL unsets it; after that returns no call is made. */
void echo_set_wake(echo_t *e, void (*wake)(void *ud), void *ud);

/* A connection over transport t (tctx is t's context; both borrowed). NULL on OOM. */
echo_conn_t *echo_conn_new(echo_t *e, const cq_transport_ops_t *t, void *tctx);
/* The connection's send queue (owned by c; the transport writes it). */
cq_sendq_t *echo_conn_sendq(echo_conn_t *c);
/* Bytes from the peer: echoed (or held). */
void echo_conn_input(echo_conn_t *c, const uint8_t *p, size_t n);
/* Inputs taken from c: the progress a host counts for idle timeouts. */
uint64_t echo_conn_inputs(const echo_conn_t *c);
/* Frees c and what it queued or held. Accepts NULL. */
void echo_conn_free(echo_conn_t *c);

/* Writes every connection with new output (its transport's flush). */
void echo_flush(echo_t *e);
/* Answers what was held, once echo_complete() was called. */
void echo_drain(echo_t *e);
/* No input held. */
bool echo_idle(const echo_t *e);
/* Appends chanq_echo_inputs_total. 0 or -ENOMEM. */
int echo_metrics(const echo_t *e, cq_sbuf_t *b);

/* The work in flight completed (any thread): wakes the loop to answer it. */
void echo_complete(echo_t *e);
/* Waits (any thread) until n inputs were held since the start; false after timeout_ms. */
bool echo_wait_held(echo_t *e, uint64_t n, int timeout_ms);

#endif
