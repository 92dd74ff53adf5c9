/* Unit tests of when the core writes (issue 28): one cq_core_run_due serves everything due, so a
 * connection's fan-outs of one grid point leave in one write; lazy output (cq__send_lazy) waits
 * for the next grid point and leaves with the fan-outs, in queue order. Driven like test_core:
 * fake transports that count their writes, a manual clock, inboxes pumped by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "channeld.pb-c.h"
#include "cq_core.h"
#include "cq_wire.h"
#include "core.h"

#include "core_env.h"

/* What the worker's timer does once at `now` on every worker, then the loop's flush. */
static void run_due_once(uint64_t now)
{
    E.now = now;
    for (int i = 0; i < E.n; i++)
        cq_core_run_due(E.cores[i], now);
    pump();
}

/* A user-space record of msg type `type` (the tests tell records apart by type). */
static cq_buf_t *record(uint32_t type)
{
    Channeldpb__ServerForwardMessage m = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    m.payload.data = (uint8_t *)"x";
    m.payload.len = 1;
    cq_buf_t *b = cq_wire_record_msg(0, 0, 0, type, &m.base);
    assert_non_null(b);
    return b;
}

static void send_lazy(int worker, fconn_t *to, cq_buf_t *rec)
{
    cq__send_lazy(E.cores[worker], cq_conn_id(to->conn), rec);
}

/* A client's lazy record waits, on its own worker or another, for the next 20 ms grid point of
 * the worker's clock; a server's leaves at once. The timer is armed for that point. */
static void test_lazy_waits_for_grid(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER), *c[2];
    env_auth(srv);
    for (int i = 0; i < 2; i++) {
        c[i] = connect_as(CQ_CONN_CLIENT);
        env_auth(c[i]);
    }
    assert_int_not_equal(c[0]->worker, c[1]->worker); /* one local, one across workers */
    E.now = 1005;
    for (int i = 0; i < E.n; i++)
        cq_core_drain(E.cores[i], E.now); /* the cores' clocks read 1005 */
    cq_buf_t *rec = record(100);
    int from = c[0]->worker;
    send_lazy(from, c[0], rec);
    send_lazy(from, c[1], rec);
    send_lazy(from, srv, rec);
    cq_buf_unref(rec);
    int w0 = c[0]->writes, w1 = c[1]->writes;
    pump();
    uint32_t t[4];
    assert_int_equal(take_types(srv, t, 4), 1);
    assert_int_equal(t[0], 100);
    assert_int_equal(c[0]->writes, w0);
    assert_int_equal(c[1]->writes, w1);
    assert_int_equal(c[0]->out.len, 0);
    assert_int_equal(c[1]->out.len, 0);
    assert_int_equal(cq_core_next_due(E.cores[c[0]->worker]), 1020);
    assert_int_equal(cq_core_next_due(E.cores[c[1]->worker]), 1020);
    run_due_once(1019); /* not yet */
    assert_int_equal(c[0]->out.len + c[1]->out.len, 0);
    run_due_once(1020);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(take_types(c[i], t, 4), 1);
        assert_int_equal(t[0], 100);
    }
    assert_int_equal(c[0]->writes, w0 + 1);
    assert_int_equal(c[1]->writes, w1 + 1);
    assert_int_equal(cq_core_next_due(E.cores[0]), UINT64_MAX);
    assert_int_equal(cq_core_next_due(E.cores[1]), UINT64_MAX);
    env_down();
}

/* Anything queued for the client meanwhile flushes it at once, lazy record first: one write, in
 * queue order. A lazy record after that waits again. */
static void test_lazy_then_direct_one_write_in_order(void **state)
{
    env_up(1, NULL);
    fconn_t *c = connect_as(CQ_CONN_CLIENT);
    env_auth(c);
    cq_buf_t *a = record(100), *b = record(101), *d = record(102);
    int w = c->writes;
    send_lazy(0, c, a);
    cq__send_to(E.cores[0], cq_conn_id(c->conn), b);
    pump();
    uint32_t t[4];
    assert_int_equal(take_types(c, t, 4), 2);
    assert_int_equal(t[0], 100);
    assert_int_equal(t[1], 101);
    assert_int_equal(c->writes, w + 1);
    send_lazy(0, c, d);
    pump();
    assert_int_equal(c->out.len, 0);
    run_due_once(CQ_FANOUT_GRID_MS * (E.now / CQ_FANOUT_GRID_MS + 1));
    assert_int_equal(take_types(c, t, 4), 1);
    assert_int_equal(t[0], 102);
    cq_buf_unref(a);
    cq_buf_unref(b);
    cq_buf_unref(d);
    env_down();
}

