/* farm.c - the compile farm's calls (psdb/farm.h): the SODBs of an application, and a worker's
 * announce, claim, extend, done and fail, each a small JSON request on the client's transport. */
#include "delivery/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "psdb/farm.h"

#include "common/buf.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/parse.h"
#include "common/status_map.h"

#define FARM_MAX_BYTES (64u << 20) /* a job list or SODB list; anything larger is not one */
#define HTTP_NO_CONTENT 204L       /* a claim with nothing to do */
#define FARM_ERROR_MAX 1024u       /* bytes of a failure's line sent to psdbd */

/* The body of a JSON request, sent from memory (again from its start on each attempt). */
typedef struct mem_body {
    const char *p;
    size_t n, at;
} mem_body;

static ssize_t mem_read(void *ctx, psdb__attempt *a, char *buf, size_t n)
{
    mem_body *m = ctx;
    size_t k = m->n - m->at < n ? m->n - m->at : n;
    (void)a;
    memcpy(buf, m->p + m->at, k);
    m->at += k;
    return (ssize_t)k;
}

static int mem_rewind(void *ctx)
{
    ((mem_body *)ctx)->at = 0;
    return 0;
}

static int mem_begin(void *ctx, psdb__attempt *a, const char **range)
{
    (void)a;
    (void)range;
    return mem_rewind(ctx);
}

/* The server's one-line reason from an error answer ({"error", "message"}), added to the last
 * error so that a refusal says what psdbd said. */
static void server_says(psdb_hr hr, const char *who, long status, const psdb__buf *body)
{
    json_t *doc = body->len ? json_loadb((const char *)body->data, body->len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(doc, "message"));
    const char *e = json_string_value(json_object_get(doc, "error"));
    if (status != 0 && m)
        psdb__error_set(hr, "%s: the server answered HTTP %ld %s: %s", who, status, e ? e : "", m);
    json_decref(doc);
}

/* POSTs req (consumed) to c's server + path; the answer asked for is one of expect (0: none) and
 * lands in *body. The statuses of psdb__transport_run, with the server's reason. */
static psdb_hr post_json(psdb_client *c, const char *who, const char *path, json_t *req,
                         long expect0, long expect1, psdb__buf *body, long *status)
{
    psdb_hr hr = PSDB_S_OK;
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL, *url = NULL;
    psdb__response res = {0};
    static const char *const headers[] = {"Content-Type: application/json", "Expect:", NULL};
    json_decref(req);
    *status = 0;
    if (!text || asprintf(&url, "%s%s", c->server_url, path) < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "%s: out of memory", who);
        goto cleanup;
    }
    mem_body mb = {text, strlen(text), 0};
    const psdb__upload up = {.size = (int64_t)mb.n, .read = mem_read, .rewind = mem_rewind};
    psdb__request r = {.who = who,
                       .url = url,
                       .headers = headers,
                       .flags = PSDB__REQ_SMALL,
                       .expect = {expect0, expect1},
                       .body = body,
                       .body_max = FARM_MAX_BYTES,
                       .upload = &up,
                       .ctx = &mb,
                       .begin = mem_begin};
    hr = psdb__transport_run(c, &r, &res);
    *status = res.status;
    if (PSDB_FAILED(hr))
        server_says(hr, who, res.status, body);
cleanup:
    free(text);
    free(url);
    return hr;
}

/* The target object of announce and claim. */
static json_t *target_json(const psdb_target *t)
{
    return json_pack("{s:s, s:I, s:I, s:I}", "family", t->family, "abi_version",
                     (json_int_t)t->abi_version, "compiler_version",
                     (json_int_t)t->compiler_version, "profile_version",
                     (json_int_t)t->profile_version);
}

