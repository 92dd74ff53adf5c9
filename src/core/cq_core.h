/* cq_core.h - channels, connections, subscriptions and dispatch: the channeld behaviour.
 *
 * The core is a protocol engine: bytes and "now" in, encoded buffers and actions out. It never
 * touches a socket or the event loop. Each worker thread owns one cq_core_t: the connections
 * accepted onto that worker and the channels hashed to it (channel id % workers). Cores talk to
 * each other only through cq_xmsg messages pushed onto the target worker's inbox (lock-free
 * MPSC queue); each target is woken once per loop iteration of the poster, however many
 * messages it was sent, by ops->wake(target) from cq_core_flush (or cq_core_wake), which the io
 * layer maps to uv_async_send.
 *
 * Process-wide state lives in cq_shared_t: immutable configuration, the GLOBAL owner id
 * (atomic), metrics (atomics), and the connection directory (id -> type and subscription count;
 * a mutex, touched on accept, close and subscription changes only, never per message). See
 * doc/threads.md.
 */
#ifndef CQ_CORE_H
#define CQ_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_buf.h"
#include "cq_framing.h"
#include "cq_sbuf.h"
#include "cq_transport.h"

typedef struct cq_core cq_core_t;
typedef struct cq_conn cq_conn_t;
typedef struct cq_shared cq_shared_t;
typedef struct cq_fsm cq_fsm_t;
typedef struct cq_settings cq_settings_t;
typedef struct cq_sendq cq_sendq_t;

enum { CQ_CONN_SERVER = 1, CQ_CONN_CLIENT = 2 };
/* The transport a connection arrived on, for chanq_connections{transport} (metrics only). */
enum { CQ_CONN_TCP = 0, CQ_CONN_WS, CQ_CONN_WSS, CQ_CONN_KCP, CQ_CONN_TRANSPORTS };

typedef struct cq_core_opts {
    int workers;                   /* number of cores/workers (>= 1) */
    const cq_fsm_t *client_fsm;    /* borrowed, outlives the shared state */
    const cq_fsm_t *server_fsm;    /* borrowed */
    const cq_settings_t *settings; /* borrowed */
    bool dev;
    bool server_bypass_auth;
    bool server_bypass_loopback; /* the bypass applies only to connections from loopback peers */
    bool server_recoverable;     /* channeld -scr */
    uint32_t server_recover_timeout_ms; /* channeld -scrt; 0 = forever */
    uint32_t compression_type;          /* advertised in AuthResult */
    int auth_provider;                  /* CQ_AUTH_DEV or CQ_AUTH_FILE */
    const char *auth_token_file;        /* JSON object PIT -> login token */
    uint32_t auth_timeout_ms;           /* 0 = off */
    uint32_t max_failed_auth;
    struct cq_authlim *authlim; /* per-address failure budget (borrowed, thread-safe); NULL none */
    uint32_t conn_id_bits;
    uint16_t relay_node;      /* this node of a relay (1 ..); 0: one node alone */
    uint8_t relay_node_bits;  /* the id bits that name the node (place.h) */
    uint32_t relay_loss_ms;   /* how long another node's loss takes to be seen (0: 3000) */
    uint32_t idle_timeout_ms; /* 0 = off */
    uint32_t max_packet_size;
    uint32_t max_connections;
    uint32_t max_channels;
    uint32_t max_subs_per_conn;   /* a CLIENT's subscriptions; 0 = no limit */
    uint32_t max_subs_per_server; /* a SERVER's, its own channels' included; 0 = no limit */
    size_t sendq_soft_limit;
    uint32_t sendq_soft_seconds;
    size_t sendq_hard_limit;
    size_t sendq_data_limit; /* a connection above is behind: channel data resyncs; 0 = never */
    const struct cq_schema *schema; /* channel data types (borrowed); NULL = none known */
    size_t max_channel_data;        /* bytes of one channel's data; 0 = no limit */
    /* Spatial controller (--spatial-settings; borrowed): NULL = no spatial channels. Its
     * chan_start and entity_start are channeld's -scs and -ecs. */
    const struct cq_spatial_cfg *spatial;
    uint32_t entity_chan_start; /* -ecs, used also without a spatial controller */
} cq_core_opts_t;

enum { CQ_AUTH_DEV = 0, CQ_AUTH_FILE = 1 };

/* Callbacks into the io layer; called on the calling worker's thread. */
typedef struct cq_core_ops {
    /* Wake worker `worker` so it drains its inbox (uv_async_send). Any thread. */
    void (*wake)(void *ud, int worker);
} cq_core_ops_t;

/* ---- process-wide ---- */

