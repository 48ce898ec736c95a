/* launcher_test.c - the delivery client as a launcher drives it: cancel from the progress
 * callback, bandwidth limits, proxies from the environment, psdb install stopped by a signal and
 * resumed, many installs at once. Against an in-process libmicrohttpd server serving several
 * applications. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/client.h"
#include "common/buf.h"
#include "common/hash.h"

#define FAMILY "contoso-gfx9"
#define MAX_APPS 16

static char *g_dir; /* per-test temporary directory */
static char *g_reg; /* registry root */
static char *g_key, *g_pub;

/* ---- applications, their PSDBs and signed manifests ----------------------------------------- */

typedef struct app_entry {
    char name[32];
    char exe[96];
    uint8_t *data;
    size_t size;
    uint8_t sha[32];
    char hex[65];
    char *manifest;
    uint8_t *map; /* its value map (psdb_value_map_write), served at <blob>/valuemap */
    size_t map_size;
    uint8_t *map2; /* its version 2 map, served at <blob>/valuemap/v2 (what the client reads) */
    size_t map2_size;
} app_entry;

static void app_finish(app_entry *a, const char *path, uint64_t serial);

static void app_make(app_entry *a, const char *name, size_t payload, unsigned seed)
{
    snprintf(a->name, sizeof(a->name), "%s", name);
    snprintf(a->exe, sizeof(a->exe), "/games/%s/demo.exe", name);
    char file[64];
    snprintf(file, sizeof(file), "%s.psdb", name);
    char *path = tu_path(g_dir, file);
    psdb_app_identity id = {
        .desc = {.exe_filename = "demo.exe", .name = a->name, .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = FAMILY, .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t *buf = malloc(65536);
    ck_assert_ptr_nonnull(buf);
    unsigned x = seed * 2654435761u + 7;
    for (size_t k = 0; k * 65536 < payload; k++) {
        for (size_t i = 0; i < 65536; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        char key[32];
        snprintf(key, sizeof(key), "v%05zu", k);
        ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, 65536),
                     PSDB_S_OK);
    }
    free(buf);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    app_finish(a, path, 1);
    free(path);
}

/* Reads the PSDB at path into a, with its value map and a manifest of this serial. */
static void app_finish(app_entry *a, const char *path, uint64_t serial)
{
    psdb_app_identity id = {
        .desc = {.exe_filename = "demo.exe", .name = a->name, .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = FAMILY, .abi_version = 3};
    a->data = (uint8_t *)tu_read_file(path, &a->size);
    ck_assert_ptr_nonnull(a->data);
    char *map_path = tu_path(g_dir, "map.tmp");
    ck_assert_hr(psdb_value_map_write(path, map_path), PSDB_S_OK);
    a->map = (uint8_t *)tu_read_file(map_path, &a->map_size);
    ck_assert_ptr_nonnull(a->map);
    ck_assert_hr(psdb_value_map_write_version(path, 2, map_path), PSDB_S_OK);
    a->map2 = (uint8_t *)tu_read_file(map_path, &a->map2_size);
    ck_assert_ptr_nonnull(a->map2);
    unlink(map_path);
    free(map_path);
    psdb__sha256(a->data, a->size, a->sha);
    psdb__hex(a->sha, 32, a->hex);

    psdb_key *key = NULL;
    char kid[PSDB_KEY_ID_SIZE], sig[PSDB_SIGNATURE_B64_SIZE];
    ck_assert_hr(psdb_key_load(g_key, &key), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(key, kid), PSDB_S_OK);
    psdb_statement st = {.size = a->size, .identity = id, .target = t, .serial = serial};
    memcpy(st.sha256, a->sha, 32);
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    psdb_key_release(key);
    char url[128];
    snprintf(url, sizeof(url), "/v1/blobs/%s", a->hex);
    json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:n, s:s}, s:{s:s, s:I, s:s, "
                          "s:s}, s:I, s:s, s:s, s:s}",
                          "id", (json_int_t)serial, "sha256", a->hex, "size", (json_int_t)a->size,
                          "url", url, "app", "name", a->name, "exe_filename", "demo.exe", "version",
                          "1.0.0.0", "engine_name", "engine_version", "0.0.0.0", "target", "family",
                          FAMILY, "abi_version", (json_int_t)3, "compiler_version", "0.0.0.0",
                          "profile_version", "0.0.0.0", "serial", (json_int_t)serial, "created_at",
                          "2026-01-01T00:00:00Z", "key_id", kid, "signature", sig);
    ck_assert_ptr_nonnull(o);
    a->manifest = json_dumps(o, JSON_COMPACT);
    json_decref(o);
}

static void app_free(app_entry *a)
{
    free(a->data);
    free(a->manifest);
    free(a->map);
    free(a->map2);
}

/* ---- a server of several applications (libmicrohttpd in this process) ----------------------- */

typedef struct fake {
    struct MHD_Daemon *d;
    char url[64];
    app_entry *apps;
    int num_apps;
    /* Changed by a test while connection threads of earlier requests may still read them. */
    atomic_int resolve_delay_ms; /* the resolve answer waits this long */
    atomic_int blob_status;      /* 0: 200 */
    atomic_int resolve_requests, blob_requests, range_requests;
    atomic_int connections; /* TCP connections accepted */
    atomic_int map_requests;
    atomic_long range_bytes;      /* bytes sent in 206 answers */
    atomic_int no_maps;           /* 1: the value maps answer 404 */
    atomic_int map_status;        /* non-zero: the value maps answer this status, no body */
    atomic_int whole_for_several; /* 1: a Range of several ranges gets the whole blob (200) */
    const app_entry *map_of;      /* non-NULL: every value map served is this app's (a lie) */
    /* apps, num_apps and map_of change while connection threads of earlier requests run. */
    pthread_mutex_t lock;
} fake;

static void fake_serve(fake *f, app_entry *apps, int num_apps)
{
    pthread_mutex_lock(&f->lock);
    f->apps = apps;
    f->num_apps = num_apps;
    pthread_mutex_unlock(&f->lock);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)conn;
    (void)socket_context;
    fake *f = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&f->connections, 1);
}

typedef struct cursor {
    const app_entry *a;
    uint64_t start, end; /* [start, end) of the blob to send */
} cursor;

