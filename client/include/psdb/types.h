/* psdb/types.h - identities, adapters, targets and the pipeline / state-object descriptions. */
#ifndef PSDB_TYPES_H
#define PSDB_TYPES_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles: incomplete types, owned by whoever received them through an `out` parameter. */
typedef struct psdb_installer psdb_installer;
typedef struct psdb_application psdb_application;
typedef struct psdb_component psdb_component;
typedef struct psdb_explorer psdb_explorer;
typedef struct psdb_device psdb_device;
typedef struct psdb_session psdb_session;
typedef struct psdb_pipeline psdb_pipeline;
typedef struct psdb_state_object psdb_state_object;
typedef struct psdb_pipeline_library psdb_pipeline_library;
typedef struct psdb_queue psdb_queue;

/* ---- Application identity (MODEL A2) --------------------------------------------------------- */
typedef struct psdb_app_desc {
    const char *exe_filename; /* file name of the executable, e.g. "game.exe" */
    const char *name;         /* required */
    uint64_t version;         /* required, PSDB_VERSION(a,b,c,d) */
    const char *engine_name;  /* optional; when NULL engine_version must be 0 */
    uint64_t engine_version;
} psdb_app_desc;

typedef struct psdb_app_identity {
    psdb_app_desc desc;
    uint8_t app_id[16]; /* AppId GUID bytes */
} psdb_app_identity;

/* ---- Adapter and driver (MODEL A1) ------------------------------------------------------------
 */
#define PSDB_ADAPTER_FAMILY_MAX 128       /* family strings are shorter than this, NUL included */
#define PSDB_ADAPTER_FLAG_NO_ASD 0x1u     /* the driver has no Advanced Shader Delivery support */
#define PSDB_ADAPTER_FLAG_NO_LIBRARY 0x2u /* the driver has no pipeline-library support */

typedef struct psdb_adapter_desc {
    uint32_t vendor_id, device_id;
    const char *family;        /* adapter family, < PSDB_ADAPTER_FAMILY_MAX bytes */
    uint64_t abi_min, abi_max; /* supported ABI range; 0 and UINT64_MAX are reserved */
    uint64_t compiler_version;
    uint64_t app_profile_version;
    uint64_t driver_build;
    uint32_t flags; /* PSDB_ADAPTER_FLAG_* */
} psdb_adapter_desc;

/* What one PSDB was compiled for. */
typedef struct psdb_target {
    const char *family;
    uint64_t abi_version;
    uint64_t compiler_version;
    uint64_t profile_version;
} psdb_target;

/* The reference compiler's simulated local compile cost, in nanoseconds of CPU per KiB of bytecode
 * (psdb_device_desc.compile_ns_per_kib, psdb_sodb_compile). The default, 0.2 ms per KiB, makes a
 * 10 KiB DXIL pixel shader cost 2 ms and a typical PSO (VS 6 KiB + PS 16 KiB) about 4.5 ms: the
 * low end of what drivers spend turning DXIL into ISA (simple shaders take milliseconds, large
 * uber-shaders tens to hundreds), so the savings a PSDB hit reports are not inflated. */
#define PSDB_COMPILE_NS_PER_KIB_DEFAULT 200000ull
/* The cost value meaning "no simulated cost". */
#define PSDB_COMPILE_COST_FREE UINT64_MAX

/* Value types stored in a PSDB (MODEL C1). */
#define PSDB_VALUE_OBJECT_CODE 0u
#define PSDB_VALUE_METADATA 1u
#define PSDB_VALUE_DEBUG_PDB 2u
#define PSDB_VALUE_PERFORMANCE_DATA 3u
#define PSDB_VALUE_TYPE_COUNT 4u

/* ---- Explicit PSDB subobject ------------------------------------------------------------------
 */
#define PSDB_SESSION_FLAG_NONE 0x0u
#define PSDB_SESSION_FLAG_CREATE_ONLY 0x1u

typedef struct psdb_session_subobject {
    psdb_session *session; /* NULL with NONE flags: same as an omitted subobject (F2, F3) */
    uint32_t flags;        /* PSDB_SESSION_FLAG_* */
} psdb_session_subobject;

/* ---- Shaders, formats and fixed-function state (D3D12 names in snake_case) --------------------
 */
typedef struct psdb_shader {
    const void *code; /* bytecode: any non-empty bytes; {NULL, 0} means the stage is absent */
    size_t size;
} psdb_shader;

