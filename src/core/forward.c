/* forward.c - user-space messages (>= 100) and the encode-once fan-out.
 *
 * The channel's worker is the only place a broadcast is ordered: it posts the FANOUTs on the
 * same FIFOs as the LSUB_ADD/LSUB_DEL of the channel's subscriptions (sub.c), so every worker's
 * local list agrees with the broadcasts it receives (doc/threads.md).
 *
 * A broadcast is encoded once into a refcounted record. The channel's worker pushes it to its
 * own subscribers and sends one reference per other worker that has subscribers (XM_FANOUT);
 * each worker filters its local subscriber list by the broadcast flags. Snappy peers get a
 * compressed packet built once per worker per message. */
#include "core.h"
#include "msgtab.h"

#include "cq_alloc.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

/* ---- fan-out ---------------------------------------------------------------------------- */

/* The broadcast flags of §1.8 (4 not the sender, 8 not the owner, 16 no clients, 32 no
 * servers); a closing connection never gets anything. */
/* A bridge resume holds back the live bridge events of one channel, kept aside as it is rare:
 * a field in every connection would cost 8 bytes of each. */
static bool held(const cq_core_t *c, const cq_conn_t *conn, uint32_t chan_id)
{
    return (uintptr_t)cq_map_get(&c->holds, conn->id) == (uintptr_t)chan_id + 1;
}

static bool skip(const cq_core_t *c, const cq_conn_t *conn, uint32_t chan_id, uint32_t sender,
                 uint32_t owner, uint32_t flags)
{
    if (conn->state == CONN_CLOSING)
        return true;
    if ((flags & BC_BUT_SENDER) && conn->id == sender)
        return true;
    if ((flags & BC_BUT_OWNER) && conn->id == owner)
        return true;
    if ((flags & BC_BUT_CLIENT) && conn->type == CQ_CONN_CLIENT)
        return true;
    if ((flags & BC_BUT_SERVER) && conn->type == CQ_CONN_SERVER)
        return true;
    if ((flags & BC_BRIDGE) && conn->bridge_hold && held(c, conn, chan_id))
        return true; /* a resume's chunks carry it (resume.c) */
    return false;
}

/* ---- the open segment ----
 *
 * Why: a burst of small broadcasts on one channel (the common game message, and a publisher
 * that sends faster than one message per loop iteration) used to cost every recipient one
 * queue entry, one reference and one release per message. Instead the worker keeps one open
 * segment: consecutive small records of one channel with the same sender and flags are
 * appended to the channel's fan-out buffer, and the recipients are computed once, when the
 * segment opens. The segment is delivered (each recipient's queue takes the bytes as one slice,
 * or extends the slice it has) when anything else is about to be queued on this worker, when
 * the channel's subscribers change, when a connection closes, and at the flush. So every
 * connection still receives everything in the order it was fanned out, and a burst of K
 * messages costs each recipient one queue operation instead of K.
 *
 * The fan-out buffers of an iteration are released at its flush; queues that took slices hold
 * their own references. */

#define FB_FIRST      2048u         /* first buffer of a channel in an iteration */
#define FB_NEXT       (16u * 1024u) /* the next ones (a burst) */
#define FB_REC_MAX    512u          /* larger records are shared by reference */
#define FB_RECIPIENTS 2             /* fewer plain recipients: the record is queued by itself */

void cq__fanbuf_release(cq_lsubs_t *l)
{
    if (!l->fb)
        return;
    cq_list_remove(&l->fb_node);
    cq_buf_unref(l->fb);
    l->fb = NULL;
    l->fb_prev = NULL;
}

void cq__fanbuf_release_all(cq_core_t *c)
{
    cq__seg_close(c);
    while (!cq_list_empty(&c->fb_open))
        cq__fanbuf_release(cq_container_of(c->fb_open.next, cq_lsubs_t, fb_node));
}

/* Appends rec to l's buffer (a new one when it is full); returns the offset, or -1 on OOM. A
 * full buffer is replaced, never grown: queues hold slices of it, so its bytes below len must
 * not move (cq_sendq_push_slice). fb_prev lets a queue whose slice ends at the old buffer's end
 * continue its run in the new one. The list drops its reference to the old buffer; the queues
 * that took slices of it hold their own. */
