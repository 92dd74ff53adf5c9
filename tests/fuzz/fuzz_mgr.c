/* fuzz_mgr - the management port: its codec (src/mq cq_mqmgr) and the management engine
 * (src/mgr) driven by a script with a manual clock, a fake store and a fake edge.
 *
 * Input: byte 0 picks the options (bit 0: --dev, bit 1: a server token, bit 2: the first load
 * finds a stored document, bit 3: small frame limits), then ops until the input ends. An op byte
 * is (action << 4) | connection (0..2: management connections, 3: the console's HTTP one):
 *   0 feed n+1 bytes (n: next byte)       1 feed n bytes (n: next 2 bytes, big-endian)
 *   2 the save in flight completes (next byte % 3: ok, a compare-and-set miss, an error)
 *   3 the reload asked completes with the last saved document (or none)
 *   4 tick the clock by next byte x 100 ms
 *   5 the edge closes the connection (a new one takes its slot)
 *   6 a state change as the console makes it (next byte: module put/delete, topic, server)
 *   7 decode the next n+1 bytes as a frame body of every type (the codec alone)
 * After each op the engine's pending output is flushed, as once per loop iteration.
 *
 * Checked: every frame the engine writes on a management connection parses and decodes as a
 * management message of the manager's kinds (an answer, a command or an error frame); the
 * console answers start with "HTTP/1.1 "; once the engine closed a connection it writes nothing
 * more; each saved document loads back into a fresh engine (cq_mgr_store_loaded 0) and its
 * version never goes down; a decoded message re-encodes to bytes that decode and re-encode to
 * the same bytes; the state view and the metrics render. ASan checks the memory.
 */
#include "fuzz_common.h"

#include "cq_alloc.h"
#include "cq_buf.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mgr.h"
#include "cq_mq.h"
#include "cq_mqmgr.h"
#include "cq_sbuf.h"
#include "mgr_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NCONN 4 /* 0..2 management, 3 HTTP */

typedef struct fconn {
    cq_mgr_conn_t *c;
    cq_mgr_hconn_t *h;
    cq_sbuf_t out;
    bool closed; /* the engine called close */
} fconn_t;

typedef struct fuzz {
    cq_mgr_t *m;
    fconn_t conn[NCONN];
    char *saved; /* the last document saved (malloc'd) */
    int64_t saved_version;
    int64_t store_ver;
    bool save_pending, reload_pending;
    char *inflight; /* the save in flight's document */
    uint64_t now;
} fuzz_t;

static fuzz_t fz;

/* ---- the codec ------------------------------------------------------------------------------ */

static void roundtrip(const uint8_t *body, size_t n, uint8_t type)
{
    uint8_t *fr = malloc(CQ_MQ_HDR_LEN + n + 1);
    FUZZ_CHECK(fr != NULL);
    cq_mq_header_write(fr, (uint32_t)(CQ_MQ_HDR_LEN + n), type, 7);
    memcpy(fr + CQ_MQ_HDR_LEN, body, n);
    cq_mq_frame_t f;
    FUZZ_CHECK(cq_mq_parse(fr, CQ_MQ_HDR_LEN + n, 0xffffffffu, &f) == (ssize_t)(CQ_MQ_HDR_LEN + n));
    cq_mqmgr_msg_t *m = NULL;
    char err[256];
    if (cq_mqmgr_decode(&f, 0, &m, err, sizeof(err)) == 0) {
        uint8_t *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        if (cq_mqmgr_encode(m, &a, &an) == 0) {
            cq_mq_frame_t f2;
            cq_mqmgr_msg_t *m2 = NULL;
            FUZZ_CHECK(cq_mq_parse(a, an, 0xffffffffu, &f2) == (ssize_t)an);
            FUZZ_CHECK(cq_mqmgr_decode(&f2, 0, &m2, err, sizeof(err)) == 0);
            FUZZ_CHECK(m2->kind == m->kind);
            FUZZ_CHECK(cq_mqmgr_encode(m2, &b, &bn) == 0);
            FUZZ_CHECK(an == bn && memcmp(a, b, an) == 0);
            cq_mqmgr_msg_free(m2);
        }
        cq_free(a);
        cq_free(b);
    }
    cq_mqmgr_msg_free(m);
    /* the refusal's answer is always a sound frame */
    cq_buf_t *eb = NULL;
    if (cq_mqmgr_encode_error_buf(&f, CQ_EFIELD, "x", 3, &eb) == 0) {
        cq_mq_frame_t f3;
        cq_mqmgr_msg_t *m3 = NULL;
        FUZZ_CHECK(cq_mq_parse(eb->data, eb->len, 0xffffffffu, &f3) == (ssize_t)eb->len);
        FUZZ_CHECK(cq_mqmgr_decode(&f3, 0, &m3, err, sizeof(err)) == 0);
        cq_mqmgr_msg_free(m3);
        cq_buf_unref(eb);
    }
    free(fr);
}

