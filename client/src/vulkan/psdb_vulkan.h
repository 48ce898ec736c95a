/* psdb_vulkan.h - the Vulkan component: the one interface of client/src/vulkan/ for its users (the
 * layer VK_LAYER_PSDB_delivery, the psdb tool, the tests). Nothing else of the folder is theirs.
 *
 * DESIGN (Fossilize's split: a library that knows Vulkan, and a layer of dispatch glue over it):
 * everything psdb knows about Vulkan lives here, each job in one file: a device's identity as a
 * psdb target (vk_identity.c, schema/COMPILER.md section 5), the create-info encoding of
 * schema/SODB.md section 3 (vk_encode.c) and its decoding (vk_decode.c), a device's object
 * records (vk_record.c), capture into an SODB (vk_capture.c), finding and proving the PSDB a
 * process's devices are delivered (vk_find.c), handing a PSDB's code to a driver (vk_deliver.c),
 * the layer's counters (vk_stats.c), and compiling and replaying an SODB on a device
 * (vk_device.c, vk_pipeline.c, vk_compile.c, vk_replay.c). The layer keeps only what needs the
 * loader's dispatch: instances, devices, the hook table and the calls down the chain; the
 * component never calls a device function the layer intercepts.
 *
 * The component is the static library psdb_vulkan. It uses libpsdb's public API (psdb/psdb.h)
 * and common/ only (tests/build/layering_test.sh checks the includes, vk_component_link_test the
 * link), so its user chooses the libpsdb it links: the layer the static one, the tool its own.
 * Only compile and replay (vkbe_*) call the Vulkan loader: their user links it (the tool); the
 * layer never does. libpsdb itself builds vk_identity.c and vk_devices.c of this folder
 * (psdb_client_local_targets), against the Vulkan headers only.
 *
 * Builds: the declarations that need Vulkan's types are there where the build has the Vulkan
 * headers (PSDB_HAVE_VULKAN_HEADERS, defined by CMake for libpsdb and every user of psdb_vulkan).
 * Without them (or without the loader) the component is vk_none.c alone: compile and replay answer
 * PSDB_E_NOTIMPL, so the tool builds and says so.
 *
 * Threads: the encoders, decoders, identity functions and vkdl_* calls keep no state of their own
 * (a psdb_file is shared as libpsdb allows). Records (vkrec) lock themselves. Capture, the PSDB a
 * process is delivered (vkfind_prepare) and the counters are one per process, each behind its own
 * lock: every vkcap_*, vkfind_* and vkstats_* call is thread-safe. Compile and replay change the
 * process's environment (the driver's cache settings): one at a time, from a program's main
 * thread. */
#ifndef PSDB_VULKAN_PSDB_VULKAN_H
#define PSDB_VULKAN_PSDB_VULKAN_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "psdb/psdb.h"

/* ==== Compile and replay on a Vulkan device (`psdb compile/replay --backend vulkan`) =============
 */

typedef struct vkbe_compile_stats {
    uint64_t pipelines, compute, graphics;
    uint64_t failed;     /* pipelines the driver did not create (counted, not fatal) */
    uint64_t code_bytes; /* bytes of compiled code stored */
    uint64_t reused;     /* pipelines (of pipelines) taken from the base PSDB unchanged */
    uint64_t compiled;   /* pipelines (of pipelines) the driver compiled in this run */
    double seconds;
    const char *strategy; /* vkid_strategy_name of the PSDB written */
} vkbe_compile_stats;

/* Replays every Vulkan entry of the SODB at sodb_path alone on device device_index (the
 * loader's order) and writes what the driver compiled into a PSDB at out_path whose target is the
 * device's identity (schema/COMPILER.md section 5). base_path (may be NULL): the PSDB of the
 * previous version; each pipeline it holds unchanged (same key) is taken from it byte for byte and
 * not compiled (a base that does not fit the device, is refused by its proof, or keeps its code
 * another way serves nothing: every pipeline is compiled, said on progress). progress: when
 * non-NULL, a line every 2 s and one at the end naming the first failure. *stats (may be NULL) is
 * filled on success. Statuses: PSDB_S_OK; PSDB_E_NOTIMPL without the backend; PSDB_E_INVALIDARG the
 * SODB holds no Vulkan pipeline; PSDB_E_ADAPTER_NOT_FOUND no such device (or no driver);
 * PSDB_E_FAIL no pipeline could be created, or the driver's cache could not be read;
 * PSDB_E_CACHE_CORRUPT an entry that does not decode (PSDB_E_OUTOFMEMORY: no memory to decode it);
 * PSDB_E_IO the private cache folder or Mesa's cache files; the SODB's and the writer's statuses.
 * err (err_size > 0) gets one line on failure. Sets the process's driver cache environment
 * (MESA_SHADER_CACHE_DIR, ...): not thread-safe. */
psdb_hr vkbe_compile(const char *sodb_path, const char *base_path, uint32_t device_index,
                     const char *out_path, FILE *progress, vkbe_compile_stats *stats, char *err,
                     size_t err_size);

