/* vk_binary_decl.h - VK_KHR_pipeline_binary and the VK_KHR_maintenance5 pieces it needs, declared
 * for Vulkan headers older than 1.3.294 (Debian 12 ships 1.3.239), with the registry's values.
 * Newer headers declare them: then this file adds nothing. */
#ifndef PSDB_VULKAN_VK_BINARY_DECL_H
#define PSDB_VULKAN_VK_BINARY_DECL_H

#include <vulkan/vulkan.h>

#ifdef VK_KHR_pipeline_binary
#define PSDB_VK_PIPELINE_CREATE_2_CAPTURE_DATA VK_PIPELINE_CREATE_2_CAPTURE_DATA_BIT_KHR
#else
#define VK_KHR_pipeline_binary 1
/* The flag that asks a creation to keep its binaries for vkCreatePipelineBinariesKHR. */
#define PSDB_VK_PIPELINE_CREATE_2_CAPTURE_DATA ((VkFlags64)0x80000000ULL)
VK_DEFINE_NON_DISPATCHABLE_HANDLE(VkPipelineBinaryKHR)
#define VK_MAX_PIPELINE_BINARY_KEY_SIZE_KHR 32U
#define VK_KHR_PIPELINE_BINARY_EXTENSION_NAME "VK_KHR_pipeline_binary"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR ((VkStructureType)1000483000)
#define VK_STRUCTURE_TYPE_PIPELINE_BINARY_CREATE_INFO_KHR ((VkStructureType)1000483001)
#define VK_STRUCTURE_TYPE_PIPELINE_BINARY_INFO_KHR ((VkStructureType)1000483002)
#define VK_STRUCTURE_TYPE_PIPELINE_BINARY_KEY_KHR ((VkStructureType)1000483003)
#define VK_STRUCTURE_TYPE_RELEASE_CAPTURED_PIPELINE_DATA_INFO_KHR ((VkStructureType)1000483005)
#define VK_STRUCTURE_TYPE_PIPELINE_BINARY_DATA_INFO_KHR ((VkStructureType)1000483006)
#define VK_STRUCTURE_TYPE_PIPELINE_CREATE_INFO_KHR ((VkStructureType)1000483007)
#define VK_STRUCTURE_TYPE_PIPELINE_BINARY_HANDLES_INFO_KHR ((VkStructureType)1000483009)
#define VK_PIPELINE_BINARY_MISSING_KHR ((VkResult)1000483000)

typedef struct VkPhysicalDevicePipelineBinaryFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 pipelineBinaries;
} VkPhysicalDevicePipelineBinaryFeaturesKHR;

typedef struct VkPipelineBinaryKeyKHR {
    VkStructureType sType;
    void *pNext;
    uint32_t keySize;
    uint8_t key[VK_MAX_PIPELINE_BINARY_KEY_SIZE_KHR];
} VkPipelineBinaryKeyKHR;

typedef struct VkPipelineBinaryDataKHR {
    size_t dataSize;
    void *pData;
} VkPipelineBinaryDataKHR;

typedef struct VkPipelineBinaryKeysAndDataKHR {
    uint32_t binaryCount;
    const VkPipelineBinaryKeyKHR *pPipelineBinaryKeys;
    const VkPipelineBinaryDataKHR *pPipelineBinaryData;
} VkPipelineBinaryKeysAndDataKHR;

typedef struct VkPipelineCreateInfoKHR {
    VkStructureType sType;
    void *pNext;
} VkPipelineCreateInfoKHR;

typedef struct VkPipelineBinaryCreateInfoKHR {
    VkStructureType sType;
    const void *pNext;
    const VkPipelineBinaryKeysAndDataKHR *pKeysAndDataInfo;
    VkPipeline pipeline;
    const VkPipelineCreateInfoKHR *pPipelineCreateInfo;
} VkPipelineBinaryCreateInfoKHR;

typedef struct VkPipelineBinaryInfoKHR {
    VkStructureType sType;
    const void *pNext;
    uint32_t binaryCount;
    const VkPipelineBinaryKHR *pPipelineBinaries;
} VkPipelineBinaryInfoKHR;

typedef struct VkReleaseCapturedPipelineDataInfoKHR {
    VkStructureType sType;
    void *pNext;
    VkPipeline pipeline;
} VkReleaseCapturedPipelineDataInfoKHR;

typedef struct VkPipelineBinaryDataInfoKHR {
    VkStructureType sType;
    void *pNext;
    VkPipelineBinaryKHR pipelineBinary;
} VkPipelineBinaryDataInfoKHR;

typedef struct VkPipelineBinaryHandlesInfoKHR {
    VkStructureType sType;
    const void *pNext;
    uint32_t pipelineBinaryCount;
    VkPipelineBinaryKHR *pPipelineBinaries;
} VkPipelineBinaryHandlesInfoKHR;

typedef VkResult(VKAPI_PTR *PFN_vkCreatePipelineBinariesKHR)(
    VkDevice device, const VkPipelineBinaryCreateInfoKHR *pCreateInfo,
    const VkAllocationCallbacks *pAllocator, VkPipelineBinaryHandlesInfoKHR *pBinaries);
typedef void(VKAPI_PTR *PFN_vkDestroyPipelineBinaryKHR)(VkDevice device,
                                                        VkPipelineBinaryKHR pipelineBinary,
                                                        const VkAllocationCallbacks *pAllocator);
typedef VkResult(VKAPI_PTR *PFN_vkGetPipelineKeyKHR)(
    VkDevice device, const VkPipelineCreateInfoKHR *pPipelineCreateInfo,
    VkPipelineBinaryKeyKHR *pPipelineKey);
typedef VkResult(VKAPI_PTR *PFN_vkGetPipelineBinaryDataKHR)(
    VkDevice device, const VkPipelineBinaryDataInfoKHR *pInfo,
    VkPipelineBinaryKeyKHR *pPipelineBinaryKey, size_t *pPipelineBinaryDataSize,
    void *pPipelineBinaryData);
typedef VkResult(VKAPI_PTR *PFN_vkReleaseCapturedPipelineDataKHR)(
    VkDevice device, const VkReleaseCapturedPipelineDataInfoKHR *pInfo,
    const VkAllocationCallbacks *pAllocator);
#endif /* VK_KHR_pipeline_binary */

#ifndef VK_KHR_maintenance5
#define VK_KHR_maintenance5 1
#define VK_KHR_MAINTENANCE_5_EXTENSION_NAME "VK_KHR_maintenance5"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_5_FEATURES_KHR ((VkStructureType)1000470000)
#define VK_STRUCTURE_TYPE_PIPELINE_CREATE_FLAGS_2_CREATE_INFO_KHR ((VkStructureType)1000470005)
typedef VkFlags64 VkPipelineCreateFlags2KHR;

typedef struct VkPhysicalDeviceMaintenance5FeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 maintenance5;
} VkPhysicalDeviceMaintenance5FeaturesKHR;

typedef struct VkPipelineCreateFlags2CreateInfoKHR {
    VkStructureType sType;
    const void *pNext;
    VkPipelineCreateFlags2KHR flags;
} VkPipelineCreateFlags2CreateInfoKHR;
#endif /* VK_KHR_maintenance5 */

#endif
