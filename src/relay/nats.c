/* nats.c - the relay's network over NATS (cq_relay_nats.h). The only file that includes
 * libnats. */
#include "cq_relay_nats.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef CQ_HAVE_NATS
#include <nats/nats.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define MAX_URLS 16

struct cq_relay_nats {
    cq_relay_nats_conf_t conf;
    natsOptions *opts;
    natsConnection *nc;
    natsSubscription *sub;
    /* callbacks in progress, and the flag that turns them away once closing (see close) */
    _Atomic int busy;
    _Atomic bool closing;
    _Atomic uint64_t connects, disconnects, reconnects, publish_errors, async_errors;
    _Atomic bool connected;
    _Atomic bool closed; /* the closed callback ran: libnats calls nothing of ours after it */
};

/* Library opens, for nats_Close() after the last close (LeakSanitizer sees its globals). */
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static int lib_users;

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Every callback enters through here: false once the handle is closing. */
static bool cb_enter(cq_relay_nats_t *n)
{
    atomic_fetch_add(&n->busy, 1);
    if (atomic_load(&n->closing)) {
        atomic_fetch_sub(&n->busy, 1);
        return false;
    }
    return true;
}

static void cb_leave(cq_relay_nats_t *n)
{
    atomic_fetch_sub(&n->busy, 1);
}

static void state(cq_relay_nats_t *n, natsConnection *nc, cq_relay_nats_state_t st)
{
    char url[256] = "";
    if (st != CQ_RELAY_NATS_DISCONNECTED && st != CQ_RELAY_NATS_CLOSED)
        (void)natsConnection_GetConnectedUrl(nc, url, sizeof(url));
    if (n->conf.on_state)
        n->conf.on_state(n->conf.ud, st, url);
}

static void on_connected(natsConnection *nc, void *cl)
{
    cq_relay_nats_t *n = cl;
    if (!cb_enter(n))
        return;
    atomic_fetch_add(&n->connects, 1);
    atomic_store(&n->connected, true);
    state(n, nc, CQ_RELAY_NATS_CONNECTED);
    cb_leave(n);
}

static void on_disconnected(natsConnection *nc, void *cl)
{
    cq_relay_nats_t *n = cl;
    if (!cb_enter(n))
        return;
    atomic_fetch_add(&n->disconnects, 1);
    atomic_store(&n->connected, false);
    state(n, nc, CQ_RELAY_NATS_DISCONNECTED);
    cb_leave(n);
}

static void on_reconnected(natsConnection *nc, void *cl)
{
    cq_relay_nats_t *n = cl;
    if (!cb_enter(n))
        return;
    atomic_fetch_add(&n->reconnects, 1);
    atomic_store(&n->connected, true);
    state(n, nc, CQ_RELAY_NATS_RECONNECTED);
    cb_leave(n);
}

/* libnats's last callback for a connection: after it, n may be freed (cq_relay_nats_close). */
static void on_closed(natsConnection *nc, void *cl)
{
    (void)nc;
    cq_relay_nats_t *n = cl;
    atomic_store(&n->closed, true);
}

static void on_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *cl)
{
    (void)nc, (void)sub, (void)err;
    cq_relay_nats_t *n = cl;
    atomic_fetch_add(&n->async_errors, 1); /* a slow consumer: the link asks again */
}

static void on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *cl)
{
    (void)nc, (void)sub;
    cq_relay_nats_t *n = cl;
    if (cb_enter(n)) {
        int len = natsMsg_GetDataLength(m);
        if (len > 0)
            n->conf.on_packet(n->conf.ud, (const uint8_t *)natsMsg_GetData(m), (size_t)len);
        cb_leave(n);
    }
    natsMsg_Destroy(m);
}

/* "a,b,c" -> servers; the copies live in buf. Returns the count, 0 when none or too many. */
static int split_urls(const char *urls, char *buf, size_t buflen, const char **out)
{
    if (strlen(urls) >= buflen)
        return 0;
    strcpy(buf, urls);
    int k = 0;
    for (char *save = NULL, *u = strtok_r(buf, ",", &save); u; u = strtok_r(NULL, ",", &save)) {
        while (*u == ' ')
            u++;
        if (!*u)
            continue;
        if (k == MAX_URLS)
            return 0;
        out[k++] = u;
    }
    return k;
}