/* The target vkbe_compile writes on device device_index (the loader's order), which is also the
 * one psdb_client_local_targets gives that device (`psdb install --target auto`): its family,
 * abi_min = abi_max = the driver's ABI, compiler_version the driver
 * version, profile_version 0. For `psdb worker --backend vulkan`. Statuses: PSDB_S_OK;
 * PSDB_E_NOTIMPL without the backend; PSDB_E_ADAPTER_NOT_FOUND no such device (or no driver);
 * err (err_size > 0) gets one line on failure. Thread-safe (its own instance). */
psdb_hr vkbe_device_target(uint32_t device_index, psdb_precompile_target *out, char *err,
                           size_t err_size);

typedef struct vkbe_replay_stats {
    uint64_t pipelines, failed, hits, misses;
    /* Time-to-usable of all pipelines: setup + lookups + creations + first uses; median and
     * p95 of one pipeline's (lookup + creation + first use). */
    double total_s, median_ms, p95_ms;
    double setup_s;       /* the device cache made once from the PSDB's cache parts */
    uint32_t cache_parts; /* the parts merged into it */
    /* Proving the PSDB as the layer proves an installed one (the whole file's SHA-256 against the
     * digest its install recorded): started before the device is created and waited for once the
     * device exists; proof_s is that wait, in total_s. device_s, apart: the device's creation,
     * which the proof runs beside. file_sha256_s, apart: the same hash run on its own. */
    double proof_s, device_s, file_sha256_s;
    double lookup_s;              /* the PSDB lookups (encode, hash, key probe, blob checks) */
    double create_s, first_use_s; /* vkCreate*Pipelines, and the first uses */
    double objects_s; /* not in total_s: the shader modules, layouts and render passes */
    double wall_s;    /* the whole pass: all of the above, and decoding the SODB */
    int merged_cache; /* the pass used the PSDB's merged VkPipelineCache */
    /* The pass process's peak resident set (KiB): with a PSDB it holds what delivery holds (the
     * file's pages it touched, the key table, the merged cache), without one the driver alone. */
    uint64_t peak_rss_kib;
} vkbe_replay_stats;

/* What became of one SODB entry in a replay pass (schema/REPLAY.md, the Vulkan section). */
typedef enum vkbe_outcome {
    VKBE_HIT = 1,      /* created with the PSDB's code for it */
    VKBE_NOT_IN_PSDB,  /* created; the PSDB holds no pipeline with its key */
    VKBE_REFUSED,      /* created without the PSDB's data for it: that data failed a check, or the
                          whole PSDB was refused (vkbe_replay_result.refused) */
    VKBE_LOOKUP_ERROR, /* created; the lookup ran out of memory */
    VKBE_NO_PSDB,      /* created with no PSDB selected */
    VKBE_FAILED,       /* not created: it did not decode, or a step failed (step, vk_result) */
    VKBE_SKIPPED       /* not a Vulkan entry: not replayed */
} vkbe_outcome;

typedef struct vkbe_entry_outcome {
    uint32_t kind; /* PSDB_SODB_* */
    uint8_t key[32];
    uint64_t version;
    uint32_t outcome;  /* vkbe_outcome */
    int32_t vk_result; /* VKBE_FAILED: the failing step's VkResult (0: it did not decode) */
    char step[48];     /* VKBE_FAILED: "decode", or the step that failed */
    double seconds;    /* created: its time-to-usable (lookup, creation, first use) */
} vkbe_entry_outcome;

typedef struct vkbe_replay_desc {
    const char *sodb_path;
    const char *psdb_path; /* a PSDB named directly, or NULL */
    /* With psdb_path NULL: the PSDB the registry holds for this executable (its path as given,
     * or resolved when it names a file, as the layer sees /proc/self/exe) and the device's
     * family, found and proven as the layer finds it (vkfind_registered); NULL: no PSDB. */
    const char *exe_path;
    const char *registry_dir; /* the registry's root for exe_path; NULL: the default root */
    uint32_t device_index;
} vkbe_replay_desc;

typedef struct vkbe_replay_result {
    vkbe_replay_stats cold, warm;
    int warm_ran; /* a pass ran with the PSDB: warm holds its figures */
    char device_name[256];
    char family[64]; /* the device's target (schema/COMPILER.md section 5) */
    uint64_t abi;
    char exe_path[PATH_MAX];  /* exe_path as looked up ("" without one) */
    int registered;           /* the registry holds a default component PSDB of it for family */
    char psdb_path[PATH_MAX]; /* the PSDB selected (named, or the registry's); "" none */
    /* Non-empty: the registry's PSDB was refused for the device (why: no digest recorded, not the
     * file its install verified, another driver build, ...), as the layer refuses it; every
     * created entry is then VKBE_REFUSED and no pass ran with it. */
    char refused[512];
    /* Every SODB entry of the pass the counts are of (the PSDB's, else the cold one), in SODB
     * order; freed by vkbe_replay_result_free. */
    vkbe_entry_outcome *entries;
    size_t num_entries;
} vkbe_replay_result;

