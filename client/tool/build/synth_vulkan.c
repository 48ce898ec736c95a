/* synth_vulkan.c - the Vulkan corpus of `psdb synth --api vulkan` (build/synth_vulkan.h). */
#include "build/synth_vulkan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PSDB_TOOL_VULKAN
uint64_t psdb__synth_vulkan_max(void)
{
    return 0;
}

psdb_hr psdb__synth_vulkan(const char *path, const psdb__synth_vulkan_params *p,
                           psdb__synth_vulkan_stats *stats, char *err, size_t err_size)
{
    (void)path;
    (void)p;
    (void)stats;
    if (err && err_size)
        snprintf(err, err_size, "this psdb was built without the Vulkan headers and glslang");
    return PSDB_E_NOTIMPL;
}
#else
/* DESIGN: the corpus is a fixed set of GLSL shader families (compute: separable blur, fBm noise,
 * colour grading; graphics: a mesh vertex shader, skinned or not, and a PBR fragment shader with
 * 1-8 lights, shadows and fog), whose variants are chosen by preprocessor defines (compiled by
 * glslang, each distinct variant once) and by specialization constants. Every pipeline is one
 * point of a mixed-radix space of variants and fixed-function states; pipeline i takes the point
 * (i * stride + offset) mod size, with stride coprime to the size and both drawn from the seed, so
 * N pipelines are N distinct descriptions and the same arguments give the same points. Entries
 * are encoded by the Vulkan component's encoder, the one the layer captures with, so a synthetic
 * entry and a captured one have exactly the same form (schema/SODB.md section 3). Everything is
 * written in one transaction into OUT.tmp, renamed at the end. */
#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

#include "common/hash.h"
#include "common/status_map.h"
#include "vulkan/psdb_vulkan.h"

static const char BLUR_COMP[] =
    "#version 450\n"
    "layout(local_size_x_id = 0, local_size_y_id = 2) in;\n"
    "layout(constant_id = 1) const bool HORIZONTAL = true;\n"
    "layout(set = 0, binding = 0) uniform sampler2D src;\n"
    "layout(set = 0, binding = 1, rgba8) uniform writeonly image2D dst;\n"
    "void main() {\n"
    "    ivec2 p = ivec2(gl_GlobalInvocationID.xy);\n"
    "    vec2 texel = 1.0 / vec2(textureSize(src, 0));\n"
    "    vec2 dir = HORIZONTAL ? vec2(texel.x, 0.0) : vec2(0.0, texel.y);\n"
    "    vec4 sum = vec4(0.0);\n"
    "    float wsum = 0.0;\n"
    "    for (int k = -(TAPS / 2); k <= TAPS / 2; k++) {\n"
    "        float w = exp(-float(k * k) / float(TAPS));\n"
    "        sum += w * textureLod(src, (vec2(p) + 0.5) * texel + float(k) * dir, 0.0);\n"
    "        wsum += w;\n"
    "    }\n"
    "    imageStore(dst, p, sum / wsum);\n"
    "}\n";

static const char NOISE_COMP[] =
    "#version 450\n"
    "layout(local_size_x_id = 0, local_size_y_id = 2) in;\n"
    "layout(constant_id = 1) const float SCALE = 1.0;\n"
    "layout(push_constant) uniform PC { vec2 origin; float time; } pc;\n"
    "layout(set = 0, binding = 1, r32f) uniform writeonly image2D dst;\n"
    "float hash(vec2 p) { return fract(sin(dot(p, vec2(127.1, 311.7))) * 43758.5453); }\n"
    "float noise(vec2 p) {\n"
    "    vec2 i = floor(p), f = fract(p);\n"
    "    vec2 u = f * f * (3.0 - 2.0 * f);\n"
    "    return mix(mix(hash(i), hash(i + vec2(1, 0)), u.x),\n"
    "               mix(hash(i + vec2(0, 1)), hash(i + vec2(1, 1)), u.x), u.y);\n"
    "}\n"
    "void main() {\n"
    "    vec2 p = (vec2(gl_GlobalInvocationID.xy) + pc.origin) * SCALE * 0.01;\n"
    "    float v = 0.0, a = 0.5;\n"
    "    for (int o = 0; o < OCTAVES; o++) { v += a * noise(p + pc.time); p *= 2.03; a *= 0.5; }\n"
    "    imageStore(dst, ivec2(gl_GlobalInvocationID.xy), vec4(v));\n"
    "}\n";

