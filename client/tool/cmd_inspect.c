/* cmd_inspect.c - `psdb inspect` (what a PSDB holds) and `psdb verify` (deep integrity check). */
#include "tool.h"

#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/hash.h"

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
    char v[4][24], uuid[37], digest[65];
    const psdb_app_desc *d = &info->identity.desc;
    json_t *root = json_object(), *app = json_object(), *target = json_object();
    int rc = 1, bad = 0;

    if (!root || !app || !target)
        goto cleanup;
    psdb__hex(info->content_digest, 32, digest);
    bad |= json_object_set_new(app, "name", json_str_or_null(d->name));
    bad |= json_object_set_new(app, "exe_filename", json_str_or_null(d->exe_filename));
    bad |= json_object_set_new(app, "version",
                               json_string(psdb__format_version(d->version, v[0], sizeof(v[0]))));
    bad |= json_object_set_new(app, "engine_name", json_str_or_null(d->engine_name));
    bad |= json_object_set_new(
        app, "engine_version",
        json_string(psdb__format_version(d->engine_version, v[1], sizeof(v[1]))));
    bad |= json_object_set_new(
        app, "app_id", json_string(psdb__format_uuid(info->identity.app_id, uuid, sizeof(uuid))));
    bad |= json_object_set_new(target, "family", json_string(info->target.family));
    bad |= json_object_set_new(target, "abi_version", json_u64(info->target.abi_version));
    bad |= json_object_set_new(
        target, "compiler_version",
        json_string(psdb__format_version(info->target.compiler_version, v[2], sizeof(v[2]))));
    bad |= json_object_set_new(
        target, "profile_version",
        json_string(psdb__format_version(info->target.profile_version, v[3], sizeof(v[3]))));
    bad |= json_object_set_new(root, "kind", json_string("psdb"));
    bad |= json_object_set_new(root, "path", json_string(path));
    bad |= json_object_set(root, "app", app);
    bad |= json_object_set(root, "target", target);
    bad |= json_object_set_new(root, "num_values", json_u64(info->num_values));
    bad |= json_object_set_new(root, "num_groups", json_u64(info->num_groups));
    bad |= json_object_set_new(root, "num_blobs", json_u64(info->num_blobs));
    bad |= json_object_set_new(root, "blob_bytes", json_u64(info->blob_bytes));
    bad |= json_object_set_new(root, "content_digest", json_string(digest));
    if (bad || tool_json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER))
        goto cleanup;
    fputc('\n', stdout);
    rc = 0;
cleanup:
    json_decref(app);
    json_decref(target);
    json_decref(root);
    return rc;
}

static void print_text(const char *path, const psdb_file_info *info)
{
    char v1[24], v2[24], v3[24], v4[24], uuid[37], digest[65], e[TOOL_SAFE_SIZE];
    const psdb_app_desc *d = &info->identity.desc;

    psdb__hex(info->content_digest, 32, digest);
    printf("kind:             psdb\n");
    printf("path:             %s\n", tool_safe(path, e, sizeof(e)));
    printf("application:      %s\n", tool_safe(d->name, e, sizeof(e)));
    printf("exe filename:     %s\n",
           d->exe_filename ? tool_safe(d->exe_filename, e, sizeof(e)) : "(none)");
    printf("version:          %s\n", psdb__format_version(d->version, v1, sizeof(v1)));
    printf("engine:           %s %s\n",
           d->engine_name ? tool_safe(d->engine_name, e, sizeof(e)) : "(none)",
           psdb__format_version(d->engine_version, v2, sizeof(v2)));
    printf("app id:           %s\n", psdb__format_uuid(info->identity.app_id, uuid, sizeof(uuid)));
    printf("adapter family:   %s\n", tool_safe(info->target.family, e, sizeof(e)));
    printf("abi version:      %llu\n", (unsigned long long)info->target.abi_version);
    printf("compiler version: %s\n",
           psdb__format_version(info->target.compiler_version, v3, sizeof(v3)));
    printf("profile version:  %s\n",
           psdb__format_version(info->target.profile_version, v4, sizeof(v4)));
    printf("values:           %llu\n", (unsigned long long)info->num_values);
    printf("groups:           %llu\n", (unsigned long long)info->num_groups);
    printf("blobs:            %llu (%llu bytes)\n", (unsigned long long)info->num_blobs,
           (unsigned long long)info->blob_bytes);
    printf("content digest:   %s\n", digest);
}

/* Counts an SODB's entries by kind. */
typedef struct sodb_counts {
    uint64_t compute, graphics, state_objects, vk_compute, vk_graphics, bytes;
} sodb_counts;

