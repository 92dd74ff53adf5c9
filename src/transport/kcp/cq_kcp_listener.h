/* cq_kcp_listener.h - who a KCP datagram belongs to: the listener policy, sans I/O.
 *
 * KCP has no handshake and no close (doc/transports.md §3-4), so a UDP listener decides from
 * each datagram's source address and conv alone. This unit holds those decisions; the edge
 * (src/io/kcp.c) keeps the socket, the engines and the connections, and asks:
 *
 *  - datagram in (source address, bytes, now) -> one action: deliver it to session X, create
 *    a session for a new address (and feed it), or drop it (and why). A datagram shorter than
 *    a segment header is dropped, as kcp-go does;
 *  - conv replacement: a known address sending another conv replaces its session only when
 *    the datagram starts a conversation (PUSH sn 0, kcp-go's listener rule); the displaced
 *    session is handed back to be closed and is forgotten at once (its address is free);
 *    otherwise the datagram is dropped;
 *  - tombstones: a session the edge has released stays known by address and conv
 *    (cq_kcp_listener_bury), so the peer's retransmissions open nothing; datagrams from it are
 *    dropped but keep it alive; a new conversation from the address replaces it;
 *  - idle timeouts: cq_kcp_listener_expire() reports sessions silent for idle_ms (to be
 *    closed) and forgets tombstones silent that long;
 *  - the per-IP limit: at most max_per_ip sessions, closing sessions and tombstones per source
 *    IP, counted in a cq_kcp_ipcount_t that the listeners of every worker share.
 *
 * Peers are matched by exact address (IP and port); the per-IP count is kept per 32-bit hash
 * of the IP, so two IPs whose hashes collide (1 in 2^32) share a count.
 *
 * Time is the caller's millisecond clock. A listener belongs to one thread; only the shared
 * counter takes a lock.
 */
#ifndef CQ_KCP_LISTENER_H
#define CQ_KCP_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A datagram's source: IPv4 (ip_len 4) or IPv6 (ip_len 16), and the port in network order. */
typedef struct cq_kcp_addr {
    uint8_t ip_len;
    uint8_t ip[16];
    uint8_t port[2];
} cq_kcp_addr_t;

/* ---- the per-IP count shared by all workers -------------------------------------------- */

typedef struct cq_kcp_ipcount cq_kcp_ipcount_t;

/* A counter allowing max_per_ip peers per source IP (>= 1). Returns it (owned) or NULL. */
cq_kcp_ipcount_t *cq_kcp_ipcount_new(uint32_t max_per_ip);
/* Frees it; no listener may use it any more. Accepts NULL; returns NULL. */
cq_kcp_ipcount_t *cq_kcp_ipcount_free(cq_kcp_ipcount_t *c);
/* How many peers a's IP holds now. Any thread. */
uint32_t cq_kcp_ipcount_get(cq_kcp_ipcount_t *c, const cq_kcp_addr_t *a);
/* Counters every worker adds to (atomics; any thread). refused: datagrams from a new address
 * dropped because its IP holds max_per_ip peers (cq_kcp_listener_input counts them).
 * amp_blocked: segments the engines held back under their anti-amplification limit
 * (cq_kcp_opts_t.amp_factor), added by the caller with cq_kcp_ipcount_add_amp() when a session
 * ends. */
void cq_kcp_ipcount_add_amp(cq_kcp_ipcount_t *c, uint64_t n);
uint64_t cq_kcp_ipcount_refused(cq_kcp_ipcount_t *c);
/* Writes the counters as Prometheus text (chanq_kcp_refused_total{reason="max_per_addr"},
 * chanq_kcp_amp_blocked_total) into buf[0..cap) and returns the length, or the length needed
 * if it is cap or more (snprintf's rule). Any thread. */
size_t cq_kcp_ipcount_metrics(cq_kcp_ipcount_t *c, char *buf, size_t cap);

/* ---- the listener ---------------------------------------------------------------------- */

typedef struct cq_kcp_listener cq_kcp_listener_t;
typedef struct cq_kcp_peer cq_kcp_peer_t; /* an address the listener knows (owned by it) */

typedef struct cq_kcp_listener_opts {
    uint64_t idle_ms;          /* silence after which a session is closed, a tombstone forgotten */
    cq_kcp_ipcount_t *ipcount; /* borrowed: outlives the listener; shared across workers */
} cq_kcp_listener_opts_t;

