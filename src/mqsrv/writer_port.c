/* writer_port.c - the store port over one store thread (cq_writer). It lives here, with the
 * engine, rather than in the edge: src/io moves bytes and does not know the store exists. See
 * cq_mqport.h. */
#include "cq_mqport.h"

#include <errno.h>

static int writer_submit(void *ud, cq_writer_req_t *req)
{
    return cq_writer_submit(ud, req);
}

static int writer_control(void *ud, int op, void *arg)
{
    switch (op) {
    case CQ_MQPORT_WRITER_STATS:
        cq_writer_stats(ud, arg);
        return 0;
    default:
        return -ENOTSUP;
    }
}

static const cq_mqport_ops_t writer_ops = {writer_submit, writer_control};

cq_mqport_t cq_mqport_writer(cq_writer_t *w)
{
    return (cq_mqport_t){&writer_ops, w};
}
