/* cq_resume.h - the resume engine (issue 24, doc/bridge.md "Resume"): a client that dropped
 * gives its positions (TopicResumeMessage) and gets every event of the broadcast-bound topics
 * it missed, in order per topic and once, then the live ones. Sans-I/O: no sockets, no loop,
 * no threads, no clock (now comes in), no globals. It lives on the thread that sees the
 * topics' commits (the MQ engine's), beside the bridge engine.
 *
 * What it keeps:
 *   - per declared topic, a ring of the latest live events (their encoded TopicEvents, shared
 *     with the live fan-out), which serves most catch-ups without reading the store;
 *   - per resuming connection, a session: a cursor per topic (the last offset the client has),
 *     advanced chunk by chunk, each chunk only when the connection's worker asks for more
 *     (cq_resume_more), so a client far behind is paced by its own send queue.
 *
 * What it asks for, as actions the caller polls (cq_resume_next):
 *   - CQ_RESUME_READ: read rows of a topic on a shard after an offset: from the store (on the
 *     store's reader thread, never on a worker), or from a followed shard's server (a consume);
 *     the rows come back through cq_resume_rows;
 *   - CQ_RESUME_SEND: a chunk for a connection: the TopicResumeResultMessage (in the first
 *     chunk, CQ_RESUME_F_BEGIN), then events in order per topic; CQ_RESUME_F_FINAL on the chunk
 *     that reaches the live stream.
 *
 * The switch (doc/threads.md "Bridge resume"): every chunk goes to GLOBAL's worker, behind
 * the live events the caller posted before it, and from there to the connection's worker. The
 * BEGIN chunk's result is computed, and the FINAL chunk ends, at the topic's last live offset
 * at the moment it is made (position()), so the live events up to it are ahead of it on that
 * path and the later ones behind it. The connection's worker holds back the live events between
 * BEGIN and FINAL, which the chunks carry instead.
 *
 * Threads: one thread only; the buffers handed out may go to any thread.
 */
#ifndef CQ_RESUME_H
#define CQ_RESUME_H

#include "cq_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Message types (doc/protocol.md "chanq's own message types"). */
#define CQ_MT_TOPIC_RESUME        90
#define CQ_MT_TOPIC_RESUME_RESULT 91
#define CQ_MT_TOPIC_ACK           92

#define CQ_RESUME_POSITIONS_MAX 256 /* positions one TopicResumeMessage may carry */

typedef struct cq_resume_limits {
    uint32_t ring_events;  /* live events kept per topic (0: 8192) */
    size_t ring_bytes;     /* their encoded bytes per topic (0: 8 MiB) */
    uint32_t chunk_events; /* events per chunk, and rows per store read (0: 512) */
    size_t chunk_bytes;    /* bytes of events per chunk (0: 256 KiB); one larger event goes alone */
    uint32_t sessions_max; /* resumes in progress at once (0: 16384); more are refused */
    uint32_t reads_max;    /* store reads in flight at once (0: 4); more wait their turn */
    uint32_t sends_max;    /* chunks made and not yet applied (0: 32); more wait their turn */
    uint64_t idle_ms;      /* a session that does not progress this long is dropped (0: 60 s) */
} cq_resume_limits_t;

/* Shards one engine resumes: this node's own and the ones its bridge follows. */
#define CQ_RESUME_SHARDS_MAX 17

/* The place of a topic on a shard, from whatever hands the bridge that shard's events (the MQ
 * engine for this node's own shard, the follower for another): the shard's epoch and the
 * offset of the last event handed to the bridge (live), 0 when none. Returns false for an
 * unknown topic or shard. */
typedef bool (*cq_resume_position_fn)(void *ud, const char *topic, uint32_t shard, uint64_t *epoch,
                                      uint64_t *pushed);

typedef struct cq_resume cq_resume_t;

/* A new engine for the topics of shard (this node's own), or NULL on OOM. position is called
 * on the engine's thread, from the calls below. */
cq_resume_t *cq_resume_new(const cq_resume_limits_t *lim, uint32_t shard,
                           cq_resume_position_fn position, void *ud);
/* Another shard whose events the engine is given too (one the bridge follows): each topic
 * declared from then on has a stream per shard, with its own ring and cursor; a client's
 * position names its shard. Before any topic is declared: 0, -EBUSY (topics are declared),
 * -ENOSPC (over CQ_RESUME_SHARDS_MAX). */
int cq_resume_add_shard(cq_resume_t *r, uint32_t shard);
/* Frees the engine, its rings, sessions and queued actions. Accepts NULL. */
void cq_resume_free(cq_resume_t *r);

/* Declares a broadcast-bound topic delivered on channel chan_id (0: GLOBAL, else its "topic"
 * channel) with msg_type (a reload declares them again: a topic no longer declared keeps
 * nothing; sessions lose it), one stream per shard. Returns 0, -EINVAL, -EEXIST (the topic is
 * declared on another channel: one channel per topic), -ENOSPC (more than 256 streams) or
 * -ENOMEM.
 * cq_resume_topics_clear forgets every declaration first. */
