/* psdb/status.h - status codes (HRESULT-compatible) and library version. */
#ifndef PSDB_STATUS_H
#define PSDB_STATUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define PSDB_API __declspec(dllexport)
#elif defined(__GNUC__)
#define PSDB_API __attribute__((visibility("default")))
#else
#define PSDB_API
#endif

/* Library version (curlver.h style). */
#define PSDB_VERSION_MAJOR 0
#define PSDB_VERSION_MINOR 1
#define PSDB_VERSION_PATCH 0
#define PSDB_VERSION_STRING "0.1.0"

/* A 4x16-bit version number (application, engine, compiler and profile versions),
 * `a` most significant: PSDB_VERSION(1, 2, 3, 4) == 0x0001000200030004. */
#define PSDB_VERSION(a, b, c, d)                                                                   \
    ((((uint64_t)(a)&0xFFFFu) << 48) | (((uint64_t)(b)&0xFFFFu) << 32) |                           \
     (((uint64_t)(c)&0xFFFFu) << 16) | ((uint64_t)(d)&0xFFFFu))

/* Status of every fallible call. HRESULT-compatible: negative is failure. */
typedef int32_t psdb_hr;

#define PSDB_SUCCEEDED(hr) ((psdb_hr)(hr) >= 0)
#define PSDB_FAILED(hr) ((psdb_hr)(hr) < 0)

#define PSDB_S_OK ((psdb_hr)0)
#define PSDB_S_FALSE ((psdb_hr)1)
#define PSDB_E_INVALIDARG ((psdb_hr)0x80070057u)
#define PSDB_E_OUTOFMEMORY ((psdb_hr)0x8007000Eu)
#define PSDB_E_FAIL ((psdb_hr)0x80004005u)
#define PSDB_E_NOTIMPL ((psdb_hr)0x80004001u)
/* D3D12_ERROR_ADAPTER_NOT_FOUND: data made for other hardware (another adapter family). */
#define PSDB_E_ADAPTER_NOT_FOUND ((psdb_hr)0x887E0001u)
/* D3D12_ERROR_DRIVER_VERSION_MISMATCH: ABI, profile or driver build out of range. */
#define PSDB_E_DRIVER_VERSION_MISMATCH ((psdb_hr)0x887E0002u)
#define PSDB_E_NOT_FOUND ((psdb_hr)0x887A0002u)
#define PSDB_E_MORE_DATA ((psdb_hr)0x887A0003u)
#define PSDB_E_UNSUPPORTED ((psdb_hr)0x887A0004u)
#define PSDB_E_NOT_CURRENTLY_AVAILABLE ((psdb_hr)0x887A0022u)
#define PSDB_E_CACHE_CORRUPT ((psdb_hr)0x887A0033u)
#define PSDB_E_CACHE_FULL ((psdb_hr)0x887A0034u)
#define PSDB_E_CACHE_HASH_COLLISION ((psdb_hr)0x887A0035u)
#define PSDB_E_ALREADY_EXISTS ((psdb_hr)0x887A0036u)
/* HRESULT_FROM_WIN32(ERROR_CANCELLED): the caller asked the call to stop (a progress callback). */
#define PSDB_E_CANCELLED ((psdb_hr)0x800704C7u)

/* Project codes: severity 1, customer bit set, facility 0x0DB. */
#define PSDB_E_IO ((psdb_hr)0xA0DB0001u)        /* a file or directory operation failed */
#define PSDB_E_NETWORK ((psdb_hr)0xA0DB0002u)   /* connection, TLS or transfer failure */
#define PSDB_E_SIGNATURE ((psdb_hr)0xA0DB0003u) /* signature missing, malformed or untrusted */
#define PSDB_E_ACCESS ((psdb_hr)0xA0DB0004u)    /* permission denied (file mode, token) */
#define PSDB_E_BUSY ((psdb_hr)0xA0DB0005u)      /* held by another process (installer name) */
#define PSDB_E_DISK_FULL ((psdb_hr)0xA0DB0006u) /* no space left on the destination */
#define PSDB_E_DOWNGRADE ((psdb_hr)0xA0DB0007u) /* refused: lower serial than installed */
#define PSDB_E_PROTOCOL ((psdb_hr)0xA0DB0008u)  /* the server's answer is malformed */
#define PSDB_E_INTEGRITY ((psdb_hr)0xA0DB0009u) /* size, SHA-256 or identity does not match */

/* Name of a status ("PSDB_E_INVALIDARG") followed by a short meaning. Returns a static string,
 * never NULL; unknown codes give "unknown status". Thread-safe. */
PSDB_API const char *psdb_hr_str(psdb_hr hr);

/* One line saying why the calling thread's latest failing psdb call failed, naming what failed and
 * the cause ("registry /x/registry.db: schema version 9 is newer than this psdb knows (2)"); ""
 * when no failure has been recorded. Every public call that returns a failing psdb_hr records it,
 * argument checks included (the cause where one is known, "<function>: NULL out" for a misuse,
 * else "<function>: <status>"); the message buffers some calls fill (psdb_file_verify's msg) are
 * copies of it. A call that succeeds may leave an older message in place, so read it right after
 * a failing status. Borrowed and thread-local:
 * valid until the next psdb call on the same thread; never NULL. Thread-safe (each thread reads
 * its own message), in the manner of libgit2's git_error_last. */
PSDB_API const char *psdb_error_last(void);

/* Runtime library version as PSDB_VERSION_STRING. Static string, never NULL. */
PSDB_API const char *psdb_version(void);

#ifdef __cplusplus
}
#endif
#endif
