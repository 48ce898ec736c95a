/* routes.c - the read routes of psdbd's API: resolve, PSDB manifests and retirement, listings,
 * readiness and metrics. */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cache.h"
#include "common.h"
#include "metrics.h"

/* ---- the other routes ------------------------------------------------------------------------ */

static int parse_id(const char *s, int64_t *out)
{
    uint64_t v = 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    if (psdb__parse_u64(s, &v) != 0 || v == 0 || v > INT64_MAX)
        return -1;
    *out = (int64_t)v;
    return 0;
}

static const char *arg(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

/* Demand recording: a resolve that was answered (hit or miss), never one refused as bad input
 * or unauthorized. */
static void record_resolve(psdbd_server *srv, const psdbd_query *q, int hit)
{
    /* A miss asks the farm for this cell, cached answer or not (schema/HTTP.md, Farm). */
    if (!hit)
        http_farm_resolve_miss(srv, q);
    psdbd_stats_resolve(srv->stats, psdbd_stats_today(), q->app, q->app_version, q->family, hit,
                        q->abi_min, q->abi_max, q->has_profile, q->profile_version);
}

enum MHD_Result http_resolve(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    psdbd_query q = {0};
    json_t *m = NULL;
    const char *v;
    q.app = arg(c, "app");
    q.family = arg(c, "family");
    if (!q.app || !q.family)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "app and family are required");
    if (http_bad_name(c, r, "app", q.app, &ret) || http_bad_name(c, r, "family", q.family, &ret))
        return ret;
    if (!(v = arg(c, "app_version")) || psdb__parse_version(v, &q.app_version) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "app_version is required (a.b.c.d or a number)");
    if (!(v = arg(c, "abi_min")) || psdb__parse_u64(v, &q.abi_min) != 0 ||
        !(v = arg(c, "abi_max")) || psdb__parse_u64(v, &q.abi_max) != 0 || q.abi_min > q.abi_max)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "abi_min and abi_max are required numbers, abi_min <= abi_max");
    if ((v = arg(c, "profile_version")) != NULL) {
        if (psdb__parse_version(v, &q.profile_version) != 0)
            return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                    "profile_version must be a.b.c.d or a number");
        q.has_profile = 1;
    }
    if (http_authorize(srv, c, r, http_reader_role(srv), q.app, &ret) != 0)
        return ret;
    /* The cache key is the parsed query: equivalent spellings share an answer. Only the top 32
     * bits of the profile version matter to the answer. */
    uint64_t gen = psdbd_cache_generation();
    char *key = xasprintf("%s%c%s%c%llx %llx %llx %d %llx", q.app, 0, q.family, 0,
                          (unsigned long long)q.app_version, (unsigned long long)q.abi_min,
                          (unsigned long long)q.abi_max, q.has_profile,
                          (unsigned long long)(q.profile_version >> 32));
    size_t key_len = strlen(q.app) + 1 + strlen(q.family) + 1;
    key_len += strlen(key + key_len);
    psdbd_verdict answer = {0};
    unsigned outcome = 0;
    char *body = NULL;
    size_t len = 0;
    if (psdbd_cache_get(key, key_len, &outcome, &body, &len)) {
        free(key);
        psdbd_metrics_resolve(outcome == PSDBD_OUTCOME_OK);
        record_resolve(srv, &q, outcome == PSDBD_OUTCOME_OK);
        return http_reply_buffer(c, r, (psdbd_outcome)outcome, JSON_TYPE, body, len);
    }
    switch (psdbd_index_resolve(srv->ix, &q, &m)) {
    case PSDBD_OK:
        answer.outcome = PSDBD_OUTCOME_OK;
        body = http_json_text(m, &len);
        json_decref(m);
        break;
    case PSDBD_NOT_FOUND:
        psdbd_verdict_fail(&answer, PSDBD_OUTCOME_NOT_FOUND,
                           "no compatible PSDB for this application and adapter");
        body = http_verdict_text(&answer, &len);
        break;
    default:
        free(key);
        return http_reply_index_error(c, r, psdbd_index_failure(srv->ix));
    }
    psdbd_metrics_resolve(answer.outcome == PSDBD_OUTCOME_OK);
    record_resolve(srv, &q, answer.outcome == PSDBD_OUTCOME_OK);
    psdbd_cache_put(key, key_len, answer.outcome, body, len, gen);
    free(key);
    return http_reply_buffer(c, r, answer.outcome, JSON_TYPE, body, len);
}

enum MHD_Result http_psdb_by_id(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *id_text, int retire)
{
    enum MHD_Result ret = MHD_YES;
    int64_t id = 0;
    json_t *m = NULL;
    const char *app;
    psdbd_rc rc;
    if (parse_id(id_text, &id) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "a PSDB id is a positive decimal number");
    /* Authenticate before revealing whether the id exists. */
    if (http_authorize(srv, c, r, retire ? PSDBD_ROLE_PUBLISHER : http_reader_role(srv), NULL,
                       &ret) != 0)
        return ret;
    rc = psdbd_index_get(srv->ix, id, &m);
    if (rc == PSDBD_NOT_FOUND)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no PSDB with id %lld",
                                (long long)id);
    if (rc != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    app = json_string_value(json_object_get(json_object_get(m, "app"), "name"));
    if (http_authorize(srv, c, r, retire ? PSDBD_ROLE_PUBLISHER : http_reader_role(srv), app,
                       &ret) != 0) {
        json_decref(m);
        return ret;
    }
    if (!retire)
        return http_reply_json(c, r, PSDBD_OUTCOME_OK, m);
    json_decref(m);
    m = NULL;
    rc = psdbd_index_retire(srv->ix, id, r->who.name, &m);
    psdbd_cache_invalidate();
    if (rc != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, m);
}

