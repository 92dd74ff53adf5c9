/* data.c - channel data: typed state, schema-aware merge and per-subscriber fan-out
 * (reference §2.4-2.7).
 *
 * Everything here runs on the channel's worker: updates arrive as its requests, and fan-outs
 * run from the worker's one fan-out timer (cq_core_run_due). A fan-out's recipients are
 * collected during the tick and pushed after it (sendmany.c), because a push may close a slow
 * subscriber, which must not happen inside the scheduler's walk.
 *
 * Each channel with data holds its master state as one refcounted buffer (compacted when the
 * data type is known from the loaded descriptor sets, protobuf's concatenation merge when it is
 * not), its merge options, and a scheduler (src/chandata/cq_sched) that decides which
 * subscriber gets which accumulated window. A fan-out buffer is wrapped into a
 * ChannelDataUpdateMessage record once per distinct buffer and tick; recipients on other
 * workers get one XM_SENDMANY per (worker, record). Channels are ticked at their schedulers'
 * next due time through a per-worker min-heap. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_fieldmask.h"
#include "cq_merge.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

#define TYPE_URL_PREFIX "type.googleapis.com/"

/* ---- due heap (per worker): channels with data and subscribers, by next due time ---------- */

/* One timer per worker rather than per channel: the io layer arms it on the heap's top
 * (cq_core_next_due), however many channels have data. */
static bool heap_less(const cq_chan_t *a, const cq_chan_t *b)
{
    return a->data->due_ms < b->data->due_ms;
}

static void heap_swap(cq_core_t *c, uint32_t i, uint32_t j)
{
    cq_chan_t *t = c->due[i];
    c->due[i] = c->due[j];
    c->due[j] = t;
    c->due[i]->data->heap_idx = i;
    c->due[j]->data->heap_idx = j;
}

static void heap_up(cq_core_t *c, uint32_t i)
{
    while (i > 0 && heap_less(c->due[i], c->due[(i - 1) / 2])) {
        heap_swap(c, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(cq_core_t *c, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->n_due && heap_less(c->due[l], c->due[m]))
            m = l;
        if (r < c->n_due && heap_less(c->due[r], c->due[m]))
            m = r;
        if (m == i)
            return;
        heap_swap(c, i, m);
        i = m;
    }
}

/* The last entry takes the hole and is sifted both ways: it may belong above or below. */
static void heap_remove(cq_core_t *c, cq_chandata_t *d)
{
    uint32_t i = d->heap_idx;
    if (i == UINT32_MAX)
        return;
    c->n_due--;
    if (i != c->n_due) {
        c->due[i] = c->due[c->n_due];
        c->due[i]->data->heap_idx = i;
        heap_down(c, i);
        heap_up(c, i);
    }
    d->heap_idx = UINT32_MAX;
}

/* Re-reads the scheduler's next due time and fixes the channel's place in the heap; called after
 * anything that may change it (a subscription, an update, a tick). A channel without data has
 * nothing to fan out and stays out of the heap. If the heap cannot grow, the channel stays out
 * until a later reschedule finds room. */
static void reschedule(cq_core_t *c, cq_chan_t *ch)
{
    cq_chandata_t *d = ch->data;
    d->due_ms = cq_sched_next_due(d->sched);
    /* when it became due: its due time, or now for one that became due before its time came
     * (due_eff UINT64_MAX: just served); one that was due and still is keeps its start */
    if (d->due_ms > c->now_ms)
        d->due_eff = d->due_ms;
    else if (d->due_eff > c->now_ms)
        d->due_eff = c->now_ms;
    if (d->due_ms == UINT64_MAX || !d->state) {
        heap_remove(c, d);
        return;
    }
    if (d->heap_idx == UINT32_MAX) {
        if (c->n_due == c->cap_due) {
            uint32_t ncap = c->cap_due ? c->cap_due * 2 : 16;
            cq_chan_t **n = cq_realloc(c->due, ncap * sizeof(*n));
            if (!n)
                return;
            c->due = n;
            c->cap_due = ncap;
        }
        d->heap_idx = c->n_due;
        c->due[c->n_due++] = ch;
        heap_up(c, d->heap_idx);
        return;
    }
    heap_down(c, d->heap_idx);
    heap_up(c, d->heap_idx);
}

uint64_t cq_core_next_due(const cq_core_t *c)
{
    uint64_t due = c->n_due ? c->due[0]->data->due_ms : UINT64_MAX;
    return CQ_MIN(due, c->lazy_due);
}

/* ---- scheduler callbacks ---------------------------------------------------------------- */

static cq_buf_t *sbuf_to_buf(cq_sbuf_t *sb)
{
    cq_buf_t *b = cq_buf_from(sb->data, sb->len);
    cq_sbuf_done(sb);
    return b;
}

/* Merges b into a (both borrowed); NULL on error. Unknown types concatenate: protobuf defines
 * a merge as parsing the concatenation, so the result is right without a schema (§2.5); only
 * compaction, masks and the merge options need the type. */
static cq_buf_t *merge2(const cq_chandata_t *d, const cq_buf_t *a, const cq_buf_t *b,
                        const cq_merge_opts_t *opts)
{
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    int r;
    if (d->desc) {
        r = cq_merge(d->desc, a->data, a->len, b->data, b->len, opts, &out);
    } else {
        r = cq_sbuf_append(&out, a->data, a->len);
        if (r == 0)
            r = cq_sbuf_append(&out, b->data, b->len);
    }
    if (r < 0) {
        cq_sbuf_done(&out);
        return NULL;
    }
    return sbuf_to_buf(&out);
}

/* parts[0..n) one after the other: protobuf's merge of them when they are canonical. */
static int concat(cq_sbuf_t *out, cq_buf_t *const *parts, size_t n)
{
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++)
        r = cq_sbuf_append(out, parts[i]->data, parts[i]->len);
    return r;
}

