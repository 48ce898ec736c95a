/* vk_backend.c - SODB §3 pipelines replayed on a real Vulkan device: compile into a PSDB, measure
 * time-to-usable.
 *
 * DESIGN: every entry is replayed alone: its objects (shader modules, immutable samplers, set
 * layouts, pipeline layout, render pass) are created from the decoded entry, the pipeline is
 * created with a fresh VkPipelineCache, then used once (a dispatch or a draw of no work), because
 * lavapipe compiles with LLVM at the first use, not at creation, and time-to-usable is what an
 * application waits for. A pipeline the driver fails to create is counted and reported, never
 * fatal. Where the driver's VkPipelineCache carries code, that cache's data is the pipeline's
 * value; for lavapipe (schema/COMPILER.md §5) the compile runs with Mesa's single-file disk cache
 * in a private folder and the PSDB carries that cache, written when the instance is destroyed. */
#include "build/vk_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef PSDB_TOOL_VK_BACKEND
#include <openssl/evp.h>
#include <vulkan/vulkan.h>

#include "vk_decode.h"
#include "vk_deliver.h"
#include "vk_identity.h"
#endif

#ifndef PSDB_TOOL_VK_BACKEND
int psdb__vk_available(void)
{
    return 0;
}

static psdb_hr no_backend(char *err, size_t err_size)
{
    snprintf(err, err_size, "this psdb was built without the vulkan backend (PSDB_VULKAN=OFF)");
    return PSDB_E_NOTIMPL;
}

psdb_hr psdb__vk_compile(const char *sodb_path, uint32_t device_index, const char *out_path,
                         FILE *progress, psdb__vk_compile_stats *stats, char *err, size_t err_size)
{
    (void)sodb_path, (void)device_index, (void)out_path, (void)progress, (void)stats;
    return no_backend(err, err_size);
}

psdb_hr psdb__vk_replay(const char *sodb_path, const char *psdb_path, uint32_t device_index,
                        psdb__vk_replay_stats *cold, psdb__vk_replay_stats *warm, char *err,
                        size_t err_size)
{
    (void)sodb_path, (void)psdb_path, (void)device_index, (void)cold, (void)warm;
    return no_backend(err, err_size);
}
#else

