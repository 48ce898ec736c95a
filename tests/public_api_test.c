/* public_api_test.c - links the shared library as a consumer would: only exported names. */
#include <psdb/psdb.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    if (strcmp(psdb_version(), PSDB_VERSION_STRING) != 0) {
        fprintf(stderr, "version mismatch\n");
        return 1;
    }
    if (strncmp(psdb_hr_str(PSDB_E_CACHE_CORRUPT), "PSDB_E_CACHE_CORRUPT", 20) != 0) {
        fprintf(stderr, "hr_str wrong\n");
        return 1;
    }
    return 0;
}