/* The first part is the base and the later ones merge into it with the channel's merge
 * options, as channeld accumulates a window (§2.6 step 4). Without merge options a window is
 * compacted in one pass over the concatenation of its parts, which is their merge because
 * every buffered update is canonical (apply_update): merging pairwise re-encoded the growing
 * result once per part, a tenth of chanqd's CPU in a 1000-client world (bench/RESULTS.md,
 * issue 28). An unknown type is the concatenation itself (§2.5). */
static cq_buf_t *cb_merge(void *ud, cq_buf_t *const *parts, size_t n)
{
    cq_chan_t *ch = ud;
    cq_chandata_t *d = ch->data;
    if (!d->has_mopts) {
        cq_sbuf_t cat, out;
        cq_sbuf_init(&cat);
        int r = concat(&cat, parts, n);
        if (r == 0 && !d->desc)
            return sbuf_to_buf(&cat);
        cq_sbuf_init(&out);
        if (r == 0)
            r = cq_compact(d->desc, (const uint8_t *)cat.data, cat.len, &out);
        cq_sbuf_done(&cat);
        if (r < 0) {
            cq_sbuf_done(&out);
            return NULL;
        }
        return sbuf_to_buf(&out);
    }
    cq_buf_t *acc = cq_buf_ref(parts[0]); /* the first update is taken as it is */
    for (size_t i = 1; i < n && acc; i++) {
        cq_buf_t *m = merge2(d, acc, parts[i], d->has_mopts ? &d->mopts : NULL);
        cq_buf_unref(acc);
        acc = m;
    }
    return acc;
}

static cq_buf_t *cb_full_state(void *ud)
{
    cq_buf_t *st = cq__data_state(ud);
    return st ? cq_buf_ref(st) : cq_buf_new(0);
}

/* Masks filter the subscriber's copy, never the master state: channeld applied the first
 * fan-out's masks to its master data in place, so one masked subscriber destroyed fields for
 * everyone (§2.6, fixed here). An unknown type cannot be filtered, and neither can bytes the
 * filter fails on: the copy then goes unfiltered. */