/* snprintf that says whether everything fit: 0, or -1 when truncated. */
static int fmt(char *buf, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int fmt(char *buf, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, size, f, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int psdb__vk_available(void)
{
    return 1;
}

/* ---- Device ------------------------------------------------------------------------------- */
typedef struct vdev {
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkPhysicalDeviceMemoryProperties mem;
    vkid id;
    int dynamic_rendering;
    PFN_vkCreateRenderPass2 create_rp2;
    PFN_vkCmdBeginRendering begin_rendering;
    PFN_vkCmdEndRendering end_rendering;
    PFN_vkCmdSetViewportWithCount set_viewports;
    PFN_vkCmdSetScissorWithCount set_scissors;
    /* What lavapipe's first use binds: its real work must never read an unbound descriptor or
     * vertex buffer. Created only for the Mesa strategy. */
    VkBuffer dummy_buf;
    VkDeviceMemory dummy_buf_mem;
    VkImage dummy_img;
    VkDeviceMemory dummy_img_mem;
    VkImageView dummy_view;
    VkSampler dummy_sampler;
    /* The VkPipelineCache strategy's one cache for all pipelines: compile merges each pipeline's
     * fresh cache into it; a replay with the PSDB makes it from the PSDB's merged data, as the
     * layer does. VK_NULL_HANDLE otherwise. */
    VkPipelineCache merged;
    /* 1x1 attachments for the first uses, made once per (format, samples, usage) and kept for
     * the device: an application renders into targets it already has, so making them is no part
     * of a pipeline's time-to-usable. */
    struct vatt {
        VkFormat format;
        VkSampleCountFlagBits samples;
        VkImageUsageFlags usage;
        VkImage image;
        VkDeviceMemory memory;
        VkImageView view;
    } att[32];
    uint32_t num_att;
} vdev;

#define DUMMY_BUFFER_SIZE 65536u

static int instance_open(vdev *d, char *err, size_t err_size)
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

static void identity_of(VkPhysicalDevice phys, vkid *id)
{
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(phys, &p);
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    int have_drv = p.apiVersion >= VK_API_VERSION_1_2;
    if (have_drv) {
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &drv};
        vkGetPhysicalDeviceProperties2(phys, &p2);
    }
    vkid_from_properties(&p, have_drv ? &drv : NULL, id);
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

/* An image with its view and memory, any of them VK_NULL_HANDLE. */
static void image_destroy(VkDevice dv, VkImageView view, VkImage image, VkDeviceMemory memory)
{
    if (view)
        vkDestroyImageView(dv, view, NULL);
    if (image)
        vkDestroyImage(dv, image, NULL);
    if (memory)
        vkFreeMemory(dv, memory, NULL);
}

static void dev_close(vdev *d)
{
    if (d->device) {
        vkDeviceWaitIdle(d->device);
        if (d->merged)
            vkDestroyPipelineCache(d->device, d->merged, NULL);
        for (uint32_t i = 0; i < d->num_att; i++)
            image_destroy(d->device, d->att[i].view, d->att[i].image, d->att[i].memory);
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

static VkResult alloc_bind(vdev *d, VkMemoryRequirements req, VkDeviceMemory *mem)
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

static VkResult dummies_create(vdev *d)
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
    if ((r = alloc_bind(d, req, &d->dummy_buf_mem)) != VK_SUCCESS ||
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
    if ((r = alloc_bind(d, req, &d->dummy_img_mem)) != VK_SUCCESS ||
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

/* Every core feature the device has except robustBufferAccess (robustness changes the code a
 * driver generates, and applications rarely enable it), and dynamic rendering where present. */
static int dev_open(vdev *d, uint32_t index, char *err, size_t err_size)
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
    identity_of(d->phys, &d->id);
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
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = d->dynamic_rendering ? &en13 : NULL,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .pEnabledFeatures = &feats};
    if ((r = vkCreateDevice(d->phys, &dci, NULL, &d->device)) != VK_SUCCESS) {
        d->device = VK_NULL_HANDLE;
        snprintf(err, err_size, "vulkan: vkCreateDevice failed: VkResult %d", (int)r);
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
    dev_close(d);
    return -1;
}

/* ---- One pipeline ----------------------------------------------------------------------------
 */
#define MAX_OBJS 256u

/* What one replay created, destroyed together. */
typedef struct vobjs {
    VkShaderModule modules[64];
    uint32_t num_modules;
    VkSampler samplers[MAX_OBJS];
    uint32_t num_samplers;
    VkDescriptorSetLayout sets[64];
    uint32_t num_sets;
    VkDescriptorSetLayout set_of[64]; /* by set number; VK_NULL_HANDLE where absent */
    VkDescriptorPool dpool;
    VkPipelineLayout layout;
    VkRenderPass rp;
    VkImage images[16];
    VkImageView views[16];
    VkDeviceMemory memory[16];
    uint32_t num_images;
    VkFramebuffer fb;
    VkPipelineCache cache;
    VkPipeline pipeline;
} vobjs;

static void objs_destroy(vdev *d, vobjs *o)
{
    VkDevice dv = d->device;
    if (o->pipeline)
        vkDestroyPipeline(dv, o->pipeline, NULL);
    if (o->cache)
        vkDestroyPipelineCache(dv, o->cache, NULL);
    if (o->fb)
        vkDestroyFramebuffer(dv, o->fb, NULL);
    if (o->dpool)
        vkDestroyDescriptorPool(dv, o->dpool, NULL);
    for (uint32_t i = 0; i < o->num_images; i++)
        image_destroy(dv, o->views[i], o->images[i], o->memory[i]);
    if (o->rp)
        vkDestroyRenderPass(dv, o->rp, NULL);
    if (o->layout)
        vkDestroyPipelineLayout(dv, o->layout, NULL);
    for (uint32_t i = 0; i < o->num_sets; i++)
        vkDestroyDescriptorSetLayout(dv, o->sets[i], NULL);
    for (uint32_t i = 0; i < o->num_samplers; i++)
        vkDestroySampler(dv, o->samplers[i], NULL);
    for (uint32_t i = 0; i < o->num_modules; i++)
        vkDestroyShaderModule(dv, o->modules[i], NULL);
    memset(o, 0, sizeof(*o));
}

static VkResult make_layout(vdev *d, vkdec_layout *l, vobjs *o)
{
    VkResult r = VK_SUCCESS;
    VkDescriptorSetLayout handles[64];
    if (l->ci.setLayoutCount > 64)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t i = 0; i < l->ci.setLayoutCount; i++) {
        handles[i] = VK_NULL_HANDLE;
        if (!l->present[i])
            continue;
        vkdec_set_layout *s = &l->sets[i];
        VkDescriptorSetLayoutBinding *b = (VkDescriptorSetLayoutBinding *)s->ci.pBindings;
        for (uint32_t j = 0; j < s->ci.bindingCount; j++) {
            if (!s->samplers[j])
                continue;
            if (b[j].descriptorCount > MAX_OBJS - o->num_samplers)
                return VK_ERROR_OUT_OF_HOST_MEMORY;
            VkSampler *imm = &o->samplers[o->num_samplers];
            for (uint32_t k = 0; k < b[j].descriptorCount; k++) {
                r = vkCreateSampler(d->device, &s->samplers[j][k], NULL, &imm[k]);
                if (r != VK_SUCCESS)
                    return r;
                o->num_samplers++;
            }
            b[j].pImmutableSamplers = imm;
        }
        r = vkCreateDescriptorSetLayout(d->device, &s->ci, NULL, &handles[i]);
        if (r != VK_SUCCESS)
            return r;
        o->sets[o->num_sets++] = handles[i];
        o->set_of[i] = handles[i];
    }
    l->ci.pSetLayouts = l->ci.setLayoutCount ? handles : NULL;
    r = vkCreatePipelineLayout(d->device, &l->ci, NULL, &o->layout);
    l->ci.pSetLayouts = NULL;
    return r;
}

static int is_depth_format(VkFormat f)
{
    switch (f) {
    case VK_FORMAT_D16_UNORM:
    case VK_FORMAT_X8_D24_UNORM_PACK32:
    case VK_FORMAT_D32_SFLOAT:
    case VK_FORMAT_S8_UINT:
    case VK_FORMAT_D16_UNORM_S8_UINT:
    case VK_FORMAT_D24_UNORM_S8_UINT:
    case VK_FORMAT_D32_SFLOAT_S8_UINT:
        return 1;
    default:
        return 0;
    }
}

static VkImageAspectFlags aspect_of(VkFormat f)
{
    switch (f) {
    case VK_FORMAT_S8_UINT:
        return VK_IMAGE_ASPECT_STENCIL_BIT;
    case VK_FORMAT_D16_UNORM_S8_UINT:
    case VK_FORMAT_D24_UNORM_S8_UINT:
    case VK_FORMAT_D32_SFLOAT_S8_UINT:
        return VK_IMAGE_ASPECT_DEPTH_BIT | VK_IMAGE_ASPECT_STENCIL_BIT;
    default:
        return is_depth_format(f) ? VK_IMAGE_ASPECT_DEPTH_BIT : VK_IMAGE_ASPECT_COLOR_BIT;
    }
}

/* A 1x1 attachment image and its view (the first use renders nothing into it): the device's
 * (d->att) when one of this kind exists or there is room, else one of this replay's. */
static VkResult make_image(vdev *d, vobjs *o, VkFormat format, VkSampleCountFlagBits samples,
                           VkImageUsageFlags usage, VkImageView *view)
{
    samples = samples ? samples : VK_SAMPLE_COUNT_1_BIT;
    for (uint32_t k = 0; k < d->num_att; k++) {
        if (d->att[k].view && d->att[k].format == format && d->att[k].samples == samples &&
            d->att[k].usage == usage) {
            *view = d->att[k].view;
            return VK_SUCCESS;
        }
    }
    VkImage *image;
    VkDeviceMemory *memory;
    VkImageView *made;
    if (d->num_att < sizeof(d->att) / sizeof(d->att[0])) {
        struct vatt *a = &d->att[d->num_att++];
        a->format = format;
        a->samples = samples;
        a->usage = usage;
        image = &a->image, memory = &a->memory, made = &a->view;
    } else if (o->num_images < 16) {
        uint32_t i = o->num_images++;
        image = &o->images[i], memory = &o->memory[i], made = &o->views[i];
    } else {
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    VkImageCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
                            .imageType = VK_IMAGE_TYPE_2D,
                            .format = format,
                            .extent = {1, 1, 1},
                            .mipLevels = 1,
                            .arrayLayers = 1,
                            .samples = samples,
                            .tiling = VK_IMAGE_TILING_OPTIMAL,
                            .usage = usage};
    VkResult r = vkCreateImage(d->device, &ii, NULL, image);
    if (r != VK_SUCCESS) {
        *image = VK_NULL_HANDLE;
        return r;
    }
    VkMemoryRequirements req;
    vkGetImageMemoryRequirements(d->device, *image, &req);
    uint32_t type = UINT32_MAX;
    for (uint32_t t = 0; t < d->mem.memoryTypeCount && type == UINT32_MAX; t++)
        if (req.memoryTypeBits & (1u << t))
            type = t;
    if (type == UINT32_MAX)
        return VK_ERROR_OUT_OF_DEVICE_MEMORY;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    if ((r = vkAllocateMemory(d->device, &ai, NULL, memory)) != VK_SUCCESS) {
        *memory = VK_NULL_HANDLE;
        return r;
    }
    if ((r = vkBindImageMemory(d->device, *image, *memory, 0)) != VK_SUCCESS)
        return r;
    VkImageViewCreateInfo vi = {.sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO,
                                .image = *image,
                                .viewType = VK_IMAGE_VIEW_TYPE_2D,
                                .format = format,
                                .subresourceRange = {aspect_of(format), 0, 1, 0, 1}};
    r = vkCreateImageView(d->device, &vi, NULL, made);
    if (r != VK_SUCCESS)
        *made = VK_NULL_HANDLE;
    *view = *made;
    return r;
}

static VkResult make_framebuffer(vdev *d, const VkRenderPassCreateInfo2 *rp, vobjs *o)
{
    VkImageView views[16];
    if (rp->attachmentCount > 16)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t a = 0; a < rp->attachmentCount; a++) {
        const VkAttachmentDescription2 *ad = &rp->pAttachments[a];
        VkImageUsageFlags usage = is_depth_format(ad->format)
                                      ? VK_IMAGE_USAGE_DEPTH_STENCIL_ATTACHMENT_BIT
                                      : VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT;
        for (uint32_t s = 0; s < rp->subpassCount; s++)
            for (uint32_t k = 0; k < rp->pSubpasses[s].inputAttachmentCount; k++)
                if (rp->pSubpasses[s].pInputAttachments[k].attachment == a)
                    usage |= VK_IMAGE_USAGE_INPUT_ATTACHMENT_BIT;
        VkResult r = make_image(d, o, ad->format, ad->samples, usage, &views[a]);
        if (r != VK_SUCCESS)
            return r;
    }
    VkFramebufferCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO,
                                  .renderPass = o->rp,
                                  .attachmentCount = rp->attachmentCount,
                                  .pAttachments = views,
                                  .width = 1,
                                  .height = 1,
                                  .layers = 1};
    return vkCreateFramebuffer(d->device, &fi, NULL, &o->fb);
}

static int dynamic_has(const VkPipelineDynamicStateCreateInfo *dy, VkDynamicState s)
{
    for (uint32_t i = 0; dy && i < dy->dynamicStateCount; i++)
        if (dy->pDynamicStates[i] == s)
            return 1;
    return 0;
}

#define MAX_WRITTEN 64u /* descriptors written per binding (bindless arrays stay partly bound) */

/* Binds a descriptor set of dummy resources for every set of the layout that can be allocated,
 * zero push constants and a dummy buffer per vertex binding, for lavapipe's real first use.
 * Texel buffers, input attachments and extension types stay unwritten (no vkdemo or synth shader
 * has them). */
static VkResult bind_dummies(vdev *d, vkdec_pipeline *p, vobjs *o, VkPipelineBindPoint bp)
{
    static const uint8_t zeros[4096];
    VkCommandBuffer c = d->cmd;
    VkResult r;
    if (!p->has_layout)
        return VK_SUCCESS;
    vkdec_layout *l = &p->layout;
    VkDescriptorPoolSize sizes[11];
    uint32_t num_sizes = 0, max_sets = 0, pool_flags = 0;
    uint32_t per_type[11] = {0};
    for (uint32_t i = 0; i < l->ci.setLayoutCount && i < 64; i++) {
        if (!l->present[i] ||
            (l->sets[i].ci.flags & VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR))
            continue;
        max_sets++;
        if (l->sets[i].ci.flags & VK_DESCRIPTOR_SET_LAYOUT_CREATE_UPDATE_AFTER_BIND_POOL_BIT)
            pool_flags |= VK_DESCRIPTOR_POOL_CREATE_UPDATE_AFTER_BIND_BIT;
        for (uint32_t j = 0; j < l->sets[i].ci.bindingCount; j++) {
            const VkDescriptorSetLayoutBinding *b = &l->sets[i].ci.pBindings[j];
            if ((uint32_t)b->descriptorType < 11)
                per_type[b->descriptorType] += b->descriptorCount;
        }
    }
    for (uint32_t t = 0; t < 11; t++)
        if (per_type[t])
            sizes[num_sizes++] = (VkDescriptorPoolSize){(VkDescriptorType)t, per_type[t]};
    if (max_sets && num_sizes) {
        VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                          .flags = pool_flags,
                                          .maxSets = max_sets,
                                          .poolSizeCount = num_sizes,
                                          .pPoolSizes = sizes};
        if ((r = vkCreateDescriptorPool(d->device, &pci, NULL, &o->dpool)) != VK_SUCCESS)
            return r;
    }
    for (uint32_t i = 0; o->dpool && i < l->ci.setLayoutCount && i < 64; i++) {
        vkdec_set_layout *sl = &l->sets[i];
        if (!l->present[i] || !o->set_of[i] ||
            (sl->ci.flags & VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR))
            continue;
        VkDescriptorSet set;
        VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                          .descriptorPool = o->dpool,
                                          .descriptorSetCount = 1,
                                          .pSetLayouts = &o->set_of[i]};
        if ((r = vkAllocateDescriptorSets(d->device, &ai, &set)) != VK_SUCCESS)
            return r;
        uint32_t dynamic = 0;
        for (uint32_t j = 0; j < sl->ci.bindingCount; j++) {
            const VkDescriptorSetLayoutBinding *b = &sl->ci.pBindings[j];
            VkDescriptorType t = b->descriptorType;
            if (t == VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC ||
                t == VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC)
                dynamic += b->descriptorCount;
            /* A variable-count binding was allocated with no descriptors. */
            if (sl->flags.pBindingFlags &&
                (sl->flags.pBindingFlags[j] & VK_DESCRIPTOR_BINDING_VARIABLE_DESCRIPTOR_COUNT_BIT))
                continue;
            if (t == VK_DESCRIPTOR_TYPE_SAMPLER && sl->samplers[j])
                continue; /* immutable */
            VkDescriptorImageInfo ii = {d->dummy_sampler, d->dummy_view, VK_IMAGE_LAYOUT_GENERAL};
            VkDescriptorBufferInfo bi = {d->dummy_buf, 0, VK_WHOLE_SIZE};
            VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = b->binding,
                                      .descriptorCount = 1,
                                      .descriptorType = t};
            switch (t) {
            case VK_DESCRIPTOR_TYPE_SAMPLER:
            case VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER:
            case VK_DESCRIPTOR_TYPE_SAMPLED_IMAGE:
            case VK_DESCRIPTOR_TYPE_STORAGE_IMAGE:
                w.pImageInfo = &ii;
                break;
            case VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER:
            case VK_DESCRIPTOR_TYPE_STORAGE_BUFFER:
            case VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER_DYNAMIC:
            case VK_DESCRIPTOR_TYPE_STORAGE_BUFFER_DYNAMIC:
                w.pBufferInfo = &bi;
                break;
            default:
                continue;
            }
            for (uint32_t k = 0; k < b->descriptorCount && k < MAX_WRITTEN; k++) {
                w.dstArrayElement = k;
                vkUpdateDescriptorSets(d->device, 1, &w, 0, NULL);
            }
        }
        uint32_t offsets[256] = {0};
        if (dynamic > 256)
            return VK_ERROR_OUT_OF_HOST_MEMORY;
        vkCmdBindDescriptorSets(c, bp, o->layout, i, 1, &set, dynamic, offsets);
    }
    for (uint32_t i = 0; i < l->ci.pushConstantRangeCount; i++) {
        const VkPushConstantRange *pc = &l->ci.pPushConstantRanges[i];
        if (pc->size <= sizeof(zeros))
            vkCmdPushConstants(c, o->layout, pc->stageFlags, pc->offset, pc->size, zeros);
    }
    const VkPipelineVertexInputStateCreateInfo *vi =
        p->graphics ? p->graphics_ci.pVertexInputState : NULL;
    for (uint32_t i = 0; vi && i < vi->vertexBindingDescriptionCount; i++) {
        VkDeviceSize zero = 0;
        vkCmdBindVertexBuffers(c, vi->pVertexBindingDescriptions[i].binding, 1, &d->dummy_buf,
                               &zero);
    }
    return VK_SUCCESS;
}

