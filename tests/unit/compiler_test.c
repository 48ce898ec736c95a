/* compiler_test.c - the reference compiler: export types (MODEL V3), validation, value keys,
 * deterministic compiles, pipeline-state streams. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "build/compile_sodb.h"
#include "driver/compiler.h"
#include "format/desc.h"
#include "build/synth.h"

static const uint8_t RS[] = {1, 2, 3, 4};
static const uint8_t RS2[] = {9, 9, 9};
static const uint8_t VS[] = "vs bytecode";
static const uint8_t PS[] = "ps bytecode";
static const uint8_t PS2[] = "another ps";
static const uint8_t GS[] = "gs bytecode";
static const uint8_t CS[] = "cs bytecode";

#define R PSDB__COMP_R
#define G PSDB__COMP_G
#define B PSDB__COMP_B
#define A PSDB__COMP_A

/* One render target written by a PS with `components` float components. */
static psdb_graphics_pipeline_desc one_target(uint32_t format, uint32_t components)
{
    psdb_graphics_pipeline_desc d = {.root_signature = RS,
                                     .root_signature_size = sizeof(RS),
                                     .vs = {VS, sizeof(VS)},
                                     .ps = {PS, sizeof(PS)},
                                     .sample_mask = UINT32_MAX,
                                     .num_render_targets = 1,
                                     .rtv_formats = {format},
                                     .sample_count = 1,
                                     .ps_outputs = {{components, PSDB_COMPONENT_FLOAT}}};
    return d;
}

static psdb__export export0(const psdb_graphics_pipeline_desc *d)
{
    psdb__export e[PSDB_MAX_RENDER_TARGETS];
    psdb__export_types(d, e);
    return e[0];
}

#define ck_assert_export(d, want_type, want_comp)                                                  \
    do {                                                                                           \
        psdb__export e_ = export0(d);                                                              \
        ck_assert_uint_eq(e_.type, (want_type));                                                   \
        ck_assert_uint_eq(e_.components, (want_comp));                                             \
    } while (0)

static void enable_blend(psdb_graphics_pipeline_desc *d, uint32_t src, uint32_t dest)
{
    d->blend.render_target[0].blend_enable = 1;
    d->blend.render_target[0].src_blend = src;
    d->blend.render_target[0].dest_blend = dest;
    d->blend.render_target[0].blend_op = PSDB_BLEND_OP_ADD;
    d->blend.render_target[0].src_blend_alpha = PSDB_BLEND_ONE;
    d->blend.render_target[0].dest_blend_alpha = PSDB_BLEND_ZERO;
    d->blend.render_target[0].blend_op_alpha = PSDB_BLEND_OP_ADD;
}

/* Seed 003, example 1: float4 into R32G32_FLOAT, no blending -> RG of 32-bit float. */
START_TEST(test_compiler__V3_example1_base_float32_rg)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G);
}
END_TEST

/* Example 1, derived: blending with source alpha (destination factor one) needs alpha. */
START_TEST(test_compiler__V3_example1_derived_src_alpha_blend_needs_alpha)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    enable_blend(&d, PSDB_BLEND_SRC_ALPHA, PSDB_BLEND_ONE);
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G | A);
    psdb_graphics_pipeline_desc b = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    ck_assert_uint_ne(export0(&b).components, export0(&d).components);
}
END_TEST

/* Example 2: float4 into R16G16B16A16_UNORM -> RGBA UNORM16; with blending -> FLOAT16. */
START_TEST(test_compiler__V3_example2_base_unorm16)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R16G16B16A16_UNORM, 4);
    ck_assert_export(&d, PSDB__EXPORT_UNORM16, R | G | B | A);
}
END_TEST

START_TEST(test_compiler__V3_example2_derived_blend_forces_float16)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R16G16B16A16_UNORM, 4);
    enable_blend(&d, PSDB_BLEND_ONE, PSDB_BLEND_ONE);
    ck_assert_export(&d, PSDB__EXPORT_FLOAT16, R | G | B | A);
}
END_TEST

/* Example 3: float2 into R32G32_FLOAT with write mask RED -> R only; mask ALL -> RG. */
START_TEST(test_compiler__V3_example3_base_mask_red)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32G32_FLOAT, 2);
    d.blend.render_target[0].render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_RED;
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R);
}
END_TEST

START_TEST(test_compiler__V3_example3_derived_mask_all)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32G32_FLOAT, 2);
    d.blend.render_target[0].render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_ALL;
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G);
    d.blend.render_target[0].render_target_write_mask = 0; /* 0 reads as ALL */
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G);
}
END_TEST

