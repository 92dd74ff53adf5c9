/* it_mgr.h - a manager process (chanqd --role mgr) for the integration tests that need one
 * (it-mgrproto, it-mgrbridge, it-relay-mgr): its temp directory with the admin's and the
 * servers' tokens, its state file, audit log, log and ready file; its ports from the ready
 * line; its stop, which must be an exit 0; and its console API. */
#ifndef IT_MGR_H
#define IT_MGR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct it_mgr {
    char dir[256]; /* admin.token, srv.token, state.json, audit.log, mgr.log, ready */
    pid_t pid;
    uint16_t port, http_port; /* the servers' port, the console's (HTTP) port */
    char addr[64];            /* "127.0.0.1:<port>", as --mgr-servers takes it */
} it_mgr_t;

/* Starts $CHANQD --role mgr in a new temp dir named after tag: tokens admin_tok and srv_tok
 * (each written with a newline, mode 0600), state_json as its state file when not NULL (else
 * the manager makes one), extra arguments extra (NULL-terminated; NULL: none). Waits for its
 * ready line. Returns 0, or -1 with the reason on stderr (usable from a group setup). */
int it_mgr_start(it_mgr_t *m, const char *tag, const char *admin_tok, const char *srv_tok,
                 const char *state_json, const char *const *extra);
/* The path of name in m's directory. */
void it_mgr_path(const it_mgr_t *m, const char *name, char *out, size_t cap);
/* Writes name in m's directory (mode 0600), its path in out when not NULL. */
void it_mgr_write(const it_mgr_t *m, const char *name, const char *text, char *out, size_t cap);
/* SIGTERM and reap; removes the directory unless $CQ_IT_KEEP is set. Returns 0, or -1 when
 * the manager did not exit 0 (the directory is kept then, and said). m->pid 0: just the dir. */
int it_mgr_stop(it_mgr_t *m);
/* One console API request with Authorization: Bearer bearer; returns the status (asserted
 * positive), the body in body. */
int it_mgr_api(const it_mgr_t *m, const char *bearer, const char *method, const char *path,
               const char *json, char *body, size_t cap);

#endif
