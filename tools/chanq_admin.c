/* chanq_admin.c - `chanq admin`: the manager's operations from a shell, over its JSON API
 * (--mgr-http-addr; doc/mgr.md "Console JSON API"), authenticated with the admin token as
 * `Authorization: Bearer` (no session, no CSRF token: a browser cannot send that header
 * cross-site).
 *
 *   chanq admin [--mgr-http H:P] --admin-token-file F [--json] [--timeout MS] COMMAND [ARGS]
 *     servers | shards | topics | modules | audit [--limit N]
 *     module set ID --produce A,B --consume A,B [--admin] [--token-file F] [--groups 1,2]
 *     module delete ID
 *     offline APPID | online APPID | topic-offline TOPIC | topic-online TOPIC
 *     topic-retention TOPIC DAYS | topic-create TOPIC [DAYS]
 *     invalidate TOPIC SHARD OFFSET --reason TEXT | message TOPIC SHARD OFFSET
 *     message-key TOPIC SHARD PRODUCER_ID SEQ
 *     bindings | bindings set FILE
 *
 * Reads print a table (--json: the API's document as received); changes print "version N".
 * Exit codes: 0 ok; 1 the manager refused (its status and {"error"} text on stderr) or could not
 * be reached; 2 usage.
 *
 * The HTTP/1.1 client is the smallest that works against the manager: one request per
 * connection (Connection: close), the answer read to EOF, its status line and Content-Length
 * checked. Tools may do their own I/O (src/io is the servers' edge).
 */
#include "chanq_admin.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EXIT_REFUSED     1
#define EXIT_USAGE       2
#define DEFAULT_MGR_HTTP "127.0.0.1:12121"
#define ANSWER_MAX       (16u << 20)
#define TOKEN_MAX        4096

typedef struct adm {
    const char *mgr;        /* host:port */
    const char *token_file; /* the admin token */
    const char *mod_token_file;
    const char *produce, *consume, *groups; /* module set: comma lists, NULL = not given */
    const char *reason;                     /* invalidate */
    bool json, admin;
    int timeout_ms;
    long limit; /* audit */
    char token[TOKEN_MAX];
} adm_t;

/* ---- usage --------------------------------------------------------------------------------- */

static void admin_usage(FILE *f)
{
    fprintf(f, "usage: chanq admin [OPTIONS] COMMAND [ARGS]\n"
               "\n"
               "Commands (the manager's JSON API, --mgr-http-addr):\n"
               "  servers                 servers: role, state, serverinfo, rates\n"
               "  shards                  each shard's master, standbys and replication\n"
               "  topics                  topics: online, retention, messages, consumer lag\n"
               "  modules                 modules and their permissions (never tokens)\n"
               "  audit [--limit N]       the last N audit lines (default 20)\n"
               "  module set ID --produce A,B --consume A,B [--admin] [--groups 1,2]\n"
               "                [--token-file F]   (a new module needs --token-file)\n"
               "  module delete ID\n"
               "  offline APPID | online APPID       take a server out of service / back\n"
               "  topic-offline TOPIC | topic-online TOPIC\n"
               "  topic-retention TOPIC DAYS   keep its messages DAYS days (0: forever)\n"
               "  topic-create TOPIC [DAYS]    a new topic on every shard (DAYS: its retention;\n"
               "                               none: each server's own)\n"
               "  invalidate TOPIC SHARD OFFSET --reason TEXT\n"
               "                          the message is never delivered again (audited with\n"
               "                          TEXT; waits for the shard's master, at least 15 s)\n"
               "  message TOPIC SHARD OFFSET\n"
               "                          look a message up (on the shard's standby): its state,\n"
               "                          producer, time, content, and who consumed past it\n"
               "  message-key TOPIC SHARD PRODUCER_ID SEQ   the same by producer key\n"
               "  bindings                the bridge's bindings (--json: the document)\n"
               "  bindings set FILE       replace them with FILE's document (--bridge-file's\n"
               "                          format; {\"bindings\":[]} removes them all)\n"
               "\n"
               "Options:\n"
               "  --mgr-http H:P          the manager's --mgr-http-addr (default " DEFAULT_MGR_HTTP
               ")\n"
               "  --admin-token-file F    the admin token (the manager's --mgr-admin-token-file)\n"
               "  --json                  print the API's JSON instead of a table\n"
               "  --timeout MS            per request (default 10000)\n"
               "\n"
               "Exit codes: 0 ok, 1 refused by the manager or unreachable, 2 usage.\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "chanq admin: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'chanq admin --help'.\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

typedef struct answer {
    int status;
    char *body; /* owned, NUL-terminated */
    size_t len;
} answer_t;

static int dial(const char *hostport, int timeout_ms)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof(host))
        return -EINVAL;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:port */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return -EHOSTUNREACH;
    int fd = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0)
            continue;
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            fd = s;
            break;
        }
        fd = -errno;
        close(s);
    }
    freeaddrinfo(res);
    return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads to EOF (the manager closes after its answer: Connection: close). */
