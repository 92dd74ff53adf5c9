/* chanq_cluster_mgr.c - the cluster client's server list from the managers (req_svrconfig,
 * doc/protocol-mq.md "Management port"): the request and its answer through the management
 * codec (cq_mqmgr.h), one manager after the other, over an injected exchange (tests) or TCP.
 */
#include "chanq_cluster.h"
#include "chanq_mq_sync.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mqmgr.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MGR_ANSWER_MAX (256u * 1024u) /* a svrconfig answer of CHANQ_CLUSTER_SERVERS_MAX fits */

/* ---- TCP: one connection per request ------------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline. 0, CQ_ETIMEOUT or -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    struct pollfd p = {fd, events, 0};
    int64_t left = deadline - mono_ms();
    int k = left > 0 ? poll(&p, 1, (int)left) : 0;
    return k > 0 ? 0 : k == 0 ? CQ_ETIMEOUT : -errno;
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (k < 0) {
            int r = wait_fd(fd, POLLOUT, deadline);
            if (r < 0)
                return r;
            continue;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads until one whole frame is in resp. */
static int recv_frame(int fd, uint8_t *resp, size_t cap, size_t *ret_n, int64_t deadline)
{
    size_t have = 0;
    for (;;) {
        cq_mq_frame_t f;
        ssize_t k = have ? cq_mq_parse(resp, have, (uint32_t)cap, &f) : 0;
        if (k < 0)
            return (int)k;
        if (k > 0) {
            *ret_n = (size_t)k;
            return 0;
        }
        if (have == cap)
            return CQ_EBADLEN;
        ssize_t r = read(fd, resp + have, cap - have);
        if (r == 0)
            return CQ_ECLOSED;
        if (r < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (r > 0) {
            have += (size_t)r;
            continue;
        }
        int w = wait_fd(fd, POLLIN, deadline);
        if (w < 0)
            return w;
    }
}

static int tcp_exchange(void *ud, const char *addr, const uint8_t *req, size_t n, uint8_t *resp,
                        size_t cap, size_t *ret_n, int timeout_ms)
{
    (void)ud;
    char host[256];
    uint16_t port;
    if (chanq_mq_sync_parse_addr(addr, host, sizeof(host), &port) < 0)
        return -EINVAL;
    int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 5000);
    int fd = chanq__mq_tcp_connect(host, port, timeout_ms);
    if (fd < 0)
        return fd;
    int r = send_all(fd, req, n, deadline);
    if (r == 0)
        r = recv_frame(fd, resp, cap, ret_n, deadline);
    close(fd);
    return r;
}

static const chanq_cluster_mgr_io_t tcp_io = {tcp_exchange, NULL};

/* ---- one manager ----------------------------------------------------------------------------- */

static int request(uint32_t module_id, const char *token, uint32_t askid, uint8_t **ret,
                   size_t *ret_n)
{
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG, (uint16_t)askid);
    if (!m)
        return -ENOMEM;
    m->askid = askid;
    m->has_askid = true;
    m->module_id = module_id;
    int r = cq_mqmgr_msg_set_str(m, &m->token, token ? token : "");
    if (r == 0)
        r = cq_mqmgr_encode(m, ret, ret_n);
    cq_mqmgr_msg_free(m);
    return r;
}

/* The answer to our svrconfig, decoded into *ret (owned) when its err_code is 0; else the CQ_E*
 * code of its err_code, CQ_EJSON/CQ_EFIELD (not an answer), with why. */
static int answer(const uint8_t *p, size_t n, uint32_t askid, cq_mqmgr_msg_t **ret, char *why,
                  size_t wlen)
{
    cq_mq_frame_t f;
    cq_mqmgr_msg_t *m = NULL;
    ssize_t k = cq_mq_parse(p, n, (uint32_t)n, &f);
    int r = k > 0 ? cq_mqmgr_decode(&f, 0, &m, why, wlen) : CQ_EBADLEN;
    if (r == 0 && (m->kind != CQ_MQMGR_SVRCONFIG_RESP || m->askid != askid)) {
        snprintf(why, wlen, "not the answer to our svrconfig (%s)", cq_mqmgr_kind_name(m->kind));
        r = m->kind == CQ_MQMGR_ERROR_FRAME && m->err_code ? chanq_mq_err(m->err_code) : CQ_EJSON;
    } else if (r == 0 && m->err_code) {
        snprintf(why, wlen, "err_code %u: %s", m->err_code, m->err_msg ? m->err_msg : "");
        r = chanq_mq_err(m->err_code);
    }
    if (r == 0)
        *ret = m;
    else
        cq_mqmgr_msg_free(m);
    return r;
}

/* What a caller takes from an answer: its servers or its relay nodes into out[0..cap). */
typedef int (*take_fn)(const cq_mqmgr_msg_t *m, void *out, size_t cap, size_t *ret_n, char *why,
                       size_t wlen);

static int take_servers(const cq_mqmgr_msg_t *m, void *out, size_t cap, size_t *ret_n, char *why,
                        size_t wlen)
{
    chanq_cluster_server_t *ret = out;
    if (m->nservers > cap) {
        snprintf(why, wlen, "%zu servers, more than %zu", m->nservers, cap);
        return CQ_ELIMIT;
    }
    for (size_t i = 0; i < m->nservers; i++) {
        const cq_mqmgr_server_t *s = &m->servers[i];
        bool v6 = strchr(s->ip, ':') != NULL;
        ret[i].shard = s->shard;
        ret[i].index = (uint32_t)i;
        if ((size_t)snprintf(ret[i].addr, sizeof(ret[i].addr), v6 ? "[%s]:%u" : "%s:%u", s->ip,
                             s->port) >= sizeof(ret[i].addr))
            return -EINVAL;
    }
    *ret_n = m->nservers;
    return 0;
}

