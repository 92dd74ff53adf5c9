/* cq_kcp.h - KCP (reliable UDP) engine, sans I/O, wire-compatible with kcp-go as channeld uses it.
 *
 * The engine never touches a socket or a clock: datagrams and the current time go in
 * (cq_kcp_input, cq_kcp_update), datagrams to send come out through the output callback, and
 * in-order payload bytes come out of cq_kcp_recv. The payload is a byte stream (channeld's "CH"
 * framing runs over it, as over TCP): every data segment this engine sends carries frg = 0 and
 * at most mss bytes, exactly what kcp-go's Write produces, so a kcp-go peer with its 32-segment
 * receive window never has to reassemble a multi-fragment message. Received segments are
 * concatenated in sn order whatever their frg, so message-mode peers (C ikcp) work too.
 *
 * Wire format (transports.md section 1): each datagram holds segments back to back, each a
 * 24-byte little-endian header {conv u32, cmd u8, frg u8, wnd u16, ts u32, sn u32, una u32,
 * len u32} plus len data bytes. sn, una and ts use 32-bit serial arithmetic throughout.
 *
 * Time: now_ms is any monotonic millisecond clock (cq_clock); only its low 32 bits go on the wire.
 * Threads: an engine belongs to one thread; distinct engines share nothing.
 * Memory: bounded by the options. The receive side keeps at most rcv_wnd out-of-order segments
 * plus rcv_wnd in-order segments (each <= max(mtu, 1500) - 24 bytes); the send side keeps at most
 * max_snd_bytes of payload; the pending ACK list is capped at 2 * rcv_wnd entries (reaching it
 * sends the ACKs at once).
 * Reentrancy: the output callback must not call into the same engine (in particular not free
 * it); it may only copy or send the datagram.
 *
 * Which profile the server uses: cq_kcp_opts_fast() (nodelay 1, interval 10, resend 2, nc 1,
 * windows 128/128, ack_nodelay). It interoperates with kcp-go peers on channeld's defaults
 * (cq_kcp_opts_default(): rcv_wnd 32, interval 100): each side's window is local, and the
 * engine honours the window the peer advertises.
 */
#ifndef CQ_KCP_H
#define CQ_KCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define CQ_KCP_OVERHEAD 24 /* segment header bytes */
#define CQ_KCP_CMD_PUSH 81 /* data */
#define CQ_KCP_CMD_ACK  82 /* acknowledgement of one sn */
#define CQ_KCP_CMD_WASK 83 /* window probe: ask the peer for its window */
#define CQ_KCP_CMD_WINS 84 /* window size: tell the peer our window */

/* Limits checked by cq_kcp_opts_check(). */
#define CQ_KCP_MTU_MIN      50
#define CQ_KCP_MTU_MAX      65535
#define CQ_KCP_WND_MAX      8192
#define CQ_KCP_INTERVAL_MIN 10
#define CQ_KCP_INTERVAL_MAX 5000
#define CQ_KCP_RTO_MAX      60000
/* Received PUSH segments may carry up to max(mtu, CQ_KCP_RCV_MTU) - 24 bytes (kcp-go's
 * receive limit is 1500); larger ones are refused with CQ_ETOOBIG. */
#define CQ_KCP_RCV_MTU 1500

typedef struct cq_kcp cq_kcp_t;

/* Called with each datagram to send (1 .. mtu bytes, one or more segments). The bytes are
 * borrowed for the duration of the call only. Sending is best effort: a datagram the caller
 * cannot send is simply lost, and the ARQ resends it. */
typedef void (*cq_kcp_output_fn)(void *ud, const uint8_t *dgram, size_t len);

