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
 * disconnects mid-body leaves nothing behind.
 *
 * The request starts in the URI log callback, which sees the target before libmicrohttpd decodes
 * it (an encoded NUL is only visible there) and makes the struct req, so requests libmicrohttpd
 * refuses alone are logged too. Each connection carries a struct conn (its socket context) with
 * the deadline for receiving its current request; libmicrohttpd's own timeout only counts idle
 * time, so a reaper thread shuts down the sockets of connections past their deadline. The
 * deadline is cleared once a response is queued (sending is bounded by the idle timeout) and set
 * afresh when a request completes, for the next one on a keep-alive connection. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked (glibc's copy is older) */
#include <stdatomic.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
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
#include "http_parse.h"
#include "metrics.h"

#define JSON_TYPE "application/json"
#define BLOB_TYPE "application/octet-stream"

/* One client connection (its socket context): the deadline by which the request now being read
 * must have arrived, enforced by the reaper thread. */
struct conn {
    struct conn *prev, *next; /* in srv->conns */
    int fd;
    atomic_uint_fast64_t deadline_ns; /* psdbd_now_ns() time; 0 while a response is sent */
    atomic_int timed_out;             /* the reaper shut the socket down */
};

struct req {
    uint64_t start_ns;
    psdbd_route route;
    unsigned status;
    uint64_t bytes; /* response body bytes queued */
    int started;    /* the access handler has seen the request */
    int bad_uri;    /* the raw request target encodes a NUL */
    struct conn *cx;
    /* For the bytes of an aborted response: what had been written to the socket before it was
     * queued, and the size of its header (estimated as libmicrohttpd writes it). */
    int sent_known;
    uint64_t sent_base, header_bytes;
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

static uint64_t seconds_ns(uint64_t s)
{
    return s > UINT64_MAX / 1000000000u / 2 ? UINT64_MAX / 2 : s * 1000000000u;
}

/* ---- responses ------------------------------------------------------------------------------- */

/* Bytes the application has written to a TCP socket so far: those the peer acknowledged plus
 * those still in the send queue. A reset connection drops its queue, so what remains counts what
 * reached the client. */
static int socket_written(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int queued = 0;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
        return -1;
    if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0)
        queued = 0;
    *out = ti.tcpi_bytes_acked + (uint64_t)queued;
    return 0;
}

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    *(uint64_t *)cls += strlen(key) + 2 + (value ? strlen(value) : 0) + 2;
    return MHD_YES;
}

/* The header libmicrohttpd writes for `resp`: status line, our headers, Date, Content-Length and
 * the blank line (a Connection header, when it adds one, is not counted). */
static uint64_t header_size(struct MHD_Response *resp, unsigned status, uint64_t body_len)
{
    char cl[32];
    const char *reason = MHD_get_reason_phrase_for(status);
    uint64_t n = strlen("HTTP/1.1 ") + 3 + 1 + (reason ? strlen(reason) : 0) + 2;
    MHD_get_response_headers(resp, add_header_size, &n);
    n += strlen("Date: ") + 29 + 2;
    if (status != MHD_HTTP_NOT_MODIFIED)
        n += (uint64_t)snprintf(cl, sizeof(cl), "Content-Length: %llu\r\n",
                                (unsigned long long)body_len);
    return n + 2;
}

static enum MHD_Result queue(struct MHD_Connection *c, struct req *r, unsigned status,
                             struct MHD_Response *resp, uint64_t body_bytes)
{
    enum MHD_Result ret;
    if (!resp)
        return MHD_NO;
    r->status = status;
    r->bytes = strcmp(r->method, "HEAD") == 0 ? 0 : body_bytes;
    /* The request is read (or refused): the receive deadline no longer applies; a slow reader
     * of the answer is bounded by the idle timeout. */
    if (r->cx) {
        atomic_store(&r->cx->deadline_ns, 0);
        r->sent_known = socket_written(r->cx->fd, &r->sent_base) == 0;
        r->header_bytes = header_size(resp, status, body_bytes);
    }
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
    if (rc == PSDBD_UNAVAILABLE) /* logged where it was found: the log says what happened */
        return reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "index_unavailable",
                           "the index was removed, replaced or damaged; see the server log");
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
            *ret = reply_index_error(c, r, psdbd_index_failure(srv->ix));
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