static int read_all(int fd, int timeout_ms, char **ret, size_t *ret_len)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, timeout_ms);
        if (pr == 0) {
            free(buf);
            return -ETIMEDOUT;
        }
        if (len + 1 >= cap) {
            char *nb = cap < ANSWER_MAX ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                return -EMSGSIZE;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = pr < 0 ? -1 : recv(fd, buf + len, cap - 1 - len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* Splits "HTTP/1.1 NNN ...\r\n...\r\n\r\nBODY" into status and body (Content-Length bytes when
 * given). 0 or -EPROTO. */
static int parse_answer(char *raw, size_t len, answer_t *a)
{
    if (len < 12 || strncmp(raw, "HTTP/1.", 7) != 0 || raw[8] != ' ')
        return -EPROTO;
    a->status = atoi(raw + 9);
    char *sep = strstr(raw, "\r\n\r\n");
    if (!sep || a->status < 100 || a->status > 599)
        return -EPROTO;
    char *body = sep + 4;
    size_t blen = len - (size_t)(body - raw);
    for (char *h = strstr(raw, "\r\n"); h && h < sep; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0) {
            unsigned long cl = strtoul(h + 17, NULL, 10);
            if (cl > blen)
                return -EPROTO; /* cut short */
            blen = cl;
        }
    }
    a->body = malloc(blen + 1);
    if (!a->body)
        return -ENOMEM;
    memcpy(a->body, body, blen);
    a->body[blen] = '\0';
    a->len = blen;
    return 0;
}

/* One request; body NULL for none. 0 with *a filled (free a->body), or < 0 (not reached). */
static int http(const adm_t *o, const char *method, const char *path, const char *body, answer_t *a)
{
    memset(a, 0, sizeof(*a));
    int fd = dial(o->mgr, o->timeout_ms);
    if (fd < 0)
        return fd;
    size_t blen = body ? strlen(body) : 0;
    char head[1024 + TOKEN_MAX];
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                      "Accept: application/json\r\nConnection: close\r\n"
                      "%sContent-Length: %zu\r\n\r\n",
                      method, path, o->mgr, o->token,
                      strcmp(method, "GET") ? "Content-Type: application/json\r\n" : "", blen);
    int r = hn > 0 && (size_t)hn < sizeof(head) ? write_all(fd, head, (size_t)hn) : -EINVAL;
    if (r == 0 && blen)
        r = write_all(fd, body, blen);
    char *raw = NULL;
    size_t rawlen = 0;
    if (r == 0)
        r = read_all(fd, o->timeout_ms, &raw, &rawlen);
    close(fd);
    if (r == 0) {
        r = parse_answer(raw, rawlen, a);
        free(raw);
    }
    return r;
}

/* The request, then: a 2xx answer's JSON (owned) or NULL after printing why (*rc set). */
static json_t *call(const adm_t *o, const char *method, const char *path, const char *body, int *rc)
{
    answer_t a;
    int r = http(o, method, path, body, &a);
    if (r < 0) {
        fprintf(stderr, "chanq admin: %s %s: %s: %s\n", method, path, o->mgr, strerror(-r));
        *rc = EXIT_REFUSED;
        return NULL;
    }
    json_error_t je;
    json_t *doc = json_loadb(a.body, a.len, 0, &je);
    if (a.status < 200 || a.status > 299) {
        const char *why = json_string_value(json_object_get(doc, "error"));
        fprintf(stderr, "chanq admin: %s %s: %d: %s\n", method, path, a.status, why ? why : a.body);
        json_decref(doc);
        free(a.body);
        *rc = EXIT_REFUSED;
        return NULL;
    }
    if (!doc)
        fprintf(stderr, "chanq admin: %s %s: the answer is not JSON: %s\n", method, path, je.text);
    free(a.body);
    *rc = doc ? 0 : EXIT_REFUSED;
    return doc;
}

/* ---- tables -------------------------------------------------------------------------------- */

#define COLS_MAX 16

typedef struct table {
    size_t ncols, nrows, cap;
    char **cells; /* nrows * ncols owned strings; row 0 is the header */
} table_t;

static void table_row(table_t *t, const char *const *v)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **c = realloc(t->cells, cap * t->ncols * sizeof(*c));
        if (!c)
            return;
        t->cells = c;
        t->cap = cap;
    }
    for (size_t i = 0; i < t->ncols; i++)
        t->cells[t->nrows * t->ncols + i] = strdup(v[i] ? v[i] : "-");
    t->nrows++;
}

static void table_print(table_t *t)
{
    size_t w[COLS_MAX] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t i = 0; i < t->ncols; i++) {
            const char *s = t->cells[r * t->ncols + i];
            size_t l = s ? strlen(s) : 0;
            w[i] = l > w[i] ? l : w[i];
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t i = 0; i < t->ncols; i++) {
            const char *s = t->cells[r * t->ncols + i];
            if (i + 1 < t->ncols)
                printf("%-*s  ", (int)w[i], s ? s : "");
            else
                printf("%s\n", s ? s : "");
        }
    }
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* A JSON value as cell text: strings as is, integers, reals with 1 decimal, booleans yes/no,
 * arrays joined with ",", null/absent "-". */
