/* cq_smap.c - see cq_smap.h. The same probing as cq_map (linear, load under 3/4, deletion by
 * backward shift so there are no tombstones); each slot keeps its key's hash, so growing and
 * deleting never rehash a string and most failed compares stop at the hash. */
#include "cq_smap.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

static inline unsigned char fold(const cq_smap_t *m, unsigned char c)
{
    return m->fold && c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* FNV-1a over the (folded) bytes, then a final mix so the low bits spread. */
static uint32_t hash_key(const cq_smap_t *m, const char *key)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ fold(m, *p)) * 16777619u;
    h ^= h >> 16;
    h *= 0x7feb352dU;
    h ^= h >> 15;
    return h;
}

static bool key_eq(const cq_smap_t *m, const char *a, const char *b)
{
    const unsigned char *p = (const unsigned char *)a, *q = (const unsigned char *)b;
    for (; *p && fold(m, *p) == fold(m, *q); p++, q++) {
    }
    return fold(m, *p) == fold(m, *q);
}

void cq_smap_init(cq_smap_t *m, bool fold_case)
{
    memset(m, 0, sizeof(*m));
    m->fold = fold_case;
}

void cq_smap_done(cq_smap_t *m)
{
    bool f = m->fold;
    cq_free(m->slots);
    cq_smap_init(m, f);
}

static cq_smap_slot_t *find(const cq_smap_t *m, const char *key, uint32_t h)
{
    if (!m->cap)
        return NULL;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        cq_smap_slot_t *s = &m->slots[i];
        if (!s->key)
            return NULL;
        if (s->hash == h && key_eq(m, s->key, key))
            return s;
    }
}

void *cq_smap_get(const cq_smap_t *m, const char *key)
{
    cq_smap_slot_t *s = find(m, key, hash_key(m, key));
    return s ? s->val : NULL;
}

/* Places a key known to be absent (the table has room). */
static void place(cq_smap_t *m, cq_smap_slot_t e)
{
    uint32_t mask = m->cap - 1;
    uint32_t i = e.hash & mask;
    while (m->slots[i].key)
        i = (i + 1) & mask;
    m->slots[i] = e;
    m->count++;
}

static int grow(cq_smap_t *m)
{
    uint32_t ocap = m->cap, ncap = m->cap ? m->cap * 2 : 8;
    cq_smap_slot_t *old = m->slots, *ns = cq_calloc(ncap, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    m->slots = ns;
    m->cap = ncap;
    m->count = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].key)
            place(m, old[i]);
    cq_free(old);
    return 0;
}

int cq_smap_put(cq_smap_t *m, const char *key, void *val)
{
    uint32_t h = hash_key(m, key);
    cq_smap_slot_t *s = find(m, key, h);
    if (s) {
        s->val = val;
        return 0;
    }
    if ((m->count + 1) * 4 > m->cap * 3) {
        int r = grow(m);
        if (r < 0)
            return r;
    }
    place(m, (cq_smap_slot_t){key, val, h});
    return 0;
}

void *cq_smap_del(cq_smap_t *m, const char *key)
{
    cq_smap_slot_t *s = find(m, key, hash_key(m, key));
    if (!s)
        return NULL;
    void *val = s->val;
    uint32_t mask = m->cap - 1;
    uint32_t i = (uint32_t)(s - m->slots);
    /* Backward shift, as in cq_map: keeps probe chains whole without tombstones. */
    for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        cq_smap_slot_t *sj = &m->slots[j];
        if (!sj->key)
            break;
        uint32_t home = sj->hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = *sj;
            i = j;
        }
    }
    m->slots[i] = (cq_smap_slot_t){NULL, NULL, 0};
    m->count--;
    return val;
}

bool cq_smap_next(const cq_smap_t *m, uint32_t *iter, const char **ret_key, void **ret_val)
{
    for (uint32_t i = *iter; i < m->cap; i++) {
        if (m->slots[i].key) {
            *iter = i + 1;
            if (ret_key)
                *ret_key = m->slots[i].key;
            if (ret_val)
                *ret_val = m->slots[i].val;
            return true;
        }
    }
    *iter = m->cap;
    return false;
}
