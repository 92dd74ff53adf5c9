/* Unit tests of the relay link (src/relay/cq_link.h): the packet format, and a sender and a
 * receiver joined by a hand-driven "network" that can lose, repeat or forge packets, on a
 * manual clock. Every test checks the exact events, sequence numbers and counters. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cq_buf.h"
#include "cq_err.h"
#include "cq_link.h"

#define A 1 /* the sender's node */
#define B 2 /* the receiver's node */

/* One data packet from tx holding one record: kind 7, body "p<i>". */
static cq_buf_t *pack(cq_link_tx_t *tx, int i)
{
    char body[16];
    int n = snprintf(body, sizeof(body), "p%d", i);
    cq_link_rec_t r = {7, (uint32_t)n, (const uint8_t *)body};
    cq_buf_t *b;
    assert_int_equal(cq_link_tx_pack(tx, &r, 1, &b), 0);
    return b;
}

/* What rx emitted since the last call, as text: "D<seq>:<body>" per delivery, "N<a>-<b>" per
 * NACK, "R<why>/<lost>" per reset, "C<kind>:<a>-<b>" per control, "X<why>" per drop. */
static const char *events(cq_link_rx_t *rx)
{
    static char out[1024];
    size_t o = 0;
    out[0] = 0;
    cq_link_ev_t ev;
    while (cq_link_rx_next(rx, &ev)) {
        char one[96];
        switch (ev.kind) {
        case CQ_LINK_EV_DELIVER: {
            cq_link_rec_t r;
            uint32_t it = 0;
            assert_true(cq_link_next(ev.buf->data, &ev.hdr, &it, &r));
            snprintf(one, sizeof(one), "D%llu:%.*s ", (unsigned long long)ev.hdr.seq, (int)r.len,
                     (const char *)r.body);
            break;
        }
        case CQ_LINK_EV_NACK:
            snprintf(one, sizeof(one), "N%llu-%llu ", (unsigned long long)ev.a,
                     (unsigned long long)ev.b);
            break;
        case CQ_LINK_EV_RESET:
            snprintf(one, sizeof(one), "R%d/%llu ", ev.why, (unsigned long long)ev.a);
            break;
        case CQ_LINK_EV_CTRL:
            snprintf(one, sizeof(one), "C%d:%llu-%llu ", ev.ctrl, (unsigned long long)ev.a,
                     (unsigned long long)ev.b);
            break;
        case CQ_LINK_EV_DROP:
            snprintf(one, sizeof(one), "X%d ", ev.why);
            break;
        }
        size_t l = strlen(one);
        assert_true(o + l < sizeof(out));
        memcpy(out + o, one, l + 1);
        o += l;
    }
    return out;
}

static void feed(cq_link_rx_t *rx, cq_buf_t *b, uint64_t now)
{
    assert_int_equal(cq_link_rx_input(rx, b, now), 0);
    cq_buf_unref(b);
}

