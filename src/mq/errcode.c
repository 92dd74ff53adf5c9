/* errcode.c - the stable wire err_code values and their names, mapped from chanq's internal
 * codes (doc/protocol-mq.md section 4). */
#include "cq_mq.h"

#include "cq_err.h"

#include <errno.h>
#include <stddef.h>

/* ---- error codes ----------------------------------------------------------------------- */

static const struct {
    int err, code;
    const char *name;
} errmap[] = {
    {0, CQ_MQ_OK, "ok"},
    {CQ_EHEADER, CQ_MQ_ERR_BAD_HEADER, "bad_header"},
    {CQ_EBADLEN, CQ_MQ_ERR_BAD_LENGTH, "bad_length"},
    {CQ_EJSON, CQ_MQ_ERR_BAD_JSON, "bad_json"},
    {CQ_ENOTYPE, CQ_MQ_ERR_UNKNOWN_TYPE, "unknown_type"},
    {CQ_EFIELD, CQ_MQ_ERR_BAD_FIELD, "bad_field"},
    {CQ_EAUTH, CQ_MQ_ERR_UNAUTHENTICATED, "unauthenticated"},
    {CQ_EACL, CQ_MQ_ERR_NO_PERMISSION, "no_permission"},
    {CQ_ENOTOPIC, CQ_MQ_ERR_UNKNOWN_TOPIC, "unknown_topic"},
    {CQ_EOFFLINE, CQ_MQ_ERR_TOPIC_OFFLINE, "topic_offline"},
    {CQ_ECONTENT, CQ_MQ_ERR_CONTENT_TOO_LARGE, "content_too_large"},
    {CQ_EBUSY, CQ_MQ_ERR_BUSY, "busy"},
    {CQ_ESTORE, CQ_MQ_ERR_STORAGE, "storage"},
    {CQ_EBADTOPIC, CQ_MQ_ERR_BAD_TOPIC_NAME, "bad_topic_name"},
    {CQ_ESEQCONFLICT, CQ_MQ_ERR_SEQUENCE_CONFLICT, "sequence_conflict"},
    {CQ_ESEQORDER, CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER, "sequence_out_of_order"},
    {CQ_EOFFRANGE, CQ_MQ_ERR_OFFSET_OUT_OF_RANGE, "offset_out_of_range"},
    {CQ_ENOTMASTER, CQ_MQ_ERR_NOT_MASTER, "not_master"},
    {CQ_ESRVOFFLINE, CQ_MQ_ERR_SERVER_OFFLINE, "server_offline"},
    {CQ_EREADMASTER, CQ_MQ_ERR_READ_ON_MASTER, "read_on_master"},
    {CQ_ENOMSG, CQ_MQ_ERR_NO_MESSAGE, "no_message"},
    {1, CQ_MQ_ERR_INTERNAL, "internal"}, /* err 1 never occurs: matched by code only */
};
#define NERRMAP (sizeof(errmap) / sizeof(errmap[0]))

int cq_mq_errcode(int err)
{
    for (size_t i = 0; i + 1 < NERRMAP; i++)
        if (errmap[i].err == err)
            return errmap[i].code;
    return CQ_MQ_ERR_INTERNAL;
}

const char *cq_mq_errcode_name(int code)
{
    for (size_t i = 0; i < NERRMAP; i++)
        if (errmap[i].code == code)
            return errmap[i].name;
    return "unknown";
}

int cq_mq_err_of_code(int code)
{
    if (code == CQ_MQ_OK)
        return 0;
    for (size_t i = 1; i + 1 < NERRMAP; i++)
        if (errmap[i].code == code)
            return errmap[i].err;
    return -EPROTO;
}
