/* index_int.h - what the two files of the psdbd index share: this thread's connection, its
 * statement cache and the reading of SQLite failures. index.c owns them; index_queries.c uses
 * them. */
#ifndef PSDBD_INDEX_INT_H
#define PSDBD_INDEX_INT_H

#include "index.h"

/* This thread's connection as it is (no check, no open): for error messages; may be NULL. */
sqlite3 *psdbd__index_this_db(psdbd_index *ix);

/* A cached prepared statement of this thread's connection (opened on first use), reset and
 * unbound; NULL when the index is lost or the statement cannot be prepared (logged). `sql` must
 * be a string literal: the cache is keyed by its address. */
sqlite3_stmt *psdbd__index_prep(psdbd_index *ix, const char *sql);

/* A SQLite failure (extended code) as the index's status, logged; marks the index damaged when
 * the file is corrupt. */
psdbd_rc psdbd__index_rc_of(psdbd_index *ix, int rc);

#endif
