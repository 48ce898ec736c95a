/* install.c - psdb_client_install: resolve, download, verify and register every target at once.
 *
 * DESIGN
 * Nothing reaches the registry until every target is on disk and checked: downloads land in
 * <root>/psdbs/<sha256>.psdb (content-addressed, so a file that is there under its digest name was
 * verified when it was renamed in), each is opened with libpsdb against its target, and only then
 * does one registry transaction switch the "default" component and record the serials. A crash at
 * any point leaves the previous registration in force; leftover files are collected by the next
 * install's sweep of unreferenced files. */
#include "psdb/client.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "install.h"
#include "util.h"

#define STORE_DIR "psdbs"
#define PART_GRACE_SECONDS (24 * 3600)

typedef struct path_set {
    char **paths;
    size_t n, cap;
    int oom;
} path_set;

static void path_set_add(const char *path, void *ctx)
{
    path_set *s = ctx;
    if (s->oom)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **p = realloc(s->paths, cap * sizeof(*p));
        if (!p) {
            s->oom = 1;
            return;
        }
        s->paths = p;
        s->cap = cap;
    }
    s->paths[s->n] = psdb__strdup(path);
    if (!s->paths[s->n])
        s->oom = 1;
    else
        s->n++;
}

static void path_set_free(path_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->paths[i]);
    free(s->paths);
}

/* Removes files in the store that no registration references. A .part file younger than a day is
 * kept: another installer (another name, same root) may be writing it, or a later install may
 * resume it. */
static void sweep_store(psdb_installer *inst, const char *store)
{
    path_set keep = {0};
    DIR *d = NULL;
    if (PSDB_FAILED(psdb__registry_foreach_path(inst, path_set_add, &keep)) || keep.oom)
        goto cleanup; /* when in doubt, keep everything */
    d = opendir(store);
    if (!d)
        goto cleanup;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *full = NULL;
        if (asprintf(&full, "%s/%s", store, e->d_name) < 0)
            break;
        int referenced = 0;
        for (size_t i = 0; i < keep.n && !referenced; i++)
            referenced = strcmp(keep.paths[i], full) == 0;
        size_t len = strlen(e->d_name);
        struct stat st;
        if (!referenced && len > 5 && strcmp(e->d_name + len - 5, ".part") == 0 &&
            stat(full, &st) == 0 && time(NULL) - st.st_mtime < PART_GRACE_SECONDS)
            referenced = 1;
        if (!referenced)
            unlink(full);
        free(full);
    }
cleanup:
    if (d)
        closedir(d);
    path_set_free(&keep);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Opens the downloaded PSDB as a device of that target would and checks that it is what the
 * manifest says it is, field by field. Sets the client's error. */
static psdb_hr check_psdb(psdb_client *c, const char *path, const psdb_precompile_target *t,
                          const psdb_manifest *m)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_adapter_desc ad = {.family = t->family,
                            .abi_min = t->abi_min,
                            .abi_max = t->abi_max,
                            .app_profile_version = t->profile_version};
    psdb_hr hr;
    if (!t->profile_version)
        ad.app_profile_version = m->target.profile_version; /* "any" profile was asked for */
    hr = psdb_file_open(path, &ad, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(f, &info);
    if (PSDB_FAILED(hr))
        psdb__client_error(c, "install: %s does not fit target %s:%llu-%llu: %s", path, t->family,
                           (unsigned long long)t->abi_min, (unsigned long long)t->abi_max,
                           psdb_hr_str(hr));
    else
        hr = psdb__client_check_file(c, path, &info, m);
    psdb_file_release(f);
    return hr;
}

