/* valuemaps.h - the value maps kept beside the blob store (schema/VALUEMAP.md): their file names,
 * their derivation (once per map however many ask at the same time), the background worker that
 * derives version 2 of each new publish, and what start-up and gc take for leftovers.
 *
 * DESIGN
 * A map is derived from its blob alone, so it is as immutable as the blob and any psdbd (or any
 * replica sharing the data directory) may derive it: the file is written to a unique temporary
 * name (mkstemp), fsynced by libpsdb and renamed over the final name, which therefore only ever
 * holds a whole map. Launchers ask for version 2 right after a publish, so a publish queues it for
 * one worker thread once its index row has committed (never delaying the 201); a request that finds
 * a map missing (version 1 always, version 2 on a replica that did not take the publish, or when
 * the queue was full) derives it itself, and at start the worker walks the store for blobs
 * without one (psdbd_valuemaps_backfill). Within one psdbd, a derivation in progress is in the
 * in-flight list: any other request for the same map, and the worker, wait for it instead of
 * deriving again. Replicas do not coordinate: two of them may each derive a map once, and the
 * second rename replaces identical bytes. */
#ifndef PSDBD_VALUEMAPS_H
#define PSDBD_VALUEMAPS_H

#include <stddef.h>
#include <stdint.h>

#include "psdb/status.h"

#include "store.h"

/* At most this many publishes wait for the worker; past it a publish's map is left to its first
 * request (logged and counted in psdbd_valuemap_queue_dropped_total). */
#define PSDBD_VALUEMAP_QUEUE_MAX 1024

typedef struct psdbd_valuemaps psdbd_valuemaps;

/* <data dir>/valuemaps (malloc'd). */
char *psdbd_valuemap_dir(const psdbd_store *s);
/* <data dir>/valuemaps/<sha>.valuemap for version 1 (as psdbd always named it), <sha>.v2.valuemap
 * for version 2 (malloc'd). */
char *psdbd_valuemap_path(const psdbd_store *s, const char *sha256, unsigned version);

/* Removes both maps of blob `sha256` (best effort, logged): its file was replaced, so maps
 * derived from the old bytes no longer describe it. */
void psdbd_valuemaps_forget(const psdbd_store *s, const char *sha256);

/* What a file name in valuemaps/ is. */
typedef enum psdbd_valuemap_kind {
    PSDBD_VALUEMAP_MAP,       /* a map: *sha256 and *version are set */
    PSDBD_VALUEMAP_TEMPORARY, /* a map's name, a dot and more: a derivation's temporary file, of
                               * this psdbd or of an older one, in progress or left by a kill */
    PSDBD_VALUEMAP_STRAY      /* anything else: not psdbd's */
} psdbd_valuemap_kind;
psdbd_valuemap_kind psdbd_valuemap_classify(const char *name, char sha256[65], unsigned *version);

/* Starts the worker. `clean_leftovers`: no other psdbd shares the data directory, so every
 * temporary in valuemaps/ is a killed derivation's and is removed now. NULL with a message in err
 * when the thread cannot start. */
psdbd_valuemaps *psdbd_valuemaps_start(const psdbd_store *s, int clean_leftovers, char *err,
                                       size_t err_size);

/* Asks the worker to give every blob of the store that has no version 2 map one (those published
 * before psdbd derived maps at publish, or whose derivation was dropped or killed), between and
 * after the publishes it has queued: psdbd calls it at start so that no launcher's first delta
 * update of an old PSDB waits for a derivation. A blob that cannot have one is logged and left to
 * its requests (404, a full download). Logs a summary when the walk ends. */
void psdbd_valuemaps_backfill(psdbd_valuemaps *vm);

/* Lets the derivation in progress finish, drops what is still queued (first requests derive those
 * maps), joins the worker and frees vm. NULL is a no-op. */
void psdbd_valuemaps_stop(psdbd_valuemaps *vm);

/* Queues version 2 of blob `sha256` for the worker; never blocks on a derivation. */
void psdbd_valuemaps_enqueue(psdbd_valuemaps *vm, const char *sha256);

/* Makes sure the map `version` of blob `sha256` exists: PSDB_S_OK when its file is there (found,
 * derived here, or derived meanwhile by the derivation this call waited for), else the failure of
 * the derivation (libpsdb's status, e.g. for a blob that is not a PSDB of this layout, or a
 * system call's errno through psdb__errno_hr; the log says why). Thread-safe. */
psdb_hr psdbd_valuemaps_ensure(psdbd_valuemaps *vm, const char *sha256, unsigned version);

#endif
