/* main.c - psdb: the command-line tool for PSDB files, delivery and registration. */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    tool_cmd_fn fn;
    const char *summary;
} commands[] = {
    {"version", cmd_version, "print the library version"},
    {"synth", cmd_synth, "write a deterministic synthetic SODB"},
    {"compile", cmd_compile, "compile an SODB into a PSDB (reference compiler)"},
    {"baseset", cmd_baseset, "package an SODB as base PSOs and derivation records"},
    {"inspect", cmd_inspect, "print what a PSDB records (identity, target, counts, digest)"},
    {"verify", cmd_verify, "check a PSDB deeply (integrity, blob digests, content digest)"},
    {"registry", cmd_registry, "list registered applications, components and PSDBs"},
    {"keygen", cmd_keygen, "create an Ed25519 publisher key pair"},
    {"publish", cmd_publish, "sign a PSDB and upload it to psdbd"},
    {"resolve", cmd_resolve, "ask psdbd which PSDB fits one adapter target"},
    {"replay", cmd_replay, "create an SODB's pipelines on a device and report PSDB hits"},
    {"install", cmd_install, "resolve, download, verify and register PSDBs for an application"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: psdb <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'psdb <command> --help' describes one command. psdb %s\n", psdb_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("psdb %s\n", psdb_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    tool_printf_safe(stderr, "psdb: unknown command '%s' (try 'psdb --help')", argv[1]);
    fputc('\n', stderr);
    return 2;
}

int cmd_version(int argc, char **argv)
{
    if (tool_wants_help(argc, argv)) {
        printf("usage: psdb version\n\nPrints the libpsdb version.\n");
        return 0;
    }
    printf("psdb %s\n", psdb_version());
    return 0;
}

int tool_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    char *msg = NULL;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    /* Messages quote names from files and servers: escaped like every other output. */
    fprintf(stderr, "psdb %s: ", cmd);
    if (n < 0)
        fputs("out of memory formatting the message", stderr);
    else
        tool_put_safe(stderr, msg);
    fputc('\n', stderr);
    free(msg);
    return 1;
}

int tool_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || isspace((unsigned char)*s))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v =
        strtoull(s, &end, (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10);
    if (errno || *end)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int tool_parse_version(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    if (!strchr(s, '.'))
        return tool_parse_u64(s, out);
    uint64_t v = 0;
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end = NULL;
        unsigned long part = strtoul(p, &end, 10);
        if (part > 0xFFFF)
            return -1;
        v |= (uint64_t)part << (48 - 16 * i);
        p = end;
        if (*p == '\0')
            break;
        if (*p != '.' || i == 3)
            return -1;
        p++;
    }
    *out = v;
    return 0;
}

const char *tool_format_version(uint64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "%u.%u.%u.%u", (unsigned)(v >> 48 & 0xFFFF), (unsigned)(v >> 32 & 0xFFFF),
             (unsigned)(v >> 16 & 0xFFFF), (unsigned)(v & 0xFFFF));
    return buf;
}

int tool_parse_uuid(const char *s, uint8_t out[16])
{
    int n = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '-')
            continue;
        if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) || n >= 16)
            return -1;
        char hex[3] = {p[0], p[1], 0};
        out[n++] = (uint8_t)strtoul(hex, NULL, 16);
        p++;
    }
    return n == 16 ? 0 : -1;
}

const char *tool_format_uuid(const uint8_t id[16], char *buf, size_t size)
{
    snprintf(buf, size, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
             id[12], id[13], id[14], id[15]);
    return buf;
}

int tool_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}
