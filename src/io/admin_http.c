/* admin_http.c - the admin HTTP listener on worker 0 (one request per connection). It only moves
 * bytes: what a request gets is cq_admin_respond()'s, over the metrics sources that src/main
 * registered (opts.admin).
 *
 * Limits, because the listener serves before any authentication: at most opts.admin_max_conns
 * connections (more are accepted and closed at once, so the kernel backlog never fills), and a
 * connection lives at most opts.admin_timeout_ms from accept to close, whatever it sends (a
 * slowloris peer dribbling its head, or one that never reads the answer). */
#include "cq_admin.h"
#include "cq_alloc.h"
#include "cq_log.h"
#include "cq_sbuf.h"
#include "cq_util.h"
#include "io_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct admin_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    io_worker_t *w;
    cq_list_t node; /* in w->admin_conns until closed */
    uint64_t accepted_ms;
    cq_sbuf_t in, out;
    uint8_t done;
} admin_conn_t;

static void admin_closed(uv_handle_t *h)
{
    admin_conn_t *a = cq_container_of((uv_tcp_t *)h, admin_conn_t, tcp);
    cq_sbuf_done(&a->in);
    cq_sbuf_done(&a->out);
    cq_free(a);
}

static void admin_close(admin_conn_t *a)
{
    if (!cq_list_empty(&a->node)) {
        cq_list_remove(&a->node);
        cq_list_init(&a->node);
        a->w->admin_n--;
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

static void admin_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    admin_conn_t *a = cq_container_of((uv_tcp_t *)s, admin_conn_t, tcp);
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
    a->done = 1;
    uv_read_stop(s);
    if (cq_admin_respond(a->w->io->opts.admin, method, path, h < 0, &a->out) < 0) {
        admin_close(a);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)a->out.data, (unsigned)a->out.len);
    if (uv_write(&a->wreq, s, &b, 1, admin_written) < 0)
        admin_close(a);
}

static void admin_accept(io_lsn_t *l, int fd)
{
    io_worker_t *w = l->data;
    if (w->admin_n >= w->io->opts.admin_max_conns) {
        cq__io_lsn_refused(l, fd, "admin-max-connections reached");
        return;
    }
    admin_conn_t *a = cq_calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        return;
    }
    a->w = w;
    uv_tcp_init(&w->loop, &a->tcp);
    a->tcp.data = a;
    cq_list_insert_tail(&w->admin_conns, &a->node);
    w->admin_n++;
    a->accepted_ms = uv_now(&w->loop);
    if (uv_tcp_open(&a->tcp, fd) < 0) {
        close(fd);
        admin_close(a);
        return;
    }
    uv_read_start((uv_stream_t *)&a->tcp, admin_alloc, admin_read);
}

void cq__io_admin_sweep(io_worker_t *w, uint64_t now_ms)
{
    uint64_t tmo = w->io->opts.admin_timeout_ms;
    cq_list_t *n, *t;
    if (!tmo)
        return;
    cq_list_foreach_safe(n, t, &w->admin_conns)
    {
        admin_conn_t *a = cq_container_of(n, admin_conn_t, node);
        if (now_ms - a->accepted_ms < tmo)
            return; /* oldest first: the rest are younger */
        cq__io_lsn_count(&w->admin, IO_CLOSE_TIMEOUT);
        admin_close(a);
    }
}

int cq__io_admin_start(io_worker_t *w, char *err, size_t errlen)
{
    const char *addr = w->io->opts.admin_addr;
    cq_list_init(&w->admin_conns);
    if (!addr || !*addr) {
        strcpy(w->io->bound[IO_B_ADMIN], "-");
        return 0;
    }
    if (!w->io->opts.admin) {
        snprintf(err, errlen, "admin address %s without a metrics registry", addr);
        return -EINVAL;
    }
    w->admin.reasons = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_TIMEOUT;
    int r =
        cq__io_lsn_start(&w->admin, &w->loop, addr, "admin", admin_accept, w,
                         w->io->bound[IO_B_ADMIN], sizeof(w->io->bound[IO_B_ADMIN]), err, errlen);
    if (r < 0)
        return r;
    CQ_INFO("io", "admin HTTP (/metrics, /healthz) on %s", w->io->bound[IO_B_ADMIN]);
    return 0;
}

void cq__io_admin_close(io_worker_t *w)
{
    cq__io_lsn_close(&w->admin);
    while (w->admin_conns.next && !cq_list_empty(&w->admin_conns))
        admin_close(cq_container_of(w->admin_conns.next, admin_conn_t, node));
}