static int64_t fanbuf_append(cq_core_t *c, cq_lsubs_t *l, const cq_buf_t *rec)
{
    cq_buf_t *fb = l->fb;
    if (!fb || fb->cap - fb->len < rec->len) {
        cq_buf_t *n = cq_buf_new(CQ_MAX(fb ? FB_NEXT : FB_FIRST, rec->len));
        if (!n)
            return -1;
        if (fb) {
            l->fb_prev = fb;
            cq_buf_unref(fb);
        } else {
            cq_list_insert_tail(&c->fb_open, &l->fb_node);
        }
        l->fb = fb = n;
    }
    uint32_t off = fb->len;
    memcpy(fb->data + off, rec->data, rec->len);
    fb->len += rec->len;
    return off;
}

/* A walk over a local list, backwards, that re-reads the list after a removal: a push may
 * close a slow subscriber, which swap-removes it (and frees the list with its last member). */
typedef struct walk {
    cq_lsubs_t *l;
    uint32_t chan_id, i, gen;
} walk_t;

static walk_t walk_start(const cq_core_t *c, cq_lsubs_t *l)
{
    return (walk_t){l, l->chan_id, l->n, c->lsub_gen};
}

static cq_conn_t *walk_next(cq_core_t *c, walk_t *w)
{
    if (!w->i--)
        return NULL;
    if (w->gen != c->lsub_gen) {
        w->gen = c->lsub_gen;
        w->l = cq_map_get(&c->lsubs, w->chan_id);
        if (!w->l || w->i >= w->l->n)
            return NULL;
    }
    return w->l->conns[w->i];
}

/* Whether rec can join the open segment of l: the same channel, sender, owner and flags, so
 * that the recipients counted when it opened are still the right ones; a small record; room in
 * the buffer; and the segment still within one slice, which must fit one packet. */
static bool seg_takes(const cq_core_t *c, const cq_lsubs_t *l, const cq_buf_t *rec, uint32_t sender,
                      uint32_t owner, uint32_t flags)
{
    const cq_seg_t *g = &c->seg;
    return g->l == l && g->sender == sender && g->owner == owner && g->flags == flags &&
           rec->len <= FB_REC_MAX && l->fb->cap - l->fb->len >= rec->len &&
           g->len + rec->len <= CQ_SENDQ_SLICE_MAX;
}

/* Opens a segment on l with rec; false (nothing changed) on OOM. plain is the number of plain
 * recipients counted at the open: the references cq__seg_deliver takes for them. */
static bool seg_open(cq_core_t *c, cq_lsubs_t *l, const cq_buf_t *rec, uint32_t sender,
                     uint32_t owner, uint32_t flags, uint32_t plain)
{
    int64_t off = fanbuf_append(c, l, rec);
    if (off < 0)
        return false;
    c->seg = (cq_seg_t){l, (uint32_t)off, rec->len, 1, plain, sender, owner, flags};
    return true;
}

/* Delivers the segment's bytes to one recipient: a slice, or the run as a record. A Snappy peer,
 * or a queue that takes no more runs (CQ_SENDQ_APART), gets the segment's records as one run
 * record, copied once per segment and shared by every such recipient. Returns true when the
 * recipient's queue used one of the references taken for the plain recipients. */
static bool seg_push(cq_core_t *c, cq_conn_t *conn, const cq_seg_t *g, cq_buf_t *fb,
                     const cq_buf_t *prev, cq_buf_t **run)
{
    if (conn->out_ct != CQ_CT_SNAPPY) {
        int r = cq__conn_push_slice(c, conn, fb, g->off, g->len, g->n, prev);
        if (r != CQ_SENDQ_APART)
            return r == CQ_SENDQ_ADDED;
    }
    if (!*run && !(*run = cq_buf_from(fb->data + g->off, g->len))) {
        cq_core_conn_close(c, conn, -ENOMEM, "cannot queue output");
        return false;
    }
    cq__conn_push_run(c, conn, *run, g->n);
    return false;
}

/* The recipients' references on the buffer are taken with one atomic add, each queue that
 * starts a slice keeps one, and the rest are given back with one atomic sub. */
