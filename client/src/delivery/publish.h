/* publish.h - what psdb publish's upload (publish.c) shares with the test that holds it to
 * psdbd's own checks. Internal to libpsdb. */
#ifndef PSDB_PUBLISH_H
#define PSDB_PUBLISH_H

/* The trailer of psdb publish's first request in the "auto" form (NULL-terminated), one byte
 * whose statement is well formed (a signature of 64 zero bytes): psdbd checks the trailer's form
 * before it finds that the byte is no PSDB, so it answers invalid_psdb exactly when a trailer
 * arrives. */
extern const char *const psdb__publish_probe_trailer[4];

#endif
