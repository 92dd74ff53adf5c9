/* stub.c - placeholder so the tree builds until the engine lands (issue 12). */
#include "cq_spatial.h"

#include "cq_err.h"

#include <string.h>

int cq_spatial_cfg_parse(const char *json, size_t len, cq_spatial_cfg_t *ret, char *err,
                         size_t errlen)
{
    (void)json;
    (void)len;
    memset(ret, 0, sizeof(*ret));
    if (err && errlen)
        strncpy(err, "spatial engine not built yet", errlen - 1);
    return CQ_ECONFIG;
}

int cq_spatial_cfg_load(const char *spec, cq_spatial_cfg_t *ret, char *err, size_t errlen)
{
    return cq_spatial_cfg_parse(spec, strlen(spec), ret, err, errlen);
}

void cq_spatial_cfg_done(cq_spatial_cfg_t *c)
{
    (void)c;
}

uint32_t cq_spatial_servers(const cq_spatial_cfg_t *g)
{
    return g->server_cols * g->server_rows;
}

cq_entgroups_t *cq_entgroups_new(void)
{
    static int dummy;
    return (cq_entgroups_t *)&dummy;
}

cq_entgroups_t *cq_entgroups_free(cq_entgroups_t *g)
{
    (void)g;
    return NULL;
}

uint32_t cq_spatial_cells(const cq_spatial_cfg_t *g)
{
    return g->cols * g->rows;
}