/* Formats use the DXGI_FORMAT numbering. */
typedef enum psdb_format {
    PSDB_FORMAT_UNKNOWN = 0,
    PSDB_FORMAT_R32G32B32A32_FLOAT = 2,
    PSDB_FORMAT_R32G32B32A32_UINT = 3,
    PSDB_FORMAT_R32G32B32A32_SINT = 4,
    PSDB_FORMAT_R32G32B32_FLOAT = 6,
    PSDB_FORMAT_R16G16B16A16_FLOAT = 10,
    PSDB_FORMAT_R16G16B16A16_UNORM = 11,
    PSDB_FORMAT_R16G16B16A16_UINT = 12,
    PSDB_FORMAT_R16G16B16A16_SNORM = 13,
    PSDB_FORMAT_R16G16B16A16_SINT = 14,
    PSDB_FORMAT_R32G32_FLOAT = 16,
    PSDB_FORMAT_R32G32_UINT = 17,
    PSDB_FORMAT_R32G32_SINT = 18,
    PSDB_FORMAT_R10G10B10A2_UNORM = 24,
    PSDB_FORMAT_R10G10B10A2_UINT = 25,
    PSDB_FORMAT_R11G11B10_FLOAT = 26,
    PSDB_FORMAT_R8G8B8A8_UNORM = 28,
    PSDB_FORMAT_R8G8B8A8_UNORM_SRGB = 29,
    PSDB_FORMAT_R8G8B8A8_UINT = 30,
    PSDB_FORMAT_R8G8B8A8_SNORM = 31,
    PSDB_FORMAT_R8G8B8A8_SINT = 32,
    PSDB_FORMAT_R16G16_FLOAT = 34,
    PSDB_FORMAT_R16G16_UNORM = 35,
    PSDB_FORMAT_R16G16_UINT = 36,
    PSDB_FORMAT_R16G16_SNORM = 37,
    PSDB_FORMAT_R16G16_SINT = 38,
    PSDB_FORMAT_D32_FLOAT = 40,
    PSDB_FORMAT_R32_FLOAT = 41,
    PSDB_FORMAT_R32_UINT = 42,
    PSDB_FORMAT_R32_SINT = 43,
    PSDB_FORMAT_D24_UNORM_S8_UINT = 45,
    PSDB_FORMAT_R8G8_UNORM = 49,
    PSDB_FORMAT_R8G8_UINT = 50,
    PSDB_FORMAT_R8G8_SNORM = 51,
    PSDB_FORMAT_R8G8_SINT = 52,
    PSDB_FORMAT_R16_FLOAT = 54,
    PSDB_FORMAT_D16_UNORM = 55,
    PSDB_FORMAT_R16_UNORM = 56,
    PSDB_FORMAT_R16_UINT = 57,
    PSDB_FORMAT_R16_SNORM = 58,
    PSDB_FORMAT_R16_SINT = 59,
    PSDB_FORMAT_R8_UNORM = 61,
    PSDB_FORMAT_R8_UINT = 62,
    PSDB_FORMAT_R8_SNORM = 63,
    PSDB_FORMAT_R8_SINT = 64,
    PSDB_FORMAT_B8G8R8A8_UNORM = 87
} psdb_format;

typedef enum psdb_blend {
    PSDB_BLEND_ZERO = 1,
    PSDB_BLEND_ONE = 2,
    PSDB_BLEND_SRC_COLOR = 3,
    PSDB_BLEND_INV_SRC_COLOR = 4,
    PSDB_BLEND_SRC_ALPHA = 5,
    PSDB_BLEND_INV_SRC_ALPHA = 6,
    PSDB_BLEND_DEST_ALPHA = 7,
    PSDB_BLEND_INV_DEST_ALPHA = 8,
    PSDB_BLEND_DEST_COLOR = 9,
    PSDB_BLEND_INV_DEST_COLOR = 10,
    PSDB_BLEND_SRC_ALPHA_SAT = 11,
    PSDB_BLEND_BLEND_FACTOR = 14,
    PSDB_BLEND_INV_BLEND_FACTOR = 15
} psdb_blend;

typedef enum psdb_blend_op {
    PSDB_BLEND_OP_ADD = 1,
    PSDB_BLEND_OP_SUBTRACT = 2,
    PSDB_BLEND_OP_REV_SUBTRACT = 3,
    PSDB_BLEND_OP_MIN = 4,
    PSDB_BLEND_OP_MAX = 5
} psdb_blend_op;

#define PSDB_COLOR_WRITE_ENABLE_RED 1u
#define PSDB_COLOR_WRITE_ENABLE_GREEN 2u
#define PSDB_COLOR_WRITE_ENABLE_BLUE 4u
#define PSDB_COLOR_WRITE_ENABLE_ALPHA 8u
#define PSDB_COLOR_WRITE_ENABLE_ALL 15u

#define PSDB_MAX_RENDER_TARGETS 8

