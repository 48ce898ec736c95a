/* vk_decode_test.c - the replay side of the encoding (client/src/vulkan/vk_decode.c: SODB.md
 * section 3 bytes back into create-infos, which re-encode to the same bytes) and the device
 * identity (client/src/vulkan/vk_identity.c: the target and the VkPipelineCache header check). */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vulkan/psdb_vulkan.h"

#define MAX_OBJ 64

/* A lookup over (type, handle) -> encoded bytes, filled while re-encoding a decoded pipeline. */
typedef struct table {
    VkObjectType type[MAX_OBJ];
    uint64_t handle[MAX_OBJ];
    vkenc enc[MAX_OBJ];
    uint32_t depth[MAX_OBJ], color[MAX_OBJ];
    int n;
} table;

static int table_find(void *ctx, VkObjectType type, uint64_t handle, vkenc_object *out)
{
    table *t = ctx;
    for (int i = 0; i < t->n; i++)
        if (t->type[i] == type && t->handle[i] == handle) {
            memset(out, 0, sizeof(*out));
            out->data = t->enc[i].data;
            out->len = t->enc[i].len;
            out->subpass_depth = t->depth[i];
            out->subpass_color = t->color[i];
            return 0;
        }
    return -1;
}

static vkenc *table_add(table *t, VkObjectType type, uint64_t handle)
{
    ck_assert_int_lt(t->n, MAX_OBJ);
    t->type[t->n] = type;
    t->handle[t->n] = handle;
    memset(&t->enc[t->n], 0, sizeof(vkenc));
    return &t->enc[t->n++];
}

static void table_free(table *t)
{
    for (int i = 0; i < t->n; i++)
        vkenc_free(&t->enc[i]);
}

/* Re-encodes a decoded pipeline the way the layer would have seen it: every object created from
 * the decoded create-infos under a made-up handle. */
static void reencode(vkdec_pipeline *p, vkenc *out)
{
    table t = {0};
    vkenc_lookup lk = {table_find, &t};
    VkSampler samplers[MAX_OBJ];
    VkDescriptorSetLayout sets[16];
    uint32_t ns = 0;
    for (uint32_t i = 0; i < p->num_stages; i++) {
        vkenc_shader_module(table_add(&t, VK_OBJECT_TYPE_SHADER_MODULE, 0x100 + i), &p->modules[i]);
        p->stages[i].module = (VkShaderModule)(uintptr_t)(0x100 + i);
    }
    if (p->has_layout) {
        vkdec_layout *l = &p->layout;
        ck_assert_uint_le(l->ci.setLayoutCount, 16);
        for (uint32_t i = 0; i < l->ci.setLayoutCount; i++) {
            sets[i] = VK_NULL_HANDLE;
            if (!l->present[i])
                continue;
            VkDescriptorSetLayoutBinding *b =
                (VkDescriptorSetLayoutBinding *)l->sets[i].ci.pBindings;
            for (uint32_t j = 0; j < l->sets[i].ci.bindingCount; j++) {
                if (!l->sets[i].samplers[j])
                    continue;
                b[j].pImmutableSamplers = &samplers[ns];
                for (uint32_t k = 0; k < b[j].descriptorCount; k++, ns++) {
                    samplers[ns] = (VkSampler)(uintptr_t)(0x1000 + ns);
                    vkenc_sampler(table_add(&t, VK_OBJECT_TYPE_SAMPLER, 0x1000 + ns),
                                  &l->sets[i].samplers[j][k]);
                }
            }
            vkenc_set_layout(table_add(&t, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, 0x300 + i),
                             &l->sets[i].ci, &lk);
            sets[i] = (VkDescriptorSetLayout)(uintptr_t)(0x300 + i);
        }
        l->ci.pSetLayouts = sets;
        vkenc_pipeline_layout(table_add(&t, VK_OBJECT_TYPE_PIPELINE_LAYOUT, 0x200), &l->ci, &lk);
    }
    if (p->graphics) {
        p->graphics_ci.layout = p->has_layout ? (VkPipelineLayout)(uintptr_t)0x200 : VK_NULL_HANDLE;
        if (p->render_pass) {
            vkenc *rp = table_add(&t, VK_OBJECT_TYPE_RENDER_PASS, 0x400);
            if (p->rp_version == 1)
                vkenc_render_pass(rp, &p->rp1, &t.depth[t.n - 1], &t.color[t.n - 1]);
            else
                vkenc_render_pass2(rp, &p->rp, &t.depth[t.n - 1], &t.color[t.n - 1]);
            p->graphics_ci.renderPass = (VkRenderPass)(uintptr_t)0x400;
        }
        vkenc_graphics_pipeline(out, &p->graphics_ci, &lk);
    } else {
        p->compute.layout = (VkPipelineLayout)(uintptr_t)0x200;
        p->compute.stage.module = p->stages[0].module;
        vkenc_compute_pipeline(out, &p->compute, &lk);
    }
    ck_assert(!out->oom);
    ck_assert_uint_eq(out->unrepresentable, 0);
    table_free(&t);
}

