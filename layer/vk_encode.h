/* vk_encode.h - the layer's self-contained encoding of Vulkan create-infos (schema/SODB.md §3).
 *
 * DESIGN: an object that a pipeline refers to (sampler, descriptor set layout, pipeline layout,
 * render pass) is encoded when the application creates it, and the pipeline's encoding copies
 * those bytes in. The application may destroy a layout or a shader module right after using it,
 * so nothing is looked up later than the pipeline's creation, and an SODB entry never refers to
 * another entry: `psdb compile` replays each entry alone. Every structure chained into a pNext
 * that the encoding cannot carry and that may change the compiled code makes the object
 * unrepresentable (vkenc.unrepresentable counts them and vkenc.stypes names them); structures
 * that cannot change code (creation feedback, debug names, validation caches) are skipped, as
 * Fossilize does. */
#ifndef PSDB_LAYER_VK_ENCODE_H
#define PSDB_LAYER_VK_ENCODE_H

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#define VKENC_VERSION 1u
#define VKENC_MAGIC_COMPUTE "VKCP"
#define VKENC_MAGIC_GRAPHICS "VKGP"
#define VKENC_SAMPLER_SIZE 64u /* 16 x u32 */
#define VKENC_MAX_STYPES 8u    /* distinct unrepresentable sTypes remembered per encoding */

/* A growable little-endian byte buffer with a sticky out-of-memory flag: once an append fails,
 * later appends do nothing and one check of `oom` covers the whole encoding. */
typedef struct vkenc {
    uint8_t *data;
    size_t len, cap;
    int oom;
    uint32_t unrepresentable;
    uint32_t num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
} vkenc;

void vkenc_free(vkenc *e);
void vkenc_u32(vkenc *e, uint32_t v);
void vkenc_f32(vkenc *e, float v);
void vkenc_raw(vkenc *e, const void *p, size_t n);
void vkenc_bytes(vkenc *e, const void *p, size_t n);
void vkenc_str(vkenc *e, const char *s);
/* Counts one structure the encoding cannot carry. */
void vkenc_unrepresentable(vkenc *e, uint32_t stype);
/* Adds another encoding's unrepresentable count and sTypes (an object the pipeline uses). */
void vkenc_merge_unrepresentable(vkenc *e, uint32_t count, const uint32_t *stypes,
                                 uint32_t num_stypes);

/* What the pipeline encoders look up by handle; the layer's object maps implement it. Each
 * returns 0 and the object's bytes (borrowed for the duration of the encoding) when the handle is
 * known, else -1. `unrep`/`stypes` carry the object's own unrepresentable structures. */
typedef struct vkenc_object {
    const uint8_t *data;
    size_t len;
    uint32_t unrepresentable;
    const uint32_t *stypes;
    uint32_t num_stypes;
    /* render passes only: bit i set when subpass i has a depth/stencil (resp. a colour)
     * attachment, for the rule that the depth-stencil and colour-blend states are ignored
     * otherwise. Subpasses past 31 count as having both. */
    uint32_t subpass_depth, subpass_color;
} vkenc_object;

typedef struct vkenc_lookup {
    int (*find)(void *ctx, VkObjectType type, uint64_t handle, vkenc_object *out);
    void *ctx;
} vkenc_lookup;

/* Object encodings (schema/SODB.md §3.2). Each appends to e; the caller checks e->oom. A
 * shader module's bytes are its SPIR-V words as given. */
void vkenc_shader_module(vkenc *e, const VkShaderModuleCreateInfo *ci);
void vkenc_sampler(vkenc *e, const VkSamplerCreateInfo *ci);
void vkenc_set_layout(vkenc *e, const VkDescriptorSetLayoutCreateInfo *ci, const vkenc_lookup *lk);
void vkenc_pipeline_layout(vkenc *e, const VkPipelineLayoutCreateInfo *ci, const vkenc_lookup *lk);
/* Fills *depth and *color with the subpass masks of vkenc_object. */
void vkenc_render_pass(vkenc *e, const VkRenderPassCreateInfo *ci, uint32_t *depth,
                       uint32_t *color);
void vkenc_render_pass2(vkenc *e, const VkRenderPassCreateInfo2 *ci, uint32_t *depth,
                        uint32_t *color);

/* Pipeline encodings (schema/SODB.md §3.3, §3.4): the whole description, header included. */
void vkenc_compute_pipeline(vkenc *e, const VkComputePipelineCreateInfo *ci,
                            const vkenc_lookup *lk);
void vkenc_graphics_pipeline(vkenc *e, const VkGraphicsPipelineCreateInfo *ci,
                             const vkenc_lookup *lk);

#endif
