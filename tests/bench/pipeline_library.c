/* pipeline_library.c - benchmark of the pipeline library, serialized PSOs and base sets on a
 * synthetic game-like corpus (psdb synth, K state variants per graphics base):
 *  1. serialized size of one library holding every PSO (shared units once) versus the sum of each
 *     PSO's standalone library;
 *  2. package size of a base set (library of bases + derivation records) versus every PSO
 *     serialized (serialized graphics PSOs, each counted whole, plus compute PSOs standalone), and
 *     versus the deduplicated serialized blobs;
 *  3. time to load every PSO from a library on a fresh device versus creating them with local
 *     compilation at the reference compiler's default cost (fresh device, empty local cache), and
 *     time to load the base set's bases and derive every other PSO from the records.
 * Usage: bench_pipeline_library [PIPELINES] [VARIANTS]   (default 300 pipelines, 8 variants) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build/baseset.h"
#include "driver/compiler.h"
#include "format/desc.h"
#include "build/synth.h"

#include "bench.h"

typedef struct entry {
    uint32_t kind;
    uint8_t key[32];
    void *desc; /* decoded block (free()) */
} entry;

typedef struct corpus {
    entry *e;
    size_t n, cap;
} corpus;

static int load_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *data,
                      size_t size, void *ctx)
{
    corpus *c = ctx;
    (void)version;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        entry *ne = realloc(c->e, cap * sizeof(*ne));
        if (!ne)
            return 1;
        c->e = ne;
        c->cap = cap;
    }
    void *d = NULL;
    psdb_hr hr = PSDB_E_INVALIDARG;
    if (kind == PSDB_SODB_COMPUTE)
        hr = psdb__desc_decode_compute(data, size, (psdb_compute_pipeline_desc **)&d);
    else if (kind == PSDB_SODB_GRAPHICS)
        hr = psdb__desc_decode_graphics(data, size, (psdb_graphics_pipeline_desc **)&d);
    if (PSDB_FAILED(hr))
        return 0; /* state objects are not pipelines */
    c->e[c->n].kind = kind;
    memcpy(c->e[c->n].key, key, 32);
    c->e[c->n].desc = d;
    c->n++;
    return 0;
}

static const entry *by_key(const corpus *c, const uint8_t key[32])
{
    for (size_t i = 0; i < c->n; i++)
        if (memcmp(c->e[i].key, key, 32) == 0)
            return &c->e[i];
    fprintf(stderr, "bench_pipeline_library: record names an unknown key\n");
    exit(1);
}

/* Loads every base of a base set and derives the rest; returns the PSOs made. */
static size_t start_from_base_set(const corpus *c, psdb_device *dev, const psdb__buf *lib_blob,
                                  const psdb__buf *records)
{
    psdb_pipeline_library *lib = NULL;
    uint32_t count = 0;
    size_t made = 0, cursor = 0;
    if (psdb_device_create_pipeline_library(dev, lib_blob->data, lib_blob->len, &lib) !=
            PSDB_S_OK ||
        psdb_derivation_records_validate(records->data, records->len, &count) != PSDB_S_OK)
        exit(1);
    /* Every PSO of the corpus is either a base in the library or a record. */
    psdb_pipeline **bases = calloc(c->n, sizeof(*bases));
    for (size_t i = 0; i < c->n; i++) {
        char name[65];
        psdb__hex(c->e[i].key, 32, name);
        psdb_hr hr =
            c->e[i].kind == PSDB_SODB_COMPUTE
                ? psdb_pipeline_library_load_compute_pipeline(lib, name, c->e[i].desc, &bases[i])
                : psdb_pipeline_library_load_graphics_pipeline(lib, name, c->e[i].desc, &bases[i]);
        made += hr == PSDB_S_OK;
    }
    psdb_derivation d;
    while (psdb_derivation_records_next(records->data, records->len, &cursor, &d) == PSDB_S_OK) {
        psdb_pipeline *p = NULL;
        const entry *b = by_key(c, d.base_key);
        if (psdb_device_create_derived_graphics_pipeline(dev, bases[b - c->e], d.count, d.descs,
                                                         &p) != PSDB_S_OK)
            exit(1);
        psdb_pipeline_release(p);
        made++;
    }
    for (size_t i = 0; i < c->n; i++)
        psdb_pipeline_release(bases[i]);
    free(bases);
    psdb_pipeline_library_release(lib);
    return made;
}