/* The header's bytes, field by field, and the records' bounds. */
static void test_format(void **state)
{
    (void)state;
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 0x01020304, 1 << 20);
    cq_link_rec_t r[2] = {{9, 3, (const uint8_t *)"abc"}, {10, 0, NULL}};
    cq_buf_t *b;
    assert_int_equal(cq_link_tx_pack(tx, r, 2, &b), 0);
    static const uint8_t want[] = {'C', 'Q', 'L', '1', 1, 0,   2,   0,   4,  3, 2,  1, 1, 0,
                                   0,   0,   0,   0,   0, 0,   0,   0,   2,  0, 13, 0, 0, 0,
                                   9,   3,   0,   0,   0, 'a', 'b', 'c', 10, 0, 0,  0, 0};
    assert_int_equal(b->len, sizeof(want));
    assert_memory_equal(b->data, want, sizeof(want));
    cq_link_hdr_t h;
    assert_int_equal(cq_link_parse(b->data, b->len, &h), 0);
    assert_int_equal(h.seq, 1);
    assert_int_equal(h.n_rec, 2);
    uint32_t it = 0;
    cq_link_rec_t got;
    assert_true(cq_link_next(b->data, &h, &it, &got));
    assert_int_equal(got.kind, 9);
    assert_memory_equal(got.body, "abc", 3);
    assert_true(cq_link_next(b->data, &h, &it, &got));
    assert_int_equal(got.kind, 10);
    assert_int_equal(got.len, 0);
    assert_false(cq_link_next(b->data, &h, &it, &got));
    /* every truncation, a body length off by one, a record overrunning the body, a bad magic,
     * node 0, src == dst, epoch 0 and an unknown flag are refused */
    for (size_t n = 0; n < b->len; n++)
        assert_int_equal(cq_link_parse(b->data, n, &h), CQ_ELINK);
    uint8_t bad[sizeof(want)];
    struct {
        size_t off;
        uint8_t v;
    } muts[] = {{24, 14}, {29, 4}, {0, 'X'}, {4, 0}, {6, 1}, {8, 0}, {20, 4}, {22, 3}, {22, 0}};
    for (size_t i = 0; i < sizeof(muts) / sizeof(muts[0]); i++) {
        memcpy(bad, want, sizeof(want));
        bad[muts[i].off] = muts[i].v;
        if (muts[i].off == 8)
            bad[9] = bad[10] = bad[11] = 0;
        assert_int_equal(cq_link_parse(bad, sizeof(bad), &h), CQ_ELINK);
    }
    cq_buf_unref(b);
    /* a control packet: seq 0, one 16-byte record */
    cq_buf_t *c = cq_link_ctrl(B, A, 5, CQ_LINK_CTRL_NACK, 3, 4);
    assert_int_equal(cq_link_parse(c->data, c->len, &h), 0);
    assert_int_equal(h.seq, 0);
    assert_int_equal(h.flags, CQ_LINK_F_CTRL);
    c->data[12] = 1; /* a control packet with a seq */
    assert_int_equal(cq_link_parse(c->data, c->len, &h), CQ_ELINK);
    cq_buf_unref(c);
    assert_int_equal(cq_link_tx_pack(tx, r, 0, &b), -EINVAL);
    cq_link_rec_t huge = {1, CQ_LINK_MAX_PACKET, (const uint8_t *)""};
    assert_int_equal(cq_link_tx_pack(tx, &huge, 1, &b), -EINVAL);
    assert_int_equal(cq_link_tx_last_seq(tx), 1); /* the refused ones used no seq */
    cq_link_tx_free(tx);
    assert_int_equal(cq_buf_live(), 0);
}

/* In order: every packet once. A repeat, another pair's packet and garbage are dropped. */
static void test_in_order_and_drops(void **state)
{
    (void)state;
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, NULL);
    cq_buf_t *p1 = pack(tx, 1);
    cq_buf_ref(p1);
    feed(rx, p1, 0);
    feed(rx, pack(tx, 2), 0);
    assert_string_equal(events(rx), "D1:p1 D2:p2 ");
    feed(rx, p1, 0); /* the same packet again */
    cq_link_tx_t *other = cq_link_tx_new(3, B, 7, 1 << 20);
    feed(rx, pack(other, 1), 0);
    cq_buf_t *junk = cq_buf_from("CQL1 junk", 9);
    feed(rx, junk, 0);
    assert_string_equal(events(rx), "X3 X2 X1 ");
    const cq_link_rx_stats_t *st = cq_link_rx_stats(rx);
    assert_int_equal(st->delivered, 2);
    assert_int_equal(st->dropped, 3);
    assert_int_equal(st->gaps, 0);
    cq_link_tx_free(other);
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

/* A lost packet: the later ones wait, the receiver NACKs the gap, the sender sends it again,
 * and everything is delivered once, in order. */
