/* cq_file.h - whole-file reads for configuration files. */
#ifndef CQ_FILE_H
#define CQ_FILE_H

#include <stddef.h>

/* Reads the file at path into a new buffer (returned owned; free with cq_free), refusing files
 * over max bytes. Returns 0, -errno, -ENOMEM or -EFBIG; *ret_* are written only on success. */
int cq_file_read(const char *path, size_t max, char **ret_buf, size_t *ret_len);

#endif
