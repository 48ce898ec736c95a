/* desc.c - the byte encoding of pipeline and state-object descriptions (schema/SODB.md). */
#include "format/desc.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static const uint8_t MAGIC_COMPUTE[4] = {'S', 'O', 'C', 'P'};
static const uint8_t MAGIC_GRAPHICS[4] = {'S', 'O', 'G', 'P'};
static const uint8_t MAGIC_STATE_OBJECT[4] = {'S', 'O', 'S', 'O'};

#define STR_NULL UINT32_MAX
#define LEN_MAX (UINT32_MAX - 1u)

/* ---- Encoding -------------------------------------------------------------------------------- */

typedef struct enc {
    psdb__buf b;
    int invalid;
    int digests; /* state blob: bytecode replaced by size + SHA-256 */
} enc;

static void e_u32(enc *e, uint32_t v)
{
    psdb__buf_u32(&e->b, v);
}

static void e_bool(enc *e, int v)
{
    e_u32(e, v ? 1u : 0u);
}

static void e_f32(enc *e, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    e_u32(e, u);
}

static void e_blob(enc *e, const void *p, size_t n)
{
    if (n > LEN_MAX || (n && !p)) {
        e->invalid = 1;
        return;
    }
    e_u32(e, (uint32_t)n);
    psdb__buf_append(&e->b, p, n);
}

/* Bytecode: in state blobs only its size and digest, so a packet's cost does not scale with it. */
static void e_code(enc *e, const void *p, size_t n)
{
    if (!e->digests || n == 0 || n > LEN_MAX || !p) {
        e_blob(e, p, n);
        return;
    }
    uint8_t h[32];
    psdb__sha256(p, n, h);
    e_u32(e, (uint32_t)n);
    psdb__buf_append(&e->b, h, sizeof(h));
}

static void e_shader(enc *e, const psdb_shader *s)
{
    e_code(e, s->code, s->size);
}

static void e_str(enc *e, const char *s)
{
    if (s && strlen(s) > LEN_MAX) {
        e->invalid = 1;
        return;
    }
    psdb__buf_str(&e->b, s);
}

static void e_header(enc *e, const uint8_t magic[4])
{
    psdb__buf_append(&e->b, magic, 4);
    e_u32(e, PSDB__DESC_VERSION);
    e_u32(e, 0); /* reserved */
}

static psdb_hr e_finish(enc *e, psdb__buf *out)
{
    psdb_hr hr = e->invalid ? PSDB_E_INVALIDARG : psdb__buf_status(&e->b);
    if (PSDB_FAILED(hr)) {
        psdb__buf_free(&e->b);
        return hr;
    }
    *out = e->b;
    return PSDB_S_OK;
}

static void e_compute(enc *e, const psdb_compute_pipeline_desc *d)
{
    e_header(e, MAGIC_COMPUTE);
    e_blob(e, d->root_signature, d->root_signature_size);
    e_shader(e, &d->cs);
}

static void e_stream_output(enc *e, const psdb_stream_output_desc *so)
{
    if ((so->num_entries && !so->entries) || (so->num_strides && !so->buffer_strides)) {
        e->invalid = 1;
        return;
    }
    e_u32(e, so->num_entries);
    for (uint32_t i = 0; i < so->num_entries; i++) {
        const psdb_so_declaration_entry *x = &so->entries[i];
        e_u32(e, x->stream);
        e_str(e, x->semantic_name);
        e_u32(e, x->semantic_index);
        e_u32(e, x->start_component);
        e_u32(e, x->component_count);
        e_u32(e, x->output_slot);
    }
    e_u32(e, so->num_strides);
    for (uint32_t i = 0; i < so->num_strides; i++)
        e_u32(e, so->buffer_strides[i]);
    e_u32(e, so->rasterized_stream);
}

static void e_blend(enc *e, const psdb_blend_desc *b)
{
    e_bool(e, b->alpha_to_coverage_enable);
    e_bool(e, b->independent_blend_enable);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        const psdb_render_target_blend_desc *rt = &b->render_target[i];
        e_bool(e, rt->blend_enable);
        e_bool(e, rt->logic_op_enable);
        e_u32(e, rt->src_blend);
        e_u32(e, rt->dest_blend);
        e_u32(e, rt->blend_op);
        e_u32(e, rt->src_blend_alpha);
        e_u32(e, rt->dest_blend_alpha);
        e_u32(e, rt->blend_op_alpha);
        e_u32(e, rt->logic_op);
        e_u32(e, rt->render_target_write_mask);
    }
}

