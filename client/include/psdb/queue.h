/* psdb/queue.h - the asynchronous creation queue and its statistics counters (MODEL Q).
 * Part of psdb/device.h (which includes it); may be included alone. */
#ifndef PSDB_QUEUE_H
#define PSDB_QUEUE_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Async creation queue and counters (MODEL Q) -----------------------------------------------
 * A queue creates pipelines on its own worker threads, the way launchers and games create PSOs off
 * the main thread. Everything submitted to it is a packet: a creation (graphics or compute), a
 * counter read or a counter write. Packets reach their TOP strictly in submission order: a
 * creation's TOP is the moment a worker starts it, and a read or write reaches TOP as soon as every
 * earlier creation has started (it needs no free worker). A creation's EOS is when it finishes:
 * creations run in parallel on the workers, so they end in any order (Q1).
 *
 * Each creation is made with psdb_device_create_compute_pipeline / _graphics_pipeline by a worker
 * right after its TOP, so it selects its PSDB when it starts executing, not when it is submitted
 * (MODEL F): a psdb_device_set_default_session() that returned before the creation's TOP is seen
 * even if it was made after the submission (H4); one overlapping the TOP is seen entirely or not
 * at all (H2). The selection is made once and covers the whole creation (F7).
 *
 * The queue keeps its own counters, a psdb_statistics. They start at zero, with
 * default_psdb_registered copied from the device. Each successful creation updates them at its
 * EOS, as the device counts its own creations (K1), in pipeline_states: created; PSDB-missed when
 * it was not a full PSDB hit (no selection, lookups disabled and partial hits included); total-
 * missed when some unit had to be compiled locally (neither the PSDB nor the local driver cache
 * had it); unknown instead of the two misses when the driver has no ASD.
 * A failed creation is not counted. The counters change as a group, under the queue's lock, just
 * before the creation's callback is called; the creation has ended when its callback returns. The
 * device's own statistics count the same creations as well (psdb_device_get_statistics).
 *
 * Thread safety: a queue may be shared by threads; every function except psdb_queue_release may
 * be called concurrently. Completion callbacks run on worker threads, possibly several at once.
 * A callback may submit creations and writes to its queue, and use any other queue or the device;
 * it must not wait for its own queue: psdb_queue_read_statistics and psdb_queue_wait_idle return
 * PSDB_E_INVALIDARG when called from one of the queue's callbacks, and it must not release it. */
#define PSDB_COUNTER_DEFAULT 0x0u
#define PSDB_COUNTER_READ_AT_EOS 0x1u
#define PSDB_COUNTER_READ_AT_TOP 0x2u
#define PSDB_COUNTER_WRITE_COPY_DATA 0x4u
#define PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER 0x8u
#define PSDB_COUNTER_COMPUTE 0x10u

/* Creates a queue with num_workers worker threads (1..64) on dev. The queue holds its own
 * reference to the device: the device may be released first, the queue keeps working until it is
 * released. Statuses: PSDB_E_INVALIDARG on NULL dev or out, num_workers 0 or above 64;
 * PSDB_E_OUTOFMEMORY (also when a thread cannot be started). *out is the caller's
 * (psdb_queue_release). Thread-safe. */
PSDB_API psdb_hr psdb_device_create_queue(psdb_device *dev, uint32_t num_workers, psdb_queue **out);
/* Submits a creation (graphics, or compute for the _compute_ function) and returns at once.
 * The description is copied in depth at the call: the caller may free or reuse it, and
 * everything it points to, as soon as the call returns. Its PSDB subobject, if any, is copied
 * too and its session gets a reference held until the creation ends (MODEL I2), so the caller may
 * release its own session at once.
 * done(hr, p, ctx) is called exactly once for every submission that returned S_OK, on a worker
 * thread at the creation's EOS, with the status of the device's creation function and, on
 * success, the pipeline: it becomes the callback's (psdb_pipeline_release); on failure p is
 * NULL. A failing creation (an invalid description, F4, a foreign session) never stops the
 * others. Statuses: PSDB_E_INVALIDARG on NULL q, desc or done, or a description that cannot be
 * copied (a NULL pointer with a non-zero size or count; the callback is not called);
 * PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_queue_create_compute_pipeline(
    psdb_queue *q, const psdb_compute_pipeline_desc *desc,
    void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx), void *ctx);
PSDB_API psdb_hr psdb_queue_create_graphics_pipeline(
    psdb_queue *q, const psdb_graphics_pipeline_desc *desc,
    void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx), void *ctx);
/* Reads the queue's counters into *out (Q2). The call is synchronous: it submits a read packet
 * and blocks until the packet has been processed, then returns the snapshot.
 *   READ_AT_EOS (or DEFAULT): at its TOP the read waits for the end (the callback returned) of
 *     every earlier creation of its class - graphics, or compute with PSDB_COUNTER_COMPUTE - and
 *     takes the snapshot at the moment the last of them ends. It holds every earlier creation of
 *     the class in full, plus whatever else had ended by then; it never waits for creations of the
 *     other class nor for later ones, and later packets are not held back behind it.
 *   READ_AT_TOP: the snapshot is taken at the read's TOP (once every earlier creation has
 *     started) without waiting for any creation to end: creations still in flight are missing
 *     from it.
 * Statuses: PSDB_E_INVALIDARG on NULL q or out, unknown flags, write flags, READ_AT_EOS together
 * with READ_AT_TOP, or a call from a completion callback of q. Thread-safe. */
PSDB_API psdb_hr psdb_queue_read_statistics(psdb_queue *q, uint32_t flags, psdb_statistics *out);
/* Replaces the queue's counters with *values (every field, default_psdb_registered included) at
 * the write's TOP, in queue order (Q3). The call returns at once; the write happens when every
 * earlier creation has started (at once when they all have). Creations in flight at that moment
 * count on top of the written values when they end.
 *   WRITE_COPY_DATA (or DEFAULT): *values is copied at the call; the caller may reuse it at once.
 *   WRITE_USE_DATA_BY_POINTER: values is read when the write executes; the caller keeps it valid
 *     until a psdb_queue_read_statistics or psdb_queue_wait_idle call made after this one has
 *     returned (or psdb_queue_release), which proves the write has executed; changes made before
 *     then may or may not be seen.
 * PSDB_COUNTER_COMPUTE is accepted and has no effect: TOP is common to both classes.
 * Statuses: PSDB_E_INVALIDARG on NULL q or values, unknown flags, read flags, both write flags;
 * PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_queue_write_statistics(psdb_queue *q, uint32_t flags,
                                             const psdb_statistics *values);
/* Blocks until every packet submitted before the call has been processed and every creation among
 * them has ended (its callback returned). Packets submitted meanwhile by other threads are not
 * waited for. PSDB_E_INVALIDARG on NULL q or a call from a completion callback of q. Thread-safe.
 */
PSDB_API psdb_hr psdb_queue_wait_idle(psdb_queue *q);
/* Drains the queue (every submitted packet is processed and every callback called, including
 * creations submitted by callbacks meanwhile), stops its workers and frees it, dropping its device
 * reference. NULL is a no-op. Must not run concurrently with other calls on q nor from one of its
 * callbacks. */
PSDB_API void psdb_queue_release(psdb_queue *q);

#ifdef __cplusplus
}
#endif
#endif
