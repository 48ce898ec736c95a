/* index.c - the psdbd index's public functions: each passes to the open index's engine
 * (index_int.h), and what the engines share: manifests and credential rows from a result row. */
#include "index_int.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

int psdbd__utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t cp = 0;
    size_t n = 1;
    while (*p && (n = psdb__utf8_seq(p, &cp)) != 0)
        p += n;
    return n != 0;
}

int psdbd_index_is_url(const char *where)
{
    return where &&
           (strncmp(where, "postgresql://", 13) == 0 || strncmp(where, "postgres://", 11) == 0);
}

const char *psdbd_index_engine(psdbd_index *ix)
{
    return ix->ops->engine;
}

int psdbd_index_watch(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size)
{
    return ix->ops->watch(ix, changed, err, err_size);
}

void psdbd_index_close(psdbd_index *ix)
{
    if (ix)
        ix->ops->close(ix);
}

int psdbd_index_schema_version(psdbd_index *ix)
{
    return ix->version;
}

int psdbd_index_ping(psdbd_index *ix)
{
    return ix->ops->ping(ix);
}

int psdbd_index_lost(psdbd_index *ix)
{
    return ix->ops->lost(ix);
}

psdbd_rc psdbd_index_failure(psdbd_index *ix)
{
    return psdbd_index_lost(ix) ? PSDBD_UNAVAILABLE : PSDBD_ERROR;
}

psdbd_rc psdbd_index_find_identity(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    return ix->ops->find_identity(ix, r, out);
}

psdbd_rc psdbd_index_publish(psdbd_index *ix, const psdbd_record *r, json_t **out)
{
    return ix->ops->publish(ix, r, out);
}

psdbd_rc psdbd_index_get(psdbd_index *ix, int64_t id, json_t **out)
{
    return ix->ops->get(ix, id, out);
}

psdbd_rc psdbd_index_blob_published(psdbd_index *ix, const char *sha256, int64_t *out)
{
    return ix->ops->blob_published(ix, sha256, out);
}

psdbd_rc psdbd_index_retire(psdbd_index *ix, int64_t id, const char *by, json_t **out)
{
    return ix->ops->retire(ix, id, by, out);
}

psdbd_rc psdbd_index_resolve(psdbd_index *ix, const psdbd_query *q, json_t **out)
{
    return ix->ops->resolve(ix, q, out);
}

psdbd_rc psdbd_index_list_apps(psdbd_index *ix, json_t **out)
{
    return ix->ops->list_apps(ix, out);
}

psdbd_rc psdbd_index_blob_apps(psdbd_index *ix, const char *sha256,
                               int (*fn)(const char *app, void *ctx), void *ctx)
{
    return ix->ops->blob_apps(ix, sha256, fn, ctx);
}

psdbd_rc psdbd_index_list_app_psdbs(psdbd_index *ix, const char *name, json_t **out)
{
    return ix->ops->list_app_psdbs(ix, name, out);
}

psdbd_rc psdbd_index_token_find(psdbd_index *ix, const char *selector, psdbd_token_row *out)
{
    return ix->ops->token_find(ix, selector, out);
}

void psdbd_token_row_free(psdbd_token_row *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->role);
    free(t->scope);
    memset(t, 0, sizeof(*t));
}

psdbd_rc psdbd_index_token_add(psdbd_index *ix, const char *name, const char *selector,
                               const uint8_t hash[32], const char *role, const char *scope,
                               int64_t expires_at)
{
    return ix->ops->token_add(ix, name, selector, hash, role, scope, expires_at);
}

psdbd_rc psdbd_index_key_find(psdbd_index *ix, const char *key_id, char **pem, char **scope,
                              char **families)
{
    char *fam = NULL;
    psdbd_rc rc = ix->ops->key_find(ix, key_id, pem, scope, &fam);
    if (families)
        *families = fam;
    else
        free(fam);
    return rc;
}

psdbd_rc psdbd_index_key_add(psdbd_index *ix, const char *name, const char *key_id, const char *pem,
                             const char *scope, const char *families)
{
    return ix->ops->key_add(ix, name, key_id, pem, scope, families ? families : "*");
}

psdbd_rc psdbd_index_credential_revoke(psdbd_index *ix, psdbd_credential what, const char *name)
{
    return ix->ops->credential_revoke(ix, what, name);
}

psdbd_rc psdbd_index_credential_list(psdbd_index *ix, psdbd_credential what, json_t **out)
{
    return ix->ops->credential_list(ix, what, out);
}

psdbd_rc psdbd_index_integrity(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                               void *ctx)
{
    return ix->ops->integrity(ix, deep, fn, ctx);
}

psdbd_rc psdbd_index_count_psdbs(psdbd_index *ix, int64_t *out)
{
    return ix->ops->count_psdbs(ix, out);
}

psdbd_rc psdbd_index_blob_referenced(psdbd_index *ix, const char *sha256)
{
    return ix->ops->blob_referenced(ix, sha256);
}

psdbd_rc psdbd_index_blob_indexed(psdbd_index *ix, const char *sha256)
{
    return ix->ops->blob_indexed(ix, sha256);
}

