/* error.c - the thread-local last error message behind psdb_error_last. */
#include "common/error.h"

#include <stdio.h>
#include <string.h>

/* One line per thread: the device may be shared between threads, so a per-handle buffer would be
 * overwritten by another thread's failure; a thread-local one is about this thread's calls only. */
static _Thread_local char last_msg[640];
static _Thread_local psdb_hr last_hr;

psdb_hr psdb__error_setv(psdb_hr hr, const char *fmt, va_list ap)
{
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    last_hr = hr;
    return hr;
}

psdb_hr psdb__error_set(psdb_hr hr, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    psdb__error_setv(hr, fmt, ap);
    va_end(ap);
    return hr;
}

psdb_hr psdb__error_default(psdb_hr hr, const char *what)
{
    if (last_msg[0] && last_hr == hr)
        return hr;
    return psdb__error_set(hr, "%s: %s", what, psdb_hr_str(hr));
}

void psdb__error_clear(void)
{
    last_msg[0] = '\0';
    last_hr = PSDB_S_OK;
}

const char *psdb_error_last(void)
{
    return last_msg;
}
