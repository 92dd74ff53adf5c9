/* cq_mqport.h - the durable-topic engine's store side: the store port, the engine's
 * construction from the store's topics, and its completion inbox. The composition root
 * (src/main) and the tests include it; the edge (src/io) does not, it sees cq_mqsrv.h only.
 *
 * The engine (cq_mqsrv_t) never names the store thread: it talks to a port, an ops table plus
 * its ud, with two entries:
 *   submit   hands one request (cq_writer_req_t) to the store; the request comes back later,
 *            filled in, through the engine's completion path;
 *   control  everything that is not a request, by op code: today the store thread's counters
 *            for /metrics.
 * cq_mqport_writer() is the port over one store thread (src/store/cq_writer). Ports that come
 * later plug in here without touching the engine: a shard router (submit picks the writer of a
 * topic's shard; control aggregates the shards' counters) and failover fencing (submit refuses
 * once this node's epoch is stale, and control carries the epoch changes). Tests plug in fakes.
 *
 * Threads: the engine calls both entries on its own thread (the MQ loop). A port must not call
 * back into the engine from submit or control: completions come back through
 * cq_mqsrv_complete() only, from any thread.
 *
 * Lifecycle, in the composition root:
 *   cq_writer_new(store, {.done = cq_mqsrv_complete}, &w, err, errlen)   the store thread
 *   s = cq_mqsrv_new({.port = cq_mqport_writer(w), ...})     the engine
 *   the edge runs s (cq_mqsrv_set_ops, input, drain, ...) and stops
 *   cq_writer_shutdown(w)   every queued request completes: produces commit, answers to closed
 *                           connections go nowhere, nothing acknowledged is lost
 *   cq_mqsrv_free(s)        runs what the inbox still holds, frees the engine
 *   cq_writer_free(w)
 */
#ifndef CQ_MQPORT_H
#define CQ_MQPORT_H

#include "cq_mqsrv.h"
#include "cq_writer.h"

/* control op codes. A port answers -ENOTSUP for an op it does not know. */
/* Hands over this server's role in its shard: master (writes allowed, subject to the fence),
 * the shard it serves and the epoch of that decision (logged). Any thread, like
 * cq_mqsrv_set_perms: applied at the engine's next cq_mqsrv_drain(), which this asks for. A
 * slave serves reads, polls its watched topics for rows that replication brought (every
 * CQ_MQSRV_POLL_MS) and reads the topic list again (every CQ_MQSRV_REFRESH_MS); becoming
 * master, it reads each topic's high water and count back before it accepts produces to it. */
void cq_mqsrv_set_role(cq_mqsrv_t *s, bool master, uint32_t shard, uint64_t epoch);

#define CQ_MQSRV_MASTER_ADDR_MAX 127 /* a master's seed address "host:port", without the NUL */

/* Hands over the shard's master as this server, a slave, knows it: its seed address adv
 * (borrowed for the call; cut at CQ_MQSRV_MASTER_ADDR_MAX), or NULL / "" when the shard has no
 * master (or this server is it). Any thread; applied at the next drain, like
 * cq_mqsrv_set_role. Only cq_mqsrv_opts_t.slave_reads_off uses it: while a slave knows a
 * master, its reads are answered CQ_EREADMASTER (read_on_master, err 20) naming adv. */
void cq_mqsrv_set_master(cq_mqsrv_t *s, const char *adv);

typedef enum cq_mqport_ctl {
    CQ_MQPORT_WRITER_STATS = 1, /* arg: cq_writer_stats_t *, filled in */
} cq_mqport_ctl_t;

typedef struct cq_mqport_ops {
    /* Hands req to the store. Returns 0 (req taken until it completes) or a negative code (not
     * taken): CQ_EBUSY (pending work over the limit: retry later), CQ_ELIMIT (a produce of more
     * messages than the pending limit: it never fits), CQ_ECLOSED (shut down), -EINVAL. */
    int (*submit)(void *ud, cq_writer_req_t *req);
    /* Runs op (cq_mqport_ctl_t) with arg (borrowed; its type is the op's). Returns 0, -ENOTSUP
     * or the op's error. NULL: every op is -ENOTSUP. */
    int (*control)(void *ud, int op, void *arg);
} cq_mqport_ops_t;

typedef struct cq_mqport {
    const cq_mqport_ops_t *ops; /* borrowed (static) */
    void *ud;                   /* the port's; borrowed, must outlive the engine */
} cq_mqport_t;

