/* derived_pso_test.c - derived graphics PSOs (MODEL V): what may be overridden, no compile and no
 * lookup, and export validation against the base with the seed's three failing examples. */
#include "rt_fixture.h"

typedef struct msgs {
    int count;
    uint32_t severity, id;
    char text[256];
} msgs;

static void on_message(uint32_t severity, uint32_t id, const char *text, void *ctx)
{
    msgs *m = ctx;
    m->count++;
    m->severity = severity;
    m->id = id;
    snprintf(m->text, sizeof(m->text), "%s", text);
}

static psdb_device *device(msgs *m)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    if (m)
        ck_assert_hr(psdb_device_set_message_callback(dev, on_message, m), PSDB_S_OK);
    return dev;
}

/* A base writing `components` float components to one target of `format` with write mask
 * `mask` (0: ALL) and blending off. */
static psdb_pipeline *base_pso(psdb_device *dev, rt_graphics *g, uint32_t format,
                               uint32_t components, uint32_t mask)
{
    psdb_pipeline *p = NULL;
    rt_graphics_init(g, 0, NULL);
    g->desc.rtv_formats[0] = format;
    g->desc.ps_outputs[0].components = components;
    g->desc.ps_outputs[0].type = PSDB_COMPONENT_FLOAT;
    g->desc.blend.render_target[0].render_target_write_mask = mask;
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g->desc, &p), PSDB_S_OK);
    return p;
}

static psdb_derived_graphics_state_desc blend_state(const psdb_blend_desc *from, int enable,
                                                    uint32_t src, uint32_t dest, uint32_t mask)
{
    psdb_derived_graphics_state_desc x = {.type = PSDB_DERIVED_STATE_BLEND};
    x.blend = *from;
    x.blend.render_target[0].blend_enable = enable;
    x.blend.render_target[0].src_blend = src;
    x.blend.render_target[0].dest_blend = dest;
    x.blend.render_target[0].blend_op = PSDB_BLEND_OP_ADD;
    x.blend.render_target[0].src_blend_alpha = PSDB_BLEND_ONE;
    x.blend.render_target[0].dest_blend_alpha = PSDB_BLEND_ZERO;
    x.blend.render_target[0].blend_op_alpha = PSDB_BLEND_OP_ADD;
    x.blend.render_target[0].render_target_write_mask = mask;
    return x;
}

static psdb_hr derive(psdb_device *dev, psdb_pipeline *base,
                      const psdb_derived_graphics_state_desc *x, psdb_pipeline **out)
{
    return psdb_device_create_derived_graphics_pipeline(dev, base, 1, x, out);
}

/* V1: the derived PSO's description is the base's with the override: a library load with that
 * description finds it, with the base's does not. */
static void assert_described_by(psdb_device *dev, psdb_pipeline *p,
                                const psdb_graphics_pipeline_desc *want,
                                const psdb_graphics_pipeline_desc *not_this)
{
    psdb_pipeline_library *lib = NULL;
    psdb_pipeline *q = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "p", p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "p", not_this, &q),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "p", want, &q), PSDB_S_OK);
    ck_assert_ptr_eq(p, q);
    psdb_pipeline_release(q);
    psdb_pipeline_library_release(lib);
}

