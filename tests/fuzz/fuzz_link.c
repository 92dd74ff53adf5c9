/* fuzz_link - the relay link's receiver and sender (src/relay/cq_link.h) under hostile packets.
 *
 * The input is a script of operations, each one byte of opcode and its operands:
 *   0 len16 bytes   a raw packet (anything) to the receiver of node 2 from node 1
 *   1 n             the sender packs a packet of n % 4 + 1 records and the "network" delivers it
 *   2 n             the sender packs one and the network loses it
 *   3 from8 to8     a NACK reaches the sender: its answer (retransmissions or GONE) is delivered
 *   4 dt8           time passes: the receiver's timer runs
 *   5 epoch8        the sender restarts under another epoch
 * Invariants: every event is one of the five kinds; deliveries of one stream come in sequence
 * order with no repeat (between two resets, each is the previous + 1) and each parses; a
 * delivered packet from the sender holds what it packed; counters agree with the events; and
 * once both ends are freed no buffer is left. */
#include "fuzz_common.h"

#include "cq_buf.h"
#include "cq_link.h"

#include <string.h>

#define FUZZ_MAX_INPUT (1u << 16)

typedef struct st {
    cq_link_rx_t *rx;
    cq_link_tx_t *tx;
    uint32_t epoch;
    uint64_t now, last_seq, last_epoch;
    uint64_t delivered, resets;
} st_t;

static void drain(st_t *s)
{
    cq_link_ev_t ev;
    while (cq_link_rx_next(s->rx, &ev)) {
        FUZZ_CHECK(ev.kind >= CQ_LINK_EV_DELIVER && ev.kind <= CQ_LINK_EV_DROP);
        if (ev.kind == CQ_LINK_EV_RESET) {
            s->resets++;
            s->last_seq = 0;
        } else if (ev.kind == CQ_LINK_EV_DELIVER) {
            cq_link_hdr_t h;
            FUZZ_CHECK(cq_link_parse(ev.buf->data, ev.buf->len, &h) == 0);
            FUZZ_CHECK(h.seq == ev.hdr.seq && h.src == 1 && h.dst == 2);
            if (s->last_seq && h.epoch == s->last_epoch)
                FUZZ_CHECK(h.seq == s->last_seq + 1);
            s->last_seq = h.seq;
            s->last_epoch = h.epoch;
            s->delivered++;
            uint32_t it = 0, k = 0;
            cq_link_rec_t r;
            while (cq_link_next(ev.buf->data, &h, &it, &r))
                k++;
            FUZZ_CHECK(k == h.n_rec);
        }
    }
}

static void input(st_t *s, cq_buf_t *b)
{
    (void)cq_link_rx_input(s->rx, b, s->now);
    cq_buf_unref(b);
    drain(s);
}

static cq_buf_t *pack(st_t *s, uint8_t n)
{
    cq_link_rec_t r[4];
    uint8_t body[4] = {n, 1, 2, 3};
    size_t k = n % 4 + 1;
    for (size_t i = 0; i < k; i++)
        r[i] = (cq_link_rec_t){(uint8_t)i, (uint32_t)i, body};
    cq_buf_t *b = NULL;
    FUZZ_CHECK(cq_link_tx_pack(s->tx, r, k, &b) == 0);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    cq_link_rx_cfg_t cfg = {.hold_bytes = 4096, .nack_ms = 10, .nack_tries = 3};
    st_t s = {cq_link_rx_new(2, 1, &cfg), cq_link_tx_new(1, 2, 5, 512), 5, 0, 0, 0, 0, 0};
    FUZZ_CHECK(s.rx && s.tx);
    size_t i = 0;
    while (i < size) {
        uint8_t op = data[i++] % 6;
        if (op == 0 && i + 2 <= size) {
            size_t len = (size_t)(data[i] | data[i + 1] << 8);
            i += 2;
            if (len > size - i)
                len = size - i;
            input(&s, cq_buf_from(data + i, len));
            i += len;
        } else if ((op == 1 || op == 2) && i < size) {
            cq_buf_t *b = pack(&s, data[i++]);
            if (op == 1)
                input(&s, b);
            else
                cq_buf_unref(b);
        } else if (op == 3 && i + 2 <= size) {
            cq_buf_t *re[8], *gone = NULL;
            int n = cq_link_tx_nack(s.tx, data[i], data[i + 1], re, 8, &gone);
            i += 2;
            FUZZ_CHECK(n >= 0 && n <= 8 && (n == 0 || !gone));
            for (int k = 0; k < n; k++)
                input(&s, re[k]);
            if (gone)
                input(&s, gone);
        } else if (op == 4 && i < size) {
            s.now += data[i++];
            cq_link_rx_tick(s.rx, s.now);
            drain(&s);
        } else if (op == 5 && i < size) {
            s.epoch = data[i++] + 1u;
            cq_link_tx_free(s.tx);
            s.tx = cq_link_tx_new(1, 2, s.epoch, 512);
            FUZZ_CHECK(s.tx);
        } else {
            break;
        }
    }
    const cq_link_rx_stats_t *st = cq_link_rx_stats(s.rx);
    FUZZ_CHECK(st->delivered == s.delivered && st->resets == s.resets);
    cq_link_rx_free(s.rx);
    cq_link_tx_free(s.tx);
    FUZZ_CHECK(cq_buf_live() == 0);
    return 0;
}
