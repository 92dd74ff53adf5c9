/* mq_int.h - internals shared by the files of the seed protocol codec (src/mq).
 *
 * The codec is split by job: frame.c (the 12-byte header), schema.c (the table of fields per
 * message type, names and text checks), msg.c (the message model and its builders), decode.c
 * and decode_direct.c (JSON body -> message: jansson, and the one-pass reader for the usual
 * shapes), mgr_decode.c and mgr_encode.c (the management port's bodies), scalar.c (what both
 * JSON decoders read the same way: the body object and its scalars), encode.c and encode_direct.c
 * (message -> frame: jansson, and the direct writer), resp.c (response skeletons and error
 * answers), errcode.c (wire err_code values). Everything here is pure and keeps no state between
 * calls.
 */
#ifndef CQ_MQ_INT_H
#define CQ_MQ_INT_H

#include "cq_buf.h"
#include "cq_mq.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the schema (schema.c) --------------------------------------------------------------- */

typedef enum {
    K_U32,
    K_U53,
    K_STR,
    K_TOPIC,
    K_CONTENT,
    K_BATCH,
    K_MSGS,
    K_COUNT,
    K_OFFS,
    K_BOOL,
    K_TOPICS
} kind_t;

typedef struct field_desc {
    const char *name;
    kind_t kind;
    size_t off;       /* of the value in cq_mq_msg_t (scalars and strings) */
    int64_t min, max; /* integers: range; strings: max bytes */
} field_desc_t;

#define U32_MAX_ ((int64_t)UINT32_MAX)
#define U53_MAX_ CQ_MQ_MAX_U53

/* Indexed by bit number of cq_mq_field_t; encode writes fields in this order. */
#define CQ__MQ_NFIELDS 29
extern const field_desc_t cq__mq_fields[CQ__MQ_NFIELDS];

typedef struct type_desc {
    const char *name;
    uint32_t req, opt;
} type_desc_t;

/* The row of a message type, or NULL when the type is unknown. */
const type_desc_t *cq__mq_type_of(int type);
/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF) without NUL. */
bool cq__mq_utf8_valid(const char *s, size_t len);
/* True when an encoder writes field bit of m (message_count follows the messages array). */
bool cq__mq_field_wanted(const type_desc_t *t, uint32_t bit, const cq_mq_msg_t *m);
/* What both encoders refuse to write: a message of type t without its required fields, or a
 * produce whose fields do not go together. 0 or CQ_EFIELD. */
int cq__mq_encode_check(const cq_mq_msg_t *m, const type_desc_t *t);

/* ---- the message model (msg.c) ------------------------------------------------------------ */

/* Sets token or err_msg to a copy of s[0..len). CQ_EFIELD or -ENOMEM. */
int cq__mq_set_strn(cq_mq_msg_t *m, cq_mq_field_t which, const char *s, size_t len);
/* Appends an item taking ownership of content (freed on failure). 0 or -ENOMEM. */
int cq__mq_push_item(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content, size_t len,
                     bool json);
/* True when a failed jansson parse was (probably) out of memory, see msg.c. */
bool cq__mq_jansson_oom(const json_error_t *e);
/* json_loadb with duplicate keys refused, retried once so that memory failures are told apart
 * from syntax errors. Returns a new reference or NULL. */
json_t *cq__mq_load_json(const char *text, size_t len, json_error_t *jerr);

/* ---- reading JSON bodies (scalar.c), for decode.c and mgr_decode.c ------------------------
 * Each reader returns 0 and writes *out (or buf), or returns a negative code with the error
 * text in c->err; out is left alone on failure. v may be any value, NULL included (the type
 * check fails). name is the field's name as the error shows it ("messages[2].time"). */

/* Where a decoder's errors go: "<tname>: field \"<name>\": <what>" into err[errlen] (err NULL
 * or errlen 0: no text). */
typedef struct mq_fctx {
    const char *tname; /* the message type's name */
    char *err;
    size_t errlen;
} mq_fctx_t;

/* Writes the field error for name (what: fmt and its arguments) and returns code. */
__attribute__((format(printf, 4, 5))) int cq__mq_field_err(const mq_fctx_t *c, int code,
                                                           const char *field, const char *fmt, ...);
/* f's body as one JSON object (returned owned in *ret), refused before jansson sees it when it
 * nests deeper than max_depth. 0, CQ_EJSON (too deep, invalid, not an object) or -ENOMEM,
 * each with its text ("<tname>: ..."). */
int cq__mq_load_object(const mq_fctx_t *c, const cq_mq_frame_t *f, uint32_t max_depth,
                       json_t **ret);