START_TEST(test_derived_pso__V1_each_overridable_state)
{
    psdb_device *dev = device(NULL);
    rt_graphics g;
    psdb_pipeline *base = base_pso(dev, &g, PSDB_FORMAT_R8G8B8A8_UNORM, 4, 0);
    psdb_graphics_pipeline_desc want = g.desc;
    psdb_derived_graphics_state_desc x[5];
    memset(x, 0, sizeof(x));
    x[0].type = PSDB_DERIVED_STATE_DEPTH_STENCIL;
    x[0].depth_stencil.depth_enable = 1;
    x[0].depth_stencil.depth_func = 4;
    x[1].type = PSDB_DERIVED_STATE_RASTERIZER;
    x[1].rasterizer.cull_mode = 1;
    x[1].rasterizer.depth_bias = -3;
    x[2].type = PSDB_DERIVED_STATE_BLEND;
    x[2].blend = g.desc.blend;
    x[2].blend.render_target[0].logic_op = 3; /* blending stays off: the export is unchanged */
    x[3].type = PSDB_DERIVED_STATE_SAMPLE_MASK;
    x[3].sample_mask = 0x3;
    x[4].type = PSDB_DERIVED_STATE_SHADER_LIMITS;
    x[4].shader_limits.max_waves_per_cu = 8;
    want.depth_stencil = x[0].depth_stencil;
    want.rasterizer = x[1].rasterizer;
    want.blend = x[2].blend;
    want.sample_mask = 0x3;
    want.shader_limits = x[4].shader_limits;
    psdb_pipeline *d = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 5, x, &d), PSDB_S_OK);
    assert_described_by(dev, d, &want, &g.desc);
    /* One state alone leaves everything else as the base's. */
    psdb_pipeline *one = NULL;
    ck_assert_hr(derive(dev, base, &x[3], &one), PSDB_S_OK);
    psdb_graphics_pipeline_desc only_mask = g.desc;
    only_mask.sample_mask = 0x3;
    assert_described_by(dev, one, &only_mask, &want);
    /* count 0: a copy of the base's state. */
    psdb_pipeline *copy = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 0, NULL, &copy),
                 PSDB_S_OK);
    assert_described_by(dev, copy, &g.desc, &want);
    /* A derived PSO derives again. */
    psdb_pipeline *dd = NULL;
    ck_assert_hr(derive(dev, one, &x[0], &dd), PSDB_S_OK);
    /* Nothing else can be overridden: unknown types (input layout, render targets, stream
     * output have none), a type twice. */
    psdb_derived_graphics_state_desc bad = {.type = 5};
    psdb_pipeline *r = NULL;
    ck_assert_hr(derive(dev, base, &bad, &r), PSDB_E_INVALIDARG);
    psdb_derived_graphics_state_desc twice[2] = {x[3], x[3]};
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 2, twice, &r),
                 PSDB_E_INVALIDARG);
    ck_assert_ptr_null(r);
    psdb_pipeline_release(d);
    psdb_pipeline_release(one);
    psdb_pipeline_release(copy);
    psdb_pipeline_release(dd);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_derived_pso__V1_bad_arguments)
{
    psdb_device *dev = device(NULL);
    rt_graphics g;
    psdb_pipeline *base = base_pso(dev, &g, PSDB_FORMAT_R8G8B8A8_UNORM, 4, 0);
    psdb_derived_graphics_state_desc x = {.type = PSDB_DERIVED_STATE_SAMPLE_MASK};
    psdb_pipeline *r = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(NULL, base, 1, &x, &r),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, NULL, 1, &x, &r),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 1, NULL, &r),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 1, &x, NULL),
                 PSDB_E_INVALIDARG);
    /* A compute base, a base of another device. */
    rt_compute c;
    rt_compute_init(&c, 0, NULL);
    psdb_pipeline *cp = NULL;
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &cp), PSDB_S_OK);
    ck_assert_hr(derive(dev, cp, &x, &r), PSDB_E_INVALIDARG);
    psdb_device *other = device(NULL);
    ck_assert_hr(derive(other, base, &x, &r), PSDB_E_INVALIDARG);
    psdb_device_release(other);
    psdb_pipeline_release(cp);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_derived_pso__V2_no_compile_and_no_psdb_lookup)
{
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "a.psdb");
    rt_make_full_psdb(path, 2);
    psdb_device *dev = rt_device(dir, NULL);
    psdb_session *a = rt_open(dev, path);
    ck_assert_hr(psdb_device_set_default_session(dev, a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    rt_recorder *rec = rt_recorder_new(dev);
    rt_graphics g;
    rt_graphics_init(&g, 5, NULL); /* not in the PSDB: the base compiles */
    psdb_pipeline *base = NULL;
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g.desc, &base), PSDB_S_OK);
    ck_assert_uint_gt(rec->n, 0);
    size_t events = rec->n;
    uint32_t compiles = psdb_device_get_local_compile_count(dev);
    ck_assert_uint_gt(compiles, 0);
    psdb_derived_graphics_state_desc x[2] = {{.type = PSDB_DERIVED_STATE_RASTERIZER},
                                             {.type = PSDB_DERIVED_STATE_DEPTH_STENCIL}};
    x[0].rasterizer.fill_mode = 2;
    x[1].depth_stencil.depth_enable = 1;
    psdb_pipeline *d = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(dev, base, 2, x, &d), PSDB_S_OK);
    ck_assert_uint_eq(rec->n, events);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), compiles);
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(d, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    ck_assert_uint_eq(info.lookups, 0);
    /* The derived PSO outlives its base handle (it holds the base). */
    psdb_pipeline_release(base);
    ck_assert_hr(psdb_pipeline_get_creation_info(d, &info), PSDB_S_OK);
    psdb_pipeline_release(d);
    psdb_session_release(a);
    psdb_device_release(dev);
    rt_recorder_free(rec);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

/* Seed example 1: float4 to R32G32_FLOAT, no blending -> RG FLOAT32; the derived PSO blends with
 * source alpha (destination factor ONE): the CB expects alpha the shader does not export. */
START_TEST(test_derived_pso__V4_seed_example_1_blend_needs_alpha)
{
    msgs m = {0};
    psdb_device *dev = device(&m);
    rt_graphics g;
    psdb_pipeline *base = base_pso(dev, &g, PSDB_FORMAT_R32G32_FLOAT, 4, 0);
    psdb_derived_graphics_state_desc x =
        blend_state(&g.desc.blend, 1, PSDB_BLEND_SRC_ALPHA, PSDB_BLEND_ONE, 0);
    psdb_pipeline *d = NULL;
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(d);
    ck_assert_int_eq(m.count, 1);
    ck_assert_uint_eq(m.severity, PSDB_MESSAGE_SEVERITY_ERROR);
    ck_assert_uint_eq(m.id, PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH);
    ck_assert_ptr_nonnull(strstr(m.text, "render target 0"));
    /* Beside it, passing: blending without source alpha keeps RG FLOAT32 (a 32-bit float target
     * blends in FLOAT32). */
    x = blend_state(&g.desc.blend, 1, PSDB_BLEND_ONE, PSDB_BLEND_ONE, 0);
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_S_OK);
    ck_assert_int_eq(m.count, 1);
    psdb_pipeline_release(d);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

/* Seed example 2: float4 to R16G16B16A16_UNORM, no blending -> RGBA UNORM16; blending in the
 * derived PSO needs a float export. */
START_TEST(test_derived_pso__V4_seed_example_2_blend_needs_float)
{
    msgs m = {0};
    psdb_device *dev = device(&m);
    rt_graphics g;
    psdb_pipeline *base = base_pso(dev, &g, PSDB_FORMAT_R16G16B16A16_UNORM, 4, 0);
    psdb_derived_graphics_state_desc x =
        blend_state(&g.desc.blend, 1, PSDB_BLEND_ONE, PSDB_BLEND_ONE, 0);
    psdb_pipeline *d = NULL;
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_E_INVALIDARG);
    ck_assert_int_eq(m.count, 1);
    ck_assert_uint_eq(m.id, PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH);
    ck_assert_ptr_nonnull(strstr(m.text, "FLOAT16"));
    ck_assert_ptr_nonnull(strstr(m.text, "UNORM16"));
    psdb_pipeline_release(base);
    /* Beside it, passing: a float16 target exports FLOAT16 with or without blending. */
    base = base_pso(dev, &g, PSDB_FORMAT_R16G16B16A16_FLOAT, 4, 0);
    x = blend_state(&g.desc.blend, 1, PSDB_BLEND_ONE, PSDB_BLEND_ONE, 0);
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_S_OK);
    ck_assert_int_eq(m.count, 1);
    psdb_pipeline_release(d);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

