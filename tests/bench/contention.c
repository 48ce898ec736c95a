/* contention.c - benchmark: creation throughput on N threads (100% PSDB hits) while another thread
 * replaces the device-wide default in a loop, divided by the same without that thread (target
 * >= 0.9: readers of the default must not serialize). Rounds alternate; prints medians.
 * Usage: bench_contention [THREADS] [ROUNDS] [MS_PER_ROUND]   (default 2, 7, 400) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver/compiler.h"

#include "bench.h"

#define FAMILY "contoso-gfx9"
#define DESCS 16

static const psdb_app_identity identity = {
    .desc = {.exe_filename = "bench", .name = "Bench", .version = PSDB_VERSION(1, 0, 0, 0)}};

typedef struct shared {
    psdb_device *dev;
    psdb_session *a, *b;
    psdb_compute_pipeline_desc desc[DESCS];
    char code[DESCS][4096];
    atomic_int stop;
    atomic_long creations, sets;
    _Atomic double cpu; /* creator threads' CPU seconds in the round */
    atomic_int errors;
} shared;

static void *creator(void *arg)
{
    shared *s = arg;
    long n = 0;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (unsigned i = 0; !atomic_load_explicit(&s->stop, memory_order_relaxed); i++) {
        psdb_pipeline *p = NULL;
        if (PSDB_FAILED(psdb_device_create_compute_pipeline(s->dev, &s->desc[i % DESCS], &p)))
            atomic_fetch_add(&s->errors, 1);
        psdb_pipeline_release(p);
        n++;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
    double old = atomic_load(&s->cpu);
    while (!atomic_compare_exchange_weak(&s->cpu, &old, old + cpu))
        ;
    atomic_fetch_add(&s->creations, n);
    return NULL;
}

static void *setter(void *arg)
{
    shared *s = arg;
    long n = 0;
    for (unsigned i = 0; !atomic_load_explicit(&s->stop, memory_order_relaxed); i++) {
        psdb_session *x = (i & 1) ? s->b : s->a;
        if (PSDB_FAILED(psdb_device_set_default_session(s->dev, x, (i >> 1) & 1)))
            atomic_fetch_add(&s->errors, 1);
        n++;
    }
    atomic_fetch_add(&s->sets, n);
    return NULL;
}

/* Returns creations per wall-clock second; *per_cpu gets creations per creator CPU second (what
 * is left when the setter's own CPU use on a busy machine is taken out). */
static double round_once(shared *s, int threads, int with_setter, int ms, double *per_cpu)
{
    pthread_t t[64], st;
    struct timespec t0, t1, nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
    atomic_store(&s->stop, 0);
    atomic_store(&s->creations, 0);
    atomic_store(&s->cpu, 0.0);
    psdb_device_set_default_session(s->dev, s->a, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, creator, s);
    if (with_setter)
        pthread_create(&st, NULL, setter, s);
    nanosleep(&nap, NULL);
    atomic_store(&s->stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (with_setter)
        pthread_join(st, NULL);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    *per_cpu = (double)atomic_load(&s->creations) / atomic_load(&s->cpu);
    return (double)atomic_load(&s->creations) / secs;
}

static int make_psdb(shared *s, const char *path)
{
    psdb_target t = {FAMILY, 5, PSDB_VERSION(1, 0, 0, 0), PSDB_VERSION(1, 0, 0, 0)};
    psdb_writer *w = NULL;
    int rc = 1;
    if (PSDB_FAILED(psdb_writer_create(path, &identity, &t, &w)))
        goto cleanup;
    for (int i = 0; i < DESCS; i++) {
        psdb__plan plan = {0};
        psdb_value_ref refs[8];
        if (PSDB_FAILED(psdb__plan_compute(&s->desc[i], &plan)))
            goto cleanup;
        for (uint32_t u = 0; u < plan.num_units; u++) {
            psdb__buf code = {0}, meta = {0};
            psdb__compile_unit(&plan.units[u], &t, PSDB_COMPILE_COST_FREE, &code, &meta);
            psdb_writer_put_value(w, plan.units[u].key, 32, PSDB_VALUE_OBJECT_CODE, code.data,
                                  code.len);
            psdb_writer_put_value(w, plan.units[u].key, 32, PSDB_VALUE_METADATA, meta.data,
                                  meta.len);
            psdb__buf_free(&code);
            psdb__buf_free(&meta);
            refs[u].key = plan.units[u].key;
            refs[u].key_size = 32;
        }
        psdb_writer_put_group(w, plan.group_key, 32, 1, plan.num_units, refs);
        psdb__plan_free(&plan);
    }
    rc = PSDB_FAILED(psdb_writer_finish(w));
cleanup:
    psdb_writer_release(w);
    return rc;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    int ms = argc > 3 ? atoi(argv[3]) : 400;
    char dir[] = "/tmp/psdb-bench-XXXXXX", pa[64], pb[64];
    static shared s;
    static const char rs[] = "root-signature";
    int rc = 1;
    if (threads < 1 || threads > 64 || rounds < 1 || rounds > 99 || ms < 10 || !mkdtemp(dir)) {
        fprintf(stderr, "bench_contention: bad arguments or no temporary directory\n");
        return 2;
    }
    snprintf(pa, sizeof(pa), "%s/a.psdb", dir);
    snprintf(pb, sizeof(pb), "%s/b.psdb", dir);
    for (int i = 0; i < DESCS; i++) {
        for (size_t j = 0; j < sizeof(s.code[i]); j++)
            s.code[i][j] = (char)((i * 131 + (int)j * 7) & 0xFF);
        s.desc[i].root_signature = rs;
        s.desc[i].root_signature_size = sizeof(rs);
        s.desc[i].cs.code = s.code[i];
        s.desc[i].cs.size = sizeof(s.code[i]);
    }
    psdb_device_desc dd = {.adapter = {.vendor_id = 1,
                                       .device_id = 2,
                                       .family = FAMILY,
                                       .abi_min = 1,
                                       .abi_max = 10,
                                       .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                                       .app_profile_version = PSDB_VERSION(1, 0, 0, 0)},
                           .identity = &identity};
    psdb_session_desc da = {.psdb_path = pa}, db = {.psdb_path = pb};
    if (make_psdb(&s, pa) || make_psdb(&s, pb) || PSDB_FAILED(psdb_device_create(&dd, &s.dev)) ||
        PSDB_FAILED(psdb_device_open_session(s.dev, &da, &s.a)) ||
        PSDB_FAILED(psdb_device_open_session(s.dev, &db, &s.b))) {
        fprintf(stderr, "bench_contention: setup failed\n");
        goto cleanup;
    }
    double with[100], without[100], ratio[100], cpu_with, cpu_without, cpu_ratio[100];
    for (int r = 0; r < rounds; r++) {
        without[r] = round_once(&s, threads, 0, ms, &cpu_without);
        with[r] = round_once(&s, threads, 1, ms, &cpu_with);
        ratio[r] = with[r] / without[r];
        cpu_ratio[r] = cpu_with / cpu_without;
    }
    qsort(cpu_ratio, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(with, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(without, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(ratio, (size_t)rounds, sizeof(double), bench_cmp_double);
    psdb_statistics st;
    psdb_device_get_statistics(s.dev, &st);
    printf("%d creator threads, %d rounds of %d ms, 100%% PSDB hits (misses %u, errors %d)\n",
           threads, rounds, ms, st.pipeline_states.num_psdb_cache_missed, atomic_load(&s.errors));
    printf("without setter : %10.0f creations/s (median)\n", without[rounds / 2]);
    printf("with setter    : %10.0f creations/s (median; %ld sets in all)\n", with[rounds / 2],
           atomic_load(&s.sets));
    printf("ratio          : %10.3f (median of per-round ratios; target >= 0.9)\n",
           ratio[rounds / 2]);
    printf("ratio per CPU s: %10.3f (creations per creator CPU second, with / without)\n",
           cpu_ratio[rounds / 2]);
    rc = atomic_load(&s.errors) != 0;
cleanup:
    psdb_session_release(s.a);
    psdb_session_release(s.b);
    psdb_device_release(s.dev);
    unlink(pa);
    unlink(pb);
    rmdir(dir);
    return rc;
}
