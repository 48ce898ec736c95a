/* parse.h - the one set of text parsers (numbers, 4x16-bit versions, UUIDs) and their formatters,
 * shared by libpsdb's manifest reader, the psdb tool's options and psdbd's query parameters, so
 * that every part of psdb accepts exactly the same spellings (schema/HTTP.md, "Version
 * spellings"). Every parser reads the whole string: no sign, no whitespace, nothing after. */
#ifndef PSDB_COMMON_PARSE_H
#define PSDB_COMMON_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* An unsigned 64-bit number: 1*DIGIT (decimal; leading zeros are decimal, never octal) or
 * "0x"/"0X" 1*HEXDIG. Refuses NULL, the empty string, a sign, whitespace anywhere, any other
 * character and a value of 2^64 or more. 0 and *out set, or -1 and *out untouched. */
int psdb__parse_u64(const char *s, uint64_t *out);

/* A 4x16-bit version (PSDB_VERSION(a, b, c, d)): with a ".", one to four decimal parts of 0..65535
 * (missing parts are zero: "1.2" is 1.2.0.0); without, psdb__parse_u64's number (the whole u64:
 * "7" is 0.0.0.7). Refuses empty parts, a fifth part, parts above 65535 (no wrap-around), hex
 * inside a dotted version, signs and whitespace. 0 and *out set, or -1 and *out untouched. */
int psdb__parse_version(const char *s, uint64_t *out);

/* A UUID: 32 hex digits of either case, in the 8-4-4-4-12 form or without any dash. 0 and out
 * set, or -1 (out may be partly written). */
int psdb__parse_uuid(const char *s, uint8_t out[16]);

/* "a.b.c.d", four decimal parts, no leading zeros: the spelling psdb always writes. size >= 24
 * holds any version. Returns buf. */
const char *psdb__format_version(uint64_t v, char *buf, size_t size);

/* 8-4-4-4-12 lowercase hex. size >= 37 holds it. Returns buf. */
const char *psdb__format_uuid(const uint8_t id[16], char *buf, size_t size);

#endif
