/* cluster.c - chanqd's cluster composition: the coord runtime (src/coord) over ZooKeeper, the
 * control of our own MariaDB (src/store cq_repl), the engine's fence and role, and metrics.
 *
 * Threads: the coord runtime has its own thread and a database thread (cq_coordrt.h); the
 * role callback runs on the runtime thread and hands the role to the engine through its inbox
 * (cq_mqsrv_set_role: lock + uv_async_send). The fence is read on the MQ loop: one atomic load
 * and a clock read. A monitor thread of ours reads the replication status every second into a
 * snapshot under a mutex, which the admin thread renders; it has its own database connection,
 * so a slow status query never delays a fence or a promotion. */
#include "cluster.h"

#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_coord.h"
#include "cq_coordrt.h"
#include "cq_err.h"
#include "cq_log.h"
#if CQ_HAVE_MYSQL
#include "cq_repl.h"
#endif
#if CQ_HAVE_ZOOKEEPER
#include "cq_coordzk.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MONITOR_MS 1000

struct cq_main_cluster {
    const cq_config_t *cfg;
    cq_coordrt_t *rt;
    struct cq_repl *ctl; /* the runtime's database thread only */
    struct cq_repl *mon; /* the monitor thread only */
    bool use_db;         /* mysql backend: our database is controlled */
    cq_mqsrv_t *engine;
    _Atomic(cq_coordrt_t *) live; /* the fence reads it; NULL: no writes */
    cq_coord_db_ops_t db_ops;
    pthread_t mon_thread;
    bool mon_started, mon_stop;
    pthread_mutex_t mu; /* st, mon_stop */
    pthread_cond_t cv;
#if CQ_HAVE_MYSQL
    cq_repl_status_t st;
    bool st_read;          /* st holds a sample */
    uint64_t caught_up_ms; /* monotonic ms of the last sample with nothing waiting to apply */
#endif
    char adv[CQ_COORD_ADDR_MAX + 1], db[CQ_COORD_ADDR_MAX + 1];
};

static bool may_write(void *ud)
{
    cq_main_cluster_t *k = ud;
    cq_coordrt_t *rt = atomic_load_explicit(&k->live, memory_order_acquire);
    return rt && cq_coordrt_ack_until(rt) > cq_clock_mono_ms();
}

static void on_role(void *ud, cq_coord_role_t role, uint64_t epoch, const cq_coord_member_t *master)
{
    cq_main_cluster_t *k = ud;
    CQ_INFO("cluster", "shard %d: %s, epoch %llu, master %s", k->cfg->shard,
            cq_coord_role_name(role), (unsigned long long)epoch, master ? master->adv : "none");
    /* the master a slave sends readers to (--slave-reads off); none while this server is it,
     * or knows no master (down: it cannot tell) */
    bool other = role == CQ_COORD_SLAVE && master && strcmp(master->adv, k->adv) != 0;
    cq_mqsrv_set_master(k->engine, other ? master->adv : NULL);
    cq_mqsrv_set_role(k->engine, role == CQ_COORD_MASTER, (uint32_t)k->cfg->shard, epoch);
}

/* ---- cluster-wide topics (doc/cluster.md "Topics") ---------------------------------------- */

/* The registry's whole list (runtime thread): handed to the engine, which creates or sets on
 * its database what a master must. */
static void on_topics(void *ud, const cq_coord_topic_t *t, size_t n)
{
    cq_main_cluster_t *k = ud;
    cq_mqsrv_topic_decl_t *v = cq_calloc(n ? n : 1, sizeof(*v));
    int r = v ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && v; i++) {
        snprintf(v[i].name, sizeof(v[i].name), "%s", t[i].name);
        v[i].online = t[i].online;
        v[i].retention_days = t[i].retention > UINT32_MAX ? UINT32_MAX : (uint32_t)t[i].retention;
    }
    if (r == 0)
        r = cq_mqsrv_topics_apply(k->engine, v, n);
    cq_free(v);
    if (r < 0)
        CQ_WARN("cluster", "topic registry: %zu topics not applied: %s", n, cq_strerror(r));
}

