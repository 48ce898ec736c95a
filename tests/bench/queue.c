/* queue.c - benchmark: creation throughput of the async queue with 1, 2 and 4 workers against
 * synchronous creation on one thread, at a 100% PSDB hit rate and at 0% (no PSDB: every unit
 * compiled locally at the reference compiler's default cost), on a synthetic game-like corpus;
 * each round uses a fresh device (empty local driver cache). Prints medians and ratios.
 * Usage: bench_queue [PIPELINES] [ROUNDS]   (default 200 pipelines, 5 rounds) */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build/compile_sodb.h"
#include "driver/compiler.h"
#include "format/desc.h"
#include "build/synth.h"

#include "bench.h"

#define FAMILY "contoso-gfx9"
#define MAX_ROUNDS 99

static atomic_uint failures;

static void on_done(psdb_hr hr, psdb_pipeline *p, void *ctx)
{
    (void)ctx;
    if (PSDB_FAILED(hr))
        atomic_fetch_add(&failures, 1);
    psdb_pipeline_release(p);
}

/* One round on a fresh device: workers 0 creates synchronously on this thread, else through a
 * queue with that many workers (timed from the first submission to wait_idle). Returns creations
 * per second, or -1; *missed receives the PSDB misses the round counted. */
static double round_once(const bench_corpus *c, const psdb_device_desc *dd, const char *psdb,
                         uint32_t workers, uint32_t *missed)
{
    psdb_device *dev = NULL;
    psdb_session *s = NULL;
    psdb_queue *q = NULL;
    double rate = -1;
    psdb_statistics st;
    if (PSDB_FAILED(psdb_device_create(dd, &dev)))
        goto cleanup;
    if (psdb) {
        psdb_session_desc sd = {.psdb_path = psdb};
        if (PSDB_FAILED(psdb_device_open_session(dev, &sd, &s)) ||
            PSDB_FAILED(psdb_device_set_default_session(dev, s, 0)))
            goto cleanup;
    }
    if (workers && PSDB_FAILED(psdb_device_create_queue(dev, workers, &q)))
        goto cleanup;
    atomic_store(&failures, 0);
    double t0 = bench_now();
    for (size_t i = 0; i < c->n; i++) {
        psdb_pipeline *p = NULL;
        psdb_hr hr = PSDB_S_OK;
        if (q)
            hr = c->e[i].kind == PSDB_SODB_COMPUTE
                     ? psdb_queue_create_compute_pipeline(q, c->e[i].desc, on_done, NULL)
                     : psdb_queue_create_graphics_pipeline(q, c->e[i].desc, on_done, NULL);
        else
            hr = c->e[i].kind == PSDB_SODB_COMPUTE
                     ? psdb_device_create_compute_pipeline(dev, c->e[i].desc, &p)
                     : psdb_device_create_graphics_pipeline(dev, c->e[i].desc, &p);
        if (PSDB_FAILED(hr))
            goto cleanup;
        psdb_pipeline_release(p);
    }
    if (q && PSDB_FAILED(psdb_queue_wait_idle(q)))
        goto cleanup;
    double t1 = bench_now();
    if (atomic_load(&failures) != 0)
        goto cleanup;
    if (q)
        psdb_queue_read_statistics(q, PSDB_COUNTER_DEFAULT, &st);
    else
        psdb_device_get_statistics(dev, &st);
    *missed = st.pipeline_states.num_psdb_cache_missed;
    rate = (double)c->n / (t1 - t0);
cleanup:
    psdb_queue_release(q);
    psdb_session_release(s);
    psdb_device_release(dev);
    return rate;
}