/* `tail` is "<name>/psdbs", as routed. */
enum MHD_Result http_app_psdbs(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                               const char *tail)
{
    enum MHD_Result ret = MHD_YES;
    json_t *list = NULL;
    size_t n = strlen(tail) - strlen("/psdbs");
    char *name = xmalloc(n + 1);
    memcpy(name, tail, n);
    name[n] = '\0';
    if (http_bad_name(c, r, "application name", name, &ret))
        goto cleanup;
    if (http_authorize(srv, c, r, http_reader_role(srv), name, &ret) != 0)
        goto cleanup;
    switch (psdbd_index_list_app_psdbs(srv->ix, name, &list)) {
    case PSDBD_OK:
        ret = http_reply_json(c, r, PSDBD_OUTCOME_OK, list);
        break;
    case PSDBD_NOT_FOUND:
        ret = http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no such application");
        break;
    default:
        ret = http_reply_index_error(c, r, psdbd_index_failure(srv->ix));
        break;
    }
cleanup:
    free(name);
    return ret;
}

enum MHD_Result http_apps(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    json_t *list = NULL;
    psdbd_rc rc;
    if (http_authorize(srv, c, r, http_reader_role(srv), NULL, &ret) != 0)
        return ret;
    if ((rc = psdbd_index_list_apps(srv->ix, &list)) != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    http_drop_out_of_scope(r, json_object_get(list, "apps"));
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, list);
}

/* May this /metrics answer name `app` (ctx: the request)? Only to a token: where readers need
 * one, an application's name is reader data (an unannounced title shows up in the demand series
 * as soon as someone resolves it). A scoped token sees the applications its scope covers, and
 * "other", the sum of those not named. */
static int metrics_app_visible(const char *app, void *ctx)
{
    const struct req *r = ctx;
    if (!r->who.name)
        return 0;
    return strcmp(app, "other") == 0 || !http_scoped(r) || psdbd_scope_covers(r->who.scope, app);
}

enum MHD_Result http_metrics(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    enum MHD_Result ret = MHD_YES;
    char *text = NULL, *demand = NULL;
    size_t n = 0;
    int private = srv->cfg->readers_need_token;
    psdbd_role need = srv->cfg->metrics_need_token ? PSDBD_ROLE_READER : PSDBD_ROLE_NONE;
    /* Where readers need a token and /metrics does not, a scrape may still bring one: it is
     * checked like any reader's, and decides which applications the answer names. */
    if (need == PSDBD_ROLE_NONE && private &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))
        need = PSDBD_ROLE_READER;
    if (http_authorize(srv, c, r, need, NULL, &ret) != 0)
        return ret;
    text = psdbd_metrics_render();
    {
        /* The farm's queue, from the index (shared by replicas): a gauge per state. */
        static const char *const states[] = {"queued", "leased", "done", "held"};
        int64_t counts[4];
        psdbd_farm_demand_flush(srv->farm_demand);
        if (psdbd_index_job_counts(srv->ix, counts) == PSDBD_OK) {
            char *all = xasprintf("%s# HELP psdb_jobs Farm jobs by state.\n"
                                  "# TYPE psdb_jobs gauge\n",
                                  text);
            for (int i = 0; i < 4; i++) {
                char *more = xasprintf("%spsdb_jobs{state=\"%s\"} %lld\n", all, states[i],
                                       (long long)counts[i]);
                free(all);
                all = more;
            }
            free(text);
            text = all;
        }
    }
    if (srv->stats) {
        FILE *f = open_memstream(&demand, &n);
        if (!f)
            psdbd_out_of_memory();
        psdbd_stats_render_metrics(srv->stats, f);
        if (fclose(f) != 0)
            psdbd_out_of_memory();
        char *all = NULL;
        f = open_memstream(&all, &n);
        if (!f)
            psdbd_out_of_memory();
        fputs(text, f);
        if (private)
            psdbd_metrics_copy_visible(f, demand, metrics_app_visible, r);
        else
            fputs(demand, f);
        if (fclose(f) != 0)
            psdbd_out_of_memory();
        free(demand);
        free(text);
        text = all;
    }
    return http_reply_buffer(c, r, PSDBD_OUTCOME_OK, "text/plain; version=0.0.4", text,
                             strlen(text));
}

enum MHD_Result http_readyz(psdbd_server *srv, struct MHD_Connection *c, struct req *r)
{
    struct stat sb;
    if (psdbd_index_ping(srv->ix) != 0)
        return http_reply_error(
            c, r, PSDBD_OUTCOME_NOT_READY, "%s",
            psdbd_index_lost(srv->ix)
                ? "the index was removed, replaced or damaged, or its database cannot be "
                  "reached; see the server log"
                : "the index does not answer");
    if (stat(srv->store.blob_dir, &sb) != 0 || access(srv->store.tmp_dir, W_OK) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_READY, "the blob store is not usable");
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, json_pack("{s:s}", "status", "ready"));
}
