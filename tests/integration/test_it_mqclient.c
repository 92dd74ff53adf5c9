/* test_it_mqclient.c - libchanq's blocking durable-topic client (chanq_mq_sync.h) and the
 * `chanq` CLI against a real chanqd on the embedded SQLite store.
 *
 * The CLI runs as a child process (path from $CHANQ_CLI) with a pipe on stdin and stdout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_mq_sync.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 5000

static int setup(void **state)
{
    (void)state;
    return cq_testsrv_init(&srv);
}

static chanq_mq_sync_t *open_client(uint32_t module, const char *token, uint32_t type)
{
    chanq_mq_sync_t *s = NULL;
    char err[256] = "";
    int r = chanq_mq_sync_connect("127.0.0.1", srv.mq_port, module, token, type, TMO, err,
                                  sizeof(err), &s);
    if (r < 0)
        fprintf(stderr, "# connect: %s\n", err);
    assert_int_equal(r, 0);
    return s;
}

/* ---- blocking client ----------------------------------------------------------------------- */

static void test_produce_ack_batch_retry(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    chanq_mq_sync_t *s = open_client(5, "", CQ_MQ_PRODUCER);
    uint32_t weight = 0;
    assert_int_equal(chanq_mq_sync_keepalive(s, &weight), 0);
    assert_true(chanq_mq_client_id(chanq_mq_sync_core(s)) >= 0);
    assert_int_equal(chanq_mq_sync_add_topic(s, "orders"), 0);

    int64_t o1 = 0;
    assert_int_equal(chanq_mq_sync_produce1(s, "orders", "first", &o1), 0);
    assert_true(o1 > 0);

    chanq_mq_content_t m[4] = {{"b0", 2, false, -1},
                               {"b1", 2, false, -1},
                               {"{\"k\":2}", 7, true, -1},
                               {"b3", 2, false, 1700000000000}};
    chanq_mq_produce_t req = {"orders", m, 4, 42, -1, -1};
    int64_t seq = chanq_mq_next_seq(chanq_mq_sync_core(s), 42);
    assert_int_equal(seq, 0);
    int64_t off[4], again[4];
    assert_int_equal(chanq_mq_sync_produce(s, &req, off), 0);
    for (int i = 0; i < 4; i++)
        assert_true(off[i] > (i ? off[i - 1] : o1));
    assert_int_equal(chanq_mq_next_seq(chanq_mq_sync_core(s), 42), 4);

    /* an idempotent retry (same producer_id and seq) is acked with the original offsets, also
     * from a new connection */
    req.seq = seq;
    assert_int_equal(chanq_mq_sync_produce(s, &req, again), 0);
    assert_memory_equal(again, off, sizeof(off));
    chanq_mq_sync_close(s);
    s = open_client(5, "", CQ_MQ_PRODUCER);
    assert_int_equal(chanq_mq_sync_produce(s, &req, again), 0);
    assert_memory_equal(again, off, sizeof(off));

    cq_mq_msg_t *r = NULL;
    assert_int_equal(chanq_mq_sync_consume(s, "orders", 0, 100, &r), 0);
    assert_int_equal(r->nitems, 5); /* stored once */
    assert_string_equal(r->items[3].content, "{\"k\":2}");
    cq_mq_msg_free(r);

    /* server errors carry err_code and err_msg */
    assert_int_equal(chanq_mq_sync_produce1(s, "missing", "x", NULL), CQ_ENOTOPIC);
    assert_int_equal(chanq_mq_sync_errcode(s), CQ_MQ_ERR_UNKNOWN_TOPIC);
    assert_non_null(strstr(chanq_mq_sync_errmsg(s), "missing"));
    assert_int_equal(chanq_mq_sync_add_topic(s, "bad-name"), CQ_EBADTOPIC); /* local check */
    assert_int_equal(chanq_mq_sync_keepalive(s, NULL), 0);
    assert_int_equal(chanq_mq_sync_errcode(s), 0);
    chanq_mq_sync_close(s);
}

