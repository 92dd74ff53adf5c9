/* chanq_cluster.h - libchanq's cluster client for durable topics: a list of servers grouped in
 * shards (doc/cluster.md), produce with round-robin failover, consume across every shard.
 *
 * The logic is sans-I/O where it matters: it runs over an injected transport (one blocking
 * call per request and server, chanq_cluster_transport_t) and an injected monotonic clock, so
 * tests drive it with fakes. chanq_cluster_sync_new() gives the real transport (one
 * chanq_mq_sync_t connection per server, poll-based, with timeouts).
 *
 * SERVERS. Each entry is {shard, addr "host:port", index}; index is the entry's position in
 * the list and is the round-robin order. The shard comes from the static list
 * ("1/h:p,1/h:p,2/h:p") or, for "h:p" entries, from the server's connect_resp / keepalive_resp
 * `shard` once it sends one; until then each such server counts as a shard of its own (a shard
 * given in the list or by ZooKeeper is kept even if the server announces another one). A
 * server is believed master until it says otherwise (connect/keepalive `master` false, a
 * keepalive `weight` of 0, or a not_master answer); a not_master belief expires after
 * opts.recheck_ms, or when a keepalive says it is master again.
 *
 * PRODUCE, the seed's rule made exactly-once within a shard:
 *  1. Candidates are the servers believed master and not in their reconnect backoff, ordered
 *     by weight (keepalive `weight`, larger = healthier; unknown counts as
 *     CHANQ_CLUSTER_WEIGHT_UNKNOWN), ties by lowest index: with equal weights produce starts at
 *     the lowest-numbered server.
 *  2. Every message gets (producer_id, seq) before its first try: the cluster's producer_id
 *     (opts.producer_id, or a random one) and the next seq of the cluster, increasing across
 *     all shards (a request of n messages takes seq..seq+n-1). A caller that sets
 *     req->producer_id keeps its own key and must set seq (>= 0).
 *  3. The request goes to the first candidate's shard. A retry stays on the SAME shard with the
 *     SAME (producer_id, seq) while the shard is reachable: after busy or storage (the store
 *     may have committed: the retry is then acknowledged with the original offsets) up to
 *     opts.shard_tries times in all; after not_master, a refused or closed connection or a
 *     timeout on one server, the next server of the same shard is tried.
 *  4. The shard is unreachable when none of its servers accepted the request for one of those
 *     reasons (not_master from every server, refused / closed, timeout) or its tries are used
 *     up: the request moves to the next shard's master, with the SAME (producer_id, seq). A
 *     timeout may have committed on the first shard, so moving can store the message twice,
 *     once per shard: consumers drop that duplicate by (producer_id, seq)
 *     (chanq_cluster_dedupe_t). Keeping the key (rather than a new seq) is what lets them.
 *     Seqs stay increasing per shard because a blocking producer sends in seq order, and the
 *     cache flushes in order, before any newer message.
 *     server_offline (err 19, a server an operator took out of service) counts as not_master:
 *     the server is passed over (for opts.recheck_ms, or until a keepalive shows a weight above
 *     0) and the next server of the shard, then the next shard, gets the same key.
 *  5. Errors that another server would answer the same way (no_permission, unknown_topic,
 *     topic_offline, content_too_large, bad_field, bad_topic_name, sequence_conflict,
 *     sequence_out_of_order, unauthenticated) return to the caller at once.
 *  6. No shard took it: the policy set at creation applies. CHANQ_CLUSTER_DROP returns
 *     CQ_ENOTMASTER (some server answered not_master) or -ECONNREFUSED (none answered at all).
 *     CHANQ_CLUSTER_CACHE copies the request into a bounded in-memory queue (opts.cache_max_msgs
 *     messages and opts.cache_max_bytes bytes of content; over either: CQ_ELIMIT, nothing
 *     queued) and returns CHANQ_CLUSTER_CACHED. While the queue is not empty every new request
 *     is queued behind it (order is kept), and chanq_cluster_flush() (called by
 *     chanq_cluster_tick() and before every produce) sends it in order; each cached request's
 *     outcome goes to opts.on_cached.
 *
 * CONSUME. A chanq_cluster_consumer_t keeps one offset per shard and reads each shard from its
 * master, or from any reachable server of the shard while no master is (a slave serves
 * consume and watch). A server that answers storage or busy (a master whose database is gone)
 * is passed over for the shard's next server in the same call, like one that is unreachable;
 * call chanq_cluster_tick() now and then so that the cluster learns the new roles. A slave
 * started with --slave-reads off answers read_on_master (CQ_EREADMASTER) while its shard has a
 * master, naming it (transport read_master): the read goes to that server, found in the list
 * by address or appended to it with the slave's shard (at most CHANQ_CLUSTER_SERVERS_MAX), once
 * per shard and call; whatever the master answers is the shard's outcome for that call.
 * chanq_cluster_consume() returns the items of every shard, each tagged
 * with its shard and offset: within a shard in offset order, shards one after the other
 * (there is no order across shards). Identity of a message: (shard, offset).
 *
 * DEDUPE. chanq_cluster_dedupe_t remembers, per producer_id (at most max_producers, least
 * recently used evicted), the highest seq seen and a window of CHANQ_CLUSTER_DEDUPE_WINDOW
 * seqs below it. A seq older than the window cannot be told apart and counts as new.
 *
 * Error codes: 0, CHANQ_CLUSTER_CACHED (> 0), -ENOMEM, -EINVAL, CQ_ELIMIT, CQ_ENOTMASTER,
 * -ECONNREFUSED, CQ_ETIMEOUT, or the CQ_E* code a server answered (chanq_mq_err()).
 *
 * Threads: a cluster, its consumers and a dedupe set belong to one thread at a time.
 */
