/* delta_int.h - what the files of a delta update share: delta.c runs the update, delta_sources.c
 * finds the values the installed PSDBs hold, delta_plan.c lists the runs of the blob to fetch,
 * delta_fetch.c fetches them through the transport, delta_rebuild.c writes the file in order.
 * The value map itself is read by format/valuemap_read.h.
 *
 * DESIGN
 * The map comes first (nothing local is read for a server without one); its value table gives
 * the digest of every value of the new file, sorted, and each source (installed PSDBs of the same
 * family, the application's own first) is walked once and matched against it: a value is held by
 * the first source with a row of the same digest and size, and a source stops being walked once
 * nothing is missing. The rebuild is then one ordered pass over the map's recipe that writes
 * <dest>.delta sequentially through a 1 MiB buffer and hashes each buffer as it goes out: no page
 * is written twice, no byte is read back. A first pass over the recipe (the plan) checks it whole
 * and lists the runs of bytes to fetch (missing values, merged across gaps smaller than
 * COALESCE_GAP); the second (psdb__delta_rebuild_to) takes every byte from the skeleton stream,
 * the key table or a source, except those of the runs, which the fetch asks for a few hundred at
 * a time in one multi-range request and puts straight into the buffer as each part arrives, the
 * pass having written what lies before it. A cancel keeps <dest>.delta and the map: the next
 * attempt re-hashes the output up to its last whole recipe entry and goes on from there. Memory:
 * 36 bytes a value of the new file while the sources are walked, then 12; 24 bytes a held value
 * and 16 a range of it; 16 per run; the key table when it is at most KEYS_IN_MEMORY (loaded only
 * after the digests are dropped; else read through a window or key by key from the map file; the
 * value table's digests are read from it forward, in key order); and fixed buffers. */
#ifndef PSDB_DELTA_INT_H
#define PSDB_DELTA_INT_H

#include <stdio.h>

#include "delivery/delta.h"
#include "format/valuemap_read.h"
#include "format/valuemap_walk.h"
#include "common/hash.h"

/* Bytes between two missing values that are fetched rather than paying another request: a cell
 * header and a few keys, not a held value of typical size. */
#define COALESCE_GAP 512u
#define OUT_BUF (1u << 20)
#define KEYS_IN_MEMORY (24u << 20) /* a 1 GiB PSDB of small values has about 18 MiB */
#define OLD_WINDOW (1u << 20)
/* Bytes of Range header per request: a few hundred runs, within every server's header limits. */
#define MULTI_RANGE_HEADER 4000u
#define MISSING UINT32_MAX

/* Why the update is not used, for psdb_install_result's delta_skipped (out: the outcome). */
#define WHY(...) snprintf(out->why_not, sizeof(out->why_not), __VA_ARGS__)

/* ---- the output: sequential, buffered, hashed on the way out (delta_rebuild.c) ----------------
 */

typedef struct out_file {
    int fd;
    uint8_t *buf;
    size_t len;
    uint64_t pos; /* file offset of buf[0] + len: bytes produced so far */
    psdb__sha256_ctx *sha;
    int err; /* errno of a failed write; sticky */
} out_file;

/* Writes and hashes what the buffer holds. 0, or -1 with o->err. */
int psdb__delta_out_flush(out_file *o);
/* Appends n bytes. 0, or -1 with o->err. */
int psdb__delta_out_put(out_file *o, const uint8_t *p, size_t n);
/* Takes up <dest>.delta of an interrupted attempt: its first `keep` bytes hashed, the rest cut. */
psdb_hr psdb__delta_out_resume(out_file *of, uint64_t keep);

/* ---- the values held locally (delta_sources.c) ------------------------------------------------
 */

/* A value held by a source: where its bytes lie there. */
typedef struct old_value {
    uint64_t size;
    uint64_t first; /* index into ranges */
    uint32_t n;
    uint32_t src; /* index into the sources */
} old_value;

/* What the walks of the sources found: held[i] is the old_value of value i, or MISSING. */
typedef struct local_set {
    const psdb__vmap_digest *need; /* the new file's values, sorted by digest */
    size_t nneed;
    const uint64_t *sizes;
    uint32_t *held;
    uint64_t missing; /* values with held[i] == MISSING */
    old_value *ov;
    size_t n, cap;
    psdb__byte_range *r;
    size_t nr, rcap;
    uint32_t src; /* the source being walked */
    int oom;
} local_set;