static const char GRADE_COMP[] =
    "#version 450\n"
    "layout(local_size_x_id = 0, local_size_y_id = 2) in;\n"
    "layout(set = 0, binding = 0) uniform sampler2D src;\n"
    "layout(set = 0, binding = 1, rgba8) uniform writeonly image2D dst;\n"
    "layout(push_constant) uniform PC { vec2 origin; float exposure; } pc;\n"
    "vec3 tonemap(vec3 c) {\n"
    "#if TONEMAP == 1\n"
    "    return c / (1.0 + c);\n"
    "#elif TONEMAP == 2\n"
    "    c = max(vec3(0.0), c - 0.004);\n"
    "    return (c * (6.2 * c + 0.5)) / (c * (6.2 * c + 1.7) + 0.06);\n"
    "#else\n"
    "    return clamp(c, 0.0, 1.0);\n"
    "#endif\n"
    "}\n"
    "void main() {\n"
    "    ivec2 p = ivec2(gl_GlobalInvocationID.xy);\n"
    "    vec3 c = texelFetch(src, p, 0).rgb * pc.exposure;\n"
    "#if LUT\n"
    "    c = pow(c, vec3(0.8, 0.9, 1.1));\n"
    "#endif\n"
    "    imageStore(dst, p, vec4(tonemap(c), 1.0));\n"
    "}\n";

static const char MESH_VERT[] =
    "#version 450\n"
    "layout(location = 0) in vec3 pos;\n"
    "layout(location = 1) in vec3 nrm;\n"
    "layout(location = 2) in vec2 uv;\n"
    "#if SKINNED\n"
    "layout(location = 3) in uvec4 joints;\n"
    "layout(location = 4) in vec4 weights;\n"
    "layout(set = 0, binding = 2) uniform Bones { mat4 bone[BONES]; };\n"
    "#endif\n"
    "layout(push_constant) uniform PC { mat4 mvp; } pc;\n"
    "layout(location = 0) out vec3 vnrm;\n"
    "layout(location = 1) out vec2 vuv;\n"
    "layout(location = 2) out vec3 vpos;\n"
    "void main() {\n"
    "    vec4 p = vec4(pos, 1.0);\n"
    "    vec3 n = nrm;\n"
    "#if SKINNED\n"
    "    mat4 s = weights.x * bone[joints.x] + weights.y * bone[joints.y] +\n"
    "             weights.z * bone[joints.z] + weights.w * bone[joints.w];\n"
    "    p = s * p;\n"
    "    n = mat3(s) * n;\n"
    "#endif\n"
    "    gl_Position = pc.mvp * p;\n"
    "    vnrm = n; vuv = uv; vpos = p.xyz;\n"
    "}\n";

static const char PBR_FRAG[] =
    "#version 450\n"
    "layout(constant_id = 0) const float ALPHA_CUTOFF = 0.0;\n"
    "layout(set = 0, binding = 0) uniform sampler2D albedo;\n"
    "layout(set = 0, binding = 1) uniform Lights { vec4 pos_radius[8]; vec4 colour[8]; "
    "mat4 shadow; vec4 fog; };\n"
    "#if SHADOWS\n"
    "layout(set = 0, binding = 3) uniform sampler2DShadow shadow_map;\n"
    "#endif\n"
    "layout(location = 0) in vec3 vnrm;\n"
    "layout(location = 1) in vec2 vuv;\n"
    "layout(location = 2) in vec3 vpos;\n"
    "layout(location = 0) out vec4 o;\n"
    "const float PI = 3.14159265;\n"
    "float ggx(float nh, float r) { float a = r * r; float d = nh * nh * (a * a - 1.0) + 1.0;\n"
    "    return a * a / (PI * d * d); }\n"
    "void main() {\n"
    "    vec4 base = texture(albedo, vuv);\n"
    "    if (base.a < ALPHA_CUTOFF) discard;\n"
    "    vec3 n = normalize(vnrm), v = normalize(-vpos), c = vec3(0.0);\n"
    "    for (int i = 0; i < LIGHTS; i++) {\n"
    "        vec3 l = pos_radius[i].xyz - vpos;\n"
    "        float att = clamp(1.0 - length(l) / pos_radius[i].w, 0.0, 1.0);\n"
    "        l = normalize(l);\n"
    "        vec3 h = normalize(l + v);\n"
    "        float nl = max(dot(n, l), 0.0);\n"
    "        c += colour[i].rgb * att * nl * (base.rgb / PI + ggx(max(dot(n, h), 0.0), 0.5));\n"
    "    }\n"
    "#if SHADOWS\n"
    "    vec4 sp = shadow * vec4(vpos, 1.0);\n"
    "    float lit = 0.0;\n"
    "    for (int x = -1; x <= 1; x++)\n"
    "        for (int y = -1; y <= 1; y++)\n"
    "            lit += texture(shadow_map, vec3(sp.xy / sp.w + vec2(x, y) / 2048.0, sp.z / "
    "sp.w));\n"
    "    c *= lit / 9.0;\n"
    "#endif\n"
    "#if FOG\n"
    "    c = mix(c, fog.rgb, clamp(length(vpos) * fog.w, 0.0, 1.0));\n"
    "#endif\n"
    "    o = vec4(c, base.a);\n"
    "}\n";

