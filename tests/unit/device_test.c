/* device_test.c - devices (MODEL A), the implicit default (B7), local caching and
 * ShaderCacheControl (J) and statistics (K). */
#include "rt_fixture.h"

#include <unistd.h>

static psdb_device_desc base_desc(void)
{
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    return d;
}

static psdb_hr try_create(const psdb_device_desc *d)
{
    psdb_device *dev = NULL;
    psdb_hr hr = psdb_device_create(d, &dev);
    if (PSDB_FAILED(hr))
        ck_assert_ptr_null(dev);
    psdb_device_release(dev);
    return hr;
}

START_TEST(test_device__A1_adapter_validation)
{
    psdb_device_desc d = base_desc();
    ck_assert_hr(try_create(&d), PSDB_S_OK);
    d.adapter.family = NULL;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d.adapter.family = "";
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    char longfam[PSDB_ADAPTER_FAMILY_MAX];
    memset(longfam, 'x', sizeof(longfam) - 1);
    longfam[sizeof(longfam) - 1] = 0; /* 127 bytes: the longest allowed */
    d.adapter.family = longfam;
    ck_assert_hr(try_create(&d), PSDB_S_OK);
    char toolong[PSDB_ADAPTER_FAMILY_MAX + 1];
    memset(toolong, 'x', sizeof(toolong) - 1);
    toolong[sizeof(toolong) - 1] = 0;
    d.adapter.family = toolong;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d = base_desc();
    d.adapter.abi_min = 0; /* reserved */
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d = base_desc();
    d.adapter.abi_max = UINT64_MAX;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d = base_desc();
    d.adapter.abi_min = 5;
    d.adapter.abi_max = 4;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d = base_desc();
    d.adapter.flags = 0x100;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    d = base_desc();
    d.flags = 0x100;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create(NULL, NULL), PSDB_E_INVALIDARG);
    d = base_desc();
    ck_assert_hr(psdb_device_create(&d, NULL), PSDB_E_INVALIDARG);
    /* Without ASD the ABI range is not checked. */
    d.adapter.flags = PSDB_ADAPTER_FLAG_NO_ASD;
    d.adapter.abi_min = d.adapter.abi_max = 0;
    ck_assert_hr(try_create(&d), PSDB_S_OK);
    psdb_device_release(NULL);
}
END_TEST

START_TEST(test_device__A2_identity_validation)
{
    psdb_device_desc d = base_desc();
    psdb_app_identity id = rt_identity;
    d.identity = &id;
    id.desc.name = NULL;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    id.desc.name = "";
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    id = rt_identity;
    id.desc.version = 0;
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    id = rt_identity;
    id.desc.engine_version = PSDB_VERSION(1, 0, 0, 0); /* no engine name */
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
    id.desc.engine_name = "Engine";
    ck_assert_hr(try_create(&d), PSDB_S_OK);
    /* The identity is copied: the caller's strings may go away. */
    char name[16] = "Game";
    id = rt_identity;
    id.desc.name = name;
    psdb_device *dev = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    memset(name, 0, sizeof(name));
    psdb_feature_data_explicit_psdbs e = {0};
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_EXPLICIT_PSDBS, &e, sizeof(e)),
                 PSDB_S_OK);
    ck_assert_int_eq(e.supported, 1);
    psdb_device_release(dev);
    /* Capture needs an identity (the SODB records it). */
    d.identity = NULL;
    d.capture_sodb_path = "/tmp/x.sodb";
    ck_assert_hr(try_create(&d), PSDB_E_INVALIDARG);
}
END_TEST

