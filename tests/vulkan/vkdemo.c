/* vkdemo.c - a headless Vulkan program that knows nothing of psdb, used to test the layer.
 *
 * DESIGN: the program stands in for an unmodified application. It creates a few compute
 * pipelines (variants by specialization constant, push constants, a storage buffer) and a few
 * graphics pipelines (vertex buffer, a descriptor set layout with an immutable sampler, push
 * constants, specialization constants, a define variant, a render pass with an RGBA8 attachment,
 * blend and cull variants), uses each once, and prints one line per pipeline with an FNV-1a
 * checksum of what it wrote: "<name> <16 hex digits>". Two runs print the same lines exactly when
 * the outputs are identical, so the tests compare a cold run with a run under the layer. Where
 * the device has Vulkan 1.3 dynamic rendering, one more graphics pipeline renders without a
 * render pass (VkPipelineRenderingCreateInfo).
 *
 * Options: --device N (physical device index, default 0), --unknown-pnext (one more graphics
 * pipeline whose create-info chains VkPipelineRobustnessCreateInfoEXT, a structure the layer
 * cannot represent), --feedback (chains VkPipelineCreationFeedbackCreateInfo, which does not
 * change code, into every pipeline), --pipeline-cache (creations pass a VkPipelineCache of the
 * program's own), --no-app-info (vkCreateInstance without VkApplicationInfo) or --app-version-zero
 * (applicationVersion 0, as vkcube passes, and no engine). Exit status 0 on success, 1 on any
 * failure, 77 when no Vulkan device is present (the tests' skip code). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "fill_comp.h"
#include "tri_frag.h"
#include "tri_frag_textured.h"
#include "tri_vert.h"

#define IMG_W 64
#define IMG_H 64
#define COMPUTE_COUNT 4096u

enum { APP_INFO_FULL, APP_INFO_NONE, APP_INFO_VERSION_ZERO };

/* Everything the program creates, destroyed in one place. */
typedef struct demo {
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceMemoryProperties mem;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    int feedback;
    int own_cache; /* --pipeline-cache: creations pass an application cache */
    /* How the program names itself to Vulkan, as real programs do: APP_INFO_FULL (name, version,
     * engine), APP_INFO_NONE (no VkApplicationInfo at all: --no-app-info) or
     * APP_INFO_VERSION_ZERO (applicationVersion 0, as vkcube's, no engine: --app-version-zero). */
    int app_info;
    VkPipelineCache cache; /* VK_NULL_HANDLE without --pipeline-cache */
    /* Vulkan 1.3 dynamic rendering, where the device has it: one more graphics pipeline. */
    int dynamic_rendering;
    PFN_vkCmdBeginRendering begin_rendering;
    PFN_vkCmdEndRendering end_rendering;
} demo;

typedef struct buffer {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
} buffer;

static int fail(const char *what, VkResult r)
{
    fprintf(stderr, "vkdemo: %s failed: VkResult %d\n", what, (int)r);
    return 1;
}

static uint64_t fnv1a(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int find_memory(const demo *d, uint32_t bits, VkMemoryPropertyFlags want, uint32_t *out)
{
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        if ((bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want) {
            *out = i;
            return 0;
        }
    }
    fprintf(stderr, "vkdemo: no memory type with flags 0x%x for bits 0x%x\n", (unsigned)want,
            (unsigned)bits);
    return 1;
}

/* A host-visible, mapped buffer: small enough that the program never needs staging for it. */
static int buffer_create(const demo *d, VkDeviceSize size, VkBufferUsageFlags usage, buffer *out)
{
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = size,
                             .usage = usage,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkMemoryRequirements req;
    uint32_t type = 0;
    VkResult r = vkCreateBuffer(d->device, &bi, NULL, &out->buf);
    if (r != VK_SUCCESS)
        return fail("vkCreateBuffer", r);
    vkGetBufferMemoryRequirements(d->device, out->buf, &req);
    if (find_memory(d, req.memoryTypeBits,
                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                    &type))
        return 1;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    if ((r = vkAllocateMemory(d->device, &ai, NULL, &out->mem)) != VK_SUCCESS)
        return fail("vkAllocateMemory", r);
    if ((r = vkBindBufferMemory(d->device, out->buf, out->mem, 0)) != VK_SUCCESS)
        return fail("vkBindBufferMemory", r);
    if ((r = vkMapMemory(d->device, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map)) != VK_SUCCESS)
        return fail("vkMapMemory", r);
    return 0;
}

static void buffer_destroy(const demo *d, buffer *b)
{
    if (b->buf)
        vkDestroyBuffer(d->device, b->buf, NULL);
    if (b->mem)
        vkFreeMemory(d->device, b->mem, NULL);
    memset(b, 0, sizeof(*b));
}

static int image_create(const demo *d, VkFormat format, VkImageUsageFlags usage, uint32_t w,
                        uint32_t h, VkImage *img, VkDeviceMemory *mem)
{
    VkImageCreateInfo ii = {.sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO,
                            .imageType = VK_IMAGE_TYPE_2D,
                            .format = format,
                            .extent = {w, h, 1},
                            .mipLevels = 1,
                            .arrayLayers = 1,
                            .samples = VK_SAMPLE_COUNT_1_BIT,
                            .tiling = VK_IMAGE_TILING_OPTIMAL,
                            .usage = usage,
                            .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED};
    VkMemoryRequirements req;
    uint32_t type = 0;
    VkResult r = vkCreateImage(d->device, &ii, NULL, img);
    if (r != VK_SUCCESS)
        return fail("vkCreateImage", r);
    vkGetImageMemoryRequirements(d->device, *img, &req);
    if (find_memory(d, req.memoryTypeBits, 0, &type))
        return 1;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    if ((r = vkAllocateMemory(d->device, &ai, NULL, mem)) != VK_SUCCESS)
        return fail("vkAllocateMemory", r);
    if ((r = vkBindImageMemory(d->device, *img, *mem, 0)) != VK_SUCCESS)
        return fail("vkBindImageMemory", r);
    return 0;
}

static int cmd_begin(const demo *d)
{
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = vkResetCommandBuffer(d->cmd, 0);
    if (r == VK_SUCCESS)
        r = vkBeginCommandBuffer(d->cmd, &bi);
    return r == VK_SUCCESS ? 0 : fail("vkBeginCommandBuffer", r);
}

static int cmd_submit_wait(const demo *d)
{
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .commandBufferCount = 1,
                       .pCommandBuffers = &d->cmd};
    VkResult r = vkEndCommandBuffer(d->cmd);
    if (r == VK_SUCCESS)
        r = vkResetFences(d->device, 1, &d->fence);
    if (r == VK_SUCCESS)
        r = vkQueueSubmit(d->queue, 1, &si, d->fence);
    if (r == VK_SUCCESS)
        r = vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX);
    return r == VK_SUCCESS ? 0 : fail("vkQueueSubmit", r);
}