/* ---- The variant space ----------------------------------------------------------------------- */
/* blur taps x direction, noise octaves x scale, grading LUT x tone map; x 4 x 3 workgroup shapes */
#define COMPUTE_POINTS ((11 * 2 + 8 * 6 + 2 * 3) * 4 * 3)
static const float NOISE_SCALES[6] = {0.25f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f};
static const uint32_t WG_X[4] = {32, 64, 128, 256};
static const uint32_t WG_Y[3] = {1, 2, 4};

/* Graphics axes, in mixed-radix order. */
enum {
    AX_LIGHTS,
    AX_SHADOWS,
    AX_FOG,
    AX_SKIN,
    AX_ALPHA,
    AX_BLEND,
    AX_CULL,
    AX_COLOR,
    AX_DEPTH,
    AX_TOPO,
    AX_COUNT
};
static const uint32_t AXES[AX_COUNT] = {4, 2, 2, 3, 2, 3, 3, 3, 3, 2};
static const int LIGHTS[4] = {1, 2, 4, 8};
static const VkFormat COLOR_FORMATS[3] = {VK_FORMAT_R8G8B8A8_UNORM, VK_FORMAT_B8G8R8A8_SRGB,
                                          VK_FORMAT_R16G16B16A16_SFLOAT};
static const VkFormat DEPTH_FORMATS[3] = {VK_FORMAT_D32_SFLOAT, VK_FORMAT_D24_UNORM_S8_UINT,
                                          VK_FORMAT_UNDEFINED};

static uint64_t graphics_points(void)
{
    uint64_t n = 1;
    for (int i = 0; i < AX_COUNT; i++)
        n *= AXES[i];
    return n;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- Shader variants, compiled once each -------------------------------------------------- */
#define MAX_SHADERS 64

typedef struct shader {
    char key[96];
    uint8_t *spirv;
    size_t size;
} shader;

typedef struct vsynth {
    int initialized;
    shader shaders[MAX_SHADERS];
    size_t num_shaders;
    char err[512];
} vsynth;

/* Compiles `src` with the defines "NAME=VALUE,..." (NULL for none) once; returns its index. */
static int shader_get(vsynth *v, const char *name, const char *src, glslang_stage_t stage,
                      const char *defines)
{
    char key[96], preamble[128];
    size_t off = 0;
    int idx = -1;
    glslang_shader_t *sh = NULL;
    glslang_program_t *prog = NULL;
    snprintf(key, sizeof(key), "%s:%s", name, defines ? defines : "");
    for (size_t i = 0; i < v->num_shaders; i++)
        if (strcmp(v->shaders[i].key, key) == 0)
            return (int)i;
    if (v->num_shaders == MAX_SHADERS) {
        snprintf(v->err, sizeof(v->err), "more than %d shader variants", MAX_SHADERS);
        return -1;
    }
    /* "A=1,B=2" -> "#define A 1\n#define B 2\n" */
    preamble[0] = '\0';
    char buf[96];
    snprintf(buf, sizeof(buf), "%s", defines ? defines : "");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = '\0';
        int w = snprintf(preamble + off, sizeof(preamble) - off, "#define %s %s\n", tok, eq + 1);
        if (w < 0 || (size_t)w >= sizeof(preamble) - off) {
            snprintf(v->err, sizeof(v->err), "%s: defines too long", key);
            goto cleanup;
        }
        off += (size_t)w;
    }
    glslang_input_t in = {.language = GLSLANG_SOURCE_GLSL,
                          .stage = stage,
                          .client = GLSLANG_CLIENT_VULKAN,
                          .client_version = GLSLANG_TARGET_VULKAN_1_1,
                          .target_language = GLSLANG_TARGET_SPV,
                          .target_language_version = GLSLANG_TARGET_SPV_1_3,
                          .code = src,
                          .default_version = 450,
                          .default_profile = GLSLANG_NO_PROFILE,
                          .messages = GLSLANG_MSG_DEFAULT_BIT,
                          .resource = glslang_default_resource()};
    sh = glslang_shader_create(&in);
    if (!sh) {
        snprintf(v->err, sizeof(v->err), "%s: out of memory", key);
        goto cleanup;
    }
    glslang_shader_set_preamble(sh, preamble);
    if (!glslang_shader_preprocess(sh, &in) || !glslang_shader_parse(sh, &in)) {
        snprintf(v->err, sizeof(v->err), "compiling %s failed: %s", key,
                 glslang_shader_get_info_log(sh));
        goto cleanup;
    }
    prog = glslang_program_create();
    if (!prog) {
        snprintf(v->err, sizeof(v->err), "%s: out of memory", key);
        goto cleanup;
    }
    glslang_program_add_shader(prog, sh);
    if (!glslang_program_link(prog, GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT)) {
        snprintf(v->err, sizeof(v->err), "linking %s failed: %s", key,
                 glslang_program_get_info_log(prog));
        goto cleanup;
    }
    glslang_program_SPIRV_generate(prog, stage);
    shader *s = &v->shaders[v->num_shaders];
    size_t words = glslang_program_SPIRV_get_size(prog);
    if (words == 0 || words > SIZE_MAX / 4) {
        snprintf(v->err, sizeof(v->err), "%s: no SPIR-V generated", key);
        goto cleanup;
    }
    s->size = words * 4;
    s->spirv = malloc(s->size);
    if (!s->spirv) {
        snprintf(v->err, sizeof(v->err), "%s: out of memory", key);
        goto cleanup;
    }
    glslang_program_SPIRV_get(prog, (unsigned int *)(void *)s->spirv);
    snprintf(s->key, sizeof(s->key), "%s", key);
    idx = (int)v->num_shaders++;
cleanup:
    if (prog)
        glslang_program_delete(prog);
    if (sh)
        glslang_shader_delete(sh);
    return idx;
}

