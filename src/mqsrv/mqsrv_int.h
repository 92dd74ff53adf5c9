/* mqsrv_int.h - internals shared by the files of the mqsrv module. Engine thread only. */
#ifndef CQ_MQSRV_INT_H
#define CQ_MQSRV_INT_H

#include "cq_mqhttp.h"
#include "cq_mqsrv.h"
#include "cq_sbuf.h"

/* A consumer's last known committed offset (metrics only). */
typedef struct mq_consumer {
    char id[CQ_STORE_CONSUMER_MAX + 1];
    uint64_t offset;
} mq_consumer_t;

typedef struct mq_topic {
    char name[CQ_MQ_TOPIC_MAX + 1]; /* as the store spells it */
    bool online;
    bool purging; /* a retention purge is in flight */
    int retention_days;
    uint64_t last_offset;       /* highest offset committed (and pushed) so far */
    cq_mqsrv_conn_t **watchers; /* borrowed; a connection removes itself when it closes */
    size_t nwatchers, watchers_cap;
    cq_mq_msg_t *push; /* owned: messages waiting for cq_mqsrv_flush, or NULL */
    /* metrics (metrics.c) */
    uint64_t produced;        /* messages acknowledged since start */
    uint64_t pending;         /* messages of produces submitted and not yet completed */
    uint64_t purged;          /* rows removed by retention since start */
    mq_consumer_t *consumers; /* owned: offsets seen in commits and offset reads since start */
    size_t nconsumers, consumers_cap;
} mq_topic_t;

struct cq_mqsrv {
    cq_mq_limits_t lim;
    const cq_mqperm_t *perms;
    int (*submit)(void *ud, cq_writer_req_t *req);
    void *submit_ud;
    mq_topic_t **topics; /* owned */
    size_t ntopics, topics_cap;
    int64_t now_ms;
    uint64_t next_conn_id;
    cq_mqsrv_stats_t st;
};

struct cq_mqsrv_conn {
    cq_mqsrv_t *s;
    const cq_mqsrv_conn_ops_t *ops;
    void *ud;
    cq_sbuf_t in; /* bytes of an incomplete frame */
    uint64_t id;
    uint32_t module_id, client_type;
    uint32_t registered, watching; /* topic_nums of add_topic / watch responses */
    size_t inflight;               /* store requests not yet completed */
    bool authed;
    bool closing; /* ops->close was called */
    bool dead;    /* the edge closed it: ops are gone */
};

/* An HTTP API connection (http.c). At most one store request in flight. */
struct cq_mqhttp_conn {
    cq_mqsrv_t *s;
    const cq_mqsrv_conn_ops_t *ops;
    void *ud;
    cq_sbuf_t in; /* received bytes not yet handled (pipelined requests included) */
    size_t inflight;
    bool busy;       /* a request waits for its store completion: parse nothing more */
    bool keep_alive; /* of the request being answered */
    bool closing, dead;
};

/* A submitted request's context (writer req->ud). */
typedef struct mq_pend {
    cq_mqsrv_conn_t *c;  /* NULL for the engine's own requests and HTTP ones */
    cq_mq_msg_t *req;    /* owned: the decoded request, for the response's echoes */
    cq_mqhttp_conn_t *h; /* the HTTP connection waiting for it, or NULL */
} mq_pend_t;

/* cq_mqsrv.c */
mq_topic_t *cq__mqsrv_topic(const cq_mqsrv_t *s, const char *name);
mq_topic_t *cq__mqsrv_topic_add(cq_mqsrv_t *s, const char *name, bool online, int retention);
void cq__mqsrv_send(cq_mqsrv_conn_t *c, cq_mq_msg_t *m);
void cq__mqsrv_reply(cq_mqsrv_conn_t *c, const cq_mq_msg_t *req, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int cq__mqsrv_submit(cq_mqsrv_t *s, cq_mqsrv_conn_t *c, cq_mq_msg_t *m, cq_writer_req_t *req);
bool cq__mqsrv_watch(mq_topic_t *t, cq_mqsrv_conn_t *c, bool on);
void cq__mqsrv_conn_put(cq_mqsrv_conn_t *c);
void cq__mqsrv_close(cq_mqsrv_conn_t *c);
/* Submits a TOPIC_SET_ONLINE of t for h (NULL: no one waits). The cache follows on completion.
 * Returns 0 or the submit error (nothing submitted). */
int cq__mqsrv_set_online(cq_mqsrv_t *s, const char *topic, bool online, cq_mqhttp_conn_t *h);

/* handlers.c */
void cq__mqsrv_dispatch(cq_mqsrv_conn_t *c, cq_mq_msg_t *m);
void cq__mqsrv_completed(cq_mqsrv_t *s, cq_writer_req_t *req, mq_pend_t *p);
/* A produce committed (err 0): counters, high water and pushes to the topic's watchers. */
void cq__mqsrv_produced(cq_mqsrv_t *s, const cq_writer_req_t *req);
/* The engine side of a completed store request: cache updates (topic created, online flag). */
void cq__mqsrv_apply(cq_mqsrv_t *s, const cq_writer_req_t *req);

/* metrics.c */
/* Counts a request going to the store (pending produce messages). */
void cq__mqsrv_metrics_submitted(cq_mqsrv_t *s, const cq_writer_req_t *req);
/* Counts a completed store request: pending, purged rows, consumer offsets. */
void cq__mqsrv_metrics_completed(cq_mqsrv_t *s, const cq_writer_req_t *req);

/* http.c */
/* Answers p->h's request from the completed req, then resumes its pipelined input. */
void cq__mqhttp_completed(cq_mqsrv_t *s, cq_writer_req_t *req, mq_pend_t *p);
/* Frees h once the edge closed it and its store request completed. */
void cq__mqhttp_conn_put(cq_mqhttp_conn_t *h);

#endif
