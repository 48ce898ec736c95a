/* stats_api.c - the dashboard (GET /, its script and style sheet, embedded at build time) and
 * the JSON reports under /v1/stats/ that it draws (schema/HTTP.md, Statistics). */
#include "http_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "common/migrate.h"
#include "index_stats.h"

/* Every report's `limit` (schema/HTTP.md, Statistics): what one answer may list, whatever the
 * index holds, so that no report grows with what clients asked for. */
#define PSDBD_STATS_LIMIT_DEFAULT 50
#define PSDBD_STATS_LIMIT_MAX 1000u

/* The files of server/http/dashboard/, embedded by psdb_embed_sql (CMakeLists.txt). */
extern const psdb__sql_set psdbd_dashboard_files;

/* The page loads only its own script and style sheet and talks only to this server: no inline
 * code, so an injected name can never run as script. */
#define DASHBOARD_CSP                                                                              \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "                \
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const struct {
    const char *path, *file, *type;
} dashboard_routes[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/dashboard.js", "dashboard.js", "text/javascript; charset=utf-8"},
    {"/dashboard.css", "dashboard.css", "text/css; charset=utf-8"},
};

enum MHD_Result http_dashboard(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                               const char *url)
{
    const psdb__sql_file *f = NULL;
    const char *type = NULL;
    struct MHD_Response *resp;
    (void)srv;
    for (size_t i = 0; i < sizeof(dashboard_routes) / sizeof(dashboard_routes[0]) && !f; i++) {
        if (strcmp(url, dashboard_routes[i].path) != 0)
            continue;
        for (size_t k = 0; k < psdbd_dashboard_files.count; k++)
            if (strcmp(psdbd_dashboard_files.files[k].name, dashboard_routes[i].file) == 0)
                f = &psdbd_dashboard_files.files[k];
        type = dashboard_routes[i].type;
    }
    if (!f)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no such endpoint: %.200s", url);
    /* The page is a static shell: the data it shows comes from /v1/stats/ with the reader
     * token, so serving the shell itself needs none (it is what asks for the token). */
    resp = MHD_create_response_from_buffer(f->len, (void *)f->sql, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "Content-Security-Policy", DASHBOARD_CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    return http_queue(c, r, PSDBD_OUTCOME_OK, resp, f->len);
}

/* ---- /v1/stats/ ---------------------------------------------------------------------------------
 */

static const char *arg(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && *v ? v : NULL;
}

/* A bounded decimal argument: *out keeps its default when absent. 0, or -1 when malformed. */
static int num_arg(struct MHD_Connection *c, const char *name, uint64_t min, uint64_t max,
                   uint64_t *out)
{
    const char *v = arg(c, name);
    uint64_t x = 0;
    if (!v)
        return 0;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    if (psdb__parse_u64(v, &x) != 0 || x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

static int visible(const char *app, void *ctx)
{
    return psdbd_scope_covers(ctx, app);
}

/* GET /v1/stats/farm: the jobs by state (all applications', as psdb_jobs on /metrics) and the
 * cells farm-built PSDBs fill. */
static psdbd_rc farm_report(psdbd_server *srv, size_t limit, psdbd_stat_visible_fn vis, void *ctx,
                            json_t **out)
{
    int64_t n[4];
    psdbd_farm_demand_flush(srv->farm_demand);
    psdbd_rc rc = psdbd_index_job_counts(srv->ix, n);
    if (rc == PSDBD_OK && (rc = psdbd_index_farm_cells(srv->ix, limit, vis, ctx, out)) == PSDBD_OK)
        json_object_set_new(*out, "jobs",
                            json_pack("{s:I, s:I, s:I, s:I}", "queued", (json_int_t)n[0], "leased",
                                      (json_int_t)n[1], "done", (json_int_t)n[2], "held",
                                      (json_int_t)n[3]));
    return rc;
}

enum MHD_Result http_stats(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                           const char *tail)
{
    enum MHD_Result ret = MHD_YES;
    json_t *out = NULL;
    psdbd_rc rc = PSDBD_OK;
    uint64_t retention = srv->cfg->stats_retention_days, days = retention < 30 ? retention : 30;
    uint64_t limit = PSDBD_STATS_LIMIT_DEFAULT;
    int64_t today = psdbd_stats_today();
    const char *app = NULL, *h = NULL;
    psdbd_stat_visible_fn vis = NULL;
    void *ctx = NULL;
    int history = 0;
    if (strcmp(tail, "coverage") != 0 && strcmp(tail, "matrix") != 0 &&
        strcmp(tail, "missing") != 0 && strcmp(tail, "traffic") != 0 &&
        strcmp(tail, "events") != 0 && strcmp(tail, "farm") != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND,
                                "no such report: /v1/stats/%.100s (coverage, matrix, missing, "
                                "traffic, events, farm)",
                                tail);
    if (num_arg(c, "days", 1, retention, &days) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "days must be a number from 1 to the retention (%u)",
                                srv->cfg->stats_retention_days);
    if (num_arg(c, "limit", 1, PSDBD_STATS_LIMIT_MAX, &limit) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "limit must be a number from 1 to %u", PSDBD_STATS_LIMIT_MAX);
    if ((h = arg(c, "history")) != NULL && psdbd_parse_bool(h, &history) != 0)
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "history must be true or false");
    if (strcmp(tail, "coverage") == 0 && !(app = arg(c, "app")))
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "coverage needs app=NAME");
    /* The answer names the application: a name by the one rule, which is also text JSON can
     * carry. */
    if (app && http_bad_name(c, r, "app", app, &ret))
        return ret;
    if (http_authorize(srv, c, r, http_reader_role(srv), app, &ret) != 0)
        return ret;
    if (http_scoped(r)) {
        vis = visible;
        ctx = r->who.scope;
    }
    int64_t from = today - (int64_t)days + 1;
    if (strcmp(tail, "coverage") == 0)
        rc = psdbd_index_stats_coverage(srv->ix, app, from, (size_t)limit, &out);
    else if (strcmp(tail, "matrix") == 0)
        rc = psdbd_index_stats_matrix(srv->ix, history, (int64_t)time(NULL), (size_t)limit, vis,
                                      ctx, &out);
    else if (strcmp(tail, "missing") == 0)
        rc = psdbd_index_stats_missing(srv->ix, from, today, (size_t)limit, vis, ctx, &out);
    else if (strcmp(tail, "traffic") == 0)
        rc = psdbd_index_stats_traffic(srv->ix, from, today, (size_t)limit, vis, ctx, &out);
    else if (strcmp(tail, "farm") == 0)
        rc = farm_report(srv, (size_t)limit, vis, ctx, &out);
    else
        rc = psdbd_index_stats_events(srv->ix, (size_t)limit, vis, ctx, &out);
    if (rc == PSDBD_NOT_FOUND)
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND,
                                "no PSDBs and no recorded demand for this application");
    if (rc != PSDBD_OK)
        return http_reply_index_error(c, r, rc);
    /* What the reports cannot show: counts since the last flush, and whether recording is on
     * at all (the coverage answer keeps exactly its documented shape). */
    if (strcmp(tail, "coverage") != 0) {
        json_object_set_new(out, "recording", json_boolean(srv->stats != NULL));
        json_object_set_new(out, "flush_interval_s",
                            json_integer((json_int_t)srv->cfg->stats_flush_interval));
    }
    return http_reply_json(c, r, PSDBD_OUTCOME_OK, out);
}
