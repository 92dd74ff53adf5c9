/* core.h - the core's own state and its connections, channels and subscriptions: the
 * process-wide state (cq_shared), the worker (cq_core), connections, channels, subscriptions
 * and their fan-out lists, and the functions of the files that keep them (core.c, conn.c,
 * chan.c, sub.c, data.c, forward.c, recover.c, sendmany.c, auth.c). Not a public header.
 *
 * The other internal headers: msgtab.h (message types, the request a handler gets, the
 * message table), world.h (the spatial world: spatial controller, entity channels and groups,
 * interest, handover), place.h (ids, placement, cross-worker messages). A file includes those
 * it uses. */
#ifndef CQ_CORE_STATE_H
#define CQ_CORE_STATE_H

#include "cq_core.h"

#include <pthread.h>
#include <stdatomic.h>

#include "channeld.pb-c.h"
#include "cq_buf.h"
#include "cq_coarsen.h"
#include "cq_fsm.h"
#include "cq_limits.h"
#include "cq_list.h"
#include "cq_log.h"
#include "cq_map.h"
#include "cq_merge.h"
#include "cq_sched.h"
#include "cq_schema.h"
#include "cq_mpsc.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_settings.h"
#include "cq_smap.h"
#include "cq_spatial.h"
#include "cq_wire.h"
#include "place.h"

/* ---- metrics (atomics, relaxed) ---- */

enum {
    M_MESSAGES_IN,
    M_MESSAGES_OUT,
    M_PACKETS_IN,
    M_PACKETS_OUT,
    M_BYTES_IN,
    M_BYTES_OUT,
    M_CONNECTION_CLOSED,
    M_SLOW_CONSUMER,
    M_FSM_DISALLOWED,
    M_AUTH_FAILED,
    M_AUTH_TIMEOUT,
    M_IDLE_TIMEOUT,
    M_DROPPED,
    M_LIMIT_CLOSED,
    M_PACKETS_DROP,         /* channeld registers it and never adds to it: neither do we */
    M_PACKETS_FRAG,         /* reads that ended mid-header or mid-packet */
    M_PACKETS_COMB,         /* packets parsed */
    M__LABELED,             /* the counters above carry connType; those below only slot 0 */
    M_FANOUTS = M__LABELED, /* records queued to subscribers by a channel fan-out */
    M_DATA_STRETCHED,       /* channel-data windows started stretched (overload, cq_coarsen.h) */
    M_DATA_MERGED,          /* missed windows merged into a later fan-out (overload) */
    M_DATA_RESYNCS,         /* fan-outs not queued to a connection behind: full state next */
    M_COARSEN_RISES,        /* overload level rises */
    M_COARSEN_FALLS,        /* overload level falls */
    M_NODE_DROPPED,         /* messages for another relay node dropped (node.c) */
    M_BRIDGE_UNDELIVERABLE, /* injected broadcasts whose channel did not exist (inject.c) */
    M__COUNT
};

/* Counters live per worker (written only by it, read by /metrics): no shared cache line on
 * the per-message path. Relaxed atomic loads and stores compile to plain moves. */
typedef struct cq_counters {
    _Atomic uint64_t c[M__COUNT][3]; /* [counter][connType 0 none, 1 server, 2 client] */
    _Atomic uint64_t tick_ns;        /* the duration of the last housekeeping tick */
    _Atomic uint32_t coarsen_level;  /* the worker's overload level (cq_coarsen.h) */
} cq_counters_t;

typedef struct cq_metrics {
    _Atomic int64_t connections[3];
    _Atomic int64_t channels[8]; /* by channel type: index = type for 1..5, 0 other, 6 test */
    _Atomic int64_t by_transport[CQ_CONN_TRANSPORTS][3]; /* [transport][connType] */
    _Atomic int64_t subscriptions; /* channel subscriptions held (every connection) */
} cq_metrics_t;

/* Adds n to counter m of the worker core `core` (its own thread only). */
/* conn->pending: not on a list, on the flush list, waiting on the lazy list. */
enum { PENDING_NO = 0, PENDING_NOW = 1, PENDING_LAZY = 2, PENDING_HELD = 3 };
/* The grid aligned fan-outs leave on (cq_sched_set_quantum, set by cq__data_attach for cells
 * and entities), where a client's cells come due together: the interval of damping distance 0
 * (cq_spatial_damping_ms). Lazy output waits for its next point. */
#define CQ_FANOUT_GRID_MS 20u

#define CQ_METRIC_ADD(core, m, ctype, n)                                                           \
    do {                                                                                           \
        _Atomic uint64_t *cq__p = &(core)->counters.c[(m)][(ctype) < 3 ? (ctype) : 0];             \
        atomic_store_explicit(cq__p, atomic_load_explicit(cq__p, memory_order_relaxed) + (n),      \
                              memory_order_relaxed);                                               \
    } while (0)

