/* cqbench_data.c - the data shape: the TestChannelDataMessage update payload the owner sends
 * (the send time in its text, the sequence in num) and the accounting of the merged fan-outs
 * the subscribers receive, each sampled by its newest update; and (--target floor) the packets
 * of the floor writer, cqfloor.c, counted and sampled the same way.
 */
#include "cqbench_int.h"
#include "cq_varint.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- the update payload ------------------------------------------------------------------ */

/* Serializes TestChannelDataMessage{text = "<rts> xxx...", num} into out (O.size bytes
 * available); returns its length (O.size, or one byte less at a varint-length boundary). */
size_t cqb_testpb_encode(uint8_t *out, uint64_t rts, uint64_t num)
{
    size_t size = (size_t)O.size;
    size_t tail = 1 + cq_varint_size(num); /* field 2: tag + varint */
    size_t tlen = size - tail - 1 - cq_varint_size(size);
    size_t k = 0;
    out[k++] = 0x0a; /* field 1, length-delimited */
    k += cq_varint_put(out + k, tlen);
    int d = snprintf((char *)out + k, tlen + 1, "%" PRIu64 " ", rts);
    if (d < 0 || (size_t)d >= tlen)
        cqb_die("--size too small for the data payload");
    memset(out + k + (size_t)d, 'x', tlen - (size_t)d);
    k += tlen;
    out[k++] = 0x10; /* field 2, varint */
    k += cq_varint_put(out + k, num);
    return k;
}

/* ---- fan-outs ---------------------------------------------------------------------------- */

/* A merged fan-out of the data channel: counts it and takes a latency sample from its newest
 * update. The initial state (no timestamp, num 0) is counted as a first fan-out. */
void cqb_on_data_fanout(bconn_t *s, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataUpdateMessage *u;
    if (chanq_decode_data_update(m, &u) < 0) {
        G.bad++;
        return;
    }
    if (!u->data->type_url || strcmp(u->data->type_url, TESTPB_TYPE_URL) != 0) {
        G.bad++;
        chanq_unpack_free(u);
        return;
    }
    chanq_testdata_t td;
    int r = chanq_testdata_decode(u->data->value.data, u->data->value.len, &td);
    const uint8_t *txt = (const uint8_t *)td.text;
    size_t tl = r < 0 ? 0 : td.text_len;
    uint64_t num = r < 0 ? 0 : td.num;
    G.deliveries++;
    G.fanout_bytes += u->data->value.len;
    uint64_t rts = 0;
    size_t i = 0;
    while (txt && i < tl && i < 20 && txt[i] >= '0' && txt[i] <= '9')
        rts = rts * 10 + (uint64_t)(txt[i++] - '0');
    bool stamped = i > 0 && i < tl && txt[i] == ' ';
    chanq_unpack_free(u);
    if (r < 0) {
        G.bad++;
        return;
    }
    if (!num || !stamped) {
        G.full_fanouts++;
        return;
    }
    if (num <= s->next_seq)
        G.stale++;
    s->next_seq = num;
    uint64_t seq = num - 1;
    if (seq >= G.m_seq0 && seq < G.m_seq1)
        cqb_add_latency(s, (int64_t)(cqb_real_ns() - rts), (int64_t)(s->rx_real - rts));
}

/* ---- the floor writer's packets ---------------------------------------------------------- */

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Packets of cqfloor.c: 'C' 'H' len_hi len_lo 0, then len bytes: u64 window number, u64
 * CLOCK_REALTIME ns of the window's end, filler. Each is one fan-out of O.size bytes; a window
 * number not above the previous one is stale, a jump counts the windows skipped as lost. */
size_t cqb_floor_parse(bconn_t *s, const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (n - off >= 5) {
        const uint8_t *q = p + off;
        if (q[0] != 'C' || q[1] != 'H')
            cqb_die("floor: bad packet header on connection %d", s->idx);
        size_t len = (size_t)q[2] << 8 | q[3];
        if (n - off < 5 + len)
            break;
        off += 5 + len;
        G.deliveries++;
        G.fanout_bytes += 5 + len;
        if (5 + len != (size_t)O.size || len < 16) {
            G.bad++;
            continue;
        }
        uint64_t win = get_u64(q + 5), rts = get_u64(q + 13);
        if (s->next_seq && win <= s->next_seq)
            G.stale++;
        else if (s->next_seq && win > s->next_seq + 1)
            G.lost += win - s->next_seq - 1;
        s->next_seq = win;
        if (G.phase == PH_MEASURE) {
            cqb_add_sample(&G.lat, (int64_t)(cqb_real_ns() - rts));
            if (s->rx_real)
                cqb_add_sample(&G.klat, (int64_t)(s->rx_real - rts));
        }
    }
    return off;
}