static void assert_roundtrip(const vkenc *e, int graphics)
{
    vkdec_pipeline p;
    vkenc again = {0};
    ck_assert_int_eq(vkdec_pipeline_decode(e->data, e->len, graphics, &p), 0);
    reencode(&p, &again);
    ck_assert_uint_eq(again.len, e->len);
    ck_assert_mem_eq(again.data, e->data, e->len);
    vkenc_free(&again);
    vkdec_free(&p);
}

/* Every proper prefix, a trailing byte, the other kind's magic, a version or reserved word other
 * than the format's: rejected, nothing left allocated (ASan). */
static void assert_rejects_damage(const vkenc *e, int graphics)
{
    vkdec_pipeline p;
    uint8_t *b = malloc(e->len + 1);
    ck_assert_ptr_nonnull(b);
    memcpy(b, e->data, e->len);
    for (size_t n = 0; n < e->len; n++)
        ck_assert_int_eq(vkdec_pipeline_decode(b, n, graphics, &p), -1);
    b[e->len] = 0;
    ck_assert_int_eq(vkdec_pipeline_decode(b, e->len + 1, graphics, &p), -1);
    ck_assert_int_eq(vkdec_pipeline_decode(b, e->len, !graphics, &p), -1);
    for (size_t off = 4; off < 12; off += 4) {
        memcpy(b, e->data, e->len);
        b[off] ^= 2;
        ck_assert_int_eq(vkdec_pipeline_decode(b, e->len, graphics, &p), -1);
    }
    free(b);
}

static const uint32_t SPIRV[2] = {0x07230203u, 0x00010000u};
static const int32_t MODE = 2;

static void compute_entry(vkenc *e)
{
    table t = {0};
    vkenc_lookup lk = {table_find, &t};
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sizeof(SPIRV),
                                    .pCode = SPIRV};
    vkenc_shader_module(table_add(&t, VK_OBJECT_TYPE_SHADER_MODULE, 1), &mci);
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    vkenc_pipeline_layout(table_add(&t, VK_OBJECT_TYPE_PIPELINE_LAYOUT, 2), &lci, &lk);
    VkSpecializationMapEntry me = {0, 0, 4};
    VkSpecializationInfo si = {1, &me, 4, &MODE};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = (VkShaderModule)(uintptr_t)1,
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = (VkPipelineLayout)(uintptr_t)2};
    vkenc_compute_pipeline(e, &ci, &lk);
    ck_assert(!e->oom);
    ck_assert_uint_eq(e->unrepresentable, 0);
    table_free(&t);
}

/* A graphics pipeline with every state present, a set layout with an immutable sampler and
 * binding flags; render_pass 1: a vkCreateRenderPass2 pass with depth, 2: the same pass from
 * vkCreateRenderPass, 0: dynamic rendering. */
