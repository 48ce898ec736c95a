/* planner.c - the reference compiler's planner: validation, export types (MODEL V3), and the
 * units of a creation with their value keys (schema/COMPILER.md). */
#include "driver/compiler.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/desc.h"
#include "common/error.h"

static const char KEY_TAG[12] = {'p', 's', 'd', 'b', '.', 'u', 'n', 'i', 't', '.', 'v', '1'};

/* ---- Formats (MODEL V3) ---------------------------------------------------------------------- */

enum fmt_class { FC_NONE = 0, FC_UNORM, FC_SNORM, FC_UINT, FC_SINT, FC_FLOAT };

typedef struct fmt_info {
    uint32_t format;
    uint8_t cls;
    uint8_t bits;     /* largest channel width */
    uint8_t channels; /* PSDB__COMP_* mask */
} fmt_info;

#define RGBA 15u
#define RGB 7u
#define RG 3u
#define R_ 1u

static const fmt_info FORMATS[] = {
    {PSDB_FORMAT_R32G32B32A32_FLOAT, FC_FLOAT, 32, RGBA},
    {PSDB_FORMAT_R32G32B32A32_UINT, FC_UINT, 32, RGBA},
    {PSDB_FORMAT_R32G32B32A32_SINT, FC_SINT, 32, RGBA},
    {PSDB_FORMAT_R32G32B32_FLOAT, FC_FLOAT, 32, RGB},
    {PSDB_FORMAT_R16G16B16A16_FLOAT, FC_FLOAT, 16, RGBA},
    {PSDB_FORMAT_R16G16B16A16_UNORM, FC_UNORM, 16, RGBA},
    {PSDB_FORMAT_R16G16B16A16_UINT, FC_UINT, 16, RGBA},
    {PSDB_FORMAT_R16G16B16A16_SNORM, FC_SNORM, 16, RGBA},
    {PSDB_FORMAT_R16G16B16A16_SINT, FC_SINT, 16, RGBA},
    {PSDB_FORMAT_R32G32_FLOAT, FC_FLOAT, 32, RG},
    {PSDB_FORMAT_R32G32_UINT, FC_UINT, 32, RG},
    {PSDB_FORMAT_R32G32_SINT, FC_SINT, 32, RG},
    {PSDB_FORMAT_R10G10B10A2_UNORM, FC_UNORM, 10, RGBA},
    {PSDB_FORMAT_R10G10B10A2_UINT, FC_UINT, 10, RGBA},
    {PSDB_FORMAT_R11G11B10_FLOAT, FC_FLOAT, 11, RGB},
    {PSDB_FORMAT_R8G8B8A8_UNORM, FC_UNORM, 8, RGBA},
    {PSDB_FORMAT_R8G8B8A8_UNORM_SRGB, FC_UNORM, 8, RGBA},
    {PSDB_FORMAT_R8G8B8A8_UINT, FC_UINT, 8, RGBA},
    {PSDB_FORMAT_R8G8B8A8_SNORM, FC_SNORM, 8, RGBA},
    {PSDB_FORMAT_R8G8B8A8_SINT, FC_SINT, 8, RGBA},
    {PSDB_FORMAT_R16G16_FLOAT, FC_FLOAT, 16, RG},
    {PSDB_FORMAT_R16G16_UNORM, FC_UNORM, 16, RG},
    {PSDB_FORMAT_R16G16_UINT, FC_UINT, 16, RG},
    {PSDB_FORMAT_R16G16_SNORM, FC_SNORM, 16, RG},
    {PSDB_FORMAT_R16G16_SINT, FC_SINT, 16, RG},
    {PSDB_FORMAT_R32_FLOAT, FC_FLOAT, 32, R_},
    {PSDB_FORMAT_R32_UINT, FC_UINT, 32, R_},
    {PSDB_FORMAT_R32_SINT, FC_SINT, 32, R_},
    {PSDB_FORMAT_R8G8_UNORM, FC_UNORM, 8, RG},
    {PSDB_FORMAT_R8G8_UINT, FC_UINT, 8, RG},
    {PSDB_FORMAT_R8G8_SNORM, FC_SNORM, 8, RG},
    {PSDB_FORMAT_R8G8_SINT, FC_SINT, 8, RG},
    {PSDB_FORMAT_R16_FLOAT, FC_FLOAT, 16, R_},
    {PSDB_FORMAT_R16_UNORM, FC_UNORM, 16, R_},
    {PSDB_FORMAT_R16_UINT, FC_UINT, 16, R_},
    {PSDB_FORMAT_R16_SNORM, FC_SNORM, 16, R_},
    {PSDB_FORMAT_R16_SINT, FC_SINT, 16, R_},
    {PSDB_FORMAT_R8_UNORM, FC_UNORM, 8, R_},
    {PSDB_FORMAT_R8_UINT, FC_UINT, 8, R_},
    {PSDB_FORMAT_R8_SNORM, FC_SNORM, 8, R_},
    {PSDB_FORMAT_R8_SINT, FC_SINT, 8, R_},
    {PSDB_FORMAT_B8G8R8A8_UNORM, FC_UNORM, 8, RGBA},
};