/* A topic created or set online/offline through our engine (engine thread): to the registry,
 * where every shard's master applies it. Publishing queues; the runtime writes it. */
static void on_topic(void *ud, const char *name, bool online, uint32_t retention_days)
{
    cq_main_cluster_t *k = ud;
    cq_coordrt_t *rt = atomic_load_explicit(&k->live, memory_order_acquire);
    cq_coord_topic_t t = {.online = online, .retention = retention_days};
    snprintf(t.name, sizeof(t.name), "%s", name);
    int r = rt ? cq_coordrt_publish_topic(rt, &t) : CQ_ECLOSED;
    if (r < 0)
        CQ_WARN("cluster", "topic %s: not published to the registry: %s", name, cq_strerror(r));
    else
        CQ_INFO("cluster", "topic %s: published (online=%d retention=%u)", name, online,
                retention_days);
}

cq_main_cluster_t *cq_main_cluster_new(const cq_config_t *c)
{
    cq_main_cluster_t *k = cq_calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->cfg = c;
#if CQ_HAVE_MYSQL
    k->use_db = strcmp(c->store_backend, "mysql") == 0;
#endif
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    return k;
}

void cq_main_cluster_fence(cq_main_cluster_t *k, cq_mqsrv_opts_t *o)
{
    o->may_write = may_write;
    o->fence_ud = k;
    o->shard = (uint32_t)k->cfg->shard;
    o->slave = true; /* a member writes only once the runtime made it master */
    o->slave_reads_off = strcmp(k->cfg->slave_reads, "off") == 0;
    o->on_topic = on_topic;
    o->topic_ud = k;
}

/* ---- the replication monitor ------------------------------------------------------------ */
#if CQ_HAVE_MYSQL