static ssize_t body_reader(void *cls, uint64_t off, char *buf, size_t max)
{
    cursor *c = cls;
    uint64_t pos = c->start + off;
    if (pos >= c->end)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = (size_t)(c->end - pos) < max ? (size_t)(c->end - pos) : max;
    memcpy(buf, c->a->data + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result fake_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_size, void **state)
{
    (void)method;
    (void)version;
    (void)upload_data;
    (void)upload_size;
    fake *f = cls;
    pthread_mutex_lock(&f->lock);
    const app_entry *apps = f->apps, *map_of = f->map_of;
    int num_apps = f->num_apps;
    pthread_mutex_unlock(&f->lock);
    /* The first call only sees the headers; answering then makes libmicrohttpd close the
     * connection, and these tests count kept-alive connections. */
    static int seen;
    if (!*state) {
        *state = &seen;
        return MHD_YES;
    }
    struct MHD_Response *r = NULL;
    unsigned status = 404;
    if (strcmp(url, "/v1/resolve") == 0) {
        atomic_fetch_add(&f->resolve_requests, 1);
        const char *app = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "app");
        int delay = atomic_load(&f->resolve_delay_ms);
        if (delay) {
            struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; app && i < num_apps; i++)
            if (strcmp(app, apps[i].name) == 0) {
                status = 200;
                r = MHD_create_response_from_buffer(strlen(apps[i].manifest), apps[i].manifest,
                                                    MHD_RESPMEM_MUST_COPY);
            }
    } else if (strncmp(url, "/v1/blobs/", 10) == 0 &&
               ((strlen(url) == 10 + 64 + 9 && strcmp(url + 74, "/valuemap") == 0) ||
                (strlen(url) == 10 + 64 + 12 && strcmp(url + 74, "/valuemap/v2") == 0))) {
        int v2 = strlen(url) == 10 + 64 + 12;
        atomic_fetch_add(&f->map_requests, 1);
        int forced = atomic_load(&f->map_status);
        if (forced)
            status = (unsigned)forced;
        for (int i = 0; i < num_apps && !r && !forced; i++)
            if (strncmp(url + 10, apps[i].hex, 64) == 0 && !atomic_load(&f->no_maps)) {
                const app_entry *src = map_of ? map_of : &apps[i];
                status = 200;
                r = MHD_create_response_from_buffer(v2 ? src->map2_size : src->map_size,
                                                    v2 ? src->map2 : src->map,
                                                    MHD_RESPMEM_MUST_COPY);
            }
    } else if (strncmp(url, "/v1/blobs/", 10) == 0) {
        atomic_fetch_add(&f->blob_requests, 1);
        for (int i = 0; i < num_apps && !r; i++) {
            const app_entry *a = &apps[i];
            if (strcmp(url + 10, a->hex) != 0)
                continue;
            int forced = atomic_load(&f->blob_status);
            if (forced) {
                status = (unsigned)forced;
                break;
            }
            cursor *c = calloc(1, sizeof(*c));
            c->a = a;
            status = 200;
            const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
            unsigned long long from = 0, to = 0;
            c->end = a->size;
            /* Several ranges: answered with the first one only (a server may), or ignored. */
            int fields = range && !(strchr(range, ',') && atomic_load(&f->whole_for_several))
                             ? sscanf(range, "bytes=%llu-%llu", &from, &to)
                             : 0;
            if (fields >= 1 && from < a->size) {
                atomic_fetch_add(&f->range_requests, 1);
                c->start = from;
                if (fields == 2 && to + 1 < a->size)
                    c->end = to + 1;
                atomic_fetch_add(&f->range_bytes, (long)(c->end - c->start));
                status = 206;
            }
            r = MHD_create_response_from_callback(c->end - c->start, 64 * 1024, body_reader, c,
                                                  free);
            if (status == 206) {
                char cr[96];
                snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)c->start,
                         (unsigned long long)c->end - 1, (unsigned long long)a->size);
                MHD_add_response_header(r, "Content-Range", cr);
            }
        }
    }
    if (!r)
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void fake_start(fake *f)
{
    pthread_mutex_init(&f->lock, NULL);
    f->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC, 0, NULL,
        NULL, fake_handler, f, MHD_OPTION_NOTIFY_CONNECTION, on_connection, f, MHD_OPTION_END);
    ck_assert_ptr_nonnull(f->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", info->port);
}

/* ---- helpers -------------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static psdb_client *client_with(const psdb_client_desc *base, const char *url)
{
    const char *keys[1] = {g_pub};
    psdb_client_desc d = *base;
    d.server_url = url;
    d.trusted_keys = keys;
    d.num_trusted_keys = 1;
    if (!d.retry_base_ms)
        d.retry_base_ms = 10;
    if (!d.max_retries)
        d.max_retries = 4;
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&d, &c), PSDB_S_OK);
    return c;
}

static psdb_hr install_app(psdb_client *c, const app_entry *a, const char *installer)
{
    psdb_app_desc app = {.name = a->name, .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_precompile_target t = {.family = FAMILY, .abi_min = 1, .abi_max = 10};
    psdb_install_desc d = {.exe_path = a->exe,
                           .app = &app,
                           .targets = &t,
                           .num_targets = 1,
                           .registry_dir = g_reg,
                           .installer_name = installer};
    return psdb_client_install(c, &d, NULL);
}

/* The PSDB path registered as the default component of exe for FAMILY, or NULL. */
static char *registered_path(const char *exe)
{
    psdb_explorer *e = NULL;
    psdb_application *a = NULL;
    psdb_component *comp = NULL;
    char buf[4096];
    char *out = NULL;
    if (PSDB_FAILED(psdb_explorer_open(g_reg, &e)))
        return NULL;
    if (PSDB_SUCCEEDED(psdb_explorer_get_application(e, exe, &a)) &&
        PSDB_SUCCEEDED(psdb_application_get_component(a, PSDB_DEFAULT_COMPONENT, &comp)) &&
        PSDB_SUCCEEDED(psdb_component_get_psdb_path(comp, FAMILY, buf, sizeof(buf))))
        out = strdup(buf);
    psdb_component_release(comp);
    psdb_application_release(a);
    psdb_explorer_release(e);
    return out;
}

/* Asserts that exe is registered with a file that hashes to a's digest. */
static void assert_installed(const app_entry *a)
{
    char *path = registered_path(a->exe);
    ck_assert_msg(path != NULL, "%s is not registered", a->exe);
    size_t n = 0;
    uint8_t got[32];
    uint8_t *data = (uint8_t *)tu_read_file(path, &n);
    ck_assert_ptr_nonnull(data);
    psdb__sha256(data, n, got);
    ck_assert_msg(n == a->size && memcmp(got, a->sha, 32) == 0, "%s: %s does not hash to %s",
                  a->exe, path, a->hex);
    free(data);
    free(path);
}

/* Size of the store's .part of a, -1 when absent. */
/* The size of the store's file of a with this suffix (".part", ".delta", ...); -1: none. */
static long long file_size_of(const app_entry *a, const char *suffix)
{
    char rel[200];
    snprintf(rel, sizeof(rel), "psdbs/%s.psdb%s", a->hex, suffix);
    char *p = tu_path(g_reg, rel);
    struct stat st;
    long long n = stat(p, &st) == 0 ? (long long)st.st_size : -1;
    free(p);
    return n;
}

static long long part_size(const app_entry *a)
{
    return file_size_of(a, ".part");
}

static void setup(void)
{
    g_dir = tu_mkdtemp();
    g_reg = tu_path(g_dir, "registry");
    g_key = tu_path(g_dir, "pub.key");
    g_pub = tu_path(g_dir, "pub.key.pub");
    ck_assert_hr(psdb_keygen(g_key, NULL), PSDB_S_OK);
}

static void teardown(void)
{
    tu_rmtree(g_dir);
    free(g_dir);
    free(g_reg);
    free(g_key);
    free(g_pub);
}

/* ---- cancel -----------------------------------------------------------------------------------
 */

typedef struct cancel_ctx {
    uint64_t after_bytes; /* cancel once this much is on disk ... */
    double after_s;       /* ... or once this long has passed since start (when > 0) */
    double start;
    atomic_int asked;
    int seen_resolve;
} cancel_ctx;

static int cancel_cb(const psdb_progress *p, void *ctx)
{
    cancel_ctx *k = ctx;
    atomic_fetch_add(&k->asked, 1);
    if (strcmp(p->what, "resolve") == 0)
        k->seen_resolve = 1;
    if (k->after_s > 0)
        return now_s() - k->start >= k->after_s;
    return p->total > 0 && p->done >= k->after_bytes;
}

START_TEST(test_launcher__progress_cancel_stops_download_keeps_part_next_install_resumes)
{
    app_entry a;
    app_make(&a, "Demo", 8u << 20, 1);
    fake f = {.apps = &a, .num_apps = 1};
    fake_start(&f);
    cancel_ctx k = {.after_bytes = 1u << 20};
    /* Slow enough that the cancel lands mid-file. */
    psdb_client_desc d = {
        .progress_cancel = cancel_cb, .progress_ctx = &k, .max_recv_bytes_per_second = 4u << 20};
    psdb_client *c = client_with(&d, f.url);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_E_CANCELLED);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "cancelled"));
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "kept for resuming"));
    ck_assert_ptr_null(registered_path(a.exe));
    long long part = part_size(&a);
    ck_assert_msg(part >= (1 << 20) && part < (long long)a.size, "part of %lld bytes", part);
    psdb_client_release(c);

    /* The next install resumes from the .part with one Range request and verifies the file. */
    psdb_client_desc plain = {0};
    c = client_with(&plain, f.url);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&f.range_requests), 1);
    assert_installed(&a);
    ck_assert_int_eq(part_size(&a), -1);
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&a);
}
END_TEST