/* Seed example 3: float2 to R32G32_FLOAT with write mask RED -> R FLOAT32; the derived PSO writes
 * ALL: the shader exports only red. */
START_TEST(test_derived_pso__V4_seed_example_3_write_mask_widens)
{
    msgs m = {0};
    psdb_device *dev = device(&m);
    rt_graphics g;
    psdb_pipeline *base =
        base_pso(dev, &g, PSDB_FORMAT_R32G32_FLOAT, 2, PSDB_COLOR_WRITE_ENABLE_RED);
    psdb_derived_graphics_state_desc x =
        blend_state(&g.desc.blend, 0, PSDB_BLEND_ONE, PSDB_BLEND_ZERO, PSDB_COLOR_WRITE_ENABLE_ALL);
    psdb_pipeline *d = NULL;
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_E_INVALIDARG);
    ck_assert_int_eq(m.count, 1);
    ck_assert_uint_eq(m.id, PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH);
    /* Beside it, passing: RED|BLUE on a two-channel target still exports R only. */
    x = blend_state(&g.desc.blend, 0, PSDB_BLEND_ONE, PSDB_BLEND_ZERO,
                    PSDB_COLOR_WRITE_ENABLE_RED | PSDB_COLOR_WRITE_ENABLE_BLUE);
    ck_assert_hr(derive(dev, base, &x, &d), PSDB_S_OK);
    ck_assert_int_eq(m.count, 1);
    psdb_pipeline_release(d);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

