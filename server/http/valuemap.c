/* valuemap.c - GET /v1/blobs/<sha256>/valuemap and /valuemap/v2: the value map of a PSDB blob in
 * format version 1 or 2 (schema/VALUEMAP.md), derived on first request and kept beside the store,
 * so that launchers can update an installed PSDB by fetching only the values they lack. Immutable
 * like the blob it describes: each version has its own URL, file and ETag, so a cache that holds
 * one never answers for the other. */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "psdb/client.h"
#include "store.h"

static int scope_accepts(const char *app, void *ctx)
{
    return psdbd_scope_covers(ctx, app);
}

/* <data>/valuemaps/<sha>.valuemap, written once (a unique temporary name, then rename: two
 * first requests at once both derive it and the second rename replaces identical bytes). */
static int derive(psdbd_server *srv, const char *digest, const char *blob, const char *path,
                  unsigned version)
{
    static atomic_uint seq;
    char *tmp = xasprintf("%s.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1));
    psdb_hr hr = psdb_value_map_write_version(blob, version, tmp);
    int e = 0;
    if (PSDB_FAILED(hr)) {
        psdbd_log("valuemap v%u of %s: %s", version, digest, psdb_hr_str(hr));
        e = EIO;
    } else if (rename(tmp, path) != 0) {
        e = errno;
        psdbd_log("valuemap of %s: rename %s: %s", digest, tmp, strerror(e));
        unlink(tmp);
    }
    (void)srv;
    free(tmp);
    return e;
}

enum MHD_Result http_serve_valuemap(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                    const char *tail, unsigned version)
{
    enum MHD_Result ret = MHD_YES;
    char digest[65], etag[80];
    char *dir = NULL, *path = NULL, *blob = NULL;
    int fd = -1;
    struct stat st;
    memcpy(digest, tail, 64);
    digest[64] = '\0';
    if (!psdbd_is_digest(digest))
        return http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_digest",
                                "a blob is named by 64 lowercase hex digits (its SHA-256)");
    if (http_authorize(srv, c, r, http_reader_role(srv), NULL, &ret) != 0)
        return ret;
    if (http_scoped(r)) {
        psdbd_rc rc = psdbd_index_blob_apps(srv->ix, digest, scope_accepts, r->who.scope);
        if (rc == PSDBD_NOT_FOUND)
            return http_reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                                    "no PSDB of an application in the token's scope has this blob");
        if (rc != PSDBD_OK)
            return http_reply_index_error(c, r, rc);
    }
    blob = psdbd_store_path(&srv->store, digest);
    dir = xasprintf("%s/../valuemaps", srv->store.blob_dir);
    /* <sha>.valuemap is version 1 (as psdbd always named it), <sha>.v2.valuemap version 2. */
    path = version == 1 ? xasprintf("%s/%s.valuemap", dir, digest)
                        : xasprintf("%s/%s.v%u.valuemap", dir, digest, version);
    if (stat(blob, &st) != 0) {
        ret = http_reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no such blob");
        goto cleanup;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        psdbd_log("valuemap: mkdir %s: %s", dir, strerror(errno));
        ret = http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                               "cannot store the value map");
        goto cleanup;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && derive(srv, digest, blob, path, version) == 0)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        /* A blob that is not a PSDB of this layout has no value map: the client downloads it. */
        ret = http_reply_error(c, r, MHD_HTTP_NOT_FOUND, "no_value_map",
                               "no value map for this blob");
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
    ret = http_queue(c, r, MHD_HTTP_OK, resp, (uint64_t)st.st_size);
cleanup:
    if (fd >= 0)
        close(fd);
    free(dir);
    free(path);
    free(blob);
    return ret;
}
