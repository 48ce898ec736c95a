/* local_targets_test.c - psdb_client_local_targets, what `psdb install --target auto` and
 * launchers ask for: on the machine's Vulkan device (lavapipe in CI) the target is the one
 * `psdb compile --backend vulkan` writes; identical devices give one target; a machine without a
 * Vulkan driver, or without the loader, gets PSDB_E_ADAPTER_NOT_FOUND and psdb_error_last says
 * which. Linked with libpsdb's internals and never with the Vulkan loader, as a launcher is. */
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vulkan/vk_devices.h"

static const char LVP_ICD[] = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";

static void props(VkPhysicalDeviceProperties *p, VkPhysicalDeviceDriverProperties *d,
                  uint32_t device_id, uint32_t driver_version)
{
    memset(p, 0, sizeof(*p));
    memset(d, 0, sizeof(*d));
    p->apiVersion = VK_API_VERSION_1_3;
    p->vendorID = 0x10de;
    p->deviceID = device_id;
    p->driverVersion = driver_version;
    for (unsigned i = 0; i < VK_UUID_SIZE; i++)
        p->pipelineCacheUUID[i] = (uint8_t)(0xa0 + i);
    d->driverID = VK_DRIVER_ID_NVIDIA_PROPRIETARY;
    snprintf(d->driverInfo, sizeof(d->driverInfo), "580.159.04");
}

START_TEST(test_local_targets__identical_devices_give_one_target)
{
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceDriverProperties d;
    vkid a, b, newer, other;
    psdb_precompile_target t[4];
    props(&p, &d, 0x2684, 0x9127c100);
    vkid_from_properties(&p, &d, &a);
    vkid_from_properties(&p, &d, &b);
    props(&p, &d, 0x2684, 0x9127c101);
    vkid_from_properties(&p, &d, &newer);
    props(&p, &d, 0x2204, 0x9127c100);
    vkid_from_properties(&p, &d, &other);
    memset(t, 0xff, sizeof(t));
    uint32_t n = psdb__vk_target_add(t, 0, &a);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(t[0].family, "vulkan-10de-2684");
    ck_assert_uint_eq(t[0].abi_min, a.abi);
    ck_assert_uint_eq(t[0].abi_max, a.abi);
    ck_assert_uint_eq(t[0].compiler_version, 0x9127c100);
    ck_assert_uint_eq(t[0].profile_version, 0);
    /* A second device of the same model on the same driver adds nothing. */
    ck_assert_uint_eq(psdb__vk_target_add(t, n, &b), 1);
    /* The same model on another driver build is another ABI: a target of its own. */
    n = psdb__vk_target_add(t, n, &newer);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(t[1].family, "vulkan-10de-2684");
    ck_assert_uint_ne(t[1].abi_min, t[0].abi_min);
    n = psdb__vk_target_add(t, n, &other);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(t[2].family, "vulkan-10de-2204");
    ck_assert_uint_eq(psdb__vk_target_add(t, n, &newer), 3);
}
END_TEST

START_TEST(test_local_targets__arguments_refused_with_a_reason)
{
    psdb_precompile_target t[1];
    ck_assert_hr(psdb_client_local_targets(t, NULL), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "NULL count"));
    uint32_t n = 2;
    ck_assert_hr(psdb_client_local_targets(NULL, &n), PSDB_E_INVALIDARG);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "out NULL"));
}
END_TEST

