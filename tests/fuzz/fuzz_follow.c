/* fuzz_follow - the follower of other shards (src/mqsrv/follow.c, cq_mqfollow.h) against a
 * hostile or confused server, on a manual clock.
 *
 * The input is a script of operations, each one byte of opcode and its operands:
 *   0 len8 bytes      raw bytes from the server (anything)
 *   1 k8 err8 a8 b8   the answer to the k-th pending request, built well-formed: connect_resp
 *                     (shard 2 or, a8 & 1, shard 3; epoch a8 >> 1), watch/offset/consume
 *                     answers (err8 % 4 == 0: ok, else an error code; offset_resp's last
 *                     offset a8; consume_resp b8 % 5 messages from offset a8 up, gaps b8 >> 3)
 *   2 a8 b8           a push of topic "vip" or "news" (a8 & 1), b8 % 5 messages from a8 >> 1
 *   3                 the connection comes up (or, when it is up, closes)
 *   4 dt8             time passes (dt * 37 ms): the follower's tick
 *   5 from8 max8      a read of shard 2 (or 4) from offset from8
 *   6 mask8           the topic list becomes a subset of {vip, news, other}
 * Invariants: every frame the follower sends parses and decodes as a request; the events of one
 * (shard, topic) rise strictly and each names the previous one as its prev_offset (across
 * reconnections: nothing repeated, nothing skipped that it handed on); a read is answered at
 * most once; every allocation is returned at free (ASan). */
#include "fuzz_common.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mq.h"
#include "cq_mqfollow.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#define FUZZ_MAX_INPUT (1u << 15)
#define PENDING_MAX    64
#define READS_MAX      256

typedef struct pend {
    uint8_t type;
    uint32_t ask;
    char topic[65];
    int64_t offset;
} pend_t;

typedef struct st {
    cq_mqfollow_t *f;
    bool up;
    uint64_t now;
    pend_t pend[PENDING_MAX];
    size_t npend;
    uint64_t last[3]; /* per topic (vip, news, other): the last offset handed on */
    bool seen[3];
    uint8_t answered[READS_MAX];
    uint32_t nreads;
} st_t;

static st_t *g;

static int topic_no(const char *t)
{
    return strcasecmp(t, "vip") == 0     ? 0
           : strcasecmp(t, "news") == 0  ? 1
           : strcasecmp(t, "other") == 0 ? 2
                                         : -1;
}

static void on_event(void *ud, const cq_mqsrv_event_t *ev)
{
    (void)ud;
    int t = topic_no(ev->topic);
    FUZZ_CHECK(t >= 0 && ev->shard == 2);
    if (g->seen[t]) {
        FUZZ_CHECK(ev->offset > g->last[t]);
        FUZZ_CHECK(ev->prev_offset == g->last[t]);
    }
    FUZZ_CHECK(ev->offset > ev->prev_offset);
    g->seen[t] = true;
    g->last[t] = ev->offset;
}

static void on_rows(void *ud, uint64_t tag, int err, const cq_mqfollow_row_t *rows, size_t n)
{
    (void)ud;
    FUZZ_CHECK(tag < READS_MAX && !g->answered[tag]);
    g->answered[tag] = 1;
    FUZZ_CHECK(err <= 0 && (err == 0 || n == 0));
    (void)rows;
}

/* Takes the frames the follower queued: each must be a request; kept as pending. */
static void collect(st_t *s)
{
    cq_sbuf_t *out = cq_mqfollow_output(s->f, 0);
    size_t at = 0;
    while (at < out->len) {
        cq_mq_frame_t fr;
        ssize_t k = cq_mq_parse(out->data + at, out->len - at, 0, &fr);
        FUZZ_CHECK(k > 0);
        cq_mq_msg_t *m = NULL;
        FUZZ_CHECK(cq_mq_decode(&fr, NULL, &m, NULL, 0) == 0);
        FUZZ_CHECK(cq_mq_is_request(m->type));
        if (s->npend == PENDING_MAX)
            memmove(s->pend, s->pend + 1, --s->npend * sizeof(s->pend[0]));
        pend_t *p = &s->pend[s->npend++];
        p->type = m->type;
        p->ask = m->askid;
        snprintf(p->topic, sizeof(p->topic), "%s", m->topic);
        p->offset = m->offset;
        cq_mq_msg_free(m);
        at += (size_t)k;
    }
    cq_sbuf_consume(out, at);
}

static void feed_msg(st_t *s, cq_mq_msg_t *m)
{
    uint8_t *p = NULL;
    size_t n = 0;
    int r = m ? cq_mq_encode(m, &p, &n) : -ENOMEM;
    cq_mq_msg_free(m);
    if (r == 0 && s->up && cq_mqfollow_input(s->f, 0, p, n, s->now) < 0) {
        cq_mqfollow_closed(s->f, 0, s->now);
        s->up = false;
        s->npend = 0;
    }
    cq_free(p);
}

static void add_msgs(cq_mq_msg_t *m, uint64_t from, unsigned n, unsigned gap)
{
    for (unsigned i = 0; i < n; i++) {
        char c[24];
        int64_t off = (int64_t)(from + i * (gap + 1));
        snprintf(c, sizeof(c), "m%lld", (long long)off);
        if (off < 1 || cq_mq_msg_add_item(m, off, 1, c, strlen(c), false) < 0)
            continue;
        m->items[m->nitems - 1].producer_id = 7;
        m->items[m->nitems - 1].seq = off;
    }
    m->has |= CQ_MQ_F_MESSAGES;
}