/* A topic's retention: "own" (each server's, never set by the manager), "forever", "N days"
 * or "N s". */
static void retention_cell(const json_t *v, char *out, size_t n)
{
    json_int_t r = json_is_integer(v) ? json_integer_value(v) : -1;
    if (r < 0)
        snprintf(out, n, "own");
    else if (r == 0)
        snprintf(out, n, "forever");
    else if (r % 86400 == 0)
        snprintf(out, n, "%" JSON_INTEGER_FORMAT "d", r / 86400);
    else
        snprintf(out, n, "%" JSON_INTEGER_FORMAT "s", r);
}

static void cell(const json_t *v, char *out, size_t n)
{
    if (!v || json_is_null(v)) {
        snprintf(out, n, "-");
    } else if (json_is_string(v)) {
        const char *t = json_string_value(v);
        snprintf(out, n, "%s", *t ? t : "-"); /* a cell is never empty: columns stay columns */
    } else if (json_is_integer(v)) {
        snprintf(out, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(out, n, "%.1f", json_real_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(out, n, "%s", json_is_true(v) ? "yes" : "no");
    } else if (json_is_array(v)) {
        size_t off = 0, i;
        json_t *e;
        out[0] = '\0';
        json_array_foreach(v, i, e)
        {
            char one[64];
            cell(e, one, sizeof(one));
            off += (size_t)snprintf(out + off, off < n ? n - off : 0, "%s%s", i ? "," : "", one);
            if (off >= n)
                break;
        }
        if (json_array_size(v) == 0)
            snprintf(out, n, "(none)");
    } else {
        snprintf(out, n, "?");
    }
}

static const char *server_state(const json_t *s)
{
    if (json_is_true(json_object_get(s, "offline")))
        return json_is_true(json_object_get(s, "draining")) ? "draining" : "offline";
    return json_is_true(json_object_get(s, "stale")) ? "stale" : "live";
}

static void print_servers(const json_t *doc)
{
    static const char *const hdr[] = {"APPID",  "GROUP",  "ADDR",  "SHARD",   "ROLE",
                                      "STATE",  "CPU%",   "MEM",   "SOCKETS", "PACKAGES",
                                      "PROD/S", "CONS/S", "CONFIG"};
    table_t t = {.ncols = 13};
    table_row(&t, hdr);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "servers"), i, s)
    {
        char v[13][64];
        const json_t *si = json_object_get(s, "serverinfo");
        cell(json_object_get(s, "appid"), v[0], 64);
        cell(json_object_get(s, "group_id"), v[1], 64);
        cell(json_object_get(s, "addr"), v[2], 64);
        cell(json_object_get(s, "shard"), v[3], 64);
        snprintf(v[4], 64, "%s", json_is_true(json_object_get(s, "master")) ? "master" : "standby");
        snprintf(v[5], 64, "%s", server_state(s));
        cell(json_object_get(si, "cpu"), v[6], 64);
        cell(json_object_get(si, "mem"), v[7], 64);
        cell(json_object_get(si, "sockets"), v[8], 64);
        cell(json_object_get(si, "packages"), v[9], 64);
        cell(json_object_get(s, "produce_rate"), v[10], 64);
        cell(json_object_get(s, "consume_rate"), v[11], 64);
        cell(json_object_get(s, "config_version"), v[12], 64);
        const char *row[13];
        for (int k = 0; k < 13; k++)
            row[k] = v[k];
        table_row(&t, row);
    }
    table_print(&t);
}

static void print_shards(const json_t *doc)
{
    static const char *const hdr[] = {"SHARD", "MASTER",      "STANDBYS",  "IO",
                                      "SQL",   "LAG_SECONDS", "BEHIND_MS", "ALERT"};
    table_t t = {.ncols = 8};
    table_row(&t, hdr);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "shards"), i, s)
    {
        char v[8][256];
        const json_t *r = json_object_get(s, "repl");
        cell(json_object_get(s, "shard"), v[0], 256);
        cell(json_object_get(s, "master"), v[1], 256);
        cell(json_object_get(s, "standbys"), v[2], 256);
        cell(json_object_get(r, "io_running"), v[3], 256);
        cell(json_object_get(r, "sql_running"), v[4], 256);
        cell(json_object_get(r, "lag_seconds"), v[5], 256);
        cell(json_object_get(r, "behind_ms"), v[6], 256);
        snprintf(v[7], 256, "%s", json_is_true(json_object_get(s, "alert")) ? "ALERT" : "ok");
        const char *row[8];
        for (int k = 0; k < 8; k++)
            row[k] = v[k];
        table_row(&t, row);
    }
    table_print(&t);
}

