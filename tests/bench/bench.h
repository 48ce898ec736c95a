/* bench.h - helpers shared by the benchmark programs: a monotonic clock, medians, and a synthetic
 * corpus decoded from an SODB. Header-only: each benchmark is one translation unit. */
#ifndef PSDB_BENCH_H
#define PSDB_BENCH_H

#include <stdlib.h>
#include <time.h>

#include "format/desc.h"

/* Monotonic time in seconds. */
static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v in place and returns its median. */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The compute and graphics descriptions of an SODB, decoded (state objects are skipped). */
typedef struct bench_entry {
    uint32_t kind; /* PSDB_SODB_COMPUTE or PSDB_SODB_GRAPHICS */
    void *desc;    /* decoded block (free()) */
} bench_entry;

typedef struct bench_corpus {
    bench_entry *e;
    size_t n, cap;
} bench_corpus;

static inline int bench_corpus_add(uint32_t kind, const uint8_t key[32], uint64_t version,
                                   const void *data, size_t size, void *ctx)
{
    bench_corpus *c = ctx;
    (void)key;
    (void)version;
    if (kind != PSDB_SODB_COMPUTE && kind != PSDB_SODB_GRAPHICS)
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        bench_entry *ne = realloc(c->e, cap * sizeof(*ne));
        if (!ne)
            return 1;
        c->e = ne;
        c->cap = cap;
    }
    void *d = NULL;
    psdb_hr hr = kind == PSDB_SODB_COMPUTE
                     ? psdb__desc_decode_compute(data, size, (psdb_compute_pipeline_desc **)&d)
                     : psdb__desc_decode_graphics(data, size, (psdb_graphics_pipeline_desc **)&d);
    if (PSDB_FAILED(hr))
        return 1;
    c->e[c->n].kind = kind;
    c->e[c->n].desc = d;
    c->n++;
    return 0;
}

/* Loads every compute and graphics description of an open SODB. 0 on success. */
static inline int bench_corpus_load(psdb_sodb *sodb, bench_corpus *c)
{
    return psdb_sodb_foreach(sodb, bench_corpus_add, c) == PSDB_S_OK ? 0 : -1;
}

static inline void bench_corpus_free(bench_corpus *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->e[i].desc);
    free(c->e);
    c->e = NULL;
    c->n = c->cap = 0;
}

#endif