/* The first use, submitted and waited for. lavapipe compiles at the first use, and compiles
 * everything only for real work (a dispatch of no groups or a draw of no vertices leaves most of
 * the code uncompiled: measured 4.7 KB of cache instead of 14.7 KB for vkdemo): one workgroup,
 * or one triangle into a 1x1 target, with dummy resources bound everywhere. A driver
 * that compiles at creation (the VkPipelineCache strategy) gets no work at all: unbound
 * descriptors must never be touched on a GPU. */
static VkResult first_use(vdev *d, vkdec_pipeline *p, vobjs *o)
{
    VkCommandBuffer c = d->cmd;
    uint32_t n = d->id.strategy == VKID_MESA_DISK_CACHE ? 1u : 0u;
    VkResult r;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkImageView color_views[16];
    VkRenderingAttachmentInfo color[16], depth, stencil;
    if ((r = vkResetCommandBuffer(c, 0)) != VK_SUCCESS || (r = vkBeginCommandBuffer(c, &bi)))
        return r;
    if (!p->graphics) {
        vkCmdBindPipeline(c, VK_PIPELINE_BIND_POINT_COMPUTE, o->pipeline);
        if (n && (r = bind_dummies(d, p, o, VK_PIPELINE_BIND_POINT_COMPUTE)) != VK_SUCCESS)
            return r;
        vkCmdDispatch(c, n, n, n);
    } else {
        VkRect2D area = {{0, 0}, {1, 1}};
        if (p->render_pass) {
            if ((r = make_framebuffer(d, &p->rp, o)) != VK_SUCCESS)
                return r;
            VkRenderPassBeginInfo rb = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO,
                                        .renderPass = o->rp,
                                        .framebuffer = o->fb,
                                        .renderArea = area};
            vkCmdBeginRenderPass(c, &rb, VK_SUBPASS_CONTENTS_INLINE);
            for (uint32_t s = 0; s < p->graphics_ci.subpass; s++)
                vkCmdNextSubpass(c, VK_SUBPASS_CONTENTS_INLINE);
        } else {
            const VkPipelineRenderingCreateInfo *ri = &p->rendering;
            VkSampleCountFlagBits samples =
                p->graphics_ci.pMultisampleState
                    ? p->graphics_ci.pMultisampleState->rasterizationSamples
                    : VK_SAMPLE_COUNT_1_BIT;
            uint32_t nc = ri->colorAttachmentCount > 16 ? 16 : ri->colorAttachmentCount;
            memset(color, 0, sizeof(color));
            memset(&depth, 0, sizeof(depth));
            memset(&stencil, 0, sizeof(stencil));
            for (uint32_t i = 0; i < nc; i++) {
                color[i].sType = VK_STRUCTURE_TYPE_RENDERING_ATTACHMENT_INFO;
                color_views[i] = VK_NULL_HANDLE;
                if (ri->pColorAttachmentFormats[i] != VK_FORMAT_UNDEFINED &&
                    (r = make_image(d, o, ri->pColorAttachmentFormats[i], samples,
                                    VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT, &color_views[i])))
                    return r;
                color[i].imageView = color_views[i];
                color[i].imageLayout = VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL;
                color[i].loadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
                color[i].storeOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
            }
            VkRenderingInfo rinfo = {.sType = VK_STRUCTURE_TYPE_RENDERING_INFO,
                                     .renderArea = area,
                                     .layerCount = 1,
                                     .viewMask = ri->viewMask,
                                     .colorAttachmentCount = nc,
                                     .pColorAttachments = nc ? color : NULL};
            VkFormat df = ri->depthAttachmentFormat, sf = ri->stencilAttachmentFormat;
            VkImageView dview = VK_NULL_HANDLE;
            VkFormat ds = df != VK_FORMAT_UNDEFINED ? df : sf;
            if (ds != VK_FORMAT_UNDEFINED &&
                (r = make_image(d, o, ds, samples, VK_IMAGE_USAGE_DEPTH_STENCIL_ATTACHMENT_BIT,
                                &dview)))
                return r;
            depth.sType = stencil.sType = VK_STRUCTURE_TYPE_RENDERING_ATTACHMENT_INFO;
            depth.imageView = df != VK_FORMAT_UNDEFINED ? dview : VK_NULL_HANDLE;
            stencil.imageView = sf != VK_FORMAT_UNDEFINED ? dview : VK_NULL_HANDLE;
            depth.imageLayout = stencil.imageLayout =
                VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL;
            depth.loadOp = stencil.loadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
            depth.storeOp = stencil.storeOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
            rinfo.pDepthAttachment = df != VK_FORMAT_UNDEFINED ? &depth : NULL;
            rinfo.pStencilAttachment = sf != VK_FORMAT_UNDEFINED ? &stencil : NULL;
            if (!d->dynamic_rendering)
                return VK_ERROR_FEATURE_NOT_PRESENT;
            d->begin_rendering(c, &rinfo);
        }
        vkCmdBindPipeline(c, VK_PIPELINE_BIND_POINT_GRAPHICS, o->pipeline);
        if (n && (r = bind_dummies(d, p, o, VK_PIPELINE_BIND_POINT_GRAPHICS)) != VK_SUCCESS)
            return r;
        const VkPipelineDynamicStateCreateInfo *dy = p->dynamic;
        VkViewport vp = {0, 0, 1, 1, 0, 1};
        uint32_t nvp = p->graphics_ci.pViewportState && p->graphics_ci.pViewportState->viewportCount
                           ? p->graphics_ci.pViewportState->viewportCount
                           : 1;
        VkViewport vps[16];
        VkRect2D scs[16];
        if (nvp > 16)
            nvp = 16;
        for (uint32_t i = 0; i < nvp; i++) {
            vps[i] = vp;
            scs[i] = area;
        }
        if (dynamic_has(dy, VK_DYNAMIC_STATE_VIEWPORT))
            vkCmdSetViewport(c, 0, nvp, vps);
        if (dynamic_has(dy, VK_DYNAMIC_STATE_SCISSOR))
            vkCmdSetScissor(c, 0, nvp, scs);
        if (dynamic_has(dy, VK_DYNAMIC_STATE_VIEWPORT_WITH_COUNT) && d->set_viewports)
            d->set_viewports(c, 1, vps);
        if (dynamic_has(dy, VK_DYNAMIC_STATE_SCISSOR_WITH_COUNT) && d->set_scissors)
            d->set_scissors(c, 1, scs);
        if (dynamic_has(dy, VK_DYNAMIC_STATE_LINE_WIDTH))
            vkCmdSetLineWidth(c, 1.0f);
        vkCmdDraw(c, 3 * n, 1, 0, 0);
        if (p->render_pass)
            vkCmdEndRenderPass(c);
        else
            d->end_rendering(c);
    }
    if ((r = vkEndCommandBuffer(c)) != VK_SUCCESS)
        return r;
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c};
    if ((r = vkResetFences(d->device, 1, &d->fence)) != VK_SUCCESS ||
        (r = vkQueueSubmit(d->queue, 1, &si, d->fence)) != VK_SUCCESS)
        return r;
    /* The fence is polled for the first millisecond, as a renderer waiting on its frame does: a
     * blocking wait adds the thread's wake-up (tens of microseconds) to every first use, in both
     * passes alike, which is no part of the pipeline's readiness. */
    double until = now_s() + 0.001;
    while ((r = vkGetFenceStatus(d->device, d->fence)) == VK_NOT_READY && now_s() < until)
        ;
    return r == VK_NOT_READY ? vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX) : r;
}

