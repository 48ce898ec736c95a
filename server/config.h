/* config.h - psdbd settings: defaults, the key = value config file, command-line flags. */
#ifndef PSDBD_CONFIG_H
#define PSDBD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef struct psdbd_config {
    char *listen;                       /* "HOST:PORT" or "[V6]:PORT"; port 0 picks a free port */
    char *data_dir;                     /* index.sqlite, blobs/, tmp/ */
    unsigned threads;                   /* MHD worker threads */
    uint64_t max_upload;                /* largest accepted PSDB, bytes */
    unsigned max_connections;           /* concurrent connections */
    unsigned max_connections_per_ip;    /* 0: unlimited */
    unsigned timeout;                   /* seconds a connection may stay idle */
    unsigned request_timeout;           /* seconds to receive a request (0: no deadline) */
    uint64_t upload_min_rate;           /* bytes/s a publish body gets on top of it (0: no limit) */
    unsigned shutdown_timeout;          /* seconds to let in-flight requests finish on SIGTERM */
    unsigned connection_memory;         /* bytes per connection: headers (and upload chunks) */
    unsigned upload_connection_memory;  /* the same for connections that begin with a POST */
    int readers_need_token;             /* reader endpoints require a reader token */
    int metrics_need_token;             /* /metrics requires a reader token */
    int log_requests;                   /* one line per request on stderr */
    char *tls_cert, *tls_key;           /* PEM files; both set: native HTTPS */
    char *index;                        /* postgresql:// URL; NULL: DATA_DIR/index.sqlite */
    unsigned index_pool;                /* PostgreSQL connections at most; 0: by threads */
    unsigned index_statement_timeout;   /* ms a PostgreSQL statement may run (0: no limit) */
    int stats;                          /* record demand (resolves, downloads) for /v1/stats/ */
    unsigned stats_flush_interval;      /* seconds between writes of the demand counts */
    unsigned stats_retention_days;      /* days of demand statistics kept */
    unsigned stats_max_keys;            /* distinct demand counters held between two flushes */
    unsigned stats_top_apps;            /* applications named in the /metrics demand series */
    unsigned stats_max_names;           /* distinct names stored per day */
    uint64_t stats_max_day_bytes;       /* bytes of demand keys stored per day */
    uint64_t stats_max_memory;          /* bytes of demand counters held between two flushes */
    unsigned job_max_attempts;          /* farm: claims of a job before a failure holds it */
    unsigned job_max_queued_per_family; /* farm: open jobs misses make per SODB and family */
    unsigned job_max_queued_per_sodb;   /* farm: the same per SODB (0: no bound) */
} psdbd_config;

/* The default data directory: $PSDBD_DATA_DIR, else $XDG_DATA_HOME/psdbd, else
 * $HOME/.local/share/psdbd, else ./psdbd-data. Malloc'd. */
char *psdbd_default_data_dir(void);

/* The default index: $PSDBD_INDEX (a postgresql:// URL) when set, else NULL
 * (DATA_DIR/index.sqlite). Malloc'd. */
char *psdbd_default_index(void);

/* Fills *cfg with the defaults. */
void psdbd_config_defaults(psdbd_config *cfg);
void psdbd_config_free(psdbd_config *cfg);
/* The PostgreSQL pool a server opens: index-pool where it is set, else one connection per worker
 * thread and two for the threads of psdbd's own that use the index (the demand flush, the farm's
 * demand writer), at least PSDBD_INDEX_PG_POOL_DEFAULT. A worker thread holds one connection for
 * the length of its statements, so fewer than threads leave threads waiting for one
 * (deploy/SCALING.md 3.5 has the figures). */
unsigned psdbd_config_index_pool(const psdbd_config *cfg);

/* Applies one setting by name (the config-file key, the flag without "--"). 0 on success; -1 with a
 * message in err on an unknown key or a bad value. */
int psdbd_config_set(psdbd_config *cfg, const char *key, const char *value, char *err,
                     size_t err_size);

/* Reads a config file: "key = value" lines, '#' comments, blank lines. 0 or -1 with err. */
int psdbd_config_load(psdbd_config *cfg, const char *path, char *err, size_t err_size);

/* Prints the settings' help (flag, meaning, default). */
void psdbd_config_usage(void);

#endif
