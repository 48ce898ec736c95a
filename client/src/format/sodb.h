/* sodb.h - internal SODB helpers: bulk writing for generators (psdb synth). */
#ifndef PSDB_SODB_H
#define PSDB_SODB_H

#include "psdb/psdb.h"

/* Opens a writer like psdb_sodb_writer_open, but for a generator that writes a whole file at once:
 * the database uses a rollback journal (no WAL) and every add joins one transaction that
 * psdb__sodb_writer_commit ends. Releasing the writer without committing discards the adds. */
psdb_hr psdb__sodb_writer_open_bulk(const char *path, const psdb_app_identity *identity,
                                    psdb_sodb_writer **out);
/* Commits the bulk transaction (synced to disk). PSDB_E_IO when SQLite fails; PSDB_E_INVALIDARG
 * on NULL or a writer not opened in bulk mode. */
psdb_hr psdb__sodb_writer_commit(psdb_sodb_writer *w);

/* Counts entries (S_OK) or PSDB_E_CACHE_CORRUPT. */
psdb_hr psdb__sodb_count(psdb_sodb *s, uint64_t *out);

#endif