typedef struct cq_kcp_opts {
    uint32_t mtu;         /* largest datagram sent, CQ_KCP_MTU_MIN..MAX; mss = mtu - 24 */
    uint32_t snd_wnd;     /* send window in segments, 1..CQ_KCP_WND_MAX */
    uint32_t rcv_wnd;     /* receive window in segments, 1..CQ_KCP_WND_MAX */
    uint32_t interval;    /* flush period in ms, CQ_KCP_INTERVAL_MIN..MAX */
    uint32_t nodelay;     /* 0 normal, 1 or 2 fast (smaller minimum RTO, gentler backoff) */
    uint32_t resend;      /* fast resend after this many later ACKs; 0 disables. Either way a
                             flush that admits no new data resends every segment a later ACK
                             skipped (kcp-go's early retransmit) */
    bool nc;              /* no congestion window (send window = min(snd_wnd, peer's wnd)) */
    bool ack_nodelay;     /* send ACKs at the end of every cq_kcp_input, not at the next flush */
    uint32_t minrto;      /* minimum RTO in ms; 0 = 100 when nodelay is 0, else 30 */
    uint32_t dead_link;   /* transmissions of one segment after which cq_kcp_dead() is true */
    size_t max_snd_bytes; /* payload bytes accepted but not yet acknowledged, >= mss */
    /* Anti-amplification, for a server whose peer's address is unproven (UDP sources can be
     * spoofed). Until the peer acknowledges one of our segments echoing the ts we sent it
     * (see ts_offset), the datagrams sent total at most amp_factor times the bytes received
     * (QUIC uses 3): a segment that does not fit is not sent (as if lost: it waits for its
     * next timeout), and a 24-byte WASK ends the flush when that fits, which a real KCP peer
     * answers with a WINS, earning budget for the retransmission. Once the peer proves its
     * address, the held-back segments are sent at once. 0: no limit. */
    uint32_t amp_factor;
    /* Added to the ts of every PUSH we send and taken off every ts echoed in an ACK: with a
     * random value per engine the echo proves the peer saw our segment (a blind guess of
     * sn and ts is 1 in 2^32). Peers only echo ts, so this is invisible on the wire. */
    uint32_t ts_offset;
} cq_kcp_opts_t;

/* kcp-go's defaults, i.e. what a channeld connection runs: mtu 1400, windows 32/32, interval
 * 100, nodelay 0, resend 0, nc 0, ack_nodelay off, dead_link 20, max_snd_bytes 256 KiB. */
cq_kcp_opts_t cq_kcp_opts_default(void);
/* The "fast" profile, recommended for chanqd: kcp-go's SetNoDelay(1, 10, 2, 1) +
 * WindowSize(128, 128) + SetACKNoDelay(true); other fields as cq_kcp_opts_default(). */
cq_kcp_opts_t cq_kcp_opts_fast(void);
/* Returns 0 if the options are usable, or CQ_ECONFIG. */
int cq_kcp_opts_check(const cq_kcp_opts_t *opts);

/* Creates an engine for conversation conv (for a server: the conv of the first datagram, see
 * cq_kcp_peek_conv). opts is copied; NULL means cq_kcp_opts_default(). out and ud are borrowed
 * and must stay valid until cq_kcp_free. Returns NULL on OOM or when cq_kcp_opts_check fails. */
cq_kcp_t *cq_kcp_new(uint32_t conv, const cq_kcp_opts_t *opts, cq_kcp_output_fn out, void *ud);
/* Frees the engine and everything it holds; never calls out. NULL is a no-op. */
void cq_kcp_free(cq_kcp_t *k);
/* Segments come from pool from now on (borrowed: it must outlive the engine; NULL, the
 * default: cq_malloc). The pool is single-threaded: the engine must run on the pool's thread.
 * Call it right after cq_kcp_new, before any segment exists. */
struct cq_pool;
void cq_kcp_set_pool(cq_kcp_t *k, struct cq_pool *pool);

/* Feeds one received datagram. Every segment in it is processed in order; trailing bytes
 * shorter than a header are ignored (so is a whole datagram shorter than 24 bytes). Returns 0,
 * or the first error, after which the rest of the datagram is dropped (segments before it stay
 * processed): CQ_EKCPCONV (conv differs), CQ_EKCPCMD (unknown cmd), CQ_EKCPTRUNC (len runs
 * past the datagram), CQ_ETOOBIG (PUSH bigger than the receive limit). An error never harms
 * the engine; the caller decides whether it ends the connection. May call out: as kcp-go's
 * Input, a datagram that advances snd_una (the window slid) flushes at once, sending the ACKs
 * and whatever the window now admits; otherwise ack_nodelay sends the ACKs, and a full ACK list
 * is sent in any case. */
int cq_kcp_input(cq_kcp_t *k, const uint8_t *dgram, size_t len, uint64_t now_ms);

/* Copies up to cap in-order payload bytes into buf; returns the count, 0 when none are ready.
 * Reading frees receive-window space (the peer is told at the next flush if the window had
 * been full). */
size_t cq_kcp_recv(cq_kcp_t *k, uint8_t *buf, size_t cap);
/* Zero-copy reading: cq_kcp_peek returns the next contiguous run of ready bytes (NULL and
 * *len = 0 when none), valid until the next call on the engine; cq_kcp_consume(k, n) then drops
 * n <= *len of them. cq_kcp_readable returns the total of ready bytes. */
const uint8_t *cq_kcp_peek(const cq_kcp_t *k, size_t *len);
void cq_kcp_consume(cq_kcp_t *k, size_t n);
size_t cq_kcp_readable(const cq_kcp_t *k);

