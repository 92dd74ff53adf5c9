/* test_it_mqzk.c - the cluster client's ZooKeeper discovery (chanq_cluster_discover_zk) and
 * `chanq --zk` on a real ensemble (run_zk.sh passes CQ_ZK_HOSTS): the members registered as
 * coord does (EPHEMERAL|SEQUENCE nodes under /<root>/shards/N/members, data "v1 adv=H:P db=H:P
 * elig=0|1") come back shard by shard (numeric order), each shard's by sequence; a member whose
 * data does not parse is skipped; a missing root is -ENOENT. The CLI then produces and consumes
 * through a real chanqd found that way.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define THREADED
#include <zookeeper/zookeeper.h>

#include "chanq_cluster.h"
#include "chanq_mq_sync.h"
#include "cq_testsrv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 10000

static const char *hosts;
static zhandle_t *zh;
static char root[64];

static void mkpath(const char *path)
{
    int rc = zoo_create(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    assert_true(rc == ZOK || rc == ZNODEEXISTS);
}

/* Registers a member of shard like coord does. */
static void member(const char *shard, const char *data)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/shards/%s", root, shard);
    mkpath(path);
    snprintf(path, sizeof(path), "%s/shards/%s/members", root, shard);
    mkpath(path);
    snprintf(path, sizeof(path), "%s/shards/%s/members/m-", root, shard);
    char made[256];
    assert_int_equal(zoo_create(zh, path, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE,
                                ZOO_EPHEMERAL | ZOO_SEQUENCE, made, sizeof(made)),
                     ZOK);
}

static int setup(void **state)
{
    (void)state;
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    zh = zookeeper_init(hosts, NULL, 10000, NULL, NULL, 0);
    assert_non_null(zh);
    for (int i = 0; zoo_state(zh) != ZOO_CONNECTED_STATE; i++) {
        assert_true(i < 1000); /* hang guard: 10 s */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    snprintf(root, sizeof(root), "/cqtest%d", (int)getpid());
    mkpath(root);
    char path[128];
    snprintf(path, sizeof(path), "%s/shards", root);
    mkpath(path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    zookeeper_close(zh); /* the ephemeral members go with the session */
    zh = NULL;
    return 0;
}

static void test_discover(void **state)
{
    (void)state;
    member("10", "v1 adv=127.0.0.1:1010 db=127.0.0.1:3306 elig=1");
    member("2", "v1 adv=127.0.0.1:2001 db=127.0.0.1:3306 elig=1");
    member("2", "garbage");
    member("2", "v1 adv=127.0.0.1:2002 db=127.0.0.1:3307 elig=0");
    member("1", "v1 adv=127.0.0.1:1001 db=127.0.0.1:3306 elig=1");
    chanq_cluster_server_t sv[8];
    size_t n = 0;
    char err[256] = "";
    int rc = chanq_cluster_discover_zk(hosts, root, TMO, sv, 8, &n, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "# %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 4);
    const struct {
        uint32_t shard;
        const char *addr;
    } want[] = {{1, "127.0.0.1:1001"},
                {2, "127.0.0.1:2001"},
                {2, "127.0.0.1:2002"},
                {10, "127.0.0.1:1010"}};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(sv[i].shard, want[i].shard);
        assert_string_equal(sv[i].addr, want[i].addr);
        assert_int_equal(sv[i].index, i);
    }
    assert_int_equal(chanq_cluster_discover_zk(hosts, root, TMO, sv, 3, &n, err, sizeof(err)),
                     CQ_ELIMIT);
    assert_int_equal(
        chanq_cluster_discover_zk(hosts, "/cq_no_such_root", TMO, sv, 8, &n, err, sizeof(err)),
        -ENOENT);
}

/* `chanq --zk` finds a real chanqd through its member node. */
static void test_cli_zk(void **state)
{
    (void)state;
    const char *cli = getenv("CHANQ_CLI");
    if (!cli || !getenv("CHANQD"))
        skip();
    cq_testsrv_t s = {0};
    assert_int_equal(cq_testsrv_start(&s, NULL), 0);
    char data[128];
    snprintf(data, sizeof(data), "v1 adv=127.0.0.1:%u db=127.0.0.1:3306 elig=1", s.mq_port);
    member("1", data);
    chanq_mq_sync_t *c = NULL;
    assert_int_equal(
        chanq_mq_sync_connect("127.0.0.1", s.mq_port, 1, "", CQ_MQ_PRODUCER, TMO, NULL, 0, &c), 0);
    assert_int_equal(chanq_mq_sync_add_topic(c, "zt"), 0);
    chanq_mq_sync_close(c);

    char out[400], cmd[1400];
    snprintf(out, sizeof(out), "%s/cli.out", s.dir);
    snprintf(cmd, sizeof(cmd), "printf 'z0\\nz1\\n' | %s --zk %s --zk-root %s produce zt > %s", cli,
             hosts, root, out);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s --zk %s --zk-root %s consume zt >> %s", cli, hosts, root, out);
    assert_int_equal(system(cmd), 0);
    FILE *fp = fopen(out, "r");
    assert_non_null(fp);
    char got[256];
    size_t k = fread(got, 1, sizeof(got) - 1, fp);
    got[k] = '\0';
    fclose(fp);
    assert_string_equal(got, "1\t1\n1\t2\n1\t1\tz0\n1\t2\tz1\n");
    cq_testsrv_stop(&s);
}

int main(void)
{
    hosts = getenv("CQ_ZK_HOSTS");
    if (!hosts) {
        printf("1..0 # SKIP CQ_ZK_HOSTS is not set (run through run_zk.sh)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_discover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_zk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
