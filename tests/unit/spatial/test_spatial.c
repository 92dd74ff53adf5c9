/* test_spatial.c - src/spatial against the worked examples of channeld-protocol.md §4: the
 * shipped layouts, grid math, regions, slot and border cells, the verified 4x1 interest
 * queries, the §8.2 fixes (huge, infinite or missing values), the validation messages and the
 * entity groups. Every expected value is computed by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_err.h"
#include "cq_spatial.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static cq_spatial_cfg_t load(const char *name)
{
    cq_spatial_cfg_t c;
    char err[256];
    int r = cq_spatial_cfg_load(name, &c, err, sizeof(err));
    if (r != 0)
        fail_msg("%s: %s", name, err);
    return c;
}

/* "id:dist id:dist ..." of a query's hits, or the error name. */
static const char *q_str(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q)
{
    static char out[4096];
    cq_spatial_hits_t h = {0};
    int r = cq_spatial_query(g, q, &h);
    size_t n = 0;
    out[0] = '\0';
    if (r < 0)
        snprintf(out, sizeof(out), "%s", cq_errname(r));
    for (uint32_t i = 0; r == 0 && i < h.n; i++)
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%u:%u", i ? " " : "", h.v[i].chan_id,
                              h.v[i].dist);
    cq_spatial_hits_done(&h);
    return out;
}

static const char *ids_str(const uint32_t *v, uint32_t n)
{
    static char out[4096];
    size_t k = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < n; i++)
        k += (size_t)snprintf(out + k, sizeof(out) - k, "%s%u", i ? " " : "", v[i]);
    return out;
}

static cq_spatial_query_t sphere(double x, double z, double r)
{
    return (cq_spatial_query_t){
        .sphere = true, .sphere_has_center = true, .sphere_center = {x, 0, z}, .sphere_radius = r};
}

/* ---- configuration ---- */

static void test_shipped_layouts(void **state)
{
    (void)state;
    const char *names[] = {"2x2", "4x1", "benchmark", "tanks_small", "tanks_big"};
    const uint32_t cells[] = {4, 4, 225, 4, 100}, servers[] = {2, 2, 9, 1, 1};
    for (size_t i = 0; i < 5; i++) {
        cq_spatial_cfg_t c = load(names[i]);
        assert_int_equal(cq_spatial_cells(&c), cells[i]);
        assert_int_equal(cq_spatial_servers(&c), servers[i]);
        assert_int_equal(c.chan_start, 0x10000);
        assert_int_equal(c.entity_start, 0x80000);
        assert_string_equal(c.handover.position_path, "");
        cq_spatial_cfg_done(&c);
    }
    cq_spatial_cfg_t c = load("4x1");
    assert_true(c.off_x == -2000 && c.off_z == -500 && c.cell_w == 1000 && c.cell_h == 1000);
    assert_true(c.cols == 4 && c.rows == 1 && c.server_cols == 2 && c.server_rows == 1);
    assert_int_equal(c.border, 1);
    cq_spatial_cfg_done(&c);
    cq_spatial_cfg_done(NULL);
}

static void test_handover_section(void **state)
{
    (void)state;
    const char *js = "{\"SpatialControllerType\":\"Static2DSpatialController\",\"config\":{"
                     "\"worldoffsetx\":-10,\"WorldOffsetZ\":-10,\"GridWidth\":10,\"GridHeight\":10,"
                     "\"GridCols\":2,\"GridRows\":2,\"ServerCols\":1,\"ServerRows\":1,"
                     "\"Unknown\":1},\"Handover\":{\"PositionPath\":\"transform.position\","
                     "\"Axes\":\"xzy\",\"EntitiesField\":\"entities\","
                     "\"EntityDataField\":\"entityData\"}}";
    cq_spatial_cfg_t c;
    char err[256];
    assert_int_equal(cq_spatial_cfg_parse(js, strlen(js), &c, err, sizeof(err)), 0);
    assert_true(c.off_x == -10); /* keys match case-insensitively, as Go's */
    assert_string_equal(c.handover.position_path, "transform.position");
    assert_string_equal(c.handover.entities_field, "entities");
    assert_string_equal(c.handover.entity_data_field, "entityData");
    assert_int_equal(c.handover.axes[0], 0);
    assert_int_equal(c.handover.axes[1], 2);
    assert_int_equal(c.handover.axes[2], 1);
    assert_true(c.handover.subscribe_clients); /* default: channeld's §4.6 */
    cq_spatial_cfg_done(&c);
    const char *js2 = "{\"Config\":{\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,"
                      "\"GridRows\":1,\"ServerCols\":1,\"ServerRows\":1},"
                      "\"Handover\":{\"SubscribeClients\":false}}";
    assert_int_equal(cq_spatial_cfg_parse(js2, strlen(js2), &c, err, sizeof(err)), 0);
    assert_false(c.handover.subscribe_clients);
    cq_spatial_cfg_done(&c);
}

