/* store_test.c - the shared PSDB store under concurrent psdb install processes (launchers of
 * different installer names on one registry root), SIGKILLed installs, damaged registered files
 * and damaged registry databases. An in-process server serves many applications at once. */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/client.h"
#include "common/buf.h"
#include "common/hash.h"

#define FAMILY "contoso-gfx9"
#define NAPPS 16
#define MAX_BLOBS 256

static char *g_dir, *g_reg, *g_key, *g_pub;

/* ---- published PSDBs --------------------------------------------------------------------------
 */

typedef struct blob {
    uint8_t *data;
    size_t size;
    uint8_t sha[32];
    char hex[65];
} blob;

typedef struct app {
    char name[32];
    char exe[128];
    char *manifest; /* what resolve answers now */
    const blob *current;
} app;

/* What the server publishes; changed only while no install runs. */
static app g_apps[NAPPS];
static blob g_blobs[MAX_BLOBS];
static int g_nblobs;
static atomic_int g_blob_requests;
static int g_throttle_us; /* per 16 KiB chunk of a blob body */

static const blob *make_psdb(const char *app_name, size_t payload, unsigned seed)
{
    ck_assert_int_lt(g_nblobs, MAX_BLOBS);
    char *path = tu_path(g_dir, "build.psdb");
    char exe_filename[64];
    snprintf(exe_filename, sizeof(exe_filename), "%s.exe", app_name);
    psdb_app_identity id = {.desc = {.exe_filename = exe_filename,
                                     .name = app_name,
                                     .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = FAMILY, .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    uint8_t buf[4096];
    unsigned x = seed * 2654435761u + 7;
    for (size_t k = 0; k * sizeof(buf) < payload; k++) {
        for (size_t i = 0; i < sizeof(buf); i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (uint8_t)(x >> 16);
        }
        char key[16];
        snprintf(key, sizeof(key), "v%05zu", k);
        ck_assert_hr(
            psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, sizeof(buf)),
            PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    blob *b = &g_blobs[g_nblobs++];
    b->data = (uint8_t *)tu_read_file(path, &b->size);
    ck_assert_ptr_nonnull(b->data);
    psdb__sha256(b->data, b->size, b->sha);
    psdb__hex(b->sha, 32, b->hex);
    unlink(path);
    free(path);
    return b;
}

static char *make_manifest(const char *app_name, const blob *b, uint64_t serial)
{
    psdb_key *key = NULL;
    char kid[PSDB_KEY_ID_SIZE], sig[PSDB_SIGNATURE_B64_SIZE], exe_filename[64], url[128];
    snprintf(exe_filename, sizeof(exe_filename), "%s.exe", app_name);
    ck_assert_hr(psdb_key_load(g_key, &key), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(key, kid), PSDB_S_OK);
    psdb_statement st = {.size = b->size,
                         .identity = {.desc = {.exe_filename = exe_filename,
                                               .name = app_name,
                                               .version = PSDB_VERSION(1, 0, 0, 0)}},
                         .target = {.family = FAMILY, .abi_version = 3},
                         .serial = serial};
    memcpy(st.sha256, b->sha, 32);
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    psdb_key_release(key);
    snprintf(url, sizeof(url), "/v1/blobs/%s", b->hex);
    json_t *o = json_pack(
        "{s:I, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:n, s:s}, s:{s:s, s:I, s:s, "
        "s:s}, s:I, s:s, s:s, s:s}",
        "id", (json_int_t)serial, "sha256", b->hex, "size", (json_int_t)b->size, "url", url, "app",
        "name", app_name, "exe_filename", exe_filename, "version", "1.0.0.0", "engine_name",
        "engine_version", "0.0.0.0", "target", "family", FAMILY, "abi_version", (json_int_t)3,
        "compiler_version", "0.0.0.0", "profile_version", "0.0.0.0", "serial", (json_int_t)serial,
        "created_at", "2026-01-01T00:00:00Z", "key_id", kid, "signature", sig);
    ck_assert_ptr_nonnull(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Publishes a new PSDB (serial) for each of the first n applications. */
static void publish_round(int n, uint64_t serial, size_t payload)
{
    for (int k = 0; k < n; k++) {
        app *a = &g_apps[k];
        snprintf(a->name, sizeof(a->name), "App%02d", k);
        snprintf(a->exe, sizeof(a->exe), "/games/app%02d/App%02d.exe", k, k);
        a->current = make_psdb(a->name, payload, (unsigned)(serial * 100 + (uint64_t)k));
        free(a->manifest);
        a->manifest = make_manifest(a->name, a->current, serial);
    }
}

/* ---- the server --------------------------------------------------------------------------------
 */

typedef struct body_cursor {
    const blob *b;
    uint64_t start;
} body_cursor;

static ssize_t body_reader(void *cls, uint64_t off, char *buf, size_t max)
{
    body_cursor *c = cls;
    uint64_t pos = c->start + off;
    if (pos >= c->b->size)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = c->b->size - pos < max ? (size_t)(c->b->size - pos) : max;
    if (n > 16384)
        n = 16384;
    if (g_throttle_us)
        usleep((useconds_t)g_throttle_us);
    memcpy(buf, c->b->data + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_size, void **state)
{
    (void)cls;
    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)state;
    struct MHD_Response *r = NULL;
    unsigned status = 404;
    if (strcmp(method, "GET") == 0 && strcmp(url, "/v1/resolve") == 0) {
        const char *name = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "app");
        for (int k = 0; name && k < NAPPS; k++)
            if (g_apps[k].manifest && strcmp(g_apps[k].name, name) == 0) {
                status = 200;
                r = MHD_create_response_from_buffer(strlen(g_apps[k].manifest), g_apps[k].manifest,
                                                    MHD_RESPMEM_MUST_COPY);
            }
    } else if (strcmp(method, "GET") == 0 && strncmp(url, "/v1/blobs/", 10) == 0) {
        for (int i = 0; i < g_nblobs; i++) {
            if (strcmp(url + 10, g_blobs[i].hex) != 0)
                continue;
            atomic_fetch_add(&g_blob_requests, 1);
            body_cursor *c = calloc(1, sizeof(*c));
            c->b = &g_blobs[i];
            status = 200;
            const char *range = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Range");
            unsigned long long from = 0;
            if (range && sscanf(range, "bytes=%llu-", &from) == 1 && from < c->b->size) {
                c->start = from;
                status = 206;
            }
            r = MHD_create_response_from_callback(c->b->size - c->start, 16384, body_reader, c,
                                                  free);
            if (status == 206) {
                char cr[96];
                snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", from,
                         (unsigned long long)c->b->size - 1, (unsigned long long)c->b->size);
                MHD_add_response_header(r, "Content-Range", cr);
            }
            break;
        }
    }
    if (!r)
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static struct MHD_Daemon *g_mhd;
static char g_url[64];

static void setup(void)
{
    g_dir = tu_mkdtemp();
    g_reg = tu_path(g_dir, "registry");
    g_key = tu_path(g_dir, "pub.key");
    g_pub = tu_path(g_dir, "pub.key.pub");
    ck_assert_hr(psdb_keygen(g_key, NULL), PSDB_S_OK);
    g_mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                             NULL, NULL, handler, NULL, MHD_OPTION_END);
    ck_assert_ptr_nonnull(g_mhd);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_mhd, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(g_url, sizeof(g_url), "http://127.0.0.1:%d", info->port);
    atomic_init(&g_blob_requests, 0);
    g_throttle_us = 0;
}

static void teardown(void)
{
    MHD_stop_daemon(g_mhd);
    for (int k = 0; k < NAPPS; k++) {
        free(g_apps[k].manifest);
        g_apps[k].manifest = NULL;
    }
    for (int i = 0; i < g_nblobs; i++)
        free(g_blobs[i].data);
    g_nblobs = 0;
    tu_rmtree(g_dir);
    free(g_dir);
    free(g_reg);
    free(g_key);
    free(g_pub);
}

/* ---- psdb install processes -------------------------------------------------------------------
 */

/* Starts `psdb install` for app k as installer `launcher<tag>`, registering exe (NULL: the app's
 * own exe path); output goes to <dir>/install-<tag>.log. */
static pid_t spawn_install(int k, const char *exe, const char *tag)
{
    char installer[192], log[192];
    snprintf(installer, sizeof(installer), "launcher%s", tag);
    snprintf(log, sizeof(log), "install-%s.log", tag);
    char *log_path = tu_path(g_dir, log);
    char target[64];
    snprintf(target, sizeof(target), "%s:1-10", FAMILY);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(PSDB_TOOL, "psdb", "install", "--server", g_url, "--exe-path",
              exe ? exe : g_apps[k].exe, "--app", g_apps[k].name, "--app-version", "1.0.0.0",
              "--target", target, "--trust", g_pub, "--registry", g_reg, "--installer", installer,
              "--json", (char *)NULL);
        _exit(127);
    }
    free(log_path);
    return pid;
}

static char *install_log(const char *tag)
{
    char log[64];
    snprintf(log, sizeof(log), "install-%s.log", tag);
    char *path = tu_path(g_dir, log);
    char *text = tu_read_file(path, NULL);
    free(path);
    return text ? text : strdup("");
}

/* Waits for pid; asserts it exited 0 unless it was killed by us (killed non-zero). Returns 1 when
 * it was killed by a signal. */
static int reap(pid_t pid, const char *tag, int may_be_killed)
{
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if (may_be_killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
        return 1;
    char *text = install_log(tag);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "install %s failed (status 0x%x): %s", tag,
                  (unsigned)st, text);
    free(text);
    return 0;
}

/* Runs installs of the first n apps at once (one process and installer name each). */
static void install_all(int n, unsigned round)
{
    pid_t pids[NAPPS];
    char tags[NAPPS][16];
    for (int k = 0; k < n; k++) {
        snprintf(tags[k], sizeof(tags[k]), "r%u-%02d", round, k);
        pids[k] = spawn_install(k, NULL, tags[k]);
    }
    for (int k = 0; k < n; k++)
        reap(pids[k], tags[k], 0);
}

/* ---- invariants --------------------------------------------------------------------------------
 */

typedef struct walk {
    char *paths[4 * NAPPS];
    int n;
    int bad;
    char why[512];
    int want_current; /* every app's registration must be its current PSDB */
} walk;

static int published(const char *hex, const char *app_name)
{
    (void)app_name;
    for (int i = 0; i < g_nblobs; i++)
        if (strcmp(g_blobs[i].hex, hex) == 0)
            return 1;
    return 0;
}

static int visit(const psdb_registry_entry *e, void *ctx)
{
    walk *w = ctx;
    if (!e->psdb_path)
        return 0;
    psdb_registry_file_state state = PSDB_REGISTRY_FILE_MISSING;
    psdb_hr hr = psdb_registry_entry_check(e, &state);
    if (PSDB_FAILED(hr) || state != PSDB_REGISTRY_FILE_OK) {
        w->bad = 1;
        snprintf(w->why, sizeof(w->why), "%s: %s is %s (%s)", e->exe_path, e->psdb_path,
                 psdb_registry_file_state_str(state), psdb_hr_str(hr));
        return 1;
    }
    if (!e->installed_sha256 || !published(e->installed_sha256, e->app->name)) {
        w->bad = 1;
        snprintf(w->why, sizeof(w->why), "%s: registered digest %s was never published",
                 e->exe_path, e->installed_sha256 ? e->installed_sha256 : "(none)");
        return 1;
    }
    for (int k = 0; w->want_current && k < NAPPS; k++)
        if (strcmp(e->exe_path, g_apps[k].exe) == 0 &&
            strcmp(e->installed_sha256, g_apps[k].current->hex) != 0) {
            w->bad = 1;
            snprintf(w->why, sizeof(w->why), "%s: registered %s, current is %s", e->exe_path,
                     e->installed_sha256, g_apps[k].current->hex);
            return 1;
        }
    if (w->n < (int)(sizeof(w->paths) / sizeof(w->paths[0])))
        w->paths[w->n++] = strdup(e->psdb_path);
    return 0;
}

/* Every registration's file exists with its published digest; with strict, the store holds
 * exactly the registered files (nothing unreferenced, no partial downloads). Returns the number
 * of registrations. */
static int check_invariants(int want_current, int strict)
{
    psdb_explorer *exp = NULL;
    walk w = {.want_current = want_current};
    ck_assert_hr(psdb_explorer_open(g_reg, &exp), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_foreach(exp, visit, &w), PSDB_S_OK);
    psdb_explorer_release(exp);
    ck_assert_msg(!w.bad, "%s", w.why);
    if (strict) {
        char *store = tu_path(g_reg, "psdbs");
        DIR *d = opendir(store);
        ck_assert_ptr_nonnull(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char *full = tu_path(store, e->d_name);
            char *real = realpath(full, NULL);
            int referenced = 0;
            for (int i = 0; i < w.n && !referenced; i++)
                referenced = real && strcmp(w.paths[i], real) == 0;
            ck_assert_msg(referenced, "%s is in the store but not registered", full);
            free(real);
            free(full);
        }
        closedir(d);
        free(store);
    }
    for (int i = 0; i < w.n; i++)
        free(w.paths[i]);
    return w.n;
}

/* ---- tests --------------------------------------------------------------------------------------
 */

START_TEST(test_store__concurrent_installs_of_16_apps_keep_every_file)
{
    for (unsigned round = 1; round <= 3; round++) {
        publish_round(NAPPS, round, 96 * 1024);
        install_all(NAPPS, round);
        ck_assert_int_eq(check_invariants(1, 1), NAPPS);
    }
}
END_TEST

START_TEST(test_store__killed_installs_lose_no_registered_file)
{
    g_throttle_us = 3000; /* ~30 ms per download: kills land in every phase */
    srand((unsigned)time(NULL));
    unsigned killed_total = 0;
    for (unsigned round = 1; round <= 4; round++) {
        publish_round(NAPPS, round, 128 * 1024);
        pid_t pids[NAPPS];
        char tags[NAPPS][16];
        for (int k = 0; k < NAPPS; k++) {
            snprintf(tags[k], sizeof(tags[k]), "k%u-%02d", round, k);
            pids[k] = spawn_install(k, NULL, tags[k]);
        }
        int victim[NAPPS] = {0};
        for (int j = 0; j < 6; j++) {
            usleep((useconds_t)(rand() % 40000));
            int k = rand() % NAPPS;
            victim[k] = 1;
            kill(pids[k], SIGKILL);
        }
        for (int k = 0; k < NAPPS; k++)
            killed_total += (unsigned)reap(pids[k], tags[k], victim[k]);
        /* Whatever was killed where: every registration still has its file, intact. */
        check_invariants(0, 0);
    }
    ck_assert_uint_gt(killed_total, 0);
    /* A final plain install round brings every app to its current PSDB ... */
    g_throttle_us = 0;
    install_all(NAPPS, 99);
    check_invariants(1, 0);
    /* ... and an explicit sweep leaves only registered files. */
    psdb_installer_desc d = {.name = "sweeper", .root_dir = g_reg};
    psdb_installer *inst = NULL;
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_sweep_store(inst, PSDB_SWEEP_WAIT | PSDB_SWEEP_PARTIAL), PSDB_S_OK);
    psdb_installer_release(inst);
    ck_assert_int_eq(check_invariants(1, 1), NAPPS);
}
END_TEST

START_TEST(test_store__concurrent_installs_of_one_psdb_download_it_once)
{
    publish_round(1, 1, 256 * 1024);
    g_throttle_us = 2000; /* the downloads overlap */
    pid_t pids[8];
    char tags[8][16], exes[8][64];
    for (int i = 0; i < 8; i++) {
        snprintf(tags[i], sizeof(tags[i]), "same-%d", i);
        snprintf(exes[i], sizeof(exes[i]), "/games/copy%d/App00.exe", i);
        pids[i] = spawn_install(0, exes[i], tags[i]);
    }
    for (int i = 0; i < 8; i++)
        reap(pids[i], tags[i], 0);
    /* One process downloaded; the others waited for its .part and took the finished file. */
    ck_assert_int_eq(atomic_load(&g_blob_requests), 1);
    ck_assert_int_eq(check_invariants(0, 1), 8);
}
END_TEST

/* The registered file of app 0, as the registry has it. */
static char *registered_path(void)
{
    psdb_explorer *e = NULL;
    psdb_application *a = NULL;
    psdb_component *comp = NULL;
    char buf[4096];
    char *out = NULL;
    ck_assert_hr(psdb_explorer_open(g_reg, &e), PSDB_S_OK);
    if (PSDB_SUCCEEDED(psdb_explorer_get_application(e, g_apps[0].exe, &a)) &&
        PSDB_SUCCEEDED(psdb_application_get_component(a, PSDB_DEFAULT_COMPONENT, &comp)) &&
        PSDB_SUCCEEDED(psdb_component_get_psdb_path(comp, FAMILY, buf, sizeof(buf))))
        out = strdup(buf);
    psdb_component_release(comp);
    psdb_application_release(a);
    psdb_explorer_release(e);
    return out;
}

/* `psdb registry list --json`: the status of app 0's PSDB. */
static char *listed_status(void)
{
    char *cmd = NULL, *out = tu_path(g_dir, "list.json");
    ck_assert_int_ge(
        asprintf(&cmd, "(%s registry list --json --registry %s 2>/dev/null)", PSDB_TOOL, g_reg), 0);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    char *text = tu_read_file(out, NULL);
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    json_t *p = json_array_get(
        json_object_get(json_array_get(json_object_get(json_array_get(j, 0), "components"), 0),
                        "psdbs"),
        0);
    const char *s = json_string_value(json_object_get(p, "status"));
    ck_assert_ptr_nonnull(s);
    char *status = strdup(s);
    json_decref(j);
    free(text);
    free(cmd);
    free(out);
    return status;
}

static void install_one_expect(const char *tag, const char *want_status)
{
    reap(spawn_install(0, NULL, tag), tag, 0);
    char *text = install_log(tag);
    char want[64];
    snprintf(want, sizeof(want), "\"status\":\"%s\"", want_status);
    ck_assert_msg(strstr(text, want) != NULL, "install %s: want %s in %s", tag, want, text);
    free(text);
}

START_TEST(test_store__damaged_or_missing_registered_file_flagged_and_repaired)
{
    publish_round(1, 1, 64 * 1024);
    install_one_expect("first", "installed");
    install_one_expect("again", "unchanged");
    char *path = registered_path();
    ck_assert_ptr_nonnull(path);
    char *status = listed_status();
    ck_assert_str_eq(status, "ok");
    free(status);

    /* Damage in place: same size, same mtime (no size/mtime shortcut may hide it). */
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "\x5a", 1, (off_t)st.st_size / 2), 1);
    close(fd);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, times, 0), 0);
    status = listed_status();
    ck_assert_str_eq(status, "mismatch");
    free(status);
    char *cmd = NULL, *out = tu_path(g_dir, "list.txt");
    ck_assert_int_ge(asprintf(&cmd, "%s registry list --registry %s", PSDB_TOOL, g_reg), 0);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    char *text = tu_read_file(out, NULL);
    ck_assert_ptr_nonnull(strstr(text, "[mismatch]"));
    ck_assert_ptr_nonnull(strstr(text, "run psdb install again"));
    free(text);
    /* Same serial, same digest on record: the install still repairs the file. */
    install_one_expect("repair", "installed");
    status = listed_status();
    ck_assert_str_eq(status, "ok");
    free(status);
    size_t size = 0;
    char *data = tu_read_file(path, &size);
    ck_assert_uint_eq(size, g_apps[0].current->size);
    ck_assert_int_eq(memcmp(data, g_apps[0].current->data, size), 0);
    free(data);

    /* Gone altogether. */
    ck_assert_int_eq(unlink(path), 0);
    status = listed_status();
    ck_assert_str_eq(status, "missing");
    free(status);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    text = tu_read_file(out, NULL);
    ck_assert_ptr_nonnull(strstr(text, "[missing]"));
    free(text);
    install_one_expect("repair2", "installed");
    status = listed_status();
    ck_assert_str_eq(status, "ok");
    free(status);
    free(cmd);
    free(out);
    free(path);
}
END_TEST