static void e_rasterizer(enc *e, const psdb_rasterizer_desc *r)
{
    e_u32(e, r->fill_mode);
    e_u32(e, r->cull_mode);
    e_bool(e, r->front_counter_clockwise);
    e_u32(e, (uint32_t)r->depth_bias);
    e_f32(e, r->depth_bias_clamp);
    e_f32(e, r->slope_scaled_depth_bias);
    e_bool(e, r->depth_clip_enable);
    e_bool(e, r->multisample_enable);
    e_bool(e, r->antialiased_line_enable);
    e_u32(e, r->forced_sample_count);
    e_u32(e, r->conservative_raster);
}

static void e_stencil_op(enc *e, const psdb_depth_stencilop_desc *o)
{
    e_u32(e, o->stencil_fail_op);
    e_u32(e, o->stencil_depth_fail_op);
    e_u32(e, o->stencil_pass_op);
    e_u32(e, o->stencil_func);
}

static void e_depth_stencil(enc *e, const psdb_depth_stencil_desc *d)
{
    e_bool(e, d->depth_enable);
    e_u32(e, d->depth_write_mask);
    e_u32(e, d->depth_func);
    e_bool(e, d->stencil_enable);
    e_u32(e, d->stencil_read_mask);
    e_u32(e, d->stencil_write_mask);
    e_stencil_op(e, &d->front_face);
    e_stencil_op(e, &d->back_face);
}

static void e_input_layout(enc *e, const psdb_input_layout_desc *il)
{
    if (il->num_elements && !il->elements) {
        e->invalid = 1;
        return;
    }
    e_u32(e, il->num_elements);
    for (uint32_t i = 0; i < il->num_elements; i++) {
        const psdb_input_element_desc *x = &il->elements[i];
        e_str(e, x->semantic_name);
        e_u32(e, x->semantic_index);
        e_u32(e, x->format);
        e_u32(e, x->input_slot);
        e_u32(e, x->aligned_byte_offset);
        e_u32(e, x->input_slot_class);
        e_u32(e, x->instance_data_step_rate);
    }
}

static void e_graphics(enc *e, const psdb_graphics_pipeline_desc *d)
{
    e_header(e, MAGIC_GRAPHICS);
    e_blob(e, d->root_signature, d->root_signature_size);
    e_shader(e, &d->vs);
    e_shader(e, &d->ps);
    e_shader(e, &d->ds);
    e_shader(e, &d->hs);
    e_shader(e, &d->gs);
    e_stream_output(e, &d->stream_output);
    e_blend(e, &d->blend);
    e_u32(e, d->sample_mask);
    e_rasterizer(e, &d->rasterizer);
    e_depth_stencil(e, &d->depth_stencil);
    e_input_layout(e, &d->input_layout);
    e_u32(e, d->primitive_topology_type);
    e_u32(e, d->num_render_targets);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++)
        e_u32(e, d->rtv_formats[i]);
    e_u32(e, d->dsv_format);
    e_u32(e, d->sample_count);
    e_u32(e, d->sample_quality);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        e_u32(e, d->ps_outputs[i].components);
        e_u32(e, d->ps_outputs[i].type);
    }
    e_u32(e, d->shader_limits.max_waves_per_cu);
    e_u32(e, d->shader_limits.cu_enable_mask);
}

