/* http.c - psdbd's HTTP API v1 on libmicrohttpd (schema/HTTP.md).
 *
 * DESIGN
 * libmicrohttpd runs a pool of worker threads, each with its own epoll loop. Every request gets a
 * `struct req` in *req_cls, freed by the completion callback, which also writes the access log
 * line and the metrics. Requests other than publishes are answered on their first callback.
 *
 * A publish (POST /v1/psdbs) is checked on its first callback, before any body byte is read:
 * token, role, Content-Length against the limit, the signature headers and the key id. Then each
 * body chunk is hashed and appended to a temporary file in the data directory (never held in
 * memory), and on the final callback the file is validated with libpsdb, the signature checked,
 * the blob fsynced and renamed into the store, and only then the index row committed. That last
 * part can take seconds for a large PSDB, so it runs on a finisher thread while the connection is
 * suspended (MHD_suspend_connection): the worker keeps serving its other connections. Shutdown
 * waits for the finishers, since a suspended connection must not meet MHD_stop_daemon. Anything
 * that ends a publish early removes its temporary file in the completion callback, so a client that
 * disconnects mid-body leaves nothing behind. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <openssl/evp.h>

#include "psdb/psdb.h"

#include "auth.h"
#include "cache.h"
#include "common.h"
#include "metrics.h"

#define JSON_TYPE "application/json"
#define BLOB_TYPE "application/octet-stream"

struct req {
    uint64_t start_ns;
    psdbd_route route;
    unsigned status;
    uint64_t bytes; /* response body bytes queued */
    char method[16];
    char *path;
    psdbd_principal who;
    /* publish only */
    int publishing;
    int fd;
    char *tmp_path;
    EVP_MD_CTX *sha;
    uint64_t expected, received;
    int write_errno;
    uint64_t serial;
    char key_id[65];
    char signature[PSDB_SIGNATURE_B64_SIZE];
    char *key_pem, *key_scope;
    /* the end of a publish runs on its own thread while the connection is suspended */
    int finishing;
    unsigned result_status;
    json_t *result_body;
    struct MHD_Connection *conn;
    struct req *next; /* in the finishers' queue */
};

/* ---- responses ------------------------------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, struct req *r, unsigned status,
                             struct MHD_Response *resp, uint64_t body_bytes)
{
    enum MHD_Result ret;
    if (!resp)
        return MHD_NO;
    r->status = status;
    r->bytes = strcmp(r->method, "HEAD") == 0 ? 0 : body_bytes;
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_buffer(struct MHD_Connection *c, struct req *r, unsigned status,
                                    const char *type, char *body, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"psdbd\"");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                r->route == PSDBD_ROUTE_PSDB_GET  ? "GET, HEAD, DELETE"
                                : r->route == PSDBD_ROUTE_PUBLISH ? "POST"
                                                                  : "GET, HEAD");
    return queue(c, r, status, resp, len);
}

/* The compact text of a JSON value with a newline (malloc'd, NUL-terminated); *len excludes
 * the NUL. */
static char *json_text(const json_t *v, size_t *len)
{
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text)
        abort(); /* out of memory: the daemon's policy */
    size_t n = strlen(text);
    char *nl = realloc(text, n + 2);
    if (!nl)
        abort();
    nl[n] = '\n';
    nl[n + 1] = '\0';
    *len = n + 1;
    return nl;
}

/* Sends `body` (its reference is taken) as JSON. With c NULL (a publish finishing off the
 * connection's thread) the answer is kept in r until the connection is resumed. */
static enum MHD_Result reply_json(struct MHD_Connection *c, struct req *r, unsigned status,
                                  json_t *body)
{
    size_t len = 0;
    char *text = NULL;
    if (!c) {
        json_decref(r->result_body);
        r->result_body = body;
        r->result_status = status;
        return MHD_YES;
    }
    text = json_text(body, &len);
    json_decref(body);
    return reply_buffer(c, r, status, JSON_TYPE, text, len);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, struct req *r, unsigned status,
                                   const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result reply_error(struct MHD_Connection *c, struct req *r, unsigned status,
                                   const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return reply_json(c, r, status, json_pack("{s:s, s:s}", "error", code, "message", msg));
}

static enum MHD_Result reply_index_error(struct MHD_Connection *c, struct req *r, psdbd_rc rc)
{
    if (rc == PSDBD_FULL)
        return reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                           "the index cannot be written: no space left on the device");
    return reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                       "the index failed; see the server log");
}

/* ---- authentication -------------------------------------------------------------------------- */

/* Checks the token when `need` is not NONE (or when one is sent). Returns 0 when the request may
 * go on; otherwise an error response was queued and *ret says how to return. `app` non-NULL:
 * the token's scope must cover it. */