/* "shard:last_offset,..." and "consumer@shard:lag,..." of one topic. */
static void topic_lists(const json_t *tp, char *msgs, size_t mn, char *lags, size_t ln)
{
    size_t i, mo = 0, lo = 0;
    json_t *e;
    msgs[0] = lags[0] = '\0';
    json_array_foreach(json_object_get(tp, "shards"), i, e)
    {
        if (mo < mn)
            mo += (size_t)snprintf(msgs + mo, mn - mo,
                                   "%s%" JSON_INTEGER_FORMAT ":%" JSON_INTEGER_FORMAT, i ? "," : "",
                                   json_integer_value(json_object_get(e, "shard")),
                                   json_integer_value(json_object_get(e, "last_offset")));
    }
    json_array_foreach(json_object_get(tp, "consumers"), i, e)
    {
        if (lo < ln)
            lo += (size_t)snprintf(lags + lo, ln - lo,
                                   "%s%s@%" JSON_INTEGER_FORMAT ":%" JSON_INTEGER_FORMAT,
                                   i ? "," : "", json_string_value(json_object_get(e, "id")),
                                   json_integer_value(json_object_get(e, "shard")),
                                   json_integer_value(json_object_get(e, "lag")));
    }
    if (!msgs[0])
        snprintf(msgs, mn, "-");
    if (!lags[0])
        snprintf(lags, ln, "-");
}

static void print_topics(const json_t *doc)
{
    static const char *const hdr[] = {
        "TOPIC", "STATE", "RETENTION", "PROD/S", "SHARD:LAST_OFFSET", "CONSUMER@SHARD:LAG"};
    table_t t = {.ncols = 6};
    table_row(&t, hdr);
    size_t i;
    json_t *tp;
    json_array_foreach(json_object_get(doc, "topics"), i, tp)
    {
        char v[6][512];
        cell(json_object_get(tp, "name"), v[0], 512);
        snprintf(v[1], 512, "%s",
                 json_is_false(json_object_get(tp, "online")) ? "offline" : "online");
        retention_cell(json_object_get(tp, "retention"), v[2], 512);
        cell(json_object_get(tp, "produce_rate"), v[3], 512);
        topic_lists(tp, v[4], 512, v[5], 512);
        const char *row[6];
        for (int k = 0; k < 6; k++)
            row[k] = v[k];
        table_row(&t, row);
    }
    table_print(&t);
}

static void print_modules(const json_t *doc)
{
    static const char *const hdr[] = {"MODULE", "PRODUCE", "CONSUME", "ADMIN", "GROUPS"};
    table_t t = {.ncols = 5};
    table_row(&t, hdr);
    const char *id;
    json_t *m;
    json_object_foreach((json_t *)json_object_get(doc, "modules"), id, m)
    {
        char v[5][512];
        snprintf(v[0], 512, "%s", id);
        cell(json_object_get(m, "produce"), v[1], 512);
        cell(json_object_get(m, "consume"), v[2], 512);
        cell(json_object_get(m, "admin"), v[3], 512);
        const json_t *g = json_object_get(m, "groups");
        if (g)
            cell(g, v[4], 512);
        else
            snprintf(v[4], 512, "(all)");
        const char *row[5];
        for (int k = 0; k < 5; k++)
            row[k] = v[k];
        table_row(&t, row);
    }
    table_print(&t);
}

static void print_audit(const json_t *doc)
{
    static const char *const hdr[] = {"TIME",   "ADDR",    "AUTH",  "ACTION",
                                      "TARGET", "VERSION", "RESULT"};
    static const char *const keys[] = {"time",   "addr",    "auth",  "action",
                                       "target", "version", "result"};
    table_t t = {.ncols = 7};
    table_row(&t, hdr);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "entries"), i, e)
    {
        char v[7][256];
        const char *row[7];
        for (int k = 0; k < 7; k++) {
            cell(json_object_get(e, keys[k]), v[k], 256);
            row[k] = v[k];
        }
        table_row(&t, row);
    }
    table_print(&t);
}

/* A binding's target as the document says it: "broadcast global", "route user_id". */
static void binding_target(const json_t *b, char *out, size_t n)
{
    const char *bc = json_string_value(json_object_get(b, "broadcast"));
    const char *rt = json_string_value(json_object_get(b, "route"));
    if (bc)
        snprintf(out, n, "broadcast %s", bc);
    else if (rt)
        snprintf(out, n, "route %s", rt);
    else
        snprintf(out, n, "-");
}

static void print_bindings(const json_t *doc)
{
    static const char *const hdr[] = {"TOPIC", "TARGET", "MSG_TYPE"};
    table_t t = {.ncols = 3};
    table_row(&t, hdr);
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(doc, "bindings"), i, b)
    {
        char v[3][256];
        cell(json_object_get(b, "topic"), v[0], 256);
        binding_target(b, v[1], 256);
        cell(json_object_get(b, "msg_type"), v[2], 256);
        const char *row[3] = {v[0], v[1], v[2]};
        table_row(&t, row);
    }
    table_print(&t);
}

/* ---- commands ------------------------------------------------------------------------------ */