#ifndef CHANQ_CLUSTER_H
#define CHANQ_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chanq_mq.h"

#define CHANQ_CLUSTER_ADDR_MAX       127
#define CHANQ_CLUSTER_SERVERS_MAX    64
#define CHANQ_CLUSTER_SHARD_UNKNOWN  UINT32_MAX
#define CHANQ_CLUSTER_WEIGHT_UNKNOWN 100u /* what chanqd 1-node answers */
#define CHANQ_CLUSTER_CACHED         1
#define CHANQ_CLUSTER_DEDUPE_WINDOW  4096u

typedef struct chanq_cluster chanq_cluster_t;

/* One entry of the server list. */
typedef struct chanq_cluster_server {
    uint32_t shard; /* CHANQ_CLUSTER_SHARD_UNKNOWN until given or learned */
    char addr[CHANQ_CLUSTER_ADDR_MAX + 1];
    uint32_t index; /* position in the list: the round-robin order */
} chanq_cluster_server_t;

/* What connect_resp / keepalive_resp said about a server; fields the server did not send stay
 * unknown (the transport fills what it decoded). */
typedef struct chanq_cluster_hello {
    uint32_t shard; /* CHANQ_CLUSTER_SHARD_UNKNOWN: not sent */
    int master;     /* -1 not sent, 0 slave, 1 master */
    int64_t weight; /* -1 not sent */
} chanq_cluster_hello_t;

/* One consumed message. content is owned by the batch. producer_id 0: not sent. */
typedef struct chanq_cluster_item {
    uint32_t shard;
    int64_t offset;
    int64_t time; /* -1: not sent */
    int64_t producer_id, seq;
    char *content;
    size_t len;
} chanq_cluster_item_t;

typedef struct chanq_cluster_batch {
    chanq_cluster_item_t *items;
    size_t n, cap;
    int64_t last_offset; /* transport: the consume_resp's offset (-1: none) */
} chanq_cluster_batch_t;

/* Appends a copy of content[0..len) (transports and tests). Returns 0 or -ENOMEM. */
int chanq_cluster_batch_add(chanq_cluster_batch_t *b, uint32_t shard, int64_t offset, int64_t time,
                            int64_t producer_id, int64_t seq, const char *content, size_t len);
/* Frees the items and empties b (b itself is the caller's). Accepts NULL. */
void chanq_cluster_batch_clear(chanq_cluster_batch_t *b);

/* The transport: blocking calls on server idx (its index in the list). Each returns 0, the
 * CQ_E* code of the server's err_code, or a connection failure: -ECONNREFUSED (could not
 * connect), CQ_ECLOSED (closed, or a stream error), CQ_ETIMEOUT (no answer in time; the
 * transport then drops the connection). After a connection failure the transport is
 * disconnected from that server; the next call connects again through connect(). */
