/* metrics.h - request counters for /metrics (Prometheus text format), lock-free atomics. */
#ifndef PSDBD_METRICS_H
#define PSDBD_METRICS_H

#include <stdint.h>
#include <stdio.h>

typedef enum psdbd_route {
    PSDBD_ROUTE_OTHER = 0,
    PSDBD_ROUTE_HEALTHZ,
    PSDBD_ROUTE_READYZ,
    PSDBD_ROUTE_METRICS,
    PSDBD_ROUTE_PUBLISH,
    PSDBD_ROUTE_PSDB_GET,
    PSDBD_ROUTE_PSDB_RETIRE,
    PSDBD_ROUTE_RESOLVE,
    PSDBD_ROUTE_APPS,
    PSDBD_ROUTE_APP_PSDBS,
    PSDBD_ROUTE_BLOB,
    PSDBD_ROUTE_DASHBOARD,
    PSDBD_ROUTE_STATS,
    PSDBD_ROUTE_SODBS, /* POST and GET /v1/sodbs */
    PSDBD_ROUTE_FARM,  /* /v1/jobs..., /v1/workers */
    PSDBD_ROUTE_COUNT
} psdbd_route;

/* One finished request; status 0: it was aborted (schema/HTTP.md, Access log). */
void psdbd_metrics_request(psdbd_route r, unsigned status, uint64_t body_bytes);
void psdbd_metrics_request_timeout(void);
void psdbd_metrics_publish(int created);
void psdbd_metrics_resolve(int hit);
void psdbd_metrics_connection(int delta);
void psdbd_metrics_upload_bytes(uint64_t n);
/* Value maps (valuemaps.c): one derived (version 1 or 2), one derivation failed, one publish's
 * version 2 not queued for the worker (the queue was full). */
void psdbd_metrics_valuemap_derived(unsigned version);
void psdbd_metrics_valuemap_failed(void);
void psdbd_metrics_valuemap_dropped(void);

/* The farm (schema/HTTP.md, Farm): a job done `seconds` after its claim; a job's failure. */
void psdbd_metrics_job_done(int64_t seconds);
void psdbd_metrics_job_failed(void);
/* A resolve miss that would have opened a job past job-max-queued-per-family|-per-sodb. */
void psdbd_metrics_job_demand_capped(void);

/* The whole exposition (malloc'd). */
char *psdbd_metrics_render(void);

/* Copies the exposition `text` to f, leaving out every sample whose `app` label (unescaped)
 * visible(app, ctx) refuses, and every sample whose app label cannot be read; comments and
 * samples without an app label are copied as they are. Who may learn an application's name is
 * the caller's to say (a /metrics scrape without a reader token, where readers need one). */
void psdbd_metrics_copy_visible(FILE *f, const char *text,
                                int (*visible)(const char *app, void *ctx), void *ctx);

#endif
