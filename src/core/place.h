/* place.h - the placement seam: where a connection or a channel lives, and how work gets there.
 * Not a public header; core.h, msgtab.h and world.h include it.
 *
 * Today "where" is a worker thread of this process: a channel lives on worker id % workers,
 * and so does a connection, unless it took over a recovered id and lives where it was accepted
 * (the route map). Tomorrow "where" may be another node. place.c makes every such decision,
 * and owns every way of sending work to another place: the cross-worker messages (cq_xmsg_t),
 * their posting, and the inbox accounting that paces senders. Nodes plug in there, not in the
 * handlers.
 *
 * The rule for handlers: a handler reads and writes its own worker's state and immutable
 * configuration (options, FSMs, channel settings, tokens, schemas) and nothing else
 * synchronously. What it needs from another place arrives by message, and what it changes
 * elsewhere leaves by message, through the functions below. Handlers add no new synchronous
 * reads of shared process state. The exceptions that exist, each documented where it is used:
 *   - the connection directory (cq_shared_t.dir, under dir_lock, never per message): id
 *     allocation on accept (shared.c), removal on close (conn.c), the subscription count and
 *     the type of the subscribed connection on SUB and on removal (sub.c:
 *     max-subs-per-conn and max-subs-per-server, SUB of another connection), and the recovery
 *     handles of server-conn-recoverable (recover.c);
 *   - the GLOBAL owner's id (cq_shared_t.global_owner, atomic): read for the ACL and for the
 *     GLOBAL owner's copies of AuthResult and CreateChannelResult; written where GLOBAL is
 *     possessed (chan.c) and where its owner closes (conn.c);
 *   - the other workers' inbox byte counts (atomic), for flow control (below);
 *   - the metrics (relaxed atomics), written on the hot path and read only by /metrics;
 *   - the spatial server slots' holders (cq_shared_t.slot_owner, atomics): written by GLOBAL's
 *     worker when a spatial server takes or frees a slot, read where an entity is created on
 *     GLOBAL and by a handover (who owns the destination cell);
 *   - the entity groups (cq_shared_t.groups under groups_mu) and the well-known entities
 *     (wk_ids under wk_mu): leaf locks taken on ENTITY_GROUP_ADD/REMOVE, a handover decision,
 *     an entity's creation or removal and a client's AUTH, never per message.
 * With nodes, each becomes a message or a replicated view.
 */
#ifndef CQ_PLACE_H
#define CQ_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_buf.h"
#include "cq_core.h"
#include "cq_mpsc.h"
#include "cq_wire.h"

typedef struct cq_req cq_req_t;

/* ---- ids: room for a node id ----
 *
 * Ids are channeld's uint32s and clients see them, so their ranges are fixed
 * (channeld-protocol.md §2.1, §3.2, §4):
 *   channel  0                          GLOBAL
 *            1 .. 0xffff                non-spatial, allocated by this server
 *            0x10000 .. 0x7ffff         spatial: 0x10000 + grid index, fixed by the grid
 *            0x80000 ..                 entity: the entity id, chosen by the game server
 *   conn     1 .. 2^conn_bits - 2       allocated by this server; conn_bits is channeld's
 *                                       -mcb (8..31, default 31)
 * Only the ids this server allocates can carry a node id: non-spatial channel ids and
 * connection ids. The top node_bits bits of their width (16 bits for channels, conn_bits for
 * connections) are the node, the rest the node's local id:
 *   id = node << (width - node_bits) | local.
 * Spatial ids belong to the grid and entity ids to the game (UE uses actor NetGUIDs, and keeps
 * connection ids to -mcb 13 bits so that NetGUIDs made from them land in the entity range), so
 * neither can spare bits; a node finds their owner by lookup. The node bits come out of the
 * width, not above it, for the same reason. GLOBAL is 0 everywhere.
 * node_bits 0, today's only value, gives exactly today's ids. */

#define CQ_CHAN_ID_GLOBAL        0u
#define CQ_CHAN_ID_SPATIAL_START 0x10000u
#define CQ_CHAN_ID_ENTITY_START  0x80000u
#define CQ_NODE_BITS_MAX         8u /* each node keeps at least 8 bits of local ids */

typedef enum cq_chan_kind {
    CQ_CHAN_KIND_GLOBAL,
    CQ_CHAN_KIND_NONSPATIAL,
    CQ_CHAN_KIND_SPATIAL,
    CQ_CHAN_KIND_ENTITY,
} cq_chan_kind_t;

typedef struct cq_idl {
    uint8_t conn_bits; /* width of connection ids */
    uint8_t node_bits; /* of which the top ones are the node */
} cq_idl_t;

