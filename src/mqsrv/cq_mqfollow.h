/* cq_mqfollow.h - following other shards' committed messages (issue 24, doc/bridge.md
 * "Shards"): the client side of the seed protocol (doc/protocol-mq.md), sans I/O, for the
 * bridge of a node whose bound topics also commit on shards it does not store.
 *
 * One link per followed shard. The edge (src/io/mq_follow.c) keeps one TCP connection per link
 * to the server cq_mqfollow_addr() names, feeds its bytes in and writes what the link queued;
 * after a failure it asks again, and the link has moved to the shard's next server. On each
 * connection the link
 *   - connects as a consumer (module_id, token), and learns the server's shard, role and epoch
 *     (connect_resp / keepalive_resp `epoch`; a standby that says 0 does not know it, and the
 *     epoch known from before stays: its rows are that history's);
 *   - per followed topic: watch, then either the topic's last offset (the first time: the
 *     follow starts from the live stream, as the local sink does) or consume from the last
 *     offset it handed on, batch after batch, until an answer is short; pushes that come
 *     meanwhile are kept (bounded) and handed on after it, above the offset reached; from then
 *     on every push is handed on as it comes;
 *   - hands each message on once, in offset order per (shard, topic), with prev_offset the one
 *     handed on before it (on_event), across reconnections and servers: a new connection
 *     consumes from the last offset handed on, so a failover loses and repeats nothing that
 *     the shard's new master or standby holds;
 *   - keeps alive every keepalive_ms; an answer or push missing for timeout_ms closes it; a
 *     server that is not master for recheck_ms is left for the shard's next one, when there is
 *     one (a standby serves watch and consume too, so nothing is lost meanwhile).
 * Reads (cq_mqfollow_read) are consumes of their own, for the bridge's resume.
 *
 * Why not a watcher only: a watch pushes what commits after it, so a reconnection would lose
 * what committed while the link was down; the consume from the last offset closes that gap,
 * and the pushes kept during it close the gap between the consume's read and the watch.
 *
 * Threads: one (the MQ loop's). Callbacks run inside cq_mqfollow_input / _tick and must not
 * call the follower.
 */
#ifndef CQ_MQFOLLOW_H
#define CQ_MQFOLLOW_H

#include "cq_mqsrv.h"
#include "cq_sbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_MQFOLLOW_LINKS_MAX   16  /* followed shards */
#define CQ_MQFOLLOW_SERVERS_MAX 8   /* servers per shard */
#define CQ_MQFOLLOW_TOPICS_MAX  256 /* followed topics */
#define CQ_MQFOLLOW_ADDR_MAX    255
#define CQ_MQFOLLOW_READS_MAX   64 /* reads in flight per link; more fail with CQ_EBUSY */

/* A row a read returns, borrowed for the callback. producer_id 0: none. */
typedef struct cq_mqfollow_row {
    uint64_t offset;
    int64_t time_ms;
    uint64_t producer_id, seq;
    const uint8_t *content;
    size_t len;
} cq_mqfollow_row_t;

typedef struct cq_mqfollow_opts {
    uint32_t module_id;
    const char *token;     /* copied; NULL: "" */
    uint32_t batch;        /* consume max_count (0: 1000, the server's cap) */
    uint32_t keepalive_ms; /* 0: 1000 */
    uint32_t timeout_ms;   /* 0: 10000 */
    uint32_t recheck_ms;   /* 0: 5000 */
    uint32_t retry_ms;     /* a topic the server refused is asked again after (0: 1000) */
    uint32_t pending_max;  /* pushes kept per topic during a consume (0: 10000; and 8 MiB of
                            * content at most); over either they are dropped and the consume goes
                            * on from its own offset */
    /* A message of a followed topic, in order (see above). */
    void (*on_event)(void *ud, const cq_mqsrv_event_t *ev);
    /* The answer to cq_mqfollow_read(tag): rows in offset order, or err < 0 (rows ignored). */
    void (*on_rows)(void *ud, uint64_t tag, int err, const cq_mqfollow_row_t *rows, size_t n);
    /* The answer to cq_mqfollow_offset(tag): the stored offset (a commit's: the one written), or
     * err < 0 (-ENOENT: the instance never committed). */
    void (*on_offset)(void *ud, uint64_t tag, int err, uint64_t offset);
    void *ud;
} cq_mqfollow_opts_t;

typedef struct cq_mqfollow cq_mqfollow_t;

/* Returns an owned follower with no link, or NULL on OOM. */
cq_mqfollow_t *cq_mqfollow_new(const cq_mqfollow_opts_t *o);
/* Accepts NULL; returns NULL. */
cq_mqfollow_t *cq_mqfollow_free(cq_mqfollow_t *f);