/* Creates and first-uses every Vulkan pipeline of the SODB on the device, cold (Mesa's disk cache
 * and the NVIDIA driver's disk cache off, no PSDB) into out->cold, then with the PSDB selected
 * (desc->psdb_path, or the registry's for desc->exe_path) into out->warm, proven as the layer
 * proves an installed PSDB: by the SHA-256 its install recorded (a file named directly: by its
 * own SHA-256, taken first). Each pass runs in a child process, so that the driver opens its
 * caches afresh and the environment a pass sets stays there. *out is the caller's
 * (vkbe_replay_result_free; on failure it holds no entries). Statuses: PSDB_S_OK; PSDB_E_NOTIMPL
 * without the backend; PSDB_E_INVALIDARG NULL arguments, or both psdb_path and exe_path;
 * PSDB_E_FAIL when a pass failed (err names why: the SODB, the device, a PSDB named directly that
 * does not fit the device, pipe or fork) or the registry cannot be read; PSDB_E_OUTOFMEMORY. A
 * registered PSDB that is refused is no failure: out->refused says why. err (err_size > 0) gets one
 * line. Not thread-safe (fork). */
psdb_hr vkbe_replay(const vkbe_replay_desc *desc, vkbe_replay_result *out, char *err,
                    size_t err_size);
/* Frees r's entries and zeroes them; NULL is a no-op. */
void vkbe_replay_result_free(vkbe_replay_result *r);

#ifdef PSDB_HAVE_VULKAN_HEADERS
#include <vulkan/vulkan.h>

#include "vulkan/vk_binary_decl.h"

/* ==== A device's identity as a psdb target (vk_identity.c, schema/COMPILER.md section 5) =========
 *
 * DESIGN: a PSDB must never reach a driver build it was not made for. vendorID and deviceID name
 * the family; the ABI is a hash of everything that says which compiler produced the code
 * (driverID, driverVersion, pipelineCacheUUID, and the driver-info string: lavapipe's UUID is a
 * constant, its driver-info string names the Mesa and LLVM builds), so any driver update moves the
 * ABI and psdb_file_open refuses the old PSDB. Mesa additionally checks its own disk-cache
 * identity (the folder a shipped cache must sit in), which covers CPU features. The layer, the
 * backend and psdb_client_local_targets derive it with these functions only. */

#define VKID_FAMILY_MAX 64u

/* How a driver's compiled code is kept: in VkPipelineCache data (one blob per pipeline), or in
 * Mesa's single-file disk cache (lavapipe's pipeline cache holds no code). */
typedef enum vkid_strategy {
    VKID_PIPELINE_CACHE = 1,
    VKID_MESA_DISK_CACHE = 2,
    VKID_PIPELINE_BINARY = 3 /* VK_KHR_pipeline_binary: each pipeline's own binaries */
} vkid_strategy;

typedef struct vkid {
    uint32_t vendor_id, device_id, driver_id, driver_version, api_version;
    uint8_t uuid[VK_UUID_SIZE];
    char device_name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    char driver_info[VK_MAX_DRIVER_INFO_SIZE];
    char family[VKID_FAMILY_MAX]; /* "vulkan-<vendorID hex>-<deviceID hex>" */
    uint64_t abi;                 /* 1 .. 2^64-2 */
    uint64_t compiler_version;    /* driverVersion */
    vkid_strategy strategy;
} vkid;

/* Fills *out from the device's properties; drv may be NULL (a Vulkan 1.0 driver without
 * VK_KHR_driver_properties: driverID 0, no driver-info string). The strategy follows driverID
 * unless PSDB_VULKAN_STRATEGY (pipeline-cache or mesa-disk-cache, a testing knob) forces it.
 * Cannot fail. */
void vkid_from_properties(const VkPhysicalDeviceProperties *p,
                          const VkPhysicalDeviceDriverProperties *drv, vkid *out);

/* Queries the device's properties through props and props2 (vkGetPhysicalDeviceProperties2, core
 * in 1.1; may be NULL) and fills *out with vkid_from_properties: the driver properties are asked
 * for only where the device reports Vulkan 1.2 or later. Cannot fail. */
void vkid_query(PFN_vkGetPhysicalDeviceProperties props, PFN_vkGetPhysicalDeviceProperties2 props2,
                VkPhysicalDevice phys, vkid *out);

/* The 32-byte header VkPipelineCache data opens with (VK_PIPELINE_CACHE_HEADER_VERSION_ONE).
 * Returns 0 when data is at least a header long, the header says version one with a length of 32
 * or more, and vendorID, deviceID and pipelineCacheUUID are the device's; else -1 (data NULL
 * included). */
int vkid_check_cache_header(const vkid *id, const void *data, size_t size);

/* The key of the PSDB value that carries Mesa's single-file cache (which) for all pipelines:
 * SHA-256 of "psdb-vulkan:mesa-foz" (0) or "psdb-vulkan:mesa-foz-idx" (1). */
void vkid_mesa_key(int which, uint8_t out[32]);

/* The key of the PSDB value that carries one VkPipelineCache holding every pipeline of the PSDB
 * (the per-pipeline caches merged at compile time, PSDBs made before cache parts): SHA-256 of
 * "psdb-vulkan:pipeline-cache-all". */
void vkid_merged_key(uint8_t out[32]);

/* The PSDB's record of how its code is kept (schema/COMPILER.md section 5): key SHA-256 of
 * "psdb-vulkan:strategy", METADATA "pipeline-cache", "mesa-disk-cache" or "pipeline-binary", and
 * for binaries OBJECT_CODE the device's global pipeline key. */
void vkid_strategy_key(uint8_t out[32]);
/* The METADATA text of a strategy ("" for none). */
const char *vkid_strategy_name(vkid_strategy s);

