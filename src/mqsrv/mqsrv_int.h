/* mqsrv_int.h - internals shared by the files of the mqsrv module. Engine thread only.
 *
 * The module in layers, top to bottom:
 *   front ends   handlers.c (seed protocol), http.c (HTTP API): decode a request, call the
 *                operation layer, encode its answer; nothing else
 *   operations   ops.c: produce, consume, commit, offset, create, set_online and the topics
 *                list; the permission, topic and clamp policy; submission and completions
 *   engine       cq_mqsrv.c: the topic cache, seed connections and their frames, pushes;
 *                role.c: the cluster (fence, role, a slave's polls, a new master's reload)
 *   store        the port (cq_mqport.h, writer_port.c) and the completions that come back
 */
#ifndef CQ_MQSRV_INT_H
#define CQ_MQSRV_INT_H

#include "cq_list.h"
#include "cq_mpsc.h"
#include "cq_mqhttp.h"
#include "cq_mqport.h"
#include "cq_sbuf.h"
#include "cq_smap.h"

#include <pthread.h>

/* A consumer's last known committed offset (metrics only). */
typedef struct mq_consumer {
    char id[CQ_STORE_CONSUMER_MAX + 1];
    uint64_t offset;
} mq_consumer_t;

typedef struct mq_hole mq_hole_t; /* holes.c */

typedef struct mq_topic {
    char name[CQ_MQ_TOPIC_MAX + 1]; /* as the store spells it */
    bool online;
    bool purging; /* a retention purge is in flight */
    int retention_days;
    /* The manager's retention (cq_mqsrv_topic_set_retention) in seconds, 0 = keep forever;
     * in force instead of retention_days while retention_managed. */
    bool retention_managed;
    uint64_t retention_s;
    uint64_t last_offset; /* highest offset known committed (completions, the store) */
    /* Pushes follow the store's log, not this process's acknowledgements alone: watchers have
     * been sent every message up to pushed. A completion that shows rows committed above
     * pushed without their answer (prev_offset, cq_writer.h) switches the topic to catching
     * up: the rows up to catchup_to are read back from the store, in order, and pushed. */
    uint64_t pushed;
    uint64_t catchup_to;        /* 0: not catching up */
    bool catchup_reading;       /* a catch-up READ is in flight */
    uint64_t read_upto;         /* last_offset when that READ was submitted: all it surely sees */
    uint64_t count;             /* messages in the topic: the seed's topic_message_total */
    uint64_t read_offset;       /* highest offset a consume returned (a read may see a commit
                                 * before its produce completion reached the engine) */
    cq_mqsrv_conn_t **watchers; /* borrowed; a connection removes itself when it closes */
    size_t nwatchers, watchers_cap;
    bool sunk; /* the sink takes its messages too (opts.sink_wants): watched like a watcher */
    cq_mq_msg_t *push; /* owned: messages waiting for the next push, or NULL */
    /* The cluster (role.c). hw_reading: a HIGH_WATER or TOPIC_STATS is in flight. reload: this
     * server became master and has not yet read the topic's high water and count back (they
     * moved by replication): its produces are answered busy until it has. hw_unknown: learnt
     * from a topic refresh, pushed not yet set to its high water (nothing is polled). */
    bool hw_reading, reload, hw_unknown;
    /* metrics (metrics.c) */
    uint64_t produced;        /* messages acknowledged since start */
    uint64_t pending;         /* messages of produces submitted and not yet completed */
    uint64_t purged;          /* rows removed by retention since start */
    mq_consumer_t *consumers; /* owned: offsets seen in commits and offset reads since start */
    size_t nconsumers, consumers_cap;
    mq_hole_t *holes; /* owned: retryable holes, sorted (holes.c) */
    size_t nholes, holes_cap;
} mq_topic_t;