static int authorize(psdbd_server *srv, struct MHD_Connection *c, struct req *r, psdbd_role need,
                     const char *app, enum MHD_Result *ret)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (need == PSDBD_ROLE_NONE)
        return 0;
    if (!r->who.name) {
        switch (psdbd_auth_check(srv->ix, h, &r->who)) {
        case PSDBD_AUTH_OK:
            break;
        case PSDBD_AUTH_MISSING:
            *ret = reply_error(c, r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                               "this endpoint needs a bearer token");
            return -1;
        case PSDBD_AUTH_INVALID:
            *ret = reply_error(c, r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                               "the token is unknown, expired or revoked");
            return -1;
        default:
            *ret = reply_index_error(c, r, PSDBD_ERROR);
            return -1;
        }
    }
    if (r->who.role < need) {
        *ret = reply_error(c, r, MHD_HTTP_FORBIDDEN, "forbidden",
                           "the token's role (%s) is not allowed here",
                           r->who.role == PSDBD_ROLE_READER ? "reader" : "publisher");
        return -1;
    }
    if (app && r->who.role != PSDBD_ROLE_ADMIN && !psdbd_scope_covers(r->who.scope, app)) {
        *ret = reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                           "the token's scope does not cover this application");
        return -1;
    }
    return 0;
}

static psdbd_role reader_role(const psdbd_server *srv)
{
    return srv->cfg->readers_need_token ? PSDBD_ROLE_READER : PSDBD_ROLE_NONE;
}

/* ---- publish --------------------------------------------------------------------------------- */

static int disk_full_errno(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG;
}

static void publish_discard(struct req *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->tmp_path) {
        unlink(r->tmp_path);
        free(r->tmp_path);
        r->tmp_path = NULL;
    }
    EVP_MD_CTX_free(r->sha);
    r->sha = NULL;
}

static enum MHD_Result publish_begin(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    const char *cl, *te, *kid, *sig, *serial;
    uint64_t len = 0;
    int e;
    if (authorize(srv, c, r, PSDBD_ROLE_PUBLISHER, NULL, &ret) != 0)
        return ret;
    te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (te || !cl)
        return reply_error(c, r, MHD_HTTP_LENGTH_REQUIRED, "length_required",
                           "a publish needs a Content-Length (no chunked bodies)");
    if (psdbd_parse_u64(cl, &len) != 0 || strncmp(cl, "0x", 2) == 0)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request", "bad Content-Length");
    if (len > srv->cfg->max_upload)
        return reply_error(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "too_large",
                           "the body (%llu bytes) is over the upload limit (%llu bytes)",
                           (unsigned long long)len, (unsigned long long)srv->cfg->max_upload);
    if (len == 0)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb", "the body is empty");
    kid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Key-Id");
    sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Signature");
    serial = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Serial");
    if (!kid || !psdbd_is_digest(kid))
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "X-Psdb-Key-Id must be 64 lowercase hex digits");
    if (!sig || strlen(sig) != PSDB_SIGNATURE_B64_SIZE - 1)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "X-Psdb-Signature must be an 88-character base64 Ed25519 signature");
    if (!serial || psdbd_parse_u64(serial, &r->serial) != 0 || r->serial > INT64_MAX)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "X-Psdb-Serial must be a number below 2^63");
    memcpy(r->key_id, kid, 65);
    memcpy(r->signature, sig, PSDB_SIGNATURE_B64_SIZE);
    switch (psdbd_index_key_find(srv->ix, kid, &r->key_pem, &r->key_scope)) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        return reply_error(c, r, MHD_HTTP_FORBIDDEN, "unknown_key",
                           "no registered publisher key has this key id");
    default:
        return reply_index_error(c, r, PSDBD_ERROR);
    }
    if ((e = psdbd_store_temp(&srv->store, &r->fd, &r->tmp_path)) != 0) {
        if (disk_full_errno(e))
            return reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                               "no space for the upload");
        psdbd_log("create upload file in %s: %s", srv->store.tmp_dir, strerror(e));
        return reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                           "cannot create the upload file");
    }
    r->sha = EVP_MD_CTX_new();
    if (!r->sha || EVP_DigestInit_ex(r->sha, EVP_sha256(), NULL) != 1)
        abort(); /* out of memory: the daemon's policy */
    r->expected = len;
    r->publishing = 1;
    return MHD_YES;
}

static void publish_chunk(struct req *r, const char *data, size_t n)
{
    r->received += n;
    psdbd_metrics_upload_bytes(n);
    if (r->write_errno)
        return; /* keep reading (MHD cannot answer mid-body) but store nothing more */
    EVP_DigestUpdate(r->sha, data, n);
    while (n > 0) {
        ssize_t w = write(r->fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r->write_errno = w < 0 ? errno : EIO;
            /* Free the space now: the rest of the body is only counted. */
            if (ftruncate(r->fd, 0) != 0)
                r->write_errno = r->write_errno ? r->write_errno : errno;
            return;
        }
        data += w;
        n -= (size_t)w;
    }
}

/* Makes a libpsdb message about an uploaded file safe for a JSON string and a log line: it can
 * quote names stored in the file, which are any bytes. */
static void printable_ascii(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            *s = '?';
}

