/* download.c - psdb_client_download: resumable, verified downloads into <dest>.part, renamed when
 * complete. */
#include "delivery/client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "registry/install.h"
#include "delivery/publish.h"
#include "common/fdio.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/status_map.h"

/* ---- download -----------------------------------------------------------------------------------
 */

typedef struct file_sink {
    psdb_client *c;
    int fd;
    uint64_t have;  /* bytes in the .part, hashed */
    uint64_t limit; /* the manifest's size: more is an integrity failure */
    psdb__sha256_ctx *sha;
    int write_errno; /* errno of a failed write */
    int too_long;
    int cancelled;   /* progress_cancel asked to stop */
    long status;     /* HTTP status of the current response (from the header callback) */
    int accept_body; /* 1 when the body is to be appended (206 at our offset, or 200 from 0) */
    CURL *h;
    const char *what;
    uint32_t attempt;
    struct timespec last_progress;
} file_sink;

static size_t file_write(char *p, size_t size, size_t n, void *ctx)
{
    file_sink *s = ctx;
    size_t len = size * n;
    if (!s->accept_body)
        return len; /* an error page: drained, not stored */
    if (s->have + len > s->limit) {
        s->too_long = 1;
        return 0;
    }
    psdb_progress at = {s->what, s->have, s->limit, s->attempt};
    if (psdb__client_pace(s->c, len, &at)) {
        s->cancelled = 1;
        return 0;
    }
    if (psdb__write_all(s->fd, p, len) != 0) {
        s->write_errno = errno;
        return 0;
    }
    psdb__sha256_update(s->sha, p, len);
    s->have += len;
    return len;
}

static size_t header_cb(char *p, size_t size, size_t n, void *ctx)
{
    file_sink *s = ctx;
    size_t len = size * n;
    /* The status line of each response (redirects or 100-continue bring several). */
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        s->accept_body = 0;
    }
    if (len == 2 && p[0] == '\r' && p[1] == '\n') {
        if (s->status == 206) {
            s->accept_body = 1; /* Content-Range was requested from s->have: see below */
        } else if (s->status == 200) {
            /* The server ignored the Range: start over from byte 0. */
            if (s->have > 0) {
                if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                    s->write_errno = errno;
                    return 0;
                }
                psdb__sha256_ctx *fresh = psdb__sha256_begin();
                if (!fresh) {
                    s->write_errno = ENOMEM;
                    return 0;
                }
                uint8_t discard[32];
                psdb__sha256_end(s->sha, discard);
                s->sha = fresh;
                s->have = 0;
            }
            s->accept_body = 1;
        }
    }
    /* A 206 must start exactly where the .part ends. */
    if (s->status == 206 && len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        const char *b = memchr(p, ' ', len);
        unsigned long long start = 0;
        if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->have)
            return 0;
    }
    return len;
}

static int xfer_cb(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    file_sink *s = ctx;
    if (!s->c->progress && !s->c->progress_cancel)
        return 0;
    if (!psdb__every_ms(&s->last_progress, 100))
        return 0;
    psdb_progress p = {s->what, s->have, s->limit, s->attempt};
    if (s->c->progress)
        s->c->progress(&p, s->c->progress_ctx);
    /* A non-zero return makes libcurl end the transfer with CURLE_ABORTED_BY_CALLBACK; what was
     * written stays in the .part. */
    s->cancelled = psdb__client_should_stop(s->c, &p);
    return s->cancelled;
}

/* Re-hashes the bytes an interrupted download left in the .part. */
static psdb_hr rehash_part(int fd, uint64_t *have, psdb__sha256_ctx *sha)
{
    char buf[1 << 16];
    uint64_t n = 0;
    if (lseek(fd, 0, SEEK_SET) != 0)
        return PSDB_E_IO;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return PSDB_E_IO;
        if (r == 0)
            break;
        psdb__sha256_update(sha, buf, (size_t)r);
        n += (uint64_t)r;
    }
    *have = n;
    return PSDB_S_OK;
}

