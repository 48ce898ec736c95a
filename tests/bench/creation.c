/* creation.c - benchmark: pipelines created per second with a 100% PSDB hit rate versus with no
 * PSDB (every unit compiled locally at the reference compiler's default cost), on a synthetic
 * game-like corpus; each round uses a fresh device (empty local driver cache). Prints medians.
 * Usage: bench_creation [PIPELINES] [ROUNDS]   (default 200 pipelines, 5 rounds) */
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

/* One round on a fresh device; returns creations per second, or -1. */
static double round_once(const bench_corpus *c, const psdb_device_desc *dd, const char *psdb,
                         uint32_t *missed)
{
    psdb_device *dev = NULL;
    psdb_session *s = NULL;
    double rate = -1;
    if (PSDB_FAILED(psdb_device_create(dd, &dev)))
        goto cleanup;
    if (psdb) {
        psdb_session_desc sd = {.psdb_path = psdb};
        if (PSDB_FAILED(psdb_device_open_session(dev, &sd, &s)) ||
            PSDB_FAILED(psdb_device_set_default_session(dev, s, 0)))
            goto cleanup;
    }
    double t0 = bench_now();
    for (size_t i = 0; i < c->n; i++) {
        psdb_pipeline *p = NULL;
        psdb_hr hr = c->e[i].kind == PSDB_SODB_COMPUTE
                         ? psdb_device_create_compute_pipeline(dev, c->e[i].desc, &p)
                         : psdb_device_create_graphics_pipeline(dev, c->e[i].desc, &p);
        if (PSDB_FAILED(hr))
            goto cleanup;
        psdb_pipeline_release(p);
    }
    double t1 = bench_now();
    psdb_statistics st;
    psdb_device_get_statistics(dev, &st);
    *missed = st.pipeline_states.num_psdb_cache_missed;
    rate = (double)c->n / (t1 - t0);
cleanup:
    psdb_session_release(s);
    psdb_device_release(dev);
    return rate;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 200;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    char dir[] = "/tmp/psdb-bench-XXXXXX", sodb[64], psdb[64], exe[64];
    bench_corpus c = {0};
    int rc = 1;
    if (n == 0 || rounds < 1 || rounds > 99 || !mkdtemp(dir)) {
        fprintf(stderr, "bench_creation: bad arguments or no temporary directory\n");
        return 2;
    }
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
    psdb_sodb *sd = NULL;
    if (PSDB_FAILED(psdb__synth_write(&p, sodb)) ||
        PSDB_FAILED(psdb__synth_identity(&p, exe, sizeof(exe), &id)) ||
        PSDB_FAILED(psdb__compile_sodb(sodb, &t, PSDB_COMPILE_COST_FREE, psdb, NULL, NULL, 0)) ||
        PSDB_FAILED(psdb_sodb_open(sodb, &sd)) || PSDB_FAILED(bench_corpus_load(sd, &c))) {
        fprintf(stderr, "bench_creation: preparing the corpus failed\n");
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
    double hit[100], miss[100];
    uint32_t hit_missed = 0, miss_missed = 0;
    for (int r = 0; r < rounds; r++) {
        hit[r] = round_once(&c, &dd, psdb, &hit_missed);
        miss[r] = round_once(&c, &dd, NULL, &miss_missed);
        if (hit[r] < 0 || miss[r] < 0) {
            fprintf(stderr, "bench_creation: a creation failed\n");
            goto cleanup;
        }
    }
    qsort(hit, (size_t)rounds, sizeof(double), bench_cmp_double);
    qsort(miss, (size_t)rounds, sizeof(double), bench_cmp_double);
    double mh = hit[rounds / 2], mm = miss[rounds / 2];
    printf("corpus: %zu pipelines (synth seed 1, 20%% compute), %d rounds, fresh device each\n",
           c.n, rounds);
    printf("100%% PSDB hits  : %10.1f pipelines/s (median; PSDB misses %u)\n", mh, hit_missed);
    printf("no PSDB (0.2 ms/KiB): %10.1f pipelines/s (median; PSDB misses %u)\n", mm, miss_missed);
    printf("ratio            : %10.1f x\n", mh / mm);
    rc = 0;
cleanup:
    bench_corpus_free(&c);
    psdb_sodb_release(sd);
    unlink(sodb);
    unlink(psdb);
    rmdir(dir);
    return rc;
}
