/* psdb/device.h - the device: features, PSDB sessions, the device-wide default, creation and
 * lookups, statistics, pipeline library, serialized / derived PSOs, the async queue. */
#ifndef PSDB_DEVICE_H
#define PSDB_DEVICE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Device (MODEL A) -------------------------------------------------------------------------- */
#define PSDB_DEVICE_FLAG_TOOLS 0x1u /* a tools device: may serialize PSOs (MODEL X1) */

typedef struct psdb_device_desc {
    psdb_adapter_desc adapter;
    const psdb_app_identity *identity; /* NULL: none (explicit PSDBs unsupported) */
    const char *exe_path;              /* key of the implicit default; NULL: none */
    const char *registry_dir;          /* registry root; NULL: the default USER root */
    const char *capture_sodb_path;     /* record every creation description; NULL: off */
    uint32_t flags;                    /* PSDB_DEVICE_FLAG_* */
    /* Simulated local compile cost, nanoseconds per KiB of bytecode. 0: the reference compiler's
     * default (PSDB_COMPILE_NS_PER_KIB_DEFAULT); UINT64_MAX: no cost. */
    uint64_t compile_ns_per_kib;
    /* Directory of application-managed disk caches (psdb_device_create_cache_session). NULL:
     * $PSDB_CACHE_DIR, else $XDG_CACHE_HOME/psdb, else $HOME/.cache/psdb. */
    const char *cache_dir;
} psdb_device_desc;

PSDB_API psdb_hr psdb_device_create(const psdb_device_desc *desc, psdb_device **out);
PSDB_API void psdb_device_release(psdb_device *dev);

typedef enum psdb_feature {
    PSDB_FEATURE_SHADER_CACHE,
    PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT,
    PSDB_FEATURE_EXPLICIT_PSDBS
} psdb_feature;

#define PSDB_SHADER_CACHE_SUPPORT_SINGLE_PSO 0x1u
#define PSDB_SHADER_CACHE_SUPPORT_LIBRARY 0x2u
#define PSDB_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE 0x4u
#define PSDB_SHADER_CACHE_SUPPORT_AUTOMATIC_DISK_CACHE 0x8u

typedef struct psdb_feature_data_shader_cache {
    uint32_t support_flags;
} psdb_feature_data_shader_cache;

typedef struct psdb_feature_data_shader_cache_abi_support {
    char adapter_family[PSDB_ADAPTER_FAMILY_MAX];
    uint64_t minimum_abi_supported_version, maximum_abi_supported_version;
    uint64_t compiler_version, application_profile_version;
} psdb_feature_data_shader_cache_abi_support;

typedef struct psdb_feature_data_explicit_psdbs {
    int supported;
} psdb_feature_data_explicit_psdbs;

PSDB_API psdb_hr psdb_device_check_feature_support(psdb_device *dev, psdb_feature f, void *data,
                                                   size_t size);

/* ---- Sessions (MODEL D) ------------------------------------------------------------------------ */
typedef struct psdb_session_desc {
    const char *psdb_path; /* exactly one of psdb_path and component */
    const char *component; /* registered component of the device's exe path */
} psdb_session_desc;

PSDB_API psdb_hr psdb_device_open_session(psdb_device *dev, const psdb_session_desc *desc,
                                          psdb_session **out);

#define PSDB_CACHE_MODE_MEMORY 0u
#define PSDB_CACHE_MODE_DISK 1u
#define PSDB_CACHE_FLAG_NONE 0x0u
#define PSDB_CACHE_FLAG_DRIVER_VERSIONED 0x1u /* one store per adapter family and driver build */
#define PSDB_CACHE_FLAG_USE_WORKING_DIR 0x2u  /* disk store in the current directory */
typedef struct psdb_cache_session_desc {
    uint8_t identifier[16];
    uint32_t mode; /* PSDB_CACHE_MODE_* */
    uint32_t flags;
    uint32_t max_in_memory_size_bytes, max_in_memory_entries, max_value_file_size_bytes;
    uint64_t version;
} psdb_cache_session_desc;

