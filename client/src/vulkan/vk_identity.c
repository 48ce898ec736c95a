/* vk_identity.c - the psdb target of a Vulkan device (schema/COMPILER.md §5). */
#include "vulkan/psdb_vulkan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/hash.h"

void vkid_from_properties(const VkPhysicalDeviceProperties *p,
                          const VkPhysicalDeviceDriverProperties *drv, vkid *out)
{
    memset(out, 0, sizeof(*out));
    out->vendor_id = p->vendorID;
    out->device_id = p->deviceID;
    out->driver_version = p->driverVersion;
    out->api_version = p->apiVersion;
    memcpy(out->uuid, p->pipelineCacheUUID, VK_UUID_SIZE);
    snprintf(out->device_name, sizeof(out->device_name), "%s", p->deviceName);
    if (drv) {
        out->driver_id = (uint32_t)drv->driverID;
        snprintf(out->driver_info, sizeof(out->driver_info), "%s", drv->driverInfo);
    }
    snprintf(out->family, sizeof(out->family), "vulkan-%x-%x", out->vendor_id, out->device_id);
    /* "psdb-vulkan-abi:" driverID driverVersion (u32 LE each) UUID (16 bytes) driverInfo
     * (up to its NUL); the first 8 digest bytes LE, mapped into 1 .. 2^64-2. */
    static const char tag[] = "psdb-vulkan-abi:";
    uint8_t seed[sizeof(tag) - 1 + 8 + VK_UUID_SIZE + VK_MAX_DRIVER_INFO_SIZE];
    size_t n = 0, info_len = strlen(out->driver_info);
    memcpy(seed, tag, sizeof(tag) - 1);
    n += sizeof(tag) - 1;
    psdb__put_le32(seed + n, out->driver_id);
    psdb__put_le32(seed + n + 4, out->driver_version);
    n += 8;
    memcpy(seed + n, out->uuid, VK_UUID_SIZE);
    n += VK_UUID_SIZE;
    memcpy(seed + n, out->driver_info, info_len);
    n += info_len;
    uint8_t d[32];
    psdb__sha256(seed, n, d);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | d[i];
    out->abi = 1 + v % (UINT64_MAX - 1);
    out->compiler_version = out->driver_version;
    /* lavapipe's VkPipelineCache stores no code (its LLVM compile happens at first use and
     * lands in Mesa's disk cache only). */
    out->strategy =
        out->driver_id == VK_DRIVER_ID_MESA_LLVMPIPE ? VKID_MESA_DISK_CACHE : VKID_PIPELINE_CACHE;
    /* Testing knob: the VkPipelineCache path exercised on lavapipe (whose cache data is its
     * header alone), or the Mesa path forced. The tool and the layer read it alike. */
    const char *force = getenv("PSDB_VULKAN_STRATEGY");
    if (force && strcmp(force, "pipeline-cache") == 0)
        out->strategy = VKID_PIPELINE_CACHE;
    else if (force && strcmp(force, "mesa-disk-cache") == 0)
        out->strategy = VKID_MESA_DISK_CACHE;
    else if (force && strcmp(force, "pipeline-binary") == 0)
        out->strategy = VKID_PIPELINE_BINARY;
}

void vkid_query(PFN_vkGetPhysicalDeviceProperties props, PFN_vkGetPhysicalDeviceProperties2 props2,
                VkPhysicalDevice phys, vkid *out)
{
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    props(phys, &p);
    /* A 1.0 or 1.1 device may not know the driver-properties structure (core in 1.2). */
    int have_drv = props2 && p.apiVersion >= VK_API_VERSION_1_2;
    if (have_drv) {
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                          .pNext = &drv};
        props2(phys, &p2);
    }
    vkid_from_properties(&p, have_drv ? &drv : NULL, out);
}

int vkid_check_cache_header(const vkid *id, const void *data, size_t size)
{
    const uint8_t *b = data;
    if (!b || size < 32)
        return -1;
    uint32_t len = psdb__le32(b);
    if (len < 32 || psdb__le32(b + 4) != (uint32_t)VK_PIPELINE_CACHE_HEADER_VERSION_ONE)
        return -1;
    if (psdb__le32(b + 8) != id->vendor_id || psdb__le32(b + 12) != id->device_id)
        return -1;
    return memcmp(b + 16, id->uuid, VK_UUID_SIZE) == 0 ? 0 : -1;
}

void vkid_mesa_key(int which, uint8_t out[32])
{
    const char *s = which ? "psdb-vulkan:mesa-foz-idx" : "psdb-vulkan:mesa-foz";
    psdb__sha256(s, strlen(s), out);
}

void vkid_merged_key(uint8_t out[32])
{
    const char *s = "psdb-vulkan:pipeline-cache-all";
    psdb__sha256(s, strlen(s), out);
}

void vkid_strategy_key(uint8_t out[32])
{
    const char *s = "psdb-vulkan:strategy";
    psdb__sha256(s, strlen(s), out);
}

const char *vkid_strategy_name(vkid_strategy s)
{
    return s == VKID_PIPELINE_CACHE    ? "pipeline-cache"
           : s == VKID_MESA_DISK_CACHE ? "mesa-disk-cache"
           : s == VKID_PIPELINE_BINARY ? "pipeline-binary"
                                       : "";
}

void vkid_piece_key(uint8_t kind, const void *name, size_t name_size, uint8_t out[33])
{
    out[0] = kind;
    psdb__sha256(name, name_size, out + 1);
}