START_TEST(test_launcher__progress_cancel_stops_a_stalled_resolve_and_a_backoff)
{
    app_entry a;
    app_make(&a, "Demo", 64u << 10, 2);
    fake f = {.apps = &a, .num_apps = 1, .resolve_delay_ms = 5000};
    fake_start(&f);
    /* A resolve whose answer does not come: no byte flows, the callback is still asked. */
    cancel_ctx k = {.after_s = 0.3, .start = now_s()};
    psdb_client_desc d = {.progress_cancel = cancel_cb, .progress_ctx = &k};
    psdb_client *c = client_with(&d, f.url);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_E_CANCELLED);
    double took = now_s() - k.start;
    ck_assert_msg(took < 3.0, "resolve cancel took %.1f s", took);
    ck_assert_int_eq(k.seen_resolve, 1);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "resolve"));
    psdb_client_release(c);

    /* A blob that answers 503: the client waits 5 s before its retry, and a cancel cuts it. */
    atomic_store(&f.resolve_delay_ms, 0);
    atomic_store(&f.blob_status, 503);
    cancel_ctx k2 = {.after_s = 0.3, .start = now_s()};
    psdb_client_desc d2 = {
        .progress_cancel = cancel_cb, .progress_ctx = &k2, .retry_base_ms = 5000, .max_retries = 3};
    c = client_with(&d2, f.url);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_E_CANCELLED);
    took = now_s() - k2.start;
    ck_assert_msg(took < 3.0, "backoff cancel took %.1f s", took);
    ck_assert_int_eq(atomic_load(&f.blob_requests), 1);
    ck_assert_ptr_null(registered_path(a.exe));
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&a);
}
END_TEST

/* ---- limits and proxies ------------------------------------------------------------------- */

/* Seconds to install a PSDB of about payload bytes from a fake server, the client limited to
 * rate bytes per second. */
static double install_seconds_at(const char *name, size_t payload, unsigned seed, uint64_t rate)
{
    app_entry a;
    app_make(&a, name, payload, seed);
    fake f = {.apps = &a, .num_apps = 1};
    fake_start(&f);
    psdb_client_desc d = {.max_recv_bytes_per_second = rate};
    psdb_client *c = client_with(&d, f.url);
    double t0 = now_s();
    ck_assert_hr(install_app(c, &a, NULL), PSDB_S_OK);
    double took = now_s() - t0;
    assert_installed(&a);
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&a);
    return took;
}

START_TEST(test_launcher__bandwidth_limit_caps_bytes_per_second)
{
    /* 4 MiB at 1 MiB/s: 4 s less the first burst of an eighth of a second; unlimited, loopback
     * takes a few milliseconds. */
    double took = install_seconds_at("Demo", 4u << 20, 3, 1u << 20);
    ck_assert_msg(took >= 3.8, "4 MiB at 1 MiB/s took only %.2f s", took);
}
END_TEST

START_TEST(test_launcher__proxy_and_no_proxy_from_the_environment_are_honoured)
{
    app_entry a;
    app_make(&a, "Demo", 64u << 10, 4);
    fake f = {.apps = &a, .num_apps = 1};
    fake_start(&f);
    /* A proxy on a port nothing listens on: a client that honours http_proxy cannot connect. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    close(s);
    char proxy[64];
    snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", ntohs(sa.sin_port));
    setenv("http_proxy", proxy, 1);
    unsetenv("no_proxy");
    unsetenv("NO_PROXY");
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f.url);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_E_NETWORK);
    ck_assert_int_eq(atomic_load(&f.resolve_requests), 0);
    /* no_proxy names the server: straight to it. */
    setenv("no_proxy", "127.0.0.1", 1);
    ck_assert_hr(install_app(c, &a, NULL), PSDB_S_OK);
    assert_installed(&a);
    unsetenv("http_proxy");
    unsetenv("no_proxy");
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&a);
}
END_TEST

/* ---- psdb install and signals ------------------------------------------------------------- */

static pid_t tool_start(const char *const *args, const char *out_file)
{
    char *argv[40];
    size_t n = 0;
    argv[n++] = (char *)PSDB_TOOL;
    for (; args[n - 1] && n < 39; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(PSDB_TOOL, argv);
        _exit(127);
    }
    return pid;
}

static int tool_wait(pid_t pid)
{
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

START_TEST(test_launcher__install_tool_stops_on_sigint_and_sigterm_then_resumes)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        app_entry a;
        char name[16];
        snprintf(name, sizeof(name), "Demo%zu", i);
        app_make(&a, name, 8u << 20, 10 + (unsigned)i);
        fake f = {.apps = &a, .num_apps = 1};
        fake_start(&f);
        char *out = tu_path(g_dir, "tool.out");
        const char *args[] = {
            "install", "--server",      f.url,     "--exe-path",   a.exe,          "--app",
            a.name,    "--app-version", "1.0.0.0", "--target",     FAMILY ":1-10", "--trust",
            g_pub,     "--registry",    g_reg,     "--limit-rate", "2M",           NULL};
        pid_t pid = tool_start(args, out);
        double t0 = now_s();
        while (part_size(&a) < (512 << 10) && now_s() - t0 < 20.0) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        ck_assert_msg(part_size(&a) >= (512 << 10), "no partial download appeared");
        kill(pid, sigs[i]);
        int rc = tool_wait(pid);
        char *text = tu_read_file(out, NULL);
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(rc == 128 + sigs[i], "exit %d after signal %d: %s", rc, sigs[i], text);
        ck_assert_msg(strstr(text, sigs[i] == SIGINT ? "interrupted by SIGINT"
                                                     : "interrupted by SIGTERM") != NULL,
                      "%s", text);
        free(text);
        ck_assert_ptr_null(registered_path(a.exe));
        long long part = part_size(&a);
        ck_assert_msg(part > 0 && part < (long long)a.size, "part of %lld bytes", part);

        /* The next run resumes the .part and installs. */
        const char *again[] = {"install", "--server",   f.url,          "--exe-path",
                               a.exe,     "--app",      a.name,         "--app-version",
                               "1.0.0.0", "--target",   FAMILY ":1-10", "--trust",
                               g_pub,     "--registry", g_reg,          NULL};
        rc = tool_wait(tool_start(again, out));
        text = tu_read_file(out, NULL);
        ck_assert_msg(rc == 0, "resume exit %d: %s", rc, text);
        free(text);
        ck_assert_int_eq(atomic_load(&f.range_requests), 1);
        assert_installed(&a);
        free(out);
        MHD_stop_daemon(f.d);
        app_free(&a);
    }
}
END_TEST

START_TEST(test_launcher__install_tool_refuses_a_bad_limit_rate)
{
    static const char *const bad[] = {"0", "", "abc", "12X", "-1", "1.5M", "99999999999999999999G"};
    char *out = tu_path(g_dir, "tool.out");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *args[] = {"install",    "--server",      "http://127.0.0.1:1",
                              "--exe-path", "/g/x.exe",      "--app",
                              "X",          "--app-version", "1.0.0.0",
                              "--target",   FAMILY ":1-10",  "--trust",
                              g_pub,        "--limit-rate",  bad[i],
                              NULL};
        int rc = tool_wait(tool_start(args, out));
        char *text = tu_read_file(out, NULL);
        ck_assert_msg(rc == 1 && strstr(text, "--limit-rate") != NULL, "'%s': exit %d: %s", bad[i],
                      rc, text);
        free(text);
    }
    free(out);
}
END_TEST

/* ---- value-level delta updates ------------------------------------------------------------- */

