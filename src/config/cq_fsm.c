/* cq_fsm.c - loads channeld FSM files into per-state bitmaps; queries are read-only.
 *
 * A state is a 8 KiB bitmap over every message type, so the FSM check on each inbound message
 * is one load and one mask, whatever the file says, and the loaded FSM is immutable and shared
 * by every worker without a lock. The parser follows Go's encoding/json where channeld's files
 * rely on it (case-insensitive keys) and is strict about mistakes (unknown or repeated keys,
 * malformed lists), because a typo in an FSM file would otherwise open or close message types
 * without a word. */
#include "cq_fsm.h"

#include "cq_alloc.h"
#include "cq_json.h"
#include "cq_err.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define BITMAP_WORDS ((CQ_FSM_MAX_MSG_TYPE + 1) / 64)

typedef struct fsm_state {
    char *name;
    uint64_t bits[BITMAP_WORDS];
} fsm_state_t;

typedef struct fsm_trans {
    int from;
    int to;
    uint32_t msg_type;
} fsm_trans_t;

struct cq_fsm {
    int nstates;
    int init;
    fsm_state_t *states;
    size_t ntrans;
    fsm_trans_t *trans;
};

/* ---- message type lists ----------------------------------------------------------------- */

typedef struct list_ctx {
    const char *state;
    const char *field;
    char *err;
    size_t errlen;
} list_ctx_t;

static void trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

/* Parses the decimal in [s, e) (already trimmed) into *ret (<= 65535). */
static int parse_num(const char *s, const char *e, uint32_t *ret, const list_ctx_t *c)
{
    uint32_t v = 0;
    if (s == e)
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG, "state \"%s\": missing number in %s",
                          c->state, c->field);
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                              "state \"%s\": bad number \"%.*s\" in %s", c->state, (int)(e - s), s,
                              c->field);
        v = v * 10 + (uint32_t)(*p - '0');
        if (v > CQ_FSM_MAX_MSG_TYPE)
            return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG,
                              "state \"%s\": %.*s in %s is above the largest message type %u",
                              c->state, (int)(e - s), s, c->field, CQ_FSM_MAX_MSG_TYPE);
    }
    *ret = v;
    return 0;
}

static void set_bits(uint64_t *bits, uint32_t lo, uint32_t hi, bool on)
{
    for (uint32_t t = lo; t <= hi; t++) {
        uint64_t m = UINT64_C(1) << (t % 64);
        bits[t / 64] = on ? bits[t / 64] | m : bits[t / 64] & ~m;
    }
}

/* One item of a list: "n" or "a-b", trimmed. */
static int parse_item(const char *s, const char *e, uint64_t *bits, bool on, const list_ctx_t *c)
{
    trim(&s, &e);
    if (s == e)
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG, "state \"%s\": empty item in %s", c->state,
                          c->field);
    const char *dash = memchr(s, '-', (size_t)(e - s));
    const char *ae = dash ? dash : e, *bs = dash ? dash + 1 : s, *be = e;
    trim(&s, &ae);
    trim(&bs, &be);
    uint32_t lo, hi;
    int r = parse_num(s, ae, &lo, c);
    if (r == 0)
        r = parse_num(bs, be, &hi, c);
    if (r < 0)
        return r;
    if (lo > hi)
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG, "state \"%s\": bad range \"%.*s\" in %s",
                          c->state, (int)(e - s), s, c->field);
    set_bits(bits, lo, hi, on);
    return 0;
}

/* Applies the list in v (a JSON string, or NULL for none) to bits. */
static int parse_list(json_t *v, uint64_t *bits, bool on, const list_ctx_t *c)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return cq_err_fmt(c->err, c->errlen, CQ_ECONFIG, "state \"%s\": %s must be a string",
                          c->state, c->field);
    const char *s = json_string_value(v), *end = s + json_string_length(v);
    const char *ts = s, *te = end;
    trim(&ts, &te);
    if (ts == te)
        return 0;
    while (s <= end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *ie = comma ? comma : end;
        int r = parse_item(s, ie, bits, on, c);
        if (r < 0)
            return r;
        s = ie + 1;
    }
    return 0;
}