/* Pieces shared by pipelines (a Mesa cache entry, a cache part) are values and groups under
 * 33-byte keys: kind ('m' Mesa entry, 'c' cache part) then SHA-256 of name, so that a walk of
 * the groups finds them by size and first byte, apart from the pipelines' 32-byte keys. */
#define VKID_PIECE_KEY_SIZE 33u
#define VKID_PIECE_MESA_ENTRY ((uint8_t)'m')
#define VKID_PIECE_CACHE_PART ((uint8_t)'c')
void vkid_piece_key(uint8_t kind, const void *name, size_t name_size, uint8_t out[33]);

/* ==== Encoding create-infos (vk_encode.c, schema/SODB.md section 3) ==============================
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

#define VKENC_VERSION 1u
#define VKENC_MAGIC_COMPUTE "VKCP"
#define VKENC_MAGIC_GRAPHICS "VKGP"
#define VKENC_SAMPLER_SIZE 64u /* 16 x u32 */
#define VKENC_MAX_STYPES 8u    /* distinct unrepresentable sTypes remembered per encoding */

/* An encoding: a growable little-endian byte buffer with a sticky out-of-memory flag (once an
 * append fails, later appends do nothing and one check of `oom` covers the whole encoding). Start
 * from all zeros; the bytes are the caller's, freed with vkenc_free. */
typedef struct vkenc {
    uint8_t *data;
    size_t len, cap;
    int oom;
    uint32_t unrepresentable;
    uint32_t num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
} vkenc;

/* Frees e's bytes and zeroes it (reusable). */
void vkenc_free(vkenc *e);

/* What the encoders look up by handle (a device's records implement it: vkrec). find returns 0
 * and the object's bytes (borrowed for the duration of the encoding) when the handle is known,
 * else -1. unrepresentable/stypes carry the object's own unrepresentable structures. */
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

/* Object encodings (schema/SODB.md section 3.2). Each appends to e; the caller checks e->oom. A
 * shader module's bytes are its SPIR-V words as given. An object the lookup does not know makes
 * the encoding unrepresentable. */
void vkenc_shader_module(vkenc *e, const VkShaderModuleCreateInfo *ci);
void vkenc_sampler(vkenc *e, const VkSamplerCreateInfo *ci);
void vkenc_set_layout(vkenc *e, const VkDescriptorSetLayoutCreateInfo *ci, const vkenc_lookup *lk);
void vkenc_pipeline_layout(vkenc *e, const VkPipelineLayoutCreateInfo *ci, const vkenc_lookup *lk);
/* Fills *depth and *color with the subpass masks of vkenc_object. */
void vkenc_render_pass(vkenc *e, const VkRenderPassCreateInfo *ci, uint32_t *depth,
                       uint32_t *color);
void vkenc_render_pass2(vkenc *e, const VkRenderPassCreateInfo2 *ci, uint32_t *depth,
                        uint32_t *color);

/* Pipeline encodings (schema/SODB.md sections 3.3, 3.4): the whole description, header included:
 * an SODB entry of kind PSDB_SODB_VK_COMPUTE or PSDB_SODB_VK_GRAPHICS, whose SHA-256 is the
 * pipeline's object key. */
void vkenc_compute_pipeline(vkenc *e, const VkComputePipelineCreateInfo *ci,
                            const vkenc_lookup *lk);
void vkenc_graphics_pipeline(vkenc *e, const VkGraphicsPipelineCreateInfo *ci,
                             const vkenc_lookup *lk);

/* ==== Decoding an entry back into create-infos (vk_decode.c) =====================================
 *
 * DESIGN: the decoder validates everything the format says (magic, version, reserved, every count
 * bounded by the bytes left, no bytes left over) and builds the create-infos in one arena, so a
 * decoded pipeline is freed with one call and never points into the entry's bytes (SPIR-V needs
 * 4-byte alignment that the entry's buffer does not promise). Handles (shader modules, samplers,
 * set layouts, the pipeline layout, the render pass) are left VK_NULL_HANDLE: the replayer creates
 * the objects from the decoded create-infos and fills them in. */

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
 * not a valid encoding (nothing allocated), -2 when out of memory. *out is the caller's, freed
 * with vkdec_free (also after -1 and -2: a no-op then). */
int vkdec_pipeline_decode(const void *data, size_t len, int graphics, vkdec_pipeline *out);
void vkdec_free(vkdec_pipeline *p);

/* ==== Handing a PSDB's code to a driver (vk_deliver.c, schema/COMPILER.md section 5) =============
 *
 * DESIGN: no byte reaches a driver that is not proven to be one the PSDB's trusted digest covers.
 * vkdl_open proves the file: an installed PSDB by the SHA-256 its install recorded (the digest the
 * publisher's signed statement names), checked over the very file every later read uses
 * (psdb_file_check); a PSDB named directly (PSDB_DELIVERY, a replay's argument) by its own content
 * digest, recomputed from its tables. Then each blob is hashed against its digest before its first
 * use (psdb_file_find_value). Beyond the bytes: psdb_file_open with the device's identity as the
 * adapter (family and ABI, which hashes the driver build); for VkPipelineCache data the cache
 * header (vendorID, deviceID, pipelineCacheUUID); for Mesa's single-file cache a structural check
 * of both files (vkdl_foz_check) before they are written where Mesa reads them, and the folder
 * named by the disk-cache identity recorded at compile time (Mesa computes that folder from its
 * own build and CPU, so on any other driver build the files are never opened). */

