/* interest.c - UPDATE_SPATIAL_INTEREST (channeld-protocol.md §4.4). */
#include "core_int.h"

void cq__handle_update_interest(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}