START_TEST(test_device__A3_implicit_default_must_be_compatible)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "p.psdb");
    /* ABI 11 is outside [1, 10]. */
    rt_contents c = {.abi = 11};
    rt_make_psdb(p, &c);
    rt_register_default(reg, p);
    psdb_device *dev = rt_device(reg, RT_EXE);
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_int_eq(st.default_psdb_registered, 0);
    psdb_session *s = NULL;
    psdb_session_desc sd = {.psdb_path = p};
    ck_assert_hr(psdb_device_open_session(dev, &sd, &s), PSDB_E_DRIVER_VERSION_MISMATCH);
    psdb_device_release(dev);
    /* Another family. */
    psdb_device_desc d = base_desc();
    d.adapter.family = "other-family";
    d.registry_dir = reg;
    d.exe_path = RT_EXE;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    ck_assert_hr(psdb_device_open_session(dev, &sd, &s), PSDB_E_ADAPTER_NOT_FOUND);
    psdb_device_release(dev);
    /* In range: compatible. */
    c.abi = 10;
    rt_make_psdb(p, &c);
    dev = rt_device(reg, RT_EXE);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_int_eq(st.default_psdb_registered, 1);
    psdb_device_release(dev);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

START_TEST(test_device__A4_features)
{
    psdb_device_desc d = base_desc();
    psdb_device *dev = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    psdb_feature_data_shader_cache sc = {0};
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, &sc, sizeof(sc)),
                 PSDB_S_OK);
    ck_assert(sc.support_flags & PSDB_SHADER_CACHE_SUPPORT_SINGLE_PSO);
    ck_assert(sc.support_flags & PSDB_SHADER_CACHE_SUPPORT_LIBRARY);
    psdb_feature_data_shader_cache_abi_support abi;
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT, &abi,
                                                   sizeof(abi)),
                 PSDB_S_OK);
    ck_assert_str_eq(abi.adapter_family, RT_FAMILY);
    ck_assert_uint_eq(abi.minimum_abi_supported_version, 1);
    ck_assert_uint_eq(abi.maximum_abi_supported_version, 10);
    ck_assert_uint_eq(abi.compiler_version, PSDB_VERSION(1, 0, 0, 0));
    ck_assert_uint_eq(abi.application_profile_version, PSDB_VERSION(3, 1, 0, 0));
    psdb_feature_data_explicit_psdbs e = {0};
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_EXPLICIT_PSDBS, &e, sizeof(e)),
                 PSDB_S_OK);
    ck_assert_int_eq(e.supported, 1);
    /* Bad sizes, unknown features, NULLs. */
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, &sc, 1),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_check_feature_support(dev, (psdb_feature)99, &sc, sizeof(sc)),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, NULL, 4),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_check_feature_support(NULL, PSDB_FEATURE_SHADER_CACHE, &sc, 4),
                 PSDB_E_INVALIDARG);
    psdb_device_release(dev);
    /* No library support, no ASD. */
    d.adapter.flags = PSDB_ADAPTER_FLAG_NO_LIBRARY | PSDB_ADAPTER_FLAG_NO_ASD;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE, &sc, sizeof(sc)),
                 PSDB_S_OK);
    ck_assert(sc.support_flags & PSDB_SHADER_CACHE_SUPPORT_SINGLE_PSO);
    ck_assert(!(sc.support_flags & PSDB_SHADER_CACHE_SUPPORT_LIBRARY));
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT, &abi,
                                                   sizeof(abi)),
                 PSDB_E_FAIL);
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_EXPLICIT_PSDBS, &e, sizeof(e)),
                 PSDB_S_OK);
    ck_assert_int_eq(e.supported, 0);
    psdb_device_release(dev);
    /* ASD but no identity: explicit PSDBs unsupported. */
    d = base_desc();
    d.identity = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    ck_assert_hr(psdb_device_check_feature_support(dev, PSDB_FEATURE_EXPLICIT_PSDBS, &e, sizeof(e)),
                 PSDB_S_OK);
    ck_assert_int_eq(e.supported, 0);
    psdb_device_release(dev);
}
END_TEST

/* ---- B7 -------------------------------------------------------------------------------------- */

static int registered(psdb_device *dev)
{
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    return st.default_psdb_registered;
}