static void barrier(const demo *d, VkImage img, VkImageLayout from, VkImageLayout to,
                    VkAccessFlags src_access, VkAccessFlags dst_access, VkPipelineStageFlags src,
                    VkPipelineStageFlags dst)
{
    VkImageMemoryBarrier b = {.sType = VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER,
                              .srcAccessMask = src_access,
                              .dstAccessMask = dst_access,
                              .oldLayout = from,
                              .newLayout = to,
                              .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                              .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                              .image = img,
                              .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1}};
    vkCmdPipelineBarrier(d->cmd, src, dst, 0, 0, NULL, 0, NULL, 1, &b);
}

static int shader_module(const demo *d, const uint32_t *code, size_t size, VkShaderModule *out)
{
    VkShaderModuleCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = size, .pCode = code};
    VkResult r = vkCreateShaderModule(d->device, &ci, NULL, out);
    return r == VK_SUCCESS ? 0 : fail("vkCreateShaderModule", r);
}

/* ---- Compute: three variants of one shader (MODE 0, 1, 2) ------------------------------------ */
static int run_compute(demo *d)
{
    int rc = 1;
    VkShaderModule mod = VK_NULL_HANDLE;
    VkDescriptorSetLayout dsl = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;
    VkDescriptorPool dpool = VK_NULL_HANDLE;
    VkPipeline pipes[3] = {VK_NULL_HANDLE, VK_NULL_HANDLE, VK_NULL_HANDLE};
    buffer out = {0};
    VkDescriptorSet set = VK_NULL_HANDLE;
    VkResult r;

    if (shader_module(d, spv_fill_comp, sizeof(spv_fill_comp), &mod))
        goto cleanup;
    VkDescriptorSetLayoutBinding b = {.binding = 0,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .descriptorCount = 1,
                                      .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = 1,
                                           .pBindings = &b};
    if ((r = vkCreateDescriptorSetLayout(d->device, &dci, NULL, &dsl)) != VK_SUCCESS) {
        rc = fail("vkCreateDescriptorSetLayout", r);
        goto cleanup;
    }
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    if ((r = vkCreatePipelineLayout(d->device, &lci, NULL, &layout)) != VK_SUCCESS) {
        rc = fail("vkCreatePipelineLayout", r);
        goto cleanup;
    }
    /* All three in one call, as engines batch them. */
    VkSpecializationMapEntry me = {0, 0, sizeof(int32_t)};
    int32_t modes[3] = {0, 1, 2};
    VkSpecializationInfo si[3];
    VkComputePipelineCreateInfo ci[3];
    VkPipelineCreationFeedback fb_pipe[3], fb_stage[3];
    VkPipelineCreationFeedbackCreateInfo fb[3];
    for (int i = 0; i < 3; i++) {
        si[i] = (VkSpecializationInfo){1, &me, sizeof(int32_t), &modes[i]};
        fb[i] = (VkPipelineCreationFeedbackCreateInfo){
            .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
            .pPipelineCreationFeedback = &fb_pipe[i],
            .pipelineStageCreationFeedbackCount = 1,
            .pPipelineStageCreationFeedbacks = &fb_stage[i]};
        ci[i] = (VkComputePipelineCreateInfo){
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .pNext = d->feedback ? &fb[i] : NULL,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = mod,
                      .pName = "main",
                      .pSpecializationInfo = &si[i]},
            .layout = layout,
            .basePipelineIndex = -1};
    }
    if ((r = vkCreateComputePipelines(d->device, d->cache, 3, ci, NULL, pipes)) != VK_SUCCESS) {
        rc = fail("vkCreateComputePipelines", r);
        goto cleanup;
    }
    if (buffer_create(d, COMPUTE_COUNT * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, &out))
        goto cleanup;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
    VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = 1,
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    if ((r = vkCreateDescriptorPool(d->device, &pci, NULL, &dpool)) != VK_SUCCESS) {
        rc = fail("vkCreateDescriptorPool", r);
        goto cleanup;
    }
    VkDescriptorSetAllocateInfo sai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = dpool,
                                       .descriptorSetCount = 1,
                                       .pSetLayouts = &dsl};
    if ((r = vkAllocateDescriptorSets(d->device, &sai, &set)) != VK_SUCCESS) {
        rc = fail("vkAllocateDescriptorSets", r);
        goto cleanup;
    }
    VkDescriptorBufferInfo dbi = {out.buf, 0, VK_WHOLE_SIZE};
    VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                              .dstSet = set,
                              .descriptorCount = 1,
                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                              .pBufferInfo = &dbi};
    vkUpdateDescriptorSets(d->device, 1, &w, 0, NULL);
    for (int i = 0; i < 3; i++) {
        uint32_t pc[2] = {0x9e3779b9u * (uint32_t)(i + 1), COMPUTE_COUNT};
        memset(out.map, 0, COMPUTE_COUNT * 4);
        if (cmd_begin(d))
            goto cleanup;
        vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[i]);
        vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0,
                                NULL);
        vkCmdPushConstants(d->cmd, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), pc);
        vkCmdDispatch(d->cmd, COMPUTE_COUNT / 64, 1, 1);
        if (cmd_submit_wait(d))
            goto cleanup;
        printf("compute%d %016" PRIx64 "\n", i, fnv1a(out.map, COMPUTE_COUNT * 4));
    }
    rc = 0;
