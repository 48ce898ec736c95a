/* public_tool_api_test.c - the public calls the psdb tool uses instead of library internals:
 * psdb_file_kind (inspect), psdb_sodb_decode (replay), psdb_sodb_compile (compile) and
 * psdb_client_publish (publish), with NULL arguments and bad input. The upload itself is covered
 * against psdbd by server_api_test. */
#include "testutil.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "format/desc.h"
#include "common/buf.h"

static char *tmpdir;
static const uint8_t RS[] = {1, 2, 3, 4};
static const uint8_t CS[] = "compute shader bytes";
static const uint8_t VS[] = "vertex shader";

static const psdb_app_identity identity = {
    .desc = {.exe_filename = "game.exe", .name = "Tool Game", .version = PSDB_VERSION(1, 0, 0, 0)},
    .app_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
};

static void setup(void)
{
    tmpdir = tu_mkdtemp();
}

static void teardown(void)
{
    tu_rmtree(tmpdir);
    free(tmpdir);
    tmpdir = NULL;
}

static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

/* A valid one-value PSDB at path. */
static void write_psdb(const char *path)
{
    psdb_target t = {.family = "test-family", .abi_version = 1, .compiler_version = 1};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, PSDB_VALUE_OBJECT_CODE, "code", 4), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
}

/* ---- psdb_file_kind ----------------------------------------------------------------------------
 */

static uint32_t kind_of(const char *path)
{
    uint32_t k = 99;
    ck_assert_hr(psdb_file_kind(path, &k), PSDB_S_OK);
    return k;
}

START_TEST(test_public_tool_api__file_kind_tells_psdb_sodb_and_other)
{
    char *psdb = tu_path(tmpdir, "a.psdb"), *sodb = tu_path(tmpdir, "a.sodb");
    char *plain = tu_path(tmpdir, "plain.db"), *text = tu_path(tmpdir, "text.txt");
    char *empty = tu_path(tmpdir, "empty"), *fake = tu_path(tmpdir, "fake-sodb");
    psdb_sodb_writer *w = NULL;
    uint8_t header[100] = "SQLite format 3";
    char junk[300];

    write_psdb(psdb);
    ck_assert_hr(psdb_sodb_writer_open(sodb, &identity, &w), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    exec_sql(plain, "CREATE TABLE t (x); PRAGMA application_id = 7;");
    memset(junk, 'x', sizeof(junk));
    ck_assert_int_eq(tu_write_file(text, junk, sizeof(junk)), 0);
    ck_assert_int_eq(tu_write_file(empty, "", 0), 0);
    ck_assert_uint_eq(kind_of(psdb), PSDB_FILE_KIND_PSDB);
    ck_assert_uint_eq(kind_of(sodb), PSDB_FILE_KIND_SODB);
    ck_assert_uint_eq(kind_of(plain), PSDB_FILE_KIND_OTHER);
    ck_assert_uint_eq(kind_of(text), PSDB_FILE_KIND_OTHER);
    ck_assert_uint_eq(kind_of(empty), PSDB_FILE_KIND_OTHER);
    /* Only the header is read: 'PSOD' at offset 68 of a bare header claims an SODB; one byte
     * short of a header is nothing. */
    header[68] = 'P', header[69] = 'S', header[70] = 'O', header[71] = 'D';
    ck_assert_int_eq(tu_write_file(fake, header, sizeof(header)), 0);
    ck_assert_uint_eq(kind_of(fake), PSDB_FILE_KIND_SODB);
    ck_assert_int_eq(tu_write_file(fake, header, sizeof(header) - 1), 0);
    ck_assert_uint_eq(kind_of(fake), PSDB_FILE_KIND_OTHER);
    free(psdb), free(sodb), free(plain), free(text), free(empty), free(fake);
}
END_TEST

START_TEST(test_public_tool_api__file_kind_null_missing_and_directory_fail)
{
    char *missing = tu_path(tmpdir, "missing.psdb");
    uint32_t k = 99;
    ck_assert_hr(psdb_file_kind(NULL, &k), PSDB_E_INVALIDARG);
    ck_assert_uint_eq(k, PSDB_FILE_KIND_OTHER);
    ck_assert_hr(psdb_file_kind(missing, NULL), PSDB_E_INVALIDARG);
    k = 99;
    ck_assert_hr(psdb_file_kind(missing, &k), PSDB_E_NOT_FOUND);
    ck_assert_uint_eq(k, PSDB_FILE_KIND_OTHER);
    ck_assert_msg(strstr(psdb_error_last(), "missing.psdb"), "%s", psdb_error_last());
    /* A directory opens but cannot be read. */
    k = 99;
    ck_assert_hr(psdb_file_kind(tmpdir, &k), PSDB_E_IO);
    ck_assert_uint_eq(k, PSDB_FILE_KIND_OTHER);
    ck_assert_msg(strstr(psdb_error_last(), tmpdir), "%s", psdb_error_last());
    free(missing);
}
END_TEST

/* ---- psdb_sodb_decode
 * ---------------------------------------------------------------------------- */

static psdb__buf compute_bytes(void)
{
    psdb_compute_pipeline_desc d = {RS, sizeof(RS), {CS, sizeof(CS)}, NULL};
    psdb__buf b = {0};
    ck_assert_hr(psdb__desc_encode_compute(&d, &b), PSDB_S_OK);
    return b;
}

static psdb__buf graphics_bytes(void)
{
    psdb_graphics_pipeline_desc d = {.root_signature = RS,
                                     .root_signature_size = sizeof(RS),
                                     .vs = {VS, sizeof(VS)},
                                     .sample_mask = UINT32_MAX,
                                     .sample_count = 1};
    psdb__buf b = {0};
    ck_assert_hr(psdb__desc_encode_graphics(&d, &b), PSDB_S_OK);
    return b;
}

static psdb__buf state_object_bytes(void)
{
    const uint8_t lib_code[] = "dxil library";
    const char *exports[] = {"RayGen"};
    psdb_dxil_library_desc lib = {{lib_code, sizeof(lib_code)}, exports, 1};
    psdb_shader grs = {RS, sizeof(RS)};
    psdb_state_subobject subs[] = {{PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &grs},
                                   {PSDB_SUBOBJECT_DXIL_LIBRARY, &lib}};
    psdb_state_object_desc d = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 2, subs};
    psdb__buf b = {0};
    ck_assert_hr(psdb__desc_encode_state_object(&d, NULL, &b), PSDB_S_OK);
    return b;
}