/* ---- connection directory (process-wide, mutex; never on the per-message path) ---- */

typedef struct cq_dir_ent {
    uint8_t type;
    uint8_t authed; /* a CLIENT that authenticated (well-known entities, entity.c) */
    uint8_t remote; /* a connection of another relay node (node.c) */
    uint32_t subs;  /* subscriptions held, for max-subs-per-conn/-server */
    char *pit;      /* a recoverable server of another node: its PIT (owned), else NULL */
} cq_dir_ent_t;

#define CQ_REC_WAIT_MAX 64

struct cq_shared {
    cq_core_opts_t o;
    const cq_core_ops_t *ops;
    void *ops_ud;
    cq_core_t *cores[CQ_MAX_WORKERS];
    _Atomic uint32_t global_owner;     /* conn id possessing GLOBAL, 0 = none */
    _Atomic uint32_t global_owner_was; /* GLOBAL's owner when its home last moved (node.c) */
    cq_metrics_t metrics;
    pthread_mutex_t dir_lock;
    cq_map_t dir;                  /* conn id -> cq_dir_ent_t*, under dir_lock */
    uint32_t next_conn;            /* under dir_lock */
    uint32_t dir_remote;           /* entries of other nodes' connections, under dir_lock */
    pthread_mutex_t tokens_mu;     /* the AUTH check and a reload's swap: not a hot path */
    void *tokens;                  /* json_t* PIT -> LT, under tokens_mu (read-only content) */
    struct cq_recov_handle *recov; /* dropped recoverable servers, under dir_lock */
    int64_t unix_offset_ns;        /* unix time - monotonic time, for subTime */
    cq_idl_t ids;                  /* id layout (place.h): node bits 0 today */
    /* Spatial and entity channels (issue 12; doc/spatial.md). spatial is o.spatial: NULL
     * without a spatial controller. slot_owner[i] is the connection holding server slot i
     * (0 = free): written only by the directory worker (GLOBAL's), read by any worker
     * (entity creation on GLOBAL, cross-server handover); place.h lists it. */
    const cq_spatial_cfg_t *spatial;
    _Atomic uint32_t *slot_owner;
    /* Entity groups are shared sets across entities that live on different workers: one
     * table under groups_mu, a leaf lock taken by ENTITY_GROUP_ADD/REMOVE and by a handover
     * decision, never per message. */
    pthread_mutex_t groups_mu;
    cq_entgroups_t *groups;
    /* bumped by every ENTITY_GROUP_ADD/REMOVE: a handover a locked group refused is
     * retried once the groups changed (handover.c). */
    _Atomic uint32_t groups_gen;
    /* Well-known entity channels (CreateEntityChannelMessage.isWellKnown): every client that
     * authenticates later subscribes to them. Under wk_mu, a leaf lock taken when one is
     * created or removed and once per client AUTH. */
    pthread_mutex_t wk_mu;
    uint32_t *wk_ids;
    uint32_t n_wk, cap_wk;
    /* Relay nodes (node.c, doc/relay-cluster.md): node 0 without a relay. relay_send is set
     * before the workers run; live_nodes is a bit per node, written by membership. */
    uint16_t node;
    cq_core_relay_send_fn relay_send;
    void *relay_ud;
    /* The bridge's resume (resume.c): set before the workers run; NULL without a bridge. */
    _Atomic(cq_core_resume_fn) resume_fn; /* set once, after the workers may run */
    atomic_bool route_on;                 /* route bindings exist: logins catch up (resume.c) */
    void *resume_ud;                      /* written before resume_fn (release) */
    _Atomic bool relay_ready;
    _Atomic uint64_t live_nodes[4];
    _Atomic uint16_t global_home;    /* the node GLOBAL and the directory live on; 0: this one */
    _Atomic uint64_t dead_nodes[4];  /* left the relay: their messages are dropped until HELLO */
    _Atomic uint64_t heard_nodes[4]; /* said HELLO since they last left */
    _Atomic uint64_t heard_ms[256];  /* when a packet from each node last arrived (mono ms) */
    _Atomic uint64_t relay_in, relay_refused; /* messages from other nodes: taken, refused */
    _Atomic uint64_t relay_paced;             /* records that waited for a full inbox */
    /* XM_RECOVERs whose predecessor's CONN_GONE has not arrived yet (another stream): each
     * follows that CONN_GONE (node.c). Relay thread and ZooKeeper thread, under dir_lock. */
    struct cq_xmsg *rec_wait[CQ_REC_WAIT_MAX];
    uint32_t n_rec_wait;
};

