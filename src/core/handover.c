/* handover.c - entity handover between spatial cells (channeld-protocol.md §4.6). */
#include "core_int.h"

void cq__handover_check(cq_core_t *c, cq_chan_t *ch, const cq_req_t *r)
{
    (void)c;
    (void)ch;
    (void)r;
}
