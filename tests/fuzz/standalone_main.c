/* standalone_main.c - replays inputs through LLVMFuzzerTestOneInput without libFuzzer.
 *
 * Linked instead of libFuzzer when -Dfuzz=false (or with gcc), so every target builds and its
 * corpus is replayed in the fuzz-regress suite. Arguments are files or directories (one level,
 * regular files only); arguments starting with '-' are libFuzzer flags and are ignored, so the
 * same command line works for both. Each input is copied into a buffer of exactly its size, so
 * ASan sees any over-read. Exits 1 when no input was found (a miswired corpus path). */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "%s: read failed\n", path);
        return -1;
    }
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int run_path(const char *path, unsigned *count)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (run_file(path) < 0)
            return -1;
        (*count)++;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[4096];
        if (snprintf(full, sizeof(full), "%s/%s", path, e->d_name) >= (int)sizeof(full)) {
            rc = -1;
            continue;
        }
        if (stat(full, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (run_file(full) < 0) {
            rc = -1;
            continue;
        }
        (*count)++;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        if (run_path(argv[i], &count) < 0)
            rc = 1;
    }
    printf("%s: replayed %u input(s)\n", argv[0], count);
    if (count == 0) {
        fprintf(stderr, "no inputs found\n");
        return 1;
    }
    return rc;
}