/* Version `serial` of an application of n values: value i has bytes seeded by i, except where
 * changed(i) holds (a patch recompiled it); a quarter of the values are small (in the cell),
 * the rest 64 KiB (overflow chains). */
static void app_make_version(app_entry *a, const char *name, size_t n, uint64_t serial,
                             int (*changed)(size_t i))
{
    snprintf(a->name, sizeof(a->name), "%s", name);
    snprintf(a->exe, sizeof(a->exe), "/games/%s/demo.exe", name);
    char file[64];
    snprintf(file, sizeof(file), "%s-%llu.psdb", name, (unsigned long long)serial);
    char *path = tu_path(g_dir, file);
    psdb_app_identity id = {
        .desc = {.exe_filename = "demo.exe", .name = a->name, .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = FAMILY, .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t *buf = malloc(65536);
    for (size_t i = 0; i < n; i++) {
        size_t size = i % 4 == 0 ? 1500 + i : 65536;
        unsigned x = (unsigned)i * 2654435761u + (changed && changed(i) ? 99991u : 7u);
        for (size_t j = 0; j < size; j++) {
            x = x * 1103515245u + 12345u;
            buf[j] = (uint8_t)(x >> 16);
        }
        char key[32];
        snprintf(key, sizeof(key), "v%05zu", i);
        ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, size),
                     PSDB_S_OK);
    }
    free(buf);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    app_finish(a, path, serial);
    free(path);
}

static int every_20th(size_t i)
{
    return i % 20 == 3;
}

static int all_values(size_t i)
{
    (void)i;
    return 1;
}

static psdb_hr install_r(psdb_client *c, const app_entry *a, psdb_install_result *r)
{
    psdb_app_desc app = {.name = a->name, .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_precompile_target t = {.family = FAMILY, .abi_min = 1, .abi_max = 10};
    psdb_install_desc d = {
        .exe_path = a->exe, .app = &app, .targets = &t, .num_targets = 1, .registry_dir = g_reg};
    return psdb_client_install(c, &d, r);
}

/* Installs v1, then offers v2 and installs it; returns v2's result. */
static psdb_install_result update(fake *f, app_entry *v1, app_entry *v2, void (*between)(void))
{
    psdb_install_result r;
    fake_serve(f, v1, 1);
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f->url);
    ck_assert_hr(install_r(c, v1, &r), PSDB_S_OK);
    ck_assert_int_eq(r.delta, 0);
    assert_installed(v1);
    if (between)
        between();
    atomic_store(&f->range_bytes, 0);
    atomic_store(&f->blob_requests, 0);
    fake_serve(f, v2, 1);
    ck_assert_hr(install_r(c, v2, &r), PSDB_S_OK);
    assert_installed(v2);
    psdb_client_release(c);
    return r;
}

