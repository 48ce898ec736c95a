/* http.h - psdbd's HTTP API v1 on libmicrohttpd (schema/HTTP.md). */
#ifndef PSDBD_HTTP_H
#define PSDBD_HTTP_H

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "http_parse.h"
#include "index.h"
#include "stats.h"
#include "store.h"
#include "valuemaps.h"

typedef struct psdbd_server {
    const psdbd_config *cfg;
    psdbd_index *ix;
    psdbd_stats *stats; /* NULL: demand recording is off */
    psdbd_store store;
    psdbd_valuemaps *vmaps; /* derives value maps: the publishes' in the background */
    struct MHD_Daemon *daemon;
    uint16_t port; /* the bound port, known after psdbd_http_start */
    /* Requests between their first callback and their completion; shutdown waits for zero. */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned active;
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
