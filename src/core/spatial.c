/* spatial.c - the spatial controller: server slots, cell channels, border interest, regions,
 * queries (channeld-protocol.md §4.1-§4.3). Runs on GLOBAL's worker. */
#include "core_int.h"

void cq__handle_create_spatial(cq_core_t *c, cq_req_t *r)
{
    CQ_MSG_LOG(c, "spatial", "conn %u: spatial channels are not implemented yet", r->conn_id);
}

void cq__handle_query_spatial(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}

void cq__handle_debug_regions(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}
