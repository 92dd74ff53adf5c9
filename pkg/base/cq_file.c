#include "cq_file.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int cq_file_read(const char *path, size_t max, char **ret_buf, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int r = 0;
    for (;;) {
        if (len == cap) {
            char *nb = cap < max ? cq_realloc(buf, cap ? cap * 2 : 4096) : NULL;
            if (!nb) {
                r = cap < max ? -ENOMEM : -EFBIG;
                break;
            }
            buf = nb;
            cap = cap ? cap * 2 : 4096;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            r = ferror(f) ? -EIO : 0;
            break;
        }
    }
    fclose(f);
    if (r < 0) {
        cq_free(buf);
        return r;
    }
    *ret_buf = buf;
    *ret_len = len;
    return 0;
}

int cq_file_load(const char *path, size_t max, cq_file_loader_fn load, void *ret, char *err,
                 size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    char *buf = NULL;
    size_t len = 0;
    int r = cq_file_read(path, max, &buf, &len);
    if (r < 0)
        return cq_err_fmt(err, errlen, r, "%s: %s", path, strerror(-r));
    char msg[256];
    r = load(buf, len, ret, msg, sizeof(msg));
    cq_free(buf);
    if (r < 0)
        return cq_err_fmt(err, errlen, r, "%s: %s", path, msg);
    return 0;
}

int cq_file_read_secret(const char *path, char *buf, size_t len)
{
    char *t = NULL;
    size_t n = 0;
    buf[0] = '\0';
    if (!*path)
        return 0;
    int r = cq_file_read(path, 4096, &t, &n);
    if (r < 0)
        return r;
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    if (n >= len) {
        cq_free(t);
        return -ENAMETOOLONG;
    }
    memcpy(buf, t, n);
    buf[n] = '\0';
    cq_free(t);
    return 0;
}
