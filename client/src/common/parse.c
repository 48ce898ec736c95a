/* parse.c - numbers, versions, UUIDs and names: one grammar for the library, the tool and the
 * server. */
#include "common/parse.h"

#include <stdio.h>
#include <string.h>

#include "common/hash.h"

/* Decimal digits of s[0..n) into a u64; -1 on a non-digit, no digit, or overflow. */
static int parse_dec(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int psdb__parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s)
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        const char *p = s + 2;
        if (!*p)
            return -1;
        for (; *p; p++) {
            int d = psdb__hexval(*p);
            if (d < 0 || v > UINT64_MAX >> 4)
                return -1;
            v = v << 4 | (uint64_t)d;
        }
    } else if (parse_dec(s, strlen(s), &v) != 0) {
        return -1;
    }
    *out = v;
    return 0;
}

int psdb__parse_version(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || !*s)
        return -1;
    if (!strchr(s, '.'))
        return psdb__parse_u64(s, out);
    for (int i = 0; i < 4; i++) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        uint64_t part = 0;
        if (parse_dec(p, n, &part) != 0 || part > 0xFFFF)
            return -1;
        v |= part << (48 - 16 * i);
        if (!dot) {
            *out = v;
            return 0;
        }
        p = dot + 1;
    }
    return -1; /* a fifth part, or a trailing dot after the fourth */
}

int psdb__parse_uuid(const char *s, uint8_t out[16])
{
    size_t n = 0, len = s ? strlen(s) : 0;
    int dashed = len == 36;
    if (len != 32 && len != 36)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (dashed && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-')
                return -1;
            continue;
        }
        int hi = psdb__hexval(s[i]), lo = i + 1 < len ? psdb__hexval(s[i + 1]) : -1;
        if (hi < 0 || lo < 0 || n >= 16)
            return -1;
        out[n++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    return n == 16 ? 0 : -1;
}

const char *psdb__format_version(uint64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "%u.%u.%u.%u", (unsigned)(v >> 48 & 0xFFFF), (unsigned)(v >> 32 & 0xFFFF),
             (unsigned)(v >> 16 & 0xFFFF), (unsigned)(v & 0xFFFF));
    return buf;
}

const char *psdb__format_uuid(const uint8_t id[16], char *buf, size_t size)
{
    char hex[33];
    psdb__hex(id, 16, hex);
    snprintf(buf, size, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return buf;
}

/* ---- names ------------------------------------------------------------------------------------
 */

size_t psdb__utf8_seq(const unsigned char *s, uint32_t *cp)
{
    size_t n;
    uint32_t c, min;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xE0) == 0xC0)
        n = 2, c = s[0] & 0x1Fu, min = 0x80;
    else if ((s[0] & 0xF0) == 0xE0)
        n = 3, c = s[0] & 0x0Fu, min = 0x800;
    else if ((s[0] & 0xF8) == 0xF0)
        n = 4, c = s[0] & 0x07u, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the NUL */
            return 0;
        c = c << 6 | (s[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return n;
}

struct cp_range {
    uint32_t lo, hi;
};

/* Unicode 15.1, General_Category=Cf (Format), in order. */
static const struct cp_range format_chars[] = {
    {0x00AD, 0x00AD},   {0x0600, 0x0605},   {0x061C, 0x061C},   {0x06DD, 0x06DD},
    {0x070F, 0x070F},   {0x0890, 0x0891},   {0x08E2, 0x08E2},   {0x180E, 0x180E},
    {0x200B, 0x200F},   {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},
    {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
    {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F},
};

/* Unicode 15.1, Zs (less the ASCII space), Zl and Zp, in order. */
static const struct cp_range separator_chars[] = {
    {0x00A0, 0x00A0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

static int in_ranges(uint32_t cp, const struct cp_range *r, size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

psdb__name_fault_kind psdb__name_char_kind(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
        return PSDB__NAME_CONTROL;
    if (cp < 0xA0)
        return PSDB__NAME_OK; /* printable ASCII, the space included */
    if (in_ranges(cp, format_chars, sizeof(format_chars) / sizeof(format_chars[0])))
        return PSDB__NAME_FORMAT;
    if (in_ranges(cp, separator_chars, sizeof(separator_chars) / sizeof(separator_chars[0])))
        return PSDB__NAME_SEPARATOR;
    return PSDB__NAME_OK;
}

psdb__name_fault_kind psdb__name_scan(const char *s, psdb__name_fault *fault)
{
    psdb__name_fault f = {PSDB__NAME_OK, 0, 0};
    const unsigned char *p = (const unsigned char *)s;
    for (size_t off = 0; p && p[off];) {
        uint32_t cp = 0;
        size_t n = psdb__utf8_seq(p + off, &cp);
        psdb__name_fault_kind k = n ? psdb__name_char_kind(cp) : PSDB__NAME_NOT_UTF8;
        if (k != PSDB__NAME_OK) {
            f = (psdb__name_fault){k, n ? cp : p[off], off};
            break;
        }
        off += n;
    }
    if (fault)
        *fault = f;
    return f.kind;
}

const char *psdb__name_fault_text(const psdb__name_fault *fault, char *buf, size_t size)
{
    unsigned long cp = fault->cp;
    switch (fault->kind) {
    case PSDB__NAME_NOT_UTF8:
        snprintf(buf, size, "is not UTF-8 (byte 0x%02lX at offset %zu)", cp, fault->offset);
        break;
    case PSDB__NAME_CONTROL:
        snprintf(buf, size, "contains the control character U+%04lX", cp);
        break;
    case PSDB__NAME_FORMAT:
        snprintf(buf, size, "contains U+%04lX (a Unicode format character)", cp);
        break;
    case PSDB__NAME_SEPARATOR:
        snprintf(buf, size, "contains U+%04lX (a Unicode space or separator other than U+0020)",
                 cp);
        break;
    default:
        snprintf(buf, size, "%s", "");
        break;
    }
    return buf;
}

int psdb__name_check(const char *s, char *why, size_t why_size)
{
    psdb__name_fault f;
    if (psdb__name_scan(s, &f) == PSDB__NAME_OK) {
        if (why && why_size)
            why[0] = '\0';
        return 0;
    }
    if (why && why_size)
        psdb__name_fault_text(&f, why, why_size);
    return -1;
}
