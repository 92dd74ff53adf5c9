/* tests/unit/pkg: cmocka cases for pkg/ (base, ds, buf, codec). One group, so one TAP plan. */
#include "test_pkg.h"

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_every_code),
        cmocka_unit_test(test_err_errno_and_unknown),
        cmocka_unit_test(test_log_sink_and_levels),
        cmocka_unit_test(test_log_parse_level),
        cmocka_unit_test(test_clock),
        cmocka_unit_test(test_alloc_basics),
        cmocka_unit_test(test_failn_map_put),
        cmocka_unit_test(test_failn_map_put_sticky),
        cmocka_unit_test(test_failn_record_msg),
        cmocka_unit_test(test_map_empty),
        cmocka_unit_test(test_map_put_get_replace),
        cmocka_unit_test(test_map_grow),
        cmocka_unit_test(test_map_delete_wraparound_cluster),
        cmocka_unit_test(test_map_random_vs_reference),
        cmocka_unit_test(test_map_iterate),
        cmocka_unit_test(test_list_basics),
        cmocka_unit_test(test_list_foreach_safe_remove),
        cmocka_unit_test(test_mpsc_single_thread),
        cmocka_unit_test(test_mpsc_half_push),
        cmocka_unit_test(test_mpsc_4_producers),
        cmocka_unit_test(test_buf_refcount),
        cmocka_unit_test(test_buf_from_and_limits),
        cmocka_unit_test(test_buf_threaded_unref),
        cmocka_unit_test(test_arena_cap),
        cmocka_unit_test(test_arena_reset_reuse),
        cmocka_unit_test(test_arena_blocks_freed),
        cmocka_unit_test(test_arena_oom),
        cmocka_unit_test(test_arena_huge_request),
        cmocka_unit_test(test_sbuf_huge_reserve),
        cmocka_unit_test(test_sbuf_append_zero),
        cmocka_unit_test(test_sbuf_append_consume),
        cmocka_unit_test(test_sbuf_oom),
        cmocka_unit_test(test_varint_round_trip),
        cmocka_unit_test(test_varint_truncation),
        cmocka_unit_test(test_varint_protocol_vector),
        cmocka_unit_test(test_snappy_round_trip),
        cmocka_unit_test(test_snappy_corrupt),
        cmocka_unit_test(test_snappy_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
