/* psdb_btree.c - a blob fetch without SQLite: a walk of the blobs table's B-tree (schema/PSDB.md,
 * "Reading") over the interior pages the file's page cache shares, and one pread of the leaf. */
/*
 * A fetch through SQLite (sqlite3_blob_reopen, or the SELECT of a first fetch) runs a VDBE
 * program, copies each interior page of the descent from the shared page cache into the
 * connection's pager and the leaf from the file: measured on 100k values, about a third of a
 * fetch besides its one pread. The blobs table is the simplest of B-trees (integer keys, rows of
 * a NULL, a 32-byte digest and the bytes), and the file is immutable, so the walk is done here on
 * the bytes: interior pages from the shared cache (no copy), the leaf into the connection's page
 * buffer (one pread, which the key's next blob, its neighbour, usually finds there again).
 *
 * Only what is plainly well formed is served: a page of another type, a cell or record outside
 * its page, a row whose record is not (NULL, 32-byte blob, blob of the recorded size), a blob
 * spilling onto overflow pages, a short read, a digest mismatch all answer "not served" and the
 * caller reads through SQLite, which reports the damage as before. The bytes handed out are
 * hashed against the row's digest (or the digest psdb_file_check proved) at the first fetch,
 * exactly as on the SQLite path, and the per-blob flag is the same one.
 */
#include "format/psdbfile_int.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/fdio.h"

/* B-tree page types (the first byte of the page header). */
#define PAGE_TABLE_INTERIOR 0x05
#define PAGE_TABLE_LEAF 0x0D
/* A table B-tree of 2^28 pages of 4 KiB is far shallower than this. */
#define MAX_DEPTH 16
/* Largest payload kept whole on a leaf page of usable size U = 4096 (reserved bytes are 0,
 * psdb_file_open checks): U - 35. */
#define MAX_LOCAL (PAGE_CACHE_PAGE_SIZE - 35)
/* leaf_of[id] is page << LEAF_SHIFT | VERIFIED_DIRECT_*: pages number at most 2^28 (else there is
 * no page cache and no direct read), so it fits 31 bits. */
#define LEAF_SHIFT 3
_Static_assert(PAGE_CACHE_MAX_PAGES_LOG2 + LEAF_SHIFT < 32, "leaf_of holds page and digest kind");
/* Record serial type of a 32-byte BLOB: 32 * 2 + 12. */
#define SERIAL_DIGEST 76u

static uint32_t be16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* SQLite's varint at page[*pos], not reading at or past end; 0 when it does not fit. */
static int varint(const uint8_t *page, size_t *pos, size_t end, uint64_t *out)
{
    uint64_t v = 0;
    int i = 0, done = 0;

    for (; i < 9 && !done && *pos < end; i++) {
        uint8_t b = page[(*pos)++];
        /* The ninth byte gives all of its 8 bits. */
        v = i == 8 ? v << 8 | b : v << 7 | (b & 0x7F);
        done = i == 8 || !(b & 0x80);
    }
    *out = v;
    return done;
}

/* The page of 1-based number pgno (in 2..num_pages): the connection's last page, a shared interior
 * page, or read into the connection's page buffer (an interior page is then kept for the next
 * walks). NULL on a short read. */
static const uint8_t *get_page(psdb_file *f, conn *c, uint32_t pgno)
{
    page_cache *pc = f->pages;
    const uint8_t *page = NULL;

    if (pgno == c->page_no) {
        page = c->page;
        goto cleanup;
    }
    if ((page = atomic_load_explicit(&pc->pages[pgno - 1], memory_order_acquire)) != NULL)
        goto cleanup;
    c->page_no = 0;
    if (psdb__pread_upto(pc->fd, c->page, PAGE_CACHE_PAGE_SIZE,
                         (uint64_t)(pgno - 1) * PAGE_CACHE_PAGE_SIZE) !=
        (ssize_t)PAGE_CACHE_PAGE_SIZE)
        goto cleanup;
    c->page_no = pgno;
    psdb__pf_page_keep(pc, pgno - 1, c->page);
    page = c->page;
cleanup:
    return page;
}

/* The leaf page that holds row id if any, found by walking down from the root; NULL when the walk
 * meets something it does not plainly understand. */
static const uint8_t *find_leaf(psdb_file *f, conn *c, uint64_t id)
{
    const uint8_t *page = NULL, *leaf = NULL;
    uint32_t pgno = f->blobs_root;

    for (int depth = 0; depth < MAX_DEPTH; depth++) {
        /* Page 1 holds the file header and sqlite_schema, never a page of blobs. */
        if (pgno < 2 || pgno > f->pages->num_pages || !(page = get_page(f, c, pgno)))
            goto cleanup;
        if (page[0] == PAGE_TABLE_LEAF) {
            leaf = page;
            goto cleanup;
        }
        if (page[0] != PAGE_TABLE_INTERIOR)
            goto cleanup;
        /* Interior: cells sorted by key, each a child page number and the largest key under it;
         * the first cell whose key is >= id names the child, else the right-most pointer. */
        uint32_t n = be16(page + 3), lo = 0, hi = n;
        if (12 + 2 * (size_t)n > PAGE_CACHE_PAGE_SIZE)
            goto cleanup;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            size_t off = be16(page + 12 + 2 * (size_t)mid), pos = off + 4;
            uint64_t key = 0;
            if (off < 12 || !varint(page, &pos, PAGE_CACHE_PAGE_SIZE, &key))
                goto cleanup;
            if ((int64_t)key < (int64_t)id)
                lo = mid + 1;
            else
                hi = mid;
        }
        /* be16 < 4096 and the cell's 4 bytes were checked by the search when lo < n. */
        pgno = lo < n ? be32(page + be16(page + 12 + 2 * (size_t)lo)) : be32(page + 8);
    }