/* ---- Encoding through the layer's encoder --------------------------------------------------
 * Handles are small integers: 1..MAX_SHADERS shader modules, then the layouts and render pass
 * encoded per pipeline. */
#define H_SET_LAYOUT 1000u
#define H_LAYOUT 1001u
#define H_RENDER_PASS 1002u
#define H_SAMPLER 1003u

typedef struct objects {
    vsynth *v;
    vkenc sampler, set_layout, layout, render_pass;
    uint32_t rp_depth, rp_color;
} objects;

static int objects_find(void *ctx, VkObjectType type, uint64_t h, vkenc_object *out)
{
    objects *o = ctx;
    memset(out, 0, sizeof(*out));
    if (type == VK_OBJECT_TYPE_SHADER_MODULE && h >= 1 && h <= o->v->num_shaders) {
        out->data = o->v->shaders[h - 1].spirv;
        out->len = o->v->shaders[h - 1].size;
        return 0;
    }
    const vkenc *e = NULL;
    if (type == VK_OBJECT_TYPE_SAMPLER && h == H_SAMPLER)
        e = &o->sampler;
    else if (type == VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT && h == H_SET_LAYOUT)
        e = &o->set_layout;
    else if (type == VK_OBJECT_TYPE_PIPELINE_LAYOUT && h == H_LAYOUT)
        e = &o->layout;
    else if (type == VK_OBJECT_TYPE_RENDER_PASS && h == H_RENDER_PASS) {
        e = &o->render_pass;
        out->subpass_depth = o->rp_depth;
        out->subpass_color = o->rp_color;
    }
    if (!e)
        return -1;
    out->data = e->data;
    out->len = e->len;
    return 0;
}

static void objects_reset(objects *o)
{
    vkenc_free(&o->set_layout);
    vkenc_free(&o->layout);
    vkenc_free(&o->render_pass);
}

/* The descriptor set layout and pipeline layout for a set of bindings, then the pipeline layout
 * with push constants for `stages`. */
static void encode_layouts(objects *o, const VkDescriptorSetLayoutBinding *b, uint32_t n,
                           VkShaderStageFlags pc_stages, uint32_t pc_size)
{
    vkenc_lookup lk = {objects_find, o};
    VkDescriptorSetLayoutCreateInfo dci = {.sType =
                                               VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                           .bindingCount = n,
                                           .pBindings = b};
    vkenc_set_layout(&o->set_layout, &dci, &lk);
    VkDescriptorSetLayout set = (VkDescriptorSetLayout)(uintptr_t)H_SET_LAYOUT;
    VkPushConstantRange pcr = {pc_stages, 0, pc_size};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &set,
                                      .pushConstantRangeCount = pc_size ? 1 : 0,
                                      .pPushConstantRanges = &pcr};
    vkenc_pipeline_layout(&o->layout, &lci, &lk);
}

