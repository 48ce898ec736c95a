/* baseset.c - base-set packaging: the PSOs of an SODB reduced to the bases a derived PSO cannot
 * avoid (seed 003, "serialized + derived together"), stored in a pipeline library, and derivation
 * records for the rest. */
#include "build/baseset.h"

#include <stdlib.h>
#include <string.h>

#include "driver/compiler.h"
#include "format/derivation.h"
#include "format/desc.h"
#include "runtime/pipeline_library.h"

/* ---- base keys ------------------------------------------------------------------------------- */

psdb_hr psdb__baseset_key(const psdb_graphics_pipeline_desc *d, uint8_t key[32])
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf b = {0};
    psdb_graphics_pipeline_desc c = *d;
    psdb__export ex[PSDB_MAX_RENDER_TARGETS];
    memset(&c.depth_stencil, 0, sizeof(c.depth_stencil));
    memset(&c.rasterizer, 0, sizeof(c.rasterizer));
    memset(&c.blend, 0, sizeof(c.blend));
    memset(&c.shader_limits, 0, sizeof(c.shader_limits));
    c.sample_mask = 0;
    hr = psdb__desc_encode_graphics(&c, &b);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__export_types(d, ex);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        psdb__buf_u32(&b, ex[i].type);
        psdb__buf_u32(&b, ex[i].components);
    }
    hr = psdb__buf_status(&b);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(b.data, b.len, key);
cleanup:
    psdb__buf_free(&b);
    return hr;
}

/* ---- building -------------------------------------------------------------------------------- */

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
    psdb_graphics_pipeline_desc *desc; /* decoded, owned */
} bs_base;

static psdb_hr store(psdb_pipeline_library *lib, const uint8_t key[32], psdb_pipeline *p)
{
    char name[65];
    psdb__hex(key, 32, name);
    return psdb_pipeline_library_store_pipeline(lib, name, p);
}

psdb_hr psdb__baseset_build(psdb_device *dev, const char *sodb_path, psdb__buf *library,
                            psdb__buf *records, psdb__baseset_stats *stats)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *sodb = NULL;
    psdb_pipeline_library *lib = NULL;
    bs_collect c = {0};
    bs_base *bases = NULL;
    size_t num_bases = 0;
    psdb__buf recs = {0};
    uint32_t num_records = 0;
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
        st.entries++;
        int repeated = 0;
        for (size_t j = 0; j < i && !repeated; j++)
            repeated = memcmp(c.e[j].key, e->key, 32) == 0;
        if (e->kind == PSDB_SODB_STATE_OBJECT || repeated) {
            st.skipped++;
            continue;
        }
        if (e->kind == PSDB_SODB_COMPUTE) {
            psdb_compute_pipeline_desc *cd = NULL;
            hr = psdb__desc_decode_compute(e->desc, e->size, &cd);
            if (PSDB_SUCCEEDED(hr))
                hr = psdb_device_create_compute_pipeline(dev, cd, &p);
            if (PSDB_SUCCEEDED(hr))
                hr = store(lib, e->key, p);
            psdb_pipeline_release(p);
            free(cd);
            if (PSDB_FAILED(hr))
                goto cleanup;
            st.compute++;
            continue;
        }
        psdb_graphics_pipeline_desc *gd = NULL;
        uint8_t bkey[32];
        st.graphics++;
        hr = psdb__desc_decode_graphics(e->desc, e->size, &gd);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__baseset_key(gd, bkey);
        if (PSDB_FAILED(hr)) {
            free(gd);
            goto cleanup;
        }
        size_t b = 0;
        while (b < num_bases && memcmp(bases[b].base_key, bkey, 32) != 0)
            b++;
        if (b == num_bases) {
            hr = psdb_device_create_graphics_pipeline(dev, gd, &p);
            if (PSDB_SUCCEEDED(hr))
                hr = store(lib, e->key, p);
            psdb_pipeline_release(p);
            if (PSDB_FAILED(hr)) {
                free(gd);
                goto cleanup;
            }
            memcpy(bases[b].base_key, bkey, 32);
            memcpy(bases[b].key, e->key, 32);
            bases[b].desc = gd;
            num_bases++;
            st.bases++;
            continue;
        }
        /* A derivation: the states that differ from the base's. */
        uint32_t mask = 0, bw[PSDB__DRV_MAX_STATE_WORDS], dw[PSDB__DRV_MAX_STATE_WORDS];
        for (uint32_t t = 0; t < 5; t++) {
            psdb__derivation_state_words(bases[b].desc, t, bw);
            psdb__derivation_state_words(gd, t, dw);
            if (memcmp(bw, dw, psdb__derivation_state_word_count[t] * 4u) != 0)
                mask |= 1u << t;
        }
        psdb__buf_append(&recs, e->key, 32);
        psdb__buf_u32(&recs, (uint32_t)b);
        psdb__buf_u32(&recs, mask);
        for (uint32_t t = 0; t < 5; t++) {
            if (!(mask & (1u << t)))
                continue;
            psdb__derivation_state_words(gd, t, dw);
            for (uint32_t k = 0; k < psdb__derivation_state_word_count[t]; k++)
                psdb__buf_u32(&recs, dw[k]);
        }
        free(gd);
        num_records++;
        st.derived++;
    }
    hr = psdb__buf_status(&recs);
    if (PSDB_FAILED(hr))
        goto cleanup;
    size_t lib_size = psdb_pipeline_library_get_serialized_size(lib);
    library->data = malloc(lib_size);
    if (!library->data) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    library->len = library->cap = lib_size;
    hr = psdb_pipeline_library_serialize(lib, library->data, lib_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__buf_append(records, PSDB__DRV_MAGIC, 8);
    psdb__buf_u32(records, PSDB__DRV_VERSION);
    psdb__buf_u32(records, 0); /* CRC-32, set below */
    psdb__buf_u32(records, (uint32_t)num_bases);
    psdb__buf_u32(records, num_records);
    psdb__buf_u64(records, 0);
    for (size_t b = 0; b < num_bases; b++)
        psdb__buf_append(records, bases[b].key, 32);
    psdb__buf_append(records, recs.data, recs.len);
    hr = psdb__buf_status(records);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__put_le32(records->data + 12, psdb__crc32(0, records->data + PSDB__DRV_HEADER_SIZE,
                                                   records->len - PSDB__DRV_HEADER_SIZE));
    if (stats)
        *stats = st;
cleanup:
    for (size_t i = 0; i < num_bases; i++)
        free(bases[i].desc);
    free(bases);
    for (size_t i = 0; i < c.n; i++)
        free(c.e[i].desc);
    free(c.e);
    psdb__buf_free(&recs);
    psdb_pipeline_library_release(lib);
    psdb_sodb_release(sodb);
    return hr;
}
