/* chanq_admin.h - `chanq admin` (chanq_admin.c): the manager's JSON API from the CLI. */
#ifndef CHANQ_ADMIN_H
#define CHANQ_ADMIN_H

/* argv[0] is "admin"; the rest are its options and words. Returns the exit code: 0 ok,
 * 1 refused by the manager or unreachable, 2 usage. */
int chanq_admin_main(int argc, char **argv);

#endif
