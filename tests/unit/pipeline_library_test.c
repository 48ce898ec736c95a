/* pipeline_library_test.c - the pipeline library (MODEL L), loads and PSDB selection (G2), and the
 * golden bad blobs of schema/PIPELINE_LIBRARY.md. */
#include "rt_fixture.h"

#include "../data/pipeline_library/golden.h"
#include "runtime/pipeline_library.h"

static psdb_device *plain_device(uint32_t adapter_flags)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    d.adapter.flags = adapter_flags;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    return dev;
}

static psdb_pipeline *make_graphics(psdb_device *dev, int n)
{
    rt_graphics g;
    psdb_pipeline *p = NULL;
    rt_graphics_init(&g, n, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g.desc, &p), PSDB_S_OK);
    return p;
}

static psdb_pipeline *make_compute(psdb_device *dev, int n)
{
    rt_compute c;
    psdb_pipeline *p = NULL;
    rt_compute_init(&c, n, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &p), PSDB_S_OK);
    return p;
}

/* A serialized library of graphics 0 ("g0"), graphics 1 ("g1") and compute 0 ("c0"). */
static uint8_t *make_blob(psdb_device *dev, size_t *size)
{
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    psdb_pipeline *g0 = make_graphics(dev, 0), *g1 = make_graphics(dev, 1);
    psdb_pipeline *c0 = make_compute(dev, 0);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "g0", g0), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "g1", g1), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "c0", c0), PSDB_S_OK);
    *size = psdb_pipeline_library_get_serialized_size(lib);
    uint8_t *b = malloc(*size);
    ck_assert_ptr_nonnull(b);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, *size), PSDB_S_OK);
    psdb_pipeline_release(g0);
    psdb_pipeline_release(g1);
    psdb_pipeline_release(c0);
    psdb_pipeline_library_release(lib);
    return b;
}