static enum MHD_Result publish_finish(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_key *key = NULL;
    psdb_statement st = {0};
    psdbd_record rec = {0};
    json_t *manifest = NULL;
    psdbd_rc rc;
    unsigned int mdlen = 0;
    static const char hexd[] = "0123456789abcdef";
    char why[512] = "";
    psdb_hr hr;
    int e;

    r->publishing = 0;
    if (r->write_errno) {
        e = r->write_errno;
        if (disk_full_errno(e)) {
            psdbd_log("publish: %s: no space left (%s)", r->tmp_path, strerror(e));
            ret = reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                              "no space left for the upload");
        } else {
            psdbd_log("publish: write %s: %s", r->tmp_path, strerror(e));
            ret = reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                              "cannot write the upload");
        }
        goto cleanup;
    }
    if (r->received != r->expected) { /* MHD enforces Content-Length; kept as a guard */
        ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request", "body shorter than declared");
        goto cleanup;
    }
    EVP_DigestFinal_ex(r->sha, st.sha256, &mdlen);
    for (int i = 0; i < 32; i++) {
        rec.sha256[2 * i] = hexd[st.sha256[i] >> 4];
        rec.sha256[2 * i + 1] = hexd[st.sha256[i] & 15];
    }
    rec.sha256[64] = '\0';

    /* Start writing the upload back to disk now: verification below is CPU and page-cache reads,
     * so the disk works meanwhile and the fsync of the commit finds little left to write. */
    if (sync_file_range(r->fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0)
        psdbd_log("publish: sync_file_range %s: %s", r->tmp_path, strerror(errno));
    /* Everything `psdb verify` checks (content digest, sizes, references, ids, SQLite integrity):
     * a file indexed here is served to every client as it is, and a damaged one would fail or
     * miss on each of them instead of once here. */
    hr = psdb_file_open_verified(r->tmp_path, why, sizeof(why), &f);
    if (PSDB_FAILED(hr) || PSDB_FAILED(psdb_file_get_info(f, &info))) {
        if (hr == PSDB_E_OUTOFMEMORY)
            abort(); /* the daemon's policy */
        printable_ascii(why);
        if (hr == PSDB_E_IO || hr == PSDB_E_ACCESS) {
            psdbd_log("publish: read %s: %s", r->tmp_path, why);
            ret = reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                              "cannot read the upload");
        } else {
            ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                              "the body is not a valid PSDB: %s", why);
        }
        goto cleanup;
    }
    if (!info.identity.desc.name || !*info.identity.desc.name || !info.target.family ||
        !*info.target.family || info.target.abi_version > INT64_MAX) {
        ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                          "the PSDB has no application name or family, or an ABI version "
                          "above 2^63-1");
        goto cleanup;
    }
    {
        /* Strings go into JSON manifests and the signed statement: UTF-8, bounded. */
        const char *strs[] = {info.identity.desc.name, info.identity.desc.exe_filename,
                              info.identity.desc.engine_name, info.target.family};
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
            json_t *probe = strs[i] ? json_string(strs[i]) : NULL;
            int ok = !strs[i] || (probe && strlen(strs[i]) <= PSDB_STATEMENT_STRING_MAX);
            json_decref(probe);
            if (!ok) {
                ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                  "the PSDB's identity or family is not UTF-8 or longer than "
                                  "%u bytes",
                                  PSDB_STATEMENT_STRING_MAX);
                goto cleanup;
            }
        }
    }
    if (r->who.role != PSDBD_ROLE_ADMIN &&
        !psdbd_scope_covers(r->who.scope, info.identity.desc.name)) {
        ret = reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                          "the token's scope does not cover application '%s'",
                          info.identity.desc.name);
        goto cleanup;
    }
    if (!psdbd_scope_covers(r->key_scope, info.identity.desc.name)) {
        ret =
            reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                        "the key's scope does not cover application '%s'", info.identity.desc.name);
        goto cleanup;
    }
    st.size = r->received;
    st.identity = info.identity;
    st.target = info.target;
    st.serial = r->serial;
    if (PSDB_FAILED(psdb_key_from_pem(r->key_pem, strlen(r->key_pem), &key)) ||
        (hr = psdb_statement_verify(key, &st, r->signature)) != PSDB_S_OK) {
        ret = reply_error(c, r, MHD_HTTP_FORBIDDEN, "bad_signature",
                          "X-Psdb-Signature does not verify over this PSDB's statement with "
                          "key %s",
                          r->key_id);
        goto cleanup;
    }

    rec.app_name = info.identity.desc.name;
    rec.exe_filename = info.identity.desc.exe_filename;
    rec.engine_name = info.identity.desc.engine_name;
    rec.family = info.target.family;
    rec.app_version = info.identity.desc.version;
    rec.engine_version = info.identity.desc.engine_version;
    memcpy(rec.app_guid, info.identity.app_id, 16);
    rec.abi_version = info.target.abi_version;
    rec.compiler_version = info.target.compiler_version;
    rec.profile_version = info.target.profile_version;
    rec.serial = r->serial;
    rec.size = r->received;
    memcpy(rec.key_id, r->key_id, 65);
    rec.signature = r->signature;
    rec.published_by = r->who.name;

    /* Answer repeats and conflicts before touching the store. */
    rc = psdbd_index_find_identity(srv->ix, &rec, &manifest);
    if (rc == PSDBD_EXISTS) {
        psdbd_metrics_publish(0);
        ret = reply_json(c, r, MHD_HTTP_OK, manifest);
        manifest = NULL;
        goto cleanup;
    }
    if (rc == PSDBD_CONFLICT) {
        ret = reply_error(c, r, MHD_HTTP_CONFLICT, "conflict",
                          "this identity, target and serial are already published with other "
                          "content");
        goto cleanup;
    }
    if (rc != PSDBD_NOT_FOUND) {
        ret = reply_index_error(c, r, rc);
        goto cleanup;
    }
    /* The blob is durable under its final name before any index row can point at it. */
    if ((e = psdbd_store_commit(&srv->store, r->fd, r->tmp_path, rec.sha256)) != 0) {
        psdbd_log("publish: store blob %s: %s", rec.sha256, strerror(e));
        if (disk_full_errno(e))
            ret = reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                              "no space left to store the blob");
        else
            ret = reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                              "cannot store the blob");
        goto cleanup;
    }
    rc = psdbd_index_publish(srv->ix, &rec, &manifest);
    switch (rc) {
    case PSDBD_OK:
        psdbd_cache_invalidate();
        psdbd_metrics_publish(1);
        ret = reply_json(c, r, MHD_HTTP_CREATED, manifest);
        manifest = NULL;
        break;
    case PSDBD_EXISTS:
        psdbd_metrics_publish(0);
        ret = reply_json(c, r, MHD_HTTP_OK, manifest);
        manifest = NULL;
        break;
    case PSDBD_CONFLICT:
        ret = reply_error(c, r, MHD_HTTP_CONFLICT, "conflict",
                          "this identity, target and serial are already published with other "
                          "content");
        break;
    default:
        ret = reply_index_error(c, r, rc);
        break;
    }