/* ---- what someone planted in the store ---------------------------------------------------------
 * A link, a FIFO or another user's file at a name the install creates or reuses is never
 * followed, waited on or written through: the install refuses it with a clear error, or (at the
 * final <sha256>.psdb) puts its own file in its place. */

#define PLANTED_TAG "planted" /* the installer launcherplanted */

typedef enum plant { PLANT_LINK, PLANT_DANGLING, PLANT_FIFO, PLANT_FOREIGN } plant;

/* A name in the registry root: the download's .part, the final file, the store lock, the
 * installer's lock. replaced: the install puts its own file there; else it refuses. */
typedef struct spot {
    const char *what;
    const char *suffix; /* psdbs/<sha256>.psdb<suffix>; NULL: name */
    const char *name;   /* relative to the root */
    int replaced;
} spot;

static const spot k_spots[] = {
    {".part", ".part", NULL, 0},
    {"the final file", "", NULL, 1},
    {"the store lock", NULL, "store.lock", 0},
    {"the installer lock", NULL, "locks/launcher" PLANTED_TAG ".lock", 0},
};

static char *spot_path(const spot *sp)
{
    char rel[200];
    if (sp->suffix)
        snprintf(rel, sizeof(rel), "psdbs/%s.psdb%s", g_apps[0].current->hex, sp->suffix);
    else
        snprintf(rel, sizeof(rel), "%s", sp->name);
    return tu_path(g_reg, rel);
}