/* A dropped recoverable server connection, waiting for a successor with the same PIT. */
typedef struct cq_recov_handle {
    struct cq_recov_handle *next;
    char *pit;
    uint32_t old_id;
    uint64_t since_ms;
} cq_recov_handle_t;

/* ---- connections (owned by their worker) ---- */

typedef struct cq_conn_chan {
    uint32_t chan_id;
    uint32_t idx; /* position in the worker's local subscriber list of chan_id */
} cq_conn_chan_t;

enum { CONN_UNAUTH = 0, CONN_AUTHED = 1, CONN_CLOSING = 2 };

struct cq_conn {
    uint32_t id;
    uint8_t type;
    uint8_t state;
    uint8_t fsm_state;
    uint8_t out_ct;        /* Snappy once the peer sent Snappy; never reset */
    uint8_t framing;       /* cq_framing_mode_t */
    uint8_t node_up;       /* the other relay nodes were told of it (node.c) */
    uint8_t announce_wait; /* their acknowledgements still awaited (<= 255 nodes): output held */
    uint8_t failed_auth;
    uint8_t pending;         /* PENDING_*: on the flush list, or on the lazy list */
    uint8_t lost : 1;        /* the peer went away (recoverable if a SERVER) */
    uint8_t paused : 1;      /* reading paused: a target inbox is over CQ_INBOX_HIGH */
    uint8_t auth_held : 1;   /* its AUTH waits for its predecessor's loss to be seen (auth.c) */
    uint8_t rec_global : 1;  /* its RECOVERY_END waits for GLOBAL's recovery data (recover.c) */
    uint8_t rec_end_due : 1; /* ... and its second has passed */
    /* A bridge resume (resume.c): asked and not ended; between BEGIN and FINAL the live bridge
     * events (BC_BRIDGE) are held back, as the resume's chunks carry them. */
    uint8_t resume_asked : 1;
    uint8_t bridge_hold : 1;
    uint8_t catchup_wait : 1; /* in the worker's catchup ids: waits for room for a chunk */
    /* Route bindings' catch-up at AUTH (resume.c): the routed bridge events are held back
     * until its FINAL chunk, as its chunks carry them; route_wait as catchup_wait. */
    uint8_t route_hold : 1;
    uint8_t route_wait : 1;
    uint8_t transport; /* CQ_CONN_TCP.. + 1 once cq_core_conn_set_transport ran; 0 unknown */
    char *pit;         /* after a successful AUTH */
    const cq_fsm_t *fsm;
    const cq_transport_ops_t *tops;
    void *tctx;
    cq_sendq_t sendq;
    cq_sbuf_t rbuf; /* partial packet kept between reads; empty when idle */
    cq_list_t pending_node;
    cq_list_t unauth_node; /* in accept order while unauthenticated */
    cq_list_t soft_node;   /* while over the soft send limit */
    /* accepted_ms: when it was accepted, then (node.c) when it was announced to the other
     * relay nodes: the auth timeout is done with it by then */
    uint64_t accepted_ms, last_rx_ms;
    cq_conn_chan_t *chans; /* local fan-out lists this connection is in */
    uint32_t n_chans, cap_chans;
    int close_reason; /* the reason given to cq_core_conn_close (0 until then) */
    uint32_t adj_gen; /* the last ADJACENT broadcast delivered here (forward.c) */
    /* What it still held from earlier loop iterations when this one's first channel data came
     * (sendmany.c: behind or not, clamped); data_iter is the iteration it was taken in (mod
     * 2^32: only compared for equality). */
    uint32_t data_iter;
    uint32_t data_base;
};

/* ---- channels (owned by the worker chan_id % workers) ---- */

typedef struct cq_subopts {
    uint32_t data_access;
    uint32_t interval_ms;
    int32_t delay_ms;
    bool skip_self;
    bool skip_first;
    uint32_t n_masks;
    char **masks;
} cq_subopts_t;

typedef struct cq_sub {
    uint32_t conn_id;
    uint8_t conn_type;
    cq_subopts_t opts;
    uint64_t sub_time_ms;
    struct cq_chan *chan;
    cq_list_t by_conn;   /* in the worker's connref for conn_id */
    uint8_t by_handover; /* made by an entity handover (handover.c), not asked for */
} cq_sub_t;

/* Field masks shared by subscribers (their scheduler masks id is index + 1). */
typedef struct cq_maskset {
    char **paths;
    uint32_t n;
} cq_maskset_t;

/* A channel's data (data.c). state is NULL until the data is defined (by CREATE_CHANNEL's Any,
 * the channel type's DataMsgFullName, or the first update). */
