/* psdb/pipeline_library.h - the pipeline library: named PSOs sharing compile units, serialized as
 * one blob (MODEL L, G2). Part of psdb/device.h (which includes it); may be included alone. */
#ifndef PSDB_PIPELINE_LIBRARY_H
#define PSDB_PIPELINE_LIBRARY_H

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Pipeline library (MODEL L, G2) ------------------------------------------------------------
 * A library holds named PSOs; PSOs with identical sub-components (compile units: shader stages,
 * pipeline state) share them, in memory and in the serialized blob (L8). The blob format is
 * schema/PIPELINE_LIBRARY.md.
 * Thread safety (L9): every function may be called from several threads on one library; the
 * library synchronizes internally. The seed asks callers to synchronize loads of the SAME name;
 * this implementation tolerates them (both callers get one and the same PSO). */

/* Message ids of the validation messages of this section (psdb_device_set_message_callback). */
#define PSDB_MESSAGE_ID_DERIVED_EXPORT_MISMATCH 0x0201u /* V4 */
#define PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED 0x0202u  /* X5 */

/* CreatePipelineLibrary. size 0: an empty library (blob may be NULL). Otherwise the blob is
 * validated, parsed, and its pointer kept: it is NOT copied and must outlive the library (L2).
 * out NULL: validate only, PSDB_S_FALSE when the library would have been created (L4).
 * Validation order (L3): size < 96 bytes or wrong magic -> PSDB_E_INVALIDARG (unrecognized);
 * another format version -> PSDB_E_DRIVER_VERSION_MISMATCH (an older or newer runtime); wrong
 * header size or total size -> PSDB_E_INVALIDARG; vendor or device id not this adapter's ->
 * PSDB_E_ADAPTER_NOT_FOUND; driver build, ABI version or compiler version not this driver's ->
 * PSDB_E_DRIVER_VERSION_MISMATCH; anything else wrong (checksums, reserved bytes, a table past the
 * end, offsets out of range, duplicate names or units, unknown kinds) -> PSDB_E_INVALIDARG.
 * Other statuses: PSDB_E_INVALIDARG for NULL dev or a NULL blob with size > 0; PSDB_E_UNSUPPORTED
 * when the adapter has no library support (PSDB_ADAPTER_FLAG_NO_LIBRARY, L1; checked first);
 * PSDB_E_OUTOFMEMORY. *out is the caller's (psdb_pipeline_library_release). Thread-safe. */
PSDB_API psdb_hr psdb_device_create_pipeline_library(psdb_device *dev, const void *blob,
                                                     size_t size, psdb_pipeline_library **out);
/* StorePipeline (L5): adds p under name (a non-empty UTF-8 string, copied). The library keeps a
 * reference to p: a later load of that name returns p itself, with its original selection (G2).
 * Compute and graphics PSOs made by creation, by a load or by derivation can be stored.
 * PSDB_E_INVALIDARG: NULL or empty name, NULL lib or p, a PSO of another device, a name already
 * present (no overwrite), a deserialized PSO or one derived from it (its description is only the
 * compact form, without bytecode). PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                                      psdb_pipeline *p);
/* GetSerializedSize: the bytes psdb_pipeline_library_serialize writes now (0 for NULL). A store
 * made between this call and serialize may make the buffer too small. Thread-safe. */
PSDB_API size_t psdb_pipeline_library_get_serialized_size(psdb_pipeline_library *lib);
/* Serialize (L6): writes the whole library as one contiguous blob of GetSerializedSize bytes at
 * data (bytes past it are untouched). data may be the blob the library was created from.
 * PSDB_E_INVALIDARG: NULL lib or data, size smaller than the serialized size;
 * PSDB_E_OUTOFMEMORY. The blob is valid for devices with the same vendor and device ids, driver
 * build, ABI and compiler versions. Thread-safe. */
PSDB_API psdb_hr psdb_pipeline_library_serialize(psdb_pipeline_library *lib, void *data,
                                                 size_t size);
/* LoadComputePipeline / LoadGraphicsPipeline / LoadPipeline (L7, G2): the PSO stored under name,
 * whose description must match desc (the same encoded description: every byte of bytecode and
 * state; the PSDB subobject is not part of it). When the entry already has a PSO (stored, or
 * created by an earlier load) that same object is returned with a new reference, keeping its
 * original PSDB selection. Otherwise the load is a creation (G2): it selects a PSDB from desc's
 * subobject like psdb_device_create_*_pipeline (F1-F4) and looks every unit up in it; units the
 * PSDB does not hold come from the library's blobs, not from a local compile. That PSO stays in
 * the library for later loads.
 * PSDB_E_INVALIDARG: NULL arguments, an unknown name, a PSO of the other kind, a description that
 * does not match or that the compiler refuses, a PSDB subobject refused by selection (F4, E5);
 * PSDB_E_OUTOFMEMORY. *out is the caller's. Thread-safe. */
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
/* Releases the library and its references to PSOs (PSOs handed out stay valid). The blob it was
 * created from may be freed afterwards. NULL is a no-op. Not concurrently with other calls on lib.
 */
PSDB_API void psdb_pipeline_library_release(psdb_pipeline_library *lib);

#ifdef __cplusplus
}
#endif
#endif
