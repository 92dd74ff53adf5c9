/* mq_follow.h - the MQ loop's connections to the shards a bridge follows (internal to src/io,
 * used by mq_io.c): one outgoing TCP connection per link of the sans-I/O follower
 * (cq_mqfollow.h), to the server it names; after a failure the next attempt goes to the server
 * it names then (the shard's next one), with a back-off of 0.2 s doubling to 2 s. MQ loop
 * thread only.
 */
#ifndef CQ_IO_MQ_FOLLOW_H
#define CQ_IO_MQ_FOLLOW_H

#include "cq_mqfollow.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define CQ_MQ_FOLLOW_BACKOFF_MIN_MS 200
#define CQ_MQ_FOLLOW_BACKOFF_MAX_MS 2000

typedef struct mq_follow mq_follow_t;

/* Resolves every server of f's links and starts connecting on loop. f is borrowed. Returns 0
 * with *ret owned (cq__mq_follow_free after the loop closed its handles), or a negative code
 * with err filled. */
int cq__mq_follow_start(uv_loop_t *loop, cq_mqfollow_t *f, mq_follow_t **ret, char *err,
                        size_t errlen);
/* Every MQ tick: the follower's timers, and what it queued is written. */
void cq__mq_follow_tick(mq_follow_t *m, uint64_t now_ms);
/* Writes what the follower queued on every link (after the engine handed it work). */
void cq__mq_follow_flush(mq_follow_t *m);
/* Closes the connections and the timers (idempotent); the loop runs their close callbacks. */
void cq__mq_follow_close(mq_follow_t *m);
/* Frees m once its handles are closed. Accepts NULL. */
void cq__mq_follow_free(mq_follow_t *m);

#endif
