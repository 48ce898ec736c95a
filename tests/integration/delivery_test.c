/* delivery_test.c - the delivery client and psdb install against servers that misbehave on
 * purpose (an in-process libmicrohttpd server with injected faults) and against the real psdbd. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/client.h"
#include "common/buf.h"
#include "common/hash.h"

#include <sqlite3.h>

#include "build/synth.h"

#ifndef PSDBD_BIN
#define PSDBD_BIN "psdbd"
#endif

#define FAMILY "contoso-gfx9"
#define EXE "/games/demo/demo.exe"

static char *g_dir; /* per-test temporary directory */
static char *g_reg; /* registry root */
static char *g_key, *g_pub, *g_key2, *g_pub2;

/* ---- a PSDB and its signed manifest --------------------------------------------------------- */

typedef struct blob {
    uint8_t *data;
    size_t size;
    uint8_t sha[32];
} blob;

static blob make_psdb(const char *name, size_t payload, unsigned seed, uint64_t abi)
{
    char *path = tu_path(g_dir, name);
    psdb_app_identity id = {
        .desc = {.exe_filename = "demo.exe", .name = "Demo", .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = FAMILY, .abi_version = abi};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t *buf = malloc(65536);
    unsigned x = seed * 2654435761u + 7;
    for (size_t k = 0; k * 65536 < payload; k++) {
        for (size_t i = 0; i < 65536; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        char key[16];
        snprintf(key, sizeof(key), "v%05zu", k);
        ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, 65536),
                     PSDB_S_OK);
    }
    free(buf);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    blob b = {0};
    b.data = (uint8_t *)tu_read_file(path, &b.size);
    ck_assert_ptr_nonnull(b.data);
    psdb__sha256(b.data, b.size, b.sha);
    free(path);
    return b;
}

/* A manifest for b as psdbd would serve it, signed with the private key at key_path. */
static char *make_manifest(const blob *b, uint64_t serial, uint64_t abi, const char *key_path,
                           const uint8_t *claimed_sha)
{
    psdb_key *key = NULL;
    char kid[PSDB_KEY_ID_SIZE], sig[PSDB_SIGNATURE_B64_SIZE], sha[65];
    ck_assert_hr(psdb_key_load(key_path, &key), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(key, kid), PSDB_S_OK);
    psdb_statement st = {.size = b->size,
                         .identity = {.desc = {.exe_filename = "demo.exe",
                                               .name = "Demo",
                                               .version = PSDB_VERSION(1, 0, 0, 0)}},
                         .target = {.family = FAMILY, .abi_version = abi},
                         .serial = serial};
    memcpy(st.sha256, claimed_sha ? claimed_sha : b->sha, 32);
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    psdb_key_release(key);
    psdb__hex(st.sha256, 32, sha);
    char url[128];
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:n, s:s}, s:{s:s, s:I, s:s, "
                          "s:s}, s:I, s:s, s:s, s:s}",
                          "id", (json_int_t)serial, "sha256", sha, "size", (json_int_t)b->size,
                          "url", url, "app", "name", "Demo", "exe_filename", "demo.exe", "version",
                          "1.0.0.0", "engine_name", "engine_version", "0.0.0.0", "target", "family",
                          FAMILY, "abi_version", (json_int_t)abi, "compiler_version", "0.0.0.0",
                          "profile_version", "0.0.0.0", "serial", (json_int_t)serial, "created_at",
                          "2026-01-01T00:00:00Z", "key_id", kid, "signature", sig);
    ck_assert_ptr_nonnull(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ---- a server with injected faults (libmicrohttpd in this process) ------------------------- */

typedef struct fake {
    struct MHD_Daemon *d;
    int port;
    char url[64];
    int resolve_status;
    const char *resolve_body;
    const blob *b;
    int blob_status;
    size_t cut_after; /* end the body with an error after this many bytes ... */
    atomic_int cuts;  /* ... this many times */
    long flip_at;     /* body offset of a byte to flip; -1: none */
    atomic_int blob_requests, range_requests;
    const char *missing_family; /* a resolve for this family answers 404 (no PSDB for it) */
} fake;

typedef struct body_cursor {
    fake *f;
    uint64_t start, pos, end; /* [pos, end) of the blob still to send */
    int cut;
} body_cursor;

static ssize_t body_reader(void *cls, uint64_t off, char *buf, size_t max)
{
    body_cursor *c = cls;
    uint64_t pos = c->start + off;
    if (pos >= c->end)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (c->cut && pos >= c->start + c->f->cut_after)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = (size_t)(c->end - pos) < max ? (size_t)(c->end - pos) : max;
    if (c->cut && pos + n > c->start + c->f->cut_after)
        n = (size_t)(c->start + c->f->cut_after - pos);
    memcpy(buf, c->f->b->data + pos, n);
    if (c->f->flip_at >= 0 && (uint64_t)c->f->flip_at >= pos && (uint64_t)c->f->flip_at < pos + n)
        buf[c->f->flip_at - pos] ^= 0x5a;
    return (ssize_t)n;
}

static enum MHD_Result fake_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)state;
    fake *f = cls;
    struct MHD_Response *r = NULL;
    int status = 404;
    if (strcmp(method, "GET") != 0)
        status = 405;
    else if (strcmp(url, "/v1/resolve") == 0) {
        const char *family = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "family");
        int missing = f->missing_family && family && strcmp(family, f->missing_family) == 0;
        status = missing ? 404 : f->resolve_status;
        const char *body = missing           ? "{\"error\":\"no psdb\"}"
                           : f->resolve_body ? f->resolve_body
                                             : "";
        r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    } else if (strncmp(url, "/v1/blobs/", 10) == 0 && f->b) {
        atomic_fetch_add(&f->blob_requests, 1);
        status = f->blob_status;
        if (status == 200) {
            body_cursor *c = calloc(1, sizeof(*c));
            c->f = f;
            c->end = f->b->size;
            const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
            unsigned long long from = 0;
            if (range && sscanf(range, "bytes=%llu-", &from) == 1 && from < f->b->size) {
                atomic_fetch_add(&f->range_requests, 1);
                c->start = from;
                status = 206;
            }
            int left = atomic_load(&f->cuts);
            while (left > 0 && !atomic_compare_exchange_weak(&f->cuts, &left, left - 1))
                ;
            c->cut = left > 0;
            r = MHD_create_response_from_callback(c->end - c->start, 64 * 1024, body_reader, c,
                                                  free);
            if (status == 206) {
                char cr[96];
                snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)c->start,
                         (unsigned long long)c->end - 1, (unsigned long long)f->b->size);
                MHD_add_response_header(r, "Content-Range", cr);
            }
        }
    }
    if (!r)
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static void fake_start(fake *f)
{
    f->flip_at = f->flip_at ? f->flip_at : -1;
    if (!f->resolve_status)
        f->resolve_status = 200;
    if (!f->blob_status)
        f->blob_status = 200;
    f->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                            NULL, NULL, fake_handler, f, MHD_OPTION_END);
    ck_assert_ptr_nonnull(f->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    f->port = info->port;
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", f->port);
}

static void fake_stop(fake *f)
{
    MHD_stop_daemon(f->d);
}

/* ---- helpers ----------------------------------------------------------------------------------
 */

static psdb_client *client_for(const char *url, const char *trust)
{
    const char *keys[1] = {trust};
    psdb_client_desc d = {.server_url = url,
                          .trusted_keys = keys,
                          .num_trusted_keys = 1,
                          .retry_base_ms = 10,
                          .max_retries = 4};
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&d, &c), PSDB_S_OK);
    return c;
}

