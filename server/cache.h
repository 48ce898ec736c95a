/* cache.h - per-thread cache of /v1/resolve answers, invalidated by a global generation. */
#ifndef PSDBD_CACHE_H
#define PSDBD_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* The current generation. Read it BEFORE computing an answer and store the answer with it: a
 * publish or retire that commits meanwhile then makes the entry stale instead of wrong. */
uint64_t psdbd_cache_generation(void);
/* Called after every commit that can change an answer (publish, retire). */
void psdbd_cache_invalidate(void);

/* Looks `key` up in the calling thread's cache: 1 with *kind (what the answer was,
 * as the caller stored it: psdbd's outcome) and a malloc'd copy of the body,
 * 0 on a miss or a stale entry. */
int psdbd_cache_get(const char *key, size_t key_len, unsigned *kind, char **body, size_t *len);
/* Stores an answer computed at generation `gen` (copies key and body). */
void psdbd_cache_put(const char *key, size_t key_len, unsigned kind, const char *body, size_t len,
                     uint64_t gen);

#endif
