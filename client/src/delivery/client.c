/* client.c - the delivery client: resolve on psdbd, resumable verified downloads (libcurl).
 *
 * DESIGN
 * A download never trusts bytes it has not hashed: it streams into <dest>.part through one
 * SHA-256 context, and a resumed download first re-reads what the .part already holds into that
 * context before asking for the rest with a Range request. Only a complete, matching, signed file
 * is fsynced and renamed over <dest>, so <dest> is either absent, the previous version, or the new
 * verified one. Transient failures (connection, timeout, 5xx, a short body) retry with doubling
 * backoff and resume from what is on disk; a permanent failure (4xx, integrity, disk full) stops.
 */
#include "psdb/client.h"
#include "psdb/sign.h"

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

#include <curl/curl.h>
#include <jansson.h>

#include "registry/install.h"
#include "delivery/publish.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/status_map.h"

#define RESOLVE_MAX_BYTES (1u << 20) /* a manifest is small; anything larger is garbage */

struct psdb_client {
    char *server_url; /* without a trailing '/' */
    char *token;
    char *ca_file;
    char *pinned_public_key;
    uint32_t connect_timeout_ms, low_speed_timeout_s, max_retries, retry_base_ms;
    psdb_key **keys; /* trusted publisher keys */
    uint32_t num_keys;
    void (*progress)(const psdb_progress *p, void *ctx);
    void *progress_ctx;
    char error[512];
    char curl_error[CURL_ERROR_SIZE];
};

void psdb__client_error(psdb_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof(c->error), fmt, ap);
    va_end(ap);
    /* The client's message is also the thread's last error (psdb_error_last). */
    psdb__error_set(PSDB_E_FAIL, "%s", c->error);
}

psdb_hr psdb_client_create(const psdb_client_desc *desc, psdb_client **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_client *c = NULL;

    if (!out)
        return PSDB_E_INVALIDARG;
    *out = NULL;
    if (!desc || !desc->server_url ||
        (strncmp(desc->server_url, "http://", 7) != 0 &&
         strncmp(desc->server_url, "https://", 8) != 0) ||
        (desc->num_trusted_keys && !desc->trusted_keys))
        return PSDB_E_INVALIDARG;
    /* Reference counted, and thread-safe in the libcurl Debian 12 ships (7.88, CURL_VERSION_
     * THREADSAFE); balanced by psdb_client_release. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return PSDB_E_FAIL;
    c = calloc(1, sizeof(*c));
    if (!c) {
        curl_global_cleanup();
        return PSDB_E_OUTOFMEMORY;
    }
    c->server_url = psdb__strdup(desc->server_url);
    c->token = psdb__strdup(desc->token);
    c->ca_file = psdb__strdup(desc->ca_file);
    c->pinned_public_key = psdb__strdup(desc->pinned_public_key);
    if (!c->server_url || (desc->token && !c->token) || (desc->ca_file && !c->ca_file) ||
        (desc->pinned_public_key && !c->pinned_public_key)) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    size_t n = strlen(c->server_url);
    while (n > 0 && c->server_url[n - 1] == '/')
        c->server_url[--n] = '\0';
    c->connect_timeout_ms = desc->connect_timeout_ms ? desc->connect_timeout_ms : 10000;
    c->low_speed_timeout_s = desc->low_speed_timeout_s ? desc->low_speed_timeout_s : 30;
    c->max_retries = desc->max_retries ? desc->max_retries : 5;
    c->retry_base_ms = desc->retry_base_ms ? desc->retry_base_ms : 200;
    c->progress = desc->progress;
    c->progress_ctx = desc->progress_ctx;
    if (desc->num_trusted_keys) {
        c->keys = calloc(desc->num_trusted_keys, sizeof(*c->keys));
        if (!c->keys) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }
    for (uint32_t i = 0; i < desc->num_trusted_keys; i++) {
        /* A trusted key is a public key: a private one given here is a mistake to report, not a
         * key to use (it would verify, and the publisher's secret would sit on players' machines).
         */
        hr = psdb_key_load_kind(desc->trusted_keys[i], PSDB_KEY_PUBLIC, &c->keys[i], NULL, 0);
        if (hr == PSDB_E_ACCESS)
            hr = PSDB_E_IO;
        if (PSDB_FAILED(hr))
            goto cleanup;
        c->num_keys++;
    }
    *out = c;
    c = NULL;
