/* error.h - the thread's last error message (libgit2's git_error_last): every failing path that
 * knows why it failed records one line here; psdb_error_last (psdb/status.h) reads it. */
#ifndef PSDB_COMMON_ERROR_H
#define PSDB_COMMON_ERROR_H

#include <stdarg.h>

#include "psdb/status.h"

/* Sets the calling thread's last error: one lowercase line naming what failed and why. Returns hr
 * so a failing path reads `return psdb__error_set(hr, ...)`. A message longer than the buffer is
 * cut. */
psdb_hr psdb__error_set(psdb_hr hr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
psdb_hr psdb__error_setv(psdb_hr hr, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* Sets the last error to "<what>: <psdb_hr_str(hr)>" unless a more precise message for the same
 * status is already there (set deeper in the call). Returns hr. */
psdb_hr psdb__error_default(psdb_hr hr, const char *what);

/* Sets the last error to msg, a constant string (a literal: it is kept by pointer and formatted
 * only when read, so a hot path such as a lookup miss pays a few stores). Returns hr. */
psdb_hr psdb__error_const(psdb_hr hr, const char *msg);

/* The public boundary's safety net. A public function takes a mark on entry and passes every
 * status it returns through psdb__error_ret: a failure for which nothing was recorded since the
 * mark (no precise message deeper in the call) records "<what>: <psdb_hr_str(hr)>", so no
 * failing public call leaves psdb_error_last empty or about an older call. Returns hr. */
unsigned psdb__error_mark(void);
psdb_hr psdb__error_ret(psdb_hr hr, unsigned mark, const char *what);

/* The message buffer of a public call (char *msg, size_t msg_size), as a view of the one channel:
 * for a failing hr, psdb_error_last()'s line; else `ok` (the call's documented text for success).
 * Cut to msg_size - 1 bytes, always terminated; msg NULL or msg_size 0 writes nothing. Returns hr,
 * so a public function ends `return psdb__error_view(psdb__error_ret(...), msg, msg_size, "ok")`
 * and never writes msg itself. */
psdb_hr psdb__error_view(psdb_hr hr, char *msg, size_t msg_size, const char *ok);

/* Clears the calling thread's last error (public calls begin with it, so the message is about
 * the latest failing call). */
void psdb__error_clear(void);

#endif
