/* admin_http.c - the admin HTTP listener on worker 0 (one request per connection). It only moves
 * bytes: the connections are io_adminconn.c's (limits included), what a request gets is
 * cq_admin_respond()'s, over the metrics sources that src/main registered (opts.admin). */
#include "cq_log.h"
#include "io_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void admin_accept(io_lsn_t *l, int fd)
{
    io_worker_t *w = l->data;
    cq__io_adminset_accept(&w->admins, fd);
}

void cq__io_admin_sweep(io_worker_t *w, uint64_t now_ms)
{
    cq__io_adminset_sweep(&w->admins, now_ms);
}

int cq__io_admin_start(io_worker_t *w, char *err, size_t errlen)
{
    const cq_io_opts_t *o = &w->io->opts;
    cq__io_adminset_init(&w->admins, &w->loop, o->admin, &w->admin, o->admin_max_conns,
                         o->admin_timeout_ms, NULL, NULL);
    if (!o->admin_addr || !*o->admin_addr) {
        strcpy(w->io->bound[IO_B_ADMIN], "-");
        return 0;
    }
    if (!o->admin) {
        snprintf(err, errlen, "admin address %s without a metrics registry", o->admin_addr);
        return -EINVAL;
    }
    w->admin.reasons = 1u << IO_CLOSE_CAP | 1u << IO_CLOSE_TIMEOUT;
    int r =
        cq__io_lsn_start(&w->admin, &w->loop, o->admin_addr, "admin", admin_accept, w,
                         w->io->bound[IO_B_ADMIN], sizeof(w->io->bound[IO_B_ADMIN]), err, errlen);
    if (r < 0)
        return r;
    CQ_INFO("io", "admin HTTP (/metrics, /healthz) on %s", w->io->bound[IO_B_ADMIN]);
    return 0;
}

void cq__io_admin_close(io_worker_t *w)
{
    cq__io_lsn_close(&w->admin);
    cq__io_adminset_close_all(&w->admins);
}
