/* cq_kcp_listener.c - the KCP listener policy (see cq_kcp_listener.h).
 *
 * Why a unit of its own: these rules (conv replacement, tombstones, idle expiry, the per-IP
 * limit) decide which connection a datagram opens or reaches, so they are tested and fuzzed
 * with a manual clock here, away from sockets and the loop. Peers are found through a map
 * from a 32-bit hash of the address to a chain of peers with that hash.
 */
#include "cq_kcp_listener.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_kcp.h"
#include "cq_list.h"
#include "cq_map.h"
#include "cq_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum { PEER_LIVE, PEER_CLOSING, PEER_TOMB };

struct cq_kcp_peer {
    cq_kcp_addr_t addr;
    uint32_t hkey, ipkey, conv;
    uint64_t last_rx;
    uint8_t state;
    void *ud;                  /* the caller's session; NULL for a tombstone or while set up */
    struct cq_kcp_peer *hnext; /* the chain of peers with the same hkey */
    cq_list_t node;            /* l->peers */
};

struct cq_kcp_listener {
    cq_kcp_listener_opts_t o;
    cq_map_t by_addr; /* hkey -> first peer of the chain */
    cq_list_t peers;
};

struct cq_kcp_ipcount {
    pthread_mutex_t lock; /* guards per_ip; taken only when peers come or go */
    cq_map_t per_ip;      /* IP hash -> peers (as uintptr_t) */
    uint32_t max;
    _Atomic uint64_t refused, amp_blocked; /* see cq_kcp_ipcount_metrics */
};

/* ---- addresses -------------------------------------------------------------------------- */

static uint32_t fnv(uint32_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static uint32_t ip_key(const cq_kcp_addr_t *a)
{
    return fnv(2166136261u, a->ip, a->ip_len);
}

static uint32_t addr_key(const cq_kcp_addr_t *a)
{
    return fnv(ip_key(a), a->port, sizeof(a->port));
}

static bool same_addr(const cq_kcp_addr_t *a, const cq_kcp_addr_t *b)
{
    return a->ip_len == b->ip_len && memcmp(a->port, b->port, 2) == 0 &&
           memcmp(a->ip, b->ip, a->ip_len) == 0;
}

/* ---- the shared per-IP count ------------------------------------------------------------ */

cq_kcp_ipcount_t *cq_kcp_ipcount_new(uint32_t max_per_ip)
{
    cq_kcp_ipcount_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    cq_map_init(&c->per_ip);
    c->max = max_per_ip;
    return c;
}

cq_kcp_ipcount_t *cq_kcp_ipcount_free(cq_kcp_ipcount_t *c)
{
    if (!c)
        return NULL;
    cq_map_done(&c->per_ip);
    pthread_mutex_destroy(&c->lock);
    cq_free(c);
    return NULL;
}

/* Adds delta (+1 or -1) to the IP's count; +1 only while under the limit. Returns 0,
 * CQ_ELIMIT or -ENOMEM (nothing changed then). */
static int ipcount_add(cq_kcp_ipcount_t *c, uint32_t ipkey, int delta)
{
    pthread_mutex_lock(&c->lock);
    uintptr_t n = (uintptr_t)cq_map_get(&c->per_ip, ipkey);
    int r = delta < 0 || n < c->max ? 0 : CQ_ELIMIT;
    if (r == 0) {
        n += (uintptr_t)(intptr_t)delta;
        if (n)
            r = cq_map_put(&c->per_ip, ipkey, (void *)n); /* a decrement never allocates */
        else
            cq_map_del(&c->per_ip, ipkey);
    }
    pthread_mutex_unlock(&c->lock);
    return r;
}

uint32_t cq_kcp_ipcount_get(cq_kcp_ipcount_t *c, const cq_kcp_addr_t *a)
{
    pthread_mutex_lock(&c->lock);
    uintptr_t n = (uintptr_t)cq_map_get(&c->per_ip, ip_key(a));
    pthread_mutex_unlock(&c->lock);
    return (uint32_t)n;
}

void cq_kcp_ipcount_add_amp(cq_kcp_ipcount_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->amp_blocked, n, memory_order_relaxed);
}

