/* admin_http.c - the admin HTTP listener on worker 0 (one request per connection). It only moves
 * bytes: what a request gets is cq_admin_respond()'s, over the metrics sources that src/main
 * registered (opts.admin). */
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

static void admin_accept(uv_stream_t *server, int status)
{
    io_worker_t *w = server->data;
    if (status < 0)
        return;
    admin_conn_t *a = cq_calloc(1, sizeof(*a));
    if (!a)
        return;
    a->w = w;
    uv_tcp_init(&w->loop, &a->tcp);
    a->tcp.data = a;
    if (uv_accept(server, (uv_stream_t *)&a->tcp) < 0) {
        admin_close(a);
        return;
    }
    uv_read_start((uv_stream_t *)&a->tcp, admin_alloc, admin_read);
}

int cq__io_admin_start(io_worker_t *w, char *err, size_t errlen)
{
    const char *addr = w->io->opts.admin_addr;
    if (!addr || !*addr) {
        strcpy(w->io->bound[2], "-");
        return 0;
    }
    if (!w->io->opts.admin) {
        snprintf(err, errlen, "admin address %s without a metrics registry", addr);
        return -EINVAL;
    }
    int fd;
    int r = cq__io_listen(addr, &fd, w->io->bound[2], sizeof(w->io->bound[2]), err, errlen);
    if (r < 0)
        return r;
    uv_tcp_init(&w->loop, &w->admin);
    w->admin.data = w;
    w->admin_active = 1;
    if (uv_tcp_open(&w->admin, fd) < 0 ||
        uv_listen((uv_stream_t *)&w->admin, 128, admin_accept) < 0) {
        snprintf(err, errlen, "cannot listen on admin address %s", addr);
        return -EINVAL;
    }
    CQ_INFO("io", "admin HTTP (/metrics, /healthz) on %s", w->io->bound[2]);
    return 0;
}

void cq__io_admin_close(io_worker_t *w)
{
    if (w->admin_active) {
        w->admin_active = 0;
        uv_close((uv_handle_t *)&w->admin, NULL);
    }
}
