/* mgr_main.h - `chanqd --role mgr` (mgr_main.c), called by main() after the options are parsed.
 */
#ifndef CQ_MGR_MAIN_H
#define CQ_MGR_MAIN_H

#include "cq_config.h"

/* Runs the management service until SIGINT/SIGTERM (SIGHUP reloads the token files). c borrowed.
 * Returns 0, or < 0 when it could not start (logged). */
int cq_main_mgr(const cq_config_t *c);

#endif
