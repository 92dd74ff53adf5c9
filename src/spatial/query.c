/* query.c - channeld's QueryChannelIds (§4.4) with the §8.2 fixes, and the damping table.
 *
 * channeld samples each shape on a lattice walked by repeated float64 addition
 * (`for z := c.z - r; z <= c.z + r; z += step`, x inside), maps every sample to its cell and
 * lets the last sample of a cell set its distance. We visit the same samples in the same order
 * but never the ones outside the world: per axis, the first sample inside the grid is found
 * once (walking, or jumping when the walk is long, see first_inside) and the walk stops at the
 * first sample past the grid. A shape's cells are collected in a dense box spanning the cells
 * its samples reach, then merged into the sorted result (later shapes overwrite earlier). */
#include "spatial_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* Off-world samples walked one by one before jumping (first_inside). */
#define WALK_MAX 65536.0

typedef struct axis {
    double off, cell; /* WorldOffset, GridWidth/GridHeight */
    uint32_t n;       /* GridCols/GridRows */
} axis_t;

/* One axis of a lattice: the in-grid sample values and their cell coordinates. */
typedef struct samples {
    double *v;
    uint32_t *cell;
    uint32_t n;
} samples_t;

/* What a sample must satisfy besides being on the grid. */
typedef struct shape {
    double cx, cz;
    bool disk;
    double r;
    bool cone;
    double dirx, dirz, cosang;
} shape_t;

static double cell_f(const axis_t *a, double v)
{
    return floor((v - a->off) / a->cell);
}

/* ---- hits ---- */

void cq_spatial_hits_done(cq_spatial_hits_t *h)
{
    if (!h)
        return;
    cq_free(h->v);
    memset(h, 0, sizeof(*h));
}

