/* test_pkg.h - the cases of the 'pkg' cmocka executable, one group (one TAP plan). */
#ifndef TEST_PKG_H
#define TEST_PKG_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* pkg_base.c */
void test_err_every_code(void **state);
void test_err_errno_and_unknown(void **state);
void test_log_sink_and_levels(void **state);
void test_log_parse_level(void **state);
void test_clock(void **state);
void test_alloc_basics(void **state);
void test_failn_map_put(void **state);
void test_failn_map_put_sticky(void **state);
void test_failn_record_msg(void **state);

/* pkg_ds.c */
void test_map_empty(void **state);
void test_map_put_get_replace(void **state);
void test_map_grow(void **state);
void test_map_delete_wraparound_cluster(void **state);
void test_map_random_vs_reference(void **state);
void test_map_iterate(void **state);
void test_list_basics(void **state);
void test_list_foreach_safe_remove(void **state);
void test_mpsc_single_thread(void **state);
void test_mpsc_half_push(void **state);
void test_mpsc_4_producers(void **state);

/* pkg_buf.c */
void test_buf_refcount(void **state);
void test_buf_from_and_limits(void **state);
void test_buf_threaded_unref(void **state);
void test_arena_cap(void **state);
void test_arena_reset_reuse(void **state);
void test_arena_blocks_freed(void **state);
void test_arena_oom(void **state);
void test_arena_huge_request(void **state);
void test_sbuf_huge_reserve(void **state);
void test_sbuf_append_zero(void **state);
void test_sbuf_printf(void **state);
void test_sbuf_append_consume(void **state);
void test_sbuf_oom(void **state);

/* pkg_codec.c */
void test_varint_round_trip(void **state);
void test_varint_truncation(void **state);
void test_varint_protocol_vector(void **state);
void test_snappy_round_trip(void **state);
void test_snappy_corrupt(void **state);
void test_snappy_cap(void **state);

/* pkg_pool.c */
void test_pool_reuse(void **state);
void test_pool_classes(void **state);
void test_pool_bound(void **state);
void test_pool_null(void **state);
void test_pool_fail_n(void **state);

/* pkg_http.c */
void test_http_fields(void **state);
void test_http_lenient_bytes(void **state);
void test_http_every_prefix_and_split(void **state);
void test_http_bare_lf(void **state);
void test_http_byte_limit(void **state);
void test_http_header_limit(void **state);
void test_http_malformed(void **state);
void test_http_parse_all(void **state);
void test_http_parse_all_fail_n(void **state);
/* pkg_httpmsg.c */
void test_httpmsg_request_rules(void **state);
void test_httpmsg_hosts(void **state);
void test_httpmsg_fields(void **state);
void test_httpmsg_answer(void **state);

/* xorshift64*, deterministic per seed; shared by the randomized cases. */
static inline uint64_t test_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

#endif