/* True when the request's token limits which applications it sees: a token was checked, it is
 * not an admin's, and its scope is not '*'. Anonymous reads (no token needed) see everything. */
static int scoped(const struct req *r)
{
    return r->who.name && r->who.role != PSDBD_ROLE_ADMIN &&
           !(r->who.scope && strcmp(r->who.scope, "*") == 0);
}

/* Removes the entries of a listing ({"name": ...} objects) that the token's scope does not
 * cover. */
static void drop_out_of_scope(const struct req *r, json_t *list)
{
    if (!scoped(r) || !json_is_array(list))
        return;
    for (size_t i = json_array_size(list); i-- > 0;) {
        const char *name = json_string_value(json_object_get(json_array_get(list, i), "name"));
        if (!psdbd_scope_covers(r->who.scope, name))
            json_array_remove(list, i);
    }
}

static int scope_accepts(const char *app, void *ctx)
{
    return psdbd_scope_covers(ctx, app);
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
    if (!psdbd_is_signature_b64(sig))
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "X-Psdb-Signature must be the 88-character base64 of a 64-byte "
                           "Ed25519 signature");
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
    /* The body may take its time, but not forever: request-timeout plus its length at the
     * slowest upload rate accepted. */
    if (r->cx && srv->cfg->request_timeout) {
        uint64_t secs = srv->cfg->request_timeout;
        secs += srv->cfg->upload_min_rate ? len / srv->cfg->upload_min_rate + 1 : UINT32_MAX;
        atomic_store(&r->cx->deadline_ns, psdbd_now_ns() + seconds_ns(secs));
    }
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
        static const char *const fields[] = {"application name", "exe filename", "engine name",
                                             "family"};
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
            json_t *probe = strs[i] ? json_string(strs[i]) : NULL;
            int ok = !strs[i] || (probe && strlen(strs[i]) <= PSDB_STATEMENT_STRING_MAX);
            /* Identity strings reach manifests, logs and launchers' screens. */
            long cc = ok && strs[i] ? psdbd_control_char_in(strs[i]) : -1;
            json_decref(probe);
            if (!ok) {
                ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                  "the PSDB's %s is not UTF-8 or longer than %u bytes", fields[i],
                                  PSDB_STATEMENT_STRING_MAX);
                goto cleanup;
            }
            if (cc >= 0) {
                ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                  "the PSDB's %s contains the control character U+%04lX", fields[i],
                                  (unsigned long)cc);
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
    if (r->cx) /* the body is in: validation and the commit are not the client's time */
        atomic_store(&r->cx->deadline_ns, 0);
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

/* The content of a 304: none (libmicrohttpd never asks for a body it does not send). */
static ssize_t no_content(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void blob_headers(struct MHD_Response *resp, const char *etag, const char *last_modified)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, last_modified);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=31536000, immutable");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
}

/* When the blob was published: the earliest PSDB row naming it. A blob no row names (a leftover
 * that gc has not removed yet) falls back to its file's mtime, which is when it was stored. */
static int64_t blob_published(psdbd_server *srv, const char *digest, int fd)
{
    int64_t t = 0;
    struct stat sb;
    if (psdbd_index_blob_published(srv->ix, digest, &t) == PSDBD_OK)
        return t;
    return fstat(fd, &sb) == 0 ? (int64_t)sb.st_mtime : 0;
}