struct cq_mqsrv {
    cq_mq_limits_t lim;
    const cq_mqperm_t *perms;   /* in force: the one of the options, or perms_owned */
    cq_mqperm_t *perms_owned;   /* a table reloaded by cq_mqsrv_set_perms, or NULL */
    cq_mqperm_t *perms_next;    /* under inbox_mu: handed over, swapped in by the next drain */
    bool perms_handed;          /* under inbox_mu: perms_next is waiting */
    struct cq_authlim *authlim; /* borrowed: per-address failure budget, or NULL */
    const char *http_hosts, *http_origins; /* borrowed: the HTTP API's Host and Origin lists */
    cq_mqport_t port;
    /* The completion inbox: the store's threads push, the engine's thread drains. The mutex
     * orders ops->wake with cq_mqsrv_set_ops(); nothing else takes it. */
    cq_mpsc_t inbox;
    pthread_mutex_t inbox_mu;
    const cq_mqsrv_ops_t *ops; /* under inbox_mu */
    void *ops_ud;              /* under inbox_mu */
    cq_list_t pending;         /* mq_link_t with queued output, written by cq_mqsrv_flush() */
    cq_list_t soft;            /* mq_link_t over the soft limit of queued bytes */
    size_t sendq_soft, sendq_hard;
    uint32_t sendq_soft_s;
    size_t preauth_frame, input_budget; /* see cq_mqsrv_opts_t */
    mq_topic_t **topics; /* owned, in the order they became known (lists and metrics) */
    size_t ntopics, topics_cap;
    cq_smap_t topic_idx; /* name (ASCII case folded, as the store compares) -> mq_topic_t */
    int64_t now_ms;
    uint64_t next_conn_id;
    /* The cluster (role.c). Fencing: writes are acknowledged only while writable (master and
     * may_write). role_next*: under inbox_mu, handed over by cq_mqsrv_set_role(). */
    bool (*may_write)(void *ud);
    void *fence_ud;
    bool master;
    uint32_t shard;
    uint64_t epoch;
    bool role_handed, role_next_master;
    uint32_t role_next_shard;
    uint64_t role_next_epoch;
    /* The standby read policy (--slave-reads, role.c): with slave_reads_off a slave refuses
     * reads while master_adv (the shard's master, "" when it has none) is set; read_why is
     * their err_msg. master_next*: under inbox_mu, handed over by cq_mqsrv_set_master(). */
    bool slave_reads_off;
    char master_adv[CQ_MQSRV_MASTER_ADDR_MAX + 1];
    char read_why[CQ_MQSRV_MASTER_ADDR_MAX + 128];
    bool master_handed;
    char master_next[CQ_MQSRV_MASTER_ADDR_MAX + 1];
    bool listing;                            /* a TOPIC_LIST is in flight */
    bool reload_list;                        /* became master: the topic list is to be read again */
    uint64_t poll_ms, refresh_ms, health_ms; /* monotonic ms of the last slave poll, topic
                                              * refresh and commit latency sample */
    uint64_t health_txns, health_us;         /* writer counters at the last sample */
    uint64_t commit_us_recent; /* mean commit time over the last sample period, 0: none */
    bool offline;              /* the manager took this server out of service (produces err 19) */
    size_t inflight;  /* store requests submitted and not yet completed (shutdown waits for 0) */
    uint64_t tick_ms; /* the last tick's monotonic ms (0: none yet): holes expire by it */
    cq_mqsrv_stats_t st;
    /* Cluster-wide topics (topics.c). decls: the last declaration, in force; decl_next*: under
     * inbox_mu, handed over by cq_mqsrv_topics_apply(). decl_dirty: a pass is due (some decl is
     * pending); decl_failed: a pass or a request failed, tried again at the tick. */
    void (*on_topic)(void *ud, const char *name, bool online, uint32_t retention_days);
    void *topic_ud;
    bool (*sink_wants)(void *ud, const char *topic);
    void (*sink_event)(void *ud, const cq_mqsrv_event_t *ev);
    void *sink_ud;
    void (*sink_run)(void *ud, cq_mqsrv_t *s);
    void (*sink_offset)(void *ud, cq_mqsrv_t *s, uint64_t tag, int err, uint64_t offset);
    void (*sink_rows)(void *ud, cq_mqsrv_t *s, uint64_t tag, int err, const cq_store_rec_t *recs,
                      size_t n);
    void (*sink_invalidated)(void *ud, cq_mqsrv_t *s, const char *topic, uint64_t offset);
    /* The manager link's (mgrlink.c), while it lives: the answer to its invalidate command,
     * tag its askid; why is the error's text (NULL when err is 0). */
    void (*mgr_invalidated)(void *ud, uint64_t tag, int err, const char *why);
    /* ... and to its message lookup (command 4): req the completed READ_ONE (borrowed). */
    void (*mgr_message)(void *ud, uint64_t tag, const cq_writer_req_t *req, int err);
    void *mgr_ud;
    bool sink_handed;      /* under inbox_mu: cq_mqsrv_sink_changed() asked for a refresh */
    struct mq_decl *decls; /* owned */
    size_t ndecls;
    bool decl_dirty, decl_failed;
    uint64_t decl_ms;                 /* monotonic ms of the last retry */
    cq_mqsrv_topic_decl_t *decl_next; /* owned, under inbox_mu */
    size_t decl_next_n;
    bool decl_handed;
};

