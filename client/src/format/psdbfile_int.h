/* psdbfile_int.h - what the PSDB reader's files share (format/psdb_*.c): the psdb_file handle, its
 * read connections, the key index and the page-cache VFS types, and the helpers they call. */
/*
 * DESIGN
 * A PSDB is written once and never modified, so readers open it with SQLite's immutable=1 URI
 * parameter: no locks, no journal lookups, no change detection. Lookups come from many device
 * threads at once; one SQLite connection cannot run two statements concurrently, so the file keeps
 * a pool of read connections, each with its own prepared statements and SHA-256 context. A lookup
 * pops one from a free list under a mutex held for a few instructions, runs, and pushes it back;
 * the pool grows to the peak number of concurrent lookups. A runtime asks for the size, then the
 * object code, then the metadata of one key. The first lookup starts a thread that copies
 * value_entries into an in-memory hash table (key -> blob id and size per type, one cache line per
 * key); once it is published a size query is a hash probe and a data fetch seeks one blob row.
 * Until then, or when the table cannot be indexed, the first query reads every type of the key in
 * one index range scan and the connection keeps it, so the fetches that follow seek blob rows only
 * (blobs are numbered so that one key's blobs are neighbours). Mapped I/O is off on purpose: a
 * file truncated under a reader must give a short read (PSDB_E_CACHE_CORRUPT), not SIGBUS. So that
 * a blob seek costs one pread (its leaf) rather than one per B-tree level, the connections read
 * through a VFS of the file's own that keeps every interior page it has read, shared by all.
 * A data fetch does not go through SQLite at all when it can (psdb_btree.c): it walks the blobs
 * table's B-tree over those shared interior pages and preads the leaf into the connection's page
 * buffer, where the key's next blob (its neighbour) is usually found again, and remembers the
 * leaf each blob was hashed on so that a repeat fetch preads it without a walk; what that walk
 * does not plainly understand (overflow pages, anything malformed) falls back to SQLite.
 *
 * Every data fetch checks the blob's bytes against its stored SHA-256 the first time that blob is
 * fetched through this psdb_file; a per-blob flag then skips the hash (the file is immutable, and a
 * runtime fetches a given object's code once or a few times). psdb_file_verify hashes everything.
 *
 * The writer stages puts in a private temporary database (ATTACH ''), then at finish copies the
 * staged rows into the final tables in sorted order inside one transaction. The same content thus
 * gives the same sequence of SQLite operations, hence the same bytes, whatever the order of puts.
 */
#ifndef PSDB_PSDBFILE_INT_H
#define PSDB_PSDBFILE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "format/psdbfile_internal.h"

#define SQLITE_HEADER_SIZE 100
/* SQLITE_LIMIT_SQL_LENGTH of a reading connection: bounds each statement of a file's schema. */
#define SCHEMA_SQL_MAX 4096
/* SQLite's default SQLITE_MAX_LENGTH: no blob or key may be longer. */
#define MAX_ITEM_SIZE 1000000000u

typedef struct content_stats {
    uint64_t num_values, num_groups, num_blobs, blob_bytes;
    uint8_t digest[32];
} content_stats;

/* ---- Interior page cache (psdb_vfs.c) ----------------------------------------------------------
 */

#define PAGE_CACHE_PAGE_SIZE 4096u   /* schema/psdb.sql fixes the page size */
#define PAGE_CACHE_MAX_PAGES_LOG2 28 /* larger files go without the cache */
/* sqlite3_file_control(db, "main", PSDB__FCNTL_SCAN, &on) on a connection of a PSDB: on (1) while
 * the connection reads the whole file (psdb_file_verify), its reads go through a few large blocks
 * (psdb_vfs.c, SCAN_BLOCK); off (0) frees them. Not one of SQLite's SQLITE_FCNTL_ codes. */
#define PSDB__FCNTL_SCAN 0x50534442

typedef struct page_cache {
    sqlite3_vfs vfs; /* registered under name; pAppData points here */
    sqlite3_vfs *base;
    int fd; /* the checked file every connection reads (owned) */
    char name[48];
    size_t num_pages;
    uint8_t *_Atomic *pages; /* [page number - 1]: a copy of an interior page, or NULL */
    _Atomic size_t bytes;
    _Atomic uint64_t reads; /* preads of the file by its connections (psdb__file_reads) */
    int registered;
} page_cache;

/* ---- The key index (psdb_index.c) --------------------------------------------------------------
 */

/* A size query through SQLite costs a statement step and a B-tree seek on blob keys (about a
 * microsecond), and the value_entries pages compete with blob pages in the connection caches. A
 * thread started by the first lookup therefore copies value_entries into a hash table in one
 * sequential scan and publishes it; lookups use SQL until then, and for good when the scan fails
 * (a damaged table, an implausible row, no memory): the SQL path reports each lookup's own error.
 */