static void e_state_object(enc *e, const psdb_state_object_desc *d,
                           int (*collection_key)(psdb_state_object *, uint8_t[32]))
{
    if (d->num_subobjects && !d->subobjects) {
        e->invalid = 1;
        return;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->num_subobjects; i++)
        if (d->subobjects[i].type != PSDB_SUBOBJECT_PSDB)
            n++;
    e_header(e, MAGIC_STATE_OBJECT);
    e_u32(e, d->type);
    e_u32(e, n);
    for (uint32_t i = 0; i < d->num_subobjects && !e->invalid; i++) {
        const psdb_state_subobject *so = &d->subobjects[i];
        if (so->type == PSDB_SUBOBJECT_PSDB)
            continue;
        if (!so->desc) {
            e->invalid = 1;
            break;
        }
        e_u32(e, so->type);
        switch (so->type) {
        case PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE: {
            const psdb_shader *rs = so->desc;
            e_blob(e, rs->code, rs->size);
            break;
        }
        case PSDB_SUBOBJECT_DXIL_LIBRARY: {
            const psdb_dxil_library_desc *lib = so->desc;
            e_shader(e, &lib->library);
            if (lib->num_exports && !lib->exports) {
                e->invalid = 1;
                break;
            }
            e_u32(e, lib->num_exports);
            for (uint32_t j = 0; j < lib->num_exports; j++) {
                if (!lib->exports[j])
                    e->invalid = 1;
                e_str(e, lib->exports[j]);
            }
            break;
        }
        case PSDB_SUBOBJECT_EXISTING_COLLECTION: {
            const psdb_existing_collection_desc *c = so->desc;
            uint8_t key[32];
            if (!collection_key || !c->collection || collection_key(c->collection, key) != 0) {
                e->invalid = 1;
                break;
            }
            psdb__buf_append(&e->b, key, sizeof(key));
            break;
        }
        case PSDB_SUBOBJECT_HIT_GROUP: {
            const psdb_hit_group_desc *hg = so->desc;
            if (!hg->name)
                e->invalid = 1;
            e_str(e, hg->name);
            e_str(e, hg->any_hit);
            e_str(e, hg->closest_hit);
            e_str(e, hg->intersection);
            break;
        }
        default:
            e->invalid = 1;
            break;
        }
    }
}

psdb_hr psdb__desc_encode_compute(const psdb_compute_pipeline_desc *d, psdb__buf *out)
{
    enc e = {0};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_compute(&e, d);
    return e_finish(&e, out);
}

psdb_hr psdb__desc_encode_graphics(const psdb_graphics_pipeline_desc *d, psdb__buf *out)
{
    enc e = {0};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_graphics(&e, d);
    return e_finish(&e, out);
}

psdb_hr psdb__desc_encode_state_object(const psdb_state_object_desc *d,
                                       int (*collection_key)(psdb_state_object *so,
                                                             uint8_t key[32]),
                                       psdb__buf *out)
{
    enc e = {0};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_state_object(&e, d, collection_key);
    return e_finish(&e, out);
}

psdb_hr psdb__desc_encode_into(uint32_t kind, const void *d, psdb__buf *b)
{
    psdb_hr hr = PSDB_S_OK;
    enc e = {0};
    if (!d || !b)
        return PSDB_E_INVALIDARG;
    e.b = *b;
    e.b.len = 0;
    e.b.oom = 0;
    if (kind == PSDB_SODB_COMPUTE)
        e_compute(&e, d);
    else if (kind == PSDB_SODB_GRAPHICS)
        e_graphics(&e, d);
    else if (kind == PSDB_SODB_STATE_OBJECT)
        e_state_object(&e, d, NULL);
    else
        e.invalid = 1;
    hr = e.invalid ? PSDB_E_INVALIDARG : psdb__buf_status(&e.b);
    if (PSDB_FAILED(hr))
        e.b.len = 0;
    *b = e.b;
    return hr;
}

psdb_hr psdb__desc_encode_compute_state(const psdb_compute_pipeline_desc *d, psdb__buf *out)
{
    enc e = {.digests = 1};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_compute(&e, d);
    return e_finish(&e, out);
}

psdb_hr psdb__desc_encode_graphics_state(const psdb_graphics_pipeline_desc *d, psdb__buf *out)
{
    enc e = {.digests = 1};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_graphics(&e, d);
    return e_finish(&e, out);
}

psdb_hr psdb__desc_encode_state_object_state(const psdb_state_object_desc *d,
                                             int (*collection_key)(psdb_state_object *so,
                                                                   uint8_t key[32]),
                                             psdb__buf *out)
{
    enc e = {.digests = 1};
    if (!d || !out)
        return PSDB_E_INVALIDARG;
    e_state_object(&e, d, collection_key);
    return e_finish(&e, out);
}

/* Appends through a temporary encoder so the caller's buffer keeps its own error state. */
static psdb_hr append_part(psdb__buf *b, const void *part, void (*fn)(enc *, const void *))
{
    enc e = {0};
    if (!b || !part)
        return PSDB_E_INVALIDARG;
    fn(&e, part);
    psdb_hr hr = e.invalid ? PSDB_E_INVALIDARG : psdb__buf_status(&e.b);
    if (PSDB_SUCCEEDED(hr)) {
        psdb__buf_append(b, e.b.data, e.b.len);
        hr = psdb__buf_status(b);
    }
    psdb__buf_free(&e.b);
    return hr;
}

