/* vk_binary.c - a pipeline's binaries (VK_KHR_pipeline_binary): captured at compile, stored as one
 * value, and handed back to the driver at creation (schema/COMPILER.md section 5).
 *
 * DESIGN: a driver with the extension gives each pipeline's compiled code as a few binaries, each a
 * key and opaque data. One pipeline's binaries are its own value, so a changed pipeline changes
 * its value alone (a merged VkPipelineCache changes whenever any pipeline does), and the value is
 * the driver's data with 16 bytes of framing per binary. The bytes are the driver's to check: a
 * creation from binaries of another build fails, and the device's global pipeline key (recorded
 * at compile) is compared before any binary is handed over. */
#include "vulkan/psdb_vulkan.h"

#include <stdlib.h>
#include <string.h>

#define BIN_MAGIC "PSBN"
#define BIN_VERSION 1u
#define BIN_HEADER 12u                   /* magic, version, count */
#define BIN_ENTRY_HEADER (4u + 32u + 8u) /* key size, key, data size */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

int vkbin_fns_load(PFN_vkGetDeviceProcAddr gdpa, VkDevice device, vkbin_fns *out)
{
    out->create = (PFN_vkCreatePipelineBinariesKHR)gdpa(device, "vkCreatePipelineBinariesKHR");
    out->destroy = (PFN_vkDestroyPipelineBinaryKHR)gdpa(device, "vkDestroyPipelineBinaryKHR");
    out->key = (PFN_vkGetPipelineKeyKHR)gdpa(device, "vkGetPipelineKeyKHR");
    out->data = (PFN_vkGetPipelineBinaryDataKHR)gdpa(device, "vkGetPipelineBinaryDataKHR");
    out->release =
        (PFN_vkReleaseCapturedPipelineDataKHR)gdpa(device, "vkReleaseCapturedPipelineDataKHR");
    return out->create && out->destroy && out->key && out->data && out->release ? 0 : -1;
}

int vkbin_supported(PFN_vkEnumerateDeviceExtensionProperties enumerate,
                    PFN_vkGetPhysicalDeviceFeatures2 features2, VkPhysicalDevice phys)
{
    VkExtensionProperties *props = NULL;
    uint32_t n = 0;
    int have = 0, maint5 = 0;
    if (!enumerate || !features2 || enumerate(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0 ||
        !(props = calloc(n, sizeof(*props))) || enumerate(phys, NULL, &n, props) != VK_SUCCESS)
        goto cleanup;
    for (uint32_t i = 0; i < n; i++) {
        have |= strcmp(props[i].extensionName, VK_KHR_PIPELINE_BINARY_EXTENSION_NAME) == 0;
        maint5 |= strcmp(props[i].extensionName, VK_KHR_MAINTENANCE_5_EXTENSION_NAME) == 0;
    }
    if (have && maint5) {
        VkPhysicalDevicePipelineBinaryFeaturesKHR bf = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR};
        VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                        .pNext = &bf};
        features2(phys, &f2);
        have = bf.pipelineBinaries == VK_TRUE;
    } else {
        have = 0;
    }
cleanup:
    free(props);
    return have;
}

VkResult vkbin_global_key(const vkbin_fns *f, VkDevice device, uint8_t key[32], uint32_t *size)
{
    VkPipelineBinaryKeyKHR k = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_KEY_KHR};
    VkResult r = f->key(device, NULL, &k);
    if (r == VK_SUCCESS && k.keySize > VK_MAX_PIPELINE_BINARY_KEY_SIZE_KHR)
        r = VK_ERROR_UNKNOWN;
    if (r == VK_SUCCESS) {
        memset(key, 0, 32);
        memcpy(key, k.key, k.keySize);
        *size = k.keySize;
    }
    return r;
}

VkResult vkbin_capture(const vkbin_fns *f, VkDevice device, VkPipeline pipeline, void **out,
                       size_t *size)
{
    VkPipelineBinaryCreateInfoKHR ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_CREATE_INFO_KHR,
                                        .pipeline = pipeline};
    VkPipelineBinaryHandlesInfoKHR h = {.sType =
                                            VK_STRUCTURE_TYPE_PIPELINE_BINARY_HANDLES_INFO_KHR};
    VkPipelineBinaryKHR handles[VKBIN_MAX];
    uint8_t *blob = NULL, *p;
    size_t total = BIN_HEADER;
    uint32_t made = 0;
    VkResult r;

    *out = NULL;
    *size = 0;
    /* The count first, then the handles. */
    if ((r = f->create(device, &ci, NULL, &h)) != VK_SUCCESS)
        goto cleanup;
    if (h.pipelineBinaryCount == 0 || h.pipelineBinaryCount > VKBIN_MAX) {
        r = VK_ERROR_FEATURE_NOT_PRESENT;
        goto cleanup;
    }
    h.pPipelineBinaries = handles;
    if ((r = f->create(device, &ci, NULL, &h)) != VK_SUCCESS)
        goto cleanup;
    made = h.pipelineBinaryCount;
    size_t sizes[VKBIN_MAX];
    for (uint32_t i = 0; i < made; i++) {
        VkPipelineBinaryDataInfoKHR di = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_DATA_INFO_KHR,
                                          .pipelineBinary = handles[i]};
        VkPipelineBinaryKeyKHR k = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_KEY_KHR};
        sizes[i] = 0;
        if ((r = f->data(device, &di, &k, &sizes[i], NULL)) != VK_SUCCESS)
            goto cleanup;
        if (sizes[i] == 0 || sizes[i] > SIZE_MAX / 2 - total - BIN_ENTRY_HEADER) {
            r = VK_ERROR_OUT_OF_HOST_MEMORY;
            goto cleanup;
        }
        total += BIN_ENTRY_HEADER + sizes[i];
    }
    if (!(blob = malloc(total))) {
        r = VK_ERROR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    memcpy(blob, BIN_MAGIC, 4);
    put32(blob + 4, BIN_VERSION);
    put32(blob + 8, made);
    p = blob + BIN_HEADER;
    for (uint32_t i = 0; i < made; i++) {
        VkPipelineBinaryDataInfoKHR di = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_DATA_INFO_KHR,
                                          .pipelineBinary = handles[i]};
        VkPipelineBinaryKeyKHR k = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_KEY_KHR};
        size_t n = sizes[i];
        if ((r = f->data(device, &di, &k, &n, p + BIN_ENTRY_HEADER)) != VK_SUCCESS)
            goto cleanup;
        if (n != sizes[i] || k.keySize == 0 || k.keySize > VK_MAX_PIPELINE_BINARY_KEY_SIZE_KHR) {
            r = VK_ERROR_UNKNOWN;
            goto cleanup;
        }
        put32(p, k.keySize);
        memset(p + 4, 0, 32);
        memcpy(p + 4, k.key, k.keySize);
        put64(p + 36, n);
        p += BIN_ENTRY_HEADER + n;
    }
    *out = blob;
    *size = total;
    blob = NULL;
