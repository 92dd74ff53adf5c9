/* cq_mq.h - the durable-topic ("seed") protocol codec: pure, no I/O, no libuv.
 *
 * A frame is a 12-byte big-endian header followed by a JSON object (doc/protocol-mq.md pins
 * every byte and field):
 *
 *   0..3   u32 total length (header + body)     8      u8 serialization (0 = JSON)
 *   4..5   u16 header length (12)                9..10  u16 message id
 *   6      u8  version (1)                       11     u8  reserved (0)
 *   7      u8  message type
 *
 * cq_mq_parse() is three-way and allocates nothing; cq_mq_decode() turns a frame into a
 * validated, owned cq_mq_msg_t; cq_mq_encode() turns a message back into a frame. One table in
 * schema.c says which fields each message type has, so decode and encode cannot drift apart
 * (src/mq/mq_int.h lists the codec's files by job).
 *
 * JSON goes through jansson, which allocates with malloc unless json_set_alloc_funcs() was
 * called (the tests route it to cq_malloc). Every function may be called from any thread; none
 * keeps state between calls.
 */
#ifndef CQ_MQ_H
#define CQ_MQ_H

#include "cq_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CQ_MQ_HDR_LEN           12
#define CQ_MQ_VERSION           1
#define CQ_MQ_SER_JSON          0
#define CQ_MQ_MIN_TOTAL         (CQ_MQ_HDR_LEN + 2) /* the shortest body is "{}" */
#define CQ_MQ_DEFAULT_MAX_BODY  (1u << 20)
#define CQ_MQ_DEFAULT_MAX_TOTAL (CQ_MQ_HDR_LEN + CQ_MQ_DEFAULT_MAX_BODY)
#define CQ_MQ_TOPIC_MAX         64
#define CQ_MQ_TOKEN_MAX         256
#define CQ_MQ_ERR_MSG_MAX       512
#define CQ_MQ_INSTANCE_MAX      100 /* commit/offset: a consumer instance id, in bytes */
#define CQ_MQ_MAX_U53           ((((int64_t)1) << 53) - 1) /* JSON-safe integer */
#define CQ_MQ_TOPICS_MAX        10000                      /* entries of a topics_resp */

/* Message types. Odd: client to server; even: server to client. */
typedef enum cq_mq_type {
    CQ_MQ_REQ_CONNECT = 1,
    CQ_MQ_RESP_CONNECT = 2,
    CQ_MQ_REQ_KEEPALIVE = 3,
    CQ_MQ_RESP_KEEPALIVE = 4,
    CQ_MQ_REQ_ADD_TOPIC = 5,
    CQ_MQ_RESP_ADD_TOPIC = 6,
    CQ_MQ_REQ_WATCH = 7,
    CQ_MQ_RESP_WATCH = 8,
    CQ_MQ_REQ_UNWATCH = 9,
    CQ_MQ_RESP_UNWATCH = 10,
    CQ_MQ_REQ_PRODUCE = 11,
    CQ_MQ_RESP_PRODUCE = 12,
    CQ_MQ_REQ_CONSUME = 13,
    CQ_MQ_RESP_CONSUME = 14,
    CQ_MQ_REQ_COMMIT = 15,
    CQ_MQ_RESP_COMMIT = 16,
    CQ_MQ_PUSH = 18,       /* unsolicited: new messages on a watched topic */
    CQ_MQ_RESP_ERROR = 20, /* answer to a frame whose type is unknown */
    CQ_MQ_REQ_OFFSET = 21, /* a consumer's committed offset (not in the seed) */
    CQ_MQ_RESP_OFFSET = 22,
    CQ_MQ_REQ_TOPICS = 23, /* list the topics (not in the seed) */
    CQ_MQ_RESP_TOPICS = 24,
    CQ_MQ_TYPE_MAX = 24
} cq_mq_type_t;

/* client_type values (seed: 1 producer, 2 consumer). */
#define CQ_MQ_PRODUCER 1
#define CQ_MQ_CONSUMER 2

