/* pending.c - queries and entity groups land in the next commit (issue 12). */
#include "cq_spatial.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <string.h>

void cq_spatial_hits_done(cq_spatial_hits_t *h)
{
    cq_free(h->v);
    memset(h, 0, sizeof(*h));
}

int64_t cq_spatial_hits_get(const cq_spatial_hits_t *h, uint32_t chan_id)
{
    for (uint32_t i = 0; i < h->n; i++)
        if (h->v[i].chan_id == chan_id)
            return h->v[i].dist;
    return -1;
}

int cq_spatial_query(const cq_spatial_cfg_t *g, const cq_spatial_query_t *q, cq_spatial_hits_t *ret)
{
    (void)g;
    (void)q;
    ret->n = 0;
    return CQ_EBADQUERY;
}

uint32_t cq_spatial_damping_ms(uint32_t dist, uint32_t default_ms)
{
    return dist == 0 ? 20 : dist == 1 ? 50 : dist == 2 ? 100 : default_ms;
}

struct cq_entgroups {
    int dummy;
};

cq_entgroups_t *cq_entgroups_new(void)
{
    return cq_calloc(1, sizeof(cq_entgroups_t));
}

cq_entgroups_t *cq_entgroups_free(cq_entgroups_t *g)
{
    cq_free(g);
    return NULL;
}

int cq_entgroups_add(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                     const uint32_t *ids, size_t n)
{
    (void)g, (void)owner, (void)type, (void)ids, (void)n;
    return 0;
}

int cq_entgroups_remove(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                        const uint32_t *ids, size_t n)
{
    (void)g, (void)owner, (void)type, (void)ids, (void)n;
    return 0;
}

bool cq_entgroups_locked(const cq_entgroups_t *g, uint32_t e)
{
    (void)g, (void)e;
    return false;
}

size_t cq_entgroups_handover_set(const cq_entgroups_t *g, uint32_t e, uint32_t *out, size_t cap)
{
    (void)g;
    if (cap)
        out[0] = e;
    return 1;
}

void cq_entgroups_forget(cq_entgroups_t *g, uint32_t e)
{
    (void)g, (void)e;
}
