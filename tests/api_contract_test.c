/* api_contract_test.c - the public names of the design's API page, redeclared exactly as the
 * page writes them: a renamed function, a changed argument type or order, a missing struct field
 * or status name fails to compile here. */
#include <psdb/psdb.h>

#include <stdio.h>

/* Function prototypes, verbatim (a redeclaration must be compatible with the header). */
const char *psdb_hr_str(psdb_hr hr);
psdb_hr psdb_installer_open(const psdb_installer_desc *desc, psdb_installer **out);
void psdb_installer_release(psdb_installer *inst);
psdb_hr psdb_installer_register_application(psdb_installer *inst, const char *exe_path,
                                            const psdb_app_desc *desc, psdb_application **out);
psdb_hr psdb_installer_remove_application(psdb_installer *inst, psdb_application *app);
psdb_hr psdb_application_register_component(psdb_application *app, const char *name,
                                            const char *sodb_path, uint32_t num_psdbs,
                                            const psdb_component_psdb *psdbs, psdb_component **out);
psdb_hr psdb_application_remove_component(psdb_application *app, psdb_component *component);
void psdb_application_release(psdb_application *app);
void psdb_component_release(psdb_component *component);
psdb_hr psdb_explorer_open(const char *root_dir, psdb_explorer **out);
psdb_hr psdb_explorer_get_application(psdb_explorer *exp, const char *exe_path,
                                      psdb_application **out);
void psdb_explorer_release(psdb_explorer *exp);
psdb_hr psdb_device_create(const psdb_device_desc *desc, psdb_device **out);
void psdb_device_release(psdb_device *dev);
psdb_hr psdb_device_check_feature_support(psdb_device *dev, psdb_feature f, void *data,
                                          size_t size);
psdb_hr psdb_device_open_session(psdb_device *dev, const psdb_session_desc *desc,
                                 psdb_session **out);
psdb_hr psdb_device_create_cache_session(psdb_device *dev, const psdb_cache_session_desc *desc,
                                         psdb_session **out);
psdb_hr psdb_session_find_value(psdb_session *s, const void *key, size_t key_size, void *value,
                                size_t *value_size);
psdb_hr psdb_session_store_value(psdb_session *s, const void *key, size_t key_size,
                                 const void *value, size_t value_size);
void psdb_session_addref(psdb_session *s);
void psdb_session_release(psdb_session *s);
psdb_hr psdb_session_on_destroy(psdb_session *s, void (*fn)(void *ctx), void *ctx);
psdb_hr psdb_device_set_default_session(psdb_device *dev, psdb_session *session, uint32_t flags);
psdb_hr psdb_device_create_compute_pipeline(psdb_device *dev,
                                            const psdb_compute_pipeline_desc *desc,
                                            psdb_pipeline **out);
psdb_hr psdb_device_create_graphics_pipeline(psdb_device *dev,
                                             const psdb_graphics_pipeline_desc *desc,
                                             psdb_pipeline **out);
psdb_hr psdb_device_create_pipeline_state(psdb_device *dev, const psdb_pipeline_stream_desc *desc,
                                          psdb_pipeline **out);
psdb_hr psdb_device_create_state_object(psdb_device *dev, const psdb_state_object_desc *desc,
                                        psdb_state_object **out);
psdb_hr psdb_device_add_to_state_object(psdb_device *dev, const psdb_state_object_desc *addition,
                                        psdb_state_object *base, psdb_state_object **out);
void psdb_pipeline_addref(psdb_pipeline *p);
void psdb_pipeline_release(psdb_pipeline *p);
void psdb_state_object_release(psdb_state_object *so);
psdb_hr psdb_device_set_lookup_callback(psdb_device *dev,
                                        void (*fn)(const psdb_lookup_event *ev, void *ctx),
                                        void *ctx);
psdb_hr psdb_pipeline_get_creation_info(const psdb_pipeline *p, psdb_creation_info *out);
psdb_hr psdb_pipeline_find_value(psdb_pipeline *p, const void *key, size_t key_size,
                                 uint32_t value_type, void *value, size_t *value_size);
psdb_hr psdb_device_shader_cache_control(psdb_device *dev, uint32_t kinds, uint32_t control);
psdb_hr psdb_device_get_statistics(psdb_device *dev, psdb_statistics *out);
psdb_hr psdb_device_set_message_callback(psdb_device *dev,
                                         void (*fn)(uint32_t severity, uint32_t id,
                                                    const char *text, void *ctx),
                                         void *ctx);
psdb_hr psdb_device_create_pipeline_library(psdb_device *dev, const void *blob, size_t size,
                                            psdb_pipeline_library **out);
psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                             psdb_pipeline *p);
size_t psdb_pipeline_library_get_serialized_size(psdb_pipeline_library *lib);
psdb_hr psdb_pipeline_library_serialize(psdb_pipeline_library *lib, void *data, size_t size);
psdb_hr psdb_pipeline_library_load_compute_pipeline(psdb_pipeline_library *lib, const char *name,
                                                    const psdb_compute_pipeline_desc *desc,
                                                    psdb_pipeline **out);
psdb_hr psdb_pipeline_library_load_graphics_pipeline(psdb_pipeline_library *lib, const char *name,
                                                     const psdb_graphics_pipeline_desc *desc,
                                                     psdb_pipeline **out);
psdb_hr psdb_pipeline_library_load_pipeline(psdb_pipeline_library *lib, const char *name,
                                            const psdb_pipeline_stream_desc *desc,
                                            psdb_pipeline **out);
void psdb_pipeline_library_release(psdb_pipeline_library *lib);
psdb_hr psdb_device_serialize_graphics_pipeline(psdb_device *dev, psdb_pipeline *p, uint32_t flags,
                                                psdb_serialized_graphics_pipeline *out);
psdb_hr psdb_device_deserialize_graphics_pipeline(
    psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *desc, psdb_pipeline **out);
psdb_hr psdb_device_create_derived_graphics_pipeline(psdb_device *dev, psdb_pipeline *base,
                                                     uint32_t count,
                                                     const psdb_derived_graphics_state_desc *descs,
                                                     psdb_pipeline **out);
psdb_hr psdb_device_create_queue(psdb_device *dev, uint32_t num_workers, psdb_queue **out);
psdb_hr psdb_queue_create_compute_pipeline(psdb_queue *q, const psdb_compute_pipeline_desc *desc,
                                           void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx),
                                           void *ctx);
psdb_hr psdb_queue_create_graphics_pipeline(psdb_queue *q, const psdb_graphics_pipeline_desc *desc,
                                            void (*done)(psdb_hr hr, psdb_pipeline *p, void *ctx),
                                            void *ctx);
psdb_hr psdb_queue_read_statistics(psdb_queue *q, uint32_t flags, psdb_statistics *out);
psdb_hr psdb_queue_write_statistics(psdb_queue *q, uint32_t flags, const psdb_statistics *values);
psdb_hr psdb_queue_wait_idle(psdb_queue *q);
void psdb_queue_release(psdb_queue *q);

