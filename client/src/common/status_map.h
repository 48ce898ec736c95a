/* status_map.h - the one mapping of errno values, SQLite result codes, HTTP statuses and libcurl
 * results to psdb_hr, so the same failure gives the same status in the library, the tool and
 * psdbd. The HTTP status numbers a client names are here too, beside their mapping. */
#ifndef PSDB_COMMON_STATUS_MAP_H
#define PSDB_COMMON_STATUS_MAP_H

#include "psdb/status.h"

/* errno of a failed system call: EACCES, EPERM, EROFS -> PSDB_E_ACCESS; ENOSPC, EDQUOT, EFBIG ->
 * PSDB_E_DISK_FULL; ENOMEM -> PSDB_E_OUTOFMEMORY; anything else PSDB_E_IO. */
psdb_hr psdb__errno_hr(int e);

/* The errno values a caller acts on instead of reporting them (repeat the call, skip what is not
 * there, fall back to a copy): the one place that names them, so no other file compares errno
 * with a constant (tests/build/error_mappers_test.sh). */
typedef enum psdb__errno_class {
    PSDB__ERRNO_INTERRUPTED,  /* EINTR: a signal interrupted the call; repeat it */
    PSDB__ERRNO_ABSENT,       /* ENOENT: nothing at the path */
    PSDB__ERRNO_NOT_DIR,      /* ENOTDIR: a component of the path is not a directory */
    PSDB__ERRNO_NO_SUCH_PATH, /* ENOENT, ENOTDIR: the path names nothing */
    PSDB__ERRNO_EXISTS,       /* EEXIST: something is at the path already */
    PSDB__ERRNO_WOULD_BLOCK,  /* EWOULDBLOCK (EAGAIN): a non-blocking lock is held elsewhere */
    PSDB__ERRNO_REFUSED,      /* EPERM: psdb__open_file refused what is at the path, or not
                                 permitted */
    PSDB__ERRNO_NO_HARD_LINK, /* EXDEV, EPERM, EMLINK, ENOTSUP: link(2) cannot work here; copy */
    PSDB__ERRNO_UNSUPPORTED,  /* ENOSYS, EINVAL: the call is not available for this file */
    PSDB__ERRNO_NOT_A_FILE,   /* ELOOP, ENXIO: O_NOFOLLOW met a link, or O_NONBLOCK a FIFO with no
                                 writer or a device: not a regular file */
    PSDB__ERRNO_PEER_GONE,    /* ECONNABORTED, EPROTO: accept(2) found the connection gone
                                 before it was accepted; accept the next */
} psdb__errno_class;

/* Whether errno value e is of class c. */
int psdb__errno_is(int e, psdb__errno_class c);

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

/* The success statuses the delivery client asks for (each endpoint's own business, schema/HTTP.md),
 * the one error status whose answer it reads (publish's probe), and the one a farm worker stops
 * on (its token refused: no other job can succeed either). */
#define PSDB__HTTP_OK 200L
#define PSDB__HTTP_CREATED 201L
#define PSDB__HTTP_PARTIAL_CONTENT 206L
#define PSDB__HTTP_BAD_REQUEST 400L
#define PSDB__HTTP_UNAUTHORIZED 401L

/* A libcurl result (a CURLcode, as an int so that this header needs no curl.h): CURLE_OK ->
 * PSDB_S_OK; CURLE_OUT_OF_MEMORY -> PSDB_E_OUTOFMEMORY; any other -> PSDB_E_NETWORK (no answer:
 * connection, TLS, timeout or transfer failure). */
psdb_hr psdb__curl_hr(int code);

/* Whether a libcurl result is transient (the connection refused or cut, a timeout, a name that
 * did not resolve, nothing or part of an answer received): another attempt may succeed. */
int psdb__curl_transient(int code);

/* The errno of psdb__rename_same (common/fdio.h), which sets EPERM when the temporary no longer
 * names the file that was written (it was replaced meanwhile): `replaced` for that, else
 * psdb__errno_hr(e). *why gets the reason for a message: "it was replaced while it was written",
 * or strerror(e). */
psdb_hr psdb__rename_hr(int e, psdb_hr replaced, const char **why);

#endif
