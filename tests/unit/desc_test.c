/* desc_test.c - the SODB description encoding: round trips, exact bytes, malformed input. */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"

static const uint8_t RS[] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint8_t VS[] = "vertex shader bytecode";
static const uint8_t PS[] = "pixel shader bytecode, longer";
static const uint8_t GS[] = "geometry";
static const psdb_input_element_desc ELEMENTS[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0},
    {"TEXCOORD", 1, PSDB_FORMAT_R32G32_FLOAT, 0, 12, 0, 0},
};
static const psdb_so_declaration_entry SO_ENTRIES[] = {{0, "SV_POSITION", 0, 0, 4, 0}};
static const uint32_t SO_STRIDES[] = {16, 32};

static psdb_graphics_pipeline_desc rich_graphics(void)
{
    psdb_graphics_pipeline_desc d = {
        .root_signature = RS,
        .root_signature_size = sizeof(RS),
        .vs = {VS, sizeof(VS)},
        .ps = {PS, sizeof(PS)},
        .gs = {GS, sizeof(GS)},
        .stream_output = {SO_ENTRIES, 1, SO_STRIDES, 2, 0},
        .sample_mask = 0xFFFFFFFFu,
        .rasterizer = {.fill_mode = 3,
                       .cull_mode = 1,
                       .depth_bias = -5,
                       .depth_bias_clamp = 0.25f,
                       .slope_scaled_depth_bias = -1.5f,
                       .depth_clip_enable = 1},
        .depth_stencil = {.depth_enable = 1,
                          .depth_write_mask = 1,
                          .depth_func = 2,
                          .front_face = {1, 2, 3, 4},
                          .back_face = {5, 6, 7, 8}},
        .input_layout = {ELEMENTS, 2},
        .primitive_topology_type = 3,
        .num_render_targets = 2,
        .rtv_formats = {PSDB_FORMAT_R8G8B8A8_UNORM, PSDB_FORMAT_R16G16B16A16_FLOAT},
        .dsv_format = PSDB_FORMAT_D32_FLOAT,
        .sample_count = 4,
        .sample_quality = 1,
        .ps_outputs = {{4, PSDB_COMPONENT_FLOAT}, {3, PSDB_COMPONENT_FLOAT}},
        .shader_limits = {7, 0xF0},
    };
    d.blend.alpha_to_coverage_enable = 1;
    d.blend.independent_blend_enable = 1;
    d.blend.render_target[1] = (psdb_render_target_blend_desc){1,
                                                               0,
                                                               PSDB_BLEND_SRC_ALPHA,
                                                               PSDB_BLEND_INV_SRC_ALPHA,
                                                               PSDB_BLEND_OP_ADD,
                                                               PSDB_BLEND_ONE,
                                                               PSDB_BLEND_ZERO,
                                                               PSDB_BLEND_OP_ADD,
                                                               0,
                                                               PSDB_COLOR_WRITE_ENABLE_ALL};
    return d;
}

static void assert_shader_eq(psdb_shader a, psdb_shader b)
{
    ck_assert_uint_eq(a.size, b.size);
    if (a.size)
        ck_assert_mem_eq(a.code, b.code, a.size);
    else
        ck_assert_ptr_null(b.code);
}