cleanup:
    json_decref(manifest);
    psdb_key_release(key);
    psdb_file_release(f);
    publish_discard(r); /* after a commit the temporary name is gone: unlink is a no-op */
    return ret;
}

/* The end of a publish (validation, signature, fsync, rename, commit) may take seconds for a
 * large PSDB; it runs on its own thread while the connection is suspended, so the worker thread
 * keeps serving its other connections. */
/* A finisher thread: takes suspended publishes off the queue, finishes them, resumes them. The
 * threads are joined at shutdown, so their SQLite connections and OpenSSL state are gone before
 * the process exits. */
static void *finisher(void *arg)
{
    psdbd_server *srv = arg;
    pthread_mutex_lock(&srv->lock);
    for (;;) {
        while (!srv->queue && !srv->stopping)
            pthread_cond_wait(&srv->work, &srv->lock);
        if (!srv->queue)
            break;
        struct req *r = srv->queue;
        srv->queue = r->next;
        pthread_mutex_unlock(&srv->lock);
        struct MHD_Connection *c = r->conn;
        publish_finish(srv, NULL, r);
        MHD_resume_connection(c); /* r belongs to the connection again from here on */
        pthread_mutex_lock(&srv->lock);
        if (--srv->jobs == 0)
            pthread_cond_broadcast(&srv->idle);
    }
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

static enum MHD_Result publish_defer(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct req **tail;
    r->publishing = 0;
    r->finishing = 1;
    r->conn = c;
    MHD_suspend_connection(c);
    pthread_mutex_lock(&srv->lock);
    srv->jobs++;
    for (tail = &srv->queue; *tail; tail = &(*tail)->next) {
    }
    *tail = r;
    pthread_cond_signal(&srv->work);
    pthread_mutex_unlock(&srv->lock);
    return MHD_YES;
}

/* ---- blobs ----------------------------------------------------------------------------------- */

int psdbd_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
    const char *p, *dash;
    uint64_t a = 0, b = 0;
    char num[24];
    if (!h || strncasecmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0;
    p = h + 6;
    while (*p == ' ')
        p++;
    dash = strchr(p, '-');
    if (!dash || (size_t)(dash - p) >= sizeof(num) || strlen(dash + 1) >= sizeof(num))
        return 0;
    if (dash == p) { /* suffix: the last N bytes */
        if (psdbd_parse_u64(dash + 1, &b) != 0 || strncmp(dash + 1, "0x", 2) == 0)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        if (b > size)
            b = size;
        *off = size - b;
        *len = b;
        return 1;
    }
    memcpy(num, p, (size_t)(dash - p));
    num[dash - p] = '\0';
    if (psdbd_parse_u64(num, &a) != 0 || strncmp(num, "0x", 2) == 0)
        return 0;
    if (dash[1] == '\0') {
        b = UINT64_MAX;
    } else if (psdbd_parse_u64(dash + 1, &b) != 0 || strncmp(dash + 1, "0x", 2) == 0 || b < a) {
        return 0;
    }
    if (a >= size)
        return -1;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

int psdbd_etag_matches(const char *inm, const char *sha)
{
    const char *p = inm;
    size_t n = strlen(sha);
    if (!inm)
        return 0;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '*')
            return 1;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        if (*p == '"' && strncmp(p + 1, sha, n) == 0 && p[1 + n] == '"')
            return 1;
        while (*p && *p != ',')
            p++;
    }
    return 0;
}

static void blob_headers(struct MHD_Response *resp, const char *etag)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=31536000, immutable");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
}

