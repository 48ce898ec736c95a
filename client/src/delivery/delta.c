/* delta.c - value-level delta updates: rebuild a newer PSDB from an installed one, the blob's
 * value map and ranges of the blob (delta.h). */
#include "delivery/delta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/status_map.h"
#include "format/psdb_valuemap.h"

#define COALESCE_GAP 4096u /* fetch a gap this small rather than pay another request */
#define COPY_BUF (1u << 16)

/* ---- fetching -------------------------------------------------------------------------------- */

typedef struct fetch_sink {
    psdb_client *c;
    int fd;
    uint64_t at, end; /* next file offset to write, and the end of what was asked */
    long status;
    int bad, cancelled, write_errno;
    struct timespec last;
} fetch_sink;

static size_t fetch_write(char *p, size_t size, size_t n, void *ctx)
{
    fetch_sink *s = ctx;
    size_t len = size * n;
    if (s->status != 200 && s->status != 206)
        return len; /* an error page: drained */
    if (len > s->end - s->at) {
        s->bad = 1;
        return 0;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(s->fd, p + done, len - done, (off_t)(s->at + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            s->write_errno = errno;
            return 0;
        }
        done += (size_t)w;
    }
    s->at += len;
    return len;
}

static size_t fetch_header(char *p, size_t size, size_t n, void *ctx)
{
    fetch_sink *s = ctx;
    size_t len = size * n;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    }
    if (s->status == 206 && len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        unsigned long long start = 0;
        const char *b = memchr(p, ' ', len);
        if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->at)
            s->bad = 1;
    }
    return len;
}

static int fetch_xfer(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c2;
    (void)d;
    fetch_sink *s = ctx;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - s->last.tv_sec) * 1000 + (now.tv_nsec - s->last.tv_nsec) / 1000000 < 100)
        return 0;
    s->last = now;
    psdb_progress p = {"delta", 0, 0, 1};
    s->cancelled = psdb__client_should_stop(s->c, &p);
    return s->cancelled;
}

/* GETs url ([off, off + len) when ranged; else the whole answer, at most len bytes) into fd at
 * off. Transient failures retry as downloads do. */
static psdb_hr fetch(psdb_client *c, const char *url, int ranged, uint64_t off, uint64_t len,
                     int fd, uint64_t *got)
{
    psdb_hr hr = PSDB_S_OK;
    struct curl_slist *headers = NULL;
    for (uint32_t attempt = 1;; attempt++) {
        fetch_sink s = {.c = c, .fd = fd, .at = off, .end = off + len};
        char range[64];
        long status = 0;
        CURL *h = psdb__client_new_handle(c, url, &headers);
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        if (ranged) {
            snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)off,
                     (unsigned long long)(off + len - 1));
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, fetch_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, fetch_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
        headers = NULL;
        *got += s.at - off;
        if (s.cancelled) {
            hr = PSDB_E_CANCELLED;
            goto cleanup;
        }
        if (s.write_errno) {
            hr = psdb__errno_hr(s.write_errno);
            goto cleanup;
        }
        if (s.bad || (rc == CURLE_OK && ranged && status != 206) ||
            (rc == CURLE_OK && !ranged && status != 200)) {
            hr = status == 404 ? PSDB_E_NOT_FOUND : PSDB_E_PROTOCOL;
            goto cleanup;
        }
        if (rc == CURLE_OK && (!ranged || s.at == off + len)) {
            if (!ranged)
                *got = s.at - off;
            goto cleanup;
        }
        if ((rc != CURLE_OK && !psdb__client_transient_curl(rc)) || attempt > c->max_retries) {
            hr = PSDB_E_NETWORK;
            goto cleanup;
        }
        psdb_progress wait = {"delta", 0, 0, attempt};
        if (psdb__client_backoff(c, &wait, attempt)) {
            hr = PSDB_E_CANCELLED;
            goto cleanup;
        }
        /* A ranged fetch restarts its run; a whole one starts over. */
        *got -= s.at - off;
    }
cleanup:
    curl_slist_free_all(headers);
    return hr;
}

/* ---- the local values ------------------------------------------------------------------------ */

typedef struct local_value {
    uint8_t sha[32];
    uint64_t size;
    uint64_t first; /* index into ranges */
    uint32_t n;
} local_value;

