/* cq_testsrv.c - see cq_testsrv.h. */
#include "cq_testsrv.h"

#include "cq_alloc.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- time ------------------------------------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* ---- process registry (atexit safety net) ----------------------------------------------- */

#define MAX_LIVE 16
static pid_t live[MAX_LIVE];
static bool atexit_set;

static void kill_live(void)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
    }
}

static void live_add(pid_t p)
{
    if (!atexit_set) {
        atexit(kill_live);
        atexit_set = true;
    }
    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i] == 0) {
            live[i] = p;
            return;
        }
    }
}

static void live_del(pid_t p)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i] == p)
            live[i] = 0;
}

/* ---- temp directory and files ----------------------------------------------------------- */

int cq_testsrv_init(cq_testsrv_t *s)
{
    memset(s, 0, sizeof(*s));
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%s/cqit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = '\0';
        return -errno;
    }
    snprintf(s->log_path, sizeof(s->log_path), "%s/chanqd.log", s->dir);
    snprintf(s->ready_path, sizeof(s->ready_path), "%s/ready", s->dir);
    snprintf(s->store_path, sizeof(s->store_path), "%s/data", s->dir);
    return 0;
}

int cq_testsrv_file(const cq_testsrv_t *s, const char *name, const char *content, char *path,
                    size_t cap)
{
    snprintf(path, cap, "%s/%s", s->dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    size_t n = strlen(content);
    bool ok = fwrite(content, 1, n, f) == n;
    if (fclose(f) != 0 || !ok)
        return -EIO;
    return 0;
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_dir(p); /* the store's data directory */
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    while (b) {
        size_t k = fread(b + len, 1, cap - len - 1, f);
        len += k;
        if (k == 0)
            break;
        if (cap - len - 1 == 0) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b)
        b[len] = '\0';
    return b;
}

/* ---- start / stop ----------------------------------------------------------------------- */

static int parse_port(const char *line, const char *key, uint16_t *port)
{
    const char *p = strstr(line, key);
    if (!p)
        return -EINVAL;
    p += strlen(key);
    const char *end = strchr(p, ' ');
    if (!end)
        end = p + strcspn(p, "\n");
    const char *colon = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            colon = q;
    if (!colon)
        return -EINVAL;
    long v = strtol(colon + 1, NULL, 10);
    if (v <= 0 || v > 65535)
        return -EINVAL;
    *port = (uint16_t)v;
    return 0;
}

int cq_testsrv_start(cq_testsrv_t *s, const char *const *args)
{
    if (!s->dir[0]) {
        int r = cq_testsrv_init(s);
        if (r < 0)
            return r;
    }
    const char *bin = getenv("CHANQD");
    if (!bin || !*bin)
        return -ENOENT;
    const char *fixed[] = {"--client-addr",  "127.0.0.1:0", "--server-addr", "127.0.0.1:0",
                           "--admin-addr",   "127.0.0.1:0", "--mq-addr",     "127.0.0.1:0",
                           "--mq-http-addr", "127.0.0.1:0", "--ws-addr",     "127.0.0.1:0",
                           "--kcp-addr",     "127.0.0.1:0", "--store-dir",   s->store_path,
                           "--ready-file",   s->ready_path, "--log-level",   "debug"};
    size_t nfixed = sizeof(fixed) / sizeof(fixed[0]), nargs = 0;
    while (args && args[nargs])
        nargs++;
    char **argv = calloc(nfixed + nargs + 2, sizeof(char *));
    if (!argv)
        return -ENOMEM;
    argv[0] = (char *)bin;
    for (size_t i = 0; i < nfixed; i++)
        argv[1 + i] = (char *)fixed[i];
    for (size_t i = 0; i < nargs; i++)
        argv[1 + nfixed + i] = (char *)args[i];
    unlink(s->ready_path);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        free(argv);
        return -errno;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0)
            _exit(126);
        dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(bin, argv);
        _exit(127);
    }
    free(argv);
    s->pid = pid;
    live_add(pid);
    int64_t deadline = mono_ms() + 10000;
    for (;;) {
        char *line = slurp(s->ready_path);
        if (line && strchr(line, '\n')) {
            int r = parse_port(line, "client=", &s->client_port);
            if (!r)
                r = parse_port(line, "server=", &s->server_port);
            if (!r)
                r = parse_port(line, "admin=", &s->admin_port);
            if (parse_port(line, "mq=", &s->mq_port) < 0)
                s->mq_port = 0; /* durable topics may be disabled ("-") */
            if (parse_port(line, "mqhttp=", &s->mq_http_port) < 0)
                s->mq_http_port = 0; /* the HTTP API may be disabled ("-") */
            if (parse_port(line, " ws=", &s->ws_port) < 0)
                s->ws_port = 0;
            if (parse_port(line, "wss=", &s->wss_port) < 0)
                s->wss_port = 0;
            if (parse_port(line, "kcp=", &s->kcp_port) < 0)
                s->kcp_port = 0;
            free(line);
            if (r < 0)
                s->admin_port = 0; /* admin may be disabled ("-") */
            if (s->client_port && s->server_port)
                return 0;
            return -EINVAL;
        }
        free(line);
        if (!cq_testsrv_running(s))
            return -ECHILD;
        if (mono_ms() > deadline) {
            cq_testsrv_stop(s);
            return CQ_ETIMEOUT;
        }
        sleep_ms(5);
    }
}

