/* grid.c - channeld's static 2D grid (§4.2), the server slots' cells and border interest
 * (§4.3) and the slot table. */
#include "spatial_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <math.h>

uint32_t cq_spatial_cells(const cq_spatial_cfg_t *g)
{
    return g->cols * g->rows;
}

uint32_t cq_spatial_servers(const cq_spatial_cfg_t *g)
{
    return g->server_cols * g->server_rows;
}

uint32_t cq__spatial_sgc(const cq_spatial_cfg_t *g)
{
    return g->cols / g->server_cols + (g->cols % g->server_cols ? 1 : 0);
}

uint32_t cq__spatial_sgr(const cq_spatial_cfg_t *g)
{
    return g->rows / g->server_rows + (g->rows % g->server_rows ? 1 : 0);
}

int cq_spatial_cell_of(const cq_spatial_cfg_t *g, double x, double z, uint32_t *ret_index)
{
    /* Compared as doubles first: a huge quotient must not reach an integer conversion. */
    double gx = floor((x - g->off_x) / g->cell_w);
    double gz = floor((z - g->off_z) / g->cell_h);
    if (!(gx >= 0 && gx < (double)g->cols && gz >= 0 && gz < (double)g->rows))
        return CQ_EOFFGRID; /* also NaN */
    *ret_index = (uint32_t)gx + (uint32_t)gz * g->cols;
    return 0;
}

uint32_t cq_spatial_chan_id(const cq_spatial_cfg_t *g, uint32_t index)
{
    return g->chan_start + index;
}

bool cq_spatial_chan_index(const cq_spatial_cfg_t *g, uint32_t chan_id, uint32_t *ret_index)
{
    if (chan_id < g->chan_start || chan_id - g->chan_start >= cq_spatial_cells(g))
        return false;
    if (ret_index)
        *ret_index = chan_id - g->chan_start;
    return true;
}

uint32_t cq_spatial_cell_server(const cq_spatial_cfg_t *g, uint32_t index)
{
    uint32_t gx = index % g->cols, gz = index / g->cols;
    return gx / cq__spatial_sgc(g) + gz / cq__spatial_sgr(g) * g->server_cols;
}

void cq_spatial_region(const cq_spatial_cfg_t *g, uint32_t index, cq_spatial_region_t *ret)
{
    uint32_t gx = index % g->cols, gz = index / g->cols;
    /* channeld's MinY/MaxY: Go's constant 3.40282347e+38 / 2, the decimal float32 max
     * rounded to float64 (1.701411735e38), not FLT_MAX / 2 (1.7014117331926443e38). */
    const double half = 3.40282347e38 / 2;
    ret->min = (cq_spatial_vec_t){g->off_x + g->cell_w * (double)gx, -half,
                                  g->off_z + g->cell_h * (double)gz};
    ret->max = (cq_spatial_vec_t){g->off_x + g->cell_w * (double)(gx + 1), half,
                                  g->off_z + g->cell_h * (double)(gz + 1)};
    ret->chan_id = cq_spatial_chan_id(g, index);
    ret->server = cq_spatial_cell_server(g, index);
}

uint32_t cq_spatial_slot_cells(const cq_spatial_cfg_t *g, uint32_t slot, uint32_t *out,
                               uint32_t cap)
{
    if (slot >= cq_spatial_servers(g))
        return 0;
    uint32_t sgc = cq__spatial_sgc(g), sgr = cq__spatial_sgr(g);
    uint32_t x0 = slot % g->server_cols * sgc, z0 = slot / g->server_cols * sgr;
    uint32_t n = 0;
    for (uint32_t y = 0; y < sgr; y++)
        for (uint32_t x = 0; x < sgc; x++, n++)
            if (n < cap)
                out[n] = cq_spatial_chan_id(g, x0 + x + (z0 + y) * g->cols);
    return n;
}

/* In the band around [lo, lo + len) of width b, clipped to [0, max). */
static bool in_span(int64_t v, int64_t lo, int64_t len)
{
    return v >= lo && v < lo + len;
}

