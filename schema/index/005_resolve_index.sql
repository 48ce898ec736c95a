-- 005_resolve_index.sql - the active PSDBs of each cell (application, version, family) in the
-- order /v1/resolve picks them (MODEL A3: larger ABI, then profile, then serial, then the later
-- publish), so that a resolve reads its answer first and stops (a backward scan of this index
-- under LIMIT 1) instead of reading and sorting every row of the cell: a cell gathers a row per
-- serial and ABI over the years. Partial: retired rows are never resolved. The same SQL in both
-- engines. psdbs_resolve stays for the reads that see retired rows too.
CREATE INDEX psdbs_resolve_active ON psdbs (app, app_version, family, abi_version,
    profile_version, serial, id) WHERE retired_at IS NULL;
