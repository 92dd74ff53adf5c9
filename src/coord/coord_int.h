/* coord_int.h - shared inside src/coord (the machine's files; not the runtime's). */
#ifndef CQ_COORD_INT_H
#define CQ_COORD_INT_H

#include "cq_coord.h"

/* True when p[0..n) is "host:port": host of [A-Za-z0-9._:[]-], port 1..65535 in digits without
 * a leading zero, n <= CQ_COORD_ADDR_MAX. */
bool cq__coord_addr_valid(const char *p, size_t n);

#endif