static int count_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                       size_t desc_size, void *ctx)
{
    (void)key;
    (void)version;
    (void)desc;
    sodb_counts *c = ctx;
    c->compute += kind == PSDB_SODB_COMPUTE;
    c->graphics += kind == PSDB_SODB_GRAPHICS;
    c->state_objects += kind == PSDB_SODB_STATE_OBJECT;
    c->vk_compute += kind == PSDB_SODB_VK_COMPUTE;
    c->vk_graphics += kind == PSDB_SODB_VK_GRAPHICS;
    c->bytes += desc_size;
    return 0;
}

static int inspect_sodb(const char *path, int json)
{
    psdb_sodb *s = NULL;
    psdb_app_identity id;
    sodb_counts c = {0};
    char ver[32], ever[32], uuid[40];
    char e1[TOOL_SAFE_SIZE], e2[TOOL_SAFE_SIZE];
    int rc = 1;
    psdb_hr hr = psdb_sodb_open(path, &s);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_get_identity(s, &id);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_foreach(s, count_entry, &c);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("inspect", "%s: %s", path, psdb_hr_str(hr));
        goto cleanup;
    }
    psdb__format_version(id.desc.version, ver, sizeof(ver));
    psdb__format_version(id.desc.engine_version, ever, sizeof(ever));
    psdb__format_uuid(id.app_id, uuid, sizeof(uuid));
    if (json) {
        json_t *root = json_pack(
            "{s:s, s:s, s:{s:s?, s:s, s:s, s:s?, s:s, s:s}, s:{s:I, s:I, s:I, s:I, s:I, s:I}}",
            "kind", "sodb", "path", path, "app", "exe_filename", id.desc.exe_filename, "name",
            id.desc.name, "version", ver, "engine_name", id.desc.engine_name, "engine_version",
            ever, "app_id", uuid, "entries", "compute", (json_int_t)c.compute, "graphics",
            (json_int_t)c.graphics, "state_objects", (json_int_t)c.state_objects, "vulkan_compute",
            (json_int_t)c.vk_compute, "vulkan_graphics", (json_int_t)c.vk_graphics,
            "description_bytes", (json_int_t)c.bytes);
        if (!root || tool_json_dumpf(root, stdout, JSON_INDENT(2)) != 0) {
            json_decref(root);
            rc = tool_fail("inspect", "cannot print JSON");
            goto cleanup;
        }
        fputc('\n', stdout);
        json_decref(root);
    } else {
        printf("kind:             sodb\n");
        printf("application:      %s %s (%s)\n", tool_safe(id.desc.name, e1, sizeof(e1)), ver,
               id.desc.exe_filename ? tool_safe(id.desc.exe_filename, e2, sizeof(e2)) : "-");
        printf("engine:           %s %s\n",
               id.desc.engine_name ? tool_safe(id.desc.engine_name, e1, sizeof(e1)) : "-", ever);
        printf("app id:           %s\n", uuid);
        printf("entries:          %llu compute, %llu graphics, %llu state objects\n",
               (unsigned long long)c.compute, (unsigned long long)c.graphics,
               (unsigned long long)c.state_objects);
        if (c.vk_compute || c.vk_graphics)
            printf("vulkan entries:   %llu compute, %llu graphics\n",
                   (unsigned long long)c.vk_compute, (unsigned long long)c.vk_graphics);
        printf("description bytes: %llu\n", (unsigned long long)c.bytes);
    }
    rc = 0;
cleanup:
    psdb_sodb_release(s);
    return rc;
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, rc = 1;
    uint32_t kind = PSDB_FILE_KIND_OTHER;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_hr hr = PSDB_S_OK;

    if (tool_wants_help(argc, argv)) {
        printf("usage: psdb inspect FILE [--json]\n\n"
               "Prints what a PSDB records: application identity, target (adapter family, ABI,\n"
               "compiler and profile versions), value, group and blob counts, blob bytes and the\n"
               "content digest. For an SODB: its application identity and entries by kind.\n");
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

    /* A file that cannot be read falls through to psdb_file_open, which says why. */
    if (psdb_file_kind(path, &kind) == PSDB_S_OK && kind == PSDB_FILE_KIND_SODB)
        return inspect_sodb(path, json);
    hr = psdb_file_open(path, NULL, &f);
    if (hr < 0) {
        rc = tool_fail("inspect", "%s", psdb_error_last());
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
    hr = psdb_file_open_verified(path, msg, sizeof(msg), &f);
    if (hr < 0) {
        rc = tool_fail("verify", "%s: %s", path, msg);
        goto cleanup;
    }
    psdb_file_get_info(f, &info);
    psdb__hex(info.content_digest, 32, digest);
    tool_printf_safe(stdout, "ok: %s (content digest %s)", path, digest);
    fputc('\n', stdout);
    rc = 0;
cleanup:
    psdb_file_release(f);
    return rc;
}