static const fmt_info *color_format(uint32_t format)
{
    for (size_t i = 0; i < sizeof(FORMATS) / sizeof(FORMATS[0]); i++)
        if (FORMATS[i].format == format)
            return &FORMATS[i];
    return NULL;
}

static int is_depth_format(uint32_t format)
{
    return format == PSDB_FORMAT_D32_FLOAT || format == PSDB_FORMAT_D24_UNORM_S8_UINT ||
           format == PSDB_FORMAT_D16_UNORM;
}

static int uses_src_alpha(uint32_t factor)
{
    return factor == PSDB_BLEND_SRC_ALPHA || factor == PSDB_BLEND_INV_SRC_ALPHA ||
           factor == PSDB_BLEND_SRC_ALPHA_SAT;
}

void psdb__export_types(const psdb_graphics_pipeline_desc *d,
                        psdb__export out[PSDB_MAX_RENDER_TARGETS])
{
    memset(out, 0, sizeof(psdb__export) * PSDB_MAX_RENDER_TARGETS);
    if (!d || !d->ps.code || d->ps.size == 0)
        return;
    for (uint32_t i = 0; i < PSDB_MAX_RENDER_TARGETS && i < d->num_render_targets; i++) {
        const fmt_info *f = color_format(d->rtv_formats[i]);
        uint32_t n = d->ps_outputs[i].components;
        if (!f || n == 0)
            continue;
        const psdb_render_target_blend_desc *rt =
            &d->blend.render_target[d->blend.independent_blend_enable ? i : 0];
        uint32_t written = n >= 4 ? RGBA : (1u << n) - 1u;
        uint32_t mask = rt->render_target_write_mask ? rt->render_target_write_mask & RGBA : RGBA;
        int blend = rt->blend_enable && f->cls != FC_UINT && f->cls != FC_SINT;
        uint32_t comp = written & f->channels & mask;
        if (blend && (uses_src_alpha(rt->src_blend) || uses_src_alpha(rt->dest_blend) ||
                      uses_src_alpha(rt->src_blend_alpha) || uses_src_alpha(rt->dest_blend_alpha)))
            comp |= written & PSDB__COMP_A;
        if (i == 0 && d->blend.alpha_to_coverage_enable)
            comp |= written & PSDB__COMP_A;
        if (comp == 0)
            continue;
        uint32_t type = PSDB__EXPORT_NONE;
        if (blend) {
            type = f->bits <= 16 ? PSDB__EXPORT_FLOAT16 : PSDB__EXPORT_FLOAT32;
        } else {
            switch (f->cls) {
            case FC_UNORM:
                type = PSDB__EXPORT_UNORM16;
                break;
            case FC_SNORM:
                type = PSDB__EXPORT_SNORM16;
                break;
            case FC_UINT:
                type = f->bits <= 16 ? PSDB__EXPORT_UINT16 : PSDB__EXPORT_UINT32;
                break;
            case FC_SINT:
                type = f->bits <= 16 ? PSDB__EXPORT_SINT16 : PSDB__EXPORT_SINT32;
                break;
            default:
                type = f->bits <= 16 ? PSDB__EXPORT_FLOAT16 : PSDB__EXPORT_FLOAT32;
                break;
            }
        }
        out[i].type = type;
        out[i].components = comp;
    }
}