PSDB_API psdb_hr psdb_device_create_cache_session(psdb_device *dev,
                                                  const psdb_cache_session_desc *desc,
                                                  psdb_session **out);
PSDB_API psdb_hr psdb_session_find_value(psdb_session *s, const void *key, size_t key_size,
                                         void *value, size_t *value_size);
PSDB_API psdb_hr psdb_session_store_value(psdb_session *s, const void *key, size_t key_size,
                                          const void *value, size_t value_size);
PSDB_API void psdb_session_addref(psdb_session *s);
PSDB_API void psdb_session_release(psdb_session *s);
PSDB_API psdb_hr psdb_session_on_destroy(psdb_session *s, void (*fn)(void *ctx), void *ctx);

/* ---- The device-wide default (MODEL E, H) ------------------------------------------------------ */
PSDB_API psdb_hr psdb_device_set_default_session(psdb_device *dev, psdb_session *session,
                                                 uint32_t flags);

/* ---- Creation (MODEL F, G, I) ------------------------------------------------------------------ */
PSDB_API psdb_hr psdb_device_create_compute_pipeline(psdb_device *dev,
                                                     const psdb_compute_pipeline_desc *desc,
                                                     psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_graphics_pipeline(psdb_device *dev,
                                                      const psdb_graphics_pipeline_desc *desc,
                                                      psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_pipeline_state(psdb_device *dev,
                                                   const psdb_pipeline_stream_desc *desc,
                                                   psdb_pipeline **out);
PSDB_API psdb_hr psdb_device_create_state_object(psdb_device *dev,
                                                 const psdb_state_object_desc *desc,
                                                 psdb_state_object **out);
PSDB_API psdb_hr psdb_device_add_to_state_object(psdb_device *dev,
                                                 const psdb_state_object_desc *addition,
                                                 psdb_state_object *base, psdb_state_object **out);
PSDB_API void psdb_pipeline_addref(psdb_pipeline *p);
PSDB_API void psdb_pipeline_release(psdb_pipeline *p);
PSDB_API void psdb_state_object_release(psdb_state_object *so);

/* ---- Lookups, creation info (MODEL F5-F7, I3, I4) ---------------------------------------------- */
#define PSDB_QUERY_SIZE 0u
#define PSDB_QUERY_DATA 1u

/* One event per PSDB lookup; no event when no PSDB is selected. */
typedef struct psdb_lookup_event {
    uint64_t operation_id; /* same id for every lookup of one creation or object-associated lookup */
    psdb_session *session; /* the PSDB searched (borrowed for the callback's duration) */
    uint32_t value_type;   /* PSDB_VALUE_* */
    uint32_t query;        /* PSDB_QUERY_SIZE or PSDB_QUERY_DATA */
    const void *key;
    size_t key_size;
    psdb_hr result; /* S_OK hit, PSDB_E_NOT_FOUND miss, or the error met */
} psdb_lookup_event;

PSDB_API psdb_hr psdb_device_set_lookup_callback(psdb_device *dev,
                                                 void (*fn)(const psdb_lookup_event *ev, void *ctx),
                                                 void *ctx);

#define PSDB_SELECTION_NONE 0u
#define PSDB_SELECTION_PER_OBJECT 1u
#define PSDB_SELECTION_DEVICE_DEFAULT 2u
#define PSDB_SELECTION_IMPLICIT_DEFAULT 3u

typedef struct psdb_creation_info {
    uint64_t operation_id;
    uint32_t selection; /* PSDB_SELECTION_* */
    uint32_t flags;     /* the selection's PSDB_SESSION_FLAG_* */
    uint32_t lookups, hits;
    int psdb_hit; /* every required value found */
} psdb_creation_info;

PSDB_API psdb_hr psdb_pipeline_get_creation_info(const psdb_pipeline *p, psdb_creation_info *out);
PSDB_API psdb_hr psdb_state_object_get_creation_info(const psdb_state_object *so,
                                                     psdb_creation_info *out);
/* An object-associated lookup made after creation (I3, I4). */
PSDB_API psdb_hr psdb_pipeline_find_value(psdb_pipeline *p, const void *key, size_t key_size,
                                          uint32_t value_type, void *value, size_t *value_size);
PSDB_API psdb_hr psdb_state_object_find_value(psdb_state_object *so, const void *key,
                                              size_t key_size, uint32_t value_type, void *value,
                                              size_t *value_size);

/* ---- ShaderCacheControl (MODEL J2) ------------------------------------------------------------- */
#define PSDB_CACHE_KIND_IMPLICIT 0x1u     /* the local driver cache */
#define PSDB_CACHE_KIND_APPLICATION 0x2u  /* application-managed cache sessions */
#define PSDB_CACHE_KIND_PRECOMPILED 0x4u  /* PSDB lookups */
#define PSDB_CACHE_CONTROL_DISABLE 0x1u
#define PSDB_CACHE_CONTROL_ENABLE 0x2u
#define PSDB_CACHE_CONTROL_CLEAR 0x4u
PSDB_API psdb_hr psdb_device_shader_cache_control(psdb_device *dev, uint32_t kinds,
                                                  uint32_t control);

/* ---- Statistics (MODEL K1) --------------------------------------------------------------------- */
typedef struct psdb_creation_statistics {
    uint32_t num_created, num_psdb_cache_missed, num_total_cache_missed, num_cache_unknown;
} psdb_creation_statistics;

typedef struct psdb_statistics {
    int default_psdb_registered;
    psdb_creation_statistics pipeline_states, state_objects;
} psdb_statistics;

PSDB_API psdb_hr psdb_device_get_statistics(psdb_device *dev, psdb_statistics *out);
PSDB_API uint32_t psdb_device_get_local_compile_count(psdb_device *dev);

#define PSDB_MESSAGE_SEVERITY_ERROR 1u
#define PSDB_MESSAGE_SEVERITY_WARNING 2u
#define PSDB_MESSAGE_SEVERITY_INFO 3u
PSDB_API psdb_hr psdb_device_set_message_callback(psdb_device *dev,
                                                  void (*fn)(uint32_t severity, uint32_t id,
                                                             const char *text, void *ctx),
                                                  void *ctx);

/* ---- Pipeline library (MODEL L, G2) ------------------------------------------------------------ */
PSDB_API psdb_hr psdb_device_create_pipeline_library(psdb_device *dev, const void *blob,
                                                     size_t size, psdb_pipeline_library **out);
PSDB_API psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                                      psdb_pipeline *p);
PSDB_API size_t psdb_pipeline_library_get_serialized_size(psdb_pipeline_library *lib);
PSDB_API psdb_hr psdb_pipeline_library_serialize(psdb_pipeline_library *lib, void *data,
                                                 size_t size);
PSDB_API psdb_hr psdb_pipeline_library_load_compute_pipeline(psdb_pipeline_library *lib,
                                                             const char *name,
                                                             const psdb_compute_pipeline_desc *desc,
                                                             psdb_pipeline **out);
PSDB_API psdb_hr psdb_pipeline_library_load_graphics_pipeline(
    psdb_pipeline_library *lib, const char *name, const psdb_graphics_pipeline_desc *desc,
    psdb_pipeline **out);
PSDB_API psdb_hr psdb_pipeline_library_load_pipeline(psdb_pipeline_library *lib, const char *name,
                                                     const psdb_pipeline_stream_desc *desc,
                                                     psdb_pipeline **out);
PSDB_API void psdb_pipeline_library_release(psdb_pipeline_library *lib);

/* ---- Serialized PSOs (MODEL X) ----------------------------------------------------------------- */
typedef struct psdb_serialized_shader {
    const void *gpu_instructions;
    size_t gpu_instructions_size;
    const void *metadata;
    size_t metadata_size;
} psdb_serialized_shader;

/* Blobs are owned by the tools device that serialized them (deduplicated across all its
 * serialized PSOs) and stay valid until psdb_device_release(). */
typedef struct psdb_serialized_graphics_pipeline {
    const void *packet;
    size_t packet_size;
    const void *metadata;
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_serialized_graphics_pipeline;

typedef struct psdb_deserialize_graphics_pipeline_desc {
    const void *root_signature;
    size_t root_signature_size;
    const void *packet;
    size_t packet_size;
    const void *metadata;
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_deserialize_graphics_pipeline_desc;

PSDB_API psdb_hr psdb_device_serialize_graphics_pipeline(psdb_device *dev, psdb_pipeline *p,
                                                         uint32_t flags,
                                                         psdb_serialized_graphics_pipeline *out);
PSDB_API psdb_hr psdb_device_deserialize_graphics_pipeline(
    psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *desc, psdb_pipeline **out);

/* ---- Derived PSOs (MODEL V) -------------------------------------------------------------------- */
#define PSDB_DERIVED_STATE_DEPTH_STENCIL 0u
#define PSDB_DERIVED_STATE_RASTERIZER 1u
#define PSDB_DERIVED_STATE_BLEND 2u
#define PSDB_DERIVED_STATE_SAMPLE_MASK 3u
#define PSDB_DERIVED_STATE_SHADER_LIMITS 4u

typedef struct psdb_derived_graphics_state_desc {
    uint32_t type; /* PSDB_DERIVED_STATE_*; the member named by type is used */
    psdb_depth_stencil_desc depth_stencil;
    psdb_rasterizer_desc rasterizer;
    psdb_blend_desc blend;
    uint32_t sample_mask;
    psdb_shader_limits shader_limits;
} psdb_derived_graphics_state_desc;

PSDB_API psdb_hr psdb_device_create_derived_graphics_pipeline(
    psdb_device *dev, psdb_pipeline *base, uint32_t count,
    const psdb_derived_graphics_state_desc *descs, psdb_pipeline **out);

/* ---- Async creation queue and counters (MODEL Q) ----------------------------------------------- */
#define PSDB_COUNTER_DEFAULT 0x0u
#define PSDB_COUNTER_READ_AT_EOS 0x1u
#define PSDB_COUNTER_READ_AT_TOP 0x2u
#define PSDB_COUNTER_WRITE_COPY_DATA 0x4u
#define PSDB_COUNTER_WRITE_USE_DATA_BY_POINTER 0x8u
#define PSDB_COUNTER_COMPUTE 0x10u

PSDB_API psdb_hr psdb_device_create_queue(psdb_device *dev, uint32_t num_workers, psdb_queue **out);
PSDB_API psdb_hr psdb_queue_create_compute_pipeline(psdb_queue *q,
                                                    const psdb_compute_pipeline_desc *desc,
                                                    void (*done)(psdb_hr hr, psdb_pipeline *p,
                                                                 void *ctx),
                                                    void *ctx);
PSDB_API psdb_hr psdb_queue_create_graphics_pipeline(psdb_queue *q,
                                                     const psdb_graphics_pipeline_desc *desc,
                                                     void (*done)(psdb_hr hr, psdb_pipeline *p,
                                                                  void *ctx),
                                                     void *ctx);
PSDB_API psdb_hr psdb_queue_read_statistics(psdb_queue *q, uint32_t flags, psdb_statistics *out);
PSDB_API psdb_hr psdb_queue_write_statistics(psdb_queue *q, uint32_t flags,
                                             const psdb_statistics *values);
PSDB_API psdb_hr psdb_queue_wait_idle(psdb_queue *q);
PSDB_API void psdb_queue_release(psdb_queue *q);

#ifdef __cplusplus
}
#endif
#endif
