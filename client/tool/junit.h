/* junit.h - the pieces of a JUnit XML report that do not depend on what is reported: text escaped
 * for XML 1.0, formatted appends, and the report file replaced atomically. */
#ifndef PSDB_TOOL_JUNIT_H
#define PSDB_TOOL_JUNIT_H

#include <stddef.h>

#include "common/buf.h"

/* Appends s (NULL: "") to b as XML 1.0 character data usable in an attribute value or an element:
 * & < > " ' as entities; printable well-formed UTF-8 kept; every byte of a control character (C0
 * including tab and newline, DEL, C1: the tool's rule for names, tool_text.c), of U+FFFE and
 * U+FFFF (not XML characters) and every byte that is not well-formed UTF-8 written as the text
 * \xNN. So any name from an SODB or a path gives a well-formed document, and one that shows what
 * the bytes were. A failed append leaves b->oom set (psdb__buf_status). */
void junit_escape(psdb__buf *b, const char *s);

/* Appends printf-formatted text to b unescaped (for markup and numbers); b->oom on failure. */
void junit_appendf(psdb__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Replaces path with b's bytes atomically: a temporary file in the same directory, written,
 * flushed to disk, given the mode a new file would get (0666 less the umask), then renamed over
 * path, so a reader sees the old report or the whole new one, never a part. 0, or -1 with a
 * one-line reason naming the file and the call in err (the temporary file is removed). */
int junit_write_atomic(const char *path, const psdb__buf *b, char *err, size_t err_size);

#endif
