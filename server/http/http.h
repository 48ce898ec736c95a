/* http.h - psdbd's HTTP API v1 on libmicrohttpd (schema/HTTP.md). */
#ifndef PSDBD_HTTP_H
#define PSDBD_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "config.h"
#include "http_parse.h"
#include "index.h"
#include "stats.h"
#include "store.h"
#include "valuemaps.h"

/* Resolve misses' demand on the farm's queue, coalesced and written by a thread of its own
 * (farm_demand.c). */
typedef struct psdbd_farm_demand psdbd_farm_demand;
psdbd_farm_demand *psdbd_farm_demand_start(psdbd_index *ix, const psdbd_job_bounds *bounds,
                                           char *err, size_t err_size);
/* Counts one miss of q's cell; never blocks on the index. */
void psdbd_farm_demand_miss(psdbd_farm_demand *d, const psdbd_query *q);
/* Writes the misses counted so far and waits for them: what reads the queue calls it first.
 * 0, or -1 when a cell could not be written (logged). NULL is a no-op. */
int psdbd_farm_demand_flush(psdbd_farm_demand *d);
/* Stops the thread after writing every miss counted. NULL is a no-op. */
void psdbd_farm_demand_stop(psdbd_farm_demand *d);

typedef struct psdbd_server {
    const psdbd_config *cfg;
    psdbd_index *ix;
    psdbd_stats *stats;             /* NULL: demand recording is off */
    psdbd_farm_demand *farm_demand; /* NULL: a miss writes its job demand at once */
    psdbd_store store;
    psdbd_valuemaps *vmaps; /* derives value maps: the publishes' in the background */
    /* One libmicrohttpd daemon per worker thread, fed by the acceptor (http/acceptor.c). */
    struct http_worker *workers;
    unsigned num_workers;
    struct http_acceptor *acceptor;
    uint16_t port; /* the bound port, known after psdbd_http_start */
    /* Requests between their first callback and their completion; shutdown sets `draining` and
     * waits on `idle` for zero. An atomic, not under `lock`: every request counts itself twice,
     * and a lock shared by all workers would make each wait for any worker the scheduler
     * preempted while holding it. */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    atomic_uint active;
    atomic_int draining;
    /* Publishes finish on finisher threads (validation, fsync, commit) while their connection is
     * suspended; `queue` holds those waiting, `jobs` counts queued and running ones. */
    pthread_t *finishers;
    unsigned num_finishers;
    pthread_cond_t work;
    struct req *queue;
    unsigned jobs;
    int stopping;
    /* Open connections (struct conn), for the reaper thread that enforces receive deadlines. */
    pthread_mutex_t conns_lock;
    pthread_cond_t reaper_wake;
    struct conn *conns;
    pthread_t reaper_thread;
    int reaper_started, reaper_stop;
} psdbd_server;

/* Starts the daemon (its worker threads inherit the caller's signal mask). srv->cfg, ix, store
 * and vmaps must be set. 0, or -1 with a one-line message in err. */
int psdbd_http_start(psdbd_server *srv, char *err, size_t err_size);

/* Stops accepting, lets in-flight requests finish for up to cfg->shutdown_timeout seconds, then
 * stops the daemon (closing idle keep-alive connections). */
void psdbd_http_stop(psdbd_server *srv);

/* psdbd_parse_range and psdbd_etag_matches are declared in http_parse.h. */

#endif
