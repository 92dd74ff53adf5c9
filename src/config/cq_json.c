/* cq_json.c - helpers shared by the JSON readers of channeld's config files (FSM, channel
 * settings).
 *
 * channeld reads these files with Go's encoding/json, which matches keys case-insensitively;
 * files written for channeld must load here unchanged, so the key matching is Go's. Unknown
 * and repeated keys are errors here (Go ignores unknown keys and lets the last repeated one
 * win), because a misspelt key would otherwise be silently dropped. */
#include "cq_json.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_file.h"

#include <string.h>
#include <strings.h>

int cq_json_pick(json_t *obj, const char *const names[], json_t *out[], const char *where,
                 char *err, size_t errlen)
{
    size_t n = 0;
    while (names[n])
        out[n++] = NULL;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        size_t i = 0;
        while (names[i] && strcasecmp(key, names[i]) != 0)
            i++;
        if (!names[i])
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: unknown key \"%s\"", where, key);
        if (out[i])
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: key \"%s\" given twice", where,
                              names[i]);
        out[i] = json_is_null(val) ? NULL : val;
    }
    return 0;
}