static int read_token(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "chanq admin: %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    size_t len = fread(out, 1, n - 1, f);
    fclose(f);
    out[len] = '\0';
    while (len && (out[len - 1] == '\n' || out[len - 1] == '\r' || out[len - 1] == ' '))
        out[--len] = '\0';
    if (!len) {
        fprintf(stderr, "chanq admin: %s: empty token\n", path);
        return EXIT_USAGE;
    }
    return 0;
}

static int cmd_read(const adm_t *o, const char *what)
{
    char path[64];
    if (strcmp(what, "audit") == 0)
        snprintf(path, sizeof(path), "/api/audit?limit=%ld", o->limit);
    else if (strcmp(what, "bindings") == 0)
        snprintf(path, sizeof(path), "/api/bindings");
    else
        snprintf(path, sizeof(path), "/api/state");
    int rc;
    json_t *doc = call(o, "GET", path, NULL, &rc);
    if (!doc)
        return rc;
    bool whole = strcmp(what, "audit") == 0 || strcmp(what, "bindings") == 0;
    if (o->json) {
        /* bindings: the document in its own order, ready for `bindings set` */
        json_t *part = whole ? doc : json_object_get(doc, what);
        size_t sort = strcmp(what, "bindings") == 0 ? 0 : JSON_SORT_KEYS;
        char *s = json_dumps(part, JSON_INDENT(2) | sort | JSON_ENCODE_ANY);
        printf("%s\n", s ? s : "null");
        free(s);
    } else if (strcmp(what, "bindings") == 0) {
        print_bindings(doc);
    } else if (strcmp(what, "servers") == 0) {
        print_servers(doc);
    } else if (strcmp(what, "shards") == 0) {
        print_shards(doc);
    } else if (strcmp(what, "topics") == 0) {
        print_topics(doc);
    } else if (strcmp(what, "modules") == 0) {
        print_modules(doc);
    } else {
        print_audit(doc);
    }
    json_decref(doc);
    return 0;
}

/* A change: prints "version N" (or the JSON). */
static int cmd_change(const adm_t *o, const char *method, const char *path, const char *body)
{
    int rc;
    json_t *doc = call(o, method, path, body, &rc);
    if (!doc)
        return rc;
    if (o->json) {
        char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        printf("version %" JSON_INTEGER_FORMAT "\n",
               json_integer_value(json_object_get(doc, "version")));
    }
    json_decref(doc);
    return 0;
}

/* "a,b,c" as a JSON array of strings (ints when as_int); "" is []. NULL on a bad element. */
static json_t *list_json(const char *s, bool as_int)
{
    json_t *a = json_array();
    char *dup = strdup(s), *save = NULL;
    if (!a || !dup) {
        json_decref(a);
        free(dup);
        return NULL;
    }
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        json_t *v;
        if (as_int) {
            char *end;
            unsigned long long n = strtoull(tok, &end, 10);
            if (*end || n > UINT32_MAX) {
                json_decref(a);
                free(dup);
                return NULL;
            }
            v = json_integer((json_int_t)n);
        } else {
            v = json_string(tok);
        }
        json_array_append_new(a, v);
    }
    free(dup);
    return a;
}

static bool is_id(const char *s, unsigned long *ret)
{
    char *end;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v > UINT32_MAX)
        return false;
    *ret = v;
    return true;
}

static int cmd_module_set(const adm_t *o, const char *id)
{
    unsigned long mid;
    if (!is_id(id, &mid))
        return usage_error("module set: ID must be an unsigned integer, not \"%s\"", id);
    if (!o->produce || !o->consume)
        return usage_error("module set: %s", "--produce and --consume are required");
    json_t *body = json_object();
    json_t *prod = list_json(o->produce, false), *cons = list_json(o->consume, false);
    json_t *groups = o->groups ? list_json(o->groups, true) : NULL;
    int rc = 0;
    if (!body || !prod || !cons || (o->groups && !groups)) {
        rc = usage_error("module set: bad list%s", o->groups && !groups ? " in --groups" : "");
        goto out;
    }
    json_object_set_new(body, "produce", prod);
    json_object_set_new(body, "consume", cons);
    prod = cons = NULL;
    json_object_set_new(body, "admin", json_boolean(o->admin));
    if (groups) {
        json_object_set_new(body, "groups", groups);
        groups = NULL;
    }
    if (o->mod_token_file) {
        char tok[TOKEN_MAX];
        if ((rc = read_token(o->mod_token_file, tok, sizeof(tok))) != 0)
            goto out;
        json_object_set_new(body, "token", json_string(tok));
    }
    char *text = json_dumps(body, JSON_COMPACT);
    char path[64];
    snprintf(path, sizeof(path), "/api/modules/%lu", mid);
    rc = text ? cmd_change(o, "PUT", path, text) : EXIT_REFUSED;
    free(text);
out:
    json_decref(prod);
    json_decref(cons);
    json_decref(groups);
    json_decref(body);
    return rc;
}

