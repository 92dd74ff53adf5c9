/* groups.c - entity groups (§4.5, channeld's FlatEntityGroupController) as shared sets.
 *
 * Each entity points at (at most) one HANDOVER group and one LOCK group; every entity pointing
 * at a group is a member of it and every member points at it, so "the members share the one
 * set" holds by construction. channeld shares a group object by pointer and cascades one level
 * only (a member of a merged group may keep pointing at its old, smaller set); here a merge
 * re-points every member of the absorbed group, which is what the cascade means to do.
 *
 * Sizes are small (the entities that ever joined a group), so both tables are sorted arrays. */
#include "cq_spatial.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

typedef struct ids {
    uint32_t *v; /* ascending, unique */
    uint32_t n, cap;
} ids_t;

typedef struct ent {
    uint32_t id;
    uint32_t grp[2]; /* group index + 1 per cq_entgroup_type_t; 0 = none */
} ent_t;

struct cq_entgroups {
    ent_t *e; /* ascending id */
    uint32_t ne, cape;
    ids_t *g; /* groups; a free slot has n == 0 */
    uint32_t ng, capg;
};

/* ---- sorted id sets ---- */

static uint32_t ids_find(const ids_t *s, uint32_t id)
{
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->v[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int ids_add(ids_t *s, uint32_t id)
{
    uint32_t i = ids_find(s, id);
    if (i < s->n && s->v[i] == id)
        return 0;
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        uint32_t *v = cq_realloc(s->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
    s->v[i] = id;
    s->n++;
    return 0;
}

static void ids_del(ids_t *s, uint32_t id)
{
    uint32_t i = ids_find(s, id);
    if (i < s->n && s->v[i] == id) {
        memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
        s->n--;
    }
}

/* ---- entities ---- */

static uint32_t ent_pos(const cq_entgroups_t *g, uint32_t id)
{
    uint32_t lo = 0, hi = g->ne;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->e[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const ent_t *ent_get(const cq_entgroups_t *g, uint32_t id)
{
    uint32_t i = ent_pos(g, id);
    return i < g->ne && g->e[i].id == id ? &g->e[i] : NULL;
}

/* The entity's record, created when absent. The pointer lasts until the next ent_make. */
static ent_t *ent_make(cq_entgroups_t *g, uint32_t id)
{
    uint32_t i = ent_pos(g, id);
    if (i < g->ne && g->e[i].id == id)
        return &g->e[i];
    if (g->ne == g->cape) {
        uint32_t cap = g->cape ? g->cape * 2 : 16;
        ent_t *e = cq_realloc(g->e, cap * sizeof(*e));
        if (!e)
            return NULL;
        g->e = e;
        g->cape = cap;
    }
    memmove(&g->e[i + 1], &g->e[i], (g->ne - i) * sizeof(*g->e));
    g->e[i] = (ent_t){id, {0, 0}};
    g->ne++;
    return &g->e[i];
}

static void ent_drop_if_idle(cq_entgroups_t *g, uint32_t id)
{
    uint32_t i = ent_pos(g, id);
    if (i < g->ne && g->e[i].id == id && !g->e[i].grp[0] && !g->e[i].grp[1]) {
        memmove(&g->e[i], &g->e[i + 1], (g->ne - i - 1) * sizeof(*g->e));
        g->ne--;
    }
}

/* ---- groups ---- */

/* A new empty group's index + 1, or 0 on out of memory. */
static uint32_t grp_new(cq_entgroups_t *g)
{
    for (uint32_t i = 0; i < g->ng; i++)
        if (g->g[i].n == 0)
            return i + 1;
    if (g->ng == g->capg) {
        uint32_t cap = g->capg ? g->capg * 2 : 8;
        ids_t *v = cq_realloc(g->g, cap * sizeof(*v));
        if (!v)
            return 0;
        g->g = v;
        g->capg = cap;
    }
    g->g[g->ng] = (ids_t){0};
    return ++g->ng;
}

/* Puts e into group gi (index + 1) of type t, absorbing e's current group of that type. */
static int grp_join(cq_entgroups_t *g, int t, uint32_t gi, uint32_t e)
{
    ent_t *en = ent_make(g, e);
    if (!en)
        return -ENOMEM;
    uint32_t old = en->grp[t];
    if (old == gi)
        return 0;
    if (!old) {
        int r = ids_add(&g->g[gi - 1], e);
        if (r == 0)
            en->grp[t] = gi;
        return r;
    }
    ids_t *from = &g->g[old - 1];
    while (from->n) { /* move the members one by one: a failure leaves both sets consistent */
        uint32_t m = from->v[from->n - 1];
        int r = ids_add(&g->g[gi - 1], m);
        if (r < 0)
            return r;
        from->n--;
        ent_make(g, m)->grp[t] = gi; /* m has a record: no allocation */
    }
    return 0;
}

/* Takes e out of its group of type t; the group is freed when it empties. */
static void grp_leave(cq_entgroups_t *g, int t, uint32_t e)
{
    uint32_t i = ent_pos(g, e);
    if (i >= g->ne || g->e[i].id != e || !g->e[i].grp[t])
        return;
    ids_del(&g->g[g->e[i].grp[t] - 1], e);
    g->e[i].grp[t] = 0;
}

/* ---- public ---- */

cq_entgroups_t *cq_entgroups_new(void)
{
    return cq_calloc(1, sizeof(cq_entgroups_t));
}

cq_entgroups_t *cq_entgroups_free(cq_entgroups_t *g)
{
    if (!g)
        return NULL;
    for (uint32_t i = 0; i < g->ng; i++)
        cq_free(g->g[i].v);
    cq_free(g->g);
    cq_free(g->e);
    cq_free(g);
    return NULL;
}

/* The owner's group of type t (index + 1), created with the owner in it when absent. */
static int owner_group(cq_entgroups_t *g, int t, uint32_t owner, uint32_t *ret)
{
    ent_t *en = ent_make(g, owner);
    if (!en)
        return -ENOMEM;
    if (en->grp[t]) {
        *ret = en->grp[t];
        return 0;
    }
    uint32_t gi = grp_new(g);
    if (!gi)
        return -ENOMEM;
    *ret = gi;
    return grp_join(g, t, gi, owner);
}

/* LOCK pulls in the added entity's handover group (channeld: "LOCK has higher priority"). */
static int lock_handover_group(cq_entgroups_t *g, uint32_t gi, uint32_t e)
{
    const ent_t *en = ent_get(g, e);
    if (!en || !en->grp[CQ_ENTGROUP_HANDOVER])
        return 0;
    const ids_t *hs = &g->g[en->grp[CQ_ENTGROUP_HANDOVER] - 1];
    for (uint32_t k = 0; k < hs->n; k++) {
        int r = grp_join(g, CQ_ENTGROUP_LOCK, gi, hs->v[k]); /* never touches hs */
        if (r < 0)
            return r;
    }
    return 0;
}

int cq_entgroups_add(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                     const uint32_t *ids, size_t n)
{
    if (type != CQ_ENTGROUP_HANDOVER && type != CQ_ENTGROUP_LOCK)
        return CQ_EFIELD;
    uint32_t gi;
    int r = owner_group(g, (int)type, owner, &gi);
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (type == CQ_ENTGROUP_LOCK)
            r = lock_handover_group(g, gi, ids[i]);
        if (r == 0)
            r = grp_join(g, (int)type, gi, ids[i]);
    }
    return r;
}

int cq_entgroups_remove(cq_entgroups_t *g, uint32_t owner, cq_entgroup_type_t type,
                        const uint32_t *ids, size_t n)
{
    (void)owner; /* each id leaves the group it is in, which is the owner's or its own */
    if (type != CQ_ENTGROUP_HANDOVER && type != CQ_ENTGROUP_LOCK)
        return CQ_EFIELD;
    for (size_t i = 0; i < n; i++) {
        grp_leave(g, (int)type, ids[i]);
        ent_drop_if_idle(g, ids[i]);
    }
    return 0;
}

bool cq_entgroups_locked(const cq_entgroups_t *g, uint32_t e)
{
    const ent_t *en = ent_get(g, e);
    return en && en->grp[CQ_ENTGROUP_LOCK] && g->g[en->grp[CQ_ENTGROUP_LOCK] - 1].n > 0;
}

size_t cq_entgroups_handover_set(const cq_entgroups_t *g, uint32_t e, uint32_t *out, size_t cap)
{
    const ent_t *en = ent_get(g, e);
    if (!en || !en->grp[CQ_ENTGROUP_HANDOVER]) {
        if (cq_entgroups_locked(g, e))
            return 0;
        if (cap)
            out[0] = e;
        return 1;
    }
    const ids_t *hs = &g->g[en->grp[CQ_ENTGROUP_HANDOVER] - 1];
    for (uint32_t i = 0; i < hs->n; i++)
        if (cq_entgroups_locked(g, hs->v[i]))
            return 0;
    for (uint32_t i = 0; i < hs->n && i < cap; i++)
        out[i] = hs->v[i];
    return hs->n;
}

void cq_entgroups_forget(cq_entgroups_t *g, uint32_t e)
{
    grp_leave(g, CQ_ENTGROUP_HANDOVER, e);
    grp_leave(g, CQ_ENTGROUP_LOCK, e);
    ent_drop_if_idle(g, e);
}
