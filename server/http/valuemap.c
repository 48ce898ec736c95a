/* valuemap.c - GET /v1/blobs/<sha256>/valuemap and /valuemap/v2: the value map of a PSDB blob in
 * format version 1 or 2 (schema/VALUEMAP.md), kept beside the store (valuemaps.h: version 2 is
 * derived when the PSDB is published, any map still missing on its first request), so that
 * launchers can update an installed PSDB by fetching only the values they lack. Immutable
 * like the blob it describes: each version has its own URL, file and ETag, so a cache that holds
 * one never answers for the other. */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psdb/client.h"
#include "store.h"
#include "valuemaps.h"

static int scope_accepts(const char *app, void *ctx)
{
    return psdbd_scope_covers(ctx, app);
}

enum MHD_Result http_serve_valuemap(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                    const char *tail, unsigned version)
{
    enum MHD_Result ret = MHD_YES;
    char digest[65], etag[80];
    char *path = NULL, *blob = NULL;
    int fd = -1;
    struct stat st;
    memcpy(digest, tail, 64);
    digest[64] = '\0';
    if (!psdbd_is_digest(digest))
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_DIGEST,
                                "a blob is named by 64 lowercase hex digits (its SHA-256)");
    if (http_authorize(srv, c, r, http_reader_role(srv), NULL, &ret) != 0)
        return ret;
    if (http_scoped(r)) {
        psdbd_rc rc = psdbd_index_blob_apps(srv->ix, digest, scope_accepts, r->who.scope);
        if (rc == PSDBD_NOT_FOUND)
            return http_reply_error(c, r, PSDBD_OUTCOME_OUT_OF_SCOPE,
                                    "no PSDB of an application in the token's scope has this blob");
        if (rc != PSDBD_OK)
            return http_reply_index_error(c, r, rc);
    }
    blob = psdbd_store_path(&srv->store, digest);
    path = psdbd_valuemap_path(&srv->store, digest, version);
    if (stat(blob, &st) != 0) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no such blob");
        goto cleanup;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    /* Missing: derived here, or waited for where a request or the worker is deriving it. A blob
     * that is not a PSDB of this layout has none (below); the server's own failure is said. */
    if (fd < 0 && psdbd_errno_absent(errno)) {
        psdb_hr hr = psdbd_valuemaps_ensure(srv->vmaps, digest, version);
        psdbd_outcome o = PSDB_SUCCEEDED(hr) ? PSDBD_OUTCOME_OK
                                             : psdbd_outcome_of_hr(hr, PSDBD_OUTCOME_NO_VALUE_MAP);
        if (o == PSDBD_OUTCOME_DISK_FULL || o == PSDBD_OUTCOME_INTERNAL) {
            ret = http_reply_error(c, r, o, "%s",
                                   o == PSDBD_OUTCOME_DISK_FULL
                                       ? "no space left to store the value map"
                                       : "cannot derive the value map");
            goto cleanup;
        }
        if (o == PSDBD_OUTCOME_OK)
            fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        /* A blob that is not a PSDB of this layout has no value map: the client downloads it. */
        ret = http_reply_error(c, r, PSDBD_OUTCOME_NO_VALUE_MAP, "no value map for this blob");
        goto cleanup;
    }
    struct MHD_Response *resp = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
    if (!resp) {
        ret = MHD_NO;
        goto cleanup;
    }
    fd = -1; /* the response's now */
    if (version == 1)
        snprintf(etag, sizeof(etag), "\"%s-valuemap\"", digest);
    else
        snprintf(etag, sizeof(etag), "\"%s-valuemap-v%u\"", digest, version);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=31536000, immutable");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, BLOB_TYPE);
    ret = http_queue(c, r, PSDBD_OUTCOME_OK, resp, (uint64_t)st.st_size);
cleanup:
    if (fd >= 0)
        close(fd);
    free(path);
    free(blob);
    return ret;
}
