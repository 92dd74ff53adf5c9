/* relaynode.c - chanqd as one node of a relay (relaynode.h): composes the NATS network
 * (cq_relay_nats.h) and the relay thread (cq_relay.h), and publishes their metrics. */
#include "relaynode.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_core.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_relay.h"
#include "cq_relay_nats.h"
#include "cq_sbuf.h"
#include "cq_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CQ_HAVE_ZOOKEEPER
#include "cq_zkgroup.h"
#endif

#define MAX_PEERS CQ_RELAY_MAX_PEERS

struct cq_main_relay {
    const cq_config_t *cfg;
    cq_shared_t *sh;
#ifdef CQ_HAVE_ZOOKEEPER
    cq_zkgroup_t *grp;
    /* grp once cq_zkgroup_open returned: its first CONNECTED may come before */
    _Atomic(cq_zkgroup_t *) grp_live;
#endif
    /* the last member list's epoch per node, 0 for none (the ZooKeeper thread's) */
    uint32_t member_epoch[CQ_LINK_MAX_NODE + 1];
    _Atomic uint32_t members;
    _Atomic uint32_t global_home; /* from the claim's answer; 0 until then */
    cq_relay_nats_t *nats;
    cq_relay_t *relay;
    _Atomic(cq_relay_t *) live; /* NATS packets go here once the relay runs */
    /* the relay thread's view of each peer's HELLO (read by /metrics: atomics) */
    _Atomic uint32_t hello_epoch[CQ_LINK_MAX_NODE + 1];
    _Atomic uint64_t hellos, unknown_records;
};

/* ---- callbacks ---------------------------------------------------------------------------- */

/* libnats's delivery thread: the packet goes through its link right here (input_inline). */
static void on_packet(void *ud, const uint8_t *p, size_t n)
{
    cq_main_relay_t *k = ud;
    cq_relay_t *r = atomic_load_explicit(&k->live, memory_order_acquire);
    if (r)
        cq_relay_input(r, p, n);
}

static void on_state(void *ud, cq_relay_nats_state_t st, const char *url)
{
    cq_main_relay_t *k = ud;
    static const char *const names[] = {"", "connected to", "disconnected from NATS",
                                        "reconnected to", "closed"};
    if (st == CQ_RELAY_NATS_DISCONNECTED)
        CQ_WARN("relay", "node %d: %s; reconnecting", k->cfg->relay_node_id, names[st]);
    else
        CQ_INFO("relay", "node %d: %s %s", k->cfg->relay_node_id, names[st], url);
}

/* "v1 node=N epoch=E" */
static void on_hello(cq_main_relay_t *k, uint16_t from, const uint8_t *body, uint32_t len)
{
    char s[64];
    unsigned node = 0, epoch = 0;
    snprintf(s, sizeof(s), "%.*s", (int)(len < sizeof(s) - 1 ? len : sizeof(s) - 1),
             (const char *)body);
    if (sscanf(s, "v1 node=%u epoch=%u", &node, &epoch) != 2 || node != from || !epoch) {
        atomic_fetch_add(&k->unknown_records, 1);
        return;
    }
    cq_shared_relay_node_up(k->sh, from); /* before anything it sends after its HELLO */
    uint32_t before = atomic_exchange(&k->hello_epoch[from], epoch);
    atomic_fetch_add(&k->hellos, 1);
    if (before != epoch)
        CQ_INFO("relay", "node %d: node %u is up (epoch %u)", k->cfg->relay_node_id, node, epoch);
}

/* The relay thread, or libnats's delivery thread (input_inline; one at a time): a record from
 * node, in its stream's order. */
static void on_deliver(void *ud, uint16_t node, uint8_t kind, const uint8_t *body, uint32_t len)
{
    cq_main_relay_t *k = ud;
    if (kind == CQ_CORE_REC_XMSGS)
        cq_shared_relay_input(k->sh, node, body, len);
    else if (kind == CQ_RELAY_REC_HELLO)
        on_hello(k, node, body, len);
    else
        atomic_fetch_add(&k->unknown_records, 1);
}

