/* cq_coord.h - a shard's roles and fencing, as a sans-I/O state machine.
 *
 * Each chanqd of shard N is a member of ZooKeeper's /<root>/shards/N/members: an EPHEMERAL |
 * SEQUENCE node whose data describes it (cq_coord_member_t, text "v1 adv=H:P db=H:P elig=0|1").
 * The eligible member with the lowest sequence number is the master; the others are slaves.
 * Every change of master increments the shard's epoch, a persistent node /<root>/shards/N/epoch
 * whose data is "E seq db" (epoch, the master's member sequence, the master's database), written
 * with a version check (compare-and-set) by the member that becomes master.
 *
 * The machine does no I/O and reads no clock: events and `now` (a monotonic clock in ms) go in,
 * actions come out. The runtime (cq_coordrt.h) owns the ZooKeeper session and the database
 * control connection, turns their results into events, and carries out the actions.
 *
 * Fencing, the rule this module exists for: a master may acknowledge a write only while
 * cq_coord_may_ack(now) is true. That needs all of:
 *   - the machine is MASTER (epoch written by us, own database writable);
 *   - the session is connected: CONNECTING (the client lost the server) ends it at once;
 *   - the lease: now < sent + session_ms / 2, where sent is when the last heartbeat that came
 *     back was sent (the now at which the machine queued it). The ensemble expires a session no
 * sooner than about 2/3 of its timeout after the client's last contact, and every contact is later
 * than the heartbeat's send time, so a frozen master (SIGSTOP, a GC pause, a partition) stops
 * acknowledging before another member can have been elected: when it wakes, `now` is past its lease
 * before it processes any stale event.
 *   - the heartbeat reads the epoch: a newer epoch, or ours with another owner, ends it at once.
 * The database side fences too: a new master makes the previous master's database read_only
 * (best effort: it may be down) and makes its own writable only after its epoch write
 * succeeded; a member that loses the role makes its own database read_only.
 *
 * Behaviour (the states are internal; cq_coord_role() is what the outside sees):
 *   - Start: cq_coord_new() queues DB_PROBE. Our database unreachable: probe again every
 *     db_probe_ms, do not join. Reachable: eligible = promote || !db_replica; then, once the
 *     session is CONNECTED, JOIN (data "v1 adv=.. db=.. elig=..") and LIST. MEMBERS_CHANGED
 *     re-LISTs (after the LIST in flight, if any).
 *   - A failed ZooKeeper or database action is retried 200 ms later (cq_coord_next_deadline()
 *     says when). ZooKeeper actions wait for a connected session.
 *   - LIST: master = the eligible member with the lowest seq. A member with our adv and db is
 *     us too (a node of ours whose JOIN answer was lost). Our node missing from the list (deleted
 *     under us): role DOWN (ROLE, DB_READ_ONLY), JOIN again.
 *   - We are master -> ELECTED: READ_EPOCH -> SET_EPOCH(epoch + 1, version, "E+1 seq db").
 *     CQ_ECONFLICT: LIST and READ_EPOCH again (the LIST may make us a slave); another failure:
 *     READ_EPOCH again after the backoff (the write may have happened). Done: when the previous
 *     owner's db is another database, DB_FENCE(peer = it) (its rc is ignored: the old database
 *     may be down), then DB_PROMOTE when our database is a replica, else DB_WRITABLE (failures
 *     retried). Done: MASTER, ROLE(MASTER, epoch).
 *   - Someone else is master (or nobody is eligible) -> SLAVE: ROLE(SLAVE) when the engine was
 *     told another role, DB_READ_ONLY once per role change (retried until it succeeds), and when
 *     promote is on and the master's db is not ours, DB_FOLLOW(peer = master db) once per master
 *     (per its seq; again after we were ELECTED, since promoting stops replication).
 *   - Heartbeat while ELECTED/MASTER and connected: PING every max(session_ms / 6, 50) ms, one
 *     in flight at a time. Answered (rc 0, or -ENOENT): lease = max(lease, the PING's issue
 *     time + session_ms / 2), the issue time being the now of the event or tick that queued it
 *     (never later than the real send). Once our epoch is written, an answer with a newer epoch,
 *     our epoch with another owner_seq, or no epoch node is a fence: SLAVE at once (ROLE(SLAVE),
 *     DB_READ_ONLY) and LIST again; we keep our node (no LEAVE), so if the list still says we
 *     are lowest we take the role again with a new epoch. An older epoch is a read ordered
 *     before our write: ignored.
 *   - Session CONNECTING: may_ack false at once, the role is kept. CONNECTED again (same
 *     session, our node lives): LIST and PING at once. EXPIRED: role DOWN (ROLE(DOWN),
 *     DB_READ_ONLY when we had a role), RECONNECT, then JOIN again on CONNECTED.
 *   - ELECTED/MASTER: DB_PROBE every db_probe_ms. Failing continuously for db_down_ms (from
 *     the issue time of the first failed probe): ROLE(DOWN), may_ack false, LEAVE (no
 *     DB_READ_ONLY: the database does not answer; the next master fences it). LEFT: probe until
 *     the database answers, then JOIN again (a higher seq: we come back as a slave).
 *
 * The runtime's contract:
 *   - Every action except ROLE and RECONNECT gets exactly one completion event, also when the
 *     session is lost or replaced (rc < 0). The machine never has two actions of one kind in
 *     flight, and ignores the completion of an action made stale by a role or session change.
 *   - Database actions are carried out in the order they were queued (one control connection).
 *   - After cq_coord_new(), every cq_coord_event() and cq_coord_tick(), pop all actions, then
 *     publish cq_coord_ack_until() and arm a timer for cq_coord_next_deadline().
 *
 * Threads: one machine belongs to one thread (the runtime's).
 */