void cq__seg_deliver(cq_core_t *c)
{
    cq_seg_t g = c->seg;
    c->seg.l = NULL; /* first: the pushes below find no open segment */
    cq_lsubs_t *l = g.l;
    cq_buf_t *fb = l->fb, *run = NULL;
    const cq_buf_t *prev = l->fb_prev;
    uint32_t unused = g.plain;
    cq_buf_ref_n(fb, unused);
    walk_t wk = walk_start(c, l);
    cq_conn_t *conn;
    while ((conn = walk_next(c, &wk))) {
        if (!unused || skip(c, conn, l->chan_id, g.sender, g.owner, g.flags))
            continue;
        if (seg_push(c, conn, &g, fb, prev, &run))
            unused--;
    }
    cq_buf_unref_n(fb, unused); /* recipients closed meanwhile, slices that grew */
    cq_buf_unref(run);
}

/* ---- fan-out ---------------------------------------------------------------------------- */

/* A record for one recipient, a large one, or one with Snappy recipients: queued by itself.
 * Plain recipients' references are taken with one atomic add; Snappy recipients share one
 * compressed packet built for this worker. */
static void fanout_now(cq_core_t *c, cq_lsubs_t *l, cq_buf_t *rec, uint32_t sender, uint32_t owner,
                       uint32_t flags, uint32_t plain, uint32_t snappy)
{
    cq_buf_ref_n(rec, plain);
    cq_buf_t *packet = NULL;
    walk_t wk = walk_start(c, l);
    cq_conn_t *conn;
    while ((conn = walk_next(c, &wk))) {
        if (skip(c, conn, l->chan_id, sender, owner, flags))
            continue;
        if (conn->out_ct != CQ_CT_SNAPPY) {
            if (plain) {
                plain--;
                cq__conn_push_record_ref(c, conn, rec);
            }
            continue;
        }
        if (!packet && snappy)
            packet = cq_sendq_compress_record(rec, CQ_FRAMING_FIXED);
        /* The shared packet is framed with the fixed header; a legacy-tag peer gets the record,
         * compressed for it alone. */
        if (packet && conn->framing == CQ_FRAMING_FIXED)
            cq__conn_push_packet(c, conn, packet);
        else
            cq__conn_push(c, conn, rec);
    }
    cq_buf_unref_n(rec, plain); /* recipients closed during the walk */
    cq_buf_unref(packet);
}

/* On every worker with subscribers of the channel: directly on the channel's worker, from
 * XM_FANOUT on the others. A record that extends the open segment costs one memcpy and no
 * walk. Otherwise the open segment is delivered first (it came first), the recipients are
 * counted, and the record opens a new segment (small, two plain recipients or more, no Snappy
 * one) or is queued at once. chanq_fanouts_total counts the records queued to recipients. */
void cq__local_fanout(cq_core_t *c, uint32_t chan_id, cq_buf_t *rec, uint32_t sender,
                      uint32_t owner, uint32_t flags)
{
    cq_lsubs_t *l = cq_map_get(&c->lsubs, chan_id);
    if (!l)
        return;
    if (c->seg.l && seg_takes(c, l, rec, sender, owner, flags)) {
        cq_seg_t *g = &c->seg;
        memcpy(l->fb->data + l->fb->len, rec->data, rec->len);
        l->fb->len += rec->len;
        g->len += rec->len;
        g->n++;
        CQ_METRIC_ADD(c, M_FANOUTS, 0, g->plain);
        return;
    }
    cq__seg_close(c);
    uint32_t plain = 0, snappy = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        const cq_conn_t *conn = l->conns[i];
        if (!skip(c, conn, chan_id, sender, owner, flags))
            conn->out_ct == CQ_CT_SNAPPY ? snappy++ : plain++;
    }
    CQ_METRIC_ADD(c, M_FANOUTS, 0, plain + snappy);
    if (snappy || plain < FB_RECIPIENTS || rec->len > FB_REC_MAX ||
        !seg_open(c, l, rec, sender, owner, flags, plain))
        fanout_now(c, l, rec, sender, owner, flags, plain, snappy);
}

/* On the channel's worker. One FANOUT per other worker that has subscribers (wcount), each with
 * one reference to the record; the owner travels with it, as the other workers do not have the
 * channel to apply BC_BUT_OWNER. */
