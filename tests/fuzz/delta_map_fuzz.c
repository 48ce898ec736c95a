/* delta_map_fuzz.c - libFuzzer target for the launcher's reading of a version 2 value map
 * (schema/VALUEMAP.md): everything an update checks before it fetches a byte of the blob (header,
 * value table, recipe, skeleton). The input is the map; the PSDB it must describe is the one its
 * header names, so the header check passes and the fuzzer reaches the sections. A map is refused
 * with a reason or accepted; never a read outside it, a hang or an allocation beyond what its
 * size warrants. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/buf.h"
#include "delivery/delta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    char why[160];
    uint8_t sha[32] = {0};
    uint64_t file_size = 1u << 20;
    if (fd < 0 && (fd = memfd_create("delta_map_fuzz", MFD_CLOEXEC)) < 0)
        abort();
    if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    if (size >= 56) {
        file_size = psdb__le64(data + 16);
        memcpy(sha, data + 24, 32);
    }
    psdb_hr hr = psdb__delta_check_map(fd, size, file_size, sha, why);
    if (hr != PSDB_S_OK && hr != PSDB_E_INTEGRITY && hr != PSDB_E_OUTOFMEMORY)
        abort();
    if (hr == PSDB_E_INTEGRITY && why[0] == '\0')
        abort(); /* every refusal says why */
    return 0;
}