/* ---- links: what seed and HTTP connections share ------------------------------------------ */

typedef struct mq_link mq_link_t;

/* The outcome of a completed store request, as the operation layer settled it for the answer. */
typedef struct mq_result {
    int err;              /* 0, or the code to answer */
    bool created;         /* TOPIC_CREATE: false when the topic existed already */
    bool committed;       /* GET_OFFSET: false when the consumer never committed (offset 0) */
    uint64_t offset;      /* COMMIT_OFFSET: stored; GET_OFFSET: read (0 when never committed) */
    uint64_t last_offset; /* GET_OFFSET: the topic's last offset at completion */
} mq_result_t;

/* A front end's side of its links. */
typedef struct mq_fe {
    /* Answers the completed req (borrowed; the front end may move record contents out of it)
     * with res, on l, and takes ctx (the front end's answer context given at submission, may be
     * NULL). l may be dead (the edge closed it): then nothing is sent, ctx is freed. */
    void (*done)(mq_link_t *l, cq_writer_req_t *req, const mq_result_t *res, void *ctx);
    /* Frees the connection l is the first member of (dead, nothing in flight). */
    void (*free)(mq_link_t *l);
} mq_fe_t;

/* The first member of cq_mqsrv_conn_t and cq_mqhttp_conn_t (link.c). */
struct mq_link {
    cq_mqsrv_t *s;
    const mq_fe_t *fe;
    const cq_mqsrv_conn_ops_t *ops; /* the edge's */
    void *ud;                       /* the edge's */
    cq_sendq_t sendq;               /* frames queued by reference, written by the edge */
    cq_list_t pending_node;         /* in s->pending while the edge has something to write */
    cq_list_t soft_node;            /* in s->soft while over the soft limit */
    uint32_t module_id;             /* who asks (seed: after connect; HTTP: per request) */
    char peer[64];                  /* the peer's address (ops->t.peer at init), or "?" */
    bool peer_loopback;             /* peer is a loopback address: writes need no permissions */
    size_t inflight;                /* store requests submitted and not yet completed */
    size_t hard_limit;              /* unsent bytes that close it; 0: the engine's sendq_hard */
    bool closing;                   /* close or abort was called: nothing more is sent */
    bool dead;                      /* the edge closed it: ops are gone */
};

void cq__mq_link_init(mq_link_t *l, cq_mqsrv_t *s, const mq_fe_t *fe,
                      const cq_mqsrv_conn_ops_t *ops, void *ud);
/* Queues b (the caller's reference, taken) on l and marks l pending. Over the hard limit l is
 * closed at once as a slow consumer. Returns 0, CQ_ECLOSED (l is closing), CQ_ESLOW or
 * -ENOMEM (then l is closing). */
