/* install.c - psdb_client_install: resolve, download, verify and register every target at once.
 *
 * DESIGN
 * Nothing reaches the registry until every target is on disk and checked: downloads land in
 * <root>/psdbs/<sha256>.psdb (content-addressed and shared by every installer of the root), each
 * is hashed and opened with libpsdb against its target, and only then does one registry
 * transaction switch the "default" component and record the serials. The whole install holds the
 * store lock shared (store.h), so no sweep can remove a file between its arrival and the commit.
 * A file already in the store is hashed, never trusted by its name: a damaged or missing file is
 * downloaded again even when the serial is unchanged. A crash at any point leaves the previous
 * registration in force; leftover files are collected by a later sweep.
 *
 * An installer name is open once per root (MODEL B1), yet a launcher installs many applications
 * at once under its one name, one client per thread. Installs of one process therefore share the
 * installer handle of a (registry_dir, name) pair: the first opens it, the last releases it, and a
 * mutex gives the handle (its SQLite connection) to one thread at a time for the short registry
 * steps, while resolves and downloads run in parallel. Another process, or a handle opened with
 * psdb_installer_open, still makes the install PSDB_E_BUSY. */
#include "psdb/client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "delivery/client_int.h"
#include "delivery/delta.h"
#include "registry/install.h"
#include "registry/registry.h"
#include "registry/store.h"
#include "common/buf.h"
#include "common/fdio.h"
#include "common/hash.h"

/* One installer handle shared by the installs of this process that name the same root and
 * installer (see DESIGN). */
typedef struct shared_installer {
    struct shared_installer *next;
    char *root_dir; /* as the install desc spells it; "" for the default root */
    char *name;
    psdb_installer *inst;
    unsigned refs;       /* under g_shared_lock */
    pthread_mutex_t use; /* held while a thread calls the registry through inst */
} shared_installer;

static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static shared_installer *g_shared; /* under g_shared_lock */

static void shared_free(shared_installer *s)
{
    if (!s)
        return;
    psdb_installer_release(s->inst);
    pthread_mutex_destroy(&s->use);
    free(s->root_dir);
    free(s->name);
    free(s);
}

/* The process's handle for desc's root and name, opened when no install of this process holds
 * it. The statuses of psdb_installer_open. */
static psdb_hr shared_acquire(const psdb_installer_desc *desc, shared_installer **out)
{
    psdb_hr hr = PSDB_S_OK;
    shared_installer *s = NULL;
    const char *root = desc->root_dir ? desc->root_dir : "";
    *out = NULL;
    pthread_mutex_lock(&g_shared_lock);
    for (s = g_shared; s; s = s->next)
        if (strcmp(s->root_dir, root) == 0 && strcmp(s->name, desc->name) == 0)
            break;
    if (s) {
        s->refs++;
        *out = s;
        s = NULL;
        goto cleanup;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_mutex_init(&s->use, NULL) != 0) {
        free(s);
        s = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    s->root_dir = psdb__strdup(root);
    s->name = psdb__strdup(desc->name);
    if (!s->root_dir || !s->name) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* Opened under the list lock: a second thread of this process waits for the first's open
     * instead of failing with PSDB_E_BUSY against it. */
    hr = psdb_installer_open(desc, &s->inst);
    if (PSDB_FAILED(hr))
        goto cleanup;
    s->refs = 1;
    s->next = g_shared;
    g_shared = s;
    *out = s;
    s = NULL;
cleanup:
    pthread_mutex_unlock(&g_shared_lock);
    shared_free(s);
    return hr;
}

/* Drops one install's reference; the last one closes the installer. NULL is a no-op. */
static void shared_release(shared_installer *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&g_shared_lock);
    if (--s->refs == 0) {
        for (shared_installer **p = &g_shared; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        /* Closed under the list lock, as it was opened: a thread that finds no handle now opens
         * one only once this one has let go of the installer's lock, not against it (it would
         * fail with PSDB_E_BUSY against its own process). */
        shared_free(s);
    }
    pthread_mutex_unlock(&g_shared_lock);
}

/* Whether path is a regular file of ours with this SHA-256. Anything else at the name (a link to
 * a file elsewhere, a FIFO, another user's file) is never taken as the store's file: the install
 * downloads and renames its own file over it. */
static int file_has_digest(const char *path, const uint8_t sha256[32])
{
    uint8_t got[32];
    return PSDB_SUCCEEDED(psdb__file_sha256(path, PSDB__OPEN_OURS, got)) &&
           memcmp(got, sha256, 32) == 0;
}

/* Downloads m to path unless another process has put it there meanwhile. Installs of one digest
 * serialize on its .part (another launcher may be installing the same PSDB for another
 * application): the second finds the first's file, hashes it and is done. */
static psdb_hr fetch(psdb_client *c, const psdb_manifest *m, const char *path,
                     const char *const *sources, size_t nsources, psdb_install_result *r)
{
    psdb_hr hr = PSDB_S_OK;
    char *part = NULL, why[128] = "";
    int fd = -1, done = 0;
    if (asprintf(&part, "%s.part", path) < 0) {
        part = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__store_lock_part(part, &fd, why, sizeof(why));
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "install: lock %s: %s", part, why);
        goto cleanup;
    }
    done = file_has_digest(path, m->sha256);
    if (!done && nsources > 0) {
        /* An update: rebuild from the PSDBs held when that fetches less (delta.h). */
        psdb__delta_outcome o;
        hr = psdb__client_delta(c, m, sources, nsources, path, &o);
        if (hr == PSDB_E_CANCELLED)
            goto cleanup;
        done = hr == PSDB_S_OK;
        if (r) {
            r->delta = done;
            r->bytes_downloaded = o.downloaded;
            r->delta_sources = done ? o.sources : 0;
            r->delta_resumed = done ? o.resumed : 0;
            snprintf(r->delta_skipped, sizeof(r->delta_skipped), "%s", done ? "" : o.why_not);
        }
        hr = PSDB_S_OK;
    }
    if (!done) {
        hr = psdb_client_download(c, m, path);
        done = PSDB_SUCCEEDED(hr);
        if (r && done)
            r->bytes_downloaded += m->size; /* a full download counts the file's size */
    }
cleanup:
    /* A .part left after a failed download is kept for resuming; after success it is gone (renamed
     * into place) or, when another process did the work, an empty file of ours to remove. */
    if (part)
        psdb__store_unlock_part(part, fd, done);
    free(part);
    return hr;
}