typedef struct cq_chandata {
    cq_core_t *core;
    char *type_url;
    const cq_msgdesc_t *desc; /* NULL: unknown type, merged by concatenation */
    cq_buf_t *state;          /* compacted master copy; replaced, never modified */
    /* Updates not merged into state yet, one after the other (a spatial cell's, data.c
     * "lazy state"); read the state through cq__data_state(), which merges them first. */
    cq_sbuf_t pend;
    cq_merge_opts_t mopts;
    bool has_mopts;
    cq_sched_t *sched;
    cq_maskset_t *masks;
    uint32_t n_masks;
    uint32_t heap_idx; /* in the worker's due heap, UINT32_MAX when not */
    uint64_t due_ms;
    uint64_t due_eff; /* when it became due: due_ms, or later if made due late (reschedule) */
} cq_chandata_t;

typedef struct cq_chan {
    uint32_t id;
    uint32_t type;
    char *metadata;
    uint32_t owner; /* conn id, 0 = none */
    uint8_t owner_type;
    const cq_chan_settings_t *settings;
    cq_map_t subs;        /* conn id -> cq_sub_t* */
    uint32_t *wcount;     /* subscribers per worker */
    cq_list_t owner_node; /* in the owner's connref */
    cq_chandata_t *data;
    /* What the channel's type keeps beyond the common channel (world.h), owned: allocated
     * with a channel of that type, freed with it, NULL for a type that keeps nothing. Only
     * the type's own operations go through it; the fan-out never does. */
    union cq_chan_ts {
        struct cq_entity_state *entity; /* ENTITY: its cell and its handover's state */
    } ts;
} cq_chan_t;

/* Per-worker reverse index for one connection id: what this worker's channels hold of it. */
typedef struct cq_connref {
    cq_list_t subs;  /* cq_sub_t.by_conn */
    cq_list_t owned; /* cq_chan_t.owner_node */
} cq_connref_t;

/* Local fan-out list: this worker's connections subscribed to one channel. */
typedef struct cq_lsubs {
    cq_conn_t **conns;
    uint32_t n, cap;
    uint32_t chan_id;
    /* This loop iteration's fan-out buffer (forward.c): the open segment's records appended in
     * order, which the recipients' queues take as slices. Released at the flush. */
    cq_buf_t *fb;            /* one reference; NULL when none this iteration */
    const cq_buf_t *fb_prev; /* the buffer before fb in this iteration (compared, not held) */
    cq_list_t fb_node;       /* in cq_core.fb_open while fb is set */
} cq_lsubs_t;

/* The worker's open fan-out segment (forward.c): bytes [off, off + len) of l->fb, n records
 * of one channel with one sender and flags, due to `plain` recipients. */
typedef struct cq_seg {
    cq_lsubs_t *l; /* NULL: none open */
    uint32_t off, len, n, plain;
    uint32_t sender, owner, flags;
} cq_seg_t;

/* Channel directory entry, worker 0 only (LIST, id allocation). */
typedef struct cq_chaninfo {
    uint32_t id, type;
    char *metadata;
} cq_chaninfo_t;

/* Per-message logs (drops, denials) are rate limited per worker so a peer cannot flood the
 * log; the number suppressed is logged once the next second starts. */
#define CQ_LOG_BURST 50
bool cq__log_allow(cq_core_t *c);
#define CQ_MSG_LOG(c, topic, ...)                                                                  \
    do {                                                                                           \
        if (cq__log_allow(c))                                                                      \
            CQ_INFO(topic, __VA_ARGS__);                                                           \
    } while (0)

/* ---- the per-worker core ---- */

