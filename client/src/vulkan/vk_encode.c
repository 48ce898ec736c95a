/* vk_encode.c - encodes Vulkan create-infos into the bytes of schema/SODB.md §3. */
#include "vulkan/psdb_vulkan.h"

#include <stdlib.h>
#include <string.h>

void vkenc_free(vkenc *e)
{
    free(e->data);
    memset(e, 0, sizeof(*e));
}

static int reserve(vkenc *e, size_t n)
{
    if (e->oom)
        return -1;
    if (n > SIZE_MAX / 2 - e->len) {
        e->oom = 1;
        return -1;
    }
    if (e->len + n <= e->cap)
        return 0;
    size_t cap = e->cap ? e->cap : 256;
    while (cap < e->len + n)
        cap *= 2;
    uint8_t *p = realloc(e->data, cap);
    if (!p) {
        e->oom = 1;
        return -1;
    }
    e->data = p;
    e->cap = cap;
    return 0;
}

static void vkenc_raw(vkenc *e, const void *p, size_t n)
{
    if (n == 0 || reserve(e, n) != 0)
        return;
    memcpy(e->data + e->len, p, n);
    e->len += n;
}

static void vkenc_u32(vkenc *e, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    vkenc_raw(e, b, 4);
}

static void vkenc_f32(vkenc *e, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    vkenc_u32(e, u);
}

static void enc_bool(vkenc *e, VkBool32 v)
{
    vkenc_u32(e, v ? 1u : 0u);
}

static void vkenc_bytes(vkenc *e, const void *p, size_t n)
{
    /* 0xFFFFFFFF is reserved (str's NULL); nothing a create-info holds comes near it. */
    if (n >= 0xFFFFFFFFu) {
        e->oom = 1;
        return;
    }
    vkenc_u32(e, (uint32_t)n);
    vkenc_raw(e, p, n);
}

static void vkenc_str(vkenc *e, const char *s)
{
    if (!s) {
        vkenc_u32(e, 0xFFFFFFFFu);
        return;
    }
    vkenc_bytes(e, s, strlen(s));
}

static void vkenc_unrepresentable(vkenc *e, uint32_t stype)
{
    e->unrepresentable++;
    for (uint32_t i = 0; i < e->num_stypes; i++)
        if (e->stypes[i] == stype)
            return;
    if (e->num_stypes < VKENC_MAX_STYPES)
        e->stypes[e->num_stypes++] = stype;
}

static void vkenc_merge_unrepresentable(vkenc *e, uint32_t count, const uint32_t *stypes,
                                        uint32_t num_stypes)
{
    if (count == 0)
        return;
    for (uint32_t i = 0; i < num_stypes; i++)
        vkenc_unrepresentable(e, stypes[i]);
    /* vkenc_unrepresentable counted one per sType; the object may have had more. */
    e->unrepresentable += count - (num_stypes < count ? num_stypes : count);
}

/* pNext structures that never change the compiled code: skipped wherever they appear. */
static int skippable(VkStructureType t)
{
    switch (t) {
    case VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO:
    case VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT:
    case VK_STRUCTURE_TYPE_SHADER_MODULE_VALIDATION_CACHE_CREATE_INFO_EXT:
        return 1;
    default:
        return 0;
    }
}

/* Walks a pNext chain: structures of type `known` (up to two; 0 for none) are returned through
 * found[], skippable ones are ignored, everything else is counted as unrepresentable. */
static void walk_chain(vkenc *e, const void *next, VkStructureType known0, VkStructureType known1,
                       const VkBaseInStructure **found0, const VkBaseInStructure **found1)
{
    for (const VkBaseInStructure *s = next; s; s = s->pNext) {
        if (known0 && s->sType == known0 && found0)
            *found0 = s;
        else if (known1 && s->sType == known1 && found1)
            *found1 = s;
        else if (!skippable(s->sType))
            vkenc_unrepresentable(e, (uint32_t)s->sType);
    }
}

