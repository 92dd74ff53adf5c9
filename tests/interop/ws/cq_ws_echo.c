/* cq_ws_echo - a WebSocket (and wss) echo server built on chanq's sans-I/O engines cq_wsup,
 * cq_ws and cq_tls, so ws_conformance.py can check the engines over real sockets before
 * chanqd's io layer uses them.
 *
 * Usage: cq_ws_echo [--port N] [--path /] [--origins LIST] [--max-message N]
 *                   [--cert cert.pem --key key.pem]
 * Prints "ready <port>" once listening on 127.0.0.1 (wss with --cert/--key), then serves
 * until SIGTERM/SIGINT. Every message is echoed with its type; a plain GET gets a 404 page.
 *
 * Test tooling, not production code: one thread, poll(), blocking-free sockets, unbounded
 * output buffers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cq_err.h"
#include "cq_tls.h"
#include "cq_ws.h"
#include "cq_wsup.h"

#define MAX_CONNS 64

typedef struct conn {
    int fd;
    cq_tls_t *tls;
    cq_wsup_t *up; /* until the upgrade completed */
    cq_ws_t *ws;
    uint8_t *out;
    size_t out_len, out_cap;
    int closing; /* close once out is flushed */
} conn_t;

static conn_t g_conns[MAX_CONNS];
static cq_wsup_config_t g_up;
static size_t g_max_message;
static cq_tls_ctx_t *g_tls;
static volatile sig_atomic_t g_stop;

/* ---- output ---------------------------------------------------------------------------- */

static int out_raw(void *ud, const uint8_t *p, size_t n)
{
    conn_t *c = ud;
    if (c->out_len + n > c->out_cap) {
        size_t cap = (c->out_len + n) * 2;
        uint8_t *b = realloc(c->out, cap);
        if (!b)
            return -ENOMEM;
        c->out = b;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

/* Plaintext to the peer: through TLS when on. */
static int out_plain(void *ud, const uint8_t *p, size_t n)
{
    conn_t *c = ud;
    if (!c->tls)
        return out_raw(c, p, n);
    int r = cq_tls_write(c->tls, p, n);
    return r < 0 ? r : cq_tls_out(c->tls, out_raw, c);
}

static void flush_out(conn_t *c)
{
    while (c->out_len > 0) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                c->out_len = 0, c->closing = 1;
            return;
        }
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
    }
}

/* ---- WebSocket ------------------------------------------------------------------------- */

static void on_message(void *ud, int opcode, const uint8_t *data, size_t len)
{
    conn_t *c = ud;
    struct iovec iov = {(void *)data, len};
    cq_ws_send(c->ws, opcode, &iov, 1);
}

static const cq_ws_callbacks_t WS_CB = {on_message, out_plain, NULL};

static int upgraded(conn_t *c, const uint8_t *rest, size_t n)
{
    char buf[512];
    int len = cq_wsup_response_101(cq_wsup_request(c->up), NULL, buf, sizeof(buf));
    if (len < 0 || out_plain(c, (const uint8_t *)buf, (size_t)len) < 0)
        return -1;
    c->ws = cq_ws_new(&WS_CB, c, g_max_message);
    if (!c->ws)
        return -1;
    return n ? cq_ws_input(c->ws, rest, n) : 0;
}

static int refuse(conn_t *c, int status, const char *reason)
{
    char buf[512];
    int len = cq_wsup_response_error(status, reason, buf, sizeof(buf));
    if (len > 0)
        out_plain(c, (const uint8_t *)buf, (size_t)len);
    c->closing = 1;
    return 0;
}

