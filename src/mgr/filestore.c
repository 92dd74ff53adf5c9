/* filestore.c - the manager's state document in a local file (cq_mgrstore.h). Blocking: runs on
 * the edge's store thread. */
#include "cq_mgrstore.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STATE_MAX (16u << 20) /* the largest state file we read */

typedef struct filestore {
    char *path;
    int64_t ver; /* -1: no file yet; else writes since the last load */
} filestore_t;

int cq_mgrstore_file_new(const char *path, void **ret)
{
    if (!path || !*path)
        return -EINVAL;
    filestore_t *f = cq_calloc(1, sizeof(*f));
    if (!f || !(f->path = cq_strdup(path))) {
        cq_free(f);
        return -ENOMEM;
    }
    f->ver = -1;
    *ret = f;
    return 0;
}

static int file_load(void *ud, char **json, size_t *len, int64_t *ver)
{
    filestore_t *f = ud;
    *json = NULL;
    *len = 0;
    int rc = cq_file_read(f->path, STATE_MAX, json, len);
    if (rc == -ENOENT) {
        f->ver = *ver = -1;
        return 0;
    }
    if (rc < 0)
        return rc;
    char *z = cq_realloc(*json, *len + 1); /* NUL-terminated, as the ops table promises */
    if (!z) {
        *json = (cq_free(*json), NULL);
        return -ENOMEM;
    }
    z[*len] = '\0';
    *json = z;
    f->ver = *ver = 0;
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* fsync of the directory holding path, so that the rename survives a crash. */
static void sync_dir(const char *path)
{
    char *copy = cq_strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    cq_free(copy);
}

static int file_save(void *ud, const char *json, size_t len, int64_t expect_ver, int64_t *new_ver)
{
    filestore_t *f = ud;
    if (expect_ver != f->ver)
        return CQ_ECONFLICT;
    size_t plen = strlen(f->path);
    char *tmp = cq_malloc(plen + 5);
    if (!tmp)
        return -ENOMEM;
    memcpy(tmp, f->path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto cleanup;
    }
    rc = write_all(fd, json, len);
    if (rc == 0)
        rc = write_all(fd, "\n", 1);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && rename(tmp, f->path) < 0)
        rc = -errno;
    if (rc < 0)
        (void)unlink(tmp);
    else
        sync_dir(f->path);
cleanup:
    cq_free(tmp);
    if (rc == 0)
        *new_ver = ++f->ver;
    return rc;
}

static void file_free(void *ud)
{
    filestore_t *f = ud;
    if (!f)
        return;
    cq_free(f->path);
    cq_free(f);
}

const cq_mgrstore_ops_t cq_mgrstore_file_ops = {file_load, file_save, NULL, file_free};
