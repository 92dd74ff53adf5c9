/* chanq_cluster_sync.c - the cluster client's real transport (one chanq_mq_sync_t per server)
 * and ZooKeeper discovery (see chanq_cluster.h). */
#include "chanq_cluster.h"
#include "chanq_mq_sync.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CHANQ_HAVE_ZK
#define THREADED
#include <zookeeper/zookeeper.h>
#endif

typedef struct sync_tr {
    uint32_t module_id, client_type;
    int timeout_ms;
    char *token;
    chanq_mq_sync_t *conn[CHANQ_CLUSTER_SERVERS_MAX];
} sync_tr_t;

/* Stream and socket errors leave the connection unusable: the cluster sees a closed one. */
static int map_err(sync_tr_t *t, uint32_t idx, int rc)
{
    if (rc == 0 || rc == CQ_ETIMEOUT || rc == -ENOMEM)
        goto out;
    bool server_code =
        rc <= -1000 && rc != CQ_ECLOSED && rc != CQ_EHEADER && rc != CQ_EBADLEN && rc != CQ_EJSON;
    if (server_code || rc == -EREMOTEIO)
        return rc;
    rc = CQ_ECLOSED;
out:
    if (rc != 0 && rc != -ENOMEM)
        t->conn[idx] = chanq_mq_sync_close(t->conn[idx]);
    return rc;
}

static int st_keepalive(void *ud, uint32_t idx, chanq_cluster_hello_t *ret)
{
    sync_tr_t *t = ud;
    if (!t->conn[idx])
        return CQ_ECLOSED;
    cq_mq_msg_t *m = NULL;
    int rc = map_err(t, idx, chanq_mq_sync_keepalive_resp(t->conn[idx], &m));
    if (rc == 0 && (m->has & CQ_MQ_F_WEIGHT))
        ret->weight = m->weight;
#ifdef CHANQ_MQ_HAVE_SHARD /* the codec decodes the cluster fields (meson checks) */
    if (rc == 0 && (m->has & CQ_MQ_F_SHARD))
        ret->shard = m->shard;
    if (rc == 0 && (m->has & CQ_MQ_F_MASTER))
        ret->master = m->master ? 1 : 0;
#endif
    cq_mq_msg_free(m);
    return rc;
}

static int st_connect(void *ud, uint32_t idx, const char *addr, chanq_cluster_hello_t *ret)
{
    sync_tr_t *t = ud;
    char host[CHANQ_CLUSTER_ADDR_MAX + 1];
    uint16_t port;
    t->conn[idx] = chanq_mq_sync_close(t->conn[idx]);
    if (chanq_mq_sync_parse_addr(addr, host, sizeof(host), &port) < 0)
        return -ECONNREFUSED;
    int rc = chanq_mq_sync_connect(host, port, t->module_id, t->token, t->client_type,
                                   t->timeout_ms, NULL, 0, &t->conn[idx]);
    if (rc < 0)
        return rc > -1000 && rc != -ENOMEM ? -ECONNREFUSED : rc;
    chanq_mq_sync_set_timeout(t->conn[idx], t->timeout_ms);
    return st_keepalive(ud, idx, ret);
}

static void st_disconnect(void *ud, uint32_t idx)
{
    sync_tr_t *t = ud;
    t->conn[idx] = chanq_mq_sync_close(t->conn[idx]);
}

static int st_produce(void *ud, uint32_t idx, const chanq_mq_produce_t *req, int64_t *ret_offsets)
{
    sync_tr_t *t = ud;
    if (!t->conn[idx])
        return CQ_ECLOSED;
    return map_err(t, idx, chanq_mq_sync_produce(t->conn[idx], req, ret_offsets));
}

