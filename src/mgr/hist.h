/* hist.h - the console's charts (issue 25): a bounded history of figures the manager samples
 * from the servers' reports, kept in memory only. Sans-I/O: times come in.
 *
 * Samples are taken together: cq__mgr_hist_begin(t) opens a round, every series given a value
 * with cq__mgr_hist_put() in it has that value at t, every other one a gap. The window holds
 * the last `points` rounds (a ring of times shared by every series); a series that had only
 * gaps for a whole window is forgotten, so a topic or server that went away costs nothing after
 * an hour. At most `series_max` series: a new one past it is refused (-ENOSPC) and counted.
 * Memory: points * 8 bytes per series, plus the key.
 *
 * Threads: the manager's loop only. */
#ifndef CQ_MGR_HIST_H
#define CQ_MGR_HIST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_MGR_HIST_KEY_MAX 256 /* a series key's bytes */

typedef struct mgr_hist mgr_hist_t;

/* Returns an owned history of points rounds (>= 2) and at most series_max series, or NULL on
 * OOM. */
mgr_hist_t *cq__mgr_hist_new(uint32_t points, uint32_t series_max);
/* Accepts NULL. */
void cq__mgr_hist_free(mgr_hist_t *h);
/* Opens the round at t_ms (the oldest round leaves the window once it is full). */
void cq__mgr_hist_begin(mgr_hist_t *h, uint64_t t_ms);
/* key's value in the open round (a later put of the same key in the round replaces it).
 * Returns 0, -EINVAL (no round open, a key empty or over CQ_MGR_HIST_KEY_MAX), -ENOSPC (a new
 * series past series_max) or -ENOMEM. */
int cq__mgr_hist_put(mgr_hist_t *h, const char *key, double v);
/* {"t": [ms...], "series": {key: [v or null...]}}, oldest first, with the series whose key
 * starts with prefix (NULL or "": all); returned owned, NULL on OOM. */
json_t *cq__mgr_hist_json(const mgr_hist_t *h, const char *prefix);
/* Series kept now, and new ones refused so far. */
size_t cq__mgr_hist_count(const mgr_hist_t *h);
uint64_t cq__mgr_hist_refused(const mgr_hist_t *h);

#endif
