/* psdb/client.h - the delivery client a launcher runs at install time: resolve a target on psdbd,
 * download the PSDB it names (resumable, verified), and install it into the registry. */
#ifndef PSDB_CLIENT_H
#define PSDB_CLIENT_H

#include "types.h"
#include "registry.h"
#include "valuemap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct psdb_client psdb_client;

/* Progress of one download, reported at most every 100 ms and once at the end. */
typedef struct psdb_progress {
    const char *what; /* the file being fetched (borrowed for the call) */
    uint64_t done;    /* bytes on disk so far, resumed bytes included */
    uint64_t total;   /* the manifest's size */
    uint32_t attempt; /* 1 on the first try, 2 on the first retry, ... */
} psdb_progress;

typedef struct psdb_client_desc {
    const char *server_url; /* "http://127.0.0.1:8470" or "https://..." (required) */
    const char *token;      /* bearer token; NULL: none */
    const char *ca_file;    /* PEM CA bundle for https; NULL: the system's */
    const char
        *pinned_public_key;       /* curl CURLOPT_PINNEDPUBLICKEY form ("sha256//..."); NULL: off */
    uint32_t connect_timeout_ms;  /* 0: 10 s */
    uint32_t low_speed_timeout_s; /* abort a transfer slower than 1 KiB/s for this long; 0: 30 s */
    uint32_t max_retries;         /* transient failures retried this often; 0: 5 */
    uint32_t retry_base_ms;       /* first backoff, doubled each retry; 0: 200 ms */
    const char *const *trusted_keys; /* paths of publisher public keys (.pub) */
    uint32_t num_trusted_keys;
    void (*progress)(const psdb_progress *p, void *ctx); /* NULL: none */
    void *progress_ctx;
    /* A progress callback that can stop the call (a launcher's cancel button, a signal flag). It
     * gets progress_ctx and is asked at most every 100 ms while any transfer of the client runs,
     * at least about once a second even while no byte arrives (resolve too: then what is
     * "resolve" and total 0), and during the backoff between retries. A non-zero return stops the
     * call in flight: it returns PSDB_E_CANCELLED, the registry is unchanged, and a partial
     * download stays in <dest>.part, which the next download or install of the same PSDB resumes
     * with a Range request. Called on the thread that made the call. NULL: never asked. */
    int (*progress_cancel)(const psdb_progress *p, void *ctx);
    /* Bandwidth limit of this client in bytes per second, over everything it receives together
     * (downloads, value maps and ranges, and the small answers of resolve, coverage and publish):
     * a token bucket in the library (at most an eighth of a second of bytes in a burst, idle time
     * not saved up), exact from the first byte, also for transfers of a few KiB; 0: unlimited. */
    uint64_t max_recv_bytes_per_second;
    /* Another client whose connection cache, DNS cache and TLS sessions this one shares (libcurl
     * CURLSH, with locks), so that clients on different threads reuse each other's connections;
     * NULL: the client has its own (its transfers still reuse their connections). The share
     * lives until the last client using it is released, in any order. Creating a client with it
     * may run while the other client is in use on another thread. */
    const psdb_client *share_connections_with;
} psdb_client_desc;

/* A manifest as psdbd serves it (schema/HTTP.md, GET /v1/resolve). Every string is owned by the
 * manifest. */
typedef struct psdb_manifest {
    char *id;
    uint8_t sha256[32];
    uint64_t size;
    char *url;             /* blob URL, absolute or relative to the server */
    psdb_app_identity app; /* desc strings owned by the manifest */
    psdb_target target;    /* family owned by the manifest */
    uint64_t serial;
    char *created_at;
    char *key_id;
    char *signature; /* base64 Ed25519 over the signed statement (schema/STATEMENT.md) */
    char *json;      /* the manifest as served, compact */
    /* What the manifest describes: PSDB_MANIFEST_PSDB, or PSDB_MANIFEST_SODB ("kind": "sodb",
     * GET /v1/sodbs: an SODB, signed with the SODB statement; its target is all zero and its
     * family NULL). */
    uint32_t kind;
    /* The statement its signature covers: 1, or 2 for a PSDB compiled from the SODB
     * sodb_sha256 (a farm's or a local build; schema/STATEMENT.md). A manifest without
     * "statement_version" is version 1; an SODB's is 1. */
    uint32_t statement_version;
    uint8_t sodb_sha256[32]; /* version 2: the source SODB's SHA-256; else all zero */
} psdb_manifest;

