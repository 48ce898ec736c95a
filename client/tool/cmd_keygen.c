/* cmd_keygen.c - `psdb keygen`: a new Ed25519 publisher key pair (schema/STATEMENT.md). */
#include "tool.h"

#include <string.h>

#include <jansson.h>

int cmd_keygen(int argc, char **argv)
{
    const char *out = NULL;
    int json = 0;
    char id[PSDB_KEY_ID_SIZE];
    psdb_hr hr;
    if (tool_wants_help(argc, argv)) {
        printf("usage: psdb keygen -o KEYFILE [--json]\n\n"
               "Writes a new Ed25519 key pair: KEYFILE (private, PKCS#8 PEM, mode 0600) and\n"
               "KEYFILE.pub (public). Existing files are never overwritten. Prints the key id\n"
               "(hex SHA-256 of the raw public key) that psdbd and launchers know the key by.\n");
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            return tool_fail("keygen", "unexpected argument '%s' (see --help)", argv[i]);
    }
    if (!out)
        return tool_fail("keygen", "-o KEYFILE is required");
    hr = psdb_keygen(out, id);
    if (hr == PSDB_E_ALREADY_EXISTS)
        return tool_fail("keygen", "%s or %s.pub already exists; not overwriting", out, out);
    if (PSDB_FAILED(hr))
        return tool_fail("keygen", "cannot write %s: %s", out, psdb_hr_str(hr));
    if (json) {
        json_t *o = json_pack("{s:s, s:s+, s:s}", "private_key", out, "public_key", out, ".pub",
                              "key_id", id);
        tool_json_dumpf(o, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(o);
    } else {
        char e[TOOL_SAFE_SIZE];
        tool_safe(out, e, sizeof(e));
        printf("key id %s\nprivate key %s\npublic key %s.pub\n", id, e, e);
    }
    return 0;
}