cleanup:
    psdb_client_release(c);
    return hr;
}

void psdb_client_release(psdb_client *c)
{
    if (!c)
        return;
    free(c->server_url);
    free(c->token);
    free(c->ca_file);
    free(c->pinned_public_key);
    for (uint32_t i = 0; i < c->num_keys; i++)
        psdb_key_release(c->keys[i]);
    free(c->keys);
    free(c);
    curl_global_cleanup();
}

const char *psdb_client_last_error(const psdb_client *c)
{
    return c ? c->error : "";
}

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
static int json_u64(json_t *obj, const char *key, uint64_t *out)
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
static int json_version(json_t *obj, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_string(v))
        return psdb__parse_version(json_string_value(v), out);
    return json_u64(obj, key, out);
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

psdb_hr psdb_manifest_parse(const char *json, size_t size, psdb_manifest **out)
{
    psdb_hr hr = PSDB_E_PROTOCOL;
    json_t *root = NULL;
    psdb_manifest *m = NULL;
    char *sha = NULL, *app_id = NULL;
    char *exe = NULL, *name = NULL, *engine = NULL, *family = NULL;

    if (!out || !json)
        return PSDB_E_INVALIDARG;
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
    if (!json_is_object(app) || !json_is_object(target))
        goto cleanup;
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
    if (json_str(root, "sha256", 0, &sha) || json_u64(root, "size", &m->size) ||
        json_str(root, "url", 0, &m->url) || json_u64(root, "serial", &m->serial) ||
        json_str(root, "created_at", 1, &m->created_at) ||
        json_str(root, "key_id", 0, &m->key_id) || json_str(root, "signature", 0, &m->signature))
        goto cleanup;
    if (json_str(app, "name", 0, &name) || json_str(app, "exe_filename", 1, &exe) ||
        json_version(app, "version", &m->app.desc.version) ||
        json_str(app, "engine_name", 1, &engine) ||
        json_version(app, "engine_version", &m->app.desc.engine_version) ||
        json_str(app, "app_id", 1, &app_id))
        goto cleanup;
    m->app.desc.name = name;
    m->app.desc.exe_filename = exe;
    m->app.desc.engine_name = engine;
    name = exe = engine = NULL;
    if (json_str(target, "family", 0, &family) ||
        json_u64(target, "abi_version", &m->target.abi_version) ||
        json_version(target, "compiler_version", &m->target.compiler_version) ||
        json_version(target, "profile_version", &m->target.profile_version))
        goto cleanup;
    m->target.family = family;
    family = NULL;
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
    free(app_id);
    free(exe);
    free(name);
    free(engine);
    free(family);
    psdb_manifest_free(m);
    json_decref(root);
    return hr;
}