START_TEST(test_public_tool_api__sodb_decode_fills_the_member_of_its_kind)
{
    psdb__buf c = compute_bytes(), g = graphics_bytes(), s = state_object_bytes();
    psdb_sodb_entry *e = NULL;

    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, c.data, c.len, &e), PSDB_S_OK);
    ck_assert_uint_eq(e->kind, PSDB_SODB_COMPUTE);
    ck_assert_ptr_nonnull(e->compute);
    ck_assert_ptr_null(e->graphics);
    ck_assert_ptr_null(e->state_object);
    ck_assert_uint_eq(e->compute->root_signature_size, sizeof(RS));
    ck_assert_mem_eq(e->compute->root_signature, RS, sizeof(RS));
    ck_assert_uint_eq(e->compute->cs.size, sizeof(CS));
    ck_assert_mem_eq(e->compute->cs.code, CS, sizeof(CS));
    ck_assert_ptr_null(e->compute->psdb);
    psdb_sodb_entry_release(e);

    e = NULL;
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_GRAPHICS, g.data, g.len, &e), PSDB_S_OK);
    ck_assert_uint_eq(e->kind, PSDB_SODB_GRAPHICS);
    ck_assert_ptr_null(e->compute);
    ck_assert_ptr_nonnull(e->graphics);
    ck_assert_uint_eq(e->graphics->vs.size, sizeof(VS));
    ck_assert_mem_eq(e->graphics->vs.code, VS, sizeof(VS));
    ck_assert_uint_eq(e->graphics->sample_mask, UINT32_MAX);
    psdb_sodb_entry_release(e);

    e = NULL;
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_STATE_OBJECT, s.data, s.len, &e), PSDB_S_OK);
    ck_assert_uint_eq(e->kind, PSDB_SODB_STATE_OBJECT);
    ck_assert_ptr_nonnull(e->state_object);
    ck_assert_uint_eq(e->state_object->type, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE);
    ck_assert_uint_eq(e->state_object->num_subobjects, 2);
    ck_assert_uint_eq(e->state_object->subobjects[1].type, PSDB_SUBOBJECT_DXIL_LIBRARY);
    const psdb_dxil_library_desc *l = e->state_object->subobjects[1].desc;
    ck_assert_str_eq(l->exports[0], "RayGen");
    psdb_sodb_entry_release(e);

    psdb_sodb_entry_release(NULL);
    psdb__buf_free(&c), psdb__buf_free(&g), psdb__buf_free(&s);
}
END_TEST

