/* bridgemain.h - composes the bridge (issue 24, doc/bridge.md): the bindings file, the MQ
 * engine's sink and the core's inject calls. */
#ifndef CQ_BRIDGEMAIN_H
#define CQ_BRIDGEMAIN_H

#include "cq_admin.h"
#include "cq_config.h"
#include "cq_core.h"
#include "cq_mqfollow.h"
#include "cq_mqport.h"

#include <stddef.h>

typedef struct cq_main_bridge cq_main_bridge_t;

/* Loads c->bridge_file into a new bridge that delivers into sh (borrowed: must outlive it) and
 * registers its metrics with admin. *ret is NULL (and 0 returned) when there is no file and the
 * server is not managed (--mgr-servers, an MQ port, no relay): a managed one starts with no
 * binding, for the manager's (cq_main_bridge_apply). c must outlive the bridge.
 * Returns 0, or CQ_ECONFIG / -ENOMEM with err saying why. The main thread, before the MQ
 * engine is made. */
int cq_main_bridge_new(const cq_config_t *c, cq_shared_t *sh, cq_admin_t *admin,
                       cq_main_bridge_t **ret, char *err, size_t errlen);
/* The follower of --bridge-follow's shards (owned by the bridge; the MQ loop drives it:
 * cq_mqio_opts_t.follow), or NULL. */
cq_mqfollow_t *cq_main_bridge_follower(cq_main_bridge_t *b);
/* Sets o's sink to the bridge (b NULL: nothing). */
void cq_main_bridge_sink(cq_main_bridge_t *b, cq_mqsrv_opts_t *o);
/* The MQ engine s exists (the main thread, right after it is made): from now on the workers'
 * resume requests go to it (cq_shared_set_resume). b NULL: nothing. */
void cq_main_bridge_attach(cq_main_bridge_t *b, cq_mqsrv_t *s);
/* SIGHUP: reads c->bridge_file again (the main thread); the MQ engine s takes the new bindings
 * at its next drain, with an empty dedup window. A file that does not load, or that this node
 * cannot serve, keeps the bindings in force (logged). b NULL (no --bridge-file at start):
 * nothing. Returns 0 or the error. */
int cq_main_bridge_reload(cq_main_bridge_t *b, const cq_config_t *c, cq_mqsrv_t *s);
/* The manager's bindings document (publish_config's "bindings", json[0..len) borrowed), on the
 * MQ engine's thread: checked as a bindings file is (cq_bindings_parse's exact messages in err)
 * and in force at the engine's next drain; from then on SIGHUP does not read --bridge-file. A
 * managed server (--mgr-servers with an MQ port) has a bridge even without --bridge-file.
 * Returns 0, CQ_ECONFIG or -ENOMEM with err saying why; b NULL: CQ_ECONFIG. */
int cq_main_bridge_apply(cq_main_bridge_t *b, cq_mqsrv_t *s, const char *json, size_t len,
                         char *err, size_t errlen);
/* From now on events are not delivered and the workers' resume asks are refused (the MQ
 * engine is about to be freed): any thread. NULL: nothing. */
void cq_main_bridge_stop(cq_main_bridge_t *b);
/* After the workers stopped (they may ask until then: the core's resume hook points here) and
 * the MQ engine is freed. Accepts NULL; returns NULL. */
cq_main_bridge_t *cq_main_bridge_free(cq_main_bridge_t *b, cq_admin_t *admin);

#endif