/* Creates the shared state. opts and what it points to are borrowed and must outlive it.
 * ops (borrowed, may be NULL until cq_shared_set_ops) are the io layer's callbacks. Loads the
 * token file if configured. Returns 0 or a negative error (message in err). */
int cq_shared_new(const cq_core_opts_t *opts, const cq_core_ops_t *ops, void *ops_ud,
                  cq_shared_t **ret, char *err, size_t errlen);
/* Reloads the token file of --auth-provider=file (SIGHUP) from path (borrowed): the new table
 * replaces the old one for every AUTH that follows, on every worker. Any thread. A file that
 * does not load changes nothing. Returns 0, CQ_ECONFIG when the provider is not file, or the
 * load error (message in err). */
int cq_shared_reload_tokens(cq_shared_t *sh, const char *path, char *err, size_t errlen);
/* Sets the io layer's callbacks (ops borrowed, static). The io layer calls it once, before any
 * worker runs: no worker reads them concurrently. */
void cq_shared_set_ops(cq_shared_t *sh, const cq_core_ops_t *ops, void *ops_ud);
cq_shared_t *cq_shared_free(cq_shared_t *sh);
/* Allocates a connection id and registers it in the directory; 0 when max-connections is
 * reached. Any thread (the acceptor). */
uint32_t cq_shared_conn_id_alloc(cq_shared_t *sh, int type);

/* ---- relay nodes (issue 23, doc/relay-cluster.md; node.c) ----
 *
 * With opts.relay_node set, this process is node relay_node of a relay: connection and
 * non-spatial channel ids carry it in their top relay_node_bits bits, and messages for what
 * lives on another node leave through the send hook as records of kind CQ_CORE_REC_XMSGS. */
#define CQ_CORE_REC_XMSGS 2
/* Hands a record for node to the relay (a reference is taken). Called on worker threads at the
 * end of a loop iteration; must not block. Returns 0 or < 0 (the batch is dropped, counted). */
typedef int (*cq_core_relay_send_fn)(void *ud, uint16_t node, cq_buf_t *rec);
/* Before any worker runs. */
void cq_shared_set_relay(cq_shared_t *sh, cq_core_relay_send_fn send, void *ud);
/* Once the workers run: records from other nodes are taken from now on (dropped before). */
void cq_shared_relay_ready(cq_shared_t *sh);
/* The live nodes of the relay (membership), this one included or not. Any thread. */
void cq_shared_relay_members(cq_shared_t *sh, const uint16_t *nodes, size_t n);
/* Node left the relay (membership): its connections are gone here as if they had closed, and
 * what still comes from it is dropped until cq_shared_relay_node_up. Any thread. */
void cq_shared_relay_node_gone(cq_shared_t *sh, uint16_t node);
/* The stream from node broke (cq_relay.h's reset; restarted: a new epoch): this node's
 * subscribers of its channels are closed, and, if it restarted, its connections dropped. The
 * relay thread, in stream order. */
void cq_shared_relay_reset(cq_shared_t *sh, uint16_t node, bool restarted, uint64_t lost);
/* A packet from node arrived (the relay thread): it lives (node.c waits for its answers). */
void cq_shared_relay_heard(cq_shared_t *sh, uint16_t node);
/* Node's HELLO arrived (the relay thread, in its stream's order): it is back. */
void cq_shared_relay_node_up(cq_shared_t *sh, uint16_t node);
/* GLOBAL's home is node (claimed in ZooKeeper): channel-0 messages (GLOBAL's own, LIST,
 * CREATE_CHANNEL) go there, and its directory holds every channel of the relay. 0 or this node:
 * here. Any thread. */
void cq_shared_relay_global_home(cq_shared_t *sh, uint16_t node);
/* Messages from other nodes taken, and refused (malformed, misaddressed, from a node that is not
 * one of the relay's); records that waited for a worker's full inbox. Any thread. */
/* GLOBAL's owner as this node knows it (GLOBAL's home replicates it to the others), 0: none.
 * Any thread. */
uint32_t cq_shared_relay_global_owner(cq_shared_t *sh);
void cq_shared_relay_counts(cq_shared_t *sh, uint64_t *in, uint64_t *refused, uint64_t *paced);
/* A CQ_CORE_REC_XMSGS record from node `from` (body borrowed), in its stream's order. The relay
 * thread only. Malformed or misaddressed messages are counted and dropped. */
void cq_shared_relay_input(cq_shared_t *sh, uint16_t from, const uint8_t *body, size_t len);
/* Like cq_shared_conn_id_alloc, but the id belongs to `worker` (cq_shared_conn_worker): for
 * transports whose packets arrive on a fixed worker (KCP over per-worker UDP sockets). */