int cq__mq_link_send(mq_link_t *l, cq_buf_t *b);
/* Asks the edge to close l once what is queued is written (idempotent). */
void cq__mq_link_close(mq_link_t *l);
/* The edge closed l: its ops are gone, its queue is dropped. */
void cq__mq_link_dead(mq_link_t *l);
/* Frees l's connection once the edge closed it and no store request refers to it. */
void cq__mq_link_put(mq_link_t *l);

struct cq_mqsrv_conn {
    mq_link_t l;
    cq_sbuf_t in; /* bytes of an incomplete frame */
    uint64_t id;
    uint32_t client_type;
    uint32_t registered, watching; /* topic_nums of add_topic / watch responses */
    uint64_t frames;               /* whole frames received */
    bool authed;
};

/* An HTTP API connection (http.c). At most one store request in flight. */
struct cq_mqhttp_conn {
    mq_link_t l;
    cq_sbuf_t in;     /* received bytes not yet handled (pipelined requests included) */
    bool busy;        /* a request waits for its store completion: parse nothing more */
    bool keep_alive;  /* of the request being answered */
    bool gated;       /* the head at the start of in passed the checks before the body */
    uint64_t discard; /* body bytes of a request refused before its body, still to skip */
};

/* ---- the operation layer (ops.c) ------------------------------------------------------------
 * Protocol-neutral: the inputs are who asks (a link's module), a topic name, counts, offsets;
 * the outputs are 0 or a chanq code, and at completion an mq_result_t. The checks are separate
 * calls because each protocol answers its errors in its own order (the HTTP API refuses a
 * non-admin before reading the body, the seed protocol registers an existing topic without
 * the admin right); each submission applies the policy that has no order: defaults, clamps,
 * times, the in-flight limit and the store's refusals.
 *
 * Submissions return 0 (the answer comes from the completion, through l->fe->done) or a code
 * to answer at once with *ret_why, its text: "too many requests in flight on this connection"
 * or cq_strerror(code). ctx (the front end's answer context) is taken only on success; a
 * request given to a submission is taken either way. */

/* Writes (create, produce, commit, set_online) from l: 0, or CQ_EACL with *ret_why when no
 * permissions file is configured and l's peer is not a loopback address. */
int cq__mqop_may_write(const mq_link_t *l, const char **ret_why);
/* A read (consume, offset, topics, watch, add_topic of an existing topic): 0, or
 * CQ_EREADMASTER on a slave with --slave-reads off while its shard has a master, with *ret_why
 * naming it ("... master=HOST:PORT"; borrowed from s, valid until the next drain). */
int cq__mqop_may_read(cq_mqsrv_t *s, const char **ret_why);
/* True when module may use topic for right (any topic for CQ_MQPERM_ADMIN). */
bool cq__mqop_may(const cq_mqsrv_t *s, uint32_t module_id, cq_mqperm_right_t right,
                  const char *topic);
/* True when module may see topic: admin, or the produce or consume right on it. */
bool cq__mqop_may_see(const cq_mqsrv_t *s, uint32_t module_id, const char *topic);
/* The topic check of produce, consume, commit, offset and watch, in this order: right on name
 * (CQ_EACL), the topic exists (CQ_ENOTOPIC), and with need_online it is online (CQ_EOFFLINE).
 * Returns 0 with *ret_t; *ret_t is also set with CQ_EOFFLINE (answers name the store's
 * spelling or the client's, as each protocol did). */
int cq__mqop_topic(const cq_mqsrv_t *s, uint32_t module_id, cq_mqperm_right_t right,
                   const char *name, bool need_online, mq_topic_t **ret_t);

/* produce: req is a PRODUCE on t's name holding the messages (taken). */
int cq__mqop_produce(mq_link_t *l, cq_writer_req_t *req, void *ctx, const char **ret_why);
/* consume: reads after from; at most max (CQ_MQSRV_CONSUME_DFL without has_max), capped at the
 * batch limit and CQ_WRITER_READ_MAX, at least 1. */
int cq__mqop_consume(mq_link_t *l, const mq_topic_t *t, uint64_t from, bool has_max, uint64_t max,
                     void *ctx, const char **ret_why);
