/* test_it_overload.c - graceful overload of channel-data fan-out (issue 28, doc/spatial.md
 * "Overload") against a real chanqd: a subscriber that stops reading is resynchronised instead
 * of queued for, and neither closed nor lied to; handovers keep their exact trail while a
 * worker fans out to a stalled reader; a late worker coarsens its windows and every subscriber
 * still converges to the owner's last state.
 *
 * The bound on a stalled reader, in bytes. On Linux loopback a peer that stops reading absorbs
 * its own SO_RCVBUF (autotuned only when it reads, so fixed while it is stalled) plus the
 * sender's SO_SNDBUF, which chanqd leaves to autotuning up to tcp_wmem[2] (4 MiB by default,
 * test_it_slow.c). Past that chanqd queues up to --sendq-data-limit (64 KiB here) plus the
 * record that crossed it, and then no more channel data for that connection: the channel's
 * scheduler sends it the full state once it is below again. So what the reader receives from
 * the moment it stalls to the end is at most those buffers plus a few full states, whatever the
 * owner sent meanwhile; the owner writes until a normal reader has received four times that
 * bound, so the check is deterministic and a queue that grew would break it.
 *
 * Channel data is chanqworld.SpatialChannelData (proto/world.proto), a map of entities whose
 * values the merge replaces per key: each update sets one entity to {netId: key, classPath:
 * label(seq), owningConnId: seq}, so any merge of fan-outs is checked against the owner's state
 * exactly. A record is at most 64 KiB (CQ_WIRE_MAX_RECORD) and a full state must be one record:
 * NENT entities and the END key, LABEL bytes each, stay below it.
 */
#include "it_world.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "world.pb-c.h"

#define URL_ENT "type.googleapis.com/chanqworld.EntityChannelData"

#define NENT       4     /* entities of a data channel: keys 1..NENT */
#define END_KEY    1000u /* the owner's last update sets this key: a reader is done */
#define LABEL      12000 /* bytes of an entity's classPath */
#define DATA_LIMIT (64u * 1024u)
#define WINDOW     (2 * NENT)  /* updates the owner may run ahead of the normal reader */
#define MAX_UPD    200000u     /* updates after which a phase that never ends fails */
#define SLOW_MS    (20 * 1000) /* a reader thread's wait for one message */
#define PHASE_MS   (60 * 1000) /* a flow-controlled owner's wait for its reader */
#define HO_MS      (15 * 1000) /* the wait for one handover under load */
#define STOP_MS    300         /* how long case 3 freezes chanqd: its lateness */

enum {
    MT_HANDOVER = 12,
    MT_REGIONS = 13,
    MT_INTEREST = 14,
    MT_CREATE_ENTITY = 15,
    MT_READY = 18,
    MT_USER = 300,
};
enum { CT_SPATIAL = 4, CT_ENTITY = 5 };

/* Type 3 (SUBWORLD) ticks every 2 ms with 4 ms windows, so a normal reader takes a full state's
 * worth of data every 4 ms and the stall phase of case 1 stays short. */
static const char SETTINGS[] =
    "{\"1\": {\"TickIntervalMs\": 20, \"DefaultFanOutIntervalMs\": 20,\n"
    "        \"ACLSettings\": {\"Sub\": 3, \"Unsub\": 3, \"Remove\": 0}},\n"
    " \"3\": {\"TickIntervalMs\": 2, \"DefaultFanOutIntervalMs\": 4,\n"
    "        \"RemoveChannelAfterOwnerRemoved\": true,\n"
    "        \"ACLSettings\": {\"Sub\": 3, \"Unsub\": 3, \"Remove\": 2}}}\n";

/* test_it_handover.c's 4x1 world: server 0 owns 65536/65537 and watches 65538, server 1 owns
 * 65538/65539 and watches 65537. */
static const char LAYOUT[] =
    "{\"SpatialControllerType\": \"Static2DSpatialController\",\n"
    " \"Config\": {\"WorldOffsetX\": -2000, \"WorldOffsetZ\": -500, \"GridWidth\": 1000,\n"
    "  \"GridHeight\": 1000, \"GridCols\": 4, \"GridRows\": 1, \"ServerCols\": 2,\n"
    "  \"ServerRows\": 1, \"ServerInterestBorderSize\": 1},\n"
    " \"Handover\": {\"PositionPath\": \"transform.position\", \"Axes\": \"xyz\",\n"
    "  \"EntitiesField\": \"entities\", \"EntityDataField\": \"entityData\"}}\n";

/* ---- small helpers --------------------------------------------------------------------------- */

static void nap(void)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

/* Bytes the kernel has received on c's socket since it opened (read or not). */
static uint64_t rx_bytes(it_conn_t *c)
{
    struct tcp_info ti;
    socklen_t l = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    assert_int_equal(getsockopt(chanq_sync_fd(c->s), IPPROTO_TCP, TCP_INFO, &ti, &l), 0);
    assert_true(l >= offsetof(struct tcp_info, tcpi_bytes_received) + 8);
    return ti.tcpi_bytes_received;
}

static uint64_t rcvbuf(it_conn_t *c)
{
    int v = 0;
    socklen_t l = sizeof(v);
    assert_int_equal(getsockopt(chanq_sync_fd(c->s), SOL_SOCKET, SO_RCVBUF, &v, &l), 0);
    return (uint64_t)v;
}

