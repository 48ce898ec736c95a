/* vk_decode.h - the inverse of vk_encode: SODB §3 bytes back into Vulkan create-infos, for
 * replaying a captured pipeline on a device (`psdb compile/replay --backend vulkan`).
 *
 * DESIGN: the decoder validates everything the format says (magic, version, reserved, every count
 * bounded by the bytes left, no bytes left over) and builds the create-infos in one arena, so a
 * decoded pipeline is freed with one call and never points into the entry's bytes (SPIR-V needs
 * 4-byte alignment that the entry's buffer does not promise). Handles (shader modules, samplers,
 * set layouts, the pipeline layout, the render pass) are left VK_NULL_HANDLE: the replayer creates
 * the objects from the decoded create-infos and fills them in. */
#ifndef PSDB_LAYER_VK_DECODE_H
#define PSDB_LAYER_VK_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

typedef struct vkdec_arena vkdec_arena;

typedef struct vkdec_set_layout {
    VkDescriptorSetLayoutCreateInfo
        ci; /* pBindings[i].pImmutableSamplers: filled by the replayer */
    VkDescriptorSetLayoutBindingFlagsCreateInfo flags; /* chained when any binding flag is set */
    VkSamplerCreateInfo **samplers; /* per binding: descriptorCount create-infos, or NULL */
} vkdec_set_layout;

typedef struct vkdec_layout {
    VkPipelineLayoutCreateInfo ci; /* pSetLayouts: filled by the replayer */
    vkdec_set_layout *sets;        /* setLayoutCount; present[i] 0: a VK_NULL_HANDLE set */
    uint8_t *present;
} vkdec_layout;

typedef struct vkdec_pipeline {
    int graphics;
    uint32_t num_stages;
    VkPipelineShaderStageCreateInfo *stages; /* .module VK_NULL_HANDLE */
    VkShaderModuleCreateInfo *modules;       /* one per stage */
    int has_layout;
    vkdec_layout layout;
    VkComputePipelineCreateInfo compute;      /* stage, flags; layout by the replayer */
    VkGraphicsPipelineCreateInfo graphics_ci; /* states wired; layout, renderPass by the replayer */
    int render_pass;     /* 1: graphics_ci.renderPass from rp; 0: dynamic rendering */
    uint32_t rp_version; /* the call that created it: 1 vkCreateRenderPass, 2 vkCreateRenderPass2 */
    VkRenderPassCreateInfo2 rp;
    VkRenderPassCreateInfo rp1; /* rp in vkCreateRenderPass form, when rp_version is 1 */
    VkPipelineRenderingCreateInfo rendering;
    VkPipelineDynamicStateCreateInfo *dynamic;
    vkdec_arena *arena;
} vkdec_pipeline;

/* Decodes one SODB entry of kind 4 (graphics 0) or 5 (graphics 1). Returns 0, -1 when the bytes are
 * not a valid encoding (nothing allocated), -2 when out of memory. *out is freed with
 * vkdec_free. */
int vkdec_pipeline_decode(const void *data, size_t len, int graphics, vkdec_pipeline *out);
void vkdec_free(vkdec_pipeline *p);

#endif
