/* test_main.c - the harness of the src/config tests: files, a counting allocator and main,
 * which runs the option table's and the JSON loaders' cases as one cmocka group (one TAP
 * plan). */
#include "test_util.h"

#include "cq_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- files ---------------------------------------------------------------------------- */

char *tu_read_file(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0, n;
    char *buf = malloc(cap + 1);
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    if (buf) {
        buf[len] = '\0';
        if (ret_len)
            *ret_len = len;
    }
    return buf;
}

char *tu_read_source(const char *rel, size_t *ret_len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", CQ_SOURCE_ROOT, rel);
    char *buf = tu_read_file(path, ret_len);
    if (!buf)
        fail_msg("cannot read %s", path);
    return buf;
}

char *tu_write_temp(const char *text)
{
    char *path = strdup("/tmp/cq_config_test_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

void tu_remove_temp(char *path)
{
    unlink(path);
    free(path);
}

/* ---- counting allocator --------------------------------------------------------------- */

static int fail_at, count;
static long live;

static void *t_malloc(size_t size)
{
    if (fail_at && ++count == fail_at)
        return NULL;
    if (!fail_at)
        count++;
    void *p = malloc(size);
    live += p != NULL;
    return p;
}

static void *t_realloc(void *ptr, size_t size)
{
    if (fail_at && ++count == fail_at)
        return NULL;
    if (!fail_at)
        count++;
    void *p = realloc(ptr, size);
    live += p != NULL && ptr == NULL;
    return p;
}

static void t_free(void *ptr)
{
    live -= ptr != NULL;
    free(ptr);
}

static const cq_allocator_t counting = {t_malloc, t_realloc, t_free};

void tu_fail_alloc_at(int n)
{
    fail_at = n;
    count = 0;
}

int tu_alloc_count(void)
{
    return count;
}

long tu_alloc_live(void)
{
    return live;
}

/* ---- main ----------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    static const char group[] = "config";
    const struct CMUnitTest *lists[] = {test_config_cases, test_fsm_cases, test_settings_cases};
    const size_t counts[] = {test_config_count, test_fsm_count, test_settings_count};
    const size_t nlists = sizeof(counts) / sizeof(counts[0]);
    size_t total = 0;
    for (size_t i = 0; i < nlists; i++)
        total += counts[i];
    struct CMUnitTest *all = calloc(total, sizeof(*all));
    if (!all)
        return 1;
    for (size_t i = 0, k = 0; i < nlists; k += counts[i], i++)
        memcpy(all + k, lists[i], counts[i] * sizeof(*all));
    cq_alloc_set(&counting);
    if (argc > 1)
        cmocka_set_test_filter(argv[1]); /* run one case: test_config NAME-GLOB */
    int r = _cmocka_run_group_tests(group, all, total, NULL, NULL);
    free(all);
    return r;
}