void cq__fanout(cq_core_t *c, cq_chan_t *ch, cq_buf_t *rec, uint32_t sender, uint32_t flags)
{
    for (int w = 0; w < c->nplaces; w++) { /* other nodes too: once per node (node.c) */
        if (!ch->wcount[w] || w == c->index)
            continue;
        cq_xmsg_t *m = cq__xmsg_new(XM_FANOUT, 0);
        if (!m)
            continue;
        m->chan_id = ch->id;
        m->buf = cq_buf_ref(rec);
        m->u1 = sender;
        m->u2 = ch->owner;
        m->u3 = flags;
        cq__xmsg_post(c, w, m);
    }
    if (ch->wcount[c->index])
        cq__local_fanout(c, ch->id, rec, sender, ch->owner, flags);
}

/* ---- user-space messages ---------------------------------------------------------------- */

/* A client's user-space message goes to the channel's owner whatever its broadcast value,
 * wrapped in a ServerForwardMessage that names the client (channeld §1.8): clients cannot
 * broadcast. An owner lost to recovery is no owner, and the message is dropped, as channeld
 * drops it while the owner recovers. */
static void from_client(cq_core_t *c, cq_req_t *r, cq_chan_t *ch)
{
    if (!ch->owner) {
        /* channeld: client broadcast needs enableClientBroadcast, which nothing sets. */
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u on channel %u dropped: channel has no owner",
                   r->conn_id, r->mp.msg_type, ch->id);
        return;
    }
    cq_buf_t *rec = cq_wire_sfm_record(&r->mp, r->conn_id);
    if (!rec) {
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u too large to forward", r->conn_id,
                   r->mp.msg_type);
        return;
    }
    cq__send_to(c, ch->owner, rec);
    cq_buf_unref(rec);
}

/* A server's body is a ServerForwardMessage already (checked on its worker): it goes as it
 * came, original header included. Target 0 is "nobody" and the message is dropped. */
static void to_one(cq_core_t *c, cq_req_t *r, uint32_t target, const char *what)
{
    if (!target) {
        CQ_MSG_LOG(c, "fwd", "conn %u: user msg %u on channel %u dropped: no %s", r->conn_id,
                   r->mp.msg_type, r->mp.channel_id, what);
        return;
    }
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    cq__send_to(c, target, rec);
    cq_buf_unref(rec);
}

/* ---- ADJACENT_CHANNELS (§1.8 item 4) ------------------------------------------------------
 *
 * The subscribers of a cell's 3x3 neighbourhood (the centre too unless bit 8), each once, but
 * the sender (bit 4), clients (16), servers (32) and the SFM's clientConnId. The cells live on
 * different workers and a connection may be in several of their lists, so the record is
 * encoded once and every worker gets the cell list: it walks its own local lists of those
 * cells and marks each connection with the broadcast's generation, so it delivers at most
 * once. Every worker is asked, because only a cell's own worker knows where its subscribers
 * are, and asking it first would cost a hop per cell. */

/* As skip(), without bit 8 (with ADJACENT it means "not the centre cell"), and with the
 * ServerForwardMessage's clientConnId (u2) left out too, as channeld does. */
static bool adj_skip(const cq_conn_t *conn, const cq_xmsg_t *m)
{
    if (conn->state == CONN_CLOSING || conn->id == m->u2)
        return true;
    if ((m->u3 & BC_BUT_SENDER) && conn->id == m->u1)
        return true;
    if ((m->u3 & BC_BUT_CLIENT) && conn->type == CQ_CONN_CLIENT)
        return true;
    return (m->u3 & BC_BUT_SERVER) && conn->type == CQ_CONN_SERVER;
}

static void adj_push(cq_core_t *c, const uint32_t *ids, uint32_t n, cq_buf_t *rec)
{
    for (uint32_t j = 0; j < n; j++) { /* by id: a push may close a slow subscriber */
        cq_conn_t *conn = cq_map_get(&c->conns, ids[j]);
        if (conn && conn->state != CONN_CLOSING)
            cq__conn_push(c, conn, rec);
    }
}

/* The recipients are collected first and pushed after the walk (adj_push), so a push that
 * closes a slow subscriber cannot change a list being walked. */