/* Fills *ret for connection ids of conn_bits bits (0 means 31, channeld's default; over 32
 * means 32) of which node_bits are the node. Returns 0, or CQ_ECONFIG when node_bits is over
 * CQ_NODE_BITS_MAX or leaves fewer than 8 bits for local connection ids. node_bits 0 always
 * succeeds. */
int cq__idl_init(uint32_t conn_bits, uint32_t node_bits, cq_idl_t *ret);
cq_chan_kind_t cq__id_chan_kind(uint32_t chan_id);
/* The local connection id limit: local ids are 1 .. limit - 1. */
uint32_t cq__id_conn_limit(const cq_idl_t *l);
/* The largest local non-spatial channel id: local ids are 1 .. max. */
uint32_t cq__id_chan_max(const cq_idl_t *l);
/* Composes an id; node < 2^node_bits, local within the limits above. */
uint32_t cq__id_conn(const cq_idl_t *l, uint32_t node, uint32_t local);
uint32_t cq__id_chan(const cq_idl_t *l, uint32_t node, uint32_t local);
/* Splits a connection id into its node (returned) and local id (*ret_local, may be NULL). */
uint32_t cq__id_conn_node(const cq_idl_t *l, uint32_t conn_id, uint32_t *ret_local);
/* Splits a non-spatial channel id like cq__id_conn_node and returns true; returns false and
 * leaves the outputs alone for GLOBAL, spatial and entity ids, which carry no node. */
bool cq__id_chan_node(const cq_idl_t *l, uint32_t chan_id, uint32_t *ret_node, uint32_t *ret_local);

/* ---- where things live ---- */

/* The worker that owns conn_id: id % workers unless a route says otherwise. */
int cq__conn_worker(const cq_core_t *c, uint32_t conn_id);
/* The worker that owns chan_id: id % workers. */
int cq__chan_worker(const cq_core_t *c, uint32_t chan_id);
/* The worker that keeps the process-wide registries: the channel directory (LIST, id
 * allocation) and the recovery handles of dropped servers. It is GLOBAL's worker. */
int cq__place_dir_worker(const cq_core_t *c);
/* The worker of this process that keeps its recovery handles (shared.c's process-wide list):
 * GLOBAL's worker here, even when GLOBAL's home is another relay node. */
int cq__place_local_dir_worker(const cq_core_t *c);
/* This worker adopts conn_id although it is not its home (a recovered id): routes it here and
 * tells every other worker (XM_ROUTE). */
void cq__place_adopt_conn(cq_core_t *c, uint32_t conn_id);
/* XM_ROUTE: conn_id lives on worker. */
void cq__place_route(cq_core_t *c, uint32_t conn_id, int worker);
/* conn_id is gone: forget its route, if any. */
void cq__place_forget(cq_core_t *c, uint32_t conn_id);

/* ---- cross-worker messages ---- */

/* XM_SEND's u2: to conn_id, to GLOBAL's owner instead (at GLOBAL's home, unless it is u3), or
 * GLOBAL's RECOVERY_CHANNEL_DATA to conn_id, which its RECOVERY_END may wait for (recover.c). */
enum { CQ_XSEND_CONN = 0, CQ_XSEND_GOWNER = 1, CQ_XSEND_GLOBAL_RECOVERY = 2 };

