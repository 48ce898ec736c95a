/* valuemap_write_v2.c - the version 2 value map of a PSDB (schema/VALUEMAP.md): the file as a
 * recipe of skeleton runs, 32-byte keys and value parts, with every distinct key stored once.
 *
 * DESIGN
 * In version 1 the deflated skeleton was mostly the PSDB's 32-byte keys (blob digests and their
 * unique index, value and group keys), which deflate cannot shrink, and each value's digest was
 * listed a second time in the value table: the map cost about 7% of the file, more than the values
 * of a small patch. Here every 32-byte BLOB field of every b-tree is cut out of the skeleton and
 * replaced by a reference into a table of distinct keys, numbered in order of first use, so a
 * digest that the blobs row, its index entry and the value table all name is stored once and
 * referenced twice in a byte or three. What remains of the skeleton (page headers, cell pointers,
 * record headers, slack) deflates to a few percent of itself. The recipe lists the file in order,
 * so that a client rebuilds it in one sequential pass. Every offset is checked against the file;
 * a file whose cells overlap is refused (PSDB_E_CACHE_CORRUPT). */
#include "format/valuemap_write.h"

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
#include "common/hash.h"
#include "common/status_map.h"
#include "common/error.h"
#include "format/valuemap.h"
#include "format/valuemap_walk.h"

#define READ_WINDOW (1u << 20)

typedef struct value_rec {
    uint8_t sha[32];
    uint64_t size;
} value_rec;

typedef struct seg { /* a range of a value, in the new file */
    uint64_t off;
    uint32_t len;
    uint32_t value;    /* index in rowid order */
    uint64_t in_value; /* offset of the range in the value */
} seg;

typedef struct slot { /* a 32-byte key field */
    uint64_t off;
    uint8_t key[32];
    uint64_t id;
    size_t first; /* index (offset order) of the first slot with the same key */
} slot;

typedef struct collect {
    value_rec *v;
    size_t nv, vcap;
    seg *s;
    size_t ns, scap;
    slot *k;
    size_t nk, kcap;
    int oom;
} collect;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *x = realloc(*p, cap2 * elem);
    if (!x)
        return -1;
    *p = x;
    *cap = cap2;
    return 0;
}

static int on_value(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                    void *ctx)
{
    collect *c = ctx;
    if (c->nv >= UINT32_MAX || grow((void **)&c->v, &c->vcap, c->nv + 1, sizeof(*c->v)) != 0 ||
        grow((void **)&c->s, &c->scap, c->ns + nr, sizeof(*c->s)) != 0)
        return c->oom = 1;
    memcpy(c->v[c->nv].sha, sha256, 32);
    c->v[c->nv].size = size;
    uint64_t in = 0;
    for (size_t i = 0; i < nr; i++) {
        c->s[c->ns++] = (seg){r[i].offset, r[i].length, (uint32_t)c->nv, in};
        in += r[i].length;
    }
    c->nv++;
    return 0;
}

static int on_key(uint64_t offset, const uint8_t key[32], void *ctx)
{
    collect *c = ctx;
    if (grow((void **)&c->k, &c->kcap, c->nk + 1, sizeof(*c->k)) != 0)
        return c->oom = 1;
    c->k[c->nk].off = offset;
    memcpy(c->k[c->nk].key, key, 32);
    c->nk++;
    return 0;
}

static int cmp_seg(const void *a, const void *b)
{
    uint64_t x = ((const seg *)a)->off, y = ((const seg *)b)->off;
    return x < y ? -1 : x > y;
}

static int cmp_slot_off(const void *a, const void *b)
{
    uint64_t x = ((const slot *)a)->off, y = ((const slot *)b)->off;
    return x < y ? -1 : x > y;
}

typedef struct keyref { /* a slot's key and its index in offset order, for grouping */
    uint8_t key[32];
    size_t slot;
} keyref;

static int cmp_keyref(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    int c = memcmp(x->key, y->key, 32);
    return c ? c : (x->slot > y->slot) - (x->slot < y->slot);
}