cleanup:
    return leaf;
}

/* On leaf page `page`, the digest and the bytes of row id when its record is (NULL, 32-byte blob,
 * blob of size bytes) kept whole on the page; 0 otherwise. */
static int parse_row(const uint8_t *page, uint64_t id, size_t size, const uint8_t **digest,
                     const uint8_t **data)
{
    uint32_t n = be16(page + 3), lo = 0, hi = n;
    size_t pos = 0, rec = 0, end = 0, hdr_end = 0;
    uint64_t payload = 0, rowid = 0, hdr = 0, t0 = 0, t1 = 0, t2 = 0;
    int found = 0;

    if (8 + 2 * (size_t)n > PAGE_CACHE_PAGE_SIZE)
        goto cleanup;
    while (lo < hi && !found) {
        uint32_t mid = lo + (hi - lo) / 2;
        pos = be16(page + 8 + 2 * (size_t)mid);
        if (pos < 8 || !varint(page, &pos, PAGE_CACHE_PAGE_SIZE, &payload) ||
            !varint(page, &pos, PAGE_CACHE_PAGE_SIZE, &rowid))
            goto cleanup;
        if ((int64_t)rowid < (int64_t)id)
            lo = mid + 1;
        else if ((int64_t)rowid > (int64_t)id)
            hi = mid;
        else
            found = 1;
    }
    /* A payload over MAX_LOCAL continues on overflow pages: SQLite reads those. */
    if (!found || payload > MAX_LOCAL || payload > PAGE_CACHE_PAGE_SIZE - pos)
        goto cleanup;
    rec = pos;
    end = rec + (size_t)payload;
    /* The header size counts the varint that holds it. */
    if (!varint(page, &pos, end, &hdr) || hdr > payload)
        goto cleanup;
    hdr_end = rec + (size_t)hdr;
    if (!varint(page, &pos, hdr_end, &t0) || !varint(page, &pos, hdr_end, &t1) ||
        !varint(page, &pos, hdr_end, &t2) || pos != hdr_end)
        goto cleanup;
    /* id is the INTEGER PRIMARY KEY (stored as NULL), then sha256, then data. */
    if (t0 != 0 || t1 != SERIAL_DIGEST || t2 != (uint64_t)size * 2 + 12 ||
        (size_t)payload != (size_t)hdr + 32 + size)
        goto cleanup;
    *digest = page + hdr_end;
    *data = page + hdr_end + 32;
    found = 2;
cleanup:
    return found == 2;
}

int psdb__pf_blob_fetch(psdb_file *f, conn *c, int64_t id, void *value, size_t size)
{
    const uint8_t *page = NULL, *digest = NULL, *data = NULL;
    uint8_t got[EVP_MAX_MD_SIZE];
    unsigned int got_size = 0;
    uint8_t(*checked)[32] = atomic_load_explicit(&f->checked, memory_order_acquire);
    unsigned want = checked ? VERIFIED_DIRECT_CHECKED : VERIFIED_DIRECT_ROW;
    uint32_t mark = 0, hint = 0;
    int served = 0;

    if (!f->blobs_root || !f->pages || !f->pages->pages || !c->page || id < 1 || size > MAX_LOCAL)
        goto cleanup;
    /* One key's blobs are numbered consecutively: the next one is most often on the leaf the
     * previous fetch read, found there without a walk from the root. A blob served before is
     * read from the leaf it was served from: a walk costs about a microsecond of cache misses
     * in the interior pages' binary searches (measured), the leaf's pread is needed anyway. */
    if (f->leaf_of && (uint64_t)id < f->num_verified_slots)
        mark = atomic_load_explicit(&f->leaf_of[id], memory_order_relaxed);
    hint = mark >> LEAF_SHIFT;
    if (c->page_no && c->page[0] == PAGE_TABLE_LEAF &&
        parse_row(c->page, (uint64_t)id, size, &digest, &data))
        page = c->page;
    else if (hint >= 2 && hint <= f->pages->num_pages && (page = get_page(f, c, hint)) &&
             page[0] == PAGE_TABLE_LEAF && parse_row(page, (uint64_t)id, size, &digest, &data))
        ;
    else if (!(page = find_leaf(f, c, (uint64_t)id)) ||
             !parse_row(page, (uint64_t)id, size, &digest, &data))
        goto cleanup;
    /* The hash is skipped only for the row on the very leaf it was hashed on, against the digest
     * wanted now: in a crafted tree another leaf may hold another row of the same id. Page and
     * digest kind are one atomic value, stored only after a hash; leaves are only in c->page. */
    if (!mark || page != c->page || mark != ((uint32_t)c->page_no << LEAF_SHIFT | want)) {
        /* The digest psdb_file_check proved, once it did, as read_and_check does. */
        if (checked && (uint64_t)id > f->info.num_blobs)
            goto cleanup;
        if (checked)
            digest = checked[id];
        if (EVP_DigestInit_ex2(c->md, f->sha256, NULL) != 1 ||
            EVP_DigestUpdate(c->md, data, size) != 1 ||
            EVP_DigestFinal_ex(c->md, got, &got_size) != 1 || got_size != 32 ||
            memcmp(got, digest, 32) != 0)
            goto cleanup;
        if (f->leaf_of && (uint64_t)id < f->num_verified_slots && page == c->page)
            atomic_store_explicit(&f->leaf_of[id], (uint32_t)c->page_no << LEAF_SHIFT | want,
                                  memory_order_relaxed);
    }
    memcpy(value, data, size);
    c->direct_reads++;
    served = 1;
cleanup:
    return served;
}