/* Each rejection: the config's "Config" body (or a whole document) and the message prefix. */
static void test_validation_messages(void **state)
{
    (void)state;
    static const struct {
        const char *cfg, *prefix;
    } cases[] = {
        {"\"GridWidth\":0,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,\"ServerCols\":1,"
         "\"ServerRows\":1",
         "GridWidth: must be > 0"},
        {"\"GridWidth\":1,\"GridHeight\":-1,\"GridCols\":1,\"GridRows\":1,\"ServerCols\":1,"
         "\"ServerRows\":1",
         "GridHeight: must be > 0"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridRows\":1,\"ServerCols\":1,\"ServerRows\":1",
         "GridCols: must be >= 1"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,\"ServerRows\":1",
         "ServerCols: must be >= 1"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":5,\"GridRows\":1,\"ServerCols\":2,"
         "\"ServerRows\":1,\"ServerInterestBorderSize\":1",
         "GridCols: 5 does not divide among ServerCols 2"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":2,\"GridRows\":3,\"ServerCols\":1,"
         "\"ServerRows\":2,\"ServerInterestBorderSize\":1",
         "GridRows: 3 does not divide among ServerRows 2"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":4,\"GridRows\":1,\"ServerCols\":2,"
         "\"ServerRows\":1",
         "ServerInterestBorderSize: 0 with 2 servers leaves"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":4,\"GridRows\":1,\"ServerCols\":2,"
         "\"ServerRows\":1,\"ServerInterestBorderSize\":3",
         "ServerInterestBorderSize: 3 exceeds the 2 columns"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1000,\"GridRows\":1000,"
         "\"ServerCols\":1,\"ServerRows\":1",
         "GridCols: 1000 x GridRows 1000 = 1000000 cells"},
        {"\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":2.0,\"GridRows\":1,\"ServerCols\":1,"
         "\"ServerRows\":1",
         "GridCols: must be an integer"},
        {"\"GridWidth\":\"1\",\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,\"ServerCols\":1,"
         "\"ServerRows\":1",
         "GridWidth: must be a number"},
        {"\"WorldOffsetX\":1e300,\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,"
         "\"ServerCols\":1,\"ServerRows\":1",
         "GridWidth: 1 cells from WorldOffsetX"},
    };
    char js[1024], err[256];
    cq_spatial_cfg_t c;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(js, sizeof(js), "{\"Config\":{%s}}", cases[i].cfg);
        assert_int_equal(cq_spatial_cfg_parse(js, strlen(js), &c, err, sizeof(err)), CQ_ECONFIG);
        if (strncmp(err, cases[i].prefix, strlen(cases[i].prefix)) != 0)
            fail_msg("case %zu: \"%s\" does not start with \"%s\"", i, err, cases[i].prefix);
    }
    static const struct {
        const char *doc, *prefix;
    } docs[] = {
        {"[]", "the spatial config must be a JSON object"},
        {"{\"SpatialControllerType\":\"x\"}", "Config: missing"},
        {"{\"Config\":", "line 1"},
        {"{\"Config\":{\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,"
         "\"ServerCols\":1,\"ServerRows\":1},\"Handover\":{\"Axes\":\"xxz\"}}",
         "Handover.Axes: \"xxz\" is not a permutation"},
        {"{\"Config\":{\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,"
         "\"ServerCols\":1,\"ServerRows\":1},\"Handover\":{\"PositionPath\":3}}",
         "Handover.PositionPath: must be a string"},
        {"{\"Config\":{\"GridWidth\":1,\"GridHeight\":1,\"GridCols\":1,\"GridRows\":1,"
         "\"ServerCols\":1,\"ServerRows\":1},\"Handover\":{\"SubscribeClients\":1}}",
         "Handover.SubscribeClients: must be true or false"},
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        assert_int_equal(
            cq_spatial_cfg_parse(docs[i].doc, strlen(docs[i].doc), &c, err, sizeof(err)),
            CQ_ECONFIG);
        if (strncmp(err, docs[i].prefix, strlen(docs[i].prefix)) != 0)
            fail_msg("doc %zu: \"%s\" does not start with \"%s\"", i, err, docs[i].prefix);
    }
    assert_true(cq_spatial_cfg_load("/nonexistent/spatial.json", &c, err, sizeof(err)) < 0);
    assert_string_equal(err, "/nonexistent/spatial.json: No such file or directory");
}

