/* vk_device.c - the Vulkan device the backend replays an SODB on: instance, device, queue,
 * command buffer and fence, the first-use resources lavapipe needs, and the environment of the
 * driver's disk cache (schema/COMPILER.md section 5). */
#include "vulkan/vk_backend.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int vkbe_fmt(char *buf, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, size, f, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

double vkbe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define DUMMY_BUFFER_SIZE 65536u

static int instance_open(vkbe_dev *d, char *err, size_t err_size)
{
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "psdb",
                             .apiVersion = VK_API_VERSION_1_3};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = &app};
    VkResult r = vkCreateInstance(&ici, NULL, &d->instance);
    if (r != VK_SUCCESS) {
        snprintf(err, err_size, "vulkan: vkCreateInstance failed: VkResult %d (no vulkan driver?)",
                 (int)r);
        d->instance = VK_NULL_HANDLE;
        return -1;
    }
    return 0;
}

static uint32_t physical_devices(VkInstance inst, VkPhysicalDevice *out, uint32_t cap)
{
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(inst, &n, NULL) != VK_SUCCESS)
        return 0;
    if (n > cap)
        n = cap;
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, out);
    return r == VK_SUCCESS || r == VK_INCOMPLETE ? n : 0;
}

void vkbe_image_destroy(VkDevice dv, VkImageView view, VkImage image, VkDeviceMemory memory)
{
    if (view)
        vkDestroyImageView(dv, view, NULL);
    if (image)
        vkDestroyImage(dv, image, NULL);
    if (memory)
        vkFreeMemory(dv, memory, NULL);
}

void vkbe_dev_close(vkbe_dev *d)
{
    if (d->device) {
        vkDeviceWaitIdle(d->device);
        if (d->merged)
            vkDestroyPipelineCache(d->device, d->merged, NULL);
        for (uint32_t i = 0; i < d->num_att; i++)
            vkbe_image_destroy(d->device, d->att[i].view, d->att[i].image, d->att[i].memory);
        if (d->dummy_sampler)
            vkDestroySampler(d->device, d->dummy_sampler, NULL);
        if (d->dummy_view)
            vkDestroyImageView(d->device, d->dummy_view, NULL);
        if (d->dummy_img)
            vkDestroyImage(d->device, d->dummy_img, NULL);
        if (d->dummy_buf)
            vkDestroyBuffer(d->device, d->dummy_buf, NULL);
        if (d->dummy_img_mem)
            vkFreeMemory(d->device, d->dummy_img_mem, NULL);
        if (d->dummy_buf_mem)
            vkFreeMemory(d->device, d->dummy_buf_mem, NULL);
        if (d->fence)
            vkDestroyFence(d->device, d->fence, NULL);
        if (d->pool)
            vkDestroyCommandPool(d->device, d->pool, NULL);
        vkDestroyDevice(d->device, NULL);
    }
    if (d->instance)
        vkDestroyInstance(d->instance, NULL);
    memset(d, 0, sizeof(*d));
}

VkResult vkbe_alloc(vkbe_dev *d, VkMemoryRequirements req, VkDeviceMemory *mem)
{
    uint32_t type = UINT32_MAX;
    for (uint32_t t = 0; t < d->mem.memoryTypeCount && type == UINT32_MAX; t++)
        if (req.memoryTypeBits & (1u << t))
            type = t;
    if (type == UINT32_MAX)
        return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    return vkAllocateMemory(d->device, &ai, NULL, mem);
}