static int encode_compute(objects *o, uint64_t point, vkenc *out)
{
    vsynth *v = o->v;
    uint32_t wx = WG_X[point % 4], wy = WG_Y[(point / 4) % 3];
    uint64_t p = point / 12;
    char defs[64];
    int sh;
    VkSpecializationMapEntry me[3] = {{0, 0, 4}, {1, 4, 4}, {2, 8, 4}};
    uint32_t data[3] = {wx, 0, wy};
    VkShaderStageFlags pc = 0;
    uint32_t pc_size = 0;
    if (p < 22) { /* blur: 3-23 taps x direction */
        snprintf(defs, sizeof(defs), "TAPS=%d", 3 + 2 * (int)(p / 2));
        sh = shader_get(v, "blur.comp", BLUR_COMP, GLSLANG_STAGE_COMPUTE, defs);
        data[1] = (uint32_t)(p % 2); /* VkBool32 */
    } else if (p < 70) {             /* noise: 1-8 octaves x scale */
        p -= 22;
        snprintf(defs, sizeof(defs), "OCTAVES=%d", (int)(p / 6) + 1);
        sh = shader_get(v, "noise.comp", NOISE_COMP, GLSLANG_STAGE_COMPUTE, defs);
        memcpy(&data[1], &NOISE_SCALES[p % 6], 4);
        pc = VK_SHADER_STAGE_COMPUTE_BIT;
        pc_size = 12;
    } else { /* grade: LUT x tone map */
        p -= 70;
        snprintf(defs, sizeof(defs), "LUT=%d,TONEMAP=%d", (int)(p / 3), (int)(p % 3));
        sh = shader_get(v, "grade.comp", GRADE_COMP, GLSLANG_STAGE_COMPUTE, defs);
        pc = VK_SHADER_STAGE_COMPUTE_BIT;
        pc_size = 12;
    }
    if (sh < 0)
        return -1;
    VkSamplerCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
                               .magFilter = VK_FILTER_LINEAR,
                               .minFilter = VK_FILTER_LINEAR,
                               .addressModeU = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .addressModeV = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .addressModeW = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE,
                               .maxLod = VK_LOD_CLAMP_NONE};
    vkenc_free(&o->sampler);
    vkenc_sampler(&o->sampler, &sci);
    VkSampler smp = (VkSampler)(uintptr_t)H_SAMPLER;
    VkDescriptorSetLayoutBinding b[2] = {
        {0, VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1, VK_SHADER_STAGE_COMPUTE_BIT, &smp},
        {1, VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL}};
    encode_layouts(o, b, 2, pc, pc_size);
    VkSpecializationInfo si = {3, me, sizeof(data), data};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = (VkShaderModule)(uintptr_t)(sh + 1),
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = (VkPipelineLayout)(uintptr_t)H_LAYOUT,
        .basePipelineIndex = -1};
    vkenc_lookup lk = {objects_find, o};
    vkenc_compute_pipeline(out, &ci, &lk);
    return 0;
}

