/* farm_demand.c - resolve misses' demand on the farm's queue, coalesced in memory and written by a
 * thread of its own (schema/HTTP.md, Farm, Demand).
 *
 * DESIGN: a miss for an application version with an SODB opens or bumps a job, which is a write
 * transaction (and a read of the SODBs even when the application has none). Done on the resolve's
 * thread it made every miss a database round trip (2,989 misses/s against 13,340 without the
 * queue's work on the development VM). A miss now only adds one to its cell's count in a small
 * table under one mutex; the flusher applies the table every FLUSH_MS in one pass, one
 * psdbd_index_job_demand per distinct cell with the count summed, so a flood of misses for one
 * cell is one write. Everything that reads the queue through the API (job lists, claims, the farm
 * statistics, /metrics) flushes first (psdbd_farm_demand_flush), so what a client sees after its
 * miss is as if the miss had been written at once. The table holds at most MAX_CELLS distinct
 * cells between two flushes: a miss beyond them is counted as capped, as a miss over the queue's
 * bounds is. */
#include "http_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "metrics.h"

#define MAX_CELLS 1024u
#define FLUSH_MS 100

typedef struct cell {
    char *app, *family;
    uint64_t app_version, abi_min, abi_max, profile_version;
    int64_t misses;
} cell;

struct psdbd_farm_demand {
    psdbd_index *ix;
    psdbd_job_bounds bounds;
    pthread_mutex_t lock;    /* guards pending, n, stop */
    pthread_mutex_t writing; /* one flush at a time: the thread's or a reader's */
    pthread_cond_t wake;
    cell pending[MAX_CELLS];
    cell taken[MAX_CELLS]; /* the flush's copy, under `writing` */
    unsigned n;
    int stop, started;
    pthread_t thread;
};

static int same_cell(const cell *c, const psdbd_query *q, uint64_t profile)
{
    return c->app_version == q->app_version && c->abi_min == q->abi_min &&
           c->abi_max == q->abi_max && c->profile_version == profile &&
           strcmp(c->app, q->app) == 0 && strcmp(c->family, q->family) == 0;
}

void psdbd_farm_demand_miss(psdbd_farm_demand *d, const psdbd_query *q)
{
    uint64_t profile = q->has_profile ? q->profile_version : 0;
    int capped = 0;
    pthread_mutex_lock(&d->lock);
    unsigned i = 0;
    while (i < d->n && !same_cell(&d->pending[i], q, profile))
        i++;
    if (i < d->n) {
        d->pending[i].misses++;
    } else if (d->n == MAX_CELLS) {
        capped = 1;
    } else {
        cell *c = &d->pending[d->n];
        c->app = psdb__strdup(q->app);
        c->family = psdb__strdup(q->family);
        if (c->app && c->family) {
            c->app_version = q->app_version;
            c->abi_min = q->abi_min;
            c->abi_max = q->abi_max;
            c->profile_version = profile;
            c->misses = 1;
            d->n++;
        } else {
            free(c->app);
            free(c->family);
            capped = 1;
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (capped)
        psdbd_metrics_job_demand_capped();
}

/* Takes the table and writes it. 0, or -1 when a cell could not be written (logged; its misses
 * are lost, as a failed synchronous write's were). */
int psdbd_farm_demand_flush(psdbd_farm_demand *d)
{
    int rc = 0;
    if (!d)
        return 0;
    pthread_mutex_lock(&d->writing);
    pthread_mutex_lock(&d->lock);
    unsigned n = d->n;
    memcpy(d->taken, d->pending, n * sizeof(cell));
    d->n = 0;
    pthread_mutex_unlock(&d->lock);
    for (unsigned i = 0; i < n; i++) {
        cell *c = &d->taken[i];
        psdbd_job_key k = {c->app,     c->app_version, c->family,
                           c->abi_min, c->abi_max,     c->profile_version};
        int created = 0;
        psdbd_rc r = psdbd_index_job_demand(d->ix, &k, c->misses, &d->bounds, &created, NULL);
        if (r != PSDBD_OK && r != PSDBD_NOT_FOUND) {
            psdbd_log("farm: %lld resolve misses of %s were not recorded", (long long)c->misses,
                      c->app);
            rc = -1;
        } else if (r == PSDBD_OK && created < 0) {
            psdbd_metrics_job_demand_capped();
        }
        free(c->app);
        free(c->family);
    }
    pthread_mutex_unlock(&d->writing);
    return rc;
}

static void *flusher(void *arg)
{
    psdbd_farm_demand *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += FLUSH_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!d->stop && pthread_cond_timedwait(&d->wake, &d->lock, &until) != ETIMEDOUT)
            ;
        if (d->n == 0)
            continue;
        pthread_mutex_unlock(&d->lock);
        psdbd_farm_demand_flush(d);
        pthread_mutex_lock(&d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

psdbd_farm_demand *psdbd_farm_demand_start(psdbd_index *ix, const psdbd_job_bounds *bounds,
                                           char *err, size_t err_size)
{
    psdbd_farm_demand *d = calloc(1, sizeof(*d));
    if (!d) {
        snprintf(err, err_size, "farm demand: out of memory");
        return NULL;
    }
    d->ix = ix;
    d->bounds = *bounds;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->writing, NULL);
    pthread_cond_init(&d->wake, NULL);
    if (pthread_create(&d->thread, NULL, flusher, d) != 0) {
        snprintf(err, err_size, "farm demand: cannot start its thread");
        psdbd_farm_demand_stop(d);
        return NULL;
    }
    d->started = 1;
    return d;
}

void psdbd_farm_demand_stop(psdbd_farm_demand *d)
{
    if (!d)
        return;
    if (d->started) {
        pthread_mutex_lock(&d->lock);
        d->stop = 1;
        pthread_cond_signal(&d->wake);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->thread, NULL);
    }
    psdbd_farm_demand_flush(d); /* after the last request: every miss is written */
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->writing);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
