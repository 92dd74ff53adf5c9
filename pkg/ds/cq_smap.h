/* cq_smap.h - string key -> pointer hash map, open addressing with backward-shift deletion.
 *
 * Keys are borrowed: the map keeps the caller's pointer (usually the name inside the value it
 * maps to), which must stay valid and unchanged while the entry is in the map. With fold_case
 * the map compares and hashes keys with ASCII letters folded to lower case, so "Orders" and
 * "orders" are one key (as durable-topic names are: the store compares them with strcasecmp);
 * bytes above 0x7f are compared as they are.
 *
 * Not thread-safe: each map is owned by one thread. Values are borrowed pointers; the map never
 * frees them. Iteration order is unspecified. The map must not be modified during a
 * cq_smap_next walk.
 */
#ifndef CQ_SMAP_H
#define CQ_SMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_smap_slot {
    const char *key; /* borrowed; NULL: empty slot */
    void *val;
    uint32_t hash;
} cq_smap_slot_t;

typedef struct cq_smap {
    cq_smap_slot_t *slots;
    uint32_t cap; /* power of two, 0 when empty */
    uint32_t count;
    bool fold; /* ASCII case-insensitive keys */
} cq_smap_t;

void cq_smap_init(cq_smap_t *m, bool fold_case);
/* Frees the slot array; keys and values are not touched. Accepts a zeroed map. */
void cq_smap_done(cq_smap_t *m);
/* The value of key (NUL-terminated, borrowed for the call), or NULL. */
void *cq_smap_get(const cq_smap_t *m, const char *key);
/* Inserts or replaces (a replaced entry keeps its stored key pointer). key is borrowed for as
 * long as the entry is in the map. Returns 0 or -ENOMEM (the map is unchanged then). */
int cq_smap_put(cq_smap_t *m, const char *key, void *val);
/* Removes key; returns the removed value or NULL. */
void *cq_smap_del(cq_smap_t *m, const char *key);
static inline uint32_t cq_smap_count(const cq_smap_t *m)
{
    return m->count;
}
/* Iteration: for (uint32_t i = 0; cq_smap_next(m, &i, &k, &v);) { ... } (ret_* may be NULL). */
bool cq_smap_next(const cq_smap_t *m, uint32_t *iter, const char **ret_key, void **ret_val);

#endif