/* err_code values on the wire. Stable protocol numbers, not CQ_E* codes: see cq_mq_errcode(). */
typedef enum cq_mq_errcode {
    CQ_MQ_OK = 0,
    CQ_MQ_ERR_BAD_HEADER = 1,
    CQ_MQ_ERR_BAD_LENGTH = 2,
    CQ_MQ_ERR_BAD_JSON = 3,
    CQ_MQ_ERR_UNKNOWN_TYPE = 4,
    CQ_MQ_ERR_BAD_FIELD = 5,
    CQ_MQ_ERR_UNAUTHENTICATED = 6,
    CQ_MQ_ERR_NO_PERMISSION = 7,
    CQ_MQ_ERR_UNKNOWN_TOPIC = 8,
    CQ_MQ_ERR_TOPIC_OFFLINE = 9,
    CQ_MQ_ERR_CONTENT_TOO_LARGE = 10,
    CQ_MQ_ERR_BUSY = 11,
    CQ_MQ_ERR_STORAGE = 12,
    CQ_MQ_ERR_BAD_TOPIC_NAME = 13,
    CQ_MQ_ERR_INTERNAL = 14,
    CQ_MQ_ERR_SEQUENCE_CONFLICT = 15,
    CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER = 16,
    CQ_MQ_ERR_OFFSET_OUT_OF_RANGE = 17, /* commit beyond the topic's last offset */
    CQ_MQ_ERR_NOT_MASTER = 18,          /* a write to a server that is not its shard's master */
    CQ_MQ_ERR_SERVER_OFFLINE = 19,      /* the server was taken offline (mgr command 2) */
    CQ_MQ_ERR_READ_ON_MASTER = 20,      /* a read to a standby (--slave-reads off), master up */
    CQ_MQ_ERR_NO_MESSAGE = 21,          /* invalidate: no message stored at that offset */
    CQ_MQ_ERRCODE_MAX = 21
} cq_mq_errcode_t;

/* Field bits of cq_mq_msg_t.has, in the order encode writes them. */
typedef enum cq_mq_field {
    CQ_MQ_F_ASKID = 1u << 0,
    CQ_MQ_F_MODULE_ID = 1u << 1,
    CQ_MQ_F_TOKEN = 1u << 2,
    CQ_MQ_F_CLIENT_TYPE = 1u << 3,
    CQ_MQ_F_CLIENT_ID = 1u << 4,
    CQ_MQ_F_TOPIC = 1u << 5,
    CQ_MQ_F_ERR_CODE = 1u << 6,
    CQ_MQ_F_ERR_MSG = 1u << 7,
    CQ_MQ_F_WEIGHT = 1u << 8,
    CQ_MQ_F_TOPIC_NUMS = 1u << 9,
    CQ_MQ_F_TOPIC_MESSAGE_TOTAL = 1u << 10,
    CQ_MQ_F_TOTAL = 1u << 11,
    CQ_MQ_F_OFFSET = 1u << 12,
    CQ_MQ_F_MAX_COUNT = 1u << 13,
    CQ_MQ_F_TIME = 1u << 14,
    CQ_MQ_F_PRODUCER_ID = 1u << 15,
    CQ_MQ_F_SEQ = 1u << 16,
    CQ_MQ_F_CONTENT = 1u << 17,       /* produce: one message, items[0] */
    CQ_MQ_F_BATCH = 1u << 18,         /* produce: "messages" [{content, time?}], items[] */
    CQ_MQ_F_MESSAGES = 1u << 19,      /* consume/push: "messages" [{offset_id, message, time?}] */
    CQ_MQ_F_MESSAGE_COUNT = 1u << 20, /* derived: written as nitems with F_MESSAGES */
    CQ_MQ_F_OFFSETS = 1u << 21,       /* resp_produce: one offset per produced message */
    CQ_MQ_F_COMMITTED = 1u << 22,     /* resp_offset: JSON bool */
    CQ_MQ_F_LAST_OFFSET = 1u << 23,   /* resp_offset: the topic's last offset */
    CQ_MQ_F_TOPICS = 1u << 24,        /* resp_topics: [{topic, online, retention_days,
                                       * last_offset}], topic_infos[] */
    CQ_MQ_F_SHARD = 1u << 25,         /* the answering server's shard (cluster) */
    CQ_MQ_F_MASTER = 1u << 26,        /* JSON bool: the answering server may write now */
    CQ_MQ_F_EPOCH = 1u << 27,         /* the shard's history generation (cluster: role epoch) */
    CQ_MQ_F_INSTANCE = 1u << 28,      /* commit/offset: the consumer instance (its own offset) */
} cq_mq_field_t;

