/* chanq_move.h - a connection that moves to another address of a list when it is lost: the
 * clients of a relay node that died move to another node (issue 23, doc/relay-cluster.md
 * "Clients that move").
 *
 * The engine is sans-I/O: it decides where and when to connect and what to send once connected;
 * an adapter (chanq_sync.h's chanq_sync_connect_list, chanq_uv.h's chanq_uv_connect_list)
 * connects, reads, writes and tells it what happened. Times are the caller's monotonic
 * milliseconds.
 *
 * ADDRESSES: "host:port[,host:port...]" ("[v6addr]:port" for IPv6), at most
 * CHANQ_MOVE_MAX_ADDRS. chanq_move_start() tries them in list order; after a loss the k-th try
 * (k = 0, 1, ...) goes to address (lost + 1 + k) mod n, round robin from the lost one, so a
 * one-address list reconnects to the same address.
 *
 * BACKOFF: the first try after a loss (or the first at start) is immediate; try k >= 1 waits
 * min(backoff_min_ms * 2^(k-1), backoff_max_ms) after try k-1 failed. A try fails when the
 * connection is refused or not made within connect_timeout_ms, when it is lost before it is up,
 * or when no AuthResult comes within auth_timeout_ms. After max_tries failed tries in a row
 * (0: no limit) the engine gives up: CHANQ_MOVE_FAILED, and chanq_move_error() is the last
 * try's error.
 *
 * WHAT A MOVE REDOES (chanq_move_connected after a loss): the core starts over
 * (chanq_client_reset: unsent and unparsed bytes and pending stubs are dropped). When the lost
 * connection had authenticated and the core knows its credentials, AUTH is queued again with the
 * same PIT and login token; its successful result queues SUB_TO_CHANNEL again, with the
 * recorded options, for every subscription the client had made itself (chanq_client_sub_at),
 * then on_moved reports the move: the SUB results follow as ordinary messages. An AUTH the new
 * address refuses (INVALID_PIT, INVALID_LT) ends the move at once with CQ_EAUTH: another node
 * would answer the same. A connection that had not authenticated is only made again, and
 * on_moved reports it with conn id 0. Subscriptions a server made for the client are not
 * redone: they are that server's (it hears of the old connection's loss through the UNSUB
 * results, as for any connection that drops).
 *
 * Threads: an engine belongs to its adapter's thread.
 */
#ifndef CHANQ_MOVE_H
#define CHANQ_MOVE_H

#include <stdint.h>

#include "chanq.h"

#define CHANQ_MOVE_MAX_ADDRS 64

/* A move that completed, for on_moved. Strings are borrowed for the callback. */
typedef struct chanq_moved {
    size_t from, to;       /* indexes in the list */
    const char *from_addr; /* "host:port" as given in the list */
    const char *to_addr;
    uint32_t old_conn_id; /* 0 when the lost connection had not authenticated */
    uint32_t conn_id;     /* the new connection's id (0: not authenticated) */
    size_t resubscribed;  /* SUB_TO_CHANNEL queued again */
    uint32_t tries;       /* connection tries it took (1: the first address answered) */
    int reason;           /* what ended the old connection (CQ_ECLOSED, -ECONNRESET...) */
} chanq_moved_t;

/* Called once per completed move, from inside the adapter (in the middle of a feed for an
 * authenticated move). It may queue messages on the client; it must not free it. */
typedef void (*chanq_moved_fn)(void *ud, const chanq_moved_t *ev);

typedef struct chanq_move_opts {
    uint32_t backoff_min_ms;     /* default 100 */
    uint32_t backoff_max_ms;     /* default 2000 */
    uint32_t max_tries;          /* failed tries in a row before giving up; 0 = no limit */
    uint32_t connect_timeout_ms; /* default 2000 */
    uint32_t auth_timeout_ms;    /* default 5000 */
    /* TCP keepalive after this many idle seconds (probes 1 s apart, 3 of them), so a peer that
     * vanished without a close is noticed as lost; 0 = off (default). */
    uint32_t keepalive_s;
    chanq_moved_fn on_moved; /* may be NULL */
    void *ud;                /* borrowed; passed to on_moved */
} chanq_move_opts_t;

