/* cq_json.h - helpers for chanq's JSON config readers (FSM, channel settings). */
#ifndef CQ_JSON_H
#define CQ_JSON_H

#include <jansson.h>
#include <stddef.h>

/* Sorts the members of obj into out[i] by case-insensitive match with names[i] (NULL-ended),
 * as Go's encoding/json matches keys; out[i] is NULL for a missing or null member. Unknown and
 * repeated keys are errors (CQ_ECONFIG, message "<where>: unknown key ..." in err). obj and the
 * returned members are borrowed. */
int cq_json_pick(json_t *obj, const char *const names[], json_t *out[], const char *where,
                 char *err, size_t errlen);

#endif