static VkResult dummies_create(vkbe_dev *d)
{
    VkResult r;
    VkMemoryRequirements req;
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = DUMMY_BUFFER_SIZE,
        .usage = VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                 VK_BUFFER_USAGE_VERTEX_BUFFER_BIT | VK_BUFFER_USAGE_INDEX_BUFFER_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if ((r = vkCreateBuffer(d->device, &bi, NULL, &d->dummy_buf)) != VK_SUCCESS)
        return r;
    vkGetBufferMemoryRequirements(d->device, d->dummy_buf, &req);
    if ((r = vkbe_alloc(d, req, &d->dummy_buf_mem)) != VK_SUCCESS ||
        (r = vkBindBufferMemory(d->device, d->dummy_buf, d->dummy_buf_mem, 0)) != VK_SUCCESS)
        return r;
    VkImageCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
                            .imageType = VK_IMAGE_TYPE_2D,
                            .format = VK_FORMAT_R8G8B8A8_UNORM,
                            .extent = {1, 1, 1},
                            .mipLevels = 1,
                            .arrayLayers = 1,
                            .samples = VK_SAMPLE_COUNT_1_BIT,
                            .tiling = VK_IMAGE_TILING_OPTIMAL,
                            .usage = VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_STORAGE_BIT};
    if ((r = vkCreateImage(d->device, &ii, NULL, &d->dummy_img)) != VK_SUCCESS)
        return r;
    vkGetImageMemoryRequirements(d->device, d->dummy_img, &req);
    if ((r = vkbe_alloc(d, req, &d->dummy_img_mem)) != VK_SUCCESS ||
        (r = vkBindImageMemory(d->device, d->dummy_img, d->dummy_img_mem, 0)) != VK_SUCCESS)
        return r;
    VkImageViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO,
                                .image = d->dummy_img,
                                .viewType = VK_IMAGE_VIEW_TYPE_2D,
                                .format = VK_FORMAT_R8G8B8A8_UNORM,
                                .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1}};
    if ((r = vkCreateImageView(d->device, &vi, NULL, &d->dummy_view)) != VK_SUCCESS)
        return r;
    VkSamplerCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
                              .magFilter = VK_FILTER_LINEAR,
                              .minFilter = VK_FILTER_LINEAR,
                              .maxLod = 1.0f};
    return vkCreateSampler(d->device, &si, NULL, &d->dummy_sampler);
}

psdb_hr vkbe_device_target(uint32_t device_index, psdb_precompile_target *out, char *err,
                           size_t err_size)
{
    psdb_hr hr = PSDB_E_ADAPTER_NOT_FOUND;
    vkbe_dev d = {0};
    VkPhysicalDevice phys[16];
    vkid id;
    if (instance_open(&d, err, err_size) != 0)
        goto cleanup;
    uint32_t n = physical_devices(d.instance, phys, 16);
    if (n == 0 || device_index >= n) {
        snprintf(err, err_size, "vulkan: device %u does not exist (%u devices)", device_index, n);
        goto cleanup;
    }
    /* The one code for the identity, as vkbe_dev_open and psdb_client_local_targets ask it. */
    vkid_query(vkGetPhysicalDeviceProperties, vkGetPhysicalDeviceProperties2, phys[device_index],
               &id);
    *out = (psdb_precompile_target){0};
    snprintf(out->family, sizeof(out->family), "%s", id.family);
    out->abi_min = out->abi_max = id.abi;
    out->compiler_version = id.compiler_version;
    hr = PSDB_S_OK;
cleanup:
    if (d.instance)
        vkDestroyInstance(d.instance, NULL);
    return hr;
}

