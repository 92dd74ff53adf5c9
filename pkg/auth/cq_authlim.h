/* cq_authlim.h - the per-source-address budget of failed authentications (issue 10 item 6),
 * and the small address helpers that go with it.
 *
 * Why: the per-connection limit (--max-failed-auth) is no limit at all against a client that
 * reconnects: one client made 22,700-29,100 guesses per second that way. The budget counts
 * failures per source address, across every connection, worker thread and port that
 * authenticates (channel AUTH, MQ connect, the MQ HTTP Authorization header), so a reconnect
 * buys nothing.
 *
 * The rule, for one address (the peer's IP text without its port):
 *   - each failure counts; the count restarts when window_ms passed since the address's last
 *     failure or the end of its last block, whichever is later (the address then also loses its
 *     backoff: it starts again at backoff_ms);
 *   - the failure that brings the count to max_failures blocks the address for backoff_ms,
 *     doubled for each further block in a row (at most 64 x backoff_ms), and restarts the count;
 *   - while blocked, every authentication from the address is refused before its credentials
 *     are checked, a right one included: otherwise guessing would go on, and the answer to the
 *     right guess would still arrive. A refusal neither counts as a failure nor extends the
 *     block;
 *   - a success does not reset the count (else one valid account would reset the budget
 *     between guesses at others); counts decay with the window instead.
 * max_failures 0 disables the budget. At most max_addrs addresses are tracked; a new address
 * beyond that evicts the one idle longest, preferring addresses that are not blocked.
 *
 * Thread-safe: one mutex, taken on authentication paths only (never per message). Pure
 * otherwise: the caller passes the monotonic clock in ms.
 */
#ifndef CQ_AUTHLIM_H
#define CQ_AUTHLIM_H

#include "cq_sbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_authlim cq_authlim_t;

/* Where an authentication was refused (the label of chanq_auth_addr_refused_total). */
typedef enum cq_authlim_port {
    CQ_AUTHLIM_CHANNEL = 0, /* channeld AUTH on any client or server listener */
    CQ_AUTHLIM_MQ = 1,      /* seed protocol connect */
    CQ_AUTHLIM_MQHTTP = 2,  /* MQ HTTP API Authorization */
    CQ_AUTHLIM__PORTS = 3
} cq_authlim_port_t;

typedef struct cq_authlim_opts {
    uint32_t max_failures; /* 0: no budget */
    uint32_t window_ms;
    uint32_t backoff_ms;
    size_t max_addrs; /* 0: CQ_AUTHLIM_ADDRS_DFL */
} cq_authlim_opts_t;

#define CQ_AUTHLIM_ADDRS_DFL   8192
#define CQ_AUTHLIM_BACKOFF_MAX 64 /* the longest block, in units of backoff_ms */
#define CQ_AUTHLIM_LOG_PER_S   20 /* failure log lines per second, process-wide */

/* A new budget (o copied). NULL on OOM. */
cq_authlim_t *cq_authlim_new(const cq_authlim_opts_t *o);
/* Frees l. Accepts NULL; returns NULL. */
cq_authlim_t *cq_authlim_free(cq_authlim_t *l);

/* True when peer ("HOST:PORT", "[V6]:PORT" or a bare host; borrowed) is blocked at now_ms: the
 * caller refuses the authentication without checking it. Counts the refusal under port. A NULL
 * l never blocks. */
bool cq_authlim_blocked(cq_authlim_t *l, const char *peer, cq_authlim_port_t port, uint64_t now_ms);
/* Counts a failed authentication from peer at now_ms. Returns true when this failure blocked
 * the address. A NULL l does nothing. */
bool cq_authlim_failed(cq_authlim_t *l, const char *peer, uint64_t now_ms);

/* The failure log's rate limit: true when a line may be written at now_ms (at most
 * CQ_AUTHLIM_LOG_PER_S per second); then note[0..cap) is "" or, when lines were refused since
 * the last one allowed, " (N similar lines suppressed)" for that line to end with. A NULL l
 * always allows. */
bool cq_authlim_log_allow(cq_authlim_t *l, uint64_t now_ms, char *note, size_t cap);

/* Appends chanq_auth_addr_refused_total{port}, chanq_auth_addr_blocks_total and the
 * chanq_auth_addr_tracked gauge in Prometheus text format. The admin registry's source
 * signature (ud is the cq_authlim_t). Returns 0 or -ENOMEM. */
int cq_authlim_metrics_append(void *ud, cq_sbuf_t *out);

/* Compares two NUL-terminated tokens (NULL = "") in time that depends only on their lengths,
 * not on where they first differ, so that an answer's timing tells nothing about a secret. */
bool cq_token_eq(const char *a, const char *b);

/* Copies the host part of peer ("1.2.3.4:5" -> "1.2.3.4", "[::1]:5" -> "::1", a bare host
 * unchanged) into out (cap >= 2). Returns its length, truncated to cap - 1. */
size_t cq_peer_host(const char *peer, char *out, size_t cap);
/* True when the host part of peer (or of a listener address "HOST:PORT") is a loopback
 * address: 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, or the name "localhost". An empty host
 * (":PORT", every address) and anything unparsable are not loopback. */
bool cq_peer_is_loopback(const char *peer);

#endif
