-- registry 003: where an installed PSDB came from (the compile farm). built_here 1: psdb install
-- --compile-missing compiled it on this machine from the SODB sodb_sha256 (no one signed it); 0:
-- downloaded as published, sodb_sha256 then naming its source SODB when its statement is
-- version 2, else NULL. Rows written before this step read as downloaded, source unknown.
ALTER TABLE installed ADD COLUMN built_here INTEGER NOT NULL DEFAULT 0;
ALTER TABLE installed ADD COLUMN sodb_sha256 TEXT;