typedef enum {
    CHANQ_MOVE_IDLE = 0,   /* not started */
    CHANQ_MOVE_WAIT,       /* connect to chanq_move_target() at chanq_move_due() */
    CHANQ_MOVE_CONNECTING, /* the adapter is connecting; chanq_move_deadline() bounds it */
    CHANQ_MOVE_AUTH,       /* connected, AUTH queued, its result due by chanq_move_deadline() */
    CHANQ_MOVE_UP,         /* connected (after a move: authenticated and subscribed again) */
    CHANQ_MOVE_FAILED,     /* gave up: chanq_move_error() */
} chanq_move_state_t;

typedef struct chanq_move chanq_move_t;

/* Fills *o with the defaults above. */
void chanq_move_opts_init(chanq_move_opts_t *o);

/* Parses addrs (borrowed) and creates an engine (o copied; NULL = defaults; o->ud stays
 * borrowed). *ret_m is returned owned and written only on success. Returns 0, -EINVAL (an
 * empty list, a bad host:port, more than CHANQ_MOVE_MAX_ADDRS) or -ENOMEM. */
int chanq_move_new(const char *addrs, const chanq_move_opts_t *o, chanq_move_t **ret_m);

/* Frees the engine. Accepts NULL. Returns NULL. */
chanq_move_t *chanq_move_free(chanq_move_t *m);

/* The list: its length, entry i's host (brackets removed), port and "host:port" text. */
size_t chanq_move_addr_count(const chanq_move_t *m);
const char *chanq_move_host(const chanq_move_t *m, size_t i);
uint16_t chanq_move_port(const chanq_move_t *m, size_t i);
const char *chanq_move_addr(const chanq_move_t *m, size_t i);

chanq_move_state_t chanq_move_state(const chanq_move_t *m);
/* The address being tried or connected to. */
size_t chanq_move_target(const chanq_move_t *m);
/* WAIT: when to connect. */
int64_t chanq_move_due(const chanq_move_t *m);
/* CONNECTING, AUTH: when the try times out (chanq_move_tick). */
int64_t chanq_move_deadline(const chanq_move_t *m);
/* FAILED: why (0 otherwise). */
int chanq_move_error(const chanq_move_t *m);
/* Moves completed so far. */
uint32_t chanq_move_moves(const chanq_move_t *m);
/* The options (keepalive_s and the timeouts are for the adapter). */
const chanq_move_opts_t *chanq_move_opts(const chanq_move_t *m);

/* ---- events, from the adapter ------------------------------------------------------------ */

/* IDLE -> WAIT for the first address, due now. */
void chanq_move_start(chanq_move_t *m, int64_t now);

/* WAIT -> CONNECTING: the adapter starts connecting to chanq_move_target(). */
void chanq_move_connecting(chanq_move_t *m, int64_t now);

/* CONNECTING -> UP (the first connection, or a move with nothing to redo: on_moved runs) or
 * AUTH (c, borrowed until the move ends or the engine is freed, is reset and AUTH is queued with
 * a stub of the engine's). c must not be inside a callback. A failure to queue (-ENOMEM) fails
 * the try. In AUTH the AuthResult arrives through c's feed: after each feed the adapter reads
 * the state: UP (moved), WAIT (this try failed: drop its connection) or FAILED (AUTH refused).
 * Free the engine before c. */
void chanq_move_connected(chanq_move_t *m, chanq_client_t *c, int64_t now);

/* A try failed (CONNECTING or AUTH: refused, timed out, lost, an error of the core): -> WAIT
 * for the next address after the backoff, or FAILED after max_tries. The adapter drops the
 * connection of that try. */
void chanq_move_failed(chanq_move_t *m, int err, int64_t now);

/* The connection is lost. UP -> WAIT for the next address, due now (c, borrowed, gives the
 * lost connection's id); in CONNECTING or AUTH it is chanq_move_failed. */
void chanq_move_lost(chanq_move_t *m, const chanq_client_t *c, int err, int64_t now);

/* Times out a try whose deadline passed (as chanq_move_failed with CQ_ETIMEOUT). Returns 1 if it
 * did (the adapter drops that try's connection), else 0. */
int chanq_move_tick(chanq_move_t *m, int64_t now);

#endif