static psdb_hr install(psdb_client *c, int allow_downgrade, psdb_install_result *r)
{
    psdb_app_desc app = {.name = "Demo", .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_precompile_target t = {.family = FAMILY, .abi_min = 1, .abi_max = 10};
    psdb_install_desc d = {.exe_path = EXE,
                           .app = &app,
                           .targets = &t,
                           .num_targets = 1,
                           .registry_dir = g_reg,
                           .allow_downgrade = allow_downgrade};
    return psdb_client_install(c, &d, r);
}

/* The PSDB path registered as the default component for FAMILY, or NULL. */
static char *registered_path(void)
{
    psdb_explorer *e = NULL;
    psdb_application *a = NULL;
    psdb_component *comp = NULL;
    char buf[4096];
    char *out = NULL;
    ck_assert_hr(psdb_explorer_open(g_reg, &e), PSDB_S_OK);
    if (PSDB_SUCCEEDED(psdb_explorer_get_application(e, EXE, &a)) &&
        PSDB_SUCCEEDED(psdb_application_get_component(a, PSDB_DEFAULT_COMPONENT, &comp)) &&
        PSDB_SUCCEEDED(psdb_component_get_psdb_path(comp, FAMILY, buf, sizeof(buf))))
        out = strdup(buf);
    psdb_component_release(comp);
    psdb_application_release(a);
    psdb_explorer_release(e);
    return out;
}

static void setup(void)
{
    g_dir = tu_mkdtemp();
    g_reg = tu_path(g_dir, "registry");
    g_key = tu_path(g_dir, "pub.key");
    g_pub = tu_path(g_dir, "pub.key.pub");
    g_key2 = tu_path(g_dir, "other.key");
    g_pub2 = tu_path(g_dir, "other.key.pub");
    ck_assert_hr(psdb_keygen(g_key, NULL), PSDB_S_OK);
    ck_assert_hr(psdb_keygen(g_key2, NULL), PSDB_S_OK);
}

static void teardown(void)
{
    tu_rmtree(g_dir);
    free(g_dir);
    free(g_reg);
    free(g_key);
    free(g_pub);
    free(g_key2);
    free(g_pub2);
}

/* ---- faults -----------------------------------------------------------------------------------
 */

START_TEST(test_delivery__download_resumes_after_cut_connections)
{
    blob b = make_psdb("a.psdb", 1 << 20, 1, 3);
    char *m_json = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m_json, .cut_after = 300 * 1024};
    atomic_init(&f.cuts, 2);
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    psdb_install_result r;
    ck_assert_hr(install(c, 0, &r), PSDB_S_OK);
    ck_assert_hr(r.status, PSDB_S_OK);
    ck_assert_int_ge(atomic_load(&f.range_requests), 2); /* resumed, not restarted */
    char *path = registered_path();
    ck_assert_ptr_nonnull(path);
    size_t size = 0;
    char *got = tu_read_file(path, &size);
    ck_assert_uint_eq(size, b.size);
    ck_assert_int_eq(memcmp(got, b.data, size), 0);
    free(got);
    free(path);
    psdb_client_release(c);
    fake_stop(&f);
    free(m_json);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__flipped_byte_rejected_previous_install_stays)
{
    blob b1 = make_psdb("a.psdb", 256 * 1024, 1, 3);
    blob b2 = make_psdb("b.psdb", 256 * 1024, 2, 3);
    char *m1 = make_manifest(&b1, 1, 3, g_key, NULL);
    char *m2 = make_manifest(&b2, 2, 3, g_key, NULL);
    fake f = {.b = &b1, .resolve_body = m1};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    char *before = registered_path();
    ck_assert_ptr_nonnull(before);
    /* Serial 2 arrives with one byte flipped in transit. */
    f.b = &b2;
    f.resolve_body = m2;
    f.flip_at = 100000;
    ck_assert_hr(install(c, 0, NULL), PSDB_E_INTEGRITY);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "SHA-256"));
    char *after = registered_path();
    ck_assert_str_eq(after, before);
    /* Nothing of the bad download is left behind. */
    char sha[65], *part = NULL;
    psdb__hex(b2.sha, 32, sha);
    ck_assert_int_ge(asprintf(&part, "%s/psdbs/%s.psdb.part", g_reg, sha), 0);
    ck_assert_int_ne(access(part, F_OK), 0);
    free(part);
    free(before);
    free(after);
    psdb_client_release(c);
    fake_stop(&f);
    free(m1);
    free(m2);
    free(b1.data);
    free(b2.data);
}
END_TEST

START_TEST(test_delivery__untrusted_key_rejected_before_download)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key2, NULL); /* signed, but not by a trusted key */
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_E_SIGNATURE);
    ck_assert_int_eq(atomic_load(&f.blob_requests), 0);
    ck_assert_ptr_null(registered_path());
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__manifest_digest_not_matching_blob_rejected)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    uint8_t wrong[32];
    memcpy(wrong, b.sha, 32);
    wrong[0] ^= 1;
    char *m = make_manifest(&b, 1, 3, g_key, wrong); /* the publisher signed another digest */
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_E_INTEGRITY);
    ck_assert_ptr_null(registered_path());
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__lower_serial_refused_unless_allowed)
{
    blob b5 = make_psdb("a.psdb", 64 * 1024, 1, 3);
    blob b3 = make_psdb("b.psdb", 64 * 1024, 2, 3);
    char *m5 = make_manifest(&b5, 5, 3, g_key, NULL);
    char *m3 = make_manifest(&b3, 3, 3, g_key, NULL);
    fake f = {.b = &b5, .resolve_body = m5};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    char *before = registered_path();
    f.b = &b3;
    f.resolve_body = m3;
    psdb_install_result r;
    ck_assert_hr(install(c, 0, &r), PSDB_E_DOWNGRADE);
    ck_assert_hr(r.status, PSDB_E_DOWNGRADE);
    char *after = registered_path();
    ck_assert_str_eq(after, before);
    free(after);
    ck_assert_hr(install(c, 1, &r), PSDB_S_OK);
    after = registered_path();
    ck_assert_str_ne(after, before);
    /* The file of serial 5 is no longer referenced: removed. */
    ck_assert_int_ne(access(before, F_OK), 0);
    /* The same digest again is skipped, not downloaded. */
    int reqs = atomic_load(&f.blob_requests);
    ck_assert_hr(install(c, 1, &r), PSDB_S_OK);
    ck_assert_hr(r.status, PSDB_S_FALSE);
    ck_assert_int_eq(atomic_load(&f.blob_requests), reqs);
    free(before);
    free(after);
    psdb_client_release(c);
    fake_stop(&f);
    free(m5);
    free(m3);
    free(b5.data);
    free(b3.data);
}
END_TEST

START_TEST(test_delivery__server_errors_are_clear_and_change_nothing)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    fake f = {.b = &b, .resolve_status = 500, .resolve_body = "{\"error\":\"internal\"}"};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_E_NETWORK);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "500"));
    f.resolve_status = 404;
    ck_assert_hr(install(c, 0, NULL), PSDB_E_NOT_FOUND);
    f.resolve_status = 200;
    f.resolve_body = "{\"id\": 1, \"sha256\": \"zz\", garbage";
    ck_assert_hr(install(c, 0, NULL), PSDB_E_PROTOCOL);
    f.resolve_body = "{\"id\": 1}";
    ck_assert_hr(install(c, 0, NULL), PSDB_E_PROTOCOL);
    /* A valid manifest whose blob the server cannot find. */
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    f.resolve_body = m;
    f.blob_status = 404;
    ck_assert_hr(install(c, 0, NULL), PSDB_E_NOT_FOUND);
    ck_assert_ptr_null(registered_path());
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__full_disk_at_destination)
{
    if (geteuid() != 0) {
        /* Mounting a small tmpfs needs root; CI runs as root. */
        fprintf(stderr, "delivery_test: not root, full-disk case not exercised\n");
        return;
    }
    blob b = make_psdb("a.psdb", 1 << 20, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    ck_assert_int_eq(mkdir(g_reg, 0700), 0);
    ck_assert_int_eq(mount("tmpfs", g_reg, "tmpfs", 0, "size=512k"), 0);
    psdb_client *c = client_for(f.url, g_pub);
    psdb_hr hr = install(c, 0, NULL);
    char *path = registered_path();
    umount(g_reg);
    ck_assert_hr(hr, PSDB_E_DISK_FULL);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "No space"));
    ck_assert_ptr_null(path);
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__second_installer_of_the_same_name_is_refused)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_installer *held = NULL;
    psdb_installer_desc id = {.name = "psdb", .root_dir = g_reg};
    ck_assert_hr(psdb_installer_open(&id, &held), PSDB_S_OK);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_E_BUSY);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "another install"));
    ck_assert_int_eq(atomic_load(&f.blob_requests), 0);
    psdb_installer_release(held);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__sweep_keeps_recent_part_files_only)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    /* Another installer's download in progress, and one abandoned long ago. */
    char *fresh = NULL, *stale = NULL, *orphan = NULL;
    ck_assert_int_ge(asprintf(&fresh, "%s/psdbs/fresh.psdb.part", g_reg), 0);
    ck_assert_int_ge(asprintf(&stale, "%s/psdbs/stale.psdb.part", g_reg), 0);
    ck_assert_int_ge(asprintf(&orphan, "%s/psdbs/orphan.psdb", g_reg), 0);
    ck_assert_int_eq(tu_write_file(fresh, "x", 1), 0);
    ck_assert_int_eq(tu_write_file(stale, "x", 1), 0);
    ck_assert_int_eq(tu_write_file(orphan, "x", 1), 0);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3 * 24 * 3600},
                              {.tv_sec = time(NULL) - 3 * 24 * 3600}};
    ck_assert_int_eq(utimensat(AT_FDCWD, stale, old, 0), 0);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    ck_assert_int_eq(access(fresh, F_OK), 0);
    ck_assert_int_ne(access(stale, F_OK), 0);
    ck_assert_int_ne(access(orphan, F_OK), 0);
    char *path = registered_path();
    ck_assert_int_eq(access(path, F_OK), 0);
    free(path);
    free(fresh);
    free(stale);
    free(orphan);
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

