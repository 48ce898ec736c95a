/* vk_none.c - the Vulkan component of a build without the Vulkan headers or loader
 * (PSDB_VULKAN=OFF, or libvulkan-dev missing): compile and replay answer that they are not built,
 * so the psdb tool builds everywhere and says so in one line. */
#include "vulkan/psdb_vulkan.h"

#include <string.h>

static psdb_hr no_backend(char *err, size_t err_size)
{
    snprintf(err, err_size, "this psdb was built without the vulkan backend (PSDB_VULKAN=OFF)");
    return PSDB_E_NOTIMPL;
}

psdb_hr vkbe_compile(const char *sodb_path, const char *base_path, uint32_t device_index,
                     const char *out_path, FILE *progress, vkbe_compile_stats *stats, char *err,
                     size_t err_size)
{
    (void)sodb_path, (void)base_path, (void)device_index, (void)out_path, (void)progress,
        (void)stats;
    return no_backend(err, err_size);
}

psdb_hr vkbe_device_target(uint32_t device_index, psdb_precompile_target *out, char *err,
                           size_t err_size)
{
    (void)device_index, (void)out;
    return no_backend(err, err_size);
}

psdb_hr vkbe_replay(const vkbe_replay_desc *desc, vkbe_replay_result *out, char *err,
                    size_t err_size)
{
    (void)desc;
    if (out)
        memset(out, 0, sizeof(*out));
    return no_backend(err, err_size);
}

void vkbe_replay_result_free(vkbe_replay_result *r)
{
    (void)r;
}
