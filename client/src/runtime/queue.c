/* queue.c - the async creation queue (MODEL Q): worker threads that start creations in submission
 * order and finish them in parallel, and the queue's own counters read at EOS or TOP and written
 * at TOP. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compiler.h"
#include "format/desc.h"
#include "runtime/runtime.h"
#include "runtime/queue.h"
#include "common/error.h"

/* DESIGN
 * One mutex guards the packet FIFO, the in-flight lists, the pending EOS reads and the counters.
 * Packets leave the FIFO strictly from its head, so every packet reaches its TOP in submission
 * order (Q1). A creation at the head waits for a free worker; a read or write at the head needs no
 * worker and is processed at once by whichever thread made it the head (the submitter, or the
 * worker that has just taken the creation before it). That makes "TOP" exactly "every earlier
 * creation has started", independent of how many workers are free.
 *
 * A creation that has started is on the in-flight list of its class (graphics or compute), in
 * sequence order: it is appended at its TOP, and TOPs happen in sequence order. An EOS read of a
 * class is satisfied when that list is empty or starts with a later packet; the thread that ends
 * the last earlier creation takes the snapshot under the lock, so no later counter change can slip
 * in between the condition becoming true and the snapshot (Q2).
 *
 * The device selects a PSDB inside psdb_device_create_*_pipeline, which a worker calls right
 * after the creation's TOP: the selection is made when the operation starts executing, once, for
 * the whole creation (MODEL F7, H4). */

#define KIND_CREATE_COMPUTE 1u
#define KIND_CREATE_GRAPHICS 2u
#define KIND_READ 3u
#define KIND_WRITE 4u

#define CLASS_GRAPHICS 0
#define CLASS_COMPUTE 1

#define MAX_WORKERS 64u

#define READ_FLAGS (PSDB_COUNTER_READ_AT_EOS | PSDB_COUNTER_READ_AT_TOP | PSDB_COUNTER_COMPUTE)
#define WRITE_FLAGS                                                                                \
    (PSDB_COUNTER_WRITE_COPY_DATA | PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER | PSDB_COUNTER_COMPUTE)

typedef void (*done_fn)(psdb_hr hr, psdb_pipeline *p, void *ctx);

typedef struct packet {
    uint32_t kind;
    int cls; /* CLASS_* */
    uint64_t seq;
    struct packet *next; /* FIFO */
    /* in-flight list of its class (creations, between TOP and EOS) */
    struct packet *iprev, *inext;

    /* creations */
    void *desc; /* decoded description block: free() */
    int has_sub;
    psdb_session_subobject sub; /* the PSDB subobject; sub.session referenced */
    done_fn done;
    void *ctx;

    /* reads: the packet lives on the reader's stack */
    int at_eos, read_done;
    psdb_statistics snapshot;
    struct packet *next_eos; /* pending EOS reads */

    /* writes */
    psdb_statistics values;
    const psdb_statistics *values_ptr; /* USE_DATA_BY_POINTER */
} packet;

typedef struct inflight_list {
    packet *first, *last;
} inflight_list;

struct psdb_queue {
    psdb_device *dev; /* referenced */
    int asd;          /* counted as "unknown" without ASD, as the device does (K1) */

    pthread_mutex_t lock;
    pthread_cond_t work;    /* workers: a creation is at the head, or stop */
    pthread_cond_t changed; /* readers, wait_idle, release, hooks: progress was made */

    packet *head, *tail;
    uint64_t next_seq;
    uint64_t top_count;
    inflight_list inflight[2];
    packet *eos_reads;
    psdb_statistics stats;
    int stopping;

    pthread_t *threads;
    uint32_t num_threads;
};

/* The queue whose completion callback this thread is running, to refuse calls that would wait
 * for the callback itself. */
static _Thread_local psdb_queue *tls_in_callback;

static void packet_free(packet *p)
{
    if (!p)
        return;
    if (p->has_sub)
        psdb_session_release(p->sub.session);
    free(p->desc);
    free(p);
}

static void inflight_add(psdb_queue *q, packet *p)
{
    inflight_list *l = &q->inflight[p->cls];
    p->inext = NULL;
    p->iprev = l->last;
    if (l->last)
        l->last->inext = p;
    else
        l->first = p;
    l->last = p;
}