START_TEST(test_desc__graphics_round_trip)
{
    psdb_graphics_pipeline_desc d = rich_graphics();
    psdb_session_subobject sub = {NULL, 0};
    d.psdb = &sub; /* never encoded */
    psdb__buf a = {0}, b = {0};
    psdb_graphics_pipeline_desc *g = NULL;

    ck_assert_hr(psdb__desc_encode_graphics(&d, &a), PSDB_S_OK);
    ck_assert_uint_eq(psdb__desc_kind(a.data, a.len), PSDB_SODB_GRAPHICS);
    ck_assert_hr(psdb__desc_decode_graphics(a.data, a.len, &g), PSDB_S_OK);
    ck_assert_ptr_null(g->psdb);
    ck_assert_uint_eq(g->root_signature_size, sizeof(RS));
    ck_assert_mem_eq(g->root_signature, RS, sizeof(RS));
    assert_shader_eq(d.vs, g->vs);
    assert_shader_eq(d.ps, g->ps);
    assert_shader_eq(d.gs, g->gs);
    assert_shader_eq(d.ds, g->ds);
    ck_assert_uint_eq(g->input_layout.num_elements, 2);
    ck_assert_str_eq(g->input_layout.elements[1].semantic_name, "TEXCOORD");
    ck_assert_uint_eq(g->input_layout.elements[1].aligned_byte_offset, 12);
    ck_assert_uint_eq(g->stream_output.num_entries, 1);
    ck_assert_str_eq(g->stream_output.entries[0].semantic_name, "SV_POSITION");
    ck_assert_uint_eq(g->stream_output.num_strides, 2);
    ck_assert_uint_eq(g->stream_output.buffer_strides[1], 32);
    ck_assert_int_eq(g->rasterizer.depth_bias, -5);
    ck_assert(g->rasterizer.slope_scaled_depth_bias == -1.5f);
    ck_assert_uint_eq(g->blend.render_target[1].dest_blend, PSDB_BLEND_INV_SRC_ALPHA);
    ck_assert_uint_eq(g->depth_stencil.back_face.stencil_func, 8);
    ck_assert_uint_eq(g->rtv_formats[1], PSDB_FORMAT_R16G16B16A16_FLOAT);
    ck_assert_uint_eq(g->ps_outputs[1].components, 3);
    ck_assert_uint_eq(g->shader_limits.cu_enable_mask, 0xF0);
    /* Re-encoding the decoded description gives the same bytes. */
    ck_assert_hr(psdb__desc_encode_graphics(g, &b), PSDB_S_OK);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_mem_eq(a.data, b.data, a.len);
    free(g);
    psdb__buf_free(&a);
    psdb__buf_free(&b);
}
END_TEST

START_TEST(test_desc__booleans_normalised)
{
    psdb_graphics_pipeline_desc d1 = rich_graphics(), d2 = rich_graphics();
    d2.blend.alpha_to_coverage_enable = 7;
    d2.rasterizer.depth_clip_enable = -1;
    psdb__buf a = {0}, b = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&d1, &a), PSDB_S_OK);
    ck_assert_hr(psdb__desc_encode_graphics(&d2, &b), PSDB_S_OK);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_mem_eq(a.data, b.data, a.len);
    psdb__buf_free(&a);
    psdb__buf_free(&b);
}
END_TEST

START_TEST(test_desc__compute_exact_bytes)
{
    const uint8_t rs[] = {0xAA, 0xBB};
    const uint8_t cs[] = {0x10, 0x20, 0x30};
    psdb_compute_pipeline_desc d = {rs, sizeof(rs), {cs, sizeof(cs)}, NULL};
    /* schema/SODB.md: magic "SOCP", version 1, reserved 0, root signature, CS. */
    const uint8_t want[] = {'S', 'O', 'C', 'P',  1,    0, 0, 0, 0, 0,    0,    0,   2,
                            0,   0,   0,   0xAA, 0xBB, 3, 0, 0, 0, 0x10, 0x20, 0x30};
    psdb__buf a = {0};
    psdb_compute_pipeline_desc *c = NULL;
    ck_assert_hr(psdb__desc_encode_compute(&d, &a), PSDB_S_OK);
    ck_assert_uint_eq(a.len, sizeof(want));
    ck_assert_mem_eq(a.data, want, sizeof(want));
    ck_assert_hr(psdb__desc_decode_compute(a.data, a.len, &c), PSDB_S_OK);
    ck_assert_uint_eq(c->cs.size, 3);
    ck_assert_mem_eq(c->cs.code, cs, 3);
    ck_assert_uint_eq(c->root_signature_size, 2);
    free(c);
    psdb__buf_free(&a);
}
END_TEST