static enum MHD_Result serve_blob(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                  const char *digest)
{
    enum MHD_Result ret = MHD_YES;
    struct MHD_Response *resp = NULL;
    char etag[70], crange[96], lastmod[40];
    uint64_t size = 0, off = 0, len = 0;
    int fd = -1, e, rr, use_range = 1;
    unsigned pre;
    const char *range;
    psdbd_conditions cond;
    if (!psdbd_is_digest(digest))
        return reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_digest",
                           "a blob is named by 64 lowercase hex digits (its SHA-256)");
    if (authorize(srv, c, r, reader_role(srv), NULL, &ret) != 0)
        return ret;
    /* A scoped token reads a blob only through a PSDB of an application in its scope; asked
     * before the file is looked at, so a 403 says nothing about whether the blob exists. */
    if (scoped(r)) {
        psdbd_rc rc = psdbd_index_blob_apps(srv->ix, digest, scope_accepts, r->who.scope);
        if (rc == PSDBD_NOT_FOUND)
            return reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                               "no PSDB of an application in the token's scope has this blob");
        if (rc != PSDBD_OK)
            return reply_index_error(c, r, rc);
    }
    if ((e = psdbd_store_open_blob(&srv->store, digest, &fd, &size)) != 0) {
        if (e == ENOENT)
            return reply_error(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no such blob");
        psdbd_log("open blob %s: %s", digest, strerror(e));
        return reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                           "cannot open the blob");
    }
    snprintf(etag, sizeof(etag), "\"%s\"", digest);
    int64_t published = blob_published(srv, digest, fd);
    psdbd_format_http_date(published, lastmod, sizeof(lastmod));
    cond.if_match = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MATCH);
    cond.if_none_match =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    cond.if_modified_since =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MODIFIED_SINCE);
    cond.if_unmodified_since =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_UNMODIFIED_SINCE);
    cond.if_range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_RANGE);
    pre = psdbd_blob_preconditions(&cond, digest, published, (int64_t)time(NULL), &use_range);
    if (pre == MHD_HTTP_PRECONDITION_FAILED) {
        close(fd);
        return reply_error(c, r, MHD_HTTP_PRECONDITION_FAILED, "precondition_failed",
                           "the blob does not match If-Match or If-Unmodified-Since");
    }
    if (pre == MHD_HTTP_NOT_MODIFIED) {
        close(fd);
        /* A 304 has no content, and libmicrohttpd 0.9.75 cannot send one without a framing
         * header on a kept-alive connection: a sized response gets "Content-Length: 0" (a
         * claim that the blob is empty; RFC 9110 8.6 allows only the 200's length), an unsized
         * one "Transfer-Encoding: chunked". Unsized and closing the connection, it sends
         * neither. A 304 is rare here (blobs are immutable and cached for a year), so the
         * reconnect costs little. */
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, no_content, NULL, NULL);
        if (!resp)
            return MHD_NO;
        MHD_set_response_options(resp, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END);
        blob_headers(resp, etag, lastmod);
        return queue(c, r, MHD_HTTP_NOT_MODIFIED, resp, 0);
    }
    range =
        use_range ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE) : NULL;
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
        blob_headers(resp, etag, lastmod);
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
    blob_headers(resp, etag, lastmod);
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
        return reply_index_error(c, r, psdbd_index_failure(srv->ix));
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
        return reply_index_error(c, r, psdbd_index_failure(srv->ix));
    }
}

static enum MHD_Result readyz(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct stat sb;
    if (psdbd_index_ping(srv->ix) != 0)
        return reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready", "%s",
                           psdbd_index_lost(srv->ix)
                               ? "the index was removed, replaced or damaged; see the server log"
                               : "the index does not answer");
    if (stat(srv->store.blob_dir, &sb) != 0 || access(srv->store.tmp_dir, W_OK) != 0)
        return reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                           "the blob store is not usable");
    return reply_json(c, r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ready"));
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
        psdbd_rc rc;
        if (authorize(srv, c, r, reader_role(srv), NULL, &ret) != 0)
            return ret;
        if ((rc = psdbd_index_list_apps(srv->ix, &list)) != PSDBD_OK)
            return reply_index_error(c, r, rc);
        drop_out_of_scope(r, json_object_get(list, "apps"));
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

static struct conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static struct req *req_new(psdbd_server *srv, struct MHD_Connection *c)
{
    struct req *r = xcalloc(1, sizeof(*r));
    r->start_ns = psdbd_now_ns();
    r->fd = -1;
    r->cx = conn_of(c);
    pthread_mutex_lock(&srv->lock);
    srv->active++;
    pthread_mutex_unlock(&srv->lock);
    return r;
}

/* Called with the request target as received, once the request line is read and before it is
 * percent-decoded: the only place a "%00" can still be seen (the decoded path and arguments end
 * at it). Its result becomes *req_cls, so the request is accounted for even when libmicrohttpd
 * answers it alone (a 431, a malformed header). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct req *r = req_new(cls, c);
    const char *tail = NULL;
    r->bad_uri = psdbd_uri_has_encoded_nul(uri);
    r->path = xstrdup(uri);
    /* The route until the decoded path replaces it: a request that never gets past its
     * headers is still counted under the route it asked for. */
    size_t n = strcspn(uri, "?");
    char *path = xmalloc(n + 1);
    memcpy(path, uri, n);
    path[n] = '\0';
    r->route = psdbd_route_of(path, &tail);
    free(path);
    return r;
}

