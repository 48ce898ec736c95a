/* compile_sodb.c - psdb_sodb_compile with the error line in a buffer (compile_sodb.h). */
#include "build/compile_sodb.h"

#include <stdio.h>

psdb_hr psdb__compile_sodb(const char *sodb_path, const psdb_target *t, uint64_t ns_per_kib,
                           const char *out_path, psdb__compile_stats *stats, char *err,
                           size_t err_size)
{
    psdb_hr hr = PSDB_E_INVALIDARG;
    if (err && err_size)
        err[0] = '\0';
    if (t) {
        psdb_sodb_compile_desc d = {.target = *t, .compile_ns_per_kib = ns_per_kib};
        hr = psdb_sodb_compile(sodb_path, &d, out_path, stats);
    }
    if (PSDB_FAILED(hr) && err && err_size)
        snprintf(err, err_size, "%s", psdb_error_last());
    return hr;
}