/* The PSDBs an update's delta takes values from: the one installed for the same exe path and
 * family first, then others registered for the family: those of applications of the same name
 * (its other executables and versions) before the rest, the most recently written first within
 * each (the games that share a recent engine), DELTA_MAX_SOURCES in all. Any other file costs a
 * read of its digest index, a walk only when it holds a missing value (delta.c). */
#define DELTA_MAX_SOURCES 16
#define DELTA_MAX_CANDIDATES 4096 /* registered paths looked at, per group */

typedef struct source_list {
    char *paths[DELTA_MAX_SOURCES];
    dev_t dev[DELTA_MAX_SOURCES];
    ino_t ino[DELTA_MAX_SOURCES];
    size_t n;
    const char *skip; /* the file being installed */
    int oom;
} source_list;

/* A readable regular file of ours, once (any spelling of a path names one file). A source is
 * read by the delta and walked by the value map reader: a link to elsewhere, a FIFO (which would
 * block the reader) or another user's file is not one. */
static void add_source(source_list *s, const char *path)
{
    struct stat st;
    int fd = -1;
    if (s->n == DELTA_MAX_SOURCES || s->oom || strcmp(path, s->skip) == 0)
        goto cleanup;
    fd = psdb__open_file(path, O_RDONLY, 0, PSDB__OPEN_OURS, NULL, 0);
    if (fd < 0 || fstat(fd, &st) != 0)
        goto cleanup;
    for (size_t k = 0; k < s->n; k++)
        if (s->dev[k] == st.st_dev && s->ino[k] == st.st_ino)
            goto cleanup;
    if (!(s->paths[s->n] = strdup(path))) {
        s->oom = 1;
        goto cleanup;
    }
    s->dev[s->n] = st.st_dev;
    s->ino[s->n] = st.st_ino;
    s->n++;
cleanup:
    if (fd >= 0)
        close(fd);
}

typedef struct candidate {
    char *path;
    struct timespec mtime;
} candidate;

typedef struct candidates {
    candidate *v;
    size_t n, cap;
    int oom;
} candidates;

static void add_candidate(const char *path, void *ctx)
{
    candidates *c = ctx;
    struct stat st;
    if (c->oom || c->n == DELTA_MAX_CANDIDATES || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        candidate *x = realloc(c->v, cap * sizeof(*x));
        if (!x) {
            c->oom = 1;
            return;
        }
        c->v = x;
        c->cap = cap;
    }
    if (!(c->v[c->n].path = strdup(path))) {
        c->oom = 1;
        return;
    }
    c->v[c->n++].mtime = st.st_mtim;
}