/* bindings set FILE: the file's document as it is, so that the manager's errors (the bindings
 * parser's, with a line and column for bad JSON) point into the file. */
static int cmd_bindings_set(const adm_t *o, const char *file)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        fprintf(stderr, "chanq admin: %s: %s\n", file, strerror(errno));
        return EXIT_USAGE;
    }
    size_t cap = (1u << 20) + 2, len; /* the parser's limit, and one byte to see it passed */
    char *text = malloc(cap);
    len = text ? fread(text, 1, cap - 1, f) : 0;
    bool err = !text || ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "chanq admin: %s: %s\n", file, text ? "read error" : strerror(ENOMEM));
        free(text);
        return EXIT_USAGE;
    }
    text[len] = '\0';
    int rc;
    if (strlen(text) != len) /* the request carries a C string */
        rc = usage_error("bindings set: %s: not a JSON document (it has a NUL byte)", file);
    else
        rc = cmd_change(o, "PUT", "/api/bindings", text);
    free(text);
    return rc;
}

/* Percent-encodes a topic name for a path segment (names are [A-Za-z0-9_] in practice). */
static void path_segment(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; *s && o + 4 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '-' || c == '.')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, n - o, "%%%02X", c);
    }
    out[o] = '\0';
}

/* topic-create TOPIC [DAYS]: the name is checked here too, as it goes into the JSON body. */
static int cmd_topic_create(const adm_t *o, int argc, char **argv)
{
    const char *t = argc >= 2 ? argv[1] : "";
    size_t n = strlen(t);
    bool ok = (argc == 2 || argc == 3) && n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)t[i]) || t[i] == '_';
    char *end = NULL;
    long days = argc == 3 ? strtol(argv[2], &end, 10) : -1;
    if (!ok || (argc == 3 && (end == argv[2] || *end || days < 0 || days > 36500)))
        return usage_error("topic-create TOPIC [DAYS]: TOPIC of [A-Za-z0-9_] (1 to 64), DAYS an "
                           "integer from 0 (keep forever) to 36500");
    char body[160];
    if (days < 0)
        snprintf(body, sizeof(body), "{\"topic\":\"%s\"}", t);
    else
        snprintf(body, sizeof(body), "{\"topic\":\"%s\",\"retention_days\":%ld}", t, days);
    return cmd_change(o, "POST", "/api/topics", body);
}

/* A decimal in [lo, hi], the whole string. */
static bool number_in(const char *s, unsigned long long lo, unsigned long long hi,
                      unsigned long long *ret)
{
    char *end = NULL;
    if (!*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    *ret = strtoull(s, &end, 10);
    return !errno && !*end && *ret >= lo && *ret <= hi;
}

/* invalidate TOPIC SHARD OFFSET --reason TEXT: answered once the shard's master has done it. */
static int cmd_invalidate(const adm_t *o, int argc, char **argv)
{
    unsigned long long shard = 0, off = 0;
    if (argc != 4 || !number_in(argv[2], 0, UINT32_MAX, &shard) ||
        !number_in(argv[3], 1, (1ull << 53) - 1, &off) || !o->reason || !*o->reason ||
        strlen(o->reason) > 512)
        return usage_error("invalidate TOPIC SHARD OFFSET --reason TEXT: SHARD an integer from 0, "
                           "OFFSET from 1 to 2^53-1, TEXT 1 to 512 bytes");
    char seg[200], path[320];
    path_segment(argv[1], seg, sizeof(seg));
    snprintf(path, sizeof(path), "/api/topics/%s/messages/%llu/%llu/invalidate", seg, shard, off);
    json_t *b = json_pack("{s:s}", "reason", o->reason);
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body)
        return usage_error("%s", "--reason: not UTF-8 text");
    adm_t w = *o; /* the manager waits up to 10 s for the master */
    if (w.timeout_ms < 15000)
        w.timeout_ms = 15000;
    int rc;
    json_t *doc = call(&w, "POST", path, body, &rc);
    free(body);
    if (!doc)
        return rc;
    char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    if (o->json)
        printf("%s\n", s ? s : "{}");
    else
        printf("topic %s shard %llu offset %llu: invalid (state 0)\n", argv[1], shard, off);
    free(s);
    json_decref(doc);
    return 0;
}

