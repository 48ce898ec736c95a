/* upload.c - POST /v1/psdbs, the protocol of a publish: its framing and statement checked before
 * the body, the body streamed to a temporary file while it is hashed, the trailer of the chunked
 * form, and the finisher threads that hand the upload to the publish service (publish.h) and send
 * its verdict. */
#include "http_int.h"

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

#include "common.h"
#include "metrics.h"
#include "publish.h"

#include "common/status_map.h"

/* ---- publish --------------------------------------------------------------------------------- */

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
 * neither side reads the file twice). 0 with r->expected or r->trailer_form set, or -1 with the
 * verdict. */
static int publish_framing(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                           psdbd_verdict *v)
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
        psdbd_verdict_fail(v, PSDBD_OUTCOME_LENGTH_REQUIRED,
                           "a publish needs a Content-Length, or a chunked body whose Trailer "
                           "header names X-Psdb-Sha256, X-Psdb-Size and X-Psdb-Signature");
        goto cleanup;
    }
    if (te) {
        for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++) {
            const char *f = psdbd_trailer_field(i);
            if (!(d.names & (1u << i))) {
                psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                   "the Trailer header of a chunked publish must name "
                                   "X-Psdb-Sha256, X-Psdb-Size and X-Psdb-Signature (%s is "
                                   "missing)",
                                   f);
                goto cleanup;
            }
            /* One statement, in one place: a header copy would be a second, unchecked claim. */
            if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, f)) {
                psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                   "%s is both a header and a trailer field: a chunked "
                                   "publish carries its statement in the trailer only",
                                   f);
                goto cleanup;
            }
        }
        r->trailer_form = 1;
        rc = 0;
    } else if (psdb__parse_u64(cl, &len) != 0 || strncmp(cl, "0x", 2) == 0)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST, "bad Content-Length");
    else if (len > srv->cfg->max_upload)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_TOO_LARGE,
                           "the body (%llu bytes) is over the upload limit (%llu bytes)",
                           (unsigned long long)len, (unsigned long long)srv->cfg->max_upload);
    else if (len == 0)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB, "the body is empty");
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

/* The statement's headers, checked before the body: the key id, the serial and, in the header
 * form, the signature (the trailer form's comes with the trailer). 0, or -1 with the verdict. */
static int publish_statement_headers(struct MHD_Connection *c, struct req *r, psdbd_verdict *v)
{
    const char *kid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Key-Id");
    const char *sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Signature");
    const char *serial = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Serial");
    if (!kid || !psdbd_is_digest(kid))
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                  "X-Psdb-Key-Id must be 64 lowercase hex digits");
    if (!r->trailer_form && !psdbd_is_signature_b64(sig))
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                  "X-Psdb-Signature must be the 88-character base64 of a 64-byte "
                                  "Ed25519 signature");
    if (!serial || psdb__parse_u64(serial, &r->serial) != 0 || r->serial > INT64_MAX)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                  "X-Psdb-Serial must be a number below 2^63");
    if (r->route == PSDBD_ROUTE_PUBLISH) {
        const char *sodb = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Sodb-Sha256");
        if (sodb && !psdbd_is_digest(sodb))
            return psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                                      "X-Psdb-Sodb-Sha256 must be 64 lowercase hex digits");
        if (sodb) {
            r->has_sodb = 1;
            memcpy(r->sodb_sha256, sodb, 65);
        }
    }
    memcpy(r->key_id, kid, 65);
    if (!r->trailer_form)
        memcpy(r->signature, sig, PSDB_SIGNATURE_B64_SIZE);
    return 0;
}

/* The file the body goes to, in the store's tmp/. 0, or -1 with the verdict. */
static int publish_open_upload(psdbd_server *srv, struct req *r, psdbd_verdict *v)
{
    int e = psdbd_store_temp(&srv->store, &r->fd, &r->tmp_path);
    if (e == 0)
        return 0;
    if (psdbd_outcome_of_errno(e, PSDBD_OUTCOME_INTERNAL) == PSDBD_OUTCOME_DISK_FULL)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL, "no space for the upload");
    psdbd_log("create upload file in %s: %s", srv->store.tmp_dir, strerror(e));
    return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot create the upload file");
}