#define PSDB_MANIFEST_PSDB 0u
#define PSDB_MANIFEST_SODB 1u

/* Creates a client. Copies every string of desc. PSDB_E_INVALIDARG (no server_url, not http(s)),
 * PSDB_E_OUTOFMEMORY, PSDB_E_IO (a trusted key file cannot be read), PSDB_E_SIGNATURE (a trusted
 * key file is not an Ed25519 public key: a private key is refused too).
 * psdb_key_load_kind(path, PSDB_KEY_PUBLIC, ...) says why a key file is refused.
 * Thread safety: a client is used by one thread at a time (its last error is its own). A launcher
 * that installs on several threads creates one client per thread, each with
 * share_connections_with naming a first client so that they share connections; installs of
 * different applications then run at once into one registry under one installer name (see
 * psdb_client_install). */
PSDB_API psdb_hr psdb_client_create(const psdb_client_desc *desc, psdb_client **out);
/* Frees the client and what it holds (its copies of the desc's strings, the trusted keys). NULL
 * is a no-op; cannot fail. Not concurrently with another call on the same client. */
PSDB_API void psdb_client_release(psdb_client *c);

/* One line describing the last failure of a call on this client ("" when none, or when the last
 * call succeeded; NULL c gives ""): the calling thread's psdb_error_last() as that call returned,
 * kept with the client so that other psdb calls in between do not replace it. Borrowed: valid
 * until the next call on the client or its release. Same thread rule as the client. */
PSDB_API const char *psdb_client_last_error(const psdb_client *c);

/* Parses a manifest from size bytes of JSON (GET /v1/resolve's answer; schema/HTTP.md). Versions
 * and numbers sent as strings follow the one grammar of schema/HTTP.md "Version spellings".
 * Statuses: PSDB_E_INVALIDARG (NULL json or out), PSDB_E_PROTOCOL (not JSON, a required field
 * missing or malformed, a duplicate key, an empty application name or target family, a string
 * longer than PSDB_STATEMENT_STRING_MAX of psdb/sign.h: nothing a signed statement can carry),
 * PSDB_E_OUTOFMEMORY. On success *out is the caller's (psdb_manifest_free); on failure *out is
 * NULL. Thread-safe (no shared state). */
PSDB_API psdb_hr psdb_manifest_parse(const char *json, size_t size, psdb_manifest **out);
/* Frees a manifest from psdb_manifest_parse or psdb_client_resolve. NULL is a no-op; cannot fail.
 */
PSDB_API void psdb_manifest_free(psdb_manifest *m);

/* What psdb_client_publish signs and uploads. */
typedef struct psdb_publish_desc {
    const char *key_path;  /* private Ed25519 key file (psdb keygen; psdb_key_save) */
    const char *psdb_path; /* the PSDB to publish */
    uint64_t serial; /* the statement's serial (schema/STATEMENT.md); the tool's default is 1 */
    /* The SHA-256 of the SODB the PSDB was compiled from (a farm's worker): the version 2
     * statement, sent with X-Psdb-Sodb-Sha256; NULL: version 1. Not for an SODB. */
    const uint8_t *sodb_sha256;
} psdb_publish_desc;

/* The server's answer to psdb_client_publish. Owned by the caller: psdb_publish_result_free. */
typedef struct psdb_publish_result {
    long http_status;  /* 0 when no answer came (a local failure, or a network one) */
    char *body;        /* the answer's body, NUL-terminated: on 200/201 the manifest JSON (see
                          psdb_manifest_parse), else the server's {"error","message"}; NULL if none */
    size_t body_size;  /* bytes of body without the NUL */
    char message[512]; /* one line naming what failed and why; "" on success */
} psdb_publish_result;