struct framing {
    unsigned content_length, transfer_encoding;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct framing *f = cls;
    (void)kind;
    (void)value;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        f->transfer_encoding++;
    return MHD_YES;
}

/* Checks what every request must satisfy before its route sees it. 0, or an error response was
 * queued and *ret says how to return. */
static int check_request(struct MHD_Connection *c, struct req *r, enum MHD_Result *ret)
{
    struct framing f = {0};
    if (r->bad_uri) {
        *ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           "the request target encodes a NUL byte (%%00)");
        return -1;
    }
    /* libmicrohttpd frames the body by the first Content-Length; a proxy in front may have used
     * another one. Two lengths, or a length beside chunked coding, are a smuggling attempt or a
     * broken client: refused, and the connection closed (RFC 9112 6.3). */
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.content_length > 1 || (f.content_length && f.transfer_encoding)) {
        *ret = reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                           f.content_length > 1
                               ? "the request has more than one Content-Length"
                               : "the request has both Content-Length and Transfer-Encoding");
        return -1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    const char *tail = NULL;
    enum MHD_Result ret = MHD_YES;
    (void)version;
    if (!r) /* on_uri always runs first; kept so that a missing call cannot crash */
        *req_cls = r = req_new(srv, c);
    if (!r->started) {
        r->started = 1;
        snprintf(r->method, sizeof(r->method), "%s", method);
        if (!r->bad_uri) { /* the log shows the decoded path, as routing saw it */
            free(r->path);
            r->path = xstrdup(url);
        }
        r->route = psdbd_route_of(url, &tail);
        if (check_request(c, r, &ret) != 0)
            return ret;
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
        /* A body on any other request (or after an early answer) is read and dropped, within
         * the request's receive deadline. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    r->route = psdbd_route_of(url, &tail);
    return dispatch(srv, c, r, url, tail);
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == ' ')
            *s = '?';
}

/* The access log's and the metrics' name for how a request ended (schema/HTTP.md). */
static const char *abort_reason(enum MHD_RequestTerminationCode toe, int timed_out)
{
    if (timed_out)
        return "timeout"; /* the receive deadline: the reaper shut the socket down */
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return NULL;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    default:
        return "error"; /* libmicrohttpd gave up: a failed send, a broken request, no memory */
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    if (!r)
        return;
    *req_cls = NULL;
    double ms = (double)(psdbd_now_ns() - r->start_ns) / 1e6;
    const char *why = abort_reason(toe, r->cx && atomic_load(&r->cx->timed_out));
    uint64_t bytes = r->bytes, now_sent = 0;
    if (!r->started) {
        /* libmicrohttpd answered alone (a malformed or oversized header): its status. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        if (ci && ci->http_status >= 100 && ci->http_status <= 599)
            r->status = ci->http_status;
    }
    if (why) {
        /* What reached the client, not what was planned: the socket's counters since the
         * response was queued, less its header, at most the body. */
        bytes = 0;
        if (r->status && r->sent_known && socket_written(r->cx->fd, &now_sent) == 0 &&
            now_sent > r->sent_base + r->header_bytes)
            bytes = now_sent - r->sent_base - r->header_bytes;
        if (bytes > r->bytes)
            bytes = r->bytes;
    }
    psdbd_metrics_request(r->route, why ? 0 : r->status, bytes);
    if (srv->cfg->log_requests) {
        if (!r->method[0])
            snprintf(r->method, sizeof(r->method), "-");
        if (!r->path)
            r->path = xstrdup("-");
        sanitize(r->method);
        sanitize(r->path);
        fprintf(stderr, "psdbd: access %s %s %u %llu %.3fms %s%s%s\n", r->method, r->path,
                r->status, (unsigned long long)bytes, ms, r->who.name ? r->who.name : "-",
                why ? " aborted=" : "", why ? why : "");
    }
    /* The next request on a keep-alive connection gets a fresh receive deadline. */
    if (r->cx && srv->cfg->request_timeout)
        atomic_store(&r->cx->deadline_ns, psdbd_now_ns() + seconds_ns(srv->cfg->request_timeout));
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
    psdbd_server *srv = cls;
    struct conn *cx = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        cx = xcalloc(1, sizeof(*cx));
        cx->fd = ci ? ci->connect_fd : -1;
        atomic_init(&cx->deadline_ns, srv->cfg->request_timeout
                                          ? psdbd_now_ns() + seconds_ns(srv->cfg->request_timeout)
                                          : 0);
        atomic_init(&cx->timed_out, 0);
        pthread_mutex_lock(&srv->conns_lock);
        cx->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = cx;
        srv->conns = cx;
        pthread_mutex_unlock(&srv->conns_lock);
        *socket_context = cx;
        psdbd_metrics_connection(1);
        return;
    }
    if (!cx)
        return;
    /* Unlinked before libmicrohttpd closes the socket: the reaper never sees a reused fd. */
    pthread_mutex_lock(&srv->conns_lock);
    if (cx->prev)
        cx->prev->next = cx->next;
    else
        srv->conns = cx->next;
    if (cx->next)
        cx->next->prev = cx->prev;
    pthread_mutex_unlock(&srv->conns_lock);
    free(cx);
    *socket_context = NULL;
    psdbd_metrics_connection(-1);
}

