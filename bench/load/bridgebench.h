/* bridgebench.h - what bridgebench's files share (issue 24's benchmark client, bench/bridge.sh):
 * the socket layer (non-blocking sockets watched by uv_poll_t and read with recvmsg() and
 * SO_TIMESTAMPNS, so every read carries the kernel's receive time, as cqbench's subscribers),
 * the chanq connection on it (AUTH done), /metrics, TopicEvent parsing, latency samples.
 * bridgebench_io.c has them, bridgebench.c the modes. Everything runs on one libuv loop per
 * process. */
#ifndef BRIDGEBENCH_H
#define BRIDGEBENCH_H

#include "bench_util.h"
#include "chanq.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- errors, clocks, addresses -------------------------------------------------------------- */

void bb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* CLOCK_REALTIME in ns: the clock of SO_TIMESTAMPNS, so send and kernel receive times compare. */
uint64_t bb_real_ns(void);
/* "HOST:PORT" (numeric IPv4) into *out; dies on a bad one. */
void bb_parse_addr(const char *s, struct sockaddr_in *out);
/* The value of field name (client, server, admin, mq...) of chanqd's ready file into out
 * ("HOST:PORT"); dies when the file or the field is missing. */
void bb_ready_field(const char *path, const char *name, char *out, size_t cap);
/* This process's CPU seconds (user + system). */
double bb_self_cpu_s(void);

/* ---- sockets -------------------------------------------------------------------------------- */

typedef struct bb_sock bb_sock_t;

/* What a socket does with its bytes. out/consume expose the bytes to write (a protocol core's
 * output queue); the socket writes as much as the kernel takes and waits for POLLOUT for the
 * rest. lost: the connection failed or ended (err a negative errno or UV_EOF); the socket is
 * closed right after it returns. */
typedef struct bb_sock_ops {
    void (*connected)(bb_sock_t *s);
    void (*input)(bb_sock_t *s, const uint8_t *p, size_t n);
    void (*lost)(bb_sock_t *s, int err);
    const uint8_t *(*out)(bb_sock_t *s, size_t *ret_len);
    void (*consume)(bb_sock_t *s, size_t n);
} bb_sock_ops_t;

struct bb_sock {
    int fd;
    uv_poll_t poll;
    const bb_sock_ops_t *ops;
    void *ud;
    bool connected, closed, polling_out;
    uint64_t rx_real; /* the kernel's receive time of the bytes being handled (realtime ns) */
};

/* Starts a non-blocking TCP connect to a (TCP_NODELAY, SO_TIMESTAMPNS). Returns the socket,
 * owned by the layer until bb_sock_close (or a loss) frees it after its handle closed. */
bb_sock_t *bb_sock_open(uv_loop_t *loop, const struct sockaddr_in *a, const bb_sock_ops_t *ops,
                        void *ud);
/* Writes what ops->out has. A failed write is a loss (after this returns, from a timer-free
 * path: the caller must not use s after a loss it caused; s->closed tells). */
void bb_sock_flush(bb_sock_t *s);
/* Stops and closes (idempotent); ops->lost is not called. The memory goes at the next loop
 * iteration. */
void bb_sock_close(bb_sock_t *s);

/* ---- a chanq connection --------------------------------------------------------------------- */

typedef struct bb_conn bb_conn_t;

/* A channel connection: connect, AUTH with pit, then on_authed (id is set). on_msg gets every
 * message no stub took; on_lost the loss of an open connection (not after bb_conn_close). The
 * core (opts: fixed framing, no compression) lives as long as the bb_conn_t and is reset for
 * each new connection. */
struct bb_conn {
    bb_sock_t *sock; /* NULL while disconnected */
    chanq_client_t *core;
    char pit[24];
    uint32_t id;
    void (*on_authed)(bb_conn_t *c);
    void (*on_msg)(bb_conn_t *c, const chanq_msg_t *m);
    void (*on_lost)(bb_conn_t *c, int err);
    void *ud;
};

/* Creates c->core (once) and starts connecting to a. */
void bb_conn_open(bb_conn_t *c, uv_loop_t *loop, const struct sockaddr_in *a);
/* Writes what the core has queued (a no-op while disconnected). */
void bb_conn_flush(bb_conn_t *c);
/* Closes the connection (the core stays for the next one). */
void bb_conn_close(bb_conn_t *c);
/* SUB_TO_CHANNEL of conn_id (0: itself) to channel; cb gets the result. */
void bb_conn_sub(bb_conn_t *c, uint32_t channel, uint32_t conn_id, chanq_msg_fn cb, void *ud);

/* ---- /metrics ------------------------------------------------------------------------------- */

/* GET http://admin/metrics: the body (malloc'd, NUL-terminated; free it) or NULL. */
char *bb_metrics_fetch(const struct sockaddr_in *admin);
/* The sum of every sample of name in body: name without labels sums every labelled sample of
 * it, name with labels ({...}) matches that sample exactly. -1 when there is none. */
double bb_metric(const char *body, const char *name);
/* One metric fetched now (-1 on any failure). */
double bb_metric_now(const struct sockaddr_in *admin, const char *name);

/* ---- TopicEvents ---------------------------------------------------------------------------- */

/* The fields of a TopicEvent the benchmark reads (content borrowed from the message). */
typedef struct bb_event {
    uint64_t epoch, offset, prev_offset;
    const uint8_t *content;
    size_t content_len;
} bb_event_t;

/* Parses a bridge delivery's body (ServerForwardMessage{payload: TopicEvent}) without
 * allocating. Returns false when it does not parse. */
bool bb_event_parse(const uint8_t *body, size_t len, bb_event_t *ev);

/* An event's content as the benchmark produces it: "<seq> <send realtime ns> " then 'x' up to
 * size bytes (size >= 48). Writes size bytes to buf (no NUL). */
void bb_content_make(char *buf, size_t size, uint64_t seq, uint64_t real_ns);
/* Reads seq and the send time back; false when the content is not the benchmark's. */
bool bb_content_read(const uint8_t *p, size_t n, uint64_t *seq, uint64_t *real_ns);

/* A client's position, with libchanq's rules (chanq_topics.h, rules 2-6; the benchmark's
 * events have no producer key, so rule 1 never applies). */
typedef struct bb_track {
    bool has, pending;
    uint64_t epoch, offset;
    uint64_t accepted, dup, holes, skipped;
} bb_track_t;

/* 1: the app handles ev (the position moves), 0: dropped (counted). */
int bb_track_accept(bb_track_t *t, const bb_event_t *ev);
/* A TopicResumeResultMessage body: the position as chanq_topics_on_result applies it (one
 * topic); *recovered and the error text (copied to err[0..cap)). Returns false when the body
 * does not parse. */
bool bb_track_result(bb_track_t *t, const uint8_t *body, size_t len, bool *recovered, char *err,
                     size_t cap);

/* ---- latency samples ------------------------------------------------------------------------ */

typedef struct bb_samples {
    int64_t *v;
    size_t n, cap;
} bb_samples_t;

void bb_samples_add(bb_samples_t *s, int64_t ns);
/* The q-quantile (0..1) in microseconds (sorts the samples), -1 when there are none. */
double bb_pct_us(bb_samples_t *s, double q);

#endif