/* Signs the PSDB's statement (digest, size, identity, target, serial; schema/STATEMENT.md) with the
 * key and uploads the file to the client's server (POST /v1/psdbs; schema/HTTP.md) with the
 * client's token. The kind comes from the file: an SODB (SQLite application_id 'PSOD') is signed
 * with the SODB statement (digest, size, identity, serial) and uploaded to POST /v1/sodbs. With
 * d->sodb_sha256 the PSDB's statement is version 2, naming that SODB (refused by psdbd unless it
 * publishes that SODB for the same application and version). An SODB and a version 2 statement
 * always use the header form described below. Statuses: PSDB_S_OK (201: published), PSDB_S_FALSE
 * (200: the same content was already published), PSDB_E_INVALIDARG (NULL c, d, out, key_path or
 * psdb_path; a client without token; HTTP 400; sodb_sha256 given for an SODB), PSDB_E_IO (the file
 * or key cannot be read), PSDB_E_CACHE_CORRUPT (not a PSDB or SODB), PSDB_E_SIGNATURE (not a
 * private Ed25519 key), PSDB_E_ACCESS (401/403), PSDB_E_ALREADY_EXISTS (409), PSDB_E_CACHE_FULL
 * (413), PSDB_E_DISK_FULL (507), PSDB_E_NETWORK (no answer), PSDB_E_PROTOCOL (any other status),
 * PSDB_E_CANCELLED (progress_cancel asked to stop, during a transfer or a backoff),
 * PSDB_E_OUTOFMEMORY. *out is set on every return except PSDB_E_INVALIDARG for a NULL argument and
 * PSDB_E_OUTOFMEMORY before the result exists (then NULL): on failure it still carries the HTTP
 * status, the body and the message, which is also the client's psdb_client_last_error. The upload
 * goes through the same curl setup as resolve and download: TLS verification on with the client's
 * ca_file and pinned_public_key, no redirects, connect_timeout_ms and low_speed_timeout_s; a
 * transient failure (no connection, timeout, HTTP 408, 429, 5xx) is retried max_retries times with
 * doubling backoff from retry_base_ms (psdbd answers 200 to a repeated upload of content it already
 * holds, so a retry is safe). The statement travels in the trailer of a chunked upload, the file
 * hashed while it is sent, when a first one-byte request shows that a trailer reaches the server;
 * else (a proxy that drops trailers, such as nginx, or an older psdbd) the file is hashed first and
 * the statement sent in headers (schema/HTTP.md, POST /v1/psdbs). The environment variable
 * PSDB_PUBLISH_STATEMENT
 * ("header" or "trailer"; "auto" or unset: as described) forces a form; another value gives
 * PSDB_E_INVALIDARG. Same thread rule as the client. */
PSDB_API psdb_hr psdb_client_publish(psdb_client *c, const psdb_publish_desc *d,
                                     psdb_publish_result **out);
/* Frees a result of psdb_client_publish and its body. NULL is a no-op; cannot fail. */
PSDB_API void psdb_publish_result_free(psdb_publish_result *r);

/* Asks the server for the best PSDB for one target (GET /v1/resolve; MODEL A3). `profile_version`
 * of the target 0 means "any". The answer is bound to the request as psdb_client_check_manifest
 * does (without an AppId, which the request does not carry): a manifest for another application,
 * version, exe filename or engine (when app names them), family, ABI outside [abi_min, abi_max]
 * or profile version (when asked) is refused even when its signature is valid.
 * HTTP errors map as everywhere in psdb: PSDB_E_INVALIDARG (400), PSDB_E_ACCESS (401/403),
 * PSDB_E_NOT_FOUND (404), PSDB_E_NETWORK (connection failures, 408, 429 and 5xx after retries),
 * PSDB_E_PROTOCOL (any other status, a garbage answer); PSDB_E_INTEGRITY (an answer for another
 * request; the last error names the field); PSDB_E_INVALIDARG also for NULL c, app or target;
 * PSDB_E_OUTOFMEMORY. *out is the caller's (psdb_manifest_free); NULL on failure. Same thread rule
 * as the client. */
PSDB_API psdb_hr psdb_client_resolve(psdb_client *c, const psdb_app_desc *app,
                                     const psdb_precompile_target *target, psdb_manifest **out);

/* What the server covers for one application and what clients asked for that it does not have
 * (GET /v1/stats/coverage; schema/HTTP.md), with the client's TLS settings, timeouts, retries and
 * cancel. On success *json (NUL-terminated, the caller's: free()) holds the server's answer, a
 * JSON object with the arrays "covered" and "missing", and *size its length. PSDB_E_NOT_FOUND:
 * the server has no PSDB and no recorded demand for app; PSDB_E_ACCESS: the token may not read
 * it; PSDB_E_PROTOCOL: the answer is not a coverage report, or over 64 MiB; PSDB_E_NETWORK,
 * PSDB_E_CANCELLED, PSDB_E_OUTOFMEMORY; PSDB_E_INVALIDARG: NULL argument or empty app. The
 * client's last error says why (with the server's own message when it gave one). */
PSDB_API psdb_hr psdb_client_coverage(psdb_client *c, const char *app, char **json, size_t *size);