/* Parses "S/HOST:PORT,..." (every server with its shard; servers of skip_shard are left out:
 * a node does not follow its own shard) into links, one per shard in order of first mention.
 * Returns 0, or CQ_ECONFIG with err saying what is wrong, or -ENOMEM. */
int cq_mqfollow_add_servers(cq_mqfollow_t *f, const char *list, uint32_t skip_shard, char *err,
                            size_t errlen);
size_t cq_mqfollow_nlinks(const cq_mqfollow_t *f);
uint32_t cq_mqfollow_shard(const cq_mqfollow_t *f, size_t link);
/* The address the next connection of link goes to (borrowed), and its index among the shard's
 * servers. */
const char *cq_mqfollow_addr(const cq_mqfollow_t *f, size_t link, size_t *ret_idx);
/* The shard's servers: n and the i-th address (borrowed). */
size_t cq_mqfollow_nservers(const cq_mqfollow_t *f, size_t link);
const char *cq_mqfollow_server(const cq_mqfollow_t *f, size_t link, size_t i);

/* The topics to follow (names borrowed for the call; compared case-insensitively). A topic
 * new to the list starts at the live stream; one no longer in it is forgotten. Returns 0,
 * -ENOSPC (over CQ_MQFOLLOW_TOPICS_MAX) or -ENOMEM. */
int cq_mqfollow_set_topics(cq_mqfollow_t *f, const char *const *names, size_t n);

/* The edge's events for link. connected: the TCP connection is up (the hello is queued).
 * input: bytes from it (borrowed); < 0: close it (a broken stream, a refused connect).
 * closed: the connection failed or ended; the next one goes to the shard's next server. */
void cq_mqfollow_connected(cq_mqfollow_t *f, size_t link, uint64_t now_ms);
int cq_mqfollow_input(cq_mqfollow_t *f, size_t link, const uint8_t *p, size_t n, uint64_t now_ms);
void cq_mqfollow_closed(cq_mqfollow_t *f, size_t link, uint64_t now_ms);
/* Keepalives, retries, timeouts: < 0 when link's connection must close (the reason is logged).
 * Call every 100 ms or so for each link. */
int cq_mqfollow_tick(cq_mqfollow_t *f, size_t link, uint64_t now_ms);
/* The bytes to send on link (the edge consumes what it wrote). */
cq_sbuf_t *cq_mqfollow_output(cq_mqfollow_t *f, size_t link);

/* Where the follow of (shard, topic) is: the shard's epoch and the last offset handed on. False
 * when the shard or topic is not followed, or its live position is not known yet. */
bool cq_mqfollow_position(const cq_mqfollow_t *f, uint32_t shard, const char *topic,
                          uint64_t *ret_epoch, uint64_t *ret_offset);
/* True when shard is one of the links'. */
bool cq_mqfollow_has_shard(const cq_mqfollow_t *f, uint32_t shard);
/* Reads up to max rows of topic after offset from on shard: on_rows(tag) answers, once, later
 * (never inside this call). Errors, also answered through on_rows: -ENOTCONN (the link is not
 * up), CQ_EBUSY (too many reads), -ENOENT (not a followed shard), or the server's. */
void cq_mqfollow_read(cq_mqfollow_t *f, uint32_t shard, const char *topic, uint64_t from,
                      uint32_t max, uint64_t tag);
/* Reads (commit false) or writes (commit true: offset) the offset of consumer instance instance
 * (borrowed; the follower's module's, doc/protocol-mq.md "commit") in topic on shard:
 * on_offset(tag) answers, once, later. Errors as cq_mqfollow_read's, through on_offset; a
 * commit on a standby gets the server's CQ_ENOTMASTER. */
void cq_mqfollow_offset(cq_mqfollow_t *f, uint32_t shard, const char *topic, const char *instance,
                        bool commit, uint64_t offset, uint64_t tag);

typedef struct cq_mqfollow_stats {
    uint64_t events, connects, disconnects, pushes_dropped, reads;
} cq_mqfollow_stats_t;
/* Per link: up (connected and answered), master (the server said so), the epoch. */
typedef struct cq_mqfollow_link_stats {
    uint32_t shard;
    bool up, master;
    uint64_t epoch;
    uint64_t events;
} cq_mqfollow_link_stats_t;
void cq_mqfollow_stats(const cq_mqfollow_t *f, cq_mqfollow_stats_t *ret);
void cq_mqfollow_link_stats(const cq_mqfollow_t *f, size_t link, cq_mqfollow_link_stats_t *ret);

#endif
