/* cq_json.c - what the JSON readers of channeld's config files (FSM, channel settings) share:
 * one load prologue (read, parse, top-level check, error text), so every file reports its
 * mistakes the same way, and Go's key matching.
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

int cq_json_load(const char *json, size_t len, const char *object, cq_json_doc_fn doc, void *ud,
                 char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cq_err_fmt(err, errlen, CQ_EJSON, "line %d column %d: %s", jerr.line, jerr.column,
                          jerr.text);
    int r = json_is_object(root)
                ? doc(root, ud, err, errlen)
                : cq_err_fmt(err, errlen, CQ_ECONFIG, "the top level must be %s", object);
    json_decref(root);
    return r;
}

/* cq_file_load hands the contents to one function and one result pointer: the document's. */
typedef struct load_ctx {
    const char *object;
    cq_json_doc_fn doc;
    void *ud;
} load_ctx_t;

static int load_contents(const char *json, size_t len, void *ctx, char *err, size_t errlen)
{
    const load_ctx_t *l = ctx;
    return cq_json_load(json, len, l->object, l->doc, l->ud, err, errlen);
}

int cq_json_load_file(const char *path, const char *object, cq_json_doc_fn doc, void *ud, char *err,
                      size_t errlen)
{
    load_ctx_t l = {object, doc, ud};
    return cq_file_load(path, CQ_JSON_MAX_FILE, load_contents, &l, err, errlen);
}

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