int vkbe_dev_open(vkbe_dev *d, uint32_t index, char *err, size_t err_size)
{
    VkPhysicalDevice phys[16];
    VkResult r;
    memset(d, 0, sizeof(*d));
    if (instance_open(d, err, err_size) != 0)
        return -1;
    uint32_t n = physical_devices(d->instance, phys, 16);
    if (n == 0 || index >= n) {
        snprintf(err, err_size, "vulkan: device %u does not exist (%u devices)", index, n);
        goto fail;
    }
    d->phys = phys[index];
    /* One code for the identity: the layer and psdb_client_local_targets ask so too. */
    vkid_query(vkGetPhysicalDeviceProperties, vkGetPhysicalDeviceProperties2, d->phys, &d->id);
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    uint32_t nq = 0;
    VkQueueFamilyProperties qf[16];
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    if (nq > 16)
        nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    d->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && d->queue_family == UINT32_MAX; i++)
        if ((qf[i].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT)) ==
            (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT))
            d->queue_family = i;
    if (d->queue_family == UINT32_MAX) {
        snprintf(err, err_size, "vulkan: device %u has no graphics and compute queue", index);
        goto fail;
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkPhysicalDeviceFeatures feats;
    vkGetPhysicalDeviceFeatures(d->phys, &feats);
    feats.robustBufferAccess = VK_FALSE;
    VkPhysicalDeviceVulkan13Features f13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    if (d->id.api_version >= VK_API_VERSION_1_3) {
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f13};
        vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    }
    d->dynamic_rendering = f13.dynamicRendering == VK_TRUE;
    VkPhysicalDeviceVulkan13Features en13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
        .dynamicRendering = VK_TRUE};
    /* Pipeline binaries (schema/COMPILER.md section 5) where the driver has them, unless the
     * VkPipelineCache way is asked for (PSDB_VULKAN_STRATEGY): each pipeline's own binaries. */
    const char *forced = getenv("PSDB_VULKAN_STRATEGY");
    int want_bins = d->id.strategy == VKID_PIPELINE_BINARY ||
                    (d->id.strategy == VKID_PIPELINE_CACHE && !(forced && *forced));
    d->binaries = want_bins && vkbin_supported(vkEnumerateDeviceExtensionProperties,
                                               vkGetPhysicalDeviceFeatures2, d->phys);
    if (d->id.strategy == VKID_PIPELINE_BINARY && !d->binaries) {
        snprintf(err, err_size, "vulkan: device %u has no VK_KHR_pipeline_binary", index);
        goto fail;
    }
    if (d->binaries)
        d->id.strategy = VKID_PIPELINE_BINARY;
    static const char *const bin_exts[] = {VK_KHR_MAINTENANCE_5_EXTENSION_NAME,
                                           VK_KHR_PIPELINE_BINARY_EXTENSION_NAME};
    VkPhysicalDeviceMaintenance5FeaturesKHR m5 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_5_FEATURES_KHR,
        .pNext = d->dynamic_rendering ? &en13 : NULL,
        .maintenance5 = VK_TRUE};
    VkPhysicalDevicePipelineBinaryFeaturesKHR bf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR,
        .pNext = &m5,
        .pipelineBinaries = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = d->binaries            ? (const void *)&bf
                                       : d->dynamic_rendering ? (const void *)&en13
                                                              : NULL,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = d->binaries ? 2u : 0u,
                              .ppEnabledExtensionNames = d->binaries ? bin_exts : NULL,
                              .pEnabledFeatures = &feats};
    if ((r = vkCreateDevice(d->phys, &dci, NULL, &d->device)) != VK_SUCCESS) {
        d->device = VK_NULL_HANDLE;
        snprintf(err, err_size, "vulkan: vkCreateDevice failed: VkResult %d", (int)r);
        goto fail;
    }
    if (d->binaries && vkbin_fns_load(vkGetDeviceProcAddr, d->device, &d->bin) != 0) {
        snprintf(err, err_size, "vulkan: VK_KHR_pipeline_binary enabled without its functions");
        goto fail;
    }
    d->create_rp2 = (PFN_vkCreateRenderPass2)vkGetDeviceProcAddr(d->device, "vkCreateRenderPass2");
    if (d->dynamic_rendering) {
        d->begin_rendering =
            (PFN_vkCmdBeginRendering)vkGetDeviceProcAddr(d->device, "vkCmdBeginRendering");
        d->end_rendering =
            (PFN_vkCmdEndRendering)vkGetDeviceProcAddr(d->device, "vkCmdEndRendering");
        d->dynamic_rendering = d->begin_rendering && d->end_rendering;
    }
    d->set_viewports =
        (PFN_vkCmdSetViewportWithCount)vkGetDeviceProcAddr(d->device, "vkCmdSetViewportWithCount");
    d->set_scissors =
        (PFN_vkCmdSetScissorWithCount)vkGetDeviceProcAddr(d->device, "vkCmdSetScissorWithCount");
    vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
    if (d->id.strategy == VKID_MESA_DISK_CACHE && (r = dummies_create(d)) != VK_SUCCESS) {
        snprintf(err, err_size, "vulkan: creating the first-use resources: VkResult %d", (int)r);
        goto fail;
    }
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateCommandPool(d->device, &pci, NULL, &d->pool)) != VK_SUCCESS ||
        (cai.commandPool = d->pool,
         (r = vkAllocateCommandBuffers(d->device, &cai, &d->cmd)) != VK_SUCCESS) ||
        (r = vkCreateFence(d->device, &fci, NULL, &d->fence)) != VK_SUCCESS) {
        snprintf(err, err_size, "vulkan: command pool, buffer or fence: VkResult %d", (int)r);
        goto fail;
    }
    return 0;
fail:
    vkbe_dev_close(d);
    return -1;
}

/* ---- The driver's disk cache --------------------------------------------------------------- */
void vkbe_remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[4096];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (vkbe_fmt(sub, sizeof(sub), "%s/%s", path, e->d_name) != 0)
            continue;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            vkbe_remove_tree(sub);
        else
            unlink(sub);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

void vkbe_private_cache(const char *dir)
{
    setenv("MESA_SHADER_CACHE_DIR", dir, 1);
    setenv("MESA_DISK_CACHE_SINGLE_FILE", "1", 1);
    unsetenv("MESA_SHADER_CACHE_DISABLE");
    unsetenv("MESA_DISK_CACHE_READ_ONLY_FOZ_DBS");
}