static void graphics_entry(vkenc *e, int render_pass)
{
    table t = {0};
    vkenc_lookup lk = {table_find, &t};
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sizeof(SPIRV),
                                    .pCode = SPIRV};
    vkenc_shader_module(table_add(&t, VK_OBJECT_TYPE_SHADER_MODULE, 1), &mci);
    VkSamplerCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
                               .magFilter = VK_FILTER_LINEAR,
                               .addressModeU = VK_SAMPLER_ADDRESS_MODE_MIRRORED_REPEAT,
                               .mipLodBias = 0.5f,
                               .maxLod = 4.0f,
                               .compareEnable = VK_TRUE,
                               .compareOp = VK_COMPARE_OP_LESS};
    vkenc_sampler(table_add(&t, VK_OBJECT_TYPE_SAMPLER, 5), &sci);
    VkSampler imm = (VkSampler)(uintptr_t)5;
    VkDescriptorSetLayoutBinding binds[2] = {
        {0, VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, 1, VK_SHADER_STAGE_VERTEX_BIT, NULL},
        {3, VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1, VK_SHADER_STAGE_FRAGMENT_BIT, &imm}};
    VkDescriptorBindingFlags bflags[2] = {0, VK_DESCRIPTOR_BINDING_PARTIALLY_BOUND_BIT};
    VkDescriptorSetLayoutBindingFlagsCreateInfo bfi = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_BINDING_FLAGS_CREATE_INFO,
        .bindingCount = 2,
        .pBindingFlags = bflags};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .pNext = &bfi,
                                           .bindingCount = 2,
                                           .pBindings = binds};
    vkenc_set_layout(table_add(&t, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, 6), &dci, &lk);
    VkDescriptorSetLayout sets[2] = {VK_NULL_HANDLE, (VkDescriptorSetLayout)(uintptr_t)6};
    VkPushConstantRange pcr = {VK_SHADER_STAGE_FRAGMENT_BIT, 16, 32};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 2,
                                      .pSetLayouts = sets,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    vkenc_pipeline_layout(table_add(&t, VK_OBJECT_TYPE_PIPELINE_LAYOUT, 2), &lci, &lk);
    VkAttachmentDescription2 att[2] = {{.sType = VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2,
                                        .format = VK_FORMAT_R8G8B8A8_UNORM,
                                        .samples = VK_SAMPLE_COUNT_4_BIT,
                                        .loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR,
                                        .finalLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL},
                                       {.sType = VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2,
                                        .format = VK_FORMAT_D32_SFLOAT,
                                        .samples = VK_SAMPLE_COUNT_4_BIT}};
    VkAttachmentReference2 cref = {VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2, NULL, 0,
                                   VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL,
                                   VK_IMAGE_ASPECT_COLOR_BIT};
    VkAttachmentReference2 dref = {VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2, NULL, 1,
                                   VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL,
                                   VK_IMAGE_ASPECT_DEPTH_BIT};
    VkSubpassDescription2 sub = {.sType = VK_STRUCTURE_TYPE_SUBPASS_DESCRIPTION_2,
                                 .pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                                 .colorAttachmentCount = 1,
                                 .pColorAttachments = &cref,
                                 .pDepthStencilAttachment = &dref};
    VkSubpassDependency2 dep = {.sType = VK_STRUCTURE_TYPE_SUBPASS_DEPENDENCY_2,
                                .srcSubpass = VK_SUBPASS_EXTERNAL,
                                .srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
                                .dstStageMask = VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT,
                                .viewOffset = -1};
    VkRenderPassCreateInfo2 rpi = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO_2,
                                   .attachmentCount = 2,
                                   .pAttachments = att,
                                   .subpassCount = 1,
                                   .pSubpasses = &sub,
                                   .dependencyCount = 1,
                                   .pDependencies = &dep};
    vkenc *rp = table_add(&t, VK_OBJECT_TYPE_RENDER_PASS, 7);
    if (render_pass == 2) {
        VkAttachmentDescription a1[2];
        for (int i = 0; i < 2; i++)
            a1[i] = (VkAttachmentDescription){
                att[i].flags,          att[i].format,        att[i].samples,
                att[i].loadOp,         att[i].storeOp,       att[i].stencilLoadOp,
                att[i].stencilStoreOp, att[i].initialLayout, att[i].finalLayout};
        VkAttachmentReference c1 = {0, cref.layout}, d1 = {1, dref.layout};
        VkSubpassDescription s1 = {.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                                   .colorAttachmentCount = 1,
                                   .pColorAttachments = &c1,
                                   .pDepthStencilAttachment = &d1};
        VkSubpassDependency dp1 = {
            dep.srcSubpass, dep.dstSubpass, dep.srcStageMask, dep.dstStageMask, 0, 0, 0};
        VkRenderPassCreateInfo r1 = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
                                     .attachmentCount = 2,
                                     .pAttachments = a1,
                                     .subpassCount = 1,
                                     .pSubpasses = &s1,
                                     .dependencyCount = 1,
                                     .pDependencies = &dp1};
        vkenc_render_pass(rp, &r1, &t.depth[t.n - 1], &t.color[t.n - 1]);
    } else {
        vkenc_render_pass2(rp, &rpi, &t.depth[t.n - 1], &t.color[t.n - 1]);
    }
    VkPipelineShaderStageCreateInfo st[2] = {
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_VERTEX_BIT,
         .module = (VkShaderModule)(uintptr_t)1,
         .pName = "main"},
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_FRAGMENT_BIT,
         .module = (VkShaderModule)(uintptr_t)1,
         .pName = "fs_main"}};
    VkVertexInputBindingDescription vb = {0, 32, VK_VERTEX_INPUT_RATE_VERTEX};
    VkVertexInputAttributeDescription va[2] = {{0, 0, VK_FORMAT_R32G32B32_SFLOAT, 0},
                                               {1, 0, VK_FORMAT_R32G32_SFLOAT, 12}};
    VkPipelineVertexInputStateCreateInfo vi = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO,
        .vertexBindingDescriptionCount = 1,
        .pVertexBindingDescriptions = &vb,
        .vertexAttributeDescriptionCount = 2,
        .pVertexAttributeDescriptions = va};
    VkPipelineInputAssemblyStateCreateInfo ia = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO,
        .topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_STRIP,
        .primitiveRestartEnable = VK_TRUE};
    VkRect2D sc = {{-2, 3}, {64, 32}};
    VkPipelineViewportStateCreateInfo vp = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO,
        .viewportCount = 1,
        .scissorCount = 1,
        .pScissors = &sc};
    VkPipelineRasterizationStateCreateInfo rs = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO,
        .cullMode = VK_CULL_MODE_BACK_BIT,
        .frontFace = VK_FRONT_FACE_CLOCKWISE,
        .depthBiasEnable = VK_TRUE,
        .depthBiasSlopeFactor = 1.25f,
        .lineWidth = 1.0f};
    VkSampleMask mask = 0x5;
    VkPipelineMultisampleStateCreateInfo ms = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO,
        .rasterizationSamples = VK_SAMPLE_COUNT_4_BIT,
        .sampleShadingEnable = VK_TRUE,
        .minSampleShading = 0.5f,
        .pSampleMask = &mask,
        .alphaToCoverageEnable = VK_TRUE};
    VkPipelineDepthStencilStateCreateInfo ds = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_DEPTH_STENCIL_STATE_CREATE_INFO,
        .depthTestEnable = VK_TRUE,
        .depthWriteEnable = VK_TRUE,
        .depthCompareOp = VK_COMPARE_OP_GREATER_OR_EQUAL,
        .stencilTestEnable = VK_TRUE,
        .front = {VK_STENCIL_OP_KEEP, VK_STENCIL_OP_REPLACE, VK_STENCIL_OP_INCREMENT_AND_CLAMP,
                  VK_COMPARE_OP_ALWAYS, 0xff, 0x0f, 7},
        .maxDepthBounds = 1.0f};
    VkPipelineColorBlendAttachmentState cba = {VK_TRUE,
                                               VK_BLEND_FACTOR_SRC_ALPHA,
                                               VK_BLEND_FACTOR_ONE_MINUS_SRC_ALPHA,
                                               VK_BLEND_OP_ADD,
                                               VK_BLEND_FACTOR_ONE,
                                               VK_BLEND_FACTOR_ZERO,
                                               VK_BLEND_OP_MAX,
                                               0xf};
    VkPipelineColorBlendStateCreateInfo cb = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO,
        .attachmentCount = 1,
        .pAttachments = &cba,
        .blendConstants = {0.25f, 0.5f, 0.75f, 1.0f}};
    VkDynamicState dyn[2] = {VK_DYNAMIC_STATE_VIEWPORT, VK_DYNAMIC_STATE_STENCIL_REFERENCE};
    VkPipelineDynamicStateCreateInfo dy = {.sType =
                                               VK_STRUCTURE_TYPE_PIPELINE_DYNAMIC_STATE_CREATE_INFO,
                                           .dynamicStateCount = 2,
                                           .pDynamicStates = dyn};
    VkFormat cf[2] = {VK_FORMAT_B8G8R8A8_SRGB, VK_FORMAT_R16G16B16A16_SFLOAT};
    VkPipelineRenderingCreateInfo ri = {.sType = VK_STRUCTURE_TYPE_PIPELINE_RENDERING_CREATE_INFO,
                                        .colorAttachmentCount = 2,
                                        .pColorAttachmentFormats = cf,
                                        .depthAttachmentFormat = VK_FORMAT_D24_UNORM_S8_UINT,
                                        .stencilAttachmentFormat = VK_FORMAT_D24_UNORM_S8_UINT};
    VkPipelineColorBlendAttachmentState cbas[2] = {cba, cba};
    if (!render_pass) {
        cb.attachmentCount = 2;
        cb.pAttachments = cbas;
        ms.rasterizationSamples = VK_SAMPLE_COUNT_1_BIT;
    }
    VkGraphicsPipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO,
                                       .pNext = render_pass ? NULL : &ri,
                                       .flags = VK_PIPELINE_CREATE_DISABLE_OPTIMIZATION_BIT,
                                       .stageCount = 2,
                                       .pStages = st,
                                       .pVertexInputState = &vi,
                                       .pInputAssemblyState = &ia,
                                       .pViewportState = &vp,
                                       .pRasterizationState = &rs,
                                       .pMultisampleState = &ms,
                                       .pDepthStencilState = &ds,
                                       .pColorBlendState = &cb,
                                       .pDynamicState = &dy,
                                       .layout = (VkPipelineLayout)(uintptr_t)2,
                                       .renderPass = render_pass ? (VkRenderPass)(uintptr_t)7
                                                                 : VK_NULL_HANDLE};
    vkenc_graphics_pipeline(e, &ci, &lk);
    ck_assert(!e->oom);
    ck_assert_uint_eq(e->unrepresentable, 0);
    table_free(&t);
}