#define INDEX_NONE 0     /* no build started */
#define INDEX_BUILDING 1 /* the thread runs */
#define INDEX_READY 2    /* f->index is published */
#define INDEX_FAILED 3   /* lookups stay on the SQL path */

/* index_entry.blob_id of a row whose blob_id or size is not a valid number. */
#define INDEX_MALFORMED UINT32_MAX
/* How often (in rows) the build checks whether psdb_file_release asks it to stop. */
#define INDEX_CANCEL_EVERY 4096u

/* Keys up to this size are held in their entry, longer ones in key_index.keys. */
#define INDEX_INLINE_KEY 28

/* Every type of one key in one 64-byte cache line (a probe touches its slot and this line only);
 * blob ids and sizes fit 32 bits (the build gives up otherwise). */
typedef struct index_entry {
    uint32_t key_size;
    uint32_t blob_id[PSDB_VALUE_TYPE_COUNT]; /* BLOB_ABSENT, INDEX_MALFORMED or an id */
    uint32_t size[PSDB_VALUE_TYPE_COUNT];
    uint8_t key[INDEX_INLINE_KEY]; /* the key, or a uint64_t offset into key_index.keys */
} index_entry;
_Static_assert(sizeof(index_entry) == 64, "an index entry is one cache line");

typedef struct key_index {
    uint64_t seed; /* per file: a crafted file cannot choose colliding keys in advance */
    /* Open addressing with linear probing, at most 3/4 full: a probe usually reads one cache line
     * (the next ones are adjacent). key_size 0 marks a free entry (keys are never empty). */
    index_entry *table;
    size_t cap;
    index_entry *entries; /* while building: one per key, in key order */
    size_t num_entries, cap_entries;
    uint8_t *keys;
    size_t keys_len, keys_cap;
} key_index;

/* ---- The handle (psdb_reader.c) and its read connections (psdb_conn.c) -------------------------
 */

/* Keys longer than this are looked up without the per-connection cache. */
#define CACHED_KEY_MAX 256
/* cached_key.blob_id values besides a positive id. */
#define BLOB_ABSENT 0
#define BLOB_MALFORMED (-1)

#define VERIFIED_ROW 1u
#define VERIFIED_CHECKED 2u
/* The same, for bytes the direct read (psdb_btree.c) found and hashed, kept in leaf_of with the
 * leaf they were found on: each path skips the hash only for bytes it found itself, so that a
 * crafted tree where the two would find different rows (duplicate row ids) never hands out bytes
 * nobody hashed. */
#define VERIFIED_DIRECT_ROW 3u
#define VERIFIED_DIRECT_CHECKED 4u

/* What value_entries says about the last key looked up on a connection. */
typedef struct cached_key {
    size_t key_size; /* 0: nothing cached */
    uint8_t key[CACHED_KEY_MAX];
    sqlite3_int64 blob_id[PSDB_VALUE_TYPE_COUNT];
    uint64_t size[PSDB_VALUE_TYPE_COUNT];
} cached_key;

/* The page cache of a pooled read connection. Small: interior pages come from the file's page
 * cache (pc_read), and leaf pages are seldom read twice; a large LRU only costs memory and cache
 * misses (measured). psdb_file_verify enlarges it while it runs and restores this. */
#define PSDB__CONN_CACHE_SIZE_SQL "PRAGMA cache_size = -256"

/* One read connection and what a lookup needs with it; used by one thread at a time. */
typedef struct conn {
    sqlite3 *db;
    sqlite3_stmt *key_st, *blob_st;
    sqlite3_blob *blob; /* open on blobs.data once a verified blob was read; NULL before */
    EVP_MD_CTX *md;
    /* The last page the direct blob read (psdb_btree.c) read from the file, so that the fetches of
     * one key's blobs, neighbours on one leaf, cost one pread. page_no 0: none. */
    uint8_t *page;
    uint32_t page_no;
    uint64_t direct_reads; /* fetches the direct read served (psdb__file_direct_reads) */
    cached_key cache;
    struct conn *next;
} conn;

