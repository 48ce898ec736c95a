/* vk_encode_test.c - the layer's encoding of Vulkan create-infos (schema/SODB.md section 3). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/psdb_vulkan.h"

/* A lookup over a fixed table of (type, handle) -> bytes; unknown handles fail. */
typedef struct table {
    VkObjectType type[4];
    uint64_t handle[4];
    vkenc_object obj[4];
    int n;
} table;

static int table_find(void *ctx, VkObjectType type, uint64_t handle, vkenc_object *out)
{
    table *t = ctx;
    for (int i = 0; i < t->n; i++)
        if (t->type[i] == type && t->handle[i] == handle) {
            *out = t->obj[i];
            return 0;
        }
    return -1;
}

static const uint32_t SPIRV[1] = {0x07230203u};
static const int32_t MODE = 2;

/* The compute pipeline of the schema/SODB.md example, with its module and layout encoded the
 * way the layer encodes them at creation. */
typedef struct fixture {
    table t;
    vkenc module, layout;
    VkSpecializationMapEntry me;
    VkSpecializationInfo si;
    VkComputePipelineCreateInfo ci;
    vkenc_lookup lk;
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof(*f));
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = sizeof(SPIRV),
                                    .pCode = SPIRV};
    vkenc_shader_module(&f->module, &mci);
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pcr};
    vkenc_pipeline_layout(&f->layout, &lci, NULL);
    f->t.type[0] = VK_OBJECT_TYPE_SHADER_MODULE;
    f->t.handle[0] = 0x100;
    f->t.obj[0] = (vkenc_object){.data = f->module.data, .len = f->module.len};
    f->t.type[1] = VK_OBJECT_TYPE_PIPELINE_LAYOUT;
    f->t.handle[1] = 0x200;
    f->t.obj[1] = (vkenc_object){.data = f->layout.data, .len = f->layout.len};
    f->t.n = 2;
    f->lk = (vkenc_lookup){table_find, &f->t};
    f->me = (VkSpecializationMapEntry){0, 0, 4};
    f->si = (VkSpecializationInfo){1, &f->me, 4, &MODE};
    f->ci = (VkComputePipelineCreateInfo){
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = (VkShaderModule)(uintptr_t)0x100,
                  .pName = "main",
                  .pSpecializationInfo = &f->si},
        .layout = (VkPipelineLayout)(uintptr_t)0x200,
        .basePipelineIndex = -1};
}

static void fixture_free(fixture *f)
{
    vkenc_free(&f->module);
    vkenc_free(&f->layout);
}

START_TEST(test_vk_encode__compute_matches_documented_bytes)
{
    static const uint8_t want[88] = {
        0x56, 0x4B, 0x43, 0x50, 1,    0,   0,    0,   0, 0, 0, 0, /* header */
        0,    0,    0,    0,                                      /* flags */
        0x20, 0,    0,    0,    0,    0,   0,    0,               /* stage, stage flags */
        4,    0,    0,    0,    3,    2,   0x23, 7,               /* SPIR-V */
        4,    0,    0,    0,    'm',  'a', 'i',  'n',             /* entry point */
        1,    0,    0,    0,    0,    0,   0,    0,   0, 0, 0, 0, 4, 0, 0, 0, /* map */
        4,    0,    0,    0,    2,    0,   0,    0,                           /* data */
        0,    0,    0,    0,    0,    0,   0,    0, /* layout flags, sets */
        1,    0,    0,    0,    0x20, 0,   0,    0,   0, 0, 0, 0, 8, 0, 0, 0, /* push constants */
    };
    fixture f;
    vkenc e = {0};
    fixture_init(&f);
    /* Flags that do not change code are not recorded. */
    f.ci.flags = VK_PIPELINE_CREATE_FAIL_ON_PIPELINE_COMPILE_REQUIRED_BIT |
                 VK_PIPELINE_CREATE_ALLOW_DERIVATIVES_BIT;
    vkenc_compute_pipeline(&e, &f.ci, &f.lk);
    ck_assert(!e.oom);
    ck_assert_uint_eq(e.unrepresentable, 0);
    ck_assert_uint_eq(e.len, sizeof(want));
    ck_assert_mem_eq(e.data, want, sizeof(want));
    vkenc_free(&e);
    fixture_free(&f);
}
END_TEST

