/* upload.c - POST /v1/psdbs: a publish checked before its body, streamed to a temporary file,
 * then validated, stored and indexed on a finisher thread. */
#include "http_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cache.h"
#include "common.h"
#include "common/status_map.h"
#include "metrics.h"

/* ---- publish --------------------------------------------------------------------------------- */

/* Whether a failed write, create or rename means a full disk (507), by the one errno mapping. */
static int disk_full_errno(int e)
{
    return psdb__errno_hr(e) == PSDB_E_DISK_FULL;
}

void http_publish_discard(struct req *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->tmp_path) {
        unlink(r->tmp_path);
        free(r->tmp_path);
        r->tmp_path = NULL;
    }
    http_upload_hasher_cancel(r->hasher);
    r->hasher = NULL;
    if (r->sha) { /* ending is how a context is freed; the partial digest is dropped */
        uint8_t dropped[32];
        psdb__sha256_end(r->sha, dropped);
        r->sha = NULL;
    }
}

/* What the Trailer headers of a request name: whether there is one, and its statement fields. */
struct trailer_decl {
    int present;
    unsigned names;
};

static enum MHD_Result collect_trailer_decl(void *cls, enum MHD_ValueKind kind, const char *key,
                                            const char *value)
{
    struct trailer_decl *d = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRAILER) == 0) {
        d->present = 1;
        d->names |= psdbd_trailer_names(value);
    }
    return MHD_YES;
}

/* The framing of a publish's body: a Content-Length (the header form: the statement in the
 * headers, the length checked against max-upload now), or chunked with a Trailer header naming
 * the statement's fields (the trailer form: the client signs once it has hashed what it sent, so
 * neither side reads the file twice). 0 with r->expected or r->trailer_form set, or -1 after an
 * answer was queued in *ret. */
static int publish_framing(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                           enum MHD_Result *ret)
{
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    struct trailer_decl d = {0};
    uint64_t len = 0;
    int rc = -1;
    if (te)
        MHD_get_connection_values(c, MHD_HEADER_KIND, collect_trailer_decl, &d);
    if ((!te && !cl) || (te && (strcasecmp(te, "chunked") != 0 || !d.present))) {
        *ret = http_reply_error(c, r, MHD_HTTP_LENGTH_REQUIRED, "length_required",
                                "a publish needs a Content-Length, or a chunked body whose Trailer "
                                "header names X-Psdb-Sha256, X-Psdb-Size and X-Psdb-Signature");
        goto cleanup;
    }
    if (te) {
        for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++) {
            const char *f = psdbd_trailer_field(i);
            if (!(d.names & (1u << i))) {
                *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                        "the Trailer header of a chunked publish must name "
                                        "X-Psdb-Sha256, X-Psdb-Size and X-Psdb-Signature (%s is "
                                        "missing)",
                                        f);
                goto cleanup;
            }
            /* One statement, in one place: a header copy would be a second, unchecked claim. */
            if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, f)) {
                *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                        "%s is both a header and a trailer field: a chunked "
                                        "publish carries its statement in the trailer only",
                                        f);
                goto cleanup;
            }
        }
        r->trailer_form = 1;
        rc = 0;
    } else if (psdb__parse_u64(cl, &len) != 0 || strncmp(cl, "0x", 2) == 0)
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request", "bad Content-Length");
    else if (len > srv->cfg->max_upload)
        *ret = http_reply_error(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "too_large",
                                "the body (%llu bytes) is over the upload limit (%llu bytes)",
                                (unsigned long long)len, (unsigned long long)srv->cfg->max_upload);
    else if (len == 0)
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb", "the body is empty");
    else {
        r->expected = len;
        rc = 0;
    }
cleanup:
    return rc;
}

/* The time `bytes` of body earn at upload-min-rate, rounded up to the next second, in
 * nanoseconds (saturating); without a minimum rate, practically unbounded. */
static uint64_t upload_allowance_ns(const psdbd_server *srv, uint64_t bytes)
{
    uint64_t rate = srv->cfg->upload_min_rate;
    return http_seconds_ns(rate ? bytes / rate + 1 : UINT32_MAX);
}

