/* psdb/file.h - PSDB files: open, validate, look up, write (schema/PSDB.md); what kind a file is.
 * SODBs have their own header, psdb/sodb.h, included here so that code including file.h alone
 * sees the SODB calls as before. */
#ifndef PSDB_FILE_H
#define PSDB_FILE_H

#include "types.h"
#include "sodb.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct psdb_file psdb_file;
typedef struct psdb_writer psdb_writer;

/* ---- Reading a PSDB (MODEL C1-C3) --------------------------------------------------------------
 */

/* Everything a PSDB records about itself. Strings are borrowed from the psdb_file and live until
 * psdb_file_release(). */
typedef struct psdb_file_info {
    psdb_app_identity identity;
    psdb_target target;
    uint64_t num_values; /* (key, type) pairs */
    uint64_t num_groups;
    uint64_t num_blobs;         /* distinct blobs after deduplication */
    uint64_t blob_bytes;        /* bytes of distinct blobs */
    uint8_t content_digest[32]; /* SHA-256 over the logical content (schema/PSDB.md), MODEL C4 */
} psdb_file_info;

/* Opens a PSDB read-only and validates it (MODEL C2). A PSDB is never modified once written, so it
 * is opened as an immutable SQLite database (URI parameter immutable=1): no locks taken, no journal
 * or WAL looked for, nothing written. The file must not change while it is open.
 * `adapter` NULL: no compatibility check (tools, the server). Statuses, checked in this order:
 *   PSDB_E_INVALIDARG             path or out NULL, or adapter given with a NULL family;
 *   PSDB_E_IO / PSDB_E_ACCESS     the file cannot be opened or is not a regular file;
 *   PSDB_E_CACHE_CORRUPT          not a SQLite file, not a PSDB (application_id), schema version
 *                                 (user_version) other than 1, a SQLite header setting the writer
 *                                 never makes (WAL, auto_vacuum, UTF-16, reserved bytes, ...),
 *                                 truncated or trailing bytes, a schema other than psdb.sql's
 *                                 (any table, column, generated column, index, trigger or view
 *                                 missing, extra or altered: every CREATE statement is compared,
 *                                 before anything stored in the file is evaluated), malformed
 *                                 header row;
 *   PSDB_E_ADAPTER_NOT_FOUND      adapter family differs (byte comparison);
 *   PSDB_E_DRIVER_VERSION_MISMATCH ABI outside [abi_min, abi_max] or top 32 bits of the
 *                                 application profile version differ (MODEL A3);
 *   PSDB_E_OUTOFMEMORY.
 * Blob bytes are not read here: damage inside a blob is reported by the lookup that meets it.
 * On success *out is the caller's, released with psdb_file_release(); on failure *out is NULL.
 * Thread safety: a psdb_file may be used from many threads at once. Each lookup borrows one of a
 * pool of read connections, so lookups from different threads run in parallel. */
PSDB_API psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter,
                                psdb_file **out);
/* Closes the file and its connections. NULL is a no-op. No call on f may be running or follow. */
PSDB_API void psdb_file_release(psdb_file *f);

/* Fills *out (never fails on an open file; PSDB_E_INVALIDARG on NULL). */
PSDB_API psdb_hr psdb_file_get_info(psdb_file *f, psdb_file_info *out);

/* Looks up one value type of one key (MODEL C3). With value NULL, *value_size receives the size
 * (S_OK). With a buffer, *value_size in is its capacity: too small -> PSDB_E_MORE_DATA with the
 * needed size written back and the buffer untouched; else the bytes are copied and *value_size
 * set. Absent key, or key without that type -> PSDB_E_NOT_FOUND. A malformed value row ->
 * PSDB_E_CACHE_CORRUPT. A size query reads the value's row only (its recorded size); a data fetch
 * also reads the blob: missing, malformed or of another size -> PSDB_E_CACHE_CORRUPT. The blob's
 * bytes are checked against its stored SHA-256 the first time that blob is fetched through this
 * psdb_file (a per-blob flag skips the hash afterwards, the file being immutable): a mismatch ->
 * PSDB_E_CACHE_CORRUPT and nothing copied. Consecutive lookups of one key from one thread reuse
 * that key's row (a runtime asks for size, object code, then metadata).
 * PSDB_E_INVALIDARG: f, key or value_size NULL, key_size 0, value_type >= PSDB_VALUE_TYPE_COUNT.
 * PSDB_E_IO, PSDB_E_OUTOFMEMORY. Thread-safe; lookups do not serialize. */
PSDB_API psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size,
                                      uint32_t value_type, void *value, size_t *value_size);

