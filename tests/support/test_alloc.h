/* test_alloc.h - a counting, failing allocator for fail-N loops (SQLite malloc.test style).
 *
 * test_alloc_install() swaps it in with cq_alloc_set(); test_alloc_remove() restores libc. Only
 * blocks allocated while it is installed may be freed while it is installed. Counters are
 * atomic, so threads may allocate and free, but installing and removing are single-threaded.
 *
 * Shared by the unit tests (tests/support/meson.build: test_alloc_src, test_alloc_inc).
 */
#ifndef TEST_ALLOC_H
#define TEST_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

/* fail_at = 0: never fail. Otherwise allocation number fail_at (1-based, counted from install)
 * fails, and so does every later one when sticky is true. */
void test_alloc_install(unsigned long fail_at, bool sticky);
void test_alloc_remove(void);
/* Live blocks and bytes allocated through the test allocator and not yet freed. */
long test_alloc_live(void);
long test_alloc_live_bytes(void);
/* Allocation calls (malloc + realloc) seen since install, and how many were failed. */
unsigned long test_alloc_calls(void);
unsigned long test_alloc_failed(void);

/* Ends one round of a fail-N loop: removes the allocator and asserts nothing leaked, then, if no
 * allocation was failed this round, asserts the operation succeeded (ok) and returns true (the
 * loop is done); otherwise asserts it reported the failure (!ok) and returns false. Uses cmocka's
 * assertions, so only for cmocka tests. */
bool test_alloc_round_end(bool ok);

#endif