static cq_buf_t *cb_filter(void *ud, uint32_t masks_id, cq_buf_t *bytes)
{
    cq_chan_t *ch = ud;
    cq_chandata_t *d = ch->data;
    if (!d->desc || masks_id == 0 || masks_id > d->n_masks)
        return cq_buf_ref(bytes); /* an unknown type cannot be filtered */
    const cq_maskset_t *m = &d->masks[masks_id - 1];
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    if (cq_fieldmask_filter(d->desc, (const char *const *)m->paths, m->n, bytes->data, bytes->len,
                            &out) < 0) {
        cq_sbuf_done(&out);
        return cq_buf_ref(bytes);
    }
    return sbuf_to_buf(&out);
}

/* Record for one fan-out buffer: ChannelDataUpdateMessage{data: Any{type_url, value}}, msgType
 * 8 on the channel's id with stub 0, shared by every recipient of the buffer. */
static cq_buf_t *update_record(const cq_chan_t *ch, const cq_buf_t *value)
{
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = ch->data->type_url;
    any.value.data = (uint8_t *)value->data;
    any.value.len = value->len;
    Channeldpb__ChannelDataUpdateMessage m = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
    m.data = &any;
    return cq_wire_record_msg(ch->id, 0, 0, MT_DATA_UPDATE, &m.base);
}

static void cb_emit(void *ud, uint32_t conn_id, cq_buf_t *msg)
{
    cq_chan_t *ch = ud;
    cq_core_t *c = ch->data->core;
    /* every subscriber the scheduler knows may read (cq__data_sub) */
    /* The scheduler hands one buffer to every subscriber that shares a window, masks and
     * skip-self case. The record is encoded again only when the buffer differs from the last
     * one, whose reference is held so that its address cannot be reused by a new buffer. */
    if (c->emit_src != msg) { /* encode once per distinct buffer (held: no address reuse) */
        cq_buf_unref(c->emit_rec);
        cq_buf_unref(c->emit_src);
        c->emit_rec = update_record(ch, msg);
        c->emit_src = cq_buf_ref(msg);
    }
    if (c->emit_rec)
        cq__sendmany_add(c, ch->id, conn_id, c->emit_rec);
}

static const cq_sched_ops_t sched_ops = {cb_merge, cb_full_state, cb_filter, cb_emit};

/* ---- lifecycle -------------------------------------------------------------------------- */

/* Every channel gets a scheduler when it is created, before its data exists: a subscription
 * made before the first update starts its timing at its own subscription time. */
int cq__data_attach(cq_core_t *c, cq_chan_t *ch)
{
    cq_chandata_t *d = cq_calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->core = c;
    d->heap_idx = UINT32_MAX;
    d->due_ms = d->due_eff = UINT64_MAX;
    d->sched = cq_sched_new(&sched_ops, ch, ch->settings->tick_interval_ms);
    if (!d->sched) {
        cq_free(d);
        return -ENOMEM;
    }
    cq_sched_set_coarsen(d->sched, &c->co);
    /* A client's cells and entities (aligned, cq__data_sub) leave on the grid of the nearest
     * damping interval, so its 50 ms cells ride on the writes of its 20 ms one. */
    if (ch->type == CHANNELDPB__CHANNEL_TYPE__SPATIAL ||
        ch->type == CHANNELDPB__CHANNEL_TYPE__ENTITY)
        cq_sched_set_quantum(d->sched, CQ_FANOUT_GRID_MS);
    ch->data = d;
    return 0;
}

void cq__data_detach(cq_core_t *c, cq_chan_t *ch)
{
    cq_chandata_t *d = ch->data;
    if (!d)
        return;
    heap_remove(c, d);
    cq_sched_free(d->sched);
    cq_buf_unref(d->state);
    cq_sbuf_done(&d->pend);
    for (uint32_t i = 0; i < d->n_masks; i++) {
        for (uint32_t k = 0; k < d->masks[i].n; k++)
            cq_free(d->masks[i].paths[k]);
        cq_free(d->masks[i].paths);
    }
    cq_free(d->masks);
    cq_free(d->type_url);
    cq_free(d);
    ch->data = NULL;
}

