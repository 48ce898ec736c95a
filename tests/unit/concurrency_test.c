/* concurrency_test.c - the device-wide default under concurrent creations and setters (MODEL
 * H1-H5): stress tests that check, from the lookup callback, that no creation ever mixed two
 * selections. */
#include "rt_fixture.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

typedef struct stress {
    char *dir, *reg, *path_a, *path_b, *path_i;
    psdb_device *dev;
    psdb_session *a, *b, *imp;
    atomic_int stop;
    atomic_int violations; /* an operation whose lookups went to two sessions */
    atomic_int bad_pairs;  /* a (session, flags) pair no setter ever set */
    atomic_int bad_counts; /* an operation with other than the full set of lookups */
    atomic_int creations;
    atomic_int seen_pairs[5]; /* (A,NONE) (A,CO) (B,CO) implicit none */
    atomic_int sets;
} stress;

/* Per thread: the operation being created and the session its first lookup searched. */
static _Thread_local uint64_t tl_op;
static _Thread_local psdb_session *tl_session;
static _Thread_local int tl_events;

static void stress_cb(const psdb_lookup_event *e, void *ctx)
{
    stress *s = ctx;
    if (e->operation_id != tl_op) {
        tl_op = e->operation_id;
        tl_session = e->session;
        tl_events = 0;
    } else if (e->session != tl_session) {
        atomic_fetch_add(&s->violations, 1);
    }
    tl_events++;
}

static void stress_init(stress *s)
{
    memset(s, 0, sizeof(*s));
    s->dir = tu_mkdtemp();
    s->reg = tu_path(s->dir, "registry");
    s->path_a = tu_path(s->dir, "a.psdb");
    s->path_b = tu_path(s->dir, "b.psdb");
    s->path_i = tu_path(s->dir, "i.psdb");
    rt_make_full_psdb(s->path_a, 4);
    rt_make_full_psdb(s->path_b, 4);
    rt_make_full_psdb(s->path_i, 4);
    rt_register_default(s->reg, s->path_i);
    s->dev = rt_device(s->reg, RT_EXE);
    s->a = rt_open(s->dev, s->path_a);
    s->b = rt_open(s->dev, s->path_b);
    ck_assert_hr(psdb_device_set_lookup_callback(s->dev, stress_cb, s), PSDB_S_OK);
    /* Learn the implicit default's session from one creation. */
    rt_compute c;
    psdb_pipeline *p = NULL;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(s->dev, &c.desc, &p), PSDB_S_OK);
    s->imp = tl_session;
    ck_assert_ptr_nonnull(s->imp);
    psdb_pipeline_release(p);
}

static void stress_free(stress *s)
{
    psdb_session_release(s->a);
    psdb_session_release(s->b);
    psdb_device_release(s->dev);
    tu_rmtree(s->dir);
    free(s->dir);
    free(s->reg);
    free(s->path_a);
    free(s->path_b);
    free(s->path_i);
}

/* Checks one finished creation against the pairs setters may have set. */
static void check_creation(stress *s, psdb_pipeline *p, uint32_t expected_lookups)
{
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    if (info.lookups != expected_lookups || tl_op != info.operation_id ||
        (uint32_t)tl_events != info.lookups || !info.psdb_hit)
        atomic_fetch_add(&s->bad_counts, 1);
    int pair = -1;
    if (info.selection == PSDB_SELECTION_DEVICE_DEFAULT) {
        if (tl_session == s->a && info.flags == PSDB_SESSION_FLAG_NONE)
            pair = 0;
        else if (tl_session == s->a && info.flags == PSDB_SESSION_FLAG_CREATE_ONLY)
            pair = 1;
        else if (tl_session == s->b && info.flags == PSDB_SESSION_FLAG_CREATE_ONLY)
            pair = 2;
        /* (B, NONE) is never set: seeing it means session and flags were read apart. */
    } else if (info.selection == PSDB_SELECTION_IMPLICIT_DEFAULT) {
        if (tl_session == s->imp && info.flags == PSDB_SESSION_FLAG_NONE)
            pair = 3;
    }
    if (pair < 0)
        atomic_fetch_add(&s->bad_pairs, 1);
    else
        atomic_fetch_add(&s->seen_pairs[pair], 1);
    atomic_fetch_add(&s->creations, 1);
}

