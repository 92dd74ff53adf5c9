/* chanq_topics.h - libchanq: the client's side of durable-topic resume (issue 24, doc/bridge.md).
 *
 * chanqd's bridge delivers each committed message of a bound durable topic into a channel as a
 * user-space message whose body is a chanqpb.TopicEvent (chanq_topic_event_decode). A client
 * that lost its connection asks for what it missed with a TopicResumeMessage (type 90) on that
 * channel once it has authenticated and subscribed again; chanqd answers with a
 * TopicResumeResultMessage (type 91, the body is the message itself, not a
 * ServerForwardMessage), then sends the missed events of the resumed topics and the live ones,
 * in order per (topic, shard), each once. Before the result, live events of the old stream may
 * still arrive, some ahead of a hole and some the catch-up repeats.
 *
 * A tracker (one per app; it outlives connections and clients) holds one position per (topic,
 * shard): the epoch and offset of the last event the app handled, and the channel it came on.
 * chanq_topics_accept() tells, for each decoded TopicEvent, whether the app handles it:
 *   1. a non-empty (producer_id, seq) of the same topic among the last CHANQ_TOPICS_WINDOW keys
 *      the tracker accepted: drop (a producer's retry stored on two shards). Keys are scoped by
 *      topic, as the server scopes them (doc/protocol-mq.md: "per topic and producer_id").
 *   2. no position for (topic, shard) yet: accept; the position becomes (epoch, offset).
 *   3. another epoch than the position's: accept; the position becomes (epoch, offset) (a new
 *      history: the resume result's recovered flag is how the app learns of a rewrite).
 *   4. offset <= the position's offset: drop (a duplicate).
 *   5. prev_offset == the position's offset: accept; the position moves to offset.
 *   6. otherwise a hole: while a resume of the event's channel is pending (sent, its result not
 *      received) drop it (the catch-up brings it: counted as skipped); else accept and move
 *      to offset (nothing better is possible: counted as a hole).
 * Only an accepted event's key enters the window.
 *
 * Memory is bounded: at most CHANQ_TOPICS_MAX_POSITIONS positions (allocated with the tracker,
 * about 100 KiB) and a window of CHANQ_TOPICS_WINDOW keys (about 360 KiB, allocated on the
 * first keyed event). Nothing is allocated per event.
 *
 * Threads: a tracker belongs to one thread at a time. Errors: negative codes (cq_err.h).
 */
#ifndef CHANQ_TOPICS_H
#define CHANQ_TOPICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chanq.h"

/* The bridge's message types below the user space (doc/bridge.md). */
#define CHANQ_MSG_TOPIC_RESUME        90u /* client to server: TopicResumeMessage */
#define CHANQ_MSG_TOPIC_RESUME_RESULT 91u /* server to client: TopicResumeResultMessage */
#define CHANQ_MSG_TOPIC_ACK           92u /* client to server: TopicAckMessage, channel 0 */

#define CHANQ_TOPICS_MAX_POSITIONS 1024u /* (topic, shard) pairs a tracker holds */
#define CHANQ_TOPICS_WINDOW        4096u /* (topic, producer_id, seq) keys remembered */
#define CHANQ_TOPICS_TOPIC_MAX     64u   /* a topic name: [A-Za-z0-9_], 1 to 64 characters */
#define CHANQ_TOPICS_PRODUCER_MAX  64u   /* a producer_id's length (the bridge's limit too) */

typedef struct chanq_topics chanq_topics_t;

/* A position: the app has handled every event of (topic, shard) under epoch up to offset. */
typedef struct chanq_topic_pos {
    uint64_t epoch;
    uint64_t offset;
    uint32_t channel; /* the channel of its last accepted event (or of the result that set it) */
} chanq_topic_pos_t;

typedef struct chanq_topics_stats {
    uint64_t accepted;      /* events accepted (rules 2, 3, 5 and 6 outside a resume) */
    uint64_t duplicates;    /* dropped by rule 1 (key in the window) or rule 4 (old offset) */
    uint64_t holes;         /* accepted over a hole, no resume pending (rule 6) */
    uint64_t skipped;       /* dropped over a hole while a resume was pending (rule 6) */
    uint64_t epoch_changes; /* accepted under another epoch than the position's (rule 3) */
    size_t positions;       /* positions held */
    size_t keys;            /* keys in the window (at most CHANQ_TOPICS_WINDOW) */
} chanq_topics_stats_t;

