/* mgr_int.h - inside the management engine: the contract between the engine (mgr.c, state,
 * registry, protocol: the mgr helper) and the console API (api.c: the console helper).
 * Engine thread only.
 */
#ifndef CQ_MGR_INT_H
#define CQ_MGR_INT_H

#include "cq_mgr.h"

#include <stdbool.h>
#include <stdint.h>

/* --- provided by the engine, called by api.c ---------------------------------------------- */

/* The options the engine was built with (borrowed, engine lifetime). */
const cq_mgr_opts_t *cq__mgr_opts(const cq_mgr_t *m);
/* The state changes. Each validates (err names the field: "produce[2]: must be a topic name or
 * \"*\""), applies at once in memory, bumps the version, pushes publish_config (or the offline
 * command) to every connected server, queues the save, and returns the new version (> 0), or a
 * negative code: CQ_EFIELD / CQ_EJSON (400), CQ_ENOTFOUND-like absence as -ENOENT (404),
 * -ENOMEM. json is the request body (a module object as in the state document). */
int64_t cq__mgr_module_put(cq_mgr_t *m, uint32_t id, const char *json, size_t len, char *err,
                           size_t errlen);
int64_t cq__mgr_module_delete(cq_mgr_t *m, uint32_t id, char *err, size_t errlen);
int64_t cq__mgr_topic_set_online(cq_mgr_t *m, const char *topic, bool online, char *err,
                                 size_t errlen);
int64_t cq__mgr_server_set_offline(cq_mgr_t *m, uint32_t appid, bool offline, char *err,
                                   size_t errlen);
/* A topic's retention in days (0: keep forever; at most CQ_MGR_RETENTION_DAYS_MAX), pushed to
 * every server as seconds. A topic the manager had no entry for keeps the online state its
 * masters report (online when none reports it). */
#define CQ_MGR_RETENTION_DAYS_MAX 36500
int64_t cq__mgr_topic_set_retention(cq_mgr_t *m, const char *topic, int64_t days, uint64_t now,
                                    char *err, size_t errlen);
/* POST /api/topics: a topic new to the manager, online, which every shard's master creates
 * (days: its retention, 0 forever; -1: each server's own). CQ_ECONFLICT (409) when the manager
 * has it already. Returns the new version or a negative code, as the changes above. */
int64_t cq__mgr_topic_create(cq_mgr_t *m, const char *topic, int64_t days, char *err,
                             size_t errlen);
/* POST /api/topics/<t>/messages/<shard>/<offset>/invalidate: asks shard's master (the fresh,
 * connected server reporting itself master of shard) to set the message's state 0 (management
 * command 3; now: the wall clock, ms). 0: asked, and cq__mgr_api_invalidated(ud, ...) tells the
 * outcome exactly once, unless cq__mgr_invalidate_cancel(ud) comes first. Else the refusal, err its
 * text: CQ_EBADTOPIC, CQ_EOFFRANGE (400), CQ_ENOTMASTER (503: no master reports now), CQ_EBUSY (too
 * many in flight), CQ_ECLOSED, -ENOMEM. */
int cq__mgr_invalidate(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset,
                       uint64_t now, void *ud, char *err, size_t errlen);
/* GET /api/topics/<t>/messages/<shard>/<offset>: asks a server of shard (its standby when one
 * reports, never loading the master then; else the master) for the message whatever its state
 * (command 4). 0: asked, and cq__mgr_api_message(ud, ...) tells the outcome; else the refusal
 * as cq__mgr_invalidate's (CQ_ENOTMASTER: no server of the shard reports now). */
int cq__mgr_message(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t offset, uint64_t now,
                    void *ud, char *err, size_t errlen);
/* The same by producer key (GET .../messages/<shard>?producer_id=P&seq=S): CQ_EFIELD for a bad
 * key. The document's offset is the message's. */
int cq__mgr_message_key(cq_mgr_t *m, const char *topic, uint32_t shard, uint64_t producer_id,
                        uint64_t seq, uint64_t now, void *ud, char *err, size_t errlen);
/* The API's ud (a connection that closes) wants no answer any more. */
void cq__mgr_invalidate_cancel(cq_mgr_t *m, void *ud);
/* PUT /api/bindings: json is the whole bindings document ({"bindings":[...]}, doc/bridge.md),
 * checked as every server will check it (err is then exactly cq_bindings_parse's message,
 * CQ_EFIELD); it replaces the bindings of every managed server, and from the first one on the
 * servers no longer read their --bridge-file ({"bindings":[]} removes them all and stays
 * managed). Returns the new version or a negative code, as the changes above. */
int64_t cq__mgr_bindings_put(cq_mgr_t *m, const char *json, size_t len, char *err, size_t errlen);
/* GET /api/bindings' body, appended to out: the document as stored, {"bindings":[]} when none
 * was ever saved. 0 or -ENOMEM. */
int cq__mgr_bindings_json(const cq_mgr_t *m, cq_sbuf_t *out);
/* GET /api/charts' body, appended to out: {"interval_ms": N, "t": [ms...], "series": {key:
 * [value or null...]}} over the last hour, oldest first, the series whose key starts with
 * prefix (NULL or "": all). Keys: "topic/<T>/produce" (messages/s over its masters),
 * "topic/<T>/lag/<consumer>@<shard>", "shard/<S>/behind_ms", "server/<appid>/sockets",
 * "server/<appid>/produce", "server/<appid>/consume". 0 or -ENOMEM. */
#define CQ_MGR_CHART_SERIES_MAX 512
#define CQ_MGR_CHART_KEY_MAX    256 /* a key's bytes (hist.h's CQ_MGR_HIST_KEY_MAX) */
int cq__mgr_charts_json(const cq_mgr_t *m, const char *prefix, cq_sbuf_t *out);
/* GET /api/state's body (common.md contract 3), appended to out. 0 or -ENOMEM. */
int cq__mgr_state_json(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out);
/* Writes one audit line through ops.audit (the engine counts it in chanq_mgr_audit_total). */
void cq__mgr_audit_write(cq_mgr_t *m, const char *line, size_t len);

/* --- provided by api.c, called by the engine ------------------------------------------------ */

typedef struct cq_mgr_api cq_mgr_api_t;
/* Built by cq_mgr_new() / freed by cq_mgr_free() (accepts NULL). */
cq_mgr_api_t *cq__mgr_api_new(cq_mgr_t *m);
cq_mgr_api_t *cq__mgr_api_free(cq_mgr_api_t *a);
/* The engine's api state (set by cq_mgr_new). */
cq_mgr_api_t *cq__mgr_api(const cq_mgr_t *m);
/* cq_mgr_flush() and cq_mgr_tick() call these for the HTTP side. */
void cq__mgr_api_flush(cq_mgr_api_t *a);
void cq__mgr_api_tick(cq_mgr_api_t *a, uint64_t now_ms);
/* The outcome of a cq__mgr_invalidate for ud: 0, or the server's error (its err_code mapped
 * back, cq_mq_err_of_code: CQ_ENOMSG, CQ_ENOTOPIC, CQ_ENOTMASTER...), CQ_ECLOSED (the master's
 * connection went), CQ_ETIMEOUT; why its text. */
void cq__mgr_api_invalidated(cq_mgr_api_t *a, void *ud, int err, const char *why);
/* The outcome of a cq__mgr_message for ud: err 0 and json (borrowed, the answer's document:
 * {"topic","shard","offset","served_by","role","message":{...},"consumers":[{"id","offset",
 * "consumed"}]}), or the error as above with why. */
void cq__mgr_api_message(cq_mgr_api_t *a, void *ud, int err, const char *why, const char *json);

#endif