START_TEST(test_device__B7_implicit_default_resolved_at_creation)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "p.psdb");
    rt_make_full_psdb(p, 2);
    /* Nothing registered: absent. */
    psdb_device *before = rt_device(reg, RT_EXE);
    ck_assert_int_eq(registered(before), 0);
    rt_register_default(reg, p);
    /* Registration affects devices created later only. */
    ck_assert_int_eq(registered(before), 0);
    psdb_device *after = rt_device(reg, RT_EXE);
    ck_assert_int_eq(registered(after), 1);
    /* Another exe path, no exe path, or no ASD: absent. */
    psdb_device *other = rt_device(reg, "/games/other");
    ck_assert_int_eq(registered(other), 0);
    psdb_device *none = rt_device(reg, NULL);
    ck_assert_int_eq(registered(none), 0);
    psdb_device_desc d = base_desc();
    d.adapter.flags = PSDB_ADAPTER_FLAG_NO_ASD;
    d.registry_dir = reg;
    d.exe_path = RT_EXE;
    psdb_device *noasd = NULL;
    ck_assert_hr(psdb_device_create(&d, &noasd), PSDB_S_OK);
    ck_assert_int_eq(registered(noasd), 0);
    /* Removing the registration does not change existing devices. */
    psdb_installer *inst = NULL;
    psdb_application *app = NULL;
    psdb_installer_desc id = {.name = "test-installer", .root_dir = reg};
    ck_assert_hr(psdb_installer_open(&id, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_register_application(inst, RT_EXE, &rt_identity.desc, &app),
                 PSDB_S_OK);
    ck_assert_hr(psdb_installer_remove_application(inst, app), PSDB_S_OK);
    ck_assert_int_eq(registered(after), 1);
    psdb_device *removed = rt_device(reg, RT_EXE);
    ck_assert_int_eq(registered(removed), 0);
    psdb_application_release(app);
    psdb_installer_release(inst);
    psdb_device_release(removed);
    psdb_device_release(noasd);
    psdb_device_release(none);
    psdb_device_release(other);
    psdb_device_release(after);
    psdb_device_release(before);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

START_TEST(test_device__B7_missing_or_corrupt_psdb_is_absent)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "p.psdb");
    rt_make_full_psdb(p, 1);
    rt_register_default(reg, p);
    /* Corrupt: random bytes in place of the PSDB. */
    ck_assert_int_eq(tu_write_file(p, "this is not a psdb at all, not even sqlite", 42), 0);
    psdb_device *dev = rt_device(reg, RT_EXE);
    ck_assert_int_eq(registered(dev), 0);
    /* The component's session fails with the file's status. */
    psdb_session *s = NULL;
    psdb_session_desc sd = {.component = PSDB_DEFAULT_COMPONENT};
    ck_assert_hr(psdb_device_open_session(dev, &sd, &s), PSDB_E_CACHE_CORRUPT);
    psdb_device_release(dev);
    /* Deleted while registered. */
    ck_assert_int_eq(unlink(p), 0);
    dev = rt_device(reg, RT_EXE);
    ck_assert_int_eq(registered(dev), 0);
    ck_assert_hr(psdb_device_open_session(dev, &sd, &s), PSDB_E_NOT_FOUND);
    /* Creations still work, with no PSDB. */
    rt_compute c;
    psdb_pipeline *pl = NULL;
    psdb_creation_info info;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    psdb_pipeline_release(pl);
    psdb_device_release(dev);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

/* ---- J --------------------------------------------------------------------------------------- */

