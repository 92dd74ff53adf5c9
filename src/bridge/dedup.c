/* dedup.c - the bridge's dedup window: a ring of fixed slots plus a chained hash index
 * (bridge_int.h). */
#include "bridge_int.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

/* FNV-1a over the id and the seq's bytes, then a final avalanche (murmur3's fmix32) so that
 * the low bits the bucket mask keeps depend on every input byte. */
static uint32_t key_hash(const char *id, size_t idlen, uint64_t seq)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < idlen; i++)
        h = (h ^ (uint8_t)id[i]) * 16777619u;
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint8_t)(seq >> (8 * i))) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

void cq__dedup_init(cq__dedup_t *d, uint32_t window)
{
    memset(d, 0, sizeof(*d));
    d->window = window;
    d->nbuckets = 1;
    while (d->nbuckets < window)
        d->nbuckets <<= 1;
}

void cq__dedup_done(cq__dedup_t *d)
{
    cq_free(d->slots);
    cq_free(d->buckets);
    d->slots = NULL;
    d->buckets = NULL;
    d->count = d->head = 0;
}

static bool slot_is(const cq__dedup_slot_t *s, uint32_t h, const char *id, size_t idlen,
                    uint64_t seq)
{
    return s->hash == h && s->seq == seq && s->idlen == idlen && memcmp(s->id, id, idlen) == 0;
}

bool cq__dedup_seen(const cq__dedup_t *d, const char *id, size_t idlen, uint64_t seq)
{
    if (!d->slots)
        return false;
    uint32_t h = key_hash(id, idlen, seq);
    for (uint32_t i = d->buckets[h & (d->nbuckets - 1)]; i != CQ__DEDUP_NIL; i = d->slots[i].next)
        if (slot_is(&d->slots[i], h, id, idlen, seq))
            return true;
    return false;
}

int cq__dedup_reserve(cq__dedup_t *d)
{
    if (d->slots || d->window == 0)
        return 0;
    cq__dedup_slot_t *slots = cq_malloc((size_t)d->window * sizeof(*slots));
    uint32_t *buckets = cq_malloc((size_t)d->nbuckets * sizeof(*buckets));
    if (!slots || !buckets) {
        cq_free(slots);
        cq_free(buckets);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < d->nbuckets; i++)
        buckets[i] = CQ__DEDUP_NIL;
    d->slots = slots;
    d->buckets = buckets;
    return 0;
}

/* Takes slot i out of its bucket's chain. */
static void unlink_slot(cq__dedup_t *d, uint32_t i)
{
    uint32_t *p = &d->buckets[d->slots[i].hash & (d->nbuckets - 1)];
    while (*p != i)
        p = &d->slots[*p].next;
    *p = d->slots[i].next;
}

void cq__dedup_add(cq__dedup_t *d, const char *id, size_t idlen, uint64_t seq)
{
    if (!d->slots)
        return;
    uint32_t i;
    if (d->count == d->window) { /* full: the oldest slot is reused for the newest key */
        i = d->head;
        unlink_slot(d, i);
        d->head = (d->head + 1) % d->window;
    } else {
        i = (d->head + d->count) % d->window;
        d->count++;
    }
    cq__dedup_slot_t *s = &d->slots[i];
    s->seq = seq;
    s->hash = key_hash(id, idlen, seq);
    s->idlen = (uint8_t)idlen;
    memcpy(s->id, id, idlen);
    uint32_t *b = &d->buckets[s->hash & (d->nbuckets - 1)];
    s->next = *b;
    *b = i;
}
