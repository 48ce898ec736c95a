/* build_here.c - psdb install --compile-missing: a target the server has no PSDB for, compiled on
 * this machine from the application version's published SODB.
 *
 * DESIGN
 * The SODB is trusted as a download is: its SODB statement must verify with a trusted key and the
 * file must match the manifest's size and SHA-256 (psdb_client_download) before anything reads
 * it. The PSDB it gives is no one's signed promise: it is registered with built_here set and the
 * SODB's digest (schema/REGISTRY.md, version 3), so that a launcher can tell it from a published
 * one and replace it when the server has one. Everything happens in the registry's store while
 * the install holds it shared: the SODB and the compile's output are .part files there (a crash
 * leaves them to the sweep), and the finished PSDB is renamed to <sha256>.psdb like a download.
 *
 * An SODB's digest names its pipelines, so its compile for a target gives what an earlier
 * compile of it gave: a PSDB the registry holds as built here from the same SODB for the family
 * is kept when its file still hashes to its registered digest and opens for the target (checked
 * as the compile's output is), and nothing is downloaded or compiled. A launcher that runs
 * --compile-missing at every start thus compiles once per SODB, not once per start; a new SODB
 * (another version or serial: another digest) is compiled. */
#include "delivery/client_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/farm.h"

#include "common/error.h"
#include "common/fdio.h"
#include "common/hash.h"
#include "common/parse.h"
#include "common/status_map.h"
#include "registry/store.h"

/* The progress callback and the cancel, told about the compile as about a download. */
typedef struct compile_watch {
    psdb_client *c;
    const char *what;
} compile_watch;

static int ref_progress(uint64_t done, uint64_t total, void *ctx)
{
    compile_watch *w = ctx;
    psdb_progress p = {w->what, done, total, 1};
    if (w->c->progress)
        w->c->progress(&p, w->c->progress_ctx);
    return psdb__transport_should_stop(w->c, &p);
}

/* A retired SODB (psdbd keeps its manifest, "retired": true) is compiled by no one. */
static int is_retired(const psdb_manifest *m)
{
    json_t *doc = json_loads(m->json, 0, NULL);
    int retired = json_is_true(json_object_get(doc, "retired"));
    json_decref(doc);
    return retired;
}

/* The newest SODB of the application version that a trusted key signed, for exactly this
 * application (name, version; exe filename and engine when the request names them). */
static psdb_hr pick_sodb(psdb_client *c, const psdb_install_desc *d, psdb_manifest **out)
{
    psdb_manifest **v = NULL;
    uint32_t n = 0, refused = 0;
    char ver[40];
    psdb_hr hr = psdb_client_list_sodbs(c, d->app->name, d->app->version, &v, &n);
    *out = NULL;
    if (PSDB_FAILED(hr))
        goto cleanup;
    for (uint32_t i = 0; i < n && !*out; i++) {
        const psdb_app_desc *a = &v[i]->app.desc;
        if (is_retired(v[i]))
            continue;
        if (strcmp(a->name, d->app->name) != 0 || a->version != d->app->version ||
            (d->app->exe_filename &&
             strcasecmp(a->exe_filename ? a->exe_filename : "", d->app->exe_filename) != 0) ||
            (d->app_id && memcmp(v[i]->app.app_id, d->app_id, 16) != 0) ||
            PSDB_FAILED(psdb_client_verify_manifest(c, v[i]))) {
            refused++;
            continue;
        }
        *out = v[i];
        v[i] = NULL;
    }
    if (!*out) {
        psdb__format_version(d->app->version, ver, sizeof(ver));
        hr = refused ? psdb__error_set(PSDB_E_SIGNATURE,
                                       "no SODB of %s %s verifies with a trusted key for this "
                                       "application (%u published)",
                                       d->app->name, ver, refused)
                     : psdb__error_set(PSDB_E_NOT_FOUND,
                                       "the server has neither a PSDB nor an SODB of %s %s",
                                       d->app->name, ver);
    }
cleanup:
    psdb_manifest_list_free(v, n);
    return hr;
}