static void e_input_layout_v(enc *e, const void *p)
{
    e_input_layout(e, p);
}

static void e_stream_output_v(enc *e, const void *p)
{
    e_stream_output(e, p);
}

psdb_hr psdb__desc_append_input_layout(psdb__buf *b, const psdb_input_layout_desc *il)
{
    return append_part(b, il, e_input_layout_v);
}

psdb_hr psdb__desc_append_stream_output(psdb__buf *b, const psdb_stream_output_desc *so)
{
    return append_part(b, so, e_stream_output_v);
}

uint32_t psdb__desc_kind(const void *data, size_t size)
{
    if (!data || size < 4)
        return 0;
    if (memcmp(data, MAGIC_COMPUTE, 4) == 0)
        return PSDB_SODB_COMPUTE;
    if (memcmp(data, MAGIC_GRAPHICS, 4) == 0)
        return PSDB_SODB_GRAPHICS;
    if (memcmp(data, MAGIC_STATE_OBJECT, 4) == 0)
        return PSDB_SODB_STATE_OBJECT;
    return 0;
}

/* ---- Decoding -----------------------------------------------------------------------------------
 * Decoding runs the same walk twice: the first pass only measures (the arena has no base and hands
 * out NULL), the second fills one block of exactly the measured size. Every write into the arena
 * is guarded by a non-NULL pointer, so both passes take identical paths. */

typedef struct dec {
    psdb__rd r;
    uint8_t *base; /* NULL while measuring */
    size_t used;
    int bad;
} dec;

static void *d_alloc(dec *d, size_t n, size_t align)
{
    size_t off = (d->used + align - 1) & ~(align - 1);
    if (off < d->used || n > SIZE_MAX - off) {
        d->bad = 1;
        return NULL;
    }
    d->used = off + n;
    return d->base ? d->base + off : NULL;
}

static uint32_t d_u32(dec *d)
{
    return psdb__rd_u32(&d->r);
}

static int d_bool(dec *d)
{
    uint32_t v = d_u32(d);
    if (v > 1)
        d->bad = 1;
    return (int)v;
}