typedef struct cq_mqsrv_opts {
    cq_mq_limits_t limits;          /* zero fields take the codec defaults */
    const cq_mqperm_t *perms;       /* borrowed, must outlive the engine; NULL = all allowed */
    const cq_store_topic_t *topics; /* borrowed during cq_mqsrv_new: the topics at start */
    const uint64_t *high_water;     /* borrowed, ntopics entries or NULL: last offsets at start */
    const uint64_t *counts;         /* borrowed, ntopics entries or NULL: messages at start */
    size_t ntopics;
    cq_mqport_t port; /* where store requests go (required) */
    /* Queued bytes per connection: over the hard limit a connection is closed at once (0:
     * CQ_MQSRV_SENDQ_HARD_DFL); over the soft limit (0: none) for soft_seconds, at the next
     * cq_mqsrv_tick(). */
    size_t sendq_soft_limit, sendq_hard_limit;
    uint32_t sendq_soft_seconds;
    /* The per-address budget of failed authentications (seed connect, HTTP Authorization),
     * shared with the channel ports; borrowed, thread-safe, NULL for none. */
    struct cq_authlim *authlim;
    /* The HTTP API's Host names and allowed Origins, comma-separated (borrowed, must outlive
     * the engine). NULL hosts: CQ_MQHTTP_HOSTS_DFL; NULL or "" origins: none allowed. */
    const char *http_hosts, *http_origins;
    /* Before a successful connect a seed connection may send frames of at most preauth_frame
     * bytes (0: CQ_MQSRV_PREAUTH_FRAME_DFL; a larger one is answered bad_length and closed) and
     * hold at most CQ_MQSRV_PREAUTH_SENDQ unsent bytes. input_budget bounds the bytes of partial
     * frames all seed connections hold together (0: CQ_MQSRV_INPUT_BUDGET_DFL): the connection
     * whose bytes would go over it is answered busy and closed. */
    size_t preauth_frame, input_budget;
    /* The cluster (issue 11, doc/cluster.md). A write (produce, commit, add_topic that creates,
     * set online, retention) is accepted, and a produce acknowledged at its completion, only
     * while the server is master and may_write(fence_ud) returns true; otherwise the answer is
     * CQ_ENOTMASTER. may_write is called on the engine's thread, must be cheap and must not call
     * the engine (chanqd: atomic_load(ack_until) > monotonic ms). NULL: always true. shard is
     * sent in answers; slave starts the engine as a slave (cq_mqsrv_set_role makes it master);
     * false: master from the start (one server, today's behaviour). */
    bool (*may_write)(void *fence_ud);
    void *fence_ud;
    uint32_t shard;
    bool slave;
    /* --slave-reads off (the seed's standby, doc/cluster.md "Standby reads"): a slave answers
     * reads CQ_EREADMASTER while its shard has a master (cq_mqsrv_set_master). false: a slave
     * serves reads (the default). */
    bool slave_reads_off;
    /* The shard's epoch (the sink's events, cq_mqsrv_sink_position) until cq_mqsrv_set_role
     * gives one: a standalone server's store's creation time (cq_store_created_ms), so that a
     * store made anew is a new history. */
    uint64_t epoch;
    /* Cluster-wide topics (doc/cluster.md "Topics"): called on the engine's thread once the store
     * recorded a topic creation (err 0: not one that existed) or an online change made through
     * this engine (seed add_topic, HTTP create and online/offline, cq_mqsrv_topic_set_online),
     * never for what cq_mqsrv_topics_apply() caused. name is borrowed for the call. Must not
     * block and must not call the engine (chanqd: cq_coordrt_publish_topic, which queues).
     * NULL: nothing is told. */
    void (*on_topic)(void *topic_ud, const char *name, bool online, uint32_t retention_days);
    void *topic_ud;
    /* The bridge (doc/bridge.md): sink_wants(sink_ud, topic) says whether a topic's committed
     * messages also go to sink_event; asked on the engine's thread when the topic becomes known
     * and at cq_mqsrv_sink_refresh(). sink_event is then called with every committed message of
     * that topic once, in offset order, on the engine's thread, from the path the watchers'
     * pushes take (a catch-up from the store included, as a slave's polls): it must not block
     * and must not call the engine. NULL: no sink. */
    bool (*sink_wants)(void *sink_ud, const char *topic);
    void (*sink_event)(void *sink_ud, const cq_mqsrv_event_t *ev);
    void *sink_ud;
    /* The bridge's resume (doc/bridge.md "Resume"), on the engine's thread: sink_run at every
     * cq_mqsrv_drain() and cq_mqsrv_tick() (the sink's own queue, which cq_mqsrv_sink_poke
     * wakes the engine for); sink_rows with the rows a cq_mqsrv_sink_read asked for (recs
     * borrowed for the call; err < 0: the read failed). Both may call the cq_mqsrv_sink_*
     * functions. NULL: none. */
    void (*sink_run)(void *sink_ud, cq_mqsrv_t *s);
    void (*sink_rows)(void *sink_ud, cq_mqsrv_t *s, uint64_t tag, int err,
                      const cq_store_rec_t *recs, size_t n);
    /* The result of a cq_mqsrv_sink_get_offset (err -ENOENT: never committed) or
     * cq_mqsrv_sink_commit_offset (offset: the one committed), on the engine's thread. */
    void (*sink_offset)(void *sink_ud, cq_mqsrv_t *s, uint64_t tag, int err, uint64_t offset);
    /* The message at offset of topic (this shard's) was invalidated (state 0, stored): what the
     * sink keeps of it in memory (the bridge's rings) is dropped, so no resume delivers it
     * again. Engine thread. NULL: none. */
    void (*sink_invalidated)(void *sink_ud, cq_mqsrv_t *s, const char *topic, uint64_t offset);
} cq_mqsrv_opts_t;