START_TEST(test_vk_decode__compute_roundtrips)
{
    vkenc e = {0};
    vkdec_pipeline p;
    compute_entry(&e);
    ck_assert_int_eq(vkdec_pipeline_decode(e.data, e.len, 0, &p), 0);
    ck_assert_uint_eq(p.num_stages, 1);
    ck_assert_str_eq(p.compute.stage.pName, "main");
    ck_assert_uint_eq(p.modules[0].codeSize, sizeof(SPIRV));
    ck_assert_uint_eq((uintptr_t)p.modules[0].pCode % 4, 0); /* SPIR-V words aligned */
    ck_assert_uint_eq(p.compute.stage.pSpecializationInfo->mapEntryCount, 1);
    ck_assert_uint_eq(p.layout.ci.pushConstantRangeCount, 1);
    vkdec_free(&p);
    assert_roundtrip(&e, 0);
    vkenc_free(&e);
}
END_TEST

START_TEST(test_vk_decode__graphics_roundtrips_render_pass_versions_and_dynamic_rendering)
{
    for (int rp = 0; rp < 3; rp++) {
        vkenc e = {0};
        vkdec_pipeline p;
        graphics_entry(&e, rp);
        ck_assert_int_eq(vkdec_pipeline_decode(e.data, e.len, 1, &p), 0);
        ck_assert_int_eq(p.render_pass, rp != 0);
        ck_assert_uint_eq(p.rp_version, rp == 0 ? 0 : (rp == 2 ? 1 : 2));
        ck_assert_uint_eq(p.num_stages, 2);
        ck_assert_ptr_nonnull(p.graphics_ci.pDepthStencilState);
        ck_assert_ptr_nonnull(p.layout.sets[1].samplers[1]); /* the immutable sampler */
        ck_assert_int_eq(p.layout.present[0], 0);
        vkdec_free(&p);
        assert_roundtrip(&e, 1);
        vkenc_free(&e);
    }
}
END_TEST