static float d_f32(dec *d)
{
    uint32_t u = d_u32(d);
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static size_t d_remaining(const dec *d)
{
    return d->r.bad ? 0 : d->r.len - d->r.pos;
}

/* A count of items that each take at least min_bytes of input: larger than the input can hold is
 * corrupt, which also bounds the arena before anything is allocated. */
static uint32_t d_count(dec *d, size_t min_bytes)
{
    uint32_t n = d_u32(d);
    if (n > d_remaining(d) / min_bytes) {
        d->bad = 1;
        return 0;
    }
    return n;
}

static const void *d_blob(dec *d, size_t *size)
{
    uint32_t n = d_u32(d);
    const uint8_t *src = psdb__rd_bytes(&d->r, n);
    *size = 0;
    if (!src || n == 0)
        return NULL;
    uint8_t *dst = d_alloc(d, n, 1);
    if (dst)
        memcpy(dst, src, n);
    *size = n;
    return dst;
}

/* A string; `required` strings may not be NULL (length 0xFFFFFFFF). */
static const char *d_str_opt(dec *d, int required)
{
    uint32_t n = d_u32(d);
    if (n == STR_NULL) {
        if (required)
            d->bad = 1;
        return NULL;
    }
    const uint8_t *src = psdb__rd_bytes(&d->r, n);
    if (!src)
        return NULL;
    if (memchr(src, 0, n)) {
        d->bad = 1;
        return NULL;
    }
    char *dst = d_alloc(d, (size_t)n + 1, 1);
    if (dst) {
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return dst;
}

static const char *d_str(dec *d)
{
    return d_str_opt(d, 0);
}

static void d_header(dec *d, const uint8_t magic[4])
{
    const uint8_t *m = psdb__rd_bytes(&d->r, 4);
    if (!m || memcmp(m, magic, 4) != 0)
        d->bad = 1;
    if (d_u32(d) != PSDB__DESC_VERSION)
        d->bad = 1;
    if (d_u32(d) != 0)
        d->bad = 1;
}

static void d_shader(dec *d, psdb_shader *s)
{
    s->code = d_blob(d, &s->size);
}

static void d_compute(dec *d, void *top)
{
    psdb_compute_pipeline_desc *c = top;
    d_header(d, MAGIC_COMPUTE);
    c->root_signature = d_blob(d, &c->root_signature_size);
    d_shader(d, &c->cs);
}

static void d_stream_output(dec *d, psdb_stream_output_desc *so)
{
    /* An entry takes at least 6 u32 (its name NULL). */
    so->num_entries = d_count(d, 24);
    psdb_so_declaration_entry *entries =
        so->num_entries
            ? d_alloc(d, so->num_entries * sizeof(*entries), alignof(psdb_so_declaration_entry))
            : NULL;
    for (uint32_t i = 0; i < so->num_entries && !d->bad; i++) {
        psdb_so_declaration_entry x = {0};
        x.stream = d_u32(d);
        x.semantic_name = d_str(d);
        x.semantic_index = d_u32(d);
        x.start_component = d_u32(d);
        x.component_count = d_u32(d);
        x.output_slot = d_u32(d);
        if (entries)
            entries[i] = x;
    }
    so->entries = entries;
    so->num_strides = d_count(d, 4);
    uint32_t *strides =
        so->num_strides ? d_alloc(d, so->num_strides * sizeof(uint32_t), alignof(uint32_t)) : NULL;
    for (uint32_t i = 0; i < so->num_strides && !d->bad; i++) {
        uint32_t v = d_u32(d);
        if (strides)
            strides[i] = v;
    }
    so->buffer_strides = strides;
    so->rasterized_stream = d_u32(d);
}

static void d_blend(dec *d, psdb_blend_desc *b)
{
    b->alpha_to_coverage_enable = d_bool(d);
    b->independent_blend_enable = d_bool(d);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        psdb_render_target_blend_desc *rt = &b->render_target[i];
        rt->blend_enable = d_bool(d);
        rt->logic_op_enable = d_bool(d);
        rt->src_blend = d_u32(d);
        rt->dest_blend = d_u32(d);
        rt->blend_op = d_u32(d);
        rt->src_blend_alpha = d_u32(d);
        rt->dest_blend_alpha = d_u32(d);
        rt->blend_op_alpha = d_u32(d);
        rt->logic_op = d_u32(d);
        rt->render_target_write_mask = d_u32(d);
    }
}

static void d_rasterizer(dec *d, psdb_rasterizer_desc *r)
{
    r->fill_mode = d_u32(d);
    r->cull_mode = d_u32(d);
    r->front_counter_clockwise = d_bool(d);
    r->depth_bias = (int32_t)d_u32(d);
    r->depth_bias_clamp = d_f32(d);
    r->slope_scaled_depth_bias = d_f32(d);
    r->depth_clip_enable = d_bool(d);
    r->multisample_enable = d_bool(d);
    r->antialiased_line_enable = d_bool(d);
    r->forced_sample_count = d_u32(d);
    r->conservative_raster = d_u32(d);
}

static void d_stencil_op(dec *d, psdb_depth_stencilop_desc *o)
{
    o->stencil_fail_op = d_u32(d);
    o->stencil_depth_fail_op = d_u32(d);
    o->stencil_pass_op = d_u32(d);
    o->stencil_func = d_u32(d);
}

static void d_depth_stencil(dec *d, psdb_depth_stencil_desc *x)
{
    x->depth_enable = d_bool(d);
    x->depth_write_mask = d_u32(d);
    x->depth_func = d_u32(d);
    x->stencil_enable = d_bool(d);
    x->stencil_read_mask = d_u32(d);
    x->stencil_write_mask = d_u32(d);
    d_stencil_op(d, &x->front_face);
    d_stencil_op(d, &x->back_face);
}

static void d_input_layout(dec *d, psdb_input_layout_desc *il)
{
    /* An element takes at least 7 u32 (its name NULL). */
    il->num_elements = d_count(d, 28);
    psdb_input_element_desc *els = il->num_elements ? d_alloc(d, il->num_elements * sizeof(*els),
                                                              alignof(psdb_input_element_desc))
                                                    : NULL;
    for (uint32_t i = 0; i < il->num_elements && !d->bad; i++) {
        psdb_input_element_desc x = {0};
        x.semantic_name = d_str(d);
        x.semantic_index = d_u32(d);
        x.format = d_u32(d);
        x.input_slot = d_u32(d);
        x.aligned_byte_offset = d_u32(d);
        x.input_slot_class = d_u32(d);
        x.instance_data_step_rate = d_u32(d);
        if (els)
            els[i] = x;
    }
    il->elements = els;
}

static void d_graphics(dec *d, void *top)
{
    psdb_graphics_pipeline_desc *g = top;
    d_header(d, MAGIC_GRAPHICS);
    g->root_signature = d_blob(d, &g->root_signature_size);
    d_shader(d, &g->vs);
    d_shader(d, &g->ps);
    d_shader(d, &g->ds);
    d_shader(d, &g->hs);
    d_shader(d, &g->gs);
    d_stream_output(d, &g->stream_output);
    d_blend(d, &g->blend);
    g->sample_mask = d_u32(d);
    d_rasterizer(d, &g->rasterizer);
    d_depth_stencil(d, &g->depth_stencil);
    d_input_layout(d, &g->input_layout);
    g->primitive_topology_type = d_u32(d);
    g->num_render_targets = d_u32(d);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++)
        g->rtv_formats[i] = d_u32(d);
    g->dsv_format = d_u32(d);
    g->sample_count = d_u32(d);
    g->sample_quality = d_u32(d);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        g->ps_outputs[i].components = d_u32(d);
        g->ps_outputs[i].type = d_u32(d);
    }
    g->shader_limits.max_waves_per_cu = d_u32(d);
    g->shader_limits.cu_enable_mask = d_u32(d);
}

