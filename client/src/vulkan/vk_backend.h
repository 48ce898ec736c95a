/* vk_backend.h - what the backend's files share (private to client/src/vulkan/): the device an
 * SODB is replayed on (vk_device.c) and one pipeline's replay on it (vk_pipeline.c), used by the
 * compile (vk_compile.c) and the time-to-usable replay (vk_replay.c). Built only with the loader.
 */
#ifndef PSDB_VULKAN_VK_BACKEND_H
#define PSDB_VULKAN_VK_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vulkan/psdb_vulkan.h"

/* The device, its queue, one command buffer and fence for the first uses, and what they bind. */
typedef struct vkbe_dev {
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
    /* VK_KHR_pipeline_binary, enabled where the device has it and the strategy is binaries. */
    int binaries;
    vkbin_fns bin;
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
} vkbe_dev;

/* Creates an instance (application name psdb, API 1.3) and a device on physical device index
 * with one graphics-and-compute queue; every core feature the device has except
 * robustBufferAccess (robustness changes the code a driver generates, and applications rarely
 * enable it), and dynamic rendering where present. d->id is the device's identity. 0, or -1 with
 * err set (d closed). */
int vkbe_dev_open(vkbe_dev *d, uint32_t index, char *err, size_t err_size);
/* Destroys everything d holds (waiting for the device first) and zeroes it; a zeroed d: nothing. */
void vkbe_dev_close(vkbe_dev *d);
/* Allocates memory of the first type req allows (not yet bound). */
VkResult vkbe_alloc(vkbe_dev *d, VkMemoryRequirements req, VkDeviceMemory *mem);
/* An image with its view and memory, any of them VK_NULL_HANDLE, destroyed. */
void vkbe_image_destroy(VkDevice dv, VkImageView view, VkImage image, VkDeviceMemory memory);

/* How vkbe_create creates a pipeline. */
typedef struct vkbe_how {
    const void *initial; /* a fresh cache made from these data (NULL: none unless want_cache) */
    size_t initial_size;
    int use_merged;             /* with d->merged instead */
    int want_cache;             /* a fresh cache, its data returned afterwards (got->cache) */
    VkPipelineCache merge_into; /* with want_cache: that fresh cache merged into this one */
    int capture_binaries;       /* created to capture its binaries (got->binaries); no cache */
    const VkPipelineBinaryInfoKHR *binaries; /* created from these binaries; no cache */
} vkbe_how;

/* What vkbe_create gives back: data malloc'd (the caller's), NULL when not asked for. */
typedef struct vkbe_got {
    void *cache, *binaries;
    size_t cache_size, binaries_size;
    double seconds, create_s; /* creation + first use; the creation alone */
    const char *what;         /* the step that failed */
} vkbe_got;

/* Replays one decoded pipeline as how says: its objects, the pipeline, its first use. Returns the
 * first failing VkResult (got->what names the step; nothing malloc'd is left then). */
VkResult vkbe_create(vkbe_dev *d, vkdec_pipeline *p, const vkbe_how *how, vkbe_got *got);

/* Replays one decoded pipeline: its objects, the pipeline with a fresh cache made from initial
 * data (or with d->merged when use_merged, or with none), and its first use. With cache_out, the
 * fresh cache's data afterwards (malloc'd, the caller's), and that cache merged into d->merged
 * when there is one. *seconds is creation + first use, *create_s (may be NULL) the creation
 * alone. Returns the first failing VkResult; *what names the step. */
VkResult vkbe_replay_one(vkbe_dev *d, vkdec_pipeline *p, const void *initial, size_t initial_size,
                         int use_merged, void **cache_out, size_t *cache_size, double *seconds,
                         double *create_s, const char **what);

/* Seconds on CLOCK_MONOTONIC. */
double vkbe_now(void);
/* snprintf that says whether everything fit: 0, or -1 when truncated. */
int vkbe_fmt(char *buf, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));
/* Points the driver's disk cache at dir for the devices opened from now on: Mesa's single-file
 * cache there, read-write, nothing shipped read-only (Mesa reads its settings when the driver
 * opens its cache: instance creation for lavapipe). */
void vkbe_private_cache(const char *dir);
/* Removes path and everything below it (links are removed, never followed). */
void vkbe_remove_tree(const char *path);

#endif
