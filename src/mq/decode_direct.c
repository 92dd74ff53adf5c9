/* decode_direct.c - the one-pass JSON reader for the frames chanq's own encoder writes. Why it
 * exists and when it gives up: the comment below. */
#include "mq_int.h"

#include "cq_alloc.h"

#include <string.h>

/* ---- decode: the direct reader -----------------------------------------------------------
 * Well-formed frames of the shapes chanq's own encoder writes (string contents, the fields of
 * the type, no unknown keys, no duplicate keys, no JSON-object content, no topic list) are
 * decoded in one pass without building a jansson tree: a produce of 1000 messages and a consume
 * answer of 1000 messages spent most of their CPU there. Anything else, and every error, makes
 * the reader give up (NULL) and the jansson path decode the frame from the start, so errors and
 * their messages come from one place. For an input both accept, both give the same message
 * (tests/unit/mq and the fuzz target compare them). */

typedef struct jr {
    const char *p, *end;
    const cq_mq_limits_t *lim;
} jr_t;

static void jr_ws(jr_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool jr_ch(jr_t *r, char c)
{
    jr_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static bool jr_lit(jr_t *r, const char *lit)
{
    size_t n = strlen(lit);
    jr_ws(r);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, lit, n) != 0)
        return false;
    r->p += n;
    return true;
}

static int jr_hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends code point cp (not a surrogate, not 0) as UTF-8 at out; returns its length. */
static size_t jr_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape at *pp (after the backslash) into out; returns the bytes written, 0 on anything
 * jansson would refuse (\u0000, a lone surrogate, an unknown escape). */
