/* common.h - psdbd's small shared helpers: allocation that exits on OOM, logging, the settings'
 * size and boolean parsers. Numbers, versions, UUIDs, names (psdb__name_check), hex and SHA-256
 * are libpsdb's shared helpers (client/src/common/), included here for every server file: one
 * grammar, one encoding, one rule for names. */
#ifndef PSDBD_COMMON_H
#define PSDBD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"
#include "common/parse.h"

/* The daemon has one policy for out-of-memory: log "out of memory" and abort. Every allocation
 * failure in psdbd ends here, through the x* functions or directly (an allocation made by a
 * library, such as OpenSSL's or jansson's, that reports failure). */
__attribute__((noreturn)) void psdbd_out_of_memory(void);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
char *xstrdup(const char *s); /* NULL stays NULL */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether s[0..n) is n lowercase hex digits (digests and token parts are written that way). */
int psdbd_is_lower_hex(const char *s, size_t n);

/* One line on stderr: "psdbd: <message>". Safe from any thread (stdio locks the stream). */
void psdbd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses a size with an optional K, M, G or T suffix (powers of 1024); 0 on success. */
int psdbd_parse_size(const char *s, uint64_t *out);
/* Parses true/false/yes/no/on/off/1/0; 0 on success. */
int psdbd_parse_bool(const char *s, int *out);
/* Formats a Unix time as RFC 3339 UTC ("2026-01-02T03:04:05Z"; buf of at least 21 bytes). */
const char *psdbd_format_time(int64_t t, char *buf, size_t size);

/* SQLite integers are signed 64-bit: u64 versions and serials are stored with the top bit
 * flipped so that SQL's signed ordering equals unsigned ordering (schema/INDEX.md). */
static inline int64_t psdbd_u64_to_db(uint64_t v)
{
    return (int64_t)(v ^ 0x8000000000000000ull);
}
static inline uint64_t psdbd_u64_from_db(int64_t v)
{
    return (uint64_t)v ^ 0x8000000000000000ull;
}

/* Monotonic clock in nanoseconds. */
uint64_t psdbd_now_ns(void);

/* True when the scope pattern (fnmatch: '*', '?', '[...]') covers the application name: the
 * rule of tokens' and keys' scopes (auth), and of the jobs a compiler may claim (the index). */
int psdbd_scope_covers(const char *scope, const char *app);

#endif