uint32_t cq_spatial_border_cells(const cq_spatial_cfg_t *g, uint32_t slot, uint32_t *out,
                                 uint32_t cap)
{
    if (slot >= cq_spatial_servers(g))
        return 0;
    int64_t sgc = cq__spatial_sgc(g), sgr = cq__spatial_sgr(g), b = g->border;
    int64_t x0 = slot % g->server_cols * sgc, z0 = slot / g->server_cols * sgr;
    int64_t zlo = z0 - b < 0 ? 0 : z0 - b, zhi = z0 + sgr + b > g->rows ? g->rows : z0 + sgr + b;
    int64_t xlo = x0 - b < 0 ? 0 : x0 - b, xhi = x0 + sgc + b > g->cols ? g->cols : x0 + sgc + b;
    uint32_t n = 0;
    /* Row-major over the bounding box gives ascending ids; a cell is in the border when it
     * shares the slot's rows or its columns, but not both (its own) and not neither (a
     * diagonal corner). */
    for (int64_t z = zlo; z < zhi; z++)
        for (int64_t x = xlo; x < xhi; x++) {
            if (in_span(z, z0, sgr) == in_span(x, x0, sgc))
                continue;
            if (n < cap)
                out[n] = cq_spatial_chan_id(g, (uint32_t)(x + z * g->cols));
            n++;
        }
    return n;
}

uint32_t cq_spatial_adjacent(const cq_spatial_cfg_t *g, uint32_t index, bool with_centre,
                             uint32_t out[9])
{
    int64_t gx = index % g->cols, gz = index / g->cols;
    uint32_t n = 0;
    for (int64_t z = gz - 1; z <= gz + 1; z++)
        for (int64_t x = gx - 1; x <= gx + 1; x++) {
            if (z < 0 || z >= g->rows || x < 0 || x >= g->cols)
                continue;
            if (!with_centre && x == gx && z == gz)
                continue;
            out[n++] = cq_spatial_chan_id(g, (uint32_t)(x + z * g->cols));
        }
    return n;
}

/* ---- server slots ---- */

int cq_spatial_slots_init(cq_spatial_slots_t *s, const cq_spatial_cfg_t *g)
{
    s->n = cq_spatial_servers(g);
    s->holder = cq_calloc(s->n, sizeof(*s->holder));
    return s->holder ? 0 : -ENOMEM;
}

void cq_spatial_slots_done(cq_spatial_slots_t *s)
{
    if (!s)
        return;
    cq_free(s->holder);
    s->holder = NULL;
    s->n = 0;
}

int cq_spatial_slots_of(const cq_spatial_slots_t *s, uint32_t conn)
{
    for (uint32_t i = 0; conn && i < s->n; i++)
        if (s->holder[i] == conn)
            return (int)i;
    return -1;
}

int cq_spatial_slots_take(cq_spatial_slots_t *s, uint32_t conn)
{
    if (conn == 0)
        return CQ_ENOCONN; /* 0 marks a free slot */
    int held = cq_spatial_slots_of(s, conn);
    if (held >= 0)
        return held;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->holder[i] == 0) {
            s->holder[i] = conn;
            return (int)i;
        }
    return CQ_ELIMIT;
}

uint32_t cq_spatial_slots_release(cq_spatial_slots_t *s, uint32_t conn)
{
    uint32_t n = 0;
    for (uint32_t i = 0; conn && i < s->n; i++)
        if (s->holder[i] == conn) {
            s->holder[i] = 0;
            n++;
        }
    return n;
}

uint32_t cq_spatial_slots_rekey(cq_spatial_slots_t *s, uint32_t from, uint32_t to)
{
    uint32_t n = 0;
    for (uint32_t i = 0; from && i < s->n; i++)
        if (s->holder[i] == from) {
            s->holder[i] = to;
            n++;
        }
    return n;
}

bool cq_spatial_slots_full(const cq_spatial_slots_t *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->holder[i] == 0)
            return false;
    return true;
}