enum {
    XM_DISPATCH,  /* an inbound message for chan_id from conn_id */
    XM_SEND,      /* deliver buf to conn_id; u2 a CQ_XSEND_* */
    XM_FANOUT,    /* deliver buf to the local subscribers of chan_id, filtered */
    XM_LSUB_ADD,  /* conn_id joins the local list of chan_id */
    XM_LSUB_DEL,  /* conn_id leaves the local list of chan_id */
    XM_CONN_GONE, /* conn_id closed: drop its subscriptions and ownerships */
    XM_CLOSE,     /* close conn_id: u1 = -reason, body = why (cq__close_conn) */
    XM_CREATE,    /* create channel u1 (allocated id) for the request in mp */
    XM_FREE_ID,   /* directory worker: channel chan_id no longer exists */
    XM_META,      /* directory worker: channel chan_id's metadata/type changed */
    XM_REMOVE,    /* REMOVE_CHANNEL of channel u1, checked where it lives */
    XM_ROUTE,     /* connection conn_id now lives on worker u1 (recovered id) */
    XM_SENDMANY,  /* deliver buf to every conn id in body (uint32_t array) */
    XM_SCHEMA,    /* ptr is the new channel-data schema: resolve unknown types */
    XM_RECOVER,   /* conn_id took over a dropped server with PIT body: restore its channels */
    XM_RESYNC,    /* channel chan_id: the conn ids in body were behind and missed a fan-out */
    /* C (interest.c, forward.c, handover.c) */
    XM_INTEREST, /* client conn_id's wanted cells (body: cq_spatial_hit_t[]); stub u1, bc u2 */
    XM_ADJACENT, /* deliver buf once to the local subscribers of the cells in body (uint32[]);
                  * u1 sender, u2 clientConnId to skip, u3 broadcast flags */
    XM_HANDOVER, /* a stage of a handover (handover.c); body: its context */
    /* spatial cells and entity channels (spatial.c, entity.c) */
    XM_SP_CELL, /* the rest of a spatial creation's steps (body after the request, at u1) */
    XM_DIR_ADD, /* directory worker: channel chan_id (type u1, metadata body) now exists */
    XM_ENTITY,  /* create entity channel u1 for the request in mp */
    XM_WK_SUB,  /* subscribe client conn_id to well-known entity chan_id */
    /* relay nodes (node.c): never posted to a worker */
    XM_NODE_CONN,     /* conn_id (conn_type) of the sending node authenticated */
    XM_GLOBAL_OWNER,  /* GLOBAL's home: GLOBAL's owner is now conn_id (0: none) */
    XM_NODE_RESET,    /* the stream from node u1 broke (u2 packets lost): close its subscribers;
                       * u3: it was GLOBAL's home (GLOBAL's subscribers too) */
    XM_NODE_REHOME,   /* GLOBAL's home is now node u1: tell it this worker's channels */
    XM_NODE_CONN_ACK, /* the receiving node's connection conn_id is known to the sender now */
    XM_BOUNCE,        /* a request (as DISPATCH) naming connection u1 of the receiving node, which
                       * the sender did not know yet: sent back once the receiver vouches for it */
    /* bridge events (inject.c): posted by a thread that is no worker (cq_shared_inject_*);
     * local only: they never cross nodes, and xwire refuses them like XM_SCHEMA */
    XM_INJECT_BC,    /* channel chan_id's worker: deliver buf to every subscriber (an ALL) */
    XM_INJECT_ROUTE, /* deliver buf to this worker's clients authenticated with PIT body */
    XM_RESUME,       /* a bridge resume's chunk for conn_id: buf u1 records, u2 CQ_RESUME_CHUNK_* */
    XM_TOPIC_CHAN,   /* a binding's "topic" channel, metadata body: found or made in the
                      * directory (chan_id 0), then created on its worker (chan_id set); u1:
                      * the asking node (0: this one); u2 CQ_TOPIC_TOLD: the answer, to it */
    XM__COUNT
};

typedef struct cq_xmsg {
    cq_mpsc_node_t node;
    uint8_t kind;
    uint8_t conn_type;
    uint32_t conn_id;
    uint32_t chan_id;
    uint32_t u1, u2, u3;
    cq_mp_t mp;    /* body points into body[] when body_len > 0 */
    cq_buf_t *buf; /* one reference, owned by the message */
    const void *ptr;
    uint32_t cost; /* bytes counted against the target's inbox */
    uint32_t body_len;
    uint8_t body[];
} cq_xmsg_t;

/* A zeroed message of `kind` with room for body_len body bytes; returned owned, NULL on OOM. */
cq_xmsg_t *cq__xmsg_new(int kind, size_t body_len);
/* A message of `kind` carrying the request r (borrowed): sender, MessagePack, and a copy of the
 * body when with_body (otherwise mp.body is NULL and body_len 0). Returned owned or NULL. */
cq_xmsg_t *cq__xmsg_req(int kind, const cq_req_t *r, bool with_body);
/* Frees m and its buffer reference. Accepts NULL; returns NULL. */
cq_xmsg_t *cq__xmsg_free(cq_xmsg_t *m);
/* Posts m (taken) to worker's inbox and counts it there. The worker is woken once, at the end
 * of the poster's loop iteration (cq_core_flush), however many messages it was sent. */
void cq__xmsg_post(cq_core_t *c, int worker, cq_xmsg_t *m);
/* Wakes every worker posted to since the last call (cq_core_flush calls it). */
void cq__xmsg_wake_posted(cq_core_t *c);
/* Like cq__xmsg_post for a message carrying an inbound message of sender (borrowed): the
 * sender stops being read while the target's inbox is over CQ_INBOX_HIGH. */
void cq__xmsg_post_paced(cq_core_t *c, int worker, cq_xmsg_t *m, cq_conn_t *sender);
/* Posts a message {kind, conn_id, conn_type, u1, body} to every other worker; body (borrowed,
 * NUL-terminated, may be NULL) is copied with its NUL. Workers that fail to allocate miss it. */
void cq__xmsg_post_others(cq_core_t *c, int kind, uint32_t conn_id, uint8_t conn_type, uint32_t u1,
                          const char *body);