char *psdb__client_blob_url(const psdb_client *c, const psdb_manifest *m)
{
    char *url = NULL;
    if (strncmp(m->url, "http://", 7) == 0 || strncmp(m->url, "https://", 8) == 0)
        return psdb__strdup(m->url);
    if (asprintf(&url, "%s%s%s", c->server_url, m->url[0] == '/' ? "" : "/", m->url) < 0)
        return NULL;
    return url;
}

/* Opens <dest>.part and brings s->sha and s->have up to what it already holds; a .part longer
 * than the blob is not a prefix of it and starts over. */
static psdb_hr part_open(psdb_client *c, const char *part, uint64_t size, file_sink *s)
{
    psdb_hr hr = PSDB_S_OK;
    char why[128];
    /* Resumed when an earlier attempt left it, so it must be a file of ours: a link planted there
     * would make the download write through it, a FIFO would block the open. */
    s->fd = psdb__open_file(part, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (s->fd < 0) {
        hr = psdb__errno_hr(errno);
        psdb__client_error(c, "download: open %s: %s", part, why);
        goto cleanup;
    }
    hr = rehash_part(s->fd, &s->have, s->sha);
    if (PSDB_FAILED(hr)) {
        psdb__client_error(c, "download: read %s: %s", part, strerror(errno));
        goto cleanup;
    }
    if (s->have > size) {
        uint8_t discard[32];
        psdb__sha256_end(s->sha, discard);
        s->sha = psdb__sha256_begin();
        if (!s->sha || ftruncate(s->fd, 0) != 0) {
            hr = s->sha ? PSDB_E_IO : PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        s->have = 0;
    }
    if (lseek(s->fd, (off_t)s->have, SEEK_SET) < 0)
        hr = PSDB_E_IO;
cleanup:
    return hr;
}

/* Fetches the rest of the blob into s with Range requests, retrying transient failures with
 * backoff; stops at the first permanent one. */
static psdb_hr fetch_rest(psdb_client *c, const psdb_manifest *m, const char *url, const char *part,
                          file_sink *s)
{
    psdb_hr hr = PSDB_S_OK;
    struct curl_slist *headers = NULL;
    for (uint32_t attempt = 1; s->have < m->size; attempt++) {
        char range[64];
        long status = 0;
        s->attempt = attempt;
        s->status = 0;
        s->accept_body = 0;
        s->too_long = 0;
        s->cancelled = 0;
        s->write_errno = 0;
        CURL *h = psdb__client_new_handle(c, url, &headers);
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        s->h = h;
        if (s->have > 0) {
            snprintf(range, sizeof(range), "%llu-", (unsigned long long)s->have);
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, file_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xfer_cb);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, s);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        s->h = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        if (s->write_errno) {
            hr = psdb__errno_hr(s->write_errno);
            psdb__client_error(c, "download: write %s: %s", part, strerror(s->write_errno));
            goto cleanup;
        }
        if (s->cancelled) { /* by the transfer callback or while paced */
            hr = PSDB_E_CANCELLED;
            psdb__client_error(c,
                               "download: %s: cancelled by the progress callback at %llu of %llu "
                               "bytes; %s is kept for resuming",
                               url, (unsigned long long)s->have, (unsigned long long)m->size, part);
            goto cleanup;
        }
        if (s->too_long) {
            hr = PSDB_E_INTEGRITY;
            psdb__client_error(c, "download: %s sent more than the manifest's %llu bytes", url,
                               (unsigned long long)m->size);
            goto cleanup;
        }
        if (status == 416 && s->have == m->size)
            break;
        if (rc == CURLE_OK && (status == 200 || status == 206)) {
            if (s->have >= m->size)
                break;
            /* A short body that ended cleanly: treat as a transient cut and resume. */
        } else if (rc == CURLE_OK && !psdb__http_transient(status)) {
            hr = psdb__http_hr(status);
            psdb__client_error(c, "download: %s answered HTTP %ld", url, status);
            goto cleanup;
        } else if (rc != CURLE_OK && !psdb__client_transient_curl(rc) && rc != CURLE_WRITE_ERROR) {
            hr = PSDB_E_NETWORK;
            psdb__client_error(c, "download: %s: %s", url, curl_easy_strerror(rc));
            goto cleanup;
        }
        if (attempt > c->max_retries) {
            hr = PSDB_E_NETWORK;
            psdb__client_error(c, "download: %s: gave up after %u attempts (%s, HTTP %ld)", url,
                               attempt, curl_easy_strerror(rc), status);
            goto cleanup;
        }
        psdb_progress wait = {s->what, s->have, m->size, attempt};
        if (psdb__client_backoff(c, &wait, attempt)) {
            hr = PSDB_E_CANCELLED;
            psdb__client_error(c,
                               "download: %s: cancelled by the progress callback at %llu of %llu "
                               "bytes; %s is kept for resuming",
                               url, (unsigned long long)s->have, (unsigned long long)m->size, part);
            goto cleanup;
        }
    }
cleanup:
    curl_slist_free_all(headers);
    return hr;
}

/* Checks the whole .part against the manifest's size and SHA-256 (a mismatch removes it), makes
 * it durable and renames it over dest_path. */
static psdb_hr part_commit(psdb_client *c, const psdb_manifest *m, const char *url,
                           const char *part, const char *dest_path, file_sink *s)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t got[32];
    psdb__sha256_end(s->sha, got);
    s->sha = NULL;
    if (s->have != m->size || memcmp(got, m->sha256, 32) != 0) {
        hr = PSDB_E_INTEGRITY;
        psdb__client_error(c, "download: %s does not match the manifest's SHA-256; discarded", url);
        psdb__unlink_same(part, s->fd);
        goto cleanup;
    }
    if (fsync(s->fd) != 0) {
        hr = psdb__errno_hr(errno);
        psdb__client_error(c, "download: fsync %s: %s", part, strerror(errno));
        goto cleanup;
    }
    if (psdb__rename_same(part, dest_path, s->fd) != 0) {
        hr = errno == EPERM ? PSDB_E_INTEGRITY : PSDB_E_IO;
        psdb__client_error(c, "download: rename %s: %s", part,
                           errno == EPERM ? "it was replaced while it was written; not used"
                                          : strerror(errno));
        goto cleanup;
    }
    psdb__fsync_dir_of(dest_path);
cleanup:
    return hr;
}

