#include "cq_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *cq_strerror(int err)
{
    switch (err) {
#define CQ__ERR_STR(name, val, msg)                                                                \
    case CQ_##name:                                                                                \
        return msg;
        CQ_ERR_MAP(CQ__ERR_STR)
#undef CQ__ERR_STR
    case 0:
        return "success";
    default:
        break;
    }
    if (err < 0 && err > -1000)
        return strerror(-err);
    return "unknown error";
}

const char *cq_errname(int err)
{
    switch (err) {
#define CQ__ERR_NAME(name, val, msg)                                                               \
    case CQ_##name:                                                                                \
        return "CQ_" #name;
        CQ_ERR_MAP(CQ__ERR_NAME)
#undef CQ__ERR_NAME
    case 0:
        return "OK";
    default:
        break;
    }
    if (err < 0 && err > -1000) {
        const char *n = strerrorname_np(-err);
        return n ? n : "ERRNO";
    }
    return "UNKNOWN";
}

int cq_err_fmt(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
