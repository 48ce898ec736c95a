/* pipeline_library_fuzz.c - libFuzzer target: any bytes as a pipeline-library blob must be
 * accepted or refused cleanly, and an accepted blob must serialize back and load by name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psdb/psdb.h"

/* The adapter the corpus (tests/fuzz/corpus/pipeline_library) was written for. */
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
    psdb_device *dev = device();
    psdb_pipeline_library *lib = NULL;
    psdb_hr check = psdb_device_create_pipeline_library(dev, data, size, NULL);
    psdb_hr hr = psdb_device_create_pipeline_library(dev, data, size, &lib);
    /* Validate-only and creation agree (L4). */
    if ((check == PSDB_S_FALSE) != (hr == PSDB_S_OK) || (PSDB_FAILED(hr) && check != hr))
        abort();
    if (PSDB_FAILED(hr))
        return 0;
    size_t n = psdb_pipeline_library_get_serialized_size(lib);
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        abort();
    if (psdb_pipeline_library_serialize(lib, copy, n) != PSDB_S_OK)
        abort();
    /* What a library accepted, it writes back so that it is accepted again. */
    psdb_pipeline_library *again = NULL;
    if (psdb_device_create_pipeline_library(dev, copy, n, &again) != PSDB_S_OK)
        abort();
    const char rs[] = "root-sig", cs[] = "compute shader bytecode #0";
    psdb_compute_pipeline_desc cd = {
        .root_signature = rs, .root_signature_size = sizeof(rs) - 1, .cs = {cs, sizeof(cs) - 1}};
    psdb_pipeline *p = NULL;
    if (psdb_pipeline_library_load_compute_pipeline(again, "c0", &cd, &p) == PSDB_S_OK)
        psdb_pipeline_release(p);
    psdb_pipeline_library_release(again);
    psdb_pipeline_library_release(lib);
    free(copy);
    return 0;
}