/* ---- what psdb_client_install and psdb install --json say about each target ------------------
 * Every target's entry says what happened to it, also when the install fails: never "installed"
 * for a target that is not, no serial and no digest for one that is not installed. */

#define OTHER "other-gfx" /* a second target family */

/* Installs Demo (ABI 1-10) for these families through the library. results is filled with junk
 * first, so that an entry the install leaves alone shows. */
static psdb_hr install_families(psdb_client *c, const char *const *families, uint32_t n,
                                psdb_install_result *results)
{
    psdb_app_desc app = {.name = "Demo", .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_precompile_target t[4];
    ck_assert_uint_le(n, 4);
    memset(t, 0, sizeof(t));
    for (uint32_t i = 0; i < n; i++) {
        snprintf(t[i].family, sizeof(t[i].family), "%s", families[i]);
        t[i].abi_min = 1;
        t[i].abi_max = 10;
    }
    psdb_install_desc d = {
        .exe_path = EXE, .app = &app, .targets = t, .num_targets = n, .registry_dir = g_reg};
    memset(results, 0xa5, n * sizeof(*results));
    return psdb_client_install(c, &d, results);
}

/* Asserts that r reports a target that was not installed: status want, this skipped flag, and no
 * serial, digest or size. */
static void assert_not_installed(const psdb_install_result *r, psdb_hr want, int skipped,
                                 const char *what)
{
    static const uint8_t zero[32];
    ck_assert_msg(r->status == want, "%s: status %s, want %s", what, psdb_hr_str(r->status),
                  psdb_hr_str(want));
    ck_assert_msg(r->skipped == skipped, "%s: skipped %d, want %d", what, r->skipped, skipped);
    ck_assert_msg(r->serial == 0 && r->size == 0 && memcmp(r->sha256, zero, 32) == 0,
                  "%s: not installed, yet serial %llu size %llu and a digest", what,
                  (unsigned long long)r->serial, (unsigned long long)r->size);
}

/* Runs psdb install [--json] for these families against url; *status gets the exit status and
 * *err (malloc'd) stderr. Returns stdout (malloc'd). */
static char *tool_install(const char *url, const char *const *families, uint32_t n, int json,
                          int *status, char **err)
{
    char *out_file = tu_path(g_dir, "install.out"), *err_file = tu_path(g_dir, "install.err");
    char targets[4][96];
    const char *argv[40];
    size_t k = 0;
    const char *fixed[] = {"psdb",       "install", "--server",      url,       "--exe-path", EXE,
                           "--app",      "Demo",    "--app-version", "1.0.0.0", "--trust",    g_pub,
                           "--registry", g_reg};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        argv[k++] = fixed[i];
    for (uint32_t i = 0; i < n && i < 4; i++) {
        snprintf(targets[i], sizeof(targets[i]), "%s:1-10", families[i]);
        argv[k++] = "--target";
        argv[k++] = targets[i];
    }
    if (json)
        argv[k++] = "--json";
    argv[k] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        execv(PSDB_TOOL, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *out = tu_read_file(out_file, NULL);
    *err = tu_read_file(err_file, NULL);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(*err);
    free(out_file);
    free(err_file);
    return out;
}

/* psdb install --json: asserts exit status want_exit and "ok": false; returns the targets array
 * (owned by *doc, to json_decref). */
static json_t *tool_install_json(const char *url, const char *const *families, uint32_t n,
                                 int want_exit, json_t **doc)
{
    int status = 0;
    char *err = NULL;
    char *out = tool_install(url, families, n, 1, &status, &err);
    json_error_t e;
    *doc = json_loads(out, 0, &e);
    ck_assert_msg(*doc != NULL, "not JSON (%s): %s", e.text, out);
    ck_assert_msg(status == want_exit, "exit %d, want %d: %s %s", status, want_exit, out, err);
    json_t *ok = json_object_get(*doc, "ok");
    ck_assert_msg(json_is_boolean(ok) && (json_is_true(ok) == (want_exit == 0)), "ok: %s", out);
    json_t *targets = json_object_get(*doc, "targets");
    ck_assert_msg(json_array_size(targets) == n, "%zu targets, want %u: %s",
                  json_array_size(targets), n, out);
    free(out);
    free(err);
    return targets;
}

/* Asserts that target i of the --json answer is family, not installed with this status
 * ("failed" or "skipped"), with null serial, sha256 and size, and code and error naming why. */
static void assert_json_not_installed(json_t *targets, size_t i, const char *family,
                                      const char *status, const char *code, const char *error_has)
{
    json_t *t = json_array_get(targets, i);
    char *text = json_dumps(t, JSON_COMPACT);
    ck_assert_str_eq(json_string_value(json_object_get(t, "family")), family);
    ck_assert_msg(json_string_value(json_object_get(t, "status")) &&
                      strcmp(json_string_value(json_object_get(t, "status")), status) == 0,
                  "target %zu: want status %s: %s", i, status, text);
    ck_assert_msg(json_is_null(json_object_get(t, "serial")) &&
                      json_is_null(json_object_get(t, "sha256")) &&
                      json_is_null(json_object_get(t, "size")),
                  "target %zu: serial, sha256 and size must be null: %s", i, text);
    const char *c = json_string_value(json_object_get(t, "code"));
    const char *e = json_string_value(json_object_get(t, "error"));
    ck_assert_msg(c && strstr(c, code), "target %zu: code should name %s: %s", i, code, text);
    ck_assert_msg(e && *e && (!error_has || strstr(e, error_has)),
                  "target %zu: error should say '%s': %s", i, error_has ? error_has : "why", text);
    ck_assert_msg(!json_object_get(t, "download"), "target %zu: a download figure: %s", i, text);
    free(text);
}

START_TEST(test_delivery__install_results_truthful_when_the_installer_is_busy)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_installer *held = NULL;
    psdb_installer_desc id = {.name = "psdb", .root_dir = g_reg};
    ck_assert_hr(psdb_installer_open(&id, &held), PSDB_S_OK);
    const char *fams[] = {FAMILY, OTHER};

    /* The library: every target failed with PSDB_E_BUSY, none installed. */
    psdb_client *c = client_for(f.url, g_pub);
    psdb_install_result r[2];
    ck_assert_hr(install_families(c, fams, 2, r), PSDB_E_BUSY);
    assert_not_installed(&r[0], PSDB_E_BUSY, 0, "busy, target 0");
    assert_not_installed(&r[1], PSDB_E_BUSY, 0, "busy, target 1");

    /* The tool: "ok": false, exit 1, each target failed, with the reason. */
    json_t *doc = NULL;
    json_t *t = tool_install_json(f.url, fams, 2, 1, &doc);
    assert_json_not_installed(t, 0, FAMILY, "failed", "PSDB_E_BUSY", "another install");
    assert_json_not_installed(t, 1, OTHER, "failed", "PSDB_E_BUSY", "another install");
    json_decref(doc);
    /* Its text: one line a target that says so. */
    int status = 0;
    char *err = NULL;
    char *out = tool_install(f.url, fams, 2, 0, &status, &err);
    ck_assert_int_eq(status, 1);
    ck_assert_msg(strstr(out, FAMILY ": failed (") && strstr(out, OTHER ": failed (") &&
                      !strstr(out, "installed"),
                  "text: %s", out);
    ck_assert_ptr_nonnull(strstr(err, "another install"));
    free(out);
    free(err);
    ck_assert_int_eq(atomic_load(&f.blob_requests), 0);
    psdb_installer_release(held);
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__install_results_truthful_when_the_server_is_unreachable)
{
    /* A port nothing listens on: bound, then closed. */
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    ck_assert_int_eq(bind(sock, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(sock, (struct sockaddr *)&a, &alen), 0);
    close(sock);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
    const char *fams[] = {FAMILY, OTHER};

    psdb_client *c = client_for(url, g_pub);
    psdb_install_result r[2];
    ck_assert_hr(install_families(c, fams, 2, r), PSDB_E_NETWORK);
    assert_not_installed(&r[0], PSDB_E_NETWORK, 0, "unreachable, target 0");
    assert_not_installed(&r[1], PSDB_E_NETWORK, 1, "unreachable, target 1");
    psdb_client_release(c);

    json_t *doc = NULL;
    json_t *t = tool_install_json(url, fams, 2, 1, &doc);
    assert_json_not_installed(t, 0, FAMILY, "failed", "PSDB_E_NETWORK", NULL);
    assert_json_not_installed(t, 1, OTHER, "skipped", "PSDB_E_NETWORK",
                              "stopped at target " FAMILY);
    json_decref(doc);
    ck_assert_ptr_null(registered_path());
}
END_TEST

START_TEST(test_delivery__install_results_truthful_when_the_signing_key_is_not_trusted)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key2, NULL); /* signed, but not by the trusted key */
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    const char *fams[] = {FAMILY, OTHER};

    psdb_client *c = client_for(f.url, g_pub);
    psdb_install_result r[2];
    ck_assert_hr(install_families(c, fams, 2, r), PSDB_E_SIGNATURE);
    assert_not_installed(&r[0], PSDB_E_SIGNATURE, 0, "untrusted, target 0");
    assert_not_installed(&r[1], PSDB_E_SIGNATURE, 1, "untrusted, target 1");
    psdb_client_release(c);

    json_t *doc = NULL;
    json_t *t = tool_install_json(f.url, fams, 2, 1, &doc);
    assert_json_not_installed(t, 0, FAMILY, "failed", "PSDB_E_SIGNATURE", NULL);
    assert_json_not_installed(t, 1, OTHER, "skipped", "PSDB_E_SIGNATURE",
                              "stopped at target " FAMILY);
    json_decref(doc);
    ck_assert_int_eq(atomic_load(&f.blob_requests), 0);
    ck_assert_ptr_null(registered_path());
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

START_TEST(test_delivery__install_results_truthful_when_one_target_has_no_psdb)
{
    blob b = make_psdb("a.psdb", 64 * 1024, 1, 3);
    char *m = make_manifest(&b, 1, 3, g_key, NULL);
    fake f = {.b = &b, .resolve_body = m, .missing_family = OTHER};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    psdb_install_result r[2];

    /* The first target resolves and downloads, the second has no PSDB: nothing is registered,
     * and the first is not reported installed. */
    const char *first_ok[] = {FAMILY, OTHER};
    ck_assert_hr(install_families(c, first_ok, 2, r), PSDB_E_NOT_FOUND);
    assert_not_installed(&r[0], PSDB_E_NOT_FOUND, 1, "found first, target 0");
    assert_not_installed(&r[1], PSDB_E_NOT_FOUND, 0, "found first, target 1");
    ck_assert_ptr_null(registered_path());
    json_t *doc = NULL;
    json_t *t = tool_install_json(f.url, first_ok, 2, 3, &doc);
    assert_json_not_installed(t, 0, FAMILY, "skipped", "PSDB_E_NOT_FOUND",
                              "stopped at target " OTHER);
    assert_json_not_installed(t, 1, OTHER, "failed", "PSDB_E_NOT_FOUND", NULL);
    json_decref(doc);

    /* The missing one first: the other is never attempted. */
    int blobs = atomic_load(&f.blob_requests);
    const char *missing_first[] = {OTHER, FAMILY};
    ck_assert_hr(install_families(c, missing_first, 2, r), PSDB_E_NOT_FOUND);
    assert_not_installed(&r[0], PSDB_E_NOT_FOUND, 0, "missing first, target 0");
    assert_not_installed(&r[1], PSDB_E_NOT_FOUND, 1, "missing first, target 1");
    t = tool_install_json(f.url, missing_first, 2, 3, &doc);
    assert_json_not_installed(t, 0, OTHER, "failed", "PSDB_E_NOT_FOUND", NULL);
    assert_json_not_installed(t, 1, FAMILY, "skipped", "PSDB_E_NOT_FOUND",
                              "stopped at target " OTHER);
    json_decref(doc);
    ck_assert_int_eq(atomic_load(&f.blob_requests), blobs);

    /* Installed before with the same digest: that target is still installed, and says so. */
    const char *one[] = {FAMILY};
    ck_assert_hr(install_families(c, one, 1, r), PSDB_S_OK);
    ck_assert_hr(r[0].status, PSDB_S_OK);
    ck_assert_hr(install_families(c, first_ok, 2, r), PSDB_E_NOT_FOUND);
    ck_assert_hr(r[0].status, PSDB_S_FALSE);
    ck_assert_uint_eq(r[0].serial, 1);
    ck_assert_int_eq(memcmp(r[0].sha256, b.sha, 32), 0);
    assert_not_installed(&r[1], PSDB_E_NOT_FOUND, 0, "unchanged first, target 1");
    t = tool_install_json(f.url, first_ok, 2, 3, &doc);
    json_t *t0 = json_array_get(t, 0);
    ck_assert_str_eq(json_string_value(json_object_get(t0, "status")), "unchanged");
    ck_assert_int_eq(json_integer_value(json_object_get(t0, "serial")), 1);
    ck_assert_ptr_nonnull(json_string_value(json_object_get(t0, "sha256")));
    ck_assert(json_is_null(json_object_get(t0, "error")));
    assert_json_not_installed(t, 1, OTHER, "failed", "PSDB_E_NOT_FOUND", NULL);
    json_decref(doc);

    /* Refused before any target is looked at (two targets of one family): every entry is
     * written all the same, the second target named as the one refused. */
    const char *twice[] = {OTHER, OTHER};
    ck_assert_hr(install_families(c, twice, 2, r), PSDB_E_INVALIDARG);
    assert_not_installed(&r[0], PSDB_E_INVALIDARG, 1, "duplicate, target 0");
    assert_not_installed(&r[1], PSDB_E_INVALIDARG, 0, "duplicate, target 1");
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

/* ---- a mirror that answers another request ----------------------------------------------------
 * Every PSDB and manifest below is genuine and signed by the trusted key: only the pairing of
 * request and answer is a lie. */

static const uint8_t k_app_id[16] = {0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
#define K_PROFILE PSDB_VERSION(1, 2, 0, 0)

static void honest_identity(psdb_app_identity *id, psdb_target *t)
{
    memset(id, 0, sizeof(*id));
    id->desc.exe_filename = "demo.exe";
    id->desc.name = "Demo";
    id->desc.version = PSDB_VERSION(1, 0, 0, 0);
    memcpy(id->app_id, k_app_id, 16);
    memset(t, 0, sizeof(*t));
    t->family = FAMILY;
    t->abi_version = 3;
    t->profile_version = PSDB_VERSION(1, 2, 0, 7); /* same top 32 bits as K_PROFILE */
}

/* A PSDB file recording exactly id and t. */
static blob make_psdb_as(const char *name, unsigned seed, const psdb_app_identity *id,
                         const psdb_target *t)
{
    char *path = tu_path(g_dir, name);
    psdb_writer *w = NULL;
    char value[64];
    snprintf(value, sizeof(value), "value %u", seed);
    ck_assert_hr(psdb_writer_create(path, id, t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, PSDB_VALUE_OBJECT_CODE, value, strlen(value)),
                 PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    blob b = {0};
    b.data = (uint8_t *)tu_read_file(path, &b.size);
    ck_assert_ptr_nonnull(b.data);
    psdb__sha256(b.data, b.size, b.sha);
    free(path);
    return b;
}

static const char *fmt_v(uint64_t v, char buf[24])
{
    snprintf(buf, 24, "%u.%u.%u.%u", (unsigned)(v >> 48 & 0xFFFF), (unsigned)(v >> 32 & 0xFFFF),
             (unsigned)(v >> 16 & 0xFFFF), (unsigned)(v & 0xFFFF));
    return buf;
}

/* A manifest for b claiming id and t, signed with the trusted key (as psdbd serves it). */
/* 86 base64 digits of zero bits. */
#define ALL_ZERO_B64                                                                               \
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

/* A manifest of b as a server would send it, signed with the test key (a name the rule for names
 * refuses cannot be signed: it gets a well-formed signature of nothing, as a lying mirror's). */
static char *make_manifest_as(const blob *b, uint64_t serial, const psdb_app_identity *id,
                              const psdb_target *t)
{
    psdb_key *key = NULL;
    char kid[PSDB_KEY_ID_SIZE], sig[PSDB_SIGNATURE_B64_SIZE], sha[65], url[128], uuid[37];
    char v[4][24];
    ck_assert_hr(psdb_key_load(g_key, &key), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(key, kid), PSDB_S_OK);
    psdb_statement st = {.size = b->size, .identity = *id, .target = *t, .serial = serial};
    memcpy(st.sha256, b->sha, 32);
    psdb_hr hr = psdb_statement_sign(key, &st, sig);
    psdb_key_release(key);
    if (hr == PSDB_E_INVALIDARG) /* a name libpsdb will not sign: a signature of nothing */
        snprintf(sig, sizeof(sig), "%.86s==", ALL_ZERO_B64);
    else
        ck_assert_hr(hr, PSDB_S_OK);
    psdb__hex(b->sha, 32, sha);
    snprintf(url, sizeof(url), "/v1/blobs/%s", sha);
    const uint8_t *u = id->app_id;
    snprintf(uuid, sizeof(uuid),
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    json_t *o = json_pack(
        "{s:I, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s}, s:{s:s, s:I, s:s, s:s}, s:I, "
        "s:s, s:s, s:s}",
        "id", (json_int_t)serial, "sha256", sha, "size", (json_int_t)b->size, "url", url, "app",
        "name", id->desc.name, "exe_filename", id->desc.exe_filename ? id->desc.exe_filename : "",
        "version", fmt_v(id->desc.version, v[0]), "engine_name", "", "engine_version",
        fmt_v(0, v[1]), "app_id", uuid, "target", "family", t->family, "abi_version",
        (json_int_t)t->abi_version, "compiler_version", fmt_v(t->compiler_version, v[2]),
        "profile_version", fmt_v(t->profile_version, v[3]), "serial", (json_int_t)serial,
        "created_at", "2026-01-01T00:00:00Z", "key_id", kid, "signature", sig);
    ck_assert_ptr_nonnull(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* The honest request: Demo 1.0.0.0 with its AppId, FAMILY ABI 1-10, profile 1.2.x.x. */
static psdb_hr install_bound(psdb_client *c, psdb_install_result *r)
{
    psdb_app_desc app = {.name = "Demo", .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_precompile_target t = {
        .family = FAMILY, .abi_min = 1, .abi_max = 10, .profile_version = K_PROFILE};
    psdb_install_desc d = {.exe_path = EXE,
                           .app = &app,
                           .app_id = k_app_id,
                           .targets = &t,
                           .num_targets = 1,
                           .registry_dir = g_reg};
    return psdb_client_install(c, &d, r);
}

typedef struct lie {
    const char *what; /* the field, as the refusal names it */
    void (*apply)(psdb_app_identity *id, psdb_target *t);
} lie;

static void lie_name(psdb_app_identity *id, psdb_target *t)
{
    (void)t;
    id->desc.name = "Other";
}
static void lie_version(psdb_app_identity *id, psdb_target *t)
{
    (void)t;
    id->desc.version = PSDB_VERSION(1, 0, 0, 1);
}
static void lie_app_id(psdb_app_identity *id, psdb_target *t)
{
    (void)t;
    id->app_id[15] ^= 0xff;
}
static void lie_exe(psdb_app_identity *id, psdb_target *t)
{
    (void)t;
    id->desc.exe_filename = "other.exe";
}
static void lie_family(psdb_app_identity *id, psdb_target *t)
{
    (void)id;
    t->family = "fabrikam-x";
}
static void lie_abi(psdb_app_identity *id, psdb_target *t)
{
    (void)id;
    t->abi_version = 11; /* the request asks for 1-10 */
}
static void lie_profile(psdb_app_identity *id, psdb_target *t)
{
    (void)id;
    t->profile_version = PSDB_VERSION(1, 3, 0, 0);
}

static const lie k_lies[] = {
    {"application 'Other' for a request for 'Demo'", lie_name},
    {"version 1.0.0.1 of 'Demo' for a request for 1.0.0.0", lie_version},
    {"AppId a1020304-0506-0708-090a-0b0c0d0e0fef", lie_app_id},
    {"exe filename 'other.exe' for a request for 'demo.exe'", lie_exe},
    {"family 'fabrikam-x' for a request for '" FAMILY "'", lie_family},
    {"ABI version 11 for a request for ABI 1-10", lie_abi},
    {"profile version 1.3.0.0", lie_profile},
};

START_TEST(test_delivery__manifest_for_another_request_refused_registry_unchanged)
{
    psdb_app_identity id;
    psdb_target t;
    honest_identity(&id, &t);
    blob good1 = make_psdb_as("good1.psdb", 1, &id, &t);
    blob good2 = make_psdb_as("good2.psdb", 2, &id, &t);
    char *m1 = make_manifest_as(&good1, 1, &id, &t);
    char *m2 = make_manifest_as(&good2, 2, &id, &t);
    fake f = {.b = &good1, .resolve_body = m1};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install_bound(c, NULL), PSDB_S_OK);
    char *before = registered_path();
    ck_assert_ptr_nonnull(before);

    for (size_t i = 0; i < sizeof(k_lies) / sizeof(k_lies[0]); i++) {
        psdb_app_identity lid;
        psdb_target lt;
        char name[32];
        honest_identity(&lid, &lt);
        k_lies[i].apply(&lid, &lt);
        snprintf(name, sizeof(name), "lie%zu.psdb", i);
        /* A high serial: had it been recorded, the honest serial 2 below would be a downgrade. */
        blob lb = make_psdb_as(name, 100 + (unsigned)i, &lid, &lt);
        char *lm = make_manifest_as(&lb, 100, &lid, &lt);
        f.b = &lb;
        f.resolve_body = lm;
        atomic_store(&f.blob_requests, 0);
        psdb_install_result r;
        ck_assert_hr(install_bound(c, &r), PSDB_E_INTEGRITY);
        ck_assert_hr(r.status, PSDB_E_INTEGRITY);
        ck_assert_msg(strstr(psdb_client_last_error(c), k_lies[i].what) != NULL,
                      "lie %zu: '%s' does not name '%s'", i, psdb_client_last_error(c),
                      k_lies[i].what);
        ck_assert_int_eq(atomic_load(&f.blob_requests), 0); /* refused before any byte */
        char *after = registered_path();
        ck_assert_str_eq(after, before);
        free(after);
        /* resolve refuses the request-level lies itself (the AppId is not part of its request). */
        if (k_lies[i].apply != lie_app_id) {
            psdb_app_desc app = {
                .name = "Demo", .version = PSDB_VERSION(1, 0, 0, 0), .exe_filename = "demo.exe"};
            psdb_precompile_target rt = {
                .family = FAMILY, .abi_min = 1, .abi_max = 10, .profile_version = K_PROFILE};
            psdb_manifest *m = (psdb_manifest *)&app; /* must come back NULL */
            ck_assert_hr(psdb_client_resolve(c, &app, &rt, &m), PSDB_E_INTEGRITY);
            ck_assert_ptr_null(m);
            ck_assert_ptr_nonnull(
                strstr(psdb_client_last_error(c), "resolve: the server answered"));
        }
        free(lm);
        free(lb.data);
    }

    /* The honest update still installs: nothing of the lies reached the rollback state. */
    f.b = &good2;
    f.resolve_body = m2;
    ck_assert_hr(install_bound(c, NULL), PSDB_S_OK);
    char *after = registered_path();
    ck_assert_str_ne(after, before);
    free(after);
    free(before);
    psdb_client_release(c);
    fake_stop(&f);
    free(m1);
    free(m2);
    free(good1.data);
    free(good2.data);
}
END_TEST

START_TEST(test_delivery__any_profile_request_accepts_any_profile_version)
{
    /* profile_version 0 in the request means "any" (client.h): no profile refusal then. */
    psdb_app_identity id;
    psdb_target t;
    honest_identity(&id, &t);
    t.profile_version = PSDB_VERSION(9, 9, 9, 9);
    blob b = make_psdb_as("p.psdb", 1, &id, &t);
    char *m = make_manifest_as(&b, 1, &id, &t);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install(c, 0, NULL), PSDB_S_OK);
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}
END_TEST

/* A signed manifest that matches the request but not the file it names (the publisher signed a
 * statement the file's own header contradicts): the file is refused after download. */
static void psdb_contradicts_manifest(void (*apply)(psdb_app_identity *, psdb_target *),
                                      const char *what)
{
    psdb_app_identity id, fid;
    psdb_target t, ft;
    honest_identity(&id, &t);
    honest_identity(&fid, &ft);
    apply(&fid, &ft);
    blob b = make_psdb_as("x.psdb", 1, &fid, &ft);
    char *m = make_manifest_as(&b, 1, &id, &t);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    psdb_client *c = client_for(f.url, g_pub);
    ck_assert_hr(install_bound(c, NULL), PSDB_E_INTEGRITY);
    ck_assert_msg(strstr(psdb_client_last_error(c), what) != NULL, "'%s' does not name '%s'",
                  psdb_client_last_error(c), what);
    ck_assert_ptr_null(registered_path());
    psdb_client_release(c);
    fake_stop(&f);
    free(m);
    free(b.data);
}

static void lie_compiler(psdb_app_identity *id, psdb_target *t)
{
    (void)id;
    t->compiler_version = PSDB_VERSION(2, 0, 0, 0);
}

START_TEST(test_delivery__psdb_file_contradicting_its_manifest_refused)
{
    psdb_contradicts_manifest(lie_version, "records version '1.0.0.1' but its signed manifest says "
                                           "'1.0.0.0'");
    psdb_contradicts_manifest(lie_app_id, "records AppId");
    psdb_contradicts_manifest(lie_exe, "records exe filename 'other.exe'");
    psdb_contradicts_manifest(lie_compiler, "records compiler version '2.0.0.0'");
}
END_TEST

/* ---- names printed as data -------------------------------------------------------------------
 * An application name that holds terminal commands: a clear-screen CSI, an OSC window title ended
 * by BEL, DEL, the 8-bit CSI U+009B, and printable UTF-8 (e acute) that must stay as it is. */
#define EVIL                                                                                       \
    "Demo\x1b[2J\x1b]0;pwned\x07\x7f\xc2\x9b"                                                      \
    "31m\xc3\xa9"

/* Runs the psdb tool with argv (no shell: the name travels as bytes); stdout and stderr together
 * into a malloc'd buffer. */
static char *run_tool(const char *const *args, int *status, size_t *len)
{
    char *file = tu_path(g_dir, "tool.out");
    char *argv[32];
    size_t n = 0;
    argv[n++] = (char *)PSDB_TOOL;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(PSDB_TOOL, argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *out = tu_read_file(file, len);
    ck_assert_ptr_nonnull(out);
    free(file);
    return out;
}

/* No byte a terminal acts on: only newlines, printable ASCII and well-formed UTF-8 outside C1. */
static void assert_terminal_safe(const char *what, const char *out, size_t len)
{
    const unsigned char *p = (const unsigned char *)out;
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        ck_assert_msg(c == '\n' || (c >= 0x20 && c != 0x7f), "%s: raw byte 0x%02x at %zu: %s", what,
                      c, i, out);
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        ck_assert_msg(n && i + n <= len, "%s: not UTF-8 at %zu", what, i);
        for (size_t k = 1; k < n; k++)
            ck_assert_msg((p[i + k] & 0xC0) == 0x80, "%s: not UTF-8 at %zu", what, i);
        ck_assert_msg(!(c == 0xC2 && p[i + 1] < 0xA0), "%s: raw C1 control at %zu", what, i);
        i += n;
    }
}

/* Runs the tool and checks its output is safe and shows the name's commands as text. */
static void expect_safe(const char *const *args, int want_status, const char *shows)
{
    int status = 0;
    size_t len = 0;
    char *out = run_tool(args, &status, &len);
    ck_assert_msg(status == want_status, "psdb %s: exit %d, want %d: %s", args[0], status,
                  want_status, out);
    assert_terminal_safe(args[0], out, len);
    ck_assert_msg(strstr(out, shows) != NULL, "psdb %s: '%s' not in: %s", args[0], shows, out);
    free(out);
}

/* The registry at g_reg with one application whose name is `name`, as a registry written before
 * the rule for names may hold (libpsdb refuses to register such a name now). */
static void registry_with_name(const char *name)
{
    char *db_path = tu_path(g_reg, "registry.db");
    psdb_installer *inst = NULL;
    psdb_application *app = NULL;
    psdb_installer_desc d = {.name = "t", .scope = PSDB_SCOPE_USER, .root_dir = g_reg};
    psdb_app_desc desc = {.exe_filename = "demo.exe", .name = "Demo", .version = 1};
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_register_application(inst, EXE, &desc, &app), PSDB_S_OK);
    psdb_application_release(app);
    psdb_installer_release(inst);
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "UPDATE applications SET name = ? WHERE exe_path = ?",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, EXE, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(db_path);
}

START_TEST(test_delivery__tool_output_escapes_control_characters_in_names)
{
    psdb_app_identity id;
    psdb_target t;
    honest_identity(&id, &t);
    id.desc.name = EVIL;
    id.desc.engine_name = "Eng\x9b"
                          "1m"; /* a lone 8-bit CSI: not UTF-8 (only in the file) */
    char *psdb = tu_path(g_dir, "evil.psdb");
    blob b = make_psdb_as("evil.psdb", 1, &id, &t);
    const char *inspect[] = {"inspect", psdb, NULL};
    expect_safe(inspect, 0, "Demo\\x1b[2J\\x1b]0;pwned\\x07\\x7f\\xc2\\x9b31m\xc3\xa9");
    expect_safe(inspect, 0, "Eng\\x9b1m");
    const char *inspect_json[] = {"inspect", psdb, "--json", NULL};
    /* The lone 0x9b is not UTF-8: JSON cannot carry it, the tool says so without echoing it. */
    int status = 0;
    size_t len = 0;
    char *out = run_tool(inspect_json, &status, &len);
    assert_terminal_safe("inspect --json", out, len);
    free(out);
    /* A name that reorders text (U+202E) or hides a space (U+200B), in a file written before the
     * rule for names: shown escaped, never raw. */
    id.desc.name = "Demo\xe2\x80\xaegnp.exe";
    id.desc.engine_name = "Eng\xe2\x80\x8bine";
    char *spoof = tu_path(g_dir, "spoof.psdb");
    blob sb = make_psdb_as("spoof.psdb", 3, &id, &t);
    const char *inspect_spoof[] = {"inspect", spoof, NULL};
    expect_safe(inspect_spoof, 0, "Demo\\xe2\\x80\\xaegnp.exe");
    expect_safe(inspect_spoof, 0, "Eng\\xe2\\x80\\x8bine");
    free(sb.data);
    free(spoof);
    id.desc.name = EVIL;
    /* An SODB written with the name (the tool's synth refuses it: the rule for names). */
    char *sodb = tu_path(g_dir, "evil.sodb");
    const char *synth[] = {"synth", "--app", EVIL, "--app-version", "1.0.0.0", "--pipelines", "3",
                           "-o",    sodb,    NULL};
    expect_safe(synth, 1, "psdb synth: --app contains the control character U+001B");
    psdb__synth_params sp = {.app_name = EVIL,
                             .app_version = PSDB_VERSION(1, 0, 0, 0),
                             .pipelines = 3,
                             .seed = 1,
                             .variants = 1};
    ck_assert_hr(psdb__synth_write(&sp, sodb), PSDB_S_OK);
    const char *inspect_sodb[] = {"inspect", sodb, NULL};
    expect_safe(inspect_sodb, 0, "Demo\\x1b[2J");
    const char *inspect_sodb_json[] = {"inspect", sodb, "--json", NULL};
    expect_safe(inspect_sodb_json, 0, "Demo\\u001B[2J");
    free(b.data);

    /* Through a server: the tool refuses to send the name; the registry shows one stored before
     * the rule escaped; a mirror that answers the evil name for a request for Demo is refused,
     * its manifest naming the code point, never echoing the name. */
    id.desc.engine_name = NULL;
    b = make_psdb_as("evil2.psdb", 2, &id, &t);
    char *m = make_manifest_as(&b, 1, &id, &t);
    fake f = {.b = &b, .resolve_body = m};
    fake_start(&f);
    char target[64];
    snprintf(target, sizeof(target), "%s:1-10", FAMILY);
    const char *resolve[] = {"resolve", "--server", f.url,  "--app",     EVIL, "--app-version",
                             "1.0.0.0", "--family", FAMILY, "--abi-min", "1",  "--abi-max",
                             "10",      NULL};
    expect_safe(resolve, 1, "psdb resolve: --app contains the control character U+001B");
    const char *install_cmd[] = {
        "install", "--server", f.url,  "--exe-path", EXE,   "--app",      EVIL,  "--app-version",
        "1.0.0.0", "--target", target, "--trust",    g_pub, "--registry", g_reg, NULL};
    expect_safe(install_cmd, 1, "psdb install: --app contains the control character U+001B");
    registry_with_name(EVIL);
    const char *list[] = {"registry", "list", "--registry", g_reg, NULL};
    expect_safe(list, 0, "Demo\\x1b[2J\\x1b]0;pwned\\x07\\x7f\\xc2\\x9b31m\xc3\xa9");
    const char *list_json[] = {"registry", "list", "--registry", g_reg, "--json", NULL};
    expect_safe(list_json, 0, "Demo\\u001B[2J");
    const char *lied_to[] = {"install", "--server",      f.url,     "--exe-path", EXE,    "--app",
                             "Demo",    "--app-version", "1.0.0.0", "--target",   target, "--trust",
                             g_pub,     "--registry",    g_reg,     NULL};
    expect_safe(lied_to, 1,
                "not a valid manifest: the application name contains the control "
                "character U+001B");
    const char *lied_to_json[] = {"install", "--server", f.url,           "--exe-path", EXE,
                                  "--app",   "Demo",     "--app-version", "1.0.0.0",    "--target",
                                  target,    "--trust",  g_pub,           "--registry", g_reg,
                                  "--json",  NULL};
    expect_safe(lied_to_json, 1, "the application name contains the control character U+001B");
    fake_stop(&f);
    free(m);
    free(b.data);
    free(psdb);
    free(sodb);
}
END_TEST

/* ---- the real psdbd -----------------------------------------------------------------------------
 */

typedef struct server {
    pid_t pid;
    char url[64];
    char *data;
} server;

static void server_start(server *s, const char *listen)
{
    int fds[2];
    char line[256] = {0};
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execl(PSDBD_BIN, PSDBD_BIN, "--listen", listen, "--data-dir", s->data, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    for (size_t n = 0; n < sizeof(line) - 1; n++)
        if (read(fds[0], line + n, 1) != 1 || line[n] == '\n') {
            line[n] = '\0';
            break;
        }
    close(fds[0]);
    char *u = strstr(line, "http://");
    ck_assert_msg(u != NULL, "psdbd did not start: '%s'", line);
    s->pid = pid;
    snprintf(s->url, sizeof(s->url), "%s", u);
}

static void server_stop(server *s, int sig)
{
    int st;
    kill(s->pid, sig);
    waitpid(s->pid, &st, 0);
}

static char *run_out(const char *cmd)
{
    char *file = tu_path(g_dir, "cmd.out");
    int rc = tu_run(cmd, file);
    char *out = tu_read_file(file, NULL);
    ck_assert_msg(rc == 0, "'%s' failed: %s", cmd, out ? out : "");
    out[strcspn(out, "\n")] = '\0';
    free(file);
    return out;
}

static void publish(const server *s, const char *token, const char *psdb_path, int serial)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s publish --server %s --token %s --key %s --serial %d %s",
             PSDB_TOOL, s->url, token, g_key, serial, psdb_path);
    free(run_out(cmd));
}

static void compile(const char *sodb, const char *family, int abi, const char *compiler_version,
                    const char *out)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s compile %s --family %s --abi %d --compiler-version %s --cost-ns-per-kib 0 -o %s",
             PSDB_TOOL, sodb, family, abi, compiler_version, out);
    free(run_out(cmd));
}

/* Replays the SODB on a new device for EXE: returns the PSDB hit count; *created the total. */
static uint32_t replay_hits(const char *sodb_path, const char *family, uint32_t *created,
                            uint8_t digest[32])
{
    psdb_sodb *sodb = NULL;
    psdb_app_identity id;
    ck_assert_hr(psdb_sodb_open(sodb_path, &sodb), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_get_identity(sodb, &id), PSDB_S_OK);
    psdb_sodb_release(sodb);
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s replay %s --family %s --abi-min 1 --abi-max 10 --exe-path %s --registry %s "
             "--cost-ns-per-kib 1 --json",
             PSDB_TOOL, sodb_path, family, EXE, g_reg);
    char *out = run_out(cmd);
    json_t *o = json_loads(out, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_is_true(json_object_get(o, "default_psdb_registered")));
    json_t *ps = json_object_get(o, "pipeline_states");
    *created = (uint32_t)json_integer_value(json_object_get(ps, "created"));
    uint32_t missed = (uint32_t)json_integer_value(json_object_get(ps, "psdb_missed"));
    json_decref(o);
    free(out);
    /* Which PSDB the registry points the device at. */
    char *path = registered_path();
    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    memcpy(digest, info.content_digest, 32);
    psdb_file_release(f);
    free(path);
    return *created - missed;
}

START_TEST(test_delivery__end_to_end_publish_install_create_hit)
{
    server s = {.data = tu_path(g_dir, "psdbd-data")};
    char cmd[2048];
    char *sodb = tu_path(g_dir, "demo.sodb");
    char *a1 = tu_path(g_dir, "a1.psdb"), *b1 = tu_path(g_dir, "b1.psdb");
    char *a2 = tu_path(g_dir, "a2.psdb");
    server_start(&s, "127.0.0.1:0");
    snprintf(cmd, sizeof(cmd), "%s token create --data-dir %s --role publisher --scope '*'",
             PSDBD_BIN, s.data);
    char *token = run_out(cmd);
    snprintf(cmd, sizeof(cmd), "%s key add --data-dir %s --name ci --public-key %s --scope '*'",
             PSDBD_BIN, s.data, g_pub);
    free(run_out(cmd));
    snprintf(cmd, sizeof(cmd),
             "%s synth --app Demo --app-version 1.0.0.0 --pipelines 120 --seed 7 -o %s", PSDB_TOOL,
             sodb);
    free(run_out(cmd));
    compile(sodb, FAMILY, 3, "1.0.0.0", a1);
    compile(sodb, "fabrikam-x", 5, "1.0.0.0", b1);
    publish(&s, token, a1, 1);
    publish(&s, token, b1, 1);

    /* A machine with one of the two families. */
    snprintf(cmd, sizeof(cmd),
             "%s install --server %s --exe-path %s --app Demo --app-version 1.0.0.0 "
             "--target %s:1-10 --trust %s --registry %s --json",
             PSDB_TOOL, s.url, EXE, FAMILY, g_pub, g_reg);
    char *out = run_out(cmd);
    ck_assert_ptr_nonnull(strstr(out, "\"ok\":true"));
    free(out);
    uint32_t created = 0;
    uint8_t d1[32], d2[32];
    uint32_t hits = replay_hits(sodb, FAMILY, &created, d1);
    ck_assert_uint_eq(created, 120);
    ck_assert_uint_eq(hits, created); /* 100% PSDB hit rate */

    /* A newer serial (another compiler version: other content) is picked up by a new device. */
    compile(sodb, FAMILY, 3, "1.1.0.0", a2);
    publish(&s, token, a2, 2);
    out = run_out(cmd);
    free(out);
    hits = replay_hits(sodb, FAMILY, &created, d2);
    ck_assert_uint_eq(hits, created);
    ck_assert_int_ne(memcmp(d1, d2, 32), 0);
    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_file_open(a2, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_int_eq(memcmp(info.content_digest, d2, 32), 0);
    psdb_file_release(f);

    server_stop(&s, SIGTERM);
    free(token);
    free(sodb);
    free(a1);
    free(b1);
    free(a2);
    free(s.data);
}
END_TEST

/* A TCP relay in a thread that slows the transfer down, so psdbd can be killed mid-download. */
typedef struct relay {
    int listen_fd, port, upstream_port;
    pthread_t thread;
    atomic_int stop;
} relay;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void *relay_conn(void *arg)
{
    int *fds = arg; /* client, upstream */
    char buf[16384];
    struct timeval tv = {0, 20000};
    for (;;) {
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(fds[0], &rs);
        FD_SET(fds[1], &rs);
        int m = fds[0] > fds[1] ? fds[0] : fds[1];
        tv.tv_sec = 0;
        tv.tv_usec = 20000;
        if (select(m + 1, &rs, NULL, NULL, &tv) < 0)
            break;
        if (FD_ISSET(fds[0], &rs)) {
            ssize_t n = read(fds[0], buf, sizeof(buf));
            if (n <= 0 || write(fds[1], buf, (size_t)n) != n)
                break;
        }
        if (FD_ISSET(fds[1], &rs)) {
            ssize_t n = read(fds[1], buf, sizeof(buf));
            if (n <= 0 || write(fds[0], buf, (size_t)n) != n)
                break;
            usleep(10000); /* ~1.6 MB/s */
        }
    }
    close(fds[0]);
    close(fds[1]);
    free(fds);
    return NULL;
}

static void *relay_main(void *arg)
{
    relay *r = arg;
    while (!atomic_load(&r->stop)) {
        int c = accept(r->listen_fd, NULL, NULL);
        if (c < 0)
            continue;
        int u = connect_to(r->upstream_port);
        if (u < 0) {
            close(c);
            continue;
        }
        int *fds = malloc(2 * sizeof(int));
        fds[0] = c;
        fds[1] = u;
        pthread_t t;
        pthread_create(&t, NULL, relay_conn, fds);
        pthread_detach(t);
    }
    return NULL;
}

/* The relay's socket, listening: its port is known (r->port) and connections wait in the backlog
 * until relay_run's thread accepts them. Split so that a test can fork its client between the two:
 * a fork while another thread runs may copy a lock that thread holds (ASan's allocator's), and the
 * child then waits on it forever. */
static void relay_listen(relay *r)
{
    r->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(r->listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(r->listen_fd, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(r->listen_fd, (struct sockaddr *)&a, &len);
    r->port = ntohs(a.sin_port);
    struct timeval tv = {0, 100000};
    setsockopt(r->listen_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void relay_run(relay *r)
{
    ck_assert_int_eq(pthread_create(&r->thread, NULL, relay_main, r), 0);
}

static void relay_stop(relay *r)
{
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
    close(r->listen_fd);
}

START_TEST(test_delivery__psdbd_killed_mid_download_then_restarted)
{
    server s = {.data = tu_path(g_dir, "psdbd-data")};
    char cmd[2048];
    char *big = tu_path(g_dir, "big.psdb");
    blob b = make_psdb("big.psdb", 8 << 20, 3, 3);
    server_start(&s, "127.0.0.1:0");
    int port = atoi(strrchr(s.url, ':') + 1);
    snprintf(cmd, sizeof(cmd), "%s token create --data-dir %s --role publisher --scope '*'",
             PSDBD_BIN, s.data);
    char *token = run_out(cmd);
    snprintf(cmd, sizeof(cmd), "%s key add --data-dir %s --name ci --public-key %s --scope '*'",
             PSDBD_BIN, s.data, g_pub);
    free(run_out(cmd));
    publish(&s, token, big, 1);

    relay r = {.upstream_port = port};
    relay_listen(&r);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", r.port);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        const char *keys[1] = {g_pub};
        psdb_client_desc d = {.server_url = url,
                              .trusted_keys = keys,
                              .num_trusted_keys = 1,
                              .retry_base_ms = 250,
                              .max_retries = 8};
        psdb_client *c = NULL;
        if (PSDB_FAILED(psdb_client_create(&d, &c)))
            _exit(2);
        _exit(PSDB_SUCCEEDED(install(c, 0, NULL)) ? 0 : 1);
    }
    relay_run(&r); /* after the fork: the child copies no running thread's locks */
    /* Let a part of the 8 MiB arrive (the relay passes ~1.6 MB/s), then kill -9 psdbd. */
    usleep(1500000);
    server_stop(&s, SIGKILL);
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    usleep(300000);
    server_start(&s, listen);
    int st = 0;
    waitpid(child, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "install did not survive the restart");
    char *path = registered_path();
    ck_assert_ptr_nonnull(path);
    size_t size = 0;
    char *got = tu_read_file(path, &size);
    ck_assert_uint_eq(size, b.size);
    ck_assert_int_eq(memcmp(got, b.data, size), 0);
    free(got);
    free(path);
    relay_stop(&r);
    server_stop(&s, SIGTERM);
    free(token);
    free(big);
    free(b.data);
    free(s.data);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("delivery");
    TCase *faults = tcase_create("faults");
    tcase_add_checked_fixture(faults, setup, teardown);
    tcase_set_timeout(faults, 120);
    tcase_add_test(faults, test_delivery__download_resumes_after_cut_connections);
    tcase_add_test(faults, test_delivery__flipped_byte_rejected_previous_install_stays);
    tcase_add_test(faults, test_delivery__untrusted_key_rejected_before_download);
    tcase_add_test(faults, test_delivery__manifest_digest_not_matching_blob_rejected);
    tcase_add_test(faults, test_delivery__lower_serial_refused_unless_allowed);
    tcase_add_test(faults, test_delivery__server_errors_are_clear_and_change_nothing);
    tcase_add_test(faults, test_delivery__full_disk_at_destination);
    tcase_add_test(faults, test_delivery__second_installer_of_the_same_name_is_refused);
    tcase_add_test(faults, test_delivery__sweep_keeps_recent_part_files_only);
    tcase_add_test(faults, test_delivery__install_results_truthful_when_the_installer_is_busy);
    tcase_add_test(faults, test_delivery__install_results_truthful_when_the_server_is_unreachable);
    tcase_add_test(faults,
                   test_delivery__install_results_truthful_when_the_signing_key_is_not_trusted);
    tcase_add_test(faults, test_delivery__install_results_truthful_when_one_target_has_no_psdb);
    tcase_add_test(faults, test_delivery__manifest_for_another_request_refused_registry_unchanged);
    tcase_add_test(faults, test_delivery__any_profile_request_accepts_any_profile_version);
    tcase_add_test(faults, test_delivery__psdb_file_contradicting_its_manifest_refused);
    tcase_add_test(faults, test_delivery__tool_output_escapes_control_characters_in_names);
    suite_add_tcase(s, faults);
    TCase *e2e = tcase_create("psdbd");
    tcase_add_checked_fixture(e2e, setup, teardown);
    tcase_set_timeout(e2e, 300);
    tcase_add_test(e2e, test_delivery__end_to_end_publish_install_create_hit);
    tcase_add_test(e2e, test_delivery__psdbd_killed_mid_download_then_restarted);
    suite_add_tcase(s, e2e);
    return tu_run_suite(s);
}
