/* Unit tests of the placement seam (src/core/place.c): the id layout with room for a node id,
 * where connections and channels live, and the cross-worker messages with their accounting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"
#include "msgtab.h"
#include "world.h"
#include "cq_err.h"
#include "cq_settings.h"

/* ---- ids -------------------------------------------------------------------------------- */

/* Without node bits every id is today's: the node is 0 and the local id is the id. */
static void test_ids_without_node_bits(void **state)
{
    cq_idl_t l;
    assert_int_equal(cq__idl_init(31, 0, &l), 0);
    assert_int_equal(cq__id_conn_limit(&l), 0x7fffffffu);
    assert_int_equal(cq__id_chan_max(&l), 65535);
    static const uint32_t ids[] = {1, 2, 255, 65535, 0x10000, 0x7ffffffe};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        uint32_t local = 0;
        assert_int_equal(cq__id_conn(&l, 0, ids[i]), ids[i]);
        assert_int_equal(cq__id_conn_node(&l, ids[i], &local), 0);
        assert_int_equal(local, ids[i]);
    }
    uint32_t node = 99, local = 99;
    assert_true(cq__id_chan_node(&l, 1, &node, &local));
    assert_int_equal(node, 0);
    assert_int_equal(local, 1);
    assert_true(cq__id_chan_node(&l, 65535, &node, &local));
    assert_int_equal(node, 0);
    assert_int_equal(local, 65535);
    assert_int_equal(cq__id_chan(&l, 0, 65535), 65535);
    /* 0 means channeld's default of 31 bits; 13 is UE's -mcb; over 32 is every uint32. */
    assert_int_equal(cq__idl_init(0, 0, &l), 0);
    assert_int_equal(l.conn_bits, 31);
    assert_int_equal(cq__idl_init(13, 0, &l), 0);
    assert_int_equal(cq__id_conn_limit(&l), 8191);
    assert_int_equal(cq__idl_init(40, 0, &l), 0);
    assert_int_equal(cq__id_conn_limit(&l), UINT32_MAX);
    assert_int_equal(cq__idl_init(8, 0, &l), 0);
    assert_int_equal(cq__id_conn_limit(&l), 255);
}

/* GLOBAL, spatial and entity ids never carry a node. */
static void test_id_kinds(void **state)
{
    static const struct {
        uint32_t id;
        cq_chan_kind_t kind;
    } k[] = {
        {0, CQ_CHAN_KIND_GLOBAL},          {1, CQ_CHAN_KIND_NONSPATIAL},
        {0xffff, CQ_CHAN_KIND_NONSPATIAL}, {0x10000, CQ_CHAN_KIND_SPATIAL},
        {0x7ffff, CQ_CHAN_KIND_SPATIAL},   {0x80000, CQ_CHAN_KIND_ENTITY},
        {UINT32_MAX, CQ_CHAN_KIND_ENTITY},
    };
    cq_idl_t l;
    assert_int_equal(cq__idl_init(31, 4, &l), 0);
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        assert_int_equal(cq__id_chan_kind(k[i].id), k[i].kind);
        uint32_t node = 77, local = 77;
        bool carries = cq__id_chan_node(&l, k[i].id, &node, &local);
        assert_int_equal(carries, k[i].kind == CQ_CHAN_KIND_NONSPATIAL);
        if (!carries) {
            assert_int_equal(node, 77); /* outputs untouched */
            assert_int_equal(local, 77);
        }
    }
}

