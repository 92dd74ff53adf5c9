/* cq_fsm.h - the connection state machine of channeld's FSM files
 * (config/client_*_fsm.json, config/server_*_fsm.json).
 *
 * A file lists states, each allowing a set of message types (whitelist minus blacklist), an
 * optional initial state and transitions taken on given message types:
 *
 *   {"States": [{"Name": "INIT", "MsgTypeWhitelist": "1", "MsgTypeBlacklist": ""}, ...],
 *    "InitState": "INIT",
 *    "Transitions": [{"FromState": "INIT", "ToState": "OPEN", "MsgType": 1}, ...]}
 *
 * Lists are comma-separated decimals or "a-b" ranges (inclusive); spaces around items are
 * trimmed and an empty or missing list is the empty set. Message types above 65535 are never
 * allowed, and listing one is an error. Keys match case-insensitively, as Go's encoding/json
 * does; unknown keys and duplicate keys are errors. "InitState" defaults to the first state.
 *
 * A state is a bitmap over 0..65535 (8 KiB each). A loaded cq_fsm_t is immutable: every query
 * takes a const pointer, does no allocation and may run on any thread at the same time. A
 * connection keeps only its state index, 0 .. cq_fsm_state_count() - 1; a file has at most
 * CQ_FSM_MAX_STATES states, so the index fits in a uint8_t.
 *
 * Errors: CQ_EJSON when the text is not JSON (err says line and column), CQ_ECONFIG when the
 * JSON does not describe a valid FSM (err says what and where, for example
 * `state "OPEN": bad range "5-2" in MsgTypeWhitelist`), -errno when the file cannot be read,
 * -ENOMEM on allocation failure. err may be NULL when errlen is 0; it is always NUL-terminated
 * otherwise, and is left empty on success.
 */
#ifndef CQ_FSM_H
#define CQ_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_fsm cq_fsm_t;

/* Largest message type a state can allow. */
#define CQ_FSM_MAX_MSG_TYPE 65535u
/* Most states a file may define, so that a state index fits in a uint8_t. */
#define CQ_FSM_MAX_STATES 256

/* Parses json[0..len) (need not be NUL-terminated). On success stores a new FSM, owned by the
 * caller, in *ret and returns 0; on failure returns a negative code as above and leaves *ret
 * untouched. Any thread. */
int cq_fsm_load_json(const char *json, size_t len, cq_fsm_t **ret, char *err, size_t errlen);

/* Reads and parses the file at path (borrowed). Same contract as cq_fsm_load_json; error
 * messages are prefixed with the path. */
int cq_fsm_load_file(const char *path, cq_fsm_t **ret, char *err, size_t errlen);

/* Frees fsm (taken). Accepts NULL; returns NULL. No query may run concurrently. */
cq_fsm_t *cq_fsm_free(cq_fsm_t *fsm);

/* Index of the initial state: "InitState" if given, else 0. */
int cq_fsm_init_state(const cq_fsm_t *fsm);

/* Number of states (>= 1). */
int cq_fsm_state_count(const cq_fsm_t *fsm);

/* Name of state (borrowed, lives as long as fsm), or NULL if state is out of range. */
const char *cq_fsm_state_name(const cq_fsm_t *fsm, int state);

/* Index of the state called name (exact, case-sensitive match), or -1 if there is none. */
int cq_fsm_state_index(const cq_fsm_t *fsm, const char *name);

/* Whether state allows msg_type. False for an out-of-range state or msg_type > 65535. */
bool cq_fsm_allows(const cq_fsm_t *fsm, int state, uint32_t msg_type);

/* The state reached from state on msg_type: the ToState of the matching transition, or state
 * itself when there is none. It does not check cq_fsm_allows(); channeld takes the transition
 * only for an allowed message, before handling it, so callers check first. */
int cq_fsm_transition(const cq_fsm_t *fsm, int state, uint32_t msg_type);

/* The state after state by array order, used after a successful AUTH (channeld's MoveToNext).
 * The last state stays where it is. */
int cq_fsm_next_state(const cq_fsm_t *fsm, int state);

#endif