static void test_gap_recovered(void **state)
{
    (void)state;
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, NULL);
    feed(rx, pack(tx, 1), 0);
    cq_buf_unref(pack(tx, 2)); /* lost */
    cq_buf_unref(pack(tx, 3)); /* lost */
    feed(rx, pack(tx, 4), 10);
    feed(rx, pack(tx, 5), 11);
    assert_string_equal(events(rx), "D1:p1 N2-3 ");
    assert_int_equal(cq_link_rx_next_due(rx), 60);
    cq_buf_t *re[4], *gone;
    assert_int_equal(cq_link_tx_nack(tx, 2, 3, re, 4, &gone), 2);
    assert_null(gone);
    cq_link_hdr_t h;
    assert_int_equal(cq_link_parse(re[0]->data, re[0]->len, &h), 0);
    assert_int_equal(h.flags, CQ_LINK_F_RETX);
    feed(rx, re[1], 20); /* 3 first: still waits for 2 */
    assert_string_equal(events(rx), "");
    feed(rx, re[0], 21);
    assert_string_equal(events(rx), "D2:p2 D3:p3 D4:p4 D5:p5 ");
    assert_int_equal(cq_link_rx_next_due(rx), UINT64_MAX);
    const cq_link_rx_stats_t *st = cq_link_rx_stats(rx);
    assert_int_equal(st->gaps, 1);
    assert_int_equal(st->recovered, 1);
    assert_int_equal(st->lost, 0);
    assert_int_equal(cq_link_tx_stats(tx)->retransmits, 2);
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

/* NACKs repeat every nack_ms; unanswered nack_tries times, the stream resets, and the next
 * packet starts it again. */
static void test_gap_unanswered_resets(void **state)
{
    (void)state;
    cq_link_rx_cfg_t cfg = {.nack_ms = 50, .nack_tries = 3};
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, &cfg);
    feed(rx, pack(tx, 1), 0);
    cq_buf_unref(pack(tx, 2));
    feed(rx, pack(tx, 3), 100);
    assert_string_equal(events(rx), "D1:p1 N2-2 ");
    cq_link_rx_tick(rx, 149);
    assert_string_equal(events(rx), "");
    cq_link_rx_tick(rx, 150);
    cq_link_rx_tick(rx, 200);
    assert_string_equal(events(rx), "N2-2 N2-2 ");
    cq_link_rx_tick(rx, 250);
    assert_string_equal(events(rx), "R7/2 "); /* CQ_LINK_WHY_TRIES, packets 2 and 3 lost */
    feed(rx, pack(tx, 4), 260);
    assert_string_equal(events(rx), "D4:p4 ");
    assert_int_equal(cq_link_rx_stats(rx)->lost, 2);
    assert_int_equal(cq_link_rx_stats(rx)->resets, 1);
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

/* The sender keeps keep_bytes of its last packets: a NACK for older ones is answered GONE,
 * which resets the receiver's stream. */
static void test_gone(void **state)
{
    (void)state;
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 100); /* about two packets */
    cq_link_rx_t *rx = cq_link_rx_new(B, A, NULL);
    feed(rx, pack(tx, 1), 0);
    for (int i = 2; i <= 5; i++)
        cq_buf_unref(pack(tx, i)); /* lost */
    feed(rx, pack(tx, 6), 5);
    assert_string_equal(events(rx), "D1:p1 N2-5 ");
    cq_buf_t *re[8], *gone;
    assert_int_equal(cq_link_tx_nack(tx, 2, 5, re, 8, &gone), 0);
    assert_non_null(gone);
    cq_link_hdr_t h;
    assert_int_equal(cq_link_parse(gone->data, gone->len, &h), 0);
    feed(rx, gone, 6);
    assert_string_equal(events(rx), "R6/5 "); /* CQ_LINK_WHY_GONE: 2-5 and the held 6 */
    feed(rx, pack(tx, 7), 7);
    assert_string_equal(events(rx), "D7:p7 ");
    /* a GONE that arrives after its gap was filled is stale */
    cq_buf_t *late = cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_GONE, 2, 6);
    feed(rx, late, 8);
    assert_string_equal(events(rx), "X3 ");
    assert_int_equal(cq_link_tx_stats(tx)->gone, 1);
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

/* A new epoch (the peer restarted) resets the stream and starts at seq 1; packets of the old
 * epoch are stale. The peer's NACKs reach the caller as control events. */