cleanup:
    for (int i = 0; i < 3; i++)
        if (pipes[i])
            vkDestroyPipeline(d->device, pipes[i], NULL);
    buffer_destroy(d, &out);
    if (dpool)
        vkDestroyDescriptorPool(d->device, dpool, NULL);
    if (layout)
        vkDestroyPipelineLayout(d->device, layout, NULL);
    if (dsl)
        vkDestroyDescriptorSetLayout(d->device, dsl, NULL);
    if (mod)
        vkDestroyShaderModule(d->device, mod, NULL);
    return rc;
}

/* ---- Graphics ---------------------------------------------------------------------------------
 * Variants: 0 flat colour; 1 textured, alpha blend; 2 textured, GAIN 0.5, back-face culling,
 * dynamic viewport and scissor; 3 (--unknown-pnext) like 1 with a robustness structure chained;
 * 4 (devices with Vulkan 1.3 dynamic rendering) like 1, rendering without a render pass. */
typedef struct gvariant {
    int textured, blend, cull, dynamic, unknown_pnext, dynamic_rendering;
    float gain;
} gvariant;

static const gvariant GVARIANTS[5] = {
    {0, 0, 0, 0, 0, 0, 1.0f}, {1, 1, 0, 0, 0, 0, 1.0f}, {1, 0, 1, 1, 0, 0, 0.5f},
    {1, 1, 0, 0, 1, 0, 1.0f}, {1, 1, 0, 0, 0, 1, 0.8f},
};

typedef struct gfx {
    VkShaderModule vs, fs, fs_tex;
    VkSampler sampler;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkRenderPass rp;
    VkImage color, tex;
    VkDeviceMemory color_mem, tex_mem;
    VkImageView color_view, tex_view;
    VkFramebuffer fb;
    VkDescriptorPool dpool;
    VkDescriptorSet set;
    buffer vbuf, readback, upload;
} gfx;