static int fake_collection_key(psdb_state_object *so, uint8_t key[32])
{
    memset(key, (int)(uintptr_t)so & 0xFF, 32);
    return 0;
}

START_TEST(test_desc__state_object_round_trip)
{
    const uint8_t lib_code[] = "dxil library";
    const char *exports[] = {"RayGen", "Miss", "ClosestHit"};
    psdb_dxil_library_desc lib = {{lib_code, sizeof(lib_code)}, exports, 3};
    psdb_shader grs = {RS, sizeof(RS)};
    psdb_hit_group_desc hg = {"HitGroup", NULL, "ClosestHit", NULL};
    psdb_existing_collection_desc coll = {(psdb_state_object *)(uintptr_t)0x42};
    psdb_session_subobject sess = {NULL, 0};
    psdb_state_subobject subs[] = {
        {PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &grs}, {PSDB_SUBOBJECT_PSDB, &sess},
        {PSDB_SUBOBJECT_DXIL_LIBRARY, &lib},          {PSDB_SUBOBJECT_HIT_GROUP, &hg},
        {PSDB_SUBOBJECT_EXISTING_COLLECTION, &coll},
    };
    psdb_state_object_desc d = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 5, subs};
    psdb__buf a = {0}, b = {0};
    psdb_state_object_desc *s = NULL;
    uint8_t key[32], want[32];

    ck_assert_hr(psdb__desc_encode_state_object(&d, NULL, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__desc_encode_state_object(&d, fake_collection_key, &a), PSDB_S_OK);
    ck_assert_uint_eq(psdb__desc_kind(a.data, a.len), PSDB_SODB_STATE_OBJECT);
    ck_assert_hr(psdb__desc_decode_state_object(a.data, a.len, &s), PSDB_S_OK);
    ck_assert_uint_eq(s->type, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE);
    ck_assert_uint_eq(s->num_subobjects, 4); /* the PSDB subobject is not encoded */
    ck_assert_uint_eq(s->subobjects[1].type, PSDB_SUBOBJECT_DXIL_LIBRARY);
    const psdb_dxil_library_desc *l = s->subobjects[1].desc;
    ck_assert_uint_eq(l->num_exports, 3);
    ck_assert_str_eq(l->exports[2], "ClosestHit");
    assert_shader_eq(lib.library, l->library);
    const psdb_hit_group_desc *h = s->subobjects[2].desc;
    ck_assert_str_eq(h->name, "HitGroup");
    ck_assert_ptr_null(h->any_hit);
    ck_assert_str_eq(h->closest_hit, "ClosestHit");
    const psdb_existing_collection_desc *c = s->subobjects[3].desc;
    ck_assert_int_eq(psdb__desc_decoded_collection_key(c->collection, key), 0);
    memset(want, 0x42, 32);
    ck_assert_mem_eq(key, want, 32);
    ck_assert_hr(psdb__desc_encode_state_object(s, psdb__desc_decoded_collection_key, &b),
                 PSDB_S_OK);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert_mem_eq(a.data, b.data, a.len);
    free(s);
    psdb__buf_free(&a);
    psdb__buf_free(&b);
}
END_TEST

START_TEST(test_desc__every_truncation_is_corrupt)
{
    psdb_graphics_pipeline_desc d = rich_graphics();
    psdb__buf a = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&d, &a), PSDB_S_OK);
    for (size_t n = 0; n < a.len; n++) {
        psdb_graphics_pipeline_desc *g = (void *)1;
        ck_assert_hr(psdb__desc_decode_graphics(a.data, n, &g), PSDB_E_CACHE_CORRUPT);
        ck_assert_ptr_null(g);
    }
    psdb__buf_free(&a);
}
END_TEST

