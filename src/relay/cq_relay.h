/* cq_relay.h - the relay runtime (issue 23, doc/relay-cluster.md): one thread that owns this
 * node's links (cq_link.h) to every peer node and moves their packets over a network, NATS in
 * chanqd (cq_relay_nats.h), an in-process fake in the tests.
 *
 * Threads.
 *   - The relay thread owns the links. It waits on an inbox (mutex + condition variable) until
 *     something arrives or a link's NACK timer is due; a round then takes everything queued,
 *     packs the records queued for each peer into as few packets as fit (one per peer per round
 *     in the common case: encode once, publish once) and publishes them, feeds the packets that
 *     arrived to the peers' receivers, answers NACKs, and hands what was delivered to the
 *     deliver callback.
 *   - Workers call cq_relay_send() (any thread): it queues and wakes the relay thread. A worker
 *     calls it once per destination node per loop iteration, so the lock is not taken per
 *     message. It never blocks on the network.
 *   - The network's threads call cq_relay_input() (any thread) with every packet that arrived
 *     on this node's subject: it copies and queues; or, with input_inline, runs it through its
 *     peer's receiver right there, under the peers' lock, which saves a thread wake-up per
 *     packet. The network must then not call it from inside publish() (the fake networks of
 *     the tests do, and leave input_inline off).
 * The callbacks (deliver, reset) run on the relay thread, or on the input thread with
 * input_inline, one at a time either way; they must not block for long (chanqd posts to the
 * worker inboxes).
 *
 * Liveness. Every peer gets a HEAD at least every CQ_RELAY_HEAD_MS, data or not, and every packet
 * from a peer calls heard: a peer not heard for a few times that is not answering.
 *
 * Order. Records sent by one thread to one node are delivered there in the order sent, exactly
 * once, or the stream RESETs (reset callback: the records lost in between are gone and the
 * caller rebuilds what came from that peer). Records of different sending threads interleave.
 *
 * Bounds. What waits for the relay thread is bounded by queue_bytes: cq_relay_send() refuses
 * (CQ_ELIMIT) past it and the caller counts the loss; packets that arrive past it are dropped
 * and counted (the link's gap machinery asks for them again). At most CQ_RELAY_MAX_PEERS peers.
 */
#ifndef CQ_RELAY_H
#define CQ_RELAY_H

#include "cq_buf.h"
#include "cq_link.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_RELAY_MAX_PEERS   255u
#define CQ_RELAY_SUBJECT_MAX 128u
#define CQ_RELAY_HEAD_MS     200u /* a peer hears this node at least this often (HEAD) */

/* The network as the relay thread uses it. publish() is called on the relay thread only and
 * may block for a bounded time (libnats: a full socket); it copies p. */
typedef struct cq_relay_net_ops {
    int (*publish)(void *net, const char *subject, const uint8_t *p, size_t n);
} cq_relay_net_ops_t;

/* A record delivered from peer `node`, in stream order; body borrowed for the call. */
typedef void (*cq_relay_deliver_fn)(void *ud, uint16_t node, uint8_t kind, const uint8_t *body,
                                    uint32_t len);
/* A packet from `node` arrived (any: data, HEAD, NACK): it lives. */
typedef void (*cq_relay_heard_fn)(void *ud, uint16_t node);
/* The stream from `node` broke (why, cq_link_why_t): `lost` packets are gone; everything that
 * came from that peer must be rebuilt. */
typedef void (*cq_relay_reset_fn)(void *ud, uint16_t node, int why, uint64_t lost);

typedef struct cq_relay_conf {
    uint16_t node;       /* this node, 1..CQ_LINK_MAX_NODE */
    uint32_t epoch;      /* non-zero; 0: derived from the wall clock (cq_relay_epoch_now) */
    const char *cluster; /* subjects are "chanq.<cluster>.node.<id>"; NULL: "default" */
    size_t keep_bytes;   /* per peer, kept for NACKs (0: 4 MiB) */
    size_t queue_bytes;  /* waiting for the relay thread, at most (0: 64 MiB) */
    cq_link_rx_cfg_t rx; /* receivers (zero fields: the link's defaults) */
    const cq_relay_net_ops_t *net_ops;
    void *net;
    cq_relay_deliver_fn deliver;
    cq_relay_reset_fn reset;
    cq_relay_heard_fn heard; /* may be NULL */
    void *ud;
    bool input_inline; /* cq_relay_input() delivers on its caller's thread (above) */
} cq_relay_conf_t;

/* Per peer, for metrics. */
typedef struct cq_relay_peer_stats {
    uint16_t node;
    cq_link_tx_stats_t tx;
    cq_link_rx_stats_t rx;
    uint64_t records_out, records_in, publish_errors;
} cq_relay_peer_stats_t;

typedef struct cq_relay_stats {
    uint64_t rounds, refused_sends, dropped_inputs, unknown_src, bad_packets;
    uint64_t queued_bytes; /* now */
} cq_relay_stats_t;

typedef struct cq_relay cq_relay_t;

/* An epoch that grows across restarts of a node: quarter seconds since 2024 (wraps in 2058). */
uint32_t cq_relay_epoch_now(void);
/* "chanq.<cluster>.node.<node>" into out; returns 0 or -ENOSPC. */
int cq_relay_subject(const char *cluster, uint16_t node, char *out, size_t outlen);

/* Starts the relay thread. conf is copied (cluster too). Returns 0, -EINVAL, -ENOMEM or a
 * pthread error; *ret is owned. */
int cq_relay_start(const cq_relay_conf_t *conf, cq_relay_t **ret);
/* Stops the thread (what is queued is dropped) and frees. After it returns no callback runs.
 * Accepts NULL. */
void cq_relay_stop(cq_relay_t *r);

/* Queues one record for node (kind, body: a reference is taken). Returns 0, -EINVAL (node is
 * this one, 0 or over the maximum), CQ_ELIMIT (the queue is full: counted) or -ENOMEM. */
int cq_relay_send(cq_relay_t *r, uint16_t node, uint8_t kind, cq_buf_t *body);
/* A packet that arrived on this node's subject (copied). Any thread. */
void cq_relay_input(cq_relay_t *r, const uint8_t *p, size_t n);

uint16_t cq_relay_node(const cq_relay_t *r);
uint32_t cq_relay_epoch(const cq_relay_t *r);
/* A snapshot: the totals into *st, up to max peers (by node) into out; returns how many. */
size_t cq_relay_stats(cq_relay_t *r, cq_relay_stats_t *st, cq_relay_peer_stats_t *out, size_t max);

#endif
