/* verdict.h - what a request to psdbd came to, apart from the protocol that answers it: an outcome
 * (one per answer psdbd gives: schema/HTTP.md, Errors, names the codes), a message for people,
 * and the one mapping of the failures psdbd meets onto outcomes: the index's psdbd_rc, libpsdb's
 * psdb_hr and a system call's errno.
 *
 * DESIGN
 * A service (publish.h) decides and returns a verdict; it never knows HTTP. The HTTP layer turns a
 * verdict into its status line, error code and body in one place, http_reply_verdict
 * (http/reply.c), whose table is the only place an outcome meets a status. So a failure class
 * answers the same on every route: a full disk is 507 disk_full whether the upload, the blob store,
 * a value map or the index ran out of space, and a lost index is 503 index_unavailable. */
#ifndef PSDBD_VERDICT_H
#define PSDBD_VERDICT_H

#include <stdarg.h>

#include <jansson.h>

#include "psdb/status.h"

#include "index.h"

typedef enum psdbd_outcome {
    /* Done. */
    PSDBD_OUTCOME_OK,           /* the answer; a publish: already indexed (the first's manifest) */
    PSDBD_OUTCOME_CREATED,      /* a publish accepted: stored, indexed, its value map queued */
    PSDBD_OUTCOME_PARTIAL,      /* ranges of a blob */
    PSDBD_OUTCOME_NOT_MODIFIED, /* the client's copy of a blob is current */
    /* Refused: the request must change. Each is named by its error code. */
    PSDBD_OUTCOME_BAD_REQUEST,         /* bad_request: a malformed parameter, header or trailer */
    PSDBD_OUTCOME_INVALID_PSDB,        /* invalid_psdb: an upload that is no PSDB psdbd serves */
    PSDBD_OUTCOME_BAD_DIGEST,          /* bad_digest: a blob name that is no SHA-256 */
    PSDBD_OUTCOME_TRAILER_MISSING,     /* trailer_missing: a chunked publish without its trailer */
    PSDBD_OUTCOME_STATEMENT_MISMATCH,  /* statement_mismatch: the trailer states other bytes */
    PSDBD_OUTCOME_UNAUTHORIZED,        /* unauthorized: no token, or not a valid one */
    PSDBD_OUTCOME_FORBIDDEN,           /* forbidden: the token's role is too low */
    PSDBD_OUTCOME_OUT_OF_SCOPE,        /* out_of_scope: a token's or key's scope */
    PSDBD_OUTCOME_UNKNOWN_KEY,         /* unknown_key: no registered publisher key has this id */
    PSDBD_OUTCOME_BAD_SIGNATURE,       /* bad_signature */
    PSDBD_OUTCOME_NOT_FOUND,           /* not_found */
    PSDBD_OUTCOME_NO_VALUE_MAP,        /* no_value_map: a blob that is no PSDB of this layout */
    PSDBD_OUTCOME_METHOD_NOT_ALLOWED,  /* method_not_allowed */
    PSDBD_OUTCOME_CONFLICT,            /* conflict: this identity, target and serial hold others */
    PSDBD_OUTCOME_LENGTH_REQUIRED,     /* length_required */
    PSDBD_OUTCOME_PRECONDITION_FAILED, /* precondition_failed */
    PSDBD_OUTCOME_TOO_LARGE,           /* too_large: over max-upload */
    PSDBD_OUTCOME_RANGE_NOT_SATISFIABLE, /* range_not_satisfiable */
    PSDBD_OUTCOME_INVALID_SODB,          /* invalid_sodb: an upload that is no SODB psdbd serves */
    PSDBD_OUTCOME_KEY_SCOPE,             /* key_scope: the key may not sign for this family */
    PSDBD_OUTCOME_SODB_UNKNOWN, /* sodb_unknown: a version 2 statement names no published SODB */
    PSDBD_OUTCOME_LEASE_LOST,   /* lease_lost: the job's lease is not (or no longer) the caller's */
    PSDBD_OUTCOME_NO_CONTENT,   /* a claim with nothing to do (204) */
    /* Failed: the server could not do it; the log says why. */
    PSDBD_OUTCOME_INTERNAL,          /* internal */
    PSDBD_OUTCOME_NOT_READY,         /* not_ready (/readyz) */
    PSDBD_OUTCOME_INDEX_UNAVAILABLE, /* index_unavailable: removed, replaced, damaged, unreachable
                                      */
    PSDBD_OUTCOME_DISK_FULL,         /* disk_full */
    PSDBD_OUTCOME_COUNT
} psdbd_outcome;

/* A verdict: the outcome, and a failure's message or a success's JSON body. */
typedef struct psdbd_verdict {
    psdbd_outcome outcome;
    char message[512]; /* one line; "" on success */
    json_t *body;      /* a success's answer (the verdict holds the reference), or NULL */
} psdbd_verdict;

/* A failure: outcome o with a printf message, cut to the buffer and made UTF-8 (a byte that does
 * not start a well-formed sequence becomes '?': a message may quote what a client sent, and JSON
 * carries UTF-8 only). Returns -1, what a failing check returns. */
int psdbd_verdict_fail(psdbd_verdict *v, psdbd_outcome o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int psdbd_verdict_vfail(psdbd_verdict *v, psdbd_outcome o, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* A success: outcome o with its body (the reference is taken). */
void psdbd_verdict_done(psdbd_verdict *v, psdbd_outcome o, json_t *body);
/* Drops the body's reference, if any. */
void psdbd_verdict_clear(psdbd_verdict *v);

/* An index failure rc (any but OK; the results a caller answers itself, NOT_FOUND, EXISTS and
 * CONFLICT, are failures here too): UNAVAILABLE -> index_unavailable, FULL -> disk_full, anything
 * else -> internal, each with its one message. Returns -1. */
int psdbd_verdict_index(psdbd_verdict *v, psdbd_rc rc);

/* A failure hr of libpsdb working on something a client sent: PSDB_E_OUTOFMEMORY ends the daemon
 * (psdbd_out_of_memory); DISK_FULL -> disk_full; IO and ACCESS (the server's own files failed) ->
 * internal; anything else says what the input is not: `otherwise`. */
psdbd_outcome psdbd_outcome_of_hr(psdb_hr hr, psdbd_outcome otherwise);

/* Whether a system call's errno says that the file is not there (ENOENT). */
int psdbd_errno_absent(int e);
/* A failed system call on the server's own files, errno e: the file not there (psdbd_errno_absent)
 * -> `absent`; a full disk (psdb__errno_hr: DISK_FULL) -> disk_full; anything else -> internal. */
psdbd_outcome psdbd_outcome_of_errno(int e, psdbd_outcome absent);

#endif
