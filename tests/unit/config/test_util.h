/* test_util.h - shared helpers and test lists of the src/config unit tests (the option table,
 * and the FSM and channel-settings loaders). */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#ifndef CQ_SOURCE_ROOT
#error "CQ_SOURCE_ROOT must name the source tree"
#endif

/* Test lists, one per file; test_main.c runs them as one group. */
extern const struct CMUnitTest test_config_cases[];
extern const size_t test_config_count;
extern const struct CMUnitTest test_fsm_cases[];
extern const size_t test_fsm_count;
extern const struct CMUnitTest test_settings_cases[];
extern const size_t test_settings_count;

/* Reads CQ_SOURCE_ROOT/rel into a malloc'd, NUL-terminated buffer; fails the test if missing. */
char *tu_read_source(const char *rel, size_t *ret_len);
/* Reads any file; NULL if it cannot be read. */
char *tu_read_file(const char *path, size_t *ret_len);
/* Writes text to a new temporary file and returns its path (malloc'd). */
char *tu_write_temp(const char *text);
/* Removes and frees a path from tu_write_temp. */
void tu_remove_temp(char *path);

/* Fails the N-th allocation (1-based) through cq_alloc from now on; 0 disables. */
void tu_fail_alloc_at(int n);
/* Allocations made since the last tu_fail_alloc_at(). */
int tu_alloc_count(void);
/* Live allocations (allocated minus freed) since the program started counting. */
long tu_alloc_live(void);

#endif
