/* cq_coordrt.h - the coord runtime: runs a shard's role machine (cq_coord.h) on threads of its
 * own and carries out its actions against ZooKeeper and the database.
 *
 * Threads.
 *   - The runtime thread owns the machine. It waits on an inbox (mutex + condition variable: not
 *     a hot path) until an event arrives or cq_coord_next_deadline() is due, feeds the events and
 *     cq_coord_tick() in, then carries out the actions: ZooKeeper actions through the ZK ops
 *     (asynchronous: their results come back as events posted to the inbox from the library's
 *     completion thread), database actions handed to the db thread, ROLE actions through
 *     opts.on_role. After every round it publishes cq_coord_ack_until() as one atomic.
 *   - The db thread runs the blocking database actions (opts.db->run) one at a time, in order,
 *     and posts their results to the inbox, so the machine keeps processing ZooKeeper events
 *     (heartbeats, member changes) while a fence or a promotion waits.
 *   - The ZK library's threads call the sink (cq_coord_zk_sink_t.post). A session event other
 *     than CONNECTED zeroes ack_until there, AT ONCE, before it is queued: fencing never waits
 *     for the runtime thread.
 *
 * Fencing for the engine: acknowledge a write only while cq_coordrt_ack_until(rt) > now (the
 * same monotonic ms clock, cq_clock_mono_ms()).
 */
#ifndef CQ_COORDRT_H
#define CQ_COORDRT_H

#include "cq_coord.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The cluster-wide topic registry: /<root>/topics/<name>, data "online=0|1 retention=N". */
#define CQ_COORD_TOPIC_MAX 64 /* a topic name, without the NUL (the seed protocol's limit) */

typedef struct cq_coord_topic {
    char name[CQ_COORD_TOPIC_MAX + 1];
    bool online;
    uint64_t retention; /* as the engine defines it (0: none) */
} cq_coord_topic_t;

/* Topic data <-> text ("online=0|1 retention=N"). Parse returns 0 or CQ_EFIELD and leaves
 * ret->name alone. */
int cq_coord_topic_format(const cq_coord_topic_t *t, char *out, size_t outlen);
int cq_coord_topic_parse(const char *text, size_t len, cq_coord_topic_t *ret);

/* Where a ZK adapter sends what it learns. post() may be called from any thread, until the
 * adapter's close() returned; ev and what it points to are borrowed for the call. gen tells the
 * runtime which session the event belongs to (events of a closed session are dropped). */
typedef struct cq_coord_zk_sink {
    void (*post)(void *ud, uint64_t gen, const cq_coord_ev_t *ev);
    /* The topic registry (topics()): rc 0 and t[0..n) sorted by name (data that did not parse:
     * skipped), or rc < 0. */
    void (*topics)(void *ud, uint64_t gen, int rc, const cq_coord_topic_t *t, size_t n);
    /* The registry changed (a topic added, removed or rewritten): list it again. */
    void (*topics_changed)(void *ud, uint64_t gen);
    /* put_topic(name) done: rc. */
    void (*put_done)(void *ud, uint64_t gen, const char *name, int rc);
    void *ud;
    uint64_t gen;
} cq_coord_zk_sink_t;

typedef struct cq_coord_zk_conf {
    const char *hosts; /* "host:port,host:port,..." */
    const char *root;  /* "/chanq" */
    uint32_t shard;
    uint32_t session_ms; /* asked for; the negotiated one arrives with EV_SESSION */
} cq_coord_zk_conf_t;

/* ZooKeeper, as the runtime uses it. Every call is made on the runtime thread and must not block
 * (except close). An operation that returns 0 later posts exactly one completion event; one that
 * returns < 0 posts nothing, and the runtime posts its completion with that rc itself. */
typedef struct cq_coord_zk_ops {
    /* Opens a session (conf and sink are copied): EV_SESSION events follow. *ret_sess is owned
     * by the adapter until close(). */
    int (*connect)(void *ud, const cq_coord_zk_conf_t *conf, const cq_coord_zk_sink_t *sink,
                   void **ret_sess);
    /* Creates the persistent parents as needed, then our EPHEMERAL|SEQUENCE member node with
     * data text: EV_JOINED. */
    int (*join)(void *sess, const char *text);
    /* Lists the members with their data and watches the list: EV_MEMBERS, then at most one
     * EV_MEMBERS_CHANGED when the list changes. */
    int (*list)(void *sess);
    /* Reads the epoch node: EV_EPOCH, with is_ping and sent_ms copied in. */
    int (*read_epoch)(void *sess, bool is_ping, uint64_t sent_ms);
    /* Writes the epoch node if its version is still version (creates it when -1): EV_EPOCH_SET
     * with rc 0 or CQ_ECONFLICT. */
    int (*set_epoch)(void *sess, const char *text, int32_t version);
    /* Deletes our member node: EV_LEFT. */
    int (*leave)(void *sess);
    /* Lists the topic registry with each topic's data and watches the list and every topic:
     * sink.topics, then sink.topics_changed on a change. Creates /<root>/topics when missing. */
    int (*topics)(void *sess);
    /* Writes one topic's data (creating its node, and /<root>/topics, when missing; no version
     * check: the last writer wins): sink.put_done. */
    int (*put_topic)(void *sess, const char *name, const char *text);
    /* Closes the session (its ephemeral node goes at once when the ensemble is reachable) and
     * frees sess. Blocks until the adapter's threads no longer call the sink. Accepts NULL. */
    void (*close)(void *sess);
} cq_coord_zk_ops_t;