psdb_hr psdb_client_verify_manifest(psdb_client *c, const psdb_manifest *m)
{
    if (!c || !m)
        return PSDB_E_INVALIDARG;
    psdb_hr hr = PSDB_E_SIGNATURE;
    psdb_statement st = {
        .size = m->size, .identity = m->app, .target = m->target, .serial = m->serial};
    memcpy(st.sha256, m->sha256, 32);
    /* The key id only picks the key: the signature must verify with that trusted key itself. */
    for (uint32_t i = 0; i < c->num_keys && m->key_id && m->signature; i++) {
        char id[PSDB_KEY_ID_SIZE];
        if (PSDB_FAILED(psdb_key_id(c->keys[i], id)) || strcmp(id, m->key_id) != 0)
            continue;
        hr = psdb_statement_verify(c->keys[i], &st, m->signature);
        break;
    }
    if (PSDB_FAILED(hr))
        psdb__client_error(c, "signature of %s (key %s) does not verify with a trusted key", m->id,
                           m->key_id ? m->key_id : "?");
    return hr;
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

/* The request checks, shared by resolve and install: `who` prefixes the message; implied_exe is
 * an exe file name the request implies without naming it (install's exe path), checked only when
 * the manifest names one. */
static psdb_hr check_request(psdb_client *c, const char *who, const psdb_manifest *m,
                             const psdb_app_desc *app, const uint8_t *app_id,
                             const psdb_precompile_target *t, const char *implied_exe)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    const psdb_app_desc *got = &m->app.desc;
    char a[40], b[40];

    if (!str_eq(got->name, app->name)) {
        psdb__client_error(c, "%s: the server answered application '%s' for a request for '%s'",
                           who, got->name ? got->name : "", app->name);
        goto cleanup;
    }
    if (got->version != app->version) {
        psdb__client_error(c, "%s: the server answered version %s of '%s' for a request for %s",
                           who, psdb__format_version(got->version, a, sizeof(a)), app->name,
                           psdb__format_version(app->version, b, sizeof(b)));
        goto cleanup;
    }
    if (app->exe_filename && !exe_eq(got->exe_filename, app->exe_filename)) {
        psdb__client_error(c, "%s: the server answered exe filename '%s' for a request for '%s'",
                           who, got->exe_filename ? got->exe_filename : "", app->exe_filename);
        goto cleanup;
    }
    if (!app->exe_filename && implied_exe && got->exe_filename && *got->exe_filename &&
        !exe_eq(got->exe_filename, implied_exe)) {
        psdb__client_error(c,
                           "%s: the server answered exe filename '%s' for a request for '%s' "
                           "(the exe path's file name)",
                           who, got->exe_filename, implied_exe);
        goto cleanup;
    }
    if (app->engine_name && (!str_eq(got->engine_name, app->engine_name) ||
                             got->engine_version != app->engine_version)) {
        psdb__client_error(c, "%s: the server answered engine '%s' %s for a request for '%s' %s",
                           who, got->engine_name ? got->engine_name : "",
                           psdb__format_version(got->engine_version, a, sizeof(a)),
                           app->engine_name,
                           psdb__format_version(app->engine_version, b, sizeof(b)));
        goto cleanup;
    }
    if (app_id && memcmp(m->app.app_id, app_id, 16) != 0) {
        psdb__client_error(c, "%s: the server answered AppId %s for a request for %s", who,
                           psdb__format_uuid(m->app.app_id, a, 37),
                           psdb__format_uuid(app_id, b, sizeof(b)));
        goto cleanup;
    }
    if (!str_eq(m->target.family, t->family)) {
        psdb__client_error(c, "%s: the server answered family '%s' for a request for '%s'", who,
                           m->target.family ? m->target.family : "", t->family);
        goto cleanup;
    }
    if (m->target.abi_version < t->abi_min || m->target.abi_version > t->abi_max) {
        psdb__client_error(c,
                           "%s: the server answered ABI version %llu for a request for ABI "
                           "%llu-%llu",
                           who, (unsigned long long)m->target.abi_version,
                           (unsigned long long)t->abi_min, (unsigned long long)t->abi_max);
        goto cleanup;
    }
    /* MODEL A3 compares the top 32 bits only; 0 asks for any profile version. */
    if (t->profile_version && m->target.profile_version >> 32 != t->profile_version >> 32) {
        psdb__client_error(c,
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
    if (!c || !m || !app || !app->name || !target)
        return PSDB_E_INVALIDARG;
    return check_request(c, "manifest", m, app, app_id, target, NULL);
}

psdb_hr psdb__client_check_install(psdb_client *c, const psdb_manifest *m,
                                   const psdb_install_desc *d, const psdb_precompile_target *t)
{
    const char *slash = strrchr(d->exe_path, '/');
    return check_request(c, "install", m, d->app, d->app_id, t, slash ? slash + 1 : d->exe_path);
}

/* The downloaded file against its manifest: the publisher signed the manifest's fields and the
 * file's digest, and psdbd checks at publish that they agree; a file whose own header says
 * something else (a publisher key misused, a store written behind psdbd's back) is refused too. */
psdb_hr psdb__client_check_file(psdb_client *c, const char *path, const psdb_file_info *info,
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
    psdb__client_error(c, "install: %s records %s '%s' but its signed manifest says '%s'", path,
                       field, fs ? fs : "", ms ? ms : "");
cleanup:
    return hr;
}

/* ---- transfers ----------------------------------------------------------------------------------
 */

/* A handle with the project's defaults (psdb__curl_new) and this client's TLS and timeouts. */
static CURL *new_handle(psdb_client *c, const char *url, struct curl_slist **headers)
{
    CURL *h = psdb__curl_new(url, c->token, c->curl_error, headers);
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_timeout_s);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->pinned_public_key)
        curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, c->pinned_public_key);
    return h;
}

static int transient_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_COULDNT_RESOLVE_HOST:
        return 1;
    default:
        return 0;
    }
}