static void on_heard(void *ud, uint16_t node)
{
    cq_main_relay_t *k = ud;
    cq_shared_relay_heard(k->sh, node);
}

static void on_reset(void *ud, uint16_t node, int why, uint64_t lost)
{
    cq_main_relay_t *k = ud;
    cq_shared_relay_reset(k->sh, node, why == CQ_LINK_WHY_EPOCH, lost);
    CQ_WARN("relay", "node %d: the stream from node %u reset (reason %d): %" PRIu64 " packets lost",
            k->cfg->relay_node_id, node, why, lost);
}

/* ---- metrics ------------------------------------------------------------------------------ */

static int metrics_peer(cq_main_relay_t *k, const cq_relay_peer_stats_t *p, cq_sbuf_t *out)
{
    unsigned n = p->node;
    return cq_sbuf_printf(out,
                          "chanq_relay_link_packets_total{peer=\"%u\",dir=\"out\"} %" PRIu64 "\n"
                          "chanq_relay_link_packets_total{peer=\"%u\",dir=\"in\"} %" PRIu64 "\n"
                          "chanq_relay_link_records_total{peer=\"%u\",dir=\"out\"} %" PRIu64 "\n"
                          "chanq_relay_link_records_total{peer=\"%u\",dir=\"in\"} %" PRIu64 "\n"
                          "chanq_relay_link_bytes_out_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_gaps_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_nacks_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_recovered_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_resets_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_lost_packets_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_dropped_packets_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_retransmits_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_gone_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_link_publish_errors_total{peer=\"%u\"} %" PRIu64 "\n"
                          "chanq_relay_peer_epoch{peer=\"%u\"} %u\n",
                          n, p->tx.packets, n, p->rx.delivered, n, p->records_out, n, p->records_in,
                          n, p->tx.bytes, n, p->rx.gaps, n, p->rx.nacks, n, p->rx.recovered, n,
                          p->rx.resets, n, p->rx.lost, n, p->rx.dropped, n, p->tx.retransmits, n,
                          p->tx.gone, n, p->publish_errors, n, atomic_load(&k->hello_epoch[n]));
}

