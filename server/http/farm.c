/* farm.c - the compile farm's routes (schema/HTTP.md, Farm): the SODB listing, the job queue
 * (create, claim, extend, done, fail, list), worker announcements, and the jobs a resolve miss
 * creates. The queue itself is the index's (index_farm.c); this file is the protocol. */
#include "http_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "common.h"
#include "metrics.h"

#define LEASE_S_DEFAULT 60
#define LEASE_S_MAX 3600

static const char *arg(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

enum MHD_Result http_sodbs_list(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    const char *app = arg(c, "app"), *v = arg(c, "app_version");
    uint64_t version = 0;
    json_t *list = NULL;
    psdbd_rc rc;
    if (!app)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "app is required");
    if (http_bad_name(c, r, "app", app, &ret))
        return ret;
    if (v && psdb__parse_version(v, &version) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "app_version must be a.b.c.d or a number");
    if (http_authorize(srv, c, r, http_reader_role(srv), app, &ret) != 0)
        return ret;
    if ((rc = psdbd_index_sodb_list(srv->ix, app, v != NULL, version, &list)) != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, list);
}

enum MHD_Result http_sodb_by_id(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *id_text)
{
    enum MHD_Result ret = MHD_YES;
    int retire = strcmp(r->method, "DELETE") == 0;
    psdbd_role need = retire ? PSDBD_ROLE_PUBLISHER : http_reader_role(srv);
    uint64_t id = 0;
    json_t *m = NULL;
    psdbd_rc rc;
    if (!retire && strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_METHOD_NOT_ALLOWED, "%.16s is not allowed here",
                               r->method);
        goto cleanup;
    }
    if (!*id_text || strlen(id_text) > 19 || id_text[strspn(id_text, "0123456789")] != '\0' ||
        psdb__parse_u64(id_text, &id) != 0 || id == 0 || id > INT64_MAX) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                               "an SODB id is a positive decimal number");
        goto cleanup;
    }
    /* Authenticate before revealing whether the id exists; then the scope of its application (a
     * compiler's role is below a publisher's: it never retires). */
    if (http_authorize(srv, c, r, need, NULL, &ret) != 0)
        goto cleanup;
    if ((rc = psdbd_index_sodb_get(srv->ix, (int64_t)id, &m)) != PSDBD_OK) {
        ret = rc == PSDBD_NOT_FOUND
                  ? http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no SODB with id %llu",
                                     (unsigned long long)id)
                  : http_reply_index_error(c, r, rc);
        goto cleanup;
    }
    if (http_authorize(srv, c, r, need,
                       json_string_value(json_object_get(json_object_get(m, "app"), "name")),
                       &ret) != 0)
        goto cleanup;
    if (retire) {
        json_decref(m);
        m = NULL;
        if ((rc = psdbd_index_sodb_retire(srv->ix, (int64_t)id, r->who.name, NULL, NULL, &m)) !=
            PSDBD_OK) {
            ret = http_reply_index_error(c, r, rc);
            goto cleanup;
        }
    }
    ret = http_reply_json(c, r, PSDBD_OUTCOME_OK, m);
    m = NULL; /* the reply's */
cleanup:
    json_decref(m);
    return ret;
}

/* ---- request bodies ---------------------------------------------------------------------------
 */

/* The JSON object of a farm POST: NULL after an answer was queued (*ret). */
static json_t *body_object(struct MHD_Connection *c, struct req *r, enum MHD_Result *ret)
{
    json_error_t jerr;
    json_t *o = NULL;
    if (r->body_too_large) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_TOO_LARGE, "the body is over %d bytes",
                                FARM_BODY_MAX);
        return NULL;
    }
    o = r->body ? json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (!json_is_object(o)) {
        json_decref(o);
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "the body must be a JSON object (schema/HTTP.md, Farm)");
        return NULL;
    }
    return o;
}

/* A member that is a name (psdb's rule), or NULL. */
static const char *name_of(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    char why[128];
    if (!s || !*s || strlen(s) > PSDB_STATEMENT_STRING_MAX || psdb__name_check(s, why, sizeof(why)))
        return NULL;
    return s;
}

/* A member that is a number >= 0 or a version text ("a.b.c.d", when versions): 0 with *out;
 * absent: `dflt` (-1: required). */
static int number_of(const json_t *o, const char *key, int versions, int64_t dflt, uint64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        *out = (uint64_t)dflt;
        return dflt < 0 ? -1 : 0;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (versions && json_is_string(v))
        return psdb__parse_version(json_string_value(v), out);
    return -1;
}