/* ---- states and transitions -------------------------------------------------------------- */

static int load_state(cq_fsm_t *fsm, int idx, json_t *obj, char *err, size_t errlen)
{
    static const char *const keys[] = {"Name", "MsgTypeWhitelist", "MsgTypeBlacklist", NULL};
    json_t *v[3];
    char where[32];
    snprintf(where, sizeof(where), "States[%d]", idx);
    if (!json_is_object(obj))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be an object", where);
    int r = cq_json_pick(obj, keys, v, where, err, errlen);
    if (r < 0)
        return r;
    if (!v[0] || !json_is_string(v[0]) || json_string_length(v[0]) == 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: missing Name (a non-empty string)", where);
    const char *name = json_string_value(v[0]);
    if (cq_fsm_state_index(fsm, name) >= 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: duplicate state name \"%s\"", where, name);
    fsm_state_t *st = &fsm->states[idx];
    list_ctx_t c = {name, "MsgTypeWhitelist", err, errlen};
    r = parse_list(v[1], st->bits, true, &c);
    c.field = "MsgTypeBlacklist";
    if (r == 0)
        r = parse_list(v[2], st->bits, false, &c);
    if (r < 0)
        return r;
    st->name = cq_strdup(name);
    if (!st->name)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    fsm->nstates = idx + 1;
    return 0;
}

static int load_states(cq_fsm_t *fsm, json_t *arr, char *err, size_t errlen)
{
    if (!arr || !json_is_array(arr) || json_array_size(arr) == 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "no states: States must be a non-empty array");
    if (json_array_size(arr) > CQ_FSM_MAX_STATES)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "too many states (%zu, at most %d)",
                          json_array_size(arr), CQ_FSM_MAX_STATES);
    fsm->states = cq_calloc(json_array_size(arr), sizeof(*fsm->states));
    if (!fsm->states)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    size_t i;
    json_t *obj;
    json_array_foreach(arr, i, obj)
    {
        int r = load_state(fsm, (int)i, obj, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Resolves the state name in v (the key of Transitions[idx]). */
static int trans_state(const cq_fsm_t *fsm, json_t *v, size_t idx, const char *key, char *err,
                       size_t errlen)
{
    if (!v || !json_is_string(v))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Transitions[%zu]: missing %s (a state name)",
                          idx, key);
    int s = cq_fsm_state_index(fsm, json_string_value(v));
    if (s < 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Transitions[%zu]: unknown state \"%s\" in %s",
                          idx, json_string_value(v), key);
    return s;
}

static int load_transition(cq_fsm_t *fsm, size_t idx, json_t *obj, char *err, size_t errlen)
{
    static const char *const keys[] = {"FromState", "ToState", "MsgType", NULL};
    json_t *v[3];
    char where[40];
    snprintf(where, sizeof(where), "Transitions[%zu]", idx);
    if (!json_is_object(obj))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be an object", where);
    int r = cq_json_pick(obj, keys, v, where, err, errlen);
    int from = r < 0 ? r : trans_state(fsm, v[0], idx, "FromState", err, errlen);
    int to = from < 0 ? from : trans_state(fsm, v[1], idx, "ToState", err, errlen);
    if (to < 0)
        return to;
    json_int_t mt = json_is_integer(v[2]) ? json_integer_value(v[2]) : -1;
    if (mt < 0 || mt > (json_int_t)UINT32_MAX)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "%s: MsgType must be an integer in 0..4294967295", where);
    for (size_t i = 0; i < fsm->ntrans; i++) {
        if (fsm->trans[i].from == from && fsm->trans[i].msg_type == (uint32_t)mt)
            return cq_err_fmt(err, errlen, CQ_ECONFIG,
                              "%s: a transition from \"%s\" on %u is already "
                              "defined",
                              where, fsm->states[from].name, (uint32_t)mt);
    }
    fsm->trans[fsm->ntrans++] = (fsm_trans_t){from, to, (uint32_t)mt};
    return 0;
}

static int load_transitions(cq_fsm_t *fsm, json_t *arr, char *err, size_t errlen)
{
    if (!arr)
        return 0;
    if (!json_is_array(arr))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Transitions must be an array");
    if (json_array_size(arr) == 0)
        return 0;
    fsm->trans = cq_calloc(json_array_size(arr), sizeof(*fsm->trans));
    if (!fsm->trans)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    size_t i;
    json_t *obj;
    json_array_foreach(arr, i, obj)
    {
        int r = load_transition(fsm, i, obj, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

static int load_init(cq_fsm_t *fsm, json_t *v, char *err, size_t errlen)
{
    if (!v)
        return 0;
    if (!json_is_string(v))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "InitState must be a string");
    if (json_string_length(v) == 0)
        return 0;
    fsm->init = cq_fsm_state_index(fsm, json_string_value(v));
    if (fsm->init < 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "InitState \"%s\" is not a state",
                          json_string_value(v));
    return 0;
}

static int load_root(cq_fsm_t *fsm, json_t *root, char *err, size_t errlen)
{
    static const char *const keys[] = {"States", "InitState", "Transitions", NULL};
    json_t *v[3];
    int r = cq_json_pick(root, keys, v, "top level", err, errlen);
    if (r == 0)
        r = load_states(fsm, v[0], err, errlen);
    if (r == 0)
        r = load_init(fsm, v[1], err, errlen);
    if (r == 0)
        r = load_transitions(fsm, v[2], err, errlen);
    return r;
}

/* ---- public API ----------------------------------------------------------------------- */

/* The document's part of a load (cq_json_load does the rest): *ret is set only on success. */
static int load_doc(json_t *root, void *ret, char *err, size_t errlen)
{
    cq_fsm_t *fsm = cq_calloc(1, sizeof(*fsm));
    int r =
        fsm ? load_root(fsm, root, err, errlen) : cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    if (r < 0) {
        cq_fsm_free(fsm);
        return r;
    }
    *(cq_fsm_t **)ret = fsm;
    return 0;
}

int cq_fsm_load_json(const char *json, size_t len, cq_fsm_t **ret, char *err, size_t errlen)
{
    return cq_json_load(json, len, "a JSON object", load_doc, ret, err, errlen);
}

int cq_fsm_load_file(const char *path, cq_fsm_t **ret, char *err, size_t errlen)
{
    return cq_json_load_file(path, "a JSON object", load_doc, ret, err, errlen);
}

cq_fsm_t *cq_fsm_free(cq_fsm_t *fsm)
{
    if (!fsm)
        return NULL;
    for (int i = 0; i < fsm->nstates; i++)
        cq_free(fsm->states[i].name);
    cq_free(fsm->states);
    cq_free(fsm->trans);
    cq_free(fsm);
    return NULL;
}

int cq_fsm_init_state(const cq_fsm_t *fsm)
{
    return fsm->init;
}

int cq_fsm_state_count(const cq_fsm_t *fsm)
{
    return fsm->nstates;
}

const char *cq_fsm_state_name(const cq_fsm_t *fsm, int state)
{
    if (state < 0 || state >= fsm->nstates)
        return NULL;
    return fsm->states[state].name;
}

int cq_fsm_state_index(const cq_fsm_t *fsm, const char *name)
{
    for (int i = 0; i < fsm->nstates; i++) {
        if (strcmp(fsm->states[i].name, name) == 0)
            return i;
    }
    return -1;
}

bool cq_fsm_allows(const cq_fsm_t *fsm, int state, uint32_t msg_type)
{
    if (state < 0 || state >= fsm->nstates || msg_type > CQ_FSM_MAX_MSG_TYPE)
        return false;
    return (fsm->states[state].bits[msg_type / 64] >> (msg_type % 64)) & 1;
}

int cq_fsm_transition(const cq_fsm_t *fsm, int state, uint32_t msg_type)
{
    for (size_t i = 0; i < fsm->ntrans; i++) {
        if (fsm->trans[i].from == state && fsm->trans[i].msg_type == msg_type)
            return fsm->trans[i].to;
    }
    return state;
}

int cq_fsm_next_state(const cq_fsm_t *fsm, int state)
{
    if (state < 0 || state + 1 >= fsm->nstates)
        return state;
    return state + 1;
}