bool cq_testsrv_running(cq_testsrv_t *s)
{
    if (s->pid <= 0)
        return false;
    int st;
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r == 0)
        return true;
    if (r == s->pid)
        s->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    live_del(s->pid);
    s->pid = 0;
    return false;
}

int cq_testsrv_kill(cq_testsrv_t *s, int sig)
{
    if (s->pid <= 0)
        return -1;
    int st = 0;
    kill(s->pid, sig);
    if (waitpid(s->pid, &st, 0) == s->pid)
        s->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    live_del(s->pid);
    s->pid = 0;
    return s->exit_status;
}

/* A server that did not stop cleanly on SIGTERM (a sanitizer's report, a crash at shutdown):
 * the end of its log goes to stderr before stop removes the directory. */
static void log_tail(const cq_testsrv_t *s, pid_t pid)
{
    char *log = slurp(s->log_path);
    size_t n = log ? strlen(log) : 0;
    fprintf(stderr, "# chanqd pid %d exited with status %d on SIGTERM; the end of its log:\n%s\n",
            (int)pid, s->exit_status, log ? log + (n > 6000 ? n - 6000 : 0) : "(none)");
    free(log);
}

int cq_testsrv_stop(cq_testsrv_t *s)
{
    int ret = -1;
    if (s->pid > 0) {
        pid_t pid = s->pid;
        kill(pid, SIGTERM);
        int64_t deadline = mono_ms() + 5000;
        int st = 0;
        pid_t r;
        while ((r = waitpid(pid, &st, WNOHANG)) == 0 && mono_ms() < deadline)
            sleep_ms(5);
        if (r == 0) {
            kill(pid, SIGKILL);
            r = waitpid(pid, &st, 0);
        }
        if (r == pid)
            s->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        live_del(pid);
        s->pid = 0;
        ret = s->exit_status;
        if (ret != 0)
            log_tail(s, pid);
    } else if (s->exit_status) {
        ret = s->exit_status;
    }
    if (s->dir[0]) {
        const char *keep = getenv("CQ_IT_KEEP");
        if (keep && *keep)
            fprintf(stderr, "# chanqd files kept in %s\n", s->dir);
        else
            rm_dir(s->dir);
        s->dir[0] = '\0';
    }
    return ret;
}

char *cq_testsrv_log(const cq_testsrv_t *s)
{
    return slurp(s->log_path);
}

