/* baseset_test.c - base-set packaging (seed 003, "serialized + derived together"): the bases of a
 * synthetic corpus in a pipeline library plus derivation records reproduce every PSO exactly, with
 * no compile and no lookup at the game's start. */
#include "rt_fixture.h"

#include "build/baseset.h"
#include "format/derivation.h"
#include "format/desc.h"
#include "build/synth.h"

typedef struct corpus {
    size_t n;
    uint32_t kind[512];
    uint8_t key[512][32];
    uint8_t *desc[512];
    size_t size[512];
} corpus;

static int collect(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                   size_t size, void *ctx)
{
    corpus *c = ctx;
    (void)version;
    ck_assert_uint_lt(c->n, 512);
    c->kind[c->n] = kind;
    memcpy(c->key[c->n], key, 32);
    c->desc[c->n] = malloc(size);
    memcpy(c->desc[c->n], desc, size);
    c->size[c->n] = size;
    c->n++;
    return 0;
}

static size_t find(const corpus *c, const uint8_t key[32])
{
    for (size_t i = 0; i < c->n; i++)
        if (memcmp(c->key[i], key, 32) == 0)
            return i;
    ck_abort_msg("key not in the corpus");
    return 0;
}

static psdb_device *device(void)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = rt_adapter(), .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    return dev;
}

START_TEST(test_baseset__bases_and_derivations_reproduce_every_pso)
{
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "corpus.sodb");
    psdb__synth_params sp = {.app_name = "Game",
                             .app_version = 1,
                             .pipelines = 120,
                             .seed = 7,
                             .variants = 6,
                             .compute_permille = 100};
    ck_assert_hr(psdb__synth_write(&sp, path), PSDB_S_OK);
    psdb_device *build = device();
    psdb__buf lib = {0}, recs = {0};
    psdb__baseset_stats st = {0};
    ck_assert_hr(psdb__baseset_build(build, path, &lib, &recs, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.entries, 120);
    ck_assert_uint_eq(st.compute + st.bases + st.derived + st.skipped, 120);
    ck_assert_uint_gt(st.derived, st.bases); /* the point: most PSOs are derived */
    psdb_device_release(build);

    corpus *c = calloc(1, sizeof(*c));
    psdb_sodb *sodb = NULL;
    ck_assert_hr(psdb_sodb_open(path, &sodb), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_foreach(sodb, collect, c), PSDB_S_OK);
    psdb_sodb_release(sodb);

    /* The game: load each base with its description, derive the rest. */
    psdb_device *game = device();
    rt_recorder *rec = rt_recorder_new(game);
    psdb_pipeline_library *l = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(game, lib.data, lib.len, &l), PSDB_S_OK);
    uint32_t count = 0;
    ck_assert_hr(psdb_derivation_records_validate(recs.data, recs.len, &count), PSDB_S_OK);
    ck_assert_uint_eq(count, st.derived);
    size_t cursor = 0;
    for (uint32_t i = 0; i < count; i++) {
        psdb_derivation d;
        ck_assert_hr(psdb_derivation_records_next(recs.data, recs.len, &cursor, &d), PSDB_S_OK);
        size_t b = find(c, d.base_key);
        psdb_graphics_pipeline_desc *bd = NULL;
        ck_assert_hr(psdb__desc_decode_graphics(c->desc[b], c->size[b], &bd), PSDB_S_OK);
        char name[65];
        psdb__hex(d.base_key, 32, name);
        psdb_pipeline *base = NULL, *derived = NULL;
        ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(l, name, bd, &base), PSDB_S_OK);
        ck_assert_hr(
            psdb_device_create_derived_graphics_pipeline(game, base, d.count, d.descs, &derived),
            PSDB_S_OK);
        /* The derived PSO's description is exactly the captured one: same object key. */
        psdb_creation_info info;
        ck_assert_hr(psdb_pipeline_get_creation_info(derived, &info), PSDB_S_OK);
        psdb_pipeline_library *check = NULL;
        ck_assert_hr(psdb_device_create_pipeline_library(game, NULL, 0, &check), PSDB_S_OK);
        ck_assert_hr(psdb_pipeline_library_store_pipeline(check, "d", derived), PSDB_S_OK);
        size_t k = find(c, d.key);
        psdb_graphics_pipeline_desc *kd = NULL;
        ck_assert_hr(psdb__desc_decode_graphics(c->desc[k], c->size[k], &kd), PSDB_S_OK);
        psdb_pipeline *same = NULL;
        ck_assert_hr(psdb_pipeline_library_load_graphics_pipeline(check, "d", kd, &same),
                     PSDB_S_OK);
        ck_assert_ptr_eq(same, derived);
        psdb_pipeline_release(same);
        psdb_pipeline_library_release(check);
        free(kd);
        free(bd);
        psdb_pipeline_release(base);
        psdb_pipeline_release(derived);
    }
    psdb_derivation past;
    ck_assert_hr(psdb_derivation_records_next(recs.data, recs.len, &cursor, &past), PSDB_S_FALSE);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(game), 0);
    ck_assert_uint_eq(rec->n, 0); /* no PSDB selected here: no lookups */
    /* Bad records: a flipped byte, another version. */
    recs.data[recs.len - 1] ^= 1;
    ck_assert_hr(psdb_derivation_records_validate(recs.data, recs.len, &count), PSDB_E_INVALIDARG);
    recs.data[recs.len - 1] ^= 1;
    recs.data[8] = 9;
    ck_assert_hr(psdb_derivation_records_validate(recs.data, recs.len, &count),
                 PSDB_E_DRIVER_VERSION_MISMATCH);
    ck_assert_hr(psdb_derivation_records_validate(recs.data, 10, &count), PSDB_E_INVALIDARG);
    cursor = 0;
    ck_assert_hr(psdb_derivation_records_next(recs.data, recs.len, &cursor, &past),
                 PSDB_E_DRIVER_VERSION_MISMATCH);
    recs.data[8] = PSDB__DRV_VERSION;
    cursor = 1; /* not a record boundary */
    ck_assert_hr(psdb_derivation_records_next(recs.data, recs.len, &cursor, &past),
                 PSDB_E_INVALIDARG);
    psdb_pipeline_library_release(l);
    rt_recorder_free(rec);
    psdb_device_release(game);
    for (size_t i = 0; i < c->n; i++)
        free(c->desc[i]);
    free(c);
    psdb__buf_free(&lib);
    psdb__buf_free(&recs);
    tu_rmtree(dir);
    free(dir);
    free(path);
}
END_TEST