#ifndef CQ_COORD_H
#define CQ_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_COORD_ADDR_MAX    127 /* "host:port" text, without the NUL */
#define CQ_COORD_MEMBERS_MAX 16  /* a size for the runtime's list buffer (the machine scans all) */

typedef enum cq_coord_role {
    CQ_COORD_DOWN = 0, /* no session, or not a member yet */
    CQ_COORD_SLAVE,    /* member, not master: reads only */
    CQ_COORD_ELECTED,  /* lowest eligible member, taking the role (epoch, fencing, database) */
    CQ_COORD_MASTER,   /* writes allowed while cq_coord_may_ack() */
} cq_coord_role_t;

/* What a member publishes in its node. */
typedef struct cq_coord_member {
    uint64_t seq;                    /* the sequence number of its node */
    char adv[CQ_COORD_ADDR_MAX + 1]; /* its MQ seed address, for SDK discovery */
    char db[CQ_COORD_ADDR_MAX + 1];  /* its own database, host:port */
    bool eligible;                   /* may be master (see cq_coord_opts_t.promote) */
} cq_coord_member_t;

typedef struct cq_coord_opts {
    uint32_t shard;
    const char *adv; /* borrowed during cq_coord_new: our MQ address */
    const char *db;  /* borrowed during cq_coord_new: our database, host:port */
    /* The session timeout we ask for; the negotiated one arrives with EV_SESSION. */
    uint32_t session_ms;
    /* A master whose database is unreachable this long gives up the role (0: 5000). */
    uint32_t db_down_ms;
    /* How often the database is probed (0: 500). */
    uint32_t db_probe_ms;
    /* Promotion: a member whose own database is a replica may become master (it then promotes
     * its database). Off: such a member stays a slave and only serves reads, as the seed says. */
    bool promote;
} cq_coord_opts_t;

