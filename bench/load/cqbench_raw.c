/* cqbench_raw.c - redis-server and nats-server: the RESP (PUBLISH / SUBSCRIBE) and NATS text
 * (PUB / SUB) protocols, the publisher over a raw uv_tcp, and the input path that hands every
 * connection's received bytes to its target's parser.
 */
#include "cqbench_int.h"

#include <stdio.h>
#include <string.h>

/* ---- parsing helpers --------------------------------------------------------------------- */

/* Index of the "\r\n" ending the line at p[0..n), or SIZE_MAX if it is not complete yet. */
static size_t find_crlf(const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        const uint8_t *r = memchr(p + off, '\r', n - off);
        if (!r)
            return SIZE_MAX;
        size_t i = (size_t)(r - p);
        if (i + 1 >= n)
            return SIZE_MAX;
        if (p[i + 1] == '\n')
            return i;
        off = i + 1;
    }
    return SIZE_MAX;
}

static bool parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
    bool neg = false;
    int64_t v = 0;
    size_t i = 0;
    if (i < n && p[i] == '-') {
        neg = true;
        i++;
    }
    if (i == n)
        return false;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

/* ---- raw TCP (redis, nats) --------------------------------------------------------------- */

static void raw_written(uv_write_t *req, int status)
{
    bconn_t *c = req->data;
    c->writing = false;
    c->wr.len = 0;
    if (status < 0) {
        cqb_conn_lost(c, status);
        return;
    }
    cqb_raw_flush(c);
}

void cqb_raw_flush(bconn_t *c)
{
    if (c->writing || !c->connected || c->out.len == 0)
        return;
    uv_buf_t b = uv_buf_init((char *)c->out.p, (unsigned)c->out.len);
    int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (k < 0 && k != UV_EAGAIN) {
        cqb_conn_lost(c, k);
        return;
    }
    size_t done = k > 0 ? (size_t)k : 0;
    cqb_bbuf_consume(&c->out, done);
    if (c->out.len == 0)
        return;
    bbuf_t t = c->wr; /* empty: no write in flight */
    c->wr = c->out;
    c->out = t;
    c->out.len = 0;
    c->writing = true;
    b = uv_buf_init((char *)c->wr.p, (unsigned)c->wr.len);
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, raw_written);
    if (r < 0) {
        c->writing = false;
        cqb_conn_lost(c, r);
    }
}

static void conn_write(bconn_t *c, const char *s, size_t n)
{
    if (c->idx < 0) {
        cqb_bbuf_append(&c->out, s, n);
        cqb_raw_flush(c);
    } else {
        cqb_sub_write(c, s, n);
    }
}

/* One RESP value. Up to three top-level bulk elements of an array are captured. */
typedef struct resp {
    char type;
    int64_t num;
    const uint8_t *el[3];
    size_t ell[3];
} resp_t;

/* Returns the bytes used, 0 when incomplete, SIZE_MAX on a protocol error. */
static size_t resp_value(const uint8_t *p, size_t n, resp_t *v, int depth)
{
    if (n < 3 || depth > 4)
        return depth > 4 ? SIZE_MAX : 0;
    size_t e = find_crlf(p, n);
    if (e == SIZE_MAX)
        return 0;
    int64_t num = 0;
    v->type = (char)p[0];
    switch (p[0]) {
    case '+':
        return e + 2;
    case '-':
        fprintf(stderr, "cqbench: redis error: %.*s\n", (int)e - 1, (const char *)p + 1);
        return e + 2;
    case ':':
        if (!parse_i64(p + 1, e - 1, &v->num))
            return SIZE_MAX;
        return e + 2;
    case '$': {
        if (!parse_i64(p + 1, e - 1, &num))
            return SIZE_MAX;
        if (num < 0)
            return e + 2;
        size_t need = e + 2 + (size_t)num + 2;
        if (n < need)
            return 0;
        v->el[0] = p + e + 2;
        v->ell[0] = (size_t)num;
        return need;
    }
    case '*': {
        if (!parse_i64(p + 1, e - 1, &num))
            return SIZE_MAX;
        size_t off = e + 2;
        for (int64_t i = 0; i < num; i++) {
            resp_t sub = {0};
            size_t k = resp_value(p + off, n - off, &sub, depth + 1);
            if (k == 0 || k == SIZE_MAX)
                return k;
            if (i < 3 && sub.type == '$') {
                v->el[i] = sub.el[0];
                v->ell[i] = sub.ell[0];
            } else if (sub.type == ':') {
                v->num = sub.num;
            }
            off += k;
        }
        return off;
    }
    default:
        return SIZE_MAX;
    }
}

static bool eq(const uint8_t *p, size_t n, const char *s)
{
    size_t l = strlen(s);
    return p && n == l && memcmp(p, s, l) == 0;
}

