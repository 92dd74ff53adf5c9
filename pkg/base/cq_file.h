/* cq_file.h - whole-file reads for configuration files. */
#ifndef CQ_FILE_H
#define CQ_FILE_H

#include <stddef.h>

/* Reads the file at path into a new buffer (returned owned; free with cq_free), refusing files
 * over max bytes. Returns 0, -errno, -ENOMEM or -EFBIG; *ret_* are written only on success. */
int cq_file_read(const char *path, size_t max, char **ret_buf, size_t *ret_len);

/* A secret's file (a token): its text without trailing whitespace into buf[0..len). "" path:
 * buf "". Returns 0, -errno, -ENOMEM, or -ENAMETOOLONG when it does not fit (len - 1 bytes at
 * most). The caller says which option named the file. */
int cq_file_read_secret(const char *path, char *buf, size_t len);

/* Parses a document already in memory into *ret (a typed out-pointer passed as void *). */
typedef int (*cq_file_loader_fn)(const char *doc, size_t len, void *ret, char *err, size_t errlen);

/* Reads path (at most max bytes) and runs load on its contents: the one way config files are
 * loaded (FSMs, channel settings, spatial settings). Errors are prefixed with the path in err.
 * Returns load's result, or -errno/-EFBIG/-ENOMEM for the read. */
int cq_file_load(const char *path, size_t max, cq_file_loader_fn load, void *ret, char *err,
                 size_t errlen);

#endif