START_TEST(test_pipeline_library__crc32_check_value)
{
    /* The ISO-HDLC check value that schema/PIPELINE_LIBRARY.md quotes. */
    ck_assert_uint_eq(psdb__crc32(0, "123456789", 9), 0xCBF43926u);
    ck_assert_uint_eq(psdb__crc32(psdb__crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}
END_TEST

START_TEST(test_pipeline_library__L1_unsupported_without_library_flag)
{
    psdb_device *dev = plain_device(PSDB_ADAPTER_FLAG_NO_LIBRARY);
    psdb_feature_data_shader_cache f = {0};
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, &f, sizeof(f)),
                 PSDB_S_OK);
    ck_assert_uint_eq(f.support_flags & PSDB_SHADER_CACHE_SUPPORT_LIBRARY, 0);
    psdb_pipeline_library *lib = (psdb_pipeline_library *)1;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_E_UNSUPPORTED);
    ck_assert_ptr_null(lib);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, NULL), PSDB_E_UNSUPPORTED);
    psdb_device_release(dev);
    dev = plain_device(0);
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, &f, sizeof(f)),
                 PSDB_S_OK);
    ck_assert_uint_ne(f.support_flags & PSDB_SHADER_CACHE_SUPPORT_LIBRARY, 0);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    psdb_pipeline_library_release(lib);
    ck_assert_hr(psdb_device_create_pipeline_library(NULL, NULL, 0, &lib), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 5, &lib), PSDB_E_INVALIDARG);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L2_empty_and_serialized_blobs)
{
    psdb_device *dev = plain_device(0);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    size_t entries = 9, blobs = 9;
    psdb__pipeline_library_counts(lib, &entries, &blobs);
    ck_assert_uint_eq(entries, 0);
    ck_assert_uint_eq(blobs, 0);
    ck_assert_uint_eq(psdb_pipeline_library_get_serialized_size(lib), PSDB__PLIB_HEADER_SIZE);
    psdb_pipeline_library_release(lib);

    size_t size = 0;
    uint8_t *b = make_blob(dev, &size);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, &lib), PSDB_S_OK);
    psdb__pipeline_library_counts(lib, &entries, &blobs);
    ck_assert_uint_eq(entries, 3);
    /* The library serializes back to the same bytes, reading the caller's blob in place. */
    ck_assert_uint_eq(psdb_pipeline_library_get_serialized_size(lib), size);
    uint8_t *again = malloc(size);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, again, size), PSDB_S_OK);
    ck_assert_mem_eq(again, b, size);
    /* Not copied (L2): the library reads the caller's bytes, so a byte changed in the blob
     * after creation shows in what the library serializes. */
    b[size - 1] ^= 0x5A;
    ck_assert_hr(psdb_pipeline_library_serialize(lib, again, size), PSDB_S_OK);
    ck_assert_uint_eq(again[size - 1], b[size - 1]);
    b[size - 1] ^= 0x5A;
    ck_assert_hr(psdb_pipeline_library_serialize(lib, again, size), PSDB_S_OK);
    ck_assert_mem_eq(again, b, size);
    /* Serializing into the very blob the library points into works (it is written last). */
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, size), PSDB_S_OK);
    ck_assert_mem_eq(again, b, size);
    psdb_pipeline_library_release(lib);
    free(again);
    free(b);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L3_golden_bad_blobs_exact_statuses)
{
    psdb_device *dev = plain_device(0);
    size_t size = 0;
    uint8_t *valid = make_blob(dev, &size);
    uint8_t *b = malloc(size);
    for (size_t i = 0; i < GOLDEN_COUNT; i++) {
        memcpy(b, valid, size);
        size_t n = golden_cases[i].fn(b, size);
        psdb_pipeline_library *lib = (psdb_pipeline_library *)1;
        psdb_hr hr = psdb_device_create_pipeline_library(dev, b, n, &lib);
        ck_assert_msg(hr == golden_cases[i].want, "%s: got %s, want %s", golden_cases[i].name,
                      psdb_hr_str(hr), psdb_hr_str(golden_cases[i].want));
        ck_assert_ptr_null(lib);
        /* L4: validation alone gives the same status. */
        ck_assert_hr(psdb_device_create_pipeline_library(dev, b, n, NULL), golden_cases[i].want);
    }
    free(b);
    free(valid);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L3_blob_from_other_hardware_and_driver)
{
    psdb_device *dev = plain_device(0);
    size_t size = 0;
    uint8_t *b = make_blob(dev, &size);
    psdb_device_desc d = {.adapter = rt_adapter(), .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    psdb_device *other = NULL;
    d.adapter.device_id++;
    ck_assert_hr(psdb_device_create(&d, &other), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_pipeline_library(other, b, size, NULL),
                 PSDB_E_ADAPTER_NOT_FOUND);
    psdb_device_release(other);
    d.adapter = rt_adapter();
    d.adapter.driver_build++;
    ck_assert_hr(psdb_device_create(&d, &other), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_pipeline_library(other, b, size, NULL),
                 PSDB_E_DRIVER_VERSION_MISMATCH);
    psdb_device_release(other);
    free(b);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L4_validate_only_returns_s_false)
{
    psdb_device *dev = plain_device(0);
    size_t size = 0;
    uint8_t *b = make_blob(dev, &size);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, NULL), PSDB_S_FALSE);
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, NULL), PSDB_S_FALSE);
    b[size - 1] ^= 1;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, NULL), PSDB_E_INVALIDARG);
    free(b);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L5_existing_name_is_not_overwritten)
{
    psdb_device *dev = plain_device(0);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    psdb_pipeline *g0 = make_graphics(dev, 0), *g1 = make_graphics(dev, 1);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "pso", g0), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "pso", g1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "pso", g0), PSDB_E_INVALIDARG);
    /* The first PSO is still the one stored under the name. */
    rt_graphics d;
    rt_graphics_init(&d, 0, NULL);
    psdb_pipeline *got = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "pso", &d.desc, &got),
                 PSDB_S_OK);
    ck_assert_ptr_eq(got, g0);
    psdb_pipeline_release(got);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "", g1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, NULL, g1), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "x", NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(NULL, "x", g1), PSDB_E_INVALIDARG);
    /* A PSO of another device. */
    psdb_device *other = plain_device(0);
    psdb_pipeline *o = make_graphics(other, 3);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "other", o), PSDB_E_INVALIDARG);
    psdb_pipeline_release(o);
    psdb_device_release(other);
    psdb_pipeline_release(g0);
    psdb_pipeline_release(g1);
    psdb_pipeline_library_release(lib);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L6_serialize_needs_the_full_size)
{
    psdb_device *dev = plain_device(0);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    psdb_pipeline *g0 = make_graphics(dev, 0);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "g0", g0), PSDB_S_OK);
    size_t size = psdb_pipeline_library_get_serialized_size(lib);
    uint8_t *b = malloc(size + 8);
    memset(b, 0xAB, size + 8);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, size - 1), PSDB_E_INVALIDARG);
    ck_assert_uint_eq(b[0], 0xAB); /* nothing written */
    ck_assert_hr(psdb_pipeline_library_serialize(lib, NULL, size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, size + 8), PSDB_S_OK);
    ck_assert_uint_eq(b[size], 0xAB); /* bytes past the size untouched */
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, NULL), PSDB_S_FALSE);
    ck_assert_uint_eq(psdb_pipeline_library_get_serialized_size(NULL), 0);
    free(b);
    psdb_pipeline_release(g0);
    psdb_pipeline_library_release(lib);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L7_load_by_name_and_description)
{
    psdb_device *dev = plain_device(0);
    size_t size = 0;
    uint8_t *b = make_blob(dev, &size);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, &lib), PSDB_S_OK);
    rt_graphics g0, g1;
    rt_compute c0;
    rt_graphics_init(&g0, 0, NULL);
    rt_graphics_init(&g1, 1, NULL);
    rt_compute_init(&c0, 0, NULL);
    psdb_pipeline *p = NULL, *q = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "nope", &g0.desc, &p),
                 PSDB_E_INVALIDARG);
    ck_assert_ptr_null(p);
    /* Mismatching description: another PSO's, or one field changed. */
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g1.desc, &p),
                 PSDB_E_INVALIDARG);
    g0.desc.sample_mask = 0xF;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &p),
                 PSDB_E_INVALIDARG);
    g0.desc.sample_mask = 0xFFFFFFFFu;
    /* The other kind under a name. */
    ck_assert_hr(psdb_pipeline_library_load_compute_pipeline(lib, "g0", &c0.desc, &p),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &q), PSDB_S_OK);
    ck_assert_ptr_eq(p, q); /* the same object on a second load */
    psdb_pipeline_release(q);
    q = NULL;
    ck_assert_hr(psdb_pipeline_library_load_compute_pipeline(lib, "c0", &c0.desc, &q), PSDB_S_OK);
    ck_assert_ptr_nonnull(q);
    psdb_pipeline_release(q);
    q = NULL;
    /* LoadPipeline with a stream describing g1. */
    psdb_shader rs = {g1.desc.root_signature, g1.desc.root_signature_size};
    psdb_render_targets_desc rt = {.num_render_targets = 1,
                                   .rtv_formats = {PSDB_FORMAT_R8G8B8A8_UNORM}};
    psdb_stream_subobject sub[] = {{PSDB_STREAM_ROOT_SIGNATURE, &rs},
                                   {PSDB_STREAM_VS, &g1.desc.vs},
                                   {PSDB_STREAM_PS, &g1.desc.ps},
                                   {PSDB_STREAM_RENDER_TARGETS, &rt},
                                   {PSDB_STREAM_PS_OUTPUTS, g1.desc.ps_outputs}};
    psdb_pipeline_stream_desc s = {sub, 5};
    ck_assert_hr(psdb_pipeline_library_load_pipeline(lib, "g1", &s, &q), PSDB_S_OK);
    psdb_pipeline *r = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g1", &g1.desc, &r), PSDB_S_OK);
    ck_assert_ptr_eq(q, r);
    psdb_pipeline *none = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g1", NULL, &none),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, NULL, &g1.desc, &none),
                 PSDB_E_INVALIDARG);
    ck_assert_ptr_null(none);
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g1", &g1.desc, NULL),
                 PSDB_E_INVALIDARG);
    psdb_pipeline_release(q);
    psdb_pipeline_release(r);
    /* A loaded PSO outlives the library and the blob. */
    psdb_pipeline_library_release(lib);
    free(b);
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    psdb_pipeline_release(p);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L7_loads_compile_nothing)
{
    psdb_device *dev = plain_device(0);
    size_t size = 0;
    uint8_t *b = make_blob(dev, &size);
    psdb_device_release(dev);
    dev = plain_device(0); /* a fresh device: empty local cache */
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, &lib), PSDB_S_OK);
    rt_graphics g0;
    rt_graphics_init(&g0, 0, NULL);
    psdb_pipeline *p = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &p), PSDB_S_OK);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 0);
    psdb_pipeline_release(p);
    /* A PSO that is not in the library compiles. */
    p = make_graphics(dev, 7);
    ck_assert_uint_gt(psdb_device_get_local_compile_count(dev), 0);
    psdb_pipeline_release(p);
    psdb_pipeline_library_release(lib);
    free(b);
    psdb_device_release(dev);
}
END_TEST