static void backoff(const psdb_client *c, uint32_t attempt)
{
    uint64_t ms = (uint64_t)c->retry_base_ms << (attempt > 10 ? 10 : attempt - 1);
    if (ms > 10000)
        ms = 10000;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

typedef struct mem_sink {
    psdb__buf buf;
    int too_big;
} mem_sink;

static size_t mem_write(char *p, size_t size, size_t n, void *ctx)
{
    mem_sink *s = ctx;
    size_t len = size * n;
    if (s->buf.len + len > RESOLVE_MAX_BYTES) {
        s->too_big = 1;
        return 0;
    }
    psdb__buf_append(&s->buf, p, len);
    return s->buf.oom ? 0 : len;
}

static char *url_escape(CURL *h, const char *s)
{
    return curl_easy_escape(h, s ? s : "", 0);
}

psdb_hr psdb_client_resolve(psdb_client *c, const psdb_app_desc *app,
                            const psdb_precompile_target *target, psdb_manifest **out)
{
    psdb_hr hr = PSDB_S_OK;
    CURL *h = NULL;
    struct curl_slist *headers = NULL;
    char *url = NULL, *e_app = NULL, *e_family = NULL;
    mem_sink sink = {0};

    if (!c || !app || !app->name || !target || !out)
        return PSDB_E_INVALIDARG;
    *out = NULL;
    c->error[0] = '\0';
    h = curl_easy_init();
    if (!h)
        return PSDB_E_OUTOFMEMORY;
    e_app = url_escape(h, app->name);
    e_family = url_escape(h, target->family);
    curl_easy_cleanup(h);
    h = NULL;
    if (!e_app || !e_family) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (asprintf(
            &url, "%s/v1/resolve?app=%s&app_version=%llu&family=%s&abi_min=%llu&abi_max=%llu%s",
            c->server_url, e_app, (unsigned long long)app->version, e_family,
            (unsigned long long)target->abi_min, (unsigned long long)target->abi_max, "") < 0) {
        url = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (target->profile_version) {
        char *u2 = NULL;
        if (asprintf(&u2, "%s&profile_version=%llu", url,
                     (unsigned long long)target->profile_version) < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        free(url);
        url = u2;
    }
    for (uint32_t attempt = 1;; attempt++) {
        long status = 0;
        psdb__buf_free(&sink.buf);
        sink.too_big = 0;
        h = new_handle(c, url, &headers);
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->connect_timeout_ms * 3);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        h = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        if (rc == CURLE_OK && status == 200) {
            hr = psdb_manifest_parse((const char *)sink.buf.data, sink.buf.len, out);
            if (PSDB_FAILED(hr)) {
                psdb__client_error(c, "resolve: the server's answer is not a valid manifest");
                goto cleanup;
            }
            hr = check_request(c, "resolve", *out, app, NULL, target, NULL);
            if (PSDB_FAILED(hr)) {
                psdb_manifest_free(*out);
                *out = NULL;
            }
            goto cleanup;
        }
        if (rc == CURLE_WRITE_ERROR && sink.too_big) {
            hr = PSDB_E_PROTOCOL;
            psdb__client_error(c, "resolve: the server's answer is larger than %u bytes",
                               RESOLVE_MAX_BYTES);
            goto cleanup;
        }
        int retry = rc != CURLE_OK ? transient_curl(rc) : psdb__http_transient(status);
        if (!retry || attempt > c->max_retries) {
            if (rc != CURLE_OK) {
                hr = PSDB_E_NETWORK;
                psdb__client_error(c, "resolve: %s: %s", c->server_url, curl_easy_strerror(rc));
            } else {
                hr = psdb__http_hr(status);
                psdb__client_error(c, "resolve: %s answered HTTP %ld", c->server_url, status);
            }
            goto cleanup;
        }
        backoff(c, attempt);
    }
cleanup:
    curl_free(e_app);
    curl_free(e_family);
    free(url);
    psdb__buf_free(&sink.buf);
    return hr;
}

/* ---- download -----------------------------------------------------------------------------------
 */

typedef struct file_sink {
    psdb_client *c;
    int fd;
    uint64_t have;  /* bytes in the .part, hashed */
    uint64_t limit; /* the manifest's size: more is an integrity failure */
    psdb__sha256_ctx *sha;
    int write_errno; /* errno of a failed write */
    int too_long;
    long status;     /* HTTP status of the current response (from the header callback) */
    int accept_body; /* 1 when the body is to be appended (206 at our offset, or 200 from 0) */
    CURL *h;
    const char *what;
    uint32_t attempt;
    struct timespec last_progress;
} file_sink;

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t file_write(char *p, size_t size, size_t n, void *ctx)
{
    file_sink *s = ctx;
    size_t len = size * n;
    if (!s->accept_body)
        return len; /* an error page: drained, not stored */
    if (s->have + len > s->limit) {
        s->too_long = 1;
        return 0;
    }
    if (write_all(s->fd, p, len) != 0) {
        s->write_errno = errno;
        return 0;
    }
    psdb__sha256_update(s->sha, p, len);
    s->have += len;
    return len;
}

static size_t header_cb(char *p, size_t size, size_t n, void *ctx)
{
    file_sink *s = ctx;
    size_t len = size * n;
    /* The status line of each response (redirects or 100-continue bring several). */
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        s->accept_body = 0;
    }
    if (len == 2 && p[0] == '\r' && p[1] == '\n') {
        if (s->status == 206) {
            s->accept_body = 1; /* Content-Range was requested from s->have: see below */
        } else if (s->status == 200) {
            /* The server ignored the Range: start over from byte 0. */
            if (s->have > 0) {
                if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                    s->write_errno = errno;
                    return 0;
                }
                psdb__sha256_ctx *fresh = psdb__sha256_begin();
                if (!fresh) {
                    s->write_errno = ENOMEM;
                    return 0;
                }
                uint8_t discard[32];
                psdb__sha256_end(s->sha, discard);
                s->sha = fresh;
                s->have = 0;
            }
            s->accept_body = 1;
        }
    }
    /* A 206 must start exactly where the .part ends. */
    if (s->status == 206 && len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        const char *b = memchr(p, ' ', len);
        unsigned long long start = 0;
        if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->have)
            return 0;
    }
    return len;
}

