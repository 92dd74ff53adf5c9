/* cq_util.h - small macros used everywhere. */
#ifndef CQ_UTIL_H
#define CQ_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define cq_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define CQ_ARRAY_SIZE(a)                   (sizeof(a) / sizeof((a)[0]))
#define CQ_MIN(a, b)                       ((a) < (b) ? (a) : (b))
#define CQ_MAX(a, b)                       ((a) > (b) ? (a) : (b))
#define cq_likely(x)                       __builtin_expect(!!(x), 1)
#define cq_unlikely(x)                     __builtin_expect(!!(x), 0)

/* Programmer errors only: network, file and database input never reaches an assert. */
#define cq_assert(cond)                                                                            \
    do {                                                                                           \
        if (cq_unlikely(!(cond))) {                                                                \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