static void test_consume_commit_order(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    chanq_mq_sync_t *p = open_client(5, "", CQ_MQ_PRODUCER);
    assert_int_equal(chanq_mq_sync_add_topic(p, "events"), 0);
    int64_t off[20];
    for (int i = 0; i < 20; i++) {
        char s[16];
        snprintf(s, sizeof(s), "m-%d", i);
        assert_int_equal(chanq_mq_sync_produce1(p, "events", s, &off[i]), 0);
    }
    chanq_mq_sync_t *c = open_client(5, "", CQ_MQ_CONSUMER);
    int64_t at = 0;
    int seen = 0;
    for (;;) { /* pages of 7, in offset order */
        cq_mq_msg_t *r = NULL;
        assert_int_equal(chanq_mq_sync_consume(c, "events", at, 7, &r), 0);
        size_t n = r->nitems;
        assert_true(n <= 7);
        for (size_t i = 0; i < n; i++, seen++) {
            char want[16];
            snprintf(want, sizeof(want), "m-%d", seen);
            assert_string_equal(r->items[i].content, want);
            assert_int_equal(r->items[i].offset, off[seen]);
        }
        if (n)
            at = r->offset;
        cq_mq_msg_free(r);
        if (n == 0)
            break;
        assert_int_equal(chanq_mq_sync_commit(c, "events", at), 0);
    }
    assert_int_equal(seen, 20);
    assert_int_equal(chanq_mq_sync_commit(c, "nosuch", 1), CQ_ENOTOPIC);
    /* two consumer instances of module 5 (issue 25): each commits and reads back its own
     * offset, beside the module's shared one; a bad instance id is refused locally */
    chanq_mq_sync_t *i1 = open_client(5, "", CQ_MQ_CONSUMER);
    chanq_mq_sync_t *i2 = open_client(5, "", CQ_MQ_CONSUMER);
    assert_int_equal(chanq_mq_sync_set_instance(i1, "vip-1"), 0);
    assert_int_equal(chanq_mq_sync_set_instance(i2, "vip-2"), 0);
    assert_int_equal(chanq_mq_sync_set_instance(i2, "has space"), -EINVAL);
    assert_int_equal(chanq_mq_sync_commit(i1, "events", off[3]), 0);
    assert_int_equal(chanq_mq_sync_commit(i2, "events", off[11]), 0);
    int64_t got = 0, last = 0;
    bool committed = false;
    assert_int_equal(chanq_mq_sync_offset(i1, "events", &got, &committed, &last), 0);
    assert_true(committed);
    assert_int_equal(got, off[3]);
    assert_int_equal(last, off[19]);
    assert_int_equal(chanq_mq_sync_offset(i2, "events", &got, &committed, NULL), 0);
    assert_int_equal(got, off[11]);
    assert_int_equal(chanq_mq_sync_offset(c, "events", &got, &committed, NULL), 0);
    assert_int_equal(got, at); /* the module's own, as c committed it */
    assert_int_equal(chanq_mq_sync_set_instance(i1, NULL), 0); /* back to the module's */
    assert_int_equal(chanq_mq_sync_offset(i1, "events", &got, &committed, NULL), 0);
    assert_int_equal(got, at);
    chanq_mq_sync_close(i1);
    chanq_mq_sync_close(i2);
    chanq_mq_sync_close(c);
    chanq_mq_sync_close(p);
}

static void test_watch_push(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    chanq_mq_sync_t *p = open_client(5, "", CQ_MQ_PRODUCER);
    chanq_mq_sync_t *c = open_client(5, "", CQ_MQ_CONSUMER);
    assert_int_equal(chanq_mq_sync_add_topic(p, "feed"), 0);
    assert_int_equal(chanq_mq_sync_watch(c, "feed"), 0);
    cq_mq_msg_t *m = NULL;
    assert_int_equal(chanq_mq_sync_wait_push(c, 100, &m), CQ_ETIMEOUT);

    int64_t off[2];
    chanq_mq_content_t two[2] = {{"p0", 2, false, -1}, {"p1", 2, false, -1}};
    chanq_mq_produce_t req = {"feed", two, 2, 0, -1, -1};
    assert_int_equal(chanq_mq_sync_produce(p, &req, off), 0);
    int got = 0;
    int64_t t0 = itmq_now_ms();
    while (got < 2) {
        assert_int_equal(chanq_mq_sync_wait_push(c, TMO, &m), 0);
        assert_int_equal(m->type, CQ_MQ_PUSH);
        assert_string_equal(m->topic, "feed");
        for (size_t i = 0; i < m->nitems; i++, got++) {
            assert_int_equal(m->items[i].offset, off[got]);
            assert_string_equal(m->items[i].content, two[got].data);
        }
        cq_mq_msg_free(m);
    }
    assert_true(itmq_now_ms() - t0 < TMO / 2); /* returned on arrival, not at the timeout */
    /* pushes arriving while a call waits are queued, not lost */
    assert_int_equal(chanq_mq_sync_produce1(p, "feed", "p2", &off[0]), 0);
    assert_int_equal(chanq_mq_sync_keepalive(c, NULL), 0);
    assert_int_equal(chanq_mq_sync_wait_push(c, TMO, &m), 0);
    assert_int_equal(m->items[0].offset, off[0]);
    cq_mq_msg_free(m);

    assert_int_equal(chanq_mq_sync_unwatch(c, "feed"), 0);
    assert_int_equal(chanq_mq_sync_produce1(p, "feed", "p3", NULL), 0);
    assert_int_equal(chanq_mq_sync_wait_push(c, 300, &m), CQ_ETIMEOUT);
    assert_int_equal(chanq_mq_sync_watch(c, "nosuch"), CQ_ENOTOPIC);
    chanq_mq_sync_close(c);
    chanq_mq_sync_close(p);
}

