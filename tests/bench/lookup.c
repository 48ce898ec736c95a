/* lookup.c - benchmark: PSDB lookup triples (size, object code, metadata) vs an in-memory table. */
/*
 * Usage: bench_lookup [NUM_KEYS...]      (default: 100000 1000000)
 * For each size it writes a PSDB in $TMPDIR with NUM_KEYS value keys (16-byte keys, object code of
 * 1-4 KiB, metadata of ~100 bytes), holds the same data in an open-addressing hash table, then
 * times single lookup triples over random keys: the median of each run, for RUNS runs. Each run
 * opens the PSDB afresh, so pass 1 pays the first-fetch SHA-256 check of each blob and pass 2
 * (the same keys again) does not. It reports figures and never fails for speed.
 * It also times the two costs no reader of the file can go below, on the same samples: one pread
 * of a random 4 KiB page of the file (a fetch whose leaf is not in memory needs one system call)
 * and the SHA-256 of the triple's bytes (the first-fetch check), each beside the hash table.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "psdb/psdb.h"

#include "bench.h"
#include "format/psdbfile_internal.h"

#define RUNS 5
#define SAMPLES 100000
#define KEY_SIZE 16

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void make_key(uint64_t i, uint8_t key[KEY_SIZE])
{
    uint64_t s = i * 2 + 1, a = splitmix(&s), b = splitmix(&s);
    memcpy(key, &a, 8);
    memcpy(key + 8, &b, 8);
}

/* Object code of 1-4 KiB and metadata of 80-127 bytes, pseudo-random, distinct per key. */
static size_t make_value(uint64_t i, uint32_t type, uint8_t *buf)
{
    uint64_t s = i ^ ((uint64_t)type << 60);
    size_t n = type == PSDB_VALUE_OBJECT_CODE ? 1024 + splitmix(&s) % 3073 : 80 + splitmix(&s) % 48;
    for (size_t j = 0; j < n; j += 8) {
        uint64_t r = splitmix(&s);
        memcpy(buf + j, &r, n - j < 8 ? n - j : 8);
    }
    return n;
}

/* ---- The in-memory baseline: open addressing, linear probing ----------------------------------
 */

typedef struct slot {
    uint8_t key[KEY_SIZE];
    uint8_t used;
    uint8_t *value[2];
    size_t size[2];
} slot;

typedef struct table {
    slot *slots;
    size_t mask;
} table;

static uint64_t key_hash(const uint8_t *key)
{
    uint64_t h;
    memcpy(&h, key, 8); /* keys are already uniformly distributed */
    return h;
}

static slot *table_find(table *t, const uint8_t *key, int insert)
{
    for (size_t i = key_hash(key) & t->mask;; i = (i + 1) & t->mask) {
        slot *s = &t->slots[i];
        if (!s->used) {
            if (!insert)
                return NULL;
            s->used = 1;
            memcpy(s->key, key, KEY_SIZE);
            return s;
        }
        if (memcmp(s->key, key, KEY_SIZE) == 0)
            return s;
    }
}

/* Same contract as psdb_file_find_value, for a fair comparison. */
static int table_lookup(table *t, const uint8_t *key, uint32_t type, void *value, size_t *size)
{
    slot *s = table_find(t, key, 0);
    if (!s)
        return -1;
    if (!value) {
        *size = s->size[type];
        return 0;
    }
    if (*size < s->size[type])
        return -2;
    memcpy(value, s->value[type], s->size[type]);
    *size = s->size[type];
    return 0;
}

/* ---- Parallel lookups: threads share one psdb_file ----------------------------------------------
 */

typedef struct worker {
    psdb_file *f;
    uint64_t nkeys, seed;
    size_t count;
    int errors;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    uint8_t key[KEY_SIZE], *buf = malloc(8192);
    if (!buf) {
        w->errors++;
        return NULL;
    }
    for (size_t i = 0; i < w->count; i++) {
        size_t n = 0;
        make_key(splitmix(&w->seed) % w->nkeys, key);
        w->errors += psdb_file_find_value(w->f, key, KEY_SIZE, 0, NULL, &n) != PSDB_S_OK;
        w->errors += psdb_file_find_value(w->f, key, KEY_SIZE, 0, buf, &n) != PSDB_S_OK;
        n = 8192;
        w->errors += psdb_file_find_value(w->f, key, KEY_SIZE, 1, buf, &n) != PSDB_S_OK;
    }
    free(buf);
    return NULL;
}

