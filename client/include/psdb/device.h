/* psdb/device.h - the device: creation, features, the device-wide default, shader cache control,
 * statistics and messages. It includes the headers of what a device makes, one per noun:
 * session.h, pipeline.h, pipeline_library.h, serialized_pso.h, derived_pso.h, queue.h, so code
 * that includes device.h sees everything it did before the split. */
#ifndef PSDB_DEVICE_H
#define PSDB_DEVICE_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Device (MODEL A) --------------------------------------------------------------------------
 */
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

/* Creates a device for one adapter (MODEL A1) with an optional application identity (A2). The
 * implicit default is resolved here, once (B7): the "default" component registered for exe_path
 * in registry_dir, its PSDB for the adapter's family, opened and checked for compatibility (A3).
 * When anything is missing, incompatible or corrupt the implicit default is absent (the device
 * still works; psdb_device_get_statistics reports default_psdb_registered = 0).
 * Statuses: PSDB_E_INVALIDARG when desc or out is NULL; unknown adapter or device flags; with ASD
 * (no PSDB_ADAPTER_FLAG_NO_ASD) a family NULL, empty or >= PSDB_ADAPTER_FAMILY_MAX bytes, abi_min
 * 0, abi_max UINT64_MAX or abi_min > abi_max; an identity without name or version or with an
 * engine version but no engine name; an empty exe_path; capture_sodb_path set without an identity
 * (the SODB records it). Opening the capture SODB may fail with its own status (PSDB_E_IO, ...).
 * Everything in desc is copied. *out is the caller's (psdb_device_release). */
PSDB_API psdb_hr psdb_device_create(const psdb_device_desc *desc, psdb_device **out);
/* Destroys the application's device: releases the device-wide default (MODEL I1). Sessions,
 * pipelines and state objects made from it stay valid until released (they keep what they need
 * of the device). NULL is a no-op. Do not call while other threads use the device. */
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

/* Feature queries (MODEL A4). data points to the feature's struct and size is its sizeof:
 *   SHADER_CACHE            support flags: SINGLE_PSO always, AUTOMATIC_INPROC_CACHE (the local
 *                           driver cache), LIBRARY unless the adapter has
 * PSDB_ADAPTER_FLAG_NO_LIBRARY; SHADER_CACHE_ABI_SUPPORT the adapter's family, ABI range, compiler
 * and profile versions; PSDB_E_FAIL when the driver has no ASD support; EXPLICIT_PSDBS supported =
 * ASD support and an identity given at creation. PSDB_E_INVALIDARG on NULL dev or data, a wrong
 * size or an unknown feature. Thread-safe. */
PSDB_API psdb_hr psdb_device_check_feature_support(psdb_device *dev, psdb_feature f, void *data,
                                                   size_t size);

/* ---- The device-wide default (MODEL E, H) ------------------------------------------------------
 */
/* SetDefaultPrecompiledShaderCacheSession (seed 000; MODEL E, H, I). Sets (session non-NULL) or
 * clears (NULL) the device-wide explicit default and its flags (PSDB_SESSION_FLAG_NONE: objects
 * created with it keep the session for their lifetime; CREATE_ONLY: only during creation).
 * Returns S_OK on success; the device then holds its own reference (E7) until the default is
 * replaced, cleared or the device destroyed (I1), and the caller may release its reference.
 * PSDB_E_INVALIDARG (E3-E5): NULL dev; flags other than NONE / CREATE_ONLY; NULL session with
 * non-zero flags; a session that is not an explicit PSDB of this device (a cache session, the
 * implicit default, another device's session), or any session when the device does not support
 * explicit PSDBs (no ASD or no identity, A4). Clearing is allowed on every device. On failure the
 * previous session and flags are unchanged (E6).
 * Thread safety (H1-H5): may be called concurrently with creations and other setters. Each call
 * changes (session, flags) at once; a concurrent creation selects the pair from before or after,
 * never a mix; non-overlapping calls take effect in call order; a creation begun after a call
 * returned sees it. The call never waits for creations using the previous default; the previous
 * session is released from this call (its destroy callbacks may run here) only if nothing else
 * holds it (I6). */
