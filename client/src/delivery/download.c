/* download.c - psdb_client_download: resumable, verified downloads into <dest>.part, renamed when
 * complete. */
#include "delivery/client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/hash.h"
#include "common/parse.h"
#include "common/status_map.h"

/* The .part being written, and the transport's hooks that fill it. */
typedef struct part_sink {
    int fd;
    const char *path;
    const char *url;
    uint64_t have;  /* bytes in the .part, hashed */
    uint64_t limit; /* the manifest's size: more is an integrity failure */
    psdb__sha256_ctx *sha;
    int accept_body;  /* the answer is appended: a 206 at our offset, or a 200 from 0 */
    const char *what; /* the destination, for the progress callback */
    char range[32];
} part_sink;

static int part_begin(void *ctx, psdb__attempt *a, const char **range)
{
    part_sink *s = ctx;
    (void)a;
    s->accept_body = 0;
    if (s->have > 0) {
        snprintf(s->range, sizeof(s->range), "%llu-", (unsigned long long)s->have);
        *range = s->range;
    }
    return 0;
}

/* The server ignored the Range: the .part starts over from byte 0. 0, or -1 (a->failed set). */
static int part_restart(part_sink *s, psdb__attempt *a)
{
    uint8_t discard[32];
    psdb__sha256_ctx *fresh = NULL;
    if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
        a->failed = psdb__error_set(psdb__errno_hr(errno), "download: write %s: %s", s->path,
                                    strerror(errno));
        return -1;
    }
    if (!(fresh = psdb__sha256_begin())) {
        a->failed = psdb__error_set(PSDB_E_OUTOFMEMORY, "download: out of memory");
        return -1;
    }
    psdb__sha256_end(s->sha, discard);
    s->sha = fresh;
    s->have = 0;
    return 0;
}

static int part_header(void *ctx, psdb__attempt *a, const char *p, size_t len)
{
    part_sink *s = ctx;
    if (len == 2 && p[0] == '\r' && p[1] == '\n') {
        if (a->status == PSDB__HTTP_PARTIAL_CONTENT) {
            s->accept_body = 1; /* its Content-Range started at s->have: see below */
        } else if (a->status == PSDB__HTTP_OK) {
            if (s->have > 0 && part_restart(s, a) != 0)
                return -1;
            s->accept_body = 1;
        }
    }
    /* A 206 must start exactly where the .part ends; another start ends the attempt, and the
     * next one asks again. */
    if (a->status == PSDB__HTTP_PARTIAL_CONTENT && len > 14 &&
        strncasecmp(p, "Content-Range:", 14) == 0) {
        const char *b = memchr(p, ' ', len);
        unsigned long long start = 0;
        if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->have)
            return -1;
    }
    return 0;
}

static int part_write(void *ctx, psdb__attempt *a, const char *p, size_t len)
{
    part_sink *s = ctx;
    if (!s->accept_body)
        return 0; /* an error page: drained, not stored */
    if (len > s->limit - s->have) {
        a->failed = psdb__error_set(PSDB_E_INTEGRITY,
                                    "download: %s sent more than the manifest's %llu bytes", s->url,
                                    (unsigned long long)s->limit);
        return -1;
    }
    if (psdb__write_all(s->fd, p, len) != 0) {
        a->failed = psdb__error_set(psdb__errno_hr(errno), "download: write %s: %s", s->path,
                                    strerror(errno));
        return -1;
    }
    psdb__sha256_update(s->sha, p, len);
    s->have += len;
    return 0;
}

/* A short body that ended cleanly is retried like a cut, from where it stopped. */
static int part_complete(void *ctx)
{
    const part_sink *s = ctx;
    return s->have >= s->limit;
}

static void part_progress(void *ctx, psdb_progress *p)
{
    const part_sink *s = ctx;
    *p = (psdb_progress){s->what, s->have, s->limit, 0};
}

