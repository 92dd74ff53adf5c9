/* cq_spatial.h - the spatial engine: channeld's static 2D grid, its server slots and border
 * interest, the AOI queries with their damping, and the entity groups (channeld-protocol.md §4).
 *
 * Pure: no I/O, no threads, no globals. The core (src/core) keeps the runtime state (which
 * connection holds a slot, the channels) and calls these functions for every decision; the
 * unit tests check them against worked examples computed by hand from §4.
 *
 * Coordinates are channeld's: left-handed, Y up; the grid uses X and Z (Y is ignored).
 * Cell index = gx + gz * cols; channel id = chan_start + index.
 *
 * Threads: a parsed cq_spatial_cfg_t is immutable and may be read by any thread. A
 * cq_spatial_slots_t and a cq_entgroups_t belong to one thread (or to their caller's lock).
 */
#ifndef CQ_SPATIAL_H
#define CQ_SPATIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- configuration (channeld's spatial_static_*.json plus chanq's "Handover" section) ---- */

/* Where handover finds an entity's position and how it moves entities between cells. Every
 * string is owned by the config and never NULL after a successful parse ("" = unset). */
typedef struct cq_spatial_handover_cfg {
    char *position_path;     /* field path in the entity's channel-data type, e.g.
                              * "transform.position"; "" = no handover */
    uint8_t axes[3];         /* channeld x, y, z come from the vector's component axes[i]
                              * (0 = x, 1 = y, 2 = z): "xyz" = {0,1,2}; UE's Z-up "xzy" = {0,2,1} */
    char *entities_field;    /* map<uint32, M> field of the spatial cells' data type holding the
                              * entities; "" = the cells' data is not touched */
    char *entity_data_field; /* google.protobuf.Any field of M that carries an entity's full data
                              * in a handover to a new subscriber; "" = none */
    bool subscribe_clients;  /* "SubscribeClients" (default true, channeld's §4.6): a handover
                              * subscribes the destination cell's CLIENT subscribers to the
                              * moved entities too; false: only servers, and clients see the
                              * entities through the cells' data */
} cq_spatial_handover_cfg_t;

typedef struct cq_spatial_cfg {
    double off_x, off_z;   /* WorldOffsetX, WorldOffsetZ */
    double cell_w, cell_h; /* GridWidth, GridHeight (> 0) */
    uint32_t cols, rows;   /* GridCols, GridRows (>= 1) */
    uint32_t server_cols;  /* ServerCols (>= 1, divides cols) */
    uint32_t server_rows;  /* ServerRows (>= 1, divides rows) */
    uint32_t border;       /* ServerInterestBorderSize */
    uint32_t chan_start;   /* first spatial channel id (channeld -scs, default 0x10000) */
    uint32_t entity_start; /* first entity channel id (channeld -ecs, default 0x80000) */
    cq_spatial_handover_cfg_t handover;
} cq_spatial_cfg_t;

/* Parses channeld's controller JSON (json[0..len), borrowed):
 *   {"SpatialControllerType": "Static2DSpatialController",
 *    "Config": {"WorldOffsetX", "WorldOffsetZ", "GridWidth", "GridHeight", "GridCols", "GridRows",
 *               "ServerCols", "ServerRows", "ServerInterestBorderSize"},
 *    "Handover": {"PositionPath": "transform.position", "Axes": "xzy",
 *                 "EntitiesField": "entities", "EntityDataField": "entityData",
 *                 "SubscribeClients": true}}   (optional)
 * chan_start/entity_start are set by the caller after parsing (defaults 0x10000/0x80000).
 * Validation (each error message starts with the JSON field's name and says what is wrong):
 *   - numbers finite; GridWidth/GridHeight > 0; GridCols/GridRows/ServerCols/ServerRows >= 1;
 *   - GridCols % ServerCols == 0 and GridRows % ServerRows == 0 (the grid divides evenly among
 *     the servers; channeld lets the last slots fail instead);
 *   - ServerInterestBorderSize: with more than one server it must be >= 1 (0 leaves a server
 *     blind to its neighbours' entities until they are handed over: channeld's validation
 *     rejects it too but ignores its own error), and <= the cells a server has along each
 *     axis that has more than one server;
 *   - GridCols * GridRows must fit between chan_start and entity_start (0x70000 cells);
 *   - Axes is a permutation of "xyz"; unknown keys are ignored (channeld ignores them too).
 * Returns 0, or CQ_ECONFIG with a NUL-terminated reason in err. *ret is zeroed first and owns
 * its strings on success (cq_spatial_cfg_done). */
int cq_spatial_cfg_parse(const char *json, size_t len, cq_spatial_cfg_t *ret, char *err,
                         size_t errlen);