START_TEST(test_pipeline_library__L8_shared_units_are_held_once)
{
    psdb_device *dev = plain_device(0);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    /* Two PSOs with the same shaders and root signature, differing in depth state: they share
     * the VS and PS units and differ in the pipeline unit. */
    rt_graphics a, c;
    rt_graphics_init(&a, 0, NULL);
    rt_graphics_init(&c, 0, NULL);
    c.desc.depth_stencil.depth_enable = 1;
    psdb_pipeline *pa = NULL, *pc = NULL;
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &a.desc, &pa), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &c.desc, &pc), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "a", pa), PSDB_S_OK);
    size_t one = psdb_pipeline_library_get_serialized_size(lib);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "c", pc), PSDB_S_OK);
    size_t two = psdb_pipeline_library_get_serialized_size(lib);
    size_t entries = 0, blobs = 0;
    psdb__pipeline_library_counts(lib, &entries, &blobs);
    ck_assert_uint_eq(entries, 2);
    ck_assert_uint_eq(blobs, 4); /* VS, PS, two pipeline units */
    /* Stored alone, c would take as much as a; together they take much less than the sum. */
    ck_assert_uint_lt(two, 2 * one - 2 * PSDB__PLIB_BLOB_SIZE);
    /* The same holds in the blob: parsed back, still 4 units. */
    uint8_t *b = malloc(two);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, two), PSDB_S_OK);
    psdb_pipeline_library *back = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, two, &back), PSDB_S_OK);
    psdb__pipeline_library_counts(back, &entries, &blobs);
    ck_assert_uint_eq(blobs, 4);
    psdb_pipeline_library_release(back);
    free(b);
    psdb_pipeline_release(pa);
    psdb_pipeline_release(pc);
    psdb_pipeline_library_release(lib);
    psdb_device_release(dev);
}
END_TEST

