/* valuemap_read.h - reading a version 2 value map (schema/VALUEMAP.md) that a launcher fetched
 * (valuemap_read.c): its header checked against the PSDB it must describe, its zlib streams read
 * as bytes and varints, its key table, its value table and its recipe's entries, each checked as
 * it is read. Nothing here trusts the map: every count is bounded by what the map or the file
 * could hold before a sum is formed or memory is allocated, every read stays inside its section,
 * and a refusal says why in one line (why, at most why_size bytes). */
#ifndef PSDB_FORMAT_VALUEMAP_READ_H
#define PSDB_FORMAT_VALUEMAP_READ_H

#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "psdb/status.h"

#include "format/valuemap.h"

#define PSDB__VMAP_ZBUF (1u << 16)
#define PSDB__VMAP_KEY_WINDOW 2048u /* keys read at once through the window: 64 KiB */

/* Where the sections of a version 2 map lie, from its header. */
typedef struct psdb__vmap_layout {
    uint64_t size, nv, nkeys, nentries, skel, vstored, rstored, sstored;
    uint64_t keys_at, values_at, recipe_at, skel_at;
} psdb__vmap_layout;

/* Reads and checks the header of the map in fd (map_size bytes) against the PSDB it must
 * describe (file_size bytes with this SHA-256): magic, version 2, reserved fields zero, and
 * sections that fill the map. Counts are bounded before any sum is formed (a value takes two
 * bytes of its table at least, and deflate inflates at most 1032-fold), so a map cannot make its
 * reader allocate more than its own size warrants; nv is below UINT32_MAX. 0, or -1 with why. */
int psdb__vmap_layout_read(int fd, uint64_t map_size, uint64_t file_size, const uint8_t sha256[32],
                           psdb__vmap_layout *l, char *why, size_t why_size);

/* One zlib stream of the map file, [at, at + size), read as bytes and varints. Sticky `bad`: after
 * any error (a read, a stream that does not inflate, a read past its end) every read fails. */
typedef struct psdb__vmap_stream {
    int fd;
    uint64_t at, end;
    z_stream z;
    int open, ended, bad;
    uint8_t in[PSDB__VMAP_ZBUF], out[PSDB__VMAP_ZBUF];
    size_t pos, len; /* unread inflated bytes: out[pos..len) */
} psdb__vmap_stream;

/* 0, or -1 (out of memory). psdb__vmap_stream_close frees what it holds (also after a failed
 * open). */
int psdb__vmap_stream_open(psdb__vmap_stream *r, int fd, uint64_t at, uint64_t size);
void psdb__vmap_stream_close(psdb__vmap_stream *r);
/* A LEB128 varint (7 bits a byte, least significant first, at most 10 bytes); 0 once bad. */
uint64_t psdb__vmap_stream_varint(psdb__vmap_stream *r);
/* The next at most n (> 0) bytes: *p (borrowed until the next read) and their count *k, at least
 * one. 0, or -1 once bad. */
int psdb__vmap_stream_next(psdb__vmap_stream *r, uint64_t n, const uint8_t **p, size_t *k);
/* Whether the stream ended exactly at its stored size, every inflated byte read. */
int psdb__vmap_stream_done(psdb__vmap_stream *r);

/* The key table: 32-byte keys by id. */
typedef struct psdb__vmap_keys {
    int fd;
    uint64_t at, n;
    uint8_t *mem; /* the whole table, once psdb__vmap_keys_load put it in memory */
    uint8_t *win; /* else PSDB__VMAP_KEY_WINDOW keys from win_first, win_n of them read */
    uint64_t win_first, win_n;
} psdb__vmap_keys;

/* The key table of the map in fd laid out as l: its window allocated, nothing read yet. 0, or -1
 * (out of memory). psdb__vmap_keys_close frees it (also after a failed open). */
int psdb__vmap_keys_open(psdb__vmap_keys *k, int fd, const psdb__vmap_layout *l);
void psdb__vmap_keys_close(psdb__vmap_keys *k);
/* Key id into out: from memory, else through the window when reads go forward (the value table
 * names digests in nearly increasing order, new keys come in order), else one read. 0, or -1 (an
 * id out of range, a failed or short read). */
int psdb__vmap_key(psdb__vmap_keys *k, uint64_t id, uint8_t out[32]);
/* Reads the whole table into memory when it is at most max_bytes (a key each read otherwise,
 * for a table in no order a window follows). PSDB_S_OK (also when it stays on disk),
 * PSDB_E_OUTOFMEMORY, or PSDB_E_IO with why. */
psdb_hr psdb__vmap_keys_load(psdb__vmap_keys *k, uint64_t max_bytes, char *why, size_t why_size);
/* Drops the table from memory (the window stays). */
void psdb__vmap_keys_unload(psdb__vmap_keys *k);

/* A value of the map by its digest. */
typedef struct psdb__vmap_digest {
    uint8_t sha256[32];
    uint32_t value; /* its index in the map's value table */
} psdb__vmap_digest;

/* The value table: sizes[i] (nv of them) the size of value i, each at least 1 and at most
 * file_size; with digests (may be NULL) the digest of each value too, in no particular order. The
 * keys are read forward once through the window (ordered by id first), so no memory beyond it is
 * needed. PSDB_S_OK, PSDB_E_INTEGRITY or PSDB_E_IO with why, PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__vmap_values(int fd, const psdb__vmap_layout *l, psdb__vmap_keys *kt,
                          uint64_t file_size, uint64_t *sizes, psdb__vmap_digest *digests,
                          char *why, size_t why_size);

/* One entry of the recipe: a run of the skeleton, a key or a part of a value. */
typedef struct psdb__vmap_entry {
    unsigned tag;   /* PSDB__VMAP2_TAG_* */
    uint64_t len;   /* bytes of the file it produces */
    uint64_t arg;   /* skeleton: -, key: id, value: index */
    uint64_t in_at; /* value: the part's offset in the value */
} psdb__vmap_entry;

/* What reading the recipe in order keeps to check each entry against the map's counts. */
typedef struct psdb__vmap_recipe {
    uint64_t next_key, value, nkeys, nv;
} psdb__vmap_recipe;

/* The next entry of the recipe stream r, checked against st (a key numbered in order of first
 * use, a value index within the table, a length that fits 32 bits). 0, or -1 (malformed). */
int psdb__vmap_recipe_next(psdb__vmap_stream *r, psdb__vmap_recipe *st, psdb__vmap_entry *e);

#endif