static void inflight_remove(psdb_queue *q, packet *p)
{
    inflight_list *l = &q->inflight[p->cls];
    if (p->iprev)
        p->iprev->inext = p->inext;
    else
        l->first = p->inext;
    if (p->inext)
        p->inext->iprev = p->iprev;
    else
        l->last = p->iprev;
    p->iprev = p->inext = NULL;
}

/* Every creation of the read's class submitted before it has ended. */
static int eos_reached(const psdb_queue *q, const packet *r)
{
    const packet *first = q->inflight[r->cls].first;
    return !first || first->seq > r->seq;
}

/* Completes the pending EOS reads whose earlier creations have all ended. Lock held. */
static void settle_eos_reads(psdb_queue *q)
{
    packet **pp = &q->eos_reads;
    while (*pp) {
        packet *r = *pp;
        if (eos_reached(q, r)) {
            *pp = r->next_eos;
            r->snapshot = q->stats;
            r->read_done = 1;
        } else {
            pp = &r->next_eos;
        }
    }
}

/* Processes the reads and writes at the head of the FIFO (their TOP: every earlier creation has
 * started) and wakes a worker when a creation is at the head. Lock held. */
static void pump(psdb_queue *q)
{
    int progressed = 0;
    while (q->head && q->head->kind >= KIND_READ) {
        packet *p = q->head;
        q->head = p->next;
        if (!q->head)
            q->tail = NULL;
        q->top_count++;
        progressed = 1;
        if (p->kind == KIND_WRITE) {
            /* Q3: the by-pointer values are read now, at TOP, not at the call. */
            q->stats = p->values_ptr ? *p->values_ptr : p->values;
            packet_free(p);
        } else if (!p->at_eos || eos_reached(q, p)) {
            p->snapshot = q->stats; /* Q2: TOP, or EOS with nothing of its class in flight */
            p->read_done = 1;
        } else {
            p->next_eos = q->eos_reads;
            q->eos_reads = p;
        }
    }
    if (q->head)
        pthread_cond_signal(&q->work);
    if (progressed)
        pthread_cond_broadcast(&q->changed);
}

static void enqueue(psdb_queue *q, packet *p)
{
    p->seq = q->next_seq++;
    p->next = NULL;
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    pump(q);
}

/* Counts one finished creation the way the device counts its own (K1). */
static void count_creation(psdb_queue *q, const psdb_creation_info *info, int compiled)
{
    psdb_creation_statistics *c = &q->stats.pipeline_states;
    c->num_created++;
    if (!q->asd) {
        c->num_cache_unknown++;
    } else {
        if (!info->psdb_hit) /* no selection, disabled lookups and partial hits are misses */
            c->num_psdb_cache_missed++;
        if (compiled)
            c->num_total_cache_missed++;
    }
}

static void run_creation(psdb_queue *q, packet *p)
{
    psdb_pipeline *pipe = NULL;
    psdb_creation_info info = {0};
    psdb_hr hr = PSDB_S_OK;
    const psdb_session_subobject *sub = p->has_sub ? &p->sub : NULL;
    uint64_t compiles_before = psdb__compile_count_on_thread();
    if (p->kind == KIND_CREATE_COMPUTE) {
        psdb_compute_pipeline_desc *d = p->desc;
        d->psdb = sub;
        hr = psdb_device_create_compute_pipeline(q->dev, d, &pipe);
    } else {
        psdb_graphics_pipeline_desc *d = p->desc;
        d->psdb = sub;
        hr = psdb_device_create_graphics_pipeline(q->dev, d, &pipe);
    }
    /* The device compiles on the calling thread: only this creation's compiles count here. */
    int compiled = psdb__compile_count_on_thread() != compiles_before;
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_pipeline_get_creation_info(pipe, &info);
    if (PSDB_FAILED(hr)) {
        psdb_pipeline_release(pipe);
        pipe = NULL;
    }
    /* The creation holds its session only while it runs (MODEL I2); the pipeline keeps its own. */
    if (p->has_sub)
        psdb_session_release(p->sub.session);
    p->has_sub = 0;
    free(p->desc);
    p->desc = NULL;

    pthread_mutex_lock(&q->lock);
    if (PSDB_SUCCEEDED(hr))
        count_creation(q, &info, compiled);
    pthread_mutex_unlock(&q->lock);

    tls_in_callback = q;
    p->done(hr, pipe, p->ctx); /* the pipeline is the callback's */
    tls_in_callback = NULL;
}