/* The compiled file must open for the target and be of the application asked for. */
static psdb_hr check_built(const char *path, const psdb_install_desc *d,
                           const psdb_precompile_target *t)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_adapter_desc ad = {.family = t->family,
                            .abi_min = t->abi_min,
                            .abi_max = t->abi_max,
                            .compiler_version = t->compiler_version,
                            .app_profile_version = t->profile_version};
    psdb_hr hr = psdb_file_open(path, &ad, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(f, &info);
    if (PSDB_FAILED(hr))
        psdb__error_set(hr, "the PSDB compiled here does not fit target %s:%llu-%llu (%s)",
                        t->family, (unsigned long long)t->abi_min, (unsigned long long)t->abi_max,
                        psdb_hr_str(hr));
    else if (strcmp(info.identity.desc.name, d->app->name) != 0 ||
             info.identity.desc.version != d->app->version)
        hr = psdb__error_set(PSDB_E_INTEGRITY,
                             "the PSDB compiled here is for another application than the SODB's");
    psdb_file_release(f);
    return hr;
}

/* The PSDB have finds as built here from sodb_hex, when its file in store_dir still hashes to its
 * registered digest and opens for t (see DESIGN): its path (malloc'd) in *path and digest in sha;
 * S_FALSE when it is the exe path's own row, S_OK another executable's. PSDB_E_NOT_FOUND when
 * there is none to keep (not registered, missing, damaged, for another target): the caller
 * compiles. PSDB_E_OUTOFMEMORY. */
static psdb_hr keep_built(const psdb__built_lookup *have, const psdb_install_desc *d,
                          const psdb_precompile_target *t, const char *store_dir,
                          const char *sodb_hex, char **path, uint8_t sha[32])
{
    psdb_hr hr = PSDB_E_NOT_FOUND;
    char sha_hex[65];
    uint8_t want[32], got[32];
    int own = 0;
    *path = NULL;
    if (!have || PSDB_FAILED(have->find(have->ctx, sodb_hex, sha_hex, &own)) ||
        psdb__unhex(sha_hex, want, sizeof(want)) != 0)
        goto cleanup;
    if (asprintf(path, "%s/%s.psdb", store_dir, sha_hex) < 0) {
        *path = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "out of memory");
        goto cleanup;
    }
    /* Re-verified, never trusted by its name: a damaged or missing file is compiled again. */
    if (PSDB_FAILED(psdb__file_sha256(*path, PSDB__OPEN_OURS, got)) ||
        memcmp(got, want, sizeof(want)) != 0 || PSDB_FAILED(check_built(*path, d, t)))
        goto cleanup;
    memcpy(sha, want, sizeof(want));
    hr = own ? PSDB_S_FALSE : PSDB_S_OK;
cleanup:
    if (hr != PSDB_S_OK && hr != PSDB_S_FALSE) {
        free(*path);
        *path = NULL;
    }
    return hr;
}

/* e and r for the PSDB at path (malloc'd, taken), compiled here from sodb: status in r. */
static void fill_built(psdb__install_entry *e, psdb_install_result *r,
                       const psdb_precompile_target *t, const psdb_manifest *sodb, char *path,
                       const uint8_t sha[32], psdb_hr status, uint64_t downloaded)
{
    psdb__hex(sha, 32, e->sha256);
    psdb__hex(sodb->sha256, 32, e->sodb_sha256);
    e->built_here = 1;
    e->family = t->family;
    e->psdb_path = path;
    if (r) {
        struct stat st;
        r->status = status;
        r->built_here = 1;
        memcpy(r->sha256, sha, 32);
        memcpy(r->sodb_sha256, sodb->sha256, 32);
        r->size = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
        r->bytes_downloaded = downloaded;
    }
}