/* Re-hashes the bytes an interrupted download left in the .part. */
static psdb_hr rehash_part(int fd, uint64_t *have, psdb__sha256_ctx *sha)
{
    char buf[1 << 16];
    uint64_t n = 0;
    for (;;) {
        ssize_t r = psdb__pread_upto(fd, buf, sizeof(buf), n);
        if (r < 0)
            return psdb__errno_hr(errno);
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
static psdb_hr part_open(part_sink *s)
{
    psdb_hr hr = PSDB_S_OK;
    char why[128];
    /* Resumed when an earlier attempt left it, so it must be a file of ours: a link planted there
     * would make the download write through it, a FIFO would block the open. */
    s->fd = psdb__open_file(s->path, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (s->fd < 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "download: open %s: %s", s->path, why);
        goto cleanup;
    }
    hr = rehash_part(s->fd, &s->have, s->sha);
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "download: read %s: %s", s->path, strerror(errno));
        goto cleanup;
    }
    if (s->have > s->limit) {
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

/* Checks the whole .part against the manifest's size and SHA-256 (a mismatch removes it), makes
 * it durable and renames it over dest_path. */
static psdb_hr part_commit(const psdb_manifest *m, const char *url, const char *dest_path,
                           part_sink *s)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t got[32];
    const char *why = NULL;
    psdb__sha256_end(s->sha, got);
    s->sha = NULL;
    if (s->have != m->size || memcmp(got, m->sha256, 32) != 0) {
        hr = psdb__error_set(PSDB_E_INTEGRITY,
                             "download: %s does not match the manifest's SHA-256; discarded", url);
        psdb__unlink_same(s->path, s->fd);
        goto cleanup;
    }
    if (fsync(s->fd) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "download: fsync %s: %s", s->path,
                             strerror(errno));
        goto cleanup;
    }
    if (psdb__rename_same(s->path, dest_path, s->fd) != 0) {
        hr = psdb__rename_hr(errno, PSDB_E_INTEGRITY, &why);
        psdb__error_set(hr, "download: rename %s: %s%s", s->path, why,
                        hr == PSDB_E_INTEGRITY ? "; not used" : "");
        goto cleanup;
    }
    psdb__fsync_dir_of(dest_path);
cleanup:
    return hr;
}

psdb_hr psdb_client_download(psdb_client *c, const psdb_manifest *m, const char *dest_path)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    char *part = NULL, *url = NULL;
    part_sink s = {.fd = -1};
    psdb__response res = {0};

    if (!c || !m || !dest_path || !m->url) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_download: NULL %s",
                             !c           ? "client"
                             : !m         ? "manifest"
                             : !dest_path ? "dest_path"
                                          : "manifest url");
        goto cleanup;
    }
    /* The signature is checked first: nothing is fetched for a manifest no trusted key signed. */
    hr = psdb_client_verify_manifest(c, m);
    if (PSDB_FAILED(hr))
        goto cleanup;
    url = psdb__client_blob_url(c, m);
    if (asprintf(&part, "%s.part", dest_path) < 0)
        part = NULL;
    s.sha = psdb__sha256_begin();
    if (!url || !part || !s.sha) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "download: out of memory");
        goto cleanup;
    }
    s.path = part;
    s.url = url;
    s.limit = m->size;
    s.what = dest_path;
    hr = part_open(&s);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* The rest of the blob with Range requests, retried from what is on disk; nothing to ask for
     * when an earlier attempt left it whole. */
    if (s.have < m->size) {
        psdb__request r = {.who = "download",
                           .url = url,
                           .flags = PSDB__REQ_PROGRESS,
                           .expect = {PSDB__HTTP_OK, PSDB__HTTP_PARTIAL_CONTENT},
                           .kept = part,
                           .ctx = &s,
                           .begin = part_begin,
                           .header = part_header,
                           .write = part_write,
                           .complete = part_complete,
                           .progress = part_progress};
        hr = psdb__transport_run(c, &r, &res);
    }
    if (PSDB_SUCCEEDED(hr))
        hr = part_commit(m, url, dest_path, &s);
    if (PSDB_SUCCEEDED(hr) && c->progress) {
        psdb_progress p = {dest_path, s.have, m->size, res.attempts};
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
    return psdb__client_ret(c, hr, err_mark, __func__);
}
