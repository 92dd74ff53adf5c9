/* test_it_slow.c - a subscriber that never reads is closed at --sendq-hard-limit while the
 * others receive every message of a broadcast flood, in order; a silent connection is closed at
 * --idle-timeout-ms.
 *
 * Sizes: on Linux loopback the kernel alone absorbs about 4 MB for a peer that never reads
 * (the sender's SO_SNDBUF autotunes up to tcp_wmem[2]), so the flood is 8000 x 1 KiB = 8 MiB:
 * about twice what the kernel can hold, far above the 64 KiB hard limit. The stalled client's
 * SO_RCVBUF is left alone on purpose: shrinking it after connect (chanq_sync_connect gives no
 * earlier hook) makes the kernel drain the closed connection's backlog by zero-window probes,
 * so the final EOF would take far longer than any sane timeout. */
#include "it_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_MSGS    8000
#define N_READERS 3
#define MSG_SIZE  1024
#define WINDOW    48 /* messages the sender may run ahead of the slowest normal reader */

typedef struct reader {
    pthread_t th;
    it_conn_t *c;
    atomic_uint got;
    atomic_int err; /* 0, or the line of the first problem */
    int rc;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    for (unsigned i = 0; i < N_MSGS; i++) {
        chanq_owned_msg_t m;
        int rc = chanq_sync_recv(r->c->s, &m, 10000);
        if (rc < 0) {
            r->rc = rc;
            atomic_store(&r->err, __LINE__);
            return NULL;
        }
        Channeldpb__ServerForwardMessage *f =
            chanq_sync_decode(&m, &channeldpb__server_forward_message__descriptor);
        char want[16];
        snprintf(want, sizeof(want), "%08u", i);
        bool ok = f && m.msg_type == 120 && m.channel_id == 0 &&
                  m.broadcast == (BC_ALL | BC_BUT_SERVER) && f->payload.len == MSG_SIZE &&
                  memcmp(f->payload.data, want, 8) == 0;
        chanq_unpack_free(f);
        chanq_owned_msg_done(&m);
        if (!ok) {
            atomic_store(&r->err, __LINE__);
            return NULL;
        }
        atomic_store(&r->got, i + 1);
    }
    return NULL;
}

static void nap(void)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static void test_slow_subscriber_closed(void **state)
{
    it_start("--sendq-hard-limit", "64k", "--sendq-soft-limit", "64k", NULL);
    it_conn_t *g = it_gowner();
    reader_t rd[N_READERS];
    memset(rd, 0, sizeof(rd));
    for (int i = 0; i < N_READERS; i++) {
        rd[i].c = it_client();
        it_sub(g, 10, 0, rd[i].c->id, -1);
        it_expect_sub(g, 0, 10, rd[i].c->id, CONN_CLIENT, CT_GLOBAL, 1);
        it_expect_sub(rd[i].c, 0, 0, rd[i].c->id, CONN_CLIENT, CT_GLOBAL, 1);
    }
    it_conn_t *stalled = it_client();
    it_sub(g, 11, 0, stalled->id, -1);
    it_expect_sub(g, 0, 11, stalled->id, CONN_CLIENT, CT_GLOBAL, 1);
    it_expect_sub(stalled, 0, 0, stalled->id, CONN_CLIENT, CT_GLOBAL, 1);

    for (int i = 0; i < N_READERS; i++)
        assert_int_equal(pthread_create(&rd[i].th, NULL, reader_main, &rd[i]), 0);

    char payload[MSG_SIZE + 1];
    memset(payload, 'p', MSG_SIZE);
    payload[MSG_SIZE] = '\0';
    int send_err = 0;
    bool reader_failed = false;
    for (unsigned i = 0; i < N_MSGS && !send_err && !reader_failed; i++) {
        /* flow control: never run more than WINDOW messages ahead of the normal readers */
        for (;;) {
            unsigned slowest = N_MSGS;
            for (int k = 0; k < N_READERS; k++) {
                unsigned got = atomic_load(&rd[k].got);
                slowest = got < slowest ? got : slowest;
                reader_failed |= atomic_load(&rd[k].err) != 0;
            }
            if (reader_failed || i < slowest + WINDOW)
                break;
            nap();
        }
        char head[16];
        snprintf(head, sizeof(head), "%08u", i);
        memcpy(payload, head, 8);
        send_err =
            chanq_sync_server_forward(g->s, 0, BC_ALL | BC_BUT_SERVER, 120, 0, payload, MSG_SIZE);
    }
    for (int i = 0; i < N_READERS; i++)
        pthread_join(rd[i].th, NULL);
    if (send_err)
        print_error("sender: %s\n", cq_strerror(send_err));
    assert_int_equal(send_err, 0);
    for (int i = 0; i < N_READERS; i++) {
        if (atomic_load(&rd[i].err))
            print_error("reader %d failed at line %d after %u messages (rc %s)\n", i,
                        atomic_load(&rd[i].err), atomic_load(&rd[i].got), cq_strerror(rd[i].rc));
        assert_int_equal(atomic_load(&rd[i].err), 0);
        assert_int_equal(atomic_load(&rd[i].got), N_MSGS);
    }
    int closed = chanq_sync_is_closed(stalled->s, IT_TIMEOUT_MS);
    if (closed != 1)
        print_error("stalled conn %u not closed (%d); it had %zu messages to read\n", stalled->id,
                    closed, chanq_sync_queued(stalled->s));
    assert_int_equal(closed, 1);
    assert_int_equal(cq_testsrv_metric_wait_ge(it_srv(), "slow_consumer_closed", 1, IT_TIMEOUT_MS),
                     1);
    char line[64];
    snprintf(line, sizeof(line), "closing conn %u (CLIENT, ", stalled->id);
    it_log_expect(line);
    it_log_expect("slow consumer: over sendq-hard-limit");
    /* the readers are still connected and subscribed */
    it_sfwd(g, 0, BC_ALL | BC_BUT_SERVER, 121, 0, "done");
    for (int i = 0; i < N_READERS; i++)
        it_expect_user(rd[i].c, 0, 121, BC_ALL | BC_BUT_SERVER, 0, 0, "done");
}

/* --idle-timeout-ms: a connection that sends nothing for that long is closed, with the reason
 * logged and counted in idle_timeout_closed. */
static void test_idle_timeout_closes(void **state)
{
    it_need_visible_close("the timeout is a close of the client");
    it_start("--idle-timeout-ms", "300", NULL);
    it_conn_t *c = it_client();
    it_expect_closed(c);
    char line[64];
    snprintf(line, sizeof(line), "closing conn %u (CLIENT, ", c->id);
    it_log_expect(line);
    it_log_expect("idle: nothing received for idle-timeout-ms");
    assert_int_equal(cq_testsrv_metric(it_srv(), "idle_timeout_closed"), 1);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_slow_subscriber_closed),
    IT_TEST(test_idle_timeout_closes),
};

IT_MAIN(tests)
