/* psdb/valuemap.h - the value map of a PSDB (schema/VALUEMAP.md): where each value of the file
 * lies and what its other bytes are, which a server serves beside the blob so that
 * psdb_client_install (psdb/client.h) updates an installed PSDB by fetching only the values it
 * lacks. */
#ifndef PSDB_VALUEMAP_H
#define PSDB_VALUEMAP_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the value map of the PSDB at psdb_path to out_path (schema/VALUEMAP.md): every value's
 * SHA-256 and the byte ranges of the file that hold it, then the file's other bytes. A server
 * serves it beside the blob (GET /v1/blobs/<sha256>/valuemap) so that psdb_client_install can
 * update an installed PSDB by fetching only the values it lacks. Written to out_path + ".tmp",
 * created anew (O_EXCL; a stale .tmp of this user or a symbolic link there is removed first, never
 * written through), fsynced and renamed. The same file always gives the same bytes. Statuses:
 * PSDB_E_INVALIDARG (NULL), PSDB_E_ACCESS (psdb_path is not a regular file: a FIFO, a device or a
 * directory is refused, never waited on; or the .tmp name holds something else than a file of this
 * user or a link: refused and left alone; or a permission), PSDB_E_IO, PSDB_E_DISK_FULL,
 * PSDB_E_CACHE_CORRUPT (not a PSDB file of this layout), PSDB_E_OUTOFMEMORY; the last error names
 * the path. Thread-safe (no shared state). */
PSDB_API psdb_hr psdb_value_map_write(const char *psdb_path, const char *out_path);

/* Writes the value map of the PSDB at psdb_path in format `version` (schema/VALUEMAP.md) to
 * out_path, as psdb_value_map_write does. Version 1 is psdb_value_map_write's map (served at
 * GET /v1/blobs/<sha256>/valuemap for launchers that read only it); version 2 stores each of the
 * file's 32-byte keys once and lists the file in order, a fraction of version 1's size, and is
 * what psdb_client_install reads (GET /v1/blobs/<sha256>/valuemap/v2). The same file and version
 * always give the same bytes. Statuses: those of psdb_value_map_write, and PSDB_E_INVALIDARG for
 * a version other than 1 or 2. Thread-safe (no shared state). */
PSDB_API psdb_hr psdb_value_map_write_version(const char *psdb_path, uint32_t version,
                                              const char *out_path);

/* The header fields every version of a value map has (schema/VALUEMAP.md: bytes 0 to 55). */
typedef struct psdb_value_map_info {
    uint32_t version;        /* the map's format version (1 or 2 today) */
    uint64_t psdb_size;      /* the size in bytes of the PSDB it describes */
    uint8_t psdb_sha256[32]; /* the SHA-256 of the PSDB it describes (its blob's name) */
} psdb_value_map_info;

/* Reads the header of the value map at path into *out: which PSDB it describes, in which version
 * (a server checks a stored map against its blob so; the sections are not read). Statuses:
 * PSDB_S_OK; PSDB_E_INVALIDARG (NULL); PSDB_E_CACHE_CORRUPT (shorter than the header, not the
 * magic PSDBVMAP, or the reserved field non-zero); PSDB_E_ACCESS (path is not a regular file, or a
 * permission), PSDB_E_IO, PSDB_E_OUTOFMEMORY; psdb_error_last names the path and the cause, and
 * *out is zeroed on failure. Thread-safe (no shared state). */
PSDB_API psdb_hr psdb_value_map_read_info(const char *path, psdb_value_map_info *out);

#ifdef __cplusplus
}
#endif
#endif