static enum MHD_Result serve_blob(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                  const char *digest)
{
    enum MHD_Result ret = MHD_YES;
    struct MHD_Response *resp = NULL;
    char etag[70], crange[96];
    uint64_t size = 0, off = 0, len = 0;
    int fd = -1, e, rr;
    const char *range, *if_range;
    if (!psdbd_is_digest(digest))
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_digest",
                           "a blob is named by 64 lowercase hex digits (its SHA-256)");
    if (authorize(srv, c, r, reader_role(srv), NULL, &ret) != 0)
        return ret;
    if ((e = psdbd_store_open_blob(&srv->store, digest, &fd, &size)) != 0) {
        if (e == ENOENT)
            return reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no such blob");
        psdbd_log("open blob %s: %s", digest, strerror(e));
        return reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                           "cannot open the blob");
    }
    snprintf(etag, sizeof(etag), "\"%s\"", digest);
    if (psdbd_etag_matches(
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
            digest)) {
        close(fd);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (resp)
            blob_headers(resp, etag);
        return queue(c, r, MHD_HTTP_NOT_MODIFIED, resp, 0);
    }
    range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
    if_range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_RANGE);
    if (range && if_range && strcmp(if_range, etag) != 0)
        range = NULL; /* a stale validator: send the whole representation */
    rr = psdbd_parse_range(range, size, &off, &len);
    if (rr < 0) {
        close(fd);
        snprintf(crange, sizeof(crange), "bytes */%llu", (unsigned long long)size);
        char *body = xasprintf("{\"error\":\"range_not_satisfiable\",\"message\":\"the blob has "
                               "%llu bytes\"}\n",
                               (unsigned long long)size);
        resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            free(body);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, JSON_TYPE);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
        blob_headers(resp, etag);
        return queue(c, r, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp, strlen(body));
    }
    if (rr == 0) {
        off = 0;
        len = size;
    }
    /* The fd belongs to the response from here on; sendfile serves it on plain HTTP. */
    resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    blob_headers(resp, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, BLOB_TYPE);
    if (rr > 0) {
        snprintf(crange, sizeof(crange), "bytes %llu-%llu/%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), (unsigned long long)size);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
        return queue(c, r, MHD_HTTP_PARTIAL_CONTENT, resp, len);
    }
    return queue(c, r, MHD_HTTP_OK, resp, len);
}

/* ---- the other routes ------------------------------------------------------------------------ */

static int parse_id(const char *s, int64_t *out)
{
    uint64_t v = 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    if (psdbd_parse_u64(s, &v) != 0 || v == 0 || v > INT64_MAX)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static const char *arg(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

static enum MHD_Result resolve(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_query q = {0};
    json_t *m = NULL;
    const char *v;
    q.app = arg(c, "app");
    q.family = arg(c, "family");
    if (!q.app || !q.family)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "app and family are required");
    if (!(v = arg(c, "app_version")) || psdbd_parse_version(v, &q.app_version) != 0)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "app_version is required (a.b.c.d or a number)");
    if (!(v = arg(c, "abi_min")) || psdbd_parse_u64(v, &q.abi_min) != 0 ||
        !(v = arg(c, "abi_max")) || psdbd_parse_u64(v, &q.abi_max) != 0 || q.abi_min > q.abi_max)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "abi_min and abi_max are required numbers, abi_min <= abi_max");
    if ((v = arg(c, "profile_version")) != NULL) {
        if (psdbd_parse_version(v, &q.profile_version) != 0)
            return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "profile_version must be a.b.c.d or a number");
        q.has_profile = 1;
    }
    if (authorize(srv, c, r, reader_role(srv), q.app, &ret) != 0)
        return ret;
    /* The cache key is the parsed query: equivalent spellings share an answer. Only the top 32
     * bits of the profile version matter to the answer. */
    uint64_t gen = psdbd_cache_generation();
    char *key = xasprintf("%s%c%s%c%llx %llx %llx %d %llx", q.app, 0, q.family, 0,
                          (unsigned long long)q.app_version, (unsigned long long)q.abi_min,
                          (unsigned long long)q.abi_max, q.has_profile,
                          (unsigned long long)(q.profile_version >> 32));
    size_t key_len = strlen(q.app) + 1 + strlen(q.family) + 1;
    key_len += strlen(key + key_len);
    unsigned status = 0;
    char *body = NULL;
    size_t len = 0;
    if (psdbd_cache_get(key, key_len, &status, &body, &len)) {
        free(key);
        psdbd_metrics_resolve(status == MHD_HTTP_OK);
        return reply_buffer(c, r, status, JSON_TYPE, body, len);
    }
    switch (psdbd_index_resolve(srv->ix, &q, &m)) {
    case PSDBD_OK:
        status = MHD_HTTP_OK;
        break;
    case PSDBD_NOT_FOUND:
        status = MHD_HTTP_NOT_FOUND;
        m = json_pack("{s:s, s:s}", "error", "not_found", "message",
                      "no compatible PSDB for this application and adapter");
        break;
    default:
        free(key);
        return reply_index_error(c, r, PSDBD_ERROR);
    }
    psdbd_metrics_resolve(status == MHD_HTTP_OK);
    body = json_text(m, &len);
    json_decref(m);
    psdbd_cache_put(key, key_len, status, body, len, gen);
    free(key);
    return reply_buffer(c, r, status, JSON_TYPE, body, len);
}

