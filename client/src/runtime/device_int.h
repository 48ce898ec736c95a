/* device.h - the device's internal state shared by device.c, session.c, cache_session.c,
 * pipeline.c and state_object.c: selection, lookups, lifetime and statistics (MODEL A, D-K). */
#ifndef PSDB_DEVICE_INTERNAL_H
#define PSDB_DEVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "driver/driver.h"
#include "runtime/runtime.h"
#include "psdb/psdb.h"
#include "common/buf.h"
#include "common/hash.h"

typedef struct psdb__cache_store psdb__cache_store;

/* The local driver cache (MODEL J1): compiled values of this device keyed by value key. Never a
 * PSDB: misses compiled locally land here. */
typedef struct psdb__local_entry {
    uint8_t key[32];
    psdb__buf object_code, metadata;
    struct psdb__local_entry *next;
} psdb__local_entry;

#define PSDB__LOCAL_BUCKETS 1024

typedef struct psdb__local_cache {
    pthread_mutex_t lock;
    psdb__local_entry *buckets[PSDB__LOCAL_BUCKETS];
    size_t count;
} psdb__local_cache;

typedef struct psdb__counters {
    atomic_uint created, psdb_missed, total_missed, unknown;
} psdb__counters;

/* The device-wide default: immutable once published. */
typedef struct psdb__default {
    psdb_session *session; /* referenced */
    uint32_t flags;
} psdb__default;

/* The lookup callback: immutable once published. */
typedef struct psdb__callback {
    psdb__lookup_fn fn;
    void *ctx;
} psdb__callback;
typedef void (*psdb__message_fn)(uint32_t severity, uint32_t id, const char *text, void *ctx);

struct psdb_device {
    /* Internal references: one for the application (dropped by psdb_device_release), one per
     * session and per created object, so the device outlives everything made from it. */
    atomic_uint refs;

    psdb_adapter_desc adapter; /* family points to family_buf */
    char family_buf[PSDB_ADAPTER_FAMILY_MAX];
    psdb_target target; /* what local compiles are made for */
    int has_identity;
    psdb_app_identity identity; /* strings owned */
    char *exe_path, *registry_dir, *cache_dir;
    uint32_t flags;
    uint64_t compile_ns_per_kib;
    const psdb__driver *driver; /* plans and compiles what no PSDB holds (driver/driver.h) */
    int asd;                    /* ASD support (A4) */
    int explicit_supported;     /* ASD and an identity (A4) */

    /* The implicit default (B7), fixed at creation; NULL when absent. It holds no device
     * reference (the device owns it) and is released when the device is freed. */
    psdb_session *implicit;

    /* DESIGN (H1-H5): the device-wide default is one immutable record {session, flags} behind an
     * atomic pointer (NULL: no default); the lookup callback likewise. A creation reads them in a
     * "read section": it increments `readers`, loads the pointers, adds a reference to the
     * session, decrements `readers` - no lock, so creations never wait for one another nor for a
     * setter. A setter, serialized with other setters by set_lock, builds a new record and swaps
     * the pointer (the linearization point: an overlapping creation sees the whole pair from
     * before or after, never a mix (H2); setters take effect in lock order (H3); a creation
     * starting after a set returned loads the new pointer (H4)). Before freeing the old record
     * and releasing its session the setter waits until `readers` is zero: a reader that loaded
     * the old pointer incremented `readers` before loading it, so once the count has been seen
     * at zero it holds its own reference. That wait covers only the few instructions of read
     * sections, never a creation (H5); creations and objects keep their own references (I6). */
    pthread_mutex_t set_lock;
    atomic_uint readers;
    _Atomic(struct psdb__default *) default_rec; /* holds a session reference (E7, I1) */
    _Atomic(struct psdb__callback *) lookup_rec;

    pthread_mutex_t msg_lock;
    psdb__message_fn msg_fn;
    void *msg_ctx;

    atomic_uint_fast64_t next_operation;
    atomic_int precompiled_disabled, implicit_disabled, application_disabled; /* J2 */

    psdb__local_cache local;
    psdb__counters pipeline_stats, state_object_stats; /* K1 */
    atomic_uint local_compiles; /* units compiled locally (tests, benchmarks) */

    psdb_sodb_writer *capture; /* capture_sodb_path; thread-safe */

    /* Blobs of the PSOs this tools device serialized, deduplicated (X3); made on first use by
     * serialized_pso.c, freed through its own destructor. */
    _Atomic(psdb__device_ext *) serialized;

    /* Application-managed cache stores open on this device, shared by identifier (D2). */
    pthread_mutex_t caches_lock;
    psdb__cache_store *caches;
};

#define PSDB__SESSION_PSDB 1u
#define PSDB__SESSION_CACHE 2u

typedef struct psdb__destroy_cb {
    void (*fn)(void *ctx);
    void *ctx;
} psdb__destroy_cb;

struct psdb_session {
    atomic_uint refs;
    uint32_t kind;
    psdb_device *dev;         /* owner (D3); referenced unless owned_by_device */
    int owned_by_device;      /* the implicit default */
    psdb_file *file;          /* PSDB sessions */
    psdb__cache_store *store; /* cache sessions */
    pthread_mutex_t cb_lock;
    psdb__destroy_cb *cbs;
    size_t num_cbs, cap_cbs;
};

/* session.c */
psdb_hr psdb__session_new(psdb_device *dev, uint32_t kind, int owned_by_device, psdb_session **out);
/* Opens a PSDB file for the device's adapter as a session (the implicit default when
 * owned_by_device). */
psdb_hr psdb__session_open_file(psdb_device *dev, const char *path, int owned_by_device,
                                psdb_session **out);

/* cache_session.c */
psdb_hr psdb__cache_find(psdb_session *s, const void *key, size_t key_size, void *value,
                         size_t *value_size);
psdb_hr psdb__cache_store_value(psdb_session *s, const void *key, size_t key_size,
                                const void *value, size_t value_size);
void psdb__cache_detach(psdb_session *s);
void psdb__cache_clear_all(psdb_device *dev);
/* Test hook: number of low bits of the key hash that cache stores created from now on keep
 * (64: all). Fewer bits make DXGI_ERROR_CACHE_HASH_COLLISION reachable in tests. */
void psdb__cache_set_hash_bits(unsigned bits);

/* local cache (device.c) */
void psdb__local_clear(psdb__local_cache *c);

#endif
