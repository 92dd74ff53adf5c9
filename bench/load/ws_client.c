/* ws_client.c - the client side of a WebSocket connection, sans I/O (see ws_client.h). */
#include "ws_client.h"

#include "cq_err.h"
#include "cq_wsup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

/* ---- handshake -------------------------------------------------------------------------- */

static void base64_16(const uint8_t in[16], char out[25])
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < 16; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < 16)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < 16)
            v |= in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < 16 ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < 16 ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

static int random_bytes(uint8_t *p, size_t n)
{
    return getrandom(p, n, 0) == (ssize_t)n ? 0 : -EIO;
}

int bench_ws_request(bench_ws_t *ws, const char *host, const char *path, char *buf, size_t cap)
{
    uint8_t raw[16];
    char key[25];
    memset(ws, 0, sizeof(*ws));
    ws->state = BENCH_WS_S_HEAD;
    ws->in_header = true;
    ws->hdr_need = 2;
    if (random_bytes(raw, sizeof(raw)) < 0)
        return -EIO;
    base64_16(raw, key);
    if (cq_wsup_accept(key, ws->accept) != 0)
        return -EIO;
    int n = snprintf(buf, cap,
                     "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     path, host, key);
    return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

static int fail(bench_ws_t *ws, const char *why)
{
    ws->state = BENCH_WS_S_FAILED;
    ws->why = why;
    return CQ_EWSPROTO;
}

/* True if the comma-separated list holds token (case-insensitive, spaces around ignored). */
static bool list_has(const char *list, const char *token)
{
    size_t tl = strlen(token);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0)
            return true;
        p = e;
    }
    return false;
}

typedef struct resp_seen {
    bool upgrade, connection, accept;
} resp_seen_t;