/* ---- Validation ------------------------------------------------------------------------------ */

static int shader_present(const psdb_shader *s)
{
    return s->code != NULL || s->size != 0;
}

static int shader_bad(const psdb_shader *s)
{
    return (s->code && s->size == 0) || (!s->code && s->size != 0);
}

static psdb_hr validate_graphics(const psdb_graphics_pipeline_desc *d)
{
    if (!d->root_signature || d->root_signature_size == 0)
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "graphics pipeline description: no root signature");
    if (!shader_present(&d->vs) || shader_bad(&d->vs) || shader_bad(&d->ps) || shader_bad(&d->ds) ||
        shader_bad(&d->hs) || shader_bad(&d->gs))
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "graphics pipeline description: no vertex shader, or a shader "
                                 "with code but no size (or a size but no code)");
    if (shader_present(&d->hs) != shader_present(&d->ds))
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "graphics pipeline description: a hull shader without domain shader or the reverse");
    if (d->num_render_targets > PSDB_MAX_RENDER_TARGETS)
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "graphics pipeline description: more render targets than PSDB_MAX_RENDER_TARGETS");
    for (uint32_t i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        uint32_t f = d->rtv_formats[i];
        if (f == PSDB_FORMAT_UNKNOWN)
            continue;
        if (i >= d->num_render_targets || !color_format(f))
            return psdb__error_const(PSDB_E_INVALIDARG,
                                     "graphics pipeline description: a render target format beyond "
                                     "num_render_targets or not a color format");
    }
    if (d->dsv_format != PSDB_FORMAT_UNKNOWN && !is_depth_format(d->dsv_format))
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "graphics pipeline description: a depth-stencil format that is not a depth format");
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++)
        if (d->ps_outputs[i].components > 4 || d->ps_outputs[i].type > PSDB_COMPONENT_SINT)
            return psdb__error_const(PSDB_E_INVALIDARG,
                                     "graphics pipeline description: a pixel shader output with "
                                     "more than 4 components or an unknown type");
    const psdb_input_layout_desc *il = &d->input_layout;
    if (il->num_elements && !il->elements)
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "graphics pipeline description: input layout elements NULL with a count");
    for (uint32_t i = 0; i < il->num_elements; i++)
        if (!il->elements[i].semantic_name)
            return psdb__error_const(
                PSDB_E_INVALIDARG,
                "graphics pipeline description: an input layout element without semantic name");
    const psdb_stream_output_desc *so = &d->stream_output;
    if ((so->num_entries && !so->entries) || (so->num_strides && !so->buffer_strides))
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "graphics pipeline description: stream output entries or strides NULL with a count");
    for (uint32_t i = 0; i < so->num_entries; i++)
        if (!so->entries[i].semantic_name)
            return psdb__error_const(
                PSDB_E_INVALIDARG,
                "graphics pipeline description: a stream output entry without semantic name");
    return PSDB_S_OK;
}

/* ---- Keys ------------------------------------------------------------------------------------ */

static void key_begin(psdb__buf *b, uint32_t kind)
{
    b->len = 0;
    psdb__buf_append(b, KEY_TAG, sizeof(KEY_TAG));
    psdb__buf_u32(b, kind);
}

static void key_bytes(psdb__buf *b, const void *p, size_t n)
{
    /* Sizes were checked by the encoder (< 2^32) before any key is derived. */
    psdb__buf_u32(b, (uint32_t)n);
    psdb__buf_append(b, p, n);
}

static void key_str(psdb__buf *b, const char *s)
{
    key_bytes(b, s, strlen(s));
}

static psdb_hr key_end(psdb__buf *b, uint8_t key[PSDB__KEY_SIZE])
{
    psdb_hr hr = psdb__buf_status(b);
    if (PSDB_SUCCEEDED(hr))
        psdb__sha256(b->data, b->len, key);
    return hr;
}