/* Sets the channel's type and initial state from an Any (type URL and value bytes). A known
 * type is compacted at once (its canonical encoding, as a merge leaves it); an unknown one is
 * kept as it came, to be compacted if a reload makes it known. Nothing changes on failure. */
static int data_init(cq_core_t *c, cq_chan_t *ch, const char *type_url, const uint8_t *v, size_t n)
{
    cq_chandata_t *d = ch->data;
    const cq_schema_t *schema = c->schema;
    char *url = cq_strdup(type_url);
    if (!url)
        return -ENOMEM;
    const cq_msgdesc_t *desc = schema ? cq_schema_find_type_url(schema, type_url) : NULL;
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    int r = desc ? cq_compact(desc, v, n, &out) : cq_sbuf_append(&out, v, n);
    if (r < 0) {
        cq_sbuf_done(&out);
        cq_free(url);
        return r;
    }
    cq_buf_t *state = sbuf_to_buf(&out);
    if (!state) {
        cq_free(url);
        return -ENOMEM;
    }
    cq_free(d->type_url);
    cq_buf_unref(d->state);
    cq_sbuf_done(&d->pend); /* the new state replaces them too */
    d->type_url = url;
    d->desc = desc;
    d->state = state;
    reschedule(c, ch);
    return 0;
}

/* ChannelDataMergeOptions as the creator gave them, applied to every later merge (top-level
 * fields, as channeld); without them, merges follow protobuf's plain rules. */
static void set_merge_opts(cq_chandata_t *d, const Channeldpb__ChannelDataMergeOptions *m)
{
    d->has_mopts = m != NULL;
    if (m)
        d->mopts = (cq_merge_opts_t){m->shouldreplacelist, m->listsizelimit, m->truncatetop,
                                     m->shouldcheckremovablemapfield};
}

void cq__data_set_merge_opts(cq_chan_t *ch, const Channeldpb__ChannelDataMergeOptions *mopts)
{
    if (!mopts)
        return;
    (void)cq__data_state(ch); /* what is pending was accepted under the old options */
    set_merge_opts(ch->data, mopts);
}

/* The type comes from CREATE's Any, else from the channel type's DataMsgFullName (an empty
 * state of that type), else from the first update (§2.5). Unlike channeld, no type needs to
 * be compiled in: an unknown one is kept as bytes. */
int cq__data_create(cq_core_t *c, cq_chan_t *ch, const Google__Protobuf__Any *data,
                    const Channeldpb__ChannelDataMergeOptions *mopts)
{
    set_merge_opts(ch->data, mopts);
    if (data && data->type_url && *data->type_url)
        return data_init(c, ch, data->type_url, data->value.data, data->value.len);
    const char *name = ch->settings->data_msg_full_name;
    if (!name || !*name)
        return 0; /* the first update will define the data */
    char url[512];
    snprintf(url, sizeof(url), TYPE_URL_PREFIX "%s", name);
    return data_init(c, ch, url, NULL, 0);
}

/* ---- subscriptions ---------------------------------------------------------------------- */

static bool masks_equal(const cq_maskset_t *m, char *const *paths, uint32_t n)
{
    if (m->n != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(m->paths[i], paths[i]) != 0)
            return false;
    return true;
}

/* Subscribers with the same masks (the same paths in the same order) share an id, so they share
 * filtered fan-outs. Ids are never reused while the channel lives. On OOM: 0, no masks. */
static uint32_t masks_id(cq_chandata_t *d, char *const *paths, uint32_t n)
{
    if (!n)
        return 0;
    for (uint32_t i = 0; i < d->n_masks; i++)
        if (masks_equal(&d->masks[i], paths, n))
            return i + 1;
    cq_maskset_t *nm = cq_realloc(d->masks, (d->n_masks + 1) * sizeof(*nm));
    if (!nm)
        return 0;
    d->masks = nm;
    cq_maskset_t *m = &d->masks[d->n_masks];
    m->paths = cq_calloc(n, sizeof(char *));
    m->n = 0;
    for (uint32_t i = 0; m->paths && i < n; i++)
        if ((m->paths[i] = cq_strdup(paths[i])))
            m->n++;
    if (!m->paths || m->n != n)
        return 0;
    return ++d->n_masks;
}