START_TEST(test_device__J1_miss_compiles_into_the_local_cache_not_the_psdb)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "e.psdb");
    rt_contents none = {0};
    rt_make_psdb(p, &none);
    size_t size_before = 0;
    free(tu_read_file(p, &size_before));
    psdb_device *dev = rt_device(reg, RT_EXE);
    psdb_session *e = rt_open(dev, p);
    ck_assert_hr(psdb_device_set_default_session(dev, e, 0), PSDB_S_OK);
    rt_compute c;
    psdb_pipeline *pl = NULL;
    psdb_creation_info info;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(!info.psdb_hit);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 2); /* CS + pipeline */
    psdb_pipeline_release(pl);
    /* The second creation misses the PSDB again (nothing was stored there) but the local cache
     * has the units: no compile. */
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(!info.psdb_hit);
    ck_assert_uint_gt(info.lookups, 0);
    ck_assert_uint_eq(info.hits, 0);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 2);
    psdb_pipeline_release(pl);
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 2);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 2);
    ck_assert_uint_eq(st.pipeline_states.num_total_cache_missed, 1);
    /* The PSDB file is unchanged and refuses stores. */
    size_t size_after = 0;
    free(tu_read_file(p, &size_after));
    ck_assert_uint_eq(size_before, size_after);
    ck_assert_hr(psdb_session_store_value(e, "k", 1, "v", 1), PSDB_E_ACCESS);
    /* Clearing the local cache forces compiles again. */
    ck_assert_hr(
        psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_IMPLICIT, PSDB_CACHE_CONTROL_CLEAR),
        PSDB_S_OK);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 4);
    psdb_pipeline_release(pl);
    /* With the local cache disabled every creation compiles, and nothing is stored. */
    ck_assert_hr(
        psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_IMPLICIT, PSDB_CACHE_CONTROL_DISABLE),
        PSDB_S_OK);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 8);
    psdb_session_release(e);
    psdb_device_release(dev);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

START_TEST(test_device__J2_disabling_lookups_keeps_default_and_selections)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "a.psdb");
    rt_make_full_psdb(p, 2);
    psdb_device *dev = rt_device(reg, RT_EXE);
    rt_recorder *rec = rt_recorder_new(dev);
    psdb_session *a = rt_open(dev, p);
    ck_assert_hr(psdb_device_set_default_session(dev, a, 0), PSDB_S_OK);
    rt_compute c;
    psdb_pipeline *before = NULL, *pl = NULL;
    psdb_creation_info info;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &before), PSDB_S_OK);
    size_t events = rec->n;
    ck_assert_uint_eq(events, 8);
    ck_assert_hr(psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED,
                                                  PSDB_CACHE_CONTROL_DISABLE),
                 PSDB_S_OK);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    /* Still selected, no lookup made. */
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(info.lookups, 0);
    ck_assert(!info.psdb_hit);
    ck_assert_uint_eq(rec->n, events);
    size_t size = 0;
    uint8_t key[32] = {0};
    ck_assert_hr(psdb_pipeline_find_value(before, key, 32, 0, NULL, &size),
                 PSDB_E_NOT_CURRENTLY_AVAILABLE);
    ck_assert_uint_eq(rec->n, events);
    psdb_pipeline_release(pl);
    ck_assert_hr(psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED,
                                                  PSDB_CACHE_CONTROL_ENABLE),
                 PSDB_S_OK);
    /* The default survived; the existing object kept its selection. */
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(info.psdb_hit);
    int all_in = 0;
    ck_assert_uint_eq(rt_events_of(rec, info.operation_id, a, &all_in), 8);
    ck_assert(all_in);
    ck_assert_hr(psdb_pipeline_find_value(before, key, 32, 0, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_pipeline_release(pl);
    /* Bad controls. */
    ck_assert_hr(
        psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED,
                                         PSDB_CACHE_CONTROL_DISABLE | PSDB_CACHE_CONTROL_ENABLE),
        PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED, 0),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_shader_cache_control(dev, 0, PSDB_CACHE_CONTROL_ENABLE),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_shader_cache_control(dev, 0x80, PSDB_CACHE_CONTROL_ENABLE),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED, 0x40),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_shader_cache_control(NULL, PSDB_CACHE_KIND_PRECOMPILED,
                                                  PSDB_CACHE_CONTROL_ENABLE),
                 PSDB_E_INVALIDARG);
    /* CLEAR on PSDBs leaves them alone. */
    ck_assert_hr(psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_PRECOMPILED,
                                                  PSDB_CACHE_CONTROL_CLEAR),
                 PSDB_S_OK);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(pl);
    psdb_pipeline_release(before);
    psdb_session_release(a);
    psdb_device_release(dev);
    rt_recorder_free(rec);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