static void enc_object(vkenc *e, const vkenc_lookup *lk, VkObjectType type, uint64_t handle,
                       VkStructureType missing, vkenc_object *out)
{
    vkenc_object o;
    memset(&o, 0, sizeof(o));
    if (!lk || lk->find(lk->ctx, type, handle, &o) != 0) {
        /* An object the layer never saw (created before it was loaded): the pipeline cannot be
         * recreated, which is counted under the sType of the missing object's create-info. */
        vkenc_unrepresentable(e, (uint32_t)missing);
        memset(&o, 0, sizeof(o));
    }
    vkenc_merge_unrepresentable(e, o.unrepresentable, o.stypes, o.num_stypes);
    vkenc_raw(e, o.data, o.len);
    if (out)
        *out = o;
}

/* ---- Objects ------------------------------------------------------------------------------- */
void vkenc_shader_module(vkenc *e, const VkShaderModuleCreateInfo *ci)
{
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_raw(e, ci->pCode, ci->codeSize);
}

void vkenc_sampler(vkenc *e, const VkSamplerCreateInfo *ci)
{
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_u32(e, ci->flags);
    vkenc_u32(e, (uint32_t)ci->magFilter);
    vkenc_u32(e, (uint32_t)ci->minFilter);
    vkenc_u32(e, (uint32_t)ci->mipmapMode);
    vkenc_u32(e, (uint32_t)ci->addressModeU);
    vkenc_u32(e, (uint32_t)ci->addressModeV);
    vkenc_u32(e, (uint32_t)ci->addressModeW);
    vkenc_f32(e, ci->mipLodBias);
    enc_bool(e, ci->anisotropyEnable);
    vkenc_f32(e, ci->maxAnisotropy);
    enc_bool(e, ci->compareEnable);
    vkenc_u32(e, (uint32_t)ci->compareOp);
    vkenc_f32(e, ci->minLod);
    vkenc_f32(e, ci->maxLod);
    vkenc_u32(e, (uint32_t)ci->borderColor);
    enc_bool(e, ci->unnormalizedCoordinates);
}

void vkenc_set_layout(vkenc *e, const VkDescriptorSetLayoutCreateInfo *ci, const vkenc_lookup *lk)
{
    const VkBaseInStructure *bf = NULL;
    walk_chain(e, ci->pNext, VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_BINDING_FLAGS_CREATE_INFO, 0,
               &bf, NULL);
    const VkDescriptorSetLayoutBindingFlagsCreateInfo *flags =
        (const VkDescriptorSetLayoutBindingFlagsCreateInfo *)bf;
    /* A count of 0 means no flags; any other count equals bindingCount (the spec's rule). */
    int have_flags = flags && flags->bindingCount == ci->bindingCount && flags->pBindingFlags;
    vkenc_u32(e, ci->flags);
    vkenc_u32(e, ci->bindingCount);
    for (uint32_t i = 0; i < ci->bindingCount; i++) {
        const VkDescriptorSetLayoutBinding *b = &ci->pBindings[i];
        vkenc_u32(e, b->binding);
        vkenc_u32(e, (uint32_t)b->descriptorType);
        vkenc_u32(e, b->descriptorCount);
        vkenc_u32(e, b->stageFlags);
        vkenc_u32(e, have_flags ? flags->pBindingFlags[i] : 0u);
        /* Immutable samplers count only for sampler types (the spec ignores them otherwise). */
        int imm = b->pImmutableSamplers &&
                  (b->descriptorType == VK_DESCRIPTOR_TYPE_SAMPLER ||
                   b->descriptorType == VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER);
        vkenc_u32(e, imm ? b->descriptorCount : 0u);
        for (uint32_t j = 0; imm && j < b->descriptorCount; j++)
            enc_object(e, lk, VK_OBJECT_TYPE_SAMPLER, (uint64_t)b->pImmutableSamplers[j],
                       VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO, NULL);
    }
}

void vkenc_pipeline_layout(vkenc *e, const VkPipelineLayoutCreateInfo *ci, const vkenc_lookup *lk)
{
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_u32(e, ci->flags);
    vkenc_u32(e, ci->setLayoutCount);
    for (uint32_t i = 0; i < ci->setLayoutCount; i++) {
        /* Graphics pipeline libraries may leave a set VK_NULL_HANDLE. */
        if (ci->pSetLayouts[i] == VK_NULL_HANDLE) {
            vkenc_u32(e, 0);
            continue;
        }
        vkenc_u32(e, 1);
        enc_object(e, lk, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, (uint64_t)ci->pSetLayouts[i],
                   VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL);
    }
    vkenc_u32(e, ci->pushConstantRangeCount);
    for (uint32_t i = 0; i < ci->pushConstantRangeCount; i++) {
        vkenc_u32(e, ci->pPushConstantRanges[i].stageFlags);
        vkenc_u32(e, ci->pPushConstantRanges[i].offset);
        vkenc_u32(e, ci->pPushConstantRanges[i].size);
    }
}