/* ---- Building a base set: base keys, diffs, records --------------------------------------------
 */

START_TEST(test_derived_pso__base_set_diff_and_records_derive_the_recorded_pso)
{
    psdb_device *dev = device(NULL);
    rt_graphics g;
    psdb_pipeline *base = base_pso(dev, &g, PSDB_FORMAT_R8G8B8A8_UNORM, 4, 0);
    psdb_graphics_pipeline_desc variant = g.desc;
    variant.depth_stencil.depth_enable = 1;
    variant.depth_stencil.depth_func = 4;
    variant.rasterizer.slope_scaled_depth_bias = -0.0f; /* differs from 0.0 by its bits only */
    variant.sample_mask = 0x5;
    uint8_t kb[32], kv[32], key_base[32], key_variant[32];
    psdb_derivation d, back;
    psdb_derivation_writer *w = NULL;
    /* One base for both: they differ in derivable states only. */
    ck_assert_hr(psdb_derivation_base_key(&g.desc, kb), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_base_key(&variant, kv), PSDB_S_OK);
    ck_assert_mem_eq(kb, kv, 32);
    /* The states that differ, in type order; the keys are the caller's. */
    memset(&d, 0xEE, sizeof(d));
    ck_assert_hr(psdb_derivation_diff(&g.desc, &variant, &d), PSDB_S_OK);
    ck_assert_uint_eq(d.count, 3);
    ck_assert_uint_eq(d.descs[0].type, PSDB_DERIVED_STATE_DEPTH_STENCIL);
    ck_assert_uint_eq(d.descs[1].type, PSDB_DERIVED_STATE_RASTERIZER);
    ck_assert_uint_eq(d.descs[2].type, PSDB_DERIVED_STATE_SAMPLE_MASK);
    ck_assert_uint_eq(d.key[0], 0xEE);
    psdb_derivation none;
    ck_assert_hr(psdb_derivation_diff(&g.desc, &g.desc, &none), PSDB_S_OK);
    ck_assert_uint_eq(none.count, 0);
    /* Written, read back by the records reader, and derived: the PSO is the variant. */
    ck_assert_hr(psdb_sodb_graphics_key(&g.desc, key_base), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_graphics_key(&variant, key_variant), PSDB_S_OK);
    memcpy(d.key, key_variant, 32);
    memcpy(d.base_key, key_base, 32);
    ck_assert_hr(psdb_derivation_writer_create(&w), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_writer_add_base(w, key_base), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_S_OK);
    size_t size = psdb_derivation_writer_get_serialized_size(w);
    ck_assert_uint_eq(size, 32 + 32 + 40 + 4 * (14 + 11 + 1));
    uint8_t *blob = malloc(size);
    ck_assert_hr(psdb_derivation_writer_serialize(w, blob, size), PSDB_S_OK);
    uint32_t count = 0;
    size_t cursor = 0;
    ck_assert_hr(psdb_derivation_records_validate(blob, size, &count), PSDB_S_OK);
    ck_assert_uint_eq(count, 1);
    ck_assert_hr(psdb_derivation_records_next(blob, size, &cursor, &back), PSDB_S_OK);
    ck_assert_mem_eq(back.key, key_variant, 32);
    ck_assert_mem_eq(back.base_key, key_base, 32);
    ck_assert_uint_eq(back.count, 3);
    psdb_pipeline *p = NULL;
    ck_assert_hr(
        psdb_device_create_derived_graphics_pipeline(dev, base, back.count, back.descs, &p),
        PSDB_S_OK);
    assert_described_by(dev, p, &variant, &g.desc);
    ck_assert_hr(psdb_derivation_records_next(blob, size, &cursor, &back), PSDB_S_FALSE);
    free(blob);
    psdb_derivation_writer_release(w);
    psdb_pipeline_release(p);
    psdb_pipeline_release(base);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_derived_pso__base_set_base_key_keeps_other_exports_apart)
{
    rt_graphics g;
    rt_graphics_init(&g, 0, NULL);
    psdb_graphics_pipeline_desc d = g.desc;
    uint8_t k0[32], k1[32];
    ck_assert_hr(psdb_derivation_base_key(&g.desc, k0), PSDB_S_OK);
    /* Each derivable state alone keeps the base. */
    d.blend.render_target[0].logic_op = 3;
    d.rasterizer.cull_mode = 1;
    d.shader_limits.max_waves_per_cu = 4;
    ck_assert_hr(psdb_derivation_base_key(&d, k1), PSDB_S_OK);
    ck_assert_mem_eq(k0, k1, 32);
    /* Blending a unorm target needs a float export (V3): a derivation would fail V4. */
    d.blend.render_target[0].blend_enable = 1;
    ck_assert_hr(psdb_derivation_base_key(&d, k1), PSDB_S_OK);
    ck_assert_mem_ne(k0, k1, 32);
    /* What a derivation cannot change: another pixel shader, another depth format. */
    d = g.desc;
    d.ps.size--;
    ck_assert_hr(psdb_derivation_base_key(&d, k1), PSDB_S_OK);
    ck_assert_mem_ne(k0, k1, 32);
    d = g.desc;
    d.dsv_format = PSDB_FORMAT_D32_FLOAT;
    ck_assert_hr(psdb_derivation_base_key(&d, k1), PSDB_S_OK);
    ck_assert_mem_ne(k0, k1, 32);
    ck_assert_hr(psdb_derivation_base_key(NULL, k1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_base_key(&d, NULL), PSDB_E_INVALIDARG);
    d.vs.code = NULL; /* with a size: no encoding holds it */
    ck_assert_hr(psdb_derivation_base_key(&d, k1), PSDB_E_INVALIDARG);
}
END_TEST

START_TEST(test_derived_pso__base_set_records_writer_refuses_bad_input)
{
    psdb_derivation_writer *w = NULL;
    static const uint8_t a[32] = {1}, b[32] = {2};
    psdb_derivation d;
    memset(&d, 0, sizeof(d));
    memcpy(d.key, b, 32);
    memcpy(d.base_key, a, 32);
    ck_assert_hr(psdb_derivation_writer_create(NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_writer_create(&w), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_NOT_FOUND); /* no base yet */
    ck_assert_hr(psdb_derivation_writer_add_base(w, a), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_writer_add_base(w, a), PSDB_E_ALREADY_EXISTS);
    ck_assert_hr(psdb_derivation_writer_add_base(w, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_writer_add_base(NULL, b), PSDB_E_INVALIDARG);
    d.count = 2;
    d.descs[0].type = PSDB_DERIVED_STATE_BLEND;
    d.descs[1].type = PSDB_DERIVED_STATE_RASTERIZER; /* out of order */
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_INVALIDARG);
    d.descs[1].type = PSDB_DERIVED_STATE_BLEND; /* twice */
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_INVALIDARG);
    d.count = 1;
    d.descs[0].type = 5; /* no such state */
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_INVALIDARG);
    d.count = 6;
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_writer_add(w, NULL), PSDB_E_INVALIDARG);
    memcpy(d.base_key, b, 32); /* a key that is no base */
    d.count = 0;
    ck_assert_hr(psdb_derivation_writer_add(w, &d), PSDB_E_NOT_FOUND);
    /* Nothing of the refused calls was added: one base, no record. */
    size_t size = psdb_derivation_writer_get_serialized_size(w);
    ck_assert_uint_eq(size, 32 + 32);
    uint8_t blob[64];
    uint32_t count = 9;
    ck_assert_hr(psdb_derivation_writer_serialize(w, blob, size - 1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_writer_serialize(w, NULL, size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_derivation_writer_serialize(w, blob, size), PSDB_S_OK);
    ck_assert_hr(psdb_derivation_records_validate(blob, size, &count), PSDB_S_OK);
    ck_assert_uint_eq(count, 0);
    ck_assert_uint_eq(psdb_derivation_writer_get_serialized_size(NULL), 0);
    ck_assert_hr(psdb_derivation_diff(NULL, NULL, &d), PSDB_E_INVALIDARG);
    psdb_derivation_writer_release(w);
    psdb_derivation_writer_release(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("derived_pso");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_derived_pso__V1_each_overridable_state);
    tcase_add_test(tc, test_derived_pso__V1_bad_arguments);
    tcase_add_test(tc, test_derived_pso__V2_no_compile_and_no_psdb_lookup);
    tcase_add_test(tc, test_derived_pso__V4_seed_example_1_blend_needs_alpha);
    tcase_add_test(tc, test_derived_pso__V4_seed_example_2_blend_needs_float);
    tcase_add_test(tc, test_derived_pso__V4_seed_example_3_write_mask_widens);
    tcase_add_test(tc, test_derived_pso__base_set_diff_and_records_derive_the_recorded_pso);
    tcase_add_test(tc, test_derived_pso__base_set_base_key_keeps_other_exports_apart);
    tcase_add_test(tc, test_derived_pso__base_set_records_writer_refuses_bad_input);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
