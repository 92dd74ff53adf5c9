/* cfg.c - channeld's spatial controller JSON (spatial_static_*.json) plus chanq's "Handover"
 * section: parse, validate, load a shipped layout or a file.
 *
 * Keys match case-insensitively and unknown keys are ignored, as Go's encoding/json does for
 * channeld; a key present with the wrong type is an error naming the key. */
#include "cq_spatial.h"

#include "cq_alloc.h"
#include "cq_embedded.h" /* the shipped layouts */
#include "cq_err.h"
#include "cq_file.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#define MAX_FILE_SIZE    (1u << 20)
#define DEF_CHAN_START   0x10000u
#define DEF_ENTITY_START 0x80000u

/* Go's encoding/json: the exact key first, then a case-insensitive match. */
static json_t *find(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    if (v)
        return v;
    const char *key;
    json_object_foreach(obj, key, v)
    {
        if (strcasecmp(key, name) == 0)
            return v;
    }
    return NULL;
}

static int get_double(json_t *obj, const char *name, double *ret, char *err, size_t errlen)
{
    json_t *v = find(obj, name);
    if (!v || json_is_null(v))
        return 0; /* Go leaves the zero value */
    if (!json_is_number(v))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be a number", name);
    *ret = json_number_value(v);
    if (!isfinite(*ret))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be finite", name);
    return 0;
}

static int get_u32(json_t *obj, const char *name, uint32_t *ret, char *err, size_t errlen)
{
    json_t *v = find(obj, name);
    if (!v || json_is_null(v))
        return 0;
    /* Go refuses 2.0 and -1 for a uint32 field, so do we. */
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be an integer in [0, %u]", name,
                          UINT32_MAX);
    *ret = (uint32_t)json_integer_value(v);
    return 0;
}

static int get_str(json_t *obj, const char *name, const char *def, char **ret, char *err,
                   size_t errlen)
{
    json_t *v = find(obj, name);
    if (v && !json_is_null(v) && !json_is_string(v))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Handover.%s: must be a string", name);
    const char *s = v && json_is_string(v) ? json_string_value(v) : def;
    *ret = cq_strdup(s);
    return *ret ? 0 : cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
}

static int parse_axes(const char *s, uint8_t axes[3], char *err, size_t errlen)
{
    static const char names[] = "xyz";
    bool seen[3] = {false, false, false};
    if (strlen(s) != 3)
        goto bad;
    for (int i = 0; i < 3; i++) {
        const char *p = strchr(names, s[i] | 0x20); /* "XZY" works too */
        if (!p || seen[p - names])
            goto bad;
        seen[p - names] = true;
        axes[i] = (uint8_t)(p - names);
    }
    return 0;
bad:
    return cq_err_fmt(err, errlen, CQ_ECONFIG,
                      "Handover.Axes: \"%s\" is not a permutation of \"xyz\"", s);
}

static int get_bool(json_t *obj, const char *name, bool def, bool *ret, char *err, size_t errlen)
{
    json_t *v = find(obj, name);
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Handover.%s: must be true or false", name);
    *ret = v && json_is_boolean(v) ? json_is_true(v) : def;
    return 0;
}

static int parse_handover(json_t *root, cq_spatial_handover_cfg_t *h, char *err, size_t errlen)
{
    json_t *o = find(root, "Handover");
    json_t *empty = NULL;
    if (o && !json_is_null(o) && !json_is_object(o))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Handover: must be an object");
    if (!o || json_is_null(o))
        o = empty = json_object();
    if (!o)
        return cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
    char *axes = NULL;
    int r = get_str(o, "PositionPath", "", &h->position_path, err, errlen);
    if (r == 0)
        r = get_str(o, "EntitiesField", "", &h->entities_field, err, errlen);
    if (r == 0)
        r = get_str(o, "EntityDataField", "", &h->entity_data_field, err, errlen);
    if (r == 0)
        r = get_str(o, "Axes", "xyz", &axes, err, errlen);
    if (r == 0)
        r = parse_axes(axes, h->axes, err, errlen);
    if (r == 0)
        r = get_bool(o, "SubscribeClients", true, &h->subscribe_clients, err, errlen);
    cq_free(axes);
    json_decref(empty);
    return r;
}

static int parse_grid(json_t *c, cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    int r = get_double(c, "WorldOffsetX", &g->off_x, err, errlen);
    if (r == 0)
        r = get_double(c, "WorldOffsetZ", &g->off_z, err, errlen);
    if (r == 0)
        r = get_double(c, "GridWidth", &g->cell_w, err, errlen);
    if (r == 0)
        r = get_double(c, "GridHeight", &g->cell_h, err, errlen);
    if (r == 0)
        r = get_u32(c, "GridCols", &g->cols, err, errlen);
    if (r == 0)
        r = get_u32(c, "GridRows", &g->rows, err, errlen);
    if (r == 0)
        r = get_u32(c, "ServerCols", &g->server_cols, err, errlen);
    if (r == 0)
        r = get_u32(c, "ServerRows", &g->server_rows, err, errlen);
    if (r == 0)
        r = get_u32(c, "ServerInterestBorderSize", &g->border, err, errlen);
    return r;
}

