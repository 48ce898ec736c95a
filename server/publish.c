/* publish.c - psdbd's publish service: the checks of an uploaded PSDB, then the blob stored, the
 * index row committed and the value map queued (publish.h, DESIGN). */
#include "publish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psdb/psdb.h"

#include "cache.h"
#include "common.h"
#include "metrics.h"

int psdbd_publish_key(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                      psdbd_verdict *v)
{
    psdbd_rc rc = psdbd_index_key_find(ix, key_id, pem, scope);
    if (rc == PSDBD_NOT_FOUND)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_UNKNOWN_KEY,
                                  "no registered publisher key has this key id");
    if (rc != PSDBD_OK)
        return psdbd_verdict_index(v, rc);
    return 0;
}

/* Makes a libpsdb message about an uploaded file safe for a JSON string and a log line: it can
 * quote names stored in the file, which are any bytes. */
static void printable_ascii(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            *s = '?';
}

/* Opens the upload with every check `psdb verify` makes. 0 with *f and *info, or -1 with the
 * verdict: invalid_psdb, or the server's own failure to read it. */
static int open_verified(const psdbd_publish *p, psdb_file **f, psdb_file_info *info,
                         psdbd_verdict *v)
{
    char why[512] = "";
    psdb_hr hr = psdb_file_open_verified(p->path, why, sizeof(why), f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(*f, info);
    if (PSDB_SUCCEEDED(hr))
        return 0;
    printable_ascii(why);
    switch (psdbd_outcome_of_hr(hr, PSDBD_OUTCOME_INVALID_PSDB)) {
    case PSDBD_OUTCOME_INVALID_PSDB:
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB, "the body is not a valid PSDB: %s",
                                  why);
    case PSDBD_OUTCOME_DISK_FULL: /* the integrity check's temporary space */
        psdbd_log("publish: verify %s: %s", p->path, why);
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL, "no space left to verify the upload");
    default:
        psdbd_log("publish: read %s: %s", p->path, why);
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot read the upload");
    }
}

/* The identity and target the index and the manifests need: names present, names by the one rule
 * and bounded. 0, or -1 with the verdict invalid_psdb. */
static int check_identity(const psdb_file_info *info, psdbd_verdict *v)
{
    const char *strs[] = {info->identity.desc.name, info->identity.desc.exe_filename,
                          info->identity.desc.engine_name, info->target.family};
    static const char *const fields[] = {"application name", "exe filename", "engine name",
                                         "family"};
    char why[128];
    if (!info->identity.desc.name || !*info->identity.desc.name || !info->target.family ||
        !*info->target.family || info->target.abi_version > INT64_MAX)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB,
                                  "the PSDB has no application name or family, or an ABI version "
                                  "above 2^63-1");
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        if (psdb__name_check(strs[i], why, sizeof(why)) != 0)
            return psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB, "the PSDB's %s %s", fields[i],
                                      why);
        if (strs[i] && strlen(strs[i]) > PSDB_STATEMENT_STRING_MAX)
            return psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_PSDB,
                                      "the PSDB's %s is longer than %u bytes", fields[i],
                                      PSDB_STATEMENT_STRING_MAX);
    }
    return 0;
}

/* The token's and the key's scopes must both cover the application. 0, or -1 with the verdict
 * out_of_scope. */
static int check_scopes(const psdbd_publish *p, const char *app, psdbd_verdict *v)
{
    if (p->who->role != PSDBD_ROLE_ADMIN && !psdbd_scope_covers(p->who->scope, app))
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_OUT_OF_SCOPE,
                                  "the token's scope does not cover application '%s'", app);
    if (!psdbd_scope_covers(p->key_scope, app))
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_OUT_OF_SCOPE,
                                  "the key's scope does not cover application '%s'", app);
    return 0;
}

/* The signature must verify over the statement of this file with the registered key. 0, or -1
 * with the verdict bad_signature. */
static int check_signature(const psdbd_publish *p, const psdb_file_info *info, psdbd_verdict *v)
{
    psdb_key *key = NULL;
    psdb_statement st = {0};
    int rc = -1;
    memcpy(st.sha256, p->sha256, sizeof(st.sha256));
    st.size = p->size;
    st.identity = info->identity;
    st.target = info->target;
    st.serial = p->serial;
    if (PSDB_FAILED(psdb_key_from_pem(p->key_pem, strlen(p->key_pem), &key)) ||
        psdb_statement_verify(key, &st, p->signature) != PSDB_S_OK) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_SIGNATURE,
                           "%s does not verify over this PSDB's statement with key %s",
                           p->signature_field, p->key_id);
        goto cleanup;
    }
    rc = 0;
