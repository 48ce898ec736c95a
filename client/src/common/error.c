/* error.c - the thread-local last error message behind psdb_error_last. */
#include "common/error.h"

#include <stdio.h>
#include <string.h>

/* One line per thread: the device may be shared between threads, so a per-handle buffer would be
 * overwritten by another thread's failure; a thread-local one is about this thread's calls only.
 * A failing lookup (a key not in the PSDB) is an ordinary answer on a hot path, so a message made
 * of constant strings is kept as pointers and formatted only when psdb_error_last reads it. */
static _Thread_local char last_msg[640];
static _Thread_local psdb_hr last_hr;
/* Pending constant message: "<lazy_what>" or, with lazy_status, "<lazy_what>: <psdb_hr_str>". */
static _Thread_local const char *lazy_what;
static _Thread_local int lazy_status;
/* Bumped by every message recorded: psdb__error_ret tells whether its call recorded one. */
static _Thread_local unsigned seq;

psdb_hr psdb__error_setv(psdb_hr hr, const char *fmt, va_list ap)
{
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    last_hr = hr;
    lazy_what = NULL;
    seq++;
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

psdb_hr psdb__error_const(psdb_hr hr, const char *msg)
{
    last_hr = hr;
    lazy_what = msg;
    lazy_status = 0;
    seq++;
    return hr;
}

static int have_message(void)
{
    return lazy_what != NULL || last_msg[0] != '\0';
}

psdb_hr psdb__error_default(psdb_hr hr, const char *what)
{
    if (have_message() && last_hr == hr)
        return hr;
    return psdb__error_set(hr, "%s: %s", what, psdb_hr_str(hr));
}

unsigned psdb__error_mark(void)
{
    return seq;
}

psdb_hr psdb__error_ret(psdb_hr hr, unsigned mark, const char *what)
{
    if (PSDB_FAILED(hr) && seq == mark) {
        last_hr = hr;
        lazy_what = what;
        lazy_status = 1;
        seq++;
    }
    return hr;
}

void psdb__error_clear(void)
{
    last_msg[0] = '\0';
    last_hr = PSDB_S_OK;
    lazy_what = NULL;
}

const char *psdb_error_last(void)
{
    if (lazy_what) {
        if (lazy_status)
            snprintf(last_msg, sizeof(last_msg), "%s: %s", lazy_what, psdb_hr_str(last_hr));
        else
            snprintf(last_msg, sizeof(last_msg), "%s", lazy_what);
        lazy_what = NULL;
    }
    return last_msg;
}

psdb_hr psdb__error_view(psdb_hr hr, char *msg, size_t msg_size, const char *ok)
{
    if (msg && msg_size)
        snprintf(msg, msg_size, "%s", PSDB_FAILED(hr) ? psdb_error_last() : ok);
    return hr;
}