static psdb__unit *add_unit(psdb__plan *p, uint32_t kind, const void *code, size_t size)
{
    psdb__unit *u = &p->units[p->num_units++];
    memset(u, 0, sizeof(*u));
    u->kind = kind;
    u->code = code;
    u->code_size = size;
    return u;
}

/* The PIPELINE / STATE_OBJECT unit: its code is the state blob, its key covers the group key. */
static psdb_hr add_state_unit(psdb__plan *p, uint32_t kind, psdb__buf *kb)
{
    psdb__unit *u = add_unit(p, kind, p->state.data, p->state.len);
    key_begin(kb, kind);
    psdb__buf_append(kb, p->group_key, PSDB__KEY_SIZE);
    return key_end(kb, u->key);
}

static void plan_reset(psdb__plan *p)
{
    free(p->units);
    psdb__buf_free(&p->state);
    psdb__buf_free(&p->desc);
    free(p->decoded);
    memset(p, 0, sizeof(*p));
}

void psdb__plan_free(psdb__plan *p)
{
    if (p)
        plan_reset(p);
}

psdb_hr psdb__plan_compute(const psdb_compute_pipeline_desc *d, psdb__plan *out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan p = {0};
    psdb__buf enc = {0}, kb = {0};

    if (!out)
        return PSDB_E_INVALIDARG;
    memset(out, 0, sizeof(*out));
    if (!d || !d->root_signature || d->root_signature_size == 0 || !d->cs.code || d->cs.size == 0) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "compute pipeline description: no root signature or no compute shader");
        goto cleanup;
    }
    hr = psdb__desc_encode_compute(d, &enc);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(enc.data, enc.len, p.group_key);
    p.desc = enc; /* kept: creations store it and capture writes it */
    memset(&enc, 0, sizeof(enc));
    hr = psdb__desc_encode_compute_state(d, &p.state);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p.units = calloc(2, sizeof(psdb__unit));
    if (!p.units) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    psdb__unit *cs = add_unit(&p, PSDB__UNIT_CS, d->cs.code, d->cs.size);
    key_begin(&kb, PSDB__UNIT_CS);
    key_bytes(&kb, d->cs.code, d->cs.size);
    key_bytes(&kb, d->root_signature, d->root_signature_size);
    hr = key_end(&kb, cs->key);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = add_state_unit(&p, PSDB__UNIT_PIPELINE, &kb);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = p;
    memset(&p, 0, sizeof(p));
cleanup:
    plan_reset(&p);
    psdb__buf_free(&enc);
    psdb__buf_free(&kb);
    return hr;
}

