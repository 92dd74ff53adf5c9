/* cq_link.h - the relay link (issue 23, doc/relay-cluster.md "The link"): the packet format of
 * one node-pair stream and its sequencing. A sans-I/O engine: bytes and `now` in, packets to
 * publish and events out; no NATS, no loop, no clock, no thread (tests/unit/relay/test_link.c
 * drives it with a manual clock, tests/fuzz/fuzz_link.c with hostile packets).
 *
 * ---- The stream ----
 *
 * Every node publishes to each peer's inbox subject one ordered stream of packets (NATS keeps
 * the order of one publisher on one subject). A packet carries one or more records (a record
 * is one cross-node message: a kind and its body), so a loop iteration's messages for a peer
 * leave in one publish. Core NATS is at most once: a packet can be lost (a nats-server killed,
 * a slow consumer cut), never reordered or duplicated by NATS itself. So each data packet has a
 * sequence number per (sender, receiver, sender epoch), starting at 1:
 *
 *   - the receiver delivers packets in sequence order, exactly once;
 *   - a gap (seq above the next expected) holds the later packets (bounded) and asks the
 *     sender for the missing ones (a NACK control packet), again every nack_ms;
 *   - the sender keeps its last packets (bounded by bytes) and sends a NACKed range again; a
 *     range it no longer holds is answered GONE;
 *   - GONE, NACKs left unanswered nack_tries times, the hold bound overflowing, or a new sender
 *     epoch (the peer restarted) RESET the stream: the receiver drops what it holds, counts it,
 *     and the caller drops every state that came from that peer and rebuilds it (channel data:
 *     a full-state resync; a subscription or handover step: per kind, doc/relay-cluster.md).
 *     The next packet from the peer starts the stream again.
 *
 * Nothing is silently wrong: every packet is delivered once in order, or its loss is an event.
 *
 * ---- Packet format (little-endian) ----
 *
 *   0  magic "CQL1"
 *   4  u16 src node, u16 dst node          (1..CQ_LINK_MAX_NODE)
 *   8  u32 src epoch                       (non-zero; new at every start of the sender)
 *   12 u64 seq                             (data: >= 1; control: 0)
 *   20 u16 flags (CQ_LINK_F_*), u16 records
 *   24 u32 body length                     (the rest of the packet, exactly)
 *   28 body: records, each  u8 kind | u32 length | bytes
 * A control packet (CQ_LINK_F_CTRL) has one record: kind CQ_LINK_CTRL_*, 16 bytes: u64 a, u64 b.
 *
 * Ownership: cq_link_tx_pack and cq_link_ctrl return owned buffers; the engine keeps its own
 * references to what it holds. Events' buffers are borrowed until the next call on the same rx.
 */
#ifndef CQ_LINK_H
#define CQ_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_buf.h"

#define CQ_LINK_HDR_LEN  28u
#define CQ_LINK_REC_HDR  5u
#define CQ_LINK_MAX_NODE 1023u
#define CQ_LINK_MAX_PACKET                                                                         \
    (1u << 20) /* one packet, header included (NATS's default max_payload)                         \
                */

enum { CQ_LINK_F_CTRL = 1u, CQ_LINK_F_RETX = 2u };
/* NACK: resend [a, b]. GONE: not kept from a (b: the oldest kept). HEAD: the last seq sent is a
 * (the sender repeats it while idle, so that a lost last packet shows as a gap). */
enum { CQ_LINK_CTRL_NACK = 1, CQ_LINK_CTRL_GONE = 2, CQ_LINK_CTRL_HEAD = 3 };

typedef struct cq_link_hdr {
    uint16_t src, dst;
    uint32_t epoch;
    uint64_t seq;
    uint16_t flags, n_rec;
    uint32_t len; /* body bytes */
} cq_link_hdr_t;

typedef struct cq_link_rec {
    uint8_t kind;
    uint32_t len;
    const uint8_t *body;
} cq_link_rec_t;

/* Parses and checks a whole packet: magic, node ids, epoch, the body length against n, and
 * every record's bounds (their count and lengths fill the body exactly); a control packet has
 * seq 0 and one 16-byte record, a data packet seq >= 1. Sets *h. Returns 0 or CQ_ELINK. */
int cq_link_parse(const uint8_t *p, size_t n, cq_link_hdr_t *h);

/* Iterates the records of a packet cq_link_parse accepted: *it starts at 0. Returns true and
 * sets *rec (pointing into p) while records remain. */
bool cq_link_next(const uint8_t *p, const cq_link_hdr_t *h, uint32_t *it, cq_link_rec_t *rec);

/* A control packet from src to dst: {kind, a, b}. Returns owned, or NULL on OOM. */
cq_buf_t *cq_link_ctrl(uint16_t src, uint16_t dst, uint32_t epoch, int kind, uint64_t a,
                       uint64_t b);

/* ---- sender: one per peer ---- */

typedef struct cq_link_tx cq_link_tx_t;

typedef struct cq_link_tx_stats {
    uint64_t packets, bytes, retransmits, gone;
} cq_link_tx_stats_t;

/* A sender from node self to node peer under epoch (all non-zero, nodes <= CQ_LINK_MAX_NODE)
 * keeping up to keep_bytes of its last packets for NACKs. Returns owned, or NULL (bad
 * arguments or OOM). */
