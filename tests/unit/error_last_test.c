/* error_last_test.c - every public call that returns a status records why it failed: each row
 * calls one public function with input that fails (NULL arguments, bad sizes, wrong state, damaged
 * blobs) and checks that psdb_error_last() then says something, and that it names the concern
 * the row gives. tests/build/error_table_test.sh checks that every public function returning
 * psdb_hr has a row here, so a new function without one fails the build tests. */
#include "rt_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

/* g_missing is never created; g_garbage holds bytes of no format. */
static char *g_dir, *g_psdb, *g_missing, *g_garbage, *g_key, *g_pub, *g_reg;
static psdb_device *g_dev;     /* a tools device with identity and exe path */
static psdb_device *g_bare;    /* a device of an adapter without shader delivery support */
static psdb_pipeline *g_gfx;   /* a graphics pipeline of g_dev */
static psdb_pipeline *g_deser; /* g_gfx serialized and deserialized */
static psdb_session *g_cache;  /* a memory cache session of g_dev */
static psdb_session *g_psdbs;  /* a PSDB session of g_dev */
static psdb_queue *g_queue;    /* one worker */
static psdb_pipeline_library *g_lib;
static psdb_file *g_file;
static psdb_key *g_pubkey;
static psdb_installer *g_inst;
static psdb_application *g_app;

static const uint8_t garbage[64] = "not a blob of any format psdb knows, long enough for headers.";

static void setup(void)
{
    g_dir = tu_mkdtemp();
    g_psdb = tu_path(g_dir, "a.psdb");
    g_missing = tu_path(g_dir, "missing.file");
    g_garbage = tu_path(g_dir, "garbage.file");
    g_key = tu_path(g_dir, "k.key");
    g_pub = tu_path(g_dir, "k.key.pub");
    g_reg = tu_path(g_dir, "registry");
    rt_make_full_psdb(g_psdb, 2);
    ck_assert_int_eq(tu_write_file(g_garbage, garbage, sizeof(garbage)), 0);
    char kid[PSDB_KEY_ID_SIZE];
    ck_assert_hr(psdb_keygen(g_key, kid), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(g_pub, &g_pubkey), PSDB_S_OK);
    psdb_device_desc dd = {.adapter = rt_adapter(),
                           .identity = &rt_identity,
                           .exe_path = RT_EXE,
                           .registry_dir = g_reg,
                           .flags = PSDB_DEVICE_FLAG_TOOLS,
                           .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&dd, &g_dev), PSDB_S_OK);
    psdb_device_desc bd = {.adapter = rt_adapter(), .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    bd.adapter.flags = PSDB_ADAPTER_FLAG_NO_ASD;
    ck_assert_hr(psdb_device_create(&bd, &g_bare), PSDB_S_OK);
    rt_graphics g;
    rt_graphics_init(&g, 1, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(g_dev, &g.desc, &g_gfx), PSDB_S_OK);
    psdb_serialized_graphics_pipeline ser;
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(g_dev, g_gfx, 0, &ser), PSDB_S_OK);
    psdb_deserialize_graphics_pipeline_desc ds = {.root_signature = g.rs,
                                                  .root_signature_size = strlen(g.rs),
                                                  .packet = ser.packet,
                                                  .packet_size = ser.packet_size,
                                                  .metadata = ser.metadata,
                                                  .metadata_size = ser.metadata_size,
                                                  .vs = ser.vs,
                                                  .ps = ser.ps};
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(g_dev, &ds, &g_deser), PSDB_S_OK);
    psdb_cache_session_desc cd = {.identifier = {7}, .mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(g_dev, &cd, &g_cache), PSDB_S_OK);
    psdb_session_desc sd = {.psdb_path = g_psdb};
    ck_assert_hr(psdb_device_open_session(g_dev, &sd, &g_psdbs), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_queue(g_dev, 1, &g_queue), PSDB_S_OK);
    ck_assert_hr(psdb_device_create_pipeline_library(g_dev, NULL, 0, &g_lib), PSDB_S_OK);
    ck_assert_hr(psdb_file_open(g_psdb, NULL, &g_file), PSDB_S_OK);
    psdb_installer_desc id = {.name = "error-last", .root_dir = g_reg};
    ck_assert_hr(psdb_installer_open(&id, &g_inst), PSDB_S_OK);
    psdb_app_desc ad = {.exe_filename = "game", .name = "Game", .version = 1};
    ck_assert_hr(psdb_installer_register_application(g_inst, RT_EXE, &ad, &g_app), PSDB_S_OK);
}

static void teardown(void)
{
    psdb_application_release(g_app);
    psdb_installer_release(g_inst);
    psdb_file_release(g_file);
    psdb_pipeline_library_release(g_lib);
    psdb_queue_release(g_queue);
    psdb_session_release(g_psdbs);
    psdb_session_release(g_cache);
    psdb_pipeline_release(g_deser);
    psdb_pipeline_release(g_gfx);
    psdb_device_release(g_bare);
    psdb_device_release(g_dev);
    psdb_key_release(g_pubkey);
    tu_rmtree(g_dir);
    free(g_dir), free(g_psdb), free(g_missing), free(g_garbage), free(g_key), free(g_pub),
        free(g_reg);
}

static int no_group(const void *k, size_t n, uint64_t v, uint32_t c, void *ctx)
{
    (void)k, (void)n, (void)v, (void)c, (void)ctx;
    return 0;
}
static int no_entry(uint32_t kind, const uint8_t key[32], uint64_t v, const void *d, size_t n,
                    void *ctx)
{
    (void)kind, (void)key, (void)v, (void)d, (void)n, (void)ctx;
    return 0;
}
static int no_reg(const psdb_registry_entry *e, void *ctx)
{
    (void)e, (void)ctx;
    return 0;
}
static void no_done(psdb_hr hr, psdb_pipeline *p, void *ctx)
{
    (void)hr, (void)ctx;
    psdb_pipeline_release(p);
}
static void no_destroy(void *ctx)
{
    (void)ctx;
}

/* ---- The rows: one failing call each ----------------------------------------------------------
 */

#define OUT(type) type *out_ = NULL
/* Releases an object a wrongly succeeding call created (the row fails anyway). */
#define DROP(rel, hr) (rel(out_), (hr))