/* A worker's target ({"worker", "target": {...}}). 0, or -1 after an answer. */
static int target_of(struct MHD_Connection *c, struct req *r, const json_t *o, psdbd_farm_target *t,
                     enum MHD_Result *ret)
{
    const json_t *tg = json_object_get(o, "target");
    t->worker = name_of(o, "worker");
    t->family = name_of(tg, "family");
    if (!t->worker || !t->family || number_of(tg, "abi_version", 0, -1, &t->abi_version) != 0 ||
        t->abi_version > INT64_MAX ||
        number_of(tg, "compiler_version", 1, 0, &t->compiler_version) != 0 ||
        number_of(tg, "profile_version", 1, 0, &t->profile_version) != 0) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "worker (a name) and target {family, abi_version[, "
                                "compiler_version, profile_version]} are required");
        return -1;
    }
    return 0;
}

/* ---- routes -----------------------------------------------------------------------------------
 */

static enum MHD_Result announce(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_farm_target t = {0};
    json_t *o = NULL;
    int64_t created = 0;
    psdbd_rc rc;
    if (http_authorize_compiler(srv, c, r, &ret) != 0 || !(o = body_object(c, r, &ret)) ||
        target_of(c, r, o, &t, &ret) != 0)
        goto cleanup;
    rc = psdbd_index_worker_announce(
        srv->ix, &t, r->who.role == PSDBD_ROLE_ADMIN ? "*" : r->who.scope, &created);
    if (rc != PSDBD_OK) {
        ret = http_reply_index_error(c, r, rc);
        goto cleanup;
    }
    ret = http_reply_json(
        c, r, PSDBD_OUTCOME_OK,
        json_pack("{s:s, s:I}", "worker", t.worker, "jobs_created", (json_int_t)created));
cleanup:
    json_decref(o);
    return ret;
}

static enum MHD_Result job_create(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_job_key k = {0};
    json_t *o = NULL, *job = NULL;
    int created = 0;
    psdbd_rc rc;
    if (http_authorize(srv, c, r, PSDBD_ROLE_PUBLISHER, NULL, &ret) != 0 ||
        !(o = body_object(c, r, &ret)))
        goto cleanup;
    k.app = name_of(o, "app");
    k.family = name_of(o, "family");
    if (!k.app || !k.family || number_of(o, "app_version", 1, -1, &k.app_version) != 0 ||
        number_of(o, "abi_version", 0, -1, &k.abi_min) != 0 ||
        number_of(o, "abi_max", 0, (int64_t)k.abi_min, &k.abi_max) != 0 || k.abi_max < k.abi_min ||
        k.abi_max > INT64_MAX || number_of(o, "profile_version", 1, 0, &k.profile_version) != 0) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                               "app, app_version, family and abi_version are required "
                               "(abi_max >= abi_version, profile_version optional)");
        goto cleanup;
    }
    if (http_authorize(srv, c, r, PSDBD_ROLE_PUBLISHER, k.app, &ret) != 0)
        goto cleanup;
    rc = psdbd_index_job_demand(srv->ix, &k, 0, NULL, &created, &job);
    if (rc == PSDBD_NOT_FOUND)
        ret = http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND,
                               "application '%s' has no published SODB of this version", k.app);
    else if (rc != PSDBD_OK)
        ret = http_reply_index_error(c, r, rc);
    else
        ret = http_reply_json(c, r, created ? PSDBD_OUTCOME_CREATED : PSDBD_OUTCOME_OK, job);
cleanup:
    json_decref(o);
    return ret;
}

static enum MHD_Result claim(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_farm_target t = {0};
    json_t *o = NULL, *answer = NULL;
    uint64_t lease_s = 0;
    psdbd_rc rc;
    if (http_authorize_compiler(srv, c, r, &ret) != 0 || !(o = body_object(c, r, &ret)) ||
        target_of(c, r, o, &t, &ret) != 0)
        goto cleanup;
    if (number_of(o, "lease_s", 0, LEASE_S_DEFAULT, &lease_s) != 0 || lease_s < 1 ||
        lease_s > LEASE_S_MAX) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "lease_s must be 1 to %d seconds",
                               LEASE_S_MAX);
        goto cleanup;
    }
    rc = psdbd_index_job_claim(srv->ix, &t, r->who.role == PSDBD_ROLE_ADMIN ? "*" : r->who.scope,
                               (int64_t)lease_s, srv->cfg->job_max_attempts, &answer);
    if (rc == PSDBD_NOT_FOUND)
        ret = http_reply_buffer(c, r, PSDBD_OUTCOME_NO_CONTENT, JSON_TYPE, xstrdup(""), 0);
    else if (rc != PSDBD_OK)
        ret = http_reply_index_error(c, r, rc);
    else
        ret = http_reply_json(c, r, PSDBD_OUTCOME_OK, answer);
