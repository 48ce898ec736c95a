/* compile.c - benchmark: pipelines per second of `psdb compile` (SODB -> PSDB, file written) on a
 * synthetic corpus, at the default simulated compile cost and at zero cost.
 * Usage: bench_compile [PIPELINES] [SEED]   (default 2000 pipelines, seed 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/compile_sodb.h"
#include "driver/compiler.h"
#include "build/synth.h"

static int run(const char *sodb, const char *out, uint64_t cost, const char *label)
{
    psdb_target t = {"contoso-gfx9", 7, PSDB_VERSION(1, 0, 0, 0), PSDB_VERSION(1, 0, 0, 0)};
    psdb__compile_stats st = {0};
    char err[256];
    psdb_hr hr = psdb__compile_sodb(sodb, &t, cost, out, &st, err, sizeof(err));
    if (PSDB_FAILED(hr)) {
        fprintf(stderr, "bench_compile: %s\n", err);
        return 1;
    }
    printf("%-22s %6llu pipelines  %5llu/%5llu units compiled  %6.1f MiB in  %7.3f s  "
           "%9.0f pipelines/s\n",
           label, (unsigned long long)st.pipelines, (unsigned long long)st.units_compiled,
           (unsigned long long)st.units, (double)st.code_bytes / (1024.0 * 1024.0), st.seconds,
           st.seconds > 0 ? (double)st.pipelines / st.seconds : 0.0);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    char dir[] = "/tmp/psdb-bench-XXXXXX";
    char sodb[64], out[64];
    int rc = 1;
    if (n == 0 || !mkdtemp(dir)) {
        fprintf(stderr, "bench_compile: bad arguments or no temporary directory\n");
        return 2;
    }
    snprintf(sodb, sizeof(sodb), "%s/corpus.sodb", dir);
    snprintf(out, sizeof(out), "%s/out.psdb", dir);
    psdb__synth_params p = {.app_name = "Bench",
                            .app_version = PSDB_VERSION(1, 0, 0, 0),
                            .pipelines = n,
                            .seed = seed,
                            .variants = 4,
                            .compute_permille = 200};
    if (PSDB_FAILED(psdb__synth_write(&p, sodb))) {
        fprintf(stderr, "bench_compile: synth failed\n");
        goto cleanup;
    }
    printf("corpus: %llu pipelines (20%% compute, 4 variants per graphics base), seed %llu\n",
           (unsigned long long)n, (unsigned long long)seed);
    if (run(sodb, out, PSDB_COMPILE_COST_FREE, "zero cost") != 0)
        goto cleanup;
    if (run(sodb, out, PSDB_COMPILE_NS_PER_KIB_DEFAULT, "default 0.2 ms/KiB") != 0)
        goto cleanup;
    rc = 0;
cleanup:
    unlink(sodb);
    unlink(out);
    rmdir(dir);
    return rc;
}