/* ---- grid ---- */

static void test_grid_math(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    uint32_t i = 99;
    /* gx = floor((x + 2000) / 1000), gz = floor((z + 500) / 1000) */
    assert_int_equal(cq_spatial_cell_of(&g, -2000, -500, &i), 0);
    assert_int_equal(i, 0);
    assert_int_equal(cq_spatial_cell_of(&g, -0.5, 0, &i), 0);
    assert_int_equal(i, 1); /* floor(1999.5 / 1000) = 1 */
    assert_int_equal(cq_spatial_cell_of(&g, 1999.99, 499.99, &i), 0);
    assert_int_equal(i, 3);
    assert_int_equal(cq_spatial_cell_of(&g, 2000, 0, &i), CQ_EOFFGRID); /* gx = 4 */
    assert_int_equal(cq_spatial_cell_of(&g, -2000.01, 0, &i), CQ_EOFFGRID);
    assert_int_equal(cq_spatial_cell_of(&g, 0, 500, &i), CQ_EOFFGRID); /* gz = 1 */
    assert_int_equal(cq_spatial_cell_of(&g, NAN, 0, &i), CQ_EOFFGRID);
    assert_int_equal(cq_spatial_cell_of(&g, 0, INFINITY, &i), CQ_EOFFGRID);
    assert_int_equal(cq_spatial_cell_of(&g, 1e300, 0, &i), CQ_EOFFGRID);
    assert_int_equal(cq_spatial_chan_id(&g, 3), 65539);
    assert_true(cq_spatial_chan_index(&g, 65539, &i) && i == 3);
    assert_false(cq_spatial_chan_index(&g, 65540, &i));
    assert_false(cq_spatial_chan_index(&g, 65535, NULL));
    /* sgc = 4 / 2 = 2: cells 0,1 -> server 0, cells 2,3 -> server 1 */
    assert_int_equal(cq_spatial_cell_server(&g, 1), 0);
    assert_int_equal(cq_spatial_cell_server(&g, 2), 1);
    cq_spatial_cfg_done(&g);
}

static void test_regions(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    cq_spatial_region_t r;
    cq_spatial_region(&g, 2, &r); /* gx 2: x from -2000 + 2000 to -2000 + 3000 */
    assert_true(r.min.x == 0 && r.max.x == 1000 && r.min.z == -500 && r.max.z == 500);
    assert_true(r.min.y == -3.40282347e38 / 2 && r.max.y == 3.40282347e38 / 2);
    assert_true(r.max.y != (double)FLT_MAX / 2); /* the decimal constant, not FLT_MAX */
    assert_int_equal(r.chan_id, 65538);
    assert_int_equal(r.server, 1);
    cq_spatial_cfg_done(&g);
    g = load("benchmark");
    cq_spatial_region(&g, 5 + 5 * 15, &r); /* (5,5): server 1 + 1 * 3 = 4 */
    assert_true(r.min.x == -5000 && r.min.z == -5000 && r.max.x == -3000);
    assert_int_equal(r.server, 4);
    cq_spatial_cfg_done(&g);
}