psdbd_rc psdbd_index_each_blob(psdbd_index *ix,
                               void (*fn)(const char *sha256, uint64_t size, void *ctx), void *ctx)
{
    return ix->ops->each_blob(ix, fn, ctx);
}

psdbd_rc psdbd_index_each_unbacked_psdb(psdbd_index *ix,
                                        void (*fn)(int64_t id, const char *sha256, void *ctx),
                                        void *ctx)
{
    return ix->ops->each_unbacked_psdb(ix, fn, ctx);
}

psdbd_rc psdbd_index_delete_orphan_blob_rows(psdbd_index *ix, int64_t created_before)
{
    return ix->ops->delete_orphan_blob_rows(ix, created_before);
}

psdbd_rc psdbd_index_snapshot(psdbd_index *ix, int begin)
{
    return ix->ops->snapshot(ix, begin);
}

psdbd_rc psdbd_index_gc_lock(psdbd_index *ix, int lock)
{
    return ix->ops->gc_lock(ix, lock);
}

/* ---- manifests and credential rows, from either engine's row ------------------------------ */

static json_t *version_json(const psdbd__row *row, int i)
{
    char buf[32];
    return json_string(
        psdb__format_version(psdbd_u64_from_db(row->i64(row->row, i)), buf, sizeof(buf)));
}

json_t *psdbd__manifest_of(const psdbd__row *row)
{
    char uuid[40], when[40], url[96];
    uint8_t guid[16] = {0};
    void *rw = row->row;
    json_error_t jerr;
    if (row->blob(rw, 6, guid, sizeof(guid)) != 16)
        memset(guid, 0, sizeof(guid));
    snprintf(url, sizeof(url), "/v1/blobs/%s", row->text(rw, 12));
    json_t *app =
        json_pack_ex(&jerr, 0, "{s:s, s:s, s:o, s:s, s:o, s:s}", "name", row->text(rw, 1),
                     "exe_filename", row->text(rw, 2), "version", version_json(row, 3),
                     "engine_name", row->text(rw, 4), "engine_version", version_json(row, 5),
                     "app_id", psdb__format_uuid(guid, uuid, sizeof(uuid)));
    if (!app)
        psdbd_log("manifest app: %s", jerr.text);
    json_t *target =
        json_pack_ex(&jerr, 0, "{s:s, s:I, s:o, s:o}", "family", row->text(rw, 7), "abi_version",
                     (json_int_t)psdbd_u64_from_db(row->i64(rw, 8)), "compiler_version",
                     version_json(row, 9), "profile_version", version_json(row, 10));
    if (!target)
        psdbd_log("manifest target: %s", jerr.text);
    json_t *m = json_pack_ex(&jerr, 0, "{s:I, s:s, s:I, s:s, s:o, s:o, s:I, s:s, s:s, s:s, s:b}",
                             "id", (json_int_t)row->i64(rw, 0), "sha256", row->text(rw, 12), "size",
                             (json_int_t)row->i64(rw, 13), "url", url, "app", app, "target", target,
                             "serial", (json_int_t)psdbd_u64_from_db(row->i64(rw, 11)),
                             "created_at", psdbd_format_time(row->i64(rw, 16), when, sizeof(when)),
                             "key_id", row->text(rw, 14), "signature", row->text(rw, 15), "retired",
                             !row->is_null(rw, 17));
    if (m) {
        /* The statement a launcher verifies the signature against (schema/STATEMENT.md). */
        json_object_set_new(m, "statement_version", json_integer(row->i64(rw, 18) == 2 ? 2 : 1));
        json_object_set_new(m, "sodb_sha256",
                            row->is_null(rw, 19) ? json_null() : json_string(row->text(rw, 19)));
    }
    if (!m) {
        /* Publishes admit only UTF-8 strings, so this is a damaged row (or no memory): answer
         * with what is certain rather than failing every listing that meets it. */
        psdbd_log("manifest of psdb %lld: %s", (long long)row->i64(rw, 0), jerr.text);
        m = json_pack("{s:I, s:s, s:s}", "id", (json_int_t)row->i64(rw, 0), "sha256",
                      row->text(rw, 12), "error", "unreadable index row");
        if (!m)
            psdbd_out_of_memory();
        return m;
    }
    if (!row->is_null(rw, 17))
        json_object_set_new(m, "retired_at",
                            json_string(psdbd_format_time(row->i64(rw, 17), when, sizeof(when))));
    return m;
}

json_t *psdbd__credential_of(const psdbd__row *row, psdbd_credential what)
{
    char when[40];
    void *rw = row->row;
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "name", row->text(rw, 0),
                          what == PSDBD_CREDENTIAL_TOKEN ? "role" : "key_id", row->text(rw, 1),
                          "scope", row->text(rw, 2), "created_at",
                          psdbd_format_time(row->i64(rw, 3), when, sizeof(when)));
    if (!o)
        psdbd_out_of_memory();
    if (!row->is_null(rw, 4))
        json_object_set_new(o, "expires_at",
                            json_string(psdbd_format_time(row->i64(rw, 4), when, sizeof(when))));
    json_object_set_new(o, "revoked", json_boolean(!row->is_null(rw, 5)));
    return o;
}