/* ---- the fake store ------------------------------------------------------------------------ */

static void f_save(void *ud, const char *json, size_t len, int64_t expect_ver)
{
    FUZZ_CHECK(!fz.save_pending); /* one save in flight */
    fz.save_pending = true;
    free(fz.inflight);
    fz.inflight = strndup(json, len);
    FUZZ_CHECK(fz.inflight != NULL);
}

static void f_reload(void *ud)
{
    fz.reload_pending = true;
}

static void f_audit(void *ud, const char *line, size_t len)
{
    json_t *j = json_loadb(line, len, 0, NULL);
    FUZZ_CHECK(j != NULL); /* an audit line is one JSON object */
    json_decref(j);
}

static const cq_mgr_ops_t fops = {f_save, f_reload, f_audit};

/* A document the engine saved loads back into a fresh engine. */
static void check_loads(const char *doc)
{
    cq_mgr_opts_t o = {.admin_token = "a"};
    char err[256];
    cq_mgr_t *m = cq_mgr_new(&o, &fops, NULL, err, sizeof(err));
    FUZZ_CHECK(m != NULL);
    bool sp = fz.save_pending, rp = fz.reload_pending;
    char *inflight = fz.inflight;
    fz.inflight = NULL;
    fz.save_pending = false;
    int r = cq_mgr_store_loaded(m, doc, strlen(doc), 1, err, sizeof(err));
    if (r != 0)
        fprintf(stderr, "a saved document does not load: %s\n%s\n", err, doc);
    FUZZ_CHECK(r == 0);
    cq_mgr_free(m);
    free(fz.inflight);
    fz.inflight = inflight;
    fz.save_pending = sp;
    fz.reload_pending = rp;
}

static void save_done(uint8_t how)
{
    if (!fz.save_pending)
        return;
    fz.save_pending = false;
    char *doc = fz.inflight;
    fz.inflight = NULL;
    int err = how % 3 == 0 ? 0 : how % 3 == 1 ? CQ_ECONFLICT : -EIO;
    if (err == 0) {
        json_t *j = json_loads(doc, 0, NULL);
        FUZZ_CHECK(j != NULL);
        int64_t v = json_integer_value(json_object_get(j, "version"));
        json_decref(j);
        FUZZ_CHECK(v >= fz.saved_version);
        fz.saved_version = v;
        check_loads(doc);
        free(fz.saved);
        fz.saved = doc;
        doc = NULL;
        fz.store_ver++;
    }
    free(doc);
    cq_mgr_store_done(fz.m, err, fz.store_ver);
}

static void reload_done(void)
{
    if (!fz.reload_pending)
        return;
    fz.reload_pending = false;
    char err[256];
    const char *d = fz.saved;
    FUZZ_CHECK(cq_mgr_store_loaded(fz.m, d, d ? strlen(d) : 0, d ? fz.store_ver : -1, err,
                                   sizeof(err)) == 0);
}