static void test_slot_and_border_cells(void **state)
{
    (void)state;
    uint32_t out[64];
    cq_spatial_cfg_t g = load("4x1");
    assert_int_equal(cq_spatial_slot_cells(&g, 0, out, 64), 2);
    assert_string_equal(ids_str(out, 2), "65536 65537");
    assert_int_equal(cq_spatial_slot_cells(&g, 1, out, 64), 2);
    assert_string_equal(ids_str(out, 2), "65538 65539");
    assert_int_equal(cq_spatial_slot_cells(&g, 2, out, 64), 0);
    assert_int_equal(cq_spatial_border_cells(&g, 0, out, 64), 1);
    assert_int_equal(out[0], 65538);
    assert_int_equal(cq_spatial_border_cells(&g, 1, out, 64), 1);
    assert_int_equal(out[0], 65537);
    cq_spatial_cfg_done(&g);

    g = load("2x2"); /* 1x2 servers: slot 0 = row 0, slot 1 = row 1 */
    assert_int_equal(cq_spatial_slot_cells(&g, 0, out, 64), 2);
    assert_string_equal(ids_str(out, 2), "65536 65537");
    assert_int_equal(cq_spatial_slot_cells(&g, 1, out, 64), 2);
    assert_string_equal(ids_str(out, 2), "65538 65539");
    assert_int_equal(cq_spatial_border_cells(&g, 0, out, 64), 2);
    assert_string_equal(ids_str(out, 2), "65538 65539");
    cq_spatial_cfg_done(&g);

    /* benchmark: 15x15 cells, 3x3 servers, sgc = sgr = 5. Slot 4 = (1,1) owns x 5..9, z 5..9
     * in x + z * 5 order; its border is z = 4 (x 5..9), x = 4 and x = 10 (z 5..9), z = 10
     * (x 5..9): 20 cells, no corners. */
    g = load("benchmark");
    assert_int_equal(cq_spatial_slot_cells(&g, 4, out, 64), 25);
    assert_int_equal(out[0], 65536 + 5 + 5 * 15);
    assert_int_equal(out[4], 65536 + 9 + 5 * 15);
    assert_int_equal(out[5], 65536 + 5 + 6 * 15);
    assert_int_equal(out[24], 65536 + 9 + 9 * 15);
    uint32_t want[20], n = 0;
    for (uint32_t x = 5; x <= 9; x++)
        want[n++] = 65536 + x + 4 * 15;
    for (uint32_t z = 5; z <= 9; z++) {
        want[n++] = 65536 + 4 + z * 15;
        want[n++] = 65536 + 10 + z * 15;
    }
    for (uint32_t x = 5; x <= 9; x++)
        want[n++] = 65536 + x + 10 * 15;
    assert_int_equal(cq_spatial_border_cells(&g, 4, out, 64), 20);
    assert_memory_equal(out, want, sizeof(want));
    /* cap: the count is still returned, nothing written past cap */
    uint32_t small[4] = {0, 0, 0, 7};
    assert_int_equal(cq_spatial_border_cells(&g, 4, small, 3), 20);
    assert_int_equal(small[3], 7);
    assert_int_equal(cq_spatial_slot_cells(&g, 4, small, 3), 25);
    assert_int_equal(small[3], 7);
    /* corner slot 0: x 5 for z 0..4, z 5 for x 0..4 = 10 */
    assert_int_equal(cq_spatial_border_cells(&g, 0, out, 64), 10);
    cq_spatial_cfg_done(&g);
}