static int create_pipeline(const demo *d, const gfx *g, const gvariant *v, VkPipeline *out)
{
    VkSpecializationMapEntry me = {0, 0, sizeof(float)};
    VkSpecializationInfo si = {1, &me, sizeof(float), &v->gain};
    VkPipelineShaderStageCreateInfo stages[2] = {
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_VERTEX_BIT,
         .module = g->vs,
         .pName = "main"},
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_FRAGMENT_BIT,
         .module = v->textured ? g->fs_tex : g->fs,
         .pName = "main",
         .pSpecializationInfo = &si}};
    VkVertexInputBindingDescription vb = {0, 5 * sizeof(float), VK_VERTEX_INPUT_RATE_VERTEX};
    VkVertexInputAttributeDescription va[2] = {{0, 0, VK_FORMAT_R32G32_SFLOAT, 0},
                                               {1, 0, VK_FORMAT_R32G32B32_SFLOAT, 8}};
    VkPipelineVertexInputStateCreateInfo vi = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO,
        .vertexBindingDescriptionCount = 1,
        .pVertexBindingDescriptions = &vb,
        .vertexAttributeDescriptionCount = 2,
        .pVertexAttributeDescriptions = va};
    VkPipelineInputAssemblyStateCreateInfo ia = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO,
        .topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST};
    VkViewport vp = {0, 0, IMG_W, IMG_H, 0, 1};
    VkRect2D sc = {{0, 0}, {IMG_W, IMG_H}};
    VkPipelineViewportStateCreateInfo vps = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO,
        .viewportCount = 1,
        .pViewports = v->dynamic ? NULL : &vp,
        .scissorCount = 1,
        .pScissors = v->dynamic ? NULL : &sc};
    VkPipelineRasterizationStateCreateInfo rs = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO,
        .polygonMode = VK_POLYGON_MODE_FILL,
        .cullMode = v->cull ? VK_CULL_MODE_BACK_BIT : VK_CULL_MODE_NONE,
        .frontFace = VK_FRONT_FACE_COUNTER_CLOCKWISE,
        .lineWidth = 1.0f};
    VkPipelineMultisampleStateCreateInfo ms = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO,
        .rasterizationSamples = VK_SAMPLE_COUNT_1_BIT};
    VkPipelineColorBlendAttachmentState cba = {.blendEnable = v->blend ? VK_TRUE : VK_FALSE,
                                               .srcColorBlendFactor = VK_BLEND_FACTOR_SRC_ALPHA,
                                               .dstColorBlendFactor =
                                                   VK_BLEND_FACTOR_ONE_MINUS_SRC_ALPHA,
                                               .colorBlendOp = VK_BLEND_OP_ADD,
                                               .srcAlphaBlendFactor = VK_BLEND_FACTOR_ONE,
                                               .dstAlphaBlendFactor = VK_BLEND_FACTOR_ZERO,
                                               .alphaBlendOp = VK_BLEND_OP_ADD,
                                               .colorWriteMask = 0xf};
    VkPipelineColorBlendStateCreateInfo cb = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO,
        .attachmentCount = 1,
        .pAttachments = &cba};
    VkDynamicState dyn[2] = {VK_DYNAMIC_STATE_VIEWPORT, VK_DYNAMIC_STATE_SCISSOR};
    VkPipelineDynamicStateCreateInfo ds = {.sType =
                                               VK_STRUCTURE_TYPE_PIPELINE_DYNAMIC_STATE_CREATE_INFO,
                                           .dynamicStateCount = 2,
                                           .pDynamicStates = dyn};
    VkPipelineRobustnessCreateInfoEXT rob = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT,
        .storageBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DEVICE_DEFAULT_EXT,
        .uniformBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DEVICE_DEFAULT_EXT,
        .vertexInputs = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DEVICE_DEFAULT_EXT,
        .images = VK_PIPELINE_ROBUSTNESS_IMAGE_BEHAVIOR_DEVICE_DEFAULT_EXT};
    VkPipelineCreationFeedback fb_pipe, fb_stage[2];
    VkPipelineCreationFeedbackCreateInfo fb = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
        .pNext = v->unknown_pnext ? &rob : NULL,
        .pPipelineCreationFeedback = &fb_pipe,
        .pipelineStageCreationFeedbackCount = 2,
        .pPipelineStageCreationFeedbacks = fb_stage};
    const void *next = NULL;
    if (d->feedback)
        next = &fb;
    else if (v->unknown_pnext)
        next = &rob;
    VkFormat color_format = VK_FORMAT_R8G8B8A8_UNORM;
    VkPipelineRenderingCreateInfo rendering = {.sType =
                                                   VK_STRUCTURE_TYPE_PIPELINE_RENDERING_CREATE_INFO,
                                               .pNext = next,
                                               .colorAttachmentCount = 1,
                                               .pColorAttachmentFormats = &color_format};
    if (v->dynamic_rendering)
        next = &rendering;
    VkGraphicsPipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO,
                                       .pNext = next,
                                       .stageCount = 2,
                                       .pStages = stages,
                                       .pVertexInputState = &vi,
                                       .pInputAssemblyState = &ia,
                                       .pViewportState = &vps,
                                       .pRasterizationState = &rs,
                                       .pMultisampleState = &ms,
                                       .pColorBlendState = &cb,
                                       .pDynamicState = v->dynamic ? &ds : NULL,
                                       .layout = g->layout,
                                       .renderPass = v->dynamic_rendering ? VK_NULL_HANDLE : g->rp,
                                       .subpass = 0,
                                       .basePipelineIndex = -1};
    VkResult r = vkCreateGraphicsPipelines(d->device, d->cache, 1, &ci, NULL, out);
    return r == VK_SUCCESS ? 0 : fail("vkCreateGraphicsPipelines", r);
}