typedef struct cq_mq_limits {
    uint32_t max_total;   /* frame bytes incl. header; default CQ_MQ_DEFAULT_MAX_TOTAL */
    uint32_t max_content; /* bytes of one message's content; default 64 KiB */
    uint32_t max_batch;   /* messages in one produce batch / consume answer; default 1000 */
    uint32_t max_depth;   /* JSON nesting, the top-level object is 1; default 32 */
} cq_mq_limits_t;

#define CQ_MQ_DEFAULT_MAX_CONTENT (64u * 1024u)
#define CQ_MQ_DEFAULT_MAX_BATCH   1000u
#define CQ_MQ_DEFAULT_MAX_DEPTH   32u

/* A parsed frame: a slice into the caller's buffer, valid while that buffer is. */
typedef struct cq_mq_frame {
    const uint8_t *body; /* body_len bytes of JSON */
    uint32_t body_len;
    uint16_t msg_id;
    uint8_t type; /* as received; decode checks it */
} cq_mq_frame_t;

/* One message of a produce batch or of a consume/push answer. */
typedef struct cq_mq_item {
    int64_t offset; /* offset_id (consume/push); 0 in produce */
    int64_t time;   /* ms, -1 when absent */
    char *content;  /* owned, NUL-terminated, len bytes, valid UTF-8 without NUL */
    size_t len;
    bool json; /* content is compact JSON text of an object (else a JSON string) */
    /* consume/push: the message's idempotence key, written after "time" when producer_id is
     * not 0 (a consumer of several shards drops duplicates by it); 0 and 0 when absent. */
    int64_t producer_id, seq;
} cq_mq_item_t;

/* One entry of a topics_resp. */
typedef struct cq_mq_topic_info {
    char topic[CQ_MQ_TOPIC_MAX + 1];
    bool online;
    uint32_t retention_days; /* 0 = kept forever */
    int64_t last_offset;
} cq_mq_topic_info_t;

/* A decoded or to-be-encoded message. Plain data: set a field and its CQ_MQ_F_* bit in has.
 * Pointers are owned by the message and released by cq_mq_msg_free(). */
typedef struct cq_mq_msg {
    uint8_t type; /* cq_mq_type_t */
    uint16_t msg_id;
    uint32_t has; /* CQ_MQ_F_* bits present */
    uint32_t askid, module_id, client_type, err_code, weight, topic_nums, max_count, shard;
    int64_t client_id, topic_message_total, total, offset, time, producer_id, seq, last_offset;
    bool committed, master;
    int64_t epoch;
    char topic[CQ_MQ_TOPIC_MAX + 1];
    char *token;         /* owned */
    char *err_msg;       /* owned */
    char *instance;      /* owned */
    cq_mq_item_t *items; /* owned array of nitems */
    size_t nitems, items_cap;
    int64_t *offsets; /* owned array of noffsets */
    size_t noffsets, offsets_cap;
    cq_mq_topic_info_t *topic_infos; /* owned array of ntopic_infos */
    size_t ntopic_infos, topic_infos_cap;
} cq_mq_msg_t;

/* ---- frames --------------------------------------------------------------------------- */

/* Parses one frame at p[0..n), checking each header field as soon as its bytes are there and
 * before anything is allocated. max_total: 0 for CQ_MQ_DEFAULT_MAX_TOTAL (values below
 * CQ_MQ_MIN_TOTAL are raised to it). Returns the bytes consumed (the frame's total length) and
 * fills *ret; 0 if more bytes are needed; CQ_EBADLEN (total < 14 or > max_total) or
 * CQ_EHEADER (header length != 12, version != 1, serialization != 0, reserved != 0). The type
 * is not checked here (cq_mq_decode answers an unknown type). *ret is written only on success. */
ssize_t cq_mq_parse(const uint8_t *p, size_t n, uint32_t max_total, cq_mq_frame_t *ret);

/* A connection's input: appends p[0..n) (borrowed) to in, then hands each whole frame in it to
 * fn, in order, until fn returns < 0 or the bytes run out; the frames handed are consumed from
 * in (a partial one stays). Returns 0, fn's code, cq_mq_parse's error, or -ENOMEM. The client
 * sides of both ports use it (the manager link, the follower of other shards). */