uint64_t cq_kcp_ipcount_refused(cq_kcp_ipcount_t *c)
{
    return atomic_load_explicit(&c->refused, memory_order_relaxed);
}

size_t cq_kcp_ipcount_metrics(cq_kcp_ipcount_t *c, char *buf, size_t cap)
{
    int n = snprintf(
        buf, cap,
        "# HELP chanq_kcp_refused_total KCP datagrams from a new address dropped by a limit.\n"
        "# TYPE chanq_kcp_refused_total counter\n"
        "chanq_kcp_refused_total{reason=\"max_per_addr\"} %llu\n"
        "# HELP chanq_kcp_amp_blocked_total KCP segments held back from peers that had not "
        "proved their address (anti-amplification), counted when the session ends.\n"
        "# TYPE chanq_kcp_amp_blocked_total counter\n"
        "chanq_kcp_amp_blocked_total %llu\n",
        (unsigned long long)cq_kcp_ipcount_refused(c),
        (unsigned long long)atomic_load_explicit(&c->amp_blocked, memory_order_relaxed));
    return n < 0 ? 0 : (size_t)n;
}

/* ---- peers ------------------------------------------------------------------------------ */

static cq_kcp_peer_t *peer_find(cq_kcp_listener_t *l, const cq_kcp_addr_t *a, uint32_t hkey)
{
    for (cq_kcp_peer_t *p = cq_map_get(&l->by_addr, hkey); p; p = p->hnext)
        if (same_addr(&p->addr, a))
            return p;
    return NULL;
}

static cq_kcp_peer_t *peer_new(cq_kcp_listener_t *l, const cq_kcp_addr_t *a, uint32_t hkey,
                               uint32_t conv, uint64_t now, cq_kcp_drop_t *ret_why)
{
    uint32_t ipkey = ip_key(a);
    int r = ipcount_add(l->o.ipcount, ipkey, 1);
    if (r == CQ_ELIMIT)
        atomic_fetch_add_explicit(&l->o.ipcount->refused, 1, memory_order_relaxed);
    if (r < 0) {
        *ret_why = r == CQ_ELIMIT ? CQ_KCP_DROP_LIMIT : CQ_KCP_DROP_NOMEM;
        return NULL;
    }
    cq_kcp_peer_t *p = cq_calloc(1, sizeof(*p));
    if (!p)
        goto fail;
    *p = (cq_kcp_peer_t){.addr = *a, .hkey = hkey, .ipkey = ipkey, .conv = conv, .last_rx = now};
    p->hnext = cq_map_get(&l->by_addr, hkey);
    if (cq_map_put(&l->by_addr, hkey, p) < 0)
        goto fail;
    cq_list_insert_tail(&l->peers, &p->node);
    return p;
fail:
    cq_free(p);
    ipcount_add(l->o.ipcount, ipkey, -1);
    *ret_why = CQ_KCP_DROP_NOMEM;
    return NULL;
}