/* Posts m (taken) from a thread that is not a worker (schema reloads). Not counted against the
 * inbox: it is rare and small. */
void cq__xmsg_post_any(cq_shared_t *sh, int worker, cq_xmsg_t *m);
/* Posts m (taken) from a thread that is not a worker and wakes the worker at once, counting it
 * against the inbox as a worker's post does (the bridge's events: not rare, and any size). The
 * poster is never paused: what bounds it is the caller's own queue (cq_core.h). */
void cq__xmsg_post_outside(cq_shared_t *sh, int worker, cq_xmsg_t *m);
/* The next message in this worker's inbox (returned owned), or NULL. */
cq_xmsg_t *cq__xmsg_pop(cq_core_t *c);
/* m (taken) was handled: uncounts and frees it. */
void cq__xmsg_done(cq_core_t *c, cq_xmsg_t *m);

/* ---- inbound flow control ----
 *
 * A connection whose messages go to a worker whose inbox holds more than CQ_INBOX_HIGH bytes
 * stops being read until every inbox is under CQ_INBOX_LOW (cq_conn_paused,
 * cq_core_conn_resume in cq_core.h). */
#define CQ_INBOX_HIGH (16u << 20)
#define CQ_INBOX_LOW  (4u << 20)

/* True when worker's inbox holds more than limit bytes. Any worker. */
bool cq__inbox_over(const cq_core_t *c, int worker, int64_t limit);

/* ---- other nodes (node.c) ----
 *
 * A place is a worker of this node (0 .. nworkers - 1) or another node n (nworkers + n), so
 * the functions above, and the arrays indexed by them (a channel's wcount, the SENDMANY
 * batches), cover both; cq__xmsg_post sends a message for a node to it. Only connections and
 * non-spatial channels carry their node in their id; GLOBAL, spatial and entity channels live
 * on every node's own workers until homes are placed (doc/relay-cluster.md). */
int cq__place_node(const cq_core_t *c, uint32_t node);
/* The node of a place of another node, 0 for a worker of this one. */
uint32_t cq__place_node_of(const cq_core_t *c, int place);
/* Workers, then the relay's nodes: the size of an array indexed by place. */
int cq__nplaces(const cq_shared_t *sh);
bool cq__node_live(const cq_shared_t *sh, uint32_t node);
/* Queues m (taken) for node; it leaves with cq__node_flush (cq_core_flush). */
void cq__node_post(cq_core_t *c, uint32_t node, cq_xmsg_t *m);
void cq__node_flush(cq_core_t *c);
int cq__node_init(cq_core_t *c);
void cq__node_free(cq_core_t *c);
/* A request that names conn_id, which the directory does not know (CQ_ENOCONN): when conn_id
 * belongs to another live node, its announcement may still be on its way (the connection's
 * AuthResult and its XM_NODE_CONN leave its node on different paths), so the request goes to
 * that node, which sends it back behind the announcement if the connection is there, and
 * drops it if not. Returns true when it went (r borrowed); false: the refusal stands. */
bool cq__node_bounce(cq_core_t *c, const cq_req_t *r, uint32_t conn_id);
/* XM_NODE_RESET: this worker's connections subscribed to a channel of node m->u1 close. */
void cq__node_reset_local(cq_core_t *c, const cq_xmsg_t *m);
/* XM_NODE_REHOME: this worker's channels join the new home's directory (XM_DIR_ADD). */
void cq__node_rehome_local(cq_core_t *c, const cq_xmsg_t *m);
/* ADJACENT: every other live node delivers rec to its local subscribers of cells[0..n). */
void cq__node_adjacent(cq_core_t *c, const uint32_t *cells, uint32_t n, cq_buf_t *rec,
                       uint32_t sender, uint32_t skip_client, uint32_t bc);
/* GLOBAL's home tells every live node who owns GLOBAL now (any worker reads it: the ACL, the
 * owner's copies of AuthResult and CreateChannelResult). Only on GLOBAL's home. */
void cq__node_global_owner(cq_core_t *c, uint32_t owner);
/* XM_NODE_CONN_ACK on the connection's worker; and the housekeeping of held output. */
void cq__node_conn_ack(cq_core_t *c, uint32_t conn_id);
void cq__node_tick(cq_core_t *c, uint64_t now_ms);
/* Every live node hears of a connection of this one that authenticated, and of its close. */
void cq__node_conn_up(cq_core_t *c, cq_conn_t *conn);
/* pit: a lost recoverable server's, so that the other nodes keep what it held there too. */
void cq__node_conn_gone(cq_core_t *c, const cq_conn_t *conn, const char *pit);
/* A successor (conn_id, here) of old_id, by pit: every other node gives back what it kept. */
void cq__node_recover(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit);

#endif
