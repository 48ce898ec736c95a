/* server_mkpsdb.c - makes a PSDB of about N MiB of incompressible values, for the psdbd benchmarks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psdb/psdb.h"

int main(int argc, char **argv)
{
    psdb_writer *w = NULL;
    psdb_hr hr;
    uint8_t *buf = NULL;
    uint64_t x = 88172645463325252ull;
    if (argc != 4) {
        fprintf(stderr, "usage: bench_server_mkpsdb OUT.psdb MIB APP_NAME\n");
        return 2;
    }
    long mib = strtol(argv[2], NULL, 10);
    psdb_app_identity id = {.desc = {.exe_filename = "bench.exe",
                                     .name = argv[3],
                                     .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_target t = {.family = "bench-gfx1", .abi_version = 1};
    if (mib <= 0 || !(buf = malloc(1 << 20)))
        return 2;
    if (PSDB_FAILED(hr = psdb_writer_create(argv[1], &id, &t, &w)))
        goto fail;
    for (long i = 0; i < mib; i++) {
        char key[32];
        for (size_t j = 0; j < (1 << 20) / 8; j++) { /* xorshift64: fast, incompressible */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(buf + 8 * j, &x, 8);
        }
        snprintf(key, sizeof(key), "value-%08ld", i);
        if (PSDB_FAILED(hr = psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf,
                                                   1 << 20)))
            goto fail;
    }
    if (PSDB_FAILED(hr = psdb_writer_finish(w)))
        goto fail;
    psdb_writer_release(w);
    free(buf);
    return 0;
fail:
    fprintf(stderr, "bench_server_mkpsdb: %s\n", psdb_hr_str(hr));
    psdb_writer_release(w);
    free(buf);
    return 1;
}
