/* cq_mqsrv.h - the durable-topic session engine: the seed protocol's server side, sans I/O.
 * This header is what the edge (src/io/mq_io.c) sees; the store side (the port, construction
 * and completions) is in cq_mqport.h, which only the composition root and tests include, so
 * the edge never depends on the store.
 *
 * One cq_mqsrv_t serves every connection of the MQ port; it lives on ONE thread (the MQ loop
 * while it runs; whoever stopped the loop afterwards) and every function below must be called
 * from that thread unless it says otherwise. It reads nothing from the network and writes
 * nothing: the edge feeds received bytes with cq_mqsrv_conn_input() and receives frames to send
 * through cq_mqsrv_conn_ops_t. Store work goes out through the store port and comes back, from
 * any thread, into the engine's completion inbox; the engine then calls ops->wake and the edge
 * calls cq_mqsrv_drain() on the engine's thread.
 *
 * Per connection: bytes -> frames (cq_mq_parse) -> cq_mq_decode -> one handler per type (a
 * table row in handlers.c) -> the operation layer shared with the HTTP API (ops.c):
 *   connect    module_id + token checked against the permissions; client_type recorded
 *   keepalive  answered at once (weight: health, 0 when the server may not write)
 *   add_topic  an existing topic the module may produce/consume is registered; a missing one is
 *              created (TOPIC_CREATE) when the module has the admin right
 *   produce    produce permission, topic known and online, then a writer PRODUCE; answered ONLY
 *              from its completion (offsets after commit, or err_code: never acked before commit)
 *   consume    consume permission, topic online, writer READ after offset (max_count, capped)
 *   commit     consume permission; COMMIT_OFFSET for consumer "m<module_id>" of the topic
 *   watch      consume permission; after each completed produce on the topic, watchers get a push
 *              (type 18) with the new messages, at most one push per topic per cq_mqsrv_drain()
 *   unwatch    stops that
 * Every response echoes the request's msg id and askid. A frame that does not decode gets
 * cq_mq_encode_error(); a bad header or length gets one error frame (msg id 0) and a close.
 *
 * Online flags are cached: loaded from the store's topics at start and updated by
 * cq_mqsrv_topic_set_online() once the store recorded them.
 *
 * Ownership: connections are owned by the engine. The edge calls cq_mqsrv_conn_close() when its
 * socket is gone; the engine then never calls the connection's ops again and frees it once its
 * store requests completed.
 */
#ifndef CQ_MQSRV_H
#define CQ_MQSRV_H

#include "cq_mq.h"
#include "cq_mqperm.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_mqsrv cq_mqsrv_t;

/* A committed message as the bridge's sink gets it (cq_mqport.h) and a follower of another
 * shard hands it on (cq_mqfollow.h); every pointer borrowed for the call. Offsets are not
 * dense: every message of the topic at or below prev_offset was given before this one, or was
 * committed before the engine started, or no longer exists (purged, invalidated). epoch is the
 * shard's role epoch (cq_mqsrv_set_role; 0 for one server). producer_id 0: none. */
typedef struct cq_mqsrv_event {
    const char *topic;
    uint32_t shard;
    uint64_t epoch, offset, prev_offset;
    int64_t time_ms;
    uint64_t producer_id, seq;
    const uint8_t *content;
    size_t len;
} cq_mqsrv_event_t;

typedef struct cq_mqsrv_conn cq_mqsrv_conn_t;

#define CQ_MQSRV_CONSUME_DFL   100  /* consume max_count when absent */
#define CQ_MQSRV_CONN_INFLIGHT 1024 /* store requests in flight per connection */
#define CQ_MQSRV_PURGE_ROWS    1000 /* rows per retention purge transaction */
#define CQ_MQSRV_POLL_MS       150  /* a slave reads its watched topics' new rows this often */
#define CQ_MQSRV_REFRESH_MS    1000 /* a slave reads the topic list and high waters this often */
/* A mean commit time above this lowers the keepalive weight in proportion (doc/protocol-mq.md). */
#define CQ_MQSRV_WEIGHT_SLOW_US 10000
/* Queued bytes that close a connection at once (opts.sendq_hard_limit 0). */
#define CQ_MQSRV_SENDQ_HARD_DFL (64u * 1024u * 1024u)
/* Before connect: the largest frame (opts.preauth_frame 0) and the unsent bytes that close the
 * connection at once. A connect frame is a few hundred bytes; a peer that has not shown a token
 * gets no more of the server's memory than this. */