static int encode_graphics(objects *o, uint64_t point, vkenc *out)
{
    vsynth *v = o->v;
    uint32_t ax[AX_COUNT];
    for (int i = 0; i < AX_COUNT; i++) {
        ax[i] = (uint32_t)(point % AXES[i]);
        point /= AXES[i];
    }
    char defs[64];
    /* skin: 0 rigid, 1 skinned with 32 bones, 2 with 64 */
    snprintf(defs, sizeof(defs), "SKINNED=%d,BONES=%d", ax[AX_SKIN] ? 1 : 0,
             ax[AX_SKIN] == 2 ? 64 : 32);
    int vs = shader_get(v, "mesh.vert", MESH_VERT, GLSLANG_STAGE_VERTEX, defs);
    snprintf(defs, sizeof(defs), "LIGHTS=%d,SHADOWS=%d,FOG=%d", LIGHTS[ax[AX_LIGHTS]],
             (int)ax[AX_SHADOWS], (int)ax[AX_FOG]);
    int fs = shader_get(v, "pbr.frag", PBR_FRAG, GLSLANG_STAGE_FRAGMENT, defs);
    if (vs < 0 || fs < 0)
        return -1;

    VkSamplerCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO,
                               .magFilter = VK_FILTER_LINEAR,
                               .minFilter = VK_FILTER_LINEAR,
                               .mipmapMode = VK_SAMPLER_MIPMAP_MODE_LINEAR,
                               .addressModeU = VK_SAMPLER_ADDRESS_MODE_REPEAT,
                               .addressModeV = VK_SAMPLER_ADDRESS_MODE_REPEAT,
                               .addressModeW = VK_SAMPLER_ADDRESS_MODE_REPEAT,
                               .maxAnisotropy = 1.0f,
                               .maxLod = VK_LOD_CLAMP_NONE};
    vkenc_free(&o->sampler);
    vkenc_sampler(&o->sampler, &sci);
    VkSampler smp = (VkSampler)(uintptr_t)H_SAMPLER;
    VkDescriptorSetLayoutBinding b[4] = {
        {0, VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1, VK_SHADER_STAGE_FRAGMENT_BIT, &smp},
        {1, VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, 1, VK_SHADER_STAGE_FRAGMENT_BIT, NULL},
        {2, VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, 1, VK_SHADER_STAGE_VERTEX_BIT, NULL},
        {3, VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, 1, VK_SHADER_STAGE_FRAGMENT_BIT, NULL}};
    encode_layouts(o, b, 4, VK_SHADER_STAGE_VERTEX_BIT, 64);

    VkFormat color = COLOR_FORMATS[ax[AX_COLOR]], depth = DEPTH_FORMATS[ax[AX_DEPTH]];
    VkAttachmentDescription att[2] = {
        {0, color, VK_SAMPLE_COUNT_1_BIT, VK_ATTACHMENT_LOAD_OP_CLEAR, VK_ATTACHMENT_STORE_OP_STORE,
         VK_ATTACHMENT_LOAD_OP_DONT_CARE, VK_ATTACHMENT_STORE_OP_DONT_CARE,
         VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL},
        {0, depth, VK_SAMPLE_COUNT_1_BIT, VK_ATTACHMENT_LOAD_OP_CLEAR,
         VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_ATTACHMENT_LOAD_OP_CLEAR,
         VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_IMAGE_LAYOUT_UNDEFINED,
         VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL}};
    VkAttachmentReference cref = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
    VkAttachmentReference dref = {1, VK_IMAGE_LAYOUT_DEPTH_STENCIL_ATTACHMENT_OPTIMAL};
    int has_depth = depth != VK_FORMAT_UNDEFINED;
    VkSubpassDescription sub = {.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS,
                                .colorAttachmentCount = 1,
                                .pColorAttachments = &cref,
                                .pDepthStencilAttachment = has_depth ? &dref : NULL};
    VkRenderPassCreateInfo rpi = {.sType = VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO,
                                  .attachmentCount = has_depth ? 2 : 1,
                                  .pAttachments = att,
                                  .subpassCount = 1,
                                  .pSubpasses = &sub};
    vkenc_render_pass(&o->render_pass, &rpi, &o->rp_depth, &o->rp_color);

    float cutoff = ax[AX_ALPHA] ? 0.5f : 0.0f;
    VkSpecializationMapEntry me = {0, 0, 4};
    VkSpecializationInfo si = {1, &me, 4, &cutoff};
    VkPipelineShaderStageCreateInfo stages[2] = {
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_VERTEX_BIT,
         .module = (VkShaderModule)(uintptr_t)(vs + 1),
         .pName = "main"},
        {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
         .stage = VK_SHADER_STAGE_FRAGMENT_BIT,
         .module = (VkShaderModule)(uintptr_t)(fs + 1),
         .pName = "main",
         .pSpecializationInfo = &si}};
    int skinned = ax[AX_SKIN] != 0;
    VkVertexInputBindingDescription vb = {0, skinned ? 64u : 32u, VK_VERTEX_INPUT_RATE_VERTEX};
    VkVertexInputAttributeDescription va[5] = {{0, 0, VK_FORMAT_R32G32B32_SFLOAT, 0},
                                               {1, 0, VK_FORMAT_R32G32B32_SFLOAT, 12},
                                               {2, 0, VK_FORMAT_R32G32_SFLOAT, 24},
                                               {3, 0, VK_FORMAT_R8G8B8A8_UINT, 32},
                                               {4, 0, VK_FORMAT_R32G32B32A32_SFLOAT, 36}};
    VkPipelineVertexInputStateCreateInfo vi = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO,
        .vertexBindingDescriptionCount = 1,
        .pVertexBindingDescriptions = &vb,
        .vertexAttributeDescriptionCount = skinned ? 5 : 3,
        .pVertexAttributeDescriptions = va};
    VkPipelineInputAssemblyStateCreateInfo ia = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO,
        .topology = ax[AX_TOPO] ? VK_PRIMITIVE_TOPOLOGY_TRIANGLE_STRIP
                                : VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST};
    VkPipelineViewportStateCreateInfo vp = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO,
        .viewportCount = 1,
        .scissorCount = 1};
    static const VkCullModeFlags CULL[3] = {VK_CULL_MODE_NONE, VK_CULL_MODE_BACK_BIT,
                                            VK_CULL_MODE_FRONT_BIT};
    VkPipelineRasterizationStateCreateInfo rs = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO,
        .polygonMode = VK_POLYGON_MODE_FILL,
        .cullMode = CULL[ax[AX_CULL]],
        .frontFace = VK_FRONT_FACE_COUNTER_CLOCKWISE,
        .lineWidth = 1.0f};
    VkPipelineMultisampleStateCreateInfo ms = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO,
        .rasterizationSamples = VK_SAMPLE_COUNT_1_BIT};
    VkPipelineDepthStencilStateCreateInfo ds = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_DEPTH_STENCIL_STATE_CREATE_INFO,
        .depthTestEnable = VK_TRUE,
        .depthWriteEnable = ax[AX_BLEND] == 0 ? VK_TRUE : VK_FALSE,
        .depthCompareOp = VK_COMPARE_OP_GREATER_OR_EQUAL,
        .minDepthBounds = 0.0f,
        .maxDepthBounds = 1.0f};
    /* blend: 0 opaque, 1 alpha, 2 additive */
    VkPipelineColorBlendAttachmentState cba = {
        .blendEnable = ax[AX_BLEND] ? VK_TRUE : VK_FALSE,
        .srcColorBlendFactor = VK_BLEND_FACTOR_SRC_ALPHA,
        .dstColorBlendFactor =
            ax[AX_BLEND] == 2 ? VK_BLEND_FACTOR_ONE : VK_BLEND_FACTOR_ONE_MINUS_SRC_ALPHA,
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
    VkPipelineDynamicStateCreateInfo dy = {.sType =
                                               VK_STRUCTURE_TYPE_PIPELINE_DYNAMIC_STATE_CREATE_INFO,
                                           .dynamicStateCount = 2,
                                           .pDynamicStates = dyn};
    VkGraphicsPipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO,
                                       .stageCount = 2,
                                       .pStages = stages,
                                       .pVertexInputState = &vi,
                                       .pInputAssemblyState = &ia,
                                       .pViewportState = &vp,
                                       .pRasterizationState = &rs,
                                       .pMultisampleState = &ms,
                                       .pDepthStencilState = &ds,
                                       .pColorBlendState = &cb,
                                       .pDynamicState = &dy,
                                       .layout = (VkPipelineLayout)(uintptr_t)H_LAYOUT,
                                       .renderPass = (VkRenderPass)(uintptr_t)H_RENDER_PASS,
                                       .basePipelineIndex = -1};
    vkenc_lookup lk = {objects_find, o};
    vkenc_graphics_pipeline(out, &ci, &lk);
    return 0;
}