typedef struct psdb_render_target_blend_desc {
    int blend_enable;
    int logic_op_enable;
    uint32_t src_blend, dest_blend, blend_op;                   /* psdb_blend, psdb_blend_op */
    uint32_t src_blend_alpha, dest_blend_alpha, blend_op_alpha; /* psdb_blend, psdb_blend_op */
    uint32_t logic_op;
    uint32_t render_target_write_mask; /* PSDB_COLOR_WRITE_ENABLE_*; 0 reads as ALL */
} psdb_render_target_blend_desc;

typedef struct psdb_blend_desc {
    int alpha_to_coverage_enable;
    int independent_blend_enable; /* 0: render_target[0] applies to every target */
    psdb_render_target_blend_desc render_target[PSDB_MAX_RENDER_TARGETS];
} psdb_blend_desc;

typedef struct psdb_rasterizer_desc {
    uint32_t fill_mode; /* 0 or 3 solid, 2 wireframe */
    uint32_t cull_mode; /* 0 or 3 back, 1 none, 2 front */
    int front_counter_clockwise;
    int32_t depth_bias;
    float depth_bias_clamp, slope_scaled_depth_bias;
    int depth_clip_enable, multisample_enable, antialiased_line_enable;
    uint32_t forced_sample_count, conservative_raster;
} psdb_rasterizer_desc;

typedef struct psdb_depth_stencilop_desc {
    uint32_t stencil_fail_op, stencil_depth_fail_op, stencil_pass_op, stencil_func;
} psdb_depth_stencilop_desc;

typedef struct psdb_depth_stencil_desc {
    int depth_enable;
    uint32_t depth_write_mask, depth_func;
    int stencil_enable;
    uint32_t stencil_read_mask, stencil_write_mask;
    psdb_depth_stencilop_desc front_face, back_face;
} psdb_depth_stencil_desc;

typedef struct psdb_input_element_desc {
    const char *semantic_name;
    uint32_t semantic_index;
    uint32_t format; /* psdb_format */
    uint32_t input_slot, aligned_byte_offset, input_slot_class, instance_data_step_rate;
} psdb_input_element_desc;

typedef struct psdb_input_layout_desc {
    const psdb_input_element_desc *elements;
    uint32_t num_elements;
} psdb_input_layout_desc;

typedef struct psdb_so_declaration_entry {
    uint32_t stream;
    const char *semantic_name;
    uint32_t semantic_index;
    uint32_t start_component, component_count, output_slot;
} psdb_so_declaration_entry;

typedef struct psdb_stream_output_desc {
    const psdb_so_declaration_entry *entries;
    uint32_t num_entries;
    const uint32_t *buffer_strides;
    uint32_t num_strides;
    uint32_t rasterized_stream;
} psdb_stream_output_desc;

/* What the pixel shader writes to SV_TargetN (the model does not parse bytecode, so the
 * description says it). components == 0: the target is not written. */
#define PSDB_COMPONENT_FLOAT 0u
#define PSDB_COMPONENT_UINT 1u
#define PSDB_COMPONENT_SINT 2u
typedef struct psdb_ps_output {
    uint32_t components; /* 0-4 */
    uint32_t type;       /* PSDB_COMPONENT_* */
} psdb_ps_output;

/* Console-style hardware shader limits (a derived PSO may override them, MODEL V1). */
typedef struct psdb_shader_limits {
    uint32_t max_waves_per_cu; /* 0: no limit */
    uint32_t cu_enable_mask;   /* 0: all compute units */
} psdb_shader_limits;

/* ---- Pipelines (MODEL G1) ----------------------------------------------------------------------
 */
typedef struct psdb_compute_pipeline_desc {
    const void *root_signature; /* opaque, non-empty */
    size_t root_signature_size;
    psdb_shader cs;
    const psdb_session_subobject *psdb; /* NULL: omitted */
} psdb_compute_pipeline_desc;

typedef struct psdb_graphics_pipeline_desc {
    const void *root_signature; /* opaque, non-empty */
    size_t root_signature_size;
    psdb_shader vs, ps, ds, hs, gs; /* vs required */
    psdb_stream_output_desc stream_output;
    psdb_blend_desc blend;
    uint32_t sample_mask;
    psdb_rasterizer_desc rasterizer;
    psdb_depth_stencil_desc depth_stencil;
    psdb_input_layout_desc input_layout;
    uint32_t primitive_topology_type;
    uint32_t num_render_targets;                   /* 0-8 */
    uint32_t rtv_formats[PSDB_MAX_RENDER_TARGETS]; /* psdb_format */
    uint32_t dsv_format;                           /* psdb_format */
    uint32_t sample_count, sample_quality;
    psdb_ps_output ps_outputs[PSDB_MAX_RENDER_TARGETS];
    psdb_shader_limits shader_limits;
    const psdb_session_subobject *psdb; /* NULL: omitted */
} psdb_graphics_pipeline_desc;