/* On a new subscription and on a re-subscription: the scheduler keeps an existing subscriber's
 * timing and takes only the new options. */
void cq__data_sub(cq_core_t *c, cq_chan_t *ch, const cq_sub_t *s)
{
    cq_chandata_t *d = ch->data;
    if (!d)
        return;
    /* Without data access a subscriber is not scheduled at all, so a fan-out never has to look
     * it up; regaining access schedules it anew, and its first fan-out is the full state it
     * missed (unless skipFirst). */
    if (s->opts.data_access == CHANNELDPB__CHANNEL_DATA_ACCESS__NO_ACCESS) {
        cq__data_unsub(c, ch, s->conn_id);
        return;
    }
    cq_sched_subopts_t o = {
        .set = CQ_SCHED_SET_INTERVAL | CQ_SCHED_SET_DELAY | CQ_SCHED_SET_SKIP_SELF |
               CQ_SCHED_SET_SKIP_FIRST | CQ_SCHED_SET_MASKS | CQ_SCHED_SET_ALIGN,
        .interval_ms = s->opts.interval_ms,
        .delay_ms = s->opts.delay_ms,
        .skip_self = s->opts.skip_self,
        .skip_first = s->opts.skip_first,
        .masks_id = masks_id(d, s->opts.masks, s->opts.n_masks),
        /* A client watches many cells (and their entities): on the interval grid, its cells'
         * fan-outs come due together and leave in one write (cq_sched.h). */
        .align = ch->type == CHANNELDPB__CHANNEL_TYPE__SPATIAL ||
                 ch->type == CHANNELDPB__CHANNEL_TYPE__ENTITY,
    };
    if (cq_sched_sub(d->sched, s->conn_id, &o, c->now_ms) == 0)
        reschedule(c, ch);
}

void cq__data_unsub(cq_core_t *c, cq_chan_t *ch, uint32_t conn_id)
{
    if (!ch->data)
        return;
    cq_sched_unsub(ch->data->sched, conn_id);
    reschedule(c, ch);
}

/* ---- CHANNEL_DATA_UPDATE ---------------------------------------------------------------- */

/* Who may write: the owner, a WRITE_ACCESS subscriber, or a server standing in for the owner
 * (channeld's "quick fix", which also makes the owner the sender for skip-self). */
static uint32_t writer(const cq_chan_t *ch, const cq_req_t *r)
{
    if (r->conn_id == ch->owner)
        return r->conn_id;
    const cq_sub_t *s = cq_map_get(&ch->subs, r->conn_id);
    if (s && s->opts.data_access == CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS)
        return r->conn_id;
    if (r->conn_type == CQ_CONN_SERVER && ch->owner)
        return ch->owner;
    return 0;
}

/* ---- lazy state ----
 *
 * A spatial cell is written ninety times a second in a 2000-player world and read far less:
 * by a new subscriber's first fan-out, a resync, a handover, a recovery. Merging every update
 * into the whole cell re-encoded the cell each time. Its updates are kept one after the other
 * instead (they are canonical, so their concatenation after the state is the merged state, as
 * for a window: cb_merge) and merged once when the state is read, or when what is pending
 * outgrows the state (so the work per update stays bounded). Channels with merge options, and
 * entities, whose position the handover check reads after every update, merge at once. */

static bool lazy(const cq_chan_t *ch)
{
    const cq_chandata_t *d = ch->data;
    return ch->type == CHANNELDPB__CHANNEL_TYPE__SPATIAL && d->desc && !d->has_mopts;
}