static const char HELP[] =
    "# HELP chanq_relay_node This relay node's id, epoch and relay name.\n"
    "# TYPE chanq_relay_node gauge\n"
    "# HELP chanq_relay_members Nodes of the relay in ZooKeeper, this one included.\n"
    "# TYPE chanq_relay_members gauge\n"
    "# HELP chanq_relay_peers_up Other nodes whose HELLO reached this one over NATS.\n"
    "# TYPE chanq_relay_peers_up gauge\n"
    "# HELP chanq_relay_global_home The node GLOBAL and the channel directory live on (0: not "
    "known yet).\n"
    "# TYPE chanq_relay_global_home gauge\n"
    "# HELP chanq_relay_global_owner The connection id of GLOBAL's owner as this node knows it "
    "(GLOBAL's home tells the other nodes; 0: none).\n"
    "# TYPE chanq_relay_global_owner gauge\n"
    "# HELP chanq_relay_paced_total Records from other nodes that waited for a worker's full "
    "inbox.\n"
    "# TYPE chanq_relay_paced_total counter\n"
    "# HELP chanq_relay_messages_in_total Messages from other nodes taken.\n"
    "# TYPE chanq_relay_messages_in_total counter\n"
    "# HELP chanq_relay_messages_refused_total Messages from other nodes refused: malformed, "
    "misaddressed, or from a node that is not one of the relay's.\n"
    "# TYPE chanq_relay_messages_refused_total counter\n"
    "# HELP chanq_relay_nats_connected 1 while this node is connected to a nats-server.\n"
    "# TYPE chanq_relay_nats_connected gauge\n"
    "# HELP chanq_relay_nats_reconnects_total Reconnections to NATS after a loss.\n"
    "# TYPE chanq_relay_nats_reconnects_total counter\n"
    "# HELP chanq_relay_nats_dropped_total Packets the NATS subscription dropped as a slow "
    "consumer (the links ask for them again).\n"
    "# TYPE chanq_relay_nats_dropped_total counter\n"
    "# HELP chanq_relay_queue_bytes Bytes waiting for the relay thread.\n"
    "# TYPE chanq_relay_queue_bytes gauge\n"
    "# HELP chanq_relay_refused_sends_total Records refused because the relay's queue was "
    "full.\n"
    "# TYPE chanq_relay_refused_sends_total counter\n"
    "# HELP chanq_relay_bad_packets_total Packets refused: malformed, or for another node.\n"
    "# TYPE chanq_relay_bad_packets_total counter\n"
    "# HELP chanq_relay_unknown_records_total Records of a kind or content this node does not "
    "take, dropped.\n"
    "# TYPE chanq_relay_unknown_records_total counter\n"
    "# HELP chanq_relay_link_packets_total Data packets per peer: sent (out), delivered in "
    "order (in).\n"
    "# TYPE chanq_relay_link_packets_total counter\n"
    "# HELP chanq_relay_link_records_total Records per peer, sent and delivered.\n"
    "# TYPE chanq_relay_link_records_total counter\n"
    "# HELP chanq_relay_link_bytes_out_total Bytes of data packets sent per peer.\n"
    "# TYPE chanq_relay_link_bytes_out_total counter\n"
    "# HELP chanq_relay_link_gaps_total Gaps seen in a peer's stream (lost packets).\n"
    "# TYPE chanq_relay_link_gaps_total counter\n"
    "# HELP chanq_relay_link_nacks_total NACKs sent to a peer for its missing packets.\n"
    "# TYPE chanq_relay_link_nacks_total counter\n"
    "# HELP chanq_relay_link_recovered_total Gaps closed by retransmission.\n"
    "# TYPE chanq_relay_link_recovered_total counter\n"
    "# HELP chanq_relay_link_resets_total Times a peer's stream broke: what came from it is "
    "rebuilt.\n"
    "# TYPE chanq_relay_link_resets_total counter\n"
    "# HELP chanq_relay_link_lost_packets_total Packets of a peer lost for good (in resets).\n"
    "# TYPE chanq_relay_link_lost_packets_total counter\n"
    "# HELP chanq_relay_link_dropped_packets_total A peer's packets refused: duplicate, stale "
    "or malformed.\n"
    "# TYPE chanq_relay_link_dropped_packets_total counter\n"
    "# HELP chanq_relay_link_retransmits_total Packets sent again on a peer's NACK.\n"
    "# TYPE chanq_relay_link_retransmits_total counter\n"
    "# HELP chanq_relay_link_gone_total NACKs answered GONE (no longer kept).\n"
    "# TYPE chanq_relay_link_gone_total counter\n"
    "# HELP chanq_relay_link_publish_errors_total Publishes NATS refused (the peer's NACK "
    "recovers them).\n"
    "# TYPE chanq_relay_link_publish_errors_total counter\n"
    "# HELP chanq_relay_peer_epoch The epoch of a peer's last HELLO (0: not heard from).\n"
    "# TYPE chanq_relay_peer_epoch gauge\n";

static unsigned peers_up(cq_main_relay_t *k)
{
    unsigned n = 0;
    for (unsigned i = 1; i <= CQ_LINK_MAX_NODE; i++)
        n += atomic_load(&k->hello_epoch[i]) != 0;
    return n;
}

