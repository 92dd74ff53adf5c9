/* tests/unit/transport/ws: TLS over memory BIOs (src/transport/ws/cq_tls).
 *
 * A self-signed certificate is generated with the OpenSSL API into a temp directory; an
 * OpenSSL client, also on memory BIOs and verifying that certificate, talks to cq_tls in the
 * same process. No sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_tls.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

static char g_dir[64], g_cert[128], g_key[128], g_key2[128];

/* ---- certificate ----------------------------------------------------------------------- */

static EVP_PKEY *write_key(const char *path)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    return k;
}

static void write_cert(const char *path, EVP_PKEY *k)
{
    X509 *x = X509_new();
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                               0);
    X509_set_issuer_name(x, n);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext =
        X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
    assert_non_null(ext);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, x), 1);
    fclose(f);
    X509_free(x);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof(g_dir), "/tmp/cq-tls-XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_cert, sizeof(g_cert), "%s/cert.pem", g_dir);
    snprintf(g_key, sizeof(g_key), "%s/key.pem", g_dir);
    snprintf(g_key2, sizeof(g_key2), "%s/other.pem", g_dir);
    EVP_PKEY *k = write_key(g_key);
    write_cert(g_cert, k);
    EVP_PKEY_free(k);
    EVP_PKEY_free(write_key(g_key2));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(g_cert);
    unlink(g_key);
    unlink(g_key2);
    rmdir(g_dir);
    return 0;
}

/* ---- a client on memory BIOs and the pump between the two ------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf_t;

static void buf_add(buf_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

typedef struct pair {
    SSL_CTX *cctx;
    SSL *c;
    BIO *crbio, *cwbio;
    cq_tls_ctx_t *sctx;
    cq_tls_t *s;
    buf_t s2c;      /* server ciphertext not yet given to the client */
    buf_t plain;    /* plaintext the server received */
    size_t chunk;   /* feed server ciphertext in pieces of this size (0 = whole) */
    int plain_fail; /* error plain_cb returns, 0 = none */
} pair_t;

static int out_cb(void *ud, const uint8_t *cipher, size_t len)
{
    buf_add(&((pair_t *)ud)->s2c, cipher, len);
    return 0;
}

static int plain_cb(void *ud, const uint8_t *plain, size_t len)
{
    pair_t *p = ud;
    if (p->plain_fail)
        return p->plain_fail;
    buf_add(&p->plain, plain, len);
    return 0;
}

static pair_t *pair_new(int max_version)
{
    pair_t *p = calloc(1, sizeof(*p));
    char err[256] = "";
    p->sctx = cq_tls_ctx_new(g_cert, g_key, err, sizeof(err));
    if (!p->sctx)
        fail_msg("cq_tls_ctx_new: %s", err);
    p->s = cq_tls_new(p->sctx);
    assert_non_null(p->s);
    p->cctx = SSL_CTX_new(TLS_client_method());
    assert_int_equal(SSL_CTX_load_verify_locations(p->cctx, g_cert, NULL), 1);
    SSL_CTX_set_verify(p->cctx, SSL_VERIFY_PEER, NULL);
    if (max_version)
        SSL_CTX_set_max_proto_version(p->cctx, max_version);
    p->c = SSL_new(p->cctx);
    SSL_set1_host(p->c, "localhost");
    p->crbio = BIO_new(BIO_s_mem());
    p->cwbio = BIO_new(BIO_s_mem());
    SSL_set_bio(p->c, p->crbio, p->cwbio);
    SSL_set_connect_state(p->c);
    return p;
}

static void pair_free(pair_t *p)
{
    SSL_free(p->c);
    SSL_CTX_free(p->cctx);
    cq_tls_free(p->s);
    cq_tls_ctx_free(p->sctx);
    free(p->s2c.p);
    free(p->plain.p);
    free(p);
}

/* Moves client ciphertext into the server (in p->chunk pieces) and server output into the
 * client's read BIO. Returns the first non-zero cq_tls_input result. */
static int pump_c2s(pair_t *p)
{
    uint8_t tmp[4096];
    int n, r = 0;
    while ((n = BIO_read(p->cwbio, tmp, sizeof(tmp))) > 0) {
        size_t step = p->chunk ? p->chunk : (size_t)n;
        for (size_t off = 0; off < (size_t)n && r == 0; off += step) {
            size_t m = (size_t)n - off < step ? (size_t)n - off : step;
            r = cq_tls_input(p->s, tmp + off, m, plain_cb, p);
        }
        assert_int_equal(cq_tls_out(p->s, out_cb, p), 0);
        if (r)
            break;
    }
    assert_int_equal(cq_tls_out(p->s, out_cb, p), 0); /* output of cq_tls_write calls */
    assert_int_equal(cq_tls_out_pending(p->s), 0);
    if (p->s2c.len) {
        assert_int_equal(BIO_write(p->crbio, p->s2c.p, (int)p->s2c.len), (int)p->s2c.len);
        p->s2c.len = 0;
    }
    return r;
}