/* L9: stores and loads of distinct names from several threads. */
typedef struct l9_ctx {
    psdb_device *dev;
    psdb_pipeline_library *lib;
    int base;
    int failures;
} l9_ctx;

static void *l9_worker(void *arg)
{
    l9_ctx *c = arg;
    for (int i = 0; i < 16; i++) {
        int n = c->base + i;
        char name[32];
        snprintf(name, sizeof(name), "pso-%d", n);
        rt_graphics g;
        rt_graphics_init(&g, n % 5, NULL); /* shaders shared between threads */
        g.desc.sample_mask = (uint32_t)n;
        psdb_pipeline *p = NULL, *q = NULL;
        if (psdb_device_create_graphics_pipeline(c->dev, &g.desc, &p) != PSDB_S_OK ||
            psdb_pipeline_library_store_pipeline(c->lib, name, p) != PSDB_S_OK ||
            psdb_pipeline_library_load_graphics_pipeline(c->lib, name, &g.desc, &q) != PSDB_S_OK ||
            p != q)
            c->failures++;
        (void)psdb_pipeline_library_get_serialized_size(c->lib);
        psdb_pipeline_release(p);
        psdb_pipeline_release(q);
    }
    return NULL;
}

typedef struct same_ctx {
    psdb_pipeline_library *lib;
    psdb_pipeline *got;
} same_ctx;

