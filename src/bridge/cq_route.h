/* cq_route.h - route bindings' catch-up (issue 24, doc/bridge.md "Route bindings"): a player who
 * logs in gets every event of the route-bound topics that names it and that it has not
 * acknowledged, in order per topic and once, then the live ones; its position is the server's,
 * so it needs no client change and follows the player across devices. Sans-I/O: no sockets,
 * no loop, no threads, no clock (now comes in), no globals. It lives on the MQ engine's thread,
 * beside the bridge and the resume engine.
 *
 * What it keeps:
 *   - per route topic, a ring of the latest live events with the key each named, which serves
 *     most catch-ups without reading the store;
 *   - per (topic, shard, player key), the player's acknowledged offset, cached (bounded: clean
 *     entries are evicted first) and written to the shard's store, batched: at most one write
 *     per entry per flush period, never one per event. On this node's own shard it is a
 *     consumer offset of its store (consumer id cq_route_consumer_id); on a followed shard, an
 *     offset of the follower's module's consumer instance cq_route_instance_id in that shard
 *     (doc/protocol-mq.md "commit"), so every node that follows the shard shares it. It moves
 *     on the client's TopicAckMessage only, never on delivery, so a player who drops before it
 *     handled an event gets it again;
 *   - per logged-in connection, a session: one cursor per topic, from the acknowledged offset
 *     (none acknowledged: the oldest retained event) up to the live offset.
 *
 * The single-flight reads. The events of one player are scattered through the topic, so a
 * catch-up the ring cannot serve reads every row after the cursor and keeps the ones whose key
 * field names the player. Sessions that need the same rows (same topic, same cursor: every
 * player that never acknowledged anything starts at the same place) share one read, whose rows
 * are parsed once and handed out by key; they then stay in step, so a mass login costs about
 * one scan of the retained rows, not one per player.
 *
 * The switch (doc/threads.md "Bridge resume"): the connection's worker holds back the live
 * routed events for the connection from its AUTH until the FINAL chunk. Chunks and live routed
 * events go from this thread straight to the connection's worker, on one FIFO, so a chunk is
 * behind every live event handed out before it. A chunk's events are up to the cursors; the
 * FINAL chunk is made when every cursor is at its topic's live offset at that moment: the
 * held live events are all at or below it, so the chunks carried them, and the later ones
 * come after FINAL.
 *
 * Threads: one thread only; the buffers handed out may go to any thread.
 */
#ifndef CQ_ROUTE_H
#define CQ_ROUTE_H

#include "cq_buf.h"
#include "cq_resume.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_route_limits {
    uint32_t ring_events;  /* live events kept per topic (0: 8192) */
    size_t ring_bytes;     /* their encoded bytes per topic (0: 8 MiB) */
    uint32_t chunk_events; /* events per chunk, and rows per store read (0: 512) */
    uint32_t sessions_max; /* logins catching up at once (0: 16384); more get no catch-up */
    uint32_t reads_max;    /* store reads in flight at once (0: 4) */
    uint32_t sends_max;    /* chunks made and not yet applied (0: 32) */
    uint32_t cache_max;    /* (topic, player) offsets cached (0: 65536) */
    uint32_t gets_max;     /* offset reads and writes in flight at once (0: 256) */
    uint64_t flush_ms;     /* acknowledged offsets are written at most this often (0: 1000) */
    uint64_t idle_ms;      /* a session that does not progress this long ends (0: 60 s) */
} cq_route_limits_t;

typedef struct cq_route cq_route_t;

#define CQ_ROUTE_SHARDS_MAX   32         /* shards a binding has a stream on */
#define CQ_ROUTE_NO_SHARD     UINT32_MAX /* cq_route_new: this node bridges no store of its own */
#define CQ_ROUTE_INSTANCE_MAX 100        /* an instance id's bytes (CQ_MQ_INSTANCE_MAX) */

/* A new engine, or NULL on OOM; position as cq_resume's. shard: this node's own (a stream per
 * binding on it, positions in its store), or CQ_ROUTE_NO_SHARD (a relay node). */
cq_route_t *cq_route_new(const cq_route_limits_t *lim, uint32_t shard,
                         cq_resume_position_fn position, void *ud);
/* Adds a followed shard: each binding declared after gets a stream on it too. Returns 0 (also
 * for a shard already there), -EBUSY (bindings are declared: cq_route_topics_clear first) or
 * -ENOSPC (over CQ_ROUTE_SHARDS_MAX). */
int cq_route_add_shard(cq_route_t *r, uint32_t shard);
/* Frees the engine, its rings, cache, sessions and queued actions. Accepts NULL. Dirty offsets
 * not flushed yet are lost (cq_route_flush_all first). */
void cq_route_free(cq_route_t *r);

/* Declares a route binding: topic's events whose top-level JSON field key_field names a player
 * go to that player with msg_type; a stream per shard. Returns 0, -EINVAL, -ENOSPC (more than 64
 * streams: route bindings times shards) or -ENOMEM. cq_route_topics_clear ends every session
 * (FINAL) and forgets every binding; the cache of offsets stays. */