START_TEST(test_public_tool_api__sodb_decode_refuses_null_wrong_kind_and_bad_bytes)
{
    psdb__buf c = compute_bytes(), g = graphics_bytes();
    psdb_sodb_entry *e = (psdb_sodb_entry *)&e;

    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, c.data, c.len, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, NULL, 8, &e), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(e);
    /* Kinds without a D3D description: none, the Vulkan ones, unknown. */
    const uint32_t bad_kinds[] = {0, PSDB_SODB_VK_COMPUTE, PSDB_SODB_VK_GRAPHICS, 99};
    for (size_t i = 0; i < sizeof(bad_kinds) / sizeof(bad_kinds[0]); i++) {
        e = (psdb_sodb_entry *)&e;
        ck_assert_hr(psdb_sodb_decode(bad_kinds[i], c.data, c.len, &e), PSDB_E_INVALIDARG);
        ck_assert_ptr_null(e);
    }
    /* Bytes of another kind, cut short, with a trailing byte, or none at all are malformed. */
    e = (psdb_sodb_entry *)&e;
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, g.data, g.len, &e), PSDB_E_CACHE_CORRUPT);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(psdb_error_last(), "compute"), "%s", psdb_error_last());
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_GRAPHICS, c.data, c.len, &e), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_STATE_OBJECT, c.data, c.len, &e), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, c.data, c.len - 1, &e), PSDB_E_CACHE_CORRUPT);
    psdb__buf_u8(&c, 0);
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, c.data, c.len, &e), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_sodb_decode(PSDB_SODB_COMPUTE, NULL, 0, &e), PSDB_E_CACHE_CORRUPT);
    ck_assert_ptr_null(e);
    psdb__buf_free(&c), psdb__buf_free(&g);
}
END_TEST

/* ---- psdb_sodb_compile
 * ---------------------------------------------------------------------------
 */

/* An SODB of n compute pipelines, each with its own shader, written through a bulk writer. */
static char *sodb_of(const char *name, uint32_t n)
{
    char *path = tu_path(tmpdir, name);
    psdb_sodb_writer *w = NULL;
    ck_assert_hr(psdb_sodb_writer_open_ex(path, &identity, PSDB_SODB_WRITER_BULK, &w), PSDB_S_OK);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cs[4] = {0xC5, i, i * 7u, 0xC5};
        psdb_compute_pipeline_desc d = {RS, sizeof(RS), {cs, sizeof(cs)}, NULL};
        ck_assert_hr(psdb_sodb_writer_add_compute(w, 1, &d), PSDB_S_OK);
    }
    ck_assert_hr(psdb_sodb_writer_commit(w), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    return path;
}

typedef struct progress_log {
    int calls;
    uint64_t done[8], total[8];
    uint64_t stop_at; /* 0: never */
} progress_log;

static int on_progress(uint64_t done, uint64_t total, void *ctx)
{
    progress_log *l = ctx;
    if (l->calls < 8) {
        l->done[l->calls] = done;
        l->total[l->calls] = total;
    }
    l->calls++;
    return l->stop_at && done >= l->stop_at;
}

static int count_groups(const void *key, size_t key_size, uint64_t version, uint32_t n, void *ctx)
{
    (void)key, (void)key_size, (void)version, (void)n;
    (*(uint64_t *)ctx)++;
    return 0;
}

