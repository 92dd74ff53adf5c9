/* cq_settings.h - per-channel-type settings (channeld's config/channel_settings_*.json).
 *
 * The file is a JSON object keyed by the channel type as a decimal string ("1" = GLOBAL,
 * "2" = PRIVATE, ...). Each value is an object with the keys (matched case-insensitively, as
 * Go's encoding/json does; a missing key takes Go's zero value, then the clamps below apply):
 *
 *   TickIntervalMs                  uint32  >= 1 (0 is raised to 1; channeld would spin)
 *   DefaultFanOutIntervalMs         uint32  >= 1 (0 is raised to 1; channeld would loop forever)
 *   DefaultFanOutDelayMs            int32
 *   RemoveChannelAfterOwnerRemoved  bool
 *   SendOwnerLostAndRecovered       bool
 *   ACLSettings                     {"Sub", "Unsub", "Remove"}: levels 0..3 (cq_acl_level_t)
 *   DataMsgFullName                 string, optional (a protobuf full type name)
 *
 * Lookup rules (channeld's): a type missing from the file gets the GLOBAL ("1") entry for
 * everything except the ACL, which is all None. Without a file, or without a "1" entry, GLOBAL
 * is tick 10 ms, fan-out 20 ms, delay 0, nothing removed or sent, ACL all None.
 *
 * A loaded cq_settings_t is immutable: lookups take a const pointer, do not allocate and may
 * run on any thread at the same time.
 *
 * Errors: CQ_EJSON when the text is not JSON (err says line and column), CQ_ECONFIG for a bad
 * key, type or range (err names the channel type and the field, for example
 * `channel type "2": ACLSettings.Sub: 7 is not an ACL level (0..3)`), -errno when the file
 * cannot be read, -ENOMEM on allocation failure. err may be NULL when errlen is 0; it is always
 * NUL-terminated otherwise, and is left empty on success.
 */
#ifndef CQ_SETTINGS_H
#define CQ_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Who passes an ACL check (channeld's ChannelAccessLevel). */
typedef enum {
    CQ_ACL_NONE = 0,                   /* nobody */
    CQ_ACL_OWNER_ONLY = 1,             /* the channel owner */
    CQ_ACL_OWNER_AND_GLOBAL_OWNER = 2, /* the channel owner or the GLOBAL owner */
    CQ_ACL_ANY = 3,                    /* everybody */
} cq_acl_level_t;

/* ACL levels (cq_acl_level_t values) for SUB and UNSUB of another connection, and REMOVE. */
typedef struct cq_acl {
    uint8_t sub, unsub, remove;
} cq_acl_t;

typedef struct cq_chan_settings {
    uint32_t tick_interval_ms;          /* >= 1 */
    uint32_t fanout_interval_ms;        /* default per-subscription fan-out interval, >= 1 */
    int32_t fanout_delay_ms;            /* default per-subscription fan-out delay */
    bool remove_after_owner_removed;    /* remove the channel when its owner is gone */
    bool send_owner_lost_and_recovered; /* notify subscribers of owner loss and recovery */
    cq_acl_t acl;
    const char *data_msg_full_name; /* NULL if unset; borrowed, lives as long as the settings */
} cq_chan_settings_t;

typedef struct cq_settings cq_settings_t; /* immutable after load, shared across threads */

/* The GLOBAL channel type, whose entry is the fallback for missing types. */
#define CQ_SETTINGS_GLOBAL_TYPE 1u

/* Parses json[0..len) (need not be NUL-terminated). On success stores new settings, owned by
 * the caller, in *ret and returns 0; on failure returns a negative code as above and leaves
 * *ret untouched. Any thread. */
int cq_settings_load_json(const char *json, size_t len, cq_settings_t **ret, char *err,
                          size_t errlen);

/* Reads and parses the file at path (borrowed). Same contract as cq_settings_load_json; error
 * messages are prefixed with the path. */
int cq_settings_load_file(const char *path, cq_settings_t **ret, char *err, size_t errlen);

/* The built-in settings (as if loaded from "{}"), owned by the caller; NULL on OOM. */
cq_settings_t *cq_settings_new_default(void);

/* Frees s (taken). Accepts NULL; returns NULL. No lookup may run concurrently. */
cq_settings_t *cq_settings_free(cq_settings_t *s);

/* Settings for channel_type: its own entry if the file has one, otherwise GLOBAL's with the
 * ACL all None. Never NULL; borrowed, valid until cq_settings_free(s). */
const cq_chan_settings_t *cq_settings_get(const cq_settings_t *s, uint32_t channel_type);

#endif