static void test_adjacent(void **state)
{
    (void)state;
    uint32_t out[9];
    cq_spatial_cfg_t g = load("benchmark");
    assert_int_equal(cq_spatial_adjacent(&g, 0, true, out), 4);
    assert_string_equal(ids_str(out, 4), "65536 65537 65551 65552");
    assert_int_equal(cq_spatial_adjacent(&g, 16, false, out), 8); /* (1,1) */
    assert_string_equal(ids_str(out, 8), "65536 65537 65538 65551 65553 65566 65567 65568");
    cq_spatial_cfg_done(&g);
    g = load("4x1");
    assert_int_equal(cq_spatial_adjacent(&g, 3, false, out), 1);
    assert_int_equal(out[0], 65538);
    cq_spatial_cfg_done(&g);
}

static void test_slots(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    cq_spatial_slots_t s;
    assert_int_equal(cq_spatial_slots_init(&s, &g), 0);
    assert_int_equal(cq_spatial_slots_take(&s, 7), 0);
    assert_int_equal(cq_spatial_slots_take(&s, 7), 0); /* already held */
    assert_false(cq_spatial_slots_full(&s));
    assert_int_equal(cq_spatial_slots_take(&s, 9), 1);
    assert_true(cq_spatial_slots_full(&s));
    assert_int_equal(cq_spatial_slots_take(&s, 11), CQ_ELIMIT);
    assert_int_equal(cq_spatial_slots_take(&s, 0), CQ_ENOCONN);
    assert_int_equal(cq_spatial_slots_of(&s, 9), 1);
    assert_int_equal(cq_spatial_slots_release(&s, 7), 1);
    assert_int_equal(cq_spatial_slots_of(&s, 7), -1);
    assert_int_equal(cq_spatial_slots_take(&s, 11), 0); /* the first free slot */
    assert_int_equal(cq_spatial_slots_release(&s, 12), 0);
    assert_int_equal(cq_spatial_slots_rekey(&s, 9, 21), 1); /* a successor under its own id */
    assert_int_equal(cq_spatial_slots_of(&s, 21), 1);
    assert_int_equal(cq_spatial_slots_of(&s, 9), -1);
    assert_int_equal(cq_spatial_slots_rekey(&s, 9, 22), 0);
    assert_int_equal(cq_spatial_slots_rekey(&s, 0, 22), 0); /* a free slot is nobody's */
    cq_spatial_slots_done(&s);
    cq_spatial_slots_done(NULL);
    cq_spatial_cfg_done(&g);
}

/* ---- queries ---- */

/* §4.4's verified examples on 4x1 (cells 1000, diagonal 1414.21). */
static void test_sphere_verified(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    /* (-1900, 100) r 3900, step 500: in-grid rows z = -300, 200 (from -3800); in-grid columns
     * x = -1800, -1300 (cell 0), -800, -300 (1), 200, 700 (2), 1200, 1700 (3). Row z = 200 is
     * last: 65537 <- x -300: |(1600, 100)| = 1603.1 -> 1.13 -> 2; 65538 <- x 700: 2601.9 ->
     * 1.84 -> 2; 65539 <- x 1700: 3601.4 -> 2.55 -> 3; 65536 is the centre -> 0. */
    cq_spatial_query_t q = sphere(-1900, 100, 3900);
    assert_string_equal(q_str(&g, &q), "65536:0 65537:2 65538:2 65539:3");
    /* (-1500, 0) r 2500: rows z = -500, 0; row 0 last. 65537 <- x -500: 1000 -> 0.71 -> 1;
     * 65538 <- x 500: 2000 -> 1.41 -> 2; 65539 <- x 1000 (on the circle: the boundary
     * counts; x 1500 is outside): 2500 -> 1.77 -> 2. */
    q = sphere(-1500, 0, 2500);
    assert_string_equal(q_str(&g, &q), "65536:0 65537:1 65538:2 65539:2");
    /* (1500, 0) r 1100, step 500: rows z = -100, 400; columns x = 400, 900 (cell 2), 1400,
     * 1900 (3). Row 400: x 400 is outside the disk (1100^2 + 400^2 > 1100^2); x 900:
     * |(600, 400)| = 721 -> 0.51 -> 1; 65539 is the centre. */
    q = sphere(1500, 0, 1100);
    assert_string_equal(q_str(&g, &q), "65538:1 65539:0");
    cq_spatial_cfg_done(&g);
}