START_TEST(test_vk_encode__feedback_skipped_unknown_counted)
{
    fixture f;
    vkenc plain = {0}, fb = {0}, unk = {0};
    fixture_init(&f);
    vkenc_compute_pipeline(&plain, &f.ci, &f.lk);

    VkPipelineCreationFeedback pf, sf;
    VkPipelineCreationFeedbackCreateInfo fci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
        .pPipelineCreationFeedback = &pf,
        .pipelineStageCreationFeedbackCount = 1,
        .pPipelineStageCreationFeedbacks = &sf};
    f.ci.pNext = &fci;
    vkenc_compute_pipeline(&fb, &f.ci, &f.lk);
    ck_assert_uint_eq(fb.unrepresentable, 0);
    ck_assert_uint_eq(fb.len, plain.len);
    ck_assert_mem_eq(fb.data, plain.data, plain.len);

    /* Behind the feedback structure, in the stage's chain too: each one counted and named. */
    VkPipelineRobustnessCreateInfoEXT rob = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo sub = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = 32};
    fci.pNext = &rob;
    f.ci.stage.pNext = &sub;
    vkenc_compute_pipeline(&unk, &f.ci, &f.lk);
    ck_assert_uint_eq(unk.unrepresentable, 2);
    ck_assert_uint_eq(unk.num_stypes, 2);
    ck_assert_uint_eq(unk.stypes[0], VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT);
    ck_assert_uint_eq(unk.stypes[1],
                      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO);
    vkenc_free(&plain);
    vkenc_free(&fb);
    vkenc_free(&unk);
    fixture_free(&f);
}
END_TEST

START_TEST(test_vk_encode__unknown_object_is_unrepresentable)
{
    fixture f;
    vkenc e = {0}, s = {0};
    fixture_init(&f);
    f.ci.stage.module = (VkShaderModule)(uintptr_t)0x999; /* created before the layer loaded */
    vkenc_compute_pipeline(&e, &f.ci, &f.lk);
    ck_assert_uint_eq(e.unrepresentable, 1);
    ck_assert_uint_eq(e.stypes[0], VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    vkenc_free(&e);

    /* An unrepresentable object (a Y'CbCr sampler) makes what uses it unrepresentable. */
    VkSamplerYcbcrConversionInfo ycbcr = {.sType = VK_STRUCTURE_TYPE_SAMPLER_YCBCR_CONVERSION_INFO};
    VkSamplerCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO, .pNext = &ycbcr};
    vkenc_sampler(&s, &sci);
    ck_assert_uint_eq(s.len, VKENC_SAMPLER_SIZE);
    ck_assert_uint_eq(s.unrepresentable, 1);
    f.t.type[2] = VK_OBJECT_TYPE_SAMPLER;
    f.t.handle[2] = 0x300;
    f.t.obj[2] = (vkenc_object){.data = s.data,
                                .len = s.len,
                                .unrepresentable = s.unrepresentable,
                                .stypes = s.stypes,
                                .num_stypes = s.num_stypes};
    f.t.n = 3;
    VkSampler smp = (VkSampler)(uintptr_t)0x300;
    VkDescriptorSetLayoutBinding b = {0, VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1,
                                      VK_SHADER_STAGE_FRAGMENT_BIT, &smp};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = 1,
                                           .pBindings = &b};
    vkenc dsl = {0};
    vkenc_set_layout(&dsl, &dci, &f.lk);
    ck_assert_uint_eq(dsl.unrepresentable, 1);
    ck_assert_uint_eq(dsl.stypes[0], VK_STRUCTURE_TYPE_SAMPLER_YCBCR_CONVERSION_INFO);
    /* flags, count, 5 binding words, sampler count, one 64-byte sampler */
    ck_assert_uint_eq(dsl.len, 4 + 4 + 20 + 4 + VKENC_SAMPLER_SIZE);
    vkenc_free(&dsl);
    vkenc_free(&s);
    fixture_free(&f);
}
END_TEST