/* Downloads the manifest's blob to dest_path. Streams into dest_path + ".part" while hashing;
 * resumes an existing .part with a Range request (its bytes are re-hashed first); retries
 * transient failures with exponential backoff. Only when the size and SHA-256 match the manifest
 * AND the manifest's signature verifies with a trusted key is the file fsynced and renamed to
 * dest_path. Memory use does not grow with the size. Statuses: PSDB_E_INVALIDARG (NULL c, m or
 * dest_path, a manifest without url), PSDB_E_INTEGRITY (size or digest mismatch: the .part is
 * removed), PSDB_E_SIGNATURE, PSDB_E_DISK_FULL (the .part is removed), PSDB_E_ACCESS (a file
 * permission, HTTP 401/403, or a .part that is not a regular file of this user: a symbolic link,
 * FIFO, device, directory or another user's file there is refused, never followed or written
 * through, and left alone), PSDB_E_IO, PSDB_E_NETWORK, PSDB_E_NOT_FOUND (404), the other HTTP
 * statuses as psdb_client_resolve, PSDB_E_CANCELLED (progress_cancel asked to stop: the .part is
 * kept and the next call resumes it), PSDB_E_OUTOFMEMORY; the last error says which step failed.
 * The manifest stays the caller's. Same thread rule as the client. */
PSDB_API psdb_hr psdb_client_download(psdb_client *c, const psdb_manifest *m,
                                      const char *dest_path);

/* Verifies a manifest's signature over its signed statement with the client's trusted keys
 * (S_OK, or PSDB_E_SIGNATURE with the last error naming the key id; PSDB_E_INVALIDARG on NULL;
 * PSDB_E_OUTOFMEMORY). Download calls it; exposed for launchers that cache manifests. Borrows m.
 * Same thread rule as the client. */
PSDB_API psdb_hr psdb_client_verify_manifest(psdb_client *c, const psdb_manifest *m);

/* Checks that a manifest answers this request, so that a validly signed manifest of some other
 * PSDB is not taken for the one asked for: the application name and version equal app's; the exe
 * filename equals app->exe_filename (ignoring ASCII case, as the file systems games ship on do) and
 * the engine name and version equal app's when app names them (non-NULL; NULL and "" are the same
 * absent name); the AppId equals the 16 bytes of app_id when app_id is non-NULL; the family equals
 * target's, the ABI version is inside [abi_min, abi_max], and when target->profile_version is not 0
 * ("any") the top 32 bits of the profile versions are equal (MODEL A3). S_OK, or PSDB_E_INTEGRITY
 * with psdb_client_last_error naming the field, what the manifest says and what was asked.
 * PSDB_E_INVALIDARG on NULL c, m, app, app->name or target. For launchers that cache manifests;
 * resolve and install call it. */
PSDB_API psdb_hr psdb_client_check_manifest(psdb_client *c, const psdb_manifest *m,
                                            const psdb_app_desc *app, const uint8_t *app_id,
                                            const psdb_precompile_target *target);

/* ---- Install (what `psdb install` runs)
 * ---------------------------------------------------------- */

typedef struct psdb_install_desc {
    const char *exe_path;     /* full path of the game's executable: the registry key (B2) */
    const psdb_app_desc *app; /* name and version required */
    const uint8_t *app_id;    /* 16 bytes, or NULL */
    const psdb_precompile_target *targets; /* one per adapter family of the machine */
    uint32_t num_targets;
    const char *registry_dir;   /* NULL: the default USER root */
    const char *installer_name; /* NULL: "psdb" */
    int allow_downgrade;        /* accept a serial lower than the one installed */
    /* Non-zero (psdb install --compile-missing): a target whose resolve misses (404; the resolve
     * records the miss as demand, as every miss) is compiled on this machine when the application
     * version has a published SODB that a trusted key signed (the newest such, by serial): the
     * SODB is downloaded and verified like a PSDB (its SODB statement, size and SHA-256),
     * compiled, checked to open for the target, and registered like a download, with the
     * registry recording that it was built here and the SODB's digest (schema/REGISTRY.md,
     * version 3). Nothing signs it. Its result has built_here set and serial 0; the registry keeps
     * the serial installed before for the family (a local build is no downgrade). A PSDB the
     * registry holds as built here from that same SODB (same SHA-256) for the family, whose file
     * still hashes to its registered digest and opens for the target, is kept instead: nothing
     * is downloaded or compiled, and the result is PSDB_S_FALSE when it is the exe path's own,
     * PSDB_S_OK (bytes_downloaded 0) when another executable's, registered for this one too. */
    int compile_missing;
    /* How compile_missing compiles: a target of a Vulkan device (family "vulkan-...", as
     * psdb_client_local_targets names them) through this hook, which writes the PSDB of sodb_path
     * for t to psdb_path (an existing empty file to replace) and puts one line in err on failure;
     * called on the install's thread with compile_ctx; the install checks the file afterwards.
     * libpsdb does not link the Vulkan loader, so without the hook (NULL) such a target fails
     * with PSDB_E_NOTIMPL; `psdb install` gives its Vulkan backend here. Every other target: the
     * reference compiler (psdb_sodb_compile) at the target's family, abi_max, compiler_version
     * and profile_version, the client's progress callback told about it (what "compile", done
     * and total entries) and its cancel asked. */
    psdb_hr (*compile)(const char *sodb_path, const psdb_precompile_target *t,
                       const char *psdb_path, void *ctx, char *err, size_t err_size);
    void *compile_ctx;
} psdb_install_desc;

