#include "cq_alloc.h"

#include <errno.h>
#include <stdint.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const cq_allocator_t libc_alloc = {malloc, realloc, free};
static const cq_allocator_t *cur = &libc_alloc;

void cq_alloc_set(const cq_allocator_t *a)
{
    cur = a ? a : &libc_alloc;
}

void *cq_malloc(size_t size)
{
    return cur->malloc_fn(size ? size : 1);
}

void *cq_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = cq_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *cq_realloc(void *ptr, size_t size)
{
    return cur->realloc_fn(ptr, size ? size : 1);
}

void cq_free(void *ptr)
{
    if (ptr)
        cur->free_fn(ptr);
}

char *cq_strndup(const char *s, size_t n)
{
    char *d = cq_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *cq_strdup(const char *s)
{
    return cq_strndup(s, strlen(s));
}

int cq_grow(void *pp, uint32_t *cap, uint32_t n, size_t elem, uint32_t first)
{
    if (n < *cap)
        return 0;
    uint64_t ncap = *cap ? (uint64_t)*cap * 2 : (first ? first : 1);
    if (ncap > UINT32_MAX || !elem || ncap > SIZE_MAX / elem)
        return -ENOMEM;
    void **p = pp;
    void *q = cq_realloc(*p, (size_t)ncap * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = (uint32_t)ncap;
    return 0;
}