static natsStatus set_auth(natsOptions *o, const cq_relay_nats_conf_t *c)
{
    natsStatus s = NATS_OK;
    if (c->user && *c->user)
        s = natsOptions_SetUserInfo(o, c->user, c->password ? c->password : "");
    if (s == NATS_OK && c->token && *c->token)
        s = natsOptions_SetToken(o, c->token);
    if (s == NATS_OK && (c->tls || (c->tls_ca && *c->tls_ca)))
        s = natsOptions_SetSecure(o, true);
    if (s == NATS_OK && c->tls_ca && *c->tls_ca)
        s = natsOptions_LoadCATrustedCertificates(o, c->tls_ca);
    if (s == NATS_OK && c->tls_cert && *c->tls_cert)
        s = natsOptions_LoadCertificatesChain(o, c->tls_cert, c->tls_key ? c->tls_key : "");
    return s;
}

static natsStatus set_opts(cq_relay_nats_t *n, const cq_relay_nats_conf_t *c, const char **urls,
                           int nurls)
{
    natsOptions *o = n->opts;
    natsStatus s = natsOptions_SetServers(o, urls, nurls);
    if (s == NATS_OK)
        s = set_auth(o, c);
    if (s == NATS_OK && c->name && *c->name)
        s = natsOptions_SetName(o, c->name);
    /* the 1 ms default coalescing is most of a hop's latency (cluster-recipes.md finding 5) */
    if (s == NATS_OK)
        s = natsOptions_SetSendAsap(o, true);
    if (s == NATS_OK)
        s = natsOptions_SetNoEcho(o, true);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1); /* a relay node never gives up its network */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, c->reconnect_wait_ms ? c->reconnect_wait_ms : 100);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, 2000);
    if (s == NATS_OK)
        s = natsOptions_SetDisconnectedCB(o, on_disconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetReconnectedCB(o, on_reconnected, n);
    if (s == NATS_OK)
        s = natsOptions_SetErrorHandler(o, on_error, n);
    if (s == NATS_OK)
        s = natsOptions_SetClosedCB(o, on_closed, n);
    if (s == NATS_OK)
        s = natsOptions_SetRetryOnFailedConnect(o, true, on_connected, n);
    return s;
}

void cq_relay_nats_quiesce(cq_relay_nats_t *n)
{
    if (!n)
        return;
    atomic_store(&n->closing, true);
    /* a callback that entered before closing was set finishes first */
    while (atomic_load(&n->busy))
        sched_yield();
}

void cq_relay_nats_close(cq_relay_nats_t *n)
{
    if (!n)
        return;
    atomic_store(&n->closing, true);
    if (n->sub)
        natsSubscription_Destroy(n->sub);
    bool done = true;
    if (n->nc) {
        natsConnection_Close(n->nc);
        /* the disconnected and closed callbacks run on a library thread after Close returns:
         * n lives until the closed one, the last, has run (bounded: leaked, never freed early) */
        for (int i = 0; i < 5000 && !atomic_load(&n->closed); i++) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        done = atomic_load(&n->closed);
        natsConnection_Destroy(n->nc);
    }
    /* a callback that entered before closing was set finishes before anything is freed */
    while (atomic_load(&n->busy))
        sched_yield();
    natsOptions_Destroy(n->opts);
    if (done)
        cq_free(n);
    pthread_mutex_lock(&lib_mu);
    if (--lib_users == 0)
        nats_CloseAndWait(2000);
    pthread_mutex_unlock(&lib_mu);
}