static int gfx_setup(const demo *d, gfx *g)
{
    VkResult r;
    if (shader_module(d, spv_tri_vert, sizeof(spv_tri_vert), &g->vs) ||
        shader_module(d, spv_tri_frag, sizeof(spv_tri_frag), &g->fs) ||
        shader_module(d, spv_tri_frag_textured, sizeof(spv_tri_frag_textured), &g->fs_tex))
        return 1;
    VkSamplerCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
                               .magFilter = VK_FILTER_NEAREST,
                               .minFilter = VK_FILTER_NEAREST,
                               .mipmapMode = VK_SAMPLER_MIPMAP_MODE_NEAREST,
                               .addressModeU = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .addressModeV = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .addressModeW = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .maxLod = 0.25f,
                               .borderColor = VK_BORDER_COLOR_FLOAT_OPAQUE_BLACK};
    if ((r = vkCreateSampler(d->device, &sci, NULL, &g->sampler)) != VK_SUCCESS)
        return fail("vkCreateSampler", r);
    VkDescriptorSetLayoutBinding b = {.binding = 0,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
                                      .descriptorCount = 1,
                                      .stageFlags = VK_SHADER_STAGE_FRAGMENT_BIT,
                                      .pImmutableSamplers = &g->sampler};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = 1,
                                           .pBindings = &b};
    if ((r = vkCreateDescriptorSetLayout(d->device, &dci, NULL, &g->dsl)) != VK_SUCCESS)
        return fail("vkCreateDescriptorSetLayout", r);
    VkPushConstantRange pcr = {VK_SHADER_STAGE_VERTEX_BIT, 0, 12};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &g->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    if ((r = vkCreatePipelineLayout(d->device, &lci, NULL, &g->layout)) != VK_SUCCESS)
        return fail("vkCreatePipelineLayout", r);
    VkAttachmentDescription att = {.format = VK_FORMAT_R8G8B8A8_UNORM,
                                   .samples = VK_SAMPLE_COUNT_1_BIT,
                                   .loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR,
                                   .storeOp = VK_ATTACHMENT_STORE_OP_STORE,
                                   .stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE,
                                   .stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE,
                                   .initialLayout = VK_IMAGE_LAYOUT_UNDEFINED,
                                   .finalLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL};
    VkAttachmentReference ref = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkSubpassDescription sub = {.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                                .colorAttachmentCount = 1,
                                .pColorAttachments = &ref};
    VkSubpassDependency dep = {.srcSubpass = 0,
                               .dstSubpass = VK_SUBPASS_EXTERNAL,
                               .srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
                               .dstStageMask = VK_PIPELINE_STAGE_TRANSFER_BIT,
                               .srcAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT,
                               .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT};
    VkRenderPassCreateInfo rpi = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
                                  .attachmentCount = 1,
                                  .pAttachments = &att,
                                  .subpassCount = 1,
                                  .pSubpasses = &sub,
                                  .dependencyCount = 1,
                                  .pDependencies = &dep};
    if ((r = vkCreateRenderPass(d->device, &rpi, NULL, &g->rp)) != VK_SUCCESS)
        return fail("vkCreateRenderPass", r);
    if (image_create(d, VK_FORMAT_R8G8B8A8_UNORM,
                     VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT, IMG_W,
                     IMG_H, &g->color, &g->color_mem) ||
        image_create(d, VK_FORMAT_R8G8B8A8_UNORM,
                     VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT, 4, 4, &g->tex,
                     &g->tex_mem))
        return 1;
    VkImageViewCreateInfo vci = {.sType = VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO,
                                 .image = g->color,
                                 .viewType = VK_IMAGE_VIEW_TYPE_2D,
                                 .format = VK_FORMAT_R8G8B8A8_UNORM,
                                 .subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1}};
    if ((r = vkCreateImageView(d->device, &vci, NULL, &g->color_view)) != VK_SUCCESS)
        return fail("vkCreateImageView", r);
    vci.image = g->tex;
    if ((r = vkCreateImageView(d->device, &vci, NULL, &g->tex_view)) != VK_SUCCESS)
        return fail("vkCreateImageView", r);
    VkFramebufferCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO,
                                   .renderPass = g->rp,
                                   .attachmentCount = 1,
                                   .pAttachments = &g->color_view,
                                   .width = IMG_W,
                                   .height = IMG_H,
                                   .layers = 1};
    if ((r = vkCreateFramebuffer(d->device, &fci, NULL, &g->fb)) != VK_SUCCESS)
        return fail("vkCreateFramebuffer", r);

    /* Two triangles of a quad, then one more triangle on top, wound counter-clockwise except the
     * last, so culling changes the image. */
    static const float verts[] = {
        -0.9f, -0.9f, 1.0f, 0.2f,  0.2f,  0.9f, -0.9f, 0.2f,  1.0f, 0.2f, 0.9f, 0.9f,
        0.2f,  0.2f,  1.0f, -0.9f, -0.9f, 1.0f, 0.2f,  0.2f,  0.9f, 0.9f, 0.2f, 0.2f,
        1.0f,  -0.9f, 0.9f, 1.0f,  1.0f,  1.0f, 0.0f,  -0.5f, 1.0f, 1.0f, 0.0f, -0.5f,
        0.5f,  0.0f,  1.0f, 1.0f,  0.5f,  0.5f, 1.0f,  0.0f,  1.0f,
    };
    static const uint8_t texels[16 * 4] = {
        255, 0,   0,  255, 0,   255, 0,   255, 0,   0,   255, 255, 255, 255, 255, 255,
        128, 128, 0,  255, 0,   128, 128, 255, 128, 0,   128, 255, 64,  64,  64,  255,
        255, 255, 0,  255, 0,   255, 255, 255, 255, 0,   255, 255, 32,  200, 100, 255,
        10,  20,  30, 255, 200, 100, 50,  255, 90,  180, 15,  255, 0,   0,   0,   255,
    };
    if (buffer_create(d, sizeof(verts), VK_BUFFER_USAGE_VERTEX_BUFFER_BIT, &g->vbuf) ||
        buffer_create(d, IMG_W * IMG_H * 4, VK_BUFFER_USAGE_TRANSFER_DST_BIT, &g->readback) ||
        buffer_create(d, sizeof(texels), VK_BUFFER_USAGE_TRANSFER_SRC_BIT, &g->upload))
        return 1;
    memcpy(g->vbuf.map, verts, sizeof(verts));
    memcpy(g->upload.map, texels, sizeof(texels));
    if (cmd_begin(d))
        return 1;
    barrier(d, g->tex, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 0,
            VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT);
    VkBufferImageCopy copy = {.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1},
                              .imageExtent = {4, 4, 1}};
    vkCmdCopyBufferToImage(d->cmd, g->upload.buf, g->tex, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1,
                           &copy);
    barrier(d, g->tex, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
            VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_ACCESS_SHADER_READ_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT);
    if (cmd_submit_wait(d))
        return 1;

    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1};
    VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .maxSets = 1,
                                      .poolSizeCount = 1,
                                      .pPoolSizes = &ps};
    if ((r = vkCreateDescriptorPool(d->device, &pci, NULL, &g->dpool)) != VK_SUCCESS)
        return fail("vkCreateDescriptorPool", r);
    VkDescriptorSetAllocateInfo sai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                       .descriptorPool = g->dpool,
                                       .descriptorSetCount = 1,
                                       .pSetLayouts = &g->dsl};
    if ((r = vkAllocateDescriptorSets(d->device, &sai, &g->set)) != VK_SUCCESS)
        return fail("vkAllocateDescriptorSets", r);
    VkDescriptorImageInfo dii = {VK_NULL_HANDLE, g->tex_view,
                                 VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL};
    VkWriteDescriptorSet w = {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                              .dstSet = g->set,
                              .descriptorCount = 1,
                              .descriptorType = VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
                              .pImageInfo = &dii};
    vkUpdateDescriptorSets(d->device, 1, &w, 0, NULL);
    return 0;
}

