/* sodb.h - internal SODB helpers beside the public psdb/sodb.h. */
#ifndef PSDB_FORMAT_SODB_H
#define PSDB_FORMAT_SODB_H

#include "psdb/psdb.h"

/* psdb_sodb_writer_open_ex with PSDB_SODB_WRITER_BULK, and psdb_sodb_writer_commit, without the
 * public boundary's error bookkeeping (the unit tests' names for them). */
psdb_hr psdb__sodb_writer_open_bulk(const char *path, const psdb_app_identity *identity,
                                    psdb_sodb_writer **out);
psdb_hr psdb__sodb_writer_commit(psdb_sodb_writer *w);

/* Counts entries (S_OK) or PSDB_E_CACHE_CORRUPT. */
psdb_hr psdb__sodb_count(psdb_sodb *s, uint64_t *out);

#endif
