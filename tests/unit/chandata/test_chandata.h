/* test_chandata.h - shared fixtures of the src/chandata tests (one cmocka group, one TAP plan).
 *
 * main() loads the descriptor sets named on the command line (chanqtest.fds, testpb.fds) into
 * g_schema; the cases build messages with the protobuf-c code generated from tests/data and
 * look types up with T().
 */
#ifndef TEST_CHANDATA_H
#define TEST_CHANDATA_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "chanqtest.pb-c.h"
#include "cq_err.h"
#include "cq_fieldmask.h"
#include "cq_merge.h"
#include "cq_sbuf.h"
#include "cq_schema.h"
#include "testpb.pb-c.h"

extern const char *g_chanqtest_fds, *g_testpb_fds;
extern cq_schema_t *g_schema;

/* The loaded type called name; fails the test when missing. */
const cq_msgdesc_t *T(const char *name);
/* Packs m into a new buffer (returned in *b, which is initialised first). */
void pack_msg(const ProtobufCMessage *m, cq_sbuf_t *b);
/* Reads a whole file into *b. */
void read_file(const char *path, cq_sbuf_t *b);
/* cq_merge() of two packed messages; asserts success. Result in *out (initialised here). */
void merge_ok(const cq_msgdesc_t *d, const cq_sbuf_t *a, const cq_sbuf_t *b,
              const cq_merge_opts_t *opts, cq_sbuf_t *out);
/* Mask cases: compile-time list of paths. */
void filter_ok(const cq_msgdesc_t *d, const char *const *paths, size_t n, const cq_sbuf_t *in,
               cq_sbuf_t *out);

/* chandata_schema.c */
void test_schema_types(void **state);
void test_schema_fields(void **state);
void test_schema_maps_and_presence(void **state);
void test_schema_lookup(void **state);
void test_schema_bad_input(void **state);
void test_schema_reload_and_deps(void **state);
void test_schema_failn(void **state);

/* chandata_merge.c */
void test_merge_scalars_last_wins(void **state);
void test_merge_implicit_zero(void **state);
void test_merge_nested(void **state);
void test_merge_repeated_append(void **state);
void test_merge_packed_mixing(void **state);
void test_merge_map_per_key(void **state);
void test_merge_any_replaced(void **state);
void test_merge_oneof(void **state);
void test_merge_opt_replace_list(void **state);
void test_merge_opt_limit_first(void **state);
void test_merge_opt_truncate_top(void **state);
void test_merge_opt_limit_validates_dropped(void **state);
void test_merge_opt_removable(void **state);
void test_merge_opts_top_level_only(void **state);
void test_merge_unknown_fields(void **state);
void test_merge_compaction_bounded(void **state);
void test_merge_canonical_bytes(void **state);
void test_merge_malformed(void **state);
void test_merge_depth_limit(void **state);
void test_merge_failn(void **state);

/* chandata_mask.c */
void test_mask_top_level(void **state);
void test_mask_nested(void **state);
void test_mask_map_values(void **state);
void test_mask_repeated_messages(void **state);
void test_mask_unknown_and_empty(void **state);
void test_mask_input_untouched(void **state);
void test_mask_malformed(void **state);
void test_mask_failn(void **state);

/* chandata_prop.c */
void test_prop_world(void **state);
void test_prop_chat(void **state);
void test_prop_testpb(void **state);

#endif