static psdb_device *device(uint32_t flags, uint64_t cost)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = {.vendor_id = 0x1234,
                                      .device_id = 0x42,
                                      .family = "contoso-gfx9",
                                      .abi_min = 1,
                                      .abi_max = 10,
                                      .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                                      .driver_build = 77},
                          .flags = flags,
                          .compile_ns_per_kib = cost};
    if (psdb_device_create(&d, &dev) != PSDB_S_OK) {
        fprintf(stderr, "bench_pipeline_library: device creation failed\n");
        exit(1);
    }
    return dev;
}

static psdb_pipeline *create(psdb_device *dev, const entry *e)
{
    psdb_pipeline *p = NULL;
    psdb_hr hr = e->kind == PSDB_SODB_COMPUTE
                     ? psdb_device_create_compute_pipeline(dev, e->desc, &p)
                     : psdb_device_create_graphics_pipeline(dev, e->desc, &p);
    if (PSDB_FAILED(hr)) {
        fprintf(stderr, "bench_pipeline_library: creation failed: %s\n", psdb_hr_str(hr));
        exit(1);
    }
    return p;
}

/* Distinct blob addresses seen among serialized PSOs (the device interns them). */
typedef struct seen {
    const void **p;
    size_t n, cap, bytes;
} seen;

static void see(seen *s, const void *p, size_t size)
{
    if (!p)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (s->p[i] == p)
            return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->p = realloc(s->p, s->cap * sizeof(*s->p));
        if (!s->p)
            exit(1);
    }
    s->p[s->n++] = p;
    s->bytes += size;
}