static int render(const demo *d, const gfx *g, const gvariant *v, VkPipeline p, const char *name)
{
    VkClearValue clear = {.color = {{0.1f, 0.1f, 0.1f, 1.0f}}};
    VkRenderPassBeginInfo rbi = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO,
                                 .renderPass = g->rp,
                                 .framebuffer = g->fb,
                                 .renderArea = {{0, 0}, {IMG_W, IMG_H}},
                                 .clearValueCount = 1,
                                 .pClearValues = &clear};
    float k = (float)(name[strlen(name) - 1] - '0');
    float pc[3] = {0.05f * k, -0.05f * k, 1.0f - 0.1f * k};
    VkDeviceSize off = 0;
    if (cmd_begin(d))
        return 1;
    VkRenderingAttachmentInfo color = {.sType = VK_STRUCTURE_TYPE_RENDERING_ATTACHMENT_INFO,
                                       .imageView = g->color_view,
                                       .imageLayout = VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL,
                                       .loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR,
                                       .storeOp = VK_ATTACHMENT_STORE_OP_STORE,
                                       .clearValue = clear};
    VkRenderingInfo ri = {.sType = VK_STRUCTURE_TYPE_RENDERING_INFO,
                          .renderArea = {{0, 0}, {IMG_W, IMG_H}},
                          .layerCount = 1,
                          .colorAttachmentCount = 1,
                          .pColorAttachments = &color};
    if (v->dynamic_rendering) {
        barrier(d, g->color, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL, 0,
                VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT);
        d->begin_rendering(d->cmd, &ri);
    } else {
        vkCmdBeginRenderPass(d->cmd, &rbi, VK_SUBPASS_CONTENTS_INLINE);
    }
    vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_GRAPHICS, p);
    if (v->dynamic) {
        VkViewport vp = {0, 0, IMG_W, IMG_H, 0, 1};
        VkRect2D sc = {{4, 4}, {IMG_W - 8, IMG_H - 8}};
        vkCmdSetViewport(d->cmd, 0, 1, &vp);
        vkCmdSetScissor(d->cmd, 0, 1, &sc);
    }
    vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_GRAPHICS, g->layout, 0, 1, &g->set, 0,
                            NULL);
    vkCmdPushConstants(d->cmd, g->layout, VK_SHADER_STAGE_VERTEX_BIT, 0, sizeof(pc), pc);
    vkCmdBindVertexBuffers(d->cmd, 0, 1, &g->vbuf.buf, &off);
    vkCmdDraw(d->cmd, 9, 1, 0, 0);
    if (v->dynamic_rendering) {
        d->end_rendering(d->cmd);
        barrier(d, g->color, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL,
                VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT,
                VK_ACCESS_TRANSFER_READ_BIT, VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
                VK_PIPELINE_STAGE_TRANSFER_BIT);
    } else {
        vkCmdEndRenderPass(d->cmd);
    }
    VkBufferImageCopy copy = {.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1},
                              .imageExtent = {IMG_W, IMG_H, 1}};
    vkCmdCopyImageToBuffer(d->cmd, g->color, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, g->readback.buf,
                           1, &copy);
    if (cmd_submit_wait(d))
        return 1;
    printf("%s %016" PRIx64 "\n", name, fnv1a(g->readback.map, IMG_W * IMG_H * 4));
    return 0;
}