START_TEST(test_compiler__V3_smallest_type_per_format)
{
    static const struct {
        uint32_t format, type, comp;
    } cases[] = {
        {PSDB_FORMAT_R8G8B8A8_UNORM, PSDB__EXPORT_UNORM16, R | G | B | A},
        {PSDB_FORMAT_R8G8B8A8_UNORM_SRGB, PSDB__EXPORT_UNORM16, R | G | B | A},
        {PSDB_FORMAT_B8G8R8A8_UNORM, PSDB__EXPORT_UNORM16, R | G | B | A},
        {PSDB_FORMAT_R32_UINT, PSDB__EXPORT_UINT32, R},
        {PSDB_FORMAT_R16_SINT, PSDB__EXPORT_SINT16, R},
        {PSDB_FORMAT_R8_UINT, PSDB__EXPORT_UINT16, R},
        {PSDB_FORMAT_R32G32B32A32_SINT, PSDB__EXPORT_SINT32, R | G | B | A},
        {PSDB_FORMAT_R11G11B10_FLOAT, PSDB__EXPORT_FLOAT16, R | G | B},
        {PSDB_FORMAT_R10G10B10A2_UNORM, PSDB__EXPORT_UNORM16, R | G | B | A},
        {PSDB_FORMAT_R8G8_SNORM, PSDB__EXPORT_SNORM16, R | G},
        {PSDB_FORMAT_R16G16B16A16_FLOAT, PSDB__EXPORT_FLOAT16, R | G | B | A},
        {PSDB_FORMAT_R32G32B32A32_FLOAT, PSDB__EXPORT_FLOAT32, R | G | B | A},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        psdb_graphics_pipeline_desc d = one_target(cases[i].format, 4);
        psdb__export e = export0(&d);
        ck_assert_msg(e.type == cases[i].type && e.components == cases[i].comp,
                      "format %u: got type %u comp %u", cases[i].format, e.type, e.components);
    }
}
END_TEST

START_TEST(test_compiler__V3_unknown_or_unwritten_target_none)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_UNKNOWN, 4);
    ck_assert_export(&d, PSDB__EXPORT_NONE, 0);
    d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 0); /* the PS does not write SV_Target0 */
    ck_assert_export(&d, PSDB__EXPORT_NONE, 0);
    d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    d.num_render_targets = 0; /* beyond the render-target count */
    ck_assert_export(&d, PSDB__EXPORT_NONE, 0);
    d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    d.ps = (psdb_shader){NULL, 0}; /* no pixel shader */
    ck_assert_export(&d, PSDB__EXPORT_NONE, 0);
    d = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    d.blend.render_target[0].render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_BLUE;
    ck_assert_export(&d, PSDB__EXPORT_NONE, 0); /* nothing survives the mask */
}
END_TEST

START_TEST(test_compiler__V3_alpha_to_coverage_exports_rt0_alpha)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    d.blend.alpha_to_coverage_enable = 1;
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G | A);
    d = one_target(PSDB_FORMAT_R32G32_FLOAT, 3); /* alpha not written: nothing to export */
    d.blend.alpha_to_coverage_enable = 1;
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G);
}
END_TEST

START_TEST(test_compiler__V3_blend_rules)
{
    /* Blending on an integer target is ignored. */
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R32_UINT, 1);
    enable_blend(&d, PSDB_BLEND_ONE, PSDB_BLEND_ONE);
    ck_assert_export(&d, PSDB__EXPORT_UINT32, R);
    /* 8-bit unorm with blending: FLOAT16. */
    d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    enable_blend(&d, PSDB_BLEND_SRC_ALPHA, PSDB_BLEND_INV_SRC_ALPHA);
    ck_assert_export(&d, PSDB__EXPORT_FLOAT16, R | G | B | A);
    /* Independent blend off: target 0's state applies to target 1. */
    d.num_render_targets = 2;
    d.rtv_formats[1] = PSDB_FORMAT_R32_FLOAT;
    d.ps_outputs[1] = (psdb_ps_output){4, PSDB_COMPONENT_FLOAT};
    psdb__export e[PSDB_MAX_RENDER_TARGETS];
    psdb__export_types(&d, e);
    ck_assert_uint_eq(e[1].type, PSDB__EXPORT_FLOAT32);
    ck_assert_uint_eq(e[1].components, R | A); /* INV_SRC_ALPHA needs alpha */
    d.blend.independent_blend_enable = 1;
    psdb__export_types(&d, e);
    ck_assert_uint_eq(e[1].components, R);
    /* An alpha-only use of source alpha counts too. */
    d = one_target(PSDB_FORMAT_R32G32_FLOAT, 4);
    enable_blend(&d, PSDB_BLEND_ONE, PSDB_BLEND_ONE);
    d.blend.render_target[0].dest_blend_alpha = PSDB_BLEND_SRC_ALPHA_SAT;
    ck_assert_export(&d, PSDB__EXPORT_FLOAT32, R | G | A);
}
END_TEST

/* ---- Validation ------------------------------------------------------------------------------ */

