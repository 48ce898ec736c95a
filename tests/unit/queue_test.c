/* queue_test.c - the async creation queue and its counters (MODEL Q): TOP order, parallel EOS,
 * EOS / TOP reads and their classes, writes at TOP by copy or by pointer, selection at TOP,
 * draining, errors, and a mixed stress run. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "runtime/queue.h"
#include "rt_fixture.h"

/* A creation that searches the gate PSDB `g` stops at its first lookup until the test opens the
 * gate: it is then provably in flight (after its TOP, before its EOS). */
typedef struct tq {
    char *dir, *path_g, *path_s;
    psdb_device *dev;
    psdb_session *g, *s; /* both hold compute and graphics descriptions 0..7 */
    psdb_session_subobject gated;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open;    /* the gate */
    int arrived; /* lookups that stopped at the closed gate (one per gated creation) */
    int order[256];
    int n; /* callbacks so far, their tags in order[] */
} tq;

typedef struct job {
    tq *t;
    int tag;
    int calls;
    psdb_hr hr;
    psdb_pipeline *p;
} job;

static void gate_lookup(const psdb_lookup_event *ev, void *ctx)
{
    tq *t = ctx;
    if (ev->session != t->g)
        return;
    pthread_mutex_lock(&t->lock);
    if (!t->open) {
        t->arrived++;
        pthread_cond_broadcast(&t->cond);
        while (!t->open)
            pthread_cond_wait(&t->cond, &t->lock);
    }
    pthread_mutex_unlock(&t->lock);
}

static void tq_init(tq *t)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    t->dir = tu_mkdtemp();
    t->path_g = tu_path(t->dir, "g.psdb");
    t->path_s = tu_path(t->dir, "s.psdb");
    rt_make_full_psdb(t->path_g, 8);
    rt_make_full_psdb(t->path_s, 8);
    t->dev = rt_device(t->dir, RT_EXE);
    t->g = rt_open(t->dev, t->path_g);
    t->s = rt_open(t->dev, t->path_s);
    t->gated.session = t->g;
    ck_assert_hr(psdb_device_set_lookup_callback(t->dev, gate_lookup, t), PSDB_S_OK);
}

static void tq_free(tq *t)
{
    psdb_session_release(t->g);
    psdb_session_release(t->s);
    psdb_device_release(t->dev);
    tu_rmtree(t->dir);
    free(t->dir);
    free(t->path_g);
    free(t->path_s);
    pthread_cond_destroy(&t->cond);
    pthread_mutex_destroy(&t->lock);
}

