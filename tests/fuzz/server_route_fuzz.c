/* server_route_fuzz.c - libFuzzer target for psdbd's request routing and request-target checks:
 * any path routes to one route with its parameter inside the path, the encoded-NUL check agrees
 * with a plain search, and the input read as a publish's Trailer header names only fields it
 * contains. */
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    const char *tail = NULL;
    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    psdbd_route r = psdbd_route_of(url, &tail);
    if ((unsigned)r >= PSDBD_ROUTE_COUNT)
        abort();
    size_t n = strlen(url);
    if (tail && (tail < url || tail > url + n))
        abort();
    switch (r) {
    case PSDBD_ROUTE_BLOB:
        if (!tail || tail != url + strlen("/v1/blobs/"))
            abort();
        break;
    case PSDBD_ROUTE_PSDB_GET:
        if (!tail || tail != url + strlen("/v1/psdbs/"))
            abort();
        break;
    case PSDBD_ROUTE_STATS:
        if (!tail || tail != url + strlen("/v1/stats/"))
            abort();
        break;
    case PSDBD_ROUTE_DASHBOARD: /* the whole path names the file of the page */
        if (tail != url || (strcmp(url, "/") != 0 && strcmp(url, "/dashboard.js") != 0 &&
                            strcmp(url, "/dashboard.css") != 0))
            abort();
        break;
    case PSDBD_ROUTE_FARM: /* "jobs...", "workers" */
        if (!tail || tail != url + strlen("/v1/") ||
            (strncmp(tail, "jobs", 4) != 0 && strcmp(tail, "workers") != 0))
            abort();
        break;
    case PSDBD_ROUTE_SODBS: /* /v1/sodbs, or /v1/sodbs/<id> with the id as tail */
        if (tail ? tail != url + strlen("/v1/sodbs/") : strcmp(url, "/v1/sodbs") != 0)
            abort();
        break;
    case PSDBD_ROUTE_APP_PSDBS:
        /* the dispatcher takes strlen(tail) - 6 bytes as the name: at least one */
        if (!tail || strlen(tail) < 7 || strcmp(tail + strlen(tail) - 6, "/psdbs") != 0)
            abort();
        break;
    default:
        if (tail)
            abort();
    }
    if (psdbd_uri_has_encoded_nul(url) != (strstr(url, "%00") != NULL))
        abort();
    psdbd_is_signature_b64(url);
    /* The input as a Trailer header value: only the three statement bits, each only when its
     * name is in the text (names compare without case). */
    unsigned names = psdbd_trailer_names(url);
    if (names & ~PSDBD_TRAILER_ALL)
        abort();
    for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++)
        if ((names & (1u << i)) && !strcasestr(url, psdbd_trailer_field(i)))
            abort();
    free(url);
    return 0;
}