START_TEST(test_compiler__plan_rejects_invalid)
{
    psdb__plan p = {0};
    psdb_graphics_pipeline_desc d;
    d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    ck_assert_hr(psdb__plan_graphics(&d, &p), PSDB_S_OK);
    psdb__plan_free(&p);

#define EXPECT_BAD(...)                                                                            \
    do {                                                                                           \
        d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);                                             \
        __VA_ARGS__;                                                                               \
        ck_assert_hr(psdb__plan_graphics(&d, &p), PSDB_E_INVALIDARG);                              \
        ck_assert_uint_eq(p.num_units, 0);                                                         \
    } while (0)
    EXPECT_BAD(d.root_signature = NULL);
    EXPECT_BAD(d.root_signature_size = 0);
    EXPECT_BAD(d.vs = (psdb_shader){NULL, 0});
    EXPECT_BAD(d.ps.size = 0); /* empty bytecode */
    EXPECT_BAD(d.gs = (psdb_shader){NULL, 5});
    EXPECT_BAD(d.hs = (psdb_shader){GS, sizeof(GS)}); /* HS without DS */
    EXPECT_BAD(d.num_render_targets = 9);
    EXPECT_BAD(d.rtv_formats[3] = PSDB_FORMAT_R8G8B8A8_UNORM); /* beyond the count */
    EXPECT_BAD(d.rtv_formats[0] = PSDB_FORMAT_D32_FLOAT);
    EXPECT_BAD(d.rtv_formats[0] = 999);
    EXPECT_BAD(d.dsv_format = PSDB_FORMAT_R8G8B8A8_UNORM);
    EXPECT_BAD(d.ps_outputs[0].components = 5);
    EXPECT_BAD(d.ps_outputs[2].type = 3);
    EXPECT_BAD(d.input_layout = ((psdb_input_layout_desc){NULL, 1}));
#undef EXPECT_BAD
    ck_assert_hr(psdb__plan_graphics(NULL, &p), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__plan_graphics(&d, NULL), PSDB_E_INVALIDARG);

    psdb_compute_pipeline_desc c = {RS, sizeof(RS), {CS, sizeof(CS)}, NULL};
    ck_assert_hr(psdb__plan_compute(&c, &p), PSDB_S_OK);
    ck_assert_uint_eq(p.num_units, 2);
    ck_assert_uint_eq(p.units[0].kind, PSDB__UNIT_CS);
    ck_assert_uint_eq(p.units[1].kind, PSDB__UNIT_PIPELINE);
    psdb__plan_free(&p);
    c.cs = (psdb_shader){NULL, 0};
    ck_assert_hr(psdb__plan_compute(&c, &p), PSDB_E_INVALIDARG);
    c = (psdb_compute_pipeline_desc){NULL, 0, {CS, sizeof(CS)}, NULL};
    ck_assert_hr(psdb__plan_compute(&c, &p), PSDB_E_INVALIDARG);
    psdb__plan_free(NULL);
}
END_TEST

/* ---- Keys ------------------------------------------------------------------------------------ */

static psdb__plan plan_g(const psdb_graphics_pipeline_desc *d)
{
    psdb__plan p = {0};
    ck_assert_hr(psdb__plan_graphics(d, &p), PSDB_S_OK);
    return p;
}

static const psdb__unit *unit_of(const psdb__plan *p, uint32_t kind)
{
    for (uint32_t i = 0; i < p->num_units; i++)
        if (p->units[i].kind == kind)
            return &p->units[i];
    return NULL;
}

#define KEY(p, kind) (unit_of(&(p), (kind))->key)
#define SAME_KEY(a, b, kind) (memcmp(KEY(a, kind), KEY(b, kind), PSDB__KEY_SIZE) == 0)

START_TEST(test_compiler__keys_shared_across_pipelines)
{
    psdb_graphics_pipeline_desc d1 = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    psdb_graphics_pipeline_desc d2 = d1;
    d2.depth_stencil.depth_enable = 1; /* state that does not change shader code */
    d2.rasterizer.cull_mode = 1;
    d2.sample_mask = 0xF;
    psdb__plan p1 = plan_g(&d1), p2 = plan_g(&d2);
    ck_assert_uint_eq(p1.num_units, 3);
    ck_assert(SAME_KEY(p1, p2, PSDB__UNIT_VS));
    ck_assert(SAME_KEY(p1, p2, PSDB__UNIT_PS));
    ck_assert(!SAME_KEY(p1, p2, PSDB__UNIT_PIPELINE));
    ck_assert(memcmp(p1.group_key, p2.group_key, 32) != 0);

    /* The group key is the SHA-256 of the encoding. */
    psdb__buf enc = {0};
    uint8_t h[32];
    ck_assert_hr(psdb__desc_encode_graphics(&d1, &enc), PSDB_S_OK);
    psdb__sha256(enc.data, enc.len, h);
    ck_assert_mem_eq(h, p1.group_key, 32);
    psdb__buf_free(&enc);

    /* Another PS: the VS is still shared. */
    psdb_graphics_pipeline_desc d3 = d1;
    d3.ps = (psdb_shader){PS2, sizeof(PS2)};
    psdb__plan p3 = plan_g(&d3);
    ck_assert(SAME_KEY(p1, p3, PSDB__UNIT_VS));
    ck_assert(!SAME_KEY(p1, p3, PSDB__UNIT_PS));
    psdb__plan_free(&p1);
    psdb__plan_free(&p2);
    psdb__plan_free(&p3);
}
END_TEST