static void expect_corrupt_graphics(const psdb__buf *a, size_t off, const void *patch, size_t n)
{
    uint8_t *copy = malloc(a->len);
    psdb_graphics_pipeline_desc *g = NULL;
    memcpy(copy, a->data, a->len);
    memcpy(copy + off, patch, n);
    ck_assert_hr(psdb__desc_decode_graphics(copy, a->len, &g), PSDB_E_CACHE_CORRUPT);
    free(copy);
}

START_TEST(test_desc__malformed_rejected)
{
    psdb_graphics_pipeline_desc d = rich_graphics();
    psdb__buf a = {0};
    psdb_graphics_pipeline_desc *g = NULL;
    psdb_compute_pipeline_desc *c = NULL;
    const uint8_t v2[4] = {2, 0, 0, 0}, one[4] = {1, 0, 0, 0}, two[4] = {2, 0, 0, 0};
    const uint8_t huge[4] = {0xF0, 0xFF, 0xFF, 0x7F};

    ck_assert_hr(psdb__desc_encode_graphics(&d, &a), PSDB_S_OK);
    expect_corrupt_graphics(&a, 0, "SOCP", 4); /* wrong magic for the kind */
    expect_corrupt_graphics(&a, 4, v2, 4);     /* unknown version */
    expect_corrupt_graphics(&a, 8, one, 4);    /* reserved not zero */
    expect_corrupt_graphics(&a, 12, huge, 4);  /* root signature length past the end */
    /* The first boolean after the stream output: alpha_to_coverage_enable. Find it by encoding
     * the description with that boolean off and locating the one differing word. */
    {
        psdb_graphics_pipeline_desc d2 = d;
        psdb__buf b = {0};
        d2.blend.alpha_to_coverage_enable = 0;
        ck_assert_hr(psdb__desc_encode_graphics(&d2, &b), PSDB_S_OK);
        size_t off = 0;
        while (off < a.len && a.data[off] == b.data[off])
            off++;
        ck_assert_uint_lt(off, a.len);
        expect_corrupt_graphics(&a, off, two, 4); /* a boolean of 2 */
        psdb__buf_free(&b);
    }
    /* Trailing bytes. */
    {
        uint8_t *longer = malloc(a.len + 1);
        memcpy(longer, a.data, a.len);
        longer[a.len] = 0;
        ck_assert_hr(psdb__desc_decode_graphics(longer, a.len + 1, &g), PSDB_E_CACHE_CORRUPT);
        free(longer);
    }
    /* A graphics encoding is not a compute one. */
    ck_assert_hr(psdb__desc_decode_compute(a.data, a.len, &c), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__desc_decode_graphics(NULL, 0, &g), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__desc_decode_graphics(NULL, 5, &g), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__desc_decode_graphics(a.data, a.len, NULL), PSDB_E_INVALIDARG);
    psdb__buf_free(&a);
}
END_TEST

START_TEST(test_desc__embedded_nul_and_huge_count_rejected)
{
    psdb_input_element_desc el = {"AB", 0, PSDB_FORMAT_R32_FLOAT, 0, 0, 0, 0};
    psdb_graphics_pipeline_desc d = {.root_signature = RS,
                                     .root_signature_size = sizeof(RS),
                                     .vs = {VS, sizeof(VS)},
                                     .input_layout = {&el, 1}};
    psdb__buf a = {0};
    psdb_graphics_pipeline_desc *g = NULL;
    ck_assert_hr(psdb__desc_encode_graphics(&d, &a), PSDB_S_OK);
    uint8_t *p = memmem(a.data, a.len, "AB", 2);
    ck_assert_ptr_nonnull(p);
    p[1] = 0;
    ck_assert_hr(psdb__desc_decode_graphics(a.data, a.len, &g), PSDB_E_CACHE_CORRUPT);
    p[1] = 'B';
    /* The element count sits just before the name's length. */
    psdb__put_le32(p - 8, 0x10000000u);
    ck_assert_hr(psdb__desc_decode_graphics(a.data, a.len, &g), PSDB_E_CACHE_CORRUPT);
    psdb__put_le32(p - 8, 1);
    ck_assert_hr(psdb__desc_decode_graphics(a.data, a.len, &g), PSDB_S_OK);
    free(g);
    psdb__buf_free(&a);
}
END_TEST