struct cq_core {
    cq_counters_t counters; /* first: its own cache lines */
    cq_shared_t *sh;
    int index;
    int nworkers;
    cq_mpsc_t inbox;
    _Atomic int64_t inbox_bytes; /* added by producers, subtracted when handled */
    uint64_t wake_mask;          /* workers posted to and not yet woken (bit per worker) */
    cq_map_t conns;              /* conn id -> cq_conn_t* (local connections) */
    cq_map_t chans;              /* chan id -> cq_chan_t* (channels hashed here) */
    cq_map_t connrefs;           /* conn id -> cq_connref_t* */
    cq_map_t lsubs;              /* chan id -> cq_lsubs_t* */
    uint32_t lsub_gen;           /* bumped by every removal from a local list */
    cq_list_t pending;           /* connections with output to flush */
    cq_list_t lazy;              /* clients whose output waits for lazy_due (cq__send_lazy) */
    uint64_t lazy_due;           /* the grid point they leave at; UINT64_MAX: none waits */
    cq_list_t fb_open;           /* cq_lsubs_t with a fan-out buffer this iteration */
    cq_seg_t seg;                /* the open fan-out segment */
    cq_list_t unauth;            /* unauthenticated connections, oldest first */
    cq_list_t announcing;        /* authenticated ones whose output waits for the other nodes */
    cq_list_t auth_held;         /* cq_authhold_t: AUTHs that wait for a predecessor's loss */
    cq_list_t soft;              /* connections over the soft send limit */
    /* Resuming connections waiting for room for their next chunk (resume.c): ids, as a
     * connection that closes meanwhile just drops out at the next flush. */
    uint32_t *catchup, n_catchup, cap_catchup;
    cq_wire_arena_t arena;
    uint64_t log_window_ms; /* per-message log lines: at most CQ_LOG_BURST a second */
    uint32_t log_lines, log_suppressed;
    uint8_t *scratch; /* Snappy decode of one inbound body */
    uint64_t now_ms;
    cq_map_t routes;   /* conn id -> worker + 1, for recovered ids not on id % workers */
    cq_map_t holds;    /* conn id -> the channel + 1 whose bridge events bridge_hold holds back */
    cq_smap_t pits;    /* PIT -> cq_pitconns_t*: this worker's authenticated clients */
    cq_list_t recsubs; /* cq_recsub_t: what dropped recoverable servers held here */
    struct cq_timed *timed; /* pending timed events */
    uint32_t n_timed, cap_timed;
    const cq_schema_t *schema; /* channel-data types this worker resolves against */
    cq_chan_t **due;           /* min-heap of channels with data by next fan-out time */
    uint32_t n_due, cap_due;
    cq_buf_t *emit_src, *emit_rec; /* last fan-out buffer and its record, within a tick */
    struct cq_sendmany *sm;        /* per place: fan-out records for its connections */
    int nplaces;                   /* workers, then the relay's nodes (node.c) */
    cq_sbuf_t *rout;               /* per node: this iteration's messages for it (node.c) */
    uint16_t *rdirty;              /* the nodes whose outbox is not empty */
    uint32_t n_rdirty;
    /* Graceful overload (doc/spatial.md "Overload"): the level every scheduler of this
     * worker's channels reads, fed the worker's lateness by cq_core_run_due. */
    cq_coarsen_t co;
    uint64_t coarsen_log_ms; /* the last "coarsening" log line (one a minute at most) */
    uint32_t iter;           /* loop iterations flushed (cq_core_flush), mod 2^32 */
    uint32_t coarsen_quiet;  /* rises from level 0 not logged since */
    /* worker 0 only */
    cq_map_t chaninfo;  /* chan id -> cq_chaninfo_t* */
    uint32_t id_cursor; /* rotating non-spatial id cursor */
    uint32_t adj_gen;   /* ADJACENT broadcasts handled by this worker (forward.c) */
    cq_map_t aoi;       /* conn id -> cq_aoi_t*, its last interest (interest.c) */
    /* the spatial controller's server slots (directory worker only; holder NULL until the
     * first CREATE_SPATIAL_CHANNEL). sh->slot_owner mirrors them for the other workers. */
    cq_spatial_slots_t slots;
};

/* A subscription or ownership of a dropped recoverable server, kept for its successor. */
typedef struct cq_recsub {
    cq_list_t node;
    char *pit;
    uint32_t chan_id;
    bool was_owner, was_subscribed;
    cq_subopts_t opts;
    uint64_t sub_time_ms;
    uint64_t since_ms;
    uint32_t successor; /* GLOBAL's, kept for a home this node is about to become (recover.c) */
} cq_recsub_t;

enum { T_OWNER_RECOVERED = 1, T_RECOVERY_END = 2, T_RECOVERY_END_LATEST = 3 };
typedef struct cq_timed {
    uint64_t due_ms;
    uint32_t kind, conn_id, chan_id;
} cq_timed_t;

/* core.c */
/* The name of a cross-worker message kind, or NULL when it has no row (no handler). */
const char *cq__xm_name(int kind);
/* Whether kind's handler only delivers (xm_def_t.delivers): its local post needs no causal flush.
 */
bool cq__xm_delivers(int kind);

/* conn.c */
void cq__conn_push(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec);
void cq__conn_push_packet(cq_core_t *c, cq_conn_t *conn, cq_buf_t *packet);
/* Queues a record on a non-Snappy connection taking a reference the caller holds. */
void cq__conn_push_record_ref(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec);
/* Queues bytes [off, off + len) of the fan-out buffer fb (n records; prev: the buffer before
 * fb) as a slice. Returns CQ_SENDQ_ADDED when it used one of the caller's references on fb,
 * CQ_SENDQ_APART when the queue would not take it (nothing done), else CQ_SENDQ_EXTENDED (also
 * after an error, which closed the connection). */
int cq__conn_push_slice(cq_core_t *c, cq_conn_t *conn, cq_buf_t *fb, uint32_t off, uint32_t len,
                        uint32_t n, const cq_buf_t *prev);