void cq__adjacent_deliver(cq_core_t *c, const cq_xmsg_t *m)
{
    const uint32_t *cells = (const uint32_t *)m->body;
    uint32_t ncells = m->body_len / sizeof(uint32_t), gen = ++c->adj_gen;
    uint32_t *ids = NULL, n = 0, cap = 0;
    for (uint32_t k = 0; k < ncells; k++) {
        const cq_lsubs_t *l = cq_map_get(&c->lsubs, cells[k]);
        for (uint32_t i = 0; l && i < l->n; i++) {
            cq_conn_t *conn = l->conns[i];
            if (conn->adj_gen == gen || adj_skip(conn, m))
                continue;
            conn->adj_gen = gen;
            if (n == cap) {
                uint32_t ncap = cap ? cap * 2 : 64;
                uint32_t *t = cq_realloc(ids, ncap * sizeof(*t));
                if (!t)
                    goto out;
                ids = t;
                cap = ncap;
            }
            ids[n++] = conn->id;
        }
    }
out:
    adj_push(c, ids, n, m->buf);
    cq_free(ids);
}

/* Bit 8 (ALL_BUT_OWNER) leaves out the centre cell instead of the owner: channeld's meaning with
 * ADJACENT, kept (§8.2). This worker's share is delivered directly. */
static void adjacent(cq_core_t *c, cq_req_t *r, cq_chan_t *ch, uint32_t bc)
{
    const cq_spatial_cfg_t *g = c->sh->spatial;
    uint32_t index, cells[9];
    if (!g || ch->type != CHANNELDPB__CHANNEL_TYPE__SPATIAL ||
        !cq_spatial_chan_index(g, ch->id, &index)) {
        CQ_MSG_LOG(c, "fwd",
                   "conn %u: ADJACENT_CHANNELS broadcast on non-spatial channel %u dropped",
                   r->conn_id, ch->id);
        return;
    }
    uint32_t n = cq_spatial_adjacent(g, index, !(bc & BC_BUT_OWNER), cells);
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    uint32_t skip_client = cq_wire_sfm_client(r->mp.body, r->mp.body_len);
    for (int w = 0; w < c->nworkers; w++) {
        cq_xmsg_t *m = cq__xmsg_new(XM_ADJACENT, n * sizeof(uint32_t));
        if (!m)
            continue;
        memcpy(m->body, cells, n * sizeof(uint32_t));
        m->buf = cq_buf_ref(rec);
        m->u1 = r->conn_id;
        m->u2 = skip_client;
        m->u3 = bc;
        if (w == c->index) {
            cq__adjacent_deliver(c, m);
            cq__xmsg_free(m);
        } else {
            cq__xmsg_post(c, w, m);
        }
    }
    cq__node_adjacent(c, cells, n, rec, r->conn_id, skip_client, bc);
    cq_buf_unref(rec);
}

/* §1.8: broadcast 0 to the owner; 1 to clientConnId, or to the owner when that is 0 (channeld
 * panicked on an ownerless channel there; here it is dropped, §8.2); bit 64 to the neighbouring
 * cells; anything else to every subscriber minus the flags. */
static void from_server(cq_core_t *c, cq_req_t *r, cq_chan_t *ch)
{
    uint32_t bc = r->mp.broadcast;
    if (bc == 0) {
        to_one(c, r, ch->owner, "channel owner");
        return;
    }
    if (bc == BC_SINGLE) {
        uint32_t client = cq_wire_sfm_client(r->mp.body, r->mp.body_len);
        to_one(c, r, client ? client : ch->owner, client ? "connection" : "channel owner");
        return;
    }
    if (bc & BC_ADJACENT) {
        adjacent(c, r, ch, bc);
        return;
    }
    cq_buf_t *rec = cq_wire_record_raw(&r->mp);
    if (!rec)
        return;
    cq__fanout(c, ch, rec, r->conn_id, bc);
    cq_buf_unref(rec);
}

void cq__handle_user(cq_core_t *c, cq_req_t *r)
{
    cq_chan_t *ch = cq__chan_get(c, r->mp.channel_id);
    if (!ch)
        return;
    if (r->conn_type == CQ_CONN_CLIENT)
        from_client(c, r, ch);
    else
        from_server(c, r, ch);
}