/* Visits every group in key order (bytes compared unsigned, a prefix first): fn(group_key,
 * key_size, version, num_values, ctx); key is borrowed for the call. A non-zero return from fn
 * stops the walk (S_FALSE). S_OK after the last group; PSDB_E_INVALIDARG (f or fn NULL);
 * PSDB_E_CACHE_CORRUPT (malformed group row); PSDB_E_IO; PSDB_E_OUTOFMEMORY. Thread-safe; fn may
 * call lookups on f. */
PSDB_API psdb_hr psdb_file_foreach_group(psdb_file *f,
                                         int (*fn)(const void *key, size_t key_size,
                                                   uint64_t version, uint32_t num_values,
                                                   void *ctx),
                                         void *ctx);

/* Deep check: SQLite integrity_check, every blob's SHA-256, blob ids 1..num_blobs, every value's
 * blob and type, no unreferenced blob, every group member's group and value key, member indexes
 * 0..n-1, header counts, and the content digest recomputed. S_OK ("ok" in msg) or
 * PSDB_E_CACHE_CORRUPT with a one-line reason. PSDB_E_INVALIDARG (f NULL), PSDB_E_IO,
 * PSDB_E_OUTOFMEMORY. The reason of any failure is recorded in psdb_error_last (psdb/status.h);
 * msg (may be NULL; cut to msg_size) is a copy of that line, kept for callers written before it.
 * Reads the whole file, in time linear in its size (a work bound stops crafted content with
 * PSDB_E_CACHE_CORRUPT), on the calling thread and one more it starts and joins. Thread-safe. */
PSDB_API psdb_hr psdb_file_verify(psdb_file *f, char *msg, size_t msg_size);

/* What psdb_file_check proves (one per call). */
#define PSDB_FILE_CHECK_CONTENT 0x1u /* the tables are the content the header's digest names */
#define PSDB_FILE_CHECK_SHA256 0x2u  /* the file's bytes are the ones a SHA-256 names */

/* Proves that what f serves is what a trusted digest names, before any of it is handed on (a
 * runtime or a driver layer checks an installed PSDB so, at each open).
 * PSDB_FILE_CHECK_CONTENT recomputes the content digest (schema/PSDB.md) from the tables: every
 * blob's digest (read from the blobs table's index, no blob page), every value's key, type and
 * blob, and every group, and compares it with the header's and, when expected is non-NULL, with
 * expected (the content digest recorded at install). From then on psdb_file_find_value hashes a
 * blob's bytes against the digest this proof covered (not the row's own column) before handing
 * them out, so every byte f serves is one the digest covers; the cost is a walk of the tables'
 * rows, not of the file's bytes. PSDB_FILE_CHECK_SHA256 hashes the whole file, as
 * opened (f reads the file psdb_file_open checked, whatever its path names now), and compares with
 * expected (required: the SHA-256 a signed statement names). Statuses: PSDB_S_OK;
 * PSDB_E_CACHE_CORRUPT when a digest differs, a row is malformed or the file changed size
 * (psdb_error_last says which and both digests); PSDB_E_INVALIDARG for NULL f, flags other than
 * exactly one of the two, or SHA256 without expected; PSDB_E_IO; PSDB_E_OUTOFMEMORY. Linear in the
 * rows (CONTENT) or the bytes (SHA256), bounded for crafted content like psdb_file_verify.
 * Thread-safe. */
PSDB_API psdb_hr psdb_file_check(psdb_file *f, uint32_t flags, const uint8_t expected[32]);

/* psdb_file_open without an adapter, then psdb_file_verify: what a server or tool runs before
 * trusting a PSDB it was handed. Statuses those of psdb_file_open (adapter NULL) and of
 * psdb_file_verify; psdb_error_last says why, whichever step failed, and msg (may be NULL; cut to
 * msg_size) gets a copy of that line, or "ok". On success *out is the caller's (psdb_file_release),
 * else NULL. Reads the whole file. Thread-safe. */
PSDB_API psdb_hr psdb_file_open_verified(const char *path, char *msg, size_t msg_size,
                                         psdb_file **out);

/* ---- Writing a PSDB ----------------------------------------------------------------------------
 */