/* Triples per second with nthreads threads on one psdb_file; -1 on failure. */
static double throughput(psdb_file *f, uint64_t nkeys, int nthreads)
{
    pthread_t th[8];
    worker w[8];
    int started = 0, errors = 0;
    double a = (bench_now() * 1e9);
    for (int i = 0; i < nthreads && i < 8; i++) {
        w[i] = (worker){.f = f, .nkeys = nkeys, .seed = 77 + (uint64_t)i, .count = SAMPLES};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        errors += w[i].errors;
    }
    double secs = ((bench_now() * 1e9) - a) / 1e9;
    return started == nthreads && errors == 0 ? (double)SAMPLES * started / secs : -1;
}

static volatile size_t sink;

/* ---- The floor: one pread of a page, one SHA-256 of the triple's bytes -------------------------
 */

/* Medians over the samples of a pread of a random whole 4 KiB page of path (*pread_ns) and of the
 * SHA-256 of each sampled key's object code and metadata from the table (*sha_ns); 0 on success. */
static int floor_costs(const char *path, table *t, const uint64_t *sample, double *times,
                       double *pread_ns, double *sha_ns)
{
    uint8_t page[4096], key[KEY_SIZE], digest[EVP_MAX_MD_SIZE];
    uint64_t seed = 4242;
    struct stat sb;
    unsigned int n = 0;
    /* As the reader hashes: the digest fetched once, one context reused. */
    EVP_MD *sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 1;

    if (!sha256 || !md || fd < 0 || fstat(fd, &sb) != 0 || sb.st_size < 4096)
        goto cleanup;
    for (size_t i = 0; i < SAMPLES; i++) {
        off_t off = (off_t)(splitmix(&seed) % ((uint64_t)sb.st_size / 4096)) * 4096;
        double a = bench_now() * 1e9;
        if (pread(fd, page, sizeof(page), off) != (ssize_t)sizeof(page))
            goto cleanup;
        times[i] = bench_now() * 1e9 - a;
        sink += page[i % sizeof(page)];
    }
    *pread_ns = bench_median(times, SAMPLES);
    for (size_t i = 0; i < SAMPLES; i++) {
        make_key(sample[i], key);
        slot *s = table_find(t, key, 0);
        if (!s)
            goto cleanup;
        double a = bench_now() * 1e9;
        for (int type = 0; type < 2; type++)
            if (EVP_DigestInit_ex2(md, sha256, NULL) != 1 ||
                EVP_DigestUpdate(md, s->value[type], s->size[type]) != 1 ||
                EVP_DigestFinal_ex(md, digest, &n) != 1)
                goto cleanup;
        times[i] = bench_now() * 1e9 - a;
        sink += digest[0];
    }
    *sha_ns = bench_median(times, SAMPLES);
    rc = 0;
cleanup:
    if (fd >= 0)
        close(fd);
    EVP_MD_CTX_free(md);
    EVP_MD_free(sha256);
    return rc;
}

/* ---- One size
 * ------------------------------------------------------------------------------------ */