bool cq_testsrv_log_wait(const cq_testsrv_t *s, const char *needle, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    for (;;) {
        char *log = cq_testsrv_log(s);
        bool found = log && strstr(log, needle);
        free(log);
        if (found)
            return true;
        if (mono_ms() >= deadline)
            return false;
        sleep_ms(10);
    }
}

/* ---- raw sockets ------------------------------------------------------------------------ */

int cq_raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int cq_raw_write(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

#define RAW_HTTP_MAX (1u << 20)

/* Reads from fd into buf[0..cap) until EOF; *len gets the count. 0 or a negative error. */
static int read_to_eof(int fd, char *buf, size_t cap, int timeout_ms, size_t *len)
{
    *len = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : CQ_ETIMEOUT;
        if (*len == cap)
            return -EMSGSIZE;
        ssize_t k = read(fd, buf + *len, cap - *len);
        if (k < 0 && errno != EINTR)
            return -errno;
        if (k == 0)
            return 0;
        *len += k > 0 ? (size_t)k : 0;
    }
}

int cq_raw_http(uint16_t port, const char *req, size_t n, int timeout_ms, char *body, size_t cap)
{
    int fd = cq_raw_connect(port);
    if (fd < 0)
        return fd;
    char *got = malloc(RAW_HTTP_MAX + 1);
    size_t len = 0;
    int r = got ? cq_raw_write(fd, req, n) : -ENOMEM;
    if (r == 0)
        r = read_to_eof(fd, got, RAW_HTTP_MAX, timeout_ms, &len);
    close(fd);
    int status = 0;
    if (r == 0) {
        got[len] = '\0';
        r = sscanf(got, "HTTP/1.1 %d", &status) == 1 ? status : -EPROTO;
        const char *b = strstr(got, "\r\n\r\n");
        snprintf(body, cap, "%s", b ? b + 4 : "");
    }
    free(got);
    return r;
}

