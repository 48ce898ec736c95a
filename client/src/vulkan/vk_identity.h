/* vk_identity.h - a Vulkan device's identity as a psdb target (schema/COMPILER.md §5), part of
 * libpsdb so that the layer (linked with libpsdb statically), `psdb compile/replay --backend
 * vulkan` and psdb_client_local_targets (`psdb install --target auto`) derive it one way.
 *
 * DESIGN: a PSDB must never reach a driver build it was not made for. vendorID and deviceID name
 * the family; the ABI is a hash of everything that says which compiler produced the code
 * (driverID, driverVersion, pipelineCacheUUID, and the driver-info string: lavapipe's UUID is a
 * constant, its driver-info string names the Mesa and LLVM builds), so any driver update moves the
 * ABI and psdb_file_open refuses the old PSDB. Mesa additionally checks its own disk-cache
 * identity (the folder a shipped cache must sit in), which covers CPU features. */
#ifndef PSDB_VULKAN_VK_IDENTITY_H
#define PSDB_VULKAN_VK_IDENTITY_H

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#define VKID_FAMILY_MAX 64u

/* How a driver's compiled code is kept: in VkPipelineCache data (one blob per pipeline), or in
 * Mesa's single-file disk cache (lavapipe's pipeline cache holds no code). */
typedef enum vkid_strategy { VKID_PIPELINE_CACHE = 1, VKID_MESA_DISK_CACHE = 2 } vkid_strategy;

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
 * VK_KHR_driver_properties: driverID 0, no driver-info string). */
void vkid_from_properties(const VkPhysicalDeviceProperties *p,
                          const VkPhysicalDeviceDriverProperties *drv, vkid *out);

/* Queries the device's properties through props and props2 (vkGetPhysicalDeviceProperties2, core
 * in 1.1; may be NULL) and fills *out with vkid_from_properties: the driver properties are asked
 * for only where the device reports Vulkan 1.2 or later, as the layer and the tool ask. */
void vkid_query(PFN_vkGetPhysicalDeviceProperties props, PFN_vkGetPhysicalDeviceProperties2 props2,
                VkPhysicalDevice phys, vkid *out);

/* The 32-byte header VkPipelineCache data opens with (VK_PIPELINE_CACHE_HEADER_VERSION_ONE).
 * Returns 0 when data is at least a header long, the header says version one with a length of 32
 * or more, and vendorID, deviceID and pipelineCacheUUID are the device's; else -1. */
int vkid_check_cache_header(const vkid *id, const void *data, size_t size);

/* The key of the PSDB value that carries Mesa's single-file cache (which) for all pipelines:
 * SHA-256 of "psdb-vulkan:mesa-foz" (0) or "psdb-vulkan:mesa-foz-idx" (1). */
void vkid_mesa_key(int which, uint8_t out[32]);

/* The key of the PSDB value that carries one VkPipelineCache holding every pipeline of the PSDB
 * (the per-pipeline caches merged at compile time): SHA-256 of "psdb-vulkan:pipeline-cache-all". */
void vkid_merged_key(uint8_t out[32]);

#endif