/* Queues run (borrowed), n whole records, as one record (compressed for Snappy peers). */
void cq__conn_push_run(cq_core_t *c, cq_conn_t *conn, cq_buf_t *run, uint32_t n);
void cq__send_to(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec);
/* Like cq__send_to, for GLOBAL's RECOVERY_CHANNEL_DATA: the successor's worker, once it queued
 * it, may let RECOVERY_END follow (cq__recover_global_sent). */
void cq__send_global_recovery(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec);
/* Like cq__send_to, for what a client can take with its next fan-outs: a client connection's
 * copy waits, queued in order, for the next CQ_FANOUT_GRID_MS grid point (cq_core_run_due, which
 * the worker's timer runs by then) and leaves in the same write as its cells' fan-outs; a
 * server's, or anything else queued for the client meanwhile, flushes it at once. For the
 * handover records every cell subscriber gets (1,200 handovers a second, some 170 recipients
 * each, in a 2000-client world: a write each, before, bench/RESULTS.md issue 28). */
void cq__send_lazy(cq_core_t *c, uint32_t conn_id, cq_buf_t *rec);
void cq__conn_push_lazy(cq_core_t *c, cq_conn_t *conn, cq_buf_t *rec);
/* Moves every lazy connection to the flush list (cq_core_run_due). */
void cq__lazy_release(cq_core_t *c);
void cq__reply(cq_core_t *c, const cq_req_t *r, uint32_t chan_id, uint32_t msg_type,
               const ProtobufCMessage *msg);
void cq__notify(cq_core_t *c, uint32_t conn_id, uint32_t chan_id, uint32_t msg_type,
                const ProtobufCMessage *msg);
void cq__close_local(cq_core_t *c, uint32_t conn_id, int reason, const char *why);
/* Closes conn_id on whichever worker holds it (why is copied). A close for CQ_ELIMIT (a
 * request that a limit refuses) is counted in chanq_limit_closed. */
void cq__close_conn(cq_core_t *c, uint32_t conn_id, int reason, const char *why);
/* The output held while the other relay nodes learned of conn leaves (node.c). */
void cq__conn_release_held(cq_core_t *c, cq_conn_t *conn);
/* A copy for GLOBAL's owner (AuthResult, CreateChannelResult), unless it is `except`. */
void cq__notify_gowner(cq_core_t *c, uint32_t except, uint32_t chan_id, uint32_t msg_type,
                       const ProtobufCMessage *msg);
void cq__handle_disconnect(cq_core_t *c, cq_req_t *r); /* 9 */

/* auth.c */
void cq__handle_auth(cq_core_t *c, cq_req_t *r);
int cq__tokens_load(cq_shared_t *sh, const char *path, char *err, size_t errlen);
void cq__tokens_free(cq_shared_t *sh);

/* chan.c */
cq_chan_t *cq__chan_get(cq_core_t *c, uint32_t id);
cq_chan_t *cq__chan_create(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata,
                           uint32_t owner, uint8_t owner_type);
void cq__chan_remove(cq_core_t *c, cq_chan_t *ch, uint32_t notify_chan_id);
void cq__chan_set_owner(cq_core_t *c, cq_chan_t *ch, uint32_t owner, uint8_t owner_type);
void cq__chan_free_all(cq_core_t *c);
void cq__handle_create(cq_core_t *c, cq_req_t *r);
void cq__handle_create_here(cq_core_t *c, cq_req_t *r, uint32_t id);
void cq__handle_remove(cq_core_t *c, cq_req_t *r);
void cq__handle_list(cq_core_t *c, cq_req_t *r);
void cq__handle_remove_here(cq_core_t *c, cq_req_t *r, uint32_t id);
void cq__dir_free_id(cq_core_t *c, uint32_t id);
/* A free channel id of this node's (0: none, or max-channels reached); the directory's worker. */
uint32_t cq__dir_alloc(cq_core_t *c);
int cq__dir_add(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata);
void cq__dir_set_meta(cq_core_t *c, uint32_t id, uint32_t type, const char *metadata);
/* What a connection does that the channel's ACL guards (channeld's ChannelAccessType); the
 * level each needs is the channel type's setting (cq_acl_level_t in cq_settings.h). */
typedef enum cq_acl_access {
    CQ_ACCESS_SUB = 0,    /* subscribe another connection */
    CQ_ACCESS_UNSUB = 1,  /* unsubscribe another connection */
    CQ_ACCESS_REMOVE = 2, /* remove the channel */
} cq_acl_access_t;
/* True when connection `who` may do `access` on ch, given the GLOBAL owner's id (0 = none). */
bool cq__acl_allows(const cq_chan_t *ch, cq_acl_access_t access, uint32_t who,
                    uint32_t global_owner);
void cq__chaninfo_free_all(cq_core_t *c);

