/* world.h - the spatial world in the core: the spatial controller (spatial.c), entity channels
 * and their groups (entity.c), interest (interest.c) and handover (handover.c). Every decision
 * about the grid is src/spatial's; these files keep the state and run the messages, each on
 * the worker that owns what it touches (doc/architecture.md, "The spatial world"). Not a
 * public header.
 *
 * The world's process-wide state (the spatial config, the slot holders, the entity groups and
 * the well-known entities) is in cq_shared and its per-worker state (the slots, the clients'
 * last interest) in cq_core (core.h); an entity channel's own state is behind its channel
 * (cq_entity_state_t). */
#ifndef CQ_WORLD_H
#define CQ_WORLD_H

#include <stdbool.h>
#include <stdint.h>

#include "cq_core.h"
#include "cq_spatial.h"
#include "place.h"

typedef struct cq_chan cq_chan_t;

/* An ENTITY channel's own state (cq_chan_t.ts.entity): its cell and its handover's state
 * (handover.c). */
typedef struct cq_entity_state {
    uint32_t cell;           /* the spatial cell the entity is in, 0 = not known yet */
    uint32_t ho_blocked;     /* a cell a locked group kept it out of: not retried */
    uint32_t ho_blocked_gen; /* sh->groups_gen when ho_blocked was set */
    bool ho_pending;         /* a handover it started has not reached its entity stage yet */
} cq_entity_state_t;

/* Allocates what ch's type keeps (cq_chan_t.ts; nothing for a type that keeps nothing), when
 * the channel is created (chan.c). Returns 0 or -ENOMEM. */
int cq__chan_ts_new(cq_chan_t *ch);
/* Frees what ch's type keeps, when the channel is destroyed. */
void cq__chan_ts_free(cq_chan_t *ch);

/* spatial.c: the spatial controller (GLOBAL's worker) and its messages */
void cq__handle_create_spatial(cq_core_t *c, cq_req_t *r); /* 10, and 3 with SPATIAL */
void cq__handle_query_spatial(cq_core_t *c, cq_req_t *r);  /* 11 */
void cq__handle_debug_regions(cq_core_t *c, cq_req_t *r);  /* 99 */
/* On cell id's worker: mode SP_CELL_OWN creates the cell (or takes it over) for `who`, the
 * request's sender; SP_CELL_SUB subscribes `who` silently (its own cell, border interest). The
 * request r carries the CreateChannelMessage. */
enum { SP_CELL_OWN = 0, SP_CELL_SUB = 1 };
void cq__spatial_cell(cq_core_t *c, cq_req_t *r, uint32_t id, uint32_t mode, uint32_t who);
/* XM_SP_CELL: runs a creation's remaining reply steps p[0..n) (spatial.c), from this worker on. */
void cq__spatial_chain(cq_core_t *c, cq_req_t *r, const uint8_t *p, size_t n);
/* Connection conn_id closed (every worker calls it; only the directory worker acts): frees its
 * server slot unless it is recoverable (then the slot waits for cq__spatial_release). */
void cq__spatial_conn_gone(cq_core_t *c, uint32_t conn_id, bool recoverable);
/* Directory worker: frees the slot conn_id holds (a recovery handle expired). */
void cq__spatial_release(cq_core_t *c, uint32_t conn_id);
/* Directory worker: old_id's server slot is new_id's (a successor on another relay node). */
void cq__spatial_rekey(cq_core_t *c, uint32_t old_id, uint32_t new_id);
/* True when ch is one of the grid's cells: cells are never removed for losing their owner
 * (the grid is fixed; a server that takes the slot over takes the cells over). */
bool cq__spatial_is_cell(const cq_core_t *c, const cq_chan_t *ch);
void cq__spatial_free(cq_core_t *c);

/* entity.c: entity channels and their groups */
void cq__handle_create_entity(cq_core_t *c, cq_req_t *r); /* 15 */
void cq__handle_group_add(cq_core_t *c, cq_req_t *r);     /* 16 */
void cq__handle_group_remove(cq_core_t *c, cq_req_t *r);  /* 17 */
/* XM_ENTITY, on entity id's worker: creates the entity channel for request r (15). */
void cq__entity_create_here(cq_core_t *c, cq_req_t *r, uint32_t id);
/* XM_WK_SUB, on chan_id's worker: subscribes client conn_id to well-known entity chan_id with
 * fanOutDelayMs = 1000 and sends it the SUB result. */
void cq__entity_wk_sub(cq_core_t *c, uint32_t chan_id, uint32_t conn_id);
/* A CLIENT authenticated (its worker): subscribe it to every well-known entity. */
void cq__entity_client_authed(cq_core_t *c, uint32_t conn_id);
/* Subscribes client conn_id to every well-known entity (GLOBAL's home, in a relay). */
void cq__entity_wk_all(cq_core_t *c, uint32_t conn_id);
/* An entity channel is being removed: it leaves its groups and the well-known list. */
void cq__entity_removed(cq_core_t *c, const cq_chan_t *ch);

/* interest.c: UPDATE_SPATIAL_INTEREST */
void cq__handle_update_interest(cq_core_t *c, cq_req_t *r); /* 14 */
/* The cells a client's last UPDATE_SPATIAL_INTEREST asked for (on the client's worker). */
typedef struct cq_aoi {
    uint32_t n;
    uint32_t cells[];
} cq_aoi_t;
/* XM_INTEREST on the client's worker: diff and post the SUBs and UNSUBs. */
void cq__interest_apply(cq_core_t *c, const cq_xmsg_t *m);

/* handover.c: an entity channel's data moved it to another cell (called by data.c after an
 * accepted update of an ENTITY channel; sender as in cq__handle_data_update). */
void cq__handover_check(cq_core_t *c, cq_chan_t *ch, const cq_req_t *r);
/* XM_HANDOVER: one stage of a handover. */
void cq__handover_stage(cq_core_t *c, const cq_xmsg_t *m);
/* The entity's position from its data at the configured path, mapped to channeld's axes.
 * Returns 1 (and *ret), 0 when the data has none (no handover config, no known type, field
 * absent), or a negative code (CQ_EFIELD: path not in the type; CQ_EDECODE). */
int cq__entity_position(cq_core_t *c, const cq_chan_t *ch, cq_spatial_vec_t *ret);
/* Sets the entity channel's current cell from its data (at creation; 0 when unknown). */
void cq__entity_init_cell(cq_core_t *c, cq_chan_t *ch);
/* The entity groups changed (ENTITY_GROUP_ADD/REMOVE): refused handovers may be retried. */
void cq__handover_groups_changed(cq_core_t *c);

#endif
