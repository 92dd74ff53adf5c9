/* bridge_player.c - a game client of the cluster bridge test (bridge.sh): connects to a chanqd's
 * client port, authenticates, subscribes to GLOBAL and prints every durable-topic event it
 * receives there (doc/bridge.md), until SIGTERM/SIGINT, then drains for a moment and exits.
 *
 *   bridge_player HOST:PORT PIT MSG_TYPE
 *
 * stdout, one line per event, times wall-clock ms:
 *   sub <t_ms>                                                  subscribed: events follow
 *   ev <shard> <offset> <producer_id> <seq> <epoch> <prev_offset> <t_ms>
 *   # ...                                                       summaries
 * Exit 0 after SIGTERM, 1 when the connection failed or closed, 2 on usage errors.
 */
#include "chanq.h"
#include "chanq_sync.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int print_event(const chanq_owned_msg_t *m)
{
    Chanqpb__TopicEvent *ev = chanq_topic_event_decode(m->body, m->body_len);
    if (!ev) {
        printf("# not a TopicEvent: %u bytes\n", m->body_len);
        return -1;
    }
    printf("ev %u %" PRIu64 " %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 "\n", ev->shard,
           ev->offset, *ev->producer_id ? ev->producer_id : "-", ev->seq, ev->epoch,
           ev->prev_offset, wall_ms());
    chanq_unpack_free(&ev->base);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOST:PORT PIT MSG_TYPE\n", argv[0]);
        return 2;
    }
    uint32_t msg_type = (uint32_t)strtoul(argv[3], NULL, 10);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    char host[128];
    const char *colon = strrchr(argv[1], ':');
    if (!colon || (size_t)(colon - argv[1]) >= sizeof(host)) {
        fprintf(stderr, "bridge_player: %s is not HOST:PORT\n", argv[1]);
        return 2;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - argv[1]), argv[1]);
    chanq_sync_t *c = NULL;
    int r = chanq_sync_connect(host, (uint16_t)atoi(colon + 1), NULL, 10000, &c);
    int result = -1;
    uint32_t id = 0;
    if (r == 0)
        r = chanq_sync_auth(c, argv[2], "lt", 10000, &result, &id);
    if (r == 0 && result == 0)
        r = chanq_sync_sub_to_channel(c, 1, 0, id, NULL);
    chanq_owned_msg_t m;
    if (r == 0 && result == 0)
        r = chanq_sync_recv_type(c, 6 /* SUB_TO_CHANNEL */, &m, 10000);
    if (r != 0 || result != 0) {
        fprintf(stderr, "bridge_player: connect/auth/sub to %s failed: %d (auth result %d)\n",
                argv[1], r, result);
        chanq_sync_free(c);
        return 1;
    }
    chanq_owned_msg_done(&m);
    printf("sub %" PRId64 "\n", wall_ms());
    uint64_t n = 0, bad = 0;
    int64_t drain_until = 0;
    for (;;) {
        if (stopping && !drain_until)
            drain_until = wall_ms() + 1000;
        if (drain_until && wall_ms() >= drain_until)
            break;
        r = chanq_sync_recv(c, &m, 100);
        if (r == CQ_ETIMEOUT)
            continue;
        if (r != 0) {
            printf("# connection ended: %d\n", r);
            chanq_sync_free(c);
            return 1;
        }
        if (m.msg_type == msg_type) {
            if (print_event(&m) == 0)
                n++;
            else
                bad++;
        }
        chanq_owned_msg_done(&m);
    }
    printf("# events %" PRIu64 " undecodable %" PRIu64 "\n", n, bad);
    chanq_sync_free(c);
    return 0;
}