static int st_consume(void *ud, uint32_t idx, uint32_t shard, const char *topic, int64_t offset,
                      uint32_t max_count, chanq_cluster_batch_t *out)
{
    sync_tr_t *t = ud;
    cq_mq_msg_t *m = NULL;
    if (!t->conn[idx])
        return CQ_ECLOSED;
    int rc = map_err(t, idx, chanq_mq_sync_consume(t->conn[idx], topic, offset, max_count, &m));
    for (size_t i = 0; rc == 0 && i < m->nitems; i++) {
        const cq_mq_item_t *it = &m->items[i];
        int64_t pid = 0, seq = 0;
#ifdef CHANQ_MQ_HAVE_SHARD
        pid = it->producer_id;
        seq = it->seq;
#endif
        rc = chanq_cluster_batch_add(out, shard, it->offset, it->time, pid, seq, it->content,
                                     it->len);
    }
    if (rc == 0 && (m->has & CQ_MQ_F_OFFSET))
        out->last_offset = m->offset;
    cq_mq_msg_free(m);
    return rc;
}

static int st_last_offset(void *ud, uint32_t idx, const char *topic, int64_t *ret_last)
{
    sync_tr_t *t = ud;
    if (!t->conn[idx])
        return CQ_ECLOSED;
    return map_err(t, idx, chanq_mq_sync_offset(t->conn[idx], topic, NULL, NULL, ret_last));
}

static int st_read_master(void *ud, uint32_t idx, char *addr, size_t cap)
{
    sync_tr_t *t = ud;
    const chanq_mq_sync_t *s = t->conn[idx];
    if (!s || chanq_mq_sync_errcode(s) != CQ_MQ_ERR_READ_ON_MASTER)
        return -ENOENT;
    return chanq_mq_read_master(chanq_mq_sync_errmsg(s), addr, cap) == 0 ? 0 : -ENOENT;
}

static void st_free(void *ud)
{
    sync_tr_t *t = ud;
    if (!t)
        return;
    for (size_t i = 0; i < CHANQ_CLUSTER_SERVERS_MAX; i++)
        chanq_mq_sync_close(t->conn[i]);
    cq_free(t->token);
    cq_free(t);
}

int chanq_cluster_sync_transport(uint32_t module_id, const char *token, uint32_t client_type,
                                 int timeout_ms, chanq_cluster_transport_t *ret)
{
    sync_tr_t *t = cq_calloc(1, sizeof(*t));
    size_t len = token ? strlen(token) : 0;
    char *tok = cq_malloc(len + 1);
    if (!t || !tok) {
        cq_free(t);
        cq_free(tok);
        return -ENOMEM;
    }
    memcpy(tok, token ? token : "", len + 1);
    *t = (sync_tr_t){module_id, client_type, timeout_ms, tok, {0}};
    *ret = (chanq_cluster_transport_t){
        t,          st_connect,     st_disconnect, st_keepalive,  st_produce,
        st_consume, st_last_offset, st_free,       st_read_master};
    return 0;
}

chanq_cluster_t *chanq_cluster_sync_new(const chanq_cluster_server_t *servers, size_t n,
                                        uint32_t module_id, const char *token, uint32_t client_type,
                                        int timeout_ms, const chanq_cluster_opts_t *opts)
{
    chanq_cluster_transport_t tr;
    if (chanq_cluster_sync_transport(module_id, token, client_type, timeout_ms, &tr) < 0)
        return NULL;
    return chanq_cluster_new(servers, n, &tr, opts);
}

/* ---- ZooKeeper discovery ------------------------------------------------------------------ */

#ifdef CHANQ_HAVE_ZK

static int cmp_num_suffix(const void *a, const void *b)
{
    /* Names end in a sequence number (10 digits for SEQUENCE nodes); shard names are numbers. */
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t lx = strlen(x), ly = strlen(y);
    const char *dx = x + lx, *dy = y + ly;
    while (dx > x && dx[-1] >= '0' && dx[-1] <= '9')
        dx--;
    while (dy > y && dy[-1] >= '0' && dy[-1] <= '9')
        dy--;
    unsigned long long nx = strtoull(dx, NULL, 10), ny = strtoull(dy, NULL, 10);
    return nx < ny ? -1 : nx > ny ? 1 : strcmp(x, y);
}