static int metrics(void *ud, cq_sbuf_t *out)
{
    cq_main_relay_t *k = ud;
    cq_relay_stats_t st;
    cq_relay_peer_stats_t *ps = cq_malloc(MAX_PEERS * sizeof(*ps));
    if (!ps)
        return -ENOMEM;
    size_t n = cq_relay_stats(k->relay, &st, ps, MAX_PEERS);
    cq_relay_nats_stats_t ns;
    cq_relay_nats_stats(k->nats, &ns);
    uint64_t min, mref, mpaced;
    cq_shared_relay_counts(k->sh, &min, &mref, &mpaced);
    int r = cq_sbuf_append(out, HELP, sizeof(HELP) - 1);
    if (r == 0)
        r = cq_sbuf_printf(out,
                           "chanq_relay_node{node=\"%d\",cluster=\"%s\",epoch=\"%u\"} 1\n"
                           "chanq_relay_members %u\n"
                           "chanq_relay_peers_up %u\n"
                           "chanq_relay_global_home %u\n"
                           "chanq_relay_global_owner %u\n"
                           "chanq_relay_messages_in_total %" PRIu64 "\n"
                           "chanq_relay_messages_refused_total %" PRIu64 "\n"
                           "chanq_relay_paced_total %" PRIu64 "\n"
                           "chanq_relay_nats_connected %d\n"
                           "chanq_relay_nats_reconnects_total %" PRIu64 "\n"
                           "chanq_relay_nats_dropped_total %" PRId64 "\n"
                           "chanq_relay_queue_bytes %" PRIu64 "\n"
                           "chanq_relay_refused_sends_total %" PRIu64 "\n"
                           "chanq_relay_bad_packets_total %" PRIu64 "\n"
                           "chanq_relay_unknown_records_total %" PRIu64 "\n",
                           k->cfg->relay_node_id, k->cfg->relay_cluster, cq_relay_epoch(k->relay),
                           atomic_load(&k->members), peers_up(k), atomic_load(&k->global_home),
                           cq_shared_relay_global_owner(k->sh), min, mref, mpaced,
                           ns.connected ? 1 : 0, ns.reconnects, ns.dropped, st.queued_bytes,
                           st.refused_sends, st.bad_packets + st.unknown_src,
                           atomic_load(&k->unknown_records));
    for (size_t i = 0; i < n && r == 0; i++)
        r = metrics_peer(k, &ps[i], out);
    cq_free(ps);
    return r;
}

int cq_main_relay_report(cq_main_relay_t *k, cq_mgrlink_relay_t *r, cq_mgrlink_link_t *links,
                         size_t cap)
{
    r->node = (uint16_t)k->cfg->relay_node_id;
    r->cluster = k->cfg->relay_cluster;
    r->global_home = (uint16_t)atomic_load(&k->global_home);
    r->members = atomic_load(&k->members);
    r->links = links;
    r->nlinks = 0;
    cq_relay_stats_t st;
    cq_relay_peer_stats_t *ps = cq_malloc(MAX_PEERS * sizeof(*ps));
    if (!ps)
        return -ENOMEM;
    size_t n = cq_relay_stats(k->relay, &st, ps, MAX_PEERS);
    for (size_t i = 0; i < n && i < cap; i++) {
        const cq_relay_peer_stats_t *p = &ps[i];
        links[i] = (cq_mgrlink_link_t){.peer = p->node,
                                       .up = atomic_load(&k->hello_epoch[p->node]) != 0,
                                       .packets_in = p->rx.delivered,
                                       .packets_out = p->tx.packets,
                                       .bytes_out = p->tx.bytes,
                                       .gaps = p->rx.gaps,
                                       .resets = p->rx.resets,
                                       .lost = p->rx.lost};
        r->nlinks++;
    }
    cq_free(ps);
    return 0;
}

/* ---- membership (ZooKeeper) ----------------------------------------------------------------- */

/* The workers hand their records for a node to the relay thread (cq_core.h). */
static int core_send(void *ud, uint16_t node, cq_buf_t *rec)
{
    cq_main_relay_t *k = ud;
    return cq_relay_send(k->relay, node, CQ_CORE_REC_XMSGS, rec);
}

