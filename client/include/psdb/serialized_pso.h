/* psdb/serialized_pso.h - serialized graphics PSOs: serialize on a tools device, deserialize
 * anywhere (MODEL X). Part of psdb/device.h (which includes it); may be included alone. */
#ifndef PSDB_SERIALIZED_PSO_H
#define PSDB_SERIALIZED_PSO_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Serialized PSOs (MODEL X) -----------------------------------------------------------------
 * Format: schema/SERIALIZED_PSO.md. */
typedef struct psdb_serialized_shader {
    const void *gpu_instructions; /* the stage's compiled code */
    size_t gpu_instructions_size;
    const void *metadata; /* structure version, unit key, compiler metadata, PIX shader info */
    size_t metadata_size;
} psdb_serialized_shader;

/* Blobs are owned by the tools device that serialized them (deduplicated across all its
 * serialized PSOs, X3: identical bytes are one blob at one address) and stay valid until the
 * device is released. Absent stages are {NULL, 0, NULL, 0}. */
typedef struct psdb_serialized_graphics_pipeline {
    const void *packet; /* the compiled pipeline state */
    size_t packet_size;
    const void *metadata; /* CRC32, version, validation data, compact creation arguments, input
                           * layout, stream output */
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_serialized_graphics_pipeline;

typedef struct psdb_deserialize_graphics_pipeline_desc {
    const void *root_signature; /* must be the serialized PSO's root signature */
    size_t root_signature_size;
    const void *packet;
    size_t packet_size;
    const void *metadata;
    size_t metadata_size;
    psdb_serialized_shader vs, ps, ds, hs, gs;
} psdb_deserialize_graphics_pipeline_desc;

#define PSDB_SERIALIZE_FLAG_NONE 0x0u

/* SerializeGraphicsPipelineStateX (X1-X3): fills *out with blobs owned by dev. Only a tools device
 * (PSDB_DEVICE_FLAG_TOOLS) serializes: a retail device returns PSDB_E_UNSUPPORTED (X1). A PSO that
 * was deserialized (or derived from one) lost what serialization needs: PSDB_E_INVALIDARG and an
 * error message PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED through the message callback (X5).
 * PSDB_E_INVALIDARG also for NULL arguments, flags other than NONE, a compute PSO or a PSO of
 * another device; PSDB_E_OUTOFMEMORY. On failure *out is zeroed. Thread-safe. */
PSDB_API psdb_hr psdb_device_serialize_graphics_pipeline(psdb_device *dev, psdb_pipeline *p,
                                                         uint32_t flags,
                                                         psdb_serialized_graphics_pipeline *out);
/* DeserializeGraphicsPipelineStateX (X4): checks the metadata in this order: too short or wrong
 * magic -> PSDB_E_INVALIDARG; another structure version -> PSDB_E_DRIVER_VERSION_MISMATCH; vendor
 * or device id not this adapter's -> PSDB_E_ADAPTER_NOT_FOUND; driver build, ABI or compiler
 * version not this driver's -> PSDB_E_DRIVER_VERSION_MISMATCH; CRC32 mismatch over the packet,
 * metadata and stage blobs, malformed content, a root signature other than the serialized one, a
 * stage present in one and absent in the other, a stage blob that is not the serialized one ->
 * PSDB_E_INVALIDARG. Any device (retail or tools) deserializes. The PSO is working: it can be
 * derived from and reports creation info (selection NONE: deserialization compiles nothing and
 * looks nothing up). The caller's blobs are not referenced after the call.
 * PSDB_E_INVALIDARG also for NULL arguments; PSDB_E_OUTOFMEMORY. *out is the caller's.
 * Thread-safe. */
PSDB_API psdb_hr psdb_device_deserialize_graphics_pipeline(
    psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *desc, psdb_pipeline **out);

#ifdef __cplusplus
}
#endif
#endif