/* §8.2: a huge radius answers at once with the lattice channeld would have walked. */
static void test_sphere_huge(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    /* r 1e9 from (-1900, 100): z starts at -999999900, exact integers with step 500, so the
     * jump lands on -1900 = start + 1999996 * 500 and walks -1400, -900, -400 (first in the
     * grid), 100. x starts at -1000001900: jump to -3400, walk to -1900 (first), then -1400,
     * -900, ..., 1600. Row z = 100 last: 65537 <- x -400: 1500 -> 1.06 -> 2; 65538 <- 600:
     * 2500 -> 1.77 -> 2; 65539 <- 1600: 3500 -> 2.47 -> 3. */
    cq_spatial_query_t q = sphere(-1900, 100, 1e9);
    assert_string_equal(q_str(&g, &q), "65536:0 65537:2 65538:2 65539:3");
    /* r 1e300: -1e300 + 500 == -1e300 (channeld spins for ever). The values are not exact, so
     * the lattice is anchored at the grid's edge: rows z = -500, 0; columns -2000, -1500, ...,
     * 1500. Row 0 last: 65537 <- x -500: |(1400, 100)| = 1403.6 -> 0.99 -> 1; 65538 <- 500:
     * 2402.1 -> 1.70 -> 2; 65539 <- 1500: 3401.5 -> 2.41 -> 3. */
    q = sphere(-1900, 100, 1e300);
    assert_string_equal(q_str(&g, &q), "65536:0 65537:1 65538:2 65539:3");
    q = sphere(-1900, 100, INFINITY);
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(-1900, 100, NAN);
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(NAN, 100, 10);
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(-1900, 100, 0);
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(-1900, 100, -5);
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(5000, 0, 100); /* centre off the grid */
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q = sphere(-1900, 100, 3900);
    q.sphere_has_center = false; /* channeld panics (§8.2) */
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    cq_spatial_cfg_done(&g);

    /* benchmark: every one of the 225 cells, by a sphere and a box of 1e9. */
    g = load("benchmark");
    cq_spatial_hits_t h = {0};
    q = sphere(0, 0, 1e9);
    assert_int_equal(cq_spatial_query(&g, &q, &h), 0);
    assert_int_equal(h.n, 225);
    assert_int_equal(cq_spatial_hits_get(&h, 65536 + 7 + 7 * 15), 0);
    q = (cq_spatial_query_t){.box = true,
                             .box_has_center = true,
                             .box_has_extent = true,
                             .box_center = {0, 0, 0},
                             .box_extent = {1e9, 0, 1e9}};
    assert_int_equal(cq_spatial_query(&g, &q, &h), 0);
    assert_int_equal(h.n, 225);
    assert_int_equal(cq_spatial_hits_get(&h, 65536 + 7 + 7 * 15), 0);
    assert_int_equal(cq_spatial_hits_get(&h, 1), -1);
    cq_spatial_hits_done(&h);
    cq_spatial_hits_done(&h);
    cq_spatial_cfg_done(&g);
}

static void test_box(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    /* centre (-1500, 0), extent (600, 100): stepX 300, stepZ 50. Rows z -100..100; columns
     * -2100 (off), -1800, -1500, -1200 (cell 0), -900 (1). Row 100 last: 65537 <- x -900:
     * |(600, 100)| = 608 -> 0.43 -> 1; 65536 the centre. */
    cq_spatial_query_t q = {.box = true,
                            .box_has_center = true,
                            .box_has_extent = true,
                            .box_center = {-1500, 0, 0},
                            .box_extent = {600, 0, 100}};
    assert_string_equal(q_str(&g, &q), "65536:0 65537:1");
    q.box_has_extent = false;
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q.box_has_extent = true;
    q.box_extent.x = 0;
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q.box_extent.x = 600;
    q.box_has_center = false;
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    cq_spatial_cfg_done(&g);
}

