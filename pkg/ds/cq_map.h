/* cq_map.h - uint32 key -> pointer hash map, open addressing with backward-shift deletion.
 *
 * Not thread-safe: each map is owned by one thread. Values are borrowed pointers; the map never
 * frees them. Iteration order is unspecified. The map must not be modified during a
 * cq_map_next walk: a caller that deletes restarts the walk (iter = 0) afterwards.
 */
#ifndef CQ_MAP_H
#define CQ_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cq_map_slot {
    uint32_t key;
    uint32_t used;
    void *val;
} cq_map_slot_t;

typedef struct cq_map {
    cq_map_slot_t *slots;
    uint32_t cap; /* power of two, 0 when empty */
    uint32_t count;
} cq_map_t;

void cq_map_init(cq_map_t *m);
/* Frees the slot array; values are not touched. */
void cq_map_done(cq_map_t *m);
void *cq_map_get(const cq_map_t *m, uint32_t key);
/* Inserts or replaces. Returns 0 or -ENOMEM. */
int cq_map_put(cq_map_t *m, uint32_t key, void *val);
/* Returns the removed value or NULL. */
void *cq_map_del(cq_map_t *m, uint32_t key);
static inline uint32_t cq_map_count(const cq_map_t *m)
{
    return m->count;
}

/* Iteration: for (uint32_t i = 0; cq_map_next(m, &i, &k, &v);) { ... } */
int cq_map_next(const cq_map_t *m, uint32_t *iter, uint32_t *ret_key, void **ret_val);

#endif