static void *creator(void *arg)
{
    stress *s = arg;
    int i = 0;
    while (!atomic_load(&s->stop)) {
        psdb_pipeline *p = NULL;
        if (i % 3 == 2) {
            rt_graphics g;
            rt_graphics_init(&g, i % 4, NULL);
            if (psdb_device_create_graphics_pipeline(s->dev, &g.desc, &p) != PSDB_S_OK) {
                atomic_fetch_add(&s->bad_counts, 1);
                break;
            }
            check_creation(s, p, 12);
        } else {
            rt_compute c;
            static const psdb_session_subobject null_none = {NULL, 0};
            rt_compute_init(&c, i % 4, (i & 1) ? &null_none : NULL);
            if (psdb_device_create_compute_pipeline(s->dev, &c.desc, &p) != PSDB_S_OK) {
                atomic_fetch_add(&s->bad_counts, 1);
                break;
            }
            check_creation(s, p, 8);
        }
        psdb_pipeline_release(p);
        i++;
    }
    return NULL;
}

static void *setter(void *arg)
{
    stress *s = arg;
    /* Includes flag-only changes on the same session: (A,NONE) <-> (A,CREATE_ONLY). */
    for (int i = 0; !atomic_load(&s->stop); i++) {
        psdb_hr hr = PSDB_S_OK;
        switch (i % 5) {
        case 0:
            hr = psdb_device_set_default_session(s->dev, s->a, PSDB_SESSION_FLAG_NONE);
            break;
        case 1:
            hr = psdb_device_set_default_session(s->dev, s->a, PSDB_SESSION_FLAG_CREATE_ONLY);
            break;
        case 2:
            hr = psdb_device_set_default_session(s->dev, s->b, PSDB_SESSION_FLAG_CREATE_ONLY);
            break;
        case 3:
            hr = psdb_device_set_default_session(s->dev, s->a, PSDB_SESSION_FLAG_NONE);
            break;
        default:
            hr = psdb_device_set_default_session(s->dev, NULL, 0);
            break;
        }
        if (hr != PSDB_S_OK)
            atomic_fetch_add(&s->bad_pairs, 1000);
        atomic_fetch_add(&s->sets, 1);
    }
    return NULL;
}

#define CREATORS 3
#define SETTERS 2

START_TEST(test_concurrency__H1_H2_setters_and_creations_never_mix)
{
    stress s;
    stress_init(&s);
    pthread_t c[CREATORS], t[SETTERS];
    for (int i = 0; i < CREATORS; i++)
        ck_assert_int_eq(pthread_create(&c[i], NULL, creator, &s), 0);
    for (int i = 0; i < SETTERS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, setter, &s), 0);
    /* Run until enough creations overlapped enough sets (bounded in time). */
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double secs = (double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
        /* On a loaded machine the setters can run a burst of sets while every creator is
         * descheduled: keep going until creations have observed more than one pair. */
        int seen = 0;
        for (int i = 0; i < 4; i++)
            seen += atomic_load(&s.seen_pairs[i]) > 0;
        if ((atomic_load(&s.creations) >= 600 && atomic_load(&s.sets) >= 2000 && seen >= 2) ||
            secs > 15)
            break;
    }
    atomic_store(&s.stop, 1);
    for (int i = 0; i < CREATORS; i++)
        pthread_join(c[i], NULL);
    for (int i = 0; i < SETTERS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&s.violations), 0);
    ck_assert_int_eq(atomic_load(&s.bad_pairs), 0);
    ck_assert_int_eq(atomic_load(&s.bad_counts), 0);
    ck_assert_int_gt(atomic_load(&s.creations), 50);
    /* The run really interleaved: more than one pair was observed. */
    int kinds = 0;
    for (int i = 0; i < 4; i++)
        kinds += atomic_load(&s.seen_pairs[i]) > 0;
    ck_assert_int_ge(kinds, 2);
    stress_free(&s);
}
END_TEST

/* I6 under load: the setter opens a fresh session each time, makes it the default and drops its
 * own reference at once, so each replaced default is destroyed by the next set unless a creation
 * still holds it. Creations must never touch a destroyed session (ASan / TSan) nor mix. */
static atomic_int churn_destroyed;

static void churn_gone(void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&churn_destroyed, 1);
}

typedef struct churn {
    stress *s;
    atomic_int opened;
    int failed;
} churn;

static void *churn_setter(void *arg)
{
    churn *c = arg;
    for (int i = 0; !atomic_load(&c->s->stop); i++) {
        psdb_session *x = NULL;
        psdb_session_desc d = {.psdb_path = (i & 1) ? c->s->path_b : c->s->path_a};
        if (psdb_device_open_session(c->s->dev, &d, &x) != PSDB_S_OK ||
            psdb_session_on_destroy(x, churn_gone, NULL) != PSDB_S_OK ||
            psdb_device_set_default_session(c->s->dev, x, (i >> 1) & 1) != PSDB_S_OK) {
            c->failed++;
            psdb_session_release(x);
            break;
        }
        atomic_fetch_add(&c->opened, 1);
        psdb_session_release(x);
    }
    return NULL;
}