/* What happened to one target (psdb_client_install writes every entry, whatever it returns).
 * Only an entry whose status succeeded describes an installed PSDB; a failed one has serial 0, an
 * all-zero sha256, size 0 and no delta figures. */
typedef struct psdb_install_result {
    /* S_OK: installed by this call. S_FALSE: already installed with the same digest (and still
     * is, also when the install failed at another target). A failure: not installed, and why:
     * this target's own failure (its resolve, signature, download, check, a lower serial), or one
     * that stopped every target (the installer busy, the store, the registration, a cancel
     * before it), or, with skipped set, the failure of the target the install stopped at. */
    psdb_hr status;
    uint64_t serial;    /* the installed PSDB's serial; 0 when status failed */
    uint8_t sha256[32]; /* its SHA-256; all zero when status failed */
    uint64_t size;      /* its size in bytes; 0 when status failed */
    /* How the file came: 1 when rebuilt from a value-level delta (schema/VALUEMAP.md), 0 when
     * downloaded in full or already present. */
    int delta;
    uint64_t bytes_downloaded; /* bytes fetched for this target (delta or full) */
    char delta_skipped[160];   /* when an update went in full: why no delta was used; "" else */
    uint32_t delta_sources;    /* a delta: how many installed PSDBs gave it values */
    uint64_t delta_resumed;    /* a delta: bytes of the file kept from an interrupted attempt */
    /* 1 when this target was not installed because the install stopped at another target
     * (status is that target's failure; this one may not have been resolved at all); 0 else. */
    int skipped;
    /* 1 when compile_missing compiled this target's PSDB here (serial 0; bytes_downloaded is the
     * SODB's size); 0 else. */
    int built_here;
    /* The SODB it was compiled from: the local build's, or the one a version 2 statement of the
     * downloaded PSDB names; all zero when none. */
    uint8_t sodb_sha256[32];
} psdb_install_result;