void cq_route_topics_clear(cq_route_t *r);
int cq_route_topic(cq_route_t *r, const char *topic, const char *key_field, uint32_t msg_type);
/* Whether any route binding is declared (logins need a catch-up). */
bool cq_route_active(const cq_route_t *r);

/* The message at offset of topic on shard was invalidated (issue 25): the route rings that hold
 * it keep it but no catch-up delivers it any more. True when a ring held it. */
bool cq_route_drop(cq_route_t *r, const char *topic, uint32_t shard, uint64_t offset);

/* A live event of topic that the bridge routed to key (event borrowed). One call per routed
 * delivery; an event whose content named no player is not given. A binding's ring is trusted
 * only after the first live event it saw (or from its declaration on the engine's thread, when
 * position knows the topic): before that every catch-up reads the store. */
void cq_route_live(cq_route_t *r, const char *topic, uint32_t shard, uint64_t epoch,
                   uint64_t offset, uint64_t prev_offset, const char *key_field, const char *key,
                   cq_buf_t *event);

/* conn_id authenticated as key (the PIT): its catch-up starts; the worker holds its routed
 * events until the FINAL chunk, which always comes (an empty one when nothing is pending). */
void cq_route_login(cq_route_t *r, uint32_t conn_id, const char *key, uint64_t now_ms);
/* conn_id's worker has room for the next chunk. */
void cq_route_more(cq_route_t *r, uint32_t conn_id, uint64_t now_ms);
/* conn_id closed. */
void cq_route_gone(cq_route_t *r, uint32_t conn_id);
/* conn_id, authenticated as key, acknowledged positions (a TopicAckMessage body, borrowed): the
 * player has handled every event up to each position's offset of each route topic. Positions
 * of other topics or of shards without a stream, under another epoch, or beyond the live offset
 * are ignored.
 * Returns 0 or -EINVAL (not a TopicAckMessage, or more than 256 positions). */
int cq_route_ack(cq_route_t *r, const char *key, const void *body, size_t len, uint64_t now_ms);
/* n chunks were applied (or dropped) by their workers (cq_resume_applied's rule). */
void cq_route_applied(cq_route_t *r, uint32_t n, uint64_t now_ms);

/* Store results: the rows of read read_id (offsets ascending, err < 0: failed); an offset read
 * or write (tag from the action; err -ENOENT for a read: never committed). */
void cq_route_rows(cq_route_t *r, uint64_t read_id, int err, const cq_resume_row_t *rows, size_t n,
                   uint64_t now_ms);
void cq_route_offset(cq_route_t *r, uint64_t tag, int err, uint64_t offset, uint64_t now_ms);
/* Writes dirty offsets whose period passed, ends idle sessions, retries failed reads. */
void cq_route_tick(cq_route_t *r, uint64_t now_ms);
/* Writes every dirty offset now (a clean stop). */
void cq_route_flush_all(cq_route_t *r);

/* The consumer id a player's offset is stored under: "bridge/<field>/<key>" when that is
 * printable ASCII of at most 128 bytes, else "bridge#" and a 128-bit hash of "<field>/<key>" in
 * hex (two FNV-1a-64 with different bases: not cryptographic; keys are players' ids). out: at
 * least 129 bytes. */
void cq_route_consumer_id(const char *key_field, const char *key, char *out);
/* The same within CQ_ROUTE_INSTANCE_MAX bytes: the consumer instance a player's offset has on a
 * followed shard (stored there as "m<module>/<instance>"). out: at least 129 bytes. */
void cq_route_instance_id(const char *key_field, const char *key, char *out);

enum { CQ_ROUTE_READ = 1, CQ_ROUTE_SEND, CQ_ROUTE_GET, CQ_ROUTE_COMMIT };

typedef struct cq_route_action {
    int kind;
    /* READ: rows of topic with offset > from, at most max; GET / COMMIT: consumer's offset (an
     * instance id on a followed shard); all of them on shard */
    uint64_t id; /* READ: the read id; GET / COMMIT: the tag */
    uint32_t shard;
    char topic[65];
    char consumer[129];
    uint64_t from;
    uint32_t max;
    uint64_t offset; /* COMMIT */
    /* SEND: events for conn_id; final ends the hold */
    uint32_t conn_id;
    bool final;
    cq_resume_ev_t *evs;
    size_t nevs;
} cq_route_action_t;

/* Takes the oldest pending action (its buffers are the caller's: cq_route_action_done). */
bool cq_route_next(cq_route_t *r, cq_route_action_t *a);
void cq_route_action_done(cq_route_action_t *a);

typedef struct cq_route_stats {
    uint64_t logins, caught_up;                  /* sessions started, and ended with FINAL */
    uint64_t events_ring, events_store;          /* catch-up events by source */
    uint64_t reads, rows_read, reads_shared;     /* store reads, rows, and joins of one in flight */
    uint64_t acks, commits, commit_errors, gets; /* commits: offset writes done */
    uint64_t dropped_idle, refused;              /* sessions cut idle, logins over sessions_max */
    uint32_t sessions, cached, dirty;            /* now */
    uint32_t awaiting_offsets; /* logins whose offsets are being read (reads wait) */
} cq_route_stats_t;
void cq_route_stats(const cq_route_t *r, cq_route_stats_t *st);

#endif
