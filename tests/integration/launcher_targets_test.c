/* launcher_targets_test.c - a launcher that knows no family strings: it asks libpsdb for the
 * machine's Vulkan targets (psdb_client_local_targets, lavapipe in CI) and installs with them
 * from the real psdbd; the registry then holds the published PSDB for the device's family, and
 * `psdb install --target auto` asks for the same target (it finds it installed). Exit 77 where
 * the machine has no Vulkan device or psdbd is not built. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "psdb/client.h"

#define EXE "/games/vkgame/vkgame.exe"

#ifdef PSDBD_BIN
static const char LVP_ICD[] = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
static char *g_dir, *g_reg, *g_key, *g_pub;

typedef struct server {
    pid_t pid;
    char url[64];
    char *data;
} server;

static void server_start(server *s)
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
        execl(PSDBD_BIN, PSDBD_BIN, "--listen", "127.0.0.1:0", "--data-dir", s->data, (char *)NULL);
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

/* The first line a command prints (malloc'd); the command must succeed. */
static char *run_out(const char *cmd)
{
    char *file = tu_path(g_dir, "cmd.out");
    int rc = tu_run(cmd, file);
    char *out = tu_read_file(file, NULL);
    ck_assert_msg(rc == 0, "'%s' failed (%d): %s", cmd, rc, out ? out : "");
    out[strcspn(out, "\n")] = '\0';
    free(file);
    return out;
}