enum MHD_Result http_publish_begin(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    const char *kid, *sig, *serial;
    int e;
    if (http_authorize(srv, c, r, PSDBD_ROLE_PUBLISHER, NULL, &ret) != 0)
        return ret;
    if (publish_framing(srv, c, r, &ret) != 0)
        return ret;
    kid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Key-Id");
    sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Signature");
    serial = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Serial");
    if (!kid || !psdbd_is_digest(kid))
        return http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "X-Psdb-Key-Id must be 64 lowercase hex digits");
    if (!r->trailer_form && !psdbd_is_signature_b64(sig))
        return http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "X-Psdb-Signature must be the 88-character base64 of a 64-byte "
                                "Ed25519 signature");
    if (!serial || psdb__parse_u64(serial, &r->serial) != 0 || r->serial > INT64_MAX)
        return http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "X-Psdb-Serial must be a number below 2^63");
    memcpy(r->key_id, kid, 65);
    if (!r->trailer_form)
        memcpy(r->signature, sig, PSDB_SIGNATURE_B64_SIZE);
    switch (psdbd_index_key_find(srv->ix, kid, &r->key_pem, &r->key_scope)) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        return http_reply_error(c, r, MHD_HTTP_FORBIDDEN, "unknown_key",
                                "no registered publisher key has this key id");
    default:
        return http_reply_index_error(c, r, PSDBD_ERROR);
    }
    if ((e = psdbd_store_temp(&srv->store, &r->fd, &r->tmp_path)) != 0) {
        if (disk_full_errno(e))
            return http_reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                                    "no space for the upload");
        psdbd_log("create upload file in %s: %s", srv->store.tmp_dir, strerror(e));
        return http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                "cannot create the upload file");
    }
    if (!(r->hasher = http_upload_hasher_start(r->fd)) && !(r->sha = psdb__sha256_begin()))
        psdbd_out_of_memory();
    r->publishing = 1;
    /* The body may take its time, but not forever: request-timeout plus its length at the
     * slowest upload rate accepted. A chunked body has no length yet: its allowance grows with
     * each chunk (http_publish_chunk), so a trickle is closed as soon as it falls behind. */
    if (r->cx && srv->cfg->request_timeout) {
        r->deadline_base_ns = psdbd_now_ns() + http_seconds_ns(srv->cfg->request_timeout);
        atomic_store(&r->cx->deadline_ns,
                     r->deadline_base_ns + upload_allowance_ns(srv, r->expected));
    }
    return MHD_YES;
}

/* How much of an upload is written to its file before the disk is asked to start writing it back
 * (sync_file_range): small enough that the disk keeps pace with the upload, large enough that the
 * call is rare. */
#define PUBLISH_WRITEBACK_STEP ((uint64_t)8 << 20)

