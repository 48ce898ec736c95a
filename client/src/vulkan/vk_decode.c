/* vk_decode.c - SODB §3 bytes back into Vulkan create-infos (the replay side of vk_encode.c). */
#include "vulkan/psdb_vulkan.h"

#include <stdlib.h>
#include <string.h>

struct vkdec_arena {
    struct vkdec_arena *next;
    max_align_t data[];
};

typedef struct rd {
    const uint8_t *p;
    size_t len, pos;
    int bad, oom;
    vkdec_arena *arena;
} rd;

static void *alloc(rd *r, size_t n, size_t count)
{
    if (r->bad || r->oom)
        return NULL;
    if (count && n > (SIZE_MAX - sizeof(vkdec_arena)) / count) {
        r->oom = 1;
        return NULL;
    }
    size_t bytes = n * count;
    vkdec_arena *a = calloc(1, sizeof(*a) + (bytes > 0 ? bytes : 1));
    if (!a) {
        r->oom = 1;
        return NULL;
    }
    a->next = r->arena;
    r->arena = a;
    return a->data;
}

static uint32_t u32(rd *r)
{
    if (r->bad || r->len - r->pos < 4) {
        r->bad = 1;
        return 0;
    }
    const uint8_t *b = r->p + r->pos;
    r->pos += 4;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int32_t i32(rd *r)
{
    uint32_t u = u32(r);
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

static float f32(rd *r)
{
    uint32_t u = u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static VkBool32 boolean(rd *r)
{
    uint32_t v = u32(r);
    if (v > 1)
        r->bad = 1;
    return v ? VK_TRUE : VK_FALSE;
}

/* A count of elements of at least min_size bytes each: never more than the bytes left hold. */
static uint32_t count(rd *r, size_t min_size)
{
    uint32_t n = u32(r);
    if (!r->bad && (size_t)n > (r->len - r->pos) / min_size)
        r->bad = 1;
    return r->bad ? 0 : n;
}

/* `bytes`: a u32 length and that many bytes, copied into the arena (size *n). */
static void *bytes(rd *r, uint32_t *n)
{
    *n = count(r, 1);
    if (r->bad || *n == 0)
        return NULL;
    void *d = alloc(r, *n, 1);
    if (d)
        memcpy(d, r->p + r->pos, *n);
    r->pos += *n;
    return d;
}

static void sampler(rd *r, VkSamplerCreateInfo *s)
{
    s->sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO;
    s->flags = u32(r);
    s->magFilter = (VkFilter)u32(r);
    s->minFilter = (VkFilter)u32(r);
    s->mipmapMode = (VkSamplerMipmapMode)u32(r);
    s->addressModeU = (VkSamplerAddressMode)u32(r);
    s->addressModeV = (VkSamplerAddressMode)u32(r);
    s->addressModeW = (VkSamplerAddressMode)u32(r);
    s->mipLodBias = f32(r);
    s->anisotropyEnable = boolean(r);
    s->maxAnisotropy = f32(r);
    s->compareEnable = boolean(r);
    s->compareOp = (VkCompareOp)u32(r);
    s->minLod = f32(r);
    s->maxLod = f32(r);
    s->borderColor = (VkBorderColor)u32(r);
    s->unnormalizedCoordinates = boolean(r);
}

static void set_layout(rd *r, vkdec_set_layout *s)
{
    s->ci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    s->ci.flags = u32(r);
    uint32_t n = count(r, 24);
    VkDescriptorSetLayoutBinding *b = alloc(r, sizeof(*b), n);
    VkDescriptorBindingFlags *f = alloc(r, sizeof(*f), n);
    s->samplers = alloc(r, sizeof(*s->samplers), n);
    if (!b || !f || !s->samplers)
        return;
    int any_flags = 0;
    for (uint32_t i = 0; i < n && !r->bad && !r->oom; i++) {
        b[i].binding = u32(r);
        b[i].descriptorType = (VkDescriptorType)u32(r);
        b[i].descriptorCount = u32(r);
        b[i].stageFlags = u32(r);
        f[i] = u32(r);
        any_flags |= f[i] != 0;
        uint32_t m = count(r, VKENC_SAMPLER_SIZE);
        if (m == 0)
            continue;
        if (m != b[i].descriptorCount) {
            r->bad = 1;
            break;
        }
        s->samplers[i] = alloc(r, sizeof(VkSamplerCreateInfo), m);
        for (uint32_t j = 0; s->samplers[i] && j < m; j++)
            sampler(r, &s->samplers[i][j]);
    }
    s->ci.bindingCount = n;
    s->ci.pBindings = b;
    if (any_flags) {
        s->flags.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_BINDING_FLAGS_CREATE_INFO;
        s->flags.bindingCount = n;
        s->flags.pBindingFlags = f;
        s->ci.pNext = &s->flags;
    }
}

static void layout(rd *r, vkdec_layout *l)
{
    l->ci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    l->ci.flags = u32(r);
    uint32_t n = count(r, 4);
    l->sets = alloc(r, sizeof(*l->sets), n);
    l->present = alloc(r, 1, n);
    if (!l->sets || !l->present)
        return;
    l->ci.setLayoutCount = n;
    for (uint32_t i = 0; i < n && !r->bad && !r->oom; i++) {
        uint32_t p = u32(r);
        if (p > 1)
            r->bad = 1;
        l->present[i] = (uint8_t)p;
        if (p)
            set_layout(r, &l->sets[i]);
    }
    uint32_t np = count(r, 12);
    VkPushConstantRange *pc = alloc(r, sizeof(*pc), np);
    for (uint32_t i = 0; pc && i < np; i++) {
        pc[i].stageFlags = u32(r);
        pc[i].offset = u32(r);
        pc[i].size = u32(r);
    }
    l->ci.pushConstantRangeCount = np;
    l->ci.pPushConstantRanges = np ? pc : NULL;
}

static void stage(rd *r, VkPipelineShaderStageCreateInfo *s, VkShaderModuleCreateInfo *m)
{
    s->sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    s->stage = (VkShaderStageFlagBits)u32(r);
    s->flags = u32(r);
    uint32_t n = 0;
    m->sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    m->pCode = bytes(r, &n);
    m->codeSize = n;
    if (n == 0 || n % 4 != 0)
        r->bad = 1;
    uint32_t name_len = count(r, 1);
    char *name = alloc(r, 1, (size_t)name_len + 1);
    if (name && !r->bad) {
        memcpy(name, r->p + r->pos, name_len);
        r->pos += name_len;
        if (memchr(name, 0, name_len))
            r->bad = 1;
    }
    s->pName = name;
    uint32_t ne = count(r, 12);
    VkSpecializationMapEntry *e = alloc(r, sizeof(*e), ne);
    for (uint32_t i = 0; e && i < ne; i++) {
        e[i].constantID = u32(r);
        e[i].offset = u32(r);
        e[i].size = u32(r);
    }
    uint32_t nd = 0;
    void *data = bytes(r, &nd);
    if (ne || nd) {
        VkSpecializationInfo *sp = alloc(r, sizeof(*sp), 1);
        if (sp) {
            sp->mapEntryCount = ne;
            sp->pMapEntries = e;
            sp->dataSize = nd;
            sp->pData = data;
            /* Every entry must lie inside the data (the spec's rule; the driver trusts it). */
            for (uint32_t i = 0; i < ne; i++)
                if (e[i].offset > nd || e[i].size > nd - e[i].offset)
                    r->bad = 1;
        }
        s->pSpecializationInfo = sp;
    }
}

static void header(rd *r, const char *magic)
{
    if (r->len < 12 || memcmp(r->p, magic, 4) != 0) {
        r->bad = 1;
        return;
    }
    r->pos = 4;
    if (u32(r) != VKENC_VERSION || u32(r) != 0)
        r->bad = 1;
}

static int present(rd *r)
{
    uint32_t p = u32(r);
    if (p > 1)
        r->bad = 1;
    return p == 1 && !r->bad;
}

static void refs(rd *r, uint32_t *n_out, const VkAttachmentReference2 **out)
{
    uint32_t n = count(r, 12);
    VkAttachmentReference2 *a = alloc(r, sizeof(*a), n);
    for (uint32_t i = 0; a && i < n; i++) {
        a[i].sType = VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2;
        a[i].attachment = u32(r);
        a[i].layout = (VkImageLayout)u32(r);
        a[i].aspectMask = u32(r);
    }
    if (n_out)
        *n_out = n;
    *out = n ? a : NULL;
}

static const VkAttachmentReference *refs1(rd *r, uint32_t n, const VkAttachmentReference2 *a)
{
    VkAttachmentReference *b = n ? alloc(r, sizeof(*b), n) : NULL;
    for (uint32_t i = 0; b && i < n; i++) {
        b[i].attachment = a[i].attachment;
        b[i].layout = a[i].layout;
        if (a[i].aspectMask)
            r->bad = 1; /* version 1 has no aspect masks: the encoder wrote 0 */
    }
    return b;
}

/* The same pass in vkCreateRenderPass's form: an application that created it so is replayed so,
 * or its pipelines would encode (and be looked up) differently. */
static void render_pass1(rd *r, const VkRenderPassCreateInfo2 *rp, VkRenderPassCreateInfo *o)
{
    o->sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO;
    o->flags = rp->flags;
    VkAttachmentDescription *a = alloc(r, sizeof(*a), rp->attachmentCount);
    for (uint32_t i = 0; a && i < rp->attachmentCount; i++) {
        const VkAttachmentDescription2 *s = &rp->pAttachments[i];
        a[i] = (VkAttachmentDescription){s->flags,          s->format,        s->samples,
                                         s->loadOp,         s->storeOp,       s->stencilLoadOp,
                                         s->stencilStoreOp, s->initialLayout, s->finalLayout};
    }
    o->attachmentCount = rp->attachmentCount;
    o->pAttachments = rp->attachmentCount ? a : NULL;
    VkSubpassDescription *sp = alloc(r, sizeof(*sp), rp->subpassCount);
    for (uint32_t i = 0; sp && i < rp->subpassCount; i++) {
        const VkSubpassDescription2 *s = &rp->pSubpasses[i];
        if (s->viewMask)
            r->bad = 1;
        sp[i].flags = s->flags;
        sp[i].pipelineBindPoint = s->pipelineBindPoint;
        sp[i].inputAttachmentCount = s->inputAttachmentCount;
        sp[i].pInputAttachments = refs1(r, s->inputAttachmentCount, s->pInputAttachments);
        sp[i].colorAttachmentCount = s->colorAttachmentCount;
        sp[i].pColorAttachments = refs1(r, s->colorAttachmentCount, s->pColorAttachments);
        sp[i].pResolveAttachments = s->pResolveAttachments
                                        ? refs1(r, s->colorAttachmentCount, s->pResolveAttachments)
                                        : NULL;
        sp[i].pDepthStencilAttachment =
            s->pDepthStencilAttachment ? refs1(r, 1, s->pDepthStencilAttachment) : NULL;
        sp[i].preserveAttachmentCount = s->preserveAttachmentCount;
        sp[i].pPreserveAttachments = s->pPreserveAttachments;
    }
    o->subpassCount = rp->subpassCount;
    o->pSubpasses = rp->subpassCount ? sp : NULL;
    VkSubpassDependency *d = alloc(r, sizeof(*d), rp->dependencyCount);
    for (uint32_t i = 0; d && i < rp->dependencyCount; i++) {
        const VkSubpassDependency2 *s = &rp->pDependencies[i];
        if (s->viewOffset)
            r->bad = 1;
        d[i] = (VkSubpassDependency){s->srcSubpass,     s->dstSubpass,    s->srcStageMask,
                                     s->dstStageMask,   s->srcAccessMask, s->dstAccessMask,
                                     s->dependencyFlags};
    }
    o->dependencyCount = rp->dependencyCount;
    o->pDependencies = rp->dependencyCount ? d : NULL;
    if (rp->correlatedViewMaskCount)
        r->bad = 1;
}

static void render_pass(rd *r, VkRenderPassCreateInfo2 *rp, uint32_t *version)
{
    rp->sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO_2;
    uint32_t with = u32(r);
    if (with != 1 && with != 2)
        r->bad = 1;
    *version = with;
    rp->flags = u32(r);
    uint32_t na = count(r, 36);
    VkAttachmentDescription2 *a = alloc(r, sizeof(*a), na);
    for (uint32_t i = 0; a && i < na; i++) {
        a[i].sType = VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2;
        a[i].flags = u32(r);
        a[i].format = (VkFormat)u32(r);
        a[i].samples = (VkSampleCountFlagBits)u32(r);
        a[i].loadOp = (VkAttachmentLoadOp)u32(r);
        a[i].storeOp = (VkAttachmentStoreOp)u32(r);
        a[i].stencilLoadOp = (VkAttachmentLoadOp)u32(r);
        a[i].stencilStoreOp = (VkAttachmentStoreOp)u32(r);
        a[i].initialLayout = (VkImageLayout)u32(r);
        a[i].finalLayout = (VkImageLayout)u32(r);
    }
    rp->attachmentCount = na;
    rp->pAttachments = na ? a : NULL;
    uint32_t ns = count(r, 32);
    VkSubpassDescription2 *s = alloc(r, sizeof(*s), ns);
    for (uint32_t i = 0; s && i < ns && !r->bad && !r->oom; i++) {
        s[i].sType = VK_STRUCTURE_TYPE_SUBPASS_DESCRIPTION_2;
        s[i].flags = u32(r);
        s[i].pipelineBindPoint = (VkPipelineBindPoint)u32(r);
        s[i].viewMask = u32(r);
        refs(r, &s[i].inputAttachmentCount, &s[i].pInputAttachments);
        refs(r, &s[i].colorAttachmentCount, &s[i].pColorAttachments);
        uint32_t nr = 0, nd = 0;
        refs(r, &nr, &s[i].pResolveAttachments);
        if (nr != 0 && nr != s[i].colorAttachmentCount)
            r->bad = 1;
        refs(r, &nd, &s[i].pDepthStencilAttachment);
        if (nd > 1)
            r->bad = 1;
        uint32_t np = count(r, 4);
        uint32_t *p = alloc(r, sizeof(*p), np);
        for (uint32_t j = 0; p && j < np; j++)
            p[j] = u32(r);
        s[i].preserveAttachmentCount = np;
        s[i].pPreserveAttachments = np ? p : NULL;
    }
    rp->subpassCount = ns;
    rp->pSubpasses = ns ? s : NULL;
    uint32_t nd = count(r, 32);
    VkSubpassDependency2 *d = alloc(r, sizeof(*d), nd);
    for (uint32_t i = 0; d && i < nd; i++) {
        d[i].sType = VK_STRUCTURE_TYPE_SUBPASS_DEPENDENCY_2;
        d[i].srcSubpass = u32(r);
        d[i].dstSubpass = u32(r);
        d[i].srcStageMask = u32(r);
        d[i].dstStageMask = u32(r);
        d[i].srcAccessMask = u32(r);
        d[i].dstAccessMask = u32(r);
        d[i].dependencyFlags = u32(r);
        d[i].viewOffset = i32(r);
    }
    rp->dependencyCount = nd;
    rp->pDependencies = nd ? d : NULL;
    uint32_t nc = count(r, 4);
    uint32_t *c = alloc(r, sizeof(*c), nc);
    for (uint32_t i = 0; c && i < nc; i++)
        c[i] = u32(r);
    rp->correlatedViewMaskCount = nc;
    rp->pCorrelatedViewMasks = nc ? c : NULL;
}

static void stencil(rd *r, VkStencilOpState *s)
{
    s->failOp = (VkStencilOp)u32(r);
    s->passOp = (VkStencilOp)u32(r);
    s->depthFailOp = (VkStencilOp)u32(r);
    s->compareOp = (VkCompareOp)u32(r);
    s->compareMask = u32(r);
    s->writeMask = u32(r);
    s->reference = u32(r);
}

static void graphics(rd *r, vkdec_pipeline *p)
{
    VkGraphicsPipelineCreateInfo *g = &p->graphics_ci;
    g->sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO;
    g->flags = u32(r);
    uint32_t n = count(r, 28);
    p->stages = alloc(r, sizeof(*p->stages), n);
    p->modules = alloc(r, sizeof(*p->modules), n);
    for (uint32_t i = 0; p->stages && p->modules && i < n && !r->bad && !r->oom; i++)
        stage(r, &p->stages[i], &p->modules[i]);
    p->num_stages = n;
    g->stageCount = n;
    g->pStages = p->stages;
    if (present(r)) {
        VkPipelineVertexInputStateCreateInfo *vi = alloc(r, sizeof(*vi), 1);
        if (vi) {
            vi->sType = VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO;
            vi->flags = u32(r);
            uint32_t nb = count(r, 12);
            VkVertexInputBindingDescription *b = alloc(r, sizeof(*b), nb);
            for (uint32_t i = 0; b && i < nb; i++) {
                b[i].binding = u32(r);
                b[i].stride = u32(r);
                b[i].inputRate = (VkVertexInputRate)u32(r);
            }
            uint32_t na = count(r, 16);
            VkVertexInputAttributeDescription *a = alloc(r, sizeof(*a), na);
            for (uint32_t i = 0; a && i < na; i++) {
                a[i].location = u32(r);
                a[i].binding = u32(r);
                a[i].format = (VkFormat)u32(r);
                a[i].offset = u32(r);
            }
            vi->vertexBindingDescriptionCount = nb;
            vi->pVertexBindingDescriptions = nb ? b : NULL;
            vi->vertexAttributeDescriptionCount = na;
            vi->pVertexAttributeDescriptions = na ? a : NULL;
        }
        g->pVertexInputState = vi;
    }
    if (present(r)) {
        VkPipelineInputAssemblyStateCreateInfo *ia = alloc(r, sizeof(*ia), 1);
        if (ia) {
            ia->sType = VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO;
            ia->flags = u32(r);
            ia->topology = (VkPrimitiveTopology)u32(r);
            ia->primitiveRestartEnable = boolean(r);
        }
        g->pInputAssemblyState = ia;
    }
    if (present(r)) {
        VkPipelineTessellationStateCreateInfo *ts = alloc(r, sizeof(*ts), 1);
        if (ts) {
            ts->sType = VK_STRUCTURE_TYPE_PIPELINE_TESSELLATION_STATE_CREATE_INFO;
            ts->flags = u32(r);
            ts->patchControlPoints = u32(r);
        }
        g->pTessellationState = ts;
    }
    if (present(r)) {
        VkPipelineViewportStateCreateInfo *vp = alloc(r, sizeof(*vp), 1);
        if (vp) {
            vp->sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO;
            vp->flags = u32(r);
            vp->viewportCount = u32(r);
            uint32_t nv = count(r, 24);
            if (nv && nv != vp->viewportCount)
                r->bad = 1;
            VkViewport *v = alloc(r, sizeof(*v), nv);
            for (uint32_t i = 0; v && i < nv; i++) {
                v[i].x = f32(r);
                v[i].y = f32(r);
                v[i].width = f32(r);
                v[i].height = f32(r);
                v[i].minDepth = f32(r);
                v[i].maxDepth = f32(r);
            }
            vp->pViewports = nv ? v : NULL;
            vp->scissorCount = u32(r);
            uint32_t ns = count(r, 16);
            if (ns && ns != vp->scissorCount)
                r->bad = 1;
            VkRect2D *s = alloc(r, sizeof(*s), ns);
            for (uint32_t i = 0; s && i < ns; i++) {
                s[i].offset.x = i32(r);
                s[i].offset.y = i32(r);
                s[i].extent.width = u32(r);
                s[i].extent.height = u32(r);
            }
            vp->pScissors = ns ? s : NULL;
        }
        g->pViewportState = vp;
    }
    if (present(r)) {
        VkPipelineRasterizationStateCreateInfo *rs = alloc(r, sizeof(*rs), 1);
        if (rs) {
            rs->sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO;
            rs->flags = u32(r);
            rs->depthClampEnable = boolean(r);
            rs->rasterizerDiscardEnable = boolean(r);
            rs->polygonMode = (VkPolygonMode)u32(r);
            rs->cullMode = u32(r);
            rs->frontFace = (VkFrontFace)u32(r);
            rs->depthBiasEnable = boolean(r);
            rs->depthBiasConstantFactor = f32(r);
            rs->depthBiasClamp = f32(r);
            rs->depthBiasSlopeFactor = f32(r);
            rs->lineWidth = f32(r);
        }
        g->pRasterizationState = rs;
    }
    if (present(r)) {
        VkPipelineMultisampleStateCreateInfo *ms = alloc(r, sizeof(*ms), 1);
        if (ms) {
            ms->sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO;
            ms->flags = u32(r);
            ms->rasterizationSamples = (VkSampleCountFlagBits)u32(r);
            ms->sampleShadingEnable = boolean(r);
            ms->minSampleShading = f32(r);
            uint32_t nw = count(r, 4);
            if (nw && nw != ((uint64_t)ms->rasterizationSamples + 31u) / 32u)
                r->bad = 1;
            uint32_t *w = alloc(r, sizeof(*w), nw);
            for (uint32_t i = 0; w && i < nw; i++)
                w[i] = u32(r);
            ms->pSampleMask = nw ? w : NULL;
            ms->alphaToCoverageEnable = boolean(r);
            ms->alphaToOneEnable = boolean(r);
        }
        g->pMultisampleState = ms;
    }
    if (present(r)) {
        VkPipelineDepthStencilStateCreateInfo *ds = alloc(r, sizeof(*ds), 1);
        if (ds) {
            ds->sType = VK_STRUCTURE_TYPE_PIPELINE_DEPTH_STENCIL_STATE_CREATE_INFO;
            ds->flags = u32(r);
            ds->depthTestEnable = boolean(r);
            ds->depthWriteEnable = boolean(r);
            ds->depthCompareOp = (VkCompareOp)u32(r);
            ds->depthBoundsTestEnable = boolean(r);
            ds->stencilTestEnable = boolean(r);
            stencil(r, &ds->front);
            stencil(r, &ds->back);
            ds->minDepthBounds = f32(r);
            ds->maxDepthBounds = f32(r);
        }
        g->pDepthStencilState = ds;
    }
    if (present(r)) {
        VkPipelineColorBlendStateCreateInfo *cb = alloc(r, sizeof(*cb), 1);
        if (cb) {
            cb->sType = VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO;
            cb->flags = u32(r);
            cb->logicOpEnable = boolean(r);
            cb->logicOp = (VkLogicOp)u32(r);
            uint32_t na = count(r, 32);
            VkPipelineColorBlendAttachmentState *a = alloc(r, sizeof(*a), na);
            for (uint32_t i = 0; a && i < na; i++) {
                a[i].blendEnable = boolean(r);
                a[i].srcColorBlendFactor = (VkBlendFactor)u32(r);
                a[i].dstColorBlendFactor = (VkBlendFactor)u32(r);
                a[i].colorBlendOp = (VkBlendOp)u32(r);
                a[i].srcAlphaBlendFactor = (VkBlendFactor)u32(r);
                a[i].dstAlphaBlendFactor = (VkBlendFactor)u32(r);
                a[i].alphaBlendOp = (VkBlendOp)u32(r);
                a[i].colorWriteMask = u32(r);
            }
            cb->attachmentCount = na;
            cb->pAttachments = na ? a : NULL;
            for (int i = 0; i < 4; i++)
                cb->blendConstants[i] = f32(r);
        }
        g->pColorBlendState = cb;
    }
    if (present(r)) {
        VkPipelineDynamicStateCreateInfo *dy = alloc(r, sizeof(*dy), 1);
        if (dy) {
            dy->sType = VK_STRUCTURE_TYPE_PIPELINE_DYNAMIC_STATE_CREATE_INFO;
            dy->flags = u32(r);
            uint32_t nd = count(r, 4);
            VkDynamicState *d = alloc(r, sizeof(*d), nd);
            for (uint32_t i = 0; d && i < nd; i++)
                d[i] = (VkDynamicState)u32(r);
            dy->dynamicStateCount = nd;
            dy->pDynamicStates = nd ? d : NULL;
        }
        g->pDynamicState = dy;
        p->dynamic = dy;
    }
    p->has_layout = present(r);
    if (p->has_layout)
        layout(r, &p->layout);
    uint32_t kind = u32(r);
    if (kind == 1) {
        p->render_pass = 1;
        render_pass(r, &p->rp, &p->rp_version);
        if (p->rp_version == 1 && !r->bad)
            render_pass1(r, &p->rp, &p->rp1);
        g->subpass = u32(r);
        if (!r->bad && g->subpass >= p->rp.subpassCount)
            r->bad = 1;
    } else if (kind == 2) {
        VkPipelineRenderingCreateInfo *ri = &p->rendering;
        ri->sType = VK_STRUCTURE_TYPE_PIPELINE_RENDERING_CREATE_INFO;
        ri->viewMask = u32(r);
        uint32_t nc = count(r, 4);
        VkFormat *f = alloc(r, sizeof(*f), nc);
        for (uint32_t i = 0; f && i < nc; i++)
            f[i] = (VkFormat)u32(r);
        ri->colorAttachmentCount = nc;
        ri->pColorAttachmentFormats = nc ? f : NULL;
        ri->depthAttachmentFormat = (VkFormat)u32(r);
        ri->stencilAttachmentFormat = (VkFormat)u32(r);
        g->pNext = ri;
    } else {
        r->bad = 1;
    }
}

int vkdec_pipeline_decode(const void *data, size_t len, int is_graphics, vkdec_pipeline *out)
{
    rd r = {data, len, 0, 0, 0, NULL};
    memset(out, 0, sizeof(*out));
    out->graphics = is_graphics;
    if (!data)
        r.bad = 1;
    header(&r, is_graphics ? VKENC_MAGIC_GRAPHICS : VKENC_MAGIC_COMPUTE);
    if (is_graphics) {
        graphics(&r, out);
    } else {
        out->compute.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
        out->compute.flags = u32(&r);
        out->stages = alloc(&r, sizeof(*out->stages), 1);
        out->modules = alloc(&r, sizeof(*out->modules), 1);
        if (out->stages && out->modules) {
            out->num_stages = 1;
            stage(&r, out->stages, out->modules);
            out->compute.stage = *out->stages;
        }
        out->has_layout = 1;
        layout(&r, &out->layout);
    }
    if (!r.bad && r.pos != r.len)
        r.bad = 1; /* bytes left over */
    out->arena = r.arena;
    if (r.bad || r.oom) {
        int rc = r.oom && !r.bad ? -2 : -1;
        vkdec_free(out);
        return rc;
    }
    return 0;
}

void vkdec_free(vkdec_pipeline *p)
{
    vkdec_arena *a = p->arena;
    while (a) {
        vkdec_arena *n = a->next;
        free(a);
        a = n;
    }
    memset(p, 0, sizeof(*p));
}