enum MHD_Result http_publish_begin(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_verdict v = {0};
    /* An SODB is a studio's (a publisher's); a PSDB also a compiler's, whose version 2 statement
     * the publish service requires. */
    if (http_authorize(srv, c, r,
                       r->route == PSDBD_ROUTE_SODBS ? PSDBD_ROLE_PUBLISHER : PSDBD_ROLE_COMPILER,
                       NULL, &ret) != 0)
        return ret;
    if (r->route == PSDBD_ROUTE_PUBLISH && r->who.role == PSDBD_ROLE_COMPILER &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Psdb-Sodb-Sha256"))
        return http_reply_error(c, r, PSDBD_OUTCOME_FORBIDDEN,
                                "a compiler's token publishes only PSDBs signed with a version 2 "
                                "statement (X-Psdb-Sodb-Sha256 naming their SODB)");
    /* The key before the body: an unknown key costs no upload. */
    if (publish_framing(srv, c, r, &v) != 0 || publish_statement_headers(c, r, &v) != 0 ||
        psdbd_publish_key(srv->ix, r->key_id, &r->key_pem, &r->key_scope, &r->key_families, &v) !=
            0 ||
        publish_open_upload(srv, r, &v) != 0)
        return http_reply_verdict(c, r, &v);
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
        if (w < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
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
            !psdb__errno_is(errno, PSDB__ERRNO_UNSUPPORTED))
            psdbd_log("publish: sync_file_range %s: %s", r->tmp_path, strerror(errno));
        r->writeback_from = r->received;
    }
}

/* The upload could not be written (r->write_errno). Returns -1 with the verdict. */
static int publish_write_failed(struct req *r, psdbd_verdict *v)
{
    int e = r->write_errno;
    if (psdbd_outcome_of_errno(e, PSDBD_OUTCOME_INTERNAL) == PSDBD_OUTCOME_DISK_FULL) {
        psdbd_log("publish: %s: no space left (%s)", r->tmp_path, strerror(e));
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL, "no space left for the upload");
    }
    psdbd_log("publish: write %s: %s", r->tmp_path, strerror(e));
    return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot write the upload");
}

/* The whole body is in the file, and its digest is in sha256: the hasher's, or the one computed
 * in line; the trailer form's statement names it. 0, or -1 with the verdict. */
static int publish_upload_digest(struct req *r, uint8_t sha256[32], psdbd_verdict *v)
{
    char hex[65];
    if (r->write_errno)
        return publish_write_failed(r, v);
    /* MHD enforces Content-Length, and the trailer's size was compared: kept as a guard. */
    if (r->received != r->expected)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST, "body shorter than declared");
    if (r->hasher) {
        int e = http_upload_hasher_finish(r->hasher, sha256);
        r->hasher = NULL;
        if (e != 0) {
            psdbd_log("publish: read back %s: %s", r->tmp_path, strerror(e));
            return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot read the upload");
        }
    } else {
        psdb__sha256_end(r->sha, sha256);
        r->sha = NULL;
    }
    psdb__hex(sha256, 32, hex);
    if (r->trailer_form && strcmp(hex, r->trailer_sha256) != 0)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_STATEMENT_MISMATCH,
                                  "the trailer's X-Psdb-Sha256 (%s) is not the SHA-256 of the body "
                                  "received (%s)",
                                  r->trailer_sha256, hex);
    return 0;
}

/* The last callback of a publish, on a finisher thread: the upload's digest, then the publish
 * service's verdict, kept in r->result until the connection is resumed. */
