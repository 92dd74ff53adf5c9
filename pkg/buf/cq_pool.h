/* cq_pool.h - recycled memory blocks for one thread: free lists by size class, bounded bytes.
 *
 * For buffers that are allocated and freed at a high rate with sizes that vary, such as the
 * send batches a worker forms on every flush (up to about 512 KiB): handing such blocks back
 * to malloc makes glibc return memory to the kernel and ask for it again (brk, mmap/munmap,
 * madvise) over and over. A pool keeps up to max_bytes of freed blocks and gives them out
 * again, LIFO per class.
 *
 * Classes: every request of at most 512 bytes gets a 512-byte block; above that, each power of
 * two is cut into four classes (2^e + k * 2^(e-2), k = 1..4), so a block is at most 25 % larger
 * than asked for, up to CQ_POOL_MAX_BLOCK. Larger requests go to cq_malloc/cq_free unpooled.
 *
 * Single-threaded: a pool belongs to the thread that uses it (a worker's own queues only).
 * A NULL pool is allowed everywhere and means plain cq_malloc/cq_free.
 */
#ifndef CQ_POOL_H
#define CQ_POOL_H

#include <stddef.h>
#include <stdint.h>

#define CQ_POOL_MIN_BLOCK 512u
#define CQ_POOL_MAX_BLOCK (1u << 20)

typedef struct cq_pool cq_pool_t;

typedef struct cq_pool_stats {
    size_t cached_bytes;  /* bytes of free blocks kept */
    size_t cached_blocks; /* free blocks kept */
    uint64_t hits;        /* cq_pool_get served from a free list */
    uint64_t misses;      /* cq_pool_get that allocated (pooled class or too large) */
    uint64_t released;    /* cq_pool_put that freed the block (bound reached, or too large) */
} cq_pool_stats_t;

/* A pool keeping at most max_bytes of free blocks. Returns it (owned) or NULL on OOM. */
cq_pool_t *cq_pool_new(size_t max_bytes);
/* Frees the pool and its free blocks (blocks still out must not be put back afterwards).
 * Accepts NULL; returns NULL. */
cq_pool_t *cq_pool_free(cq_pool_t *p);

/* A block of at least size bytes (returned owned; give it back with cq_pool_put and the same
 * size), or NULL on OOM. */
void *cq_pool_get(cq_pool_t *p, size_t size);
/* Takes back a block from cq_pool_get(p, size) (size as asked then). Accepts NULL blocks. */
void cq_pool_put(cq_pool_t *p, void *block, size_t size);

void cq_pool_stats(const cq_pool_t *p, cq_pool_stats_t *ret);

#endif
