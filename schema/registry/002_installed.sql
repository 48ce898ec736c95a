-- registry 002: what psdb install put in place, for rollback protection. Keyed by exe path, not
-- by application row, so removing and re-registering an application keeps its high-water mark.
ALTER TABLE applications ADD COLUMN app_id BLOB;
CREATE TABLE installed(
    exe_path TEXT NOT NULL,
    family TEXT NOT NULL,
    serial INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY(exe_path, family)) WITHOUT ROWID;
