/* metrics.c - request counters for /metrics (Prometheus text format), lock-free atomics. */
#include "metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* The statuses psdbd or libmicrohttpd answer with (schema/HTTP.md); any other counts as
 * "other", and a request the access log marks aborted= as "aborted". */
static const unsigned statuses[] = {200, 201, 204, 206, 304, 400, 401, 403, 404, 405, 409, 411,
                                    412, 413, 414, 416, 417, 431, 500, 501, 503, 505, 507};
#define NSTATUS (sizeof(statuses) / sizeof(statuses[0]))
#define OTHER NSTATUS
#define ABORTED (NSTATUS + 1)

static atomic_uint_fast64_t requests[PSDBD_ROUTE_COUNT][NSTATUS + 2];
static atomic_uint_fast64_t request_timeouts;
static atomic_uint_fast64_t bytes_served, bytes_uploaded;
static atomic_uint_fast64_t publishes_created, publishes_existing;
static atomic_uint_fast64_t resolve_hits, resolve_misses;
static atomic_int_fast64_t connections;
static atomic_uint_fast64_t valuemaps_derived[2], valuemap_failures, valuemap_dropped;

static const char *route_names[PSDBD_ROUTE_COUNT] = {
    "other", "healthz",   "readyz", "metrics",   "publish", "psdb_get", "psdb_retire", "resolve",
    "apps",  "app_psdbs", "blob",   "dashboard", "stats",   "sodbs",    "farm"};
static atomic_uint_fast64_t jobs_done, job_seconds_sum, job_failures, job_demand_capped;

void psdbd_metrics_job_demand_capped(void)
{
    atomic_fetch_add_explicit(&job_demand_capped, 1, memory_order_relaxed);
}

void psdbd_metrics_job_done(int64_t seconds)
{
    atomic_fetch_add_explicit(&jobs_done, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&job_seconds_sum, seconds > 0 ? (uint64_t)seconds : 0,
                              memory_order_relaxed);
}

void psdbd_metrics_job_failed(void)
{
    atomic_fetch_add_explicit(&job_failures, 1, memory_order_relaxed);
}