/* Replays one decoded pipeline with a fresh cache made from initial data, or with d->merged when
 * use_merged, or with none; with cache_out, a fresh cache's data afterwards (malloc'd), and that
 * cache merged into d->merged when there is one. *seconds is creation + first use, *create_s the
 * creation alone. Returns the first failing VkResult; *what names the step. */
static VkResult replay_one(vdev *d, vkdec_pipeline *p, const void *initial, size_t initial_size,
                           int use_merged, void **cache_out, size_t *cache_size, double *seconds,
                           double *create_s, const char **what)
{
    vobjs o;
    VkResult r = VK_SUCCESS;
    memset(&o, 0, sizeof(o));
    if (cache_out)
        *cache_out = NULL;
    *what = "creating shader modules";
    if (p->num_stages > 64) {
        r = VK_ERROR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    for (uint32_t i = 0; i < p->num_stages; i++) {
        if ((r = vkCreateShaderModule(d->device, &p->modules[i], NULL, &o.modules[i])))
            goto cleanup;
        o.num_modules++;
        p->stages[i].module = o.modules[i];
    }
    *what = "creating the pipeline layout";
    if (p->has_layout && (r = make_layout(d, &p->layout, &o)) != VK_SUCCESS)
        goto cleanup;
    if (p->render_pass) {
        *what = "creating the render pass";
        /* Created the way the application created it (its pipelines' keys say which). */
        if (p->rp_version == 1)
            r = vkCreateRenderPass(d->device, &p->rp1, NULL, &o.rp);
        else
            r = d->create_rp2 ? d->create_rp2(d->device, &p->rp, NULL, &o.rp)
                              : VK_ERROR_FEATURE_NOT_PRESENT;
        if (r != VK_SUCCESS)
            goto cleanup;
    }
    *what = "creating the pipeline cache";
    VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                     .initialDataSize = initial ? initial_size : 0,
                                     .pInitialData = initial};
    /* A cold replay passes no cache at all, as an application without one: under the layer it
     * is then served the way such an application is. */
    int fresh = !use_merged && (initial || cache_out);
    if (fresh && (r = vkCreatePipelineCache(d->device, &cci, NULL, &o.cache)) != VK_SUCCESS)
        goto cleanup;
    VkPipelineCache cache = use_merged ? d->merged : o.cache;
    *what = "creating the pipeline";
    double t0 = now_s();
    if (p->graphics) {
        p->graphics_ci.layout = o.layout;
        p->graphics_ci.renderPass = o.rp;
        r = vkCreateGraphicsPipelines(d->device, cache, 1, &p->graphics_ci, NULL, &o.pipeline);
    } else {
        p->compute.layout = o.layout;
        p->compute.stage.module = o.modules[0];
        r = vkCreateComputePipelines(d->device, cache, 1, &p->compute, NULL, &o.pipeline);
    }
    if (r != VK_SUCCESS) {
        o.pipeline = VK_NULL_HANDLE;
        goto cleanup;
    }
    if (create_s)
        *create_s = now_s() - t0;
    *what = "using the pipeline once";
    if ((r = first_use(d, p, &o)) != VK_SUCCESS)
        goto cleanup;
    *seconds = now_s() - t0;
    if (cache_out) {
        *what = "reading the pipeline cache";
        size_t n = 0;
        if ((r = vkGetPipelineCacheData(d->device, o.cache, &n, NULL)) != VK_SUCCESS)
            goto cleanup;
        void *b = malloc(n ? n : 1);
        if (!b) {
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
            goto cleanup;
        }
        if ((r = vkGetPipelineCacheData(d->device, o.cache, &n, b)) != VK_SUCCESS) {
            free(b);
            goto cleanup;
        }
        *cache_out = b;
        *cache_size = n;
        *what = "merging the pipeline cache";
        if (d->merged && (r = vkMergePipelineCaches(d->device, d->merged, 1, &o.cache))) {
            free(b);
            *cache_out = NULL;
            goto cleanup;
        }
    }
cleanup:
    objs_destroy(d, &o);
    return r;
}

