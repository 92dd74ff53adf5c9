/* hello_libchanq.c - the package test's libchanq-dev client, compiled against the INSTALLED
 * headers and `pkg-config --static libchanq`, never against the tree.
 *
 *   hello_libchanq HOST:PORT MODULE TOKEN TOPIC
 *
 * Prints every message of TOPIC as "OFFSET<TAB>CONTENT", then produces "from libchanq" and
 * prints "produced OFFSET". Exit 0, or 1 with the error on stderr. */
#include <chanq_mq_sync.h>
#include <cq_err.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(chanq_mq_sync_t *s, const char *what, int r)
{
    fprintf(stderr, "hello_libchanq: %s: %s (%s)\n", what, s ? chanq_mq_sync_errmsg(s) : "",
            cq_strerror(r));
    chanq_mq_sync_close(s);
    return 1;
}

int main(int argc, char **argv)
{
    char host[256], err[256] = "";
    uint16_t port;
    chanq_mq_sync_t *s = NULL;
    cq_mq_msg_t *m = NULL;
    int64_t off = -1;
    if (argc != 5 || chanq_mq_sync_parse_addr(argv[1], host, sizeof(host), &port) < 0) {
        fprintf(stderr, "usage: hello_libchanq HOST:PORT MODULE TOKEN TOPIC\n");
        return 2;
    }
    int r = chanq_mq_sync_connect(host, port, (uint32_t)strtoul(argv[2], NULL, 10), argv[3],
                                  CQ_MQ_PRODUCER, 10000, err, sizeof(err), &s);
    if (r < 0) {
        fprintf(stderr, "hello_libchanq: connect: %s (%s)\n", err, cq_strerror(r));
        return 1;
    }
    if ((r = chanq_mq_sync_consume(s, argv[4], 0, 100, &m)) < 0)
        return fail(s, "consume", r);
    for (size_t i = 0; i < m->nitems; i++)
        printf("%" PRId64 "\t%s\n", m->items[i].offset, m->items[i].content);
    cq_mq_msg_free(m);
    if ((r = chanq_mq_sync_produce1(s, argv[4], "from libchanq", &off)) < 0)
        return fail(s, "produce", r);
    printf("produced %" PRId64 "\n", off);
    chanq_mq_sync_close(s);
    return 0;
}