void http_publish_chunk(psdbd_server *srv, struct req *r, const char *data, size_t n)
{
    r->received += n;
    psdbd_metrics_upload_bytes(n);
    if (r->too_large)
        return;
    if (r->trailer_form && r->received > srv->cfg->max_upload) {
        /* No answer can be sent mid-body (libmicrohttpd 0.9.75 queues responses only before or
         * after it): nothing more is stored, the file goes now, and the 413 comes after the last
         * chunk, which the client must send within request-timeout. */
        r->too_large = 1;
        http_publish_discard(r);
        if (r->cx && srv->cfg->request_timeout) {
            uint64_t soon = psdbd_now_ns() + http_seconds_ns(srv->cfg->request_timeout);
            if (soon < atomic_load(&r->cx->deadline_ns))
                atomic_store(&r->cx->deadline_ns, soon);
        }
        return;
    }
    if (r->trailer_form && r->cx && srv->cfg->request_timeout)
        atomic_store(&r->cx->deadline_ns,
                     r->deadline_base_ns + upload_allowance_ns(srv, r->received));
    if (r->write_errno)
        return; /* keep reading (MHD cannot answer mid-body) but store nothing more */
    if (r->sha)
        psdb__sha256_update(r->sha, data, n);
    while (n > 0) {
        ssize_t w = write(r->fd, data, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r->write_errno = w < 0 ? errno : EIO;
            http_upload_hasher_cancel(r->hasher); /* before the file shrinks under it */
            r->hasher = NULL;
            /* Free the space now: the rest of the body is only counted. */
            if (ftruncate(r->fd, 0) != 0)
                r->write_errno = r->write_errno ? r->write_errno : errno;
            return;
        }
        if (r->hasher)
            http_upload_hasher_wrote(r->hasher, (size_t)w);
        data += w;
        n -= (size_t)w;
    }
    /* Start the disk writing the upload while it arrives: the page cache would otherwise hold
     * all of it until the commit's fsync, and the disk would only begin after the last byte. */
    if (r->received - r->writeback_from >= PUBLISH_WRITEBACK_STEP) {
        if (sync_file_range(r->fd, (off64_t)r->writeback_from,
                            (off64_t)(r->received - r->writeback_from),
                            SYNC_FILE_RANGE_WRITE) != 0 &&
            errno != ENOSYS && errno != EINVAL)
            psdbd_log("publish: sync_file_range %s: %s", r->tmp_path, strerror(errno));
        r->writeback_from = r->received;
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

/* The upload could not be written (r->write_errno): answers 507 for a full disk, else 500. */
static enum MHD_Result publish_write_failed(struct MHD_Connection *c, struct req *r)
{
    int e = r->write_errno;
    if (disk_full_errno(e)) {
        psdbd_log("publish: %s: no space left (%s)", r->tmp_path, strerror(e));
        return http_reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                                "no space left for the upload");
    }
    psdbd_log("publish: write %s: %s", r->tmp_path, strerror(e));
    return http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                            "cannot write the upload");
}

/* Opens the upload with every check `psdb verify` makes (content digest, sizes, references, ids,
 * SQLite integrity): a file indexed here is served to every client as it is, and a damaged one
 * would fail or miss on each of them instead of once here. 0 with *f and *info, or -1 after an
 * answer was queued in *ret. */
static int publish_open_verified(struct MHD_Connection *c, struct req *r, psdb_file **f,
                                 psdb_file_info *info, enum MHD_Result *ret)
{
    char why[512] = "";
    psdb_hr hr = psdb_file_open_verified(r->tmp_path, why, sizeof(why), f);
    if (PSDB_SUCCEEDED(hr) && PSDB_SUCCEEDED(psdb_file_get_info(*f, info)))
        return 0;
    if (hr == PSDB_E_OUTOFMEMORY)
        psdbd_out_of_memory();
    printable_ascii(why);
    if (hr == PSDB_E_IO || hr == PSDB_E_ACCESS) {
        psdbd_log("publish: read %s: %s", r->tmp_path, why);
        *ret = http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                "cannot read the upload");
    } else {
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                "the body is not a valid PSDB: %s", why);
    }
    return -1;
}

/* The identity and target the index and the manifests need: names present and, since they go
 * into JSON manifests, the signed statement, logs, dashboards and launchers' screens, bounded and
 * names by the one rule (psdb__name_check: UTF-8 without control, format or separator
 * characters). 0, or -1 after an answer was queued in *ret. */
static int publish_check_identity(struct MHD_Connection *c, struct req *r,
                                  const psdb_file_info *info, enum MHD_Result *ret)
{
    const char *strs[] = {info->identity.desc.name, info->identity.desc.exe_filename,
                          info->identity.desc.engine_name, info->target.family};
    static const char *const fields[] = {"application name", "exe filename", "engine name",
                                         "family"};
    char why[128];
    if (!info->identity.desc.name || !*info->identity.desc.name || !info->target.family ||
        !*info->target.family || info->target.abi_version > INT64_MAX) {
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                "the PSDB has no application name or family, or an ABI version "
                                "above 2^63-1");
        return -1;
    }
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        if (psdb__name_check(strs[i], why, sizeof(why)) != 0) {
            *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb", "the PSDB's %s %s",
                                    fields[i], why);
            return -1;
        }
        if (strs[i] && strlen(strs[i]) > PSDB_STATEMENT_STRING_MAX) {
            *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb",
                                    "the PSDB's %s is longer than %u bytes", fields[i],
                                    PSDB_STATEMENT_STRING_MAX);
            return -1;
        }
    }
    return 0;
}

