/* fuzz_spatial.c - the spatial engine (src/spatial). The input is split at its first NUL: the
 * bytes before are a controller config for cq_spatial_cfg_parse, the bytes after drive an
 * interest query (a flag byte, then each number as a byte-selected small integer or raw
 * double, so NaN, infinities and 1e300 all occur) and a few entity group operations. The query
 * runs on the parsed config when it is valid and on the shipped 4x1 and benchmark layouts.
 * Invariants: a query answers (no hang: the §8.2 lattice fix), its hits are ascending, unique
 * and on the grid, and a successful sphere/box/cone query holds its centre cell; a non-empty
 * handover set contains the entity asked about. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_spatial.h"

#include <string.h>

typedef struct rd {
    const uint8_t *p, *end;
} rd_t;

static uint8_t byte(rd_t *r)
{
    return r->p < r->end ? *r->p++ : 0;
}

/* Mostly coordinates near the shipped worlds; sometimes any double at all. */
static double num(rd_t *r)
{
    uint8_t k = byte(r);
    if (k < 0xe0)
        return ((int)k - 0x70) * 50.0 + byte(r) / 8.0;
    double d = 0;
    if (r->end - r->p >= 8) {
        memcpy(&d, r->p, 8);
        r->p += 8;
    }
    return d;
}

static cq_spatial_vec_t vec(rd_t *r)
{
    cq_spatial_vec_t v;
    v.x = num(r);
    v.y = num(r);
    v.z = num(r);
    return v;
}

static void check_hits(const cq_spatial_cfg_t *g, const cq_spatial_hits_t *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        FUZZ_CHECK(cq_spatial_chan_index(g, h->v[i].chan_id, NULL));
        FUZZ_CHECK(i == 0 || h->v[i - 1].chan_id < h->v[i].chan_id);
    }
}

static void run_query(const cq_spatial_cfg_t *g, rd_t r0)
{
    rd_t r = r0;
    uint8_t f = byte(&r), h2 = byte(&r);
    cq_spatial_vec_t spots[4];
    uint32_t dists[4];
    cq_spatial_query_t q = {.spots = f & 1, .box = f & 2, .sphere = f & 4, .cone = f & 8};
    q.n_spots = (f >> 4) & 3;
    q.n_dists = (f >> 6) & 3;
    for (size_t i = 0; i < q.n_spots; i++)
        spots[i] = vec(&r);
    for (size_t i = 0; i < q.n_dists; i++)
        dists[i] = byte(&r);
    q.spot = spots;
    q.dists = dists;
    q.box_has_center = h2 & 1, q.box_has_extent = h2 & 2, q.sphere_has_center = h2 & 4;
    q.cone_has_center = h2 & 8, q.cone_has_dir = h2 & 16;
    q.box_center = vec(&r), q.box_extent = vec(&r);
    q.sphere_center = vec(&r), q.sphere_radius = num(&r);
    q.cone_center = vec(&r), q.cone_dir = vec(&r);
    q.cone_angle = num(&r), q.cone_radius = num(&r);
    cq_spatial_hits_t h = {0};
    int rc = cq_spatial_query(g, &q, &h);
    FUZZ_CHECK(rc == 0 || rc == CQ_EBADQUERY);
    if (rc == 0) {
        check_hits(g, &h);
        const cq_spatial_vec_t *c = q.cone     ? &q.cone_center
                                    : q.sphere ? &q.sphere_center
                                    : q.box    ? &q.box_center
                                               : NULL;
        uint32_t idx;
        if (c) {
            FUZZ_CHECK(cq_spatial_cell_of(g, c->x, c->z, &idx) == 0);
            FUZZ_CHECK(cq_spatial_hits_get(&h, cq_spatial_chan_id(g, idx)) == 0);
        }
    } else {
        FUZZ_CHECK(h.n == 0);
    }
    cq_spatial_hits_done(&h);
}

static void run_groups(rd_t r)
{
    cq_entgroups_t *g = cq_entgroups_new();
    if (!g)
        return;
    for (int i = 0; i < 64 && r.p < r.end; i++) {
        uint8_t op = byte(&r);
        uint32_t e = op & 7, ids[3] = {byte(&r) & 7, byte(&r) & 7, byte(&r) & 7}, out[8];
        cq_entgroup_type_t t = (cq_entgroup_type_t)((op >> 3) & 1);
        switch (op >> 4 & 3) {
        case 0:
            FUZZ_CHECK(cq_entgroups_add(g, e, t, ids, 3) == 0);
            break;
        case 1:
            FUZZ_CHECK(cq_entgroups_remove(g, e, t, ids, 2) == 0);
            break;
        case 2:
            cq_entgroups_forget(g, e);
            break;
        default: {
            size_t n = cq_entgroups_handover_set(g, e, out, 8);
            bool self = n == 0;
            for (size_t k = 0; k < n && k < 8; k++)
                self |= out[k] == e;
            FUZZ_CHECK(self);
            FUZZ_CHECK(n == 0 || !cq_entgroups_locked(g, e));
        }
        }
    }
    cq_entgroups_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    rd_t q = {nul ? nul + 1 : data + size, data + size};
    cq_spatial_cfg_t c;
    char err[256];
    if (cq_spatial_cfg_parse((const char *)data, jlen, &c, err, sizeof(err)) == 0) {
        FUZZ_CHECK(cq_spatial_cells(&c) <= 0x70000);
        run_query(&c, q);
        cq_spatial_cfg_done(&c);
    }
    static const char *const layouts[] = {"4x1", "benchmark"};
    for (size_t i = 0; i < 2; i++) {
        if (cq_spatial_cfg_load(layouts[i], &c, err, sizeof(err)) != 0)
            continue;
        run_query(&c, q);
        cq_spatial_cfg_done(&c);
    }
    run_groups(q);
    return 0;
}