/* The database control, given by the composition root (src/store/mysql_repl.c over MariaDB).
 * run() is called on the db thread only and may block: it carries out one CQ_COORD_ACT_DB_*
 * action and returns 0 or a negative code. *ret arrives as {type EV_DB, arg = a->type}; run()
 * fills db_replica and db_read_only for DB_PROBE. The runtime copies the return value to rc. */
typedef struct cq_coord_db_ops {
    int (*run)(void *ud, const cq_coord_act_t *a, cq_coord_ev_t *ret);
} cq_coord_db_ops_t;

/* Called on the runtime thread for each ROLE action: role, epoch and the master's member (NULL
 * when there is none; borrowed for the call); and, while the role is SLAVE, again whenever the
 * shard's master changes (another member, or none), with the same role and epoch. Must not
 * block and must not call cq_coordrt_stop(). */
typedef void (*cq_coordrt_role_fn)(void *ud, cq_coord_role_t role, uint64_t epoch,
                                   const cq_coord_member_t *master);

/* Called on the runtime thread with the whole topic registry (borrowed for the call; sorted by
 * name) once the session is connected and after every change. Must not block. */
typedef void (*cq_coordrt_topics_fn)(void *ud, const cq_coord_topic_t *t, size_t n);

typedef struct cq_coordrt_opts {
    cq_coord_opts_t coord;       /* shard, adv, db, session_ms, ...: borrowed during start */
    const char *zk_hosts;        /* borrowed during start */
    const char *zk_root;         /* NULL: "/chanq"; borrowed during start */
    const cq_coord_zk_ops_t *zk; /* required; borrowed for the runtime's life */
    void *zk_ud;
    /* NULL: no database control; every DB action succeeds at once (a primary, writable). */
    const cq_coord_db_ops_t *db; /* borrowed for the runtime's life */
    void *db_ud;
    cq_coordrt_role_fn on_role; /* may be NULL */
    void *role_ud;
    /* NULL: the registry is not watched (cq_coordrt_publish_topic() still writes). */
    cq_coordrt_topics_fn on_topics;
    void *topics_ud;
} cq_coordrt_opts_t;

enum { CQ_COORDRT_SESS_NONE = 0 }; /* else CQ_COORD_SESS_* */

typedef struct cq_coordrt_stats {
    cq_coord_role_t role;
    uint64_t epoch;
    int session;                 /* CQ_COORDRT_SESS_NONE or CQ_COORD_SESS_* (the last seen) */
    uint64_t lease_remaining_ms; /* ack_until - now, or 0 */
    uint64_t elections;          /* times this member became MASTER */
    uint64_t fences;             /* DB_FENCE actions completed */
    uint64_t sessions;           /* sessions opened (1 + reconnects) */
    uint64_t member_changes;     /* member lists received */
    uint64_t topics;             /* topics in the last registry listing */
} cq_coordrt_stats_t;

typedef struct cq_coordrt cq_coordrt_t;

/* Starts the runtime (its threads, then the first session). *ret is owned: cq_coordrt_stop().
 * Returns 0, -EINVAL (no zk ops or hosts; the machine refused its options: an address that is
 * not host:port), -ENOMEM, or the connect's error. */
int cq_coordrt_start(const cq_coordrt_opts_t *o, cq_coordrt_t **ret);
/* Zeroes ack_until, closes the session (our member node goes at once), joins the threads (a
 * database action in progress is waited for) and frees rt. No callback runs after it returns.
 * Accepts NULL. Not from a callback. */
void cq_coordrt_stop(cq_coordrt_t *rt);

/* Publishes a topic to the registry (any thread). The runtime thread writes it once the session
 * is connected, and again after a failure (200 ms later) until it is written; publishes of one
 * name are written in order. Returns 0, -EINVAL (name not 1..64 of [A-Za-z0-9_]) or -ENOMEM. */
int cq_coordrt_publish_topic(cq_coordrt_t *rt, const cq_coord_topic_t *t);

/* The last moment (monotonic ms) at which this member may acknowledge a write; 0 when it may
 * not. Any thread, lock-free. */
uint64_t cq_coordrt_ack_until(const cq_coordrt_t *rt);
/* Copies up to n members of the last member list (sorted by seq) into out; returns how many
 * the list holds. Any thread. */
size_t cq_coordrt_members(cq_coordrt_t *rt, cq_coord_member_t *out, size_t n);
/* A snapshot for /metrics. Any thread. */
void cq_coordrt_stats(const cq_coordrt_t *rt, cq_coordrt_stats_t *ret);

#endif