static void open_gate(tq *t)
{
    pthread_mutex_lock(&t->lock);
    t->open = 1;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static struct timespec deadline(int seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    return ts;
}

/* Waits (10 s at most: a failure, never a synchronisation) until *v >= n; returns whether it
 * got there. */
static int wait_ge(tq *t, const int *v, int n)
{
    struct timespec ts = deadline(10);
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    while (*v < n && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&t->cond, &t->lock, &ts);
    int ok = *v >= n;
    pthread_mutex_unlock(&t->lock);
    return ok;
}

static int locked_get(tq *t, const int *v)
{
    pthread_mutex_lock(&t->lock);
    int x = *v;
    pthread_mutex_unlock(&t->lock);
    return x;
}

static void on_done(psdb_hr hr, psdb_pipeline *p, void *ctx)
{
    job *j = ctx;
    tq *t = j->t;
    pthread_mutex_lock(&t->lock);
    j->calls++;
    j->hr = hr;
    j->p = p;
    if (t->n < (int)(sizeof(t->order) / sizeof(t->order[0])))
        t->order[t->n] = j->tag;
    t->n++;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

static void submit_compute(psdb_queue *q, job *j, int n, const psdb_session_subobject *sub)
{
    rt_compute c;
    rt_compute_init(&c, n, sub);
    ck_assert_hr(psdb_queue_create_compute_pipeline(q, &c.desc, on_done, j), PSDB_S_OK);
}

static void submit_graphics(psdb_queue *q, job *j, int n, const psdb_session_subobject *sub)
{
    rt_graphics g;
    rt_graphics_init(&g, n, sub);
    ck_assert_hr(psdb_queue_create_graphics_pipeline(q, &g.desc, on_done, j), PSDB_S_OK);
}

static psdb_creation_info info_of(const job *j)
{
    psdb_creation_info info;
    ck_assert_ptr_nonnull(j->p);
    ck_assert_hr(psdb_pipeline_get_creation_info(j->p, &info), PSDB_S_OK);
    return info;
}

static uint32_t created(psdb_queue *q, uint32_t flags)
{
    psdb_statistics st;
    ck_assert_hr(psdb_queue_read_statistics(q, flags, &st), PSDB_S_OK);
    return st.pipeline_states.num_created;
}

/* A read on its own thread, so that a read that waits when it must not fails the test instead of
 * hanging it. */
typedef struct reader {
    tq *t;
    psdb_queue *q;
    uint32_t flags;
    psdb_statistics out;
    psdb_hr hr;
    int done;
    pthread_t th;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    psdb_statistics st;
    psdb_hr hr = psdb_queue_read_statistics(r->q, r->flags, &st);
    pthread_mutex_lock(&r->t->lock);
    r->out = st;
    r->hr = hr;
    r->done = 1;
    pthread_cond_broadcast(&r->t->cond);
    pthread_mutex_unlock(&r->t->lock);
    return NULL;
}

static void reader_start(reader *r, tq *t, psdb_queue *q, uint32_t flags)
{
    memset(r, 0, sizeof(*r));
    r->t = t;
    r->q = q;
    r->flags = flags;
    ck_assert_int_eq(pthread_create(&r->th, NULL, reader_main, r), 0);
}

/* Joins the reader; its snapshot's created count. */
static uint32_t reader_join(reader *r)
{
    pthread_join(r->th, NULL);
    ck_assert_hr(r->hr, PSDB_S_OK);
    return r->out.pipeline_states.num_created;
}

static psdb_statistics stats_created(uint32_t n)
{
    psdb_statistics st = {0};
    st.pipeline_states.num_created = n;
    return st;
}

/* ---- Q1 -------------------------------------------------------------------------------------- */

START_TEST(test_queue__Q1_creations_end_in_parallel)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1)); /* a is in flight */
    submit_graphics(q, &b, 1, NULL);
    /* b starts on the other worker and ends while a is still in flight: EOS is per creation, not
     * in queue order. */
    ck_assert_msg(wait_ge(&t, &b.calls, 1), "b did not end while a was in flight");
    ck_assert_int_eq(locked_get(&t, &a.calls), 0);
    open_gate(&t);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(b.calls, 1);
    ck_assert_int_eq(t.order[0], 2);
    ck_assert_int_eq(t.order[1], 1);
    ck_assert_hr(a.hr, PSDB_S_OK);
    ck_assert_hr(b.hr, PSDB_S_OK);
    psdb_creation_info ia = info_of(&a), ib = info_of(&b);
    ck_assert_uint_eq(ia.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert(ia.psdb_hit);
    ck_assert_uint_eq(ib.selection, PSDB_SELECTION_NONE);
    ck_assert_uint_lt(ia.operation_id, ib.operation_id); /* a started first */
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* One worker, a in flight, b waiting for the worker: a write submitted after b must wait for b's
 * TOP (so for a's end), not run at once (it would be counted under a and b: 102) nor wait for b's
 * end (100). */
START_TEST(test_queue__Q1_packets_wait_for_earlier_creations_to_start)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    submit_compute(q, &b, 1, NULL);
    psdb_statistics w = stats_created(100);
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_DEFAULT, &w), PSDB_S_OK);
    ck_assert_uint_eq(psdb__queue_top_count(q), 1); /* b and the write wait for the worker */
    open_gate(&t);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_uint_eq(psdb__queue_top_count(q), 3);
    ck_assert_uint_eq(created(q, PSDB_COUNTER_COMPUTE), 101);
    ck_assert_int_eq(t.order[0], 1); /* one worker: in order */
    ck_assert_int_eq(t.order[1], 2);
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__Q1_counts_like_the_device)
{
    tq t;
    psdb_queue *q = NULL;
    job j[6];
    tq_init(&t);
    open_gate(&t);
    for (int i = 0; i < 6; i++)
        j[i] = (job){.t = &t, .tag = i};
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    psdb_statistics before;
    ck_assert_hr(psdb_device_get_statistics(t.dev, &before), PSDB_S_OK);
    psdb_session_subobject in_s = {t.s, PSDB_SESSION_FLAG_NONE};
    submit_compute(q, &j[0], 2, &in_s);  /* full hit */
    submit_graphics(q, &j[1], 2, &in_s); /* full hit */
    submit_compute(q, &j[2], 20, &in_s); /* not in the PSDB: psdb miss, compiled */
    submit_graphics(q, &j[3], 21, NULL); /* no selection: psdb miss, compiled */
    psdb_statistics st, dev;
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_hr(psdb_queue_read_statistics(q, PSDB_COUNTER_DEFAULT, &st), PSDB_S_OK);
    ck_assert_hr(psdb_device_get_statistics(t.dev, &dev), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 4);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 2);
    ck_assert_uint_eq(st.pipeline_states.num_total_cache_missed, 2);
    ck_assert_uint_eq(st.pipeline_states.num_cache_unknown, 0);
    ck_assert_uint_eq(st.state_objects.num_created, 0);
    ck_assert_uint_eq(dev.pipeline_states.num_created - before.pipeline_states.num_created, 4);
    ck_assert_uint_eq(dev.pipeline_states.num_psdb_cache_missed -
                          before.pipeline_states.num_psdb_cache_missed,
                      2);
    ck_assert_int_eq(st.default_psdb_registered, dev.default_psdb_registered);
    /* Again without PSDB: served by the local driver cache, a PSDB miss but no compile. A
     * partial hit (the last unit missing) is a PSDB miss and compiles that unit. */
    char *path_p = tu_path(t.dir, "partial.psdb");
    int ids[1] = {0};
    rt_contents partial = {.compute = ids, .num_compute = 1, .partial = 1};
    rt_make_psdb(path_p, &partial);
    psdb_session *ps = rt_open(t.dev, path_p);
    psdb_session_subobject in_p = {ps, PSDB_SESSION_FLAG_NONE};
    submit_graphics(q, &j[4], 21, NULL);
    submit_compute(q, &j[5], 0, &in_p);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_hr(psdb_queue_read_statistics(q, PSDB_COUNTER_READ_AT_TOP, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 6);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 4);
    ck_assert_uint_eq(st.pipeline_states.num_total_cache_missed, 3);
    psdb_creation_info i5 = info_of(&j[5]);
    ck_assert_uint_gt(i5.hits, 0);
    ck_assert(!i5.psdb_hit);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(j[i].calls, 1);
        ck_assert_hr(j[i].hr, PSDB_S_OK);
        psdb_pipeline_release(j[i].p);
    }
    psdb_session_release(ps);
    free(path_p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* ---- Q2 -------------------------------------------------------------------------------------- */

START_TEST(test_queue__Q2_eos_read_waits_top_read_does_not)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1};
    reader top, eos;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    /* TOP: returns while a is in flight, without a. */
    reader_start(&top, &t, q, PSDB_COUNTER_READ_AT_TOP | PSDB_COUNTER_COMPUTE);
    ck_assert_msg(wait_ge(&t, &top.done, 1), "a TOP read waited for a creation in flight");
    ck_assert_uint_eq(reader_join(&top), 0);
    /* EOS: taken at its TOP while a is in flight, it must still hold a when it returns. */
    reader_start(&eos, &t, q, PSDB_COUNTER_READ_AT_EOS | PSDB_COUNTER_COMPUTE);
    psdb__queue_wait_top_count(q, 3);
    ck_assert_int_eq(locked_get(&t, &eos.done), 0);
    open_gate(&t);
    ck_assert_uint_eq(reader_join(&eos), 1);
    ck_assert_int_eq(a.calls, 1); /* the read returned after a's callback */
    psdb_pipeline_release(a.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__Q2_default_is_read_at_eos)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1};
    reader r;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_graphics(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    reader_start(&r, &t, q, PSDB_COUNTER_DEFAULT);
    psdb__queue_wait_top_count(q, 2);
    open_gate(&t);
    ck_assert_uint_eq(reader_join(&r), 1);
    psdb_pipeline_release(a.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__Q2_classes_kept_apart)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    reader cr, gr;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_graphics(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    submit_compute(q, &b, 1, NULL);
    /* A compute EOS read waits for b, never for the graphics creation a. */
    reader_start(&cr, &t, q, PSDB_COUNTER_READ_AT_EOS | PSDB_COUNTER_COMPUTE);
    ck_assert_msg(wait_ge(&t, &cr.done, 1), "a compute EOS read waited for a graphics creation");
    ck_assert_uint_eq(reader_join(&cr), 1); /* b only */
    ck_assert_int_eq(locked_get(&t, &a.calls), 0);
    /* A graphics EOS read waits for a. */
    reader_start(&gr, &t, q, PSDB_COUNTER_READ_AT_EOS);
    psdb__queue_wait_top_count(q, 4);
    ck_assert_int_eq(locked_get(&t, &gr.done), 0);
    open_gate(&t);
    ck_assert_uint_eq(reader_join(&gr), 2);
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* An EOS read does not hold back the packets after it: a later creation starts and ends while
 * the read waits for an earlier one. */
START_TEST(test_queue__Q2_eos_read_does_not_block_later_packets)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    reader r;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    reader_start(&r, &t, q, PSDB_COUNTER_COMPUTE);
    psdb__queue_wait_top_count(q, 2);
    submit_compute(q, &b, 1, NULL);
    ck_assert_msg(wait_ge(&t, &b.calls, 1), "a creation waited behind an EOS read");
    ck_assert_int_eq(locked_get(&t, &r.done), 0);
    open_gate(&t);
    ck_assert_uint_eq(reader_join(&r), 2); /* a, and b which had ended by then */
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__Q2_invalid_read_flags)
{
    tq t;
    psdb_queue *q = NULL;
    psdb_statistics st;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    ck_assert_hr(
        psdb_queue_read_statistics(q, PSDB_COUNTER_READ_AT_EOS | PSDB_COUNTER_READ_AT_TOP, &st),
        PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_read_statistics(q, PSDB_COUNTER_WRITE_COPY_DATA, &st),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_read_statistics(
                     q, PSDB_COUNTER_READ_AT_TOP | PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER, &st),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_read_statistics(q, 0x20u, &st), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_read_statistics(q, 0, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_read_statistics(NULL, 0, &st), PSDB_E_INVALIDARG);
    ck_assert_hr(
        psdb_queue_read_statistics(q, PSDB_COUNTER_READ_AT_TOP | PSDB_COUNTER_COMPUTE, &st),
        PSDB_S_OK);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* ---- Q3 -------------------------------------------------------------------------------------- */

/* Two workers: the write's TOP comes while a is in flight, so a counts on top of the written
 * value (101); a write at EOS would wait for a and give 100. */
START_TEST(test_queue__Q3_write_happens_at_top)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1};
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    psdb_statistics w = stats_created(100);
    w.pipeline_states.num_psdb_cache_missed = 7;
    w.state_objects.num_created = 3;
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_WRITE_COPY_DATA, &w), PSDB_S_OK);
    ck_assert_uint_eq(created(q, PSDB_COUNTER_READ_AT_TOP), 100); /* written, a still in flight */
    open_gate(&t);
    psdb_statistics st;
    ck_assert_hr(psdb_queue_read_statistics(q, PSDB_COUNTER_COMPUTE, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 101);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 7); /* a was a full hit */
    ck_assert_uint_eq(st.state_objects.num_created, 3);
    psdb_pipeline_release(a.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* One worker, a in flight and b waiting for the worker: a write after b reaches its TOP only when
 * b starts, after the caller changed its memory. By pointer it sees the change (70 + b), by copy
 * the value at the call (50 + b). */
static uint32_t write_then_change(uint32_t flags)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    submit_graphics(q, &b, 1, NULL);
    psdb_statistics *v = malloc(sizeof(*v));
    ck_assert_ptr_nonnull(v);
    *v = stats_created(50);
    ck_assert_hr(psdb_queue_write_statistics(q, flags, v), PSDB_S_OK);
    ck_assert_uint_eq(psdb__queue_top_count(q), 1); /* the write has not executed yet */
    v->pipeline_states.num_created = 70;
    open_gate(&t);
    uint32_t n = created(q, PSDB_COUNTER_DEFAULT); /* graphics EOS: after b */
    free(v);                                       /* the read returned: the write has executed */
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
    return n;
}