START_TEST(test_public_tool_api__sodb_compile_reports_progress_and_stops_when_asked)
{
    char *sodb = sodb_of("many.sodb", 2500), *out = tu_path(tmpdir, "many.psdb");
    progress_log log = {0};
    psdb_sodb_compile_desc d = {.target = {.family = "test-family", .abi_version = 3},
                                .compile_ns_per_kib = PSDB_COMPILE_COST_FREE,
                                .progress = on_progress,
                                .progress_ctx = &log};
    psdb_sodb_compile_stats st = {0};
    psdb_file *f = NULL;
    uint64_t groups = 0;

    ck_assert_hr(psdb_sodb_compile(sodb, &d, out, &st), PSDB_S_OK);
    ck_assert_int_eq(log.calls, 3);
    ck_assert_uint_eq(log.done[0], 1000);
    ck_assert_uint_eq(log.done[1], 2000);
    ck_assert_uint_eq(log.done[2], 2500);
    ck_assert_uint_eq(log.total[0], 2500);
    ck_assert_uint_eq(log.total[2], 2500);
    ck_assert_uint_eq(st.pipelines, 2500);
    ck_assert_uint_eq(st.compute, 2500);
    ck_assert_uint_eq(st.units, 2 * 2500);
    ck_assert_hr(psdb_file_open(out, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_foreach_group(f, count_groups, &groups), PSDB_S_OK);
    ck_assert_uint_eq(groups, 2500);
    psdb_file_release(f);

    /* Stopped at the second report: nothing written, the old output stays as it was. */
    size_t before = 0, after = 0;
    char *old = tu_read_file(out, &before);
    memset(&log, 0, sizeof(log));
    log.stop_at = 2000;
    ck_assert_hr(psdb_sodb_compile(sodb, &d, out, &st), PSDB_E_CANCELLED);
    ck_assert_msg(strstr(psdb_error_last(), "entry 2000: stopped by the progress callback"), "%s",
                  psdb_error_last());
    ck_assert_int_eq(log.calls, 2);
    char *now = tu_read_file(out, &after);
    ck_assert_uint_eq(before, after);
    ck_assert_mem_eq(old, now, before);
    /* At the last report too (a count that is no multiple of 1000). */
    memset(&log, 0, sizeof(log));
    log.stop_at = 2500;
    char *never = tu_path(tmpdir, "never.psdb");
    ck_assert_hr(psdb_sodb_compile(sodb, &d, never, NULL), PSDB_E_CANCELLED);
    ck_assert_int_ne(access(never, F_OK), 0);
    /* An SODB without entries reports once, 0 of 0, and compiles to an empty PSDB. */
    char *empty = sodb_of("empty.sodb", 0);
    memset(&log, 0, sizeof(log));
    ck_assert_hr(psdb_sodb_compile(empty, &d, never, &st), PSDB_S_OK);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_uint_eq(log.done[0], 0);
    ck_assert_uint_eq(log.total[0], 0);
    ck_assert_uint_eq(st.pipelines, 0);
    free(old), free(now), free(sodb), free(out), free(never), free(empty);
}
END_TEST

START_TEST(test_public_tool_api__sodb_compile_refuses_null_vulkan_and_bad_targets)
{
    char *sodb = sodb_of("one.sodb", 1), *out = tu_path(tmpdir, "out.psdb");
    char *vk = tu_path(tmpdir, "vk.sodb"), *missing = tu_path(tmpdir, "missing.sodb");
    psdb_sodb_compile_desc d = {.target = {.family = "test-family", .abi_version = 3}};
    psdb_sodb_writer *w = NULL;
    static const uint8_t vkcp[16] = "VKCP\1\0\0\0\0\0\0\0spv";

    ck_assert_hr(psdb_sodb_compile(NULL, &d, out, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_compile(sodb, NULL, out, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_compile(sodb, &d, NULL, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_compile(missing, &d, out, NULL), PSDB_E_IO);
    ck_assert_msg(strstr(psdb_error_last(), "cannot open SODB"), "%s", psdb_error_last());
    /* Targets the PSDB writer refuses. */
    d.target.abi_version = 0;
    ck_assert_hr(psdb_sodb_compile(sodb, &d, out, NULL), PSDB_E_INVALIDARG);
    ck_assert_msg(strstr(psdb_error_last(), "cannot create"), "%s", psdb_error_last());
    d.target.abi_version = 3;
    d.target.family = NULL;
    ck_assert_hr(psdb_sodb_compile(sodb, &d, out, NULL), PSDB_E_INVALIDARG);
    d.target.family = "test-family";
    /* A Vulkan entry is for a Vulkan driver: named, refused, no output. */
    ck_assert_hr(psdb_sodb_writer_open(vk, &identity, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_COMPUTE, 1, vkcp, sizeof(vkcp)), PSDB_S_OK);
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_compile(vk, &d, out, NULL), PSDB_E_INVALIDARG);
    ck_assert_msg(strstr(psdb_error_last(), "entry 1 (key ") &&
                      strstr(psdb_error_last(), "--backend vulkan"),
                  "%s", psdb_error_last());
    ck_assert_int_ne(access(out, F_OK), 0);
    free(sodb), free(out), free(vk), free(missing);
}
END_TEST

/* ---- psdb_client_publish ------------------------------------------------------------------------
 */

static psdb_client *client(const char *token)
{
    /* Port 1 on loopback: nothing listens, so an upload fails at once without a server (its
     * retries, which a refused connection gets, back off 1 ms at first). */
    psdb_client_desc d = {.server_url = "http://127.0.0.1:1", .token = token, .retry_base_ms = 1};
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&d, &c), PSDB_S_OK);
    return c;
}

START_TEST(test_public_tool_api__publish_refuses_null_arguments)
{
    psdb_client *c = client("tok");
    psdb_publish_desc d = {.key_path = "k", .psdb_path = "p", .serial = 1};
    psdb_publish_result *r = (psdb_publish_result *)&r;

    ck_assert_hr(psdb_client_publish(NULL, &d, &r), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(r);
    ck_assert_hr(psdb_client_publish(c, NULL, &r), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(r);
    ck_assert_hr(psdb_client_publish(c, &d, NULL), PSDB_E_INVALIDARG);
    /* A missing path in the desc still gives a result that says what is missing. */
    d.key_path = NULL;
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->http_status, 0);
    ck_assert_ptr_null(r->body);
    ck_assert_msg(strstr(r->message, "key path"), "%s", r->message);
    ck_assert_str_eq(psdb_client_last_error(c), r->message);
    psdb_publish_result_free(r);
    psdb_publish_result_free(NULL);
    psdb_client_release(c);

    /* The token comes from the client: a client without one cannot publish. */
    c = client(NULL);
    d.key_path = "k";
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_INVALIDARG);
    ck_assert_msg(strstr(r->message, "token"), "%s", r->message);
    psdb_publish_result_free(r);
    psdb_client_release(c);
}
END_TEST

START_TEST(test_public_tool_api__publish_names_a_bad_key_file_and_a_bad_psdb)
{
    char *key = tu_path(tmpdir, "pub.key"), *psdb = tu_path(tmpdir, "a.psdb");
    char *missing = tu_path(tmpdir, "missing.key"), *notpsdb = tu_path(tmpdir, "not.psdb");
    char kid[PSDB_KEY_ID_SIZE];
    psdb_client *c = client("tok");
    psdb_publish_desc d = {.key_path = missing, .psdb_path = psdb, .serial = 1};
    psdb_publish_result *r = NULL;

    write_psdb(psdb);
    ck_assert_int_eq(tu_write_file(notpsdb, "not a database", 14), 0);
    ck_assert_hr(psdb_keygen(key, kid), PSDB_S_OK);
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_IO);
    ck_assert_msg(strstr(r->message, "missing.key"), "%s", r->message);
    ck_assert_int_eq(r->http_status, 0);
    psdb_publish_result_free(r);

    d.key_path = key;
    d.psdb_path = notpsdb;
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(r->message, "not.psdb"), "%s", r->message);
    ck_assert_str_eq(psdb_client_last_error(c), r->message);
    psdb_publish_result_free(r);

    /* A valid key and PSDB get as far as the network: nothing answers on port 1. */
    d.psdb_path = psdb;
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_NETWORK);
    ck_assert_int_eq(r->http_status, 0);
    ck_assert_msg(strstr(r->message, "127.0.0.1:1"), "%s", r->message);
    psdb_publish_result_free(r);

    psdb_client_release(c);
    free(key), free(psdb), free(missing), free(notpsdb);
}
END_TEST

