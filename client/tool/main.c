/* main.c - psdb: the command-line tool for PSDB files, delivery and registration. */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* cmd_synth_vulkan.c: `psdb synth`, dispatching on --api (d3d12, the default, or vulkan). */
int cmd_synth_api(int argc, char **argv);

static const struct {
    const char *name;
    tool_cmd_fn fn;
    const char *summary;
} commands[] = {
    {"version", cmd_version, "print the library version"},
    {"synth", cmd_synth_api, "write a deterministic synthetic SODB (D3D12 or Vulkan)"},
    {"compile", cmd_compile, "compile an SODB into a PSDB (reference compiler)"},
    {"baseset", cmd_baseset, "package an SODB as base PSOs and derivation records"},
    {"inspect", cmd_inspect, "print what a PSDB records (identity, target, counts, digest)"},
    {"verify", cmd_verify, "check a PSDB deeply (integrity, blob digests, content digest)"},
    {"registry", cmd_registry, "list registered applications, components and PSDBs"},
    {"keygen", cmd_keygen, "create an Ed25519 publisher key pair"},
    {"publish", cmd_publish, "sign a PSDB or an SODB and upload it to psdbd"},
    {"resolve", cmd_resolve, "ask psdbd which PSDB fits one adapter target"},
    {"replay", cmd_replay, "create an SODB's pipelines on a device and report PSDB hits"},
    {"install", cmd_install, "resolve, download, verify and register PSDBs for an application"},
    {"coverage", cmd_coverage, "list what psdbd covers for an application and what is missing"},
    {"worker", cmd_worker, "compile farm worker: claim, compile and publish jobs of psdbd"},
    {"jobs", cmd_jobs, "list the compile farm's jobs and workers"},
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

int tool_bad_name(const char *cmd, const char *option, const char *s)
{
    char why[128];
    if (psdb__name_check(s, why, sizeof(why)) == 0)
        return 0;
    return tool_fail(cmd, "%s %s", option, why);
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

int tool_server_option(const char *a, const char *v, psdb_client_desc *cd)
{
    if (strcmp(a, "--server") == 0)
        cd->server_url = v;
    else if (strcmp(a, "--token") == 0)
        cd->token = v;
    else if (strcmp(a, "--ca-file") == 0)
        cd->ca_file = v;
    else
        return 0;
    return 1;
}

int tool_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}