static enum MHD_Result psdb_by_id(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                  const char *id_text, int retire)
{
    enum MHD_Result ret = MHD_YES;
    int64_t id = 0;
    json_t *m = NULL;
    const char *app;
    psdbd_rc rc;
    if (parse_id(id_text, &id) != 0)
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "a PSDB id is a positive decimal number");
    /* Authenticate before revealing whether the id exists. */
    if (authorize(srv, c, r, retire ? PSDBD_ROLE_PUBLISHER : reader_role(srv), NULL, &ret) != 0)
        return ret;
    rc = psdbd_index_get(srv->ix, id, &m);
    if (rc == PSDBD_NOT_FOUND)
        return reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no PSDB with id %lld",
                           (long long)id);
    if (rc != PSDBD_OK)
        return reply_index_error(c, r, rc);
    app = json_string_value(json_object_get(json_object_get(m, "app"), "name"));
    if (authorize(srv, c, r, retire ? PSDBD_ROLE_PUBLISHER : reader_role(srv), app, &ret) != 0) {
        json_decref(m);
        return ret;
    }
    if (!retire)
        return reply_json(c, r, MHD_HTTP_OK, m);
    json_decref(m);
    m = NULL;
    rc = psdbd_index_retire(srv->ix, id, r->who.name, &m);
    psdbd_cache_invalidate();
    if (rc != PSDBD_OK)
        return reply_index_error(c, r, rc);
    return reply_json(c, r, MHD_HTTP_OK, m);
}

static enum MHD_Result app_psdbs(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                 const char *name)
{
    enum MHD_Result ret = MHD_YES;
    json_t *list = NULL;
    if (authorize(srv, c, r, reader_role(srv), name, &ret) != 0)
        return ret;
    switch (psdbd_index_list_app_psdbs(srv->ix, name, &list)) {
    case PSDBD_OK:
        return reply_json(c, r, MHD_HTTP_OK, list);
    case PSDBD_NOT_FOUND:
        return reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no such application");
    default:
        return reply_index_error(c, r, PSDBD_ERROR);
    }
}

static enum MHD_Result readyz(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct stat sb;
    if (psdbd_index_ping(srv->ix) != 0)
        return reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                           "the index does not answer");
    if (stat(srv->store.blob_dir, &sb) != 0 || access(srv->store.tmp_dir, W_OK) != 0)
        return reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                           "the blob store is not usable");
    return reply_json(c, r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ready"));
}

/* Which route a request is for; *tail receives the path parameter when there is one. */
static psdbd_route route_of(const char *url, const char **tail)
{
    static const char blobs[] = "/v1/blobs/", psdbs[] = "/v1/psdbs/", apps[] = "/v1/apps/";
    size_t n;
    *tail = NULL;
    if (strcmp(url, "/healthz") == 0)
        return PSDBD_ROUTE_HEALTHZ;
    if (strcmp(url, "/readyz") == 0)
        return PSDBD_ROUTE_READYZ;
    if (strcmp(url, "/metrics") == 0)
        return PSDBD_ROUTE_METRICS;
    if (strcmp(url, "/v1/psdbs") == 0)
        return PSDBD_ROUTE_PUBLISH;
    if (strcmp(url, "/v1/resolve") == 0)
        return PSDBD_ROUTE_RESOLVE;
    if (strcmp(url, "/v1/apps") == 0)
        return PSDBD_ROUTE_APPS;
    if (strncmp(url, blobs, sizeof(blobs) - 1) == 0) {
        *tail = url + sizeof(blobs) - 1;
        return PSDBD_ROUTE_BLOB;
    }
    if (strncmp(url, psdbs, sizeof(psdbs) - 1) == 0) {
        *tail = url + sizeof(psdbs) - 1;
        return PSDBD_ROUTE_PSDB_GET;
    }
    n = strlen(url);
    if (strncmp(url, apps, sizeof(apps) - 1) == 0 && n > sizeof(apps) - 1 + 6 &&
        strcmp(url + n - 6, "/psdbs") == 0) {
        *tail = url + sizeof(apps) - 1;
        return PSDBD_ROUTE_APP_PSDBS;
    }
    return PSDBD_ROUTE_OTHER;
}

