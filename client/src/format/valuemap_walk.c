/* valuemap_walk.c - the byte ranges of a PSDB file that hold each value, and its keys
 * (valuemap_walk.h). */
#include "format/valuemap_walk.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/fdio.h"
#include "common/status_map.h"
#include "format/psdbfile_int.h"

#define MAX_DEPTH 32 /* b-tree depth; SQLite's own limit is 20 */
/* Pages are read through a window of the file: a value's overflow chain and the next leaf
 * mostly follow each other, so one read serves many pages instead of one pread each. */
#define WINDOW (256u << 10)

typedef struct walker {
    int fd;
    uint32_t page_size, usable;
    uint64_t num_pages;
    uint8_t *stack[MAX_DEPTH]; /* one page buffer per level */
    psdb__byte_range *ranges;
    size_t cap;
    psdb__value_range_fn fn;
    psdb__key_slot_fn key_fn;
    void *ctx;
    uint64_t *roots; /* with key_fn: every rootpage of sqlite_schema */
    size_t num_roots, roots_cap;
    int stopped;
    uint64_t visited; /* b-tree pages read: more than the file has means a cycle */
    uint8_t *win;     /* WINDOW bytes of the file from win_start, win_len of them valid */
    uint64_t win_start, win_len;
} walker;

static uint32_t be16(const uint8_t *p)
{
    return ((uint32_t)p[0] << 8) | p[1];
}

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* An SQLite varint at p[0..avail): its length (1..9), 0 when it runs past avail. */
static size_t varint(const uint8_t *p, size_t avail, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 9 && i < avail; i++) {
        if (i == 8) {
            *out = (v << 8) | p[i];
            return 9;
        }
        v = (v << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

static psdb_hr read_page(walker *w, uint64_t pgno, uint8_t *buf)
{
    if (pgno == 0 || pgno > w->num_pages)
        return PSDB_E_CACHE_CORRUPT;
    uint64_t off = (pgno - 1) * w->page_size;
    if (off < w->win_start || off + w->page_size > w->win_start + w->win_len) {
        ssize_t r = psdb__pread_upto(w->fd, w->win, WINDOW, off);
        if (r < 0)
            return PSDB_E_IO;
        size_t got = (size_t)r;
        w->win_start = off;
        w->win_len = got;
        if (got < w->page_size)
            return PSDB_E_CACHE_CORRUPT; /* shorter than its page count */
    }
    memcpy(buf, w->win + (off - w->win_start), w->page_size);
    return PSDB_S_OK;
}

static psdb_hr add_range(walker *w, size_t *n, uint64_t offset, uint32_t length)
{
    if (length == 0)
        return PSDB_S_OK;
    if (*n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        psdb__byte_range *r = realloc(w->ranges, cap * sizeof(*r));
        if (!r)
            return PSDB_E_OUTOFMEMORY;
        w->ranges = r;
        w->cap = cap;
    }
    w->ranges[(*n)++] = (psdb__byte_range){offset, length};
    return PSDB_S_OK;
}

/* SQLite's local payload size of a table-leaf cell with payload p. */
static uint64_t local_size(uint32_t usable, uint64_t p)
{
    uint64_t x = usable - 35, m = ((uint64_t)(usable - 12) * 32 / 255) - 23;
    if (p <= x)
        return p;
    uint64_t k = m + (p - m) % (usable - 4);
    return k <= x ? k : m;
}

/* One cell of the blobs leaf `page` (number pgno) at offset `at`: finds the record's digest
 * and data and reports the data's ranges. */
static psdb_hr leaf_cell(walker *w, const uint8_t *page, uint64_t pgno, uint32_t at,
                         uint8_t *overflow_buf)
{
    psdb_hr hr = PSDB_S_OK;
    uint64_t payload = 0, rowid = 0, hdr_len = 0, t_id = 0, t_sha = 0, t_data = 0;
    size_t n = 0, v;
    uint32_t end = w->usable;
    if (at >= end)
        return PSDB_E_CACHE_CORRUPT;
    v = varint(page + at, end - at, &payload);
    if (!v)
        return PSDB_E_CACHE_CORRUPT;
    at += (uint32_t)v;
    v = varint(page + at, end - at, &rowid);
    if (!v)
        return PSDB_E_CACHE_CORRUPT;
    at += (uint32_t)v;
    uint64_t local = local_size(w->usable, payload);
    if (local > end - at || (local < payload && local + 4 > end - at))
        return PSDB_E_CACHE_CORRUPT;
    /* The record header (a few bytes) always lies in the local part: M >= 480 bytes. */
    const uint8_t *rec = page + at;
    size_t hv = varint(rec, (size_t)local, &hdr_len);
    if (!hv || hdr_len > local || hdr_len < hv)
        return PSDB_E_CACHE_CORRUPT;
    size_t pos = hv;
    uint64_t *types[3] = {&t_id, &t_sha, &t_data};
    for (int i = 0; i < 3; i++) {
        v = varint(rec + pos, (size_t)(hdr_len - pos), types[i]);
        if (!v)
            return PSDB_E_CACHE_CORRUPT;
        pos += v;
    }
    /* (id INTEGER PRIMARY KEY: NULL in the record, sha256 BLOB(32), data BLOB) */
    if (pos != hdr_len || t_id != 0 || t_sha != 32 * 2 + 12 || t_data < 12 || (t_data & 1))
        return PSDB_E_CACHE_CORRUPT;
    uint64_t size = (t_data - 12) / 2;
    if (hdr_len + 32 + size != payload || hdr_len + 32 > local)
        return PSDB_E_CACHE_CORRUPT;
    uint8_t sha[32];
    memcpy(sha, rec + hdr_len, 32);
    uint64_t base = (pgno - 1) * w->page_size;
    uint64_t data_at = hdr_len + 32; /* payload offset of the data */
    hr = add_range(w, &n, base + at + data_at, (uint32_t)(local - data_at));
    if (PSDB_FAILED(hr))
        return hr;
    uint64_t left = payload - local, next = local < payload ? be32(rec + local) : 0;
    uint64_t hops = 0;
    while (left > 0) {
        /* A chain longer than the file has pages is a cycle. */
        if (next == 0 || ++hops > w->num_pages)
            return PSDB_E_CACHE_CORRUPT;
        hr = read_page(w, next, overflow_buf);
        if (PSDB_FAILED(hr))
            return hr;
        uint32_t chunk = left < w->usable - 4 ? (uint32_t)left : w->usable - 4;
        hr = add_range(w, &n, (next - 1) * w->page_size + 4, chunk);
        if (PSDB_FAILED(hr))
            return hr;
        left -= chunk;
        next = be32(overflow_buf);
    }
    if (w->fn(sha, size, w->ranges, n, w->ctx) != 0)
        w->stopped = 1;
    return PSDB_S_OK;
}

/* Visits the table b-tree rooted at pgno (depth-first, left to right). With fn NULL, looks for
 * the schema row named `blobs` instead and stores its root page in *root. */
static psdb_hr walk(walker *w, uint64_t pgno, int depth, uint64_t *schema_root)
{
    psdb_hr hr = PSDB_S_OK;
    if (depth >= MAX_DEPTH - 1 || ++w->visited > w->num_pages)
        return PSDB_E_CACHE_CORRUPT;
    uint8_t *page = w->stack[depth];
    hr = read_page(w, pgno, page);
    if (PSDB_FAILED(hr))
        return hr;
    uint32_t hdr = pgno == 1 ? 100 : 0; /* page 1 starts with the file header */
    uint8_t type = page[hdr];
    uint32_t ncells = be16(page + hdr + 3);
    uint32_t ptrs = hdr + (type == 0x05 ? 12 : 8);
    if ((type != 0x05 && type != 0x0D) || ptrs + 2 * (uint64_t)ncells > w->usable)
        return PSDB_E_CACHE_CORRUPT;
    for (uint32_t i = 0; i < ncells && !w->stopped; i++) {
        uint32_t at = be16(page + ptrs + 2 * i);
        if (at < ptrs + 2 * ncells || at >= w->usable)
            return PSDB_E_CACHE_CORRUPT;
        if (type == 0x05) {
            if (at + 4 > w->usable)
                return PSDB_E_CACHE_CORRUPT;
            hr = walk(w, be32(page + at), depth + 1, schema_root);
            if (PSDB_FAILED(hr))
                return hr;
            /* The child walk reused deeper buffers only: this page is intact. */
        } else if (schema_root) {
            hr = PSDB_S_OK;
            /* sqlite_schema(type, name, tbl_name, rootpage, sql): small rows, all local here */
            uint64_t payload = 0, rowid = 0, hlen = 0, st[5];
            uint32_t end = w->usable;
            size_t v = varint(page + at, end - at, &payload);
            if (!v)
                return PSDB_E_CACHE_CORRUPT;
            at += (uint32_t)v;
            v = varint(page + at, end - at, &rowid);
            if (!v)
                return PSDB_E_CACHE_CORRUPT;
            at += (uint32_t)v;
            uint64_t local = local_size(w->usable, payload);
            if (local > end - at)
                return PSDB_E_CACHE_CORRUPT;
            const uint8_t *rec = page + at;
            size_t pos = varint(rec, (size_t)local, &hlen);
            if (!pos || hlen > local)
                return PSDB_E_CACHE_CORRUPT;
            for (int c = 0; c < 5; c++) {
                v = varint(rec + pos, (size_t)(hlen - pos), &st[c]);
                if (!v)
                    return PSDB_E_CACHE_CORRUPT;
                pos += v;
            }
            /* Text columns are odd serial types >= 13; rootpage a small integer (1..4). */
            if (st[0] < 13 || !(st[0] & 1) || st[1] < 13 || !(st[1] & 1) || st[2] < 13 ||
                !(st[2] & 1) || st[3] < 1 || st[3] > 4)
                continue;
            uint64_t l0 = (st[0] - 13) / 2, l1 = (st[1] - 13) / 2, l2 = (st[2] - 13) / 2;
            static const uint8_t int_len[] = {0, 1, 2, 3, 4};
            uint64_t off = hlen;
            if (off + l0 + l1 + l2 + int_len[st[3]] > local)
                continue; /* a long row (not ours) spilled to overflow */
            int is_table = l0 == 5 && memcmp(rec + off, "table", 5) == 0;
            off += l0;
            int is_blobs = l1 == 5 && memcmp(rec + off, "blobs", 5) == 0;
            off += l1 + l2;
            uint64_t r = 0;
            for (uint8_t b = 0; b < int_len[st[3]]; b++)
                r = (r << 8) | rec[off + b];
            if (w->key_fn) {
                /* Every table and index: their keys are what the key walk looks for. */
                if (w->num_roots == w->roots_cap) {
                    size_t cap = w->roots_cap ? w->roots_cap * 2 : 8;
                    uint64_t *x = realloc(w->roots, cap * sizeof(*x));
                    if (!x)
                        return PSDB_E_OUTOFMEMORY;
                    w->roots = x;
                    w->roots_cap = cap;
                }
                w->roots[w->num_roots++] = r;
            } else if (is_table && is_blobs) {
                *schema_root = r;
                w->stopped = 1;
            }
        } else {
            hr = leaf_cell(w, page, pgno, at, w->stack[depth + 1]);
            if (PSDB_FAILED(hr))
                return hr;
        }
    }
    if (type == 0x05 && !w->stopped)
        hr = walk(w, be32(page + hdr + 8), depth + 1, schema_root);
    return hr;
}

/* Opens path and reads its SQLite header into w (page size, usable size, page count, buffers). */
static psdb_hr walker_open(walker *w, const char *path)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t head[100];
    struct stat st;
    w->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (w->fd < 0) {
        hr = PSDB_E_IO;
        goto cleanup;
    }
    if (fstat(w->fd, &st) != 0 || pread(w->fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
        memcmp(head, "SQLite format 3", 16) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    w->page_size = be16(head + 16) == 1 ? 65536 : be16(head + 16);
    if (w->page_size < 512 || (w->page_size & (w->page_size - 1)) ||
        head[20] > w->page_size - 480) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    w->usable = w->page_size - head[20];
    w->num_pages = (uint64_t)st.st_size / w->page_size;
    w->win = malloc(WINDOW);
    if (!w->win) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (int i = 0; i < MAX_DEPTH; i++) {
        w->stack[i] = malloc(w->page_size);
        if (!w->stack[i]) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }
cleanup:
    return hr;
}

static void walker_close(walker *w)
{
    for (int i = 0; i < MAX_DEPTH; i++)
        free(w->stack[i]);
    free(w->ranges);
    free(w->roots);
    free(w->win);
    if (w->fd >= 0)
        close(w->fd);
}

/* Opens the file and walks its schema table (page 1): the tables' roots into w, the blobs table's
 * into *blobs_root (0 when it has none). */
static psdb_hr walker_start(walker *w, const char *path, uint64_t *blobs_root)
{
    psdb_hr hr = walker_open(w, path);
    return PSDB_FAILED(hr) ? hr : walk(w, 1, 0, blobs_root);
}

psdb_hr psdb__value_map_foreach(const char *path, psdb__value_range_fn fn, void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    walker w = {.fd = -1, .fn = fn, .ctx = ctx};
    uint64_t root = 0;

    if (!path || !fn)
        return PSDB_E_INVALIDARG;
    hr = walker_start(&w, path, &root);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (root < 2) {
        hr = PSDB_E_CACHE_CORRUPT; /* no blobs table */
        goto cleanup;
    }
    w.stopped = 0;
    w.visited = 0;
    hr = walk(&w, root, 0, NULL);
    if (PSDB_SUCCEEDED(hr) && w.stopped)
        hr = PSDB_S_FALSE;
cleanup:
    walker_close(&w);
    return hr;
}

/* The content length of a record field of SQLite serial type t; -1 for the reserved 10 and 11. */
static int64_t serial_len(uint64_t t)
{
    static const uint8_t fixed[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    if (t == 10 || t == 11)
        return -1;
    return t < 12 ? fixed[t] : (int64_t)((t - 12) / 2);
}

/* Reports the 32-byte BLOB fields of one record whose local part is rec[0..local) at file offset
 * base. */
static psdb_hr record_keys(walker *w, const uint8_t *rec, uint64_t local, uint64_t base)
{
    uint64_t hlen = 0, t = 0;
    size_t pos = varint(rec, (size_t)local, &hlen);
    if (!pos || hlen > local || hlen < pos)
        return PSDB_E_CACHE_CORRUPT;
    uint64_t body = hlen;
    while (pos < hlen && !w->stopped) {
        size_t v = varint(rec + pos, (size_t)(hlen - pos), &t);
        int64_t n = serial_len(t);
        if (!v || n < 0)
            return PSDB_E_CACHE_CORRUPT;
        pos += v;
        if (t == 32 * 2 + 12 && body + 32 <= local && w->key_fn(base + body, rec + body, w->ctx))
            w->stopped = 1;
        body += (uint64_t)n;
    }
    return PSDB_S_OK;
}

/* Visits any b-tree rooted at pgno for psdb__value_map_keys_foreach. */
static psdb_hr walk_keys(walker *w, uint64_t pgno, int depth)
{
    psdb_hr hr = PSDB_S_OK;
    if (depth >= MAX_DEPTH || ++w->visited > w->num_pages)
        return PSDB_E_CACHE_CORRUPT;
    uint8_t *page = w->stack[depth];
    hr = read_page(w, pgno, page);
    if (PSDB_FAILED(hr))
        return hr;
    uint32_t hdr = pgno == 1 ? 100 : 0;
    uint8_t type = page[hdr];
    int interior = type == 0x02 || type == 0x05, index = type == 0x02 || type == 0x0A;
    if (type != 0x02 && type != 0x05 && type != 0x0A && type != 0x0D)
        return PSDB_E_CACHE_CORRUPT;
    uint32_t ncells = be16(page + hdr + 3), ptrs = hdr + (interior ? 12 : 8);
    if (ptrs + 2 * (uint64_t)ncells > w->usable)
        return PSDB_E_CACHE_CORRUPT;
    /* SQLite's largest local payload: U - 35 in table leaves, (U - 12) * 64 / 255 - 23 in
     * index pages; larger payloads keep the local size of valuemap_walk.h's formula. */
    uint64_t x = index ? (uint64_t)(w->usable - 12) * 64 / 255 - 23 : w->usable - 35;
    uint64_t base = (pgno - 1) * w->page_size;
    for (uint32_t i = 0; i < ncells && !w->stopped; i++) {
        uint32_t at = be16(page + ptrs + 2 * i), end = w->usable;
        uint64_t payload = 0, rowid = 0;
        if (at < ptrs + 2 * ncells || at >= end)
            return PSDB_E_CACHE_CORRUPT;
        if (interior) {
            if (at + 4 > end)
                return PSDB_E_CACHE_CORRUPT;
            hr = walk_keys(w, be32(page + at), depth + 1);
            if (PSDB_FAILED(hr))
                return hr;
            at += 4;
            if (type == 0x05)
                continue; /* a table's interior cell holds a rowid only */
        }
        size_t v = varint(page + at, end - at, &payload);
        if (!v)
            return PSDB_E_CACHE_CORRUPT;
        at += (uint32_t)v;
        if (type == 0x0D) {
            v = varint(page + at, end - at, &rowid);
            if (!v)
                return PSDB_E_CACHE_CORRUPT;
            at += (uint32_t)v;
        }
        uint64_t local = payload;
        if (payload > x) {
            uint64_t m = ((uint64_t)(w->usable - 12) * 32 / 255) - 23;
            uint64_t k = m + (payload - m) % (w->usable - 4);
            local = k <= x ? k : m;
        }
        if (local > end - at)
            return PSDB_E_CACHE_CORRUPT;
        hr = record_keys(w, page + at, local, base + at);
        if (PSDB_FAILED(hr))
            return hr;
    }
    if (interior && !w->stopped)
        hr = walk_keys(w, be32(page + hdr + 8), depth + 1);
    return hr;
}

psdb_hr psdb__value_map_keys_foreach(const char *path, psdb__key_slot_fn fn, void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    walker w = {.fd = -1, .key_fn = fn, .ctx = ctx};
    uint64_t unused = 0;

    if (!path || !fn)
        return PSDB_E_INVALIDARG;
    hr = walker_start(&w, path, &unused);
    if (PSDB_FAILED(hr))
        goto cleanup;
    w.visited = 0; /* the trees are disjoint: all of them together visit each page once */
    for (size_t i = 0; i < w.num_roots && !w.stopped; i++) {
        hr = walk_keys(&w, w.roots[i], 0);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if (w.stopped)
        hr = PSDB_S_FALSE;
cleanup:
    walker_close(&w);
    return hr;
}

psdb_hr psdb__value_digests_foreach(const char *path, psdb__digest_fn fn, void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    char *uri = NULL, msg[256];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc;
    if (!path || !fn)
        return PSDB_E_INVALIDARG;
    if (!(uri = psdb__pf_make_uri(path))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__pf_db_open_uri(uri, NULL, &db, msg, sizeof(msg));
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__pf_check_schema(db, msg, sizeof(msg));
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* Only the digest: SQLite scans the index, not the table and its values. */
    rc = sqlite3_prepare_v2(db, "SELECT sha256 FROM blobs", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        goto cleanup;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *sha = sqlite3_column_blob(st, 0);
        if (!sha || sqlite3_column_bytes(st, 0) != 32) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        if (fn(sha, ctx)) {
            hr = PSDB_S_FALSE;
            goto cleanup;
        }
    }
    if (rc != SQLITE_DONE)
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(uri);
    return hr;
}