uint32_t cq_shared_conn_id_alloc_on(cq_shared_t *sh, int type, int worker);
/* Publishes a new set of channel-data types to every worker (any thread). Channels whose type
 * was unknown are resolved and their state compacted. schema is borrowed and must outlive the
 * shared state, as must every schema published before it (channels keep pointing into it). */
void cq_shared_set_schema(cq_shared_t *sh, const struct cq_schema *schema);
/* Number of workers. */
int cq_shared_workers(const cq_shared_t *sh);
/* The worker that owns connection id / channel id. */
int cq_shared_conn_worker(const cq_shared_t *sh, uint32_t conn_id);
int cq_shared_chan_worker(const cq_shared_t *sh, uint32_t chan_id);
/* Writes Prometheus text for all metrics into buf; returns the length (truncated at cap). */
size_t cq_shared_metrics(cq_shared_t *sh, char *buf, size_t cap);
/* The same text appended to out: a metrics source for the admin listener (ud is the
 * cq_shared_t). Any thread. Returns 0 or -ENOMEM. */
int cq_shared_metrics_append(void *ud, cq_sbuf_t *out);
uint64_t cq_shared_counter(cq_shared_t *sh, const char *name);
/* The gauges the manager's report carries (cq_mgrlink.h): open connections (server + client)
 * by transport (CQ_CONN_TCP..), channels by type (index = channel type 1..5: GLOBAL..ENTITY;
 * 0 unused) and subscriptions held. Any thread. */
void cq_shared_gauges(cq_shared_t *sh, int64_t ret_connections[CQ_CONN_TRANSPORTS],
                      int64_t ret_channels[6], int64_t *ret_subscribers);

/* ---- bridge events (issue 24; inject.c, doc/threads.md "Bridge events") ----
 *
 * Another thread (the MQ loop's bridge) hands the core durable-topic events for game clients.
 * Each event becomes one record, MessagePack{channelId, broadcast 0, stubId 0, msgType
 * msg_type, msgBody ServerForwardMessage{clientConnId 0, payload body}}, as a server's
 * broadcast reaches a client, encoded here once and shared by reference by every recipient.
 *
 * Threads: any thread, once the workers run (every cq_core_new done, the ops set) and until the
 * main thread frees the cores: the caller stops calling before cq_core_free. Nothing blocks.
 * body: a protobuf message's bytes, borrowed for the call (copied into the record, no reference
 * kept); NULL is an empty body.
 *
 * Limits: an outside producer cannot be paused, so nothing is refused for load. Each event's
 * bytes count against its workers' inboxes as a worker's post does, so a backlog over
 * CQ_INBOX_HIGH pauses the reading of the game connections whose messages go there, never the
 * caller. What bounds the memory is the caller's own queue: it must pace itself (the bridge
 * delivers what its watcher hands it, at the store's commit rate). Recipients' send queues have
 * the usual limits: a client over --sendq-hard-limit is closed, as for any broadcast.
 *
 * Order: the events one thread injects reach each recipient in the order injected, broadcasts
 * of one channel among themselves and routed events among themselves (one FIFO inbox per
 * worker); a broadcast and a routed event are not ordered with each other (the broadcast goes
 * through the channel's worker, the routed event straight to the connection's).
 *
 * Relay nodes (opts.relay_node != 0): not supported yet, both return -ENOTSUP. */

/* Delivers the record, channelId chan_id, to every subscriber of channel chan_id on every
 * worker, its owner included when subscribed: a server's ALL broadcast (channeld's
 * BroadcastType ALL), fanned out by the channel's worker on the encode-once path. A channel
 * that does not exist when the event arrives on its worker is counted
 * (chanq_bridge_undeliverable_total) and the event dropped. Returns 0, CQ_ETOOBIG (the record
 * would exceed CQ_WIRE_MAX_RECORD), -ENOMEM or -ENOTSUP. */
int cq_shared_inject_broadcast(cq_shared_t *sh, uint32_t chan_id, uint32_t msg_type,
                               cq_buf_t *body);
/* Delivers the record, channelId 0, to every CLIENT connection authenticated with player
 * identifier token pit (borrowed, NUL-terminated), on any worker: each worker gets one message
 * (all referencing the one record) and looks pit up in its index of authenticated clients. A
 * connection not authenticated yet, a server connection, and one closing get nothing. Returns
 * the number of workers posted to (cq_shared_workers: all or none), -EINVAL (pit NULL or
 * empty), CQ_ETOOBIG, -ENOMEM or -ENOTSUP. A connection whose login catch-up is under way
 * (route_hold) skips the event, which its catch-up carries (every shard's: doc/bridge.md). */