/* tcp_wmem[2]: what autotuning may give chanqd's SO_SNDBUF. */
static uint64_t wmem_max(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    assert_non_null(f);
    unsigned long long a, b, c;
    assert_int_equal(fscanf(f, "%llu %llu %llu", &a, &b, &c), 3);
    fclose(f);
    return c;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static int64_t metric(const char *name)
{
    int64_t v = cq_testsrv_metric(it_srv(), name);
    assert_true(v >= 0);
    return v;
}

/* ---- the data model -------------------------------------------------------------------------- */

/* Entity key's value after update seq: the classPath is LABEL bytes that name the seq (the
 * initial state's "init" for seq 0), so a value that is not exactly the update's is seen. */
static void label(uint32_t seq, char *out)
{
    if (!seq) {
        strcpy(out, "init");
        return;
    }
    int n = snprintf(out, LABEL + 1, "%010u:", seq);
    memset(out + n, 'a' + (int)(seq % 26), (size_t)(LABEL - n));
    out[LABEL] = '\0';
}

/* What a reader made of the fan-outs it merged: each key's seq; has[] says it was set. */
typedef struct model {
    uint32_t seq[NENT + 1]; /* [NENT]: END_KEY */
    bool has[NENT + 1];
} model_t;

static int slot_of(uint32_t key)
{
    return key == END_KEY ? NENT : key >= 1 && key <= NENT ? (int)key - 1 : -1;
}

static uint32_t key_of(int slot)
{
    return slot == NENT ? END_KEY : (uint32_t)slot + 1;
}

/* SpatialChannelData holding the model's entities in key order, packed. */
static uint8_t *model_bytes(const model_t *m, size_t *len)
{
    Chanqworld__SpatialChannelData__EntitiesEntry kv[NENT + 1], *kvs[NENT + 1];
    Chanqworld__SpatialEntityState st[NENT + 1];
    Chanqworld__EntityRef ref[NENT + 1];
    static char labels[NENT + 1][LABEL + 1];
    size_t n = 0;
    for (int i = 0; i <= NENT; i++) {
        if (!m->has[i])
            continue;
        chanqworld__entity_ref__init(&ref[n]);
        label(m->seq[i], labels[n]);
        ref[n].netid = key_of(i);
        ref[n].classpath = labels[n];
        ref[n].owningconnid = m->seq[i];
        chanqworld__spatial_entity_state__init(&st[n]);
        st[n].objref = &ref[n];
        chanqworld__spatial_channel_data__entities_entry__init(&kv[n]);
        kv[n].key = key_of(i);
        kv[n].value = &st[n];
        kvs[n] = &kv[n];
        n++;
    }
    Chanqworld__SpatialChannelData d = CHANQWORLD__SPATIAL_CHANNEL_DATA__INIT;
    d.n_entities = n;
    d.entities = kvs;
    return it_pack(&d.base, len);
}

/* Both models packed the same way are the same bytes. */
static void expect_same_state(const model_t *got, const model_t *want, const char *who)
{
    size_t gl, wl;
    uint8_t *g = model_bytes(got, &gl), *w = model_bytes(want, &wl);
    bool same = gl == wl && memcmp(g, w, gl) == 0;
    if (!same)
        for (int i = 0; i <= NENT; i++)
            if (got->has[i] != want->has[i] || got->seq[i] != want->seq[i])
                print_error("%s: key %u has seq %u (%s), the owner's is %u (%s)\n", who, key_of(i),
                            got->seq[i], got->has[i] ? "set" : "unset", want->seq[i],
                            want->has[i] ? "set" : "unset");
    free(g);
    free(w);
    assert_true(same);
}

/* Merges a fan-out (SpatialChannelData bytes) into m as chanqd merges maps: per key. A value
 * that is not exactly the one its seq names, or a key going back to an older seq (a window out
 * of order), is an error: returns false. */
static bool model_apply(model_t *m, const uint8_t *p, size_t n)
{
    Chanqworld__SpatialChannelData *d = chanqworld__spatial_channel_data__unpack(NULL, n, p);
    if (!d)
        return false;
    static __thread char want[LABEL + 1];
    bool ok = true;
    for (size_t i = 0; ok && i < d->n_entities; i++) {
        const Chanqworld__SpatialChannelData__EntitiesEntry *kv = d->entities[i];
        int s = slot_of(kv->key);
        const Chanqworld__EntityRef *r = kv->value ? kv->value->objref : NULL;
        ok = s >= 0 && r && r->netid == kv->key && r->classpath;
        if (ok) {
            label(r->owningconnid, want);
            ok = strcmp(r->classpath, want) == 0 && (!m->has[s] || r->owningconnid >= m->seq[s]);
        }
        if (ok) {
            m->seq[s] = r->owningconnid;
            m->has[s] = true;
        }
    }
    chanqworld__spatial_channel_data__free_unpacked(d, NULL);
    return ok;
}

/* A CHANNEL_DATA_UPDATE fan-out on ch merged into m; false when it is not one. */
static bool apply_msg(model_t *m, uint32_t ch, const chanq_owned_msg_t *msg)
{
    if (msg->msg_type != MT_DATA || msg->channel_id != ch)
        return false;
    Channeldpb__ChannelDataUpdateMessage *u =
        chanq_sync_decode(msg, &channeldpb__channel_data_update_message__descriptor);
    bool ok = u && u->data && u->data->type_url && strcmp(u->data->type_url, URL_CELL) == 0 &&
              model_apply(m, u->data->value.data, u->data->value.len);
    chanq_unpack_free(u);
    return ok;
}

/* The owner's state after updates 1..last and the END update last + 1. */
static model_t owner_state(uint32_t last)
{
    model_t m = {0};
    for (int i = 0; i < NENT; i++) {
        m.has[i] = true;
        for (uint32_t s = last; s >= 1 && !m.seq[i]; s--)
            if ((s - 1) % NENT == (uint32_t)i)
                m.seq[i] = s;
    }
    m.has[NENT] = true;
    m.seq[NENT] = last + 1;
    return m;
}

/* The packed size of a full state (every entity at full LABEL, the END key included): the
 * largest state and window of the channel. */
static size_t full_state_size(void)
{
    size_t len;
    model_t m = owner_state(1000000);
    free(model_bytes(&m, &len));
    return len;
}

/* ---- the data channel ------------------------------------------------------------------------ */

static void send_entity(it_conn_t *own, uint32_t ch, uint32_t key, uint32_t seq)
{
    int s = slot_of(key);
    assert_true(s >= 0);
    model_t m = {0};
    m.has[s] = true;
    m.seq[s] = seq;
    size_t len;
    uint8_t *v = model_bytes(&m, &len);
    assert_int_equal(chanq_sync_data_update(own->s, ch, URL_CELL, v, len), 0);
    free(v);
}

/* Update seq (>= 1) sets entity 1 + (seq - 1) % NENT. */
static void send_update(it_conn_t *own, uint32_t ch, uint32_t seq)
{
    send_entity(own, ch, 1 + (seq - 1) % NENT, seq);
}

/* A SUBWORLD channel of own's whose data starts with every entity at "init"; own takes no
 * fan-outs (NO_ACCESS), so its replies are not interleaved with data. */
static uint32_t create_data_channel(it_conn_t *own)
{
    model_t m0 = {0};
    for (int i = 0; i < NENT; i++)
        m0.has[i] = true;
    size_t len;
    uint8_t *v = model_bytes(&m0, &len);
    chanq_channel_data_t d = {URL_CELL, v, len, NULL};
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_dataaccess = 1;
    o.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__NO_ACCESS;
    assert_int_equal(
        chanq_client_create_channel_data(chanq_sync_client(own->s), 7, CT_SUBWORLD, "ovl", &o, &d),
        0);
    assert_int_equal(chanq_sync_flush(own->s, IT_TIMEOUT_MS), 0);
    free(v);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(own, MT_CREATE, 7, &channeldpb__create_channel_result_message__descriptor, NULL);
    uint32_t ch = cr->channelid;
    chanq_unpack_free(cr);
    it_expect_sub(own, ch, 0, own->id, CONN_SERVER, CT_SUBWORLD, 0);
    return ch;
}

/* own subscribes c to ch (interval_ms 0: the type's default); both get the SUB result. */
static void sub_reader(it_conn_t *own, it_conn_t *c, uint32_t ch, uint32_t interval_ms)
{
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    if (interval_ms) {
        o.has_fanoutintervalms = 1;
        o.fanoutintervalms = interval_ms;
    }
    assert_int_equal(chanq_sync_sub_to_channel(own->s, 11, ch, c->id, &o), 0);
    it_expect_sub(own, ch, 11, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
}

/* ---- a reader thread: merges every fan-out until the END key arrives ------------------------- */

typedef struct reader {
    pthread_t th;
    it_conn_t *c;
    uint32_t ch;
    model_t m;
    uint32_t fanouts; /* fan-outs merged */
    atomic_uint seen; /* the highest seq merged: the owner's flow control */
    atomic_bool done;
    atomic_int err; /* 0, or the line of the first problem */
    int rc;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    while (!r->m.has[NENT]) {
        chanq_owned_msg_t msg;
        int rc = chanq_sync_recv(r->c->s, &msg, SLOW_MS);
        if (rc < 0) {
            r->rc = rc;
            atomic_store(&r->err, __LINE__);
            break;
        }
        bool ok = apply_msg(&r->m, r->ch, &msg);
        chanq_owned_msg_done(&msg);
        if (!ok) {
            atomic_store(&r->err, __LINE__);
            break;
        }
        r->fanouts++;
        uint32_t top = 0;
        for (int i = 0; i < NENT; i++)
            top = r->m.seq[i] > top ? r->m.seq[i] : top;
        atomic_store(&r->seen, top);
    }
    atomic_store(&r->done, true);
    return NULL;
}

static void reader_start(reader_t *r, it_conn_t *c, uint32_t ch)
{
    memset(r, 0, sizeof(*r));
    r->c = c;
    r->ch = ch;
    assert_int_equal(pthread_create(&r->th, NULL, reader_main, r), 0);
}

static void reader_join(reader_t *r, const char *who)
{
    pthread_join(r->th, NULL);
    if (atomic_load(&r->err))
        print_error("%s (conn %u) failed at line %d after %u fan-outs (rc %s)\n", who, r->c->id,
                    atomic_load(&r->err), r->fanouts, cq_strerror(r->rc));
    assert_int_equal(atomic_load(&r->err), 0);
}

/* Flow control: waits until the reader merged update seq - WINDOW (or failed). */
static void keep_pace(reader_t *r, uint32_t seq)
{
    int64_t deadline = cq_test_mono_ms() + PHASE_MS;
    while (seq > atomic_load(&r->seen) + WINDOW && !atomic_load(&r->done)) {
        if (cq_test_mono_ms() > deadline)
            fail_msg("conn %u merged nothing past seq %u for %d ms", r->c->id,
                     atomic_load(&r->seen), PHASE_MS);
        nap();
    }
}

/* ---- a slow reader: resynchronised, never queued for, never closed --------------------------- */

static void start_data(const char *limit)
{
    const char *fds = getenv("WORLD_FDS");
    assert_non_null(fds);
    it_start("--channel-data-types", fds, "--channel-settings", it_file("chs.json", SETTINGS),
             "--sendq-data-limit", limit, NULL);
}

/* A stalled reader resumes: it merges what it is sent until it has the owner's END; then it
 * unsubscribes, and the answer is the last thing it gets on ch. Everything merged is in m. */
static void resume(it_conn_t *st, uint32_t ch, model_t *m)
{
    chanq_owned_msg_t msg;
    while (!m->has[NENT]) {
        it_recv(st, &msg);
        bool ok = apply_msg(m, ch, &msg);
        if (!ok)
            print_error("conn %u: expected data on %u, got type %u chan %u\n", st->id, ch,
                        msg.msg_type, msg.channel_id);
        chanq_owned_msg_done(&msg);
        assert_true(ok);
    }
    /* the connection answers a request; data before the answer changes nothing */
    assert_int_equal(chanq_sync_unsub_from_channel(st->s, 41, ch, st->id), 0);
    for (;;) {
        it_recv(st, &msg);
        if (msg.msg_type == MT_UNSUB)
            break;
        bool ok = apply_msg(m, ch, &msg);
        chanq_owned_msg_done(&msg);
        assert_true(ok);
    }
    assert_int_equal(msg.stub_id, 41);
    assert_int_equal(msg.channel_id, ch);
    chanq_owned_msg_done(&msg);
}

/* Two subscribers stop reading (consecutive ids: with two workers one lives on the channel's
 * worker and one on the other, so both the local and the XM_RESYNC path run) while the owner
 * keeps a normal reader busy. Neither is closed; each ends with the owner's state exactly, and
 * what each received is bounded by the kernel's buffers, the data limit and a few full states,
 * a quarter of what the normal reader received meanwhile at most. */
static void test_stalled_reader_resynced(void **state)
{
    (void)state;
    char limit[16];
    snprintf(limit, sizeof(limit), "%u", DATA_LIMIT);
    start_data(limit);
    it_conn_t *own = it_server();
    it_conn_t *nc = it_client(), *st[2] = {it_client(), it_client()};
    uint32_t ch = create_data_channel(own);
    sub_reader(own, nc, ch, 0);
    for (int i = 0; i < 2; i++)
        sub_reader(own, st[i], ch, 0);
    uint64_t rx0[2], rcv = 0;
    for (int i = 0; i < 2; i++) {
        rx0[i] = rx_bytes(st[i]);
        rcv = max64(rcv, rcvbuf(st[i]));
    }
    const uint64_t fs = full_state_size() + 256; /* the record around it */
    const uint64_t bound = rcv + wmem_max() + DATA_LIMIT + 4 * fs + 64 * 1024;
    reader_t n;
    reader_start(&n, nc, ch);
    uint64_t nrx0 = rx_bytes(nc);
    uint32_t last = 0;
    while (rx_bytes(nc) - nrx0 < 4 * bound) {
        assert_true(last < MAX_UPD);
        keep_pace(&n, ++last);
        assert_false(atomic_load(&n.done)); /* an error: END was not sent */
        send_update(own, ch, last);
    }
    send_entity(own, ch, END_KEY, last + 1);
    reader_join(&n, "the normal reader");
    uint64_t nrx = rx_bytes(nc) - nrx0;
    assert_true(nrx >= 4 * bound);
    model_t want = owner_state(last);
    expect_same_state(&n.m, &want, "the normal reader");
    int64_t resyncs = metric("chanq_data_resyncs_total");
    print_message("# %u updates; the normal reader got %llu bytes in %u fan-outs; %lld resyncs; "
                  "bound %llu bytes\n",
                  last, (unsigned long long)nrx, n.fanouts, (long long)resyncs,
                  (unsigned long long)bound);
    assert_true(resyncs > 0);
    for (int i = 0; i < 2; i++) {
        /* its SO_RCVBUF as it was all along: autotuning only grows it when it reads */
        uint64_t max = rcvbuf(st[i]) + wmem_max() + DATA_LIMIT + 4 * fs + 64 * 1024;
        model_t m = {0};
        resume(st[i], ch, &m);
        it_expect_unsub(own, ch, 0, st[i]->id, CONN_CLIENT, CT_SUBWORLD); /* the owner's copy */
        char who[48];
        snprintf(who, sizeof(who), "stalled reader %d (conn %u)", i, st[i]->id);
        expect_same_state(&m, &want, who);
        uint64_t got = rx_bytes(st[i]) - rx0[i];
        print_message("# %s received %llu bytes after it stalled\n", who, (unsigned long long)got);
        assert_true(got <= max);
    }
    assert_int_equal(metric("slow_consumer_closed"), 0);
    /* chanqd's own state, a new subscriber's first fan-out: the same bytes */
    it_conn_t *late = it_client();
    sub_reader(own, late, ch, 0);
    Channeldpb__ChannelDataUpdateMessage *u =
        it_expect(late, MT_DATA, 0, &channeldpb__channel_data_update_message__descriptor, NULL);
    size_t wl;
    uint8_t *w = model_bytes(&want, &wl);
    assert_non_null(u->data);
    assert_int_equal(u->data->value.len, wl);
    assert_memory_equal(u->data->value.data, w, wl);
    free(w);
    chanq_unpack_free(u);
}

/* ---- a late worker coarsens, and the data still converges ------------------------------------ */

/* Freezes chanqd for STOP_MS: every worker's earliest due fan-out is then at least STOP_MS minus
 * one window late, however fast the machine, which is what raises the overload level (>= 30 ms).
 * The sleep is the stimulus, not a wait for something. */
static void freeze_chanqd(void)
{
    pid_t pid = it_srv()->pid;
    assert_int_equal(kill(pid, SIGSTOP), 0);
    cq_test_sleep_ms(STOP_MS);
    assert_int_equal(kill(pid, SIGCONT), 0);
}

/* A near (20 ms) and a far (100 ms) subscriber; chanqd is frozen long enough to be late: the
 * level rises, far windows are stretched, missed windows merged, the first rise is logged;
 * both subscribers still end with the owner's state exactly. */
static void test_late_worker_coarsens(void **state)
{
    (void)state;
    const char *fds = getenv("WORLD_FDS");
    assert_non_null(fds);
    it_start("--channel-data-types", fds, NULL);
    it_conn_t *own = it_server();
    it_conn_t *near = it_client(), *far = it_client();
    uint32_t ch = create_data_channel(own);
    sub_reader(own, near, ch, 20);
    sub_reader(own, far, ch, 100);
    reader_t rn, rf;
    reader_start(&rn, near, ch);
    reader_start(&rf, far, ch);
    uint32_t seq = 0;
    /* Both have had their first fan-out, so the windows that close while chanqd is frozen are
     * missed ones. The level can fall again after a calm second: freeze until it is seen up. */
    int64_t level = 0;
    for (int tries = 0; tries < 5 && level < 1; tries++) {
        for (int k = 0; k < 16; k++)
            send_update(own, ch, ++seq);
        keep_pace(&rn, seq + WINDOW);
        keep_pace(&rf, seq + WINDOW);
        freeze_chanqd();
        level = cq_testsrv_metric_wait_ge(it_srv(), "chanq_data_coarsen_level", 1, 1000);
    }
    /* The call that found the worker late raised the level and, in the same call, merged the
     * near windows missed meanwhile and stretched the far one: published together. */
    int64_t rises = metric("chanq_data_coarsen_rises_total");
    int64_t merged = metric("chanq_data_windows_merged_total");
    int64_t stretched = metric("chanq_data_windows_stretched_total");
    print_message("# level %lld; %lld rises, %lld windows merged, %lld stretched\n",
                  (long long)level, (long long)rises, (long long)merged, (long long)stretched);
    assert_true(level >= 1);
    assert_true(rises >= 1);
    assert_true(merged >= 1);
    assert_true(stretched >= 1);
    it_log_expect("ms late: coarsening (far interest's windows stretched");
    while (seq < 256)
        send_update(own, ch, ++seq);
    send_entity(own, ch, END_KEY, seq + 1);
    reader_join(&rn, "the near reader");
    reader_join(&rf, "the far reader");
    model_t want = owner_state(seq);
    expect_same_state(&rn.m, &want, "the near reader");
    expect_same_state(&rf.m, &want, "the far reader");
}

/* ---- the handover trail under overload ------------------------------------------------------- */

#define S0       65536u
#define ENT      524288u
#define CROSSES  11 /* odd: ENT ends in 65538, owned by server 1 */
#define MOVES    16 /* position updates in the new cell after each crossing */
#define FLOOD    2  /* rounds of the fast writer after each crossing */
#define TAG      7000u
#define FAKE     4    /* the writer's entities in a cell: keys 1..FAKE */
#define FAKE_LEN 9000 /* bytes of their classPath */
/* the largest state of a cell: the writer's entities and ENT's reference */
#define CELL_FS (FAKE * (FAKE_LEN + 32) + 256)

/* A SUB result (stub 0) on chan for subscriber who. */
static void expect_sub0(it_conn_t *c, uint32_t chan, uint32_t who, uint32_t ctype)
{
    Channeldpb__SubscribedToChannelResultMessage *r = it_expect_skip(
        c, MT_SUB, chan, 0, &channeldpb__subscribed_to_channel_result_message__descriptor);
    assert_int_equal(r->connid, who);
    assert_int_equal(r->conntype, ctype);
    chanq_unpack_free(r);
}

/* Two servers take the two slots of 4x1, in the order test_it_handover.c checks in detail. */
static void fill_grid(it_conn_t **s0, it_conn_t **s1)
{
    *s0 = it_server();
    *s1 = it_server();
    it_create_spatial(*s0, 7);
    chanq_unpack_free(it_expect_skip(*s0, MT_CREATE_SPATIAL, 0, 7, NULL));
    expect_sub0(*s0, S0, (*s0)->id, CONN_SERVER);
    expect_sub0(*s0, S0 + 1, (*s0)->id, CONN_SERVER);
    chanq_unpack_free(it_expect_skip(*s0, MT_REGIONS, 0, 7, NULL));
    it_create_spatial(*s1, 9);
    expect_sub0(*s1, S0 + 1, (*s1)->id, CONN_SERVER);
    chanq_unpack_free(it_expect_skip(*s1, MT_READY, 0, 0, NULL));
    chanq_unpack_free(it_expect_skip(*s1, MT_CREATE_SPATIAL, 0, 9, NULL));
    expect_sub0(*s1, S0 + 2, (*s1)->id, CONN_SERVER);
    expect_sub0(*s1, S0 + 3, (*s1)->id, CONN_SERVER);
    chanq_unpack_free(it_expect_skip(*s1, MT_REGIONS, 0, 9, NULL));
    expect_sub0(*s0, S0 + 2, (*s0)->id, CONN_SERVER);
    chanq_unpack_free(it_expect_skip(*s0, MT_READY, 0, 0, NULL));
}

/* Server s points who's interest at all four cells (spots at distance 0: 20 ms windows). */
static void watch_cells(it_conn_t *s, it_conn_t *who)
{
    Channeldpb__SpatialInfo pts[4], *pp[4];
    for (int i = 0; i < 4; i++) {
        channeldpb__spatial_info__init(&pts[i]);
        pts[i].x = -1500 + 1000 * i;
        pp[i] = &pts[i];
    }
    Channeldpb__SpotsAOI sp = CHANNELDPB__SPOTS_AOI__INIT;
    sp.n_spots = 4;
    sp.spots = pp;
    Channeldpb__SpatialInterestQuery q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT;
    q.spotsaoi = &sp;
    Channeldpb__UpdateSpatialInterestMessage m = CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    m.connid = who->id;
    m.query = &q;
    it_send(s, 0, 0, 0, MT_INTEREST, &m.base);
}

/* s0 points cl's interest at all four cells; cl and the cells' owners get the SUB results, in
 * any order across cells. */
static void watch_all(it_conn_t *s0, it_conn_t *s1, it_conn_t *cl)
{
    watch_cells(s0, cl);
    it_conn_t *who[3] = {cl, s0, s1};
    const uint32_t first[3] = {S0, S0, S0 + 2}, count[3] = {4, 2, 2};
    for (int k = 0; k < 3; k++) {
        bool seen[4] = {false};
        for (uint32_t i = 0; i < count[k]; i++) {
            chanq_owned_msg_t msg;
            it_next(who[k], true, &msg);
            assert_int_equal(msg.msg_type, MT_SUB);
            assert_in_range(msg.channel_id, first[k], first[k] + count[k] - 1);
            assert_false(seen[msg.channel_id - S0]);
            seen[msg.channel_id - S0] = true;
            chanq_owned_msg_done(&msg);
        }
    }
}

/* ENT's data: at x with seq (EntityChannelData); name "tank" when seq is 0. */
static void send_entity_at(it_conn_t *s, uint32_t chan, uint32_t msg_type, uint32_t stub, float x,
                           uint32_t seq, uint32_t ctx)
{
    Chanqworld__Vector3f pos = CHANQWORLD__VECTOR3F__INIT;
    pos.x = x;
    Chanqworld__TransformState tr = CHANQWORLD__TRANSFORM_STATE__INIT;
    tr.position = &pos;
    Chanqworld__EntityChannelData e = CHANQWORLD__ENTITY_CHANNEL_DATA__INIT;
    e.transform = &tr;
    e.name = seq ? "" : "tank";
    e.seq = seq;
    size_t len;
    uint8_t *v = it_pack(&e.base, &len);
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = URL_ENT;
    any.value.data = v;
    any.value.len = len;
    if (msg_type == MT_CREATE_ENTITY) {
        Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
        m.entityid = ENT;
        m.metadata = "tank";
        m.data = &any;
        it_send(s, chan, 0, stub, msg_type, &m.base);
    } else {
        Channeldpb__ChannelDataUpdateMessage u = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
        u.data = &any;
        u.contextconnid = ctx;
        it_send(s, chan, 0, stub, msg_type, &u.base);
    }
    free(v);
}

/* What one connection saw of the walk. */
typedef struct ho_rec {
    uint32_t src, dst, ctx;
    int data; /* 0: none, 1: ENT's reference, 2: with ENT's full data */
} ho_rec_t;

typedef struct hoview {
    pthread_t th;
    it_conn_t *c;
    ho_rec_t ho[CROSSES + 4];
    atomic_uint n_ho;
    atomic_uint fanouts;       /* fan-outs of 65538 */
    _Atomic uint64_t bytes;    /* their bodies' bytes */
    uint32_t ent_subs, unsubs; /* SUB and UNSUB results on ENT */
    bool asked;                /* the owner probe reached it */
    atomic_int err;
    int rc;
} hoview_t;

/* 0, 1 or 2 as ho_rec_t.data; -1 for data that is not ENT's entry alone. */
static int ho_data(const Channeldpb__ChannelDataHandoverMessage *h)
{
    if (!h->data)
        return 0;
    Chanqworld__SpatialChannelData *d =
        chanqworld__spatial_channel_data__unpack(NULL, h->data->value.len, h->data->value.data);
    if (!d)
        return -1;
    int k = -1;
    if (d->n_entities == 1 && d->entities[0]->key == ENT && d->entities[0]->value &&
        d->entities[0]->value->objref && d->entities[0]->value->objref->netid == ENT) {
        const Google__Protobuf__Any *e = d->entities[0]->value->entitydata;
        k = !e ? 1 : e->type_url && strcmp(e->type_url, URL_ENT) == 0 ? 2 : -1;
    }
    chanqworld__spatial_channel_data__free_unpacked(d, NULL);
    return k;
}

/* One message of the walk; returns 1 at the "end" marker, 0 to go on, -1 on a surprise. */
static int view_msg(hoview_t *v, const chanq_owned_msg_t *m)
{
    if (m->msg_type == MT_DATA) {
        if (m->channel_id == S0 + 2) {
            atomic_fetch_add(&v->bytes, m->body_len);
            atomic_fetch_add(&v->fanouts, 1);
        }
        return 0;
    }
    if (m->msg_type == MT_HANDOVER) {
        Channeldpb__ChannelDataHandoverMessage *h =
            chanq_sync_decode(m, &channeldpb__channel_data_handover_message__descriptor);
        uint32_t n = atomic_load(&v->n_ho);
        int k = h ? ho_data(h) : -1;
        bool ok = h && k >= 0 && n < CROSSES + 4 && m->channel_id == h->dstchannelid;
        if (ok)
            v->ho[n] = (ho_rec_t){h->srcchannelid, h->dstchannelid, h->contextconnid, k};
        chanq_unpack_free(h);
        if (!ok)
            return -1;
        atomic_store(&v->n_ho, n + 1);
        return 0;
    }
    if ((m->msg_type == MT_SUB || m->msg_type == MT_UNSUB) && m->channel_id == ENT) {
        *(m->msg_type == MT_SUB ? &v->ent_subs : &v->unsubs) += 1;
        return 0;
    }
    if (m->msg_type != MT_USER)
        return -1;
    Channeldpb__ServerForwardMessage *f =
        chanq_sync_decode(m, &channeldpb__server_forward_message__descriptor);
    int r = -1;
    if (f && m->channel_id == ENT && f->payload.len == 3) {
        if (memcmp(f->payload.data, "end", 3) == 0)
            r = 1;
        else if (memcmp(f->payload.data, "who", 3) == 0 && !v->asked)
            r = 0, v->asked = true;
    }
    chanq_unpack_free(f);
    return r;
}

static void *view_main(void *arg)
{
    hoview_t *v = arg;
    for (;;) {
        chanq_owned_msg_t m;
        int rc = chanq_sync_recv(v->c->s, &m, SLOW_MS);
        if (rc < 0) {
            v->rc = rc;
            atomic_store(&v->err, __LINE__);
            return NULL;
        }
        int r = view_msg(v, &m);
        if (r < 0)
            print_error("conn %u: unexpected type %u chan %u stub %u during the walk\n", v->c->id,
                        m.msg_type, m.channel_id, m.stub_id);
        chanq_owned_msg_done(&m);
        if (r < 0)
            atomic_store(&v->err, __LINE__);
        if (r)
            return NULL;
    }
}

/* Waits until v saw n handovers (or failed). */
static void wait_handovers(hoview_t *v, uint32_t n)
{
    int64_t deadline = cq_test_mono_ms() + HO_MS;
    while (atomic_load(&v->n_ho) < n && !atomic_load(&v->err)) {
        if (cq_test_mono_ms() > deadline)
            fail_msg("conn %u: handover %u did not come in %d ms", v->c->id, n, HO_MS);
        nap();
    }
    assert_int_equal(atomic_load(&v->err), 0);
}

/* The fast writer: every one of its entities in 65536 and 65538 (the worker of ENT and of a
 * border cell) changes, FAKE_LEN new bytes each, n times; after each round it waits for the
 * next fan-out of 65538 to server 0 (v), so it writes as fast as windows close: a faster writer
 * would only have its updates merged away. */
static void flood(it_conn_t *w, hoview_t *v, uint32_t *j, int n)
{
    static char cls[FAKE_LEN + 1];
    for (int r = 0; r < n; r++) {
        uint32_t seen = atomic_load(&v->fanouts);
        for (int i = 0; i < 2 * FAKE; i++, ++*j) {
            memset(cls, 'a' + (int)(*j % 26), FAKE_LEN);
            cls[FAKE_LEN] = '\0';
            it_put_cell_ref(w, *j % 2 ? S0 + 2 : S0, 1 + (*j / 2) % FAKE, cls, *j);
        }
        int64_t deadline = cq_test_mono_ms() + HO_MS;
        while (atomic_load(&v->fanouts) == seen && !atomic_load(&v->err)) {
            if (cq_test_mono_ms() > deadline)
                fail_msg("conn %u: no fan-out of 65538 in %d ms", v->c->id, HO_MS);
            nap();
        }
        assert_int_equal(atomic_load(&v->err), 0);
    }
}

/* v saw exactly the walk's handovers, in order; the first one carried ENT's full data when
 * first_full (a subscription it started), every other one ENT's reference. */
static void expect_trail(const hoview_t *v, bool first_full)
{
    assert_int_equal(atomic_load(&v->n_ho), CROSSES);
    for (uint32_t c = 0; c < CROSSES; c++) {
        uint32_t from = c % 2 ? S0 + 2 : S0 + 1, to = c % 2 ? S0 + 1 : S0 + 2;
        const ho_rec_t *h = &v->ho[c];
        if (h->src != from || h->dst != to || h->ctx != TAG + c)
            print_error("conn %u: handover %u is %u -> %u (ctx %u), not %u -> %u (ctx %u)\n",
                        v->c->id, c, h->src, h->dst, h->ctx, from, to, TAG + c);
        assert_int_equal(h->src, from);
        assert_int_equal(h->dst, to);
        assert_int_equal(h->ctx, TAG + c);
        assert_int_equal(h->data, c == 0 && first_full ? 2 : 1);
    }
}

/* The probe's first fan-out of each cell is its full state: ENT's entry is in `in` only. */
static void expect_cell_of_ent(it_conn_t *w, it_conn_t *probe, it_conn_t *s0, uint32_t in)
{
    watch_cells(w, probe);
    bool sub[4] = {false}, full[4] = {false};
    for (int got = 0; got < 8;) {
        chanq_owned_msg_t msg;
        it_recv(probe, &msg);
        assert_in_range(msg.channel_id, S0, S0 + 3);
        uint32_t k = msg.channel_id - S0;
        if (msg.msg_type == MT_SUB) {
            assert_false(sub[k]);
            sub[k] = true;
            got++;
        } else if (!full[k]) {
            assert_int_equal(msg.msg_type, MT_DATA);
            assert_true(sub[k]);
            Channeldpb__ChannelDataUpdateMessage *u =
                chanq_sync_decode(&msg, &channeldpb__channel_data_update_message__descriptor);
            assert_non_null(u);
            assert_non_null(u->data);
            Chanqworld__SpatialChannelData *d = chanqworld__spatial_channel_data__unpack(
                NULL, u->data->value.len, u->data->value.data);
            assert_non_null(d);
            int ent = 0;
            for (size_t i = 0; i < d->n_entities; i++) {
                if (d->entities[i]->key != ENT)
                    continue;
                ent++;
                const Chanqworld__EntityRef *r = d->entities[i]->value->objref;
                assert_non_null(r);
                assert_int_equal(r->netid, ENT);
                assert_string_equal(r->classpath, "tank");
                assert_int_equal(r->owningconnid, s0->id);
            }
            if (ent != (msg.channel_id == in))
                print_error("cell %u holds ENT %d times\n", msg.channel_id, ent);
            assert_int_equal(ent, msg.channel_id == in);
            chanqworld__spatial_channel_data__free_unpacked(d, NULL);
            chanq_unpack_free(u);
            full[k] = true;
            got++;
        }
        chanq_owned_msg_done(&msg);
    }
}

/* ENT walks back and forth across the servers' border (65537 <-> 65538) CROSSES times, with
 * MOVES position updates after each crossing, while a writer floods the data of 65536 and 65538
 * (ENT's worker) and a client that watches every cell, and gets every handover, has stopped
 * reading. Each server sees exactly the walk's handovers, in order, none lost, none
 * duplicated; so does the stalled client once it reads again; ENT ends owned by server 1 and
 * in 65538's data only. */
static void test_handover_trail_under_overload(void **state)
{
    (void)state;
    const char *fds = getenv("WORLD_FDS");
    assert_non_null(fds);
    it_start("--channel-data-types", fds, "--spatial-settings", it_file("4x1.json", LAYOUT),
             "--sendq-data-limit", "64k", NULL);
    it_conn_t *s0, *s1;
    fill_grid(&s0, &s1);
    it_conn_t *w = it_server(), *cl = it_client(), *probe = it_client();
    watch_all(s0, s1, cl);
    it_put_cell_ref(s0, S0 + 1, ENT, "tank", s0->id); /* ENT's reference in its first cell */
    send_entity_at(s0, 0, MT_CREATE_ENTITY, 31, -500.0f, 0, 0);
    Channeldpb__CreateChannelResultMessage *cr = it_expect_skip(
        s0, MT_CREATE_ENTITY, S0 + 1, 31, &channeldpb__create_channel_result_message__descriptor);
    assert_int_equal(cr->channelid, ENT);
    chanq_unpack_free(cr);
    expect_sub0(s0, ENT, s0->id, CONN_SERVER);
    hoview_t v[2];
    memset(v, 0, sizeof(v));
    v[0].c = s0;
    v[1].c = s1;
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&v[i].th, NULL, view_main, &v[i]), 0);
    /* cl stops reading here. The writer floods until chanqd has fanned out more of 65538 alone
     * (to s0, and on the same windows to cl) than cl's socket buffers and its data limit hold:
     * from then on cl is behind, and chanqd queues no more data for it. */
    uint64_t rx0 = rx_bytes(cl);
    const uint64_t bound = rcvbuf(cl) + wmem_max() + DATA_LIMIT + 8 * CELL_FS + 64 * 1024;
    uint32_t j = 0;
    while (atomic_load(&v[0].bytes) < bound) {
        assert_true(j < MAX_UPD);
        flood(w, &v[0], &j, 1);
    }
    uint32_t seq = 0;
    for (uint32_t c = 0; c < CROSSES; c++) {
        float x = c % 2 ? -500.0f : 500.0f, dir = c % 2 ? -1.0f : 1.0f;
        send_entity_at(w, ENT, MT_DATA, 0, x, ++seq, TAG + c);
        for (int k = 1; k <= MOVES; k++)
            send_entity_at(w, ENT, MT_DATA, 0, x + dir * 10.0f * (float)k, ++seq, 0);
        flood(w, &v[0], &j, FLOOD);
        for (int i = 0; i < 2; i++)
            wait_handovers(&v[i], c + 1);
    }
    /* The owner probe, then the end marker to each, all through ENT's worker, which sends the
     * handovers: anything lost or repeated would show before the marker. */
    it_sfwd(w, ENT, 0, MT_USER, 0, "who");
    it_sfwd(w, ENT, BC_SINGLE, MT_USER, s0->id, "end");
    it_sfwd(w, ENT, BC_SINGLE, MT_USER, s1->id, "end");
    it_sfwd(w, ENT, BC_SINGLE, MT_USER, cl->id, "end");
    for (int i = 0; i < 2; i++) {
        pthread_join(v[i].th, NULL);
        if (atomic_load(&v[i].err))
            print_error("server %d (conn %u) failed at line %d (rc %s)\n", i, v[i].c->id,
                        atomic_load(&v[i].err), cq_strerror(v[i].rc));
        assert_int_equal(atomic_load(&v[i].err), 0);
    }
    expect_trail(&v[0], false); /* s0 created ENT: subscribed all along */
    expect_trail(&v[1], true);
    assert_false(v[0].asked);
    assert_true(v[1].asked); /* the owner */
    assert_int_equal(v[0].unsubs + v[1].unsubs, 0);
    /* SUB results on ENT: s1's own at the first crossing, and as ENT's owner by then the copy of
     * cl's; s0's own came before the walk */
    assert_int_equal(v[0].ent_subs, 0);
    assert_int_equal(v[1].ent_subs, 2);
    /* The stalled client reads again: every handover is there, once. */
    hoview_t vc;
    memset(&vc, 0, sizeof(vc));
    vc.c = cl;
    view_main(&vc);
    if (atomic_load(&vc.err))
        print_error("the stalled client failed at line %d (rc %s)\n", atomic_load(&vc.err),
                    cq_strerror(vc.rc));
    assert_int_equal(atomic_load(&vc.err), 0);
    expect_trail(&vc, true);
    assert_int_equal(vc.ent_subs, 1);
    assert_int_equal(vc.unsubs, 0);
    /* cl got less than 65538 alone offered it: its data was dropped, its handovers were not */
    uint64_t got = rx_bytes(cl) - rx0;
    print_message("# the stalled client received %llu bytes; 65538 alone offered %llu\n",
                  (unsigned long long)got, (unsigned long long)atomic_load(&v[0].bytes));
    assert_true(got <= bound);
    assert_true(metric("chanq_data_resyncs_total") >= 1);
    expect_cell_of_ent(w, probe, s0, S0 + 2);
    print_message("# %u cell updates, %u entity updates, %lld resyncs\n", j, seq,
                  (long long)metric("chanq_data_resyncs_total"));
    assert_int_equal(metric("slow_consumer_closed"), 0);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_stalled_reader_resynced),
    IT_TEST(test_handover_trail_under_overload),
    IT_TEST(test_late_worker_coarsens),
};

IT_MAIN(tests)