/* The sink's reads (the bridge's resume): up to max rows of topic with offsets above from, in
 * offset order, read on the store's reader thread; sink_rows gets them with tag. Engine
 * thread. Returns 0, or an error (nothing was submitted: CQ_ENOTOPIC, CQ_EBUSY, -ENOMEM). */
int cq_mqsrv_sink_read(cq_mqsrv_t *s, const char *topic, uint64_t from, size_t max, uint64_t tag);
/* The sink's consumer offsets (the bridge's route positions, doc/bridge.md "Route bindings"):
 * consumer's offset in topic read, or offset committed for it, by the store's threads;
 * sink_offset gets the result with tag. A commit needs a writable engine (the shard's master)
 * and an offset not beyond the topic's last. Engine thread. Returns 0, or an error (nothing
 * was submitted: CQ_ENOTOPIC, CQ_ENOTMASTER, CQ_EOFFRANGE, -EINVAL for a consumer id the store
 * refuses, CQ_EBUSY, -ENOMEM). */
int cq_mqsrv_sink_get_offset(cq_mqsrv_t *s, const char *topic, const char *consumer, uint64_t tag);
int cq_mqsrv_sink_commit_offset(cq_mqsrv_t *s, const char *topic, const char *consumer,
                                uint64_t offset, uint64_t tag);
/* The shard's epoch and the last offset of topic handed to the sink (0: none; everything at or
 * below it was handed over or does not exist). Engine thread. false: an unknown topic. */
bool cq_mqsrv_sink_position(cq_mqsrv_t *s, const char *topic, uint64_t *epoch, uint64_t *pushed);
/* Asks the engine to drain soon (sink_run then runs). Any thread. */
void cq_mqsrv_sink_poke(cq_mqsrv_t *s);

/* Returns a new engine (owned; cq_mqsrv_free) or NULL on OOM / a port without submit. o is
 * borrowed. */
cq_mqsrv_t *cq_mqsrv_new(const cq_mqsrv_opts_t *o);
/* Frees the engine after running the completions still in its inbox. Every connection must have
 * been closed and the store must have completed every request the engine submitted (its
 * shutdown completes them). Accepts NULL; returns NULL. */
cq_mqsrv_t *cq_mqsrv_free(cq_mqsrv_t *s);

/* Replaces the permissions table (p taken, non-NULL) for every request that follows: the
 * engine swaps it in on its own thread at its next cq_mqsrv_drain(), which this call asks for
 * (ops->wake), and frees the table it replaces if it owned it (the one of the options is the
 * caller's). Any thread: a reload builds the table off the engine's thread and hands it over
 * under the inbox lock. */
void cq_mqsrv_set_perms(cq_mqsrv_t *s, cq_mqperm_t *p);

/* One topic as the cluster declares it (the registry of src/coord). */
typedef struct cq_mqsrv_topic_decl {
    char name[CQ_MQ_TOPIC_MAX + 1];
    bool online;
    uint32_t retention_days; /* for a creation */
} cq_mqsrv_topic_decl_t;

/* Declares the cluster's topics, t[0..n) (borrowed; copied): the whole list, which replaces the
 * previous one. Any thread, like cq_mqsrv_set_perms: applied at the engine's next
 * cq_mqsrv_drain(), which this asks for. While the engine may write, and once a new master has
 * read its topic list back, each declared topic that is new or changed since the last
 * declaration is made so in the store, as an admin would: missing from the cache -> created
 * (TOPIC_CREATE with its retention), online flag different -> set (TOPIC_SET_ONLINE). A slave
 * only keeps the declaration; becoming master it applies every declared topic again (a shard
 * whose master was down when the topic was added gets it then). Failures are tried again at the
 * tick, every CQ_MQSRV_REFRESH_MS. Nothing it causes reaches opts.on_topic (no loop). Topics
 * not declared are left alone. Returns 0 or -ENOMEM (the previous declaration stays). */
int cq_mqsrv_topics_apply(cq_mqsrv_t *s, const cq_mqsrv_topic_decl_t *t, size_t n);

/* Asks opts.sink_wants again for every known topic (the bindings changed). The engine's
 * thread. A topic that starts being sunk gets what commits from now on. */
void cq_mqsrv_sink_refresh(cq_mqsrv_t *s);
/* The same from any thread (a SIGHUP reload): the engine refreshes at its next drain, which
 * this asks for (ops->wake). */
void cq_mqsrv_sink_changed(cq_mqsrv_t *s);

/* The store's completion callback (cq_writer_opts_t.done): queues req (taken) on the inbox of
 * the engine that submitted it and wakes that engine's loop. ud is unused: each request carries
 * its engine, so one store may serve several engines. Any thread; never blocks on the engine. */
void cq_mqsrv_complete(void *ud, cq_writer_req_t *req);

/* The port over the store thread w (borrowed, must outlive every engine that uses the port):
 * submit is cq_writer_submit(), CQ_MQPORT_WRITER_STATS is cq_writer_stats(). Any thread. */
cq_mqport_t cq_mqport_writer(cq_writer_t *w);

#endif
