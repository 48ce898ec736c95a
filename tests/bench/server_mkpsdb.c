/* server_mkpsdb.c - makes a PSDB of about N MiB of incompressible values, for the psdbd benchmarks.
 * With CHANGE_EVERY, value i is seeded by i alone, and every CHANGE_EVERY-th (i % CHANGE_EVERY ==
 * 1) by i and the seed 2 instead: two files of the same MIB, one made with CHANGE_EVERY and one
 * with CHANGE_EVERY and a different SEED, share all other values (a patch, for delta updates). */
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
    if (argc != 4 && argc != 6) {
        fprintf(stderr, "usage: bench_server_mkpsdb OUT.psdb MIB APP_NAME [CHANGE_EVERY SEED]\n");
        return 2;
    }
    long mib = strtol(argv[2], NULL, 10);
    long every = argc == 6 ? strtol(argv[4], NULL, 10) : 0,
         seed = argc == 6 ? strtol(argv[5], NULL, 10) : 0;
    if (argc == 6 && (every <= 0 || seed < 0))
        return 2;
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
        if (every) /* each value its own stream, so a changed one leaves the others as they were */
            x = 88172645463325252ull ^ ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull) ^
                (i % every == 1 ? (uint64_t)seed << 40 : 0);
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