cq_link_tx_t *cq_link_tx_new(uint16_t self, uint16_t peer, uint32_t epoch, size_t keep_bytes);
/* Accepts NULL; returns NULL. */
cq_link_tx_t *cq_link_tx_free(cq_link_tx_t *tx);

/* The next data packet holding recs[0..n) (n >= 1, bodies borrowed), sequenced and kept for
 * NACKs. *ret is owned by the caller (publish it, then drop it). Returns 0, -EINVAL (n == 0 or
 * a packet over CQ_LINK_MAX_PACKET: split it) or -ENOMEM (no sequence number was used). */
int cq_link_tx_pack(cq_link_tx_t *tx, const cq_link_rec_t *recs, size_t n, cq_buf_t **ret);

/* Answers the peer's NACK for [from, to]: the kept packets of that range, oldest first, each
 * flagged CQ_LINK_F_RETX, into ret[0..max) (owned by the caller). Returns how many; or, when
 * from is no longer kept (or was never sent), 0 with *gone set to an owned GONE control packet
 * for the peer (a = from, b = the oldest seq still kept). A range beyond the last sent seq is
 * clipped to it. */
int cq_link_tx_nack(cq_link_tx_t *tx, uint64_t from, uint64_t to, cq_buf_t **ret, size_t max,
                    cq_buf_t **gone);

uint64_t cq_link_tx_last_seq(const cq_link_tx_t *tx);
const cq_link_tx_stats_t *cq_link_tx_stats(const cq_link_tx_t *tx);

/* ---- receiver: one per peer ---- */

typedef struct cq_link_rx cq_link_rx_t;

typedef enum cq_link_ev_kind {
    CQ_LINK_EV_DELIVER = 1, /* buf/hdr: the next packet of the stream, in order */
    CQ_LINK_EV_NACK,        /* send the peer a NACK for [a, b] (cq_link_ctrl) */
    CQ_LINK_EV_RESET,       /* the stream broke (reason): drop what came from the peer */
    CQ_LINK_EV_CTRL,        /* a control packet for this node's sender: ctrl kind, a, b */
    CQ_LINK_EV_DROP,        /* a packet refused (reason), counted; nothing else happens */
} cq_link_ev_kind_t;

typedef enum cq_link_why {
    CQ_LINK_WHY_NONE = 0,
    CQ_LINK_WHY_MALFORMED, /* DROP: cq_link_parse refused it */
    CQ_LINK_WHY_NOT_OURS,  /* DROP: another src or dst than this rx's pair */
    CQ_LINK_WHY_OLD,       /* DROP: a seq already delivered (a retransmission that crossed) */
    CQ_LINK_WHY_STALE,     /* DROP: an epoch older than the one the stream is on */
    CQ_LINK_WHY_EPOCH,     /* RESET: the peer restarted (a new epoch) */
    CQ_LINK_WHY_GONE,      /* RESET: the peer no longer holds what was lost */
    CQ_LINK_WHY_TRIES,     /* RESET: NACKs unanswered nack_tries times */
    CQ_LINK_WHY_HOLD,      /* RESET: the packets held behind a gap outgrew hold_bytes */
} cq_link_why_t;

typedef struct cq_link_ev {
    cq_link_ev_kind_t kind;
    cq_link_why_t why;
    cq_link_hdr_t hdr; /* DELIVER, CTRL */
    cq_buf_t *buf;     /* DELIVER: the packet, borrowed until the next call on this rx */
    int ctrl;          /* CTRL: CQ_LINK_CTRL_* */
    uint64_t a, b;     /* NACK: the range; CTRL: its values; RESET: packets lost (a) */
} cq_link_ev_t;

typedef struct cq_link_rx_cfg {
    size_t hold_bytes;   /* packets held behind a gap, at most (default 4 MiB) */
    uint32_t nack_ms;    /* between NACKs of one gap (default 50) */
    uint32_t nack_tries; /* NACKs before a RESET (default 5) */
} cq_link_rx_cfg_t;

typedef struct cq_link_rx_stats {
    uint64_t delivered, gaps, nacks, recovered, resets, lost, dropped;
} cq_link_rx_stats_t;

/* A receiver on node self for the stream from node peer; cfg NULL or zero fields: defaults.
 * Returns owned, or NULL (bad nodes or OOM). */
cq_link_rx_t *cq_link_rx_new(uint16_t self, uint16_t peer, const cq_link_rx_cfg_t *cfg);
/* Accepts NULL; returns NULL. */
cq_link_rx_t *cq_link_rx_free(cq_link_rx_t *rx);

/* One packet as published by the peer (pkt borrowed: the rx takes a reference on what it holds
 * or delivers), at now. Then call cq_link_rx_next until it returns false. Returns 0, or
 * -ENOMEM (the packet is treated as lost: the gap machinery recovers it). */
int cq_link_rx_input(cq_link_rx_t *rx, cq_buf_t *pkt, uint64_t now_ms);
/* Timers: a gap's NACK is repeated every nack_ms, and after nack_tries the stream resets. */
void cq_link_rx_tick(cq_link_rx_t *rx, uint64_t now_ms);
/* Pops the next event; false when none. */
bool cq_link_rx_next(cq_link_rx_t *rx, cq_link_ev_t *ev);
/* When the rx next needs a tick (a NACK pending), UINT64_MAX if never. */
uint64_t cq_link_rx_next_due(const cq_link_rx_t *rx);

const cq_link_rx_stats_t *cq_link_rx_stats(const cq_link_rx_t *rx);

#endif