psdb_hr psdb_client_download(psdb_client *c, const psdb_manifest *m, const char *dest_path)
{
    psdb_hr hr = PSDB_S_OK;
    char *part = NULL, *url = NULL;
    file_sink s = {0};
    s.fd = -1;

    if (!c || !m || !dest_path || !m->url)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_download: NULL %s",
                               !c           ? "client"
                               : !m         ? "manifest"
                               : !dest_path ? "dest_path"
                                            : "manifest url");
    c->error[0] = '\0';
    /* The signature is checked first: nothing is fetched for a manifest no trusted key signed. */
    hr = psdb_client_verify_manifest(c, m);
    if (PSDB_FAILED(hr))
        goto cleanup;
    url = psdb__client_blob_url(c, m);
    if (asprintf(&part, "%s.part", dest_path) < 0)
        part = NULL;
    s.sha = psdb__sha256_begin();
    if (!url || !part || !s.sha) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = part_open(c, part, m->size, &s);
    if (PSDB_FAILED(hr))
        goto cleanup;
    s.c = c;
    s.limit = m->size;
    s.what = dest_path;
    hr = fetch_rest(c, m, url, part, &s);
    if (PSDB_SUCCEEDED(hr))
        hr = part_commit(c, m, url, part, dest_path, &s);
    if (PSDB_SUCCEEDED(hr) && c->progress) {
        psdb_progress p = {dest_path, s.have, m->size, s.attempt};
        c->progress(&p, c->progress_ctx);
    }
cleanup:
    if (hr == PSDB_E_DISK_FULL && part)
        psdb__unlink_same(part, s.fd); /* give the space back; nothing of it is usable */
    if (s.fd >= 0)
        close(s.fd);
    if (s.sha) {
        uint8_t discard[32];
        psdb__sha256_end(s.sha, discard);
    }
    free(part);
    free(url);
    return hr;
}
