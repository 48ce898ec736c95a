/* queue.h - test hooks of the async creation queue (queue.c), for the unit suite only. */
#ifndef PSDB_QUEUE_INTERNAL_H
#define PSDB_QUEUE_INTERNAL_H

#include <stdint.h>

#include "psdb/psdb.h"

/* Blocks until at least n packets (creations, reads and writes) of q have reached their TOP, the
 * count since the queue was created. Lets a test know that a packet has been taken without
 * guessing with a sleep. */
void psdb__queue_wait_top_count(psdb_queue *q, uint64_t n);
/* Number of packets of q that reached their TOP so far. */
uint64_t psdb__queue_top_count(psdb_queue *q);

#endif
