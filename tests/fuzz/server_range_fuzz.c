/* server_range_fuzz.c - libFuzzer target for the Range parsers: the first 8 bytes are the blob
 * size, the rest the header; a satisfiable answer always lies inside the blob, and the ranges of
 * a multi-range answer are 2..max, ascending, disjoint and not touching. */
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t blob = 0, off = 0, len = 0;
    if (size < 8)
        return 0;
    memcpy(&blob, data, 8);
    if (blob & 1) /* half the runs with small sizes, where the edges are */
        blob = (blob >> 1) % 4096;
    char *h = malloc(size - 8 + 1);
    if (!h)
        return 0;
    memcpy(h, data + 8, size - 8);
    h[size - 8] = '\0';
    int rc = psdbd_parse_range(h, blob, &off, &len);
    if (rc < -1 || rc > 1)
        abort();
    if (rc == 1 && (len == 0 || off >= blob || len > blob - off))
        abort();
    psdbd_range rs[8];
    size_t n = psdbd_parse_ranges(h, blob, rs, 8);
    if (n == 1 || n > 8)
        abort();
    for (size_t i = 0; i < n; i++)
        if (rs[i].len == 0 || rs[i].off >= blob || rs[i].len > blob - rs[i].off ||
            (i > 0 && rs[i].off <= rs[i - 1].off + rs[i - 1].len))
            abort();
    free(h);
    return 0;
}