/* The compile's target, read back from the PSDB it wrote. */
static void compiled_target(const char *dir, char *family, size_t family_size, uint64_t *abi,
                            uint64_t *compiler_version)
{
    char cmd[4096];
    char *sodb = tu_path(dir, "vk.sodb"), *psdb = tu_path(dir, "vk.psdb");
    char *out = tu_path(dir, "tool.out");
    snprintf(cmd, sizeof(cmd),
             "'%s' synth --api vulkan --app VkGame --app-version 1.0.0.0 --pipelines 2 -o '%s'",
             PSDB_TOOL, sodb);
    ck_assert_msg(tu_run(cmd, out) == 0, "synth: %s", tu_read_file(out, NULL));
    /* The compile's Mesa cache goes to the test's folder, not the user's. Under LeakSanitizer
     * the driver's own leaks (Mesa, LLVM) must not fail the compile, as in vulkan_backend_test. */
    snprintf(cmd, sizeof(cmd),
             "XDG_CACHE_HOME='%s/cache' LSAN_OPTIONS=exitcode=0 '%s' compile '%s' --backend vulkan "
             "-o '%s'",
             dir, PSDB_TOOL, sodb, psdb);
    ck_assert_msg(tu_run(cmd, out) == 0, "compile --backend vulkan: %s", tu_read_file(out, NULL));
    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_file_open(psdb, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    snprintf(family, family_size, "%s", info.target.family);
    *abi = info.target.abi_version;
    *compiler_version = info.target.compiler_version;
    psdb_file_release(f);
    free(sodb);
    free(psdb);
    free(out);
}

START_TEST(test_local_targets__lavapipe_matches_compile_backend_vulkan)
{
    char *dir = tu_mkdtemp();
    char family[PSDB_ADAPTER_FAMILY_MAX];
    uint64_t abi = 0, compiler_version = 0;
    compiled_target(dir, family, sizeof(family), &abi, &compiler_version);

    psdb_precompile_target t[8];
    uint32_t n = 8;
    ck_assert_hr(psdb_client_local_targets(t, &n), PSDB_S_OK);
    ck_assert_uint_ge(n, 1);
    /* The compile ran on device 0, the first one enumerated: the first target is its. */
    ck_assert_str_eq(t[0].family, family);
    ck_assert_uint_eq(t[0].abi_min, abi);
    ck_assert_uint_eq(t[0].abi_max, abi);
    ck_assert_uint_eq(t[0].compiler_version, compiler_version);
    ck_assert_uint_eq(t[0].profile_version, 0);

    /* Short capacity: the count of targets and a reason. */
    uint32_t none = 0;
    ck_assert_hr(psdb_client_local_targets(NULL, &none), PSDB_E_MORE_DATA);
    ck_assert_uint_eq(none, n);
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "room for 0"));
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_local_targets__no_vulkan_driver_is_adapter_not_found)
{
    /* The loader reads its driver list from these at every instance creation: a list naming no
     * existing manifest is a machine with the loader but without a driver. */
    char *dir = tu_mkdtemp();
    char *none = tu_path(dir, "no_such_icd.json");
    char *icd = getenv("VK_ICD_FILENAMES") ? strdup(getenv("VK_ICD_FILENAMES")) : NULL;
    char *drv = getenv("VK_DRIVER_FILES") ? strdup(getenv("VK_DRIVER_FILES")) : NULL;
    setenv("VK_ICD_FILENAMES", none, 1);
    setenv("VK_DRIVER_FILES", none, 1);
    unsetenv("VK_ADD_DRIVER_FILES");
    psdb_precompile_target t[4];
    uint32_t n = 4;
    ck_assert_hr(psdb_client_local_targets(t, &n), PSDB_E_ADAPTER_NOT_FOUND);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(strstr(psdb_error_last(), "no vulkan driver") != NULL, "error: %s",
                  psdb_error_last());
    /* The tool says the same, in one line, before it asks any server. */
    char cmd[4096];
    char *out = tu_path(dir, "tool.out");
    snprintf(cmd, sizeof(cmd),
             "'%s' install --server http://127.0.0.1:1 --exe-path /g/a.exe --app A "
             "--app-version 1.0.0.0 --target auto --trust /nonexistent.pub",
             PSDB_TOOL);
    ck_assert_int_eq(tu_run(cmd, out), 1);
    char *text = tu_read_file(out, NULL);
    ck_assert_msg(strstr(text, "psdb install: --target auto: vulkan: vkCreateInstance failed") &&
                      strstr(text, "no vulkan driver"),
                  "psdb install --target auto: %s", text);
    free(text);
    free(out);
    /* Restored for the cases after this one where Check runs them in one process (CK_FORK=no). */
    icd ? setenv("VK_ICD_FILENAMES", icd, 1) : unsetenv("VK_ICD_FILENAMES");
    drv ? setenv("VK_DRIVER_FILES", drv, 1) : unsetenv("VK_DRIVER_FILES");
    free(icd);
    free(drv);
    tu_rmtree(dir);
    free(none);
    free(dir);
}
END_TEST

/* Where the dynamic linker finds the loader, learnt in a child so that this process never loads
 * it. 0 and path, or -1 when the machine has no loader at all. */
static int loader_path(char *path, size_t size)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        void *h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
        struct link_map *lm = NULL;
        char real[PATH_MAX];
        if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && realpath(lm->l_name, real))
            (void)!write(fds[1], real, strlen(real));
        _exit(0);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], path, size - 1);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (got <= 0)
        return -1;
    path[got] = '\0';
    return 0;
}

