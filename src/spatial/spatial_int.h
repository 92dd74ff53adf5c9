/* spatial_int.h - helpers shared by the spatial engine's files (not part of the interface). */
#ifndef CQ_SPATIAL_INT_H
#define CQ_SPATIAL_INT_H

#include "cq_spatial.h"

/* The cells a server slot has along X (sgc) and Z (sgr): ceil(cols / server_cols) as channeld
 * computes it; the validation makes the division exact. */
uint32_t cq__spatial_sgc(const cq_spatial_cfg_t *g);
uint32_t cq__spatial_sgr(const cq_spatial_cfg_t *g);

#endif