/* Sorts need (nv values of the new file) by digest and starts s with every value missing. */
void psdb__delta_held_begin(local_set *s, psdb__vmap_digest *need, uint64_t nv,
                            const uint64_t *sizes, uint32_t *held);
/* A digest of a source: whether the new file has a value of it that no source holds yet (a
 * psdb__digest_fn over a local_set). */
int psdb__delta_lacks_digest(const uint8_t sha256[32], void *ctx);
/* Walks one source into s; a source that cannot be read gives nothing, not even what its walk
 * found before it failed. The walk's status (PSDB_E_OUTOFMEMORY when s could not grow). */
psdb_hr psdb__delta_walk_source(local_set *s, const char *path, uint32_t src, uint64_t nv);

/* ---- the plan (delta_plan.c) ------------------------------------------------------------------
 */

typedef struct run {
    uint64_t start, end;
} run;

/* What the first pass over the recipe gives: the runs of bytes to fetch (the parts of the values
 * not held, merged across gaps of at most COALESCE_GAP) and the last entry boundary at or below
 * `have`, where an interrupted attempt's output can be taken up. */
typedef struct run_list {
    run *v;
    size_t n, cap;
    uint64_t bytes, resume_at;
} run_list;

/* Pass 1: the whole recipe of the map in fd checked against the value table (sizes) and the file
 * size, and the runs of the values not held listed. PSDB_S_OK, PSDB_E_INTEGRITY (out->why_not
 * says why), PSDB_E_OUTOFMEMORY. */
psdb_hr psdb__delta_plan(int fd, const psdb__vmap_layout *l, const uint64_t *sizes,
                         const uint32_t *held, uint64_t file_size, uint64_t have, run_list *rl,
                         psdb__delta_outcome *out);
/* Drops what lies before rl->resume_at from the runs: a run that straddles it (resume_at is an
 * entry boundary, and runs are made of whole entries) starts there. */
void psdb__delta_plan_resume(run_list *rl);

/* ---- the ordered pass (delta_rebuild.c) -------------------------------------------------------
 */

/* A source read through a window: held values come in nearly the source's order, so one read
 * serves many of them. The window is allocated on first use: the installed PSDB of the same
 * application gets OLD_WINDOW, any other source a quarter of it. */
typedef struct old_file {
    int fd;
    uint8_t *buf;
    size_t cap;
    uint64_t start, len;
} old_file;

/* The state of the second pass: where the recipe and the output are, and where fetched bytes
 * already stand in the output (entries before fetched_to were the blob's bytes). */
typedef struct rebuild {
    psdb__vmap_stream *rec, *skel;
    psdb__vmap_recipe st;
    uint64_t pos, entries_left, fetched_to;
    const uint32_t *held;
    const local_set *ls;
    old_file *olds; /* one per source */
    psdb__vmap_keys *kt;
    out_file *of;
    uint64_t cursor[2], cursor_value;
    const char *const *sources;
    psdb__delta_outcome *out;
} rebuild;

/* Produces the file from the recipe up to target, an entry boundary: local bytes written,
 * entries that a fetched run covered skipped. PSDB_E_INTEGRITY (out->why_not says why), a write's
 * or a source's status. */
psdb_hr psdb__delta_rebuild_to(rebuild *rb, uint64_t target);

/* ---- fetching (delta_fetch.c) -----------------------------------------------------------------
 */

/* What the progress callback is told of the update: the file being rebuilt and its size. */
typedef struct fetcher {
    const char *what;
    uint64_t total;
} fetcher;

/* GETs the map at url into fd from offset 0, at most max bytes; *got: its size. The transport's
 * statuses (psdb__http_hr of an answer other than 200: no status is retried). */
psdb_hr psdb__delta_fetch_map(psdb_client *c, const fetcher *f, const char *url, uint64_t max,
                              int fd, uint64_t *got);
/* Fetches every run of the blob at url in file order while the pass writes the bytes between
 * them; *got adds the bytes that came. */
psdb_hr psdb__delta_fetch_runs(psdb_client *c, const fetcher *f, const char *url, rebuild *rb,
                               const run *runs, size_t nruns, uint64_t *got);

#endif