typedef struct local_set {
    local_value *v;
    size_t n, cap;
    psdb__byte_range *r;
    size_t nr, rcap;
    int oom;
} local_set;

static int on_local(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                    void *ctx)
{
    local_set *s = ctx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        local_value *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return s->oom = 1;
        s->v = v;
        s->cap = cap;
    }
    while (s->nr + nr > s->rcap) {
        size_t cap = s->rcap ? s->rcap * 2 : 1024;
        psdb__byte_range *x = realloc(s->r, cap * sizeof(*x));
        if (!x)
            return s->oom = 1;
        s->r = x;
        s->rcap = cap;
    }
    local_value *v = &s->v[s->n++];
    memcpy(v->sha, sha256, 32);
    v->size = size;
    v->first = s->nr;
    v->n = (uint32_t)nr;
    memcpy(s->r + s->nr, r, nr * sizeof(*r));
    s->nr += nr;
    return 0;
}

static int cmp_local(const void *a, const void *b)
{
    return memcmp(((const local_value *)a)->sha, ((const local_value *)b)->sha, 32);
}

static const local_value *find_local(const local_set *s, const uint8_t sha[32])
{
    local_value key;
    memcpy(key.sha, sha, 32);
    return bsearch(&key, s->v, s->n, sizeof(*s->v), cmp_local);
}

/* ---- rebuilding ------------------------------------------------------------------------------ */