/* Installs the best PSDB of every target for one application: resolves each target, skips what is
 * installed with the same digest and whose file still hashes to it, downloads and verifies the
 * rest (psdb_client_download; a missing or damaged file is downloaded again even at an unchanged
 * serial, and a file another installer already put in the store with the right digest is used
 * as it is), opens each with libpsdb to check it against its target, then registers all of them
 * in the application's "default" component in ONE registry transaction (families not among the
 * targets keep their registration). An update of a PSDB installed for the same exe path and
 * family is rebuilt from it, and from up to 15 other PSDBs the registry holds for that family,
 * when the server has the new blob's value map (schema/VALUEMAP.md): only the values none of them
 * holds are fetched (Range requests), and the rebuilt file must match the manifest's size and
 * SHA-256 like a full download; a full download is made whenever that cannot help (results say
 * which, and why). A cancelled update keeps what it rebuilt, and the next install goes on from
 * there. Installs on several threads of one process (one
 * client each) may name the same registry_dir and installer_name: they share one installer handle,
 * taking turns only for the short registry steps, and run their resolves and downloads at once;
 * the registry_dir must then be spelled the same way. The registry remembers the highest serial
 * installed per (exe path, family) and refuses a lower one (PSDB_E_DOWNGRADE) unless
 * allow_downgrade. Installs of any installer names may run at once on one root: each holds the
 * store lock shared until its registration is committed, concurrent downloads of one digest wait
 * for each other, and the sweep of unreferenced files under <registry root>/psdbs that follows an
 * install runs only when no install is in flight (psdb_installer_sweep_store). Any failure leaves
 * the registry as it was; a damaged registry database fails with PSDB_E_CACHE_CORRUPT and a last
 * error naming it and the way out. Targets are taken in order and the install stops at the first
 * that fails; results then say which one (its own status, skipped 0) and mark the others skipped
 * (psdb_install_result). Each resolved manifest must answer the request
 * (psdb_client_check_manifest with d->app_id, and when app->exe_filename is NULL, a manifest that
 * names an exe filename must name the exe path's file name); each downloaded file must record
 * exactly the identity and target of its manifest. Either refusal is PSDB_E_INTEGRITY, with the
 * last error naming the field. Every file the install creates or reuses in the store (a resumed
 * .part, a delta update's .delta and .valuemap, store.lock, an existing <sha256>.psdb, the
 * installed PSDBs read as delta sources) must be a regular file of this user, reached without a
 * symbolic link: a link, FIFO, device, directory or another user's file planted at such a name is
 * never followed or written through; a .part or store.lock of that kind fails the install with
 * PSDB_E_ACCESS and a last error naming the path and what it is, a .delta or .valuemap makes the
 * update download in full, a source is left out, and at <sha256>.psdb the install puts its own
 * downloaded file in place of it (a directory there fails the rename, PSDB_E_IO), so what is
 * registered is always a regular file the install wrote. psdbs/ itself must be a directory of this
 * user, not a link. results (may be NULL) has num_targets entries, all written before the call
 * returns (also on PSDB_E_INVALIDARG when d is not NULL). Statuses: S_OK; PSDB_E_NOT_FOUND (a
 * target has no PSDB on the server); PSDB_E_BUSY (an installer of that name is open in another
 * process, or through psdb_installer_open); PSDB_E_DOWNGRADE; the statuses of resolve and download;
 * PSDB_E_CANCELLED (progress_cancel asked to stop, during a transfer, a backoff or before the
 * registration: the registry is unchanged, a partial download is kept and resumed next time);
 * PSDB_E_INVALIDARG (duplicate families, missing fields); PSDB_E_ACCESS (a file of the store
 * refused, as above). */
PSDB_API psdb_hr psdb_client_install(psdb_client *c, const psdb_install_desc *d,
                                     psdb_install_result *results);

/* The install targets of this machine's Vulkan devices, so that a launcher needs no family
 * strings (what `psdb install --target auto` asks for): one target per distinct device identity,
 * in the loader's enumeration order, each exactly the target `psdb compile --backend vulkan`
 * writes on that device (schema/COMPILER.md section 5): family "vulkan-<vendorID>-<deviceID>"
 * (lowercase hex), abi_min = abi_max = the driver's ABI, compiler_version the driver version,
 * profile_version 0 (any). Devices of one identity (two of one model on one driver) give one
 * target. libpsdb does not link the Vulkan loader: it opens libvulkan.so.1 for the call and
 * closes it again, so libpsdb loads on machines without Vulkan. The loader reads its usual
 * environment (VK_ICD_FILENAMES, VK_DRIVER_FILES, ...). *count in is the capacity (out may be NULL
 * when it is 0); on return it is the number of targets the machine has (0 on any failure).
 * Statuses: PSDB_S_OK; PSDB_E_MORE_DATA when the capacity is short (the first *count-in targets
 * are written); PSDB_E_ADAPTER_NOT_FOUND when the machine has no usable Vulkan device: no loader
 * can be loaded, the loader finds no driver, or the drivers report no device (psdb_error_last
 * says which); PSDB_E_NOTIMPL when this libpsdb was built without the Vulkan headers;
 * PSDB_E_INVALIDARG on NULL count or out NULL with a non-zero *count; PSDB_E_OUTOFMEMORY;
 * PSDB_E_FAIL when a Vulkan call fails otherwise. Every failure is in psdb_error_last.
 * Installing for them is two calls (as `psdb install --target auto` does):
 *     psdb_precompile_target t[16];
 *     uint32_t n = 16;
 *     if (PSDB_SUCCEEDED(psdb_client_local_targets(t, &n))) {
 *         psdb_install_desc d = {.exe_path = exe, .app = &app, .targets = t, .num_targets = n};
 *         hr = psdb_client_install(client, &d, results);   // results: n entries
 *     }
 * psdb_client_install refuses two targets of one family (PSDB_E_INVALIDARG), which two devices of
 * one model on different driver builds give. Thread-safe (creates and destroys its own instance);
 * it may take as long as creating a Vulkan instance (loading the drivers). */
PSDB_API psdb_hr psdb_client_local_targets(psdb_precompile_target *out, uint32_t *count);

#ifdef __cplusplus
}
#endif
#endif