static int xfer_cb(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    file_sink *s = ctx;
    if (!s->c->progress)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (now.tv_sec - s->last_progress.tv_sec) * 1000 +
              (now.tv_nsec - s->last_progress.tv_nsec) / 1000000;
    if (ms < 100)
        return 0;
    s->last_progress = now;
    psdb_progress p = {s->what, s->have, s->limit, s->attempt};
    s->c->progress(&p, s->c->progress_ctx);
    return 0;
}

/* Re-hashes the bytes an interrupted download left in the .part. */
static psdb_hr rehash_part(int fd, uint64_t *have, psdb__sha256_ctx *sha)
{
    char buf[1 << 16];
    uint64_t n = 0;
    if (lseek(fd, 0, SEEK_SET) != 0)
        return PSDB_E_IO;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return PSDB_E_IO;
        if (r == 0)
            break;
        psdb__sha256_update(sha, buf, (size_t)r);
        n += (uint64_t)r;
    }
    *have = n;
    return PSDB_S_OK;
}

static int fsync_dir_of(const char *path)
{
    char *dir = psdb__strdup(path);
    if (!dir)
        return -1;
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else {
        dir[0] = '.';
        dir[1] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static char *blob_url(const psdb_client *c, const psdb_manifest *m)
{
    char *url = NULL;
    if (strncmp(m->url, "http://", 7) == 0 || strncmp(m->url, "https://", 8) == 0)
        return psdb__strdup(m->url);
    if (asprintf(&url, "%s%s%s", c->server_url, m->url[0] == '/' ? "" : "/", m->url) < 0)
        return NULL;
    return url;
}

psdb_hr psdb_client_download(psdb_client *c, const psdb_manifest *m, const char *dest_path)
{
    psdb_hr hr = PSDB_S_OK;
    char *part = NULL, *url = NULL;
    file_sink s = {0};
    struct curl_slist *headers = NULL;
    s.fd = -1;

    if (!c || !m || !dest_path || !m->url)
        return PSDB_E_INVALIDARG;
    c->error[0] = '\0';
    /* The signature is checked first: nothing is fetched for a manifest no trusted key signed. */
    hr = psdb_client_verify_manifest(c, m);
    if (PSDB_FAILED(hr))
        goto cleanup;
    url = blob_url(c, m);
    if (asprintf(&part, "%s.part", dest_path) < 0)
        part = NULL;
    s.sha = psdb__sha256_begin();
    if (!url || !part || !s.sha) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    s.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s.fd < 0) {
        hr = psdb__errno_hr(errno);
        psdb__client_error(c, "download: open %s: %s", part, strerror(errno));
        goto cleanup;
    }
    hr = rehash_part(s.fd, &s.have, s.sha);
    if (PSDB_FAILED(hr)) {
        psdb__client_error(c, "download: read %s: %s", part, strerror(errno));
        goto cleanup;
    }
    if (s.have > m->size) {
        /* Longer than the blob: not a prefix of it. Start over. */
        uint8_t discard[32];
        psdb__sha256_end(s.sha, discard);
        s.sha = psdb__sha256_begin();
        if (!s.sha || ftruncate(s.fd, 0) != 0) {
            hr = s.sha ? PSDB_E_IO : PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        s.have = 0;
    }
    if (lseek(s.fd, (off_t)s.have, SEEK_SET) < 0) {
        hr = PSDB_E_IO;
        goto cleanup;
    }
    s.c = c;
    s.limit = m->size;
    s.what = dest_path;
    for (uint32_t attempt = 1; s.have < m->size; attempt++) {
        char range[64];
        long status = 0;
        s.attempt = attempt;
        s.status = 0;
        s.accept_body = 0;
        s.too_long = 0;
        s.write_errno = 0;
        CURL *h = new_handle(c, url, &headers);
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        s.h = h;
        if (s.have > 0) {
            snprintf(range, sizeof(range), "%llu-", (unsigned long long)s.have);
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, file_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xfer_cb);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        s.h = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        if (s.write_errno) {
            hr = psdb__errno_hr(s.write_errno);
            psdb__client_error(c, "download: write %s: %s", part, strerror(s.write_errno));
            goto cleanup;
        }
        if (s.too_long) {
            hr = PSDB_E_INTEGRITY;
            psdb__client_error(c, "download: %s sent more than the manifest's %llu bytes", url,
                               (unsigned long long)m->size);
            goto cleanup;
        }
        if (status == 416 && s.have == m->size)
            break;
        if (rc == CURLE_OK && (status == 200 || status == 206)) {
            if (s.have >= m->size)
                break;
            /* A short body that ended cleanly: treat as a transient cut and resume. */
        } else if (rc == CURLE_OK && !psdb__http_transient(status)) {
            hr = psdb__http_hr(status);
            psdb__client_error(c, "download: %s answered HTTP %ld", url, status);
            goto cleanup;
        } else if (rc != CURLE_OK && !transient_curl(rc) && rc != CURLE_WRITE_ERROR) {
            hr = PSDB_E_NETWORK;
            psdb__client_error(c, "download: %s: %s", url, curl_easy_strerror(rc));
            goto cleanup;
        }
        if (attempt > c->max_retries) {
            hr = PSDB_E_NETWORK;
            psdb__client_error(c, "download: %s: gave up after %u attempts (%s, HTTP %ld)", url,
                               attempt, curl_easy_strerror(rc), status);
            goto cleanup;
        }
        backoff(c, attempt);
    }
    uint8_t got[32];
    psdb__sha256_end(s.sha, got);
    s.sha = NULL;
    if (s.have != m->size || memcmp(got, m->sha256, 32) != 0) {
        hr = PSDB_E_INTEGRITY;
        psdb__client_error(c, "download: %s does not match the manifest's SHA-256; discarded", url);
        unlink(part);
        goto cleanup;
    }
    if (fsync(s.fd) != 0) {
        hr = psdb__errno_hr(errno);
        psdb__client_error(c, "download: fsync %s: %s", part, strerror(errno));
        goto cleanup;
    }
    if (rename(part, dest_path) != 0) {
        hr = PSDB_E_IO;
        psdb__client_error(c, "download: rename %s: %s", part, strerror(errno));
        goto cleanup;
    }
    fsync_dir_of(dest_path);
    if (c->progress) {
        psdb_progress p = {dest_path, s.have, m->size, s.attempt};
        c->progress(&p, c->progress_ctx);
    }
cleanup:
    if (hr == PSDB_E_DISK_FULL && part)
        unlink(part); /* give the space back; nothing of it is usable */
    if (s.fd >= 0)
        close(s.fd);
    if (s.sha) {
        uint8_t discard[32];
        psdb__sha256_end(s.sha, discard);
    }
    curl_slist_free_all(headers);
    free(part);
    free(url);
    return hr;
}