static int write_text(const char *file, const char *text)
{
    int fd = open(file, O_WRONLY);
    int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* A private mount namespace (a user namespace too where this process is not privileged) with
 * /dev/null mounted over the loader: the machine as if no loader were installed, for this process
 * alone. 0, or -1 when namespaces are not available here. */
static int hide_loader(const char *loader)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    char map[64];
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            return -1;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (write_text("/proc/self/setgroups", "deny") != 0 ||
            write_text("/proc/self/uid_map", map) != 0)
            return -1;
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
        if (write_text("/proc/self/gid_map", map) != 0)
            return -1;
    }
    /* Private first, so that the mount below can never reach the machine's namespace. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    return mount("/dev/null", loader, NULL, MS_BIND, NULL) == 0 ? 0 : -1;
}

START_TEST(test_local_targets__no_vulkan_loader_is_adapter_not_found)
{
    char loader[PATH_MAX];
    int fds[2];
    if (loader_path(loader, sizeof(loader)) != 0) {
        /* This machine really has no loader: the call itself is the case. */
        psdb_precompile_target t[1];
        uint32_t n = 1;
        ck_assert_hr(psdb_client_local_targets(t, &n), PSDB_E_ADAPTER_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(psdb_error_last(), "cannot be loaded"));
        return;
    }
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char msg[600];
        close(fds[0]);
        if (hide_loader(loader) != 0) {
            snprintf(msg, sizeof(msg), "%s", strerror(errno));
            (void)!write(fds[1], msg, strlen(msg));
            _exit(77);
        }
        psdb_precompile_target t[1];
        uint32_t n = 1;
        psdb_hr hr = psdb_client_local_targets(t, &n);
        snprintf(msg, sizeof(msg), "%08x %u %s", (unsigned)hr, n, psdb_error_last());
        (void)!write(fds[1], msg, strlen(msg));
        _exit(0);
    }
    close(fds[1]);
    char msg[600] = "";
    ssize_t got = read(fds[0], msg, sizeof(msg) - 1);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    msg[got > 0 ? got : 0] = '\0';
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        fprintf(stderr,
                "local_targets_test: no mount namespace here (%s): the missing-loader case "
                "did not run\n",
                msg);
        return;
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child died (status %d)", st);
    ck_assert_int_gt(got, 0);
    unsigned hr = 0, n = 9;
    ck_assert_int_eq(sscanf(msg, "%x %u", &hr, &n), 2);
    ck_assert_msg((psdb_hr)hr == PSDB_E_ADAPTER_NOT_FOUND, "status %s: %s",
                  psdb_hr_str((psdb_hr)hr), msg);
    ck_assert_uint_eq(n, 0);
    ck_assert_msg(strstr(msg, "libvulkan.so.1 cannot be loaded") != NULL, "error: %s", msg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("local_targets");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_local_targets__identical_devices_give_one_target);
    tcase_add_test(tc, test_local_targets__arguments_refused_with_a_reason);
    tcase_add_test(tc, test_local_targets__no_vulkan_driver_is_adapter_not_found);
    tcase_add_test(tc, test_local_targets__no_vulkan_loader_is_adapter_not_found);
    suite_add_tcase(s, tc);
    /* The device cases run on lavapipe (mesa-vulkan-drivers, which CI installs), unless the
     * environment names the drivers itself. */
    if (!getenv("VK_ICD_FILENAMES") && !getenv("VK_DRIVER_FILES") && access(LVP_ICD, R_OK) == 0) {
        setenv("VK_ICD_FILENAMES", LVP_ICD, 1);
        setenv("VK_DRIVER_FILES", LVP_ICD, 1);
    }
#ifdef PSDB_TEST_SYNTH_VULKAN
    if (getenv("VK_ICD_FILENAMES") || getenv("VK_DRIVER_FILES")) {
        TCase *dev = tcase_create("device");
        tcase_set_timeout(dev, 120);
        tcase_add_test(dev, test_local_targets__lavapipe_matches_compile_backend_vulkan);
        suite_add_tcase(s, dev);
    } else {
        fprintf(stderr,
                "local_targets_test: no vulkan driver named and no lavapipe (%s): the "
                "device case is not run\n",
                LVP_ICD);
    }
#else
    fprintf(stderr, "local_targets_test: psdb synth --api vulkan is not built (glslang-dev): the "
                    "device case is not run\n");
#endif
    return tu_run_suite(s);
}