static psdb_hr check_worker(const char *fn, psdb_client *c, const char *worker,
                            const psdb_target *t)
{
    if (!c || !worker || !*worker || !t || !t->family || !*t->family)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: %s", fn,
                               !c                    ? "NULL client"
                               : !worker || !*worker ? "no worker name"
                               : !t                  ? "NULL target"
                                                     : "no target family");
    char why[128];
    if (psdb__name_check(worker, why, sizeof(why)) != 0 || strlen(worker) > 128)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: the worker name %s", fn,
                               strlen(worker) > 128 ? "is longer than 128 bytes" : why);
    if (psdb__name_check(t->family, why, sizeof(why)) != 0)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: the target family %s", fn, why);
    if (t->abi_version > INT64_MAX || t->compiler_version > INT64_MAX ||
        t->profile_version > INT64_MAX)
        return psdb__error_set(PSDB_E_INVALIDARG, "%s: a target number above 2^63-1", fn);
    return PSDB_S_OK;
}

psdb_hr psdb_client_farm_announce(psdb_client *c, const char *worker, const psdb_target *t,
                                  uint64_t *jobs_created)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__buf body = {0};
    long status = 0;
    json_t *doc = NULL;
    uint64_t n = 0;

    psdb__error_clear();
    if (jobs_created)
        *jobs_created = 0;
    if (PSDB_FAILED(hr = check_worker(__func__, c, worker, t)))
        goto cleanup;
    hr = post_json(c, "announce", "/v1/workers",
                   json_pack("{s:s, s:o}", "worker", worker, "target", target_json(t)),
                   PSDB__HTTP_OK, PSDB__HTTP_CREATED, &body, &status);
    if (PSDB_FAILED(hr))
        goto cleanup;
    doc = json_loadb((const char *)body.data, body.len, 0, NULL);
    if (!json_is_object(doc) || psdb__json_u64(doc, "jobs_created", &n) != 0) {
        hr = psdb__error_set(PSDB_E_PROTOCOL, "announce: the server's answer is not an announce "
                                              "answer (no jobs_created)");
        goto cleanup;
    }
    if (jobs_created)
        *jobs_created = n;
cleanup:
    json_decref(doc);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}

void psdb_farm_job_clear(psdb_farm_job *j)
{
    if (!j)
        return;
    free(j->state);
    free(j->app_name);
    free(j->sodb_id);
    free(j->family);
    free(j->json);
    memset(j, 0, sizeof(*j));
}

/* A string member, or an integer one spelled in decimal (ids travel either way). */
static int dup_str_or_int(json_t *obj, const char *key, char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (json_is_string(v))
        *out = psdb__strdup(json_string_value(v));
    else if (json_is_integer(v) && asprintf(out, "%lld", (long long)json_integer_value(v)) < 0)
        *out = NULL;
    return *out ? 0 : -1;
}

