/* publish.h - the libcurl upload behind `psdb publish`, and the curl handle setup shared with the
 * delivery client. Internal to libpsdb. */
#ifndef PSDB_PUBLISH_H
#define PSDB_PUBLISH_H

#include <stdint.h>

#include <curl/curl.h>

#include "psdb/psdb.h"

/* A curl easy handle with the project's defaults: `url`, a bearer token when non-NULL, TLS peer
 * and host verification on, no signals, connect timeout 30 s, abort below 1 byte/s for 60 s, no
 * redirects, HTTP/1.1, errors in errbuf (CURL_ERROR_SIZE bytes, kept alive by the caller). The
 * token's header list is returned in *headers (NULL when none): append to it, pass it with
 * CURLOPT_HTTPHEADER, free it with curl_slist_free_all after curl_easy_cleanup. NULL on OOM. */
CURL *psdb__curl_new(const char *url, const char *token, char *errbuf, struct curl_slist **headers);

typedef struct psdb__publish_desc {
    const char *token;    /* publisher token */
    const char *key_path; /* private key file (psdb keygen) */
    uint64_t serial;
    const char *psdb_path;
} psdb__publish_desc;

/* Signs and uploads one PSDB (schema/STATEMENT.md, schema/HTTP.md) to the client's server, through
 * the client's curl setup (CA file, pinned key, timeouts) and retry rule (transient failures
 * retried max_retries times with doubling backoff), as resolve and download are. The statement
 * goes in the trailer of a chunked upload, the file hashed as it is sent, when a first one-byte
 * request finds that a trailer reaches psdbd; else in the headers, the file hashed first;
 * PSDB_PUBLISH_STATEMENT=header|trailer|auto in the environment overrides (another value:
 * PSDB_E_INVALIDARG). A first request that gets no answer counts as the first attempt. *status
 * receives the HTTP status (0 when there was no answer) and *body the response body (malloc'd,
 * NUL-terminated, may be NULL); msg gets a one-line reason on failure. Returns S_OK (201 created),
 * S_FALSE (200: the same content was already published), PSDB_E_INVALIDARG (bad arguments, or 400),
 * PSDB_E_IO (cannot read the file or key), PSDB_E_CACHE_CORRUPT (not a PSDB), PSDB_E_SIGNATURE (not
 * a private Ed25519 key), PSDB_E_ACCESS (401/403), PSDB_E_ALREADY_EXISTS (409), PSDB_E_CACHE_FULL
 * (413), PSDB_E_DISK_FULL (507), PSDB_E_NETWORK, PSDB_E_PROTOCOL (any other status). */
psdb_hr psdb__publish(psdb_client *client, const psdb__publish_desc *d, long *status, char **body,
                      char *msg, size_t msg_size);

/* The trailer of psdb publish's first request in the "auto" form, one byte whose statement is
 * well formed (a signature of 64 zero bytes): psdbd checks the trailer's form before it finds
 * that the byte is no PSDB, so it answers invalid_psdb exactly when a trailer arrives. Shared
 * with the test that holds it to psdbd's own checks. */
extern const char *const psdb__publish_probe_trailer[3];

#endif