/* ---- Compile ---------------------------------------------------------------------------------
 */
typedef struct vcompile {
    vdev *d;
    psdb_writer *w;
    psdb__vk_compile_stats st;
    FILE *progress;
    double last_progress, t0;
    uint64_t total, index;
    psdb_hr hr;
    char *err;
    size_t err_size;
    char first_failure[256];
} vcompile;

static const char MESA_META[] = "mesa-disk-cache";

static int compile_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                         size_t desc_size, void *arg)
{
    vcompile *c = arg;
    vkdec_pipeline p;
    void *blob = NULL;
    size_t blob_n = 0;
    double secs = 0;
    const char *what = "decoding";
    psdb_hr hr = PSDB_S_OK;
    (void)version;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return 0; /* D3D12 entries: the reference compiler's */
    c->index++;
    int drc = vkdec_pipeline_decode(desc, desc_size, kind == PSDB_SODB_VK_GRAPHICS, &p);
    if (drc != 0) {
        hr = drc == -2 ? PSDB_E_OUTOFMEMORY : PSDB_E_CACHE_CORRUPT;
        snprintf(c->err, c->err_size, "entry %llu: decoding the vulkan pipeline failed: %s",
                 (unsigned long long)c->index, psdb_hr_str(hr));
        c->hr = hr;
        return 1;
    }
    int mesa = c->d->id.strategy == VKID_MESA_DISK_CACHE;
    VkResult r = replay_one(c->d, &p, NULL, 0, 0, mesa ? NULL : &blob, &blob_n, &secs, NULL, &what);
    vkdec_free(&p);
    if (r == VK_SUCCESS && !mesa && vkid_check_cache_header(&c->d->id, blob, blob_n) != 0)
        r = VK_ERROR_INITIALIZATION_FAILED, what = "checking the pipeline cache header";
    if (r != VK_SUCCESS) {
        if (c->st.failed++ == 0)
            snprintf(c->first_failure, sizeof(c->first_failure),
                     "entry %llu: %s failed: VkResult %d", (unsigned long long)c->index, what,
                     (int)r);
        free(blob);
        goto progress;
    }
    /* One value per pipeline under its SODB object key: the cache data (VkPipelineCache
     * drivers), or only the metadata record (Mesa: the code is in the shared cache values). */
    if (!mesa)
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_OBJECT_CODE, blob, blob_n);
    if (PSDB_SUCCEEDED(hr))
        hr = mesa ? psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, MESA_META,
                                          sizeof(MESA_META) - 1)
                  : psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, "vk-pipeline-cache",
                                          17);
    psdb_value_ref ref = {key, 32};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, 32, version, 1, &ref);
    free(blob);
    if (PSDB_FAILED(hr)) {
        snprintf(c->err, c->err_size, "entry %llu: writing the psdb failed: %s",
                 (unsigned long long)c->index, psdb_hr_str(hr));
        c->hr = hr;
        return 1;
    }
    c->st.pipelines++;
    c->st.code_bytes += blob_n;
    if (kind == PSDB_SODB_VK_COMPUTE)
        c->st.compute++;
    else
        c->st.graphics++;