static int take_relay_nodes(const cq_mqmgr_msg_t *m, void *out, size_t cap, size_t *ret_n,
                            char *why, size_t wlen)
{
    chanq_cluster_relay_node_t *ret = out;
    if (m->nrelay_nodes > cap) {
        snprintf(why, wlen, "%zu relay nodes, more than %zu", m->nrelay_nodes, cap);
        return CQ_ELIMIT;
    }
    for (size_t i = 0; i < m->nrelay_nodes; i++) {
        const cq_mqmgr_relay_node_t *n = &m->relay_nodes[i];
        char *dst[CQ_MQMGR_NTRANSPORTS] = {ret[i].tcp, ret[i].ws, ret[i].wss, ret[i].kcp};
        memset(&ret[i], 0, sizeof(ret[i]));
        ret[i].node = n->node;
        snprintf(ret[i].cluster, sizeof(ret[i].cluster), "%s", n->cluster);
        for (int t = 0; t < CQ_MQMGR_NTRANSPORTS; t++)
            if ((size_t)snprintf(dst[t], CHANQ_CLUSTER_ADDR_MAX + 1, "%s", n->addrs[t]) >
                CHANQ_CLUSTER_ADDR_MAX)
                return -EINVAL;
    }
    *ret_n = m->nrelay_nodes;
    return 0;
}

static int ask_one(const chanq_cluster_mgr_io_t *io, const char *addr, uint32_t module_id,
                   const char *token, int timeout_ms, take_fn take, void *out, size_t cap,
                   size_t *ret_n, char *err, size_t errlen)
{
    static const uint32_t askid = 1; /* one request per exchange */
    uint8_t *req = NULL, *resp = cq_malloc(MGR_ANSWER_MAX);
    size_t n = 0, rn = 0;
    cq_mqmgr_msg_t *m = NULL;
    char why[256] = "";
    int r = resp ? request(module_id, token, askid, &req, &n) : -ENOMEM;
    if (r == 0)
        r = io->exchange(io->ud, addr, req, n, resp, MGR_ANSWER_MAX, &rn, timeout_ms);
    if (r == 0)
        r = answer(resp, rn, askid, &m, why, sizeof(why));
    if (r == 0)
        r = take(m, out, cap, ret_n, why, sizeof(why));
    if (r < 0)
        snprintf(err, errlen, "%s", why[0] ? why : cq_strerror(r));
    cq_mqmgr_msg_free(m);
    cq_free(req);
    cq_free(resp);
    return r;
}

/* The managers of mgrs one after the other until one answers err 0. */
static int ask_managers(const chanq_cluster_mgr_io_t *io, const char *mgrs, uint32_t module_id,
                        const char *token, int timeout_ms, take_fn take, void *out, size_t cap,
                        size_t *ret_n, char *err, size_t errlen)
{
    int r = -EINVAL;
    bool tried = false;
    char why[300] = "";
    if (!io)
        io = &tcp_io;
    for (const char *p = mgrs ? mgrs : ""; *p;) {
        size_t k = strcspn(p, ",");
        char addr[CHANQ_CLUSTER_ADDR_MAX + 1];
        snprintf(addr, sizeof(addr), "%.*s", (int)k, p);
        p += k + (p[k] == ',');
        if (!*addr)
            continue;
        tried = true;
        r = ask_one(io, addr, module_id, token, timeout_ms, take, out, cap, ret_n, why,
                    sizeof(why));
        if (r == 0)
            return 0;
        snprintf(err, errlen, "manager %s: %s", addr, why);
    }
    if (!tried)
        snprintf(err, errlen, "no manager address in \"%s\"", mgrs ? mgrs : "");
    return r;
}

int chanq_cluster_svrconfig_io(const chanq_cluster_mgr_io_t *io, const char *mgrs,
                               uint32_t module_id, const char *token, int timeout_ms,
                               chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                               size_t errlen)
{
    return ask_managers(io, mgrs, module_id, token, timeout_ms, take_servers, ret, cap, ret_n, err,
                        errlen);
}

int chanq_cluster_relay_nodes_io(const chanq_cluster_mgr_io_t *io, const char *mgrs,
                                 uint32_t module_id, const char *token, int timeout_ms,
                                 chanq_cluster_relay_node_t *ret, size_t cap, size_t *ret_n,
                                 char *err, size_t errlen)
{
    return ask_managers(io, mgrs, module_id, token, timeout_ms, take_relay_nodes, ret, cap, ret_n,
                        err, errlen);
}

int chanq_cluster_relay_nodes(const char *mgrs, uint32_t module_id, const char *token,
                              int timeout_ms, chanq_cluster_relay_node_t *ret, size_t cap,
                              size_t *ret_n, char *err, size_t errlen)
{
    return ask_managers(NULL, mgrs, module_id, token, timeout_ms, take_relay_nodes, ret, cap, ret_n,
                        err, errlen);
}

int chanq_cluster_svrconfig(const char *mgrs, uint32_t module_id, const char *token, int timeout_ms,
                            chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                            size_t errlen)
{
    return chanq_cluster_svrconfig_io(NULL, mgrs, module_id, token, timeout_ms, ret, cap, ret_n,
                                      err, errlen);
}
