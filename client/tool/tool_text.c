/* tool_text.c - names from files, registries and servers printed as data, never as terminal
 * commands: control characters, Unicode format and separator characters (U+202E, U+200B, U+00A0,
 * ...) and bytes that are not UTF-8 are shown as \xNN.
 *
 * A PSDB's application name, a registry's exe path or a server's family string reach the terminal
 * through every subcommand. Written raw, an ESC sequence in one of them moves the cursor, retitles
 * the window or hides the line before it; an 8-bit CSI (0x9b alone, or U+009B) does the same on
 * terminals that honour C1 controls. Printable UTF-8 stays as it is, so names in any script read
 * as written. */
#include "tool.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* psdb's one UTF-8 decoder (client/src/common/parse.c). */
size_t tool_utf8_seq(const unsigned char *s, uint32_t *cp)
{
    return psdb__utf8_seq(s, cp);
}

/* Whether code point c is a control character a terminal may act on: C0, DEL, C1. */
int tool_is_control(uint32_t c)
{
    return c < 0x20 || (c >= 0x7F && c <= 0x9F);
}

/* Whether a code point is shown escaped: a control character, and every other one that psdb's
 * rule for names refuses (a bidirectional override shows "Demo" U+202E "gnp.exe" as
 * "Demoexe.png"; a zero-width or other space makes two names look alike). Names are refused with
 * them where they enter; this covers what was stored before, or by something else. */
static int shown_escaped(uint32_t cp)
{
    return psdb__name_char_kind(cp) != PSDB__NAME_OK;
}

/* Bytes of s once escaped. */
static size_t escaped_len(const unsigned char *p)
{
    size_t len = 0;
    while (*p) {
        uint32_t cp = 0;
        size_t n = tool_utf8_seq(p, &cp);
        len += n == 0 ? 4 : shown_escaped(cp) ? 4 * n : n;
        p += n ? n : 1;
    }
    return len;
}

const char *tool_safe(const char *s, char *buf, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t o = 0, limit;
    int cut;
    if (!buf || size == 0)
        return "";
    /* A text that does not fit is cut between characters and ends in "..." when there is room. */
    cut = escaped_len(p) + 1 > size;
    limit = cut && size >= 4 ? size - 4 : size - 1;
    while (*p) {
        uint32_t cp = 0;
        size_t n = tool_utf8_seq(p, &cp);
        int escape = n == 0 || shown_escaped(cp);
        size_t bytes = n ? n : 1;
        if (o + (escape ? 4 * bytes : bytes) > limit)
            break;
        for (size_t i = 0; i < bytes; i++, p++) {
            if (escape) {
                buf[o++] = '\\';
                buf[o++] = 'x';
                buf[o++] = hex[*p >> 4];
                buf[o++] = hex[*p & 0xF];
            } else {
                buf[o++] = (char)*p;
            }
        }
    }
    if (cut && size >= 4) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

void tool_put_safe(FILE *f, const char *s)
{
    char buf[1024];
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    /* In pieces that end on a character boundary, so a long text needs no allocation. */
    while (*p) {
        size_t take = 0;
        while (p[take] && take < 200) {
            uint32_t cp;
            size_t n = tool_utf8_seq(p + take, &cp);
            take += n ? n : 1;
        }
        char piece[256];
        memcpy(piece, p, take);
        piece[take] = '\0';
        fputs(tool_safe(piece, buf, sizeof(buf)), f);
        p += take;
    }
}

void tool_printf_safe(FILE *f, const char *fmt, ...)
{
    va_list ap;
    char *line = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) {
        fputs("(out of memory)", f);
        return;
    }
    tool_put_safe(f, line);
    free(line);
}

int tool_json_dumpf(const json_t *doc, FILE *f, size_t flags)
{
    char *text = json_dumps(doc, flags | JSON_ENSURE_ASCII);
    int rc = -1;
    if (!text)
        goto cleanup;
    /* ENSURE_ASCII leaves DEL raw (JSON allows it). It can only stand inside a string, where
     * \u007F means the same character. */
    for (const char *p = text; *p; p++) {
        if (*p == 0x7f)
            fputs("\\u007F", f);
        else
            fputc(*p, f);
    }
    rc = ferror(f) ? -1 : 0;
cleanup:
    free(text);
    return rc;
}