/* A loopback socket that listens but never accepts: the kernel completes each connection, and
 * nothing ever answers. Returns the socket; *port gets its port. */
static int silent_listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_ge(s, 0);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(s, 16), 0);
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return s;
}

/* Connections the listener's queue holds (each attempt of the client made one). */
static int count_connections(int s)
{
    int n = 0, fd;
    ck_assert_int_eq(fcntl(s, F_SETFL, O_NONBLOCK), 0);
    while ((fd = accept(s, NULL, NULL)) >= 0) {
        close(fd);
        n++;
    }
    return n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The upload obeys the client's low-speed timeout and retry count, as resolve and download do: a
 * server that never answers costs 1 + max_retries attempts of a few seconds each (curl averages
 * the speed over its last 5 s, so the upload's own burst delays the low-speed abort by up to that
 * much), not one attempt of the project defaults' minute of silence. */
START_TEST(test_public_tool_api__publish_honours_the_clients_timeout_and_retries)
{
    char *key = tu_path(tmpdir, "pub.key"), *psdb = tu_path(tmpdir, "a.psdb");
    char kid[PSDB_KEY_ID_SIZE], url[64];
    int port = 0, ls = silent_listener(&port);
    psdb_client *c = NULL;
    psdb_publish_result *r = NULL;

    write_psdb(psdb);
    ck_assert_hr(psdb_keygen(key, kid), PSDB_S_OK);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    psdb_client_desc cd = {.server_url = url,
                           .token = "tok",
                           .low_speed_timeout_s = 1,
                           .max_retries = 1,
                           .retry_base_ms = 1};
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    psdb_publish_desc d = {.key_path = key, .psdb_path = psdb, .serial = 1};
    double t0 = now_s();
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_NETWORK);
    double took = now_s() - t0;
    ck_assert_msg(took >= 2 && took < 30, "publish took %.1f s for 2 silent attempts", took);
    ck_assert_msg(strstr(r->message, "2 attempts"), "%s", r->message);
    ck_assert_str_eq(psdb_error_last(), r->message);
    ck_assert_int_eq(count_connections(ls), 2);
    psdb_publish_result_free(r);
    psdb_client_release(c);
    close(ls);
    free(key), free(psdb);
}
END_TEST

