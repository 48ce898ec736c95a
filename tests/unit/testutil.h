/* testutil.h - helpers shared by the Check suites: temporary directories, running the tool. */
#ifndef PSDB_TESTUTIL_H
#define PSDB_TESTUTIL_H

#include <check.h>
#include <stddef.h>

#include "psdb/psdb.h"

/* ck_assert on a status, printing its name when it differs. */
#define ck_assert_hr(got, want)                                                                    \
    do {                                                                                           \
        psdb_hr got_ = (got), want_ = (want);                                                      \
        ck_assert_msg(got_ == want_, "%s: got 0x%08x (%s), want 0x%08x (%s)", #got,                \
                      (unsigned)got_, psdb_hr_str(got_), (unsigned)want_, psdb_hr_str(want_));     \
    } while (0)

/* Creates a fresh temporary directory (removed by tu_rmtree). Returns a malloc'd path. */
char *tu_mkdtemp(void);
/* Removes a directory tree (best effort). */
void tu_rmtree(const char *path);
/* Joins dir and name into a malloc'd path. */
char *tu_path(const char *dir, const char *name);
/* Runs a shell command line; returns its exit status (-1 when it could not run). Output to
 * out_file when non-NULL, else discarded. */
int tu_run(const char *cmdline, const char *out_file);
/* Reads a whole file (malloc'd, NUL-terminated); NULL on error. */
char *tu_read_file(const char *path, size_t *size);
/* Writes bytes to a file; 0 on success. */
int tu_write_file(const char *path, const void *data, size_t size);
/* Whether a file exists within `seconds` (polled every 10 ms): for what a background thread or
 * another process makes. */
int tu_wait_file(const char *path, int seconds);
/* Reads from socket s until the peer closes, an error or its receive timeout (SO_RCVTIMEO), or
 * until out is full; out is NUL-terminated. Returns the bytes read. */
size_t tu_recv_all(int s, char *out, size_t out_size);
/* Runs a suite with CK_NORMAL output; returns the process exit status. */
int tu_run_suite(Suite *s);

#endif