/* Loads `spec`: one of the shipped layout names ("2x2", "4x1", "benchmark", "tanks_small",
 * "tanks_big"; config/spatial_static_<name>.json, embedded in the binary) or a file path.
 * Same returns as cq_spatial_cfg_parse, plus -errno from reading the file. */
int cq_spatial_cfg_load(const char *spec, cq_spatial_cfg_t *ret, char *err, size_t errlen);
/* Frees the strings. Accepts NULL and a zeroed struct. */
void cq_spatial_cfg_done(cq_spatial_cfg_t *c);

/* ---- grid math (§4.2) ---- */

uint32_t cq_spatial_cells(const cq_spatial_cfg_t *g);   /* cols * rows */
uint32_t cq_spatial_servers(const cq_spatial_cfg_t *g); /* server_cols * server_rows */
/* Cell of (x, z): floor((x - off_x) / cell_w), floor((z - off_z) / cell_h). Returns 0 and
 * *ret_index, or CQ_EOFFGRID when off the grid or not finite. */
int cq_spatial_cell_of(const cq_spatial_cfg_t *g, double x, double z, uint32_t *ret_index);
/* Channel id of a cell index (chan_start + index). */
uint32_t cq_spatial_chan_id(const cq_spatial_cfg_t *g, uint32_t index);
/* True (and *ret_index) when chan_id is one of the grid's cells. ret_index may be NULL. */
bool cq_spatial_chan_index(const cq_spatial_cfg_t *g, uint32_t chan_id, uint32_t *ret_index);
/* The server slot that owns a cell: (gx / sgc) + (gz / sgr) * server_cols. */
uint32_t cq_spatial_cell_server(const cq_spatial_cfg_t *g, uint32_t index);

typedef struct cq_spatial_vec {
    double x, y, z;
} cq_spatial_vec_t;

typedef struct cq_spatial_region {
    cq_spatial_vec_t min, max; /* y bounds are -/+ 3.40282347e38 / 2 exactly, channeld's
                                * MinY/MaxY (the decimal literal, not FLT_MAX / 2) */
    uint32_t chan_id;
    uint32_t server;
} cq_spatial_region_t;

/* The region of a cell (§4.2, GetRegions). */
void cq_spatial_region(const cq_spatial_cfg_t *g, uint32_t index, cq_spatial_region_t *ret);
/* Cells of server slot `slot` in channeld's order (x + y * sgc from (sx*sgc, sz*sgr)): writes
 * up to cap channel ids to out and returns how many the slot has (sgc * sgr). */
uint32_t cq_spatial_slot_cells(const cq_spatial_cfg_t *g, uint32_t slot, uint32_t *out,
                               uint32_t cap);
/* The cells slot subscribes to once every slot is filled (§4.3 step 4): `border`
 * rows/columns of the neighbouring servers' cells to its left, right, top and bottom, no
 * diagonal corners, ascending channel id. Same out/cap/return convention. */
uint32_t cq_spatial_border_cells(const cq_spatial_cfg_t *g, uint32_t slot, uint32_t *out,
                                 uint32_t cap);
/* The 3x3 neighbourhood of a cell clipped to the grid, ascending channel id; with_centre
 * false leaves the centre out (ADJACENT_CHANNELS | ALL_BUT_OWNER). Returns the count (<= 9). */
uint32_t cq_spatial_adjacent(const cq_spatial_cfg_t *g, uint32_t index, bool with_centre,
                             uint32_t out[9]);

/* ---- server slots (§4.3 step 1) ---- */

typedef struct cq_spatial_slots {
    uint32_t n;       /* cq_spatial_servers() */
    uint32_t *holder; /* connection id per slot, 0 = free */
} cq_spatial_slots_t;

int cq_spatial_slots_init(cq_spatial_slots_t *s, const cq_spatial_cfg_t *g); /* 0 or -ENOMEM */
void cq_spatial_slots_done(cq_spatial_slots_t *s);
/* The slot conn already holds, or the first free one, which it now holds. Returns the slot,
 * or CQ_ELIMIT when every slot is held by someone else. */
int cq_spatial_slots_take(cq_spatial_slots_t *s, uint32_t conn);
/* Frees every slot conn holds; returns how many. */
uint32_t cq_spatial_slots_release(cq_spatial_slots_t *s, uint32_t conn);
/* Every slot from holds is to's now (a recovered server under a new id); returns how many. */
uint32_t cq_spatial_slots_rekey(cq_spatial_slots_t *s, uint32_t from, uint32_t to);
bool cq_spatial_slots_full(const cq_spatial_slots_t *s);
/* Slot held by conn, or -1. */
int cq_spatial_slots_of(const cq_spatial_slots_t *s, uint32_t conn);