cleanup:
    for (uint32_t i = 0; i < made; i++)
        f->destroy(device, handles[i], NULL);
    free(blob);
    return r;
}

int vkbin_check(const void *blob, size_t size)
{
    const uint8_t *b = blob, *p;
    size_t left;
    if (!b || size < BIN_HEADER || memcmp(b, BIN_MAGIC, 4) != 0 || get32(b + 4) != BIN_VERSION)
        return -1;
    uint32_t count = get32(b + 8);
    if (count == 0 || count > VKBIN_MAX)
        return -1;
    p = b + BIN_HEADER;
    left = size - BIN_HEADER;
    for (uint32_t i = 0; i < count; i++) {
        if (left < BIN_ENTRY_HEADER)
            return -1;
        uint32_t ks = get32(p);
        uint64_t n = get64(p + 36);
        if (ks == 0 || ks > VK_MAX_PIPELINE_BINARY_KEY_SIZE_KHR || n == 0 ||
            n > left - BIN_ENTRY_HEADER)
            return -1;
        for (uint32_t j = ks; j < 32; j++)
            if (p[4 + j] != 0)
                return -1;
        p += BIN_ENTRY_HEADER + n;
        left -= BIN_ENTRY_HEADER + (size_t)n;
    }
    return left == 0 ? 0 : -1;
}

VkResult vkbin_create(const vkbin_fns *f, VkDevice device, const void *blob, size_t size,
                      vkbin_set *out)
{
    VkPipelineBinaryKeyKHR keys[VKBIN_MAX];
    VkPipelineBinaryDataKHR data[VKBIN_MAX];
    const uint8_t *p = (const uint8_t *)blob + BIN_HEADER;
    VkResult r;
    memset(out, 0, sizeof(*out));
    if (vkbin_check(blob, size) != 0)
        return VK_ERROR_INITIALIZATION_FAILED;
    uint32_t count = get32((const uint8_t *)blob + 8);
    for (uint32_t i = 0; i < count; i++) {
        keys[i] = (VkPipelineBinaryKeyKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_KEY_KHR,
                                           .keySize = get32(p)};
        memcpy(keys[i].key, p + 4, 32);
        data[i].dataSize = (size_t)get64(p + 36);
        data[i].pData = (void *)(p + BIN_ENTRY_HEADER);
        p += BIN_ENTRY_HEADER + data[i].dataSize;
    }
    VkPipelineBinaryKeysAndDataKHR kd = {
        .binaryCount = count, .pPipelineBinaryKeys = keys, .pPipelineBinaryData = data};
    VkPipelineBinaryCreateInfoKHR ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_CREATE_INFO_KHR,
                                        .pKeysAndDataInfo = &kd};
    VkPipelineBinaryHandlesInfoKHR h = {.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_HANDLES_INFO_KHR,
                                        .pipelineBinaryCount = count,
                                        .pPipelineBinaries = out->handles};
    if ((r = f->create(device, &ci, NULL, &h)) != VK_SUCCESS) {
        /* Some may have been made: none is kept. */
        for (uint32_t i = 0; i < h.pipelineBinaryCount && i < VKBIN_MAX; i++)
            if (out->handles[i])
                f->destroy(device, out->handles[i], NULL);
        memset(out, 0, sizeof(*out));
        return r;
    }
    out->count = h.pipelineBinaryCount;
    out->info = (VkPipelineBinaryInfoKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_BINARY_INFO_KHR,
                                          .binaryCount = out->count,
                                          .pPipelineBinaries = out->handles};
    return VK_SUCCESS;
}

void vkbin_destroy(const vkbin_fns *f, VkDevice device, vkbin_set *s)
{
    for (uint32_t i = 0; i < s->count; i++)
        f->destroy(device, s->handles[i], NULL);
    memset(s, 0, sizeof(*s));
}