/* Checks one "Name: value" line of the response head (NUL-terminated, no CRLF). */
static void check_header(const bench_ws_t *ws, char *line, resp_seen_t *seen)
{
    char *colon = strchr(line, ':');
    if (!colon)
        return;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vl = strlen(v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        v[--vl] = '\0';
    if (strcasecmp(line, "Upgrade") == 0)
        seen->upgrade |= list_has(v, "websocket");
    else if (strcasecmp(line, "Connection") == 0)
        seen->connection |= list_has(v, "upgrade");
    else if (strcasecmp(line, "Sec-WebSocket-Accept") == 0)
        seen->accept |= strcmp(v, ws->accept) == 0;
}

/* Validates the complete head in ws->head[0..len) (ends with CRLF CRLF). */
static int check_head(bench_ws_t *ws, size_t len)
{
    ws->head[len - 2] = '\0'; /* drop the empty last line */
    if (strncmp(ws->head, "HTTP/1.1 101", 12) != 0 || (ws->head[12] != ' ' && ws->head[12] != '\r'))
        return fail(ws, "the upgrade response is not HTTP/1.1 101");
    resp_seen_t seen = {false, false, false};
    char *line = strstr(ws->head, "\r\n");
    while (line && line[2]) {
        line += 2;
        char *end = strstr(line, "\r\n");
        if (end)
            *end = '\0';
        check_header(ws, line, &seen);
        if (!end)
            break;
        *end = '\r';
        line = end;
    }
    if (!seen.upgrade || !seen.connection)
        return fail(ws, "the 101 response lacks Upgrade: websocket or Connection: upgrade");
    if (!seen.accept)
        return fail(ws, "wrong or missing Sec-WebSocket-Accept");
    ws->state = BENCH_WS_S_OPEN;
    return 0;
}

/* Collects the response head; *used gets the bytes of p that belonged to it. */
static int feed_head(bench_ws_t *ws, const uint8_t *p, size_t n, size_t *used)
{
    size_t old = ws->head_len, room = sizeof(ws->head) - 1 - old;
    size_t k = n < room ? n : room;
    memcpy(ws->head + old, p, k);
    ws->head_len += k;
    ws->head[ws->head_len] = '\0';
    size_t from = old > 3 ? old - 3 : 0;
    char *end = strstr(ws->head + from, "\r\n\r\n");
    if (!end) {
        *used = k;
        return ws->head_len == sizeof(ws->head) - 1 ? fail(ws, "response head too large") : 0;
    }
    size_t len = (size_t)(end - ws->head) + 4;
    *used = len - old;
    return check_head(ws, len);
}

/* ---- frames ----------------------------------------------------------------------------- */

int bench_ws_frame(uint8_t opcode, const uint8_t *p, size_t n, uint8_t *out)
{
    size_t h = 0;
    out[h++] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        out[h++] = (uint8_t)(0x80 | n);
    } else if (n <= 0xffff) {
        out[h++] = 0x80 | 126;
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            out[h++] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    uint8_t *mask = out + h;
    if (random_bytes(mask, 4) < 0)
        return -EIO;
    h += 4;
    for (size_t i = 0; i < n; i++)
        out[h + i] = p[i] ^ mask[i & 3];
    return (int)(h + n);
}

static void send_control(uint8_t opcode, const uint8_t *p, size_t n, const bench_ws_cbs_t *cb,
                         void *ud)
{
    uint8_t f[125 + BENCH_WS_FRAME_HDR];
    int k = bench_ws_frame(opcode, p, n, f);
    if (k > 0)
        cb->on_send(ud, f, (size_t)k);
}

/* The header in ws->hdr is complete: validates it and sets up the payload. */
static int start_frame(bench_ws_t *ws)
{
    const uint8_t *h = ws->hdr;
    uint8_t op = h[0] & 0x0f;
    ws->fin = (h[0] & 0x80) != 0;
    ws->opcode = op;
    ws->ctl_len = 0;
    if (h[0] & 0x70)
        return fail(ws, "RSV bits set (no extension was negotiated)");
    if (h[1] & 0x80)
        return fail(ws, "the server masked a frame");
    uint64_t len = h[1] & 0x7f;
    if (len == 126) {
        len = ((uint64_t)h[2] << 8) | h[3];
    } else if (len == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = (len << 8) | h[2 + i];
        if (len >> 63)
            return fail(ws, "64-bit frame length with the top bit set");
    }
    ws->left = len;
    if (op >= BENCH_WS_CLOSE) {
        if (op > BENCH_WS_PONG)
            return fail(ws, "reserved control opcode");
        if (!ws->fin || len > 125)
            return fail(ws, "fragmented or oversized control frame");
        return 0;
    }
    if (op > BENCH_WS_BINARY)
        return fail(ws, "reserved data opcode");
    if ((op == BENCH_WS_CONT) != ws->in_msg)
        return fail(ws, op == BENCH_WS_CONT ? "continuation outside a message"
                                            : "new data frame inside a fragmented message");
    ws->in_msg = !ws->fin;
    return 0;
}

/* The current frame's payload is complete. */
static int end_frame(bench_ws_t *ws, const bench_ws_cbs_t *cb, void *ud)
{
    ws->in_header = true;
    ws->hdr_len = 0;
    ws->hdr_need = 2;
    if (ws->opcode == BENCH_WS_PING) {
        send_control(BENCH_WS_PONG, ws->ctl, ws->ctl_len, cb, ud);
    } else if (ws->opcode == BENCH_WS_CLOSE) {
        if (ws->ctl_len == 1)
            return fail(ws, "Close frame with a 1-byte payload");
        send_control(BENCH_WS_CLOSE, ws->ctl, ws->ctl_len < 2 ? 0 : 2, cb, ud);
        ws->state = BENCH_WS_S_CLOSED;
        return CQ_ECLOSED;
    }
    return 0;
}

/* Takes header bytes from p; returns how many it used. The first two bytes tell the size of
 * the rest (extended length, masking key). */
static size_t take_header(bench_ws_t *ws, const uint8_t *p, size_t n)
{
    size_t used = 0;
    while (used < n && ws->hdr_len < ws->hdr_need) {
        size_t k = ws->hdr_need - ws->hdr_len;
        if (k > n - used)
            k = n - used;
        memcpy(ws->hdr + ws->hdr_len, p + used, k);
        ws->hdr_len += k;
        used += k;
        if (ws->hdr_len == 2) {
            uint8_t l = ws->hdr[1] & 0x7f;
            ws->hdr_need = 2 + (l == 126 ? 2 : l == 127 ? 8 : 0) + (ws->hdr[1] & 0x80 ? 4 : 0);
        }
    }
    return used;
}

/* Passes payload bytes on (data) or collects them (control); returns how many it used. */
static size_t take_payload(bench_ws_t *ws, const uint8_t *p, size_t n, const bench_ws_cbs_t *cb,
                           void *ud)
{
    size_t k = ws->left < n ? (size_t)ws->left : n;
    if (ws->opcode >= BENCH_WS_CLOSE) {
        memcpy(ws->ctl + ws->ctl_len, p, k);
        ws->ctl_len += k;
    } else if (k) {
        cb->on_data(ud, p, k);
    }
    ws->left -= k;
    return k;
}

static int feed_frames(bench_ws_t *ws, const uint8_t *p, size_t n, const bench_ws_cbs_t *cb,
                       void *ud)
{
    size_t off = 0;
    while (ws->state == BENCH_WS_S_OPEN) {
        if (ws->in_header) {
            off += take_header(ws, p + off, n - off);
            if (ws->hdr_len < ws->hdr_need)
                return 0;
            int r = start_frame(ws);
            if (r < 0)
                return r;
            ws->in_header = false;
        }
        off += take_payload(ws, p + off, n - off, cb, ud);
        if (ws->left)
            return 0;
        int r = end_frame(ws, cb, ud);
        if (r < 0)
            return r;
        if (off == n)
            return 0;
    }
    return 0;
}

int bench_ws_feed(bench_ws_t *ws, const uint8_t *p, size_t n, const bench_ws_cbs_t *cb, void *ud)
{
    if (ws->state == BENCH_WS_S_FAILED)
        return CQ_EWSPROTO;
    if (ws->state == BENCH_WS_S_CLOSED)
        return CQ_ECLOSED;
    if (ws->state == BENCH_WS_S_HEAD) {
        size_t used = 0;
        int r = feed_head(ws, p, n, &used);
        if (r < 0 || ws->state != BENCH_WS_S_OPEN)
            return r;
        p += used;
        n -= used;
    }
    return n ? feed_frames(ws, p, n, cb, ud) : 0;
}

bool bench_ws_open(const bench_ws_t *ws)
{
    return ws->state == BENCH_WS_S_OPEN;
}

const char *bench_ws_why(const bench_ws_t *ws)
{
    return ws->why;
}
