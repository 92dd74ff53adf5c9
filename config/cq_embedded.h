/* cq_embedded.h - the default config files, compiled into the binary.
 *
 * Generated at build time from the JSON files in config/ by tools/embed.py (see
 * config/meson.build), so the daemon runs with no files installed. Each array holds the file byte
 * for byte plus a trailing NUL that _len does not count. Read-only; any thread.
 *
 *   client_fsm  config/client_non_authoratative_fsm.json  (default --client-fsm)
 *   server_fsm  config/server_authoratative_fsm.json      (default --server-fsm)
 *   settings    config/channel_settings_hifi.json         (default --channel-settings)
 *   console_*   src/mgr/console/{index.html,console.js,console.css} (the manager's console)
 */
#ifndef CQ_EMBEDDED_H
#define CQ_EMBEDDED_H

#include <stddef.h>

extern const char cq_embedded_client_fsm[];
extern const size_t cq_embedded_client_fsm_len;
extern const char cq_embedded_server_fsm[];
extern const size_t cq_embedded_server_fsm_len;
extern const char cq_embedded_settings[];
extern const size_t cq_embedded_settings_len;
extern const char cq_embedded_console_html[];
extern const size_t cq_embedded_console_html_len;
extern const char cq_embedded_console_js[];
extern const size_t cq_embedded_console_js_len;
extern const char cq_embedded_console_css[];
extern const size_t cq_embedded_console_css_len;

#endif
