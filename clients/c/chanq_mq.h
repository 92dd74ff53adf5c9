/* chanq_mq.h - libchanq's client core for the durable-topic ("seed") protocol, sans I/O.
 *
 * The core does no I/O (style §9.11): the caller feeds the bytes it read with chanq_mq_feed()
 * and writes out what chanq_mq_out() returns. Each request function encodes one frame (see
 * doc/protocol-mq.md), allocates its askid and records a completion callback; when the
 * response with that askid arrives (in any order: the server answers a keepalive at once and a
 * produce after its commit), the callback runs from inside chanq_mq_feed(). Pushes (type 18)
 * go to the callback of the watch of their topic, or to opts.on_push.
 *
 * Error codes: 0, -ENOMEM, or the CQ_E* code of the server's err_code (chanq_mq_err()):
 * unauthenticated -> CQ_EAUTH, no_permission -> CQ_EACL, unknown_topic -> CQ_ENOTOPIC, busy ->
 * CQ_EBUSY... and internal (or an unknown code) -> -EREMOTEIO. A callback gets the response
 * with err_code and err_msg too.
 *
 * Threads: a chanq_mq_t belongs to one thread at a time. Callbacks may issue new requests but
 * must not free the core.
 */
#ifndef CHANQ_MQ_H
#define CHANQ_MQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_err.h"
#include "cq_mq.h"

typedef struct chanq_mq chanq_mq_t;

/* Completion of one request. err: 0 if the server answered err_code 0, its CQ_E* code
 * otherwise, or a local error with resp NULL (CQ_ECLOSED from chanq_mq_fail_all()).
 * resp: taken (free it with cq_mq_msg_free()); its type is the request's + 1, or
 * CQ_MQ_RESP_ERROR when the server could not answer with the response type. */
typedef void (*chanq_mq_done_cb)(chanq_mq_t *c, int err, cq_mq_msg_t *resp, void *ud);

/* A push (type 18) or an unsolicited frame. m: taken (cq_mq_msg_free()). */
typedef void (*chanq_mq_push_cb)(chanq_mq_t *c, cq_mq_msg_t *m, void *ud);

typedef struct chanq_mq_opts {
    uint32_t max_total; /* largest frame accepted; 0: CQ_MQ_DEFAULT_MAX_TOTAL */
    /* Pushes of topics without a watch callback, error frames without an askid and answers
     * to unknown askids. NULL: dropped. */
    chanq_mq_push_cb on_push;
    void *ud;
} chanq_mq_opts_t;

/* One message to produce: data[0..len) is a string, or (json) the text of a JSON object. */
typedef struct chanq_mq_content {
    const char *data;
    size_t len;
    bool json;
    int64_t time; /* ms since the epoch; -1: not sent */
} chanq_mq_content_t;

/* A produce request. With producer_id > 0 every message gets the idempotence key
 * (producer_id, seq + i); seq < 0 lets the core assign the next sequence of producer_id
 * (starting at 0, advanced by every produce of that id, explicit seqs included). A retry of a
 * failed or unanswered produce must reuse the same seq: read it with chanq_mq_next_seq()
 * before the first try, or pass it explicitly. */
typedef struct chanq_mq_produce {
    const char *topic;
    const chanq_mq_content_t *msgs; /* borrowed, n >= 1 */
    size_t n;
    int64_t producer_id; /* 0: no idempotence key */
    int64_t seq;         /* -1: automatic */
    int64_t time;        /* request time; -1: not sent */
} chanq_mq_produce_t;

/* The CQ_E* code of a wire err_code: 0 for 0, -EREMOTEIO for internal and unknown codes. */
int chanq_mq_err(uint32_t err_code);
/* The master a read_on_master answer (err_code 20, CQ_EREADMASTER: a standby with --slave-reads
 * off, doc/cluster.md "Standby reads") names: the HOST:PORT after the last "master=" of
 * err_msg (borrowed), copied to addr[0..cap). Returns 0, or -EINVAL (none, empty or too long). */
int chanq_mq_read_master(const char *err_msg, char *addr, size_t cap);

/* ---- lifecycle ------------------------------------------------------------------------- */

/* Returns an owned core (opts borrowed, may be NULL) or NULL on OOM. */
chanq_mq_t *chanq_mq_new(const chanq_mq_opts_t *opts);
/* Frees the core, its queued bytes, watches and pending requests without calling their
 * callbacks (call chanq_mq_fail_all() first for that). Accepts NULL; returns NULL. */
