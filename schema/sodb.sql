-- schema/sodb.sql - the SODB container (schema/SODB.md). Migration 1 = user_version 1.
-- A reader refuses any application_id other than 0x50534F44 ('PSOD') and any user_version other
-- than 1. libpsdb runs these statements in one BEGIN IMMEDIATE transaction when it creates an SODB.
PRAGMA application_id = 1347637060;
PRAGMA user_version = 1;

-- Exactly one row: the application the descriptions belong to (MODEL A2).
CREATE TABLE header (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    exe_filename TEXT,
    app_name TEXT NOT NULL CHECK (length(app_name) > 0),
    app_version INTEGER NOT NULL,          -- 4x16-bit version, stored as its 64-bit pattern
    engine_name TEXT,
    engine_version INTEGER NOT NULL,
    app_id BLOB NOT NULL CHECK (length(app_id) = 16),
    encoding_version INTEGER NOT NULL      -- description encoding version (1)
);

-- One row per recorded description, in insertion order (seq).
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,               -- rowid: insertion order
    kind INTEGER NOT NULL CHECK (kind IN (1, 2, 3)),  -- 1 compute, 2 graphics, 3 state object
    object_key BLOB NOT NULL CHECK (length(object_key) = 32),  -- SHA-256 of description
    version INTEGER NOT NULL,              -- the entry's version, stored as its 64-bit pattern
    description BLOB NOT NULL,             -- the encoding of schema/SODB.md
    UNIQUE (object_key, version)
);
