/* soak_int.h - the soak driver's shared state (bench/load/soak*.c, run by bench/soak.sh).
 *
 * One libuv loop drives every connection at once against one chanqd:
 *   soak.c       options, the ready file, the run's phases (start, run, drain, check), the RSS
 *                sampler, the summary;
 *   soak_chan.c  the channel side: broadcast (a SERVER publisher owning GLOBAL, N CLIENT
 *                subscribers, a sequence number in every message), channel data (a SERVER
 *                owner of a SUBWORLD channel updating TestChannelDataMessage.num) and the
 *                reconnect churn (CLIENTs that connect, authenticate, get subscribed to GLOBAL,
 *                check what they receive and leave);
 *   soak_mq.c    durable topics: a producer with an idempotence key, a watcher and a consumer
 *                reading the topic from offset 0, over the sans-I/O seed client (chanq_mq.h).
 *
 * Every violation goes through soak_fail(): it is counted by kind and the first few are printed.
 * The process exits 1 when any was counted. Everything runs on the loop's thread.
 */
#ifndef SOAK_INT_H
#define SOAK_INT_H

#include "chanq.h"
#include "chanq_uv.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define SOAK_GLOBAL_CHANNEL 0u
#define SOAK_USER_MSG       100u
#define SOAK_BC_ALL_BUT_SRV 32u
#define SOAK_CT_GLOBAL      1u
#define SOAK_CT_SUBWORLD    3u
#define SOAK_MT_SUB         6u
#define SOAK_MT_DATA        8u
#define SOAK_TESTPB_URL     "type.googleapis.com/testpb.TestChannelDataMessage"
#define SOAK_TICK_MS        10u
/* A step that must follow another (AUTH result, SUB result, connect_resp) has this long: a
 * safety stop, generous enough for a sanitizer build on a loaded machine. */
#define SOAK_STEP_TIMEOUT_MS 30000u

/* Kinds of violations (the summary prints a count for each). */
typedef enum soak_kind {
    SK_CLOSE,   /* a connection closed that the driver did not close */
    SK_PROTO,   /* a reply the driver could not decode or did not expect */
    SK_ERRCODE, /* an MQ answer with err_code != 0, or a refused AUTH / CREATE */
    SK_GAP,     /* a broadcast sequence gap, a duplicate, or a stale channel-data num */
    SK_LOST,    /* a broadcast or channel-data subscriber that did not reach the final state */
    SK_MQLOST,  /* an acked offset not read back exactly once, or a wrong content or offset */
    SK_STALL,   /* a setup step that did not finish within SOAK_STEP_TIMEOUT_MS */
    SK_RSS,     /* RSS after the warm-up not flat within the tolerance */
    SK_COUNT
} soak_kind_t;

typedef struct soak_opts {
    const char *ready_file;
    int pid;            /* chanqd's pid: RSS and CPU samples; 0: none */
    double duration;    /* seconds of load */
    double warmup_frac; /* share of duration before the RSS window starts */
    double rss_every;   /* seconds between RSS samples */
    double rss_tol;     /* allowed (max - min) / min after the warm-up */
    double drain;       /* seconds allowed for the drain after the load stops */
    int bc_subs;        /* broadcast subscribers */
    double bc_rate;     /* broadcast messages/s */
    int bc_size;        /* broadcast payload bytes (>= 8: the sequence number) */
    int data_subs;      /* channel-data subscribers */
    double data_rate;   /* updates/s */
    int data_interval;  /* fanOutIntervalMs */
    double mq_rate;     /* durable messages/s */
    int mq_batch;       /* messages per produce */
    int mq_window;      /* produces in flight at most */
    int mq_size;        /* content bytes */
    int churn;          /* churn clients alive at a time */
    double churn_life;  /* seconds a churn client stays (uniform in [life/2, life]) */
    const char *topic;
} soak_opts_t;

extern soak_opts_t SO;

/* What the summary reports besides the violations. */
typedef struct soak_stats {
    uint64_t bc_sent, bc_recv, data_sent, data_fanouts;
    uint64_t churn_cycles, churn_recv;
    uint64_t mq_produced, mq_acked, mq_pushed, mq_consumed, mq_behind;
    uint64_t viol[SK_COUNT];
} soak_stats_t;

extern soak_stats_t SS;

typedef enum soak_phase { PH_SETUP, PH_RUN, PH_DRAIN, PH_DONE } soak_phase_t;

extern uv_loop_t *soak_loop;
extern soak_phase_t soak_phase;
extern struct sockaddr_in soak_client_addr, soak_server_addr, soak_mq_addr;

/* Counts a violation of kind k and prints the first few of each kind. */
void soak_fail(soak_kind_t k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints to stderr and exits 2 (the driver itself could not run: not a soak verdict). */
void soak_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
uint64_t soak_now_ms(void);
/* Deterministic pseudo-random numbers (xorshift), so runs are repeatable. */
uint32_t soak_rand(void);

/* soak_chan.c */
void soak_chan_start(void);        /* connects the publisher and the data owner */
bool soak_chan_ready(void);        /* every subscriber is subscribed */
void soak_chan_tick(uint64_t now); /* sends what the rates allow; churns; checks stalls */
bool soak_chan_drained(void);      /* every subscriber has the last message */
void soak_chan_check(void);        /* final checks (counts SK_LOST) */
void soak_chan_close(void);        /* closes every connection (expected closes) */

/* soak_mq.c */
void soak_mq_start(void);
bool soak_mq_ready(void);
void soak_mq_tick(uint64_t now);
bool soak_mq_drained(void);
void soak_mq_check(void);
void soak_mq_close(void);
void soak_mq_free(void); /* after the loop has closed every handle */

#endif
