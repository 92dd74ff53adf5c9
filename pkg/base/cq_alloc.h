/* cq_alloc.h - the one allocator of chanq.
 *
 * Every allocation goes through cq_malloc/cq_calloc/cq_realloc/cq_free so tests can swap in a
 * counting or failing allocator (fail-N loops). cq_alloc_set() must be called before any other
 * thread allocates. cq_free(NULL) is a no-op.
 */
#ifndef CQ_ALLOC_H
#define CQ_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef struct cq_allocator {
    void *(*malloc_fn)(size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
} cq_allocator_t;

/* Replace the allocator (NULL restores libc). Borrowed: must outlive every allocation. */
void cq_alloc_set(const cq_allocator_t *a);

void *cq_malloc(size_t size);
void *cq_calloc(size_t n, size_t size);
void *cq_realloc(void *ptr, size_t size);
void cq_free(void *ptr);
/* Returns an owned copy of s (or of its first n bytes, NUL-terminated); NULL on OOM. */
char *cq_strdup(const char *s);
char *cq_strndup(const char *s, size_t n);
/* Room for one more element in the array *pp of *cap elements of elem bytes when it holds n:
 * while n < *cap, nothing; else the capacity doubles (first when it is 0) and *pp and *cap are
 * updated. The array keeps its contents. Returns 0, or -ENOMEM with *pp and *cap unchanged
 * (also when the new size would not fit a size_t or *cap a uint32_t). */
int cq_grow(void *pp, uint32_t *cap, uint32_t n, size_t elem, uint32_t first);

#endif
