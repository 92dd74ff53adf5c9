/* cq_json.h - what chanq's readers of channeld's JSON config files (FSM, channel settings)
 * share: the one load prologue and Go's key matching. */
#ifndef CQ_JSON_H
#define CQ_JSON_H

#include <jansson.h>
#include <stddef.h>

/* Largest config file a loader reads. */
#define CQ_JSON_MAX_FILE (16u << 20)

/* A document's own part: builds its result from root (borrowed, a JSON object) into ud. */
typedef int (*cq_json_doc_fn)(json_t *root, void *ud, char *err, size_t errlen);

/* The load prologue of every config document: empties err, parses json[0..len) (need not be
 * NUL-terminated; repeated keys rejected), checks that the top level is an object and runs doc
 * on it. `object` names the object the top level must be in the error message, "a JSON object"
 * for example. Errors: CQ_EJSON "line L column C: ..." when the text is not JSON, CQ_ECONFIG
 * "the top level must be <object>", or doc's result. err may be NULL when errlen is 0; it
 * is always NUL-terminated otherwise. */
int cq_json_load(const char *json, size_t len, const char *object, cq_json_doc_fn doc, void *ud,
                 char *err, size_t errlen);

/* cq_json_load on the contents of the file at path (borrowed; at most CQ_JSON_MAX_FILE bytes),
 * with every message prefixed by the path; -errno when it cannot be read. */
int cq_json_load_file(const char *path, const char *object, cq_json_doc_fn doc, void *ud, char *err,
                      size_t errlen);

/* Sorts the members of obj into out[i] by case-insensitive match with names[i] (NULL-ended),
 * as Go's encoding/json matches keys; out[i] is NULL for a missing or null member. Unknown and
 * repeated keys are errors (CQ_ECONFIG, message "<where>: unknown key ..." in err). obj and the
 * returned members are borrowed. */
int cq_json_pick(json_t *obj, const char *const names[], json_t *out[], const char *where,
                 char *err, size_t errlen);

#endif
