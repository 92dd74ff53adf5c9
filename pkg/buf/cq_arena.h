/* cq_arena.h - bump allocator with a byte cap, freed in one step.
 *
 * Used per inbound frame: protobuf-c unpacks into it, and cq_arena_reset() drops everything when
 * dispatch returns. Allocation fails (NULL) once the cap would be exceeded, so a hostile message
 * cannot make the decoder allocate without bound. Owned by one thread.
 */
#ifndef CQ_ARENA_H
#define CQ_ARENA_H

#include <stddef.h>

typedef struct cq_arena_blk cq_arena_blk_t;

typedef struct cq_arena {
    cq_arena_blk_t *blocks;
    size_t used;  /* bytes handed out since the last reset */
    size_t limit; /* cap on used */
} cq_arena_t;

void cq_arena_init(cq_arena_t *a, size_t limit);
/* Returns 8-byte aligned memory valid until reset/done, or NULL over the cap / on OOM. */
void *cq_arena_alloc(cq_arena_t *a, size_t n);
/* Frees every block but the first and rewinds. */
void cq_arena_reset(cq_arena_t *a);
void cq_arena_done(cq_arena_t *a);

#endif