uint64_t psdb__synth_vulkan_max(void)
{
    return COMPUTE_POINTS + graphics_points();
}

psdb_hr psdb__synth_vulkan(const char *path, const psdb__synth_vulkan_params *p,
                           psdb__synth_vulkan_stats *stats, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    char *tmp = NULL;
    psdb_sodb_writer *w = NULL;
    vsynth v;
    objects o;
    char dummy[1];
    memset(&v, 0, sizeof(v));
    memset(&o, 0, sizeof(o));
    o.v = &v;
    if (!err || err_size == 0) {
        err = dummy;
        err_size = sizeof(dummy);
    }
    err[0] = '\0';
    if (!path || !p || !stats || !p->app_name || !*p->app_name || p->pipelines == 0 ||
        p->pipelines > psdb__synth_vulkan_max() || (!p->engine_name && p->engine_version)) {
        snprintf(err, err_size, "invalid parameters (pipelines: 1-%llu)",
                 (unsigned long long)psdb__synth_vulkan_max());
        return PSDB_E_INVALIDARG;
    }
    memset(stats, 0, sizeof(*stats));
    uint64_t n = p->pipelines, gpoints = graphics_points();
    if (!glslang_initialize_process()) {
        snprintf(err, err_size, "cannot start glslang");
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    v.initialized = 1;
    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    if (!tmp) {
        hr = PSDB_E_OUTOFMEMORY;
        snprintf(err, err_size, "out of memory");
        goto cleanup;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    unlink(tmp);
    psdb_app_identity id;
    memset(&id, 0, sizeof(id));
    id.desc.name = p->app_name;
    id.desc.version = p->app_version;
    id.desc.engine_name = p->engine_name;
    id.desc.engine_version = p->engine_version;
    /* The AppId the layer derives for this name (schema/SODB.md section 3.1). */
    uint8_t digest[32];
    char seedstr[300];
    int sl = snprintf(seedstr, sizeof(seedstr), "psdb-vulkan-app-id:%.255s", p->app_name);
    psdb__sha256(seedstr, sl > 0 && (size_t)sl < sizeof(seedstr) ? (size_t)sl : 0, digest);
    memcpy(id.app_id, digest, 16);
    hr = psdb_sodb_writer_open_ex(tmp, &id, PSDB_SODB_WRITER_BULK, &w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "%s: cannot create: %s", tmp, psdb_hr_str(hr));
        goto cleanup;
    }
    /* Every fifth pipeline is a compute pipeline while distinct ones last (games create far
     * fewer compute than graphics pipelines); each kind walks its own space. */
    uint64_t want_compute = n / 5 < COMPUTE_POINTS ? n / 5 : COMPUTE_POINTS;
    if (n - want_compute > gpoints)
        want_compute = n - gpoints;
    uint64_t s = p->seed, space[2] = {COMPUTE_POINTS, gpoints}, offset[2], stride[2];
    for (int k = 0; k < 2; k++) {
        offset[k] = splitmix(&s) % space[k];
        stride[k] = splitmix(&s) % space[k];
        while (stride[k] == 0 || gcd(stride[k], space[k]) != 1)
            stride[k] = (stride[k] + 1) % space[k];
    }
    uint64_t compute = 0, graphics = 0;
    for (uint64_t i = 0; i < n; i++) {
        int is_compute = compute < want_compute && (i % 5 == 0 || n - i <= want_compute - compute);
        uint64_t j = is_compute ? compute : graphics;
        uint64_t point = (j * stride[!is_compute] + offset[!is_compute]) % space[!is_compute];
        vkenc e;
        memset(&e, 0, sizeof(e));
        objects_reset(&o);
        int bad = is_compute ? encode_compute(&o, point, &e) : encode_graphics(&o, point, &e);
        if (bad || e.oom || e.unrepresentable) {
            vkenc_free(&e);
            snprintf(err, err_size, "pipeline %llu: %s", (unsigned long long)i,
                     bad ? v.err : "cannot encode (out of memory)");
            hr = bad ? PSDB_E_FAIL : PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        hr = psdb_sodb_writer_add(w, is_compute ? PSDB_SODB_VK_COMPUTE : PSDB_SODB_VK_GRAPHICS, 1,
                                  e.data, e.len);
        vkenc_free(&e);
        if (hr != PSDB_S_OK) {
            snprintf(err, err_size, "pipeline %llu: cannot record: %s", (unsigned long long)i,
                     hr == PSDB_S_FALSE ? "a duplicate description" : psdb_hr_str(hr));
            if (hr == PSDB_S_FALSE) /* the points are distinct: an encoder defect */
                hr = PSDB_E_FAIL;
            goto cleanup;
        }
        compute += is_compute;
        graphics += !is_compute;
    }
    hr = psdb_sodb_writer_commit(w);
    psdb_sodb_writer_release(w);
    w = NULL;
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "%s: cannot commit: %s", tmp, psdb_hr_str(hr));
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        hr = psdb__errno_hr(e);
        snprintf(err, err_size, "rename %s to %s failed: %s", tmp, path, strerror(e));
        goto cleanup;
    }
    stats->compute = compute;
    stats->graphics = graphics;
    stats->modules = v.num_shaders;
    hr = PSDB_S_OK;
cleanup:
    psdb_sodb_writer_release(w);
    if (tmp && PSDB_FAILED(hr))
        unlink(tmp);
    free(tmp);
    vkenc_free(&o.sampler);
    objects_reset(&o);
    for (size_t k = 0; k < v.num_shaders; k++)
        free(v.shaders[k].spirv);
    if (v.initialized)
        glslang_finalize_process();
    return hr;
}
#endif