static size_t jr_escape(const char **pp, const char *end, char *out)
{
    const char *p = *pp;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = p < end ? strchr(from, *p) : NULL;
    if (k && *p) {
        *out = to[k - from];
        *pp = p + 1;
        return 1;
    }
    if (p >= end || *p != 'u' || end - p < 5)
        return 0;
    int cp = jr_hex4(p + 1);
    p += 5;
    if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
        return 0;
    unsigned full = (unsigned)cp;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        int lo = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? jr_hex4(p + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return 0;
        full = 0x10000 + (((unsigned)cp - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
        p += 6;
    }
    *pp = p;
    return jr_utf8(out, full);
}

/* A string: returned owned (NUL-terminated) in *ret_s with its length, or false. */
static bool jr_str(jr_t *r, char **ret_s, size_t *ret_len)
{
    if (!jr_ch(r, '"'))
        return false;
    const char *s = r->p, *q = s;
    bool esc = false;
    while (q < r->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return false;
        if (*q == '\\') {
            esc = true;
            q++;
        }
        q++;
    }
    if (q >= r->end)
        return false;
    size_t raw = (size_t)(q - s), n = 0;
    char *out = cq_malloc(raw + 1);
    if (!out)
        return false;
    for (const char *p = s; p < q;) {
        if (!esc || *p != '\\') {
            out[n++] = *p++;
            continue;
        }
        p++;
        size_t k = jr_escape(&p, q, out + n);
        if (k == 0) {
            cq_free(out);
            return false;
        }
        n += k;
    }
    out[n] = '\0';
    if (!cq__mq_utf8_valid(out, n)) {
        cq_free(out);
        return false;
    }
    r->p = q + 1;
    *ret_s = out;
    *ret_len = n;
    return true;
}

/* A key: plain bytes up to the quote (no escape, no control byte), into key[0..cap). */
static bool jr_key(jr_t *r, char *key, size_t cap)
{
    if (!jr_ch(r, '"'))
        return false;
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\\' || (unsigned char)*r->p < 0x20 || n + 1 >= cap)
            return false;
        key[n++] = *r->p++;
    }
    if (r->p >= r->end)
        return false;
    r->p++;
    key[n] = '\0';
    return jr_ch(r, ':');
}

/* An integer in [min, max] (JSON integer syntax: no leading zero, fraction or exponent). */
static bool jr_int(jr_t *r, int64_t min, int64_t max, int64_t *ret)
{
    jr_ws(r);
    const char *p = r->p;
    bool neg = p < r->end && *p == '-';
    p += neg;
    if (p >= r->end || *p < '0' || *p > '9' ||
        (*p == '0' && p + 1 < r->end && p[1] >= '0' && p[1] <= '9'))
        return false;
    uint64_t v = 0;
    for (; p < r->end && *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p < r->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return false;
    if (v > (uint64_t)INT64_MAX)
        return false;
    int64_t x = neg ? -(int64_t)v : (int64_t)v;
    if (x < min || x > max)
        return false;
    r->p = p;
    *ret = x;
    return true;
}

/* {content|message, time?, offset_id (answers)} of a messages array. */
static bool jr_item(jr_t *r, cq_mq_msg_t *m, bool answer)
{
    char key[16];
    char *content = NULL;
    size_t len = 0;
    int64_t offset = 0, time = -1, pid = 0, seq = 0;
    bool has_off = false, has_time = false, has_pid = false, has_seq = false;
    if (!jr_ch(r, '{'))
        return false;
    for (bool first = true; !jr_ch(r, '}'); first = false) {
        if ((!first && !jr_ch(r, ',')) || !jr_key(r, key, sizeof(key)))
            goto fail;
        if (strcmp(key, answer ? "message" : "content") == 0 && !content) {
            if (!jr_str(r, &content, &len) || len > r->lim->max_content)
                goto fail;
        } else if (strcmp(key, "time") == 0 && !has_time) {
            has_time = jr_int(r, 0, U53_MAX_, &time);
            if (!has_time)
                goto fail;
        } else if (answer && strcmp(key, "offset_id") == 0 && !has_off) {
            has_off = jr_int(r, 0, U53_MAX_, &offset);
            if (!has_off)
                goto fail;
        } else if (answer && strcmp(key, "producer_id") == 0 && !has_pid) {
            has_pid = jr_int(r, 1, U53_MAX_, &pid);
            if (!has_pid)
                goto fail;
        } else if (answer && strcmp(key, "seq") == 0 && !has_seq) {
            has_seq = jr_int(r, 0, U53_MAX_, &seq);
            if (!has_seq)
                goto fail;
        } else {
            goto fail;
        }
    }
    if (!content || (answer && !has_off) || has_pid != has_seq)
        goto fail; /* the jansson path names what is wrong */
    if (cq__mq_push_item(m, offset, time, content, len, false) < 0)
        return false;
    m->items[m->nitems - 1].producer_id = pid;
    m->items[m->nitems - 1].seq = seq;
    return true;
fail:
    cq_free(content);
    return false;
}

static bool jr_items(jr_t *r, cq_mq_msg_t *m, bool answer)
{
    if (!jr_ch(r, '['))
        return false;
    for (bool first = true; !jr_ch(r, ']'); first = false) {
        if ((!first && !jr_ch(r, ',')) || m->nitems >= r->lim->max_batch || !jr_item(r, m, answer))
            return false;
    }
    return answer || m->nitems > 0;
}

static bool jr_offsets(jr_t *r, cq_mq_msg_t *m)
{
    int64_t v;
    if (!jr_ch(r, '['))
        return false;
    for (bool first = true; !jr_ch(r, ']'); first = false) {
        if ((!first && !jr_ch(r, ',')) || m->noffsets >= r->lim->max_batch ||
            !jr_int(r, 0, U53_MAX_, &v) || cq_mq_msg_add_offset(m, v) < 0)
            return false;
    }
    return true;
}

static bool jr_value(jr_t *r, const field_desc_t *fd, cq_mq_msg_t *m, int64_t *count)
{
    char *base = (char *)m + fd->off, *s = NULL;
    size_t len = 0;
    int64_t x;
    switch (fd->kind) {
    case K_U32:
        if (!jr_int(r, fd->min, fd->max, &x))
            return false;
        *(uint32_t *)(void *)base = (uint32_t)x;
        return true;
    case K_U53:
        return jr_int(r, fd->min, fd->max, (int64_t *)(void *)base);
    case K_COUNT:
        return jr_int(r, 0, fd->max, count);
    case K_BOOL:
        if (jr_lit(r, "true"))
            return *(bool *)(void *)base = true;
        return jr_lit(r, "false");
    case K_STR:
        if (!jr_str(r, &s, &len) || len > (size_t)fd->max) {
            cq_free(s);
            return false;
        }
        *(char **)(void *)base = s;
        return true;
    case K_TOPIC: {
        bool ok = jr_str(r, &s, &len) && cq_mq_topic_valid(s, len);
        if (ok)
            memcpy(m->topic, s, len + 1);
        cq_free(s);
        return ok;
    }
    case K_CONTENT:
        if (!jr_str(r, &s, &len) || len > r->lim->max_content) {
            cq_free(s);
            return false;
        }
        return cq__mq_push_item(m, 0, -1, s, len, false) == 0;
    case K_BATCH:
    case K_MSGS:
        return jr_items(r, m, fd->kind == K_MSGS);
    case K_OFFS:
        return jr_offsets(r, m);
    default: /* K_TOPICS: the jansson path */
        return false;
    }
}

/* The field of type t called key, or -1. */
static int jr_field(const type_desc_t *t, const char *key)
{
    for (size_t i = 0; i < CQ__MQ_NFIELDS; i++) {
        if (((t->req | t->opt) & (1u << i)) && strcmp(cq__mq_fields[i].name, key) == 0)
            return (int)i;
    }
    return -1;
}

cq_mq_msg_t *cq__mq_decode_direct(const cq_mq_frame_t *f, const type_desc_t *t, const dctx_t *c)
{
    jr_t r = {(const char *)f->body, (const char *)f->body + f->body_len, c->lim};
    cq_mq_msg_t *m = cq_mq_msg_new(f->type, f->msg_id);
    int64_t count = -1;
    char key[32];
    if (!m || !jr_ch(&r, '{'))
        goto fail;
    for (bool first = true; !jr_ch(&r, '}'); first = false) {
        if ((!first && !jr_ch(&r, ',')) || !jr_key(&r, key, sizeof(key)))
            goto fail;
        int i = jr_field(t, key);
        if (i < 0 || (m->has & (1u << i)) || !jr_value(&r, &cq__mq_fields[i], m, &count))
            goto fail; /* unknown or repeated key, or a value this path does not take */
        m->has |= 1u << i;
    }
    jr_ws(&r);
    if (r.p != r.end || (t->req & m->has) != t->req ||
        ((m->has & CQ_MQ_F_MESSAGE_COUNT) && (size_t)count != m->nitems))
        goto fail;
    dctx_t quiet = {c->lim, {c->f.tname, NULL, 0}};
    if (cq__mq_check_message(&quiet, m) < 0)
        goto fail;
    return m;
fail:
    return cq_mq_msg_free(m);
}
