/* http.h - psdbd's HTTP API v1 on libmicrohttpd (schema/HTTP.md). */
#ifndef PSDBD_HTTP_H
#define PSDBD_HTTP_H

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "index.h"
#include "store.h"

typedef struct psdbd_server {
    const psdbd_config *cfg;
    psdbd_index *ix;
    psdbd_store store;
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
} psdbd_server;

/* Starts the daemon (its worker threads inherit the caller's signal mask). srv->cfg, ix and
 * store must be set. 0, or -1 with a one-line message in err. */
int psdbd_http_start(psdbd_server *srv, char *err, size_t err_size);

/* Stops accepting, lets in-flight requests finish for up to cfg->shutdown_timeout seconds, then
 * stops the daemon (closing idle keep-alive connections). */
void psdbd_http_stop(psdbd_server *srv);

/* Parses one "bytes=" Range header against a blob of `size` bytes. Returns 1 with [*off, *off +
 * *len) for a satisfiable single range; 0 when the header is to be ignored (absent, malformed,
 * several ranges); -1 when unsatisfiable (416). */
int psdbd_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len);

/* True when an If-None-Match value lists the ETag of `sha` (weak or strong) or is "*". */
int psdbd_etag_matches(const char *inm, const char *sha);

#endif