static enum MHD_Result dispatch(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *url, const char *tail)
{
    enum MHD_Result ret = MHD_YES;
    int get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    switch (r->route) {
    case PSDBD_ROUTE_HEALTHZ:
        if (!get)
            break;
        return reply_json(c, r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
    case PSDBD_ROUTE_READYZ:
        if (!get)
            break;
        return readyz(srv, c, r);
    case PSDBD_ROUTE_METRICS: {
        if (!get)
            break;
        if (authorize(srv, c, r, srv->cfg->metrics_need_token ? PSDBD_ROLE_READER : PSDBD_ROLE_NONE,
                      NULL, &ret) != 0)
            return ret;
        char *text = psdbd_metrics_render();
        return reply_buffer(c, r, MHD_HTTP_OK, "text/plain; version=0.0.4", text, strlen(text));
    }
    case PSDBD_ROUTE_RESOLVE:
        if (!get)
            break;
        return resolve(srv, c, r);
    case PSDBD_ROUTE_APPS: {
        json_t *list = NULL;
        if (!get)
            break;
        if (authorize(srv, c, r, reader_role(srv), NULL, &ret) != 0)
            return ret;
        if (psdbd_index_list_apps(srv->ix, &list) != PSDBD_OK)
            return reply_index_error(c, r, PSDBD_ERROR);
        return reply_json(c, r, MHD_HTTP_OK, list);
    }
    case PSDBD_ROUTE_APP_PSDBS: {
        if (!get)
            break;
        size_t n = strlen(tail) - 6;
        char *name = xmalloc(n + 1);
        memcpy(name, tail, n);
        name[n] = '\0';
        ret = app_psdbs(srv, c, r, name);
        free(name);
        return ret;
    }
    case PSDBD_ROUTE_BLOB:
        if (!get)
            break;
        return serve_blob(srv, c, r, tail);
    case PSDBD_ROUTE_PSDB_GET:
        if (strcmp(r->method, "DELETE") == 0) {
            r->route = PSDBD_ROUTE_PSDB_RETIRE;
            return psdb_by_id(srv, c, r, tail, 1);
        }
        if (!get)
            break;
        return psdb_by_id(srv, c, r, tail, 0);
    case PSDBD_ROUTE_PUBLISH:
        break; /* POST is handled before dispatch */
    default:
        return reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint: %.200s", url);
    }
    return reply_error(c, r, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                       "%.16s is not allowed here", r->method);
}

/* ---- MHD callbacks --------------------------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    const char *tail = NULL;
    (void)version;
    if (!r) {
        r = xcalloc(1, sizeof(*r));
        r->start_ns = psdbd_now_ns();
        r->fd = -1;
        snprintf(r->method, sizeof(r->method), "%s", method);
        r->path = xstrdup(url);
        *req_cls = r;
        pthread_mutex_lock(&srv->lock);
        srv->active++;
        pthread_mutex_unlock(&srv->lock);
        r->route = route_of(url, &tail);
        if (r->route == PSDBD_ROUTE_PUBLISH && strcmp(method, "POST") == 0)
            return publish_begin(srv, c, r);
        /* Other requests are answered once the request is read: libmicrohttpd closes the
         * connection after an answer queued before that point. */
        return MHD_YES;
    }
    if (r->publishing) {
        if (*upload_data_size > 0) {
            publish_chunk(r, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        return publish_defer(srv, c, r);
    }
    if (r->finishing) {
        json_t *body = r->result_body;
        r->finishing = 0;
        r->result_body = NULL;
        if (!body)
            return MHD_NO;
        return reply_json(c, r, r->result_status, body);
    }
    if (*upload_data_size > 0 || r->status != 0) {
        /* A body on any other request (or after an early answer) is read and dropped. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    r->route = route_of(url, &tail);
    return dispatch(srv, c, r, url, tail);
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == ' ')
            *s = '?';
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    (void)c;
    if (!r)
        return;
    *req_cls = NULL;
    double ms = (double)(psdbd_now_ns() - r->start_ns) / 1e6;
    int ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    psdbd_metrics_request(r->route, ok ? r->status : 0, ok ? r->bytes : 0);
    if (srv->cfg->log_requests) {
        static const char *why[] = {"ok",       "error",      "timeout",
                                    "shutdown", "read_error", "client_abort"};
        sanitize(r->path);
        fprintf(stderr, "psdbd: access %s %s %u %llu %.3fms %s%s%s\n", r->method, r->path,
                r->status, (unsigned long long)(ok ? r->bytes : 0), ms,
                r->who.name ? r->who.name : "-",
                ok ? "" : " aborted=", ok ? "" : ((unsigned)toe < 6 ? why[toe] : "other"));
    }
    publish_discard(r);
    json_decref(r->result_body);
    psdbd_principal_free(&r->who);
    free(r->key_pem);
    free(r->key_scope);
    free(r->path);
    free(r);
    pthread_mutex_lock(&srv->lock);
    if (--srv->active == 0)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->lock);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    (void)c;
    (void)socket_context;
    psdbd_metrics_connection(toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    psdbd_log("libmicrohttpd: %s", msg);
}

/* ---- start and stop -------------------------------------------------------------------------- */

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len, char *err,
                        size_t err_size)
{
    char host[256];
    const char *colon, *port;
    struct addrinfo hints = {0}, *res = NULL;
    int rc;
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');
        if (!end || end[1] != ':' || (size_t)(end - listen - 1) >= sizeof(host))
            goto bad;
        memcpy(host, listen + 1, (size_t)(end - listen - 1));
        host[end - listen - 1] = '\0';
        port = end + 2;
    } else {
        colon = strrchr(listen, ':');
        if (!colon || (size_t)(colon - listen) >= sizeof(host))
            goto bad;
        memcpy(host, listen, (size_t)(colon - listen));
        host[colon - listen] = '\0';
        port = colon + 1;
    }
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, err_size, "listen address '%s': %s", listen, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
bad:
    snprintf(err, err_size, "listen address '%s': expected HOST:PORT or [IPV6]:PORT", listen);
    return -1;
}

static char *read_pem(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (!f) {
        snprintf(err, err_size, "open %s: %s", path, strerror(errno));
        return NULL;
    }
    buf = xmalloc(1 << 20);
    n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    if (n == 0 || n == (1 << 20) - 1) {
        snprintf(err, err_size, "%s: empty or too large for a PEM file", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int psdbd_http_start(psdbd_server *srv, char *err, size_t err_size)
{
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    char *cert = NULL, *key = NULL;
    const union MHD_DaemonInfo *info;
    int rc = -1;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
    const psdbd_config *cfg = srv->cfg;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->idle, NULL);
    pthread_cond_init(&srv->work, NULL);
    if (parse_listen(cfg->listen, &ss, &sslen, err, err_size) != 0)
        goto cleanup;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if ((cfg->tls_cert != NULL) != (cfg->tls_key != NULL)) {
        snprintf(err, err_size, "tls-cert and tls-key must be given together");
        goto cleanup;
    }
    if (cfg->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            snprintf(err, err_size,
                     "this libmicrohttpd was built without TLS (GnuTLS): serve "
                     "plain HTTP behind a TLS proxy instead");
            goto cleanup;
        }
        if (!(cert = read_pem(cfg->tls_cert, err, err_size)) ||
            !(key = read_pem(cfg->tls_key, err, err_size)))
            goto cleanup;
        flags |= MHD_USE_TLS;
    }
    srv->finishers = xcalloc(cfg->threads < 2 ? 2 : cfg->threads, sizeof(pthread_t));
    for (unsigned i = 0; i < (cfg->threads < 2 ? 2 : cfg->threads); i++) {
        int e = pthread_create(&srv->finishers[i], NULL, finisher, srv);
        if (e != 0) {
            snprintf(err, err_size, "cannot start finisher threads: %s", strerror(e));
            goto cleanup;
        }
        srv->num_finishers = i + 1;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_LARGE_FILE) != MHD_YES)
        psdbd_log("warning: this libmicrohttpd cannot serve files over 2 GiB");
    {
        struct MHD_OptionItem ops[] = {
            {MHD_OPTION_SOCK_ADDR, 0, &ss},
            {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)cfg->threads, NULL},
            {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections, NULL},
            {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)cfg->max_connections_per_ip, NULL},
            {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->timeout, NULL},
            {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)cfg->connection_memory, NULL},
            {MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL},
            {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, srv},
            {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, srv},
            /* TLS entries last: cut off by MHD_OPTION_END when serving plain HTTP */
            {cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, cert},
            {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
            {MHD_OPTION_END, 0, NULL}};
        /* The logger goes first: MHD reports option errors through it. */
        srv->daemon =
            MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
                             on_mhd_log, NULL, MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    }
    if (!srv->daemon) {
        snprintf(err, err_size, "cannot serve on %s (address in use, or bad settings; see above)",
                 cfg->listen);
        goto cleanup;
    }
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : 0;
    rc = 0;
