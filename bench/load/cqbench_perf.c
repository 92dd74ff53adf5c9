/* cqbench_perf.c - --perf-stat: `perf stat` on the server process over the measurement window.
 *
 * perf is started at the end of setup with its counters disabled (-D -1) and a control pipe
 * (--control fd:CTL,ACK); the window's start writes "enable" and its end "disable", each
 * waiting for perf's "ack", so the counts cover the window and nothing else (setup and
 * warm-up are excluded, as they are from the /proc figures). perf then gets SIGINT and its CSV
 * output (-x,) is read: task-clock (ms of CPU, every thread of the process), cycles and
 * instructions where the machine has hardware counters. The events must all be supported:
 * with -D -1 one unsupported event leaves the others uncounted too (perf 6.1), so bench/run.sh
 * probes them first. Any failure is reported on stderr and leaves G.perf_* at -1.
 */
#include "cqbench_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PERF_ACK_MS 3000 /* longest wait for perf's ack */

static struct {
    pid_t pid;    /* perf, or 0 */
    int ctl, ack; /* our ends of the control and ack pipes */
    char out[64]; /* perf's output file */
} P;

/* Ends perf (if still running), closes the pipes and removes the output file. */
static void perf_cleanup(void)
{
    if (P.pid > 0) {
        kill(P.pid, SIGKILL);
        waitpid(P.pid, NULL, 0);
    }
    if (P.ctl >= 0)
        close(P.ctl);
    if (P.ack >= 0)
        close(P.ack);
    if (P.out[0])
        unlink(P.out);
    P.pid = 0;
    P.ctl = P.ack = -1;
    P.out[0] = '\0';
}

static void perf_fail(const char *what)
{
    fprintf(stderr, "cqbench: perf stat: %s%s%s\n", what, errno ? ": " : "",
            errno ? strerror(errno) : "");
    perf_cleanup();
}

void cqb_perf_start(void)
{
    P.ctl = P.ack = -1;
    if (!O.perf_events || O.pid <= 0)
        return;
    signal(SIGPIPE, SIG_IGN); /* a dead perf: EPIPE on the control pipe, not the end of cqbench */
    int ctl[2], ack[2];
    snprintf(P.out, sizeof(P.out), "/tmp/cqbench-perf-XXXXXX");
    int ofd = mkstemp(P.out);
    if (ofd < 0) {
        P.out[0] = '\0';
        perf_fail("mkstemp");
        return;
    }
    close(ofd);
    if (pipe2(ctl, O_CLOEXEC) < 0) {
        perf_fail("pipe");
        return;
    }
    if (pipe2(ack, O_CLOEXEC) < 0) {
        close(ctl[0]);
        close(ctl[1]);
        perf_fail("pipe");
        return;
    }
    P.ctl = ctl[1];
    P.ack = ack[0];
    fflush(NULL);
    P.pid = fork();
    if (P.pid < 0) {
        close(ctl[0]);
        close(ack[1]);
        perf_fail("fork");
        return;
    }
    if (P.pid == 0) {
        char control[64];
        snprintf(control, sizeof(control), "fd:%d,%d", ctl[0], ack[1]);
        fcntl(ctl[0], F_SETFD, 0); /* perf's ends survive the exec */
        fcntl(ack[1], F_SETFD, 0);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) { /* perf's messages ("Events enabled") too: a failure shows as no ack */
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execlp("perf", "perf", "stat", "-D", "-1", "-x", ",", "-e", O.perf_events, "-o", P.out,
               "--control", control, "-p", O.pid_arg, (char *)NULL);
        _exit(127);
    }
    close(ctl[0]);
    close(ack[1]);
}

/* Writes cmd to perf's control pipe and waits for its "ack". */
static bool perf_cmd(const char *cmd)
{
    size_t n = strlen(cmd);
    if (write(P.ctl, cmd, n) != (ssize_t)n) {
        perf_fail("control pipe");
        return false;
    }
    struct pollfd pf = {.fd = P.ack, .events = POLLIN};
    char buf[64];
    int r;
    while ((r = poll(&pf, 1, PERF_ACK_MS)) < 0 && errno == EINTR)
        ;
    ssize_t k = r > 0 ? read(P.ack, buf, sizeof(buf) - 1) : -1;
    if (k <= 0) {
        errno = 0;
        perf_fail(r == 0 ? "no ack from perf (timed out)" : "perf exited");
        return false;
    }
    buf[k] = '\0';
    if (!strstr(buf, "ack")) {
        errno = 0;
        perf_fail("unexpected answer on the ack pipe");
        return false;
    }
    return true;
}

void cqb_perf_enable(void)
{
    if (P.pid > 0)
        perf_cmd("enable\n");
}

/* One value of perf's CSV output: "VALUE,UNIT,EVENT,...": -1 when not counted or supported. */
static double csv_value(const char *line)
{
    if (line[0] == '<')
        return -1;
    char *end;
    double v = strtod(line, &end);
    return end == line || *end != ',' ? -1 : v;
}

void cqb_perf_stop(void)
{
    if (P.pid <= 0)
        return;
    if (!perf_cmd("disable\n"))
        return;
    kill(P.pid, SIGINT);
    int st;
    while (waitpid(P.pid, &st, 0) < 0 && errno == EINTR)
        ;
    P.pid = 0;
    FILE *f = fopen(P.out, "r");
    if (!f) {
        perf_fail("no output");
        return;
    }
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char *ev = strchr(line, ',');
        ev = ev ? strchr(ev + 1, ',') : NULL;
        if (!ev)
            continue;
        ev++;
        double v = csv_value(line);
        if (strncmp(ev, "task-clock,", 11) == 0)
            G.perf_task_s = v < 0 ? -1 : v / 1e3; /* msec */
        else if (strncmp(ev, "cycles,", 7) == 0 || strncmp(ev, "cpu-cycles,", 11) == 0)
            G.perf_cycles = v;
        else if (strncmp(ev, "instructions,", 13) == 0)
            G.perf_instr = v;
    }
    fclose(f);
    perf_cleanup();
}