/* Plaintext from the peer: the request head first, then WebSocket bytes. */
static int in_plain(void *ud, const uint8_t *p, size_t n)
{
    conn_t *c = ud;
    if (c->closing)
        return 0;
    if (c->ws)
        return cq_ws_input(c->ws, p, n);
    size_t used = 0;
    int r = cq_wsup_feed(c->up, p, n, &used);
    if (r == CQ_WSUP_NEED_MORE)
        return 0;
    if (r == CQ_WSUP_WEBSOCKET)
        return upgraded(c, p + used, n - used);
    if (r == CQ_WSUP_PLAIN)
        return refuse(c, 404, "no static files here");
    return refuse(c, r == CQ_EHTTP ? cq_wsup_status(c->up) : 500, cq_wsup_reason(c->up));
}

/* ---- connections ----------------------------------------------------------------------- */

static void conn_close(conn_t *c)
{
    close(c->fd);
    cq_tls_free(c->tls);
    cq_wsup_free(c->up);
    cq_ws_free(c->ws);
    free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static void conn_read(conn_t *c)
{
    uint8_t buf[65536];
    ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            conn_close(c);
        return;
    }
    int r =
        c->tls ? cq_tls_input(c->tls, buf, (size_t)n, in_plain, c) : in_plain(c, buf, (size_t)n);
    if (c->tls)
        cq_tls_out(c->tls, out_raw, c);
    if (r < 0)
        c->closing = 1;
    flush_out(c);
    if ((c->closing || (c->ws && cq_ws_done(c->ws))) && c->out_len == 0)
        conn_close(c);
}

static void accept_one(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return;
    conn_t *c = NULL;
    for (int i = 0; i < MAX_CONNS && !c; i++)
        if (g_conns[i].fd < 0)
            c = &g_conns[i];
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (!c || !(c->up = cq_wsup_new(&g_up)) || (g_tls && !(c->tls = cq_tls_new(g_tls)))) {
        if (c)
            cq_wsup_free(c->up), c->up = NULL;
        close(fd);
        return;
    }
    c->fd = fd;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
        perror("cq_ws_echo: listen");
        exit(1);
    }
    printf("ready %d\n", ntohs(a.sin_port));
    fflush(stdout);
    return fd;
}

static void serve(int lfd)
{
    while (!g_stop) {
        struct pollfd pfd[MAX_CONNS + 1] = {{.fd = lfd, .events = POLLIN}};
        for (int i = 0; i < MAX_CONNS; i++) {
            pfd[i + 1].fd = g_conns[i].fd;
            pfd[i + 1].events = POLLIN | (g_conns[i].out_len ? POLLOUT : 0);
        }
        if (poll(pfd, MAX_CONNS + 1, 1000) < 0)
            continue;
        if (pfd[0].revents & POLLIN)
            accept_one(lfd);
        for (int i = 0; i < MAX_CONNS; i++) {
            conn_t *c = &g_conns[i];
            if (c->fd < 0 || pfd[i + 1].fd != c->fd || !pfd[i + 1].revents)
                continue;
            if (pfd[i + 1].revents & POLLOUT) {
                flush_out(c);
                if (c->closing && c->out_len == 0) {
                    conn_close(c);
                    continue;
                }
            }
            if (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR))
                conn_read(c);
        }
    }
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

int main(int argc, char **argv)
{
    int port = 0;
    const char *cert = NULL, *key = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--path") == 0)
            g_up.path = argv[i + 1];
        else if (strcmp(argv[i], "--origins") == 0)
            g_up.origins = argv[i + 1];
        else if (strcmp(argv[i], "--max-message") == 0)
            g_max_message = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--cert") == 0)
            cert = argv[i + 1];
        else if (strcmp(argv[i], "--key") == 0)
            key = argv[i + 1];
    }
    if (cert && key) {
        char err[256];
        if (!(g_tls = cq_tls_ctx_new(cert, key, err, sizeof(err)))) {
            fprintf(stderr, "cq_ws_echo: %s\n", err);
            return 1;
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        g_conns[i].fd = -1;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    serve(listen_on(port));
    for (int i = 0; i < MAX_CONNS; i++)
        if (g_conns[i].fd >= 0)
            conn_close(&g_conns[i]);
    cq_tls_ctx_free(g_tls);
    return 0;
}
