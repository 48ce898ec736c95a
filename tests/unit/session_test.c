/* session_test.c - sessions (MODEL D): PSDB sessions from files and components, reference counts
 * and destruction callbacks, application-managed cache sessions. */
#include "runtime/device_int.h"
#include "rt_fixture.h"

#include <unistd.h>

typedef struct env {
    char *dir, *reg, *psdb, *cache_dir;
    psdb_device *dev;
} env;

static void env_init(env *e)
{
    memset(e, 0, sizeof(*e));
    e->dir = tu_mkdtemp();
    e->reg = tu_path(e->dir, "reg");
    e->psdb = tu_path(e->dir, "a.psdb");
    e->cache_dir = tu_path(e->dir, "caches");
    rt_make_full_psdb(e->psdb, 2);
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .exe_path = RT_EXE,
                          .registry_dir = e->reg,
                          .cache_dir = e->cache_dir,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&d, &e->dev), PSDB_S_OK);
}

static void env_free(env *e)
{
    psdb_device_release(e->dev);
    tu_rmtree(e->dir);
    free(e->dir);
    free(e->reg);
    free(e->psdb);
    free(e->cache_dir);
}

START_TEST(test_session__D1_from_file_and_component)
{
    env e;
    env_init(&e);
    psdb_session *s = rt_open(e.dev, e.psdb);
    /* A PSDB session answers object-code lookups and refuses stores. */
    rt_compute c;
    psdb__plan plan = {0};
    rt_compute_init(&c, 1, NULL);
    ck_assert_hr(psdb__plan_compute(&c.desc, &plan), PSDB_S_OK);
    size_t size = 0;
    ck_assert_hr(psdb_session_find_value(s, plan.units[0].key, 32, NULL, &size), PSDB_S_OK);
    ck_assert_uint_gt(size, 0);
    psdb__plan_free(&plan);
    ck_assert_hr(psdb_session_find_value(s, "nope", 4, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(s);
    /* From a component: not registered yet, then registered, then removed. */
    psdb_session_desc cd = {.component = "extra"};
    ck_assert_hr(psdb_device_open_session(e.dev, &cd, &s), PSDB_E_NOT_FOUND);
    psdb_installer *inst = NULL;
    psdb_application *app = NULL;
    psdb_component *comp = NULL;
    psdb_installer_desc id = {.name = "t", .root_dir = e.reg};
    ck_assert_hr(psdb_installer_open(&id, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_register_application(inst, RT_EXE, &rt_identity.desc, &app),
                 PSDB_S_OK);
    psdb_component_psdb other = {"other-family", e.psdb};
    ck_assert_hr(psdb_application_register_component(app, "extra", NULL, 1, &other, &comp),
                 PSDB_S_OK);
    /* Registered for another family only: not found for this device's family. */
    ck_assert_hr(psdb_device_open_session(e.dev, &cd, &s), PSDB_E_NOT_FOUND);
    psdb_component_psdb mine = {RT_FAMILY, e.psdb};
    ck_assert_hr(psdb_application_register_component(app, "extra", NULL, 1, &mine, NULL),
                 PSDB_S_OK);
    ck_assert_hr(psdb_device_open_session(e.dev, &cd, &s), PSDB_S_OK);
    /* Usable as an explicit PSDB. */
    ck_assert_hr(psdb_device_set_default_session(e.dev, s, 0), PSDB_S_OK);
    psdb_session_release(s);
    ck_assert_hr(psdb_application_remove_component(app, comp), PSDB_S_OK);
    ck_assert_hr(psdb_device_open_session(e.dev, &cd, &s), PSDB_E_NOT_FOUND);
    psdb_component_release(comp);
    psdb_application_release(app);
    psdb_installer_release(inst);
    /* Bad descriptions. */
    psdb_session_desc both = {.psdb_path = e.psdb, .component = "extra"};
    ck_assert_hr(psdb_device_open_session(e.dev, &both, &s), PSDB_E_INVALIDARG);
    psdb_session_desc neither = {0};
    ck_assert_hr(psdb_device_open_session(e.dev, &neither, &s), PSDB_E_INVALIDARG);
    psdb_session_desc empty = {.psdb_path = ""};
    ck_assert_hr(psdb_device_open_session(e.dev, &empty, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_open_session(e.dev, NULL, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_open_session(NULL, &both, &s), PSDB_E_INVALIDARG);
    psdb_session_desc missing = {.psdb_path = "/nonexistent/x.psdb"};
    ck_assert_hr(psdb_device_open_session(e.dev, &missing, &s), PSDB_E_NOT_FOUND);
    char *junk = tu_path(e.dir, "junk.psdb");
    ck_assert_int_eq(tu_write_file(junk, "junk", 4), 0);
    psdb_session_desc corrupt = {.psdb_path = junk};
    ck_assert_hr(psdb_device_open_session(e.dev, &corrupt, &s), PSDB_E_CACHE_CORRUPT);
    free(junk);
    /* Without ASD there is nothing to check a PSDB against. */
    psdb_device_desc nd = {.adapter = rt_adapter(), .identity = &rt_identity};
    nd.adapter.flags = PSDB_ADAPTER_FLAG_NO_ASD;
    psdb_device *noasd = NULL;
    ck_assert_hr(psdb_device_create(&nd, &noasd), PSDB_S_OK);
    psdb_session_desc fd = {.psdb_path = e.psdb};
    ck_assert_hr(psdb_device_open_session(noasd, &fd, &s), PSDB_E_UNSUPPORTED);
    psdb_device_release(noasd);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D1_reference_count_and_destroy_callbacks)
{
    env e;
    env_init(&e);
    int gone = 0, gone2 = 0;
    psdb_session *s = rt_open(e.dev, e.psdb);
    ck_assert_hr(psdb_session_on_destroy(s, rt_destroyed, &gone), PSDB_S_OK);
    ck_assert_hr(psdb_session_on_destroy(s, rt_destroyed, &gone2), PSDB_S_OK);
    ck_assert_hr(psdb_session_on_destroy(s, NULL, &gone), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_on_destroy(NULL, rt_destroyed, &gone), PSDB_E_INVALIDARG);
    psdb_session_addref(s);
    psdb_session_release(s);
    ck_assert_int_eq(gone, 0);
    psdb_session_release(s);
    ck_assert_int_eq(gone, 1);
    ck_assert_int_eq(gone2, 1);
    psdb_session_release(NULL);
    psdb_session_addref(NULL);
    /* A session outlives its device's release and keeps working. */
    psdb_session *t = rt_open(e.dev, e.psdb);
    psdb_device_release(e.dev);
    e.dev = NULL;
    size_t size = 0;
    ck_assert_hr(psdb_session_find_value(t, "x", 1, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(t);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D2_cache_sessions_are_not_psdb_sessions)
{
    env e;
    env_init(&e);
    psdb_session *c = NULL;
    psdb_cache_session_desc d = {.identifier = {1}, .mode = PSDB_CACHE_MODE_MEMORY, .version = 1};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &d, &c), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(e.dev, c, 0), PSDB_E_INVALIDARG);
    /* FindValue / StoreValue with DXGI statuses. */
    size_t size = 0;
    char buf[16];
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, NULL, &size), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_session_store_value(c, "k1", 2, "value-1", 7), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(c, "k1", 2, "value-x", 7), PSDB_E_ALREADY_EXISTS);
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, NULL, &size), PSDB_S_OK);
    ck_assert_uint_eq(size, 7);
    size = 3;
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, buf, &size), PSDB_E_MORE_DATA);
    ck_assert_uint_eq(size, 7);
    size = sizeof(buf);
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, buf, &size), PSDB_S_OK);
    ck_assert_int_eq(memcmp(buf, "value-1", 7), 0);
    /* Bad input. */
    ck_assert_hr(psdb_session_find_value(c, NULL, 2, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_find_value(c, "k", 0, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_find_value(c, "k", 1, NULL, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_store_value(c, "k", 1, NULL, 3), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_session_store_value(NULL, "k", 1, "v", 1), PSDB_E_INVALIDARG);
    psdb_cache_session_desc bad = d;
    bad.mode = 7;
    psdb_session *x = NULL;
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &bad, &x), PSDB_E_INVALIDARG);
    bad = d;
    bad.flags = 0x80;
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &bad, &x), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_cache_session(e.dev, NULL, &x), PSDB_E_INVALIDARG);
    /* Disabled application caches are not currently available. */
    ck_assert_hr(psdb_device_shader_cache_control(e.dev, PSDB_CACHE_KIND_APPLICATION,
                                                  PSDB_CACHE_CONTROL_DISABLE),
                 PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, NULL, &size), PSDB_E_NOT_CURRENTLY_AVAILABLE);
    ck_assert_hr(psdb_session_store_value(c, "k2", 2, "v", 1), PSDB_E_NOT_CURRENTLY_AVAILABLE);
    ck_assert_hr(
        psdb_device_shader_cache_control(e.dev, PSDB_CACHE_KIND_APPLICATION,
                                         PSDB_CACHE_CONTROL_ENABLE | PSDB_CACHE_CONTROL_CLEAR),
        PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(c, "k1", 2, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(c);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D2_identifier_and_version_sharing)
{
    env e;
    env_init(&e);
    psdb_session *a = NULL, *b = NULL, *x = NULL;
    psdb_cache_session_desc d = {
        .identifier = {7, 7}, .mode = PSDB_CACHE_MODE_MEMORY, .version = 3};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &d, &a), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &d, &b), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "key", 3, "shared", 6), PSDB_S_OK);
    size_t size = 0;
    ck_assert_hr(psdb_session_find_value(b, "key", 3, NULL, &size), PSDB_S_OK);
    ck_assert_uint_eq(size, 6);
    /* Another version (or mode) while open: already exists. */
    psdb_cache_session_desc v = d;
    v.version = 4;
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &v, &x), PSDB_E_ALREADY_EXISTS);
    ck_assert_ptr_null(x);
    /* Another identifier is another store. */
    psdb_cache_session_desc o = d;
    o.identifier[0] = 8;
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &o, &x), PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(x, "key", 3, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(x);
    /* Another device does not share (sessions belong to their device, D3). */
    psdb_device *other = rt_device(e.reg, RT_EXE);
    ck_assert_hr(psdb_device_create_cache_session(other, &d, &x), PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(x, "key", 3, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(x);
    psdb_device_release(other);
    /* Once every session is gone a memory store is gone; a new version may open. */
    psdb_session_release(a);
    psdb_session_release(b);
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &v, &x), PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(x, "key", 3, NULL, &size), PSDB_E_NOT_FOUND);
    psdb_session_release(x);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D2_disk_mode_persists_and_version_clears)
{
    env e;
    env_init(&e);
    psdb_session *a = NULL;
    psdb_cache_session_desc d = {.identifier = {0xAB}, .mode = PSDB_CACHE_MODE_DISK, .version = 1};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &d, &a), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "disk-key", 8, "persisted", 9), PSDB_S_OK);
    psdb_session_release(a);
    /* Reopened (even from another device): the value is there. */
    psdb_device_desc dd = {
        .adapter = rt_adapter(), .identity = &rt_identity, .cache_dir = e.cache_dir};
    psdb_device *other = NULL;
    ck_assert_hr(psdb_device_create(&dd, &other), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_cache_session(other, &d, &a), PSDB_S_OK);
    size_t size = 0;
    ck_assert_hr(psdb_session_find_value(a, "disk-key", 8, NULL, &size), PSDB_S_OK);
    ck_assert_uint_eq(size, 9);
    psdb_session_release(a);
    /* A new version clears it. */
    d.version = 2;
    ck_assert_hr(psdb_device_create_cache_session(other, &d, &a), PSDB_S_OK);
    ck_assert_hr(psdb_session_find_value(a, "disk-key", 8, NULL, &size), PSDB_E_NOT_FOUND);
    /* File size limit. */
    psdb_session_release(a);
    psdb_cache_session_desc small = {
        .identifier = {0xAC}, .mode = PSDB_CACHE_MODE_DISK, .max_value_file_size_bytes = 16};
    ck_assert_hr(psdb_device_create_cache_session(other, &small, &a), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "k", 1, "0123456789", 10), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "l", 1, "0123456789", 10), PSDB_E_CACHE_FULL);
    psdb_session_release(a);
    psdb_device_release(other);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D2_limits_and_hash_collisions)
{
    env e;
    env_init(&e);
    psdb_session *a = NULL;
    psdb_cache_session_desc d = {
        .identifier = {5}, .mode = PSDB_CACHE_MODE_MEMORY, .max_in_memory_entries = 2};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &d, &a), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "a", 1, "1", 1), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "b", 1, "2", 1), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "c", 1, "3", 1), PSDB_E_CACHE_FULL);
    psdb_session_release(a);
    psdb_cache_session_desc s = {
        .identifier = {6}, .mode = PSDB_CACHE_MODE_MEMORY, .max_in_memory_size_bytes = 8};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &s, &a), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "k", 1, "1234567", 7), PSDB_S_OK);
    ck_assert_hr(psdb_session_store_value(a, "l", 1, "1", 1), PSDB_E_CACHE_FULL);
    psdb_session_release(a);
    /* With a 1-bit hash two keys collide quickly. */
    psdb__cache_set_hash_bits(1);
    psdb_cache_session_desc h = {.identifier = {9}, .mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(e.dev, &h, &a), PSDB_S_OK);
    psdb__cache_set_hash_bits(64);
    ck_assert_hr(psdb_session_store_value(a, "key-0", 5, "v", 1), PSDB_S_OK);
    int collided = 0;
    for (int i = 1; i < 8 && !collided; i++) {
        char k[8];
        snprintf(k, sizeof(k), "key-%d", i);
        psdb_hr hr = psdb_session_store_value(a, k, 5, "v", 1);
        if (hr == PSDB_E_CACHE_HASH_COLLISION) {
            size_t size = 0;
            ck_assert_hr(psdb_session_find_value(a, k, 5, NULL, &size),
                         PSDB_E_CACHE_HASH_COLLISION);
            collided = 1;
        } else {
            ck_assert_hr(hr, PSDB_S_OK);
        }
    }
    ck_assert(collided);
    psdb_session_release(a);
    env_free(&e);
}
END_TEST