static void handshake(pair_t *p)
{
    for (int i = 0; i < 20 && !(SSL_is_init_finished(p->c) && cq_tls_ready(p->s)); i++) {
        int r = SSL_do_handshake(p->c);
        if (r <= 0)
            assert_int_equal(SSL_get_error(p->c, r), SSL_ERROR_WANT_READ);
        assert_int_equal(pump_c2s(p), 0);
    }
    assert_true(SSL_is_init_finished(p->c));
    assert_true(cq_tls_ready(p->s));
    assert_int_equal(SSL_get_verify_result(p->c), X509_V_OK);
}

/* Reads everything the client can decrypt into out. Returns SSL_get_error of the last read. */
static int client_read(pair_t *p, buf_t *out)
{
    uint8_t tmp[16384];
    for (;;) {
        int n = SSL_read(p->c, tmp, sizeof(tmp));
        if (n <= 0)
            return SSL_get_error(p->c, n);
        buf_add(out, tmp, (size_t)n);
    }
}

static uint8_t *pattern(size_t len, int seed)
{
    uint8_t *d = malloc(len);
    for (size_t i = 0; i < len; i++)
        d[i] = (uint8_t)((i * 7 + (size_t)seed) % 253);
    return d;
}

/* Both directions: a short message and 100 KB, checked byte for byte. */
static void exchange(pair_t *p)
{
    const char hello[] = "GET / HTTP/1.1\r\n\r\n";
    assert_int_equal(SSL_write(p->c, hello, (int)strlen(hello)), (int)strlen(hello));
    assert_int_equal(pump_c2s(p), 0);
    assert_int_equal(p->plain.len, strlen(hello));
    assert_memory_equal(p->plain.p, hello, strlen(hello));

    size_t big = 100000;
    uint8_t *up = pattern(big, 1), *down = pattern(big, 2);
    assert_int_equal(SSL_write(p->c, up, (int)big), (int)big);
    assert_int_equal(pump_c2s(p), 0);
    assert_int_equal(p->plain.len, strlen(hello) + big);
    assert_memory_equal(p->plain.p + strlen(hello), up, big);

    assert_int_equal(cq_tls_write(p->s, (const uint8_t *)"pong", 4), 0);
    assert_int_equal(cq_tls_write(p->s, down, big), 0);
    assert_true(cq_tls_out_pending(p->s) > big);
    assert_int_equal(pump_c2s(p), 0);
    buf_t got = {0};
    assert_int_equal(client_read(p, &got), SSL_ERROR_WANT_READ);
    assert_int_equal(got.len, 4 + big);
    assert_memory_equal(got.p, "pong", 4);
    assert_memory_equal(got.p + 4, down, big);
    free(got.p);
    free(up);
    free(down);
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_tls13_exchange(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    assert_string_equal(cq_tls_version(p->s), "");
    assert_int_equal(cq_tls_write(p->s, (const uint8_t *)"x", 1), -EAGAIN);
    handshake(p);
    assert_string_equal(cq_tls_version(p->s), "TLSv1.3");
    exchange(p);
    pair_free(p);
}

static void test_tls12_exchange(void **state)
{
    (void)state;
    pair_t *p = pair_new(TLS1_2_VERSION);
    handshake(p);
    assert_string_equal(cq_tls_version(p->s), "TLSv1.2");
    exchange(p);
    pair_free(p);
}

/* Server ciphertext input arriving one byte at a time. */
static void test_byte_by_byte(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    p->chunk = 1;
    handshake(p);
    exchange(p);
    pair_free(p);
}

static void test_client_close_notify(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    handshake(p);
    assert_int_equal(SSL_write(p->c, "bye", 3), 3);
    SSL_shutdown(p->c);
    assert_int_equal(pump_c2s(p), CQ_ECLOSED);
    assert_int_equal(p->plain.len, 3); /* data before close_notify is delivered */
    buf_t got = {0};
    assert_int_equal(client_read(p, &got), SSL_ERROR_ZERO_RETURN); /* our close_notify */
    free(got.p);
    assert_int_equal(cq_tls_input(p->s, (const uint8_t *)"x", 1, plain_cb, p), CQ_ECLOSED);
    assert_int_equal(cq_tls_write(p->s, (const uint8_t *)"x", 1), CQ_ECLOSED);
    pair_free(p);
}

static void test_server_shutdown(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    handshake(p);
    assert_int_equal(cq_tls_shutdown(p->s), 0);
    assert_int_equal(cq_tls_shutdown(p->s), 0);
    assert_int_equal(cq_tls_write(p->s, (const uint8_t *)"x", 1), CQ_ECLOSED);
    assert_int_equal(cq_tls_out(p->s, out_cb, p), 0);
    assert_int_equal(BIO_write(p->crbio, p->s2c.p, (int)p->s2c.len), (int)p->s2c.len);
    buf_t got = {0};
    assert_int_equal(client_read(p, &got), SSL_ERROR_ZERO_RETURN);
    free(got.p);
    pair_free(p);
}

static void test_garbage_is_fatal(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"; /* plain HTTP on a TLS port */
    assert_int_equal(cq_tls_input(p->s, (const uint8_t *)junk, strlen(junk), plain_cb, p), CQ_ETLS);
    assert_true(strlen(cq_tls_error(p->s)) > 0);
    assert_int_equal(cq_tls_out(p->s, out_cb, p), 0); /* maybe an alert; must not fail */
    assert_int_equal(cq_tls_input(p->s, (const uint8_t *)junk, 1, plain_cb, p), CQ_ECLOSED);
    assert_int_equal(p->plain.len, 0);
    pair_free(p);

    /* a corrupted record after the handshake */
    p = pair_new(0);
    handshake(p);
    assert_int_equal(SSL_write(p->c, "data", 4), 4);
    uint8_t rec[256];
    int n = BIO_read(p->cwbio, rec, sizeof(rec));
    assert_true(n > 10);
    rec[n - 1] ^= 0xff;
    assert_int_equal(cq_tls_input(p->s, rec, (size_t)n, plain_cb, p), CQ_ETLS);
    assert_non_null(strstr(cq_tls_error(p->s), "TLS"));
    assert_int_equal(p->plain.len, 0);
    pair_free(p);
}

static void test_plain_callback_error(void **state)
{
    (void)state;
    pair_t *p = pair_new(0);
    handshake(p);
    p->plain_fail = CQ_EWSPROTO;
    assert_int_equal(SSL_write(p->c, "data", 4), 4);
    assert_int_equal(pump_c2s(p), CQ_EWSPROTO);
    /* Input is over, but the session still encrypts the caller's last words (the WebSocket
     * Close frame of a failed connection), then its close_notify. */
    assert_int_equal(cq_tls_input(p->s, (const uint8_t *)"x", 1, plain_cb, p), CQ_ECLOSED);
    static const uint8_t close1002[] = {0x88, 0x02, 0x03, 0xea};
    assert_int_equal(cq_tls_write(p->s, close1002, sizeof(close1002)), 0);
    assert_int_equal(cq_tls_shutdown(p->s), 0);
    assert_int_equal(pump_c2s(p), 0);
    buf_t got = {0};
    assert_int_equal(client_read(p, &got), SSL_ERROR_ZERO_RETURN);
    assert_int_equal(got.len, sizeof(close1002));
    assert_memory_equal(got.p, close1002, sizeof(close1002));
    free(got.p);
    pair_free(p);
}

static void test_ctx_errors(void **state)
{
    (void)state;
    char err[256] = "";
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/missing.pem", g_dir);
    assert_null(cq_tls_ctx_new(missing, g_key, err, sizeof(err)));
    assert_non_null(strstr(err, "missing.pem"));
    err[0] = '\0';
    assert_null(cq_tls_ctx_new(g_cert, missing, err, sizeof(err)));
    assert_non_null(strstr(err, "missing.pem"));
    err[0] = '\0';
    assert_null(cq_tls_ctx_new(g_cert, g_key2, err, sizeof(err)));
    assert_true(strlen(err) > 0);
    err[0] = '\0';
    assert_null(cq_tls_ctx_new(g_key, g_key, err, sizeof(err))); /* a key is no certificate */
    assert_true(strlen(err) > 0);
    assert_null(cq_tls_ctx_new(missing, g_key, NULL, 0)); /* err is optional */
    cq_tls_ctx_free(NULL);
    cq_tls_free(NULL);
    /* sessions outlive the context handle */
    cq_tls_ctx_t *ctx = cq_tls_ctx_new(g_cert, g_key, err, sizeof(err));
    assert_non_null(ctx);
    cq_tls_t *t = cq_tls_new(ctx);
    cq_tls_ctx_free(ctx);
    assert_false(cq_tls_ready(t));
    cq_tls_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls13_exchange),       cmocka_unit_test(test_tls12_exchange),
        cmocka_unit_test(test_byte_by_byte),         cmocka_unit_test(test_client_close_notify),
        cmocka_unit_test(test_server_shutdown),      cmocka_unit_test(test_garbage_is_fatal),
        cmocka_unit_test(test_plain_callback_error), cmocka_unit_test(test_ctx_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
