/* io_adminconn.c - admin HTTP connections: one request, one answer. See io_adminconn.h. It only
 * moves bytes: what a request gets is cq_admin_respond()'s. */
#include "io_adminconn.h"

#include "cq_alloc.h"
#include "cq_sbuf.h"
#include "cq_util.h"
#include "io_int.h"

#include <unistd.h>

typedef struct admin_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    io_adminset_t *set;
    cq_list_t node; /* in set->conns until closed */
    uint64_t accepted_ms;
    cq_sbuf_t in, out;
    bool done;
} admin_conn_t;

static void admin_closed(uv_handle_t *h)
{
    admin_conn_t *a = cq_container_of((uv_tcp_t *)h, admin_conn_t, tcp);
    io_adminset_t *s = a->set;
    cq_sbuf_done(&a->in);
    cq_sbuf_done(&a->out);
    cq_free(a);
    if (s->closed)
        s->closed(s->ud);
}

static void admin_close(admin_conn_t *a)
{
    if (!cq_list_empty(&a->node)) {
        cq_list_remove(&a->node);
        cq_list_init(&a->node);
        a->set->n--;
    }
    if (!uv_is_closing((uv_handle_t *)&a->tcp))
        uv_close((uv_handle_t *)&a->tcp, admin_closed);
}

static void admin_written(uv_write_t *req, int status)
{
    admin_close(cq_container_of(req, admin_conn_t, wreq));
}

static void admin_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    admin_conn_t *a = cq_container_of((uv_tcp_t *)h, admin_conn_t, tcp);
    if (cq_sbuf_reserve(&a->in, 1024) < 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)a->in.data + a->in.len, 1024);
}

static void admin_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    admin_conn_t *a = cq_container_of((uv_tcp_t *)st, admin_conn_t, tcp);
    if (nread < 0) {
        admin_close(a);
        return;
    }
    if (a->done || nread == 0)
        return;
    a->in.len += (size_t)nread;
    char method[16], path[256];
    ssize_t h = cq_admin_parse_head((const char *)a->in.data, a->in.len, method, sizeof(method),
                                    path, sizeof(path));
    if (h == 0)
        return;
    a->done = true;
    uv_read_stop(st);
    if (cq_admin_respond(a->set->admin, method, path, h < 0, &a->out) < 0) {
        admin_close(a);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)a->out.data, (unsigned)a->out.len);
    if (uv_write(&a->wreq, st, &b, 1, admin_written) < 0)
        admin_close(a);
}

void cq__io_adminset_init(io_adminset_t *s, uv_loop_t *loop, cq_admin_t *admin, io_lsn_t *lsn,
                          uint32_t max, uint64_t timeout_ms, void (*closed)(void *ud), void *ud)
{
    *s = (io_adminset_t){.loop = loop,
                         .admin = admin,
                         .lsn = lsn,
                         .max = max,
                         .timeout_ms = timeout_ms,
                         .closed = closed,
                         .ud = ud};
    cq_list_init(&s->conns);
}

bool cq__io_adminset_accept(io_adminset_t *s, int fd)
{
    if (s->n >= s->max) {
        cq__io_lsn_refused(s->lsn, fd, "admin-max-connections reached");
        return false;
    }
    admin_conn_t *a = cq_calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        return false;
    }
    a->set = s;
    uv_tcp_init(s->loop, &a->tcp);
    a->tcp.data = a;
    cq_list_insert_tail(&s->conns, &a->node);
    s->n++;
    a->accepted_ms = uv_now(s->loop);
    if (uv_tcp_open(&a->tcp, fd) < 0) {
        close(fd);
        admin_close(a);
        return true;
    }
    uv_read_start((uv_stream_t *)&a->tcp, admin_alloc, admin_read);
    return true;
}

void cq__io_adminset_sweep(io_adminset_t *s, uint64_t now_ms)
{
    cq_list_t *n, *t;
    if (!s->timeout_ms)
        return;
    cq_list_foreach_safe(n, t, &s->conns)
    {
        admin_conn_t *a = cq_container_of(n, admin_conn_t, node);
        if (now_ms - a->accepted_ms < s->timeout_ms)
            return; /* oldest first: the rest are younger */
        cq__io_lsn_count(s->lsn, IO_CLOSE_TIMEOUT);
        admin_close(a);
    }
}

void cq__io_adminset_close_all(io_adminset_t *s)
{
    while (s->conns.next && !cq_list_empty(&s->conns))
        admin_close(cq_container_of(s->conns.next, admin_conn_t, node));
}