/* States the specification says are ignored are never read: their pointers here would fault. */
START_TEST(test_vk_encode__ignored_states_not_read)
{
    fixture f;
    vkenc e = {0};
    const void *dangling = (const void *)(uintptr_t)0x10;
    fixture_init(&f);
    VkPipelineShaderStageCreateInfo vs = f.ci.stage;
    vs.stage = VK_SHADER_STAGE_VERTEX_BIT;
    vs.pSpecializationInfo = NULL;
    VkPipelineRasterizationStateCreateInfo rs = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO,
        .rasterizerDiscardEnable = VK_TRUE,
        .lineWidth = 1.0f};
    VkGraphicsPipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO,
                                       .stageCount = 1,
                                       .pStages = &vs,
                                       .pTessellationState = dangling, /* no tessellation stages */
                                       .pViewportState = dangling,     /* rasterizer discard */
                                       .pRasterizationState = &rs,
                                       .pMultisampleState = dangling,
                                       .pDepthStencilState = dangling,
                                       .pColorBlendState = dangling,
                                       .layout = f.ci.layout};
    vkenc_graphics_pipeline(&e, &ci, &f.lk);
    ck_assert(!e.oom);
    ck_assert_uint_eq(e.unrepresentable, 0);
    vkenc_free(&e);

    /* Rasterizing into a render pass without depth: the depth-stencil state is ignored. */
    VkAttachmentDescription att = {.format = VK_FORMAT_R8G8B8A8_UNORM,
                                   .samples = VK_SAMPLE_COUNT_1_BIT};
    VkAttachmentReference ref = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkSubpassDescription sub = {.colorAttachmentCount = 1, .pColorAttachments = &ref};
    VkRenderPassCreateInfo rpi = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
                                  .attachmentCount = 1,
                                  .pAttachments = &att,
                                  .subpassCount = 1,
                                  .pSubpasses = &sub};
    vkenc rp = {0};
    uint32_t depth = 0, color = 0;
    vkenc_render_pass(&rp, &rpi, &depth, &color);
    ck_assert_uint_eq(depth & 1u, 0);
    ck_assert_uint_eq(color & 1u, 1);
    f.t.type[2] = VK_OBJECT_TYPE_RENDER_PASS;
    f.t.handle[2] = 0x400;
    f.t.obj[2] = (vkenc_object){
        .data = rp.data, .len = rp.len, .subpass_depth = depth, .subpass_color = color};
    f.t.n = 3;
    VkPipelineColorBlendAttachmentState cba = {.colorWriteMask = 0xf};
    VkPipelineColorBlendStateCreateInfo cb = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO,
        .attachmentCount = 1,
        .pAttachments = &cba};
    VkPipelineMultisampleStateCreateInfo ms = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO,
        .rasterizationSamples = VK_SAMPLE_COUNT_1_BIT};
    VkViewport vp = {0, 0, 4, 4, 0, 1};
    VkRect2D sc = {{0, 0}, {4, 4}};
    VkPipelineViewportStateCreateInfo vps = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO,
        .viewportCount = 1,
        .pViewports = &vp,
        .scissorCount = 1,
        .pScissors = &sc};
    rs.rasterizerDiscardEnable = VK_FALSE;
    ci.pViewportState = &vps;
    ci.pMultisampleState = &ms;
    ci.pColorBlendState = &cb;
    ci.renderPass = (VkRenderPass)(uintptr_t)0x400;
    vkenc_graphics_pipeline(&e, &ci, &f.lk);
    ck_assert(!e.oom);
    ck_assert_uint_eq(e.unrepresentable, 0);
    vkenc_free(&e);
    vkenc_free(&rp);
    fixture_free(&f);
}
END_TEST

/* vkCreateRenderPass and vkCreateRenderPass2 describing the same pass encode alike (one form,
 * schema/SODB.md 3.2) except the word saying which call created it. */
