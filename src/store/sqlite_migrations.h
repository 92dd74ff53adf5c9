/* sqlite_migrations.h - the SQLite migrations, compiled into the binary.
 *
 * Generated at build time from src/store/migrations/sqlite/NNNN_*.sql by tools/embed.py (see
 * src/store/meson.build). Each array holds the file byte for byte plus a trailing NUL that _len
 * does not count. Read-only; any thread. To add a migration: add the file to meson.build and a
 * row to the table in sqlite.c; never edit a released one.
 */
#ifndef CQ_SQLITE_MIGRATIONS_H
#define CQ_SQLITE_MIGRATIONS_H

#include <stddef.h>

extern const char cq_embedded_sqlite_0001[];
extern const size_t cq_embedded_sqlite_0001_len;

#endif
