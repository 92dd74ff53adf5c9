/* chanq_mq_sync.h - a blocking durable-topic client over POSIX sockets and poll(), built on the
 * sans-I/O core chanq_mq.h. For producers, simple consumers, tests and the `chanq` CLI.
 *
 * Each call queues its request, then writes and reads (poll on a non-blocking socket, so a
 * large request and incoming pushes cannot deadlock) until its answer arrives or the timeout
 * (chanq_mq_sync_set_timeout, default CHANQ_MQ_SYNC_DEFAULT_TIMEOUT_MS) expires. Pushes that
 * arrive meanwhile are queued for chanq_mq_sync_wait_push(). chanq_mq_sync_produce() returns
 * only after the server's produce_resp, which chanqd sends after the commit: offsets returned
 * are durable.
 *
 * Return codes: 0; the CQ_E* code of the server's err_code (chanq_mq_err(): CQ_EAUTH,
 * CQ_EACL, CQ_ENOTOPIC, CQ_EBUSY, ...; -EREMOTEIO for internal), with the wire code and the
 * err_msg text kept for chanq_mq_sync_errcode() / chanq_mq_sync_errmsg(); CQ_ETIMEOUT;
 * CQ_ECLOSED when the server closed the connection; -errno for socket errors; CQ_EHEADER,
 * CQ_EJSON... when the server sent bytes that do not decode (the connection is then unusable).
 * After CQ_ETIMEOUT the answer, if it comes later, is dropped.
 *
 * Threads: a chanq_mq_sync_t belongs to one thread at a time. Writes use MSG_NOSIGNAL.
 */
#ifndef CHANQ_MQ_SYNC_H
#define CHANQ_MQ_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chanq_mq.h"

#define CHANQ_MQ_SYNC_DEFAULT_TIMEOUT_MS 10000

typedef struct chanq_mq_sync chanq_mq_sync_t;

/* Connects TCP to host:port (numeric or resolvable) within timeout_ms, then sends connect
 * (module_id, token: borrowed, NULL for ""; client_type CQ_MQ_PRODUCER or CQ_MQ_CONSUMER) and
 * waits for its answer. *ret_s is returned owned and written only on success. On a server
 * refusal (CQ_EAUTH...) the text is copied to err[0..errlen) when err is not NULL. */
int chanq_mq_sync_connect(const char *host, uint16_t port, uint32_t module_id, const char *token,
                          uint32_t client_type, int timeout_ms, char *err, size_t errlen,
                          chanq_mq_sync_t **ret_s);
/* Parses "HOST:PORT" (IPv6 as "[::1]:12110") into host[0..cap) and *ret_port. Returns 0 or
 * -EINVAL. */
int chanq_mq_sync_parse_addr(const char *addr, char *host, size_t cap, uint16_t *ret_port);
/* Closes the socket and frees everything, queued pushes included. Accepts NULL; returns NULL. */
chanq_mq_sync_t *chanq_mq_sync_close(chanq_mq_sync_t *s);
/* Timeout of every later call, in ms (negative: wait forever). */
void chanq_mq_sync_set_timeout(chanq_mq_sync_t *s, int timeout_ms);
/* The core (borrowed), e.g. for chanq_mq_next_seq(). Do not feed it. */
chanq_mq_t *chanq_mq_sync_core(chanq_mq_sync_t *s);

/* The wire err_code of the last failed call (0 if it failed locally or did not fail) and its
 * err_msg (or the text of the local error); never NULL, valid until the next call. */
uint32_t chanq_mq_sync_errcode(const chanq_mq_sync_t *s);
const char *chanq_mq_sync_errmsg(const chanq_mq_sync_t *s);

/* ---- calls ----------------------------------------------------------------------------- */

/* The server's weight (health score) in *ret_weight when not NULL. */
int chanq_mq_sync_keepalive(chanq_mq_sync_t *s, uint32_t *ret_weight);
/* The same, with the whole keepalive_resp in *ret_resp (returned owned, cq_mq_msg_free()):
 * weight, and in a cluster the server's shard and whether it is master now. */
int chanq_mq_sync_keepalive_resp(chanq_mq_sync_t *s, cq_mq_msg_t **ret_resp);
int chanq_mq_sync_add_topic(chanq_mq_sync_t *s, const char *topic);
/* Produces req (borrowed; see chanq_mq_produce_t for producer_id / seq) and, once acked,
 * writes req->n offsets to ret_offsets (may be NULL). */
int chanq_mq_sync_produce(chanq_mq_sync_t *s, const chanq_mq_produce_t *req, int64_t *ret_offsets);
/* One string message, no idempotence key. */
int chanq_mq_sync_produce1(chanq_mq_sync_t *s, const char *topic, const char *content,
                           int64_t *ret_offset);
/* Messages after offset (max_count 0: the server's default). *ret_resp is the returned-owned
 * consume_resp (items[0..nitems) with offset and content; offset = the last one): free it
 * with cq_mq_msg_free(). */
int chanq_mq_sync_consume(chanq_mq_sync_t *s, const char *topic, int64_t offset, uint32_t max_count,
                          cq_mq_msg_t **ret_resp);
int chanq_mq_sync_commit(chanq_mq_sync_t *s, const char *topic, int64_t offset);
/* chanq_mq_set_instance() for this connection's commits and offset reads. */
int chanq_mq_sync_set_instance(chanq_mq_sync_t *s, const char *instance);
/* This module's committed offset in topic (0 and *ret_committed false if it never committed)
 * and the topic's last offset. Output pointers may be NULL. */
int chanq_mq_sync_offset(chanq_mq_sync_t *s, const char *topic, int64_t *ret_offset,
                         bool *ret_committed, int64_t *ret_last_offset);
/* The topics this module may produce or consume (all of them for an admin module), sorted by
 * name. *ret_resp is the returned-owned topics_resp (topic_infos[0..ntopic_infos)): free it with
 * cq_mq_msg_free(). */
int chanq_mq_sync_topics(chanq_mq_sync_t *s, cq_mq_msg_t **ret_resp);
/* Watches the topic: its pushes are queued for chanq_mq_sync_wait_push(). */
int chanq_mq_sync_watch(chanq_mq_sync_t *s, const char *topic);
int chanq_mq_sync_unwatch(chanq_mq_sync_t *s, const char *topic);
/* The oldest queued push (of any watched topic), waiting up to timeout_ms (negative: forever;
 * 0: only what is already received). *ret_push is returned owned (cq_mq_msg_free()). Returns
 * 0, CQ_ETIMEOUT, CQ_ECLOSED or a socket / stream error. */
int chanq_mq_sync_wait_push(chanq_mq_sync_t *s, int timeout_ms, cq_mq_msg_t **ret_push);

/* Internal (libchanq's cluster client): a blocking TCP connect with TCP_NODELAY, the socket
 * left non-blocking. Returns the fd, -EINVAL, CQ_ETIMEOUT or -errno. */
int chanq__mq_tcp_connect(const char *host, uint16_t port, int timeout_ms);

#endif