/* sub.c */
void cq__handle_sub(cq_core_t *c, cq_req_t *r);
void cq__handle_unsub(cq_core_t *c, cq_req_t *r);
int cq__sub_add(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, uint8_t conn_type,
                const Channeldpb__ChannelSubscriptionOptions *req, cq_sub_t **ret);
void cq__sub_remove(cq_core_t *c, cq_sub_t *s, bool dir_update);
void cq__sub_result(cq_core_t *c, cq_chan_t *ch, const cq_sub_t *s, const cq_req_t *r);
/* A subscription of target to chan_id failed with rc (cq__sub_add). Over its limit (CQ_ELIMIT:
 * max-subs-per-conn for a client, max-subs-per-server for a server) the target is closed with
 * the reason logged, as channeld has no error reply and a requester left without an answer
 * waits forever; other failures are logged. */
void cq__sub_refused(cq_core_t *c, const cq_req_t *r, uint32_t target, uint32_t chan_id, int rc);
void cq__lsub_add(cq_core_t *c, uint32_t chan_id, uint32_t conn_id);
void cq__lsub_del(cq_core_t *c, uint32_t chan_id, uint32_t conn_id);
void cq__lsub_conn_drop(cq_core_t *c, cq_conn_t *conn);
void cq__conn_gone(cq_core_t *c, uint32_t conn_id, uint8_t conn_type, const char *pit,
                   bool owned_global);
int cq__sub_add_opts(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id, uint8_t conn_type,
                     const cq_subopts_t *opts, uint64_t sub_time_ms, cq_sub_t **ret);
cq_connref_t *cq__connref(cq_core_t *c, uint32_t conn_id, bool create);
void cq__connref_gc(cq_core_t *c, uint32_t conn_id);
void cq__subopts_done(cq_subopts_t *o);
void cq__subopts_to_pb(const cq_subopts_t *o, Channeldpb__ChannelSubscriptionOptions *pb);
/* *ret = the channel type's default options merged with req (may be NULL), as cq__sub_add
 * makes them. Returns 0 or -ENOMEM; *ret owns its masks (cq__subopts_done) either way. */
int cq__subopts_make(const cq_chan_settings_t *st,
                     const Channeldpb__ChannelSubscriptionOptions *req, cq_subopts_t *ret);

/* recover.c */
/* A connection of another relay node, a recoverable server with pit, still in the directory
 * (its loss not seen yet): its id; 0 when there is none or type is not a SERVER. */
uint32_t cq__recover_pending(cq_shared_t *sh, uint8_t type, const char *pit);
/* Under dir_lock: a handle for a lost recoverable server of another node (node.c). */
void cq__recover_handle_locked(cq_shared_t *sh, const char *pit, uint32_t old_id, uint64_t now);
/* auth.c: a held AUTH goes on once its predecessor's loss is seen, or its wait is over; a
 * connection that closes meanwhile drops its hold; the worker's end drops them all. */
void cq__auth_tick(cq_core_t *c, uint64_t now_ms);
void cq__auth_unhold(cq_core_t *c, cq_conn_t *conn);
void cq__auth_free_all(cq_core_t *c);
/* owned_global: the connection possessed GLOBAL at a home that is gone (node.c). */
void cq__recover_store(cq_core_t *c, uint32_t conn_id, const char *pit, bool owned_global);
bool cq__recover_takeover(cq_core_t *c, cq_conn_t *conn, uint32_t *ret_old);
void cq__recover_start(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit);
void cq__recover_apply(cq_core_t *c, uint32_t conn_id, uint32_t old_id, const char *pit);
void cq__recover_tick(cq_core_t *c, uint64_t now_ms);
/* This node became GLOBAL's home: a successor's possession of GLOBAL kept for it is given. */
void cq__recover_rehome(cq_core_t *c);
/* GLOBAL's RECOVERY_CHANNEL_DATA was queued for conn: its RECOVERY_END may follow. */
void cq__recover_global_sent(cq_core_t *c, cq_conn_t *conn);
void cq__recover_free_all(cq_core_t *c);
void cq__recov_handles_free(cq_shared_t *sh);
void cq__timed_add(cq_core_t *c, uint64_t due_ms, uint32_t kind, uint32_t conn_id,
                   uint32_t chan_id);

/* data.c */
int cq__data_attach(cq_core_t *c, cq_chan_t *ch);
void cq__data_detach(cq_core_t *c, cq_chan_t *ch);
/* Replaces the merge options of a channel whose data exists (GLOBAL re-possessed without new
 * data keeps its state); NULL changes nothing. */
void cq__data_set_merge_opts(cq_chan_t *ch, const Channeldpb__ChannelDataMergeOptions *mopts);
int cq__data_create(cq_core_t *c, cq_chan_t *ch, const Google__Protobuf__Any *data,
                    const Channeldpb__ChannelDataMergeOptions *mopts);
