/* cq_testsrv.h - run a real chanqd for integration tests, and talk to it at byte level.
 *
 * A cq_testsrv_t owns a private temp directory (mkdtemp under $TMPDIR or /tmp) holding the
 * server log (chanqd's stderr and stdout), the ready file and any file written with
 * cq_testsrv_file(). cq_testsrv_start() forks chanqd (path from $CHANQD) with the caller's
 * arguments followed by nothing else than
 *   --client-addr 127.0.0.1:0 --server-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0
 *   --mq-addr 127.0.0.1:0 --mq-http-addr 127.0.0.1:0 --store-dir DIR/data
 *   --ready-file DIR/ready --log-level debug
 * placed *before* the caller's arguments, so a test may override any of them. It waits for the
 * ready file and parses the ports. The child gets PR_SET_PDEATHSIG(SIGKILL), and every
 * started server is also killed by an atexit handler, so no chanqd outlives the test process.
 * cq_testsrv_stop() sends SIGTERM, waits (SIGKILL after a grace period), and removes the temp
 * directory unless $CQ_IT_KEEP is set (then the path is printed on stderr).
 *
 * Nothing here uses cmocka: functions return 0 / a value, or a negative error.
 * Not thread-safe: one thread drives a cq_testsrv_t (the raw helpers are thread-agnostic).
 */
#ifndef CQ_TESTSRV_H
#define CQ_TESTSRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chanq_sync.h"

typedef struct cq_testsrv {
    pid_t pid; /* 0 when not running */
    char dir[256];
    char log_path[320];
    char ready_path[320];
    char store_path[320]; /* DIR/data, passed as --store-dir */
    uint16_t client_port, server_port, admin_port;
    uint16_t mq_port;      /* durable-topic port from the ready file's mq=; 0 when disabled */
    uint16_t mq_http_port; /* durable-topic HTTP API port (mqhttp=); 0 when disabled */
    uint16_t ws_port, wss_port, kcp_port; /* ws=, wss=, kcp=; 0 when disabled */
    int exit_status;                      /* from the last stop: exit code, or 128 + signal */
} cq_testsrv_t;

/* Creates the temp directory. Returns 0 or -errno. */
int cq_testsrv_init(cq_testsrv_t *s);

/* Writes content to DIR/name and stores the full path in path[0..cap). Returns 0 or -errno. */
int cq_testsrv_file(const cq_testsrv_t *s, const char *name, const char *content, char *path,
                    size_t cap);

/* Starts chanqd with args (NULL-terminated array of borrowed strings; NULL = none) and waits
 * up to 10 s for the ready file. Calls cq_testsrv_init() first if it was not called. Returns 0,
 * -ENOENT ($CHANQD unset), -ECHILD (chanqd exited: see the log), or CQ_ETIMEOUT. */
int cq_testsrv_start(cq_testsrv_t *s, const char *const *args);

/* True while the child has not exited (reaps it if it has). */
bool cq_testsrv_running(cq_testsrv_t *s);

/* Stops the server (SIGTERM; SIGKILL after 5 s), reaps it and removes the temp directory.
 * Safe to call twice. Returns the exit status (see exit_status) or -1 if nothing ran; a
 * server that was running and does not exit 0 has the end of its log printed to stderr. */
int cq_testsrv_stop(cq_testsrv_t *s);

/* Sends sig (e.g. SIGKILL) and reaps the server, keeping the temp directory (and the store in
 * DIR/data) so that cq_testsrv_start() can restart it on the same data. Returns the exit status
 * as in exit_status, or -1 if nothing ran. */
int cq_testsrv_kill(cq_testsrv_t *s, int sig);

/* The whole log as a NUL-terminated malloc'd string (free()), or NULL. */
char *cq_testsrv_log(const cq_testsrv_t *s);

/* Waits up to timeout_ms for needle to appear in the log. Returns true if found. */
bool cq_testsrv_log_wait(const cq_testsrv_t *s, const char *needle, int timeout_ms);

/* GET http://admin/metrics and returns the sum of every sample of counter or gauge `name`
 * (all label sets), or a negative error. */
int64_t cq_testsrv_metric(const cq_testsrv_t *s, const char *name);

/* Polls the metric until it is >= min or timeout_ms passes; returns the last value read. */
int64_t cq_testsrv_metric_wait_ge(const cq_testsrv_t *s, const char *name, int64_t min,
                                  int timeout_ms);

/* chanq_sync_connect to the client (server_listener false) or server listener. NULL on error
 * (*ret_err gets the code when not NULL). */
chanq_sync_t *cq_testsrv_connect(const cq_testsrv_t *s, bool server_listener,
                                 const chanq_opts_t *opts, int *ret_err);

/* ---- helper processes ------------------------------------------------------------------- */

/* Starts argv[0] (a path; argv NULL-terminated) with stdout on a pipe and waits up to 10 s for
 * its first line "ready PORT". The child gets PR_SET_PDEATHSIG(SIGKILL) and stderr inherited.
 * Returns the pid (the caller kills and reaps it) with *ret_port set, or a negative error. */
pid_t cq_testsrv_spawn_ready(const char *const *argv, int *ret_port);
/* Starts argv[0] with argv (NULL-terminated), its stdout and stderr to log_path (truncated), killed
 * with the test process; returns its pid (reap it) or -errno. Nothing is awaited. */
pid_t cq_testsrv_spawn_log(const char *const *argv, const char *log_path);

/* ---- raw sockets ------------------------------------------------------------------------ */

/* Blocking TCP connect to 127.0.0.1:port with TCP_NODELAY. Returns the fd or -errno. */
int cq_raw_connect(uint16_t port);

/* Writes all of p[0..n). Returns 0 or -errno. */
int cq_raw_write(int fd, const void *p, size_t n);

/* One HTTP exchange: sends req[0..n) on a new connection to 127.0.0.1:port (the request asks
 * for "Connection: close") and reads the answer until the server closes, each read waiting up to
 * timeout_ms. Returns the status of the "HTTP/1.1 NNN" line, with what follows the head in
 * body[0..cap) (NUL-terminated, cut to fit); or a negative error: -errno, CQ_ETIMEOUT, -EMSGSIZE
 * (an answer over 1 MiB), -EPROTO (no status line). */
/* The tests' clock: sleeps ms milliseconds; the monotonic clock in ms. */
void cq_test_sleep_ms(int ms);
int64_t cq_test_mono_ms(void);

int cq_raw_http(uint16_t port, const char *req, size_t n, int timeout_ms, char *body, size_t cap);

/* Reads exactly one packet (fixed framing: 5-byte header, length in bytes 2-3; with legacy
 * true, `43 48 4E len` means a body of len bytes) into buf[0..cap). Returns its total length
 * (header included), CQ_ETIMEOUT, CHANQ_SYNC_EOF, -EMSGSIZE if it does not fit, or -errno. */
int cq_raw_read_packet(int fd, uint8_t *buf, size_t cap, int timeout_ms, bool legacy);

/* Writes every byte queued in core to fd (chanq_client_out + consume). Returns 0 or an error. */
int cq_raw_send_core(int fd, chanq_client_t *core);

/* Decodes one whole packet (header included; Snappy handled; legacy selects the legacy tag)
 * into up to cap owned messages (chanq_owned_msg_done each). Returns the count or an error. */
int cq_decode_packet(const uint8_t *pkt, size_t n, bool legacy, chanq_owned_msg_t *msgs,
                     size_t cap);

#endif
