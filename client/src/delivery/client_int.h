/* client_int.h - what the delivery client's files share: the client handle and the helpers they
 * call. The delivery client: resolve on psdbd, resumable verified downloads, value-level delta
 * updates, install, publish; every request goes through the one transport (transport.h).
 *
 * DESIGN
 * A download never trusts bytes it has not hashed: it streams into <dest>.part through one
 * SHA-256 context, and a resumed download first re-reads what the .part already holds into that
 * context before asking for the rest with a Range request. Only a complete, matching, signed file
 * is fsynced and renamed over <dest>, so <dest> is either absent, the previous version, or the new
 * verified one. Transient failures (connection, timeout, 5xx, a short body) retry with doubling
 * backoff and resume from what is on disk; a permanent failure (4xx, integrity, disk full) stops.
 * The library records every failure in one place, the thread's psdb_error_last; a client's
 * psdb_client_last_error is a copy of it taken as each public call on the client returns
 * (psdb__client_ret), so that it stays valid until the next call on the client whatever the
 * thread calls in between. */
#ifndef PSDB_CLIENT_INT_H
#define PSDB_CLIENT_INT_H

#include <time.h>

#include "psdb/client.h"
#include "psdb/file.h"
#include "psdb/sign.h"

#include "delivery/transport.h"
#include "registry/install.h"

struct psdb_client {
    psdb__share *share;
    char *server_url; /* without a trailing '/' */
    char *token;
    char *ca_file;
    char *pinned_public_key;
    uint32_t connect_timeout_ms, low_speed_timeout_s, max_retries, retry_base_ms;
    psdb_key **keys; /* trusted publisher keys */
    uint32_t num_keys;
    void (*progress)(const psdb_progress *p, void *ctx);
    int (*progress_cancel)(const psdb_progress *p, void *ctx);
    void *progress_ctx;
    uint64_t max_recv_bytes_per_second;
    /* The bandwidth limit's token bucket (transport.c): bytes that may arrive now, as of
     * pace_at. */
    double pace_tokens;
    struct timespec pace_at;
    int pace_started;
    char last_error[640]; /* psdb_client_last_error: psdb_error_last as the last call ended */
};

/* The end of every public call on a client: psdb__error_ret (a failure leaves its reason in
 * psdb_error_last), then the client's copy of it for psdb_client_last_error: the thread's
 * message when the call failed, "" when it succeeded. c may be NULL. Returns hr. */
psdb_hr psdb__client_ret(psdb_client *c, psdb_hr hr, unsigned mark, const char *what);

/* The request checks, shared by resolve and install (manifest.c): `who` begins the message;
 * implied_exe is an exe file name the request implies without naming it (install's exe path),
 * checked only when the manifest names one. PSDB_E_INTEGRITY with the last error naming the
 * field. */
psdb_hr psdb__client_check_request(const char *who, const psdb_manifest *m,
                                   const psdb_app_desc *app, const uint8_t *app_id,
                                   const psdb_precompile_target *t, const char *implied_exe);

/* Checks a resolved manifest against the whole install request: resolve's checks plus the AppId
 * and the exe path's file name (manifest.c). PSDB_E_INTEGRITY with the last error set. */
psdb_hr psdb__client_check_install(const psdb_manifest *m, const psdb_install_desc *d,
                                   const psdb_precompile_target *t);

/* Checks an opened PSDB's identity and target against its manifest, field by field (manifest.c).
 * PSDB_E_INTEGRITY with the last error naming the field. */
psdb_hr psdb__client_check_file(const char *path, const psdb_file_info *info,
                                const psdb_manifest *m);

/* A number of a JSON object (manifest.c): a non-negative integer, or a string psdb__parse_u64
 * accepts (values above INT64_MAX travel as strings); and a 4x16-bit version, a string in psdbd's
 * spelling (psdb__parse_version) or an integer. 0, or -1 when absent or malformed. */
struct json_t;
int psdb__json_u64(struct json_t *obj, const char *key, uint64_t *out);
int psdb__json_version(struct json_t *obj, const char *key, uint64_t *out);

/* What --compile-missing asks the registry before it compiles (install.c answers it under its
 * registry lock): a PSDB registered as built here for the target's family from the SODB sodb_hex,
 * its digest and whether it is the exe path's own row (psdb__registry_built_here's statuses). */
typedef struct psdb__built_lookup {
    psdb_hr (*find)(void *ctx, const char *sodb_hex, char sha256[65], int *own);
    void *ctx;
} psdb__built_lookup;

/* psdb install --compile-missing for one target the server has no PSDB for (build_here.c): the
 * newest trusted SODB of the application version picked; a PSDB have finds as built here from
 * that SODB, that still hashes to its digest and fits t, is kept (S_FALSE: the exe path's own,
 * registered already; S_OK: another executable's, registered for this one too; nothing compiled
 * or downloaded either way); else the SODB is downloaded and verified into store_dir, compiled
 * (d->compile, else the reference compiler), checked against t and renamed to
 * <store_dir>/<sha256>.psdb (S_OK). have may be NULL (nothing kept). Fills e (family, psdb_path
 * malloc'd, sha256, built_here, sodb_sha256; not serial) and r (may be NULL). PSDB_E_NOT_FOUND
 * when no SODB is published, PSDB_E_SIGNATURE when none verifies; the statuses of download and
 * compile; the last error set (without the "install: " its caller adds). */
psdb_hr psdb__install_build_here(psdb_client *c, const psdb_install_desc *d,
                                 const psdb_precompile_target *t, const char *store_dir,
                                 const psdb__built_lookup *have, psdb__install_entry *e,
                                 psdb_install_result *r);

/* The manifest's blob URL, absolute (download.c); NULL on out of memory. */
char *psdb__client_blob_url(const psdb_client *c, const psdb_manifest *m);

#endif
