/* stats.h - psdbd's demand recording: per-day counts of resolves (hit, miss, what misses asked
 * for) and blob downloads, aggregated in memory and flushed to the index by a background thread.
 *
 * The request threads only add to in-memory counters (a sharded hash table, one mutex per
 * shard): no database work on the hot path. The flusher adds the counts to the index
 * (index_stats.h) every flush interval, when asked (psdbd_stats_flush, SIGUSR1), and once more
 * when the server stops, so a crash loses at most the last interval. What clients can make it
 * keep is bounded (stats.c, DESIGN): in memory by `max_keys` and `max_memory` between two flushes,
 * in the index by `max_names` names and `max_day_bytes` bytes of keys per day and by
 * PSDBD_STATS_NAME_MAX; what is over a bound is summed in the day's aggregate (PSDBD_STAT_OTHER)
 * and counted as dropped, never lost. */
#ifndef PSDBD_STATS_H
#define PSDBD_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "index.h"
#include "index_stats.h"

typedef struct psdbd_stats psdbd_stats;

/* The defaults of the bounds an option leaves 0. */
#define PSDBD_STATS_MAX_NAMES_DEFAULT 1000u
#define PSDBD_STATS_MAX_DAY_BYTES_DEFAULT (4ull << 20)
#define PSDBD_STATS_MAX_MEMORY_DEFAULT (8ull << 20)

typedef struct psdbd_stats_options {
    unsigned flush_interval; /* seconds between flushes (>= 1) */
    unsigned retention_days; /* days of statistics kept (>= 1) */
    unsigned max_keys;       /* distinct keys held between two flushes */
    unsigned top_apps;       /* applications named in /metrics; the rest are "other" */
    unsigned max_names;      /* distinct application and family names stored per day (0: default) */
    uint64_t max_day_bytes;  /* bytes of keys stored per day (0: default) */
    uint64_t max_memory;     /* bytes of keys held between two flushes (0: default) */
} psdbd_stats_options;

/* A recorder; nothing is written until psdbd_stats_start. Never fails (the daemon's allocation
 * policy). */
psdbd_stats *psdbd_stats_create(const psdbd_stats_options *opt);
/* Starts the flusher thread writing to ix. 0, or -1 with a message in err. */
int psdbd_stats_start(psdbd_stats *st, psdbd_index *ix, char *err, size_t err_size);
/* Flushes now and waits for the flush to end: 0 when the counts reached the index (or there were
 * none), -1 when the write failed (the counts are kept for the next one). */
int psdbd_stats_flush(psdbd_stats *st);
/* Stops the flusher after a last flush, then frees everything. NULL is a no-op. */
void psdbd_stats_free(psdbd_stats *st);

/* Hot path, from any thread. A NULL recorder records nothing (recording switched off). `day` is
 * the UTC day number; psdbd_stats_today() gives today's. */
void psdbd_stats_resolve(psdbd_stats *st, int64_t day, const char *app, uint64_t app_version,
                         const char *family, int hit, uint64_t abi_min, uint64_t abi_max,
                         int has_profile, uint64_t profile);
/* One blob response: complete (a 200 sent whole) or partial (a 206, or broken off), its body
 * bytes sent, and the application of the PSDB the blob belongs to (for /metrics; may be NULL). */
void psdbd_stats_download(psdbd_stats *st, int64_t day, const char *sha256, const char *app,
                          int complete, uint64_t bytes);

int64_t psdbd_stats_today(void);

/* The Prometheus series of the counts since start (schema/HTTP.md, Metrics): top applications
 * by name, the rest as app="other". */
void psdbd_stats_render_metrics(psdbd_stats *st, FILE *f);

/* For tests: the held (unflushed) keys and their bytes, and the counts not recorded key by key
 * (summed in a day's aggregate) since start. */
unsigned psdbd_stats_held(psdbd_stats *st);
uint64_t psdbd_stats_held_bytes(psdbd_stats *st);
uint64_t psdbd_stats_dropped(psdbd_stats *st);

#endif
