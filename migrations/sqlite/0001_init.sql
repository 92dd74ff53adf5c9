-- 0001_init: the fixed tables of the chanq durable store (SQLite dialect).
-- Forward-only: never edit a released migration; add 0002_*.sql instead.
-- Per-topic tables (t_<topic>, o_<topic>) are created by topic_create from the template in
-- src/store/sqlite.c, not here.

-- One row per applied migration.
CREATE TABLE schema_version (
    version    INTEGER PRIMARY KEY,
    applied_ms INTEGER NOT NULL
);

-- One row per topic. Names are unique case-insensitively (SQLite table names are; the MariaDB
-- backend's topics table uses a case-insensitive collation), so both backends agree. The name is
-- stored as created and is the spelling used in the per-topic table names.
CREATE TABLE topics (
    name           TEXT    NOT NULL PRIMARY KEY COLLATE NOCASE,
    online         INTEGER NOT NULL DEFAULT 1,
    retention_days INTEGER NOT NULL DEFAULT 30,
    created_ms     INTEGER NOT NULL
);