static size_t redis_parse(bconn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        resp_t v = {0};
        size_t k = resp_value(p + off, n - off, &v, 0);
        if (k == 0)
            break;
        if (k == SIZE_MAX)
            cqb_die("redis: protocol error");
        if (c->idx < 0) {
            if (v.type == '+' && !c->ready) { /* PONG */
                c->ready = true;
                cqb_start_more();
            }
        } else if (v.type == '*') {
            if (eq(v.el[0], v.ell[0], "message"))
                cqb_on_payload(c, v.el[2], v.ell[2]);
            else if (eq(v.el[0], v.ell[0], "subscribe"))
                cqb_sub_ready(c);
        }
        off += k;
    }
    return off;
}

static size_t nats_parse(bconn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        const uint8_t *q = p + off;
        size_t left = n - off;
        size_t e = find_crlf(q, left);
        if (e == SIZE_MAX)
            break;
        if (e > 4 && memcmp(q, "MSG ", 4) == 0) {
            size_t j = e;
            while (j > 0 && q[j - 1] != ' ')
                j--;
            int64_t size;
            if (!parse_i64(q + j, e - j, &size) || size < 0)
                cqb_die("nats: bad MSG line");
            size_t need = e + 2 + (size_t)size + 2;
            if (left < need)
                break;
            cqb_on_payload(c, q + e + 2, (size_t)size);
            off += need;
            continue;
        }
        if (e == 4 && memcmp(q, "PING", 4) == 0) {
            conn_write(c, "PONG\r\n", 6);
        } else if (e == 4 && memcmp(q, "PONG", 4) == 0) {
            if (c->idx < 0) {
                if (!c->ready) {
                    c->ready = true;
                    cqb_start_more();
                }
            } else {
                cqb_sub_ready(c);
            }
        } else if (e > 0 && q[0] == '-') {
            fprintf(stderr, "cqbench: nats error: %.*s\n", (int)e, (const char *)q);
        }
        off += e + 2;
    }
    return off;
}

/* Hands received bytes to the target's parser; keeps an incomplete tail in c->in. */
void cqb_consume_input(bconn_t *c, const uint8_t *data, size_t n)
{
    if (O.target == TGT_CHANQ && c->ws) {
        cqb_ws_input(c, data, n);
        return;
    }
    if (O.target == TGT_CHANQ) {
        int r = chanq_client_feed(c->core, data, n);
        if (r < 0) {
            cqb_conn_lost(c, r);
            return;
        }
        cqb_sub_chanq_flush(c);
        return;
    }
    const uint8_t *p;
    size_t len;
    bool direct = c->in.len == 0;
    if (direct) {
        p = data;
        len = n;
    } else {
        cqb_bbuf_append(&c->in, data, n);
        p = c->in.p;
        len = c->in.len;
    }
    size_t used = O.target == TGT_REDIS   ? redis_parse(c, p, len)
                  : O.target == TGT_FLOOR ? cqb_floor_parse(c, p, len)
                                          : nats_parse(c, p, len);
    if (direct) {
        if (used < len)
            cqb_bbuf_append(&c->in, p + used, len - used);
    } else {
        cqb_bbuf_consume(&c->in, used);
    }
}

/* The handshake a connection sends once TCP is up (chanq: AUTH, see cqb_chanq_sub_start). */
void cqb_send_hello(bconn_t *c)
{
    char buf[160];
    int k;
    if (O.target == TGT_REDIS) {
        k = snprintf(buf, sizeof(buf), "%s", c->idx < 0 ? "PING\r\n" : "SUBSCRIBE " TOPIC "\r\n");
    } else {
        k = snprintf(buf, sizeof(buf), "CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
        if (c->idx >= 0)
            k += snprintf(buf + k, sizeof(buf) - (size_t)k, "SUB " TOPIC " %d\r\n", c->idx + 1);
        k += snprintf(buf + k, sizeof(buf) - (size_t)k, "PING\r\n");
    }
    conn_write(c, buf, (size_t)k);
}

/* -- the publisher over uv_tcp (redis, nats) -- */

static void raw_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    *b = uv_buf_init((char *)G.rbuf, sizeof(G.rbuf));
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    bconn_t *c = s->data;
    if (n < 0) {
        uv_read_stop(s);
        c->connected = false;
        cqb_conn_lost(c, (int)n);
        return;
    }
    if (n > 0)
        cqb_consume_input(c, (const uint8_t *)buf->base, (size_t)n);
}

static void raw_connected(uv_connect_t *req, int status)
{
    bconn_t *c = req->data;
    if (status < 0) {
        cqb_conn_lost(c, status);
        return;
    }
    c->connected = true;
    uv_read_start((uv_stream_t *)&c->tcp, raw_alloc, raw_read);
    cqb_send_hello(c);
}

void cqb_raw_connect(bconn_t *c)
{
    uv_tcp_init(G.loop, &c->tcp);
    uv_tcp_nodelay(&c->tcp, 1);
    c->tcp.data = c;
    c->creq.data = c;
    c->wreq.data = c;
    int r = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&O.addr, raw_connected);
    if (r < 0)
        cqb_die("connect: %s", uv_strerror(r));
}
