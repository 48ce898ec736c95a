/* manifest_fuzz.c - libFuzzer target for what the client does with a server's manifest (the answer
 * of GET /v1/resolve that psdb_client_resolve hands to psdb_manifest_parse, then the signature
 * check psdb_client_download makes before it fetches a byte). These must hold or the target aborts:
 * - psdb_manifest_parse answers S_OK, PSDB_E_PROTOCOL or PSDB_E_OUTOFMEMORY, and on failure
 *   leaves *out NULL;
 * - a parsed manifest has every required string, and its compact JSON (m->json) parses again to
 *   the same fields;
 * - psdb_client_verify_manifest with one trusted key (the fixed fuzz key) answers S_OK or
 *   PSDB_E_SIGNATURE, and S_OK only when the manifest names that key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_key.h"
#include "psdb/client.h"
#include "psdb/sign.h"

static psdb_client *client;
static char trusted_id[PSDB_KEY_ID_SIZE];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The client reads its trusted keys from files: the fixed public key goes through a temporary
 * file that is removed once the client has loaded it. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[] = "/tmp/psdb_manifest_fuzz_XXXXXX";
    const char *keys[1] = {path};
    psdb_key *key = NULL;
    int fd = mkstemp(path);
    (void)argc;
    (void)argv;
    if (fd < 0 ||
        write(fd, psdb_fuzz_public_pem, sizeof(psdb_fuzz_public_pem) - 1) !=
            (ssize_t)(sizeof(psdb_fuzz_public_pem) - 1) ||
        close(fd) != 0)
        abort();
    psdb_client_desc desc = {
        .server_url = "http://127.0.0.1:9", .trusted_keys = keys, .num_trusted_keys = 1};
    if (PSDB_FAILED(psdb_client_create(&desc, &client)) ||
        PSDB_FAILED(
            psdb_key_from_pem(psdb_fuzz_public_pem, sizeof(psdb_fuzz_public_pem) - 1, &key)) ||
        PSDB_FAILED(psdb_key_id(key, trusted_id)))
        abort();
    psdb_key_release(key);
    unlink(path);
    return 0;
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int same_manifest(const psdb_manifest *a, const psdb_manifest *b)
{
    const psdb_app_desc *x = &a->app.desc, *y = &b->app.desc;
    return same_str(a->id, b->id) && memcmp(a->sha256, b->sha256, 32) == 0 && a->size == b->size &&
           same_str(a->url, b->url) && same_str(x->exe_filename, y->exe_filename) &&
           same_str(x->name, y->name) && x->version == y->version &&
           same_str(x->engine_name, y->engine_name) && x->engine_version == y->engine_version &&
           memcmp(a->app.app_id, b->app.app_id, 16) == 0 &&
           same_str(a->target.family, b->target.family) &&
           a->target.abi_version == b->target.abi_version &&
           a->target.compiler_version == b->target.compiler_version &&
           a->target.profile_version == b->target.profile_version && a->serial == b->serial &&
           same_str(a->created_at, b->created_at) && same_str(a->key_id, b->key_id) &&
           same_str(a->signature, b->signature) && same_str(a->json, b->json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static psdb_manifest poison;
    psdb_manifest *m = &poison; /* parse must overwrite it, also when it fails */
    psdb_manifest *again = NULL;
    psdb_hr hr = psdb_manifest_parse(data ? (const char *)data : "", size, &m);

    if (hr != PSDB_S_OK) {
        if ((hr != PSDB_E_PROTOCOL && hr != PSDB_E_OUTOFMEMORY) || m != NULL)
            abort();
        goto cleanup;
    }
    if (!m || !m->id || !m->url || !m->app.desc.name || !m->target.family || !m->key_id ||
        !m->signature || !m->json)
        abort();
    hr = psdb_manifest_parse(m->json, strlen(m->json), &again);
    if (hr == PSDB_E_OUTOFMEMORY)
        goto cleanup;
    if (hr != PSDB_S_OK || !same_manifest(m, again))
        abort();
    hr = psdb_client_verify_manifest(client, m);
    if ((hr != PSDB_S_OK && hr != PSDB_E_SIGNATURE) ||
        (hr == PSDB_S_OK && strcmp(m->key_id, trusted_id) != 0))
        abort();
cleanup:
    if (m != &poison)
        psdb_manifest_free(m);
    psdb_manifest_free(again);
    return 0;
}
