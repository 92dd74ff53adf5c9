/* cq_tls.c - server-side TLS over OpenSSL 3 memory BIOs.
 *
 * rbio holds ciphertext received and not yet consumed by OpenSSL; wbio collects ciphertext
 * OpenSSL produced (handshake, tickets, alerts, records). Both are memory BIOs, so nothing
 * blocks: SSL_ERROR_WANT_READ only means "feed more".
 */
#include "cq_tls.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "cq_alloc.h"
#include "cq_err.h"

#define TLS_CHUNK 16384

struct cq_tls_ctx {
    SSL_CTX *ssl_ctx;
};

struct cq_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    bool dead;        /* failed or closed by the peer: nothing more in or out */
    bool in_done;     /* plain() refused input: no more input, but output still works */
    bool shut;        /* our close_notify was queued */
    char err[200];
};

/* ---- context --------------------------------------------------------------------------- */

/* Writes "what: <first OpenSSL error>" into err and empties the error queue. */
static void ssl_reason(char *err, size_t errlen, const char *what)
{
    char buf[160];
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "unknown error");
    ERR_clear_error();
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, buf);
}

static int ctx_configure(SSL_CTX *c)
{
    if (!SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION))
        return -1;
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    return SSL_CTX_set_num_tickets(c, 1) ? 0 : -1;
}

cq_tls_ctx_t *cq_tls_ctx_new(const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    ERR_clear_error();
    cq_tls_ctx_t *ctx = cq_calloc(1, sizeof(*ctx));
    if (!ctx) {
        cq_err_fmt(err, errlen, -ENOMEM, "out of memory");
        return NULL;
    }
    ctx->ssl_ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx->ssl_ctx || ctx_configure(ctx->ssl_ctx) != 0) {
        ssl_reason(err, errlen, "TLS context");
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx->ssl_ctx, cert_file) != 1) {
        ssl_reason(err, errlen, cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx->ssl_ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_reason(err, errlen, key_file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx->ssl_ctx) != 1) {
        ssl_reason(err, errlen, "certificate and key do not match");
        goto fail;
    }
    return ctx;
fail:
    cq_tls_ctx_free(ctx);
    return NULL;
}

void cq_tls_ctx_free(cq_tls_ctx_t *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl_ctx);
    cq_free(ctx);
}

/* ---- session --------------------------------------------------------------------------- */

cq_tls_t *cq_tls_new(cq_tls_ctx_t *ctx)
{
    ERR_clear_error();
    cq_tls_t *t = cq_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ssl = SSL_new(ctx->ssl_ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        cq_free(t);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio); /* ssl owns both BIOs from here */
    SSL_set_accept_state(t->ssl);
    return t;
}

void cq_tls_free(cq_tls_t *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    cq_free(t);
}

/* Records a fatal error for SSL result r: CQ_ETLS with the reason, or 0 for WANT_READ. */
static int ssl_fail(cq_tls_t *t, int r)
{
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return 0;
    t->dead = true;
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        SSL_shutdown(t->ssl); /* answer close_notify with ours */
        t->shut = true;
        ERR_clear_error();
        return CQ_ECLOSED;
    }
    if (ERR_peek_error())
        ssl_reason(t->err, sizeof(t->err), "TLS");
    else
        snprintf(t->err, sizeof(t->err), "TLS: SSL_get_error %d", e);
    return CQ_ETLS;
}

static int feed(cq_tls_t *t, const uint8_t *cipher, size_t len)
{
    while (len > 0) {
        int n = len > INT_MAX ? INT_MAX : (int)len;
        int w = BIO_write(t->rbio, cipher, n);
        if (w <= 0) {
            t->dead = true;
            ERR_clear_error();
            return -ENOMEM;
        }
        cipher += w;
        len -= (size_t)w;
    }
    return 0;
}

static int read_plain(cq_tls_t *t, cq_tls_plain_fn plain, void *ud)
{
    uint8_t buf[TLS_CHUNK];
    for (;;) {
        int n = SSL_read(t->ssl, buf, sizeof(buf));
        if (n <= 0)
            return ssl_fail(t, n);
        int r = plain(ud, buf, (size_t)n);
        if (r < 0) {
            /* The layer above rejected what it read (a bad WebSocket frame, say) and has
             * queued its last words (a Close frame). TLS itself is healthy: keep encrypting
             * until the caller shuts down, or the peer never sees why it was dropped. */
            t->in_done = true;
            return r;
        }
    }
}

int cq_tls_input(cq_tls_t *t, const uint8_t *cipher, size_t len, cq_tls_plain_fn plain, void *ud)
{
    if (t->dead || t->in_done)
        return CQ_ECLOSED;
    ERR_clear_error();
    int r = feed(t, cipher, len);
    if (r < 0)
        return r;
    if (!SSL_is_init_finished(t->ssl)) {
        int h = SSL_do_handshake(t->ssl);
        if (h <= 0)
            return ssl_fail(t, h);
    }
    return read_plain(t, plain, ud);
}

int cq_tls_write(cq_tls_t *t, const uint8_t *plain, size_t len)
{
    if (t->dead || t->shut)
        return CQ_ECLOSED;
    if (!SSL_is_init_finished(t->ssl))
        return -EAGAIN;
    ERR_clear_error();
    while (len > 0) {
        int n = len > (1u << 30) ? (1 << 30) : (int)len;
        int w = SSL_write(t->ssl, plain, n);
        if (w <= 0) {
            int r = ssl_fail(t, w);
            return r ? r : CQ_ETLS; /* WANT_READ cannot happen on a finished handshake */
        }
        plain += w;
        len -= (size_t)w;
    }
    return 0;
}

int cq_tls_shutdown(cq_tls_t *t)
{
    if (t->shut || !SSL_is_init_finished(t->ssl)) {
        t->shut = true;
        return 0;
    }
    ERR_clear_error();
    t->shut = true;
    if (SSL_shutdown(t->ssl) < 0) {
        ssl_reason(t->err, sizeof(t->err), "TLS shutdown");
        return CQ_ETLS;
    }
    return 0;
}

int cq_tls_out(cq_tls_t *t, cq_tls_out_fn out, void *ud)
{
    uint8_t buf[TLS_CHUNK];
    int err = 0;
    for (;;) {
        int n = BIO_read(t->wbio, buf, sizeof(buf));
        if (n <= 0)
            break;
        if (err == 0)
            err = out(ud, buf, (size_t)n);
    }
    return err < 0 ? err : 0;
}

size_t cq_tls_out_pending(const cq_tls_t *t)
{
    return BIO_ctrl_pending(t->wbio);
}

bool cq_tls_ready(const cq_tls_t *t)
{
    return SSL_is_init_finished(t->ssl);
}

const char *cq_tls_error(const cq_tls_t *t)
{
    return t->err;
}

const char *cq_tls_version(const cq_tls_t *t)
{
    return SSL_is_init_finished(t->ssl) ? SSL_get_version(t->ssl) : "";
}
