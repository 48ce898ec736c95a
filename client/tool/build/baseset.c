/* baseset.c - base-set packaging: the PSOs of an SODB reduced to the bases a derived PSO cannot
 * avoid (seed 003, "serialized + derived together"), stored in a pipeline library, and derivation
 * records for the rest. */
#include "build/baseset.h"

#include <stdlib.h>
#include <string.h>

#include "driver/compiler.h"
#include "format/desc.h"
#include "runtime/pipeline_library.h"

/* ---- state encodings (schema/PIPELINE_LIBRARY.md, "Derivation records") ---------------------- */

#define DS_WORDS 14u
#define RS_WORDS 11u
#define BLEND_WORDS 82u
static const uint32_t state_words[5] = {DS_WORDS, RS_WORDS, BLEND_WORDS, 1u, 2u};

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Writes state `type` of d as its words. */
static void state_words_of(const psdb_graphics_pipeline_desc *d, uint32_t type, uint32_t *w)
{
    uint32_t n = 0;
    switch (type) {
    case PSDB_DERIVED_STATE_DEPTH_STENCIL: {
        const psdb_depth_stencil_desc *x = &d->depth_stencil;
        const psdb_depth_stencilop_desc *f[2] = {&x->front_face, &x->back_face};
        w[n++] = (uint32_t)x->depth_enable;
        w[n++] = x->depth_write_mask;
        w[n++] = x->depth_func;
        w[n++] = (uint32_t)x->stencil_enable;
        w[n++] = x->stencil_read_mask;
        w[n++] = x->stencil_write_mask;
        for (int i = 0; i < 2; i++) {
            w[n++] = f[i]->stencil_fail_op;
            w[n++] = f[i]->stencil_depth_fail_op;
            w[n++] = f[i]->stencil_pass_op;
            w[n++] = f[i]->stencil_func;
        }
        break;
    }
    case PSDB_DERIVED_STATE_RASTERIZER: {
        const psdb_rasterizer_desc *x = &d->rasterizer;
        w[n++] = x->fill_mode;
        w[n++] = x->cull_mode;
        w[n++] = (uint32_t)x->front_counter_clockwise;
        w[n++] = (uint32_t)x->depth_bias;
        w[n++] = fbits(x->depth_bias_clamp);
        w[n++] = fbits(x->slope_scaled_depth_bias);
        w[n++] = (uint32_t)x->depth_clip_enable;
        w[n++] = (uint32_t)x->multisample_enable;
        w[n++] = (uint32_t)x->antialiased_line_enable;
        w[n++] = x->forced_sample_count;
        w[n++] = x->conservative_raster;
        break;
    }
    case PSDB_DERIVED_STATE_BLEND: {
        const psdb_blend_desc *x = &d->blend;
        w[n++] = (uint32_t)x->alpha_to_coverage_enable;
        w[n++] = (uint32_t)x->independent_blend_enable;
        for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
            const psdb_render_target_blend_desc *r = &x->render_target[i];
            w[n++] = (uint32_t)r->blend_enable;
            w[n++] = (uint32_t)r->logic_op_enable;
            w[n++] = r->src_blend;
            w[n++] = r->dest_blend;
            w[n++] = r->blend_op;
            w[n++] = r->src_blend_alpha;
            w[n++] = r->dest_blend_alpha;
            w[n++] = r->blend_op_alpha;
            w[n++] = r->logic_op;
            w[n++] = r->render_target_write_mask;
        }
        break;
    }
    case PSDB_DERIVED_STATE_SAMPLE_MASK:
        w[n++] = d->sample_mask;
        break;
    default:
        w[n++] = d->shader_limits.max_waves_per_cu;
        w[n++] = d->shader_limits.cu_enable_mask;
        break;
    }
    (void)n;
}