static int zk_wait_connected(zhandle_t *zh, int timeout_ms)
{
    for (int waited = 0; zoo_state(zh) != ZOO_CONNECTED_STATE; waited += 10) {
        if (waited >= timeout_ms)
            return CQ_ETIMEOUT;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

typedef struct zk_list {
    chanq_cluster_server_t *v;
    size_t cap, n;
} zk_list_t;

/* The members of one shard, by sequence. */
static int zk_shard(zhandle_t *zh, const char *root, const char *shard, zk_list_t *l, char *err,
                    size_t errlen)
{
    char path[512], data[512];
    struct String_vector sv = {0, NULL};
    snprintf(path, sizeof(path), "%s/shards/%s/members", root, shard);
    int zrc = zoo_get_children(zh, path, 0, &sv);
    if (zrc == ZNONODE)
        return 0;
    if (zrc != ZOK)
        return cq_err_fmt(err, errlen, -EIO, "zookeeper: %s: %s", path, zerror(zrc));
    qsort(sv.data, (size_t)sv.count, sizeof(char *), cmp_num_suffix);
    int rc = 0;
    for (int i = 0; i < sv.count && rc == 0; i++) {
        snprintf(path, sizeof(path), "%s/shards/%s/members/%s", root, shard, sv.data[i]);
        int len = (int)sizeof(data) - 1;
        if (zoo_get(zh, path, 0, data, &len, NULL) != ZOK || len < 0)
            continue; /* gone meanwhile */
        data[len] = '\0';
        bool elig;
        chanq_cluster_server_t e = {(uint32_t)strtoul(shard, NULL, 10), "", (uint32_t)l->n};
        if (chanq_cluster_parse_member(data, e.addr, sizeof(e.addr), &elig) < 0)
            continue;
        if (l->n == l->cap)
            rc = cq_err_fmt(err, errlen, CQ_ELIMIT, "more than %zu members", l->cap);
        else
            l->v[l->n++] = e;
    }
    deallocate_String_vector(&sv);
    return rc;
}

int chanq_cluster_discover_zk(const char *hosts, const char *root, int timeout_ms,
                              chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                              size_t errlen)
{
    root = root ? root : "/chanq";
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zhandle_t *zh = zookeeper_init(hosts, NULL, timeout_ms > 0 ? timeout_ms : 10000, NULL, NULL, 0);
    if (!zh)
        return cq_err_fmt(err, errlen, -EIO, "zookeeper: cannot start a session with %s", hosts);
    struct String_vector sv = {0, NULL};
    zk_list_t l = {ret, cap, 0};
    int rc = zk_wait_connected(zh, timeout_ms > 0 ? timeout_ms : 10000);
    if (rc < 0) {
        cq_err_fmt(err, errlen, rc, "zookeeper: no session with %s", hosts);
        goto cleanup;
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/shards", root);
    int zrc = zoo_get_children(zh, path, 0, &sv);
    if (zrc != ZOK) {
        rc = cq_err_fmt(err, errlen, zrc == ZNONODE ? -ENOENT : -EIO, "zookeeper: %s: %s", path,
                        zerror(zrc));
        goto cleanup;
    }
    qsort(sv.data, (size_t)sv.count, sizeof(char *), cmp_num_suffix);
    for (int i = 0; i < sv.count && rc == 0; i++)
        rc = zk_shard(zh, root, sv.data[i], &l, err, errlen);
    if (rc == 0 && l.n == 0)
        rc = cq_err_fmt(err, errlen, -ENOENT, "zookeeper: no members under %s", path);
    if (rc == 0)
        *ret_n = l.n;
cleanup:
    deallocate_String_vector(&sv);
    zookeeper_close(zh);
    return rc;
}

#else

int chanq_cluster_discover_zk(const char *hosts, const char *root, int timeout_ms,
                              chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                              size_t errlen)
{
    (void)hosts, (void)root, (void)timeout_ms, (void)ret, (void)cap, (void)ret_n;
    return cq_err_fmt(err, errlen, -ENOTSUP, "libchanq was built without libzookeeper");
}

#endif