static uint32_t hits_find(const cq_spatial_hits_t *h, uint32_t chan_id)
{
    uint32_t lo = 0, hi = h->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (h->v[mid].chan_id < chan_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t cq_spatial_hits_get(const cq_spatial_hits_t *h, uint32_t chan_id)
{
    uint32_t i = hits_find(h, chan_id);
    return i < h->n && h->v[i].chan_id == chan_id ? (int64_t)h->v[i].dist : -1;
}

static int hits_reserve(cq_spatial_hits_t *h, uint32_t need)
{
    if (need <= h->cap)
        return 0;
    uint32_t cap = h->cap ? h->cap : 16;
    while (cap < need)
        cap *= 2;
    cq_spatial_hit_t *v = cq_realloc(h->v, (size_t)cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

static int hits_set(cq_spatial_hits_t *h, uint32_t chan_id, uint32_t dist)
{
    uint32_t i = hits_find(h, chan_id);
    if (i < h->n && h->v[i].chan_id == chan_id) {
        h->v[i].dist = dist;
        return 0;
    }
    if (hits_reserve(h, h->n + 1) < 0)
        return -ENOMEM;
    memmove(&h->v[i + 1], &h->v[i], (h->n - i) * sizeof(h->v[0]));
    h->v[i] = (cq_spatial_hit_t){chan_id, dist};
    h->n++;
    return 0;
}

/* ---- the lattice along one axis ---- */

/* The exponent of v's lowest set bit (v finite, non-zero): v is a multiple of 2^result. */
static int low_exp(double v)
{
    int e;
    double m = frexp(fabs(v), &e);
    uint64_t mant = (uint64_t)ldexp(m, 53);
    return e - 53 + __builtin_ctzll(mant);
}

/* True when every value start + k*step up to `far` is exact: all are multiples of 2^e below
 * 2^(53+e), so repeated addition and start + k*step give the very same doubles. */
static bool lattice_exact(double start, double step, double far)
{
    if (!isfinite(start) || !isfinite(far))
        return false;
    int e = low_exp(step);
    if (start != 0 && low_exp(start) < e)
        e = low_exp(start);
    return fabs(start) + fabs(far) + 2 * step < ldexp(1.0, 53 + e);
}

/* The first sample of `start, start+step, ...` (while <= end) that is not left of the grid.
 * Up to WALK_MAX off-world steps are walked exactly as channeld walks them; a longer prefix
 * (a radius of 1e9 on 1000-unit cells: 2e6 steps per row, 1.6e13 samples in all, §8.2) is
 * jumped: to the exact lattice point two steps before the grid when the values are exact
 * (lattice_exact), else to the grid's edge (channeld's own loop would spend >= 2^32 samples
 * in accumulated rounding there, or stall for ever once step is below the values' precision). */
static bool first_inside(const axis_t *a, double start, double end, double step, double *ret)
{
    double v = start;
    if (cell_f(a, v) < 0) {
        double need = (a->off - start) / step;
        if (need > WALK_MAX)
            v = lattice_exact(start, step, a->off + a->cell * a->n)
                    ? start + (floor(need) - 2) * step
                    : a->off;
        for (double i = 0; cell_f(a, v) < 0; i++) {
            double nv = v + step;
            if (!(nv <= end) || nv == v || i > WALK_MAX + 8)
                return false;
            v = nv;
        }
    }
    *ret = v;
    return v <= end && cell_f(a, v) < a->n;
}

static void samples_done(samples_t *s)
{
    cq_free(s->v);
    cq_free(s->cell);
}

/* The in-grid samples of one axis, in channeld's order. At most 2n+1 fit the grid with a step
 * of half a cell, at most 5 fit a lattice whose step is a quarter of its width; the cap only
 * guards against rounding. */
static int samples_make(const axis_t *a, double start, double end, double step, samples_t *s)
{
    memset(s, 0, sizeof(*s));
    double v;
    if (!first_inside(a, start, end, step, &v))
        return 0;
    double span = (end - v) / step + 8;
    uint32_t cap = span < 2.0 * a->n + 8 ? (uint32_t)span : 2 * a->n + 8;
    s->v = cq_malloc(cap * sizeof(*s->v));
    s->cell = cq_malloc(cap * sizeof(*s->cell));
    if (!s->v || !s->cell)
        return -ENOMEM;
    while (v <= end && s->n < cap) {
        double c = cell_f(a, v);
        if (c >= a->n)
            break;
        s->v[s->n] = v;
        s->cell[s->n++] = (uint32_t)c;
        double nv = v + step;
        if (nv == v)
            break; /* channeld would spin here for ever */
        v = nv;
    }
    return 0;
}

/* ---- one shape ---- */

static double grid_size(const cq_spatial_cfg_t *g)
{
    return sqrt(g->cell_w * g->cell_w + g->cell_h * g->cell_h);
}

static bool keep(const shape_t *sh, double x, double z)
{
    if (sh->disk && (x - sh->cx) * (x - sh->cx) + (z - sh->cz) * (z - sh->cz) > sh->r * sh->r)
        return false;
    if (sh->cone) {
        /* Go's Normalize2D and Dot2D; at the centre itself 0/0 gives NaN and NaN < cos is
         * false, so channeld keeps that sample: so do we. */
        double dx = x - sh->cx, dz = z - sh->cz;
        double mag = sqrt(dx * dx + dz * dz);
        dx /= mag;
        dz /= mag;
        if (dx * sh->dirx + dz * sh->dirz < sh->cosang)
            return false;
    }
    return true;
}

static uint32_t dist_of(const shape_t *sh, double gsize, double x, double z)
{
    double d = ceil(sqrt((sh->cx - x) * (sh->cx - x) + (sh->cz - z) * (sh->cz - z)) / gsize);
    return d < (double)UINT32_MAX ? (uint32_t)d : UINT32_MAX;
}

/* Merges the dense box (UINT32_MAX = no sample) into the sorted hits, box cells winning. */
static int merge_box(const cq_spatial_cfg_t *g, cq_spatial_hits_t *h, const uint32_t *box,
                     uint32_t gx0, uint32_t gz0, uint32_t bw, uint32_t bh)
{
    uint32_t cnt = 0;
    for (uint32_t i = 0; i < bw * bh; i++)
        cnt += box[i] != UINT32_MAX;
    uint32_t alloc = h->n + cnt + 1;
    cq_spatial_hit_t *v = cq_malloc((size_t)alloc * sizeof(*v));
    if (!v)
        return -ENOMEM;
    uint32_t n = 0, j = 0;
    for (uint32_t i = 0; i < bw * bh; i++) {
        if (box[i] == UINT32_MAX)
            continue;
        uint32_t id = cq_spatial_chan_id(g, gx0 + i % bw + (gz0 + i / bw) * g->cols);
        while (j < h->n && h->v[j].chan_id < id)
            v[n++] = h->v[j++];
        if (j < h->n && h->v[j].chan_id == id)
            j++;
        v[n++] = (cq_spatial_hit_t){id, box[i]};
    }
    while (j < h->n)
        v[n++] = h->v[j++];
    cq_free(h->v);
    h->v = v;
    h->n = n;
    h->cap = alloc;
    return 0;
}

static int fill_box(const cq_spatial_cfg_t *g, const shape_t *sh, const samples_t *xs,
                    const samples_t *zs, cq_spatial_hits_t *h)
{
    uint32_t gx0 = xs->cell[0], gz0 = zs->cell[0];
    uint32_t bw = xs->cell[xs->n - 1] - gx0 + 1, bh = zs->cell[zs->n - 1] - gz0 + 1;
    uint32_t *box = cq_malloc((size_t)bw * bh * sizeof(*box));
    if (!box)
        return -ENOMEM;
    memset(box, 0xff, (size_t)bw * bh * sizeof(*box));
    double gsize = grid_size(g);
    for (uint32_t iz = 0; iz < zs->n; iz++)
        for (uint32_t ix = 0; ix < xs->n; ix++) {
            double x = xs->v[ix], z = zs->v[iz];
            if (keep(sh, x, z))
                box[(zs->cell[iz] - gz0) * bw + xs->cell[ix] - gx0] = dist_of(sh, gsize, x, z);
        }
    int r = merge_box(g, h, box, gx0, gz0, bw, bh);
    cq_free(box);
    return r;
}

/* Samples [x0, x1] x [z0, z1] with the steps, then forces the centre cell to 0. */
static int run_shape(const cq_spatial_cfg_t *g, const shape_t *sh, const double lim[4], double sx,
                     double sz, cq_spatial_hits_t *h)
{
    const axis_t ax = {g->off_x, g->cell_w, g->cols}, az = {g->off_z, g->cell_h, g->rows};
    samples_t xs, zs;
    int r = samples_make(&ax, lim[0], lim[1], sx, &xs);
    if (r == 0)
        r = samples_make(&az, lim[2], lim[3], sz, &zs);
    else
        memset(&zs, 0, sizeof(zs));
    if (r == 0 && xs.n && zs.n)
        r = fill_box(g, sh, &xs, &zs, h);
    samples_done(&xs);
    samples_done(&zs);
    uint32_t centre;
    if (r == 0 && cq_spatial_cell_of(g, sh->cx, sh->cz, &centre) == 0)
        r = hits_set(h, cq_spatial_chan_id(g, centre), 0);
    return r;
}

/* ---- validation ---- */

static bool fin2(const cq_spatial_vec_t *v)
{
    return isfinite(v->x) && isfinite(v->z);
}

static bool on_grid(const cq_spatial_cfg_t *g, const cq_spatial_vec_t *c)
{
    uint32_t i;
    return cq_spatial_cell_of(g, c->x, c->z, &i) == 0;
}

static bool steps_ok(const cq_spatial_cfg_t *g, double ex, double ez, double *sx, double *sz)
{
    *sx = fmin(ex, g->cell_w) * 0.5;
    *sz = fmin(ez, g->cell_h) * 0.5;
    return isfinite(ex) && isfinite(ez) && *sx > 0 && *sz > 0;
}

static bool box_ok(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, double *sx, double *sz)
{
    return q->box_has_center && q->box_has_extent && fin2(&q->box_center) &&
           steps_ok(g, q->box_extent.x, q->box_extent.z, sx, sz) && on_grid(g, &q->box_center);
}

static bool sphere_ok(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, double *sx,
                      double *sz)
{
    return q->sphere_has_center && fin2(&q->sphere_center) &&
           steps_ok(g, q->sphere_radius, q->sphere_radius, sx, sz) && on_grid(g, &q->sphere_center);
}

/* The cone's unit direction (Go's Normalize2D, scaled first so a huge vector cannot
 * overflow to a zero direction). False for a zero or non-finite direction. */
static bool cone_dir(const cq_spatial_vec_t *d, double *ux, double *uz)
{
    if (!fin2(d) || (d->x == 0 && d->z == 0))
        return false;
    double x = d->x, z = d->z;
    double mag = sqrt(x * x + z * z);
    if (!(mag > 0) || !isfinite(mag)) {
        double s = fmax(fabs(x), fabs(z));
        x /= s;
        z /= s;
        mag = sqrt(x * x + z * z);
    }
    *ux = x / mag;
    *uz = z / mag;
    return true;
}

static bool cone_ok(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, double *sx, double *sz,
                    shape_t *sh)
{
    return q->cone_has_center && q->cone_has_dir && fin2(&q->cone_center) &&
           isfinite(q->cone_angle) && cone_dir(&q->cone_dir, &sh->dirx, &sh->dirz) &&
           steps_ok(g, q->cone_radius, q->cone_radius, sx, sz) && on_grid(g, &q->cone_center);
}

/* ---- the shapes ---- */

static int do_spots(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, cq_spatial_hits_t *h)
{
    for (size_t i = 0; i < q->n_spots; i++) {
        uint32_t idx;
        if (cq_spatial_cell_of(g, q->spot[i].x, q->spot[i].z, &idx) < 0)
            continue; /* channeld skips a spot off the grid */
        int r = hits_set(h, cq_spatial_chan_id(g, idx), i < q->n_dists ? q->dists[i] : 0);
        if (r < 0)
            return r;
    }
    return 0;
}

static int do_box(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, double sx, double sz,
                  cq_spatial_hits_t *h)
{
    const cq_spatial_vec_t *c = &q->box_center, *e = &q->box_extent;
    shape_t sh = {.cx = c->x, .cz = c->z};
    const double lim[4] = {c->x - e->x, c->x + e->x, c->z - e->z, c->z + e->z};
    return run_shape(g, &sh, lim, sx, sz, h);
}

static int do_sphere(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, double sx, double sz,
                     cq_spatial_hits_t *h)
{
    const cq_spatial_vec_t *c = &q->sphere_center;
    double r = q->sphere_radius;
    shape_t sh = {.cx = c->x, .cz = c->z, .disk = true, .r = r};
    const double lim[4] = {c->x - r, c->x + r, c->z - r, c->z + r};
    return run_shape(g, &sh, lim, sx, sz, h);
}

/* channeld clips the cone's loops to the world itself: max(offset, c - r) to
 * min(offset + world size, c + r). */
static int do_cone(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, shape_t *sh, double sx,
                   double sz, cq_spatial_hits_t *h)
{
    const cq_spatial_vec_t *c = &q->cone_center;
    double r = q->cone_radius;
    sh->cx = c->x;
    sh->cz = c->z;
    sh->disk = sh->cone = true;
    sh->r = r;
    sh->cosang = cos(q->cone_angle);
    const double lim[4] = {fmax(g->off_x, c->x - r), fmin(g->off_x + g->cell_w * g->cols, c->x + r),
                           fmax(g->off_z, c->z - r),
                           fmin(g->off_z + g->cell_h * g->rows, c->z + r)};
    return run_shape(g, sh, lim, sx, sz, h);
}

int cq_spatial_query(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, cq_spatial_hits_t *ret)
{
    ret->n = 0;
    double bsx = 0, bsz = 0, ssx = 0, ssz = 0, csx = 0, csz = 0;
    shape_t cone = {0};
    if ((q->box && !box_ok(g, q, &bsx, &bsz)) || (q->sphere && !sphere_ok(g, q, &ssx, &ssz)) ||
        (q->cone && !cone_ok(g, q, &csx, &csz, &cone)))
        return CQ_EBADQUERY;
    int r = q->spots ? do_spots(g, q, ret) : 0;
    if (r == 0 && q->box)
        r = do_box(g, q, bsx, bsz, ret);
    if (r == 0 && q->sphere)
        r = do_sphere(g, q, ssx, ssz, ret);
    if (r == 0 && q->cone)
        r = do_cone(g, q, &cone, csx, csz, ret);
    if (r < 0)
        ret->n = 0;
    return r;
}

uint32_t cq_spatial_damping_ms(uint32_t dist, uint32_t default_ms)
{
    static const uint32_t table[] = {20, 50, 100};
    return dist < 3 ? table[dist] : default_ms;
}
