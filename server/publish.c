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
                      char **families, psdbd_verdict *v)
{
    psdbd_rc rc = psdbd_index_key_find(ix, key_id, pem, scope, families);
    if (rc == PSDBD_NOT_FOUND)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_UNKNOWN_KEY,
                                  "no registered publisher key has this key id");
    if (rc != PSDBD_OK)
        return psdbd_verdict_index(v, rc);
    return 0;
}

/* Whether a manifest's version string ("a.b.c.d") is v. */
static int version_is(const json_t *s, uint64_t v)
{
    uint64_t parsed = 0;
    return json_is_string(s) && psdb__parse_version(json_string_value(s), &parsed) == 0 &&
           parsed == v;
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

/* The key's family scope covers the PSDB's family; a compiler's token publishes version 2
 * statements only; a version 2 statement names a published SODB of this application identity and
 * version. 0, or -1 with the verdict key_scope, forbidden, sodb_unknown or the index's failure. */
static int check_farm(psdbd_index *ix, const psdbd_publish *p, const psdb_file_info *info,
                      psdbd_verdict *v)
{
    const psdb_app_desc *d = &info->identity.desc;
    json_t *m = NULL, *app;
    char uuid[40];
    int rc = -1;
    if (!psdbd_scope_covers(p->key_families ? p->key_families : "*", info->target.family)) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_KEY_SCOPE,
                           "key %s may not sign PSDBs for family '%s' (its families: %s)",
                           p->key_id, info->target.family, p->key_families);
        goto cleanup;
    }
    if (!p->sodb_sha256) {
        if (p->who->role == PSDBD_ROLE_COMPILER) {
            psdbd_verdict_fail(v, PSDBD_OUTCOME_FORBIDDEN,
                               "a compiler's token publishes only PSDBs signed with a version 2 "
                               "statement (X-Psdb-Sodb-Sha256 naming their SODB)");
            goto cleanup;
        }
        rc = 0;
        goto cleanup;
    }
    psdbd_rc f = psdbd_index_sodb_find(ix, p->sodb_sha256, &m);
    if (f != PSDBD_OK && f != PSDBD_NOT_FOUND) {
        psdbd_verdict_index(v, f);
        goto cleanup;
    }
    app = json_object_get(m, "app");
    psdb__format_uuid(info->identity.app_id, uuid, sizeof(uuid));
    if (f == PSDBD_NOT_FOUND ||
        strcmp(json_string_value(json_object_get(app, "name")), d->name) != 0 ||
        strcmp(json_string_value(json_object_get(app, "exe_filename")),
               d->exe_filename ? d->exe_filename : "") != 0 ||
        strcmp(json_string_value(json_object_get(app, "engine_name")),
               d->engine_name ? d->engine_name : "") != 0 ||
        strcmp(json_string_value(json_object_get(app, "app_id")), uuid) != 0 ||
        !version_is(json_object_get(app, "version"), d->version) ||
        !version_is(json_object_get(app, "engine_version"), d->engine_version)) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_SODB_UNKNOWN,
                           "X-Psdb-Sodb-Sha256 names no published SODB of this PSDB's application "
                           "identity and version");
        goto cleanup;
    }
    rc = 0;
cleanup:
    json_decref(m);
    return rc;
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
    if (p->sodb_sha256) {
        st.has_sodb = 1;
        psdb__unhex(p->sodb_sha256, st.sodb_sha256, sizeof(st.sodb_sha256));
    }
    if (PSDB_FAILED(psdb_key_from_pem(p->key_pem, strlen(p->key_pem), &key)) ||
        psdb_statement_verify(key, &st, p->signature) != PSDB_S_OK) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_SIGNATURE,
                           "%s does not verify over this PSDB's version %d statement with key %s",
                           p->signature_field, p->sodb_sha256 ? 2 : 1, p->key_id);
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
    rec->statement_version = p->sodb_sha256 ? 2 : 1;
    snprintf(rec->sodb_sha256, sizeof(rec->sodb_sha256), "%s",
             p->sodb_sha256 ? p->sodb_sha256 : "");
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
        check_scopes(p, info.identity.desc.name, v) != 0 || check_farm(ix, p, &info, v) != 0 ||
        check_signature(p, &info, v) != 0)
        goto cleanup;
    make_record(p, &info, &rec);
    commit(ix, store, vmaps, p, &rec, v);
cleanup:
    psdb_file_release(f); /* info's strings with it: after the commit, which borrows them */
}

/* ---- SODBs ------------------------------------------------------------------------------------
 */

static int sodb_entry_ok(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                         size_t desc_size, void *ctx)
{
    (void)kind;
    (void)key;
    (void)version;
    (void)desc;
    (void)desc_size;
    ++*(uint64_t *)ctx;
    return 0;
}