cq_buf_t *cq__data_state(cq_chan_t *ch)
{
    cq_chandata_t *d = ch->data;
    if (!d->pend.len)
        return d->state;
    cq_sbuf_t cat, out;
    cq_sbuf_init(&cat);
    cq_sbuf_init(&out);
    int r = cq_sbuf_append(&cat, d->state->data, d->state->len);
    if (r == 0)
        r = cq_sbuf_append(&cat, d->pend.data, d->pend.len);
    if (r == 0)
        r = cq_compact(d->desc, (const uint8_t *)cat.data, cat.len, &out);
    cq_sbuf_done(&cat);
    cq_buf_t *next = r == 0 ? sbuf_to_buf(&out) : NULL;
    if (r < 0)
        cq_sbuf_done(&out);
    if (!next) /* out of memory: the last merged state, pending kept for the next read */
        return d->state;
    cq_buf_unref(d->state);
    d->state = next;
    d->pend.len = 0;
    return d->state;
}

/* Appends one canonical update to what is pending; merges when it outgrows the state. */
static int pend_add(cq_chan_t *ch, const cq_buf_t *upd)
{
    cq_chandata_t *d = ch->data;
    int r = cq_sbuf_append(&d->pend, upd->data, upd->len);
    if (r < 0)
        return r;
    if (d->pend.len > d->state->len + 4096)
        (void)cq__data_state(ch);
    return 0;
}

/* The update as the scheduler keeps it: a known type in its canonical encoding, so that the
 * concatenation of a window's updates is their merge (cb_merge). A hand-made encoding that
 * carries a proto3 scalar's zero explicitly would otherwise overwrite in the concatenation
 * what the merge keeps (cq_merge.h); the canonical one carries no such zero. Sets *ret (owned); 0,
 * CQ_EDECODE (bytes the merge would refuse too) or -ENOMEM. */
static int canonical(const cq_chandata_t *d, const uint8_t *v, size_t n, cq_buf_t **ret)
{
    if (!d->desc) {
        *ret = cq_buf_from(v, n);
        return *ret ? 0 : -ENOMEM;
    }
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    int r = cq_compact(d->desc, v, n, &out);
    if (r < 0) {
        cq_sbuf_done(&out);
        return r;
    }
    *ret = sbuf_to_buf(&out);
    return *ret ? 0 : -ENOMEM;
}

/* Merges a into the master state and hands the update itself (not the merged state) to the
 * scheduler, whose windows accumulate updates. The merge writes a new buffer, which replaces
 * the state; a first fan-out takes a reference to it, not a copy. A refused update leaves the
 * state as it was. */
static int apply_update(cq_core_t *c, cq_chan_t *ch, const Google__Protobuf__Any *a,
                        uint32_t sender)
{
    cq_chandata_t *d = ch->data;
    if (!d->state) { /* the first update defines the data, and is an update too */
        int r = data_init(c, ch, a->type_url, a->value.data, a->value.len);
        /* the state is the update, compacted: canonical, as every buffered update is */
        return r < 0 ? r : cq_sched_update(d->sched, d->state, sender, c->now_ms);
    }
    if (strcmp(d->type_url, a->type_url) != 0) /* the Any must be the channel's type */
        return CQ_EBADTARGET;
    size_t max = c->sh->o.max_channel_data;
    if (!d->desc && max && d->state->len + a->value.len > max)
        return CQ_ELIMIT; /* an unknown type only grows: bounded */
    cq_buf_t *upd;
    int rc = canonical(d, a->value.data, a->value.len, &upd);
    if (rc < 0)
        return rc;
    if (lazy(ch) && (!max || d->state->len + d->pend.len + upd->len <= max)) {
        rc = pend_add(ch, upd); /* under the limit even if nothing merges away */
        if (rc == 0)
            rc = cq_sched_update(d->sched, upd, sender, c->now_ms);
        cq_buf_unref(upd);
        return rc;
    }
    (void)cq__data_state(ch); /* the exact length decides: merge what is pending first */
    cq_buf_t *next = merge2(d, d->state, upd, d->has_mopts ? &d->mopts : NULL);
    if (!next || (d->desc && max && next->len > max)) {
        int r = next ? CQ_ELIMIT : CQ_EDECODE;
        cq_buf_unref(next);
        cq_buf_unref(upd);
        return r;
    }
    cq_buf_unref(d->state);
    d->state = next;
    int r = cq_sched_update(d->sched, upd, sender, c->now_ms);
    cq_buf_unref(upd);
    return r;
}