/* Queues payload bytes for sending (copied) and returns how many were accepted: all of them,
 * or fewer (possibly 0) when max_snd_bytes would be exceeded. A short count is not an error:
 * the caller keeps the rest in its own queue and retries after ACKs have freed space
 * (cq_kcp_send_space). Returns -ENOMEM only if nothing could be queued for lack of memory.
 * Data is cut into segments of at most mss bytes with frg = 0, and small writes are coalesced
 * into one segment while it waits. Nothing is sent before the next flush (cq_kcp_flush or a
 * due cq_kcp_update). */
ssize_t cq_kcp_send(cq_kcp_t *k, const uint8_t *p, size_t n);
/* The same for a gather list; iov is read only during the call. */
ssize_t cq_kcp_sendv(cq_kcp_t *k, const struct iovec *iov, int iovcnt);
/* Bytes cq_kcp_send would accept now. */
size_t cq_kcp_send_space(const cq_kcp_t *k);
/* Segments not yet acknowledged: waiting to enter the window plus in flight. */
uint32_t cq_kcp_waitsnd(const cq_kcp_t *k);

/* Drives timers: flushes (ACKs, window probes, new data, retransmissions) when the interval
 * has elapsed since the last flush. Call it at cq_kcp_check() time, or on a fixed tick. */
void cq_kcp_update(cq_kcp_t *k, uint64_t now_ms);
/* When cq_kcp_update must next be called (>= now_ms unless already due, at most now_ms +
 * interval). Pure: changes nothing. Before the first cq_kcp_update it returns now_ms. */
uint64_t cq_kcp_check(const cq_kcp_t *k, uint64_t now_ms);
/* Flushes now, whatever the interval: pending ACKs, window probe/answer, data allowed by the
 * windows, due retransmissions. kcp-go flushes on every Write; chanqd calls this once per loop
 * iteration after queuing data. */
void cq_kcp_flush(cq_kcp_t *k, uint64_t now_ms);

/* True once some segment has been transmitted dead_link times without an ACK: the peer is
 * gone or unreachable. The engine keeps working; closing is the caller's decision. */
bool cq_kcp_dead(const cq_kcp_t *k);
uint32_t cq_kcp_conv(const cq_kcp_t *k);

typedef struct cq_kcp_stats {
    uint64_t in_dgrams;    /* datagrams given to cq_kcp_input */
    uint64_t in_segs;      /* segments accepted (all commands) */
    uint64_t in_dup;       /* PUSH segments dropped: duplicate, already delivered, or beyond
                              the receive window */
    uint64_t out_dgrams;   /* datagrams passed to out */
    uint64_t out_segs;     /* segments sent (all commands) */
    uint64_t retrans;      /* data segments resent after their RTO expired */
    uint64_t fast_retrans; /* data segments resent by fast resend or early retransmit */
    uint32_t srtt, rttval; /* smoothed RTT and its variation, ms */
    uint32_t rto;          /* current base retransmission timeout, ms */
    uint32_t cwnd;         /* congestion window, segments */
    uint32_t rmt_wnd;      /* last window advertised by the peer */
    uint32_t snd_una;      /* oldest unacknowledged sn */
    uint32_t snd_nxt;      /* next sn to send */
    uint32_t rcv_nxt;      /* next sn expected */
    uint32_t rcv_queue;    /* in-order segments not yet read */
    uint32_t rcv_buf;      /* out-of-order segments held */
    uint32_t xmit_max;     /* most transmissions of one unacknowledged segment: the dead-link
                              counter (cq_kcp_dead() once it reaches dead_link) */
    uint64_t in_bytes;     /* bytes of the datagrams given to cq_kcp_input */
    uint64_t out_bytes;    /* bytes of the datagrams passed to out */
    uint64_t amp_blocked;  /* segments not sent: over the amp_factor budget */
    bool verified;         /* the peer echoed a ts of ours (amp_factor no longer applies) */
} cq_kcp_stats_t;
void cq_kcp_stats(const cq_kcp_t *k, cq_kcp_stats_t *st);

/* Helpers for a listener demultiplexing one UDP socket, no engine needed.
 * cq_kcp_peek_conv: the conv of a datagram's first segment; 0, or CQ_EKCPTRUNC if len < 24.
 * cq_kcp_is_conv_start: true if the first segment is a PUSH with sn 0, i.e. the first data of a
 * new conversation. kcp-go's rule: a datagram from a known address with another conv replaces
 * the old connection only when it starts a conversation; other mismatches are ignored. */
int cq_kcp_peek_conv(const uint8_t *dgram, size_t len, uint32_t *conv);
bool cq_kcp_is_conv_start(const uint8_t *dgram, size_t len);

#endif
