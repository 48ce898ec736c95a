/* vk_pipeline.c - one SODB pipeline replayed alone on the backend's device: its objects created
 * from the decoded entry, the pipeline created, then used once.
 *
 * DESIGN: every entry is replayed alone: its objects (shader modules, immutable samplers, set
 * layouts, pipeline layout, render pass) are created from the decoded entry, the pipeline is
 * created with a fresh VkPipelineCache, then used once (a dispatch or a draw of no work), because
 * lavapipe compiles with LLVM at the first use, not at creation, and time-to-usable is what an
 * application waits for. A pipeline the driver fails to create is counted and reported by the
 * caller, never fatal. */
#include "vulkan/vk_backend.h"

#include <stdlib.h>
#include <string.h>

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

static void objs_destroy(vkbe_dev *d, vobjs *o)
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
        vkbe_image_destroy(dv, o->views[i], o->images[i], o->memory[i]);
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

static VkResult make_layout(vkbe_dev *d, vkdec_layout *l, vobjs *o)
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
static VkResult make_image(vkbe_dev *d, vobjs *o, VkFormat format, VkSampleCountFlagBits samples,
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
    if ((r = vkbe_alloc(d, req, memory)) != VK_SUCCESS) {
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

static VkResult make_framebuffer(vkbe_dev *d, const VkRenderPassCreateInfo2 *rp, vobjs *o)
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
static VkResult bind_dummies(vkbe_dev *d, vkdec_pipeline *p, vobjs *o, VkPipelineBindPoint bp)
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
static VkResult first_use(vkbe_dev *d, vkdec_pipeline *p, vobjs *o)
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
    double until = vkbe_now() + 0.001;
    while ((r = vkGetFenceStatus(d->device, d->fence)) == VK_NOT_READY && vkbe_now() < until)
        ;
    return r == VK_NOT_READY ? vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX) : r;
}

VkResult vkbe_create(vkbe_dev *d, vkdec_pipeline *p, const vkbe_how *how, vkbe_got *got)
{
    vobjs o;
    VkResult r = VK_SUCCESS;
    VkPipelineCreateFlags2CreateInfoKHR capture = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATE_FLAGS_2_CREATE_INFO_KHR};
    VkPipelineBinaryInfoKHR bins;
    const void **chain;
    memset(&o, 0, sizeof(o));
    memset(got, 0, sizeof(*got));
    got->what = "creating shader modules";
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
    got->what = "creating the pipeline layout";
    if (p->has_layout && (r = make_layout(d, &p->layout, &o)) != VK_SUCCESS)
        goto cleanup;
    if (p->render_pass) {
        got->what = "creating the render pass";
        /* Created the way the application created it (its pipelines' keys say which). */
        if (p->rp_version == 1)
            r = vkCreateRenderPass(d->device, &p->rp1, NULL, &o.rp);
        else
            r = d->create_rp2 ? d->create_rp2(d->device, &p->rp, NULL, &o.rp)
                              : VK_ERROR_FEATURE_NOT_PRESENT;
        if (r != VK_SUCCESS)
            goto cleanup;
    }
    got->what = "creating the pipeline cache";
    VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                     .initialDataSize = how->initial ? how->initial_size : 0,
                                     .pInitialData = how->initial};
    /* A cold replay passes no cache at all, as an application without one: under the layer it
     * is then served the way such an application is. A creation from binaries, or one that
     * captures them, may pass none. */
    int fresh = !how->use_merged && (how->initial || how->want_cache) && !how->capture_binaries &&
                !how->binaries;
    if (fresh && (r = vkCreatePipelineCache(d->device, &cci, NULL, &o.cache)) != VK_SUCCESS)
        goto cleanup;
    VkPipelineCache cache = how->use_merged ? d->merged : o.cache;
    if (p->graphics) {
        p->graphics_ci.layout = o.layout;
        p->graphics_ci.renderPass = o.rp;
        chain = &p->graphics_ci.pNext;
    } else {
        p->compute.layout = o.layout;
        p->compute.stage.module = o.modules[0];
        chain = &p->compute.pNext;
    }
    /* In front of the entry's own structures, taken out again below: the create-info is the
     * caller's. */
    const void *own = *chain;
    if (how->capture_binaries) {
        capture.pNext = own;
        capture.flags =
            (VkPipelineCreateFlags2KHR)(p->graphics ? p->graphics_ci.flags : p->compute.flags) |
            PSDB_VK_PIPELINE_CREATE_2_CAPTURE_DATA;
        *chain = &capture;
    } else if (how->binaries) {
        bins = *how->binaries;
        bins.pNext = own;
        *chain = &bins;
    }
    got->what = "creating the pipeline";
    double t0 = vkbe_now();
    if (p->graphics)
        r = vkCreateGraphicsPipelines(d->device, cache, 1, &p->graphics_ci, NULL, &o.pipeline);
    else
        r = vkCreateComputePipelines(d->device, cache, 1, &p->compute, NULL, &o.pipeline);
    *chain = own;
    if (r != VK_SUCCESS) {
        o.pipeline = VK_NULL_HANDLE;
        goto cleanup;
    }
    got->create_s = vkbe_now() - t0;
    got->what = "using the pipeline once";
    if ((r = first_use(d, p, &o)) != VK_SUCCESS)
        goto cleanup;
    got->seconds = vkbe_now() - t0;
    if (how->capture_binaries) {
        got->what = "reading the pipeline's binaries";
        r = vkbin_capture(&d->bin, d->device, o.pipeline, &got->binaries, &got->binaries_size);
        VkReleaseCapturedPipelineDataInfoKHR rel = {
            .sType = VK_STRUCTURE_TYPE_RELEASE_CAPTURED_PIPELINE_DATA_INFO_KHR,
            .pipeline = o.pipeline};
        d->bin.release(d->device, &rel, NULL);
        if (r != VK_SUCCESS)
            goto cleanup;
    }
    if (how->want_cache && o.cache) {
        got->what = "reading the pipeline cache";
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
        got->cache = b;
        got->cache_size = n;
        got->what = "merging the pipeline cache";
        if (how->merge_into &&
            (r = vkMergePipelineCaches(d->device, how->merge_into, 1, &o.cache)) != VK_SUCCESS)
            goto cleanup;
    }
cleanup:
    if (r != VK_SUCCESS) {
        free(got->cache);
        free(got->binaries);
        got->cache = got->binaries = NULL;
        got->cache_size = got->binaries_size = 0;
    }
    objs_destroy(d, &o);
    return r;
}

VkResult vkbe_replay_one(vkbe_dev *d, vkdec_pipeline *p, const void *initial, size_t initial_size,
                         int use_merged, void **cache_out, size_t *cache_size, double *seconds,
                         double *create_s, const char **what)
{
    vkbe_how how = {.initial = initial,
                    .initial_size = initial_size,
                    .use_merged = use_merged,
                    .want_cache = cache_out != NULL,
                    .merge_into = cache_out ? d->merged : VK_NULL_HANDLE};
    vkbe_got got;
    VkResult r = vkbe_create(d, p, &how, &got);
    if (cache_out) {
        *cache_out = got.cache;
        *cache_size = got.cache_size;
    } else {
        free(got.cache);
    }
    free(got.binaries);
    *seconds = got.seconds;
    if (create_s)
        *create_s = got.create_s;
    *what = got.what;
    return r;
}