START_TEST(test_launcher__update_after_a_small_patch_fetches_only_the_changed_values)
{
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    fake f = {0};
    fake_start(&f);
    psdb_install_result r = update(&f, &v1, &v2, NULL);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    /* 5% of the values changed: the map and those values, far below the file. */
    ck_assert_msg(r.bytes_downloaded * 100 < v2.size * 12, "%llu of %zu bytes downloaded",
                  (unsigned long long)r.bytes_downloaded, v2.size);
    ck_assert_int_eq(atomic_load(&f.map_requests), 1);
    ck_assert_uint_eq(r.bytes_downloaded,
                      (uint64_t)atomic_load(&f.range_bytes) + (uint64_t)v2.map2_size);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

START_TEST(test_launcher__delta_over_a_server_that_ignores_several_ranges)
{
    /* A server that answers a multi-range request with the whole blob: the client stops that
     * transfer at once and asks one run a request; the update is still a delta. */
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    fake f = {0};
    fake_start(&f);
    atomic_store(&f.whole_for_several, 1);
    psdb_install_result r = update(&f, &v1, &v2, NULL);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_msg(r.bytes_downloaded * 100 < v2.size * 12, "%llu of %zu bytes downloaded",
                  (unsigned long long)r.bytes_downloaded, v2.size);
    ck_assert_uint_eq(r.bytes_downloaded,
                      (uint64_t)atomic_load(&f.range_bytes) + (uint64_t)v2.map2_size);
    ck_assert_int_ge(atomic_load(&f.range_requests), 2);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

static char *g_old_file; /* the installed v1, for damage() */

static void damage(void)
{
    /* Flip a byte in the middle of the installed file (inside a value). */
    size_t n = 0;
    uint8_t *d = (uint8_t *)tu_read_file(g_old_file, &n);
    ck_assert_ptr_nonnull(d);
    d[n / 2] ^= 0x5a;
    ck_assert_int_eq(tu_write_file(g_old_file, d, n), 0);
    free(d);
}

/* The sections of a version 2 map (schema/VALUEMAP.md): where each starts and how long it is. */
typedef struct map2_sections {
    size_t keys, nkeys, values, recipe, skeleton, skeleton_len;
} map2_sections;

static map2_sections map2_layout(const app_entry *a)
{
    map2_sections m;
    m.keys = 128;
    m.nkeys = (size_t)psdb__le64(a->map2 + 64);
    m.values = m.keys + m.nkeys * 32;
    m.recipe = m.values + (size_t)psdb__le64(a->map2 + 88);
    m.skeleton = m.recipe + (size_t)psdb__le64(a->map2 + 96);
    m.skeleton_len = (size_t)psdb__le64(a->map2 + 104);
    ck_assert_uint_eq(m.skeleton + m.skeleton_len, a->map2_size);
    return m;
}

/* a, serving a copy of its version 2 map changed at byte `at` (xor x) and cut to `size` bytes
 * (0: whole); its map is its own, to app_free. */
static app_entry with_bad_map2(const app_entry *a, size_t at, uint8_t x, size_t size)
{
    app_entry b = *a;
    b.data = NULL;
    b.manifest = NULL;
    b.map = NULL;
    b.map2_size = size ? size : a->map2_size;
    b.map2 = malloc(a->map2_size);
    ck_assert_ptr_nonnull(b.map2);
    memcpy(b.map2, a->map2, a->map2_size);
    ck_assert_uint_lt(at, a->map2_size);
    b.map2[at] ^= x;
    return b;
}

/* a, serving its version 1 map where version 2 is asked for (a server that mixes them up). */
static app_entry with_v1_as_v2(const app_entry *a)
{
    app_entry b = *a;
    b.data = NULL;
    b.manifest = NULL;
    b.map = NULL;
    b.map2 = malloc(a->map_size);
    ck_assert_ptr_nonnull(b.map2);
    memcpy(b.map2, a->map, a->map_size);
    b.map2_size = a->map_size;
    return b;
}

START_TEST(test_launcher__delta_falls_back_to_full_download_whenever_it_cannot_help)
{
    app_entry v1, v2, all2;
    app_make_version(&v1, "Delta", 120, 1, NULL);
    app_make_version(&v2, "Delta", 120, 2, every_20th);
    app_make_version(&all2, "Delta", 120, 3, all_values);
    map2_sections ms = map2_layout(&v2);
    /* Maps that a delta must not trust: each is refused, or its rebuild does not verify. */
    app_entry unknown_version = with_bad_map2(&v2, 8, 0x01, 0); /* version 3 */
    app_entry v1_format = with_v1_as_v2(&v2);
    app_entry bad_skeleton = with_bad_map2(&v2, ms.skeleton + ms.skeleton_len / 2, 0x5a, 0);
    app_entry bad_key = with_bad_map2(&v2, ms.keys + (ms.nkeys / 2) * 32 + 7, 0x01, 0);
    app_entry bad_recipe = with_bad_map2(&v2, ms.recipe + 3, 0xff, 0);
    app_entry cut = with_bad_map2(&v2, 0, 0, v2.map2_size - 1);
    app_entry bad_reserved = with_bad_map2(&v2, 120, 0x01, 0);
    struct {
        const char *what, *why;
        int no_maps;
        const app_entry *map_of;
        app_entry *next;
        int damage_old;
    } cases[] = {
        {"no value map on the server", "no value map", 1, NULL, &v2, 0},
        {"a value map of another PSDB", "does not describe", 0, &v1, &v2, 0},
        {"everything changed", "not be smaller", 0, NULL, &all2, 0},
        {"the installed file is damaged", "does not match", 0, NULL, &v2, 1},
        {"a map of an unknown version", "version 3, this launcher reads version 2", 0,
         &unknown_version, &v2, 0},
        {"a version 1 map at the version 2 URL", "version 1, this launcher reads version 2", 0,
         &v1_format, &v2, 0},
        {"a damaged skeleton", "skeleton", 0, &bad_skeleton, &v2, 0},
        {"a key that does not restore the file", "does not match", 0, &bad_key, &v2, 0},
        {"a damaged recipe", "malformed", 0, &bad_recipe, &v2, 0},
        {"a map cut short", "malformed", 0, &cut, &v2, 0},
        {"a reserved field set", "does not describe", 0, &bad_reserved, &v2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake f = {0};
        fake_start(&f);
        atomic_store(&f.no_maps, cases[i].no_maps);
        pthread_mutex_lock(&f.lock);
        f.map_of = cases[i].map_of;
        pthread_mutex_unlock(&f.lock);
        char rel[160];
        snprintf(rel, sizeof(rel), "psdbs/%s.psdb", v1.hex);
        g_old_file = tu_path(g_reg, rel);
        psdb_install_result r = update(&f, &v1, cases[i].next, cases[i].damage_old ? damage : NULL);
        ck_assert_msg(r.delta == 0, "%s: a delta was used", cases[i].what);
        ck_assert_msg(strstr(r.delta_skipped, cases[i].why) != NULL, "%s: '%s'", cases[i].what,
                      r.delta_skipped);
        ck_assert_msg(r.bytes_downloaded >= cases[i].next->size, "%s: %llu bytes", cases[i].what,
                      (unsigned long long)r.bytes_downloaded);
        /* Nothing of the refused delta is kept for a later attempt to trust again. */
        ck_assert_msg(file_size_of(cases[i].next, ".valuemap") == -1, "%s: the map was kept",
                      cases[i].what);
        ck_assert_msg(file_size_of(cases[i].next, ".delta") == -1, "%s: the output was kept",
                      cases[i].what);
        free(g_old_file);
        MHD_stop_daemon(f.d);
        tu_rmtree(g_reg);
    }
    app_free(&v1);
    app_free(&v2);
    app_free(&all2);
    app_free(&unknown_version);
    app_free(&v1_format);
    app_free(&bad_skeleton);
    app_free(&bad_key);
    app_free(&bad_recipe);
    app_free(&cut);
    app_free(&bad_reserved);
}
END_TEST

/* A server that refuses the value map says why with its status, read as every answer of psdbd
 * is (common/status_map.h: 401 and 403 a refusal, 5xx a server in trouble, 404 no map): the update
 * goes in full and delta_skipped names that status. The map is not asked for again: a delta that
 * cannot start costs one request. */
START_TEST(test_launcher__delta_names_the_status_the_map_was_refused_with)
{
    static const struct {
        int status;
        const char *why;
    } cases[] = {
        {403, "PSDB_E_ACCESS"},
        {401, "PSDB_E_ACCESS"},
        {503, "PSDB_E_NETWORK"},
        {404, "PSDB_E_NOT_FOUND"},
    };
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 120, 1, NULL);
    app_make_version(&v2, "Delta", 120, 2, every_20th);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake f = {0};
        fake_start(&f);
        atomic_store(&f.map_status, cases[i].status);
        psdb_install_result r = update(&f, &v1, &v2, NULL);
        ck_assert_msg(r.delta == 0, "HTTP %d: a delta was used", cases[i].status);
        ck_assert_msg(strstr(r.delta_skipped, "no value map from the server") &&
                          strstr(r.delta_skipped, cases[i].why),
                      "HTTP %d: '%s' does not name %s", cases[i].status, r.delta_skipped,
                      cases[i].why);
        ck_assert_int_eq(atomic_load(&f.map_requests), 1);
        MHD_stop_daemon(f.d);
        tu_rmtree(g_reg);
    }
    app_free(&v1);
    app_free(&v2);
}
END_TEST

/* Values of an application with a different name: "Other" at version `serial` holds exactly the
 * values of Delta at that version with the same patch (their bytes depend on the index and the
 * patch only), in a file of its own (its identity differs). */
START_TEST(test_launcher__update_takes_the_values_other_applications_of_the_registry_hold)
{
    app_entry v1, v2, other;
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    app_make_version(&other, "Other", 200, 7, every_20th);
    fake f = {0};
    fake_start(&f);
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f.url);
    psdb_install_result r;
    fake_serve(&f, &v1, 1);
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    fake_serve(&f, &other, 1);
    ck_assert_hr(install_r(c, &other, &r), PSDB_S_OK);
    atomic_store(&f.range_bytes, 0);
    fake_serve(&f, &v2, 1);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    assert_installed(&v2);
    assert_installed(&other);
    /* The changed values came from Other's file, the rest from v1: only the map was fetched. */
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 2);
    ck_assert_int_eq(atomic_load(&f.range_bytes), 0);
    ck_assert_uint_eq(r.bytes_downloaded, (uint64_t)v2.map2_size);

    /* The application's own file gone: the other application's alone still makes a delta. */
    char rel[160];
    snprintf(rel, sizeof(rel), "psdbs/%s.psdb", v2.hex);
    char *own = tu_path(g_reg, rel);
    app_entry v3;
    app_make_version(&v3, "Delta", 200, 3, every_20th);
    ck_assert_int_eq(unlink(own), 0);
    fake_serve(&f, &v3, 1);
    ck_assert_hr(install_r(c, &v3, &r), PSDB_S_OK);
    assert_installed(&v3);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 1);
    ck_assert_int_eq(atomic_load(&f.range_bytes), 0);

    /* The same file registered for another family (by another installer) is never a source:
     * a value is looked for only among PSDBs of the family being updated. */
    tu_rmtree(g_reg);
    fake_serve(&f, &v1, 1);
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    snprintf(rel, sizeof(rel), "psdbs/%s.psdb", other.hex);
    char *foreign = tu_path(g_reg, rel);
    ck_assert_int_eq(tu_write_file(foreign, other.data, other.size), 0);
    psdb_installer_desc idesc = {.name = "another-launcher", .root_dir = g_reg};
    psdb_installer *inst = NULL;
    psdb_application *app = NULL;
    psdb_app_desc od = {.name = other.name, .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_component_psdb cp = {.adapter_family = "another-family", .psdb_path = foreign};
    ck_assert_hr(psdb_installer_open(&idesc, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_register_application(inst, other.exe, &od, &app), PSDB_S_OK);
    ck_assert_hr(
        psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, NULL, 1, &cp, NULL),
        PSDB_S_OK);
    psdb_application_release(app);
    psdb_installer_release(inst);
    atomic_store(&f.range_bytes, 0);
    fake_serve(&f, &v2, 1);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    assert_installed(&v2);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 1);
    ck_assert_int_gt(atomic_load(&f.range_bytes), 0);
    free(foreign);
    free(own);
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
    app_free(&v3);
    app_free(&other);
}
END_TEST

/* One phase of the source-choice test: v1 of Delta, the holder of v2's changed values, then 16
 * other games of the family (holding none of them) installed; the holder's file made the newest
 * when asked; then the update to v2. Returns its result and the range bytes it fetched. */
