/* cq_err.h - one error vocabulary for all of chanq.
 *
 * Functions return 0 on success or a negative code: -errno for system errors, CQ_E* (<= -1000)
 * for project errors. Every project code is defined once in CQ_ERR_MAP, which also generates
 * cq_strerror() and cq_errname(). Thread-safe; no allocation.
 */
#ifndef CQ_ERR_H
#define CQ_ERR_H

#include <stddef.h>

#define CQ_ERR_MAP(X)                                                                              \
    X(EMAGIC, -1000, "bad packet magic (expected 'C','H')")                                        \
    X(EZEROLEN, -1001, "packet length is zero")                                                    \
    X(ETOOBIG, -1002, "packet length exceeds the limit")                                           \
    X(EDECODE, -1003, "body is not a valid protobuf message")                                      \
    X(ESNAPPY, -1004, "body is not a valid snappy block")                                          \
    X(ENOCHAN, -1005, "unknown channel")                                                           \
    X(EFSM, -1006, "message type not allowed in the connection's state")                           \
    X(EACL, -1007, "not allowed by the channel ACL")                                               \
    X(EAUTH, -1008, "authentication failed")                                                       \
    X(ELIMIT, -1009, "a configured limit was reached")                                             \
    X(EFULL, -1010, "channel ids are exhausted")                                                   \
    X(ECONFIG, -1011, "invalid configuration")                                                     \
    X(ENOCONN, -1012, "unknown connection")                                                        \
    X(EEXIST, -1013, "already exists")                                                             \
    X(ESLOW, -1014, "slow consumer: queued bytes over the limit")                                  \
    X(ETIMEOUT, -1015, "timed out")                                                                \
    X(ENOTYPE, -1016, "unknown or unhandled message type")                                         \
    X(EBADTARGET, -1017, "message sent to the wrong channel")                                      \
    X(ENOOWNER, -1018, "channel has no owner")                                                     \
    X(ECLOSED, -1019, "connection is closing")                                                     \
    X(EJSON, -1020, "invalid JSON")                                                                \
    X(EHEADER, -1021, "bad frame header (header length, version or serialization)")                \
    X(EBADLEN, -1022, "frame total length out of bounds")                                          \
    X(EFIELD, -1023, "missing or invalid message field")                                           \
    X(EOFFLINE, -1024, "topic is offline")                                                         \
    X(EBUSY, -1025, "busy: pending writes over the limit, retry later")                            \
    X(ENOMSG, -1026, "no message at that offset")                                                  \
    X(ENOTOPIC, -1040, "unknown topic")                                                            \
    X(EBADTOPIC, -1041, "bad topic name (allowed: [A-Za-z0-9_], 1 to 64 characters)")              \
    X(ESTORE, -1042, "storage error")                                                              \
    X(ECONTENT, -1043, "message content exceeds the size limit")                                   \
    X(ESEQCONFLICT, -1044, "producer_id and seq already stored with other content")                \
    X(ESEQORDER, -1045, "seq below the producer's last stored seq, and not a retry")               \
    X(EOFFRANGE, -1046, "offset beyond the topic's last offset")                                   \
    X(ENOTMASTER, -1047, "not the shard's master: produce on another server")                      \
    X(ESRVOFFLINE, -1048, "server taken offline by an operator: produce on another server")        \
    X(EREADMASTER, -1049, "a standby serving no reads while its shard has a master: read there")   \
    X(ECONFLICT, -1070, "version conflict: someone else wrote first")                              \
    X(EOFFGRID, -1080, "position is off the spatial grid")                                         \
    X(ELINK, -1090, "malformed relay link packet")                                                 \
    X(EBADQUERY, -1081, "invalid spatial query (missing centre, bad extent or radius)")            \
    X(EKCPCONV, -1050, "KCP segment for another conversation (conv mismatch)")                     \
    X(EKCPCMD, -1051, "unknown KCP segment command")                                               \
    X(EKCPTRUNC, -1052, "truncated KCP segment")                                                   \
    X(EWSPROTO, -1060, "WebSocket protocol error (closed with 1002)")                              \
    X(EWSDATA, -1061, "invalid WebSocket payload data (closed with 1007)")                         \
    X(EHTTP, -1062, "bad HTTP request (the parser has the status and reason)")                     \
    X(ETLS, -1063, "TLS error (the TLS session has the OpenSSL reason)")

enum {
#define CQ__ERR_ENUM(name, val, msg) CQ_##name = (val),
    CQ_ERR_MAP(CQ__ERR_ENUM)
#undef CQ__ERR_ENUM
};

/* Human-readable text for any code returned by chanq (project or -errno). Never NULL. */
const char *cq_strerror(int err);
/* Symbolic name ("CQ_EMAGIC", "EINVAL"...). Never NULL. */
const char *cq_errname(int err);
/* Formats a message into err (if err and errlen) and returns code: `return cq_err_fmt(err,
 * errlen, CQ_ECONFIG, "...", ...)` reports an error and its text in one step. */
int cq_err_fmt(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