/* ---- the fake edge ------------------------------------------------------------------------- */

static void check_out(fconn_t *f, bool http)
{
    if (http) {
        FUZZ_CHECK(f->out.len < 9 || memcmp(f->out.data, "HTTP/1.1 ", 9) == 0);
        if (f->out.len >= 9)
            f->out.len = 0; /* checked: the next answer starts afresh only after a whole one */
        return;
    }
    size_t off = 0;
    cq_mq_frame_t fr;
    ssize_t r;
    while ((r = cq_mq_parse(f->out.data + off, f->out.len - off, 0xffffffffu, &fr)) > 0) {
        cq_mqmgr_msg_t *m = NULL;
        char err[256];
        int d = cq_mqmgr_decode(&fr, 0, &m, err, sizeof(err));
        if (d != 0)
            fprintf(stderr, "the manager wrote an undecodable frame %u: %s\n", fr.type, err);
        FUZZ_CHECK(d == 0);
        FUZZ_CHECK(m->kind == CQ_MQMGR_SVRCONFIG_RESP || m->kind == CQ_MQMGR_SYNC_RESP ||
                   m->kind == CQ_MQMGR_COMMAND || m->kind == CQ_MQMGR_ERROR_FRAME);
        cq_mqmgr_msg_free(m);
        off += (size_t)r;
    }
    FUZZ_CHECK(r == 0);
    cq_sbuf_consume(&f->out, off);
}

static void e_flush(void *tctx)
{
    fconn_t *f = tctx;
    cq_sendq_t *q = f->c ? cq_mgr_conn_sendq(f->c) : cq_mgr_hconn_sendq(f->h);
    const struct iovec *iov;
    int n;
    while (cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t len = 0;
        FUZZ_CHECK(!f->closed || f->h); /* nothing new after a close (management) */
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(cq_sbuf_append(&f->out, iov[i].iov_base, iov[i].iov_len) == 0);
            len += iov[i].iov_len;
        }
        cq_sendq_written(q, len);
    }
    check_out(f, f->h != NULL);
}

static void e_close(void *tctx)
{
    fconn_t *f = tctx;
    e_flush(f); /* what is queued is written, then the socket closes */
    f->closed = true;
}

static int e_peer(void *tctx, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:4000");
    return 0;
}

static const cq_mgr_conn_ops_t eops = {{"tcp", e_flush, e_close, e_peer}};

static void conn_open(int i)
{
    fconn_t *f = &fz.conn[i];
    cq_sbuf_init(&f->out);
    f->closed = false;
    if (i == 3)
        f->h = cq_mgr_hconn_new(fz.m, &eops, f, "127.0.0.1");
    else
        f->c = cq_mgr_conn_new(fz.m, &eops, f, "127.0.0.1");
    FUZZ_CHECK(f->c || f->h);
}

static void conn_gone(int i)
{
    fconn_t *f = &fz.conn[i];
    cq_mgr_conn_close(f->c);
    cq_mgr_hconn_close(f->h);
    f->c = NULL;
    f->h = NULL;
    cq_sbuf_done(&f->out);
}

static void feed(int i, const uint8_t *p, size_t n)
{
    fconn_t *f = &fz.conn[i];
    if (f->closed) { /* the edge reopens the slot */
        conn_gone(i);
        conn_open(i);
    }
    if (f->h)
        cq_mgr_hconn_input(f->h, p, n, fz.now);
    else
        cq_mgr_conn_input(f->c, p, n, fz.now);
}

