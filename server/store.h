/* store.h - the content-addressed blob store: blobs/<aa>/<sha256>, uploads staged in tmp/. */
#ifndef PSDBD_STORE_H
#define PSDBD_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct psdbd_store {
    char *dir;      /* the data directory */
    char *blob_dir; /* dir/blobs */
    char *tmp_dir;  /* dir/tmp */
} psdbd_store;

/* Creates the directories when missing and removes every leftover temporary upload (a crash or
 * kill mid-upload leaves them; none can be in use while no server runs). 0 or -1 with err. */
int psdbd_store_open(psdbd_store *s, const char *data_dir, int clean_tmp, char *err,
                     size_t err_size);
void psdbd_store_close(psdbd_store *s);

/* True when `hex` is exactly 64 lowercase hex digits. */
int psdbd_is_digest(const char *hex);

/* A new temporary file in tmp/: *fd open for writing, *path malloc'd. errno-style result. */
int psdbd_store_temp(psdbd_store *s, int *fd, char **path);

/* Moves a fully written, verified temporary file into blobs/<aa>/<sha256>: fsync the file, rename,
 * fsync the directory (and blobs/ when <aa> was created), so the blob is durable before any index
 * row names it. When the blob already exists the temporary file is removed instead; a file of
 * another size under its name (damaged) is replaced, and *replaced says so (also when the
 * directory's fsync then fails): what was derived from the old bytes (value maps) is the caller's
 * to drop, since the store depends on nothing above it. Returns 0 or an errno value. The fd is not
 * closed. */
int psdbd_store_commit(psdbd_store *s, int fd, const char *tmp_path, const char *sha256,
                       int *replaced);

/* Path of a blob (malloc'd). */
char *psdbd_store_path(const psdbd_store *s, const char *sha256);

/* Opens a blob read-only: 0 with *fd and *size, or an errno value (ENOENT when absent). */
int psdbd_store_open_blob(const psdbd_store *s, const char *sha256, int *fd, uint64_t *size);

/* Calls fn for every file under blobs/ whose name is a digest in its right <aa> directory
 * (mtime in seconds); `stray` for anything else found there. Stops when fn returns non-zero. */
int psdbd_store_walk(const psdbd_store *s,
                     int (*fn)(const char *sha256, uint64_t size, int64_t mtime, void *ctx),
                     void (*stray)(const char *path, void *ctx), void *ctx);

/* SHA-256 of a file (hex into out[65]); 0 or an errno value. */
int psdbd_sha256_file(const char *path, char out[65], uint64_t *size);

#endif
