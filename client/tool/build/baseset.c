/* baseset.c - base-set packaging: the PSOs of an SODB reduced to the bases a derived PSO cannot
 * avoid (seed 003, "serialized + derived together"), stored in a pipeline library, and derivation
 * records for the rest. */
#include "build/baseset.h"

#include <stdlib.h>
#include <string.h>

typedef struct bs_entry {
    uint32_t kind;
    uint8_t key[32];
    uint8_t *desc;
    size_t size;
} bs_entry;

typedef struct bs_collect {
    bs_entry *e;
    size_t n, cap;
    int oom;
} bs_collect;

static int collect(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                   size_t size, void *ctx)
{
    bs_collect *c = ctx;
    (void)version;
    if (c->n == c->cap) {
        size_t n = c->cap ? c->cap * 2 : 256;
        bs_entry *p = realloc(c->e, n * sizeof(*p));
        if (!p) {
            c->oom = 1;
            return 1;
        }
        c->e = p;
        c->cap = n;
    }
    bs_entry *x = &c->e[c->n];
    x->desc = malloc(size ? size : 1);
    if (!x->desc) {
        c->oom = 1;
        return 1;
    }
    memcpy(x->desc, desc, size);
    x->size = size;
    x->kind = kind;
    memcpy(x->key, key, 32);
    c->n++;
    return 0;
}

typedef struct bs_base {
    uint8_t base_key[32];
    uint8_t key[32];
    psdb_sodb_entry *entry; /* the decoded description, owned */
} bs_base;

static psdb_hr store(psdb_pipeline_library *lib, const uint8_t key[32], psdb_pipeline *p)
{
    char name[65];
    psdb__hex(key, 32, name);
    return psdb_pipeline_library_store_pipeline(lib, name, p);
}

/* Makes *b (empty) a buffer of size bytes, for a serializer to fill. */
static psdb_hr sized(psdb__buf *b, size_t size)
{
    b->data = malloc(size ? size : 1);
    if (!b->data)
        return PSDB_E_OUTOFMEMORY;
    b->len = b->cap = size;
    return PSDB_S_OK;
}

psdb_hr psdb__baseset_build(psdb_device *dev, const char *sodb_path, psdb__buf *library,
                            psdb__buf *records, psdb__baseset_stats *stats)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *sodb = NULL;
    psdb_pipeline_library *lib = NULL;
    psdb_derivation_writer *drv = NULL;
    bs_collect c = {0};
    bs_base *bases = NULL;
    size_t num_bases = 0;
    psdb__baseset_stats st = {0};
    if (!dev || !sodb_path || !library || !records) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = psdb_sodb_open(sodb_path, &sodb);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_foreach(sodb, collect, &c);
    if (c.oom)
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_device_create_pipeline_library(dev, NULL, 0, &lib);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_create(&drv);
    if (PSDB_FAILED(hr))
        goto cleanup;
    bases = calloc(c.n ? c.n : 1, sizeof(*bases));
    if (!bases) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (size_t i = 0; i < c.n; i++) {
        bs_entry *e = &c.e[i];
        psdb_pipeline *p = NULL;
        psdb_sodb_entry *de = NULL;
        st.entries++;
        int repeated = 0;
        for (size_t j = 0; j < i && !repeated; j++)
            repeated = memcmp(c.e[j].key, e->key, 32) == 0;
        if (e->kind == PSDB_SODB_STATE_OBJECT || repeated) {
            st.skipped++;
            continue;
        }
        hr = psdb_sodb_decode(e->kind, e->desc, e->size, &de);
        if (PSDB_FAILED(hr))
            goto cleanup;
        if (e->kind == PSDB_SODB_COMPUTE) {
            hr = psdb_device_create_compute_pipeline(dev, de->compute, &p);
            if (PSDB_SUCCEEDED(hr))
                hr = store(lib, e->key, p);
            psdb_pipeline_release(p);
            psdb_sodb_entry_release(de);
            if (PSDB_FAILED(hr))
                goto cleanup;
            st.compute++;
            continue;
        }
        uint8_t bkey[32];
        st.graphics++;
        hr = psdb_derivation_base_key(de->graphics, bkey);
        if (PSDB_FAILED(hr)) {
            psdb_sodb_entry_release(de);
            goto cleanup;
        }
        size_t b = 0;
        while (b < num_bases && memcmp(bases[b].base_key, bkey, 32) != 0)
            b++;
        if (b == num_bases) {
            hr = psdb_device_create_graphics_pipeline(dev, de->graphics, &p);
            if (PSDB_SUCCEEDED(hr))
                hr = store(lib, e->key, p);
            if (PSDB_SUCCEEDED(hr))
                hr = psdb_derivation_writer_add_base(drv, e->key);
            psdb_pipeline_release(p);
            if (PSDB_FAILED(hr)) {
                psdb_sodb_entry_release(de);
                goto cleanup;
            }
            memcpy(bases[b].base_key, bkey, 32);
            memcpy(bases[b].key, e->key, 32);
            bases[b].entry = de;
            num_bases++;
            st.bases++;
            continue;
        }
        /* A derivation: the states that differ from the base's. */
        psdb_derivation d;
        hr = psdb_derivation_diff(bases[b].entry->graphics, de->graphics, &d);
        psdb_sodb_entry_release(de);
        if (PSDB_FAILED(hr))
            goto cleanup;
        memcpy(d.key, e->key, 32);
        memcpy(d.base_key, bases[b].key, 32);
        hr = psdb_derivation_writer_add(drv, &d);
        if (PSDB_FAILED(hr))
            goto cleanup;
        st.derived++;
    }
    hr = sized(library, psdb_pipeline_library_get_serialized_size(lib));
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_pipeline_library_serialize(lib, library->data, library->len);
    if (PSDB_SUCCEEDED(hr))
        hr = sized(records, psdb_derivation_writer_get_serialized_size(drv));
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_serialize(drv, records->data, records->len);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (stats)
        *stats = st;
cleanup:
    for (size_t i = 0; i < num_bases; i++)
        psdb_sodb_entry_release(bases[i].entry);
    free(bases);
    for (size_t i = 0; i < c.n; i++)
        free(c.e[i].desc);
    free(c.e);
    psdb_derivation_writer_release(drv);
    psdb_pipeline_library_release(lib);
    psdb_sodb_release(sodb);
    return hr;
}