static const void *d_subobject(dec *d, uint32_t type)
{
    switch (type) {
    case PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE: {
        psdb_shader x = {0};
        psdb_shader *p = d_alloc(d, sizeof(*p), alignof(psdb_shader));
        x.code = d_blob(d, &x.size);
        if (p)
            *p = x;
        return p;
    }
    case PSDB_SUBOBJECT_DXIL_LIBRARY: {
        psdb_dxil_library_desc x = {0};
        psdb_dxil_library_desc *p = d_alloc(d, sizeof(*p), alignof(psdb_dxil_library_desc));
        d_shader(d, &x.library);
        x.num_exports = d_count(d, 4);
        const char **names =
            x.num_exports ? d_alloc(d, x.num_exports * sizeof(char *), alignof(char *)) : NULL;
        for (uint32_t i = 0; i < x.num_exports && !d->bad; i++) {
            const char *s = d_str_opt(d, 1);
            if (names)
                names[i] = s;
        }
        x.exports = names;
        if (p)
            *p = x;
        return p;
    }
    case PSDB_SUBOBJECT_EXISTING_COLLECTION: {
        psdb_existing_collection_desc *p =
            d_alloc(d, sizeof(*p), alignof(psdb_existing_collection_desc));
        const uint8_t *src = psdb__rd_bytes(&d->r, 32);
        uint8_t *key = d_alloc(d, 32, 1);
        if (p && key && src) {
            memcpy(key, src, 32);
            /* The handle carries the key (desc.h: psdb__desc_decoded_collection_key). */
            p->collection = (psdb_state_object *)(void *)key;
        }
        return p;
    }
    case PSDB_SUBOBJECT_HIT_GROUP: {
        psdb_hit_group_desc x = {0};
        psdb_hit_group_desc *p = d_alloc(d, sizeof(*p), alignof(psdb_hit_group_desc));
        x.name = d_str_opt(d, 1);
        x.any_hit = d_str(d);
        x.closest_hit = d_str(d);
        x.intersection = d_str(d);
        if (p)
            *p = x;
        return p;
    }
    default:
        d->bad = 1;
        return NULL;
    }
}

static void d_state_object(dec *d, void *top)
{
    psdb_state_object_desc *s = top;
    d_header(d, MAGIC_STATE_OBJECT);
    s->type = d_u32(d);
    s->num_subobjects = d_count(d, 4);
    psdb_state_subobject *subs = s->num_subobjects ? d_alloc(d, s->num_subobjects * sizeof(*subs),
                                                             alignof(psdb_state_subobject))
                                                   : NULL;
    for (uint32_t i = 0; i < s->num_subobjects && !d->bad; i++) {
        psdb_state_subobject x = {0};
        x.type = d_u32(d);
        if (x.type == PSDB_SUBOBJECT_PSDB)
            d->bad = 1; /* never encoded */
        x.desc = d_subobject(d, x.type);
        if (subs)
            subs[i] = x;
    }
    s->subobjects = subs;
}