/* Reads state `type` from words into x. */
static void state_from_words(uint32_t type, const uint8_t *p, psdb_derived_graphics_state_desc *x)
{
    uint32_t w[BLEND_WORDS];
    for (uint32_t i = 0; i < state_words[type]; i++)
        w[i] = psdb__le32(p + 4u * i);
    uint32_t n = 0;
    memset(x, 0, sizeof(*x));
    x->type = type;
    switch (type) {
    case PSDB_DERIVED_STATE_DEPTH_STENCIL: {
        psdb_depth_stencil_desc *d = &x->depth_stencil;
        psdb_depth_stencilop_desc *f[2] = {&d->front_face, &d->back_face};
        d->depth_enable = (int)w[n++];
        d->depth_write_mask = w[n++];
        d->depth_func = w[n++];
        d->stencil_enable = (int)w[n++];
        d->stencil_read_mask = w[n++];
        d->stencil_write_mask = w[n++];
        for (int i = 0; i < 2; i++) {
            f[i]->stencil_fail_op = w[n++];
            f[i]->stencil_depth_fail_op = w[n++];
            f[i]->stencil_pass_op = w[n++];
            f[i]->stencil_func = w[n++];
        }
        break;
    }
    case PSDB_DERIVED_STATE_RASTERIZER: {
        psdb_rasterizer_desc *r = &x->rasterizer;
        r->fill_mode = w[n++];
        r->cull_mode = w[n++];
        r->front_counter_clockwise = (int)w[n++];
        r->depth_bias = (int32_t)w[n++];
        r->depth_bias_clamp = bitsf(w[n++]);
        r->slope_scaled_depth_bias = bitsf(w[n++]);
        r->depth_clip_enable = (int)w[n++];
        r->multisample_enable = (int)w[n++];
        r->antialiased_line_enable = (int)w[n++];
        r->forced_sample_count = w[n++];
        r->conservative_raster = w[n++];
        break;
    }
    case PSDB_DERIVED_STATE_BLEND: {
        psdb_blend_desc *b = &x->blend;
        b->alpha_to_coverage_enable = (int)w[n++];
        b->independent_blend_enable = (int)w[n++];
        for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
            psdb_render_target_blend_desc *r = &b->render_target[i];
            r->blend_enable = (int)w[n++];
            r->logic_op_enable = (int)w[n++];
            r->src_blend = w[n++];
            r->dest_blend = w[n++];
            r->blend_op = w[n++];
            r->src_blend_alpha = w[n++];
            r->dest_blend_alpha = w[n++];
            r->blend_op_alpha = w[n++];
            r->logic_op = w[n++];
            r->render_target_write_mask = w[n++];
        }
        break;
    }
    case PSDB_DERIVED_STATE_SAMPLE_MASK:
        x->sample_mask = w[n++];
        break;
    default:
        x->shader_limits.max_waves_per_cu = w[n++];
        x->shader_limits.cu_enable_mask = w[n++];
        break;
    }
}

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
        uint32_t mask = 0, bw[BLEND_WORDS], dw[BLEND_WORDS];
        for (uint32_t t = 0; t < 5; t++) {
            state_words_of(bases[b].desc, t, bw);
            state_words_of(gd, t, dw);
            if (memcmp(bw, dw, state_words[t] * 4u) != 0)
                mask |= 1u << t;
        }
        psdb__buf_append(&recs, e->key, 32);
        psdb__buf_u32(&recs, (uint32_t)b);
        psdb__buf_u32(&recs, mask);
        for (uint32_t t = 0; t < 5; t++) {
            if (!(mask & (1u << t)))
                continue;
            state_words_of(gd, t, dw);
            for (uint32_t k = 0; k < state_words[t]; k++)
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

/* ---- reading records ------------------------------------------------------------------------- */

/* Size of one record at p (with `left` bytes available), 0 when malformed. */
static size_t record_size(const uint8_t *p, size_t left, uint32_t num_bases)
{
    if (left < 40)
        return 0;
    uint32_t base = psdb__le32(p + 32), mask = psdb__le32(p + 36);
    if (base >= num_bases || (mask & ~0x1Fu))
        return 0;
    size_t n = 40;
    for (uint32_t t = 0; t < 5; t++)
        if (mask & (1u << t))
            n += 4u * state_words[t];
    return n <= left ? n : 0;
}

psdb_hr psdb_derivation_records_validate(const void *data, size_t size, uint32_t *count)
{
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !count || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = PSDB_E_DRIVER_VERSION_MISMATCH;
        goto cleanup;
    }
    if (psdb__le64(b + 24) != 0 || psdb__crc32(0, b + PSDB__DRV_HEADER_SIZE,
                                               size - PSDB__DRV_HEADER_SIZE) != psdb__le32(b + 12))
        goto cleanup;
    uint64_t nb = psdb__le32(b + 16), nr = psdb__le32(b + 20);
    size_t pos = PSDB__DRV_HEADER_SIZE;
    if (nb * 32u > size - pos)
        goto cleanup;
    pos += (size_t)nb * 32u;
    for (uint64_t i = 0; i < nr; i++) {
        size_t n = record_size(b + pos, size - pos, (uint32_t)nb);
        if (!n)
            goto cleanup;
        pos += n;
    }
    if (pos != size)
        goto cleanup;
    *count = (uint32_t)nr;
    hr = PSDB_S_OK;
cleanup:
    return hr;
}

psdb_hr psdb_derivation_records_next(const void *data, size_t size, size_t *cursor,
                                     psdb_derivation *out)
{
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !cursor || !out || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = PSDB_E_DRIVER_VERSION_MISMATCH;
        goto cleanup;
    }
    uint64_t nb = psdb__le32(b + 16);
    size_t first = PSDB__DRV_HEADER_SIZE + (size_t)nb * 32u;
    if (nb * 32u > size - PSDB__DRV_HEADER_SIZE)
        goto cleanup;
    size_t pos = *cursor ? *cursor : first;
    if (pos < first || pos > size)
        goto cleanup;
    if (pos == size) {
        hr = PSDB_S_FALSE;
        goto cleanup;
    }
    size_t n = record_size(b + pos, size - pos, (uint32_t)nb);
    if (!n)
        goto cleanup;
    const uint8_t *r = b + pos;
    memset(out, 0, sizeof(*out));
    memcpy(out->key, r, 32);
    memcpy(out->base_key, b + PSDB__DRV_HEADER_SIZE + 32u * psdb__le32(r + 32), 32);
    uint32_t mask = psdb__le32(r + 36);
    const uint8_t *p = r + 40;
    for (uint32_t t = 0; t < 5; t++) {
        if (!(mask & (1u << t)))
            continue;
        state_from_words(t, p, &out->descs[out->count++]);
        p += 4u * state_words[t];
    }
    *cursor = pos + n;
    hr = PSDB_S_OK;
cleanup:
    return hr;
}
