/* psdb/psdb.h - libpsdb, the umbrella header: precompiled shader databases (PSDBs), the SODBs
 * they are compiled from, their registration and delivery, and the device side of D3D12 Advanced
 * Shader Delivery.
 *
 * Thread safety
 *   psdb_device, psdb_session, psdb_pipeline, psdb_state_object, psdb_file, psdb_sodb_writer and
 *   psdb_queue may be shared between threads (like an ID3D12Device). psdb_installer,
 *   psdb_explorer, psdb_writer and psdb_sodb are used by one thread at a time. Each function says
 *   where it differs.
 *
 * "MODEL <id>" in these headers cites rule <id> of schema/MODEL.md, the behavioural
 * specification. */
#ifndef PSDB_PSDB_H
#define PSDB_PSDB_H

#include "status.h"
#include "types.h"
#include "file.h"
#include "sodb.h"
#include "registry.h"
#include "device.h"
#include "session.h"
#include "pipeline.h"
#include "pipeline_library.h"
#include "serialized_pso.h"
#include "derived_pso.h"
#include "queue.h"
#include "sign.h"
#include "valuemap.h"
#include "client.h"
#include "farm.h"

#endif