/* Removes p from the address map and the list, gives its count back and frees it. */
static void peer_forget(cq_kcp_listener_t *l, cq_kcp_peer_t *p)
{
    cq_kcp_peer_t *head = cq_map_get(&l->by_addr, p->hkey), **pp = &head;
    while (*pp && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = p->hnext;
    if (head)
        cq_map_put(&l->by_addr, p->hkey, head); /* replaces: never allocates */
    else
        cq_map_del(&l->by_addr, p->hkey);
    cq_list_remove(&p->node);
    ipcount_add(l->o.ipcount, p->ipkey, -1);
    cq_free(p);
}

/* ---- the listener ----------------------------------------------------------------------- */

cq_kcp_listener_t *cq_kcp_listener_new(const cq_kcp_listener_opts_t *o)
{
    cq_kcp_listener_t *l = cq_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->o = *o;
    cq_map_init(&l->by_addr);
    cq_list_init(&l->peers);
    return l;
}

cq_kcp_listener_t *cq_kcp_listener_free(cq_kcp_listener_t *l)
{
    if (!l)
        return NULL;
    while (!cq_list_empty(&l->peers))
        peer_forget(l, cq_container_of(l->peers.next, cq_kcp_peer_t, node));
    cq_map_done(&l->by_addr);
    cq_free(l);
    return NULL;
}

static void drop(cq_kcp_action_t *a, cq_kcp_drop_t why)
{
    a->verdict = CQ_KCP_DROP;
    a->why = why;
}

/* A known address sent another conv. Returns true if p was displaced (and forgotten). */
static bool replace(cq_kcp_listener_t *l, cq_kcp_peer_t *p, const uint8_t *dgram, size_t len,
                    cq_kcp_action_t *a)
{
    if (!cq_kcp_is_conv_start(dgram, len)) {
        drop(a, CQ_KCP_DROP_CONV);
        return false;
    }
    if (p->state != PEER_TOMB) {
        /* The peer started over from the same port: the old session is gone. */
        a->replaced = p->ud;
        a->replaced_closing = p->state == PEER_CLOSING;
    }
    peer_forget(l, p);
    return true;
}

void cq_kcp_listener_input(cq_kcp_listener_t *l, const cq_kcp_addr_t *addr, const uint8_t *dgram,
                           size_t len, uint64_t now_ms, cq_kcp_action_t *ret)
{
    cq_kcp_action_t a = {.verdict = CQ_KCP_DROP};
    uint32_t conv;
    if (cq_kcp_peek_conv(dgram, len, &conv) < 0) {
        drop(&a, CQ_KCP_DROP_SHORT);
        goto out;
    }
    a.conv = conv;
    uint32_t hkey = addr_key(addr);
    cq_kcp_peer_t *p = peer_find(l, addr, hkey);
    if (p && p->conv != conv) {
        if (!replace(l, p, dgram, len, &a))
            goto out;
        p = NULL; /* forgotten */
    }
    if (!p) {
        p = peer_new(l, addr, hkey, conv, now_ms, &a.why);
        if (p) {
            a.verdict = CQ_KCP_CREATE;
            a.peer = p;
        }
        goto out;
    }
    p->last_rx = now_ms;
    if (p->state == PEER_LIVE && p->ud) {
        a.verdict = CQ_KCP_DELIVER;
        a.peer = p;
        a.ud = p->ud;
    } else {
        drop(&a, p->state == PEER_TOMB ? CQ_KCP_DROP_TOMBSTONE : CQ_KCP_DROP_CLOSING);
    }
out:
    *ret = a;
}

void cq_kcp_listener_attach(cq_kcp_listener_t *l, cq_kcp_peer_t *p, void *ud)
{
    (void)l;
    p->ud = ud;
    p->state = PEER_LIVE;
}

void cq_kcp_listener_forget(cq_kcp_listener_t *l, cq_kcp_peer_t *p)
{
    peer_forget(l, p);
}

void cq_kcp_listener_closing(cq_kcp_listener_t *l, cq_kcp_peer_t *p)
{
    (void)l;
    if (p->state == PEER_LIVE)
        p->state = PEER_CLOSING;
}

void cq_kcp_listener_bury(cq_kcp_listener_t *l, cq_kcp_peer_t *p)
{
    (void)l;
    p->ud = NULL;
    p->state = PEER_TOMB;
}

void cq_kcp_listener_expire(cq_kcp_listener_t *l, uint64_t now_ms,
                            void (*idle)(void *ctx, void *ud), void *ctx)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &l->peers)
    {
        cq_kcp_peer_t *p = cq_container_of(n, cq_kcp_peer_t, node);
        if (p->state == PEER_CLOSING || now_ms - p->last_rx < l->o.idle_ms)
            continue;
        if (p->state == PEER_TOMB)
            peer_forget(l, p);
        else if (p->ud)
            idle(ctx, p->ud);
    }
}

void cq_kcp_listener_stats(const cq_kcp_listener_t *l, cq_kcp_listener_stats_t *ret)
{
    cq_kcp_listener_stats_t st = {0, 0, 0};
    const cq_list_t *n;
    cq_list_foreach(n, &l->peers)
    {
        const cq_kcp_peer_t *p = cq_container_of(n, cq_kcp_peer_t, node);
        if (p->state == PEER_TOMB)
            st.tombstones++;
        else if (p->state == PEER_CLOSING)
            st.closing++;
        else
            st.sessions++;
    }
    *ret = st;
}