/* A change as the console makes it. */
static void change(uint8_t k)
{
    char err[256];
    static const char *const mods[] = {
        "{\"token\":\"t\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false}",
        "{\"produce\":[],\"consume\":[\"a\"],\"admin\":true,\"groups\":[1]}",
        "{\"token\":\"u\",\"produce\":[\"bad topic\"],\"consume\":[],\"admin\":false}",
    };
    switch (k % 4) {
    case 0:
        cq__mgr_module_put(fz.m, k >> 4, mods[(k >> 2) % 3], strlen(mods[(k >> 2) % 3]), err,
                           sizeof(err));
        break;
    case 1:
        cq__mgr_module_delete(fz.m, k >> 4, err, sizeof(err));
        break;
    case 2:
        cq__mgr_topic_set_online(fz.m, (k & 4) ? "orders" : "a", (k & 8) != 0, err, sizeof(err));
        break;
    default:
        cq__mgr_server_set_offline(fz.m, 100 + (k >> 4) % 4, (k & 4) != 0, err, sizeof(err));
        break;
    }
}

static void render(void)
{
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    FUZZ_CHECK(cq__mgr_state_json(fz.m, fz.now, &b) == 0);
    json_t *j = json_loadb((const char *)b.data, b.len, 0, NULL);
    FUZZ_CHECK(j != NULL);
    json_decref(j);
    b.len = 0;
    FUZZ_CHECK(cq_mgr_metrics(fz.m, fz.now, &b) == 0);
    cq_sbuf_done(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    cq_log_set_level(CQ_LOG_OFF);
    uint8_t opt = data[0];
    memset(&fz, 0, sizeof(fz));
    fz.now = 1700000000000ull;
    cq_mgr_opts_t o = {.admin_token = "admin",
                       .server_token = (opt & 2) ? "srv" : "",
                       .http_hosts = "*",
                       .dev = (opt & 1) != 0,
                       .stale_ms = 1000,
                       .lag_alert_ms = 500,
                       .preauth_max_frame = (opt & 8) ? 256 : 0,
                       .max_frame = (opt & 8) ? 2048 : 0};
    char err[256];
    fz.m = cq_mgr_new(&o, &fops, NULL, err, sizeof(err));
    FUZZ_CHECK(fz.m != NULL);
    if (opt & 4) {
        fz.saved = strdup("{\"version\":5,\"modules\":{\"7\":{\"token\":\"t\",\"produce\":[\"*\"],"
                          "\"consume\":[\"*\"],\"admin\":false}},\"topics\":{},\"offline\":[101],"
                          "\"groups\":{}}");
        fz.saved_version = 5;
    }
    fz.reload_pending = true; /* the edge's first load */
    reload_done();
    for (int i = 0; i < NCONN; i++)
        conn_open(i);
    size_t p = 1;
    while (p < size) {
        uint8_t op = data[p++];
        int c = op & 3; /* 0..3 */
        size_t n = 0;
        switch (op >> 4) {
        case 0:
        case 7:
            n = p < size ? (size_t)data[p++] + 1 : 0;
            break;
        case 1:
            n = p + 1 < size ? (size_t)data[p] << 8 | data[p + 1] : 0;
            p += 2;
            break;
        default:
            break;
        }
        if (p > size)
            break;
        if (n > size - p)
            n = size - p;
        uint8_t arg = p < size ? data[p] : 0;
        switch (op >> 4) {
        case 0:
        case 1:
            feed(c, data + p, n);
            p += n;
            break;
        case 2:
            save_done(arg);
            p++;
            break;
        case 3:
            reload_done();
            break;
        case 4:
            fz.now += (uint64_t)arg * 100;
            cq_mgr_tick(fz.m, fz.now);
            p++;
            break;
        case 5:
            conn_gone(c);
            conn_open(c);
            break;
        case 6:
            change(arg);
            p++;
            break;
        case 7:
            for (uint8_t t = 0; t <= 20; t++)
                if (t <= 4 || t == 9 || t == 20)
                    roundtrip(data + p, n, t);
            p += n;
            break;
        default:
            break;
        }
        cq_mgr_flush(fz.m);
    }
    render();
    for (int i = 0; i < NCONN; i++)
        conn_gone(i);
    fz.m = cq_mgr_free(fz.m);
    free(fz.saved);
    free(fz.inflight);
    return 0;
}