void cq_resume_topics_clear(cq_resume_t *r);
int cq_resume_topic(cq_resume_t *r, const char *topic, uint32_t chan_id, uint32_t msg_type);

/* A live event of a declared topic on shard, in the order the bridge delivered it (event
 * borrowed: the ring takes its own reference). Other topics and shards are ignored. */
void cq_resume_live(cq_resume_t *r, const char *topic, uint32_t shard, uint64_t epoch,
                    uint64_t offset, uint64_t prev_offset, cq_buf_t *event);
/* The message at offset of topic on shard was invalidated (issue 25): its event leaves the ring,
 * so no resume served from memory delivers it; the event after it is re-encoded with its prev
 * (a store read skips the invalid row the same way). True when the ring held it. */
bool cq_resume_drop(cq_resume_t *r, const char *topic, uint32_t shard, uint64_t offset);

/* A store row, everything borrowed for the call. */
typedef struct cq_resume_row {
    uint64_t offset;
    int64_t time_ms;
    uint64_t producer_id; /* 0: none */
    uint64_t seq;
    const uint8_t *content;
    size_t len;
} cq_resume_row_t;

/* conn_id's TopicResumeMessage sent on channel chan_id (body borrowed): the topics bound to
 * that channel resume. Every outcome is an action: a refusal (a channel with no topic, among
 * others) is a BEGIN|FINAL chunk whose result says why. */
void cq_resume_request(cq_resume_t *r, uint32_t conn_id, uint32_t chan_id, const void *body,
                       size_t len, uint64_t now_ms);
/* conn_id's worker has room for the next chunk. */
void cq_resume_more(cq_resume_t *r, uint32_t conn_id, uint64_t now_ms);
/* conn_id closed: its session ends (a read in flight is discarded when it comes back). */
void cq_resume_gone(cq_resume_t *r, uint32_t conn_id);
/* The rows of read read_id (offsets ascending, all after the read's from), or its error
 * (err < 0, rows ignored). */
void cq_resume_rows(cq_resume_t *r, uint64_t read_id, int err, const cq_resume_row_t *rows,
                    size_t n, uint64_t now_ms);
/* n chunks were applied by their connections' workers (or dropped on the way): their places
 * go to the sessions waiting for one, in order. Every SEND action must come back here once,
 * whatever became of it: this is what paces the chunks, so that a mass reconnect hands the
 * workers at most sends_max chunks at a time and they take their other work in between. */
void cq_resume_applied(cq_resume_t *r, uint32_t n, uint64_t now_ms);
/* Drops sessions idle past idle_ms; retries failed reads. */
void cq_resume_tick(cq_resume_t *r, uint64_t now_ms);

enum { CQ_RESUME_READ = 1, CQ_RESUME_SEND = 2 };
enum { CQ_RESUME_F_BEGIN = 1, CQ_RESUME_F_FINAL = 2 };

/* One event of a chunk: its TopicEvent bytes (one reference, the action's) and the msg_type it
 * is delivered with. */
typedef struct cq_resume_ev {
    cq_buf_t *event;
    uint32_t msg_type;
} cq_resume_ev_t;

typedef struct cq_resume_action {
    int kind;
    /* READ */
    uint64_t read_id;
    char topic[65];
    uint32_t shard; /* whose rows: this node's store, or a followed shard's servers */
    uint64_t from;  /* rows with offset > from */
    uint32_t max;
    /* SEND */
    uint32_t conn_id;
    uint32_t chan_id; /* the channel the request came on, where the chunks go */
    uint32_t flags;   /* CQ_RESUME_F_* */
    cq_buf_t *result; /* BEGIN: TopicResumeResultMessage bytes (the action's reference) */
    cq_resume_ev_t *evs;
    size_t nevs;
} cq_resume_action_t;

/* Takes the oldest pending action into *a (its buffers and evs array are the caller's:
 * cq_resume_action_done). Returns false when none is pending. */
bool cq_resume_next(cq_resume_t *r, cq_resume_action_t *a);
/* Releases what an action holds. Accepts a zeroed action. */
void cq_resume_action_done(cq_resume_action_t *a);

typedef struct cq_resume_stats {
    uint64_t requests, recovered, not_recovered, refused;
    uint64_t events_ring, events_store; /* catch-up events by source */
    uint64_t reads;                     /* store reads asked for */
    uint64_t dropped_idle;
    uint64_t credits_lost; /* chunks presumed lost: none was applied for idle_ms */
    uint32_t sessions;     /* in progress now */
    uint32_t sends_out;    /* chunks made and not yet applied */
    uint32_t send_waiting; /* sessions waiting for a place among them */
} cq_resume_stats_t;
void cq_resume_stats(const cq_resume_t *r, cq_resume_stats_t *st);

#endif
