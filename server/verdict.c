/* verdict.c - psdbd's verdicts and the one mapping of index, libpsdb and errno failures onto
 * outcomes (verdict.h). */
#include "verdict.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "common/status_map.h"

/* A message quotes what a client sent (a path, a header) and is cut at the buffer's end, maybe
 * inside a sequence; it goes into JSON, which carries UTF-8 only: any byte that does not start a
 * well-formed sequence becomes '?'. */
static void utf8_only(char *s)
{
    uint32_t cp;
    while (*s) {
        size_t n = psdb__utf8_seq((const unsigned char *)s, &cp);
        if (n == 0) {
            *s++ = '?';
            continue;
        }
        s += n;
    }
}

int psdbd_verdict_vfail(psdbd_verdict *v, psdbd_outcome o, const char *fmt, va_list ap)
{
    psdbd_verdict_clear(v);
    v->outcome = o;
    vsnprintf(v->message, sizeof(v->message), fmt, ap);
    utf8_only(v->message);
    return -1;
}

int psdbd_verdict_fail(psdbd_verdict *v, psdbd_outcome o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    psdbd_verdict_vfail(v, o, fmt, ap);
    va_end(ap);
    return -1;
}

void psdbd_verdict_done(psdbd_verdict *v, psdbd_outcome o, json_t *body)
{
    psdbd_verdict_clear(v);
    v->outcome = o;
    v->body = body;
}

void psdbd_verdict_clear(psdbd_verdict *v)
{
    json_decref(v->body);
    v->body = NULL;
    v->message[0] = '\0';
}

int psdbd_verdict_index(psdbd_verdict *v, psdbd_rc rc)
{
    if (rc == PSDBD_UNAVAILABLE) /* logged where it was found: the log says what happened */
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_INDEX_UNAVAILABLE,
                                  "the index was removed, replaced or damaged; see the server log");
    if (rc == PSDBD_FULL)
        return psdbd_verdict_fail(v, PSDBD_OUTCOME_DISK_FULL,
                                  "the index cannot be written: no space left on the device");
    return psdbd_verdict_fail(v, PSDBD_OUTCOME_INTERNAL, "the index failed; see the server log");
}

psdbd_outcome psdbd_outcome_of_hr(psdb_hr hr, psdbd_outcome otherwise)
{
    if (hr == PSDB_E_OUTOFMEMORY)
        psdbd_out_of_memory();
    if (hr == PSDB_E_DISK_FULL)
        return PSDBD_OUTCOME_DISK_FULL;
    if (hr == PSDB_E_IO || hr == PSDB_E_ACCESS)
        return PSDBD_OUTCOME_INTERNAL;
    return otherwise;
}

int psdbd_errno_absent(int e)
{
    return psdb__errno_is(e, PSDB__ERRNO_ABSENT);
}

psdbd_outcome psdbd_outcome_of_errno(int e, psdbd_outcome absent)
{
    if (psdbd_errno_absent(e))
        return absent;
    /* A system call's ENOMEM is the kernel's, not an allocation of psdbd's: internal. */
    return psdb__errno_hr(e) == PSDB_E_DISK_FULL ? PSDBD_OUTCOME_DISK_FULL : PSDBD_OUTCOME_INTERNAL;
}
