-- 0001_init: the fixed tables of the chanq durable store (MariaDB dialect, InnoDB, utf8mb4).
-- Forward-only: never edit a released migration; add 0002_*.sql instead.
-- MariaDB commits DDL implicitly, so a migration is not atomic: every statement here must be
-- safe to run again after a crash half way through (IF NOT EXISTS).
-- Per-topic tables (t_<tbl>, o_<tbl>) are created by topic_create from the template in
-- src/store/mysql.c, not here.

-- One row per applied migration.
CREATE TABLE IF NOT EXISTS schema_version (
    version    INT    NOT NULL PRIMARY KEY,
    applied_ms BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per topic. Names are unique case-insensitively (the collation of name), as in the
-- SQLite backend; the name is stored as created.
--   tbl         the suffix of the topic's table names (t_<tbl>, o_<tbl>): the name itself, or
--               for names too long for MariaDB's 64-character identifiers a shortened form with
--               a hash. UNIQUE, so two topics can never share a table.
--   high_water  the highest offset ever committed in the topic (kept here because InnoDB's
--               AUTO_INCREMENT counter also counts ids burned by rolled-back inserts). Its row
--               lock also serializes the appends to one topic.
CREATE TABLE IF NOT EXISTS topics (
    name           VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL,
    tbl            VARCHAR(62) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    online         TINYINT NOT NULL DEFAULT 1,
    retention_days INT NOT NULL DEFAULT 30,
    created_ms     BIGINT NOT NULL,
    high_water     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (name),
    UNIQUE KEY topics_tbl (tbl)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
