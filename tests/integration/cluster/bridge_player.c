/* bridge_player.c - a game client of the cluster bridge test (bridge.sh): connects to a chanqd's
 * client port, authenticates, subscribes to GLOBAL and prints every durable-topic event it
 * accepts there (doc/bridge.md), through libchanq's position tracker (chanq_topics.h), until
 * SIGTERM/SIGINT, then drains for a moment and exits. After its first SUB it resumes with no
 * position, as doc/bridge.md asks of a client: the result's positions are its baseline, one per
 * (topic, shard), so a drop before the first event of a shard still resumes from where the
 * player started. On SIGUSR1 it drops its connection, stays away DROP_MS, connects again and
 * resumes from its positions (TopicResumeMessage).
 *
 *   bridge_player HOST:PORT PIT MSG_TYPE [DROP_MS]
 *
 * stdout, one line per event, times wall-clock ms:
 *   baseline <recovered 0|1> <t_ms> <error>                     the first resume's result
 *   sub <t_ms>                                                  subscribed: events follow
 *   ev <shard> <offset> <producer_id> <seq> <epoch> <prev_offset> <t_ms>   accepted
 *   drop <t_ms>                                                 the connection was dropped
 *   resume <recovered 0|1> <t_ms> <error>                       the resume's result
 *   # ...                                                       summaries
 * Exit 0 after SIGTERM, 1 when the connection failed or closed, 2 on usage errors.
 */
#include "chanq.h"
#include "chanq_sync.h"
#include "chanq_topics.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MT_SUB 6 /* SUB_TO_CHANNEL */

static volatile sig_atomic_t stopping, dropping;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        dropping = 1;
    else
        stopping = 1;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct player {
    char host[128];
    uint16_t port;
    const char *pit;
    uint32_t msg_type;
    chanq_sync_t *c;
    chanq_topics_t *t;
    bool subbed;
    uint64_t n, dropped, bad;
    uint32_t resumes, results; /* resumes sent, results received */
} player_t;

static void on_event(player_t *p, const chanq_owned_msg_t *m)
{
    Chanqpb__TopicEvent *ev = chanq_topic_event_decode(m->body, m->body_len);
    if (!ev) {
        p->bad++;
        return;
    }
    if (chanq_topics_accept(p->t, m->channel_id, ev) == 1) {
        p->n++;
        printf("ev %u %" PRIu64 " %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 "\n", ev->shard,
               ev->offset, *ev->producer_id ? ev->producer_id : "-", ev->seq, ev->epoch,
               ev->prev_offset, wall_ms());
    } else {
        p->dropped++;
    }
    chanq_unpack_free(&ev->base);
}

/* One received message; < 0 when the connection ended. */
static int on_msg(player_t *p, const chanq_owned_msg_t *m)
{
    if (m->msg_type == MT_SUB) {
        p->subbed = true;
    } else if (m->msg_type == CHANQ_MSG_TOPIC_RESUME_RESULT) {
        bool rec = false;
        chanq_topics_on_result(p->t, m->channel_id, m->body, m->body_len, &rec);
        printf("%s %d %" PRId64 " %s\n", p->results++ ? "resume" : "baseline", rec ? 1 : 0,
               wall_ms(), chanq_topics_result_error(p->t));
    } else if (m->msg_type == p->msg_type) {
        on_event(p, m);
    }
    return 0;
}

/* Receives until done(p) holds (10 s at most); the connection's error, or CQ_ETIMEOUT. */
static int recv_until(player_t *p, bool (*done)(const player_t *))
{
    int r = 0;
    int64_t until = wall_ms() + 10000;
    while (r == 0 && !done(p)) {
        if (wall_ms() >= until)
            return CQ_ETIMEOUT;
        chanq_owned_msg_t m;
        r = chanq_sync_recv(p->c, &m, 200);
        if (r == CQ_ETIMEOUT) {
            r = 0;
            continue;
        }
        if (r == 0) {
            on_msg(p, &m);
            chanq_owned_msg_done(&m);
        }
    }
    return r;
}

