/* coord_member.c - one shard member in a process of its own, for tests that freeze it (SIGSTOP
 * cannot freeze one runtime among several of a process: the ZK library's threads are per
 * handle, but a frozen process is what a GC pause or a stopped VM looks like).
 *
 *   coord_member HOSTS ROOT SHARD ADV DB SESSION_MS
 *
 * Runs the coord runtime over libzookeeper-mt with no database control (every DB action
 * succeeds). Prints one line per role change, flushed:
 *   role master epoch 1 master 0 ack 0
 * (master: the master's seq, or -1; ack: whether cq_coordrt_ack_until() > now right then, on
 * the runtime thread after the callback's event was fed - 0 until the round has published).
 * Exits 0 on SIGTERM/SIGINT after cq_coordrt_stop(); 1 on a start error.
 */
#include "cq_clock.h"
#include "cq_coordzk.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Set once start returned; the first callbacks may run before. */
static _Atomic(cq_coordrt_t *) g_rt;

static void on_role(void *ud, cq_coord_role_t role, uint64_t epoch, const cq_coord_member_t *m)
{
    (void)ud;
    cq_coordrt_t *rt = atomic_load(&g_rt);
    int ack = rt && cq_coordrt_ack_until(rt) > cq_clock_mono_ms();
    printf("role %s epoch %" PRIu64 " master %lld ack %d\n", cq_coord_role_name(role), epoch,
           m ? (long long)m->seq : -1LL, ack);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s HOSTS ROOT SHARD ADV DB SESSION_MS\n", argv[0]);
        return 64;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the threads start: they inherit it */

    cq_coordrt_t *rt;
    cq_coordrt_opts_t o = {
        .coord = {.shard = (uint32_t)strtoul(argv[3], NULL, 10),
                  .adv = argv[4],
                  .db = argv[5],
                  .session_ms = (uint32_t)strtoul(argv[6], NULL, 10)},
        .zk_hosts = argv[1],
        .zk_root = argv[2],
        .zk = &cq_coord_zk_libzk,
        .on_role = on_role,
    };
    int rc = cq_coordrt_start(&o, &rt);
    if (rc < 0) {
        fprintf(stderr, "coord_member: start: %d\n", rc);
        return 1;
    }
    atomic_store(&g_rt, rt);
    int sig;
    sigwait(&set, &sig);
    cq_coordrt_stop(rt);
    printf("stopped\n");
    fflush(stdout);
    return 0;
}