START_TEST(test_vk_encode__render_pass_versions_one_form)
{
    VkAttachmentDescription a1[2] = {
        {0, VK_FORMAT_R8G8B8A8_UNORM, VK_SAMPLE_COUNT_1_BIT, VK_ATTACHMENT_LOAD_OP_CLEAR,
         VK_ATTACHMENT_STORE_OP_STORE, VK_ATTACHMENT_LOAD_OP_DONT_CARE,
         VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_IMAGE_LAYOUT_UNDEFINED,
         VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL},
        {0, VK_FORMAT_D32_SFLOAT, VK_SAMPLE_COUNT_1_BIT, VK_ATTACHMENT_LOAD_OP_CLEAR,
         VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_ATTACHMENT_LOAD_OP_DONT_CARE,
         VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_IMAGE_LAYOUT_UNDEFINED,
         VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL}};
    VkAttachmentReference c1 = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkAttachmentReference d1 = {1, VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL};
    VkSubpassDescription s1 = {.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                               .colorAttachmentCount = 1,
                               .pColorAttachments = &c1,
                               .pDepthStencilAttachment = &d1};
    VkSubpassDependency dep1 = {0, VK_SUBPASS_EXTERNAL, 0x400, 0x1000, 0x100, 0x800, 0};
    VkRenderPassCreateInfo rp1 = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
                                  .attachmentCount = 2,
                                  .pAttachments = a1,
                                  .subpassCount = 1,
                                  .pSubpasses = &s1,
                                  .dependencyCount = 1,
                                  .pDependencies = &dep1};
    VkAttachmentDescription2 a2[2];
    for (int i = 0; i < 2; i++)
        a2[i] = (VkAttachmentDescription2){VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2,
                                           NULL,
                                           a1[i].flags,
                                           a1[i].format,
                                           a1[i].samples,
                                           a1[i].loadOp,
                                           a1[i].storeOp,
                                           a1[i].stencilLoadOp,
                                           a1[i].stencilStoreOp,
                                           a1[i].initialLayout,
                                           a1[i].finalLayout};
    VkAttachmentReference2 c2 = {VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2, NULL, 0,
                                 VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL, 0};
    VkAttachmentReference2 d2 = {VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2, NULL, 1,
                                 VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL, 0};
    VkSubpassDescription2 s2 = {.sType = VK_STRUCTURE_TYPE_SUBPASS_DESCRIPTION_2,
                                .pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                                .colorAttachmentCount = 1,
                                .pColorAttachments = &c2,
                                .pDepthStencilAttachment = &d2};
    VkSubpassDependency2 dep2 = {VK_STRUCTURE_TYPE_SUBPASS_DEPENDENCY_2,
                                 NULL,
                                 0,
                                 VK_SUBPASS_EXTERNAL,
                                 0x400,
                                 0x1000,
                                 0x100,
                                 0x800,
                                 0,
                                 0};
    VkRenderPassCreateInfo2 rp2 = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO_2,
                                   .attachmentCount = 2,
                                   .pAttachments = a2,
                                   .subpassCount = 1,
                                   .pSubpasses = &s2,
                                   .dependencyCount = 1,
                                   .pDependencies = &dep2};
    vkenc e1 = {0}, e2 = {0};
    uint32_t dm1 = 0, cm1 = 0, dm2 = 0, cm2 = 0;
    vkenc_render_pass(&e1, &rp1, &dm1, &cm1);
    vkenc_render_pass2(&e2, &rp2, &dm2, &cm2);
    ck_assert(!e1.oom && !e2.oom);
    ck_assert_uint_eq(e1.unrepresentable + e2.unrepresentable, 0);
    ck_assert_uint_eq(e1.len, e2.len);
    ck_assert_uint_eq(e1.data[0], 1);
    ck_assert_uint_eq(e2.data[0], 2);
    ck_assert_mem_eq(e1.data + 4, e2.data + 4, e1.len - 4);
    ck_assert_uint_eq(dm1 & 1u, 1);
    ck_assert_uint_eq(dm2 & 1u, 1);
    ck_assert_uint_eq(cm1 & 1u, 1);
    /* A multiview pass differs. */
    vkenc e3 = {0};
    s2.viewMask = 3;
    vkenc_render_pass2(&e3, &rp2, &dm2, &cm2);
    ck_assert(e3.len != e2.len || memcmp(e3.data, e2.data, e2.len) != 0);
    vkenc_free(&e1);
    vkenc_free(&e2);
    vkenc_free(&e3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vk_encode");
    TCase *tc = tcase_create("vk_encode");
    tcase_add_test(tc, test_vk_encode__compute_matches_documented_bytes);
    tcase_add_test(tc, test_vk_encode__feedback_skipped_unknown_counted);
    tcase_add_test(tc, test_vk_encode__unknown_object_is_unrepresentable);
    tcase_add_test(tc, test_vk_encode__ignored_states_not_read);
    tcase_add_test(tc, test_vk_encode__render_pass_versions_one_form);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