typedef enum cq_kcp_verdict {
    CQ_KCP_DELIVER, /* feed the datagram to the session (action.ud) */
    CQ_KCP_CREATE,  /* a new peer (action.peer): set up a session and cq_kcp_listener_attach()
                       it (then feed it), or cq_kcp_listener_bury() the peer if that fails,
                       or cq_kcp_listener_forget() it if the caller is out of memory */
    CQ_KCP_DROP,    /* ignore the datagram; action.why says why */
} cq_kcp_verdict_t;

typedef enum cq_kcp_drop {
    CQ_KCP_DROP_NONE = 0,
    CQ_KCP_DROP_SHORT,     /* shorter than a segment header */
    CQ_KCP_DROP_CONV,      /* another conv from a known address, not starting a conversation */
    CQ_KCP_DROP_TOMBSTONE, /* the address of a released session */
    CQ_KCP_DROP_CLOSING,   /* the session is closing */
    CQ_KCP_DROP_LIMIT,     /* the source IP holds max_per_ip peers */
    CQ_KCP_DROP_NOMEM,
} cq_kcp_drop_t;

typedef struct cq_kcp_action {
    cq_kcp_verdict_t verdict;
    cq_kcp_drop_t why;     /* CQ_KCP_DROP */
    cq_kcp_peer_t *peer;   /* CQ_KCP_DELIVER, CQ_KCP_CREATE */
    void *ud;              /* CQ_KCP_DELIVER: the attached session */
    uint32_t conv;         /* the datagram's conv (not for CQ_KCP_DROP_SHORT) */
    void *replaced;        /* whatever the verdict: a session this datagram's new conversation
                              displaced (its ud), or NULL. The listener has forgotten it; the
                              caller closes it unless it is closing already. */
    bool replaced_closing; /* the displaced session was closing already */
} cq_kcp_action_t;

/* Returns a new listener (owned) or NULL on OOM. o is copied. */
cq_kcp_listener_t *cq_kcp_listener_new(const cq_kcp_listener_opts_t *o);
/* Forgets every peer, giving their counts back. The caller has released its sessions first.
 * Accepts NULL; returns NULL. */
cq_kcp_listener_t *cq_kcp_listener_free(cq_kcp_listener_t *l);

/* Decides what the datagram dgram[0..len) (borrowed) from a at now_ms is for. */
void cq_kcp_listener_input(cq_kcp_listener_t *l, const cq_kcp_addr_t *a, const uint8_t *dgram,
                           size_t len, uint64_t now_ms, cq_kcp_action_t *ret);

/* After CQ_KCP_CREATE: the peer's session is ud (borrowed, not NULL); later datagrams are
 * delivered to it. */
void cq_kcp_listener_attach(cq_kcp_listener_t *l, cq_kcp_peer_t *p, void *ud);
/* After CQ_KCP_CREATE, when the caller cannot hold a session at all (out of memory): the peer
 * is forgotten and its count given back, as if the datagram had not come. */
void cq_kcp_listener_forget(cq_kcp_listener_t *l, cq_kcp_peer_t *p);
/* The peer's session is closing: its datagrams are dropped, and it is no longer reported
 * idle. Until cq_kcp_listener_bury(), a new conversation may still displace it. */
void cq_kcp_listener_closing(cq_kcp_listener_t *l, cq_kcp_peer_t *p);
/* The caller has released the peer's session (or could not set one up after CQ_KCP_CREATE):
 * the peer becomes a tombstone, known by address and conv until idle_ms of silence. */
void cq_kcp_listener_bury(cq_kcp_listener_t *l, cq_kcp_peer_t *p);

/* Forgets tombstones silent for idle_ms or more, and calls idle(ctx, ud) for each attached
 * session silent that long (the caller closes it: idle may call cq_kcp_listener_closing() on
 * that peer, and nothing else of this listener). */
void cq_kcp_listener_expire(cq_kcp_listener_t *l, uint64_t now_ms,
                            void (*idle)(void *ctx, void *ud), void *ctx);

typedef struct cq_kcp_listener_stats {
    uint32_t sessions;   /* attached or being set up, not closing */
    uint32_t closing;    /* closing, not yet buried */
    uint32_t tombstones; /* buried */
} cq_kcp_listener_stats_t;
void cq_kcp_listener_stats(const cq_kcp_listener_t *l, cq_kcp_listener_stats_t *ret);

#endif
