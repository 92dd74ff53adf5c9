/* reload.h - SIGHUP, the configuration part: the command line and its --config file are parsed
 * again; what can change at run time (today --log-level) is applied, every other option whose
 * value changed is named in one warning: it takes effect at the next restart. The files the
 * options name (tokens, MQ permissions, descriptor sets) are re-read by chanqd.c's SIGHUP
 * handler from the paths in force; doc/security.md "Reload" lists everything.
 *
 * Lifecycle, in chanqd.c: cq_main_reload_new() right after the first parse, before anything
 * adjusts the configuration (fit_fd_limit() fills --max-connections 0); cq_main_reload_config()
 * on each SIGHUP, on the main thread; cq_main_reload_free() at exit.
 */
#ifndef CQ_MAIN_RELOAD_H
#define CQ_MAIN_RELOAD_H

#include "cq_config.h"

typedef struct cq_main_reload cq_main_reload_t;

/* Snapshots c (the configuration as parsed from argv) and keeps argv (borrowed: main's, valid
 * until exit). Returns an owned object or NULL on OOM. */
cq_main_reload_t *cq_main_reload_new(const cq_config_t *c, int argc, char **argv);
/* Parses argv again. A configuration that does not parse is logged and nothing changes.
 * Otherwise applies --log-level and warns, in one line, of the options changed since start
 * that only a restart applies. Returns 0 or the parse error (logged). */
int cq_main_reload_config(cq_main_reload_t *r);
/* Frees r. Accepts NULL; returns NULL. */
cq_main_reload_t *cq_main_reload_free(cq_main_reload_t *r);

#endif