/* Struct fields and names used with designated initializers, as the page lists them. */
static int use_structs(void)
{
    psdb_app_desc app = {.exe_filename = "g.exe",
                         .name = "G",
                         .version = PSDB_VERSION(1, 0, 0, 0),
                         .engine_name = NULL,
                         .engine_version = 0};
    psdb_app_identity id = {.desc = app, .app_id = {0}};
    psdb_adapter_desc ad = {.vendor_id = 1,
                            .device_id = 2,
                            .family = "f",
                            .abi_min = 1,
                            .abi_max = 2,
                            .compiler_version = 0,
                            .app_profile_version = 0,
                            .driver_build = 0,
                            .flags = PSDB_ADAPTER_FLAG_NO_ASD | PSDB_ADAPTER_FLAG_NO_LIBRARY};
    psdb_installer_desc inst = {.name = "n", .scope = PSDB_SCOPE_USER, .root_dir = NULL};
    psdb_component_psdb cp = {.adapter_family = "f", .psdb_path = "p"};
    psdb_device_desc dd = {.adapter = ad,
                           .identity = &id,
                           .exe_path = NULL,
                           .registry_dir = NULL,
                           .capture_sodb_path = NULL,
                           .flags = PSDB_DEVICE_FLAG_TOOLS};
    psdb_session_desc sd = {.psdb_path = "p", .component = NULL};
    psdb_cache_session_desc cd = {.identifier = {0},
                                  .mode = PSDB_CACHE_MODE_MEMORY,
                                  .flags = 0,
                                  .max_in_memory_size_bytes = 0,
                                  .max_in_memory_entries = 0,
                                  .max_value_file_size_bytes = 0,
                                  .version = 0};
    psdb_session_subobject sub = {.session = NULL,
                                  .flags = PSDB_SESSION_FLAG_NONE | PSDB_SESSION_FLAG_CREATE_ONLY};
    psdb_shader sh = {.code = "x", .size = 1};
    psdb_compute_pipeline_desc cpd = {
        .root_signature = "r", .root_signature_size = 1, .cs = sh, .psdb = &sub};
    psdb_graphics_pipeline_desc gpd = {.root_signature = "r",
                                       .root_signature_size = 1,
                                       .vs = sh,
                                       .ps = sh,
                                       .ds = {0},
                                       .hs = {0},
                                       .gs = {0},
                                       .sample_mask = 0xFFFFFFFFu,
                                       .num_render_targets = 1,
                                       .rtv_formats = {PSDB_FORMAT_R8G8B8A8_UNORM},
                                       .dsv_format = PSDB_FORMAT_UNKNOWN,
                                       .psdb = NULL};
    gpd.blend.alpha_to_coverage_enable = 0;
    gpd.blend.independent_blend_enable = 0;
    gpd.blend.render_target[0].blend_enable = 1;
    gpd.blend.render_target[0].src_blend = PSDB_BLEND_SRC_ALPHA;
    gpd.blend.render_target[0].dest_blend = PSDB_BLEND_ONE;
    gpd.blend.render_target[0].blend_op = PSDB_BLEND_OP_ADD;
    gpd.blend.render_target[0].src_blend_alpha = PSDB_BLEND_ONE;
    gpd.blend.render_target[0].dest_blend_alpha = PSDB_BLEND_ZERO;
    gpd.blend.render_target[0].blend_op_alpha = PSDB_BLEND_OP_ADD;
    gpd.blend.render_target[0].render_target_write_mask =
        PSDB_COLOR_WRITE_ENABLE_RED | PSDB_COLOR_WRITE_ENABLE_ALL;
    gpd.rtv_formats[1] = PSDB_FORMAT_R16G16B16A16_UNORM;
    gpd.rtv_formats[2] = PSDB_FORMAT_R16G16B16A16_FLOAT;
    gpd.rtv_formats[3] = PSDB_FORMAT_R32G32_FLOAT;
    gpd.rtv_formats[4] = PSDB_FORMAT_R32G32B32A32_FLOAT;
    gpd.ps_outputs[0].components = 4;
    gpd.ps_outputs[0].type = PSDB_COMPONENT_FLOAT;
    gpd.ps_outputs[1].type = PSDB_COMPONENT_UINT;
    gpd.ps_outputs[2].type = PSDB_COMPONENT_SINT;
    psdb_lookup_event ev = {.operation_id = 1,
                            .session = NULL,
                            .value_type = PSDB_VALUE_OBJECT_CODE,
                            .query = PSDB_QUERY_SIZE,
                            .key = NULL,
                            .key_size = 0,
                            .result = PSDB_S_OK};
    ev.value_type = PSDB_VALUE_METADATA + PSDB_VALUE_DEBUG_PDB + PSDB_VALUE_PERFORMANCE_DATA;
    ev.query = PSDB_QUERY_DATA;
    psdb_creation_info ci = {.operation_id = 1,
                             .selection = PSDB_SELECTION_NONE,
                             .flags = 0,
                             .lookups = 0,
                             .hits = 0,
                             .psdb_hit = 0};
    ci.selection =
        PSDB_SELECTION_PER_OBJECT + PSDB_SELECTION_DEVICE_DEFAULT + PSDB_SELECTION_IMPLICIT_DEFAULT;
    psdb_creation_statistics cs = {.num_created = 0,
                                   .num_psdb_cache_missed = 0,
                                   .num_total_cache_missed = 0,
                                   .num_cache_unknown = 0};
    psdb_statistics st = {.default_psdb_registered = 0, .pipeline_states = cs, .state_objects = cs};
    psdb_derived_graphics_state_desc dg = {.type = PSDB_DERIVED_STATE_BLEND, .sample_mask = 1};
    dg.depth_stencil = gpd.depth_stencil;
    dg.rasterizer = gpd.rasterizer;
    dg.blend = gpd.blend;
    dg.type = PSDB_DERIVED_STATE_DEPTH_STENCIL + PSDB_DERIVED_STATE_RASTERIZER +
              PSDB_DERIVED_STATE_SAMPLE_MASK + PSDB_DERIVED_STATE_SHADER_LIMITS;
    psdb_shader_limits lim = dg.shader_limits;
    (void)lim;
    uint32_t kinds = PSDB_CACHE_KIND_PRECOMPILED, control = PSDB_CACHE_CONTROL_DISABLE |
                                                            PSDB_CACHE_CONTROL_ENABLE |
                                                            PSDB_CACHE_CONTROL_CLEAR;
    uint32_t counters = PSDB_COUNTER_DEFAULT | PSDB_COUNTER_READ_AT_EOS | PSDB_COUNTER_READ_AT_TOP |
                        PSDB_COUNTER_WRITE_COPY_DATA | PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER |
                        PSDB_COUNTER_COMPUTE;
    psdb_feature f = PSDB_FEATURE_SHADER_CACHE;
    f = PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT;
    f = PSDB_FEATURE_EXPLICIT_PSDBS;
    psdb_scope sc = PSDB_SCOPE_SYSTEM;
    uint32_t mode = PSDB_CACHE_MODE_DISK;
    return (int)(inst.scope + cp.adapter_family[0] + dd.flags + (sd.psdb_path != NULL) + cd.mode +
                 cpd.cs.size + gpd.vs.size + ev.query + ci.selection + st.default_psdb_registered +
                 dg.type + kinds + control + counters + (uint32_t)f + (uint32_t)sc + mode) &
           0;
}