/* obj[key] (borrowed), or NULL with *rc set to the "missing" error for name. */
json_t *cq__mq_required(const mq_fctx_t *c, json_t *obj, const char *key, const char *name,
                        int *rc);
/* 0 when v is an object, else CQ_EFIELD "must be an object". */
int cq__mq_need_object(const mq_fctx_t *c, const char *name, json_t *v);
/* An integer in [min, max]. CQ_EFIELD "must be an integer in [min, max]". */
int cq__mq_get_int(const mq_fctx_t *c, const char *name, json_t *v, int64_t min, int64_t max,
                   int64_t *out);
/* An integer in [0, UINT32_MAX]. */
int cq__mq_get_u32(const mq_fctx_t *c, const char *name, json_t *v, uint32_t *out);
/* true or false. CQ_EFIELD "must be true or false". */
int cq__mq_get_bool(const mq_fctx_t *c, const char *name, json_t *v, bool *out);
/* A string of at most max bytes, copied (cq_malloc'd, NUL-terminated) into *out. text: it must
 * also be valid UTF-8 without NUL (cq__mq_utf8_valid). CQ_EFIELD "must be a string of at most
 * max bytes", or -ENOMEM. */
int cq__mq_get_strdup(const mq_fctx_t *c, const char *name, json_t *v, size_t max, bool text,
                      char **out);
/* The same with text, copied into buf (max + 1 bytes). */
int cq__mq_get_strbuf(const mq_fctx_t *c, const char *name, json_t *v, size_t max, char *buf);
/* A topic name (cq_mq_topic_valid), copied into buf. CQ_EBADTOPIC "must be a string matching
 * [A-Za-z0-9_]{1,64}". */
int cq__mq_get_topic(const mq_fctx_t *c, const char *name, json_t *v,
                     char buf[CQ_MQ_TOPIC_MAX + 1]);

/* ---- decode (decode.c, decode_direct.c) --------------------------------------------------- */

typedef struct dctx {
    const cq_mq_limits_t *lim;
    mq_fctx_t f; /* the type's name and the caller's error buffer */
} dctx_t;

/* Nesting depth of [ and { outside strings, so a deep body is refused before jansson sees it. */
bool cq__mq_depth_ok(const uint8_t *p, size_t n, uint32_t max_depth);
/* Rules that span fields. 0 or CQ_EFIELD (with the message in c->err). */
int cq__mq_check_message(const dctx_t *c, const cq_mq_msg_t *m);
/* Decodes f on the direct path; NULL when it cannot (the jansson path then decides). */
cq_mq_msg_t *cq__mq_decode_direct(const cq_mq_frame_t *f, const type_desc_t *t, const dctx_t *c);

/* ---- encode (encode.c, encode_direct.c) --------------------------------------------------- */

/* Where an encoder writes a frame: a cq_malloc'd array (cq_mq_encode) or a refcounted cq_buf
 * (cq_mq_encode_buf), so that either gets the bytes with no copy. */
typedef struct mq_out {
    uint8_t *p; /* the frame: header, then body */
    size_t len, cap;
    cq_buf_t *buf; /* non-NULL: p is buf->data */
} mq_out_t;

/* Starts o with cap bytes, in a cq_buf when shared. 0, CQ_EBADLEN (over 4 GiB) or -ENOMEM. */
int cq__mq_out_init(mq_out_t *o, size_t cap, bool shared);
/* Makes room for need more bytes (the contents move when they must). 0, CQ_EBADLEN or -ENOMEM
 * (o is then released). */
int cq__mq_out_grow(mq_out_t *o, size_t need);
/* Releases what o holds (on failure). */
void cq__mq_out_done(mq_out_t *o);
/* Appends o's frame (unshared) to out and releases o; rc is the encoder's result, passed on
 * when not 0. CQ_EBADLEN when the frame is over max bytes, -ENOMEM. */
int cq__mq_out_append(int rc, mq_out_t *o, size_t max, struct cq_sbuf *out);
/* Writes the header over o's first CQ_MQ_HDR_LEN bytes once the body is complete. */
int cq__mq_out_finish(mq_out_t *o, const cq_mq_msg_t *m);

/* True when the direct writer can encode m: no JSON-object content, no topic list. */
bool cq__mq_encode_direct_fits(const cq_mq_msg_t *m, const type_desc_t *t);
/* Encodes m into o (initialised here) with the direct writer. */
int cq__mq_encode_direct(const cq_mq_msg_t *m, const type_desc_t *t, mq_out_t *o, bool shared);
/* Encodes m into o (initialised here) through jansson. */
int cq__mq_encode_jansson_out(const cq_mq_msg_t *m, mq_out_t *o, bool shared);

#endif
