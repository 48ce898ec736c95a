/* manifest.c - manifests: parsing, the signature check, and binding a manifest to its request and
 * to the downloaded file. */
#include "delivery/client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/status_map.h"

/* ---- manifests ----------------------------------------------------------------------------------
 */

void psdb_manifest_free(psdb_manifest *m)
{
    if (!m)
        return;
    free(m->id);
    free(m->url);
    free((char *)m->app.desc.exe_filename);
    free((char *)m->app.desc.name);
    free((char *)m->app.desc.engine_name);
    free((char *)m->target.family);
    free(m->created_at);
    free(m->key_id);
    free(m->signature);
    free(m->json);
    free(m);
}

/* A number: a non-negative JSON integer, or a JSON string psdb__parse_u64 accepts (values above
 * INT64_MAX travel as strings). */
int psdb__json_u64(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    return json_is_string(v) ? psdb__parse_u64(json_string_value(v), out) : -1;
}

/* A 4x16-bit version: a JSON string in the spelling psdbd accepts ("a.b.c.d" as psdbd writes it,
 * or a number: psdb__parse_version), or a non-negative JSON integer. */
int psdb__json_version(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_string(v))
        return psdb__parse_version(json_string_value(v), out);
    return psdb__json_u64(obj, key, out);
}

/* Copies a string member; absent or null gives NULL (allowed only when optional). */
static int json_str(json_t *obj, const char *key, int optional, char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return optional ? 0 : -1;
    if (!json_is_string(v))
        return -1;
    *out = psdb__strdup(json_string_value(v));
    return *out ? 0 : -1;
}

/* What the statement's encoder accepts of a name (sign.c put_str): at most
 * PSDB_STATEMENT_STRING_MAX bytes, and a name by the one rule (no control, format or separator
 * character, valid UTF-8). */
static int statement_string_ok(const char *label, const char *s, int required, char *why,
                               size_t why_size)
{
    char fault[128];
    if (!s || !*s) {
        if (required)
            snprintf(why, why_size, "no %s", label);
        return !required;
    }
    if (strlen(s) > PSDB_STATEMENT_STRING_MAX) {
        snprintf(why, why_size, "the %s is longer than %u bytes", label, PSDB_STATEMENT_STRING_MAX);
        return 0;
    }
    if (psdb__name_check(s, fault, sizeof(fault)) != 0) {
        /* The fault names the code point; the name itself is never echoed. */
        snprintf(why, why_size, "the %s %s", label, fault);
        return 0;
    }
    return 1;
}

/* Whether the manifest's identity and target are what a statement can encode; why gets the first
 * field that is not. */
static int statement_strings_ok(const psdb_manifest *m, char *why, size_t why_size)
{
    const psdb_app_desc *d = &m->app.desc;
    return statement_string_ok("application name", d->name, 1, why, why_size) &&
           (m->kind == PSDB_MANIFEST_SODB ||
            statement_string_ok("target family", m->target.family, 1, why, why_size)) &&
           statement_string_ok("exe filename", d->exe_filename, 0, why, why_size) &&
           statement_string_ok("engine name", d->engine_name, 0, why, why_size);
}