START_TEST(test_compiler__keys_follow_code_changing_state)
{
    psdb_graphics_pipeline_desc base = one_target(PSDB_FORMAT_R16G16B16A16_UNORM, 4);
    psdb__plan pb = plan_g(&base);

    /* Blending changes the PS export (V3), hence the PS key, not the VS key. */
    psdb_graphics_pipeline_desc blend = base;
    enable_blend(&blend, PSDB_BLEND_ONE, PSDB_BLEND_ONE);
    psdb__plan p = plan_g(&blend);
    ck_assert(!SAME_KEY(pb, p, PSDB__UNIT_PS));
    ck_assert(SAME_KEY(pb, p, PSDB__UNIT_VS));
    ck_assert_uint_eq(unit_of(&p, PSDB__UNIT_PS)->exports[0].type, PSDB__EXPORT_FLOAT16);
    psdb__plan_free(&p);

    /* The input layout changes the VS only. */
    psdb_input_element_desc el = {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0};
    psdb_graphics_pipeline_desc il = base;
    il.input_layout = (psdb_input_layout_desc){&el, 1};
    p = plan_g(&il);
    ck_assert(!SAME_KEY(pb, p, PSDB__UNIT_VS));
    ck_assert(SAME_KEY(pb, p, PSDB__UNIT_PS));
    psdb__plan_free(&p);

    /* The root signature changes every stage. */
    psdb_graphics_pipeline_desc rs = base;
    rs.root_signature = RS2;
    rs.root_signature_size = sizeof(RS2);
    p = plan_g(&rs);
    ck_assert(!SAME_KEY(pb, p, PSDB__UNIT_VS));
    ck_assert(!SAME_KEY(pb, p, PSDB__UNIT_PS));
    psdb__plan_free(&p);

    /* Stream output changes the last pre-rasterization stage: the VS without a GS... */
    psdb_so_declaration_entry so = {0, "SV_POSITION", 0, 0, 4, 0};
    uint32_t stride = 16;
    psdb_graphics_pipeline_desc s1 = base;
    s1.stream_output = (psdb_stream_output_desc){&so, 1, &stride, 1, 0};
    p = plan_g(&s1);
    ck_assert(!SAME_KEY(pb, p, PSDB__UNIT_VS));
    psdb__plan_free(&p);
    /* ... and the GS, not the VS, when there is one. */
    psdb_graphics_pipeline_desc g0 = base, g1 = s1;
    g0.gs = g1.gs = (psdb_shader){GS, sizeof(GS)};
    psdb__plan q0 = plan_g(&g0), q1 = plan_g(&g1);
    ck_assert(SAME_KEY(q0, q1, PSDB__UNIT_VS));
    ck_assert(!SAME_KEY(q0, q1, PSDB__UNIT_GS));
    psdb__plan_free(&q0);
    psdb__plan_free(&q1);

    /* Same bytes in another stage get another key. */
    psdb_graphics_pipeline_desc same = base;
    same.ps = same.vs;
    p = plan_g(&same);
    ck_assert(memcmp(KEY(p, PSDB__UNIT_VS), KEY(p, PSDB__UNIT_PS), 32) != 0);
    psdb__plan_free(&p);
    psdb__plan_free(&pb);
}
END_TEST

START_TEST(test_compiler__plan_encoded_matches_live_plan)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    psdb__buf enc = {0};
    psdb__plan live = {0}, coded = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&d, &enc), PSDB_S_OK);
    ck_assert_hr(psdb__plan_graphics(&d, &live), PSDB_S_OK);
    ck_assert_hr(psdb__plan_encoded(PSDB_SODB_GRAPHICS, enc.data, enc.len, &coded), PSDB_S_OK);
    psdb__buf_free(&enc); /* the plan keeps its own copy */
    ck_assert_mem_eq(live.group_key, coded.group_key, 32);
    ck_assert_uint_eq(live.num_units, coded.num_units);
    for (uint32_t i = 0; i < live.num_units; i++) {
        ck_assert_mem_eq(live.units[i].key, coded.units[i].key, 32);
        ck_assert_uint_eq(live.units[i].code_size, coded.units[i].code_size);
        ck_assert_mem_eq(live.units[i].code, coded.units[i].code, live.units[i].code_size);
    }
    psdb__plan_free(&coded);
    ck_assert_hr(psdb__plan_encoded(PSDB_SODB_COMPUTE, "junk", 4, &coded), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__plan_encoded(9, "junk", 4, &coded), PSDB_E_CACHE_CORRUPT);
    psdb__plan_free(&live);
    psdb__plan_free(&coded);
}
END_TEST

