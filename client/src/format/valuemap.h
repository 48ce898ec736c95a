/* valuemap.h - the value map format (schema/VALUEMAP.md): what its writers (valuemap_write.h)
 * and its reader (valuemap_read.h) agree on. A value map says where each value of a PSDB lies
 * and what the file's other bytes are, so that a launcher holding the values elsewhere rebuilds
 * the file from a few ranges of it. */
#ifndef PSDB_FORMAT_VALUEMAP_H
#define PSDB_FORMAT_VALUEMAP_H

#include <stdint.h>
#include <string.h>

#include "common/buf.h"

#define PSDB__VMAP_MAGIC "PSDBVMAP"

/* Version 1: every value's SHA-256 and byte ranges, then the deflated skeleton. */
#define PSDB__VMAP_VERSION 1u
#define PSDB__VMAP_HEADER_SIZE 96
#define PSDB__VMAP_VALUE_SIZE 56
#define PSDB__VMAP_RANGE_SIZE 16

/* Version 2: the keys in a table of their own, the file as a recipe of skeleton runs, keys and
 * value parts, three zlib streams. What psdb_client_install reads. */
#define PSDB__VMAP2_VERSION 2u
#define PSDB__VMAP2_HEADER_SIZE 128
#define PSDB__VMAP2_TAG_SKELETON 0u /* arg: run length */
#define PSDB__VMAP2_TAG_KEY 1u      /* arg: 0 the next new key, else an earlier key's id + 1 */
#define PSDB__VMAP2_TAG_VALUE 2u    /* arg: zigzag value index delta; then offset, length */

/* The header fields every version has (magic, version, reserved, file size, file SHA-256: bytes
 * 0 to 55), the rest left as they are. */
static inline void psdb__vmap_put_prefix(uint8_t *head, uint32_t version, uint64_t size,
                                         const uint8_t sha[32])
{
    memcpy(head, PSDB__VMAP_MAGIC, 8);
    psdb__put_le32(head + 8, version);
    psdb__put_le64(head + 16, size);
    memcpy(head + 24, sha, 32);
}

#define PSDB__VMAP_PREFIX_SIZE 56

/* The header fields every version has, from its first PSDB__VMAP_PREFIX_SIZE bytes: 0 with them, or
 * -1 when head does not begin with the magic. The reserved field (bytes 12 to 15) is each reader's
 * to check. */
static inline int psdb__vmap_get_prefix(const uint8_t *head, uint32_t *version, uint32_t *reserved,
                                        uint64_t *size, uint8_t sha[32])
{
    if (memcmp(head, PSDB__VMAP_MAGIC, 8) != 0)
        return -1;
    *version = psdb__le32(head + 8);
    *reserved = psdb__le32(head + 12);
    *size = psdb__le64(head + 16);
    memcpy(sha, head + 24, 32);
    return 0;
}

#endif