psdb_hr psdb_client_install(psdb_client *c, const psdb_install_desc *d,
                            psdb_install_result *results)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_installer *inst = NULL;
    psdb_manifest **manifests = NULL;
    psdb__install_entry *entries = NULL;
    char *store = NULL;
    const char *exe_filename = NULL;
    uint32_t n = 0, i;

    if (!c || !d || !d->exe_path || !*d->exe_path || !d->app || !d->app->name || !d->app->version ||
        !d->targets || d->num_targets == 0)
        return PSDB_E_INVALIDARG;
    n = d->num_targets;
    for (i = 0; i < n; i++) {
        if (!d->targets[i].family[0])
            return PSDB_E_INVALIDARG;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(d->targets[i].family, d->targets[j].family) == 0) {
                psdb__client_error(c, "install: family %s is named by two targets",
                                   d->targets[i].family);
                return PSDB_E_INVALIDARG;
            }
    }
    if (results)
        memset(results, 0, n * sizeof(*results));
    psdb_installer_desc idesc = {.name = d->installer_name ? d->installer_name : "psdb",
                                 .scope = PSDB_SCOPE_USER,
                                 .root_dir = d->registry_dir};
    hr = psdb_installer_open(&idesc, &inst);
    if (PSDB_FAILED(hr)) {
        psdb__client_error(c, "install: installer '%s': %s", idesc.name,
                           hr == PSDB_E_BUSY ? "another install of it is running"
                                             : psdb_hr_str(hr));
        goto cleanup;
    }
    /* Registrations hold absolute paths: the runtime opens them from any working directory. */
    char *root = realpath(psdb__installer_root(inst), NULL);
    if (!root || asprintf(&store, "%s/" STORE_DIR, root) < 0) {
        store = NULL;
        hr = root ? PSDB_E_OUTOFMEMORY : PSDB_E_IO;
        free(root);
        goto cleanup;
    }
    free(root);
    if (mkdir(store, 0755) != 0 && errno != EEXIST) {
        hr = errno == EACCES || errno == EROFS ? PSDB_E_ACCESS : PSDB_E_IO;
        psdb__client_error(c, "install: mkdir %s: %s", store, strerror(errno));
        goto cleanup;
    }
    manifests = calloc(n, sizeof(*manifests));
    entries = calloc(n, sizeof(*entries));
    if (!manifests || !entries) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (i = 0; i < n; i++) {
        const psdb_precompile_target *t = &d->targets[i];
        psdb_install_result *r = results ? &results[i] : NULL;
        uint64_t have_serial = 0;
        char have_sha[65] = "";
        char *path = NULL;

        hr = psdb_client_resolve(c, d->app, t, &manifests[i]);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__client_check_install(c, manifests[i], d, t);
        if (r)
            r->status = hr;
        if (PSDB_FAILED(hr))
            goto cleanup;
        const psdb_manifest *m = manifests[i];
        if (r) {
            r->serial = m->serial;
            r->size = m->size;
            memcpy(r->sha256, m->sha256, 32);
        }
        psdb__hex(m->sha256, 32, entries[i].sha256);
        entries[i].family = t->family;
        entries[i].serial = m->serial;
        psdb_hr known =
            psdb__registry_installed(inst, d->exe_path, t->family, &have_serial, have_sha);
        if (PSDB_SUCCEEDED(known) && m->serial < have_serial && !d->allow_downgrade) {
            hr = PSDB_E_DOWNGRADE;
            psdb__client_error(c,
                               "install: %s offers serial %llu for %s but %llu is installed "
                               "(--allow-downgrade to accept)",
                               c ? "the server" : "", (unsigned long long)m->serial, t->family,
                               (unsigned long long)have_serial);
            if (r)
                r->status = hr;
            goto cleanup;
        }
        if (asprintf(&path, "%s/%s.psdb", store, entries[i].sha256) < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        entries[i].psdb_path = path;
        int same =
            PSDB_SUCCEEDED(known) && strcmp(have_sha, entries[i].sha256) == 0 && file_exists(path);
        if (!same) {
            /* Verifies the signature even when the file is already in the store. */
            hr = psdb_client_verify_manifest(c, m);
            if (PSDB_SUCCEEDED(hr) && !file_exists(path))
                hr = psdb_client_download(c, m, path);
            if (PSDB_FAILED(hr)) {
                if (r)
                    r->status = hr;
                goto cleanup;
            }
        }
        hr = check_psdb(c, path, t, m);
        if (PSDB_FAILED(hr)) {
            if (!same)
                unlink(path);
            if (r)
                r->status = hr;
            goto cleanup;
        }
        if (r)
            r->status = same ? PSDB_S_FALSE : PSDB_S_OK;
    }
    exe_filename = strrchr(d->exe_path, '/');
    psdb_app_desc app = *d->app;
    if (!app.exe_filename)
        app.exe_filename = exe_filename ? exe_filename + 1 : d->exe_path;
    hr = psdb__registry_install(inst, d->exe_path, &app, d->app_id, n, entries, d->allow_downgrade);
    if (PSDB_FAILED(hr)) {
        psdb__client_error(c, "install: registry update: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    sweep_store(inst, store);
cleanup:
    for (i = 0; manifests && i < n; i++)
        psdb_manifest_free(manifests[i]);
    for (i = 0; entries && i < n; i++)
        free((char *)entries[i].psdb_path);
    free(manifests);
    free(entries);
    free(store);
    psdb_installer_release(inst);
    return hr;
}