/* The reaper: libmicrohttpd's timeout counts idle time only, so a client that sends a byte now
 * and then would hold its connection (and, with enough of them, the server) forever. Each
 * connection carries a deadline for receiving its current request (request-timeout, plus the
 * upload's time at upload-min-rate for a publish); past it, the socket is shut down, which
 * libmicrohttpd sees as the client going away, and the access log says aborted=timeout. */
static void *reaper(void *arg)
{
    psdbd_server *srv = arg;
    struct timespec next;
    pthread_mutex_lock(&srv->conns_lock);
    while (!srv->reaper_stop) {
        uint64_t now = psdbd_now_ns();
        for (struct conn *cx = srv->conns; cx; cx = cx->next) {
            uint64_t d = atomic_load(&cx->deadline_ns);
            if (d && now > d && cx->fd >= 0 && !atomic_exchange(&cx->timed_out, 1)) {
                psdbd_metrics_request_timeout();
                shutdown(cx->fd, SHUT_RDWR);
            }
        }
        clock_gettime(CLOCK_REALTIME, &next);
        next.tv_nsec += 250 * 1000 * 1000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&srv->reaper_wake, &srv->conns_lock, &next);
    }
    pthread_mutex_unlock(&srv->conns_lock);
    return NULL;
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
    pthread_mutex_init(&srv->conns_lock, NULL);
    pthread_cond_init(&srv->reaper_wake, NULL);
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
            {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, srv},
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
    {
        int e = pthread_create(&srv->reaper_thread, NULL, reaper, srv);
        if (e != 0) {
            snprintf(err, err_size, "cannot start the connection reaper thread: %s", strerror(e));
            MHD_stop_daemon(srv->daemon);
            srv->daemon = NULL;
            goto cleanup;
        }
        srv->reaper_started = 1;
    }
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
    pthread_mutex_lock(&srv->conns_lock);
    srv->reaper_stop = 1;
    pthread_cond_broadcast(&srv->reaper_wake);
    pthread_mutex_unlock(&srv->conns_lock);
    if (srv->reaper_started)
        pthread_join(srv->reaper_thread, NULL);
    srv->reaper_started = 0;
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    pthread_cond_destroy(&srv->reaper_wake);
    pthread_mutex_destroy(&srv->conns_lock);
    pthread_cond_destroy(&srv->work);
    pthread_cond_destroy(&srv->idle);
    pthread_mutex_destroy(&srv->lock);
}