static psdb_install_result update_among_many(fake *f, app_entry *v1, app_entry *v2,
                                             app_entry *holder, app_entry *fillers,
                                             int holder_newest, long *range_bytes)
{
    psdb_install_result r;
    tu_rmtree(g_reg);
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f->url);
    fake_serve(f, v1, 1);
    ck_assert_hr(install_r(c, v1, &r), PSDB_S_OK);
    fake_serve(f, holder, 1);
    ck_assert_hr(install_r(c, holder, &r), PSDB_S_OK);
    for (int i = 0; i < 16; i++) {
        fake_serve(f, &fillers[i], 1);
        ck_assert_hr(install_r(c, &fillers[i], &r), PSDB_S_OK);
    }
    char rel[160];
    snprintf(rel, sizeof(rel), "psdbs/%s.psdb", holder->hex);
    char *hp = tu_path(g_reg, rel);
    struct timespec when[2];
    clock_gettime(CLOCK_REALTIME, &when[0]);
    when[0].tv_sec += holder_newest ? 3600 : -3600;
    when[1] = when[0];
    ck_assert_int_eq(utimensat(AT_FDCWD, hp, when, 0), 0);
    free(hp);
    atomic_store(&f->range_bytes, 0);
    fake_serve(f, v2, 1);
    ck_assert_hr(install_r(c, v2, &r), PSDB_S_OK);
    assert_installed(v2);
    *range_bytes = atomic_load(&f->range_bytes);
    psdb_client_release(c);
    return r;
}

START_TEST(test_launcher__update_sources_are_the_own_file_then_the_same_name_then_the_newest)
{
    app_entry v1, v2, other, same_name, fillers[16];
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    app_make_version(&other, "Other", 200, 7, every_20th); /* holds v2's changed values */
    /* Another executable of the same game (one more value, so another file). */
    app_make_version(&same_name, "Delta", 201, 8, every_20th);
    snprintf(same_name.exe, sizeof(same_name.exe), "/games/DeltaDemo/demo.exe");
    for (int i = 0; i < 16; i++) {
        char name[32];
        snprintf(name, sizeof(name), "Filler%02d", i);
        app_make(&fillers[i], name, 256u << 10, 100u + (unsigned)i);
    }
    fake f = {0};
    fake_start(&f);
    long ranges = 0;
    /* Among 16 newer games, another game's file is the 17th candidate: not a source. */
    psdb_install_result r = update_among_many(&f, &v1, &v2, &other, fillers, 0, &ranges);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 1);
    ck_assert_int_gt(ranges, 0);
    /* The same file, the most recently written of the family: a source, nothing fetched. */
    r = update_among_many(&f, &v1, &v2, &other, fillers, 1, &ranges);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 2);
    ck_assert_int_eq(ranges, 0);
    /* An application of the same name comes before every other game, however old. */
    r = update_among_many(&f, &v1, &v2, &same_name, fillers, 0, &ranges);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_uint_eq(r.delta_sources, 2);
    ck_assert_int_eq(ranges, 0);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
    app_free(&other);
    app_free(&same_name);
    for (int i = 0; i < 16; i++)
        app_free(&fillers[i]);
}
END_TEST

START_TEST(test_launcher__cancelled_delta_keeps_its_output_and_the_next_install_goes_on)
{
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    fake f = {0};
    fake_start(&f);
    psdb_install_result r;

    /* What an update fetches when nothing stops it. */
    psdb_install_result whole = update(&f, &v1, &v2, NULL);
    ck_assert_msg(whole.delta == 1, "no delta: %s", whole.delta_skipped);
    ck_assert_uint_eq(whole.delta_resumed, 0);
    long long whole_ranges = atomic_load(&f.range_bytes);
    ck_assert_int_gt(whole_ranges, 0);
    tu_rmtree(g_reg);

    /* The same update, slowed down and cancelled halfway through the new file. */
    psdb_client_desc plain = {0};
    psdb_client *c = client_with(&plain, f.url);
    fake_serve(&f, &v1, 1);
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    psdb_client_release(c);
    cancel_ctx k = {.after_bytes = v2.size / 2};
    psdb_client_desc slow = {.progress_cancel = cancel_cb,
                             .progress_ctx = &k,
                             .max_recv_bytes_per_second = (uint64_t)whole_ranges * 2};
    c = client_with(&slow, f.url);
    fake_serve(&f, &v2, 1);
    atomic_store(&f.range_bytes, 0);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_E_CANCELLED);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "delta update cancelled"));
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "kept for resuming"));
    psdb_client_release(c);
    assert_installed(&v1); /* the registry still names v1 */
    long long kept = file_size_of(&v2, ".delta");
    ck_assert_msg(kept >= (long long)v2.size / 2 && kept < (long long)v2.size, "kept %lld of %zu",
                  kept, v2.size);
    ck_assert_int_eq(file_size_of(&v2, ".valuemap"), (long long)v2.map2_size);
    long long first_ranges = atomic_load(&f.range_bytes);
    ck_assert_int_gt(first_ranges, 0);

    /* A sweep in between keeps what the interrupted update left. */
    psdb_installer_desc idesc = {.name = "sweeper", .root_dir = g_reg};
    psdb_installer *inst = NULL;
    ck_assert_hr(psdb_installer_open(&idesc, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_sweep_store(inst, 0), PSDB_S_OK);
    psdb_installer_release(inst);
    ck_assert_int_eq(file_size_of(&v2, ".delta"), kept);

    /* The next install takes both up: no map, only the ranges past the kept output. */
    atomic_store(&f.range_bytes, 0);
    atomic_store(&f.map_requests, 0);
    c = client_with(&plain, f.url);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    psdb_client_release(c);
    assert_installed(&v2);
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    ck_assert_int_eq(atomic_load(&f.map_requests), 0);
    ck_assert_msg(r.delta_resumed > 0 && r.delta_resumed <= (uint64_t)kept, "resumed %llu of %lld",
                  (unsigned long long)r.delta_resumed, kept);
    long long second_ranges = atomic_load(&f.range_bytes);
    ck_assert_msg(second_ranges < whole_ranges, "%lld bytes fetched again (whole: %lld)",
                  second_ranges, whole_ranges);
    ck_assert_uint_eq(r.bytes_downloaded, (uint64_t)second_ranges);
    ck_assert_int_eq(file_size_of(&v2, ".delta"), -1);
    ck_assert_int_eq(file_size_of(&v2, ".valuemap"), -1);

    /* Kept output that is not the file's (damaged meanwhile) fails the check, and the install
     * still ends with the right file, downloaded in full. */
    tu_rmtree(g_reg);
    c = client_with(&plain, f.url);
    fake_serve(&f, &v1, 1);
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    char rel[200];
    snprintf(rel, sizeof(rel), "psdbs/%s.psdb.delta", v2.hex);
    char *junk = tu_path(g_reg, rel);
    uint8_t *bad = malloc(v2.size / 2);
    ck_assert_ptr_nonnull(bad);
    memcpy(bad, v2.data, v2.size / 2);
    bad[v2.size / 4] ^= 0x40;
    ck_assert_int_eq(tu_write_file(junk, bad, v2.size / 2), 0);
    fake_serve(&f, &v2, 1);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    assert_installed(&v2);
    ck_assert_int_eq(r.delta, 0);
    ck_assert_ptr_nonnull(strstr(r.delta_skipped, "does not match"));
    ck_assert_int_eq(file_size_of(&v2, ".delta"), -1);
    psdb_client_release(c);
    free(bad);
    free(junk);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

/* What someone planted at a delta update's names (<dest>.valuemap, <dest>.delta) or in place of
 * the installed PSDB it reads from: never followed, waited on or written through. The update
 * downloads in full instead, says why, installs the published file, and leaves the planted thing
 * and what a link points at as they were. */
typedef enum plant { PLANT_LINK, PLANT_DANGLING, PLANT_FIFO, PLANT_FOREIGN } plant;

START_TEST(test_launcher__planted_delta_files_are_never_followed)
{
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 120, 1, NULL);
    app_make_version(&v2, "Delta", 120, 2, every_20th);
    fake f = {0};
    fake_start(&f);
    char *outside = tu_path(g_dir, "outside"), *dangling = tu_path(g_dir, "dangling");
    static const char *const suffixes[] = {".valuemap", ".delta"};
    static const char *const words[] = {"symbolic link", "symbolic link", "FIFO",
                                        "owned by uid 54321"};
    for (int what = PLANT_LINK; what <= PLANT_FOREIGN; what++) {
        if (what == PLANT_FOREIGN && geteuid() != 0) {
            fprintf(stderr, "launcher_test: not root, files of another owner not exercised\n");
            continue;
        }
        for (size_t k = 0; k < 2; k++) {
            tu_rmtree(g_reg);
            psdb_client_desc d = {0};
            psdb_client *c = client_with(&d, f.url);
            psdb_install_result r;
            fake_serve(&f, &v1, 1);
            ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
            /* The planted thing, with a map and an output of the right bytes behind a link. */
            const uint8_t *bytes = k == 0 ? v2.map2 : v2.data;
            size_t len = k == 0 ? v2.map2_size : v2.size;
            ck_assert_int_eq(tu_write_file(outside, bytes, len), 0);
            unlink(dangling);
            char rel[200];
            snprintf(rel, sizeof(rel), "psdbs/%s.psdb%s", v2.hex, suffixes[k]);
            char *at = tu_path(g_reg, rel);
            if (what == PLANT_LINK)
                ck_assert_int_eq(symlink(outside, at), 0);
            else if (what == PLANT_DANGLING)
                ck_assert_int_eq(symlink(dangling, at), 0);
            else if (what == PLANT_FIFO)
                ck_assert_int_eq(mkfifo(at, 0644), 0);
            else {
                ck_assert_int_eq(tu_write_file(at, bytes, len / 2), 0);
                ck_assert_int_eq(chown(at, 54321, 54321), 0);
            }
            fake_serve(&f, &v2, 1);
            ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
            assert_installed(&v2);
            ck_assert_msg(r.delta == 0, "%s, %d: a delta through it", suffixes[k], what);
            ck_assert_msg(strstr(r.delta_skipped, at) && strstr(r.delta_skipped, words[what]),
                          "%s, %d: delta_skipped '%s'", suffixes[k], what, r.delta_skipped);
            size_t n = 0;
            char *kept = tu_read_file(outside, &n);
            ck_assert_msg(kept && n == len && memcmp(kept, bytes, n) == 0,
                          "%s: the link's target changed", suffixes[k]);
            free(kept);
            ck_assert_msg(access(dangling, F_OK) != 0, "%s: the link's target was created",
                          suffixes[k]);
            struct stat st;
            ck_assert_int_eq(lstat(at, &st), 0);
            ck_assert(what == PLANT_FIFO      ? S_ISFIFO(st.st_mode)
                      : what == PLANT_FOREIGN ? S_ISREG(st.st_mode) && st.st_uid == 54321
                                              : S_ISLNK(st.st_mode));
            free(at);
            psdb_client_release(c);
        }
    }
    /* The installed PSDB itself replaced by a link to a copy elsewhere: not read as a source. */
    tu_rmtree(g_reg);
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f.url);
    psdb_install_result r;
    fake_serve(&f, &v1, 1);
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    char *own = registered_path(v1.exe);
    ck_assert_int_eq(rename(own, outside), 0);
    ck_assert_int_eq(symlink(outside, own), 0);
    fake_serve(&f, &v2, 1);
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    assert_installed(&v2);
    ck_assert_msg(r.delta == 0 && r.delta_sources == 0, "a linked file was a source");
    size_t n = 0;
    char *kept = tu_read_file(outside, &n);
    ck_assert(kept && n == v1.size && memcmp(kept, v1.data, n) == 0);
    free(kept);
    free(own);
    psdb_client_release(c);
    free(outside);
    free(dangling);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