static int check_positive(const cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    if (!(g->cell_w > 0))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "GridWidth: must be > 0 (got %g)", g->cell_w);
    if (!(g->cell_h > 0))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "GridHeight: must be > 0 (got %g)", g->cell_h);
    const struct {
        const char *name;
        uint32_t v;
    } ones[] = {{"GridCols", g->cols},
                {"GridRows", g->rows},
                {"ServerCols", g->server_cols},
                {"ServerRows", g->server_rows}};
    for (size_t i = 0; i < sizeof(ones) / sizeof(ones[0]); i++)
        if (ones[i].v < 1)
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: must be >= 1", ones[i].name);
    return 0;
}

/* The world's far edges must be finite and distinct from the offsets, or cell_of and the
 * query lattices have nothing sensible to work on. */
static int check_extent(const cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    double ex = g->off_x + g->cell_w * (double)g->cols;
    double ez = g->off_z + g->cell_h * (double)g->rows;
    if (!isfinite(ex) || g->off_x + g->cell_w == g->off_x)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "GridWidth: %g cells from WorldOffsetX %g are not representable",
                          g->cell_w, g->off_x);
    if (!isfinite(ez) || g->off_z + g->cell_h == g->off_z)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "GridHeight: %g cells from WorldOffsetZ %g are not representable",
                          g->cell_h, g->off_z);
    return 0;
}

static int check_servers(const cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    if (g->cols % g->server_cols)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "GridCols: %u does not divide among ServerCols %u", g->cols,
                          g->server_cols);
    if (g->rows % g->server_rows)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "GridRows: %u does not divide among ServerRows %u", g->rows,
                          g->server_rows);
    uint64_t servers = (uint64_t)g->server_cols * g->server_rows;
    if (servers > 1 && g->border == 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "ServerInterestBorderSize: 0 with %llu servers leaves each server blind "
                          "to its neighbours' cells (must be >= 1)",
                          (unsigned long long)servers);
    if (g->server_cols > 1 && g->border > g->cols / g->server_cols)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "ServerInterestBorderSize: %u exceeds the %u columns a server has",
                          g->border, g->cols / g->server_cols);
    if (g->server_rows > 1 && g->border > g->rows / g->server_rows)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "ServerInterestBorderSize: %u exceeds the %u rows a server has",
                          g->border, g->rows / g->server_rows);
    return 0;
}

static int validate(const cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    int r = check_positive(g, err, errlen);
    if (r == 0)
        r = check_extent(g, err, errlen);
    uint64_t cells = (uint64_t)g->cols * g->rows;
    if (r == 0 && cells > DEF_ENTITY_START - DEF_CHAN_START)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "GridCols: %u x GridRows %u = %llu cells, more than the %u spatial "
                          "channel ids",
                          g->cols, g->rows, (unsigned long long)cells,
                          DEF_ENTITY_START - DEF_CHAN_START);
    if (r == 0)
        r = check_servers(g, err, errlen);
    return r;
}

static int parse_root(json_t *root, cq_spatial_cfg_t *g, char *err, size_t errlen)
{
    if (!json_is_object(root))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "the spatial config must be a JSON object");
    json_t *c = find(root, "Config");
    if (!c || !json_is_object(c))
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "Config: missing or not an object");
    int r = parse_grid(c, g, err, errlen);
    if (r == 0)
        r = validate(g, err, errlen);
    if (r == 0)
        r = parse_handover(root, &g->handover, err, errlen);
    return r;
}

int cq_spatial_cfg_parse(const char *json, size_t len, cq_spatial_cfg_t *ret, char *err,
                         size_t errlen)
{
    memset(ret, 0, sizeof(*ret));
    if (err && errlen)
        err[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "line %d column %d: %s", je.line, je.column,
                          je.text);
    int r = parse_root(root, ret, err, errlen);
    json_decref(root);
    if (r < 0) {
        cq_spatial_cfg_done(ret);
        return r;
    }
    ret->chan_start = DEF_CHAN_START;
    ret->entity_start = DEF_ENTITY_START;
    return 0;
}

static const struct {
    const char *name;
    const char *json;
    const size_t *len;
} shipped[] = {
    {"2x2", cq_embedded_spatial_2x2, &cq_embedded_spatial_2x2_len},
    {"4x1", cq_embedded_spatial_4x1, &cq_embedded_spatial_4x1_len},
    {"benchmark", cq_embedded_spatial_benchmark, &cq_embedded_spatial_benchmark_len},
    {"tanks_small", cq_embedded_spatial_tanks_small, &cq_embedded_spatial_tanks_small_len},
    {"tanks_big", cq_embedded_spatial_tanks_big, &cq_embedded_spatial_tanks_big_len},
};

static int load_doc(const char *json, size_t len, void *ret, char *err, size_t errlen)
{
    return cq_spatial_cfg_parse(json, len, ret, err, errlen);
}

int cq_spatial_cfg_load(const char *spec, cq_spatial_cfg_t *ret, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++)
        if (strcmp(spec, shipped[i].name) == 0)
            return cq_spatial_cfg_parse(shipped[i].json, *shipped[i].len, ret, err, errlen);
    memset(ret, 0, sizeof(*ret));
    return cq_file_load(spec, MAX_FILE_SIZE, load_doc, ret, err, errlen);
}

void cq_spatial_cfg_done(cq_spatial_cfg_t *c)
{
    if (!c)
        return;
    cq_free(c->handover.position_path);
    cq_free(c->handover.entities_field);
    cq_free(c->handover.entity_data_field);
    c->handover.position_path = c->handover.entities_field = c->handover.entity_data_field = NULL;
}