/* A new, empty tracker (owned: free with chanq_topics_free), or NULL on OOM. */
chanq_topics_t *chanq_topics_new(void);
/* Frees the tracker. Accepts NULL. Returns NULL. */
chanq_topics_t *chanq_topics_free(chanq_topics_t *t);

/* Decides whether the app handles ev (borrowed), received on channel: 1 accept (the position
 * and the window are updated), 0 drop (nothing changes but the counters). Errors, after which
 * nothing changed: -EINVAL (t or ev NULL), CQ_EBADTOPIC (the topic is not a topic name),
 * CQ_EFIELD (producer_id longer than CHANQ_TOPICS_PRODUCER_MAX), CQ_ELIMIT (a new (topic,
 * shard) while CHANQ_TOPICS_MAX_POSITIONS are held), -ENOMEM (the window's first allocation). */
int chanq_topics_accept(chanq_topics_t *t, uint32_t channel, const Chanqpb__TopicEvent *ev);

/* Queues a TopicResumeMessage (type 90) on c: channel id channel (0: GLOBAL), stub 0,
 * broadcast 0, one TopicPosition per (topic, shard) whose position is on that channel (in the
 * order the positions were first made; none is a valid resume). Then the channel is resume-
 * pending until chanq_topics_on_result() for it (resuming a pending channel again is allowed:
 * it stays pending once). Send it after AUTH and SUB_TO_CHANNEL of the new connection.
 * Returns 0, -EINVAL (t or c NULL), CQ_ELIMIT (CHANQ_TOPICS_MAX_POSITIONS other channels are
 * pending), -ENOMEM, or chanq_client_send's CQ_ETOOBIG (over 65535 bytes: about 700 positions
 * of 64-character topics); on an error nothing is queued and the pending mark is unchanged.
 * Resume after the first SUB too, with no position: the result's positions are the baseline
 * (doc/bridge.md "Resume"), so a drop before the first event of some shard still resumes. */
int chanq_topics_resume(chanq_topics_t *t, chanq_client_t *c, uint32_t channel);

/* Whether a resume of channel is pending. */
bool chanq_topics_pending(const chanq_topics_t *t, uint32_t channel);

/* Takes the body (borrowed) of a TopicResumeResultMessage (type 91) received on channel: the
 * channel is no longer pending, *recovered (may be NULL) is the result's flag, and each of its
 * positions is applied: when recovered is false or the epoch differs from ours, ours becomes
 * the result's; when recovered and the epoch is the same, ours is the larger offset. A position
 * the tracker did not hold is made, on channel. The error text is kept for
 * chanq_topics_result_error(). recovered false means the app reloads its state from its own
 * backend. Returns 0; CQ_EDECODE when the body does not parse, or unpacking it ran out of
 * memory (the channel is no longer pending either, *recovered is false and the error text "":
 * treat it as not recovered); CQ_EBADTOPIC or CQ_ELIMIT for a position that could not be
 * applied (the others are: the first such error is returned); -ENOMEM copying the error text
 * (nothing changed); -EINVAL (t NULL, or body NULL with len > 0). */
int chanq_topics_on_result(chanq_topics_t *t, uint32_t channel, const void *body, size_t len,
                           bool *recovered);

/* The error text of the last result taken ("" when none or recovered). Borrowed: valid until
 * the next chanq_topics_on_result or chanq_topics_free. */
const char *chanq_topics_result_error(const chanq_topics_t *t);

/* Queues a TopicAckMessage (type 92) on c, channel 0, stub 0: every position the tracker holds
 * ("handled everything up to these", for routed bindings). Returns like chanq_topics_resume. */
int chanq_topics_ack(const chanq_topics_t *t, chanq_client_t *c);

/* The position of (topic, shard) into *ret. Returns 0, -ENOENT (none) or -EINVAL (a NULL). */
int chanq_topics_position(const chanq_topics_t *t, const char *topic, uint32_t shard,
                          chanq_topic_pos_t *ret);

/* Copies the counters into *ret. */
void chanq_topics_stats(const chanq_topics_t *t, chanq_topics_stats_t *ret);

#endif