cleanup:
    json_decref(o);
    return ret;
}

/* The answer of a lease operation that failed in the index. */
static enum MHD_Result lease_error(struct MHD_Connection *c, struct req *r, psdbd_rc rc, int64_t id)
{
    if (rc == PSDBD_NOT_FOUND)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no job with id %lld",
                                (long long)id);
    if (rc == PSDBD_CONFLICT)
        return http_reply_error(c, r, PSDBD_OUTCOME_LEASE_LOST,
                                "job %lld is not leased with this lease (it expired and was "
                                "claimed again, or the job ended)",
                                (long long)id);
    return http_reply_index_error(c, r, rc);
}

/* POST /v1/jobs/<id>/extend|done|fail. */
static enum MHD_Result lease_op(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                int64_t id, const char *op)
{
    enum MHD_Result ret = MHD_YES;
    json_t *o = NULL;
    const char *lease;
    char when[40];
    int64_t result = 0;
    int held = 0;
    psdbd_rc rc;
    if (http_authorize_compiler(srv, c, r, &ret) != 0 || !(o = body_object(c, r, &ret)))
        goto cleanup;
    lease = json_string_value(json_object_get(o, "lease"));
    if (!lease || !psdbd_is_lower_hex(lease, strlen(lease)) || strlen(lease) != 32) {
        ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                               "lease must be the token the claim answered");
        goto cleanup;
    }
    if (strcmp(op, "extend") == 0) {
        uint64_t lease_s = 0;
        if (number_of(o, "lease_s", 0, LEASE_S_DEFAULT, &lease_s) != 0 || lease_s < 1 ||
            lease_s > LEASE_S_MAX) {
            ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                   "lease_s must be 1 to %d seconds", LEASE_S_MAX);
            goto cleanup;
        }
        rc = psdbd_index_job_extend(srv->ix, id, lease, (int64_t)lease_s, &result);
        ret = rc != PSDBD_OK
                  ? lease_error(c, r, rc, id)
                  : http_reply_json(c, r, PSDBD_OUTCOME_OK,
                                    json_pack("{s:s}", "lease_expires",
                                              psdbd_format_time(result, when, sizeof(when))));
    } else if (strcmp(op, "done") == 0) {
        const json_t *p = json_object_get(o, "psdb_id");
        uint64_t psdb_id = 0;
        if (!(json_is_integer(p) && json_integer_value(p) > 0 &&
              (psdb_id = (uint64_t)json_integer_value(p))) &&
            !(json_is_string(p) && psdb__parse_u64(json_string_value(p), &psdb_id) == 0 &&
              psdb_id > 0 && psdb_id <= INT64_MAX)) {
            ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                   "psdb_id must be the id of the published PSDB's manifest");
            goto cleanup;
        }
        rc = psdbd_index_job_done(srv->ix, id, lease, (int64_t)psdb_id, &result);
        if (rc == PSDBD_EXISTS)
            ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                   "PSDB %llu was not compiled from this job's SODB for its "
                                   "family (or does not exist)",
                                   (unsigned long long)psdb_id);
        else if (rc != PSDBD_OK)
            ret = lease_error(c, r, rc, id);
        else {
            psdbd_metrics_job_done(result);
            ret = http_reply_json(c, r, PSDBD_OUTCOME_OK,
                                  json_pack("{s:I, s:s}", "id", (json_int_t)id, "state", "done"));
        }
    } else {
        const char *error = json_string_value(json_object_get(o, "error"));
        char line[512];
        if (!error) {
            ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "error (one line) is required");
            goto cleanup;
        }
        /* Stored and shown on the dashboard: one line of printable text, bounded. */
        snprintf(line, sizeof(line), "%s", error);
        for (char *s = line; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                *s = ' ';
        json_t *utf8 = json_string(line); /* the cut may have split a UTF-8 sequence */
        if (!utf8)
            snprintf(line, sizeof(line), "(an error message cut inside a UTF-8 sequence)");
        json_decref(utf8);
        rc = psdbd_index_job_fail(srv->ix, id, lease, line, srv->cfg->job_max_attempts, &held);
        if (rc != PSDBD_OK)
            ret = lease_error(c, r, rc, id);
        else {
            psdbd_metrics_job_failed();
            ret = http_reply_json(
                c, r, PSDBD_OUTCOME_OK,
                json_pack("{s:I, s:s}", "id", (json_int_t)id, "state", held ? "held" : "queued"));
        }
    }
