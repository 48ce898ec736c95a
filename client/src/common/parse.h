/* parse.h - the one set of text parsers (numbers, 4x16-bit versions, UUIDs) and their formatters,
 * shared by libpsdb's manifest reader, the psdb tool's options and psdbd's query parameters, so
 * that every part of psdb accepts exactly the same spellings (schema/HTTP.md, "Version
 * spellings"). Every parser reads the whole string: no sign, no whitespace, nothing after. The
 * one rule for names (applications, families, engines, exe filenames, tokens, keys) is here too,
 * so that psdbd, libpsdb and the tool refuse exactly the same names (schema/HTTP.md, "Names"). */
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

/* The well-formed UTF-8 sequence (RFC 3629: shortest form, no surrogates, at most U+10FFFF) that
 * starts at s: its length (1-4) with its code point in *cp, or 0 when s does not start one (a
 * NUL inside a sequence ends it, so a NUL-terminated string is never read past its end). */
size_t psdb__utf8_seq(const unsigned char *s, uint32_t *cp);

/* Why a code point may not stand in a name. */
typedef enum psdb__name_fault_kind {
    PSDB__NAME_OK = 0,
    PSDB__NAME_NOT_UTF8,  /* a byte that does not start a well-formed UTF-8 sequence */
    PSDB__NAME_CONTROL,   /* Cc: C0 U+0000-U+001F, DEL U+007F, C1 U+0080-U+009F */
    PSDB__NAME_FORMAT,    /* Cf: bidirectional overrides and isolates, zero widths, tags, ... */
    PSDB__NAME_SEPARATOR, /* Zl U+2028, Zp U+2029, Zs other than the ASCII space U+0020 */
} psdb__name_fault_kind;

/* The class of a code point for names: PSDB__NAME_OK, or _CONTROL, _FORMAT or _SEPARATOR. The
 * format and separator tables are Unicode 15.1's categories Cf, Zs, Zl and Zp. */
psdb__name_fault_kind psdb__name_char_kind(uint32_t cp);

/* The first fault of a name: its kind, the code point (for NOT_UTF8 the byte) and its byte
 * offset. */
typedef struct psdb__name_fault {
    psdb__name_fault_kind kind;
    uint32_t cp;
    size_t offset;
} psdb__name_fault;

/* Scans a name: PSDB__NAME_OK (s NULL counts as fine: absent is the caller's rule), or the kind
 * of its first fault, described in *fault when fault is not NULL. Names printed to people (a
 * manifest, a dashboard, a launcher's screen, a terminal) must be text that shows as written:
 * a control character rewrites lines, a bidirectional override shows "Demo" U+202E "gnp.exe" as
 * "Demoexe.png", a zero-width or other space makes two names look alike. Lengths are each
 * caller's own rule. Thread-safe. */
psdb__name_fault_kind psdb__name_scan(const char *s, psdb__name_fault *fault);

/* The fault as one lowercase phrase that follows the name's label ("app name " + phrase):
 * "contains the control character U+001B", "contains U+202E (a Unicode format character)",
 * "contains U+00A0 (a Unicode space or separator other than U+0020)", "is not UTF-8 (byte 0xFF
 * at offset 3)"; "" for PSDB__NAME_OK. Returns buf (size >= 80 holds every phrase). */
const char *psdb__name_fault_text(const psdb__name_fault *fault, char *buf, size_t size);

/* psdb__name_scan and psdb__name_fault_text in one: 0 for a good name (or NULL), -1 with the
 * phrase in why (may be NULL) otherwise. */
int psdb__name_check(const char *s, char *why, size_t why_size);

#endif