/* Opens the upload with libpsdb's SODB reader and walks every entry (each key the SHA-256 of its
 * description). 0 with *s and *id, or -1 with the verdict invalid_sodb. */
static int open_sodb(const psdbd_publish *p, psdb_sodb **s, psdb_app_identity *id, psdbd_verdict *v)
{
    uint64_t entries = 0;
    psdb_hr hr = psdb_sodb_open(p->path, s);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_get_identity(*s, id);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_foreach(*s, sodb_entry_ok, &entries);
    if (PSDB_SUCCEEDED(hr))
        return 0;
    char why[512];
    snprintf(why, sizeof(why), "%s", psdb_error_last());
    printable_ascii(why);
    if (psdbd_outcome_of_hr(hr, PSDBD_OUTCOME_INVALID_SODB) != PSDBD_OUTCOME_INVALID_SODB) {
        psdbd_log("publish sodb: read %s: %s", p->path, why);
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot read the upload");
    }
    return psdbd_verdict_fail(v, PSDBD_OUTCOME_INVALID_SODB, "the body is not a valid SODB: %s",
                              why);
}

void psdbd_publish_sodb_accept(psdbd_index *ix, psdbd_store *store, const psdbd_publish *p,
                               psdbd_verdict *v)
{
    psdb_sodb *s = NULL;
    psdb_app_identity id;
    psdb_file_info info = {0}; /* the identity checks of a PSDB, with a family that passes */
    psdb_sodb_statement st = {0};
    psdbd_sodb_record rec = {0};
    psdb_key *key = NULL;
    json_t *manifest = NULL;
    int e = 0, replaced = 0;
    psdbd_rc rc;
    if (open_sodb(p, &s, &id, v) != 0)
        goto cleanup;
    info.identity = id;
    info.target.family = "sodb";
    if (check_identity(&info, v) != 0) {
        v->outcome = PSDBD_OUTCOME_INVALID_SODB;
        goto cleanup;
    }
    if (check_scopes(p, id.desc.name, v) != 0)
        goto cleanup;
    memcpy(st.sha256, p->sha256, sizeof(st.sha256));
    st.size = p->size;
    st.identity = id;
    st.serial = p->serial;
    if (PSDB_FAILED(psdb_key_from_pem(p->key_pem, strlen(p->key_pem), &key)) ||
        psdb_sodb_statement_verify(key, &st, p->signature) != PSDB_S_OK) {
        psdbd_verdict_fail(v, PSDBD_OUTCOME_BAD_SIGNATURE,
                           "%s does not verify over this SODB's statement with key %s",
                           p->signature_field, p->key_id);
        goto cleanup;
    }
    rec.app_name = id.desc.name;
    rec.exe_filename = id.desc.exe_filename;
    rec.engine_name = id.desc.engine_name;
    rec.app_version = id.desc.version;
    rec.engine_version = id.desc.engine_version;
    memcpy(rec.app_guid, id.app_id, 16);
    rec.serial = p->serial;
    rec.size = p->size;
    psdb__hex(p->sha256, sizeof(p->sha256), rec.sha256);
    snprintf(rec.key_id, sizeof(rec.key_id), "%s", p->key_id);
    rec.signature = p->signature;
    rec.published_by = p->who->name;
    /* The blob before its row, as for a PSDB: a row never names a file that is not there. */
    e = psdbd_store_commit(store, p->fd, p->path, rec.sha256, &replaced);
    if (e != 0) {
        psdbd_log("publish sodb: store blob %s: %s", rec.sha256, strerror(e));
        if (psdbd_outcome_of_errno(e, PSDBD_OUTCOME_INTERNAL) == PSDBD_OUTCOME_DISK_FULL)
            psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL, "no space left to store the blob");
        else
            psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "cannot store the blob");
        goto cleanup;
    }
    rc = psdbd_index_sodb_publish(ix, &rec, &manifest);
    if (rc == PSDBD_OK)
        psdbd_verdict_done(v, PSDBD_OUTCOME_CREATED, manifest);
    else if (rc == PSDBD_EXISTS)
        psdbd_verdict_done(v, PSDBD_OUTCOME_OK, manifest);
    else if (rc == PSDBD_CONFLICT)
        psdbd_verdict_fail(v, PSDBD_OUTCOME_CONFLICT,
                           "this SODB identity and serial are already published with other "
                           "content");
    else
        psdbd_verdict_index(v, rc);
cleanup:
    psdb_key_release(key);
    psdb_sodb_release(s); /* id's strings with it: after the commit, which borrows them */
}