typedef int (*cq_mq_frame_fn)(void *ud, const cq_mq_frame_t *f);
struct cq_sbuf; /* cq_sbuf.h: not included here, as libchanq installs this header without it */
int cq_mq_feed(struct cq_sbuf *in, const uint8_t *p, size_t n, uint32_t max_total,
               cq_mq_frame_fn fn, void *ud);

/* Writes a 12-byte header for a frame of total_len bytes (header included). */
void cq_mq_header_write(uint8_t out[CQ_MQ_HDR_LEN], uint32_t total_len, uint8_t type,
                        uint16_t msg_id);

/* ---- messages ------------------------------------------------------------------------- */

/* Validates and decodes f's JSON body. lim: borrowed, NULL for defaults. On success *ret is a
 * returned-owned message (free with cq_mq_msg_free). On error returns CQ_ENOTYPE, CQ_EJSON
 * (invalid, duplicate keys, not an object, nested deeper than max_depth), CQ_EFIELD (missing,
 * wrong JSON type, out of range), CQ_EBADTOPIC, CQ_ECONTENT or -ENOMEM, and writes a message
 * naming the field into err (if err and errlen), e.g.
 *   produce: field "topic": must be a string matching [A-Za-z0-9_]{1,64}
 * Unknown JSON fields are ignored. Both requests and responses decode. */
int cq_mq_decode(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, cq_mq_msg_t **ret, char *err,
                 size_t errlen);

/* Encodes m as a complete frame (header + compact JSON). On success *ret is returned-owned
 * (cq_free) and *ret_len its length. Returns CQ_ENOTYPE, CQ_EFIELD (a required field is not
 * set, or a value is out of range), CQ_EBADTOPIC, CQ_EBADLEN (over 4 GiB) or -ENOMEM.
 * Deterministic: equal messages give equal bytes. */
int cq_mq_encode(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len);
/* The same frame, encoded straight into a refcounted buffer: *ret is returned owned (one
 * reference, len set), for a server to queue by reference on one or many connections. */
int cq_mq_encode_buf(const cq_mq_msg_t *m, cq_buf_t **ret);
/* The same frame, appended to out (a connection's pending output). Errors as cq_mq_encode();
 * out is unchanged on failure. */
int cq_mq_encode_to(const cq_mq_msg_t *m, struct cq_sbuf *out);

/* Returns an owned, empty message of the given type, or NULL on OOM. */
cq_mq_msg_t *cq_mq_msg_new(uint8_t type, uint16_t msg_id);
/* Frees m and everything it owns. Accepts NULL; returns NULL. */
cq_mq_msg_t *cq_mq_msg_free(cq_mq_msg_t *m);

/* Sets the topic (copied). Returns CQ_EBADTOPIC unless it matches [A-Za-z0-9_]{1,64}. */
int cq_mq_msg_set_topic(cq_mq_msg_t *m, const char *topic);
/* Sets token, err_msg or instance (which: CQ_MQ_F_TOKEN, CQ_MQ_F_ERR_MSG, CQ_MQ_F_INSTANCE) to a
 * copy of s. Returns CQ_EFIELD if s is not UTF-8 without NUL or too long (256 / 512 / 100
 * bytes), -ENOMEM. */
int cq_mq_msg_set_str(cq_mq_msg_t *m, cq_mq_field_t which, const char *s);
/* Appends an item with a copy of content[0..len). json: content is the text of a JSON object
 * (checked) rather than a string. Sets no has bit (the caller picks CONTENT, BATCH or MESSAGES).
 * Returns CQ_EFIELD (not UTF-8 / not an object), -ENOMEM. */
int cq_mq_msg_add_item(cq_mq_msg_t *m, int64_t offset, int64_t time, const char *content,
                       size_t len, bool json);
/* The same for a string content that is taken: content (cq_malloc'd, len bytes followed by a
 * '\0') becomes the item's, also on failure (then it is freed). Returns CQ_EFIELD (NULL, not
 * NUL-terminated at len, not UTF-8 without NUL) or -ENOMEM. */
int cq_mq_msg_add_item_take(cq_mq_msg_t *m, int64_t offset, int64_t time, char *content,
                            size_t len);
