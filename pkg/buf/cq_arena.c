#include "cq_arena.h"

#include "cq_alloc.h"

#include <stdint.h>

struct cq_arena_blk {
    cq_arena_blk_t *next;
    size_t cap, off;
    _Alignas(16) unsigned char data[];
};

#define ARENA_BLK 4096

void cq_arena_init(cq_arena_t *a, size_t limit)
{
    a->blocks = NULL;
    a->used = 0;
    a->limit = limit;
}

void *cq_arena_alloc(cq_arena_t *a, size_t n)
{
    if (n > a->limit)
        return NULL; /* also keeps the rounding below from overflowing */
    n = (n + 7) & ~(size_t)7;
    if (n == 0)
        n = 8;
    if (n > a->limit - a->used || a->used > a->limit)
        return NULL;
    cq_arena_blk_t *b = a->blocks;
    if (!b || b->cap - b->off < n) {
        size_t cap = n > ARENA_BLK ? n : ARENA_BLK;
        cq_arena_blk_t *nb = cq_malloc(sizeof(*nb) + cap);
        if (!nb)
            return NULL;
        nb->cap = cap;
        nb->off = 0;
        nb->next = b;
        a->blocks = b = nb;
    }
    void *p = b->data + b->off;
    b->off += n;
    a->used += n;
    return p;
}

void cq_arena_reset(cq_arena_t *a)
{
    cq_arena_blk_t *b = a->blocks;
    if (!b)
        return;
    /* Keep the oldest block (the tail) for reuse; free the rest. */
    while (b->next) {
        cq_arena_blk_t *n = b->next;
        if (!n->next && n->cap == ARENA_BLK) {
            cq_free(b);
            b = n;
            break;
        }
        cq_free(b);
        b = n;
    }
    if (b->cap != ARENA_BLK) {
        cq_free(b);
        b = NULL;
    }
    if (b)
        b->off = 0;
    a->blocks = b;
    a->used = 0;
}

void cq_arena_done(cq_arena_t *a)
{
    cq_arena_blk_t *b = a->blocks;
    while (b) {
        cq_arena_blk_t *n = b->next;
        cq_free(b);
        b = n;
    }
    a->blocks = NULL;
    a->used = 0;
}