#ifdef CQ_HAVE_ZOOKEEPER
/* The ZooKeeper thread: the live nodes are the members; a node that joined (or restarted: a
 * new epoch) is greeted, one that left is logged (its loss is handled by issue 23's point 6,
 * not yet). A member that claims this node's id from another session is a misconfiguration:
 * logged, and left out. */
static void on_members(void *ud, const cq_zkgroup_member_t *m, size_t n)
{
    cq_main_relay_t *k = ud;
    uint16_t nodes[CQ_RELAY_MAX_PEERS + 1];
    uint32_t now[CQ_LINK_MAX_NODE + 1] = {0};
    size_t cnt = 0;
    for (size_t i = 0; i < n && cnt < CQ_ARRAY_SIZE(nodes); i++) {
        unsigned node = 0, epoch = 0;
        if (sscanf(m[i].data, "v1 node=%u epoch=%u", &node, &epoch) != 2 || !node ||
            node > CQ_LINK_MAX_NODE || !epoch || now[node])
            continue;
        if (node == (unsigned)k->cfg->relay_node_id && !m[i].self) {
            CQ_ERROR("relay", "node %u: another process joined the relay with this node id", node);
            continue;
        }
        now[node] = epoch;
        nodes[cnt++] = (uint16_t)node;
    }
    /* HELLOs first: the stream to a new node must carry it before any connection of this node
     * is announced there (the workers announce to the live nodes, set below) */
    for (unsigned node = 1; node <= CQ_LINK_MAX_NODE; node++) {
        if (now[node] && now[node] != k->member_epoch[node] &&
            node != (unsigned)k->cfg->relay_node_id) {
            CQ_INFO("relay", "node %d: node %u joined (epoch %u)", k->cfg->relay_node_id, node,
                    now[node]);
            cq_main_relay_hello(k, (uint16_t)node);
        }
    }
    cq_shared_relay_members(k->sh, nodes, cnt);
    atomic_store(&k->members, (uint32_t)cnt);
    for (unsigned node = 1; node <= CQ_LINK_MAX_NODE; node++) {
        if (!now[node] && k->member_epoch[node]) {
            CQ_WARN("relay", "node %d: node %u left the relay", k->cfg->relay_node_id, node);
            atomic_store(&k->hello_epoch[node], 0);
            cq_shared_relay_node_gone(k->sh, (uint16_t)node);
        }
        k->member_epoch[node] = now[node];
    }
}

/* GLOBAL's home (and the channel directory's) is the node whose claim of the ZooKeeper home
 * "global" won: compare-and-set, so every node reads the same one. */
static void claim_global(cq_main_relay_t *k);

static void on_claim(void *ud, const char *name, int rc, const char *holder, size_t len, bool mine)
{
    (void)name, (void)len;
    cq_main_relay_t *k = ud;
    unsigned node = 0;
    if (rc < 0 || sscanf(holder, "v1 node=%u", &node) != 1 || !node || node > CQ_LINK_MAX_NODE) {
        CQ_WARN("relay", "node %d: GLOBAL's home not claimed (%s); again at the next session",
                k->cfg->relay_node_id, rc < 0 ? cq_strerror(rc) : "bad holder data");
        return;
    }
    CQ_INFO("relay", "node %d: GLOBAL's home is node %u%s", k->cfg->relay_node_id, node,
            mine ? " (this one)" : "");
    cq_shared_relay_global_home(k->sh, (uint16_t)node);
    atomic_store(&k->global_home, node);
}

static void on_home_gone(void *ud, const char *name)
{
    cq_main_relay_t *k = ud;
    if (strcmp(name, "global") == 0) {
        CQ_WARN("relay", "node %d: GLOBAL's home left; claiming it", k->cfg->relay_node_id);
        claim_global(k);
    }
}