START_TEST(test_session__D3_session_belongs_to_its_device)
{
    env e;
    env_init(&e);
    psdb_device *other = rt_device(e.reg, RT_EXE);
    psdb_session *s = rt_open(other, e.psdb);
    rt_compute c;
    psdb_pipeline *p = NULL;
    psdb_session_subobject sub = {s, 0};
    rt_compute_init(&c, 0, &sub);
    ck_assert_hr(psdb_device_set_default_session(e.dev, s, 0), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_compute_pipeline(e.dev, &c.desc, &p), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_compute_pipeline(other, &c.desc, &p), PSDB_S_OK);
    psdb_pipeline_release(p);
    psdb_session_release(s);
    psdb_device_release(other);
    env_free(&e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_add_test(tc, test_session__D1_from_file_and_component);
    tcase_add_test(tc, test_session__D1_reference_count_and_destroy_callbacks);
    tcase_add_test(tc, test_session__D2_cache_sessions_are_not_psdb_sessions);
    tcase_add_test(tc, test_session__D2_identifier_and_version_sharing);
    tcase_add_test(tc, test_session__D2_disk_mode_persists_and_version_clears);
    tcase_add_test(tc, test_session__D2_limits_and_hash_collisions);
    tcase_add_test(tc, test_session__D3_session_belongs_to_its_device);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
