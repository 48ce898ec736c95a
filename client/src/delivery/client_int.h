/* client_int.h - what the delivery client's files share (client.c, manifest.c, resolve.c,
 * download.c): the client handle and the helpers they call. The delivery client: resolve on
 * psdbd, resumable verified downloads (libcurl).
 *
 * DESIGN
 * A download never trusts bytes it has not hashed: it streams into <dest>.part through one
 * SHA-256 context, and a resumed download first re-reads what the .part already holds into that
 * context before asking for the rest with a Range request. Only a complete, matching, signed file
 * is fsynced and renamed over <dest>, so <dest> is either absent, the previous version, or the new
 * verified one. Transient failures (connection, timeout, 5xx, a short body) retry with doubling
 * backoff and resume from what is on disk; a permanent failure (4xx, integrity, disk full) stops.
 */
#ifndef PSDB_CLIENT_INT_H
#define PSDB_CLIENT_INT_H

#include <curl/curl.h>

#include "psdb/client.h"
#include "psdb/sign.h"

#include "registry/install.h"
#include "common/buf.h"

/* libcurl's connection cache, DNS cache and TLS sessions, shared by the transfers of one client
 * and of the clients created with share_connections_with it; the lock callbacks make it safe for
 * clients on different threads. Reference counted (client.c). */
typedef struct psdb__curl_share psdb__curl_share;

struct psdb_client {
    psdb__curl_share *share;
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
    /* The bandwidth limit's token bucket (psdb__client_pace): bytes that may arrive now, as of
     * pace_at. */
    double pace_tokens;
    struct timespec pace_at;
    int pace_started;
    char error[512];
    char curl_error[CURL_ERROR_SIZE];
};

/* manifest.c */
psdb_hr psdb__client_check_request(psdb_client *c, const char *who, const psdb_manifest *m,
                                   const psdb_app_desc *app, const uint8_t *app_id,
                                   const psdb_precompile_target *t, const char *implied_exe);
/* resolve.c */
CURL *psdb__client_new_handle(psdb_client *c, const char *url, struct curl_slist **headers);
/* resolve.c */
int psdb__client_transient_curl(CURLcode rc);
/* GET url into *body (at most max_bytes; emptied first), retrying transient failures with the
 * client's backoff and asking its progress_cancel (progress "what" = who). PSDB_S_OK with
 * *status 200; else the failure (PSDB_E_NETWORK, PSDB_E_CANCELLED, PSDB_E_PROTOCOL for an answer
 * over max_bytes, PSDB_E_OUTOFMEMORY, or psdb__http_hr of the final status, whose body is kept)
 * with the client's error set, starting with who. The caller frees *body (resolve.c). */
psdb_hr psdb__client_get(psdb_client *c, const char *who, const char *url, size_t max_bytes,
                         psdb__buf *body, long *status);
/* Sleeps the backoff before retry `attempt`, in slices that ask progress_cancel (resolve.c).
 * 1 when the caller asked to stop (the call then returns PSDB_E_CANCELLED), else 0. */
int psdb__client_backoff(const psdb_client *c, const psdb_progress *p, uint32_t attempt);
/* The client's bandwidth limit, applied to each n bytes received before they are kept: a token
 * bucket of max_recv_bytes_per_second over every transfer of the client, at most an eighth of a
 * second of bytes in a burst. Sleeps until the bytes are allowed, in slices of at most 100 ms
 * that ask progress_cancel with p. 1 when it asked to stop (the write callback then ends the
 * transfer and the call returns PSDB_E_CANCELLED), else 0 (resolve.c). */
int psdb__client_pace(psdb_client *c, size_t n, const psdb_progress *p);
/* Whether the client's progress_cancel asks to stop, given p (resolve.c); 0 without one. */
int psdb__client_should_stop(const psdb_client *c, const psdb_progress *p);

/* The manifest's blob URL, absolute (download.c); NULL on out of memory. */
char *psdb__client_blob_url(const psdb_client *c, const psdb_manifest *m);

/* The share's handle for CURLOPT_SHARE (client.c). */
CURLSH *psdb__curl_share_handle(const psdb__curl_share *s);

/* Sets the client's one-line last error (client.c). */
void psdb__client_error(psdb_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks a resolved manifest against the whole install request: resolve's checks plus the AppId
 * and the exe path's file name (manifest.c). PSDB_E_INTEGRITY with the client's error set. */
psdb_hr psdb__client_check_install(psdb_client *c, const psdb_manifest *m,
                                   const psdb_install_desc *d, const psdb_precompile_target *t);

/* Checks an opened PSDB's identity and target against its manifest, field by field (manifest.c).
 * PSDB_E_INTEGRITY with the client's error naming the field. */
psdb_hr psdb__client_check_file(psdb_client *c, const char *path, const psdb_file_info *info,
                                const psdb_manifest *m);

#endif