psdb_hr psdb__plan_graphics(const psdb_graphics_pipeline_desc *d, psdb__plan *out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan p = {0};
    psdb__buf enc = {0}, kb = {0};
    psdb__export exports[PSDB_MAX_RENDER_TARGETS];

    if (!out)
        return PSDB_E_INVALIDARG;
    memset(out, 0, sizeof(*out));
    if (!d) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = validate_graphics(d);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__desc_encode_graphics(d, &enc);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(enc.data, enc.len, p.group_key);
    p.desc = enc; /* kept: creations store it and capture writes it */
    memset(&enc, 0, sizeof(enc));
    hr = psdb__desc_encode_graphics_state(d, &p.state);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p.units = calloc(6, sizeof(psdb__unit));
    if (!p.units) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    psdb__export_types(d, exports);

    const struct {
        uint32_t kind;
        const psdb_shader *s;
    } stages[] = {{PSDB__UNIT_VS, &d->vs},
                  {PSDB__UNIT_PS, &d->ps},
                  {PSDB__UNIT_DS, &d->ds},
                  {PSDB__UNIT_HS, &d->hs},
                  {PSDB__UNIT_GS, &d->gs}};
    uint32_t last_pre_raster = shader_present(&d->gs)   ? PSDB__UNIT_GS
                               : shader_present(&d->ds) ? PSDB__UNIT_DS
                                                        : PSDB__UNIT_VS;
    for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++) {
        if (!shader_present(stages[i].s))
            continue;
        uint32_t kind = stages[i].kind;
        psdb__unit *u = add_unit(&p, kind, stages[i].s->code, stages[i].s->size);
        key_begin(&kb, kind);
        key_bytes(&kb, u->code, u->code_size);
        key_bytes(&kb, d->root_signature, d->root_signature_size);
        if (kind == PSDB__UNIT_VS) {
            hr = psdb__desc_append_input_layout(&kb, &d->input_layout);
            if (PSDB_FAILED(hr))
                goto cleanup;
        }
        if (kind == PSDB__UNIT_VS || kind == PSDB__UNIT_DS || kind == PSDB__UNIT_GS) {
            psdb__buf_u32(&kb, kind == last_pre_raster ? 1u : 0u);
            if (kind == last_pre_raster) {
                hr = psdb__desc_append_stream_output(&kb, &d->stream_output);
                if (PSDB_FAILED(hr))
                    goto cleanup;
            }
        }
        if (kind == PSDB__UNIT_PS) {
            memcpy(u->exports, exports, sizeof(exports));
            for (int t = 0; t < PSDB_MAX_RENDER_TARGETS; t++) {
                psdb__buf_u32(&kb, exports[t].type);
                psdb__buf_u32(&kb, exports[t].components);
            }
            psdb__buf_u32(&kb, d->blend.alpha_to_coverage_enable ? 1u : 0u);
            psdb__buf_u32(&kb, d->sample_count ? d->sample_count : 1u);
        }
        hr = key_end(&kb, u->key);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = add_state_unit(&p, PSDB__UNIT_PIPELINE, &kb);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = p;
    memset(&p, 0, sizeof(p));
cleanup:
    plan_reset(&p);
    psdb__buf_free(&enc);
    psdb__buf_free(&kb);
    return hr;
}

static psdb_hr validate_state_object(const psdb_state_object_desc *d,
                                     int (*collection_key)(psdb_state_object *, uint8_t[32]),
                                     const psdb_shader **global_rs, uint32_t *num_libraries)
{
    *global_rs = NULL;
    *num_libraries = 0;
    if (d->type != PSDB_STATE_OBJECT_COLLECTION &&
        d->type != PSDB_STATE_OBJECT_RAYTRACING_PIPELINE && d->type != PSDB_STATE_OBJECT_EXECUTABLE)
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "state object description: unknown state object type");
    if (d->num_subobjects && !d->subobjects)
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "state object description: subobjects NULL with a count");
    for (uint32_t i = 0; i < d->num_subobjects; i++) {
        const psdb_state_subobject *so = &d->subobjects[i];
        if (!so->desc && so->type != PSDB_SUBOBJECT_PSDB)
            return psdb__error_const(PSDB_E_INVALIDARG,
                                     "state object description: a subobject without desc");
        switch (so->type) {
        case PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE: {
            const psdb_shader *rs = so->desc;
            if (*global_rs || !rs->code || rs->size == 0)
                return psdb__error_const(
                    PSDB_E_INVALIDARG,
                    "state object description: a second or empty global root signature");
            *global_rs = rs;
            break;
        }
        case PSDB_SUBOBJECT_DXIL_LIBRARY: {
            const psdb_dxil_library_desc *lib = so->desc;
            if (!lib->library.code || lib->library.size == 0 || (lib->num_exports && !lib->exports))
                return psdb__error_const(PSDB_E_INVALIDARG,
                                         "state object description: a DXIL library without code, "
                                         "or exports NULL with a count");
            for (uint32_t j = 0; j < lib->num_exports; j++)
                if (!lib->exports[j])
                    return psdb__error_const(
                        PSDB_E_INVALIDARG,
                        "state object description: a DXIL library export without name");
            (*num_libraries)++;
            break;
        }
        case PSDB_SUBOBJECT_EXISTING_COLLECTION: {
            const psdb_existing_collection_desc *c = so->desc;
            uint8_t key[32];
            if (!collection_key || !c->collection || collection_key(c->collection, key) != 0)
                return psdb__error_const(PSDB_E_INVALIDARG,
                                         "state object description: an existing collection that is "
                                         "not a collection of this device");
            break;
        }
        case PSDB_SUBOBJECT_HIT_GROUP: {
            const psdb_hit_group_desc *hg = so->desc;
            if (!hg->name)
                return psdb__error_const(PSDB_E_INVALIDARG,
                                         "state object description: a hit group without name");
            break;
        }
        case PSDB_SUBOBJECT_PSDB:
            break;
        default:
            return psdb__error_const(PSDB_E_INVALIDARG,
                                     "state object description: unknown subobject type");
        }
    }
    return PSDB_S_OK;
}