psdb_hr psdb_manifest_parse(const char *json, size_t size, psdb_manifest **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_E_PROTOCOL;
    json_t *root = NULL;
    psdb_manifest *m = NULL;
    char *sha = NULL, *app_id = NULL, *sodb_sha = NULL;
    char *exe = NULL, *name = NULL, *engine = NULL, *family = NULL;
    char why[160];

    if (!out || !json)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    *out = NULL;
    root = json_loadb(json, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root))
        goto cleanup;
    m = calloc(1, sizeof(*m));
    if (!m) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    json_t *app = json_object_get(root, "app");
    json_t *target = json_object_get(root, "target");
    json_t *kind = json_object_get(root, "kind");
    json_t *stv = json_object_get(root, "statement_version");
    if (kind && !json_is_null(kind)) {
        if (!json_is_string(kind))
            goto cleanup;
        if (strcmp(json_string_value(kind), "sodb") == 0)
            m->kind = PSDB_MANIFEST_SODB;
        else if (strcmp(json_string_value(kind), "psdb") != 0)
            goto cleanup;
    }
    /* An SODB has no target; a PSDB's manifest must name one. */
    if (!json_is_object(app) || (m->kind == PSDB_MANIFEST_PSDB && !json_is_object(target)))
        goto cleanup;
    m->statement_version = 1;
    if (stv && !json_is_null(stv)) {
        if (!json_is_integer(stv) || json_integer_value(stv) < 1 || json_integer_value(stv) > 2 ||
            (m->kind == PSDB_MANIFEST_SODB && json_integer_value(stv) != 1)) {
            psdb__error_set(PSDB_E_PROTOCOL, "manifest: statement_version is not 1 or 2");
            goto cleanup;
        }
        m->statement_version = (uint32_t)json_integer_value(stv);
    }
    /* Version 2 names the SODB the PSDB was compiled from; version 1 names none. */
    if (json_str(root, "sodb_sha256", 1, &sodb_sha))
        goto cleanup;
    if ((m->statement_version == 2) != (sodb_sha != NULL) ||
        (sodb_sha && (strlen(sodb_sha) != 64 || psdb__unhex(sodb_sha, m->sodb_sha256, 32) != 0))) {
        psdb__error_set(PSDB_E_PROTOCOL, "manifest: sodb_sha256 %s",
                        m->statement_version == 2 ? "missing or not 64 hex digits"
                                                  : "given with statement version 1");
        goto cleanup;
    }
    json_t *id = json_object_get(root, "id");
    if (json_is_integer(id) && json_integer_value(id) >= 0) {
        if (asprintf(&m->id, "%lld", (long long)json_integer_value(id)) < 0) {
            m->id = NULL;
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    } else if (json_str(root, "id", 0, &m->id)) {
        goto cleanup;
    }
    if (json_str(root, "sha256", 0, &sha) || psdb__json_u64(root, "size", &m->size) ||
        json_str(root, "url", 0, &m->url) || psdb__json_u64(root, "serial", &m->serial) ||
        json_str(root, "created_at", 1, &m->created_at) ||
        json_str(root, "key_id", 0, &m->key_id) || json_str(root, "signature", 0, &m->signature))
        goto cleanup;
    if (json_str(app, "name", 0, &name) || json_str(app, "exe_filename", 1, &exe) ||
        psdb__json_version(app, "version", &m->app.desc.version) ||
        json_str(app, "engine_name", 1, &engine) ||
        psdb__json_version(app, "engine_version", &m->app.desc.engine_version) ||
        json_str(app, "app_id", 1, &app_id))
        goto cleanup;
    m->app.desc.name = name;
    m->app.desc.exe_filename = exe;
    m->app.desc.engine_name = engine;
    name = exe = engine = NULL;
    if (m->kind == PSDB_MANIFEST_PSDB &&
        (json_str(target, "family", 0, &family) ||
         psdb__json_u64(target, "abi_version", &m->target.abi_version) ||
         psdb__json_version(target, "compiler_version", &m->target.compiler_version) ||
         psdb__json_version(target, "profile_version", &m->target.profile_version)))
        goto cleanup;
    m->target.family = family;
    family = NULL;
    /* What no signed statement can carry (schema/STATEMENT.md: a name and a family, strings of at
     * most PSDB_STATEMENT_STRING_MAX bytes that psdb's rule for names accepts) is no manifest:
     * refused here, not by the signature check later. */
    if (!statement_strings_ok(m, why, sizeof(why))) {
        psdb__error_set(PSDB_E_PROTOCOL, "manifest: %s", why);
        goto cleanup;
    }
    if (strlen(sha) != 64 || psdb__unhex(sha, m->sha256, 32) != 0)
        goto cleanup;
    if (app_id && *app_id) {
        /* A UUID, 8-4-4-4-12 as psdbd writes it, or 32 bare hex digits. */
        if (psdb__parse_uuid(app_id, m->app.app_id) != 0)
            goto cleanup;
    }
    m->json = json_dumps(root, JSON_COMPACT);
    if (!m->json) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    *out = m;
    m = NULL;
    hr = PSDB_S_OK;
cleanup:
    free(sha);
    free(sodb_sha);
    free(app_id);
    free(exe);
    free(name);
    free(engine);
    free(family);
    psdb_manifest_free(m);
    json_decref(root);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_client_verify_manifest(psdb_client *c, const psdb_manifest *m)
{
    const unsigned err_mark = psdb__error_mark();
    if (!c || !m)
        return psdb__client_ret(c, PSDB_E_INVALIDARG, err_mark, __func__);
    psdb_hr hr = PSDB_E_SIGNATURE;
    char why[160];
    if (!statement_strings_ok(m, why, sizeof(why))) {
        /* A manifest built by hand with an identity no statement encodes: no signature is valid
         * for it (psdb_statement_verify would call the statement itself the bad argument). */
        psdb__error_set(hr, "manifest %s: %s: no signed statement describes it",
                        m->id ? m->id : "?", why);
        return psdb__client_ret(c, hr, err_mark, __func__);
    }
    /* The statement the manifest names: a PSDB's version 1, a PSDB's version 2 (its source
     * SODB's digest too), or an SODB's; a signature never verifies as another kind. */
    psdb_statement st = {.size = m->size,
                         .identity = m->app,
                         .target = m->target,
                         .serial = m->serial,
                         .has_sodb = m->statement_version == 2};
    psdb_sodb_statement sst = {.size = m->size, .identity = m->app, .serial = m->serial};
    memcpy(st.sha256, m->sha256, 32);
    memcpy(st.sodb_sha256, m->sodb_sha256, 32);
    memcpy(sst.sha256, m->sha256, 32);
    /* The key id only picks the key: the signature must verify with that trusted key itself. */
    for (uint32_t i = 0; i < c->num_keys && m->key_id && m->signature; i++) {
        char id[PSDB_KEY_ID_SIZE];
        if (PSDB_FAILED(psdb_key_id(c->keys[i], id)) || strcmp(id, m->key_id) != 0)
            continue;
        hr = m->kind == PSDB_MANIFEST_SODB
                 ? psdb_sodb_statement_verify(c->keys[i], &sst, m->signature)
                 : psdb_statement_verify(c->keys[i], &st, m->signature);
        break;
    }
    if (PSDB_FAILED(hr))
        psdb__error_set(hr, "signature of %s (key %s) does not verify with a trusted key", m->id,
                        m->key_id ? m->key_id : "?");
    return psdb__client_ret(c, hr, err_mark, __func__);
}

/* ---- binding a manifest to its request ----------------------------------------------------------
 * A valid signature only says that some publisher vouches for some PSDB. What makes it the right
 * PSDB is that the identity and target it vouches for are the ones the launcher asked for: without
 * this check a mirror could answer a request for Demo with Other's signed manifest, get it
 * registered for demo.exe, and make Demo's honest update look like a downgrade afterwards. */

/* NULL and "" are the same absent string (the statement encodes both as empty). */
static int str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Exe file names compare without ASCII case: the games these PSDBs are for ship on file systems
 * that ignore it, and `psdb synth` names Demo's executable Demo.exe while it runs as demo.exe. */
static int exe_eq(const char *a, const char *b)
{
    return strcasecmp(a ? a : "", b ? b : "") == 0;
}

psdb_hr psdb__client_check_request(const char *who, const psdb_manifest *m,
                                   const psdb_app_desc *app, const uint8_t *app_id,
                                   const psdb_precompile_target *t, const char *implied_exe)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    const psdb_app_desc *got = &m->app.desc;
    char a[40], b[40];
    if (m->kind != PSDB_MANIFEST_PSDB) {
        psdb__error_set(hr, "%s: the server answered an SODB's manifest for a PSDB", who);
        goto cleanup;
    }

    if (!str_eq(got->name, app->name)) {
        psdb__error_set(hr, "%s: the server answered application '%s' for a request for '%s'", who,
                        got->name ? got->name : "", app->name);
        goto cleanup;
    }
    if (got->version != app->version) {
        psdb__error_set(hr, "%s: the server answered version %s of '%s' for a request for %s", who,
                        psdb__format_version(got->version, a, sizeof(a)), app->name,
                        psdb__format_version(app->version, b, sizeof(b)));
        goto cleanup;
    }
    if (app->exe_filename && !exe_eq(got->exe_filename, app->exe_filename)) {
        psdb__error_set(hr, "%s: the server answered exe filename '%s' for a request for '%s'", who,
                        got->exe_filename ? got->exe_filename : "", app->exe_filename);
        goto cleanup;
    }
    if (!app->exe_filename && implied_exe && got->exe_filename && *got->exe_filename &&
        !exe_eq(got->exe_filename, implied_exe)) {
        psdb__error_set(hr,
                        "%s: the server answered exe filename '%s' for a request for '%s' "
                        "(the exe path's file name)",
                        who, got->exe_filename, implied_exe);
        goto cleanup;
    }
    if (app->engine_name && (!str_eq(got->engine_name, app->engine_name) ||
                             got->engine_version != app->engine_version)) {
        psdb__error_set(hr, "%s: the server answered engine '%s' %s for a request for '%s' %s", who,
                        got->engine_name ? got->engine_name : "",
                        psdb__format_version(got->engine_version, a, sizeof(a)), app->engine_name,
                        psdb__format_version(app->engine_version, b, sizeof(b)));
        goto cleanup;
    }
    if (app_id && memcmp(m->app.app_id, app_id, 16) != 0) {
        psdb__error_set(hr, "%s: the server answered AppId %s for a request for %s", who,
                        psdb__format_uuid(m->app.app_id, a, 37),
                        psdb__format_uuid(app_id, b, sizeof(b)));
        goto cleanup;
    }
    if (!str_eq(m->target.family, t->family)) {
        psdb__error_set(hr, "%s: the server answered family '%s' for a request for '%s'", who,
                        m->target.family ? m->target.family : "", t->family);
        goto cleanup;
    }
    if (m->target.abi_version < t->abi_min || m->target.abi_version > t->abi_max) {
        psdb__error_set(hr,
                        "%s: the server answered ABI version %llu for a request for ABI "
                        "%llu-%llu",
                        who, (unsigned long long)m->target.abi_version,
                        (unsigned long long)t->abi_min, (unsigned long long)t->abi_max);
        goto cleanup;
    }
    /* MODEL A3 compares the top 32 bits only; 0 asks for any profile version. */
    if (t->profile_version && m->target.profile_version >> 32 != t->profile_version >> 32) {
        psdb__error_set(hr,
                        "%s: the server answered profile version %s for a request for "
                        "profile version %s (the top 32 bits differ)",
                        who, psdb__format_version(m->target.profile_version, a, sizeof(a)),
                        psdb__format_version(t->profile_version, b, sizeof(b)));
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    return hr;
}

psdb_hr psdb_client_check_manifest(psdb_client *c, const psdb_manifest *m, const psdb_app_desc *app,
                                   const uint8_t *app_id, const psdb_precompile_target *target)
{
    const unsigned err_mark = psdb__error_mark();
    if (!c || !m || !app || !app->name || !target)
        return psdb__client_ret(c, PSDB_E_INVALIDARG, err_mark, __func__);
    return psdb__client_ret(c, psdb__client_check_request("manifest", m, app, app_id, target, NULL),
                            err_mark, __func__);
}

psdb_hr psdb__client_check_install(const psdb_manifest *m, const psdb_install_desc *d,
                                   const psdb_precompile_target *t)
{
    const char *slash = strrchr(d->exe_path, '/');
    return psdb__client_check_request("install", m, d->app, d->app_id, t,
                                      slash ? slash + 1 : d->exe_path);
}

/* The downloaded file against its manifest: the publisher signed the manifest's fields and the
 * file's digest, and psdbd checks at publish that they agree; a file whose own header says
 * something else (a publisher key misused, a store written behind psdbd's back) is refused too. */
psdb_hr psdb__client_check_file(const char *path, const psdb_file_info *info,
                                const psdb_manifest *m)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    const psdb_app_desc *f = &info->identity.desc, *g = &m->app.desc;
    const char *field = NULL, *fs = NULL, *ms = NULL;
    char a[40], b[40];

    if (!str_eq(f->name, g->name)) {
        field = "application";
        fs = f->name;
        ms = g->name;
    } else if (!str_eq(f->exe_filename, g->exe_filename)) {
        field = "exe filename";
        fs = f->exe_filename;
        ms = g->exe_filename;
    } else if (!str_eq(f->engine_name, g->engine_name)) {
        field = "engine";
        fs = f->engine_name;
        ms = g->engine_name;
    } else if (!str_eq(info->target.family, m->target.family)) {
        field = "family";
        fs = info->target.family;
        ms = m->target.family;
    } else if (f->version != g->version) {
        field = "version";
        fs = psdb__format_version(f->version, a, sizeof(a));
        ms = psdb__format_version(g->version, b, sizeof(b));
    } else if (f->engine_version != g->engine_version) {
        field = "engine version";
        fs = psdb__format_version(f->engine_version, a, sizeof(a));
        ms = psdb__format_version(g->engine_version, b, sizeof(b));
    } else if (memcmp(info->identity.app_id, m->app.app_id, 16) != 0) {
        field = "AppId";
        fs = psdb__format_uuid(info->identity.app_id, a, sizeof(a));
        ms = psdb__format_uuid(m->app.app_id, b, sizeof(b));
    } else if (info->target.abi_version != m->target.abi_version) {
        snprintf(a, sizeof(a), "%llu", (unsigned long long)info->target.abi_version);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)m->target.abi_version);
        field = "ABI version";
        fs = a;
        ms = b;
    } else if (info->target.compiler_version != m->target.compiler_version) {
        field = "compiler version";
        fs = psdb__format_version(info->target.compiler_version, a, sizeof(a));
        ms = psdb__format_version(m->target.compiler_version, b, sizeof(b));
    } else if (info->target.profile_version != m->target.profile_version) {
        field = "profile version";
        fs = psdb__format_version(info->target.profile_version, a, sizeof(a));
        ms = psdb__format_version(m->target.profile_version, b, sizeof(b));
    }
    if (!field) {
        hr = PSDB_S_OK;
        goto cleanup;
    }
    psdb__error_set(hr, "install: %s records %s '%s' but its signed manifest says '%s'", path,
                    field, fs ? fs : "", ms ? ms : "");
cleanup:
    return hr;
}