/* What vouches for a PSDB: the SHA-256 of the whole file recorded when it was installed (from the
 * registry), or nothing (a file named directly: its own content digest then vouches for its
 * values). */
typedef struct vkdl_trust {
    int have_sha256;
    uint8_t sha256[32];
} vkdl_trust;

/* Opens path for the device and proves it (see DESIGN): NULL identity opens without the adapter
 * check (used before a device exists, for Mesa's cache, which carries its own identity check);
 * NULL trust is a file named directly. Statuses of psdb_file_open and psdb_file_check
 * (PSDB_E_CACHE_CORRUPT: the file is not the one its digest names); psdb_error_last says why. On
 * success *out is the caller's (psdb_file_release), else NULL. */
psdb_hr vkdl_open(const char *path, const vkid *id, const vkdl_trust *trust, psdb_file **out);

/* One whole value of f (psdb_file_find_value's size query, then its bytes) into *out, the
 * caller's to free; statuses psdb_file_find_value's, or PSDB_E_OUTOFMEMORY. *out is NULL and
 * *size 0 on failure. */
psdb_hr vkdl_value(psdb_file *f, const void *key, size_t key_size, uint32_t type, void **out,
                   size_t *size);

/* A proof running on a thread of its own (vkdl_open's, split in two): the layer starts it when the
 * first instance is created, so that hashing an installed PSDB overlaps the driver's instance and
 * device creation instead of delaying the first pipeline. */
typedef struct vkdl_proof vkdl_proof;

/* Opens path (no adapter check yet) and starts proving it as vkdl_open does. PSDB_S_OK with *out
 * the caller's (vkdl_proof_finish frees it); a failure to open or to start (no thread: then the
 * proof runs at finish) is kept for vkdl_proof_finish, which reports it, so *out is set unless
 * memory ran out (PSDB_E_OUTOFMEMORY, *out NULL). */
psdb_hr vkdl_proof_start(const char *path, const vkdl_trust *trust, vkdl_proof **out);

/* The file being proven, for a look that hands nothing on (whether it carries Mesa's cache);
 * NULL when it did not open. Borrowed until vkdl_proof_finish. */
psdb_file *vkdl_proof_peek(vkdl_proof *p);

/* The path p proves (borrowed until vkdl_proof_finish). */
const char *vkdl_proof_path(const vkdl_proof *p);

/* Waits for the proof and frees p (NULL: PSDB_E_INVALIDARG). On success *out is the proven file,
 * the caller's, checked against id as psdb_file_open checks an adapter (family, ABI, the top 32
 * bits of the profile version 0), when id is non-NULL. On failure *out is NULL and why (may be
 * NULL) gets one line: statuses as vkdl_open. */
psdb_hr vkdl_proof_finish(vkdl_proof *p, const vkid *id, psdb_file **out, char *why,
                          size_t why_size);

/* Whether foz and idx are a Mesa single-file cache Mesa can read safely: both start with the
 * Fossilize magic and version 6; the cache is a run of entries (40 lowercase hex digits, a 16-byte
 * header, the payload) that ends exactly at the end, each payload uncompressed, non-empty and
 * matching its CRC; the index is a run of 64-byte entries, each naming by offset an entry of the
 * cache with the same hash, no hash twice. 0, or -1 with a one-line reason in why. */
int vkdl_foz_check(const uint8_t *foz, size_t foz_size, const uint8_t *idx, size_t idx_size,
                   char *why, size_t why_size);

/* When f (opened with vkdl_open) carries Mesa's single-file cache, checks it (vkdl_foz_check),
 * writes it read-only under the Mesa cache root (MESA_SHADER_CACHE_DIR when set, else
 * $XDG_CACHE_HOME/psdb/mesa, else $HOME/.cache/psdb/mesa; an existing file is kept only when its
 * bytes are these) and sets the Mesa environment variables that make the driver read it when it
 * opens its cache. Returns PSDB_S_OK (set up), PSDB_S_FALSE (f has no Mesa cache), or a failure
 * (nothing set: PSDB_E_CACHE_CORRUPT for data that fails the check, PSDB_E_IO when the files
 * cannot be written, PSDB_E_NOT_CURRENTLY_AVAILABLE when Mesa's cache is disabled by
 * MESA_SHADER_CACHE_DISABLE); msg gets one line. Not thread-safe (the environment). */
psdb_hr vkdl_mesa_setup(psdb_file *f, char *msg, size_t msg_size);

/* Whether MESA_SHADER_CACHE_DISABLE turns Mesa's disk cache off (any value but 0, n, no, f,
 * false, as Mesa reads it): Mesa then reads no shipped cache. */
int vkdl_mesa_cache_disabled(void);

/* The PSDB's group keys in memory (an open-addressing set), loaded once per device so that a
 * creation's lookup costs a hash probe, not a database query, on a miss and on a Mesa hit. */
typedef struct vkdl_keys {
    uint8_t (*slot)[32];
    uint8_t *used;
    size_t cap, count;
} vkdl_keys;