/* delivery: psdb/client.h */
static psdb_hr r_manifest_parse(void)
{
    OUT(psdb_manifest);
    return DROP(psdb_manifest_free, psdb_manifest_parse("{\"id\": 1}", 9, &out_));
}
static psdb_hr r_client_publish(void)
{
    OUT(psdb_publish_result);
    return DROP(psdb_publish_result_free, psdb_client_publish(NULL, NULL, &out_));
}
static psdb_hr r_client_create(void)
{
    psdb_client_desc d = {.server_url = "ftp://example.invalid"};
    OUT(psdb_client);
    return DROP(psdb_client_release, psdb_client_create(&d, &out_));
}
/* A client for the rows that need one; its server is never reached. */
static psdb_client *client_for_rows(void)
{
    psdb_client_desc d = {.server_url = "http://127.0.0.1:9"};
    psdb_client *c = NULL;
    ck_assert_int_eq(psdb_client_create(&d, &c), PSDB_S_OK);
    return c;
}
static psdb_hr r_client_resolve(void)
{
    psdb_manifest *m = NULL;
    psdb_hr hr = psdb_client_resolve(NULL, NULL, NULL, &m);
    psdb_manifest_free(m);
    return hr;
}
static psdb_hr r_client_coverage(void)
{
    psdb_client *c = client_for_rows();
    char *json = NULL;
    size_t size = 0;
    psdb_hr hr = psdb_client_coverage(c, "", &json, &size);
    psdb_client_release(c);
    free(json);
    return hr;
}
static psdb_hr r_client_list_sodbs(void)
{
    psdb_client *c = client_for_rows();
    psdb_manifest **v = NULL;
    uint32_t n = 0;
    psdb_hr hr = psdb_client_list_sodbs(c, "", 1, &v, &n);
    psdb_client_release(c);
    psdb_manifest_list_free(v, n);
    return hr;
}
static const psdb_target g_farm_target = {"gfx", 1, 0, 0};
static psdb_hr r_farm_announce(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_farm_announce(c, "", &g_farm_target, NULL);
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_farm_claim(void)
{
    psdb_client *c = client_for_rows();
    psdb_farm_claim *cl = NULL;
    psdb_hr hr = psdb_client_farm_claim(c, "w", NULL, 60, &cl);
    psdb_client_release(c);
    psdb_farm_claim_free(cl);
    return hr;
}
static psdb_hr r_farm_extend(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_farm_extend(c, NULL, 60);
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_farm_done(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_farm_done(c, NULL, "1");
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_farm_fail(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_farm_fail(c, NULL, "x");
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_farm_jobs(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_farm_jobs(c, NULL, NULL, NULL);
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_farm_job_parse(void)
{
    psdb_farm_job j;
    psdb_hr hr = psdb_farm_job_parse("{", 1, &j);
    psdb_farm_job_clear(&j);
    return hr;
}
static psdb_hr r_client_download(void)
{
    psdb_client *c = client_for_rows();
    psdb_hr hr = psdb_client_download(c, NULL, g_missing);
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_client_install(void)
{
    psdb_client *c = client_for_rows();
    psdb_install_desc d = {.exe_path = ""};
    psdb_hr hr = psdb_client_install(c, &d, NULL);
    psdb_client_release(c);
    return hr;
}
static psdb_hr r_client_local_targets(void)
{
    uint32_t n = 4;
    return psdb_client_local_targets(NULL, &n); /* room for 4 but nowhere to put them */
}
static psdb_hr r_client_verify_manifest(void)
{
    return psdb_client_verify_manifest(NULL, NULL);
}
static psdb_hr r_client_check_manifest(void)
{
    return psdb_client_check_manifest(NULL, NULL, NULL, NULL, NULL);
}
/* format: psdb/derived_pso.h (derivation records) and psdb/file.h, psdb/sign.h */
static psdb_hr r_derivation_records_validate(void)
{
    uint32_t n = 0;
    return psdb_derivation_records_validate(garbage, sizeof(garbage), &n);
}
static psdb_hr r_derivation_records_next(void)
{
    size_t cursor = 0;
    psdb_derivation d;
    return psdb_derivation_records_next(garbage, sizeof(garbage), &cursor, &d);
}
static psdb_hr r_file_open(void)
{
    OUT(psdb_file);
    return DROP(psdb_file_release, psdb_file_open(g_missing, NULL, &out_));
}
static psdb_hr r_file_open_damaged(void)
{
    OUT(psdb_file);
    return DROP(psdb_file_release, psdb_file_open(g_garbage, NULL, &out_));
}
static psdb_hr r_file_get_info(void)
{
    return psdb_file_get_info(NULL, NULL);
}
static psdb_hr r_file_find_value(void)
{
    size_t n = 0;
    return psdb_file_find_value(g_file, "", 0, PSDB_VALUE_OBJECT_CODE, NULL, &n);
}
static psdb_hr r_file_foreach_group(void)
{
    return psdb_file_foreach_group(NULL, no_group, NULL);
}
static psdb_hr r_file_check(void)
{
    return psdb_file_check(NULL, PSDB_FILE_CHECK_CONTENT, NULL);
}

static psdb_hr r_file_verify(void)
{
    char msg[128];
    return psdb_file_verify(NULL, msg, sizeof(msg));
}
static psdb_hr r_file_open_verified(void)
{
    char msg[128];
    OUT(psdb_file);
    return DROP(psdb_file_release, psdb_file_open_verified(NULL, msg, sizeof(msg), &out_));
}
static psdb_hr r_writer_create(void)
{
    OUT(psdb_writer);
    return DROP(psdb_writer_release, psdb_writer_create("", NULL, NULL, &out_));
}
static psdb_hr r_writer_put_value(void)
{
    return psdb_writer_put_value(NULL, "k", 1, PSDB_VALUE_OBJECT_CODE, "v", 1);
}
static psdb_hr r_writer_put_group(void)
{
    return psdb_writer_put_group(NULL, "g", 1, 1, 0, NULL);
}
static psdb_hr r_writer_finish(void)
{
    return psdb_writer_finish(NULL);
}
static psdb_hr r_value_map_write_null(void)
{
    return psdb_value_map_write(NULL, g_missing);
}
static psdb_hr r_value_map_write_garbage(void)
{
    return psdb_value_map_write(g_garbage, g_missing);
}
static psdb_hr r_value_map_write_version_null(void)
{
    return psdb_value_map_write_version(NULL, 2, g_missing);
}
static psdb_hr r_value_map_write_version_unknown(void)
{
    return psdb_value_map_write_version(g_garbage, 3, g_missing);
}
static psdb_hr r_value_map_read_info_null(void)
{
    psdb_value_map_info info;
    return psdb_value_map_read_info(NULL, &info);
}
static psdb_hr r_value_map_read_info_missing(void)
{
    psdb_value_map_info info;
    return psdb_value_map_read_info(g_missing, &info);
}
static psdb_hr r_value_map_read_info_garbage(void)
{
    psdb_value_map_info info;
    return psdb_value_map_read_info(g_garbage, &info);
}
static psdb_hr r_value_map_write_version_garbage(void)
{
    return psdb_value_map_write_version(g_garbage, 2, g_missing);
}
static psdb_hr r_file_kind(void)
{
    uint32_t k = 0;
    return psdb_file_kind(NULL, &k);
}
static psdb_hr r_sodb_writer_open(void)
{
    OUT(psdb_sodb_writer);
    return DROP(psdb_sodb_writer_release, psdb_sodb_writer_open(NULL, &rt_identity, &out_));
}
static psdb_hr r_sodb_writer_add(void)
{
    return psdb_sodb_writer_add(NULL, PSDB_SODB_COMPUTE, 1, garbage, sizeof(garbage));
}
static psdb_hr r_sodb_open(void)
{
    OUT(psdb_sodb);
    return DROP(psdb_sodb_release, psdb_sodb_open(g_psdb /* not an SODB */, &out_));
}
static psdb_hr r_sodb_get_identity(void)
{
    psdb_app_identity id;
    return psdb_sodb_get_identity(NULL, &id);
}
static psdb_hr r_sodb_foreach(void)
{
    return psdb_sodb_foreach(NULL, no_entry, NULL);
}
static psdb_hr r_sodb_foreach_by_key(void)
{
    return psdb_sodb_foreach_by_key(NULL, no_entry, NULL);
}
static psdb_hr r_sodb_decode(void)
{
    OUT(psdb_sodb_entry);
    return DROP(psdb_sodb_entry_release,
                psdb_sodb_decode(PSDB_SODB_COMPUTE, garbage, sizeof(garbage), &out_));
}
static psdb_hr r_sodb_writer_open_ex(void)
{
    OUT(psdb_sodb_writer);
    return DROP(psdb_sodb_writer_release,
                psdb_sodb_writer_open_ex(g_garbage, &rt_identity, 0x80, &out_));
}
static psdb_hr r_sodb_writer_add_compute(void)
{
    psdb_compute_pipeline_desc d = {.root_signature = "rs", .root_signature_size = 2};
    return psdb_sodb_writer_add_compute(NULL, 1, &d);
}
/* Runs fn on a durable writer of a new SODB (the rows that need an open writer). */
static psdb_hr with_writer(psdb_hr (*fn)(psdb_sodb_writer *w))
{
    psdb_sodb_writer *w = NULL;
    char *path = tu_path(g_dir, "rows.sodb");
    psdb_hr hr = psdb_sodb_writer_open(path, &rt_identity, &w);
    if (PSDB_SUCCEEDED(hr))
        hr = fn(w);
    psdb_sodb_writer_release(w);
    free(path);
    return hr;
}
static psdb_hr add_no_graphics(psdb_sodb_writer *w)
{
    return psdb_sodb_writer_add_graphics(w, 1, NULL);
}
static psdb_hr r_sodb_writer_add_graphics(void)
{
    return with_writer(add_no_graphics);
}
static psdb_hr add_collection(psdb_sodb_writer *w)
{
    psdb_existing_collection_desc c = {.collection = NULL};
    psdb_state_subobject sub = {PSDB_SUBOBJECT_EXISTING_COLLECTION, &c};
    psdb_state_object_desc d = {PSDB_STATE_OBJECT_COLLECTION, 1, &sub};
    return psdb_sodb_writer_add_state_object(w, 1, &d);
}
static psdb_hr r_sodb_writer_add_state_object(void)
{
    return with_writer(add_collection);
}
static psdb_hr r_sodb_writer_commit(void)
{
    return with_writer(psdb_sodb_writer_commit); /* not a bulk writer */
}
static psdb_hr r_sodb_compute_key(void)
{
    uint8_t key[32];
    return psdb_sodb_compute_key(NULL, key);
}
static psdb_hr r_sodb_graphics_key(void)
{
    psdb_graphics_pipeline_desc d = {.root_signature = "rs", .root_signature_size = 2};
    return psdb_sodb_graphics_key(&d, NULL);
}
static psdb_hr r_sodb_state_object_key(void)
{
    uint8_t key[32];
    psdb_state_object_desc d = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL};
    return psdb_sodb_state_object_key(&d, key);
}
static psdb_hr r_sodb_compile(void)
{
    psdb_sodb_compile_desc d = {.target = {.family = "f", .abi_version = 1}};
    char *out = tu_path(g_dir, "out.psdb");
    psdb_hr hr = psdb_sodb_compile(g_missing, &d, out, NULL);
    free(out);
    return hr;
}
static psdb_hr r_derivation_base_key(void)
{
    uint8_t key[32];
    return psdb_derivation_base_key(NULL, key);
}
static psdb_hr r_derivation_diff(void)
{
    psdb_graphics_pipeline_desc d = {0};
    psdb_derivation out;
    return psdb_derivation_diff(&d, NULL, &out);
}
static psdb_hr r_derivation_writer_create(void)
{
    return psdb_derivation_writer_create(NULL);
}
static psdb_hr r_derivation_writer_add_base(void)
{
    psdb_derivation_writer *w = NULL;
    static const uint8_t key[32] = {1};
    psdb_hr hr = psdb_derivation_writer_create(&w);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_add_base(w, key);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_add_base(w, key);
    psdb_derivation_writer_release(w);
    return hr;
}
static psdb_hr r_derivation_writer_add(void)
{
    psdb_derivation_writer *w = NULL;
    psdb_derivation d = {.key = {1}, .base_key = {2}};
    psdb_hr hr = psdb_derivation_writer_create(&w);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_add(w, &d);
    psdb_derivation_writer_release(w);
    return hr;
}
static psdb_hr r_derivation_writer_serialize(void)
{
    psdb_derivation_writer *w = NULL;
    uint8_t small[8];
    psdb_hr hr = psdb_derivation_writer_create(&w);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_derivation_writer_serialize(w, small, sizeof(small));
    psdb_derivation_writer_release(w);
    return hr;
}
static psdb_hr r_statement_encode(void)
{
    size_t n = 0;
    return psdb_statement_encode(NULL, NULL, &n);
}
static psdb_hr r_keygen(void)
{
    char kid[PSDB_KEY_ID_SIZE];
    return psdb_keygen("", kid);
}
static psdb_hr r_key_load(void)
{
    OUT(psdb_key);
    return DROP(psdb_key_release, psdb_key_load(g_missing, &out_));
}
static psdb_hr r_key_load_kind(void)
{
    char why[128];
    OUT(psdb_key);
    return DROP(psdb_key_release,
                psdb_key_load_kind(g_pub, PSDB_KEY_PRIVATE, &out_, why, sizeof(why)));
}
static psdb_hr r_key_from_pem(void)
{
    OUT(psdb_key);
    return DROP(psdb_key_release, psdb_key_from_pem("not pem", 7, &out_));
}
static psdb_hr r_key_public_pem(void)
{
    char buf[8];
    size_t n = sizeof(buf);
    return psdb_key_public_pem(g_pubkey, buf, &n); /* too small */
}
static psdb_hr r_key_id(void)
{
    char kid[PSDB_KEY_ID_SIZE];
    return psdb_key_id(NULL, kid);
}
static psdb_hr r_statement_sign(void)
{
    psdb_statement st = {0};
    char sig[PSDB_SIGNATURE_B64_SIZE];
    return psdb_statement_sign(g_pubkey /* public only */, &st, sig);
}
static psdb_hr r_statement_verify(void)
{
    psdb_statement st = {.identity = rt_identity, .target = rt_target(1), .serial = 1};
    return psdb_statement_verify(g_pubkey, &st, "AAAA");
}
static psdb_hr r_sodb_statement_encode(void)
{
    size_t n = 0;
    psdb_sodb_statement st = {0}; /* no application name */
    return psdb_sodb_statement_encode(&st, NULL, &n);
}
static psdb_hr r_sodb_statement_sign(void)
{
    psdb_sodb_statement st = {.identity = rt_identity, .serial = 1};
    char sig[PSDB_SIGNATURE_B64_SIZE];
    return psdb_sodb_statement_sign(g_pubkey /* public only */, &st, sig);
}
static psdb_hr r_sodb_statement_verify(void)
{
    psdb_sodb_statement st = {.identity = rt_identity, .serial = 1};
    return psdb_sodb_statement_verify(g_pubkey, &st, "AAAA");
}
/* runtime: psdb/device.h, pipeline.h, session.h, queue.h, pipeline_library.h, serialized and
 * derived PSOs */
static psdb_hr r_device_create(void)
{
    OUT(psdb_device);
    psdb_device_desc d = {.adapter = rt_adapter(), .exe_path = ""};
    return DROP(psdb_device_release, psdb_device_create(&d, &out_));
}
static psdb_hr r_device_check_feature_support(void)
{
    uint8_t small[1];
    return psdb_device_check_feature_support(g_dev, PSDB_FEATURE_SHADER_CACHE, small, 1);
}
static psdb_hr r_device_set_default_session(void)
{
    return psdb_device_set_default_session(g_dev, g_cache /* not a PSDB session */, 0);
}
static psdb_hr r_device_shader_cache_control(void)
{
    return psdb_device_shader_cache_control(g_dev, 0, 0);
}
static psdb_hr r_device_get_statistics(void)
{
    return psdb_device_get_statistics(g_dev, NULL);
}
static psdb_hr r_device_set_message_callback(void)
{
    return psdb_device_set_message_callback(NULL, NULL, NULL);
}
static psdb_hr r_device_set_lookup_callback(void)
{
    return psdb_device_set_lookup_callback(NULL, NULL, NULL);
}
static psdb_hr r_device_create_compute_pipeline(void)
{
    OUT(psdb_pipeline);
    return DROP(psdb_pipeline_release, psdb_device_create_compute_pipeline(g_dev, NULL, &out_));
}
static psdb_hr r_device_create_compute_pipeline_no_shader(void)
{
    OUT(psdb_pipeline);
    psdb_compute_pipeline_desc d = {.root_signature = "rs", .root_signature_size = 2};
    return DROP(psdb_pipeline_release, psdb_device_create_compute_pipeline(g_dev, &d, &out_));
}
static psdb_hr r_device_create_graphics_pipeline(void)
{
    OUT(psdb_pipeline);
    return DROP(psdb_pipeline_release, psdb_device_create_graphics_pipeline(NULL, NULL, &out_));
}
static psdb_hr r_device_create_graphics_pipeline_hull_only(void)
{
    OUT(psdb_pipeline);
    rt_graphics g;
    rt_graphics_init(&g, 3, NULL);
    g.desc.hs = g.desc.vs;
    return DROP(psdb_pipeline_release, psdb_device_create_graphics_pipeline(g_dev, &g.desc, &out_));
}
static psdb_hr r_device_create_pipeline_state_twice(void)
{
    OUT(psdb_pipeline);
    psdb_shader cs = {.code = "cs", .size = 2};
    psdb_stream_subobject sub[2] = {{.type = PSDB_STREAM_CS, .data = &cs},
                                    {.type = PSDB_STREAM_CS, .data = &cs}};
    psdb_pipeline_stream_desc d = {.subobjects = sub, .num_subobjects = 2};
    return DROP(psdb_pipeline_release, psdb_device_create_pipeline_state(g_dev, &d, &out_));
}
static psdb_hr r_device_create_pipeline_state(void)
{
    OUT(psdb_pipeline);
    psdb_pipeline_stream_desc d = {.num_subobjects = 3};
    return DROP(psdb_pipeline_release, psdb_device_create_pipeline_state(g_dev, &d, &out_));
}
static psdb_hr r_device_create_state_object(void)
{
    OUT(psdb_state_object);
    return DROP(psdb_state_object_release, psdb_device_create_state_object(g_dev, NULL, &out_));
}
static psdb_hr r_device_create_state_object_bad_subobjects(void)
{
    OUT(psdb_state_object);
    psdb_state_object_desc d = {.type = PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, .num_subobjects = 2};
    return DROP(psdb_state_object_release, psdb_device_create_state_object(g_dev, &d, &out_));
}
static psdb_hr r_device_add_to_state_object(void)
{
    OUT(psdb_state_object);
    return DROP(psdb_state_object_release,
                psdb_device_add_to_state_object(g_dev, NULL, NULL, &out_));
}
static psdb_hr r_pipeline_get_creation_info(void)
{
    return psdb_pipeline_get_creation_info(NULL, NULL);
}
static psdb_hr r_state_object_get_creation_info(void)
{
    return psdb_state_object_get_creation_info(NULL, NULL);
}
static psdb_hr r_pipeline_find_value(void)
{
    size_t n = 0;
    return psdb_pipeline_find_value(g_gfx, NULL, 0, PSDB_VALUE_OBJECT_CODE, NULL, &n);
}
static psdb_hr r_state_object_find_value(void)
{
    size_t n = 0;
    return psdb_state_object_find_value(NULL, "k", 1, PSDB_VALUE_OBJECT_CODE, NULL, &n);
}
static psdb_hr r_device_create_pipeline_library(void)
{
    OUT(psdb_pipeline_library);
    return DROP(psdb_pipeline_library_release,
                psdb_device_create_pipeline_library(g_dev, garbage, sizeof(garbage), &out_));
}
static psdb_hr r_pipeline_library_store_pipeline(void)
{
    return psdb_pipeline_library_store_pipeline(g_lib, "", g_gfx);
}
static psdb_hr r_pipeline_library_store_twice(void)
{
    psdb_hr hr = psdb_pipeline_library_store_pipeline(g_lib, "twice", g_gfx);
    ck_assert_hr(hr, PSDB_S_OK);
    return psdb_pipeline_library_store_pipeline(g_lib, "twice", g_gfx);
}
static psdb_hr r_pipeline_library_serialize(void)
{
    uint8_t small[4];
    return psdb_pipeline_library_serialize(g_lib, small, sizeof(small));
}
static psdb_hr r_pipeline_library_load_compute_pipeline(void)
{
    OUT(psdb_pipeline);
    return DROP(psdb_pipeline_release,
                psdb_pipeline_library_load_compute_pipeline(g_lib, NULL, NULL, &out_));
}
static psdb_hr r_pipeline_library_load_graphics_pipeline(void)
{
    OUT(psdb_pipeline);
    rt_graphics g;
    rt_graphics_init(&g, 99, NULL);
    return DROP(psdb_pipeline_release,
                psdb_pipeline_library_load_graphics_pipeline(g_lib, "unknown", &g.desc, &out_));
}
static psdb_hr r_pipeline_library_load_pipeline(void)
{
    OUT(psdb_pipeline);
    return DROP(psdb_pipeline_release,
                psdb_pipeline_library_load_pipeline(g_lib, "x", NULL, &out_));
}
static psdb_hr r_device_create_queue(void)
{
    OUT(psdb_queue);
    return DROP(psdb_queue_release, psdb_device_create_queue(g_dev, 0, &out_));
}
static psdb_hr r_queue_create_compute_pipeline(void)
{
    return psdb_queue_create_compute_pipeline(g_queue, NULL, no_done, NULL);
}
static psdb_hr r_queue_create_graphics_pipeline(void)
{
    rt_graphics g;
    rt_graphics_init(&g, 2, NULL);
    return psdb_queue_create_graphics_pipeline(g_queue, &g.desc, NULL, NULL);
}
static psdb_hr r_queue_read_statistics(void)
{
    psdb_statistics s;
    return psdb_queue_read_statistics(g_queue, 0xFFFFFFFFu, &s);
}
static psdb_hr r_queue_write_statistics(void)
{
    return psdb_queue_write_statistics(g_queue, 0, NULL);
}
static psdb_hr r_queue_wait_idle(void)
{
    return psdb_queue_wait_idle(NULL);
}
static psdb_hr r_device_serialize_graphics_pipeline(void)
{
    psdb_serialized_graphics_pipeline s;
    return psdb_device_serialize_graphics_pipeline(g_dev, g_gfx, 0x80u, &s);
}
static psdb_hr r_device_serialize_deserialized(void)
{
    psdb_serialized_graphics_pipeline s;
    return psdb_device_serialize_graphics_pipeline(g_dev, g_deser, 0, &s);
}
static psdb_hr r_device_deserialize_graphics_pipeline(void)
{
    OUT(psdb_pipeline);
    psdb_deserialize_graphics_pipeline_desc d = {.root_signature = "rs",
                                                 .root_signature_size = 2,
                                                 .packet = garbage,
                                                 .packet_size = sizeof(garbage),
                                                 .metadata = garbage,
                                                 .metadata_size = sizeof(garbage)};
    return DROP(psdb_pipeline_release, psdb_device_deserialize_graphics_pipeline(g_dev, &d, &out_));
}
static psdb_hr r_device_create_derived_graphics_pipeline(void)
{
    OUT(psdb_pipeline);
    psdb_derived_graphics_state_desc d[2] = {{.type = PSDB_DERIVED_STATE_SAMPLE_MASK},
                                             {.type = PSDB_DERIVED_STATE_SAMPLE_MASK}};
    return DROP(psdb_pipeline_release,
                psdb_device_create_derived_graphics_pipeline(g_dev, g_gfx, 2, d, &out_));
}
static psdb_hr r_device_open_session(void)
{
    OUT(psdb_session);
    psdb_session_desc d = {.psdb_path = g_psdb, .component = "default"};
    return DROP(psdb_session_release, psdb_device_open_session(g_dev, &d, &out_));
}
static psdb_hr r_device_open_session_without_asd(void)
{
    OUT(psdb_session);
    psdb_session_desc d = {.psdb_path = g_psdb};
    return DROP(psdb_session_release, psdb_device_open_session(g_bare, &d, &out_));
}
static psdb_hr r_device_create_cache_session(void)
{
    OUT(psdb_session);
    psdb_cache_session_desc d = {.mode = 9};
    return DROP(psdb_session_release, psdb_device_create_cache_session(g_dev, &d, &out_));
}
static psdb_hr r_session_find_value(void)
{
    size_t n = 0;
    return psdb_session_find_value(g_cache, "absent", 6, NULL, &n);
}
static psdb_hr r_session_store_value(void)
{
    return psdb_session_store_value(g_psdbs, "k", 1, "v", 1);
}
static psdb_hr r_session_on_destroy(void)
{
    (void)no_destroy;
    return psdb_session_on_destroy(g_cache, NULL, NULL);
}
/* registry: psdb/registry.h */
static psdb_hr r_installer_open(void)
{
    OUT(psdb_installer);
    psdb_installer_desc d = {.name = "", .root_dir = g_reg};
    return DROP(psdb_installer_release, psdb_installer_open(&d, &out_));
}
static psdb_hr r_installer_register_application(void)
{
    OUT(psdb_application);
    psdb_app_desc d = {.exe_filename = "game", .name = "Game", .version = 0};
    return DROP(psdb_application_release,
                psdb_installer_register_application(g_inst, RT_EXE, &d, &out_));
}
static psdb_hr r_installer_remove_application(void)
{
    return psdb_installer_remove_application(g_inst, NULL);
}
static psdb_hr r_application_register_component(void)
{
    OUT(psdb_component);
    return DROP(psdb_component_release,
                psdb_application_register_component(NULL, "c", NULL, 0, NULL, &out_));
}
static psdb_hr r_application_remove_component(void)
{
    return psdb_application_remove_component(g_app, NULL);
}
static psdb_hr r_application_get_component(void)
{
    OUT(psdb_component);
    return DROP(psdb_component_release, psdb_application_get_component(g_app, "", &out_));
}
static psdb_hr r_component_get_psdb_path(void)
{
    char buf[16];
    return psdb_component_get_psdb_path(NULL, RT_FAMILY, buf, sizeof(buf));
}
static psdb_hr r_explorer_open(void)
{
    return psdb_explorer_open(g_reg, NULL);
}
static psdb_hr r_explorer_get_application(void)
{
    OUT(psdb_application);
    return DROP(psdb_application_release, psdb_explorer_get_application(NULL, RT_EXE, &out_));
}
static psdb_hr r_explorer_foreach(void)
{
    return psdb_explorer_foreach(NULL, no_reg, NULL);
}
static psdb_hr r_registry_entry_check(void)
{
    psdb_registry_file_state st;
    return psdb_registry_entry_check(NULL, &st);
}
static psdb_hr r_installer_sweep_store(void)
{
    return psdb_installer_sweep_store(g_inst, 0x80000000u);
}
static psdb_hr r_get_precompile_targets(void)
{
    return psdb_get_precompile_targets(NULL, 0, NULL, NULL);
}
static psdb_hr r_registry_default_root(void)
{
    return psdb_registry_default_root(PSDB_SCOPE_USER, NULL, 16);
}

typedef struct row {
    const char *fn; /* the public function called */
    psdb_hr (*call)(void);
    const char *says; /* in psdb_error_last(): the concern, case-insensitive */
} row;

/* Statuses other than failure would fail the row; where the cause has a precise message, `says`
 * names the cause, otherwise (the boundary's safety net) the function. */
static const row rows[] = {
    {"psdb_manifest_parse", r_manifest_parse, "psdb_manifest_parse"},
    {"psdb_client_publish", r_client_publish, "NULL client"},
    {"psdb_client_create", r_client_create, "http:// or https://"},
    {"psdb_client_resolve", r_client_resolve, "NULL client"},
    {"psdb_client_download", r_client_download, "NULL manifest"},
    {"psdb_client_coverage", r_client_coverage, "empty app name"},
    {"psdb_client_list_sodbs", r_client_list_sodbs, "empty app name"},
    {"psdb_client_farm_announce", r_farm_announce, "no worker name"},
    {"psdb_client_farm_claim", r_farm_claim, "NULL target"},
    {"psdb_client_farm_extend", r_farm_extend, "NULL client or claim"},
    {"psdb_client_farm_done", r_farm_done, "NULL client, claim or psdb_id"},
    {"psdb_client_farm_fail", r_farm_fail, "NULL client, claim or error"},
    {"psdb_client_farm_jobs", r_farm_jobs, "NULL client or out"},
    {"psdb_farm_job_parse", r_farm_job_parse, "job: not JSON"},
    {"psdb_client_install", r_client_install, "no exe_path"},
    {"psdb_client_local_targets", r_client_local_targets, "out NULL"},
    {"psdb_client_verify_manifest", r_client_verify_manifest, "psdb_client_verify_manifest"},
    {"psdb_client_check_manifest", r_client_check_manifest, "psdb_client_check_manifest"},
    {"psdb_derivation_records_validate", r_derivation_records_validate,
     "damaged derivation records"},
    {"psdb_derivation_records_next", r_derivation_records_next, "damaged derivation records"},
    {"psdb_file_open", r_file_open, "missing.file"},
    {"psdb_file_open", r_file_open_damaged, "garbage.file"},
    {"psdb_file_get_info", r_file_get_info, "psdb_file_get_info"},
    {"psdb_file_find_value", r_file_find_value, "empty"},
    {"psdb_file_foreach_group", r_file_foreach_group, "NULL file"},
    {"psdb_file_verify", r_file_verify, "NULL file"},
    {"psdb_file_check", r_file_check, "NULL file"},
    {"psdb_file_open_verified", r_file_open_verified, "psdb_file_open_verified"},
    {"psdb_writer_create", r_writer_create, "empty path"},
    {"psdb_writer_put_value", r_writer_put_value, "NULL writer"},
    {"psdb_writer_put_group", r_writer_put_group, "NULL writer"},
    {"psdb_writer_finish", r_writer_finish, "NULL writer"},
    {"psdb_file_kind", r_file_kind, "NULL path"},
    {"psdb_value_map_write", r_value_map_write_null, "NULL path"},
    {"psdb_value_map_write", r_value_map_write_garbage, "psdb_value_map_write"},
    {"psdb_value_map_write_version", r_value_map_write_version_null, "NULL path"},
    {"psdb_value_map_write_version", r_value_map_write_version_unknown, "version 3 is not 1 or 2"},
    {"psdb_value_map_write_version", r_value_map_write_version_garbage,
     "psdb_value_map_write_version"},
    {"psdb_value_map_read_info", r_value_map_read_info_null, "NULL path"},
    {"psdb_value_map_read_info", r_value_map_read_info_missing, "missing.file"},
    {"psdb_value_map_read_info", r_value_map_read_info_garbage, "garbage.file: not a value map"},
    {"psdb_sodb_writer_open", r_sodb_writer_open, "empty path"},
    {"psdb_sodb_writer_add", r_sodb_writer_add, "NULL writer"},
    {"psdb_sodb_open", r_sodb_open, "not an SODB"},
    {"psdb_sodb_get_identity", r_sodb_get_identity, "psdb_sodb_get_identity"},
    {"psdb_sodb_foreach", r_sodb_foreach, "psdb_sodb_foreach"},
    {"psdb_sodb_foreach_by_key", r_sodb_foreach_by_key, "psdb_sodb_foreach_by_key"},
    {"psdb_sodb_decode", r_sodb_decode, "malformed compute"},
    {"psdb_sodb_writer_open_ex", r_sodb_writer_open_ex, "unknown flags"},
    {"psdb_sodb_writer_add_compute", r_sodb_writer_add_compute, "NULL writer"},
    {"psdb_sodb_writer_add_graphics", r_sodb_writer_add_graphics, "NULL description"},
    {"psdb_sodb_writer_add_state_object", r_sodb_writer_add_state_object, "existing collection"},
    {"psdb_sodb_writer_commit", r_sodb_writer_commit, "no bulk transaction"},
    {"psdb_sodb_compute_key", r_sodb_compute_key, "NULL description"},
    {"psdb_sodb_graphics_key", r_sodb_graphics_key, "NULL out"},
    {"psdb_sodb_state_object_key", r_sodb_state_object_key, "cannot hold"},
    {"psdb_sodb_compile", r_sodb_compile, "cannot open SODB"},
    {"psdb_derivation_base_key", r_derivation_base_key, "NULL argument"},
    {"psdb_derivation_diff", r_derivation_diff, "NULL argument"},
    {"psdb_derivation_writer_create", r_derivation_writer_create, "NULL out"},
    {"psdb_derivation_writer_add_base", r_derivation_writer_add_base, "a base already"},
    {"psdb_derivation_writer_add", r_derivation_writer_add, "no base of the writer"},
    {"psdb_derivation_writer_serialize", r_derivation_writer_serialize, "smaller than"},
    {"psdb_statement_encode", r_statement_encode, "NULL st"},
    {"psdb_keygen", r_keygen, "empty key file"},
    {"psdb_key_load", r_key_load, "missing.file: cannot open"},
    {"psdb_key_load_kind", r_key_load_kind, "a public key where the private key is expected"},
    {"psdb_key_from_pem", r_key_from_pem, "not a PEM key"},
    {"psdb_key_public_pem", r_key_public_pem, "smaller than the PEM"},
    {"psdb_key_id", r_key_id, "psdb_key_id"},
    {"psdb_statement_sign", r_statement_sign, "public key"},
    {"psdb_statement_verify", r_statement_verify, "not a canonical base64"},
    {"psdb_sodb_statement_encode", r_sodb_statement_encode, "no application name"},
    {"psdb_sodb_statement_sign", r_sodb_statement_sign, "public key"},
    {"psdb_sodb_statement_verify", r_sodb_statement_verify, "not a canonical base64"},
    {"psdb_device_create", r_device_create, "empty exe path"},
    {"psdb_device_check_feature_support", r_device_check_feature_support, "size"},
    {"psdb_device_set_default_session", r_device_set_default_session, "explicit psdb session"},
    {"psdb_device_shader_cache_control", r_device_shader_cache_control, "kinds"},
    {"psdb_device_get_statistics", r_device_get_statistics, "NULL device or out"},
    {"psdb_device_set_message_callback", r_device_set_message_callback, "NULL device"},
    {"psdb_device_set_lookup_callback", r_device_set_lookup_callback, "NULL device"},
    {"psdb_device_create_compute_pipeline", r_device_create_compute_pipeline, "desc"},
    {"psdb_device_create_compute_pipeline", r_device_create_compute_pipeline_no_shader,
     "no compute shader"},
    {"psdb_device_create_graphics_pipeline", r_device_create_graphics_pipeline, "NULL device"},
    {"psdb_device_create_graphics_pipeline", r_device_create_graphics_pipeline_hull_only,
     "hull shader without domain"},
    {"psdb_device_create_pipeline_state", r_device_create_pipeline_state, "subobjects"},
    {"psdb_device_create_pipeline_state", r_device_create_pipeline_state_twice, "given twice"},
    {"psdb_device_create_state_object", r_device_create_state_object, "NULL device, desc"},
    {"psdb_device_create_state_object", r_device_create_state_object_bad_subobjects, "subobjects"},
    {"psdb_device_add_to_state_object", r_device_add_to_state_object, "addition"},
    {"psdb_pipeline_get_creation_info", r_pipeline_get_creation_info, "NULL pipeline"},
    {"psdb_state_object_get_creation_info", r_state_object_get_creation_info, "NULL state object"},
    {"psdb_pipeline_find_value", r_pipeline_find_value, "key"},
    {"psdb_state_object_find_value", r_state_object_find_value, "NULL state object"},
    {"psdb_device_create_pipeline_library", r_device_create_pipeline_library, "blob"},
    {"psdb_pipeline_library_store_pipeline", r_pipeline_library_store_pipeline, "empty name"},
    {"psdb_pipeline_library_store_pipeline", r_pipeline_library_store_twice, "already stored"},
    {"psdb_pipeline_library_serialize", r_pipeline_library_serialize, "smaller"},
    {"psdb_pipeline_library_load_compute_pipeline", r_pipeline_library_load_compute_pipeline,
     "NULL library"},
    {"psdb_pipeline_library_load_graphics_pipeline", r_pipeline_library_load_graphics_pipeline,
     "no pipeline stored under this name"},
    {"psdb_pipeline_library_load_pipeline", r_pipeline_library_load_pipeline, "desc"},
    {"psdb_device_create_queue", r_device_create_queue, "worker count"},
    {"psdb_queue_create_compute_pipeline", r_queue_create_compute_pipeline, "desc"},
    {"psdb_queue_create_graphics_pipeline", r_queue_create_graphics_pipeline, "done callback"},
    {"psdb_queue_read_statistics", r_queue_read_statistics, "flags"},
    {"psdb_queue_write_statistics", r_queue_write_statistics, "values"},
    {"psdb_queue_wait_idle", r_queue_wait_idle, "NULL queue"},
    {"psdb_device_serialize_graphics_pipeline", r_device_serialize_graphics_pipeline, "flags"},
    {"psdb_device_serialize_graphics_pipeline", r_device_serialize_deserialized, "deserialized"},
    {"psdb_device_deserialize_graphics_pipeline", r_device_deserialize_graphics_pipeline,
     "metadata"},
    {"psdb_device_create_derived_graphics_pipeline", r_device_create_derived_graphics_pipeline,
     "given twice"},
    {"psdb_device_open_session", r_device_open_session, "exactly one"},
    {"psdb_device_open_session", r_device_open_session_without_asd, "abi"},
    {"psdb_device_create_cache_session", r_device_create_cache_session, "mode"},
    {"psdb_session_find_value", r_session_find_value, "not in the session"},
    {"psdb_session_store_value", r_session_store_value, "read-only"},
    {"psdb_session_on_destroy", r_session_on_destroy, "callback"},
    {"psdb_installer_open", r_installer_open, "installer name"},
    {"psdb_installer_register_application", r_installer_register_application, "version 0"},
    {"psdb_installer_remove_application", r_installer_remove_application, "NULL installer"},
    {"psdb_application_register_component", r_application_register_component, "NULL application"},
    {"psdb_application_remove_component", r_application_remove_component, "component"},
    {"psdb_application_get_component", r_application_get_component, "name"},
    {"psdb_component_get_psdb_path", r_component_get_psdb_path, "NULL component"},
    {"psdb_explorer_open", r_explorer_open, "NULL out"},
    {"psdb_explorer_get_application", r_explorer_get_application, "NULL explorer"},
    {"psdb_explorer_foreach", r_explorer_foreach, "NULL explorer"},
    {"psdb_registry_entry_check", r_registry_entry_check, "NULL entry"},
    {"psdb_installer_sweep_store", r_installer_sweep_store, "flags"},
    {"psdb_get_precompile_targets", r_get_precompile_targets, "NULL count"},
    {"psdb_registry_default_root", r_registry_default_root, "buf NULL"},
};

static const char *find_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return hay;
    return NULL;
}

START_TEST(test_error_last__every_failing_public_call_says_why)
{
    const row *r = &rows[_i];
    /* A message left by an earlier call must not pass for this call's. */
    psdb__error_clear();
    psdb_hr hr = r->call();
    ck_assert_msg(PSDB_FAILED(hr), "row %d %s: did not fail (%s)", _i, r->fn, psdb_hr_str(hr));
    const char *msg = psdb_error_last();
    ck_assert_msg(msg[0], "row %d %s failed with %s and left psdb_error_last empty", _i, r->fn,
                  psdb_hr_str(hr));
    ck_assert_msg(find_ci(msg, r->says), "row %d %s: \"%s\" does not mention \"%s\"", _i, r->fn,
                  msg, r->says);
    ck_assert_msg(!strchr(msg, '\n'), "row %d %s: not one line: %s", _i, r->fn, msg);
}
END_TEST

/* A failure inside a call that then fails for its own reason keeps the deeper, more precise
 * message; a later successful call leaves it in place (read it right after the failing status). */
START_TEST(test_error_last__deeper_message_wins_and_success_leaves_it)
{
    psdb__error_clear();
    psdb_session_desc d = {.psdb_path = g_missing}; /* the message names the path */
    psdb_session *s = NULL;
    ck_assert(PSDB_FAILED(psdb_device_open_session(g_dev, &d, &s)));
    ck_assert_msg(strstr(psdb_error_last(), "missing.file"), "%s", psdb_error_last());
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(g_dev, &st), PSDB_S_OK);
    ck_assert_msg(strstr(psdb_error_last(), "missing.file"), "%s", psdb_error_last());
}
END_TEST

/* The message buffers of public calls (psdb/file.h) are views of the one channel: on failure
 * they hold psdb_error_last()'s line, on success "ok"; nothing else writes them. */
START_TEST(test_error_last__message_buffers_are_views_of_it)
{
    char msg[512];
    psdb_file *f = NULL;
    psdb__error_clear();
    ck_assert(PSDB_FAILED(psdb_file_open_verified(g_garbage, msg, sizeof(msg), &f)));
    ck_assert_str_eq(msg, psdb_error_last());
    ck_assert(PSDB_FAILED(psdb_file_verify(NULL, msg, sizeof(msg))));
    ck_assert_str_eq(msg, psdb_error_last());
    char small[8];
    ck_assert(PSDB_FAILED(psdb_file_verify(NULL, small, sizeof(small))));
    ck_assert_int_eq(strncmp(small, psdb_error_last(), sizeof(small) - 1), 0);
    ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
    ck_assert_hr(psdb_file_open_verified(g_psdb, msg, sizeof(msg), &f), PSDB_S_OK);
    ck_assert_str_eq(msg, "ok");
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    ck_assert_str_eq(msg, "ok");
    psdb_file_release(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("error_last");
    TCase *tc = tcase_create("error_last");
    /* Once for all rows: each row runs in its own forked child, so what a row changes (a stored
     * pipeline, a file written) does not reach the next one. */
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_error_last__every_failing_public_call_says_why, 0,
                        (int)(sizeof(rows) / sizeof(rows[0])));
    tcase_add_test(tc, test_error_last__deeper_message_wins_and_success_leaves_it);
    tcase_add_test(tc, test_error_last__message_buffers_are_views_of_it);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