static void test_cone(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    /* centre (-1500, 0), dir +x, half-angle 0.8 (cos 0.697), r 2500. channeld clips the loops:
     * z -500, 0, (500 off); x -2000 .. 1000 step 500. Row -500: x -1000 (dot 0.707, cell 1,
     * 707 -> 1), -500 (0.894, cell 1, 1118 -> 1), 0 (0.949, cell 2, 1581 -> 2), 500 (cell 2,
     * 2062 -> 2), 1000 (outside the disk). Row 0 (last): x -1500 is the centre (NaN dot:
     * kept), -1000, -500 (cell 1, 500 and 1000 -> 1), 0, 500 (cell 2, 1500 and 2000 -> 2),
     * 1000 (cell 3, 2500 -> 2). */
    cq_spatial_query_t q = {.cone = true,
                            .cone_has_center = true,
                            .cone_has_dir = true,
                            .cone_center = {-1500, 0, 0},
                            .cone_dir = {1, 0, 0},
                            .cone_angle = 0.8,
                            .cone_radius = 2500};
    assert_string_equal(q_str(&g, &q), "65536:0 65537:1 65538:2 65539:2");
    q.cone_dir = (cq_spatial_vec_t){-1e300, 0, 0}; /* huge, yet a direction: -x */
    assert_string_equal(q_str(&g, &q), "65536:0");
    q.cone_dir = (cq_spatial_vec_t){0, 5, 0}; /* y only: zero in the plane */
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q.cone_dir = (cq_spatial_vec_t){1, 0, 0};
    q.cone_angle = NAN;
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q.cone_angle = 0.8;
    q.cone_has_dir = false;
    assert_string_equal(q_str(&g, &q), "CQ_EBADQUERY");
    q.cone_has_dir = true;
    q.cone_radius = 1e300; /* clipped to the world: same as 2500 plus the far column */
    assert_string_equal(q_str(&g, &q), "65536:0 65537:1 65538:2 65539:3");
    cq_spatial_cfg_done(&g);
}

static void test_spots_and_order(void **state)
{
    (void)state;
    cq_spatial_cfg_t g = load("4x1");
    const cq_spatial_vec_t spots[] = {{-1500, 0, 0}, {500, 0, 0}, {5000, 0, 0}, {NAN, 0, 0}};
    const uint32_t dists[] = {3};
    cq_spatial_query_t q = {
        .spots = true, .spot = spots, .n_spots = 4, .dists = dists, .n_dists = 1};
    /* spot 0 -> cell 0 with dists[0]; spot 1 -> cell 2 with 0; spots 2, 3 off the grid */
    assert_string_equal(q_str(&g, &q), "65536:3 65538:0");
    const cq_spatial_vec_t spot2[] = {{1500, 0, 0}, {-1500, 0, 0}};
    const uint32_t d2[] = {7, 9};
    q = sphere(1500, 0, 1100); /* sphere after spots: its 1 and 0 overwrite 7 */
    q.spots = true;
    q.spot = spot2;
    q.n_spots = 2;
    q.dists = d2;
    q.n_dists = 2;
    assert_string_equal(q_str(&g, &q), "65536:9 65538:1 65539:0");
    q = (cq_spatial_query_t){0};
    assert_string_equal(q_str(&g, &q), "");
    cq_spatial_cfg_done(&g);
}

static void test_damping(void **state)
{
    (void)state;
    assert_int_equal(cq_spatial_damping_ms(0, 20), 20);
    assert_int_equal(cq_spatial_damping_ms(1, 20), 50);
    assert_int_equal(cq_spatial_damping_ms(2, 20), 100);
    assert_int_equal(cq_spatial_damping_ms(3, 20), 20); /* §4.4: shorter than 1 and 2 */
    assert_int_equal(cq_spatial_damping_ms(UINT32_MAX, 250), 250);
}

/* ---- entity groups ---- */

static const char *hset(cq_entgroups_t *g, uint32_t e)
{
    uint32_t out[16];
    size_t n = cq_entgroups_handover_set(g, e, out, 16);
    return n ? ids_str(out, (uint32_t)n) : "none";
}