static void test_auth_refused(void **state)
{
    (void)state;
    char path[512];
    assert_int_equal(cq_testsrv_file(&srv, "perms.json",
                                     "{\"1\": {\"token\": \"s1\", \"produce\": [\"*\"],"
                                     " \"consume\": [\"*\"], \"admin\": true}}",
                                     path, sizeof(path)),
                     0);
    const char *args[] = {"--mq-permissions-file", path, NULL};
    itmq_start(args, ITMQ_SEED);
    chanq_mq_sync_t *s = NULL;
    char err[256] = "";
    assert_int_equal(chanq_mq_sync_connect("127.0.0.1", srv.mq_port, 1, "wrong", CQ_MQ_PRODUCER,
                                           TMO, err, sizeof(err), &s),
                     CQ_EAUTH);
    assert_null(s);
    assert_true(strlen(err) > 0);
    s = open_client(1, "s1", CQ_MQ_PRODUCER);
    assert_int_equal(chanq_mq_sync_add_topic(s, "t"), 0);
    chanq_mq_sync_close(s);
    assert_int_equal(chanq_mq_sync_connect("127.0.0.1", 1, 1, "", CQ_MQ_PRODUCER, TMO, NULL, 0, &s),
                     -ECONNREFUSED);
}

/* ---- CLI ----------------------------------------------------------------------------------- */

/* Runs $CHANQ_CLI --addr 127.0.0.1:PORT args... with in on stdin; returns the exit status and
 * stdout in out[0..cap). */