START_TEST(test_queue__Q3_copy_reads_at_call_pointer_reads_at_execution)
{
    ck_assert_uint_eq(write_then_change(PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER), 71);
    ck_assert_uint_eq(write_then_change(PSDB_COUNTER_WRITE_COPY_DATA), 51);
    ck_assert_uint_eq(write_then_change(PSDB_COUNTER_DEFAULT), 51);
}
END_TEST

START_TEST(test_queue__Q3_invalid_write_flags)
{
    tq t;
    psdb_queue *q = NULL;
    psdb_statistics w = stats_created(5);
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    ck_assert_hr(psdb_queue_write_statistics(
                     q, PSDB_COUNTER_WRITE_COPY_DATA | PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER, &w),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_READ_AT_EOS, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_READ_AT_TOP, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_write_statistics(q, 0x100u, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_write_statistics(q, 0, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_write_statistics(NULL, 0, &w), PSDB_E_INVALIDARG);
    ck_assert_uint_eq(created(q, 0), 0); /* nothing was written */
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_COMPUTE, &w), PSDB_S_OK);
    ck_assert_uint_eq(created(q, 0), 5);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* ---- Selection, copies, errors, lifetime ----------------------------------------------------- */

/* One worker: b is submitted with no subobject while a holds the worker; the device default set
 * after b's submission but before its TOP is what b selects (MODEL F2, H4 at TOP). */
START_TEST(test_queue__F_selection_happens_at_top)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    submit_compute(q, &b, 1, NULL);
    ck_assert_hr(psdb_device_set_default_session(t.dev, t.s, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    open_gate(&t);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    psdb_creation_info ib = info_of(&b);
    ck_assert_uint_eq(ib.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(ib.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert(ib.psdb_hit);
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* The description and the session are the queue's after the call: the caller frees its buffers
 * and releases its session reference at once, while the creation waits for a worker. */
START_TEST(test_queue__description_and_session_copied_at_submission)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1}, b = {.t = &t, .tag = 2};
    int gone = 0;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    submit_compute(q, &a, 0, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 1));
    psdb_session *s = rt_open(t.dev, t.path_s);
    ck_assert_hr(psdb_session_on_destroy(s, rt_destroyed, &gone), PSDB_S_OK);
    psdb_session_subobject *sub = malloc(sizeof(*sub));
    rt_graphics *g = malloc(sizeof(*g));
    ck_assert_ptr_nonnull(sub);
    ck_assert_ptr_nonnull(g);
    *sub = (psdb_session_subobject){s, PSDB_SESSION_FLAG_CREATE_ONLY};
    rt_graphics_init(g, 3, sub);
    ck_assert_hr(psdb_queue_create_graphics_pipeline(q, &g->desc, on_done, &b), PSDB_S_OK);
    memset(g, 0xA5, sizeof(*g));
    memset(sub, 0x5A, sizeof(*sub));
    free(g);
    free(sub);
    psdb_session_release(s);
    ck_assert_int_eq(gone, 0); /* the queued creation holds it */
    open_gate(&t);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_hr(b.hr, PSDB_S_OK);
    psdb_creation_info ib = info_of(&b);
    ck_assert_uint_eq(ib.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert_uint_eq(ib.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert(ib.psdb_hit);    /* same keys: the bytes were copied */
    ck_assert_int_eq(gone, 1); /* CREATE_ONLY: nothing holds it after the creation */
    psdb_pipeline_release(a.p);
    psdb_pipeline_release(b.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__errors_do_not_stop_other_creations)
{
    tq t;
    psdb_queue *q = NULL;
    job j[6];
    tq_init(&t);
    open_gate(&t);
    for (int i = 0; i < 6; i++)
        j[i] = (job){.t = &t, .tag = i};
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    psdb_session_subobject f4 = {NULL, PSDB_SESSION_FLAG_CREATE_ONLY};
    psdb_session_subobject bad_flags = {t.s, 0x40u};
    submit_compute(q, &j[0], 0, NULL);
    submit_compute(q, &j[1], 1, &f4);
    submit_graphics(q, &j[2], 2, NULL);
    submit_graphics(q, &j[3], 3, &bad_flags);
    rt_graphics g;
    rt_graphics_init(&g, 4, NULL);
    g.desc.vs.code = NULL; /* no vertex shader: the device refuses it */
    g.desc.vs.size = 0;
    ck_assert_hr(psdb_queue_create_graphics_pipeline(q, &g.desc, on_done, &j[4]), PSDB_S_OK);
    submit_compute(q, &j[5], 5, NULL);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(j[i].calls, 1);
        if (i == 1 || i == 3 || i == 4) {
            ck_assert_hr(j[i].hr, PSDB_E_INVALIDARG);
            ck_assert_ptr_null(j[i].p);
        } else {
            ck_assert_hr(j[i].hr, PSDB_S_OK);
            psdb_pipeline_release(j[i].p);
        }
    }
    ck_assert_uint_eq(created(q, 0), 3);
    ck_assert_uint_eq(created(q, PSDB_COUNTER_COMPUTE), 3);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

START_TEST(test_queue__invalid_arguments)
{
    tq t;
    psdb_queue *q = NULL;
    job a = {.t = &t, .tag = 1};
    rt_compute c;
    tq_init(&t);
    ck_assert_hr(psdb_device_create_queue(t.dev, 0, &q), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_queue(t.dev, 65, &q), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_queue(NULL, 1, &q), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_queue_create_compute_pipeline(NULL, &c.desc, on_done, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_create_compute_pipeline(q, NULL, on_done, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_create_compute_pipeline(q, &c.desc, NULL, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_create_graphics_pipeline(q, NULL, on_done, &a), PSDB_E_INVALIDARG);
    c.desc.cs.code = NULL; /* a size without bytes cannot be copied */
    ck_assert_hr(psdb_queue_create_compute_pipeline(q, &c.desc, on_done, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_wait_idle(NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_queue_wait_idle(q), PSDB_S_OK);
    ck_assert_int_eq(a.calls, 0);
    psdb_queue_release(q);
    psdb_queue_release(NULL);
    tq_free(&t);
}
END_TEST

/* A callback must not wait for its own queue; it may submit to it. */
typedef struct nested {
    tq *t;
    psdb_queue *q;
    psdb_hr read_hr, idle_hr;
    job child;
} nested;

static void on_done_nested(psdb_hr hr, psdb_pipeline *p, void *ctx)
{
    nested *n = ctx;
    psdb_statistics st;
    (void)hr;
    psdb_pipeline_release(p);
    n->read_hr = psdb_queue_read_statistics(n->q, PSDB_COUNTER_READ_AT_TOP, &st);
    n->idle_hr = psdb_queue_wait_idle(n->q);
    submit_compute(n->q, &n->child, 6, NULL);
}

START_TEST(test_queue__callbacks_may_submit_but_not_wait)
{
    tq t;
    nested n;
    tq_init(&t);
    open_gate(&t);
    memset(&n, 0, sizeof(n));
    n.t = &t;
    n.child = (job){.t = &t, .tag = 9};
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &n.q), PSDB_S_OK);
    rt_compute c;
    rt_compute_init(&c, 5, NULL);
    ck_assert_hr(psdb_queue_create_compute_pipeline(n.q, &c.desc, on_done_nested, &n), PSDB_S_OK);
    psdb_queue_release(n.q); /* drains the child too */
    ck_assert_hr(n.read_hr, PSDB_E_INVALIDARG);
    ck_assert_hr(n.idle_hr, PSDB_E_INVALIDARG);
    ck_assert_int_eq(n.child.calls, 1);
    ck_assert_hr(n.child.hr, PSDB_S_OK);
    psdb_pipeline_release(n.child.p);
    tq_free(&t);
}
END_TEST

typedef struct releaser {
    psdb_queue *q;
    pthread_t th;
} releaser;

static void *release_main(void *arg)
{
    releaser *r = arg;
    psdb_queue_release(r->q);
    return NULL;
}

/* Releasing a queue with creations in flight and queued drains it: every callback is called once
 * before release returns. The device may be released before its queue. */
START_TEST(test_queue__release_drains)
{
    tq t;
    psdb_queue *q = NULL;
    job j[8];
    releaser r;
    tq_init(&t);
    for (int i = 0; i < 8; i++)
        j[i] = (job){.t = &t, .tag = i};
    ck_assert_hr(psdb_device_create_queue(t.dev, 2, &q), PSDB_S_OK);
    submit_compute(q, &j[0], 0, &t.gated);
    submit_graphics(q, &j[1], 1, &t.gated);
    ck_assert(wait_ge(&t, &t.arrived, 2));
    for (int i = 2; i < 8; i++)
        submit_compute(q, &j[i], i, NULL);
    psdb_statistics w = stats_created(1);
    ck_assert_hr(psdb_queue_write_statistics(q, PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER, &w),
                 PSDB_S_OK);
    r.q = q;
    ck_assert_int_eq(pthread_create(&r.th, NULL, release_main, &r), 0);
    ck_assert_int_eq(locked_get(&t, &t.n), 0);
    open_gate(&t);
    pthread_join(r.th, NULL);
    ck_assert_int_eq(t.n, 8);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(j[i].calls, 1);
        ck_assert_hr(j[i].hr, PSDB_S_OK);
        psdb_pipeline_release(j[i].p);
    }
    /* The queue keeps its device: release the device first, then use and release the queue. */
    job k = {.t = &t, .tag = 42};
    ck_assert_hr(psdb_device_create_queue(t.dev, 1, &q), PSDB_S_OK);
    psdb_session_release(t.g);
    psdb_session_release(t.s);
    t.g = t.s = NULL;
    psdb_device_release(t.dev);
    t.dev = NULL;
    submit_compute(q, &k, 7, NULL);
    ck_assert_uint_eq(created(q, PSDB_COUNTER_COMPUTE), 1);
    ck_assert_hr(k.hr, PSDB_S_OK);
    psdb_pipeline_release(k.p);
    psdb_queue_release(q);
    tq_free(&t);
}
END_TEST

/* ---- Stress ---------------------------------------------------------------------------------- */

#define STRESS_THREADS 4
#define STRESS_PER_THREAD 150

typedef struct stress_ctx {
    tq *t;
    psdb_queue *q;
    atomic_int callbacks, ok;
    atomic_int stop_setter;
} stress_ctx;

typedef struct stress_thread {
    stress_ctx *c;
    int id;
    pthread_t th;
} stress_thread;

static void stress_done(psdb_hr hr, psdb_pipeline *p, void *ctx)
{
    stress_ctx *c = ctx;
    if (PSDB_SUCCEEDED(hr)) {
        psdb_creation_info info;
        ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
        atomic_fetch_add(&c->ok, 1);
    }
    psdb_pipeline_release(p);
    atomic_fetch_add(&c->callbacks, 1);
}

static void *stress_main(void *arg)
{
    stress_thread *st = arg;
    stress_ctx *c = st->c;
    uint32_t x = 0x9E3779B9u * (uint32_t)(st->id + 1);
    psdb_session_subobject in_s = {c->t->s, PSDB_SESSION_FLAG_NONE};
    psdb_session_subobject create_only = {c->t->s, PSDB_SESSION_FLAG_CREATE_ONLY};
    psdb_session_subobject f4 = {NULL, PSDB_SESSION_FLAG_CREATE_ONLY};
    const psdb_session_subobject *subs[4] = {NULL, &in_s, &create_only, &f4};
    for (int i = 0; i < STRESS_PER_THREAD; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t r = x >> 8;
        const psdb_session_subobject *sub = subs[r % 4];
        int n = (int)((r >> 4) % 12); /* 0..7 in the PSDB, 8..11 not */
        psdb_statistics s;
        psdb_hr hr = PSDB_S_OK;
        switch ((r >> 8) % 8) {
        case 0:
            hr = psdb_queue_read_statistics(c->q, (r >> 12) & 1 ? PSDB_COUNTER_COMPUTE : 0, &s);
            break;
        case 1:
            hr = psdb_queue_read_statistics(c->q, PSDB_COUNTER_READ_AT_TOP, &s);
            break;
        case 2:
            s = stats_created(r & 0xFF);
            hr = psdb_queue_write_statistics(c->q, (r >> 12) & 1 ? PSDB_COUNTER_COMPUTE : 0, &s);
            break;
        case 3:
        case 4: {
            rt_graphics g;
            rt_graphics_init(&g, n, sub);
            hr = psdb_queue_create_graphics_pipeline(c->q, &g.desc, stress_done, c);
            break;
        }
        default: {
            rt_compute cd;
            rt_compute_init(&cd, n, sub);
            hr = psdb_queue_create_compute_pipeline(c->q, &cd.desc, stress_done, c);
            break;
        }
        }
        ck_assert_hr(hr, PSDB_S_OK);
    }
    return NULL;
}

static void *setter_main(void *arg)
{
    stress_ctx *c = arg;
    for (int i = 0; !atomic_load(&c->stop_setter); i++) {
        psdb_session *s = (i % 3 == 0) ? NULL : (i % 3 == 1 ? c->t->s : c->t->g);
        ck_assert_hr(psdb_device_set_default_session(c->t->dev, s, PSDB_SESSION_FLAG_NONE),
                     PSDB_S_OK);
        sched_yield();
    }
    return NULL;
}

START_TEST(test_queue__stress_mixed)
{
    tq t;
    stress_ctx c;
    stress_thread th[STRESS_THREADS];
    pthread_t setter;
    tq_init(&t);
    open_gate(&t);
    memset(&c, 0, sizeof(c));
    c.t = &t;
    ck_assert_hr(psdb_device_create_queue(t.dev, 3, &c.q), PSDB_S_OK);
    ck_assert_int_eq(pthread_create(&setter, NULL, setter_main, &c), 0);
    for (int i = 0; i < STRESS_THREADS; i++) {
        th[i].c = &c;
        th[i].id = i;
        ck_assert_int_eq(pthread_create(&th[i].th, NULL, stress_main, &th[i]), 0);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i].th, NULL);
    atomic_store(&c.stop_setter, 1);
    pthread_join(setter, NULL);
    ck_assert_hr(psdb_queue_wait_idle(c.q), PSDB_S_OK);
    int submitted_callbacks = atomic_load(&c.callbacks);
    ck_assert_int_gt(submitted_callbacks, 0);
    /* After a reset the counters hold exactly what ends later. */
    psdb_session_subobject in_s_main = {t.s, PSDB_SESSION_FLAG_NONE};
    psdb_statistics zero = {0}, qs, d0, d1;
    ck_assert_hr(psdb_queue_write_statistics(c.q, 0, &zero), PSDB_S_OK);
    ck_assert_hr(psdb_device_get_statistics(t.dev, &d0), PSDB_S_OK);
    int ok_before = atomic_load(&c.ok);
    for (int i = 0; i < 32; i++) {
        rt_compute cd;
        rt_compute_init(&cd, 100 + i % 16, i % 3 ? NULL : &in_s_main);
        ck_assert_hr(psdb_queue_create_compute_pipeline(c.q, &cd.desc, stress_done, &c), PSDB_S_OK);
    }
    ck_assert_hr(psdb_queue_read_statistics(c.q, PSDB_COUNTER_COMPUTE, &qs), PSDB_S_OK);
    ck_assert_hr(psdb_device_get_statistics(t.dev, &d1), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&c.ok) - ok_before, 32);
    /* The queue counted exactly what the device counted for the same creations, although they
     * compiled on several workers at once. */
    ck_assert_uint_eq(qs.pipeline_states.num_created, 32);
    ck_assert_uint_eq(qs.pipeline_states.num_psdb_cache_missed,
                      d1.pipeline_states.num_psdb_cache_missed -
                          d0.pipeline_states.num_psdb_cache_missed);
    ck_assert_uint_eq(qs.pipeline_states.num_total_cache_missed,
                      d1.pipeline_states.num_total_cache_missed -
                          d0.pipeline_states.num_total_cache_missed);
    ck_assert_uint_ge(qs.pipeline_states.num_total_cache_missed, 16);
    psdb_queue_release(c.q);
    tq_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("queue");
    TCase *tc = tcase_create("queue");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_queue__Q1_creations_end_in_parallel);
    tcase_add_test(tc, test_queue__Q1_packets_wait_for_earlier_creations_to_start);
    tcase_add_test(tc, test_queue__Q1_counts_like_the_device);
    tcase_add_test(tc, test_queue__Q2_eos_read_waits_top_read_does_not);
    tcase_add_test(tc, test_queue__Q2_default_is_read_at_eos);
    tcase_add_test(tc, test_queue__Q2_classes_kept_apart);
    tcase_add_test(tc, test_queue__Q2_eos_read_does_not_block_later_packets);
    tcase_add_test(tc, test_queue__Q2_invalid_read_flags);
    tcase_add_test(tc, test_queue__Q3_write_happens_at_top);
    tcase_add_test(tc, test_queue__Q3_copy_reads_at_call_pointer_reads_at_execution);
    tcase_add_test(tc, test_queue__Q3_invalid_write_flags);
    tcase_add_test(tc, test_queue__F_selection_happens_at_top);
    tcase_add_test(tc, test_queue__description_and_session_copied_at_submission);
    tcase_add_test(tc, test_queue__errors_do_not_stop_other_creations);
    tcase_add_test(tc, test_queue__invalid_arguments);
    tcase_add_test(tc, test_queue__callbacks_may_submit_but_not_wait);
    tcase_add_test(tc, test_queue__release_drains);
    tcase_add_test(tc, test_queue__stress_mixed);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