/* ---- interest queries (§4.4, with the §8.2 fixes) ---- */

/* A query as decoded from UpdateSpatialInterestMessage.query. A missing sub-message (center,
 * extent, direction) is absent, not zero: has_* say which are present. */
typedef struct cq_spatial_query {
    bool spots;
    const cq_spatial_vec_t *spot; /* n_spots points */
    size_t n_spots;
    const uint32_t *dists; /* n_dists; spot i gets dists[i] when i < n_dists, else 0 */
    size_t n_dists;

    bool box;
    bool box_has_center, box_has_extent;
    cq_spatial_vec_t box_center, box_extent;

    bool sphere;
    bool sphere_has_center;
    cq_spatial_vec_t sphere_center;
    double sphere_radius;

    bool cone;
    bool cone_has_center, cone_has_dir;
    cq_spatial_vec_t cone_center, cone_dir;
    double cone_angle; /* radians, the half-angle */
    double cone_radius;
} cq_spatial_query_t;

/* One wanted cell: its channel id and its distance in cell diagonals (rounded up). */
typedef struct cq_spatial_hit {
    uint32_t chan_id;
    uint32_t dist;
} cq_spatial_hit_t;

typedef struct cq_spatial_hits {
    cq_spatial_hit_t *v; /* ascending chan_id, unique */
    uint32_t n, cap;
} cq_spatial_hits_t;

void cq_spatial_hits_done(cq_spatial_hits_t *h); /* frees v; accepts a zeroed struct */
/* The distance of chan_id in h, or -1 when absent. */
int64_t cq_spatial_hits_get(const cq_spatial_hits_t *h, uint32_t chan_id);

/* Runs channeld's QueryChannelIds: spots, box, sphere, cone in that order, a later sample
 * overwriting an earlier one for the same cell, also within a shape (the last sample in row
 * order wins, not the nearest: §4.4's worked example gives 65537 -> 2). Samples are visited
 * exactly as channeld's float64 loops visit them, except that the lattice points outside the
 * world are skipped arithmetically (§8.2: a huge radius no longer stalls). Clears *ret first.
 * Returns 0, or CQ_EBADQUERY (the whole query fails and ret is empty): a box, sphere or cone
 * without its center (or a box without extent, a cone without direction), a centre off the
 * grid, a non-positive or non-finite extent or radius, a non-finite coordinate or angle; or
 * -ENOMEM. */
int cq_spatial_query(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q,
                     cq_spatial_hits_t *ret);

/* The fan-out interval for a distance (§4.4 damping): 0 -> 20, 1 -> 50, 2 -> 100,
 * farther -> default_ms (SPATIAL's DefaultFanOutIntervalMs). */
uint32_t cq_spatial_damping_ms(uint32_t dist, uint32_t default_ms);

/* ---- entity groups (§4.5, channeld's FlatEntityGroupController) ---- */

typedef enum cq_entgroup_type {
    CQ_ENTGROUP_HANDOVER = 0,
    CQ_ENTGROUP_LOCK = 1,
} cq_entgroup_type_t;

typedef struct cq_entgroups cq_entgroups_t;

/* NULL on out of memory. Returned owned (cq_entgroups_free). */
cq_entgroups_t *cq_entgroups_new(void);
cq_entgroups_t *cq_entgroups_free(cq_entgroups_t *g); /* accepts NULL; returns NULL */
/* ENTITY_GROUP_ADD sent on entity `owner`'s channel: adds ids to owner's group of `type`.
 * Groups are shared sets: adding X merges X's current group of that type into owner's
 * (cascading), and every member then shares the one set. Adding to LOCK also pulls in the
 * added entity's HANDOVER group. The owner is a member of its own group. Returns 0, CQ_EFIELD
 * (unknown type) or -ENOMEM. */
int cq_entgroups_add(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                     const uint32_t *ids, size_t n);
/* ENTITY_GROUP_REMOVE: removes ids from owner's group of `type`; each removed entity's own
 * group of that type becomes empty. Returns 0 or CQ_EFIELD. */
int cq_entgroups_remove(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                        const uint32_t *ids, size_t n);
/* True when e is in a lock group with at least one member. */
bool cq_entgroups_locked(const cq_entgroups_t *g, uint32_t e);
/* The entities to hand over with e (§4.5): e alone when it has no handover group; none when
 * any member of its handover group (e included) is locked; otherwise the whole group,
 * ascending. Writes up to cap ids and returns the count. */
size_t cq_entgroups_handover_set(const cq_entgroups_t *g, uint32_t e, uint32_t *out, size_t cap);
/* Entity e's channel is gone: it leaves every group. */
void cq_entgroups_forget(cq_entgroups_t *g, uint32_t e);

#endif