int cq_shared_inject_route(cq_shared_t *sh, const char *pit, uint32_t msg_type, cq_buf_t *body);

/* ---- bridge resume (resume.c; doc/bridge.md "Resume", doc/threads.md "Bridge resume") ----
 *
 * A client's TopicResumeMessage (type 90, on GLOBAL) goes to the bridge's thread through the
 * hook, which must only queue it (any worker calls it): ask CQ_RESUME_ASK_REQUEST with the
 * request's channel id (4 bytes, little-endian) then its body (borrowed for the call);
 * CQ_RESUME_ASK_MORE when the connection has room for the next chunk; CQ_RESUME_ASK_GONE when it
 * closed with a resume not ended; CQ_RESUME_ASK_APPLIED below. A negative return refuses a request
 * (the client gets a result saying the bridge is busy). */
enum {
    CQ_RESUME_ASK_REQUEST = 1,
    CQ_RESUME_ASK_MORE = 2,
    CQ_RESUME_ASK_GONE = 3,
    /* A chunk was applied (or dropped) on its connection's worker: one per chunk, whatever its
     * fate, so the bridge can pace how many it hands the workers (cq_resume_applied). */
    CQ_RESUME_ASK_APPLIED = 4,
    /* Route bindings (cq_shared_set_route): a client authenticated with a PIT (body: the PIT
     * and its NUL), its routed events are held until its catch-up's FINAL chunk; LOGIN_MORE,
     * LOGIN_GONE and LOGIN_APPLIED are MORE, GONE and APPLIED for that catch-up; ACK: the
     * player's TopicAckMessage (body: the PIT, its NUL, then the message's bytes). */
    CQ_RESUME_ASK_LOGIN = 5,
    CQ_RESUME_ASK_LOGIN_MORE = 6,
    CQ_RESUME_ASK_LOGIN_GONE = 7,
    CQ_RESUME_ASK_LOGIN_APPLIED = 8,
    CQ_RESUME_ASK_ACK = 9,
    /* A "topic" channel asked for with cq_shared_topic_channel exists: conn_id is its id (0:
     * it could not be made), the body its metadata and NUL. */
    CQ_RESUME_ASK_TOPIC_CHAN = 10,
};
typedef int (*cq_core_resume_fn)(void *ud, int ask, uint32_t conn_id, const void *body, size_t len);
/* Sets the hook; before the workers run. */
void cq_shared_set_resume(cq_shared_t *sh, cq_core_resume_fn fn, void *ud);

enum { CQ_RESUME_CHUNK_BEGIN = 1, CQ_RESUME_CHUNK_FINAL = 2 };
/* From the bridge's thread: a chunk of conn_id's resume on channel chan_id (GLOBAL, or a
 * "topic" channel). BEGIN: result (borrowed) is the TopicResumeResultMessage, sent first as
 * message type 91 on that channel, and from then on the live bridge events of that channel are
 * held back from the connection; events[0..n) (borrowed) follow, each delivered as a bridge
 * event is (msg_types[i], on that channel); FINAL ends the hold. The chunk goes through the
 * channel's worker, behind the live events posted before it (doc/threads.md). An event
 * too large for a record is skipped (it was not deliverable live either). Returns 0 or -ENOMEM
 * (nothing posted). */
int cq_shared_resume_chunk(cq_shared_t *sh, uint32_t chan_id, uint32_t conn_id, unsigned flags,
                           const cq_buf_t *result, cq_buf_t *const *events,
                           const uint32_t *msg_types, size_t n);
/* From the bridge's thread: the channel of a binding with "broadcast": "topic": an ownerless
 * SUBWORLD channel whose metadata is metadata ("topic:<name>", so that LIST finds it), found
 * when one exists, else created. Clients SUB to it as to any channel; nobody owns it, so nobody
 * removes it. Its id comes back through the resume hook (CQ_RESUME_ASK_TOPIC_CHAN). Returns 0,
 * -EINVAL or -ENOMEM. */
int cq_shared_topic_channel(cq_shared_t *sh, const char *metadata);
/* A relay node: the node GLOBAL's home is on (0: not known yet; 0 also on one node). Its
 * "topic" channels live there, so the bridge asks for them again when it changes. */
uint32_t cq_shared_relay_home(const cq_shared_t *sh);

/* Route bindings exist (any thread; the hook of cq_shared_set_resume must be set): from now on
 * a client's first successful AUTH asks CQ_RESUME_ASK_LOGIN and holds its routed events. */
