/* desc_fuzz.c - libFuzzer target for the SODB description decoders: any input either fails with
 * PSDB_E_CACHE_CORRUPT or decodes into a description that re-encodes to exactly the same bytes. */
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"

static void check_same(psdb_hr hr, const psdb__buf *b, const uint8_t *data, size_t size)
{
    if (PSDB_FAILED(hr) || b->len != size || memcmp(b->data, data, size) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    psdb_compute_pipeline_desc *c = NULL;
    psdb_graphics_pipeline_desc *g = NULL;
    psdb_state_object_desc *s = NULL;
    psdb__buf b = {0};
    psdb_hr hr;

    hr = psdb__desc_decode_compute(data, size, &c);
    if (hr == PSDB_S_OK) {
        check_same(psdb__desc_encode_compute(c, &b), &b, data, size);
        psdb__buf_free(&b);
    } else if (hr != PSDB_E_CACHE_CORRUPT && hr != PSDB_E_OUTOFMEMORY) {
        abort();
    }
    hr = psdb__desc_decode_graphics(data, size, &g);
    if (hr == PSDB_S_OK) {
        check_same(psdb__desc_encode_graphics(g, &b), &b, data, size);
        psdb__buf_free(&b);
    } else if (hr != PSDB_E_CACHE_CORRUPT && hr != PSDB_E_OUTOFMEMORY) {
        abort();
    }
    hr = psdb__desc_decode_state_object(data, size, &s);
    if (hr == PSDB_S_OK) {
        check_same(psdb__desc_encode_state_object(s, psdb__desc_decoded_collection_key, &b), &b,
                   data, size);
        psdb__buf_free(&b);
    } else if (hr != PSDB_E_CACHE_CORRUPT && hr != PSDB_E_OUTOFMEMORY) {
        abort();
    }
    free(c);
    free(g);
    free(s);
    return 0;
}
