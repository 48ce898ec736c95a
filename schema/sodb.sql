-- schema/sodb.sql - the SODB container (schema/SODB.md). Migration 1 = user_version 1.
-- A reader refuses any application_id other than 0x50534F44 ('PSOD') and any user_version other
-- than 1. libpsdb embeds this file (psdb_embed_sql, cmake/EmbedSql.cmake) and runs exactly these
-- statements inside one BEGIN IMMEDIATE transaction when it creates an SODB.
PRAGMA application_id = 1347637060;
PRAGMA user_version = 1;

-- Exactly one row (id 1): the application the descriptions belong to (MODEL A2). app_version
-- and engine_version are 4x16-bit versions stored as their 64-bit pattern (signed in SQLite);
-- app_id is the 16-byte AppId; encoding_version is the description encoding's version (1).
CREATE TABLE header (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    exe_filename TEXT,
    app_name TEXT NOT NULL CHECK (length(app_name) > 0),
    app_version INTEGER NOT NULL,
    engine_name TEXT,
    engine_version INTEGER NOT NULL,
    app_id BLOB NOT NULL CHECK (length(app_id) = 16),
    encoding_version INTEGER NOT NULL
);

-- One row per recorded description. seq (the rowid) is the insertion order. kind: 1 compute,
-- 2 graphics, 3 state object, 4 Vulkan compute, 5 Vulkan graphics. object_key: SHA-256 of description. version: the entry's version
-- (64-bit pattern). description: the encoding of schema/SODB.md. A (key, version) pair is
-- recorded once (INSERT OR IGNORE).
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    kind INTEGER NOT NULL CHECK (kind IN (1, 2, 3, 4, 5)),
    object_key BLOB NOT NULL CHECK (length(object_key) = 32),
    version INTEGER NOT NULL,
    description BLOB NOT NULL,
    UNIQUE (object_key, version)
);