cleanup:
    json_decref(o);
    return ret;
}

static enum MHD_Result jobs_list(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    const char *state = arg(c, "state");
    json_t *out = NULL, *jobs;
    psdbd_rc rc;
    if (state && strcmp(state, "queued") != 0 && strcmp(state, "leased") != 0 &&
        strcmp(state, "done") != 0 && strcmp(state, "failed") != 0 && strcmp(state, "held") != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "state must be queued, leased, done, failed or held");
    if (http_authorize(srv, c, r, http_reader_role(srv), NULL, &ret) != 0)
        return ret;
    if ((rc = psdbd_index_jobs_list(srv->ix, state, &out)) != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    jobs = json_object_get(out, "jobs");
    if (http_scoped(r))
        for (size_t i = json_array_size(jobs); i-- > 0;) {
            const json_t *app = json_object_get(json_array_get(jobs, i), "app");
            if (!psdbd_scope_covers(r->who.scope, json_string_value(json_object_get(app, "name"))))
                json_array_remove(jobs, i);
        }
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, out);
}

enum MHD_Result http_farm(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                          const char *tail)
{
    int post = strcmp(r->method, "POST") == 0;
    int get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    uint64_t id = 0;
    size_t n = 0;
    /* Every farm request sees the misses made before it (farm_demand.c). */
    psdbd_farm_demand_flush(srv->farm_demand);
    if (strcmp(tail, "workers") == 0 && post)
        return announce(srv, c, r);
    if (strcmp(tail, "jobs") == 0 && post)
        return job_create(srv, c, r);
    if (strcmp(tail, "jobs") == 0 && get)
        return jobs_list(srv, c, r);
    if (strcmp(tail, "jobs/claim") == 0 && post)
        return claim(srv, c, r);
    if (strncmp(tail, "jobs/", 5) == 0) {
        const char *p = tail + 5;
        while (p[n] >= '0' && p[n] <= '9' && n < 20)
            n++;
        char num[24];
        memcpy(num, p, n);
        num[n] = '\0';
        if (n > 0 && p[n] == '/' && psdb__parse_u64(num, &id) == 0 && id > 0 && id <= INT64_MAX &&
            (strcmp(p + n + 1, "extend") == 0 || strcmp(p + n + 1, "done") == 0 ||
             strcmp(p + n + 1, "fail") == 0)) {
            if (!post)
                return http_reply_error(c, r, PSDBD_OUTCOME_METHOD_NOT_ALLOWED,
                                        "%.16s is not allowed here", r->method);
            return lease_op(srv, c, r, (int64_t)id, p + n + 1);
        }
    }
    if (strcmp(tail, "workers") == 0 || strcmp(tail, "jobs") == 0 ||
        strcmp(tail, "jobs/claim") == 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_METHOD_NOT_ALLOWED, "%.16s is not allowed here",
                                r->method);
    return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no such endpoint: /v1/%.200s", tail);
}

void http_farm_resolve_miss(psdbd_server *srv, const psdbd_query *q)
{
    if (srv->farm_demand) { /* the daemon: counted, written by the demand thread */
        psdbd_farm_demand_miss(srv->farm_demand, q);
        return;
    }
    psdbd_job_key k = {q->app,     q->app_version, q->family,
                       q->abi_min, q->abi_max,     q->has_profile ? q->profile_version : 0};
    /* Anyone who may resolve names any family, ABI range and profile: what misses open is
     * bounded (schema/HTTP.md, Farm, Demand); a request or an admin's job add is not. */
    const psdbd_job_bounds b = {srv->cfg->job_max_queued_per_family,
                                srv->cfg->job_max_queued_per_sodb};
    int created = 0;
    psdbd_rc rc = psdbd_index_job_demand(srv->ix, &k, 1, &b, &created, NULL);
    if (rc != PSDBD_OK && rc != PSDBD_NOT_FOUND)
        psdbd_log("farm: the job of a resolve miss of %s was not recorded", q->app);
    else if (rc == PSDBD_OK && created < 0)
        psdbd_metrics_job_demand_capped();
}