int cq_relay_nats_open(const cq_relay_nats_conf_t *conf, cq_relay_nats_t **ret, char *err,
                       size_t errlen)
{
    const char *urls[MAX_URLS];
    char buf[2048];
    int nurls = conf && conf->urls ? split_urls(conf->urls, buf, sizeof(buf), urls) : 0;
    if (!conf || !conf->on_packet || nurls == 0) {
        seterr(err, errlen, "relay-nats: 1 to %d comma-separated nats:// URLs are needed",
               MAX_URLS);
        return -EINVAL;
    }
    cq_relay_nats_t *n = cq_calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    /* the callbacks only: libnats copies the strings, which are not kept here */
    n->conf = (cq_relay_nats_conf_t){
        .on_packet = conf->on_packet, .on_state = conf->on_state, .ud = conf->ud};
    pthread_mutex_lock(&lib_mu);
    natsStatus s = lib_users++ ? NATS_OK : nats_Open(-1);
    pthread_mutex_unlock(&lib_mu);
    if (s == NATS_OK)
        s = natsOptions_Create(&n->opts);
    if (s == NATS_OK)
        s = set_opts(n, conf, urls, nurls);
    if (s == NATS_OK) {
        s = natsConnection_Connect(&n->nc, n->opts);
        if (s == NATS_NOT_YET_CONNECTED)
            s = NATS_OK; /* retried in the background: on_connected says when */
        else if (s == NATS_OK)
            on_connected(n->nc, n);
    }
    if (s != NATS_OK) {
        seterr(err, errlen, "relay-nats: %s (%s)", natsStatus_GetText(s), nats_GetLastError(NULL));
        cq_relay_nats_close(n);
        return s == NATS_NO_MEMORY ? -ENOMEM : CQ_ECONFIG;
    }
    *ret = n;
    return 0;
}

int cq_relay_nats_subscribe(cq_relay_nats_t *n, const char *subject, char *err, size_t errlen)
{
    natsStatus s = natsConnection_Subscribe(&n->sub, n->nc, subject, on_msg, n);
    /* generous: a burst waits here while the relay thread catches up; past it, libnats drops
     * (counted: GetDropped) and the link's NACK recovers */
    if (s == NATS_OK)
        s = natsSubscription_SetPendingLimits(n->sub, 1 << 20, 256 << 20);
    if (s != NATS_OK) {
        seterr(err, errlen, "relay-nats: subscribe %s: %s", subject, natsStatus_GetText(s));
        return CQ_ECONFIG;
    }
    return 0;
}

void cq_relay_nats_stats(cq_relay_nats_t *n, cq_relay_nats_stats_t *ret)
{
    int64_t dropped = 0;
    if (n->sub)
        (void)natsSubscription_GetDropped(n->sub, &dropped);
    *ret = (cq_relay_nats_stats_t){atomic_load(&n->connects),     atomic_load(&n->disconnects),
                                   atomic_load(&n->reconnects),   atomic_load(&n->publish_errors),
                                   atomic_load(&n->async_errors), dropped,
                                   atomic_load(&n->connected)};
}

static int nats_publish(void *net, const char *subject, const uint8_t *p, size_t len)
{
    cq_relay_nats_t *n = net;
    natsStatus s = natsConnection_Publish(n->nc, subject, p, (int)len);
    if (s != NATS_OK) {
        atomic_fetch_add(&n->publish_errors, 1);
        return CQ_ELINK;
    }
    return 0;
}

#else /* !CQ_HAVE_NATS */

struct cq_relay_nats {
    int unused;
};

int cq_relay_nats_open(const cq_relay_nats_conf_t *conf, cq_relay_nats_t **ret, char *err,
                       size_t errlen)
{
    (void)conf, (void)ret;
    if (err && errlen)
        snprintf(err, errlen, "relay-nats: chanqd was built without libnats (libnats-dev)");
    return -ENOTSUP;
}

int cq_relay_nats_subscribe(cq_relay_nats_t *n, const char *subject, char *err, size_t errlen)
{
    (void)n, (void)subject, (void)err, (void)errlen;
    return -ENOTSUP;
}

void cq_relay_nats_close(cq_relay_nats_t *n)
{
    (void)n;
}

void cq_relay_nats_quiesce(cq_relay_nats_t *n)
{
    (void)n;
}

void cq_relay_nats_stats(cq_relay_nats_t *n, cq_relay_nats_stats_t *ret)
{
    (void)n;
    memset(ret, 0, sizeof(*ret));
}

static int nats_publish(void *net, const char *subject, const uint8_t *p, size_t len)
{
    (void)net, (void)subject, (void)p, (void)len;
    return -ENOTSUP;
}

#endif

const cq_relay_net_ops_t cq_relay_nats_ops = {nats_publish};