/* CHANNEL_DATA_UPDATE (8). A refused update is logged and dropped without a reply: channeld
 * has none. An entity's accepted update may move it to another cell, so the handover check
 * reads the merged state right after it. */
void cq__handle_data_update(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    Channeldpb__ChannelDataUpdateMessage *m = cq__req_body(c, r);
    if (!m || !m->data || !m->data->type_url || !*m->data->type_url) {
        CQ_MSG_LOG(c, "data", "conn %u: CHANNEL_DATA_UPDATE on channel %u without data", r->conn_id,
                   ch->id);
        return;
    }
    uint32_t sender = writer(ch, r);
    if (!sender) {
        CQ_MSG_LOG(c, "data", "conn %u: no write access to the data of channel %u", r->conn_id,
                   ch->id);
        return;
    }
    if (ch->id == 0 && !ch->owner) {
        CQ_MSG_LOG(c, "data", "conn %u: GLOBAL has no data until it is possessed", r->conn_id);
        return;
    }
    int rc = apply_update(c, ch, m->data, sender);
    if (rc < 0)
        CQ_MSG_LOG(c, "data", "conn %u: update of channel %u (%s) refused: %s", r->conn_id, ch->id,
                   m->data->type_url, cq_strerror(rc));
    else if (ch->type == CHANNELDPB__CHANNEL_TYPE__ENTITY)
        cq__handover_check(c, ch, r);
    reschedule(c, ch);
}

/* ---- ticking ---------------------------------------------------------------------------- */

/* One call serves every channel due at or before its `now`, however many: what it queues for a
 * connection leaves in one write at the end of the loop iteration. A call bounded by a count of
 * subscriptions (16384 before issue 28) spread a late worker's grid point over several
 * iterations, and every client got one write per iteration instead of one per grid point: at
 * 1000 clients 160 writes a second each, not 50, which is what kept the worker late
 * (bench/RESULTS.md, issue 28). A call costs the subscriptions due, each served once (missed
 * windows are merged under overload, cq_sched.h), so inbound control waits at most that long. */

/* ---- graceful overload (cq_coarsen.h, doc/spatial.md "Overload") ---------------------- */

#define COARSEN_LOG_MS 60000 /* one "coarsening" line a minute per worker at most */

/* Logs the level's rise from 0, the moment this worker started to fall behind, once a minute
 * at most; what happens after is in the metrics. */
static void coarsen_log(cq_core_t *c, uint64_t now_ms)
{
    if (c->coarsen_log_ms && now_ms < c->coarsen_log_ms + COARSEN_LOG_MS) {
        c->coarsen_quiet++;
        return;
    }
    CQ_WARN("data",
            "worker %d: channel-data fan-out %u ms late: coarsening (far interest's windows "
            "stretched, missed windows merged; chanq_data_coarsen_level)%s",
            c->index, c->co.last_late, c->coarsen_quiet ? " again" : "");
    c->coarsen_log_ms = now_ms;
    c->coarsen_quiet = 0;
}

static void counter_set(cq_core_t *c, int m, uint64_t v)
{
    atomic_store_explicit(&c->counters.c[m][0], v, memory_order_relaxed);
}

/* One lateness sample per call: how late the earliest due channel is served. Past due by more
 * than the policy's threshold, the level rises and every scheduler of this worker stretches
 * the windows it starts from then on. Late is counted from when the channel became due on this
 * worker (due_eff), not from its due time: a subscription whose window already closed when it
 * was made or changed (a new interval from an interest change, on a window started long ago at
 * a stretched length) is due at once, which is no lag; counted from its due time it read as
 * one sample 140-300 ms late at every interest change of a 2000-client world, rose the level to
 * 4 and kept it there (bench/RESULTS.md, issue 28). */