struct psdb_file {
    char *uri;
    EVP_MD *sha256;
    pthread_mutex_t lock;
    conn *idle; /* free list, under lock */
    char *exe_filename, *app_name, *engine_name, *family;
    psdb_file_info info;
    /* verified[id]: blob id has matched its digest once (ids 1..num_blobs): VERIFIED_ROW against
     * its row's sha256, VERIFIED_CHECKED against checked[id]. NULL: no cache. */
    _Atomic unsigned char *verified;
    /* leaf_of[id]: page << 3 | VERIFIED_DIRECT_*: the leaf the direct read hashed blob id on, and
     * against which digest (0: none yet), so that a repeat fetch reads that page without walking
     * the tree or hashing; NULL: always walk and hash. Same slots as verified. */
    _Atomic uint32_t *leaf_of;
    /* Once psdb_file_check proved the content digest: the blob digests it proved, by blob id
     * (1..num_blobs), against which every fetch is then checked instead of the row's column (which
     * a crafted file could make disagree with what was proven). Immutable once published. */
    uint8_t (*_Atomic checked)[32];
    uint64_t num_verified_slots;
    page_cache *pages;   /* the VFS of the file's connections, reading the file open checked */
    uint32_t blobs_root; /* root page of the blobs table (direct reads); 0: SQLite reads only */
    uint64_t file_size;  /* bytes, as checked at open */
    /* The in-memory copy of value_entries, built by a thread started at the first lookup. */
    _Atomic int index_state;         /* INDEX_* */
    _Atomic int index_cancel;        /* set by psdb_file_release to stop a build early */
    struct key_index *_Atomic index; /* non-NULL once published; immutable from then on */
    pthread_t index_thread;          /* valid when index_started */
    int index_started;               /* under lock */
    pthread_cond_t index_done;       /* broadcast under lock when the build ends */
};

/* ---- Helpers shared by the reader's files ------------------------------------------------------
 */

void psdb__pf_set_msg(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
uint32_t psdb__pf_be32(const uint8_t *p);
int psdb__pf_bind_bytes(sqlite3_stmt *st, int idx, const void *p, size_t n);
/* What psdb__pf_compute_content is given of the blobs instead of reading them. */
typedef struct content_blobs {
    const uint8_t (*sha)[32]; /* [id]: the digest of blob id, ids 1..num */
    uint64_t num;
    /* [id]: blob id's length in bytes, 0 for no such blob; NULL: nothing is checked. Else each
     * value must have a non-empty key, a type of 0..3 and an integer size equal to its blob's, and
     * each group a non-empty key and members of indexes 0..n-1, every member under a group. */
    const uint32_t *len;
    uint8_t *ref; /* [id] set to 1 by each value naming blob id; NULL: not recorded */
} content_blobs;

/* The content digest of db's tables (schema/PSDB.md). blobs NULL: each value's blob digest is its
 * blob row's sha256 column, and the blob counts are computed; else blobs->sha[id] is the digest of
 * blob id, the blobs table is not read and its counts are 0. */
psdb_hr psdb__pf_compute_content(sqlite3 *db, const psdb_app_identity *id, const psdb_target *t,
                                 const content_blobs *blobs, content_stats *out, char *msg,
                                 size_t msg_size);
void psdb__pf_page_cache_free(page_cache *pc);
/* Keeps a copy of page idx (0-based) read whole from the file when it is an interior B-tree page
 * and the cache has room. */
void psdb__pf_page_keep(page_cache *pc, uint64_t idx, const uint8_t *buf);
/* Fetches blob id (size bytes) without SQLite: a walk of the blobs table's B-tree over the shared
 * interior pages and one pread of its leaf (psdb_btree.c). The bytes are checked against their
 * digest unless verified[id] says so already. 1: value filled; 0: not served (a blob spilling
 * onto overflow pages, a page or row it does not understand, a short read, a digest mismatch),
 * the caller then reads through SQLite, which reports what is wrong. */
int psdb__pf_blob_fetch(psdb_file *f, conn *c, int64_t id, void *value, size_t size);
page_cache *psdb__pf_page_cache_new(int fd, uint64_t file_size);
void psdb__pf_index_free(key_index *x);
const index_entry *psdb__pf_index_find(const key_index *x, const void *key, size_t key_size);
void psdb__pf_index_start(psdb_file *f);
void psdb__pf_conn_close(conn *c);
psdb_hr psdb__pf_db_open(psdb_file *f, sqlite3 **db, char *msg, size_t msg_size);
/* The same for any file by its URI (psdb__pf_make_uri) through VFS vfs (NULL: the default). */
psdb_hr psdb__pf_db_open_uri(const char *uri, const char *vfs, sqlite3 **db, char *msg,
                             size_t msg_size);
/* "file:<path, percent-encoded>?immutable=1": a PSDB never changes while it is open. NULL on out
 * of memory. */
char *psdb__pf_make_uri(const char *path);
psdb_hr psdb__pf_check_schema(sqlite3 *db, char *msg, size_t msg_size);
psdb_hr psdb__pf_conn_open(psdb_file *f, int check, conn **out, char *msg, size_t msg_size);
psdb_hr psdb__pf_conn_get(psdb_file *f, conn **out);
void psdb__pf_conn_put(psdb_file *f, conn *c);
const char *psdb__pf_msg_name(const char *s, char out[64]);

#endif