START_TEST(test_device__J3_reused_collections_need_no_new_lookup)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "a.psdb");
    rt_make_full_psdb(p, 2);
    psdb_device *dev = rt_device(reg, RT_EXE);
    rt_recorder *rec = rt_recorder_new(dev);
    psdb_session *a = rt_open(dev, p);
    ck_assert_hr(psdb_device_set_default_session(dev, a, 0), PSDB_S_OK);
    rt_state_object cd, sd;
    psdb_state_object *coll = NULL, *so = NULL, *so2 = NULL;
    psdb_creation_info ci, si, s2;
    rt_state_object_init(&cd, PSDB_STATE_OBJECT_COLLECTION, 0, NULL, NULL);
    ck_assert_hr(psdb_device_create_state_object(dev, &cd.desc, &coll), PSDB_S_OK);
    ck_assert_hr(psdb_state_object_get_creation_info(coll, &ci), PSDB_S_OK);
    /* Two state objects reuse the collection: their lookups cover their own units only (a
     * library and the object: 8 lookups), never the collection's again. */
    rt_state_object_init(&sd, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL, coll);
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, &so), PSDB_S_OK);
    ck_assert_hr(psdb_state_object_get_creation_info(so, &si), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, &so2), PSDB_S_OK);
    ck_assert_hr(psdb_state_object_get_creation_info(so2, &s2), PSDB_S_OK);
    ck_assert_uint_le(si.lookups, 8);
    ck_assert_uint_eq(si.lookups, s2.lookups);
    /* The collection's creation info is untouched by its reuse. */
    psdb_creation_info again;
    ck_assert_hr(psdb_state_object_get_creation_info(coll, &again), PSDB_S_OK);
    ck_assert_uint_eq(again.operation_id, ci.operation_id);
    ck_assert_uint_eq(again.lookups, ci.lookups);
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.state_objects.num_created, 3);
    psdb_state_object_release(so2);
    psdb_state_object_release(so);
    psdb_state_object_release(coll);
    psdb_session_release(a);
    psdb_device_release(dev);
    rt_recorder_free(rec);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

START_TEST(test_device__F5_corruption_found_at_lookup_is_a_miss)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "a.psdb");
    rt_make_full_psdb(p, 2);
    /* Damage every blob: the file still opens, the data queries meet the damage. */
    char *cmd = NULL;
    ck_assert_int_gt(
        asprintf(&cmd, "sqlite3 '%s' 'UPDATE blobs SET data = zeroblob(length(data))'", p), 0);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(cmd);
    psdb_device *dev = rt_device(reg, RT_EXE);
    rt_recorder *rec = rt_recorder_new(dev);
    psdb_session *a = rt_open(dev, p);
    ck_assert_hr(psdb_device_set_default_session(dev, a, 0), PSDB_S_OK);
    rt_compute c;
    psdb_pipeline *pl = NULL;
    psdb_creation_info info;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(!info.psdb_hit);
    int corrupt = 0, all_in = 0;
    for (size_t i = 0; i < rec->n; i++)
        corrupt += rec->ev[i].result == PSDB_E_CACHE_CORRUPT;
    ck_assert_int_gt(corrupt, 0);
    ck_assert_uint_eq(rt_events_of(rec, info.operation_id, a, &all_in), info.lookups);
    ck_assert(all_in);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 2);
    psdb_pipeline_release(pl);
    psdb_session_release(a);
    psdb_device_release(dev);
    rt_recorder_free(rec);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
}
END_TEST

/* ---- K --------------------------------------------------------------------------------------- */