static int read_exact(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_exact(int fd, const void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, (const uint8_t *)buf + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* Reads of the map's tables come in order and are small (16 and 56 bytes): through a window of
 * the file, so that they are not one pread each. */
typedef struct map_window {
    int fd;
    uint64_t start, len;
    uint8_t data[COPY_BUF];
} map_window;

static int map_read(map_window *w, void *out, size_t n, uint64_t off)
{
    if (n > sizeof(w->data))
        return read_exact(w->fd, out, n, off);
    if (off < w->start || off + n > w->start + w->len) {
        ssize_t r;
        do
            r = pread(w->fd, w->data, sizeof(w->data), (off_t)off);
        while (r < 0 && errno == EINTR);
        if (r < (ssize_t)n)
            return -1;
        w->start = off;
        w->len = (uint64_t)r;
    }
    memcpy(out, w->data + (off - w->start), n);
    return 0;
}

typedef struct span {
    uint64_t off, len;
} span;

static int cmp_span(const void *a, const void *b)
{
    uint64_t x = ((const span *)a)->off, y = ((const span *)b)->off;
    return x < y ? -1 : x > y;
}

/* Copies one value from the old file's ranges into the new file's ranges (equal totals). */
static psdb_hr copy_value(int old_fd, const local_set *ls, const local_value *lv, int out_fd,
                          const span *dst, uint32_t ndst, uint8_t *buf)
{
    uint32_t si = 0;
    uint64_t s_pos = 0;
    for (uint32_t di = 0; di < ndst; di++) {
        uint64_t d_pos = 0;
        while (d_pos < dst[di].len) {
            if (si >= lv->n)
                return PSDB_E_CACHE_CORRUPT;
            const psdb__byte_range *sr = &ls->r[lv->first + si];
            uint64_t n = sr->length - s_pos;
            if (n > dst[di].len - d_pos)
                n = dst[di].len - d_pos;
            if (n > COPY_BUF)
                n = COPY_BUF;
            if (read_exact(old_fd, buf, (size_t)n, sr->offset + s_pos) != 0)
                return PSDB_E_IO;
            if (write_exact(out_fd, buf, (size_t)n, dst[di].off + d_pos) != 0)
                return psdb__errno_hr(errno);
            s_pos += n;
            d_pos += n;
            if (s_pos == sr->length) {
                si++;
                s_pos = 0;
            }
        }
    }
    return PSDB_S_OK;
}

static psdb_hr hash_file(int fd, uint64_t size, uint8_t out[32], uint8_t *buf)
{
    psdb__sha256_ctx *ctx = psdb__sha256_begin();
    if (!ctx)
        return PSDB_E_OUTOFMEMORY;
    psdb_hr hr = PSDB_S_OK;
    for (uint64_t pos = 0; pos < size;) {
        size_t n = size - pos < COPY_BUF ? (size_t)(size - pos) : COPY_BUF;
        if (read_exact(fd, buf, n, pos) != 0) {
            hr = PSDB_E_IO;
            break;
        }
        psdb__sha256_update(ctx, buf, n);
        pos += n;
    }
    psdb__sha256_end(ctx, out);
    return hr;
}

#define WHY(...) snprintf(out->why_not, sizeof(out->why_not), __VA_ARGS__)

psdb_hr psdb__client_delta(psdb_client *c, const psdb_manifest *m, const char *old_path,
                           const char *dest_path, psdb__delta_outcome *out)
{
    psdb_hr hr = PSDB_S_OK;
    char *url = NULL, *map_url = NULL, *map_path = NULL, *part = NULL;
    int map_fd = -1, old_fd = -1, out_fd = -1;
    local_set ls = {0};
    span *all = NULL, *missing = NULL, *dst = NULL;
    uint8_t *buf = NULL, head[PSDB__VMAP_HEADER_SIZE], rec[PSDB__VMAP_VALUE_SIZE];
    uint64_t map_size = 0, nmiss = 0, miss_bytes = 0;
    static const uint8_t zero8[8];
    z_stream zs = {0};
    int zs_open = 0;
    uint8_t *zin = NULL;
    map_window *win = NULL, *win2 = NULL; /* the values and the ranges are read side by side */

    memset(out, 0, sizeof(*out));
    url = psdb__client_blob_url(c, m);
    if (!url || asprintf(&map_url, "%s/valuemap", url) < 0 ||
        asprintf(&map_path, "%s.valuemap", dest_path) < 0 ||
        asprintf(&part, "%s.delta", dest_path) < 0 || !(buf = malloc(COPY_BUF))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* The old file's values: their digests as recorded; a lie only makes the rebuild fail. */
    hr = psdb__value_map_foreach(old_path, on_local, &ls);
    if (ls.oom)
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_FAILED(hr)) {
        WHY("the installed PSDB %s cannot be read (%s)", old_path, psdb_hr_str(hr));
        goto cleanup;
    }
    qsort(ls.v, ls.n, sizeof(*ls.v), cmp_local);
    map_fd = open(map_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (map_fd < 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot create %s: %s", map_path, strerror(errno));
        goto cleanup;
    }
    /* A map as large as the blob cannot make the update smaller. */
    hr = fetch(c, map_url, 0, 0, m->size, map_fd, &map_size);
    out->downloaded = map_size;
    if (PSDB_FAILED(hr)) {
        WHY("no value map from the server (%s)", psdb_hr_str(hr));
        goto cleanup;
    }
    win = calloc(1, sizeof(*win));
    win2 = calloc(1, sizeof(*win2));
    if (!win || !win2) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    win->fd = win2->fd = map_fd;
    hr = PSDB_E_INTEGRITY;
    if (map_size < sizeof(head) || read_exact(map_fd, head, sizeof(head), 0) != 0 ||
        memcmp(head, PSDB__VMAP_MAGIC, 8) != 0 || psdb__le32(head + 8) != PSDB__VMAP_VERSION ||
        psdb__le32(head + 12) != 0 || memcmp(head + 88, zero8, 8) != 0 ||
        psdb__le64(head + 16) != m->size || memcmp(head + 24, m->sha256, 32) != 0) {
        WHY("the value map does not describe this PSDB");
        goto cleanup;
    }
    uint64_t nv = psdb__le64(head + 56), nr = psdb__le64(head + 64), skel = psdb__le64(head + 72);
    uint64_t stored = psdb__le64(head + 80);
    uint64_t values_at = sizeof(head), ranges_at, skel_at;
    if (nv > map_size / PSDB__VMAP_VALUE_SIZE || nr > map_size / PSDB__VMAP_RANGE_SIZE ||
        skel > m->size ||
        (ranges_at = values_at + nv * PSDB__VMAP_VALUE_SIZE) + nr * PSDB__VMAP_RANGE_SIZE >
            map_size ||
        stored > map_size ||
        (skel_at = ranges_at + nr * PSDB__VMAP_RANGE_SIZE) + stored != map_size) {
        WHY("the value map is malformed");
        goto cleanup;
    }
    all = malloc((nr ? nr : 1) * sizeof(*all));
    missing = malloc((nr ? nr : 1) * sizeof(*missing));
    if (!all || !missing) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* Every range, checked: inside the file, disjoint, and with the skeleton exactly the file. */
    uint64_t covered = 0;
    for (uint64_t i = 0; i < nr; i++) {
        uint8_t r[PSDB__VMAP_RANGE_SIZE];
        if (map_read(win, r, sizeof(r), ranges_at + i * sizeof(r)) != 0 ||
            psdb__le32(r + 12) != 0) {
            WHY("the value map is malformed");
            goto cleanup;
        }
        all[i].off = psdb__le64(r);
        all[i].len = psdb__le32(r + 8);
        if (all[i].off > m->size || all[i].len > m->size - all[i].off) {
            WHY("the value map names bytes past the file");
            goto cleanup;
        }
        covered += all[i].len;
    }
    /* Which values are missing, and how many bytes that is. */
    for (uint64_t i = 0, next_range = 0; i < nv; i++) {
        if (map_read(win, rec, sizeof(rec), values_at + i * sizeof(rec)) != 0 ||
            psdb__le32(rec + 52) != 0 || psdb__le64(rec + 40) != next_range ||
            psdb__le32(rec + 48) > nr - next_range) {
            WHY("the value map is malformed");
            goto cleanup;
        }
        uint32_t n = psdb__le32(rec + 48);
        const local_value *lv = find_local(&ls, rec);
        if (!lv || lv->size != psdb__le64(rec + 32))
            for (uint32_t k = 0; k < n; k++) {
                missing[nmiss++] = all[next_range + k];
                miss_bytes += all[next_range + k].len;
            }
        next_range += n;
        if (i + 1 == nv && next_range != nr) {
            WHY("the value map is malformed");
            goto cleanup;
        }
    }
    qsort(all, (size_t)nr, sizeof(*all), cmp_span);
    for (uint64_t i = 1; i < nr; i++)
        if (all[i].off < all[i - 1].off + all[i - 1].len) {
            WHY("the value map has overlapping ranges");
            goto cleanup;
        }
    if (covered + skel != m->size) {
        WHY("the value map does not cover the file");
        goto cleanup;
    }
    /* Not worth its extra requests and local work unless it saves a sixteenth of the file. */
    if ((map_size + miss_bytes) / 15 >= m->size / 16) {
        hr = PSDB_S_FALSE;
        WHY("a delta of %llu bytes would not be smaller than the file by a sixteenth",
            (unsigned long long)(map_size + miss_bytes));
        goto cleanup;
    }
    out_fd = open(part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    old_fd = open(old_path, O_RDONLY | O_CLOEXEC);
    if (out_fd < 0 || old_fd < 0 || ftruncate(out_fd, (off_t)m->size) != 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot prepare %s: %s", part, strerror(errno));
        goto cleanup;
    }
    /* The skeleton, inflated into the gaps between ranges. */
    zin = malloc(COPY_BUF);
    if (!zin || inflateInit(&zs) != Z_OK) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    zs_open = 1;
    uint64_t skel_pos = skel_at, file_pos = 0, inflated = 0;
    int zr = Z_OK;
    for (uint64_t i = 0; i <= nr; i++) {
        uint64_t gap_end = i < nr ? all[i].off : m->size;
        while (file_pos < gap_end) {
            if (zs.avail_in == 0 && skel_pos < map_size) {
                size_t n =
                    map_size - skel_pos < COPY_BUF ? (size_t)(map_size - skel_pos) : COPY_BUF;
                if (read_exact(map_fd, zin, n, skel_pos) != 0) {
                    hr = PSDB_E_IO;
                    goto cleanup;
                }
                skel_pos += n;
                zs.next_in = zin;
                zs.avail_in = (uInt)n;
            }
            size_t want = gap_end - file_pos < COPY_BUF ? (size_t)(gap_end - file_pos) : COPY_BUF;
            zs.next_out = buf;
            zs.avail_out = (uInt)want;
            zr = inflate(&zs, Z_NO_FLUSH);
            size_t n = want - zs.avail_out;
            if ((zr != Z_OK && zr != Z_STREAM_END) || (n == 0 && zs.avail_in == 0) ||
                write_exact(out_fd, buf, n, file_pos) != 0) {
                hr = PSDB_E_INTEGRITY;
                WHY("the value map's skeleton does not inflate to the file's other bytes");
                goto cleanup;
            }
            file_pos += n;
            inflated += n;
        }
        if (i < nr)
            file_pos = all[i].off + all[i].len;
    }
    if (inflated != skel) {
        hr = PSDB_E_INTEGRITY;
        WHY("the value map's skeleton does not inflate to the file's other bytes");
        goto cleanup;
    }
    /* The values held locally, copied from the old file. */
    dst = NULL;
    for (uint64_t i = 0, first = 0; i < nv; i++) {
        if (map_read(win, rec, sizeof(rec), values_at + i * sizeof(rec)) != 0) {
            hr = PSDB_E_IO;
            goto cleanup;
        }
        uint32_t n = psdb__le32(rec + 48);
        const local_value *lv = find_local(&ls, rec);
        if (lv && lv->size == psdb__le64(rec + 32) && n > 0) {
            span *d = realloc(dst, n * sizeof(*d));
            if (!d) {
                hr = PSDB_E_OUTOFMEMORY;
                goto cleanup;
            }
            dst = d;
            for (uint32_t k = 0; k < n; k++) {
                uint8_t r[PSDB__VMAP_RANGE_SIZE];
                if (map_read(win2, r, sizeof(r), ranges_at + (first + k) * sizeof(r)) != 0) {
                    hr = PSDB_E_IO;
                    goto cleanup;
                }
                dst[k].off = psdb__le64(r);
                dst[k].len = psdb__le32(r + 8);
            }
            hr = copy_value(old_fd, &ls, lv, out_fd, dst, n, buf);
            if (PSDB_FAILED(hr)) {
                WHY("cannot copy a value from %s (%s)", old_path, psdb_hr_str(hr));
                goto cleanup;
            }
        }
        first += n;
    }
    /* The missing values, fetched from the blob in coalesced runs. */
    qsort(missing, (size_t)nmiss, sizeof(*missing), cmp_span);
    for (uint64_t i = 0; i < nmiss;) {
        uint64_t start = missing[i].off, end = start + missing[i].len;
        for (i++; i < nmiss && missing[i].off <= end + COALESCE_GAP; i++)
            if (missing[i].off + missing[i].len > end)
                end = missing[i].off + missing[i].len;
        if (end == start)
            continue;
        uint64_t got = 0;
        hr = fetch(c, url, 1, start, end - start, out_fd, &got);
        out->downloaded += got;
        if (PSDB_FAILED(hr)) {
            WHY("fetching bytes %llu-%llu of the blob failed (%s)", (unsigned long long)start,
                (unsigned long long)end - 1, psdb_hr_str(hr));
            goto cleanup;
        }
    }
    /* The same acceptance as a full download: the manifest's size and SHA-256. */
    uint8_t got_sha[32];
    hr = hash_file(out_fd, m->size, got_sha, buf);
    if (PSDB_SUCCEEDED(hr) && memcmp(got_sha, m->sha256, 32) != 0) {
        hr = PSDB_E_INTEGRITY;
        WHY("the rebuilt file does not match the manifest's SHA-256");
        goto cleanup;
    }
    if (PSDB_FAILED(hr) || fsync(out_fd) != 0 || rename(part, dest_path) != 0) {
        hr = PSDB_FAILED(hr) ? hr : PSDB_E_IO;
        WHY("cannot put the rebuilt file in place: %s", strerror(errno));
        goto cleanup;
    }
    out->used = 1;
    hr = PSDB_S_OK;
cleanup:
    if (zs_open)
        inflateEnd(&zs);
    free(zin);
    free(win);
    free(win2);
    if (map_fd >= 0)
        close(map_fd);
    if (map_path)
        unlink(map_path);
    if (out_fd >= 0)
        close(out_fd);
    if (old_fd >= 0)
        close(old_fd);
    if (part && !out->used)
        unlink(part);
    if (!out->used && PSDB_SUCCEEDED(hr))
        hr = PSDB_S_FALSE;
    free(url);
    free(map_url);
    free(map_path);
    free(part);
    free(buf);
    free(all);
    free(missing);
    free(dst);
    free(ls.v);
    free(ls.r);
    return hr;
}