/* The token's and the key's scopes must both cover the application. 0, or -1 after an answer
 * was queued in *ret. */
static int publish_check_scopes(struct MHD_Connection *c, struct req *r, const char *app,
                                enum MHD_Result *ret)
{
    if (r->who.role != PSDBD_ROLE_ADMIN && !psdbd_scope_covers(r->who.scope, app)) {
        *ret = http_reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                                "the token's scope does not cover application '%s'", app);
        return -1;
    }
    if (!psdbd_scope_covers(r->key_scope, app)) {
        *ret = http_reply_error(c, r, MHD_HTTP_FORBIDDEN, "out_of_scope",
                                "the key's scope does not cover application '%s'", app);
        return -1;
    }
    return 0;
}

/* X-Psdb-Signature must verify over the statement of this file (st carries its SHA-256) with the
 * registered key. 0, or -1 after an answer was queued in *ret. */
static int publish_check_signature(struct MHD_Connection *c, struct req *r,
                                   const psdb_file_info *info, psdb_statement *st,
                                   enum MHD_Result *ret)
{
    psdb_key *key = NULL;
    int rc = -1;
    st->size = r->received;
    st->identity = info->identity;
    st->target = info->target;
    st->serial = r->serial;
    if (PSDB_FAILED(psdb_key_from_pem(r->key_pem, strlen(r->key_pem), &key)) ||
        psdb_statement_verify(key, st, r->signature) != PSDB_S_OK) {
        *ret = http_reply_error(c, r, MHD_HTTP_FORBIDDEN, "bad_signature",
                                "X-Psdb-Signature%s does not verify over this PSDB's statement "
                                "with key %s",
                                r->trailer_form ? " (trailer)" : "", r->key_id);
        goto cleanup;
    }
    rc = 0;
cleanup:
    psdb_key_release(key);
    return rc;
}

/* The index row of a verified publish; its strings are borrowed from info and r. */
static void publish_record(const struct req *r, const psdb_file_info *info, psdbd_record *rec)
{
    rec->app_name = info->identity.desc.name;
    rec->exe_filename = info->identity.desc.exe_filename;
    rec->engine_name = info->identity.desc.engine_name;
    rec->family = info->target.family;
    rec->app_version = info->identity.desc.version;
    rec->engine_version = info->identity.desc.engine_version;
    memcpy(rec->app_guid, info->identity.app_id, 16);
    rec->abi_version = info->target.abi_version;
    rec->compiler_version = info->target.compiler_version;
    rec->profile_version = info->target.profile_version;
    rec->serial = r->serial;
    rec->size = r->received;
    memcpy(rec->key_id, r->key_id, 65);
    rec->signature = r->signature;
    rec->published_by = r->who.name;
}

/* The answer of an identity lookup or a publish of the index, when it ends the request: a repeat
 * (200 with the existing manifest, whose reference is taken), a conflict or a failure. */
static enum MHD_Result publish_index_answer(struct MHD_Connection *c, struct req *r, psdbd_rc rc,
                                            json_t *manifest)
{
    if (rc == PSDBD_EXISTS) {
        psdbd_metrics_publish(0);
        return http_reply_json(c, r, MHD_HTTP_OK, manifest);
    }
    json_decref(manifest);
    if (rc == PSDBD_CONFLICT)
        return http_reply_error(c, r, MHD_HTTP_CONFLICT, "conflict",
                                "this identity, target and serial are already published with "
                                "other content");
    return http_reply_index_error(c, r, rc);
}

/* Stores the blob and commits its index row: the blob is durable under its final name before
 * any index row can point at it. Repeats and conflicts are answered before the store is
 * touched. */
