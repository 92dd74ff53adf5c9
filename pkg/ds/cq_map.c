#include "cq_map.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

static inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

void cq_map_init(cq_map_t *m)
{
    memset(m, 0, sizeof(*m));
}

void cq_map_done(cq_map_t *m)
{
    cq_free(m->slots);
    memset(m, 0, sizeof(*m));
}

static cq_map_slot_t *find(const cq_map_t *m, uint32_t key)
{
    if (!m->cap)
        return NULL;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = hash32(key) & mask;; i = (i + 1) & mask) {
        cq_map_slot_t *s = &m->slots[i];
        if (!s->used)
            return NULL;
        if (s->key == key)
            return s;
    }
}

void *cq_map_get(const cq_map_t *m, uint32_t key)
{
    cq_map_slot_t *s = find(m, key);
    return s ? s->val : NULL;
}

static void raw_put(cq_map_t *m, uint32_t key, void *val)
{
    uint32_t mask = m->cap - 1;
    for (uint32_t i = hash32(key) & mask;; i = (i + 1) & mask) {
        cq_map_slot_t *s = &m->slots[i];
        if (!s->used || s->key == key) {
            if (!s->used)
                m->count++;
            s->used = 1;
            s->key = key;
            s->val = val;
            return;
        }
    }
}

static int grow(cq_map_t *m)
{
    uint32_t ncap = m->cap ? m->cap * 2 : 8;
    cq_map_slot_t *old = m->slots;
    uint32_t ocap = m->cap;
    cq_map_slot_t *ns = cq_calloc(ncap, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    m->slots = ns;
    m->cap = ncap;
    m->count = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].used)
            raw_put(m, old[i].key, old[i].val);
    cq_free(old);
    return 0;
}

int cq_map_put(cq_map_t *m, uint32_t key, void *val)
{
    cq_map_slot_t *s = find(m, key);
    if (s) {
        s->val = val;
        return 0;
    }
    if ((m->count + 1) * 4 > m->cap * 3) {
        int r = grow(m);
        if (r < 0)
            return r;
    }
    raw_put(m, key, val);
    return 0;
}

void *cq_map_del(cq_map_t *m, uint32_t key)
{
    cq_map_slot_t *s = find(m, key);
    if (!s)
        return NULL;
    void *val = s->val;
    uint32_t mask = m->cap - 1;
    uint32_t i = (uint32_t)(s - m->slots);
    /* Backward-shift deletion keeps probe chains intact without tombstones. */
    for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        cq_map_slot_t *sj = &m->slots[j];
        if (!sj->used)
            break;
        uint32_t home = hash32(sj->key) & mask;
        /* Can sj move to i? Only if i lies cyclically in [home, j). */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = *sj;
            i = j;
        }
    }
    m->slots[i].used = 0;
    m->slots[i].val = NULL;
    m->count--;
    return val;
}

int cq_map_next(const cq_map_t *m, uint32_t *iter, uint32_t *ret_key, void **ret_val)
{
    for (uint32_t i = *iter; i < m->cap; i++) {
        if (m->slots[i].used) {
            *iter = i + 1;
            if (ret_key)
                *ret_key = m->slots[i].key;
            if (ret_val)
                *ret_val = m->slots[i].val;
            return 1;
        }
    }
    *iter = m->cap;
    return 0;
}