/* Appends an offset (resp_produce) and sets CQ_MQ_F_OFFSETS. Returns -ENOMEM. */
int cq_mq_msg_add_offset(cq_mq_msg_t *m, int64_t offset);
/* Appends a topic entry (resp_topics) and sets CQ_MQ_F_TOPICS. Returns CQ_EBADTOPIC, CQ_ELIMIT
 * (over CQ_MQ_TOPICS_MAX entries) or -ENOMEM. */
int cq_mq_msg_add_topic_info(cq_mq_msg_t *m, const char *topic, bool online,
                             uint32_t retention_days, int64_t last_offset);

/* Tests: cq_mq_decode() through jansson only (cq_mq_decode() reads well-formed frames of the
 * usual shapes directly; both give the same message, or the same error). */
int cq__mq_decode_jansson(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, cq_mq_msg_t **ret,
                          char *err, size_t errlen);
/* Tests: cq_mq_encode() through jansson only (cq_mq_encode() writes most messages directly;
 * both give the same bytes). */
int cq__mq_encode_jansson(const cq_mq_msg_t *m, uint8_t **ret, size_t *ret_len);

/* Starts the response to req: type req->type + 1, the same msg_id, askid and (where the
 * response type has them) topic and client_id echoed, err_code = cq_mq_errcode(err) and, if
 * err_msg is not NULL, err_msg (truncated to 512 bytes). req: borrowed, must be a request.
 * Returns an owned message, or NULL on OOM or if req is not a request. */
cq_mq_msg_t *cq_mq_resp_new(const cq_mq_msg_t *req, int err, const char *err_msg);

/* Encodes the answer to a frame that did not decode: the response type of f->type (or
 * CQ_MQ_RESP_ERROR if f->type is not a request type), f's msg_id, askid echoed if the body is
 * a JSON object with a valid askid, err_code = cq_mq_errcode(err), and err_msg. f and
 * err_msg: borrowed. Output and errors as cq_mq_encode(). */
int cq_mq_encode_error(const cq_mq_frame_t *f, int err, const char *err_msg, uint8_t **ret,
                       size_t *ret_len);
/* The same answer in a refcounted buffer (see cq_mq_encode_buf). */
int cq_mq_encode_error_buf(const cq_mq_frame_t *f, int err, const char *err_msg, cq_buf_t **ret);

/* ---- sizes ---------------------------------------------------------------------------- */

/* Bytes of s[0..len) (valid UTF-8) as a JSON string, quotes included, with the escapes both
 * encoders (and jansson) write. Pure. */
size_t cq_mq_json_str_len(const char *s, size_t len);
/* Bytes one item takes in the "messages" array of a consume answer or push as the encoders
 * write it ({"offset_id":N,"message":"...","time":T}; no time when time is -1), without the
 * comma that separates items. */
size_t cq_mq_answer_item_len(int64_t offset, int64_t time, const char *content, size_t len);
/* The bytes an item's idempotence key adds to cq_mq_answer_item_len() (0 when producer_id is
 * 0): ,"producer_id":P,"seq":S. */
size_t cq_mq_answer_key_len(int64_t producer_id, int64_t seq);
/* An upper bound of a consume answer's bytes besides its items: the header, askid, topic,
 * client_id, err_code, total, offset, message_count and the brackets (no err_msg). A server
 * keeps an answer within max_total by adding items while their lengths (plus one comma each
 * after the first) stay within max_total - CQ_MQ_ANSWER_HEAD_MAX. */
#define CQ_MQ_ANSWER_HEAD_MAX 512

/* ---- names and codes ------------------------------------------------------------------ */

/* The wire err_code for a chanq error code (0 -> CQ_MQ_OK; unmapped -> CQ_MQ_ERR_INTERNAL). */
int cq_mq_errcode(int err);
/* "bad_topic_name" etc.; never NULL. */
const char *cq_mq_errcode_name(int code);
/* The other way: the internal code of a wire err_code (0 for ok; -EPROTO for internal and for a
 * code this build does not know). */
int cq_mq_err_of_code(int code);
/* "produce" for a request, "produce_resp" for its response, "push", "error"; NULL if unknown. */
const char *cq_mq_type_name(int type);
/* True for 1, 3, ..., 15, 21, 23: the types a client sends. */
bool cq_mq_is_request(int type);
/* True if s[0..len) matches [A-Za-z0-9_]{1,64}. */
bool cq_mq_topic_valid(const char *s, size_t len);

#endif
