/* server_query_fuzz.c - libFuzzer target for the parsers of query arguments and settings
 * (numbers, versions, sizes, booleans): whatever they accept formats and parses back to the same
 * value. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), text[64];
    uint64_t v = 0, again = 0;
    int b = 0;
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (psdb__parse_u64(s, &v) == 0) {
        snprintf(text, sizeof(text), "%" PRIu64, v);
        if (psdb__parse_u64(text, &again) != 0 || again != v)
            abort();
    }
    if (psdb__parse_version(s, &v) == 0) {
        /* a.b.c.d round-trips; so does any accepted value through its dotted form */
        psdb__format_version(v, text, sizeof(text));
        if (psdb__parse_version(text, &again) != 0 || again != v)
            abort();
    }
    if (psdbd_parse_size(s, &v) == 0) {
        snprintf(text, sizeof(text), "%" PRIu64, v);
        if (psdbd_parse_size(text, &again) != 0 || again != v)
            abort();
    }
    if (psdbd_parse_bool(s, &b) == 0 && b != 0 && b != 1)
        abort();
    free(s);
    return 0;
}