START_TEST(test_vk_decode__rejects_truncation_extra_bytes_and_header_damage)
{
    vkenc c = {0}, g = {0}, d = {0};
    compute_entry(&c);
    graphics_entry(&g, 1);
    graphics_entry(&d, 0);
    assert_rejects_damage(&c, 0);
    assert_rejects_damage(&g, 1);
    assert_rejects_damage(&d, 1);
    vkdec_pipeline p;
    ck_assert_int_eq(vkdec_pipeline_decode(NULL, 0, 0, &p), -1);
    vkenc_free(&c);
    vkenc_free(&g);
    vkenc_free(&d);
}
END_TEST

/* A specialization entry past the data, a bool other than 0/1 and an unaligned SPIR-V size are
 * refused: the driver would trust them. */
START_TEST(test_vk_decode__rejects_values_the_driver_would_trust)
{
    vkenc e = {0};
    vkdec_pipeline p;
    compute_entry(&e);
    /* offsets of the documented layout (schema/SODB.md 3.3) with an 8-byte module */
    /* header, flags, stage + flags, SPIR-V (4 + 8), "main" (4 + 4), map count, constantID */
    size_t spec_entry_offset = 12 + 4 + 8 + 12 + 8 + 4 + 4;
    uint8_t *b = malloc(e.len);
    memcpy(b, e.data, e.len);
    b[spec_entry_offset] = 8; /* offset 8, size 4, in 4 bytes of data */
    ck_assert_int_eq(vkdec_pipeline_decode(b, e.len, 0, &p), -1);
    memcpy(b, e.data, e.len);
    b[24] = 7; /* SPIR-V length 7: not whole words (and the rest misread) */
    ck_assert_int_eq(vkdec_pipeline_decode(b, e.len, 0, &p), -1);
    free(b);
    vkenc_free(&e);

    vkenc g = {0};
    graphics_entry(&g, 1);
    b = malloc(g.len);
    /* the input assembly's primitiveRestartEnable: after header, flags, stages, vertex input */
    vkdec_pipeline q;
    ck_assert_int_eq(vkdec_pipeline_decode(g.data, g.len, 1, &q), 0);
    vkdec_free(&q);
    size_t found = 0;
    for (size_t i = 12; i + 16 <= g.len && !found; i++) { /* "fs_main" unaligns the rest */
        uint32_t w[4];
        memcpy(w, g.data + i, 16);
        /* present 1, flags 0, TRIANGLE_STRIP (4), restart 1 */
        if (w[0] == 1 && w[1] == 0 && w[2] == VK_PRIMITIVE_TOPOLOGY_TRIANGLE_STRIP && w[3] == 1)
            found = i + 12;
    }
    ck_assert_uint_ne(found, 0);
    memcpy(b, g.data, g.len);
    b[found] = 2;
    ck_assert_int_eq(vkdec_pipeline_decode(b, g.len, 1, &q), -1);
    free(b);
    vkenc_free(&g);
}
END_TEST