/* The lines of a looked-up message (message TOPIC SHARD OFFSET). */
static void print_message(const json_t *doc)
{
    const json_t *m = json_object_get(doc, "message");
    const json_t *c = json_object_get(m, "content");
    const json_t *h = json_object_get(m, "content_hex");
    printf(
        "topic        %s\nshard        %" JSON_INTEGER_FORMAT "\noffset       %" JSON_INTEGER_FORMAT
        "\nstate        %s\ncreate_time  %" JSON_INTEGER_FORMAT
        "\nproducer_id  %" JSON_INTEGER_FORMAT "\nseq          %" JSON_INTEGER_FORMAT
        "\nsize         %" JSON_INTEGER_FORMAT "%s\nserved_by    %" JSON_INTEGER_FORMAT " (%s)\n",
        json_string_value(json_object_get(doc, "topic")),
        json_integer_value(json_object_get(doc, "shard")),
        json_integer_value(json_object_get(doc, "offset")),
        json_integer_value(json_object_get(m, "state")) ? "1 valid" : "0 invalid",
        json_integer_value(json_object_get(m, "create_time")),
        json_integer_value(json_object_get(m, "producer_id")),
        json_integer_value(json_object_get(m, "seq")),
        json_integer_value(json_object_get(m, "size")),
        json_is_true(json_object_get(m, "truncated")) ? " (truncated)" : "",
        json_integer_value(json_object_get(doc, "served_by")),
        json_string_value(json_object_get(doc, "role")));
    if (c)
        printf("content      %s\n", json_string_value(c));
    else
        printf("content_hex  %s\n", h ? json_string_value(h) : "");
    const json_t *cs = json_object_get(doc, "consumers");
    printf("CONSUMER\tOFFSET\tCONSUMED\n");
    for (size_t i = 0; i < json_array_size(cs); i++) {
        const json_t *e = json_array_get(cs, i);
        printf("%s\t%" JSON_INTEGER_FORMAT "\t%s\n", json_string_value(json_object_get(e, "id")),
               json_integer_value(json_object_get(e, "offset")),
               json_is_true(json_object_get(e, "consumed")) ? "yes" : "no");
    }
}

/* message TOPIC SHARD OFFSET, message-key TOPIC SHARD PRODUCER_ID SEQ: the manager's lookup. */
static int cmd_message(const adm_t *o, int argc, char **argv)
{
    unsigned long long shard = 0, off = 0, seq = 0;
    bool key = strcmp(argv[0], "message-key") == 0;
    if (argc != (key ? 5 : 4) || !number_in(argv[2], 0, UINT32_MAX, &shard) ||
        !number_in(argv[3], 1, (1ull << 53) - 1, &off) ||
        (key && !number_in(argv[4], 0, (1ull << 53) - 1, &seq)))
        return usage_error("message TOPIC SHARD OFFSET | message-key TOPIC SHARD PRODUCER_ID SEQ: "
                           "SHARD an integer from 0, OFFSET and PRODUCER_ID from 1 to 2^53-1, "
                           "SEQ from 0");
    char seg[200], path[320];
    path_segment(argv[1], seg, sizeof(seg));
    if (key)
        snprintf(path, sizeof(path), "/api/topics/%s/messages/%llu?producer_id=%llu&seq=%llu", seg,
                 shard, off, seq);
    else
        snprintf(path, sizeof(path), "/api/topics/%s/messages/%llu/%llu", seg, shard, off);
    adm_t w = *o;
    if (w.timeout_ms < 15000)
        w.timeout_ms = 15000;
    int rc;
    json_t *doc = call(&w, "GET", path, NULL, &rc);
    if (!doc)
        return rc;
    if (o->json) {
        char *s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "{}");
        free(s);
    } else {
        print_message(doc);
    }
    json_decref(doc);
    return 0;
}

static int run_command(const adm_t *o, int argc, char **argv)
{
    const char *cmd = argv[0];
    const char *arg = argc > 1 ? argv[1] : NULL;
    static const char *const reads[] = {"servers", "shards", "topics", "modules", "audit"};
    if (strcmp(cmd, "bindings") == 0) {
        if (argc == 1)
            return cmd_read(o, cmd);
        if (argc != 3 || strcmp(arg, "set") != 0)
            return usage_error("%s", "usage: bindings | bindings set FILE");
        return cmd_bindings_set(o, argv[2]);
    }
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++)
        if (strcmp(cmd, reads[i]) == 0)
            return argc == 1 ? cmd_read(o, cmd) : usage_error("%s takes no argument", cmd);
    char path[256], seg[200];
    unsigned long id;
    if (strcmp(cmd, "module") == 0) {
        if (argc != 3 || (strcmp(arg, "set") != 0 && strcmp(arg, "delete") != 0))
            return usage_error("%s", "usage: module set ID ... | module delete ID");
        if (strcmp(arg, "set") == 0)
            return cmd_module_set(o, argv[2]);
        if (!is_id(argv[2], &id))
            return usage_error("module delete: ID must be an unsigned integer, not \"%s\"",
                               argv[2]);
        snprintf(path, sizeof(path), "/api/modules/%lu", id);
        return cmd_change(o, "DELETE", path, NULL);
    }
    bool off = strcmp(cmd, "offline") == 0, on = strcmp(cmd, "online") == 0;
    if (off || on) {
        if (argc != 2 || !is_id(arg, &id))
            return usage_error("%s APPID: an unsigned integer", cmd);
        snprintf(path, sizeof(path), "/api/servers/%lu/%s", id, cmd);
        return cmd_change(o, "POST", path, "{}");
    }
    if (strcmp(cmd, "invalidate") == 0)
        return cmd_invalidate(o, argc, argv);
    if (strcmp(cmd, "message") == 0 || strcmp(cmd, "message-key") == 0)
        return cmd_message(o, argc, argv);
    if (strcmp(cmd, "topic-create") == 0)
        return cmd_topic_create(o, argc, argv);
    if (strcmp(cmd, "topic-retention") == 0) {
        char *end = NULL;
        long days = argc == 3 ? strtol(argv[2], &end, 10) : -1;
        if (argc != 3 || !*arg || end == argv[2] || *end || days < 0 || days > 36500)
            return usage_error("topic-retention TOPIC DAYS: DAYS an integer from 0 (keep "
                               "forever) to 36500");
        char body[64];
        path_segment(arg, seg, sizeof(seg));
        snprintf(path, sizeof(path), "/api/topics/%s/retention", seg);
        snprintf(body, sizeof(body), "{\"days\":%ld}", days);
        return cmd_change(o, "PUT", path, body);
    }
    bool toff = strcmp(cmd, "topic-offline") == 0, ton = strcmp(cmd, "topic-online") == 0;
    if (toff || ton) {
        if (argc != 2 || !*arg)
            return usage_error("%s TOPIC", cmd);
        path_segment(arg, seg, sizeof(seg));
        snprintf(path, sizeof(path), "/api/topics/%s/%s", seg, toff ? "offline" : "online");
        return cmd_change(o, "POST", path, "{}");
    }
    return usage_error("unknown command \"%s\"", cmd);
}

