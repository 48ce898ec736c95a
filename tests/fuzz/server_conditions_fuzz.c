/* server_conditions_fuzz.c - libFuzzer target for the validator headers of blob requests:
 * If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since and If-Range (newline-separated
 * in the input), the entity-tag lists and HTTP-dates. Dates that parse format and parse back to
 * the same time; the evaluation answers only 0, 304 or 412. */
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char sha[] = "0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), *field[5] = {NULL}, buf[64];
    int64_t t = 0, again = 0;
    int use_range = 0;
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *p = s;
    for (int i = 0; i < 5 && p; i++) {
        field[i] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    for (int i = 0; i < 5; i++) {
        if (!field[i])
            continue;
        psdbd_etag_matches(field[i], sha);
        if (psdbd_etag_matches_strong(field[i], sha) && !psdbd_etag_matches(field[i], sha))
            abort(); /* a strong match is a weak match too */
        if (psdbd_parse_http_date(field[i], &t) == 0) {
            psdbd_format_http_date(t, buf, sizeof(buf));
            if (psdbd_parse_http_date(buf, &again) != 0 || again != t)
                abort();
        }
    }
    psdbd_conditions c = {field[0], field[1], field[2], field[3], field[4]};
    unsigned rc = psdbd_blob_preconditions(&c, sha, 1700000000, 1800000000, &use_range);
    if (rc != 0 && rc != 304 && rc != 412)
        abort();
    if (use_range != 0 && use_range != 1)
        abort();
    free(s);
    return 0;
}