#define CQ_MQSRV_PREAUTH_FRAME_DFL (4u * 1024u)
#define CQ_MQSRV_PREAUTH_SENDQ     (64u * 1024u)
/* Bytes of partial frames held by all seed connections together (opts.input_budget 0). */
#define CQ_MQSRV_INPUT_BUDGET_DFL (64u * 1024u * 1024u)
/* Retryable holes (doc/protocol-mq.md, produce): the keys of produces refused with an answer
 * that says "retry with the same producer_id and seq" are remembered per (topic, producer) as
 * ranges of seqs, so that the retry is accepted below the producer's last stored seq. At most
 * HOLES_MAX ranges on the server (a refusal beyond them is not remembered), each forgotten
 * HOLE_TTL_MS after its last refusal (a range is 32 bytes: 2 MiB at most). */
#define CQ_MQSRV_HOLES_MAX   65536
#define CQ_MQSRV_HOLE_TTL_MS (10u * 60u * 1000u)

/* The edge's side of one connection (seed protocol or HTTP API): the transport ops every chanq
 * connection has (src/transport/cq_transport.h), plus abort. tctx is the edge's per-connection
 * pointer. Frames reach the edge as refcounted buffers in the connection's send queue
 * (cq_mqsrv_conn_sendq, cq_mqhttp_conn_sendq), never copied per connection:
 *   t.flush  writes what the send queue holds, gathered, without blocking; may leave a write in
 *            flight and continue it from its own callback. cq_mqsrv_flush() calls it.
 *   t.close  stops reading, writes what is queued, then closes the socket.
 *   t.peer   the peer address as text.
 * After close or abort the edge calls cq_mqsrv_conn_close() / cq_mqhttp_conn_close() once the
 * socket is gone, never from inside an op. */
typedef struct cq_mqsrv_conn_ops {
    cq_transport_ops_t t;
    /* Closes at once and drops what is queued: a slow consumer. reason (CQ_ESLOW) and why
     * (borrowed text) are for the edge's log. */
    void (*abort)(void *tctx, int reason, const char *why);
} cq_mqsrv_conn_ops_t;

/* The edge's side of the engine. */
typedef struct cq_mqsrv_ops {
    /* Asks the engine's loop to call cq_mqsrv_drain() soon (uv_async_send). Any thread, with the
     * engine's inbox lock held: it must not block and must not call the engine. */
    void (*wake)(void *ud);
} cq_mqsrv_ops_t;

/* Counters; read on the engine's thread. */
typedef struct cq_mqsrv_stats {
    uint64_t conns, frames, bad_frames, keepalives, produced, consumed, pushes, busy;
    uint64_t slow;            /* connections closed as slow consumers (send queue limits) */
    uint64_t input_bytes;     /* bytes of partial frames held now, all seed connections */
    uint64_t input_refused;   /* connections closed busy: their bytes went over the budget */
    uint64_t not_master;      /* writes answered not_master (err 18): refused, or fenced produces */
    uint64_t offline_refused; /* produces and creations answered server_offline (err 19) */
    uint64_t holes;           /* retryable holes (seq ranges) remembered now */
    uint64_t holes_dropped;   /* refusals not remembered: CQ_MQSRV_HOLES_MAX ranges were */
} cq_mqsrv_stats_t;

/* Sets the edge's callbacks: ops borrowed (static) and ud, or NULL (completions then only
 * queue until the next cq_mqsrv_drain()). Any thread; once it returns the previous ops are
 * never called again. */
void cq_mqsrv_set_ops(cq_mqsrv_t *s, const cq_mqsrv_ops_t *ops, void *ud);

/* A new connection. ops is borrowed (static), ud the edge's. Returns the connection (owned by
 * the engine) or NULL on OOM. */
cq_mqsrv_conn_t *cq_mqsrv_conn_new(cq_mqsrv_t *s, const cq_mqsrv_conn_ops_t *ops, void *ud);
/* Feeds received bytes (borrowed). Frames are handled as they complete; their answers are queued
 * on c's send queue. Returns 0, or a negative code when the connection must close (a close op
 * was called already). */
int cq_mqsrv_conn_input(cq_mqsrv_conn_t *c, const uint8_t *p, size_t n);
/* The edge is done with c (socket closed): ops are never called again; c is freed when its last
 * store request completes. */
void cq_mqsrv_conn_close(cq_mqsrv_conn_t *c);
/* c's send queue (borrowed, valid until cq_mqsrv_conn_close): what ops->t.flush writes. */
cq_sendq_t *cq_mqsrv_conn_sendq(cq_mqsrv_conn_t *c);
/* For the edge's timeouts: the whole frames c received so far and whether its connect
 * succeeded. */
