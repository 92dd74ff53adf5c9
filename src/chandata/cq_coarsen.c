/* cq_coarsen.c - the overload policy; the contract and the table are in cq_coarsen.h. */
#include "cq_coarsen.h"

#include <stddef.h>

/* log2 of the stretch by level and band (0 far, 1 mid, 2 near): far interest gives way first,
 * because a far cell's data matters least to what a player sees next. */
static const uint8_t shift_tab[CQ_COARSEN_MAX + 1][3] = {
    {0, 0, 0}, {1, 0, 0}, {2, 1, 0}, {2, 2, 1}, {3, 2, 1},
};

static uint32_t band_of(uint32_t interval_ms)
{
    return interval_ms >= 100 ? 0 : interval_ms >= 50 ? 1 : 2;
}

static uint32_t or_default(uint32_t v, uint32_t d)
{
    return v ? v : d;
}

void cq_coarsen_init(cq_coarsen_t *co, const cq_coarsen_cfg_t *cfg)
{
    cq_coarsen_cfg_t c = cfg ? *cfg : (cq_coarsen_cfg_t){0};
    *co = (cq_coarsen_t){0};
    co->cfg.up_ms = or_default(c.up_ms, CQ_COARSEN_UP_MS);
    co->cfg.down_ms = or_default(c.down_ms, CQ_COARSEN_DOWN_MS);
    co->cfg.step_ms = or_default(c.step_ms, CQ_COARSEN_STEP_MS);
    co->cfg.sustain_ms = or_default(c.sustain_ms, CQ_COARSEN_SUSTAIN_MS);
    co->cfg.burst_ms = or_default(c.burst_ms, CQ_COARSEN_BURST_MS);
    co->cfg.hold_ms = or_default(c.hold_ms, CQ_COARSEN_HOLD_MS);
}

static int change(cq_coarsen_t *co, uint64_t now_ms, int dir)
{
    co->level = (uint32_t)((int)co->level + dir);
    co->changed_ms = now_ms;
    co->calm_since = 0;
    if (dir > 0)
        co->st.rises++;
    else
        co->st.falls++;
    return dir;
}

int cq_coarsen_observe(cq_coarsen_t *co, uint64_t now_ms, uint32_t late_ms)
{
    co->last_late = late_ms;
    /* Runs start at now + 1: a run that starts at time 0 (a manual clock) is still a run. */
    if (late_ms >= co->cfg.up_ms) {
        co->calm_since = 0;
        if (!co->late_since)
            co->late_since = now_ms + 1;
        /* A rise needs step_ms since the last change: the level just set has to get a chance
         * to drain the backlog before the next one is judged necessary. */
        bool overloaded =
            late_ms >= co->cfg.burst_ms || now_ms + 1 >= co->late_since + co->cfg.sustain_ms;
        if (co->level < CQ_COARSEN_MAX && overloaded &&
            (co->changed_ms == 0 || now_ms >= co->changed_ms + co->cfg.step_ms))
            return change(co, now_ms, +1);
        return 0;
    }
    co->late_since = 0;
    if (late_ms >= co->cfg.down_ms || co->level == 0) {
        co->calm_since = 0;
        return 0;
    }
    if (!co->calm_since)
        co->calm_since = now_ms + 1;
    if (now_ms + 1 >= co->calm_since + co->cfg.hold_ms)
        return change(co, now_ms, -1);
    return 0;
}

uint32_t cq_coarsen_factor(uint32_t level, uint32_t interval_ms)
{
    if (level > CQ_COARSEN_MAX)
        level = CQ_COARSEN_MAX;
    return 1u << shift_tab[level][band_of(interval_ms)];
}

uint32_t cq_coarsen_span(const cq_coarsen_t *co, uint32_t interval_ms)
{
    if (!co || co->level == 0)
        return interval_ms;
    uint64_t span = (uint64_t)interval_ms * cq_coarsen_factor(co->level, interval_ms);
    uint32_t cap = interval_ms > CQ_COARSEN_SPAN_CAP_MS ? interval_ms : CQ_COARSEN_SPAN_CAP_MS;
    return span > cap ? cap : (uint32_t)span;
}
