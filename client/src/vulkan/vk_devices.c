/* vk_devices.c - psdb_client_local_targets: the machine's Vulkan devices as install targets.
 *
 * DESIGN: libpsdb never links the Vulkan loader, so that a launcher on a machine without Vulkan
 * still loads libpsdb and gets a status instead of a failed start. The loader is opened here with
 * dlopen under its soname (libvulkan.so.1, what every Linux loader package installs), every entry
 * point comes from its vkGetInstanceProcAddr, and the loader is closed before returning, so
 * nothing of Vulkan stays in the process. Each device's target comes from vkid_query, the code the
 * layer and `psdb compile --backend vulkan` use, so the target asked for is exactly the one the
 * compile on that device wrote (schema/COMPILER.md section 5). */
#include "psdb/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#ifndef PSDB_HAVE_VULKAN_HEADERS

static psdb_hr enumerate(psdb_precompile_target **out, uint32_t *found)
{
    *out = NULL;
    *found = 0;
    return psdb__error_const(PSDB_E_NOTIMPL,
                             "psdb_client_local_targets: this libpsdb was built without the vulkan "
                             "headers (PSDB_VULKAN=OFF or libvulkan-dev missing)");
}

#else

#include <dlfcn.h>

#include "vulkan/psdb_vulkan.h"
#include "vulkan/vk_devices.h"

#define LOADER_SONAME "libvulkan.so.1"

/* A failed Vulkan call as a status: out of memory is PSDB_E_OUTOFMEMORY as everywhere; no driver
 * (the loader found no ICD, or none that works) is no adapter; anything else PSDB_E_FAIL. */
static psdb_hr vk_status(VkResult r, const char *call)
{
    psdb_hr hr = PSDB_E_FAIL;
    const char *why = "the driver failed";
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY) {
        hr = PSDB_E_OUTOFMEMORY;
        why = "out of memory";
    } else if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED) {
        hr = PSDB_E_ADAPTER_NOT_FOUND;
        why = "no vulkan driver (none installed, or VK_ICD_FILENAMES / VK_DRIVER_FILES name none "
              "that loads)";
    }
    return psdb__error_set(hr, "vulkan: %s failed with VkResult %d: %s", call, (int)r, why);
}

static psdb_hr no_device(void)
{
    return psdb__error_const(PSDB_E_ADAPTER_NOT_FOUND,
                             "vulkan: no vulkan device (the drivers found report none)");
}

uint32_t psdb__vk_target_add(psdb_precompile_target *t, uint32_t n, const vkid *id)
{
    /* Identical devices (two of one model on one driver) want one PSDB: one target. */
    for (uint32_t j = 0; j < n; j++)
        if (strcmp(t[j].family, id->family) == 0 && t[j].abi_min == id->abi &&
            t[j].compiler_version == id->compiler_version)
            return n;
    _Static_assert(sizeof(id->family) <= sizeof(t[n].family), "a vkid family fits a target");
    memset(&t[n], 0, sizeof(t[n]));
    memcpy(t[n].family, id->family, sizeof(id->family));
    t[n].abi_min = t[n].abi_max = id->abi;
    t[n].compiler_version = id->compiler_version;
    t[n].profile_version = 0; /* any: a launcher does not know the application's profile */
    return n + 1;
}

/* The distinct targets of the machine's devices in enumeration order, in a new array *out (the
 * caller frees it) of *found entries. */