START_TEST(test_device__K1_statistics_per_category)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "reg"), *p = tu_path(dir, "i.psdb"),
         *partial = tu_path(dir, "partial.psdb");
    /* The implicit default holds compute 0, graphics 0 and state object 0. */
    int zero[] = {0};
    rt_contents c = {.compute = zero,
                     .num_compute = 1,
                     .graphics = zero,
                     .num_graphics = 1,
                     .state_objects = zero,
                     .num_state_objects = 1};
    rt_make_psdb(p, &c);
    rt_contents pc = {.compute = zero, .num_compute = 1, .partial = 1};
    rt_make_psdb(partial, &pc);
    rt_register_default(reg, p);
    psdb_device *dev = rt_device(reg, RT_EXE);
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_int_eq(st.default_psdb_registered, 1);
    ck_assert_uint_eq(st.pipeline_states.num_created, 0);
    psdb_pipeline *pl = NULL;
    rt_compute cd;
    rt_compute_init(&cd, 0, NULL); /* hit */
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &cd.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    rt_compute_init(&cd, 1, NULL); /* miss, compiled */
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &cd.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &cd.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl); /* miss, local cache hit */
    rt_graphics gd;
    rt_graphics_init(&gd, 0, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &gd.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    /* Partial hit: the pipeline unit is missing (the CS is there). */
    psdb_session *ps = rt_open(dev, partial);
    psdb_session_subobject sub = {ps, 0};
    psdb_creation_info info;
    rt_compute_init(&cd, 0, &sub);
    psdb_device_shader_cache_control(dev, PSDB_CACHE_KIND_IMPLICIT, PSDB_CACHE_CONTROL_CLEAR);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &cd.desc, &pl), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pl, &info), PSDB_S_OK);
    ck_assert(!info.psdb_hit);
    ck_assert_uint_gt(info.hits, 0);
    psdb_pipeline_release(pl);
    rt_state_object sd;
    psdb_state_object *so = NULL;
    rt_state_object_init(&sd, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 0, NULL, NULL);
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, &so), PSDB_S_OK);
    psdb_state_object_release(so);
    rt_state_object_init(&sd, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 5, NULL, NULL);
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, &so), PSDB_S_OK);
    psdb_state_object_release(so);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 5);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 3);  /* 1, 1 again, partial */
    ck_assert_uint_eq(st.pipeline_states.num_total_cache_missed, 2); /* 1, partial */
    ck_assert_uint_eq(st.pipeline_states.num_cache_unknown, 0);
    ck_assert_uint_eq(st.state_objects.num_created, 2);
    ck_assert_uint_eq(st.state_objects.num_psdb_cache_missed, 1);
    ck_assert_uint_eq(st.state_objects.num_total_cache_missed, 1);
    ck_assert_hr(psdb_device_get_statistics(dev, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_get_statistics(NULL, &st), PSDB_E_INVALIDARG);
    psdb_session_release(ps);
    psdb_device_release(dev);
    /* Without ASD every creation is "unknown". */
    psdb_device_desc d = base_desc();
    d.adapter.flags = PSDB_ADAPTER_FLAG_NO_ASD;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    rt_compute_init(&cd, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &cd.desc, &pl), PSDB_S_OK);
    psdb_pipeline_release(pl);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 1);
    ck_assert_uint_eq(st.pipeline_states.num_cache_unknown, 1);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 0);
    ck_assert_int_eq(st.default_psdb_registered, 0);
    psdb_device_release(dev);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(p);
    free(partial);
}
END_TEST

/* ---- capture --------------------------------------------------------------------------------- */

static int count_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                       size_t desc_size, void *ctx)
{
    (void)key;
    (void)version;
    (void)desc;
    (void)desc_size;
    ((int *)ctx)[kind]++;
    return 0;
}

START_TEST(test_device__capture_records_every_creation_description)
{
    char *dir = tu_mkdtemp(), *sodb = tu_path(dir, "capture.sodb");
    psdb_device_desc d = base_desc();
    d.capture_sodb_path = sodb;
    psdb_device *dev = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    for (int i = 0; i < 3; i++) {
        rt_compute c;
        rt_graphics g;
        psdb_pipeline *p = NULL;
        rt_compute_init(&c, i, NULL);
        ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &p), PSDB_S_OK);
        psdb_pipeline_release(p);
        rt_graphics_init(&g, i, NULL);
        ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g.desc, &p), PSDB_S_OK);
        psdb_pipeline_release(p);
    }
    rt_state_object s;
    psdb_state_object *so = NULL;
    rt_state_object_init(&s, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 0, NULL, NULL);
    ck_assert_hr(psdb_device_create_state_object(dev, &s.desc, &so), PSDB_S_OK);
    psdb_state_object_release(so);
    /* A duplicate description is recorded once. */
    rt_compute c;
    psdb_pipeline *p = NULL;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &p), PSDB_S_OK);
    psdb_pipeline_release(p);
    psdb_device_release(dev);
    psdb_sodb *sd = NULL;
    ck_assert_hr(psdb_sodb_open(sodb, &sd), PSDB_S_OK);
    int counts[4] = {0};
    ck_assert_hr(psdb_sodb_foreach(sd, count_entry, counts), PSDB_S_OK);
    ck_assert_int_eq(counts[PSDB_SODB_COMPUTE], 3);
    ck_assert_int_eq(counts[PSDB_SODB_GRAPHICS], 3);
    ck_assert_int_eq(counts[PSDB_SODB_STATE_OBJECT], 1);
    psdb_sodb_release(sd);
    tu_rmtree(dir);
    free(dir);
    free(sodb);
}
END_TEST