static void gfx_destroy(const demo *d, gfx *g)
{
    VkDevice dev = d->device;
    buffer_destroy(d, &g->vbuf);
    buffer_destroy(d, &g->readback);
    buffer_destroy(d, &g->upload);
    if (g->dpool)
        vkDestroyDescriptorPool(dev, g->dpool, NULL);
    if (g->fb)
        vkDestroyFramebuffer(dev, g->fb, NULL);
    if (g->color_view)
        vkDestroyImageView(dev, g->color_view, NULL);
    if (g->tex_view)
        vkDestroyImageView(dev, g->tex_view, NULL);
    if (g->color)
        vkDestroyImage(dev, g->color, NULL);
    if (g->tex)
        vkDestroyImage(dev, g->tex, NULL);
    if (g->color_mem)
        vkFreeMemory(dev, g->color_mem, NULL);
    if (g->tex_mem)
        vkFreeMemory(dev, g->tex_mem, NULL);
    if (g->rp)
        vkDestroyRenderPass(dev, g->rp, NULL);
    if (g->layout)
        vkDestroyPipelineLayout(dev, g->layout, NULL);
    if (g->dsl)
        vkDestroyDescriptorSetLayout(dev, g->dsl, NULL);
    if (g->sampler)
        vkDestroySampler(dev, g->sampler, NULL);
    if (g->vs)
        vkDestroyShaderModule(dev, g->vs, NULL);
    if (g->fs)
        vkDestroyShaderModule(dev, g->fs, NULL);
    if (g->fs_tex)
        vkDestroyShaderModule(dev, g->fs_tex, NULL);
}

static int run_graphics(demo *d, int unknown_pnext)
{
    int rc = 1;
    gfx g = {0};
    if (gfx_setup(d, &g))
        goto cleanup;
    for (int i = 0; i < 5; i++) {
        VkPipeline p = VK_NULL_HANDLE;
        char name[16];
        if ((GVARIANTS[i].unknown_pnext && !unknown_pnext) ||
            (GVARIANTS[i].dynamic_rendering && !d->dynamic_rendering))
            continue;
        snprintf(name, sizeof(name), "graphics%d", i);
        if (create_pipeline(d, &g, &GVARIANTS[i], &p))
            goto cleanup;
        int bad = render(d, &g, &GVARIANTS[i], p, name);
        vkDestroyPipeline(d->device, p, NULL);
        if (bad)
            goto cleanup;
    }
    rc = 0;
cleanup:
    gfx_destroy(d, &g);
    return rc;
}

/* ---- Instance and device ----------------------------------------------------------------------
 */