static void coarsen_observe(cq_core_t *c, uint64_t now_ms)
{
    uint64_t due = c->n_due ? c->due[0]->data->due_eff : UINT64_MAX;
    uint64_t late = due < now_ms ? now_ms - due : 0;
    uint32_t before = c->co.level;
    if (cq_coarsen_observe(&c->co, now_ms, (uint32_t)CQ_MIN(late, UINT32_MAX)) > 0 && !before)
        coarsen_log(c, now_ms);
}

/* After the ticks: /metrics shows what they stretched and merged together with the level they
 * ran at, even when the worker has nothing more due (published before them, it would wait for
 * the next call). */
static void coarsen_publish(cq_core_t *c)
{
    counter_set(c, M_DATA_STRETCHED, c->co.st.stretched);
    counter_set(c, M_DATA_MERGED, c->co.st.merged);
    counter_set(c, M_COARSEN_RISES, c->co.st.rises);
    counter_set(c, M_COARSEN_FALLS, c->co.st.falls);
    atomic_store_explicit(&c->counters.coarsen_level, c->co.level, memory_order_relaxed);
}

void cq_core_run_due(cq_core_t *c, uint64_t now_ms)
{
    c->now_ms = now_ms;
    coarsen_observe(c, now_ms);
    while (c->n_due && c->due[0]->data->due_ms <= now_ms) {
        cq_chan_t *ch = c->due[0];
        cq_sched_tick(ch->data->sched, now_ms);
        /* The encoded record carries this channel's id: it is not reused for the next one. */
        cq_buf_unref(c->emit_rec);
        cq_buf_unref(c->emit_src);
        c->emit_rec = NULL;
        c->emit_src = NULL;
        uint64_t before = ch->data->due_ms;
        ch->data->due_eff = UINT64_MAX; /* served: due again from its next due time */
        reschedule(c, ch);
        if (ch->data->due_ms <= before && ch->data->due_ms <= now_ms)
            break; /* nothing advanced (out of memory): retry at the next call */
    }
    cq__sendmany_flush(c);
    if (c->lazy_due <= now_ms)
        cq__lazy_release(c);
    coarsen_publish(c);
}

/* The full state as an Any, for RECOVERY_CHANNEL_DATA; returns false when there is none. */
bool cq__data_any(cq_chan_t *ch, Google__Protobuf__Any *ret)
{
    cq_buf_t *st = ch->data ? cq__data_state(ch) : NULL;
    if (!st)
        return false;
    google__protobuf__any__init(ret);
    ret->type_url = ch->data->type_url;
    ret->value.data = st->data;
    ret->value.len = st->len;
    return true;
}

/* A new schema: channels of a type that was unknown are resolved and compacted. A channel whose
 * type is known keeps the descriptor it has: every schema stays alive until exit (cq_core.h),
 * so a reload never pulls a type out from under a channel. */
void cq__data_schema(cq_core_t *c, const cq_schema_t *schema)
{
    c->schema = schema;
    uint32_t it = 0;
    void *v;
    while (cq_map_next(&c->chans, &it, NULL, &v)) {
        cq_chandata_t *d = ((cq_chan_t *)v)->data;
        if (!d || d->desc || !d->state || !schema)
            continue;
        const cq_msgdesc_t *desc = cq_schema_find_type_url(schema, d->type_url);
        cq_sbuf_t out;
        cq_sbuf_init(&out);
        if (!desc || cq_compact(desc, d->state->data, d->state->len, &out) < 0) {
            cq_sbuf_done(&out);
            continue;
        }
        cq_buf_t *state = sbuf_to_buf(&out);
        if (!state)
            continue;
        CQ_INFO("data", "channel %u: type %s now known; state compacted from %u to %u bytes",
                ((cq_chan_t *)v)->id, d->type_url, d->state->len, state->len);
        cq_buf_unref(d->state);
        d->state = state;
        d->desc = desc;
    }
}