static void put_varint(psdb__buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    psdb__buf_append(b, t, n);
}

static uint64_t zigzag(int64_t d)
{
    return d < 0 ? ((uint64_t)(-(d + 1)) << 1) | 1 : (uint64_t)d << 1;
}

/* Deflates raw into out (zlib, best compression: the map is written once, fetched often). */
static psdb_hr deflate_buf(const psdb__buf *raw, psdb__buf *out)
{
    uLongf n = compressBound((uLong)raw->len);
    out->data = malloc(n ? n : 1);
    if (!out->data)
        return PSDB_E_OUTOFMEMORY;
    if (compress2(out->data, &n, raw->data ? raw->data : (const Bytef *)"", (uLong)raw->len,
                  Z_BEST_COMPRESSION) != Z_OK)
        return PSDB_E_OUTOFMEMORY;
    out->len = out->cap = n;
    return PSDB_S_OK;
}

/* The file's bytes read in order through one window. */
typedef struct reader {
    int fd;
    uint64_t start, len;
    uint8_t *data;
} reader;

static psdb_hr read_at(reader *r, uint64_t off, size_t n, const uint8_t **out)
{
    if (off < r->start || off + n > r->start + r->len) {
        ssize_t k = psdb__pread_upto(r->fd, r->data, READ_WINDOW, off);
        if (k < 0)
            return PSDB_E_IO;
        size_t got = (size_t)k;
        r->start = off;
        r->len = got;
        if (n > got)
            return PSDB_E_CACHE_CORRUPT;
    }
    *out = r->data + (off - r->start);
    return PSDB_S_OK;
}

/* Deflates the skeleton bytes [off, off + n) of the file into z's output buffer. */
static psdb_hr skeleton_run(reader *r, z_stream *z, psdb__buf *out, uint64_t off, uint64_t n,
                            int finish)
{
    static const uint8_t none[1];
    do {
        size_t k = n > READ_WINDOW / 2 ? READ_WINDOW / 2 : (size_t)n;
        const uint8_t *p = none;
        if (k) {
            psdb_hr hr = read_at(r, off, k, &p);
            if (PSDB_FAILED(hr))
                return hr;
        }
        z->next_in = (Bytef *)p;
        z->avail_in = (uInt)k;
        off += k;
        n -= k;
        int flush = finish && n == 0 ? Z_FINISH : Z_NO_FLUSH;
        int zr;
        do {
            uint8_t chunk[16384];
            z->next_out = chunk;
            z->avail_out = sizeof(chunk);
            zr = deflate(z, flush);
            if (zr == Z_STREAM_ERROR)
                return PSDB_E_FAIL;
            psdb__buf_append(out, chunk, sizeof(chunk) - z->avail_out);
        } while (z->avail_out == 0 || (flush == Z_FINISH && zr != Z_STREAM_END));
    } while (n > 0);
    return psdb__buf_status(out);
}