/* PSDB_S_OK, or the walk's failure (PSDB_E_OUTOFMEMORY, PSDB_E_CACHE_CORRUPT, PSDB_E_IO; *out
 * empty then). *out is the caller's, freed with vkdl_keys_free (all zeros: a no-op). */
psdb_hr vkdl_keys_load(psdb_file *f, vkdl_keys *out);
int vkdl_keys_has(const vkdl_keys *k, const uint8_t key[32]);
void vkdl_keys_free(vkdl_keys *k);

/* Whether the PSDB holds the pipeline with this SODB object key (keys: the PSDB's, or NULL to
 * ask the file). For VkPipelineCache data with data non-NULL, *data (malloc'd, the caller's) and
 * *size get the pipeline's own blob when it passes the header check; with data NULL (the merged
 * cache serves the hit) only the key is looked up. Returns 1 hit (data, if any, valid), 0 miss
 * (absent, or data that failed a check: *bad set), -1 out of memory. */
int vkdl_lookup(psdb_file *f, const vkdl_keys *keys, const vkid *id, const uint8_t key[32],
                void **data, size_t *size, int *bad);

/* The merged VkPipelineCache data of a PSDB compiled for the VkPipelineCache strategy (every
 * pipeline's cache in one, vkid_merged_key): a driver creates each pipeline from one cache made
 * once per device far sooner than from a fresh one-pipeline cache per creation. *data (malloc'd,
 * the caller's) and *size get it when it passes the header check against id. Returns PSDB_S_OK,
 * PSDB_S_FALSE (the PSDB has none: compiled before merged caches, or for Mesa),
 * PSDB_E_CACHE_CORRUPT (the header does not name this device), or the fetch's failure; msg
 * gets one line on a failure. */
psdb_hr vkdl_merged_cache(psdb_file *f, const vkid *id, void **data, size_t *size, char *msg,
                          size_t msg_size);

/* How f keeps its code: its strategy record (vkid_strategy_key); a PSDB made before the record is
 * of the Mesa strategy when it carries Mesa's cache, else of the VkPipelineCache one. For
 * binaries, gkey (may be NULL) gets the recorded global pipeline key and *gkey_size its size (0:
 * none recorded). Cannot fail. */
vkid_strategy vkdl_strategy(psdb_file *f, uint8_t gkey[32], uint32_t *gkey_size);

/* The device functions a cache build calls (the loader's, or the next layer's). */
typedef struct vkdl_cache_fns {
    PFN_vkCreatePipelineCache create;
    PFN_vkMergePipelineCaches merge;
    PFN_vkDestroyPipelineCache destroy;
} vkdl_cache_fns;

/* One VkPipelineCache holding every pipeline of a PSDB of the VkPipelineCache strategy, made
 * once per device: its cache parts (VKID_PIECE_CACHE_PART pieces, each header-checked against id)
 * merged into one, or for a PSDB made before parts its merged cache. *out (the caller's, destroyed
 * with fns->destroy) and *parts (may be NULL: how many were merged). PSDB_S_OK; PSDB_S_FALSE (no
 * part and no merged cache: none is made); PSDB_E_CACHE_CORRUPT (a header names another device);
 * PSDB_E_FAIL (the driver refused one); the fetches' failures. msg gets one line on a failure. */
psdb_hr vkdl_device_cache(psdb_file *f, const vkid *id, const vkdl_cache_fns *fns, VkDevice device,
                          VkPipelineCache *out, uint32_t *parts, char *msg, size_t msg_size);

/* ==== A pipeline's binaries (vk_binary.c, VK_KHR_pipeline_binary) ================================
 *
 * One pipeline's binaries as one PSDB value (schema/COMPILER.md section 5): "PSBN", u32 version 1,
 * u32 count (1..VKBIN_MAX), then per binary u32 key size (1..32), the key in 32 bytes (zeros after
 * its size), u64 data size (> 0) and the data; little-endian, nothing after the last. */

#define VKBIN_MAX 16u

/* The extension's device functions, from the caller's vkGetDeviceProcAddr (the loader's, or the
 * next layer's). */
typedef struct vkbin_fns {
    PFN_vkCreatePipelineBinariesKHR create;
    PFN_vkDestroyPipelineBinaryKHR destroy;
    PFN_vkGetPipelineKeyKHR key;
    PFN_vkGetPipelineBinaryDataKHR data;
    PFN_vkReleaseCapturedPipelineDataKHR release;
} vkbin_fns;

/* 0 when the device (created with the extension) gives every function, else -1. */
int vkbin_fns_load(PFN_vkGetDeviceProcAddr gdpa, VkDevice device, vkbin_fns *out);

/* Whether the physical device offers VK_KHR_pipeline_binary (and VK_KHR_maintenance5, which it
 * needs) with its pipelineBinaries feature: 1 or 0. */
int vkbin_supported(PFN_vkEnumerateDeviceExtensionProperties enumerate,
                    PFN_vkGetPhysicalDeviceFeatures2 features2, VkPhysicalDevice phys);

/* The device's global pipeline key (the driver build's key for binaries) into key (zero-padded to
 * 32 bytes) and its size. */
VkResult vkbin_global_key(const vkbin_fns *f, VkDevice device, uint8_t key[32], uint32_t *size);

