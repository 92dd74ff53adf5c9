/* cq_authlim.c - see cq_authlim.h. */
#include "cq_authlim.h"

#include "cq_alloc.h"
#include "cq_smap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define HOST_MAX 64

typedef struct addr_ent {
    char host[HOST_MAX]; /* the map's key */
    uint32_t failures;   /* in the current window */
    uint32_t blocks;     /* blocks in a row */
    uint64_t last_ms;    /* last failure, or the end of the last block if later */
    uint64_t until_ms;   /* blocked before this time */
} addr_ent_t;

struct cq_authlim {
    cq_authlim_opts_t o;
    pthread_mutex_t mu;
    cq_smap_t map; /* host -> addr_ent_t, under mu */
    uint64_t refused[CQ_AUTHLIM__PORTS], blocks_total;
    uint64_t log_sec, log_lines, log_suppressed;
};

cq_authlim_t *cq_authlim_new(const cq_authlim_opts_t *o)
{
    cq_authlim_t *l = cq_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->o = *o;
    if (!l->o.max_addrs)
        l->o.max_addrs = CQ_AUTHLIM_ADDRS_DFL;
    pthread_mutex_init(&l->mu, NULL);
    cq_smap_init(&l->map, false);
    return l;
}

cq_authlim_t *cq_authlim_free(cq_authlim_t *l)
{
    if (!l)
        return NULL;
    void *v;
    for (uint32_t i = 0; cq_smap_next(&l->map, &i, NULL, &v);)
        cq_free(v);
    cq_smap_done(&l->map);
    pthread_mutex_destroy(&l->mu);
    cq_free(l);
    return NULL;
}

/* ---- addresses ---------------------------------------------------------------------------- */

size_t cq_peer_host(const char *peer, char *out, size_t cap)
{
    const char *s = peer ? peer : "", *e;
    if (*s == '[') {
        s++;
        e = strchr(s, ']');
    } else {
        e = strrchr(s, ':');
        if (e && strchr(s, ':') != e) /* a bare IPv6 address */
            e = NULL;
    }
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, s, n);
    out[n] = '\0';
    return n;
}

bool cq_peer_is_loopback(const char *peer)
{
    char h[HOST_MAX];
    struct in_addr a4;
    struct in6_addr a6;
    cq_peer_host(peer, h, sizeof(h));
    if (strcasecmp(h, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) != 1)
        return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6))
        return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

bool cq_token_eq(const char *a, const char *b)
{
    const volatile unsigned char *x = (const unsigned char *)(a ? a : "");
    const volatile unsigned char *y = (const unsigned char *)(b ? b : "");
    size_t nx = strlen((const char *)x), ny = strlen((const char *)y);
    size_t n = nx > ny ? nx : ny;
    unsigned diff = nx != ny;
    for (size_t i = 0; i < n; i++) /* every byte of the longer one, past the other's end as 0 */
        diff |= (unsigned)((i < nx ? x[i] : 0) ^ (i < ny ? y[i] : 0));
    return diff == 0;
}

/* ---- the budget --------------------------------------------------------------------------- */

/* An entry whose window ended is as good as a new one. */
static void refresh(const cq_authlim_t *l, addr_ent_t *e, uint64_t now)
{
    if (now >= e->until_ms && now - e->last_ms > l->o.window_ms) {
        e->failures = 0;
        e->blocks = 0;
    }
}

/* Evicts the entry idle longest, an unblocked one if there is any. Under mu. */
static void evict_one(cq_authlim_t *l, uint64_t now)
{
    const char *victim = NULL;
    bool victim_blocked = true;
    uint64_t oldest = UINT64_MAX;
    const char *k;
    void *v;
    for (uint32_t i = 0; cq_smap_next(&l->map, &i, &k, &v);) {
        const addr_ent_t *e = v;
        bool blocked = now < e->until_ms;
        if ((victim_blocked && !blocked) || (blocked == victim_blocked && e->last_ms < oldest)) {
            victim = k;
            victim_blocked = blocked;
            oldest = e->last_ms;
        }
    }
    if (victim)
        cq_free(cq_smap_del(&l->map, victim));
}

