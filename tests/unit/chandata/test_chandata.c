/* tests/unit/chandata: cmocka cases for src/chandata. Arguments: chanqtest.fds testpb.fds. */
#include "test_chandata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *g_chanqtest_fds, *g_testpb_fds;
cq_schema_t *g_schema;

const cq_msgdesc_t *T(const char *name)
{
    const cq_msgdesc_t *d = cq_schema_find(g_schema, name);
    if (!d)
        fail_msg("type %s not loaded", name);
    return d;
}

static int pb_append(cq_sbuf_t *b, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (cq_sbuf_reserve(b, n ? n : 1) < 0)
        return -1;
    b->len += protobuf_c_message_pack(m, b->data + b->len);
    return 0;
}

void pack_msg(const ProtobufCMessage *m, cq_sbuf_t *b)
{
    cq_sbuf_init(b);
    assert_int_equal(pb_append(b, m), 0);
}

void read_file(const char *path, cq_sbuf_t *b)
{
    cq_sbuf_init(b);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        assert_int_equal(cq_sbuf_append(b, tmp, n), 0);
    fclose(f);
}

void merge_ok(const cq_msgdesc_t *d, const cq_sbuf_t *a, const cq_sbuf_t *b,
              const cq_merge_opts_t *opts, cq_sbuf_t *out)
{
    cq_sbuf_init(out);
    int r = cq_merge(d, a ? a->data : NULL, a ? a->len : 0, b ? b->data : NULL, b ? b->len : 0,
                     opts, out);
    assert_int_equal(r, 0);
}

void filter_ok(const cq_msgdesc_t *d, const char *const *paths, size_t n, const cq_sbuf_t *in,
               cq_sbuf_t *out)
{
    cq_sbuf_init(out);
    assert_int_equal(cq_fieldmask_filter(d, paths, n, in->data, in->len, out), 0);
}

static int setup(void **state)
{
    char err[256] = "";
    if (cq_schema_new(&g_schema) < 0 ||
        cq_schema_load_file(g_schema, g_chanqtest_fds, err, sizeof(err)) < 0 ||
        cq_schema_load_file(g_schema, g_testpb_fds, err, sizeof(err)) < 0) {
        fprintf(stderr, "# cannot load the test schemas: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    g_schema = cq_schema_free(g_schema);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s chanqtest.fds testpb.fds\n", argv[0]);
        return 2;
    }
    g_chanqtest_fds = argv[1];
    g_testpb_fds = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_types),
        cmocka_unit_test(test_schema_fields),
        cmocka_unit_test(test_schema_maps_and_presence),
        cmocka_unit_test(test_schema_lookup),
        cmocka_unit_test(test_schema_bad_input),
        cmocka_unit_test(test_schema_reload_and_deps),
        cmocka_unit_test(test_schema_failn),
        cmocka_unit_test(test_merge_scalars_last_wins),
        cmocka_unit_test(test_merge_implicit_zero),
        cmocka_unit_test(test_merge_nested),
        cmocka_unit_test(test_merge_repeated_append),
        cmocka_unit_test(test_merge_packed_mixing),
        cmocka_unit_test(test_merge_map_per_key),
        cmocka_unit_test(test_merge_any_replaced),
        cmocka_unit_test(test_merge_oneof),
        cmocka_unit_test(test_merge_opt_replace_list),
        cmocka_unit_test(test_merge_opt_limit_first),
        cmocka_unit_test(test_merge_opt_truncate_top),
        cmocka_unit_test(test_merge_opt_limit_validates_dropped),
        cmocka_unit_test(test_merge_opt_removable),
        cmocka_unit_test(test_merge_opts_top_level_only),
        cmocka_unit_test(test_merge_unknown_fields),
        cmocka_unit_test(test_merge_compaction_bounded),
        cmocka_unit_test(test_merge_canonical_bytes),
        cmocka_unit_test(test_merge_malformed),
        cmocka_unit_test(test_merge_depth_limit),
        cmocka_unit_test(test_merge_failn),
        cmocka_unit_test(test_mask_top_level),
        cmocka_unit_test(test_mask_nested),
        cmocka_unit_test(test_mask_map_values),
        cmocka_unit_test(test_mask_repeated_messages),
        cmocka_unit_test(test_mask_unknown_and_empty),
        cmocka_unit_test(test_mask_input_untouched),
        cmocka_unit_test(test_mask_malformed),
        cmocka_unit_test(test_mask_failn),
        cmocka_unit_test(test_prop_world),
        cmocka_unit_test(test_prop_chat),
        cmocka_unit_test(test_prop_testpb),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