/* The bytes of items a consume answer may hold (seed or HTTP): the frame maximum less the
 * answer's own fields (CQ_MQ_ANSWER_HEAD_MAX). Consume reads at most this many content bytes and
 * the front ends trim the answer's messages to it, encoded. */
size_t cq__mqop_reply_budget(const cq_mqsrv_t *s);
/* commit (store consumer's offset) or, with commit false, offset (read it back). */
int cq__mqop_offset(mq_link_t *l, const mq_topic_t *t, const char *consumer, bool commit,
                    uint64_t offset, void *ctx, const char **ret_why);
/* invalidate: sets the message at offset of t to state 0 (never delivered again) on this
 * shard's master, for l (an admin's request: the caller checked the right; answered through
 * l's front end) or, l NULL, the manager's command (answered through s->mgr_invalidated with
 * tag). CQ_ENOTMASTER on a slave, CQ_EOFFRANGE for offset 0; at completion CQ_ENOMSG when no
 * message is stored there. */
int cq__mqop_invalidate(cq_mqsrv_t *s, mq_link_t *l, const mq_topic_t *t, uint64_t offset,
                        uint64_t tag, const char **ret_why);
/* The manager's lookup of the message at offset of t (command 4), whatever its state and on any
 * role (an operator's read; on a shard with a standby the manager asks the standby): a READ_ONE
 * answered through s->mgr_message with tag. 0 or the submit error. */
int cq__mqop_read_one(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t offset, uint64_t tag,
                      const char **ret_why);
/* The same by producer key (producer_id >= 1, seq) instead of an offset. */
int cq__mqop_read_key(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t producer_id, uint64_t seq,
                      uint64_t tag, const char **ret_why);
/* The engine's own creation of topic (the manager's configuration names it; the master has
 * not got it): online, retention_days (< 0: the store's default). 0 or the submit error. */
int cq__mqop_create_own(cq_mqsrv_t *s, const char *topic, int retention_days);
/* create: topic (client's spelling) with retention_days (< 0: CQ_STORE_DEFAULT_RETENTION, the
 * seed's 30 days) for module_id, which must have the admin right (else CQ_EACL, nothing
 * submitted); the cache learns it at completion. */
int cq__mqop_create(mq_link_t *l, uint32_t module_id, const char *topic, int retention_days,
                    void *ctx, const char **ret_why);
/* set_online: for l, or for no one (l NULL: the engine's own). The cache follows at completion.
 * CQ_ENOTOPIC when the topic is not known. */
int cq__mqop_set_online(cq_mqsrv_t *s, mq_link_t *l, const char *topic, bool online,
                        const char **ret_why);
/* The topics list, returned owned (cq_free; NULL when *ret_n is 0): with visible_to_module,
 * the ones module may see, sorted by name (ASCII case-insensitive), at most CQ_MQ_TOPICS_MAX;
 * otherwise every topic in cache order. -ENOMEM. */
int cq__mqop_topics(const cq_mqsrv_t *s, bool visible_to_module, uint32_t module_id,
                    mq_topic_t ***ret_v, size_t *ret_n);
/* Submits the engine's own request req (taken): 0 or the submit error. */
int cq__mqop_submit_own(cq_mqsrv_t *s, cq_writer_req_t *req);
/* The same for a request of the cluster's declaration (topics.c): its completion goes to
 * cq__mqsrv_decl_done(), never to opts.on_topic. */
int cq__mqop_submit_decl(cq_mqsrv_t *s, cq_writer_req_t *req);
/* The engine's own READ of up to max messages of t after from (catching watchers up). */
int cq__mqop_read_log(cq_mqsrv_t *s, const mq_topic_t *t, uint64_t from, size_t max);
/* retention: one purge per topic with a retention and none in flight. */
void cq__mqop_retention(cq_mqsrv_t *s, int64_t now_unix_ms);
/* A submitted request came back (taken): metrics, the engine's side (cache, pushes, purges),
 * then the answer through its link's front end. */
