/* serialized_pso_fuzz.c - libFuzzer target: any bytes as a serialized graphics PSO must
 * deserialize or be refused cleanly. The input is a container: 12 little-endian u32 lengths
 * (packet, metadata, then GPU instructions and metadata of VS, PS, DS, HS, GS) followed by those
 * parts; a length 0xFFFFFFFF means a NULL pointer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psdb/psdb.h"

static psdb_device *device(void)
{
    static psdb_device *dev;
    if (!dev) {
        psdb_device_desc d = {.adapter = {.vendor_id = 0x1234,
                                          .device_id = 0x42,
                                          .family = "contoso-gfx9",
                                          .abi_min = 1,
                                          .abi_max = 10,
                                          .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                                          .app_profile_version = PSDB_VERSION(3, 1, 0, 0),
                                          .driver_build = 77},
                              .compile_ns_per_kib = UINT64_MAX};
        if (psdb_device_create(&d, &dev) != PSDB_S_OK)
            abort();
    }
    return dev;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const void *ptr[12];
    size_t len[12];
    size_t pos = 48;
    if (size < 48)
        return 0;
    for (int i = 0; i < 12; i++) {
        uint32_t n = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                     (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
        if (n == UINT32_MAX) {
            ptr[i] = NULL;
            len[i] = 0;
            continue;
        }
        if (n > size - pos)
            return 0;
        ptr[i] = data + pos;
        len[i] = n;
        pos += n;
    }
    const char rs[] = "root-sig";
    psdb_deserialize_graphics_pipeline_desc d = {.root_signature = rs,
                                                 .root_signature_size = sizeof(rs) - 1,
                                                 .packet = ptr[0],
                                                 .packet_size = len[0],
                                                 .metadata = ptr[1],
                                                 .metadata_size = len[1],
                                                 .vs = {ptr[2], len[2], ptr[3], len[3]},
                                                 .ps = {ptr[4], len[4], ptr[5], len[5]},
                                                 .ds = {ptr[6], len[6], ptr[7], len[7]},
                                                 .hs = {ptr[8], len[8], ptr[9], len[9]},
                                                 .gs = {ptr[10], len[10], ptr[11], len[11]}};
    psdb_pipeline *p = NULL, *q = NULL;
    if (psdb_device_deserialize_graphics_pipeline(device(), &d, &p) != PSDB_S_OK)
        return 0;
    /* A deserialized PSO works: it derives. */
    psdb_derived_graphics_state_desc x = {.type = PSDB_DERIVED_STATE_SAMPLE_MASK, .sample_mask = 1};
    if (psdb_device_create_derived_graphics_pipeline(device(), p, 1, &x, &q) == PSDB_S_OK)
        psdb_pipeline_release(q);
    psdb_pipeline_release(p);
    return 0;
}