typedef enum cq_coord_ev_type {
    /* The session changed: arg = CQ_COORD_SESS_*; session_ms = the negotiated timeout (on
     * CONNECTED; 0 keeps the one asked for). */
    CQ_COORD_EV_SESSION = 1,
    /* JOIN done: rc 0 and seq = our node's sequence, or rc < 0. */
    CQ_COORD_EV_JOINED,
    /* LIST done: rc 0 and members[0..nmembers) sorted by seq (data that did not parse: that
     * member is skipped), or rc < 0. A one-shot watch was set by the LIST. */
    CQ_COORD_EV_MEMBERS,
    /* The member list changed (the LIST's watch fired). */
    CQ_COORD_EV_MEMBERS_CHANGED,
    /* READ_EPOCH done or PING done: rc 0 with epoch, version (the node's version for the
     * compare-and-set), owner_seq, owner_db; rc -ENOENT when the epoch node does not exist
     * yet (epoch 0, version -1); or rc < 0. Data that does not parse: rc CQ_EFIELD (the epoch
     * cannot be known; an operator must fix the node). sent_ms: informational (the lease uses
     * the machine's own record of when it queued the PING). */
    CQ_COORD_EV_EPOCH,
    /* SET_EPOCH done: rc 0, or CQ_ECONFLICT (someone else wrote it first: version moved). */
    CQ_COORD_EV_EPOCH_SET,
    /* A database action completed: arg = the action type (CQ_COORD_ACT_DB_*), rc, and for
     * DB_PROBE: db_replica (own database replicates from another) and db_read_only. */
    CQ_COORD_EV_DB,
    /* LEAVE done (our node deleted): rc (-ENOENT counts as done). */
    CQ_COORD_EV_LEFT,
} cq_coord_ev_type_t;

enum { CQ_COORD_SESS_CONNECTED = 1, CQ_COORD_SESS_CONNECTING, CQ_COORD_SESS_EXPIRED };

typedef struct cq_coord_ev {
    cq_coord_ev_type_t type;
    int arg;
    int rc;
    uint32_t session_ms;
    uint64_t seq;
    uint64_t sent_ms; /* PING: when it was sent (the action's now) */
    bool is_ping;     /* EV_EPOCH: the answer to a PING, not to READ_EPOCH */
    uint64_t epoch;
    int32_t version;
    uint64_t owner_seq;
    char owner_db[CQ_COORD_ADDR_MAX + 1];
    bool db_replica, db_read_only;
    const cq_coord_member_t *members; /* borrowed for the call */
    size_t nmembers;
} cq_coord_ev_t;

typedef enum cq_coord_act_type {
    CQ_COORD_ACT_JOIN = 1,     /* create our EPHEMERAL|SEQUENCE member node, data = text */
    CQ_COORD_ACT_LIST,         /* list the members with their data, and watch the list */
    CQ_COORD_ACT_READ_EPOCH,   /* read the epoch node (its data and version) */
    CQ_COORD_ACT_SET_EPOCH,    /* write text to the epoch node if its version is still version
                                * (create it when version is -1) */
    CQ_COORD_ACT_PING,         /* read the epoch node as a heartbeat; report sent_ms = now */
    CQ_COORD_ACT_LEAVE,        /* delete our member node (give up the role) */
    CQ_COORD_ACT_RECONNECT,    /* the session expired: open a new one */
    CQ_COORD_ACT_ROLE,         /* tell the engine: role (DOWN, SLAVE or MASTER, only when it
                                * changes), epoch (ours as master, else the last one seen) */
    CQ_COORD_ACT_DB_PROBE,     /* is our database reachable; is it a replica; read_only? */
    CQ_COORD_ACT_DB_FENCE,     /* make the database `peer` read_only (best effort; the previous
                                * master's) and wait until ours received all it committed */
    CQ_COORD_ACT_DB_PROMOTE,   /* our database: apply what it received, stop replicating,
                                * read_only off, semi-sync master on */
    CQ_COORD_ACT_DB_WRITABLE,  /* our database (already a primary): read_only off, semi-sync on */
    CQ_COORD_ACT_DB_READ_ONLY, /* our database: read_only on */
    CQ_COORD_ACT_DB_FOLLOW,    /* our database: replicate from `peer` (no-op when it does) */
} cq_coord_act_type_t;