static void answer(st_t *s, const uint8_t *op)
{
    if (!s->npend)
        return;
    size_t k = op[0] % s->npend;
    pend_t p = s->pend[k];
    memmove(&s->pend[k], &s->pend[k + 1], (--s->npend - k) * sizeof(p));
    int err = op[1] % 4 == 0 ? 0 : (int[]){CQ_MQ_ERR_UNKNOWN_TOPIC, CQ_MQ_ERR_BUSY, 99}[op[1] % 3];
    cq_mq_msg_t *m = cq_mq_msg_new((uint8_t)(p.type + 1), 0);
    if (!m)
        return;
    m->askid = p.ask;
    m->err_code = (uint32_t)err;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_ERR_CODE;
    if (p.topic[0] && cq_mq_msg_set_topic(m, p.topic) == 0)
        m->has |= CQ_MQ_F_TOPIC;
    if (p.type == CQ_MQ_REQ_CONNECT || p.type == CQ_MQ_REQ_KEEPALIVE) {
        m->shard = op[2] & 1 ? 3 : 2;
        m->epoch = op[2] >> 1;
        m->master = op[3] & 1;
        m->has |= CQ_MQ_F_SHARD | CQ_MQ_F_EPOCH | CQ_MQ_F_MASTER;
    } else if (p.type == CQ_MQ_REQ_OFFSET) {
        m->last_offset = op[2];
        m->has |= CQ_MQ_F_LAST_OFFSET;
    } else if (p.type == CQ_MQ_REQ_CONSUME && !err) {
        /* a faithful server answers after the asked offset; a confused one anywhere */
        uint64_t from = op[3] & 0x80 ? op[2] : (uint64_t)p.offset + 1 + op[2] % 3;
        add_msgs(m, from, op[3] % 5, (op[3] >> 3) & 3);
    }
    feed_msg(s, m);
}

static void push(st_t *s, const uint8_t *op)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    if (!m)
        return;
    if (cq_mq_msg_set_topic(m, op[0] & 1 ? "news" : "vip") == 0)
        m->has |= CQ_MQ_F_TOPIC;
    add_msgs(m, (uint64_t)(op[0] >> 1) + 1, op[1] % 5, (op[1] >> 3) & 3);
    feed_msg(s, m);
}

static void set_topics(st_t *s, uint8_t mask)
{
    const char *all[3] = {"vip", "news", "other"}, *v[3];
    size_t n = 0;
    for (int i = 0; i < 3; i++)
        if (mask & (1u << i))
            v[n++] = all[i];
    /* a topic dropped and added again starts over at the live stream */
    for (int t = 0; t < 3; t++)
        if (!(mask & (1u << t)))
            s->seen[t] = false;
    (void)cq_mqfollow_set_topics(s->f, v, n);
}

/* The follower's warnings are formatted (their format strings run) but not written out. */
static void log_sink(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    (void)ud, (void)lvl, (void)topic, (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    cq_log_set_sink(log_sink, NULL);
    st_t s;
    memset(&s, 0, sizeof(s));
    g = &s;
    cq_mqfollow_opts_t o = {.module_id = 1,
                            .token = "t",
                            .batch = 4,
                            .pending_max = 3,
                            .on_event = on_event,
                            .on_rows = on_rows};
    s.f = cq_mqfollow_new(&o);
    if (!s.f)
        return 0;
    FUZZ_CHECK(cq_mqfollow_add_servers(s.f, "2/a:1,2/b:2", 0, NULL, 0) == 0);
    set_topics(&s, 3);
    s.now = 1000;
    size_t i = 0;
    while (i < size) {
        uint8_t opc = data[i++] % 7;
        const uint8_t *op = data + i;
        size_t left = size - i;
        switch (opc) {
        case 0: {
            if (left < 1)
                goto done;
            size_t n = op[0] < left - 1 ? op[0] : left - 1;
            if (s.up && cq_mqfollow_input(s.f, 0, op + 1, n, s.now) < 0) {
                cq_mqfollow_closed(s.f, 0, s.now);
                s.up = false;
                s.npend = 0;
            }
            i += 1 + n;
            break;
        }
        case 1:
            if (left < 4)
                goto done;
            answer(&s, op);
            i += 4;
            break;
        case 2:
            if (left < 2)
                goto done;
            push(&s, op);
            i += 2;
            break;
        case 3:
            if (s.up)
                cq_mqfollow_closed(s.f, 0, s.now);
            else
                cq_mqfollow_connected(s.f, 0, s.now);
            s.up = !s.up;
            s.npend = 0;
            break;
        case 4:
            if (left < 1)
                goto done;
            s.now += (uint64_t)op[0] * 37;
            if (cq_mqfollow_tick(s.f, 0, s.now) < 0 && s.up) {
                cq_mqfollow_closed(s.f, 0, s.now);
                s.up = false;
                s.npend = 0;
            }
            i += 1;
            break;
        case 5:
            if (left < 2)
                goto done;
            if (s.nreads < READS_MAX)
                cq_mqfollow_read(s.f, op[1] & 1 ? 4 : 2, "vip", op[0], op[1] >> 1, s.nreads++);
            i += 2;
            break;
        default:
            if (left < 1)
                goto done;
            set_topics(&s, op[0]);
            i += 1;
            break;
        }
        collect(&s);
    }
done:
    cq_mqfollow_free(s.f);
    g = NULL;
    return 0;
}