static void claim_global(cq_main_relay_t *k)
{
    char data[32];
    snprintf(data, sizeof(data), "v1 node=%d", k->cfg->relay_node_id);
    cq_zkgroup_t *g = atomic_load(&k->grp_live);
    int r = g ? cq_zkgroup_claim(g, "global", data, on_claim, k) : 0;
    if (r < 0 && r != -ENOTCONN)
        CQ_WARN("relay", "node %d: cannot claim GLOBAL's home: %s", k->cfg->relay_node_id,
                cq_strerror(r));
}

static void on_session(void *ud, cq_zkgroup_state_t st, uint32_t session_ms)
{
    cq_main_relay_t *k = ud;
    if (st == CQ_ZKGROUP_CONNECTED) {
        CQ_INFO("relay", "node %d: in ZooKeeper (session %u ms)", k->cfg->relay_node_id,
                session_ms);
        claim_global(k);
    } else
        CQ_WARN("relay", "node %d: ZooKeeper session %s", k->cfg->relay_node_id,
                st == CQ_ZKGROUP_EXPIRED ? "expired: joining again" : "disconnected");
}

static int join(cq_main_relay_t *k, char *err, size_t errlen)
{
    const cq_config_t *c = k->cfg;
    char path[256], data[64];
    snprintf(path, sizeof(path), "%s/relay/%s/members", c->zk_root, c->relay_cluster);
    snprintf(data, sizeof(data), "v1 node=%d epoch=%u", c->relay_node_id, cq_relay_epoch(k->relay));
    cq_zkgroup_conf_t gc = {.hosts = *c->relay_zk_hosts ? c->relay_zk_hosts : c->zk_hosts,
                            .path = path,
                            .session_ms = (uint32_t)c->zk_session_ms,
                            .data = data};
    cq_zkgroup_sink_t sink = {
        .members = on_members, .session = on_session, .home_gone = on_home_gone, .ud = k};
    int r = cq_zkgroup_open(&gc, &sink, &k->grp);
    if (r == 0) {
        atomic_store(&k->grp_live, k->grp);
        claim_global(k); /* if CONNECTED came first; -ENOTCONN otherwise: CONNECTED claims */
    }
    if (r < 0)
        snprintf(err, errlen, "relay: cannot join the relay in ZooKeeper (%s%s): %s", gc.hosts,
                 path, cq_strerror(r));
    return r;
}
#else
static int join(cq_main_relay_t *k, char *err, size_t errlen)
{
    (void)k;
    snprintf(err, errlen,
             "relay: chanqd was built without ZooKeeper (libzookeeper-mt-dev), "
             "where relay nodes find each other");
    return -ENOTSUP;
}
#endif

/* ---- lifecycle ---------------------------------------------------------------------------- */

void cq_main_relay_hello(cq_main_relay_t *k, uint16_t node)
{
    char s[64];
    int n = snprintf(s, sizeof(s), "v1 node=%d epoch=%u", k->cfg->relay_node_id,
                     cq_relay_epoch(k->relay));
    cq_buf_t *b = cq_buf_from(s, (size_t)n);
    if (b)
        (void)cq_relay_send(k->relay, node, CQ_RELAY_REC_HELLO, b); /* refusals are counted */
    cq_buf_unref(b);
}

static int open_nats(cq_main_relay_t *k, char *err, size_t errlen)
{
    const cq_config_t *c = k->cfg;
    char name[64];
    snprintf(name, sizeof(name), "chanqd-%s-node-%d", c->relay_cluster, c->relay_node_id);
    cq_relay_nats_conf_t nc = {.urls = c->relay_nats,
                               .user = c->relay_nats_user,
                               .password = c->relay_nats_password,
                               .token = c->relay_nats_token,
                               .tls = c->relay_nats_tls,
                               .tls_ca = c->relay_nats_tls_ca,
                               .tls_cert = c->relay_nats_tls_cert,
                               .tls_key = c->relay_nats_tls_key,
                               .name = name,
                               .on_packet = on_packet,
                               .on_state = on_state,
                               .ud = k};
    return cq_relay_nats_open(&nc, &k->nats, err, errlen);
}