/* Render passes: version 1 and 2 create-infos encode in one form (version 2's fields, with the
 * values version 1 implies: aspect masks 0, view masks 0, view offsets 0). */
static void enc_attachment(vkenc *e, VkAttachmentDescriptionFlags flags, VkFormat format,
                           VkSampleCountFlagBits samples, VkAttachmentLoadOp load,
                           VkAttachmentStoreOp store, VkAttachmentLoadOp sload,
                           VkAttachmentStoreOp sstore, VkImageLayout initial, VkImageLayout final)
{
    vkenc_u32(e, flags);
    vkenc_u32(e, (uint32_t)format);
    vkenc_u32(e, (uint32_t)samples);
    vkenc_u32(e, (uint32_t)load);
    vkenc_u32(e, (uint32_t)store);
    vkenc_u32(e, (uint32_t)sload);
    vkenc_u32(e, (uint32_t)sstore);
    vkenc_u32(e, (uint32_t)initial);
    vkenc_u32(e, (uint32_t) final);
}

static void enc_refs1(vkenc *e, uint32_t n, const VkAttachmentReference *r)
{
    vkenc_u32(e, r ? n : 0u);
    for (uint32_t i = 0; r && i < n; i++) {
        vkenc_u32(e, r[i].attachment);
        vkenc_u32(e, (uint32_t)r[i].layout);
        vkenc_u32(e, 0);
    }
}

static void enc_refs2(vkenc *e, uint32_t n, const VkAttachmentReference2 *r)
{
    vkenc_u32(e, r ? n : 0u);
    for (uint32_t i = 0; r && i < n; i++) {
        walk_chain(e, r[i].pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, r[i].attachment);
        vkenc_u32(e, (uint32_t)r[i].layout);
        vkenc_u32(e, r[i].aspectMask);
    }
}

static void subpass_mask(uint32_t i, int depth, int color, uint32_t *dmask, uint32_t *cmask)
{
    if (i >= 32)
        return; /* callers start with all bits set */
    if (!depth)
        *dmask &= ~(1u << i);
    if (!color)
        *cmask &= ~(1u << i);
}

void vkenc_render_pass(vkenc *e, const VkRenderPassCreateInfo *ci, uint32_t *depth, uint32_t *color)
{
    *depth = *color = UINT32_MAX;
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_u32(e, 1); /* created with vkCreateRenderPass */
    vkenc_u32(e, ci->flags);
    vkenc_u32(e, ci->attachmentCount);
    for (uint32_t i = 0; i < ci->attachmentCount; i++) {
        const VkAttachmentDescription *a = &ci->pAttachments[i];
        enc_attachment(e, a->flags, a->format, a->samples, a->loadOp, a->storeOp, a->stencilLoadOp,
                       a->stencilStoreOp, a->initialLayout, a->finalLayout);
    }
    vkenc_u32(e, ci->subpassCount);
    for (uint32_t i = 0; i < ci->subpassCount; i++) {
        const VkSubpassDescription *s = &ci->pSubpasses[i];
        vkenc_u32(e, s->flags);
        vkenc_u32(e, (uint32_t)s->pipelineBindPoint);
        vkenc_u32(e, 0); /* view mask */
        enc_refs1(e, s->inputAttachmentCount, s->pInputAttachments);
        enc_refs1(e, s->colorAttachmentCount, s->pColorAttachments);
        enc_refs1(e, s->pResolveAttachments ? s->colorAttachmentCount : 0, s->pResolveAttachments);
        enc_refs1(e, s->pDepthStencilAttachment ? 1 : 0, s->pDepthStencilAttachment);
        vkenc_u32(e, s->pPreserveAttachments ? s->preserveAttachmentCount : 0u);
        for (uint32_t j = 0; s->pPreserveAttachments && j < s->preserveAttachmentCount; j++)
            vkenc_u32(e, s->pPreserveAttachments[j]);
        int has_depth = s->pDepthStencilAttachment &&
                        s->pDepthStencilAttachment->attachment != VK_ATTACHMENT_UNUSED;
        subpass_mask(i, has_depth, s->colorAttachmentCount > 0, depth, color);
    }
    vkenc_u32(e, ci->dependencyCount);
    for (uint32_t i = 0; i < ci->dependencyCount; i++) {
        const VkSubpassDependency *d = &ci->pDependencies[i];
        vkenc_u32(e, d->srcSubpass);
        vkenc_u32(e, d->dstSubpass);
        vkenc_u32(e, d->srcStageMask);
        vkenc_u32(e, d->dstStageMask);
        vkenc_u32(e, d->srcAccessMask);
        vkenc_u32(e, d->dstAccessMask);
        vkenc_u32(e, d->dependencyFlags);
        vkenc_u32(e, 0); /* view offset */
    }
    vkenc_u32(e, 0); /* correlated view masks */
}

