/* fuzz_config - the loaders of the files an operator or a peer hands to chanqd: the config file
 * and the command line (src/config), the FSM JSON (cq_fsm_load_json), the channel settings JSON
 * (cq_settings_load_json) and the MQ permissions JSON (cq_mqperm_load).
 *
 * The first input byte picks the loader (modulo 5); the rest is that loader's input:
 *   0  config file text, loaded by cq_config_load_file from a memfd (/proc/self/fd/N);
 *   1  a command line: the rest split at NUL bytes into argv[1..], cq_config_parse_args. An
 *      input naming --config or an action (--help, --version, --dump-config, --config-markdown)
 *      anywhere is skipped: those read other files or print;
 *   2  FSM JSON;  3  channel settings JSON;  4  MQ permissions JSON.
 * Invariants: a failed load returns a negative code with a message and leaves the out-pointer
 * alone (config file errors start with the path); a successful FSM or settings load leaves the
 * message empty. A loaded configuration survives the round trip --dump-config promises: dump,
 * load the dump into defaults, dump again, same text (skipped when a command-line value holds a
 * newline, which a line-based file cannot carry). A loaded FSM has 1..CQ_FSM_MAX_STATES states,
 * its initial state among them, and every query stays in range; loaded settings are clamped
 * (intervals >= 1, ACL levels <= 3). No leaks (LSan).
 */
#include "fuzz_common.h"

#include "cq_config.h"
#include "cq_fsm.h"
#include "cq_mqperm.h"
#include "cq_settings.h"

#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_MAX_INPUT (64u << 10)
#define MAX_ARGS       64

enum { L_CONFIG_FILE, L_CONFIG_ARGS, L_FSM, L_SETTINGS, L_MQPERM, L__COUNT };

/* ---- config ---------------------------------------------------------------------------------- */

/* One memfd for the whole process: the config loader takes a path, and /proc/self/fd/N reopens
 * the memfd from offset 0 without touching a disk. */
static int memfd = -1;
static char memfd_path[64];

static const char *file_with(const void *data, size_t len)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz_config", MFD_CLOEXEC);
        FUZZ_CHECK(memfd >= 0);
        snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
    }
    FUZZ_CHECK(ftruncate(memfd, 0) == 0);
    FUZZ_CHECK(pwrite(memfd, data, len, 0) == (ssize_t)len);
    return memfd_path;
}

/* c in the config-file format (--dump-config); returned malloc'd, *ret_len its length. */
static char *dump(const cq_config_t *c, size_t *ret_len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, ret_len);
    FUZZ_CHECK(f != NULL);
    cq_config_dump(c, f);
    FUZZ_CHECK(fclose(f) == 0);
    return buf;
}

/* The promise of cq_config_dump: loading its output gives back the same values. */
static void check_round_trip(const cq_config_t *c)
{
    size_t alen = 0, blen = 0;
    char *a = dump(c, &alen), err[512];
    cq_config_t back;
    cq_config_defaults(&back);
    int r = cq_config_load_file(&back, file_with(a, alen), err, sizeof(err));
    if (r != 0)
        fprintf(stderr, "reload of the dump failed: %s\n", err);
    FUZZ_CHECK(r == 0);
    char *b = dump(&back, &blen);
    FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0);
    free(a);
    free(b);
    cq_config_done(&back);
}

static void fuzz_config_file(const uint8_t *data, size_t size)
{
    cq_config_t c;
    char err[512];
    cq_config_defaults(&c);
    const char *path = file_with(data, size);
    int r = cq_config_load_file(&c, path, err, sizeof(err));
    if (r == 0) {
        FUZZ_CHECK(strcmp(c.config, path) == 0);
        check_round_trip(&c);
    } else {
        FUZZ_CHECK(r < 0 && strncmp(err, path, strlen(path)) == 0);
    }
    cq_config_done(&c);
}

/* Whether argument a names an option that reads a file or prints (see the top comment). */
static bool arg_skipped(const char *a)
{
    static const char *const skip[] = {"config", "dump-config", "config-markdown", "help",
                                       "version"};
    if (a[0] != '-')
        return false;
    const char *flag = a + (a[1] == '-' ? 2 : 1);
    size_t len = strcspn(flag, "=");
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
        if (strlen(skip[i]) == len && strncmp(flag, skip[i], len) == 0)
            return true;
    }
    return false;
}

static void fuzz_config_args(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *argv[MAX_ARGS + 1], err[512];
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 1;
    bool newline = false, skip = false;
    argv[0] = "chanqd";
    for (char *p = text; p < text + size && argc < MAX_ARGS; p += strlen(p) + 1) {
        argv[argc++] = p;
        newline |= strchr(p, '\n') != NULL;
        skip |= arg_skipped(p);
    }
    argv[argc] = NULL;
    if (!skip) {
        cq_config_t c;
        cq_config_defaults(&c);
        int r = cq_config_parse_args(&c, argc, argv, err, sizeof(err));
        FUZZ_CHECK(r <= 0); /* 1 only after an action, and those are skipped */
        if (r < 0)
            FUZZ_CHECK(err[0] != '\0');
        else if (!newline)
            check_round_trip(&c);
        cq_config_done(&c);
    }
    free(text);
}

/* ---- FSM ------------------------------------------------------------------------------------- */