progress:
    if (c->progress && now_s() - c->last_progress >= 2.0) {
        c->last_progress = now_s();
        fprintf(c->progress, "psdb compile: %llu/%llu pipelines, %llu failed, %.1f s\n",
                (unsigned long long)c->index, (unsigned long long)c->total,
                (unsigned long long)c->st.failed, c->last_progress - c->t0);
        fflush(c->progress);
    }
    return 0;
}

/* The merged cache (every pipeline compiled, each one's fresh cache merged in) as one more value
 * of the PSDB under vkid_merged_key, checked like each pipeline's. */
static psdb_hr put_merged(vdev *d, psdb_writer *w, uint64_t *code_bytes, char *err, size_t err_size)
{
    uint8_t key[32];
    void *b = NULL;
    size_t n = 0;
    psdb_hr hr = PSDB_E_FAIL;
    VkResult r = vkGetPipelineCacheData(d->device, d->merged, &n, NULL);
    if (r == VK_SUCCESS) {
        b = malloc(n ? n : 1);
        r = b ? vkGetPipelineCacheData(d->device, d->merged, &n, b) : VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (r != VK_SUCCESS || vkid_check_cache_header(&d->id, b, n) != 0) {
        snprintf(err, err_size, "reading the merged pipeline cache failed: VkResult %d", (int)r);
        goto cleanup;
    }
    vkid_merged_key(key);
    psdb_value_ref ref = {key, 32};
    hr = psdb_writer_put_value(w, key, 32, PSDB_VALUE_OBJECT_CODE, b, n);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_value(w, key, 32, PSDB_VALUE_METADATA, "vk-pipeline-cache-all", 21);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(w, key, 32, 1, 1, &ref);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "writing the merged pipeline cache: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    *code_bytes += n;
cleanup:
    free(b);
    return hr;
}

static int count_vk(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                    size_t desc_size, void *arg)
{
    (void)key, (void)version, (void)desc, (void)desc_size;
    if (kind == PSDB_SODB_VK_COMPUTE || kind == PSDB_SODB_VK_GRAPHICS)
        (*(uint64_t *)arg)++;
    return 0;
}

/* Reads a whole file (malloc'd). */
static int read_file(const char *path, void **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *b = NULL;
    long n;
    *out = NULL;
    if (!f)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(b = malloc((size_t)n ? (size_t)n : 1)) || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return -1;
    }
    fclose(f);
    *out = b;
    *size = (size_t)n;
    return 0;
}

/* Finds <dir>/mesa_shader_cache_sf/<identity>/<driver>/foz_cache.foz; folder gets
 * "<identity>/<driver>". */
static int find_mesa_cache(const char *dir, char *folder, size_t folder_size)
{
    char base[4096], sub[4096], file[4096];
    if (fmt(base, sizeof(base), "%s/mesa_shader_cache_sf", dir) != 0)
        return -1;
    DIR *d1 = opendir(base);
    int found = -1;
    struct dirent *e1, *e2;
    while (d1 && found != 0 && (e1 = readdir(d1))) {
        if (e1->d_name[0] == '.')
            continue;
        if (fmt(sub, sizeof(sub), "%s/%s", base, e1->d_name) != 0)
            continue;
        DIR *d2 = opendir(sub);
        while (d2 && found != 0 && (e2 = readdir(d2))) {
            struct stat st;
            if (e2->d_name[0] == '.')
                continue;
            if (fmt(file, sizeof(file), "%s/%s/foz_cache.foz", sub, e2->d_name) == 0 &&
                stat(file, &st) == 0 && st.st_size > 0 &&
                fmt(folder, folder_size, "%s/%s", e1->d_name, e2->d_name) == 0)
                found = 0;
        }
        if (d2)
            closedir(d2);
    }
    if (d1)
        closedir(d1);
    return found;
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[4096];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fmt(sub, sizeof(sub), "%s/%s", path, e->d_name) != 0)
            continue;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(sub);
        else
            unlink(sub);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

/* Mesa reads its cache settings when the driver opens its cache (instance creation for
 * lavapipe): a private single-file cache, read-write, nothing shipped read-only. */
static void mesa_private_cache(const char *dir)
{
    setenv("MESA_SHADER_CACHE_DIR", dir, 1);
    setenv("MESA_DISK_CACHE_SINGLE_FILE", "1", 1);
    unsetenv("MESA_SHADER_CACHE_DISABLE");
    unsetenv("MESA_DISK_CACHE_READ_ONLY_FOZ_DBS");
}