#ifndef PSDB_VK_CORPUS
#define PSDB_VK_CORPUS "tests/fuzz/corpus/vk_decode"
#endif

/* A corpus file: the kind byte (bit 0: graphics), then the entry. */
static void write_seed(const char *dir, const char *name, int graphics, const uint8_t *b, size_t n)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t k = (uint8_t)graphics;
    ck_assert_uint_eq(fwrite(&k, 1, 1, f), 1);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* PSDB_WRITE_VK_CORPUS=DIR regenerates the seeds of tests/fuzz/corpus/vk_decode. */
static void write_corpus(const char *dir)
{
    vkenc c = {0}, g1 = {0}, g2 = {0}, gd = {0};
    compute_entry(&c);
    graphics_entry(&g2, 1);
    graphics_entry(&g1, 2);
    graphics_entry(&gd, 0);
    write_seed(dir, "ok_compute.bin", 0, c.data, c.len);
    write_seed(dir, "ok_graphics_render_pass2.bin", 1, g2.data, g2.len);
    write_seed(dir, "ok_graphics_render_pass1.bin", 1, g1.data, g1.len);
    write_seed(dir, "ok_graphics_dynamic_rendering.bin", 1, gd.data, gd.len);
    write_seed(dir, "bad_truncated.bin", 1, g2.data, g2.len - 5);
    write_seed(dir, "bad_compute_as_graphics.bin", 1, c.data, c.len);
    uint8_t *b = malloc(g1.len + 1);
    ck_assert_ptr_nonnull(b);
    memcpy(b, g1.data, g1.len);
    b[g1.len] = 0;
    write_seed(dir, "bad_trailing_byte.bin", 1, b, g1.len + 1);
    memcpy(b, c.data, c.len);
    b[8] = 1; /* reserved */
    write_seed(dir, "bad_reserved.bin", 0, b, c.len);
    free(b);
    vkenc_free(&c);
    vkenc_free(&g1);
    vkenc_free(&g2);
    vkenc_free(&gd);
}

/* tests/fuzz/corpus/vk_decode: every ok_* file decodes and re-encodes to its bytes, every other
 * file is refused. */
