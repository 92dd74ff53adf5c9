/* cq_tls.h - server-side TLS over OpenSSL 3 memory BIOs (for wss).
 *
 * Sans-I/O: ciphertext received from the socket goes into cq_tls_input(), which runs the
 * handshake and then hands decrypted bytes to a callback; plaintext to send goes into
 * cq_tls_write(). Every call may produce ciphertext (handshake records, session tickets,
 * alerts, application data), which the caller drains with cq_tls_out() after EVERY call and
 * writes to the socket. Memory BIOs never block, so cq_tls_write() always takes everything:
 * backpressure is the caller's job (its write-queue size).
 *
 * Context: TLS 1.2 minimum; SSL_MODE_RELEASE_BUFFERS (less memory per idle connection),
 * SSL_OP_NO_RENEGOTIATION, SSL_OP_IGNORE_UNEXPECTED_EOF (clients that drop TCP without
 * close_notify are normal). Resumption: stateless TLS 1.3 tickets (one per handshake), which
 * work across worker threads sharing the context; the server-side session cache is off.
 * No ALPN or SNI handling: one certificate chain per context.
 *
 * Threads: a cq_tls_ctx_t may be shared by any number of threads once created (each cq_tls_new
 * takes its own reference on the OpenSSL context). A cq_tls_t is owned by one thread. OpenSSL's
 * error queue is per thread; every call clears it first.
 */
#ifndef CQ_TLS_H
#define CQ_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_tls_ctx cq_tls_ctx_t;
typedef struct cq_tls cq_tls_t;

/* Receives decrypted bytes (borrowed for the call). Return 0 to continue, or a negative error
 * to stop: cq_tls_input() then returns that error. */
typedef int (*cq_tls_plain_fn)(void *ud, const uint8_t *plain, size_t len);
/* Receives ciphertext to transmit (borrowed for the call; copy or write it before returning).
 * Return 0, or a negative error to stop: cq_tls_out() then returns that error. */
typedef int (*cq_tls_out_fn)(void *ud, const uint8_t *cipher, size_t len);

/* Loads a PEM certificate chain (leaf first) and its PEM private key (both borrowed paths) and
 * checks that they match. Returns an owned context, or NULL with the reason written into err
 * (errlen bytes, may be NULL/0), e.g. the OpenSSL error text for an unreadable file. */
cq_tls_ctx_t *cq_tls_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen);
/* Releases the caller's reference. Sessions created from it stay valid. Takes NULL. */
void cq_tls_ctx_free(cq_tls_ctx_t *ctx);

/* Creates a server session in accept state (ctx borrowed for the call). Returns an owned
 * session or NULL on OOM. */
cq_tls_t *cq_tls_new(cq_tls_ctx_t *ctx);
/* Frees the session, discarding any undrained output. Takes NULL. */
void cq_tls_free(cq_tls_t *t);

/* Feeds len bytes of ciphertext (borrowed). Drives the handshake; once it is complete, every
 * decrypted byte is handed to plain(ud, ...) in chunks of up to 16 KiB. Returns
 *   0            all input consumed (the handshake may still be in progress);
 *   CQ_ECLOSED   the peer sent close_notify (our close_notify is queued for cq_tls_out);
 *   CQ_ETLS      fatal TLS error; cq_tls_error() has the OpenSSL reason, and an alert may be
 *                queued for cq_tls_out;
 *   -ENOMEM, or the error returned by plain().
 * After a non-zero return, further input returns CQ_ECLOSED. After CQ_ECLOSED, CQ_ETLS and
 * -ENOMEM the session is dead (cq_tls_write returns CQ_ECLOSED); after an error of plain() it
 * can still encrypt, so the caller can send its last words (a WebSocket Close frame) with
 * cq_tls_write and cq_tls_shutdown. Drain cq_tls_out() afterwards in every case, then close
 * on error. */
int cq_tls_input(cq_tls_t *t, const uint8_t *cipher, size_t len, cq_tls_plain_fn plain, void *ud);

/* Encrypts len bytes of plaintext (borrowed; all of it is taken). Only valid once the
 * handshake is complete (cq_tls_ready()). Returns 0, -EAGAIN before the handshake completed,
 * CQ_ECLOSED after a shutdown or failure, CQ_ETLS or -ENOMEM. Drain cq_tls_out() afterwards. */
int cq_tls_write(cq_tls_t *t, const uint8_t *plain, size_t len);

/* Queues a close_notify alert (idempotent). Returns 0 or CQ_ETLS. Drain cq_tls_out(). */
int cq_tls_shutdown(cq_tls_t *t);

/* Hands all pending ciphertext to out(ud, ...), typically in one call, and empties the output
 * buffer (also when out() fails). Returns 0 or out()'s error. */
int cq_tls_out(cq_tls_t *t, cq_tls_out_fn out, void *ud);
/* Bytes of ciphertext waiting for cq_tls_out(). */
size_t cq_tls_out_pending(const cq_tls_t *t);

/* True once the handshake has completed. */
bool cq_tls_ready(const cq_tls_t *t);
/* The reason of the last CQ_ETLS (static or session-owned text, never NULL; "" if none). */
const char *cq_tls_error(const cq_tls_t *t);
/* The negotiated protocol version ("TLSv1.3"...), or "" before the handshake. */
const char *cq_tls_version(const cq_tls_t *t);

#endif