static int parse_count(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v == 0 || v > max)
        return 1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const uint32_t modes[] = {0, 1, 2, 4}; /* 0: synchronous on one thread */
    enum { NUM_MODES = sizeof(modes) / sizeof(modes[0]) };
    unsigned long long n = 200, rounds_arg = 5;
    char dir[] = "/tmp/psdb-bench-XXXXXX", sodb[64], psdb[64], exe[64];
    bench_corpus c = {0};
    psdb_sodb *sd = NULL;
    int rc = 1;
    if ((argc > 1 && parse_count(argv[1], 1000000, &n)) ||
        (argc > 2 && parse_count(argv[2], MAX_ROUNDS, &rounds_arg)) || !mkdtemp(dir)) {
        fprintf(stderr, "bench_queue: bad arguments or no temporary directory\n");
        return 2;
    }
    int rounds = (int)rounds_arg;
    snprintf(sodb, sizeof(sodb), "%s/corpus.sodb", dir);
    snprintf(psdb, sizeof(psdb), "%s/corpus.psdb", dir);
    psdb__synth_params p = {.app_name = "Bench",
                            .app_version = PSDB_VERSION(1, 0, 0, 0),
                            .pipelines = n,
                            .seed = 1,
                            .variants = 4,
                            .compute_permille = 200};
    psdb_app_identity id;
    psdb_target t = {FAMILY, 5, PSDB_VERSION(1, 0, 0, 0), PSDB_VERSION(1, 0, 0, 0)};
    if (PSDB_FAILED(psdb__synth_write(&p, sodb)) ||
        PSDB_FAILED(psdb__synth_identity(&p, exe, sizeof(exe), &id)) ||
        PSDB_FAILED(psdb__compile_sodb(sodb, &t, PSDB_COMPILE_COST_FREE, psdb, NULL, NULL, 0)) ||
        PSDB_FAILED(psdb_sodb_open(sodb, &sd)) || PSDB_FAILED(bench_corpus_load(sd, &c))) {
        fprintf(stderr, "bench_queue: preparing the corpus failed\n");
        goto cleanup;
    }
    psdb_device_desc dd = {.adapter = {.vendor_id = 1,
                                       .device_id = 2,
                                       .family = FAMILY,
                                       .abi_min = 1,
                                       .abi_max = 10,
                                       .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                                       .app_profile_version = PSDB_VERSION(1, 0, 0, 0)},
                           .identity = &id,
                           .compile_ns_per_kib = 0 /* the default cost */};
    double rate[2][NUM_MODES][MAX_ROUNDS];
    uint32_t missed[2][NUM_MODES] = {{0}};
    /* Rounds interleave the modes so that a slow phase of the machine hits them all alike. */
    for (int r = 0; r < rounds; r++) {
        for (int h = 0; h < 2; h++) {
            for (int m = 0; m < NUM_MODES; m++) {
                rate[h][m][r] = round_once(&c, &dd, h == 0 ? psdb : NULL, modes[m], &missed[h][m]);
                if (rate[h][m][r] < 0) {
                    fprintf(stderr, "bench_queue: a creation failed\n");
                    goto cleanup;
                }
            }
        }
    }
    printf("corpus: %zu pipelines (synth seed 1, 20%% compute), %d rounds, fresh device each, "
           "%ld CPUs online\n",
           c.n, rounds, sysconf(_SC_NPROCESSORS_ONLN));
    for (int h = 0; h < 2; h++) {
        double median[NUM_MODES];
        printf("%s\n", h == 0 ? "100% PSDB hits:" : "0% PSDB hits (no PSDB, 0.2 ms/KiB compiles):");
        for (int m = 0; m < NUM_MODES; m++) {
            qsort(rate[h][m], (size_t)rounds, sizeof(double), bench_cmp_double);
            median[m] = rate[h][m][rounds / 2];
            if (modes[m] == 0)
                printf("  synchronous, 1 thread : %10.1f pipelines/s (median; PSDB misses %u)\n",
                       median[m], missed[h][m]);
            else
                printf("  queue, %u worker%s      : %10.1f pipelines/s (median; PSDB misses %u)"
                       "  ratio %.2f x\n",
                       modes[m], modes[m] == 1 ? " " : "s", median[m], missed[h][m],
                       median[m] / median[0]);
        }
    }
    rc = 0;
cleanup:
    bench_corpus_free(&c);
    psdb_sodb_release(sd);
    unlink(sodb);
    unlink(psdb);
    rmdir(dir);
    return rc;
}
