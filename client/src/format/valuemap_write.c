/* valuemap_write.c - psdb_value_map_write and psdb_value_map_write_version: the value map of a
 * PSDB (schema/VALUEMAP.md), what a server serves so that a launcher can rebuild a newer PSDB from
 * the values it already holds; version 1 here, version 2 in valuemap_write_v2.c. */
#include "psdb/valuemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "common/fdio.h"
#include "common/buf.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/status_map.h"
#include "format/valuemap.h"
#include "format/valuemap_walk.h"
#include "format/valuemap_write.h"

typedef struct collect {
    psdb__buf values; /* the value records, 56 bytes each */
    psdb__buf ranges; /* the range records, 16 bytes each */
    uint64_t num_values, num_ranges, value_bytes;
} collect;

static int on_value(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                    void *ctx)
{
    collect *c = ctx;
    uint8_t rec[PSDB__VMAP_VALUE_SIZE] = {0};
    memcpy(rec, sha256, 32);
    psdb__put_le64(rec + 32, size);
    psdb__put_le64(rec + 40, c->num_ranges);
    psdb__put_le32(rec + 48, (uint32_t)nr);
    psdb__buf_append(&c->values, rec, sizeof(rec));
    for (size_t i = 0; i < nr; i++) {
        uint8_t rr[PSDB__VMAP_RANGE_SIZE] = {0};
        psdb__put_le64(rr, r[i].offset);
        psdb__put_le32(rr + 8, r[i].length);
        psdb__buf_append(&c->ranges, rr, sizeof(rr));
        c->value_bytes += r[i].length;
    }
    c->num_values++;
    c->num_ranges += nr;
    return 0;
}

static psdb_hr sha256_fd(int fd, uint8_t out[32])
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t *buf = malloc(1 << 16);
    psdb__sha256_ctx *ctx = psdb__sha256_begin();
    uint64_t pos = 0;
    if (!buf || !ctx) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (;;) {
        ssize_t r = psdb__pread_upto(fd, buf, 1 << 16, pos);
        if (r < 0) {
            hr = psdb__errno_hr(errno);
            goto cleanup;
        }
        if (r == 0)
            break;
        psdb__sha256_update(ctx, buf, (size_t)r);
        pos += (uint64_t)r;
    }
cleanup:
    if (ctx)
        psdb__sha256_end(ctx, out);
    free(buf);
    return hr;
}

static int cmp_offset(const void *a, const void *b)
{
    uint64_t x = psdb__le64(a), y = psdb__le64(b);
    return x < y ? -1 : x > y;
}