chanq_mq_t *chanq_mq_free(chanq_mq_t *c);
/* Completes every pending request with err and a NULL response (the connection is gone).
 * Watches stay registered. Calls back. */
void chanq_mq_fail_all(chanq_mq_t *c, int err);
/* Forgets the callback of the pending request askid: its answer is dropped. Returns 0 or
 * -ENOENT. */
int chanq_mq_cancel(chanq_mq_t *c, uint32_t askid);
/* Number of requests waiting for an answer. */
size_t chanq_mq_pending(const chanq_mq_t *c);
/* client_id from the last successful connect_resp; -1 before. */
int64_t chanq_mq_client_id(const chanq_mq_t *c);

/* ---- bytes ----------------------------------------------------------------------------- */

/* Parses p[0..n) (borrowed; may split frames anywhere) and calls back for every complete
 * frame. Returns 0, or a stream error after which the connection must be closed: CQ_EHEADER,
 * CQ_EBADLEN, CQ_EJSON / CQ_EFIELD / CQ_ENOTYPE (a frame that does not decode), -ENOMEM. */
int chanq_mq_feed(chanq_mq_t *c, const uint8_t *p, size_t n);
/* The bytes to send (borrowed, valid until the next call on c); *ret_len 0 when none. */
const uint8_t *chanq_mq_out(const chanq_mq_t *c, size_t *ret_len);
/* Marks n bytes of chanq_mq_out() as sent. */
void chanq_mq_out_consume(chanq_mq_t *c, size_t n);

/* ---- requests ---------------------------------------------------------------------------
 * Each queues one frame and on success writes its askid to *ret_askid (may be NULL). cb may
 * be NULL (the answer is dropped). Returns 0, CQ_EBADTOPIC, CQ_EFIELD (a bad value: token too
 * long, content not UTF-8 / not a JSON object, n == 0), CQ_ELIMIT (more than 65535 pending) or
 * -ENOMEM; nothing is queued on error. */

int chanq_mq_connect(chanq_mq_t *c, uint32_t module_id, const char *token, uint32_t client_type,
                     chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid);
int chanq_mq_keepalive(chanq_mq_t *c, chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid);
int chanq_mq_add_topic(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                       uint32_t *ret_askid);
/* req: borrowed. The answer's offsets[] has one offset per message. */
int chanq_mq_produce(chanq_mq_t *c, const chanq_mq_produce_t *req, chanq_mq_done_cb cb, void *ud,
                     uint32_t *ret_askid);
/* Messages with an offset larger than offset; max_count 0: the server's default. */
int chanq_mq_consume(chanq_mq_t *c, const char *topic, int64_t offset, uint32_t max_count,
                     chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid);
int chanq_mq_commit(chanq_mq_t *c, const char *topic, int64_t offset, chanq_mq_done_cb cb, void *ud,
                    uint32_t *ret_askid);
/* Makes this client a consumer instance of its module: its commit and offset requests from now
 * on keep and read an offset of its own ("m<module_id>/<instance>", doc/protocol-mq.md), so two
 * instances of one service each resume from their own progress. instance: 1 to 100 printable
 * ASCII characters without a space (copied), or NULL / "" for the module's shared offset.
 * Returns 0 or -EINVAL. */
int chanq_mq_set_instance(chanq_mq_t *c, const char *instance);
/* The offset this module's consumer committed in topic: the answer (offset_resp) has offset
 * (0 if never), committed (false if never) and last_offset (the topic's last offset). */
int chanq_mq_offset(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                    uint32_t *ret_askid);
/* The topics this module may use: the answer (topics_resp) has topic_infos[0..ntopic_infos). */
int chanq_mq_topics(chanq_mq_t *c, chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid);
/* Registers on_push (may be NULL: opts.on_push gets them) for the topic's pushes right away
 * (replacing an earlier one) and asks the server to watch; a failed watch_resp removes it. */
int chanq_mq_watch(chanq_mq_t *c, const char *topic, chanq_mq_push_cb on_push, void *push_ud,
                   chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid);
/* Removes the topic's push callback at once and asks the server to stop. */
int chanq_mq_unwatch(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                     uint32_t *ret_askid);

/* The seq the next automatic produce of producer_id will use (0 for a new id). */
int64_t chanq_mq_next_seq(const chanq_mq_t *c, int64_t producer_id);

#endif
