/* entity.c - entity channels (CREATE_ENTITY_CHANNEL, well-known entities) and their groups
 * (ENTITY_GROUP_ADD/REMOVE), channeld-protocol.md §4.5. */
#include "core_int.h"

void cq__handle_create_entity(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}

void cq__handle_group_add(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}

void cq__handle_group_remove(cq_core_t *c, cq_req_t *r)
{
    (void)c;
    (void)r;
}