static psdb_hr decode(const void *data, size_t size, size_t top_size, size_t top_align,
                      void (*walk)(dec *, void *), void **out)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t *block = NULL;
    /* Large enough for every top-level description, suitably aligned. */
    union {
        psdb_compute_pipeline_desc c;
        psdb_graphics_pipeline_desc g;
        psdb_state_object_desc s;
    } top;

    if (!out || (!data && size))
        return PSDB_E_INVALIDARG;
    *out = NULL;
    if (!data) {
        hr = PSDB_E_CACHE_CORRUPT;
        goto cleanup;
    }
    for (int pass = 0; pass < 2; pass++) {
        dec d = {.r = {.p = data, .len = size}, .base = block};
        memset(&top, 0, sizeof(top));
        d_alloc(&d, top_size, top_align);
        walk(&d, &top);
        if (d.bad || d.r.bad || d.r.pos != d.r.len) {
            hr = PSDB_E_CACHE_CORRUPT;
            goto cleanup;
        }
        if (pass == 0) {
            block = calloc(1, d.used);
            if (!block) {
                hr = PSDB_E_OUTOFMEMORY;
                goto cleanup;
            }
        }
    }
    memcpy(block, &top, top_size);
    *out = block;
    block = NULL;
cleanup:
    free(block);
    return hr;
}

psdb_hr psdb__desc_decode_compute(const void *data, size_t size, psdb_compute_pipeline_desc **out)
{
    void *p = NULL;
    psdb_hr hr = PSDB_E_INVALIDARG;
    if (out)
        hr = decode(data, size, sizeof(**out), alignof(psdb_compute_pipeline_desc), d_compute, &p);
    if (out)
        *out = p;
    return hr;
}

psdb_hr psdb__desc_decode_graphics(const void *data, size_t size, psdb_graphics_pipeline_desc **out)
{
    void *p = NULL;
    psdb_hr hr = PSDB_E_INVALIDARG;
    if (out)
        hr =
            decode(data, size, sizeof(**out), alignof(psdb_graphics_pipeline_desc), d_graphics, &p);
    if (out)
        *out = p;
    return hr;
}

psdb_hr psdb__desc_decode_state_object(const void *data, size_t size, psdb_state_object_desc **out)
{
    void *p = NULL;
    psdb_hr hr = PSDB_E_INVALIDARG;
    if (out)
        hr = decode(data, size, sizeof(**out), alignof(psdb_state_object_desc), d_state_object, &p);
    if (out)
        *out = p;
    return hr;
}

int psdb__desc_decoded_collection_key(psdb_state_object *so, uint8_t key[32])
{
    if (!so)
        return -1;
    memcpy(key, (const void *)so, 32);
    return 0;
}

psdb_hr psdb_sodb_decode(uint32_t kind, const void *desc, size_t size, psdb_sodb_entry **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb_entry *e = NULL;

    psdb__error_clear();
    if (out)
        *out = NULL;
    if (!out || (!desc && size > 0)) {
        hr = psdb__error_set(PSDB_E_INVALIDARG,
                             "psdb_sodb_decode: NULL out, or NULL desc of %zu bytes", size);
        goto cleanup;
    }
    if (kind != PSDB_SODB_COMPUTE && kind != PSDB_SODB_GRAPHICS && kind != PSDB_SODB_STATE_OBJECT) {
        hr = psdb__error_set(PSDB_E_INVALIDARG,
                             "psdb_sodb_decode: kind %u is not a compute, graphics or state object "
                             "entry",
                             (unsigned)kind);
        goto cleanup;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "psdb_sodb_decode: out of memory");
        goto cleanup;
    }
    e->kind = kind;
    if (kind == PSDB_SODB_COMPUTE)
        hr = psdb__desc_decode_compute(desc, size, &e->compute);
    else if (kind == PSDB_SODB_GRAPHICS)
        hr = psdb__desc_decode_graphics(desc, size, &e->graphics);
    else
        hr = psdb__desc_decode_state_object(desc, size, &e->state_object);
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "psdb_sodb_decode: malformed %s description of %zu bytes (%s)",
                        kind == PSDB_SODB_COMPUTE    ? "compute"
                        : kind == PSDB_SODB_GRAPHICS ? "graphics"
                                                     : "state object",
                        size, psdb_hr_str(hr));
        goto cleanup;
    }
    *out = e;
    e = NULL;
cleanup:
    psdb_sodb_entry_release(e);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_sodb_entry_release(psdb_sodb_entry *e)
{
    if (!e)
        return;
    free(e->compute);
    free(e->graphics);
    free(e->state_object);
    free(e);
}