START_TEST(test_baseset__tool_writes_library_and_records)
{
    char *dir = tu_mkdtemp();
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && %s synth --app G --app-version 1 --pipelines 40 -o c.sodb && "
             "%s baseset c.sodb --vendor-id 0x1234 --device-id 0x42 --family %s --abi 10 "
             "--compiler-version 1.0.0.0 --driver-build 77 -o b.plib --records b.pdrv",
             dir, PSDB_TOOL, PSDB_TOOL, RT_FAMILY);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    char *plib = tu_path(dir, "b.plib");
    size_t size = 0;
    char *blob = tu_read_file(plib, &size);
    ck_assert_ptr_nonnull(blob);
    psdb_device *dev = device(); /* the same adapter and driver as the tool's options */
    ck_assert_hr(psdb_device_create_pipeline_library(dev, blob, size, NULL), PSDB_S_FALSE);
    psdb_device_release(dev);
    snprintf(cmd, sizeof(cmd), "%s baseset c.sodb --family x", PSDB_TOOL);
    ck_assert_int_ne(tu_run(cmd, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s baseset --help", PSDB_TOOL);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(blob);
    free(plib);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("baseset");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_baseset__bases_and_derivations_reproduce_every_pso);
    tcase_add_test(tc, test_baseset__tool_writes_library_and_records);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