typedef struct chanq_cluster_transport {
    void *ud;
    int (*connect)(void *ud, uint32_t idx, const char *addr, chanq_cluster_hello_t *ret);
    void (*disconnect)(void *ud, uint32_t idx);
    int (*keepalive)(void *ud, uint32_t idx, chanq_cluster_hello_t *ret);
    /* req: borrowed, with producer_id and seq set; ret_offsets: req->n entries. */
    int (*produce)(void *ud, uint32_t idx, const chanq_mq_produce_t *req, int64_t *ret_offsets);
    /* Appends the messages after offset to out (shard = the server's shard as given) and sets
     * out->last_offset. */
    int (*consume)(void *ud, uint32_t idx, uint32_t shard, const char *topic, int64_t offset,
                   uint32_t max_count, chanq_cluster_batch_t *out);
    /* The topic's last offset on that server (offset_resp last_offset). */
    int (*last_offset)(void *ud, uint32_t idx, const char *topic, int64_t *ret_last);
    void (*free)(void *ud); /* called by chanq_cluster_free(); may be NULL */
    /* After a call on idx returned CQ_EREADMASTER: the master the server named (its err_msg's
     * master=HOST:PORT, chanq_mq_read_master) into addr[0..cap). Returns 0 or -ENOENT. NULL:
     * the consumer tries the shard's other servers instead. */
    int (*read_master)(void *ud, uint32_t idx, char *addr, size_t cap);
} chanq_cluster_transport_t;

typedef enum chanq_cluster_policy {
    CHANQ_CLUSTER_DROP = 0,
    CHANQ_CLUSTER_CACHE = 1,
} chanq_cluster_policy_t;

/* Outcome of a cached request once flushed: err 0 with offsets[0..n), or an error from rule 5
 * (the request is then dropped from the queue). first_seq: its first seq. Runs inside
 * chanq_cluster_flush / tick / produce: it must not call the cluster. */
typedef void (*chanq_cluster_cached_cb)(void *ud, const char *topic, int64_t producer_id,
                                        int64_t first_seq, size_t n, int err, uint32_t shard,
                                        const int64_t *offsets);

typedef struct chanq_cluster_opts {
    chanq_cluster_policy_t policy;
    size_t cache_max_msgs;  /* 0: 10000 */
    size_t cache_max_bytes; /* 0: 16 MiB */
    int64_t producer_id;    /* 0: a random one in [1, 2^53) */
    uint32_t shard_tries;   /* busy/storage retries on one shard, in all; 0: 3 */
    uint32_t reconnect_ms;  /* backoff of a server after a connection failure; 0: 1000 */
    uint32_t recheck_ms;    /* how long a not_master answer holds; 0: 1000 */
    uint64_t (*now_ms)(void *clock_ud); /* monotonic clock; NULL: CLOCK_MONOTONIC */
    void *clock_ud;
    chanq_cluster_cached_cb on_cached;
    void *cached_ud;
    /* The server list's source (managers: chanq_cluster_svrconfig; ZooKeeper): called by
     * chanq_cluster_tick() every refresh_ms (0: 5000) with ret[0..cap); 0 with *ret_n > 0
     * replaces the list (chanq_cluster_set_servers); an error or an empty list keeps it. NULL:
     * the list given at creation stays. */
    int (*refresh)(void *ud, chanq_cluster_server_t *ret, size_t cap, size_t *ret_n);
    void *refresh_ud;
    uint32_t refresh_ms;
} chanq_cluster_opts_t;

/* ---- server lists ---------------------------------------------------------------------- */

/* Parses "h:p,h:p" or "N/h:p,N/h:p" (entries may mix) into ret[0..cap); *ret_n entries.
 * Returns 0, -EINVAL (empty, malformed, address too long) or CQ_ELIMIT (more than cap). */
int chanq_cluster_parse_servers(const char *list, chanq_cluster_server_t *ret, size_t cap,
                                size_t *ret_n);
/* Reads /<root>/shards/<N>/members/<node> of ZooKeeper (hosts "h:p,h:p"; root NULL: "/chanq")
 * and lists every member's adv address with its shard, shard by shard, each shard's members
 * by sequence (so the lowest eligible, the master, comes first among its shard's eligible
 * ones). Members whose data does not parse are skipped. Returns 0, -ENOTSUP when libchanq was
 * built without libzookeeper, CQ_ETIMEOUT, -ENOENT (no shards), CQ_ELIMIT, -EIO (other ZooKeeper
 * errors); err[0..errlen) gets a text on error. */
int chanq_cluster_discover_zk(const char *hosts, const char *root, int timeout_ms,
                              chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                              size_t errlen);
/* Parses a member node's data "v1 adv=H:P db=H:P elig=0|1" (adv into adv[0..cap)). Returns 0
 * or -EINVAL. */