static int newest_first(const void *a, const void *b)
{
    const struct timespec *x = &((const candidate *)a)->mtime, *y = &((const candidate *)b)->mtime;
    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? 1 : -1;
    if (x->tv_nsec != y->tv_nsec)
        return x->tv_nsec < y->tv_nsec ? 1 : -1;
    return strcmp(((const candidate *)a)->path, ((const candidate *)b)->path);
}

static psdb_hr delta_sources(shared_installer *shared, const psdb__store *store,
                             const char *have_sha, const char *family, const char *app_name,
                             source_list *s)
{
    char *own = NULL;
    psdb_hr hr = PSDB_S_OK;
    if (asprintf(&own, "%s/%s.psdb", store->dir, have_sha) < 0) {
        own = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    add_source(s, own);
    for (int group = 0; group < 2 && s->n < DELTA_MAX_SOURCES; group++) {
        candidates c = {0};
        pthread_mutex_lock(&shared->use);
        /* A registry that cannot be listed leaves fewer sources, never a failed install. */
        (void)psdb__registry_foreach_path(shared->inst, family, group == 0 ? app_name : NULL,
                                          add_candidate, &c);
        pthread_mutex_unlock(&shared->use);
        if (c.n > 1)
            qsort(c.v, c.n, sizeof(*c.v), newest_first);
        for (size_t i = 0; i < c.n; i++) {
            add_source(s, c.v[i].path);
            free(c.v[i].path);
        }
        free(c.v);
        if (c.oom)
            s->oom = 1;
    }
    if (s->oom)
        hr = PSDB_E_OUTOFMEMORY;
cleanup:
    free(own);
    return hr;
}

/* Opens the downloaded PSDB as a device of that target would and checks that it is what the
 * manifest says it is, field by field. Sets the last error. */
static psdb_hr check_psdb(const char *path, const psdb_precompile_target *t, const psdb_manifest *m)
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
        psdb__error_set(hr, "install: %s does not fit target %s:%llu-%llu: %s", path, t->family,
                        (unsigned long long)t->abi_min, (unsigned long long)t->abi_max,
                        psdb_hr_str(hr));
    else
        hr = psdb__client_check_file(path, &info, m);
    psdb_file_release(f);
    return hr;
}

/* --compile-missing's question to the registry (psdb__built_lookup), asked under its lock. */
typedef struct built_query {
    shared_installer *shared;
    const char *exe_path;
    const char *family;
} built_query;

static psdb_hr find_built(void *ctx, const char *sodb_hex, char sha256[65], int *own)
{
    built_query *q = ctx;
    pthread_mutex_lock(&q->shared->use);
    psdb_hr hr =
        psdb__registry_built_here(q->shared->inst, q->exe_path, q->family, sodb_hex, sha256, own);
    pthread_mutex_unlock(&q->shared->use);
    return hr;
}

/* Records "<what>: <why>" as the last error; without a why, the reason the failing step recorded
 * in psdb_error_last since mark, else its status. */
static void install_fail(psdb_hr hr, unsigned mark, const char *what, const char *why)
{
    char cause[640];
    snprintf(cause, sizeof(cause), "%s",
             why                          ? why
             : psdb__error_mark() != mark ? psdb_error_last()
                                          : psdb_hr_str(hr));
    psdb__error_set(hr, "%s: %s", what, cause);
}

/* Before any work every entry says "not installed" (a failure with nothing else filled), so
 * that no path out of psdb_client_install can leave an entry that reads as installed. */
static void results_begin(psdb_install_result *results, uint32_t n)
{
    for (uint32_t i = 0; results && i < n; i++) {
        memset(&results[i], 0, sizeof(results[i]));
        results[i].status = PSDB_E_FAIL;
    }
}

/* After a failure (hr): each entry says what happened to its target. The one that failed
 * (failed_at; n when the failure concerns every target: the installer, the store, the
 * registration, a cancel) and every target not installed carry hr with no serial, digest or
 * size; those that did not fail themselves are marked skipped. A target found already installed
 * with the same digest keeps its S_FALSE entry: a failed install leaves its registration as it
 * was. */