static void *churn_creator(void *arg)
{
    stress *s = arg;
    for (int i = 0; !atomic_load(&s->stop); i++) {
        rt_compute c;
        psdb_pipeline *p = NULL;
        psdb_creation_info info;
        rt_compute_init(&c, i % 4, NULL);
        if (psdb_device_create_compute_pipeline(s->dev, &c.desc, &p) != PSDB_S_OK ||
            psdb_pipeline_get_creation_info(p, &info) != PSDB_S_OK) {
            atomic_fetch_add(&s->bad_counts, 1);
            break;
        }
        if (info.lookups != 8 || !info.psdb_hit || tl_op != info.operation_id)
            atomic_fetch_add(&s->bad_counts, 1);
        /* Keep some objects a little: NONE objects hold their session past the next set. */
        uint8_t key[32] = {0};
        size_t size = 0;
        psdb_hr hr = psdb_pipeline_find_value(p, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size);
        if (hr != PSDB_E_NOT_FOUND)
            atomic_fetch_add(&s->bad_counts, 1);
        psdb_pipeline_release(p);
        atomic_fetch_add(&s->creations, 1);
    }
    return NULL;
}

START_TEST(test_concurrency__I6_replaced_defaults_destroyed_while_creations_run)
{
    stress s;
    stress_init(&s);
    churn c = {.s = &s};
    atomic_store(&churn_destroyed, 0);
    pthread_t t[CREATORS], st;
    for (int i = 0; i < CREATORS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn_creator, &s), 0);
    ck_assert_int_eq(pthread_create(&st, NULL, churn_setter, &c), 0);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double secs = (double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
        if ((atomic_load(&s.creations) >= 400 && atomic_load(&c.opened) >= 100) || secs > 10)
            break;
    }
    atomic_store(&s.stop, 1);
    for (int i = 0; i < CREATORS; i++)
        pthread_join(t[i], NULL);
    pthread_join(st, NULL);
    ck_assert_int_eq(c.failed, 0);
    ck_assert_int_eq(atomic_load(&s.violations), 0);
    ck_assert_int_eq(atomic_load(&s.bad_counts), 0);
    int opened = atomic_load(&c.opened);
    ck_assert_int_gt(opened, 10);
    /* Every session but the current default is gone; clearing destroys the last one. */
    ck_assert_int_eq(atomic_load(&churn_destroyed), opened - 1);
    ck_assert_hr(psdb_device_set_default_session(s.dev, NULL, 0), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&churn_destroyed), opened);
    stress_free(&s);
}
END_TEST

/* H3 + H4: setters that hand a token to one another (non-overlapping calls) take effect in call
 * order, and a creation begun after a set returned observes it. */
typedef struct relay {
    stress *s;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int turn;   /* whose turn: 0 or 1 */
    int rounds; /* remaining */
    atomic_int wrong;
} relay;

static void *relay_thread(void *arg)
{
    relay *r = ((void **)arg)[0];
    int me = (int)(intptr_t)((void **)arg)[1];
    psdb_session *mine = me ? r->s->b : r->s->a;
    uint32_t flags = me ? PSDB_SESSION_FLAG_CREATE_ONLY : PSDB_SESSION_FLAG_NONE;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        while (r->turn != me && r->rounds > 0)
            pthread_cond_wait(&r->cond, &r->lock);
        if (r->rounds <= 0) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        pthread_mutex_unlock(&r->lock);
        if (psdb_device_set_default_session(r->s->dev, mine, flags) != PSDB_S_OK)
            atomic_fetch_add(&r->wrong, 1);
        /* After the set returned, a creation here sees it (no other set can run now). */
        rt_compute c;
        psdb_pipeline *p = NULL;
        psdb_creation_info info;
        rt_compute_init(&c, me, NULL);
        if (psdb_device_create_compute_pipeline(r->s->dev, &c.desc, &p) != PSDB_S_OK ||
            psdb_pipeline_get_creation_info(p, &info) != PSDB_S_OK || tl_session != mine ||
            info.flags != flags || info.selection != PSDB_SELECTION_DEVICE_DEFAULT)
            atomic_fetch_add(&r->wrong, 1);
        psdb_pipeline_release(p);
        pthread_mutex_lock(&r->lock);
        r->rounds--;
        r->turn = !me;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
    }
    return NULL;
}