START_TEST(test_vk_decode__corpus_replays)
{
    const char *w = getenv("PSDB_WRITE_VK_CORPUS");
    if (w && *w)
        write_corpus(w);
    DIR *d = opendir(PSDB_VK_CORPUS);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int ok = 0, bad = 0;
    while ((e = readdir(d))) {
        char path[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", PSDB_VK_CORPUS, e->d_name);
        FILE *f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        uint8_t buf[65536];
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        ck_assert_uint_ge(n, 1);
        vkdec_pipeline p;
        int rc = vkdec_pipeline_decode(buf + 1, n - 1, buf[0] & 1, &p);
        if (strncmp(e->d_name, "ok_", 3) == 0) {
            ck_assert_msg(rc == 0, "%s: refused", e->d_name);
            vkdec_free(&p);
            vkenc entry = {.data = buf + 1, .len = n - 1};
            assert_roundtrip(&entry, buf[0] & 1);
            ok++;
        } else {
            ck_assert_msg(rc == -1, "%s: decoded (%d)", e->d_name, rc);
            bad++;
        }
    }
    closedir(d);
    ck_assert_int_ge(ok, 4);
    ck_assert_int_ge(bad, 4);
}
END_TEST

static void props(VkPhysicalDeviceProperties *p, VkPhysicalDeviceDriverProperties *d,
                  uint32_t vendor, VkDriverId driver, const char *info)
{
    memset(p, 0, sizeof(*p));
    memset(d, 0, sizeof(*d));
    p->vendorID = vendor;
    p->deviceID = 0x2335;
    p->driverVersion = 0x9127c100;
    p->apiVersion = VK_API_VERSION_1_3;
    for (unsigned i = 0; i < VK_UUID_SIZE; i++)
        p->pipelineCacheUUID[i] = (uint8_t)(0xd0 + i);
    d->driverID = driver;
    strncpy(d->driverInfo, info, sizeof(d->driverInfo) - 1);
}

START_TEST(test_vk_identity__target_follows_the_driver_build)
{
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceDriverProperties d;
    vkid a, b, c;
    props(&p, &d, 0x10de, VK_DRIVER_ID_NVIDIA_PROPRIETARY, "580.159.04");
    vkid_from_properties(&p, &d, &a);
    vkid_from_properties(&p, &d, &b);
    ck_assert_str_eq(a.family, "vulkan-10de-2335");
    ck_assert_uint_eq(a.abi, b.abi);
    ck_assert(a.abi != 0 && a.abi != UINT64_MAX);
    ck_assert_uint_eq(a.compiler_version, 0x9127c100);
    ck_assert_int_eq(a.strategy, VKID_PIPELINE_CACHE);
    /* lavapipe's UUID is a constant: its driver-info string moves the ABI. */
    props(&p, &d, 0x10005, VK_DRIVER_ID_MESA_LLVMPIPE, "Mesa 22.3.6 (LLVM 15.0.6)");
    vkid_from_properties(&p, &d, &b);
    props(&p, &d, 0x10005, VK_DRIVER_ID_MESA_LLVMPIPE, "Mesa 22.3.7 (LLVM 15.0.6)");
    vkid_from_properties(&p, &d, &c);
    ck_assert_int_eq(b.strategy, VKID_MESA_DISK_CACHE);
    ck_assert_str_eq(b.family, "vulkan-10005-2335");
    ck_assert_uint_ne(b.abi, c.abi);
    /* any UUID byte, the driver version or the driver moves it too */
    p.pipelineCacheUUID[15] ^= 1;
    vkid_from_properties(&p, &d, &b);
    ck_assert_uint_ne(b.abi, c.abi);
    p.pipelineCacheUUID[15] ^= 1;
    p.driverVersion++;
    vkid_from_properties(&p, &d, &b);
    ck_assert_uint_ne(b.abi, c.abi);
    /* no driver properties (Vulkan 1.0): still a target */
    vkid_from_properties(&p, NULL, &b);
    ck_assert(b.abi != 0 && b.abi != UINT64_MAX);
}
END_TEST

START_TEST(test_vk_identity__cache_header_must_name_the_device)
{
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceDriverProperties d;
    vkid id;
    uint8_t h[40] = {0};
    props(&p, &d, 0x10de, VK_DRIVER_ID_NVIDIA_PROPRIETARY, "x");
    vkid_from_properties(&p, &d, &id);
    h[0] = 32;
    h[4] = 1; /* VK_PIPELINE_CACHE_HEADER_VERSION_ONE */
    h[8] = 0xde, h[9] = 0x10;
    h[12] = 0x35, h[13] = 0x23;
    memcpy(h + 16, p.pipelineCacheUUID, 16);
    ck_assert_int_eq(vkid_check_cache_header(&id, h, sizeof(h)), 0);
    ck_assert_int_eq(vkid_check_cache_header(&id, h, 31), -1);
    ck_assert_int_eq(vkid_check_cache_header(&id, NULL, 40), -1);
    int offs[5] = {0, 4, 8, 12, 31};
    for (int i = 0; i < 5; i++) {
        uint8_t bad[40];
        memcpy(bad, h, sizeof(h));
        bad[offs[i]] ^= offs[i] == 0 ? 0x30 : 1; /* length 16, version 0, vendor, device, UUID */
        ck_assert_int_eq(vkid_check_cache_header(&id, bad, sizeof(bad)), -1);
    }
}
END_TEST

/* A PSDB for id holding one pipeline's cache under pkey and, when merged is non-NULL, merged
 * cache data of merged_n bytes. */
static void write_vk_psdb(const char *path, const vkid *id, const uint8_t pkey[32],
                          const uint8_t *header, const uint8_t *merged, size_t merged_n)
{
    psdb_app_identity app;
    psdb_writer *w = NULL;
    uint8_t mkey[32];
    memset(&app, 0, sizeof(app));
    app.desc.name = "vk-merged-test";
    app.desc.version = PSDB_VERSION(1, 0, 0, 0);
    psdb_target t = {id->family, id->abi, id->compiler_version, 0};
    ck_assert_int_eq(psdb_writer_create(path, &app, &t, &w), PSDB_S_OK);
    psdb_value_ref ref = {pkey, 32};
    ck_assert(
        PSDB_SUCCEEDED(psdb_writer_put_value(w, pkey, 32, PSDB_VALUE_OBJECT_CODE, header, 40)));
    ck_assert(PSDB_SUCCEEDED(psdb_writer_put_group(w, pkey, 32, 1, 1, &ref)));
    if (merged) {
        vkid_merged_key(mkey);
        psdb_value_ref mref = {mkey, 32};
        ck_assert(PSDB_SUCCEEDED(
            psdb_writer_put_value(w, mkey, 32, PSDB_VALUE_OBJECT_CODE, merged, merged_n)));
        ck_assert(PSDB_SUCCEEDED(psdb_writer_put_group(w, mkey, 32, 1, 1, &mref)));
    }
    ck_assert_int_eq(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
}

/* The merged cache reaches the driver only with a header naming the device; a PSDB without one
 * says so (the layer then uses each pipeline's own data), and a hit then needs only the key. */
START_TEST(test_vk_deliver__merged_cache_is_checked_before_use)
{
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceDriverProperties d;
    vkid id;
    uint8_t h[40] = {0}, big[4096], pkey[32], other[32];
    char path[] = "/tmp/psdb-vk-merged-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    props(&p, &d, 0x10de, VK_DRIVER_ID_NVIDIA_PROPRIETARY, "x");
    vkid_from_properties(&p, &d, &id);
    h[0] = 32;
    h[4] = 1;
    h[8] = 0xde, h[9] = 0x10;
    h[12] = 0x35, h[13] = 0x23;
    memcpy(h + 16, p.pipelineCacheUUID, 16);
    memset(pkey, 0x5a, sizeof(pkey));
    memset(other, 0xa5, sizeof(other));
    memset(big, 7, sizeof(big));
    memcpy(big, h, 32);

    struct {
        int with, damage;
        psdb_hr want;
    } cases[] = {{1, -1, PSDB_S_OK},
                 {0, -1, PSDB_S_FALSE},
                 {1, 8, PSDB_E_CACHE_CORRUPT},
                 {1, 16, PSDB_E_CACHE_CORRUPT},
                 {1, 4, PSDB_E_CACHE_CORRUPT}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t m[sizeof(big)];
        memcpy(m, big, sizeof(m));
        if (cases[i].damage >= 0)
            m[cases[i].damage] ^= 1;
        write_vk_psdb(path, &id, pkey, h, cases[i].with ? m : NULL, sizeof(m));
        psdb_file *f = NULL;
        ck_assert_int_eq(vkdl_open(path, &id, NULL, &f), PSDB_S_OK);
        void *data = (void *)1;
        size_t size = 1;
        char msg[256];
        psdb_hr hr = vkdl_merged_cache(f, &id, &data, &size, msg, sizeof(msg));
        ck_assert_msg(hr == cases[i].want, "case %zu: %s", i, psdb_hr_str(hr));
        if (hr == PSDB_S_OK) {
            ck_assert_uint_eq(size, sizeof(m));
            ck_assert(memcmp(data, m, size) == 0);
        } else {
            ck_assert_ptr_null(data);
            ck_assert_uint_eq(size, 0);
        }
        if (PSDB_FAILED(hr))
            ck_assert_msg(strstr(msg, "merged pipeline cache") != NULL, "%s", msg);
        free(data);
        /* The key-only lookup, with the key set and without. */
        vkdl_keys k;
        int bad = 0;
        ck_assert_int_eq(vkdl_keys_load(f, &k), PSDB_S_OK);
        ck_assert_int_eq(vkdl_lookup(f, &k, &id, pkey, NULL, &size, &bad), 1);
        ck_assert_int_eq(vkdl_lookup(f, &k, &id, other, NULL, &size, &bad), 0);
        ck_assert_int_eq(vkdl_lookup(f, NULL, &id, pkey, NULL, &size, &bad), 1);
        ck_assert_int_eq(vkdl_lookup(f, NULL, &id, other, NULL, &size, &bad), 0);
        vkdl_keys_free(&k);
        psdb_file_release(f);
    }
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vk_decode");
    TCase *tc = tcase_create("vk_decode");
    tcase_add_test(tc, test_vk_decode__compute_roundtrips);
    tcase_add_test(tc,
                   test_vk_decode__graphics_roundtrips_render_pass_versions_and_dynamic_rendering);
    tcase_add_test(tc, test_vk_decode__rejects_truncation_extra_bytes_and_header_damage);
    tcase_add_test(tc, test_vk_decode__rejects_values_the_driver_would_trust);
    tcase_add_test(tc, test_vk_decode__corpus_replays);
    tcase_add_test(tc, test_vk_identity__target_follows_the_driver_build);
    tcase_add_test(tc, test_vk_identity__cache_header_must_name_the_device);
    tcase_add_test(tc, test_vk_deliver__merged_cache_is_checked_before_use);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