int main(void)
{
    const psdb_hr codes[] = {PSDB_S_OK,
                             PSDB_S_FALSE,
                             PSDB_E_INVALIDARG,
                             PSDB_E_OUTOFMEMORY,
                             PSDB_E_FAIL,
                             PSDB_E_NOTIMPL,
                             PSDB_E_ADAPTER_NOT_FOUND,
                             PSDB_E_DRIVER_VERSION_MISMATCH,
                             PSDB_E_NOT_FOUND,
                             PSDB_E_MORE_DATA,
                             PSDB_E_UNSUPPORTED,
                             PSDB_E_NOT_CURRENTLY_AVAILABLE,
                             PSDB_E_CACHE_CORRUPT,
                             PSDB_E_CACHE_FULL,
                             PSDB_E_CACHE_HASH_COLLISION,
                             PSDB_E_ALREADY_EXISTS};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (PSDB_FAILED(codes[i]) == PSDB_SUCCEEDED(codes[i]) || psdb_hr_str(codes[i]) == NULL) {
            fprintf(stderr, "status %zu broken\n", i);
            return 1;
        }
    if (PSDB_VERSION(1, 2, 3, 4) != 0x0001000200030004ull)
        return 1;
    /* Every function of the page links from the shared library. */
    const void *fns[] = {
        (const void *)psdb_hr_str,
        (const void *)psdb_installer_open,
        (const void *)psdb_installer_release,
        (const void *)psdb_installer_register_application,
        (const void *)psdb_installer_remove_application,
        (const void *)psdb_application_register_component,
        (const void *)psdb_application_remove_component,
        (const void *)psdb_application_release,
        (const void *)psdb_component_release,
        (const void *)psdb_explorer_open,
        (const void *)psdb_explorer_get_application,
        (const void *)psdb_explorer_release,
        (const void *)psdb_device_create,
        (const void *)psdb_device_release,
        (const void *)psdb_device_check_feature_support,
        (const void *)psdb_device_open_session,
        (const void *)psdb_device_create_cache_session,
        (const void *)psdb_session_find_value,
        (const void *)psdb_session_store_value,
        (const void *)psdb_session_addref,
        (const void *)psdb_session_release,
        (const void *)psdb_session_on_destroy,
        (const void *)psdb_device_set_default_session,
        (const void *)psdb_device_create_compute_pipeline,
        (const void *)psdb_device_create_graphics_pipeline,
        (const void *)psdb_device_create_pipeline_state,
        (const void *)psdb_device_create_state_object,
        (const void *)psdb_device_add_to_state_object,
        (const void *)psdb_pipeline_addref,
        (const void *)psdb_pipeline_release,
        (const void *)psdb_state_object_release,
        (const void *)psdb_device_set_lookup_callback,
        (const void *)psdb_pipeline_get_creation_info,
        (const void *)psdb_pipeline_find_value,
        (const void *)psdb_device_shader_cache_control,
        (const void *)psdb_device_get_statistics,
        (const void *)psdb_device_set_message_callback,
        (const void *)psdb_device_create_pipeline_library,
        (const void *)psdb_pipeline_library_store_pipeline,
        (const void *)psdb_pipeline_library_get_serialized_size,
        (const void *)psdb_pipeline_library_serialize,
        (const void *)psdb_pipeline_library_load_compute_pipeline,
        (const void *)psdb_pipeline_library_load_graphics_pipeline,
        (const void *)psdb_pipeline_library_load_pipeline,
        (const void *)psdb_pipeline_library_release,
        (const void *)psdb_device_serialize_graphics_pipeline,
        (const void *)psdb_device_deserialize_graphics_pipeline,
        (const void *)psdb_device_create_derived_graphics_pipeline,
        (const void *)psdb_device_create_queue,
        (const void *)psdb_queue_create_compute_pipeline,
        (const void *)psdb_queue_create_graphics_pipeline,
        (const void *)psdb_queue_read_statistics,
        (const void *)psdb_queue_write_statistics,
        (const void *)psdb_queue_wait_idle,
        (const void *)psdb_queue_release,
    };
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        if (!fns[i])
            return 1;
    return use_structs();
}
