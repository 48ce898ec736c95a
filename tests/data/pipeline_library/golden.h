/* golden.h - the golden bad pipeline-library blobs: each is a mutation of a valid blob with the
 * exact status CreatePipelineLibrary must return (MODEL L3, schema/PIPELINE_LIBRARY.md). The unit
 * suite replays them; the fuzz corpus starts from them. Header-only (static functions). */
#ifndef PSDB_PLIB_GOLDEN_H
#define PSDB_PLIB_GOLDEN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline_library.h"

/* Recomputes the body CRC so that a mutation reaches the check after it. */
static void golden_fix_crc(uint8_t *b, size_t size)
{
    psdb__put_le32(b + 68,
                   psdb__crc32(0, b + PSDB__PLIB_HEADER_SIZE, size - PSDB__PLIB_HEADER_SIZE));
}

/* Mutates a copy of a valid blob (at least 2 entries and 1 blob); returns its new size. */
typedef size_t (*golden_fn)(uint8_t *b, size_t size);

static size_t g_short(uint8_t *b, size_t size)
{
    (void)b;
    (void)size;
    return 40;
}
static size_t g_bad_magic(uint8_t *b, size_t size)
{
    b[0] ^= 0x20;
    return size;
}
static size_t g_other_version(uint8_t *b, size_t size)
{
    psdb__put_le32(b + 8, PSDB__PLIB_VERSION + 1);
    return size;
}
static size_t g_truncated(uint8_t *b, size_t size)
{
    (void)b;
    return size - 10; /* the total size field no longer matches */
}
static size_t g_truncated_toc(uint8_t *b, size_t size)
{
    size_t n = PSDB__PLIB_HEADER_SIZE + PSDB__PLIB_ENTRY_SIZE + PSDB__PLIB_ENTRY_SIZE / 2;
    (void)size;
    psdb__put_le64(b + 16, n);
    golden_fix_crc(b, n);
    return n;
}
static size_t g_name_past_end(uint8_t *b, size_t size)
{
    psdb__put_le64(b + PSDB__PLIB_HEADER_SIZE + 8, size + 100);
    golden_fix_crc(b, size);
    return size;
}
static size_t g_blob_past_end(uint8_t *b, size_t size)
{
    size_t ne = psdb__le32(b + 56), nr = psdb__le32(b + 60);
    size_t blobs_at = PSDB__PLIB_HEADER_SIZE + ne * PSDB__PLIB_ENTRY_SIZE + ((nr * 4 + 7) & ~7u);
    psdb__put_le32(b + blobs_at + 40, (uint32_t)size); /* code size reaching past the end */
    golden_fix_crc(b, size);
    return size;
}
static size_t g_wrong_vendor(uint8_t *b, size_t size)
{
    psdb__put_le32(b + 24, psdb__le32(b + 24) + 1);
    return size;
}
static size_t g_wrong_device(uint8_t *b, size_t size)
{
    psdb__put_le32(b + 28, psdb__le32(b + 28) + 1);
    return size;
}
static size_t g_wrong_driver_build(uint8_t *b, size_t size)
{
    psdb__put_le64(b + 32, psdb__le64(b + 32) + 1);
    return size;
}
static size_t g_wrong_abi(uint8_t *b, size_t size)
{
    psdb__put_le64(b + 40, psdb__le64(b + 40) + 1);
    return size;
}
static size_t g_bad_checksum(uint8_t *b, size_t size)
{
    b[size - 1] ^= 1;
    return size;
}
static size_t g_bad_blob_checksum(uint8_t *b, size_t size)
{
    b[size - 1] ^= 1; /* the last blob's metadata; the body CRC is made to agree */
    golden_fix_crc(b, size);
    return size;
}
static size_t g_duplicate_names(uint8_t *b, size_t size)
{
    uint8_t *e0 = b + PSDB__PLIB_HEADER_SIZE, *e1 = e0 + PSDB__PLIB_ENTRY_SIZE;
    memcpy(e1 + 4, e0 + 4, 12); /* entry 1 names entry 0's bytes */
    golden_fix_crc(b, size);
    return size;
}
static size_t g_reserved(uint8_t *b, size_t size)
{
    b[90] = 1;
    return size;
}
static size_t g_unknown_kind(uint8_t *b, size_t size)
{
    psdb__put_le32(b + PSDB__PLIB_HEADER_SIZE, 7);
    golden_fix_crc(b, size);
    return size;
}
/* Two faults at once: the earlier check of L3 decides. */
static size_t g_wrong_vendor_and_checksum(uint8_t *b, size_t size)
{
    g_bad_checksum(b, size);
    return g_wrong_vendor(b, size);
}
static size_t g_wrong_build_and_checksum(uint8_t *b, size_t size)
{
    g_bad_checksum(b, size);
    return g_wrong_driver_build(b, size);
}
static size_t g_wrong_vendor_and_build(uint8_t *b, size_t size)
{
    g_wrong_driver_build(b, size);
    return g_wrong_vendor(b, size);
}

typedef struct golden_case {
    const char *name;
    golden_fn fn;
    psdb_hr want;
} golden_case;

static const golden_case golden_cases[] = {
    {"short", g_short, PSDB_E_INVALIDARG},
    {"bad_magic", g_bad_magic, PSDB_E_INVALIDARG},
    {"other_version", g_other_version, PSDB_E_DRIVER_VERSION_MISMATCH},
    {"truncated", g_truncated, PSDB_E_INVALIDARG},
    {"truncated_toc", g_truncated_toc, PSDB_E_INVALIDARG},
    {"name_past_end", g_name_past_end, PSDB_E_INVALIDARG},
    {"blob_past_end", g_blob_past_end, PSDB_E_INVALIDARG},
    {"wrong_vendor", g_wrong_vendor, PSDB_E_ADAPTER_NOT_FOUND},
    {"wrong_device", g_wrong_device, PSDB_E_ADAPTER_NOT_FOUND},
    {"wrong_driver_build", g_wrong_driver_build, PSDB_E_DRIVER_VERSION_MISMATCH},
    {"wrong_abi", g_wrong_abi, PSDB_E_DRIVER_VERSION_MISMATCH},
    {"bad_checksum", g_bad_checksum, PSDB_E_INVALIDARG},
    {"bad_blob_checksum", g_bad_blob_checksum, PSDB_E_INVALIDARG},
    {"duplicate_names", g_duplicate_names, PSDB_E_INVALIDARG},
    {"reserved", g_reserved, PSDB_E_INVALIDARG},
    {"unknown_kind", g_unknown_kind, PSDB_E_INVALIDARG},
    {"wrong_vendor_and_checksum", g_wrong_vendor_and_checksum, PSDB_E_ADAPTER_NOT_FOUND},
    {"wrong_build_and_checksum", g_wrong_build_and_checksum, PSDB_E_DRIVER_VERSION_MISMATCH},
    {"wrong_vendor_and_build", g_wrong_vendor_and_build, PSDB_E_ADAPTER_NOT_FOUND},
};

#define GOLDEN_COUNT (sizeof(golden_cases) / sizeof(golden_cases[0]))

#endif