psdb_hr psdb__value_map_write_v2(const char *psdb_path, const char *out_path)
{
    psdb_hr hr = PSDB_S_OK;
    collect c = {0};
    keyref *by_key = NULL;
    size_t nkeys = 0;
    psdb__buf keys = {0}, vraw = {0}, vz = {0}, rraw = {0}, rz = {0}, sz = {0};
    uint8_t head[PSDB__VMAP2_HEADER_SIZE] = {0}, sha[32];
    reader rd = {.fd = -1};
    char *tmp = NULL;
    int out = -1, zs_open = 0;
    struct stat st;
    z_stream zs = {0};
    uint64_t skel = 0, entries = 0;
    char why[128];

    /* As psdb_value_map_write: a FIFO or device at the path is refused before anything reads it;
     * a link is followed (the caller named the file, and it is only read). */
    rd.fd = psdb__open_file(psdb_path, O_RDONLY, 0, PSDB__OPEN_FOLLOW, why, sizeof(why));
    if (rd.fd < 0 || fstat(rd.fd, &st) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write_version: open %s: %s",
                             psdb_path, rd.fd < 0 ? why : strerror(errno));
        goto cleanup;
    }
    hr = psdb__value_map_foreach(psdb_path, on_value, &c);
    if (PSDB_SUCCEEDED(hr) && !c.oom)
        hr = psdb__value_map_keys_foreach(psdb_path, on_key, &c);
    if (c.oom)
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_FAILED(hr))
        goto cleanup;
    rd.data = malloc(READ_WINDOW);
    if (!rd.data) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    uint64_t size = (uint64_t)st.st_size;
    qsort(c.s, c.ns, sizeof(*c.s), cmp_seg);
    for (size_t i = 0; i < c.ns; i++)
        if (c.s[i].off + c.s[i].len > size ||
            (i > 0 && c.s[i].off < c.s[i - 1].off + c.s[i - 1].len)) {
            hr = PSDB_E_CACHE_CORRUPT; /* overlapping ranges: not a file SQLite wrote */
            goto cleanup;
        }
    /* The key fields outside every value range (a 32-byte value's data is a value, not a key),
     * in file order; cells that overlap each other are damage. */
    qsort(c.k, c.nk, sizeof(*c.k), cmp_slot_off);
    size_t nk = 0;
    for (size_t i = 0, j = 0; i < c.nk; i++) {
        while (j < c.ns && c.s[j].off + c.s[j].len <= c.k[i].off)
            j++;
        if (j < c.ns && c.s[j].off < c.k[i].off + 32)
            continue;
        if (c.k[i].off + 32 > size || (nk > 0 && c.k[i].off < c.k[nk - 1].off + 32)) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        c.k[nk++] = c.k[i];
    }
    c.nk = nk;
    /* Key ids in order of first use: equal keys grouped, each pointing at its group's first. */
    by_key = malloc((c.nk ? c.nk : 1) * sizeof(*by_key));
    if (!by_key) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (size_t i = 0; i < c.nk; i++) {
        memcpy(by_key[i].key, c.k[i].key, 32);
        by_key[i].slot = i;
    }
    qsort(by_key, c.nk, sizeof(*by_key), cmp_keyref);
    for (size_t i = 0; i < c.nk; i++)
        c.k[by_key[i].slot].first = i > 0 && memcmp(by_key[i].key, by_key[i - 1].key, 32) == 0
                                        ? c.k[by_key[i - 1].slot].first
                                        : by_key[i].slot;
    for (size_t i = 0; i < c.nk; i++) {
        if (c.k[i].first == i) {
            c.k[i].id = nkeys++;
            psdb__buf_append(&keys, c.k[i].key, 32);
        } else {
            c.k[i].id = c.k[c.k[i].first].id;
        }
    }
    /* The values: each digest as the id of the key with those bytes. */
    uint64_t prev_id = 0;
    for (size_t i = 0; i < c.nv; i++) {
        size_t lo = 0, hi = c.nk;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (memcmp(by_key[mid].key, c.v[i].sha, 32) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == c.nk || memcmp(by_key[lo].key, c.v[i].sha, 32) != 0) {
            hr = PSDB_E_CACHE_CORRUPT; /* a blobs row whose digest is not a field of it */
            goto cleanup;
        }
        uint64_t id = c.k[by_key[lo].slot].id;
        put_varint(&vraw, zigzag((int64_t)(id - prev_id)));
        put_varint(&vraw, c.v[i].size);
        prev_id = id;
    }
    /* The recipe and the skeleton, in one pass over the file. */
    if (deflateInit(&zs, Z_BEST_COMPRESSION) != Z_OK) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    zs_open = 1;
    uint64_t pos = 0, used_keys = 0, prev_value = 0;
    for (size_t i = 0, j = 0; i < c.ns || j < c.nk || pos < size;) {
        int take_key = j < c.nk && (i == c.ns || c.k[j].off < c.s[i].off);
        uint64_t next = i < c.ns || j < c.nk ? (take_key ? c.k[j].off : c.s[i].off) : size;
        if (next > pos) {
            put_varint(&rraw, (next - pos) << 2 | PSDB__VMAP2_TAG_SKELETON);
            hr = skeleton_run(&rd, &zs, &sz, pos, next - pos, 0);
            if (PSDB_FAILED(hr))
                goto cleanup;
            skel += next - pos;
            entries++;
            pos = next;
        }
        if (i == c.ns && j == c.nk)
            break;
        if (take_key) {
            uint64_t id = c.k[j].id;
            put_varint(&rraw, (id == used_keys ? 0 : id + 1) << 2 | PSDB__VMAP2_TAG_KEY);
            used_keys += id == used_keys;
            pos = c.k[j++].off + 32;
        } else {
            const seg *g = &c.s[i++];
            put_varint(&rraw, zigzag((int64_t)g->value - (int64_t)prev_value) << 2 |
                                  PSDB__VMAP2_TAG_VALUE);
            put_varint(&rraw, g->in_value);
            put_varint(&rraw, g->len);
            prev_value = g->value;
            pos = g->off + g->len;
        }
        entries++;
    }
    hr = skeleton_run(&rd, &zs, &sz, pos, 0, 1);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__buf_status(&keys);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__buf_status(&vraw);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__buf_status(&rraw);
    if (PSDB_SUCCEEDED(hr))
        hr = deflate_buf(&vraw, &vz);
    if (PSDB_SUCCEEDED(hr))
        hr = deflate_buf(&rraw, &rz);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* The digest of the file as read now: the map describes these bytes only. */
    psdb__sha256_ctx *h = psdb__sha256_begin();
    if (!h) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t at = 0; at < size && PSDB_SUCCEEDED(hr);) {
        const uint8_t *p = NULL;
        size_t n = size - at < READ_WINDOW ? (size_t)(size - at) : READ_WINDOW;
        hr = read_at(&rd, at, n, &p);
        if (PSDB_SUCCEEDED(hr))
            psdb__sha256_update(h, p, n);
        at += n;
    }
    psdb__sha256_end(h, sha);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__vmap_put_prefix(head, PSDB__VMAP2_VERSION, size, sha);
    psdb__put_le64(head + 56, c.nv);
    psdb__put_le64(head + 64, nkeys);
    psdb__put_le64(head + 72, entries);
    psdb__put_le64(head + 80, skel);
    psdb__put_le64(head + 88, vz.len);
    psdb__put_le64(head + 96, rz.len);
    psdb__put_le64(head + 104, sz.len);
    hr = psdb__vmap_create_tmp(out_path, "psdb_value_map_write_version", &tmp, &out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (psdb__write_all(out, head, sizeof(head)) != 0 ||
        psdb__write_all(out, keys.data ? keys.data : head, keys.len) != 0 ||
        psdb__write_all(out, vz.data, vz.len) != 0 || psdb__write_all(out, rz.data, rz.len) != 0 ||
        psdb__write_all(out, sz.data ? sz.data : head, sz.len) != 0 || fsync(out) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "psdb_value_map_write_version: write %s: %s",
                             tmp, strerror(errno));
        goto cleanup;
    }
    if (psdb__rename_same(tmp, out_path, out) != 0) {
        const char *why_not = NULL;
        hr = psdb__rename_hr(errno, PSDB_E_ACCESS, &why_not);
        psdb__error_set(hr, "psdb_value_map_write_version: put %s in place: %s", out_path, why_not);
    }
cleanup:
    if (zs_open)
        deflateEnd(&zs);
    if (tmp && PSDB_FAILED(hr) && out >= 0)
        psdb__unlink_same(tmp, out); /* only what this call created */
    if (out >= 0 && close(out) != 0 && PSDB_SUCCEEDED(hr))
        hr = PSDB_E_IO;
    if (rd.fd >= 0)
        close(rd.fd);
    free(rd.data);
    free(tmp);
    free(by_key);
    free(c.v);
    free(c.s);
    free(c.k);
    psdb__buf_free(&keys);
    psdb__buf_free(&vraw);
    psdb__buf_free(&vz);
    psdb__buf_free(&rraw);
    psdb__buf_free(&rz);
    psdb__buf_free(&sz);
    return hr;
}