static void *monitor_main(void *arg)
{
    cq_main_cluster_t *k = arg;
    pthread_mutex_lock(&k->mu);
    while (!k->mon_stop) {
        pthread_mutex_unlock(&k->mu);
        cq_repl_status_t st;
        memset(&st, 0, sizeof(st));
        (void)cq_repl_status(k->mon, &st); /* st.up false when it cannot */
        pthread_mutex_lock(&k->mu);
        k->st = st;
        k->st_read = true;
        /* Only a read that succeeded can show the standby caught up: a failed one (a slow
         * server under load) says nothing, and taking it as "caught up" restarted behind_ms
         * while the SQL thread was stopped, so the lag alert dropped and came back. */
        bool caught_up = st.up && (!st.replica || st.lag_transactions == 0);
        if (caught_up || !k->caught_up_ms)
            k->caught_up_ms = cq_clock_mono_ms();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += MONITOR_MS / 1000;
        while (!k->mon_stop && pthread_cond_timedwait(&k->cv, &k->mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static int open_repl(const cq_config_t *c, cq_repl_t **ret)
{
    cq_repl_opts_t o = {.host = c->mysql_host,
                        .port = (unsigned)c->mysql_port,
                        .admin_user = c->repl_admin_user,
                        .admin_password = c->repl_admin_password,
                        .repl_user = c->repl_user,
                        .repl_password = c->repl_password,
                        .semi_sync_timeout_ms = (unsigned)c->repl_semi_sync_timeout_ms,
                        .semi_sync_wait_no_slave = c->repl_semi_sync_wait_no_slave};
    return cq_repl_open(&o, ret);
}
#endif

/* ---- metrics ------------------------------------------------------------------------------ */

static int metrics(void *ud, cq_sbuf_t *out)
{
    cq_main_cluster_t *k = ud;
    cq_coordrt_stats_t s;
    memset(&s, 0, sizeof(s));
    cq_coordrt_t *rt = atomic_load_explicit(&k->live, memory_order_acquire);
    if (rt)
        cq_coordrt_stats(rt, &s);
    int sh = k->cfg->shard;
    int r = cq_sbuf_printf(
        out,
        "# HELP chanq_mq_cluster_role This server's role in its shard (1 for the current one).\n"
        "# TYPE chanq_mq_cluster_role gauge\n"
        "chanq_mq_cluster_role{shard=\"%d\",role=\"down\"} %d\n"
        "chanq_mq_cluster_role{shard=\"%d\",role=\"slave\"} %d\n"
        "chanq_mq_cluster_role{shard=\"%d\",role=\"elected\"} %d\n"
        "chanq_mq_cluster_role{shard=\"%d\",role=\"master\"} %d\n"
        "# HELP chanq_mq_cluster_epoch The shard's epoch as this server last knew it.\n"
        "# TYPE chanq_mq_cluster_epoch gauge\n"
        "chanq_mq_cluster_epoch{shard=\"%d\"} %llu\n"
        "# HELP chanq_mq_cluster_may_write 1 while this server may acknowledge writes.\n"
        "# TYPE chanq_mq_cluster_may_write gauge\n"
        "chanq_mq_cluster_may_write{shard=\"%d\"} %d\n"
        "# HELP chanq_mq_cluster_lease_remaining_seconds Time left on the master's lease.\n"
        "# TYPE chanq_mq_cluster_lease_remaining_seconds gauge\n"
        "chanq_mq_cluster_lease_remaining_seconds{shard=\"%d\"} %.3f\n"
        "# HELP chanq_mq_cluster_zk_connected 1 while the ZooKeeper session is connected.\n"
        "# TYPE chanq_mq_cluster_zk_connected gauge\n"
        "chanq_mq_cluster_zk_connected %d\n"
        "# HELP chanq_mq_cluster_elections_total Times this server became master.\n"
        "# TYPE chanq_mq_cluster_elections_total counter\n"
        "chanq_mq_cluster_elections_total %llu\n"
        "# HELP chanq_mq_cluster_fences_total Previous masters' databases fenced by this server.\n"
        "# TYPE chanq_mq_cluster_fences_total counter\n"
        "chanq_mq_cluster_fences_total %llu\n"
        "# HELP chanq_mq_cluster_sessions_total ZooKeeper sessions opened.\n"
        "# TYPE chanq_mq_cluster_sessions_total counter\n"
        "chanq_mq_cluster_sessions_total %llu\n",
        sh, s.role == CQ_COORD_DOWN, sh, s.role == CQ_COORD_SLAVE, sh, s.role == CQ_COORD_ELECTED,
        sh, s.role == CQ_COORD_MASTER, sh, (unsigned long long)s.epoch, sh, may_write(k), sh,
        (double)s.lease_remaining_ms / 1000.0, s.session == CQ_COORD_SESS_CONNECTED,
        (unsigned long long)s.elections, (unsigned long long)s.fences,
        (unsigned long long)s.sessions);
    if (r < 0 || !k->use_db)
        return r < 0 ? r : 0;
#if CQ_HAVE_MYSQL
    cq_repl_status_t st;
    pthread_mutex_lock(&k->mu);
    st = k->st;
    pthread_mutex_unlock(&k->mu);
    r = cq_repl_metrics(&st, out);
#endif
    return r;
}

bool cq_main_cluster_repl(cq_main_cluster_t *k, cq_mgrlink_repl_t *ret)
{
#if CQ_HAVE_MYSQL
    if (!k || !k->use_db)
        return false;
    pthread_mutex_lock(&k->mu);
    cq_repl_status_t st = k->st;
    bool read = k->st_read;
    uint64_t since = k->caught_up_ms;
    pthread_mutex_unlock(&k->mu);
    if (!read || !st.up)
        return false;
    uint64_t now = cq_clock_mono_ms();
    *ret = (cq_mgrlink_repl_t){
        .replica = st.replica,
        .io_running = st.io_running,
        .sql_running = st.sql_running,
        .lag_seconds = st.lag_seconds,
        .lag_transactions = st.lag_transactions > 0 ? (uint64_t)st.lag_transactions : 0,
        .behind_ms = st.replica && st.lag_transactions > 0 && now > since ? now - since : 0,
    };
    return true;
#else
    (void)k;
    (void)ret;
    return false;
#endif
}

/* ---- start and stop ------------------------------------------------------------------------ */

static int start_db(cq_main_cluster_t *k, char *err, size_t errlen)
{
#if !CQ_HAVE_MYSQL
    (void)k;
    (void)err;
    (void)errlen;
    return 0;
#else
    int r = open_repl(k->cfg, &k->ctl);
    if (r == 0)
        r = open_repl(k->cfg, &k->mon);
    if (r == 0 && pthread_create(&k->mon_thread, NULL, monitor_main, k) != 0)
        r = -EAGAIN;
    if (r < 0) {
        snprintf(err, errlen, "cluster: replication control: %s", cq_strerror(r));
        return r;
    }
    k->mon_started = true;
    k->db_ops.run = cq_repl_db_run;
    return 0;
#endif
}

int cq_main_cluster_start(cq_main_cluster_t *k, cq_mqsrv_t *s, cq_admin_t *admin, const char *bound,
                          char *err, size_t errlen)
{
#if !CQ_HAVE_ZOOKEEPER
    (void)s;
    (void)admin;
    (void)bound;
    snprintf(err, errlen, "--zk-hosts: this chanqd was built without libzookeeper-mt");
    (void)k;
    return CQ_ECONFIG;
#else
    const cq_config_t *c = k->cfg;
    k->engine = s;
    snprintf(k->adv, sizeof(k->adv), "%s", *c->cluster_advertise ? c->cluster_advertise : bound);
    snprintf(k->db, sizeof(k->db), "%s:%d", c->mysql_host, c->mysql_port);
    int r = k->use_db ? start_db(k, err, errlen) : 0;
    if (r < 0)
        return r;
    if (!k->use_db)
        CQ_WARN("cluster", "--store-backend %s: no database to fence or promote; roles only",
                c->store_backend);
    cq_coordrt_opts_t o = {
        .coord = {.shard = (uint32_t)c->shard,
                  .adv = k->adv,
                  .db = k->db,
                  .session_ms = (uint32_t)c->zk_session_ms,
                  .db_down_ms = (uint32_t)c->cluster_db_down_ms,
                  .promote = c->cluster_promote},
        .zk_hosts = c->zk_hosts,
        .zk_root = c->zk_root,
        .zk = &cq_coord_zk_libzk,
        .db = k->use_db ? &k->db_ops : NULL,
        .db_ud = k->ctl,
        .on_role = on_role,
        .role_ud = k,
        .on_topics = on_topics,
        .topics_ud = k,
    };
    r = cq_coordrt_start(&o, &k->rt);
    if (r < 0) {
        snprintf(err, errlen, "cluster: cannot start the coordinator (%s): %s", c->zk_hosts,
                 cq_strerror(r));
        return r;
    }
    atomic_store_explicit(&k->live, k->rt, memory_order_release);
    if ((r = cq_admin_add_source(admin, "cluster", metrics, k)) < 0)
        snprintf(err, errlen, "cannot register the cluster metrics: %s", cq_strerror(r));
    CQ_INFO("cluster", "shard %d: member %s (database %s), ZooKeeper %s%s, session %d ms", c->shard,
            k->adv, k->db, c->zk_hosts, c->zk_root, c->zk_session_ms);
    return r;
#endif
}

void cq_main_cluster_stop(cq_main_cluster_t *k, cq_admin_t *admin)
{
    if (!k)
        return;
    cq_admin_remove_source(admin, metrics, k);
    atomic_store_explicit(&k->live, NULL, memory_order_release); /* no write from here on */
    cq_coordrt_stop(k->rt);
    if (k->mon_started) {
        pthread_mutex_lock(&k->mu);
        k->mon_stop = true;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
        pthread_join(k->mon_thread, NULL);
    }
#if CQ_HAVE_MYSQL
    cq_repl_close(k->ctl);
    cq_repl_close(k->mon);
#endif
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    cq_free(k);
}
