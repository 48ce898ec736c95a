/* serialized_pso.c - serialized graphics PSOs (MODEL X): placeholder. */
#include "pipeline_library.h"

void psdb__serialized_store_free(struct psdb__serialized_store *st)
{
    (void)st;
}