START_TEST(test_compiler__state_object_units)
{
    const uint8_t lib_code[] = "library";
    const char *exports[] = {"RayGen"};
    psdb_dxil_library_desc lib = {{lib_code, sizeof(lib_code)}, exports, 1};
    psdb_shader grs = {RS, sizeof(RS)};
    psdb_state_subobject subs[] = {{PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &grs},
                                   {PSDB_SUBOBJECT_DXIL_LIBRARY, &lib}};
    psdb_state_object_desc d = {PSDB_STATE_OBJECT_COLLECTION, 2, subs};
    psdb__plan p = {0}, q = {0};
    ck_assert_hr(psdb__plan_state_object(&d, &p), PSDB_S_OK);
    ck_assert_uint_eq(p.num_units, 2);
    ck_assert_uint_eq(p.units[0].kind, PSDB__UNIT_LIBRARY);
    ck_assert_uint_eq(p.units[1].kind, PSDB__UNIT_STATE_OBJECT);
    /* The same library in a raytracing pipeline: same library key, other object key. */
    d.type = PSDB_STATE_OBJECT_RAYTRACING_PIPELINE;
    ck_assert_hr(psdb__plan_state_object(&d, &q), PSDB_S_OK);
    ck_assert_mem_eq(p.units[0].key, q.units[0].key, 32);
    ck_assert(memcmp(p.group_key, q.group_key, 32) != 0);
    psdb__plan_free(&q);
    d.type = 4;
    ck_assert_hr(psdb__plan_state_object(&d, &q), PSDB_E_INVALIDARG);
    d.type = PSDB_STATE_OBJECT_COLLECTION;
    subs[0].desc = NULL;
    ck_assert_hr(psdb__plan_state_object(&d, &q), PSDB_E_INVALIDARG);
    psdb__plan_free(&p);
}
END_TEST

