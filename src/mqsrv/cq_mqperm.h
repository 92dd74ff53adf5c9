/* cq_mqperm.h - who may do what on the durable-topic port (issue 4, "Permissions").
 *
 * A permissions table is loaded from JSON text:
 *
 *   {"<module_id>": {"token": "...", "produce": ["orders", "*"], "consume": [...],
 *                    "admin": true}}
 *
 * module_id is a decimal u32. token is required (a module without one fails to load, naming the
 * module) and compared exactly, in constant time. "produce" and
 * "consume" list topic names ([A-Za-z0-9_]{1,64}, matched case-insensitively, as the store names
 * topics) or "*" for every topic. "admin" lets the module create topics with add_topic.
 * Unknown keys are refused, so a typo does not silently grant or withhold a right.
 *
 * A NULL table means "every module may do everything" (no permissions file configured); the
 * operation layer still refuses writes from peers that are not on loopback then (ops.c).
 * Pure: no I/O, no clock. A loaded table is read-only and may be shared between threads.
 */
#ifndef CQ_MQPERM_H
#define CQ_MQPERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_mqperm cq_mqperm_t;

typedef enum cq_mqperm_right {
    CQ_MQPERM_PRODUCE = 1,
    CQ_MQPERM_CONSUME = 2,
    CQ_MQPERM_ADMIN = 3, /* topic is ignored */
} cq_mqperm_right_t;

/* Parses json[0..len). On success *ret_perm is returned owned (cq_mqperm_free). Returns 0,
 * CQ_EJSON / CQ_EFIELD with a message in err naming the module and key, or -ENOMEM. */
int cq_mqperm_load(const char *json, size_t len, cq_mqperm_t **ret_perm, char *err, size_t errlen);
/* Frees p. Accepts NULL; returns NULL. */
cq_mqperm_t *cq_mqperm_free(cq_mqperm_t *p);

/* True if module_id exists in p and token (borrowed, NUL-terminated; NULL = "") matches.
 * Always true when p is NULL. */
bool cq_mqperm_auth(const cq_mqperm_t *p, uint32_t module_id, const char *token);
/* True if module_id has right on topic (borrowed; ignored for CQ_MQPERM_ADMIN). Always true when
 * p is NULL. */
bool cq_mqperm_allows(const cq_mqperm_t *p, uint32_t module_id, cq_mqperm_right_t right,
                      const char *topic);

#endif