int chanq_cluster_parse_member(const char *data, char *adv, size_t cap, bool *ret_eligible);

/* ---- managers (issue 13, doc/cluster.md "Managers") -------------------------------------- */

/* How a svrconfig request reaches a manager: send req[0..n) to addr ("host:port") and read one
 * whole answer frame into resp[0..cap), within timeout_ms. Returns 0 with *ret_n, or
 * -ECONNREFUSED, CQ_ETIMEOUT, CQ_ECLOSED, CQ_EBADLEN (an answer over cap), -errno. Tests plug a
 * fake manager in here; NULL in chanq_cluster_svrconfig_io: TCP sockets. */
typedef struct chanq_cluster_mgr_io {
    int (*exchange)(void *ud, const char *addr, const uint8_t *req, size_t n, uint8_t *resp,
                    size_t cap, size_t *ret_n, int timeout_ms);
    void *ud;
} chanq_cluster_mgr_io_t;

/* Asks the managers mgrs ("h:p,h:p"), one after the other until one answers err 0, for the
 * servers module_id (token: its token in the managed configuration) may use: masters that are
 * not offline, ordered by shard; each entry gets its shard. Returns 0 with ret[0..*ret_n)
 * (possibly empty), or the last manager's failure: the CQ_E* code of its err_code (CQ_EAUTH:
 * wrong token), a connection failure, CQ_ELIMIT (more servers than cap), -EINVAL (mgrs);
 * err[0..errlen) says which manager answered what. */
int chanq_cluster_svrconfig(const char *mgrs, uint32_t module_id, const char *token, int timeout_ms,
                            chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                            size_t errlen);
int chanq_cluster_svrconfig_io(const chanq_cluster_mgr_io_t *io, const char *mgrs,
                               uint32_t module_id, const char *token, int timeout_ms,
                               chanq_cluster_server_t *ret, size_t cap, size_t *ret_n, char *err,
                               size_t errlen);

/* A relay node as the managers list it (svrconfig's relay_nodes, doc/mgr.md): where a client
 * of the relay named cluster connects, by transport ("" when the node does not serve it). */
typedef struct chanq_cluster_relay_node {
    uint32_t node;
    char cluster[33];
    char tcp[CHANQ_CLUSTER_ADDR_MAX + 1], ws[CHANQ_CLUSTER_ADDR_MAX + 1],
        wss[CHANQ_CLUSTER_ADDR_MAX + 1], kcp[CHANQ_CLUSTER_ADDR_MAX + 1];
} chanq_cluster_relay_node_t;

/* Asks the managers as chanq_cluster_svrconfig does and returns the live relay nodes of the
 * answer (by relay, then node) in ret[0..*ret_n) (possibly none: a manager that lists none, or
 * one older than relay_nodes). A client gives their addresses of its transport to
 * chanq_sync_connect_list / chanq_uv_connect_list. Errors as chanq_cluster_svrconfig (CQ_ELIMIT:
 * more than cap; the managers list at most 256). */
int chanq_cluster_relay_nodes(const char *mgrs, uint32_t module_id, const char *token,
                              int timeout_ms, chanq_cluster_relay_node_t *ret, size_t cap,
                              size_t *ret_n, char *err, size_t errlen);
int chanq_cluster_relay_nodes_io(const chanq_cluster_mgr_io_t *io, const char *mgrs,
                                 uint32_t module_id, const char *token, int timeout_ms,
                                 chanq_cluster_relay_node_t *ret, size_t cap, size_t *ret_n,
                                 char *err, size_t errlen);

/* ---- cluster --------------------------------------------------------------------------- */

/* servers[0..n): copied; their index is reset to the position. tr: copied (tr->ud is owned
 * when tr->free is set). opts: may be NULL. Returns an owned cluster or NULL (OOM, n == 0 or
 * over CHANQ_CLUSTER_SERVERS_MAX; tr->free is then called). */
chanq_cluster_t *chanq_cluster_new(const chanq_cluster_server_t *servers, size_t n,
                                   const chanq_cluster_transport_t *tr,
                                   const chanq_cluster_opts_t *opts);
/* Disconnects every server, frees the cache without calling back. Accepts NULL; returns NULL. */
chanq_cluster_t *chanq_cluster_free(chanq_cluster_t *c);

/* Produces req (borrowed; producer_id 0 and seq -1: the cluster's key, see rule 2). Returns
 * 0 with req->n offsets in ret_offsets (may be NULL) and the shard in *ret_shard (may be
 * NULL), CHANQ_CLUSTER_CACHED, or an error. Blocks for at most one transport timeout per
 * server tried (and shard_tries per shard). */
