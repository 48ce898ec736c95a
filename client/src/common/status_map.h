/* status_map.h - the one mapping of errno values, SQLite result codes and HTTP statuses to psdb_hr,
 * so the same failure gives the same status in the library, the tool and psdbd. */
#ifndef PSDB_COMMON_STATUS_MAP_H
#define PSDB_COMMON_STATUS_MAP_H

#include "psdb/status.h"

/* errno of a failed system call: EACCES, EPERM, EROFS -> PSDB_E_ACCESS; ENOSPC, EDQUOT, EFBIG ->
 * PSDB_E_DISK_FULL; ENOMEM -> PSDB_E_OUTOFMEMORY; anything else PSDB_E_IO. */
psdb_hr psdb__errno_hr(int e);

/* A SQLite result code (primary or extended). OK, ROW and DONE -> PSDB_S_OK; NOMEM ->
 * OUTOFMEMORY; FULL -> DISK_FULL; PERM, READONLY, AUTH -> ACCESS; BUSY, LOCKED -> BUSY; CORRUPT,
 * NOTADB and a short read (a truncated file) -> CACHE_CORRUPT; TOOBIG -> INVALIDARG; CANTOPEN ->
 * psdb__errno_hr(errno) (SQLite reports permission problems as CANTOPEN); IOERR -> IO. Codes that
 * say nothing about the cause (ERROR, SCHEMA, MISMATCH, CONSTRAINT, RANGE, ...) give `otherwise`:
 * PSDB_E_CACHE_CORRUPT where the SQL ran on a file psdb did not write itself, PSDB_E_IO elsewhere.
 */
psdb_hr psdb__sqlite_hr(int rc, psdb_hr otherwise);

/* An HTTP error status of a psdbd answer (success statuses are each endpoint's own business):
 * 400 -> INVALIDARG; 401, 403 -> ACCESS; 404 -> NOT_FOUND; 409 -> ALREADY_EXISTS; 413 ->
 * CACHE_FULL; 507 -> DISK_FULL; 408, 429 and other 5xx -> NETWORK (transient: worth a retry);
 * anything else PSDB_E_PROTOCOL. */
psdb_hr psdb__http_hr(long status);

/* Whether an HTTP status is transient (408, 429, 5xx): a client may retry the request. */
int psdb__http_transient(long status);

#endif