static void test_epoch_and_ctrl(void **state)
{
    (void)state;
    cq_link_tx_t *old = cq_link_tx_new(A, B, 7, 1 << 20), *now = cq_link_tx_new(A, B, 8, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, NULL);
    feed(rx, pack(old, 1), 0);
    cq_buf_t *o2 = pack(old, 2);
    feed(rx, pack(now, 1), 1);
    feed(rx, o2, 2);
    feed(rx, cq_link_ctrl(A, B, 8, CQ_LINK_CTRL_NACK, 4, 9), 3);
    assert_string_equal(events(rx), "D1:p1 R5/0 D1:p1 X4 C1:4-9 ");
    cq_link_tx_free(old);
    cq_link_tx_free(now);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

/* HEAD: a lost last packet, with nothing after it, shows as a gap when the sender's idle HEAD
 * arrives; the NACK brings it back. A HEAD of what was delivered says nothing; a HEAD of a
 * stream never seen starts it at 1; after a reset a HEAD says nothing until the next packet. */
static void test_head(void **state)
{
    (void)state;
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, NULL);
    feed(rx, pack(tx, 1), 0);
    cq_buf_t *lost = pack(tx, 2); /* the last packet, lost */
    feed(rx, cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_HEAD, 1, 0), 1);
    assert_string_equal(events(rx), "D1:p1 "); /* all delivered: nothing to do */
    feed(rx, cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_HEAD, 2, 0), 2);
    assert_string_equal(events(rx), "N2-2 ");
    assert_int_equal(cq_link_rx_next_due(rx), 2 + 50);
    cq_link_rx_tick(rx, 52);
    assert_string_equal(events(rx), "N2-2 "); /* asked again */
    cq_buf_t *re[4], *gone = NULL;
    assert_int_equal(cq_link_tx_nack(tx, 2, 2, re, 4, &gone), 1);
    assert_null(gone);
    feed(rx, re[0], 53);
    assert_string_equal(events(rx), "D2:p2 ");
    assert_int_equal(cq_link_rx_next_due(rx), UINT64_MAX);
    assert_int_equal(cq_link_rx_stats(rx)->recovered, 1);
    cq_buf_unref(lost);
    /* unanswered, a HEAD's gap resets with what it announced counted as lost */
    cq_buf_unref(pack(tx, 3));
    cq_buf_unref(pack(tx, 4));
    feed(rx, cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_HEAD, 4, 0), 60);
    for (uint64_t t = 110; t <= 60 + 50 * 5; t += 50)
        cq_link_rx_tick(rx, t);
    assert_string_equal(events(rx), "N3-4 N3-4 N3-4 N3-4 N3-4 R7/2 ");
    feed(rx, cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_HEAD, 4, 0), 400); /* after a reset: nothing */
    assert_string_equal(events(rx), "");
    feed(rx, pack(tx, 5), 401); /* restarts the stream */
    assert_string_equal(events(rx), "D5:p5 ");
    /* a stream never seen: its HEAD starts it at 1 */
    cq_link_rx_t *rx2 = cq_link_rx_new(B, A, NULL);
    feed(rx2, cq_link_ctrl(A, B, 7, CQ_LINK_CTRL_HEAD, 3, 0), 0);
    assert_string_equal(events(rx2), "N1-3 ");
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    cq_link_rx_free(rx2);
    assert_int_equal(cq_buf_live(), 0);
}

/* The packets held behind a gap are bounded: past hold_bytes the stream resets. */
static void test_hold_bound(void **state)
{
    (void)state;
    cq_link_rx_cfg_t cfg = {.hold_bytes = 100};
    cq_link_tx_t *tx = cq_link_tx_new(A, B, 7, 1 << 20);
    cq_link_rx_t *rx = cq_link_rx_new(B, A, &cfg);
    cq_buf_unref(pack(tx, 1)); /* lost */
    feed(rx, pack(tx, 2), 0);
    feed(rx, pack(tx, 3), 0);
    assert_string_equal(events(rx), "N1-1 ");
    feed(rx, pack(tx, 4), 0); /* 3 x 35 bytes held */
    assert_string_equal(events(rx), "R8/4 ");
    feed(rx, pack(tx, 5), 0);
    assert_string_equal(events(rx), "D5:p5 ");
    cq_link_tx_free(tx);
    cq_link_rx_free(rx);
    assert_int_equal(cq_buf_live(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),        cmocka_unit_test(test_in_order_and_drops),
        cmocka_unit_test(test_gap_recovered), cmocka_unit_test(test_gap_unanswered_resets),
        cmocka_unit_test(test_gone),          cmocka_unit_test(test_epoch_and_ctrl),
        cmocka_unit_test(test_head),          cmocka_unit_test(test_hold_bound),
    };
    return cmocka_run_group_tests_name("link", tests, NULL, NULL);
}