void cq__data_sub(cq_core_t *c, cq_chan_t *ch, const cq_sub_t *s);
void cq__data_unsub(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id);
void cq__handle_data_update(cq_core_t *c, cq_req_t *r);
bool cq__data_any(cq_chan_t *ch, Google__Protobuf__Any *ret);
/* The channel's merged state (borrowed; NULL before its data exists): pending updates are
 * merged into it first. */
cq_buf_t *cq__data_state(cq_chan_t *ch);
void cq__data_schema(cq_core_t *c, const cq_schema_t *schema);

/* inject.c: bridge events from a thread that is no worker (cq_shared_inject_*). A worker keeps
 * its authenticated CLIENT connections by PIT, so that a routed event finds them in one look-up;
 * a PIT may have several. */
typedef struct cq_pitconns {
    cq_conn_t **conns; /* this worker's clients authenticated with pit, in no order */
    uint32_t n, cap;
    char pit[]; /* the map's key */
} cq_pitconns_t;
/* A CLIENT's first successful AUTH (auth.c): indexed by its PIT. Returns 0 or -ENOMEM. */
int cq__inject_index(cq_core_t *c, cq_conn_t *conn);
/* The connection closes or is released: out of the index if it is in. Idempotent. */
void cq__inject_unindex(cq_core_t *c, cq_conn_t *conn);
/* XM_INJECT_BC and XM_INJECT_ROUTE on their worker. */
void cq__inject_bc(cq_core_t *c, const cq_xmsg_t *m);
void cq__inject_route(cq_core_t *c, const cq_xmsg_t *m);
/* cq_core_free: the index's entries (empty by then, as every connection was released). */
void cq__inject_free_all(cq_core_t *c);
/* XM_TOPIC_CHAN: in the directory, then on the channel's worker; u2 CQ_TOPIC_TOLD: the answer
 * for this node's bridge. */
#define CQ_TOPIC_TOLD 1u
void cq__topic_chan(cq_core_t *c, cq_xmsg_t *m);

/* resume.c (a bridge resume) */
void cq__handle_topic_resume(cq_core_t *c, cq_req_t *r);
void cq__handle_topic_ack(cq_core_t *c, cq_req_t *r);
/* XM_RESUME: on GLOBAL's worker, forwarded to the connection's; there, queued. */
void cq__resume_chunk(cq_core_t *c, cq_xmsg_t *m);
/* cq_core_flush: resuming connections with room ask for their next chunk. */
void cq__resume_flush(cq_core_t *c);
/* The connection closes or is released: its resume ends. Idempotent. */
void cq__resume_conn_closed(cq_core_t *c, cq_conn_t *conn);
/* Its first successful AUTH: with route bindings, its routed events are held and the bridge
 * asked for its catch-up. */
void cq__route_login(cq_core_t *c, cq_conn_t *conn);

/* sendmany.c */
typedef struct cq_sendmany {
    uint32_t *ids;   /* recipients */
    uint32_t *chans; /* the channel each record is of (to resync a recipient that is behind) */
    cq_buf_t **recs;
    uint32_t n, cap;
} cq_sendmany_t;
void cq__sendmany_add(cq_core_t *c, uint32_t chan_id, uint32_t conn_id, cq_buf_t *rec);
void cq__sendmany_resync(cq_core_t *c, const cq_xmsg_t *m);
void cq__sendmany_flush(cq_core_t *c);
void cq__sendmany_deliver(cq_core_t *c, const cq_xmsg_t *m);
void cq__sendmany_free(cq_core_t *c);

/* forward.c */
void cq__handle_user(cq_core_t *c, cq_req_t *r);
void cq__fanout(cq_core_t *c, cq_chan_t *ch, cq_buf_t *rec, uint32_t sender, uint32_t flags);
/* Delivers the open segment and releases every local list's fan-out buffer (the flush). */
void cq__fanbuf_release_all(cq_core_t *c);
/* Releases l's fan-out buffer (l is being freed; its segment was delivered). */
void cq__fanbuf_release(cq_lsubs_t *l);
/* Delivers the open segment to its recipients' queues. */
void cq__seg_deliver(cq_core_t *c);
/* Delivers the open segment, if any: before anything else is queued on this worker, and
 * before a local list or a connection changes, so each queue keeps the fan-out order. */
static inline void cq__seg_close(cq_core_t *c)
{
    if (c->seg.l)
        cq__seg_deliver(c);
}
void cq__local_fanout(cq_core_t *c, uint32_t chan_id, cq_buf_t *rec, uint32_t sender,
                      uint32_t owner, uint32_t flags);
/* XM_ADJACENT: delivers m->buf once to each local subscriber of the cells in m->body. */
void cq__adjacent_deliver(cq_core_t *c, const cq_xmsg_t *m);

#endif
