/* valuemap_walk.h - the value map's walk of a PSDB file: the byte ranges of the SQLite file that
 * hold `blobs.data` of every row, and its 32-byte keys (valuemap_walk.c). The ground of the value
 * map (its writers, valuemap_write.h) and of value-level delta updates: a launcher that already
 * holds a value elsewhere needs none of these bytes.
 *
 * DESIGN
 * A row of `blobs` (a rowid table) is one cell of a table b-tree leaf: payload length and rowid
 * varints, then the record, of which the first part sits in the cell ("local") and the rest in a
 * chain of overflow pages, each starting with the 4-byte number of the next. The local size
 * follows SQLite's file format (fileformat2, "B-tree Pages"): with usable size U, X = U - 35,
 * M = (U - 12) * 32 / 255 - 23, K = M + (P - M) % (U - 4): P itself when P <= X, else K when
 * K <= X, else M. The record is (NULL id, 32-byte sha256, data), so data starts after the record
 * header and the digest. The walk reads one page at a time with pread and checks every offset,
 * count and page number against the file before use, so any file (damaged or hostile) gives
 * PSDB_E_CACHE_CORRUPT, never a read outside the page. */
#ifndef PSDB_FORMAT_VALUEMAP_WALK_H
#define PSDB_FORMAT_VALUEMAP_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "psdb/psdb.h"

typedef struct psdb__byte_range {
    uint64_t offset; /* in the file */
    uint32_t length;
} psdb__byte_range;

/* Called once per row of `blobs`, in b-tree order (rowid order): the row's recorded SHA-256, the
 * data length, and the ranges that hold the data, in order (their lengths sum to size). The
 * ranges are borrowed for the call. A non-zero return stops the walk (PSDB_S_FALSE). */
typedef int (*psdb__value_range_fn)(const uint8_t sha256[32], uint64_t size,
                                    const psdb__byte_range *ranges, size_t num_ranges, void *ctx);

/* Walks the `blobs` table of the PSDB at path. Statuses: PSDB_S_OK after the last row;
 * PSDB_S_FALSE when fn stopped it; PSDB_E_INVALIDARG (NULL path or fn); PSDB_E_IO (cannot open
 * or read); PSDB_E_CACHE_CORRUPT (not an SQLite file with a `blobs` table of this layout, or any
 * offset, page number or length out of bounds, or a cycle); PSDB_E_OUTOFMEMORY. Memory: a few
 * pages and one row's range list. */
psdb_hr psdb__value_map_foreach(const char *path, psdb__value_range_fn fn, void *ctx);

/* Called once per record field that is a 32-byte BLOB (SQLite serial type 76) lying whole in the
 * local part of its cell: the field's offset in the file and its bytes (borrowed for the call).
 * These are the keys and digests of a PSDB (blobs.sha256 and its unique index, the value and group
 * keys of the WITHOUT ROWID tables, the content digest), the incompressible part of what is not a
 * value. A non-zero return stops the walk (PSDB_S_FALSE). */
typedef int (*psdb__key_slot_fn)(uint64_t offset, const uint8_t key[32], void *ctx);

/* Visits every b-tree that sqlite_schema names (tables, WITHOUT ROWID tables, indexes; interior
 * index cells included, since they repeat keys), depth-first, and reports each 32-byte BLOB field
 * (a blobs.data value of 32 bytes too: callers drop fields that lie inside value ranges). Order:
 * b-tree order per tree, not file order. Statuses and checks as psdb__value_map_foreach. Memory:
 * a few pages and the list of roots. */
psdb_hr psdb__value_map_keys_foreach(const char *path, psdb__key_slot_fn fn, void *ctx);

/* Called with the SHA-256 of each row of `blobs`; a non-zero return stops (PSDB_S_FALSE). */
typedef int (*psdb__digest_fn)(const uint8_t sha256[32], void *ctx);

/* The digests of the PSDB at path, read through SQLite from the unique index on blobs.sha256
 * (about 40 bytes a value: a launcher asks cheaply whether a file holds any value it lacks
 * before walking it). The file is opened read-only and immutable with the hardening of every
 * PSDB connection and its schema checked. Statuses: PSDB_S_OK; PSDB_S_FALSE when fn stopped it;
 * PSDB_E_INVALIDARG; PSDB_E_CACHE_CORRUPT (not a PSDB, a digest of another length);
 * PSDB_E_IO; PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__value_digests_foreach(const char *path, psdb__digest_fn fn, void *ctx);

#endif
