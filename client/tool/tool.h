/* tool.h - the psdb command-line tool: one function per subcommand, shared argument parsing. */
#ifndef PSDB_TOOL_H
#define PSDB_TOOL_H

#include <stdint.h>
#include <stdio.h>

#include "psdb/psdb.h"

/* Each subcommand: argv[0] is the subcommand name; returns the process exit status. */
typedef int (*tool_cmd_fn)(int argc, char **argv);

int cmd_version(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_registry(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_publish(int argc, char **argv);
int cmd_resolve(int argc, char **argv);
int cmd_install(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_baseset(int argc, char **argv);

/* Prints a manifest: the server's JSON as served (json), or one line of text. */
void tool_print_manifest(const psdb_manifest *m, int json);

/* Prints "psdb <cmd>: <message>" on stderr (one line). Returns 1 for `return tool_fail(...)`. */
int tool_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses decimal or 0x-hex into *out; 0 on success, -1 on junk or overflow. */
int tool_parse_u64(const char *s, uint64_t *out);
/* Parses "a.b.c.d" (each 0-65535; missing parts are 0) or a plain number; 0 on success. */
int tool_parse_version(const char *s, uint64_t *out);
/* Formats a 4x16-bit version as "a.b.c.d" into buf (at least 24 bytes). */
const char *tool_format_version(uint64_t v, char *buf, size_t size);
/* Parses a UUID "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or 32 hex digits); 0 on success. */
int tool_parse_uuid(const char *s, uint8_t out[16]);
/* Formats 16 bytes as a UUID string into buf (at least 37 bytes). */
const char *tool_format_uuid(const uint8_t id[16], char *buf, size_t size);
/* True when argv contains -h or --help. */
int tool_wants_help(int argc, char **argv);

#endif