static void test_groups(void **state)
{
    (void)state;
    cq_entgroups_t *g = cq_entgroups_new();
    assert_non_null(g);
    assert_string_equal(hset(g, 1), "1"); /* no group: itself */
    const uint32_t a23[] = {2, 3}, a4[] = {4}, a5[] = {5}, a3[] = {3}, a2[] = {2};
    assert_int_equal(cq_entgroups_add(g, 1, CQ_ENTGROUP_HANDOVER, a23, 2), 0);
    assert_string_equal(hset(g, 1), "1 2 3");
    assert_string_equal(hset(g, 2), "1 2 3");
    assert_string_equal(hset(g, 3), "1 2 3");
    /* 5 groups 4; then 1 takes 5: 5's group is absorbed, 4 included (cascade) */
    assert_int_equal(cq_entgroups_add(g, 5, CQ_ENTGROUP_HANDOVER, a4, 1), 0);
    assert_string_equal(hset(g, 4), "4 5");
    assert_int_equal(cq_entgroups_add(g, 1, CQ_ENTGROUP_HANDOVER, a5, 1), 0);
    assert_string_equal(hset(g, 1), "1 2 3 4 5");
    assert_string_equal(hset(g, 4), "1 2 3 4 5");
    /* 3 locks itself: nothing of its handover group moves */
    assert_int_equal(cq_entgroups_add(g, 3, CQ_ENTGROUP_LOCK, a3, 1), 0);
    assert_true(cq_entgroups_locked(g, 3));
    assert_true(cq_entgroups_locked(g, 1)); /* LOCK pulled in 3's handover group */
    assert_string_equal(hset(g, 1), "none");
    assert_string_equal(hset(g, 5), "none");
    uint32_t all[5] = {1, 2, 3, 4, 5};
    assert_int_equal(cq_entgroups_remove(g, 3, CQ_ENTGROUP_LOCK, all, 5), 0);
    assert_false(cq_entgroups_locked(g, 3));
    assert_string_equal(hset(g, 1), "1 2 3 4 5");
    /* removing 2 empties 2's own group */
    assert_int_equal(cq_entgroups_remove(g, 1, CQ_ENTGROUP_HANDOVER, a2, 1), 0);
    assert_string_equal(hset(g, 2), "2");
    assert_string_equal(hset(g, 1), "1 3 4 5");
    /* a locked entity with no handover group */
    const uint32_t a9[] = {9};
    assert_int_equal(cq_entgroups_add(g, 9, CQ_ENTGROUP_LOCK, a9, 1), 0);
    assert_string_equal(hset(g, 9), "none");
    cq_entgroups_forget(g, 9);
    assert_string_equal(hset(g, 9), "9");
    cq_entgroups_forget(g, 4);
    assert_string_equal(hset(g, 1), "1 3 5");
    assert_string_equal(hset(g, 4), "4");
    /* cap: the count is returned, nothing written past it */
    uint32_t out[2] = {0, 77};
    assert_int_equal(cq_entgroups_handover_set(g, 1, out, 1), 3);
    assert_int_equal(out[1], 77);
    assert_int_equal(cq_entgroups_add(g, 1, (cq_entgroup_type_t)7, a2, 1), CQ_EFIELD);
    assert_int_equal(cq_entgroups_remove(g, 1, (cq_entgroup_type_t)7, a2, 1), CQ_EFIELD);
    assert_null(cq_entgroups_free(g));
    assert_null(cq_entgroups_free(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_layouts),
        cmocka_unit_test(test_handover_section),
        cmocka_unit_test(test_validation_messages),
        cmocka_unit_test(test_grid_math),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_slot_and_border_cells),
        cmocka_unit_test(test_adjacent),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_sphere_verified),
        cmocka_unit_test(test_sphere_huge),
        cmocka_unit_test(test_box),
        cmocka_unit_test(test_cone),
        cmocka_unit_test(test_spots_and_order),
        cmocka_unit_test(test_damping),
        cmocka_unit_test(test_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
