/* status_map.c - errno, SQLite, HTTP and libcurl -> psdb_hr. */
#include "common/status_map.h"

#include <errno.h>
#include <string.h>

#include <curl/curl.h>
#include <sqlite3.h>

psdb_hr psdb__errno_hr(int e)
{
    switch (e) {
    case EACCES:
    case EPERM:
    case EROFS:
        return PSDB_E_ACCESS;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return PSDB_E_DISK_FULL;
    case ENOMEM:
        return PSDB_E_OUTOFMEMORY;
    default:
        return PSDB_E_IO;
    }
}

int psdb__errno_is(int e, psdb__errno_class c)
{
    switch (c) {
    case PSDB__ERRNO_INTERRUPTED:
        return e == EINTR;
    case PSDB__ERRNO_ABSENT:
        return e == ENOENT;
    case PSDB__ERRNO_NOT_DIR:
        return e == ENOTDIR;
    case PSDB__ERRNO_NO_SUCH_PATH:
        return e == ENOENT || e == ENOTDIR;
    case PSDB__ERRNO_EXISTS:
        return e == EEXIST;
    case PSDB__ERRNO_WOULD_BLOCK:
        return e == EWOULDBLOCK || e == EAGAIN;
    case PSDB__ERRNO_REFUSED:
        return e == EPERM;
    case PSDB__ERRNO_NO_HARD_LINK:
        return e == EXDEV || e == EPERM || e == EMLINK || e == ENOTSUP;
    case PSDB__ERRNO_UNSUPPORTED:
        return e == ENOSYS || e == EINVAL;
    case PSDB__ERRNO_NOT_A_FILE:
        return e == ELOOP || e == ENXIO;
    case PSDB__ERRNO_PEER_GONE:
        return e == ECONNABORTED || e == EPROTO;
    }
    return 0;
}

psdb_hr psdb__sqlite_hr(int rc, psdb_hr otherwise)
{
    switch (rc & 0xFF) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return PSDB_S_OK;
    case SQLITE_NOMEM:
        return PSDB_E_OUTOFMEMORY;
    case SQLITE_FULL:
        return PSDB_E_DISK_FULL;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
        return PSDB_E_ACCESS;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return PSDB_E_BUSY;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return PSDB_E_CACHE_CORRUPT;
    case SQLITE_TOOBIG:
        return PSDB_E_INVALIDARG;
    case SQLITE_CANTOPEN:
        return psdb__errno_hr(errno);
    case SQLITE_IOERR:
        return rc == SQLITE_IOERR_SHORT_READ ? PSDB_E_CACHE_CORRUPT
               : rc == SQLITE_IOERR_NOMEM    ? PSDB_E_OUTOFMEMORY
                                             : PSDB_E_IO;
    default:
        return otherwise;
    }
}

int psdb__http_transient(long status)
{
    return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

psdb_hr psdb__http_hr(long status)
{
    switch (status) {
    case 400:
        return PSDB_E_INVALIDARG;
    case 401:
    case 403:
        return PSDB_E_ACCESS;
    case 404:
        return PSDB_E_NOT_FOUND;
    case 409:
        return PSDB_E_ALREADY_EXISTS;
    case 413:
        return PSDB_E_CACHE_FULL;
    case 507:
        return PSDB_E_DISK_FULL;
    default:
        return psdb__http_transient(status) ? PSDB_E_NETWORK : PSDB_E_PROTOCOL;
    }
}

psdb_hr psdb__curl_hr(int code)
{
    switch (code) {
    case CURLE_OK:
        return PSDB_S_OK;
    case CURLE_OUT_OF_MEMORY:
        return PSDB_E_OUTOFMEMORY;
    default:
        return PSDB_E_NETWORK;
    }
}

int psdb__curl_transient(int code)
{
    switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_COULDNT_RESOLVE_HOST:
        return 1;
    default:
        return 0;
    }
}

psdb_hr psdb__rename_hr(int e, psdb_hr replaced, const char **why)
{
    if (e == EPERM) {
        *why = "it was replaced while it was written";
        return replaced;
    }
    *why = strerror(e);
    return psdb__errno_hr(e);
}