/* Waits up to `seconds` for pid; a process still running then is killed and the test fails: an
 * install must never block on what it finds in the store. Returns the exit status. */
static int wait_deadline(pid_t pid, int seconds, const char *what)
{
    int st = 0;
    for (int i = 0; i < seconds * 100; i++) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        ck_assert_int_ge(got, 0);
        if (got == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    ck_abort_msg("%s: the install hung (killed after %d s)", what, seconds);
    return -1;
}

/* A fresh root with psdbs/ and locks/ made, as an earlier install leaves them. */
static void fresh_root(void)
{
    tu_rmtree(g_reg);
    char *store = tu_path(g_reg, "psdbs"), *locks = tu_path(g_reg, "locks");
    ck_assert_int_eq(mkdir(g_reg, 0755), 0);
    ck_assert_int_eq(mkdir(store, 0755), 0);
    ck_assert_int_eq(mkdir(locks, 0700), 0);
    free(store);
    free(locks);
}

/* Puts what at path: a link to outside (which holds the published file, so that following it
 * would even verify), a link to the absent dangling, a FIFO, or a copy of the published file
 * owned by another user. */
static void plant_at(const char *path, plant what, const char *outside, const char *dangling)
{
    const blob *b = g_apps[0].current;
    switch (what) {
    case PLANT_LINK:
        ck_assert_int_eq(symlink(outside, path), 0);
        break;
    case PLANT_DANGLING:
        ck_assert_int_eq(symlink(dangling, path), 0);
        break;
    case PLANT_FIFO:
        ck_assert_int_eq(mkfifo(path, 0644), 0);
        break;
    case PLANT_FOREIGN:
        ck_assert_int_eq(tu_write_file(path, b->data, b->size), 0);
        ck_assert_int_eq(chown(path, 54321, 54321), 0);
        break;
    }
}

static const char *const k_plant_words[] = {"symbolic link", "symbolic link", "FIFO",
                                            "owned by uid 54321"};

/* One install with what planted at each spot in turn (a fresh root each time); checks the
 * outside file, the dangling link's target, what is registered and the error. */
static void install_with_planted(plant what)
{
    const blob *b = g_apps[0].current;
    char *outside = tu_path(g_dir, "outside.psdb"), *dangling = tu_path(g_dir, "dangling");
    for (size_t i = 0; i < sizeof(k_spots) / sizeof(k_spots[0]); i++) {
        const spot *sp = &k_spots[i];
        fresh_root();
        ck_assert_int_eq(tu_write_file(outside, b->data, b->size), 0);
        unlink(dangling);
        char *path = spot_path(sp);
        plant_at(path, what, outside, dangling);
        int blobs = atomic_load(&g_blob_requests);
        int rc = wait_deadline(spawn_install(0, NULL, PLANTED_TAG), 60, sp->what);
        char *log = install_log(PLANTED_TAG);

        /* Nothing outside the store was written or created. */
        size_t n = 0;
        char *still = tu_read_file(outside, &n);
        ck_assert_msg(still && n == b->size && memcmp(still, b->data, n) == 0,
                      "%s: the link's target was changed (%zu bytes)", sp->what, n);
        free(still);
        ck_assert_msg(access(dangling, F_OK) != 0, "%s: the install created the link's target",
                      sp->what);
        struct stat st;
        char *reg = registered_path();
        if (sp->replaced) {
            /* Not trusted whatever its content: downloaded, and the install's own file put in
             * its place, a regular file of ours inside the store. */
            ck_assert_msg(rc == 0, "%s: install failed: %s", sp->what, log);
            ck_assert_int_eq(atomic_load(&g_blob_requests), blobs + 1);
            ck_assert_ptr_nonnull(reg);
            struct stat at;
            ck_assert_int_eq(lstat(reg, &st), 0);
            ck_assert_int_eq(lstat(path, &at), 0);
            ck_assert_msg(S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_ino == at.st_ino &&
                              st.st_dev == at.st_dev,
                          "%s: registered %s is not the store's regular file of ours", sp->what,
                          reg);
            check_invariants(1, 0);
        } else {
            /* Refused, with the path and what it is; nothing registered; it is left alone. */
            ck_assert_msg(rc == 1, "%s: exit %d, want a refusal: %s", sp->what, rc, log);
            ck_assert_msg(strstr(log, path) && strstr(log, k_plant_words[what]),
                          "%s: the error should name %s and say '%s': %s", sp->what, path,
                          k_plant_words[what], log);
            ck_assert_ptr_null(reg);
            ck_assert_int_eq(lstat(path, &st), 0);
            if (what == PLANT_FIFO)
                ck_assert(S_ISFIFO(st.st_mode));
            else if (what == PLANT_FOREIGN)
                ck_assert(S_ISREG(st.st_mode) && st.st_uid == 54321 &&
                          (size_t)st.st_size == b->size);
            else
                ck_assert(S_ISLNK(st.st_mode));
        }
        free(reg);
        free(log);
        free(path);
    }
    free(outside);
    free(dangling);
}

START_TEST(test_store__links_planted_in_the_store_are_never_followed)
{
    publish_round(1, 1, 64 * 1024);
    install_with_planted(PLANT_LINK);
    install_with_planted(PLANT_DANGLING);
    /* psdbs/ or locks/ itself a link to a directory elsewhere: refused, nothing written there. */
    static const char *const dirs[] = {"psdbs", "locks"};
    for (size_t i = 0; i < 2; i++) {
        fresh_root();
        char *dir = tu_path(g_reg, dirs[i]), *elsewhere = tu_path(g_dir, "elsewhere");
        tu_rmtree(elsewhere);
        ck_assert_int_eq(rmdir(dir), 0);
        ck_assert_int_eq(mkdir(elsewhere, 0755), 0);
        ck_assert_int_eq(symlink(elsewhere, dir), 0);
        int rc = wait_deadline(spawn_install(0, NULL, PLANTED_TAG), 60, dirs[i]);
        char *log = install_log(PLANTED_TAG);
        ck_assert_msg(rc == 1 && strstr(log, dir) && strstr(log, "symbolic link"),
                      "%s a link: exit %d: %s", dirs[i], rc, log);
        DIR *d = opendir(elsewhere);
        ck_assert_ptr_nonnull(d);
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            ck_assert_msg(e->d_name[0] == '.', "%s was written through the link", e->d_name);
        closedir(d);
        ck_assert_ptr_null(registered_path());
        free(log);
        free(dir);
        free(elsewhere);
    }
}
END_TEST

START_TEST(test_store__fifos_planted_in_the_store_never_block_an_install)
{
    publish_round(1, 1, 64 * 1024);
    install_with_planted(PLANT_FIFO);
}
END_TEST

START_TEST(test_store__files_of_another_owner_in_the_store_are_refused)
{
    if (geteuid() != 0) {
        /* chown to another uid needs root; CI runs as root. */
        fprintf(stderr, "store_test: not root, files of another owner not exercised\n");
        return;
    }
    publish_round(1, 1, 64 * 1024);
    install_with_planted(PLANT_FOREIGN);
}
END_TEST

START_TEST(test_store__registered_file_replaced_by_a_link_or_fifo_is_listed_missing)
{
    publish_round(1, 1, 64 * 1024);
    install_one_expect("first", "installed");
    char *path = registered_path(), *outside = tu_path(g_dir, "outside.psdb");
    const blob *b = g_apps[0].current;
    ck_assert_ptr_nonnull(path);
    /* The file moved out and a link left in its place, to the same bytes: not the registered
     * file for all that. */
    ck_assert_int_eq(rename(path, outside), 0);
    ck_assert_int_eq(symlink(outside, path), 0);
    char *status = listed_status();
    ck_assert_str_eq(status, "missing");
    free(status);
    char *cmd = NULL, *out = tu_path(g_dir, "list.txt");
    ck_assert_int_ge(asprintf(&cmd, "timeout 60 %s registry list --registry %s", PSDB_TOOL, g_reg),
                     0);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    char *text = tu_read_file(out, NULL);
    ck_assert_msg(strstr(text, "[missing]") && strstr(text, "run psdb install again"), "%s", text);
    free(text);
    /* Installing again puts a regular file back; the link's target is left as it was. */
    install_one_expect("repair", "installed");
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    status = listed_status();
    ck_assert_str_eq(status, "ok");
    free(status);
    size_t n = 0;
    char *kept = tu_read_file(outside, &n);
    ck_assert(kept && n == b->size && memcmp(kept, b->data, n) == 0);
    free(kept);
    /* A FIFO there: listed missing at once, not waited on. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    text = tu_read_file(out, NULL);
    ck_assert_msg(strstr(text, "[missing]") != NULL, "%s", text);
    free(text);
    free(cmd);
    free(out);
    free(outside);
    free(path);
}
END_TEST

/* ---- damaged registry databases ----------------------------------------------------------------
 */

/* Runs cmd (stderr included) and checks that it fails with a message naming the registry
 * database and the way out (and containing extra when non-NULL). */
static void expect_registry_refused(const char *cmd, const char *extra)
{
    char *out = tu_path(g_dir, "refused.out");
    int rc = tu_run(cmd, out);
    char *text = tu_read_file(out, NULL);
    char *db = tu_path(g_reg, "registry.db");
    ck_assert_msg(rc != 0, "'%s' succeeded: %s", cmd, text);
    ck_assert_msg(strstr(text, db) != NULL, "no registry path in: %s", text);
    ck_assert_msg(strstr(text, "move it aside") != NULL, "no way out in: %s", text);
    ck_assert_msg(!extra || strstr(text, extra) != NULL, "no '%s' in: %s", extra, text);
    free(db);
    free(text);
    free(out);
}

static void expect_both_refused(const char *extra)
{
    char *list = NULL, *inst = NULL;
    ck_assert_int_ge(asprintf(&list, "%s registry list --registry %s", PSDB_TOOL, g_reg), 0);
    ck_assert_int_ge(asprintf(&inst,
                              "%s install --server %s --exe-path %s --app %s --app-version 1.0.0.0"
                              " --target %s:1-10 --trust %s --registry %s",
                              PSDB_TOOL, g_url, g_apps[0].exe, g_apps[0].name, FAMILY, g_pub,
                              g_reg),
                     0);
    expect_registry_refused(list, extra);
    expect_registry_refused(inst, extra);
    free(list);
    free(inst);
}

static char *db_path(void)
{
    return tu_path(g_reg, "registry.db");
}

static void set_pragma(const char *pragma)
{
    char *p = db_path();
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(p, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, pragma, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    free(p);
}

START_TEST(test_store__registry_not_a_database_named_with_the_way_out)
{
    publish_round(1, 1, 32 * 1024);
    ck_assert_int_eq(mkdir(g_reg, 0755), 0);
    char junk[8192];
    memset(junk, 'x', sizeof(junk));
    char *p = db_path();
    ck_assert_int_eq(tu_write_file(p, junk, sizeof(junk)), 0);
    expect_both_refused(NULL);
    free(p);
}
END_TEST

START_TEST(test_store__registry_truncated_named_with_the_way_out)
{
    publish_round(1, 1, 32 * 1024);
    install_one_expect("first", "installed");
    char *p = db_path();
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_gt(st.st_size, 8192);
    ck_assert_int_eq(truncate(p, 8192), 0);
    expect_both_refused(NULL);
    free(p);
}
END_TEST

START_TEST(test_store__registry_of_another_program_named_with_the_way_out)
{
    publish_round(1, 1, 32 * 1024);
    install_one_expect("first", "installed");
    set_pragma("PRAGMA application_id = 1234");
    expect_both_refused("application_id");
}
END_TEST

START_TEST(test_store__registry_bad_schema_version_named_with_the_way_out)
{
    publish_round(1, 1, 32 * 1024);
    install_one_expect("first", "installed");
    set_pragma("PRAGMA user_version = -3");
    expect_both_refused("schema version -3");
    set_pragma("PRAGMA user_version = 99");
    expect_both_refused("newer");
    /* A SQLite database with tables but no psdb schema version is not a registry either. */
    char *p = db_path();
    unlink(p);
    set_pragma("CREATE TABLE t(x)");
    expect_both_refused("no psdb schema version");
    free(p);
}
END_TEST

START_TEST(test_store__registry_stamped_with_psdb_application_id)
{
    publish_round(1, 1, 32 * 1024);
    install_one_expect("first", "installed");
    char *p = db_path();
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_open(p, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 0x50534452);
    sqlite3_finalize(st);
    /* A registry written before the id was stamped (0) is accepted and stamped. */
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA application_id = 0", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    install_one_expect("again", "unchanged");
    ck_assert_int_eq(sqlite3_open(p, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 0x50534452);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    TCase *conc = tcase_create("concurrency");
    tcase_add_checked_fixture(conc, setup, teardown);
    tcase_set_timeout(conc, 120);
    tcase_add_test(conc, test_store__concurrent_installs_of_16_apps_keep_every_file);
    tcase_add_test(conc, test_store__killed_installs_lose_no_registered_file);
    tcase_add_test(conc, test_store__concurrent_installs_of_one_psdb_download_it_once);
    suite_add_tcase(s, conc);
    TCase *repair = tcase_create("repair");
    tcase_add_checked_fixture(repair, setup, teardown);
    tcase_set_timeout(repair, 120);
    tcase_add_test(repair, test_store__damaged_or_missing_registered_file_flagged_and_repaired);
    tcase_add_test(repair, test_store__registry_not_a_database_named_with_the_way_out);
    tcase_add_test(repair, test_store__registry_truncated_named_with_the_way_out);
    tcase_add_test(repair, test_store__registry_of_another_program_named_with_the_way_out);
    tcase_add_test(repair, test_store__registry_bad_schema_version_named_with_the_way_out);
    tcase_add_test(repair, test_store__registry_stamped_with_psdb_application_id);
    suite_add_tcase(s, repair);
    TCase *planted = tcase_create("planted");
    tcase_add_checked_fixture(planted, setup, teardown);
    tcase_set_timeout(planted, 300);
    tcase_add_test(planted, test_store__links_planted_in_the_store_are_never_followed);
    tcase_add_test(planted, test_store__fifos_planted_in_the_store_never_block_an_install);
    tcase_add_test(planted, test_store__files_of_another_owner_in_the_store_are_refused);
    tcase_add_test(planted,
                   test_store__registered_file_replaced_by_a_link_or_fifo_is_listed_missing);
    suite_add_tcase(s, planted);
    return tu_run_suite(s);
}