/* The binaries of pipeline (created with VK_PIPELINE_CREATE_2_CAPTURE_DATA_BIT_KHR) as one
 * value: *out (malloc'd, the caller's) and *size. The caller releases the captured data. */
VkResult vkbin_capture(const vkbin_fns *f, VkDevice device, VkPipeline pipeline, void **out,
                       size_t *size);

/* 0 when blob is a well-formed value (the layout above), else -1. */
int vkbin_check(const void *blob, size_t size);

/* The binaries of one creation: info is what the creation chains in (VkPipelineBinaryInfoKHR). */
typedef struct vkbin_set {
    uint32_t count;
    VkPipelineBinaryKHR handles[VKBIN_MAX];
    VkPipelineBinaryInfoKHR info;
} vkbin_set;

/* Creates the binaries a value holds (checked first: VK_ERROR_INITIALIZATION_FAILED for a
 * malformed one), for one creation; *out is zeroed on failure. vkbin_destroy after the creation
 * (all zeros: nothing). */
VkResult vkbin_create(const vkbin_fns *f, VkDevice device, const void *blob, size_t size,
                      vkbin_set *out);
void vkbin_destroy(const vkbin_fns *f, VkDevice device, vkbin_set *s);

/* ==== A device's object records (vk_record.c) ====================================================
 *
 * The encodings of the shader modules, samplers, descriptor set layouts, pipeline layouts and
 * render passes a device created, by handle, so that a pipeline's encoding can copy in what it
 * uses (see the encoding's DESIGN). A hash map under one lock: the application may create objects
 * and pipelines on any thread. */

typedef struct vkrec vkrec;

/* An empty set of records. PSDB_S_OK, or PSDB_E_OUTOFMEMORY (*out NULL). *out is the caller's,
 * freed with vkrec_release (NULL: a no-op; no other call on it may run or follow). */
psdb_hr vkrec_create(vkrec **out);
void vkrec_release(vkrec *r);

/* Records the encoding of an object the driver created as handle, replacing an older record of
 * that type and handle (the driver reused it after a destroy the caller did not see). Out of
 * memory leaves no record: a pipeline that uses the object then encodes as unrepresentable. */
void vkrec_shader_module(vkrec *r, uint64_t handle, const VkShaderModuleCreateInfo *ci);
void vkrec_sampler(vkrec *r, uint64_t handle, const VkSamplerCreateInfo *ci);
void vkrec_set_layout(vkrec *r, uint64_t handle, const VkDescriptorSetLayoutCreateInfo *ci);
void vkrec_pipeline_layout(vkrec *r, uint64_t handle, const VkPipelineLayoutCreateInfo *ci);
void vkrec_render_pass(vkrec *r, uint64_t handle, const VkRenderPassCreateInfo *ci);
void vkrec_render_pass2(vkrec *r, uint64_t handle, const VkRenderPassCreateInfo2 *ci);

/* Drops the record of a destroyed object (handle 0, or one never recorded: nothing). */
void vkrec_forget(vkrec *r, VkObjectType type, uint64_t handle);

/* Encodes one pipeline with r's objects into e (all zeros on entry; the caller frees it): kind
 * PSDB_SODB_VK_COMPUTE with ci a VkComputePipelineCreateInfo, PSDB_SODB_VK_GRAPHICS with a
 * VkGraphicsPipelineCreateInfo. */
void vkrec_pipeline(vkrec *r, uint32_t kind, const void *ci, vkenc *e);

/* ==== The layer's counters (vk_stats.c) ==========================================================
 *
 * One set per process, as the layer reports them: a line on stderr and PSDB_LAYER_STATS
 * (schema/COMPILER.md section 5 names each field). */

typedef struct vkstats {
    uint64_t pipelines;       /* pipelines the driver created */
    uint64_t recorded;        /* new SODB entries */
    uint64_t already;         /* entries the SODB already held (same description) */
    uint64_t unrepresentable; /* pipelines not recorded: a structure the encoding cannot carry */
    uint64_t failed;          /* pipelines not recorded: out of memory or the writer failed */
    uint32_t num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
    uint64_t hits;        /* pipelines the PSDB held (its data handed to the driver) */
    uint64_t misses;      /* pipelines created while a PSDB was delivered that it did not hold */
    uint64_t rejected;    /* misses whose data failed a check (header, identity, corrupt) */
    uint64_t driver_hits; /* hits the driver reported served from the pipeline cache given */
    int feedback;         /* a device reported creation feedback: driver_hits is a count */
    uint64_t lookup_ns; /* encode + hash + lookup (+ blob checks), all creations; no driver time */
    int delivery;       /* 0 none (or found but not deliverable here), 1 delivered, -1 refused */
    int merged;         /* 0 none, 1 a merged cache was made for a device, -1 refused */
    uint64_t fed;       /* application caches the merged cache was merged into */
} vkstats;

/* The process's counters, locked: every read or change goes between vkstats_lock, which returns
 * them, and vkstats_unlock. Nothing else may be locked from inside. */
vkstats *vkstats_lock(void);
void vkstats_unlock(void);

/* Prints the delivery line (when a PSDB was delivered or refused) and, with capture_path
 * non-NULL (a capture is open: vkcap_path), the capture line on stderr, and writes the counters as
 * one JSON object to PSDB_LAYER_STATS when it is set (a file that cannot be written is said on
 * stderr). */