enum {
    O_MGR = 256,
    O_TOKEN,
    O_JSON,
    O_TIMEOUT,
    O_LIMIT,
    O_PRODUCE,
    O_CONSUME,
    O_ADMIN,
    O_MODTOKEN,
    O_GROUPS,
    O_REASON
};

static const struct option admin_opts[] = {{"mgr-http", required_argument, NULL, O_MGR},
                                           {"admin-token-file", required_argument, NULL, O_TOKEN},
                                           {"json", no_argument, NULL, O_JSON},
                                           {"timeout", required_argument, NULL, O_TIMEOUT},
                                           {"limit", required_argument, NULL, O_LIMIT},
                                           {"produce", required_argument, NULL, O_PRODUCE},
                                           {"consume", required_argument, NULL, O_CONSUME},
                                           {"admin", no_argument, NULL, O_ADMIN},
                                           {"token-file", required_argument, NULL, O_MODTOKEN},
                                           {"groups", required_argument, NULL, O_GROUPS},
                                           {"reason", required_argument, NULL, O_REASON},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};

/* One option: 0, 1 (--help printed), or EXIT_USAGE (said why). */
static int take_opt(adm_t *o, int c, const char *arg)
{
    char *end;
    switch (c) {
    case O_MGR:
        o->mgr = arg;
        return 0;
    case O_TOKEN:
        o->token_file = arg;
        return 0;
    case O_JSON:
        o->json = true;
        return 0;
    case O_PRODUCE:
        o->produce = arg;
        return 0;
    case O_CONSUME:
        o->consume = arg;
        return 0;
    case O_ADMIN:
        o->admin = true;
        return 0;
    case O_MODTOKEN:
        o->mod_token_file = arg;
        return 0;
    case O_GROUPS:
        o->groups = arg;
        return 0;
    case O_REASON:
        o->reason = arg;
        return 0;
    case O_TIMEOUT:
        o->timeout_ms = (int)strtol(arg, &end, 10);
        if (*end || o->timeout_ms <= 0 || o->timeout_ms > 3600000)
            return usage_error("--timeout: 1..3600000 ms, not \"%s\"", arg);
        return 0;
    case O_LIMIT:
        o->limit = strtol(arg, &end, 10);
        if (*end || o->limit < 1 || o->limit > 1000)
            return usage_error("--limit: 1..1000, not \"%s\"", arg);
        return 0;
    case 'h':
        admin_usage(stdout);
        return 1;
    default:
        fprintf(stderr, "Try 'chanq admin --help'.\n");
        return EXIT_USAGE;
    }
}

int chanq_admin_main(int argc, char **argv)
{
    adm_t o = {.mgr = DEFAULT_MGR_HTTP, .timeout_ms = 10000, .limit = 20};
    char *args[8];
    int nargs = 0;
    optind = 1;
    /* Options may come before or after the command's words ("+": stop at each operand, take it,
     * go on). */
    while (optind < argc) {
        int c = getopt_long(argc, argv, "+h", admin_opts, NULL);
        if (c == -1) {
            if (optind >= argc)
                break;
            if (nargs == 8)
                return usage_error("%s", "too many arguments");
            args[nargs++] = argv[optind++];
            continue;
        }
        int r = take_opt(&o, c, optarg);
        if (r)
            return r == 1 ? 0 : r;
    }
    if (nargs == 0) {
        admin_usage(stderr);
        return EXIT_USAGE;
    }
    if (!o.token_file)
        return usage_error("%s", "--admin-token-file is required");
    int rc = read_token(o.token_file, o.token, sizeof(o.token));
    if (rc)
        return rc;
    return run_command(&o, nargs, args);
}
