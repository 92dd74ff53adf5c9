/* bridge_int.h - src/bridge's internals, shared by its files:
 *
 *   bindings.c  cq_bindings_parse/free: the bindings document and its exact errors
 *   event.c     cq_topic_event_encode: TopicEvent protobuf bytes into a cq_buf
 *   dedup.c     the dedup window: a ring of fixed slots plus a chained hash index
 *   bridge.c    the engine: topics, route keys, outputs, counters
 *   resume.c    the resume engine (cq_resume.h); route.c the route catch-up (cq_route.h): both
 *               pace their chunks with cq__pace_t below
 */
#ifndef CQ_BRIDGE_INT_H
#define CQ_BRIDGE_INT_H

#include "cq_bridge.h"
#include "cq_list.h"

#include <protobuf-c/protobuf-c.h>

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

/* ---- shared by the resume and route engines (resume.c, route.c) --------------------------- */

/* protobuf-c through cq_malloc (event.c). */
extern ProtobufCAllocator cq__bridge_pb;
/* The TopicEvent bytes ev (borrowed) again with prev_offset: a new buffer (one reference), or
 * NULL (out of memory, or ev does not unpack). */
cq_buf_t *cq__topic_event_reprev(const cq_buf_t *ev, uint64_t prev_offset);

/* Chunk pacing (cq_resume_applied, cq_route_applied): places for chunks, taken by sessions
 * about to make one (held) and by chunks made and not yet applied (in_flight), at most max;
 * the sessions that found none wait in `ready`, first come first served. */
typedef struct cq__pace {
    cq_list_t ready;
    uint32_t nready, held, in_flight, max;
    uint64_t progress_ms; /* when a chunk was last made or applied */
} cq__pace_t;

static inline void cq__pace_init(cq__pace_t *p, uint32_t max)
{
    cq_list_init(&p->ready);
    p->nready = p->held = p->in_flight = 0;
    p->max = max;
    p->progress_ms = 0;
}

/* Whether a new chunk must wait: no free place, or others wait before it. */
static inline bool cq__pace_must_wait(const cq__pace_t *p)
{
    return p->held + p->in_flight >= p->max || !cq_list_empty(&p->ready);
}

static inline void cq__pace_wait(cq__pace_t *p, cq_list_t *node)
{
    cq_list_insert_tail(&p->ready, node);
    p->nready++;
}

/* node leaves the queue, if it is in it (an unlinked node points to itself). */
static inline void cq__pace_unwait(cq__pace_t *p, cq_list_t *node)
{
    if (node->next != node) {
        cq_list_remove(node);
        p->nready--;
    }
}

/* The next waiter when a place is free, taken off the queue; NULL otherwise. */
static inline cq_list_t *cq__pace_next(cq__pace_t *p)
{
    if (cq_list_empty(&p->ready) || p->held + p->in_flight >= p->max)
        return NULL;
    cq_list_t *n = p->ready.next;
    cq_list_remove(n);
    p->nready--;
    return n;
}

/* A chunk was made (now_ms): it takes a place, the one its session held if held. */
static inline void cq__pace_sent(cq__pace_t *p, bool held, uint64_t now_ms)
{
    if (held)
        p->held--;
    p->in_flight++;
    p->progress_ms = now_ms;
}

static inline void cq__pace_applied(cq__pace_t *p, uint32_t n, uint64_t now_ms)
{
    p->in_flight -= n < p->in_flight ? n : p->in_flight;
    p->progress_ms = now_ms;
}

/* Chunks that never came back (a worker dropped one without counting it) must not stop every
 * session: after idle_ms without progress while some wait, their places are taken back.
 * Returns how many. */
static inline uint32_t cq__pace_reclaim(cq__pace_t *p, uint64_t now_ms, uint64_t idle_ms)
{
    if (!p->in_flight || cq_list_empty(&p->ready) || now_ms - p->progress_ms < idle_ms)
        return 0;
    uint32_t n = p->in_flight;
    p->in_flight = 0;
    p->progress_ms = now_ms;
    return n;
}

#endif