/* The progress callback's cancel stops a publish while its transfer waits, as it stops a
 * download and a resolve: a server that never answers is left within about a second of the
 * cancel (libcurl asks at least once a second while no byte flows), not after the low-speed
 * timeout. */
static int cancel_after(const psdb_progress *p, void *ctx)
{
    (void)p;
    return now_s() >= *(const double *)ctx;
}

START_TEST(test_public_tool_api__publish_is_cancelled_by_the_progress_callback)
{
    char *key = tu_path(tmpdir, "pub.key"), *psdb = tu_path(tmpdir, "a.psdb");
    char kid[PSDB_KEY_ID_SIZE], url[64];
    int port = 0, ls = silent_listener(&port);
    psdb_client *c = NULL;
    psdb_publish_result *r = NULL;
    double stop_at = now_s() + 0.3;

    write_psdb(psdb);
    ck_assert_hr(psdb_keygen(key, kid), PSDB_S_OK);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    psdb_client_desc cd = {.server_url = url,
                           .token = "tok",
                           .low_speed_timeout_s = 20,
                           .progress_cancel = cancel_after,
                           .progress_ctx = &stop_at};
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    psdb_publish_desc d = {.key_path = key, .psdb_path = psdb, .serial = 1};
    double t0 = now_s();
    ck_assert_hr(psdb_client_publish(c, &d, &r), PSDB_E_CANCELLED);
    double took = now_s() - t0;
    ck_assert_msg(took < 3.0, "the cancel took %.1f s", took);
    ck_assert_msg(strstr(r->message, "cancelled"), "%s", r->message);
    ck_assert_str_eq(psdb_client_last_error(c), r->message);
    psdb_publish_result_free(r);
    psdb_client_release(c);
    close(ls);
    free(key), free(psdb);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("public_tool_api");
    TCase *tc = tcase_create("public_tool_api");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_public_tool_api__file_kind_tells_psdb_sodb_and_other);
    tcase_add_test(tc, test_public_tool_api__file_kind_null_missing_and_directory_fail);
    tcase_add_test(tc, test_public_tool_api__sodb_decode_fills_the_member_of_its_kind);
    tcase_add_test(tc, test_public_tool_api__sodb_decode_refuses_null_wrong_kind_and_bad_bytes);
    tcase_add_test(tc, test_public_tool_api__sodb_compile_reports_progress_and_stops_when_asked);
    tcase_add_test(tc, test_public_tool_api__sodb_compile_refuses_null_vulkan_and_bad_targets);
    tcase_add_test(tc, test_public_tool_api__publish_refuses_null_arguments);
    tcase_add_test(tc, test_public_tool_api__publish_names_a_bad_key_file_and_a_bad_psdb);
    tcase_add_test(tc, test_public_tool_api__publish_honours_the_clients_timeout_and_retries);
    tcase_add_test(tc, test_public_tool_api__publish_is_cancelled_by_the_progress_callback);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