START_TEST(test_launcher__bandwidth_limit_holds_for_small_files_and_delta_updates)
{
    /* libcurl's own limit averages over seconds and lets what the socket buffers hold through:
     * a file of a few hundred KiB arrived at once whatever the limit. */
    double took = install_seconds_at("Small", 384u << 10, 5, 256u << 10);
    ck_assert_msg(took >= 1.3, "384 KiB at 256 KiB/s took only %.2f s", took);

    /* A delta update: its map and ranges (a few hundred KiB) at the limit too. */
    fake f = {0};
    fake_start(&f);
    psdb_client *c = NULL;
    double t0 = 0;
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 200, 1, NULL);
    app_make_version(&v2, "Delta", 200, 2, every_20th);
    psdb_client_desc plain = {0};
    c = client_with(&plain, f.url);
    fake_serve(&f, &v1, 1);
    psdb_install_result r;
    ck_assert_hr(install_r(c, &v1, &r), PSDB_S_OK);
    psdb_client_release(c);
    uint64_t rate = 512u << 10;
    psdb_client_desc limited = {.max_recv_bytes_per_second = rate};
    c = client_with(&limited, f.url);
    fake_serve(&f, &v2, 1);
    t0 = now_s();
    ck_assert_hr(install_r(c, &v2, &r), PSDB_S_OK);
    took = now_s() - t0;
    ck_assert_msg(r.delta == 1, "no delta: %s", r.delta_skipped);
    double least = (double)r.bytes_downloaded / (double)rate - 0.125;
    ck_assert_msg(least > 0.5 && took >= least, "%llu bytes at %llu B/s took only %.2f s",
                  (unsigned long long)r.bytes_downloaded, (unsigned long long)rate, took);
    assert_installed(&v2);
    psdb_client_release(c);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

START_TEST(test_launcher__install_tool_reports_the_delta_in_json)
{
    app_entry v1, v2;
    app_make_version(&v1, "Delta", 100, 1, NULL);
    app_make_version(&v2, "Delta", 100, 2, every_20th);
    fake f = {.apps = &v1, .num_apps = 1};
    fake_start(&f);
    char *out = tu_path(g_dir, "tool.out");
    const char *args[] = {"install",      "--server", f.url,           "--exe-path", v1.exe,
                          "--app",        v1.name,    "--app-version", "1.0.0.0",    "--target",
                          FAMILY ":1-10", "--trust",  g_pub,           "--registry", g_reg,
                          "--json",       NULL};
    ck_assert_int_eq(tool_wait(tool_start(args, out)), 0);
    fake_serve(&f, &v2, 1);
    ck_assert_int_eq(tool_wait(tool_start(args, out)), 0);
    char *text = tu_read_file(out, NULL);
    json_error_t e;
    json_t *o = json_loads(text, 0, &e);
    ck_assert_msg(o != NULL, "not JSON: %s", text);
    json_t *t = json_array_get(json_object_get(o, "targets"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(t, "download")), "delta");
    json_int_t got = json_integer_value(json_object_get(t, "bytes_downloaded"));
    json_int_t saved = json_integer_value(json_object_get(t, "bytes_saved"));
    ck_assert_int_gt(got, 0);
    ck_assert_int_eq(got + saved, (json_int_t)v2.size);
    json_decref(o);
    free(text);
    free(out);
    assert_installed(&v2);
    MHD_stop_daemon(f.d);
    app_free(&v1);
    app_free(&v2);
}
END_TEST

/* ---- many installs at once ----------------------------------------------------------------- */

typedef struct worker {
    const app_entry *a;
    const psdb_client *first; /* whose connections to share */
    pthread_barrier_t *go;
    int rounds; /* installs of the same application, one after the other; 0 means 1 */
    psdb_hr hr;
    char error[512];
} worker;

