/* cq_bridge.h - the bridge engine (issue 24, doc/bridge.md): durable-topic events delivered
 * into channels. Sans-I/O: no sockets, no loop, no threads, no clock, no globals.
 *
 * Three parts:
 *   - bindings: the parsed bindings file (or the manager's publish_config), each connecting a
 *     topic to a target: a broadcast channel (GLOBAL, or the channel "topic:<topic>") or a route
 *     to one player, keyed by a top-level JSON field of the message;
 *   - cq_topic_event_encode: a committed message as TopicEvent protobuf bytes
 *     (proto/bridge.proto), encoded once into a refcounted cq_buf;
 *   - the engine: for each committed message of a bound topic, drops the second copy of a
 *     (producer_id, seq) within a bounded window (a producer's retry can store one key on two
 *     shards), encodes the event once and returns one output per binding that applies, each
 *     holding its own reference to the one encoded buffer.
 *
 * Topic names compare ASCII case-insensitively, as the store compares them ("VIP" and "vip"
 * are one topic).
 *
 * Threads: cq_bindings_parse and cq_topic_event_encode may run on any thread and keep no state.
 * A cq_bridge_t belongs to one thread (the one that sees the topics' commits); the buffers it
 * returns may be handed to any thread (cq_buf references are atomic). Nothing calls back.
 *
 * JSON goes through jansson, which allocates with malloc unless json_set_alloc_funcs() was
 * called (the tests route it to cq_malloc).
 */
#ifndef CQ_BRIDGE_H
#define CQ_BRIDGE_H

#include "cq_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_BRIDGE_BINDINGS_MAX 256        /* bindings in one file */
#define CQ_BRIDGE_FILE_MAX     (1u << 20) /* bytes of a bindings file */
#define CQ_BRIDGE_MSG_TYPE_MIN 100        /* channeld's user-space message types start here */
#define CQ_BRIDGE_MSG_TYPE_MAX 65535
#define CQ_BRIDGE_FIELD_MAX    64  /* bytes of a route's field name */
#define CQ_BRIDGE_KEY_MAX      127 /* bytes of a routed player's key */
/* Bytes of a producer id. src/mq's producer ids are u53 numbers (at most 16 decimal digits);
 * the bound leaves room for other producers' ids and bounds each dedup slot. */
#define CQ_BRIDGE_PRODUCER_MAX 64
/* The largest dedup window (events per topic); a larger one is taken as this. A topic's
 * window costs about 100 bytes per event, allocated on its first keyed event. */
#define CQ_BRIDGE_DEDUP_MAX (1u << 16)
/* Shards per topic whose dropped duplicates the engine hides from prev_offset (see
 * cq_bridge_event); a topic on more shards shows a dropped copy of the others as a hole. */
#define CQ_BRIDGE_SHARDS_MAX 32

/* ---- bindings --------------------------------------------------------------------------- */

typedef enum { CQ_BIND_BROADCAST = 1, CQ_BIND_ROUTE = 2 } cq_bind_kind_t;

/* One binding. Its strings are owned by the cq_bindings_t that holds it. */
typedef struct cq_binding {
    char *topic; /* a valid topic name (src/mq's rule: [A-Za-z0-9_], 1 to 64 characters) */
    cq_bind_kind_t kind;
    char *channel;     /* broadcast: "global" (GLOBAL) or "topic" (the channel named
                        * topic:<topic>); route: NULL */
    char *key;         /* route: the top-level JSON field of the content naming the player
                        * (matched to the PIT or an auth claim), 1 to CQ_BRIDGE_FIELD_MAX bytes;
                        * broadcast: NULL */
    uint32_t msg_type; /* the user-space msgType the events are delivered with, 100..65535 */
} cq_binding_t;

/* An array of bindings: v[0..n) owned, in the file's order. */
typedef struct cq_bindings {
    cq_binding_t *v;
    size_t n;
} cq_bindings_t;

/* Parses a bindings document (json[0..len), borrowed; NULL with len 0 is empty input):
 *
 *   {"bindings":[{"topic":"vip","route":"user_id","msg_type":201},
 *                {"topic":"release","broadcast":"global","msg_type":200}]}
 *
 * Rules: at most CQ_BRIDGE_FILE_MAX bytes; an object whose only key is "bindings", an array
 * of at most CQ_BRIDGE_BINDINGS_MAX objects; each has "topic" (a valid topic name), exactly one
 * of "broadcast" ("global" or "topic") and "route" (a field name of 1 to CQ_BRIDGE_FIELD_MAX
 * bytes), and "msg_type" (an integer from 100 to 65535), and no other key; no two
 * bindings have the same topic and target (msg_type aside). Duplicate keys in an object are
 * refused as invalid JSON.
 *
 * On success returns 0 and fills *out (owned by the caller: cq_bindings_free). On failure
 * returns CQ_ECONFIG, or -ENOMEM, leaves *out untouched and writes into err (if err and errlen)
 * a message naming the binding by its 0-based index and the field, e.g.
 *   binding 2: "msg_type" must be an integer from 100 to 65535
 * doc/bridge.md lists every message. */
int cq_bindings_parse(const char *json, size_t len, cq_bindings_t *out, char *err, size_t errlen);
/* Frees the bindings and their strings and zeroes *b. Accepts NULL and an empty array. */
void cq_bindings_free(cq_bindings_t *b);

/* ---- the event -------------------------------------------------------------------------- */