void cq_mqsrv_conn_progress(const cq_mqsrv_conn_t *c, uint64_t *ret_frames, bool *ret_authed);

/* Calls t.flush of every connection (seed and HTTP) that queued output since the last call,
 * once each. Call once per loop iteration, just before the loop blocks (uv_prepare). */
void cq_mqsrv_flush(cq_mqsrv_t *s);
/* Housekeeping: a connection over the send queue's soft limit for the configured seconds is
 * aborted as a slow consumer, and a watcher catch-up whose store read failed is read again. In
 * a cluster (cq_mqport.h, cq_mqsrv_set_role) a server that may not write reads its watched
 * topics' new rows (every CQ_MQSRV_POLL_MS) and the topic list (every CQ_MQSRV_REFRESH_MS),
 * and a new master retries the reads of its reload.
 * now_ms is a monotonic clock (uv_now); call every 100 ms or so. */
void cq_mqsrv_tick(cq_mqsrv_t *s, uint64_t now_ms);

/* Runs the store completions waiting in the inbox (each answers its connection, updates the
 * topic cache and queues pushes), then sends the pushes. Call from ops->wake's loop callback. */
void cq_mqsrv_drain(cq_mqsrv_t *s);

/* True when no store request the engine submitted waits for its completion (every answer
 * owed so far was queued on its connection). The edge's shutdown waits for it after it stopped
 * reading, so that produces committed during the shutdown are acknowledged. */
bool cq_mqsrv_idle(const cq_mqsrv_t *s);

/* Sets a topic online or offline in the store, then in the cache. Returns 0 (submitted),
 * CQ_ENOTOPIC, or the submit error. */
int cq_mqsrv_topic_set_online(cq_mqsrv_t *s, const char *topic, bool online);
/* Takes the server out of service (offline true) or back in (false), as the manager's offline
 * command asks (doc/protocol-mq.md "Offline"). Offline, a produce or an add_topic that would
 * create a topic is answered server_offline (err 19, CQ_ESRVOFFLINE) before it reaches the
 * store; produces submitted before stay in flight and are acknowledged at their completion (the
 * drain). Commits, consumes, watches and the HTTP API's reads keep working: consumers follow
 * their offsets on any server. keepalive answers weight 0. Engine thread. */
void cq_mqsrv_set_offline(cq_mqsrv_t *s, bool offline);
/* offline: as set. draining: offline with produce messages still waiting for their commit. */
void cq_mqsrv_offline_state(const cq_mqsrv_t *s, bool *ret_offline, bool *ret_draining);
/* Sets a topic's retention in seconds as the manager manages it (0 = keep forever): it replaces
 * the days the store recorded at creation for this engine's purges, and a topic refresh no
 * longer overwrites it. Only the master purges. Returns 0 or CQ_ENOTOPIC. Engine thread. */
int cq_mqsrv_topic_set_retention(cq_mqsrv_t *s, const char *topic, uint64_t seconds);
/* Retention: submits one purge of rows older than each topic's retention (now_unix_ms - days),
 * repeating while a purge removed a full batch. Call every retention-check-s. */
void cq_mqsrv_retention(cq_mqsrv_t *s, int64_t now_unix_ms);
/* Sets the wall clock (unix ms) used for create times and commit times; the edge calls it from
 * its loop before feeding input. */
void cq_mqsrv_set_now(cq_mqsrv_t *s, int64_t now_unix_ms);

void cq_mqsrv_stats(const cq_mqsrv_t *s, cq_mqsrv_stats_t *ret_stats);

/* Most consumers per topic whose offsets the metrics keep (the first ones seen). */
#define CQ_MQSRV_METRIC_CONSUMERS 256

/* Appends the durable-topic metrics in Prometheus text format (version 0.0.4) to out: the
 * engine's counters; per topic its acknowledged messages, last offset, pending messages, purged
 * rows and online flag; per (topic, consumer) whose offset was committed or read since start
 * (seed consumers are "m<module_id>", HTTP ones their own ids) the offset and the lag (last
 * offset - committed offset: an upper bound, offsets are not dense); and, when the store port
 * answers CQ_MQPORT_WRITER_STATS, the store thread's counters and histograms of transaction size
 * and duration. Engine thread. Returns 0 or -ENOMEM (out then holds part of the text). */
int cq_mqsrv_metrics(const cq_mqsrv_t *s, cq_sbuf_t *out);

#endif