psdb_hr psdb__install_build_here(psdb_client *c, const psdb_install_desc *d,
                                 const psdb_precompile_target *t, const char *store_dir,
                                 const psdb__built_lookup *have, psdb__install_entry *e,
                                 psdb_install_result *r)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_manifest *sodb = NULL;
    char sodb_hex[65], sha_hex[65], *sodb_path = NULL, *out = NULL, *final = NULL;
    uint8_t sha[32];
    int fd = -1, created = 0;
    char err[512] = "";

    if (PSDB_FAILED(hr = pick_sodb(c, d, &sodb)))
        goto cleanup;
    psdb__hex(sodb->sha256, 32, sodb_hex);
    hr = keep_built(have, d, t, store_dir, sodb_hex, &final, sha);
    if (hr == PSDB_S_OK || hr == PSDB_S_FALSE) {
        fill_built(e, r, t, sodb, final, sha, hr, 0);
        final = NULL;
        goto cleanup;
    }
    if (hr != PSDB_E_NOT_FOUND)
        goto cleanup;
    hr = PSDB_S_OK;
    if (asprintf(&sodb_path, "%s/%s.sodb", store_dir, sodb_hex) < 0)
        sodb_path = NULL;
    if (asprintf(&out, "%s/build-%s-XXXXXX.part", store_dir, sodb_hex) < 0)
        out = NULL;
    if (!sodb_path || !out) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "out of memory");
        goto cleanup;
    }
    /* Verified (statement and digest) before it is read; resumed like any download. */
    if (PSDB_FAILED(hr = psdb_client_download(c, sodb, sodb_path)))
        goto cleanup;
    /* A name of its own: two installs may build the same target at once. */
    if ((fd = mkstemps(out, 5)) < 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "mkstemps %s: %s", out, strerror(errno));
        goto cleanup;
    }
    close(fd);
    created = 1;
    psdb_progress before = {"compile", 0, 0, 1};
    if (psdb__transport_should_stop(c, &before)) {
        hr = psdb__error_set(PSDB_E_CANCELLED, "cancelled by the progress callback before the "
                                               "compile");
        goto cleanup;
    }
    if (strncmp(t->family, "vulkan-", 7) == 0) {
        /* libpsdb does not link the Vulkan loader: the driver's compile is the caller's. */
        if (!d->compile) {
            hr = psdb__error_set(PSDB_E_NOTIMPL,
                                 "compile: target %s is a Vulkan device's, and the install has "
                                 "no compile hook for it",
                                 t->family);
            goto cleanup;
        }
        hr = d->compile(sodb_path, t, out, d->compile_ctx, err, sizeof(err));
        if (PSDB_FAILED(hr)) {
            psdb__error_set(hr, "compile: %s", err[0] ? err : psdb_hr_str(hr));
            goto cleanup;
        }
    } else {
        compile_watch w = {c, "compile"};
        psdb_sodb_compile_desc cd = {
            .target = {t->family, t->abi_max, t->compiler_version, t->profile_version},
            .progress = ref_progress,
            .progress_ctx = &w};
        if (PSDB_FAILED(hr = psdb_sodb_compile(sodb_path, &cd, out, NULL))) {
            psdb__error_set(hr, "compile: %s", psdb_error_last());
            goto cleanup;
        }
    }
    if (PSDB_FAILED(hr = check_built(out, d, t)))
        goto cleanup;
    if (PSDB_FAILED(hr = psdb__file_sha256(out, PSDB__OPEN_OURS, sha))) {
        psdb__error_set(hr, "read %s: %s", out, psdb_hr_str(hr));
        goto cleanup;
    }
    psdb__hex(sha, 32, sha_hex);
    if (asprintf(&final, "%s/%s.psdb", store_dir, sha_hex) < 0) {
        final = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "out of memory");
        goto cleanup;
    }
    if (rename(out, final) != 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "rename %s: %s", out, strerror(errno));
        goto cleanup;
    }
    psdb__fsync_dir_of(final);
    fill_built(e, r, t, sodb, final, sha, PSDB_S_OK, sodb->size);
    final = NULL;
cleanup:
    if (sodb_path)
        unlink(sodb_path); /* its .part, if any, stays for the next attempt to resume */
    if (created && PSDB_FAILED(hr))
        unlink(out); /* this call's own file: nothing else has that name */
    free(sodb_path);
    free(out);
    free(final);
    psdb_manifest_free(sodb);
    return hr;
}
