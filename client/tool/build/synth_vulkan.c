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

/* ---- A patch's shader edits -----------------------------------------------------------------
 * Version N+1 of a game changes some shaders: here one constant of each compute and fragment
 * shader family (the blur's texel centre, the noise's lacunarity, the grading's exposure, the PBR
 * roughness), so an edited variant compiles to SPIR-V that no corpus variant has. SRC_EDIT is the
 * shader of a pipeline edited in place; SRC_NEW the shader of a new pipeline once the draws of
 * new state combinations of the corpus's shaders keep meeting corpus entries. */
enum { SRC_CORPUS, SRC_EDIT, SRC_NEW, SRC_COUNT };
static const char *const SRC_SUFFIX[SRC_COUNT] = {"", "!edit", "!new"};
static const struct {
    const char *name, *from, *to[SRC_COUNT];
} EDITS[] = {
    {"blur.comp", "+ 0.5) * texel", {NULL, "+ 0.25) * texel", "+ 0.75) * texel"}},
    {"noise.comp", "p *= 2.03;", {NULL, "p *= 2.11;", "p *= 1.97;"}},
    {"grade.comp", "* pc.exposure;", {NULL, "* pc.exposure * 1.125;", "* pc.exposure * 0.875;"}},
    {"pbr.frag", "0.0), 0.5));", {NULL, "0.0), 0.375));", "0.0), 0.625));"}},
};
#define NUM_EDITS (sizeof(EDITS) / sizeof(EDITS[0]))

/* ---- Shader variants, compiled once each -------------------------------------------------- */
/* The corpus's variants (44 at most), and in a patch each edited and new one. */
#define MAX_SHADERS 128

typedef struct shader {
    char key[96];
    uint8_t *spirv;
    size_t size;
} shader;

typedef struct vsynth {
    int initialized;
    shader shaders[MAX_SHADERS];
    size_t num_shaders;
    char *edited[NUM_EDITS][SRC_COUNT]; /* the edited sources, made once each */
    char err[512];
} vsynth;

/* The source of family `name` as variant `which` (SRC_CORPUS: src itself), made once; NULL with
 * v->err set when the edit's anchor is not in the source exactly once (a defect of EDITS). */
static const char *family_source(vsynth *v, const char *name, const char *src, int which)
{
    const char *out = which == SRC_CORPUS ? src : NULL;
    for (size_t i = 0; !out && i < NUM_EDITS; i++) {
        if (strcmp(EDITS[i].name, name) != 0)
            continue;
        if (!v->edited[i][which]) {
            const char *at = strstr(src, EDITS[i].from);
            size_t from = strlen(EDITS[i].from), to = strlen(EDITS[i].to[which]);
            if (!at || strstr(at + 1, EDITS[i].from)) {
                snprintf(v->err, sizeof(v->err), "%s: the edit's anchor is not in it once", name);
                break;
            }
            size_t head = (size_t)(at - src), tail = strlen(at + from);
            char *e = malloc(head + to + tail + 1);
            if (!e) {
                snprintf(v->err, sizeof(v->err), "%s: out of memory", name);
                break;
            }
            memcpy(e, src, head);
            memcpy(e + head, EDITS[i].to[which], to);
            memcpy(e + head + to, at + from, tail + 1);
            v->edited[i][which] = e;
        }
        out = v->edited[i][which];
    }
    if (!out && !v->err[0])
        snprintf(v->err, sizeof(v->err), "%s: no edit defined for it", name);
    return out;
}

/* Compiles family `name` (variant `which` of its source src) with the defines "NAME=VALUE,..."
 * (NULL for none) once; returns its index, or -1 with v->err set. */