static void *install_worker(void *arg)
{
    worker *w = arg;
    const char *keys[1] = {g_pub};
    psdb_client_desc d = {.server_url = NULL,
                          .trusted_keys = keys,
                          .num_trusted_keys = 1,
                          .retry_base_ms = 10,
                          .share_connections_with = w->first};
    psdb_client *c = NULL;
    pthread_barrier_wait(w->go);
    /* The URL of the first client's server: every worker talks to the same psdbd. */
    d.server_url = getenv("LAUNCHER_TEST_URL");
    w->hr = psdb_client_create(&d, &c);
    for (int r = 0; PSDB_SUCCEEDED(w->hr) && r < (w->rounds ? w->rounds : 1); r++)
        w->hr = install_app(c, w->a, NULL);
    snprintf(w->error, sizeof(w->error), "%s", psdb_client_last_error(c));
    psdb_client_release(c);
    return NULL;
}

/* Runs n install_workers at once (released together), one per app, each `rounds` installs. */
static void run_workers(app_entry *apps, worker *w, int n, const psdb_client *first, int rounds)
{
    pthread_t th[MAX_APPS];
    pthread_barrier_t go;
    ck_assert_int_le(n, MAX_APPS);
    ck_assert_int_eq(pthread_barrier_init(&go, NULL, (unsigned)n), 0);
    for (int i = 0; i < n; i++) {
        w[i] = (worker){.a = &apps[i], .first = first, .go = &go, .rounds = rounds};
        ck_assert_int_eq(pthread_create(&th[i], NULL, install_worker, &w[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
}

/* Installs of one process that end while others begin: each install takes the process's shared
 * installer and the last one out closes it, so a newcomer must not open it again (and meet its own
 * process's lock, PSDB_E_BUSY) before the closing one has let go. Most rounds reinstall what is
 * installed, so acquire and release follow each other closely. */
START_TEST(test_launcher__installs_ending_while_others_begin_never_find_the_installer_busy)
{
    enum { THREADS = 4, ROUNDS = 40 };
    app_entry apps[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "Churn%d", i);
        app_make(&apps[i], name, 64u << 10, 300 + (unsigned)i);
    }
    fake f = {.apps = apps, .num_apps = THREADS};
    fake_start(&f);
    setenv("LAUNCHER_TEST_URL", f.url, 1);
    psdb_client_desc d = {0};
    psdb_client *first = client_with(&d, f.url);
    run_workers(apps, w, THREADS, first, ROUNDS);
    for (int i = 0; i < THREADS; i++)
        ck_assert_msg(PSDB_SUCCEEDED(w[i].hr), "%s: %s: %s", apps[i].name, psdb_hr_str(w[i].hr),
                      w[i].error);
    for (int i = 0; i < THREADS; i++)
        assert_installed(&apps[i]);
    psdb_client_release(first);
    MHD_stop_daemon(f.d);
    for (int i = 0; i < THREADS; i++)
        app_free(&apps[i]);
}
END_TEST

START_TEST(test_launcher__sixteen_threads_install_sixteen_apps_into_one_registry)
{
    app_entry apps[MAX_APPS];
    worker w[MAX_APPS];
    for (int i = 0; i < MAX_APPS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "Game%02d", i);
        app_make(&apps[i], name, 512u << 10, 100 + (unsigned)i);
    }
    fake f = {.apps = apps, .num_apps = MAX_APPS};
    fake_start(&f);
    setenv("LAUNCHER_TEST_URL", f.url, 1);
    psdb_client_desc d = {0};
    psdb_client *first = client_with(&d, f.url);
    /* One client per thread, all sharing the first one's connections, one installer name. */
    run_workers(apps, w, MAX_APPS, first, 1);
    for (int i = 0; i < MAX_APPS; i++)
        ck_assert_msg(w[i].hr == PSDB_S_OK, "%s: %s: %s", apps[i].name, psdb_hr_str(w[i].hr),
                      w[i].error);
    for (int i = 0; i < MAX_APPS; i++)
        assert_installed(&apps[i]);
    ck_assert_int_eq(atomic_load(&f.blob_requests), MAX_APPS);
    /* The threads reused connections: fewer than one per request. */
    ck_assert_int_le(atomic_load(&f.connections), 2 * MAX_APPS);
    /* And the installer name is free again: a plain open works. */
    psdb_installer *inst = NULL;
    psdb_installer_desc id = {.name = "psdb", .root_dir = g_reg};
    ck_assert_hr(psdb_installer_open(&id, &inst), PSDB_S_OK);
    psdb_installer_release(inst);
    psdb_client_release(first);
    MHD_stop_daemon(f.d);
    for (int i = 0; i < MAX_APPS; i++)
        app_free(&apps[i]);
}
END_TEST

START_TEST(test_launcher__clients_reuse_connections_across_transfers_and_share_them)
{
    app_entry apps[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof(name), "Reuse%d", i);
        app_make(&apps[i], name, 64u << 10, 200 + (unsigned)i);
    }
    fake f = {.apps = apps, .num_apps = 4};
    fake_start(&f);
    psdb_client_desc d = {0};
    psdb_client *c = client_with(&d, f.url);
    /* Two installs, four transfers (resolve, blob, resolve, blob): one connection. */
    ck_assert_hr(install_app(c, &apps[0], NULL), PSDB_S_OK);
    ck_assert_hr(install_app(c, &apps[1], NULL), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&f.connections), 1);
    /* A client sharing the first one's connections uses the same connection. */
    psdb_client_desc d2 = {.share_connections_with = c};
    psdb_client *c2 = client_with(&d2, f.url);
    ck_assert_hr(install_app(c2, &apps[2], NULL), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&f.connections), 1);
    /* Released in either order: the share outlives the client that made it. */
    psdb_client_release(c);
    ck_assert_hr(install_app(c2, &apps[3], NULL), PSDB_S_OK);
    ck_assert_int_eq(atomic_load(&f.connections), 1);
    psdb_client_release(c2);
    for (int i = 0; i < 4; i++)
        assert_installed(&apps[i]);
    MHD_stop_daemon(f.d);
    for (int i = 0; i < 4; i++)
        app_free(&apps[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launcher");
    TCase *tc = tcase_create("launcher");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc,
                   test_launcher__progress_cancel_stops_download_keeps_part_next_install_resumes);
    tcase_add_test(tc, test_launcher__progress_cancel_stops_a_stalled_resolve_and_a_backoff);
    tcase_add_test(tc, test_launcher__bandwidth_limit_caps_bytes_per_second);
    tcase_add_test(tc, test_launcher__bandwidth_limit_holds_for_small_files_and_delta_updates);
    tcase_add_test(tc, test_launcher__proxy_and_no_proxy_from_the_environment_are_honoured);
    tcase_add_test(tc, test_launcher__install_tool_stops_on_sigint_and_sigterm_then_resumes);
    tcase_add_test(tc, test_launcher__install_tool_refuses_a_bad_limit_rate);
    tcase_add_test(tc, test_launcher__update_after_a_small_patch_fetches_only_the_changed_values);
    tcase_add_test(tc, test_launcher__delta_falls_back_to_full_download_whenever_it_cannot_help);
    tcase_add_test(tc, test_launcher__delta_names_the_status_the_map_was_refused_with);
    tcase_add_test(tc, test_launcher__delta_over_a_server_that_ignores_several_ranges);
    tcase_add_test(tc, test_launcher__install_tool_reports_the_delta_in_json);
    tcase_add_test(tc,
                   test_launcher__update_takes_the_values_other_applications_of_the_registry_hold);
    tcase_add_test(tc,
                   test_launcher__cancelled_delta_keeps_its_output_and_the_next_install_goes_on);
    tcase_add_test(tc, test_launcher__planted_delta_files_are_never_followed);
    tcase_add_test(
        tc, test_launcher__update_sources_are_the_own_file_then_the_same_name_then_the_newest);
    tcase_add_test(tc, test_launcher__sixteen_threads_install_sixteen_apps_into_one_registry);
    tcase_add_test(tc,
                   test_launcher__installs_ending_while_others_begin_never_find_the_installer_busy);
    tcase_add_test(tc, test_launcher__clients_reuse_connections_across_transfers_and_share_them);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
