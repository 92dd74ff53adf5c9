/* reload.c - SIGHUP, the configuration part (reload.h). */
#include "reload.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Options SIGHUP applies; any other change waits for a restart. */
static const char *const reloadable[] = {"log-level"};

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

struct cq_main_reload {
    int argc;
    char **argv;
    char *at_start; /* the --dump-config text of the configuration at start (malloc'd) */
};

/* The configuration in --dump-config form, malloc'd (free()), or NULL on OOM. */
static char *dump(const cq_config_t *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    cq_config_dump(c, f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static bool is_reloadable(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(reloadable) / sizeof(reloadable[0]); i++)
        if (strlen(reloadable[i]) == len && memcmp(reloadable[i], name, len) == 0)
            return true;
    return false;
}

/* The next "name = value" line of a dump at *p (comments and blank lines skipped), as
 * [line, line + *len); NULL at the end. */
static const char *next_setting(const char **p, size_t *len)
{
    while (**p) {
        const char *line = *p;
        size_t n = strcspn(line, "\n");
        *p = line + n + (line[n] == '\n');
        if (n && line[0] != '#') {
            *len = n;
            return line;
        }
    }
    return NULL;
}

/* Appends to out[0..cap) the names of the options whose lines differ between the two dumps
 * (both list every option in the table's order), reloadable ones left out. */
static void changed_options(const char *a, const char *b, char *out, size_t cap)
{
    size_t la, lb, used = 0;
    const char *x, *y;
    out[0] = '\0';
    while ((x = next_setting(&a, &la)) && (y = next_setting(&b, &lb))) {
        size_t name = strcspn(x, " =");
        if ((la == lb && memcmp(x, y, la) == 0) || is_reloadable(x, name))
            continue;
        int k = snprintf(out + used, cap - used, "%s%.*s", used ? ", " : "", (int)name, x);
        if (k < 0 || (size_t)k >= cap - used)
            return; /* truncated: the first names are enough to act on */
        used += (size_t)k;
    }
}

cq_main_reload_t *cq_main_reload_new(const cq_config_t *c, int argc, char **argv)
{
    cq_main_reload_t *r = cq_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->argc = argc;
    r->argv = argv;
    if (!(r->at_start = dump(c)))
        return cq_main_reload_free(r);
    return r;
}

static void apply_log_level(int level)
{
    if (level == (int)cq_log_get_level())
        return;
    cq_log_set_level((cq_log_level_t)level);
    CQ_INFO("main", "SIGHUP: log level %s", level_names[level]);
}

int cq_main_reload_config(cq_main_reload_t *r)
{
    cq_config_t c;
    char err[1024] = "", changed[1024];
    cq_config_defaults(&c);
    int rc = cq_config_parse_args(&c, r->argc, r->argv, err, sizeof(err));
    if (rc != 0) {
        CQ_ERROR("main", "SIGHUP: configuration not reloaded: %s",
                 rc < 0 ? err : "the command line asks for an action");
        cq_config_done(&c);
        return rc < 0 ? rc : CQ_ECONFIG;
    }
    apply_log_level(c.log_level);
    char *now = dump(&c);
    cq_config_done(&c);
    if (!now) {
        CQ_WARN("main", "SIGHUP: out of memory; options not compared");
        return -ENOMEM;
    }
    changed_options(r->at_start, now, changed, sizeof(changed));
    free(now);
    if (*changed)
        CQ_WARN("main", "SIGHUP: changed options apply at the next restart: %s", changed);
    return 0;
}

cq_main_reload_t *cq_main_reload_free(cq_main_reload_t *r)
{
    if (r) {
        free(r->at_start);
        cq_free(r);
    }
    return NULL;
}