static int shader_get(vsynth *v, const char *name, const char *src, int which,
                      glslang_stage_t stage, const char *defines)
{
    char key[96], preamble[128];
    size_t off = 0;
    int idx = -1;
    glslang_shader_t *sh = NULL;
    glslang_program_t *prog = NULL;
    snprintf(key, sizeof(key), "%s%s:%s", name, SRC_SUFFIX[which], defines ? defines : "");
    for (size_t i = 0; i < v->num_shaders; i++)
        if (strcmp(v->shaders[i].key, key) == 0)
            return (int)i;
    v->err[0] = '\0';
    src = family_source(v, name, src, which);
    if (!src)
        return -1;
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

/* Pipeline `point` of the compute space into out, its shader the family's variant `which`. */
static int encode_compute(objects *o, uint64_t point, int which, vkenc *out)
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
        sh = shader_get(v, "blur.comp", BLUR_COMP, which, GLSLANG_STAGE_COMPUTE, defs);
        data[1] = (uint32_t)(p % 2); /* VkBool32 */
    } else if (p < 70) {             /* noise: 1-8 octaves x scale */
        p -= 22;
        snprintf(defs, sizeof(defs), "OCTAVES=%d", (int)(p / 6) + 1);
        sh = shader_get(v, "noise.comp", NOISE_COMP, which, GLSLANG_STAGE_COMPUTE, defs);
        memcpy(&data[1], &NOISE_SCALES[p % 6], 4);
        pc = VK_SHADER_STAGE_COMPUTE_BIT;
        pc_size = 12;
    } else { /* grade: LUT x tone map */
        p -= 70;
        snprintf(defs, sizeof(defs), "LUT=%d,TONEMAP=%d", (int)(p / 3), (int)(p % 3));
        sh = shader_get(v, "grade.comp", GRADE_COMP, which, GLSLANG_STAGE_COMPUTE, defs);
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

/* Pipeline `point` of the graphics space into out, its fragment shader the family's variant
 * `which` (a patch edits the fragment shader; the vertex shader stays the corpus's). */
static int encode_graphics(objects *o, uint64_t point, int which, vkenc *out)
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
    int vs = shader_get(v, "mesh.vert", MESH_VERT, SRC_CORPUS, GLSLANG_STAGE_VERTEX, defs);
    snprintf(defs, sizeof(defs), "LIGHTS=%d,SHADOWS=%d,FOG=%d", LIGHTS[ax[AX_LIGHTS]],
             (int)ax[AX_SHADOWS], (int)ax[AX_FOG]);
    int fs = shader_get(v, "pbr.frag", PBR_FRAG, which, GLSLANG_STAGE_FRAGMENT, defs);
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

/* The corpus's walk: which kind pipeline i is and its point in that kind's space. Every fifth
 * pipeline is a compute pipeline while distinct ones last (games create far fewer compute than
 * graphics pipelines); each kind walks its own space, pipeline j of a kind at point
 * (j * stride + offset) mod size. */
typedef struct walk {
    uint64_t n, want_compute, compute, graphics;
    uint64_t space[2], offset[2], stride[2]; /* [0] compute, [1] graphics */
} walk;

static void walk_init(walk *w, uint64_t n, uint64_t seed)
{
    uint64_t s = seed;
    memset(w, 0, sizeof(*w));
    w->n = n;
    w->space[0] = COMPUTE_POINTS;
    w->space[1] = graphics_points();
    w->want_compute = n / 5 < COMPUTE_POINTS ? n / 5 : COMPUTE_POINTS;
    if (n - w->want_compute > w->space[1])
        w->want_compute = n - w->space[1];
    for (int k = 0; k < 2; k++) {
        w->offset[k] = splitmix(&s) % w->space[k];
        w->stride[k] = splitmix(&s) % w->space[k];
        while (w->stride[k] == 0 || gcd(w->stride[k], w->space[k]) != 1)
            w->stride[k] = (w->stride[k] + 1) % w->space[k];
    }
}

/* Pipeline i (called for i = 0, 1, ... in turn): its kind (1 compute) and point. */
static void walk_next(walk *w, uint64_t i, int *is_compute, uint64_t *point)
{
    int c =
        w->compute < w->want_compute && (i % 5 == 0 || w->n - i <= w->want_compute - w->compute);
    uint64_t j = c ? w->compute : w->graphics;
    *point = (j * w->stride[!c] + w->offset[!c]) % w->space[!c];
    *is_compute = c;
    w->compute += c;
    w->graphics += !c;
}

/* Encodes one pipeline into e (all zeros on entry; the caller frees it): PSDB_S_OK, or with err
 * set PSDB_E_FAIL (a shader did not compile) or PSDB_E_OUTOFMEMORY. */
static psdb_hr encode_point(objects *o, int is_compute, uint64_t point, int which, vkenc *e,
                            char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    objects_reset(o);
    int bad = is_compute ? encode_compute(o, point, which, e) : encode_graphics(o, point, which, e);
    if (bad || e->oom || e->unrepresentable) {
        snprintf(err, err_size, "%s", bad ? o->v->err : "cannot encode (out of memory)");
        hr = bad ? PSDB_E_FAIL : PSDB_E_OUTOFMEMORY;
    }
    return hr;
}

static int cmp_key(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

/* Whether the SHA-256 of e's bytes is one of the n sorted corpus digests. */
static int in_corpus(const uint8_t (*keys)[32], uint64_t n, const vkenc *e)
{
    uint8_t d[32];
    psdb__sha256(e->data, e->len, d);
    return bsearch(d, keys, (size_t)n, 32, cmp_key) != NULL;
}

/* A patch's state: its own stream, and the corpus's digests (sorted) that no edited or new entry
 * may equal. */
typedef struct patch {
    uint64_t rng;
    uint32_t permille;
    uint8_t (*corpus)[32];
    uint8_t *removed; /* the kind (1 compute) of each removed pipeline, in corpus order */
    uint64_t num_removed;
} patch;

/* The patch's stream: SHA-256 of (a tag, seed, app name, K), so patches of another corpus or
 * another K touch other pipelines, and the corpus's own draws never move. */
static psdb_hr patch_init(patch *pt, const psdb__synth_vulkan_params *p, objects *o, char *err,
                          size_t err_size)
{
    static const char tag[] = "psdb.synth.vulkan.patch.v1";
    uint8_t h[32], le[8];
    psdb_hr hr = PSDB_E_OUTOFMEMORY;
    psdb__sha256_ctx *c = psdb__sha256_begin();
    walk w;
    pt->permille = p->changed_permille;
    pt->corpus = malloc((size_t)p->pipelines * 32);
    pt->removed = malloc((size_t)p->pipelines);
    if (!c || !pt->corpus || !pt->removed) {
        snprintf(err, err_size, "out of memory");
        goto cleanup;
    }
    psdb__sha256_update(c, tag, sizeof(tag) - 1);
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(p->seed >> (8 * i));
    psdb__sha256_update(c, le, 8);
    psdb__sha256_update(c, p->app_name, strlen(p->app_name));
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(p->patch >> (8 * i));
    psdb__sha256_update(c, le, 8);
    psdb__sha256_end(c, h);
    c = NULL;
    memcpy(&pt->rng, h, 8);
    /* The corpus's entries, every one of them (also those after an edit and those the patch
     * removes): what no edited or new pipeline may be. */
    walk_init(&w, p->pipelines, p->seed);
    for (uint64_t i = 0; i < p->pipelines; i++) {
        int is_compute;
        uint64_t point;
        vkenc e;
        memset(&e, 0, sizeof(e));
        walk_next(&w, i, &is_compute, &point);
        hr = encode_point(o, is_compute, point, SRC_CORPUS, &e, err, err_size);
        if (PSDB_SUCCEEDED(hr))
            psdb__sha256(e.data, e.len, pt->corpus[i]);
        vkenc_free(&e);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    qsort(pt->corpus, (size_t)p->pipelines, 32, cmp_key);
cleanup:
    if (c)
        psdb__sha256_end(c, h);
    return hr;
}

/* What the patch makes of the next corpus pipeline: 0 kept, 1 edited, 2 removed. */
static int patch_touch(patch *pt)
{
    if (splitmix(&pt->rng) % 1000 >= pt->permille)
        return 0;
    return splitmix(&pt->rng) % 2 == 0 ? 1 : 2;
}

/* Adds e as an entry of its kind: S_OK, S_FALSE (the SODB holds it already), or a failure with
 * err set. */
static psdb_hr add_entry(psdb_sodb_writer *w, int is_compute, const vkenc *e, uint64_t i, char *err,
                         size_t err_size)
{
    psdb_hr hr = psdb_sodb_writer_add(w, is_compute ? PSDB_SODB_VK_COMPUTE : PSDB_SODB_VK_GRAPHICS,
                                      1, e->data, e->len);
    if (PSDB_FAILED(hr))
        snprintf(err, err_size, "pipeline %llu: cannot record: %s", (unsigned long long)i,
                 psdb_hr_str(hr));
    return hr;
}

/* The patch's new pipelines, one per removed one and of its kind, after the corpus's: a state
 * combination of the corpus's shaders no corpus entry has, drawn from the patch's stream, or,
 * after 8 draws that all met one (a corpus that fills its space), the same with the family's new
 * shader. Never a corpus entry, never an entry written before. */
static psdb_hr add_new(psdb_sodb_writer *w, objects *o, patch *pt, const walk *wk,
                       uint64_t pipelines, psdb__synth_vulkan_stats *st, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    uint64_t rng = pt->rng ^ 0xA5A5A5A5A5A5A5A5ull;
    for (uint64_t r = 0; r < pt->num_removed && PSDB_SUCCEEDED(hr); r++) {
        int is_compute = pt->removed[r];
        hr = PSDB_S_FALSE;
        /* The draws end long before this bound: the kind's new shader gives as many
         * descriptions again as its space holds, more than the kind has pipelines. */
        for (uint64_t attempt = 0; hr == PSDB_S_FALSE; attempt++) {
            vkenc e;
            memset(&e, 0, sizeof(e));
            if (attempt == 1000000) {
                snprintf(err, err_size, "new pipeline %llu: no description left to draw",
                         (unsigned long long)r);
                hr = PSDB_E_FAIL;
                break;
            }
            uint64_t point = splitmix(&rng) % wk->space[!is_compute];
            int which = attempt < 8 ? SRC_CORPUS : SRC_NEW;
            hr = encode_point(o, is_compute, point, which, &e, err, err_size);
            if (PSDB_SUCCEEDED(hr))
                hr = in_corpus((const uint8_t(*)[32])pt->corpus, pipelines, &e)
                         ? PSDB_S_FALSE
                         : add_entry(w, is_compute, &e, pipelines + r, err, err_size);
            vkenc_free(&e);
        }
        st->compute += hr == PSDB_S_OK && is_compute;
        st->graphics += hr == PSDB_S_OK && !is_compute;
    }
    return hr;
}

psdb_hr psdb__synth_vulkan(const char *path, const psdb__synth_vulkan_params *p,
                           psdb__synth_vulkan_stats *stats, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    char *tmp = NULL;
    psdb_sodb_writer *w = NULL;
    vsynth v;
    objects o;
    patch pt;
    walk wk;
    char dummy[1];
    memset(&v, 0, sizeof(v));
    memset(&o, 0, sizeof(o));
    memset(&pt, 0, sizeof(pt));
    o.v = &v;
    if (!err || err_size == 0) {
        err = dummy;
        err_size = sizeof(dummy);
    }
    err[0] = '\0';
    if (!path || !p || !stats || !p->app_name || !*p->app_name || p->pipelines == 0 ||
        p->pipelines > psdb__synth_vulkan_max() || (!p->engine_name && p->engine_version) ||
        p->changed_permille > 1000 || (p->changed_permille && !p->patch)) {
        snprintf(err, err_size,
                 "invalid parameters (pipelines: 1-%llu, changed: 0-1000 per mille "
                 "with a patch)",
                 (unsigned long long)psdb__synth_vulkan_max());
        return PSDB_E_INVALIDARG;
    }
    memset(stats, 0, sizeof(*stats));
    uint64_t n = p->pipelines;
    if (!glslang_initialize_process()) {
        snprintf(err, err_size, "cannot start glslang");
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    v.initialized = 1;
    if (p->patch && PSDB_FAILED(hr = patch_init(&pt, p, &o, err, err_size)))
        goto cleanup;
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
    walk_init(&wk, n, p->seed);
    for (uint64_t i = 0; i < n; i++) {
        int is_compute;
        uint64_t point;
        char why[512];
        vkenc e;
        memset(&e, 0, sizeof(e));
        walk_next(&wk, i, &is_compute, &point);
        int action = p->patch ? patch_touch(&pt) : 0;
        if (action == 2) {
            pt.removed[pt.num_removed++] = (uint8_t)is_compute;
            stats->replaced++;
            continue;
        }
        hr = encode_point(&o, is_compute, point, action ? SRC_EDIT : SRC_CORPUS, &e, why,
                          sizeof(why));
        if (PSDB_FAILED(hr)) {
            snprintf(err, err_size, "pipeline %llu: %s", (unsigned long long)i, why);
        } else if (action && in_corpus((const uint8_t(*)[32])pt.corpus, n, &e)) {
            /* An edit compiles to a shader no corpus variant has: a defect of EDITS. */
            snprintf(err, err_size, "pipeline %llu: its edit is a corpus entry",
                     (unsigned long long)i);
            hr = PSDB_E_FAIL;
        } else {
            hr = add_entry(w, is_compute, &e, i, err, err_size);
            if (hr == PSDB_S_FALSE) { /* the points are distinct: an encoder defect */
                snprintf(err, err_size, "pipeline %llu: cannot record: a duplicate description",
                         (unsigned long long)i);
                hr = PSDB_E_FAIL;
            }
        }
        vkenc_free(&e);
        if (PSDB_FAILED(hr))
            goto cleanup;
        stats->compute += is_compute;
        stats->graphics += !is_compute;
        stats->edited += action == 1;
    }
    hr = add_new(w, &o, &pt, &wk, n, stats, err, err_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
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
    stats->modules = v.num_shaders;
    hr = PSDB_S_OK;
cleanup:
    psdb_sodb_writer_release(w);
    if (tmp && PSDB_FAILED(hr))
        unlink(tmp);
    free(tmp);
    free(pt.corpus);
    free(pt.removed);
    vkenc_free(&o.sampler);
    objects_reset(&o);
    for (size_t k = 0; k < v.num_shaders; k++)
        free(v.shaders[k].spirv);
    for (size_t k = 0; k < NUM_EDITS; k++)
        for (int s = 0; s < SRC_COUNT; s++)
            free(v.edited[k][s]);
    if (v.initialized)
        glslang_finalize_process();
    return hr;
}
#endif
