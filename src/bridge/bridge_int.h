/* bridge_int.h - src/bridge's internals, shared by its files:
 *
 *   bindings.c  cq_bindings_parse/free: the bindings document and its exact errors
 *   event.c     cq_topic_event_encode: TopicEvent protobuf bytes into a cq_buf
 *   dedup.c     the dedup window: a ring of fixed slots plus a chained hash index
 *   bridge.c    the engine: topics, route keys, outputs, counters
 */
#ifndef CQ_BRIDGE_INT_H
#define CQ_BRIDGE_INT_H

#include "cq_bridge.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the dedup window (dedup.c) ---------------------------------------------------------
 * The last `window` keyed events of one topic: a FIFO ring of fixed slots (the producer id is
 * copied into the slot, so nothing is allocated per event) and a hash index over it (chains
 * of slot indices), so a lookup costs one chain walk and the oldest entry leaves when a new
 * one arrives into a full ring. The memory (about 100 bytes per slot) is allocated once, on
 * the topic's first keyed event: a topic whose producers send no key costs nothing. */

#define CQ__DEDUP_NIL UINT32_MAX

typedef struct cq__dedup_slot {
    uint64_t seq;
    uint32_t hash;
    uint32_t next; /* the next slot of the same bucket, or CQ__DEDUP_NIL */
    uint8_t idlen;
    char id[CQ_BRIDGE_PRODUCER_MAX];
} cq__dedup_slot_t;

typedef struct cq__dedup {
    cq__dedup_slot_t *slots; /* window entries; NULL until cq__dedup_reserve */
    uint32_t *buckets;       /* nbuckets chain heads (slot index or CQ__DEDUP_NIL) */
    uint32_t window;         /* slots; 0: deduplication off */
    uint32_t nbuckets;       /* a power of two, >= window */
    uint32_t head;           /* the oldest slot */
    uint32_t count;          /* slots in use */
} cq__dedup_t;

/* Sets up an empty window of `window` slots (nothing allocated yet). */
void cq__dedup_init(cq__dedup_t *d, uint32_t window);
/* Frees the window's memory. Accepts a zeroed or never reserved window. */
void cq__dedup_done(cq__dedup_t *d);
/* True if (id[0..idlen), seq) is in the window. idlen <= CQ_BRIDGE_PRODUCER_MAX. */
bool cq__dedup_seen(const cq__dedup_t *d, const char *id, size_t idlen, uint64_t seq);
/* Allocates the window's memory if it has none (and window > 0). 0 or -ENOMEM. */
int cq__dedup_reserve(cq__dedup_t *d);
/* Remembers (id, seq), forgetting the oldest entry when the window is full. Needs a
 * successful cq__dedup_reserve; does nothing when window is 0. Never allocates. */
void cq__dedup_add(cq__dedup_t *d, const char *id, size_t idlen, uint64_t seq);

#endif
