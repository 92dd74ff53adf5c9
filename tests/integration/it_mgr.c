/* it_mgr.c - the tests' manager process (it_mgr.h). */
#include "it_mgr.h"

#include "cq_testsrv.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define START_MS 10000 /* a manager that has not written its ready line by then failed */

void it_mgr_path(const it_mgr_t *m, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", m->dir, name);
}

void it_mgr_write(const it_mgr_t *m, const char *name, const char *text, char *out, size_t cap)
{
    char p[320];
    it_mgr_path(m, name, p, sizeof(p));
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(p, 0600);
    if (out)
        snprintf(out, cap, "%s", p);
}

/* The port of key ("mgr=127.0.0.1:P") in the ready line, 0 when missing. */
static uint16_t ready_port(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    p = p ? strchr(p, ':') : NULL;
    return p ? (uint16_t)atoi(p + 1) : 0;
}

/* Waits for the ready line; false when the manager exits or the wait runs out. */
static bool wait_ready(it_mgr_t *m, const char *ready)
{
    for (int64_t end = cq_test_mono_ms() + START_MS; cq_test_mono_ms() < end;
         cq_test_sleep_ms(20)) {
        char line[512] = "";
        FILE *f = fopen(ready, "r");
        bool done = f && fgets(line, sizeof(line), f) && strchr(line, '\n');
        if (f)
            fclose(f);
        if (done) {
            m->port = ready_port(line, "mgr=");
            m->http_port = ready_port(line, "http=");
            snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%u", m->port);
            return m->port && m->http_port;
        }
        if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
            m->pid = 0;
            return false;
        }
    }
    return false;
}

int it_mgr_start(it_mgr_t *m, const char *tag, const char *admin_tok, const char *srv_tok,
                 const char *state_json, const char *const *extra)
{
    memset(m, 0, sizeof(*m));
    const char *bin = getenv("CHANQD"), *tmp = getenv("TMPDIR");
    snprintf(m->dir, sizeof(m->dir), "%s/cq-%s.XXXXXX", tmp ? tmp : "/tmp", tag);
    if (!bin || !mkdtemp(m->dir)) {
        fprintf(stderr, "# no $CHANQD, or no temp dir for the manager\n");
        return -1;
    }
    char adm[320], tok[320], st[320], audit[320], ready[320], logp[320], line[128];
    snprintf(line, sizeof(line), "%s\n", admin_tok);
    it_mgr_write(m, "admin.token", line, adm, sizeof(adm));
    snprintf(line, sizeof(line), "%s\n", srv_tok);
    it_mgr_write(m, "srv.token", line, tok, sizeof(tok));
    if (state_json)
        it_mgr_write(m, "state.json", state_json, NULL, 0);
    it_mgr_path(m, "state.json", st, sizeof(st));
    it_mgr_path(m, "audit.log", audit, sizeof(audit));
    it_mgr_path(m, "ready", ready, sizeof(ready));
    it_mgr_path(m, "mgr.log", logp, sizeof(logp));
    const char *argv[64] = {bin,
                            "--role",
                            "mgr",
                            "--mgr-addr",
                            "127.0.0.1:0",
                            "--mgr-http-addr",
                            "127.0.0.1:0",
                            "--admin-addr",
                            "127.0.0.1:0",
                            "--mgr-state-file",
                            st,
                            "--mgr-admin-token-file",
                            adm,
                            "--mgr-token-file",
                            tok,
                            "--mgr-audit-log",
                            audit,
                            "--ready-file",
                            ready,
                            "--log-level",
                            "debug"};
    size_t n = 21;
    for (size_t i = 0; extra && extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    m->pid = cq_testsrv_spawn_log(argv, logp);
    if (m->pid > 0 && wait_ready(m, ready))
        return 0;
    fprintf(stderr, "# the manager did not start: see %s\n", logp);
    return -1;
}

int it_mgr_stop(it_mgr_t *m)
{
    int st = 0;
    if (m->pid > 0) {
        kill(m->pid, SIGTERM);
        waitpid(m->pid, &st, 0);
        m->pid = 0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "# the manager exited with status %d (files kept in %s)\n", st, m->dir);
            return -1;
        }
    }
    if (m->dir[0] && !getenv("CQ_IT_KEEP")) {
        char cmd[320];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m->dir);
        if (system(cmd) != 0)
            return -1;
    }
    m->dir[0] = '\0';
    return 0;
}

int it_mgr_api(const it_mgr_t *m, const char *bearer, const char *method, const char *path,
               const char *json, char *body, size_t cap)
{
    char req[8192];
    size_t blen = json ? strlen(json) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     method, path, bearer, blen, json ? json : "");
    assert_true(n > 0 && (size_t)n < sizeof(req));
    int status = cq_raw_http(m->http_port, req, (size_t)n, START_MS, body, cap);
    assert_true(status > 0);
    return status;
}