static void results_end(psdb_install_result *results, uint32_t n, psdb_hr hr, uint32_t failed_at)
{
    for (uint32_t i = 0; results && PSDB_FAILED(hr) && i < n; i++) {
        if (results[i].status == PSDB_S_FALSE && i != failed_at)
            continue;
        memset(&results[i], 0, sizeof(results[i]));
        results[i].status = hr;
        results[i].skipped = failed_at < n && i != failed_at;
    }
}

psdb_hr psdb_client_install(psdb_client *c, const psdb_install_desc *d,
                            psdb_install_result *results)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    shared_installer *shared = NULL;
    psdb_installer *inst = NULL;
    psdb_manifest **manifests = NULL;
    psdb__install_entry *entries = NULL;
    psdb__store store = {.lock_fd = -1};
    const char *exe_filename = NULL;
    uint32_t n = d ? d->num_targets : 0, i, failed_at = d ? d->num_targets : 0;

    results_begin(results, n);
    if (!c || !d) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_install: NULL %s",
                             !c ? "client" : "desc");
        goto cleanup;
    }
    if (!d->exe_path || !*d->exe_path || !d->app || !d->app->name || !d->app->version ||
        !d->targets || d->num_targets == 0) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "install: %s",
                             !d->exe_path || !*d->exe_path ? "no exe_path"
                             : !d->app || !d->app->name    ? "no application name"
                             : !d->app->version            ? "no application version"
                                                           : "no targets");
        goto cleanup;
    }
    for (i = 0; i < n && PSDB_SUCCEEDED(hr); i++) {
        if (!d->targets[i].family[0]) {
            hr = psdb__error_set(PSDB_E_INVALIDARG, "install: target %u has no family", i);
            failed_at = i;
        }
        for (uint32_t j = 0; j < i && PSDB_SUCCEEDED(hr); j++)
            if (strcmp(d->targets[i].family, d->targets[j].family) == 0) {
                hr =
                    psdb__error_set(PSDB_E_INVALIDARG, "install: family %s is named by two targets",
                                    d->targets[i].family);
                failed_at = i;
            }
    }
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb_installer_desc idesc = {.name = d->installer_name ? d->installer_name : "psdb",
                                 .scope = PSDB_SCOPE_USER,
                                 .root_dir = d->registry_dir};
    unsigned step = psdb__error_mark();
    hr = shared_acquire(&idesc, &shared);
    if (shared)
        inst = shared->inst;
    if (PSDB_FAILED(hr)) {
        /* The registry records why it failed (a damaged or newer database names itself and the
         * way out) in psdb_error_last; a held installer name says nothing of itself. */
        char what[256];
        snprintf(what, sizeof(what), "install: installer '%.200s'", idesc.name);
        install_fail(hr, step, what, hr == PSDB_E_BUSY ? "another install of it is running" : NULL);
        goto cleanup;
    }
    char err[512] = "";
    pthread_mutex_lock(&shared->use);
    hr = psdb__store_open(inst, &store, err, sizeof(err));
    pthread_mutex_unlock(&shared->use);
    if (PSDB_SUCCEEDED(hr)) {
        hr = psdb__store_hold(&store);
        if (PSDB_FAILED(hr))
            snprintf(err, sizeof(err), "store: flock " PSDB__STORE_LOCK " of %s: %s",
                     psdb__installer_root(inst), strerror(errno));
    }
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "install: %s", err[0] ? err : psdb_hr_str(hr));
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

        /* Until this target is through, a failure is its own (results_end). */
        failed_at = i;
        hr = psdb_client_resolve(c, d->app, t, &manifests[i]);
        if (hr == PSDB_E_NOT_FOUND && d->compile_missing) {
            /* The miss is recorded by that resolve; the target is compiled here instead. */
            step = psdb__error_mark();
            pthread_mutex_lock(&shared->use);
            psdb_hr known =
                psdb__registry_installed(inst, d->exe_path, t->family, &have_serial, have_sha);
            pthread_mutex_unlock(&shared->use);
            built_query q = {shared, d->exe_path, t->family};
            psdb__built_lookup have = {find_built, &q};
            hr = psdb__install_build_here(c, d, t, store.dir, &have, &entries[i], r);
            if (PSDB_FAILED(hr)) {
                char what[200];
                snprintf(what, sizeof(what), "install: %.128s: --compile-missing", t->family);
                install_fail(hr, step, what, NULL);
                goto cleanup;
            }
            /* Unsigned and serial-less: it keeps the family's high-water mark. */
            entries[i].serial = PSDB_SUCCEEDED(known) ? have_serial : 0;
            continue;
        }
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__client_check_install(manifests[i], d, t);
        if (PSDB_FAILED(hr))
            goto cleanup;
        const psdb_manifest *m = manifests[i];
        psdb__hex(m->sha256, 32, entries[i].sha256);
        entries[i].family = t->family;
        entries[i].serial = m->serial;
        if (m->statement_version == 2)
            psdb__hex(m->sodb_sha256, 32, entries[i].sodb_sha256);
        pthread_mutex_lock(&shared->use);
        psdb_hr known =
            psdb__registry_installed(inst, d->exe_path, t->family, &have_serial, have_sha);
        pthread_mutex_unlock(&shared->use);
        if (PSDB_SUCCEEDED(known) && m->serial < have_serial && !d->allow_downgrade) {
            hr = psdb__error_set(PSDB_E_DOWNGRADE,
                                 "install: the server offers serial %llu for %s but %llu is "
                                 "installed (--allow-downgrade to accept)",
                                 (unsigned long long)m->serial, t->family,
                                 (unsigned long long)have_serial);
            goto cleanup;
        }
        if (asprintf(&path, "%s/%s.psdb", store.dir, entries[i].sha256) < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            failed_at = n;
            goto cleanup;
        }
        entries[i].psdb_path = path;
        int intact = file_has_digest(path, m->sha256);
        int same = PSDB_SUCCEEDED(known) && strcmp(have_sha, entries[i].sha256) == 0 && intact;
        if (!same) {
            /* Verifies the signature even when the file is already in the store. */
            hr = psdb_client_verify_manifest(c, m);
            source_list src = {.skip = path};
            if (PSDB_SUCCEEDED(hr) && !intact && PSDB_SUCCEEDED(known) && have_sha[0])
                hr = delta_sources(shared, &store, have_sha, t->family, d->app->name, &src);
            if (PSDB_SUCCEEDED(hr) && !intact)
                hr = fetch(c, m, path, (const char *const *)src.paths, src.n, r);
            for (size_t k = 0; k < src.n; k++)
                free(src.paths[k]);
            if (PSDB_FAILED(hr))
                goto cleanup;
        }
        hr = check_psdb(path, t, m);
        if (PSDB_FAILED(hr)) {
            /* Not removed here: its digest is the published one, and another application may
             * register the same file; the sweep removes it if nothing does. check_psdb set the
             * error. */
            goto cleanup;
        }
        /* What this target will be once the registration commits (results_end otherwise). */
        if (r) {
            r->status = same ? PSDB_S_FALSE : PSDB_S_OK;
            r->serial = m->serial;
            r->size = m->size;
            memcpy(r->sha256, m->sha256, 32);
            if (m->statement_version == 2)
                memcpy(r->sodb_sha256, m->sodb_sha256, 32);
        }
    }
    failed_at = n; /* from here on a failure concerns every target */
    /* The last chance to stop: past this point the install completes. */
    psdb_progress before = {"register", 0, 0, 1};
    if (psdb__transport_should_stop(c, &before)) {
        hr = psdb__error_set(PSDB_E_CANCELLED,
                             "install: %s: cancelled by the progress callback before the "
                             "registration; the registry is unchanged",
                             d->exe_path);
        goto cleanup;
    }
    exe_filename = strrchr(d->exe_path, '/');
    psdb_app_desc app = *d->app;
    if (!app.exe_filename)
        app.exe_filename = exe_filename ? exe_filename + 1 : d->exe_path;
    pthread_mutex_lock(&shared->use);
    step = psdb__error_mark();
    hr = psdb__registry_install(inst, d->exe_path, &app, d->app_id, n, entries, d->allow_downgrade);
    if (PSDB_FAILED(hr)) {
        pthread_mutex_unlock(&shared->use);
        install_fail(hr, step, "install: registry update", NULL);
        goto cleanup;
    }
    /* Best effort: the install is complete; a sweep that cannot run now runs after a later one
     * (while another thread's install holds the store shared, it does not run). */
    psdb__store_sweep(inst, &store, 0);
    pthread_mutex_unlock(&shared->use);
cleanup:
    results_end(results, n, hr, failed_at);
    for (i = 0; manifests && i < n; i++)
        psdb_manifest_free(manifests[i]);
    for (i = 0; entries && i < n; i++)
        free((char *)entries[i].psdb_path);
    free(manifests);
    free(entries);
    psdb__store_close(&store);
    shared_release(shared);
    return psdb__client_ret(c, hr, err_mark, __func__);
}