psdb_hr psdb_value_map_write(const char *psdb_path, const char *out_path)
{
    psdb_hr hr = PSDB_S_OK;
    collect c = {0};
    uint8_t *sorted = NULL, *buf = NULL;
    uint8_t head[PSDB__VMAP_HEADER_SIZE] = {0}, sha[32];
    char *tmp = NULL;
    int in = -1, out = -1, zs_open = 0;
    struct stat st;
    z_stream zs = {0};
    static __thread uint8_t zbuf[1 << 16];
    char why[128];
    const unsigned err_mark = psdb__error_mark();

    if (!psdb_path || !out_path)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_value_map_write: NULL path");
    /* Checked before anything reads it: a FIFO or a device at the caller's path is refused, not
     * waited on. A link is followed: the caller named this file, and it is only read. */
    in = psdb__open_file(psdb_path, O_RDONLY, 0, PSDB__OPEN_FOLLOW, why, sizeof(why));
    if (in < 0 || fstat(in, &st) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write: open %s: %s", psdb_path,
                             in < 0 ? why : strerror(errno));
        goto cleanup;
    }
    hr = psdb__value_map_foreach(psdb_path, on_value, &c);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (c.values.oom || c.ranges.oom) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    uint64_t size = (uint64_t)st.st_size;
    /* The skeleton: the file's bytes outside every range, in file order. */
    sorted = malloc(c.ranges.len ? c.ranges.len : 1);
    buf = malloc(1 << 16);
    if (!sorted || !buf) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (c.ranges.len)
        memcpy(sorted, c.ranges.data, c.ranges.len);
    qsort(sorted, (size_t)c.num_ranges, PSDB__VMAP_RANGE_SIZE, cmp_offset);
    for (uint64_t i = 0, end = 0; i < c.num_ranges; i++) {
        uint64_t off = psdb__le64(sorted + i * PSDB__VMAP_RANGE_SIZE);
        uint64_t len = psdb__le32(sorted + i * PSDB__VMAP_RANGE_SIZE + 8);
        if (off < end || off + len > size) {
            hr = PSDB_E_CACHE_CORRUPT; /* overlapping ranges: not a file SQLite wrote */
            goto cleanup;
        }
        end = off + len;
    }
    hr = sha256_fd(in, sha);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__vmap_put_prefix(head, PSDB__VMAP_VERSION, size, sha);
    psdb__put_le64(head + 56, c.num_values);
    psdb__put_le64(head + 64, c.num_ranges);
    psdb__put_le64(head + 72, size - c.value_bytes);
    /* head + 80, the skeleton's compressed size, is written once known (below). */
    if (PSDB_FAILED(hr = psdb__vmap_create_tmp(out_path, "psdb_value_map_write", &tmp, &out)))
        goto cleanup;
    if (psdb__write_all(out, head, sizeof(head)) != 0 ||
        psdb__write_all(out, c.values.data ? c.values.data : head, c.values.len) != 0 ||
        psdb__write_all(out, c.ranges.data ? c.ranges.data : head, c.ranges.len) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write: write %s: %s", tmp,
                             strerror(errno));
        goto cleanup;
    }
    /* The skeleton, deflated: most of it is the slack of partly filled pages (zeros). */
    if (deflateInit(&zs, 6) != Z_OK) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    zs_open = 1;
    uint64_t pos = 0, stored = 0;
    for (uint64_t i = 0; i <= c.num_ranges; i++) {
        uint64_t next = i < c.num_ranges ? psdb__le64(sorted + i * PSDB__VMAP_RANGE_SIZE) : size;
        int last = i == c.num_ranges;
        do {
            size_t want = next - pos < (1 << 16) ? (size_t)(next - pos) : (1 << 16);
            ssize_t r = want ? psdb__pread_upto(in, buf, want, pos) : 0;
            if (r < 0 || (want && r == 0)) {
                hr = r == 0 ? PSDB_E_CACHE_CORRUPT : PSDB_E_IO;
                goto cleanup;
            }
            pos += (uint64_t)r;
            int flush = last && pos == next ? Z_FINISH : Z_NO_FLUSH;
            zs.next_in = buf;
            zs.avail_in = (uInt)r;
            do {
                zs.next_out = zbuf;
                zs.avail_out = sizeof(zbuf);
                if (deflate(&zs, flush) == Z_STREAM_ERROR) {
                    hr = PSDB_E_FAIL;
                    goto cleanup;
                }
                size_t have = sizeof(zbuf) - zs.avail_out;
                if (psdb__write_all(out, zbuf, have) != 0) {
                    hr =
                        psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write: write %s: %s",
                                        tmp, strerror(errno));
                    goto cleanup;
                }
                stored += have;
            } while (zs.avail_out == 0);
        } while (pos < next);
        if (i < c.num_ranges)
            pos = next + psdb__le32(sorted + i * PSDB__VMAP_RANGE_SIZE + 8);
    }
    psdb__put_le64(head + 80, stored);
    if (psdb__pwrite_all(out, head, sizeof(head), 0) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write: write %s: %s", tmp,
                             strerror(errno));
        goto cleanup;
    }
    if (fsync(out) != 0 || psdb__rename_same(tmp, out_path, out) != 0) {
        const char *why_not = NULL;
        hr = psdb__rename_hr(errno, PSDB_E_ACCESS, &why_not);
        psdb__error_set(hr, "psdb_value_map_write: put %s in place: %s", out_path, why_not);
        goto cleanup;
    }
cleanup:
    if (zs_open)
        deflateEnd(&zs);
    if (tmp && PSDB_FAILED(hr) && out >= 0)
        psdb__unlink_same(tmp, out); /* only what this call created */
    if (out >= 0 && close(out) != 0 && PSDB_SUCCEEDED(hr))
        hr = PSDB_E_IO;
    if (in >= 0)
        close(in);
    free(tmp);
    free(sorted);
    free(buf);
    psdb__buf_free(&c.values);
    psdb__buf_free(&c.ranges);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_value_map_write_version(const char *psdb_path, uint32_t version, const char *out_path)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!psdb_path || !out_path)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_value_map_write_version: NULL path");
    if (version == 1)
        return psdb_value_map_write(psdb_path, out_path);
    if (version != PSDB__VMAP2_VERSION)
        return psdb__error_set(PSDB_E_INVALIDARG,
                               "psdb_value_map_write_version: version %u is not 1 or 2", version);
    hr = psdb__value_map_write_v2(psdb_path, out_path);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb__vmap_create_tmp(const char *out_path, const char *fn, char **tmp, int *fd)
{
    char why[256];
    *fd = -1;
    if (asprintf(tmp, "%s.tmp", out_path) < 0) {
        *tmp = NULL;
        return PSDB_E_OUTOFMEMORY;
    }
    *fd = psdb__create_file(*tmp, O_WRONLY, 0644, why, sizeof(why));
    if (*fd < 0)
        return psdb__error_set(psdb__errno_hr(errno), "%s: create %s: %s", fn, *tmp, why);
    return PSDB_S_OK;
}