static void check_fsm(const cq_fsm_t *fsm, uint64_t seed)
{
    int n = cq_fsm_state_count(fsm), init = cq_fsm_init_state(fsm);
    FUZZ_CHECK(n >= 1 && n <= CQ_FSM_MAX_STATES);
    FUZZ_CHECK(init >= 0 && init < n);
    FUZZ_CHECK(cq_fsm_state_name(fsm, -1) == NULL && cq_fsm_state_name(fsm, n) == NULL);
    FUZZ_CHECK(!cq_fsm_allows(fsm, n, 1));
    for (int s = 0; s < n; s++) {
        const char *name = cq_fsm_state_name(fsm, s);
        FUZZ_CHECK(name != NULL);
        int idx = cq_fsm_state_index(fsm, name);
        FUZZ_CHECK(idx >= 0 && idx <= s && strcmp(cq_fsm_state_name(fsm, idx), name) == 0);
        FUZZ_CHECK(cq_fsm_next_state(fsm, s) == (s + 1 < n ? s + 1 : s));
        FUZZ_CHECK(!cq_fsm_allows(fsm, s, CQ_FSM_MAX_MSG_TYPE + 1) &&
                   !cq_fsm_allows(fsm, s, UINT32_MAX));
        for (int k = 0; k < 8; k++) {
            uint32_t mt = k < 2 ? (uint32_t)k : (uint32_t)(fuzz_next(&seed) % 70000);
            (void)cq_fsm_allows(fsm, s, mt);
            int to = cq_fsm_transition(fsm, s, mt);
            FUZZ_CHECK(to >= 0 && to < n);
        }
    }
}

static void fuzz_fsm(const uint8_t *data, size_t size)
{
    cq_fsm_t *fsm = NULL;
    char err[512];
    int r = cq_fsm_load_json((const char *)data, size, &fsm, err, sizeof(err));
    if (r == 0) {
        FUZZ_CHECK(fsm != NULL && err[0] == '\0');
        check_fsm(fsm, fuzz_hash(data, size) | 1);
    } else {
        FUZZ_CHECK(r < 0 && fsm == NULL && err[0] != '\0');
    }
    cq_fsm_free(fsm);
}

/* ---- channel settings ------------------------------------------------------------------------ */

static void check_chan_settings(const cq_chan_settings_t *cs)
{
    FUZZ_CHECK(cs != NULL);
    FUZZ_CHECK(cs->tick_interval_ms >= 1 && cs->fanout_interval_ms >= 1);
    FUZZ_CHECK(cs->acl.sub <= CQ_ACL_ANY && cs->acl.unsub <= CQ_ACL_ANY &&
               cs->acl.remove <= CQ_ACL_ANY);
    if (cs->data_msg_full_name)
        (void)strlen(cs->data_msg_full_name);
}

static void fuzz_settings(const uint8_t *data, size_t size)
{
    cq_settings_t *s = NULL;
    char err[512];
    int r = cq_settings_load_json((const char *)data, size, &s, err, sizeof(err));
    if (r != 0) {
        FUZZ_CHECK(r < 0 && s == NULL && err[0] != '\0');
        return;
    }
    FUZZ_CHECK(s != NULL && err[0] == '\0');
    uint64_t seed = fuzz_hash(data, size) | 1;
    for (uint32_t t = 0; t < 8; t++)
        check_chan_settings(cq_settings_get(s, t));
    check_chan_settings(cq_settings_get(s, (uint32_t)fuzz_next(&seed)));
    check_chan_settings(cq_settings_get(s, UINT32_MAX));
    cq_settings_free(s);
}

/* ---- MQ permissions -------------------------------------------------------------------------- */

static void fuzz_mqperm(const uint8_t *data, size_t size)
{
    static const char *const topics[] = {"orders", "ORDERS", "t", "*", ""};
    cq_mqperm_t *p = NULL;
    char err[512];
    int r = cq_mqperm_load((const char *)data, size, &p, err, sizeof(err));
    if (r != 0) {
        FUZZ_CHECK(r < 0 && p == NULL && err[0] != '\0');
        return;
    }
    FUZZ_CHECK(p != NULL);
    uint64_t seed = fuzz_hash(data, size) | 1;
    for (uint32_t id = 0; id < 4; id++) {
        uint32_t mid = id < 3 ? id : (uint32_t)fuzz_next(&seed);
        (void)cq_mqperm_auth(p, mid, NULL);
        (void)cq_mqperm_auth(p, mid, "s1");
        for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++) {
            (void)cq_mqperm_allows(p, mid, CQ_MQPERM_PRODUCE, topics[i]);
            (void)cq_mqperm_allows(p, mid, CQ_MQPERM_CONSUME, topics[i]);
        }
        (void)cq_mqperm_allows(p, mid, CQ_MQPERM_ADMIN, NULL);
    }
    cq_mqperm_free(p);
}

/* ---- entry ----------------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > FUZZ_MAX_INPUT)
        return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % L__COUNT) {
    case L_CONFIG_FILE:
        fuzz_config_file(rest, n);
        break;
    case L_CONFIG_ARGS:
        fuzz_config_args(rest, n);
        break;
    case L_FSM:
        fuzz_fsm(rest, n);
        break;
    case L_SETTINGS:
        fuzz_settings(rest, n);
        break;
    case L_MQPERM:
        fuzz_mqperm(rest, n);
        break;
    }
    return 0;
}
