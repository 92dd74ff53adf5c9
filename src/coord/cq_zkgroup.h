/* cq_zkgroup.h - a group membership in ZooKeeper (zk.c, over libzookeeper-mt), for the relay
 * nodes of issue 23 (doc/relay-cluster.md "Membership in ZooKeeper"). Nothing here blocks the
 * caller, except cq_zkgroup_close() and the test hook cq_zkgroup_kill_session().
 *
 * Paths, for conf.path "/chanq/relay/c1/members":
 *   /chanq/relay/c1/members/m_<session id, 16 hex>_<seq, 10 digits>  a member: EPHEMERAL and
 *       SEQUENCE, its data conf.data. The session id in the name lets a member find its own
 *       node after a create whose answer was lost with the connection (and remove a double).
 *   /chanq/relay/c1/homes/<name>   a home (cq_zkgroup_claim): EPHEMERAL, its holder's data.
 * The persistent parents are created as needed.
 *
 * A session of its own. Once it is connected the group creates our member node, then lists the
 * members with their data and watches the list; every change lists it again (one listing at a
 * time; a change during one is listed after it). A connection lost (not expired) is reported as
 * DISCONNECTED and the session kept: the node stays, and CONNECTED follows when the library has
 * reconnected to the ensemble, then the list is read again. A session that EXPIRED is gone with
 * our node, our homes and every watch: the group opens a NEW session (its own thread does) and
 * joins again with a new sequence number; CONNECTED and the new list follow.
 *
 * Threads. The sink and the claim callbacks run on the library's threads (or the group's own
 * thread, for a claim answered with an error while an expired session is closed), one at a
 * time and in order for one session; what they point to is borrowed for the call: copy it and
 * hand it off. They may call cq_zkgroup_claim(), not cq_zkgroup_close(). No callback runs after
 * cq_zkgroup_close() returned, nor once it has begun.
 *
 * Built only when the library was found (users see CQ_HAVE_ZOOKEEPER=1).
 */
#ifndef CQ_ZKGROUP_H
#define CQ_ZKGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_ZKGROUP_MEMBERS_MAX 1024 /* a longer list is cut to its lowest seqs (stats) */
#define CQ_ZKGROUP_DATA_MAX    1024 /* a member's or a home's data, bytes (without the NUL) */
#define CQ_ZKGROUP_NAME_MAX    64   /* a home's name: [A-Za-z0-9_.-], not "." or ".." */
#define CQ_ZKGROUP_PATH_MAX    256  /* conf.path, bytes (without the NUL) */
#define CQ_ZKGROUP_HOMES_MAX   1024 /* distinct home names claimed by one group */

typedef struct cq_zkgroup cq_zkgroup_t;

typedef struct cq_zkgroup_member {
    uint64_t seq; /* the member node's sequence number */
    bool self;    /* our own node */
    size_t len;
    char data[CQ_ZKGROUP_DATA_MAX + 1]; /* a copy, NUL-terminated */
} cq_zkgroup_member_t;

typedef enum cq_zkgroup_state {
    CQ_ZKGROUP_CONNECTED = 1, /* session_ms: the timeout the ensemble granted */
    CQ_ZKGROUP_DISCONNECTED,  /* the connection is lost; the session and our node may live on */
    CQ_ZKGROUP_EXPIRED,       /* the session is gone: a new one is being opened */
} cq_zkgroup_state_t;

typedef struct cq_zkgroup_sink {
    /* The member list, m[0..n) sorted by seq, ours flagged self: after every change, once our
     * node is in it (a list cut at the cap may leave ours out). A member whose node went
     * between the listing and the read of its data is left out (a new list follows: the watch
     * saw it go), and so is one whose data is over CQ_ZKGROUP_DATA_MAX. */
    void (*members)(void *ud, const cq_zkgroup_member_t *m, size_t n);
    void (*session)(void *ud, cq_zkgroup_state_t state, uint32_t session_ms);
    /* A home answered by a claim was deleted (its holder left, or its session ended: ours
     * too, when the ensemble could still tell us before EXPIRED). Once per answer; claim it
     * again to take it. May be NULL when the group claims nothing. */
    void (*home_gone)(void *ud, const char *name);
    void *ud;
} cq_zkgroup_sink_t;

