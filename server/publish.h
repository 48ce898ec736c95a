/* publish.h - psdbd's publish service: what an uploaded PSDB must be to be served, and what
 * accepting one does, whatever protocol brought it (http/upload.c frames, streams and hashes the
 * upload, then sends the verdict these functions return).
 *
 * DESIGN
 * The policy, in the order it is applied:
 * - the signing key is registered (psdbd_publish_key, before any body byte is read: an unknown key
 *   costs no upload);
 * - the upload passes every check `psdb verify` makes (content digest, sizes, references, ids,
 *   SQLite integrity): a file indexed here is served to every client as it is, and a damaged one
 *   would fail or miss on each of them instead of once here;
 * - its identity and target are present, and its names are names by the one rule
 *   (psdb__name_check) and bounded, since they reach manifests, the signed statement, logs,
 *   dashboards and launchers' screens;
 * - the token's and the key's scopes both cover its application, and the key's family scope
 *   (psdbd key add --families) its family (key_scope);
 * - a compiler's token publishes only with a version 2 statement (X-Psdb-Sodb-Sha256), and a
 *   version 2 statement names a published, non-retired SODB of the same application identity and
 *   version (sodb_unknown);
 * - the signature verifies over the statement rebuilt from the file (its SHA-256 and size, its
 *   identity and target) and the claimed serial, with the registered key;
 * - an identity, target and serial already indexed with these bytes is a repeat (the first's
 *   manifest, nothing stored), with other bytes a conflict: both decided before the store is
 *   touched;
 * - the blob is durable under its final name (psdbd_store_commit) before the index row that names
 *   it commits; a damaged file the store replaced takes its value maps with it;
 * - once committed, version 2 of its value map is queued for the worker (valuemaps.h: launchers ask
 *   for it next; the answer does not wait for it) and resolve answers cached before are dropped.
 * Nothing is derived before the blob is durable, and the worker derives each map once however
 * many ask. */
#ifndef PSDBD_PUBLISH_H
#define PSDBD_PUBLISH_H

#include <stdint.h>

#include "auth.h"
#include "index.h"
#include "store.h"
#include "valuemaps.h"
#include "verdict.h"

/* Where the signing key of a publish is registered: *pem and *scope (malloc'd, the caller's) when
 * key_id (64 lowercase hex digits) names a key that is not revoked. 0, or -1 with the verdict:
 * unknown_key, or the index's failure. */
int psdbd_publish_key(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                      char **families, psdbd_verdict *v);

/* One publish as the protocol received it. Everything is borrowed for the call. */
typedef struct psdbd_publish {
    const psdbd_principal *who;      /* the token's: role publisher or admin */
    const char *key_id;              /* 64 lowercase hex digits */
    const char *key_pem, *key_scope; /* as psdbd_publish_key found them */
    const char *key_families;        /* likewise: the families the key may sign PSDBs for */
    const char *sodb_sha256;         /* X-Psdb-Sodb-Sha256 (a version 2 statement), or NULL */
    const char *signature;           /* the base64 of the 64-byte Ed25519 signature */
    const char *signature_field;     /* where the signature came from, for the message */
    uint64_t serial;                 /* below 2^63 */
    int fd;                          /* the upload: whole, open for reading and writing */
    const char *path;                /* its temporary name in the store's tmp/ */
    uint64_t size;                   /* its bytes */
    uint8_t sha256[32];              /* and their SHA-256 */
} psdbd_publish;

/* Applies the policy to the upload and, when it passes, accepts it (publish.h, DESIGN). The
 * verdict: CREATED with the new manifest (accepted); OK with the manifest already indexed (a
 * repeat); or invalid_psdb, out_of_scope, bad_signature, conflict, disk_full, index_unavailable or
 * internal with its message. The temporary file is the caller's to remove afterwards (once
 * accepted, its name is gone). Thread-safe: the finishers run publishes at once. */
void psdbd_publish_accept(psdbd_index *ix, psdbd_store *store, psdbd_valuemaps *vmaps,
                          const psdbd_publish *p, psdbd_verdict *v);

/* The same for an uploaded SODB (POST /v1/sodbs; schema/HTTP.md, Farm): it must open with
 * libpsdb's SODB reader and every entry's key must be the SHA-256 of its description; its
 * identity is checked as a PSDB's; the token's and the key's scopes cover its application; the
 * signature verifies over the SODB statement (schema/STATEMENT.md). The verdict: CREATED with
 * the SODB manifest, OK with the one already indexed, or invalid_sodb, out_of_scope,
 * bad_signature, conflict, disk_full, index_unavailable, internal. */
void psdbd_publish_sodb_accept(psdbd_index *ix, psdbd_store *store, const psdbd_publish *p,
                               psdbd_verdict *v);

#endif