/* Starts a new PSDB at `path` (written to path + ".tmp", renamed by psdb_writer_finish, so a crash
 * never leaves a half-written PSDB under `path`; an existing path.tmp is replaced). Puts are staged
 * in a SQLite temporary file (SQLITE_TMPDIR / TMPDIR), not in memory. identity and target are
 * copied. PSDB_E_INVALIDARG: NULL argument, identity without a name (or empty), engine_version
 * non-zero without engine_name, family NULL / empty / >= PSDB_ADAPTER_FAMILY_MAX bytes, reserved
 * ABI 0 or UINT64_MAX. PSDB_E_IO, PSDB_E_ACCESS, PSDB_E_OUTOFMEMORY.
 * A psdb_writer is used by one thread at a time. After a failure other than the argument and
 * duplicate statuses below, every later call returns that failure (only release remains). */
PSDB_API psdb_hr psdb_writer_create(const char *path, const psdb_app_identity *identity,
                                    const psdb_target *target, psdb_writer **out);

/* Adds one value (bytes copied). The same (key, type) with identical bytes again -> S_FALSE; with
 * other bytes -> PSDB_E_CACHE_HASH_COLLISION. Identical blobs under different keys or types are
 * stored once. PSDB_E_INVALIDARG: NULL w / key / value, key_size or value_size 0 or above 10^9
 * (SQLite's length limit), value_type >= PSDB_VALUE_TYPE_COUNT, writer already finished.
 * PSDB_E_DISK_FULL, PSDB_E_IO, PSDB_E_OUTOFMEMORY. */
PSDB_API psdb_hr psdb_writer_put_value(psdb_writer *w, const void *key, size_t key_size,
                                       uint32_t value_type, const void *value, size_t value_size);

/* One value key of a group. */
typedef struct psdb_value_ref {
    const void *key;
    size_t key_size;
} psdb_value_ref;

/* Adds a group (one compiled object): group key + version -> value keys, kept in the given order
 * (num_values may be 0). Each value key must have been put before (any type), else
 * PSDB_E_NOT_FOUND. A group key may appear once (ASD stores one version per group key): the same
 * key again, whatever the version -> PSDB_E_ALREADY_EXISTS. PSDB_E_INVALIDARG: NULL w / group_key,
 * key_size 0, values NULL with num_values > 0, a value key NULL or empty, writer finished.
 * PSDB_E_DISK_FULL, PSDB_E_IO, PSDB_E_OUTOFMEMORY. Nothing is added on failure. */
PSDB_API psdb_hr psdb_writer_put_group(psdb_writer *w, const void *group_key, size_t key_size,
                                       uint64_t version, uint32_t num_values,
                                       const psdb_value_ref *values);

/* Writes the file deterministically (the same content, put in any order, gives the same bytes with
 * the same SQLite version; the content digest is the same across versions), fsyncs it, renames it
 * to path and fsyncs the directory. The writer stays valid only for psdb_writer_release().
 * PSDB_E_INVALIDARG (NULL, already finished), PSDB_E_DISK_FULL, PSDB_E_IO, PSDB_E_ACCESS,
 * PSDB_E_OUTOFMEMORY. A failure before the rename leaves path as it was; only the directory sync
 * comes after it (PSDB_E_IO then, with the complete new file in place). */
PSDB_API psdb_hr psdb_writer_finish(psdb_writer *w);

/* Discards an unfinished writer (its temporary file is removed). NULL is a no-op. */
PSDB_API void psdb_writer_release(psdb_writer *w);

/* ---- File kinds ------------------------------------------------------------------------------ */
/* What a database file is, by the application_id in its SQLite header (schema/PSDB.md). */
#define PSDB_FILE_KIND_OTHER 0u /* not SQLite, or SQLite of another application */
#define PSDB_FILE_KIND_PSDB 1u  /* application_id 'PSDB' */
#define PSDB_FILE_KIND_SODB 2u  /* application_id 'PSOD' */

/* Tells the kind of the file at path (PSDB_FILE_KIND_*) from its first 100 bytes, without opening
 * it as a database: cheap, and never changes the file. Only the header is read, so a PSDB or SODB
 * kind says what the file claims to be; psdb_file_open / psdb_sodb_open still validate it.
 *   PSDB_S_OK            *out set; a file shorter than a SQLite header or without its magic is
 *                        PSDB_FILE_KIND_OTHER;
 *   PSDB_E_INVALIDARG    path or out NULL;
 *   PSDB_E_NOT_FOUND     no file at path;
 *   PSDB_E_ACCESS        permission denied;
 *   PSDB_E_IO            any other open or read failure (e.g. path is a directory).
 * On failure *out (when not NULL) is PSDB_FILE_KIND_OTHER and psdb_error_last() names the path and
 * the cause. Thread-safe (no shared state). */
PSDB_API psdb_hr psdb_file_kind(const char *path, uint32_t *out);

#ifdef __cplusplus
}
#endif
#endif