/* A job object into *j (zeroed first); PSDB_E_PROTOCOL with the field named. */
static psdb_hr job_from(json_t *o, psdb_farm_job *j)
{
    psdb_hr hr = PSDB_E_PROTOCOL;
    const char *bad = NULL;
    json_t *app = json_object_get(o, "app"), *target = json_object_get(o, "target");
    memset(j, 0, sizeof(*j));
    if (!json_is_object(o) || !json_is_object(app) || !json_is_object(target)) {
        bad = "app or target";
        goto cleanup;
    }
    const char *sha = json_string_value(json_object_get(o, "sodb_sha256"));
    if (psdb__json_u64(o, "id", &j->id) != 0)
        bad = "id";
    else if (dup_str_or_int(o, "state", &j->state) != 0)
        bad = "state";
    else if (dup_str_or_int(app, "name", &j->app_name) != 0 || !*j->app_name)
        bad = "app.name";
    else if (psdb__json_version(app, "version", &j->app_version) != 0)
        bad = "app.version";
    else if (!sha || strlen(sha) != 64 || psdb__unhex(sha, j->sodb_sha256, 32) != 0)
        bad = "sodb_sha256";
    else if (dup_str_or_int(o, "sodb_id", &j->sodb_id) != 0)
        bad = "sodb_id";
    else if (dup_str_or_int(target, "family", &j->family) != 0 || !*j->family ||
             strlen(j->family) >= PSDB_ADAPTER_FAMILY_MAX)
        bad = "target.family";
    else if (psdb__json_u64(target, "abi_min", &j->abi_min) != 0 ||
             psdb__json_u64(target, "abi_max", &j->abi_max) != 0 || j->abi_min > j->abi_max)
        bad = "target.abi_min/abi_max";
    else if (json_object_get(target, "profile_version") &&
             !json_is_null(json_object_get(target, "profile_version")) &&
             psdb__json_version(target, "profile_version", &j->profile_version) != 0)
        bad = "target.profile_version";
    else if (json_object_get(o, "demand") && psdb__json_u64(o, "demand", &j->demand) != 0)
        bad = "demand";
    else if (json_object_get(o, "attempts") && psdb__json_u64(o, "attempts", &j->attempts) != 0)
        bad = "attempts";
    if (bad)
        goto cleanup;
    if (!(j->json = json_dumps(o, JSON_COMPACT))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    if (bad)
        psdb__error_set(hr, "job: %s missing or malformed", bad);
    else if (PSDB_FAILED(hr))
        psdb__error_set(hr, "job: out of memory");
    if (PSDB_FAILED(hr))
        psdb_farm_job_clear(j);
    return hr;
}

psdb_hr psdb_farm_job_parse(const char *json, size_t size, psdb_farm_job *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    json_t *o = NULL;
    if (!json || !out)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    memset(out, 0, sizeof(*out));
    o = json_loadb(json, size, JSON_REJECT_DUPLICATES, NULL);
    hr = o ? job_from(o, out) : psdb__error_set(PSDB_E_PROTOCOL, "job: not JSON");
    json_decref(o);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_farm_claim_free(psdb_farm_claim *cl)
{
    if (!cl)
        return;
    psdb_farm_job_clear(&cl->job);
    free(cl->lease);
    psdb_manifest_free(cl->base);
    free(cl);
}

psdb_hr psdb_client_farm_claim(psdb_client *c, const char *worker, const psdb_target *t,
                               uint32_t lease_s, psdb_farm_claim **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__buf body = {0};
    long status = 0;
    json_t *doc = NULL;
    psdb_farm_claim *cl = NULL;
    char *base = NULL;

    psdb__error_clear();
    if (out)
        *out = NULL;
    if (PSDB_FAILED(hr = check_worker(__func__, c, worker, t)))
        goto cleanup;
    if (!out) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL out", __func__);
        goto cleanup;
    }
    hr = post_json(c, "claim", "/v1/jobs/claim",
                   json_pack("{s:s, s:o, s:I}", "worker", worker, "target", target_json(t),
                             "lease_s", (json_int_t)(lease_s ? lease_s : 60)),
                   PSDB__HTTP_OK, HTTP_NO_CONTENT, &body, &status);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (status == HTTP_NO_CONTENT) {
        hr = PSDB_S_FALSE; /* nothing to do */
        goto cleanup;
    }
    doc = json_loadb((const char *)body.data, body.len, JSON_REJECT_DUPLICATES, NULL);
    if (!(cl = calloc(1, sizeof(*cl)))) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "claim: out of memory");
        goto cleanup;
    }
    const char *lease = json_string_value(json_object_get(doc, "lease"));
    json_t *jbase = json_object_get(doc, "base");
    if (!json_is_object(doc) || !lease || !*lease ||
        psdb__json_u64(doc, "serial", &cl->serial) != 0) {
        hr = psdb__error_set(PSDB_E_PROTOCOL, "claim: the server's answer has no lease or serial");
        goto cleanup;
    }
    if (PSDB_FAILED(hr = job_from(json_object_get(doc, "job"), &cl->job))) {
        psdb__error_set(hr, "claim: the server's %s", psdb_error_last());
        goto cleanup;
    }
    if (!(cl->lease = psdb__strdup(lease))) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "claim: out of memory");
        goto cleanup;
    }
    if (jbase && !json_is_null(jbase)) {
        if (!(base = json_dumps(jbase, JSON_COMPACT))) {
            hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "claim: out of memory");
            goto cleanup;
        }
        if (PSDB_FAILED(hr = psdb_manifest_parse(base, strlen(base), &cl->base))) {
            psdb__error_set(hr, "claim: the base is not a PSDB manifest");
            goto cleanup;
        }
        if (cl->base->kind != PSDB_MANIFEST_PSDB) {
            hr = psdb__error_set(PSDB_E_PROTOCOL, "claim: the base is not a PSDB manifest");
            goto cleanup;
        }
    }
    *out = cl;
    cl = NULL;