/* ---- Compiling ------------------------------------------------------------------------------- */

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(test_compiler__compile_deterministic_and_per_target)
{
    psdb_graphics_pipeline_desc d = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    psdb__plan p = plan_g(&d);
    psdb_target t1 = {"contoso-gfx9", 7, PSDB_VERSION(1, 0, 0, 0), 0};
    psdb_target t2 = {"contoso-gfx10", 7, PSDB_VERSION(1, 0, 0, 0), 0};
    psdb__buf oc1 = {0}, md1 = {0}, oc2 = {0}, md2 = {0}, oc3 = {0}, md3 = {0};
    const psdb__unit *ps = unit_of(&p, PSDB__UNIT_PS);
    ck_assert_hr(psdb__compile_unit(ps, &t1, PSDB_COMPILE_COST_FREE, &oc1, &md1), PSDB_S_OK);
    ck_assert_hr(psdb__compile_unit(ps, &t1, PSDB_COMPILE_COST_FREE, &oc2, &md2), PSDB_S_OK);
    ck_assert_uint_eq(oc1.len, oc2.len);
    ck_assert_mem_eq(oc1.data, oc2.data, oc1.len);
    ck_assert_mem_eq(md1.data, md2.data, md1.len);
    ck_assert_hr(psdb__compile_unit(ps, &t2, PSDB_COMPILE_COST_FREE, &oc3, &md3), PSDB_S_OK);
    ck_assert(oc1.len == oc3.len && memcmp(oc1.data, oc3.data, oc1.len) != 0);
    /* Object code: 64-byte header + 1.25x body + PS export patch; metadata: 148 + family. */
    size_t body = (ps->code_size + 3) / 4 * 5;
    ck_assert_uint_eq(oc1.len, 64 + body + 64);
    ck_assert_mem_eq(oc1.data, "PSOC", 4);
    ck_assert_uint_eq(md1.len, 148 + strlen(t1.family));
    ck_assert_mem_eq(md1.data, "PSMD", 4);
    ck_assert_uint_eq(psdb__le32(md1.data + 8), PSDB__UNIT_PS);
    ck_assert_mem_eq(md1.data + 16, ps->key, 32);
    ck_assert_uint_eq(psdb__le64(md1.data + 48), ps->code_size);
    ck_assert_uint_eq(psdb__le64(md1.data + 56), oc1.len);
    ck_assert_uint_eq(psdb__le64(md1.data + 64), 7);
    ck_assert_uint_eq(psdb__le32(md1.data + 80), PSDB__EXPORT_UNORM16);
    ck_assert_uint_eq(psdb__le32(md1.data + 84), 15);
    psdb__buf_free(&oc1);
    psdb__buf_free(&md1);
    psdb__buf_free(&oc2);
    psdb__buf_free(&md2);
    psdb__buf_free(&oc3);
    psdb__buf_free(&md3);
    psdb_target bad = {"", 7, 0, 0};
    ck_assert_hr(psdb__compile_unit(ps, &bad, 0, &oc1, &md1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__compile_unit(ps, NULL, 0, &oc1, &md1), PSDB_E_INVALIDARG);
    psdb__plan_free(&p);
}
END_TEST

START_TEST(test_compiler__compile_cost_scales_with_size)
{
    static uint8_t code[4096];
    psdb__unit u = {.kind = PSDB__UNIT_CS, .code = code, .code_size = sizeof(code)};
    psdb_target t = {"contoso-gfx9", 7, 0, 0};
    psdb__buf oc = {0}, md = {0};
    /* 5 ms per KiB x 4 KiB = 20 ms. */
    double t0 = seconds_now();
    ck_assert_hr(psdb__compile_unit(&u, &t, 5000000, &oc, &md), PSDB_S_OK);
    double spent = seconds_now() - t0;
    ck_assert_msg(spent >= 0.020, "compile took %f s, want >= 0.020", spent);
    psdb__buf_free(&oc);
    psdb__buf_free(&md);
    t0 = seconds_now();
    ck_assert_hr(psdb__compile_unit(&u, &t, PSDB_COMPILE_COST_FREE, &oc, &md), PSDB_S_OK);
    ck_assert_msg(seconds_now() - t0 < 0.020, "free compile took too long");
    psdb__buf_free(&oc);
    psdb__buf_free(&md);
}
END_TEST

/* ---- Streams --------------------------------------------------------------------------------- */

START_TEST(test_compiler__stream_to_desc)
{
    psdb_shader rs = {RS, sizeof(RS)}, vs = {VS, sizeof(VS)}, ps = {PS, sizeof(PS)};
    psdb_shader cs = {CS, sizeof(CS)};
    psdb_render_targets_desc rts = {1, {PSDB_FORMAT_R8G8B8A8_UNORM}};
    psdb_ps_output outs[PSDB_MAX_RENDER_TARGETS] = {{4, PSDB_COMPONENT_FLOAT}};
    psdb_session_subobject sess = {NULL, 0};
    psdb_stream_subobject g[] = {{PSDB_STREAM_ROOT_SIGNATURE, &rs},
                                 {PSDB_STREAM_VS, &vs},
                                 {PSDB_STREAM_PS, &ps},
                                 {PSDB_STREAM_RENDER_TARGETS, &rts},
                                 {PSDB_STREAM_PS_OUTPUTS, outs},
                                 {PSDB_STREAM_PSDB, &sess}};
    psdb_pipeline_stream_desc s = {g, 6};
    psdb_compute_pipeline_desc cd;
    psdb_graphics_pipeline_desc gd;
    int is_compute = -1;
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_S_OK);
    ck_assert_int_eq(is_compute, 0);
    ck_assert_ptr_eq(gd.vs.code, VS);
    ck_assert_uint_eq(gd.num_render_targets, 1);
    ck_assert_uint_eq(gd.sample_mask, UINT32_MAX);
    ck_assert_uint_eq(gd.sample_count, 1);
    ck_assert_ptr_eq(gd.psdb, &sess);
    /* The stream plans like the same description built directly. */
    psdb_graphics_pipeline_desc direct = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    psdb__plan a = plan_g(&gd), b = plan_g(&direct);
    ck_assert_mem_eq(a.group_key, b.group_key, 32);
    psdb__plan_free(&a);
    psdb__plan_free(&b);

    psdb_stream_subobject c[] = {{PSDB_STREAM_ROOT_SIGNATURE, &rs}, {PSDB_STREAM_CS, &cs}};
    s = (psdb_pipeline_stream_desc){c, 2};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_S_OK);
    ck_assert_int_eq(is_compute, 1);
    ck_assert_ptr_eq(cd.cs.code, CS);
    ck_assert_uint_eq(cd.root_signature_size, sizeof(RS));

    psdb_stream_subobject dup[] = {{PSDB_STREAM_VS, &vs}, {PSDB_STREAM_VS, &vs}};
    s = (psdb_pipeline_stream_desc){dup, 2};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_E_INVALIDARG);
    psdb_stream_subobject unknown[] = {{PSDB_STREAM_VS, &vs}, {99, &vs}};
    s = (psdb_pipeline_stream_desc){unknown, 2};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_E_INVALIDARG);
    psdb_stream_subobject mixed[] = {{PSDB_STREAM_CS, &cs}, {PSDB_STREAM_PS, &ps}};
    s = (psdb_pipeline_stream_desc){mixed, 2};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_E_INVALIDARG);
    psdb_stream_subobject nodata[] = {{PSDB_STREAM_VS, NULL}};
    s = (psdb_pipeline_stream_desc){nodata, 1};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_E_INVALIDARG);
    s = (psdb_pipeline_stream_desc){NULL, 1};
    ck_assert_hr(psdb__stream_to_desc(&s, &is_compute, &cd, &gd), PSDB_E_INVALIDARG);
}
END_TEST

/* ---- Whole SODBs ----------------------------------------------------------------------------- */

static const psdb_app_identity APP = {{"game.exe", "Game", PSDB_VERSION(1, 0, 0, 0), NULL, 0},
                                      {1, 2, 3}};