cleanup:
    psdb_key_release(key);
    return rc;
}

/* The index row of a verified publish; its strings are borrowed from info and p. */
static void make_record(const psdbd_publish *p, const psdb_file_info *info, psdbd_record *rec)
{
    rec->app_name = info->identity.desc.name;
    rec->exe_filename = info->identity.desc.exe_filename;
    rec->engine_name = info->identity.desc.engine_name;
    rec->family = info->target.family;
    rec->app_version = info->identity.desc.version;
    rec->engine_version = info->identity.desc.engine_version;
    memcpy(rec->app_guid, info->identity.app_id, 16);
    rec->abi_version = info->target.abi_version;
    rec->compiler_version = info->target.compiler_version;
    rec->profile_version = info->target.profile_version;
    rec->serial = p->serial;
    rec->size = p->size;
    psdb__hex(p->sha256, sizeof(p->sha256), rec->sha256);
    snprintf(rec->key_id, sizeof(rec->key_id), "%s", p->key_id);
    rec->signature = p->signature;
    rec->published_by = p->who->name;
}

/* The verdict of an identity lookup or a publish of the index that ends the publish: a repeat
 * (the manifest already indexed, whose reference is taken), a conflict or a failure. */
static void index_verdict(psdbd_rc rc, json_t *manifest, psdbd_verdict *v)
{
    if (rc == PSDBD_EXISTS) {
        psdbd_metrics_publish(0);
        psdbd_verdict_done(v, PSDBD_OUTCOME_OK, manifest);
        return;
    }
    json_decref(manifest);
    if (rc == PSDBD_CONFLICT)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_CONFLICT,
                           "this identity, target and serial are already published with other "
                           "content");
    else
        psdbd_verdict_index(v, rc);
}

/* Stores the blob and commits its index row, then queues its value map. Repeats and conflicts
 * are decided before the store is touched. */
static void commit(psdbd_index *ix, psdbd_store *store, psdbd_valuemaps *vmaps,
                   const psdbd_publish *p, const psdbd_record *rec, psdbd_verdict *v)
{
    json_t *manifest = NULL;
    psdbd_rc rc = psdbd_index_find_identity(ix, rec, &manifest);
    int e = 0, replaced = 0;
    if (rc != PSDBD_NOT_FOUND) {
        index_verdict(rc, manifest, v);
        goto cleanup;
    }
    e = psdbd_store_commit(store, p->fd, p->path, rec->sha256, &replaced);
    /* Maps derived from the damaged file would be served for these bytes: dropped now that the
     * new file holds the name, so that a request from here on derives from it. */
    if (replaced)
        psdbd_valuemaps_forget(store, rec->sha256);
    if (e != 0) {
        psdbd_log("publish: store blob %s: %s", rec->sha256, strerror(e));
        if (psdbd_outcome_of_errno(e, PSDBD_OUTCOME_INTERNAL) == PSDBD_OUTCOME_DISK_FULL)
            psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL, "no space left to store the blob");
        else
            psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot store the blob");
        goto cleanup;
    }
    rc = psdbd_index_publish(ix, rec, &manifest);
    if (rc != PSDBD_OK) {
        index_verdict(rc, manifest, v);
        goto cleanup;
    }
    /* Committed: launchers ask for the version 2 map next; the worker derives it meanwhile, and
     * the answer does not wait for it. */
    psdbd_valuemaps_enqueue(vmaps, rec->sha256);
    psdbd_cache_invalidate();
    psdbd_metrics_publish(1);
    psdbd_verdict_done(v, PSDBD_OUTCOME_CREATED, manifest);
cleanup:
    return;
}

void psdbd_publish_accept(psdbd_index *ix, psdbd_store *store, psdbd_valuemaps *vmaps,
                          const psdbd_publish *p, psdbd_verdict *v)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    psdbd_record rec = {0};
    if (open_verified(p, &f, &info, v) != 0 || check_identity(&info, v) != 0 ||
        check_scopes(p, info.identity.desc.name, v) != 0 || check_signature(p, &info, v) != 0)
        goto cleanup;
    make_record(p, &info, &rec);
    commit(ix, store, vmaps, p, &rec, v);
cleanup:
    psdb_file_release(f); /* info's strings with it: after the commit, which borrows them */
}