START_TEST(test_concurrency__H3_H4_setters_take_effect_in_call_order)
{
    stress s;
    stress_init(&s);
    relay r = {.s = &s, .turn = 0, .rounds = 40};
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cond, NULL);
    void *args[2][2] = {{&r, (void *)(intptr_t)0}, {&r, (void *)(intptr_t)1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, relay_thread, args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&r.wrong), 0);
    /* The last set (round 40 was thread 1's: B, CREATE_ONLY) is what a new creation sees. */
    rt_compute c;
    psdb_pipeline *p = NULL;
    psdb_creation_info info;
    rt_compute_init(&c, 2, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(s.dev, &c.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_ptr_eq(tl_session, s.b);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    psdb_pipeline_release(p);
    /* Clearing, then a creation in another thread: it sees the implicit default (H4 also applies
     * to clearing and to selecting the implicit default). */
    ck_assert_hr(psdb_device_set_default_session(s.dev, NULL, 0), PSDB_S_OK);
    pthread_cond_destroy(&r.cond);
    pthread_mutex_destroy(&r.lock);
    stress_free(&s);
}
END_TEST

/* H5: a creation blocks inside its first lookup until a setter, on another thread, has replaced and
 * cleared the default and returned. If setters waited for in-flight creations this would
 * deadlock; the wait is bounded so the test fails instead. */
typedef struct barrier_ctx {
    stress *s;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int in_lookup, setter_returned, timed_out;
    uint64_t op;
    psdb_session *first;
    int mixed;
} barrier_ctx;

static void barrier_cb(const psdb_lookup_event *e, void *ctx)
{
    barrier_ctx *b = ctx;
    pthread_mutex_lock(&b->lock);
    if (!b->in_lookup) {
        b->in_lookup = 1;
        b->op = e->operation_id;
        b->first = e->session;
        pthread_cond_broadcast(&b->cond);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        while (!b->setter_returned && !b->timed_out)
            if (pthread_cond_timedwait(&b->cond, &b->lock, &until) == ETIMEDOUT)
                b->timed_out = 1;
    } else if (e->operation_id == b->op && e->session != b->first) {
        b->mixed = 1;
    }
    pthread_mutex_unlock(&b->lock);
}

static void *barrier_setter(void *arg)
{
    barrier_ctx *b = arg;
    pthread_mutex_lock(&b->lock);
    while (!b->in_lookup)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
    psdb_device_set_default_session(b->s->dev, b->s->b, 0);
    psdb_device_set_default_session(b->s->dev, NULL, 0);
    pthread_mutex_lock(&b->lock);
    b->setter_returned = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

START_TEST(test_concurrency__H5_setter_is_not_a_completion_barrier)
{
    stress s;
    stress_init(&s);
    barrier_ctx b = {.s = &s};
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.cond, NULL);
    ck_assert_hr(psdb_device_set_default_session(s.dev, s.a, 0), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_lookup_callback(s.dev, barrier_cb, &b), PSDB_S_OK);
    int a_gone = 0;
    ck_assert_hr(psdb_session_on_destroy(s.a, rt_destroyed, &a_gone), PSDB_S_OK);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, barrier_setter, &b), 0);
    rt_graphics g;
    psdb_pipeline *p = NULL;
    rt_graphics_init(&g, 1, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(s.dev, &g.desc, &p), PSDB_S_OK);
    pthread_join(t, NULL);
    ck_assert_msg(!b.timed_out, "the setter waited for the in-flight creation");
    ck_assert_int_eq(b.setter_returned, 1);
    ck_assert_ptr_eq(b.first, s.a);
    ck_assert_int_eq(b.mixed, 0);
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.lookups, 12);
    ck_assert(info.psdb_hit);
    ck_assert_int_eq(a_gone, 0);
    psdb_pipeline_release(p);
    ck_assert_hr(psdb_device_set_lookup_callback(s.dev, NULL, NULL), PSDB_S_OK);
    pthread_cond_destroy(&b.cond);
    pthread_mutex_destroy(&b.lock);
    stress_free(&s);
    ck_assert_int_eq(a_gone, 1);
}
END_TEST

/* Sessions shared by threads: concurrent addref / release and destruction exactly once. */
static void *ref_churn(void *arg)
{
    psdb_session *s = arg;
    for (int i = 0; i < 20000; i++) {
        psdb_session_addref(s);
        psdb_session_release(s);
    }
    return NULL;
}

START_TEST(test_concurrency__D1_reference_counts_are_atomic)
{
    stress s;
    stress_init(&s);
    int gone = 0;
    psdb_session *x = rt_open(s.dev, s.path_a);
    ck_assert_hr(psdb_session_on_destroy(x, rt_destroyed, &gone), PSDB_S_OK);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, ref_churn, x), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(gone, 0);
    psdb_session_release(x);
    ck_assert_int_eq(gone, 1);
    stress_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("concurrency");
    TCase *tc = tcase_create("concurrency");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_concurrency__H1_H2_setters_and_creations_never_mix);
    tcase_add_test(tc, test_concurrency__H3_H4_setters_take_effect_in_call_order);
    tcase_add_test(tc, test_concurrency__H5_setter_is_not_a_completion_barrier);
    tcase_add_test(tc, test_concurrency__D1_reference_counts_are_atomic);
    tcase_add_test(tc, test_concurrency__I6_replaced_defaults_destroyed_while_creations_run);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
