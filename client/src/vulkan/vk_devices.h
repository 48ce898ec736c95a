/* vk_devices.h - the step of psdb_client_local_targets that turns device identities into distinct
 * install targets, reachable by the unit tests. */
#ifndef PSDB_VULKAN_VK_DEVICES_H
#define PSDB_VULKAN_VK_DEVICES_H

#include <stdint.h>

#include "psdb/registry.h"
#include "vulkan/psdb_vulkan.h"

/* Appends id's target (family, abi_min = abi_max = abi, compiler_version, profile_version 0) to
 * t[0..n) unless a target of the same identity is there; returns the new count (n or n + 1).
 * t has room for n + 1. */
uint32_t psdb__vk_target_add(psdb_precompile_target *t, uint32_t n, const vkid *id);

#endif