void vkenc_render_pass2(vkenc *e, const VkRenderPassCreateInfo2 *ci, uint32_t *depth,
                        uint32_t *color)
{
    *depth = *color = UINT32_MAX;
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_u32(e, 2); /* created with vkCreateRenderPass2 */
    vkenc_u32(e, ci->flags);
    vkenc_u32(e, ci->attachmentCount);
    for (uint32_t i = 0; i < ci->attachmentCount; i++) {
        const VkAttachmentDescription2 *a = &ci->pAttachments[i];
        walk_chain(e, a->pNext, 0, 0, NULL, NULL);
        enc_attachment(e, a->flags, a->format, a->samples, a->loadOp, a->storeOp, a->stencilLoadOp,
                       a->stencilStoreOp, a->initialLayout, a->finalLayout);
    }
    vkenc_u32(e, ci->subpassCount);
    for (uint32_t i = 0; i < ci->subpassCount; i++) {
        const VkSubpassDescription2 *s = &ci->pSubpasses[i];
        walk_chain(e, s->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, s->flags);
        vkenc_u32(e, (uint32_t)s->pipelineBindPoint);
        vkenc_u32(e, s->viewMask);
        enc_refs2(e, s->inputAttachmentCount, s->pInputAttachments);
        enc_refs2(e, s->colorAttachmentCount, s->pColorAttachments);
        enc_refs2(e, s->pResolveAttachments ? s->colorAttachmentCount : 0, s->pResolveAttachments);
        enc_refs2(e, s->pDepthStencilAttachment ? 1 : 0, s->pDepthStencilAttachment);
        vkenc_u32(e, s->pPreserveAttachments ? s->preserveAttachmentCount : 0u);
        for (uint32_t j = 0; s->pPreserveAttachments && j < s->preserveAttachmentCount; j++)
            vkenc_u32(e, s->pPreserveAttachments[j]);
        int has_depth = s->pDepthStencilAttachment &&
                        s->pDepthStencilAttachment->attachment != VK_ATTACHMENT_UNUSED;
        subpass_mask(i, has_depth, s->colorAttachmentCount > 0, depth, color);
    }
    vkenc_u32(e, ci->dependencyCount);
    for (uint32_t i = 0; i < ci->dependencyCount; i++) {
        const VkSubpassDependency2 *d = &ci->pDependencies[i];
        /* VkMemoryBarrier2 in a dependency's pNext replaces the masks: not carried. */
        walk_chain(e, d->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, d->srcSubpass);
        vkenc_u32(e, d->dstSubpass);
        vkenc_u32(e, d->srcStageMask);
        vkenc_u32(e, d->dstStageMask);
        vkenc_u32(e, d->srcAccessMask);
        vkenc_u32(e, d->dstAccessMask);
        vkenc_u32(e, d->dependencyFlags);
        vkenc_u32(e, (uint32_t)d->viewOffset);
    }
    vkenc_u32(e, ci->pCorrelatedViewMasks ? ci->correlatedViewMaskCount : 0u);
    for (uint32_t i = 0; ci->pCorrelatedViewMasks && i < ci->correlatedViewMaskCount; i++)
        vkenc_u32(e, ci->pCorrelatedViewMasks[i]);
}