/* With node bits the node is the top of the width, and every id stays in its range. */
static void test_ids_with_node_bits(void **state)
{
    cq_idl_t l;
    assert_int_equal(cq__idl_init(31, 4, &l), 0);
    assert_int_equal(cq__id_conn_limit(&l), (1u << 27) - 1);
    assert_int_equal(cq__id_chan_max(&l), 4095);
    assert_int_equal(cq__id_conn(&l, 5, 7), 0x28000007u);
    assert_int_equal(cq__id_chan(&l, 5, 7), 0x5007u);
    uint32_t node, local;
    assert_int_equal(cq__id_conn_node(&l, 0x28000007u, &local), 5);
    assert_int_equal(local, 7);
    assert_true(cq__id_chan_node(&l, 0x5007, &node, &local));
    assert_int_equal(node, 5);
    assert_int_equal(local, 7);
    /* The largest node and local ids still fit: channels stay non-spatial. */
    assert_int_equal(cq__id_chan(&l, 15, 4095), 0xffffu);
    assert_int_equal(cq__id_chan_kind(cq__id_chan(&l, 15, 4095)), CQ_CHAN_KIND_NONSPATIAL);
    assert_int_equal(cq__id_conn(&l, 15, (1u << 27) - 2), 0x7ffffffeu);
    /* UE's 13 bits leave room for 5 node bits and 8 local ones; a round trip of each id. */
    assert_int_equal(cq__idl_init(13, 5, &l), 0);
    for (uint32_t n = 0; n < 32; n++)
        for (uint32_t loc = 1; loc < cq__id_conn_limit(&l); loc += 37) {
            uint32_t id = cq__id_conn(&l, n, loc);
            assert_true(id < (1u << 13));
            assert_int_equal(cq__id_conn_node(&l, id, &local), n);
            assert_int_equal(local, loc);
        }
    assert_int_equal(cq__idl_init(13, 6, &l), CQ_ECONFIG); /* 7 local bits */
    assert_int_equal(cq__idl_init(31, 9, &l), CQ_ECONFIG); /* over CQ_NODE_BITS_MAX */
}

/* The allocator takes its limit from the layout: with 8 bits, exactly 1..254, as before. */
static void test_conn_ids_within_bits(void **state)
{
    cq_core_opts_t o = {.workers = 2, .conn_id_bits = 8, .max_connections = 1000};
    cq_shared_t *sh;
    char err[128];
    assert_int_equal(cq_shared_new(&o, NULL, NULL, &sh, err, sizeof(err)), 0);
    for (uint32_t want = 1; want <= 254; want++)
        assert_int_equal(cq_shared_conn_id_alloc(sh, CQ_CONN_CLIENT), want);
    assert_int_equal(cq_shared_conn_id_alloc(sh, CQ_CONN_CLIENT), 0); /* all in use */
    cq_shared_free(sh);
}

/* ---- placement and messages ------------------------------------------------------------- */

static int wakes[3];
static void wake(void *ud, int w)
{
    (void)ud;
    wakes[w]++;
}
static const cq_core_ops_t ops = {wake};

typedef struct env {
    cq_settings_t *settings;
    cq_shared_t *sh;
    cq_core_t *c[3];
} env_t;

static void env_up(env_t *e)
{
    memset(e, 0, sizeof(*e));
    memset(wakes, 0, sizeof(wakes));
    assert_non_null(e->settings = cq_settings_new_default());
    cq_core_opts_t o = {.workers = 3, .settings = e->settings, .max_connections = 100};
    char err[128];
    assert_int_equal(cq_shared_new(&o, &ops, NULL, &e->sh, err, sizeof(err)), 0);
    for (int i = 0; i < 3; i++)
        assert_non_null(e->c[i] = cq_core_new(e->sh, i));
}

static void env_down(env_t *e)
{
    for (int i = 0; i < 3; i++)
        cq_core_free(e->c[i]);
    cq_shared_free(e->sh);
    cq_settings_free(e->settings);
    assert_int_equal(cq_buf_live(), 0);
}

static void test_workers_by_id_and_route(void **state)
{
    env_t e;
    env_up(&e);
    for (uint32_t id = 0; id < 10; id++) {
        assert_int_equal(cq_shared_conn_worker(e.sh, id), id % 3);
        assert_int_equal(cq_shared_chan_worker(e.sh, id), id % 3);
        assert_int_equal(cq__conn_worker(e.c[0], id), id % 3);
        assert_int_equal(cq__chan_worker(e.c[0], id), id % 3);
    }
    /* Worker 2 adopts conn 7 (home 1): it routes it to itself and tells 0 and 1. */
    cq__place_adopt_conn(e.c[2], 7);
    assert_int_equal(cq__conn_worker(e.c[2], 7), 2);
    assert_int_equal(wakes[0], 0); /* woken at the end of worker 2's iteration */
    cq_core_flush(e.c[2]);
    assert_int_equal(wakes[0], 1);
    assert_int_equal(wakes[1], 1);
    assert_int_equal(wakes[2], 0);
    cq_core_drain(e.c[0], 0);
    cq_core_drain(e.c[1], 0);
    assert_int_equal(cq__conn_worker(e.c[0], 7), 2);
    assert_int_equal(cq__conn_worker(e.c[1], 7), 2);
    assert_int_equal(cq__conn_worker(e.c[1], 4), 1); /* others keep their home */
    assert_int_equal(cq_shared_conn_worker(e.sh, 7), 1);
    cq__place_forget(e.c[1], 7);
    assert_int_equal(cq__conn_worker(e.c[1], 7), 1);
    /* Adopting an id at its home changes nothing and tells nobody. */
    cq__place_adopt_conn(e.c[1], 4);
    cq_core_flush(e.c[1]);
    assert_int_equal(wakes[0], 1);
    assert_int_equal(wakes[2], 0);
    env_down(&e);
}