static const psdb_target TARGET = {"contoso-gfx9", 7, PSDB_VERSION(1, 0, 0, 0),
                                   PSDB_VERSION(2, 0, 0, 0)};

START_TEST(test_compiler__C4_compile_sodb_deterministic)
{
    char *dir = tu_mkdtemp(), *sodb = tu_path(dir, "s.sodb"), *sodb2 = tu_path(dir, "s2.sodb");
    char *a = tu_path(dir, "a.psdb"), *b = tu_path(dir, "b.psdb");
    psdb__synth_params sp = {.app_name = "Game",
                             .app_version = PSDB_VERSION(1, 0, 0, 0),
                             .pipelines = 80,
                             .seed = 3,
                             .variants = 4,
                             .compute_permille = 250};
    psdb__compile_stats st = {0};
    char err[256];
    ck_assert_hr(psdb__synth_write(&sp, sodb), PSDB_S_OK);
    ck_assert_hr(psdb__synth_write(&sp, sodb2), PSDB_S_OK);
    size_t n1 = 0, n2 = 0;
    char *f1 = tu_read_file(sodb, &n1), *f2 = tu_read_file(sodb2, &n2);
    ck_assert(n1 == n2 && memcmp(f1, f2, n1) == 0); /* synth is byte-identical */
    free(f1);
    free(f2);

    ck_assert_hr(
        psdb__compile_sodb(sodb, &TARGET, PSDB_COMPILE_COST_FREE, a, &st, err, sizeof(err)),
        PSDB_S_OK);
    ck_assert_uint_eq(st.pipelines, 80);
    ck_assert_uint_eq(st.compute, 20);
    ck_assert_uint_eq(st.graphics, 60);
    ck_assert_uint_lt(st.units_compiled, st.units); /* shaders are shared */
    ck_assert_hr(psdb__compile_sodb(sodb, &TARGET, PSDB_COMPILE_COST_FREE, b, NULL, NULL, 0),
                 PSDB_S_OK);
    f1 = tu_read_file(a, &n1);
    f2 = tu_read_file(b, &n2);
    ck_assert(n1 == n2 && memcmp(f1, f2, n1) == 0);
    free(f1);
    free(f2);

    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_file_open(a, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.num_groups, 80);
    ck_assert_uint_eq(info.num_values, st.units_compiled * 2);
    ck_assert_str_eq(info.identity.desc.name, "Game");
    ck_assert_str_eq(info.target.family, "contoso-gfx9");
    ck_assert_hr(psdb_file_verify(f, err, sizeof(err)), PSDB_S_OK);
    psdb_file_release(f);
    tu_rmtree(dir);
    free(sodb);
    free(sodb2);
    free(a);
    free(b);
    free(dir);
}
END_TEST

/* A PSDB compiled from a capture is a full hit for the same creations: the keys a device derives
 * from live descriptions are the keys `psdb compile` derives from their encodings. */
