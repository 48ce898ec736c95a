/* index_stats.h - the persistence of psdbd's demand statistics: adding a flush's counts, and the
 * reports the /v1/stats/ routes answer with (schema/INDEX.md, Demand statistics); the in-memory
 * aggregation (stats.h) calls only them. index_stats.c builds the reports, the same for every
 * index engine, from the rows of queries each engine runs in its own SQL (index_int.h).
 *
 * Days are UTC days since 1970-01-01. The reports take an optional visibility callback: rows of
 * applications it refuses are left out before anything is summed, so a scoped token never sees
 * another application's counts, even inside a per-family total. */
#ifndef PSDBD_INDEX_STATS_H
#define PSDBD_INDEX_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "index.h"

/* The longest application or family name recorded key by key: a longer one is counted in the
 * day's aggregate (PSDBD_STAT_OTHER) instead. Real names are far shorter; a client can send any
 * name, and what it sends must not grow the server's memory or index without bound. */
#define PSDBD_STATS_NAME_MAX 256

typedef enum psdbd_stat_kind {
    PSDBD_STAT_RESOLVE = 1, /* n[0] hits, n[1] misses of (app, app_version, family) */
    PSDBD_STAT_MISS,        /* n[0] misses asking for (app, version, family, abi range, profile) */
    PSDBD_STAT_DOWNLOAD,    /* n[0] complete, n[1] partial, n[2] body bytes of the blob sha256 */
    PSDBD_STAT_OTHER        /* the day's demand over the recording bounds, not kept key by key:
                               n[0] hits, n[1] misses of resolves, n[2] misses' requests */
} psdbd_stat_kind;

/* One aggregated count to add. Strings are borrowed for the call. */
typedef struct psdbd_stat_row {
    psdbd_stat_kind kind;
    int64_t day;
    const char *app, *family;  /* RESOLVE, MISS */
    uint64_t app_version;      /* RESOLVE, MISS */
    uint64_t abi_min, abi_max; /* MISS */
    int has_profile;           /* MISS: the request named a profile version */
    uint64_t profile;          /* MISS: its top 32 bits (the low 32 bits are zero) */
    const char *sha256;        /* DOWNLOAD */
    uint64_t n[3];
} psdbd_stat_row;

/* Which applications a report may show: returns non-zero for a visible one. NULL: all. */
typedef int (*psdbd_stat_visible_fn)(const char *app, void *ctx);

/* Adds the rows' counts to the stored ones and deletes every row of a day before keep_from_day,
 * in one transaction: PSDBD_OK, or PSDBD_FULL / PSDBD_ERROR / PSDBD_UNAVAILABLE with nothing
 * changed (the caller keeps the counts for the next attempt). */
psdbd_rc psdbd_index_stats_add(psdbd_index *ix, const psdbd_stat_row *rows, size_t n,
                               int64_t keep_from_day);

/* GET /v1/stats/coverage?app=NAME (schema/HTTP.md): {"app", "covered": [...], "missing": [...]}.
 * Missing: misses of days >= from_day that no active PSDB answers now, most asked first, at
 * most `limit`. PSDBD_NOT_FOUND when the application has neither PSDBs nor recorded misses. */
psdbd_rc psdbd_index_stats_coverage(psdbd_index *ix, const char *app, int64_t from_day,
                                    size_t limit, json_t **out);

/* The coverage matrix: {"apps": [...], "families": [...], "cells": [...], "truncated": bool},
 * one cell per (application, family) that has PSDBs, of the first `limit` applications by name
 * (truncated: there were more); `history` adds each cell's retired and superseded PSDBs. `now`
 * (Unix seconds) gives the ages. */
psdbd_rc psdbd_index_stats_matrix(psdbd_index *ix, int history, int64_t now, size_t limit,
                                  psdbd_stat_visible_fn visible, void *ctx, json_t **out);

/* Missing coverage over [from_day, to_day]: {"from", "to", "missing": [{"app", "family",
 * "abi_min", "abi_max", "profile_version", "requests", "last_seen", "days": [{"day",
 * "requests"}]}], "other_requests", "truncated"}, most asked first, at most `limit`;
 * other_requests sums the requests of the entries past the limit and, with visible NULL, of the
 * misses recorded only in the day aggregate (PSDBD_STAT_OTHER). */
psdbd_rc psdbd_index_stats_missing(psdbd_index *ix, int64_t from_day, int64_t to_day, size_t limit,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out);

/* Downloads and resolves per day over [from_day, to_day]: {"from", "to", "by_app": [{"day",
 * "app", "complete", "partial", "bytes"}], "by_family": [{"day", "family", ...}], "resolves":
 * [{"day", "app", "hits", "misses"}], "truncated"}, by day then name. Each list names at most
 * `limit` applications (families), those with the most downloads (resolves) over the range;
 * the rest of a day is one entry with "app" (or "family") null, which in "resolves" also holds,
 * with visible NULL, the day aggregate's resolves (PSDBD_STAT_OTHER). A blob shared by several
 * PSDBs counts for the first. */
psdbd_rc psdbd_index_stats_traffic(psdbd_index *ix, int64_t from_day, int64_t to_day, size_t limit,
                                   psdbd_stat_visible_fn visible, void *ctx, json_t **out);

/* Recent publishes and retirements, newest first, at most `limit`: {"events": [{"event":
 * "publish"|"retire", "at", "by", "id", "app", "app_version", "family", "abi_version",
 * "serial"}], "truncated"}. */
psdbd_rc psdbd_index_stats_events(psdbd_index *ix, size_t limit, psdbd_stat_visible_fn visible,
                                  void *ctx, json_t **out);

/* Every key (PSDBD_STAT_RESOLVE and _MISS rows, counts zero) stored for `day`, each passed to fn
 * (which returns non-zero to stop): what the recorder counts against the day's bounds when it
 * meets the day after a restart. PSDBD_OK, or the index's failure. */
psdbd_rc psdbd_index_stats_day_keys(psdbd_index *ix, int64_t day,
                                    int (*fn)(const psdbd_stat_row *key, void *ctx), void *ctx);

/* "YYYY-MM-DD" of a day number; buf of at least 11 bytes. Returns buf. */
const char *psdbd_format_day(int64_t day, char *buf, size_t size);

#endif