psdb_hr psdb__plan_state_object_ex(const psdb_state_object_desc *d,
                                   int (*collection_key)(psdb_state_object *so, uint8_t key[32]),
                                   psdb__plan *out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan p = {0};
    psdb__buf enc = {0}, kb = {0};
    const psdb_shader *rs = NULL;
    uint32_t num_libraries = 0;

    if (!out)
        return PSDB_E_INVALIDARG;
    memset(out, 0, sizeof(*out));
    if (!d) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = validate_state_object(d, collection_key, &rs, &num_libraries);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__desc_encode_state_object(d, collection_key, &enc);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(enc.data, enc.len, p.group_key);
    p.desc = enc; /* kept: creations store it and capture writes it */
    memset(&enc, 0, sizeof(enc));
    hr = psdb__desc_encode_state_object_state(d, collection_key, &p.state);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p.units = calloc((size_t)num_libraries + 1, sizeof(psdb__unit));
    if (!p.units) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint32_t i = 0; i < d->num_subobjects; i++) {
        if (d->subobjects[i].type != PSDB_SUBOBJECT_DXIL_LIBRARY)
            continue;
        const psdb_dxil_library_desc *lib = d->subobjects[i].desc;
        psdb__unit *u = add_unit(&p, PSDB__UNIT_LIBRARY, lib->library.code, lib->library.size);
        key_begin(&kb, PSDB__UNIT_LIBRARY);
        key_bytes(&kb, u->code, u->code_size);
        key_bytes(&kb, rs ? rs->code : NULL, rs ? rs->size : 0);
        psdb__buf_u32(&kb, lib->num_exports);
        for (uint32_t j = 0; j < lib->num_exports; j++)
            key_str(&kb, lib->exports[j]);
        hr = key_end(&kb, u->key);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = add_state_unit(&p, PSDB__UNIT_STATE_OBJECT, &kb);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = p;
    memset(&p, 0, sizeof(p));
cleanup:
    plan_reset(&p);
    psdb__buf_free(&enc);
    psdb__buf_free(&kb);
    return hr;
}

psdb_hr psdb__plan_state_object(const psdb_state_object_desc *d, psdb__plan *out)
{
    return psdb__plan_state_object_ex(d, NULL, out);
}

psdb_hr psdb__plan_encoded(uint32_t kind, const void *data, size_t size, psdb__plan *out)
{
    psdb_hr hr = PSDB_S_OK;
    void *decoded = NULL;

    if (!out)
        return PSDB_E_INVALIDARG;
    memset(out, 0, sizeof(*out));
    switch (kind) {
    case PSDB_SODB_COMPUTE: {
        psdb_compute_pipeline_desc *c = NULL;
        hr = psdb__desc_decode_compute(data, size, &c);
        decoded = c;
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__plan_compute(c, out);
        break;
    }
    case PSDB_SODB_GRAPHICS: {
        psdb_graphics_pipeline_desc *g = NULL;
        hr = psdb__desc_decode_graphics(data, size, &g);
        decoded = g;
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__plan_graphics(g, out);
        break;
    }
    case PSDB_SODB_STATE_OBJECT: {
        psdb_state_object_desc *s = NULL;
        hr = psdb__desc_decode_state_object(data, size, &s);
        decoded = s;
        if (PSDB_SUCCEEDED(hr))
            hr = psdb__plan_state_object_ex(s, psdb__desc_decoded_collection_key, out);
        break;
    }
    default:
        hr = PSDB_E_CACHE_CORRUPT;
        break;
    }
    if (PSDB_SUCCEEDED(hr)) {
        out->decoded = decoded;
        decoded = NULL;
    }
    free(decoded);
    return hr;
}