psdb_hr psdb__vk_compile(const char *sodb_path, uint32_t device_index, const char *out_path,
                         FILE *progress, psdb__vk_compile_stats *stats, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *s = NULL;
    psdb_app_identity app;
    vdev d;
    vcompile c;
    char tmpl[] = "/tmp/psdb-vk-compile-XXXXXX";
    char *cache_dir = NULL;
    void *foz = NULL, *idx = NULL;
    size_t foz_n = 0, idx_n = 0;
    char folder[1024];

    memset(&d, 0, sizeof(d));
    memset(&c, 0, sizeof(c));
    err[0] = '\0';
    c.t0 = now_s();
    hr = psdb_sodb_open(sodb_path, &s);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot open SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_sodb_get_identity(s, &app);
    psdb_sodb_foreach(s, count_vk, &c.total);
    if (c.total == 0) {
        hr = PSDB_E_INVALIDARG;
        snprintf(err, err_size, "SODB %s holds no vulkan pipeline", sodb_path);
        goto cleanup;
    }
    cache_dir = mkdtemp(tmpl);
    if (!cache_dir) {
        hr = PSDB_E_IO;
        snprintf(err, err_size, "mkdtemp %s: %s", tmpl, strerror(errno));
        goto cleanup;
    }
    mesa_private_cache(cache_dir);
    /* The NVIDIA driver's own disk cache off: every pipeline is compiled here. */
    setenv("__GL_SHADER_DISK_CACHE", "0", 1);
    if (dev_open(&d, device_index, err, err_size) != 0) {
        hr = PSDB_E_ADAPTER_NOT_FOUND;
        goto cleanup;
    }
    if (d.id.strategy == VKID_PIPELINE_CACHE) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
        VkResult r = vkCreatePipelineCache(d.device, &cci, NULL, &d.merged);
        if (r != VK_SUCCESS) {
            d.merged = VK_NULL_HANDLE;
            hr = PSDB_E_FAIL;
            snprintf(err, err_size, "creating the merged pipeline cache failed: VkResult %d",
                     (int)r);
            goto cleanup;
        }
    }
    psdb_target t = {d.id.family, d.id.abi, d.id.compiler_version, 0};
    hr = psdb_writer_create(out_path, &app, &t, &c.w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot create %s: %s", out_path, psdb_hr_str(hr));
        goto cleanup;
    }
    if (progress) {
        fprintf(progress, "psdb compile: %llu vulkan pipelines on %s (%s, %s)\n",
                (unsigned long long)c.total, d.id.device_name, d.id.family,
                d.id.strategy == VKID_MESA_DISK_CACHE ? "mesa disk cache" : "pipeline cache");
        fflush(progress);
    }
    c.d = &d;
    c.progress = progress;
    c.last_progress = now_s();
    c.err = err;
    c.err_size = err_size;
    hr = psdb_sodb_foreach(s, compile_entry, &c);
    if (PSDB_FAILED(c.hr)) {
        hr = c.hr;
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "reading SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    if (c.st.pipelines == 0) {
        hr = PSDB_E_FAIL;
        snprintf(err, err_size, "no pipeline could be created (%llu failed; first: %s)",
                 (unsigned long long)c.st.failed, c.first_failure);
        goto cleanup;
    }
    int mesa = d.id.strategy == VKID_MESA_DISK_CACHE;
    if (!mesa && (hr = put_merged(&d, c.w, &c.st.code_bytes, err, err_size)) < 0)
        goto cleanup;
    dev_close(&d); /* Mesa writes its cache out when the driver closes it */
    if (mesa) {
        char path[4096];
        uint8_t kfoz[32], kidx[32];
        if (find_mesa_cache(cache_dir, folder, sizeof(folder)) != 0) {
            hr = PSDB_E_FAIL;
            snprintf(err, err_size, "mesa wrote no single-file cache under %s", cache_dir);
            goto cleanup;
        }
        int rc =
            fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache.foz", cache_dir, folder);
        if (rc == 0)
            rc = read_file(path, &foz, &foz_n);
        if (rc == 0)
            rc = fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache_idx.foz", cache_dir,
                     folder);
        if (rc != 0 || read_file(path, &idx, &idx_n) != 0) {
            hr = PSDB_E_IO;
            snprintf(err, err_size, "reading mesa's cache under %s: %s", cache_dir,
                     strerror(errno));
            goto cleanup;
        }
        vkid_mesa_key(0, kfoz);
        vkid_mesa_key(1, kidx);
        psdb_value_ref refs[2] = {{kfoz, 32}, {kidx, 32}};
        hr = psdb_writer_put_value(c.w, kfoz, 32, PSDB_VALUE_OBJECT_CODE, foz, foz_n);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_value(c.w, kfoz, 32, PSDB_VALUE_METADATA, folder, strlen(folder));
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_value(c.w, kidx, 32, PSDB_VALUE_OBJECT_CODE, idx, idx_n);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_group(c.w, kfoz, 32, 1, 2, refs);
        c.st.code_bytes += foz_n + idx_n;
        if (PSDB_FAILED(hr)) {
            snprintf(err, err_size, "writing the mesa cache into %s: %s", out_path,
                     psdb_hr_str(hr));
            goto cleanup;
        }
    }
    hr = psdb_writer_finish(c.w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "writing %s: %s", out_path, psdb_hr_str(hr));
        goto cleanup;
    }
    c.st.seconds = now_s() - c.t0;
    if (stats)
        *stats = c.st;
    if (c.st.failed && progress)
        fprintf(progress, "psdb compile: %llu pipelines failed to create (first: %s)\n",
                (unsigned long long)c.st.failed, c.first_failure);
cleanup:
    dev_close(&d);
    psdb_writer_release(c.w);
    psdb_sodb_release(s);
    if (cache_dir)
        remove_tree(cache_dir);
    free(foz);
    free(idx);
    return hr;
}

/* ---- Replay (time-to-usable) -----------------------------------------------------------------
 */
typedef struct vpass {
    vdev *d;
    psdb_file *f;
    vkdl_keys keys;
    uint64_t n, cap, failed, hits, misses;
    double *ms;
    double lookup_s, create_s, use_s, objects_s;
} vpass;

