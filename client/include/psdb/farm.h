/* psdb/farm.h - the compile farm's client calls (schema/HTTP.md, "Farm"): the SODBs a studio
 * published on psdbd, and the jobs a compile worker claims, compiles and finishes. `psdb worker`,
 * `psdb jobs` and `psdb install --compile-missing` are written on these calls. */
#ifndef PSDB_FARM_H
#define PSDB_FARM_H

#include "types.h"
#include "client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lists the SODBs published for one version of an application (GET /v1/sodbs), newest serial
 * first, each a manifest of kind PSDB_MANIFEST_SODB (psdb_manifest_parse). Nothing is verified
 * here: psdb_client_verify_manifest checks a manifest's SODB statement against the client's
 * trusted keys, and psdb_client_download fetches and verifies the file. On success *out is an
 * array of *count manifests (NULL and 0 for none), the caller's: psdb_manifest_list_free.
 * Statuses: PSDB_S_OK (also for none); PSDB_E_INVALIDARG (NULL c, app, out or count, an empty
 * app, HTTP 400); PSDB_E_ACCESS (401/403); PSDB_E_NETWORK; PSDB_E_PROTOCOL (the answer is not a
 * list of SODB manifests); PSDB_E_CANCELLED; PSDB_E_OUTOFMEMORY. Same thread rule as the
 * client. */
PSDB_API psdb_hr psdb_client_list_sodbs(psdb_client *c, const char *app, uint64_t app_version,
                                        psdb_manifest ***out, uint32_t *count);
/* Frees n manifests of psdb_client_list_sodbs and the array. NULL is a no-op; cannot fail. */
PSDB_API void psdb_manifest_list_free(psdb_manifest **v, uint32_t n);

/* One compile job as psdbd describes it (schema/HTTP.md, JOB). Every string is owned by it. */
typedef struct psdb_farm_job {
    uint64_t id;
    char *state; /* "queued", "leased", "done", "held" */
    char *app_name;
    uint64_t app_version;
    uint8_t sodb_sha256[32]; /* the SODB it compiles */
    char *sodb_id;
    char *family; /* the target: family, ABI range, profile version (0: any) */
    uint64_t abi_min, abi_max, profile_version;
    uint64_t demand, attempts;
    char *json; /* the job as served, compact */
} psdb_farm_job;

/* A job handed to a worker by psdb_client_farm_claim. */
typedef struct psdb_farm_claim {
    psdb_farm_job job;
    char *lease;         /* the opaque lease token for extend, done and fail */
    uint64_t serial;     /* the serial the worker's PSDB is published with */
    psdb_manifest *base; /* the newest PSDB of an earlier version for the same family and ABI
                            (a base for an incremental compile); NULL: none */
} psdb_farm_claim;

/* Announces a worker and the one target it compiles for (POST /v1/workers; a compiler token):
 * psdbd creates a job for every application whose newest SODB has no PSDB for that target.
 * *jobs_created (may be NULL) gets how many. worker: a name of 1 to 128 bytes by psdb's rule for
 * names. Statuses: PSDB_S_OK; PSDB_E_INVALIDARG (NULL c, worker or t, an empty family, HTTP 400);
 * PSDB_E_ACCESS (401/403: not a compiler token); PSDB_E_NETWORK (no answer after the client's
 * retries); PSDB_E_PROTOCOL; PSDB_E_CANCELLED; PSDB_E_OUTOFMEMORY. */
PSDB_API psdb_hr psdb_client_farm_announce(psdb_client *c, const char *worker, const psdb_target *t,
                                           uint64_t *jobs_created);

/* Claims the highest-demand job for t (POST /v1/jobs/claim) with a lease of lease_s seconds
 * (0: 60). PSDB_S_OK with *out the claim (the caller's: psdb_farm_claim_free); PSDB_S_FALSE with
 * *out NULL when there is nothing to do (204). The statuses of psdb_client_farm_announce
 * otherwise (*out NULL). A claim whose answer is lost is retried like every small request: the
 * job claimed by the lost answer is handed out again when its lease expires. */
PSDB_API psdb_hr psdb_client_farm_claim(psdb_client *c, const char *worker, const psdb_target *t,
                                        uint32_t lease_s, psdb_farm_claim **out);
/* Frees a claim. NULL is a no-op; cannot fail. */
PSDB_API void psdb_farm_claim_free(psdb_farm_claim *cl);

/* Extends a claim's lease by lease_s seconds from now (POST /v1/jobs/{id}/extend; 0: 60).
 * PSDB_S_OK; PSDB_E_ALREADY_EXISTS (409 lease_lost: the lease expired and the job went to
 * another worker, whose result counts: stop working on it); the statuses of announce. */
PSDB_API psdb_hr psdb_client_farm_extend(psdb_client *c, const psdb_farm_claim *cl,
                                         uint32_t lease_s);
/* Finishes a claim with the PSDB published for it (POST /v1/jobs/{id}/done): psdb_id is the id
 * of the manifest its publish answered. Statuses as psdb_client_farm_extend. */
PSDB_API psdb_hr psdb_client_farm_done(psdb_client *c, const psdb_farm_claim *cl,
                                       const char *psdb_id);
/* Gives a claim back as failed (POST /v1/jobs/{id}/fail) with one line saying why (at most 1024
 * bytes are sent; control characters are replaced by spaces): psdbd queues it again, or holds it
 * after its configured number of attempts. Statuses as psdb_client_farm_extend. */
PSDB_API psdb_hr psdb_client_farm_fail(psdb_client *c, const psdb_farm_claim *cl,
                                       const char *error);

/* The jobs and workers psdbd knows (GET /v1/jobs[?state=S]; state NULL: all): on success *json
 * (NUL-terminated, the caller's: free()) is the server's answer, an object with the arrays "jobs"
 * and "workers", and *size its length. Statuses: PSDB_S_OK; PSDB_E_INVALIDARG (NULL argument, a
 * state psdbd does not know: HTTP 400); PSDB_E_ACCESS; PSDB_E_NETWORK; PSDB_E_PROTOCOL (not such
 * an object, or over 64 MiB); PSDB_E_CANCELLED; PSDB_E_OUTOFMEMORY. */
PSDB_API psdb_hr psdb_client_farm_jobs(psdb_client *c, const char *state, char **json,
                                       size_t *size);

/* Parses one JOB object (size bytes of JSON) into *out, whose strings the caller frees with
 * psdb_farm_job_clear. PSDB_E_PROTOCOL when it is not a job (a field missing or malformed);
 * PSDB_E_INVALIDARG on NULL; PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_farm_job_parse(const char *json, size_t size, psdb_farm_job *out);
/* Frees the strings of a job (not the struct) and zeroes it. NULL is a no-op. */
PSDB_API void psdb_farm_job_clear(psdb_farm_job *job);

#ifdef __cplusplus
}
#endif
#endif