static void *worker_main(void *arg)
{
    psdb_queue *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->work, &q->lock);
        /* Stopping: release drained the FIFO first. pump() leaves only creations at the head. */
        if (!q->head)
            break;
        packet *p = q->head;
        q->head = p->next;
        if (!q->head)
            q->tail = NULL;
        q->top_count++;
        inflight_add(q, p); /* Q1: TOP */
        pump(q);
        pthread_cond_broadcast(&q->changed);
        pthread_mutex_unlock(&q->lock);

        run_creation(q, p);

        pthread_mutex_lock(&q->lock);
        inflight_remove(q, p); /* Q1: EOS, after the callback returned */
        settle_eos_reads(q);
        pthread_cond_broadcast(&q->changed);
        free(p);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

/* Waits until every packet submitted before `target` has reached TOP and every creation among
 * them has ended. Lock held. */
static void wait_until_idle(psdb_queue *q, uint64_t target)
{
    for (;;) {
        int busy = q->head && q->head->seq < target;
        for (int c = 0; c < 2 && !busy; c++)
            busy = q->inflight[c].first && q->inflight[c].first->seq < target;
        if (!busy)
            break;
        pthread_cond_wait(&q->changed, &q->lock);
    }
}

static void stop_workers(psdb_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->stopping = 1;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    for (uint32_t i = 0; i < q->num_threads; i++)
        pthread_join(q->threads[i], NULL);
    q->num_threads = 0;
}

static void queue_free(psdb_queue *q)
{
    stop_workers(q);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->changed);
    pthread_mutex_destroy(&q->lock);
    psdb__device_unref(q->dev);
    free(q->threads);
    free(q);
}

psdb_hr psdb_device_create_queue(psdb_device *dev, uint32_t num_workers, psdb_queue **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_queue *q = NULL;
    psdb_feature_data_shader_cache_abi_support abi;
    if (!dev || !out || num_workers == 0 || num_workers > MAX_WORKERS) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_create_queue: NULL device or out, "
                                                  "or a worker count of 0 or above the maximum");
        goto cleanup;
    }
    *out = NULL;
    q = calloc(1, sizeof(*q));
    if (!q) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    q->threads = calloc(num_workers, sizeof(*q->threads));
    if (!q->threads) {
        free(q);
        q = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    psdb__device_ref(dev);
    q->dev = dev;
    q->asd = PSDB_SUCCEEDED(psdb_device_check_feature_support(
        dev, PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT, &abi, sizeof(abi)));
    /* The counters start at zero; default_psdb_registered is a fact of the device, fixed at its
     * creation (B7), so the queue starts from the device's value. */
    psdb_statistics ds;
    if (PSDB_SUCCEEDED(psdb_device_get_statistics(dev, &ds)))
        q->stats.default_psdb_registered = ds.default_psdb_registered;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->changed, NULL);
    for (uint32_t i = 0; i < num_workers; i++) {
        if (pthread_create(&q->threads[i], NULL, worker_main, q) != 0) {
            hr = psdb__error_const(PSDB_E_OUTOFMEMORY,
                                   "psdb_device_create_queue: cannot start a worker thread");
            goto cleanup;
        }
        q->num_threads++;
    }
    *out = q;
    q = NULL;
cleanup:
    if (q)
        queue_free(q);
    return psdb__error_ret(hr, err_mark, __func__);
}

static psdb_hr submit(psdb_queue *q, uint32_t kind, const void *desc, done_fn done, void *ctx)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf enc = {0};
    packet *p = NULL;
    const psdb_session_subobject *sub = NULL;
    if (!q || !desc || !done) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "queue create pipeline: NULL queue, desc or done callback");
        goto cleanup;
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    p->kind = kind;
    p->done = done;
    p->ctx = ctx;
    /* The deep copy goes through the description encoding, so the copy follows every field the
     * encoder knows; the PSDB subobject is not encoded and is carried beside it. */
    if (kind == KIND_CREATE_COMPUTE) {
        const psdb_compute_pipeline_desc *d = desc;
        p->cls = CLASS_COMPUTE;
        sub = d->psdb;
        hr = psdb__desc_encode_compute(d, &enc);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__desc_decode_compute(enc.data, enc.len,
                                           (psdb_compute_pipeline_desc **)&p->desc);
    } else {
        const psdb_graphics_pipeline_desc *d = desc;
        p->cls = CLASS_GRAPHICS;
        sub = d->psdb;
        hr = psdb__desc_encode_graphics(d, &enc);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__desc_decode_graphics(enc.data, enc.len,
                                            (psdb_graphics_pipeline_desc **)&p->desc);
    }
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (sub) {
        p->has_sub = 1;
        p->sub = *sub;
        psdb_session_addref(p->sub.session); /* held until the creation ends (I2) */
    }
    pthread_mutex_lock(&q->lock);
    enqueue(q, p);
    pthread_mutex_unlock(&q->lock);
    p = NULL;