static void test_xmsg_accounting(void **state)
{
    env_t e;
    env_up(&e);
    uint8_t body[100] = {1, 2, 3};
    cq_req_t r = {9, CQ_CONN_SERVER, {5, 2, 7, 150, body, sizeof(body)}, NULL, 0};
    cq_xmsg_t *m = cq__xmsg_req(XM_DISPATCH, &r, true);
    assert_non_null(m);
    assert_int_equal(m->conn_id, 9);
    assert_int_equal(m->conn_type, CQ_CONN_SERVER);
    assert_int_equal(m->mp.msg_type, 150);
    assert_int_equal(m->mp.stub_id, 7);
    assert_int_equal(m->body_len, 100);
    assert_memory_equal(m->body, body, 100);
    m->buf = cq_buf_new(50);
    m->buf->len = 50;
    int64_t cost = (int64_t)sizeof(cq_xmsg_t) + 100 + 50;
    cq__xmsg_post(e.c[0], 1, m);
    assert_int_equal(atomic_load(&e.c[1]->inbox_bytes), cost);
    assert_true(cq__inbox_over(e.c[0], 1, cost - 1));
    assert_false(cq__inbox_over(e.c[0], 1, cost));
    /* One wake per target per iteration, however many messages: at the poster's flush. */
    cq_xmsg_t *m2 = cq__xmsg_new(XM_FANOUT, 0);
    assert_non_null(m2);
    cq__xmsg_post(e.c[0], 1, m2);
    assert_int_equal(wakes[1], 0);
    cq_core_flush(e.c[0]);
    assert_int_equal(wakes[1], 1);
    cq_core_flush(e.c[0]);
    assert_int_equal(wakes[1], 1);
    assert_int_equal(wakes[0] + wakes[2], 0);
    cq_xmsg_t *got = cq__xmsg_pop(e.c[1]);
    assert_ptr_equal(got, m);
    cq_xmsg_t *got2 = cq__xmsg_pop(e.c[1]);
    assert_ptr_equal(got2, m2);
    assert_null(cq__xmsg_pop(e.c[1]));
    cq__xmsg_done(e.c[1], got2);
    cq__xmsg_done(e.c[1], got);
    assert_int_equal(atomic_load(&e.c[1]->inbox_bytes), 0);
    /* Without the body: the MessagePack is kept, its body is not. */
    m = cq__xmsg_req(XM_REMOVE, &r, false);
    assert_int_equal(m->body_len, 0);
    assert_null(m->mp.body);
    assert_int_equal(m->mp.body_len, 0);
    assert_int_equal(m->mp.channel_id, 5);
    assert_null(cq__xmsg_free(m));
    assert_null(cq__xmsg_free(NULL));
    /* To every other worker, with a copy of the body and its NUL. */
    cq__xmsg_post_others(e.c[1], XM_CONN_GONE, 4, CQ_CONN_CLIENT, 3, "pit");
    for (int w = 0; w < 3; w++) {
        got = cq__xmsg_pop(e.c[w]);
        if (w == 1) {
            assert_null(got);
            continue;
        }
        assert_non_null(got);
        assert_int_equal(got->kind, XM_CONN_GONE);
        assert_int_equal(got->conn_id, 4);
        assert_int_equal(got->conn_type, CQ_CONN_CLIENT);
        assert_int_equal(got->u1, 3);
        assert_int_equal(got->body_len, 4);
        assert_string_equal((const char *)got->body, "pit");
        cq__xmsg_done(e.c[w], got);
        assert_int_equal(atomic_load(&e.c[w]->inbox_bytes), 0);
    }
    env_down(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_without_node_bits),   cmocka_unit_test(test_id_kinds),
        cmocka_unit_test(test_ids_with_node_bits),      cmocka_unit_test(test_conn_ids_within_bits),
        cmocka_unit_test(test_workers_by_id_and_route), cmocka_unit_test(test_xmsg_accounting),
    };
    return cmocka_run_group_tests_name("core-place", tests, NULL, NULL);
}
