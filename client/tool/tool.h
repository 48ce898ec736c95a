/* tool.h - the psdb command-line tool: one function per subcommand, shared argument parsing. */
#ifndef PSDB_TOOL_H
#define PSDB_TOOL_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "psdb/psdb.h"

#include "common/parse.h"

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
/* cmd_replay_vulkan.c: `psdb replay --backend vulkan`, and whether argv asks for it. */
int cmd_replay_vulkan(int argc, char **argv);
int tool_backend_is_vulkan(int argc, char **argv);
int cmd_baseset(int argc, char **argv);
int cmd_coverage(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_jobs(int argc, char **argv);

/* Prints a manifest: the server's JSON as served (json), or one line of text. */
void tool_print_manifest(const psdb_manifest *m, int json);

/* Prints "psdb <cmd>: <message>" on stderr (one line). Returns 1 for `return tool_fail(...)`. */
int tool_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A name given on the command line (--app, --family, a target's family, ...) by psdb's one rule
 * for names (psdb__name_check), the rule psdbd, signed statements and the registry apply: 0
 * (NULL: not given, fine), or 1 after "psdb <cmd>: <option> contains U+202E (a Unicode format
 * character)". */
int tool_bad_name(const char *cmd, const char *option, const char *s);

/* Names from files, registries and servers are data, not terminal commands (tool_text.c): C0
 * controls, DEL, C1 controls (U+0080-U+009F), the other code points psdb's rule for names refuses
 * (Unicode format characters such as U+202E, separators other than U+0020) and bytes that are not
 * well-formed UTF-8 are written as \xNN (each byte); the rest of UTF-8 is kept. */
#define TOOL_SAFE_SIZE (4 * 4096 + 4) /* room for a 4096-byte name, every byte escaped */
/* s (NULL: "") escaped into buf; cut with "..." between characters when buf is short. Returns
 * buf, for printf("%s", tool_safe(name, buf, sizeof(buf))). */
const char *tool_safe(const char *s, char *buf, size_t size);
/* Writes s (NULL: "") to f escaped, whatever its length. */
void tool_put_safe(FILE *f, const char *s);
/* Formats like fprintf, then writes the whole text escaped: for one-line messages that quote
 * names (a newline in the format is escaped too). */
void tool_printf_safe(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The rule behind those escapes, for other writers of names (junit.c): the length of the
 * well-formed UTF-8 sequence (RFC 3629) at s with its code point in *cp, 0 when s does not start
 * one; and whether a code point is a control character (C0, DEL, C1). */
size_t tool_utf8_seq(const unsigned char *s, uint32_t *cp);
int tool_is_control(uint32_t c);

/* json_dumpf for every JSON the tool prints: ASCII only (\uXXXX for the rest) and DEL as \u007F,
 * so that no control character reaches a terminal through JSON either. 0, or -1 on failure. */
int tool_json_dumpf(const json_t *doc, FILE *f, size_t flags);

/* Parses a fraction "0.25" (at most 3 decimals) or a percentage "25%" (whole) into per mille,
 * without floating point (so results never vary): 0, or -1 for anything else or above 1.
 * `psdb synth`'s --compute-fraction and --changed. */
int tool_parse_permille(const char *s, uint32_t *permille);

/* True when argv contains -h or --help. */
int tool_wants_help(int argc, char **argv);

/* The options every command that talks to psdbd takes: --server, --token and --ca-file with
 * value v, into cd. 1 when a is one of them (v borrowed), else 0. */
int tool_server_option(const char *a, const char *v, psdb_client_desc *cd);

#endif