void psdbd_metrics_request(psdbd_route r, unsigned status, uint64_t body_bytes)
{
    size_t i = 0;
    while (i < NSTATUS && statuses[i] != status)
        i++;
    if (status == 0)
        i = ABORTED;
    if ((unsigned)r >= PSDBD_ROUTE_COUNT)
        r = PSDBD_ROUTE_OTHER;
    atomic_fetch_add_explicit(&requests[r][i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bytes_served, body_bytes, memory_order_relaxed);
}

void psdbd_metrics_publish(int created)
{
    atomic_fetch_add_explicit(created ? &publishes_created : &publishes_existing, 1,
                              memory_order_relaxed);
}

void psdbd_metrics_resolve(int hit)
{
    atomic_fetch_add_explicit(hit ? &resolve_hits : &resolve_misses, 1, memory_order_relaxed);
}

void psdbd_metrics_connection(int delta)
{
    atomic_fetch_add_explicit(&connections, delta, memory_order_relaxed);
}

void psdbd_metrics_request_timeout(void)
{
    atomic_fetch_add_explicit(&request_timeouts, 1, memory_order_relaxed);
}

void psdbd_metrics_upload_bytes(uint64_t n)
{
    atomic_fetch_add_explicit(&bytes_uploaded, n, memory_order_relaxed);
}

void psdbd_metrics_valuemap_derived(unsigned version)
{
    if (version == 1 || version == 2)
        atomic_fetch_add_explicit(&valuemaps_derived[version - 1], 1, memory_order_relaxed);
}

void psdbd_metrics_valuemap_failed(void)
{
    atomic_fetch_add_explicit(&valuemap_failures, 1, memory_order_relaxed);
}

void psdbd_metrics_valuemap_dropped(void)
{
    atomic_fetch_add_explicit(&valuemap_dropped, 1, memory_order_relaxed);
}

char *psdbd_metrics_render(void)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        psdbd_out_of_memory();
    fprintf(f, "# HELP psdbd_http_requests_total HTTP requests by route and status.\n"
               "# TYPE psdbd_http_requests_total counter\n");
    for (int r = 0; r < PSDBD_ROUTE_COUNT; r++)
        for (size_t i = 0; i <= ABORTED; i++) {
            uint64_t n = atomic_load_explicit(&requests[r][i], memory_order_relaxed);
            if (n == 0)
                continue;
            if (i < NSTATUS)
                fprintf(f, "psdbd_http_requests_total{route=\"%s\",status=\"%u\"} %llu\n",
                        route_names[r], statuses[i], (unsigned long long)n);
            else
                fprintf(f, "psdbd_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                        route_names[r], i == OTHER ? "other" : "aborted", (unsigned long long)n);
        }
    fprintf(f,
            "# HELP psdb_job_seconds Farm jobs finished by this psdbd: seconds from claim to "
            "done.\n"
            "# TYPE psdb_job_seconds summary\n"
            "psdb_job_seconds_sum %llu\n"
            "psdb_job_seconds_count %llu\n"
            "# HELP psdb_job_failures_total Farm job failures workers reported to this psdbd.\n"
            "# TYPE psdb_job_failures_total counter\n"
            "psdb_job_failures_total %llu\n"
            "# HELP psdb_job_demand_capped_total Resolve misses that would have opened a farm "
            "job past job-max-queued-per-family or -per-sodb (added to the nearest open job, or "
            "to none).\n"
            "# TYPE psdb_job_demand_capped_total counter\n"
            "psdb_job_demand_capped_total %llu\n",
            (unsigned long long)atomic_load(&job_seconds_sum),
            (unsigned long long)atomic_load(&jobs_done),
            (unsigned long long)atomic_load(&job_failures),
            (unsigned long long)atomic_load(&job_demand_capped));
    fprintf(f,
            "# HELP psdbd_http_response_bytes_total Response body bytes sent.\n"
            "# TYPE psdbd_http_response_bytes_total counter\n"
            "psdbd_http_response_bytes_total %llu\n"
            "# HELP psdbd_upload_bytes_total Request body bytes received by publishes.\n"
            "# TYPE psdbd_upload_bytes_total counter\n"
            "psdbd_upload_bytes_total %llu\n"
            "# HELP psdbd_publishes_total Accepted publishes (created: new; existing: same "
            "content again).\n"
            "# TYPE psdbd_publishes_total counter\n"
            "psdbd_publishes_total{result=\"created\"} %llu\n"
            "psdbd_publishes_total{result=\"existing\"} %llu\n"
            "# HELP psdbd_resolve_total Resolve requests answered.\n"
            "# TYPE psdbd_resolve_total counter\n"
            "psdbd_resolve_total{result=\"hit\"} %llu\n"
            "psdbd_resolve_total{result=\"miss\"} %llu\n"
            "# HELP psdbd_request_timeouts_total Connections closed because a request was not "
            "received within its deadline.\n"
            "# TYPE psdbd_request_timeouts_total counter\n"
            "psdbd_request_timeouts_total %llu\n"
            "# HELP psdbd_connections Open client connections.\n"
            "# TYPE psdbd_connections gauge\n"
            "psdbd_connections %lld\n"
            "# HELP psdbd_valuemaps_derived_total Value maps this psdbd derived from their blob "
            "(version 2 of each publish in the background, any map a request found missing).\n"
            "# TYPE psdbd_valuemaps_derived_total counter\n"
            "psdbd_valuemaps_derived_total{version=\"1\"} %llu\n"
            "psdbd_valuemaps_derived_total{version=\"2\"} %llu\n"
            "# HELP psdbd_valuemap_failures_total Value map derivations that failed (logged).\n"
            "# TYPE psdbd_valuemap_failures_total counter\n"
            "psdbd_valuemap_failures_total %llu\n"
            "# HELP psdbd_valuemap_queue_dropped_total Publishes whose version 2 map was not "
            "queued (the queue was full): their first request derives it.\n"
            "# TYPE psdbd_valuemap_queue_dropped_total counter\n"
            "psdbd_valuemap_queue_dropped_total %llu\n",
            (unsigned long long)atomic_load(&bytes_served),
            (unsigned long long)atomic_load(&bytes_uploaded),
            (unsigned long long)atomic_load(&publishes_created),
            (unsigned long long)atomic_load(&publishes_existing),
            (unsigned long long)atomic_load(&resolve_hits),
            (unsigned long long)atomic_load(&resolve_misses),
            (unsigned long long)atomic_load(&request_timeouts),
            (long long)atomic_load(&connections),
            (unsigned long long)atomic_load(&valuemaps_derived[0]),
            (unsigned long long)atomic_load(&valuemaps_derived[1]),
            (unsigned long long)atomic_load(&valuemap_failures),
            (unsigned long long)atomic_load(&valuemap_dropped));
    if (fclose(f) != 0) /* the stream's buffer could not grow */
        psdbd_out_of_memory();
    return out;
}

/* The unescaped value of the app label of one sample line (line[0..len), the text format's
 * `name{label="value",...} number`) into buf: 1 found, 0 no app label, -1 a label that cannot be
 * read or does not fit. */
static int app_label(const char *line, size_t len, char *buf, size_t size)
{
    const char *p = memchr(line, '{', len), *end = line + len;
    if (!p)
        return 0;
    p++;
    while (p < end && *p != '}') {
        const char *key = p;
        size_t n = 0;
        while (p < end && *p != '=')
            p++;
        if (p + 1 >= end || p[1] != '"')
            return -1;
        int is_app = p - key == 3 && memcmp(key, "app", 3) == 0;
        for (p += 2; p < end && *p != '"'; p++) {
            char ch = *p;
            if (ch == '\\' && ++p < end)
                ch = *p == 'n' ? '\n' : *p;
            if (is_app && n + 1 >= size)
                return -1;
            if (is_app)
                buf[n++] = ch;
        }
        if (p >= end)
            return -1;
        if (is_app) {
            buf[n] = '\0';
            return 1;
        }
        p++; /* the closing quote */
        if (p < end && *p == ',')
            p++;
    }
    return 0;
}

void psdbd_metrics_copy_visible(FILE *f, const char *text,
                                int (*visible)(const char *app, void *ctx), void *ctx)
{
    char app[1024];
    while (*text) {
        const char *nl = strchr(text, '\n');
        size_t len = nl ? (size_t)(nl - text) : strlen(text);
        int has = text[0] == '#' ? 0 : app_label(text, len, app, sizeof(app));
        if (has == 0 || (has > 0 && visible(app, ctx)))
            fwrite(text, 1, len + (nl != NULL), f);
        text += len + (nl != NULL);
    }
}