static int demo_open(demo *d, uint32_t device_index)
{
    VkResult r;
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "psdb-vkdemo",
                             .applicationVersion = VK_MAKE_VERSION(1, 2, 3),
                             .pEngineName = "psdb-test-engine",
                             .engineVersion = VK_MAKE_VERSION(0, 9, 0),
                             .apiVersion = VK_API_VERSION_1_3};
    if (d->app_info == APP_INFO_VERSION_ZERO) {
        app.applicationVersion = 0;
        app.pEngineName = NULL;
        app.engineVersion = 0;
    }
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pApplicationInfo = d->app_info == APP_INFO_NONE ? NULL : &app};
    if ((r = vkCreateInstance(&ici, NULL, &d->instance)) != VK_SUCCESS) {
        fprintf(stderr, "vkdemo: vkCreateInstance failed: VkResult %d (no Vulkan driver?)\n",
                (int)r);
        return r == VK_ERROR_INCOMPATIBLE_DRIVER ? 77 : 1;
    }
    uint32_t n = 0;
    VkPhysicalDevice phys[16];
    r = vkEnumeratePhysicalDevices(d->instance, &n, NULL);
    if (r == VK_SUCCESS && n > 16)
        n = 16;
    if (r == VK_SUCCESS && n > 0)
        r = vkEnumeratePhysicalDevices(d->instance, &n, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return fail("vkEnumeratePhysicalDevices", r);
    if (n == 0) {
        fprintf(stderr, "vkdemo: no Vulkan physical device\n");
        return 77;
    }
    if (device_index >= n) {
        fprintf(stderr, "vkdemo: device %u does not exist (%u devices)\n", device_index, n);
        return 1;
    }
    d->phys = phys[device_index];
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    uint32_t nq = 0;
    VkQueueFamilyProperties qf[16];
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, NULL);
    if (nq > 16)
        nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &nq, qf);
    d->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++) {
        VkQueueFlags want = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
        if ((qf[i].queueFlags & want) == want) {
            d->queue_family = i;
            break;
        }
    }
    if (d->queue_family == UINT32_MAX) {
        fprintf(stderr, "vkdemo: no queue family with graphics and compute\n");
        return 1;
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->queue_family,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(d->phys, &props);
    VkPhysicalDeviceVulkan13Features f13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    /* Without VkApplicationInfo the instance is Vulkan 1.0: no 1.3 features. */
    if (props.apiVersion >= VK_API_VERSION_1_3 && d->app_info != APP_INFO_NONE) {
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &f13};
        vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    }
    d->dynamic_rendering = f13.dynamicRendering == VK_TRUE;
    VkPhysicalDeviceVulkan13Features enable13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
        .dynamicRendering = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = d->dynamic_rendering ? &enable13 : NULL,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci};
    if ((r = vkCreateDevice(d->phys, &dci, NULL, &d->device)) != VK_SUCCESS)
        return fail("vkCreateDevice", r);
    if (d->dynamic_rendering) {
        d->begin_rendering =
            (PFN_vkCmdBeginRendering)vkGetDeviceProcAddr(d->device, "vkCmdBeginRendering");
        d->end_rendering =
            (PFN_vkCmdEndRendering)vkGetDeviceProcAddr(d->device, "vkCmdEndRendering");
        d->dynamic_rendering = d->begin_rendering && d->end_rendering;
    }
    vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    if ((r = vkCreateCommandPool(d->device, &pci, NULL, &d->pool)) != VK_SUCCESS)
        return fail("vkCreateCommandPool", r);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = d->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    if ((r = vkAllocateCommandBuffers(d->device, &cai, &d->cmd)) != VK_SUCCESS)
        return fail("vkAllocateCommandBuffers", r);
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateFence(d->device, &fci, NULL, &d->fence)) != VK_SUCCESS)
        return fail("vkCreateFence", r);
    VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if (d->own_cache && (r = vkCreatePipelineCache(d->device, &cci, NULL, &d->cache)) != VK_SUCCESS)
        return fail("vkCreatePipelineCache", r);
    return 0;
}

static void demo_close(demo *d)
{
    if (d->device) {
        vkDeviceWaitIdle(d->device);
        if (d->fence)
            vkDestroyFence(d->device, d->fence, NULL);
        if (d->pool)
            vkDestroyCommandPool(d->device, d->pool, NULL);
        if (d->cache)
            vkDestroyPipelineCache(d->device, d->cache, NULL);
        vkDestroyDevice(d->device, NULL);
    }
    if (d->instance)
        vkDestroyInstance(d->instance, NULL);
}

int main(int argc, char **argv)
{
    demo d = {0};
    uint32_t device_index = 0;
    int unknown_pnext = 0;
    int rc = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            char *end = NULL;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (!end || *end || v > 15) {
                fprintf(stderr, "vkdemo: --device: not a device index 0-15: %s\n", argv[i]);
                return 2;
            }
            device_index = (uint32_t)v;
        } else if (strcmp(argv[i], "--unknown-pnext") == 0) {
            unknown_pnext = 1;
        } else if (strcmp(argv[i], "--feedback") == 0) {
            d.feedback = 1;
        } else if (strcmp(argv[i], "--pipeline-cache") == 0) {
            d.own_cache = 1;
        } else if (strcmp(argv[i], "--no-app-info") == 0) {
            d.app_info = APP_INFO_NONE;
        } else if (strcmp(argv[i], "--app-version-zero") == 0) {
            d.app_info = APP_INFO_VERSION_ZERO;
        } else {
            fprintf(stderr, "usage: vkdemo [--device N] [--unknown-pnext] [--feedback] "
                            "[--pipeline-cache] [--no-app-info | --app-version-zero]\n");
            return 2;
        }
    }
    rc = demo_open(&d, device_index);
    if (rc == 0)
        rc = run_compute(&d);
    if (rc == 0)
        rc = run_graphics(&d, unknown_pnext);
    demo_close(&d);
    return rc;
}