void vkstats_report(const char *capture_path);

/* ==== Capture into an SODB (vk_capture.c) ========================================================
 *
 * One capture per process, into the SODB PSDB_CAPTURE names, opened with the first instance's
 * application identity (schema/SODB.md section 3.1). Each pipeline is committed as it is added,
 * so a capture survives the application being killed. Nothing here can fail an application's
 * call: a failure is counted (vkstats) and said once on stderr. */

/* Takes a reference on the process's capture, opening it at the first (when PSDB_CAPTURE is set
 * and non-empty) with app's identity: its name, else the executable's file name; its version,
 * else 0.0.0.1; its engine; an AppId derived from the name. A writer that cannot be opened is said
 * on stderr and capture stays off for the process. */
void vkcap_open(const VkApplicationInfo *app);
/* Drops a reference; the last closes the writer. */
void vkcap_close(void);
/* Whether a capture is open. */
int vkcap_active(void);
/* The open capture's path, copied into buf (buf returned), or NULL when none is open. */
const char *vkcap_path(char *buf, size_t size);

/* Counts one pipeline the driver created and, while a capture is open, records e (an encoding of
 * kind PSDB_SODB_VK_COMPUTE or PSDB_SODB_VK_GRAPHICS) as one entry, or counts why not:
 * unrepresentable (its sTypes remembered), failed (out of memory, or the writer's failure, the
 * first said on stderr). */
void vkcap_pipeline(uint32_t kind, const vkenc *e);

/* ==== The PSDB a process's devices are delivered (vk_find.c) =====================================
 *
 * PSDB_DELIVERY, else the registry's `default` component PSDB of this executable for the device's
 * family, proven by the SHA-256 psdb install recorded (vkdl_open); opened with the device's
 * identity, so a PSDB of another driver build is refused and the device runs as without one. */

/* Before an instance reaches the driver: records PSDB_DELIVERY and, for the first instance of the
 * process (first: the caller has no instance yet), starts proving it, or every Vulkan PSDB
 * registered for this executable with a recorded digest, each on a thread of its own (the hash of
 * an installed PSDB then overlaps the driver's instance and device creation; vkfind_open takes the
 * proof). One that carries Mesa's cache is proven at once and its cache set up (Mesa opens its
 * disk cache when the driver loads, before any device exists). What fails is remembered and said
 * with the device it was for. */
void vkfind_prepare(int first);
/* Finishes and drops the proofs no device took: the caller's last instance is gone. */
void vkfind_drop(void);

/* What one device is delivered. */
typedef struct vkfind_device {
    vkid id;             /* the device's identity: set by the caller before vkfind_open */
    char path[PATH_MAX]; /* the PSDB found ("": none) */
    psdb_file *psdb; /* the PSDB delivered to this device (proven, checked against id), or NULL */
    vkdl_keys keys;  /* psdb's pipeline keys */
    /* The PSDB found failed its proof: every creation is a miss whose data was refused before the
     * driver saw it. */
    int refused;
    /* A PSDB of pipeline binaries: the global pipeline key it was compiled for (the caller
     * compares it with the device's once the device exists). */
    uint8_t binary_key[32];
    uint32_t binary_key_size;
} vkfind_device;

/* Finds, proves (taking the proof vkfind_prepare started, or proving it now) and opens d->id's
 * PSDB into *d (see above); d->id.strategy becomes the PSDB's (vkdl_strategy); for Mesa's strategy
 * it must also be the one whose cache
 * vkfind_prepare set up (a cache refused as malformed refuses the PSDB). Not delivered: d->psdb
 * NULL, d->refused set when the PSDB found failed a check of its own, the counters' delivery state
 * set and the reason said once per process on stderr. Release with vkfind_close. */
void vkfind_open(vkfind_device *d);
void vkfind_close(vkfind_device *d);

/* The registry's `default` component PSDB of the executable exe (an exact path, as the registry
 * keys it; vkfind_open asks with /proc/self/exe) for family, in the registry at registry_dir
 * (NULL: the default root, PSDB_REGISTRY_DIR honoured): what vkfind_open delivers when
 * PSDB_DELIVERY is not set. PSDB_S_OK: path and *trust (the SHA-256 psdb install recorded) set;
 * PSDB_E_INTEGRITY: registered without a recorded digest, which is never delivered (path set, why
 * says so); PSDB_S_FALSE: none registered; PSDB_E_INVALIDARG: a NULL argument; the explorer's
 * failure for a registry that cannot be read (why names it). why may be NULL. */
psdb_hr vkfind_registered(const char *registry_dir, const char *exe, const char *family, char *path,
                          size_t path_size, vkdl_trust *trust, char *why, size_t why_size);

/* Looks one pipeline creation up in d's PSDB (d->psdb non-NULL): encodes it with r's objects
 * (vkrec_pipeline), hashes the encoding into its SODB object key and asks vkdl_lookup (data,
 * size and bad as there: with data NULL only the key decides). 1 hit, 0 miss (an encoding that is
 * unrepresentable or out of memory is one), -1 out of memory. */
int vkfind_lookup(const vkfind_device *d, vkrec *r, uint32_t kind, const void *ci, void **data,
                  size_t *size, int *bad);

#endif /* PSDB_HAVE_VULKAN_HEADERS */

#endif