/* A client closed while its lazy record waits leaves the lazy list with its queue. */
static void test_lazy_closed_client(void **state)
{
    env_up(1, NULL);
    fconn_t *c = connect_as(CQ_CONN_CLIENT), *k = connect_as(CQ_CONN_CLIENT);
    env_auth(c);
    env_auth(k);
    cq_buf_t *a = record(100);
    send_lazy(0, c, a);
    send_lazy(0, k, a);
    cq_buf_unref(a);
    static const uint8_t junk[8] = {'X', 'X', 0, 0, 0, 0, 0, 0};
    assert_true(feed(c, junk, sizeof(junk)) < 0); /* bad magic: closed */
    assert_true(c->closed);
    run_due_once(CQ_FANOUT_GRID_MS * (E.now / CQ_FANOUT_GRID_MS + 1));
    uint32_t t[4];
    assert_int_equal(take_types(k, t, 4), 1);
    assert_int_equal(c->out.len, 0);
    assert_true(cq_list_empty(&E.cores[0]->lazy));
    env_down();
}

#define NCH  1024
#define NCLI 16

/* 1024 channels, each with its owner and 16 clients subscribed (17,408 subscriptions, more than
 * the 16,384 one call served before issue 28), all due at the same time: one call serves every
 * one of them, and each client gets its 1024 fan-outs in one write. */
static void test_run_due_serves_all_in_one_write(void **state)
{
    env_up(1, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER), *c[NCLI];
    env_auth(srv);
    for (int i = 0; i < NCH; i++)
        env_create_data_channel(srv, "S"); /* channels 1..NCH */
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_fanoutintervalms = o.has_skipfirstfanout = 1;
    o.fanoutintervalms = 50;
    o.skipfirstfanout = 1;
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.suboptions = &o;
    for (int k = 0; k < NCLI; k++) {
        c[k] = connect_as(CQ_CONN_CLIENT);
        env_auth(c[k]);
        sub.connid = cq_conn_id(c[k]->conn);
        for (uint32_t ch = 1; ch <= NCH; ch++)
            send_msg(srv, ch, 0, 0, 6, &sub.base);
        take(c[k], 0, NULL, NULL);
    }
    take(srv, 0, NULL, NULL);
    for (uint32_t ch = 1; ch <= NCH; ch++)
        env_send_update(srv, ch, "u", 1);
    uint64_t due = cq_core_next_due(E.cores[0]);
    assert_true(due > E.now && due != UINT64_MAX);
    int w[NCLI];
    for (int k = 0; k < NCLI; k++)
        w[k] = c[k]->writes;
    run_due_once(E.now + 50);
    assert_true(cq_core_next_due(E.cores[0]) > E.now); /* nothing left due */
    for (int k = 0; k < NCLI; k++) {
        assert_int_equal(take(c[k], 8, NULL, NULL), NCH);
        assert_int_equal(c[k]->writes, w[k] + 1);
    }
    env_down();
}

/* The overload policy's lateness sample (cq_coarsen.h) counts from when a channel became due:
 * a subscription whose new interval puts its window's end in the past is due at once, which
 * is no lag; a timer call that comes 50 ms after a due time is 50 ms late. */
static void test_lateness_from_becoming_due(void **state)
{
    env_up(1, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER), *cl = connect_as(CQ_CONN_CLIENT);
    env_auth(srv);
    env_auth(cl);
    E.now = 10000;
    env_create_data_channel(srv, "S"); /* channel 1 */
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_fanoutintervalms = o.has_skipfirstfanout = 1;
    o.fanoutintervalms = 100;
    o.skipfirstfanout = 1;
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(cl->conn);
    sub.suboptions = &o;
    send_msg(srv, 1, 0, 0, 6, &sub.base);
    cq_core_t *c = E.cores[0];
    /* the server's own subscription and the client's close at 10000 + their intervals */
    uint64_t due = cq_core_next_due(c);
    assert_true(due > E.now && due <= E.now + 100);
    run_due_once(due);
    assert_int_equal(c->co.last_late, 0);
    /* 90 ms into the client's 100 ms window, a 20 ms interval: its window [last, last + 20)
     * closed 70 ms ago, so it is due now, and not late */
    E.now = cq_core_next_due(c) - 10;
    uint64_t changed = E.now;
    o.fanoutintervalms = 20;
    send_msg(srv, 1, 0, 0, 6, &sub.base);
    assert_true(cq_core_next_due(c) < changed);
    run_due_once(changed);
    assert_int_equal(c->co.last_late, 0);
    /* a real lag: the timer runs 50 ms after the next due time */
    due = cq_core_next_due(c);
    assert_true(due > changed && due != UINT64_MAX);
    env_send_update(srv, 1, "u", 1); /* an update meanwhile does not restart the clock */
    run_due_once(due + 50);
    assert_int_equal(c->co.last_late, 50);
    assert_int_equal(c->co.level, 0); /* one sample 50 ms late is not overload */
    env_down();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_waits_for_grid),
        cmocka_unit_test(test_lazy_then_direct_one_write_in_order),
        cmocka_unit_test(test_lazy_closed_client),
        cmocka_unit_test(test_run_due_serves_all_in_one_write),
        cmocka_unit_test(test_lateness_from_becoming_due),
    };
    return cmocka_run_group_tests_name("core-flush", tests, NULL, NULL);
}