static void log_started(const cq_config_t *c, cq_main_relay_t *k, const char *subj)
{
    CQ_INFO("relay", "node %d of relay \"%s\" (epoch %u) on NATS %s, subject %s", c->relay_node_id,
            c->relay_cluster, cq_relay_epoch(k->relay), c->relay_nats, subj);
}

int cq_main_relay_start(const cq_config_t *c, cq_shared_t *sh, cq_admin_t *admin,
                        cq_main_relay_t **ret, char *err, size_t errlen)
{
    cq_main_relay_t *k = cq_calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->cfg = c;
    k->sh = sh;
    int r = open_nats(k, err, errlen);
    if (r < 0) {
        cq_free(k);
        return r;
    }
    cq_relay_conf_t rc = {.node = (uint16_t)c->relay_node_id,
                          .cluster = c->relay_cluster,
                          .net_ops = &cq_relay_nats_ops,
                          .net = k->nats,
                          .deliver = on_deliver,
                          .input_inline = true, /* libnats never calls it from a publish */
                          .reset = on_reset,
                          .heard = on_heard,
                          .ud = k};
    char subj[CQ_RELAY_SUBJECT_MAX];
    r = cq_relay_start(&rc, &k->relay);
    if (r < 0)
        snprintf(err, errlen, "relay: cannot start the relay thread: %s", cq_strerror(r));
    else
        atomic_store_explicit(&k->live, k->relay, memory_order_release);
    if (r == 0)
        cq_shared_set_relay(sh, core_send, k);
    if (r == 0 && (r = cq_relay_subject(c->relay_cluster, (uint16_t)c->relay_node_id, subj,
                                        sizeof(subj))) == 0)
        r = cq_relay_nats_subscribe(k->nats, subj, err, errlen);
    if (r == 0 && (r = cq_admin_add_source(admin, "relay", metrics, k)) < 0)
        snprintf(err, errlen, "cannot register the relay metrics: %s", cq_strerror(r));
    if (r < 0) {
        cq_main_relay_stop(k, NULL);
        return r;
    }
    log_started(c, k, subj);
    *ret = k;
    return 0;
}

/* Ready once GLOBAL's home is known: a channel-0 message handled here before would land in a
 * directory that is not the relay's. Bounded: a ZooKeeper that does not answer leaves the node
 * serving on its own GLOBAL, said in the log. */
int cq_main_relay_join(cq_main_relay_t *k, char *err, size_t errlen)
{
    cq_shared_relay_ready(k->sh);
    int r = join(k, err, errlen);
    uint64_t end = cq_clock_mono_ms() + 2u * (uint32_t)k->cfg->zk_session_ms + 5000;
    while (r == 0 && !atomic_load(&k->global_home) && cq_clock_mono_ms() < end) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (r == 0 && !atomic_load(&k->global_home))
        CQ_WARN("relay", "node %d: GLOBAL's home not known yet; serving meanwhile",
                k->cfg->relay_node_id);
    return r;
}

void cq_main_relay_stop(cq_main_relay_t *k, cq_admin_t *admin)
{
    if (!k)
        return;
    if (admin)
        cq_admin_remove_source(admin, metrics, k);
#ifdef CQ_HAVE_ZOOKEEPER
    atomic_store(&k->grp_live, NULL);
    cq_zkgroup_close(k->grp); /* the others see this node leave */
#endif
    /* the network's callbacks end before the relay they feed; the relay thread, which publishes
     * over the network (a HEAD every 200 ms), ends before the network is freed */
    cq_relay_nats_quiesce(k->nats);
    cq_relay_stop(k->relay);
    cq_relay_nats_close(k->nats);
    cq_free(k);
}