void cq_shared_set_route(cq_shared_t *sh, bool on);
/* From the bridge's thread: a chunk of conn_id's login catch-up, events as in
 * cq_shared_resume_chunk, posted straight to the connection's worker (behind the routed events
 * posted before it); final ends the hold. Returns 0 or -ENOMEM (nothing posted). */
int cq_shared_route_chunk(cq_shared_t *sh, uint32_t conn_id, bool final, cq_buf_t *const *events,
                          const uint32_t *msg_types, size_t n);

/* ---- per worker ---- */

/* Creates the core for worker `index`. Worker 0 also owns GLOBAL and the channel directory.
 * Returns owned or NULL on OOM. Must be created for every worker before any runs. */
cq_core_t *cq_core_new(cq_shared_t *sh, int index);
/* Frees channels and remaining connections (whose transports must already be gone). */
cq_core_t *cq_core_free(cq_core_t *c);

/* Registers an accepted connection (id from cq_shared_conn_id_alloc, on this worker).
 * tops/tctx are borrowed until cq_core_conn_release(). Returns the connection or NULL (OOM:
 * the caller closes the transport). */
cq_conn_t *cq_core_conn_new(cq_core_t *c, uint32_t id, int type, cq_framing_mode_t mode,
                            const cq_transport_ops_t *tops, void *tctx, uint64_t now_ms);
/* Tells the core which transport (CQ_CONN_TCP..) conn arrived on; once, right after
 * cq_core_conn_new. Only counted in chanq_connections{transport}. */
void cq_core_conn_set_transport(cq_core_t *c, cq_conn_t *conn, int transport);
/* The duration of the last housekeeping tick (cq_core_tick) as the edge measured it:
 * channel_tick_duration. This worker's thread. */
void cq_core_note_tick(cq_core_t *c, uint64_t ns);
/* Feeds received bytes. Returns 0, or a negative error after which the core has already
 * begun closing the connection (the reason is logged here, once). */
int cq_core_conn_input(cq_core_t *c, cq_conn_t *conn, const uint8_t *data, size_t n,
                       uint64_t now_ms);
/* The transport saw EOF or an error (reason < 0) or was closed: begin closing. Idempotent. */
void cq_core_conn_close(cq_core_t *c, cq_conn_t *conn, int reason, const char *why);
/* The peer went away (EOF, reset, read or write error): like cq_core_conn_close, but a
 * recoverable server connection keeps its channels for a successor (server-conn-recoverable). */
void cq_core_conn_lost(cq_core_t *c, cq_conn_t *conn, int reason, const char *why);
/* The transport is gone (its close completed): free the connection. */
void cq_core_conn_release(cq_core_t *c, cq_conn_t *conn);
/* The connection's send queue, for the transport's flush. */
cq_sendq_t *cq_conn_sendq(cq_conn_t *conn);
uint32_t cq_conn_id(const cq_conn_t *conn);
bool cq_conn_closing(const cq_conn_t *conn);
/* Why the connection is closing: the reason given to cq_core_conn_close (0 for a normal close,
 * a negative code otherwise; 0 before the close). For transports that can tell the peer (a
 * WebSocket Close code). */
int cq_conn_close_reason(const cq_conn_t *conn);
/* True when the transport should stop reading this connection: the worker its messages go to
 * is behind (inbound flow control). Poll cq_core_conn_resume() (each loop iteration and tick)
 * and restart reading when it returns true. */
bool cq_conn_paused(const cq_conn_t *conn);
bool cq_core_conn_resume(cq_core_t *c, cq_conn_t *conn);

/* Drains the inbox (cross-worker messages). Call from the wake (uv_async) callback. */
void cq_core_drain(cq_core_t *c, uint64_t now_ms);
/* Wakes the workers this one posted to during the iteration, then calls the transport flush of
 * every connection with queued output. Call once per loop iteration, before the loop blocks
 * (uv_prepare): messages posted to other workers wait for it. */
void cq_core_flush(cq_core_t *c);
/* Wakes the workers this one posted to since its last flush (after work done past the flush,
 * e.g. write completions that closed connections). */
void cq_core_wake(cq_core_t *c);
/* Periodic housekeeping (auth timeout, idle timeout, soft send limits). Every ~100 ms. */
void cq_core_tick(cq_core_t *c, uint64_t now_ms);
/* Channel-data fan-outs: the earliest time a channel of this worker is due (UINT64_MAX when
 * none), and the fan-out of every channel due at now_ms. The io layer keeps one timer per
 * worker on cq_core_next_due() and calls cq_core_run_due() when it fires. */
uint64_t cq_core_next_due(const cq_core_t *c);
void cq_core_run_due(cq_core_t *c, uint64_t now_ms);

#endif
