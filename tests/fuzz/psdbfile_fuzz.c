/* psdbfile_fuzz.c - libFuzzer target: any bytes as a PSDB file must open or fail cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psdb/psdb.h"

static char path[64];

static int count_group(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                       void *ctx)
{
    (void)key;
    (void)key_size;
    (void)version;
    (void)num_values;
    return ++*(int *)ctx > 1000;
}

/* Writes the input to a private temporary file, reused for every input of this process. */
static int write_input(const uint8_t *data, size_t size)
{
    FILE *f = NULL;
    if (!path[0]) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/psdbfuzz-%ld.psdb", dir && strlen(dir) < 32 ? dir : "/tmp",
                 (long)getpid());
    }
    f = fopen(path, "wb");
    if (!f)
        return -1;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return -1;
    }
    return fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {"k001", "k002", "key", "g1"};
    psdb_adapter_desc adapter = {.family = "contoso-gfx9",
                                 .abi_min = 1,
                                 .abi_max = 100,
                                 .app_profile_version = PSDB_VERSION(1, 2, 0, 0)};
    psdb_file *f = NULL;
    psdb_file_info info;
    uint8_t buf[512];
    char msg[256];
    int groups = 0;

    if (write_input(data, size) != 0)
        return 0;
    if (psdb_file_open(path, &adapter, &f) >= 0)
        psdb_file_release(f);
    f = NULL;
    if (psdb_file_open(path, NULL, &f) < 0)
        goto cleanup;
    psdb_file_get_info(f, &info);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        for (uint32_t t = 0; t < PSDB_VALUE_TYPE_COUNT; t++) {
            size_t n = 0;
            psdb_file_find_value(f, keys[k], strlen(keys[k]), t, NULL, &n);
            n = sizeof(buf);
            psdb_file_find_value(f, keys[k], strlen(keys[k]), t, buf, &n);
            n = 8;
            psdb_file_find_value(f, keys[k], strlen(keys[k]), t, buf, &n);
        }
    }
    psdb_file_foreach_group(f, count_group, &groups);
    psdb_file_verify(f, msg, sizeof(msg));
cleanup:
    psdb_file_release(f);
    unlink(path);
    return 0;
}