typedef struct cq_zkgroup_conf {
    const char *hosts;   /* "host:port,host:port,..." */
    const char *path;    /* the members' parent: '/' first, none last, no empty, "." or ".."
                            part, < CQ_ZKGROUP_PATH_MAX bytes ("/chanq/relay/c1/members") */
    uint32_t session_ms; /* asked for; the ensemble bounds it (CONNECTED says what it granted) */
    const char *data;    /* what we publish, opaque text of <= CQ_ZKGROUP_DATA_MAX bytes */
} cq_zkgroup_conf_t;

typedef struct cq_zkgroup_stats {
    uint64_t sessions;    /* sessions opened (1 + one per expiry) */
    uint64_t expiries;    /* sessions that expired */
    uint64_t lists;       /* member lists read and reported */
    uint64_t truncations; /* lists cut at CQ_ZKGROUP_MEMBERS_MAX */
} cq_zkgroup_stats_t;

/* Opens the first session (does not wait for it). conf and sink are copied. *ret owned:
 * cq_zkgroup_close. 0, -EINVAL (a bad path, data over the limit, no hosts, or the library
 * refused the hosts), -ENOMEM or -errno (a thread could not start). */
int cq_zkgroup_open(const cq_zkgroup_conf_t *conf, const cq_zkgroup_sink_t *sink,
                    cq_zkgroup_t **ret);

/* Deletes our member node (best effort: it goes with the session anyway), closes the session
 * and frees g. Blocks until no callback runs any more (bounded: the library's close). Claims
 * not answered yet never are. Not from a callback. Accepts NULL. */
void cq_zkgroup_close(cq_zkgroup_t *g);

/* The answer to a claim: rc 0 with the holder's data (holder[0..len), NUL-terminated, borrowed)
 * and mine true when that holder is this group's session (created now, or earlier); or rc < 0
 * (-ENOTCONN: the session is lost; -ENOMEM; -EIO) with holder NULL. name is borrowed. */
typedef void (*cq_zkgroup_claim_fn)(void *ud, const char *name, int rc, const char *holder,
                                    size_t len, bool mine);

/* Takes the home <path>/../homes/<name> with compare-and-set: creates it (EPHEMERAL, with data)
 * when absent, and answers either way with the holder's data through cb(ud, ...), once. A
 * home answered is watched: its deletion calls sink.home_gone(name) (once; claim again to take
 * it, or to watch it again). After EXPIRED nothing is held or watched any more: claim again
 * once CONNECTED. Returns 0 (cb will run), -EINVAL (a bad name, data over the limit),
 * CQ_ELIMIT (more than CQ_ZKGROUP_HOMES_MAX names), -ENOTCONN (no session: closing, or a new
 * one not opened yet) or -ENOMEM; cb does not run then. name and data are copied. */
int cq_zkgroup_claim(cq_zkgroup_t *g, const char *name, const char *data, cq_zkgroup_claim_fn cb,
                     void *ud);

/* A snapshot for /metrics. Any thread. */
void cq_zkgroup_stats(const cq_zkgroup_t *g, cq_zkgroup_stats_t *ret);

/* For tests and fault drills: makes the ensemble end the current session, as it does with a
 * member that stopped answering (a second connection on the same session id and password
 * closes it; the group then sees DISCONNECTED, EXPIRED, and opens a new session). Blocks until
 * the group has seen EXPIRED (tried up to 5 times, each bounded by the session timeout + 5 s).
 * 0, -ENOTCONN (no connected session), CQ_ETIMEOUT or -ENOMEM. */
int cq_zkgroup_kill_session(cq_zkgroup_t *g);

#endif