typedef struct cq_coord_act {
    cq_coord_act_type_t type;
    char text[2 * CQ_COORD_ADDR_MAX + 64]; /* JOIN: member data; SET_EPOCH: epoch data */
    int32_t version;                       /* SET_EPOCH */
    char peer[CQ_COORD_ADDR_MAX + 1];      /* DB_FENCE, DB_FOLLOW */
    cq_coord_role_t role;                  /* ROLE */
    uint64_t epoch;                        /* ROLE, SET_EPOCH */
} cq_coord_act_t;

typedef struct cq_coord cq_coord_t;

/* Returns an owned machine (o borrowed) or NULL on OOM or invalid options (adv or db not
 * "host:port"). Queues the first action (DB_PROBE). session_ms 0: 10000. */
cq_coord_t *cq_coord_new(const cq_coord_opts_t *o);
/* Accepts NULL; returns NULL. */
cq_coord_t *cq_coord_free(cq_coord_t *co);

/* Feeds one event at now. Then take the actions with cq_coord_next_action(). */
void cq_coord_event(cq_coord_t *co, const cq_coord_ev_t *ev, uint64_t now);
/* Runs the timers due at now (heartbeat, database probe, database-down deadline, retries). */
void cq_coord_tick(cq_coord_t *co, uint64_t now);
/* Pops the next action into *ret; false when there is none. */
bool cq_coord_next_action(cq_coord_t *co, cq_coord_act_t *ret);
/* The next time cq_coord_tick() has work (UINT64_MAX: none). */
uint64_t cq_coord_next_deadline(const cq_coord_t *co);

/* The fencing rule above. */
bool cq_coord_may_ack(const cq_coord_t *co, uint64_t now);
/* The bound of may_ack without a new event: may_ack(now) == (now < ack_until()); 0 when it does
 * not hold at all. The runtime publishes it to the engine's thread as one atomic, and the engine
 * acknowledges a write only while ack_until > now(monotonic ms). */
uint64_t cq_coord_ack_until(const cq_coord_t *co);

cq_coord_role_t cq_coord_role(const cq_coord_t *co);
uint64_t cq_coord_epoch(const cq_coord_t *co);
/* The current master's member (borrowed until the next event), or NULL when there is none. */
const cq_coord_member_t *cq_coord_master(const cq_coord_t *co);
const char *cq_coord_role_name(cq_coord_role_t r);

/* Member data <-> text ("v1 adv=H:P db=H:P elig=0|1", single spaces). Addresses: host of
 * [A-Za-z0-9._:[]-], ':', port 1..65535 without a leading zero, at most CQ_COORD_ADDR_MAX.
 * Format returns 0, CQ_EFIELD (an invalid address) or -ENOSPC. Parse (text need not be
 * NUL-terminated) returns 0 or CQ_EFIELD, writes *ret only on success, ret->seq = 0 (the seq
 * comes from the node's name). */
int cq_coord_member_format(const cq_coord_member_t *m, char *out, size_t outlen);
int cq_coord_member_parse(const char *text, size_t len, cq_coord_member_t *ret);
/* Epoch data <-> text ("E seq db", decimal without leading zeros). Format: 0, CQ_EFIELD or
 * -ENOSPC. Parse: 0 or CQ_EFIELD (also when db does not fit dblen); writes only on success. */
int cq_coord_epoch_format(uint64_t epoch, uint64_t seq, const char *db, char *out, size_t outlen);
int cq_coord_epoch_parse(const char *text, size_t len, uint64_t *ret_epoch, uint64_t *ret_seq,
                         char *ret_db, size_t dblen);

#endif