static psdb_hr enumerate(psdb_precompile_target **out, uint32_t *found)
{
    psdb_hr hr = PSDB_S_OK;
    void *lib = NULL;
    VkInstance inst = VK_NULL_HANDLE;
    VkPhysicalDevice *phys = NULL;
    psdb_precompile_target *t = NULL;
    PFN_vkGetInstanceProcAddr gipa = NULL;
    PFN_vkCreateInstance create = NULL;
    PFN_vkEnumerateInstanceVersion version = NULL;
    PFN_vkDestroyInstance destroy = NULL;
    PFN_vkEnumeratePhysicalDevices devices = NULL;
    PFN_vkGetPhysicalDeviceProperties props = NULL;
    PFN_vkGetPhysicalDeviceProperties2 props2 = NULL;
    VkResult r = VK_SUCCESS;
    uint32_t n = 0, nt = 0, loader_version = VK_API_VERSION_1_0;
    int v11 = 0;

    *out = NULL;
    *found = 0;
    lib = dlopen(LOADER_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        hr =
            psdb__error_set(PSDB_E_ADAPTER_NOT_FOUND,
                            "vulkan loader %s cannot be loaded (is a vulkan loader installed?): %s",
                            LOADER_SONAME, why ? why : "unknown reason");
        goto cleanup;
    }
    gipa = (PFN_vkGetInstanceProcAddr)(uintptr_t)dlsym(lib, "vkGetInstanceProcAddr");
    if (gipa)
        create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
    if (!create) {
        hr = psdb__error_set(PSDB_E_ADAPTER_NOT_FOUND,
                             "vulkan loader %s has no vkGetInstanceProcAddr or vkCreateInstance",
                             LOADER_SONAME);
        goto cleanup;
    }
    /* A 1.0 loader knows no vkEnumerateInstanceVersion and refuses an instance of a later API;
     * there the driver properties (core in 1.2) cannot be asked, which vkid_query allows for. */
    version = (PFN_vkEnumerateInstanceVersion)gipa(VK_NULL_HANDLE, "vkEnumerateInstanceVersion");
    if (version && version(&loader_version) != VK_SUCCESS)
        loader_version = VK_API_VERSION_1_0;
    v11 = loader_version >= VK_API_VERSION_1_1;
    /* Named and versioned as the tool's compile creates its instance. */
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "psdb",
                             .apiVersion = v11 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_0};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = &app};
    r = create(&ici, NULL, &inst);
    if (r != VK_SUCCESS) {
        inst = VK_NULL_HANDLE;
        hr = vk_status(r, "vkCreateInstance");
        goto cleanup;
    }
    destroy = (PFN_vkDestroyInstance)gipa(inst, "vkDestroyInstance");
    devices = (PFN_vkEnumeratePhysicalDevices)gipa(inst, "vkEnumeratePhysicalDevices");
    props = (PFN_vkGetPhysicalDeviceProperties)gipa(inst, "vkGetPhysicalDeviceProperties");
    if (v11)
        props2 = (PFN_vkGetPhysicalDeviceProperties2)gipa(inst, "vkGetPhysicalDeviceProperties2");
    if (!destroy || !devices || !props) {
        hr = psdb__error_set(PSDB_E_FAIL, "vulkan loader %s: the instance lacks a core function",
                             LOADER_SONAME);
        goto cleanup;
    }
    r = devices(inst, &n, NULL);
    if (r != VK_SUCCESS) {
        hr = vk_status(r, "vkEnumeratePhysicalDevices");
        goto cleanup;
    }
    if (n == 0) {
        hr = no_device();
        goto cleanup;
    }
    phys = calloc(n, sizeof(*phys));
    t = calloc(n, sizeof(*t));
    if (!phys || !t) {
        hr = psdb__error_const(PSDB_E_OUTOFMEMORY, "vulkan: out of memory listing the devices");
        goto cleanup;
    }
    /* VK_INCOMPLETE: a device came between the two calls; the first n are listed. A device that
     * went away lowers n. */
    r = devices(inst, &n, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        hr = vk_status(r, "vkEnumeratePhysicalDevices");
        goto cleanup;
    }
    for (uint32_t i = 0; i < n; i++) {
        vkid id;
        vkid_query(props, props2, phys[i], &id);
        nt = psdb__vk_target_add(t, nt, &id);
    }
    if (nt == 0) {
        hr = no_device();
        goto cleanup;
    }
    *out = t;
    *found = nt;
    t = NULL;
cleanup:
    if (inst != VK_NULL_HANDLE && destroy)
        destroy(inst, NULL);
    if (lib)
        dlclose(lib);
    free(phys);
    free(t);
    return hr;
}

#endif

psdb_hr psdb_client_local_targets(psdb_precompile_target *out, uint32_t *count)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_precompile_target *all = NULL;
    uint32_t found = 0;

    if (!count || (!out && *count)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_client_local_targets: NULL count, or out "
                                                  "NULL with a non-zero *count");
        goto cleanup;
    }
    hr = enumerate(&all, &found);
    if (PSDB_FAILED(hr)) {
        *count = 0;
        goto cleanup;
    }
    if (out && *count)
        memcpy(out, all, (found < *count ? found : *count) * sizeof(*all));
    if (found > *count)
        hr = psdb__error_set(PSDB_E_MORE_DATA,
                             "psdb_client_local_targets: %u targets, room for %u (the first are "
                             "written; *count now says how many there are)",
                             found, *count);
    *count = found;
cleanup:
    free(all);
    return psdb__error_ret(hr, err_mark, "psdb_client_local_targets");
}