/* A pipeline-state stream (CreatePipelineState): a list of typed subobjects. It describes a
 * compute pipeline when it has a CS subobject, a graphics pipeline otherwise. Each `data` points
 * to the type named in the comment. A type may appear once. */
typedef enum psdb_stream_subobject_type {
    PSDB_STREAM_ROOT_SIGNATURE = 0, /* psdb_shader (the root signature bytes) */
    PSDB_STREAM_VS = 1,             /* psdb_shader */
    PSDB_STREAM_PS = 2,
    PSDB_STREAM_DS = 3,
    PSDB_STREAM_HS = 4,
    PSDB_STREAM_GS = 5,
    PSDB_STREAM_CS = 6,
    PSDB_STREAM_STREAM_OUTPUT = 7,         /* psdb_stream_output_desc */
    PSDB_STREAM_BLEND = 8,                 /* psdb_blend_desc */
    PSDB_STREAM_SAMPLE_MASK = 9,           /* uint32_t */
    PSDB_STREAM_RASTERIZER = 10,           /* psdb_rasterizer_desc */
    PSDB_STREAM_DEPTH_STENCIL = 11,        /* psdb_depth_stencil_desc */
    PSDB_STREAM_INPUT_LAYOUT = 12,         /* psdb_input_layout_desc */
    PSDB_STREAM_PRIMITIVE_TOPOLOGY = 13,   /* uint32_t */
    PSDB_STREAM_RENDER_TARGETS = 14,       /* psdb_render_targets_desc */
    PSDB_STREAM_DEPTH_STENCIL_FORMAT = 15, /* uint32_t psdb_format */
    PSDB_STREAM_SAMPLE_DESC = 16,          /* uint32_t[2]: count, quality */
    PSDB_STREAM_PS_OUTPUTS = 17,           /* psdb_ps_output[8] */
    PSDB_STREAM_PSDB = 18                  /* psdb_session_subobject */
} psdb_stream_subobject_type;

typedef struct psdb_render_targets_desc {
    uint32_t num_render_targets;
    uint32_t rtv_formats[PSDB_MAX_RENDER_TARGETS];
} psdb_render_targets_desc;

typedef struct psdb_stream_subobject {
    uint32_t type; /* psdb_stream_subobject_type */
    const void *data;
} psdb_stream_subobject;

typedef struct psdb_pipeline_stream_desc {
    const psdb_stream_subobject *subobjects;
    uint32_t num_subobjects;
} psdb_pipeline_stream_desc;

/* ---- State objects (MODEL G3, G4) --------------------------------------------------------------
 */
typedef enum psdb_state_object_type {
    PSDB_STATE_OBJECT_COLLECTION = 0,
    PSDB_STATE_OBJECT_RAYTRACING_PIPELINE = 3,
    PSDB_STATE_OBJECT_EXECUTABLE = 5
} psdb_state_object_type;

typedef enum psdb_state_subobject_type {
    PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE = 1, /* psdb_shader (root signature bytes) */
    PSDB_SUBOBJECT_DXIL_LIBRARY = 5,          /* psdb_dxil_library_desc */
    PSDB_SUBOBJECT_EXISTING_COLLECTION = 6,   /* psdb_existing_collection_desc */
    PSDB_SUBOBJECT_HIT_GROUP = 11,            /* psdb_hit_group_desc */
    PSDB_SUBOBJECT_PSDB = 100                 /* psdb_session_subobject */
} psdb_state_subobject_type;

typedef struct psdb_dxil_library_desc {
    psdb_shader library;        /* the library bytecode */
    const char *const *exports; /* names of the shaders it exports */
    uint32_t num_exports;
} psdb_dxil_library_desc;

typedef struct psdb_existing_collection_desc {
    psdb_state_object *collection; /* keeps its own PSDB selection (G4) */
} psdb_existing_collection_desc;

typedef struct psdb_hit_group_desc {
    const char *name;
    const char *any_hit, *closest_hit, *intersection; /* export names, NULL when absent */
} psdb_hit_group_desc;

typedef struct psdb_state_subobject {
    uint32_t type; /* psdb_state_subobject_type */
    const void *desc;
} psdb_state_subobject;

typedef struct psdb_state_object_desc {
    uint32_t type; /* psdb_state_object_type */
    uint32_t num_subobjects;
    const psdb_state_subobject *subobjects;
} psdb_state_object_desc;

#ifdef __cplusplus
}
#endif
#endif
