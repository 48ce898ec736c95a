/* derived_pso.c - derived graphics PSOs (MODEL V): a variant of a base PSO that differs only in
 * hardware state, sharing the base's compiled shaders, so it compiles nothing and looks nothing up.
 *
 * DESIGN
 * The derived PSO's description is the base's with the overridden states replaced; it is kept in
 * the same form as the base's (full, or compact when the base was deserialized). The shaders are
 * the base's: their export instructions were patched for the base's export types (V3), so every
 * export the derived state needs must equal the base's (V4), else the derivation is refused with a
 * validation message. The derived PSO holds a reference to its base and the base's association
 * (object-associated lookups go where the base's compiled code came from). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "runtime/pipeline.h"
#include "common/error.h"

static const char *export_name(uint32_t t)
{
    static const char *const names[] = {"NONE",    "UNORM16", "SNORM16", "UINT16", "SINT16",
                                        "FLOAT16", "UINT32",  "SINT32",  "FLOAT32"};
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

static void mask_name(uint32_t m, char out[5])
{
    size_t n = 0;
    if (m & PSDB__COMP_R)
        out[n++] = 'R';
    if (m & PSDB__COMP_G)
        out[n++] = 'G';
    if (m & PSDB__COMP_B)
        out[n++] = 'B';
    if (m & PSDB__COMP_A)
        out[n++] = 'A';
    if (!n)
        out[n++] = '-';
    out[n] = 0;
}

/* V4: the first render target whose export differs, reported through the message callback. */
static int exports_match(psdb_device *dev, const psdb_graphics_pipeline_desc *base,
                         const psdb_graphics_pipeline_desc *derived)
{
    psdb__export be[PSDB_MAX_RENDER_TARGETS], de[PSDB_MAX_RENDER_TARGETS];
    psdb__export_types(base, be);
    psdb__export_types(derived, de);
    for (uint32_t i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        if (be[i].type == de[i].type && be[i].components == de[i].components)
            continue;
        char text[256], bm[5], dm[5];
        mask_name(be[i].components, bm);
        mask_name(de[i].components, dm);
        snprintf(text, sizeof(text),
                 "derived pso: render target %u needs export %s %s but the base's shader exports "
                 "%s %s; derive from a base with the same export",
                 i, export_name(de[i].type), dm, export_name(be[i].type), bm);
        psdb__message(dev, PSDB_MESSAGE_SEVERITY_ERROR, PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH,
                      text);
        return 0;
    }
    return 1;
}

psdb_hr psdb_device_create_derived_graphics_pipeline(psdb_device *dev, psdb_pipeline *base,
                                                     uint32_t count,
                                                     const psdb_derived_graphics_state_desc *descs,
                                                     psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_graphics_pipeline_desc *g = NULL;
    psdb_graphics_pipeline_desc d;
    psdb__buf enc = {0};
    psdb_pipeline *p = NULL;
    uint32_t seen = 0;
    if (out)
        *out = NULL;
    if (!dev || !base || !out || (count && !descs) || base->dev != dev || base->is_compute ||
        !base->desc.len) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_derived_graphics_pipeline: NULL device, base or "
                               "out, descs NULL with a count, or a base that is not a graphics "
                               "pipeline of this device with its description");
        goto cleanup;
    }
    hr = psdb__desc_decode_graphics(base->desc.data, base->desc.len, &g);
    if (PSDB_FAILED(hr))
        goto cleanup;
    d = *g; /* points into g's block for everything an override cannot change (V1) */
    for (uint32_t i = 0; i < count; i++) {
        const psdb_derived_graphics_state_desc *x = &descs[i];
        /* Each state at most once, so the result does not depend on the order of descs. */
        if (x->type > PSDB_DERIVED_STATE_SHADER_LIMITS || (seen & (1u << x->type))) {
            hr = psdb__error_const(PSDB_E_INVALIDARG,
                                   "psdb_device_create_derived_graphics_pipeline: an unknown "
                                   "derived state type, or one given twice");
            goto cleanup;
        }
        seen |= 1u << x->type;
        switch (x->type) {
        case PSDB_DERIVED_STATE_DEPTH_STENCIL:
            d.depth_stencil = x->depth_stencil;
            break;
        case PSDB_DERIVED_STATE_RASTERIZER:
            d.rasterizer = x->rasterizer;
            break;
        case PSDB_DERIVED_STATE_BLEND:
            d.blend = x->blend;
            break;
        case PSDB_DERIVED_STATE_SAMPLE_MASK:
            d.sample_mask = x->sample_mask;
            break;
        default:
            d.shader_limits = x->shader_limits;
            break;
        }
    }
    if (!exports_match(dev, g, &d)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_derived_graphics_pipeline: the derived state "
                               "changes the shaders' exports (V4)"); /* V4 */
        goto cleanup;
    }
    hr = psdb__desc_encode_graphics(&d, &enc);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* V2: no plan, no selection, no lookup, no compile. */
    hr = psdb__pipeline_new(dev, &p);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(enc.data, enc.len, p->group_key);
    p->desc = enc;
    memset(&enc, 0, sizeof(enc));
    p->origin =
        (base->origin == PSDB__ORIGIN_DESERIALIZED || base->origin == PSDB__ORIGIN_DERIVED_COMPACT)
            ? PSDB__ORIGIN_DERIVED_COMPACT
            : PSDB__ORIGIN_DERIVED;
    p->info.operation_id = psdb__device_next_operation(dev);
    p->info.selection = PSDB_SELECTION_NONE;
    p->assoc = base->assoc;
    if (p->assoc.session)
        psdb_session_addref(p->assoc.session);
    psdb_pipeline_addref(base);
    p->base = base;
    *out = p;
    p = NULL;
cleanup:
    psdb_pipeline_release(p);
    psdb__buf_free(&enc);
    free(g);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- base keys (a base set's grouping) ------------------------------------------------------- */

psdb_hr psdb_derivation_base_key(const psdb_graphics_pipeline_desc *desc, uint8_t out[32])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf b = {0};
    psdb_graphics_pipeline_desc c;
    psdb__export ex[PSDB_MAX_RENDER_TARGETS];
    if (!desc || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_derivation_base_key: NULL argument");
        goto cleanup;
    }
    /* What a derived PSO may override (V1) is left out; the exports it must keep (V3, V4) are in.
     */
    c = *desc;
    memset(&c.depth_stencil, 0, sizeof(c.depth_stencil));
    memset(&c.rasterizer, 0, sizeof(c.rasterizer));
    memset(&c.blend, 0, sizeof(c.blend));
    memset(&c.shader_limits, 0, sizeof(c.shader_limits));
    c.sample_mask = 0;
    hr = psdb__desc_encode_graphics(&c, &b);
    if (hr == PSDB_E_INVALIDARG)
        hr = psdb__error_const(hr, "psdb_derivation_base_key: a description the SODB encoding "
                                   "cannot hold");
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__export_types(desc, ex);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        psdb__buf_u32(&b, ex[i].type);
        psdb__buf_u32(&b, ex[i].components);
    }
    hr = psdb__buf_status(&b);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(b.data, b.len, out);
cleanup:
    psdb__buf_free(&b);
    return psdb__error_ret(hr, err_mark, __func__);
}