static void message_sink(uint32_t severity, uint32_t id, const char *text, void *ctx)
{
    (void)severity;
    (void)id;
    (void)text;
    (*(int *)ctx)++;
}

START_TEST(test_device__null_arguments_are_refused)
{
    psdb_device_desc d = base_desc();
    psdb_device *dev = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    psdb_creation_info info;
    psdb_session *s = NULL;
    psdb_state_object *so = NULL;
    rt_state_object sd;
    rt_state_object_init(&sd, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 0, NULL, NULL);
    ck_assert_hr(psdb_device_set_lookup_callback(NULL, NULL, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_message_callback(NULL, NULL, NULL), PSDB_E_INVALIDARG);
    int messages = 0;
    ck_assert_hr(psdb_device_set_message_callback(dev, message_sink, &messages), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_message_callback(dev, NULL, NULL), PSDB_S_OK);
    ck_assert_hr(psdb_device_open_session(dev, NULL, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_cache_session(dev, NULL, &s), PSDB_E_INVALIDARG);
    psdb_cache_session_desc cd = {.mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(NULL, &cd, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_cache_session(dev, &cd, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_state_object(NULL, &sd.desc, &so), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_state_object(dev, NULL, &so), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_add_to_state_object(dev, NULL, NULL, &so), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_get_creation_info(NULL, &info), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_state_object_get_creation_info(NULL, &info), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_state_object_find_value(NULL, "k", 1, 0, NULL, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_on_destroy(NULL, NULL, NULL), PSDB_E_INVALIDARG);
    /* Two PSDB subobjects in one state object. */
    psdb_session_subobject none = {NULL, 0};
    rt_state_object_init(&sd, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 0, &none, NULL);
    sd.sub[sd.desc.num_subobjects++] = (psdb_state_subobject){PSDB_SUBOBJECT_PSDB, &none};
    ck_assert_hr(psdb_device_create_state_object(dev, &sd.desc, &so), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(so);
    psdb_pipeline_release(NULL);
    psdb_pipeline_addref(NULL);
    psdb_state_object_release(NULL);
    psdb_session_release(NULL);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(NULL), 0);
    ck_assert_int_eq(messages, 0);
    psdb_device_release(dev);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("device");
    tcase_add_test(tc, test_device__A1_adapter_validation);
    tcase_add_test(tc, test_device__A2_identity_validation);
    tcase_add_test(tc, test_device__A3_implicit_default_must_be_compatible);
    tcase_add_test(tc, test_device__A4_features);
    tcase_add_test(tc, test_device__B7_implicit_default_resolved_at_creation);
    tcase_add_test(tc, test_device__B7_missing_or_corrupt_psdb_is_absent);
    tcase_add_test(tc, test_device__J1_miss_compiles_into_the_local_cache_not_the_psdb);
    tcase_add_test(tc, test_device__J2_disabling_lookups_keeps_default_and_selections);
    tcase_add_test(tc, test_device__J3_reused_collections_need_no_new_lookup);
    tcase_add_test(tc, test_device__F5_corruption_found_at_lookup_is_a_miss);
    tcase_add_test(tc, test_device__K1_statistics_per_category);
    tcase_add_test(tc, test_device__capture_records_every_creation_description);
    tcase_add_test(tc, test_device__null_arguments_are_refused);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
