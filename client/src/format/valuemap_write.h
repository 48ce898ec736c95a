/* valuemap_write.h - the value map's writers (schema/VALUEMAP.md): version 1 and the public entry
 * points in valuemap_write.c (psdb/valuemap.h), version 2 in valuemap_write_v2.c. */
#ifndef PSDB_FORMAT_VALUEMAP_WRITE_H
#define PSDB_FORMAT_VALUEMAP_WRITE_H

#include "psdb/status.h"

/* Writes the version 2 map of psdb_path to out_path (valuemap_write_v2.c), with the statuses of
 * psdb_value_map_write_version. */
psdb_hr psdb__value_map_write_v2(const char *psdb_path, const char *out_path);

/* Creates "<out_path>.tmp" for writing, a new file of ours (a stale one of ours or a link left at
 * the name is removed first, never written through; anything else there is refused): *fd and
 * *tmp (the caller's to free) on success, else the failure recorded under fn's name, *fd -1. */
psdb_hr psdb__vmap_create_tmp(const char *out_path, const char *fn, char **tmp, int *fd);

#endif
