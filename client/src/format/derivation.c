/* derivation.c - derivation records (schema/PIPELINE_LIBRARY.md, "Derivation records"): the state
 * encodings a record carries and the public reader (psdb_derivation_records_validate / _next). The
 * tool's base-set builder (client/tool/build/baseset.c) writes them with the same encodings. */
#include "format/derivation.h"

#include <string.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"

/* ---- state encodings (schema/PIPELINE_LIBRARY.md, "Derivation records") ---------------------- */

#define DS_WORDS 14u
#define RS_WORDS 11u
#define BLEND_WORDS PSDB__DRV_MAX_STATE_WORDS
const uint32_t psdb__derivation_state_word_count[5] = {DS_WORDS, RS_WORDS, BLEND_WORDS, 1u, 2u};

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
void psdb__derivation_state_words(const psdb_graphics_pipeline_desc *d, uint32_t type, uint32_t *w)
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
    for (uint32_t i = 0; i < psdb__derivation_state_word_count[type]; i++)
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
            n += 4u * psdb__derivation_state_word_count[t];
    return n <= left ? n : 0;
}

psdb_hr psdb_derivation_records_validate(const void *data, size_t size, uint32_t *count)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !count || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = psdb__error_const(
            PSDB_E_DRIVER_VERSION_MISMATCH,
            "psdb_derivation_records_validate: derivation records of another format version");
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
    if (hr == PSDB_E_INVALIDARG)
        psdb__error_const(hr, "psdb_derivation_records_validate: NULL argument, or damaged "
                              "derivation records (magic, "
                              "CRC, a count or a record size)");
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_derivation_records_next(const void *data, size_t size, size_t *cursor,
                                     psdb_derivation *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !cursor || !out || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = psdb__error_const(
            PSDB_E_DRIVER_VERSION_MISMATCH,
            "psdb_derivation_records_next: derivation records of another format version");
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
        p += 4u * psdb__derivation_state_word_count[t];
    }
    *cursor = pos + n;
    hr = PSDB_S_OK;
cleanup:
    if (hr == PSDB_E_INVALIDARG)
        psdb__error_const(
            hr,
            "psdb_derivation_records_next: NULL argument, or damaged derivation records (magic, "
            "CRC, a count or a record size)");
    return psdb__error_ret(hr, err_mark, __func__);
}