/* The entry of host, created when create is set. Under mu. NULL on OOM or when absent. */
static addr_ent_t *entry(cq_authlim_t *l, const char *host, bool create, uint64_t now)
{
    addr_ent_t *e = cq_smap_get(&l->map, host);
    if (e || !create)
        return e;
    if (cq_smap_count(&l->map) >= l->o.max_addrs)
        evict_one(l, now);
    if (!(e = cq_calloc(1, sizeof(*e))))
        return NULL;
    snprintf(e->host, sizeof(e->host), "%s", host);
    e->last_ms = now;
    if (cq_smap_put(&l->map, e->host, e) < 0) {
        cq_free(e);
        return NULL;
    }
    return e;
}

bool cq_authlim_blocked(cq_authlim_t *l, const char *peer, cq_authlim_port_t port, uint64_t now_ms)
{
    char host[HOST_MAX];
    if (!l || !l->o.max_failures)
        return false;
    cq_peer_host(peer, host, sizeof(host));
    pthread_mutex_lock(&l->mu);
    addr_ent_t *e = entry(l, host, false, now_ms);
    bool blocked = e && now_ms < e->until_ms;
    if (blocked)
        l->refused[port < CQ_AUTHLIM__PORTS ? port : 0]++;
    pthread_mutex_unlock(&l->mu);
    return blocked;
}

bool cq_authlim_failed(cq_authlim_t *l, const char *peer, uint64_t now_ms)
{
    char host[HOST_MAX];
    if (!l || !l->o.max_failures)
        return false;
    cq_peer_host(peer, host, sizeof(host));
    bool blocked = false;
    pthread_mutex_lock(&l->mu);
    addr_ent_t *e = entry(l, host, true, now_ms);
    if (e) {
        refresh(l, e, now_ms);
        e->last_ms = now_ms > e->last_ms ? now_ms : e->last_ms;
        if (++e->failures >= l->o.max_failures) {
            uint32_t mult = e->blocks >= 6 ? CQ_AUTHLIM_BACKOFF_MAX : 1u << e->blocks;
            e->until_ms = now_ms + (uint64_t)l->o.backoff_ms * mult;
            e->last_ms = e->until_ms; /* the window restarts when the block ends */
            e->failures = 0;
            e->blocks++;
            l->blocks_total++;
            blocked = true;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return blocked;
}

bool cq_authlim_log_allow(cq_authlim_t *l, uint64_t now_ms, char *note, size_t cap)
{
    uint64_t suppressed = 0;
    note[0] = '\0';
    if (!l)
        return true;
    pthread_mutex_lock(&l->mu);
    if (now_ms / 1000 != l->log_sec) {
        l->log_sec = now_ms / 1000;
        l->log_lines = 0;
    }
    bool ok = l->log_lines < CQ_AUTHLIM_LOG_PER_S;
    if (ok) {
        l->log_lines++;
        suppressed = l->log_suppressed;
        l->log_suppressed = 0;
    } else {
        l->log_suppressed++;
    }
    pthread_mutex_unlock(&l->mu);
    if (ok && suppressed)
        snprintf(note, cap, " (%llu similar lines suppressed)", (unsigned long long)suppressed);
    return ok;
}

int cq_authlim_metrics_append(void *ud, cq_sbuf_t *out)
{
    static const char *const names[CQ_AUTHLIM__PORTS] = {"channel", "mq", "mqhttp"};
    cq_authlim_t *l = ud;
    char buf[1280];
    int n;
    pthread_mutex_lock(&l->mu);
    n = snprintf(buf, sizeof(buf),
                 "# HELP chanq_auth_addr_refused_total Authentications refused by the per-address "
                 "budget of failures, by port.\n"
                 "# TYPE chanq_auth_addr_refused_total counter\n");
    for (int p = 0; p < CQ_AUTHLIM__PORTS; p++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                      "chanq_auth_addr_refused_total{port=\"%s\"} %llu\n", names[p],
                      (unsigned long long)l->refused[p]);
    n += snprintf(buf + n, sizeof(buf) - (size_t)n,
                  "# HELP chanq_auth_addr_blocks_total Addresses blocked for too many failed "
                  "authentications.\n"
                  "# TYPE chanq_auth_addr_blocks_total counter\nchanq_auth_addr_blocks_total "
                  "%llu\n# HELP chanq_auth_addr_tracked Addresses whose failures are counted "
                  "now.\n# TYPE chanq_auth_addr_tracked gauge\nchanq_auth_addr_tracked %u\n",
                  (unsigned long long)l->blocks_total, cq_smap_count(&l->map));
    pthread_mutex_unlock(&l->mu);
    return cq_sbuf_append(out, buf, (size_t)n);
}
