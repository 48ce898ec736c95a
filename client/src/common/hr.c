/* hr.c - names and meanings of status codes, and the library version. */
#include "psdb/status.h"

#include <stddef.h>

static const struct {
    psdb_hr hr;
    const char *str;
} hr_names[] = {
    {PSDB_S_OK, "PSDB_S_OK: success"},
    {PSDB_S_FALSE, "PSDB_S_FALSE: success, nothing done"},
    {PSDB_E_INVALIDARG, "PSDB_E_INVALIDARG: invalid argument"},
    {PSDB_E_OUTOFMEMORY, "PSDB_E_OUTOFMEMORY: out of memory"},
    {PSDB_E_FAIL, "PSDB_E_FAIL: unspecified failure"},
    {PSDB_E_NOTIMPL, "PSDB_E_NOTIMPL: not implemented"},
    {PSDB_E_ADAPTER_NOT_FOUND, "PSDB_E_ADAPTER_NOT_FOUND: made for another adapter"},
    {PSDB_E_DRIVER_VERSION_MISMATCH, "PSDB_E_DRIVER_VERSION_MISMATCH: driver version mismatch"},
    {PSDB_E_NOT_FOUND, "PSDB_E_NOT_FOUND: not found"},
    {PSDB_E_MORE_DATA, "PSDB_E_MORE_DATA: buffer too small"},
    {PSDB_E_UNSUPPORTED, "PSDB_E_UNSUPPORTED: not supported"},
    {PSDB_E_NOT_CURRENTLY_AVAILABLE, "PSDB_E_NOT_CURRENTLY_AVAILABLE: not currently available"},
    {PSDB_E_CACHE_CORRUPT, "PSDB_E_CACHE_CORRUPT: cache corrupt"},
    {PSDB_E_CACHE_FULL, "PSDB_E_CACHE_FULL: cache full"},
    {PSDB_E_CACHE_HASH_COLLISION, "PSDB_E_CACHE_HASH_COLLISION: cache hash collision"},
    {PSDB_E_ALREADY_EXISTS, "PSDB_E_ALREADY_EXISTS: already exists"},
    {PSDB_E_CANCELLED, "PSDB_E_CANCELLED: cancelled by the caller"},
    {PSDB_E_IO, "PSDB_E_IO: input/output error"},
    {PSDB_E_NETWORK, "PSDB_E_NETWORK: network error"},
    {PSDB_E_SIGNATURE, "PSDB_E_SIGNATURE: bad or untrusted signature"},
    {PSDB_E_ACCESS, "PSDB_E_ACCESS: access denied"},
    {PSDB_E_BUSY, "PSDB_E_BUSY: in use by another process"},
    {PSDB_E_DISK_FULL, "PSDB_E_DISK_FULL: no space left on device"},
    {PSDB_E_DOWNGRADE, "PSDB_E_DOWNGRADE: older than what is installed"},
    {PSDB_E_PROTOCOL, "PSDB_E_PROTOCOL: malformed server answer"},
    {PSDB_E_INTEGRITY, "PSDB_E_INTEGRITY: size or digest mismatch"},
};

const char *psdb_hr_str(psdb_hr hr)
{
    for (size_t i = 0; i < sizeof(hr_names) / sizeof(hr_names[0]); i++)
        if (hr_names[i].hr == hr)
            return hr_names[i].str;
    return "unknown status";
}

const char *psdb_version(void)
{
    return PSDB_VERSION_STRING;
}