static void publish_finish(psdbd_server *srv, struct req *r)
{
    psdbd_publish p = {0};
    r->publishing = 0;
    if (publish_upload_digest(r, p.sha256, &r->result) != 0)
        goto cleanup;
    /* Start writing back the rest of the upload (its last bytes since the previous step): the
     * verification is CPU and page-cache reads, so the disk works meanwhile and the fsync of the
     * commit finds little left to write. */
    if (sync_file_range(r->fd, (off64_t)r->writeback_from, 0, SYNC_FILE_RANGE_WRITE) != 0)
        psdbd_log("publish: sync_file_range %s: %s", r->tmp_path, strerror(errno));
    p.who = &r->who;
    p.key_id = r->key_id;
    p.key_pem = r->key_pem;
    p.key_scope = r->key_scope;
    p.key_families = r->key_families;
    p.sodb_sha256 = r->has_sodb ? r->sodb_sha256 : NULL;
    p.signature = r->signature;
    p.signature_field = r->trailer_form ? "X-Psdb-Signature (trailer)" : "X-Psdb-Signature";
    p.serial = r->serial;
    p.fd = r->fd;
    p.path = r->tmp_path;
    p.size = r->received;
    if (r->route == PSDBD_ROUTE_SODBS)
        psdbd_publish_sodb_accept(srv->ix, &srv->store, &p, &r->result);
    else
        psdbd_publish_accept(srv->ix, &srv->store, srv->vmaps, &p, &r->result);
cleanup:
    http_publish_discard(r); /* after a commit the temporary name is gone: unlink is a no-op */
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
        publish_finish(srv, r);
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
 * one received. The digest is compared once the hasher has finished (publish_upload_digest). 0,
 * or -1 with the verdict. */
static int publish_read_trailer(struct MHD_Connection *c, struct req *r, psdbd_verdict *v)
{
    struct trailer_fields t = {0};
    uint64_t size = 0;
    const char *sha, *sz, *sig;
    int rc = -1;
    MHD_get_connection_values(c, MHD_FOOTER_KIND, collect_trailer, &t);
    if (t.misplaced) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                           "%.40s is a header of the publish, checked before the body, not a "
                           "trailer field",
                           t.misplaced);
        goto cleanup;
    }
    if (t.count[0] + t.count[1] + t.count[2] == 0) {
        /* Its own code: a client learns from it that something between it and psdbd drops
         * request trailers (nginx does), and publishes in the header form instead. */
        psdbd_verdict_fail(v, PSDBD_OUTCOME_TRAILER_MISSING,
                           "the chunked body ended without a trailer (X-Psdb-Sha256, "
                           "X-Psdb-Size, X-Psdb-Signature): a proxy in front may drop "
                           "request trailers; publish with the statement in the headers");
        goto cleanup;
    }
    for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++) {
        if (t.count[i] != 1) {
            psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
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
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                           "the trailer's X-Psdb-Sha256 must be 64 lowercase hex digits");
    else if (psdb__parse_u64(sz, &size) != 0 || strncmp(sz, "0x", 2) == 0)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                           "the trailer's X-Psdb-Size must be a decimal number of bytes");
    else if (!psdbd_is_signature_b64(sig))
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_REQUEST,
                           "the trailer's X-Psdb-Signature must be the 88-character base64 of a "
                           "64-byte Ed25519 signature");
    else if (size != r->received)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_STATEMENT_MISMATCH,
                           "the trailer's X-Psdb-Size (%llu) is not the size of the body received "
                           "(%llu bytes)",
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
 * trailer, an empty body. 0, or -1 with the verdict and the upload removed. */
static int publish_trailer_form_end(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                    psdbd_verdict *v)
{
    if (r->too_large)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_TOO_LARGE,
                           "the chunked body (%llu bytes and more) is over the upload limit "
                           "(%llu bytes)",
                           (unsigned long long)r->received,
                           (unsigned long long)srv->cfg->max_upload);
    else if (publish_read_trailer(c, r, v) == 0) {
        if (r->received > 0)
            return 0;
        psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB, "the body is empty");
    }
    r->publishing = 0;
    http_publish_discard(r);
    return -1;
}

enum MHD_Result http_publish_defer(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct req **tail;
    psdbd_verdict v = {0};
    if (r->trailer_form && publish_trailer_form_end(srv, c, r, &v) != 0)
        return http_reply_verdict(c, r, &v);
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