/* A committed message of a durable topic (proto/bridge.proto TopicEvent has the meaning of
 * each field). Everything is borrowed for the call; producer_id NULL is taken as "" (no
 * idempotence key); content may be NULL when len is 0. */
typedef struct cq_topic_event {
    const char *topic;
    uint32_t shard;
    uint64_t epoch, offset, prev_offset;
    int64_t time_ms;
    const char *producer_id;
    uint64_t seq;
    const uint8_t *content;
    size_t len;
} cq_topic_event_t;

/* Encodes ev as the protobuf bytes of a TopicEvent into a new buffer (returned owned, one
 * reference). Returns NULL on OOM or when the bytes would not fit a cq_buf (4 GiB). */
cq_buf_t *cq_topic_event_encode(const cq_topic_event_t *ev);

/* ---- the engine ------------------------------------------------------------------------- */

typedef struct cq_bridge cq_bridge_t;

/* One delivery an event yields: the binding it follows, the player's key for a route, and the
 * encoded TopicEvent. */
typedef struct cq_bridge_out {
    const cq_binding_t *b;           /* borrowed from the bridge: valid while it lives */
    char key[CQ_BRIDGE_KEY_MAX + 1]; /* route: the player's key as text; broadcast: "" */
    cq_buf_t *event;                 /* one reference, owned by the caller, who must unref it */
    uint64_t prev_offset;            /* the prev_offset the event was encoded with */
} cq_bridge_out_t;

/* Counters since cq_bridge_new. */
typedef struct cq_bridge_stats {
    uint64_t events;     /* events of bound topics handled, duplicates included */
    uint64_t outputs;    /* outputs returned */
    uint64_t duplicates; /* events dropped as duplicates (counted in events too) */
    uint64_t unroutable; /* (event, route binding) pairs that gave no key: content not JSON
                          * or not an object, field missing, not a string or an integer,
                          * empty or longer than CQ_BRIDGE_KEY_MAX */
} cq_bridge_stats_t;

/* Returns a new engine over the bindings (taken: *b is zeroed, on failure too, when the
 * bindings are freed), or NULL on OOM. dedup_window: how many of a topic's latest keyed
 * events (non-empty producer_id) are remembered to drop duplicates; 0 turns deduplication
 * off; above CQ_BRIDGE_DEDUP_MAX it is CQ_BRIDGE_DEDUP_MAX. */
cq_bridge_t *cq_bridge_new(cq_bindings_t *b, uint32_t dedup_window);
/* Frees the engine and its bindings. Outputs already returned keep their buffers, but their
 * binding pointers die with it. Accepts NULL. */
void cq_bridge_free(cq_bridge_t *br);

/* The engine's bindings (borrowed, read-only, valid while br lives). */
const cq_bindings_t *cq_bridge_bindings(const cq_bridge_t *br);
/* True if some binding names topic (NUL-terminated, borrowed; case-insensitive). */
bool cq_bridge_watches(const cq_bridge_t *br, const char *topic);
/* The bound topics, each once, in the order of their first binding: for (i = 0; i <
 * cq_bridge_ntopics(br); i++) cq_bridge_topic(br, i). The name is borrowed from the bindings;
 * i out of range gives NULL. */
size_t cq_bridge_ntopics(const cq_bridge_t *br);
const char *cq_bridge_topic(const cq_bridge_t *br, size_t i);
/* The most bindings one topic has: an out array of this size is always large enough. */
size_t cq_bridge_outputs_max(const cq_bridge_t *br);

/* Handles one committed message (ev borrowed for the call). Returns the number of outputs
 * written to out[0..n), one per binding of the topic that applies, in the bindings' order: a
 * broadcast binding always applies; a route binding applies when the content is a JSON object
 * whose top-level field b->key is a string (taken as it is) or an integer (its decimal text),
 * else it counts one unroutable. The TopicEvent is encoded once; each output holds its own
 * reference.
 *
 * Returns 0 (and writes nothing) when the topic has no binding, when no binding applies, or
 * when the event is a duplicate: its non-empty producer_id and seq were seen among the last
 * dedup_window keyed events of the same topic. An event with an empty producer_id is never a
 * duplicate. A dropped duplicate leaves no hole: the shard's next event that names it as
 * prev_offset is encoded with the prev_offset the duplicate had (the last one of the shard
 * that was not dropped), so a receiver whose position is that offset accepts it.
 *
 * Errors, after which nothing was counted, remembered or returned: -EINVAL (ev or its topic
 * NULL, or content NULL with len > 0), CQ_EFIELD (producer_id longer than
 * CQ_BRIDGE_PRODUCER_MAX), -ENOSPC (cap below the topic's binding count), -ENOMEM. */
int cq_bridge_event(cq_bridge_t *br, const cq_topic_event_t *ev, cq_bridge_out_t *out, size_t cap);
/* Copies the counters into *ret_stats. */
void cq_bridge_stats(const cq_bridge_t *br, cq_bridge_stats_t *ret_stats);

/* The player key content names in its top-level field (as the engine routes: a non-empty
 * string of at most CQ_BRIDGE_KEY_MAX bytes, or an integer's decimal text) into key
 * (CQ_BRIDGE_KEY_MAX + 1 bytes). Returns 1, 0 when content names none (not a JSON object, no
 * such field, another type), or -ENOMEM. Any thread. */
int cq_bridge_route_key(const uint8_t *content, size_t len, const char *field, char *key);

#endif