int main(int argc, char **argv)
{
    uint64_t pipelines = argc > 1 ? strtoull(argv[1], NULL, 10) : 300;
    uint32_t variants = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 8;
    char path[64];
    corpus c = {0};
    snprintf(path, sizeof(path), "/tmp/bench_plib_%ld.sodb", (long)getpid());
    psdb__synth_params sp = {.app_name = "Bench",
                             .app_version = 1,
                             .pipelines = pipelines,
                             .seed = 1,
                             .variants = variants,
                             .compute_permille = 200};
    psdb_sodb *sodb = NULL;
    if (psdb__synth_write(&sp, path) != PSDB_S_OK || psdb_sodb_open(path, &sodb) != PSDB_S_OK ||
        psdb_sodb_foreach(sodb, load_entry, &c) != PSDB_S_OK) {
        fprintf(stderr, "bench_pipeline_library: corpus failed\n");
        return 1;
    }
    psdb_sodb_release(sodb);

    /* 1. One library against standalone libraries. */
    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, PSDB_COMPILE_COST_FREE);
    psdb_pipeline_library *lib = NULL;
    psdb_device_create_pipeline_library(tools, NULL, 0, &lib);
    size_t standalone = 0, serialized_each = 0;
    seen uniq = {0};
    for (size_t i = 0; i < c.n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "pso-%zu", i);
        psdb_pipeline *p = create(tools, &c.e[i]);
        psdb_pipeline_library *one = NULL;
        psdb_device_create_pipeline_library(tools, NULL, 0, &one);
        psdb_pipeline_library_store_pipeline(one, name, p);
        size_t alone = psdb_pipeline_library_get_serialized_size(one);
        standalone += alone;
        psdb_pipeline_library_release(one);
        if (psdb_pipeline_library_store_pipeline(lib, name, p) != PSDB_S_OK)
            return 1;
        if (c.e[i].kind == PSDB_SODB_GRAPHICS) {
            psdb_serialized_graphics_pipeline s;
            if (psdb_device_serialize_graphics_pipeline(tools, p, 0, &s) != PSDB_S_OK)
                return 1;
            const psdb_serialized_shader *st[] = {&s.vs, &s.ps, &s.ds, &s.hs, &s.gs};
            serialized_each += s.packet_size + s.metadata_size;
            see(&uniq, s.packet, s.packet_size);
            see(&uniq, s.metadata, s.metadata_size);
            for (int k = 0; k < 5; k++) {
                serialized_each += st[k]->gpu_instructions_size + st[k]->metadata_size;
                see(&uniq, st[k]->gpu_instructions, st[k]->gpu_instructions_size);
                see(&uniq, st[k]->metadata, st[k]->metadata_size);
            }
        } else {
            serialized_each += alone; /* compute PSOs have no serialized form: standalone */
            uniq.bytes += alone;
        }
        psdb_pipeline_release(p);
    }
    size_t together = psdb_pipeline_library_get_serialized_size(lib);
    uint8_t *blob = malloc(together);
    psdb_pipeline_library_serialize(lib, blob, together);
    psdb_pipeline_library_release(lib);
    printf("corpus: %zu pipelines (%llu requested, %u variants per graphics base)\n", c.n,
           (unsigned long long)pipelines, variants);
    printf("library of all PSOs: %zu bytes; sum of standalone libraries: %zu bytes; ratio %.3f\n",
           together, standalone, (double)together / (double)standalone);

    /* 2. Base set package against every PSO serialized. */
    psdb__buf bl = {0}, br = {0};
    psdb__baseset_stats bs = {0};
    if (psdb__baseset_build(tools, path, &bl, &br, &bs) != PSDB_S_OK)
        return 1;
    size_t package = bl.len + br.len;
    printf("base set: %llu compute + %llu graphics bases, %llu derived; library %zu + records %zu "
           "= %zu bytes\n",
           (unsigned long long)bs.compute, (unsigned long long)bs.bases,
           (unsigned long long)bs.derived, bl.len, br.len, package);
    printf("every PSO serialized: %zu bytes (deduplicated blobs: %zu bytes); package / every: "
           "%.3f; package / deduplicated: %.3f; package / library of all: %.3f\n",
           serialized_each, uniq.bytes, (double)package / (double)serialized_each,
           (double)package / (double)uniq.bytes, (double)package / (double)together);
    psdb_device_release(tools);

    /* 3. Loading from the library against creating with local compilation (default cost). */
    psdb_device *game = device(0, 0);
    psdb_pipeline_library *l = NULL;
    double t0 = bench_now();
    if (psdb_device_create_pipeline_library(game, blob, together, &l) != PSDB_S_OK)
        return 1;
    for (size_t i = 0; i < c.n; i++) {
        char name[32];
        psdb_pipeline *p = NULL;
        snprintf(name, sizeof(name), "pso-%zu", i);
        psdb_hr hr = c.e[i].kind == PSDB_SODB_COMPUTE
                         ? psdb_pipeline_library_load_compute_pipeline(l, name, c.e[i].desc, &p)
                         : psdb_pipeline_library_load_graphics_pipeline(l, name, c.e[i].desc, &p);
        if (hr != PSDB_S_OK)
            return 1;
        psdb_pipeline_release(p);
    }
    double load_s = bench_now() - t0;
    uint32_t load_compiles = psdb_device_get_local_compile_count(game);
    psdb_pipeline_library_release(l);
    psdb_device_release(game);
    psdb_device *cold = device(0, 0);
    t0 = bench_now();
    for (size_t i = 0; i < c.n; i++)
        psdb_pipeline_release(create(cold, &c.e[i]));
    double create_s = bench_now() - t0;
    uint32_t create_compiles = psdb_device_get_local_compile_count(cold);
    psdb_device_release(cold);
    printf("load all from library: %.4f s (%u local compiles); create with local compilation: "
           "%.4f s (%u local compiles); speed-up %.1fx\n",
           load_s, load_compiles, create_s, create_compiles, create_s / load_s);
    psdb_device *fresh = device(0, 0);
    t0 = bench_now();
    size_t made = start_from_base_set(&c, fresh, &bl, &br);
    double base_s = bench_now() - t0;
    printf("load the bases and derive the rest: %.4f s for %zu PSOs (%u local compiles); "
           "speed-up over local compilation %.1fx\n",
           base_s, made, psdb_device_get_local_compile_count(fresh), create_s / base_s);
    psdb_device_release(fresh);
    psdb__buf_free(&bl);
    psdb__buf_free(&br);
    free(blob);
    free(uniq.p);
    for (size_t i = 0; i < c.n; i++)
        free(c.e[i].desc);
    free(c.e);
    unlink(path);
    return 0;
}