/* Reads exactly n bytes before the deadline. */
static int read_exact(int fd, uint8_t *p, size_t n, int64_t deadline)
{
    while (n) {
        int left = (int)(deadline - mono_ms());
        struct pollfd pf = {fd, POLLIN, 0};
        int r = poll(&pf, 1, left < 0 ? 0 : left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return CQ_ETIMEOUT;
        ssize_t k = recv(fd, p, n, 0);
        if (k == 0)
            return CHANQ_SYNC_EOF;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int cq_raw_read_packet(int fd, uint8_t *buf, size_t cap, int timeout_ms, bool legacy)
{
    if (cap < 5)
        return -EMSGSIZE;
    int64_t deadline = mono_ms() + timeout_ms;
    int r = read_exact(fd, buf, 5, deadline);
    if (r < 0)
        return r;
    size_t len = legacy && buf[2] == 0x4E ? buf[3] : ((size_t)buf[2] << 8) | buf[3];
    if (5 + len > cap)
        return -EMSGSIZE;
    r = read_exact(fd, buf + 5, len, deadline);
    return r < 0 ? r : (int)(5 + len);
}

int cq_raw_send_core(int fd, chanq_client_t *core)
{
    for (;;) {
        const uint8_t *p;
        size_t n;
        int r = chanq_client_out(core, &p, &n);
        if (r < 0 || n == 0)
            return r;
        r = cq_raw_write(fd, p, n);
        if (r < 0)
            return r;
        chanq_client_out_consume(core, n);
    }
}

typedef struct collect {
    chanq_owned_msg_t *msgs;
    size_t cap, n;
    int err;
} collect_t;

static void on_collect(void *ud, const chanq_msg_t *m)
{
    collect_t *c = ud;
    if (c->n >= c->cap) {
        c->err = -ENOSPC;
        return;
    }
    if (chanq_owned_msg_copy(m, &c->msgs[c->n]) < 0) {
        c->err = -ENOMEM;
        return;
    }
    c->n++;
}

int cq_decode_packet(const uint8_t *pkt, size_t n, bool legacy, chanq_owned_msg_t *msgs, size_t cap)
{
    collect_t col = {msgs, cap, 0, 0};
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.framing = legacy ? CHANQ_FRAMING_LEGACY : CHANQ_FRAMING_FIXED;
    o.on_message = on_collect;
    o.ud = &col;
    chanq_client_t *core;
    int r = chanq_client_new(&o, &core);
    if (r < 0)
        return r;
    r = chanq_client_feed(core, pkt, n);
    if (r >= 0 && chanq_client_in_pending(core))
        r = CQ_EDECODE;
    chanq_client_free(core);
    if (r < 0 || col.err < 0) {
        for (size_t i = 0; i < col.n; i++)
            chanq_owned_msg_done(&msgs[i]);
        return r < 0 ? r : col.err;
    }
    return (int)col.n;
}

/* ---- admin HTTP ------------------------------------------------------------------------- */

static char *http_get(uint16_t port, const char *path)
{
    int fd = cq_raw_connect(port);
    if (fd < 0)
        return NULL;
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (cq_raw_write(fd, req, (size_t)n) < 0) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    int64_t deadline = mono_ms() + 5000;
    while (b) {
        if (len + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb)
                break;
            b = nb;
            cap *= 2;
        }
        int left = (int)(deadline - mono_ms());
        struct pollfd pf = {fd, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            break;
        ssize_t k = recv(fd, b + len, cap - len - 1, 0);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    if (b)
        b[len] = '\0';
    return b;
}

int64_t cq_testsrv_metric(const cq_testsrv_t *s, const char *name)
{
    if (!s->admin_port)
        return -ENOTCONN;
    char *resp = http_get(s->admin_port, "/metrics");
    if (!resp)
        return -EIO;
    char *body = strstr(resp, "\r\n\r\n");
    if (strncmp(resp, "HTTP/1.1 200", 12) != 0 || !body) {
        free(resp);
        return -EIO;
    }
    int64_t sum = 0;
    bool found = false;
    size_t nl = strlen(name);
    for (char *line = body + 4; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next = '\0';
        if (line[0] != '#' && strncmp(line, name, nl) == 0 &&
            (line[nl] == '{' || line[nl] == ' ')) {
            char *sp = strrchr(line, ' ');
            if (sp) {
                sum += strtoll(sp + 1, NULL, 10);
                found = true;
            }
        }
        line = next ? next + 1 : NULL;
    }
    free(resp);
    return found ? sum : -ENOENT;
}

int64_t cq_testsrv_metric_wait_ge(const cq_testsrv_t *s, const char *name, int64_t min,
                                  int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    for (;;) {
        int64_t v = cq_testsrv_metric(s, name);
        if (v >= min || mono_ms() >= deadline)
            return v;
        sleep_ms(20);
    }
}

chanq_sync_t *cq_testsrv_connect(const cq_testsrv_t *s, bool server_listener,
                                 const chanq_opts_t *opts, int *ret_err)
{
    chanq_sync_t *c = NULL;
    int r = chanq_sync_connect("127.0.0.1", server_listener ? s->server_port : s->client_port, opts,
                               5000, &c);
    if (ret_err)
        *ret_err = r;
    return r < 0 ? NULL : c;
}

/* ---- helper processes ------------------------------------------------------------------- */

pid_t cq_testsrv_spawn_log(const char *const *argv, const char *log_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

pid_t cq_testsrv_spawn_ready(const char *const *argv, int *ret_port)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(fds[0]);
        close(fds[1]);
        return e;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    char line[128];
    size_t n = 0;
    int64_t deadline = mono_ms() + 10000;
    while (n < sizeof(line) - 1 && mono_ms() < deadline) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t k = read(fds[0], line + n, 1);
        if (k <= 0)
            break;
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    /* keep the pipe's read end open in a child-owned way: closing it could SIGPIPE the bridge */
    int port = 0;
    if (sscanf(line, "ready %d", &port) != 1 || port <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fds[0]);
        return -EPROTO;
    }
    *ret_port = port;
    return pid;
}

void cq_test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int64_t cq_test_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