static int bench(uint64_t nkeys, const char *dir)
{
    char path[4096];
    psdb_app_identity id = {.desc = {.exe_filename = "bench.exe", .name = "Bench", .version = 1}};
    psdb_target target = {.family = "bench-family", .abi_version = 1};
    psdb_writer *w = NULL;
    psdb_file *f = NULL;
    psdb_file_info info;
    table t = {0};
    uint8_t *buf = malloc(8192), key[KEY_SIZE];
    uint64_t *sample = malloc(SAMPLES * sizeof(*sample));
    double *times = malloc(SAMPLES * sizeof(*times));
    double med_psdb1[RUNS], med_psdb2[RUNS], med_mem[RUNS], med_op[3][RUNS], t0 = 0, write_s = 0;
    double *op_times[3] = {malloc(SAMPLES * sizeof(double)), malloc(SAMPLES * sizeof(double)),
                           malloc(SAMPLES * sizeof(double))};
    double open_s[RUNS], index_s[RUNS];
    size_t index_bytes = 0, page_bytes = 0;
    struct stat sb;
    int rc = 1, errors = 0, indexed = 1;
    size_t cap = 1;

    snprintf(path, sizeof(path), "%s/psdb-bench-%ld-%llu.psdb", dir, (long)getpid(),
             (unsigned long long)nkeys);
    while (cap < nkeys * 2)
        cap <<= 1;
    t.slots = calloc(cap, sizeof(slot));
    t.mask = cap - 1;
    if (!buf || !sample || !times || !t.slots || !op_times[0] || !op_times[1] || !op_times[2]) {
        fprintf(stderr, "bench: out of memory\n");
        goto cleanup;
    }

    t0 = (bench_now() * 1e9);
    if (psdb_writer_create(path, &id, &target, &w) < 0)
        goto fail;
    for (uint64_t i = 0; i < nkeys; i++) {
        make_key(i, key);
        slot *s = table_find(&t, key, 1);
        for (uint32_t type = 0; type < 2; type++) {
            size_t n = make_value(i, type, buf);
            if (psdb_writer_put_value(w, key, KEY_SIZE, type, buf, n) < 0)
                goto fail;
            s->value[type] = malloc(n);
            if (!s->value[type])
                goto fail;
            memcpy(s->value[type], buf, n);
            s->size[type] = n;
        }
    }
    if (psdb_writer_finish(w) < 0)
        goto fail;
    psdb_writer_release(w);
    w = NULL;
    write_s = ((bench_now() * 1e9) - t0) / 1e9;
    if (stat(path, &sb) != 0)
        goto fail;

    for (int run = 0; run < RUNS; run++) {
        uint64_t seed = 1000 + (uint64_t)run;
        for (size_t i = 0; i < SAMPLES; i++)
            sample[i] = splitmix(&seed) % nkeys;
        double o0 = bench_now();
        if (psdb_file_open(path, NULL, &f) < 0)
            goto fail;
        double o1 = bench_now();
        /* The first lookup would start the index build; timed apart from the lookups here. */
        indexed &= psdb__file_index_wait(f);
        open_s[run] = o1 - o0;
        index_s[run] = bench_now() - o1;
        index_bytes = psdb__file_index_bytes(f);
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < SAMPLES; i++) {
                size_t n = 0;
                make_key(sample[i], key);
                double a = (bench_now() * 1e9);
                errors += psdb_file_find_value(f, key, KEY_SIZE, 0, NULL, &n) != PSDB_S_OK;
                double b = (bench_now() * 1e9);
                errors += psdb_file_find_value(f, key, KEY_SIZE, 0, buf, &n) != PSDB_S_OK;
                double c = (bench_now() * 1e9);
                n = 8192;
                errors += psdb_file_find_value(f, key, KEY_SIZE, 1, buf, &n) != PSDB_S_OK;
                times[i] = (bench_now() * 1e9) - a;
                if (pass == 1) {
                    op_times[0][i] = b - a;
                    op_times[1][i] = c - b;
                    op_times[2][i] = a + times[i] - c;
                }
                sink += n;
            }
            (pass == 0 ? med_psdb1 : med_psdb2)[run] = bench_median(times, SAMPLES);
        }
        for (int op = 0; op < 3; op++)
            med_op[op][run] = bench_median(op_times[op], SAMPLES);
        psdb_file_get_info(f, &info);
        page_bytes = psdb__file_page_cache_bytes(f);
        psdb_file_release(f);
        f = NULL;
        for (size_t i = 0; i < SAMPLES; i++) {
            size_t n = 0;
            make_key(sample[i], key);
            double a = (bench_now() * 1e9);
            errors += table_lookup(&t, key, 0, NULL, &n) != 0;
            errors += table_lookup(&t, key, 0, buf, &n) != 0;
            n = 8192;
            errors += table_lookup(&t, key, 1, buf, &n) != 0;
            times[i] = (bench_now() * 1e9) - a;
            sink += n;
        }
        med_mem[run] = bench_median(times, SAMPLES);
    }
    double pread_ns = 0, sha_ns = 0;
    if (floor_costs(path, &t, sample, times, &pread_ns, &sha_ns) != 0)
        goto fail;
    double tput[3] = {0};
    if (psdb_file_open(path, NULL, &f) < 0)
        goto fail;
    throughput(f, nkeys, 2); /* warm: every blob checked once is not the point here */
    for (int nt = 1; nt <= 2; nt++)
        tput[nt] = throughput(f, nkeys, nt);
    psdb_file_release(f);
    f = NULL;
    double p1 = bench_median(med_psdb1, RUNS), p2 = bench_median(med_psdb2, RUNS),
           m = bench_median(med_mem, RUNS);
    printf("keys %llu (values %llu, blobs %llu, blob bytes %.1f MiB, file %.1f MiB, written in "
           "%.1f s)\n",
           (unsigned long long)nkeys, (unsigned long long)info.num_values,
           (unsigned long long)info.num_blobs, (double)info.blob_bytes / 1048576.0,
           (double)sb.st_size / 1048576.0, write_s);
    printf("  open %.3f s, key index %s in %.3f s, %zu bytes (%.1f per value)\n",
           bench_median(open_s, RUNS), indexed ? "built" : "NOT built", bench_median(index_s, RUNS),
           index_bytes, info.num_values ? (double)index_bytes / (double)info.num_values : 0.0);
    printf("  interior page cache after the runs: %zu bytes (%.1f per value)\n", page_bytes,
           info.num_values ? (double)page_bytes / (double)info.num_values : 0.0);
    printf("  median triple (size, object code, metadata), median of %d runs x %d samples:\n", RUNS,
           SAMPLES);
    printf("    psdb, first fetch (SHA-256 checked): %8.0f ns\n", p1);
    printf("    psdb, repeat fetch (already checked): %7.0f ns  (size %.0f, object code %.0f, "
           "metadata %.0f)\n",
           p2, bench_median(med_op[0], RUNS), bench_median(med_op[1], RUNS),
           bench_median(med_op[2], RUNS));
    printf("    in-memory hash table:                 %7.0f ns\n", m);
    printf("    ratio psdb/memory: %.1f (first fetch), %.1f (repeat)\n", p1 / m, p2 / m);
    printf("  floor of any reader of the file: pread of one 4 KiB page %.0f ns (%.1fx the table), "
           "SHA-256 of the triple's bytes %.0f ns (%.1fx); first fetch >= both (%.1fx), repeat >= "
           "one pread (%.1fx)\n",
           pread_ns, pread_ns / m, sha_ns, sha_ns / m, (pread_ns + sha_ns) / m, pread_ns / m);
    printf("  throughput, threads sharing one psdb_file: 1 thread %.0f triples/s, 2 threads %.0f "
           "triples/s (x%.2f)\n",
           tput[1], tput[2], tput[1] > 0 ? tput[2] / tput[1] : 0.0);
    if (errors)
        printf("  %d lookups failed\n", errors);
    rc = errors != 0;
    goto cleanup;
fail:
    fprintf(stderr, "bench: building or opening %s failed\n", path);
cleanup:
    psdb_writer_release(w);
    psdb_file_release(f);
    unlink(path);
    for (size_t i = 0; t.slots && i < cap; i++) {
        free(t.slots[i].value[0]);
        free(t.slots[i].value[1]);
    }
    free(t.slots);
    free(buf);
    free(sample);
    free(times);
    for (int op = 0; op < 3; op++)
        free(op_times[op]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("TMPDIR");
    uint64_t sizes[16] = {100000, 1000000};
    int nsizes = 2, rc = 0;

    if (!dir || !*dir)
        dir = "/tmp";
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 16; i++) {
            char *end = NULL;
            unsigned long long v = strtoull(argv[i], &end, 10);
            if (!*argv[i] || *end || v == 0) {
                fprintf(stderr, "usage: bench_lookup [NUM_KEYS...]\n");
                return 2;
            }
            sizes[nsizes++] = v;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("psdb lookup benchmark (%s)\n", psdb_version());
    for (int i = 0; i < nsizes; i++)
        rc |= bench(sizes[i], dir);
    return rc;
}