/* A PSDB of VkGame 1.0.0.0 for target t, published with serial 1; its content digest in sha. */
static void publish_for(const server *s, const char *token, const psdb_precompile_target *t,
                        uint32_t i, uint8_t digest[32])
{
    char name[32];
    snprintf(name, sizeof(name), "vk%u.psdb", i);
    char *path = tu_path(g_dir, name);
    psdb_app_identity id = {.desc = {.name = "VkGame", .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target pt = {
        .family = t->family, .abi_version = t->abi_min, .compiler_version = t->compiler_version};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &pt, &w), PSDB_S_OK);
    ck_assert_hr(
        psdb_writer_put_value(w, "k", 1, PSDB_VALUE_OBJECT_CODE, t->family, strlen(t->family)),
        PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    memcpy(digest, info.content_digest, 32);
    psdb_file_release(f);

    psdb_client_desc cd = {.server_url = s->url, .token = token};
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    psdb_publish_desc pd = {.key_path = g_key, .psdb_path = path, .serial = 1};
    psdb_publish_result *r = NULL;
    psdb_hr hr = psdb_client_publish(c, &pd, &r);
    ck_assert_msg(hr == PSDB_S_OK, "publish %s: %s", path, r ? r->message : psdb_hr_str(hr));
    psdb_publish_result_free(r);
    psdb_client_release(c);
    free(path);
}

/* The content digest of the PSDB registered for family as EXE's default component. */
static void registered_digest(const char *family, uint8_t digest[32])
{
    psdb_explorer *e = NULL;
    psdb_application *a = NULL;
    psdb_component *comp = NULL;
    psdb_file *f = NULL;
    psdb_file_info info;
    char path[4096];
    ck_assert_hr(psdb_explorer_open(g_reg, &e), PSDB_S_OK);
    ck_assert_hr(psdb_explorer_get_application(e, EXE, &a), PSDB_S_OK);
    ck_assert_hr(psdb_application_get_component(a, PSDB_DEFAULT_COMPONENT, &comp), PSDB_S_OK);
    ck_assert_hr(psdb_component_get_psdb_path(comp, family, path, sizeof(path)), PSDB_S_OK);
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    memcpy(digest, info.content_digest, 32);
    psdb_file_release(f);
    psdb_component_release(comp);
    psdb_application_release(a);
    psdb_explorer_release(e);
}

START_TEST(test_launcher_targets__install_with_local_targets_registers_the_psdb)
{
    g_dir = tu_mkdtemp();
    g_reg = tu_path(g_dir, "registry");
    g_key = tu_path(g_dir, "pub.key");
    g_pub = tu_path(g_dir, "pub.key.pub");
    ck_assert_hr(psdb_keygen(g_key, NULL), PSDB_S_OK);
    server s = {.data = tu_path(g_dir, "psdbd-data")};
    char cmd[4096];
    server_start(&s);
    snprintf(cmd, sizeof(cmd), "%s token create --data-dir %s --role publisher --scope '*'",
             PSDBD_BIN, s.data);
    char *token = run_out(cmd);
    snprintf(cmd, sizeof(cmd), "%s key add --data-dir %s --name ci --public-key %s --scope '*'",
             PSDBD_BIN, s.data, g_pub);
    free(run_out(cmd));

    /* The platform side: a PSDB for every device of this machine, compiled elsewhere. */
    psdb_precompile_target t[16];
    uint32_t n = 16;
    ck_assert_hr(psdb_client_local_targets(t, &n), PSDB_S_OK);
    uint8_t published[16][32];
    for (uint32_t i = 0; i < n; i++)
        publish_for(&s, token, &t[i], i, published[i]);

    /* The launcher: no family string anywhere, the targets come from libpsdb. */
    psdb_precompile_target mine[16];
    uint32_t num = 16;
    ck_assert_hr(psdb_client_local_targets(mine, &num), PSDB_S_OK);
    const char *keys[1] = {g_pub};
    psdb_client_desc cd = {.server_url = s.url, .trusted_keys = keys, .num_trusted_keys = 1};
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_S_OK);
    psdb_app_desc app = {.name = "VkGame", .version = PSDB_VERSION(1, 0, 0, 0)};
    psdb_install_desc d = {
        .exe_path = EXE, .app = &app, .targets = mine, .num_targets = num, .registry_dir = g_reg};
    psdb_install_result results[16];
    psdb_hr hr = psdb_client_install(c, &d, results);
    ck_assert_msg(hr == PSDB_S_OK, "install: %s", psdb_client_last_error(c));
    psdb_client_release(c);
    for (uint32_t i = 0; i < num; i++) {
        uint8_t got[32];
        ck_assert_hr(results[i].status, PSDB_S_OK);
        ck_assert_uint_eq(results[i].serial, 1);
        registered_digest(mine[i].family, got);
        ck_assert_mem_eq(got, published[i], 32);
    }

    /* The tool asks the same call: its target is the one installed. */
    snprintf(cmd, sizeof(cmd),
             "%s install --server %s --exe-path %s --app VkGame --app-version 1.0.0.0 "
             "--target auto --trust %s --registry %s",
             PSDB_TOOL, s.url, EXE, g_pub, g_reg);
    char *out = run_out(cmd);
    ck_assert_msg(strstr(out, mine[0].family) && strstr(out, "already installed"),
                  "psdb install --target auto: %s", out);
    free(out);

    kill(s.pid, SIGTERM);
    waitpid(s.pid, NULL, 0);
    free(token);
    free(s.data);
    tu_rmtree(g_dir);
    free(g_dir);
    free(g_reg);
    free(g_key);
    free(g_pub);
}
END_TEST
#endif

int main(void)
{
#ifndef PSDBD_BIN
    fprintf(stderr, "launcher_targets_test: skipped: psdbd is not built\n");
    return 77;
#else
    /* On lavapipe (mesa-vulkan-drivers, which CI installs) unless the environment names the
     * drivers itself. */
    if (!getenv("VK_ICD_FILENAMES") && !getenv("VK_DRIVER_FILES") && access(LVP_ICD, R_OK) == 0) {
        setenv("VK_ICD_FILENAMES", LVP_ICD, 1);
        setenv("VK_DRIVER_FILES", LVP_ICD, 1);
    }
    psdb_precompile_target t[16];
    uint32_t n = 16;
    psdb_hr hr = psdb_client_local_targets(t, &n);
    if (hr == PSDB_E_ADAPTER_NOT_FOUND || hr == PSDB_E_NOTIMPL) {
        fprintf(stderr, "launcher_targets_test: skipped: %s\n", psdb_error_last());
        return 77;
    }
    Suite *s = suite_create("launcher_targets");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_launcher_targets__install_with_local_targets_registers_the_psdb);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
#endif
}
