/* cmd_inspect.c - `psdb inspect` (what a PSDB holds) and `psdb verify` (deep integrity check). */
#include "tool.h"

#include <string.h>

#include <jansson.h>

#include "psdbfile_internal.h"
#include "util.h"

static json_t *json_u64(uint64_t v)
{
    /* JSON integers are signed 64-bit in jansson: larger values go as decimal strings. */
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return json_string(buf);
}

static json_t *json_str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static int print_json(const char *path, const psdb_file_info *info)
{
    char v1[24], v2[24], v3[24], v4[24], uuid[37], digest[65];
    json_t *root = NULL;
    int rc = 1;

    psdb__hex(info->content_digest, 32, digest);
    root = json_pack(
        "{s:s, s:s, s:{s:o, s:o, s:s, s:o, s:s, s:s}, s:{s:s, s:o, s:s, s:s}, s:o, s:o, s:o, "
        "s:o, s:s}",
        "kind", "psdb", "path", path, "app", "name", json_str_or_null(info->identity.desc.name),
        "exe_filename", json_str_or_null(info->identity.desc.exe_filename), "version",
        tool_format_version(info->identity.desc.version, v1, sizeof(v1)), "engine_name",
        json_str_or_null(info->identity.desc.engine_name), "engine_version",
        tool_format_version(info->identity.desc.engine_version, v2, sizeof(v2)), "app_id",
        tool_format_uuid(info->identity.app_id, uuid, sizeof(uuid)), "target", "family",
        info->target.family, "abi_version", json_u64(info->target.abi_version),
        "compiler_version", tool_format_version(info->target.compiler_version, v3, sizeof(v3)),
        "profile_version", tool_format_version(info->target.profile_version, v4, sizeof(v4)),
        "num_values", json_u64(info->num_values), "num_groups", json_u64(info->num_groups),
        "num_blobs", json_u64(info->num_blobs), "blob_bytes", json_u64(info->blob_bytes),
        "content_digest", digest);
    if (!root)
        goto cleanup;
    if (json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII) != 0)
        goto cleanup;
    fputc('\n', stdout);
    rc = 0;
cleanup:
    json_decref(root);
    return rc;
}

static void print_text(const char *path, const psdb_file_info *info)
{
    char v1[24], v2[24], v3[24], v4[24], uuid[37], digest[65];
    const psdb_app_desc *d = &info->identity.desc;

    psdb__hex(info->content_digest, 32, digest);
    printf("kind:             psdb\n");
    printf("path:             %s\n", path);
    printf("application:      %s\n", d->name);
    printf("exe filename:     %s\n", d->exe_filename ? d->exe_filename : "(none)");
    printf("version:          %s\n", tool_format_version(d->version, v1, sizeof(v1)));
    printf("engine:           %s %s\n", d->engine_name ? d->engine_name : "(none)",
           tool_format_version(d->engine_version, v2, sizeof(v2)));
    printf("app id:           %s\n", tool_format_uuid(info->identity.app_id, uuid, sizeof(uuid)));
    printf("adapter family:   %s\n", info->target.family);
    printf("abi version:      %llu\n", (unsigned long long)info->target.abi_version);
    printf("compiler version: %s\n",
           tool_format_version(info->target.compiler_version, v3, sizeof(v3)));
    printf("profile version:  %s\n",
           tool_format_version(info->target.profile_version, v4, sizeof(v4)));
    printf("values:           %llu\n", (unsigned long long)info->num_values);
    printf("groups:           %llu\n", (unsigned long long)info->num_groups);
    printf("blobs:            %llu (%llu bytes)\n", (unsigned long long)info->num_blobs,
           (unsigned long long)info->blob_bytes);
    printf("content digest:   %s\n", digest);
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, rc = 1;
    uint32_t appid = 0;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_hr hr = PSDB_S_OK;
    char msg[256];

    if (tool_wants_help(argc, argv)) {
        printf("usage: psdb inspect FILE [--json]\n\n"
               "Prints what a PSDB records: application identity, target (adapter family, ABI,\n"
               "compiler and profile versions), value, group and blob counts, blob bytes and the\n"
               "content digest. An SODB is recognised and reported as kind \"sodb\".\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return tool_fail("inspect", "unknown option '%s' (try --help)", argv[i]);
        else if (path)
            return tool_fail("inspect", "one FILE only (try --help)");
        else
            path = argv[i];
    }
    if (!path)
        return tool_fail("inspect", "missing FILE (try --help)");

    if (psdb__sqlite_application_id(path, &appid) == 0 && appid == PSDB__SODB_APPLICATION_ID) {
        /* The SODB detail is printed by psdb_sodb_* once that reader is linked in. */
        if (json) {
            json_t *root = json_pack("{s:s, s:s}", "kind", "sodb", "path", path);
            if (root && json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII) == 0)
                fputc('\n', stdout);
            json_decref(root);
        } else {
            printf("kind:             sodb\n");
        }
        return tool_fail("inspect", "SODB files are not supported yet");
    }
    hr = psdb__file_open_msg(path, NULL, &f, msg, sizeof(msg));
    if (hr < 0) {
        rc = tool_fail("inspect", "%s: %s", path, msg);
        goto cleanup;
    }
    psdb_file_get_info(f, &info);
    if (json)
        rc = print_json(path, &info);
    else {
        print_text(path, &info);
        rc = 0;
    }
    if (rc != 0)
        tool_fail("inspect", "cannot print JSON");
cleanup:
    psdb_file_release(f);
    return rc;
}

int cmd_verify(int argc, char **argv)
{
    const char *path = NULL;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_hr hr = PSDB_S_OK;
    char msg[512], digest[65];
    int rc = 1;

    if (tool_wants_help(argc, argv)) {
        printf("usage: psdb verify FILE\n\n"
               "Checks a PSDB deeply: SQLite integrity, every blob's SHA-256, every reference,\n"
               "the header counts and the content digest. Prints one \"ok\" line and exits 0, or\n"
               "prints the first problem found and exits 1.\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return tool_fail("verify", "unknown option '%s' (try --help)", argv[i]);
        if (path)
            return tool_fail("verify", "one FILE only (try --help)");
        path = argv[i];
    }
    if (!path)
        return tool_fail("verify", "missing FILE (try --help)");
    hr = psdb__file_open_msg(path, NULL, &f, msg, sizeof(msg));
    if (hr < 0) {
        rc = tool_fail("verify", "%s: %s", path, msg);
        goto cleanup;
    }
    hr = psdb_file_verify(f, msg, sizeof(msg));
    if (hr < 0) {
        rc = tool_fail("verify", "%s: %s", path, msg);
        goto cleanup;
    }
    psdb_file_get_info(f, &info);
    psdb__hex(info.content_digest, 32, digest);
    printf("ok: %s (content digest %s)\n", path, digest);
    rc = 0;
cleanup:
    psdb_file_release(f);
    return rc;
}