START_TEST(test_desc__encode_invalid)
{
    psdb__buf a = {0};
    psdb_compute_pipeline_desc c = {RS, sizeof(RS), {NULL, 4}, NULL};
    ck_assert_hr(psdb__desc_encode_compute(&c, &a), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__desc_encode_compute(NULL, &a), PSDB_E_INVALIDARG);
    psdb_graphics_pipeline_desc g = {.root_signature = RS,
                                     .root_signature_size = sizeof(RS),
                                     .vs = {VS, sizeof(VS)},
                                     .input_layout = {NULL, 2}};
    ck_assert_hr(psdb__desc_encode_graphics(&g, &a), PSDB_E_INVALIDARG);
    psdb_state_subobject bad = {77, RS};
    psdb_state_object_desc so = {PSDB_STATE_OBJECT_COLLECTION, 1, &bad};
    ck_assert_hr(psdb__desc_encode_state_object(&so, NULL, &a), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(a.data);
}
END_TEST

START_TEST(test_desc__state_blob_hides_bytecode)
{
    psdb_graphics_pipeline_desc d = rich_graphics();
    psdb__buf full = {0}, state = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&d, &full), PSDB_S_OK);
    ck_assert_hr(psdb__desc_encode_graphics_state(&d, &state), PSDB_S_OK);
    ck_assert_ptr_null(memmem(state.data, state.len, VS, sizeof(VS)));
    ck_assert_ptr_nonnull(memmem(full.data, full.len, VS, sizeof(VS)));
    psdb__buf_free(&full);
    psdb__buf_free(&state);
}
END_TEST

/* ---- Fuzz corpus ---------------------------------------------------------------------------- */

/* tests/fuzz/corpus/desc: every file decodes and re-encodes to the same bytes, or is
 * PSDB_E_CACHE_CORRUPT, exactly what tests/fuzz/desc_fuzz.c asserts. */

static void replay_one(const uint8_t *data, size_t size, int *decoded)
{
    psdb_compute_pipeline_desc *c = NULL;
    psdb_graphics_pipeline_desc *g = NULL;
    psdb_state_object_desc *so = NULL;
    psdb__buf b = {0};
    psdb_hr hr = psdb__desc_decode_compute(data, size, &c);
    if (hr == PSDB_S_OK) {
        ck_assert_hr(psdb__desc_encode_compute(c, &b), PSDB_S_OK);
        (*decoded)++;
    } else {
        ck_assert_hr(hr, PSDB_E_CACHE_CORRUPT);
    }
    hr = psdb__desc_decode_graphics(data, size, &g);
    if (hr == PSDB_S_OK) {
        ck_assert_hr(psdb__desc_encode_graphics(g, &b), PSDB_S_OK);
        (*decoded)++;
    } else {
        ck_assert_hr(hr, PSDB_E_CACHE_CORRUPT);
    }
    hr = psdb__desc_decode_state_object(data, size, &so);
    if (hr == PSDB_S_OK) {
        ck_assert_hr(psdb__desc_encode_state_object(so, psdb__desc_decoded_collection_key, &b),
                     PSDB_S_OK);
        (*decoded)++;
    } else {
        ck_assert_hr(hr, PSDB_E_CACHE_CORRUPT);
    }
    if (b.data) {
        ck_assert_uint_eq(b.len, size);
        ck_assert_mem_eq(b.data, data, size);
    }
    psdb__buf_free(&b);
    free(c);
    free(g);
    free(so);
}