static bool subbed(const player_t *p)
{
    return p->subbed;
}

static bool resumed(const player_t *p)
{
    return p->results == p->resumes;
}

/* Connects, authenticates, subscribes to GLOBAL, resumes from the tracker's positions (none the
 * first time) and waits for the result. */
static int join(player_t *p)
{
    int result = -1;
    uint32_t id = 0;
    p->subbed = false;
    int r = chanq_sync_connect(p->host, p->port, NULL, 10000, &p->c);
    if (r == 0)
        r = chanq_sync_auth(p->c, p->pit, "lt", 10000, &result, &id);
    if (r == 0 && result == 0)
        r = chanq_sync_sub_to_channel(p->c, 1, 0, id, NULL);
    if (r == 0 && result == 0)
        r = recv_until(p, subbed);
    if (r != 0 || result != 0) {
        fprintf(stderr, "bridge_player: connect/auth/sub to %s:%u failed: %d (auth result %d)\n",
                p->host, p->port, r, result);
        return -1;
    }
    if (chanq_topics_resume(p->t, chanq_sync_client(p->c), 0) < 0 ||
        chanq_sync_flush(p->c, 5000) < 0) {
        fprintf(stderr, "bridge_player: the resume could not be sent\n");
        return -1;
    }
    p->resumes++;
    if ((r = recv_until(p, resumed)) != 0) {
        fprintf(stderr, "bridge_player: no resume result: %d\n", r);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s HOST:PORT PIT MSG_TYPE [DROP_MS]\n", argv[0]);
        return 2;
    }
    player_t p = {.pit = argv[2], .msg_type = (uint32_t)strtoul(argv[3], NULL, 10)};
    int drop_ms = argc == 5 ? atoi(argv[4]) : 1000;
    const char *colon = strrchr(argv[1], ':');
    if (!colon || (size_t)(colon - argv[1]) >= sizeof(p.host)) {
        fprintf(stderr, "bridge_player: %s is not HOST:PORT\n", argv[1]);
        return 2;
    }
    snprintf(p.host, sizeof(p.host), "%.*s", (int)(colon - argv[1]), argv[1]);
    p.port = (uint16_t)atoi(colon + 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGUSR1, on_signal);
    if (!(p.t = chanq_topics_new()) || join(&p) < 0) {
        chanq_sync_free(p.c);
        chanq_topics_free(p.t);
        return 1;
    }
    printf("sub %" PRId64 "\n", wall_ms());
    int64_t drain_until = 0;
    int rc = 0;
    for (;;) {
        if (stopping && !drain_until)
            drain_until = wall_ms() + 1000;
        if (drain_until && wall_ms() >= drain_until)
            break;
        if (dropping) {
            dropping = 0;
            p.c = chanq_sync_free(p.c);
            printf("drop %" PRId64 "\n", wall_ms());
            usleep((useconds_t)drop_ms * 1000);
            if (join(&p) < 0) {
                rc = 1;
                break;
            }
        }
        chanq_owned_msg_t m;
        int r = chanq_sync_recv(p.c, &m, 100);
        if (r == CQ_ETIMEOUT)
            continue;
        if (r != 0) {
            printf("# connection ended: %d\n", r);
            rc = 1;
            break;
        }
        on_msg(&p, &m);
        chanq_owned_msg_done(&m);
    }
    chanq_topics_stats_t st;
    chanq_topics_stats(p.t, &st);
    printf("# events %" PRIu64 " dropped %" PRIu64 " undecodable %" PRIu64 " holes %" PRIu64
           " skipped %" PRIu64 "\n",
           p.n, p.dropped, p.bad, st.holes, st.skipped);
    chanq_sync_free(p.c);
    chanq_topics_free(p.t);
    return rc;
}