START_TEST(test_compiler__captured_creations_hit)
{
    char *dir = tu_mkdtemp(), *sodb = tu_path(dir, "s.sodb"), *out = tu_path(dir, "o.psdb");
    psdb_graphics_pipeline_desc g = one_target(PSDB_FORMAT_R8G8B8A8_UNORM, 4);
    psdb_compute_pipeline_desc c = {RS, sizeof(RS), {CS, sizeof(CS)}, NULL};
    psdb__buf eg = {0}, ec = {0};
    psdb_sodb_writer *w = NULL;
    ck_assert_hr(psdb__desc_encode_graphics(&g, &eg), PSDB_S_OK);
    ck_assert_hr(psdb__desc_encode_compute(&c, &ec), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_open(sodb, &APP, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_GRAPHICS, 1, eg.data, eg.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, ec.data, ec.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 2, ec.data, ec.len), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    psdb__compile_stats st = {0};
    ck_assert_hr(psdb__compile_sodb(sodb, &TARGET, PSDB_COMPILE_COST_FREE, out, &st, NULL, 0),
                 PSDB_S_OK);
    ck_assert_uint_eq(st.pipelines, 2);
    ck_assert_uint_eq(st.skipped, 1); /* the same object at a second version */

    psdb_file *f = NULL;
    ck_assert_hr(psdb_file_open(out, NULL, &f), PSDB_S_OK);
    psdb__plan pg = {0}, pc = {0};
    ck_assert_hr(psdb__plan_graphics(&g, &pg), PSDB_S_OK);
    ck_assert_hr(psdb__plan_compute(&c, &pc), PSDB_S_OK);
    const psdb__plan *plans[] = {&pg, &pc};
    for (int k = 0; k < 2; k++) {
        for (uint32_t i = 0; i < plans[k]->num_units; i++) {
            const psdb__unit *u = &plans[k]->units[i];
            psdb__buf oc = {0}, md = {0};
            ck_assert_hr(psdb__compile_unit(u, &TARGET, PSDB_COMPILE_COST_FREE, &oc, &md),
                         PSDB_S_OK);
            uint8_t buf[4096];
            size_t size = sizeof(buf);
            ck_assert_hr(psdb_file_find_value(f, u->key, 32, PSDB_VALUE_OBJECT_CODE, buf, &size),
                         PSDB_S_OK);
            ck_assert_uint_eq(size, oc.len);
            ck_assert_mem_eq(buf, oc.data, size);
            size = sizeof(buf);
            ck_assert_hr(psdb_file_find_value(f, u->key, 32, PSDB_VALUE_METADATA, buf, &size),
                         PSDB_S_OK);
            ck_assert_uint_eq(size, md.len);
            psdb__buf_free(&oc);
            psdb__buf_free(&md);
        }
    }
    psdb__plan_free(&pg);
    psdb__plan_free(&pc);
    psdb_file_release(f);
    psdb__buf_free(&eg);
    psdb__buf_free(&ec);
    tu_rmtree(dir);
    free(sodb);
    free(out);
    free(dir);
}
END_TEST

START_TEST(test_compiler__bad_entry_fails_with_its_index)
{
    char *dir = tu_mkdtemp(), *sodb = tu_path(dir, "s.sodb"), *out = tu_path(dir, "o.psdb");
    psdb_compute_pipeline_desc c = {RS, sizeof(RS), {CS, sizeof(CS)}, NULL};
    psdb_compute_pipeline_desc nocs = {RS, sizeof(RS), {NULL, 0}, NULL};
    psdb__buf ec = {0}, en = {0};
    const uint8_t junk[] = {'S', 'O', 'C', 'P', 1, 0, 0, 0, 0, 0, 0, 0, 0xFF};
    psdb_sodb_writer *w = NULL;
    char err[256];
    ck_assert_hr(psdb__desc_encode_compute(&c, &ec), PSDB_S_OK);
    ck_assert_hr(psdb__desc_encode_compute(&nocs, &en), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_open(sodb, &APP, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, ec.data, ec.len), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, junk, sizeof(junk)), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    ck_assert_hr(
        psdb__compile_sodb(sodb, &TARGET, PSDB_COMPILE_COST_FREE, out, NULL, err, sizeof(err)),
        PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(err, "entry 2") != NULL, "message: %s", err);
    ck_assert_int_ne(access(out, F_OK), 0);

    /* A description the planner rejects (compute without CS). */
    char *sodb2 = tu_path(dir, "s2.sodb");
    ck_assert_hr(psdb_sodb_writer_open(sodb2, &APP, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, en.data, en.len), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    ck_assert_hr(
        psdb__compile_sodb(sodb2, &TARGET, PSDB_COMPILE_COST_FREE, out, NULL, err, sizeof(err)),
        PSDB_E_INVALIDARG);
    ck_assert_msg(strstr(err, "entry 1") != NULL, "message: %s", err);
    psdb_target bad = {"", 7, 0, 0};
    ck_assert_hr(psdb__compile_sodb(sodb, &bad, 0, out, NULL, err, sizeof(err)), PSDB_E_INVALIDARG);
    psdb__buf_free(&ec);
    psdb__buf_free(&en);
    tu_rmtree(dir);
    free(sodb);
    free(sodb2);
    free(out);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compiler");
    TCase *tc = tcase_create("compiler");
    tcase_add_test(tc, test_compiler__V3_example1_base_float32_rg);
    tcase_add_test(tc, test_compiler__V3_example1_derived_src_alpha_blend_needs_alpha);
    tcase_add_test(tc, test_compiler__V3_example2_base_unorm16);
    tcase_add_test(tc, test_compiler__V3_example2_derived_blend_forces_float16);
    tcase_add_test(tc, test_compiler__V3_example3_base_mask_red);
    tcase_add_test(tc, test_compiler__V3_example3_derived_mask_all);
    tcase_add_test(tc, test_compiler__V3_smallest_type_per_format);
    tcase_add_test(tc, test_compiler__V3_unknown_or_unwritten_target_none);
    tcase_add_test(tc, test_compiler__V3_alpha_to_coverage_exports_rt0_alpha);
    tcase_add_test(tc, test_compiler__V3_blend_rules);
    tcase_add_test(tc, test_compiler__plan_rejects_invalid);
    tcase_add_test(tc, test_compiler__keys_shared_across_pipelines);
    tcase_add_test(tc, test_compiler__keys_follow_code_changing_state);
    tcase_add_test(tc, test_compiler__plan_encoded_matches_live_plan);
    tcase_add_test(tc, test_compiler__state_object_units);
    tcase_add_test(tc, test_compiler__compile_deterministic_and_per_target);
    tcase_add_test(tc, test_compiler__compile_cost_scales_with_size);
    tcase_add_test(tc, test_compiler__stream_to_desc);
    tcase_add_test(tc, test_compiler__C4_compile_sodb_deterministic);
    tcase_add_test(tc, test_compiler__captured_creations_hit);
    tcase_add_test(tc, test_compiler__bad_entry_fails_with_its_index);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