cleanup:
    if (rc != 0 && srv->finishers) {
        pthread_mutex_lock(&srv->lock);
        srv->stopping = 1;
        pthread_cond_broadcast(&srv->work);
        pthread_mutex_unlock(&srv->lock);
        for (unsigned i = 0; i < srv->num_finishers; i++)
            pthread_join(srv->finishers[i], NULL);
        free(srv->finishers);
        srv->finishers = NULL;
    }
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    free(cert);
    return rc;
}

void psdbd_http_stop(psdbd_server *srv)
{
    struct timespec deadline;
    if (!srv->daemon)
        return;
    /* After quiescing, the listen socket is ours to close: new connections are refused now
     * rather than queued until MHD_stop_daemon. */
    MHD_socket ls = MHD_quiesce_daemon(srv->daemon);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += srv->cfg->shutdown_timeout;
    pthread_mutex_lock(&srv->lock);
    while (srv->active > 0) {
        if (pthread_cond_timedwait(&srv->idle, &srv->lock, &deadline) == ETIMEDOUT) {
            psdbd_log("shutdown: %u requests still running after %u s, closing them", srv->active,
                      srv->cfg->shutdown_timeout);
            break;
        }
    }
    /* A suspended connection must not meet MHD_stop_daemon: finishing publishes always end. */
    while (srv->jobs > 0)
        pthread_cond_wait(&srv->idle, &srv->lock);
    /* A publish resumed just now is still suspended until its worker picks it up: give the
     * worker a moment to answer it. */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    while (srv->active > 0 &&
           pthread_cond_timedwait(&srv->idle, &srv->lock, &deadline) != ETIMEDOUT) {
    }
    srv->stopping = 1;
    pthread_cond_broadcast(&srv->work);
    pthread_mutex_unlock(&srv->lock);
    for (unsigned i = 0; i < srv->num_finishers; i++)
        pthread_join(srv->finishers[i], NULL);
    free(srv->finishers);
    srv->finishers = NULL;
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    pthread_cond_destroy(&srv->work);
    pthread_cond_destroy(&srv->idle);
    pthread_mutex_destroy(&srv->lock);
}