PSDB_API psdb_hr psdb_device_set_default_session(psdb_device *dev, psdb_session *session,
                                                 uint32_t flags);

/* ---- ShaderCacheControl (MODEL J2) -------------------------------------------------------------
 */
#define PSDB_CACHE_KIND_IMPLICIT 0x1u    /* the local driver cache */
#define PSDB_CACHE_KIND_APPLICATION 0x2u /* application-managed cache sessions */
#define PSDB_CACHE_KIND_PRECOMPILED 0x4u /* PSDB lookups */
#define PSDB_CACHE_CONTROL_DISABLE 0x1u
#define PSDB_CACHE_CONTROL_ENABLE 0x2u
#define PSDB_CACHE_CONTROL_CLEAR 0x4u
/* ShaderCacheControl (J2). kinds: any of IMPLICIT (the local driver cache), APPLICATION (cache
 * sessions) and PRECOMPILED (PSDB lookups). control: DISABLE or ENABLE (not both), optionally with
 * CLEAR, or CLEAR alone. Disabling PSDB lookups keeps the device default and every selection;
 * creations still select but do not look up. CLEAR empties the local cache or the application
 * caches; PSDBs are read-only and are left as they are. PSDB_E_INVALIDARG on NULL dev, no or
 * unknown kinds, no or unknown control bits, DISABLE with ENABLE. Thread-safe. */
PSDB_API psdb_hr psdb_device_shader_cache_control(psdb_device *dev, uint32_t kinds,
                                                  uint32_t control);

/* ---- Statistics (MODEL K1) ---------------------------------------------------------------------
 */
typedef struct psdb_creation_statistics {
    uint32_t num_created, num_psdb_cache_missed, num_total_cache_missed, num_cache_unknown;
} psdb_creation_statistics;

typedef struct psdb_statistics {
    int default_psdb_registered;
    psdb_creation_statistics pipeline_states, state_objects;
} psdb_statistics;

/* Statistics (K1), per category (pipelines; state objects): created; PSDB-missed (not a full
 * PSDB hit, including partial hits, no selection and disabled lookups); total-missed (some unit
 * had to be compiled: neither the PSDB nor the local cache had it); unknown (the driver has no
 * ASD: counted there instead of the two misses). default_psdb_registered: the implicit default
 * is present (registered, ASD, compatible). Counters are atomic one by one, not as a group.
 * PSDB_E_INVALIDARG on NULL. Thread-safe. */
PSDB_API psdb_hr psdb_device_get_statistics(psdb_device *dev, psdb_statistics *out);
/* Number of compile units this device compiled locally so far (0 for NULL). Thread-safe. */
PSDB_API uint32_t psdb_device_get_local_compile_count(psdb_device *dev);

#define PSDB_MESSAGE_SEVERITY_ERROR 1u
#define PSDB_MESSAGE_SEVERITY_WARNING 2u
#define PSDB_MESSAGE_SEVERITY_INFO 3u
/* Sets the function receiving the device's messages (warnings such as a failed capture write).
 * Called under a device lock: it must not call psdb_device_set_message_callback. PSDB_E_INVALIDARG
 * on NULL dev. Thread-safe. */
PSDB_API psdb_hr psdb_device_set_message_callback(psdb_device *dev,
                                                  void (*fn)(uint32_t severity, uint32_t id,
                                                             const char *text, void *ctx),
                                                  void *ctx);

#ifdef __cplusplus
}
#endif

/* What a device makes, one header per noun (each includes this one). */
#include "session.h"
#include "pipeline.h"
#include "pipeline_library.h"
#include "serialized_pso.h"
#include "derived_pso.h"
#include "queue.h"

#endif
