/* psdbfile_pending.c - placeholder PSDB reader entry points until the reader lands; weak, so the
 * real definitions replace them. Removed when the reader is merged. */
#include "psdb/psdb.h"

#define WEAK __attribute__((weak))

WEAK psdb_hr psdb_file_open(const char *path, const psdb_adapter_desc *adapter, psdb_file **out)
{
    (void)path;
    (void)adapter;
    if (out)
        *out = NULL;
    return PSDB_E_NOTIMPL;
}

WEAK void psdb_file_release(psdb_file *f)
{
    (void)f;
}

WEAK psdb_hr psdb_file_find_value(psdb_file *f, const void *key, size_t key_size,
                                  uint32_t value_type, void *value, size_t *value_size)
{
    (void)f;
    (void)key;
    (void)key_size;
    (void)value_type;
    (void)value;
    (void)value_size;
    return PSDB_E_NOTIMPL;
}