cleanup:
    psdb__buf_free(&enc);
    packet_free(p);
    return hr;
}

psdb_hr psdb_queue_create_compute_pipeline(psdb_queue *q, const psdb_compute_pipeline_desc *desc,
                                           void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx),
                                           void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(submit(q, KIND_CREATE_COMPUTE, desc, done, ctx), err_mark, __func__);
}

psdb_hr psdb_queue_create_graphics_pipeline(psdb_queue *q, const psdb_graphics_pipeline_desc *desc,
                                            void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx),
                                            void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    return psdb__error_ret(submit(q, KIND_CREATE_GRAPHICS, desc, done, ctx), err_mark, __func__);
}

psdb_hr psdb_queue_read_statistics(psdb_queue *q, uint32_t flags, psdb_statistics *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    packet r;
    if (!q || !out || (flags & ~READ_FLAGS) ||
        ((flags & PSDB_COUNTER_READ_AT_EOS) && (flags & PSDB_COUNTER_READ_AT_TOP)) ||
        tls_in_callback == q) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_queue_read_statistics: NULL queue or out, unknown or "
                               "conflicting flags, or called from the queue's own callback");
        goto cleanup;
    }
    memset(&r, 0, sizeof(r));
    r.kind = KIND_READ;
    r.cls = (flags & PSDB_COUNTER_COMPUTE) ? CLASS_COMPUTE : CLASS_GRAPHICS;
    r.at_eos = !(flags & PSDB_COUNTER_READ_AT_TOP); /* DEFAULT = READ_AT_EOS */
    pthread_mutex_lock(&q->lock);
    enqueue(q, &r);
    while (!r.read_done)
        pthread_cond_wait(&q->changed, &q->lock);
    pthread_mutex_unlock(&q->lock);
    *out = r.snapshot;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_queue_write_statistics(psdb_queue *q, uint32_t flags, const psdb_statistics *values)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    packet *p = NULL;
    if (!q || !values || (flags & ~WRITE_FLAGS) ||
        ((flags & PSDB_COUNTER_WRITE_COPY_DATA) &&
         (flags & PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER))) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_queue_write_statistics: NULL queue or values, or unknown or conflicting flags");
        goto cleanup;
    }
    p = calloc(1, sizeof(*p));
    if (!p) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    p->kind = KIND_WRITE;
    if (flags & PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER)
        p->values_ptr = values;
    else
        p->values = *values; /* DEFAULT = WRITE_COPY_DATA */
    pthread_mutex_lock(&q->lock);
    enqueue(q, p);
    pthread_mutex_unlock(&q->lock);
    p = NULL;
cleanup:
    free(p);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_queue_wait_idle(psdb_queue *q)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!q || tls_in_callback == q) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_queue_wait_idle: NULL queue, or called from the queue's own "
                               "callback (it would wait for itself)");
        goto cleanup;
    }
    pthread_mutex_lock(&q->lock);
    wait_until_idle(q, q->next_seq);
    pthread_mutex_unlock(&q->lock);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_queue_release(psdb_queue *q)
{
    if (!q)
        return;
    /* Drain: every packet submitted so far reaches TOP and every creation calls its callback. */
    pthread_mutex_lock(&q->lock);
    wait_until_idle(q, q->next_seq);
    pthread_mutex_unlock(&q->lock);
    queue_free(q);
}

void psdb__queue_wait_top_count(psdb_queue *q, uint64_t n)
{
    pthread_mutex_lock(&q->lock);
    while (q->top_count < n)
        pthread_cond_wait(&q->changed, &q->lock);
    pthread_mutex_unlock(&q->lock);
}

uint64_t psdb__queue_top_count(psdb_queue *q)
{
    uint64_t n = 0;
    pthread_mutex_lock(&q->lock);
    n = q->top_count;
    pthread_mutex_unlock(&q->lock);
    return n;
}