static void write_corpus(const char *dir)
{
    psdb_graphics_pipeline_desc g = rich_graphics();
    psdb_compute_pipeline_desc c = {RS, sizeof(RS), {VS, sizeof(VS)}, NULL};
    const char *exports[] = {"RayGen", "Miss"};
    psdb_dxil_library_desc lib = {{PS, sizeof(PS)}, exports, 2};
    psdb_hit_group_desc hg = {"Hit", "AnyHit", NULL, NULL};
    psdb_existing_collection_desc coll = {(psdb_state_object *)(uintptr_t)0x11};
    psdb_shader grs = {RS, sizeof(RS)};
    psdb_state_subobject subs[] = {{PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &grs},
                                   {PSDB_SUBOBJECT_DXIL_LIBRARY, &lib},
                                   {PSDB_SUBOBJECT_HIT_GROUP, &hg},
                                   {PSDB_SUBOBJECT_EXISTING_COLLECTION, &coll}};
    psdb_state_object_desc so = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 4, subs};
    psdb__buf b = {0};
    char *p = NULL;
    struct {
        const char *name;
        size_t cut; /* 0: whole; else keep this many bytes */
        size_t patch_at;
        uint8_t patch;
    } files[] = {{"graphics.bin", 0, 0, 0},
                 {"graphics_truncated.bin", 200, 0, 0},
                 {"graphics_version2.bin", 0, 4, 2},
                 {"compute.bin", 0, 0, 0},
                 {"compute_reserved.bin", 0, 8, 1},
                 {"state_object.bin", 0, 0, 0},
                 {"state_object_bad_type.bin", 0, 20, 0x64}};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        psdb__buf_free(&b);
        if (files[i].name[0] == 'g')
            ck_assert_hr(psdb__desc_encode_graphics(&g, &b), PSDB_S_OK);
        else if (files[i].name[0] == 'c')
            ck_assert_hr(psdb__desc_encode_compute(&c, &b), PSDB_S_OK);
        else
            ck_assert_hr(psdb__desc_encode_state_object(&so, fake_collection_key, &b), PSDB_S_OK);
        if (files[i].patch_at)
            b.data[files[i].patch_at] = files[i].patch;
        p = tu_path(dir, files[i].name);
        ck_assert_int_eq(tu_write_file(p, b.data, files[i].cut ? files[i].cut : b.len), 0);
        free(p);
    }
    psdb__buf_free(&b);
}

START_TEST(test_desc__fuzz_corpus_replays_cleanly)
{
    const char *dir = PSDB_TEST_DATA "/../fuzz/corpus/desc";
    const char *regen = getenv("PSDB_WRITE_CORPUS");
    if (regen && *regen)
        write_corpus(regen);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "no corpus at %s", dir);
    int files = 0, decoded = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = tu_path(dir, e->d_name);
        size_t size = 0;
        char *data = tu_read_file(p, &size);
        ck_assert_ptr_nonnull(data);
        replay_one((const uint8_t *)data, size, &decoded);
        free(data);
        free(p);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 7);
    ck_assert_int_ge(decoded, 3); /* the valid seeds decode */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("desc");
    TCase *tc = tcase_create("desc");
    tcase_add_test(tc, test_desc__graphics_round_trip);
    tcase_add_test(tc, test_desc__booleans_normalised);
    tcase_add_test(tc, test_desc__compute_exact_bytes);
    tcase_add_test(tc, test_desc__state_object_round_trip);
    tcase_add_test(tc, test_desc__every_truncation_is_corrupt);
    tcase_add_test(tc, test_desc__malformed_rejected);
    tcase_add_test(tc, test_desc__embedded_nul_and_huge_count_rejected);
    tcase_add_test(tc, test_desc__encode_invalid);
    tcase_add_test(tc, test_desc__state_blob_hides_bytecode);
    tcase_add_test(tc, test_desc__fuzz_corpus_replays_cleanly);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