void cq__mqop_complete(cq_mqsrv_t *s, cq_writer_req_t *req);
/* The text that explains err, the code a completed req is answered with: cq_strerror(err), and
 * for CQ_ESTORE the store's own text (req->errmsg) after it, with every quoted part ('...',
 * "...", `...`) replaced by '?': the database error's kind stays ("Table '?' doesn't exist",
 * "Lost connection to server"), the names, values, user names and hosts it quotes do not.
 * For CQ_ESEQCONFLICT and CQ_ESEQORDER the store's text (which message, which seq) follows as
 * it is: it is chanq's, not the database's. Returns buf. */
const char *cq__mqop_err_text(const cq_writer_req_t *req, int err, char *buf, size_t len);
/* What a failed produce's answer says after the error's text, once: what was (not) done and what
 * the producer does now (retry with the same keys after a storage error; new seqs after
 * sequence_out_of_order). Static text. */
const char *cq__mqop_produce_advice(int err);
/* The engine that submitted req (any thread: read-only after submission). */
cq_mqsrv_t *cq__mqop_engine(const cq_writer_req_t *req);

/* ---- the engine (cq_mqsrv.c) ---------------------------------------------------------------- */

mq_topic_t *cq__mqsrv_topic(const cq_mqsrv_t *s, const char *name);
mq_topic_t *cq__mqsrv_topic_add(cq_mqsrv_t *s, const char *name, bool online, int retention);
/* Encodes and sends m (taken) on c. */
void cq__mqsrv_send(cq_mqsrv_conn_t *c, cq_mq_msg_t *m);
/* Answers req (borrowed) on c with err (0 or a code) and an optional message. */
void cq__mqsrv_reply(cq_mqsrv_conn_t *c, const cq_mq_msg_t *req, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool cq__mqsrv_watch(mq_topic_t *t, cq_mqsrv_conn_t *c, bool on);
/* t's committed messages go somewhere: a watcher, or the sink. */
static inline bool cq__mqsrv_watched(const mq_topic_t *t)
{
    return t->nwatchers || t->sunk;
}
/* The seed front end's mq_fe_t.free. */
void cq__mqsrv_conn_free(mq_link_t *l);
void cq__mqsrv_close(cq_mqsrv_conn_t *c);
/* A produce committed (err 0): counters, high water and pushes to the topic's watchers. */
void cq__mqsrv_produced(cq_mqsrv_t *s, const cq_writer_req_t *req);
/* The message at offset of topic is invalid now: the sink drops it (sink_invalidated). */
void cq__mqsrv_invalidated(cq_mqsrv_t *s, const char *topic, uint64_t offset);
/* A catch-up READ of t came back: its messages go to t's watchers. */
void cq__mqsrv_log_read(cq_mqsrv_t *s, mq_topic_t *t, const cq_writer_req_t *req);
/* A slave's poll of t: reads the rows after t->pushed (nothing when a read is in flight). */
void cq__mqsrv_poll(cq_mqsrv_t *s, mq_topic_t *t);
/* The tick: restarts the catch-up of every topic whose catch-up read failed or could not be
 * submitted, so its watchers don't wait for the topic's next produce. */
void cq__mqsrv_catchup_retry(cq_mqsrv_t *s);
/* Sets it's idempotence key from a stored message's (none when producer_id is 0, or when a key
 * is beyond 2^53 - 1: the wire cannot carry it). */
void cq__mqsrv_item_key(cq_mq_item_t *it, uint64_t producer_id, uint64_t seq);
/* Sends the pushes queued by completions. */
void cq__mqsrv_flush_pushes(cq_mqsrv_t *s);

/* ---- retryable holes (holes.c) -------------------------------------------------------------- */

/* A produce req (borrowed) of t (NULL: nothing) was refused with err without being stored, or
 * with its commit's answer lost: when err's answer tells the producer to retry with the same
 * keys (storage, internal, busy, not_master, server_offline), those keys become holes of t. */
void cq__mqsrv_holes_refused(cq_mqsrv_t *s, mq_topic_t *t, const cq_writer_req_t *req, int err);
/* Before req (a produce of t) goes to the store: marks its messages whose keys are holes of t
 * (cq_store_msg_t.hole), which the store then accepts below the producer's last stored seq. */
void cq__mqsrv_holes_mark(const mq_topic_t *t, cq_writer_req_t *req);
/* The tick: stamps new holes and forgets those refused CQ_MQSRV_HOLE_TTL_MS ago. */
void cq__mqsrv_holes_tick(cq_mqsrv_t *s, uint64_t now_ms);

/* ---- the cluster (role.c) ----------------------------------------------------------------- */

/* True when this server may acknowledge writes now: master and its fence allows it. */
bool cq__mqsrv_writable(const cq_mqsrv_t *s);
/* A role handed over by cq_mqsrv_set_role() takes effect (drain). */
void cq__mqsrv_role_swap(cq_mqsrv_t *s);
/* Whether this server refuses reads now: a slave with --slave-reads off that knows its shard's
 * master (cq_mqsrv_set_master). */
bool cq__mqsrv_refuses_reads(const cq_mqsrv_t *s);
/* The tick's cluster work: a slave polls its watched topics and refreshes its topics; a new
 * master retries its reload; the commit latency is sampled for the weight. */
void cq__mqsrv_role_tick(cq_mqsrv_t *s, uint64_t now_ms);
/* The engine's own TOPIC_LIST, HIGH_WATER and TOPIC_STATS came back (t: the topic or NULL). */
void cq__mqsrv_role_done(cq_mqsrv_t *s, const cq_writer_req_t *req, mq_topic_t *t);
/* The keepalive weight (doc/protocol-mq.md): 0 when not writable. */
uint32_t cq__mqsrv_weight(const cq_mqsrv_t *s);
/* Sets the cluster fields m's type carries: shard, and master on connect and keepalive. */
void cq__mqsrv_stamp(const cq_mqsrv_t *s, cq_mq_msg_t *m);

/* ---- cluster-wide topics (topics.c) --------------------------------------------------------- */

/* A declaration handed over by cq_mqsrv_topics_apply() takes effect (drain). */
void cq__mqsrv_decl_swap(cq_mqsrv_t *s);
/* Submits what the pending declared topics need, when the engine may write (drain, tick). */
void cq__mqsrv_decl_pass(cq_mqsrv_t *s);
/* The tick: failed declared topics are tried again every CQ_MQSRV_REFRESH_MS. */
void cq__mqsrv_decl_tick(cq_mqsrv_t *s, uint64_t now_ms);
/* Became master: every declared topic is applied again. */
void cq__mqsrv_decl_all(cq_mqsrv_t *s);
/* A request of the declaration (cq__mqop_submit_decl) completed: req borrowed. */
void cq__mqsrv_decl_done(cq_mqsrv_t *s, const cq_writer_req_t *req);
/* Any other TOPIC_CREATE or TOPIC_SET_ONLINE completed (after the cache took it; t: the topic
 * or NULL): the creation or change goes to opts.on_topic. */
void cq__mqsrv_topic_changed(cq_mqsrv_t *s, const cq_writer_req_t *req, const mq_topic_t *t);
/* Frees the declarations (cq_mqsrv_free). */
void cq__mqsrv_decl_free(cq_mqsrv_t *s);

/* ---- the seed front end (handlers.c) -------------------------------------------------------- */

extern const mq_fe_t cq__mqsrv_fe;
/* Handles one decoded request m (taken) on c. */
void cq__mqsrv_dispatch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m);

/* ---- the HTTP front end (http.c) ------------------------------------------------------------ */

extern const mq_fe_t cq__mqhttp_fe;

/* ---- metrics (metrics.c) -------------------------------------------------------------------- */

/* Counts a request going to the store (pending produce messages). */
void cq__mqsrv_metrics_submitted(cq_mqsrv_t *s, const cq_writer_req_t *req);
/* Counts a completed store request: pending, purged rows, consumer offsets. */
void cq__mqsrv_metrics_completed(cq_mqsrv_t *s, const cq_writer_req_t *req);

#endif