cleanup:
    free(base);
    psdb_farm_claim_free(cl);
    json_decref(doc);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}

/* extend, done and fail: one POST to /v1/jobs/{id}/<verb> whose answer asked for is 200. */
static psdb_hr job_post(psdb_client *c, const psdb_farm_claim *cl, const char *verb, json_t *req)
{
    psdb_hr hr;
    psdb__buf body = {0};
    long status = 0;
    char path[96];
    snprintf(path, sizeof(path), "/v1/jobs/%llu/%s", (unsigned long long)cl->job.id, verb);
    hr = post_json(c, verb, path, req, PSDB__HTTP_OK, 0, &body, &status);
    psdb__buf_free(&body);
    return hr;
}

psdb_hr psdb_client_farm_extend(psdb_client *c, const psdb_farm_claim *cl, uint32_t lease_s)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__error_clear();
    if (!c || !cl || !cl->lease)
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL client or claim", __func__);
    else
        hr = job_post(c, cl, "extend",
                      json_pack("{s:s, s:I}", "lease", cl->lease, "lease_s",
                                (json_int_t)(lease_s ? lease_s : 60)));
    return psdb__client_ret(c, hr, err_mark, __func__);
}

psdb_hr psdb_client_farm_done(psdb_client *c, const psdb_farm_claim *cl, const char *psdb_id)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__error_clear();
    if (!c || !cl || !cl->lease || !psdb_id)
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL client, claim or psdb_id", __func__);
    else
        hr = job_post(c, cl, "done",
                      json_pack("{s:s, s:s}", "lease", cl->lease, "psdb_id", psdb_id));
    return psdb__client_ret(c, hr, err_mark, __func__);
}

psdb_hr psdb_client_farm_fail(psdb_client *c, const psdb_farm_claim *cl, const char *error)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    char line[FARM_ERROR_MAX + 1];
    psdb__error_clear();
    if (!c || !cl || !cl->lease || !error) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL client, claim or error", __func__);
        goto cleanup;
    }
    /* One line: a control character would make it two, or hide part of it on a terminal. The
     * cut may split a UTF-8 sequence: the last bytes of a partial one become '?'. */
    snprintf(line, sizeof(line), "%s", error);
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    if (strlen(error) > FARM_ERROR_MAX) {
        size_t n = strlen(line);
        while (n > 0 && ((unsigned char)line[n - 1] & 0xC0) == 0x80)
            line[--n] = '\0';
        if (n > 0 && ((unsigned char)line[n - 1] & 0x80))
            line[n - 1] = '?';
    }
    json_t *req = json_pack("{s:s, s:s}", "lease", cl->lease, "error", line);
    if (!req) /* not UTF-8 after all: sent as ASCII */
        for (char *p = line; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
    hr = job_post(c, cl, "fail",
                  req ? req : json_pack("{s:s, s:s}", "lease", cl->lease, "error", line));
cleanup:
    return psdb__client_ret(c, hr, err_mark, __func__);
}

/* GET path (with query) into *json / *size, checking that the answer is an object with the
 * array `must`. */
