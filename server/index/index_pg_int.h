/* index_pg_int.h - what the two files of the PostgreSQL engine share: the connection pool, query
 * parameters and the reading of failures. index_pg.c owns them; index_pg_queries.c uses them. */
#ifndef PSDBD_INDEX_PG_INT_H
#define PSDBD_INDEX_PG_INT_H

#include <libpq-fe.h>

#include "index_int.h"

/* A pooled connection, borrowed for one operation (psdbd__pg_get / psdbd__pg_put). */
typedef struct psdbd__pgc {
    PGconn *conn; /* NULL once a statement on it went unanswered (psdbd__pg_exec closed it) */
    int slot;     /* in the pool; -1 for a thread's pinned connection (never returned by put) */
    /* When the next statement must have answered (CLOCK_MONOTONIC ms): > 0 that time (get sets
     * the operation's deadline, so that waiting for a slot, connecting and the first statement
     * share one statement timeout); 0: the statement timeout from the statement's start; < 0:
     * no limit (a statement that waits on purpose, the gc lock). */
    int64_t until_ms;
} psdbd__pgc;

/* Borrows a connection (connecting as needed): the thread's pinned one during a snapshot, else a
 * free pool slot. Waiting for a slot and connecting end at the operation's deadline (the
 * statement timeout from now). 0, or -1 with the failure's status in *rc (logged). */
int psdbd__pg_get(psdbd_index *ix, psdbd__pgc *c, psdbd_rc *rc);
/* Gives c back: a connection that broke is closed (the next user reconnects), one left inside a
 * transaction is rolled back. */
void psdbd__pg_put(psdbd_index *ix, psdbd__pgc *c);

/* A BIGINT or INTEGER column's text (PostgreSQL writes "-123", "0", "42") as a number, through
 * the one number parser; 0 for anything else (NULL is ""). */
int64_t psdbd__pg_int(const char *s);

/* Query parameters: text, 64-bit numbers (as text) and bytes (binary). */
#define PSDBD__PG_MAX_PARAMS 20
typedef struct psdbd__pgp {
    const char *v[PSDBD__PG_MAX_PARAMS];
    int len[PSDBD__PG_MAX_PARAMS];
    int fmt[PSDBD__PG_MAX_PARAMS];
    char num[PSDBD__PG_MAX_PARAMS][24];
    int n;
} psdbd__pgp;
void psdbd__pgp_text(psdbd__pgp *p, const char *s);
void psdbd__pgp_i64(psdbd__pgp *p, int64_t v);
void psdbd__pgp_null(psdbd__pgp *p);
void psdbd__pgp_bytes(psdbd__pgp *p, const void *b, size_t n);

/* Runs sql with p (NULL: none) on c; returns the result (the caller's to PQclear) when its status
 * is PGRES_TUPLES_OK or PGRES_COMMAND_OK; otherwise NULL with *rc the failure's status
 * (psdbd__pg_rc_of). It waits for the answer only until c->until_ms: past it the server is taken
 * for stopped (a frozen server enforces no statement_timeout), the connection is closed and
 * c->conn set to NULL (so that neither the pool nor a snapshot uses it again), the database is
 * marked lost and *rc is PSDBD_UNAVAILABLE (503). */
PGresult *psdbd__pg_exec(psdbd_index *ix, psdbd__pgc *c, const char *sql, const psdbd__pgp *p,
                         psdbd_rc *rc);

/* The statements that requests run, prepared once on each pooled connection (PQprepare on first
 * use, then only Bind/Execute): PostgreSQL then neither parses nor plans them again, which was
 * most of a resolve's cost on the server (deploy/SCALING.md, 3.5). The text of each is
 * psdbd__pg_stmt_sql[st] (index_pg_queries.c); the name on the server is "psdbd_<st>". At most
 * 32. */
typedef enum psdbd__pg_stmt {
    PSDBD__PG_RESOLVE,
    PSDBD__PG_GET,
    PSDBD__PG_FIND_IDENTITY,
    PSDBD__PG_BLOB_PUBLISHED,
    PSDBD__PG_BLOB_APPS,
    PSDBD__PG_APP_ID,
    PSDBD__PG_APP_PSDBS,
    PSDBD__PG_TOKEN_FIND,
    PSDBD__PG_KEY_FIND,
    PSDBD__PG_STMTS
} psdbd__pg_stmt;
extern const char *const psdbd__pg_stmt_sql[PSDBD__PG_STMTS];

/* As psdbd__pg_exec, for the prepared statement st: prepared first where c's session does not
 * hold it yet (the preparation and the execution share the operation's deadline), and prepared
 * again once when the session lost it (SQLSTATE 26000). A connection outside the pool runs the
 * statement's text instead. */
PGresult *psdbd__pg_exec_stmt(psdbd_index *ix, psdbd__pgc *c, psdbd__pg_stmt st,
                              const psdbd__pgp *p, psdbd_rc *rc);

/* As psdbd__pg_exec_stmt, for one of the farm's statements (index_farm.c), which have no
 * psdbd__pg_stmt: sql is numbered by its text on first use (at most 128 distinct texts; past
 * them a text runs unprepared), the name on the server is "psdbd_f<number>". Each farm
 * statement runs inside a transaction, where a statement the session lost aborts it: that
 * answers 503 (PSDBD_UNAVAILABLE) and closes the connection (c->conn NULL), so that a new session
 * prepares again. */
PGresult *psdbd__pg_exec_farm(psdbd_index *ix, psdbd__pgc *c, const char *sql, const psdbd__pgp *p,
                              psdbd_rc *rc);

/* A failed result (NULL: the connection failed) as the index's status, logged: a unique key
 * taken is a conflict, a full disk is full, a lost connection, a statement timeout, a shutdown
 * and too many connections are unavailable (503, retried later), anything else an error. */
psdbd_rc psdbd__pg_rc_of(psdbd_index *ix, PGconn *conn, const PGresult *res);

int psdbd__pg_ping(psdbd_index *ix);
int psdbd__pg_lost(psdbd_index *ix);
void psdbd__pg_close(psdbd_index *ix);
psdbd_rc psdbd__pg_snapshot(psdbd_index *ix, int begin);
psdbd_rc psdbd__pg_gc_lock(psdbd_index *ix, int lock);
/* index_pg_stats.c */
psdbd_rc psdbd__pg_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                             int64_t keep_from_day);
psdbd_rc psdbd__pg_stats_select(psdbd_index *ix, psdbd__stats_query q, const char *text,
                                const int64_t *nums, size_t n_nums, psdbd__row_fn fn, void *ctx);
int psdbd__pg_watch(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size);

/* The channel that publishes and retires NOTIFY on commit (psdbd_index_watch). */
#define PSDBD__PG_CHANNEL "psdbd_changed"
psdbd_rc psdbd__pg_integrity(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                             void *ctx);

#endif
