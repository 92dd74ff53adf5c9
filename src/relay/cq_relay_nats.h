/* cq_relay_nats.h - the relay's network over NATS (nats.c, the only libnats user, as zk.c is
 * libzookeeper's). Core NATS pub/sub: this node subscribes to its own subject and publishes to
 * its peers' (cq_relay_subject); the link (cq_link.h) makes the at-most-once delivery exact or
 * counted.
 *
 * Threads (cluster-recipes.md finding 5): libnats runs its own threads. on_packet and on_state
 * are called on them; they must copy and hand off (chanqd: cq_relay_input). Publishing is
 * called on the relay thread only (cq_relay_nats_ops): with SendAsap it writes at once, no
 * 1 ms coalescing; it may block while the socket is full, up to libnats's write deadline, which
 * stalls the relay thread, never a worker. natsConnection_Flush is never called.
 *
 * Built only when libnats is found (CQ_HAVE_NATS=1); without it, cq_relay_nats_open returns
 * -ENOTSUP and chanqd refuses --relay-nats with that reason.
 */
#ifndef CQ_RELAY_NATS_H
#define CQ_RELAY_NATS_H

#include "cq_relay.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cq_relay_nats_state {
    CQ_RELAY_NATS_CONNECTED = 1,
    CQ_RELAY_NATS_DISCONNECTED,
    CQ_RELAY_NATS_RECONNECTED,
    CQ_RELAY_NATS_CLOSED,
} cq_relay_nats_state_t;

typedef struct cq_relay_nats_conf {
    const char *urls; /* "nats://h:p[,nats://h:p...]"; a URL may hold user:pass@ */
    const char *user; /* with password: nats-server's user/password authorization */
    const char *password;
    const char *token;    /* or its token authorization */
    bool tls;             /* require TLS */
    const char *tls_ca;   /* PEM file of the CAs to trust (implies tls) */
    const char *tls_cert; /* client certificate chain and key, PEM (mutual TLS) */
    const char *tls_key;
    const char *name;           /* the connection's name in nats-server's monitoring */
    uint32_t reconnect_wait_ms; /* between tries of one server (0: 100) */
    /* A message on the subscribed subject; p borrowed for the call. Library threads. */
    void (*on_packet)(void *ud, const uint8_t *p, size_t n);
    /* The connection's state changed; url: the server now connected to, or "". Library threads. */
    void (*on_state)(void *ud, cq_relay_nats_state_t st, const char *url);
    void *ud;
} cq_relay_nats_conf_t;

typedef struct cq_relay_nats_stats {
    uint64_t connects, disconnects, reconnects, publish_errors, async_errors;
    int64_t dropped; /* messages the subscription dropped as a slow consumer (libnats) */
    bool connected;
} cq_relay_nats_stats_t;

typedef struct cq_relay_nats cq_relay_nats_t;

/* Connects (a server that is not up yet is retried in the background: the call does not wait
 * for it). conf is copied. Returns 0, -EINVAL (bad conf, the reason in err), -ENOTSUP (built
 * without libnats), CQ_ECONFIG (libnats refused an option: the reason in err) or -ENOMEM. */
int cq_relay_nats_open(const cq_relay_nats_conf_t *conf, cq_relay_nats_t **ret, char *err,
                       size_t errlen);
/* Subscribes to subject (this node's): on_packet starts. Returns 0 or CQ_ECONFIG. */
int cq_relay_nats_subscribe(cq_relay_nats_t *n, const char *subject, char *err, size_t errlen);
/* Stops the callbacks (no on_packet or on_state after it returns) and keeps the connection, so
 * that the relay thread publishing over it can be stopped next; then cq_relay_nats_close.
 * Accepts NULL. */
void cq_relay_nats_quiesce(cq_relay_nats_t *n);
/* Closes: no callback runs after it returns, and nothing may publish over n any more (stop the
 * relay thread first). Accepts NULL. */
void cq_relay_nats_close(cq_relay_nats_t *n);
void cq_relay_nats_stats(cq_relay_nats_t *n, cq_relay_nats_stats_t *ret);

/* The relay's network ops over n (net = n). */
extern const cq_relay_net_ops_t cq_relay_nats_ops;

#endif