static enum MHD_Result publish_commit(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                      const psdbd_record *rec)
{
    json_t *manifest = NULL;
    psdbd_rc rc = psdbd_index_find_identity(srv->ix, rec, &manifest);
    int e;
    if (rc != PSDBD_NOT_FOUND)
        return publish_index_answer(c, r, rc, manifest);
    if ((e = psdbd_store_commit(&srv->store, r->fd, r->tmp_path, rec->sha256)) != 0) {
        psdbd_log("publish: store blob %s: %s", rec->sha256, strerror(e));
        if (disk_full_errno(e))
            return http_reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                                    "no space left to store the blob");
        return http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                "cannot store the blob");
    }
    rc = psdbd_index_publish(srv->ix, rec, &manifest);
    if (rc != PSDBD_OK)
        return publish_index_answer(c, r, rc, manifest);
    /* Committed: launchers ask for the version 2 map next; the worker derives it meanwhile,
     * and the 201 does not wait for it. */
    psdbd_valuemaps_enqueue(srv->vmaps, rec->sha256);
    psdbd_cache_invalidate();
    psdbd_metrics_publish(1);
    return http_reply_json(c, r, MHD_HTTP_CREATED, manifest);
}

/* The last callback of a publish, on a finisher thread (c is NULL: the answer is kept in r):
 * checks the upload, its identity, scopes and signature, then stores and indexes it. */
static enum MHD_Result publish_finish(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_statement st = {0};
    psdbd_record rec = {0};

    r->publishing = 0;
    if (r->write_errno) {
        ret = publish_write_failed(c, r);
        goto cleanup;
    }
    /* MHD enforces Content-Length, and the trailer's size was compared: kept as a guard. */
    if (r->received != r->expected) {
        ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                               "body shorter than declared");
        goto cleanup;
    }
    assert(sizeof(rec.sha256) == 2 * sizeof(st.sha256) + 1);
    if (r->hasher) {
        int e = http_upload_hasher_finish(r->hasher, st.sha256);
        r->hasher = NULL;
        if (e != 0) {
            psdbd_log("publish: read back %s: %s", r->tmp_path, strerror(e));
            ret = http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                   "cannot read the upload");
            goto cleanup;
        }
    } else {
        psdb__sha256_end(r->sha, st.sha256);
        r->sha = NULL;
    }
    psdb__hex(st.sha256, sizeof(st.sha256), rec.sha256);
    if (r->trailer_form && strcmp(rec.sha256, r->trailer_sha256) != 0) {
        ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "statement_mismatch",
                               "the trailer's X-Psdb-Sha256 (%s) is not the SHA-256 of the body "
                               "received (%s)",
                               r->trailer_sha256, rec.sha256);
        goto cleanup;
    }

    /* Start writing back the rest of the upload (its last bytes since the previous step): the
     * verification below is CPU and page-cache reads, so the disk works meanwhile and the fsync of
     * the commit finds little left to write. */
    if (sync_file_range(r->fd, (off64_t)r->writeback_from, 0, SYNC_FILE_RANGE_WRITE) != 0)
        psdbd_log("publish: sync_file_range %s: %s", r->tmp_path, strerror(errno));
    if (publish_open_verified(c, r, &f, &info, &ret) != 0 ||
        publish_check_identity(c, r, &info, &ret) != 0 ||
        publish_check_scopes(c, r, info.identity.desc.name, &ret) != 0 ||
        publish_check_signature(c, r, &info, &st, &ret) != 0)
        goto cleanup;
    publish_record(r, &info, &rec);
    ret = publish_commit(srv, c, r, &rec);
cleanup:
    psdb_file_release(f);
    http_publish_discard(r); /* after a commit the temporary name is gone: unlink is a no-op */
    return ret;
}

/* The end of a publish (validation, signature, fsync, rename, commit) may take seconds for a
 * large PSDB; it runs on its own thread while the connection is suspended, so the worker thread
 * keeps serving its other connections. */
/* A finisher thread: takes suspended publishes off the queue, finishes them, resumes them. The
 * threads are joined at shutdown, so their SQLite connections and OpenSSL state are gone before
 * the process exits. */
void *http_finisher(void *arg)
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

/* The statement fields a trailer holds, counted, and the last value of each. */
struct trailer_fields {
    const char *value[PSDBD_TRAILER_FIELDS];
    unsigned count[PSDBD_TRAILER_FIELDS];
    const char *misplaced; /* a field that must be a header (checked before the body) */
};