/* ---- Pipelines ----------------------------------------------------------------------------- */
/* Flags that only say how creation may fail or be derived: they do not change the code, and a
 * replay must compile rather than fail, so they are not recorded. */
#define VKENC_NONCODE_FLAGS                                                                        \
    (VK_PIPELINE_CREATE_FAIL_ON_PIPELINE_COMPILE_REQUIRED_BIT |                                    \
     VK_PIPELINE_CREATE_EARLY_RETURN_ON_FAILURE_BIT | VK_PIPELINE_CREATE_ALLOW_DERIVATIVES_BIT |   \
     VK_PIPELINE_CREATE_DERIVATIVE_BIT)

static void header(vkenc *e, const char *magic)
{
    vkenc_raw(e, magic, 4);
    vkenc_u32(e, VKENC_VERSION);
    vkenc_u32(e, 0);
}

static void enc_stage(vkenc *e, const VkPipelineShaderStageCreateInfo *s, const vkenc_lookup *lk)
{
    const VkBaseInStructure *inline_module = NULL;
    walk_chain(e, s->pNext, VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, 0, &inline_module, NULL);
    vkenc_u32(e, (uint32_t)s->stage);
    vkenc_u32(e, s->flags);
    if (s->module == VK_NULL_HANDLE && inline_module) {
        /* maintenance5 / graphics pipeline library: the SPIR-V chained into the stage. */
        const VkShaderModuleCreateInfo *m = (const VkShaderModuleCreateInfo *)inline_module;
        walk_chain(e, m->pNext, 0, 0, NULL, NULL);
        vkenc_bytes(e, m->pCode, m->codeSize);
    } else {
        vkenc_object o;
        memset(&o, 0, sizeof(o));
        if (!lk || lk->find(lk->ctx, VK_OBJECT_TYPE_SHADER_MODULE, (uint64_t)s->module, &o) != 0) {
            vkenc_unrepresentable(e, VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
            memset(&o, 0, sizeof(o));
        }
        vkenc_merge_unrepresentable(e, o.unrepresentable, o.stypes, o.num_stypes);
        vkenc_bytes(e, o.data, o.len);
    }
    vkenc_str(e, s->pName ? s->pName : "");
    const VkSpecializationInfo *sp = s->pSpecializationInfo;
    uint32_t n = sp && sp->pMapEntries ? sp->mapEntryCount : 0u;
    vkenc_u32(e, n);
    for (uint32_t i = 0; i < n; i++) {
        vkenc_u32(e, sp->pMapEntries[i].constantID);
        vkenc_u32(e, sp->pMapEntries[i].offset);
        vkenc_u32(e, (uint32_t)sp->pMapEntries[i].size);
    }
    vkenc_bytes(e, sp && sp->pData ? sp->pData : NULL, sp && sp->pData ? sp->dataSize : 0);
}

void vkenc_compute_pipeline(vkenc *e, const VkComputePipelineCreateInfo *ci, const vkenc_lookup *lk)
{
    header(e, VKENC_MAGIC_COMPUTE);
    walk_chain(e, ci->pNext, 0, 0, NULL, NULL);
    vkenc_u32(e, ci->flags & ~(VkPipelineCreateFlags)VKENC_NONCODE_FLAGS);
    enc_stage(e, &ci->stage, lk);
    enc_object(e, lk, VK_OBJECT_TYPE_PIPELINE_LAYOUT, (uint64_t)ci->layout,
               VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL);
}

static int has_dynamic(const VkPipelineDynamicStateCreateInfo *d, VkDynamicState s)
{
    for (uint32_t i = 0; d && d->pDynamicStates && i < d->dynamicStateCount; i++)
        if (d->pDynamicStates[i] == s)
            return 1;
    return 0;
}

static void enc_stencil(vkenc *e, const VkStencilOpState *s)
{
    vkenc_u32(e, (uint32_t)s->failOp);
    vkenc_u32(e, (uint32_t)s->passOp);
    vkenc_u32(e, (uint32_t)s->depthFailOp);
    vkenc_u32(e, (uint32_t)s->compareOp);
    vkenc_u32(e, s->compareMask);
    vkenc_u32(e, s->writeMask);
    vkenc_u32(e, s->reference);
}

void vkenc_graphics_pipeline(vkenc *e, const VkGraphicsPipelineCreateInfo *ci,
                             const vkenc_lookup *lk)
{
    const VkBaseInStructure *rendering_s = NULL;
    header(e, VKENC_MAGIC_GRAPHICS);
    walk_chain(e, ci->pNext, VK_STRUCTURE_TYPE_PIPELINE_RENDERING_CREATE_INFO, 0, &rendering_s,
               NULL);
    /* Pipeline libraries are recorded as whole pipelines only: a library's parts are not. */
    if (ci->flags & VK_PIPELINE_CREATE_LIBRARY_BIT_KHR)
        vkenc_unrepresentable(e, VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_LIBRARY_CREATE_INFO_EXT);
    vkenc_u32(e, ci->flags & ~(VkPipelineCreateFlags)VKENC_NONCODE_FLAGS);

    int tess = 0;
    vkenc_u32(e, ci->stageCount);
    for (uint32_t i = 0; i < ci->stageCount; i++) {
        enc_stage(e, &ci->pStages[i], lk);
        tess |= (ci->pStages[i].stage & (VK_SHADER_STAGE_TESSELLATION_CONTROL_BIT |
                                         VK_SHADER_STAGE_TESSELLATION_EVALUATION_BIT)) != 0;
    }
    const VkPipelineDynamicStateCreateInfo *dyn = ci->pDynamicState;
    /* The spec says which state pointers are ignored (and may be dangling): follow it before
     * reading any of them. */
    const VkPipelineRasterizationStateCreateInfo *rs = ci->pRasterizationState;
    int discard = rs && rs->rasterizerDiscardEnable &&
                  !has_dynamic(dyn, VK_DYNAMIC_STATE_RASTERIZER_DISCARD_ENABLE);
    const VkPipelineRenderingCreateInfo *rendering =
        (const VkPipelineRenderingCreateInfo *)rendering_s;
    int depth_used = 1, color_used = 1;
    vkenc rp;
    memset(&rp, 0, sizeof(rp));
    vkenc_object rpo;
    memset(&rpo, 0, sizeof(rpo));
    if (ci->renderPass != VK_NULL_HANDLE) {
        vkenc_u32(&rp, 1);
        enc_object(&rp, lk, VK_OBJECT_TYPE_RENDER_PASS, (uint64_t)ci->renderPass,
                   VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO, &rpo);
        vkenc_u32(&rp, ci->subpass);
        if (rpo.data && ci->subpass < 32) {
            depth_used = (rpo.subpass_depth >> ci->subpass) & 1u;
            color_used = (rpo.subpass_color >> ci->subpass) & 1u;
        }
    } else {
        /* Dynamic rendering; without the structure the spec's defaults apply (no views, no
         * attachments). */
        vkenc_u32(&rp, 2);
        uint32_t nc =
            rendering && rendering->pColorAttachmentFormats ? rendering->colorAttachmentCount : 0u;
        VkFormat df = rendering ? rendering->depthAttachmentFormat : VK_FORMAT_UNDEFINED;
        VkFormat sf = rendering ? rendering->stencilAttachmentFormat : VK_FORMAT_UNDEFINED;
        vkenc_u32(&rp, rendering ? rendering->viewMask : 0u);
        vkenc_u32(&rp, nc);
        for (uint32_t i = 0; i < nc; i++)
            vkenc_u32(&rp, (uint32_t)rendering->pColorAttachmentFormats[i]);
        vkenc_u32(&rp, (uint32_t)df);
        vkenc_u32(&rp, (uint32_t)sf);
        depth_used = df != VK_FORMAT_UNDEFINED || sf != VK_FORMAT_UNDEFINED;
        color_used = nc > 0;
    }
    e->oom |= rp.oom;
    vkenc_merge_unrepresentable(e, rp.unrepresentable, rp.stypes, rp.num_stypes);

    const VkPipelineVertexInputStateCreateInfo *vi = ci->pVertexInputState;
    vkenc_u32(e, vi ? 1u : 0u);
    if (vi) {
        walk_chain(e, vi->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, vi->flags);
        uint32_t nb = vi->pVertexBindingDescriptions ? vi->vertexBindingDescriptionCount : 0u;
        vkenc_u32(e, nb);
        for (uint32_t i = 0; i < nb; i++) {
            vkenc_u32(e, vi->pVertexBindingDescriptions[i].binding);
            vkenc_u32(e, vi->pVertexBindingDescriptions[i].stride);
            vkenc_u32(e, (uint32_t)vi->pVertexBindingDescriptions[i].inputRate);
        }
        uint32_t na = vi->pVertexAttributeDescriptions ? vi->vertexAttributeDescriptionCount : 0u;
        vkenc_u32(e, na);
        for (uint32_t i = 0; i < na; i++) {
            vkenc_u32(e, vi->pVertexAttributeDescriptions[i].location);
            vkenc_u32(e, vi->pVertexAttributeDescriptions[i].binding);
            vkenc_u32(e, (uint32_t)vi->pVertexAttributeDescriptions[i].format);
            vkenc_u32(e, vi->pVertexAttributeDescriptions[i].offset);
        }
    }
    const VkPipelineInputAssemblyStateCreateInfo *ia = ci->pInputAssemblyState;
    vkenc_u32(e, ia ? 1u : 0u);
    if (ia) {
        walk_chain(e, ia->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, ia->flags);
        vkenc_u32(e, (uint32_t)ia->topology);
        enc_bool(e, ia->primitiveRestartEnable);
    }
    const VkPipelineTessellationStateCreateInfo *ts = tess ? ci->pTessellationState : NULL;
    vkenc_u32(e, ts ? 1u : 0u);
    if (ts) {
        walk_chain(e, ts->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, ts->flags);
        vkenc_u32(e, ts->patchControlPoints);
    }
    const VkPipelineViewportStateCreateInfo *vp = discard ? NULL : ci->pViewportState;
    vkenc_u32(e, vp ? 1u : 0u);
    if (vp) {
        walk_chain(e, vp->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, vp->flags);
        int vdyn = has_dynamic(dyn, VK_DYNAMIC_STATE_VIEWPORT) ||
                   has_dynamic(dyn, VK_DYNAMIC_STATE_VIEWPORT_WITH_COUNT);
        int sdyn = has_dynamic(dyn, VK_DYNAMIC_STATE_SCISSOR) ||
                   has_dynamic(dyn, VK_DYNAMIC_STATE_SCISSOR_WITH_COUNT);
        vkenc_u32(e, vp->viewportCount);
        uint32_t nv = !vdyn && vp->pViewports ? vp->viewportCount : 0u;
        vkenc_u32(e, nv);
        for (uint32_t i = 0; i < nv; i++) {
            vkenc_f32(e, vp->pViewports[i].x);
            vkenc_f32(e, vp->pViewports[i].y);
            vkenc_f32(e, vp->pViewports[i].width);
            vkenc_f32(e, vp->pViewports[i].height);
            vkenc_f32(e, vp->pViewports[i].minDepth);
            vkenc_f32(e, vp->pViewports[i].maxDepth);
        }
        vkenc_u32(e, vp->scissorCount);
        uint32_t ns = !sdyn && vp->pScissors ? vp->scissorCount : 0u;
        vkenc_u32(e, ns);
        for (uint32_t i = 0; i < ns; i++) {
            vkenc_u32(e, (uint32_t)vp->pScissors[i].offset.x);
            vkenc_u32(e, (uint32_t)vp->pScissors[i].offset.y);
            vkenc_u32(e, vp->pScissors[i].extent.width);
            vkenc_u32(e, vp->pScissors[i].extent.height);
        }
    }
    vkenc_u32(e, rs ? 1u : 0u);
    if (rs) {
        walk_chain(e, rs->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, rs->flags);
        enc_bool(e, rs->depthClampEnable);
        enc_bool(e, rs->rasterizerDiscardEnable);
        vkenc_u32(e, (uint32_t)rs->polygonMode);
        vkenc_u32(e, rs->cullMode);
        vkenc_u32(e, (uint32_t)rs->frontFace);
        enc_bool(e, rs->depthBiasEnable);
        vkenc_f32(e, rs->depthBiasConstantFactor);
        vkenc_f32(e, rs->depthBiasClamp);
        vkenc_f32(e, rs->depthBiasSlopeFactor);
        vkenc_f32(e, rs->lineWidth);
    }
    const VkPipelineMultisampleStateCreateInfo *ms = discard ? NULL : ci->pMultisampleState;
    vkenc_u32(e, ms ? 1u : 0u);
    if (ms) {
        walk_chain(e, ms->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, ms->flags);
        vkenc_u32(e, (uint32_t)ms->rasterizationSamples);
        enc_bool(e, ms->sampleShadingEnable);
        vkenc_f32(e, ms->minSampleShading);
        uint32_t words = ms->pSampleMask ? ((uint32_t)ms->rasterizationSamples + 31u) / 32u : 0u;
        vkenc_u32(e, words);
        for (uint32_t i = 0; i < words; i++)
            vkenc_u32(e, ms->pSampleMask[i]);
        enc_bool(e, ms->alphaToCoverageEnable);
        enc_bool(e, ms->alphaToOneEnable);
    }
    const VkPipelineDepthStencilStateCreateInfo *dss =
        discard || !depth_used ? NULL : ci->pDepthStencilState;
    vkenc_u32(e, dss ? 1u : 0u);
    if (dss) {
        walk_chain(e, dss->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, dss->flags);
        enc_bool(e, dss->depthTestEnable);
        enc_bool(e, dss->depthWriteEnable);
        vkenc_u32(e, (uint32_t)dss->depthCompareOp);
        enc_bool(e, dss->depthBoundsTestEnable);
        enc_bool(e, dss->stencilTestEnable);
        enc_stencil(e, &dss->front);
        enc_stencil(e, &dss->back);
        vkenc_f32(e, dss->minDepthBounds);
        vkenc_f32(e, dss->maxDepthBounds);
    }
    const VkPipelineColorBlendStateCreateInfo *cb =
        discard || !color_used ? NULL : ci->pColorBlendState;
    vkenc_u32(e, cb ? 1u : 0u);
    if (cb) {
        walk_chain(e, cb->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, cb->flags);
        enc_bool(e, cb->logicOpEnable);
        vkenc_u32(e, (uint32_t)cb->logicOp);
        uint32_t na = cb->pAttachments ? cb->attachmentCount : 0u;
        vkenc_u32(e, na);
        for (uint32_t i = 0; i < na; i++) {
            const VkPipelineColorBlendAttachmentState *a = &cb->pAttachments[i];
            enc_bool(e, a->blendEnable);
            vkenc_u32(e, (uint32_t)a->srcColorBlendFactor);
            vkenc_u32(e, (uint32_t)a->dstColorBlendFactor);
            vkenc_u32(e, (uint32_t)a->colorBlendOp);
            vkenc_u32(e, (uint32_t)a->srcAlphaBlendFactor);
            vkenc_u32(e, (uint32_t)a->dstAlphaBlendFactor);
            vkenc_u32(e, (uint32_t)a->alphaBlendOp);
            vkenc_u32(e, a->colorWriteMask);
        }
        for (int i = 0; i < 4; i++)
            vkenc_f32(e, cb->blendConstants[i]);
    }
    vkenc_u32(e, dyn ? 1u : 0u);
    if (dyn) {
        walk_chain(e, dyn->pNext, 0, 0, NULL, NULL);
        vkenc_u32(e, dyn->flags);
        uint32_t nd = dyn->pDynamicStates ? dyn->dynamicStateCount : 0u;
        vkenc_u32(e, nd);
        for (uint32_t i = 0; i < nd; i++)
            vkenc_u32(e, (uint32_t)dyn->pDynamicStates[i]);
    }
    if (ci->layout == VK_NULL_HANDLE) {
        vkenc_u32(e, 0);
    } else {
        vkenc_u32(e, 1);
        enc_object(e, lk, VK_OBJECT_TYPE_PIPELINE_LAYOUT, (uint64_t)ci->layout,
                   VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL);
    }
    vkenc_raw(e, rp.data, rp.len);
    vkenc_free(&rp);
}
