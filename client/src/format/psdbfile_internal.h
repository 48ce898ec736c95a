/* psdbfile_internal.h - PSDB format constants and helpers shared with the tool and the tests. */
#ifndef PSDB_PSDBFILE_INTERNAL_H
#define PSDB_PSDBFILE_INTERNAL_H

#include <stddef.h>

#include "psdb/file.h"

#include "common/migrate.h"

/* PRAGMA application_id of a PSDB ('PSDB') and of an SODB ('PSOD'), schema/PSDB.md. */
#define PSDB__PSDB_APPLICATION_ID 0x50534442u
#define PSDB__SODB_APPLICATION_ID 0x50534F44u
/* PRAGMA user_version of the only PSDB schema this library reads and writes. */
#define PSDB__PSDB_SCHEMA_VERSION 1u

/* schema/psdb.sql itself, embedded by psdb_embed_sql: the writer executes it verbatim on an empty
 * file and the reader compares every file's schema with the one it creates. */
extern const psdb__sql_set psdb__psdb_schema;
#define psdb__psdb_schema_sql (psdb__psdb_schema.files[0].sql)

/* psdb_file_open, plus a one-line reason for any failure in msg (may be NULL). */
psdb_hr psdb__file_open_msg(const char *path, const psdb_adapter_desc *adapter, psdb_file **out,
                            char *msg, size_t msg_size);

/* Reads the application_id of a SQLite file from its 100-byte header without SQLite. 0 on
 * success; -1 when the file cannot be read or is not a SQLite file. */
int psdb__sqlite_application_id(const char *path, uint32_t *out);

/* The in-memory key index of an open PSDB (built by a thread that the first lookup starts).
 * psdb__file_index_wait starts the build if needed, waits for its end and returns 1 when the index
 * is in use, 0 when lookups stay on SQL. psdb__file_index_disable keeps lookups on SQL if no build
 * started yet (tests compare both paths). psdb__file_index_bytes: heap bytes of the index, 0 when
 * none. All three are thread-safe. */
int psdb__file_index_wait(psdb_file *f);
void psdb__file_index_disable(psdb_file *f);
size_t psdb__file_index_bytes(psdb_file *f);
/* Heap bytes of the interior page cache shared by the file's connections (0 without one);
 * thread-safe. */
size_t psdb__file_page_cache_bytes(psdb_file *f);
/* Blob fetches served by the direct B-tree read (psdb_btree.c) rather than SQLite, summed over the
 * idle read connections (all of them when no lookup runs); thread-safe. */
uint64_t psdb__file_direct_reads(psdb_file *f);
/* System calls that read the file through SQLite's connections (a page, a read-ahead window or a
 * scan block each), since it was opened; thread-safe. */
uint64_t psdb__file_reads(psdb_file *f);

#endif