static enum MHD_Result collect_trailer(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    struct trailer_fields *t = cls;
    (void)kind;
    for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++)
        if (strcasecmp(key, psdbd_trailer_field(i)) == 0) {
            t->value[i] = value;
            t->count[i]++;
        }
    if (strcasecmp(key, "X-Psdb-Key-Id") == 0 || strcasecmp(key, "X-Psdb-Serial") == 0)
        t->misplaced = key;
    return MHD_YES;
}

/* The trailer of a chunked publish (libmicrohttpd has parsed it before this last call): each of
 * X-Psdb-Sha256, X-Psdb-Size and X-Psdb-Signature exactly once and well formed, and the size the
 * one received. The digest is compared once the hasher has finished (publish_finish). 0, or -1
 * after an answer was queued in *ret. */
static int publish_read_trailer(struct MHD_Connection *c, struct req *r, enum MHD_Result *ret)
{
    struct trailer_fields t = {0};
    uint64_t size = 0;
    const char *sha, *sz, *sig;
    int rc = -1;
    MHD_get_connection_values(c, MHD_FOOTER_KIND, collect_trailer, &t);
    if (t.misplaced) {
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "%.40s is a header of the publish, checked before the body, not "
                                "a trailer field",
                                t.misplaced);
        goto cleanup;
    }
    if (t.count[0] + t.count[1] + t.count[2] == 0) {
        /* Its own code: a client learns from it that something between it and psdbd drops
         * request trailers (nginx does), and publishes in the header form instead. */
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "trailer_missing",
                                "the chunked body ended without a trailer (X-Psdb-Sha256, "
                                "X-Psdb-Size, X-Psdb-Signature): a proxy in front may drop "
                                "request trailers; publish with the statement in the headers");
        goto cleanup;
    }
    for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++) {
        if (t.count[i] != 1) {
            *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                    t.count[i] ? "the trailer has more than one %s"
                                               : "the trailer has no %s: the chunked body ended "
                                                 "without its statement",
                                    psdbd_trailer_field(i));
            goto cleanup;
        }
    }
    sha = t.value[0];
    sz = t.value[1];
    sig = t.value[2];
    if (!psdbd_is_digest(sha))
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "the trailer's X-Psdb-Sha256 must be 64 lowercase hex digits");
    else if (psdb__parse_u64(sz, &size) != 0 || strncmp(sz, "0x", 2) == 0)
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "the trailer's X-Psdb-Size must be a decimal number of bytes");
    else if (!psdbd_is_signature_b64(sig))
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                                "the trailer's X-Psdb-Signature must be the 88-character base64 "
                                "of a 64-byte Ed25519 signature");
    else if (size != r->received)
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "statement_mismatch",
                                "the trailer's X-Psdb-Size (%llu) is not the size of the body "
                                "received (%llu bytes)",
                                (unsigned long long)size, (unsigned long long)r->received);
    else {
        memcpy(r->trailer_sha256, sha, sizeof(r->trailer_sha256));
        memcpy(r->signature, sig, PSDB_SIGNATURE_B64_SIZE);
        r->expected = size;
        rc = 0;
    }
cleanup:
    return rc;
}

/* The checks of a chunked publish that need its whole body but not its bytes: the limit, the
 * trailer, an empty body. 0, or -1 after an answer was queued in *ret and the upload removed. */
static int publish_trailer_form_end(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                    enum MHD_Result *ret)
{
    if (r->too_large)
        *ret = http_reply_error(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "too_large",
                                "the chunked body (%llu bytes and more) is over the upload limit "
                                "(%llu bytes)",
                                (unsigned long long)r->received,
                                (unsigned long long)srv->cfg->max_upload);
    else if (publish_read_trailer(c, r, ret) == 0) {
        if (r->received > 0)
            return 0;
        *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "invalid_psdb", "the body is empty");
    }
    r->publishing = 0;
    http_publish_discard(r);
    return -1;
}

enum MHD_Result http_publish_defer(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct req **tail;
    enum MHD_Result ret = MHD_YES;
    if (r->trailer_form && publish_trailer_form_end(srv, c, r, &ret) != 0)
        return ret;
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
