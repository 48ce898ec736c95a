/* resolve.c - psdb_client_resolve: GET /v1/resolve, the manifest parsed and bound to the request.
 */
#include "delivery/client_int.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "common/buf.h"
#include "common/error.h"

#define RESOLVE_MAX_BYTES (1u << 20) /* a manifest is small; anything larger is garbage */

psdb_hr psdb_client_resolve(psdb_client *c, const psdb_app_desc *app,
                            const psdb_precompile_target *target, psdb_manifest **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    char *url = NULL, *e_app = NULL, *e_family = NULL, profile[48] = "";
    psdb__buf body = {0};
    long status = 0;

    if (out)
        *out = NULL;
    if (!c || !app || !app->name || !target || !out) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_resolve: NULL %s",
                             !c           ? "client"
                             : !app       ? "app"
                             : !app->name ? "app name"
                             : !target    ? "target"
                                          : "out");
        goto cleanup;
    }
    e_app = psdb__url_escape(app->name);
    e_family = psdb__url_escape(target->family);
    if (target->profile_version)
        snprintf(profile, sizeof(profile), "&profile_version=%llu",
                 (unsigned long long)target->profile_version);
    if (!e_app || !e_family ||
        asprintf(&url,
                 "%s/v1/resolve?app=%s&app_version=%llu&family=%s&abi_min=%llu&abi_max=%llu%s",
                 c->server_url, e_app, (unsigned long long)app->version, e_family,
                 (unsigned long long)target->abi_min, (unsigned long long)target->abi_max,
                 profile) < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "resolve: out of memory");
        goto cleanup;
    }
    hr = psdb__transport_get(c, "resolve", url, RESOLVE_MAX_BYTES, &body, &status);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb_manifest_parse((const char *)body.data, body.len, out);
    if (PSDB_FAILED(hr)) {
        char why[256];
        snprintf(why, sizeof(why), "%s", psdb_error_last());
        psdb__error_set(hr, "resolve: the server's answer is not a valid manifest%s%s",
                        strncmp(why, "manifest: ", 10) == 0 ? ": " : "",
                        strncmp(why, "manifest: ", 10) == 0 ? why + 10 : "");
        goto cleanup;
    }
    hr = psdb__client_check_request("resolve", *out, app, NULL, target, NULL);
    if (PSDB_FAILED(hr)) {
        psdb_manifest_free(*out);
        *out = NULL;
    }
cleanup:
    free(e_app);
    free(e_family);
    free(url);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}