static int replay_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                        size_t desc_size, void *arg)
{
    vpass *v = arg;
    vkdec_pipeline p;
    void *data = NULL;
    size_t size = 0;
    int bad = 0;
    double secs = 0, create_s = 0;
    const char *what;
    int hit = 0;
    (void)version;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return 0;
    if (vkdec_pipeline_decode(desc, desc_size, kind == PSDB_SODB_VK_GRAPHICS, &p) != 0) {
        v->failed++;
        return 0;
    }
    double t0 = now_s();
    if (v->f) {
        /* As the layer: with a merged cache the hit needs only the key. */
        hit = vkdl_lookup(v->f, &v->keys, &v->d->id, key, v->d->merged ? NULL : &data, &size, &bad);
        if (hit == 1)
            v->hits++;
        else
            v->misses++;
    }
    double lookup = now_s() - t0;
    VkResult r = replay_one(v->d, &p, data, size, hit == 1 && v->d->merged, NULL, NULL, &secs,
                            &create_s, &what);
    /* A pipeline's time-to-usable runs from the application asking for it (the lookup, then
     * vkCreate*Pipelines) to its first use done. Its shader modules, layouts and render pass
     * are the application's own objects, made before it asks, with or without a PSDB: they are
     * counted apart (objects_s). */
    double total = lookup + secs;
    double objects = now_s() - t0 - total;
    free(data);
    vkdec_free(&p);
    if (r != VK_SUCCESS) {
        v->failed++;
        return 0;
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        double *m = realloc(v->ms, cap * sizeof(*m));
        if (!m)
            return 1;
        v->ms = m;
        v->cap = cap;
    }
    v->ms[v->n++] = total * 1000.0;
    v->lookup_s += lookup;
    v->create_s += create_s;
    v->use_s += secs - create_s;
    v->objects_s += objects > 0 ? objects : 0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds psdb_file_check takes to prove f by the SHA-256 of the whole file (the proof of an
 * installed PSDB), the digest taken first from path outside the clock; -1 when it cannot run. */
/* The SHA-256 of the file at path into out: 0, or -1 when it cannot be read. */
static int file_sha256(const char *path, uint8_t out[32])
{
    uint8_t buf[1 << 16];
    unsigned n = 0;
    ssize_t r = 0;
    int rc = -1;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (!c || fd < 0 || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1)
        goto cleanup;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        EVP_DigestUpdate(c, buf, (size_t)r);
    if (r == 0 && EVP_DigestFinal_ex(c, out, &n) == 1 && n == 32)
        rc = 0;
cleanup:
    if (fd >= 0)
        close(fd);
    EVP_MD_CTX_free(c);
    return rc;
}

/* Seconds psdb_file_check takes to prove f by the SHA-256 of the whole file on its own (what the
 * layer overlaps with the device's creation), -1 when it fails. */
static double file_sha256_time(psdb_file *f, const uint8_t sha[32])
{
    double t = now_s();
    return psdb_file_check(f, PSDB_FILE_CHECK_SHA256, sha) == PSDB_S_OK ? now_s() - t : -1;
}

/* One pass in this process; 0 or -1 with err set. */
static int run_pass(const char *sodb_path, const char *psdb_path, uint32_t device_index,
                    psdb__vk_replay_stats *out, char *err, size_t err_size)
{
    psdb_sodb *s = NULL;
    vdev d;
    vpass v;
    vkdl_proof *proof = NULL;
    vkdl_trust trust = {0};
    char tmpl[] = "/tmp/psdb-vk-replay-XXXXXX";
    char *dir = NULL, msg[512] = "";
    int rc = -1;
    memset(&d, 0, sizeof(d));
    memset(&v, 0, sizeof(v));
    memset(out, 0, sizeof(*out));
    psdb_hr hr = psdb_sodb_open(sodb_path, &s);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot open SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    /* Cold: no driver disk cache at all. With the PSDB: Mesa reads the shipped cache from an
     * otherwise empty cache folder; the NVIDIA driver's own cache stays off. */
    setenv("__GL_SHADER_DISK_CACHE", "0", 1);
    unsetenv("MESA_DISK_CACHE_READ_ONLY_FOZ_DBS");
    if (!psdb_path) {
        setenv("MESA_SHADER_CACHE_DISABLE", "true", 1);
    } else {
        dir = mkdtemp(tmpl);
        if (!dir) {
            snprintf(err, err_size, "mkdtemp %s: %s", tmpl, strerror(errno));
            goto cleanup;
        }
        mesa_private_cache(dir);
        hr = vkdl_open(psdb_path, NULL, NULL, &v.f);
        if (PSDB_SUCCEEDED(hr))
            hr = vkdl_mesa_setup(v.f, msg, sizeof(msg));
        if (PSDB_FAILED(hr)) {
            fmt(err, err_size, "psdb %s: %s", psdb_path, msg[0] ? msg : psdb_error_last());
            goto cleanup;
        }
        psdb_file_release(v.f);
        v.f = NULL;
    }
    /* As the layer does for an installed PSDB: proven by the SHA-256 its install recorded (taken
     * here, outside the clock, as the registry would hold it), the proof started before the
     * device is created and running beside it; the pass waits only for what is left of it once
     * the device exists. */
    if (psdb_path && file_sha256(psdb_path, trust.sha256) != 0) {
        snprintf(err, err_size, "psdb %s: cannot read it: %s", psdb_path, strerror(errno));
        goto cleanup;
    }
    trust.have_sha256 = 1;
    if (psdb_path && PSDB_FAILED(hr = vkdl_proof_start(psdb_path, &trust, &proof))) {
        snprintf(err, err_size, "psdb %s: %s", psdb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    double t_dev = now_s();
    if (dev_open(&d, device_index, err, err_size) != 0)
        goto cleanup;
    out->device_s = now_s() - t_dev;
    if (psdb_path) {
        char why[512];
        double t = now_s();
        hr = vkdl_proof_finish(proof, &d.id, &v.f, why, sizeof(why));
        proof = NULL;
        out->proof_s = now_s() - t;
        if (PSDB_FAILED(hr)) {
            fmt(err, err_size, "psdb %s does not fit device %s (%s, abi %llu): %s", psdb_path,
                d.id.device_name, d.id.family, (unsigned long long)d.id.abi, why);
            goto cleanup;
        }
        out->file_sha256_s = file_sha256_time(v.f, trust.sha256);
        hr = vkdl_keys_load(v.f, &v.keys);
        if (PSDB_FAILED(hr)) {
            snprintf(err, err_size, "psdb %s: its pipeline keys: %s", psdb_path, psdb_error_last());
            goto cleanup;
        }
    }
    v.d = &d;
    double t0 = now_s();
    /* The merged cache is made once per device (the layer: at device creation), inside the
     * time-to-usable. A PSDB without one, or one that fails its check, is replayed with each
     * pipeline's own data, as the layer falls back. */
    if (v.f && d.id.strategy == VKID_PIPELINE_CACHE) {
        void *data = NULL;
        size_t size = 0;
        if (vkdl_merged_cache(v.f, &d.id, &data, &size, msg, sizeof(msg)) == PSDB_S_OK) {
            VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                             .initialDataSize = size,
                                             .pInitialData = data};
            if (vkCreatePipelineCache(d.device, &cci, NULL, &d.merged) != VK_SUCCESS)
                d.merged = VK_NULL_HANDLE;
        }
        free(data);
        out->merged_cache = d.merged != VK_NULL_HANDLE;
    }
    out->setup_s = now_s() - t0;
    hr = psdb_sodb_foreach(s, replay_entry, &v);
    out->wall_s = now_s() - t0;
    out->lookup_s = v.lookup_s;
    out->create_s = v.create_s;
    out->first_use_s = v.use_s;
    out->objects_s = v.objects_s;
    out->total_s = out->proof_s + out->setup_s + v.lookup_s + v.create_s + v.use_s;
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "replaying SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    out->pipelines = v.n;
    out->failed = v.failed;
    out->hits = v.hits;
    out->misses = v.misses;
    if (v.n) {
        qsort(v.ms, v.n, sizeof(double), cmp_double);
        out->median_ms = v.ms[v.n / 2];
        out->p95_ms = v.ms[(v.n * 95) / 100 < v.n ? (v.n * 95) / 100 : v.n - 1];
    }
    rc = 0;
cleanup:
    if (proof) {
        psdb_file *f = NULL;
        vkdl_proof_finish(proof, NULL, &f, NULL, 0);
        psdb_file_release(f);
    }
    psdb_file_release(v.f);
    vkdl_keys_free(&v.keys);
    dev_close(&d);
    psdb_sodb_release(s);
    free(v.ms);
    if (dir)
        remove_tree(dir);
    return rc;
}

/* A pass in a child process: the driver opens its caches afresh and the environment the pass
 * sets stays in the child. */
static psdb_hr pass_in_child(const char *sodb_path, const char *psdb_path, uint32_t device_index,
                             psdb__vk_replay_stats *out, char *err, size_t err_size)
{
    struct {
        int rc;
        psdb__vk_replay_stats st;
        char err[512];
    } msg;
    int fds[2];
    fflush(NULL);
    if (pipe(fds) != 0) {
        snprintf(err, err_size, "pipe: %s", strerror(errno));
        return PSDB_E_FAIL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(err, err_size, "fork: %s", strerror(errno));
        return PSDB_E_FAIL;
    }
    if (pid == 0) {
        close(fds[0]);
        memset(&msg, 0, sizeof(msg));
        msg.rc = run_pass(sodb_path, psdb_path, device_index, &msg.st, msg.err, sizeof(msg.err));
        ssize_t w = write(fds[1], &msg, sizeof(msg));
        _exit(w == (ssize_t)sizeof(msg) ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof(msg)) {
        ssize_t n = read(fds[0], (char *)&msg + got, sizeof(msg) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof(msg)) {
        snprintf(err, err_size, "replay pass died (status %d)", status);
        return PSDB_E_FAIL;
    }
    if (msg.rc != 0) {
        snprintf(err, err_size, "%s", msg.err);
        return PSDB_E_FAIL;
    }
    *out = msg.st;
    return PSDB_S_OK;
}

psdb_hr psdb__vk_replay(const char *sodb_path, const char *psdb_path, uint32_t device_index,
                        psdb__vk_replay_stats *cold, psdb__vk_replay_stats *warm, char *err,
                        size_t err_size)
{
    psdb_hr hr = pass_in_child(sodb_path, NULL, device_index, cold, err, err_size);
    if (PSDB_SUCCEEDED(hr) && psdb_path)
        hr = pass_in_child(sodb_path, psdb_path, device_index, warm, err, err_size);
    return hr;
}
#endif