int chanq_cluster_produce(chanq_cluster_t *c, const chanq_mq_produce_t *req, int64_t *ret_offsets,
                          uint32_t *ret_shard);
/* Sends the cached requests in order until one cannot go (it stays first). Returns the number
 * still cached. */
size_t chanq_cluster_flush(chanq_cluster_t *c);
/* Keepalive to every connected server (learning weight / master / shard), reconnects servers
 * whose backoff ended, then flushes. Returns the number still cached. */
size_t chanq_cluster_tick(chanq_cluster_t *c);
/* Messages / content bytes in the cache. */
size_t chanq_cluster_cached(const chanq_cluster_t *c, size_t *ret_bytes);
/* The cluster's producer_id and the seq its next automatic request will use. */
int64_t chanq_cluster_producer_id(const chanq_cluster_t *c);
int64_t chanq_cluster_next_seq(const chanq_cluster_t *c);
/* Replaces the server list (servers[0..n) copied, index reset to the position): an entry with
 * the same address at the same position keeps its connection and beliefs; any other position's
 * connection is closed. The cache and the consumers' offsets (per shard) stay. Returns 0 or
 * -EINVAL (n 0 or over CHANQ_CLUSTER_SERVERS_MAX). */
int chanq_cluster_set_servers(chanq_cluster_t *c, const chanq_cluster_server_t *servers, size_t n);
/* The server list as known now (shards learned included); borrowed, valid until the next call
 * on c. */
const chanq_cluster_server_t *chanq_cluster_servers(chanq_cluster_t *c, size_t *ret_n);

/* ---- consumer -------------------------------------------------------------------------- */

typedef struct chanq_cluster_consumer chanq_cluster_consumer_t;

/* A consumer of topic (copied) over every shard of c (borrowed: free the consumers first), from
 * offset 0 of each shard (from_end: from each shard's last offset, read at the first consume).
 * Returns owned or NULL. */
chanq_cluster_consumer_t *chanq_cluster_consumer_new(chanq_cluster_t *c, const char *topic,
                                                     bool from_end);
chanq_cluster_consumer_t *chanq_cluster_consumer_free(chanq_cluster_consumer_t *k);
/* Reads up to max_per_shard messages (0: the server's default) after each shard's offset and
 * appends them to out, advancing the offsets. A shard with no reachable server is skipped
 * (its offset stays). Returns 0 when at least one shard answered, else the last error. */
int chanq_cluster_consume(chanq_cluster_consumer_t *k, uint32_t max_per_shard,
                          chanq_cluster_batch_t *out);
/* The offset kept for shard (0 if none). */
int64_t chanq_cluster_consumer_offset(const chanq_cluster_consumer_t *k, uint32_t shard);

/* ---- dedupe ---------------------------------------------------------------------------- */

typedef struct chanq_cluster_dedupe chanq_cluster_dedupe_t;

/* max_producers 0: 1024. Returns owned or NULL. */
chanq_cluster_dedupe_t *chanq_cluster_dedupe_new(size_t max_producers);
chanq_cluster_dedupe_t *chanq_cluster_dedupe_free(chanq_cluster_dedupe_t *d);
/* Records (producer_id, seq); returns true when it was seen before (a duplicate to drop).
 * producer_id 0 (no key) is never a duplicate. */
bool chanq_cluster_dedupe_seen(chanq_cluster_dedupe_t *d, int64_t producer_id, int64_t seq);

/* ---- blocking transport on sockets ------------------------------------------------------ */

/* The real transport: chanq_mq_sync connections (module_id, token: copied; client_type
 * CQ_MQ_PRODUCER or CQ_MQ_CONSUMER), connect and per-request timeout timeout_ms. Returns 0 and
 * *ret (to pass to chanq_cluster_new, which then owns it) or -ENOMEM. */
int chanq_cluster_sync_transport(uint32_t module_id, const char *token, uint32_t client_type,
                                 int timeout_ms, chanq_cluster_transport_t *ret);
/* Convenience: a cluster over the sync transport. Returns owned or NULL. */
chanq_cluster_t *chanq_cluster_sync_new(const chanq_cluster_server_t *servers, size_t n,
                                        uint32_t module_id, const char *token, uint32_t client_type,
                                        int timeout_ms, const chanq_cluster_opts_t *opts);

#endif