static int run_cli(const char *const *args, const char *in, char *out, size_t cap)
{
    const char *cli = getenv("CHANQ_CLI");
    assert_non_null(cli);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", srv.mq_port);
    const char *argv[32] = {cli, "--addr", addr};
    size_t n = 3;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    int pin[2], pout[2];
    assert_int_equal(pipe(pin), 0);
    assert_int_equal(pipe(pout), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        close(pin[0]);
        close(pin[1]);
        close(pout[0]);
        close(pout[1]);
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    if (in)
        assert_int_equal(write(pin[1], in, strlen(in)), (ssize_t)strlen(in));
    close(pin[1]);
    size_t len = 0;
    ssize_t k;
    while ((k = read(pout[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)k;
    out[len] = '\0';
    close(pout[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_cli(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    char out[4096], want[512];
    assert_int_equal(
        run_cli((const char *[]){"add-topic", "clitopic", NULL}, NULL, out, sizeof(out)), 0);
    assert_int_equal(run_cli((const char *[]){"produce", "clitopic", NULL}, "one\ntwo\nthree\n",
                             out, sizeof(out)),
                     0);
    int64_t o[3];
    assert_int_equal(sscanf(out, "%" SCNd64 "\n%" SCNd64 "\n%" SCNd64, &o[0], &o[1], &o[2]), 3);
    assert_true(o[0] < o[1] && o[1] < o[2]);

    assert_int_equal(run_cli((const char *[]){"consume", "clitopic", "--from", "0", NULL}, NULL,
                             out, sizeof(out)),
                     0);
    snprintf(want, sizeof(want), "%" PRId64 "\tone\n%" PRId64 "\ttwo\n%" PRId64 "\tthree\n", o[0],
             o[1], o[2]);
    assert_string_equal(out, want);
    char from[32];
    snprintf(from, sizeof(from), "%" PRId64, o[0]);
    assert_int_equal(
        run_cli((const char *[]){"consume", "clitopic", "--from", from, "--max", "1", NULL}, NULL,
                out, sizeof(out)),
        0);
    snprintf(want, sizeof(want), "%" PRId64 "\ttwo\n", o[1]);
    assert_string_equal(out, want);

    /* batch produce */
    assert_int_equal(run_cli((const char *[]){"produce", "clitopic", "--batch", "2", NULL},
                             "four\nfive\nsix\n", out, sizeof(out)),
                     0);
    int64_t b[3];
    assert_int_equal(sscanf(out, "%" SCNd64 "\n%" SCNd64 "\n%" SCNd64, &b[0], &b[1], &b[2]), 3);
    assert_true(o[2] < b[0] && b[0] < b[1] && b[1] < b[2]);

    /* tail: the backlog after --from, then stops at --count */
    snprintf(from, sizeof(from), "%" PRId64, o[2]);
    assert_int_equal(
        run_cli((const char *[]){"tail", "clitopic", "--from", from, "--count", "2", NULL}, NULL,
                out, sizeof(out)),
        0);
    snprintf(want, sizeof(want), "%" PRId64 "\tfour\n%" PRId64 "\tfive\n", b[0], b[1]);
    assert_string_equal(out, want);

    /* offset: nothing committed yet, then what consume --commit stored */
    assert_int_equal(run_cli((const char *[]){"offset", "clitopic", NULL}, NULL, out, sizeof(out)),
                     0);
    snprintf(want, sizeof(want), "-\t%" PRId64 "\n", b[2]);
    assert_string_equal(out, want);
    assert_int_equal(
        run_cli((const char *[]){"consume", "clitopic", "--max", "2", "--commit", NULL}, NULL, out,
                sizeof(out)),
        0);
    assert_int_equal(run_cli((const char *[]){"offset", "clitopic", NULL}, NULL, out, sizeof(out)),
                     0);
    snprintf(want, sizeof(want), "%" PRId64 "\t%" PRId64 "\n", o[1], b[2]);
    assert_string_equal(out, want);
    /* a consumer instance: an offset of its own */
    assert_int_equal(run_cli((const char *[]){"consume", "clitopic", "--max", "1", "--commit",
                                              "--instance", "inst-a", NULL},
                             NULL, out, sizeof(out)),
                     0);
    assert_int_equal(run_cli((const char *[]){"offset", "clitopic", "--instance", "inst-a", NULL},
                             NULL, out, sizeof(out)),
                     0);
    snprintf(want, sizeof(want), "%" PRId64 "\t%" PRId64 "\n", o[0], b[2]);
    assert_string_equal(out, want);
    assert_int_equal(run_cli((const char *[]){"offset", "clitopic", "--instance", "a b", NULL},
                             NULL, out, sizeof(out)),
                     2);
    /* topics */
    assert_int_equal(
        run_cli((const char *[]){"add-topic", "another", NULL}, NULL, out, sizeof(out)), 0);
    assert_int_equal(run_cli((const char *[]){"topics", NULL}, NULL, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "another\tonline\t30\t0\nclitopic\tonline\t30\t%" PRId64 "\n",
             b[2]);
    assert_string_equal(out, want);

    /* errors: server (1), usage (2) */
    assert_int_equal(run_cli((const char *[]){"produce", "nosuch", NULL}, "x\n", out, sizeof(out)),
                     1);
    assert_int_equal(run_cli((const char *[]){"offset", "nosuch", NULL}, NULL, out, sizeof(out)),
                     1);
    assert_int_equal(run_cli((const char *[]){"consume", NULL}, NULL, out, sizeof(out)), 2);
    assert_int_equal(run_cli((const char *[]){"frobnicate", "t", NULL}, NULL, out, sizeof(out)), 2);
    assert_int_equal(run_cli((const char *[]){"topics", "x", NULL}, NULL, out, sizeof(out)), 2);
    assert_int_equal(run_cli((const char *[]){"offset", NULL}, NULL, out, sizeof(out)), 2);
}

/* tail with pushes: a producer thread is not needed; the CLI runs in the background while
 * this process produces. */
static void test_cli_tail_push(void **state)
{
    (void)state;
    itmq_start(NULL, ITMQ_SEED);
    chanq_mq_sync_t *p = open_client(5, "", CQ_MQ_PRODUCER);
    assert_int_equal(chanq_mq_sync_add_topic(p, "live"), 0);
    int64_t base = 0;
    assert_int_equal(chanq_mq_sync_produce1(p, "live", "old", &base), 0);

    int pout[2];
    assert_int_equal(pipe(pout), 0);
    char addr[64], from[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", srv.mq_port);
    snprintf(from, sizeof(from), "%" PRId64, base);
    const char *cli = getenv("CHANQ_CLI");
    assert_non_null(cli);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pout[1], 1);
        close(pout[0]);
        close(pout[1]);
        execl(cli, cli, "--addr", addr, "tail", "live", "--from", from, "--count", "3",
              (char *)NULL);
        _exit(127);
    }
    close(pout[1]);
    int64_t off[3];
    for (int i = 0; i < 3; i++) {
        char s[16];
        snprintf(s, sizeof(s), "live-%d", i);
        assert_int_equal(chanq_mq_sync_produce1(p, "live", s, &off[i]), 0);
        usleep(50 * 1000);
    }
    char out[1024];
    size_t len = 0;
    ssize_t k;
    while ((k = read(pout[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)k;
    out[len] = '\0';
    close(pout[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char want[256];
    snprintf(want, sizeof(want), "%" PRId64 "\tlive-0\n%" PRId64 "\tlive-1\n%" PRId64 "\tlive-2\n",
             off[0], off[1], off[2]);
    assert_string_equal(out, want);
    chanq_mq_sync_close(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_produce_ack_batch_retry, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_consume_commit_order, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_watch_push, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_auth_refused, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_cli, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_cli_tail_push, setup, itmq_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