static void *same_worker(void *arg)
{
    same_ctx *c = arg;
    rt_graphics g;
    rt_graphics_init(&g, 0, NULL);
    g.desc.sample_mask = 0;
    if (psdb_pipeline_library_load_graphics_pipeline(c->lib, "pso-0", &g.desc, &c->got) !=
        PSDB_S_OK)
        c->got = NULL;
    return NULL;
}

START_TEST(test_pipeline_library__L9_concurrent_stores_and_loads)
{
    psdb_device *dev = plain_device(0);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(dev, NULL, 0, &lib), PSDB_S_OK);
    pthread_t t[4];
    l9_ctx c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (l9_ctx){dev, lib, i * 100, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, l9_worker, &c[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(c[i].failures, 0);
    }
    size_t entries = 0, blobs = 0;
    psdb__pipeline_library_counts(lib, &entries, &blobs);
    ck_assert_uint_eq(entries, 64);
    ck_assert_uint_eq(blobs, 5 * 2 + 64); /* 5 VS + 5 PS shared, one pipeline unit each */
    size_t size = psdb_pipeline_library_get_serialized_size(lib);
    uint8_t *b = malloc(size);
    ck_assert_hr(psdb_pipeline_library_serialize(lib, b, size), PSDB_S_OK);
    psdb_pipeline_library_release(lib);
    /* Loads of distinct names from a parsed library, concurrently; then of one name. */
    ck_assert_hr(psdb_device_create_pipeline_library(dev, b, size, &lib), PSDB_S_OK);
    /* Loads of one name racing (the seed leaves them to the caller): still one PSO. */
    same_ctx sc[4];
    for (int i = 0; i < 4; i++) {
        sc[i] = (same_ctx){lib, NULL};
        ck_assert_int_eq(pthread_create(&t[i], NULL, same_worker, &sc[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_ptr_nonnull(sc[i].got);
        ck_assert_ptr_eq(sc[i].got, sc[0].got);
    }
    for (int i = 0; i < 4; i++)
        psdb_pipeline_release(sc[i].got);
    free(b);
    psdb_pipeline_library_release(lib);
    psdb_device_release(dev);
}
END_TEST

/* The fuzz corpus (tests/fuzz/corpus/pipeline_library) is the valid blob and the golden bad ones;
 * PSDB_WRITE_CORPUS=1 rewrites it after a format change. Each file gives its exact status. */
START_TEST(test_pipeline_library__L3_fuzz_corpus_replays_with_exact_statuses)
{
    const char *dir = PSDB_TEST_DATA "/../fuzz/corpus/pipeline_library";
    psdb_device *dev = plain_device(0);
    char path[1024];
    if (getenv("PSDB_WRITE_CORPUS")) {
        size_t size = 0;
        uint8_t *valid = make_blob(dev, &size);
        uint8_t *b = malloc(size);
        snprintf(path, sizeof(path), "%s/valid.plib", dir);
        ck_assert_int_eq(tu_write_file(path, valid, size), 0);
        for (size_t i = 0; i < GOLDEN_COUNT; i++) {
            memcpy(b, valid, size);
            size_t n = golden_cases[i].fn(b, size);
            snprintf(path, sizeof(path), "%s/%s.plib", dir, golden_cases[i].name);
            ck_assert_int_eq(tu_write_file(path, b, n), 0);
        }
        free(b);
        free(valid);
    }
    for (size_t i = 0; i <= GOLDEN_COUNT; i++) {
        const char *name = i < GOLDEN_COUNT ? golden_cases[i].name : "valid";
        psdb_hr want = i < GOLDEN_COUNT ? golden_cases[i].want : PSDB_S_OK;
        size_t size = 0;
        snprintf(path, sizeof(path), "%s/%s.plib", dir, name);
        char *blob = tu_read_file(path, &size);
        ck_assert_msg(blob != NULL, "missing corpus file %s", path);
        psdb_pipeline_library *lib = NULL;
        psdb_hr hr = psdb_device_create_pipeline_library(dev, blob, size, &lib);
        ck_assert_msg(hr == want, "%s: got %s, want %s", name, psdb_hr_str(hr), psdb_hr_str(want));
        psdb_pipeline_library_release(lib);
        free(blob);
    }
    psdb_device_release(dev);
}
END_TEST

/* ---- G2 -------------------------------------------------------------------------------------- */

typedef struct g2_world {
    char *dir, *path_a, *path_b;
    psdb_device *dev;
    psdb_session *a, *b;
    rt_recorder *rec;
} g2_world;

static void g2_init(g2_world *w)
{
    memset(w, 0, sizeof(*w));
    w->dir = tu_mkdtemp();
    w->path_a = tu_path(w->dir, "a.psdb");
    w->path_b = tu_path(w->dir, "b.psdb");
    rt_make_full_psdb(w->path_a, 4);
    rt_make_full_psdb(w->path_b, 4);
    w->dev = rt_device(w->dir, NULL);
    w->a = rt_open(w->dev, w->path_a);
    w->b = rt_open(w->dev, w->path_b);
    w->rec = rt_recorder_new(w->dev);
}

static void g2_free(g2_world *w)
{
    psdb_session_release(w->a);
    psdb_session_release(w->b);
    psdb_device_release(w->dev);
    rt_recorder_free(w->rec);
    tu_rmtree(w->dir);
    free(w->dir);
    free(w->path_a);
    free(w->path_b);
}

START_TEST(test_pipeline_library__G2_a_creating_load_selects_like_any_creation)
{
    g2_world w;
    g2_init(&w);
    size_t size = 0;
    uint8_t *blob = make_blob(w.dev, &size);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(w.dev, blob, size, &lib), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    /* g0 with the device default (F2): every lookup of the load's operation searches a. */
    rt_graphics g0, g1;
    rt_graphics_init(&g0, 0, NULL);
    psdb_pipeline *p = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &p), PSDB_S_OK);
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    int all_in = 0;
    ck_assert_uint_eq(rt_events_of(w.rec, info.operation_id, w.a, &all_in), info.lookups);
    ck_assert_uint_gt(info.lookups, 0);
    ck_assert(all_in);
    ck_assert(info.psdb_hit);
    /* g1 with a per-object PSDB subobject (F1). */
    psdb_session_subobject sub = {w.b, PSDB_SESSION_FLAG_CREATE_ONLY};
    rt_graphics_init(&g1, 1, &sub);
    psdb_pipeline *q = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g1", &g1.desc, &q), PSDB_S_OK);
    psdb_creation_info qi;
    ck_assert_hr(psdb_pipeline_get_creation_info(q, &qi), PSDB_S_OK);
    ck_assert_uint_eq(qi.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert_uint_eq(qi.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert_uint_eq(rt_events_of(w.rec, qi.operation_id, w.b, &all_in), qi.lookups);
    ck_assert(all_in);
    /* A load that returns the existing PSO keeps its original selection and looks nothing up,
     * even with another default and another subobject now. */
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    size_t before = w.rec->n;
    psdb_pipeline *p2 = NULL;
    psdb_session_subobject sub_a = {w.a, PSDB_SESSION_FLAG_NONE};
    g0.desc.psdb = &sub_a;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g0", &g0.desc, &p2), PSDB_S_OK);
    ck_assert_ptr_eq(p2, p);
    ck_assert_uint_eq(w.rec->n, before);
    psdb_creation_info again;
    ck_assert_hr(psdb_pipeline_get_creation_info(p2, &again), PSDB_S_OK);
    ck_assert_uint_eq(again.operation_id, info.operation_id);
    ck_assert_uint_eq(again.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    /* Object-associated lookups still use a (I3). */
    size_t vs = 0;
    uint8_t key[32] = {0};
    psdb_hr hr = psdb_pipeline_find_value(p2, key, sizeof(key), PSDB_VALUE_OBJECT_CODE, NULL, &vs);
    ck_assert_hr(hr, PSDB_E_NOT_FOUND);
    ck_assert_ptr_eq(w.rec->ev[w.rec->n - 1].session, w.a);
    /* F4 applies to a creating load too. */
    psdb_session_subobject bad = {NULL, PSDB_SESSION_FLAG_CREATE_ONLY};
    rt_compute c0;
    rt_compute_init(&c0, 0, &bad);
    psdb_pipeline *r = NULL;
    ck_assert_hr(psdb_pipeline_library_load_compute_pipeline(lib, "c0", &c0.desc, &r),
                 PSDB_E_INVALIDARG);
    psdb_pipeline_release(p);
    psdb_pipeline_release(p2);
    psdb_pipeline_release(q);
    psdb_pipeline_library_release(lib);
    free(blob);
    g2_free(&w);
}
END_TEST

START_TEST(test_pipeline_library__G2_a_stored_pso_keeps_its_selection)
{
    g2_world w;
    g2_init(&w);
    psdb_session_subobject sub = {w.a, PSDB_SESSION_FLAG_NONE};
    rt_graphics g;
    rt_graphics_init(&g, 2, &sub);
    psdb_pipeline *p = NULL, *q = NULL;
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, &g.desc, &p), PSDB_S_OK);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(w.dev, NULL, 0, &lib), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "g", p), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    size_t before = w.rec->n;
    g.desc.psdb = NULL;
    ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(lib, "g", &g.desc, &q), PSDB_S_OK);
    ck_assert_ptr_eq(p, q);
    ck_assert_uint_eq(w.rec->n, before); /* no selection, no lookup */
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(q, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_PER_OBJECT);
    psdb_pipeline_release(p);
    psdb_pipeline_release(q);
    psdb_pipeline_library_release(lib);
    g2_free(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pipeline_library");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_pipeline_library__crc32_check_value);
    tcase_add_test(tc, test_pipeline_library__L1_unsupported_without_library_flag);
    tcase_add_test(tc, test_pipeline_library__L2_empty_and_serialized_blobs);
    tcase_add_test(tc, test_pipeline_library__L3_golden_bad_blobs_exact_statuses);
    tcase_add_test(tc, test_pipeline_library__L3_blob_from_other_hardware_and_driver);
    tcase_add_test(tc, test_pipeline_library__L3_fuzz_corpus_replays_with_exact_statuses);
    tcase_add_test(tc, test_pipeline_library__L4_validate_only_returns_s_false);
    tcase_add_test(tc, test_pipeline_library__L5_existing_name_is_not_overwritten);
    tcase_add_test(tc, test_pipeline_library__L6_serialize_needs_the_full_size);
    tcase_add_test(tc, test_pipeline_library__L7_load_by_name_and_description);
    tcase_add_test(tc, test_pipeline_library__L7_loads_compile_nothing);
    tcase_add_test(tc, test_pipeline_library__L8_shared_units_are_held_once);
    tcase_add_test(tc, test_pipeline_library__L9_concurrent_stores_and_loads);
    tcase_add_test(tc, test_pipeline_library__G2_a_creating_load_selects_like_any_creation);
    tcase_add_test(tc, test_pipeline_library__G2_a_stored_pso_keeps_its_selection);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