static psdb_hr get_object(psdb_client *c, const char *who, const char *url, const char *must,
                          psdb__buf *body, json_t **doc)
{
    long status = 0;
    psdb_hr hr = psdb__transport_get(c, who, url, FARM_MAX_BYTES, body, &status);
    if (PSDB_FAILED(hr)) {
        server_says(hr, who, status, body);
        return hr;
    }
    *doc = json_loadb((const char *)body->data, body->len, 0, NULL);
    if (!json_is_object(*doc) || !json_is_array(json_object_get(*doc, must)))
        return psdb__error_set(PSDB_E_PROTOCOL, "%s: the server's answer has no \"%s\" array", who,
                               must);
    return PSDB_S_OK;
}

psdb_hr psdb_client_farm_jobs(psdb_client *c, const char *state, char **json, size_t *size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__buf body = {0};
    char *url = NULL, *e_state = NULL;
    json_t *doc = NULL;

    psdb__error_clear();
    if (!c || !json || !size) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: NULL client or out", __func__);
        goto cleanup;
    }
    *json = NULL;
    *size = 0;
    if ((state && !(e_state = psdb__url_escape(state))) ||
        asprintf(&url, "%s/v1/jobs%s%s", c->server_url, state ? "?state=" : "",
                 state ? e_state : "") < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "jobs: out of memory");
        goto cleanup;
    }
    if (PSDB_FAILED(hr = get_object(c, "jobs", url, "jobs", &body, &doc)))
        goto cleanup;
    if (!(*json = malloc(body.len + 1))) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "jobs: out of memory");
        goto cleanup;
    }
    memcpy(*json, body.data, body.len);
    (*json)[body.len] = '\0';
    *size = body.len;
cleanup:
    json_decref(doc);
    free(url);
    free(e_state);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}

void psdb_manifest_list_free(psdb_manifest **v, uint32_t n)
{
    for (uint32_t i = 0; v && i < n; i++)
        psdb_manifest_free(v[i]);
    free(v);
}

psdb_hr psdb_client_list_sodbs(psdb_client *c, const char *app, uint64_t app_version,
                               psdb_manifest ***out, uint32_t *count)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr;
    psdb__buf body = {0};
    char *url = NULL, *e_app = NULL, *one = NULL;
    json_t *doc = NULL;
    psdb_manifest **v = NULL;
    uint32_t n = 0;

    psdb__error_clear();
    if (out)
        *out = NULL;
    if (count)
        *count = 0;
    if (!c || !app || !*app || !out || !count) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "%s: %s", __func__,
                             app && !*app ? "empty app name" : "NULL argument");
        goto cleanup;
    }
    e_app = psdb__url_escape(app);
    if (!e_app || asprintf(&url, "%s/v1/sodbs?app=%s&app_version=%llu", c->server_url, e_app,
                           (unsigned long long)app_version) < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "sodbs: out of memory");
        goto cleanup;
    }
    if (PSDB_FAILED(hr = get_object(c, "sodbs", url, "sodbs", &body, &doc)))
        goto cleanup;
    json_t *arr = json_object_get(doc, "sodbs");
    size_t total = json_array_size(arr);
    if (total > UINT32_MAX || (total && !(v = calloc(total, sizeof(*v))))) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "sodbs: out of memory");
        goto cleanup;
    }
    for (n = 0; n < total; n++) {
        free(one);
        if (!(one = json_dumps(json_array_get(arr, n), JSON_COMPACT))) {
            hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "sodbs: out of memory");
            goto cleanup;
        }
        hr = psdb_manifest_parse(one, strlen(one), &v[n]);
        if (PSDB_SUCCEEDED(hr) && v[n]->kind != PSDB_MANIFEST_SODB)
            hr = PSDB_E_PROTOCOL;
        if (PSDB_FAILED(hr)) {
            if (hr == PSDB_E_PROTOCOL)
                psdb__error_set(hr,
                                "sodbs: entry %u of the server's answer is not an SODB "
                                "manifest",
                                n);
            if (v[n])
                n++; /* freed with the rest */
            goto cleanup;
        }
    }
    *out = v;
    *count = n;
    v = NULL;
cleanup:
    psdb_manifest_list_free(v, n);
    free(one);
    json_decref(doc);
    free(url);
    free(e_app);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}
